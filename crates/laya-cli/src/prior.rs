//! `laya prior --dict DICT IN OUT`: stores each lexicon word's frequency in a general-purpose
//! dictionary in the model file (`laya.lexicon.dict_frequencies`), the genre-neutral prior the
//! runtime ranks completions with (docs/format.md §3 step 6, `--completion-prior`).

use std::path::PathBuf;

use laya_format::write_model;

use crate::{model_file, CliError};

#[derive(clap::Args)]
pub struct Args {
    /// A dictionary with frequencies (jieba's dict.txt format: `word freq [tag]` per line);
    /// repeat it to average several (each as shares of its own total, equal weight).
    #[arg(long, required = true)]
    dict: Vec<PathBuf>,
    /// The model to read (any type; its tensors are copied unchanged).
    input: PathBuf,
    /// Where to write the model with the dictionary frequencies (may be the input).
    output: PathBuf,
}

pub fn run(args: Args) -> Result<(), CliError> {
    let path = args.input.display().to_string();
    let bytes = model_file::read(&args.input)?;
    let file = model_file::parse(&args.input, &bytes)?;
    let dict_path = args.dict.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" + ");
    let dict = crate::lexicon::read_dicts(&args.dict)?;
    let mut meta = file.meta.clone();
    // A model whose language ignores case matches its words folded, so `I'm` takes the
    // frequency of `i'm` (wordfreq lists its words in lowercase) and of every other spelling.
    let folded = laya_format::ignores_case(&meta.provenance.language);
    let dict = if folded { crate::lexicon::fold_counts(&dict) } else { dict };
    let lookup = |w: &str| if folded { dict.get(&laya_format::fold_case(w)) } else { dict.get(w) };
    let freqs: Vec<u32> = meta.words.iter().map(|w| lookup(w).map_or(0, |&f| f.min(u32::MAX as u64) as u32)).collect();
    let found = freqs.iter().filter(|&&f| f > 0).count();
    if found == 0 {
        return Err(CliError(format!(
            "none of the {} lexicon words of {path} is in {dict_path} with a frequency above 0; is it the model's language?",
            freqs.len()
        )));
    }
    let replaced = meta.dict_frequencies.is_some();
    meta.dict_frequencies = Some(freqs);
    let tensors = model_file::owned_tensors(&file);
    let out_bytes = write_model(&meta, &tensors)?;
    let out = args.output.display().to_string();
    model_file::write(&args.output, &out_bytes)?;
    outln!("{path} -> {out}");
    outln!(
        "dictionary {dict_path}: {} entries; {found} of {} lexicon words found ({:.1}%){}",
        dict.len(),
        meta.words.len(),
        100.0 * found as f64 / meta.words.len() as f64,
        if replaced { "; replaced the file's previous dictionary frequencies" } else { "" }
    );
    Ok(())
}
