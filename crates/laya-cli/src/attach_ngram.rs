//! `laya attach-ngram MODEL NGRAM --out OUT`: stores a word trigram trained over a model's
//! lexicon (`laya ngram --model MODEL --cut lexicon`) in the model file, where every session
//! mixes it into the network's candidates (docs/format.md §8, docs/training.md).

use std::collections::HashMap;
use std::path::PathBuf;

use laya_format::ngram::NgramCounts;
use laya_format::write_model;

use crate::{model_file, predictors, CliError};

#[derive(clap::Args)]
pub struct Args {
    /// The model to extend (an n-gram it already has is replaced).
    model: PathBuf,
    /// The n-gram: JSON from `laya ngram --model MODEL --cut lexicon`.
    ngram: PathBuf,
    /// Where to write the model with the n-gram (may be MODEL itself; written atomically).
    #[arg(long)]
    out: PathBuf,
}

pub fn run(args: Args) -> Result<(), CliError> {
    let bytes = model_file::read(&args.model)?;
    let file = model_file::parse(&args.model, &bytes)?;
    let ngram = predictors::load_ngram(Some(&args.ngram))?;
    let fold = laya_format::ignores_case(&file.meta.provenance.language);
    if !ngram.cuts_with_dictionary() && !fold {
        eprintln!(
            "note: {} cuts Han text with jieba's dictionary, the runtime with the model's lexicon; \
             `laya ngram --model {} --cut lexicon` trains one that reads histories as the runtime cuts them",
            args.ngram.display(),
            args.model.display()
        );
    }
    let model = laya_runtime::Model::from_bytes(bytes.clone())
        .map_err(|e| CliError(format!("{} is not a valid Laya model: {e}", args.model.display())))?;
    let positions = model.search_positions();
    // Where the language ignores case the n-gram counts folded words, and each stands for the
    // first position of its key (the spelling the bar shows).
    let mut ids: HashMap<String, usize> = HashMap::with_capacity(file.meta.words.len());
    for (id, w) in file.meta.words.iter().enumerate() {
        let key = if fold { laya_format::fold_case(w) } else { w.to_string() };
        let at = ids.entry(key).or_insert(id);
        if positions[id] < positions[*at] {
            *at = id;
        }
    }
    let lexicon = file.meta.words.len() as u32;
    // The n-gram numbers its own words; the file numbers the model's by search position.
    let mut map = Vec::with_capacity(ngram.vocab_len() + 2);
    for w in ngram.words() {
        let id = ids.get(w.as_str()).ok_or_else(|| {
            CliError(format!(
                "{w:?} of {} is not in the lexicon of {}: train the n-gram over this model's lexicon (`laya ngram --model {}`)",
                args.ngram.display(),
                args.model.display(),
                args.model.display()
            ))
        })?;
        map.push(positions[*id]);
    }
    map.extend([lexicon, lexicon + 1]);
    let (trigrams, prefix) = ngram.counts();
    let mapped: Vec<[u32; 4]> = trigrams.iter().map(|t| [map[t[0] as usize], map[t[1] as usize], map[t[2] as usize], t[3]]).collect();
    let counts = NgramCounts::from_trigrams(lexicon as usize, &mapped, prefix)?;
    let mut tensors: Vec<_> = model_file::owned_tensors(&file).into_iter().filter(|t| !t.name.starts_with("ngram.")).collect();
    tensors.extend(counts.tensors());
    let out = write_model(&file.meta, &tensors)?;
    model_file::write(&args.out, &out)?;
    outln!(
        "wrote {}: {} trigrams, {} bigrams over {} words; {} bytes (was {})",
        args.out.display(),
        counts.trigram_word.len(),
        counts.bigram_word.len(),
        ngram.vocab_len(),
        out.len(),
        bytes.len()
    );
    if counts.saturated > 0 {
        eprintln!("note: {} counts above 65,535 were stored as 65,535", counts.saturated);
    }
    Ok(())
}
