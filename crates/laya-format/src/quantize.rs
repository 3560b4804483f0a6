//! Turning a float model into a quantised one (`laya quantize`, docs/quantization.md).
//!
//! The embedding table is the largest tensor of a Laya model (65,536 × d with the direct
//! mapping), so it gets the most aggressive type, Q4_1 by default. What 4 bits lose on average
//! is put back by an **error-compensation bias** (`token_embd_comp.weight`, docs/format.md §7):
//! rows are grouped in runs of [`COMP_GROUP_ROWS`] consecutive rows (row `r` belongs to group
//! `r / 32`, the last group may be short) and
//!
//! ```text
//! comp[g][c] = mean over rows r of group g of (orig[r][c] − dequant[r][c])
//! ```
//!
//! stored in F16; the runtime looks a row up as `dequant(row) + comp[row / 32]`. Subtracting the
//! mean of a set of numbers never increases their sum of squares, so the table's RMSE with the
//! compensation is at most the RMSE without it (F16 rounding of the mean cannot undo that: it
//! moves the mean by at most 2⁻¹¹ of itself).

use std::fmt;

use crate::error::FormatError;
use crate::schema::{LayaFile, ModelMeta, COMP_GROUP_ROWS, TOKEN_EMBD_COMP};
use crate::types::GgmlType;
use crate::writer::TensorData;

/// Which type each kind of tensor gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantizeOptions {
    /// `token_embd.weight` (default Q4_1).
    pub embedding: GgmlType,
    /// Every block matrix: attention q/k/v/output, FFN up/down (default Q8_0).
    pub linear: GgmlType,
    /// `output.weight`, the word head (default Q8_0).
    pub head: GgmlType,
    /// Write `token_embd_comp.weight` when the embedding is quantised (default true).
    pub compensation: bool,
}

impl Default for QuantizeOptions {
    fn default() -> Self {
        QuantizeOptions { embedding: GgmlType::Q4_1, linear: GgmlType::Q8_0, head: GgmlType::Q8_0, compensation: true }
    }
}

/// Why a model cannot be quantised.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum QuantizeError {
    /// The input already holds a quantised tensor: quantising twice compounds the error and
    /// the original values needed for the compensation are gone.
    AlreadyQuantized { tensor: String, ty: GgmlType },
    /// The chosen type's block does not divide the tensor's rows.
    BlockSize { tensor: String, ty: GgmlType, row_len: usize },
    /// Reading, encoding or writing failed.
    Format(FormatError),
}

impl fmt::Display for QuantizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuantizeError::AlreadyQuantized { tensor, ty } => {
                write!(f, "already quantised: quantise from the float model ({tensor} is {})", ty.name())
            }
            QuantizeError::BlockSize { tensor, ty, row_len } => write!(
                f,
                "cannot store {tensor} as {}: its rows have {row_len} values, not a multiple of \
                 the {}-value block; choose f16 or f32 for it",
                ty.name(),
                ty.block_size()
            ),
            QuantizeError::Format(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for QuantizeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            QuantizeError::Format(e) => Some(e),
            _ => None,
        }
    }
}

impl From<FormatError> for QuantizeError {
    fn from(e: FormatError) -> Self {
        QuantizeError::Format(e)
    }
}

/// Reconstruction error of a table against the original values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ErrorStats {
    /// Root mean square of `orig − approx` over every value.
    pub rmse: f64,
    /// Largest `|orig − approx|`.
    pub max_abs: f64,
}

/// How well the quantised embedding reproduces the float one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EmbeddingReport {
    /// The type `token_embd.weight` was written as.
    pub ty: GgmlType,
    /// `dequant` alone.
    pub without_comp: ErrorStats,
    /// `dequant + comp` with the F16 compensation as stored; `None` when none was written.
    pub with_comp: Option<ErrorStats>,
}

/// A quantised model, ready for [`crate::write_model`].
#[derive(Debug, Clone, PartialEq)]
pub struct Quantized {
    pub meta: ModelMeta,
    /// Canonical order, `token_embd_comp.weight` right after `token_embd.weight`.
    pub tensors: Vec<TensorData>,
    pub embedding: EmbeddingReport,
}

/// The compensation of a table of `orig.len() / cols` rows: for every group of
/// [`COMP_GROUP_ROWS`] consecutive rows and every column, the mean of `orig − deq`.
/// Returns `ceil(rows / 32) × cols` values, row-major. Sums run in f64.
///
/// ```
/// use laya_format::quantize::compensation;
/// // 33 rows of 1 column: a full group with error 1.0 and a short group of one row, error -2.
/// let orig = vec![1.0f32; 33];
/// let mut deq = vec![0.0f32; 33];
/// deq[32] = 3.0;
/// assert_eq!(compensation(&orig, &deq, 1), vec![1.0, -2.0]);
/// ```
pub fn compensation(orig: &[f32], deq: &[f32], cols: usize) -> Vec<f32> {
    if cols == 0 {
        return Vec::new();
    }
    let rows = orig.len().min(deq.len()) / cols;
    let g = COMP_GROUP_ROWS as usize;
    let mut out = Vec::with_capacity(rows.div_ceil(g) * cols);
    let mut sum = vec![0f64; cols];
    for start in (0..rows).step_by(g) {
        let end = (start + g).min(rows);
        sum.fill(0.0);
        for r in start..end {
            let (o, q) = (&orig[r * cols..][..cols], &deq[r * cols..][..cols]);
            for ((s, a), b) in sum.iter_mut().zip(o).zip(q) {
                *s += f64::from(*a) - f64::from(*b);
            }
        }
        let n = (end - start) as f64;
        out.extend(sum.iter().map(|s| (s / n) as f32));
    }
    out
}

/// Adds `comp` (from [`compensation`]) back to a dequantised table, in place: what the runtime
/// does at each lookup, for every row at once.
pub fn apply_compensation(deq: &mut [f32], comp: &[f32], cols: usize) {
    if cols == 0 {
        return;
    }
    let g = COMP_GROUP_ROWS as usize;
    for (r, row) in deq.chunks_exact_mut(cols).enumerate() {
        if let Some(c) = comp.get((r / g) * cols..(r / g + 1) * cols) {
            row.iter_mut().zip(c).for_each(|(x, c)| *x += c);
        }
    }
}

/// RMSE and max abs error of `approx` against `orig` (zero for empty input).
///
/// ```
/// use laya_format::quantize::error_stats;
/// let e = error_stats(&[1.0, 2.0, 3.0, 4.0], &[1.0, 2.0, 3.0, 2.0]);
/// assert_eq!((e.rmse, e.max_abs), (1.0, 2.0));
/// ```
pub fn error_stats(orig: &[f32], approx: &[f32]) -> ErrorStats {
    let (mut sq, mut max, mut n) = (0f64, 0f64, 0usize);
    for (a, b) in orig.iter().zip(approx) {
        let e = (f64::from(*a) - f64::from(*b)).abs();
        sq += e * e;
        max = max.max(e);
        n += 1;
    }
    ErrorStats { rmse: if n == 0 { 0.0 } else { (sq / n as f64).sqrt() }, max_abs: max }
}

/// The block matrices of every layer (`--linear`).
fn is_linear(name: &str) -> bool {
    name.starts_with("blk.")
        && ["attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight", "ffn_up.weight", "ffn_down.weight"]
            .iter()
            .any(|s| name.ends_with(s))
}

/// Quantises a float model (F32, F16 or BF16 tensors): the embedding as `opts.embedding` with
/// its compensation, block matrices as `opts.linear`, `output.weight` as `opts.head`; the
/// position table, `replace.weight`, norms and biases are copied unchanged.
///
/// ```
/// use laya_format::quantize::{quantize_model, QuantizeOptions};
/// use laya_format::{testing, write_model, GgmlType, LayaFile};
/// let (meta, tensors) = testing::random_model(&testing::TinyConfig::small(), 4, GgmlType::F32);
/// let float = write_model(&meta, &tensors)?;
/// let q = quantize_model(&LayaFile::parse(&float)?, &QuantizeOptions::default())?;
/// let bytes = write_model(&q.meta, &q.tensors)?;
/// let model = LayaFile::parse(&bytes)?;
/// assert_eq!(model.token_embd.ty, GgmlType::Q4_1);
/// assert!(model.token_embd_comp.is_some());
/// let e = q.embedding;
/// assert!(e.with_comp.unwrap().rmse <= e.without_comp.rmse);
/// // A quantised model is refused.
/// assert!(quantize_model(&model, &QuantizeOptions::default()).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn quantize_model(file: &LayaFile, opts: &QuantizeOptions) -> Result<Quantized, QuantizeError> {
    if let Some(t) = file.tensors().into_iter().find(|t| t.ty.is_quantized()) {
        return Err(QuantizeError::AlreadyQuantized { tensor: t.name.clone(), ty: t.ty });
    }
    let target = |name: &str| -> Option<GgmlType> {
        match name {
            "token_embd.weight" => Some(opts.embedding),
            // The class head of a factorised word head is read per keystroke like the word
            // head, and its rows are the same kind of thing: word-group scores.
            "output.weight" | crate::OUTPUT_CLASS_W => Some(opts.head),
            // One row per order is read per prediction and added to what the heads read.
            crate::MEMORY_EMBD => Some(opts.head),
            n if is_linear(n) => Some(opts.linear),
            _ => None,
        }
    };
    // Refuse before doing any work, naming the first tensor that cannot take its type.
    for t in file.tensors() {
        if let Some(ty) = target(&t.name) {
            if !t.row_len().is_multiple_of(ty.block_size()) {
                return Err(QuantizeError::BlockSize { tensor: t.name.clone(), ty, row_len: t.row_len() });
            }
        }
    }

    let mut tensors = Vec::new();
    let mut embedding = None;
    for t in file.tensors() {
        let Some(ty) = target(&t.name) else {
            tensors.push(t.to_owned_data());
            continue;
        };
        let orig = t.to_f32()?;
        let data = crate::quant::quantize(&orig, ty)?;
        let out = TensorData { name: t.name.clone(), ty, ne: t.ne.clone(), data };
        if t.name != "token_embd.weight" {
            tensors.push(out);
            continue;
        }
        let cols = t.row_len();
        let mut deq = crate::quant::dequantize(&out.data, ty, orig.len())?;
        let without_comp = error_stats(&orig, &deq);
        tensors.push(out);
        let mut with_comp = None;
        if opts.compensation && ty.is_quantized() {
            let comp = compensation(&orig, &deq, cols);
            let groups = (comp.len() / cols.max(1)) as u64;
            let stored = TensorData::from_f32(TOKEN_EMBD_COMP, GgmlType::F16, &[cols as u64, groups], &comp)?;
            // Measure what the runtime will add: the F16 values, not the f32 means.
            let comp16 = crate::quant::dequantize(&stored.data, GgmlType::F16, comp.len())?;
            apply_compensation(&mut deq, &comp16, cols);
            with_comp = Some(error_stats(&orig, &deq));
            tensors.push(stored);
        }
        embedding = Some(EmbeddingReport { ty, without_comp, with_comp });
    }
    let mut meta = file.meta.clone();
    meta.provenance.tool = Some(format!(
        "laya-format {} quantize (embedding {}{}, linear {}, head {})",
        env!("CARGO_PKG_VERSION"),
        opts.embedding.name(),
        if embedding.is_some_and(|e| e.with_comp.is_some()) { " + compensation" } else { "" },
        opts.linear.name(),
        opts.head.name()
    ));
    let embedding = embedding.ok_or_else(|| QuantizeError::Format(FormatError::MissingTensor("token_embd.weight".into())))?;
    Ok(Quantized { meta, tensors, embedding })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tests as data: (rows, cols, orig, deq, expected comp).
    #[allow(clippy::type_complexity)]
    fn cases() -> Vec<(usize, usize, Vec<f32>, Vec<f32>, Vec<f32>)> {
        // 64 rows × 2 columns: group 0 has error +0.5 in column 0 and alternating ±1 in column 1
        // (mean 0); group 1 has error r/32-ish ramps whose mean is known.
        let rows = 64;
        let mut orig = vec![0f32; rows * 2];
        let mut deq = vec![0f32; rows * 2];
        for r in 0..rows {
            orig[r * 2] = 1.0;
            deq[r * 2] = if r < 32 { 0.5 } else { 1.0 - (r - 32) as f32 };
            orig[r * 2 + 1] = if r % 2 == 0 { 1.0 } else { -1.0 };
        }
        // Column 0, group 1: errors 0, 1, …, 31: mean 15.5.
        let two_groups = (rows, 2, orig, deq, vec![0.5, 0.0, 15.5, 0.0]);
        // 35 rows × 1 column: the last group is short (3 rows) and averages over 3, not 32.
        let short = (35, 1, vec![0.0; 35], (0..35).map(|r| if r < 32 { 0.0 } else { -(r as f32 - 31.0) }).collect(), vec![0.0, 2.0]);
        let single_row = (1, 3, vec![1.0, 2.0, 3.0], vec![0.0, 2.5, 3.0], vec![1.0, -0.5, 0.0]);
        vec![two_groups, short, single_row]
    }

    #[test]
    fn compensation_matches_hand_computed_means() {
        for (i, (rows, cols, orig, deq, want)) in cases().into_iter().enumerate() {
            assert_eq!(orig.len(), rows * cols);
            let got = compensation(&orig, &deq, cols);
            assert_eq!(got, want, "case {i}");
        }
    }

    #[test]
    fn applied_compensation_removes_group_mean_error() {
        for (_, cols, orig, mut deq, _) in cases() {
            let comp = compensation(&orig, &deq, cols);
            let before = error_stats(&orig, &deq);
            apply_compensation(&mut deq, &comp, cols);
            let after = error_stats(&orig, &deq);
            assert!(after.rmse <= before.rmse + 1e-12, "{after:?} vs {before:?}");
            // After compensation every group's mean error per column is zero.
            let again = compensation(&orig, &deq, cols);
            assert!(again.iter().all(|v| v.abs() < 1e-5), "{again:?}");
        }
    }

    #[test]
    fn error_stats_of_identical_tables_is_zero() {
        let x = [0.25f32, -3.0, 7.5];
        assert_eq!(error_stats(&x, &x), ErrorStats { rmse: 0.0, max_abs: 0.0 });
        assert_eq!(error_stats(&[], &[]).rmse, 0.0);
    }

    #[test]
    fn messages_say_what_to_do() {
        let e = QuantizeError::AlreadyQuantized { tensor: "blk.0.attn_q.weight".into(), ty: GgmlType::Q8_0 };
        assert!(e.to_string().starts_with("already quantised: quantise from the float model"));
        let e = QuantizeError::BlockSize { tensor: "token_embd.weight".into(), ty: GgmlType::Q4_1, row_len: 48 };
        assert!(e.to_string().contains("token_embd.weight"), "{e}");
    }
}
