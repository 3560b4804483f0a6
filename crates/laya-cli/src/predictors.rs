//! The predictors `laya predict` and `laya eval` can run: the model, the n-gram baseline, or the
//! two interpolated.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use laya_runtime::{Model, Session};
use laya_text::{Candidate, NgramPredictor, PredictError, Predictor};

use crate::CliError;

/// Which predictor to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// The Laya model (the embedded default, or --model).
    Model,
    /// The word n-gram baseline (--ngram FILE, made by `laya ngram`).
    Ngram,
    /// The model's network and the --ngram file interpolated, `(1 − w)·P_model + w·P_ngram`
    /// with w = --ngram-weight: the naive twin of the trigram a model file carries (`laya
    /// attach-ngram`), which is left out here.
    Interpolated,
}

/// `--activations` of `predict`, `eval` and `bench`.
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct ActivationsArg {
    /// Activations of quantised (Q8_0, Q4_0, Q4_1) layers: `int8` where this CPU's int8
    /// kernels are faster (every Q8_0 layer with AVX-512 VNNI / AVX-VNNI, every 4-bit layer
    /// with AVX2, the one-position Q8_0 layers elsewhere), `int8-all` in every such layer on
    /// any CPU (what VNNI CPUs compute), `f32` dequantised weights times f32.
    #[arg(long, default_value = "int8")]
    pub activations: laya_runtime::ActPrecision,
}

/// `--punctuation-slot` of `predict` and `eval`.
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct PunctuationArg {
    /// Allow one punctuation candidate on the bar (by default none: a keyboard types
    /// punctuation with its own keys); after Chinese text it takes its Chinese form (`，`).
    #[arg(long)]
    pub punctuation_slot: bool,
}

/// `--completion-*` of `predict` and `eval`: how the word and replace heads make the bar.
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct CompletionArgs {
    /// Exponent β of `--completion-rule product`: a completion of the typed characters scores
    /// P(w)·P(i)^β (smaller shows more completions; 0..=1).
    #[arg(long, default_value_t = 1.0, value_parser = completion_exponent)]
    pub completion_exponent: f32,
    /// Weight λ of the completion prior (models made with `laya prior`): a word completing the
    /// typed characters gets its P(w) times (dictionary share / corpus share)^λ, renormalised
    /// among those words; 0 ranks completions by the network alone (0..=2).
    #[arg(long, default_value_t = laya_runtime::DEFAULT_COMPLETION_PRIOR, value_parser = completion_prior)]
    pub completion_prior: f32,
    /// How the word and replace heads combine (docs/format.md §3 step 6): `split` offers a word
    /// that starts with the typed text only as a completion, P(w) split by P(i); `marginal`
    /// splits each word's P(w) between next word and completion; `product` = P(w)·P(i)^β;
    /// `conditional` = P(i)·P(w) renormalised over the words that start with the typed text.
    #[arg(long, default_value = "split")]
    pub completion_rule: laya_runtime::CompletionRule,
}

impl CompletionArgs {
    pub fn apply(&self, session: &mut Session) {
        session.set_completion_exponent(self.completion_exponent);
        session.set_completion_rule(self.completion_rule);
        session.set_completion_prior(self.completion_prior);
    }
}

/// The ranking options `predict` and `serve` share, so both answer alike.
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct Tuning {
    #[command(flatten)]
    pub completion: CompletionArgs,
    #[command(flatten)]
    pub act: ActivationsArg,
    #[command(flatten)]
    pub punct: PunctuationArg,
    #[command(flatten)]
    pub mix: MixArgs,
    /// The n-gram's weight w (0..=1): of the word trigram a model file carries (`laya
    /// attach-ngram`; 0 ranks by the network alone), and of --ngram's in `--predictor
    /// interpolated`.
    #[arg(long, default_value_t = laya_runtime::DEFAULT_NGRAM_WEIGHT, value_parser = ngram_weight)]
    pub ngram_weight: f32,
}

impl Tuning {
    /// Checks the options once, before any session is made.
    pub fn check(&self) -> Result<laya_runtime::MixParams, CliError> {
        self.mix.params()
    }

    /// Sets the options on `session`; `mix` is what [`Tuning::check`] returned.
    pub fn apply(&self, session: &mut Session, mix: laya_runtime::MixParams) {
        self.completion.apply(session);
        session.set_act_precision(self.act.activations);
        session.set_punctuation_slot(self.punct.punctuation_slot);
        session.set_mix(mix);
        session.set_ngram_weight(self.ngram_weight);
    }
}

/// `--completion-exponent`: refused outside the range, where the session would clamp it silently.
fn completion_exponent(s: &str) -> Result<f32, String> {
    in_range(s, laya_runtime::COMPLETION_EXPONENT_RANGE)
}

/// `--completion-prior`: refused outside the range, where the session would clamp it silently.
fn completion_prior(s: &str) -> Result<f32, String> {
    in_range(s, laya_runtime::COMPLETION_PRIOR_RANGE)
}

fn in_range(s: &str, range: std::ops::RangeInclusive<f32>) -> Result<f32, String> {
    let (lo, hi) = (range.start(), range.end());
    match s.trim().parse::<f32>() {
        Ok(v) if range.contains(&v) => Ok(v),
        Ok(_) => Err(format!("must be between {lo} and {hi} (inclusive)")),
        Err(_) => Err(format!("not a number; expected one between {lo} and {hi} (inclusive)")),
    }
}

/// The model behind the harness's `Predictor` trait (allocates only for the owned strings the
/// harness keeps; the engine itself does not).
pub struct ModelPredictor {
    pub session: Session,
}

impl Predictor for ModelPredictor {
    fn predict(&mut self, context: &str, k: usize, out: &mut Vec<Candidate>) -> Result<(), PredictError> {
        out.clear();
        for c in self.session.predict(context, k).iter() {
            out.push(Candidate { word: c.word.to_string(), replace: c.replace, p: c.p });
        }
        Ok(())
    }

    fn learn(&mut self, text: &str) -> Result<usize, PredictError> {
        Ok(self.session.learn(text))
    }
}

/// The n-gram baseline given the model's learned history (`laya eval --learn`, `laya predict
/// --predictor ngram` with learning): the same words learned (cut by the session) and the same
/// mix (`laya_runtime::mix_candidates`), applied to the n-gram's candidates. The n-gram's mass
/// on each replace class is estimated from its best [`LEARNING_NGRAM_DEPTH`] candidates.
pub struct LearningNgram {
    pub ngram: NgramPredictor,
    /// Cuts learned text and holds the history; its network is not asked.
    pub session: Session,
    buf: Vec<Candidate>,
}

/// Candidates of the n-gram looked at when mixing in the history.
pub const LEARNING_NGRAM_DEPTH: usize = 32;

impl LearningNgram {
    pub fn new(ngram: NgramPredictor, session: Session) -> LearningNgram {
        LearningNgram { ngram, session, buf: Vec::with_capacity(LEARNING_NGRAM_DEPTH) }
    }
}

impl Predictor for LearningNgram {
    fn predict(&mut self, context: &str, k: usize, out: &mut Vec<Candidate>) -> Result<(), PredictError> {
        let user = self.session.user().read();
        if user.is_empty() {
            return self.ngram.predict(context, k, out);
        }
        self.ngram.predict(context, LEARNING_NGRAM_DEPTH, &mut self.buf)?;
        let classes = self.session.model().config().replace_classes;
        let mut mass = vec![0.0f32; classes];
        for c in &self.buf {
            if let Some(m) = mass.get_mut(c.replace) {
                *m += c.p;
            }
        }
        let cands: Vec<(String, usize, f32)> = self.buf.iter().map(|c| (c.word.clone(), c.replace, c.p)).collect();
        out.clear();
        for (word, replace, p) in laya_runtime::mix_candidates(&user, &self.session.mix(), context, &cands, &mass, k) {
            if !user.is_blocked(&word) {
                out.push(Candidate { word, replace, p });
            }
        }
        Ok(())
    }

    fn learn(&mut self, text: &str) -> Result<usize, PredictError> {
        Ok(self.session.learn(text))
    }
}

/// Candidates of the model that [`Interpolated`] mixes: the probability of a word beyond
/// them is too small to reach a five-word bar. Of the n-gram it mixes the best
/// [`laya_runtime::NGRAM_DEPTH`], as the runtime's mix does.
pub const INTERPOLATION_DEPTH: usize = 64;

/// How [`Interpolated`] mixes the n-gram in (`--ngram-mix`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum NgramMix {
    /// `linear` where the context ends in a Han character (where the n-gram's guesses of where
    /// the word starts help), `within-class` anywhere else: the best of both on the dev texts.
    HanLinear,
    /// `(1 − w)·p_model + w·p_ngram`: the n-gram's own idea of how much of a word is typed
    /// counts too.
    Linear,
    /// Inside each replace class, as the learned history mixes: the network keeps its mass
    /// `M_i` on the class, the n-gram moves probability among the class's words,
    /// `(1 − w)·p_model + w·M_i·p_ngram / Σ_class p_ngram`.
    WithinClass,
}

/// The model's and the n-gram's candidates mixed (`laya eval --predictor interpolated`) over
/// the best [`INTERPOLATION_DEPTH`] of the model and [`laya_runtime::NGRAM_DEPTH`] of the
/// n-gram, a candidate missing from one list
/// counting 0 there; [`NgramMix`] says how.
pub struct Interpolated {
    pub model: ModelPredictor,
    pub ngram: NgramPredictor,
    /// `w`, the n-gram's weight (0..=1).
    pub weight: f32,
    pub mix: NgramMix,
    from_model: Vec<Candidate>,
    from_ngram: Vec<Candidate>,
    /// Per replace class: the n-gram's mass on it among its candidates.
    ngram_mass: Vec<f32>,
    scores: HashMap<(String, usize), f32>,
}

impl Interpolated {
    /// `model`'s session ranks by its network alone here, whatever n-gram its file carries:
    /// this is the naive twin of that n-gram's mix.
    pub fn new(mut model: ModelPredictor, ngram: NgramPredictor, weight: f32, mix: NgramMix) -> Interpolated {
        model.session.set_ngram_weight(0.0);
        Interpolated {
            model,
            ngram,
            weight,
            mix,
            from_model: Vec::new(),
            from_ngram: Vec::new(),
            ngram_mass: Vec::new(),
            scores: HashMap::new(),
        }
    }
}

impl Predictor for Interpolated {
    fn predict(&mut self, context: &str, k: usize, out: &mut Vec<Candidate>) -> Result<(), PredictError> {
        self.model.predict(context, INTERPOLATION_DEPTH, &mut self.from_model)?;
        self.ngram.predict(context, laya_runtime::NGRAM_DEPTH, &mut self.from_ngram)?;
        self.scores.clear();
        for c in &self.from_model {
            *self.scores.entry((c.word.clone(), c.replace)).or_default() += (1.0 - self.weight) * c.p;
        }
        let mix = match self.mix {
            NgramMix::HanLinear if context.chars().next_back().is_some_and(laya_text::is_han) => NgramMix::Linear,
            NgramMix::HanLinear => NgramMix::WithinClass,
            m => m,
        };
        match mix {
            NgramMix::Linear => {
                for c in &self.from_ngram {
                    *self.scores.entry((c.word.clone(), c.replace)).or_default() += self.weight * c.p;
                }
            }
            NgramMix::WithinClass | NgramMix::HanLinear => {
                let model_mass = self.model.session.last_replace_mass();
                self.ngram_mass.clear();
                self.ngram_mass.resize(model_mass.len(), 0.0);
                for c in &self.from_ngram {
                    if let Some(m) = self.ngram_mass.get_mut(c.replace) {
                        *m += c.p;
                    }
                }
                for c in &self.from_ngram {
                    let (Some(&net), Some(&own)) = (model_mass.get(c.replace), self.ngram_mass.get(c.replace)) else { continue };
                    if own > 0.0 {
                        *self.scores.entry((c.word.clone(), c.replace)).or_default() += self.weight * net * c.p / own;
                    }
                }
            }
        }
        let mut ranked: Vec<(&(String, usize), &f32)> = self.scores.iter().collect();
        // Ties (a weight of 0 or 1 leaves one side at 0) go to the model's order, then the word.
        let model_rank =
            |key: &(String, usize)| self.from_model.iter().position(|c| c.word == key.0 && c.replace == key.1).unwrap_or(usize::MAX);
        ranked.sort_by(|a, b| b.1.total_cmp(a.1).then_with(|| model_rank(a.0).cmp(&model_rank(b.0))).then_with(|| a.0.cmp(b.0)));
        out.clear();
        out.extend(ranked.into_iter().take(k).map(|((word, replace), &p)| Candidate { word: word.clone(), replace: *replace, p }));
        Ok(())
    }
}

/// `--ngram-weight` of `laya eval --predictor interpolated`.
pub fn ngram_weight(s: &str) -> Result<f32, String> {
    in_range(s, 0.0..=1.0)
}

/// `--mix-*` of `predict` and `eval`: how strongly the learned history weighs
/// (docs/personalisation.md, "How the history is mixed in").
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct MixArgs {
    /// Pair evidence (committed pairs after the previous word) at which the pair cache gets
    /// half of a replace class.
    #[arg(long, default_value_t = laya_runtime::DEFAULT_MIX.pair_evidence)]
    pub mix_pair_evidence: f64,
    /// The most the pair cache takes of a replace class (0..1).
    #[arg(long, default_value_t = laya_runtime::DEFAULT_MIX.pair_share)]
    pub mix_pair_share: f64,
    /// The most the word cache takes of what the pair cache leaves, for next words (0..1).
    #[arg(long, default_value_t = laya_runtime::DEFAULT_MIX.word_share)]
    pub mix_word_share: f64,
    /// The same for completions of typed characters (0..1).
    #[arg(long, default_value_t = laya_runtime::DEFAULT_MIX.completion_share)]
    pub mix_completion_share: f64,
    /// Word evidence (committed words that fit the class) at which the word cache gets half its share.
    #[arg(long, default_value_t = laya_runtime::DEFAULT_MIX.word_evidence)]
    pub mix_word_evidence: f64,
}

impl MixArgs {
    pub fn params(&self) -> Result<laya_runtime::MixParams, CliError> {
        let ok = |v: f64| v.is_finite() && v >= 0.0;
        let share = |v: f64| ok(v) && v <= 1.0;
        if !(ok(self.mix_pair_evidence)
            && ok(self.mix_word_evidence)
            && share(self.mix_word_share)
            && share(self.mix_completion_share)
            && share(self.mix_pair_share))
        {
            return Err(CliError("--mix-* values must be finite and non-negative, the shares at most 1".into()));
        }
        Ok(laya_runtime::MixParams {
            pair_evidence: self.mix_pair_evidence,
            pair_share: self.mix_pair_share,
            word_share: self.mix_word_share,
            completion_share: self.mix_completion_share,
            word_evidence: self.mix_word_evidence,
        })
    }
}

pub fn load_ngram(path: Option<&Path>) -> Result<NgramPredictor, CliError> {
    let path: PathBuf =
        path.map(Path::to_path_buf).ok_or_else(|| CliError("--predictor ngram needs --ngram FILE (train one with `laya ngram`)".into()))?;
    let f = std::fs::File::open(&path).map_err(|e| CliError(format!("cannot read {}: {e}", path.display())))?;
    NgramPredictor::load(std::io::BufReader::new(f)).map_err(|e| CliError(format!("{} is not a Laya n-gram file: {e}", path.display())))
}

/// A factory of n-gram predictors, one per worker thread of `laya eval` / `laya simulate`. The
/// file is loaded once here, so a bad file fails before any thread starts with a clear message;
/// the first call hands out that copy and later calls load their own.
pub fn ngram_factory(path: Option<&Path>) -> Result<impl Fn() -> Result<NgramPredictor, PredictError> + Sync + '_, CliError> {
    let first = std::sync::Mutex::new(Some(load_ngram(path)?));
    Ok(move || match first.lock().ok().and_then(|mut f| f.take()) {
        Some(p) => Ok(p),
        None => load_ngram(path).map_err(|e| PredictError(e.0)),
    })
}

/// `--threads`, or every core the process may use.
pub fn thread_count(threads: Option<u16>) -> usize {
    threads.map_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()), usize::from)
}

/// The model's lexicon as a set: what counts as in-vocabulary for both predictors, since the
/// baseline is trained with the model's lexicon as its vocabulary. With `fold`, the words folded
/// ([`laya_format::fold_case`]), for a model whose language ignores case.
pub fn lexicon_set(model: &Arc<Model>, fold: bool) -> HashSet<String> {
    let words = (0..model.lexicon_len()).filter_map(|i| model.word(i));
    if fold {
        // Membership is then asked of folded words (see `in_lexicon`).
        words.map(laya_format::fold_case).collect()
    } else {
        words.map(str::to_string).collect()
    }
}

/// Whether `word` is in `set` (from [`lexicon_set`]), in any case when `fold`.
pub fn in_lexicon(set: &HashSet<String>, fold: bool, word: &str) -> bool {
    if fold {
        set.contains(&laya_format::fold_case(word))
    } else {
        set.contains(word)
    }
}
