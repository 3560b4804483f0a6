//! The training scripts around `laya train`, on a tiny corpus: scripts/gpu-variants.sh packs its
//! inputs, simulates a log per lexicon, trains two variants side by side through
//! scripts/train-stages.sh (the stages of scripts/train-default.sh; on the CPU here), attaches
//! the prior, quantises, and sends back a compressed F16 master in parts, which LAYA_INIT_F16
//! then trains further.

#![cfg(feature = "train")]

mod common;
use common::{laya, ok, tmp};

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A corpus where a few phrases recur in varied order, enough for a lexicon, an n-gram and a
/// simulated log.
fn write_corpus(dir: &Path) {
    let phrases = ["今天天气不错", "我们明天去公园", "这个软件的界面很好用", "请删除这个文件", "谢谢你的帮助", "光标的默认位置"];
    let mut train = String::new();
    for i in 0..240 {
        let (a, b) = (phrases[i % phrases.len()], phrases[(i * 7 + 3) % phrases.len()]);
        train.push_str(&format!("{a}，{b}。\n"));
    }
    let dev: String = (0..30).map(|i| format!("{}。\n", phrases[(i * 5) % phrases.len()])).collect();
    std::fs::write(dir.join("mix-train.txt"), train).unwrap();
    std::fs::write(dir.join("mix-dev.txt"), dev).unwrap();
    for (name, words) in [("dict.txt", "今天 100 t\n天气 80 n\n"), ("wordfreq.txt", "明天 90\n公园 40\n"), ("essay.txt", "软件\t60\n")]
    {
        std::fs::write(dir.join(name), words).unwrap();
    }
}

fn lexicon_and_ngram(dir: &Path, size: &str, lexicon: &Path, ngram: &Path) {
    let train = dir.join("mix-train.txt");
    ok(&laya().arg("lexicon").arg("--train").arg(&train).args(["--size", size]).arg("--out").arg(lexicon).output().unwrap());
    ok(&laya().arg("ngram").arg("--train").arg(&train).arg("--lexicon").arg(lexicon).arg("--out").arg(ngram).output().unwrap());
}

fn script(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(repo().join("scripts/gpu-variants.sh"));
    for a in args {
        cmd.arg(a);
    }
    cmd
}

fn lexicon_words(model: &Path) -> usize {
    let text = ok(&laya().arg("inspect").arg(model).output().unwrap());
    let line = text.lines().find(|l| l.starts_with("lexicon")).unwrap_or_else(|| panic!("no lexicon line: {text}"));
    line.split_whitespace().find_map(|w| w.replace(',', "").parse().ok()).unwrap()
}

#[test]
fn gpu_variants_trains_each_variant_on_its_lexicon_and_returns_the_master() {
    let root = tmp("gpu-variants");
    let (data, pack, out) = (root.join("data"), root.join("pack"), root.join("out"));
    std::fs::create_dir_all(&data).unwrap();
    write_corpus(&data);
    lexicon_and_ngram(&data, "30", &data.join("lexicon.tsv"), &data.join("ngram.json"));
    let (small_lex, small_ngram) = (root.join("small.tsv"), root.join("small.json"));
    lexicon_and_ngram(&data, "12", &small_lex, &small_ngram);

    ok(&script(&[&"pack", &pack]).env("LAYA_DATA_DIR", &data).output().unwrap());
    ok(&script(&[&"pack-set", &"small", &small_lex, &small_ngram, &pack]).output().unwrap());
    let laya_bin = PathBuf::from(env!("CARGO_BIN_EXE_laya"));
    let run = script(&[&"train", &pack, &laya_bin, &out, &"a:1:32:32:2:300:300:300:1", &"b:1:32:32:2:300:300:300:1:small"])
        .env("LAYA_DEVICE", "cpu")
        .env("LAYA_KEEP_F16", "a")
        .env("LAYA_WORD_CLASSES", "4")
        .env("LAYA_OWN_CLASS_WORDS", "2")
        .env("RAYON_NUM_THREADS", "1")
        .output()
        .unwrap();
    let log = ok(&run);
    assert!(log.contains("a: trained in") && log.contains("b: trained in"), "{log}");

    // Each variant trained on its own lexicon, through all three stages.
    let (a, b) = (out.join("a.laya"), out.join("b.laya"));
    assert_eq!(lexicon_words(&a), std::fs::read_to_string(data.join("lexicon.tsv")).unwrap().lines().count());
    assert_eq!(lexicon_words(&b), std::fs::read_to_string(&small_lex).unwrap().lines().count());
    let a_log = std::fs::read_to_string(out.join("a.log")).unwrap();
    assert_eq!(a_log.matches("training on 300 events").count(), 3, "{a_log}");
    assert!(a_log.contains("factorised"), "stage 2 factorises the head: {a_log}");

    // Only a's master came back, in parts; joined and quantised it is a.laya byte for byte.
    let parts: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("a-f16.laya.xz."))
        .collect();
    assert!(!parts.is_empty());
    assert!(!out.join("b-f16.laya.xz.00").exists());
    let (xz, master) = (root.join("a-f16.laya.xz"), root.join("a-f16.laya"));
    let mut joined = Vec::new();
    let mut parts = parts;
    parts.sort();
    for p in &parts {
        joined.extend(std::fs::read(p).unwrap());
    }
    std::fs::write(&xz, joined).unwrap();
    let unpacked = Command::new("xz").arg("-dkf").arg(&xz).status().unwrap();
    assert!(unpacked.success());
    let requantized = root.join("again.laya");
    ok(&laya().arg("quantize").arg(&master).arg(&requantized).output().unwrap());
    assert_eq!(std::fs::read(&requantized).unwrap(), std::fs::read(&a).unwrap());

    let pred = ok(&laya().args(["predict", "--json", "--model"]).arg(&a).arg("今天").output().unwrap());
    assert!(pred.contains("candidates"), "{pred}");

    // LAYA_INIT_F16 continues that master: stage 3 only, over the whole log (0 events = all).
    let more = root.join("more");
    let run = script(&[&"train", &pack, &laya_bin, &more, &"c:1:32:32:2:0:0:0:1"])
        .env("LAYA_DEVICE", "cpu")
        .env("LAYA_INIT_F16", &master)
        .env("RAYON_NUM_THREADS", "1")
        .output()
        .unwrap();
    ok(&run);
    let c_log = std::fs::read_to_string(more.join("c.log")).unwrap();
    let stages: Vec<&str> = c_log.lines().filter(|l| l.starts_with("training on")).collect();
    assert_eq!(stages.len(), 1, "one stage: {c_log}");
    let events: usize = stages[0].split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(events > 300 && stages[0].contains("factorised"), "the whole log, the master's head: {c_log}");
    let c = more.join("c.laya");
    assert_eq!(lexicon_words(&c), lexicon_words(&a));
    assert_ne!(std::fs::read(&c).unwrap(), std::fs::read(&a).unwrap(), "a pass changed the weights");
}
