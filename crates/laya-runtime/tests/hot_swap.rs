//! SPEC.md "Hot model update", proven under load: threads predict continuously while another
//! thread swaps between two models with distinguishable outputs, and now and then tries to
//! swap to a corrupt file. Every prediction must equal one model's precomputed output exactly
//! (never a mix), corrupt files must be refused while the old model keeps serving, and
//! models, mappings and memory must return to baseline afterwards.

mod common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Weak};

use common::{model_bytes, CONTEXTS};
use laya_format::testing::TinyConfig;
use laya_format::GgmlType;
use laya_runtime::{install, Engine, EngineSession, Model, Session};

const THREADS: usize = 4;
const K: usize = 5;

type Top = Vec<(String, usize, u32)>;

fn top(preds: laya_runtime::Predictions<'_>) -> Top {
    preds.iter().map(|c| (c.word.to_string(), c.replace, c.p.to_bits())).collect()
}

fn scratch_dir(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("hot-swap-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Two same-shaped models from different seeds, their files, and each one's top-5 for every
/// context, computed with a plain `Session` before any engine exists.
struct Fixture {
    dir: PathBuf,
    a: PathBuf,
    b: PathBuf,
    bad: Vec<PathBuf>,
    checksums: [u64; 2],
    expected: [Vec<Top>; 2],
}

fn fixture(test: &str) -> Fixture {
    let dir = scratch_dir(test);
    let cfg = TinyConfig::small();
    let (a, b) = (dir.join("a.laya"), dir.join("b.laya"));
    let bytes_a = model_bytes(&cfg, 101, GgmlType::F32);
    std::fs::write(&a, &bytes_a).unwrap();
    std::fs::write(&b, model_bytes(&cfg, 202, GgmlType::Q8_0)).unwrap();

    let mut flipped = bytes_a.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x10;
    let mut bad = vec![dir.join("flipped.laya"), dir.join("truncated.laya"), dir.join("missing.laya")];
    std::fs::write(&bad[0], &flipped).unwrap();
    std::fs::write(&bad[1], &bytes_a[..bytes_a.len() * 2 / 3]).unwrap();
    bad.push(dir.join("empty.laya"));
    std::fs::write(&bad[3], b"").unwrap();

    let mut checksums = [0; 2];
    let expected = [&a, &b].map(|p| {
        let m = Model::load(p).unwrap();
        let mut s = Session::new(m);
        CONTEXTS.iter().map(|c| top(s.predict(c, K))).collect::<Vec<_>>()
    });
    for (i, p) in [&a, &b].into_iter().enumerate() {
        checksums[i] = Model::load(p).unwrap().info().checksum;
    }
    assert_ne!(checksums[0], checksums[1]);
    for (i, ctx) in CONTEXTS.iter().enumerate() {
        assert_ne!(expected[0][i], expected[1][i], "the models must be distinguishable on {ctx:?}");
        assert_eq!(expected[0][i].len(), K);
    }
    Fixture { dir, a, b, bad, checksums, expected }
}

#[derive(Default, Debug)]
struct Counts {
    predictions: AtomicU64,
    served: [AtomicU64; 2],
    mismatches: AtomicU64,
}

/// One predictor thread: every result must be exactly one model's expected output, and that
/// model must be the one the session says served it.
fn predictor(mut s: EngineSession, fx: &Fixture, counts: &Counts, stop: &AtomicBool) {
    let mut i = 0usize;
    while !stop.load(Ordering::Acquire) {
        let ctx = i % CONTEXTS.len();
        let got = top(s.predict(CONTEXTS[ctx], K));
        let served_by = s.model().info().checksum;
        match (0..2).find(|&m| got == fx.expected[m][ctx]) {
            Some(m) if fx.checksums[m] == served_by => {
                counts.served[m].fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                counts.mismatches.fetch_add(1, Ordering::Relaxed);
                eprintln!("mismatch on {:?}: {got:?}", CONTEXTS[ctx]);
            }
        }
        counts.predictions.fetch_add(1, Ordering::Release);
        i += 1;
        // Four predictors on a two-core CI machine would otherwise starve the swapper.
        std::thread::yield_now();
    }
}

/// Lets the predictors make progress before the next swap, so every generation is actually
/// served (without a timed wait).
fn wait_for_predictions(counts: &Counts, since: u64, n: u64) -> u64 {
    loop {
        let now = counts.predictions.load(Ordering::Acquire);
        if now >= since + n {
            return now;
        }
        std::thread::yield_now();
    }
}

#[cfg(target_os = "linux")]
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let resident: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    resident * 4096
}

#[cfg(not(target_os = "linux"))]
fn rss_bytes() -> u64 {
    0
}

/// Lines of /proc/self/maps naming a file in `dir` (0 off Linux).
fn mappings_in(dir: &Path) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let dir = dir.to_str().unwrap();
    maps.lines().filter(|l| l.contains(dir)).count()
}

fn live(models: &mut Vec<Weak<Model>>) -> usize {
    models.retain(|w| w.strong_count() > 0);
    models.len()
}

#[test]
fn a_thousand_swaps_under_load_serve_only_complete_models() {
    const SWAPS: usize = 1000;
    let fx = fixture("load");
    let engine = Engine::open(&fx.a).unwrap();
    let counts = Counts::default();
    let stop = AtomicBool::new(false);
    let start = Barrier::new(THREADS + 1);
    let (mut failures, mut refused) = (0u64, 0u64);
    let mut models: Vec<Weak<Model>> = vec![Arc::downgrade(&engine.current())];
    let mut max_live = 0;
    let (mut rss_start, mut rss_end) = (0, 0);

    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            let s = engine.session();
            let (fx, counts, stop, start) = (&fx, &counts, &stop, &start);
            scope.spawn(move || {
                start.wait();
                predictor(s, fx, counts, stop)
            });
        }
        start.wait();
        let mut seen = 0;
        for i in 0..SWAPS {
            let (path, m) = if i % 2 == 0 { (&fx.b, 1) } else { (&fx.a, 0) };
            match engine.swap_to(path) {
                Ok(r) => {
                    assert_eq!(r.new_checksum, fx.checksums[m]);
                    assert_eq!(r.generation, i as u64 + 1);
                }
                Err(e) => {
                    failures += 1;
                    eprintln!("swap {i} failed: {e}");
                }
            }
            models.push(Arc::downgrade(&engine.current()));
            if i % 10 == 5 {
                let bad = &fx.bad[(i / 10) % fx.bad.len()];
                let before = engine.current().info().checksum;
                match engine.swap_to(bad) {
                    Err(_) => refused += 1,
                    Ok(_) => panic!("{} was accepted", bad.display()),
                }
                assert_eq!(engine.current().info().checksum, before, "a refused swap changed the model");
                assert_eq!(engine.generation(), i as u64 + 1);
            }
            // Current model + at most one per session + the one a session may still be
            // finishing a prediction on: nothing accumulates.
            max_live = max_live.max(live(&mut models));
            assert!(max_live <= THREADS + 2, "{max_live} models alive");
            seen = wait_for_predictions(&counts, seen, THREADS as u64);
            if i == 50 {
                rss_start = rss_bytes();
            }
        }
        rss_end = rss_bytes();
        stop.store(true, Ordering::Release);
    });

    // The sessions are gone: only the engine's current model is left, mapped once.
    let current = engine.current();
    assert_eq!(live(&mut models), 1, "models leaked");
    assert_eq!(Arc::strong_count(&current), 2, "engine + this handle");
    let last = usize::from((SWAPS - 1).is_multiple_of(2));
    assert_eq!(current.info().checksum, fx.checksums[last]);
    drop(current);
    if cfg!(target_os = "linux") {
        assert_eq!(mappings_in(&fx.dir), 1, "exactly the current model stays mapped");
        drop(engine);
        assert_eq!(mappings_in(&fx.dir), 0, "dropping the engine unmaps the last model");
    }
    let growth = rss_end.saturating_sub(rss_start);
    assert!(growth < 16 << 20, "RSS grew by {growth} bytes over {SWAPS} swaps");

    let predictions = counts.predictions.load(Ordering::Relaxed);
    let served = [0, 1].map(|m| counts.served[m].load(Ordering::Relaxed));
    let mismatches = counts.mismatches.load(Ordering::Relaxed);
    println!(
        "hot swap under load: threads={THREADS} swaps={SWAPS} refused_corrupt_swaps={refused} \
         predictions={predictions} served_by_a={} served_by_b={} mismatches={mismatches} \
         failures={failures} max_live_models={max_live} rss_growth_bytes={growth}",
        served[0], served[1]
    );
    assert_eq!(mismatches, 0);
    assert_eq!(failures, 0);
    assert_eq!(refused as usize, SWAPS / 10);
    assert!(predictions >= (SWAPS * THREADS) as u64);
    assert!(served[0] > 0 && served[1] > 0);
    let _ = std::fs::remove_dir_all(&fx.dir);
}

/// The deployment path: `install` renames a new file over the very path the engine mapped,
/// then the engine swaps to it. Old mappings stay on the old inode, so sessions still
/// predicting on the old model keep getting its exact outputs.
#[test]
fn install_over_the_served_path_then_swap_under_load() {
    const ROUNDS: usize = 60;
    let fx = fixture("install");
    let live_dir = fx.dir.join("live");
    std::fs::create_dir_all(&live_dir).unwrap();
    let target = install(&fx.a, &live_dir, "current.laya").unwrap();
    let engine = Engine::open(&target).unwrap();
    let counts = Counts::default();
    let stop = AtomicBool::new(false);
    let mut refused = 0;

    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            let s = engine.session();
            let (fx, counts, stop) = (&fx, &counts, &stop);
            scope.spawn(move || predictor(s, fx, counts, stop));
        }
        let mut seen = 0;
        for i in 0..ROUNDS {
            let (src, m) = if i % 2 == 0 { (&fx.b, 1) } else { (&fx.a, 0) };
            install(src, &live_dir, "current.laya").unwrap();
            // Not swapped yet: the engine still serves the old inode, whose bytes are intact.
            seen = wait_for_predictions(&counts, seen, THREADS as u64);
            assert_eq!(engine.swap_to(&target).unwrap().new_checksum, fx.checksums[m]);
            if i % 6 == 3 {
                let err = install(&fx.bad[(i / 6) % 2], &live_dir, "current.laya").unwrap_err();
                assert!(err.to_string().contains("refusing to install"), "{err}");
                refused += 1;
                assert_eq!(Model::load(&target).unwrap().info().checksum, fx.checksums[m]);
            }
            seen = wait_for_predictions(&counts, seen, THREADS as u64);
        }
        stop.store(true, Ordering::Release);
    });

    let names: HashSet<String> = std::fs::read_dir(&live_dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names, HashSet::from(["current.laya".to_string(), ".current.laya.lock".to_string()]));
    let mismatches = counts.mismatches.load(Ordering::Relaxed);
    println!(
        "install + swap under load: threads={THREADS} installs={ROUNDS} refused_installs={refused} \
         predictions={} mismatches={mismatches}",
        counts.predictions.load(Ordering::Relaxed)
    );
    assert_eq!(mismatches, 0);
    if cfg!(target_os = "linux") {
        drop(engine);
        assert_eq!(mappings_in(&fx.dir), 0);
    }
    let _ = std::fs::remove_dir_all(&fx.dir);
}

#[test]
fn a_session_created_before_any_swap_follows_every_swap() {
    let fx = fixture("follow");
    let engine = Engine::open(&fx.a).unwrap();
    let mut s = engine.session();
    let other = engine.clone();
    for round in 0..4 {
        let m = round % 2;
        assert_eq!(top(s.predict(CONTEXTS[2], K)), fx.expected[m][2]);
        other.swap_to(if m == 0 { &fx.b } else { &fx.a }).unwrap();
    }
    // The session keeps the shared state alive after every engine handle is gone.
    drop((engine, other));
    assert_eq!(top(s.predict(CONTEXTS[2], K)), fx.expected[0][2]);
    let _ = std::fs::remove_dir_all(&fx.dir);
}
