//! [`Strings`]: a list of strings kept in one buffer.
//!
//! A GGUF string array is a run of length-prefixed byte strings. A model's lexicon is one such
//! array of 20,000–50,000 words; reading it as a `Vec<String>` cost one allocation, one copy and
//! one UTF-8 check per word, about a third of the time a 20,000-word model took to load. Here the
//! strings share one buffer, validated as UTF-8 once, and are addressed by offsets. The strings
//! of a model compiled into the program are not copied at all (copying them out one by one cost
//! ~0.8 ms of a 50,000-word load): the list reads the GGUF run where the program holds it, each
//! string after its 8-byte length.

use std::borrow::Cow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::{Index, Range};

/// Strings kept in one buffer.
///
/// ```
/// use laya_format::Strings;
/// let mut s = Strings::new();
/// s.push("今天");
/// s.push("hello");
/// assert_eq!(s.len(), 2);
/// assert_eq!(&s[0], "今天");
/// assert_eq!(s.iter().collect::<Vec<_>>(), ["今天", "hello"]);
/// assert_eq!(s, Strings::from(vec!["今天".to_string(), "hello".to_string()]));
/// ```
#[derive(Clone)]
pub struct Strings {
    /// The strings, each at its span. Between two strings the buffer holds `gap` other bytes.
    buf: Cow<'static, str>,
    /// String `i` starts at `offsets[i]` and ends `gap` bytes before `offsets[i + 1]`;
    /// `offsets[len]` is the buffer's length plus `gap`. Borrowed from the program where an
    /// index made with the model holds them ([`Strings::run_starts`]).
    offsets: Cow<'static, [u32]>,
    /// 0 for strings back to back; [`GGUF_GAP`] for a GGUF string array kept as it is (each
    /// string after its `u64` length, the buffer starting with the first length).
    gap: u32,
}

/// The bytes before each string of a GGUF string array: its length as a `u64`.
pub(crate) const GGUF_GAP: u32 = 8;

/// Most bytes a [`Strings`] holds in total (offsets are `u32`).
pub const MAX_STRINGS_BYTES: usize = u32::MAX as usize - GGUF_GAP as usize;

impl Default for Strings {
    fn default() -> Self {
        Strings::new()
    }
}

impl Strings {
    /// An empty list.
    pub fn new() -> Strings {
        Strings { buf: Cow::Owned(String::new()), offsets: Cow::Owned(vec![0]), gap: 0 }
    }

    /// An empty list with room for `n` strings of `bytes` bytes in total.
    pub fn with_capacity(n: usize, bytes: usize) -> Strings {
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0);
        Strings { buf: Cow::Owned(String::with_capacity(bytes)), offsets: Cow::Owned(offsets), gap: 0 }
    }

    /// A GGUF string array's run in the program's own bytes (each string after its `u64`
    /// little-endian length), checked as UTF-8 whole, with `starts[i]` where string `i` starts
    /// in it and `starts[len]` the run's length plus 8, kept where it is. The caller
    /// guarantees that every length's bytes are ASCII (so each string begins and ends on a
    /// character boundary) and that the starts follow the lengths; debug builds check.
    pub(crate) fn from_gguf_run(run: &'static str, starts: Cow<'static, [u32]>) -> Strings {
        debug_assert_eq!(starts.last().copied(), Some(run.len() as u32 + GGUF_GAP));
        let list = Strings { buf: Cow::Borrowed(run), offsets: starts, gap: GGUF_GAP };
        debug_assert!((0..list.len()).all(|i| {
            let (s, b) = (list.span(i), list.buf.as_bytes());
            s.start >= 8 && b[s.start - 8..s.start] == (s.len() as u64).to_le_bytes() && list.buf.is_char_boundary(s.end)
        }));
        list
    }

    /// Builds a list from a buffer and the end offset of each string, checking that every
    /// offset is in order, in bounds and on a character boundary. `None` otherwise.
    ///
    /// ```
    /// use laya_format::Strings;
    /// let s = Strings::from_parts("明天hi".to_string(), vec![6, 8]).unwrap();
    /// assert_eq!(s.iter().collect::<Vec<_>>(), ["明天", "hi"]);
    /// assert!(Strings::from_parts("明天".to_string(), vec![1]).is_none());
    /// ```
    pub fn from_parts(buf: String, ends: Vec<u32>) -> Option<Strings> {
        let mut offsets = Vec::with_capacity(ends.len() + 1);
        offsets.push(0);
        offsets.extend_from_slice(&ends);
        Strings::from_offsets(buf, offsets)
    }

    /// The inverse of [`Strings::into_parts`]: a buffer and `len() + 1` offsets, the first 0
    /// and the last the buffer's length, checked as [`Strings::from_parts`] checks them, without
    /// copying either.
    ///
    /// ```
    /// use laya_format::Strings;
    /// let s = Strings::from_offsets("明天hi".to_string(), vec![0, 6, 8]).unwrap();
    /// assert_eq!(s.into_parts(), ("明天hi".to_string(), vec![0, 6, 8]));
    /// assert!(Strings::from_offsets("hi".to_string(), vec![1, 2]).is_none());
    /// ```
    pub fn from_offsets(buf: String, offsets: Vec<u32>) -> Option<Strings> {
        if buf.len() > MAX_STRINGS_BYTES || offsets.first() != Some(&0) {
            return None;
        }
        let mut prev = 0u32;
        for &e in &offsets {
            if e < prev || !buf.is_char_boundary(e as usize) {
                return None;
            }
            prev = e;
        }
        if prev as usize != buf.len() {
            return None;
        }
        Some(Strings { buf: Cow::Owned(buf), offsets: Cow::Owned(offsets), gap: 0 })
    }

    /// Appends a string (a list read from a GGUF file is first copied back to back).
    ///
    /// # Panics
    /// When the total would exceed [`MAX_STRINGS_BYTES`] (4 GiB).
    pub fn push(&mut self, s: &str) {
        if self.gap != 0 {
            *self = self.iter().collect();
        }
        let end = self.buf.len() + s.len();
        assert!(end <= MAX_STRINGS_BYTES, "Strings holds at most 4 GiB");
        self.buf.to_mut().push_str(s);
        self.offsets.to_mut().push(end as u32);
    }

    /// Number of strings.
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Whether there are no strings.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// String `i`, if there is one.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&str> {
        (i < self.len()).then(|| &self.buf[self.span(i)])
    }

    /// Byte range of string `i` in [`Strings::buffer`].
    ///
    /// # Panics
    /// When `i >= len()`.
    #[inline]
    pub fn span(&self, i: usize) -> Range<usize> {
        self.offsets[i] as usize..(self.offsets[i + 1] - self.gap) as usize
    }

    /// Where each string starts in a GGUF string array's run holding these strings (each after
    /// its 8-byte length), and the run's length plus 8: what a list read in place from such a
    /// run has for offsets, for an index made when a program that embeds the array is built
    /// ([`crate::LayaFile::parse_static_indexed`]).
    ///
    /// ```
    /// let s: laya_format::Strings = ["今天", "", "hi"].into_iter().collect();
    /// assert_eq!(s.run_starts(), [8, 22, 30, 40]);
    /// ```
    pub fn run_starts(&self) -> Vec<u32> {
        let pad = GGUF_GAP - self.gap;
        self.offsets.iter().zip(1..).map(|(&o, i)| o + pad * i).collect()
    }

    /// Whether the strings lie back to back in [`Strings::buffer`]; otherwise other bytes (the
    /// lengths of a GGUF string array) lie before each.
    pub fn is_contiguous(&self) -> bool {
        self.gap == 0
    }

    /// The string that holds byte `pos` of [`Strings::buffer`] (`pos` below its length), or
    /// where the strings are not contiguous, the string before the bytes that hold `pos`.
    ///
    /// ```
    /// let s: laya_format::Strings = ["今天", "", "hi"].into_iter().collect();
    /// assert_eq!((s.index_at(0), s.index_at(5), s.index_at(6), s.index_at(7)), (0, 0, 2, 2));
    /// ```
    pub fn index_at(&self, pos: usize) -> usize {
        self.offsets.partition_point(|&o| o as usize <= pos) - 1
    }

    /// The buffer the strings lie in, in order: back to back where
    /// [`Strings::is_contiguous`], else each after other bytes. [`Strings::span`] says where.
    pub fn buffer(&self) -> &str {
        &self.buf
    }

    /// The strings in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter { list: self, front: 0, back: self.len() }
    }

    /// A copy as one `String` per element.
    pub fn to_vec(&self) -> Vec<String> {
        self.iter().map(str::to_string).collect()
    }

    /// The strings back to back and the `len() + 1` offsets (string `i` is
    /// `offsets[i]..offsets[i + 1]`); without copying when they are contiguous and owned.
    pub fn into_parts(self) -> (String, Vec<u32>) {
        match self.gap {
            0 => (self.buf.into_owned(), self.offsets.into_owned()),
            _ => self.iter().collect::<Strings>().into_parts(),
        }
    }
}

impl Index<usize> for Strings {
    type Output = str;

    #[inline]
    fn index(&self, i: usize) -> &str {
        &self.buf[self.span(i)]
    }
}

/// Equal when the strings are, however each list keeps them.
impl PartialEq for Strings {
    fn eq(&self, other: &Strings) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Strings {}

impl Hash for Strings {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.len().hash(state);
        self.iter().for_each(|w| w.hash(state));
    }
}

impl fmt::Debug for Strings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<S: AsRef<str>> FromIterator<S> for Strings {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Strings {
        let mut s = Strings::new();
        for x in iter {
            s.push(x.as_ref());
        }
        s
    }
}

impl From<Vec<String>> for Strings {
    fn from(v: Vec<String>) -> Strings {
        let mut s = Strings::with_capacity(v.len(), v.iter().map(String::len).sum());
        for x in &v {
            s.push(x);
        }
        s
    }
}

impl From<&[&str]> for Strings {
    fn from(v: &[&str]) -> Strings {
        v.iter().collect()
    }
}

impl<S: AsRef<str>> PartialEq<[S]> for Strings {
    fn eq(&self, other: &[S]) -> bool {
        self.len() == other.len() && self.iter().zip(other).all(|(a, b)| a == b.as_ref())
    }
}

impl<S: AsRef<str>> PartialEq<Vec<S>> for Strings {
    fn eq(&self, other: &Vec<S>) -> bool {
        *self == other[..]
    }
}

impl<'a> IntoIterator for &'a Strings {
    type Item = &'a str;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// The strings of a [`Strings`], in order ([`Strings::iter`]).
#[derive(Clone)]
pub struct Iter<'a> {
    list: &'a Strings,
    front: usize,
    back: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a str;

    #[inline]
    fn next(&mut self) -> Option<&'a str> {
        (self.front < self.back).then(|| {
            self.front += 1;
            &self.list[self.front - 1]
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.back - self.front;
        (n, Some(n))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    #[inline]
    fn next_back(&mut self) -> Option<Self::Item> {
        (self.front < self.back).then(|| {
            self.back -= 1;
            &self.list[self.back]
        })
    }
}

impl ExactSizeIterator for Iter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_strings_and_unicode_round_trip() {
        let v = vec!["".to_string(), "😀".into(), "".into(), "a b".into(), "東京".into()];
        let s = Strings::from(v.clone());
        assert_eq!(s.len(), 5);
        assert_eq!(s.to_vec(), v);
        assert_eq!(s.get(1), Some("😀"));
        assert_eq!(s.get(5), None);
        assert_eq!(s.iter().next_back(), Some("東京"));
        assert_eq!(format!("{s:?}"), format!("{v:?}"));
        let (buf, offsets) = s.clone().into_parts();
        assert_eq!(Strings::from_parts(buf, offsets[1..].to_vec()), Some(s));
    }

    /// A GGUF run as the reader keeps it: each string after its 8-byte length.
    fn gguf_run(words: &[&str]) -> Strings {
        let (mut run, mut starts) = (String::new(), Vec::new());
        for w in words {
            run.extend((w.len() as u64).to_le_bytes().map(char::from));
            starts.push(run.len() as u32);
            run.push_str(w);
        }
        starts.push(run.len() as u32 + GGUF_GAP);
        let list = Strings::from_gguf_run(run.leak(), Cow::Owned(starts));
        assert_eq!(list.run_starts(), words.iter().collect::<Strings>().run_starts());
        list
    }

    #[test]
    fn a_gguf_run_reads_as_the_same_strings_back_to_back() {
        let words = ["今天", "", "a", "😀x"];
        let run = gguf_run(&words);
        let packed: Strings = words.iter().collect();
        assert!(!run.is_contiguous() && packed.is_contiguous());
        assert_eq!(run, packed);
        assert_eq!(run.iter().collect::<Vec<_>>(), words);
        assert_eq!((run.get(3), run.get(4), &run[0]), (Some("😀x"), None, "今天"));
        assert_eq!(run.iter().next_back(), Some("😀x"));
        let hash = |s: &Strings| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            s.hash(&mut h);
            h.finish()
        };
        assert_eq!(hash(&run), hash(&packed));
        // "今天" lies at 8..14; the length of "" at 14..22 goes with "今天", that of "a" at
        // 22..30 with "".
        assert_eq!((run.index_at(8), run.index_at(15), run.index_at(22), run.index_at(31)), (0, 0, 1, 2));
        assert_eq!(run.clone().into_parts(), packed.clone().into_parts());
        let mut grown = run.clone();
        grown.push("明天");
        assert!(grown.is_contiguous());
        assert_eq!(grown.iter().collect::<Vec<_>>(), ["今天", "", "a", "😀x", "明天"]);
        assert_eq!(gguf_run(&[]), Strings::new());
    }

    #[test]
    fn from_parts_refuses_bad_offsets() {
        let buf = || "ab明".to_string();
        assert!(Strings::from_parts(buf(), vec![2, 1, 5]).is_none(), "out of order");
        assert!(Strings::from_parts(buf(), vec![2, 3]).is_none(), "inside a character");
        assert!(Strings::from_parts(buf(), vec![2]).is_none(), "does not cover the buffer");
        assert!(Strings::from_parts(buf(), vec![2, 9]).is_none(), "out of bounds");
        assert!(Strings::from_parts(buf(), vec![0, 2, 5]).is_some());
    }
}
