//! `laya recase` as a user sees it: a case-ignoring model and a lexicon in, the same model with
//! the lexicon's spellings out, predicting the same words with the same probabilities; clear
//! errors that write nothing. And `laya lexicon --case-text`, which makes such lexicons.

mod common;
use common::{assert_one_line_error, laya, ok, predict_json, tmp};

use std::path::{Path, PathBuf};

use laya_format::testing::{random_model, TinyConfig};
use laya_format::{write_model, GgmlType};

fn model(name: &str, language: &str) -> PathBuf {
    let (mut meta, tensors) = random_model(&TinyConfig::default(), 5, GgmlType::Q8_0);
    meta.provenance.language = language.into();
    let path = tmp(name);
    std::fs::write(&path, write_model(&meta, &tensors).unwrap()).unwrap();
    path
}

/// Each candidate of `context` as (word, replace, p), 20 of them.
fn bar(model: &Path, context: &str) -> Vec<(String, u64, f64)> {
    predict_json(&["--top", "20", "--model", model.to_str().unwrap()], context)
}

#[test]
fn respelt_words_are_shown_in_the_new_spelling_with_the_same_probability() {
    let input = model("recase-in.laya", "en");
    let lexicon = tmp("recase-lexicon.tsv");
    std::fs::write(&lexicon, "Hello\t50\nnaïve\t3\nunrelated\t2\n").unwrap();
    let output = tmp("recase-out.laya");
    let report = ok(&laya().arg("recase").arg("--lexicon").arg(&lexicon).arg(&input).arg(&output).output().unwrap());
    assert!(report.contains("1 of ") && report.contains("hello → Hello"), "{report}");
    for context in ["", "h", "he", "q"] {
        let before = bar(&input, context);
        let after = bar(&output, context);
        let respelt: Vec<_> = before.into_iter().map(|(w, r, p)| (if w == "hello" { "Hello".to_string() } else { w }, r, p)).collect();
        assert_eq!(after.len(), respelt.len(), "{context:?}");
        for (a, b) in after.iter().zip(&respelt) {
            assert!(a.0 == b.0 && a.1 == b.1 && (a.2 - b.2).abs() < 1e-6, "{context:?}: {after:?} vs {respelt:?}");
        }
    }
    assert!(bar(&output, "he").iter().any(|c| c.0 == "Hello" && c.1 == 2), "{:?}", bar(&output, "he"));
}

#[test]
fn refusals_name_the_problem_and_write_nothing() {
    let output = tmp("recase-refused.laya");
    let lexicon = tmp("recase-lex-ok.tsv");
    std::fs::write(&lexicon, "Hello\t5\n").unwrap();
    let zh = model("recase-zh.laya", "zh");
    let out = laya().arg("recase").arg("--lexicon").arg(&lexicon).arg(&zh).arg(&output).output().unwrap();
    assert_one_line_error(&out, "does not ignore case");
    let en = model("recase-en.laya", "en");
    let twins = tmp("recase-lex-twins.tsv");
    std::fs::write(&twins, "Hello\t5\nHELLO\t4\n").unwrap();
    let out = laya().arg("recase").arg("--lexicon").arg(&twins).arg(&en).arg(&output).output().unwrap();
    assert_one_line_error(&out, "fold alike");
    let out = laya().arg("recase").arg("--lexicon").arg(tmp("recase-missing.tsv")).arg(&en).arg(&output).output().unwrap();
    assert_one_line_error(&out, "cannot read");
    std::fs::write(tmp("recase-garbage.laya"), b"GGUF not really").unwrap();
    let out = laya().arg("recase").arg("--lexicon").arg(&lexicon).arg(tmp("recase-garbage.laya")).arg(&output).output().unwrap();
    assert_one_line_error(&out, "is not a valid Laya model");
    assert!(!output.exists(), "a refused run writes nothing");
    let out = laya().arg("recase").arg("--lexicon").arg(&lexicon).arg(&en).arg(std::env::temp_dir()).output().unwrap();
    assert_one_line_error(&out, "cannot write");
}

/// The training text writes `States` (a title) and `California` inside sentences most often;
/// the edited text writes `states` often enough and `California` only, so the lexicon stores
/// `states` and keeps `California`: edited text only ever lowercases.
#[test]
fn edited_text_lowercases_common_words_but_not_names() {
    let train = tmp("case-train.txt");
    let mut text = String::from("the states voted\nwe went to california again\n");
    for _ in 0..5 {
        text.push_str("we saw the United States today\nwe went to California today\n");
    }
    std::fs::write(&train, text).unwrap();
    let edited = tmp("case-edited.txt");
    std::fs::write(&edited, "the states agreed\nthe states met\nthe states left\nthe United States won\nthe United States lost\nthe United States and the United States\nwe saw California\n")
        .unwrap();
    let words = |extra: &[&str]| -> Vec<String> {
        let out = tmp("case-lexicon.tsv");
        let mut cmd = laya();
        cmd.args(["lexicon", "--size", "50", "--fold-case", "--train"]).arg(&train).arg("--out").arg(&out).args(extra);
        ok(&cmd.output().unwrap());
        std::fs::read_to_string(&out).unwrap().lines().map(|l| l.split('\t').next().unwrap().to_string()).collect()
    };
    let plain = words(&[]);
    assert!(plain.contains(&"States".to_string()) && plain.contains(&"California".to_string()), "{plain:?}");
    let e = edited.to_str().unwrap();
    let with = words(&["--case-text", e]);
    assert!(with.contains(&"states".to_string()) && with.contains(&"California".to_string()), "{with:?}");
    assert!(!with.contains(&"States".to_string()) && !with.contains(&"california".to_string()), "{with:?}");
    // Lowercase 3 times against `States` 4 there: below a share of 1 the usual form stays.
    let strict = words(&["--case-text", e, "--lowercase-share", "1"]);
    assert!(strict.contains(&"States".to_string()), "{strict:?}");
    // A share is a number from 0 to 1; the edited text needs --fold-case.
    let out = laya()
        .args(["lexicon", "--fold-case", "--lowercase-share", "1.5", "--train"])
        .arg(&train)
        .arg("--out")
        .arg(tmp("x.tsv"))
        .output()
        .unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("from 0 to 1"));
    let out = laya().args(["lexicon", "--case-text", e, "--train"]).arg(&train).arg("--out").arg(tmp("x.tsv")).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--fold-case"));
}
