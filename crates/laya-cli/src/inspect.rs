//! `laya inspect FILE`: what is in a model file, and whether it passes every check.

use std::path::PathBuf;

use laya_format::{checksum_report, GgufFile, LayaFile};

use crate::CliError;

#[derive(clap::Args)]
pub struct Args {
    /// The model file.
    file: PathBuf,
    /// Also list every lexicon word with its corpus frequency (and dictionary frequency, when
    /// the file has them).
    #[arg(long)]
    words: bool,
}

pub fn run(args: Args) -> Result<(), CliError> {
    let path = args.file.display().to_string();
    let bytes = std::fs::read(&args.file).map_err(|e| CliError(format!("cannot read {path}: {e}")))?;
    match LayaFile::parse(&bytes) {
        Ok(f) => {
            out!("{}", f.summary());
            outln!("verdict          valid Laya model: every check of docs/format.md passed");
            if args.words {
                match &f.meta.dict_frequencies {
                    // Third column: the dictionary frequency of `laya prior`.
                    Some(d) => {
                        for ((w, n), dn) in f.meta.words.iter().zip(&f.meta.frequencies).zip(d) {
                            outln!("{w}\t{n}\t{dn}");
                        }
                    }
                    None => {
                        for (w, n) in f.meta.words.iter().zip(&f.meta.frequencies) {
                            outln!("{w}\t{n}");
                        }
                    }
                }
            }
            Ok(())
        }
        Err(err) => {
            // Show what can still be read, so the user sees where the file went wrong.
            if let Ok(g) = GgufFile::parse(&bytes) {
                outln!("GGUF v{}, {} keys, {} tensors, alignment {}", g.version, g.kv.len(), g.tensors.len(), g.alignment);
                outln!("| tensor | type | ne | bytes |");
                outln!("|--------|------|----|-------|");
                for t in &g.tensors {
                    outln!("| {} | {} | {:?} | {} |", t.name, t.ty.name(), t.ne, t.size);
                }
                if let Ok(r) = checksum_report(&bytes) {
                    let verdict = if r.is_ok() { "ok" } else { "MISMATCH" };
                    outln!("checksum stored {:016x}, computed {:016x}: {verdict}", r.stored, r.computed);
                }
            }
            Err(CliError(format!("{path} is not a valid Laya model: {err}")))
        }
    }
}
