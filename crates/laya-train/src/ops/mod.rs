//! The training ops the trainer wrote itself, each a fused forward and backward pass over
//! contiguous f32 rows instead of candle's chain of broadcast temporaries (which dominated a
//! training step at V = 20,000):
//!
//! * [`losses`]: soft-target cross-entropies of the word and replace heads.
//! * [`classes`]: the factorised word head (class sums, within-class softmax and loss).
//! * [`layers`]: gelu, per-column affine maps, row normalisation, softmax.
//! * [`fastmath`]: the vectorisable `exp`/`tanh` and log-sum-exp they share.

use candle_core::{CpuStorage, Layout, Shape};
use rayon::prelude::*;

pub(crate) mod classes;
pub(crate) mod fastmath;
pub(crate) mod layers;
pub(crate) mod losses;

pub use classes::{class_log_softmax, class_sums, within_class_soft_cross_entropy, WordClasses};
pub use layers::{add_columns, gelu_tanh, normalize_rows, scale_shift_columns, softmax_rows};
pub use losses::{biased_soft_cross_entropy, soft_cross_entropy};

/// Elements per task of the elementwise loops: large enough that a fork costs little against the
/// work, small enough that two to sixteen threads all get some.
const ELEMWISE_CHUNK: usize = 16 * 1024;

/// The f32 slice of a contiguous storage, or an error naming `what`.
fn cpu_f32<'a>(s: &'a CpuStorage, l: &Layout, what: &str) -> candle_core::Result<&'a [f32]> {
    let (start, end) = l.contiguous_offsets().ok_or_else(|| candle_core::Error::Msg(format!("laya op: {what} must be contiguous")))?;
    match s {
        CpuStorage::F32(x) => Ok(&x[start..end]),
        _ => Err(candle_core::Error::Msg(format!("laya op: {what} must be f32"))),
    }
}

/// A contiguous `[B, V]` f32 tensor as `(data, B, V)`.
fn rows<'a>(s: &'a CpuStorage, l: &Layout, what: &str) -> candle_core::Result<(&'a [f32], usize, usize)> {
    let (b, v) = l.shape().dims2()?;
    Ok((cpu_f32(s, l, what)?, b, v))
}

/// Sum over the rows of a contiguous `[B, V]` tensor (candle's reduction over a leading
/// dimension walks it with strides; this is one contiguous pass).
pub(crate) struct ColumnSum;

impl candle_core::CustomOp1 for ColumnSum {
    fn name(&self) -> &'static str {
        "laya-column-sum"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (_, v) = l.shape().dims2()?;
        let x = cpu_f32(s, l, "input")?;
        // Each task owns a band of columns and walks every row over it: no reduction of
        // partial sums, and the result does not depend on the thread count.
        const BAND: usize = 2048;
        let mut acc = vec![0f32; v];
        acc.par_chunks_mut(BAND).enumerate().for_each(|(k, a)| {
            let (lo, n) = (k * BAND, a.len());
            for row in x.chunks_exact(v) {
                for (a, &x) in a.iter_mut().zip(&row[lo..lo + n]) {
                    *a += x;
                }
            }
        });
        Ok((CpuStorage::F32(acc), Shape::from(v)))
    }
}
