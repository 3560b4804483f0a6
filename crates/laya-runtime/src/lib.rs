//! Laya's inference engine: loads a `.laya` model (docs/format.md) by memory map, validates
//! all of it, and ranks candidate words for the text before the cursor in microseconds,
//! with zero heap allocations per prediction.
//!
//! * [`Model`]: the immutable, validated model; share it between threads with `Arc`.
//! * [`Session`]: one thread's scratch buffers; `predict` returns borrowed [`Candidate`]s.
//! * [`Engine`] / [`EngineSession`]: hot model update, a new file becomes current only after
//!   full validation; [`install`] puts a model file in place atomically (docs/embedding.md).
//!
//! ```no_run
//! let model = laya_runtime::Model::load("model.laya")?;
//! let mut session = laya_runtime::Session::new(model);
//! session.warm_up();
//! let top = session.predict("今天天气", 5);
//! for c in top.iter() {
//!     println!("{}\treplace={}\tp={:.3}", c.word, c.replace, c.p);
//! }
//! # Ok::<(), laya_runtime::LoadError>(())
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod classes;
mod display;
mod engine;
mod error;
mod forward;
mod install;
mod learn;
mod lexicon;
mod model;
mod ngram;
mod personal;
mod prepared;
mod rank;
mod scratch;
mod session;
mod settings;
mod stages;
mod storage;
mod unigram;
mod user;

pub use engine::{Engine, EngineSession, SwapReport};
pub use error::LoadError;
pub use install::{install, install_with, InstallError, InstallPoint};
pub use laya_kernels::{Int8Isa, Kernels, Level};
pub use model::{Config, LoadTime, Model, ModelInfo};
pub use ngram::{DEFAULT_NGRAM_WEIGHT, NGRAM_DEPTH};
pub use session::{
    ActPrecision, Candidate, CompletionRule, Predictions, Session, COMPLETION_EXPONENT_RANGE, COMPLETION_PRIOR_RANGE,
    DEFAULT_COMPLETION_PRIOR, DEFAULT_MAX_K, MAX_INCREMENTAL_CHARS,
};
pub use stages::{Stage, StageTimes};
pub use user::{
    mix_candidates, MixParams, Opened, SetAside, User, UserFileError, UserModel, DEFAULT_CAPACITY, DEFAULT_HALF_LIFE, DEFAULT_MIX,
    FOLLOWERS, MAX_BLOCKED_BYTES, MAX_WORD_CHARS, USER_FILE_VERSION,
};
