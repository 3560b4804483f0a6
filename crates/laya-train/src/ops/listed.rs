//! The factorised head's within-class loss with each row's targets listed (the batch's
//! [`SparseRows`]) rather than found by scanning the dense `[B, V]` targets: on a GPU the host
//! lists each row's target classes and their masses once, and the kernels visit only those
//! classes, forward and backward (the composed form spent a dozen passes over `[B, V]` and was a
//! third of a step). On the CPU it is the fused op of [`super::classes`], which finds the same
//! classes itself.

use candle_core::Tensor;

use super::WordClasses;
use crate::data::SparseRows;

/// [`super::within_class_soft_cross_entropy`] of `x` `[B, V]` (word logits before the bias `b`
/// `[V]`) against the targets `t` `[B, V]`, whose non-zero entries `entries` lists: the same
/// value and gradients.
pub(crate) fn within_class_soft_cross_entropy_listed(
    x: &Tensor,
    b: &Tensor,
    t: &Tensor,
    entries: &SparseRows,
    classes: &std::sync::Arc<WordClasses>,
) -> candle_core::Result<Tensor> {
    match x.device() {
        #[cfg(feature = "cuda")]
        candle_core::Device::Cuda(_) => {
            let listed = std::sync::Arc::new(list(entries, classes, x.dim(1)?)?);
            let op = gpu::WithinClassCe { classes: classes.clone(), listed, saved: Default::default() };
            x.contiguous()?.apply_op3(&b.contiguous()?, &t.contiguous()?, op)
        }
        _ => {
            let _ = entries;
            super::within_class_soft_cross_entropy(x, b, t, classes)
        }
    }
}

/// [`super::class_sums`] from the listed entries: `[B, K]` on `dev` with `T_c = Σ_{w∈c} t_w`.
/// Only the few non-zero sums travel to a GPU.
pub(crate) fn class_sums_listed(entries: &SparseRows, classes: &WordClasses, dev: &candle_core::Device) -> candle_core::Result<Tensor> {
    let k = classes.count();
    let (mut at, mut mass) = (Vec::new(), Vec::new());
    for r in 0..entries.len() {
        let first = at.len();
        let (cols, values) = entries.row(r);
        for (&w, &t) in cols.iter().zip(values) {
            let Some(&c) = classes.class_of().get(w as usize) else {
                candle_core::bail!("class sums: target word {w} outside the {} classed words", classes.class_of().len())
            };
            let pos = (r * k) as u32 + c;
            match at[first..].iter().position(|&p| p == pos) {
                Some(i) => mass[first + i] += t,
                None => {
                    at.push(pos);
                    mass.push(t);
                }
            }
        }
    }
    super::scatter((entries.len(), k), &at, &mass, dev)
}

/// Each row's (class, mass) pairs in order of first appearance, as `WordClasses::active` finds
/// them, and its entries, packed for the kernels (see `crate::cuda::ListedTargets`).
#[cfg(feature = "cuda")]
fn list(entries: &SparseRows, classes: &WordClasses, v: usize) -> candle_core::Result<crate::cuda::ListedTargets> {
    let rows = entries.len();
    if entries.cols.iter().any(|&w| w as usize >= v) || classes.class_of().len() != v {
        candle_core::bail!("within-class cross-entropy: a target outside the {v} words or classes for another lexicon")
    }
    let (mut pair_ptr, mut pair_class, mut pair_row, mut pair_mass) = (vec![0u32], Vec::new(), Vec::new(), Vec::new());
    for r in 0..rows {
        let first = pair_class.len();
        let (cols, values) = entries.row(r);
        for (&w, &t) in cols.iter().zip(values) {
            if t == 0.0 {
                continue;
            }
            let c = classes.class_of()[w as usize];
            match pair_class[first..].iter().position(|&k| k == c) {
                Some(i) => pair_mass[first + i] += t,
                None => {
                    pair_class.push(c);
                    pair_row.push(r as u32);
                    pair_mass.push(t);
                }
            }
        }
        pair_ptr.push(pair_class.len() as u32);
    }
    let pairs = pair_class.len();
    let mut u32s = pair_ptr;
    u32s.extend_from_slice(&pair_class);
    u32s.extend_from_slice(&pair_row);
    u32s.extend_from_slice(&entries.start);
    u32s.extend_from_slice(&entries.cols);
    let mut f32s = pair_mass;
    f32s.extend_from_slice(&entries.values);
    Ok(crate::cuda::ListedTargets { rows, pairs, entries: entries.cols.len(), u32s, f32s })
}

#[cfg(feature = "cuda")]
mod gpu {
    use std::sync::{Arc, Mutex};

    use candle_core::cuda_backend::cudarc::driver::CudaSlice;
    use candle_core::{CpuStorage, CudaStorage, CustomOp3, Layout, Shape, Tensor};

    use super::WordClasses;
    use crate::cuda::{keep, refuse_cpu, take, within_class_ce, within_class_ce_grad, ListedTargets};

    pub(super) struct WithinClassCe {
        pub classes: Arc<WordClasses>,
        pub listed: Arc<ListedTargets>,
        /// The forward's per-pair log-normalisers, for the backward (taken by it: a second
        /// backward through the same node computes them again).
        pub saved: Mutex<Option<CudaSlice<f32>>>,
    }

    impl CustomOp3 for WithinClassCe {
        fn name(&self) -> &'static str {
            "laya-within-class-ce-listed"
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
            sx: &CudaStorage,
            lx: &Layout,
            sb: &CudaStorage,
            lb: &Layout,
            _st: &CudaStorage,
            _lt: &Layout,
        ) -> candle_core::Result<(CudaStorage, Shape)> {
            let on_gpu = self.listed.upload(&sx.device)?;
            let (loss, lse) = within_class_ce(&self.classes, &self.listed, &on_gpu, (sx, lx), (sb, lb))?;
            keep(&self.saved, lse)?;
            Ok((CudaStorage::wrap_cuda_slice(loss, sx.device.clone()), Shape::from(self.listed.rows)))
        }

        fn bwd(
            &self,
            x: &Tensor,
            b: &Tensor,
            t: &Tensor,
            _res: &Tensor,
            grad: &Tensor,
        ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
            let saved = take(&self.saved)?;
            let op = Grad { classes: self.classes.clone(), listed: self.listed.clone(), lse: Mutex::new(saved), scale: grad.contiguous()? };
            let gx = x.apply_op3_no_bwd(b, t, &op)?;
            let gb = gx.apply_op1_no_bwd(&super::super::ColumnSum)?;
            Ok((Some(gx), Some(gb), None))
        }
    }

    struct Grad {
        classes: Arc<WordClasses>,
        listed: Arc<ListedTargets>,
        lse: Mutex<Option<CudaSlice<f32>>>,
        scale: Tensor,
    }

    impl CustomOp3 for Grad {
        fn name(&self) -> &'static str {
            "laya-within-class-ce-listed-grad"
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
            sx: &CudaStorage,
            lx: &Layout,
            sb: &CudaStorage,
            lb: &Layout,
            st: &CudaStorage,
            lt: &Layout,
        ) -> candle_core::Result<(CudaStorage, Shape)> {
            let on_gpu = self.listed.upload(&sx.device)?;
            let lse = match take(&self.lse)? {
                Some(l) => l,
                None => within_class_ce(&self.classes, &self.listed, &on_gpu, (sx, lx), (sb, lb))?.1,
            };
            within_class_ce_grad(&self.classes, &self.listed, &on_gpu, &lse, (sx, lx), (sb, lb), (st, lt), &self.scale)
        }
    }
}
