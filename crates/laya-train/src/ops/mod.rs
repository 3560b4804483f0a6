//! The training ops the trainer wrote itself, each a fused forward and backward pass over
//! contiguous f32 rows instead of candle's chain of broadcast temporaries (which dominated a
//! training step at V = 20,000):
//!
//! * [`losses`]: soft-target cross-entropies of the word and replace heads.
//! * [`classes`]: the factorised word head (class sums, within-class softmax and loss);
//!   [`class_rows`]: its within-class loss from the hidden rows, on the target classes alone.
//! * [`layers`]: gelu, per-column affine maps, row normalisation, softmax.
//! * [`fastmath`]: the vectorisable `exp`/`tanh` and log-sum-exp they share.
//!
//! The layers and the factorised head's class ops run as fused passes on the CPU and as CUDA
//! kernels of the same arithmetic on a GPU (`crate::cuda`); the dense soft cross-entropies take
//! their [`composed`] twins there (candle's kernels), and the factorised word loss the listed
//! form of [`listed`]. The tests pin every fused op to its composed twin.

use candle_core::{CpuStorage, Layout, Shape, Tensor};
use rayon::prelude::*;

pub(crate) mod class_rows;
pub(crate) mod classes;
pub(crate) mod composed;
pub(crate) mod fastmath;
pub(crate) mod layers;
pub(crate) mod listed;
pub(crate) mod losses;

pub use class_rows::within_class_head_loss;
pub use classes::{class_log_softmax, class_sums, within_class_soft_cross_entropy, WordClasses};
pub use layers::{add_columns, gelu_tanh, normalize_rows, scale_shift_columns, softmax_rows};
pub use losses::{biased_soft_cross_entropy, soft_cross_entropy};

/// Whether this crate's own passes run on `dev`: the CPU's, and with the `cuda` feature a GPU's.
/// Other devices take the [`composed`] twins.
fn has_kernels(dev: &candle_core::Device) -> bool {
    dev.is_cpu() || (cfg!(feature = "cuda") && dev.is_cuda())
}

/// A `shape` f32 tensor of zeros on `dev` with `values[i]` at flat position `at[i]` (distinct,
/// in range). On a GPU only the entries travel (candle's `index_add` walks them one by one in a
/// single thread).
pub(crate) fn scatter(shape: impl Into<Shape>, at: &[u32], values: &[f32], dev: &candle_core::Device) -> candle_core::Result<Tensor> {
    let shape = shape.into();
    match dev {
        #[cfg(feature = "cuda")]
        candle_core::Device::Cuda(d) => crate::cuda::scatter(d, shape, at, values),
        _ => {
            let mut dense = vec![0f32; shape.elem_count()];
            for (&i, &v) in at.iter().zip(values) {
                *dense.get_mut(i as usize).ok_or_else(|| candle_core::Error::Msg(format!("scatter: position {i} out of range")))? = v;
            }
            Tensor::from_vec(dense, shape, dev)
        }
    }
}

/// `[segments, d]` with row `s` the sum of rows `order[seg[s]..seg[s + 1]]` of `g` `[N, d]`, in
/// that order (`seg` ascending from 0 to `order.len()`). Not differentiable.
pub(crate) fn segment_sums(g: &Tensor, order: &[u32], seg: &[u32]) -> candle_core::Result<Tensor> {
    match g.device() {
        #[cfg(feature = "cuda")]
        candle_core::Device::Cuda(_) => crate::cuda::segment_sums(g, order, seg),
        dev => {
            let (n, d) = g.dims2()?;
            let x: Vec<f32> = g.flatten_all()?.to_vec1()?;
            let segments = seg.len().saturating_sub(1);
            let mut out = vec![0f32; segments * d];
            for (s, w) in seg.windows(2).enumerate() {
                let acc = &mut out[s * d..(s + 1) * d];
                for &i in order.get(w[0] as usize..w[1] as usize).unwrap_or_default() {
                    if i as usize >= n {
                        candle_core::bail!("segment sums: row {i} of {n}")
                    }
                    for (a, &v) in acc.iter_mut().zip(&x[i as usize * d..(i as usize + 1) * d]) {
                        *a += v;
                    }
                }
            }
            Tensor::from_vec(out, (segments, d), dev)
        }
    }
}

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

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s: &candle_core::CudaStorage, l: &Layout) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        crate::cuda::column_sums(s, l)
    }
}
