//! Robust latency of `Session::predict` on a shared machine.
//!
//! ```text
//! harness MODEL [LEVEL] [ITERS]     LEVEL: scalar | avx2 | avx512 | neon (default: detected)
//! ```
//!
//! Prints min / p10 / p50 of per-prediction latency and the median per-stage time (each stage's
//! time measured on every prediction, median taken per stage, so a preempted prediction does not
//! inflate the breakdown the way a mean does). The p50 here is the same statistic `laya bench`
//! reports; the min and p10 show what the code costs when no neighbour interferes.

use std::sync::Arc;
use std::time::Instant;

use laya_runtime::{Kernels, Level, Model, Session, Stage};

const CONTEXTS: &[&str] = &[
    "今天天气很好，我们一起去公园散步吧。",
    "明天上午十点在会议室开会，请准时参加。",
    "I will see you at the station tomorrow morning.",
    "Thanks for the update, let me know when it ships.",
];

fn pct(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).expect("usage: harness MODEL [LEVEL] [ITERS]");
    let level = match args.get(2).map(String::as_str) {
        None | Some("auto") => Kernels::detect().level(),
        Some("scalar") => Level::Scalar,
        Some("avx2") => Level::Avx2,
        Some("avx512") => Level::Avx512,
        Some("neon") => Level::Neon,
        Some(o) => panic!("unknown level {o}"),
    };
    let iters: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(3000);
    let kern = Kernels::for_level(level).expect("level not available on this CPU");
    let model: Arc<Model> = Model::load_with(path, kern).expect("load");
    let ctxs: Vec<String> = CONTEXTS
        .iter()
        .flat_map(|s| {
            let cs: Vec<char> = s.chars().collect();
            (1..=cs.len()).map(move |n| cs[..n].iter().collect::<String>())
        })
        .collect();
    let mut s = Session::new(Arc::clone(&model));
    s.warm_up();
    let mut lat = Vec::with_capacity(iters);
    let mut sink = 0.0f32;
    for i in 0..iters {
        let t = Instant::now();
        let p = s.predict(&ctxs[i % ctxs.len()], 5);
        sink += p.get(0).map_or(0.0, |c| c.p);
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    std::hint::black_box(sink);
    s.set_profiling(true);
    let mut per: Vec<Vec<f64>> = vec![Vec::with_capacity(iters); Stage::COUNT];
    for i in 0..iters {
        s.reset_stage_times();
        s.predict(&ctxs[i % ctxs.len()], 5);
        let t = s.stage_times();
        for st in Stage::ALL {
            per[st as usize].push(t.mean_us(st));
        }
    }
    let macs = model.macs_per_prediction();
    let p50 = pct(&mut lat, 0.5);
    println!(
        "{path} [{level}] min {:.1} p10 {:.1} p50 {p50:.1} µs; {macs} MACs, {:.1} GFLOP/s at p50",
        pct(&mut lat, 0.0),
        pct(&mut lat, 0.1),
        2.0 * macs as f64 / p50 / 1e3
    );
    let mut line = String::new();
    for st in Stage::ALL {
        let m = pct(&mut per[st as usize], 0.5);
        if m >= 0.5 {
            line += &format!("{} {m:.1}  ", st.name());
        }
    }
    println!("  median stages: {line}");
}
