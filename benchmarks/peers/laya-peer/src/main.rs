//! Laya's side of the peer benchmark: times the full decision `Session::predict(context, 5)`
//! (forward pass, softmax and candidate ranking) and reports the raw word logits of
//! `Session::logits` for the correctness gate. Protocol: see `common.rs`.
//!
//! Timing uses the session's default precision (int8 activations for Q8_0 layers, as shipped).
//! The gate's logits are computed with f32 activations, the network the peers run (they
//! multiply the dequantised weights in f32); how often the int8 path's top-5 differs from that
//! is reported in the notes column. For F32/F16 models the two are the same computation.
//!
//! A factorised word head (docs/format.md §3 step 5): `predict` computes the class head and
//! then only the words of the classes ranking needs; `Session::logits` gives the dense ln P(w)
//! of every word, the vector the peers compute, so the gate compares that and its top-5. The
//! notes column says how many word-head rows the timed kind of decision computed.
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
    // The peers run the network; a word trigram stored in the file is not part of it.
    session.set_ngram_weight(0.0);
    let first = session.predict(&contexts[0], 5).len();
    let cold_ms = t0.elapsed().as_secs_f64() * 1e3;
    if first == 0 {
        return Err(PeerError::Model("the first prediction returned no candidate".into()));
    }
    // Isolated contexts: on a relative_causal model the session would keep keys and values
    // from one decision to the next and reuse them when a context extends the one before it
    // by up to 8 characters ("今" -> "今天", "hello" -> "hello wor", "" -> anything short).
    // Every decision here must be computed whole, like the peers', so the kept state is
    // dropped before each one (`Session::forget_context`, two stores).
    let causal = session.model().config().position_scheme == laya_format::PositionScheme::RelativeCausal;
    let isolated = |session: &mut laya_runtime::Session, c: &str| {
        if causal {
            session.forget_context();
        }
        std::hint::black_box(session.predict(c, 5).len());
    };
    // The packed copies the packer thread makes after load, before any timing: the steady state.
    session.model().pack();
    let times = common::time_decisions(&contexts, args.warmup, args.iters, |c| isolated(&mut session, c));
    // One more cycle, untimed and profiled, counts the decisions that reused kept state (0 is
    // the point).
    session.set_profiling(true);
    session.reset_stage_times();
    contexts.iter().for_each(|c| isolated(&mut session, c));
    let reused_isolated = session.stage_times().reused;
    let rows_isolated = session.stage_times().word_rows;
    session.set_profiling(false);
    let int8: Vec<Vec<usize>> = contexts.iter().map(|c| top5(&session.logits(c).0)).collect();
    session.set_act_precision(laya_runtime::ActPrecision::F32);
    let logits: Vec<Vec<f32>> = contexts.iter().map(|c| session.logits(c).0).collect();
    let same = logits.iter().zip(&int8).filter(|(l, i)| top5(l) == **i).count();
    let model = session.model().clone();
    let mut level = format!(
        "kernels {:?}, int8 {}{}; gate on f32 activations, int8 top-5 equal on {same}/{}",
        model.kernel_level(),
        model.int8_isa(),
        if model.packed_bytes() > 0 { " (packed)" } else { "" },
        contexts.len()
    );
    if causal {
        level += &format!("; reused kept keys/values on {reused_isolated}/{} isolated contexts", contexts.len());
    }
    let (classes, vocab) = (model.config().word_classes, model.config().vocab);
    let rows_note = |rows: u64, n: usize| format!("{:.0} of {vocab} word-head rows per decision (mean)", rows as f64 / n as f64);
    if classes > 0 {
        level += &format!("; factorised head ({classes} classes): {}", rows_note(rows_isolated, contexts.len()));
    }
    // Typing mode: ONE session for the whole sequence, so that a runtime which keeps keys and
    // values between keystrokes (relative_causal models) reuses them from request to request,
    // as it would for a person typing. The gate's logits come from the same session, in order,
    // after the timed passes (f32 activations, like the isolated contexts above).
    let typing = match &args.typing {
        None => None,
        Some(spec) => {
            let requests = common::read_contexts(&spec.requests)?;
            let mut typist = laya_runtime::Session::new(model);
            let times = common::time_typing(&requests, spec.passes, |c| {
                std::hint::black_box(typist.predict(c, 5).len());
            });
            // One more pass, untimed and profiled: how many requests reused the kept state.
            typist.set_profiling(true);
            typist.reset_stage_times();
            requests.iter().for_each(|c| {
                typist.predict(c, 5);
            });
            let reused = typist.stage_times().reused;
            let rows = typist.stage_times().word_rows;
            typist.set_profiling(false);
            level += "; typing: ";
            if causal {
                level += &format!("reused kept keys/values on {reused}/{} requests, ", requests.len());
            }
            let int8: Vec<Vec<usize>> = requests.iter().map(|c| top5(&typist.logits(c).0)).collect();
            typist.set_act_precision(laya_runtime::ActPrecision::F32);
            let logits: Vec<Vec<f32>> = requests.iter().map(|c| typist.logits(c).0).collect();
            let same = logits.iter().zip(&int8).filter(|(l, i)| top5(l) == **i).count();
            level += &format!("int8 top-5 equal on {same}/{}", requests.len());
            if classes > 0 {
                level += &format!(", {}", rows_note(rows, requests.len()));
            }
            Some((times, logits))
        }
    };
    let typing_results = typing.as_ref().map(|(t, l)| common::TypingResults { times_ns: t, logits: l });
    common::write_results(args, "laya", cold_ms, &times, &logits, typing_results, &level)
}

/// Ids of the five largest logits, ties to the lower id.
fn top5(l: &[f32]) -> Vec<usize> {
    let mut ids: Vec<usize> = (0..l.len()).collect();
    ids.sort_by(|&a, &b| l[b].total_cmp(&l[a]).then(a.cmp(&b)));
    ids.truncate(5);
    ids
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
