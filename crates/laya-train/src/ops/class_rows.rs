//! The factorised word head's within-class loss from the hidden rows, computing only the logits
//! of the classes a row has targets in.
//!
//! [`super::within_class_soft_cross_entropy`] takes every word's logit, `z·Wᵀ` `[B, V]`: at
//! 50,000 words that product and its two backward products were about a quarter of a CPU step,
//! though a row's loss reads only its few target classes (a hundred words each in the shipped
//! head). Here each row visits those classes' rows of `W` alone, forward and backward; `W`'s
//! gradient is zero outside them.

use std::sync::{Arc, Mutex};

use candle_core::{CpuStorage, Layout, Shape, Storage, Tensor};
use laya_kernels::Kernels;
use rayon::prelude::*;

use super::fastmath::fast_exp;
use super::{cpu_f32, WordClasses};
use crate::data::SparseRows;

/// One row's classes with target mass: `(class, T_c, lse_c)`, ascending by the first target
/// word of each class (the order [`WordClasses`]'s dense scan finds them in).
type Active = Vec<(u32, f32, f32)>;

/// [`super::within_class_soft_cross_entropy`]`(z·wᵀ, b, t)` per row, `[B]`, for hidden rows `z`
/// `[B, d]`, the word head `w` `[V, d]` and its bias `b` `[V]`, against the targets `t` that
/// `entries` lists row by row, computing only the logits of each row's target classes: the
/// value and gradients (in `z`, `w` and `b`) equal the dense form's up to float rounding. CPU
/// tensors only (a GPU takes the dense form through its listed kernels).
///
/// ```
/// use std::sync::Arc;
/// use candle_core::{Device, Tensor};
/// use laya_train::{within_class_head_loss, within_class_soft_cross_entropy, SparseRows, WordClasses};
/// let dev = Device::Cpu;
/// let classes = Arc::new(WordClasses::new(&[0, 1, 0]));
/// let z = Tensor::new(&[[0.5f32, -1.0]], &dev).unwrap();
/// let w = Tensor::new(&[[1f32, 0.0], [0.0, 1.0], [2.0, 1.0]], &dev).unwrap();
/// let b = Tensor::new(&[0f32, 0.1, -0.2], &dev).unwrap();
/// let entries = SparseRows { start: vec![0, 2], cols: vec![0, 2], values: vec![0.5, 0.5] };
/// let rows: Vec<f32> = within_class_head_loss(&z, &w, &b, &entries, &classes).unwrap().to_vec1().unwrap();
/// let t = Tensor::new(&[[0.5f32, 0.0, 0.5]], &dev).unwrap();
/// let dense: Vec<f32> =
///     within_class_soft_cross_entropy(&z.matmul(&w.t().unwrap()).unwrap(), &b, &t, &classes).unwrap().to_vec1().unwrap();
/// assert!((rows[0] - dense[0]).abs() < 1e-6);
/// ```
pub fn within_class_head_loss(
    z: &Tensor,
    w: &Tensor,
    b: &Tensor,
    entries: &SparseRows,
    classes: &Arc<WordClasses>,
) -> candle_core::Result<Tensor> {
    if !z.device().is_cpu() {
        candle_core::bail!("within-class head loss: CPU tensors only (a GPU takes the listed dense form)");
    }
    let op = HeadRowsCe {
        classes: classes.clone(),
        targets: Arc::new(row_targets(entries)),
        kernels: Kernels::detect(),
        saved: Mutex::default(),
    };
    z.contiguous()?.apply_op3(&w.contiguous()?, &b.contiguous()?, op)
}

/// Each row's non-zero targets `(word, t_w)`, ascending by word, a word listed twice once with
/// its values summed (as the dense targets hold it).
fn row_targets(entries: &SparseRows) -> Vec<Vec<(u32, f32)>> {
    (0..entries.len())
        .map(|r| {
            let (cols, values) = entries.row(r);
            let mut listed: Vec<(u32, f32)> = cols.iter().copied().zip(values.iter().copied()).collect();
            listed.sort_by_key(|e| e.0);
            let mut row: Vec<(u32, f32)> = Vec::with_capacity(listed.len());
            for (word, t) in listed {
                match row.last_mut() {
                    Some(last) if last.0 == word => last.1 += t,
                    _ => row.push((word, t)),
                }
            }
            row.retain(|e| e.1 != 0.0);
            row
        })
        .collect()
}

struct HeadRowsCe {
    classes: Arc<WordClasses>,
    targets: Arc<Vec<Vec<(u32, f32)>>>,
    /// The runtime's SIMD dot product and `y += a·x`, picked for this CPU.
    kernels: Kernels,
    /// Per row, what the backward needs of the forward; taken by the first backward.
    saved: Mutex<Vec<Active>>,
}

/// The three inputs as slices: `(z, w, b, rows, d, words)`.
type Inputs<'a> = (&'a [f32], &'a [f32], &'a [f32], usize, usize, usize);

impl HeadRowsCe {
    fn inputs<'a>(&self, z: (&'a [f32], &Layout), w: (&'a [f32], &Layout), b: (&'a [f32], &Layout)) -> candle_core::Result<Inputs<'a>> {
        let (rows, d) = z.1.shape().dims2()?;
        let (v, dw) = w.1.shape().dims2()?;
        let ok = dw == d
            && b.1.shape().dims1()? == v
            && self.classes.class_of().len() == v
            && self.targets.len() == rows
            && self.targets.iter().flatten().all(|&(word, _)| (word as usize) < v);
        if !ok {
            candle_core::bail!(
                "within-class head loss: hidden rows {rows}×{d}, head {v}×{dw}, {} classed words, {} target rows (or a target outside the head)",
                self.classes.class_of().len(),
                self.targets.len()
            );
        }
        Ok((z.0, w.0, b.0, rows, d, v))
    }

    /// Row `r`'s classes with target mass and its loss, `Σ_c T_c·lse_c − Σ_w t_w·logit_w`.
    fn row(&self, r: usize, zr: &[f32], w: &[f32], b: &[f32], d: usize) -> (f32, Active) {
        let mut act: Active = Vec::new();
        for &(word, tw) in &self.targets[r] {
            let c = self.classes.class_of()[word as usize];
            match act.iter_mut().find(|e| e.0 == c) {
                Some(e) => e.1 += tw,
                None => act.push((c, tw, 0.0)),
            }
        }
        let logit = |word: u32| self.kernels.dot(zr, &w[word as usize * d..(word as usize + 1) * d]) + b[word as usize];
        for e in &mut act {
            let members = self.classes.members(e.0 as usize);
            let m = members.iter().map(|&x| logit(x)).fold(f32::NEG_INFINITY, f32::max);
            e.2 = m + members.iter().map(|&x| fast_exp(logit(x) - m)).sum::<f32>().ln();
        }
        let loss =
            act.iter().map(|&(_, tc, lse)| tc * lse).sum::<f32>() - self.targets[r].iter().map(|&(x, tw)| tw * logit(x)).sum::<f32>();
        (loss, act)
    }
}

impl candle_core::CustomOp3 for HeadRowsCe {
    fn name(&self) -> &'static str {
        "laya-within-class-head-loss"
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
        let z = cpu_f32(s1, l1, "hidden rows")?;
        let w = cpu_f32(s2, l2, "word head")?;
        let b = cpu_f32(s3, l3, "word bias")?;
        let (z, w, b, rows, d, _) = self.inputs((z, l1), (w, l2), (b, l3))?;
        let (loss, act): (Vec<f32>, Vec<Active>) = z.par_chunks_exact(d).enumerate().map(|(r, zr)| self.row(r, zr, w, b, d)).unzip();
        *self.saved.lock().map_err(|_| candle_core::Error::Msg("within-class head loss: lock poisoned".into()))? = act;
        Ok((CpuStorage::F32(loss), Shape::from(rows)))
    }

    fn bwd(
        &self,
        z: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let g: Vec<f32> = grad.flatten_all()?.to_vec1()?;
        let saved =
            std::mem::take(&mut *self.saved.lock().map_err(|_| candle_core::Error::Msg("within-class head loss: lock poisoned".into()))?);
        let (gz, gw, gb) = {
            let (zs, zl) = z.storage_and_layout();
            let (ws, wl) = w.storage_and_layout();
            let (bs, bl) = b.storage_and_layout();
            let (Storage::Cpu(zs), Storage::Cpu(ws), Storage::Cpu(bs)) = (&*zs, &*ws, &*bs) else {
                candle_core::bail!("within-class head loss: CPU tensors only")
            };
            let slices = (cpu_f32(zs, zl, "hidden rows")?, cpu_f32(ws, wl, "word head")?, cpu_f32(bs, bl, "word bias")?);
            let inputs = self.inputs((slices.0, zl), (slices.1, wl), (slices.2, bl))?;
            if g.len() != inputs.3 {
                candle_core::bail!("within-class head loss: {} upstream gradients for {} rows", g.len(), inputs.3);
            }
            self.grads(inputs, &g, saved)
        };
        let (rows, d, v) = (g.len(), z.dim(1)?, w.dim(0)?);
        let dev = z.device();
        Ok((Some(Tensor::from_vec(gz, (rows, d), dev)?), Some(Tensor::from_vec(gw, (v, d), dev)?), Some(Tensor::from_vec(gb, v, dev)?)))
    }
}

impl HeadRowsCe {
    /// The gradients of `Σ_r g_r·loss_r` in `z`, `w` and `b`. With `p_w` the softmax of class
    /// `c`'s logits, `∂/∂logit_w = g_r·(T_c·p_w − t_w)` for `w` in a target class of row `r`:
    /// row `r` of `z` gets `Σ_w ∂_w·w_w` (rows in parallel), word `w`'s row of the head
    /// `Σ_r ∂_{r,w}·z_r` over the rows with `w`'s class, in row order (words in parallel).
    fn grads(&self, (z, w, b, rows, d, v): Inputs<'_>, g: &[f32], saved: Vec<Active>) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let act: Vec<Active> = match saved.len() == rows {
            true => saved,
            false => z.par_chunks_exact(d).enumerate().map(|(r, zr)| self.row(r, zr, w, b, d).1).collect(),
        };
        let mut gz = vec![0f32; rows * d];
        // Per row, its classes' logit gradients, class after class in `act` order.
        let dlogits: Vec<Vec<f32>> = gz
            .par_chunks_exact_mut(d)
            .zip(z.par_chunks_exact(d))
            .enumerate()
            .map(|(r, (gzr, zr))| {
                let mut out = Vec::new();
                for &(c, tc, lse) in &act[r] {
                    for &word in self.classes.members(c as usize) {
                        let wr = &w[word as usize * d..(word as usize + 1) * d];
                        let tw = self.targets[r].iter().find(|e| e.0 == word).map_or(0.0, |e| e.1);
                        let dl = (tc * fast_exp(self.kernels.dot(zr, wr) + b[word as usize] - lse) - tw) * g[r];
                        self.kernels.axpy(dl, wr, gzr);
                        out.push(dl);
                    }
                }
                out
            })
            .collect();
        // Per class, the rows that visited it and where its gradients start in their list.
        let mut visits: Vec<Vec<(u32, u32)>> = vec![Vec::new(); self.classes.count()];
        for (r, a) in act.iter().enumerate() {
            let mut at = 0u32;
            for &(c, _, _) in a {
                visits[c as usize].push((r as u32, at));
                at += self.classes.members(c as usize).len() as u32;
            }
        }
        let mut gw = vec![0f32; v * d];
        let mut gb = vec![0f32; v];
        gw.par_chunks_exact_mut(d).zip(gb.par_iter_mut()).enumerate().for_each(|(word, (gwr, gbw))| {
            let c = self.classes.class_of()[word] as usize;
            if visits[c].is_empty() {
                return;
            }
            let slot = self.classes.members(c).partition_point(|&x| (x as usize) < word) as u32;
            for &(r, at) in &visits[c] {
                let dl = dlogits[r as usize][(at + slot) as usize];
                self.kernels.axpy(dl, &z[r as usize * d..(r as usize + 1) * d], gwr);
                *gbw += dl;
            }
        });
        (gz, gw, gb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rng;
    use candle_core::{Device, Var};

    fn randn(rng: &mut Rng, n: usize, scale: f64) -> Vec<f32> {
        (0..n).map(|_| (rng.normal() * scale) as f32).collect()
    }

    /// Value and all three gradients against the dense form (`z·wᵀ` through candle, then the
    /// fused within-class loss), on classes of one word, of many and empty ones, rows with
    /// targets in one class, in several and in none.
    #[test]
    fn matches_the_dense_form_in_value_and_gradients() {
        let mut rng = Rng::new(5, 1);
        let (rows, d, v) = (9usize, 20usize, 40usize);
        // Words 0..4 alone in their classes, the rest in classes 4..9 (class 9 left empty).
        let class_of: Vec<u32> = (0..v as u32).map(|x| if x < 4 { x } else { 4 + (x * 7 % 5) }).collect();
        let classes = Arc::new(WordClasses::new(&class_of));
        let dev = Device::Cpu;
        let z = Var::from_vec(randn(&mut rng, rows * d, 1.0), (rows, d), &dev).unwrap();
        let w = Var::from_vec(randn(&mut rng, v * d, 0.5), (v, d), &dev).unwrap();
        let b = Var::from_vec(randn(&mut rng, v, 0.3), v, &dev).unwrap();
        let mut start = vec![0u32];
        let (mut cols, mut values) = (Vec::new(), Vec::new());
        let mut dense = vec![0f32; rows * v];
        for r in 0..rows {
            // Row 3 has no target; the others up to five distinct words.
            let n = if r == 3 { 0 } else { 1 + rng.below(5) };
            let mut picked: Vec<u32> = Vec::new();
            while picked.len() < n {
                let x = rng.below(v) as u32;
                if !picked.contains(&x) {
                    picked.push(x);
                }
            }
            for (k, &x) in picked.iter().enumerate() {
                let t = if k == 0 { 3.0 / 7.0 } else { 1.0 / 7.0 };
                cols.push(x);
                values.push(t);
                dense[r * v + x as usize] = t;
            }
            start.push(cols.len() as u32);
        }
        let entries = SparseRows { start, cols, values };
        let t = Tensor::from_vec(dense, (rows, v), &dev).unwrap();
        // Weighted so that every row's upstream gradient differs.
        let weights = Tensor::from_vec((0..rows).map(|r| 1.0 + r as f32 / 4.0).collect::<Vec<f32>>(), rows, &dev).unwrap();
        let run = |sparse: bool| {
            let loss = match sparse {
                true => within_class_head_loss(z.as_tensor(), w.as_tensor(), b.as_tensor(), &entries, &classes).unwrap(),
                false => super::super::within_class_soft_cross_entropy(
                    &z.as_tensor().matmul(&w.as_tensor().t().unwrap()).unwrap(),
                    b.as_tensor(),
                    &t,
                    &classes,
                )
                .unwrap(),
            };
            let total = (&loss * &weights).unwrap().sum_all().unwrap();
            let grads = total.backward().unwrap();
            let get = |x: &Var| grads.get(x.as_tensor()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            (loss.to_vec1::<f32>().unwrap(), get(&z), get(&w), get(&b))
        };
        let (sparse, dense) = (run(true), run(false));
        let close = |a: &[f32], b: &[f32], what: &str| {
            assert_eq!(a.len(), b.len(), "{what}");
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert!((x - y).abs() <= 2e-5 * (1.0 + y.abs()), "{what}[{i}]: {x} against {y}");
            }
        };
        close(&sparse.0, &dense.0, "loss");
        close(&sparse.1, &dense.1, "z gradient");
        close(&sparse.2, &dense.2, "w gradient");
        close(&sparse.3, &dense.3, "b gradient");
        assert_eq!(sparse.0[3], 0.0, "a row without targets has no loss");
        assert!(sparse.2.iter().any(|&x| x != 0.0) && sparse.3.iter().any(|&x| x != 0.0));
    }

    #[test]
    fn a_target_outside_the_head_is_an_error() {
        let dev = Device::Cpu;
        let classes = Arc::new(WordClasses::new(&[0, 0, 1]));
        let z = Tensor::zeros((1, 4), candle_core::DType::F32, &dev).unwrap();
        let w = Tensor::zeros((3, 4), candle_core::DType::F32, &dev).unwrap();
        let b = Tensor::zeros(3, candle_core::DType::F32, &dev).unwrap();
        let entries = SparseRows { start: vec![0, 1], cols: vec![7], values: vec![1.0] };
        assert!(within_class_head_loss(&z, &w, &b, &entries, &classes).is_err());
        let two_rows = SparseRows { start: vec![0, 0, 0], cols: vec![], values: vec![] };
        assert!(within_class_head_loss(&z, &w, &b, &two_rows, &classes).is_err());
    }
}
