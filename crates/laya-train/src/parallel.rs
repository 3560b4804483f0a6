//! Data-parallel training (docs/training.md, "Several GPUs"): ranks that each train on their own
//! shard of the events and sum their gradients every step, so that every rank takes the same
//! optimiser step, the one a single device would take on the union of their batches.
//!
//! The sum is a [`Reducer`]: NCCL's all-reduce on GPUs (`cuda::NcclRank`, feature `cuda`), or
//! [`LocalGroup`], threads of one process summing through shared memory, which the CPU uses and
//! the tests compare against a single device.

use crate::data::{Batch, EncodedSet};
use crate::error::{Result, TrainError};
use crate::model::{LayaNet, ParamKind};
use crate::optim::Grads;
use crate::rng::Rng;
use crate::train::{LossParts, ValidReport};
use candle_core::{DType, Device, Tensor};
use std::sync::{Arc, Barrier, Mutex};

/// How the ranks of a data-parallel run add up what each computed. Every method is a
/// collective: every rank calls it, in the same order, with tensors of the same shape.
pub trait Reducer: std::fmt::Debug {
    /// This rank, `0..world()`. Rank 0 writes checkpoints and validates.
    fn rank(&self) -> usize;
    /// How many ranks take part.
    fn world(&self) -> usize;
    /// The elementwise sum of `x` (F32, on this rank's device) over the ranks; every rank gets
    /// the same sum.
    fn sum(&self, x: &Tensor) -> Result<Tensor>;
}

/// Ranks that are threads of one process (the CPU's data parallelism, and the twin the tests
/// hold NCCL's runs to): each adds its vector to the others' through shared memory, in rank
/// order, so that every rank gets the same bits.
///
/// ```
/// use laya_train::{LocalGroup, Reducer};
/// use candle_core::{Device, Tensor};
/// let sums: Vec<Vec<f32>> = std::thread::scope(|s| {
///     let ranks = LocalGroup::new(3);
///     let handles: Vec<_> = ranks
///         .into_iter()
///         .map(|r| s.spawn(move || {
///             let x = Tensor::new(&[r.rank() as f32, 1.0], &Device::Cpu).unwrap();
///             r.sum(&x).unwrap().to_vec1::<f32>().unwrap()
///         }))
///         .collect();
///     handles.into_iter().map(|h| h.join().unwrap()).collect()
/// });
/// assert!(sums.iter().all(|s| s == &[3.0, 3.0]));
/// ```
#[derive(Debug)]
pub struct LocalGroup {
    slots: Mutex<Vec<Vec<f32>>>,
    barrier: Barrier,
    world: usize,
}

impl LocalGroup {
    /// The `world` ranks of a new group (at least one), to be moved each to its own thread.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(world: usize) -> Vec<LocalRank> {
        let world = world.max(1);
        let group = Arc::new(LocalGroup { slots: Mutex::new(vec![Vec::new(); world]), barrier: Barrier::new(world), world });
        (0..world).map(|rank| LocalRank { group: Arc::clone(&group), rank }).collect()
    }
}

/// One rank of a [`LocalGroup`].
#[derive(Debug)]
pub struct LocalRank {
    group: Arc<LocalGroup>,
    rank: usize,
}

impl Reducer for LocalRank {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world(&self) -> usize {
        self.group.world
    }

    fn sum(&self, x: &Tensor) -> Result<Tensor> {
        let g = &self.group;
        let mine = x.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
        let poisoned = |_| TrainError::Config("a rank of the local group panicked".into());
        g.slots.lock().map_err(poisoned)?[self.rank] = mine;
        g.barrier.wait();
        let sum = {
            let slots = g.slots.lock().map_err(poisoned)?;
            if slots.iter().any(|s| s.len() != slots[0].len()) {
                return Err(TrainError::Config("the ranks summed tensors of different sizes".into()));
            }
            let mut acc = slots[0].clone();
            for s in &slots[1..] {
                for (a, b) in acc.iter_mut().zip(s) {
                    *a += b;
                }
            }
            acc
        };
        // Nobody writes the next vector before everyone has read this one.
        g.barrier.wait();
        Ok(Tensor::from_vec(sum, x.shape(), x.device())?)
    }
}

/// The sum over the ranks of a few host numbers.
pub(crate) fn sum_host(r: &dyn Reducer, xs: &[f32], device: &Device) -> Result<Vec<f32>> {
    Ok(r.sum(&Tensor::from_slice(xs, xs.len(), device)?)?.to_vec1::<f32>()?)
}

/// Where a run's samples come from and how a batch draws them.
///
/// * One shard (no `data_shards`, no reducer): the whole set in one permutation per epoch,
///   `batch_size` samples a batch, the last batch of an epoch short: the single-device run.
/// * `S` shards in one process (`RunOptions::data_shards`): event `i` went to shard `i mod S`,
///   each shard has its own permutation per epoch, and a batch takes `batch_size / S` samples
///   from each: what `S` ranks with a batch of `batch_size / S` each draw together.
/// * One rank of `N`: this rank's shard only, `batch_size` samples a batch from it.
///
/// Sharded, an epoch has as many batches as the smallest shard fills (its last one short);
/// what the larger shards hold beyond that waits for a later epoch's permutation.
pub(crate) struct Plan {
    /// Per local shard, its first sample in the set and its length.
    shards: Vec<(usize, usize)>,
    /// The index of the first local shard among all shards (a rank's own index).
    first_shard: usize,
    /// Samples per shard per batch.
    per_shard: usize,
    /// Samples of each shard used per epoch: every sample unsharded, else the smallest shard's.
    used: usize,
    sharded: bool,
}

impl Plan {
    /// The single-device plan.
    pub(crate) fn whole(len: usize, batch_size: usize) -> Plan {
        Plan { shards: vec![(0, len)], first_shard: 0, per_shard: batch_size, used: len, sharded: false }
    }

    /// `S` shards of one set, concatenated in shard order with these lengths.
    pub(crate) fn emulated(lens: &[usize], batch_size: usize) -> Result<Plan> {
        let s = lens.len();
        if !batch_size.is_multiple_of(s) {
            return Err(TrainError::Config(format!("a batch of {batch_size} cannot take the same share of {s} data shards")));
        }
        let starts = lens.iter().scan(0, |at, &l| {
            let start = *at;
            *at += l;
            Some((start, l))
        });
        Ok(Plan { shards: starts.collect(), first_shard: 0, per_shard: batch_size / s, used: min_len(lens)?, sharded: true })
    }

    /// Rank `rank`'s own shard of `len` samples, the ranks' lengths being `lens`.
    pub(crate) fn rank(rank: usize, lens: &[usize], batch_size: usize) -> Result<Plan> {
        let len = lens.get(rank).copied().unwrap_or(0);
        // A group of one draws as a single device does.
        Ok(Plan { shards: vec![(0, len)], first_shard: rank, per_shard: batch_size, used: min_len(lens)?, sharded: lens.len() > 1 })
    }

    /// Batches (optimiser steps) per epoch.
    pub(crate) fn per_epoch(&self) -> usize {
        self.used.div_ceil(self.per_shard.max(1))
    }

    /// Each local shard's permutation for `epoch`, a pure function of the seed, the epoch and
    /// the shard's index among all shards (so a resumed run replays the same order).
    pub(crate) fn orders(&self, seed: u64, epoch: usize) -> Vec<Vec<usize>> {
        let stream = |s: usize| if self.sharded { ((s as u64 + 1) << 32) + epoch as u64 } else { epoch as u64 };
        (0..self.shards.len())
            .map(|k| {
                let mut idx: Vec<usize> = (0..self.shards[k].1).collect();
                Rng::new(seed, 0x5EED_0000 + stream(self.first_shard + k)).shuffle(&mut idx);
                idx
            })
            .collect()
    }

    /// The samples of batch `k` of the epoch whose [`Plan::orders`] are `orders`.
    pub(crate) fn batch(&self, orders: &[Vec<usize>], k: usize) -> Vec<usize> {
        let (from, to) = (k * self.per_shard, ((k + 1) * self.per_shard).min(self.used));
        self.shards.iter().zip(orders).flat_map(|(&(start, _), order)| order[from..to].iter().map(move |&i| start + i)).collect()
    }
}

fn min_len(lens: &[usize]) -> Result<usize> {
    match lens.iter().min() {
        Some(&0) | None => Err(TrainError::NoData(format!("a data shard has no usable event (shard sizes {lens:?})"))),
        Some(&m) => Ok(m),
    }
}

/// Deals `items` into `shards` shards, item `i` to shard `i mod shards` (what each rank of a
/// data-parallel run is given, and what [`crate::RunOptions::data_shards`] does in one process).
///
/// ```
/// assert_eq!(laya_train::deal(vec![0, 1, 2, 3, 4], 2), vec![vec![0, 2, 4], vec![1, 3]]);
/// ```
pub fn deal<T>(items: Vec<T>, shards: usize) -> Vec<Vec<T>> {
    let shards = shards.max(1);
    let mut out: Vec<Vec<T>> = (0..shards).map(|_| Vec::new()).collect();
    for (i, item) in items.into_iter().enumerate() {
        out[i % shards].push(item);
    }
    out
}

/// Appends `other`'s samples to `set` (the shards of one process, concatenated).
pub(crate) fn append(set: &mut EncodedSet, other: EncodedSet) {
    set.rows.extend(other.rows);
    set.word_target.extend(other.word_target);
    set.clicked_word.extend(other.clicked_word);
    set.replace_class.extend(other.replace_class);
    set.weight.extend(other.weight);
    set.stats.add(&other.stats);
}

/// What the ranks agree on before a step: the batch's loss divisors over every rank's samples
/// (so that the ranks' losses, and gradients, add up to the union's), whether to stop, and how
/// far the time limit is (their mean, so that the learning rate is the same everywhere).
pub(crate) fn agree_on_step(
    r: &dyn Reducer,
    batch: &mut Batch,
    stop: bool,
    time_fraction: f64,
    dev: &Device,
) -> Result<(bool, f64, usize)> {
    let local = [batch.word_weight, batch.total_weight, batch.word_count as f32, batch.size as f32, f32::from(stop), time_fraction as f32];
    let g = sum_host(r, &local, dev)?;
    batch.word_weight = g[0];
    batch.total_weight = g[1];
    batch.word_count = g[2].round() as usize;
    Ok((g[4] > 0.0, f64::from(g[5]) / r.world() as f64, g[3].round() as usize))
}

/// Sums the ranks' gradients and losses in one all-reduce: the dense gradients, which
/// parameters have one, the embedding table's row-sparse gradient as a dense table with a mask
/// of the rows some rank touched (the union, as one device's batch would touch), and the losses.
pub(crate) fn sum_grads(r: &dyn Reducer, net: &LayaNet, grads: Grads, parts: LossParts) -> Result<(Grads, LossParts)> {
    let dev = net.device();
    let params = net.params();
    let (table_rows, d) = params
        .iter()
        .find(|p| p.kind == ParamKind::TokenEmbedding)
        .map(|p| p.var.as_tensor().dims2())
        .transpose()?
        .ok_or_else(|| TrainError::Config("the network has no token embedding".into()))?;
    let rows = &grads.embedding_rows;
    let mut mask = vec![0f32; table_rows];
    for &row in rows {
        mask[row as usize] = 1.0;
    }
    let table = match (&grads.embedding_grad_device, rows.is_empty()) {
        (_, true) => Tensor::zeros((table_rows, d), DType::F32, dev)?,
        (Some(g), false) => {
            let ids = Tensor::from_slice(rows, rows.len(), dev)?;
            Tensor::zeros((table_rows, d), DType::F32, dev)?.index_add(&ids, g, 0)?
        }
        (None, false) => {
            let mut dense = vec![0f32; table_rows * d];
            for (k, &row) in rows.iter().enumerate() {
                dense[row as usize * d..(row as usize + 1) * d].copy_from_slice(&grads.embedding_grad[k * d..(k + 1) * d]);
            }
            Tensor::from_vec(dense, (table_rows, d), dev)?
        }
    };
    let mut pieces = Vec::with_capacity(params.len() + 3);
    let mut present = Vec::with_capacity(params.len());
    for (p, g) in params.iter().zip(&grads.dense) {
        present.push(f32::from(g.is_some()));
        if p.kind != ParamKind::TokenEmbedding {
            pieces.push(match g {
                Some(g) => g.flatten_all()?,
                None => Tensor::zeros(p.var.elem_count(), DType::F32, dev)?,
            });
        }
    }
    let host: Vec<f32> = present.iter().chain(&mask).copied().chain([parts.total, parts.word, parts.replace]).collect();
    pieces.push(table.flatten_all()?);
    pieces.push(Tensor::from_vec(host, params.len() + table_rows + 3, dev)?);
    let total = r.sum(&Tensor::cat(&pieces, 0)?)?;
    // Unpack in the order packed.
    let mut at = 0;
    let mut take = |n: usize| -> Result<Tensor> {
        let t = total.narrow(0, at, n)?;
        at += n;
        Ok(t)
    };
    let mut dense_sums = Vec::with_capacity(params.len());
    for p in params.iter() {
        dense_sums.push(if p.kind == ParamKind::TokenEmbedding { None } else { Some(take(p.var.elem_count())?.reshape(p.var.shape())?) });
    }
    let table = take(table_rows * d)?.reshape((table_rows, d))?;
    // A copy of its own first: `to_vec1` of a slice of a GPU buffer copies the whole buffer.
    let host = take(params.len() + table_rows + 3)?.force_contiguous()?.to_vec1::<f32>()?;
    let dense = dense_sums.into_iter().zip(&host[..params.len()]).map(|(g, &n)| g.filter(|_| n > 0.0)).collect();
    let union: Vec<u32> = (0..table_rows).filter(|&i| host[params.len() + i] > 0.0).map(|i| i as u32).collect();
    let l = &host[params.len() + table_rows..];
    let parts = LossParts { total: l[0], word: l[1], replace: l[2] };
    let mut out = Grads { dense, embedding_rows: union, ..Grads::default() };
    if dev.is_cpu() {
        let values = table.to_vec2::<f32>()?;
        out.embedding_grad = out.embedding_rows.iter().flat_map(|&row| values[row as usize].iter().copied()).collect();
    } else if !out.embedding_rows.is_empty() {
        let ids = Tensor::from_slice(&out.embedding_rows, out.embedding_rows.len(), dev)?;
        out.embedding_grad_device = Some(table.index_select(&ids, 0)?);
    }
    Ok((out, parts))
}

/// Rank 0's validation report on every rank (the others pass `None` and evaluate nothing).
pub(crate) fn share_report(r: &dyn Reducer, report: Option<ValidReport>, dev: &Device) -> Result<ValidReport> {
    let v = report.unwrap_or_default();
    let local = [v.loss.total, v.loss.word, v.loss.replace, v.top1, v.top5, v.replace_acc, v.events as f32];
    let s = sum_host(r, &local, dev)?;
    Ok(ValidReport {
        loss: LossParts { total: s[0], word: s[1], replace: s[2] },
        top1: s[3],
        top5: s[4],
        replace_acc: s[5],
        events: s[6].round() as usize,
    })
}

/// The shard lengths of every rank, on every rank.
pub(crate) fn shard_lengths(r: &dyn Reducer, len: usize, dev: &Device) -> Result<Vec<usize>> {
    let mut mine = vec![0f32; r.world()];
    mine[r.rank()] = len as f32;
    Ok(sum_host(r, &mine, dev)?.into_iter().map(|x| x.round() as usize).collect())
}

/// What every rank of [`train_ranks`] is run with (each its own [`crate::RunOptions`]).
#[derive(Debug, Clone, Default)]
pub struct RankOptions {
    /// Rank 0's checkpoint directory (every rank reads it to resume; only rank 0 writes).
    pub checkpoint_dir: Option<std::path::PathBuf>,
    /// Continue from the checkpoint in `checkpoint_dir`, whatever number of ranks wrote it.
    pub resume: bool,
    /// See [`crate::RunOptions::checkpoint_every`].
    pub checkpoint_every: usize,
    /// See [`crate::RunOptions::time_limit`] (the ranks stop together).
    pub time_limit: Option<std::time::Duration>,
}

/// What [`train_ranks`] calls on each rank's thread: `join(rank)` gives the rank's
/// [`Reducer`] and device (opening a GPU and joining its NCCL group, say), `start(rank,
/// device)` its starting network (the same weights on every rank).
pub struct RankSetup<'a> {
    /// How many ranks.
    pub world: usize,
    pub join: &'a (dyn Fn(usize) -> Result<(std::rc::Rc<dyn Reducer>, Device)> + Sync),
    pub start: &'a (dyn Fn(usize, &Device) -> Result<LayaNet> + Sync),
    /// Polled by ranks other than 0 (rank 0 polls its hooks); the ranks agree on stopping.
    pub stop: &'a (dyn Fn() -> bool + Sync),
    /// Called on the thread of a rank that fails, with its error, before [`train_ranks`]
    /// returns: the other ranks then wait in their next sum for a rank that will not come, so
    /// a program should end there (the last checkpoint stays).
    pub on_fail: &'a (dyn Fn(usize, &TrainError) + Sync),
}

/// Runs a data-parallel training of `setup.world` ranks, a thread each, rank `r` on event `i`
/// of `events` with `i mod world = r` ([`deal`]); returns rank 0's outcome (whose network is
/// every rank's). `hooks` are rank 0's.
///
/// ```
/// use laya_train::*;
/// use std::rc::Rc;
/// let words: Vec<String> = ["天气", "不错"].iter().map(|s| s.to_string()).collect();
/// let mut mc = ModelConfig::standard(words, vec![1, 1], Mapping::Table(vec![]));
/// mc.d_model = 32;
/// mc.ffn = vec![32];
/// let ev = |c: &str, w: &str| Event { context: c.into(), shown: vec![Shown { word: w.into(), replace: 0 }], clicked: Some(0), weight: 1.0 };
/// let events = vec![ev("今天", "天气"), ev("天气", "不错"), ev("今天", "天气"), ev("天气", "不错")];
/// let ranks = std::sync::Mutex::new(LocalGroup::new(2).into_iter().map(Some).collect::<Vec<_>>());
/// let join = |r: usize| -> Result<(Rc<dyn Reducer>, candle_core::Device)> {
///     Ok((Rc::new(ranks.lock().unwrap()[r].take().unwrap()), candle_core::Device::Cpu))
/// };
/// let start = |_: usize, _: &candle_core::Device| LayaNet::new(mc.clone(), 3);
/// let setup = RankSetup { world: 2, join: &join, start: &start, stop: &|| false, on_fail: &|_, _| {} };
/// let tc = TrainConfig { epochs: 2, batch_size: 1, warmup_steps: 1, ..TrainConfig::default() };
/// let out = train_ranks(&setup, &tc, events, &[], &RankOptions::default(), &mut NoHooks).unwrap();
/// assert_eq!(out.state.step, 4); // two steps an epoch, each on two ranks' samples
/// ```
pub fn train_ranks(
    setup: &RankSetup<'_>,
    cfg: &crate::TrainConfig,
    events: Vec<crate::Event>,
    valid: &[crate::Event],
    opts: &RankOptions,
    hooks: &mut (dyn crate::TrainHooks + Send),
) -> Result<crate::TrainOutcome> {
    struct Quiet<'a>(&'a (dyn Fn() -> bool + Sync));
    impl crate::TrainHooks for Quiet<'_> {
        fn should_stop(&mut self) -> bool {
            (self.0)()
        }
    }
    let run = |rank: usize, shard: Vec<crate::Event>, hooks: &mut dyn crate::TrainHooks| -> Result<crate::TrainOutcome> {
        let (reducer, device) = (setup.join)(rank)?;
        let net = (setup.start)(rank, &device)?;
        let run = crate::RunOptions {
            checkpoint_dir: opts.checkpoint_dir.clone(),
            resume: opts.resume,
            checkpoint_every: opts.checkpoint_every,
            device,
            time_limit: opts.time_limit,
            parallel: Some(reducer),
            data_shards: 0,
        };
        crate::train_from(net, cfg.clone(), &shard, valid, &run, hooks)
    };
    let fail = |rank: usize, r: Result<crate::TrainOutcome>| {
        if let Err(e) = &r {
            (setup.on_fail)(rank, e);
        }
        r
    };
    let mut shards = deal(events, setup.world).into_iter();
    let first = shards.next().unwrap_or_default();
    std::thread::scope(|s| {
        let others: Vec<_> = shards
            .enumerate()
            .map(|(k, shard)| {
                let rank = k + 1;
                std::thread::Builder::new()
                    .name(format!("laya-rank-{rank}"))
                    .spawn_scoped(s, move || fail(rank, run(rank, shard, &mut Quiet(setup.stop))).map(|_| ()))
            })
            .collect();
        let zero = fail(0, run(0, first, hooks));
        for h in others {
            let joined = h.map_err(|e| TrainError::Config(format!("cannot start a rank's thread: {e}")))?.join();
            joined.map_err(|_| TrainError::Config("a rank panicked".into()))??;
        }
        zero
    })
}
