//! The factorised word head's ops (`laya.lexicon.word_class`, docs/format.md §3 step 5): the
//! class of every word, class sums of the targets, the softmax within each class and the
//! within-class part of the loss.

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::fastmath::fast_exp;
use super::losses::{head_bwd, head_grad, head_inputs, head_rows, take_saved};
use super::{cpu_f32, rows};

/// The classes of a factorised word head (`laya.lexicon.word_class`, docs/format.md §3 step 5),
/// with each class's words listed once so that the per-row loops of
/// [`within_class_soft_cross_entropy`] and [`class_log_softmax`] touch only the classes they need.
///
/// ```
/// let c = laya_train::WordClasses::new(&[1, 0, 1, 1]);
/// assert_eq!((c.count(), c.members(0), c.members(1)), (2, &[1u32][..], &[0u32, 2, 3][..]));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WordClasses {
    class_of: Vec<u32>,
    /// Class `c`'s words are `words[offsets[c]..offsets[c + 1]]`, ascending.
    offsets: Vec<usize>,
    words: Vec<u32>,
    #[cfg(feature = "cuda")]
    pub(crate) on_gpu: crate::cuda::OnGpu,
}

impl WordClasses {
    /// From the class of each word (classes `0..K`; an empty class simply has no members).
    pub fn new(class_of: &[u32]) -> Self {
        let k = class_of.iter().max().map_or(0, |&m| m as usize + 1);
        let (offsets, words) = laya_format::class_members(class_of, k);
        WordClasses {
            class_of: class_of.to_vec(),
            offsets,
            words,
            #[cfg(feature = "cuda")]
            on_gpu: Default::default(),
        }
    }

    /// `K`.
    pub fn count(&self) -> usize {
        self.offsets.len() - 1
    }

    /// The class of each word.
    pub fn class_of(&self) -> &[u32] {
        &self.class_of
    }

    /// The words of class `c`, ascending.
    pub fn members(&self, c: usize) -> &[u32] {
        &self.words[self.offsets[c]..self.offsets[c + 1]]
    }

    /// Every class's words, in class order: class `c`'s are `words[offsets[c]..offsets[c + 1]]`.
    #[cfg(feature = "cuda")]
    pub(crate) fn members_table(&self) -> (&[usize], &[u32]) {
        (&self.offsets, &self.words)
    }

    /// Per class of a target row `t` `[V]` with mass: `(class, T_c = Σ_{w∈c} t_w)`, in order of
    /// first appearance. A row's targets are a handful of shown words, so a linear search beats
    /// a `[K]` scratch vector per row.
    fn active(&self, t: &[f32]) -> Vec<(u32, f32)> {
        let mut out: Vec<(u32, f32)> = Vec::new();
        for (w, &x) in t.iter().enumerate() {
            if x != 0.0 {
                let c = self.class_of[w];
                match out.iter_mut().find(|(k, _)| *k == c) {
                    Some(e) => e.1 += x,
                    None => out.push((c, x)),
                }
            }
        }
        out
    }

    /// `max` and `log Σ exp(x_w + b_w − max)` over the words of class `c` (`b` empty: no bias).
    fn lse(&self, c: usize, x: &[f32], b: &[f32]) -> f32 {
        let at = |w: u32| x[w as usize] + b.get(w as usize).copied().unwrap_or(0.0);
        let ws = self.members(c);
        let m = ws.iter().map(|&w| at(w)).fold(f32::NEG_INFINITY, f32::max);
        m + ws.iter().map(|&w| fast_exp(at(w) - m)).sum::<f32>().ln()
    }
}

/// Within-class part of the factorised word loss, with the word head's bias fused (see
/// [`within_class_soft_cross_entropy`]). The forward keeps, per row, each target class's mass
/// and log-normaliser for the backward.
struct WithinClassCe {
    classes: std::sync::Arc<WordClasses>,
    /// Per row: `(class, T_c, lse_c)` of the classes with target mass.
    saved: std::sync::Mutex<Vec<Vec<(u32, f32, f32)>>>,
}

impl candle_core::CustomOp3 for WithinClassCe {
    fn name(&self) -> &'static str {
        "laya-within-class-soft-cross-entropy"
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
        if self.classes.class_of.len() != v {
            return Err(candle_core::Error::Msg(format!(
                "within-class cross-entropy: {v} logits, {} classed words",
                self.classes.class_of.len()
            )));
        }
        head_rows(x, t, v, &self.saved, |xr, tr| {
            let act: Vec<(u32, f32, f32)> =
                self.classes.active(tr).into_iter().map(|(c, tc)| (c, tc, self.classes.lse(c as usize, xr, b))).collect();
            // Σ_w t_w·(lse_{κ(w)} − x_w − b_w) = Σ_c T_c·lse_c − Σ_w t_w·(x_w + b_w).
            let loss = act.iter().map(|&(_, tc, lse)| tc * lse).sum::<f32>()
                - xr.iter().zip(b).zip(tr).filter(|(_, &t)| t != 0.0).map(|((&x, &b), &t)| t * (x + b)).sum::<f32>();
            (loss, act)
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
        let saved = take_saved(&self.saved)?;
        head_bwd(logits, bias, targets, grad, |scale| WithinClassCeGrad { classes: self.classes.clone(), scale, saved })
    }
}

/// `∂loss/∂x_w = (T_c·softmax_c(x + b)_w − t_w) · scale_row` for `w` in a class `c` with target
/// mass, 0 elsewhere.
struct WithinClassCeGrad {
    classes: std::sync::Arc<WordClasses>,
    scale: Vec<f32>,
    /// The forward's per-row classes; empty (a second backward through the same node) means
    /// compute them again.
    saved: Vec<Vec<(u32, f32, f32)>>,
}

impl candle_core::CustomOp3 for WithinClassCeGrad {
    fn name(&self) -> &'static str {
        "laya-within-class-soft-cross-entropy-grad"
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
        head_grad(inputs, &self.scale, self.saved.len(), "within-class cross-entropy", |r, orow, xr, b, tr, s| {
            let act = match self.saved.get(r) {
                Some(a) => a.clone(),
                None => self.classes.active(tr).into_iter().map(|(c, tc)| (c, tc, self.classes.lse(c as usize, xr, b))).collect(),
            };
            for (c, tc, lse) in act {
                for &w in self.classes.members(c as usize) {
                    let w = w as usize;
                    orow[w] = (tc * fast_exp(xr[w] + b[w] - lse) - tr[w]) * s;
                }
            }
        })
    }
}

/// The within-class part of a factorised word head's soft cross-entropy, per row of `x`
/// `[B, V]` (word logits before the bias `b` `[V]`) against target weights `t` `[B, V]`:
/// `Σ_c Σ_{w∈c} t_w·(lse_c(x + b) − x_w − b_w)`, shape `[B]`, where `lse_c` is the
/// log-sum-exp over class `c`'s words. Added to the class cross-entropy against
/// [`class_sums`] it is `−Σ_w t_w · log P(w)` with `P(w) = P(κ(w)) · softmax_{κ(w)}(x + b)_w`.
/// Differentiable in `x` and `b`; only the classes with target mass are visited, per row.
///
/// ```
/// use candle_core::{Device, Tensor};
/// use laya_train::{class_log_softmax, soft_cross_entropy, within_class_soft_cross_entropy, WordClasses};
/// let dev = Device::Cpu;
/// let classes = std::sync::Arc::new(WordClasses::new(&[0, 1, 0]));
/// let x = Tensor::new(&[[1f32, 2.0, 3.0]], &dev).unwrap();
/// let b = Tensor::new(&[0f32, 0.0, 0.0], &dev).unwrap();
/// let t = Tensor::new(&[[0.5f32, 0.0, 0.5]], &dev).unwrap();
/// let got: Vec<f32> = within_class_soft_cross_entropy(&x, &b, &t, &classes).unwrap().to_vec1().unwrap();
/// // Class 0 is words 0 and 2: −½·log σ(1−3) − ½·log σ(3−1).
/// let s = |v: f32| 1.0 / (1.0 + (-v).exp());
/// assert!((got[0] - (-0.5 * s(-2.0).ln() - 0.5 * s(2.0).ln())).abs() < 1e-5);
/// ```
pub fn within_class_soft_cross_entropy(
    x: &Tensor,
    b: &Tensor,
    t: &Tensor,
    classes: &std::sync::Arc<WordClasses>,
) -> candle_core::Result<Tensor> {
    if !x.device().is_cpu() {
        return super::composed::within_class_soft_cross_entropy(x, b, t, classes);
    }
    let op = WithinClassCe { classes: classes.clone(), saved: Default::default() };
    x.contiguous()?.apply_op3(&b.contiguous()?, &t.contiguous()?, op)
}

/// Per-class sums of a `[B, V]` tensor: `[B, K]` with `T_c = Σ_{w∈c} t_w` (no gradient).
struct ClassSums(std::sync::Arc<WordClasses>);

impl candle_core::CustomOp1 for ClassSums {
    fn name(&self) -> &'static str {
        "laya-class-sums"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (t, b, v) = rows(s, l, "targets")?;
        let k = self.0.count();
        if self.0.class_of.len() != v {
            return Err(candle_core::Error::Msg(format!("class sums: {v} columns, {} classed words", self.0.class_of.len())));
        }
        let mut out = vec![0f32; b * k];
        for (orow, tr) in out.chunks_exact_mut(k).zip(t.chunks_exact(v)) {
            for (&x, &c) in tr.iter().zip(&self.0.class_of) {
                orow[c as usize] += x;
            }
        }
        Ok((CpuStorage::F32(out), Shape::from((b, k))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s: &candle_core::CudaStorage, l: &Layout) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        crate::cuda::class_sums(&self.0, s, l)
    }
}

/// The class targets `T_c = Σ_{w∈c} t_w` `[B, K]` of word targets `t` `[B, V]` (not differentiable).
pub fn class_sums(t: &Tensor, classes: &std::sync::Arc<WordClasses>) -> candle_core::Result<Tensor> {
    t.contiguous()?.apply_op1_no_bwd(&ClassSums(classes.clone()))
}

/// Log-softmax within each class: `y_w = x_w − lse_{κ(w)}(x)` per row of `[B, V]`.
struct ClassLogSoftmax(std::sync::Arc<WordClasses>);

impl candle_core::CustomOp1 for ClassLogSoftmax {
    fn name(&self) -> &'static str {
        "laya-class-log-softmax"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, _, v) = rows(s, l, "logits")?;
        if self.0.class_of.len() != v {
            return Err(candle_core::Error::Msg(format!("class log-softmax: {v} logits, {} classed words", self.0.class_of.len())));
        }
        let mut y = vec![0f32; x.len()];
        y.par_chunks_exact_mut(v).zip(x.par_chunks_exact(v)).for_each(|(yr, xr)| {
            for c in 0..self.0.count() {
                let lse = self.0.lse(c, xr, &[]);
                for &w in self.0.members(c) {
                    yr[w as usize] = xr[w as usize] - lse;
                }
            }
        });
        Ok((CpuStorage::F32(y), l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s: &candle_core::CudaStorage, l: &Layout) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        crate::cuda::class_log_softmax(&self.0, s, l)
    }

    fn bwd(&self, _arg: &Tensor, res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(res.apply_op2_no_bwd(&grad.contiguous()?, &ClassLogSoftmaxGrad(self.0.clone()))?))
    }
}

/// `dx_w = g_w − exp(y_w) · Σ_{w'∈κ(w)} g_w'` from the output `y` and the gradient `g`.
struct ClassLogSoftmaxGrad(std::sync::Arc<WordClasses>);

impl CustomOp2 for ClassLogSoftmaxGrad {
    fn name(&self) -> &'static str {
        "laya-class-log-softmax-grad"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (y, _, v) = rows(s1, l1, "output")?;
        let g = cpu_f32(s2, l2, "gradient")?;
        if g.len() != y.len() {
            return Err(candle_core::Error::Msg("class log-softmax: gradient of the wrong size".into()));
        }
        let mut dx = vec![0f32; y.len()];
        dx.par_chunks_exact_mut(v).zip(y.par_chunks_exact(v)).zip(g.par_chunks_exact(v)).for_each(|((dr, yr), gr)| {
            for c in 0..self.0.count() {
                let ws = self.0.members(c);
                let gs: f32 = ws.iter().map(|&w| gr[w as usize]).sum();
                for &w in ws {
                    let w = w as usize;
                    dr[w] = gr[w] - fast_exp(yr[w]) * gs;
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
        crate::cuda::class_log_softmax_grad(&self.0, s1, l1, s2, l2)
    }
}

/// Log-softmax over each class's words, per row of `x` `[B, V]`: `x_w − lse_{κ(w)}(x)`.
/// Differentiable. With the class log-probabilities gathered per word it gives the factorised
/// head's `log P(w)` (see `LayaNet::forward`).
///
/// ```
/// use candle_core::{Device, Tensor};
/// let classes = std::sync::Arc::new(laya_train::WordClasses::new(&[0, 1, 0]));
/// let x = Tensor::new(&[[0f32, 5.0, 0.0]], &Device::Cpu).unwrap();
/// let y: Vec<Vec<f32>> = laya_train::class_log_softmax(&x, &classes).unwrap().to_vec2().unwrap();
/// assert_eq!(y[0][1], 0.0); // the only word of its class
/// assert!((y[0][0] - 0.5f32.ln()).abs() < 1e-6);
/// ```
pub fn class_log_softmax(x: &Tensor, classes: &std::sync::Arc<WordClasses>) -> candle_core::Result<Tensor> {
    x.contiguous()?.apply_op1(ClassLogSoftmax(classes.clone()))
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor, Var};

    /// A small random problem for the factorised loss: logits `x` `[B, V]`, bias `b` `[V]`,
    /// class logits `y` `[B, K]`, targets `t` `[B, V]` (row 1 all zero, so no word target; the
    /// others spread over two or three classes, one class never has mass) and the class map.
    #[allow(clippy::type_complexity)]
    fn factorised_problem() -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>, Vec<u32>, usize, usize, usize) {
        let (b, v, k) = (4usize, 23usize, 5usize);
        let class_of: Vec<u32> = (0..v).map(|w| [0u32, 1, 2, 3, 4, 1, 1, 2][w % 8]).collect();
        let r = |i: usize, s: u64| ((((i as u64 + 1) * 2654435761 + s * 40503) % 10007) as f64 / 10007.0 - 0.5) * 6.0;
        let x: Vec<f64> = (0..b * v).map(|i| r(i, 1)).collect();
        let bias: Vec<f64> = (0..v).map(|i| r(i, 2) * 0.5).collect();
        let y: Vec<f64> = (0..b * k).map(|i| r(i, 3)).collect();
        let mut t = vec![0f64; b * v];
        for (row, words) in [(0usize, &[(1usize, 0.6), (2, 0.2), (9, 0.2)][..]), (2, &[(5, 3.0)]), (3, &[(0, 0.5), (3, 1.5), (11, 1.0)])] {
            for &(w, p) in words {
                t[row * v + w] = p;
            }
        }
        assert!(class_of.iter().zip(&t[..v]).all(|(&c, &p)| c != 4 || p == 0.0));
        (x, bias, y, t, class_of, b, v, k)
    }

    /// `−Σ_w t_w · log P(w)` per row in f64, from the definition (docs/format.md §3 step 5).
    #[allow(clippy::too_many_arguments)]
    fn naive_factorised_loss(x: &[f64], bias: &[f64], y: &[f64], t: &[f64], class_of: &[u32], b: usize, v: usize, k: usize) -> Vec<f64> {
        let lse = |vals: &mut dyn Iterator<Item = f64>| {
            let vals: Vec<f64> = vals.collect();
            let m = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            m + vals.iter().map(|&z| (z - m).exp()).sum::<f64>().ln()
        };
        (0..b)
            .map(|r| {
                let yr = &y[r * k..(r + 1) * k];
                let class_lse = lse(&mut yr.iter().copied());
                (0..v)
                    .filter(|&w| t[r * v + w] != 0.0)
                    .map(|w| {
                        let c = class_of[w];
                        let within = lse(&mut (0..v).filter(|&u| class_of[u] == c).map(|u| x[r * v + u] + bias[u]));
                        let log_p = (yr[c as usize] - class_lse) + (x[r * v + w] + bias[w] - within);
                        -t[r * v + w] * log_p
                    })
                    .sum()
            })
            .collect()
    }

    /// Value and gradient (x, bias, class logits; under per-row weights, as a batch mean gives)
    /// of the fused factorised loss against the f64 definition and its central differences;
    /// and `class_log_softmax` + the gathered class log-probabilities equal `log P(w)`.
    #[test]
    fn factorised_loss_matches_the_f64_definition_and_its_gradient() {
        use super::super::soft_cross_entropy;
        use super::{class_log_softmax, class_sums, within_class_soft_cross_entropy, WordClasses};
        let (x, bias, y, t, class_of, b, v, k) = factorised_problem();
        let dev = Device::Cpu;
        let f32s = |a: &[f64]| a.iter().map(|&z| z as f32).collect::<Vec<f32>>();
        let classes = std::sync::Arc::new(WordClasses::new(&class_of));
        let xv = Var::from_vec(f32s(&x), (b, v), &dev).unwrap();
        let bv = Var::from_vec(f32s(&bias), v, &dev).unwrap();
        let yv = Var::from_vec(f32s(&y), (b, k), &dev).unwrap();
        let tt = Tensor::from_vec(f32s(&t), (b, v), &dev).unwrap();
        let weights = [0.5f64, 2.0, 1.0, 0.25];
        let wt = Tensor::from_vec(f32s(&weights), b, &dev).unwrap();
        let loss = (soft_cross_entropy(yv.as_tensor(), &class_sums(&tt, &classes).unwrap()).unwrap()
            + within_class_soft_cross_entropy(xv.as_tensor(), bv.as_tensor(), &tt, &classes).unwrap())
        .unwrap();
        let want = naive_factorised_loss(&x, &bias, &y, &t, &class_of, b, v, k);
        let got: Vec<f32> = loss.to_vec1().unwrap();
        for (r, (&g, &w)) in got.iter().zip(&want).enumerate() {
            assert!((g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()), "row {r}: {g} vs {w}");
        }
        assert_eq!(got[1], 0.0);
        let grads = loss.mul(&wt).unwrap().sum_all().unwrap().backward().unwrap();
        let objective = |x: &[f64], bias: &[f64], y: &[f64]| -> f64 {
            naive_factorised_loss(x, bias, y, &t, &class_of, b, v, k).iter().zip(&weights).map(|(l, w)| l * w).sum()
        };
        let h = 1e-5;
        let check = |grads: &candle_core::backprop::GradStore, name: &str, var: &Var, base: &[f64], perturb: &dyn Fn(&[f64]) -> f64| {
            let g: Vec<f32> = grads.get(var.as_tensor()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            for i in 0..base.len() {
                let (mut up, mut down) = (base.to_vec(), base.to_vec());
                up[i] += h;
                down[i] -= h;
                let fd = (perturb(&up) - perturb(&down)) / (2.0 * h);
                assert!((g[i] as f64 - fd).abs() <= 1e-4 * (1.0 + fd.abs()), "d/d{name}[{i}]: {} vs {fd}", g[i]);
            }
        };
        check(&grads, "x", &xv, &x, &|p| objective(p, &bias, &y));
        check(&grads, "bias", &bv, &bias, &|p| objective(&x, p, &y));
        check(&grads, "class logits", &yv, &y, &|p| objective(&x, &bias, p));
        // A word of a class with no target mass in its row gets no gradient (row 2: class 1 only).
        let gx: Vec<f32> = grads.get(xv.as_tensor()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        assert!((0..v).filter(|&w| class_of[w] != 1).all(|w| gx[2 * v + w] == 0.0));

        // log P(w) through class_log_softmax: soft cross-entropy against it is the same loss.
        let class_lp = crate::model::log_softmax_last(yv.as_tensor()).unwrap();
        let idx = Tensor::from_slice(&class_of, v, &dev).unwrap();
        let biased = xv.as_tensor().broadcast_add(bv.as_tensor()).unwrap();
        let log_p = (class_lp.index_select(&idx, 1).unwrap() + class_log_softmax(&biased, &classes).unwrap()).unwrap();
        let dense = soft_cross_entropy(&log_p, &tt).unwrap();
        let dense_v: Vec<f32> = dense.to_vec1().unwrap();
        for (r, (&g, &w)) in dense_v.iter().zip(&want).enumerate() {
            assert!((g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()), "dense row {r}: {g} vs {w}");
        }
        let grads = dense.mul(&wt).unwrap().sum_all().unwrap().backward().unwrap();
        check(&grads, "x (dense)", &xv, &x, &|p| objective(p, &bias, &y));
        check(&grads, "class logits (dense)", &yv, &y, &|p| objective(&x, &bias, p));
    }
}
