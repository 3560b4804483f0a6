//! Fused soft-target cross-entropy: one pass forward, one pass backward over the `[B, V]`
//! logits instead of the eight full-size temporaries the primitive chain
//! (max, sub, exp, sum, log, sub, mul, sum) allocates — at V = 20,000 those dominated the loss.

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

fn rows<'a>(s: &'a CpuStorage, l: &Layout, what: &str) -> candle_core::Result<(&'a [f32], usize, usize)> {
    let (b, v) = l.shape().dims2()?;
    Ok((cpu_f32(s, l, what)?, b, v))
}

/// `exp(v)` for the loss and activation loops, written so that they vectorise (libm's `expf`
/// is a scalar call per element and was ~4% of a step, `tanhf` via `expm1f` another 12%).
/// Cody–Waite reduction `v = n·ln2 + r`, |r| ≤ ln2/2, a degree-6 Taylor polynomial for `e^r`
/// (truncation < 1.2e-7 relative) and `2^n` built in the exponent bits. Inputs are clamped to
/// [−87, 88], where `e^v` is a normal f32; below that the result is ~1.6e-38 instead of a
/// smaller value or zero, which no sum of probabilities notices. Relative error ≤ 3e-7
/// (`fast_exp_and_tanh_track_f64` checks it).
#[inline(always)]
pub(crate) fn fast_exp(v: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // 1.5·2^23: adding and subtracting it rounds to the nearest integer without `round`.
    const ROUND: f32 = 12_582_912.0;
    let v = v.clamp(-87.0, 88.0);
    let n = (v * LOG2E + ROUND) - ROUND;
    let r = (v - n * LN2_HI) - n * LN2_LO;
    let p = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    p * scale
}

/// `tanh(u)` from [`fast_exp`]: `sign(u)·(1 − 2 / (e^{2|u|} + 1))`, exact to ~2e-7 absolute.
#[inline(always)]
pub(crate) fn fast_tanh(u: f32) -> f32 {
    // tanh(10) is 1 in f32, and 1 − 2/(e^20 + 1) rounds to it; the clamp keeps e^{2|u|} finite.
    let a = u.abs().min(10.0);
    let t = 1.0 - 2.0 / (fast_exp(2.0 * a) + 1.0);
    t.copysign(u)
}

/// `Σ exp(x_j + b_j − m)`, accumulated in 8 lanes so that the exponentials vectorise.
#[inline(always)]
fn sum_exp_shifted(x: &[f32], b: &[f32], m: f32) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (xs, bs) = (x.chunks_exact(8), b.chunks_exact(8));
    let (xr, br) = (xs.remainder(), bs.remainder());
    for (xc, bc) in xs.zip(bs) {
        for j in 0..8 {
            lanes[j] += fast_exp(xc[j] + bc[j] - m);
        }
    }
    for (&x, &b) in xr.iter().zip(br) {
        lanes[0] += fast_exp(x + b - m);
    }
    lanes.iter().sum()
}

/// Per row: `max` and `log Σ exp(z − max)`.
fn row_lse(z: &[f32]) -> (f32, f32) {
    let m = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    // A zero bias: the same vectorised loop as the biased rows.
    const ZEROS: [f32; 8] = [0.0; 8];
    let mut lanes = [0.0f32; 8];
    let zs = z.chunks_exact(8);
    let rest = zs.remainder();
    for zc in zs {
        lanes.iter_mut().zip(zc).for_each(|(l, &x)| *l += fast_exp(x - m));
    }
    let s = lanes.iter().sum::<f32>() + sum_exp_shifted(rest, &ZEROS[..rest.len()], m);
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
    logits.contiguous()?.apply_op2(&targets.contiguous()?, SoftCe)
}

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
}

impl WordClasses {
    /// From the class of each word (classes `0..K`; an empty class simply has no members).
    pub fn new(class_of: &[u32]) -> Self {
        let k = class_of.iter().max().map_or(0, |&m| m as usize + 1);
        let (offsets, words) = laya_format::class_members(class_of, k);
        WordClasses { class_of: class_of.to_vec(), offsets, words }
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

    fn bwd(&self, arg: &Tensor, res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(arg.apply_op3_no_bwd(res, &grad.contiguous()?, &GeluTanhGrad)?))
    }
}

/// Elements per task of this module's elementwise loops: large enough that a fork costs
/// little against the work, small enough that two to sixteen threads all get some.
const ELEMWISE_CHUNK: usize = 16 * 1024;

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
}

/// `gelu_tanh(x)` elementwise, differentiable (see [`GeluTanh`] for why it is not candle's).
pub fn gelu_tanh(x: &Tensor) -> candle_core::Result<Tensor> {
    x.contiguous()?.apply_op1(GeluTanh)
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

fn cpu_f32<'a>(s: &'a CpuStorage, l: &Layout, what: &str) -> candle_core::Result<&'a [f32]> {
    let (start, end) = l.contiguous_offsets().ok_or_else(|| candle_core::Error::Msg(format!("laya op: {what} must be contiguous")))?;
    match s {
        CpuStorage::F32(x) => Ok(&x[start..end]),
        _ => Err(candle_core::Error::Msg(format!("laya op: {what} must be f32"))),
    }
}

/// Per row: `max(x + b)` and `log Σ exp(x + b − max)`.
fn biased_row_lse(x: &[f32], b: &[f32]) -> (f32, f32) {
    let m = x.iter().zip(b).map(|(&x, &b)| x + b).fold(f32::NEG_INFINITY, f32::max);
    (m, sum_exp_shifted(x, b, m).ln())
}

/// The inputs of a fused head loss or its gradient, shapes checked: `(rows, V, logits [rows, V],
/// bias [V], targets [rows, V])`.
type HeadInputs<'a> = (usize, usize, &'a [f32], &'a [f32], &'a [f32]);

fn head_inputs<'a>(
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
fn head_grad(
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
fn head_rows<S: Send>(
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
fn take_saved<S>(saved: &std::sync::Mutex<Vec<S>>) -> candle_core::Result<Vec<S>> {
    Ok(std::mem::take(&mut *saved.lock().map_err(|_| candle_core::Error::Msg("cross-entropy: lock poisoned".into()))?))
}

/// A fused head loss's backward: the logits gradient from the op `grad_op(upstream gradient per
/// row)` and the bias gradient, its column sum; the targets get none.
#[allow(clippy::type_complexity)]
fn head_bwd<G: candle_core::CustomOp3>(
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

fn check_shapes(lx: &Layout, lb: &Layout, lt: &Layout) -> candle_core::Result<(usize, usize)> {
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

/// Sum over the rows of a contiguous `[B, V]` tensor (candle's reduction over a leading
/// dimension walks it with strides; this is one contiguous pass).
struct ColumnSum;

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
    logits.contiguous()?.apply_op3(&bias.contiguous()?, &targets.contiguous()?, BiasSoftCe::default())
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

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let g = grad.contiguous()?;
        let gx = g.broadcast_mul(w)?;
        let gw = g.mul(x)?.apply_op1_no_bwd(&ColumnSum)?;
        let gb = g.apply_op1_no_bwd(&ColumnSum)?;
        Ok((Some(gx), Some(gw), Some(gb)))
    }
}

/// `x + b` for `x` `[N, F]` and `b` `[F]`, differentiable in both (see [`ColumnAffine`]).
///
/// ```
/// use candle_core::{Device, Tensor};
/// let x = Tensor::new(&[[1f32, 2.0], [3.0, 4.0]], &Device::Cpu).unwrap();
/// let b = Tensor::new(&[10f32, 20.0], &Device::Cpu).unwrap();
/// let y: Vec<Vec<f32>> = laya_train::add_columns(&x, &b).unwrap().to_vec2().unwrap();
/// assert_eq!(y, vec![vec![11.0, 22.0], vec![13.0, 24.0]]);
/// ```
pub fn add_columns(x: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
    x.contiguous()?.apply_op2(&b.contiguous()?, ColumnAffine { scaled: false })
}

/// `x·w + b` for `x` `[N, F]` and `w`, `b` `[F]`, differentiable in all three (see [`ColumnAffine`]).
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
    x.contiguous()?.apply_op1(SoftmaxRows)
}

#[cfg(test)]
mod tests {
    use super::{fast_exp, fast_tanh, normalize_rows, softmax_rows};
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
        use super::{class_log_softmax, class_sums, soft_cross_entropy, within_class_soft_cross_entropy, WordClasses};
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

    #[test]
    fn fast_exp_and_tanh_track_f64() {
        let mut worst = (0.0f64, 0.0f64);
        let mut v = -87.0f32;
        while v <= 88.0 {
            let want = (v as f64).exp();
            worst.0 = worst.0.max(((fast_exp(v) as f64) - want).abs() / want);
            v += 0.001_3;
        }
        let mut u = -12.0f32;
        while u <= 12.0 {
            worst.1 = worst.1.max(((fast_tanh(u) as f64) - (u as f64).tanh()).abs());
            u += 0.000_37;
        }
        assert!(worst.0 <= 3e-7, "exp relative error {}", worst.0);
        assert!(worst.1 <= 2.5e-7, "tanh absolute error {}", worst.1);
        assert_eq!(fast_tanh(0.0), 0.0);
        assert_eq!(fast_tanh(-40.0), -1.0);
        assert_eq!(fast_exp(0.0), 1.0);
        assert!(fast_exp(-1000.0) < 2e-38 && fast_exp(-1000.0) >= 0.0);
    }
}
