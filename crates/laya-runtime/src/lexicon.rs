//! The model's word list, laid out for the hot path: one byte buffer, offsets, lengths in
//! scalar values, and a byte-sorted order so that "every word starting with these characters"
//! is one contiguous range found by binary search.

use std::ops::Range;

use laya_format::Strings;

pub(crate) struct Lexicon {
    bytes: String,
    /// `offsets[i]..offsets[i + 1]` is word `i` in `bytes`.
    offsets: Vec<u32>,
    /// Length of each word in Unicode scalar values (`replace` is counted in these).
    char_lens: Vec<u16>,
    /// Word ids in byte order. `None` when the file stores the words sorted.
    order: Option<Vec<u32>>,
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
        let sorted = order.iter().enumerate().all(|(i, &id)| id as usize == i);
        let order = (!sorted).then_some(order);
        let (bytes, offsets) = words.into_parts();
        Lexicon { bytes, offsets, char_lens, order }
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

    /// The word id at position `pos` of the byte-sorted order.
    #[inline]
    pub(crate) fn id_at(&self, pos: usize) -> usize {
        match &self.order {
            None => pos,
            Some(o) => o[pos] as usize,
        }
    }

    /// Positions (in sorted order) of every word whose bytes start with `prefix`.
    pub(crate) fn prefix_range(&self, prefix: &[u8]) -> Range<usize> {
        let n = self.len();
        let lo = partition_point(n, |pos| self.word(self.id_at(pos)).as_bytes() < prefix);
        let hi = lo
            + partition_point(n - lo, |off| {
                self.word(self.id_at(lo + off)).as_bytes().starts_with(prefix)
            });
        lo..hi
    }
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
        for l in [lex(&["a", "he", "hel", "hello", "help", "明", "明天", "明白"]),
                  lex(&["明白", "hello", "a", "明天", "help", "he", "明", "hel"])] {
            assert_eq!(words_in(&l, "hel"), ["hel", "hello", "help"]);
            assert_eq!(words_in(&l, "明"), ["明", "明天", "明白"]);
            assert_eq!(words_in(&l, "x"), Vec::<String>::new());
            assert_eq!(words_in(&l, "").len(), 8);
            assert_eq!(words_in(&l, "hello!"), Vec::<String>::new());
        }
    }

    #[test]
    fn char_lengths_count_scalar_values() {
        let l = lex(&["明天", "😀x", "abc"]);
        assert_eq!((l.char_len(0), l.char_len(1), l.char_len(2)), (2, 2, 3));
    }
}
