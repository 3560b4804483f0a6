//! AdamW with the update fused into one in-place pass per tensor, and row-sparse ("lazy")
//! updates for the codepoint embedding table.
//!
//! Why not `candle_nn::AdamW`: its moments are private (a checkpoint could not restore them),
//! and it spends about ten full-size temporary tensors per parameter per step, which on the
//! 20,000-word output matrix costs as much as the matrix multiplications themselves. The math
//! of the dense update is the same as `candle_nn::AdamW` (decay first, then the bias-corrected
//! step); a test checks this.
//!
//! On a GPU the moments live on the device and the same update runs as one CUDA kernel per
//! tensor (`crate::cuda`).

use crate::config::{Decay, TrainConfig};
use crate::error::{Result, TrainError};
use crate::model::{Param, ParamKind};
use candle_core::{CpuStorage, InplaceOp1, InplaceOp2, Layout, Tensor};
use rayon::prelude::*;
use std::sync::Mutex;

/// Learning rate at optimiser step `step` (0-based) of `total` steps: linear warm-up over
/// `warmup_steps`, then the configured decay down to `min_lr_ratio · lr`.
///
/// ```
/// use laya_train::{lr_at, TrainConfig};
/// let cfg = TrainConfig { lr: 1.0, warmup_steps: 10, min_lr_ratio: 0.0, ..TrainConfig::default() };
/// assert!((lr_at(4, 110, &cfg) - 0.5).abs() < 1e-9);
/// assert!((lr_at(9, 110, &cfg) - 1.0).abs() < 1e-9);
/// assert!(lr_at(109, 110, &cfg) < 0.01);
/// ```
pub fn lr_at(step: usize, total: usize, cfg: &TrainConfig) -> f64 {
    lr_at_time(step, total, 0.0, cfg)
}

/// [`lr_at`] for a run that also ends at a time limit (`RunOptions::time_limit`):
/// `time_fraction` is the share of that limit used so far, and the decay follows whichever of
/// the steps and the time is further along, so the rate reaches its floor when either runs out.
/// Warm-up still counts steps.
///
/// ```
/// use laya_train::{lr_at, lr_at_time, TrainConfig};
/// let cfg = TrainConfig { lr: 1e-3, warmup_steps: 10, min_lr_ratio: 0.05, ..TrainConfig::default() };
/// assert_eq!(lr_at_time(50, 1000, 0.0, &cfg), lr_at(50, 1000, &cfg));
/// assert!((lr_at_time(50, 1000, 1.0, &cfg) - 5e-5).abs() < 1e-12); // time is up: the floor
/// assert!(lr_at_time(50, 1000, 0.5, &cfg) < lr_at(50, 1000, &cfg));
/// ```
pub fn lr_at_time(step: usize, total: usize, time_fraction: f64, cfg: &TrainConfig) -> f64 {
    let peak = cfg.lr;
    if step < cfg.warmup_steps {
        return peak * (step + 1) as f64 / cfg.warmup_steps as f64;
    }
    let span = total.saturating_sub(cfg.warmup_steps).max(1) as f64;
    let progress = ((step - cfg.warmup_steps) as f64 / span).max(time_fraction).min(1.0);
    let floor = peak * cfg.min_lr_ratio;
    match cfg.decay {
        Decay::Constant => peak,
        Decay::Linear => floor + (peak - floor) * (1.0 - progress),
        Decay::Cosine => floor + (peak - floor) * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos()),
    }
}

/// AdamW state: first and second moments of every parameter (same order as
/// [`crate::LayaNet::params`]) and the step count.
#[derive(Debug, Clone)]
pub struct AdamW {
    /// β1.
    pub beta1: f64,
    /// β2.
    pub beta2: f64,
    /// ε.
    pub eps: f64,
    /// Decoupled weight decay for [`ParamKind::Matrix`] parameters.
    pub weight_decay: f64,
    step: u64,
    moments: Vec<Moments>,
}

/// The first and second moments of one parameter, where its values live.
#[derive(Debug, Clone)]
enum Moments {
    Host {
        m: Vec<f32>,
        v: Vec<f32>,
    },
    #[cfg(feature = "cuda")]
    Cuda {
        mv: crate::cuda::DeviceMoments,
        n: usize,
        dev: candle_core::CudaDevice,
    },
}

impl Moments {
    /// Zero moments, or `init`, for a parameter of `n` values on `dev`.
    fn new(dev: &candle_core::Device, n: usize, init: Option<(Vec<f32>, Vec<f32>)>) -> Result<Self> {
        match dev {
            #[cfg(feature = "cuda")]
            candle_core::Device::Cuda(d) => {
                let mv = crate::cuda::DeviceMoments::new(d, n, init.as_ref().map(|(m, v)| (m.as_slice(), v.as_slice())))?;
                Ok(Moments::Cuda { mv, n, dev: d.clone() })
            }
            _ => {
                let (m, v) = init.unwrap_or_else(|| (vec![0.0; n], vec![0.0; n]));
                Ok(Moments::Host { m, v })
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Moments::Host { m, .. } => m.len(),
            #[cfg(feature = "cuda")]
            Moments::Cuda { n, .. } => *n,
        }
    }
}

/// Gradients for one optimiser step.
#[derive(Debug, Default)]
pub struct Grads {
    /// Dense gradient per parameter (same order as the parameters; `None` = no gradient).
    pub dense: Vec<Option<Tensor>>,
    /// Row-sparse gradient of the token embedding: sorted distinct rows and their
    /// gradients, `rows.len() · d` values.
    pub embedding_rows: Vec<u32>,
    /// See `embedding_rows` (a CPU step's gradient; a GPU step's is `embedding_grad_device`).
    pub embedding_grad: Vec<f32>,
    /// On a GPU, the gradient of `embedding_rows` as a `[rows, d]` tensor on the device (see
    /// [`Grads::add_embedding_rows_on_device`]); `embedding_grad` is then empty.
    pub embedding_grad_device: Option<Tensor>,
}

impl Grads {
    /// Adds the gradient of gathered embedding rows: `g` holds one `d`-vector per entry of
    /// `rows` (the rows a batch gathered, repeats included); repeated rows are summed, so the
    /// result is the row-sparse gradient of the table, rows sorted. Entries that are
    /// [`crate::PAD_ROW`] (causal padding, masked in the forward pass) are skipped.
    pub fn add_embedding_rows(&mut self, rows: &[u32], g: &[f32], d: usize) {
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by_key(|&i| rows[i]);
        for &i in &order {
            let r = rows[i];
            if r == crate::codec::PAD_ROW {
                continue; // padding is not a token: it has no embedding row to update
            }
            let gi = &g[i * d..(i + 1) * d];
            if self.embedding_rows.last() != Some(&r) {
                self.embedding_rows.push(r);
                self.embedding_grad.extend_from_slice(gi);
            } else {
                let base = self.embedding_grad.len() - d;
                for (acc, &x) in self.embedding_grad[base..].iter_mut().zip(gi) {
                    *acc += x;
                }
            }
        }
    }
}

impl Grads {
    /// [`Grads::add_embedding_rows`] with the gradient left where it is: `g` `[rows.len(), d]`
    /// holds the gradient of each gathered row (on a GPU, say). The grouping of repeated rows is
    /// worked out here from `rows`, which the host has; the sums are taken on `g`'s device, each
    /// in the order the rows were gathered. Replaces any embedding gradient already held.
    pub fn add_embedding_rows_on_device(&mut self, rows: &[u32], g: &Tensor) -> Result<()> {
        // Entries sorted by row (stable: gathering order within a row), padding left out.
        let mut order: Vec<u32> = (0..rows.len() as u32).filter(|&i| rows[i as usize] != crate::codec::PAD_ROW).collect();
        order.sort_by_key(|&i| rows[i as usize]);
        let (mut distinct, mut seg) = (Vec::new(), vec![0u32]);
        for (k, &i) in order.iter().enumerate() {
            let r = rows[i as usize];
            if distinct.last() != Some(&r) {
                if k > 0 {
                    seg.push(k as u32);
                }
                distinct.push(r);
            }
        }
        if !order.is_empty() {
            seg.push(order.len() as u32);
        }
        self.embedding_grad_device = Some(crate::ops::segment_sums(g, &order, &seg)?);
        self.embedding_rows = distinct;
        self.embedding_grad.clear();
        Ok(())
    }
}

impl AdamW {
    /// Fresh state (zero moments) for `params`, on the device of the parameters.
    pub fn new(params: &[Param], cfg: &TrainConfig) -> Result<Self> {
        let moments = params.iter().map(|p| Moments::new(p.var.device(), p.var.elem_count(), None)).collect::<Result<_>>()?;
        Ok(AdamW { beta1: cfg.beta1, beta2: cfg.beta2, eps: cfg.adam_eps, weight_decay: cfg.weight_decay, step: 0, moments })
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// The moments `(m, v)` of parameter `i`, copied to the host (for checkpoints).
    pub fn moments(&self, i: usize) -> Result<(Vec<f32>, Vec<f32>)> {
        match self.moments.get(i).ok_or_else(|| TrainError::Config(format!("no parameter {i} in the optimizer")))? {
            Moments::Host { m, v } => Ok((m.clone(), v.clone())),
            #[cfg(feature = "cuda")]
            Moments::Cuda { mv, n, dev } => Ok(mv.to_host(dev, *n)?),
        }
    }

    /// Restores the state saved by a checkpoint (moments in parameter order, on the host).
    pub fn restore(&mut self, step: u64, m: Vec<Vec<f32>>, v: Vec<Vec<f32>>) -> Result<()> {
        let ok = m.len() == self.moments.len()
            && v.len() == self.moments.len()
            && m.iter().zip(&v).zip(&self.moments).all(|((a, b), s)| a.len() == s.len() && b.len() == s.len());
        if !ok {
            return Err(TrainError::Checkpoint("optimizer moments do not match the model's shapes".into()));
        }
        let mut restored = Vec::with_capacity(m.len());
        for ((m, v), s) in m.into_iter().zip(v).zip(&self.moments) {
            let dev = match s {
                Moments::Host { .. } => candle_core::Device::Cpu,
                #[cfg(feature = "cuda")]
                Moments::Cuda { dev, .. } => candle_core::Device::Cuda(dev.clone()),
            };
            restored.push(Moments::new(&dev, s.len(), Some((m, v)))?);
        }
        self.step = step;
        self.moments = restored;
        Ok(())
    }

    /// Global L2 norm of all gradients. On a GPU the squares are summed on the device and read
    /// back once.
    pub fn grad_norm(grads: &Grads) -> Result<f64> {
        let mut sq = grads.embedding_grad.iter().map(|&g| (g as f64) * (g as f64)).sum::<f64>();
        let mut on_device = Vec::new();
        for g in grads.dense.iter().flatten().chain(&grads.embedding_grad_device) {
            if g.device().is_cpu() {
                sq += g.sqr()?.sum_all()?.to_scalar::<f32>()? as f64;
            } else {
                // Rows first: candle sums a whole tensor to one value in a single block on a GPU.
                let s = if g.rank() == 2 { g.sqr()?.sum(1)?.sum_all()? } else { g.sqr()?.sum_all()? };
                on_device.push(s);
            }
        }
        if !on_device.is_empty() {
            sq += Tensor::stack(&on_device, 0)?.sum_all()?.to_scalar::<f32>()? as f64;
        }
        Ok(sq.sqrt())
    }

    /// One AdamW step at learning rate `lr`, with gradients multiplied by `grad_scale`
    /// (the clipping factor). Parameters are updated in place.
    pub fn step(&mut self, params: &[Param], grads: &Grads, lr: f64, grad_scale: f32) -> Result<()> {
        if params.len() != self.moments.len() || grads.dense.len() != params.len() {
            return Err(TrainError::Config("optimizer built for a different parameter list".into()));
        }
        self.step += 1;
        let t = self.step as i32;
        let bc1 = 1.0 - self.beta1.powi(t);
        let bc2 = 1.0 - self.beta2.powi(t);
        for (i, p) in params.iter().enumerate() {
            let kind = p.kind;
            let hyper = Hyper {
                lr: lr as f32,
                b1: self.beta1 as f32,
                b2: self.beta2 as f32,
                eps: self.eps as f32,
                decay: if kind == ParamKind::Matrix { (1.0 - lr * self.weight_decay) as f32 } else { 1.0 },
                bc1: bc1 as f32,
                bc2_sqrt: bc2.sqrt() as f32,
                scale: grad_scale,
            };
            match &mut self.moments[i] {
                Moments::Host { m, v } => {
                    if kind == ParamKind::TokenEmbedding {
                        // Rows grouped by `add_embedding_rows_on_device` on CPU tensors count too.
                        let from_tensor;
                        let grad: &[f32] = match &grads.embedding_grad_device {
                            Some(t) if grads.embedding_grad.is_empty() => {
                                from_tensor = t.flatten_all()?.to_vec1::<f32>()?;
                                &from_tensor
                            }
                            _ => &grads.embedding_grad,
                        };
                        let d = if grads.embedding_rows.is_empty() { 0 } else { grad.len() / grads.embedding_rows.len() };
                        if d == 0 {
                            continue;
                        }
                        let op = SparseRows {
                            hyper,
                            rows: &grads.embedding_rows,
                            grad,
                            d,
                            mv: Mutex::new((m.as_mut_slice(), v.as_mut_slice())),
                        };
                        p.var.as_tensor().inplace_op1(&op)?;
                    } else if let Some(g) = &grads.dense[i] {
                        let g = g.contiguous()?;
                        let op = Dense { hyper, mv: Mutex::new((m.as_mut_slice(), v.as_mut_slice())) };
                        p.var.as_tensor().inplace_op2(&g, &op)?;
                    }
                }
                #[cfg(feature = "cuda")]
                Moments::Cuda { mv, .. } => {
                    let h = hyper.on_gpu();
                    if kind == ParamKind::TokenEmbedding {
                        let Some(g) = &grads.embedding_grad_device else { continue };
                        let op = cuda_ops::Rows { h, rows: &grads.embedding_rows, grad: g.contiguous()?, mv: Mutex::new(mv) };
                        p.var.as_tensor().inplace_op1(&op)?;
                    } else if let Some(g) = &grads.dense[i] {
                        let op = cuda_ops::Dense { h, mv: Mutex::new(mv) };
                        p.var.as_tensor().inplace_op2(&g.contiguous()?, &op)?;
                    }
                }
            }
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
struct Hyper {
    lr: f32,
    b1: f32,
    b2: f32,
    eps: f32,
    decay: f32,
    bc1: f32,
    bc2_sqrt: f32,
    scale: f32,
}

impl Hyper {
    #[cfg(feature = "cuda")]
    fn on_gpu(&self) -> crate::cuda::AdamHyper {
        let Hyper { lr, b1, b2, eps, decay, bc1, bc2_sqrt, scale } = *self;
        crate::cuda::AdamHyper { lr, b1, b2, eps, decay, bc1, bc2_sqrt, scale }
    }

    #[inline]
    fn update(&self, w: &mut f32, g: f32, m: &mut f32, v: &mut f32) {
        let g = g * self.scale;
        *m = self.b1 * *m + (1.0 - self.b1) * g;
        *v = self.b2 * *v + (1.0 - self.b2) * g * g;
        // lr·m̂/(√v̂+ε) with m̂ = m/bc1, v̂ = v/bc2.
        let step = self.lr * (*m / self.bc1) / ((*v).sqrt() / self.bc2_sqrt + self.eps);
        *w = *w * self.decay - step;
    }
}

fn f32_slice_mut<'a>(s: &'a mut CpuStorage, l: &Layout) -> candle_core::Result<&'a mut [f32]> {
    let (a, b) = l.contiguous_offsets().ok_or_else(|| candle_core::Error::Msg("adamw: parameter is not contiguous".into()))?;
    match s {
        CpuStorage::F32(v) => Ok(&mut v[a..b]),
        _ => Err(candle_core::Error::Msg("adamw: parameters must be f32".into())),
    }
}

struct Dense<'a> {
    hyper: Hyper,
    mv: Mutex<(&'a mut [f32], &'a mut [f32])>,
}

impl InplaceOp2 for Dense<'_> {
    fn name(&self) -> &'static str {
        "laya-adamw"
    }

    fn cpu_fwd(&self, s1: &mut CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> candle_core::Result<()> {
        let w = f32_slice_mut(s1, l1)?;
        let (a, b) = l2.contiguous_offsets().ok_or_else(|| candle_core::Error::Msg("adamw: gradient is not contiguous".into()))?;
        let g = match s2 {
            CpuStorage::F32(v) => &v[a..b],
            _ => return Err(candle_core::Error::Msg("adamw: gradients must be f32".into())),
        };
        let mut guard = self.mv.lock().map_err(|_| candle_core::Error::Msg("adamw: lock poisoned".into()))?;
        let (m, v) = &mut *guard;
        if g.len() != w.len() || m.len() != w.len() {
            return Err(candle_core::Error::Msg("adamw: gradient size mismatch".into()));
        }
        // Chunks big enough that a one-thread pool pays nothing for the split.
        const CHUNK: usize = 1 << 14;
        w.par_chunks_mut(CHUNK).zip(g.par_chunks(CHUNK)).zip(m.par_chunks_mut(CHUNK)).zip(v.par_chunks_mut(CHUNK)).for_each(
            |(((w, g), m), v)| {
                for (((w, &g), m), v) in w.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
                    self.hyper.update(w, g, m, v);
                }
            },
        );
        Ok(())
    }
}

struct SparseRows<'a> {
    hyper: Hyper,
    rows: &'a [u32],
    grad: &'a [f32],
    d: usize,
    mv: Mutex<(&'a mut [f32], &'a mut [f32])>,
}

impl InplaceOp1 for SparseRows<'_> {
    fn name(&self) -> &'static str {
        "laya-adamw-rows"
    }

    fn cpu_fwd(&self, s: &mut CpuStorage, l: &Layout) -> candle_core::Result<()> {
        let w = f32_slice_mut(s, l)?;
        let mut guard = self.mv.lock().map_err(|_| candle_core::Error::Msg("adamw: lock poisoned".into()))?;
        let (m, v) = &mut *guard;
        let d = self.d;
        for (&r, g) in self.rows.iter().zip(self.grad.chunks_exact(d)) {
            let o = r as usize * d;
            if o + d > w.len() {
                return Err(candle_core::Error::Msg(format!("adamw: embedding row {r} out of range")));
            }
            for j in 0..d {
                self.hyper.update(&mut w[o + j], g[j], &mut m[o + j], &mut v[o + j]);
            }
        }
        Ok(())
    }
}

/// The in-place ops that run the AdamW kernels on a parameter's CUDA storage.
#[cfg(feature = "cuda")]
mod cuda_ops {
    use super::Mutex;
    use crate::cuda::{adamw_dense, adamw_rows, AdamHyper, DeviceMoments};
    use candle_core::{CpuStorage, CudaStorage, InplaceOp1, InplaceOp2, Layout, Tensor};

    fn lock<'a, 'b>(mv: &'a Mutex<&'b mut DeviceMoments>) -> candle_core::Result<std::sync::MutexGuard<'a, &'b mut DeviceMoments>> {
        mv.lock().map_err(|_| candle_core::Error::Msg("adamw: lock poisoned".into()))
    }

    pub(super) struct Dense<'a> {
        pub h: AdamHyper,
        pub mv: Mutex<&'a mut DeviceMoments>,
    }

    impl InplaceOp2 for Dense<'_> {
        fn name(&self) -> &'static str {
            "laya-adamw-cuda"
        }

        fn cpu_fwd(&self, _: &mut CpuStorage, _: &Layout, _: &CpuStorage, _: &Layout) -> candle_core::Result<()> {
            candle_core::bail!("adamw: moments on the GPU, parameter on the CPU")
        }

        fn cuda_fwd(&self, w: &mut CudaStorage, lw: &Layout, g: &CudaStorage, lg: &Layout) -> candle_core::Result<()> {
            let mut mv = lock(&self.mv)?;
            adamw_dense(w, lw, g, lg, &mut mv, self.h)
        }
    }

    pub(super) struct Rows<'a> {
        pub h: AdamHyper,
        pub rows: &'a [u32],
        pub grad: Tensor,
        pub mv: Mutex<&'a mut DeviceMoments>,
    }

    impl InplaceOp1 for Rows<'_> {
        fn name(&self) -> &'static str {
            "laya-adamw-rows-cuda"
        }

        fn cpu_fwd(&self, _: &mut CpuStorage, _: &Layout) -> candle_core::Result<()> {
            candle_core::bail!("adamw: moments on the GPU, parameter on the CPU")
        }

        fn cuda_fwd(&self, w: &mut CudaStorage, lw: &Layout) -> candle_core::Result<()> {
            let (storage, lg) = self.grad.storage_and_layout();
            let candle_core::Storage::Cuda(g) = &*storage else { candle_core::bail!("adamw: embedding gradient is not on the GPU") };
            let mut mv = lock(&self.mv)?;
            adamw_rows(w, lw, self.rows, (g, lg), &mut mv, self.h)
        }
    }
}
