//! Reader, writer and validator of the Laya model file: GGUF version 3 with the `laya.*` keys
//! and tensor table of `docs/format.md`.
//!
//! * [`GgufFile`] / [`GgufWriter`]: the generic container (any keys, any supported tensors).
//! * [`LayaFile`]: a fully validated model borrowing the (memory-mapped) bytes; [`write_model`]
//!   produces one.
//! * [`quant`]: scalar reference encode/decode of F32, F16, BF16, Q8_0, Q4_0, Q4_1.
//! * [`quantize`]: turn a float model into a quantised one ([`quantize::quantize_model`]), with
//!   the embedding's error-compensation bias.
//! * [`testing`]: deterministic random models for tests.
//!
//! The crate never memory-maps and has no `unsafe`: it is handed `&[u8]`, and tensor data comes
//! back as byte slices whose file offsets are multiples of `general.alignment`.
//!
//! ```
//! use laya_format::{testing, write_model, GgmlType, LayaFile};
//! let (meta, tensors) = testing::random_model(&testing::TinyConfig::small(), 42, GgmlType::Q8_0);
//! let bytes = write_model(&meta, &tensors)?;
//! let model = LayaFile::parse(&bytes)?;
//! assert_eq!(model.meta.words, meta.words);
//! let row = model.meta.hparams.mapping.row('中' as u32, model.meta.hparams.embedding_rows);
//! assert!(row < model.meta.hparams.embedding_rows);
//! # Ok::<(), laya_format::FormatError>(())
//! ```

#![forbid(unsafe_code)]

pub mod case;
pub mod checksum;
pub mod classes;
pub mod error;
pub mod gguf;
pub mod memory;
pub mod ngram;
pub mod punct;
pub mod quant;
pub mod quantize;
pub mod recase;
pub mod rng;
pub mod save;
pub mod schema;
pub mod strings;
pub mod testing;
pub mod types;
pub mod validate;
pub mod writer;

pub use case::{display_case, fold_case, fold_char, fold_into, ignores_case, starts_sentence};
pub use checksum::{checksum, checksum_report, ChecksumReport};
pub use classes::{assign_word_classes, assign_word_classes_own, class_members};
pub use error::FormatError;
pub use gguf::{Array, GgufFile, TensorInfo, Value, ValueType};
pub use punct::{cjk_punctuation, is_punctuation_word};
pub use save::write_file_atomically;
pub use schema::{
    keys, normalize, separates_words, Activation, HParams, LayaFile, LayerTensors, Mapping, ModelMeta, NormRule, PositionScheme,
    Provenance, TensorRef, COMP_GROUP_ROWS, FORMAT_VERSION, LAYA_ALIGNMENT, MEMORY_EMBD, OUTPUT_CLASS_B, OUTPUT_CLASS_W, TOKEN_EMBD_COMP,
};
pub use strings::Strings;
pub use types::{GgmlType, TypeTraits, QK, TYPES};
pub use validate::{check_lexicon, check_word_class, checked_lexicon_order, lexicon_order};
/// The README's examples run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub use writer::{model_keys, patch_checksum, sort_lexicon, write_model, GgufWriter, TensorData};
