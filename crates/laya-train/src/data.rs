//! Click events → tensors: context rows, the soft word target and the replace class.

use crate::config::{ModelConfig, Objective, ShownScope, TrainConfig};
use crate::error::Result;
use candle_core::{Device, Tensor};
use std::collections::HashMap;

/// Events come from `laya-text` (keyboard logs or text simulated into events).
pub use laya_text::{Event, Shown};

/// Why events were left out of training (reported, never silent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EncodeStats {
    /// Events turned into samples.
    pub used: usize,
    /// Events without a click (nothing to learn from).
    pub no_click: usize,
    /// Events whose `clicked` index is past the end of `shown`.
    pub bad_click: usize,
    /// Used events whose clicked word is outside the lexicon (they train the replace head only).
    pub clicked_oov: usize,
    /// Events with a weight that is not a positive finite number.
    pub bad_weight: usize,
}

impl EncodeStats {
    /// Adds another set's counts (shards encoded apart).
    pub fn add(&mut self, o: &EncodeStats) {
        self.used += o.used;
        self.no_click += o.no_click;
        self.bad_click += o.bad_click;
        self.clicked_oov += o.clicked_oov;
        self.bad_weight += o.bad_weight;
    }
}

/// Events encoded once for the whole run so that batching is just copying.
#[derive(Debug, Clone, Default)]
pub struct EncodedSet {
    /// Rows per sample ([`ModelConfig::seq_len`]: `T`, or `R` for the causal scheme).
    pub t: usize,
    /// `n · t` embedding rows (causal: [`crate::PAD_ROW`] marks padding).
    pub rows: Vec<u32>,
    /// Per sample: `(word id, weight)` pairs summing to 1; empty when the click is out of lexicon.
    pub word_target: Vec<Vec<(u32, f32)>>,
    /// Per sample: the clicked word's id when it is in the lexicon.
    pub clicked_word: Vec<Option<u32>>,
    /// Per sample: the replace class `min(replace, C − 1)` of the clicked candidate.
    pub replace_class: Vec<u32>,
    /// Per sample: the event's importance (`Event::weight`).
    pub weight: Vec<f32>,
    /// What was left out.
    pub stats: EncodeStats,
}

impl EncodedSet {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.replace_class.len()
    }

    /// True when no event was usable.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Word id of every lexicon word.
pub fn word_index(cfg: &ModelConfig) -> HashMap<&str, u32> {
    cfg.words.iter().enumerate().map(|(i, w)| (w.as_str(), i as u32)).collect()
}

/// The word-head target of one event: `(word id, weight)` pairs normalised to sum 1, sorted by id.
/// `ClickWeighted`: the clicked word weighs `click_weight`, every other distinct shown word in the
/// lexicon `shown_weight` (with [`ShownScope::SameReplace`], only those shown with the clicked
/// one's `replace`). `Clicked`: the clicked word alone. Empty when the event has no valid click
/// or the clicked word is not in the lexicon. With `cfg.fold_case` a word not in `lex` as it is
/// is looked up folded ([`laya_format::fold_case`]).
///
/// ```
/// use laya_train::{word_target, Event, Shown, TrainConfig};
/// use std::collections::HashMap;
/// let lex: HashMap<&str, u32> = [("a", 0), ("b", 1)].into_iter().collect();
/// let shown = |w: &str| Shown { word: w.into(), replace: 0 };
/// let ev = Event { context: "x".into(), shown: vec![shown("b"), shown("a"), shown("zz")], clicked: Some(1), weight: 1.0 };
/// assert_eq!(word_target(&ev, &lex, &TrainConfig::default()), vec![(0, 0.75), (1, 0.25)]);
/// let all = TrainConfig { shown_scope: laya_train::ShownScope::All, ..TrainConfig::default() };
/// // Mid-word ("x" typed, "xa" clicked), the next word "b" is not an alternative:
/// let lex: HashMap<&str, u32> = [("xa", 0), ("b", 1), ("xb", 2)].into_iter().collect();
/// let ev = Event {
///     context: "x".into(),
///     shown: vec![Shown { word: "xa".into(), replace: 1 }, shown("b"), Shown { word: "xb".into(), replace: 1 }],
///     clicked: Some(0),
///     weight: 1.0,
/// };
/// assert_eq!(word_target(&ev, &lex, &TrainConfig::default()), vec![(0, 0.75), (2, 0.25)]);
/// assert_eq!(word_target(&ev, &lex, &all), vec![(0, 0.6), (1, 0.2), (2, 0.2)]);
/// // Folding case, a click on "The" is one on "the" (the index's keys are folded):
/// let lex: HashMap<&str, u32> = [("the", 0), ("i", 1)].into_iter().collect();
/// let ev = Event { context: "".into(), shown: vec![shown("The"), shown("I")], clicked: Some(0), weight: 1.0 };
/// let fold = TrainConfig { fold_case: true, ..TrainConfig::default() };
/// assert_eq!(word_target(&ev, &lex, &fold), vec![(0, 0.75), (1, 0.25)]);
/// assert_eq!(word_target(&ev, &lex, &TrainConfig::default()), vec![]);
/// ```
pub fn word_target(ev: &Event, lex: &HashMap<&str, u32>, cfg: &TrainConfig) -> Vec<(u32, f32)> {
    let Some(clicked) = ev.clicked.and_then(|c| ev.shown.get(c)) else {
        return Vec::new();
    };
    let find = |w: &str| match lex.get(w) {
        Some(&id) => Some(id),
        None if cfg.fold_case => lex.get(laya_format::fold_case(w).as_str()).copied(),
        None => None,
    };
    let Some(cid) = find(&clicked.word) else {
        return Vec::new();
    };
    let mut weights: Vec<(u32, f32)> = vec![(cid, cfg.click_weight)];
    if cfg.objective == Objective::ClickWeighted {
        for s in &ev.shown {
            if cfg.shown_scope == ShownScope::SameReplace && s.replace != clicked.replace {
                continue;
            }
            if let Some(id) = find(&s.word) {
                if !weights.iter().any(|&(w, _)| w == id) {
                    weights.push((id, cfg.shown_weight));
                }
            }
        }
    }
    weights.retain(|&(_, w)| w > 0.0);
    let total: f32 = weights.iter().map(|&(_, w)| w).sum();
    if total <= 0.0 {
        return vec![(cid, 1.0)];
    }
    for w in &mut weights {
        w.1 /= total;
    }
    weights.sort_by_key(|&(id, _)| id);
    weights
}

/// Encodes events for `model` under the objective of `train`. With `train.fold_case` words
/// are found by their folded form, the most frequent of the words that fold alike taking the
/// click (as the runtime shows only that one).
pub fn encode_events(events: &[Event], model: &ModelConfig, train: &TrainConfig) -> EncodedSet {
    let folded: Vec<String> = if train.fold_case { model.words.iter().map(|w| laya_format::fold_case(w)).collect() } else { Vec::new() };
    let lex: HashMap<&str, u32> = if train.fold_case {
        // The most frequent (then the lowest id) inserted last, so it stays.
        let freq = |i: usize| model.frequencies.get(i).copied().unwrap_or(0);
        let mut ids: Vec<usize> = (0..folded.len()).collect();
        ids.sort_by(|&a, &b| freq(a).cmp(&freq(b)).then(b.cmp(&a)));
        ids.into_iter().map(|i| (folded[i].as_str(), i as u32)).collect()
    } else {
        word_index(model)
    };
    let find = |w: &str| match lex.get(w) {
        Some(&id) => Some(id),
        None if train.fold_case => lex.get(laya_format::fold_case(w).as_str()).copied(),
        None => None,
    };
    let t = model.seq_len();
    let mut set = EncodedSet { t, ..EncodedSet::default() };
    let mut rows = vec![0u32; t];
    for ev in events {
        let Some(c) = ev.clicked else {
            set.stats.no_click += 1;
            continue;
        };
        let Some(shown) = ev.shown.get(c) else {
            set.stats.bad_click += 1;
            continue;
        };
        if !(ev.weight.is_finite() && ev.weight > 0.0) {
            set.stats.bad_weight += 1;
            continue;
        }
        model.encode_into(&ev.context, &mut rows);
        set.rows.extend_from_slice(&rows);
        let target = word_target(ev, &lex, train);
        let cw = find(&shown.word);
        if cw.is_none() {
            set.stats.clicked_oov += 1;
        }
        set.word_target.push(target);
        set.clicked_word.push(cw);
        set.replace_class.push(shown.replace.min(model.replace_classes as u32 - 1));
        set.weight.push(ev.weight);
        set.stats.used += 1;
    }
    set
}

/// The non-zero entries of a `[B, V]` table, row by row: row `r`'s are
/// `cols[start[r]..start[r + 1]]` with `values[..]` alongside, columns ascending within a row.
///
/// ```
/// let s = laya_train::SparseRows { start: vec![0, 2, 2, 3], cols: vec![1, 4, 0], values: vec![0.5, 0.5, 1.0] };
/// assert_eq!(s.row(0), (&[1u32, 4][..], &[0.5f32, 0.5][..]));
/// assert_eq!(s.row(1).0.len(), 0);
/// assert_eq!(s.rows(1..3).start, vec![0, 0, 1]);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SparseRows {
    /// `B + 1` offsets into `cols` and `values`.
    pub start: Vec<u32>,
    /// Column of each entry.
    pub cols: Vec<u32>,
    /// Value of each entry.
    pub values: Vec<f32>,
}

impl SparseRows {
    /// Rows in the table.
    pub fn len(&self) -> usize {
        self.start.len().saturating_sub(1)
    }

    /// True when the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Row `r`'s columns and values.
    pub fn row(&self, r: usize) -> (&[u32], &[f32]) {
        let (a, b) = (self.start[r] as usize, self.start[r + 1] as usize);
        (&self.cols[a..b], &self.values[a..b])
    }

    /// The rows `range` as a table of their own.
    pub fn rows(&self, range: std::ops::Range<usize>) -> SparseRows {
        let (a, b) = (self.start[range.start] as usize, self.start[range.end] as usize);
        SparseRows {
            start: self.start[range.start..=range.end].iter().map(|&s| s - a as u32).collect(),
            cols: self.cols[a..b].to_vec(),
            values: self.values[a..b].to_vec(),
        }
    }
}

/// One mini-batch as tensors.
#[derive(Debug)]
pub struct Batch {
    /// Samples in the batch.
    pub size: usize,
    /// Embedding rows, `B · t` values (row-major `[B, t]`, `t` = [`ModelConfig::seq_len`]).
    pub rows: Vec<u32>,
    /// The soft word targets, row by row: each row's words and their target weights, scaled by
    /// the event weight (no entries for an out-of-lexicon click). [`Batch::word_target`] is the
    /// same as a dense `[B, V]` tensor.
    pub word_entries: SparseRows,
    /// `V`, the width of [`Batch::word_target`].
    vocab: usize,
    /// The device [`Batch::word_target`] is made on.
    device: Device,
    /// [`Batch::word_target`], made at its first use: a factorised head on the CPU reads the
    /// entries alone, and the dense table (`B · V` floats, 100 MB at batch 512 and 50,000 words)
    /// would be fresh memory every step.
    word_target: std::sync::OnceLock<Tensor>,
    /// Samples with a word target.
    pub word_count: usize,
    /// Sum of the weights of the samples with a word target (the word loss divisor).
    pub word_weight: f32,
    /// Sum of all sample weights (the replace loss divisor).
    pub total_weight: f32,
    /// Replace target `[B, C]`: the event weight at the clicked class.
    pub replace_target: Tensor,
    /// Clicked word ids (for accuracy).
    pub clicked_word: Vec<Option<u32>>,
    /// Replace classes (for accuracy).
    pub replace_class: Vec<u32>,
}

impl Batch {
    /// The soft word targets as a dense `[B, V]` tensor on the batch's device (all-zero rows for
    /// out-of-lexicon clicks): [`Batch::word_entries`] scattered into zeros, made at the first
    /// call and kept.
    ///
    /// ```
    /// use laya_train::*;
    /// let ev = Event { context: "今天".into(), shown: vec![Shown { word: "很好".into(), replace: 0 }], clicked: Some(0), weight: 2.0 };
    /// let mut mc = ModelConfig::standard(vec!["天气".into(), "很好".into()], vec![1, 1], Mapping::Direct);
    /// mc.ffn = vec![32];
    /// let set = encode_events(&[ev], &mc, &TrainConfig::default());
    /// let batch = make_batch(&set, &[0], 2, mc.replace_classes, &candle_core::Device::Cpu).unwrap();
    /// assert_eq!(batch.word_target().unwrap().to_vec2::<f32>().unwrap(), [[0.0, 2.0]]);
    /// assert_eq!(batch.word_entries.row(0), (&[1u32][..], &[2f32][..]));
    /// ```
    pub fn word_target(&self) -> Result<&Tensor> {
        if let Some(t) = self.word_target.get() {
            return Ok(t);
        }
        let t = dense_targets(&self.word_entries, self.vocab, &self.device)?;
        Ok(self.word_target.get_or_init(|| t))
    }

    /// The samples `range` of this batch as a batch of their own that keeps this batch's loss
    /// divisors (`word_weight`, `total_weight`), so that the shards' losses, and therefore their
    /// gradients, add up to this batch's. [`crate::train_step`] runs shards side by side.
    ///
    /// ```
    /// use laya_train::*;
    /// let ev = |w: &str| Event { context: "今天".into(), shown: vec![Shown { word: w.into(), replace: 0 }], clicked: Some(0), weight: 1.0 };
    /// let mut mc = ModelConfig::standard(vec!["天气".into(), "很好".into()], vec![1, 1], Mapping::Direct);
    /// mc.ffn = vec![32];
    /// let tc = TrainConfig::default();
    /// let set = encode_events(&[ev("天气"), ev("很好"), ev("天气")], &mc, &tc);
    /// let batch = make_batch(&set, &[0, 1, 2], 2, mc.replace_classes, &candle_core::Device::Cpu).unwrap();
    /// let tail = batch.shard(1..3).unwrap();
    /// assert_eq!((tail.size, tail.total_weight), (2, 3.0));
    /// ```
    pub fn shard(&self, range: std::ops::Range<usize>) -> Result<Batch> {
        if range.start > range.end || range.end > self.size {
            return Err(crate::TrainError::Config(format!("shard {range:?} of a batch of {}", self.size)));
        }
        let t = self.rows.len() / self.size.max(1);
        let n = range.len();
        Ok(Batch {
            size: n,
            rows: self.rows[range.start * t..range.end * t].to_vec(),
            word_entries: self.word_entries.rows(range.clone()),
            vocab: self.vocab,
            device: self.device.clone(),
            word_target: match self.word_target.get() {
                Some(t) => std::sync::OnceLock::from(t.narrow(0, range.start, n)?),
                None => std::sync::OnceLock::new(),
            },
            // A sample has a word target exactly when its click is in the lexicon (`word_target`).
            word_count: self.clicked_word[range.clone()].iter().filter(|w| w.is_some()).count(),
            word_weight: self.word_weight,
            total_weight: self.total_weight,
            replace_target: self.replace_target.narrow(0, range.start, n)?,
            clicked_word: self.clicked_word[range.clone()].to_vec(),
            replace_class: self.replace_class[range].to_vec(),
        })
    }
}

/// Gathers the samples `idx` of `set` into a batch.
pub fn make_batch(set: &EncodedSet, idx: &[usize], vocab: usize, classes: usize, dev: &Device) -> Result<Batch> {
    let b = idx.len();
    let t = set.t;
    let mut rows = Vec::with_capacity(b * t);
    let mut entries = SparseRows { start: vec![0], ..SparseRows::default() };
    let mut rt = vec![0f32; b * classes];
    let (mut word_count, mut word_weight, mut total_weight) = (0, 0f32, 0f32);
    for (k, &i) in idx.iter().enumerate() {
        let weight = set.weight[i];
        rows.extend_from_slice(&set.rows[i * t..(i + 1) * t]);
        if !set.word_target[i].is_empty() {
            word_count += 1;
            word_weight += weight;
        }
        for &(w, p) in &set.word_target[i] {
            entries.cols.push(w);
            entries.values.push(p * weight);
        }
        entries.start.push(entries.cols.len() as u32);
        rt[k * classes + set.replace_class[i] as usize] = weight;
        total_weight += weight;
    }
    Ok(Batch {
        size: b,
        rows,
        word_entries: entries,
        vocab,
        device: dev.clone(),
        word_target: std::sync::OnceLock::new(),
        word_count,
        word_weight,
        total_weight,
        replace_target: Tensor::from_vec(rt, (b, classes), dev)?,
        clicked_word: idx.iter().map(|&i| set.clicked_word[i]).collect(),
        replace_class: idx.iter().map(|&i| set.replace_class[i]).collect(),
    })
}

/// The dense `[B, V]` word targets of `entries` on `dev`: a table filled on the CPU; for another
/// device only the non-zero entries (flat index, value) travel, and the device scatters them
/// into zeros.
fn dense_targets(entries: &SparseRows, vocab: usize, dev: &Device) -> Result<Tensor> {
    let b = entries.len();
    if let Some(&w) = entries.cols.iter().find(|&&w| w as usize >= vocab) {
        return Err(crate::TrainError::Config(format!("a word target {w} outside the {vocab} words of the head")));
    }
    if dev.is_cpu() {
        let mut wt = vec![0f32; b * vocab];
        for r in 0..b {
            let (cols, values) = entries.row(r);
            for (&w, &x) in cols.iter().zip(values) {
                wt[r * vocab + w as usize] = x;
            }
        }
        return Ok(Tensor::from_vec(wt, (b, vocab), dev)?);
    }
    if b * vocab > u32::MAX as usize {
        return Err(crate::TrainError::Config(format!("a batch of {b} × {vocab} word targets is past 2³² entries; use a smaller batch")));
    }
    let at: Vec<u32> = (0..b).flat_map(|r| entries.row(r).0.iter().map(move |&w| (r * vocab) as u32 + w)).collect();
    Ok(crate::ops::scatter((b, vocab), &at, &entries.values, dev)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ModelConfig, Shown, TrainConfig};
    use laya_format::Mapping;

    /// The dense targets made lazily, for a batch or for its shards, before or after the batch
    /// made its own, are the entries scattered into zeros.
    #[test]
    fn dense_targets_of_a_batch_and_of_its_shards_agree() {
        let words: Vec<String> = ["天气", "很好", "不错", "今天"].iter().map(|w| w.to_string()).collect();
        let mut mc = ModelConfig::standard(words.clone(), vec![4, 3, 2, 1], Mapping::Direct);
        mc.ffn = vec![32];
        let ev = |shown: &[&str], clicked: Option<usize>, weight: f32| Event {
            context: "今天".into(),
            shown: shown.iter().map(|w| Shown { word: w.to_string(), replace: 0 }).collect(),
            clicked,
            weight,
        };
        let events = [ev(&["天气", "很好"], Some(0), 1.0), ev(&["不错"], None, 2.0), ev(&["今天", "不错", "很好"], Some(2), 0.5)];
        let set = encode_events(&events, &mc, &TrainConfig::default());
        let dev = Device::Cpu;
        let idx: Vec<usize> = (0..set.len()).rev().collect();
        assert!(idx.len() >= 2, "{} samples", idx.len());
        let batch = make_batch(&set, &idx, words.len(), mc.replace_classes, &dev).unwrap();
        let n = idx.len();
        let lazy_shard = batch.shard(1..n).unwrap();
        let whole: Vec<Vec<f32>> = batch.word_target().unwrap().to_vec2().unwrap();
        assert!(whole.iter().flatten().any(|&x| x != 0.0));
        for (r, row) in whole.iter().enumerate() {
            let (cols, values) = batch.word_entries.row(r);
            let mut want = vec![0f32; words.len()];
            for (&c, &v) in cols.iter().zip(values) {
                want[c as usize] = v;
            }
            assert_eq!(row, &want, "row {r}");
        }
        let narrowed = batch.shard(1..n).unwrap();
        assert_eq!(lazy_shard.word_target().unwrap().to_vec2::<f32>().unwrap(), whole[1..]);
        assert_eq!(narrowed.word_target().unwrap().to_vec2::<f32>().unwrap(), whole[1..]);
        // A target outside the head is an error, not a write into the next row.
        let mut bad = make_batch(&set, &idx, words.len(), mc.replace_classes, &dev).unwrap();
        bad.word_entries.cols[0] = words.len() as u32;
        assert!(bad.word_target().is_err());
    }
}
