//! The word trigram beside the network (docs/format.md §8, docs/architecture.md "The n-gram
//! beside the network"): interpolated Kneser-Ney probabilities read in place from the model
//! file, the context cut into lexicon words as training cut it, the n-gram's own hypotheses of
//! how much of the current word is typed, and the mix of its candidates into the network's.
//! Its naive twin is `laya_text::NgramPredictor`, whose rules this follows step for step. Every
//! buffer is sized when the session is made: a prediction allocates nothing.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::OnceLock;

use laya_format::ngram::{i32_at, names, prefix_class, u16_at, PREFIX_CLASSES, PREFIX_LENGTHS, SCAN_ALL, TOP_FOLLOW};
use laya_format::{LayaFile, NormRule};

use crate::learn::{cut_han_into, HanCut, Lookup, LONGEST};
use crate::lexicon::Lexicon;
use crate::unigram::WordLogp;

mod candidates;
mod mix;

use candidates::{best_of, hypothesis, keep_best, Level, Scored, Tagged};
pub(crate) use mix::{adds, mix, mix_rule};

/// The n-gram's weight `w` in the mix unless the session sets another
/// ([`crate::Session::set_ngram_weight`]): chosen on the dev genres (docs/training.md).
pub const DEFAULT_NGRAM_WEIGHT: f32 = 0.3;
/// The n-gram's best candidates that the mix considers: 32 types the dev genres as 64 did
/// (means within 0.0001) for 1.6 µs less per keystroke (docs/training.md).
pub const NGRAM_DEPTH: usize = 32;
/// Characters at the end of the context that the n-gram reads: the current word and the history
/// window before it.
const TAIL_CHARS: usize = 48;
/// Bytes of a folded word or prefix: folding maps a character to one character, at most
/// doubling its bytes (a 1-byte character folds to ASCII), so any piece of the tail fits.
const KEY_BYTES: usize = 2 * 4 * TAIL_CHARS;
/// Characters of context cut to find the history.
const HISTORY_WINDOW: usize = 24;
/// Plain split hypotheses, beyond the starts of the last two words.
const SPLIT_CHARS: usize = 4;
/// Probability floor of a typed word the n-gram has never seen.
const UNSEEN: f64 = 1e-9;
/// Hypotheses at most: the plain splits and the starts of the last two words.
const MAX_HYPOTHESES: usize = SPLIT_CHARS + 1 + 2;
/// Candidates of one hypothesis at most: two follower lists and the unigrams.
const MAX_PER_HYPOTHESIS: usize = 2 * SCAN_ALL + TOP_FOLLOW;

/// The n-gram tables of a loaded model: where each lies in the model's bytes, and what is
/// derived from them at load.
pub(crate) struct Ngram {
    /// Byte ranges of the tensors, in `names::ALL` order.
    tables: [Range<usize>; 11],
    /// `V`, the lexicon size: position `V` is `<s>`, `V + 1` a word outside the lexicon.
    words: usize,
    /// `B`, bigram entries: trigram history `B` is `(<s>, <s>)`.
    bigrams: usize,
    /// `Σ N1+(· w)`: the unigram level's denominator.
    c1_total: f64,
    /// The bigram and trigram discounts.
    d2: f64,
    d3: f64,
    /// `P(i | class)`: how many characters of the current word are typed, by the class of the
    /// character before the cursor.
    p_i: [[f64; PREFIX_LENGTHS]; PREFIX_CLASSES],
    /// The [`TOP_FOLLOW`] positions of largest unigram count, in increasing order: the
    /// unigram candidates of an empty prefix. Built by [`Ngram::prepare`], on the model's
    /// packer thread; until then a prediction picks them from the counts itself (the same
    /// positions, more slowly).
    top_c1: OnceLock<Cow<'static, [u32]>>,
    /// The most counted followers of every list longer than [`SCAN_ALL`], taken whole when
    /// the typed prefix is empty (the next-word hypothesis, at every keystroke). Built with
    /// `top_c1`, and likewise picked from the list by a prediction that comes first.
    long_lists: OnceLock<LongLists>,
    /// The unigram candidates of every one-character prefix whose range holds more than
    /// [`TOP_FOLLOW`] words: what a hypothesis with one typed character would pick by a scan
    /// of its range at every keystroke. Built with `top_c1`.
    first_tops: OnceLock<FirstTops>,
}

/// Per range of the words that start with one character, longer than [`TOP_FOLLOW`]: its
/// unigram candidates, as [`best_of`] picks them from the range, in increasing position.
struct FirstTops {
    /// `[start, end)` of each range, in increasing position.
    ranges: Cow<'static, [[u32; 2]]>,
    /// `(ranges + 1)` where each range's candidates start in `tops`.
    offsets: Cow<'static, [u32]>,
    /// The candidates, each range's in increasing position.
    tops: Cow<'static, [u32]>,
}

impl FirstTops {
    /// The unigram candidates of `range` if it is one of the prepared ranges.
    fn of(&self, range: &Range<usize>) -> Option<&[u32]> {
        let at = self.ranges.binary_search_by_key(&(range.start as u32), |r| r[0]).ok()?;
        if self.ranges[at][1] as usize != range.end {
            return None;
        }
        self.tops.get(*self.offsets.get(at)? as usize..*self.offsets.get(at + 1)? as usize)
    }
}

/// Per follower list longer than [`SCAN_ALL`]: its [`TOP_FOLLOW`] most counted followers, as
/// [`best_of`] picks them, with their counts, and the counts there of the unigram candidates
/// of an empty prefix (`top_c1`), so that the next-word hypothesis, which takes exactly these,
/// searches the list for none of them.
struct LongLists {
    /// `[first entry of the list, where its followers are in tops]`, by first entry (bigram
    /// and trigram lists apart: the tables' entry numbers are their own).
    bigram: Cow<'static, [[u32; 2]]>,
    trigram: Cow<'static, [[u32; 2]]>,
    /// `(TOP_FOLLOW per list)` the best followers, each list's in increasing position.
    tops: Cow<'static, [u16]>,
    /// `(TOP_FOLLOW per list)` their counts in the list.
    top_counts: Cow<'static, [u16]>,
    /// `(top_c1.len() per list)` the count in the list of each of `top_c1`, 0 where absent.
    c1_counts: Cow<'static, [u16]>,
}

/// One long list's part of [`LongLists`].
#[derive(Clone, Copy)]
struct LongTop<'a> {
    words: &'a [u16],
    counts: &'a [u16],
    /// Aligned with `top_c1`.
    c1_counts: &'a [u16],
}

impl LongLists {
    fn top(&self, trigram: bool, list_start: usize, c1_len: usize) -> Option<LongTop<'_>> {
        let index = if trigram { &self.trigram } else { &self.bigram };
        let at = index.binary_search_by_key(&(list_start as u32), |e| e[0]).ok()?;
        let from = index[at][1] as usize;
        let c1_from = from / TOP_FOLLOW * c1_len;
        Some(LongTop {
            words: self.tops.get(from..from + TOP_FOLLOW)?,
            counts: self.top_counts.get(from..from + TOP_FOLLOW)?,
            c1_counts: self.c1_counts.get(c1_from..c1_from + c1_len)?,
        })
    }
}

/// What [`Ngram::prepare`] derives from the tables, as [`Ngram::index`] lends it and a prepared
/// index ([`crate::prepared`]) gives it back ([`Ngram::adopt`]).
pub(crate) struct NgramIndex<'a> {
    /// The unigram candidates of an empty prefix.
    pub(crate) top_c1: &'a [u32],
    /// The long lists' `[first entry, offset into tops]`, bigram and trigram lists apart.
    pub(crate) bigram: &'a [[u32; 2]],
    pub(crate) trigram: &'a [[u32; 2]],
    /// Their best followers, [`TOP_FOLLOW`] per list in increasing position, their counts, and
    /// per list the counts of the `top_c1` words (0: absent).
    pub(crate) tops: &'a [u16],
    pub(crate) top_counts: &'a [u16],
    pub(crate) c1_counts: &'a [u16],
    /// The one-character prefixes' ranges, where their unigram candidates start (one more),
    /// and the candidates ([`FirstTops`]).
    pub(crate) first_ranges: &'a [[u32; 2]],
    pub(crate) first_offsets: &'a [u32],
    pub(crate) first_tops: &'a [u32],
}

/// The tables of one prediction, as slices of the model's bytes.
#[derive(Clone, Copy)]
struct Tables<'a> {
    n: &'a Ngram,
    unigram: &'a [u8],
    bigram_start: &'a [u8],
    bigram_total: &'a [u8],
    bigram_word: &'a [u8],
    bigram_count: &'a [u8],
    trigram_start: &'a [u8],
    trigram_total: &'a [u8],
    trigram_word: &'a [u8],
    trigram_count: &'a [u8],
}

impl Ngram {
    /// The tables of a validated file whose tensor bytes start at `base` in memory;
    /// `c1_total`, the [`Ngram::c1_total`] a prepared index kept for the same file, else
    /// summed here.
    pub(crate) fn from_file(file: &LayaFile<'_>, base: usize, c1_total: Option<f64>) -> Option<Ngram> {
        let t = file.ngram.as_ref()?;
        let range = |name: &str| {
            let data = t.get(name).map_or(&[][..], |r| r.data);
            let start = data.as_ptr() as usize - base;
            start..start + data.len()
        };
        let tables = names::ALL.map(range);
        let data = |name: &str| t.get(name).map_or(&[][..], |r| r.data);
        let unigram = data(names::UNIGRAM);
        // Exact (validated counts, non-negative and below 2³¹, of at most a million words), so a
        // kept sum is this one.
        let c1_total = c1_total.unwrap_or_else(|| (0..unigram.len() / 4).map(|i| f64::from(i32_at(unigram, i))).sum::<f64>().max(1.0));
        let discount = data(names::DISCOUNT);
        let d = |i: usize| f64::from(f32::from_le_bytes([discount[4 * i], discount[4 * i + 1], discount[4 * i + 2], discount[4 * i + 3]]));
        let prefix = data(names::PREFIX);
        let mut p_i = [[0.0; PREFIX_LENGTHS]; PREFIX_CLASSES];
        for (c, row) in p_i.iter_mut().enumerate() {
            // Add-half smoothing, as the twin does.
            let count = |i: usize| f64::from(i32_at(prefix, c * PREFIX_LENGTHS + i)) + 0.5;
            let total: f64 = (0..PREFIX_LENGTHS).map(count).sum();
            for (i, p) in row.iter_mut().enumerate() {
                *p = count(i) / total;
            }
        }
        Some(Ngram {
            tables,
            words: file.meta.words.len(),
            bigrams: t.bigrams,
            c1_total,
            d2: d(0),
            d3: d(1),
            p_i,
            top_c1: OnceLock::new(),
            long_lists: OnceLock::new(),
            first_tops: OnceLock::new(),
        })
    }

    /// The unigram counts summed (at least 1), for a prepared index.
    pub(crate) fn c1_total(&self) -> f64 {
        self.c1_total
    }

    fn tables<'a>(&'a self, bytes: &'a [u8]) -> Tables<'a> {
        let t = |i: usize| &bytes[self.tables[i].clone()];
        Tables {
            n: self,
            unigram: t(0),
            bigram_start: t(1),
            bigram_total: t(2),
            bigram_word: t(3),
            bigram_count: t(4),
            trigram_start: t(5),
            trigram_total: t(6),
            trigram_word: t(7),
            trigram_count: t(8),
        }
    }

    /// `<s>`.
    fn bos(&self) -> u32 {
        self.words as u32
    }

    /// A word outside the lexicon.
    fn unk(&self) -> u32 {
        self.words as u32 + 1
    }

    /// The [`TOP_FOLLOW`] positions of largest unigram count, as [`best_of`] picks them, in
    /// increasing order: the unigram candidates of an empty prefix (computed at the first call).
    fn top_c1(&self, bytes: &[u8]) -> &[u32] {
        self.top_c1.get_or_init(|| {
            let unigram = self.tables(bytes).unigram;
            let mut top = Vec::with_capacity(TOP_FOLLOW + 1);
            best_of((0..self.words).map(|p| (i32_at(unigram, p) as u32, p as u32)).filter(|e| e.0 > 0), &mut top);
            let mut positions: Vec<u32> = top.into_iter().map(|e| e.1).collect();
            positions.sort_unstable();
            Cow::Owned(positions)
        })
    }

    /// The best followers of the long lists (computed at the first call).
    fn long_lists(&self, bytes: &[u8]) -> &LongLists {
        self.long_lists.get_or_init(|| {
            let t = self.tables(bytes);
            let top_c1 = self.top_c1(bytes);
            let (mut bigram_index, mut trigram_index) = (Vec::new(), Vec::new());
            let (mut tops, mut top_counts, mut c1_counts) = (Vec::new(), Vec::new(), Vec::new());
            let mut top = Vec::with_capacity(TOP_FOLLOW + 1);
            let (bigram_lists, trigram_lists) = (self.words + 2, self.bigrams + 1);
            for (trigram, lists) in [(false, bigram_lists), (true, trigram_lists)] {
                let (start, words, counts) = if trigram {
                    (t.trigram_start, t.trigram_word, t.trigram_count)
                } else {
                    (t.bigram_start, t.bigram_word, t.bigram_count)
                };
                for l in 0..lists {
                    let (a, end) = (i32_at(start, l) as usize, i32_at(start, l + 1) as usize);
                    if end - a <= SCAN_ALL {
                        continue;
                    }
                    // The lexicon's words: what an empty prefix's range holds (not `<unk>`).
                    let b = lower_bound(words, a..end, self.words as u32);
                    if b - a > SCAN_ALL {
                        best_of((a..b).map(|j| (u32::from(u16_at(counts, j)), u32::from(u16_at(words, j)))), &mut top);
                        top.sort_unstable_by_key(|e| e.1);
                        let index = if trigram { &mut trigram_index } else { &mut bigram_index };
                        index.push([a as u32, tops.len() as u32]);
                        tops.extend(top.iter().map(|e| e.1 as u16));
                        top_counts.extend(top.iter().map(|e| e.0 as u16));
                        let mut cursor = Cursor { list: a..b, at: a };
                        c1_counts.extend(top_c1.iter().map(|&w| cursor.find(words, w).map_or(0, |i| u16_at(counts, a + i))));
                    }
                }
            }
            LongLists {
                bigram: Cow::Owned(bigram_index),
                trigram: Cow::Owned(trigram_index),
                tops: Cow::Owned(tops),
                top_counts: Cow::Owned(top_counts),
                c1_counts: Cow::Owned(c1_counts),
            }
        })
    }

    /// The unigram candidates of the long one-character ranges (computed at the first call).
    fn first_tops(&self, bytes: &[u8], lex: &Lexicon) -> &FirstTops {
        self.first_tops.get_or_init(|| {
            let unigram = self.tables(bytes).unigram;
            let (mut ranges, mut offsets, mut tops) = (Vec::new(), vec![0u32], Vec::new());
            let mut top = Vec::with_capacity(TOP_FOLLOW + 1);
            let words = self.words.min(lex.len());
            let mut start = 0;
            while start < words {
                let Some(c) = lex.key_at(start).chars().next() else {
                    start += 1;
                    continue;
                };
                let mut utf8 = [0; 4];
                let range = lex.prefix_range(c.encode_utf8(&mut utf8).as_bytes());
                let end = range.end.clamp(start + 1, words);
                if range.start == start && range.end == end && end - start > TOP_FOLLOW {
                    best_of((start..end).map(|p| (i32_at(unigram, p) as u32, p as u32)).filter(|e| e.0 > 0), &mut top);
                    top.sort_unstable_by_key(|e| e.1);
                    ranges.push([start as u32, end as u32]);
                    tops.extend(top.iter().map(|e| e.1));
                    offsets.push(tops.len() as u32);
                }
                start = end;
            }
            FirstTops { ranges: Cow::Owned(ranges), offsets: Cow::Owned(offsets), tops: Cow::Owned(tops) }
        })
    }

    /// What [`Ngram::prepare`] derived, for a prepared index; `None` before it has run.
    pub(crate) fn index(&self) -> Option<NgramIndex<'_>> {
        let (top_c1, long, first) = (self.top_c1.get()?, self.long_lists.get()?, self.first_tops.get()?);
        Some(NgramIndex {
            top_c1,
            bigram: &long.bigram,
            trigram: &long.trigram,
            tops: &long.tops,
            top_counts: &long.top_counts,
            c1_counts: &long.c1_counts,
            first_ranges: &first.ranges,
            first_offsets: &first.offsets,
            first_tops: &first.tops,
        })
    }

    /// Takes what [`Ngram::index`] gave for the same tables earlier (a prepared index), in
    /// place, so that no prediction and no packer thread picks the lists from the counts. The
    /// candidates in it must be lexicon positions and few enough for a prediction's buffers.
    pub(crate) fn adopt(&self, ix: NgramIndex<'static>) -> Result<(), String> {
        // Maxima, which compile to vector code (the followers are many).
        let below = |max: Option<usize>| max.is_none_or(|p| p < self.words);
        let in_lexicon = below(ix.top_c1.iter().map(|&p| p as usize).max()) && below(ix.tops.iter().copied().max().map(usize::from));
        if ix.top_c1.len() > TOP_FOLLOW || !in_lexicon {
            return Err("its n-gram candidates are not lexicon positions".into());
        }
        let lists = ix.tops.len() / TOP_FOLLOW;
        if !ix.tops.len().is_multiple_of(TOP_FOLLOW)
            || ix.top_counts.len() != ix.tops.len()
            || ix.c1_counts.len() != lists * ix.top_c1.len()
        {
            return Err("its n-gram lists' counts do not match their followers".into());
        }
        let (ranges, offsets, first) = (ix.first_ranges, ix.first_offsets, ix.first_tops);
        let ranges_ok = ranges.iter().all(|r| r[0] < r[1] && r[1] as usize <= self.words)
            && ranges.windows(2).all(|w| w[0][1] <= w[1][0])
            && offsets.len() == ranges.len() + 1
            && offsets.first() == Some(&0)
            && offsets.last().is_some_and(|&o| o as usize == first.len())
            && offsets.windows(2).all(|w| w[0] <= w[1] && (w[1] - w[0]) as usize <= TOP_FOLLOW);
        if !ranges_ok || !below(first.iter().map(|&p| p as usize).max()) {
            return Err("its one-character prefixes' candidates do not fit their ranges".into());
        }
        let lists = LongLists {
            bigram: Cow::Borrowed(ix.bigram),
            trigram: Cow::Borrowed(ix.trigram),
            tops: Cow::Borrowed(ix.tops),
            top_counts: Cow::Borrowed(ix.top_counts),
            c1_counts: Cow::Borrowed(ix.c1_counts),
        };
        // A fresh model's locks are empty: nothing can have filled them yet.
        let _ = self.top_c1.set(Cow::Borrowed(ix.top_c1));
        let _ = self.long_lists.set(lists);
        let _ =
            self.first_tops.set(FirstTops { ranges: Cow::Borrowed(ranges), offsets: Cow::Borrowed(offsets), tops: Cow::Borrowed(first) });
        Ok(())
    }

    /// Computes what a prediction would otherwise pick from the counts at every keystroke: a
    /// few milliseconds over every long list, so the model's packer thread does it
    /// ([`crate::Model::pack`] waits for it). Predictions are the same before and after.
    pub(crate) fn prepare(&self, bytes: &[u8], lex: &Lexicon) {
        self.top_c1(bytes);
        self.long_lists(bytes);
        self.first_tops(bytes, lex);
    }

    /// Whether [`Ngram::prepare`] has run.
    pub(crate) fn is_prepared(&self) -> bool {
        self.top_c1.get().is_some() && self.long_lists.get().is_some() && self.first_tops.get().is_some()
    }

    /// How many one-character ranges [`Ngram::prepare`] found long (0 before it runs).
    #[cfg(test)]
    pub(crate) fn first_range_count(&self) -> usize {
        self.first_tops.get().map_or(0, |f| f.ranges.len())
    }

    /// How many lists [`Ngram::prepare`] found long (0 before it runs).
    #[cfg(test)]
    pub(crate) fn long_list_count(&self) -> usize {
        self.long_lists.get().map_or(0, |l| l.bigram.len() + l.trigram.len())
    }

    /// `P_KN(w | u v)` of positions `u`, `v`, `w`.
    pub(crate) fn probability(&self, bytes: &[u8], u: u32, v: u32, w: u32) -> f64 {
        self.tables(bytes).prob(u, v, w)
    }
}

impl Tables<'_> {
    fn c1(&self, w: u32) -> f64 {
        f64::from(i32_at(self.unigram, w as usize))
    }

    /// The bigram followers of history `v`: entries `start..end`.
    fn bigram_list(&self, v: u32) -> Range<usize> {
        i32_at(self.bigram_start, v as usize) as usize..i32_at(self.bigram_start, v as usize + 1) as usize
    }

    /// The trigram history `(u, v)`: its bigram entry (`B` for `(<s>, <s>)`), if it was seen.
    fn trigram_history(&self, u: u32, v: u32) -> Option<usize> {
        if u == self.n.bos() && v == self.n.bos() {
            return Some(self.n.bigrams);
        }
        let list = self.bigram_list(u);
        find(self.bigram_word, list.clone(), v).map(|i| list.start + i)
    }

    fn trigram_list(&self, e: usize) -> Range<usize> {
        i32_at(self.trigram_start, e) as usize..i32_at(self.trigram_start, e + 1) as usize
    }

    /// One interpolated Kneser-Ney level: `(max(c − D, 0) + D · N1+(h ·) · lower) / c(h ·)`,
    /// `count`: `w`'s count in the list, if it is there.
    fn level(list: Range<usize>, total: f64, count: Option<u16>, d: f64, lower: f64) -> f64 {
        if list.is_empty() || total <= 0.0 {
            return lower;
        }
        let distinct = list.len() as f64;
        let c = count.map_or(0.0, f64::from);
        ((c - d).max(0.0) + d * distinct * lower) / total
    }

    /// What `P_KN(· | u v)` reads of the history, looked up once for many words.
    fn history(&self, u: u32, v: u32) -> History {
        let bigram = self.bigram_list(v);
        let total2 = f64::from(i32_at(self.bigram_total, v as usize));
        let (trigram, total3) = match self.trigram_history(u, v) {
            Some(e) => (self.trigram_list(e), f64::from(i32_at(self.trigram_total, e))),
            None => (0..0, 0.0),
        };
        History { bigram, total2, trigram, total3 }
    }

    /// `P_KN(w | u v)` of the history `h` ([`Tables::history`]), `w` found in its follower
    /// lists by `walk`.
    fn prob_in(&self, h: &History, walk: &mut Walk, w: u32) -> f64 {
        self.prob_tagged(h, walk, Tagged::of(w), [false; 2])
    }

    /// [`Tables::prob_in`] of the candidate `key`, whose counts the key may know ([`Tagged`]);
    /// `complete[level]` (bigram, trigram): every follower of that list in the hypothesis's
    /// range came with its count, so a word that did not is not in the list. Only the counts
    /// known neither way are searched for.
    fn prob_tagged(&self, h: &History, walk: &mut Walk, key: u64, complete: [bool; 2]) -> f64 {
        let w = Tagged::pos(key);
        let count = |level: Level, cursor: &mut Cursor, words: &[u8], counts: &[u8], complete: bool| match Tagged::count(key, level) {
            Some(known) => known,
            None if complete => None,
            None => cursor.find(words, w).map(|i| u16_at(counts, cursor.list.start + i)),
        };
        let p1 = self.c1(w) / self.n.c1_total;
        let c2 = count(Level::Bigram, &mut walk.bigram, self.bigram_word, self.bigram_count, complete[0]);
        let p2 = Self::level(h.bigram.clone(), h.total2, c2, self.n.d2, p1);
        let c3 = count(Level::Trigram, &mut walk.trigram, self.trigram_word, self.trigram_count, complete[1]);
        Self::level(h.trigram.clone(), h.total3, c3, self.n.d3, p2)
    }

    /// `P_KN(w | u v)`.
    fn prob(&self, u: u32, v: u32, w: u32) -> f64 {
        let h = self.history(u, v);
        self.prob_in(&h, &mut Walk::new(&h), w)
    }
}

/// A history's follower lists and totals (an empty trigram list: the history was not seen).
struct History {
    bigram: Range<usize>,
    total2: f64,
    trigram: Range<usize>,
    total3: f64,
}

/// Where the words looked up in a history's two follower lists are: words asked in
/// increasing order (a hypothesis's sorted candidates) are found by galloping on from the
/// last one's place instead of a search of the whole list each.
struct Walk {
    bigram: Cursor,
    trigram: Cursor,
}

impl Walk {
    fn new(h: &History) -> Walk {
        Walk {
            bigram: Cursor { list: h.bigram.clone(), at: h.bigram.start },
            trigram: Cursor { list: h.trigram.clone(), at: h.trigram.start },
        }
    }
}

/// A place in the increasing list `words[list]`: every entry before `at` is smaller than the
/// last word asked.
struct Cursor {
    list: Range<usize>,
    at: usize,
}

impl Cursor {
    /// Where `w` is in the list, relative to its start, as [`find`] gives it; `w` is no smaller
    /// than the words asked before.
    fn find(&mut self, words: &[u8], w: u32) -> Option<usize> {
        let end = self.list.end;
        // Bracket w: entries before `lo` are smaller, `hi` is the end or an entry >= w.
        let (mut lo, mut hi, mut step) = (self.at, self.at, 1);
        while hi < end && u32::from(u16_at(words, hi)) < w {
            lo = hi + 1;
            hi = (hi + step).min(end);
            step *= 2;
        }
        self.at = lower_bound(words, lo..hi, w);
        (self.at < end && u32::from(u16_at(words, self.at)) == w).then(|| self.at - self.list.start)
    }
}

/// Where `w` is in the increasing list `words[list]`, relative to its start.
fn find(words: &[u8], list: Range<usize>, w: u32) -> Option<usize> {
    let (mut lo, mut hi) = (list.start, list.end);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match u32::from(u16_at(words, mid)).cmp(&w) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Some(mid - list.start),
        }
    }
    None
}

/// The first entry of `words[list]` at or above `w`.
fn lower_bound(words: &[u8], list: Range<usize>, w: u32) -> usize {
    let (mut lo, mut hi) = (list.start, list.end);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if u32::from(u16_at(words, mid)) < w {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// A session's buffers for the n-gram, each sized at creation for the longest context tail.
pub(crate) struct NgramScratch {
    /// The context's last line, its last [`TAIL_CHARS`] characters, normalised.
    line: String,
    /// `(≤ TAIL_CHARS + 1)` byte offsets of the characters of the current run.
    run_chars: Vec<usize>,
    /// `(≤ MAX_HYPOTHESES)` the split hypotheses: characters typed of the current word.
    splits: Vec<usize>,
    /// `(≤ TAIL_CHARS)` word ranges of a cut.
    words: Vec<Range<usize>>,
    /// The Han cutter's buffers.
    han: HanCut,
    /// What the lexicon said of the pieces the cutter looked up (of this session's model:
    /// [`NgramScratch::forget_pieces`] when it changes).
    pieces: Pieces,
    /// `(KEY_BYTES)` a word or prefix folded to its lexicon key.
    key: String,
    /// `(≤ MAX_PER_HYPOTHESIS)` one hypothesis's candidates ([`Tagged`] keys).
    cand: Vec<u64>,
    /// `(≤ MAX_PER_HYPOTHESIS)` the same merged, one key per word.
    merged: Vec<u64>,
    /// `(TOP_FOLLOW)` the best `(count, position)` of a long list, best first.
    top: Vec<(u32, u32)>,
    /// `(≤ MAX_HYPOTHESES · MAX_PER_HYPOTHESIS)` every scored candidate, as a [`Scored`] key.
    keys: Vec<u128>,
    /// `(≤ NGRAM_DEPTH)` the best of them, `(p normalised, position, i)`, best first.
    pub(crate) scored: Vec<(f64, u32, u32)>,
    /// `(≤ NGRAM_DEPTH)` per candidate of [`predict`] that the network did not rank among its
    /// best: the network's probability of it ([`crate::rank::pair_score`]) where it could
    /// reach the bar; 0 for the others.
    pub(crate) net: Vec<f32>,
    /// `(≤ NGRAM_DEPTH)` per candidate of [`predict`]: what it adds to its pair's score in the
    /// mix ([`adds`]).
    pub(crate) add: Vec<f32>,
    /// `(replace classes)` the n-gram's mass per class among its best candidates.
    own: Vec<f32>,
}

impl NgramScratch {
    /// Forgets what the lexicon said of pieces of context: the session's model changed.
    pub(crate) fn forget_pieces(&mut self) {
        self.pieces.clear();
    }

    pub(crate) fn new(replace_classes: usize) -> NgramScratch {
        NgramScratch {
            line: String::with_capacity(4 * TAIL_CHARS),
            run_chars: Vec::with_capacity(TAIL_CHARS + 1),
            splits: Vec::with_capacity(MAX_HYPOTHESES + 1),
            words: Vec::with_capacity(TAIL_CHARS),
            han: HanCut::with_capacity(TAIL_CHARS),
            pieces: Pieces::new(),
            key: String::with_capacity(KEY_BYTES),
            cand: Vec::with_capacity(MAX_PER_HYPOTHESIS),
            merged: Vec::with_capacity(MAX_PER_HYPOTHESIS),
            top: Vec::with_capacity(TOP_FOLLOW + 1),
            keys: Vec::with_capacity(MAX_HYPOTHESES * MAX_PER_HYPOTHESIS),
            scored: Vec::with_capacity(NGRAM_DEPTH),
            net: Vec::with_capacity(NGRAM_DEPTH),
            add: Vec::with_capacity(NGRAM_DEPTH),
            own: vec![0.0; replace_classes],
        }
    }
}

/// What the n-gram reads of the model besides its tables.
pub(crate) struct NgramInput<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) lexicon: &'a Lexicon,
    pub(crate) normalization: &'a [NormRule],
    pub(crate) logp: &'a WordLogp,
}

/// Cuts `text` into words (appended to `out`, byte ranges of `text`) by the rules training
/// cut it with: whitespace, `laya_format::punct::split_run`, and Han runs into the lexicon's
/// most probable words. `pieces` keeps what the lexicon said of the pieces looked up, for the
/// other cuts of this prediction and the next predictions.
fn cut(text: &str, input: &NgramInput<'_>, han: &mut HanCut, pieces: &mut Pieces, out: &mut Vec<Range<usize>>) {
    let lex = input.lexicon;
    let mut lookup = |w: &str| {
        if let Some(known) = pieces.get(w) {
            return known.lookup;
        }
        // The cutter looks up the pieces from a character on, each longer by one: the words
        // that start with this piece are among those that start with the last.
        let shorter = &w[..w.len() - w.chars().next_back().map_or(0, char::len_utf8)];
        let r = match pieces.get(shorter) {
            Some(known) => lex.narrow(known.lo as usize..known.hi as usize, w.as_bytes(), shorter.len()),
            None => lex.prefix_range(w.as_bytes()),
        };
        let lookup = if r.is_empty() {
            Lookup::Absent
        } else if lex.key_at(r.start) == w {
            Lookup::Word(input.logp.logp(lex.id_at(r.start)))
        } else {
            Lookup::Prefix
        };
        pieces.put(w, r.start as u32, r.end as u32, lookup);
        lookup
    };
    let mut cut_han = |run: &str, out: &mut Vec<Range<usize>>| cut_han_into(run, &mut lookup, input.logp.unknown, han, out);
    let mut at = 0;
    for run in text.split(char::is_whitespace) {
        // `text` is at most TAIL_CHARS characters and `out` has room for a word per character.
        if !run.is_empty() {
            laya_format::punct::split_run(run, at, &mut cut_han, out);
        }
        at += run.len();
        at += text[at..].chars().next().map_or(0, char::len_utf8);
    }
}

/// What the lexicon said of the pieces of context the cutter looked up (at most [`LONGEST`]
/// characters each), kept from prediction to prediction of one model: the cuts of a keystroke
/// (the current run, the history window, each hypothesis's typed part) overlap, and typing
/// moves the windows a character at a time, so most pieces come back. A piece one character
/// longer than a known one is searched for among the shorter one's words only. A direct-mapped
/// table keyed by the piece's bytes: a piece whose slot another took is looked up again.
pub(crate) struct Pieces {
    /// `(PIECE_SLOTS)` entries; an empty key marks a free slot.
    slots: Vec<Piece>,
}

/// Slots of [`Pieces`]: a power of two, several times the pieces of one keystroke's windows.
const PIECE_SLOTS: usize = 1024;
/// Bytes of the longest piece: [`LONGEST`] characters of up to four bytes.
const PIECE_BYTES: usize = 4 * LONGEST;

/// One piece: its bytes, its positions in the sorted lexicon (the words that start with it)
/// and the verdict.
#[derive(Clone, Copy)]
struct Piece {
    len: u8,
    key: [u8; PIECE_BYTES],
    lo: u32,
    hi: u32,
    lookup: Lookup,
}

impl Pieces {
    fn new() -> Pieces {
        Pieces { slots: vec![Piece { len: 0, key: [0; PIECE_BYTES], lo: 0, hi: 0, lookup: Lookup::Absent }; PIECE_SLOTS] }
    }

    /// Forgets every piece: the lexicon is another.
    pub(crate) fn clear(&mut self) {
        self.slots.iter_mut().for_each(|p| p.len = 0);
    }

    /// The slot of `bytes` (FNV-1a).
    fn slot(bytes: &[u8]) -> usize {
        let h = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
        (h ^ (h >> 32)) as usize & (PIECE_SLOTS - 1)
    }

    fn get(&self, piece: &str) -> Option<Piece> {
        let b = piece.as_bytes();
        let p = &self.slots[Self::slot(b)];
        (usize::from(p.len) == b.len() && !b.is_empty() && &p.key[..b.len()] == b).then_some(*p)
    }

    fn put(&mut self, piece: &str, lo: u32, hi: u32, lookup: Lookup) {
        let b = piece.as_bytes();
        if (1..=PIECE_BYTES).contains(&b.len()) {
            let mut key = [0; PIECE_BYTES];
            key[..b.len()].copy_from_slice(b);
            self.slots[Self::slot(b)] = Piece { len: b.len() as u8, key, lo, hi, lookup };
        }
    }
}

/// [`position`] of a word the cutter gave: where the lexicon has it (a piece the cutter looked
/// up as a word, [`Pieces`]), read from what the cutter kept rather than searched again.
fn cut_position(word: &str, input: &NgramInput<'_>, n: &Ngram, pieces: &Pieces, key: &mut String) -> u32 {
    match pieces.get(word) {
        Some(Piece { lo, lookup: Lookup::Word(_), .. }) if !input.lexicon.ignores_case() => lo,
        _ => position(word, input, n, key),
    }
}

/// The n-gram position of `word`: its lexicon position, or `<unk>`.
pub(crate) fn position(word: &str, input: &NgramInput<'_>, n: &Ngram, key: &mut String) -> u32 {
    let lex = input.lexicon;
    let found = if lex.ignores_case() {
        key.clear();
        if 2 * word.len() > KEY_BYTES {
            return n.unk();
        }
        laya_format::fold_into(word, key);
        lex.position_of_key(key)
    } else {
        lex.position_of_key(word)
    };
    found.map_or(n.unk(), |p| p as u32)
}

/// The n-gram's best [`NGRAM_DEPTH`] candidates after `context`, as `(p, position, i)` in
/// `s.scored[..returned]`, best first, `p` normalised over every candidate generated: the
/// rules of `laya_text::NgramPredictor::predict`, with hypotheses of at most `max_i` typed
/// characters.
pub(crate) fn predict(n: &Ngram, input: &NgramInput<'_>, s: &mut NgramScratch, context: &str, max_i: usize) -> usize {
    let t = n.tables(input.bytes);
    let NgramScratch { line, run_chars, splits, words, han, pieces, key, cand, merged, top, keys, scored, .. } = s;
    keys.clear();
    line.clear();
    let last_line = context.rsplit_once('\n').map_or(context, |(_, l)| l);
    let tail_start = last_line.char_indices().rev().nth(TAIL_CHARS - 1).map_or(0, |(b, _)| b);
    for c in last_line[tail_start..].chars() {
        line.push(input.normalization.iter().fold(c, |c, r| r.apply(c)));
    }
    let line: &str = line;
    let class = prefix_class(line.chars().next_back());
    let run_start = line.char_indices().rev().find(|(_, c)| c.is_whitespace()).map_or(0, |(b, c)| b + c.len_utf8());
    let run = &line[run_start..];
    run_chars.clear();
    run_chars.extend(run.char_indices().map(|(b, _)| b));
    splits.clear();
    splits.extend(0..=run_chars.len().min(SPLIT_CHARS));
    words.clear();
    cut(run, input, han, pieces, words);
    for r in words.iter().rev().take(2) {
        splits.push(run[r.start..].chars().count());
    }
    splits.retain(|&i| i <= max_i);
    splits.sort_unstable();
    splits.dedup();
    let split_at = |i: usize| run_start + if i == 0 { run.len() } else { run_chars[run_chars.len() - i] };
    let i_max = splits.last().copied().unwrap_or(0);
    let base = split_at(i_max);
    // The last two words before the earliest split; the line start is <s>, a history the tail
    // window cut off is a word unknown.
    let before = &line[..base];
    let window = before.char_indices().rev().nth(HISTORY_WINDOW - 1).map_or(0, |(b, _)| b);
    let cut_off = window > 0 || tail_start > 0;
    words.clear();
    cut(&before[window..], input, han, pieces, words);
    let mut base_hist = [n.bos(), n.bos()];
    for (slot, k) in [(1usize, 1usize), (0, 2)] {
        if words.len() >= k {
            let r = words[words.len() - k].clone();
            base_hist[slot] = cut_position(&before[window..][r], input, n, pieces, key);
        } else if cut_off {
            base_hist[slot] = n.unk();
        }
    }
    for &i in splits.iter() {
        let split = split_at(i);
        let mut h = base_hist;
        let mut q = n.p_i[class][i.min(PREFIX_LENGTHS - 1)];
        if split > base {
            let part = &line[base..split];
            words.clear();
            cut(part, input, han, pieces, words);
            for r in words.iter() {
                let id = cut_position(&part[r.clone()], input, n, pieces, key);
                q *= t.prob(h[0], h[1], id).max(UNSEEN);
                h = [h[1], id];
            }
        }
        hypothesis(&t, input, h, &line[split..], i, q, key, cand, merged, top, keys);
    }
    let total: f64 = keys.iter().map(|&k| Scored::p(k)).sum();
    let take = NGRAM_DEPTH.min(keys.len());
    keep_best(keys, take);
    scored.clear();
    scored.extend(keys[..take].iter().map(|&k| (Scored::p(k) / total, Scored::pos(k), Scored::i(k))));
    take
}

#[cfg(test)]
mod tests {
    use super::{cut, find, Cursor, NgramInput, Pieces};
    use crate::learn::{cut_han_into, HanCut, Lookup};
    use crate::lexicon::Lexicon;
    use crate::unigram::WordLogp;

    /// Cuts of overlapping spans of two lines sharing what the lexicon said of each piece (as
    /// the cuts of one prediction and of the next ones do) give the cuts of a plain lookup of
    /// every piece.
    #[test]
    fn cuts_sharing_their_lookups_cut_as_plain_lookups_do() {
        let words = ["今天", "天气", "今天天气", "很好", "我们", "一起", "去", "公园", "散步", "明天", "上午", "开会", "天", "好", "园"];
        let lexicon = Lexicon::new(&words);
        let shares: Vec<f32> = (0..words.len()).map(|i| -3.0 - (i % 5) as f32).collect();
        let logp = WordLogp::with_logp(&shares, -12.0, -9.0);
        let input = NgramInput { bytes: &[], lexicon: &lexicon, normalization: &[], logp: &logp };
        let mut plain = |w: &str| match words.iter().position(|&x| x == w) {
            Some(id) => Lookup::Word(logp.logp(id)),
            None if words.iter().any(|x| x.starts_with(w)) => Lookup::Prefix,
            None => Lookup::Absent,
        };
        let (mut pieces, mut han) = (Pieces::new(), HanCut::default());
        for line in [
            "今天天气很好我们一起去公园散步明天上午开会",
            "天气好明天我们去散步公园很好今天开会",
            "今天天气很好我们一起去公园散步明天上午开会",
        ] {
            let at = |chars: usize| line.char_indices().nth(chars).map_or(line.len(), |(b, _)| b);
            for (a, b) in [(0, 21), (3, 21), (14, 21), (0, 8), (5, 6), (20, 21), (1, 17)] {
                let span = at(a)..at(b);
                let (mut got, mut want) = (Vec::new(), Vec::new());
                cut(&line[span.clone()], &input, &mut han, &mut pieces, &mut got);
                cut_han_into(&line[span.clone()], &mut plain, logp.unknown, &mut HanCut::default(), &mut want);
                assert_eq!(got, want, "{line}, characters {a}..{b}");
            }
        }
        // Every piece looked up is kept (or lost to a slot collision), with its verdict.
        let kept = pieces.slots.iter().filter(|p| p.len > 0).count();
        assert!(kept > 20, "{kept}");
        for p in pieces.slots.iter().filter(|p| p.len > 0) {
            let w = std::str::from_utf8(&p.key[..usize::from(p.len)]).unwrap();
            assert_eq!(format!("{:?}", p.lookup), format!("{:?}", plain(w)), "{w}");
            // A word's first position is where the lexicon has it (`cut_position` reads it).
            if matches!(p.lookup, Lookup::Word(_)) {
                assert_eq!(Some(p.lo as usize), lexicon.position_of_key(w), "{w}");
            }
        }
        pieces.clear();
        assert!(pieces.slots.iter().all(|p| p.len == 0));
    }

    /// The prepared candidates of the one-character prefixes are those a scan of each range
    /// picks, and every such range longer than `TOP_FOLLOW` has them.
    #[test]
    fn one_character_candidates_are_a_scan_of_their_range() {
        let model = crate::model::random_with_ngram(4000, 3);
        model.pack();
        let (n, lex) = (model.ngram.as_ref().unwrap(), &model.lexicon);
        let unigram = n.tables(model.storage_bytes()).unigram;
        let first = n.first_tops.get().unwrap();
        let (mut long, mut short) = (0, 0);
        let mut start = 0;
        while start < lex.len() {
            let c = lex.key_at(start).chars().next().unwrap();
            let range = lex.prefix_range(c.to_string().as_bytes());
            assert_eq!(range.start, start, "{c}");
            let got = first.of(&range);
            if range.len() > super::TOP_FOLLOW {
                long += 1;
                let mut top = Vec::new();
                super::best_of(range.clone().map(|p| (super::i32_at(unigram, p) as u32, p as u32)).filter(|e| e.0 > 0), &mut top);
                let mut want: Vec<u32> = top.iter().map(|e| e.1).collect();
                want.sort_unstable();
                assert_eq!(got, Some(&want[..]), "{c}");
            } else {
                short += 1;
                assert_eq!(got, None, "{c}");
            }
            start = range.end;
        }
        assert!(long >= 1 && long == first.ranges.len(), "{long} long ranges, {} prepared", first.ranges.len());
        assert!(short >= 1, "no short range: one way untested");
    }

    /// A prepared index whose one-character candidates do not fit the model is refused on
    /// adoption, naming them; the index as prepared is taken.
    #[test]
    fn one_character_candidates_that_do_not_fit_are_refused() {
        let prepared = crate::model::random_with_ngram(4000, 5);
        prepared.pack();
        let ix = prepared.ngram.as_ref().unwrap().index().unwrap();
        let leak = |v: Vec<u32>| -> &'static [u32] { Box::leak(v.into_boxed_slice()) };
        let leak2 = |v: Vec<[u32; 2]>| -> &'static [[u32; 2]] { Box::leak(v.into_boxed_slice()) };
        let whole = || super::NgramIndex {
            top_c1: leak(ix.top_c1.to_vec()),
            bigram: leak2(ix.bigram.to_vec()),
            trigram: leak2(ix.trigram.to_vec()),
            tops: Box::leak(ix.tops.to_vec().into_boxed_slice()),
            top_counts: Box::leak(ix.top_counts.to_vec().into_boxed_slice()),
            c1_counts: Box::leak(ix.c1_counts.to_vec().into_boxed_slice()),
            first_ranges: leak2(ix.first_ranges.to_vec()),
            first_offsets: leak(ix.first_offsets.to_vec()),
            first_tops: leak(ix.first_tops.to_vec()),
        };
        let adopt = |index: super::NgramIndex<'static>| crate::model::random_with_ngram(4000, 5).ngram.as_ref().unwrap().adopt(index);
        assert_eq!(adopt(whole()), Ok(()));
        let (ranges, offsets, tops) = (ix.first_ranges.to_vec(), ix.first_offsets.to_vec(), ix.first_tops.to_vec());
        assert!(ranges.len() >= 2, "{} ranges", ranges.len());
        let past = |mut v: Vec<u32>| {
            v[0] = 4000;
            v
        };
        let cases = [
            super::NgramIndex { first_tops: leak(past(tops.clone())), ..whole() },
            super::NgramIndex { first_offsets: leak(offsets[..offsets.len() - 1].to_vec()), ..whole() },
            super::NgramIndex { first_ranges: leak2(ranges.iter().rev().copied().collect()), ..whole() },
            super::NgramIndex { first_ranges: leak2([[5, 5]].into_iter().chain(ranges[1..].iter().copied()).collect()), ..whole() },
            super::NgramIndex { first_offsets: leak([0, 33].into_iter().chain(offsets[2..].iter().copied()).collect()), ..whole() },
        ];
        for (k, index) in cases.into_iter().enumerate() {
            let refusal = adopt(index).unwrap_err();
            assert!(refusal.contains("one-character"), "case {k}: {refusal}");
        }
    }

    /// A cursor walked over increasing words finds each where [`find`] does, in lists with
    /// and without repeats of the asked words, from every list start.
    #[test]
    fn a_cursor_finds_what_a_search_finds() {
        let list: Vec<u16> = (0..300u16).filter(|x| x % 3 != 1).map(|x| x * 2).collect();
        let words: Vec<u8> = list.iter().flat_map(|x| x.to_le_bytes()).collect();
        for start in [0, 1, 57, list.len() - 1, list.len()] {
            for stride in [1u32, 2, 5, 37, 400] {
                let range = start..list.len();
                let mut cursor = Cursor { list: range.clone(), at: range.start };
                let mut w = 0;
                while w < 700 {
                    assert_eq!(cursor.find(&words, w), find(&words, range.clone(), w), "start {start} stride {stride} w {w}");
                    // The same word twice, as a caller with duplicates would ask.
                    assert_eq!(cursor.find(&words, w), find(&words, range.clone(), w));
                    w += stride;
                }
            }
        }
    }
}
