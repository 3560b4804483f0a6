//! `laya simulate`: keyboard logs (docs/logs.md) from plain or segmented text — an event at
//! every typed prefix of every word, the shown candidates from the n-gram baseline, the typed
//! word as the click.

use std::io::{BufRead, BufWriter, Write};
use std::path::PathBuf;

use laya_text::{simulate_events_parallel, write_event, SegmentMode, Segmenter};

use crate::CliError;

#[derive(clap::Args)]
pub struct Args {
    /// Text to simulate, one line at a time.
    #[arg(long)]
    text: PathBuf,
    /// Lines are gold-segmented (words separated by spaces).
    #[arg(long)]
    segmented: bool,
    /// The baseline ranker that "showed" candidates (an n-gram file from `laya ngram`).
    #[arg(long)]
    ngram: PathBuf,
    /// Candidates shown per event.
    #[arg(long, default_value_t = 5)]
    shown: usize,
    /// Output keyboard log (JSON lines).
    #[arg(long)]
    out: PathBuf,
    /// Lines simulated at once, each thread with its own copy of the ranker (default: every
    /// core). The log is the same for any value.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
}

pub fn run(args: Args) -> Result<(), CliError> {
    let make = crate::predictors::ngram_factory(Some(&args.ngram))?;
    let file = std::fs::File::open(&args.text).map_err(|e| CliError(format!("cannot read {}: {e}", args.text.display())))?;
    let total = file.metadata().map(|m| m.len()).unwrap_or(0);
    let lines: Vec<String> = std::io::BufReader::new(file)
        .lines()
        .collect::<Result<_, _>>()
        .map_err(|e| CliError(format!("cannot read {}: {e}", args.text.display())))?;
    let seg = Segmenter::new(if args.segmented { SegmentMode::Segmented } else { SegmentMode::Auto });
    let out = std::fs::File::create(&args.out).map_err(|e| CliError(format!("cannot write {}: {e}", args.out.display())))?;
    let mut out = BufWriter::new(out);
    let bar = crate::progress::bytes_bar(total, "typing", false);
    let threads = crate::predictors::thread_count(args.threads);
    let stats = simulate_events_parallel(threads, &make, lines, &seg, args.shown, &mut |e| write_event(&mut out, &e), &|n| bar.inc(n))?;
    out.flush()?;
    bar.finish_and_clear();
    if stats.events == 0 {
        return Err(CliError(format!("{} has no words to simulate", args.text.display())));
    }
    outln!(
        "wrote {}: {} events from {} words on {} lines ({} with the typed word appended because the baseline did not show it)",
        args.out.display(),
        stats.events,
        stats.words,
        stats.lines,
        stats.appended
    );
    Ok(())
}
