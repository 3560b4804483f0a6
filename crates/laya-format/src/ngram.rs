//! The word trigram a model file may carry beside its network (docs/format.md §8): interpolated
//! Kneser-Ney counts over the lexicon, as integer tensors that the runtime reads in place.
//!
//! Words are numbered by their **position in the lexicon's search order** (the byte order of
//! the words, or of their folded forms in a language that ignores case), so that the words
//! starting with typed characters are one range of numbers and a follower list cut to that range
//! is one slice. Position `V` (the lexicon size) is the line start `<s>`, `V + 1` any word
//! outside the lexicon. Positions are 16-bit: a lexicon with an n-gram holds at most
//! [`MAX_NGRAM_WORDS`] words.
//!
//! | tensor | type | shape | holds |
//! |---|---|---|---|
//! | `ngram.unigram` | I32 | `V + 2` | per word, `N1+(· w)`: the distinct words seen before it |
//! | `ngram.bigram.start` | I32 | `V + 3` | per history word `v`, where its followers start (CSR) |
//! | `ngram.bigram.total` | I32 | `V + 2` | per history word, the sum of its followers' counts |
//! | `ngram.bigram.word` | I16 | `B` | followers, increasing within each history |
//! | `ngram.bigram.count` | I16 | `B` | `N1+(· v w)`, saturated at 65,535 |
//! | `ngram.trigram.start` | I32 | `B + 2` | per bigram entry `(u, v)` (entry `B`: `(<s>, <s>)`), where its followers start |
//! | `ngram.trigram.total` | I32 | `B + 1` | per trigram history, its count `c(u v ·)` |
//! | `ngram.trigram.word` | I16 | `T` | followers, increasing within each history |
//! | `ngram.trigram.count` | I16 | `T` | `c(u v w)`, saturated at 65,535 |
//! | `ngram.prefix` | I32 | `[17, 3]` | per context class, how many characters of a word were typed: counts |
//! | `ngram.discount` | F32 | `2` | the bigram and trigram discounts `D` |
//!
//! A trigram history `(u, v)` is found as the entry of `v` among `u`'s bigram followers: every
//! history of a line but its start is a bigram seen in training.

use crate::error::FormatError;
use crate::schema::TensorRef;
use crate::types::GgmlType;
use crate::validate::Contents;
use crate::writer::TensorData;

/// Most words a lexicon with an n-gram may hold: positions and `<s>`, `<unk>` fit 16 bits.
pub const MAX_NGRAM_WORDS: usize = u16::MAX as usize - 1;
/// Rows of `ngram.prefix`: context classes (none or whitespace, a script without spaces, other).
pub const PREFIX_CLASSES: usize = 3;
/// Columns of `ngram.prefix`: characters typed of the word, 0 to 16 (16 counts every longer one).
pub const PREFIX_LENGTHS: usize = 17;
/// Candidates of one hypothesis of how much of a word is typed, the same in the n-gram's two
/// predictors (the runtime's and `laya_text`'s): a follower list with at most `SCAN_ALL`
/// followers in the typed prefix's range gives them all, a longer one its `TOP_FOLLOW` most
/// counted; the unigram level adds the `TOP_FOLLOW` most counted words of the range. 32 and 128
/// type the dev genres as 64 and 256 did, in less time (docs/training.md).
pub const TOP_FOLLOW: usize = 32;
/// See [`TOP_FOLLOW`].
pub const SCAN_ALL: usize = 128;

/// The tensor names, in the order a file stores them.
pub mod names {
    pub const UNIGRAM: &str = "ngram.unigram";
    pub const BIGRAM_START: &str = "ngram.bigram.start";
    pub const BIGRAM_TOTAL: &str = "ngram.bigram.total";
    pub const BIGRAM_WORD: &str = "ngram.bigram.word";
    pub const BIGRAM_COUNT: &str = "ngram.bigram.count";
    pub const TRIGRAM_START: &str = "ngram.trigram.start";
    pub const TRIGRAM_TOTAL: &str = "ngram.trigram.total";
    pub const TRIGRAM_WORD: &str = "ngram.trigram.word";
    pub const TRIGRAM_COUNT: &str = "ngram.trigram.count";
    pub const PREFIX: &str = "ngram.prefix";
    pub const DISCOUNT: &str = "ngram.discount";
    /// All of them: a file has every one or none.
    pub const ALL: [&str; 11] = [
        UNIGRAM,
        BIGRAM_START,
        BIGRAM_TOTAL,
        BIGRAM_WORD,
        BIGRAM_COUNT,
        TRIGRAM_START,
        TRIGRAM_TOTAL,
        TRIGRAM_WORD,
        TRIGRAM_COUNT,
        PREFIX,
        DISCOUNT,
    ];
}

/// The row of `ngram.prefix` for the character before the cursor: 0 none or whitespace, 1 a
/// script written without spaces (Han, kana …), 2 any other.
///
/// ```
/// use laya_format::ngram::prefix_class;
/// assert_eq!([prefix_class(None), prefix_class(Some('天')), prefix_class(Some('a'))], [0, 1, 2]);
/// ```
pub fn prefix_class(last: Option<char>) -> usize {
    match last {
        None => 0,
        Some(c) if c.is_whitespace() => 0,
        Some(c) if crate::punct::is_unspaced_script(c) => 1,
        Some(_) => 2,
    }
}

/// The absolute discount of one order from its counts, `n1 / (n1 + 2·n2)` (Chen & Goodman),
/// kept within 0.05..=0.95; 0.5 when no count is 1.
///
/// ```
/// assert_eq!(laya_format::ngram::discount([1, 1, 2, 5].into_iter()), 0.5);
/// ```
pub fn discount(counts: impl Iterator<Item = u64>) -> f64 {
    let (mut n1, mut n2) = (0u64, 0u64);
    for c in counts {
        match c {
            1 => n1 += 1,
            2 => n2 += 1,
            _ => {}
        }
    }
    if n1 == 0 {
        0.5
    } else {
        (n1 as f64 / (n1 as f64 + 2.0 * n2 as f64)).clamp(0.05, 0.95)
    }
}

/// The n-gram's tensors of a validated file, borrowing its bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct NgramTensors<'a> {
    /// In [`names::ALL`] order.
    pub tensors: Vec<TensorRef<'a>>,
    /// `B`: bigram entries.
    pub bigrams: usize,
    /// `T`: trigram entries.
    pub trigrams: usize,
}

impl<'a> NgramTensors<'a> {
    /// The tensor named `name` (one of [`names::ALL`]).
    pub fn get(&self, name: &str) -> Option<&TensorRef<'a>> {
        self.tensors.iter().find(|t| t.name == name)
    }
}

/// The tables built from trigram counts, ready to write ([`NgramCounts::tensors`]).
#[derive(Debug, Clone, PartialEq)]
pub struct NgramCounts {
    pub words: usize,
    pub unigram: Vec<i32>,
    pub bigram_start: Vec<i32>,
    pub bigram_total: Vec<i32>,
    pub bigram_word: Vec<u16>,
    pub bigram_count: Vec<u16>,
    pub trigram_start: Vec<i32>,
    pub trigram_total: Vec<i32>,
    pub trigram_word: Vec<u16>,
    pub trigram_count: Vec<u16>,
    /// `[class][typed characters]`.
    pub prefix: [[i32; PREFIX_LENGTHS]; PREFIX_CLASSES],
    pub discount: [f32; 2],
    /// Counts above 65,535 that were saturated.
    pub saturated: usize,
}

fn too_large(what: &str, value: u64) -> FormatError {
    FormatError::TooLarge { what: what.into(), value, limit: i32::MAX as u64 }
}

impl NgramCounts {
    /// Builds the tables of a lexicon of `words` words from `trigrams` `[u, v, w, count]` in
    /// positions (`words` is `<s>`, `words + 1` a word outside the lexicon; `w` is never
    /// `<s>`), each triple once, and the `prefix` counts.
    ///
    /// ```
    /// use laya_format::ngram::NgramCounts;
    /// // One line "0 1" over a 2-word lexicon: <s> <s> 0, <s> 0 1.
    /// let t = NgramCounts::from_trigrams(2, &[[2, 2, 0, 1], [2, 0, 1, 1]], [[0; 17]; 3]).unwrap();
    /// assert_eq!(t.bigram_word, [1, 0]); // after 0: 1; after <s>: 0
    /// assert_eq!(t.trigram_word, [1, 0]); // after (<s>, 0): 1; after (<s>, <s>): 0
    /// ```
    pub fn from_trigrams(
        words: usize,
        trigrams: &[[u32; 4]],
        prefix: [[u64; PREFIX_LENGTHS]; PREFIX_CLASSES],
    ) -> Result<NgramCounts, FormatError> {
        if words == 0 || words > MAX_NGRAM_WORDS {
            return Err(FormatError::TooLarge {
                what: "lexicon words for an n-gram".into(),
                value: words as u64,
                limit: MAX_NGRAM_WORDS as u64,
            });
        }
        let (bos, unk) = (words as u32, words as u32 + 1);
        let bad =
            |t: &[u32; 4]| FormatError::BadTensor { name: names::TRIGRAM_WORD.into(), reason: format!("trigram {t:?} for {words} words") };
        let mut tri = trigrams.to_vec();
        for t in &tri {
            if t[0] > unk || t[1] > unk || t[2] > unk || t[2] == bos || t[3] == 0 {
                return Err(bad(t));
            }
        }
        tri.sort_unstable();
        if let Some(w) = tri.windows(2).find(|w| w[0][..3] == w[1][..3]) {
            return Err(bad(&w[1]));
        }
        let mut saturated = 0usize;
        let mut sat = |c: u64| {
            if c > u64::from(u16::MAX) {
                saturated += 1;
            }
            c.min(u64::from(u16::MAX)) as u16
        };
        // Bigram continuation counts: each distinct (u, v, w) adds one to (v, w).
        let mut pairs: Vec<(u32, u32)> = tri.iter().map(|t| (t[1], t[2])).collect();
        pairs.sort_unstable();
        let ids = words + 2;
        let mut bigram_start = vec![0i32; ids + 1];
        let mut bigram_total = vec![0i64; ids];
        let mut bigram_word = Vec::new();
        let mut bigram_count = Vec::new();
        let mut unigram = vec![0i64; ids];
        let mut cont = Vec::new();
        let mut k = 0;
        while k < pairs.len() {
            let j = k + pairs[k..].iter().take_while(|p| **p == pairs[k]).count();
            let (v, w) = pairs[k];
            let n = (j - k) as u64;
            bigram_start[v as usize + 1] += 1;
            bigram_total[v as usize] += n as i64;
            bigram_word.push(w as u16);
            bigram_count.push(sat(n));
            cont.push(n);
            unigram[w as usize] += 1;
            k = j;
        }
        for i in 0..ids {
            bigram_start[i + 1] += bigram_start[i];
        }
        let b = bigram_word.len();
        // Trigram followers grouped by history in (u, v) order, which is bigram entry order;
        // the line start's history (<s>, <s>) goes last.
        let entry = |u: u32, v: u32| -> Option<usize> {
            let (s, e) = (bigram_start[u as usize] as usize, bigram_start[u as usize + 1] as usize);
            bigram_word[s..e].binary_search(&(v as u16)).ok().map(|i| s + i)
        };
        let mut trigram_start = vec![0i32; b + 2];
        let mut trigram_total = vec![0i64; b + 1];
        let mut order: Vec<(usize, u32, u64)> = Vec::with_capacity(tri.len());
        for t in &tri {
            let e = if t[0] == bos && t[1] == bos { b } else { entry(t[0], t[1]).ok_or_else(|| bad(t))? };
            order.push((e, t[2], u64::from(t[3])));
        }
        order.sort_unstable();
        let mut trigram_word = Vec::with_capacity(order.len());
        let mut trigram_count = Vec::with_capacity(order.len());
        for &(e, w, c) in &order {
            trigram_start[e + 1] += 1;
            trigram_total[e] += c as i64;
            trigram_word.push(w as u16);
            trigram_count.push(sat(c));
        }
        for i in 0..=b {
            trigram_start[i + 1] += trigram_start[i];
        }
        let narrow = |what: &str, v: Vec<i64>| -> Result<Vec<i32>, FormatError> {
            v.into_iter().map(|x| i32::try_from(x).map_err(|_| too_large(what, x as u64))).collect()
        };
        let mut p = [[0i32; PREFIX_LENGTHS]; PREFIX_CLASSES];
        for (row, src) in p.iter_mut().zip(prefix.iter()) {
            for (x, &c) in row.iter_mut().zip(src.iter()) {
                *x = c.min(i32::MAX as u64) as i32;
            }
        }
        let discount = [discount(cont.iter().copied()) as f32, discount(tri.iter().map(|t| u64::from(t[3]))) as f32];
        Ok(NgramCounts {
            words,
            unigram: narrow(names::UNIGRAM, unigram)?,
            bigram_start,
            bigram_total: narrow(names::BIGRAM_TOTAL, bigram_total)?,
            bigram_word,
            bigram_count,
            trigram_start,
            trigram_total: narrow(names::TRIGRAM_TOTAL, trigram_total)?,
            trigram_word,
            trigram_count,
            prefix: p,
            discount,
            saturated,
        })
    }

    /// The tensors, in [`names::ALL`] order.
    pub fn tensors(&self) -> Vec<TensorData> {
        let i32s = |name: &str, v: &[i32]| TensorData {
            name: name.into(),
            ty: GgmlType::I32,
            ne: vec![v.len() as u64],
            data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        };
        let u16s = |name: &str, v: &[u16]| TensorData {
            name: name.into(),
            ty: GgmlType::I16,
            ne: vec![v.len() as u64],
            data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        };
        let prefix: Vec<i32> = self.prefix.iter().flatten().copied().collect();
        vec![
            i32s(names::UNIGRAM, &self.unigram),
            i32s(names::BIGRAM_START, &self.bigram_start),
            i32s(names::BIGRAM_TOTAL, &self.bigram_total),
            u16s(names::BIGRAM_WORD, &self.bigram_word),
            u16s(names::BIGRAM_COUNT, &self.bigram_count),
            i32s(names::TRIGRAM_START, &self.trigram_start),
            i32s(names::TRIGRAM_TOTAL, &self.trigram_total),
            u16s(names::TRIGRAM_WORD, &self.trigram_word),
            u16s(names::TRIGRAM_COUNT, &self.trigram_count),
            TensorData { ne: vec![PREFIX_LENGTHS as u64, PREFIX_CLASSES as u64], ..i32s(names::PREFIX, &prefix) },
            TensorData {
                name: names::DISCOUNT.into(),
                ty: GgmlType::F32,
                ne: vec![2],
                data: self.discount.iter().flat_map(|x| x.to_le_bytes()).collect(),
            },
        ]
    }
}

/// Reads element `i` of an I32 tensor's bytes.
#[inline]
pub fn i32_at(data: &[u8], i: usize) -> i32 {
    i32::from_le_bytes([data[4 * i], data[4 * i + 1], data[4 * i + 2], data[4 * i + 3]])
}

/// Reads element `i` of an I16 tensor's bytes, as Laya reads it: unsigned.
#[inline]
pub fn u16_at(data: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([data[2 * i], data[2 * i + 1]])
}

fn bad(name: &str, reason: String) -> FormatError {
    FormatError::BadTensor { name: name.into(), reason }
}

/// Trigram entries from which the trigram table is checked on a thread of its own: below, a
/// thread would cost more than it saves.
const PARALLEL_CHECK_ENTRIES: usize = 1 << 16;

/// Checks the n-gram tensors among `tensors` of a file whose lexicon holds `words` words: all
/// or none, types and shapes, and every number a reader follows (starts increasing and in
/// bounds, followers increasing and lexicon positions, counts positive).
pub(crate) fn check<'a>(tensors: Vec<TensorRef<'a>>, words: usize, contents: Contents) -> Result<Option<NgramTensors<'a>>, FormatError> {
    if tensors.is_empty() {
        return Ok(None);
    }
    if let Some(missing) = names::ALL.iter().find(|n| !tensors.iter().any(|t| t.name == **n)) {
        return Err(FormatError::MissingTensor(format!("{missing} (a file with an n-gram has all of {})", names::ALL.join(", "))));
    }
    if words > MAX_NGRAM_WORDS {
        return Err(bad(names::UNIGRAM, format!("the lexicon has {words} words; a model with an n-gram holds at most {MAX_NGRAM_WORDS}")));
    }
    let mut sorted = Vec::with_capacity(names::ALL.len());
    for name in names::ALL {
        let t = tensors.iter().find(|t| t.name == name).cloned().ok_or_else(|| FormatError::MissingTensor(name.into()))?;
        sorted.push(t);
    }
    let [unigram, bigram_start, bigram_total, bigram_word, bigram_count, trigram_start, trigram_total, trigram_word, trigram_count, prefix, discount] =
        &sorted[..]
    else {
        unreachable!("names::ALL has 11 names")
    };
    let ty = |t: &TensorRef<'_>, want: GgmlType| -> Result<(), FormatError> {
        if t.ty != want {
            return Err(FormatError::UnsupportedTensorType { name: t.name.clone(), ty: t.ty, allowed: vec![want] });
        }
        Ok(())
    };
    let shape = |t: &TensorRef<'_>, want: Vec<u64>, rule: String| -> Result<(), FormatError> {
        if t.ne != want {
            return Err(FormatError::BadShape { name: t.name.clone(), expected: want, found: t.ne.clone(), rule });
        }
        Ok(())
    };
    for t in [unigram, bigram_start, bigram_total, trigram_start, trigram_total, prefix] {
        ty(t, GgmlType::I32)?;
    }
    for t in [bigram_word, bigram_count, trigram_word, trigram_count] {
        ty(t, GgmlType::I16)?;
    }
    ty(discount, GgmlType::F32)?;
    let v = words as u64;
    let lex = format!("the lexicon size {v}");
    let one_d = |t: &TensorRef<'_>| -> Result<u64, FormatError> {
        match t.ne[..] {
            [n] => Ok(n),
            _ => Err(bad(&t.name, format!("has shape {:?}; it is a list (one dimension)", t.ne))),
        }
    };
    shape(unigram, vec![v + 2], format!("{lex} + 2"))?;
    shape(bigram_start, vec![v + 3], format!("{lex} + 3"))?;
    shape(bigram_total, vec![v + 2], format!("{lex} + 2"))?;
    let b = one_d(bigram_word)?;
    shape(bigram_count, vec![b], format!("the {b} entries of {}", names::BIGRAM_WORD))?;
    shape(trigram_start, vec![b + 2], format!("the {b} bigram entries + 2"))?;
    shape(trigram_total, vec![b + 1], format!("the {b} bigram entries + 1"))?;
    let t_len = one_d(trigram_word)?;
    shape(trigram_count, vec![t_len], format!("the {t_len} entries of {}", names::TRIGRAM_WORD))?;
    shape(prefix, vec![PREFIX_LENGTHS as u64, PREFIX_CLASSES as u64], "17 typed lengths by 3 context classes".into())?;
    shape(discount, vec![2], "the bigram and trigram discounts".into())?;
    for i in 0..2 {
        let d = f32::from_le_bytes(discount.data[4 * i..4 * i + 4].try_into().expect("4 bytes"));
        if !(d > 0.0 && d < 1.0) {
            return Err(bad(names::DISCOUNT, format!("discount {i} is {d}; discounts lie strictly between 0 and 1")));
        }
    }
    let (b, t_len) = (b as usize, t_len as usize);
    if contents == Contents::Check {
        for t in [unigram, bigram_total, trigram_total, prefix] {
            if let Some(i) = (0..t.data.len() / 4).find(|&i| i32_at(t.data, i) < 0) {
                return Err(bad(&t.name, format!("entry {i} is negative")));
            }
        }
        // A large trigram table (two thirds of the default's 2.4 million entries) on a second
        // thread while this one checks the bigram table; the bigram table's error is reported
        // first, as one after the other would.
        let trigrams = || check_lists(trigram_start, b + 1, t_len, trigram_word, trigram_count, words);
        std::thread::scope(|scope| {
            let beside = match t_len >= PARALLEL_CHECK_ENTRIES {
                true => std::thread::Builder::new().name("laya-check".into()).spawn_scoped(scope, trigrams).ok(),
                false => None,
            };
            let bigrams = check_lists(bigram_start, words + 2, b, bigram_word, bigram_count, words);
            let trigrams = match beside {
                // A join error would mean a panic in a check that only reads; report it as the
                // table's error rather than unwinding.
                Some(h) => h.join().unwrap_or_else(|_| Err(bad(&trigram_word.name, "could not be checked".to_string()))),
                None => trigrams(),
            };
            bigrams.and(trigrams)
        })?;
    }
    Ok(Some(NgramTensors { tensors: sorted, bigrams: b, trigrams: t_len }))
}

/// One CSR table: `lists + 1` starts from 0 to `entries`, never decreasing; within each list
/// the followers increase and are lexicon positions or `<unk>`; every count is positive.
/// Millions of entries are read at every load, so the common case is a few flat passes the
/// compiler vectorises; the culprit is searched for only when one fails.
fn check_lists(
    start: &TensorRef<'_>,
    lists: usize,
    entries: usize,
    word: &TensorRef<'_>,
    count: &TensorRef<'_>,
    words: usize,
) -> Result<(), FormatError> {
    if i32_at(start.data, 0) != 0 || i32_at(start.data, lists) as i64 != entries as i64 {
        return Err(bad(&start.name, format!("must run from 0 to {entries}")));
    }
    let starts = &start.data[..4 * (lists + 1)];
    let start_at = |l: usize| i32::from_le_bytes([starts[4 * l], starts[4 * l + 1], starts[4 * l + 2], starts[4 * l + 3]]);
    let w_at = |i: usize| i32::from(u16_at(word.data, i));
    let unk = words as i32 + 1;
    // Starts never decrease and stay in bounds; count the list starts where the followers drop
    // (a new list may begin below the last one's end).
    let (mut drops_at_starts, mut prev) = (0usize, 0i32);
    for l in 1..=lists {
        let next = start_at(l);
        if next < prev || next as usize > entries {
            return Err(bad(&start.name, format!("entry {l} is {next}, before {prev} or past {entries}")));
        }
        if next > prev && prev > 0 {
            drops_at_starts += usize::from(w_at(prev as usize) <= w_at(prev as usize - 1));
        }
        prev = next;
    }
    // Every follower a position or <unk>, and every drop at a list start: two passes over the
    // bytes, the drops as pairs of neighbours, so that both loops vectorise.
    let data = &word.data[..2 * entries];
    let outside: u32 = data
        .chunks_exact(2)
        .map(|w| {
            let w = i32::from(u16::from_le_bytes([w[0], w[1]]));
            u32::from((w >= words as i32) & (w != unk))
        })
        .sum();
    let ok = outside == 0;
    let drops = data
        .chunks_exact(2)
        .zip(data.get(2..).unwrap_or(&[]).chunks_exact(2))
        .fold(0usize, |n, (a, b)| n + usize::from(u16::from_le_bytes([b[0], b[1]]) <= u16::from_le_bytes([a[0], a[1]])));
    if !ok || drops != drops_at_starts {
        for l in 0..lists {
            let (a, b) = (start_at(l) as usize, start_at(l + 1) as usize);
            for i in a..b {
                let w = w_at(i);
                if (w >= words as i32 && w != unk) || (i > a && w <= w_at(i - 1)) {
                    return Err(bad(&word.name, format!("entry {i} ({w}) is not a lexicon position above the one before it")));
                }
            }
        }
    }
    let zeros: u32 = count.data.chunks_exact(2).map(|c| u32::from((c[0] | c[1]) == 0)).sum();
    if zeros > 0 {
        let i = count.data.chunks_exact(2).position(|c| c == [0, 0]).unwrap_or(0);
        return Err(bad(&count.name, format!("entry {i} is 0; every stored n-gram was seen")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{random_model, random_ngram, TinyConfig};
    use crate::{write_model, GgmlType, LayaFile};

    fn with(edit: impl Fn(&mut Vec<TensorData>)) -> Result<(), FormatError> {
        let cfg = TinyConfig::small();
        let (meta, mut tensors) = random_model(&cfg, 5, GgmlType::F32);
        let mut ngram = random_ngram(cfg.vocab, 300, 5);
        edit(&mut ngram);
        tensors.extend(ngram);
        write_model(&meta, &tensors).map(|_| ())
    }

    fn tensor<'t>(t: &'t mut [TensorData], name: &str) -> &'t mut TensorData {
        t.iter_mut().find(|t| t.name == name).expect("tensor")
    }

    #[test]
    fn a_valid_ngram_is_read_with_its_sizes() {
        let cfg = TinyConfig::small();
        let (meta, mut tensors) = random_model(&cfg, 5, GgmlType::F32);
        tensors.extend(random_ngram(cfg.vocab, 300, 5));
        let bytes = write_model(&meta, &tensors).unwrap();
        let file = LayaFile::parse(&bytes).unwrap();
        let n = file.ngram.as_ref().unwrap();
        assert_eq!(n.get(names::BIGRAM_WORD).unwrap().ne, vec![n.bigrams as u64]);
        assert_eq!(n.get(names::TRIGRAM_WORD).unwrap().ne, vec![n.trigrams as u64]);
        assert!(file.tensors().iter().any(|t| t.name == names::DISCOUNT));
    }

    #[test]
    fn counts_follow_kneser_ney() {
        // Lines "0 1" and "2 1": <s> <s> 0, <s> 0 1, <s> <s> 2, <s> 2 1 over three words.
        let t = NgramCounts::from_trigrams(3, &[[3, 3, 0, 1], [3, 0, 1, 1], [3, 3, 2, 1], [3, 2, 1, 1]], [[0; 17]; 3]).unwrap();
        // N1+(· w): 0 and 2 after <s>, 1 after 0 and after 2.
        assert_eq!(t.unigram, [1, 2, 1, 0, 0]);
        // History 0: {1}; history 2: {1}; history <s>: {0, 2}.
        assert_eq!(t.bigram_start, [0, 1, 1, 2, 4, 4]);
        assert_eq!(t.bigram_word, [1, 1, 0, 2]);
        // (<s>, 0) → 1; (<s>, 2) → 1; (<s>, <s>) → 0, 2 last.
        assert_eq!(t.trigram_start, [0, 0, 0, 1, 2, 4]);
        assert_eq!(t.trigram_word, [1, 1, 0, 2]);
        assert_eq!(t.trigram_total, [0, 0, 1, 1, 2]);
        assert!(NgramCounts::from_trigrams(3, &[[3, 3, 3, 1]], [[0; 17]; 3]).is_err(), "<s> is never a follower");
        assert!(NgramCounts::from_trigrams(3, &[[0, 1, 2, 1]], [[0; 17]; 3]).is_err(), "history (0, 1) was never a bigram");
    }

    #[test]
    fn broken_tables_are_refused_with_the_tensor_named() {
        let err = |edit: &dyn Fn(&mut Vec<TensorData>)| with(edit).unwrap_err().to_string();
        assert!(with(|_| {}).is_ok());
        assert!(err(&|t| t.retain(|t| t.name != names::PREFIX)).contains(names::PREFIX));
        assert!(err(&|t| tensor(t, names::BIGRAM_COUNT).data[..2].copy_from_slice(&0u16.to_le_bytes())).contains("bigram.count"));
        assert!(err(&|t| {
            let w = tensor(t, names::TRIGRAM_WORD);
            w.data[..2].copy_from_slice(&u16::MAX.to_le_bytes());
        })
        .contains("trigram.word"));
        assert!(err(&|t| tensor(t, names::DISCOUNT).data[..4].copy_from_slice(&1.5f32.to_le_bytes())).contains("discount"));
        assert!(err(&|t| {
            let s = tensor(t, names::BIGRAM_START);
            s.data[4..8].copy_from_slice(&i32::MAX.to_le_bytes());
        })
        .contains("bigram.start"));
        assert!(err(&|t| {
            let u = tensor(t, names::UNIGRAM);
            u.data.truncate(8);
            u.ne = vec![2];
        })
        .contains("unigram"));
        assert!(err(&|t| {
            let u = tensor(t, names::UNIGRAM);
            u.ty = GgmlType::F32;
        })
        .contains("unigram"));
    }

    /// A trigram table large enough to be checked on a thread of its own: its bad entry is
    /// found, and where both tables are bad the bigram table is named, as checking one after
    /// the other would.
    #[test]
    fn a_large_trigram_table_checked_beside_reports_as_in_turn() {
        let cfg = TinyConfig { vocab: 400, ..TinyConfig::small() };
        let (meta, model) = random_model(&cfg, 5, GgmlType::F32);
        let ngram = random_ngram(cfg.vocab, 40_000, 5);
        let entries = ngram.iter().find(|t| t.name == names::TRIGRAM_WORD).map_or(0, |t| t.data.len() / 2);
        assert!(entries >= PARALLEL_CHECK_ENTRIES, "{entries} trigram entries");
        let write = |edit: &dyn Fn(&mut Vec<TensorData>)| {
            let mut tensors = model.clone();
            let mut ngram = ngram.clone();
            edit(&mut ngram);
            tensors.extend(ngram);
            write_model(&meta, &tensors).map(|_| ())
        };
        let bad_trigram = |t: &mut Vec<TensorData>| {
            let w = tensor(t, names::TRIGRAM_WORD);
            let last = w.data.len() - 2;
            w.data[last..].copy_from_slice(&u16::MAX.to_le_bytes());
        };
        let bad_bigram = |t: &mut Vec<TensorData>| tensor(t, names::BIGRAM_COUNT).data[..2].copy_from_slice(&0u16.to_le_bytes());
        assert!(write(&|_| {}).is_ok());
        assert!(write(&bad_trigram).unwrap_err().to_string().contains("trigram.word"));
        let both = write(&|t| {
            bad_trigram(t);
            bad_bigram(t);
        });
        assert!(both.unwrap_err().to_string().contains("bigram.count"));
    }

    /// The naive twin of [`check_lists`]: list by list, entry by entry.
    fn check_lists_naive(starts: &[i32], words: &[u16], counts: &[u16], lexicon: usize) -> bool {
        let (unk, entries) = (lexicon + 1, words.len());
        starts[0] == 0
            && starts[starts.len() - 1] as i64 == entries as i64
            && starts.windows(2).all(|p| p[0] <= p[1] && p[1] >= 0 && p[1] as usize <= entries)
            && starts.windows(2).all(|p| {
                let list = &words[p[0] as usize..p[1] as usize];
                list.iter().all(|&w| (w as usize) < lexicon || w as usize == unk) && list.windows(2).all(|q| q[0] < q[1])
            })
            && counts.iter().all(|&c| c > 0)
    }

    /// [`check_lists`] on a table given as plain vectors: whether it accepts it.
    fn check_lists_fast(starts: &[i32], words: &[u16], counts: &[u16], lexicon: usize) -> bool {
        let bytes = |v: Vec<[u8; 4]>| v.concat();
        let start_bytes = bytes(starts.iter().map(|s| s.to_le_bytes()).collect());
        let word_bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let count_bytes: Vec<u8> = counts.iter().flat_map(|c| c.to_le_bytes()).collect();
        let tensor = |name: &str, ty, n: usize, data| TensorRef { name: name.into(), ty, ne: vec![n as u64], data };
        let start = tensor("start", GgmlType::I32, starts.len(), &start_bytes[..]);
        let word = tensor("word", GgmlType::I16, words.len(), &word_bytes[..]);
        let count = tensor("count", GgmlType::I16, counts.len(), &count_bytes[..]);
        check_lists(&start, starts.len() - 1, words.len(), &word, &count, lexicon).is_ok()
    }

    /// Drops at list starts that follow empty lists count once each: a drop inside a list is
    /// found beside them, and a table whose only drops are at list starts passes.
    #[test]
    fn drops_after_empty_lists_count_once() {
        // Lists [5, 6], [], [3, 1]: 6 → 3 starts a list, 3 → 1 is inside one.
        assert!(!check_lists_fast(&[0, 2, 2, 4], &[5, 6, 3, 1], &[1; 4], 30));
        assert!(!check_lists_naive(&[0, 2, 2, 4], &[5, 6, 3, 1], &[1; 4], 30));
        // Lists [5, 6], [], [], [3, 4], [1]: every drop starts a list.
        assert!(check_lists_fast(&[0, 2, 2, 2, 4, 5], &[5, 6, 3, 4, 1], &[1; 5], 30));
        assert!(check_lists_naive(&[0, 2, 2, 2, 4, 5], &[5, 6, 3, 4, 1], &[1; 5], 30));
    }

    proptest::proptest! {
        /// Small CSR tables, valid or broken in every way the check looks for (starts that
        /// drop, run past the end or go negative; followers that repeat, drop inside a list or
        /// leave the lexicon; zero counts; empty lists, one entry, none): the fast check
        /// accepts exactly what the naive one does.
        #[test]
        fn check_lists_agrees_with_its_naive_twin(
            lens in proptest::collection::vec(0usize..5, 0..12),
            raw in proptest::collection::vec(0u16..40, 0..50),
            sorted in proptest::bool::weighted(0.7),
            break_start in proptest::option::of((0usize..13, 0u8..4, -2i32..60)),
            zero_count in proptest::option::of(0usize..50),
        ) {
            let lexicon = 30;
            let mut starts = vec![0i32];
            let mut words = Vec::new();
            let mut raw = raw.into_iter();
            for &n in &lens {
                let mut list: Vec<u16> = raw.by_ref().take(n).collect();
                if sorted {
                    list.sort_unstable();
                    list.dedup();
                }
                words.extend(list);
                starts.push(words.len() as i32);
            }
            let entries = words.len();
            if let Some((at, kind, v)) = break_start {
                let at = at.min(starts.len() - 1);
                // Below the start before it, past the end, negative, or anything.
                starts[at] = match kind {
                    0 if at > 0 => starts[at - 1] - 1,
                    1 => entries as i32 + 1,
                    2 => -1,
                    _ => v,
                };
            }
            let mut counts = vec![1u16; entries];
            if let Some(at) = zero_count.filter(|&at| at < entries) {
                counts[at] = 0;
            }
            let fast = check_lists_fast(&starts, &words, &counts, lexicon);
            proptest::prop_assert_eq!(fast, check_lists_naive(&starts, &words, &counts, lexicon));
        }
    }

    /// `parse_verified` (bytes a full parse has vouched for) repeats every check whose cost does
    /// not grow with the data, and leaves the lists' contents to the parse that vouched.
    #[test]
    fn vouched_bytes_skip_only_the_per_entry_checks() {
        let cfg = TinyConfig::small();
        let (meta, mut tensors) = random_model(&cfg, 5, GgmlType::F32);
        tensors.extend(random_ngram(cfg.vocab, 300, 5));
        let good = write_model(&meta, &tensors).unwrap();
        let file = LayaFile::parse(&good).unwrap();
        let word = file.ngram.as_ref().unwrap().get(names::TRIGRAM_WORD).unwrap().data;
        let at = word.as_ptr() as usize - good.as_ptr() as usize;
        drop(file);
        // A follower past the lexicon, the checksum made to agree.
        let mut bad_entry = good.clone();
        bad_entry[at..at + 2].copy_from_slice(&u16::MAX.to_le_bytes());
        let sum = crate::patch_checksum(&mut bad_entry).unwrap();
        assert!(LayaFile::parse(&bad_entry).unwrap_err().to_string().contains("trigram.word"));
        assert!(LayaFile::parse_verified(&bad_entry, sum).is_ok());
        // A missing table is refused either way.
        let mut w = crate::GgufWriter::new();
        for (k, v) in crate::model_keys(&meta) {
            w.add_kv(k, v);
        }
        for t in tensors.into_iter().filter(|t| t.name != names::DISCOUNT) {
            w.push_tensor(t).unwrap();
        }
        let mut missing = w.to_bytes();
        let sum = crate::patch_checksum(&mut missing).unwrap();
        assert!(LayaFile::parse_verified(&missing, sum).unwrap_err().to_string().contains("discount"));
    }
}
