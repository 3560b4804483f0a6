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
    /// baseline ranks the same words as the model. For a model whose language ignores case
    /// (English) the text and the words are folded to lower case, as that model matches them.
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
    /// under their counts, or without --lexicon the model's words under the counts it cuts
    /// with: what the runtime repeats for an n-gram stored by `laya attach-ngram`).
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
    if args.cut == Cut::Lexicon && (args.open_vocabulary || args.segmented) {
        return Err(CliError("--cut lexicon needs raw text and the model's or --lexicon's words (no --open-vocabulary)".into()));
    }
    // The words and counts that cut Han text with --cut lexicon: the --lexicon's, else the
    // model's own (what the runtime cuts a history with, for `laya attach-ngram`).
    let model = match (&lexicon, args.open_vocabulary) {
        (None, false) => Some(crate::load_model(args.model.as_deref())?),
        _ => None,
    };
    let counts: Option<HashMap<String, u64>> = match (args.cut, &lexicon, &model) {
        (Cut::Jieba, _, _) => None,
        (Cut::Lexicon, Some(l), _) => Some(l.words.iter().cloned().zip(l.freqs.iter().map(|&n| u64::from(n).max(1))).collect()),
        (Cut::Lexicon, None, Some(m)) => {
            Some((0..m.lexicon_len()).filter_map(|id| Some((m.word(id)?.to_string(), u64::from(m.cut_count(id)?).max(1)))).collect())
        }
        (Cut::Lexicon, None, None) => return Err(CliError("--cut lexicon needs the model's or --lexicon's words".into())),
    };
    // A model whose language ignores case (`laya_format::ignores_case`) predicts each word in
    // whatever case is typed: its n-gram counts the folded words (`The` and `the` alike).
    let fold = model.as_ref().is_some_and(|m| laya_format::ignores_case(&m.info().language));
    let vocab: Option<HashSet<String>> = if args.open_vocabulary {
        None
    } else if let Some(l) = &lexicon {
        Some(l.word_set())
    } else {
        model.as_ref().map(|m| crate::predictors::lexicon_set(m, fold))
    };
    let file = std::fs::File::open(&args.train).map_err(|e| CliError(format!("cannot read {}: {e}", args.train.display())))?;
    let total = file.metadata().map(|m| m.len()).unwrap_or(0);
    let seg = match &counts {
        Some(c) => Segmenter::with_dictionary(c.iter().map(|(w, &n)| (w.as_str(), n)))?,
        None => Segmenter::new(if args.segmented { SegmentMode::Segmented } else { SegmentMode::Auto }),
    };
    let bar = crate::progress::bytes_bar(total, "counting", false);
    let lines = std::io::BufReader::new(file).lines().map_while(Result::ok).map(|l| if fold { laya_format::fold_case(&l) } else { l });
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
