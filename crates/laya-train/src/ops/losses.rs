//! Soft-target cross-entropies: one pass forward, one pass backward over the `[B, V]` logits
//! instead of the eight full-size temporaries the primitive chain (max, sub, exp, sum, log, sub,
//! mul, sum) allocates — at V = 20,000 those dominated the loss.

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::fastmath::{biased_row_lse, fast_exp, row_lse};
use super::{cpu_f32, rows, ColumnSum};

struct SoftCe;

impl CustomOp2 for SoftCe {
    fn name(&self) -> &'static str {
        "laya-soft-cross-entropy"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (z, b, v) = rows(s1, l1, "logits")?;
        let (t, b2, v2) = rows(s2, l2, "targets")?;
        if (b, v) != (b2, v2) {
            return Err(candle_core::Error::Msg("soft cross-entropy: logits and targets differ in shape".into()));
        }
        let mut out = Vec::with_capacity(b);
        for (zr, tr) in z.chunks_exact(v).zip(t.chunks_exact(v)) {
            let (m, lse) = row_lse(zr);
            // −Σ t·(z − m − lse)
            let loss: f32 = zr.iter().zip(tr).filter(|(_, &t)| t != 0.0).map(|(&z, &t)| -t * (z - m - lse)).sum();
            out.push(loss);
        }
        Ok((CpuStorage::F32(out), Shape::from(b)))
    }

    fn bwd(
        &self,
        logits: &Tensor,
        targets: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let g = logits.apply_op2_no_bwd(targets, &SoftCeGrad)?;
        Ok((Some(g.broadcast_mul(&grad.unsqueeze(1)?)?), None))
    }
}

/// d loss / d z = softmax(z)·Σt − t (per row).
struct SoftCeGrad;

impl CustomOp2 for SoftCeGrad {
    fn name(&self) -> &'static str {
        "laya-soft-cross-entropy-grad"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (z, b, v) = rows(s1, l1, "logits")?;
        let (t, _, _) = rows(s2, l2, "targets")?;
        let mut out = vec![0f32; b * v];
        for ((zr, tr), orow) in z.chunks_exact(v).zip(t.chunks_exact(v)).zip(out.chunks_exact_mut(v)) {
            let (m, lse) = row_lse(zr);
            let tsum: f32 = tr.iter().sum();
            let shift = m + lse;
            for ((o, &z), &t) in orow.iter_mut().zip(zr).zip(tr) {
                *o = fast_exp(z - shift) * tsum - t;
            }
        }
        Ok((CpuStorage::F32(out), Shape::from((b, v))))
    }
}

/// Cross-entropy of each row of `logits` `[B, V]` against the (unnormalised, possibly all-zero)
/// target weights `targets` `[B, V]`: `−Σ_v t_v · log softmax(z)_v`, shape `[B]`.
/// Differentiable with respect to the logits.
pub fn soft_cross_entropy(logits: &Tensor, targets: &Tensor) -> candle_core::Result<Tensor> {
    #[cfg(feature = "cuda")]
    if logits.device().is_cuda() {
        let zero = Tensor::zeros(logits.dim(1)?, logits.dtype(), logits.device())?;
        return gpu::soft_ce(logits, &zero, targets, false);
    }
    if !logits.device().is_cpu() {
        return super::composed::soft_cross_entropy(logits, targets);
    }
    logits.contiguous()?.apply_op2(&targets.contiguous()?, SoftCe)
}

/// Word-head bias add fused into the soft cross-entropy: `−Σ_v t_v · log softmax(x + b)_v` per
/// row of `x` `[B, V]`, with `b` `[V]`.
///
/// Why: on the training path `linear` + [`soft_cross_entropy`] cost two extra `[B, V]` tensors
/// forward (the broadcast bias add) and, backward, a strided column reduction for the bias
/// gradient plus two zero-fill-and-add gradient accumulations of `[B, V]` — at V = 20,000 that
/// was about a third of a training step. Here the bias is added on the fly and its gradient is
/// a contiguous column sum of the logits gradient.
///
/// The forward keeps each row's log-normaliser `max + log Σ exp(x + b − max)` for the backward,
/// which would otherwise make the same two passes over `[B, V]` again.
#[derive(Default)]
struct BiasSoftCe {
    shifts: std::sync::Mutex<Vec<f32>>,
}

/// The inputs of a fused head loss or its gradient, shapes checked: `(rows, V, logits [rows, V],
/// bias [V], targets [rows, V])`.
pub(super) type HeadInputs<'a> = (usize, usize, &'a [f32], &'a [f32], &'a [f32]);

pub(super) fn head_inputs<'a>(
    s1: &'a CpuStorage,
    l1: &Layout,
    s2: &'a CpuStorage,
    l2: &Layout,
    s3: &'a CpuStorage,
    l3: &Layout,
) -> candle_core::Result<HeadInputs<'a>> {
    let (rows, v) = check_shapes(l1, l2, l3)?;
    Ok((rows, v, cpu_f32(s1, l1, "logits")?, cpu_f32(s2, l2, "bias")?, cpu_f32(s3, l3, "targets")?))
}

/// The logits gradient of a fused head loss, `[rows, V]`: zeros, each row then filled in
/// parallel by `row(r, out, logits, bias, targets, scale_r)`. `saved` is how many rows the
/// forward kept state for (0: none, a second backward recomputes it).
pub(super) fn head_grad(
    (rows, v, x, b, t): HeadInputs<'_>,
    scale: &[f32],
    saved: usize,
    what: &str,
    row: impl Fn(usize, &mut [f32], &[f32], &[f32], &[f32], f32) + Sync,
) -> candle_core::Result<(CpuStorage, Shape)> {
    if scale.len() != rows || !(saved == 0 || saved == rows) {
        return Err(candle_core::Error::Msg(format!("{what}: gradient has the wrong length")));
    }
    let mut out = vec![0f32; rows * v];
    out.par_chunks_exact_mut(v)
        .zip(x.par_chunks_exact(v))
        .zip(t.par_chunks_exact(v))
        .zip(scale.par_iter())
        .enumerate()
        .for_each(|(r, (((orow, xr), tr), &s))| row(r, orow, xr, b, tr, s));
    Ok((CpuStorage::F32(out), Shape::from((rows, v))))
}

/// A fused head loss's forward: `row(logits row, targets row)` gives each row's loss and the
/// state its backward needs, kept in `saved`; returns the losses.
pub(super) fn head_rows<S: Send>(
    x: &[f32],
    t: &[f32],
    v: usize,
    saved: &std::sync::Mutex<Vec<S>>,
    row: impl Fn(&[f32], &[f32]) -> (f32, S) + Sync,
) -> candle_core::Result<Vec<f32>> {
    let (out, state): (Vec<f32>, Vec<S>) = x.par_chunks_exact(v).zip(t.par_chunks_exact(v)).map(|(xr, tr)| row(xr, tr)).unzip();
    *saved.lock().map_err(|_| candle_core::Error::Msg("cross-entropy: lock poisoned".into()))? = state;
    Ok(out)
}

/// What [`head_rows`] kept, taken (a second backward finds it empty and recomputes).
pub(super) fn take_saved<S>(saved: &std::sync::Mutex<Vec<S>>) -> candle_core::Result<Vec<S>> {
    Ok(std::mem::take(&mut *saved.lock().map_err(|_| candle_core::Error::Msg("cross-entropy: lock poisoned".into()))?))
}

/// A fused head loss's backward: the logits gradient from the op `grad_op(upstream gradient per
/// row)` and the bias gradient, its column sum; the targets get none.
#[allow(clippy::type_complexity)]
pub(super) fn head_bwd<G: candle_core::CustomOp3>(
    logits: &Tensor,
    bias: &Tensor,
    targets: &Tensor,
    grad: &Tensor,
    grad_op: impl FnOnce(Vec<f32>) -> G,
) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
    let g = logits.apply_op3_no_bwd(bias, targets, &grad_op(grad.to_vec1()?))?;
    let gb = g.apply_op1_no_bwd(&ColumnSum)?;
    Ok((Some(g), Some(gb), None))
}

pub(super) fn check_shapes(lx: &Layout, lb: &Layout, lt: &Layout) -> candle_core::Result<(usize, usize)> {
    let (rows, v) = lx.shape().dims2()?;
    if lb.shape().dims1()? != v || lt.shape().dims2()? != (rows, v) {
        return Err(candle_core::Error::Msg(format!(
            "biased soft cross-entropy: logits {:?}, bias {:?}, targets {:?} do not fit",
            lx.shape(),
            lb.shape(),
            lt.shape()
        )));
    }
    Ok((rows, v))
}

impl candle_core::CustomOp3 for BiasSoftCe {
    fn name(&self) -> &'static str {
        "laya-biased-soft-cross-entropy"
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
        let (rows, v, x, b, t) = head_inputs(s1, l1, s2, l2, s3, l3)?;
        head_rows(x, t, v, &self.shifts, |xr, tr| {
            let (m, lse) = biased_row_lse(xr, b);
            let shift = m + lse;
            let loss: f32 = xr.iter().zip(b).zip(tr).filter(|(_, &t)| t != 0.0).map(|((&x, &b), &t)| -t * (x + b - shift)).sum();
            (loss, shift)
        })
        .map(|out| (CpuStorage::F32(out), Shape::from(rows)))
    }

    fn bwd(
        &self,
        logits: &Tensor,
        bias: &Tensor,
        targets: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let shifts = take_saved(&self.shifts)?;
        head_bwd(logits, bias, targets, grad, |scale| BiasSoftCeGrad { scale, shifts })
    }
}

/// `∂loss/∂x = (softmax(x + b)·Σt − t) · scale_row`.
struct BiasSoftCeGrad {
    scale: Vec<f32>,
    /// Per row, the forward's log-normaliser; empty (a second backward through the same
    /// node) means compute it again.
    shifts: Vec<f32>,
}

impl candle_core::CustomOp3 for BiasSoftCeGrad {
    fn name(&self) -> &'static str {
        "laya-biased-soft-cross-entropy-grad"
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
        let inputs = head_inputs(s1, l1, s2, l2, s3, l3)?;
        head_grad(inputs, &self.scale, self.shifts.len(), "biased soft cross-entropy", |r, orow, xr, b, tr, s| {
            let shift = self.shifts.get(r).copied().unwrap_or_else(|| {
                let (m, lse) = biased_row_lse(xr, b);
                m + lse
            });
            let tsum: f32 = tr.iter().sum();
            for (((o, &x), &b), &t) in orow.iter_mut().zip(xr).zip(b).zip(tr) {
                *o = (fast_exp(x + b - shift) * tsum - t) * s;
            }
        })
    }
}

/// [`soft_cross_entropy`] of `logits + bias` (bias `[V]` broadcast over the rows), shape `[B]`,
/// differentiable with respect to `logits` and `bias`; the targets get no gradient.
///
/// ```
/// use candle_core::{Device, Tensor};
/// use laya_train::{biased_soft_cross_entropy, soft_cross_entropy};
/// let dev = Device::Cpu;
/// let x = Tensor::new(&[[1f32, 2.0, 3.0], [0.5, -1.0, 0.0]], &dev).unwrap();
/// let b = Tensor::new(&[0.1f32, -0.2, 0.3], &dev).unwrap();
/// let t = Tensor::new(&[[0f32, 0.75, 0.25], [1.0, 0.0, 0.0]], &dev).unwrap();
/// let fused: Vec<f32> = biased_soft_cross_entropy(&x, &b, &t).unwrap().to_vec1().unwrap();
/// let plain: Vec<f32> = soft_cross_entropy(&x.broadcast_add(&b).unwrap(), &t).unwrap().to_vec1().unwrap();
/// assert!(fused.iter().zip(&plain).all(|(a, b)| (a - b).abs() < 1e-6));
/// ```
pub fn biased_soft_cross_entropy(logits: &Tensor, bias: &Tensor, targets: &Tensor) -> candle_core::Result<Tensor> {
    #[cfg(feature = "cuda")]
    if logits.device().is_cuda() {
        return gpu::soft_ce(logits, bias, targets, true);
    }
    if !logits.device().is_cpu() {
        return super::composed::biased_soft_cross_entropy(logits, bias, targets);
    }
    logits.contiguous()?.apply_op3(&bias.contiguous()?, &targets.contiguous()?, BiasSoftCe::default())
}

/// The soft cross-entropies on a GPU: one kernel forward (keeping each row's log-normaliser),
/// one backward, with the upstream gradient read on the device.
#[cfg(feature = "cuda")]
mod gpu {
    use std::sync::Mutex;

    use candle_core::cuda_backend::cudarc::driver::CudaSlice;
    use candle_core::{CpuStorage, CudaStorage, CustomOp3, Layout, Shape, Tensor};

    use crate::cuda::{keep, refuse_cpu, soft_ce as ce_kernel, soft_ce_grad, take};

    /// `−Σ t·log softmax(x + b)` per row; with `biased` false the bias is zeros and gets no gradient.
    pub(super) fn soft_ce(x: &Tensor, b: &Tensor, t: &Tensor, biased: bool) -> candle_core::Result<Tensor> {
        x.contiguous()?.apply_op3(&b.contiguous()?, &t.contiguous()?, SoftCe { biased, shifts: Mutex::new(None) })
    }

    struct SoftCe {
        biased: bool,
        /// The forward's log-normalisers, taken by the backward (a second backward recomputes).
        shifts: Mutex<Option<CudaSlice<f32>>>,
    }

    impl CustomOp3 for SoftCe {
        fn name(&self) -> &'static str {
            "laya-soft-ce-cuda"
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
            refuse_cpu(self.name())
        }

        fn cuda_fwd(
            &self,
            s1: &CudaStorage,
            l1: &Layout,
            s2: &CudaStorage,
            l2: &Layout,
            s3: &CudaStorage,
            l3: &Layout,
        ) -> candle_core::Result<(CudaStorage, Shape)> {
            let (loss, shift) = ce_kernel((s1, l1), (s2, l2), (s3, l3))?;
            keep(&self.shifts, shift)?;
            Ok((CudaStorage::wrap_cuda_slice(loss, s1.device.clone()), Shape::from(l1.shape().dims2()?.0)))
        }

        fn bwd(
            &self,
            x: &Tensor,
            b: &Tensor,
            t: &Tensor,
            _res: &Tensor,
            grad: &Tensor,
        ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
            let shifts = take(&self.shifts)?;
            let gx = x.apply_op3_no_bwd(b, t, &Grad { shifts: Mutex::new(shifts), scale: grad.contiguous()? })?;
            let gb = if self.biased { Some(gx.apply_op1_no_bwd(&super::super::ColumnSum)?) } else { None };
            Ok((Some(gx), gb, None))
        }
    }

    struct Grad {
        shifts: Mutex<Option<CudaSlice<f32>>>,
        scale: Tensor,
    }

    impl CustomOp3 for Grad {
        fn name(&self) -> &'static str {
            "laya-soft-ce-cuda-grad"
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
            refuse_cpu(self.name())
        }

        fn cuda_fwd(
            &self,
            s1: &CudaStorage,
            l1: &Layout,
            s2: &CudaStorage,
            l2: &Layout,
            s3: &CudaStorage,
            l3: &Layout,
        ) -> candle_core::Result<(CudaStorage, Shape)> {
            let shift = match take(&self.shifts)? {
                Some(s) => s,
                None => ce_kernel((s1, l1), (s2, l2), (s3, l3))?.1,
            };
            soft_ce_grad((s1, l1), (s2, l2), (s3, l3), &shift, &self.scale)
        }
    }
}
