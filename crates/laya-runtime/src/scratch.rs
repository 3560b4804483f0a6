//! One session's working memory, in the manner of llama2.c's `RunState`: every buffer a
//! prediction writes, allocated when the session is made (or its model swapped for a bigger
//! one), so that predicting allocates nothing.
//!
//! Shapes use the names of docs/format.md §3: `T` context length, `d` model width, `F` the
//! widest FFN, `L` blocks, `V` lexicon size, `C` replace classes, `K` word classes (0 for a flat
//! word head), `R` the receptive field (`T` for learned positions), and `N = max(T, R)` the
//! positions computed at once. `(N, d)` is `N` rows of `d`, row-major.

use laya_format::PositionScheme;
use laya_kernels::{ActBlock, QK};

use crate::model::Config;
use crate::settings::MAX_INCREMENTAL_CHARS;

/// A candidate while ranking: a lexicon id, or a learned word's slot with `user::mix::USER_BIT`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hit {
    pub(crate) id: u32,
    pub(crate) replace: u32,
    pub(crate) score: f32,
}

/// The buffers of the forward pass and of ranking. Sizes are fixed by the model's [`Config`]
/// and the session's largest `k`; a prediction only writes into them.
pub(crate) struct Scratch {
    // The forward pass (forward.rs).
    /// `(T)` the context's last `T` normalised characters, oldest first, left-padded with 0:
    /// the tokens of a learned-positions model, and the typed characters ranking completes.
    pub(crate) last_chars: Vec<u32>,
    /// `(orders)` the output memory's rows for this prediction, one per order (empty without
    /// a memory); and `(MAX_ORDER)` the embedding rows of the last tokens they hash.
    pub(crate) memory_rows: Vec<u32>,
    pub(crate) memory_tail: Vec<u32>,
    /// The blocks' activations ([`Acts`]).
    pub(crate) acts: Activations,
    /// `(N)` one query's scores over its keys, then (softmaxed in place) its attention weights:
    /// one head at a time.
    pub(crate) attn_weights: Vec<f32>,
    /// `(N · max(d, F) / 32)` int8 blocks of whichever activation a quantised layer consumes
    /// next, one scale per 32 values (the last position's `head_in` for the word head and a
    /// factorised head's class rows).
    pub(crate) act_q8: Vec<ActBlock>,
    /// `relative_causal` only: the keys and values kept between predictions.
    pub(crate) kv: KvCache,

    // The heads (forward.rs); ranking reads them.
    /// `(d)` the last position after the output LayerNorm: what both heads multiply.
    pub(crate) head_in: Vec<f32>,
    /// `(V)` `P(w)` by word id. A flat word head writes its logits here and the forward pass
    /// softmaxes them in place; a factorised one fills the words of a class when ranking
    /// expands it ([`ClassState`]; the other words hold stale values). [`crate::Session::logits`]
    /// leaves the logits here, or `ln P(w)` for a factorised head.
    pub(crate) word_probs: Vec<f32>,
    /// `(C)` `P(i)`: the replace head's logits, softmaxed in place.
    pub(crate) replace_probs: Vec<f32>,
    /// `(K)` `P(class)` of a factorised word head: its class logits, softmaxed in place.
    pub(crate) class_probs: Vec<f32>,
    /// `(K)` what ranking has done with each class of a factorised head in this prediction.
    pub(crate) class_state: Vec<ClassState>,
    /// `(largest class)` the word logits of the one class being expanded, then its `P(w | class)`.
    pub(crate) class_word_logits: Vec<f32>,
    /// Whether a factorised head's class rows take int8 activations (those of `head_in`, in
    /// `act_q8`).
    pub(crate) class_rows_int8: bool,
    /// Word-head rows computed in this prediction (for [`crate::StageTimes::word_rows`]).
    pub(crate) word_rows: usize,

    // Ranking (rank.rs).
    /// `(≤ max_k)` the candidates so far, best first.
    pub(crate) candidates: Vec<Hit>,
    /// `(≤ 4·C)` the UTF-8 of the last `i` typed characters, to look up the words they start.
    pub(crate) typed_utf8: Vec<u8>,
    /// `(C)` per replace class `i ≥ 1`: the sorted-lexicon range of the words starting with the
    /// last `i` characters (entry 0 unused), found once per prediction.
    pub(crate) prefix_ranges: Vec<std::ops::Range<usize>>,
    /// `(C)` per replace class `i ≥ 1`: the factor its admissible words' `P(w)` is multiplied by.
    pub(crate) replace_factor: Vec<f32>,
    /// `(C)` per replace class: the network's probability mass on it (unnormalised until the
    /// end of ranking), for mixing in the learned history.
    pub(crate) replace_mass: Vec<f32>,
    /// `(C)` per replace class: its `P(i)` from `replace_probs` where its candidates may reach
    /// the bar, 0 where ranking keeps them off it (a completion of part of a typed word in a
    /// language with spaces), so that the learned history adds no words there either.
    pub(crate) replace_probs_on_bar: Vec<f32>,
    /// `(V)` per word: the share of its `P(w)` already given to completions (1 under the split
    /// rule for a word that continues the typed characters; zero between predictions).
    pub(crate) completion_share: Vec<f32>,
    /// `(≤ V)` factorised heads only (otherwise empty): the words whose `completion_share` is
    /// non-zero.
    pub(crate) shared_words: Vec<u32>,
    /// `(V)` flat heads: every word's next-word score.
    pub(crate) next_word_scores: Vec<f32>,
    /// `(⌈V/16⌉)` the largest of each run of 16 next-word scores; with a factorised head, the
    /// first `⌈K/16⌉` hold the largest of each run of 16 class probabilities.
    pub(crate) run_max: Vec<f32>,
    /// `(≤ max_k + 3)` the classes ranking's first pass visits, as `(P(class), class)` best
    /// first.
    pub(crate) best_classes: Vec<(f32, u32)>,
    /// `(≤ K)` the classes ranking's second pass may still visit.
    pub(crate) classes_left: Vec<u32>,
    /// What ranking divided the candidates' scores by: the scores of every admissible pair
    /// summed (1 where that sum was not positive and finite).
    pub(crate) rank_total: f32,

    // The completion prior (rank.rs), recomputed when the model or `λ` changes, never per
    // prediction.
    /// `(V)` per word: `exp(λ·shift)` of the completion prior; empty when the model has none
    /// or `λ = 0`.
    pub(crate) prior_factor: Vec<f32>,
    /// `(C)` per replace class `i ≥ 1`: the factor that keeps the class's admissible mass
    /// unchanged after the prior reweights its words.
    pub(crate) prior_renorm: Vec<f32>,
}

/// The blocks' activations, one zeroed allocation cut into [`Acts`]: the ~270 KB of the
/// default's take fresh pages from the system, which stay untouched until a prediction writes
/// them (a cold start's first prediction reaches a few rows of each), where eight buffers of
/// ~35 KB each were cleared, page by page, when the session was made.
pub(crate) struct Activations {
    buf: Vec<f32>,
    /// `N · d`, and `N · d` again where the model has learned positions (else 0).
    td: usize,
    learned_td: usize,
    /// `N · F`.
    tf: usize,
}

/// The buffers of [`Activations`], by name.
pub(crate) struct Acts<'a> {
    /// `(N, d)` the residual stream of the positions being computed. A `relative_causal` block
    /// leaves its output rows at the front, where the next block reads them.
    pub(crate) resid: &'a mut [f32],
    /// `(N, d)` the LayerNorm of `resid` that feeds a block's Q/K/V projections, then its FFN.
    pub(crate) normed: &'a mut [f32],
    /// `(N, d)` queries. `relative_causal`: only the queried rows, from the front.
    pub(crate) query: &'a mut [f32],
    /// `(N, d)` keys of learned-positions models; empty for `relative_causal` models, which
    /// keep theirs in `kv`.
    pub(crate) key: &'a mut [f32],
    /// `(N, d)` values of learned-positions models; empty for `relative_causal` models.
    pub(crate) value: &'a mut [f32],
    /// `(N, d)` attention's output, heads side by side, before the output projection.
    pub(crate) attn: &'a mut [f32],
    /// `(N, d)` the output projection of attention, then of the FFN, before it joins `resid`.
    pub(crate) sublayer_out: &'a mut [f32],
    /// `(N, F)` the FFN's hidden layer, before and after the activation.
    pub(crate) ffn_hidden: &'a mut [f32],
}

impl Activations {
    fn new(td: usize, learned_td: usize, tf: usize) -> Activations {
        Activations { buf: vec![0.0; 5 * td + 2 * learned_td + tf], td, learned_td, tf }
    }

    /// The buffers, each its own slice of the allocation.
    pub(crate) fn split(&mut self) -> Acts<'_> {
        let (td, ltd) = (self.td, self.learned_td);
        let (resid, rest) = self.buf.split_at_mut(td);
        let (normed, rest) = rest.split_at_mut(td);
        let (query, rest) = rest.split_at_mut(td);
        let (key, rest) = rest.split_at_mut(ltd);
        let (value, rest) = rest.split_at_mut(ltd);
        let (attn, rest) = rest.split_at_mut(td);
        let (sublayer_out, ffn_hidden) = rest.split_at_mut(td);
        debug_assert_eq!(ffn_hidden.len(), self.tf);
        Acts { resid, normed, query, key, value, attn, sublayer_out, ffn_hidden }
    }
}

/// How far ranking has taken one class of a factorised word head in this prediction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClassState {
    /// Its words' `P(w)` are not computed yet.
    Cold,
    /// Its words' `P(w)` are in `word_probs`.
    Expanded,
    /// Also ranked as next words.
    Scored,
}

impl Scratch {
    /// Buffers for `c`'s model and at most `max_k` candidates.
    pub(crate) fn new(c: &Config, max_k: usize) -> Scratch {
        let (d, fmax) = (c.d_model, c.ffn.iter().copied().max().unwrap_or(0));
        let t = c.context_length;
        // Positions computed at once: the window, or the causal receptive field.
        let rows = t.max(c.receptive_field);
        let td = rows * d;
        let learned_td = if c.position_scheme == PositionScheme::LearnedAbsolute { td } else { 0 };
        Scratch {
            last_chars: vec![0; t],
            memory_rows: vec![0; c.memory.as_ref().map_or(0, |m| m.orders.len())],
            memory_tail: Vec::with_capacity(laya_format::memory::MAX_ORDER as usize),
            acts: Activations::new(td, learned_td, rows * fmax),
            attn_weights: vec![0.0; rows],
            head_in: vec![0.0; d],
            word_probs: vec![0.0; c.vocab],
            replace_probs: vec![0.0; c.replace_classes],
            typed_utf8: Vec::with_capacity(4 * c.replace_classes),
            // The n-gram's mix adds its own candidates to the network's best `k`.
            candidates: Vec::with_capacity(max_k + crate::ngram::NGRAM_DEPTH),
            replace_factor: vec![0.0; c.replace_classes],
            prefix_ranges: vec![0..0; c.replace_classes],
            completion_share: vec![0.0; c.vocab],
            next_word_scores: vec![0.0; c.vocab],
            run_max: vec![0.0; c.vocab.div_ceil(16)],
            act_q8: vec![ActBlock::ZERO; rows * d.max(fmax) / QK],
            // Reserved even without a prior, so a hot swap to a model with one does not allocate.
            prior_factor: Vec::with_capacity(c.vocab),
            prior_renorm: vec![1.0; c.replace_classes],
            kv: KvCache::new(c),
            class_probs: vec![0.0; c.word_classes],
            class_state: vec![ClassState::Cold; c.word_classes],
            class_word_logits: vec![0.0; c.largest_class],
            shared_words: Vec::with_capacity(if c.word_classes > 0 { c.vocab } else { 0 }),
            classes_left: Vec::with_capacity(c.word_classes),
            best_classes: Vec::with_capacity(max_k + 3),
            rank_total: 1.0,
            class_rows_int8: false,
            word_rows: 0,
            replace_mass: vec![0.0; c.replace_classes],
            replace_probs_on_bar: vec![0.0; c.replace_classes],
        }
    }
}

/// Each block's keys and values at the last positions of the token stream of the previous
/// prediction (docs/format.md §3, `relative_causal`), and that stream's last `R` tokens, which
/// decide whether the next context extends it.
pub(crate) struct KvCache {
    /// Positions each block can hold, `R + 4·MAX_INCREMENTAL_CHARS`; when full, the last
    /// `T − 1` move to the front.
    pub(crate) capacity: usize,
    /// `(L, capacity, d)` each block's keys, positions oldest first.
    pub(crate) keys: Vec<f32>,
    /// `(L, capacity, d)` each block's values, positions oldest first.
    pub(crate) values: Vec<f32>,
    /// `(L)` valid positions per block (the last ones of the stream).
    pub(crate) filled: Vec<usize>,
    /// `(≤ R)` the previous stream's last `min(len, R)` tokens, oldest first.
    pub(crate) kept_tokens: Vec<u32>,
    /// Whether `keys`, `values` and `kept_tokens` describe the previous prediction (false after
    /// a model swap, a precision change, or on a learned-positions model).
    pub(crate) valid: bool,
    /// Whether the last prediction was computed from the kept keys and values.
    pub(crate) reused: bool,
    /// `(≤ R + MAX_INCREMENTAL_CHARS)` tokens of the current context: its last
    /// `R + MAX_INCREMENTAL_CHARS`, oldest first, with `BOS` in front when it is shorter.
    pub(crate) tokens: Vec<u32>,
}

impl KvCache {
    fn new(c: &Config) -> KvCache {
        if c.position_scheme != PositionScheme::RelativeCausal {
            return KvCache {
                capacity: 0,
                keys: Vec::new(),
                values: Vec::new(),
                filled: Vec::new(),
                kept_tokens: Vec::new(),
                valid: false,
                reused: false,
                tokens: Vec::new(),
            };
        }
        let r = c.receptive_field;
        let cap = r + 4 * MAX_INCREMENTAL_CHARS;
        let n = c.ffn.len() * cap * c.d_model;
        KvCache {
            capacity: cap,
            keys: vec![0.0; n],
            values: vec![0.0; n],
            filled: vec![0; c.ffn.len()],
            kept_tokens: Vec::with_capacity(r),
            valid: false,
            reused: false,
            tokens: Vec::with_capacity(r + MAX_INCREMENTAL_CHARS + 1),
        }
    }
}
