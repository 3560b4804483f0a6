//! Hardware-aware structured pruning of the FFN (SPEC.md, docs/pruning.md).
//!
//! Every FFN matrix is cut in whole 4×4 blocks: hidden units leave in groups of [`PRUNE_GROUP`]
//! (a 4-row stripe of `ffn_up`, its 4 bias entries and the matching 4-column stripe of
//! `ffn_down`), and every width stays a multiple of 32, so the pruned matrices are simply
//! smaller dense matrices that the runtime's kernels handle like any other.

use crate::config::TrainConfig;
use crate::data::{encode_events, make_batch, Event};
use crate::error::TrainError;
use crate::export::Precision;
use crate::model::LayaNet;
use crate::rng::Rng;
use crate::train::loss_tensors;
use candle_core::{Tensor, Var};
use laya_format::{GgmlType, LayaFile};
use std::fmt;

/// Hidden units removed or kept together: one 4-row stripe of `ffn_up` and one 4-column stripe
/// of `ffn_down`, so every 4×4 block of both matrices is either kept whole or dropped whole.
pub const PRUNE_GROUP: usize = 4;

/// Every FFN width, before and after pruning, is a positive multiple of this (format.md §4).
pub const WIDTH_MULTIPLE: usize = 32;

/// Why pruning was refused or failed.
#[derive(Debug)]
pub enum PruneError {
    /// The number of target widths is neither 1 (one for every block) nor the block count.
    WidthCount {
        /// Blocks of the model.
        blocks: usize,
        /// Widths given.
        given: usize,
    },
    /// A target width is 0, not a multiple of 32, or larger than the block's current width.
    BadWidth {
        /// Block index.
        block: usize,
        /// The requested width.
        width: usize,
        /// The block's current width.
        current: usize,
    },
    /// `--keep` must be a fraction in (0, 1].
    BadKeep(f64),
    /// The kept fraction rounds a block down to 0 units.
    KeepTooSmall {
        /// Block index.
        block: usize,
        /// The block's current width.
        current: usize,
        /// The requested fraction.
        keep: f64,
    },
    /// The model holds a quantised tensor: pruning needs float weights.
    Quantized {
        /// The first quantised tensor found.
        tensor: String,
        /// Its type.
        ty: GgmlType,
    },
    /// Saliency scores do not match the network (one score per group of every block).
    ScoreShape(String),
    /// The Taylor saliency needs events with a usable click.
    NoEvents(String),
    /// A tensor operation or the training loop failed.
    Train(TrainError),
}

impl fmt::Display for PruneError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PruneError::WidthCount { blocks, given } => write!(
                f,
                "{given} FFN widths given for a model with {blocks} blocks; give one width for every block or a comma list of {blocks}"
            ),
            PruneError::BadWidth { block, width, current } => {
                let why = if *width == 0 {
                    "must be positive".to_string()
                } else if width % WIDTH_MULTIPLE != 0 {
                    let (lo, hi) = (width / WIDTH_MULTIPLE * WIDTH_MULTIPLE, width.div_ceil(WIDTH_MULTIPLE) * WIDTH_MULTIPLE);
                    if lo == 0 {
                        format!("is not a multiple of {WIDTH_MULTIPLE} (try {hi})")
                    } else {
                        format!("is not a multiple of {WIDTH_MULTIPLE} (try {lo} or {hi})")
                    }
                } else {
                    "is larger than the current width; pruning only removes units".to_string()
                };
                write!(f, "FFN width {width} for block {block} (currently {current}) {why}")
            }
            PruneError::BadKeep(k) => write!(f, "keep fraction {k} must be in (0, 1]"),
            PruneError::KeepTooSmall { block, current, keep } => write!(
                f,
                "keeping {keep} of block {block}'s {current} FFN units rounds down to 0 (widths are multiples of {WIDTH_MULTIPLE}); keep more"
            ),
            PruneError::Quantized { tensor, ty } => write!(
                f,
                "tensor {tensor} is quantised ({}); prune before quantizing (use the F32/F16 model `laya train` wrote)",
                ty.name()
            ),
            PruneError::ScoreShape(m) => write!(f, "saliency scores do not fit the network: {m}"),
            PruneError::NoEvents(m) => write!(f, "cannot compute the Taylor saliency: {m}"),
            PruneError::Train(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PruneError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PruneError::Train(e) => Some(e),
            _ => None,
        }
    }
}

impl From<TrainError> for PruneError {
    fn from(e: TrainError) -> Self {
        PruneError::Train(e)
    }
}

impl From<candle_core::Error> for PruneError {
    fn from(e: candle_core::Error) -> Self {
        PruneError::Train(TrainError::Candle(e))
    }
}

type Result<T> = std::result::Result<T, PruneError>;

/// How the importance of a group of 4 hidden units is measured (docs/pruning.md).
#[derive(Debug, Clone, Copy)]
pub enum Saliency<'a> {
    /// Sum of squared weights of the group's blocks, each matrix normalised by its mean group
    /// energy so `ffn_up` and `ffn_down` count equally (see [`magnitude_scores`]).
    Magnitude,
    /// First-order Taylor estimate `Σ |w · ∂L/∂w|` over some training batches (see
    /// [`taylor_scores`]).
    Taylor {
        /// Click events (the training log).
        events: &'a [Event],
        /// Batch size, loss weights and seed.
        train: &'a TrainConfig,
        /// Batches to accumulate over (at most; fewer when the events run out).
        batches: usize,
    },
}

/// What happened to one block.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockPrune {
    /// Block index.
    pub block: usize,
    /// FFN width before.
    pub old_width: usize,
    /// FFN width after.
    pub new_width: usize,
    /// Hidden units kept, in their original (ascending) order.
    pub kept_units: Vec<usize>,
    /// Share of the block's total saliency that the kept groups carry (1 when nothing is removed).
    pub kept_saliency: f64,
    /// FFN parameters (both matrices and both biases) before.
    pub params_before: usize,
    /// FFN parameters after.
    pub params_after: usize,
}

/// The result of [`prune`]: one entry per block and the whole network's parameter counts.
#[derive(Debug, Clone, PartialEq)]
pub struct PruneReport {
    /// Per block.
    pub blocks: Vec<BlockPrune>,
    /// Parameters of the whole network before.
    pub params_before: usize,
    /// Parameters of the whole network after.
    pub params_after: usize,
}

fn ffn_params(d: usize, f: usize) -> usize {
    2 * f * d + f + d
}

/// Checks that `file` holds only float tensors (pruning works on weights, not on quantisation
/// codes) and returns the precision its matrices are stored in, the natural precision for the
/// pruned file (BF16 maps to F32, which holds it exactly).
///
/// ```
/// use laya_format::{testing, write_model, GgmlType, LayaFile};
/// use laya_train::{float_precision, Precision};
/// let (meta, tensors) = testing::random_model(&testing::TinyConfig::small(), 1, GgmlType::F16);
/// let bytes = write_model(&meta, &tensors).unwrap();
/// assert_eq!(float_precision(&LayaFile::parse(&bytes).unwrap()).unwrap(), Precision::F16);
/// let (meta, tensors) = testing::random_model(&testing::TinyConfig::small(), 1, GgmlType::Q8_0);
/// let bytes = write_model(&meta, &tensors).unwrap();
/// assert!(float_precision(&LayaFile::parse(&bytes).unwrap()).unwrap_err().to_string().contains("prune before quantizing"));
/// ```
pub fn float_precision(file: &LayaFile<'_>) -> Result<Precision> {
    let mut f16 = false;
    for t in file.tensors() {
        match t.ty {
            // The n-gram tables are integers whatever the network's precision.
            GgmlType::F32 | GgmlType::BF16 | GgmlType::I16 | GgmlType::I32 => {}
            GgmlType::F16 => f16 = true,
            ty @ (GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0) => return Err(PruneError::Quantized { tensor: t.name.clone(), ty }),
        }
    }
    Ok(if f16 { Precision::F16 } else { Precision::F32 })
}

/// Checks target widths against the network and expands a single width to every block.
///
/// ```
/// use laya_train::{LayaNet, Mapping, ModelConfig};
/// let mut cfg = ModelConfig::standard(vec!["a".into()], vec![1], Mapping::Table(vec![97]));
/// cfg.d_model = 32;
/// cfg.ffn = vec![128, 64];
/// let net = LayaNet::new(cfg, 1).unwrap();
/// assert_eq!(laya_train::check_widths(&net, &[64]).unwrap(), vec![64, 64]);
/// assert!(laya_train::check_widths(&net, &[96, 96]).is_err()); // 96 > 64 in block 1
/// assert!(laya_train::check_widths(&net, &[48]).is_err()); // not a multiple of 32
/// ```
pub fn check_widths(net: &LayaNet, widths: &[usize]) -> Result<Vec<usize>> {
    let current = &net.config().ffn;
    let widths: Vec<usize> = match widths.len() {
        1 => vec![widths[0]; current.len()],
        n if n == current.len() => widths.to_vec(),
        n => return Err(PruneError::WidthCount { blocks: current.len(), given: n }),
    };
    for (block, (&width, &cur)) in widths.iter().zip(current).enumerate() {
        if width == 0 || width % WIDTH_MULTIPLE != 0 || width > cur {
            return Err(PruneError::BadWidth { block, width, current: cur });
        }
    }
    Ok(widths)
}

/// Target widths that keep `keep` of every block's units, rounded down to a multiple of 32.
///
/// ```
/// assert_eq!(laya_train::widths_for_keep(&[256, 128], 0.75).unwrap(), vec![192, 96]);
/// assert!(laya_train::widths_for_keep(&[64], 0.25).is_err()); // 16 rounds down to 0
/// assert!(laya_train::widths_for_keep(&[64], 1.5).is_err());
/// ```
pub fn widths_for_keep(current: &[usize], keep: f64) -> Result<Vec<usize>> {
    if !(keep > 0.0 && keep <= 1.0) {
        return Err(PruneError::BadKeep(keep));
    }
    current
        .iter()
        .enumerate()
        .map(|(block, &cur)| {
            // The epsilon stops 0.7 × 320 = 223.99999… from losing a whole 32-unit step.
            let units = (cur as f64 * keep + 1e-9).floor() as usize;
            let w = units / WIDTH_MULTIPLE * WIDTH_MULTIPLE;
            if w == 0 {
                Err(PruneError::KeepTooSmall { block, current: cur, keep })
            } else {
                Ok(w.min(cur))
            }
        })
        .collect()
}

fn tensor_of<'n>(net: &'n LayaNet, name: &str) -> Result<&'n Var> {
    net.params()
        .iter()
        .find(|p| p.name == name)
        .map(|p| &p.var)
        .ok_or_else(|| PruneError::ScoreShape(format!("the network has no tensor {name}")))
}

/// Per-group sums over one block: `(Σ up rows² + bias², Σ down columns²)` from flat `[f, d]`,
/// `[f]` and `[d, f]` arrays.
fn group_energy(up: &[f32], bias: &[f32], down: &[f32], f: usize, d: usize) -> (Vec<f64>, Vec<f64>) {
    let groups = f / PRUNE_GROUP;
    let (mut eu, mut ed) = (vec![0f64; groups], vec![0f64; groups]);
    for unit in 0..f {
        let g = unit / PRUNE_GROUP;
        eu[g] += up[unit * d..(unit + 1) * d].iter().map(|&w| (w as f64).powi(2)).sum::<f64>() + (bias[unit] as f64).powi(2);
    }
    for row in down.chunks(f) {
        for (unit, &w) in row.iter().enumerate() {
            ed[unit / PRUNE_GROUP] += (w as f64).powi(2);
        }
    }
    (eu, ed)
}

fn block_arrays(net: &LayaNet, l: usize) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
    let get = |part: &str| -> Result<Vec<f32>> { Ok(tensor_of(net, &format!("blk.{l}.{part}"))?.flatten_all()?.to_vec1()?) };
    Ok((get("ffn_up.weight")?, get("ffn_up.bias")?, get("ffn_down.weight")?))
}

/// Magnitude saliency of every group of 4 hidden units, per block.
///
/// A group's score is `E_up / mean(E_up) + E_down / mean(E_down)`, where `E_up` is the sum of
/// squares of its four `ffn_up` rows (the d/4 4×4 blocks of that stripe, plus the four bias
/// entries) and `E_down` the same for its four `ffn_down` columns. Dividing by the block's mean
/// group energy makes both matrices count alike even though they are initialised (and end up)
/// at different scales.
///
/// ```
/// use laya_train::{magnitude_scores, LayaNet, Mapping, ModelConfig};
/// let mut cfg = ModelConfig::standard(vec!["a".into()], vec![1], Mapping::Table(vec![97]));
/// cfg.d_model = 32;
/// cfg.ffn = vec![64];
/// let scores = magnitude_scores(&LayaNet::new(cfg, 1).unwrap()).unwrap();
/// assert_eq!(scores[0].len(), 16);
/// assert!((scores[0].iter().sum::<f64>() - 32.0).abs() < 1e-6); // each matrix averages 1
/// ```
pub fn magnitude_scores(net: &LayaNet) -> Result<Vec<Vec<f64>>> {
    let d = net.config().d_model;
    let mut out = Vec::new();
    for (l, &f) in net.config().ffn.iter().enumerate() {
        let (up, bias, down) = block_arrays(net, l)?;
        let (eu, ed) = group_energy(&up, &bias, &down, f, d);
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let (mu, md) = (mean(&eu), mean(&ed));
        let norm = |e: f64, m: f64| if m > 0.0 { e / m } else { 0.0 };
        out.push(eu.iter().zip(&ed).map(|(&u, &dn)| norm(u, mu) + norm(dn, md)).collect());
    }
    Ok(out)
}

/// First-order Taylor saliency of every group of 4 hidden units, per block: the sum over the
/// group's weights and biases of `|w · ∂L/∂w|`, accumulated over up to `batches` shuffled
/// batches of `events` with the training loss of `train`. It estimates how much the loss would
/// rise if the group were removed, so it is already in loss units for both matrices.
///
/// ```
/// use laya_train::{taylor_scores, Event, LayaNet, Mapping, ModelConfig, Shown, TrainConfig};
/// let mut cfg = ModelConfig::standard(vec!["天气".into()], vec![1], Mapping::Table(vec!['今' as u32, '天' as u32]));
/// cfg.d_model = 32;
/// cfg.ffn = vec![32];
/// let net = LayaNet::new(cfg, 1).unwrap();
/// let ev = Event { context: "今天".into(), shown: vec![Shown { word: "天气".into(), replace: 0 }], clicked: Some(0), weight: 1.0 };
/// let scores = taylor_scores(&net, &[ev], &TrainConfig::default(), 4).unwrap();
/// assert_eq!(scores[0].len(), 8);
/// ```
pub fn taylor_scores(net: &LayaNet, events: &[Event], train: &TrainConfig, batches: usize) -> Result<Vec<Vec<f64>>> {
    let cfg = net.config();
    let d = cfg.d_model;
    let set = encode_events(events, cfg, train);
    if set.is_empty() {
        return Err(PruneError::NoEvents(format!("none of the {} events has a usable click", events.len())));
    }
    let mut order: Vec<usize> = (0..set.len()).collect();
    Rng::new(train.seed, 0x7A71_0000).shuffle(&mut order);
    let mut scores: Vec<Vec<f64>> = cfg.ffn.iter().map(|&f| vec![0f64; f / PRUNE_GROUP]).collect();
    let names: Vec<[String; 3]> = (0..cfg.layers())
        .map(|l| [format!("blk.{l}.ffn_up.weight"), format!("blk.{l}.ffn_up.bias"), format!("blk.{l}.ffn_down.weight")])
        .collect();
    for chunk in order.chunks(train.batch_size.max(1)).take(batches.max(1)) {
        let batch = make_batch(&set, chunk, cfg.vocab(), cfg.replace_classes, net.device())?;
        // Gathering from a detached table keeps the (unused) embedding gradient out of backward.
        let tok = net.gather_rows(&batch.rows)?;
        let (w, r) = net.forward_embedded(&tok, &batch.rows)?;
        let (total, _, _) = loss_tensors(&w, &r, &batch, train.replace_loss_weight)?;
        let grads = total.backward()?;
        for (l, &f) in cfg.ffn.iter().enumerate() {
            let mut wg = Vec::with_capacity(3);
            for name in &names[l] {
                let var = tensor_of(net, name)?;
                let g = match grads.get(var.as_tensor()) {
                    Some(g) => g.flatten_all()?.to_vec1::<f32>()?,
                    None => vec![0.0; var.elem_count()],
                };
                let w: Vec<f32> = var.flatten_all()?.to_vec1()?;
                wg.push(w.iter().zip(&g).map(|(&a, &b)| (a * b).abs()).collect::<Vec<f32>>());
            }
            // |w·g| summed like the squared weights of the magnitude score (no normalisation:
            // Taylor terms are loss changes, comparable across matrices by construction).
            let (eu, ed) = group_energy_abs(&wg[0], &wg[1], &wg[2], f, d);
            for (s, (u, dn)) in scores[l].iter_mut().zip(eu.iter().zip(&ed)) {
                *s += u + dn;
            }
        }
    }
    Ok(scores)
}

fn group_energy_abs(up: &[f32], bias: &[f32], down: &[f32], f: usize, d: usize) -> (Vec<f64>, Vec<f64>) {
    let groups = f / PRUNE_GROUP;
    let (mut eu, mut ed) = (vec![0f64; groups], vec![0f64; groups]);
    for unit in 0..f {
        eu[unit / PRUNE_GROUP] += up[unit * d..(unit + 1) * d].iter().map(|&v| v as f64).sum::<f64>() + bias[unit] as f64;
    }
    for row in down.chunks(f) {
        for (unit, &v) in row.iter().enumerate() {
            ed[unit / PRUNE_GROUP] += v as f64;
        }
    }
    (eu, ed)
}

/// Prunes every block's FFN to `widths` (one width for all blocks, or one per block), ranking
/// groups of 4 units by `saliency`, and returns the smaller network and a report.
///
/// ```
/// use laya_train::{prune, LayaNet, Mapping, ModelConfig, Saliency};
/// let mut cfg = ModelConfig::standard(vec!["a".into()], vec![1], Mapping::Table(vec![97]));
/// cfg.d_model = 32;
/// cfg.ffn = vec![128, 96];
/// let net = LayaNet::new(cfg, 1).unwrap();
/// let (small, report) = prune(&net, &[64], Saliency::Magnitude).unwrap();
/// assert_eq!(small.config().ffn, vec![64, 64]);
/// assert_eq!(report.blocks[1].kept_units.len(), 64);
/// assert!(report.params_after < report.params_before);
/// ```
pub fn prune(net: &LayaNet, widths: &[usize], saliency: Saliency<'_>) -> Result<(LayaNet, PruneReport)> {
    let widths = check_widths(net, widths)?;
    let scores = match saliency {
        Saliency::Magnitude => magnitude_scores(net)?,
        Saliency::Taylor { events, train, batches } => taylor_scores(net, events, train, batches)?,
    };
    prune_with_scores(net, &widths, &scores)
}

/// Prunes with given per-group scores (`scores[l][g]` for group `g` = units `4g..4g+4` of
/// block `l`): the highest-scoring `width/4` groups of each block are kept, ties going to the
/// lower index, and copied in their original order into a new, smaller network. Every other
/// tensor is copied unchanged.
///
/// ```
/// use laya_train::{prune_with_scores, LayaNet, Mapping, ModelConfig};
/// let mut cfg = ModelConfig::standard(vec!["a".into()], vec![1], Mapping::Table(vec![97]));
/// cfg.d_model = 32;
/// cfg.ffn = vec![64];
/// let net = LayaNet::new(cfg, 1).unwrap();
/// let mut scores = vec![vec![1.0; 16]];
/// scores[0][0] = 0.0; // the first 8 groups score lowest and go
/// for s in &mut scores[0][1..8] { *s = 0.5; }
/// let (_, report) = prune_with_scores(&net, &[32], &scores).unwrap();
/// assert_eq!(report.blocks[0].kept_units, (32..64).collect::<Vec<_>>());
/// ```
pub fn prune_with_scores(net: &LayaNet, widths: &[usize], scores: &[Vec<f64>]) -> Result<(LayaNet, PruneReport)> {
    let widths = check_widths(net, widths)?;
    let cfg = net.config();
    let d = cfg.d_model;
    if scores.len() != cfg.layers() {
        return Err(PruneError::ScoreShape(format!("{} blocks of scores for {} blocks", scores.len(), cfg.layers())));
    }
    let mut blocks = Vec::with_capacity(cfg.layers());
    for (l, (&f, &w)) in cfg.ffn.iter().zip(&widths).enumerate() {
        let s = &scores[l];
        if s.len() != f / PRUNE_GROUP {
            return Err(PruneError::ScoreShape(format!("block {l} has {} scores for {} groups", s.len(), f / PRUNE_GROUP)));
        }
        let mut rank: Vec<usize> = (0..s.len()).collect();
        // Descending score; total_cmp keeps a NaN from breaking the order, the index breaks ties.
        rank.sort_by(|&a, &b| s[b].total_cmp(&s[a]).then(a.cmp(&b)));
        let mut kept: Vec<usize> = rank[..w / PRUNE_GROUP].to_vec();
        kept.sort_unstable();
        let total: f64 = s.iter().sum();
        let kept_sum: f64 = kept.iter().map(|&g| s[g]).sum();
        let kept_saliency = if total > 0.0 { kept_sum / total } else { 1.0 };
        let kept_units: Vec<usize> = kept.iter().flat_map(|&g| g * PRUNE_GROUP..(g + 1) * PRUNE_GROUP).collect();
        blocks.push(BlockPrune {
            block: l,
            old_width: f,
            new_width: w,
            kept_units,
            kept_saliency,
            params_before: ffn_params(d, f),
            params_after: ffn_params(d, w),
        });
    }
    let mut new_cfg = cfg.clone();
    new_cfg.ffn = widths.clone();
    let small = LayaNet::new(new_cfg, 0)?;
    for p in small.params() {
        let src = tensor_of(net, &p.name)?.as_tensor();
        let pruned = ffn_part(&p.name).map(|(l, dim)| (dim, &blocks[l].kept_units));
        let t = match pruned {
            Some((dim, units)) => {
                let idx = Tensor::from_vec(units.iter().map(|&u| u as u32).collect::<Vec<u32>>(), units.len(), net.device())?;
                src.index_select(&idx, dim)?.contiguous()?
            }
            None => src.copy()?,
        };
        p.var.set(&t)?;
    }
    let count = |n: &LayaNet| n.params().iter().map(|p| p.var.elem_count()).sum::<usize>();
    let report = PruneReport { params_before: count(net), params_after: count(&small), blocks };
    Ok((small, report))
}

/// `(block, dimension along the hidden units)` of a tensor that pruning shrinks.
fn ffn_part(name: &str) -> Option<(usize, usize)> {
    let rest = name.strip_prefix("blk.")?;
    let (l, part) = rest.split_once('.')?;
    let l: usize = l.parse().ok()?;
    match part {
        "ffn_up.weight" | "ffn_up.bias" => Some((l, 0)),
        "ffn_down.weight" => Some((l, 1)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ffn_part_names() {
        assert_eq!(ffn_part("blk.2.ffn_up.weight"), Some((2, 0)));
        assert_eq!(ffn_part("blk.0.ffn_up.bias"), Some((0, 0)));
        assert_eq!(ffn_part("blk.11.ffn_down.weight"), Some((11, 1)));
        assert_eq!(ffn_part("blk.0.ffn_down.bias"), None);
        assert_eq!(ffn_part("blk.0.attn_q.weight"), None);
        assert_eq!(ffn_part("output.weight"), None);
    }

    #[test]
    fn group_energy_sums_stripes() {
        // f = 8 units, d = 2: unit u's up row is [u, 0], bias 1; down is [d, f] with row r = r+1.
        let (f, d) = (8, 2);
        let up: Vec<f32> = (0..f).flat_map(|u| [u as f32, 0.0]).collect();
        let bias = vec![1.0; f];
        let down: Vec<f32> = (0..d).flat_map(|r| vec![(r + 1) as f32; f]).collect();
        let (eu, ed) = group_energy(&up, &bias, &down, f, d);
        // Units 0..4: 0² + 1² + 2² + 3² plus the four unit biases; units 4..8 likewise.
        assert_eq!(eu, vec![(1 + 4 + 9 + 4) as f64, (16 + 25 + 36 + 49 + 4) as f64]);
        assert_eq!(ed, vec![4.0 * (1.0 + 4.0), 4.0 * (1.0 + 4.0)]);
    }
}
