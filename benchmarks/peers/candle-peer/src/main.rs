//! candle's side of the peer benchmark: loads the file with `LayaNet::from_laya` (every tensor
//! dequantised to f32) and times one decision = `LayaNet`'s forward pass on one context up to the
//! output norm (`forward_hidden`, what `predict_logits` runs before its heads) + the heads
//! (`heads.rs`: the word logits, or the dense log P(w) of a factorised word head, which
//! `LayaNet` does not read; and the replace logits) + top-5 over the word scores.
//! Single-threaded when run with RAYON_NUM_THREADS=1 (the driver sets it).
//! `relative_causal` models go through `causal.rs` (plain candle ops, the same dequantised
//! weights). `LayaNet` runs them too, but its causal path is built for training batches: it pads
//! every sample to the receptive field and builds the masks per call. `causal.rs` computes only
//! the tokens present with dynamic shapes, the fastest way to run it in candle at batch 1, and
//! being written apart from the trainer it also checks it (both agree with the numpy
//! reference). Protocol: see `common.rs`.
use std::process::ExitCode;
use std::time::Instant;

mod causal;
#[path = "../../common.rs"]
mod common;
mod heads;

use common::{Args, PeerError};
use laya_format::PositionScheme;
use laya_train::LayaNet;

enum Net {
    Learned(LayaNet, heads::Heads),
    Causal(causal::CausalNet),
}

fn decide(net: &Net, context: &str) -> Result<(Vec<f32>, Vec<usize>), PeerError> {
    let logits = match net {
        Net::Learned(net, heads) => {
            let err = |e: &dyn std::fmt::Display| PeerError::Model(e.to_string());
            let mut rows = vec![0u32; net.config().seq_len()];
            net.config().encode_into(context, &mut rows);
            let z = net.gather_rows(&rows).and_then(|tok| net.forward_hidden(&tok, &rows)).map_err(|e| err(&e))?;
            heads.word_scores(&z).map_err(|e| err(&e))?
        }
        Net::Causal(net) => net.word_logits(context).map_err(|e| PeerError::Model(e.to_string()))?,
    };
    let top = common::top_k(&logits, 5);
    Ok((logits, top))
}

fn run(args: &Args) -> Result<(), PeerError> {
    let contexts = common::read_contexts(&args.contexts)?;
    let t0 = Instant::now();
    let bytes = std::fs::read(&args.model).map_err(|e| PeerError::Io(args.model.clone(), e))?;
    let file = laya_format::LayaFile::parse(&bytes).map_err(|e| PeerError::Model(e.to_string()))?;
    let net = match file.meta.hparams.position_scheme {
        PositionScheme::LearnedAbsolute => Net::Learned(
            LayaNet::from_laya(&file).map_err(|e| PeerError::Model(e.to_string()))?,
            heads::Heads::from_laya(&file).map_err(|e| PeerError::Model(e.to_string()))?,
        ),
        PositionScheme::RelativeCausal => Net::Causal(causal::CausalNet::from_laya(&file).map_err(|e| PeerError::Model(e.to_string()))?),
    };
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
    let logits = contexts.iter().map(|c| decide(&net, c).map(|r| r.0)).collect::<Result<Vec<_>, _>>()?;
    // Typing mode: the same decision on every prefix in order; candle keeps nothing between
    // calls, so each request is computed from scratch.
    let typing = match &args.typing {
        None => None,
        Some(spec) => {
            let requests = common::read_contexts(&spec.requests)?;
            let times = common::time_typing(&requests, spec.passes, |c| {
                if let Err(e) = decide(&net, c) {
                    failure.get_or_insert(e);
                }
            });
            let logits = requests.iter().map(|c| decide(&net, c).map(|r| r.0)).collect::<Result<Vec<_>, _>>()?;
            Some((times, logits))
        }
    };
    if let Some(e) = failure {
        return Err(e);
    }
    let threads = std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "unset".into());
    let kind = if matches!(net, Net::Causal(_)) { "candle ops (causal.rs), " } else { "" };
    let typing_results = typing.as_ref().map(|(t, l)| common::TypingResults { times_ns: t, logits: l });
    common::write_results(args, "candle", cold_ms, &times, &logits, typing_results, &format!("{kind}RAYON_NUM_THREADS={threads}"))
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
