//! candle's side of the peer benchmark: loads the file with `LayaNet::from_laya` (every tensor
//! dequantised to f32) and times one decision = `predict_logits` on one context + top-5 over the
//! word logits. Single-threaded when run with RAYON_NUM_THREADS=1 (the driver sets it).
//! Protocol: see `common.rs`.
use std::process::ExitCode;
use std::time::Instant;

#[path = "../../common.rs"]
mod common;

use common::{Args, PeerError};
use laya_train::LayaNet;

fn decide(net: &LayaNet, context: &str) -> Result<(Vec<f32>, Vec<usize>), PeerError> {
    let (mut words, _replace) = net.predict_logits(&[context]).map_err(|e| PeerError::Model(e.to_string()))?;
    let logits = words.pop().ok_or_else(|| PeerError::Model("predict_logits returned no row".into()))?;
    let top = common::top_k(&logits, 5);
    Ok((logits, top))
}

fn run(args: &Args) -> Result<(), PeerError> {
    let contexts = common::read_contexts(&args.contexts)?;
    let t0 = Instant::now();
    let bytes = std::fs::read(&args.model).map_err(|e| PeerError::Io(args.model.clone(), e))?;
    let file = laya_format::LayaFile::parse(&bytes).map_err(|e| PeerError::Model(e.to_string()))?;
    let net = LayaNet::from_laya(&file).map_err(|e| PeerError::Model(e.to_string()))?;
    drop(file);
    drop(bytes);
    decide(&net, &contexts[0])?;
    let cold_ms = t0.elapsed().as_secs_f64() * 1e3;
    let mut failure = None;
    let times = common::time_decisions(&contexts, args.warmup, args.iters, |c| {
        if let Err(e) = decide(&net, c) {
            failure.get_or_insert(e);
        }
    });
    if let Some(e) = failure {
        return Err(e);
    }
    let logits = contexts.iter().map(|c| decide(&net, c).map(|r| r.0)).collect::<Result<Vec<_>, _>>()?;
    let threads = std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "unset".into());
    common::write_results(args, "candle", cold_ms, &times, &logits, &format!("RAYON_NUM_THREADS={threads}"))
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    match Args::parse(&argv).and_then(|a| run(&a)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("candle-peer: {e}");
            ExitCode::FAILURE
        }
    }
}
