//! The n-gram baseline: an interpolated Kneser-Ney word trigram model with prefix completion.
//!
//! **Model.** Interpolated Kneser-Ney of order 3 (Chen & Goodman), one absolute discount per
//! order `D = n1 / (n1 + 2·n2)` from that order's counts-of-counts. The trigram level uses raw
//! counts, the bigram level continuation counts `N1+(· v w)`, the unigram level `N1+(· w)`
//! (no discount: every vocabulary word was seen). Lines are independent; each starts with two
//! `<s>` tokens; nothing predicts an end of line. Two variants measure what a runtime copy of it
//! would need: [`NgramPredictor::prune_trigrams`] keeps only the trigrams seen often enough, and
//! [`NgramPredictor::use_dictionary_cut`] cuts Han text with the model's own words instead of
//! jieba's dictionary.
//!
//! **Where does the current word start?** The context ends either after a complete word
//! (`replace = 0`) or inside the word being typed. The predictor scores several split hypotheses
//! `i` (characters already typed of the current word): `i = 0`, `i = 1..=4` (bounded by the
//! trailing whitespace-free run), and the starts of the last two words the segmenter finds in
//! that run (so `internation` is one hypothesis with `i = 11`). All hypotheses are compared as joint
//! probabilities of the same text: let `base` be the earliest split; for hypothesis `i` the text
//! between `base` and its split is segmented into complete words `t1..tm`, and a candidate `w`
//! (a word starting with the last `i` characters, longer than `i`) scores
//! `P(i | class) · Π P_KN(tj | ..) · P_KN(w | last two words)`. So "明 is a complete word" pays
//! `P(明 | 我们)` while "明 starts 明天" pays nothing extra, and an unknown typed fragment
//! (`gr` in English) makes its hypothesis nearly impossible (probability floor 1e-9).
//! `P(i | class)` is a count table learnt while training from every keystroke position of every
//! training word, conditioned on the class of the last context character (none/whitespace,
//! space-less script such as Han, other) — after a Latin letter a word is almost never complete.
//! `p` = score / sum of the scores of all candidates generated.
//!
//! **Candidate generation.** Words are numbered in byte order, so words with a given prefix are a
//! contiguous id range. For each hypothesis the candidates are the history's trigram and bigram
//! followers in that range (all of them, or the 32 most frequent when there are more than 128:
//! `laya_format::ngram::TOP_FOLLOW`, `SCAN_ALL`) plus the 32 words of highest unigram
//! probability in the range. Each candidate is then scored
//! exactly. (Exact top-k would need every word in the range; a word outside these sets can only
//! come from the unigram level, where the 32 best are kept, so misses are rare and harmless.)

use crate::eval::{Candidate, PredictError, Predictor};
use crate::normalize::normalize_text;
use crate::segment::{SegmentMode, Segmenter};
use laya_format::ngram::{discount, prefix_class, SCAN_ALL, TOP_FOLLOW};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io::{self, BufRead, Write};

/// Prefix lengths of `P(i | class)` are bucketed at this value.
const MAX_I: usize = laya_format::ngram::PREFIX_LENGTHS - 1;
/// Character classes of `P(i | class)` (`laya_format::ngram::prefix_class`).
const CLASSES: usize = laya_format::ngram::PREFIX_CLASSES;
/// Plain split hypotheses considered beyond word boundaries.
const SPLIT_CHARS: usize = 4;
/// Characters of context segmented to find the history.
const HISTORY_WINDOW: usize = 24;
/// Probability floor for a typed word the model has never seen.
const UNSEEN: f64 = 1e-9;

/// Errors loading or saving an n-gram model file.
#[derive(Debug)]
pub enum NgramError {
    /// Reading or writing failed.
    Io(io::Error),
    /// Not JSON of the expected shape.
    Json(String),
    /// Structurally wrong (bad ids, wrong format tag or version).
    Invalid(String),
}

impl fmt::Display for NgramError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NgramError::Io(e) => write!(f, "n-gram model file: {e}"),
            NgramError::Json(e) => write!(f, "n-gram model file is not valid JSON of the expected shape: {e}"),
            NgramError::Invalid(e) => write!(f, "n-gram model file is invalid: {e}"),
        }
    }
}

impl std::error::Error for NgramError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NgramError::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// The saved form: everything else is derived on load.
#[derive(Serialize, Deserialize)]
struct File {
    format: String,
    version: u32,
    order: u32,
    /// Vocabulary in byte order; id `words.len()` is `<s>`, `words.len() + 1` is `<unk>`.
    words: Vec<String>,
    /// Flat `[u, v, w, count]` quadruples.
    trigrams: Vec<u32>,
    /// `CLASSES` rows of `MAX_I + 1` counts.
    prefix_counts: Vec<Vec<u64>>,
    /// Absent: Han text is cut with jieba's dictionary. Present: with these words alone, one
    /// count per word ([`NgramPredictor::use_dictionary_cut`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cut: Option<Vec<u64>>,
}

const FORMAT: &str = "laya-ngram";

#[derive(Clone, Copy)]
struct Span {
    start: u32,
    len: u32,
    total: u64,
    /// `N1+(h ·)`: distinct followers in the training text; more than `len` once pruned.
    distinct: u32,
}

/// Word trigram Kneser-Ney predictor with prefix completion (see the module docs).
///
/// ```
/// use laya_text::{NgramPredictor, Predictor, Segmenter, SegmentMode};
/// let seg = Segmenter::new(SegmentMode::Segmented);
/// let text = ["I like green tea", "I like green apples", "you like green tea"];
/// let mut m = NgramPredictor::train(text.iter().map(|s| s.to_string()), &seg, None, &mut |_| {});
/// let mut out = Vec::new();
/// m.predict("we like green ", 1, &mut out).unwrap();
/// assert_eq!((out[0].word.as_str(), out[0].replace), ("tea", 0));
/// m.predict("I like gr", 1, &mut out).unwrap();
/// assert_eq!((out[0].word.as_str(), out[0].replace), ("green", 2));
/// ```
pub struct NgramPredictor {
    words: Vec<String>,
    wlen: Vec<u32>,
    bos: u32,
    unk: u32,
    trigrams: Vec<[u32; 4]>,
    prefix_counts: [[u64; MAX_I + 1]; CLASSES],
    p_i: [[f64; MAX_I + 1]; CLASSES],
    f3: Vec<(u32, u32)>,
    h3: HashMap<(u32, u32), Span>,
    f2: Vec<(u32, u32)>,
    h2: Vec<Span>,
    c1: Vec<u32>,
    c1_total: f64,
    by_c1: Vec<u32>,
    d: [f64; 4],
    /// Trigrams seen fewer times than this were dropped ([`NgramPredictor::prune_trigrams`]);
    /// 1 when none were.
    min_trigram_count: u32,
    /// The counts `seg` cuts Han text with, one per word; `None`: jieba's dictionary.
    cut: Option<Vec<u64>>,
    seg: Segmenter,
    scratch: Vec<(f64, u32, usize)>,
    cand: Vec<u32>,
    ranges: Vec<std::ops::Range<usize>>,
}

impl fmt::Debug for NgramPredictor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NgramPredictor").field("words", &self.words.len()).field("trigrams", &self.trigrams.len()).finish()
    }
}

/// The segmenter that cuts Han text into `words` under `counts` (one per word).
fn cut_segmenter(words: &[String], counts: &[u64]) -> Result<Segmenter, NgramError> {
    if counts.len() != words.len() {
        return Err(NgramError::Invalid(format!("{} cut counts for {} words", counts.len(), words.len())));
    }
    Segmenter::with_dictionary(words.iter().map(String::as_str).zip(counts.iter().copied())).map_err(NgramError::Io)
}

impl NgramPredictor {
    /// Trains on `lines`, split into words by `seg` (gold text: [`SegmentMode::Segmented`]).
    /// With `vocab`, words outside it become `<unk>`: they still count as history but are never
    /// predicted (use the model's lexicon so that both rank the same words). `progress` gets each
    /// line's byte length + 1.
    pub fn train(
        lines: impl Iterator<Item = String>,
        seg: &Segmenter,
        vocab: Option<&HashSet<String>>,
        progress: &mut dyn FnMut(u64),
    ) -> NgramPredictor {
        const UNK_TMP: u32 = u32::MAX - 1;
        const BOS_TMP: u32 = u32::MAX;
        let mut ids: HashMap<String, u32> = HashMap::new();
        let mut names: Vec<String> = Vec::new();
        let mut tri: HashMap<[u32; 3], u32> = HashMap::new();
        let mut prefix_counts = [[0u64; MAX_I + 1]; CLASSES];
        for raw in lines {
            progress(raw.len() as u64 + 1);
            let raw = raw.trim_end_matches(['\n', '\r']);
            let line = seg.typed_line(raw);
            let (mut u, mut v) = (BOS_TMP, BOS_TMP);
            for r in &line.words {
                let w = &line.text[r.clone()];
                let before = line.text[..r.start].chars().last();
                for (i, c) in std::iter::once(before).chain(w.chars().map(Some)).take(w.chars().count()).enumerate() {
                    prefix_counts[prefix_class(c)][i.min(MAX_I)] += 1;
                }
                let id = if vocab.is_some_and(|v| !v.contains(w)) {
                    UNK_TMP
                } else if let Some(&id) = ids.get(w) {
                    id
                } else {
                    let id = names.len() as u32;
                    names.push(w.to_string());
                    ids.insert(w.to_string(), id);
                    id
                };
                *tri.entry([u, v, id]).or_insert(0) += 1;
                u = v;
                v = id;
            }
        }
        // Renumber in byte order so prefixes are id ranges.
        let mut order: Vec<u32> = (0..names.len() as u32).collect();
        order.sort_by(|&a, &b| names[a as usize].cmp(&names[b as usize]));
        let mut remap = vec![0u32; names.len()];
        for (new, &old) in order.iter().enumerate() {
            remap[old as usize] = new as u32;
        }
        let n = names.len() as u32;
        let map = |x: u32| match x {
            BOS_TMP => n,
            UNK_TMP => n + 1,
            x => remap[x as usize],
        };
        let words: Vec<String> = order.iter().map(|&o| std::mem::take(&mut names[o as usize])).collect();
        let trigrams: Vec<[u32; 4]> = tri.into_iter().map(|([a, b, c], k)| [map(a), map(b), map(c), k]).collect();
        Self::build(words, trigrams, prefix_counts, Segmenter::new(SegmentMode::Auto), None)
    }

    fn build(
        words: Vec<String>,
        mut trigrams: Vec<[u32; 4]>,
        prefix_counts: [[u64; MAX_I + 1]; CLASSES],
        seg: Segmenter,
        cut: Option<Vec<u64>>,
    ) -> NgramPredictor {
        let n = words.len() as u32;
        let (bos, unk) = (n, n + 1);
        let ids = n as usize + 2;
        trigrams.sort_unstable();
        let mut f3 = Vec::with_capacity(trigrams.len());
        let mut h3: HashMap<(u32, u32), Span> = HashMap::new();
        let mut bi: Vec<(u32, u32)> = Vec::with_capacity(trigrams.len());
        for t in &trigrams {
            let s = h3.entry((t[0], t[1])).or_insert(Span { start: f3.len() as u32, len: 0, total: 0, distinct: 0 });
            s.len += 1;
            s.distinct += 1;
            s.total += t[3] as u64;
            f3.push((t[2], t[3]));
            bi.push((t[1], t[2]));
        }
        bi.sort_unstable();
        let mut f2: Vec<(u32, u32)> = Vec::new();
        let mut h2 = vec![Span { start: 0, len: 0, total: 0, distinct: 0 }; ids];
        // `bi` has one entry per distinct (u, v, w): a run of equal pairs is N1+(· v w).
        let mut k = 0;
        while k < bi.len() {
            let mut j = k + 1;
            while j < bi.len() && bi[j] == bi[k] {
                j += 1;
            }
            let (v, w) = bi[k];
            let s = &mut h2[v as usize];
            if s.len == 0 {
                s.start = f2.len() as u32;
            }
            s.len += 1;
            s.distinct += 1;
            s.total += (j - k) as u64;
            f2.push((w, (j - k) as u32));
            k = j;
        }
        let mut c1 = vec![0u32; ids];
        for &(w, _) in &f2 {
            c1[w as usize] += 1;
        }
        let c1_total = c1.iter().map(|&c| c as f64).sum::<f64>().max(1.0);
        let mut by_c1: Vec<u32> = (0..n).filter(|&w| c1[w as usize] > 0).collect();
        by_c1.sort_by(|&a, &b| c1[b as usize].cmp(&c1[a as usize]).then(a.cmp(&b)));
        let d = [0.0, 0.0, discount(f2.iter().map(|e| e.1 as u64)), discount(trigrams.iter().map(|t| t[3] as u64))];
        let mut p_i = [[0.0; MAX_I + 1]; CLASSES];
        for c in 0..CLASSES {
            let tot: f64 = prefix_counts[c].iter().map(|&x| x as f64 + 0.5).sum();
            for i in 0..=MAX_I {
                p_i[c][i] = (prefix_counts[c][i] as f64 + 0.5) / tot;
            }
        }
        let wlen = words.iter().map(|w| w.chars().count() as u32).collect();
        NgramPredictor {
            words,
            wlen,
            bos,
            unk,
            trigrams,
            prefix_counts,
            p_i,
            f3,
            h3,
            f2,
            h2,
            c1,
            c1_total,
            by_c1,
            d,
            min_trigram_count: 1,
            cut,
            seg,
            scratch: Vec::new(),
            cand: Vec::new(),
            ranges: Vec::new(),
        }
    }

    /// Vocabulary size (words that can be predicted).
    pub fn vocab_len(&self) -> usize {
        self.words.len()
    }

    /// The vocabulary in byte order (ids `0..vocab_len()`).
    pub fn words(&self) -> &[String] {
        &self.words
    }

    /// The counts the model is made of: trigrams `[u, v, w, count]` over ids into
    /// [`NgramPredictor::words`] (`vocab_len()` is `<s>`, `vocab_len() + 1` a word outside the
    /// vocabulary), and per context class the number of keystroke positions with `i` characters
    /// of the word typed (`i` capped at 16). What `laya attach-ngram` stores in a model file.
    pub fn counts(&self) -> (&[[u32; 4]], [[u64; MAX_I + 1]; CLASSES]) {
        (&self.trigrams, self.prefix_counts)
    }

    /// Whether histories are cut with the model's own words ([`NgramPredictor::use_dictionary_cut`]).
    pub fn cuts_with_dictionary(&self) -> bool {
        self.cut.is_some()
    }

    /// `P_KN(w | u v)` of words given as strings (`None` for `<s>`); a word outside the
    /// vocabulary counts as `<unk>`. The probabilities a runtime copy must reproduce.
    ///
    /// ```
    /// use laya_text::{NgramPredictor, Segmenter, SegmentMode};
    /// let seg = Segmenter::new(SegmentMode::Segmented);
    /// let m = NgramPredictor::train(["a b c".to_string()].into_iter(), &seg, None, &mut |_| {});
    /// let sum: f64 = m.words().iter().map(|w| m.probability([None, Some("a")], w)).sum();
    /// assert!((sum - 1.0).abs() < 1e-9);
    /// ```
    pub fn probability(&self, history: [Option<&str>; 2], w: &str) -> f64 {
        let id = |x: Option<&str>| x.map_or(self.bos, |x| self.id_of(x));
        self.prob(id(history[0]), id(history[1]), self.id_of(w))
    }

    /// Distinct trigrams stored.
    pub fn trigram_len(&self) -> usize {
        self.trigrams.len()
    }

    /// Drops the trigrams seen fewer than `min_count` times, keeping the bigram and unigram
    /// levels and each history's count and number of distinct followers as trained, so a
    /// dropped trigram's word gets what the lower levels give it (the distribution then sums to
    /// a little less than one: the dropped trigrams' discounted counts). A history left with no
    /// trigram backs off entirely. Measures what a smaller n-gram keeps (`laya eval
    /// --ngram-min-count`); a pruned model cannot be saved, since its file would retrain the
    /// lower levels from the kept trigrams. Returns the trigrams kept.
    ///
    /// ```
    /// use laya_text::{NgramPredictor, Predictor, Segmenter, SegmentMode};
    /// let seg = Segmenter::new(SegmentMode::Segmented);
    /// let text = ["I like green tea", "I like green tea", "you like green apples"];
    /// let mut m = NgramPredictor::train(text.iter().map(|s| s.to_string()), &seg, None, &mut |_| {});
    /// let all = m.trigram_len();
    /// assert!(m.prune_trigrams(2) < all);
    /// let mut out = Vec::new();
    /// m.predict("I like green ", 1, &mut out).unwrap();
    /// assert_eq!(out[0].word, "tea");
    /// assert!(m.save(Vec::new()).is_err());
    /// ```
    pub fn prune_trigrams(&mut self, min_count: u32) -> usize {
        if min_count <= self.min_trigram_count {
            return self.trigrams.len();
        }
        self.min_trigram_count = min_count;
        self.trigrams.retain(|t| t[3] >= min_count);
        let mut f3 = Vec::with_capacity(self.trigrams.len());
        let mut h3 = HashMap::with_capacity(self.h3.len());
        for (&h, &span) in &self.h3 {
            let start = f3.len() as u32;
            let kept = &self.f3[span.start as usize..(span.start + span.len) as usize];
            f3.extend(kept.iter().filter(|e| e.1 >= min_count));
            let len = f3.len() as u32 - start;
            if len > 0 {
                h3.insert(h, Span { start, len, ..span });
            }
        }
        self.f3 = f3;
        self.h3 = h3;
        self.trigrams.len()
    }

    /// Cuts the history of every prediction with the model's own words under `counts` (one per
    /// word, in the order of its vocabulary) instead of jieba's dictionary
    /// ([`Segmenter::with_dictionary`]), as a runtime carrying only the lexicon could; the file
    /// keeps the counts. Train on text cut the same way (`laya ngram --cut lexicon`).
    pub fn use_dictionary_cut(&mut self, counts: Vec<u64>) -> Result<(), NgramError> {
        self.seg = cut_segmenter(&self.words, &counts)?;
        self.cut = Some(counts);
        Ok(())
    }

    /// Writes the model as JSON (docs/data.md describes the file).
    pub fn save<W: Write>(&self, w: W) -> Result<(), NgramError> {
        if self.min_trigram_count > 1 {
            return Err(NgramError::Invalid(format!(
                "trigrams seen fewer than {} times were dropped after loading; save the model before pruning it",
                self.min_trigram_count
            )));
        }
        let file = File {
            format: FORMAT.into(),
            version: 1,
            order: 3,
            words: self.words.clone(),
            trigrams: self.trigrams.iter().flatten().copied().collect(),
            prefix_counts: self.prefix_counts.iter().map(|r| r.to_vec()).collect(),
            cut: self.cut.clone(),
        };
        let mut w = io::BufWriter::new(w);
        serde_json::to_writer(&mut w, &file).map_err(|e| NgramError::Json(e.to_string()))?;
        w.flush().map_err(NgramError::Io)
    }

    /// Reads what [`NgramPredictor::save`] wrote, checking every id.
    ///
    /// ```
    /// use laya_text::{NgramPredictor, Segmenter, SegmentMode};
    /// let seg = Segmenter::new(SegmentMode::Segmented);
    /// let m = NgramPredictor::train(["a b c".to_string()].into_iter(), &seg, None, &mut |_| {});
    /// let mut buf = Vec::new();
    /// m.save(&mut buf).unwrap();
    /// let m2 = NgramPredictor::load(&buf[..]).unwrap();
    /// assert_eq!(m2.vocab_len(), 3);
    /// assert!(NgramPredictor::load(&b"{}"[..]).is_err());
    /// ```
    pub fn load<R: BufRead>(r: R) -> Result<NgramPredictor, NgramError> {
        let file: File = serde_json::from_reader(r).map_err(|e| NgramError::Json(e.to_string()))?;
        if file.format != FORMAT || file.version != 1 || file.order != 3 {
            return Err(NgramError::Invalid(format!(
                "expected format {FORMAT:?} version 1 order 3, found {:?} version {} order {}",
                file.format, file.version, file.order
            )));
        }
        if file.words.windows(2).any(|w| w[0] >= w[1]) {
            return Err(NgramError::Invalid("words are not unique and sorted".into()));
        }
        if !file.trigrams.len().is_multiple_of(4) {
            return Err(NgramError::Invalid("trigram array length is not a multiple of 4".into()));
        }
        let n = file.words.len() as u32;
        let mut seen = HashSet::new();
        let mut trigrams = Vec::with_capacity(file.trigrams.len() / 4);
        for q in file.trigrams.chunks_exact(4) {
            let t = [q[0], q[1], q[2], q[3]];
            if t[0] > n + 1 || t[1] > n + 1 || t[2] > n + 1 || t[2] == n || t[3] == 0 || !seen.insert([t[0], t[1], t[2]]) {
                return Err(NgramError::Invalid(format!("bad trigram {t:?} for {n} words")));
            }
            trigrams.push(t);
        }
        let mut pc = [[0u64; MAX_I + 1]; CLASSES];
        if file.prefix_counts.len() != CLASSES || file.prefix_counts.iter().any(|r| r.len() != MAX_I + 1) {
            return Err(NgramError::Invalid(format!("prefix_counts must be {CLASSES} rows of {}", MAX_I + 1)));
        }
        for (c, row) in file.prefix_counts.iter().enumerate() {
            pc[c].copy_from_slice(row);
        }
        let seg = match &file.cut {
            Some(counts) => cut_segmenter(&file.words, counts)?,
            None => Segmenter::new(SegmentMode::Auto),
        };
        Ok(Self::build(file.words, trigrams, pc, seg, file.cut))
    }

    fn id_of(&self, w: &str) -> u32 {
        self.words.binary_search_by(|x| x.as_str().cmp(w)).map_or(self.unk, |i| i as u32)
    }

    fn p1(&self, w: u32) -> f64 {
        self.c1[w as usize] as f64 / self.c1_total
    }

    fn level(&self, follow: &[(u32, u32)], s: Span, w: u32, d: f64, lower: f64) -> f64 {
        if s.total == 0 {
            return lower;
        }
        let sl = &follow[s.start as usize..(s.start + s.len) as usize];
        let c = sl.binary_search_by_key(&w, |e| e.0).map_or(0, |i| sl[i].1);
        ((c as f64 - d).max(0.0) + d * s.distinct as f64 * lower) / s.total as f64
    }

    /// `P_KN(w | u v)`.
    fn prob(&self, u: u32, v: u32, w: u32) -> f64 {
        let p1 = self.p1(w);
        let p2 = self.level(&self.f2, self.h2[v as usize], w, self.d[2], p1);
        match self.h3.get(&(u, v)) {
            Some(&s) => self.level(&self.f3, s, w, self.d[3], p2),
            None => p2,
        }
    }

    fn push_followers(follow: &[(u32, u32)], s: Option<Span>, lo: u32, hi: u32, cand: &mut Vec<u32>, tmp: &mut Vec<(u32, u32)>) {
        let Some(s) = s.filter(|s| s.len > 0) else { return };
        let sl = &follow[s.start as usize..(s.start + s.len) as usize];
        let a = sl.partition_point(|e| e.0 < lo);
        let b = sl.partition_point(|e| e.0 < hi);
        let r = &sl[a..b];
        if r.len() <= SCAN_ALL {
            cand.extend(r.iter().map(|e| e.0));
        } else {
            tmp.clear();
            tmp.extend_from_slice(r);
            tmp.select_nth_unstable_by(TOP_FOLLOW, |x, y| y.1.cmp(&x.1));
            cand.extend(tmp[..TOP_FOLLOW].iter().map(|e| e.0));
        }
    }

    /// The last two words of `text` (ids), `<s>` where the line starts.
    fn history(&mut self, text: &str) -> [u32; 2] {
        let start = text.char_indices().rev().nth(HISTORY_WINDOW - 1).map_or(0, |(b, _)| b);
        let win = &text[start..];
        let mut ranges = std::mem::take(&mut self.ranges);
        ranges.clear();
        self.seg.word_ranges(win, &mut ranges);
        let mut h = [self.bos, self.bos];
        let m = ranges.len();
        for (slot, k) in [(1, 1usize), (0, 2)] {
            if m >= k {
                h[slot] = self.id_of(&win[ranges[m - k].clone()]);
            } else if start > 0 {
                // The window cut the line: the history word is unknown, not a line start.
                h[slot] = self.unk;
            }
        }
        self.ranges = ranges;
        h
    }

    fn hypothesis(&mut self, h: [u32; 2], prefix: &str, i: usize, weight: f64) {
        let lo = self.words.partition_point(|w| w.as_str() < prefix) as u32;
        let hi = lo + self.words[lo as usize..].partition_point(|w| w.starts_with(prefix)) as u32;
        if lo == hi {
            return;
        }
        let mut cand = std::mem::take(&mut self.cand);
        cand.clear();
        let mut tmp = Vec::new();
        Self::push_followers(&self.f3, self.h3.get(&(h[0], h[1])).copied(), lo, hi, &mut cand, &mut tmp);
        Self::push_followers(&self.f2, Some(self.h2[h[1] as usize]), lo, hi, &mut cand, &mut tmp);
        if (hi - lo) as usize <= SCAN_ALL * 4 {
            tmp.clear();
            tmp.extend((lo..hi).map(|w| (w, self.c1[w as usize])));
            if tmp.len() > TOP_FOLLOW {
                tmp.select_nth_unstable_by(TOP_FOLLOW, |x, y| y.1.cmp(&x.1));
                tmp.truncate(TOP_FOLLOW);
            }
            cand.extend(tmp.iter().map(|e| e.0));
        } else {
            cand.extend(self.by_c1.iter().copied().filter(|&w| w >= lo && w < hi).take(TOP_FOLLOW));
        }
        cand.sort_unstable();
        cand.dedup();
        for &w in &cand {
            // A keyboard types punctuation with its own keys: never a candidate.
            if self.wlen[w as usize] as usize > i && !laya_format::is_punctuation_word(&self.words[w as usize]) {
                let s = weight * self.prob(h[0], h[1], w);
                if s > 0.0 {
                    self.scratch.push((s, w, i));
                }
            }
        }
        self.cand = cand;
    }
}

impl Predictor for NgramPredictor {
    fn predict(&mut self, context: &str, k: usize, out: &mut Vec<Candidate>) -> Result<(), PredictError> {
        out.clear();
        self.scratch.clear();
        let ctx = normalize_text(context);
        let line = ctx.rsplit_once('\n').map_or(ctx.as_str(), |(_, l)| l);
        let class = prefix_class(line.chars().last());
        // The trailing whitespace-free run and the word boundaries inside it.
        let run_start = line.char_indices().rev().find(|(_, c)| c.is_whitespace()).map_or(0, |(b, c)| b + c.len_utf8());
        let run = &line[run_start..];
        let run_chars: Vec<usize> = run.char_indices().map(|(b, _)| b).collect();
        let mut splits: Vec<usize> = (0..=run_chars.len().min(SPLIT_CHARS)).collect();
        let mut ranges = std::mem::take(&mut self.ranges);
        ranges.clear();
        self.seg.word_ranges(run, &mut ranges);
        // Only the last two words of the run can hold the start of the current word; further
        // back would cost time for hypotheses that never win.
        for r in ranges.iter().rev().take(2) {
            splits.push(run[r.start..].chars().count());
        }
        self.ranges = ranges;
        splits.sort_unstable();
        splits.dedup();
        // All hypotheses are scored as the joint probability of the text after a common base
        // (the earliest split) and the next word, so that "明 is a complete word" and "明 starts
        // 明天" compete fairly: the former pays P(明 | history).
        let split_at = |i: usize| run_start + if i == 0 { run.len() } else { run_chars[run_chars.len() - i] };
        let i_max = splits.last().copied().unwrap_or(0);
        let base = split_at(i_max);
        let base_hist = self.history(&line[..base]);
        let mut toks = Vec::new();
        for &i in &splits {
            let split = split_at(i);
            let mut h = base_hist;
            let mut q = self.p_i[class][i.min(MAX_I)];
            if split > base {
                let part = &line[base..split];
                toks.clear();
                self.seg.word_ranges(part, &mut toks);
                for r in &toks {
                    let id = self.id_of(&part[r.clone()]);
                    q *= self.prob(h[0], h[1], id).max(UNSEEN);
                    h = [h[1], id];
                }
            }
            self.hypothesis(h, &line[split..], i, q);
        }
        let total: f64 = self.scratch.iter().map(|e| e.0).sum();
        let mut scratch = std::mem::take(&mut self.scratch);
        let take = k.min(scratch.len());
        // One total order (probability descending, then word and typed length), so that ties
        // at the cut keep the same candidates whatever the selection does.
        let order = |a: &(f64, u32, usize), b: &(f64, u32, usize)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2));
        if take > 0 && take < scratch.len() {
            scratch.select_nth_unstable_by(take - 1, order);
        }
        scratch[..take].sort_by(order);
        for &(s, w, i) in &scratch[..take] {
            out.push(Candidate { word: self.words[w as usize].clone(), replace: i, p: (s / total) as f32 });
        }
        self.scratch = scratch;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn model() -> NgramPredictor {
        let seg = Segmenter::new(SegmentMode::Segmented);
        let text = ["今天 天气 很 好", "今天 天气 不错", "明天 天气 很 好", "我 喜欢 今天"];
        NgramPredictor::train(text.iter().map(|s| s.to_string()), &seg, None, &mut |_| {})
    }

    #[test]
    fn distribution_sums_to_one() {
        let m = model();
        for (u, v) in [(m.bos, m.bos), (m.id_of("今天"), m.id_of("天气")), (m.unk, m.id_of("很"))] {
            let s: f64 = (0..m.words.len() as u32).map(|w| m.prob(u, v, w)).sum();
            assert!((s - 1.0).abs() < 1e-9, "sum {s}");
        }
    }

    #[test]
    fn pruning_keeps_the_kept_trigrams_and_the_lower_levels() {
        let seg = Segmenter::new(SegmentMode::Segmented);
        let text = ["今天 天气 很 好", "今天 天气 很 冷", "今天 天气 不错", "明天 天气 很 好", "我 喜欢 今天"];
        let mut m = NgramPredictor::train(text.iter().map(|s| s.to_string()), &seg, None, &mut |_| {});
        let h = (m.id_of("今天"), m.id_of("天气"));
        let before: Vec<f64> = (0..m.words.len() as u32).map(|w| m.prob(h.0, h.1, w)).collect();
        let line_start: Vec<f64> = (0..m.words.len() as u32).map(|w| m.prob(m.bos, m.bos, w)).collect();
        // 今天 天气 很 (twice: kept) and 今天 天气 不错 (once: dropped).
        let all = m.trigram_len();
        assert!(m.prune_trigrams(2) < all);
        let (hen, bucuo) = (m.id_of("很"), m.id_of("不错"));
        assert_eq!(m.prob(h.0, h.1, hen), before[hen as usize]);
        assert!(m.prob(h.0, h.1, bucuo) < before[bucuo as usize]);
        let sum: f64 = (0..m.words.len() as u32).map(|w| m.prob(h.0, h.1, w)).sum();
        assert!(sum < 1.0 && sum > 0.5, "sum {sum}");
        // <s> <s> is followed by 今天 four times: that history keeps its trigram.
        assert_eq!(m.prob(m.bos, m.bos, m.id_of("今天")), line_start[m.id_of("今天") as usize]);
    }

    #[test]
    fn a_dictionary_cut_reads_histories_with_the_words_and_survives_saving() {
        let mut m = model();
        assert!(m.use_dictionary_cut(vec![1; 2]).is_err());
        // With 今天 and 天气 as words, 今天天气 is two words of history, whose trigram follower 很
        // leads; the counts favour the two-character words over single characters.
        let counts = m.words().iter().map(|w| if w.chars().count() > 1 { 100 } else { 1 }).collect();
        m.use_dictionary_cut(counts).unwrap();
        let mut out = Vec::new();
        m.predict("今天天气", 1, &mut out).unwrap();
        assert_eq!((out[0].word.as_str(), out[0].replace), ("很", 0));
        let mut buf = Vec::new();
        m.save(&mut buf).unwrap();
        assert!(String::from_utf8_lossy(&buf).contains("\"cut\":["));
        let mut back = NgramPredictor::load(&buf[..]).unwrap();
        for ctx in ["今天天气", "明天天", "我喜欢"] {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            m.predict(ctx, 5, &mut a).unwrap();
            back.predict(ctx, 5, &mut b).unwrap();
            assert_eq!(a, b, "{ctx}");
        }
    }

    #[test]
    fn completes_chinese_prefix() {
        let mut m = model();
        let mut out = Vec::new();
        m.predict("今天天", 5, &mut out).unwrap();
        assert!(out.iter().any(|c| c.word == "天气" && c.replace == 1), "{out:?}");
        m.predict("今天", 5, &mut out).unwrap();
        assert_eq!((out[0].word.as_str(), out[0].replace), ("天气", 0), "{out:?}");
    }

    #[test]
    fn save_load_same_predictions() {
        let mut m = model();
        let mut buf = Vec::new();
        m.save(&mut buf).unwrap();
        let mut m2 = NgramPredictor::load(&buf[..]).unwrap();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for ctx in ["", "今天", "明", "我喜欢今天天气很"] {
            m.predict(ctx, 5, &mut a).unwrap();
            m2.predict(ctx, 5, &mut b).unwrap();
            assert_eq!(a, b);
        }
        let bad = String::from_utf8(buf).unwrap().replace("\"order\":3", "\"order\":4");
        assert!(matches!(NgramPredictor::load(bad.as_bytes()), Err(NgramError::Invalid(_))));
    }

    fn shared() -> std::sync::MutexGuard<'static, NgramPredictor> {
        // Building the Auto segmenter loads jieba's dictionary; do it once for all cases.
        static M: std::sync::OnceLock<std::sync::Mutex<NgramPredictor>> = std::sync::OnceLock::new();
        M.get_or_init(|| std::sync::Mutex::new(model())).lock().unwrap_or_else(|e| e.into_inner())
    }

    proptest! {
        #[test]
        fn candidates_are_admissible(ctx in "\\PC{0,12}") {
            let mut m = shared();
            let mut out = Vec::new();
            m.predict(&ctx, 5, &mut out).unwrap();
            prop_assert!(out.len() <= 5);
            let norm: Vec<char> = normalize_text(&ctx).chars().collect();
            let mut sum = 0.0;
            for c in &out {
                let w: Vec<char> = c.word.chars().collect();
                prop_assert!(c.replace < w.len() && c.replace <= norm.len());
                prop_assert_eq!(&norm[norm.len() - c.replace..], &w[..c.replace]);
                sum += c.p;
            }
            prop_assert!(sum <= 1.0 + 1e-4);
        }
    }
}
