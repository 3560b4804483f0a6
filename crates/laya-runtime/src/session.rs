//! One thread's view of a model: the scratch buffers of the forward pass, allocated once, and
//! the ranking of candidates. `predict` reads top to bottom like the model description in
//! docs/format.md §3 and allocates nothing.

use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Instant;

use laya_format::{Activation, PositionScheme};
use laya_kernels::{ActBlock, Kernels, Matrix, WType, QK};

use crate::lexicon::Lexicon;
use crate::model::{Config, Layer, Mat, Model, Packed, WordClasses};
use crate::stages::{Stage, StageTimes};
use crate::user::{mix_into, MixParams, MixScratch, User, DEFAULT_MIX};

/// Largest `k` a session returns unless created with [`Session::with_max_k`].
pub const DEFAULT_MAX_K: usize = 64;

/// The default weight `λ` of the completion prior (see [`Session::set_completion_prior`]): 0,
/// the network alone. Chosen on the dev genres of the default model, which is trained on broad
/// text (docs/training.md, "The completion prior's weight"): 0 had the best mean `top5_k1`,
/// `top1_k1` and KSR of 0, 0.25, 0.5 and 1. A model trained on one narrow corpus (the 1998-news
/// default, for which 0.5 was chosen) can ask for more.
pub const DEFAULT_COMPLETION_PRIOR: f32 = 0.0;

/// The weights `λ` [`Session::set_completion_prior`] takes; it clamps others into this range.
/// Exported so front ends can refuse what the setter would clamp (`laya predict` does).
pub const COMPLETION_PRIOR_RANGE: RangeInclusive<f32> = 0.0..=2.0;

/// The exponents `β` [`Session::set_completion_exponent`] takes; it clamps others into this
/// range.
pub const COMPLETION_EXPONENT_RANGE: RangeInclusive<f32> = 0.0..=1.0;

/// Precision of the activations fed to Q8_0 linear layers (block matrices and the word head).
/// Other weight types always multiply f32 activations.
///
/// ```no_run
/// use laya_runtime::{ActPrecision, Session};
/// let mut s = Session::new(laya_runtime::Model::load("model.laya")?);
/// s.set_act_precision(ActPrecision::F32); // the exact path the numpy reference computes
/// # Ok::<(), laya_runtime::LoadError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ActPrecision {
    /// Q8_0 weights are dequantised on the fly and multiplied with f32 activations.
    F32,
    /// Activations are quantised to int8 blocks of 32 (one f32 scale each) and multiplied with
    /// the int8 weights in integer arithmetic (`Kernels::matmul_q8`): faster, and within the
    /// activation rounding (half a step of `max|x|/127` per value) of the f32 path. Used where
    /// this CPU's int8 kernels beat the f32 ones: in every Q8_0, Q4_0 and Q4_1 layer on x86
    /// CPUs with AVX2 (the packed kernels, `Kernels::packs_q8`, `Kernels::packs_q4`), and
    /// elsewhere in the one-position Q8_0 layers (the last block's query side and the word
    /// head). So a quantised model's logits differ between those kinds of CPU by the
    /// activation rounding of the other layers; [`ActPrecision::Int8All`] computes the x86
    /// numbers on any CPU.
    #[default]
    Int8,
    /// Int8 activations in every Q8_0, Q4_0 and Q4_1 layer on every CPU (slower than
    /// [`ActPrecision::Int8`] on CPUs without VNNI, much slower for 4-bit layers on CPUs
    /// without AVX2, which then run the scalar reference; the same results as `Int8` on
    /// AVX-512 VNNI CPUs, up to float summation order). For evaluating what VNNI devices
    /// compute.
    Int8All,
}

impl std::fmt::Display for ActPrecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ActPrecision::F32 => "f32",
            ActPrecision::Int8 => "int8",
            ActPrecision::Int8All => "int8-all",
        })
    }
}

impl std::str::FromStr for ActPrecision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f32" => Ok(ActPrecision::F32),
            "int8" => Ok(ActPrecision::Int8),
            "int8-all" => Ok(ActPrecision::Int8All),
            other => Err(format!("unknown activation precision `{other}` (expected `f32`, `int8` or `int8-all`)")),
        }
    }
}

/// One candidate word.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate<'a> {
    /// The word, borrowed from the model's lexicon.
    pub word: &'a str,
    /// How many trailing characters of the context this word completes (0 = next word).
    pub replace: usize,
    /// Probability among all admissible (word, replace) pairs.
    pub p: f32,
}

/// A candidate while ranking: a lexicon id, or a learned word's slot with `user::mix::USER_BIT`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hit {
    pub(crate) id: u32,
    pub(crate) replace: u32,
    pub(crate) score: f32,
}

struct Scratch {
    cps: Vec<u32>,
    x: Vec<f32>,
    h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    tmp: Vec<f32>,
    ffn: Vec<f32>,
    scores: Vec<f32>,
    z: Vec<f32>,
    logits: Vec<f32>,
    rlogits: Vec<f32>,
    suffix: Vec<u8>,
    hits: Vec<Hit>,
    /// Per replace class `i ≥ 1`: the factor its admissible words' `P(w)` is multiplied by.
    fi: Vec<f32>,
    /// Per replace class `i`: the sorted-lexicon range of the words starting with the last `i`
    /// characters (entry 0 unused), found once per prediction.
    ranges: Vec<std::ops::Range<usize>>,
    /// Per word: the share of its `P(w)` already given to completions (1 under the split rule
    /// for a word that continues the typed characters; zero between predictions).
    share: Vec<f32>,
    /// Next-word scores of every word (vocab), and the maximum of each run of 16 of them (with a
    /// factorised head: of its class probabilities).
    word_scores: Vec<f32>,
    chunk_max: Vec<f32>,
    /// Int8 blocks of whichever activation a Q8_0 layer consumes next (at most T x max(d, F)).
    xq: Vec<ActBlock>,
    /// Per word: `exp(λ·shift)` of the completion prior (empty when the model has none or
    /// `λ = 0`); recomputed when the model or `λ` changes, never per prediction.
    prior: Vec<f32>,
    /// Per replace class `i ≥ 1`: the factor that keeps the class's admissible mass unchanged
    /// after the prior reweights its words.
    prior_norm: Vec<f32>,
    /// `relative_causal` only: the keys and values kept between predictions.
    kv: KvCache,
    /// Factorised word heads only (otherwise empty): the class logits, then `P(class)`; each
    /// class's state in this prediction (`COLD`, `EXPANDED`: its words' `P(w)` are in
    /// `logits`, `SCORED`: also ranked as next words); one class's logits; the words whose
    /// `share` is non-zero; whether the class rows take int8 activations (those of `z` in `xq`).
    clogits: Vec<f32>,
    class_state: Vec<u8>,
    class_tmp: Vec<f32>,
    touched: Vec<u32>,
    /// The classes ranking's second pass may still visit (a factorised head's K at most), and the
    /// best few with their probabilities that the first pass visits.
    order: Vec<u32>,
    top: Vec<(f32, u32)>,
    rows_int8: bool,
    /// Word-head rows computed in this prediction.
    word_rows: usize,
    /// Per replace class: the network's probability mass on it (unnormalised until the end of
    /// ranking).
    class_mass: Vec<f32>,
}

const COLD: u8 = 0;
const EXPANDED: u8 = 1;
const SCORED: u8 = 2;

/// The last characters of a context as tokens (normalised scalar values, oldest first), with
/// [`BOS`] in front when the whole context fits.
const BOS: u32 = 0x11_0000;

/// How many new characters a `relative_causal` session computes one at a time from the kept
/// keys and values before it recomputes from scratch (a committed candidate adds several
/// characters at once; a longer jump is cheaper computed whole).
pub const MAX_INCREMENTAL_CHARS: usize = 8;

/// Each block's keys and values at the last positions of the token stream of the previous
/// prediction (docs/format.md §3, `relative_causal`), and that stream's last `R` tokens, which
/// decide whether the next context extends it.
struct KvCache {
    /// Positions each block can hold; when full, the last `T − 1` move to the front.
    cap: usize,
    /// `[block][position][d]`, positions oldest first.
    k: Vec<f32>,
    v: Vec<f32>,
    /// Valid positions per block (the last ones of the stream).
    len: Vec<usize>,
    /// The previous stream's last `min(len, R)` tokens, oldest first.
    toks: Vec<u32>,
    /// Whether `k`, `v` and `toks` describe the previous prediction (false after a model swap,
    /// a precision change, or on a learned-positions model).
    valid: bool,
    /// Whether the last prediction was computed from the kept keys and values.
    reused: bool,
    /// Tokens of the current context: its last `R + MAX_INCREMENTAL_CHARS`, oldest first.
    cur: Vec<u32>,
}

impl KvCache {
    fn new(c: &Config) -> KvCache {
        if c.position_scheme != PositionScheme::RelativeCausal {
            return KvCache {
                cap: 0,
                k: Vec::new(),
                v: Vec::new(),
                len: Vec::new(),
                toks: Vec::new(),
                valid: false,
                reused: false,
                cur: Vec::new(),
            };
        }
        let r = c.receptive_field;
        let cap = r + 4 * MAX_INCREMENTAL_CHARS;
        let n = c.ffn.len() * cap * c.d_model;
        KvCache {
            cap,
            k: vec![0.0; n],
            v: vec![0.0; n],
            len: vec![0; c.ffn.len()],
            toks: Vec::with_capacity(r),
            valid: false,
            reused: false,
            cur: Vec::with_capacity(r + MAX_INCREMENTAL_CHARS + 1),
        }
    }
}

/// A prediction context for one thread: owns every buffer a prediction needs, so predicting
/// allocates nothing. Create one per thread from a shared `Arc<Model>`.
///
/// ```no_run
/// use std::sync::Arc;
/// let model = laya_runtime::Model::load("model.laya")?;
/// let handles: Vec<_> = (0..4).map(|_| {
///     let model = Arc::clone(&model);
///     std::thread::spawn(move || {
///         let mut s = laya_runtime::Session::new(model);
///         s.predict("hel", 5).iter().map(|c| c.word.to_string()).collect::<Vec<_>>()
///     })
/// }).collect();
/// for h in handles { println!("{:?}", h.join().unwrap()); }
/// # Ok::<(), laya_runtime::LoadError>(())
/// ```
pub struct Session {
    model: Arc<Model>,
    s: Scratch,
    max_k: usize,
    profiling: bool,
    act: ActPrecision,
    completion_exponent: f32,
    completion_prior: f32,
    rule: CompletionRule,
    punctuation_slot: bool,
    times: StageTimes,
    personal: Personal,
}

/// A session's learned history and what it derives from it.
struct Personal {
    user: User,
    mix: MixParams,
    scratch: MixScratch,
    /// Per lexicon id: blocked by the user (empty when nothing is blocked).
    blocked: Vec<bool>,
    /// The blocklist generation `blocked` was built from (`None`: rebuild).
    blocked_seen: Option<u64>,
    /// The learned words on the bar, copied out of the history: `text[spans[j]]`.
    text: String,
    spans: Vec<(u32, u32)>,
}

impl Personal {
    fn new(user: User, mix: MixParams, c: &Config, max_k: usize) -> Personal {
        let hits = max_k;
        Personal {
            user,
            mix,
            scratch: MixScratch::new(c.replace_classes, hits),
            // Reserved, so that a block after the session was made does not allocate in predict.
            blocked: Vec::with_capacity(c.vocab),
            blocked_seen: None,
            text: String::with_capacity(hits * 4 * crate::user::MAX_WORD_CHARS),
            spans: Vec::with_capacity(hits),
        }
    }
}

/// How a session turns the two heads into scores of `(w, i)` pairs (docs/format.md §3 step 6):
/// a next word `(w, 0)` against a completion `(w, i ≥ 1)` of the `i` typed characters.
///
/// The word head's `P(w)` is trained on the word being typed *whatever* has been typed of it,
/// so when the context ends mid-word it already puts its mass on the completions of the typed
/// characters: it is the marginal of `w` over `i`, not `P(w | i)`. Multiplying it by `P(i)`
/// ([`CompletionRule::Product`]) counts the mid-word evidence twice and pushes completions out of
/// the bar. [`CompletionRule::Split`], the default, gives the whole `P(w)` of a word that starts
/// with typed characters to its completions; [`CompletionRule::Marginal`] leaves the part the
/// replace head does not claim to the next word `(w, 0)`, which put words such as 非常重视 on
/// the bar as a next word after 非常. Measured on the default model (README "Completion
/// rules"): split raises `top5_k1` by a point over marginal on the reviews and on held-out
/// news, with `top5_k0` unchanged; marginal beat product on both.
///
/// ```
/// use laya_runtime::CompletionRule;
/// assert_eq!(CompletionRule::default(), CompletionRule::Split);
/// assert_eq!("product".parse::<CompletionRule>(), Ok(CompletionRule::Product));
/// assert!("both".parse::<CompletionRule>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CompletionRule {
    /// Each completion `(w, i)` scores `P(w)·f_i` with `f_i = min(1, P(i) / M_i)`, where `M_i` is
    /// the word head's mass on the words admissible with `i`; a next word `(w, 0)` scores what is
    /// left of its `P(w)`, `P(w)·max(0, 1 − Σ f_i)` over the `i` it is admissible with (so a
    /// word that starts with nothing typed keeps all of `P(w)`). A word's pairs never score more
    /// than its `P(w)`. No tuning constant.
    Marginal,
    /// `P(w)·P(i)^β`, with the session's completion exponent `β` (1 by default): the two heads
    /// taken as independent.
    Product,
    /// `(w, 0)` scores `P(w)·P(0)`, a completion `P(i)·P(w) / M_i`: the replace head says how
    /// likely the person is mid-word, the word head renormalised over the admissible words which
    /// word. Shows the most completions. No tuning constant.
    Conditional,
    /// A word that continues the typed characters is offered only as a completion: `(w, i)`
    /// scores `P(w)·P(i) / Σ_j P(j)`, the sum over the `i ≥ 1` that `w` is admissible with, and
    /// `(w, 0)` scores 0 (typing its first characters twice, as in "非常非常重视", is rare). Every
    /// other word keeps its `P(w)` as a next word. The word head put `P(w)` on such a word
    /// because the context may end inside it, so that mass goes to the completions, split by
    /// the replace head. No tuning constant.
    #[default]
    Split,
}

impl std::str::FromStr for CompletionRule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "product" => Ok(CompletionRule::Product),
            "conditional" => Ok(CompletionRule::Conditional),
            "marginal" => Ok(CompletionRule::Marginal),
            "split" => Ok(CompletionRule::Split),
            other => Err(format!("unknown completion rule `{other}` (expected `marginal`, `split`, `product` or `conditional`)")),
        }
    }
}

/// The candidates of one prediction, borrowed from the session until the next call.
pub struct Predictions<'a> {
    model: &'a Model,
    hits: &'a [Hit],
    /// Learned words on the bar and where each is in `user_text`.
    user_text: &'a str,
    user_spans: &'a [(u32, u32)],
    /// The context ends in Chinese text, so a punctuation candidate takes its Chinese form.
    cjk: bool,
}

impl<'a> Predictions<'a> {
    /// Number of candidates (at most the `k` asked for).
    pub fn len(&self) -> usize {
        self.hits.len()
    }
    /// True when the model offered nothing (only when `k == 0`).
    pub fn is_empty(&self) -> bool {
        self.hits.is_empty()
    }
    /// Candidate `i`, best first.
    pub fn get(&self, i: usize) -> Option<Candidate<'a>> {
        self.hits.get(i).map(|h| {
            if h.id & crate::user::USER_BIT != 0 {
                let (a, b) = self.user_spans[(h.id & !crate::user::USER_BIT) as usize];
                return Candidate { word: &self.user_text[a as usize..b as usize], replace: h.replace as usize, p: h.score };
            }
            let (lex, id) = (&self.model.lexicon, h.id as usize);
            let word = lex.word(id);
            let word = if self.cjk && lex.is_punct(id) { laya_format::cjk_punctuation(word).unwrap_or(word) } else { word };
            Candidate { word, replace: h.replace as usize, p: h.score }
        })
    }
    /// All candidates, best first.
    pub fn iter(&self) -> impl Iterator<Item = Candidate<'a>> + '_ {
        (0..self.hits.len()).filter_map(move |i| self.get(i))
    }
}

impl Session {
    /// A session returning at most [`DEFAULT_MAX_K`] candidates per prediction.
    pub fn new(model: Arc<Model>) -> Session {
        Self::with_max_k(model, DEFAULT_MAX_K)
    }

    /// A session returning at most `max_k` candidates per prediction; larger `k` is clamped.
    pub fn with_max_k(model: Arc<Model>, max_k: usize) -> Session {
        let c = &model.cfg;
        let (d, fmax) = (c.d_model, c.ffn.iter().copied().max().unwrap_or(0));
        let t = c.context_length;
        // Positions computed at once: the window, or the causal receptive field.
        let rows = t.max(c.receptive_field);
        let td = rows * d;
        let s = Scratch {
            cps: vec![0; t],
            x: vec![0.0; td],
            h: vec![0.0; td],
            q: vec![0.0; td],
            k: vec![0.0; td],
            v: vec![0.0; td],
            att: vec![0.0; td],
            tmp: vec![0.0; td],
            ffn: vec![0.0; rows * fmax],
            scores: vec![0.0; rows],
            z: vec![0.0; d],
            logits: vec![0.0; c.vocab],
            rlogits: vec![0.0; c.replace_classes],
            suffix: Vec::with_capacity(4 * c.replace_classes),
            hits: Vec::with_capacity(max_k),
            fi: vec![0.0; c.replace_classes],
            ranges: vec![0..0; c.replace_classes],
            share: vec![0.0; c.vocab],
            word_scores: vec![0.0; c.vocab],
            chunk_max: vec![0.0; c.vocab.div_ceil(16)],
            xq: vec![ActBlock::ZERO; rows * d.max(fmax) / QK],
            // Reserved even without a prior, so a hot swap to a model with one does not allocate.
            prior: Vec::with_capacity(c.vocab),
            prior_norm: vec![1.0; c.replace_classes],
            kv: KvCache::new(c),
            clogits: vec![0.0; c.word_classes],
            class_state: vec![COLD; c.word_classes],
            class_tmp: vec![0.0; c.largest_class],
            touched: Vec::with_capacity(if c.word_classes > 0 { c.vocab } else { 0 }),
            order: Vec::with_capacity(c.word_classes),
            top: Vec::with_capacity(max_k + 3),
            rows_int8: false,
            word_rows: 0,
            class_mass: vec![0.0; c.replace_classes],
        };
        let personal = Personal::new(User::new(), DEFAULT_MIX, c, max_k);
        let mut session = Session {
            model,
            s,
            max_k,
            profiling: false,
            act: ActPrecision::default(),
            completion_exponent: 1.0,
            completion_prior: DEFAULT_COMPLETION_PRIOR,
            rule: CompletionRule::default(),
            punctuation_slot: false,
            times: StageTimes::default(),
            personal,
        };
        session.refresh_prior();
        session
    }

    /// Recomputes the per-word prior factors into the existing buffer.
    fn refresh_prior(&mut self) {
        let (shift, lambda) = (&self.model.prior_shift, self.completion_prior);
        self.s.prior.clear();
        if lambda != 0.0 && !shift.is_empty() {
            self.s.prior.extend(shift.iter().map(|&x| (lambda * x).exp()));
        }
    }

    /// The weight `λ` of the completion prior (default [`DEFAULT_COMPLETION_PRIOR`]): among
    /// the words that complete the typed characters, each word's `P(w)` is multiplied by
    /// `(dictionary share / corpus share)^λ` and the class renormalised to its old mass, so
    /// completions are ranked as if the text came from the genres of a general-purpose
    /// dictionary rather than the training corpus; next-word candidates, and the share of the
    /// bar that completions get, do not change (docs/format.md §3 step 6). It needs a file with
    /// `laya.lexicon.dict_frequencies` (`laya prior`); without one, or with `λ = 0`, ranking
    /// is the network's alone. Measured on the default model (docs/training.md): `λ = 0.5`
    /// gains 0.2–1.2 points of `top5_k1` on reviews, news and subtitles and costs 0.8–4.2 on
    /// formal text, dialogue, manuals and UI strings. Values outside
    /// [`COMPLETION_PRIOR_RANGE`] (`0..=2`) are clamped into it and NaN means 0, so no setting
    /// can make the ranking fail. Recomputes one factor per word; call it outside the typing loop.
    ///
    /// ```
    /// # let model = laya_runtime::Model::from_bytes(laya_format::write_model(
    /// #     &laya_format::testing::random_model(&Default::default(), 1, laya_format::GgmlType::F32).0,
    /// #     &laya_format::testing::random_model(&Default::default(), 1, laya_format::GgmlType::F32).1).unwrap()).unwrap();
    /// let mut s = laya_runtime::Session::new(model);
    /// assert_eq!(s.completion_prior(), laya_runtime::DEFAULT_COMPLETION_PRIOR);
    /// s.set_completion_prior(0.0); // rank completions by the network alone
    /// assert_eq!(s.completion_prior(), 0.0);
    /// s.set_completion_prior(5.0); // clamped
    /// assert_eq!(s.completion_prior(), 2.0);
    /// s.set_completion_prior(f32::NAN);
    /// assert_eq!(s.completion_prior(), 0.0);
    /// ```
    pub fn set_completion_prior(&mut self, lambda: f32) {
        let range = COMPLETION_PRIOR_RANGE;
        self.completion_prior = if lambda.is_nan() { 0.0 } else { lambda.clamp(*range.start(), *range.end()) };
        self.refresh_prior();
    }

    /// Allows one punctuation candidate on the bar (default: none). A keyboard types
    /// punctuation with its own keys, so by default no punctuation word
    /// ([`laya_format::is_punctuation_word`]) is ever a candidate and the bar holds words only;
    /// with the slot on, the most likely punctuation word joins the bar where its probability
    /// ranks it (after a finished sentence, say), at most one. After Chinese text an ASCII mark
    /// is offered in its Chinese form (`,` → `，`, [`laya_format::cjk_punctuation`]).
    /// Probabilities are the network's either way. Allocates nothing.
    ///
    /// ```
    /// # let model = laya_runtime::Model::from_bytes(laya_format::write_model(
    /// #     &laya_format::testing::random_model(&Default::default(), 1, laya_format::GgmlType::F32).0,
    /// #     &laya_format::testing::random_model(&Default::default(), 1, laya_format::GgmlType::F32).1).unwrap()).unwrap();
    /// let mut s = laya_runtime::Session::new(model);
    /// assert!(!s.punctuation_slot());
    /// assert!(s.predict("今天", 5).iter().all(|c| !laya_format::is_punctuation_word(c.word)));
    /// s.set_punctuation_slot(true);
    /// assert!(s.predict("今天", 5).iter().filter(|c| laya_format::is_punctuation_word(c.word)).count() <= 1);
    /// ```
    pub fn set_punctuation_slot(&mut self, on: bool) {
        self.punctuation_slot = on;
    }

    /// Whether one punctuation candidate may join the bar (see [`Session::set_punctuation_slot`]).
    pub fn punctuation_slot(&self) -> bool {
        self.punctuation_slot
    }

    /// The completion prior's weight `λ` (see [`Session::set_completion_prior`]).
    pub fn completion_prior(&self) -> f32 {
        self.completion_prior
    }

    /// Chooses how Q8_0 layers multiply (default [`ActPrecision::Int8`]). Takes effect at the
    /// next prediction and allocates nothing.
    pub fn set_act_precision(&mut self, act: ActPrecision) {
        self.act = act;
        // Kept keys and values were computed at the old precision.
        self.s.kv.valid = false;
    }

    /// Drops what the session kept from the previous prediction (a `relative_causal` model's
    /// keys and values, and the tokens they came from), so the next prediction is computed
    /// whole. Predictions are the same either way (the session notices by itself when a
    /// context does not extend the previous one); it is for timing whole computations, and for
    /// keyboards that want the next prediction to start clean. The buffers are marked unused,
    /// not cleared, so it costs nothing. Allocates nothing.
    ///
    /// ```
    /// # let cfg = laya_format::testing::TinyConfig { position_scheme: laya_format::PositionScheme::RelativeCausal, ..Default::default() };
    /// # let (meta, tensors) = laya_format::testing::random_model(&cfg, 1, laya_format::GgmlType::F32);
    /// # let model = laya_runtime::Model::from_bytes(laya_format::write_model(&meta, &tensors).unwrap()).unwrap();
    /// let mut s = laya_runtime::Session::new(model);
    /// s.set_profiling(true);
    /// s.predict("今天", 5);
    /// s.predict("今天天", 5); // one character more: computed from what was kept
    /// s.forget_context();
    /// s.predict("今天天气", 5); // computed whole
    /// assert_eq!(s.stage_times().reused, 1);
    /// ```
    pub fn forget_context(&mut self) {
        let kv = &mut self.s.kv;
        kv.valid = false;
        kv.toks.clear();
    }

    /// The activation precision of Q8_0 layers.
    pub fn act_precision(&self) -> ActPrecision {
        self.act
    }

    /// The exponent `β` of [`CompletionRule::Product`] (no effect under the other rules): a pair
    /// `(w, i ≥ 1)` scores `P(w)·P(i)^β` (next words keep `P(w)·P(0)`); `β = 1` is the plain
    /// product, smaller `β` shows more completions. Measured on the default model (README):
    /// `β = 0.25` trades about 0.3 points of `top5_k0` for 3.5–4.5 points of `top5_k1`.
    /// Values outside [`COMPLETION_EXPONENT_RANGE`] (`0..=1`) are clamped into it and NaN means
    /// 1. Allocates nothing.
    ///
    /// ```
    /// # let model = laya_runtime::Model::from_bytes(laya_format::write_model(
    /// #     &laya_format::testing::random_model(&Default::default(), 1, laya_format::GgmlType::F32).0,
    /// #     &laya_format::testing::random_model(&Default::default(), 1, laya_format::GgmlType::F32).1).unwrap()).unwrap();
    /// let mut s = laya_runtime::Session::new(model);
    /// s.set_completion_rule(laya_runtime::CompletionRule::Product);
    /// s.set_completion_exponent(0.25);
    /// assert_eq!(s.completion_exponent(), 0.25);
    /// s.set_completion_exponent(7.0); // clamped
    /// assert_eq!(s.completion_exponent(), 1.0);
    /// s.set_completion_exponent(-1.0);
    /// assert_eq!(s.completion_exponent(), 0.0);
    /// ```
    pub fn set_completion_exponent(&mut self, beta: f32) {
        let range = COMPLETION_EXPONENT_RANGE;
        self.completion_exponent = if beta.is_nan() { 1.0 } else { beta.clamp(*range.start(), *range.end()) };
    }

    /// Chooses how the two heads are combined into candidate scores (see [`CompletionRule`];
    /// default [`CompletionRule::Split`]). Allocates nothing.
    ///
    /// ```
    /// # let model = laya_runtime::Model::from_bytes(laya_format::write_model(
    /// #     &laya_format::testing::random_model(&Default::default(), 1, laya_format::GgmlType::F32).0,
    /// #     &laya_format::testing::random_model(&Default::default(), 1, laya_format::GgmlType::F32).1).unwrap()).unwrap();
    /// let mut s = laya_runtime::Session::new(model);
    /// assert_eq!(s.completion_rule(), laya_runtime::CompletionRule::Split);
    /// s.set_completion_rule(laya_runtime::CompletionRule::Conditional);
    /// assert_eq!(s.completion_rule(), laya_runtime::CompletionRule::Conditional);
    /// ```
    pub fn set_completion_rule(&mut self, rule: CompletionRule) {
        self.rule = rule;
    }

    /// The completion rule (see [`Session::set_completion_rule`]).
    pub fn completion_rule(&self) -> CompletionRule {
        self.rule
    }

    /// The completion exponent `β` (see [`Session::set_completion_exponent`]).
    pub fn completion_exponent(&self) -> f32 {
        self.completion_exponent
    }

    /// The model this session predicts with.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// Switches to another model, keeping buffers when they are large enough. Used by the
    /// hot-swap engine; allocates only when the new model is bigger.
    pub fn set_model(&mut self, model: Arc<Model>) {
        let same_shape = {
            let (a, b) = (&self.model.cfg, &model.cfg);
            a.context_length == b.context_length
                && a.d_model == b.d_model
                && a.ffn.iter().max() == b.ffn.iter().max()
                && a.vocab == b.vocab
                && a.replace_classes == b.replace_classes
                && a.position_scheme == b.position_scheme
                && a.receptive_field == b.receptive_field
                && a.ffn.len() == b.ffn.len()
                && a.word_classes == b.word_classes
                && a.largest_class == b.largest_class
        };
        // The learned history belongs to the person, not the model: it stays; the marks of
        // blocked lexicon ids are rebuilt for the new lexicon.
        self.personal.blocked_seen = None;
        if same_shape {
            self.model = model;
            self.s.kv.valid = false;
            self.refresh_prior();
        } else {
            let (profiling, act, beta, rule, lambda, punct) =
                (self.profiling, self.act, self.completion_exponent, self.rule, self.completion_prior, self.punctuation_slot);
            let (user, mix) = (self.personal.user.clone(), self.personal.mix);
            *self = Session::with_max_k(model, self.max_k);
            self.personal = Personal::new(user, mix, &self.model.cfg, self.max_k);
            self.profiling = profiling;
            self.punctuation_slot = punct;
            self.act = act;
            self.completion_exponent = beta;
            self.rule = rule;
            self.set_completion_prior(lambda);
        }
    }

    /// Turns the per-stage timer on or off (off by default: a timer costs two clock reads per
    /// stage). Timings accumulate in [`Session::stage_times`].
    pub fn set_profiling(&mut self, on: bool) {
        self.profiling = on;
    }

    /// Accumulated per-stage time since the last [`Session::reset_stage_times`].
    pub fn stage_times(&self) -> &StageTimes {
        &self.times
    }

    /// Clears the accumulated stage times.
    pub fn reset_stage_times(&mut self) {
        self.times = StageTimes::default();
    }

    /// Touches every page of the model and runs a few predictions so that the first real
    /// keystroke pays neither page faults nor cold caches.
    pub fn warm_up(&mut self) {
        self.model.prefault();
        for ctx in ["", "a", "今天", "hello wor", "😀"] {
            self.predict(ctx, 5);
        }
    }

    /// Ranks the `k` most likely candidates after `context` (the text before the cursor).
    /// Any string works: empty, long, control characters, NUL, emoji.
    pub fn predict(&mut self, context: &str, k: usize) -> Predictions<'_> {
        let k = k.min(self.max_k);
        let mut clock = Clock::new(self.profiling);
        let n_chars = self.forward(context, &mut clock);
        self.refresh_blocked();
        let personal = k > 0 && !self.personal.user.read().is_empty();
        self.rank(n_chars, k, &mut clock);
        self.personal.spans.clear();
        self.personal.text.clear();
        if personal {
            self.personalise(context, n_chars, k);
            clock.lap(Stage::Rank);
        }
        if self.profiling {
            self.times.predictions += 1;
            self.times.reused += u64::from(self.s.kv.reused);
            self.times.word_rows += self.s.word_rows as u64;
            self.times.add(&clock.acc);
        }
        let cjk = context.chars().rev().find(|c| !c.is_whitespace()).is_some_and(laya_format::punct::is_unspaced_script);
        Predictions { model: &self.model, hits: &self.s.hits, cjk, user_text: &self.personal.text, user_spans: &self.personal.spans }
    }

    /// Mixes the learned history into the network's candidates (docs/personalisation.md) and
    /// copies the learned words that reach the bar out of it. Allocates nothing.
    fn personalise(&mut self, context: &str, n_chars: usize, k: usize) {
        let Session { model, s, personal, .. } = self;
        let user = personal.user.read();
        let max_i = (s.class_mass.len() - 1).min(n_chars);
        let lexicon = &model.lexicon;
        let word = |id: u32| lexicon.word(id as usize);
        mix_into(
            &user,
            &personal.mix,
            context,
            &s.class_mass[..=max_i],
            &s.rlogits[..=max_i],
            &mut s.hits,
            k,
            &word,
            &mut personal.scratch,
        );
        for h in s.hits.iter_mut() {
            if h.id & crate::user::USER_BIT != 0 {
                let w = user.word_of(h.id & !crate::user::USER_BIT);
                let a = personal.text.len() as u32;
                personal.text.push_str(w);
                h.id = crate::user::USER_BIT | personal.spans.len() as u32;
                personal.spans.push((a, personal.text.len() as u32));
            }
        }
    }

    /// Rebuilds the per-lexicon marks of blocked words when the blocklist or the model changed.
    fn refresh_blocked(&mut self) {
        let p = &mut self.personal;
        let user = p.user.read();
        let generation = user.block_generation();
        if p.blocked_seen == Some(generation) {
            return;
        }
        p.blocked_seen = Some(generation);
        p.blocked.clear();
        let lex = &self.model.lexicon;
        for id in user.blocklist().filter_map(|w| lex.id_of(w)) {
            if p.blocked.is_empty() {
                p.blocked.resize(lex.len(), false);
            }
            p.blocked[id] = true;
        }
    }

    /// The learned history this session ranks with (an empty in-memory one unless
    /// [`Session::set_user`] gave another). Learn through it, or through [`Session::learn`].
    pub fn user(&self) -> &User {
        &self.personal.user
    }

    /// Ranks with `user`'s history from the next prediction on (share one [`User`] between the
    /// sessions that type for the same person). Kept across [`Session::set_model`].
    ///
    /// ```
    /// # let model = laya_runtime::Model::from_bytes(laya_format::write_model(
    /// #     &laya_format::testing::random_model(&Default::default(), 1, laya_format::GgmlType::F32).0,
    /// #     &laya_format::testing::random_model(&Default::default(), 1, laya_format::GgmlType::F32).1).unwrap()).unwrap();
    /// let user = laya_runtime::User::new();
    /// let mut s = laya_runtime::Session::new(model);
    /// s.set_user(user.clone());
    /// s.learn("拉雅");
    /// assert!(user.read().count("拉雅") > 0.99);
    /// assert!(s.predict("拉", 5).iter().any(|c| c.word == "拉雅" && c.replace == 1));
    /// ```
    pub fn set_user(&mut self, user: User) {
        self.personal.user = user;
        self.personal.blocked_seen = None;
    }

    /// How strongly the history weighs against the network (default [`crate::DEFAULT_MIX`]).
    /// Shares are clamped to `0..=1` and evidences to `0..`; a NaN takes the default's value.
    ///
    /// ```
    /// # let model = laya_runtime::Model::from_bytes(laya_format::write_model(
    /// #     &laya_format::testing::random_model(&Default::default(), 1, laya_format::GgmlType::F32).0,
    /// #     &laya_format::testing::random_model(&Default::default(), 1, laya_format::GgmlType::F32).1).unwrap()).unwrap();
    /// use laya_runtime::{MixParams, DEFAULT_MIX};
    /// let mut s = laya_runtime::Session::new(model);
    /// s.set_mix(MixParams { pair_share: 3.0, word_share: f64::NAN, ..DEFAULT_MIX });
    /// assert_eq!((s.mix().pair_share, s.mix().word_share), (1.0, DEFAULT_MIX.word_share));
    /// ```
    pub fn set_mix(&mut self, mix: MixParams) {
        let d = DEFAULT_MIX;
        let fix = |v: f64, dv: f64, hi: f64| if v.is_nan() { dv } else { v.clamp(0.0, hi) };
        self.personal.mix = MixParams {
            pair_evidence: fix(mix.pair_evidence, d.pair_evidence, f64::MAX),
            pair_share: fix(mix.pair_share, d.pair_share, 1.0),
            word_share: fix(mix.word_share, d.word_share, 1.0),
            completion_share: fix(mix.completion_share, d.completion_share, 1.0),
            word_evidence: fix(mix.word_evidence, d.word_evidence, f64::MAX),
        };
    }

    /// The mix settings (see [`Session::set_mix`]).
    pub fn mix(&self) -> MixParams {
        self.personal.mix
    }

    /// Learns committed text: cuts it into words (the word rules of the training text, Han runs
    /// cut against this model's lexicon and the words already learned; a short commit of
    /// unknown characters, a name say, is one word) and learns them in order
    /// ([`crate::UserModel::learn_words`]). Returns the number of words counted, 0 in
    /// incognito. Costs microseconds; allocates (it is not on the per-keystroke path).
    ///
    /// ```
    /// # let model = laya_runtime::Model::from_bytes(laya_format::write_model(
    /// #     &laya_format::testing::random_model(&Default::default(), 1, laya_format::GgmlType::F32).0,
    /// #     &laya_format::testing::random_model(&Default::default(), 1, laya_format::GgmlType::F32).1).unwrap()).unwrap();
    /// let mut s = laya_runtime::Session::new(model);
    /// assert_eq!(s.learn("hello, world"), 2); // punctuation is not learned
    /// s.user().write().set_incognito(true);
    /// assert_eq!(s.learn("again"), 0);
    /// ```
    pub fn learn(&mut self, text: &str) -> usize {
        let (lex, u) = (&self.model.lexicon, self.model.word_logp());
        let ranges = {
            let user = self.personal.user.read();
            let score = |w: &str| match lex.id_of(w) {
                Some(id) => Some(u.logp[id]),
                None => (user.count(w) > 0.0).then_some(u.learned),
            };
            crate::learn::cut(text, &score, u.unknown)
        };
        self.personal.user.write().learn_words(ranges.into_iter().map(|r| &text[r]))
    }

    /// Raw outputs of the last prediction: word probabilities `P(w)` and replace-class
    /// probabilities `P(i)`. With a factorised word head only the words of the classes that
    /// ranking expanded have their `P(w)` here (the others hold stale values); use
    /// [`Session::logits`] for the whole distribution. For parity tests and tools.
    pub fn last_distributions(&self) -> (&[f32], &[f32]) {
        (&self.s.logits, &self.s.rlogits)
    }

    /// Runs the network on `context` and returns the word logits and the replace logits
    /// (before softmax), for parity tests against other implementations. With a factorised
    /// word head the word vector is `ln P(w)` for every word (class log-probability plus the
    /// word's log-probability within its class), computed whole: the quantity two
    /// implementations of such a model can compare, since its raw logits are only defined up
    /// to a constant per class.
    pub fn logits(&mut self, context: &str) -> (Vec<f32>, Vec<f32>) {
        let mut clock = Clock::new(false);
        self.forward_logits(context, &mut clock);
        let Some(wc) = self.model.classes.as_ref() else {
            return (self.s.logits.clone(), self.s.rlogits.clone());
        };
        let s = &mut self.s;
        // ln P(class) as a log-softmax, so that a class whose probability underflows keeps a
        // finite log-probability.
        let cmax = s.clogits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let clse = cmax + s.clogits.iter().map(|&v| (v - cmax).exp()).sum::<f32>().ln();
        let nbd = self.model.cfg.d_model / QK;
        for c in 0..wc.len() {
            let y = class_logits(&self.model, wc, c, &s.z, &s.xq[..nbd], s.rows_int8, &mut s.class_tmp);
            let mx = y.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let lse = mx + y.iter().map(|&v| (v - mx).exp()).sum::<f32>().ln();
            let lc = s.clogits[c] - clse;
            for (&id, &v) in wc.ids[wc.start[c]..wc.start[c + 1]].iter().zip(y.iter()) {
                s.logits[id as usize] = lc + v - lse;
            }
        }
        (s.logits.clone(), s.rlogits.clone())
    }

    /// Fills `logits`/`rlogits` with softmaxed distributions; returns the number of context
    /// characters available for completion (capped at the context length).
    fn forward(&mut self, context: &str, clock: &mut Clock) -> usize {
        let n = self.forward_logits(context, clock);
        let kern = self.model.kernels;
        if self.model.classes.is_some() {
            // Word probabilities come class by class, when ranking asks for them.
            kern.softmax(&mut self.s.clogits);
            self.s.class_state.fill(COLD);
        } else {
            kern.softmax(&mut self.s.logits);
            self.s.word_rows = self.s.logits.len();
        }
        kern.softmax(&mut self.s.rlogits);
        clock.lap(Stage::Softmax);
        n
    }

    fn forward_logits(&mut self, context: &str, clock: &mut Clock) -> usize {
        if self.model.cfg.position_scheme == PositionScheme::RelativeCausal {
            return self.forward_causal(context, clock);
        }
        let Session { model, s, act, .. } = self;
        let m: &Model = model;
        let kern = m.kernels;
        let int8 = *act != ActPrecision::F32;
        // Which layers take int8 activations (measured in benchmarks/README.md, kernel_bench):
        // a layer the model packed at load (Q8_0 and Q4 on x86 with AVX2) always,
        // since the packed kernels beat the f32 path for every shape. Unpacked Q8_0 layers (CPUs
        // without packed kernels) only for one position (the last block and the word head):
        // there the row-major int8 kernels won (1.6x with AVX2 on Zen 3 before AVX2 packed),
        // for 16 positions the f32 panel does. Under
        // `Int8All` every quantised layer (unpacked Q4 ones through the slow scalar reference).
        let all = *act == ActPrecision::Int8All;
        let q8n = |w: &Mat, n: usize| {
            int8 && match (&w.packed, w.ty) {
                (Some(_), _) => true,
                (None, WType::Q8_0) => n == 1 || all,
                (None, WType::Q4_0 | WType::Q4_1) => all,
                _ => false,
            }
        };
        let cfg = &m.cfg;
        let (t, d) = (cfg.context_length, cfg.d_model);
        let nbd = d / QK;
        let heads = cfg.heads;
        let dh = d / heads;
        let scale = 1.0 / (dh as f32).sqrt();

        // 1. The last T scalar values, normalised, left-padded with 0.
        let mut n = 0;
        for c in context.chars().rev().take(t) {
            let c = cfg.normalization.iter().fold(c, |c, r| r.apply(c));
            s.cps[t - 1 - n] = c as u32;
            n += 1;
        }
        s.cps[..t - n].fill(0);
        clock.lap(Stage::Normalize);

        // 2. Token + position embeddings.
        let tok = m.matrix(&m.tok);
        let pos = m.matrix(&m.pos);
        let comp = m.tok_comp.as_ref().map(|c| m.matrix(c));
        for p in 0..t {
            let row = cfg.mapping.row(s.cps[p], cfg.embedding_rows) as usize;
            let xp = &mut s.x[p * d..(p + 1) * d];
            kern.dequant_row(&tok, row, xp);
            if let Some(comp) = &comp {
                // The quantised table's mean error over this row's group of 32 (format.md §7).
                kern.add_row(comp, row / laya_format::COMP_GROUP_ROWS as usize, xp);
            }
            kern.add_row(&pos, p, xp);
        }
        clock.lap(Stage::Embed);

        // 3. Pre-norm blocks. The last block only needs the last position's output.
        let nl = m.layers.len();
        for (li, l) in m.layers.iter().enumerate() {
            let first = if li + 1 == nl { t - 1 } else { 0 };
            let np = t - first;

            for p in 0..t {
                let r = p * d..(p + 1) * d;
                kern.layer_norm(&s.x[r.clone()], &l.attn_norm_w, &l.attn_norm_b, cfg.eps, &mut s.h[r]);
            }
            clock.lap(Stage::AttnNorm);

            let q8 = |w: &Mat| q8n(w, np);
            let (wk, wv, wq) = (m.matrix(&l.k), m.matrix(&l.v), m.matrix(&l.q));
            let (k8, v8) = (q8n(&l.k, t), q8n(&l.v, t));
            if k8 || v8 || q8(&l.q) {
                // Quantised once for all three projections (Q reads the rows from `first`).
                kern.quantize_act(&s.h[..t * d], &mut s.xq[..t * nbd]);
            }
            let xq = &s.xq[..t * nbd];
            linear(kern, &wk, l.k.packed.as_ref(), &s.h, xq, t, &l.k_b, &mut s.k, k8);
            linear(kern, &wv, l.v.packed.as_ref(), &s.h, xq, t, &l.v_b, &mut s.v, v8);
            linear(kern, &wq, l.q.packed.as_ref(), &s.h[first * d..], &xq[first * nbd..], np, &l.q_b, &mut s.q[first * d..], q8(&l.q));
            clock.lap(Stage::Qkv);

            kern.attention(&s.q[first * d..], &s.k, &s.v, np, t, d, heads, scale, &mut s.scores, &mut s.att[first * d..]);
            clock.lap(Stage::Attention);

            out_and_ffn(m, l, s, first, np, first, &q8, false, clock);
        }

        // 4. Final norm of the last position, then the two heads.
        run_heads(m, s, (t - 1) * d, &|w: &Mat| q8n(w, 1), clock);
        n
    }

    /// [`Session::forward_logits`] for a `relative_causal` model (docs/format.md §3): when the
    /// context is the previous one plus at most [`MAX_INCREMENTAL_CHARS`] characters, only the
    /// new positions go through the blocks, against the keys and values kept from before;
    /// otherwise the blocks run over the receptive field, each at the positions the output
    /// needs. Both ways compute every position with the same kernels and the same number of
    /// keys in the same order, so the result is the same to the bit.
    fn forward_causal(&mut self, context: &str, clock: &mut Clock) -> usize {
        let Session { model, s, act, .. } = self;
        let m: &Model = model;
        let cfg = &m.cfg;
        let (t, r) = (cfg.context_length, cfg.receptive_field);
        let int8 = *act != ActPrecision::F32;
        let all = *act == ActPrecision::Int8All;
        // One precision per layer whatever the number of positions (unlike learned models'
        // one-position rule), so that a position computed alone equals the same position
        // computed among others.
        let q8 = |w: &Mat| {
            int8 && match (&w.packed, w.ty) {
                (Some(_), _) | (None, WType::Q8_0) => true,
                (None, WType::Q4_0 | WType::Q4_1) => all,
                _ => false,
            }
        };

        // 1. Tokens: the last R + MAX_INCREMENTAL_CHARS normalised values, BOS in front when
        //    the context is shorter; and the last T characters for ranking, as learned models.
        let want = r + MAX_INCREMENTAL_CHARS;
        let kv = &mut s.kv;
        kv.cur.clear();
        for c in context.chars().rev() {
            if kv.cur.len() == want {
                break;
            }
            kv.cur.push(cfg.normalization.iter().fold(c, |c, r| r.apply(c)) as u32);
        }
        if kv.cur.len() < want {
            kv.cur.push(BOS);
        }
        kv.cur.reverse();
        let nt = kv.cur.len();
        let mut n = 0;
        for &tok in kv.cur.iter().rev().take(t) {
            if tok == BOS {
                break;
            }
            s.cps[t - 1 - n] = tok;
            n += 1;
        }
        s.cps[..t - n].fill(0);

        // 2. Does the stream extend the previous one? The kept state is a function of the
        //    previous stream's last R tokens; if they reappear k tokens before the end, only
        //    those k are new. BOS matches only BOS, so a short stream must align at its start.
        let mut step = 0;
        if kv.valid {
            let old = kv.toks.len();
            step = (1..=MAX_INCREMENTAL_CHARS).find(|&k| nt >= old + k && kv.cur[nt - k - old..nt - k] == kv.toks[..]).unwrap_or(0);
        }
        kv.reused = step > 0;
        clock.lap(Stage::Normalize);

        if step > 0 {
            for j in nt - step..nt {
                embed_token(m, s, s.kv.cur[j], 0);
                clock.lap(Stage::Embed);
                for (li, l) in m.layers.iter().enumerate() {
                    let kv = &mut s.kv;
                    if kv.len[li] == kv.cap {
                        // Full: the last T − 1 positions are all a new one can attend.
                        let (cap, d) = (kv.cap, cfg.d_model);
                        let base = li * cap * d;
                        let keep = (t - 1) * d;
                        kv.k.copy_within(base + cap * d - keep..base + cap * d, base);
                        kv.v.copy_within(base + cap * d - keep..base + cap * d, base);
                        kv.len[li] = t - 1;
                    }
                    let pos0 = s.kv.len[li];
                    causal_block(m, l, li, s, pos0, 1, 1, &q8, clock);
                    s.kv.len[li] = pos0 + 1;
                }
            }
        } else {
            let nf = nt.min(r);
            for p in 0..nf {
                embed_token(m, s, s.kv.cur[nt - nf + p], p);
            }
            clock.lap(Stage::Embed);
            let nl = m.layers.len();
            let mut n_in = nf;
            for (li, l) in m.layers.iter().enumerate() {
                // Block li's output is needed at the last (L−1−li)(T−1)+1 positions only.
                let n_q = n_in.min((nl - 1 - li) * (t - 1) + 1);
                causal_block(m, l, li, s, 0, n_in, n_q, &q8, clock);
                s.kv.len[li] = n_in;
                n_in = n_q;
            }
        }
        let kv = &mut s.kv;
        kv.toks.clear();
        kv.toks.extend_from_slice(&kv.cur[nt - nt.min(r)..]);
        kv.valid = true;

        run_heads(m, s, 0, &q8, clock);
        n
    }

    /// Top-k admissible (word, replace) pairs scored by the session's [`CompletionRule`],
    /// normalised over all admissible pairs (docs/format.md §3 step 6).
    fn rank(&mut self, n_chars: usize, k: usize, clock: &mut Clock) {
        let Session { model, s, completion_exponent, rule, punctuation_slot, personal, .. } = self;
        let blocked: &[bool] = &personal.blocked;
        let (beta, rule, punctuation_slot) = (*completion_exponent, *rule, *punctuation_slot);
        let m: &Model = model;
        let t = m.cfg.context_length;
        let Scratch {
            logits: pw, rlogits: pi, hits, fi: fis, ranges, share, word_scores, chunk_max, prior, prior_norm, suffix, cps, ..
        } = s;
        let Scratch { clogits: pc, class_state, class_tmp, touched, order, top, z, xq, rows_int8, word_rows, class_mass, .. } = s;
        class_mass.fill(0.0);
        let classes = m.classes.as_ref();
        hits.clear();
        if k == 0 {
            clock.lap(Stage::Rank);
            return;
        }
        // A factorised head's words get their P(w) when a class is first needed.
        let mut expand = |c: usize, pw: &mut [f32], state: &mut [u8]| {
            if let Some(wc) = classes {
                if state[c] == COLD {
                    *word_rows += expand_class(m, wc, c, z, xq, *rows_int8, pc[c], class_tmp, pw);
                    state[c] = EXPANDED;
                }
            }
        };

        let max_i = (pi.len() - 1).min(n_chars);
        let admissible = |i: usize, posn: usize| {
            let id = m.lexicon.id_at(posn);
            (m.lexicon.char_len(id) > i).then_some(id)
        };
        // The admissible words of `i >= 1` are those that start with the last `i` characters
        // and are longer than `i`: one sorted-lexicon range per `i`.
        let mut suffix_range = |i: usize| {
            suffix.clear();
            for &cp in &cps[t - i..t] {
                let c = char::from_u32(cp).unwrap_or(char::REPLACEMENT_CHARACTER);
                let mut buf = [0u8; 4];
                suffix.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
            m.lexicon.prefix_range(suffix)
        };
        let mut total = 0.0f32;
        for (i, &p_i) in pi.iter().enumerate().take(max_i + 1).skip(1) {
            let range = suffix_range(i);
            ranges[i] = range.clone();
            if let Some(wc) = classes {
                for id in range.clone().filter_map(|p| admissible(i, p)) {
                    expand(wc.class_of[id] as usize, pw, class_state);
                }
            }
            let mass: f32 = range.clone().filter_map(|p| admissible(i, p)).map(|id| pw[id]).sum();
            let fi = match rule {
                CompletionRule::Product if beta == 1.0 => p_i,
                CompletionRule::Product => p_i.powf(beta),
                // An empty or underflowed admissible set offers nothing to renormalise.
                CompletionRule::Conditional if mass > 0.0 => p_i / mass,
                CompletionRule::Marginal if mass > 0.0 => (p_i / mass).min(1.0),
                CompletionRule::Conditional | CompletionRule::Marginal => 0.0,
                CompletionRule::Split => p_i,
            };
            fis[i] = fi;
            if !prior.is_empty() {
                let weighted: f32 = range.clone().filter_map(|p| admissible(i, p)).map(|id| pw[id] * prior[id]).sum();
                prior_norm[i] = if weighted > 0.0 && weighted.is_finite() { mass / weighted } else { 1.0 };
            }
            match rule {
                CompletionRule::Marginal => {
                    total += mass * fi;
                    for id in range.filter_map(|p| admissible(i, p)) {
                        if share[id] == 0.0 && fi != 0.0 && classes.is_some() {
                            touched.push(id as u32);
                        }
                        share[id] += fi;
                    }
                }
                // A share of 1 takes the whole P(w) off the word's (w, 0) pair; a word whose
                // admissible P(i) all underflowed stays a next word.
                CompletionRule::Split if p_i > 0.0 => {
                    for id in range.filter_map(|p| admissible(i, p)) {
                        if share[id] == 0.0 && classes.is_some() {
                            touched.push(id as u32);
                        }
                        share[id] = 1.0;
                    }
                }
                _ => total += mass * fi,
            }
        }
        // i = 0: every word is admissible; it scores P(w)·(c0 − share), share being zero except
        // under the marginal and split rules.
        let c0 = if matches!(rule, CompletionRule::Marginal | CompletionRule::Split) { 1.0 } else { pi[0] };
        // The best punctuation candidate seen, kept off the bar (see `offer`).
        let mut best_punct = Hit { id: 0, replace: 0, score: f32::NEG_INFINITY };
        match classes {
            // One kernel pass scores the lexicon, sums the scores and keeps each run of 16's
            // maximum; a run touches the bar only when that maximum could enter it.
            None => {
                total += m.kernels.score_chunks(pw, share, c0, word_scores, chunk_max);
                let mut threshold = f32::NEG_INFINITY;
                for (chunk, &mx) in chunk_max.iter().enumerate() {
                    if mx > threshold {
                        for (j, &score) in word_scores[16 * chunk..pw.len().min(16 * chunk + 16)].iter().enumerate() {
                            if score > threshold {
                                offer(
                                    hits,
                                    k,
                                    Hit { id: (chunk * 16 + j) as u32, replace: 0, score },
                                    &m.lexicon,
                                    blocked,
                                    &mut best_punct,
                                );
                                if hits.len() == k {
                                    threshold = hits[k - 1].score;
                                }
                            }
                        }
                    }
                }
            }
            // Classes best first: no word of class c scores above P(c)·c0 (share ≥ 0), so
            // once the best class not yet ranked cannot beat the k-th candidate, none can.
            // The next-word mass Σ P(w)(c0 − share) is c0 less the shared part, since the
            // P(w) sum to one; the shared words are all in expanded classes.
            Some(wc) => {
                total += c0 - touched.iter().map(|&id| pw[id as usize] * share[id as usize]).sum::<f32>();
                let mut threshold = f32::NEG_INFINITY;
                // The margin covers the rounding of P(c)·P(w | c) against P(c).
                let beaten = |p: f32, threshold: f32| p * c0 * (1.0 + 1e-5) <= threshold;
                // Each run of 16 classes' largest P(c), in one vector pass: a run that cannot
                // enter the bar is skipped whole.
                let run_max = &mut chunk_max[..pc.len().div_ceil(16)];
                m.kernels.run_max(pc, run_max);
                let mut score_class = |c: usize, hits: &mut Vec<Hit>, threshold: &mut f32, class_state: &mut [u8], best_punct: &mut Hit| {
                    expand(c, pw, class_state);
                    class_state[c] = SCORED;
                    for &id in &wc.ids[wc.start[c]..wc.start[c + 1]] {
                        let score = pw[id as usize] * (c0 - share[id as usize]);
                        if score > *threshold {
                            offer(hits, k, Hit { id, replace: 0, score }, &m.lexicon, blocked, best_punct);
                            if hits.len() == k {
                                *threshold = hits[k - 1].score;
                            }
                        }
                    }
                };
                // First the best k + 3 classes, best first: typically enough to fill the bar
                // and raise the threshold past every other class.
                let first = (k + 3).min(pc.len());
                for (run, chunk) in pc.chunks(16).enumerate() {
                    if top.len() == first && run_max[run] <= top[first - 1].0 {
                        continue;
                    }
                    for (j, &p) in chunk.iter().enumerate() {
                        if top.len() < first || p > top[first - 1].0 {
                            if top.len() == first {
                                top.pop();
                            }
                            let at = top.partition_point(|&(q, _)| q >= p);
                            top.insert(at, (p, (run * 16 + j) as u32));
                        }
                    }
                }
                for &(p, c) in top.iter() {
                    if hits.len() == k && beaten(p, threshold) {
                        break;
                    }
                    score_class(c as usize, hits, &mut threshold, class_state, &mut best_punct);
                }
                top.clear();
                // Then any other class that could still beat the k-th candidate, best first;
                // few remain and fewer are taken, so each is picked by a scan, not a sort.
                order.clear();
                for (run, chunk) in pc.chunks(16).enumerate() {
                    if hits.len() == k && beaten(run_max[run], threshold) {
                        continue;
                    }
                    for (j, &p) in chunk.iter().enumerate() {
                        let c = run * 16 + j;
                        if class_state[c] != SCORED && !(hits.len() == k && beaten(p, threshold)) {
                            order.push(c as u32);
                        }
                    }
                }
                while let Some(at) = best_class(order, pc) {
                    let c = order[at] as usize;
                    if hits.len() == k && beaten(pc[c], threshold) {
                        break;
                    }
                    order.swap_remove(at);
                    score_class(c, hits, &mut threshold, class_state, &mut best_punct);
                }
                touched.clear();
            }
        }
        for i in 1..=max_i {
            let fi = fis[i];
            for posn in ranges[i].clone() {
                let Some(id) = admissible(i, posn) else { continue };
                share[id] = 0.0;
                // The completion prior moves P(w) between this class's words only.
                let pw_id = if prior.is_empty() { pw[id] } else { pw[id] * prior[id] * prior_norm[i] };
                let score = if rule == CompletionRule::Split {
                    // Σ P(j) over the j this word is admissible with; ranges[j] and posn
                    // index the same sorted lexicon.
                    let len = m.lexicon.char_len(id);
                    let norm: f32 = (1..=max_i).filter(|&j| len > j && ranges[j].contains(&posn)).map(|j| fis[j]).sum();
                    if norm > 0.0 {
                        let score = pw_id * (fi / norm);
                        total += score;
                        score
                    } else {
                        0.0
                    }
                } else {
                    pw_id * fi
                };
                class_mass[i] += score;
                offer(hits, k, Hit { id: id as u32, replace: i as u32, score }, &m.lexicon, blocked, &mut best_punct);
            }
        }
        // At most one punctuation candidate, and only where the session allows it.
        if punctuation_slot && best_punct.score > 0.0 {
            push_top(hits, k, best_punct);
        }
        class_mass[0] = total - class_mass[1..].iter().sum::<f32>();
        if total > 0.0 && total.is_finite() {
            for h in hits.iter_mut() {
                h.score /= total;
            }
            for m in class_mass.iter_mut() {
                *m = (*m / total).max(0.0);
            }
        }
        clock.lap(Stage::Rank);
    }
}

/// The final norm of the residual row at `last`, then the word and replace heads. A
/// factorised word head computes its class logits here and its words' logits in ranking
/// ([`expand_class`]), from the same `z` (and its int8 blocks in `xq`).
fn run_heads(m: &Model, s: &mut Scratch, last: usize, q8: &dyn Fn(&Mat) -> bool, clock: &mut Clock) {
    let (kern, d) = (m.kernels, m.cfg.d_model);
    kern.layer_norm(&s.x[last..last + d], &m.out_norm_w, &m.out_norm_b, m.cfg.eps, &mut s.z);
    clock.lap(Stage::OutputNorm);
    match &m.classes {
        None => {
            let int8 = q8(&m.output);
            quantize_if(kern, int8, &s.z, &mut s.xq);
            linear(kern, &m.matrix(&m.output), m.output.packed.as_ref(), &s.z, &s.xq, 1, &m.output_b, &mut s.logits, int8);
        }
        Some(wc) => {
            let int8 = q8(&wc.head);
            s.rows_int8 = wc.rows.first().is_some_and(|r| q8(&r.mat));
            s.word_rows = 0;
            quantize_if(kern, int8 || s.rows_int8, &s.z, &mut s.xq);
            linear(kern, &m.matrix(&wc.head), wc.head.packed.as_ref(), &s.z, &s.xq, 1, &wc.head_b, &mut s.clogits, int8);
        }
    }
    clock.lap(Stage::WordHead);
    kern.matmul(&m.matrix(&m.replace), &s.z, 1, Some(&m.replace_b), &mut s.rlogits);
    clock.lap(Stage::ReplaceHead);
}

/// Fills `pw` (by word id) with `P(w)` of the words of class `c` of a factorised head
/// (docs/format.md §3 step 5): their logits from the class's gathered rows, a softmax within
/// the class, times `P(c)` (a class of one word needs no row). Returns the rows computed.
#[allow(clippy::too_many_arguments)]
fn expand_class(
    m: &Model,
    wc: &WordClasses,
    c: usize,
    z: &[f32],
    xq: &[ActBlock],
    int8: bool,
    pc: f32,
    tmp: &mut [f32],
    pw: &mut [f32],
) -> usize {
    if wc.rows[c].mat.rows == 1 {
        // A word alone in its class has its class's probability: no row to compute.
        pw[wc.ids[wc.start[c]] as usize] = pc;
        return 0;
    }
    let y = class_logits(m, wc, c, z, xq, int8, tmp);
    m.kernels.softmax(y);
    for (&id, &p) in wc.ids[wc.start[c]..wc.start[c + 1]].iter().zip(y.iter()) {
        pw[id as usize] = p * pc;
    }
    y.len()
}

/// The word logits of class `c`'s words (in `wc.ids` order), from its gathered or packed rows,
/// into the front of `tmp`.
fn class_logits<'a>(m: &Model, wc: &WordClasses, c: usize, z: &[f32], xq: &[ActBlock], int8: bool, tmp: &'a mut [f32]) -> &'a mut [f32] {
    let rows = &wc.rows[c];
    let y = &mut tmp[..rows.mat.rows];
    if rows.data.is_empty() && !int8 {
        // f32 activations on a packed class: its rows one by one from the file's word head.
        let out = m.matrix(&m.output);
        let ids = &wc.ids[wc.start[c]..wc.start[c + 1]];
        for ((y, &id), b) in y.iter_mut().zip(ids).zip(&rows.bias) {
            let row = Matrix { rows: 1, data: out.row(id as usize), ..out };
            m.kernels.matmul(&row, z, 1, Some(std::slice::from_ref(b)), std::slice::from_mut(y));
        }
    } else {
        linear(m.kernels, &rows.matrix(), rows.mat.packed.as_ref(), z, &xq[..z.len() / QK], 1, &rows.bias, y, int8);
    }
    y
}

/// Writes the embedding of token `tok` (a normalised scalar value, or [`BOS`] = row 0) into
/// residual row `p` (relative_causal models: no position embedding).
fn embed_token(m: &Model, s: &mut Scratch, tok: u32, p: usize) {
    let (kern, cfg) = (m.kernels, &m.cfg);
    let d = cfg.d_model;
    let row = cfg.mapping.row(if tok == BOS { 0 } else { tok }, cfg.embedding_rows) as usize;
    let xp = &mut s.x[p * d..(p + 1) * d];
    kern.dequant_row(&m.matrix(&m.tok), row, xp);
    if let Some(comp) = &m.tok_comp {
        kern.add_row(&m.matrix(comp), row / laya_format::COMP_GROUP_ROWS as usize, xp);
    }
}

/// One pre-norm block of a relative_causal model over the `n_in` residual rows at the front of
/// `s.x`, whose positions in the block's key/value cache are `pos0..pos0 + n_in`: their keys
/// and values go into the cache, and the last `n_q` rows get queries, windowed attention (each
/// over the at most `T` cached positions ending at its own, oldest first, plus the block's
/// relative bias) and the FFN. Those `n_q` rows end at the front of `s.x`, the next block's
/// input.
#[allow(clippy::too_many_arguments)]
fn causal_block(
    m: &Model,
    l: &Layer,
    li: usize,
    s: &mut Scratch,
    pos0: usize,
    n_in: usize,
    n_q: usize,
    q8: &dyn Fn(&Mat) -> bool,
    clock: &mut Clock,
) {
    let (kern, cfg) = (m.kernels, &m.cfg);
    let (t, d, heads) = (cfg.context_length, cfg.d_model, cfg.heads);
    let (dh, nbd) = (d / heads, d / QK);
    let scale = 1.0 / (dh as f32).sqrt();
    let first = n_in - n_q;

    for p in 0..n_in {
        let r = p * d..(p + 1) * d;
        kern.layer_norm(&s.x[r.clone()], &l.attn_norm_w, &l.attn_norm_b, cfg.eps, &mut s.h[r]);
    }
    clock.lap(Stage::AttnNorm);

    let (k8, v8, qq8) = (q8(&l.k), q8(&l.v), q8(&l.q));
    if k8 || v8 || qq8 {
        kern.quantize_act(&s.h[..n_in * d], &mut s.xq[..n_in * nbd]);
    }
    let base = li * s.kv.cap * d;
    let slot = base + pos0 * d..base + (pos0 + n_in) * d;
    let xq = &s.xq[..n_in * nbd];
    linear_rows(kern, &m.matrix(&l.k), l.k.packed.as_ref(), &s.h, xq, n_in, &l.k_b, &mut s.kv.k[slot.clone()], k8);
    linear_rows(kern, &m.matrix(&l.v), l.v.packed.as_ref(), &s.h, xq, n_in, &l.v_b, &mut s.kv.v[slot], v8);
    linear_rows(kern, &m.matrix(&l.q), l.q.packed.as_ref(), &s.h[first * d..], &xq[first * nbd..], n_q, &l.q_b, &mut s.q[..n_q * d], qq8);
    clock.lap(Stage::Qkv);

    let bias = &m.rel_bias[li * heads * t..(li + 1) * heads * t];
    for j in 0..n_q {
        let qp = pos0 + first + j;
        let k0 = (qp + 1).saturating_sub(t);
        let sc = &mut s.scores[..qp + 1 - k0];
        for h in 0..heads {
            let hs = h * dh..(h + 1) * dh;
            let qh = &s.q[j * d + hs.start..j * d + hs.end];
            for (i, key) in (k0..=qp).enumerate() {
                let kr = base + key * d;
                sc[i] = kern.dot(qh, &s.kv.k[kr + hs.start..kr + hs.end]) * scale + bias[h * t + (qp - key)];
            }
            kern.softmax(sc);
            let out = &mut s.att[j * d + hs.start..j * d + hs.end];
            out.fill(0.0);
            for (i, key) in (k0..=qp).enumerate() {
                let vr = base + key * d;
                kern.axpy(sc[i], &s.kv.v[vr + hs.start..vr + hs.end], out);
            }
        }
    }
    clock.lap(Stage::Attention);

    out_and_ffn(m, l, s, first, n_q, 0, q8, true, clock);
    s.x.copy_within(first * d..n_in * d, 0);
}

/// The rest of a block after attention, under both position schemes: the output projection of
/// `s.att` rows `att0..att0 + n` added to the residual rows `first..first + n` of `s.x`, then
/// the pre-norm FFN and its residual on those rows. `per_row` multiplies one position at a
/// time ([`linear_rows`]: relative_causal models, whose positions must not depend on how many
/// are computed together).
#[allow(clippy::too_many_arguments)]
fn out_and_ffn(
    m: &Model,
    l: &Layer,
    s: &mut Scratch,
    first: usize,
    n: usize,
    att0: usize,
    q8: &dyn Fn(&Mat) -> bool,
    per_row: bool,
    clock: &mut Clock,
) {
    let (kern, cfg) = (m.kernels, &m.cfg);
    let (d, f) = (cfg.d_model, l.up.rows);
    let lin = if per_row { linear_rows } else { linear };
    let rows = first * d..(first + n) * d;
    let att = &s.att[att0 * d..(att0 + n) * d];
    quantize_if(kern, q8(&l.o), att, &mut s.xq);
    lin(kern, &m.matrix(&l.o), l.o.packed.as_ref(), att, &s.xq, n, &l.o_b, &mut s.tmp[..n * d], q8(&l.o));
    kern.add(&s.tmp[..n * d], &mut s.x[rows.clone()]);
    clock.lap(Stage::AttnOut);

    for j in 0..n {
        let p = first + j;
        kern.layer_norm(&s.x[p * d..(p + 1) * d], &l.ffn_norm_w, &l.ffn_norm_b, cfg.eps, &mut s.h[j * d..(j + 1) * d]);
    }
    clock.lap(Stage::FfnNorm);
    let hidden = &mut s.ffn[..n * f];
    quantize_if(kern, q8(&l.up), &s.h[..n * d], &mut s.xq);
    lin(kern, &m.matrix(&l.up), l.up.packed.as_ref(), &s.h[..n * d], &s.xq, n, &l.up_b, hidden, q8(&l.up));
    clock.lap(Stage::FfnUp);
    match cfg.activation {
        Activation::GeluTanh => kern.gelu_tanh(hidden),
        Activation::Relu => kern.relu(hidden),
    }
    clock.lap(Stage::Activation);
    quantize_if(kern, q8(&l.down), hidden, &mut s.xq);
    lin(kern, &m.matrix(&l.down), l.down.packed.as_ref(), hidden, &s.xq, n, &l.down_b, &mut s.tmp[..n * d], q8(&l.down));
    kern.add(&s.tmp[..n * d], &mut s.x[rows]);
    clock.lap(Stage::FfnDown);
}

/// [`linear`] one position at a time. The kernels pick their tiling by the number of positions,
/// and a different tiling sums in a different order; relative_causal models compute a position
/// alone when it is typed and among others when a context is computed whole, and both must
/// give the same bits.
#[allow(clippy::too_many_arguments)]
#[inline]
fn linear_rows(
    kern: Kernels,
    w: &Matrix,
    packed: Option<&Packed>,
    x: &[f32],
    xq: &[ActBlock],
    n_pos: usize,
    b: &[f32],
    y: &mut [f32],
    int8: bool,
) {
    if int8 && packed.is_some() {
        return linear(kern, w, packed, x, xq, n_pos, b, y, int8);
    }
    let (cols, rows) = (w.cols, w.rows);
    for p in 0..n_pos {
        let xr = if int8 { &[][..] } else { &x[p * cols..(p + 1) * cols] };
        let xqr = if int8 { &xq[p * cols / QK..(p + 1) * cols / QK] } else { &[][..] };
        linear(kern, w, packed, xr, xqr, 1, b, &mut y[p * rows..(p + 1) * rows], int8);
    }
}

/// Quantises the rows `x` into the front of `xq` when the next layer takes the int8 path.
#[inline]
fn quantize_if(kern: Kernels, yes: bool, x: &[f32], xq: &mut [ActBlock]) {
    if yes {
        kern.quantize_act(x, &mut xq[..x.len() / QK]);
    }
}

/// `y = x·Wᵀ + b` over `n_pos` rows: in integer arithmetic from the already quantised `xq`
/// when `int8` (from the packed copy of the weights when the model made one), otherwise from
/// the f32 rows `x`.
#[allow(clippy::too_many_arguments)]
#[inline]
fn linear(
    kern: Kernels,
    w: &Matrix,
    packed: Option<&Packed>,
    x: &[f32],
    xq: &[ActBlock],
    n_pos: usize,
    b: &[f32],
    y: &mut [f32],
    int8: bool,
) {
    if int8 {
        let xq = &xq[..n_pos * w.cols / QK];
        match packed {
            Some(Packed::Q8(p)) => kern.matmul_q8_packed(p, xq, n_pos, Some(b), y),
            Some(Packed::Q4(p)) => kern.matmul_q4_packed(p, xq, n_pos, Some(b), y),
            None => kern.matmul_q8(w, xq, n_pos, Some(b), y),
        }
    } else {
        kern.matmul(w, x, n_pos, Some(b), y);
    }
}

/// Where in `order` the class with the largest `p` is; among equal `p` the lower class index,
/// as in ranking's first pass. `None` when `order` is empty.
fn best_class(order: &[u32], p: &[f32]) -> Option<usize> {
    let key = |at: usize| (p[order[at] as usize], order[at]);
    (0..order.len()).reduce(|best, at| {
        let ((pb, cb), (pa, ca)) = (key(best), key(at));
        if pa.total_cmp(&pb).then(cb.cmp(&ca)).is_gt() {
            at
        } else {
            best
        }
    })
}

/// Offers a candidate to the bar: a word competes for the top `k`; a punctuation word only for
/// `best_punct`, which ranking adds at the end when the session has a punctuation slot.
#[inline]
fn offer(hits: &mut Vec<Hit>, k: usize, h: Hit, lexicon: &Lexicon, blocked: &[bool], best_punct: &mut Hit) {
    if lexicon.is_punct(h.id as usize) {
        if h.score > best_punct.score {
            *best_punct = h;
        }
    } else if blocked.get(h.id as usize) == Some(&true) {
        // The user blocked this word: never on the bar.
    } else {
        push_top(hits, k, h);
    }
}

/// Keeps `hits` sorted best-first with at most `k` entries. Ties keep the earlier hit, so
/// results are deterministic.
#[inline]
pub(crate) fn push_top(hits: &mut Vec<Hit>, k: usize, h: Hit) {
    if hits.len() == k {
        match hits.last() {
            Some(last) if h.score > last.score => {
                hits.pop();
            }
            _ => return,
        }
    }
    let mut at = hits.len();
    while at > 0 && hits[at - 1].score < h.score {
        at -= 1;
    }
    hits.insert(at, h);
}

/// Accumulates time per stage when profiling; costs nothing else.
struct Clock {
    last: Option<Instant>,
    acc: [u64; Stage::COUNT],
}

impl Clock {
    fn new(on: bool) -> Clock {
        Clock { last: on.then(Instant::now), acc: [0; Stage::COUNT] }
    }

    #[inline]
    fn lap(&mut self, stage: Stage) {
        if let Some(last) = self.last {
            let now = Instant::now();
            self.acc[stage as usize] += (now - last).as_nanos() as u64;
            self.last = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::best_class;

    /// Taking `best_class` until `order` is empty visits the classes as a descending sort by
    /// probability, ties by class index, would.
    #[test]
    fn best_class_picks_in_descending_order_ties_to_the_lower_index() {
        let p = [0.1f32, 0.4, 0.4, 0.05, 0.3, 0.4, 0.0, 0.2];
        let mut order: Vec<u32> = vec![7, 5, 0, 2, 6, 4, 1, 3];
        let mut want = order.clone();
        want.sort_by(|&a, &b| p[b as usize].total_cmp(&p[a as usize]).then(a.cmp(&b)));
        let mut got = Vec::new();
        while let Some(at) = best_class(&order, &p) {
            got.push(order.swap_remove(at));
        }
        assert_eq!(got, want);
        assert_eq!(want[..3], [1, 2, 5]);
        assert_eq!(best_class(&[], &p), None);
    }
}
