//! `laya prune`: a float model in, a model with narrower FFN blocks out (4×4 block structured
//! pruning, optional fine-tuning; docs/pruning.md).

use std::path::PathBuf;

use laya_train::{
    float_precision, prune, train_from, widths_for_keep, ExportInfo, LayaNet, Precision, PruneReport, RunOptions, Saliency, TrainConfig,
};

use crate::train::PrecisionArg;
use crate::train_io::{read_log, BarHooks};
use crate::CliError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SaliencyArg {
    /// Squared weights of each group's 4×4 blocks, up and down normalised alike.
    Magnitude,
    /// First-order Taylor |w·∂L/∂w| over --taylor-batches batches of --events.
    Taylor,
}

#[derive(clap::Args)]
pub struct Args {
    /// The float model to prune (F32, F16 or BF16; prune before quantizing).
    #[arg(long)]
    model: PathBuf,
    /// Where to write the pruned model.
    #[arg(long)]
    out: PathBuf,
    /// Target FFN width: one for every block, or a comma list with one per block (multiples of 32).
    #[arg(long, conflicts_with = "keep", required_unless_present = "keep")]
    ffn: Option<String>,
    /// Keep this fraction of every block's FFN units (rounded down to a multiple of 32).
    #[arg(long)]
    keep: Option<f64>,
    /// How to rank groups of 4 hidden units.
    #[arg(long, value_enum, default_value_t = SaliencyArg::Magnitude)]
    saliency: SaliencyArg,
    /// Batches of --events the Taylor saliency accumulates over.
    #[arg(long, default_value_t = 32)]
    taylor_batches: usize,
    /// Training keyboard log: fine-tune after pruning (and feed --saliency taylor).
    #[arg(long)]
    events: Option<PathBuf>,
    /// Validation keyboard log (early stopping and the per-epoch metrics).
    #[arg(long)]
    valid_events: Option<PathBuf>,
    /// Use at most this many training events (an even stride through the log).
    #[arg(long)]
    max_events: Option<usize>,
    /// Use at most this many validation events.
    #[arg(long, default_value_t = 20_000)]
    max_valid_events: usize,
    /// Stop at the first malformed log line instead of skipping it.
    #[arg(long)]
    strict: bool,
    /// Fine-tuning epochs (0: prune only, even with --events).
    #[arg(long, default_value_t = 1)]
    epochs: usize,
    #[arg(long, default_value_t = 128)]
    batch_size: usize,
    /// Peak fine-tuning learning rate (AdamW, linear warm-up, cosine decay).
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    #[arg(long, default_value_t = 50)]
    warmup_steps: usize,
    /// Epochs without a better validation loss before stopping.
    #[arg(long, default_value_t = 2)]
    patience: usize,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Threads for the fine-tuning steps (default: RAYON_NUM_THREADS, else the physical cores).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    /// Precision of the output (default: the input's).
    #[arg(long, value_enum)]
    precision: Option<PrecisionArg>,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

fn parse_widths(s: &str) -> Result<Vec<usize>, CliError> {
    s.split(',')
        .map(|w| {
            let w = w.trim();
            w.parse::<usize>()
                .map_err(|_| CliError(format!("--ffn {s:?}: {w:?} is not a width; give a number or a comma list like 192,128")))
        })
        .collect()
}

fn fmt_int(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub fn run(args: Args) -> Result<(), CliError> {
    crate::train::set_training_threads(args.threads);
    let path = args.model.display().to_string();
    let bytes = crate::model_file::read(&args.model)?;
    let file = crate::model_file::parse(&args.model, &bytes)?;
    let input_precision = float_precision(&file).map_err(|e| CliError(format!("{path}: {e}")))?;
    let net = LayaNet::from_laya(&file).map_err(|e| CliError(format!("{path}: {e}")))?;
    let widths = match (&args.ffn, args.keep) {
        (Some(s), _) => parse_widths(s)?,
        (None, Some(k)) => widths_for_keep(&net.config().ffn, k)?,
        (None, None) => return Err(CliError("give --ffn WIDTH[,WIDTH…] or --keep FRACTION".into())),
    };
    if args.saliency == SaliencyArg::Taylor && args.events.is_none() {
        return Err(CliError("--saliency taylor needs --events (the batches its gradients come from)".into()));
    }
    let events = match &args.events {
        Some(p) => {
            let ev = read_log(p, args.strict, "training log")?;
            match args.max_events {
                Some(max) => laya_train::even_stride(ev, max),
                None => ev,
            }
        }
        None => Vec::new(),
    };
    let valid = match &args.valid_events {
        Some(p) => laya_train::even_stride(read_log(p, args.strict, "validation log")?, args.max_valid_events),
        None => Vec::new(),
    };
    let tc = TrainConfig {
        batch_size: args.batch_size,
        epochs: args.epochs,
        lr: args.lr,
        warmup_steps: args.warmup_steps,
        seed: args.seed,
        patience: args.patience,
        log_every: 20,
        fold_case: laya_format::ignores_case(&file.meta.provenance.language),
        ..TrainConfig::default()
    };
    let saliency = match args.saliency {
        SaliencyArg::Magnitude => Saliency::Magnitude,
        SaliencyArg::Taylor => Saliency::Taylor { events: &events, train: &tc, batches: args.taylor_batches },
    };
    let (small, report) = prune(&net, &widths, saliency)?;

    let fine_tuned = !events.is_empty() && args.epochs > 0;
    let (small, summary) = if fine_tuned {
        if !args.json {
            eprintln!("fine-tuning on {} events, validating on {} events", events.len(), valid.len());
        }
        let mut hooks = BarHooks::start();
        if args.json {
            hooks.bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        }
        let (bar, stop) = (hooks.bar.clone(), hooks.stop.clone());
        let outcome = train_from(small, tc, &events, &valid, &RunOptions::default(), &mut hooks)?;
        bar.finish_and_clear();
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(CliError("interrupted during fine-tuning; no model written".into()));
        }
        let last = outcome.state.epochs.last().copied();
        (outcome.net, Some((laya_train::summary_table(&outcome.state), last)))
    } else {
        (small, None)
    };

    let precision = args.precision.map_or(input_precision, Precision::from);
    let m = &file.meta;
    let widths_now: Vec<String> = small.config().ffn.iter().map(|w| w.to_string()).collect();
    let info = ExportInfo {
        name: m.name.clone(),
        language: m.provenance.language.clone(),
        training_data: format!(
            "{}; FFN pruned to {} by laya prune ({} saliency{})",
            m.provenance.training_data,
            widths_now.join(","),
            match args.saliency {
                SaliencyArg::Magnitude => "magnitude",
                SaliencyArg::Taylor => "taylor",
            },
            if fine_tuned { format!(", fine-tuned on {} events", events.len()) } else { String::new() }
        ),
        created: laya_train::today_utc(),
    };
    // Pruning keeps the lexicon, so the completion prior's frequencies carry over whole.
    let (out_bytes, _) = small.export_carrying(&info, precision, Some(m))?;
    laya_train::save_model(&args.out, &out_bytes)?;
    let out = args.out.display().to_string();

    if args.json {
        let blocks: Vec<serde_json::Value> = report
            .blocks
            .iter()
            .map(|b| {
                serde_json::json!({
                    "block": b.block, "ffn_before": b.old_width, "ffn_after": b.new_width,
                    "kept_saliency": b.kept_saliency, "params_before": b.params_before, "params_after": b.params_after,
                })
            })
            .collect();
        let valid = summary.as_ref().and_then(|s| s.1).map(
            |e| serde_json::json!({ "loss": e.valid.loss.total, "top1": e.valid.top1, "top5": e.valid.top5, "events": e.valid.events }),
        );
        let v = serde_json::json!({
            "input": path, "output": out,
            "precision": match precision { Precision::F32 => "F32", Precision::F16 => "F16" },
            "blocks": blocks,
            "params_before": report.params_before, "params_after": report.params_after,
            "bytes_before": bytes.len(), "bytes_after": out_bytes.len(),
            "fine_tuned_events": if fine_tuned { events.len() } else { 0 },
            "valid_after_fine_tuning": valid,
        });
        outln!("{v}");
        return Ok(());
    }
    if let Some((table, _)) = &summary {
        outln!("{table}");
    }
    print_table(&report, &path, &out, bytes.len(), out_bytes.len())
}

fn print_table(r: &PruneReport, input: &str, output: &str, before: usize, after: usize) -> Result<(), CliError> {
    outln!("{input} -> {output}");
    outln!();
    outln!("| block | FFN width | FFN parameters | kept saliency |");
    outln!("|-------|-----------|----------------|---------------|");
    for b in &r.blocks {
        outln!(
            "| {} | {} → {} | {} → {} | {:.1}% |",
            b.block,
            b.old_width,
            b.new_width,
            fmt_int(b.params_before),
            fmt_int(b.params_after),
            100.0 * b.kept_saliency
        );
    }
    outln!("| all | | {} → {} (whole model) | |", fmt_int(r.params_before), fmt_int(r.params_after));
    outln!();
    outln!("file size {} → {} bytes ({:.1}% of the input)", fmt_int(before), fmt_int(after), 100.0 * after as f64 / before.max(1) as f64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_parse_and_thousands_group() {
        assert_eq!(parse_widths("192").ok().unwrap(), vec![192]);
        assert_eq!(parse_widths("192, 128").ok().unwrap(), vec![192, 128]);
        assert!(parse_widths("192,,128").is_err());
        assert!(parse_widths("-32").is_err());
        assert_eq!(fmt_int(1234567), "1,234,567");
        assert_eq!(fmt_int(999), "999");
        assert_eq!(fmt_int(0), "0");
    }
}
