//! Text for Laya's training and evaluation.
//!
//! * [`normalize_text`]: which of laya-format's character rules (docs/format.md §5) the text pipeline applies.
//! * [`Segmenter`]: words of raw text (jieba for Han, whitespace and punctuation otherwise) or of
//!   gold-segmented text, and the text as a person types it.
//! * Corpus preparation ([`prepare_zh`], [`prepare_en`]) for `scripts/fetch-data.sh`.
//! * Lexicon building ([`build_lexicon`]) from corpus counts with the jieba dictionary as prior.
//! * Keyboard logs (docs/logs.md): [`read_events`], [`write_event`], [`simulate_events`]
//!   ([`simulate_events_parallel`] on several threads).
//! * The n-gram baseline [`NgramPredictor`] and the docs/evaluation.md §2 harness [`evaluate`] over any
//!   [`Predictor`].
//!
//! ```
//! use laya_text::*;
//! let seg = Segmenter::new(SegmentMode::Segmented);
//! let train = ["the cat sat", "the cat ran", "a dog sat"];
//! let mut ngram = NgramPredictor::train(train.iter().map(|s| s.to_string()), &seg, None, &mut |_| {});
//! let report = evaluate(&mut ngram, ["the cat sat".to_string()].into_iter(), &seg, &|_| true, None, &mut |_| {}).unwrap();
//! assert!(report.ksr > 0.0);
//! ```

#![deny(missing_docs)]

mod corpus;
mod eval;
mod lexicon;
mod logs;
mod ngram;
mod normalize;
mod segment;

pub use corpus::{
    brown_genre, parse_brown_line, parse_peoples_daily_line, prepare_en, prepare_zh, EnReport, FileStats, PrepareError, ZhReport,
};
pub use eval::{
    evaluate, evaluate_learning, evaluate_parallel, Breakdown, Candidate, EvalReport, MissBreakdown, PredictError, Predictor, BAR, DEEP,
};
pub use lexicon::{
    build_lexicon, count_inner_words, count_words, coverage, is_valid_word, merge_dicts, read_dict, Counts, Coverage, DictError, Lexicon,
    LexiconError, LexiconOptions, LOWERCASE_SHARE, MAX_WORD_CHARS, MERGED_DICT_TOTAL, MIN_EDITED_LOWERCASE,
};
pub use logs::{
    parse_event, read_events, simulate_events, simulate_events_parallel, write_event, Event, EventErrorKind, LogError, OnError, ReadStats,
    Shown, SimulateError, SimulateStats, LOG_VERSION,
};
pub use ngram::{NgramError, NgramPredictor};
pub use normalize::{normalize_text, TEXT_RULES};
pub use segment::{is_han, is_unspaced_script, SegmentMode, Segmenter, TypedLine};

/// Adapts an [`indicatif::ProgressBar`] to the `progress` callbacks of this crate (they report
/// bytes read), so the CLI can pass `&mut laya_text::progress_bar(&bar)`.
///
/// ```
/// let bar = indicatif::ProgressBar::hidden();
/// let mut cb = laya_text::progress_bar(&bar);
/// cb(10);
/// assert_eq!(bar.position(), 10);
/// ```
pub fn progress_bar(bar: &indicatif::ProgressBar) -> impl FnMut(u64) + '_ {
    move |n| bar.inc(n)
}
