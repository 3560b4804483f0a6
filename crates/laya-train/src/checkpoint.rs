//! Checkpoints of the training loop: weights, AdamW moments and the loop state, written
//! write-then-rename so that an interrupted write never leaves half a checkpoint.

use crate::config::{ModelConfig, TrainConfig};
use crate::error::{io_err, Result, TrainError};
use crate::model::LayaNet;
use crate::optim::AdamW;
use crate::train::TrainState;
use candle_core::Tensor;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

#[derive(Serialize, Deserialize)]
struct CheckpointMeta {
    model: ModelConfig,
    train: TrainConfig,
    state: TrainState,
    optimizer_step: u64,
    adamw_moments_restored_on_resume: bool,
}

pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    // Write-then-rename: an interrupted write never leaves a half checkpoint behind.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(io_err(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io_err(path))
}

pub(crate) fn save_tensors(path: &Path, net: &LayaNet, opt: Option<&AdamW>) -> Result<()> {
    let mut map: HashMap<String, Tensor> = HashMap::new();
    for (i, p) in net.params().iter().enumerate() {
        match opt {
            None => {
                map.insert(p.name.clone(), p.var.as_tensor().clone());
            }
            Some(o) => {
                let (m, v) = o.moments(i)?;
                let (nm, nv) = (m.len(), v.len());
                map.insert(format!("m.{}", p.name), Tensor::from_vec(m, nm, &candle_core::Device::Cpu)?);
                map.insert(format!("v.{}", p.name), Tensor::from_vec(v, nv, &candle_core::Device::Cpu)?);
            }
        }
    }
    let tmp = path.with_extension("tmp");
    candle_core::safetensors::save(&map, &tmp)?;
    std::fs::rename(&tmp, path).map_err(io_err(path))
}

/// Writes `model.safetensors` (weights under their model-file names), `optimizer.safetensors`
/// (AdamW moments `m.<name>`, `v.<name>`) and `state.json` into `dir`.
pub fn save_checkpoint(dir: &Path, net: &LayaNet, opt: &AdamW, model: &ModelConfig, train: &TrainConfig, state: &TrainState) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    save_tensors(&dir.join("model.safetensors"), net, None)?;
    save_tensors(&dir.join("optimizer.safetensors"), net, Some(opt))?;
    let meta = CheckpointMeta {
        model: model.clone(),
        train: train.clone(),
        state: state.clone(),
        optimizer_step: opt.steps(),
        adamw_moments_restored_on_resume: true,
    };
    let json = serde_json::to_vec_pretty(&meta).map_err(|e| TrainError::Checkpoint(e.to_string()))?;
    write_file(&dir.join("state.json"), &json)
}

/// Loads a checkpoint written by [`save_checkpoint`] into `net` and `opt` and returns the loop
/// state. The model config must be identical; the training config may differ only in `epochs`
/// and `patience` (so a finished run can be extended).
pub fn load_checkpoint(dir: &Path, net: &LayaNet, opt: &mut AdamW, model: &ModelConfig, train: &TrainConfig) -> Result<TrainState> {
    let sp = dir.join("state.json");
    let bytes = std::fs::read(&sp).map_err(io_err(&sp))?;
    let meta: CheckpointMeta = serde_json::from_slice(&bytes).map_err(|e| TrainError::Checkpoint(format!("{}: {e}", sp.display())))?;
    if &meta.model != model {
        return Err(TrainError::Checkpoint(format!(
            "{} was written for a different model configuration (sizes, lexicon or mapping)",
            sp.display()
        )));
    }
    let relaxed = |t: &TrainConfig| TrainConfig { epochs: 0, patience: 0, ..t.clone() };
    if relaxed(&meta.train) != relaxed(train) {
        return Err(TrainError::Checkpoint(format!(
            "{} was written with different training settings; only epochs and patience may change on resume",
            sp.display()
        )));
    }
    let load = |name: &str| -> Result<HashMap<String, Tensor>> {
        let p = dir.join(name);
        if !p.exists() {
            return Err(TrainError::Checkpoint(format!("{} is missing", p.display())));
        }
        Ok(candle_core::safetensors::load(&p, net.device())?)
    };
    let weights = load("model.safetensors")?;
    let moments = load("optimizer.safetensors")?;
    let (mut ms, mut vs) = (Vec::new(), Vec::new());
    for p in net.params() {
        let missing = |n: &str| TrainError::Checkpoint(format!("tensor {n} missing from checkpoint"));
        let w = weights.get(&p.name).ok_or_else(|| missing(&p.name))?;
        if w.dims() != p.var.dims() {
            return Err(TrainError::Checkpoint(format!("tensor {} has shape {:?}, expected {:?}", p.name, w.dims(), p.var.dims())));
        }
        p.var.set(w)?;
        let m = moments.get(&format!("m.{}", p.name)).ok_or_else(|| missing(&format!("m.{}", p.name)))?;
        let v = moments.get(&format!("v.{}", p.name)).ok_or_else(|| missing(&format!("v.{}", p.name)))?;
        ms.push(m.to_vec1::<f32>()?);
        vs.push(v.to_vec1::<f32>()?);
    }
    opt.restore(meta.optimizer_step, ms, vs)?;
    let mut state = meta.state;
    if state.epoch < train.epochs {
        state.finished = false;
    }
    Ok(state)
}
