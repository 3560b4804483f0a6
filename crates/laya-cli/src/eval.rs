//! `laya eval` (docs/evaluation.md §2): simulated typing with a 5-candidate bar.

use std::io::BufRead;
use std::path::PathBuf;

use laya_runtime::Session;
use laya_text::{evaluate_learning, evaluate_parallel, NgramPredictor, PredictError, SegmentMode, Segmenter};

use crate::predictors::{self, Interpolated, Kind, LearningNgram, ModelPredictor};
use crate::CliError;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: crate::ModelChoice,
    /// Text to type, one line at a time.
    #[arg(long)]
    text: PathBuf,
    /// Lines are gold-segmented: words separated by spaces.
    #[arg(long)]
    segmented: bool,
    /// Only the first N lines.
    #[arg(long)]
    limit: Option<usize>,
    /// Print exactly one JSON object.
    #[arg(long)]
    json: bool,
    /// Which predictor types.
    #[arg(long, value_enum, default_value_t = Kind::Model)]
    predictor: Kind,
    #[command(flatten)]
    completion: crate::predictors::CompletionArgs,
    #[command(flatten)]
    act: crate::predictors::ActivationsArg,
    #[command(flatten)]
    punct: crate::predictors::PunctuationArg,
    /// The n-gram file for --predictor ngram and interpolated.
    #[arg(long)]
    ngram: Option<PathBuf>,
    /// The n-gram's weight w (0..=1): of the word trigram a model file carries (`laya
    /// attach-ngram`; 0 ranks by the network alone), and of --ngram's in `--predictor
    /// interpolated`, `(1 − w)·P_model + w·P_ngram`.
    #[arg(long, default_value_t = laya_runtime::DEFAULT_NGRAM_WEIGHT, value_parser = predictors::ngram_weight)]
    ngram_weight: f32,
    /// How `--predictor interpolated` mixes: `linear`; `within-class` (the network keeps its
    /// mass on each replace count, the n-gram reorders the words inside it); `han-linear`
    /// (linear after a Han character, within-class elsewhere).
    #[arg(long, value_enum, default_value_t = predictors::NgramMix::HanLinear)]
    ngram_mix: predictors::NgramMix,
    /// Drop the n-gram's trigrams seen fewer than N times before typing, keeping its bigram and
    /// unigram levels (what a smaller n-gram would keep; `NgramPredictor::prune_trigrams`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    ngram_min_count: u32,
    /// The words that can be picked, for `--predictor ngram` without a model of that lexicon
    /// (a `laya lexicon` TSV; default: the model's lexicon). Words outside it count as OOV.
    #[arg(long, conflicts_with = "model")]
    lexicon: Option<PathBuf>,
    /// Lines typed at once, each thread with its own predictor (default: every core). The
    /// figures do not depend on it.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    /// Also say where the top-5 misses come from: out of the lexicon, ranked too low among
    /// candidates of their kind, or crowded off the bar by next words / completions (asks the
    /// predictor a second time at i = 0 and 1; about twice the run time). Adds a `breakdown`
    /// object to --json.
    #[arg(long)]
    breakdown: bool,
    /// Learn as the person types (docs/personalisation.md): lines are typed in order, one thread, and each
    /// line is learned after all its words were predicted. The n-gram baseline gets the same
    /// history and mix. A word outside the lexicon is then a hit when offered.
    #[arg(long, conflicts_with = "breakdown")]
    learn: bool,
    #[command(flatten)]
    mix: predictors::MixArgs,
}

pub fn run(args: Args) -> Result<(), CliError> {
    let model = args.model.load()?;
    let lexicon = match &args.lexicon {
        Some(path) => {
            if args.predictor == Kind::Model {
                return Err(CliError("--lexicon is for --predictor ngram: a model predicts over its own lexicon".into()));
            }
            crate::lexicon::read_lexicon(path)?.word_set()
        }
        None => predictors::lexicon_set(&model, laya_format::ignores_case(&model.info().language)),
    };
    let file = std::fs::File::open(&args.text).map_err(|e| CliError(format!("cannot read {}: {e}", args.text.display())))?;
    let total = file.metadata().map(|m| m.len()).unwrap_or(0);
    let lines: Vec<String> = std::io::BufReader::new(file)
        .lines()
        .collect::<Result<_, _>>()
        .map_err(|e| CliError(format!("cannot read {}: {e}", args.text.display())))?;
    let seg = Segmenter::new(if args.segmented { SegmentMode::Segmented } else { SegmentMode::Auto });
    let bar = crate::progress::bytes_bar(total, "typing", args.json);
    let progress = |n: u64| bar.inc(n);
    // A model whose language ignores case has a word in any case; the n-gram's lexicon file
    // is taken as it is.
    let fold = args.lexicon.is_none() && laya_format::ignores_case(&model.info().language);
    let in_lex = |w: &str| predictors::in_lexicon(&lexicon, fold, w);
    let threads = predictors::thread_count(args.threads);
    let mix = args.mix.params()?;
    let session = || {
        let mut session = Session::new(model.clone());
        args.completion.apply(&mut session);
        session.set_act_precision(args.act.activations);
        session.set_punctuation_slot(args.punct.punctuation_slot);
        session.set_mix(mix);
        session.set_ngram_weight(args.ngram_weight);
        session
    };
    if args.learn && args.predictor == Kind::Interpolated {
        return Err(CliError("--predictor interpolated does not learn; leave out --learn".into()));
    }
    let report = if args.learn {
        let mut progress = progress;
        let lines = lines.into_iter();
        match args.predictor {
            Kind::Model => evaluate_learning(&mut ModelPredictor { session: session() }, lines, &seg, &in_lex, args.limit, &mut progress),
            Kind::Ngram => {
                let mut ngram = predictors::load_ngram(args.ngram.as_deref())?;
                ngram.prune_trigrams(args.ngram_min_count);
                let mut p = LearningNgram::new(ngram, session());
                evaluate_learning(&mut p, lines, &seg, &in_lex, args.limit, &mut progress)
            }
            Kind::Interpolated => unreachable!("refused above"),
        }?
    } else {
        match args.predictor {
            Kind::Model => {
                let make = || -> Result<ModelPredictor, PredictError> { Ok(ModelPredictor { session: session() }) };
                evaluate_parallel(threads, &make, lines, &seg, &in_lex, args.limit, &progress, args.breakdown)
            }
            Kind::Ngram => {
                let ngrams = predictors::ngram_factory(args.ngram.as_deref())?;
                let make = || pruned(ngrams()?, args.ngram_min_count);
                evaluate_parallel(threads, &make, lines, &seg, &in_lex, args.limit, &progress, args.breakdown)
            }
            Kind::Interpolated => {
                let ngrams = predictors::ngram_factory(args.ngram.as_deref())?;
                let make = || -> Result<Interpolated, PredictError> {
                    Ok(Interpolated::new(
                        ModelPredictor { session: session() },
                        pruned(ngrams()?, args.ngram_min_count)?,
                        args.ngram_weight,
                        args.ngram_mix,
                    ))
                };
                evaluate_parallel(threads, &make, lines, &seg, &in_lex, args.limit, &progress, args.breakdown)
            }
        }?
    };
    bar.finish_and_clear();
    if report.words == 0 {
        return Err(CliError(format!("{} has no words to type", args.text.display())));
    }
    if args.json {
        outln!("{}", serde_json::to_string(&report)?);
    } else {
        let name = match args.predictor {
            Kind::Model => format!("model {}", model.info().name),
            Kind::Ngram => "n-gram baseline".to_string(),
            Kind::Interpolated => format!("model {} with the n-gram at weight {}", model.info().name, args.ngram_weight),
        };
        outln!(
            "{name} on {} ({} words, {} chars, {} predictions, {:.1} s)",
            args.text.display(),
            report.words,
            report.chars,
            report.predictions,
            report.seconds
        );
        outln!();
        outln!("| ksr | top1_k0 | top5_k0 | top1_k1 | top5_k1 | oov_rate |");
        outln!("|-----|---------|---------|---------|---------|----------|");
        outln!(
            "| {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} |",
            report.ksr,
            report.top1_k0,
            report.top5_k0,
            report.top1_k1,
            report.top5_k1,
            report.oov_rate
        );
        if let Some(b) = &report.breakdown {
            outln!();
            outln!("Where the top-5 misses come from (shares of the same words; oov + top-5 alone + outranked = 1):");
            outln!();
            outln!("| | top-5 | oov | top-5 alone | crowded out | outranked |");
            outln!("|---|---|---|---|---|---|");
            for (name, top5, row) in [("k0 (next word)", report.top5_k0, &b.k0), ("k1 (completion)", report.top5_k1, &b.k1)] {
                outln!("| {name} | {top5:.4} | {:.4} | {:.4} | {:.4} | {:.4} |", row.oov, row.top5_alone, row.crowded_out, row.outranked);
            }
            outln!();
            outln!("top-5 alone: among the five best candidates of that replace count (of the first {}); crowded out: of those, not on the bar.", laya_text::DEEP);
        }
    }
    Ok(())
}

/// `ngram` without its trigrams seen fewer than `min_count` times (`--ngram-min-count`).
fn pruned(mut ngram: NgramPredictor, min_count: u32) -> Result<NgramPredictor, PredictError> {
    ngram.prune_trigrams(min_count);
    Ok(ngram)
}
