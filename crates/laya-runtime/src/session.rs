//! One thread's view of a model: the public [`Session`], its settings, and what a prediction
//! returns. `predict` runs the forward pass (forward.rs, docs/format.md §3 steps 1–5) and the
//! ranking of candidates (rank.rs, step 6) in the session's scratch buffers (scratch.rs),
//! allocated once, then mixes in the learned history (personal.rs); it allocates nothing.

use std::ops::RangeInclusive;
use std::sync::Arc;

use crate::display::Shown;
use crate::forward;
use crate::model::Model;
use crate::ngram::{self, NgramInput, NgramScratch, DEFAULT_NGRAM_WEIGHT};
use crate::personal::Personal;
use crate::rank::{self, Ranking};
use crate::scratch::Hit;
use crate::scratch::Scratch;
pub use crate::settings::{ActPrecision, CompletionRule, MAX_INCREMENTAL_CHARS};
use crate::stages::{Clock, Stage, StageTimes};
use crate::user::{MixParams, User, DEFAULT_MIX};

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

/// One candidate word.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate<'a> {
    /// The word as shown: the model's lexicon word (or a learned word), in the case the person
    /// is typing in where the model's language has case ([`laya_format::display_case`]).
    pub word: &'a str,
    /// How many trailing characters of the context this word completes (0 = next word).
    pub replace: usize,
    /// Probability among all admissible (word, replace) pairs.
    pub p: f32,
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
    completion_prior: f32,
    ranking: Ranking,
    times: StageTimes,
    personal: Personal,
    shown: Shown,
    /// The n-gram's weight in the mix (used when the model has one).
    ngram_weight: f32,
    ngram: NgramScratch,
}

/// The candidates of one prediction, borrowed from the session until the next call.
pub struct Predictions<'a> {
    model: &'a Model,
    hits: &'a [Hit],
    /// Learned words on the bar and where each is in `user_text`.
    user_text: &'a str,
    user_spans: &'a [(u32, u32)],
    /// The candidates shown in another case than stored.
    shown: &'a Shown,
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
            if let Some(word) = self.shown.get(i) {
                return Candidate { word, replace: h.replace as usize, p: h.score };
            }
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
        let replace_classes = c.replace_classes;
        let s = Scratch::new(c, max_k);
        let personal = Personal::new(User::new(), DEFAULT_MIX, c, max_k);
        let shown = Shown::new(max_k, model.lexicon.max_char_len().max(crate::user::MAX_WORD_CHARS));
        let mut session = Session {
            model,
            s,
            max_k,
            profiling: false,
            act: ActPrecision::default(),
            completion_prior: DEFAULT_COMPLETION_PRIOR,
            ranking: Ranking { rule: CompletionRule::default(), completion_exponent: 1.0, punctuation_slot: false },
            times: StageTimes::default(),
            personal,
            shown,
            ngram_weight: DEFAULT_NGRAM_WEIGHT,
            ngram: NgramScratch::new(replace_classes),
        };
        session.refresh_prior();
        session
    }

    /// The weight `w` of the model's word trigram (docs/format.md §8), 0..=1: each candidate
    /// scores `(1 − w)·P_network + w·P_ngram`, the n-gram's part shared inside each replace
    /// class as the network shares it, except after a Han character, where the n-gram's own
    /// guess of how much of the word is typed counts (docs/architecture.md, "The n-gram beside
    /// the network"). Default [`DEFAULT_NGRAM_WEIGHT`]; 0 ranks by the network alone. No
    /// effect with a model without an n-gram. Values outside 0..=1 (or NaN) are clamped (NaN:
    /// the default).
    ///
    /// ```
    /// # let model = laya_runtime::Model::from_bytes(laya_format::write_model(
    /// #     &laya_format::testing::random_model(&Default::default(), 1, laya_format::GgmlType::F32).0,
    /// #     &laya_format::testing::random_model(&Default::default(), 1, laya_format::GgmlType::F32).1).unwrap()).unwrap();
    /// let mut s = laya_runtime::Session::new(model);
    /// s.set_ngram_weight(0.0);
    /// assert_eq!(s.ngram_weight(), 0.0);
    /// s.set_ngram_weight(7.0);
    /// assert_eq!(s.ngram_weight(), 1.0);
    /// ```
    pub fn set_ngram_weight(&mut self, w: f32) {
        self.ngram_weight = if w.is_nan() { DEFAULT_NGRAM_WEIGHT } else { w.clamp(0.0, 1.0) };
    }

    /// The n-gram's weight (see [`Session::set_ngram_weight`]).
    pub fn ngram_weight(&self) -> f32 {
        self.ngram_weight
    }

    /// Recomputes the per-word prior factors into the existing buffer.
    fn refresh_prior(&mut self) {
        // The shift is only computed (once per model) when a prior is asked for.
        let shift = if self.completion_prior != 0.0 { self.model.prior_shift() } else { &[] };
        rank::prior_factors(shift, self.completion_prior, &mut self.s.prior_factor);
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
        self.ranking.punctuation_slot = on;
    }

    /// Whether one punctuation candidate may join the bar (see [`Session::set_punctuation_slot`]).
    pub fn punctuation_slot(&self) -> bool {
        self.ranking.punctuation_slot
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
        kv.kept_tokens.clear();
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
        self.ranking.completion_exponent = if beta.is_nan() { 1.0 } else { beta.clamp(*range.start(), *range.end()) };
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
        self.ranking.rule = rule;
    }

    /// The completion rule (see [`Session::set_completion_rule`]).
    pub fn completion_rule(&self) -> CompletionRule {
        self.ranking.rule
    }

    /// The completion exponent `β` (see [`Session::set_completion_exponent`]).
    pub fn completion_exponent(&self) -> f32 {
        self.ranking.completion_exponent
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
                && a.memory.as_ref().map(|m| m.orders.len()) == b.memory.as_ref().map(|m| m.orders.len())
        };
        // The learned history belongs to the person, not the model: it stays; the marks of
        // blocked lexicon ids are rebuilt for the new lexicon.
        self.personal.blocked_seen = None;
        if same_shape {
            self.model = model;
            self.s.kv.valid = false;
            self.ngram.forget_pieces();
            self.refresh_prior();
        } else {
            let (profiling, act, ranking, lambda, ngram_weight) =
                (self.profiling, self.act, self.ranking, self.completion_prior, self.ngram_weight);
            let (user, mix) = (self.personal.user.clone(), self.personal.mix);
            *self = Session::with_max_k(model, self.max_k);
            self.personal = Personal::new(user, mix, &self.model.cfg, self.max_k);
            self.profiling = profiling;
            self.act = act;
            self.ranking = ranking;
            self.set_completion_prior(lambda);
            self.ngram_weight = ngram_weight;
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

    /// Touches every page of the model, packs its layers and every class of a factorised head
    /// (which the model otherwise does on a thread its second prediction starts, and class by
    /// class as predictions need them again) and runs a few predictions, so that the
    /// first real keystroke pays neither page faults, packing nor cold caches. After it no
    /// prediction allocates.
    pub fn warm_up(&mut self) {
        self.model.prefault();
        self.model.pack();
        for ctx in ["", "a", "今天", "hello wor", "😀"] {
            self.predict(ctx, 5);
        }
    }

    /// Ranks the `k` most likely candidates after `context` (the text before the cursor).
    /// Any string works: empty, long, control characters, NUL, emoji.
    pub fn predict(&mut self, context: &str, k: usize) -> Predictions<'_> {
        let k = k.min(self.max_k);
        Model::note_prediction(&self.model);
        let mut clock = Clock::new(self.profiling);
        let n_chars = forward::forward(&self.model, &mut self.s, self.act, context, &mut clock);
        self.personal.refresh_blocked(&self.model.lexicon);
        let personal = k > 0 && !self.personal.user.read().is_empty();
        let mix_ngram = k > 0 && self.ngram_weight > 0.0 && self.model.ngram.is_some();
        rank::rank(&self.model, &mut self.s, self.ranking, &self.personal.blocked, n_chars, k, &mut clock);
        if mix_ngram {
            self.mix_ngram(context, n_chars, k);
            clock.lap(Stage::Ngram);
        }
        if k > 0 {
            rank::clear_shares(&self.model, &mut self.s, n_chars);
        }
        self.personal.spans.clear();
        self.personal.text.clear();
        if personal {
            self.personal.personalise(&self.model.lexicon, &mut self.s, context, n_chars, k);
        }
        if self.model.lexicon.ignores_case() {
            let Personal { text, spans, .. } = &self.personal;
            let learned = |j: u32| {
                let (a, b) = spans[j as usize];
                &text[a as usize..b as usize]
            };
            self.shown.fill(&self.s.candidates, context, &self.model.lexicon, learned);
        } else {
            self.shown.clear();
        }
        if personal || self.model.lexicon.ignores_case() {
            clock.lap(Stage::Rank);
        }
        if self.profiling {
            self.times.predictions += 1;
            self.times.reused += u64::from(self.s.kv.reused);
            self.times.word_rows += self.s.word_rows as u64;
            self.times.add(&clock.acc);
        }
        let cjk = context.chars().rev().find(|c| !c.is_whitespace()).is_some_and(laya_format::punct::is_unspaced_script);
        Predictions {
            model: &self.model,
            hits: &self.s.candidates,
            cjk,
            user_text: &self.personal.text,
            user_spans: &self.personal.spans,
            shown: &self.shown,
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
                Some(id) => Some(u.logp(id)),
                None => (user.count(w) > 0.0).then(|| u.learned()),
            };
            crate::learn::cut(text, &score, u.unknown)
        };
        // Where the lexicon ignores case, a word it has is learned in the lexicon's form (`The`
        // at a sentence start counts for `the`).
        let words = ranges.into_iter().map(|r| match lex.ignores_case().then(|| lex.id_of(&text[r.clone()])).flatten() {
            Some(id) => lex.word(id),
            None => &text[r],
        });
        self.personal.user.write().learn_words(words)
    }

    /// The n-gram's best candidates after `context` mixed into the network's best `k`, each
    /// with the network's own probability, keeping the best `k` of the mixture.
    fn mix_ngram(&mut self, context: &str, n_chars: usize, k: usize) {
        let m = &*self.model;
        let Some(tables) = m.ngram.as_ref() else { return };
        let input = NgramInput { bytes: m.storage_bytes(), lexicon: &m.lexicon, normalization: &m.cfg.normalization, logp: m.word_logp() };
        let max_i = (m.cfg.replace_classes - 1).min(n_chars);
        let n = ngram::predict(tables, &input, &mut self.ngram, context, max_i);
        ngram::adds(&mut self.ngram, n, &self.s.replace_mass[..=max_i], ngram::mix_rule(context), self.ngram_weight);
        // A candidate the network did not rank among its best `k` joins the mix with its own
        // network probability, so the mix's best `k` are those of every word either side
        // offers. Where that probability needs a class of the word head that ranking left
        // unexpanded, the class is expanded only if the candidate could still beat the
        // network's k-th candidate, which keeps at least its own score in the mix.
        let (ng, s, w) = (&mut self.ngram, &mut self.s, self.ngram_weight);
        let kth = if s.candidates.len() == k { s.candidates[k - 1].score } else { 0.0 };
        ng.net.clear();
        for j in 0..n {
            let (_, pos, i) = ng.scored[j];
            let id = m.lexicon.id_at(pos as usize) as u32;
            let ranked = s.candidates.iter().any(|h| h.id == id && h.replace == i);
            let beaten = |bound: f32| (1.0 - w) * bound * (1.0 + 1e-5) + ng.add[j] <= (1.0 - w) * kth;
            let net = if ranked || ng.add[j] <= 0.0 || rank::pair_bound(m, s, self.ranking, pos as usize).is_some_and(beaten) {
                0.0
            } else {
                rank::pair_score(m, s, self.ranking, n_chars, pos as usize, i as usize)
            };
            ng.net.push(net);
        }
        let (last_chars, blocked) = (&self.s.last_chars, &self.personal.blocked);
        let admit = |id: usize, i: usize| rank::on_bar(m, last_chars, blocked, n_chars, id, i);
        ngram::mix(&self.ngram, n, &m.lexicon, &mut self.s.candidates, self.ngram_weight, k, admit);
    }

    /// Raw outputs of the last prediction: word probabilities `P(w)` and replace-class
    /// probabilities `P(i)`. With a factorised word head only the words of the classes that
    /// ranking expanded have their `P(w)` here (the others hold stale values); use
    /// [`Session::logits`] for the whole distribution. For parity tests and tools.
    pub fn last_distributions(&self) -> (&[f32], &[f32]) {
        (&self.s.word_probs, &self.s.replace_probs)
    }

    /// The network's probability mass on each replace class in the last prediction (entry `i`:
    /// the candidates completing the last `i` typed characters; 0 where none may reach the
    /// bar), the mass the learned history mixes into. For tools that mix other predictors in
    /// the same way (`laya eval --predictor interpolated`).
    ///
    /// ```
    /// # let model = laya_runtime::Model::from_bytes(laya_format::write_model(
    /// #     &laya_format::testing::random_model(&Default::default(), 1, laya_format::GgmlType::F32).0,
    /// #     &laya_format::testing::random_model(&Default::default(), 1, laya_format::GgmlType::F32).1).unwrap()).unwrap();
    /// let mut s = laya_runtime::Session::new(model);
    /// let bar: f32 = s.predict("今天", 64).iter().filter(|c| c.replace == 0).map(|c| c.p).sum();
    /// // The bar holds part of the next words' mass; the class holds all of it.
    /// assert!(s.last_replace_mass()[0] + 1e-6 >= bar);
    /// assert!(s.last_replace_mass().iter().sum::<f32>() <= 1.0 + 1e-5);
    /// ```
    pub fn last_replace_mass(&self) -> &[f32] {
        &self.s.replace_mass
    }

    /// Runs the network on `context` and returns the word logits and the replace logits
    /// (before softmax), for parity tests against other implementations. With a factorised
    /// word head the word vector is `ln P(w)` for every word (class log-probability plus the
    /// word's log-probability within its class), computed whole: the quantity two
    /// implementations of such a model can compare, since its raw logits are only defined up
    /// to a constant per class.
    pub fn logits(&mut self, context: &str) -> (Vec<f32>, Vec<f32>) {
        let mut clock = Clock::new(false);
        forward::forward_logits(&self.model, &mut self.s, self.act, context, &mut clock);
        if let Some(wc) = self.model.classes.as_ref() {
            forward::word_log_probs(&self.model, wc, &mut self.s);
        }
        (self.s.word_probs.clone(), self.s.replace_probs.clone())
    }
}

#[cfg(test)]
mod tests {
    use laya_format::testing::{random_model, TinyConfig};
    use laya_format::{write_model, GgmlType};

    use super::*;

    /// `rank::pair_score` is ranking's own scoring, as the n-gram's mix needs it: every pair
    /// ranking put on the bar gets the score ranking gave it, and the scores of every
    /// admissible pair sum to one, for each completion rule, with and without the completion
    /// prior, flat and factorised heads (whose classes it expands when ranking did not).
    #[test]
    fn pair_scores_are_rankings_scores() {
        let rules = [CompletionRule::Split, CompletionRule::Marginal, CompletionRule::Conditional, CompletionRule::Product];
        let mut checked = 0;
        for (classes, ty) in [(0, GgmlType::F32), (12, GgmlType::F32), (12, GgmlType::Q8_0)] {
            let cfg = TinyConfig { word_classes: classes, ..TinyConfig::default() };
            let (mut meta, tensors) = random_model(&cfg, 5, ty);
            // Words that repeat their first character, so that typing it twice makes a word
            // admissible with one and with two typed characters.
            let mut words: Vec<String> = meta.words.iter().map(String::from).collect();
            let n = words.len();
            for (slot, w) in words[n - 4..].iter_mut().zip(["啊啊啊", "啊啊", "啊哦", "qqq"]) {
                *slot = w.to_string();
            }
            meta.words = words.iter().collect();
            meta.dict_frequencies =
                Some((0..meta.vocab_size() as u32).map(|i| if i % 5 == 0 { 0 } else { 1 + i * 7919 % 10_007 }).collect());
            let model = Model::from_bytes(write_model(&meta, &tensors).unwrap()).unwrap();
            let lex = &model.lexicon;
            let position_of = |id: u32| (0..lex.len()).find(|&p| lex.id_at(p) == id as usize).unwrap();
            // Contexts ending in the first characters of lexicon words, so completions exist.
            let mut contexts = vec![String::new(), "hello wor".to_string()];
            contexts.extend((0..lex.len()).step_by(7).map(|id| format!("今天{}", lex.word(id).chars().next().unwrap())));
            // A character typed twice: the words it starts are admissible with one and with
            // two typed characters, so the split rule divides them between both.
            contexts.extend((0..lex.len()).step_by(11).map(|id| format!("今天{0}{0}", lex.word(id).chars().next().unwrap())));
            contexts.extend(["今天啊啊", "啊", "qq"].map(String::from));
            let mut session = Session::new(model.clone());
            for lambda in [0.0, 1.0] {
                session.set_completion_prior(lambda);
                for rule in rules {
                    session.set_completion_rule(rule);
                    for context in &contexts {
                        let mut clock = Clock::new(false);
                        let n_chars = forward::forward(&model, &mut session.s, session.act, context, &mut clock);
                        rank::rank(&model, &mut session.s, session.ranking, &[], n_chars, 8, &mut clock);
                        let hits = session.s.candidates.clone();
                        let score =
                            |s: &mut Session, posn: usize, i: usize| rank::pair_score(&model, &mut s.s, s.ranking, n_chars, posn, i);
                        for h in &hits {
                            let got = score(&mut session, position_of(h.id), h.replace as usize);
                            assert!((got - h.score).abs() <= 1e-6 + 1e-4 * h.score, "{rule:?} λ {lambda} {context:?} {h:?}: {got}");
                        }
                        let max_i = (session.s.replace_probs.len() - 1).min(n_chars);
                        let mut sum = 0.0f64;
                        for i in 0..=max_i {
                            for posn in 0..lex.len() {
                                sum += f64::from(score(&mut session, posn, i));
                            }
                        }
                        assert!((sum - 1.0).abs() < 1e-5, "{rule:?} λ {lambda} {context:?}: pair scores sum to {sum}");
                        if rule == CompletionRule::Split && lambda == 0.0 {
                            // Split gives each word's P(w) whole to its pairs: the scores need
                            // no normalising, and a word's pairs sum to its P(w).
                            assert!((session.s.rank_total - 1.0).abs() < 1e-5, "{context:?}: total {}", session.s.rank_total);
                            for posn in 0..lex.len() {
                                let own: f32 = (0..=max_i).map(|i| score(&mut session, posn, i)).sum();
                                let pw = session.s.word_probs[lex.id_at(posn)];
                                assert!(
                                    (own - pw).abs() <= 1e-6 + 1e-4 * pw,
                                    "{context:?} {}: pairs {own}, P(w) {pw}",
                                    lex.word(lex.id_at(posn))
                                );
                            }
                        }
                        rank::clear_shares(&model, &mut session.s, n_chars);
                        assert!(session.s.completion_share.iter().all(|&x| x == 0.0));
                        checked += hits.len();
                    }
                }
            }
        }
        assert!(checked > 500, "{checked}");
    }
}
