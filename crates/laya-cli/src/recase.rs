//! `laya recase --lexicon LEXICON IN OUT`: gives the words of a model whose language ignores
//! case the spellings of a lexicon (`laya lexicon --fold-case`), without training again
//! (`laya_format::recase`).

use std::path::PathBuf;

use laya_format::recase::recase_lexicon;
use laya_format::write_model;

use crate::{model_file, CliError};

#[derive(clap::Args)]
pub struct Args {
    /// The lexicon whose spellings the model's words take (TSV: word, score), e.g. one built
    /// again by `laya lexicon --fold-case` with `--case-text`.
    #[arg(long)]
    lexicon: PathBuf,
    /// The model to read (any type; its tensors are copied, rows following their words).
    input: PathBuf,
    /// Where to write the respelt model (may be the input).
    output: PathBuf,
}

pub fn run(args: Args) -> Result<(), CliError> {
    let path = args.input.display().to_string();
    let bytes = model_file::read(&args.input)?;
    let file = model_file::parse(&args.input, &bytes)?;
    let lex_path = args.lexicon.display().to_string();
    let lexicon = crate::lexicon::read_lexicon(&args.lexicon)?;
    let mut meta = file.meta.clone();
    let mut tensors = model_file::owned_tensors(&file);
    let changed = recase_lexicon(&mut meta, &mut tensors, lexicon.words.iter().map(String::as_str))
        .map_err(|e| CliError(format!("{path} with {lex_path}: {e}")))?;
    let out = args.output.display().to_string();
    let out_bytes = write_model(&meta, &tensors)?;
    model_file::write(&args.output, &out_bytes)?;
    outln!("{path} -> {out}");
    let examples: Vec<String> = changed.iter().take(8).map(|r| format!("{} → {}", r.from, r.to)).collect();
    outln!(
        "{} of {} words respelt from {lex_path}{}{}",
        changed.len(),
        meta.words.len(),
        if examples.is_empty() { String::new() } else { format!(": {}", examples.join(", ")) },
        if changed.len() > examples.len() { ", …" } else { "" }
    );
    Ok(())
}
