//! `laya ngram`: trains the word n-gram baseline on the same text and lexicon as the model.

use std::collections::{HashMap, HashSet};
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
    /// How Han text is cut into words, in training and in every history the n-gram reads:
    /// `jieba` (its dictionary) or `lexicon` (the most probable cut into the --lexicon's words
    /// under their counts, which a runtime carrying only the lexicon can repeat).
    #[arg(long, value_enum, default_value_t = Cut::Jieba)]
    cut: Cut,
}

/// `--cut`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Cut {
    Jieba,
    Lexicon,
}

pub fn run(args: Args) -> Result<(), CliError> {
    let lexicon = match &args.lexicon {
        Some(p) => Some(crate::lexicon::read_lexicon(p)?),
        None => None,
    };
    let counts: Option<HashMap<&str, u64>> = match (args.cut, &lexicon) {
        (Cut::Jieba, _) => None,
        (Cut::Lexicon, Some(l)) if !args.open_vocabulary && !args.segmented => {
            Some(l.words.iter().map(String::as_str).zip(l.freqs.iter().map(|&n| u64::from(n).max(1))).collect())
        }
        _ => {
            return Err(CliError("--cut lexicon needs --lexicon TSV (its counts weigh the cut), raw text and no --open-vocabulary".into()))
        }
    };
    let vocab: Option<HashSet<String>> = if args.open_vocabulary {
        None
    } else if let Some(l) = &lexicon {
        Some(l.word_set())
    } else {
        Some(crate::predictors::lexicon_set(&crate::load_model(args.model.as_deref())?, false))
    };
    let file = std::fs::File::open(&args.train).map_err(|e| CliError(format!("cannot read {}: {e}", args.train.display())))?;
    let total = file.metadata().map(|m| m.len()).unwrap_or(0);
    let seg = match &counts {
        Some(c) => Segmenter::with_dictionary(c.iter().map(|(&w, &n)| (w, n)))?,
        None => Segmenter::new(if args.segmented { SegmentMode::Segmented } else { SegmentMode::Auto }),
    };
    let bar = crate::progress::bytes_bar(total, "counting", false);
    let lines = std::io::BufReader::new(file).lines().map_while(Result::ok);
    let mut model = NgramPredictor::train(lines, &seg, vocab.as_ref(), &mut |n| bar.inc(n));
    bar.finish_and_clear();
    if let Some(c) = &counts {
        let per_word = model.words().iter().map(|w| c.get(w.as_str()).copied().unwrap_or(1)).collect();
        model.use_dictionary_cut(per_word)?;
    }
    if model.vocab_len() == 0 {
        return Err(CliError(format!("{} has no usable words", args.train.display())));
    }
    let out = std::fs::File::create(&args.out).map_err(|e| CliError(format!("cannot write {}: {e}", args.out.display())))?;
    model.save(std::io::BufWriter::new(out))?;
    outln!("wrote {}: {} words, {} trigrams", args.out.display(), model.vocab_len(), model.trigram_len());
    Ok(())
}
