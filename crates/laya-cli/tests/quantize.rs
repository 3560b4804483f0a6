//! `laya quantize` as a user sees it: a float model in, a smaller valid model out, clear errors.

mod common;
use common::{assert_one_line_error, laya, ok, tmp};

use std::path::PathBuf;

use laya_format::testing::{random_model, TinyConfig};
use laya_format::{write_model, GgmlType};

fn meta(path: &PathBuf) -> laya_format::ModelMeta {
    laya_format::LayaFile::parse(&std::fs::read(path).unwrap()).unwrap().meta
}

fn float_model(name: &str) -> PathBuf {
    let (meta, tensors) = random_model(&TinyConfig::default(), 5, GgmlType::F32);
    let path = tmp(name);
    std::fs::write(&path, write_model(&meta, &tensors).unwrap()).unwrap();
    path
}

#[test]
fn quantized_model_predicts_and_inspects_as_q4_1_and_q8_0() {
    let input = float_model("float.laya");
    let output = tmp("q.laya");
    let report = ok(&laya().arg("quantize").arg(&input).arg(&output).output().unwrap());
    assert!(report.contains("| token_embd_comp.weight | F16 | [64, 2048] |"), "{report}");
    assert!(report.contains("| without |") && report.contains("| with |"), "{report}");
    assert!(std::fs::metadata(&output).unwrap().len() * 3 < std::fs::metadata(&input).unwrap().len());

    // The output's lexicon is in byte order (the one-pass load path), the same words as the input.
    let (before, after) = (meta(&input), meta(&output));
    assert!(after.words.iter().zip(after.words.iter().skip(1)).all(|(a, b)| a < b));
    let mut words = before.words.to_vec();
    words.sort();
    assert_eq!(after.words, words);
    assert_ne!(before.words, after.words, "the generator's lexicon is not sorted");

    let inspect = ok(&laya().arg("inspect").arg(&output).output().unwrap());
    assert!(inspect.contains("Q4_1") && inspect.contains("Q8_0"), "{inspect}");
    assert!(inspect.contains("token_embd_comp.weight"), "{inspect}");

    let predict = ok(&laya().args(["predict", "--json", "--model"]).arg(&output).arg("hel").output().unwrap());
    assert!(!predict.trim().is_empty());
}

#[test]
fn json_report_has_sizes_and_both_errors() {
    let input = float_model("float-json.laya");
    let output = tmp("q-json.laya");
    let out = ok(&laya().args(["quantize", "--json", "--linear", "q4_0", "--head", "f16"]).arg(&input).arg(&output).output().unwrap());
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(v["bytes_after"].as_u64().unwrap() < v["bytes_before"].as_u64().unwrap());
    let e = &v["embedding"];
    assert_eq!(e["type"], "Q4_1");
    let with = e["with_compensation"]["rmse"].as_f64().unwrap();
    let without = e["without_compensation"]["rmse"].as_f64().unwrap();
    assert!(with <= without && without > 0.0, "{e}");
    let types: Vec<(String, String)> = v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap().to_string(), t["type"].as_str().unwrap().to_string()))
        .collect();
    assert!(types.contains(&("blk.0.ffn_up.weight".into(), "Q4_0".into())));
    assert!(types.contains(&("output.weight".into(), "F16".into())));
    assert!(types.contains(&("pos_embd.weight".into(), "F32".into())));

    // A float embedding has nothing to compensate.
    let out = ok(&laya().args(["quantize", "--json", "--embedding", "f16"]).arg(&input).arg(tmp("q-f16.laya")).output().unwrap());
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(v["embedding"]["with_compensation"].is_null());
    assert!(!out.contains("token_embd_comp"));
}

#[test]
fn quantizing_twice_fails_with_one_clear_line() {
    let input = float_model("float-twice.laya");
    let once = tmp("once.laya");
    ok(&laya().arg("quantize").arg(&input).arg(&once).output().unwrap());
    let out = laya().arg("quantize").arg(&once).arg(tmp("twice.laya")).output().unwrap();
    assert_one_line_error(&out, "already quantised: quantise from the float model");
    assert!(!tmp("twice.laya").exists());
}

#[test]
fn unknown_type_and_missing_file_are_refused() {
    let input = float_model("float-bad.laya");
    let out = laya().args(["quantize", "--linear", "q3_k"]).arg(&input).arg(tmp("x.laya")).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "clap usage error");
    let out = laya().arg("quantize").arg(tmp("nope.laya")).arg(tmp("y.laya")).output().unwrap();
    assert_one_line_error(&out, "cannot read");
}
