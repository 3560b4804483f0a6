//! Word segmentation.
//!
//! A *word* is a non-empty sequence of non-whitespace characters. Punctuation marks are words
//! too, so the lexicon and the network know where a sentence ends, but a keyboard types them
//! with its own keys: the runtime does not offer them by default and the evaluation types them
//! without predicting them (`laya_format::is_punctuation_word`). Whitespace is never part of a
//! word; it is typed, never predicted.
//!
//! Two modes:
//! * [`SegmentMode::Auto`] — for raw text. Whitespace separates; inside a whitespace-free run,
//!   runs of Han ideographs go to the `jieba-rs` dictionary segmenter (its embedded dictionary,
//!   HMM off so the result only contains dictionary words or single characters); runs of letters
//!   and digits form one word, keeping an inner `'`, `’`, `-` or `.` between two alphanumerics
//!   (`don't`, `term-end`, `3.5`); every other character (punctuation, symbols, emoji) is a word
//!   of its own, except that a run of the same character (`——`, `……`, `...`) stays one word.
//! * [`SegmentMode::Segmented`] — gold segmentation: words are separated by spaces. The spaces
//!   are segmentation marks, so the *typed* text drops a space when a character on either side
//!   belongs to a script written without spaces (Han, kana, CJK punctuation, full-width forms):
//!   `中国 人民` is typed `中国人民`, `New York` stays `New York`.

use std::ops::Range;

/// How lines are split into words. See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentMode {
    /// Raw text: whitespace, punctuation, and the jieba dictionary segmenter for Han runs.
    Auto,
    /// Gold segmentation: words separated by whitespace.
    Segmented,
}

/// A line as the simulated person types it, with the byte ranges of its words.
///
/// Invariant: words are non-empty, in order, non-overlapping, contain no whitespace, and every
/// character of `text` outside the words is whitespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypedLine {
    /// The characters typed for this line (whitespace included).
    pub text: String,
    /// Byte ranges of the words in `text`.
    pub words: Vec<Range<usize>>,
}

impl TypedLine {
    /// The words as string slices.
    pub fn word_strs(&self) -> impl Iterator<Item = &str> {
        self.words.iter().map(move |r| &self.text[r.clone()])
    }
}

/// Splits text into words (see the module docs for the rules).
///
/// ```
/// use laya_text::{Segmenter, SegmentMode};
/// let seg = Segmenter::new(SegmentMode::Auto);
/// assert_eq!(seg.words("Hello, world!"), vec!["Hello", ",", "world", "!"]);
/// let gold = Segmenter::new(SegmentMode::Segmented);
/// let line = gold.typed_line("中国 人民 ， New York");
/// assert_eq!(line.text, "中国人民，New York");
/// assert_eq!(line.word_strs().collect::<Vec<_>>(), vec!["中国", "人民", "，", "New", "York"]);
/// ```
pub struct Segmenter {
    mode: SegmentMode,
    jieba: Option<jieba_rs::Jieba>,
}

impl std::fmt::Debug for Segmenter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segmenter").field("mode", &self.mode).finish()
    }
}

pub use laya_format::punct::{is_han, is_unspaced_script};

impl Segmenter {
    /// A segmenter in the given mode. `Auto` loads jieba's embedded dictionary (a few hundred
    /// milliseconds); `Segmented` needs nothing.
    pub fn new(mode: SegmentMode) -> Self {
        let jieba = match mode {
            SegmentMode::Auto => Some(jieba_rs::Jieba::new()),
            SegmentMode::Segmented => None,
        };
        Segmenter { mode, jieba }
    }

    /// An `Auto` segmenter whose Han runs are cut with these words alone: the most probable
    /// sequence of them under their counts, a character outside them a word of its own (jieba's
    /// algorithm, without its dictionary). A runtime that carries only a model's lexicon can cut
    /// text the same way. Words with whitespace or a count of 0 are left out.
    ///
    /// ```
    /// use laya_text::Segmenter;
    /// let seg = Segmenter::with_dictionary([("今天", 10), ("天气", 10), ("今", 1), ("天", 1)]).unwrap();
    /// assert_eq!(seg.words("今天天气好"), vec!["今天", "天气", "好"]);
    /// // Only these words: jieba's dictionary would cut 今天 | 天气.
    /// let odd = Segmenter::with_dictionary([("天天", 10)]).unwrap();
    /// assert_eq!(odd.words("今天天气"), vec!["今", "天天", "气"]);
    /// ```
    pub fn with_dictionary<'a>(words: impl IntoIterator<Item = (&'a str, u64)>) -> std::io::Result<Self> {
        let mut dict = String::new();
        for (w, n) in words {
            if n > 0 && !w.is_empty() && !w.chars().any(char::is_whitespace) {
                dict.push_str(&format!("{w} {n}\n"));
            }
        }
        let jieba = jieba_rs::Jieba::with_dict(&mut dict.as_bytes()).map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(Segmenter { mode: SegmentMode::Auto, jieba: Some(jieba) })
    }

    /// The mode this segmenter was built with.
    pub fn mode(&self) -> SegmentMode {
        self.mode
    }

    /// The words of `line`, in order.
    pub fn words<'a>(&self, line: &'a str) -> Vec<&'a str> {
        let mut out = Vec::new();
        self.word_ranges(line, &mut out);
        out.into_iter().map(|r| &line[r]).collect()
    }

    /// Byte ranges of the words of `text` (raw-text rules in `Auto` mode, whitespace splitting in
    /// `Segmented` mode), appended to `out`.
    pub fn word_ranges(&self, text: &str, out: &mut Vec<Range<usize>>) {
        let mut run_start: Option<usize> = None;
        for (i, c) in text.char_indices() {
            if c.is_whitespace() {
                if let Some(s) = run_start.take() {
                    self.split_run(text, s, i, out);
                }
            } else if run_start.is_none() {
                run_start = Some(i);
            }
        }
        if let Some(s) = run_start {
            self.split_run(text, s, text.len(), out);
        }
    }

    fn split_run(&self, text: &str, start: usize, end: usize, out: &mut Vec<Range<usize>>) {
        match (&self.jieba, self.mode) {
            (Some(jieba), SegmentMode::Auto) => {
                let mut cut = |han: &str, out: &mut Vec<Range<usize>>| {
                    out.extend(jieba.cut(han, false).into_iter().map(|t| t.byte_start..t.byte_end))
                };
                laya_format::punct::split_run(&text[start..end], start, &mut cut, out);
            }
            _ => out.push(start..end),
        }
    }

    /// The line as typed, with its words. In `Auto` mode the text is `line` itself; in
    /// `Segmented` mode it is the words joined as described in the module docs.
    pub fn typed_line(&self, line: &str) -> TypedLine {
        match self.mode {
            SegmentMode::Auto => {
                let mut words = Vec::new();
                self.word_ranges(line, &mut words);
                TypedLine { text: line.to_string(), words }
            }
            SegmentMode::Segmented => {
                let mut text = String::with_capacity(line.len());
                let mut words = Vec::new();
                let mut prev_last: Option<char> = None;
                for w in line.split_whitespace() {
                    if let (Some(p), Some(f)) = (prev_last, w.chars().next()) {
                        if !is_unspaced_script(p) && !is_unspaced_script(f) {
                            text.push(' ');
                        }
                    }
                    let s = text.len();
                    text.push_str(w);
                    words.push(s..text.len());
                    prev_last = w.chars().last();
                }
                TypedLine { text, words }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::OnceLock;

    fn auto() -> &'static Segmenter {
        static S: OnceLock<Segmenter> = OnceLock::new();
        S.get_or_init(|| Segmenter::new(SegmentMode::Auto))
    }

    #[test]
    fn english_rules() {
        assert_eq!(
            auto().words("I don't like term-end exams... 3.5 times!!"),
            vec!["I", "don't", "like", "term-end", "exams", "...", "3.5", "times", "!!"]
        );
        assert_eq!(auto().words("'quoted'"), vec!["'", "quoted", "'"]);
    }

    #[test]
    fn chinese_uses_dictionary() {
        let w = auto().words("我们今天去北京，好吗？");
        assert_eq!(w.concat(), "我们今天去北京，好吗？");
        assert!(w.contains(&"北京"), "{w:?}");
        assert!(w.contains(&"，"));
    }

    #[test]
    fn mixed_scripts() {
        assert_eq!(auto().words("用iPhone拍照"), vec!["用", "iPhone", "拍照"]);
    }

    #[test]
    fn segmented_spacing() {
        let s = Segmenter::new(SegmentMode::Segmented);
        let l = s.typed_line("  1998年  新年 讲话 ( 附 图片 1 张 ) Windows 98 ");
        assert_eq!(l.text, "1998年新年讲话(附图片1张) Windows 98");
        assert_eq!(l.words.len(), 11);
    }

    proptest! {
        #[test]
        fn auto_covers_all_non_whitespace(s in "[a-z 中国人民,.'\\-！1-9😀\t]{0,40}") {
            let l = auto().typed_line(&s);
            prop_assert_eq!(&l.text, &s);
            let mut last = 0;
            for r in &l.words {
                prop_assert!(r.start >= last && r.end > r.start);
                prop_assert!(s[last..r.start].chars().all(char::is_whitespace));
                prop_assert!(!s[r.clone()].chars().any(char::is_whitespace));
                last = r.end;
            }
            prop_assert!(s[last..].chars().all(char::is_whitespace));
        }

        #[test]
        fn segmented_keeps_words(words in proptest::collection::vec("[a-z中国]{1,4}", 0..8)) {
            let s = Segmenter::new(SegmentMode::Segmented);
            let l = s.typed_line(&words.join(" "));
            let got: Vec<&str> = l.word_strs().collect();
            prop_assert_eq!(got, words.iter().map(String::as_str).collect::<Vec<_>>());
        }
    }
}
