//! The model's word list, laid out for the hot path: one byte buffer, offsets, lengths in
//! scalar values, and a byte-sorted order so that "every word starting with these characters"
//! is one contiguous range found by binary search. In a language that ignores case
//! ([`laya_format::ignores_case`]) the order and the search are over the folded words, so a
//! typed prefix finds its words whatever their case.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::ops::Range;

use laya_format::Strings;

pub(crate) struct Lexicon {
    /// Per distinct first scalar value of the words, in byte order (which for UTF-8 is scalar
    /// order): that value and where its words start in the sorted order; they end where the
    /// next entry's start. Lets a prefix search begin inside its first character's range with
    /// integer comparisons instead of bisecting the whole lexicon with string comparisons.
    first_chars: Cow<'static, [[u32; 2]]>,
    /// Per scalar value below the largest first character in the Basic Multilingual Plane:
    /// its entry in `first_chars` plus one, 0 for none. One load instead of a search (the
    /// n-gram's cutter looks up dozens of pieces a keystroke); other first characters are
    /// searched in `first_chars`.
    bmp_first: Cow<'static, [u16]>,
    /// The words, as validation read them (from a model compiled into the program, in place).
    words: Strings,
    /// Length of each word in Unicode scalar values (`replace` is counted in these).
    char_lens: Cow<'static, [u16]>,
    /// Word ids in byte order of their keys. `None` when the keys are the words and the file
    /// stores them sorted.
    order: Option<Cow<'static, [u32]>>,
    /// The words folded ([`laya_format::fold_char`]) and where each is, when the lexicon ignores
    /// case: the keys that the order sorts and prefixes are searched in. `None`: the keys are
    /// the words.
    folded: Option<FoldedKeys>,
    /// Per word, 1 if it is punctuation or symbols only ([`laya_format::is_punctuation_word`]):
    /// never a candidate unless the session allows a punctuation slot.
    punct: Cow<'static, [u8]>,
    /// Per word, 1 if it starts with a letter or digit of a spaced script
    /// ([`laya_format::punct::glues`]): in Chinese no next word right after one.
    glues: Cow<'static, [u8]>,
    /// Per word, when the lexicon ignores case: a more frequent word folds to the same key, so
    /// this one is never a candidate (it would show as the same word). Empty otherwise.
    shadowed: Cow<'static, [u8]>,
    /// Per word, when the lexicon ignores case: how many of its characters must be typed before
    /// it may be a candidate, because it stretches a letter (`sooo`, `helllo`; see
    /// [`stretch_len`]); 0 for every other word. Empty otherwise.
    stretched: Cow<'static, [u8]>,
}

/// Per word, in one pass (it runs for every word at load): the length in scalar values (clamped
/// to `u16`), whether the word is punctuation only ([`laya_format::is_punctuation_word`]) and
/// whether its first character glues ([`laya_format::punct::glues`]). A word led by a character
/// of U+4000–U+9FFF (lead byte 0xE4–0xE9: Han ideographs and the Yijing hexagram symbols) is
/// neither, and one led by an ASCII letter or digit is no punctuation and glues, which settles
/// most of a Chinese or an English lexicon without a Unicode table.
fn word_flags(words: &Strings) -> (Vec<u16>, Vec<u8>, Vec<u8>) {
    let n = words.len();
    let text = words.buffer();
    let (mut char_lens, mut punct, mut glues) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        let Range { start, end } = words.span(i);
        char_lens.push(char_count(text.as_bytes(), start, end).min(u16::MAX as usize) as u16);
        let (p, g) = match text.as_bytes().get(start) {
            Some(0xE4..=0xE9) => (false, false),
            // An ASCII letter or digit first: no punctuation word, and it glues.
            Some(b) if b.is_ascii_alphanumeric() => (false, true),
            _ => {
                let w = &text[start..end];
                (laya_format::is_punctuation_word(w), w.chars().next().is_some_and(laya_format::punct::glues))
            }
        };
        punct.push(u8::from(p));
        glues.push(u8::from(g));
    }
    (char_lens, punct, glues)
}

/// Scalar values in `bytes[start..end]` (valid UTF-8): its length less its continuation bytes
/// (`10xxxxxx`), counted eight bytes at a time, each eight one load from the shared buffer.
fn char_count(bytes: &[u8], start: usize, end: usize) -> usize {
    let mut continuations = 0;
    let mut at = start;
    while at < end {
        let take = (end - at).min(8);
        let x = match bytes.get(at..at + 8) {
            Some(b) => u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) & (u64::MAX >> (64 - 8 * take)),
            None => bytes[at..at + take].iter().rev().fold(0u64, |x, &b| x << 8 | u64::from(b)),
        };
        // A byte's bit 7 set and bit 6 clear (bit 6 lands on bit 7 when shifted left by one);
        // the eight 0-or-1 lanes summed into the top byte by one multiplication (`count_ones`
        // is a dozen instructions on CPUs without POPCNT, the baseline this builds for).
        let lanes = (x & !(x << 1) & 0x8080_8080_8080_8080) >> 7;
        continuations += (lanes.wrapping_mul(0x0101_0101_0101_0101) >> 56) as usize;
        at += take;
    }
    (end - start) - continuations
}

/// The folded keys back to back and the `V + 1` offsets of each (key `i` is
/// `text[offsets[i]..offsets[i + 1]]`).
type FoldedKeys = (Cow<'static, str>, Cow<'static, [u32]>);

/// The arrays a [`Lexicon`] derives from its words, as
/// [`Lexicon::index`] lends them and [`Lexicon::with_index`] takes them back.
pub(crate) struct LexiconIndex<'a> {
    /// Per word, its length in scalar values.
    pub(crate) char_lens: &'a [u16],
    /// Per word, 1 if punctuation only.
    pub(crate) punct: &'a [u8],
    /// Per word, 1 if it glues.
    pub(crate) glues: &'a [u8],
    /// Word ids in byte order, `None` when the ids are.
    pub(crate) order: Option<&'a [u32]>,
    /// Per distinct first character: its scalar value and its first position in byte order.
    pub(crate) first_chars: &'a [[u32; 2]],
    /// Per scalar value up to the largest BMP first character: its entry in `first_chars`
    /// plus one, 0 for none.
    pub(crate) bmp_first: &'a [u16],
    /// Where the lexicon ignores case: the folded keys back to back and the `V + 1` offsets
    /// of each.
    pub(crate) folded: Option<(&'a [u8], &'a [u32])>,
    /// Where it ignores case, per word: 1 if a more frequent word folds alike; else empty.
    pub(crate) shadowed: &'a [u8],
    /// Where it ignores case, per word: characters to type before it may show; else empty.
    pub(crate) stretched: &'a [u8],
}

impl Lexicon {
    #[cfg(test)]
    pub(crate) fn new(words: &[&str]) -> Lexicon {
        let words: Strings = words.iter().collect();
        let order = laya_format::lexicon_order(&words);
        Self::with_order(words, Some(order), None)
    }

    #[cfg(test)]
    pub(crate) fn new_folded(words: &[&str], freqs: &[u32]) -> Lexicon {
        let words: Strings = words.iter().collect();
        let order = laya_format::lexicon_order(&words);
        Self::with_order(words, Some(order), Some(freqs))
    }

    /// `order`: the ids in byte order, as validation computed them
    /// ([`laya_format::LayaFile::word_order`]; `None`: the ids are in byte order). Takes the
    /// validated word buffer as it is.
    /// `fold`: when the model's language ignores case ([`laya_format::ignores_case`]), the
    /// words' frequencies: keys are then folded, and of the words that fold alike the most
    /// frequent is the one shown.
    pub(crate) fn with_order(words: Strings, order: Option<Vec<u32>>, fold: Option<&[u32]>) -> Lexicon {
        debug_assert!(order.as_ref().is_none_or(|o| o.len() == words.len()));
        let (char_lens, punct, glues) = word_flags(&words);
        let (folded, order) = match fold {
            Some(freqs) => {
                let (folded, order) = fold_keys(&words, freqs, order.unwrap_or_else(|| (0..words.len() as u32).collect()));
                (folded, Some(order))
            }
            None => (None, order),
        };
        let order = order.filter(|order| !order.iter().enumerate().all(|(i, &id)| id as usize == i));
        let mut lex = Lexicon {
            first_chars: Cow::Borrowed(&[]),
            bmp_first: Cow::Borrowed(&[]),
            words,
            char_lens: Cow::Owned(char_lens),
            order: order.map(Cow::Owned),
            folded,
            punct: Cow::Owned(punct),
            glues: Cow::Owned(glues),
            shadowed: Cow::Borrowed(&[]),
            stretched: Cow::Borrowed(&[]),
        };
        if lex.folded.is_some() {
            lex.stretched = (0..lex.len()).map(|id| stretch_len(lex.key(id)).min(u8::MAX as usize) as u8).collect();
            let mut shadowed = vec![0u8; lex.len()];
            for pos in 1..lex.len() {
                // Equal keys are adjacent, the most frequent first. Neighbours in sorted order
                // share their start, so the last bytes decide most pairs without a call.
                let (a, b) = (lex.key(lex.id_at(pos)).as_bytes(), lex.key(lex.id_at(pos - 1)).as_bytes());
                if a.len() == b.len() && a.last() == b.last() && a == b {
                    shadowed[lex.id_at(pos)] = 1;
                }
            }
            lex.shadowed = Cow::Owned(shadowed);
        }
        // Neighbours mostly share their first character (about 5,000 distinct among the
        // default's 50,000 words): a key starting with the bytes of the last one found is passed
        // over without decoding.
        let mut first_chars: Vec<[u32; 2]> = Vec::new();
        // A key's first `n` bytes (n ≤ 4) as an integer, for a comparison without a call. A key
        // of fewer bytes cannot match: its value is below any multi-byte character's lead byte
        // shifted into place, and an ASCII first character is one byte.
        let head = |key: &[u8], n: usize| key.iter().take(n).fold(0u32, |h, &b| h << 8 | u32::from(b));
        let (mut last, mut last_len) = (0u32, 0);
        for pos in 0..lex.len() {
            let key = lex.key(lex.id_at(pos));
            if last_len > 0 && head(key.as_bytes(), last_len) == last {
                continue;
            }
            if let Some(c) = key.chars().next() {
                last_len = c.len_utf8();
                last = head(key.as_bytes(), last_len);
                first_chars.push([c as u32, pos as u32]);
            }
        }
        if first_chars.len() < u16::MAX as usize {
            let bmp: Vec<(usize, u32)> = first_chars.iter().enumerate().filter(|e| e.1[0] <= 0xFFFF).map(|(at, e)| (at, e[0])).collect();
            if let Some(&(_, top)) = bmp.last() {
                let mut bmp_first = vec![0; top as usize + 1];
                for (at, c) in bmp {
                    bmp_first[c as usize] = at as u16 + 1;
                }
                lex.bmp_first = Cow::Owned(bmp_first);
            }
        }
        lex.first_chars = Cow::Owned(first_chars);
        lex
    }

    pub(crate) fn len(&self) -> usize {
        self.char_lens.len()
    }

    /// The words, by id.
    pub(crate) fn words(&self) -> &Strings {
        &self.words
    }

    /// What [`Lexicon::with_order`] derived from the words, for a prepared image
    /// ([`crate::prepared`]).
    pub(crate) fn index(&self) -> LexiconIndex<'_> {
        LexiconIndex {
            char_lens: &self.char_lens,
            punct: &self.punct,
            glues: &self.glues,
            order: self.order.as_deref(),
            first_chars: &self.first_chars,
            bmp_first: &self.bmp_first,
            folded: self.folded.as_ref().map(|(text, offsets)| (text.as_bytes(), &offsets[..])),
            shadowed: &self.shadowed,
            stretched: &self.stretched,
        }
    }

    /// The lexicon of `words` with the arrays [`Lexicon::index`] gave for the same words,
    /// prepared earlier and read in place. What the searches index by is checked (lengths, ids
    /// and positions in range, first characters in order), so arrays that do not belong to
    /// these words are an error, never a panic.
    pub(crate) fn with_index(words: Strings, ix: LexiconIndex<'static>) -> Result<Lexicon, String> {
        let n = words.len();
        let lens = [ix.char_lens.len(), ix.punct.len(), ix.glues.len()];
        if lens.iter().any(|&l| l != n) {
            return Err(format!("per-word arrays of {lens:?} entries for {n} words"));
        }
        // Bounds as maxima, which compile to vector code: these run over every word at start-up.
        if ix.order.is_some_and(|o| o.len() != n || o.iter().copied().max().is_some_and(|id| id as usize >= n)) {
            return Err(format!("the order is not one of {n} word ids"));
        }
        let ordered = ix.first_chars.windows(2).all(|w| w[0][0] < w[1][0] && w[0][1] <= w[1][1]);
        if !ordered || ix.first_chars.last().is_some_and(|f| f[1] as usize > n) {
            return Err("the first characters are out of order or past the lexicon".into());
        }
        if ix.bmp_first.iter().copied().max().is_some_and(|at| at as usize > ix.first_chars.len()) {
            return Err("the first-character table points past its list".into());
        }
        let folded = match ix.folded {
            // Without folded keys no word is shadowed or stretched: arrays saying otherwise
            // belong to another lexicon.
            None if !ix.shadowed.is_empty() || !ix.stretched.is_empty() => {
                return Err("shadowed or stretched words in a lexicon that does not fold case".into());
            }
            None => None,
            Some((text, offsets)) => {
                let text = std::str::from_utf8(text).map_err(|_| "the folded keys are not UTF-8")?;
                let spans_ok = offsets.len() == n + 1
                    && offsets.first() == Some(&0)
                    && offsets.last() == Some(&(text.len() as u32))
                    && offsets.windows(2).all(|w| w[0] <= w[1])
                    && offsets.iter().all(|&o| text.is_char_boundary(o as usize));
                if !spans_ok || ix.shadowed.len() != n || ix.stretched.len() != n {
                    return Err(format!("the folded keys do not fit {n} words"));
                }
                Some((Cow::Borrowed(text), Cow::Borrowed(offsets)))
            }
        };
        Ok(Lexicon {
            first_chars: Cow::Borrowed(ix.first_chars),
            bmp_first: Cow::Borrowed(ix.bmp_first),
            words,
            char_lens: Cow::Borrowed(ix.char_lens),
            order: ix.order.map(Cow::Borrowed),
            folded,
            punct: Cow::Borrowed(ix.punct),
            glues: Cow::Borrowed(ix.glues),
            shadowed: Cow::Borrowed(ix.shadowed),
            stretched: Cow::Borrowed(ix.stretched),
        })
    }

    /// Per word: its length in scalar values, whether it is punctuation only, whether it glues.
    #[cfg(test)]
    pub(crate) fn flags(&self, id: usize) -> (u16, bool, bool) {
        (self.char_lens[id], self.punct[id] != 0, self.glues[id] != 0)
    }

    #[inline]
    pub(crate) fn word(&self, id: usize) -> &str {
        &self.words[id]
    }

    /// What prefixes are searched in: the word, folded when the lexicon ignores case.
    #[inline]
    fn key(&self, id: usize) -> &str {
        match &self.folded {
            None => self.word(id),
            Some((bytes, offsets)) => &bytes[offsets[id] as usize..offsets[id + 1] as usize],
        }
    }

    /// Whether prefixes match case-insensitively: callers fold what they search for.
    #[inline]
    pub(crate) fn ignores_case(&self) -> bool {
        self.folded.is_some()
    }

    /// True when word `id` starts with a letter or digit of a spaced script.
    #[inline]
    pub(crate) fn glues(&self, id: usize) -> bool {
        self.glues[id] != 0
    }

    /// True when a more frequent word folds to the same key as word `id`: never a candidate
    /// (see `shadowed`).
    #[inline]
    pub(crate) fn is_shadowed(&self, id: usize) -> bool {
        self.shadowed.get(id) == Some(&1)
    }

    /// True when word `id` may not be a candidate that replaces `typed` characters: it stretches
    /// a letter that those characters do not reach yet (see `stretched`).
    #[inline]
    pub(crate) fn hides_stretch(&self, id: usize, typed: usize) -> bool {
        self.stretched.get(id).is_some_and(|&n| n as usize > typed)
    }

    /// The length of the longest word, in scalar values.
    pub(crate) fn max_char_len(&self) -> usize {
        self.char_lens.iter().copied().max().unwrap_or(0) as usize
    }

    #[inline]
    pub(crate) fn char_len(&self, id: usize) -> usize {
        self.char_lens[id] as usize
    }

    /// True when word `id` is punctuation ([`laya_format::is_punctuation_word`]).
    #[inline]
    pub(crate) fn is_punct(&self, id: usize) -> bool {
        self.punct[id] != 0
    }

    /// The word id at position `pos` of the byte-sorted order.
    #[inline]
    pub(crate) fn id_at(&self, pos: usize) -> usize {
        match &self.order {
            None => pos,
            Some(o) => o[pos] as usize,
        }
    }

    /// The id of `word`, if it is in the lexicon; when the lexicon ignores case, of the word
    /// shown for it in any case (`the` for `The`). Allocates when folding (not on the
    /// per-keystroke path).
    pub(crate) fn id_of(&self, word: &str) -> Option<usize> {
        let folded;
        let key = if self.ignores_case() {
            folded = laya_format::fold_case(word);
            folded.as_str()
        } else {
            word
        };
        let r = self.prefix_range(key.as_bytes());
        let id = self.id_at(r.start.min(self.len().saturating_sub(1)));
        (!r.is_empty() && self.key(id) == key).then_some(id)
    }

    /// The key (the word, folded where the lexicon ignores case) at position `pos` of the
    /// sorted order.
    #[inline]
    pub(crate) fn key_at(&self, pos: usize) -> &str {
        self.key(self.id_at(pos))
    }

    /// The position in sorted order of the word whose key is `key` (already folded where the
    /// lexicon ignores case; of equal keys, the first: the word shown). Allocates nothing.
    pub(crate) fn position_of_key(&self, key: &str) -> Option<usize> {
        let r = self.prefix_range(key.as_bytes());
        (!r.is_empty() && self.key(self.id_at(r.start)) == key).then_some(r.start)
    }

    /// Positions (in sorted order) of every word whose key (the word, or its folded form when
    /// the lexicon ignores case) starts with the bytes `prefix`.
    pub(crate) fn prefix_range(&self, prefix: &[u8]) -> Range<usize> {
        // Only the words that start with the prefix's first character, found by integer search;
        // they share its bytes.
        let Some(c) = first_char(prefix) else {
            // Every word starts with the empty prefix; a search would walk the whole lexicon.
            return if prefix.is_empty() { 0..self.len() } else { self.search(0..self.len(), prefix, 0) };
        };
        let at = match self.bmp_first.get(c as usize) {
            Some(&0) => return 0..0,
            Some(&at) => at as usize - 1,
            None => self.first_chars.partition_point(|&[f, _]| f < c),
        };
        match self.first_chars.get(at) {
            Some(&[f, s]) if f == c => {
                let end = self.first_chars.get(at + 1).map_or(self.len(), |&[_, e]| e as usize);
                let width = char::from_u32(c).map_or(0, char::len_utf8);
                self.search(s as usize..end, prefix, width)
            }
            _ => 0..0,
        }
    }

    /// Positions of the words in `within` whose keys start with `prefix`, where every key in
    /// `within` already starts with `prefix[..known]` (a range found for a shorter prefix of
    /// the same text): only the bytes after `known` are compared. What [`Lexicon::prefix_range`]
    /// of `prefix` gives, for a fraction of its work when a caller extends a prefix piece by
    /// piece.
    pub(crate) fn narrow(&self, within: Range<usize>, prefix: &[u8], known: usize) -> Range<usize> {
        // Sorted keys: when the first and the last share those bytes, every key between does.
        debug_assert!([within.start, within.end.max(1) - 1]
            .iter()
            .all(|&pos| within.is_empty() || self.key_at(pos).as_bytes().starts_with(&prefix[..known])));
        self.search(within, prefix, known)
    }

    /// The words of `within` whose keys start with `prefix`, all of them sharing its first
    /// `known` bytes.
    fn search(&self, within: Range<usize>, prefix: &[u8], known: usize) -> Range<usize> {
        let (start, end) = (within.start, within.end);
        let rest = &prefix[known..];
        let tail = |pos: usize| &self.key(self.id_at(pos)).as_bytes()[known..];
        let lo = start + partition_point(end - start, |off| tail(start + off) < rest);
        // A typed prefix starts a few words, not thousands: gallop from `lo` (1, 2, 4, …) to
        // bracket the end, then bisect inside the bracket.
        let has = |off: usize| tail(lo + off).starts_with(rest);
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

/// How many scalar values of `key` end the first run of three equal letters (`sooo` → 4,
/// `helllo` → 5), or 0 when no letter repeats three times in a row. Typed chat stretches words
/// (`sooo`, `yesss`); such spellings are in a lexicon built from chat, but a keyboard should
/// offer them only to someone already typing the stretch, not as the next word or as the
/// completion of `so` or `hel`. No English word triples a letter.
fn stretch_len(key: &str) -> usize {
    if key.is_ascii() {
        // One byte per scalar value: the loop below, on bytes.
        let (mut prev, mut run) = (0u8, 0);
        for (i, &b) in key.as_bytes().iter().enumerate() {
            // Without a branch on the letters, which no predictor guesses.
            run = usize::from(b == prev) * run + 1;
            prev = b;
            if run == 3 && b.is_ascii_alphabetic() {
                return i + 1;
            }
        }
        return 0;
    }
    let (mut prev, mut run) = ('\0', 0);
    for (i, c) in key.chars().enumerate() {
        run = if c == prev { run + 1 } else { 1 };
        prev = c;
        if run == 3 && c.is_alphabetic() {
            return i + 1;
        }
    }
    0
}

/// The folded words (one buffer and offsets) and the ids in byte order of those keys, equal keys
/// the most frequent (by `freqs`, missing counting 0) first, then by id. `order` is the words'
/// own byte order. The comparison is a total order (ids differ), so the result is the one
/// sort of all ids by it would give.
fn fold_keys(words: &Strings, freqs: &[u32], mut order: Vec<u32>) -> (Option<FoldedKeys>, Vec<u32>) {
    let mut bytes = String::with_capacity(words.buffer().len());
    let mut offsets = Vec::with_capacity(words.len() + 1);
    offsets.push(0u32);
    // Per word: folding left it as it was.
    let mut kept_as_is = Vec::with_capacity(words.len());
    for w in words.iter() {
        let start = bytes.len();
        if w.is_ascii() {
            // ASCII folds byte by byte: what `fold_char` does to each.
            bytes.push_str(w);
            bytes[start..].make_ascii_lowercase();
            kept_as_is.push(!w.bytes().any(|b| b.is_ascii_uppercase()));
        } else {
            laya_format::fold_into(w, &mut bytes);
            kept_as_is.push(&bytes[start..] == w);
        }
        offsets.push(bytes.len() as u32);
    }
    let key = |id: u32| &bytes.as_bytes()[offsets[id as usize] as usize..offsets[id as usize + 1] as usize];
    let freq = |id: u32| freqs.get(id as usize).copied().unwrap_or(0);
    let cmp = |a: u32, b: u32| key(a).cmp(key(b)).then(freq(b).cmp(&freq(a))).then(a.cmp(&b));
    // The words folding leaves alone keep their byte order and are distinct keys: already
    // sorted. Only the words with capitals are sorted, then the two lists are merged.
    let (kept, mut moved): (Vec<u32>, Vec<u32>) = order.iter().partition(|&&id| kept_as_is[id as usize]);
    moved.sort_unstable_by(|&a, &b| cmp(a, b));
    let (mut i, mut j) = (0, 0);
    for slot in order.iter_mut() {
        *slot = if j == moved.len() || (i < kept.len() && cmp(kept[i], moved[j]) == Ordering::Less) {
            i += 1;
            kept[i - 1]
        } else {
            j += 1;
            moved[j - 1]
        };
    }
    (Some((Cow::Owned(bytes), Cow::Owned(offsets))), order)
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

    /// The one-pass flags against their definitions, on words led by every kind of character
    /// the fast path could misjudge: the edges of its lead bytes (U+3FFF, U+4000, the hexagram
    /// symbols at U+4DC0, U+9FFF, U+A000), punctuation, Latin, digits, kana and emoji.
    #[test]
    fn word_flags_match_their_definitions() {
        let leads = [
            '\u{3FFF}', '\u{4000}', '䷀', '\u{4DFF}', '一', '\u{9FFF}', '\u{A000}', '，', '《', '(', ',', 'a', 'É', '7', 'の', '😀', '…',
            '¥',
        ];
        // Lengths across the 8-byte steps of the count: up to 4, 9, 17 and 31 bytes.
        let tails = ["", "a", "，", "天", "😀", "…", "天气预", "预报员很忙😀", "abcdefgh天气预报员很忙"];
        let mut words: Vec<String> = Vec::new();
        for c in leads {
            for t in tails {
                words.push(format!("{c}{t}"));
            }
        }
        let refs: Vec<&str> = words.iter().map(String::as_str).collect();
        let l = lex(&refs);
        for (id, w) in words.iter().enumerate() {
            let expected =
                (w.chars().count() as u16, laya_format::is_punctuation_word(w), w.chars().next().is_some_and(laya_format::punct::glues));
            assert_eq!(l.flags(id), expected, "{w:?}");
        }
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
        // Absent first characters below, inside and above the direct table of first characters.
        prefixes.extend(["c", "明9", "zz", "~", "가", "😁", "\u{10FFFF}"].map(String::from));
        for p in &prefixes {
            // Narrowed character by character, each range from the last, as the n-gram's
            // cutter narrows: the same range as a search from scratch.
            let mut range = 0..l.len();
            let mut known = 0;
            for (at, c) in p.char_indices() {
                range = l.narrow(range, &p.as_bytes()[..at + c.len_utf8()], known);
                known = at + c.len_utf8();
            }
            let whole = l.prefix_range(p.as_bytes());
            // Where an empty range lies does not matter.
            assert!(range == whole || range.is_empty() && whole.is_empty(), "narrowed {p:?}: {range:?}, searched {whole:?}");
        }
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

    /// Folded, a prefix finds its words in any case, and of two words that fold alike only the
    /// first can be a candidate.
    #[test]
    fn folded_prefixes_ignore_case() {
        let l = Lexicon::new_folded(&["the", "I", "Monday", "The", "hello", "HELP", "ärger", "Ärger"], &[9, 8, 7, 6, 5, 4, 1, 2]);
        assert!(l.ignores_case());
        assert_eq!(words_in(&l, "the"), ["the", "The"]);
        assert_eq!(words_in(&l, "hel"), ["hello", "HELP"]);
        assert_eq!(words_in(&l, "i"), ["I"]);
        assert_eq!(words_in(&l, "mon"), ["Monday"]);
        assert_eq!(words_in(&l, "är"), ["Ärger", "ärger"]);
        assert_eq!(l.id_of("ÄRGER"), Some(7));
        assert_eq!(l.id_of("THE"), Some(0));
        assert_eq!(l.id_of("i"), Some(1));
        assert_eq!(l.id_of("Mon"), None);
        let shadowed: Vec<bool> = (0..l.len()).map(|id| l.is_shadowed(id)).collect();
        assert_eq!(shadowed, [false, false, false, true, false, false, true, false]);
        let plain = lex(&["the", "The"]);
        assert!(!plain.is_shadowed(1));
        assert_eq!(words_in(&plain, "the"), ["the"]);
    }

    /// A stretched spelling waits until its stretch is typed; other words, and every word of a
    /// lexicon that keeps case (Chinese 哈哈哈), are never held back.
    #[test]
    fn stretched_spellings_wait_for_their_stretch() {
        assert_eq!(["sooo", "helllo", "Ohhhh", "hello", "aa", "111", "ooo", "x…!!!"].map(stretch_len), [4, 5, 4, 0, 0, 0, 3, 0]);
        let l = Lexicon::new_folded(&["so", "sooo", "HELLLO", "hello"], &[4, 3, 2, 1]);
        let hidden = |typed: usize| (0..l.len()).filter(|&id| l.hides_stretch(id, typed)).map(|id| l.word(id)).collect::<Vec<_>>();
        assert_eq!(hidden(0), ["sooo", "HELLLO"]);
        assert_eq!(hidden(3), ["sooo", "HELLLO"]);
        assert_eq!(hidden(4), ["HELLLO"]);
        assert!(hidden(5).is_empty());
        let han = lex(&["哈哈哈", "sooo"]);
        assert!(!han.hides_stretch(0, 0) && !han.hides_stretch(1, 0));
    }

    /// The folded order and the stretch against their definitions, on words of capitals,
    /// accents, Han and repeated letters, many folding alike (ties between equal keys).
    #[test]
    fn folded_order_and_stretch_match_their_definitions() {
        use proptest::prelude::*;
        let word = prop::collection::vec(prop::sample::select(vec!["a", "A", "b", "o", "O", "é", "É", "明", "'", "zz", "ß"]), 1..7)
            .prop_map(|parts| parts.concat());
        proptest!(|(words in prop::collection::vec(word, 1..60), seed in any::<u64>())| {
            // A lexicon's words are distinct (validation rejects duplicates); folded keys are not.
            let mut refs: Vec<&str> = Vec::new();
            for w in &words {
                if !refs.contains(&w.as_str()) {
                    refs.push(w);
                }
            }
            let freqs: Vec<u32> = (0..refs.len() as u64).map(|i| ((i.wrapping_mul(seed | 1) >> 7) % 4) as u32).collect();
            let l = Lexicon::new_folded(&refs, &freqs);
            let mut want: Vec<usize> = (0..refs.len()).collect();
            want.sort_by(|&a, &b| laya_format::fold_case(refs[a]).cmp(&laya_format::fold_case(refs[b])).then(freqs[b].cmp(&freqs[a])).then(a.cmp(&b)));
            let got: Vec<usize> = (0..l.len()).map(|p| l.id_at(p)).collect();
            prop_assert_eq!(got, want);
            for w in &refs {
                let chars: Vec<char> = laya_format::fold_case(w).chars().collect();
                let naive = (2..chars.len()).find(|&i| chars[i] == chars[i - 1] && chars[i] == chars[i - 2] && chars[i].is_alphabetic()).map_or(0, |i| i + 1);
                prop_assert_eq!(stretch_len(&laya_format::fold_case(w)), naive, "{}", w);
            }
        });
    }

    #[test]
    fn char_lengths_count_scalar_values() {
        let l = lex(&["明天", "😀x", "abc"]);
        assert_eq!((l.char_len(0), l.char_len(1), l.char_len(2)), (2, 2, 3));
    }
}
