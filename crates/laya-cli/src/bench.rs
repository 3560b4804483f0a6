//! `laya bench` (docs/evaluation.md §3): latency of single predictions on real typing contexts, cold
//! start measured from a fresh process, allocations per prediction counted by the binary's
//! own allocator, and the per-stage breakdown.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use laya_runtime::{Model, Session, Stage};
use serde::Serialize;

use crate::{CliError, ALLOCATOR};

/// Assumed fp32 peak of one core where the kernels have no probe (scalar, NEON): a Zen 3 core
/// (2 FMA units x 8 lanes x 2 flops x ~3.6 GHz). Elsewhere the peak is measured.
const DEFAULT_PEAK_GFLOPS: f64 = 115.0;

/// Sentences typed character by character to make realistic contexts (mixed Chinese and
/// English, short and longer than the 16-character window).
const SAMPLE_TEXT: &[&str] = &[
    "今天天气很好，我们一起去公园散步吧。",
    "明天上午十点在会议室开会，请准时参加。",
    "这家酒店的服务非常好，房间也很干净。",
    "中国人民银行决定下调存款准备金率。",
    "I will see you at the station tomorrow morning.",
    "Thanks for the update, let me know when it ships.",
];

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: crate::ModelChoice,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Timed predictions (after warm-up).
    #[arg(long, default_value_t = 3000)]
    iterations: usize,
    /// Threads predicting at once, each with its own session on the shared model.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Fresh processes started to measure cold start.
    #[arg(long, default_value_t = 10)]
    cold_runs: usize,
    /// Peak fp32 GFLOP/s of one core, for the fraction-of-peak figure (default: measured on
    /// this core with `Kernels::measure_peak`, ~0.1 s).
    #[arg(long)]
    peak_gflops: Option<f64>,
    /// Take contexts from the lines of this file instead of the built-in sample.
    #[arg(long)]
    text: Option<PathBuf>,
    #[command(flatten)]
    act: crate::predictors::ActivationsArg,
    /// The weight of the word trigram the model file carries (`laya attach-ngram`); 0 times
    /// the network alone.
    #[arg(long, default_value_t = laya_runtime::DEFAULT_NGRAM_WEIGHT, value_parser = crate::predictors::ngram_weight)]
    ngram_weight: f32,
    /// Int8 instruction set of the kernels (`scalar`, `avx2`, `avx-vnni`, `avx512-vnni`;
    /// default: the best this CPU has). For comparing tiers on one machine; one this CPU lacks
    /// is an error.
    #[arg(long)]
    int8: Option<laya_kernels::Int8Isa>,
    /// Compute every prediction whole: drop what the session kept from the previous keystroke
    /// before each one (`Session::forget_context`), as after a deletion or a cursor move.
    /// Without it, the typing replay lets a relative_causal model compute only the new
    /// character; with learned positions both are the same.
    #[arg(long)]
    whole: bool,
    /// Predict with the learned history of this user file (read, never written): the cost of
    /// personalisation (docs/personalisation.md).
    #[arg(long)]
    user: Option<PathBuf>,
    /// Internal: load, predict once, report, exit (used to time cold start).
    #[arg(long, hide = true)]
    cold_probe: bool,
    /// Internal: report at once and exit, loading nothing (the spawn floor of cold start).
    #[arg(long, hide = true)]
    spawn_probe: bool,
}

#[derive(Serialize)]
struct StageRow {
    stage: &'static str,
    mean_us: f64,
    share: f64,
}

#[derive(Serialize)]
struct Report {
    model: String,
    file_bytes: usize,
    /// Words in the learned history (`--user`; 0 without).
    user_words: usize,
    /// With `--user`: p50 and p99 of a session without the history, timed in the same loop.
    p50_us_without_user: Option<f64>,
    p99_us_without_user: Option<f64>,
    vocab: usize,
    kernel_level: String,
    /// The int8 instruction set, the activation precision asked for, and the heap bytes of
    /// the Q8_0 layers' packed copies (0 unless the CPU has VNNI kernels).
    int8_isa: String,
    activations: String,
    packed_bytes: usize,
    threads: usize,
    predictions: usize,
    p50_us: f64,
    p99_us: f64,
    mean_us: f64,
    /// Median over fresh processes, from spawning the process to its first prediction.
    cold_start_ms: f64,
    /// Median over the same processes, inside each: from the start of loading the model to
    /// the first prediction (what an input method that embeds the runtime waits for).
    cold_first_prediction_ms: f64,
    /// `cold_first_prediction_ms` by phase (medians of each over the same processes).
    cold_phases: ColdPhases,
    /// Median over as many fresh processes of this binary that load nothing and report at
    /// once, started alternately with the cold ones: what starting the process costs here.
    spawn_floor_ms: f64,
    /// Median over the cold processes, after their first prediction: `Session::warm_up`, which
    /// touches every page and makes every packed copy (what `laya_session_new` waits for).
    cold_warm_up_ms: f64,
    load_ms: f64,
    allocations_per_prediction: f64,
    /// Multiply-adds of a prediction computed whole.
    macs_per_prediction: u64,
    /// Of a prediction one character after the previous one (equal to the above unless the
    /// model's positions are relative_causal, whose sessions keep keys and values).
    macs_per_keystroke: u64,
    /// The count `gflops_at_p50` uses: per keystroke when at least half the predictions reused.
    macs_at_p50: u64,
    /// Share of the profiled predictions computed from kept keys and values.
    reused_fraction: f64,
    /// Mean word-head rows computed per prediction: the lexicon size with a flat head; with a
    /// factorised one, the words of the classes ranking expanded.
    word_rows_per_prediction: f64,
    /// Classes of a factorised word head (0: flat).
    word_classes: usize,
    /// `laya.position_scheme`.
    positions: String,
    gflops_at_p50: f64,
    /// The f32 peak used (measured unless given) and the p50 arithmetic's share of it.
    peak_gflops: f64,
    peak_fraction: f64,
    /// The int8 set's measured `vpdpbusd` peak (VNNI CPUs) and the share of it (only for models
    /// with packed int8 layers).
    peak_int8_gops: Option<f64>,
    peak_fraction_int8: Option<f64>,
    peak_rss_kb: u64,
    predictions_per_second: f64,
    stages: Vec<StageRow>,
}

#[derive(Serialize, serde::Deserialize)]
struct Probe {
    first_prediction_us: f64,
    peak_rss_kb: u64,
    /// The phases of `first_prediction_us`: validating the file, preparing the model
    /// ([`laya_runtime::LoadTime`]), making the session, the first prediction.
    phases_us: [f64; 4],
}

/// What a cold probe reports on a second line, once its first (the [`Probe`]) is out:
/// `Session::warm_up` after the first prediction.
#[derive(Serialize, serde::Deserialize)]
struct WarmUp {
    warm_up_us: f64,
}

/// What [`cold_start`] measures, medians over its processes (the peak RSS is their largest).
struct Cold {
    start_ms: f64,
    inside_ms: f64,
    peak_rss_kb: u64,
    phases: ColdPhases,
    spawn_floor_ms: f64,
    warm_up_ms: f64,
}

/// Medians over the cold processes of [`Probe::phases_us`], in ms.
#[derive(Serialize, Clone, Copy)]
struct ColdPhases {
    validate_ms: f64,
    prepare_ms: f64,
    session_ms: f64,
    first_prediction_ms: f64,
}

pub fn run(args: Args) -> Result<(), CliError> {
    if args.cold_probe {
        return probe(&args);
    }
    if args.spawn_probe {
        outln!("{{}}");
        return Ok(());
    }
    if args.iterations == 0 || args.threads == 0 {
        return Err(CliError("--iterations and --threads must be at least 1".into()));
    }
    let contexts = contexts(&args)?;
    let t0 = Instant::now();
    let model = load(&args)?;
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;

    let cold = cold_start(&args)?;

    // Allocation count over the whole timed loop on this thread, after warm-up.
    let user = match &args.user {
        Some(path) if path.is_file() => {
            let opened = laya_runtime::User::open(path)?;
            if let Some(aside) = opened.set_aside {
                return Err(CliError(format!("--user {}: {aside}", path.display())));
            }
            opened.user
        }
        Some(path) => return Err(CliError(format!("--user {}: no such user file", path.display()))),
        None => laya_runtime::User::new(),
    };
    let mut session = Session::new(Arc::clone(&model));
    session.set_act_precision(args.act.activations);
    session.set_ngram_weight(args.ngram_weight);
    session.set_user(user.clone());
    session.warm_up();
    // With --user, a second session without the history types the same contexts in the same
    // loop, alternating with the first, so that the cost of the history is a difference
    // measured under the same conditions (clock, caches, neighbours).
    let mut plain = args.user.is_some().then(|| {
        let mut s = Session::new(Arc::clone(&model));
        s.set_act_precision(args.act.activations);
        s.set_ngram_weight(args.ngram_weight);
        s.warm_up();
        s
    });
    let mut lat = Vec::with_capacity(args.iterations);
    let mut lat_plain = Vec::with_capacity(if plain.is_some() { args.iterations } else { 0 });
    let mut sink = 0.0f32;
    let mut time = |s: &mut Session, ctx: &str, lat: &mut Vec<f64>| {
        if args.whole {
            s.forget_context();
        }
        let t = Instant::now();
        let p = s.predict(ctx, 5);
        sink += p.get(0).map_or(0.0, |c| c.p);
        lat.push(t.elapsed().as_nanos() as f64 / 1e3);
    };
    // Every allocation of the process while the loop runs: after warm-up nothing else runs.
    let allocations = stats_alloc::Region::new(ALLOCATOR);
    for i in 0..args.iterations {
        let ctx = &contexts[i % contexts.len()];
        match plain.as_mut() {
            None => time(&mut session, ctx, &mut lat),
            // Whichever goes second finds the caches as the other left them: take turns.
            Some(s) if i % 2 == 0 => {
                time(&mut session, ctx, &mut lat);
                time(s, ctx, &mut lat_plain);
            }
            Some(s) => {
                time(s, ctx, &mut lat_plain);
                time(&mut session, ctx, &mut lat);
            }
        }
    }
    let change = allocations.change();
    let allocations = change.allocations + change.reallocations;
    std::hint::black_box(sink);
    let (p50_without_user, p99_without_user) = if lat_plain.is_empty() {
        (None, None)
    } else {
        let (p50, p99, _) = percentiles(&mut lat_plain);
        (Some(p50), Some(p99))
    };

    let (p50, p99, mean, pps) = if args.threads == 1 {
        let (p50, p99, mean) = percentiles(&mut lat);
        (p50, p99, mean, 1e6 / mean)
    } else {
        let configure = |s: &mut Session| {
            s.set_act_precision(args.act.activations);
            s.set_ngram_weight(args.ngram_weight);
        };
        threaded(&model, &user, &contexts, args.iterations, args.threads, &configure, args.whole)
    };

    session.set_profiling(true);
    for i in 0..args.iterations.min(2000) {
        if args.whole {
            session.forget_context();
        }
        session.predict(&contexts[i % contexts.len()], 5);
    }
    let times = session.stage_times().clone();
    let total: f64 = Stage::ALL.iter().map(|&s| times.mean_us(s)).sum();
    let stages = Stage::ALL
        .iter()
        .map(|&s| StageRow { stage: s.name(), mean_us: times.mean_us(s), share: times.mean_us(s) / total.max(1e-9) })
        .collect();

    let reused_fraction = times.reused as f64 / times.predictions.max(1) as f64;
    // With the causal window most keystrokes reuse the kept keys and values, and then the p50
    // prediction is one of those: count the arithmetic it actually did.
    let word_rows = times.word_rows as f64 / times.predictions.max(1) as f64;
    let lazy_rows = if model.config().word_classes > 0 { word_rows.round() as u64 } else { 0 };
    let macs = lazy_rows * model.config().d_model as u64
        + if reused_fraction >= 0.5 { model.macs_per_keystroke() } else { model.macs_per_prediction() };
    let gflops = 2.0 * macs as f64 / (p50 * 1e3);
    // After the timed loop, so the probe's heat does not colour the latencies.
    let peak = model.kernels().measure_peak();
    let peak_gflops = args.peak_gflops.or(peak.f32_gflops).unwrap_or(DEFAULT_PEAK_GFLOPS);
    let report = Report {
        model: model.info().name.clone(),
        file_bytes: model.info().file_len,
        user_words: user.read().len(),
        p50_us_without_user: p50_without_user,
        p99_us_without_user: p99_without_user,
        vocab: model.lexicon_len(),
        kernel_level: model.kernel_level().to_string(),
        int8_isa: model.int8_isa().to_string(),
        activations: args.act.activations.to_string(),
        packed_bytes: model.packed_bytes(),
        threads: args.threads,
        predictions: args.iterations,
        p50_us: p50,
        p99_us: p99,
        mean_us: mean,
        cold_start_ms: cold.start_ms,
        cold_first_prediction_ms: cold.inside_ms,
        cold_phases: cold.phases,
        spawn_floor_ms: cold.spawn_floor_ms,
        cold_warm_up_ms: cold.warm_up_ms,
        load_ms,
        allocations_per_prediction: allocations as f64 / args.iterations as f64,
        macs_per_prediction: model.macs_per_prediction(),
        macs_per_keystroke: model.macs_per_keystroke(),
        macs_at_p50: macs,
        reused_fraction,
        word_rows_per_prediction: word_rows,
        word_classes: model.config().word_classes,
        positions: model.config().position_scheme.name().to_string(),
        gflops_at_p50: gflops,
        peak_gflops,
        peak_fraction: gflops / peak_gflops,
        peak_int8_gops: peak.int8_gops,
        // Only for a model whose layers run in the packed int8 kernels.
        peak_fraction_int8: peak.int8_gops.filter(|_| model.packed_bytes() > 0).map(|p| gflops / p),
        peak_rss_kb: cold.peak_rss_kb,
        predictions_per_second: pps,
        stages,
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report)?;
    }
    Ok(())
}

fn print_report(r: &Report) -> Result<(), CliError> {
    outln!("model        {} ({} words, {:.2} MB, kernels {})", r.model, r.vocab, r.file_bytes as f64 / 1e6, r.kernel_level);
    if r.user_words > 0 {
        outln!("user history {} learned words", r.user_words);
    }
    outln!("int8         {} kernels, {} activations, {:.2} MB packed at load", r.int8_isa, r.activations, r.packed_bytes as f64 / 1e6);
    outln!("predictions  {} on {} thread(s), batch 1", r.predictions, r.threads);
    outln!();
    outln!("| metric                      | value |");
    outln!("|-----------------------------|-------|");
    outln!("| p50 latency                 | {:.1} µs |", r.p50_us);
    if let (Some(p50), Some(p99)) = (r.p50_us_without_user, r.p99_us_without_user) {
        outln!("| p50 / p99 without history   | {p50:.1} µs / {p99:.1} µs (same loop, alternating) |");
    }
    outln!("| p99 latency                 | {:.1} µs |", r.p99_us);
    outln!("| mean latency                | {:.1} µs |", r.mean_us);
    outln!("| predictions / second        | {:.0} |", r.predictions_per_second);
    outln!("| cold start (process → first prediction) | {:.2} ms |", r.cold_start_ms);
    outln!("| … of which starting the process (spawn floor) | {:.2} ms |", r.spawn_floor_ms);
    outln!("| cold start in that process (load → first prediction) | {:.2} ms |", r.cold_first_prediction_ms);
    let c = r.cold_phases;
    outln!(
        "| … validate / prepare / session / first prediction | {:.2} / {:.2} / {:.2} / {:.2} ms |",
        c.validate_ms,
        c.prepare_ms,
        c.session_ms,
        c.first_prediction_ms
    );
    outln!("| … then warming its session up (what laya_session_new waits for) | {:.2} ms |", r.cold_warm_up_ms);
    outln!("| load in this process        | {:.2} ms |", r.load_ms);
    outln!("| peak RSS of a cold process  | {:.1} MB |", r.peak_rss_kb as f64 / 1e3);
    outln!("| allocations per prediction  | {} |", r.allocations_per_prediction);
    if r.positions == "relative_causal" {
        outln!(
            "| computed from kept keys/values | {:.1}% of predictions ({} MACs each; {} computed whole) |",
            100.0 * r.reused_fraction,
            r.macs_per_keystroke,
            r.macs_per_prediction
        );
    }
    if r.word_classes > 0 {
        outln!(
            "| word-head rows computed     | {:.0} of {} per prediction (factorised head, {} classes) |",
            r.word_rows_per_prediction,
            r.vocab,
            r.word_classes
        );
    }
    outln!(
        "| arithmetic at p50           | {:.2} GFLOP/s = {:.1}% of {:.0} GFLOP/s f32 peak ({} MACs) |",
        r.gflops_at_p50,
        100.0 * r.peak_fraction,
        r.peak_gflops,
        r.macs_at_p50
    );
    if let (Some(p), Some(f)) = (r.peak_int8_gops, r.peak_fraction_int8) {
        outln!("| same against the int8 peak  | {:.1}% of {:.0} GOP/s (vpdpbusd) |", 100.0 * f, p);
    }
    outln!();
    outln!("| stage        | mean µs | share |");
    outln!("|--------------|---------|-------|");
    for s in &r.stages {
        outln!("| {:<12} | {:>7.2} | {:>4.1}% |", s.stage, s.mean_us, 100.0 * s.share);
    }
    Ok(())
}

fn contexts(args: &Args) -> Result<Vec<String>, CliError> {
    let lines: Vec<String> = match &args.text {
        Some(p) => std::fs::read_to_string(p)
            .map_err(|e| CliError(format!("cannot read {}: {e}", p.display())))?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .take(200)
            .map(str::to_string)
            .collect(),
        None => SAMPLE_TEXT.iter().map(|s| s.to_string()).collect(),
    };
    let mut out = Vec::new();
    for line in &lines {
        let chars: Vec<char> = line.chars().collect();
        for i in 0..=chars.len() {
            out.push(chars[..i].iter().collect());
        }
    }
    if out.is_empty() {
        return Err(CliError("no contexts: the text file has no non-empty lines".into()));
    }
    Ok(out)
}

fn percentiles(lat: &mut [f64]) -> (f64, f64, f64) {
    lat.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| lat[((lat.len() - 1) as f64 * q).round() as usize];
    let mean = lat.iter().sum::<f64>() / lat.len() as f64;
    (at(0.5), at(0.99), mean)
}

#[allow(clippy::too_many_arguments)]
fn threaded(
    model: &Arc<Model>,
    user: &laya_runtime::User,
    contexts: &[String],
    iterations: usize,
    threads: usize,
    configure: &(dyn Fn(&mut Session) + Sync),
    whole: bool,
) -> (f64, f64, f64, f64) {
    let start = Instant::now();
    let all: Vec<Vec<f64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let model = Arc::clone(model);
                s.spawn(move || {
                    let mut session = Session::new(model);
                    configure(&mut session);
                    session.set_user(user.clone());
                    session.warm_up();
                    let mut lat = Vec::with_capacity(iterations);
                    for i in 0..iterations {
                        if whole {
                            session.forget_context();
                        }
                        let t0 = Instant::now();
                        std::hint::black_box(session.predict(&contexts[(i + t * 7) % contexts.len()], 5).len());
                        lat.push(t0.elapsed().as_nanos() as f64 / 1e3);
                    }
                    lat
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_default()).collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let mut lat: Vec<f64> = all.into_iter().flatten().collect();
    let n = lat.len() as f64;
    let (p50, p99, mean) = percentiles(&mut lat);
    (p50, p99, mean, n / secs)
}

/// The model with the kernels `--int8` asks for (default: detected).
fn load(args: &Args) -> Result<Arc<Model>, CliError> {
    let Some(isa) = args.int8 else {
        return args.model.load();
    };
    let kernels = laya_kernels::Kernels::detect()
        .with_int8(isa)
        .ok_or_else(|| CliError(format!("--int8 {isa}: this CPU (or this build's target) does not have it")))?;
    match &args.model.model {
        Some(p) => Ok(Model::load_with(p, kernels)?),
        None => {
            let m = crate::embedded(args.model.lang)?;
            Ok(m.load(kernels).map_err(|e| CliError(format!("the embedded model is invalid: {e}")))?)
        }
    }
}

/// The time from spawning `cmd` to reading the first line it writes (ms), that line, and the
/// second line it writes (empty if none).
fn spawn_and_read(cmd: &mut Command) -> Result<(f64, String, String, std::process::ExitStatus), CliError> {
    let t0 = Instant::now();
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let (mut line, mut second) = (String::new(), String::new());
    let mut elapsed = 0.0;
    if let Some(out) = child.stdout.take() {
        let mut out = BufReader::new(out);
        out.read_line(&mut line)?;
        elapsed = t0.elapsed().as_secs_f64() * 1e3;
        out.read_line(&mut second)?;
    }
    Ok((elapsed, line, second, child.wait()?))
}

/// Starts `--cold-runs` fresh processes that each load the model and predict once, each after
/// one that loads nothing (the spawn floor). Returns the medians of spawn → first prediction
/// and of load → first prediction (ms), the largest peak RSS (KB), the medians of the phases
/// and the median spawn floor (ms).
fn cold_start(args: &Args) -> Result<Cold, CliError> {
    let exe = std::env::current_exe()?;
    let mut times = Vec::new();
    let mut floors = Vec::new();
    let mut inside = Vec::new();
    let mut phases: [Vec<f64>; 4] = Default::default();
    let mut warm_ups = Vec::new();
    let mut rss = 0;
    for _ in 0..args.cold_runs.max(1) {
        let (floor, _, _, status) = spawn_and_read(Command::new(&exe).args(["bench", "--spawn-probe"]))?;
        if !status.success() {
            return Err(CliError(format!("spawn-floor probe failed ({status})")));
        }
        floors.push(floor);
        let mut cmd = Command::new(&exe);
        cmd.args(["bench", "--cold-probe", "--activations", &args.act.activations.to_string()]);
        cmd.args(["--ngram-weight", &args.ngram_weight.to_string()]);
        match &args.model.model {
            Some(m) => cmd.arg("--model").arg(m),
            None => cmd.arg("--lang").arg(args.model.lang.name()),
        };
        if let Some(i) = args.int8 {
            cmd.arg("--int8").arg(i.to_string());
        }
        let (elapsed, line, second, status) = spawn_and_read(&mut cmd)?;
        let failed = || CliError(format!("cold-start probe failed ({status})"));
        let probe: Probe = serde_json::from_str(line.trim()).map_err(|_| failed())?;
        let warm_up: WarmUp = serde_json::from_str(second.trim()).map_err(|_| failed())?;
        times.push(elapsed);
        inside.push(probe.first_prediction_us / 1e3);
        for (all, us) in phases.iter_mut().zip(probe.phases_us) {
            all.push(us / 1e3);
        }
        rss = rss.max(probe.peak_rss_kb);
        warm_ups.push(warm_up.warm_up_us / 1e3);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let [v, p, s, f] = &mut phases;
    let phases = ColdPhases { validate_ms: median(v), prepare_ms: median(p), session_ms: median(s), first_prediction_ms: median(f) };
    Ok(Cold {
        start_ms: median(&mut times),
        inside_ms: median(&mut inside),
        peak_rss_kb: rss,
        phases,
        spawn_floor_ms: median(&mut floors),
        warm_up_ms: median(&mut warm_ups),
    })
}

fn probe(args: &Args) -> Result<(), CliError> {
    let t0 = Instant::now();
    let model = load(args)?;
    let load_time = model.info().load_time;
    let t1 = Instant::now();
    let mut session = Session::new(model);
    session.set_act_precision(args.act.activations);
    session.set_ngram_weight(args.ngram_weight);
    let t2 = Instant::now();
    std::hint::black_box(session.predict("今天天气", 5).len());
    let t3 = Instant::now();
    let us = |d: std::time::Duration| d.as_secs_f64() * 1e6;
    // Loading is validate + prepare plus opening (or mapping) the file, counted with prepare.
    let prepare = us(t1 - t0) - us(load_time.validate);
    let phases_us = [us(load_time.validate), prepare, us(t2 - t1), us(t3 - t2)];
    outln!("{}", serde_json::to_string(&Probe { first_prediction_us: us(t3 - t0), peak_rss_kb: peak_rss_kb(), phases_us })?);
    let t4 = Instant::now();
    session.warm_up();
    outln!("{}", serde_json::to_string(&WarmUp { warm_up_us: us(t4.elapsed()) })?);
    Ok(())
}

/// VmHWM from /proc (Linux); 0 elsewhere.
fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figure `laya bench` reports counts what the process allocates (a counter that never
    /// moved would make "0 allocations per prediction" meaningless).
    #[test]
    fn the_allocator_counts_allocations_and_reallocations() {
        let region = stats_alloc::Region::new(ALLOCATOR);
        let mut v: Vec<u64> = Vec::with_capacity(1);
        v.extend(0..1000);
        std::hint::black_box(&v);
        let change = region.change();
        assert!(change.allocations >= 1 && change.reallocations >= 1, "{change:?}");
    }
}
