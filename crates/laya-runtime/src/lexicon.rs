//! The model's word list, laid out for the hot path: one byte buffer, offsets, lengths in
//! scalar values, and a byte-sorted order so that "every word starting with these characters"
//! is one contiguous range found by binary search.

use std::ops::Range;

use laya_format::Strings;

pub(crate) struct Lexicon {
    /// Per distinct first scalar value of the words, in byte order (which for UTF-8 is scalar
    /// order): that value and where its words start in the sorted order; they end where the
    /// next entry's start. Lets a prefix search begin inside its first character's range with
    /// integer comparisons instead of bisecting the whole lexicon with string comparisons.
    first_chars: Vec<(u32, u32)>,
    bytes: String,
    /// `offsets[i]..offsets[i + 1]` is word `i` in `bytes`.
    offsets: Vec<u32>,
    /// Length of each word in Unicode scalar values (`replace` is counted in these).
    char_lens: Vec<u16>,
    /// Word ids in byte order. `None` when the file stores the words sorted.
    order: Option<Vec<u32>>,
    /// Per word: punctuation or symbols only ([`laya_format::is_punctuation_word`]), never a
    /// candidate unless the session allows a punctuation slot.
    punct: Vec<bool>,
}

impl Lexicon {
    #[cfg(test)]
    pub(crate) fn new(words: &[&str]) -> Lexicon {
        let words: Strings = words.iter().collect();
        let order = laya_format::lexicon_order(&words);
        Self::with_order(words, order)
    }

    /// `order`: the ids in byte order, as validation computed them
    /// ([`laya_format::LayaFile::word_order`]). Takes the validated word buffer as it is.
    pub(crate) fn with_order(words: Strings, order: Vec<u32>) -> Lexicon {
        debug_assert_eq!(order.len(), words.len());
        // Scalar values are the bytes that do not continue a UTF-8 sequence; counted over the
        // buffer word by word, with no per-word call (this runs for every word at load).
        let bytes = words.buffer().as_bytes();
        let char_lens = words
            .offsets()
            .windows(2)
            .map(|w| {
                let word = &bytes[w[0] as usize..w[1] as usize];
                word.iter().filter(|&&b| (b as i8) >= -0x40).count().min(u16::MAX as usize) as u16
            })
            .collect();
        let punct = words.iter().map(laya_format::is_punctuation_word).collect();
        let sorted = order.iter().enumerate().all(|(i, &id)| id as usize == i);
        let order = (!sorted).then_some(order);
        let (bytes, offsets) = words.into_parts();
        let mut lex = Lexicon { first_chars: Vec::new(), bytes, offsets, char_lens, order, punct };
        for pos in 0..lex.len() {
            if let Some(c) = lex.word(lex.id_at(pos)).chars().next() {
                if lex.first_chars.last().is_none_or(|&(last, _)| last != c as u32) {
                    lex.first_chars.push((c as u32, pos as u32));
                }
            }
        }
        lex
    }

    pub(crate) fn len(&self) -> usize {
        self.char_lens.len()
    }

    #[inline]
    pub(crate) fn word(&self, id: usize) -> &str {
        &self.bytes[self.offsets[id] as usize..self.offsets[id + 1] as usize]
    }

    #[inline]
    pub(crate) fn char_len(&self, id: usize) -> usize {
        self.char_lens[id] as usize
    }

    /// True when word `id` is punctuation ([`laya_format::is_punctuation_word`]).
    #[inline]
    pub(crate) fn is_punct(&self, id: usize) -> bool {
        self.punct[id]
    }

    /// The word id at position `pos` of the byte-sorted order.
    #[inline]
    pub(crate) fn id_at(&self, pos: usize) -> usize {
        match &self.order {
            None => pos,
            Some(o) => o[pos] as usize,
        }
    }

    /// The id of `word`, if it is in the lexicon.
    pub(crate) fn id_of(&self, word: &str) -> Option<usize> {
        let r = self.prefix_range(word.as_bytes());
        let id = self.id_at(r.start.min(self.len().saturating_sub(1)));
        (!r.is_empty() && self.word(id) == word).then_some(id)
    }

    /// Positions (in sorted order) of every word whose bytes start with `prefix`.
    pub(crate) fn prefix_range(&self, prefix: &[u8]) -> Range<usize> {
        // Only the words that start with the prefix's first character, found by integer search.
        let (start, end) = match first_char(prefix) {
            None => (0, self.len()),
            Some(c) => {
                let at = self.first_chars.partition_point(|&(f, _)| f < c);
                match self.first_chars.get(at) {
                    Some(&(f, s)) if f == c => (s as usize, self.first_chars.get(at + 1).map_or(self.len(), |&(_, e)| e as usize)),
                    _ => return 0..0,
                }
            }
        };
        let lo = start + partition_point(end - start, |off| self.word(self.id_at(start + off)).as_bytes() < prefix);
        // A typed prefix starts a few words, not thousands: gallop from `lo` (1, 2, 4, …) to
        // bracket the end, then bisect inside the bracket.
        let has = |off: usize| self.word(self.id_at(lo + off)).as_bytes().starts_with(prefix);
        let rest = end - lo;
        let mut bound = 1;
        while bound <= rest && has(bound - 1) {
            bound *= 2;
        }
        let (half, top) = (bound / 2, bound.min(rest));
        let hi = lo + half + partition_point(top.saturating_sub(half), |off| has(half + off));
        lo..hi
    }
}

/// The first scalar value of a UTF-8 `prefix`; `None` when it is empty (or does not start with
/// a whole, valid character, which the callers' prefixes, made from `char`s, always do).
fn first_char(prefix: &[u8]) -> Option<u32> {
    let width = match *prefix.first()? {
        b if b < 0x80 => 1,
        b if b >= 0xF0 => 4,
        b if b >= 0xE0 => 3,
        _ => 2,
    };
    let head = std::str::from_utf8(prefix.get(..width)?).ok()?;
    head.chars().next().map(|c| c as u32)
}

/// `slice::partition_point` over an index space, so no slice of words has to be materialised.
fn partition_point(n: usize, pred: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0usize, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lex(words: &[&str]) -> Lexicon {
        Lexicon::new(words)
    }

    fn words_in(l: &Lexicon, prefix: &str) -> Vec<String> {
        l.prefix_range(prefix.as_bytes()).map(|p| l.word(l.id_at(p)).to_string()).collect()
    }

    #[test]
    fn prefix_ranges_sorted_and_unsorted() {
        for l in [
            lex(&["a", "he", "hel", "hello", "help", "明", "明天", "明白"]),
            lex(&["明白", "hello", "a", "明天", "help", "he", "明", "hel"]),
        ] {
            assert_eq!(words_in(&l, "hel"), ["hel", "hello", "help"]);
            assert_eq!(words_in(&l, "明"), ["明", "明天", "明白"]);
            assert_eq!(words_in(&l, "x"), Vec::<String>::new());
            assert_eq!(words_in(&l, "").len(), 8);
            assert_eq!(words_in(&l, "hello!"), Vec::<String>::new());
        }
    }

    /// The galloping end search against a plain filter, for every prefix of every word (and
    /// some that start none), on lexicons whose prefix runs have every length from 1 to 40.
    #[test]
    fn prefix_ranges_match_a_filter() {
        let mut words: Vec<String> = Vec::new();
        for (i, c) in ['a', 'b', '明', 'z', '😀'].iter().enumerate() {
            for j in 0..(1 + 13 * i) {
                words.push(format!("{c}{j:03}"));
            }
        }
        let refs: Vec<&str> = words.iter().map(String::as_str).collect();
        let l = lex(&refs);
        let mut prefixes: Vec<String> =
            words.iter().flat_map(|w| (0..=w.len()).filter(|&e| w.is_char_boundary(e)).map(move |e| w[..e].to_string())).collect();
        prefixes.extend(["c", "明9", "zz", "~", "😁", "\u{10FFFF}"].map(String::from));
        for p in prefixes {
            let mut want: Vec<String> = words.iter().filter(|w| w.starts_with(p.as_str())).cloned().collect();
            want.sort();
            assert_eq!(words_in(&l, &p), want, "prefix {p:?}");
        }
        // Bytes that are not a whole character are searched as bytes.
        let lead = "明".as_bytes()[..2].to_vec();
        let got: Vec<&str> = l.prefix_range(&lead).map(|p| l.word(l.id_at(p))).collect();
        assert_eq!(got.len(), 27);
        assert!(got.iter().all(|w| w.starts_with('明')));
    }

    #[test]
    fn char_lengths_count_scalar_values() {
        let l = lex(&["明天", "😀x", "abc"]);
        assert_eq!((l.char_len(0), l.char_len(1), l.char_len(2)), (2, 2, 3));
    }
}
