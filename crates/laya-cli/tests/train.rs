//! `laya train` end to end on a tiny network: a fresh model, then `--init` continuing it, and
//! the refusals a user can trip over.

#![cfg(feature = "train")]

mod common;
use common::{laya, tmp};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A log where "今天" is always followed by "天气" and "天气" by "不错". Written once per test
/// process: the tests run in parallel, and rewriting the shared file while another test's
/// `laya train` reads it made that read see a half-written line.
fn fixtures() -> (PathBuf, PathBuf) {
    static FILES: std::sync::OnceLock<(PathBuf, PathBuf)> = std::sync::OnceLock::new();
    FILES.get_or_init(write_fixtures).clone()
}

fn write_fixtures() -> (PathBuf, PathBuf) {
    let mut log = String::new();
    for _ in 0..40 {
        log.push_str(r#"{"v":1,"context":"今天","shown":[{"word":"天气","replace":0},{"word":"不错","replace":0}],"clicked":0}"#);
        log.push('\n');
        log.push_str(r#"{"v":1,"context":"今天天气","shown":[{"word":"不错","replace":0},{"word":"天气","replace":0}],"clicked":0}"#);
        log.push('\n');
    }
    let (events, lexicon) = (tmp("events.jsonl"), tmp("lexicon.tsv"));
    std::fs::write(&events, log).unwrap();
    std::fs::write(&lexicon, "天气\t10\n不错\t5\n今天\t3\n").unwrap();
    (events, lexicon)
}

fn tiny(cmd: &mut Command) -> &mut Command {
    cmd.args(["--layers", "1"]).pipe(tiny_blocks)
}

/// `tiny` without the block count.
fn tiny_blocks(cmd: &mut Command) -> &mut Command {
    cmd.args(["--d-model", "32", "--heads", "2", "--ffn", "32", "--batch-size", "16"])
        .args(["--warmup-steps", "2", "--epochs", "2", "--precision", "f32"])
        .env("RAYON_NUM_THREADS", "1")
}

/// `laya train --init MODEL` on `events` (training and validation), the tiny settings, plus
/// `extra` flags.
fn train_init(model: &Path, events: &Path, out: &Path, extra: &[&str]) -> Output {
    laya()
        .args(["train", "--init"])
        .arg(model)
        .arg("--events")
        .arg(events)
        .arg("--valid-events")
        .arg(events)
        .arg("--out")
        .arg(out)
        .pipe(tiny)
        .args(extra)
        .output()
        .unwrap()
}

fn ok(out: Output) -> String {
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    text
}

fn word_loss_of_first_epoch(text: &str) -> f32 {
    // The final table: "epoch step train valid word ..." then one row per epoch.
    let mut lines = text.lines().skip_while(|l| !l.starts_with("epoch  step"));
    lines.next();
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    row[2].parse().unwrap()
}

#[test]
fn trains_then_continues_from_the_model_with_init() {
    let (events, lexicon) = fixtures();
    let first = tmp("first.laya");
    let out = train_new(&events, &lexicon, &first, &[]);
    let fresh = word_loss_of_first_epoch(&out);
    // A new model's words get ids in byte order (the lexicon file lists them by frequency), each
    // keeping its frequency, so the runtime loads the lexicon without sorting it.
    let meta = laya_format::LayaFile::parse(&std::fs::read(&first).unwrap()).unwrap().meta;
    assert_eq!(meta.words, vec!["不错", "今天", "天气"]);
    assert_eq!(meta.frequencies, vec![5, 3, 10]);

    // The completion prior's dictionary frequencies (`laya prior`) survive `--init`.
    let dict = tmp("dict.txt");
    std::fs::write(&dict, "天气 100 n\n今天 50 t\n").unwrap();
    ok(laya().arg("prior").arg("--dict").arg(&dict).arg(&first).arg(&first).output().unwrap());

    let second = tmp("second.laya");
    let text = ok(train_init(&first, &events, &second, &[]));
    assert!(text.contains("kept the dictionary frequencies"), "{text}");
    let continued = word_loss_of_first_epoch(&text);
    let meta = laya_format::LayaFile::parse(&std::fs::read(&second).unwrap()).unwrap().meta;
    assert_eq!(meta.dict_frequencies, Some(vec![0, 50, 100]), "by word: 不错, 今天, 天气");
    assert!(continued < fresh, "continuing should start from the trained weights: {continued} vs {fresh}");

    let pred = ok(laya().args(["predict", "--model"]).arg(&second).args(["--json", "今天"]).output().unwrap());
    assert!(pred.contains("天气"), "{pred}");
}

#[test]
fn threads_flag_sets_the_training_pool_and_refuses_zero() {
    let (events, lexicon) = fixtures();
    // --threads wins over the environment (which `tiny` sets to 1).
    let out = train_cmd(&events, &lexicon, &tmp("threads.laya")).pipe(tiny).args(["--threads", "2"]).output().unwrap();
    let text = ok(out);
    assert!(text.contains("lexicon 3 words, 2 threads"), "{text}");

    let out = laya().args(["train", "--events"]).arg(&events).arg("--lexicon").arg(&lexicon).args(["--threads", "0"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--threads"), "{err}");
}

#[test]
fn init_refuses_a_quantized_model_and_a_second_lexicon() {
    let (events, lexicon) = fixtures();
    let model = tmp("q.laya");
    let (meta, tensors) = laya_format::testing::random_model(&laya_format::testing::TinyConfig::default(), 3, laya_format::GgmlType::Q8_0);
    std::fs::write(&model, laya_format::write_model(&meta, &tensors).unwrap()).unwrap();
    let out = laya().args(["train", "--init"]).arg(&model).arg("--events").arg(&events).arg("--out").arg(tmp("x.laya")).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("before `laya quantize`"), "{err}");

    let out = laya()
        .args(["train", "--init"])
        .arg(&model)
        .arg("--lexicon")
        .arg(&lexicon)
        .arg("--events")
        .arg(&events)
        .arg("--out")
        .arg(tmp("y.laya"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--lexicon"));
}

trait Pipe {
    fn pipe(&mut self, f: impl FnOnce(&mut Self) -> &mut Self) -> &mut Self;
}

impl Pipe for Command {
    fn pipe(&mut self, f: impl FnOnce(&mut Self) -> &mut Self) -> &mut Self {
        f(self)
    }
}

/// Mid-word events whose bar also shows a next word: with the default `--shown-scope
/// same-replace` the next word is not part of the target, with `all` it is, so the model trained
/// with `all` gives it more probability after the typed character.
#[test]
fn shown_scope_decides_whether_next_words_shown_mid_word_are_targets() {
    let mut log = String::new();
    for _ in 0..60 {
        log.push_str(r#"{"v":1,"context":"今","shown":[{"word":"今天","replace":1},{"word":"不错","replace":0}],"clicked":0}"#);
        log.push('\n');
    }
    let events = tmp("midword.jsonl");
    std::fs::write(&events, log).unwrap();
    let lexicon = fixtures().1;
    let p_next_word = |scope: Option<&str>| -> f64 {
        let out = tmp(&format!("scope-{}.laya", scope.unwrap_or("default")));
        let mut cmd = laya();
        cmd.args(["train", "--events"]).arg(&events).arg("--lexicon").arg(&lexicon).arg("--out").arg(&out).pipe(tiny);
        if let Some(s) = scope {
            cmd.args(["--shown-scope", s]);
        }
        ok(cmd.output().unwrap());
        let pred = ok(laya()
            .args(["predict", "--top", "6", "--completion-rule", "product", "--json", "--model"])
            .arg(&out)
            .arg("今")
            .output()
            .unwrap());
        let v: serde_json::Value = serde_json::from_str(pred.lines().next().unwrap()).unwrap();
        let hit = v["candidates"].as_array().unwrap().iter().find(|c| c["word"] == "不错" && c["replace"] == 0).cloned();
        hit.map_or(0.0, |c| c["p"].as_f64().unwrap())
    };
    let (default, same, all) = (p_next_word(None), p_next_word(Some("same-replace")), p_next_word(Some("all")));
    assert_eq!(default, same, "same-replace is the default");
    assert!(all > same * 1.05, "all {all} vs same-replace {same}");
    let bad = laya().args(["train", "--shown-scope", "some"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

/// `--positions relative_causal` writes a causal model (the bias table `[T, L·H]`), `--init`
/// continues it with its scheme, and naming the other scheme with `--init` is refused.
#[test]
fn positions_relative_causal_trains_and_continues() {
    let (events, lexicon) = fixtures();
    let first = tmp("causal.laya");
    let text = ok(laya()
        .args(["train", "--events"])
        .arg(&events)
        .arg("--valid-events")
        .arg(&events)
        .arg("--lexicon")
        .arg(&lexicon)
        .arg("--out")
        .arg(&first)
        .pipe(tiny_blocks)
        .args(["--layers", "2", "--positions", "relative_causal"])
        .output()
        .unwrap());
    assert!(text.contains("positions relative_causal"), "{text}");
    let fresh = word_loss_of_first_epoch(&text);
    let bytes = std::fs::read(&first).unwrap();
    let file = laya_format::LayaFile::parse(&bytes).unwrap();
    assert_eq!(file.meta.hparams.position_scheme, laya_format::PositionScheme::RelativeCausal);
    assert_eq!(file.pos_embd.ne, vec![16, 4], "[T, L·H]");
    let table = file.pos_embd.to_f32().unwrap();
    assert_ne!(table, laya_train::recency_prior(2, 2, 16), "training moved the biases");
    // `laya inspect` only parses, so it reads a causal model already.
    let shown = ok(laya().arg("inspect").arg(&first).output().unwrap());
    assert!(shown.contains("relative_causal"), "{shown}");

    let second = tmp("causal-2.laya");
    let text = ok(train_init(&first, &events, &second, &[]));
    assert!(text.contains("positions relative_causal"), "{text}");
    let continued = word_loss_of_first_epoch(&text);
    assert!(continued < fresh, "continuing should start from the trained weights: {continued} vs {fresh}");
    let file = laya_format::LayaFile::parse(&std::fs::read(&second).unwrap()).unwrap().meta;
    assert_eq!(file.hparams.position_scheme, laya_format::PositionScheme::RelativeCausal);
    // The same scheme named again is fine; the other one is refused with a clear message.
    let out = laya()
        .args(["train", "--init"])
        .arg(&first)
        .arg("--events")
        .arg(&events)
        .arg("--out")
        .arg(tmp("causal-3.laya"))
        .args(["--positions", "learned_absolute"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--positions learned_absolute conflicts with this relative_causal model"), "{err}");
    assert!(!tmp("causal-3.laya").exists());
}

/// `--word-classes N` writes a factorised word head with `assign_word_classes`' map; `--init`
/// keeps it (naming the same N again is fine), asking `--init` for another head is refused, and
/// `--init` of a flat model with `--word-classes N` makes it factorised.
#[test]
fn word_classes_trains_a_factorised_head_and_init_keeps_it() {
    let (events, lexicon) = fixtures();
    let first = tmp("factorised.laya");
    let text = train_new(&events, &lexicon, &first, &["--word-classes", "3"]);
    let meta = laya_format::LayaFile::parse(&std::fs::read(&first).unwrap()).unwrap().meta;
    let words = meta.words.to_vec();
    let want = laya_format::assign_word_classes(words.iter().map(String::as_str), &meta.frequencies, 3);
    assert_eq!(meta.word_class, Some(want.clone()));
    // 天气 (11 of 21 units of mass with the +1) fills a class; 不错 and 今天 share the other.
    assert_eq!(meta.word_classes(), 2);
    let head = "a word head factorised over 2 classes (largest 2 words)";
    assert!(text.contains(head), "{text}");

    let second = tmp("factorised-2.laya");
    let text = ok(train_init(&first, &events, &second, &[]));
    assert!(text.contains(head), "{text}");
    let meta = laya_format::LayaFile::parse(&std::fs::read(&second).unwrap()).unwrap().meta;
    assert_eq!(meta.word_class, Some(want.clone()));
    let again = tmp("factorised-3.laya");
    let init_with = |model: &Path, k: &str, out: &Path| train_init(model, &events, out, &["--word-classes", k]);
    ok(init_with(&first, "3", &again));
    for (model, k, have) in [(&first, "0", head), (&first, "1", head)] {
        let out_path = tmp(&format!("factorised-bad-{k}.laya"));
        let out = init_with(model, k, &out_path);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(&format!("--word-classes {k} conflicts with this model's")) && err.contains(have),
            "{err}"
        );
        assert!(!out_path.exists());
    }

    // A flat model gains a class head: the same map as a new model with the same N.
    let flat = tmp_flat(&events, &lexicon);
    let grown = tmp("flat-grown.laya");
    let text = ok(init_with(&flat, "3", &grown));
    assert!(text.contains(head), "{text}");
    let meta = laya_format::LayaFile::parse(&std::fs::read(&grown).unwrap()).unwrap().meta;
    assert_eq!(meta.word_class, Some(want));
}

/// A flat tiny model (`--word-classes 0`).
fn tmp_flat(events: &Path, lexicon: &Path) -> PathBuf {
    let out = tmp("flat-for-word-classes.laya");
    train_new(events, lexicon, &out, &["--word-classes", "0"]);
    let meta = laya_format::LayaFile::parse(&std::fs::read(&out).unwrap()).unwrap().meta;
    assert_eq!(meta.word_class, None, "--word-classes 0 is a flat head");
    out
}

/// Without `--word-classes` a new model gets the shipped models' head: about 512 classes, the
/// 1,024 most frequent words each in its own (here every word of the tiny lexicon).
#[test]
fn a_new_model_has_the_shipped_kind_of_head() {
    let (events, lexicon) = fixtures();
    let out = tmp("default-head.laya");
    train_new(&events, &lexicon, &out, &[]);
    let meta = laya_format::LayaFile::parse(&std::fs::read(&out).unwrap()).unwrap().meta;
    let words = meta.words.to_vec();
    let want = laya_format::assign_word_classes_own(words.iter().map(String::as_str), &meta.frequencies, 512, 1024);
    assert_eq!(meta.word_class, Some(want));
    assert_eq!(meta.word_classes(), words.len());
}

/// `laya train --events EVENTS --lexicon LEXICON --out OUT`: a new model, no other flag.
fn train_cmd(events: &Path, lexicon: &Path, out: &Path) -> Command {
    let mut cmd = laya();
    cmd.args(["train", "--events"]).arg(events).arg("--lexicon").arg(lexicon).arg("--out").arg(out);
    cmd
}

/// `laya train` of a new tiny model on `events` (training and validation), plus `extra` flags;
/// its output.
fn train_new(events: &Path, lexicon: &Path, out: &Path, extra: &[&str]) -> String {
    ok(train_cmd(events, lexicon, out).arg("--valid-events").arg(events).pipe(tiny).args(extra).output().unwrap())
}

/// `--out` is checked before the first step: a missing directory or a directory as the model
/// path fails at once, with a message naming the problem, and leaves no file behind.
#[test]
fn out_is_checked_before_training_starts() {
    let (events, lexicon) = fixtures();
    let dir = tmp("out-dir");
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [(dir.join("missing").join("m.laya"), "does not exist"), (dir.clone(), "is a directory")];
    for (out, why) in cases {
        let run = train_cmd(&events, &lexicon, &out).pipe(tiny).output().unwrap();
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{}: {err}", out.display());
        assert!(err.contains(why), "{}: {err}", out.display());
        assert!(!err.contains("epoch 1"), "it must fail before training: {err}");
    }
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "stray files: {left:?}");
}

/// A new network without size flags is the shipped kind: causal positions, d 192, 3 heads, 3
/// blocks of FFN 512.
#[test]
fn defaults_build_the_shipped_kind_of_network() {
    let (events, lexicon) = fixtures();
    let out = tmp("defaults.laya");
    ok(train_cmd(&events, &lexicon, &out)
        .args(["--epochs", "1", "--batch-size", "16", "--warmup-steps", "1"])
        .env("RAYON_NUM_THREADS", "1")
        .output()
        .unwrap());
    let hp = laya_format::LayaFile::parse(&std::fs::read(&out).unwrap()).unwrap().meta.hparams;
    assert_eq!(hp.position_scheme, laya_format::PositionScheme::RelativeCausal);
    assert_eq!(hp.feed_forward_length, vec![512, 512, 512]);
    assert_eq!((hp.embedding_length, hp.head_count), (192, 3));
}

/// `--time-limit` ends a run that has far more epochs than the limit holds and still writes
/// the model; a limit that is not a positive number of seconds is refused before training.
#[test]
fn time_limit_ends_the_run_and_writes_the_model() {
    let (events, lexicon) = fixtures();
    let out = tmp("time-limit.laya");
    let run = train_cmd(&events, &lexicon, &out)
        .arg("--valid-events")
        .arg(&events)
        .args(["--layers", "1", "--d-model", "32", "--heads", "2", "--ffn", "32", "--batch-size", "16", "--precision", "f32"])
        .args(["--epochs", "1000000", "--patience", "0", "--time-limit", "1.5"])
        .env("RAYON_NUM_THREADS", "1")
        .output()
        .unwrap();
    let text = ok(run);
    assert!(text.contains("stopped at the time limit (1.5 s)"), "{text}");
    let pred = ok(laya().args(["predict", "--model"]).arg(&out).args(["--json", "今天"]).output().unwrap());
    assert!(pred.contains("candidates"), "{pred}");
    for bad in ["0", "-3", "soon", "inf"] {
        let run = train_cmd(&events, &lexicon, &tmp("time-limit-bad.laya")).pipe(tiny).arg(format!("--time-limit={bad}")).output().unwrap();
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success() && err.contains("--time-limit") && err.contains("positive number of seconds"), "{bad}: {err}");
    }
}

/// `--data-shards 2` trains what two GPUs with half the batch each would (and writes a model);
/// `--gpus` refuses the CPU, and a build without CUDA says how to get one, before any training.
#[test]
fn data_shards_trains_and_gpus_needs_a_gpu() {
    let (events, lexicon) = fixtures();
    let out = tmp("data-shards.laya");
    let text = train_new(&events, &lexicon, &out, &["--data-shards", "2"]);
    assert!(text.contains("wrote"), "{text}");
    // Where the time went; a run on one device has no sums across GPUs.
    assert!(text.contains("training time: batching") && !text.contains("sums across GPUs"), "{text}");
    assert!(laya_format::LayaFile::parse(&std::fs::read(&out).unwrap()).is_ok());
    let odd = train_cmd(&events, &lexicon, &tmp("odd-shards.laya")).pipe(tiny).args(["--data-shards", "3"]).output().unwrap();
    assert!(!odd.status.success() && String::from_utf8_lossy(&odd.stderr).contains("data shards"));
    let cpu = train_cmd(&events, &lexicon, &tmp("gpus-cpu.laya")).pipe(tiny).args(["--gpus", "2"]).output().unwrap();
    let err = String::from_utf8_lossy(&cpu.stderr);
    assert!(!cpu.status.success() && err.contains("--device cuda"), "{err}");
    if !cfg!(feature = "cuda") {
        let gpu =
            train_cmd(&events, &lexicon, &tmp("gpus-cuda.laya")).pipe(tiny).args(["--gpus", "2", "--device", "cuda"]).output().unwrap();
        let err = String::from_utf8_lossy(&gpu.stderr);
        assert!(!gpu.status.success() && err.contains("without CUDA"), "{err}");
    }
}

/// `--memory-buckets` gives a new model an output memory that `--init` keeps, `inspect` shows
/// and a session predicts with; `--init` gives a model without one a memory; bad settings are
/// refused before training.
#[test]
fn memory_buckets_trains_an_output_memory_and_init_keeps_or_adds_it() {
    let (events, lexicon) = fixtures();
    let first = tmp("memory.laya");
    train_new(&events, &lexicon, &first, &["--memory-buckets", "64", "--memory-orders", "2,3"]);
    let bytes = std::fs::read(&first).unwrap();
    let file = laya_format::LayaFile::parse(&bytes).unwrap();
    let want = laya_format::memory::Memory { buckets: 64, orders: vec![2, 3] };
    assert_eq!(file.meta.hparams.memory, Some(want.clone()));
    let table = file.memory_embd.as_ref().unwrap().to_f32().unwrap();
    assert!(table.iter().any(|&x| x != 0.0), "training moved the memory rows");
    let shown = ok(laya().arg("inspect").arg(&first).output().unwrap());
    assert!(shown.contains("output memory    64 rows, hashed token orders [2, 3]"), "{shown}");
    let predicted = ok(laya().args(["predict", "--model"]).arg(&first).arg("今天").output().unwrap());
    assert!(predicted.contains("天气"), "{predicted}");

    let second = tmp("memory-2.laya");
    ok(train_init(&first, &events, &second, &[]));
    let meta = laya_format::LayaFile::parse(&std::fs::read(&second).unwrap()).unwrap().meta;
    assert_eq!(meta.hparams.memory, Some(want));
    let out = train_init(&first, &events, &tmp("memory-bad.laya"), &["--memory-buckets", "32"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("cannot change"));

    let grown = tmp("memory-grown.laya");
    ok(train_init(&tmp_flat(&events, &lexicon), &events, &grown, &["--memory-buckets", "16"]));
    let meta = laya_format::LayaFile::parse(&std::fs::read(&grown).unwrap()).unwrap().meta;
    assert_eq!(meta.hparams.memory, Some(laya_format::memory::Memory { buckets: 16, orders: vec![2, 3, 4] }));

    for bad in [&["--memory-buckets", "8", "--memory-orders", "3,2"][..], &["--memory-buckets", "8", "--positions", "learned_absolute"]] {
        let out = train_cmd(&events, &lexicon, &tmp("memory-refused.laya")).pipe(tiny).args(bad).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("memory"), "{bad:?}: {err}");
    }
}
