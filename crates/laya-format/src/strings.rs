//! [`Strings`]: a list of strings kept in one buffer.
//!
//! A GGUF string array is a run of length-prefixed byte strings. A model's lexicon is one such
//! array of 20,000–50,000 words; reading it as a `Vec<String>` cost one allocation, one copy and
//! one UTF-8 check per word, about a third of the time a 20,000-word model took to load. Here the
//! words are copied into one buffer, validated as UTF-8 once, and addressed by offsets.

use std::fmt;
use std::ops::{Index, Range};

/// Strings stored back to back in one buffer.
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
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Strings {
    buf: String,
    /// `offsets[i]..offsets[i + 1]` is string `i`; `offsets[0] == 0`.
    offsets: Vec<u32>,
}

/// Most bytes a [`Strings`] holds in total (offsets are `u32`).
pub const MAX_STRINGS_BYTES: usize = u32::MAX as usize;

impl Default for Strings {
    fn default() -> Self {
        Strings::new()
    }
}

impl Strings {
    /// An empty list.
    pub fn new() -> Strings {
        Strings { buf: String::new(), offsets: vec![0] }
    }

    /// An empty list with room for `n` strings of `bytes` bytes in total.
    pub fn with_capacity(n: usize, bytes: usize) -> Strings {
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0);
        Strings { buf: String::with_capacity(bytes), offsets }
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
        Some(Strings { buf, offsets })
    }

    /// Appends a string.
    ///
    /// # Panics
    /// When the total would exceed [`MAX_STRINGS_BYTES`] (4 GiB).
    pub fn push(&mut self, s: &str) {
        let end = self.buf.len() + s.len();
        assert!(end <= MAX_STRINGS_BYTES, "Strings holds at most 4 GiB");
        self.buf.push_str(s);
        self.offsets.push(end as u32);
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
        self.offsets[i] as usize..self.offsets[i + 1] as usize
    }

    /// The string that holds byte `pos` of [`Strings::buffer`] (`pos` below its length).
    ///
    /// ```
    /// let s: laya_format::Strings = ["今天", "", "hi"].into_iter().collect();
    /// assert_eq!((s.index_at(0), s.index_at(5), s.index_at(6), s.index_at(7)), (0, 0, 2, 2));
    /// ```
    pub fn index_at(&self, pos: usize) -> usize {
        self.offsets.partition_point(|&o| o as usize <= pos) - 1
    }

    /// Every string, in order, back to back.
    pub fn buffer(&self) -> &str {
        &self.buf
    }

    /// `len() + 1` offsets into [`Strings::buffer`]: string `i` is `offsets[i]..offsets[i + 1]`.
    pub fn offsets(&self) -> &[u32] {
        &self.offsets
    }

    /// The strings in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter { list: self, front: 0, back: self.len() }
    }

    /// A copy as one `String` per element.
    pub fn to_vec(&self) -> Vec<String> {
        self.iter().map(str::to_string).collect()
    }

    /// The buffer and the `len() + 1` offsets, without copying.
    pub fn into_parts(self) -> (String, Vec<u32>) {
        (self.buf, self.offsets)
    }
}

impl Index<usize> for Strings {
    type Output = str;

    #[inline]
    fn index(&self, i: usize) -> &str {
        &self.buf[self.span(i)]
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
