//! The predictor interface and the keystroke-simulation harness of docs/evaluation.md §2.

use crate::segment::Segmenter;
use std::fmt;
use std::time::Instant;

/// One suggestion: `word` completes the last `replace` characters of the context (0 = a next
/// word), with probability `p`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Candidate {
    /// The suggested word.
    pub word: String,
    /// How many trailing context characters (scalar values) the word completes.
    pub replace: usize,
    /// Probability (normalised over the candidates the predictor considered).
    pub p: f32,
}

/// A predictor failed; the message says why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PredictError(pub String);

impl fmt::Display for PredictError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "prediction failed: {}", self.0)
    }
}

impl std::error::Error for PredictError {}

impl From<String> for PredictError {
    fn from(s: String) -> Self {
        PredictError(s)
    }
}

/// Anything that ranks candidates for a context: the Laya runtime (adapted by the CLI), the
/// n-gram baseline ([`crate::NgramPredictor`]), test doubles.
///
/// ```
/// use laya_text::{Candidate, PredictError, Predictor};
/// struct Always;
/// impl Predictor for Always {
///     fn predict(&mut self, _ctx: &str, k: usize, out: &mut Vec<Candidate>) -> Result<(), PredictError> {
///         out.clear();
///         out.extend(["the", "a"].iter().take(k).map(|w| Candidate { word: w.to_string(), replace: 0, p: 0.5 }));
///         Ok(())
///     }
/// }
/// let mut out = Vec::new();
/// Always.predict("", 5, &mut out).unwrap();
/// assert_eq!(out.len(), 2);
/// ```
pub trait Predictor {
    /// Clears `out` and fills it with at most `k` candidates for `context`, best first.
    fn predict(&mut self, context: &str, k: usize, out: &mut Vec<Candidate>) -> Result<(), PredictError>;

    /// Learns a line the person committed (docs/evaluation.md §4); returns the number of words learned.
    /// Predictors that do not learn keep the default, which learns nothing.
    fn learn(&mut self, _text: &str) -> Result<usize, PredictError> {
        Ok(0)
    }
}

/// Results of [`evaluate`]; serialises to exactly the keys docs/evaluation.md §2 names.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EvalReport {
    /// Words simulated.
    pub words: usize,
    /// Characters typed in full (every scalar value of every line, whitespace included).
    pub chars: usize,
    /// Keystroke savings rate, `1 - keystrokes / chars`.
    pub ksr: f64,
    /// Share of words that are the first candidate before any of their characters is typed.
    pub top1_k0: f64,
    /// Share of words among the first five candidates before any character is typed.
    pub top5_k0: f64,
    /// Over words of length ≥ 2: first candidate after their first character.
    pub top1_k1: f64,
    /// Over words of length ≥ 2: among the first five after their first character.
    pub top5_k1: f64,
    /// Share of words outside the lexicon.
    pub oov_rate: f64,
    /// Calls to the predictor.
    pub predictions: usize,
    /// Wall time of the whole run.
    pub seconds: f64,
    /// Where the top-5 misses come from, when asked for ([`evaluate_parallel`]'s `breakdown`);
    /// absent otherwise, so the default report has exactly docs/evaluation.md's keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breakdown: Option<Breakdown>,
}

/// How many candidates the harness asks for when it breaks the misses down: the five best
/// candidates *of one replace count* are looked for among the predictor's first `DEEP`.
pub const DEEP: usize = 64;

/// Where the top-5 misses of the next word (`k0`) and of the one-character completion (`k1`)
/// come from (`laya eval --breakdown`). For each, over the same words as `top5_k0` /
/// `top5_k1`: `oov + top5_alone + outranked = 1` and `top5 ≈ top5_alone − crowded_out`.
///
/// It tells a model's trainer which lever moves the metric: a bigger lexicon (`oov`), a
/// better ranking (`outranked`), or how the bar is shared between next words and completions
/// (`crowded_out`, the completion rule's business).
///
/// ```
/// use laya_text::{evaluate_parallel, Candidate, PredictError, Predictor, Segmenter, SegmentMode};
/// // Always shows one next word, then the completion "ab".
/// struct P;
/// impl Predictor for P {
///     fn predict(&mut self, _: &str, k: usize, out: &mut Vec<Candidate>) -> Result<(), PredictError> {
///         out.clear();
///         for (i, w) in ["x", "y", "z", "u", "v"].iter().enumerate().take(k) {
///             out.push(Candidate { word: w.to_string(), replace: 0, p: 0.1 - i as f32 * 0.01 });
///         }
///         if k > 5 {
///             out.push(Candidate { word: "ab".into(), replace: 1, p: 0.01 });
///         }
///         Ok(())
///     }
/// }
/// let seg = Segmenter::new(SegmentMode::Segmented);
/// let r = evaluate_parallel(1, &|| Ok(P), vec!["ab".into()], &seg, &|_| true, None, &|_| {}, true).unwrap();
/// let b = r.breakdown.unwrap();
/// assert_eq!((r.top5_k1, b.k1.top5_alone, b.k1.crowded_out), (0.0, 1.0, 1.0));
/// ```
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Breakdown {
    /// Before any character of the word is typed (the next word), over all words.
    pub k0: MissBreakdown,
    /// After its first character (the completion), over words of two characters or more.
    pub k1: MissBreakdown,
}

/// One row of a [`Breakdown`]: shares of the words it covers.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MissBreakdown {
    /// Outside the lexicon: no predictor over this lexicon can show them.
    pub oov: f64,
    /// Among the first five candidates *with this replace count* in the predictor's first
    /// [`DEEP`]: the top-5 rate if the whole bar went to candidates of this kind.
    pub top5_alone: f64,
    /// Among those five best of their kind but not on the bar: pushed off it by candidates of
    /// another replace count.
    pub crowded_out: f64,
    /// In the lexicon but not among the five best of their kind: ranked too low.
    pub outranked: f64,
}

/// Candidates the simulated person looks at.
pub const BAR: usize = 5;

fn rank_of(cands: &[Candidate], word: &str, replace: usize) -> Option<usize> {
    cands.iter().take(BAR).position(|c| c.replace == replace && c.word == word)
}

/// Runs the keystroke simulation of docs/evaluation.md §2 over `lines` (each line on its own: the context
/// never reaches into the previous line).
///
/// * `seg` splits each line into words ([`crate::SegmentMode::Segmented`] for gold text); the
///   typed text is [`Segmenter::typed_line`], whose whitespace and punctuation words
///   ([`laya_format::is_punctuation_word`]: a keyboard's own keys) are typed (1 keystroke per
///   character), never predicted and not counted in `words`.
/// * For each word W the harness asks for predictions at prefix lengths i = 0, 1, … as long as the
///   simulated person has not found W yet, and always at i = 0 and (for words of length ≥ 2)
///   i = 1, which the top-k rates need. A hit at i costs 1 keystroke (the tap) after the i typed;
///   a word never found costs its length.
/// * A word for which `in_lexicon` is false can never be picked (no hit), and counts as OOV.
/// * `limit` stops after that many lines (empty lines are skipped and not counted).
/// * `progress` is called once per line with the line's byte length + 1.
///
/// ```
/// use laya_text::{evaluate, Candidate, PredictError, Predictor, Segmenter, SegmentMode};
/// struct Nothing;
/// impl Predictor for Nothing {
///     fn predict(&mut self, _: &str, _: usize, out: &mut Vec<Candidate>) -> Result<(), PredictError> {
///         out.clear();
///         Ok(())
///     }
/// }
/// let seg = Segmenter::new(SegmentMode::Segmented);
/// let r = evaluate(&mut Nothing, ["ab c".to_string()].into_iter(), &seg, &|_| true, None, &mut |_| {}).unwrap();
/// assert_eq!((r.words, r.chars, r.ksr), (2, 4, 0.0));
/// ```
pub fn evaluate(
    pred: &mut dyn Predictor,
    lines: impl Iterator<Item = String>,
    seg: &Segmenter,
    in_lexicon: &dyn Fn(&str) -> bool,
    limit: Option<usize>,
    progress: &mut dyn FnMut(u64),
) -> Result<EvalReport, PredictError> {
    type_lines(pred, lines, seg, in_lexicon, limit, progress, false)
}

/// [`evaluate`] with learning (docs/evaluation.md §4, `laya eval --learn`): the lines are typed in order,
/// and after each typed line the predictor learns it ([`Predictor::learn`]), so nothing of a
/// line is learned before all its words were predicted. A word outside the lexicon counts as
/// OOV as before, but it is a hit when the predictor offers it (it can only have learned it).
///
/// ```
/// use laya_text::{evaluate_learning, Candidate, PredictError, Predictor, Segmenter, SegmentMode};
/// // Offers the words of the last line it learned.
/// #[derive(Default)]
/// struct Echo(Vec<String>);
/// impl Predictor for Echo {
///     fn predict(&mut self, _: &str, k: usize, out: &mut Vec<Candidate>) -> Result<(), PredictError> {
///         out.clear();
///         out.extend(self.0.iter().take(k).map(|w| Candidate { word: w.clone(), replace: 0, p: 0.2 }));
///         Ok(())
///     }
///     fn learn(&mut self, text: &str) -> Result<usize, PredictError> {
///         self.0 = text.split_whitespace().map(String::from).collect();
///         Ok(self.0.len())
///     }
/// }
/// let seg = Segmenter::new(SegmentMode::Segmented);
/// let lines = ["zq xv".to_string(), "zq xv".to_string()];
/// let r = evaluate_learning(&mut Echo::default(), lines.into_iter(), &seg, &|_| false, None, &mut |_| {}).unwrap();
/// assert_eq!((r.words, r.top5_k0, r.oov_rate), (4, 0.5, 1.0)); // the second line is all hits
/// ```
pub fn evaluate_learning(
    pred: &mut dyn Predictor,
    lines: impl Iterator<Item = String>,
    seg: &Segmenter,
    in_lexicon: &dyn Fn(&str) -> bool,
    limit: Option<usize>,
    progress: &mut dyn FnMut(u64),
) -> Result<EvalReport, PredictError> {
    type_lines(pred, lines, seg, in_lexicon, limit, progress, true)
}

/// [`evaluate`] and, with `learning`, [`evaluate_learning`]: one thread, lines in order.
fn type_lines(
    pred: &mut dyn Predictor,
    lines: impl Iterator<Item = String>,
    seg: &Segmenter,
    in_lexicon: &dyn Fn(&str) -> bool,
    limit: Option<usize>,
    progress: &mut dyn FnMut(u64),
    learning: bool,
) -> Result<EvalReport, PredictError> {
    let start = Instant::now();
    let mut tally = Tally::default();
    let mut scratch = Scratch::default();
    let mut n_lines = 0usize;
    for raw in lines {
        if limit.is_some_and(|l| n_lines >= l) {
            break;
        }
        progress(raw.len() as u64 + 1);
        if type_line(pred, &raw, seg, in_lexicon, &mut tally, &mut scratch, false, learning)? {
            n_lines += 1;
            if learning {
                let typed = seg.typed_line(raw.trim_end_matches(['\n', '\r']));
                pred.learn(&typed.text)?;
            }
        }
    }
    Ok(tally.report(start))
}

/// [`evaluate`] on `threads` threads, each typing whole lines with its own predictor from
/// `make` (a model session, or a copy of the n-gram baseline). The counts are sums over
/// lines, so the report equals [`evaluate`]'s on the same lines whatever the thread count
/// (only `seconds` differs). Lines are taken up to `limit` non-empty ones first, as there.
///
/// `breakdown` also fills [`EvalReport::breakdown`]: at i = 0 and i = 1 the predictor is asked
/// a second time, for [`DEEP`] candidates (not counted in `predictions`), which roughly doubles
/// the run time; every other figure is that of a run without it.
///
/// ```
/// use laya_text::{evaluate, evaluate_parallel, Candidate, PredictError, Predictor, Segmenter, SegmentMode};
/// // Always shows the word "c".
/// struct C;
/// impl Predictor for C {
///     fn predict(&mut self, _: &str, _: usize, out: &mut Vec<Candidate>) -> Result<(), PredictError> {
///         out.clear();
///         out.push(Candidate { word: "c".into(), replace: 0, p: 1.0 });
///         Ok(())
///     }
/// }
/// let seg = Segmenter::new(SegmentMode::Segmented);
/// let lines: Vec<String> = (0..50).map(|i| if i % 3 == 0 { "ab c".into() } else { "c d".into() }).collect();
/// let one = evaluate(&mut C, lines.clone().into_iter(), &seg, &|_| true, None, &mut |_| {}).unwrap();
/// let four = evaluate_parallel(4, &|| Ok(C), lines, &seg, &|_| true, None, &|_| {}, false).unwrap();
/// assert_eq!((one.words, one.ksr, one.top1_k0), (four.words, four.ksr, four.top1_k0));
/// ```
#[allow(clippy::too_many_arguments)] // evaluate's arguments plus the thread count and breakdown
pub fn evaluate_parallel<P: Predictor>(
    threads: usize,
    make: &(dyn Fn() -> Result<P, PredictError> + Sync),
    lines: Vec<String>,
    seg: &Segmenter,
    in_lexicon: &(dyn Fn(&str) -> bool + Sync),
    limit: Option<usize>,
    progress: &(dyn Fn(u64) + Sync),
    breakdown: bool,
) -> Result<EvalReport, PredictError> {
    let start = Instant::now();
    let mut lines = lines;
    if let Some(l) = limit {
        // Keep the first `l` non-empty lines and the empty ones between them.
        let mut seen = 0;
        let cut = lines
            .iter()
            .position(|raw| {
                let typed = !raw.trim_end_matches(['\n', '\r']).trim().is_empty();
                seen += usize::from(typed);
                typed && seen > l
            })
            .unwrap_or(lines.len());
        lines.truncate(cut);
    }
    // Small chunks from a shared cursor: lines differ a lot in length.
    const CHUNK: usize = 32;
    let cursor = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<Result<Tally, PredictError>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.max(1))
            .map(|_| {
                scope.spawn(|| {
                    let mut pred = make()?;
                    let (mut tally, mut scratch) = (Tally::default(), Scratch::default());
                    loop {
                        let at = cursor.fetch_add(CHUNK, std::sync::atomic::Ordering::Relaxed);
                        if at >= lines.len() {
                            return Ok(tally);
                        }
                        for raw in &lines[at..(at + CHUNK).min(lines.len())] {
                            progress(raw.len() as u64 + 1);
                            type_line(&mut pred, raw, seg, in_lexicon, &mut tally, &mut scratch, breakdown, false)?;
                        }
                    }
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|_| Err(PredictError("an evaluation thread panicked".into())))).collect()
    });
    let mut total = Tally::default();
    for r in results {
        total.add(&r?);
    }
    let mut report = total.report(start);
    if breakdown {
        report.breakdown = Some(total.breakdown());
    }
    Ok(report)
}

/// Integer counts of the harness; a report is a function of their sum.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Tally {
    words: usize,
    chars: usize,
    keystrokes: usize,
    predictions: usize,
    oov: usize,
    t1k0: usize,
    t5k0: usize,
    t1k1: usize,
    t5k1: usize,
    k1_words: usize,
    /// Out-of-lexicon words of two characters or more.
    k1_oov: usize,
    /// `[i]`: words among the five best of replace count `i` (the breakdown's deep call).
    alone: [usize; 2],
    /// `[i]`: of those, the ones not on the bar.
    crowded: [usize; 2],
}

impl Tally {
    fn add(&mut self, o: &Tally) {
        self.words += o.words;
        self.chars += o.chars;
        self.keystrokes += o.keystrokes;
        self.predictions += o.predictions;
        self.oov += o.oov;
        self.t1k0 += o.t1k0;
        self.t5k0 += o.t5k0;
        self.t1k1 += o.t1k1;
        self.t5k1 += o.t5k1;
        self.k1_words += o.k1_words;
        self.k1_oov += o.k1_oov;
        for i in 0..2 {
            self.alone[i] += o.alone[i];
            self.crowded[i] += o.crowded[i];
        }
    }

    fn breakdown(&self) -> Breakdown {
        let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        let row = |i: usize, n: usize, oov: usize| MissBreakdown {
            oov: ratio(oov, n),
            top5_alone: ratio(self.alone[i], n),
            crowded_out: ratio(self.crowded[i], n),
            outranked: ratio(n - oov - self.alone[i], n),
        };
        Breakdown { k0: row(0, self.words, self.oov), k1: row(1, self.k1_words, self.k1_oov) }
    }

    fn report(&self, start: Instant) -> EvalReport {
        let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        EvalReport {
            words: self.words,
            chars: self.chars,
            ksr: if self.chars == 0 { 0.0 } else { 1.0 - self.keystrokes as f64 / self.chars as f64 },
            top1_k0: ratio(self.t1k0, self.words),
            top5_k0: ratio(self.t5k0, self.words),
            top1_k1: ratio(self.t1k1, self.k1_words),
            top5_k1: ratio(self.t5k1, self.k1_words),
            oov_rate: ratio(self.oov, self.words),
            predictions: self.predictions,
            seconds: start.elapsed().as_secs_f64(),
            breakdown: None,
        }
    }
}

/// Buffers one typing thread reuses from line to line.
#[derive(Default)]
struct Scratch {
    out: Vec<Candidate>,
    deep: Vec<Candidate>,
    ctx: String,
}

/// Types one line into `tally`; false (and nothing counted) for a blank line. `learning`: a
/// word outside the lexicon is a hit when offered (the predictor learned it).
#[allow(clippy::too_many_arguments)]
fn type_line<P: Predictor + ?Sized>(
    pred: &mut P,
    raw: &str,
    seg: &Segmenter,
    in_lexicon: &dyn Fn(&str) -> bool,
    tally: &mut Tally,
    scratch: &mut Scratch,
    breakdown: bool,
    learning: bool,
) -> Result<bool, PredictError> {
    let Scratch { out, deep, ctx } = scratch;
    let raw = raw.trim_end_matches(['\n', '\r']);
    if raw.trim().is_empty() {
        return Ok(false);
    }
    let line = seg.typed_line(raw);
    let total = line.text.chars().count();
    tally.chars += total;
    let mut word_chars = 0;
    for r in &line.words {
        let w = &line.text[r.clone()];
        // Punctuation is typed with its own keys, like whitespace: never predicted.
        if laya_format::is_punctuation_word(w) {
            continue;
        }
        let wc: Vec<(usize, char)> = w.char_indices().collect();
        let n = wc.len();
        word_chars += n;
        tally.words += 1;
        let known = in_lexicon(w);
        if !known {
            tally.oov += 1;
        }
        if n >= 2 {
            tally.k1_words += 1;
            tally.k1_oov += usize::from(!known);
        }
        let mut found = false;
        for i in 0..n {
            if found && i >= 2 {
                break;
            }
            ctx.clear();
            ctx.push_str(&line.text[..r.start]);
            ctx.push_str(&w[..wc[i].0]);
            out.clear();
            pred.predict(ctx, BAR, out)?;
            tally.predictions += 1;
            let rank = if known || learning { rank_of(out, w, i) } else { None };
            match i {
                0 => {
                    tally.t1k0 += usize::from(rank == Some(0));
                    tally.t5k0 += usize::from(rank.is_some());
                }
                1 => {
                    tally.t1k1 += usize::from(rank == Some(0));
                    tally.t5k1 += usize::from(rank.is_some());
                }
                _ => {}
            }
            if breakdown && i < 2 && known {
                deep.clear();
                // Not counted in `predictions`: the docs/evaluation.md figures stay those of a plain run.
                pred.predict(ctx, DEEP, deep)?;
                let alone = deep.iter().take(DEEP).filter(|c| c.replace == i).take(BAR).any(|c| c.word == w);
                tally.alone[i] += usize::from(alone);
                tally.crowded[i] += usize::from(alone && rank.is_none());
            }
            if !found && rank.is_some() {
                found = true;
                tally.keystrokes += i + 1;
            }
        }
        if !found {
            tally.keystrokes += n;
        }
    }
    // Everything outside the predicted words (whitespace, punctuation) is typed, one keystroke each.
    tally.keystrokes += total - word_chars;
    Ok(true)
}
