//! The output memory (docs/format.md §3 step 4): it changes the logits and survives a round
//! trip, training moves the rows it picks, and a model gains one without changing what it
//! predicts. That the runtime computes the same logits is in parity.rs.

use laya_format::memory::Memory;
use laya_train::*;

const TEXT: &str = "今天天气不错，明天也好。hello world 😀 一二三四五六七八九十一二三四五六七八九十";

fn config() -> ModelConfig {
    let words: Vec<String> = ["今天", "天气", "明天", "明白", "hello", "world", "的", "好"].iter().map(|s| s.to_string()).collect();
    let freqs = vec![1; words.len()];
    let mapping = laya_train::table_mapping([TEXT], 40, 1, &[NormRule::FullwidthAscii]);
    let mut cfg = ModelConfig::standard(words, freqs, mapping);
    cfg.d_model = 64;
    cfg.ffn = vec![96, 64];
    cfg.position_scheme = PositionScheme::RelativeCausal;
    cfg.memory = Some(Memory { buckets: 97, orders: vec![1, 2, 4] });
    cfg
}

/// Every table row, memory rows included, at U(−0.5, 0.5): zero memory rows would hide a
/// runtime that picked the wrong ones.
fn randomise(net: &LayaNet, seed: u64) {
    let mut rng = Rng::new(seed, 5);
    for p in net.params().iter().filter(|p| p.kind == ParamKind::TokenEmbedding) {
        let v: Vec<f32> = (0..p.var.elem_count()).map(|_| (rng.uniform() - 0.5) as f32).collect();
        p.var.set(&candle_core::Tensor::from_vec(v, p.var.dims(), net.device()).unwrap()).unwrap();
    }
}

fn info() -> ExportInfo {
    ExportInfo { name: "memory".into(), language: "zh".into(), training_data: "random".into(), created: "2026-12-05".into() }
}

#[test]
fn the_memory_changes_the_logits_and_survives_a_round_trip() {
    let net = LayaNet::new(config(), 3).unwrap();
    randomise(&net, 2);
    let mut without = config();
    without.memory = None;
    let plain = LayaNet::new(without, 3).unwrap();
    for (a, b) in plain.params().iter().zip(net.params()) {
        let mut v: Vec<f32> = b.var.flatten_all().unwrap().to_vec1().unwrap();
        v.truncate(a.var.elem_count());
        a.var.set(&candle_core::Tensor::from_vec(v, a.var.dims(), net.device()).unwrap()).unwrap();
    }
    let ctx = ["今天天气"];
    assert_ne!(net.predict_logits(&ctx).unwrap(), plain.predict_logits(&ctx).unwrap());
    let bytes = net.export_bytes(&info(), Precision::F32).unwrap();
    let back = LayaNet::from_laya(&laya_format::LayaFile::parse(&bytes).unwrap()).unwrap();
    assert_eq!(back.config().memory, config().memory);
    assert_eq!(back.predict_logits(&ctx).unwrap(), net.predict_logits(&ctx).unwrap());
}

fn events() -> Vec<Event> {
    let pairs = [("今天", "天气"), ("明天", "好"), ("hello ", "world"), ("今天天气", "好"), ("", "今天"), ("明", "明白")];
    pairs
        .iter()
        .map(|&(ctx, word)| Event {
            context: ctx.to_string(),
            shown: vec![Shown { word: "的".into(), replace: 0 }, Shown { word: word.into(), replace: 0 }],
            clicked: Some(1),
            weight: 1.0,
        })
        .collect()
}

/// Training moves only the memory rows the batch's contexts pick; with the batch cut into
/// shards on several threads, each shard's rows still get that shard's gradient (the same
/// losses as one thread, to rounding).
#[test]
fn training_moves_the_rows_the_contexts_pick_on_any_thread_count() {
    let tc = TrainConfig { lr: 1e-2, warmup_steps: 0, batch_size: 128, ..TrainConfig::default() };
    let ev: Vec<Event> = events().into_iter().cycle().take(128).collect();
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| {
            let net = LayaNet::new(config(), 4).unwrap();
            let mut opt = AdamW::new(net.params(), &tc).unwrap();
            let set = encode_events(&ev, net.config(), &tc);
            let idx: Vec<usize> = (0..set.len()).collect();
            let batch = make_batch(&set, &idx, net.config().vocab(), 8, net.device()).unwrap();
            let losses: Vec<f32> = (0..20).map(|_| train_step(&net, &mut opt, &batch, &tc, tc.lr).unwrap().0.total).collect();
            let picked: std::collections::BTreeSet<u32> = net.config().memory_rows(&batch.rows).into_iter().collect();
            (net, losses, picked)
        })
    };
    let (net, one, picked) = run(1);
    let (_, four, _) = run(4);
    assert!(one[19] < 0.7 * one[0], "loss {} -> {}", one[0], one[19]);
    for (a, b) in one.iter().zip(&four) {
        assert!((a - b).abs() <= 1e-3 * (1.0 + a.abs()), "losses differ across thread counts: {one:?} against {four:?}");
    }
    let d = net.config().d_model;
    let table: Vec<f32> = net.token_embedding().flatten_all().unwrap().to_vec1().unwrap();
    let base = net.config().rows();
    for b in 0..97u32 {
        let row = &table[(base + b as usize) * d..][..d];
        let moved = row.iter().any(|&x| x != 0.0);
        assert_eq!(moved, picked.contains(&(base as u32 + b)), "memory row {b}");
    }
}

#[test]
fn a_trained_model_gains_a_memory_without_changing_its_predictions() {
    let mut cfg = config();
    cfg.memory = None;
    let net = LayaNet::new(cfg, 5).unwrap();
    let bytes = net.export_bytes(&info(), Precision::F32).unwrap();
    let dir = std::env::temp_dir().join(format!("laya-memory-init-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("m.laya");
    std::fs::write(&path, &bytes).unwrap();
    let memory = Memory { buckets: 31, orders: vec![2, 3] };
    let init = load_init(&path, InitOptions { memory: Some(memory.clone()), ..InitOptions::default() }).unwrap();
    assert_eq!(init.net.config().memory, Some(memory));
    assert_eq!(init.net.predict_logits(&[TEXT]).unwrap(), net.predict_logits(&[TEXT]).unwrap());
    // A model's memory cannot change.
    let with = init.net.export_bytes(&info(), Precision::F32).unwrap();
    std::fs::write(&path, &with).unwrap();
    let e =
        load_init(&path, InitOptions { memory: Some(Memory { buckets: 32, orders: vec![2, 3] }), ..InitOptions::default() }).err().unwrap();
    assert!(e.to_string().contains("cannot change"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
