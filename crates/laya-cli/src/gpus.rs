//! `laya train --gpus N`: the ranks of a data-parallel run, one per GPU, summing their
//! gradients through NCCL (`laya_train::train_ranks`; docs/training.md, "Several GPUs").

use laya_train::{Device, LayaNet, RankOptions, TrainConfig, TrainOutcome};

use crate::train_io::BarHooks;
use crate::CliError;

/// Trains on `gpus` GPUs from `device`'s on (`cuda` or `cuda:K`); returns rank 0's outcome.
#[allow(clippy::too_many_arguments)]
pub fn train(
    device: &str,
    gpus: usize,
    start: &(dyn Fn(usize, &Device) -> laya_train::Result<LayaNet> + Sync),
    cfg: &TrainConfig,
    events: Vec<laya_text::Event>,
    valid: &[laya_text::Event],
    ranks: &RankOptions,
    hooks: &mut BarHooks,
) -> Result<TrainOutcome, CliError> {
    let first = match device.trim() {
        "cuda" => 0,
        d => d
            .strip_prefix("cuda:")
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| CliError(format!("--gpus needs --device cuda or cuda:N, not {d}")))?,
    };
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (first, gpus, start, cfg, events, valid, ranks, hooks);
        Err(CliError("--gpus: this laya was built without CUDA; build it with scripts/build-cuda.sh (cargo feature `cuda`)".into()))
    }
    #[cfg(feature = "cuda")]
    {
        use laya_train::{NcclId, NcclRank, RankSetup, Reducer};
        use std::rc::Rc;
        let id = NcclId::new()?;
        let join = |rank: usize| -> laya_train::Result<(Rc<dyn Reducer>, Device)> {
            let dev = laya_train::parse_device(&format!("cuda:{}", first + rank))?;
            let reducer = NcclRank::new(&dev, rank, gpus, id)?;
            Ok((Rc::new(reducer), dev))
        };
        let stop_flag = hooks.stop.clone();
        let stop = move || stop_flag.load(std::sync::atomic::Ordering::Relaxed);
        let on_fail = |rank: usize, e: &laya_train::TrainError| {
            eprintln!(
                "error: GPU rank {rank}: {e}; the other ranks cannot go on without it (the last checkpoint stays: resume with --resume)"
            );
            std::process::exit(1);
        };
        eprintln!(
            "{gpus} GPUs (cuda:{first}..cuda:{}), one rank each through NCCL, {} samples a step in all",
            first + gpus - 1,
            gpus * cfg.batch_size
        );
        let setup = RankSetup { world: gpus, join: &join, start, stop: &stop, on_fail: &on_fail };
        Ok(laya_train::train_ranks(&setup, cfg, events, valid, ranks, hooks)?)
    }
}
