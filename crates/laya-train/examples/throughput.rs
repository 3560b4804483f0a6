//! Training throughput on synthetic events (d 128, 3 blocks, FFN 512, lexicon 512 and 20,000).
//!
//! `cargo run --release -p laya-train --example throughput [--features mimalloc]`
//! (`LAYA_THREADS=1,2`, `LAYA_BATCH=128,512`, `LAYA_LAYERS`, `LAYA_FFN`, `LAYA_D_MODEL` and
//! `LAYA_HEADS` for the blocks (`3 512 192 3` is the default model's shape), `LAYA_POSITIONS=relative_causal` for the causal scheme, `LAYA_WORD_CLASSES=K`
//! for a factorised word head (`LAYA_OWN_CLASS_WORDS=N`: the first N words in classes of their
//! own, as `laya train --own-class-words`), `LAYA_STEPS` timed steps, `LAYA_DEVICE=cuda` to
//! train on the GPU: build with `--features cuda`, see scripts/gpu-bench.sh). It times `train_step` (batch shards side by side,
//! candle's elementwise pool off, as `laya train` runs); `LAYA_STEP=whole` times the one-graph
//! step with candle's pool on, phase by phase, for comparison.
//!
//! The parent process re-runs itself once per thread count because candle reads
//! `RAYON_NUM_THREADS` once per process.

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use candle_core::Var;
use laya_train::*;
use std::time::{Duration, Instant};

fn synthetic_events(n: usize, vocab: usize, seed: u64) -> Vec<Event> {
    let mut rng = Rng::new(seed, 9);
    (0..n)
        .map(|_| {
            let len = 1 + rng.below(30);
            // CJK-ish context over ~3,000 distinct codepoints, like Chinese text.
            let context: String = (0..len).map(|_| char::from_u32(0x4E00 + rng.below(3000) as u32).unwrap()).collect();
            let shown: Vec<Shown> =
                (0..5).map(|_| Shown { word: format!("w{}", rng.below(vocab)), replace: rng.below(3) as u32 }).collect();
            Event { context, shown, clicked: Some(rng.below(5)), weight: 1.0 }
        })
        .collect()
}

struct Breakdown {
    samples: usize,
    forward: Duration,
    backward: Duration,
    optimizer: Duration,
    total: Duration,
}

/// `LAYA_STEP=whole`: time the one-graph step below (the step before batch sharding, with
/// candle's elementwise pool on) instead of `train_step`.
fn whole_step() -> bool {
    std::env::var("LAYA_STEP").is_ok_and(|s| s == "whole")
}

/// The one-graph step (what `train_step` does on one thread), timed phase by phase.
fn timed_step(net: &LayaNet, opt: &mut AdamW, batch: &Batch, cfg: &TrainConfig, b: &mut Breakdown) {
    let t0 = Instant::now();
    if !whole_step() {
        train_step(net, opt, batch, cfg, 1e-3).unwrap();
        b.total += t0.elapsed();
        b.samples += batch.size;
        return;
    }
    let gathered = net.gather_rows(&batch.rows).unwrap();
    let leaf = Var::from_tensor(&gathered).unwrap();
    let z = net.forward_hidden(leaf.as_tensor(), &batch.rows).unwrap();
    let (total, _, _) = fused_loss_tensors(net, &z, batch, cfg.replace_loss_weight).unwrap();
    // A GPU runs asynchronously: wait for it at each phase boundary (a no-op on the CPU).
    let sync = || net.device().synchronize().unwrap();
    sync();
    let t1 = Instant::now();
    let mut store = total.backward().unwrap();
    sync();
    let t2 = Instant::now();
    let mut grads = Grads::default();
    for p in net.params() {
        grads.dense.push(if p.kind == ParamKind::TokenEmbedding { None } else { store.remove(p.var.as_tensor()) });
    }
    let g = store.remove(leaf.as_tensor()).unwrap();
    if net.device().is_cpu() {
        grads.add_embedding_rows(&batch.rows, &g.flatten_all().unwrap().to_vec1::<f32>().unwrap(), net.config().d_model);
    } else {
        grads.add_embedding_rows_on_device(&batch.rows, &g).unwrap();
    }
    let norm = AdamW::grad_norm(&grads).unwrap();
    let scale = if norm > cfg.grad_clip { (cfg.grad_clip / norm) as f32 } else { 1.0 };
    opt.step(net.params(), &grads, 1e-3, scale).unwrap();
    sync();
    let t3 = Instant::now();
    b.forward += t1 - t0;
    b.backward += t2 - t1;
    b.optimizer += t3 - t2;
    b.total += t3 - t0;
    b.samples += batch.size;
}

fn child(vocab: usize, mapping: &str, batch_size: usize) {
    let words: Vec<String> = (0..vocab).map(|i| format!("w{i}")).collect();
    // Timed steps after 4 warm-up steps (LAYA_STEPS, default 20).
    let steps: usize = std::env::var("LAYA_STEPS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let events = synthetic_events(batch_size * (steps + 4), vocab, 1);
    let mapping = match mapping {
        "direct" => Mapping::Direct,
        _ => laya_train::table_mapping(events.iter().map(|e| e.context.as_str()), 4096, 1, &[NormRule::FullwidthAscii]),
    };
    let mut mc = ModelConfig::standard(words, vec![1; vocab], mapping);
    // LAYA_FFN / LAYA_LAYERS: the blocks (default 512 / 3; the default model is 256 / 2).
    let env = |k: &str, d: usize| std::env::var(k).ok().and_then(|s| s.parse().ok()).unwrap_or(d);
    mc.ffn = vec![env("LAYA_FFN", 512); env("LAYA_LAYERS", 3)];
    // LAYA_D_MODEL / LAYA_HEADS: the width and the attention heads (default 128 / 2).
    mc.d_model = env("LAYA_D_MODEL", mc.d_model);
    mc.heads = env("LAYA_HEADS", mc.heads);
    // LAYA_POSITIONS: learned_absolute (default) or relative_causal (R = L·(T−1)+1 rows a sample).
    if let Ok(name) = std::env::var("LAYA_POSITIONS") {
        mc.position_scheme = PositionScheme::from_name(&name).expect("LAYA_POSITIONS: learned_absolute or relative_causal");
    }
    // LAYA_WORD_CLASSES=K: a factorised word head over K classes of consecutive word ids (the
    // synthetic words have no first characters to group by; the cost depends on class sizes).
    let k = env("LAYA_WORD_CLASSES", 0);
    let own = env("LAYA_OWN_CLASS_WORDS", 0).min(vocab);
    if k > 0 {
        let rest = vocab - own;
        mc.word_class = Some((0..vocab).map(|i| if i < own { i as u32 } else { (own + (i - own) * k.min(rest) / rest) as u32 }).collect());
    }
    let tc = TrainConfig { batch_size, ..TrainConfig::default() };
    let device = parse_device(&std::env::var("LAYA_DEVICE").unwrap_or_else(|_| "cpu".into())).unwrap();
    let net = LayaNet::new(mc.clone(), 1).unwrap().to_device(&device).unwrap();
    let mut opt = AdamW::new(net.params(), &tc).unwrap();
    let set = encode_events(&events, &mc, &tc);
    let batches: Vec<Batch> = (0..set.len() / batch_size)
        .map(|k| make_batch(&set, &((k * batch_size)..((k + 1) * batch_size)).collect::<Vec<_>>(), vocab, 8, net.device()).unwrap())
        .collect();
    // As `train` does: the steps run on a worker of the training pool (`training_pool`), unless
    // LAYA_NO_POOL is set (the calling thread then sleeps through every fork).
    let pool = training_pool().unwrap();
    let on_pool = std::env::var_os("LAYA_NO_POOL").is_none();
    let run = |f: &mut (dyn FnMut() + Send)| if on_pool { pool.install(f) } else { f() };
    let mut b =
        Breakdown { samples: 0, forward: Duration::ZERO, backward: Duration::ZERO, optimizer: Duration::ZERO, total: Duration::ZERO };
    run(&mut || {
        for batch in &batches[..4] {
            timed_step(&net, &mut opt, batch, &tc, &mut b); // warm-up
        }
    });
    b = Breakdown { samples: 0, forward: Duration::ZERO, backward: Duration::ZERO, optimizer: Duration::ZERO, total: Duration::ZERO };
    run(&mut || {
        for batch in &batches[4..] {
            timed_step(&net, &mut opt, batch, &tc, &mut b);
        }
        net.device().synchronize().unwrap();
    });
    let tot = b.total.as_secs_f64();
    let phases = if whole_step() {
        format!(
            "   whole step: forward {:>4.1}%  backward {:>4.1}%  optimizer {:>4.1}%",
            100.0 * b.forward.as_secs_f64() / tot,
            100.0 * b.backward.as_secs_f64() / tot,
            100.0 * b.optimizer.as_secs_f64() / tot,
        )
    } else {
        format!("   train_step, {} shards", shard_count(batch_size, rayon::current_num_threads()))
    };
    println!(
        "{}  {}  K {k:>4}  V {vocab:>6}  rows {:>5}  batch {batch_size:>3}  threads {:>2}  {:>7.0} samples/s{phases}",
        mc.position_scheme.name(),
        std::env::var("LAYA_DEVICE").unwrap_or_else(|_| "cpu".into()),
        mc.rows(),
        std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "auto".into()),
        b.samples as f64 / tot,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 5 && args[1] == "--child" {
        if !whole_step() {
            configure_candle_threads(); // as `laya` does
        }
        child(args[2].parse().unwrap(), &args[3], args[4].parse().unwrap());
        return;
    }
    println!("allocator: {}", if cfg!(feature = "mimalloc") { "mimalloc" } else { "system" });
    let exe = std::env::current_exe().unwrap();
    let threads: Vec<String> = std::env::var("LAYA_THREADS").unwrap_or_else(|_| "1,2".into()).split(',').map(String::from).collect();
    let batches: Vec<String> = std::env::var("LAYA_BATCH").unwrap_or_else(|_| "128".into()).split(',').map(String::from).collect();
    let mappings: Vec<String> = std::env::var("LAYA_MAPPING").unwrap_or_else(|_| "table".into()).split(',').map(String::from).collect();
    for vocab in ["512", "20000"] {
        for mapping in &mappings {
            for bs in &batches {
                for t in &threads {
                    let status = std::process::Command::new(&exe)
                        .args(["--child", vocab, mapping, bs])
                        .env("RAYON_NUM_THREADS", t)
                        .status()
                        .unwrap();
                    assert!(status.success());
                }
            }
        }
    }
}
