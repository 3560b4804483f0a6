//! The `laya` binary as a user and a script see it: docs/evaluation.md contracts, errors, exit codes.

mod common;
use common::{laya, predict_json, tmp};

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use laya_format::testing::{random_model, TinyConfig};
use laya_format::{write_model, GgmlType};

fn model_file(name: &str, ty: GgmlType) -> PathBuf {
    let (meta, tensors) = random_model(&TinyConfig::default(), 3, ty);
    let path = tmp(name);
    std::fs::write(&path, write_model(&meta, &tensors).unwrap()).unwrap();
    path
}

fn run_stdin(cmd: &mut Command, input: &[u8]) -> Output {
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

fn assert_clean_error(out: &Output) {
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("laya: error: "), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE"), "{err}");
}

#[test]
fn predict_prints_a_table() {
    let m = model_file("table.laya", GgmlType::F32);
    let out = laya().args(["predict", "--model"]).arg(&m).arg("今天天气").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("rank"));
    assert_eq!(text.lines().count(), 6);
}

#[test]
fn jsonl_answers_every_line_in_order_and_survives_bad_lines() {
    let m = model_file("jsonl.laya", GgmlType::Q8_0);
    let mut input = Vec::new();
    input.extend_from_slice("{\"context\": \"今天天气\"}\n".as_bytes());
    input.extend_from_slice(b"{\"context\": \"\"}\n");
    input.extend_from_slice(b"not json\n");
    input.extend_from_slice(b"{\"context\": \"nul\\u0000 and \\u0001 ctrl \\ud83d\\ude00\"}\n");
    input.extend_from_slice(b"{\"ctx\": \"missing key\"}\n");
    input.extend_from_slice(b"{\"context\": \"\xff\xfe invalid utf-8\"}\n");
    input.extend_from_slice(b"\n");
    input.extend_from_slice(b"{\"context\": 5}\r\n");
    input.extend_from_slice(b"{\"context\": \"hel\"}"); // no trailing newline
    let out = run_stdin(laya().args(["predict", "--jsonl", "--top", "3", "--model"]).arg(&m), &input);
    assert!(out.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 9);
    let ok = [0, 1, 3, 8];
    for (i, l) in lines.iter().enumerate() {
        if ok.contains(&i) {
            let c = l["candidates"].as_array().unwrap_or_else(|| panic!("line {i}: {l}"));
            assert_eq!(c.len(), 3);
            for cand in c {
                assert!(cand["word"].is_string() && cand["replace"].is_u64() && cand["p"].is_f64());
            }
        } else {
            assert!(l["error"].as_str().unwrap().contains(&format!("line {}", i + 1)), "{l}");
        }
    }
    assert!(lines[5]["error"].as_str().unwrap().contains("UTF-8"));
}

#[test]
fn inspect_reports_a_valid_file_and_refuses_a_corrupt_one() {
    let m = model_file("inspect.laya", GgmlType::Q4_1);
    let out = laya().arg("inspect").arg(&m).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("valid Laya model") && text.contains("blk.0.ffn_up.weight"), "{text}");

    let mut bytes = std::fs::read(&m).unwrap();
    let n = bytes.len();
    bytes[n - 100] ^= 0x10;
    let bad = tmp("flipped.laya");
    std::fs::write(&bad, &bytes).unwrap();
    let out = laya().arg("inspect").arg(&bad).output().unwrap();
    assert_clean_error(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("MISMATCH"));

    let out = laya().args(["predict", "x", "--model"]).arg(&bad).output().unwrap();
    assert_clean_error(&out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("checksum"));
}

#[test]
fn user_mistakes_get_one_line_and_a_non_zero_exit() {
    let out = laya().args(["predict", "x", "--model", "/nonexistent/model.laya"]).output().unwrap();
    assert_clean_error(&out);
    let empty = tmp("empty.laya");
    std::fs::write(&empty, b"").unwrap();
    assert_clean_error(&laya().args(["predict", "x", "--model"]).arg(&empty).output().unwrap());
    let text = tmp("text.laya");
    std::fs::write(&text, b"this is not a model at all, just some text").unwrap();
    assert_clean_error(&laya().arg("inspect").arg(&text).output().unwrap());
    let m = model_file("both.laya", GgmlType::F32);
    assert_clean_error(&laya().args(["predict", "x", "--jsonl", "--model"]).arg(&m).output().unwrap());
}

/// On the embedded (relative_causal) default the typing replay reuses kept keys and values for
/// almost every prediction; `--whole` computes each one whole, and its per-prediction arithmetic
/// is the whole count.
#[test]
fn bench_whole_computes_every_prediction_whole() {
    let run = |whole: bool| -> serde_json::Value {
        let mut cmd = laya();
        cmd.args(["bench", "--json", "--iterations", "300", "--cold-runs", "1"]);
        if whole {
            cmd.arg("--whole");
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let (typing, whole) = (run(false), run(true));
    assert_eq!(typing["positions"], "relative_causal");
    assert!(typing["reused_fraction"].as_f64().unwrap() > 0.9, "{typing}");
    // A factorised head adds the word rows its ranking computed to the fixed count.
    let macs = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    assert!(macs(&typing, "macs_at_p50") >= macs(&typing, "macs_per_keystroke"), "{typing}");
    assert_eq!(whole["reused_fraction"].as_f64(), Some(0.0), "{whole}");
    assert!(macs(&whole, "macs_at_p50") >= macs(&whole, "macs_per_prediction"), "{whole}");
    assert!(whole["macs_per_prediction"].as_u64().unwrap() > typing["macs_per_keystroke"].as_u64().unwrap());
    assert_eq!(whole["allocations_per_prediction"].as_f64(), Some(0.0));
}

/// A factorised word head: bench counts the word-head rows ranking computed, and the arithmetic
/// at p50 is the fixed part plus `d` per such row.
#[test]
fn bench_counts_the_rows_a_factorised_head_computes() {
    let cfg = TinyConfig { word_classes: 12, position_scheme: laya_format::PositionScheme::RelativeCausal, ..TinyConfig::default() };
    let (meta, tensors) = random_model(&cfg, 3, GgmlType::Q8_0);
    let path = tmp("factorised.laya");
    std::fs::write(&path, write_model(&meta, &tensors).unwrap()).unwrap();
    let out = laya().args(["bench", "--json", "--iterations", "200", "--cold-runs", "1", "--model"]).arg(&path).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["word_classes"].as_u64(), Some(meta.word_classes() as u64));
    let rows = v["word_rows_per_prediction"].as_f64().unwrap();
    assert!(rows > 0.0 && rows <= cfg.vocab as f64, "{v}");
    let fixed = v["macs_per_keystroke"].as_u64().unwrap();
    assert_eq!(v["macs_at_p50"].as_u64().unwrap(), fixed + 64 * rows.round() as u64, "{v}");
    assert_eq!(v["allocations_per_prediction"].as_f64(), Some(0.0));
}

#[test]
fn bench_reports_the_eval_md_keys_and_zero_allocations() {
    let m = model_file("bench.laya", GgmlType::F16);
    let out = laya().args(["bench", "--json", "--iterations", "200", "--cold-runs", "2", "--model"]).arg(&m).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in ["p50_us", "p99_us", "cold_start_ms", "allocations_per_prediction", "stages", "peak_fraction"] {
        assert!(!v[key].is_null(), "missing {key}: {v}");
    }
    assert_eq!(v["allocations_per_prediction"].as_f64(), Some(0.0));
    assert!(v["p50_us"].as_f64().unwrap() > 0.0);
    // The in-process part of a cold start is part of the whole (both medians of the same runs).
    let (whole, inside) = (v["cold_start_ms"].as_f64().unwrap(), v["cold_first_prediction_ms"].as_f64().unwrap());
    assert!(inside > 0.0 && inside <= whole, "{inside} ms of {whole} ms");
    // Starting a process that loads nothing is measured beside it.
    let floor = v["spawn_floor_ms"].as_f64().unwrap_or_else(|| panic!("missing spawn_floor_ms: {v}"));
    assert!(floor > 0.0, "spawn floor {floor} ms");
    // Its phases: each measured, none longer than the whole (medians of the same processes).
    let phases = &v["cold_phases"];
    for key in ["validate_ms", "prepare_ms", "session_ms", "first_prediction_ms"] {
        let ms = phases[key].as_f64().unwrap_or_else(|| panic!("missing cold_phases.{key}: {v}"));
        assert!(ms > 0.0 && ms <= whole, "{key}: {ms} ms of {whole} ms");
    }
    // The peak is measured on this core (or assumed where there is no probe): positive, and the
    // fraction is the p50 arithmetic over it.
    let peak = v["peak_gflops"].as_f64().unwrap();
    assert!(peak > 0.0);
    let frac = v["gflops_at_p50"].as_f64().unwrap() / peak;
    assert!((v["peak_fraction"].as_f64().unwrap() - frac).abs() <= 1e-9 * frac.max(1.0));
    assert_eq!(v["stages"].as_array().unwrap().len(), laya_runtime::Stage::COUNT);
}

#[test]
fn completion_rule_is_a_flag_of_predict_and_eval_with_split_the_default() {
    let m = model_file("rule.laya", GgmlType::F32);
    let predict = |extra: &[&str]| {
        let out = laya().args(["predict", "--json", "--top", "8", "--model"]).arg(&m).args(extra).arg("hel").output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let default = predict(&[]);
    assert_eq!(default, predict(&["--completion-rule", "split"]));
    assert_ne!(default, predict(&["--completion-rule", "product"]));
    assert_ne!(predict(&["--completion-rule", "product"]), predict(&["--completion-rule", "conditional"]));
    let bad = laya().args(["predict", "--completion-rule", "both", "x"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("unknown completion rule `both`") && err.contains("marginal"), "{err}");

    let text = tmp("rule.txt");
    std::fs::write(&text, "hello world\nhello there\n").unwrap();
    let eval = |rule: &str| {
        let out = laya().args(["eval", "--json", "--completion-rule", rule, "--model"]).arg(&m).arg("--text").arg(&text).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    for rule in ["split", "marginal", "product", "conditional"] {
        assert!(eval(rule).contains("\"top5_k1\""), "{rule}");
    }

    // On the embedded model, after 默认 the marginal rule offers 默认值 as a next word among
    // its first 64 (which would type 默认 twice); the default offers words that start with 默认
    // or 认 only as completions.
    let embedded = |extra: &[&str]| {
        let out = laya().args(["predict", "--json", "--top", "64"]).args(extra).arg("默认").output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["candidates"].as_array().unwrap().clone()
    };
    let continues = |c: &serde_json::Value| {
        let w = c["word"].as_str().unwrap();
        c["replace"] == 0 && ((w.starts_with("默认") && w != "默认") || (w.starts_with('认') && w != "认"))
    };
    assert!(!embedded(&[]).iter().any(continues), "{:?}", embedded(&[]));
    assert!(embedded(&["--completion-rule", "marginal"]).iter().any(continues));
}

/// The embedded model carries broad frequencies (`laya prior`), and `--completion-prior`
/// reaches the session: after a typed 天 the weight 0.5 and the default 0 rank the first ten
/// completions differently, the next-word share of the bar stays the same, and eval takes the flag too.
#[test]
fn completion_prior_flag_on_the_embedded_model() {
    let run = |extra: &[&str]| {
        let mut args = vec!["--top", "64"];
        args.extend_from_slice(extra);
        predict_json(&args, "今天天")
    };
    let (with, without) = (run(&["--completion-prior", "0.5"]), run(&[]));
    let order = |v: &[(String, u64, f64)]| v.iter().filter(|c| c.1 == 1).take(10).map(|c| c.0.clone()).collect::<Vec<_>>();
    assert_ne!(order(&with), order(&without), "the prior changed no completion");
    let completion_share = |v: &[(String, u64, f64)]| v.iter().filter(|c| c.1 > 0).map(|c| c.2).sum::<f64>();
    assert!(completion_share(&with) > 0.5 && completion_share(&without) > 0.5);
    // (Those both runs show: how many next words fit in the 64 depends on the completions.)
    let next_words =
        |v: &[(String, u64, f64)]| v.iter().filter(|c| c.1 == 0).map(|c| (c.0.clone(), (c.2 * 1e4).round() as i64)).collect::<Vec<_>>();
    let (a, b) = (next_words(&with), next_words(&without));
    let n = a.len().min(b.len());
    assert!(n >= 10, "{a:?} {b:?}");
    assert_eq!(a[..n], b[..n], "next words must not move");
    let text = tmp("prior-eval.txt");
    std::fs::write(&text, "今天天气很好\n这个酒店的服务不错\n").unwrap();
    for w in ["0", "0.5"] {
        let out = laya().args(["eval", "--json", "--completion-prior", w, "--text"]).arg(&text).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

/// `--activations` reaches the session in `predict`, `eval` and `bench`: on a Q8_0 model `f32`
/// and `int8-all` give other probabilities; eval runs both over the same words; bench reports
/// what it ran and allocates nothing per prediction on any of them.
#[test]
fn activations_flag_of_eval_and_bench() {
    let m = model_file("act.laya", GgmlType::Q8_0);
    let text = tmp("act.txt");
    let lines: Vec<String> = (0..40).map(|i| ["hello world", "hello there world", "the end"][i % 3].to_string()).collect();
    std::fs::write(&text, lines.join("\n")).unwrap();
    let eval = |act: &str| {
        let out = laya().args(["eval", "--json", "--activations", act, "--model"]).arg(&m).arg("--text").arg(&text).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let mut v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v.as_object_mut().unwrap().remove("seconds");
        v
    };
    let (f32_, all) = (eval("f32"), eval("int8-all"));
    assert!(f32_["words"].as_u64().unwrap() > 0 && f32_["words"] == all["words"]);
    let predict = |act: &str| {
        let out = laya().args(["predict", "--json", "--activations", act, "--model"]).arg(&m).arg("hello wor").output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    assert_ne!(predict("f32"), predict("int8-all"), "int8 activations in every layer change the probabilities");
    for act in ["f32", "int8", "int8-all"] {
        let out = laya()
            .args(["bench", "--json", "--iterations", "50", "--cold-runs", "1", "--activations", act, "--model"])
            .arg(&m)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["activations"], act);
        assert_eq!(v["allocations_per_prediction"].as_f64(), Some(0.0), "{act}");
        assert!(v["packed_bytes"].is_u64() && !v["int8_isa"].is_null());
    }
    let out = laya().args(["eval", "--activations", "int4", "--text"]).arg(&text).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("expected `f32`, `int8` or `int8-all`"));
}

#[test]
fn eval_threads_do_not_change_the_figures() {
    let m = model_file("threads.laya", GgmlType::F32);
    let text = tmp("threads.txt");
    let lines: Vec<String> = (0..120).map(|i| ["hello world", "", "hello there world", "the end"][i % 4].to_string()).collect();
    std::fs::write(&text, lines.join("\n")).unwrap();
    let eval = |threads: &str| {
        let out = laya()
            .args(["eval", "--json", "--limit", "70", "--threads", threads, "--model"])
            .arg(&m)
            .arg("--text")
            .arg(&text)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let mut v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v.as_object_mut().unwrap().remove("seconds");
        v
    };
    let one = eval("1");
    // 70 non-empty lines of 2, 3, 2 words: 23 rounds of 7 words and one of 2.
    assert_eq!(one["words"], 23 * 7 + 2, "{one}");
    assert_eq!(one, eval("3"));
    let out = laya().args(["eval", "--threads", "0", "--text"]).arg(&text).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--threads"));
}

/// `laya eval --breakdown`: the docs/evaluation.md keys are those of a plain run, a `breakdown` object is
/// added to --json (shares adding up to one per row) and a second table to the text report.
#[test]
fn eval_breakdown_adds_the_miss_table() {
    let m = model_file("breakdown.laya", GgmlType::F32);
    let text = tmp("breakdown.txt");
    let lines: Vec<String> = (0..30).map(|i| ["hello world", "hello there world", "the end"][i % 3].to_string()).collect();
    std::fs::write(&text, lines.join("\n")).unwrap();
    let eval = |extra: &[&str]| {
        let out = laya().args(["eval", "--threads", "2", "--model"]).arg(&m).arg("--text").arg(&text).args(extra).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let json = |extra: &[&str]| {
        let mut v: serde_json::Value = serde_json::from_str(&eval(extra)).unwrap();
        v.as_object_mut().unwrap().remove("seconds");
        v
    };
    let (plain, mut with) = (json(&["--json"]), json(&["--json", "--breakdown"]));
    let b = with.as_object_mut().unwrap().remove("breakdown").expect("a breakdown object");
    assert_eq!(plain, with, "--breakdown changed the docs/evaluation.md figures");
    for slot in ["k0", "k1"] {
        let f = |k: &str| b[slot][k].as_f64().unwrap_or_else(|| panic!("{slot}.{k} in {b}"));
        assert!((f("oov") + f("top5_alone") + f("outranked") - 1.0).abs() < 1e-9, "{b}");
        assert!(f("crowded_out") <= f("top5_alone"), "{b}");
    }
    let top5 = plain["top5_k1"].as_f64().unwrap();
    assert!(b["k1"]["top5_alone"].as_f64().unwrap() >= top5, "{b}");
    let table = eval(&["--breakdown"]);
    assert!(table.contains("| k1 (completion) |") && table.contains("crowded out"), "{table}");
    assert!(!eval(&[]).contains("crowded out"));
}

#[test]
fn simulate_threads_write_the_same_log() {
    let text = tmp("sim.txt");
    let lines: Vec<String> = (0..300).map(|i| ["the cat sat", "", "a cat on the mat", "the end of it"][i % 4].to_string()).collect();
    std::fs::write(&text, lines.join("\n")).unwrap();
    let ngram = tmp("sim-ngram.json");
    let out = laya().args(["ngram", "--segmented", "--open-vocabulary", "--train"]).arg(&text).arg("--out").arg(&ngram).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let simulate = |threads: &str| {
        let log = tmp(&format!("sim-{threads}.jsonl"));
        let out = laya()
            .args(["simulate", "--segmented", "--threads", threads, "--text"])
            .arg(&text)
            .arg("--ngram")
            .arg(&ngram)
            .arg("--out")
            .arg(&log)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        std::fs::read(&log).unwrap()
    };
    let one = simulate("1");
    assert!(one.len() > 10_000);
    assert!(one == simulate("3"), "the log depends on the thread count");
}

/// `laya bench --int8 SET` runs the kernels of that int8 instruction set (the scalar twin exists
/// everywhere) and says so; a set this CPU lacks or an unknown name is a one-line error.
#[test]
fn bench_int8_flag_picks_the_instruction_set() {
    let m = model_file("int8flag.laya", GgmlType::Q8_0);
    let bench = |isa: &str| {
        laya().args(["bench", "--json", "--iterations", "30", "--cold-runs", "1", "--int8", isa, "--model"]).arg(&m).output().unwrap()
    };
    let out = bench("scalar");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["int8_isa"], "scalar");
    assert_eq!(v["allocations_per_prediction"].as_f64(), Some(0.0));
    for isa in ["avx2", "avx-vnni", "avx512-vnni"] {
        let available: laya_kernels::Int8Isa = isa.parse().unwrap();
        let out = bench(isa);
        if laya_kernels::Kernels::detect().with_int8(available).is_some() {
            assert!(out.status.success(), "{isa}: {}", String::from_utf8_lossy(&out.stderr));
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["int8_isa"], isa);
        } else {
            assert_clean_error(&out);
            assert!(String::from_utf8_lossy(&out.stderr).contains("does not have it"));
        }
    }
    let out = bench("sse2");
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("one of: scalar, avx2, avx-vnni, avx512-vnni"));
}

/// A reader that stops early (`laya inspect --words m | head -1`) ends the command quietly:
/// exit 0 and no panic message, not "failed printing to stdout: Broken pipe".
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    use std::io::{BufRead, BufReader};
    let mut child = laya()
        .args(["inspect", "--words", concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/default.laya")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.starts_with("model"), "{first}");
    // The reader is dropped here; the 50,000 word lines that follow do not fit a pipe buffer.
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.is_empty(), "{:?} {err}", out.status);
}

/// `laya eval --lexicon`: the n-gram is typed with the words of a lexicon file as the pickable
/// set (no model of that lexicon needed); a word outside it is OOV; the model predictor refuses it.
/// Punctuation is typed, never predicted: it is not counted as a word.
#[test]
fn eval_lexicon_sets_the_pickable_words_of_the_ngram() {
    let text = tmp("lexflag.txt");
    let lines: Vec<String> = (0..40).map(|i| ["the cat sat .", "a cat on the mat", "the end , of it"][i % 3].to_string()).collect();
    std::fs::write(&text, lines.join("\n")).unwrap();
    let ngram = tmp("lexflag-ngram.json");
    let out = laya().args(["ngram", "--segmented", "--open-vocabulary", "--train"]).arg(&text).arg("--out").arg(&ngram).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let eval = |lexicon: &str| {
        let lex = tmp("lexflag.tsv");
        std::fs::write(&lex, lexicon).unwrap();
        let out = laya()
            .args(["eval", "--json", "--segmented", "--predictor", "ngram", "--ngram"])
            .arg(&ngram)
            .arg("--lexicon")
            .arg(&lex)
            .arg("--text")
            .arg(&text)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let every = eval("the\t9\ncat\t5\nsat\t3\na\t3\non\t2\nmat\t2\nend\t2\nof\t2\nit\t2\n");
    // 40 lines: 14 + 13 + 13 of 3, 5 and 4 words once "." and "," are left out.
    assert_eq!(every["words"], 14 * 3 + 13 * 5 + 13 * 4, "{every}");
    assert_eq!(every["oov_rate"], 0.0, "{every}");
    let few = eval("the\t9\ncat\t5\n");
    assert!(few["oov_rate"].as_f64().unwrap() > 0.5, "{few}");
    let lex = tmp("lexflag.tsv");
    let out = laya().args(["eval", "--lexicon"]).arg(&lex).arg("--text").arg(&text).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--predictor ngram"));
}

/// `--punctuation-slot` of `laya predict`: without it no punctuation word is a candidate; with
/// it exactly one when every pair is asked for, in its Chinese form after Chinese text.
#[test]
fn punctuation_slot_flag_of_predict() {
    let (mut meta, tensors) = random_model(&TinyConfig::default(), 3, GgmlType::F32);
    let mut words = meta.words.to_vec();
    words[10] = ",".into();
    words[11] = "?".into();
    meta.words = words.iter().collect();
    let path = tmp("punct.laya");
    std::fs::write(&path, write_model(&meta, &tensors).unwrap()).unwrap();
    let words_of = |extra: &[&str]| -> Vec<String> {
        let out = laya().args(["predict", "--json", "--top", "2000", "--model"]).arg(&path).args(extra).arg("今天").output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["candidates"].as_array().unwrap().iter().map(|c| c["word"].as_str().unwrap().to_string()).collect()
    };
    let plain = words_of(&[]);
    assert!(!plain.is_empty() && plain.iter().all(|w| !laya_format::is_punctuation_word(w)), "{plain:?}");
    let with = words_of(&["--punctuation-slot"]);
    let marks: Vec<&String> = with.iter().filter(|w| laya_format::is_punctuation_word(w)).collect();
    assert_eq!(marks.len(), 1, "{with:?}");
    assert!(marks[0] == "，" || marks[0] == "？", "{marks:?}");
}

/// The JSON lines of `laya predict --jsonl`, parsed.
fn jsonl_replies(model: &std::path::Path, input: &[u8]) -> Vec<serde_json::Value> {
    let out = run_stdin(laya().args(["predict", "--jsonl", "--top", "3", "--model"]).arg(model), input);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// A line that is valid JSON but not an object is an error saying what a line must be, not a
/// request: serde reads a struct from an array too (`["今天", null, null]` was a context).
#[test]
fn jsonl_refuses_a_line_that_is_not_an_object_and_goes_on() {
    let m = model_file("not-object.laya", GgmlType::F32);
    let lines = [r#"["今天"]"#, r#"["今天", null, null]"#, r#""今天""#, "5", "null", "true", r#"  ["\ud800"]"#, r#"{"context": "今天"}"#];
    let kinds = ["an array", "an array", "a string", "a number", "null", "a boolean", "an array"];
    let v = jsonl_replies(&m, (lines.join("\n") + "\n").as_bytes());
    assert_eq!(v.len(), lines.len());
    for (i, kind) in kinds.iter().enumerate() {
        let err = v[i]["error"].as_str().unwrap_or_else(|| panic!("line {}: {}", i + 1, v[i]));
        assert!(err.contains(&format!("line {}: {kind}", i + 1)), "{err}");
        assert!(err.contains(r#"a line must be a JSON object like {"context": "..."}"#), "{err}");
    }
    assert_eq!(v[7]["candidates"].as_array().map(Vec::len), Some(3), "{}", v[7]);
}

/// A UTF-8 byte order mark (Windows editors write one) is skipped at the start of the stream;
/// anywhere else it is a character the JSON does not allow.
#[test]
fn jsonl_skips_a_byte_order_mark_at_the_start_only() {
    let m = model_file("bom.laya", GgmlType::F32);
    let plain = jsonl_replies(&m, "{\"context\": \"今天\"}\n".as_bytes());
    let v = jsonl_replies(&m, "\u{FEFF}{\"context\": \"今天\"}\n\u{FEFF}{\"context\": \"今天\"}\n".as_bytes());
    assert_eq!(v.len(), 2);
    assert_eq!(v[0], plain[0]);
    assert!(v[1]["error"].as_str().unwrap().contains("line 2"), "{}", v[1]);
}

/// docs/evaluation.md §1: a lone surrogate escape is valid JSON and reads as U+FFFD, leading or trailing.
#[test]
fn jsonl_reads_a_lone_surrogate_as_the_replacement_character() {
    let m = model_file("surrogate.laya", GgmlType::F32);
    let v = jsonl_replies(&m, b"{\"context\":\"\\ud800\"}\n{\"context\":\"\\udc00\"}\n{\"context\":\"\\ufffd\"}\n");
    assert!(v[2]["candidates"].is_array(), "{}", v[2]);
    assert_eq!(v[0], v[2]);
    assert_eq!(v[1], v[2]);
}

/// `--model DIR` names the mistake (the runtime's `LoadError::IsDirectory`), not the "No such
/// device" of mmap, in every command that loads a model.
#[test]
fn a_model_directory_is_named_as_a_directory() {
    let dir = tmp("models-dir");
    std::fs::create_dir_all(&dir).unwrap();
    for cmd in [&["predict", "x"][..], &["bench", "--iterations", "1", "--cold-runs", "1"]] {
        let out = laya().args(cmd).arg("--model").arg(&dir).output().unwrap();
        assert_clean_error(&out);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("is a directory") && err.contains("model file") && !err.contains("No such device"), "{cmd:?}: {err}");
    }
}

/// `--completion-prior` and `--completion-exponent` are refused outside the range the session
/// would clamp them into, with the range in clap's message (exit 2), in `predict` and `eval`.
#[test]
fn completion_flags_out_of_range_are_refused_with_the_range() {
    let text = tmp("range.txt");
    std::fs::write(&text, "hello world\n").unwrap();
    let cases = [
        ("--completion-prior", "3", "between 0 and 2"),
        ("--completion-prior", "-0.5", "between 0 and 2"),
        ("--completion-prior", "NaN", "between 0 and 2"),
        ("--completion-prior", "much", "not a number"),
        ("--completion-exponent", "1.5", "between 0 and 1"),
        ("--completion-exponent", "inf", "between 0 and 1"),
    ];
    for (flag, value, needle) in cases {
        for cmd in [&["predict", "x"][..], &["eval", "--text", text.to_str().unwrap()]] {
            let out = laya().args(cmd).arg(format!("{flag}={value}")).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{cmd:?} {flag}={value}: {err}");
            assert!(err.contains(flag) && err.contains(needle), "{cmd:?} {flag}={value}: {err}");
        }
    }
    let m = model_file("range.laya", GgmlType::F32);
    for (prior, exponent) in [("0", "0"), ("2", "1")] {
        let out = laya()
            .args(["predict", "--json", "--completion-prior", prior, "--completion-exponent", exponent, "--model"])
            .arg(&m)
            .arg("hel")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

/// The `laya predict` table lines up in a terminal: every row, header included, has the same
/// display width with CJK (two columns a character), mixed and longer-than-the-column words.
#[test]
fn predict_table_lines_up_by_display_width() {
    use unicode_width::UnicodeWidthStr;
    let (mut meta, tensors) = random_model(&TinyConfig::default(), 3, GgmlType::F32);
    let mut words = meta.words.to_vec();
    for (i, w) in ["今天", "天气很好", "wide", "Laya拉雅", "一二三四五六七八九十一二三四五", "é"].iter().enumerate()
    {
        words[10 + i] = (*w).into();
    }
    meta.words = words.iter().collect();
    let path = tmp("table-width.laya");
    std::fs::write(&path, write_model(&meta, &tensors).unwrap()).unwrap();
    let out = laya().args(["predict", "--top", "2000", "--model"]).arg(&path).arg("今天").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("一二三四五六七八九十一二三四五") && table.contains("天气很好"), "{table}");
    let header = table.lines().next().unwrap().width();
    for line in table.lines() {
        assert_eq!(line.width(), header, "misaligned:\n{table}");
    }
}

/// `--lang en` runs the embedded English model (models/en.laya): next words after a space,
/// completions inside a word in the typed case, apostrophes, a capital where a sentence
/// starts, stretched spellings only once typed; `--lang` and `--model` together are refused.
#[test]
fn lang_en_predicts_english_with_english_typing_rules() {
    let bar = |ctx: &str| -> Vec<(String, u64)> { predict_json(&["--lang", "en"], ctx).into_iter().map(|c| (c.0, c.1)).collect() };
    let ascii_words = |b: &[(String, u64)]| b.iter().all(|(w, _)| w.chars().all(|c| c.is_ascii_alphabetic() || c == '\''));
    let next = bar("I want to ");
    assert!(next.len() == 5 && next.iter().all(|c| c.1 == 0) && ascii_words(&next), "{next:?}");
    assert!(next.iter().any(|c| ["go", "do", "be", "see", "get"].contains(&c.0.as_str())), "{next:?}");
    assert!(bar("hel").contains(&("hello".into(), 3)), "{:?}", bar("hel"));
    assert!(bar("Hel").contains(&("Hello".into(), 3)), "{:?}", bar("Hel"));
    assert!(bar("HEL").contains(&("HELLO".into(), 3)), "{:?}", bar("HEL"));
    assert!(bar("see you tomor").contains(&("tomorrow".into(), 5)));
    assert!(bar("i don'").contains(&("don't".into(), 4)), "{:?}", bar("i don'"));
    assert!(bar("i'").contains(&("I'm".into(), 2)), "{:?}", bar("i'"));
    // Inside a word completions only; at a sentence start capitals.
    assert!(bar("hel").iter().all(|c| c.1 > 0));
    // A stretched spelling waits until its stretch is typed.
    assert!(!bar("hel").iter().any(|c| c.0.contains("lll")), "{:?}", bar("hel"));
    assert!(bar("helll").contains(&("helllo".into(), 5)), "{:?}", bar("helll"));
    for ctx in ["", "Thanks. "] {
        let b = bar(ctx);
        assert!(b.iter().all(|c| c.0.starts_with(|ch: char| ch.is_uppercase())), "{ctx:?}: {b:?}");
    }
    let out = laya().args(["predict", "--lang", "en", "--model", "x.laya", "hi"]).output().unwrap();
    assert!(!out.status.success());
    let out = laya().args(["predict", "--lang", "fr", "hi"]).output().unwrap();
    assert!(!out.status.success());
}

/// `laya eval --predictor interpolated`: at `--ngram-weight 0` it types exactly as the model, at
/// 1 (mixed linearly) exactly as the n-gram, in between a mixture, however mixed; `--learn` and a weight outside 0..=1 refuse
/// it; `laya predict` answers with it. `--ngram-min-count` drops the trigrams seen fewer times.
#[test]
fn interpolated_predictor_spans_the_model_and_the_ngram() {
    let text = tmp("interp.txt");
    let lines = ["我们今天去学校", "今天天气很好", "明天我们去公园", "我们喜欢今天的天气"];
    std::fs::write(&text, lines.repeat(5).join("\n")).unwrap();
    let ngram = tmp("interp-ngram.json");
    let out = laya().args(["ngram", "--train"]).arg(&text).arg("--out").arg(&ngram).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The report of `laya eval --json ARGS` without its run time.
    let report = |args: &[&str]| {
        let out =
            laya().args(["eval", "--json", "--threads", "1", "--ngram"]).arg(&ngram).arg("--text").arg(&text).args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let mut v = serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap();
        v.as_object_mut().unwrap().remove("seconds");
        v
    };
    let eval = |predictor: &str, weight: &str| report(&["--predictor", predictor, "--ngram-weight", weight]);
    let within = |weight: &str| report(&["--predictor", "interpolated", "--ngram-mix", "within-class", "--ngram-weight", weight]);
    let (model, ngram_only) = (eval("model", "0"), eval("ngram", "0"));
    assert_ne!(model, ngram_only, "the two predictors must differ for this test to mean anything");
    assert_eq!(eval("interpolated", "0"), model);
    let linear = |weight: &str| report(&["--predictor", "interpolated", "--ngram-mix", "linear", "--ngram-weight", weight]);
    assert_eq!(within("0"), model);
    assert_eq!(linear("0"), model);
    assert_eq!(linear("1"), ngram_only);
    // The n-gram has learned these lines; half its weight types them better than the model alone,
    // mixed either way.
    for half in [eval("interpolated", "0.5"), within("0.5"), linear("0.5")] {
        let ksr = half["ksr"].as_f64().unwrap();
        assert!(ksr > 0.0 && ksr < 1.0, "{half}");
        assert!(half["top5_k0"].as_f64() > model["top5_k0"].as_f64(), "{half} vs {model}");
    }
    for (args, want) in [
        (vec!["eval", "--predictor", "interpolated", "--learn"], "does not learn"),
        (vec!["eval", "--predictor", "interpolated", "--ngram-weight", "1.5"], "between 0 and 1"),
    ] {
        let out = laya().args(&args).arg("--ngram").arg(&ngram).arg("--text").arg(&text).output().unwrap();
        assert!(
            !out.status.success() && String::from_utf8_lossy(&out.stderr).contains(want),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // `laya predict` too: at weight 0 the model's answer, at 0.5 another one.
    let predict = |predictor: &str, weight: &str| {
        let out = laya()
            .args(["predict", "--json", "--predictor", predictor, "--ngram-weight", weight, "--ngram"])
            .arg(&ngram)
            .arg("我们今天")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    assert_eq!(predict("interpolated", "0"), predict("model", "0"));
    assert_ne!(predict("interpolated", "0.5"), predict("model", "0"));
    // Each line is there five times, so every trigram is too: a minimum of 5 drops none, 6 most.
    let pruned = |n: &str| report(&["--predictor", "ngram", "--ngram-min-count", n]);
    assert_eq!(pruned("5"), ngram_only);
    assert_ne!(pruned("6"), ngram_only);
    let out = laya()
        .args(["eval", "--predictor", "ngram", "--ngram-min-count", "0", "--ngram"])
        .arg(&ngram)
        .arg("--text")
        .arg(&text)
        .output()
        .unwrap();
    assert!(!out.status.success());
}

/// `laya ngram --cut lexicon`: the training text and every history are cut with the lexicon's
/// words under its counts, which the file keeps; it needs `--lexicon`.
#[test]
fn ngram_cut_by_the_lexicon() {
    let text = tmp("cut.txt");
    std::fs::write(&text, ["今天天气很好", "今天天气不错", "我喜欢今天"].repeat(4).join("\n")).unwrap();
    let lex = tmp("cut.tsv");
    // 天天 outweighs 今天 and 天气 here, so 今天天气 is cut 今 | 天天 | 气.
    std::fs::write(&lex, "天天\t50\n今天\t1\n天气\t1\n今\t1\n气\t1\n很\t1\n好\t1\n不错\t1\n我\t1\n喜欢\t1\n").unwrap();
    let run = |out: &std::path::Path, cut: &str, lexicon: bool| {
        let mut cmd = laya();
        cmd.args(["ngram", "--cut", cut, "--train"]).arg(&text).arg("--out").arg(out);
        if lexicon {
            cmd.arg("--lexicon").arg(&lex);
        }
        cmd.output().unwrap()
    };
    let (by_lexicon, by_jieba) = (tmp("cut-lexicon.json"), tmp("cut-jieba.json"));
    for (path, cut) in [(&by_lexicon, "lexicon"), (&by_jieba, "jieba")] {
        let out = run(path, cut, true);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let file = |p: &std::path::Path| serde_json::from_slice::<serde_json::Value>(&std::fs::read(p).unwrap()).unwrap();
    let (lexicon_file, jieba_file) = (file(&by_lexicon), file(&by_jieba));
    assert!(lexicon_file["cut"].is_array() && jieba_file.get("cut").is_none());
    assert_ne!(lexicon_file["trigrams"], jieba_file["trigrams"], "the two cuts must count other trigrams");
    // Without --lexicon the model's words cut, under the counts the runtime cuts with.
    let by_model = tmp("cut-model.json");
    let out = run(&by_model, "lexicon", false);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(file(&by_model)["cut"].is_array());
    let out = laya()
        .args(["ngram", "--cut", "lexicon", "--open-vocabulary", "--train"])
        .arg(&text)
        .arg("--out")
        .arg(tmp("x.json"))
        .output()
        .unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--cut lexicon needs"));
}

/// The n-gram a model file carries (`laya attach-ngram`) against its naive twins: the same
/// probabilities as `laya_text::NgramPredictor` for every history and word, and the same bar as
/// `--predictor interpolated` with the network alone and that n-gram.
#[test]
fn attached_ngram_matches_its_naive_twins() {
    let text = tmp("attach.txt");
    let lines = ["我们今天去学校", "今天天气很好", "明天我们去公园", "我们喜欢今天的天气", "他们明天也去学校上课", "今天的天气不错"];
    std::fs::write(&text, lines.repeat(3).join("\n")).unwrap();
    let default = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/default.laya");
    let (ngram, with) = (tmp("attach-ngram.json"), tmp("attach-model.laya"));
    let out = laya()
        .args(["ngram", "--cut", "lexicon", "--model"])
        .arg(&default)
        .arg("--train")
        .arg(&text)
        .arg("--out")
        .arg(&ngram)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = laya().arg("attach-ngram").arg(&default).arg(&ngram).arg("--out").arg(&with).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("trigrams"));

    let twin = laya_text::NgramPredictor::load(std::io::BufReader::new(std::fs::File::open(&ngram).unwrap())).unwrap();
    let model = laya_runtime::Model::load(&with).unwrap();
    assert!(model.has_ngram());
    let words: Vec<&str> = twin.words().iter().map(String::as_str).collect();
    let histories: Vec<Option<&str>> = std::iter::once(None).chain(words.iter().copied().map(Some)).collect();
    let mut compared = 0;
    for &u in &histories {
        for &v in &histories {
            if u.is_some() && v.is_none() {
                continue;
            }
            for &w in &words {
                let (a, b) = (twin.probability([u, v], w), model.ngram_probability([u, v], w).unwrap());
                assert!((a - b).abs() <= 1e-6 * a.max(1e-12), "P({w} | {u:?} {v:?}): twin {a}, file {b}");
                compared += 1;
            }
        }
    }
    assert!(compared > 1000, "{compared}");

    // Every prefix of every line: the bar of the model with its n-gram at the default weight,
    // and of the network alone mixed with the JSON n-gram by `--predictor interpolated`.
    let contexts: Vec<String> = lines.iter().flat_map(|l| l.char_indices().map(move |(i, c)| l[..i + c.len_utf8()].to_string())).collect();
    let input: String = contexts.iter().map(|c| format!("{}\n", serde_json::json!({ "context": c }))).collect();
    let bars = |args: &[&str]| -> Vec<Vec<(String, u64)>> {
        let out = run_stdin(laya().args(["predict", "--jsonl", "--model"]).arg(&with).args(args), input.as_bytes());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["candidates"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| (c["word"].as_str().unwrap().to_string(), c["replace"].as_u64().unwrap()))
                    .collect()
            })
            .collect()
    };
    let runtime = bars(&[]);
    let naive = bars(&["--predictor", "interpolated", "--ngram", ngram.to_str().unwrap()]);
    let alone = bars(&["--ngram-weight", "0"]);
    assert_eq!(runtime.len(), contexts.len());
    let same = runtime.iter().zip(&naive).filter(|(a, b)| a == b).count();
    assert!(same * 10 >= contexts.len() * 9, "{same} of {} bars agree with the twin", contexts.len());
    assert_ne!(runtime, alone, "the n-gram must change some bar for this test to mean anything");
}
