//! `laya lexicon`: chooses the N most useful words from corpus and dictionary counts and
//! reports token coverage.

use std::collections::HashSet;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use laya_text::{
    build_lexicon, count_inner_words, count_words, coverage, merge_dicts, read_dict, Counts, LexiconOptions, SegmentMode, Segmenter,
};

use crate::CliError;

#[derive(clap::Args)]
pub struct Args {
    /// Training text, one sentence per line.
    #[arg(long)]
    train: PathBuf,
    /// The training text is gold-segmented (words separated by spaces).
    #[arg(long)]
    segmented: bool,
    /// A dictionary with frequencies (jieba's dict.txt format: `word freq [tag]`), used as a
    /// prior; repeat it to average several (each as shares of its own total, equal weight).
    #[arg(long)]
    dict: Vec<PathBuf>,
    /// Weight of the dictionary prior (0 ignores it).
    #[arg(long, default_value_t = 0.1)]
    dict_weight: f64,
    /// Number of words (512 … 50,000).
    #[arg(long, default_value_t = 20_000)]
    size: usize,
    /// Count the forms of a word that differ only in case as one word, kept in its most
    /// frequent form inside sentences (`the`, `I`, `Monday`): for a model of a language that ignores case (one
    /// with spaces between words, such as `en`), whose runtime matches typed text to the
    /// lexicon in any case and shows candidates in the typed case. Coverage then ignores case.
    #[arg(long)]
    fold_case: bool,
    /// With `--fold-case`: edited text (books, press; repeat for several files) that may store
    /// a word in lowercase whose usual form in the training text has capitals (`states`
    /// beside the news's `United States`): when it writes the word in lowercase at least
    /// `--lowercase-share` times as often as in its most frequent form. Edited text writes
    /// names with their capital, so names stay capitalised even where chat types them in
    /// lowercase; a typist who wants the capital types it and gets it.
    #[arg(long, requires = "fold_case")]
    case_text: Vec<PathBuf>,
    /// See `--case-text` (a number from 0 to 1).
    #[arg(long, default_value_t = laya_text::LOWERCASE_SHARE, value_parser = share)]
    lowercase_share: f64,
    /// Also report coverage on these texts (raw text, segmented by Laya's segmenter).
    #[arg(long)]
    valid: Vec<PathBuf>,
    /// Where to write the lexicon (TSV: word, score).
    #[arg(long)]
    out: PathBuf,
}

/// A lexicon TSV (`laya lexicon --out`: word, score), with the same messages for every command
/// that takes one.
pub(crate) fn read_lexicon(path: &std::path::Path) -> Result<laya_text::Lexicon, CliError> {
    let f = std::fs::File::open(path).map_err(|e| CliError(format!("cannot read {}: {e}", path.display())))?;
    laya_text::Lexicon::read_tsv(std::io::BufReader::new(f)).map_err(|e| CliError(format!("{}: {e}", path.display())))
}

/// The dictionaries of `--dict`, read and merged (`laya_text::merge_dicts`); none gives an
/// empty map, one is returned as it is.
pub(crate) fn read_dicts(paths: &[PathBuf]) -> Result<Counts, CliError> {
    let mut dicts = Vec::with_capacity(paths.len());
    for p in paths {
        let f = std::fs::File::open(p).map_err(|e| CliError(format!("cannot read {}: {e}", p.display())))?;
        let d = read_dict(BufReader::new(f)).map_err(|e| CliError(format!("{}: {e}", p.display())))?;
        if d.is_empty() {
            return Err(CliError(format!("{} has no entries; expected lines of `word freq [tag]`", p.display())));
        }
        dicts.push(d);
    }
    Ok(if dicts.len() == 1 { dicts.pop().unwrap_or_default() } else { merge_dicts(&dicts) })
}

fn count(path: &Path, seg: &Segmenter) -> Result<Counts, CliError> {
    let f = std::fs::File::open(path).map_err(|e| CliError(format!("cannot read {}: {e}", path.display())))?;
    let mut c = Counts::new();
    count_words(BufReader::new(f), seg, &mut c, &mut |_| {})?;
    Ok(c)
}

/// A share in 0 ..= 1.
fn share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("expected a number from 0 to 1, got {s:?}")),
    }
}

/// `counts` with the forms that fold alike ([`laya_format::fold_case`]) counted as one.
pub(crate) fn fold_counts(counts: &Counts) -> Counts {
    let mut out = Counts::new();
    for (w, &c) in counts {
        *out.entry(laya_format::fold_case(w)).or_insert(0) += c;
    }
    out
}

pub fn run(args: Args) -> Result<(), CliError> {
    if !(1..=1_000_000).contains(&args.size) {
        return Err(CliError(format!("--size {} is out of range (1 … 1,000,000)", args.size)));
    }
    let gold = Segmenter::new(if args.segmented { SegmentMode::Segmented } else { SegmentMode::Auto });
    let corpus = count(&args.train, &gold)?;
    if corpus.is_empty() {
        return Err(CliError(format!("{} has no usable words", args.train.display())));
    }
    let dict = read_dicts(&args.dict)?;
    let fold_case = match args.fold_case {
        true => {
            let f = std::fs::File::open(&args.train).map_err(|e| CliError(format!("cannot read {}: {e}", args.train.display())))?;
            let mut inner = Counts::new();
            count_inner_words(BufReader::new(f), &gold, &mut inner)?;
            Some(inner)
        }
        false => None,
    };
    let mut edited_case = None;
    for p in &args.case_text {
        let f = std::fs::File::open(p).map_err(|e| CliError(format!("cannot read {}: {e}", p.display())))?;
        count_inner_words(BufReader::new(f), &Segmenter::new(SegmentMode::Auto), edited_case.get_or_insert_with(Counts::new))?;
    }
    let opts =
        LexiconOptions { size: args.size, dict_weight: args.dict_weight, fold_case, edited_case, lowercase_share: args.lowercase_share };
    let lex = build_lexicon(&corpus, &dict, &opts);
    let out = std::fs::File::create(&args.out).map_err(|e| CliError(format!("cannot write {}: {e}", args.out.display())))?;
    lex.write_tsv(std::io::BufWriter::new(out))?;
    let fold = |c: Counts| if args.fold_case { fold_counts(&c) } else { c };
    let set: HashSet<String> = fold(lex.words.iter().map(|w| (w.clone(), 1)).collect()).into_keys().collect();
    outln!("wrote {}: {} words", args.out.display(), lex.len());
    outln!();
    outln!("| text | tokens | coverage |");
    outln!("|------|--------|----------|");
    let c = coverage(&set, &fold(corpus));
    outln!("| {} (train) | {} | {:.2}% |", args.train.display(), c.tokens, 100.0 * c.rate);
    let auto = Segmenter::new(SegmentMode::Auto);
    for v in &args.valid {
        let c = coverage(&set, &fold(count(v, &auto)?));
        outln!("| {} | {} | {:.2}% |", v.display(), c.tokens, 100.0 * c.rate);
    }
    Ok(())
}
