//! Fused soft-target cross-entropy: one pass forward, one pass backward over the `[B, V]`
//! logits instead of the eight full-size temporaries the primitive chain
//! (max, sub, exp, sum, log, sub, mul, sum) allocates — at V = 20,000 those dominated the loss.

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};

fn rows<'a>(s: &'a CpuStorage, l: &Layout, what: &str) -> candle_core::Result<(&'a [f32], usize, usize)> {
    let (b, v) = l.shape().dims2()?;
    let (start, end) = l
        .contiguous_offsets()
        .ok_or_else(|| candle_core::Error::Msg(format!("soft cross-entropy: {what} must be contiguous")))?;
    match s {
        CpuStorage::F32(x) => Ok((&x[start..end], b, v)),
        _ => Err(candle_core::Error::Msg(format!("soft cross-entropy: {what} must be f32"))),
    }
}

/// Per row: `max` and `log Σ exp(z − max)`.
fn row_lse(z: &[f32]) -> (f32, f32) {
    let m = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let s: f32 = z.iter().map(|&x| (x - m).exp()).sum();
    (m, s.ln())
}

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

    fn bwd(&self, logits: &Tensor, targets: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
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
                *o = (z - shift).exp() * tsum - t;
            }
        }
        Ok((CpuStorage::F32(out), Shape::from((b, v))))
    }
}

/// Cross-entropy of each row of `logits` `[B, V]` against the (unnormalised, possibly all-zero)
/// target weights `targets` `[B, V]`: `−Σ_v t_v · log softmax(z)_v`, shape `[B]`.
/// Differentiable with respect to the logits.
pub fn soft_cross_entropy(logits: &Tensor, targets: &Tensor) -> candle_core::Result<Tensor> {
    logits.contiguous()?.apply_op2(&targets.contiguous()?, SoftCe)
}

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
        let (start, end) = l
            .contiguous_offsets()
            .ok_or_else(|| candle_core::Error::Msg("gelu: input must be contiguous".into()))?;
        let x = match s {
            CpuStorage::F32(x) => &x[start..end],
            _ => return Err(candle_core::Error::Msg("gelu: input must be f32".into())),
        };
        let y = x
            .iter()
            .map(|&x| 0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).tanh()))
            .collect();
        Ok((CpuStorage::F32(y), l.shape().clone()))
    }

    fn bwd(&self, arg: &Tensor, res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let d = arg.apply_op2_no_bwd(res, &GeluTanhGrad)?;
        Ok(Some(d.mul(grad)?))
    }
}

/// d gelu_tanh / dx given `x` and `y = gelu_tanh(x)`.
struct GeluTanhGrad;

impl CustomOp2 for GeluTanhGrad {
    fn name(&self) -> &'static str {
        "laya-gelu-tanh-grad"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let slice = |s: &'_ CpuStorage, l: &Layout| -> candle_core::Result<Vec<f32>> {
            let (a, b) = l
                .contiguous_offsets()
                .ok_or_else(|| candle_core::Error::Msg("gelu grad: inputs must be contiguous".into()))?;
            match s {
                CpuStorage::F32(v) => Ok(v[a..b].to_vec()),
                _ => Err(candle_core::Error::Msg("gelu grad: inputs must be f32".into())),
            }
        };
        let (x, y) = (slice(s1, l1)?, slice(s2, l2)?);
        let d = x
            .iter()
            .zip(&y)
            .map(|(&x, &y)| {
                let t = if x.abs() > 1e-4 { (2.0 * y / x - 1.0).clamp(-1.0, 1.0) } else { (SQRT_2_OVER_PI * x).tanh() };
                let du = SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x);
                0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du
            })
            .collect();
        Ok((CpuStorage::F32(d), l1.shape().clone()))
    }
}

/// `gelu_tanh(x)` elementwise, differentiable (see [`GeluTanh`] for why it is not candle's).
pub fn gelu_tanh(x: &Tensor) -> candle_core::Result<Tensor> {
    x.contiguous()?.apply_op1(GeluTanh)
}
