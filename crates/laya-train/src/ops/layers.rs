//! Layers with fused backward passes: `gelu_tanh`, per-column affine maps (biases and the
//! LayerNorm scale and shift), row normalisation and softmax.

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::fastmath::{fast_exp, fast_tanh};
use super::{cpu_f32, rows, ColumnSum, ELEMWISE_CHUNK};

const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// `gelu_tanh` (format.md §3) with a backward pass that needs no transcendental function:
/// from `y = 0.5·x·(1 + t)` it recovers `t = 2y/x − 1`. candle's own gelu backward spends most
/// of its time in `powf`/`tanh`/`expm1`, which made it a third of a training step.
struct GeluTanh;

impl candle_core::CustomOp1 for GeluTanh {
    fn name(&self) -> &'static str {
        "laya-gelu-tanh"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (start, end) = l.contiguous_offsets().ok_or_else(|| candle_core::Error::Msg("gelu: input must be contiguous".into()))?;
        let x = match s {
            CpuStorage::F32(x) => &x[start..end],
            _ => return Err(candle_core::Error::Msg("gelu: input must be f32".into())),
        };
        let mut y = vec![0f32; x.len()];
        y.par_chunks_mut(ELEMWISE_CHUNK).zip(x.par_chunks(ELEMWISE_CHUNK)).for_each(|(y, x)| {
            for (y, &x) in y.iter_mut().zip(x) {
                *y = 0.5 * x * (1.0 + fast_tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)));
            }
        });
        Ok((CpuStorage::F32(y), l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s: &candle_core::CudaStorage, l: &Layout) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        crate::cuda::gelu((s, l))
    }

    fn bwd(&self, arg: &Tensor, res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(arg.apply_op3_no_bwd(res, &grad.contiguous()?, &GeluTanhGrad)?))
    }
}

/// `g · d gelu_tanh / dx` given `x`, `y = gelu_tanh(x)` and the incoming gradient `g`, in one
/// pass (it was a derivative tensor, two input copies and a separate multiply).
struct GeluTanhGrad;

impl candle_core::CustomOp3 for GeluTanhGrad {
    fn name(&self) -> &'static str {
        "laya-gelu-tanh-grad"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, y, g) = (cpu_f32(s1, l1, "gelu input")?, cpu_f32(s2, l2, "gelu output")?, cpu_f32(s3, l3, "gradient")?);
        if y.len() != x.len() || g.len() != x.len() {
            return Err(candle_core::Error::Msg("gelu grad: input, output and gradient differ in size".into()));
        }
        let mut d = vec![0f32; x.len()];
        let c = ELEMWISE_CHUNK;
        d.par_chunks_mut(c).zip(x.par_chunks(c)).zip(y.par_chunks(c)).zip(g.par_chunks(c)).for_each(|(((d, x), y), g)| {
            for (((d, &x), &y), &g) in d.iter_mut().zip(x).zip(y).zip(g) {
                let t = if x.abs() > 1e-4 { (2.0 * y / x - 1.0).clamp(-1.0, 1.0) } else { (SQRT_2_OVER_PI * x).tanh() };
                let du = SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x);
                *d = g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du);
            }
        });
        Ok((CpuStorage::F32(d), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        crate::cuda::gelu_grad((s1, l1), (s2, l2), (s3, l3))
    }
}

/// `gelu_tanh(x)` elementwise, differentiable (see `GeluTanh` for why it is not candle's).
pub fn gelu_tanh(x: &Tensor) -> candle_core::Result<Tensor> {
    if !super::has_kernels(x.device()) {
        return super::composed::gelu_tanh(x);
    }
    x.contiguous()?.apply_op1(GeluTanh)
}

/// Per-column affine map of a contiguous `[N, F]` tensor: `y = x·w + b` with `w`, `b` `[F]`
/// (`w` absent: `y = x + b`). The linear layers' bias and the LayerNorm scale and shift.
///
/// Why not `broadcast_mul`/`broadcast_add`: their backward reduces the `[N, F]` gradient over
/// its leading dimension with a strided walk, which was a tenth of a training step; here the
/// parameter gradients are contiguous column sums.
struct ColumnAffine {
    scaled: bool,
}

fn affine_fwd(x: &[f32], w: Option<&[f32]>, b: &[f32]) -> Vec<f32> {
    let f = b.len();
    let mut y = Vec::with_capacity(x.len());
    for row in x.chunks_exact(f) {
        match w {
            Some(w) => y.extend(row.iter().zip(w).zip(b).map(|((&x, &w), &b)| x * w + b)),
            None => y.extend(row.iter().zip(b).map(|(&x, &b)| x + b)),
        }
    }
    y
}

fn affine_shapes(lx: &Layout, lp: &Layout) -> candle_core::Result<usize> {
    let (_, f) = lx.shape().dims2()?;
    if lp.shape().dims1()? != f {
        return Err(candle_core::Error::Msg(format!("column affine: input {:?}, parameter {:?}", lx.shape(), lp.shape())));
    }
    Ok(f)
}

impl CustomOp2 for ColumnAffine {
    fn name(&self) -> &'static str {
        "laya-column-add"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        affine_shapes(l1, l2)?;
        let y = affine_fwd(cpu_f32(s1, l1, "input")?, None, cpu_f32(s2, l2, "bias")?);
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        crate::cuda::column_affine((s1, l1), None, (s2, l2))
    }

    fn bwd(&self, _x: &Tensor, _b: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let g = grad.contiguous()?;
        let gb = g.apply_op1_no_bwd(&ColumnSum)?;
        Ok((Some(g), Some(gb)))
    }
}

impl candle_core::CustomOp3 for ColumnAffine {
    fn name(&self) -> &'static str {
        "laya-column-affine"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        affine_shapes(l1, l2)?;
        affine_shapes(l1, l3)?;
        let w = if self.scaled { Some(cpu_f32(s2, l2, "scale")?) } else { None };
        let y = affine_fwd(cpu_f32(s1, l1, "input")?, w, cpu_f32(s3, l3, "shift")?);
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        crate::cuda::column_affine((s1, l1), self.scaled.then_some((s2, l2)), (s3, l3))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let g = grad.contiguous()?;
        #[cfg(feature = "cuda")]
        if self.scaled && g.device().is_cuda() {
            return column_affine_grad_on_gpu(&g, x, w);
        }
        let gx = g.broadcast_mul(w)?;
        let gw = g.mul(x)?.apply_op1_no_bwd(&ColumnSum)?;
        let gb = g.apply_op1_no_bwd(&ColumnSum)?;
        Ok((Some(gx), Some(gw), Some(gb)))
    }
}

/// [`ColumnAffine`]'s gradients on a GPU in one pass over `g` and `x`
/// (`cuda::column_affine_grad`), where the composed form reads `g` three times: the same bits.
#[cfg(feature = "cuda")]
fn column_affine_grad_on_gpu(g: &Tensor, x: &Tensor, w: &Tensor) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
    let (rows, cols) = g.dims2()?;
    let chunks = rows.div_ceil(crate::cuda::COLUMN_CHUNK).max(1);
    let packed = g.apply_op3_no_bwd(&x.contiguous()?, &w.contiguous()?, &ColumnAffineGrad)?;
    let gx = packed.narrow(0, 0, rows * cols)?.reshape((rows, cols))?;
    let sums =
        |k: usize| packed.narrow(0, rows * cols + k * chunks * cols, chunks * cols)?.reshape((chunks, cols))?.apply_op1_no_bwd(&ColumnSum);
    Ok((Some(gx), Some(sums(0)?), Some(sums(1)?)))
}

/// The packed gradients of [`ColumnAffine`] with a scale: a GPU op (`cuda::column_affine_grad`).
#[cfg(feature = "cuda")]
struct ColumnAffineGrad;

#[cfg(feature = "cuda")]
impl candle_core::CustomOp3 for ColumnAffineGrad {
    fn name(&self) -> &'static str {
        "laya-column-affine-grad"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        crate::cuda::refuse_cpu(self.name())
    }

    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        crate::cuda::column_affine_grad((s1, l1), (s2, l2), (s3, l3))
    }
}

/// `x + b` for `x` `[N, F]` and `b` `[F]`, differentiable in both (see `ColumnAffine`).
///
/// ```
/// use candle_core::{Device, Tensor};
/// let x = Tensor::new(&[[1f32, 2.0], [3.0, 4.0]], &Device::Cpu).unwrap();
/// let b = Tensor::new(&[10f32, 20.0], &Device::Cpu).unwrap();
/// let y: Vec<Vec<f32>> = laya_train::add_columns(&x, &b).unwrap().to_vec2().unwrap();
/// assert_eq!(y, vec![vec![11.0, 22.0], vec![13.0, 24.0]]);
/// ```
pub fn add_columns(x: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
    if !super::has_kernels(x.device()) {
        return super::composed::add_columns(x, b);
    }
    x.contiguous()?.apply_op2(&b.contiguous()?, ColumnAffine { scaled: false })
}

/// `x·w + b` for `x` `[N, F]` and `w`, `b` `[F]`, differentiable in all three (see `ColumnAffine`).
///
/// ```
/// use candle_core::{Device, Tensor};
/// let x = Tensor::new(&[[1f32, 2.0], [3.0, 4.0]], &Device::Cpu).unwrap();
/// let w = Tensor::new(&[2f32, 0.5], &Device::Cpu).unwrap();
/// let b = Tensor::new(&[1f32, -1.0], &Device::Cpu).unwrap();
/// let y: Vec<Vec<f32>> = laya_train::scale_shift_columns(&x, &w, &b).unwrap().to_vec2().unwrap();
/// assert_eq!(y, vec![vec![3.0, 0.0], vec![7.0, 1.0]]);
/// ```
pub fn scale_shift_columns(x: &Tensor, w: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
    if !super::has_kernels(x.device()) {
        return super::composed::scale_shift_columns(x, w, b);
    }
    x.contiguous()?.apply_op3(&w.contiguous()?, &b.contiguous()?, ColumnAffine { scaled: true })
}

/// Per row of a contiguous `[R, d]` tensor: `(x − mean) / sqrt(var + eps)` with the biased
/// variance — LayerNorm without its scale and shift ([`scale_shift_columns`] adds those). One
/// pass forward and one backward instead of the seven broadcast temporaries of the composed
/// form, whose binary ops were a tenth of a step; `normalize_rows_matches_the_composed_form`
/// pins value and gradient to that form.
struct NormalizeRows {
    eps: f32,
}

/// Per row: the mean and `1 / sqrt(var + eps)`.
fn row_stats(x: &[f32], eps: f32) -> (f32, f32) {
    let n = x.len() as f32;
    let mean = x.iter().sum::<f32>() / n;
    let var = x.iter().map(|&v| (v - mean) * (v - mean)).sum::<f32>() / n;
    (mean, 1.0 / (var + eps).sqrt())
}

impl candle_core::CustomOp1 for NormalizeRows {
    fn name(&self) -> &'static str {
        "laya-normalize-rows"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, _, d) = rows(s, l, "input")?;
        let mut y = vec![0f32; x.len()];
        y.par_chunks_exact_mut(d).zip(x.par_chunks_exact(d)).for_each(|(yr, xr)| {
            let (mean, inv) = row_stats(xr, self.eps);
            yr.iter_mut().zip(xr).for_each(|(y, &x)| *y = (x - mean) * inv);
        });
        Ok((CpuStorage::F32(y), l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s: &candle_core::CudaStorage, l: &Layout) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        crate::cuda::normalize_rows((s, l), self.eps)
    }

    fn bwd(&self, arg: &Tensor, res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let g = grad.contiguous()?;
        Ok(Some(arg.apply_op3_no_bwd(res, &g, &NormalizeRowsGrad { eps: self.eps })?))
    }
}

/// `dx = inv · (g − mean(g) − y · mean(g·y))` per row, from `x`, `y` and `g`.
struct NormalizeRowsGrad {
    eps: f32,
}

impl candle_core::CustomOp3 for NormalizeRowsGrad {
    fn name(&self) -> &'static str {
        "laya-normalize-rows-grad"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, r, d) = rows(s1, l1, "input")?;
        let (y, g) = (cpu_f32(s2, l2, "output")?, cpu_f32(s3, l3, "gradient")?);
        if y.len() != r * d || g.len() != r * d {
            return Err(candle_core::Error::Msg("normalize rows: gradient of the wrong size".into()));
        }
        let mut dx = vec![0f32; x.len()];
        dx.par_chunks_exact_mut(d).zip(x.par_chunks_exact(d)).zip(y.par_chunks_exact(d)).zip(g.par_chunks_exact(d)).for_each(
            |(((dr, xr), yr), gr)| {
                let (_, inv) = row_stats(xr, self.eps);
                let n = d as f32;
                let gm = gr.iter().sum::<f32>() / n;
                let gym = gr.iter().zip(yr).map(|(&g, &y)| g * y).sum::<f32>() / n;
                for ((o, &g), &y) in dr.iter_mut().zip(gr).zip(yr) {
                    *o = inv * (g - gm - y * gym);
                }
            },
        );
        Ok((CpuStorage::F32(dx), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        crate::cuda::normalize_rows_grad((s1, l1), (s2, l2), (s3, l3), self.eps)
    }
}

/// Normalises every row of a `[R, d]` tensor to zero mean and unit (biased) variance,
/// differentiable.
///
/// ```
/// use candle_core::{Device, Tensor};
/// let x = Tensor::new(&[[1f32, 3.0], [2.0, 2.0]], &Device::Cpu)?;
/// let y = laya_train::normalize_rows(&x, 0.0)?.to_vec2::<f32>()?;
/// assert_eq!(y[0], vec![-1.0, 1.0]);
/// # Ok::<(), candle_core::Error>(())
/// ```
pub fn normalize_rows(x: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    if !super::has_kernels(x.device()) {
        return super::composed::normalize_rows(x, eps);
    }
    x.contiguous()?.apply_op1(NormalizeRows { eps: eps as f32 })
}

/// Softmax over the last dimension of a contiguous tensor, one pass forward and one backward
/// (`dx = y · (g − Σ g·y)` per row) instead of the composed form's five broadcast ops.
struct SoftmaxRows;

impl candle_core::CustomOp1 for SoftmaxRows {
    fn name(&self) -> &'static str {
        "laya-softmax-rows"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = cpu_f32(s, l, "input")?;
        let d = l.shape().dims().last().copied().unwrap_or(1).max(1);
        let mut y = vec![0f32; x.len()];
        y.par_chunks_mut(d * 64).zip(x.par_chunks(d * 64)).for_each(|(yb, xb)| {
            for (yr, xr) in yb.chunks_exact_mut(d).zip(xb.chunks_exact(d)) {
                let m = xr.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0.0;
                for (y, &x) in yr.iter_mut().zip(xr) {
                    *y = fast_exp(x - m);
                    sum += *y;
                }
                let inv = 1.0 / sum;
                yr.iter_mut().for_each(|y| *y *= inv);
            }
        });
        Ok((CpuStorage::F32(y), l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s: &candle_core::CudaStorage, l: &Layout) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        crate::cuda::softmax_rows((s, l))
    }

    fn bwd(&self, _arg: &Tensor, res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let g = grad.contiguous()?;
        Ok(Some(res.apply_op2_no_bwd(&g, &SoftmaxRowsGrad)?))
    }
}

struct SoftmaxRowsGrad;

impl CustomOp2 for SoftmaxRowsGrad {
    fn name(&self) -> &'static str {
        "laya-softmax-rows-grad"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (y, g) = (cpu_f32(s1, l1, "output")?, cpu_f32(s2, l2, "gradient")?);
        if y.len() != g.len() {
            return Err(candle_core::Error::Msg("softmax rows: gradient of the wrong size".into()));
        }
        let d = l1.shape().dims().last().copied().unwrap_or(1).max(1);
        let mut dx = vec![0f32; y.len()];
        dx.par_chunks_mut(d * 64).zip(y.par_chunks(d * 64)).zip(g.par_chunks(d * 64)).for_each(|((db, yb), gb)| {
            for ((dr, yr), gr) in db.chunks_exact_mut(d).zip(yb.chunks_exact(d)).zip(gb.chunks_exact(d)) {
                let dot: f32 = yr.iter().zip(gr).map(|(&y, &g)| y * g).sum();
                for ((o, &y), &g) in dr.iter_mut().zip(yr).zip(gr) {
                    *o = y * (g - dot);
                }
            }
        });
        Ok((CpuStorage::F32(dx), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        crate::cuda::softmax_rows_grad((s1, l1), (s2, l2))
    }
}

/// Softmax over the last dimension, differentiable (candle 0.11's `softmax_last_dim` has no
/// backward pass).
///
/// ```
/// use candle_core::{Device, Tensor};
/// let x = Tensor::new(&[[0f32, 0.0], [1.0, 1.0]], &Device::Cpu)?;
/// assert_eq!(laya_train::softmax_rows(&x)?.to_vec2::<f32>()?, vec![vec![0.5, 0.5], vec![0.5, 0.5]]);
/// # Ok::<(), candle_core::Error>(())
/// ```
pub fn softmax_rows(x: &Tensor) -> candle_core::Result<Tensor> {
    if !super::has_kernels(x.device()) {
        return super::composed::softmax_rows(x);
    }
    x.contiguous()?.apply_op1(SoftmaxRows)
}

#[cfg(test)]
mod tests {
    use super::{normalize_rows, softmax_rows};
    use candle_core::{Device, Tensor, Var, D};

    /// The composed reference forms (what model.rs used before the fused ops).
    fn composed_normalize(x: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
        let mean = x.mean_keepdim(D::Minus1)?;
        let xc = x.broadcast_sub(&mean)?;
        let var = xc.sqr()?.mean_keepdim(D::Minus1)?;
        xc.broadcast_mul(&(var + eps)?.sqrt()?.recip()?)
    }

    fn composed_softmax(x: &Tensor) -> candle_core::Result<Tensor> {
        let m = x.max_keepdim(D::Minus1)?.detach();
        let e = x.broadcast_sub(&m)?.exp()?;
        e.broadcast_div(&e.sum_keepdim(D::Minus1)?)
    }

    fn assert_close(a: &Tensor, b: &Tensor, tol: f32, what: &str) {
        let (a, b) = (a.flatten_all().unwrap().to_vec1::<f32>().unwrap(), b.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{what}[{i}]: {x} vs {y}");
        }
    }

    /// Value and gradient (under a random upstream gradient, through a weighted sum) of the
    /// fused ops against the composed forms.
    #[test]
    fn normalize_rows_and_softmax_rows_match_the_composed_forms() {
        let dev = Device::Cpu;
        for (rows, d, seed) in [(7usize, 128usize, 1u64), (33, 16, 2), (1, 3, 3)] {
            let vals: Vec<f32> = (0..rows * d).map(|i| ((i as u64 * 2654435761 + seed * 97) % 1000) as f32 / 100.0 - 5.0).collect();
            let w: Vec<f32> = (0..rows * d).map(|i| (((i as u64 * 40503 + seed) % 17) as f32 - 8.0) / 8.0).collect();
            let x = Var::from_vec(vals, (rows, d), &dev).unwrap();
            let w = Tensor::from_vec(w, (rows, d), &dev).unwrap();
            type Pair = (fn(&Tensor) -> candle_core::Result<Tensor>, fn(&Tensor) -> candle_core::Result<Tensor>, &'static str);
            let pairs: [Pair; 2] =
                [(|x| normalize_rows(x, 1e-5), |x| composed_normalize(x, 1e-5), "normalize"), (softmax_rows, composed_softmax, "softmax")];
            for (fused, composed, what) in pairs {
                let (yf, yc) = (fused(x.as_tensor()).unwrap(), composed(x.as_tensor()).unwrap());
                assert_close(&yf, &yc, 1e-5, what);
                let gf = yf.mul(&w).unwrap().sum_all().unwrap().backward().unwrap();
                let gc = yc.mul(&w).unwrap().sum_all().unwrap().backward().unwrap();
                assert_close(gf.get(&x).unwrap(), gc.get(&x).unwrap(), 1e-4, what);
            }
        }
    }
}
