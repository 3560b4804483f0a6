//! Training for the Laya typing-prediction transformer (docs/format.md §3) with candle, on the
//! CPU or (feature `cuda`) an NVIDIA GPU.
//!
//! The pieces: [`LayaNet`] (the network), [`encode_context`] (context → rows, identical to the
//! runtime), batching of click events into soft targets, a fused AdamW with row-sparse
//! embedding updates, the training loop with validation, checkpoints and resume, and export
//! to the `.laya` file.

mod checkpoint;
mod codec;
mod config;
#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "cuda")]
pub use cuda::{NcclId, NcclRank};
mod error;
mod model;
mod ops;
mod optim;
mod parallel;
mod pipeline;
mod rng;

/// The device a run trains on (`RunOptions::device`, [`parse_device`]).
pub use candle_core::Device;
pub use checkpoint::{load_checkpoint, save_checkpoint};
pub use codec::{encode_causal_into, encode_context, encode_context_into, table_mapping, PAD_ROW};
pub use config::{Decay, ModelConfig, Objective, ShownScope, TrainConfig};
pub use error::{Result, TrainError};
/// The meaning of a model file is laya-format's: the trainer configures networks in its terms.
pub use laya_format::{normalize, Activation, Mapping, NormRule, PositionScheme};
pub use model::{class_log_prior, layer_norm, log_prior, log_softmax_last, recency_prior, softmax_last, LayaNet, Param, ParamKind};
pub use optim::{lr_at, lr_at_time, AdamW, Grads};
pub use parallel::{deal, train_ranks, LocalGroup, LocalRank, RankOptions, RankSetup, Reducer};
pub use pipeline::{
    check_output_path, even_stride, gpu_ordinal, head_description, lexicon_in_file_order, load_init, parse_device, save_model, today_utc,
    InitModel, InitOptions, PriorCarry,
};
pub use rng::Rng;

mod data;
mod export;
mod prune;
mod shards;
mod train;

pub use data::{encode_events, make_batch, word_index, word_target, Batch, EncodeStats, EncodedSet, Event, Shown, SparseRows};
pub use export::{ExportInfo, Precision};
pub use ops::{
    add_columns, biased_soft_cross_entropy, class_log_softmax, class_sums, gelu_tanh, normalize_rows, scale_shift_columns,
    soft_cross_entropy, softmax_rows, within_class_head_loss, within_class_soft_cross_entropy, WordClasses,
};
pub use prune::{
    check_widths, float_precision, magnitude_scores, prune, prune_with_scores, taylor_scores, widths_for_keep, BlockPrune, PruneError,
    PruneReport, Saliency, PRUNE_GROUP, WIDTH_MULTIPLE,
};
pub use shards::sum_in_shard_order;
pub use train::{
    configure_candle_threads, evaluate, fused_loss_tensors, loss_svg, loss_tensors, shard_count, summary_table, train, train_from,
    train_step, training_pool, training_threads, EpochReport, LossParts, NoHooks, Phases, PrintHooks, RunOptions, StepReport, StopReason,
    TrainHooks, TrainOutcome, TrainState, ValidReport,
};

/// The README's example runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
