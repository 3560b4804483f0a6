//! `laya prior` as a user sees it: a model and a dictionary in, the same model with dictionary
//! frequencies out (docs/format.md §3 step 6); clear errors that leave nothing half-written.

mod common;
use common::{assert_one_line_error, laya, ok, tmp};

use std::path::PathBuf;

use laya_format::testing::{random_model, TinyConfig};
use laya_format::{write_model, GgmlType, LayaFile};

fn model(name: &str) -> (PathBuf, Vec<String>) {
    let (meta, tensors) = random_model(&TinyConfig::default(), 5, GgmlType::F32);
    let path = tmp(name);
    std::fs::write(&path, write_model(&meta, &tensors).unwrap()).unwrap();
    (path, meta.words.iter().map(str::to_string).collect())
}

fn meta(path: &PathBuf) -> laya_format::ModelMeta {
    LayaFile::parse(&std::fs::read(path).unwrap()).unwrap().meta
}

#[test]
fn dictionary_frequencies_land_in_the_file_and_survive_quantisation() {
    let (input, words) = model("prior-in.laya");
    // Three lexicon words (one listed twice: counts add up) and one word the lexicon lacks.
    let dict = tmp("dict.txt");
    std::fs::write(&dict, format!("{} 40 n\n{} 7\n\n{} 2 v\nnot-a-lexicon-word 99\n{} 3\n", words[1], words[2], words[1], words[3]))
        .unwrap();
    let output = tmp("prior-out.laya");
    let report = ok(&laya().arg("prior").arg("--dict").arg(&dict).arg(&input).arg(&output).output().unwrap());
    assert!(report.contains(&format!("3 of {} lexicon words found", words.len())), "{report}");
    let m = meta(&output);
    let d = m.dict_frequencies.as_ref().expect("dictionary frequencies written");
    let by_word = |w: &str| d[m.words.iter().position(|x| x == w).unwrap()];
    assert_eq!((by_word(&words[1]), by_word(&words[2]), by_word(&words[3]), by_word(&words[0])), (42, 7, 3, 0));
    assert_eq!(meta(&input).dict_frequencies, None, "the input is untouched");

    let inspect = ok(&laya().arg("inspect").arg(&output).output().unwrap());
    assert!(inspect.contains(&format!("dict prior       3 of {} words", words.len())), "{inspect}");
    let listed = ok(&laya().args(["inspect", "--words"]).arg(&output).output().unwrap());
    assert!(listed.lines().any(|l| l.starts_with(&format!("{}\t", words[1])) && l.ends_with("\t42")), "{listed}");

    // Quantising keeps them, each with its word (quantize sorts the lexicon).
    let q = tmp("prior-q.laya");
    ok(&laya().arg("quantize").arg(&output).arg(&q).output().unwrap());
    let mq = meta(&q);
    let dq = mq.dict_frequencies.as_ref().expect("kept by quantize");
    assert_eq!(dq[mq.words.iter().position(|x| x == words[1]).unwrap()], 42);

    // Both files predict; the weight is a flag of predict and eval.
    for flag in ["0", "0.5", "2"] {
        ok(&laya().args(["predict", "--completion-prior", flag, "--model"]).arg(&q).arg("hel").output().unwrap());
    }
}

/// A model whose language ignores case takes a word's frequency in any spelling of the
/// dictionary (wordfreq's are lowercase): `Hello` gets `hello`'s and `HELLO`'s. Chinese keeps
/// spellings apart.
#[test]
fn a_case_ignoring_model_finds_its_words_in_any_case() {
    let (mut meta, tensors) = random_model(&TinyConfig::default(), 5, GgmlType::F32);
    let words: Vec<String> = meta.words.iter().map(|w| if w == "hello" { "Hello".to_string() } else { w.to_string() }).collect();
    meta.words = words.iter().collect();
    let dict = tmp("prior-case-dict.txt");
    std::fs::write(&dict, format!("hello 40\nHELLO 2\n{} 7\n", words[1])).unwrap();
    for (language, want) in [("en", 42), ("zh", 0)] {
        meta.provenance.language = language.into();
        let input = tmp(&format!("prior-case-{language}.laya"));
        std::fs::write(&input, write_model(&meta, &tensors).unwrap()).unwrap();
        let output = tmp(&format!("prior-case-{language}-out.laya"));
        ok(&laya().arg("prior").arg("--dict").arg(&dict).arg(&input).arg(&output).output().unwrap());
        let m = LayaFile::parse(&std::fs::read(&output).unwrap()).unwrap().meta;
        let at = m.words.iter().position(|w| w == "Hello").unwrap();
        assert_eq!(m.dict_frequencies.as_ref().unwrap()[at], want, "{language}");
    }
}

#[test]
fn bad_dictionaries_are_refused_and_nothing_is_written() {
    let (input, words) = model("prior-bad.laya");
    let output = tmp("prior-bad-out.laya");
    let dict = tmp("bad-dict.txt");
    std::fs::write(&dict, format!("{} 5\n{} lots\n", words[1], words[2])).unwrap();
    let out = laya().arg("prior").arg("--dict").arg(&dict).arg(&input).arg(&output).output().unwrap();
    assert_one_line_error(&out, "line 2");
    std::fs::write(&dict, "zzz-unknown 5\nqqq-unknown 3\n").unwrap();
    let out = laya().arg("prior").arg("--dict").arg(&dict).arg(&input).arg(&output).output().unwrap();
    assert_one_line_error(&out, "none of the");
    std::fs::write(&dict, "\n\n").unwrap();
    let out = laya().arg("prior").arg("--dict").arg(&dict).arg(&input).arg(&output).output().unwrap();
    assert_one_line_error(&out, "has no entries");
    let out = laya().arg("prior").arg("--dict").arg(tmp("missing.txt")).arg(&input).arg(&output).output().unwrap();
    assert_one_line_error(&out, "cannot read");
    std::fs::write(tmp("garbage.laya"), b"GGUF not really").unwrap();
    std::fs::write(&dict, format!("{} 5\n", words[1])).unwrap();
    let out = laya().arg("prior").arg("--dict").arg(&dict).arg(tmp("garbage.laya")).arg(&output).output().unwrap();
    assert_one_line_error(&out, "is not a valid Laya model");
    assert!(!output.exists(), "a refused run writes nothing");
}

#[test]
#[cfg(feature = "train")]
fn pruning_keeps_the_dictionary_frequencies_word_by_word() {
    let cfg = TinyConfig { feed_forward_length: vec![128, 96], vocab: 40, ..TinyConfig::small() };
    let (mut meta0, tensors) = random_model(&cfg, 9, GgmlType::F32);
    let freqs: Vec<u32> = (0..meta0.vocab_size() as u32).map(|i| if i % 3 == 0 { 0 } else { 10 + i }).collect();
    meta0.dict_frequencies = Some(freqs.clone());
    let input = tmp("prune-dict.laya");
    std::fs::write(&input, write_model(&meta0, &tensors).unwrap()).unwrap();
    let output = tmp("prune-dict-out.laya");
    ok(&laya().args(["prune", "--ffn", "64,32", "--model"]).arg(&input).arg("--out").arg(&output).output().unwrap());
    let after = meta(&output);
    let d = after.dict_frequencies.as_ref().expect("kept by prune");
    for (i, w) in after.words.iter().enumerate() {
        let j = meta0.words.iter().position(|x| x == w).unwrap();
        assert_eq!(d[i], freqs[j], "{w}");
    }
}
