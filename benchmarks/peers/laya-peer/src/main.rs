//! Laya's side of the peer benchmark: times the full decision `Session::predict(context, 5)`
//! (forward pass, softmax and candidate ranking) and reports the raw word logits of
//! `Session::logits` for the correctness gate. Protocol: see `common.rs`.
use std::process::ExitCode;
use std::time::Instant;

#[path = "../../common.rs"]
mod common;

use common::{Args, PeerError};

fn run(args: &Args) -> Result<(), PeerError> {
    let contexts = common::read_contexts(&args.contexts)?;
    // Cold start: from opening the file to the first decision, without `warm_up`, so page
    // faults and cold caches of the first keystroke are included.
    let t0 = Instant::now();
    let model = laya_runtime::Model::load(&args.model).map_err(|e| PeerError::Model(e.to_string()))?;
    let mut session = laya_runtime::Session::new(model);
    let first = session.predict(&contexts[0], 5).len();
    let cold_ms = t0.elapsed().as_secs_f64() * 1e3;
    if first == 0 {
        return Err(PeerError::Model("the first prediction returned no candidate".into()));
    }
    let times = common::time_decisions(&contexts, args.warmup, args.iters, |c| {
        std::hint::black_box(session.predict(c, 5).len());
    });
    let logits: Vec<Vec<f32>> = contexts.iter().map(|c| session.logits(c).0).collect();
    let level = format!("kernels {:?}", session.model().kernel_level());
    common::write_results(args, "laya", cold_ms, &times, &logits, &level)
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    match Args::parse(&argv).and_then(|a| run(&a)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("laya-peer: {e}");
            ExitCode::FAILURE
        }
    }
}
