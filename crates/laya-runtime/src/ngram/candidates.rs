//! One hypothesis of the n-gram (how much of the current word is typed) turned into scored
//! candidates: the history's follower lists and the most frequent words in the typed prefix's
//! range, each candidate carrying what its source knew of its counts ([`Tagged`]), merged by
//! position and scored by Kneser-Ney; and the cut of every hypothesis's candidates to the best
//! [`NGRAM_DEPTH`](super::NGRAM_DEPTH) of one total order ([`Scored`]).

use std::ops::Range;

use laya_format::ngram::{i32_at, u16_at};

use super::{lower_bound, LongTop, NgramInput, Tables, Walk, KEY_BYTES, SCAN_ALL, TOP_FOLLOW};

/// Moves the best `take` of `keys` ([`Scored`]) to its front, best first.
pub(super) fn keep_best(keys: &mut [u128], take: usize) {
    if take > 0 && take < keys.len() {
        keys.select_nth_unstable(take - 1);
    }
    keys[..take].sort_unstable();
}

/// A scored candidate `(p, position, i)` as one integer in the order of the n-gram's
/// candidates: `p` descending (a positive finite `f64`'s bits order as the number does, so
/// their complement orders the other way), then position and `i` ascending. The best
/// [`NGRAM_DEPTH`](super::NGRAM_DEPTH) are then a cut of one total order, the same set whatever the selection
/// algorithm, ties at the cut included, and comparing two is comparing two integers.
pub(super) struct Scored;

impl Scored {
    pub(super) fn key(p: f64, pos: u32, i: u32) -> u128 {
        debug_assert!(p > 0.0 && p.is_finite());
        (u128::from(!p.to_bits()) << 64) | (u128::from(pos) << 32) | u128::from(i)
    }

    pub(super) fn p(key: u128) -> f64 {
        f64::from_bits(!((key >> 64) as u64))
    }

    pub(super) fn pos(key: u128) -> u32 {
        (key >> 32) as u32
    }

    pub(super) fn i(key: u128) -> u32 {
        key as u32
    }
}

/// Scores the candidates of one hypothesis: `i` characters typed of the current word (the
/// `prefix`), history `h`, the hypothesis's own probability `q`.
#[allow(clippy::too_many_arguments)]
pub(super) fn hypothesis(
    t: &Tables<'_>,
    input: &NgramInput<'_>,
    h: [u32; 2],
    prefix: &str,
    i: usize,
    q: f64,
    key: &mut String,
    cand: &mut Vec<u64>,
    merged: &mut Vec<u64>,
    top: &mut Vec<(u32, u32)>,
    scored: &mut Vec<u128>,
) {
    let lex = input.lexicon;
    let range = if lex.ignores_case() {
        key.clear();
        if 2 * prefix.len() > KEY_BYTES {
            return;
        }
        laya_format::fold_into(prefix, key);
        lex.prefix_range(key.as_bytes())
    } else {
        lex.prefix_range(prefix.as_bytes())
    };
    if range.is_empty() {
        return;
    }
    let (lo, hi) = (range.start as u32, range.end as u32);
    cand.clear();
    let hist = t.history(h[0], h[1]);
    // Before the packer thread has prepared them, the lists' best followers are picked here.
    let (long, top_c1) = (t.n.long_lists.get(), t.n.top_c1.get());
    let c1_len = top_c1.map_or(0, |c| c.len());
    let trigram_top = long.and_then(|l| l.top(true, hist.trigram.start, c1_len)).filter(|_| !hist.trigram.is_empty());
    let trigram =
        followers(t.trigram_word, t.trigram_count, hist.trigram.clone(), lo, hi, trigram_top, t.n.words, Level::Trigram, cand, top);
    let after_trigram = cand.len();
    let bigram_top = long.and_then(|l| l.top(false, hist.bigram.start, c1_len)).filter(|_| !hist.bigram.is_empty());
    let bigram = followers(t.bigram_word, t.bigram_count, hist.bigram.clone(), lo, hi, bigram_top, t.n.words, Level::Bigram, cand, top);
    let after_bigram = cand.len();
    if let (Some(top_c1), true) = (top_c1, range.len() >= t.n.words) {
        // A long list taken by its best followers also knows each of these words' count.
        let known = |taken: &Taken<'_>, j: usize, level: Level| match taken {
            Taken::Best(Some(c1_counts)) => Tagged::count_or_absent(c1_counts[j], level),
            _ => 0,
        };
        cand.extend(
            top_c1.iter().enumerate().map(|(j, &p)| Tagged::of(p) | known(&trigram, j, Level::Trigram) | known(&bigram, j, Level::Bigram)),
        );
    } else if range.len() <= TOP_FOLLOW {
        // Every counted word of a short range is among the best: no ranking needed.
        cand.extend(range.filter(|&p| i32_at(t.unigram, p) > 0).map(|p| Tagged::of(p as u32)));
    } else if let Some(first) = t.n.first_tops.get().and_then(|f| f.of(&range)) {
        // One typed character: its range's candidates were picked once, at load.
        cand.extend(first.iter().map(|&p| Tagged::of(p)));
    } else {
        best_of(range.map(|p| (i32_at(t.unigram, p) as u32, p as u32)).filter(|e| e.0 > 0), top);
        top.sort_unstable_by_key(|e| e.1);
        cand.extend(top.iter().map(|e| Tagged::of(e.1)));
    }
    // By position, one key per word with what its sources knew of its counts: each source's
    // run is in increasing position, so they merge.
    merge_runs([&cand[..after_trigram], &cand[after_trigram..after_bigram], &cand[after_bigram..]], merged);
    std::mem::swap(cand, merged);
    let complete = [matches!(bigram, Taken::All), matches!(trigram, Taken::All)];
    let mut walk = Walk::new(&hist);
    for &key in cand.iter() {
        let w = Tagged::pos(key);
        let id = lex.id_at(w as usize);
        // A keyboard types punctuation with its own keys: never a candidate.
        if lex.char_len(id) > i && !lex.is_punct(id) && scored.len() < scored.capacity() {
            let p = q * t.prob_tagged(&hist, &mut walk, key, complete);
            if p > 0.0 {
                scored.push(Scored::key(p, w, i as u32));
            }
        }
    }
}

/// Merges `runs` of [`Tagged`] keys, each in increasing position with no position twice, into
/// `out`: one key per position, the keys of a position joined.
fn merge_runs(runs: [&[u64]; 3], out: &mut Vec<u64>) {
    out.clear();
    let mut at = [0usize; 3];
    let head = |r: usize, at: &[usize; 3]| runs[r].get(at[r]).map_or(u32::MAX, |&k| Tagged::pos(k));
    loop {
        let pos = head(0, &at).min(head(1, &at)).min(head(2, &at));
        if pos == u32::MAX {
            break;
        }
        let mut key = 0;
        for r in 0..3 {
            if head(r, &at) == pos {
                debug_assert!(key == 0 || Tagged::agree(key, runs[r][at[r]]));
                key |= runs[r][at[r]];
                at[r] += 1;
            }
        }
        out.push(key);
    }
}

/// How a hypothesis took a history's follower list.
enum Taken<'a> {
    /// Every follower in the typed prefix's range, each with its count: a candidate without
    /// one is not in the list.
    All,
    /// Its most counted followers in the range, with their counts; for an empty prefix, from
    /// the prepared long list, which also gives the counts of `top_c1` there.
    Best(Option<&'a [u16]>),
}

/// Appends to `cand` the followers in `words[list]` whose positions lie in `lo..hi`, each as a
/// [`Tagged`] key carrying its count at `level`: all of them when there are at most
/// [`SCAN_ALL`], else the [`TOP_FOLLOW`] most counted (`whole`: those of the whole list but
/// `<unk>`, prepared, when `lo..hi` is every lexicon word).
#[allow(clippy::too_many_arguments)]
fn followers<'a>(
    words: &[u8],
    counts: &[u8],
    list: Range<usize>,
    lo: u32,
    hi: u32,
    whole: Option<LongTop<'a>>,
    words_in_lexicon: usize,
    level: Level,
    cand: &mut Vec<u64>,
    top: &mut Vec<(u32, u32)>,
) -> Taken<'a> {
    let a = lower_bound(words, list.clone(), lo);
    let b = lower_bound(words, a..list.end, hi);
    // The range is the whole lexicon (an empty prefix): the slice is the list but `<unk>`.
    let whole_range = hi as usize >= words_in_lexicon;
    if b - a <= SCAN_ALL {
        cand.extend((a..b).map(|j| Tagged::of(u32::from(u16_at(words, j))) | Tagged::count_or_absent(u16_at(counts, j), level)));
        Taken::All
    } else if let (Some(whole), true) = (whole, lo == 0 && a == list.start && whole_range) {
        cand.extend(whole.words.iter().zip(whole.counts).map(|(&p, &c)| Tagged::of(u32::from(p)) | Tagged::count_or_absent(c, level)));
        Taken::Best(Some(whole.c1_counts))
    } else {
        best_of((a..b).map(|j| (u32::from(u16_at(counts, j)), u32::from(u16_at(words, j)))), top);
        top.sort_unstable_by_key(|e| e.1);
        cand.extend(top.iter().map(|e| Tagged::of(e.1) | Tagged::count_or_absent(e.0 as u16, level)));
        Taken::Best(None)
    }
}

/// The follower list of a history a count is of.
#[derive(Clone, Copy)]
pub(super) enum Level {
    Bigram,
    Trigram,
}

/// A hypothesis's candidate as one sortable integer: its position in the high bits, then per
/// level a field saying what its source knew of its count in the history's list there: 0
/// nothing, 1 absent, `c + 2` count `c`. Sorting orders by position; a word two sources gave
/// is two adjacent keys, joined by or-ing them (where both know a field they agree).
pub(super) struct Tagged;

impl Tagged {
    const FIELD: u32 = 20;
    const MASK: u64 = (1 << Self::FIELD) - 1;

    pub(super) fn of(pos: u32) -> u64 {
        u64::from(pos) << (2 * Self::FIELD)
    }

    pub(super) fn pos(key: u64) -> u32 {
        (key >> (2 * Self::FIELD)) as u32
    }

    fn shift(level: Level) -> u32 {
        match level {
            Level::Trigram => Self::FIELD,
            Level::Bigram => 0,
        }
    }

    /// The field of a count at `level` (0 in a list: absent, as prepared counts say it).
    fn count_or_absent(count: u16, level: Level) -> u64 {
        let field = if count == 0 { 1 } else { u64::from(count) + 2 };
        field << Self::shift(level)
    }

    /// What `key` knows of its count at `level`: `Some(Some(c))`, `Some(None)` absent, `None`
    /// unknown.
    pub(super) fn count(key: u64, level: Level) -> Option<Option<u16>> {
        match (key >> Self::shift(level)) & Self::MASK {
            0 => None,
            1 => Some(None),
            f => Some(Some((f - 2) as u16)),
        }
    }

    /// Whether two keys of one word say the same of every count both know.
    fn agree(a: u64, b: u64) -> bool {
        [Level::Bigram, Level::Trigram].iter().all(|&l| match (Self::count(a, l), Self::count(b, l)) {
            (Some(x), Some(y)) => x == y,
            _ => true,
        })
    }
}

/// The [`TOP_FOLLOW`] entries `(count, position)` of largest count into `top`, best first
/// (equal counts: the lower position). An insertion into a short sorted list: no allocation.
pub(super) fn best_of(entries: impl Iterator<Item = (u32, u32)>, top: &mut Vec<(u32, u32)>) {
    top.clear();
    let better = |a: (u32, u32), b: (u32, u32)| a.0 > b.0 || (a.0 == b.0 && a.1 < b.1);
    for e in entries {
        if top.len() == TOP_FOLLOW {
            if !better(e, top[TOP_FOLLOW - 1]) {
                continue;
            }
            top.pop();
        }
        let at = top.partition_point(|&x| better(x, e));
        top.insert(at, e);
    }
}

#[cfg(test)]
mod tests {
    use super::{merge_runs, Level, Tagged};

    proptest::proptest! {
        /// Three runs of increasing positions merge into every position once, in order, each
        /// key joining what its runs knew (a run's counts at its own level).
        #[test]
        fn merged_runs_hold_every_position_once_with_its_counts(
            runs in proptest::array::uniform3(proptest::collection::btree_set(0u32..300, 0..80)),
        ) {
            let levels = [Some(Level::Trigram), Some(Level::Bigram), None];
            let keys: Vec<Vec<u64>> = runs
                .iter()
                .zip(levels)
                .map(|(run, level)| run.iter().map(|&p| Tagged::of(p) | level.map_or(0, |l| Tagged::count_or_absent((p % 7) as u16, l))).collect())
                .collect();
            let mut out = Vec::new();
            merge_runs([&keys[0], &keys[1], &keys[2]], &mut out);
            let all: std::collections::BTreeSet<u32> = runs.iter().flatten().copied().collect();
            proptest::prop_assert_eq!(out.iter().map(|&k| Tagged::pos(k)).collect::<Vec<_>>(), all.into_iter().collect::<Vec<_>>());
            for &k in &out {
                let p = Tagged::pos(k);
                let want = |r: usize| runs[r].contains(&p).then_some(if p.is_multiple_of(7) { None } else { Some((p % 7) as u16) });
                proptest::prop_assert_eq!(Tagged::count(k, Level::Trigram), want(0));
                proptest::prop_assert_eq!(Tagged::count(k, Level::Bigram), want(1));
            }
        }
    }

    proptest::proptest! {
        /// The n-gram's best candidates are the first of one total order (probability
        /// descending, then position and typed length), ties at the cut included: few distinct
        /// probabilities make many ties.
        #[test]
        fn the_best_candidates_are_a_cut_of_one_order(
            cands in proptest::collection::btree_map((0u32..400, 0u32..4), 1u8..5, 0..200),
            take in 0usize..80,
        ) {
            let scored: Vec<(f64, u32, u32)> = cands.iter().map(|(&(pos, i), &p)| (f64::from(p) / 7.0, pos, i)).collect();
            let mut sorted = scored.clone();
            sorted.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
            let take = take.min(scored.len());
            let mut keys: Vec<u128> = scored.iter().map(|&(p, pos, i)| super::Scored::key(p, pos, i)).collect();
            super::keep_best(&mut keys, take);
            let kept: Vec<(f64, u32, u32)> = keys[..take].iter().map(|&k| (super::Scored::p(k), super::Scored::pos(k), super::Scored::i(k))).collect();
            proptest::prop_assert_eq!(&kept[..], &sorted[..take]);
        }
    }
}
