//! A prepared index: what a load derives from a model's lexicon (each word's length in
//! characters, its punctuation and glue flags, the byte order, the first-character tables, and
//! where the language ignores case the folded keys), from its factorised head (each class's
//! members and their biases) and from its n-gram (the best unigram candidates, the long
//! follower lists' best followers), made once when a program that embeds the model is built
//! and read in place at every start, where building them took ~1.2 ms of the 50,000-word
//! default's cold start (~2 ms of the English model's) and the n-gram's lists a scan at its
//! first predictions; and the lexicon's per-word integers as the load keeps them (the counts
//! that cut text into words, the completion prior's corpus counts, each word's class) and where
//! each word starts in the file's string array, so that the file's copies need not be decoded
//! nor the starts found again ([`laya_format::LayaFile::parse_static_indexed`]).
//! Only for bytes compiled into the program, beside the model they were made from
//! ([`crate::Model::prepared_index`], [`crate::Model::from_static_prepared`]).
//!
//! Layout, little-endian: the magic `LAYAIDX9`, the word count (`u64`), the model's checksum
//! (`u64`), where the completion prior comes from (`u64`: 0 none, 1 dictionary frequencies that
//! are all 0, 2 the corpus counts below), the number of words with a dictionary frequency
//! (`u64`), the unigram's counts summed and the n-gram's unigram counts summed (the bits of two
//! `f64`, each at least 1; the second 0 without an n-gram: exact sums of integers, the same on
//! every machine), then twenty-six arrays in this order, each as its element count (`u64`) and its
//! elements, zero-padded to a multiple of 8 bytes: lengths (`u16`), punctuation flags (`u8`),
//! glue flags (`u8`), the order (`u32`, none when the ids are in byte order), the first
//! characters (pairs of `u32`: scalar value, first position), the BMP first-character table
//! (`u16`); the folded keys (UTF-8 bytes) and their `V + 1` offsets (`u32`), the shadowed flags
//! (`u8`) and the stretch lengths (`u8`), all four empty where case is not ignored; the classes'
//! offsets into the members (`u32`, `K + 1`), the members (`u32`) and their biases (`f32`), all
//! three empty for a flat head; the n-gram's best unigram positions (`u32`, increasing), its
//! long bigram and trigram lists (pairs of `u32`: first entry, offset into the followers),
//! their best followers (`u16`, each list's increasing) and those followers' counts (`u16`),
//! and per long list the count there of each best unigram position (`u16`, 0 where absent),
//! the ranges of the one-character prefixes with more than `TOP_FOLLOW` words (pairs of `u32`:
//! first position, end), where each one's unigram candidates start (`u32`, one more) and the
//! candidates (`u32`, each range's increasing), all nine empty without an n-gram; the unigram's counts (`u32`, `V`), the
//! prior's corpus counts (`u32`, `V` where the prior is 2, else none) and each word's class
//! (`u32`, `V`, none for a flat head); where each word starts in the lexicon's GGUF run and the
//! run's length plus 8 (`u32`, `V + 1`, [`laya_format::Strings::run_starts`]).

use std::borrow::Cow;

use crate::classes::{ClassIndex, WordClasses};
use crate::lexicon::{Lexicon, LexiconIndex};
use crate::model::PriorSource;
use crate::ngram::{Ngram, NgramIndex};

const MAGIC: &[u8; 8] = b"LAYAIDX9";

/// The lexicon's per-word integers as a load keeps them.
pub(crate) struct PerWord<'a> {
    /// The counts the unigram cuts text by ([`crate::unigram::WordLogp::freq`]).
    pub(crate) cuts: &'a [u32],
    /// Their [`crate::unigram::WordLogp::total`].
    pub(crate) cut_total: f64,
    /// Where the completion prior comes from.
    pub(crate) prior: &'a PriorSource,
    /// Words with a dictionary frequency ([`crate::ModelInfo::dict_words`]).
    pub(crate) dict_words: usize,
}

/// A prepared index's arrays, where the image holds them.
pub(crate) struct Index {
    pub(crate) lexicon: LexiconIndex<'static>,
    /// `None` for a flat word head.
    pub(crate) classes: Option<ClassIndex<'static>>,
    /// `None` for a model without an n-gram.
    pub(crate) ngram: Option<NgramIndex<'static>>,
    /// The word count the index was made for.
    pub(crate) words: usize,
    /// Where each word starts in the lexicon's GGUF run, then its length plus 8.
    pub(crate) word_starts: &'static [u32],
    /// [`PerWord::cuts`] and [`PerWord::cut_total`].
    pub(crate) cuts: &'static [u32],
    pub(crate) cut_total: f64,
    /// [`Ngram::c1_total`], where the model has an n-gram.
    pub(crate) c1_total: Option<f64>,
    pub(crate) prior: PriorSource,
    pub(crate) dict_words: usize,
}

/// The prepared index of `lexicon`, `classes`, `ngram` (prepared: [`Ngram::prepare`]) and the
/// per-word integers `words` for the model whose checksum is `checksum`.
pub(crate) fn write(lexicon: &Lexicon, classes: Option<&WordClasses>, ngram: Option<&Ngram>, words: PerWord, checksum: u64) -> Vec<u8> {
    let ix = lexicon.index();
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(lexicon.len() as u64).to_le_bytes());
    out.extend_from_slice(&checksum.to_le_bytes());
    let (prior, corpus): (u64, &[u32]) = match words.prior {
        PriorSource::None => (0, &[]),
        PriorSource::Zero(_) => (1, &[]),
        PriorSource::Corpus(c) => (2, c),
    };
    out.extend_from_slice(&prior.to_le_bytes());
    out.extend_from_slice(&(words.dict_words as u64).to_le_bytes());
    out.extend_from_slice(&words.cut_total.to_bits().to_le_bytes());
    out.extend_from_slice(&ngram.map_or(0.0, Ngram::c1_total).to_bits().to_le_bytes());
    let mut array = |count: usize, bytes: &[u8]| {
        out.extend_from_slice(&(count as u64).to_le_bytes());
        out.extend_from_slice(bytes);
        out.resize(out.len().next_multiple_of(8), 0);
    };
    array(ix.char_lens.len(), bytemuck::cast_slice(ix.char_lens));
    array(ix.punct.len(), ix.punct);
    array(ix.glues.len(), ix.glues);
    let order = ix.order.unwrap_or_default();
    array(order.len(), bytemuck::cast_slice(order));
    array(ix.first_chars.len(), bytemuck::cast_slice(ix.first_chars));
    array(ix.bmp_first.len(), bytemuck::cast_slice(ix.bmp_first));
    let (text, offsets) = ix.folded.unwrap_or_default();
    array(text.len(), text);
    array(offsets.len(), bytemuck::cast_slice(offsets));
    array(ix.shadowed.len(), ix.shadowed);
    array(ix.stretched.len(), ix.stretched);
    let c = classes.map(WordClasses::index);
    let (start, ids, bias, class_of) = c.map_or((&[][..], &[][..], &[][..], &[][..]), |c| (c.start, c.ids, c.bias, c.class_of));
    array(start.len(), bytemuck::cast_slice(start));
    array(ids.len(), bytemuck::cast_slice(ids));
    array(bias.len(), bytemuck::cast_slice(bias));
    let n = ngram.and_then(Ngram::index);
    let none = NgramIndex {
        top_c1: &[],
        bigram: &[],
        trigram: &[],
        tops: &[],
        top_counts: &[],
        c1_counts: &[],
        first_ranges: &[],
        first_offsets: &[],
        first_tops: &[],
    };
    let n = n.unwrap_or(none);
    array(n.top_c1.len(), bytemuck::cast_slice(n.top_c1));
    array(n.bigram.len(), bytemuck::cast_slice(n.bigram));
    array(n.trigram.len(), bytemuck::cast_slice(n.trigram));
    array(n.tops.len(), bytemuck::cast_slice(n.tops));
    array(n.top_counts.len(), bytemuck::cast_slice(n.top_counts));
    array(n.c1_counts.len(), bytemuck::cast_slice(n.c1_counts));
    array(n.first_ranges.len(), bytemuck::cast_slice(n.first_ranges));
    array(n.first_offsets.len(), bytemuck::cast_slice(n.first_offsets));
    array(n.first_tops.len(), bytemuck::cast_slice(n.first_tops));
    array(words.cuts.len(), bytemuck::cast_slice(words.cuts));
    array(corpus.len(), bytemuck::cast_slice(corpus));
    array(class_of.len(), bytemuck::cast_slice(class_of));
    let starts = lexicon.words().run_starts();
    array(starts.len(), bytemuck::cast_slice(&starts));
    out
}

/// The arrays of `image`, a prepared index of the model whose checksum is `checksum`, in place
/// (the caller compares [`Index::words`] with the model's lexicon). `image` must start 8-byte aligned (a static is, when
/// the program aligns it as it does the model). The arrays' contents are checked where they
/// are taken ([`Lexicon::with_index`], [`WordClasses::new`]); a malformed image is an error
/// here, never a panic.
pub(crate) fn read(image: &'static [u8], checksum: u64) -> Result<Index, String> {
    if cfg!(target_endian = "big") {
        return Err("a prepared index is little-endian and this machine is not".into());
    }
    let mut r = Reader { image, at: 0 };
    if r.take(8)? != MAGIC {
        return Err("not a prepared index of this version (bad magic)".into());
    }
    let n = r.u64()?;
    let made_for = r.u64()?;
    if made_for != checksum {
        return Err(format!("made for the model with checksum {made_for:016x}, not {checksum:016x}"));
    }
    let words = usize::try_from(n).map_err(|_| format!("made for {n} words"))?;
    let (prior, dict_words) = (r.u64()?, r.u64()?);
    if dict_words > n {
        return Err(format!("{dict_words} words with a dictionary frequency, of {n}"));
    }
    let (cut_total, c1_total) = (f64::from_bits(r.u64()?), f64::from_bits(r.u64()?));
    let char_lens: &'static [u16] = r.array()?;
    let punct: &'static [u8] = r.array()?;
    let glues: &'static [u8] = r.array()?;
    let order: &'static [u32] = r.array()?;
    let first_chars: &'static [[u32; 2]] = r.array()?;
    let bmp_first: &'static [u16] = r.array()?;
    let folded_text: &'static [u8] = r.array()?;
    let folded_offsets: &'static [u32] = r.array()?;
    let shadowed: &'static [u8] = r.array()?;
    let stretched: &'static [u8] = r.array()?;
    let start: &'static [u32] = r.array()?;
    let ids: &'static [u32] = r.array()?;
    let bias: &'static [f32] = r.array()?;
    let top_c1: &'static [u32] = r.array()?;
    let bigram: &'static [[u32; 2]] = r.array()?;
    let trigram: &'static [[u32; 2]] = r.array()?;
    let tops: &'static [u16] = r.array()?;
    let top_counts: &'static [u16] = r.array()?;
    let c1_counts: &'static [u16] = r.array()?;
    let first_ranges: &'static [[u32; 2]] = r.array()?;
    let first_offsets: &'static [u32] = r.array()?;
    let first_tops: &'static [u32] = r.array()?;
    let cuts: &'static [u32] = r.array()?;
    let corpus: &'static [u32] = r.array()?;
    let class_of: &'static [u32] = r.array()?;
    let word_starts: &'static [u32] = r.array()?;
    if word_starts.len() != words + 1 {
        return Err(format!("{} word starts for {words} words", word_starts.len()));
    }
    let prior = match (prior, corpus.len()) {
        (0, 0) => PriorSource::None,
        (1, 0) => PriorSource::Zero(words),
        (2, n) if n == words => PriorSource::Corpus(Cow::Borrowed(corpus)),
        _ => return Err(format!("a completion prior of kind {prior} with {} corpus counts for {words} words", corpus.len())),
    };
    // A sum is at least 1 (and finite); the n-gram's is 0 exactly when there is no n-gram.
    let sum_ok = |s: f64| s.is_finite() && s >= 1.0;
    if !sum_ok(cut_total) || (top_c1.is_empty() && c1_total != 0.0) || (!top_c1.is_empty() && !sum_ok(c1_total)) {
        return Err(format!("count sums {cut_total} and {c1_total} that no model has"));
    }
    let classes_fit = if start.is_empty() { class_of.is_empty() } else { class_of.len() == words };
    if cuts.len() != words || !classes_fit {
        return Err(format!("{} counts and {} word classes for {words} words", cuts.len(), class_of.len()));
    }
    if r.at != image.len() {
        return Err(format!("{} bytes after the last array", image.len() - r.at));
    }
    let order = (!order.is_empty()).then_some(order);
    Ok(Index {
        lexicon: LexiconIndex {
            char_lens,
            punct,
            glues,
            order,
            first_chars,
            bmp_first,
            folded: (!folded_offsets.is_empty()).then_some((folded_text, folded_offsets)),
            shadowed,
            stretched,
        },
        classes: (!start.is_empty()).then_some(ClassIndex { start, ids, bias, class_of }),
        ngram: (!top_c1.is_empty()).then_some(NgramIndex {
            top_c1,
            bigram,
            trigram,
            tops,
            top_counts,
            c1_counts,
            first_ranges,
            first_offsets,
            first_tops,
        }),
        words,
        word_starts,
        cuts,
        cut_total,
        c1_total: (!top_c1.is_empty()).then_some(c1_total),
        prior,
        dict_words: dict_words as usize,
    })
}

/// A cursor over the image.
struct Reader {
    image: &'static [u8],
    at: usize,
}

impl Reader {
    fn take(&mut self, len: usize) -> Result<&'static [u8], String> {
        let end = self.at.checked_add(len).filter(|&e| e <= self.image.len()).ok_or("truncated")?;
        let bytes = &self.image[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    fn u64(&mut self) -> Result<u64, String> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
    }

    /// One array: its count, its elements in place, its padding.
    fn array<T: bytemuck::Pod>(&mut self) -> Result<&'static [T], String> {
        let count = usize::try_from(self.u64()?).map_err(|_| "an array too long for this machine")?;
        let len = count.checked_mul(size_of::<T>()).ok_or("an array too long for this machine")?;
        let bytes = self.take(len)?;
        self.take(len.next_multiple_of(8) - len)?;
        bytemuck::try_cast_slice(bytes).map_err(|e| format!("an array not aligned for its type: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use laya_format::Strings;

    const WORDS: [&str; 7] = ["今天", "天气", "a", "。", "東京", "hello", "今"];

    /// Bytes as a program holds its statics: 64-byte aligned, for the life of the program.
    fn aligned(bytes: &[u8]) -> &'static [u8] {
        let room: &'static mut [u8] = vec![0u8; bytes.len() + 64].leak();
        let at = room.as_ptr().align_offset(64);
        room[at..at + bytes.len()].copy_from_slice(bytes);
        &room[at..at + bytes.len()]
    }

    fn words() -> Strings {
        WORDS.iter().collect()
    }

    /// Where array `k` (its count) starts in an image.
    fn array_at(image: &[u8], k: usize) -> usize {
        (0..k).fold(56, |at, i| {
            let count = u64::from_le_bytes(image[at..at + 8].try_into().unwrap()) as usize;
            let size = [2, 1, 1, 4, 8, 2, 1, 4, 1, 1, 4, 4, 4, 4, 8, 8, 2, 2, 2, 8, 4, 4, 4, 4, 4, 4][i];
            at + 8 + (count * size).next_multiple_of(8)
        })
    }

    /// The per-word integers of a lexicon of `WORDS.len()` words without a prior.
    const CUTS: [u32; 7] = [5, 0, 3, 9, 1, 2, 7];

    fn per_word(prior: &PriorSource) -> PerWord<'_> {
        PerWord { cuts: &CUTS, cut_total: 29.0, prior, dict_words: 0 }
    }

    fn write_plain(lexicon: &Lexicon, checksum: u64) -> Vec<u8> {
        write(lexicon, None, None, per_word(&PriorSource::None), checksum)
    }

    fn lexicon(image: &'static [u8], checksum: u64) -> Result<Lexicon, String> {
        Lexicon::with_index(words(), read(image, checksum)?.lexicon)
    }

    #[test]
    fn an_index_read_in_place_is_the_index_built_at_load() {
        let built = Lexicon::new(&WORDS);
        let image = aligned(&write_plain(&built, 7));
        let index = read(image, 7).unwrap();
        assert!(index.classes.is_none());
        assert_eq!((index.cuts, index.cut_total, index.c1_total, index.dict_words), (&CUTS[..], 29.0, None, 0));
        assert!(matches!(index.prior, PriorSource::None));
        // The completion prior's corpus counts, and its two other kinds.
        let corpus = PriorSource::Corpus(Cow::Owned(vec![1, 2, 3, 4, 5, 6, 7]));
        let image = aligned(&write(&built, None, None, PerWord { cuts: &CUTS, cut_total: 29.0, prior: &corpus, dict_words: 4 }, 7));
        let index = read(image, 7).unwrap();
        assert!(matches!(index.prior, PriorSource::Corpus(c) if c[..] == [1, 2, 3, 4, 5, 6, 7]));
        assert_eq!(index.dict_words, 4);
        let image = aligned(&write(&built, None, None, per_word(&PriorSource::Zero(7)), 7));
        assert!(matches!(read(image, 7).unwrap().prior, PriorSource::Zero(7)));
        let image = aligned(&write_plain(&built, 7));
        let read = lexicon(image, 7).unwrap();
        let (a, b) = (built.index(), read.index());
        assert_eq!((a.char_lens, a.punct, a.glues, a.order), (b.char_lens, b.punct, b.glues, b.order));
        assert_eq!((a.first_chars, a.bmp_first), (b.first_chars, b.bmp_first));
        for prefix in ["", "今", "今天", "天", "h", "x", "。"] {
            assert_eq!(built.prefix_range(prefix.as_bytes()), read.prefix_range(prefix.as_bytes()), "{prefix:?}");
        }
        assert!((0..WORDS.len()).all(|id| built.flags(id) == read.flags(id) && built.word(id) == read.word(id)));
        // A lexicon that folds case: its folded keys, shadowed and stretched words too.
        let folded = Lexicon::new_folded(&["hello", "Hello", "sooo", "Ärger"], &[1, 2, 3, 4]);
        let folded_cuts = [1, 2, 3, 4];
        let image = aligned(&write(
            &folded,
            None,
            None,
            PerWord { cuts: &folded_cuts, cut_total: 10.0, prior: &PriorSource::None, dict_words: 0 },
            7,
        ));
        let words: Strings = ["hello", "Hello", "sooo", "Ärger"].iter().collect();
        let read = Lexicon::with_index(words, super::read(image, 7).unwrap().lexicon).unwrap();
        assert!(read.ignores_case());
        for prefix in ["h", "hel", "s", "ä", "x"] {
            assert_eq!(folded.prefix_range(prefix.as_bytes()), read.prefix_range(prefix.as_bytes()), "{prefix:?}");
        }
        assert!((0..4).all(|id| folded.is_shadowed(id) == read.is_shadowed(id) && folded.hides_stretch(id, 2) == read.hides_stretch(id, 2)));
        assert_eq!((0..4).filter(|&id| read.is_shadowed(id)).count(), 1);
    }

    #[test]
    fn an_index_that_does_not_fit_is_refused() {
        let good = write_plain(&Lexicon::new(&WORDS), 7);
        let refused = |bytes: &[u8], checksum: u64| lexicon(aligned(bytes), checksum).err().unwrap_or_default();
        assert!(refused(&good, 8).contains("checksum"));
        assert_eq!(read(aligned(&good), 7).unwrap().words, WORDS.len());
        for len in [0, 7, 20, good.len() - 1] {
            assert!(!refused(&good[..len], 7).is_empty(), "cut at {len}");
        }
        let mut longer = good.clone();
        longer.extend_from_slice(&[0; 8]);
        assert!(refused(&longer, 7).contains("after"));
        // The order (the fourth array) names a word past the lexicon.
        let order_at = array_at(&good, 3);
        let mut bad = good.clone();
        assert_eq!(u64::from_le_bytes(bad[order_at..order_at + 8].try_into().unwrap()), 7, "the test lexicon is unsorted");
        bad[order_at + 8..order_at + 12].copy_from_slice(&99u32.to_le_bytes());
        assert!(refused(&bad, 7).contains("order"));
        // The first characters out of order.
        let first_at = array_at(&good, 4);
        let mut bad = good.clone();
        bad[first_at + 8..first_at + 12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(refused(&bad, 7).contains("first characters"));
        // Shadowed words (the ninth array) in a lexicon that does not fold case.
        let shadowed_at = array_at(&good, 8);
        let mut bad = good[..shadowed_at].to_vec();
        bad.extend_from_slice(&7u64.to_le_bytes());
        bad.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
        bad.extend_from_slice(&good[shadowed_at + 8..]);
        assert!(refused(&bad, 7).contains("shadowed"));
        // Counts for another number of words (the twenty-third array).
        let cuts_at = array_at(&good, 22);
        let mut bad = good[..cuts_at].to_vec();
        bad.extend_from_slice(&6u64.to_le_bytes());
        bad.extend_from_slice(&[0; 24]);
        bad.extend_from_slice(&good[array_at(&good, 23)..]);
        assert!(refused(&bad, 7).contains("counts"));
        // A prior of an unknown kind, or of the corpus kind without its counts; more words with
        // a dictionary frequency than words.
        // A sum below 1, or an n-gram's sum without an n-gram.
        let (half, two) = (0.5f64.to_bits(), 2.0f64.to_bits());
        for (at, value, says) in [(24, 3u64, "prior"), (24, 2, "prior"), (32, 8, "dictionary"), (40, half, "sums"), (48, two, "sums")] {
            let mut bad = good.clone();
            bad[at..at + 8].copy_from_slice(&value.to_le_bytes());
            assert!(refused(&bad, 7).contains(says), "{at} = {value}");
        }
        // Classes of the words without a class head.
        let class_of_at = array_at(&good, 24);
        let mut bad = good[..class_of_at].to_vec();
        bad.extend_from_slice(&7u64.to_le_bytes());
        bad.extend_from_slice(&[0; 32]);
        bad.extend_from_slice(&good[array_at(&good, 25)..]);
        assert!(refused(&bad, 7).contains("classes"));
        // Word starts for another number of words (the last array).
        let mut bad = good[..array_at(&good, 25)].to_vec();
        bad.extend_from_slice(&1u64.to_le_bytes());
        bad.extend_from_slice(&[8, 0, 0, 0, 0, 0, 0, 0]);
        assert!(refused(&bad, 7).contains("starts"));
        // Misaligned bytes are refused, not read.
        let shifted = &aligned(&[&[0u8][..], &good].concat())[1..];
        assert!(read(shifted, 7).err().unwrap_or_default().contains("aligned"));
    }
}
