//! Corpus statistics, a lexicon, and the n-gram baseline's numbers on the prepared data.
//!
//! `cargo run --release -p laya-text --example baseline -- DATA_DIR zh|en [--size N] [--limit N]`
//! writes `DATA_DIR/LANG/lexicon-N.tsv` and `DATA_DIR/LANG/ngram.json` and prints a JSON report:
//! lexicon coverage on train/valid(/heldout) and docs/evaluation.md §2 numbers of the baseline.

use laya_text::*;
use std::collections::HashSet;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

fn lines(p: &Path) -> Result<Vec<String>, String> {
    let f = File::open(p).map_err(|e| format!("{}: {e}", p.display()))?;
    BufReader::new(f).lines().collect::<Result<_, _>>().map_err(|e| format!("{}: {e}", p.display()))
}

fn counts(ls: &[String], seg: &Segmenter) -> Counts {
    let mut c = Counts::new();
    let text = ls.join("\n");
    count_words(text.as_bytes(), seg, &mut c, &mut |_| {}).expect("in-memory read");
    c
}

fn run() -> Result<serde_json::Value, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        return Err("usage: baseline DATA_DIR zh|en [--size N] [--limit N]".into());
    }
    let (data, lang) = (Path::new(&args[0]), args[1].as_str());
    let opt = |name: &str, def: usize| -> Result<usize, String> {
        match args.iter().position(|a| a == name) {
            Some(i) => args.get(i + 1).and_then(|v| v.parse().ok()).ok_or(format!("{name} needs a number")),
            None => Ok(def),
        }
    };
    let (size, limit) = (opt("--size", 20_000)?, opt("--limit", 2000)?);
    let dir = data.join(lang);
    let gold = Segmenter::new(SegmentMode::Segmented);
    let auto = Segmenter::new(SegmentMode::Auto);
    let train = lines(&dir.join("train.txt"))?;
    let valid = lines(&dir.join("valid.txt"))?;
    let heldout = if lang == "zh" { Some(lines(&dir.join("heldout.txt"))?) } else { None };
    // Chinese valid is raw reviews (our segmenter); everything else is gold-segmented.
    let valid_seg = if lang == "zh" { &auto } else { &gold };

    let train_c = counts(&train, &gold);
    let dict = if lang == "zh" {
        let f = File::open(dir.join("dict.txt")).map_err(|e| format!("dict.txt: {e}"))?;
        read_dict(BufReader::new(f)).map_err(|e| e.to_string())?
    } else {
        Counts::new()
    };
    let lex = build_lexicon(&train_c, &dict, &LexiconOptions { size, ..Default::default() });
    let lex_path = dir.join(format!("lexicon-{size}.tsv"));
    lex.write_tsv(BufWriter::new(File::create(&lex_path).map_err(|e| e.to_string())?)).map_err(|e| e.to_string())?;
    let set: HashSet<String> = lex.word_set();
    let valid_c = counts(&valid, valid_seg);
    let single_train: HashSet<&String> = train_c.keys().filter(|w| w.chars().count() == 1).collect();
    let single_lex = lex.words.iter().filter(|w| w.chars().count() == 1).count();
    let single_lex_in_train = single_train.iter().filter(|w| set.contains(**w)).count();
    let from_dict_only = lex.words.iter().filter(|w| !train_c.contains_key(*w)).count();
    let mut stats = serde_json::json!({
        "lang": lang,
        "lexicon": { "path": lex_path, "size": lex.len(), "single_chars": single_lex, "dict_only_words": from_dict_only },
        "train": { "lines": train.len(), "tokens": train_c.values().sum::<u64>(), "types": train_c.len(),
                   "single_char_types": single_train.len(), "single_char_types_in_lexicon": single_lex_in_train,
                   "coverage": coverage(&set, &train_c) },
        "valid": { "lines": valid.len(), "tokens": valid_c.values().sum::<u64>(), "types": valid_c.len(),
                   "coverage": coverage(&set, &valid_c) },
    });
    if let Some(h) = &heldout {
        let hc = counts(h, &gold);
        stats["heldout"] = serde_json::json!({ "lines": h.len(), "tokens": hc.values().sum::<u64>(), "coverage": coverage(&set, &hc) });
    }

    let t = Instant::now();
    let m = NgramPredictor::train(train.iter().cloned(), &gold, Some(&set), &mut |_| {});
    let train_s = t.elapsed().as_secs_f64();
    let ngram_path = dir.join("ngram.json");
    m.save(File::create(&ngram_path).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    let t = Instant::now();
    let mut m = NgramPredictor::load(BufReader::new(File::open(&ngram_path).map_err(|e| e.to_string())?)).map_err(|e| e.to_string())?;
    stats["ngram"] = serde_json::json!({ "path": ngram_path, "vocab": m.vocab_len(), "trigrams": m.trigram_len(),
        "train_seconds": train_s, "load_seconds": t.elapsed().as_secs_f64() });
    let in_lex = |w: &str| set.contains(w);
    let r = evaluate(&mut m, valid.iter().cloned(), valid_seg, &in_lex, Some(limit), &mut |_| {}).map_err(|e| e.to_string())?;
    stats["eval_valid"] = serde_json::to_value(&r).unwrap_or_default();
    stats["eval_valid"]["limit"] = limit.into();
    if let Some(h) = &heldout {
        let r = evaluate(&mut m, h.iter().cloned(), &gold, &in_lex, Some(limit), &mut |_| {}).map_err(|e| e.to_string())?;
        stats["eval_heldout"] = serde_json::to_value(&r).unwrap_or_default();
        stats["eval_heldout"]["limit"] = limit.into();
    }
    Ok(stats)
}

fn main() -> ExitCode {
    match run() {
        Ok(v) => {
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("baseline: {e}");
            ExitCode::FAILURE
        }
    }
}
