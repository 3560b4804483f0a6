//! `laya prune` as a user sees it: a float model in, a smaller valid model out, clear refusals.

#![cfg(feature = "train")]

mod common;
use common::{assert_one_line_error, laya, ok, tmp};

use std::path::PathBuf;

use laya_format::testing::{random_model, TinyConfig};
use laya_format::{write_model, GgmlType, LayaFile};

/// Two blocks of FFN 128 and 96, a 48-row table, 40 words: small enough for a debug build.
fn tiny() -> TinyConfig {
    TinyConfig { feed_forward_length: vec![128, 96], vocab: 40, ..TinyConfig::small() }
}

fn model(name: &str, ty: GgmlType) -> PathBuf {
    let (meta, tensors) = random_model(&tiny(), 7, ty);
    let path = tmp(name);
    std::fs::write(&path, write_model(&meta, &tensors).unwrap()).unwrap();
    path
}

fn matrix_types(path: &PathBuf) -> Vec<GgmlType> {
    let bytes = std::fs::read(path).unwrap();
    let file = LayaFile::parse(&bytes).unwrap();
    file.tensors().iter().filter(|t| t.ne.len() == 2).map(|t| t.ty).collect()
}

#[test]
fn pruned_file_loads_in_the_runtime_with_the_new_widths() {
    let input = model("in.laya", GgmlType::F32);
    let output = tmp("out.laya");
    let table = ok(&laya().args(["prune", "--ffn", "64,32", "--model"]).arg(&input).arg("--out").arg(&output).output().unwrap());
    assert!(table.contains("| 0 | 128 → 64 |"), "{table}");
    assert!(table.contains("| 1 | 96 → 32 |"), "{table}");
    assert!(table.contains("file size"), "{table}");
    let m = laya_runtime::Model::load(&output).unwrap();
    assert_eq!(m.config().ffn, vec![64, 32]);
    assert!(matrix_types(&output).iter().all(|&t| t == GgmlType::F32));
    assert!(std::fs::metadata(&output).unwrap().len() < std::fs::metadata(&input).unwrap().len());
    let predict = ok(&laya().args(["predict", "--json", "--model"]).arg(&output).arg("的").output().unwrap());
    assert!(!predict.trim().is_empty());
}

/// Writes a random model of `cfg`, runs `laya prune --ffn 64,32` on it and returns the bytes of
/// the input and of the output (`name` keeps each test's files apart).
fn pruned_64_32(cfg: &TinyConfig, seed: u64, ty: GgmlType, name: &str) -> (Vec<u8>, Vec<u8>) {
    let (meta, tensors) = random_model(cfg, seed, ty);
    let input = tmp(&format!("{name}-in.laya"));
    std::fs::write(&input, write_model(&meta, &tensors).unwrap()).unwrap();
    let output = tmp(&format!("{name}-out.laya"));
    ok(&laya().args(["prune", "--ffn", "64,32", "--model"]).arg(&input).arg("--out").arg(&output).output().unwrap());
    (std::fs::read(&input).unwrap(), std::fs::read(&output).unwrap())
}

/// A factorised word head comes through `laya prune` unchanged (map and class head).
#[test]
fn a_factorised_head_is_carried_through() {
    let (a, b) = pruned_64_32(&TinyConfig { word_classes: 6, ..tiny() }, 7, GgmlType::F32, "factorised");
    let (a, b) = (LayaFile::parse(&a).unwrap(), LayaFile::parse(&b).unwrap());
    assert!(a.meta.word_classes() > 1);
    assert_eq!(b.meta.word_class, a.meta.word_class);
    let class_head = |f: &LayaFile<'_>| {
        let (w, bias) = f.output_class.as_ref().unwrap();
        (w.to_f32().unwrap(), bias.to_f32().unwrap())
    };
    assert_eq!(class_head(&b), class_head(&a));
}

#[test]
fn keep_fraction_json_report_and_precision() {
    let input = model("in16.laya", GgmlType::F16);
    let output = tmp("out16.laya");
    let out = ok(&laya().args(["prune", "--json", "--keep", "0.5", "--model"]).arg(&input).arg("--out").arg(&output).output().unwrap());
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    // 128·0.5 = 64; 96·0.5 = 48 rounds down to 32.
    let after: Vec<u64> = v["blocks"].as_array().unwrap().iter().map(|b| b["ffn_after"].as_u64().unwrap()).collect();
    assert_eq!(after, vec![64, 32]);
    assert_eq!(v["precision"], "F16");
    assert!(v["params_after"].as_u64().unwrap() < v["params_before"].as_u64().unwrap());
    assert_eq!(v["bytes_after"].as_u64().unwrap(), std::fs::metadata(&output).unwrap().len());
    assert!(matrix_types(&output).iter().all(|&t| t == GgmlType::F16));
    assert_eq!(laya_runtime::Model::load(&output).unwrap().config().ffn, vec![64, 32]);

    let out32 = tmp("out16-as-32.laya");
    ok(&laya().args(["prune", "--ffn", "96", "--precision", "f32", "--model"]).arg(&input).arg("--out").arg(&out32).output().unwrap());
    assert!(matrix_types(&out32).iter().all(|&t| t == GgmlType::F32));
    assert_eq!(laya_runtime::Model::load(&out32).unwrap().config().ffn, vec![96, 96]);
}

#[test]
fn fine_tunes_on_events_with_taylor_saliency() {
    let input = model("in-ft.laya", GgmlType::F32);
    let words = LayaFile::parse(&std::fs::read(&input).unwrap()).unwrap().meta.words.to_vec();
    let mut log = String::new();
    for i in 0..40 {
        let ctx: String = "的中国東京hello".chars().skip(i % 5).take(1 + i % 4).collect();
        let shown: Vec<String> = (0..3).map(|k| format!("{{\"word\":{:?},\"replace\":0}}", words[(i * 3 + k) % words.len()])).collect();
        log += &format!("{{\"context\":{ctx:?},\"shown\":[{}],\"clicked\":{}}}\n", shown.join(","), i % 3);
    }
    let events = tmp("events.jsonl");
    std::fs::write(&events, log).unwrap();
    let output = tmp("out-ft.laya");
    let out = ok(&laya()
        .args(["prune", "--json", "--ffn", "64", "--saliency", "taylor", "--taylor-batches", "2", "--batch-size", "16"])
        .args(["--epochs", "1", "--model"])
        .arg(&input)
        .arg("--events")
        .arg(&events)
        .arg("--valid-events")
        .arg(&events)
        .arg("--out")
        .arg(&output)
        .output()
        .unwrap());
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["fine_tuned_events"], 40);
    assert!(v["valid_after_fine_tuning"]["top5"].as_f64().is_some(), "{v}");
    let m = laya_runtime::Model::load(&output).unwrap();
    assert_eq!(m.config().ffn, vec![64, 64]);
    assert!(m.info().training_data.contains("taylor saliency, fine-tuned on 40 events"), "{}", m.info().training_data);
}

#[test]
fn nonsense_is_refused_with_one_clear_line() {
    let input = model("in-bad.laya", GgmlType::F32);
    let output = tmp("never.laya");
    let run = |extra: &[&str]| laya().arg("prune").args(extra).arg("--model").arg(&input).arg("--out").arg(&output).output().unwrap();
    assert_one_line_error(&run(&["--ffn", "48"]), "not a multiple of 32");
    assert_one_line_error(&run(&["--ffn", "0"]), "must be positive");
    assert_one_line_error(&run(&["--ffn", "256"]), "larger than the current width");
    assert_one_line_error(&run(&["--ffn", "64,64,64"]), "3 FFN widths given for a model with 2 blocks");
    assert_one_line_error(&run(&["--ffn", "64,x"]), "is not a width");
    assert_one_line_error(&run(&["--keep", "0"]), "must be in (0, 1]");
    assert_one_line_error(&run(&["--keep", "0.1"]), "rounds down to 0");
    assert_one_line_error(&run(&["--ffn", "64", "--saliency", "taylor"]), "needs --events");
    assert!(!output.exists());

    let quant = tmp("q.laya");
    ok(&laya().arg("quantize").arg(&input).arg(&quant).output().unwrap());
    let out = laya().args(["prune", "--ffn", "64", "--model"]).arg(&quant).arg("--out").arg(&output).output().unwrap();
    assert_one_line_error(&out, "prune before quantizing");

    let garbage = tmp("garbage.laya");
    std::fs::write(&garbage, b"not a model").unwrap();
    let out = laya().args(["prune", "--ffn", "64", "--model"]).arg(&garbage).arg("--out").arg(&output).output().unwrap();
    assert_one_line_error(&out, "is not a valid Laya model");
    assert!(!output.exists());
}

/// A causal model (`relative_causal`) keeps its scheme and its relative-bias table, value for
/// value: pruning FFN widths does not touch attention.
#[test]
fn causal_model_keeps_its_bias_table() {
    let cfg = TinyConfig { position_scheme: laya_format::PositionScheme::RelativeCausal, ..tiny() };
    let (a, b) = pruned_64_32(&cfg, 9, GgmlType::F16, "causal");
    let (a, b) = (LayaFile::parse(&a).unwrap(), LayaFile::parse(&b).unwrap());
    assert_eq!(b.meta.hparams.position_scheme, laya_format::PositionScheme::RelativeCausal);
    assert_eq!(b.meta.hparams.feed_forward_length, vec![64, 32]);
    assert_eq!(b.pos_embd.ne, a.pos_embd.ne);
    assert_eq!(b.pos_embd.to_f32().unwrap(), a.pos_embd.to_f32().unwrap());
}
