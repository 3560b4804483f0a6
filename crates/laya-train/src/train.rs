//! The training loop: batching, loss, AdamW steps, validation, checkpoints, resume, early
//! stopping, the loss-curve SVG and the summary table.

use crate::checkpoint::{load_checkpoint, save_checkpoint, save_tensors, write_file};
use crate::config::{ModelConfig, TrainConfig};
use crate::data::{encode_events, make_batch, Batch, EncodeStats, EncodedSet, Event};
use crate::error::{io_err, Result, TrainError};
use crate::model::{LayaNet, ParamKind};
use crate::ops::{add_columns, biased_soft_cross_entropy, soft_cross_entropy};
use crate::optim::{lr_at_time, AdamW, Grads};
use candle_core::{Tensor, Var};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Instant;

/// Loss terms of one batch (means over the batch).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LossParts {
    /// word loss + λ · replace loss.
    pub total: f32,
    /// Cross-entropy of the word head against its (soft) target.
    pub word: f32,
    /// Cross-entropy of the replace head.
    pub replace: f32,
}

/// Builds the loss tensors from [`LayaNet::forward`]'s outputs: `(total, word, replace)`. For a
/// factorised word head `words` are `log P(w)`, already normalised, so the same soft
/// cross-entropy is `−Σ t_w log P(w)`.
pub fn loss_tensors(words: &Tensor, replace: &Tensor, batch: &Batch, lambda: f32) -> Result<(Tensor, Tensor, Tensor)> {
    // Weighted means: the targets already carry each event's weight.
    let wdiv = if batch.word_weight > 0.0 { batch.word_weight as f64 } else { 1.0 };
    let word = (soft_cross_entropy(words, batch.word_target()?)?.sum_all()? * (1.0 / wdiv))?;
    let rdiv = if batch.total_weight > 0.0 { batch.total_weight as f64 } else { 1.0 };
    let rep = (soft_cross_entropy(replace, &batch.replace_target)?.sum_all()? * (1.0 / rdiv))?;
    let total = (&word + (&rep * lambda as f64)?)?;
    Ok((total, word, rep))
}

/// The same losses as [`loss_tensors`], from the hidden state `z` `[B, d]` (see
/// [`LayaNet::forward_hidden`]) with the word head's bias fused into its cross-entropy
/// ([`crate::biased_soft_cross_entropy`]): the training path, about a third cheaper at
/// V = 20,000. A factorised word head's loss is the class cross-entropy against the
/// class-aggregated targets ([`crate::class_sums`]) plus [`crate::within_class_soft_cross_entropy`],
/// which visits only the classes with target mass. Tests pin values and gradients to
/// [`loss_tensors`].
pub fn fused_loss_tensors(net: &LayaNet, z: &Tensor, batch: &Batch, lambda: f32) -> Result<(Tensor, Tensor, Tensor)> {
    let ((ow, ob), (rw, rb)) = net.heads();
    let wdiv = if batch.word_weight > 0.0 { batch.word_weight as f64 } else { 1.0 };
    let word = match net.class_head() {
        None => biased_soft_cross_entropy(&z.matmul(&ow.t()?)?, ob, batch.word_target()?)?,
        // −Σ_w t_w·log P(w) = CE(class logits, T) + Σ_w t_w·(lse_{κ(w)} − logit_w): the class
        // cross-entropy against the class-aggregated targets plus the within-class part.
        Some(((cw, cb), classes)) => {
            let class_logits = add_columns(&z.matmul(&cw.t()?)?, cb)?;
            // Each row's target classes are listed: neither device scans dense `[B, V]` targets.
            let class_target = crate::ops::listed::class_sums_listed(&batch.word_entries, classes, z.device())?;
            // The CPU computes only the target classes' logits; a GPU takes the whole product.
            let within = if z.device().is_cpu() {
                crate::ops::within_class_head_loss(z, ow, ob, &batch.word_entries, classes)?
            } else {
                let logits = z.matmul(&ow.t()?)?;
                crate::ops::listed::within_class_soft_cross_entropy_listed(&logits, ob, batch.word_target()?, &batch.word_entries, classes)?
            };
            (soft_cross_entropy(&class_logits, &class_target)? + within)?
        }
    };
    let word = (word.sum_all()? * (1.0 / wdiv))?;
    let replace = add_columns(&z.matmul(&rw.t()?)?, rb)?;
    let rdiv = if batch.total_weight > 0.0 { batch.total_weight as f64 } else { 1.0 };
    let rep = (soft_cross_entropy(&replace, &batch.replace_target)?.sum_all()? * (1.0 / rdiv))?;
    let total = (&word + (&rep * lambda as f64)?)?;
    Ok((total, word, rep))
}

/// How many threads [`training_pool`] starts: candle's thread count, which comes from
/// `RAYON_NUM_THREADS`, else the number of physical cores.
pub fn training_threads() -> usize {
    candle_core::utils::get_num_threads().max(1)
}

/// The threads a training step runs on: a pool of candle's thread count
/// (`candle_core::utils::get_num_threads()`, i.e. `RAYON_NUM_THREADS` or the physical cores).
///
/// Run [`train_step`] inside it with `pool.install(..)`. Why: candle's matmuls (the `gemm`
/// crate) and this crate's row loops fork onto the *current* rayon pool. Called from a thread
/// outside any pool, every one of those hundreds of forks per step hands its work to the global
/// pool and puts the caller to sleep until it is done, so the serial parts of a step (candle's
/// gradient bookkeeping, small ops) and the parallel parts never share a core well. On a worker
/// of this pool the calling thread takes its share of each fork itself; on two cores that was
/// 1.1–1.2× more samples/s (docs/training.md).
///
/// Its threads flush subnormal floats to zero (`laya_kernels::flush_denormals`): attention
/// probabilities and gradients that underflow otherwise cost Intel CPUs a microcode assist per
/// operation (docs/training.md, "Throughput").
///
/// ```
/// let pool = laya_train::training_pool().unwrap();
/// assert!(pool.current_num_threads() >= 1);
/// assert_eq!(pool.install(|| 6 * 7), 42);
/// ```
pub fn training_pool() -> Result<rayon::ThreadPool> {
    let n = training_threads();
    rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(|i| format!("laya-train-{i}"))
        .start_handler(|_| laya_kernels::flush_denormals())
        .build()
        .map_err(|e| TrainError::Config(format!("cannot start {n} training threads: {e}")))
}

/// One optimisation step on `batch`: forward, backward, gradient clipping, AdamW.
/// The embedding gradient is taken at the gathered rows and kept row-sparse.
///
/// On a pool of several threads (run it inside [`training_pool`]) the batch is cut into
/// [`shard_count`] shards ([`Batch::shard`]) whose forward and backward passes run side by
/// side, each its own candle graph over the shared parameters; their gradients are summed
/// before the optimiser step. Why: a step is hundreds of candle operations plus serial gradient
/// bookkeeping, and parallelising inside each operation gained only 1.1–1.4× from a second
/// core; whole shards keep every core busy (docs/training.md, Throughput). For them to really
/// run side by side, candle's own elementwise thread pool must be off (see
/// [`configure_candle_threads`]): it serves one caller at a time. The summed gradient equals the
/// whole batch's up to float rounding, so runs on different thread counts differ in the last
/// bits; a run on the same machine and thread count is repeatable.
pub fn train_step(net: &LayaNet, opt: &mut AdamW, batch: &Batch, cfg: &TrainConfig, lr: f64) -> Result<(LossParts, f64)> {
    let (parts, grads) = batch_grads(net, batch, cfg)?;
    Ok((parts, apply_grads(net, opt, &grads, cfg, lr)?))
}

/// Clips `grads` to `cfg.grad_clip` and takes the AdamW step; returns the norm before clipping.
fn apply_grads(net: &LayaNet, opt: &mut AdamW, grads: &Grads, cfg: &TrainConfig, lr: f64) -> Result<f64> {
    let norm = AdamW::grad_norm(grads)?;
    let scale = if cfg.grad_clip > 0.0 && norm > cfg.grad_clip { (cfg.grad_clip / norm) as f32 } else { 1.0 };
    opt.step(net.params(), grads, lr, scale)?;
    Ok(norm)
}

/// The losses and gradients of [`train_step`], before clipping and the optimiser step.
fn batch_grads(net: &LayaNet, batch: &Batch, cfg: &TrainConfig) -> Result<(LossParts, Grads)> {
    // A GPU takes the whole batch in one graph: it is the device, not the threads, that runs it.
    let shards = if net.device().is_cpu() { shard_count(batch.size, rayon::current_num_threads()) } else { 1 };
    let ranges: Vec<std::ops::Range<usize>> = (0..shards).map(|k| (k * batch.size / shards)..((k + 1) * batch.size / shards)).collect();
    // The table rows each shard gathered, in shard order: where the gradients' rows are.
    let s = net.config().seq_len();
    // Without an output memory they are the batch's rows, in order.
    let gathered: std::borrow::Cow<[u32]> = match net.config().memory {
        None => std::borrow::Cow::Borrowed(&batch.rows),
        Some(_) => ranges.iter().flat_map(|r| net.config().gathered_rows(&batch.rows[r.start * s..r.end * s]).into_owned()).collect(),
    };
    let (parts, grads) = if shards == 1 {
        shard_grads(net, batch, cfg)?
    } else {
        let results: Vec<Result<(LossParts, ShardGrads)>> =
            ranges.par_iter().map(|r| shard_grads(net, &batch.shard(r.clone())?, cfg)).collect();
        let mut parts = LossParts::default();
        let (mut dense, mut leaf) = (Vec::with_capacity(shards), Vec::new());
        // In shard order, so that a run is repeatable.
        for res in results {
            let (p, g) = res?;
            parts.total += p.total;
            parts.word += p.word;
            parts.replace += p.replace;
            dense.push(g.dense);
            leaf.extend_from_slice(&g.leaf);
        }
        (parts, ShardGrads { dense: crate::shards::sum_in_shard_order(dense)?, leaf, leaf_device: None })
    };
    let mut out = Grads { dense: grads.dense, ..Grads::default() };
    match &grads.leaf_device {
        Some(g) => out.add_embedding_rows_on_device(&gathered, g)?,
        None => out.add_embedding_rows(&gathered, &grads.leaf, net.config().d_model),
    }
    Ok((parts, out))
}

/// How many shards [`train_step`] cuts a batch of `batch_size` samples into on `threads`
/// threads: one per thread, but no shard smaller than 32 samples (a floor chosen, not tuned:
/// tiny shards would spend more on their own graph than their matrices take).
///
/// ```
/// use laya_train::shard_count;
/// assert_eq!(shard_count(512, 1), 1);
/// assert_eq!(shard_count(512, 2), 2);
/// assert_eq!(shard_count(64, 16), 2);
/// assert_eq!(shard_count(8, 4), 1);
/// ```
pub fn shard_count(batch_size: usize, threads: usize) -> usize {
    threads.min(batch_size / 32).max(1)
}

/// Turns candle's elementwise thread pool off (`CANDLE_NUM_THREADS=1`) unless the user set
/// `CANDLE_NUM_THREADS`, so that [`train_step`]'s shards run side by side: that pool serves one
/// caller at a time and its workers spin between calls, so with it on, two shards took turns.
/// Matrix products still use every thread of [`training_pool`].
///
/// Call it first thing in `main`, before any thread is started and before any candle operation
/// (candle reads the variable once): it sets a process environment variable.
///
/// ```
/// laya_train::configure_candle_threads();
/// assert!(std::env::var_os("CANDLE_NUM_THREADS").is_some());
/// ```
pub fn configure_candle_threads() {
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        std::env::set_var("CANDLE_NUM_THREADS", "1");
    }
}

/// One shard's gradients: dense per parameter, and the gathered embedding rows' gradients
/// (`rows · d` values in the shard's row order), on the host for a CPU step, as a `[rows, d]`
/// tensor on the device for a GPU step (one shard only).
struct ShardGrads {
    dense: Vec<Option<Tensor>>,
    leaf: Vec<f32>,
    leaf_device: Option<Tensor>,
}

fn shard_grads(net: &LayaNet, batch: &Batch, cfg: &TrainConfig) -> Result<(LossParts, ShardGrads)> {
    let gathered = net.gather_rows(&batch.rows)?;
    let leaf = Var::from_tensor(&gathered)?;
    let z = net.forward_hidden(leaf.as_tensor(), &batch.rows)?;
    let (total, word, rep) = fused_loss_tensors(net, &z, batch, cfg.replace_loss_weight)?;
    let mut store = total.backward()?;
    let dense =
        net.params().iter().map(|p| if p.kind == ParamKind::TokenEmbedding { None } else { store.remove(p.var.as_tensor()) }).collect();
    // The loss always depends on the gathered rows; zeros keep the shards' rows aligned if not.
    let d = net.config().d_model;
    let (leaf, leaf_device) = match (store.remove(leaf.as_tensor()), net.device().is_cpu()) {
        (Some(g), true) => (g.flatten_all()?.to_vec1()?, None),
        (None, true) => (vec![0.0; gathered.dim(0)? * d], None),
        (Some(g), false) => (Vec::new(), Some(g)),
        (None, false) => (Vec::new(), Some(Tensor::zeros((gathered.dim(0)?, d), candle_core::DType::F32, net.device())?)),
    };
    // One read-back for the three losses.
    let losses: Vec<f32> = Tensor::stack(&[&total, &word, &rep], 0)?.to_vec1()?;
    let parts = LossParts { total: losses[0], word: losses[1], replace: losses[2] };
    Ok((parts, ShardGrads { dense, leaf, leaf_device }))
}

/// Validation result of one pass over the validation events (losses weighted by `Event::weight`,
/// accuracies unweighted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ValidReport {
    /// Mean losses (the word loss over events with an in-lexicon click).
    pub loss: LossParts,
    /// Share of in-lexicon clicks ranked first by the word head.
    pub top1: f32,
    /// Share of in-lexicon clicks among the word head's first five.
    pub top5: f32,
    /// Share of clicks whose replace class the replace head ranks first.
    pub replace_acc: f32,
    /// Events evaluated.
    pub events: usize,
}

/// One validation chunk's sums (see [`evaluate`]).
#[derive(Default)]
struct EvalSums {
    wsum: f64,
    wn: f64,
    rsum: f64,
    rn: f64,
    top1: usize,
    top5: usize,
    in_lex: usize,
    racc: usize,
}

/// Losses and accuracies of `net` on an encoded set (no gradients).
pub fn evaluate(net: &LayaNet, set: &EncodedSet, cfg: &TrainConfig, batch_size: usize) -> Result<ValidReport> {
    let (v, c) = (net.config().vocab(), net.config().replace_classes);
    let idx: Vec<usize> = (0..set.len()).collect();
    // Chunks run side by side on the current pool, like the training step's shards, and their
    // partial sums are added in chunk order, so the report does not depend on the thread count.
    let parts: Vec<Result<EvalSums>> = idx
        .par_chunks(batch_size.max(1))
        .map(|chunk| {
            let batch = make_batch(set, chunk, v, c, net.device())?;
            let rows = Tensor::from_slice(&batch.rows, (batch.size, set.t), net.device())?;
            let (w, r) = net.forward(&rows)?;
            let (_, word, rep) = loss_tensors(&w, &r, &batch, cfg.replace_loss_weight)?;
            let mut e = EvalSums {
                wsum: word.to_scalar::<f32>()? as f64 * batch.word_weight as f64,
                wn: batch.word_weight as f64,
                rsum: rep.to_scalar::<f32>()? as f64 * batch.total_weight as f64,
                rn: batch.total_weight as f64,
                ..EvalSums::default()
            };
            let wl: Vec<Vec<f32>> = w.to_vec2()?;
            let rl: Vec<Vec<f32>> = r.to_vec2()?;
            for k in 0..batch.size {
                if let Some(cw) = batch.clicked_word[k] {
                    e.in_lex += 1;
                    let target = wl[k][cw as usize];
                    let better = wl[k].iter().filter(|&&x| x > target).count();
                    e.top1 += (better == 0) as usize;
                    e.top5 += (better < 5) as usize;
                }
                let rc = batch.replace_class[k] as usize;
                let better = rl[k].iter().filter(|&&x| x > rl[k][rc]).count();
                e.racc += (better == 0) as usize;
            }
            Ok(e)
        })
        .collect();
    let mut t = EvalSums::default();
    for p in parts {
        let p = p?;
        t.wsum += p.wsum;
        t.wn += p.wn;
        t.rsum += p.rsum;
        t.rn += p.rn;
        t.top1 += p.top1;
        t.top5 += p.top5;
        t.in_lex += p.in_lex;
        t.racc += p.racc;
    }
    let EvalSums { wsum, wn, rsum, rn, top1, top5, in_lex, racc } = t;
    let n = set.len().max(1);
    let word = (wsum / wn.max(1e-12)) as f32;
    let replace = (rsum / rn.max(1e-12)) as f32;
    Ok(ValidReport {
        loss: LossParts { total: word + cfg.replace_loss_weight * replace, word, replace },
        top1: top1 as f32 / in_lex.max(1) as f32,
        top5: top5 as f32 / in_lex.max(1) as f32,
        replace_acc: racc as f32 / n as f32,
        events: set.len(),
    })
}

/// Progress after a logged step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepReport {
    /// Epoch (0-based).
    pub epoch: usize,
    /// Optimiser steps taken so far.
    pub step: usize,
    /// Total steps planned.
    pub total_steps: usize,
    /// Mean training loss since the last report.
    pub loss: LossParts,
    /// Learning rate of the last step.
    pub lr: f64,
    /// Gradient norm before clipping.
    pub grad_norm: f64,
    /// Training throughput since the last report.
    pub samples_per_sec: f64,
    /// Estimated seconds to the end of the planned steps.
    pub eta_secs: f64,
}

/// The result of one epoch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EpochReport {
    /// Epoch (0-based).
    pub epoch: usize,
    /// Optimiser steps at its end.
    pub step: usize,
    /// Mean training loss over the epoch (the part run in this process when resumed mid-epoch).
    pub train_loss: f32,
    /// Validation result.
    pub valid: ValidReport,
    /// Training samples per second in this epoch.
    pub samples_per_sec: f64,
    /// Wall-clock seconds of the epoch (training and validation).
    pub secs: f64,
    /// Whether this is the best validation loss so far.
    pub best: bool,
    /// Where the epoch's training time went.
    #[serde(default)]
    pub phases: Phases,
}

/// Seconds of an epoch's steps by phase (docs/training.md, "Several GPUs").
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Phases {
    /// Gathering batches from the encoded samples (the data loading).
    pub batching: f64,
    /// Forward, backward and the optimiser step.
    pub compute: f64,
    /// A data-parallel rank's sums with the others (the loss divisors before the step, the
    /// gradients after the backward pass), from the moment its own backward pass has finished.
    pub reduce: f64,
}

/// One line per epoch, as the command line prints it.
///
/// ```
/// use laya_train::{EpochReport, LossParts, ValidReport};
/// let valid = ValidReport { loss: LossParts { total: 2.5, word: 2.0, replace: 0.5 }, top1: 0.25, top5: 0.5, replace_acc: 0.9, events: 10 };
/// let r = EpochReport { epoch: 0, step: 10, train_loss: 3.0, valid, samples_per_sec: 1.0, secs: 1.0, best: true, phases: Default::default() };
/// assert_eq!(r.to_string(), "epoch 1: train loss 3.0000, valid loss 2.5000, valid top1 25.00% top5 50.00% (best)");
/// ```
impl std::fmt::Display for EpochReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "epoch {}: train loss {:.4}, valid loss {:.4}, valid top1 {:.2}% top5 {:.2}%{}",
            self.epoch + 1,
            self.train_loss,
            self.valid.loss.total,
            100.0 * self.valid.top1,
            100.0 * self.valid.top5,
            if self.best { " (best)" } else { "" }
        )
    }
}

/// Callbacks the loop calls; every method has a do-nothing default.
pub trait TrainHooks {
    /// Called every `log_every` steps.
    fn on_step(&mut self, _r: &StepReport) {}
    /// Called after each epoch's validation.
    fn on_epoch(&mut self, _r: &EpochReport) {}
    /// Polled before every batch: return true to stop cleanly (a checkpoint is written first).
    fn should_stop(&mut self) -> bool {
        false
    }
}

/// Hooks that do nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHooks;
impl TrainHooks for NoHooks {}

/// Hooks that print one line per report to stderr and stop when `stop` is set (for example
/// by a Ctrl-C handler the binary installs).
#[derive(Debug, Default, Clone)]
pub struct PrintHooks {
    /// Set to stop at the next batch.
    pub stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl TrainHooks for PrintHooks {
    fn on_step(&mut self, r: &StepReport) {
        eprintln!(
            "epoch {:>3} step {:>7}/{} loss {:.4} (word {:.4} replace {:.4}) lr {:.2e} |g| {:.3} {:.0} samples/s eta {}",
            r.epoch + 1,
            r.step,
            r.total_steps,
            r.loss.total,
            r.loss.word,
            r.loss.replace,
            r.lr,
            r.grad_norm,
            r.samples_per_sec,
            fmt_secs(r.eta_secs)
        );
    }
    fn on_epoch(&mut self, r: &EpochReport) {
        eprintln!("{r}");
    }
    fn should_stop(&mut self) -> bool {
        self.stop.load(std::sync::atomic::Ordering::Relaxed)
    }
}

fn fmt_secs(s: f64) -> String {
    let s = s.max(0.0) as u64;
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// Where checkpoints go, whether to continue from one, and the device.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Directory for `model.safetensors`, `optimizer.safetensors`, `state.json`,
    /// `best.safetensors` and `loss.svg`. `None` keeps everything in memory.
    pub checkpoint_dir: Option<PathBuf>,
    /// Continue from the checkpoint in `checkpoint_dir` (its configs must match).
    pub resume: bool,
    /// Also checkpoint every this many steps (0: only at epoch ends and on stop).
    pub checkpoint_every: usize,
    /// Where the steps run: the CPU (the default) or a GPU (`candle_core::Device::new_cuda(i)`,
    /// with the `cuda` feature; see [`crate::parse_device`]). The network is copied there
    /// before the first step; the result comes back on it.
    pub device: candle_core::Device,
    /// Stop once training has run this long (counted from the first step of this call), as if
    /// the epochs had ended there: the epoch cut short is validated, the best weights are kept
    /// and the run is finished ([`StopReason::TimeLimit`]). The learning rate decays by
    /// whichever of the steps and the time is further along ([`crate::lr_at_time`]), so it
    /// reaches its floor at the limit. For a machine lent for a fixed time.
    pub time_limit: Option<std::time::Duration>,
    /// Data parallelism: this run is one rank of a group (docs/training.md, "Several GPUs"),
    /// given its own shard of the events (`train_events`: event `i` of the log goes to rank
    /// `i mod N`, [`crate::deal`]) and drawing `batch_size` samples a step from it. The ranks'
    /// gradients and losses are summed every step, so each takes the step one device would
    /// take on the union of their batches; rank 0 alone validates and writes checkpoints. Every
    /// rank must start from the same weights and settings.
    pub parallel: Option<std::rc::Rc<dyn crate::Reducer>>,
    /// In one process, deal the events into this many shards and draw `batch_size / S` from
    /// each a step: the order in which `S` ranks with a batch of `batch_size / S` each would
    /// see them (to check such a run on one device). 0 or 1: one permutation of all events.
    pub data_shards: usize,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            checkpoint_dir: None,
            resume: false,
            checkpoint_every: 0,
            device: candle_core::Device::Cpu,
            time_limit: None,
            parallel: None,
            data_shards: 0,
        }
    }
}

/// Everything the loop needs to continue after an interruption (`state.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainState {
    /// Current epoch (0-based).
    pub epoch: usize,
    /// Batches of the current epoch already done.
    pub batch_in_epoch: usize,
    /// Optimiser steps taken.
    pub step: usize,
    /// Best validation loss so far.
    pub best_valid: Option<f32>,
    /// Epoch of the best validation loss.
    pub best_epoch: Option<usize>,
    /// Epochs since the best.
    pub bad_epochs: usize,
    /// `(step, mean training loss)` every `log_every` steps.
    pub train_curve: Vec<(usize, f32)>,
    /// Every finished epoch.
    pub epochs: Vec<EpochReport>,
    /// True when early stopping or the epoch limit ended the run.
    pub finished: bool,
    /// Batches per epoch of the run that wrote this state (0: not recorded). A run resumed
    /// with other shards (another number of GPUs) starts its epoch at the same fraction.
    #[serde(default)]
    pub batches_per_epoch: usize,
}

/// What [`train`] returns.
#[derive(Debug)]
pub struct TrainOutcome {
    /// The network with the weights of the best validation epoch (the last weights when there
    /// was no validation).
    pub net: LayaNet,
    /// The full history.
    pub state: TrainState,
    /// How the events were encoded.
    pub train_stats: EncodeStats,
    /// How the validation events were encoded.
    pub valid_stats: EncodeStats,
    /// Why the run ended.
    pub stop_reason: StopReason,
}

/// Why [`train`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// All epochs ran.
    Epochs,
    /// Validation loss stopped improving for `patience` epochs.
    EarlyStop,
    /// The hooks asked to stop (a checkpoint was written when a directory was given).
    Interrupted,
    /// [`RunOptions::time_limit`] was reached; the run is finished.
    TimeLimit,
}

fn snapshot(net: &LayaNet) -> Result<Vec<Tensor>> {
    net.params().iter().map(|p| Ok(p.var.as_tensor().copy()?)).collect()
}

fn restore_snapshot(net: &LayaNet, snap: &[Tensor]) -> Result<()> {
    for (p, t) in net.params().iter().zip(snap) {
        p.var.set(t)?;
    }
    Ok(())
}

/// Trains a network on click events.
///
/// ```
/// use laya_train::{train, Event, Mapping, ModelConfig, NoHooks, RunOptions, Shown, TrainConfig};
/// let words: Vec<String> = ["天气", "不错"].iter().map(|s| s.to_string()).collect();
/// let mut mc = ModelConfig::standard(words, vec![1, 1], Mapping::Table(vec![]));
/// mc.d_model = 32;
/// mc.ffn = vec![32];
/// let ev = |c: &str, w: &str| Event { context: c.into(), shown: vec![Shown { word: w.into(), replace: 0 }], clicked: Some(0), weight: 1.0 };
/// let events = vec![ev("今天", "天气"), ev("天气", "不错")];
/// let tc = TrainConfig { epochs: 2, batch_size: 2, warmup_steps: 1, ..TrainConfig::default() };
/// let out = train(mc, tc, &events, &events, &RunOptions::default(), &mut NoHooks).unwrap();
/// assert_eq!(out.state.epochs.len(), 2);
/// ```
pub fn train(
    model_cfg: ModelConfig,
    cfg: TrainConfig,
    train_events: &[Event],
    valid_events: &[Event],
    opts: &RunOptions,
    hooks: &mut dyn TrainHooks,
) -> Result<TrainOutcome> {
    cfg.validate()?;
    model_cfg.validate()?;
    let net = LayaNet::new(model_cfg, cfg.seed)?;
    train_from(net, cfg, train_events, valid_events, opts, hooks)
}

/// Trains an existing network further (for example one that [`crate::prune()`] shrank, or one
/// read back with [`LayaNet::from_laya`]): the same loop as [`train`], starting from `net`'s
/// weights and fresh optimiser moments. With `opts.resume` the checkpoint's weights replace
/// `net`'s, as in [`train`].
///
/// ```
/// use laya_train::{train_from, Event, LayaNet, Mapping, ModelConfig, NoHooks, RunOptions, Shown, TrainConfig};
/// let words: Vec<String> = ["天气", "不错"].iter().map(|s| s.to_string()).collect();
/// let mut mc = ModelConfig::standard(words, vec![1, 1], Mapping::Table(vec![]));
/// mc.d_model = 32;
/// mc.ffn = vec![32];
/// let net = LayaNet::new(mc, 3).unwrap();
/// let ev = |c: &str, w: &str| Event { context: c.into(), shown: vec![Shown { word: w.into(), replace: 0 }], clicked: Some(0), weight: 1.0 };
/// let events = vec![ev("今天", "天气"), ev("天气", "不错")];
/// let tc = TrainConfig { epochs: 1, batch_size: 2, warmup_steps: 1, ..TrainConfig::default() };
/// let out = train_from(net, tc, &events, &events, &RunOptions::default(), &mut NoHooks).unwrap();
/// assert_eq!(out.state.epochs.len(), 1);
/// ```
pub fn train_from(
    net: LayaNet,
    cfg: TrainConfig,
    train_events: &[Event],
    valid_events: &[Event],
    opts: &RunOptions,
    hooks: &mut dyn TrainHooks,
) -> Result<TrainOutcome> {
    cfg.validate()?;
    let model_cfg = net.config().clone();
    model_cfg.validate()?;
    let net = if net.device().same_device(&opts.device) { net } else { net.to_device(&opts.device)? };
    let mut opt = AdamW::new(net.params(), &cfg)?;
    let mut state = TrainState::default();
    if let Some(dir) = &opts.checkpoint_dir {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    }
    if opts.resume {
        let dir = opts.checkpoint_dir.as_deref().ok_or_else(|| TrainError::Checkpoint("resume needs a checkpoint directory".into()))?;
        state = load_checkpoint(dir, &net, &mut opt, &model_cfg, &cfg)?;
    }
    let reducer = opts.parallel.as_deref();
    // Rank 0 (or a run of one) validates and writes; every rank takes the same steps.
    let leader = reducer.is_none_or(|r| r.rank() == 0);
    let shards = if reducer.is_some() { 1 } else { opts.data_shards.max(1) };
    let (trainset, lens) = match shards {
        1 => {
            let set = encode_events(train_events, &model_cfg, &cfg);
            let n = set.len();
            (set, vec![n])
        }
        _ => {
            let mut all = EncodedSet { t: model_cfg.seq_len(), ..EncodedSet::default() };
            let mut lens = Vec::with_capacity(shards);
            for shard in crate::deal(train_events.to_vec(), shards) {
                let set = encode_events(&shard, &model_cfg, &cfg);
                lens.push(set.len());
                crate::parallel::append(&mut all, set);
            }
            (all, lens)
        }
    };
    let validset = if leader { encode_events(valid_events, &model_cfg, &cfg) } else { EncodedSet::default() };
    let validates = !valid_events.is_empty();
    if trainset.is_empty() {
        return Err(TrainError::NoData(format!(
            "none of the {} training events has a valid click ({:?})",
            train_events.len(),
            trainset.stats
        )));
    }
    let (v, c) = (model_cfg.vocab(), model_cfg.replace_classes);
    let pool = training_pool()?;
    let plan = match reducer {
        Some(r) => {
            crate::parallel::Plan::rank(r.rank(), &crate::parallel::shard_lengths(r, trainset.len(), net.device())?, cfg.batch_size)?
        }
        None if shards > 1 => crate::parallel::Plan::emulated(&lens, cfg.batch_size)?,
        None => crate::parallel::Plan::whole(trainset.len(), cfg.batch_size),
    };
    let per_epoch = plan.per_epoch();
    if state.batches_per_epoch > 0 && state.batches_per_epoch != per_epoch {
        // Resumed with other shards: the same fraction of the epoch in the new order.
        state.batch_in_epoch = state.batch_in_epoch * per_epoch / state.batches_per_epoch;
    }
    state.batches_per_epoch = per_epoch;
    let total_steps = per_epoch * cfg.epochs;
    let mut best: Option<Vec<Tensor>> = None;
    if let (Some(dir), true) = (&opts.checkpoint_dir, state.best_valid.is_some()) {
        let p = dir.join("best.safetensors");
        if p.exists() {
            let map = candle_core::safetensors::load(&p, net.device())?;
            best = Some(
                net.params()
                    .iter()
                    .map(|p| map.get(&p.name).cloned().ok_or_else(|| TrainError::Checkpoint(format!("best.safetensors lacks {}", p.name))))
                    .collect::<Result<_>>()?,
            );
        }
    }
    let mut stop_reason = StopReason::Epochs;
    let t_run = Instant::now();
    let time_used = || opts.time_limit.map_or(0.0, |l| t_run.elapsed().as_secs_f64() / l.as_secs_f64().max(1e-9));
    'epochs: while state.epoch < cfg.epochs && !state.finished {
        let epoch = state.epoch;
        let orders = plan.orders(cfg.seed, epoch);
        let mut phases = Phases::default();
        let t_epoch = Instant::now();
        let (mut ep_loss, mut ep_n, mut ep_samples) = (0f64, 0usize, 0usize);
        let (mut acc, mut acc_n, mut acc_samples, mut t_log) = (LossParts::default(), 0usize, 0usize, Instant::now());
        let mut last_norm = 0.0;
        let mut lr = 0.0;
        while state.batch_in_epoch < per_epoch {
            let t_batch = Instant::now();
            let idx = plan.batch(&orders, state.batch_in_epoch);
            let mut batch = make_batch(&trainset, &idx, v, c, net.device())?;
            phases.batching += t_batch.elapsed().as_secs_f64();
            let (mut stop, mut time_fraction, mut samples) = (hooks.should_stop(), time_used(), batch.size);
            if let Some(r) = reducer {
                let t_reduce = Instant::now();
                (stop, time_fraction, samples) = crate::parallel::agree_on_step(r, &mut batch, stop, time_fraction, net.device())?;
                phases.reduce += t_reduce.elapsed().as_secs_f64();
            }
            if stop {
                stop_reason = StopReason::Interrupted;
                break 'epochs;
            }
            if time_fraction >= 1.0 {
                stop_reason = StopReason::TimeLimit;
                break;
            }
            lr = lr_at_time(state.step, total_steps, time_fraction, &cfg);
            let t_compute = Instant::now();
            let (mut parts, mut grads) = pool.install(|| batch_grads(&net, &batch, &cfg))?;
            if let Some(r) = reducer {
                // The backward pass's kernels count as compute, not as waiting for the others.
                net.device().synchronize()?;
                let t_reduce = Instant::now();
                (grads, parts) = crate::parallel::sum_grads(r, &net, grads, parts)?;
                phases.reduce += t_reduce.elapsed().as_secs_f64();
                phases.compute -= t_reduce.elapsed().as_secs_f64();
            }
            let norm = pool.install(|| apply_grads(&net, &mut opt, &grads, &cfg, lr))?;
            phases.compute += t_compute.elapsed().as_secs_f64();
            if !parts.total.is_finite() {
                return Err(TrainError::NoData(format!(
                    "training diverged at step {} (loss {}); lower the learning rate",
                    state.step, parts.total
                )));
            }
            last_norm = norm;
            state.step += 1;
            state.batch_in_epoch += 1;
            ep_loss += parts.total as f64;
            ep_n += 1;
            ep_samples += samples;
            acc.total += parts.total;
            acc.word += parts.word;
            acc.replace += parts.replace;
            acc_n += 1;
            acc_samples += samples;
            if acc_n >= cfg.log_every.max(1) {
                let secs = t_log.elapsed().as_secs_f64().max(1e-9);
                let sps = acc_samples as f64 / secs;
                let k = acc_n as f32;
                let mean = LossParts { total: acc.total / k, word: acc.word / k, replace: acc.replace / k };
                state.train_curve.push((state.step, mean.total));
                hooks.on_step(&StepReport {
                    epoch,
                    step: state.step,
                    total_steps,
                    loss: mean,
                    lr,
                    grad_norm: norm,
                    samples_per_sec: sps,
                    eta_secs: opts
                        .time_limit
                        .map_or(f64::INFINITY, |l| l.as_secs_f64() - t_run.elapsed().as_secs_f64())
                        .max(0.0)
                        .min((total_steps - state.step.min(total_steps)) as f64 * cfg.batch_size as f64 / sps),
                });
                acc = LossParts::default();
                acc_n = 0;
                acc_samples = 0;
                t_log = Instant::now();
            }
            if opts.checkpoint_every > 0 && state.step % opts.checkpoint_every == 0 && leader {
                if let Some(dir) = &opts.checkpoint_dir {
                    save_checkpoint(dir, &net, &opt, &model_cfg, &cfg, &state)?;
                }
            }
        }
        let _ = (last_norm, lr);
        let train_secs = t_epoch.elapsed().as_secs_f64();
        let valid = if validset.is_empty() { ValidReport::default() } else { pool.install(|| evaluate(&net, &validset, &cfg, 256))? };
        let valid = match reducer {
            Some(r) => crate::parallel::share_report(r, leader.then_some(valid), net.device())?,
            None => valid,
        };
        let validates = validates && valid.events > 0;
        let is_best = validates && state.best_valid.is_none_or(|b| valid.loss.total < b);
        if is_best {
            state.best_valid = Some(valid.loss.total);
            state.best_epoch = Some(epoch);
            state.bad_epochs = 0;
            best = Some(snapshot(&net)?);
            if let (Some(dir), true) = (&opts.checkpoint_dir, leader) {
                save_tensors(&dir.join("best.safetensors"), &net, None)?;
            }
        } else if validates {
            state.bad_epochs += 1;
        }
        let report = EpochReport {
            epoch,
            step: state.step,
            train_loss: (ep_loss / ep_n.max(1) as f64) as f32,
            valid,
            samples_per_sec: ep_samples as f64 / train_secs.max(1e-9),
            secs: t_epoch.elapsed().as_secs_f64(),
            best: is_best,
            phases,
        };
        state.epochs.push(report);
        hooks.on_epoch(&report);
        state.epoch += 1;
        state.batch_in_epoch = 0;
        if cfg.patience > 0 && state.bad_epochs >= cfg.patience {
            stop_reason = StopReason::EarlyStop;
            state.finished = true;
        }
        if state.epoch >= cfg.epochs {
            state.finished = true;
        } else if !state.finished && (stop_reason == StopReason::TimeLimit || time_used() >= 1.0) {
            stop_reason = StopReason::TimeLimit;
            state.finished = true;
        }
        if let (Some(dir), true) = (&opts.checkpoint_dir, leader) {
            save_checkpoint(dir, &net, &opt, &model_cfg, &cfg, &state)?;
            write_file(&dir.join("loss.svg"), loss_svg(&state).as_bytes())?;
        }
    }
    if stop_reason == StopReason::Interrupted {
        if let (Some(dir), true) = (&opts.checkpoint_dir, leader) {
            save_checkpoint(dir, &net, &opt, &model_cfg, &cfg, &state)?;
            write_file(&dir.join("loss.svg"), loss_svg(&state).as_bytes())?;
        }
    } else if let Some(b) = &best {
        restore_snapshot(&net, b)?;
    }
    Ok(TrainOutcome { net, state, train_stats: trainset.stats, valid_stats: validset.stats, stop_reason })
}

/// A minimal standalone SVG of the training loss (per logged step) and the validation loss
/// (per epoch).
pub fn loss_svg(state: &TrainState) -> String {
    let (w, h, ml, mr, mt, mb) = (720.0, 360.0, 60.0, 20.0, 30.0, 40.0);
    let valid: Vec<(f64, f64)> = state.epochs.iter().map(|e| (e.step as f64, e.valid.loss.total as f64)).collect();
    let train: Vec<(f64, f64)> = state.train_curve.iter().map(|&(s, l)| (s as f64, l as f64)).collect();
    let all = train.iter().chain(valid.iter()).filter(|p| p.1.is_finite());
    let (mut x1, mut y0, mut y1) = (1.0f64, f64::INFINITY, f64::NEG_INFINITY);
    for &(x, y) in all {
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if !y0.is_finite() {
        (y0, y1) = (0.0, 1.0);
    }
    if y1 - y0 < 1e-6 {
        y1 = y0 + 1.0;
    }
    let px = |x: f64| ml + (w - ml - mr) * x / x1;
    let py = |y: f64| mt + (h - mt - mb) * (1.0 - (y - y0) / (y1 - y0));
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{ml}\" y=\"18\">loss (blue: train, red: validation) vs. step</text>\n\
         <line x1=\"{ml}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"black\"/>\n\
         <line x1=\"{ml}\" y1=\"{mt}\" x2=\"{ml}\" y2=\"{b}\" stroke=\"black\"/>\n",
        b = h - mb,
        r = w - mr
    );
    for i in 0..=4 {
        let y = y0 + (y1 - y0) * i as f64 / 4.0;
        let x = x1 * i as f64 / 4.0;
        s += &format!(
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{y:.3}</text>\n<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
            ml - 4.0,
            py(y) + 4.0,
            px(x),
            h - mb + 16.0,
            x.round() as u64
        );
    }
    let line = |pts: &[(f64, f64)], color: &str| -> String {
        if pts.is_empty() {
            return String::new();
        }
        let p: Vec<String> = pts.iter().map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y))).collect();
        let dots: String =
            pts.iter().map(|&(x, y)| format!("<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"{color}\"/>", px(x), py(y))).collect();
        format!("<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"/>\n{dots}\n", p.join(" "))
    };
    s += &line(&train, "#1f77b4");
    s += &line(&valid, "#d62728");
    s += "</svg>\n";
    s
}

/// The per-epoch summary as a plain-text table.
pub fn summary_table(state: &TrainState) -> String {
    let mut s = String::from("epoch  step     train    valid    word     replace  top1     top5     samples/s  secs\n");
    for e in &state.epochs {
        s += &format!(
            "{:<6} {:<8} {:<8.4} {:<8.4} {:<8.4} {:<8.4} {:<7.2}% {:<7.2}% {:<10.0} {:.1}{}\n",
            e.epoch + 1,
            e.step,
            e.train_loss,
            e.valid.loss.total,
            e.valid.loss.word,
            e.valid.loss.replace,
            100.0 * e.valid.top1,
            100.0 * e.valid.top5,
            e.samples_per_sec,
            e.secs,
            if e.best { "  *best" } else { "" }
        );
    }
    s
}
