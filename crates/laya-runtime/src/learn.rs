//! Cutting committed text into the words the history learns (docs/personalisation.md): the
//! word rules of `laya_format::punct::split_run`, with each Han run cut as jieba cuts one,
//! into the pieces of highest unigram probability, here over the model's lexicon (its
//! dictionary frequencies) and the words already learned.

use std::ops::Range;

/// Longest dictionary word tried when cutting a Han run, in characters.
pub(crate) const LONGEST: usize = 8;

/// A whole commit of this many Han characters or fewer that the dictionary can only cut into
/// single characters (a name, a new term typed character by character) is learned as one word.
const PHRASE: usize = 6;

/// The byte ranges of the words of `text`, in order. `logp` gives a word's log-probability
/// (`None`: not a word); a single character that is not a word scores `unknown`.
pub(crate) fn cut(text: &str, logp: &dyn Fn(&str) -> Option<f32>, unknown: f32) -> Vec<Range<usize>> {
    let trimmed = text.trim();
    let n = trimmed.chars().count();
    if (2..=PHRASE).contains(&n) && trimmed.chars().all(laya_format::punct::is_han) && logp(trimmed).is_none() {
        let pieces = cut_han(trimmed, logp, unknown);
        if pieces.iter().all(|r| trimmed[r.clone()].chars().count() == 1) {
            let start = text.len() - text.trim_start().len();
            return std::iter::once(start..start + trimmed.len()).collect();
        }
    }
    let mut out = Vec::new();
    let mut cut = |han: &str, out: &mut Vec<Range<usize>>| out.extend(cut_han(han, logp, unknown));
    let mut at = 0;
    for run in text.split(char::is_whitespace) {
        if !run.is_empty() {
            laya_format::punct::split_run(run, at, &mut cut, &mut out);
        }
        at += run.len();
        at += text[at..].chars().next().map_or(0, char::len_utf8);
    }
    out
}

fn cut_han(han: &str, logp: &dyn Fn(&str) -> Option<f32>, unknown: f32) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut lookup = |w: &str| logp(w).map_or(Lookup::Prefix, Lookup::Word);
    cut_han_into(han, &mut lookup, unknown, &mut HanCut::default(), &mut out);
    out
}

/// What a dictionary knows of a piece of text, for [`cut_han_into`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Lookup {
    /// A word, with its log-probability.
    Word(f32),
    /// Not a word, but longer pieces may be (or the dictionary cannot tell).
    Prefix,
    /// No word starts with it: longer pieces need not be looked up.
    Absent,
}

/// The buffers of [`cut_han_into`], kept by a caller that cuts at every keystroke.
#[derive(Default)]
pub(crate) struct HanCut {
    /// `(n + 1)` byte offsets of the characters of the run and its end.
    bounds: Vec<usize>,
    /// `(n + 1)` per prefix of `j` characters: the log-probability of its best cut and where
    /// that cut's last piece starts.
    best: Vec<(f32, usize)>,
}

impl HanCut {
    /// Buffers for runs of up to `chars` characters: cutting one allocates nothing.
    pub(crate) fn with_capacity(chars: usize) -> HanCut {
        HanCut { bounds: Vec::with_capacity(chars + 1), best: Vec::with_capacity(chars + 1) }
    }
}

/// Appends to `out` the ranges (relative to `han`) of the most probable cut of a Han run into
/// pieces of at most [`LONGEST`] characters scored by `lookup`, a single character that is no
/// word scoring `unknown`: jieba's algorithm, over whatever dictionary `lookup` reads. Of equal
/// cuts, the one whose last piece is longest.
pub(crate) fn cut_han_into(han: &str, lookup: &mut dyn FnMut(&str) -> Lookup, unknown: f32, buf: &mut HanCut, out: &mut Vec<Range<usize>>) {
    let HanCut { bounds, best } = buf;
    bounds.clear();
    bounds.extend(han.char_indices().map(|(b, _)| b).chain([han.len()]));
    let n = bounds.len() - 1;
    best.clear();
    best.resize(n + 1, (f32::NEG_INFINITY, 0usize));
    best[0] = (0.0, 0);
    // Forward over the pieces starting at each character, shortest first, so that a piece no
    // word starts with ends the search from there; for a given end, pieces from further back
    // (longer) are offered first and kept on a tie.
    for i in 0..n {
        let from = best[i].0;
        for len in 1..=LONGEST.min(n - i) {
            let j = i + len;
            let (score, stop) = match lookup(&han[bounds[i]..bounds[j]]) {
                Lookup::Word(p) => (Some(p), false),
                Lookup::Prefix => ((len == 1).then_some(unknown), false),
                Lookup::Absent => ((len == 1).then_some(unknown), true),
            };
            if let Some(score) = score {
                if from + score > best[j].0 {
                    best[j] = (from + score, i);
                }
            }
            if stop {
                break;
            }
        }
    }
    // The pieces, found last first, are written in place in reverse and then turned around.
    let from = out.len();
    let mut j = n;
    while j > 0 {
        let i = best[j].1;
        out.push(bounds[i]..bounds[j]);
        j = i;
    }
    out[from..].reverse();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words<'a>(text: &'a str, dict: &[(&str, f32)]) -> Vec<&'a str> {
        let logp = |w: &str| dict.iter().find(|d| d.0 == w).map(|d| d.1);
        cut(text, &logp, -20.0).into_iter().map(|r| &text[r]).collect()
    }

    const DICT: [(&str, f32); 11] = [
        ("今天", -6.0),
        ("我们", -5.0),
        ("讨论", -8.0),
        ("光", -9.0),
        ("光标", -12.0),
        ("标的", -13.0),
        ("的", -3.0),
        ("默认", -10.0),
        ("位置", -9.0),
        ("默认位", -19.0),
        ("置", -11.0),
    ];

    #[test]
    fn han_runs_take_the_most_probable_cut() {
        assert_eq!(words("今天我们讨论光标的默认位置", &DICT), ["今天", "我们", "讨论", "光标", "的", "默认", "位置"]);
        assert_eq!(words("hello, 光标 don't!!", &DICT), ["hello", ",", "光标", "don't", "!!"]);
        assert_eq!(words("", &DICT), Vec::<&str>::new());
    }

    #[test]
    fn a_short_unknown_commit_is_one_word() {
        assert_eq!(words(" 拉雅 ", &DICT), ["拉雅"]);
        // Known pieces are kept apart; a long sentence is never one word.
        assert_eq!(words("今天拉雅", &DICT), ["今天", "拉", "雅"]);
        assert_eq!(words("拉雅拉雅拉雅拉", &DICT).len(), 7);
    }
}
