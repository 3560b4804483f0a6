//! The same ops as the fused CPU passes, composed from candle's primitives, whose backward
//! passes candle derives. They run on any device: a GPU takes these (each primitive is one of
//! candle's CUDA kernels, and on a GPU the temporaries cost bandwidth, not the allocator and
//! cache misses that made them slow on the CPU), and the tests below pin every fused CPU op to
//! its twin here, value and gradient.
//!
//! The class ops of the factorised head are the exception: a per-class log-sum-exp has no
//! composition that is both exact and affordable (a per-row maximum underflows classes whose
//! logits sit far below the row's best, and a padded `[B, K, max class size]` gather is too
//! large), and candle's `index_add` runs one thread per output column over all V words, so
//! `ClassLogSoftmax` and `ClassSums` have CUDA kernels of their own (`crate::cuda`).

use candle_core::{Tensor, D};

use super::WordClasses;

/// `−Σ_v t_v · log softmax(z)_v` per row, shape `[B]`.
pub(crate) fn soft_cross_entropy(logits: &Tensor, targets: &Tensor) -> candle_core::Result<Tensor> {
    (targets * crate::model::log_softmax_last(logits)?)?.sum(D::Minus1)?.neg()
}

/// [`soft_cross_entropy`] of `logits + bias`.
pub(crate) fn biased_soft_cross_entropy(logits: &Tensor, bias: &Tensor, targets: &Tensor) -> candle_core::Result<Tensor> {
    soft_cross_entropy(&logits.broadcast_add(bias)?, targets)
}

/// `Σ_w t_w·(lse_{κ(w)}(x + b) − x_w − b_w)` per row: `−Σ_w t_w · class_log_softmax(x + b)_w`.
pub(crate) fn within_class_soft_cross_entropy(
    x: &Tensor,
    b: &Tensor,
    t: &Tensor,
    classes: &std::sync::Arc<WordClasses>,
) -> candle_core::Result<Tensor> {
    let lp = super::class_log_softmax(&x.broadcast_add(b)?, classes)?;
    (t * lp)?.sum(D::Minus1)?.neg()
}

/// `[B, K]` class sums of `[B, V]` targets: every column added into its class's column (the
/// GPU has a kernel: candle's `index_add` walks the V columns serially per row).
#[cfg(test)]
pub(crate) fn class_sums(t: &Tensor, classes: &std::sync::Arc<WordClasses>) -> candle_core::Result<Tensor> {
    let (b, v) = t.dims2()?;
    if classes.class_of().len() != v {
        candle_core::bail!("class sums: {v} columns, {} classed words", classes.class_of().len())
    }
    let ids = Tensor::from_slice(classes.class_of(), v, t.device())?;
    Tensor::zeros((b, classes.count()), t.dtype(), t.device())?.index_add(&ids, &t.detach(), 1)
}

/// `gelu_tanh` (format.md §3): candle's `gelu` is the tanh approximation.
pub(crate) fn gelu_tanh(x: &Tensor) -> candle_core::Result<Tensor> {
    x.gelu()
}

/// `x + b`, `b` `[F]` broadcast over the rows.
pub(crate) fn add_columns(x: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
    x.broadcast_add(b)
}

/// `x·w + b`, `w` and `b` `[F]` broadcast over the rows.
pub(crate) fn scale_shift_columns(x: &Tensor, w: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
    x.broadcast_mul(w)?.broadcast_add(b)
}

/// `(x − mean) / sqrt(var + eps)` per row, the biased variance.
pub(crate) fn normalize_rows(x: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    let xc = x.broadcast_sub(&x.mean_keepdim(D::Minus1)?)?;
    let var = xc.sqr()?.mean_keepdim(D::Minus1)?;
    xc.broadcast_div(&(var + eps)?.sqrt()?)
}

/// Softmax over the last dimension.
pub(crate) fn softmax_rows(x: &Tensor) -> candle_core::Result<Tensor> {
    let m = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&m)?.exp()?;
    e.broadcast_div(&e.sum_keepdim(D::Minus1)?)
}

#[cfg(test)]
mod tests {
    //! Every fused CPU op against its composed twin: the same values and, through candle's
    //! autograd, the same gradients.
    use super::*;
    use crate::rng::Rng;
    use candle_core::{Device, Var};

    fn random(shape: (usize, usize), seed: u64, scale: f64) -> Var {
        let mut rng = Rng::new(seed, 3);
        let n = shape.0 * shape.1;
        let data: Vec<f32> = (0..n).map(|_| (rng.normal() * scale) as f32).collect();
        Var::from_tensor(&Tensor::from_vec(data, shape, &Device::Cpu).unwrap()).unwrap()
    }

    /// Soft targets with a few non-zero weights per row, one row all zero.
    fn targets(b: usize, v: usize, seed: u64) -> Tensor {
        let mut rng = Rng::new(seed, 5);
        let mut t = vec![0f32; b * v];
        for r in 1..b {
            for _ in 0..3 {
                t[r * v + rng.below(v)] += (rng.uniform() * 2.0) as f32;
            }
        }
        Tensor::from_vec(t, (b, v), &Device::Cpu).unwrap()
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
    }

    /// Value of `loss(fused)` and `loss(composed)`, and the gradient of both with respect to
    /// every `vars`, agree to `tol`.
    fn same(vars: &[&Var], fused: impl Fn() -> Tensor, composed: impl Fn() -> Tensor, tol: f32) {
        let (yf, yc) = (fused(), composed());
        assert!(max_diff(&yf, &yc) < tol, "values differ by {}", max_diff(&yf, &yc));
        // A weighted sum, so that every output element's gradient is different.
        let w = random((1, yf.elem_count()), 99, 1.0).as_tensor().reshape(yf.shape()).unwrap();
        let gf = (&yf * &w).unwrap().sum_all().unwrap().backward().unwrap();
        let gc = (&yc * &w).unwrap().sum_all().unwrap().backward().unwrap();
        for (i, v) in vars.iter().enumerate() {
            let (a, b) = (gf.get(v.as_tensor()).unwrap(), gc.get(v.as_tensor()).unwrap());
            assert!(max_diff(a, b) < tol, "gradient {i} differs by {}", max_diff(a, b));
        }
    }

    #[test]
    fn the_losses_match_their_composed_twins() {
        let (x, b, t) = (random((5, 37), 1, 3.0), random((1, 37), 2, 1.0), targets(5, 37, 3));
        let bias = b.as_tensor().flatten_all().unwrap();
        same(&[&x], || super::super::soft_cross_entropy(&x, &t).unwrap(), || soft_cross_entropy(&x, &t).unwrap(), 1e-4);
        let bv = Var::from_tensor(&bias).unwrap();
        same(
            &[&x, &bv],
            || super::super::biased_soft_cross_entropy(&x, &bv, &t).unwrap(),
            || biased_soft_cross_entropy(&x, &bv, &t).unwrap(),
            1e-4,
        );
        let classes = std::sync::Arc::new(WordClasses::new(&(0..37u32).map(|w| (w * 7) % 5).collect::<Vec<_>>()));
        same(
            &[&x, &bv],
            || super::super::within_class_soft_cross_entropy(&x, &bv, &t, &classes).unwrap(),
            || within_class_soft_cross_entropy(&x, &bv, &t, &classes).unwrap(),
            1e-4,
        );
        let fused = super::super::class_sums(&t, &classes).unwrap();
        assert!(max_diff(&fused, &class_sums(&t, &classes).unwrap()) < 1e-6);
    }

    #[test]
    fn the_layers_match_their_composed_twins() {
        let (x, w, b) = (random((6, 16), 7, 2.0), random((1, 16), 8, 1.0), random((1, 16), 9, 1.0));
        let (w, b) = (Var::from_tensor(&w.flatten_all().unwrap()).unwrap(), Var::from_tensor(&b.flatten_all().unwrap()).unwrap());
        same(&[&x], || super::super::gelu_tanh(&x).unwrap(), || gelu_tanh(&x).unwrap(), 1e-4);
        same(&[&x, &b], || super::super::add_columns(&x, &b).unwrap(), || add_columns(&x, &b).unwrap(), 1e-5);
        same(&[&x, &w, &b], || super::super::scale_shift_columns(&x, &w, &b).unwrap(), || scale_shift_columns(&x, &w, &b).unwrap(), 1e-5);
        same(&[&x], || super::super::normalize_rows(&x, 1e-5).unwrap(), || normalize_rows(&x, 1e-5).unwrap(), 1e-4);
        same(&[&x], || super::super::softmax_rows(&x).unwrap(), || softmax_rows(&x).unwrap(), 1e-5);
    }
}
