//! Names of the stages of one prediction, for the latency breakdown of `laya bench`, and the
//! clock that times them.

use std::time::Instant;

/// One stage of a prediction, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Taking the last T characters and applying the normalisation rules.
    Normalize,
    /// Token and position embedding lookup (dequantising rows).
    Embed,
    /// LayerNorm before attention (all blocks).
    AttnNorm,
    /// Q, K, V projections.
    Qkv,
    /// Scores, softmax and weighted values.
    Attention,
    /// Attention output projection and residual.
    AttnOut,
    /// LayerNorm before the FFN.
    FfnNorm,
    /// FFN up projection.
    FfnUp,
    /// FFN activation.
    Activation,
    /// FFN down projection and residual.
    FfnDown,
    /// Final LayerNorm of the last position.
    OutputNorm,
    /// Word head (the lexicon-sized matrix).
    WordHead,
    /// Replace-class head.
    ReplaceHead,
    /// Softmax of both heads.
    Softmax,
    /// The word rows of the classes of a factorised head that ranking needs, and their
    /// softmax within the class.
    ClassRows,
    /// Admissible pairs and top-k.
    Rank,
    /// The word trigram's candidates and their mix into the network's.
    Ngram,
}

impl Stage {
    /// Number of stages.
    pub const COUNT: usize = 17;
    /// Every stage, in order.
    pub const ALL: [Stage; Stage::COUNT] = [
        Stage::Normalize,
        Stage::Embed,
        Stage::AttnNorm,
        Stage::Qkv,
        Stage::Attention,
        Stage::AttnOut,
        Stage::FfnNorm,
        Stage::FfnUp,
        Stage::Activation,
        Stage::FfnDown,
        Stage::OutputNorm,
        Stage::WordHead,
        Stage::ReplaceHead,
        Stage::Softmax,
        Stage::ClassRows,
        Stage::Rank,
        Stage::Ngram,
    ];

    /// Short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Normalize => "normalize",
            Stage::Embed => "embed",
            Stage::AttnNorm => "attn_norm",
            Stage::Qkv => "qkv",
            Stage::Attention => "attention",
            Stage::AttnOut => "attn_out",
            Stage::FfnNorm => "ffn_norm",
            Stage::FfnUp => "ffn_up",
            Stage::Activation => "activation",
            Stage::FfnDown => "ffn_down",
            Stage::OutputNorm => "output_norm",
            Stage::WordHead => "word_head",
            Stage::ReplaceHead => "replace_head",
            Stage::Softmax => "softmax",
            Stage::ClassRows => "class_rows",
            Stage::Rank => "rank_topk",
            Stage::Ngram => "ngram",
        }
    }
}

/// Total nanoseconds per stage over `predictions` profiled predictions.
#[derive(Debug, Clone, Default)]
pub struct StageTimes {
    /// Nanoseconds per stage, indexed by `Stage as usize`.
    pub nanos: [u64; Stage::COUNT],
    /// Predictions accumulated.
    pub predictions: u64,
    /// Of those, the ones computed incrementally from the keys and values kept from the
    /// previous prediction (`relative_causal` models, when the context grew by a few
    /// characters); the others ran the network over the whole receptive field.
    pub reused: u64,
    /// Word-head rows computed: every word each prediction with a flat head; with a
    /// factorised one, the words of the classes that ranking expanded.
    pub word_rows: u64,
}

impl StageTimes {
    pub(crate) fn add(&mut self, acc: &[u64; Stage::COUNT]) {
        for (a, b) in self.nanos.iter_mut().zip(acc) {
            *a += b;
        }
    }

    /// Mean microseconds per prediction spent in `stage`.
    pub fn mean_us(&self, stage: Stage) -> f64 {
        if self.predictions == 0 {
            return 0.0;
        }
        self.nanos[stage as usize] as f64 / self.predictions as f64 / 1000.0
    }
}

/// Accumulates time per stage when profiling; costs nothing else. Each stage's time is the
/// time since the previous lap, so the forward pass and ranking share one clock per prediction.
pub(crate) struct Clock {
    last: Option<Instant>,
    /// Nanoseconds per stage, indexed by `Stage as usize`, for [`StageTimes::add`].
    pub(crate) acc: [u64; Stage::COUNT],
}

impl Clock {
    pub(crate) fn new(on: bool) -> Clock {
        Clock { last: on.then(Instant::now), acc: [0; Stage::COUNT] }
    }

    #[inline]
    pub(crate) fn lap(&mut self, stage: Stage) {
        if let Some(last) = self.last {
            let now = Instant::now();
            self.acc[stage as usize] += (now - last).as_nanos() as u64;
            self.last = Some(now);
        }
    }
}
