//! docs/evaluation.md §4 through the `laya` binary and its embedded default model: `{"learn"}` and
//! `{"forget"}` lines, `--user` across processes, `--incognito`, a damaged user file, the
//! `laya user` command and `laya eval --learn`.

mod common;
use common::{assert_one_line_error, laya, ok, tmp};

use std::io::Write;
use std::process::{Output, Stdio};

fn predict(args: &[&str], lines: &[&str]) -> (Vec<serde_json::Value>, Output) {
    let mut child =
        laya().args(["predict", "--jsonl"]).args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for l in lines {
        writeln!(stdin, "{l}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let values = String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    (values, out)
}

fn has(v: &serde_json::Value, word: &str, replace: u64) -> bool {
    v["candidates"].as_array().unwrap().iter().any(|c| c["word"] == word && c["replace"] == replace)
}

#[test]
fn learn_and_forget_lines_take_effect_for_the_very_next_request() {
    let (v, out) = predict(
        &[],
        &[
            r#"{"context": "我在用拉"}"#,
            r#"{"learn": "拉雅"}"#,
            r#"{"context": "我在用拉"}"#,
            r#"{"learn": "今天我们讨论光标的默认位置"}"#,
            r#"{"context": "光"}"#,
            r#"{"forget": "拉雅"}"#,
            r#"{"context": "我在用拉"}"#,
            r#"{"forget": "拉雅"}"#,
            r#"{"learn": 5}"#,
            r#"{"context": "a", "learn": "b"}"#,
            r#"{"context": "\ud800 lone"}"#,
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(v.len(), 11);
    assert!(!has(&v[0], "拉雅", 1));
    assert_eq!(v[1], serde_json::json!({"learned": 1}));
    assert!(has(&v[2], "拉雅", 1), "{}", v[2]);
    assert_eq!(v[3], serde_json::json!({"learned": 7}));
    assert!(has(&v[4], "光标", 1), "{}", v[4]);
    assert_eq!(v[5], serde_json::json!({"forgotten": true}));
    assert!(!has(&v[6], "拉雅", 1), "{}", v[6]);
    assert_eq!(v[7], serde_json::json!({"forgotten": false}));
    for (i, line) in v.iter().enumerate().skip(8).take(2) {
        assert!(line["error"].as_str().unwrap().contains(&format!("line {}", i + 1)), "{line}");
    }
    // A lone surrogate reads as U+FFFD (docs/evaluation.md §1).
    assert!(v[10]["candidates"].is_array(), "{}", v[10]);
}

#[test]
fn the_user_file_keeps_what_was_learned_across_processes() {
    let path = tmp("keeps.layu");
    let p = path.to_str().unwrap();
    let (v, out) = predict(&["--user", p], &[r#"{"learn": "拉雅"}"#]);
    assert!(out.status.success());
    assert_eq!(v[0], serde_json::json!({"learned": 1}));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }
    let (v, _) = predict(&["--user", p], &[r#"{"context": "我在用拉"}"#]);
    assert!(has(&v[0], "拉雅", 1), "{}", v[0]);
    // Incognito: nothing learned, nothing written, what was learned still ranks.
    let before = std::fs::read(&path).unwrap();
    let (v, _) = predict(&["--user", p, "--incognito"], &[r#"{"learn": "光标位置"}"#, r#"{"context": "我在用拉"}"#]);
    assert_eq!(v[0], serde_json::json!({"learned": 0}));
    assert!(has(&v[1], "拉雅", 1));
    assert_eq!(std::fs::read(&path).unwrap(), before);
    // A forget is kept even in incognito.
    let (v, _) = predict(&["--user", p, "--incognito"], &[r#"{"forget": "拉雅"}"#]);
    assert_eq!(v[0], serde_json::json!({"forgotten": true}));
    let (v, _) = predict(&["--user", p], &[r#"{"context": "我在用拉"}"#]);
    assert!(!has(&v[0], "拉雅", 1), "{}", v[0]);
}

#[test]
fn a_damaged_user_file_is_a_warning_not_a_failure() {
    let path = tmp("damaged.layu");
    std::fs::write(&path, b"LAYAUSR\0\x01\0\0\0 torn").unwrap();
    let (v, out) = predict(&["--user", path.to_str().unwrap()], &[r#"{"learn": "拉雅"}"#]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("laya: warning: user file") && err.contains(".corrupt-"), "{err}");
    assert_eq!(v[0], serde_json::json!({"learned": 1}));
    let set_aside = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().starts_with("damaged.layu.corrupt-"));
    assert!(set_aside);
    // A path that cannot be written is refused before the first line.
    let bad = tmp("no-such-dir").join("u.layu");
    let out = laya().args(["predict", "--jsonl", "--user"]).arg(&bad).stdin(Stdio::null()).output().unwrap();
    assert_one_line_error(&out, "existing directory");
}

#[test]
fn the_user_command_shows_edits_and_exports_a_file() {
    let path = tmp("edit.layu");
    let text = tmp("edit.txt");
    std::fs::write(&text, "今天我们讨论光标的默认位置\n拉雅\n我们讨论拉雅的设计\n").unwrap();
    let run = |args: &[&str]| laya().arg("user").args(args).output().unwrap();
    let p = path.to_str().unwrap();
    let said = ok(&run(&["learn", p, "--text", text.to_str().unwrap()]));
    assert!(said.contains("learned") && said.contains("3 lines"), "{said}");
    let shown = ok(&run(&["show", p]));
    assert!(shown.contains("光标") && shown.contains("拉雅"), "{shown}");
    assert!(ok(&run(&["forget", p, "光标", "没有"])).contains("光标\tforgotten\n没有\tnot learned"));
    let list = tmp("blocklist.txt");
    std::fs::write(&list, "# my blocklist\n讨论\n\n").unwrap();
    assert!(ok(&run(&["block", p, "设计", "--from", list.to_str().unwrap()])).contains("blocked 2 new words"));
    let export: serde_json::Value = serde_json::from_str(&ok(&run(&["export", p]))).unwrap();
    let words: Vec<&str> = export["words"].as_array().unwrap().iter().map(|w| w["word"].as_str().unwrap()).collect();
    assert!(words.contains(&"拉雅") && !words.contains(&"光标") && !words.contains(&"讨论"), "{words:?}");
    assert_eq!(export["blocked"], serde_json::json!(["讨论", "设计"])); // byte order
    assert!(export["pairs"].as_array().unwrap().iter().any(|p| p["first"] == "拉雅" && p["second"] == "的"));
    // A blocked word never reaches the bar, even after it is typed again.
    let (v, _) = predict(&["--user", p], &[r#"{"learn": "讨论讨论"}"#, r#"{"context": "我们讨"}"#]);
    assert!(!has(&v[1], "讨论", 1), "{}", v[1]);
    assert!(ok(&run(&["unblock", p, "设计"])).contains("设计\tunblocked"));
    assert!(ok(&run(&["clear", p])).starts_with("forgot "));
    let export: serde_json::Value = serde_json::from_str(&ok(&run(&["export", p]))).unwrap();
    assert_eq!(export["words"], serde_json::json!([]));
    assert_eq!(export["blocked"], serde_json::json!(["讨论"]));
    assert_one_line_error(&run(&["show", tmp("missing.layu").to_str().unwrap()]), "no user file");
}

#[test]
fn eval_learn_types_in_order_and_gains_on_repeated_words() {
    let text = tmp("repeat.txt");
    // A made-up name the lexicon lacks, in every line.
    let lines: Vec<String> = (0..30).map(|i| format!("我们今天和拉雅讨论第{i}个问题")).collect();
    std::fs::write(&text, lines.join("\n")).unwrap();
    let eval = |extra: &[&str]| -> serde_json::Value {
        let out = laya().args(["eval", "--json", "--text"]).arg(&text).args(extra).output().unwrap();
        serde_json::from_str(&ok(&out)).unwrap()
    };
    let (plain, learned) = (eval(&[]), eval(&["--learn"]));
    assert_eq!(plain["words"], learned["words"]);
    for key in ["ksr", "top1_k0", "top5_k0"] {
        assert!(learned[key].as_f64().unwrap() > plain[key].as_f64().unwrap() + 0.05, "{key}: {plain} vs {learned}");
    }
    // After one typed character the network alone already finds most of these words.
    for key in ["top1_k1", "top5_k1"] {
        assert!(learned[key].as_f64().unwrap() >= plain[key].as_f64().unwrap(), "{key}: {plain} vs {learned}");
    }
}
