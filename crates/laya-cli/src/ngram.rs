//! `laya ngram`: trains the word n-gram baseline on the same text and lexicon as the model.

use std::collections::HashSet;
use std::io::BufRead;
use std::path::PathBuf;

use laya_text::{NgramPredictor, SegmentMode, Segmenter};

use crate::CliError;

#[derive(clap::Args)]
pub struct Args {
    /// Training text, one sentence per line.
    #[arg(long)]
    train: PathBuf,
    /// Lines are gold-segmented (words separated by spaces).
    #[arg(long)]
    segmented: bool,
    /// Restrict the vocabulary to this model's lexicon (default: the embedded model's), so the
    /// baseline ranks the same words as the model.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Restrict the vocabulary to this lexicon file (TSV from `laya lexicon`) instead of a model's.
    #[arg(long)]
    lexicon: Option<PathBuf>,
    /// Keep every word of the training text instead of the model's lexicon.
    #[arg(long)]
    open_vocabulary: bool,
    /// Where to write the n-gram file (JSON, docs/data.md).
    #[arg(long)]
    out: PathBuf,
}

pub fn run(args: Args) -> Result<(), CliError> {
    let vocab: Option<HashSet<String>> = if args.open_vocabulary {
        None
    } else if let Some(p) = &args.lexicon {
        let f = std::fs::File::open(p).map_err(|e| CliError(format!("cannot read {}: {e}", p.display())))?;
        Some(laya_text::Lexicon::read_tsv(std::io::BufReader::new(f))?.word_set())
    } else {
        Some(crate::predictors::lexicon_set(&crate::load_model(args.model.as_deref())?, false))
    };
    let file = std::fs::File::open(&args.train).map_err(|e| CliError(format!("cannot read {}: {e}", args.train.display())))?;
    let total = file.metadata().map(|m| m.len()).unwrap_or(0);
    let seg = Segmenter::new(if args.segmented { SegmentMode::Segmented } else { SegmentMode::Auto });
    let bar = crate::progress::bytes_bar(total, "counting", false);
    let lines = std::io::BufReader::new(file).lines().map_while(Result::ok);
    let model = NgramPredictor::train(lines, &seg, vocab.as_ref(), &mut |n| bar.inc(n));
    bar.finish_and_clear();
    if model.vocab_len() == 0 {
        return Err(CliError(format!("{} has no usable words", args.train.display())));
    }
    let out = std::fs::File::create(&args.out).map_err(|e| CliError(format!("cannot write {}: {e}", args.out.display())))?;
    model.save(std::io::BufWriter::new(out))?;
    outln!("wrote {}: {} words, {} trigrams", args.out.display(), model.vocab_len(), model.trigram_len());
    Ok(())
}
