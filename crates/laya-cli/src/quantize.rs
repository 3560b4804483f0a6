//! `laya quantize IN OUT`: a float model in, a quantised one out (docs/quantization.md).

use std::path::PathBuf;

use laya_format::quantize::{quantize_model, ErrorStats, QuantizeOptions};
use laya_format::{sort_lexicon, write_model, GgmlType};

use crate::{model_file, CliError};

/// Types the embedding may take.
#[derive(Clone, Copy, clap::ValueEnum)]
enum EmbType {
    #[value(name = "q4_1")]
    Q4_1,
    #[value(name = "q8_0")]
    Q8_0,
    F16,
    F32,
}

/// Types the block matrices and the word head may take.
#[derive(Clone, Copy, clap::ValueEnum)]
enum MatType {
    #[value(name = "q8_0")]
    Q8_0,
    #[value(name = "q4_0")]
    Q4_0,
    #[value(name = "q4_1")]
    Q4_1,
    F16,
    Bf16,
    F32,
}

impl EmbType {
    fn ggml(self) -> GgmlType {
        match self {
            EmbType::Q4_1 => GgmlType::Q4_1,
            EmbType::Q8_0 => GgmlType::Q8_0,
            EmbType::F16 => GgmlType::F16,
            EmbType::F32 => GgmlType::F32,
        }
    }
}

impl MatType {
    fn ggml(self) -> GgmlType {
        match self {
            MatType::Q8_0 => GgmlType::Q8_0,
            MatType::Q4_0 => GgmlType::Q4_0,
            MatType::Q4_1 => GgmlType::Q4_1,
            MatType::F16 => GgmlType::F16,
            MatType::Bf16 => GgmlType::BF16,
            MatType::F32 => GgmlType::F32,
        }
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// The float model (F32, F16 or BF16 tensors).
    input: PathBuf,
    /// Where to write the quantised model.
    output: PathBuf,
    /// Type of the embedding table; a quantised one gets the error-compensation bias.
    #[arg(long, value_enum, default_value = "q4_1")]
    embedding: EmbType,
    /// Type of every block matrix (attention q/k/v/output, FFN up/down).
    #[arg(long, value_enum, default_value = "q8_0")]
    linear: MatType,
    /// Type of the word head (output.weight).
    #[arg(long, value_enum, default_value = "q8_0")]
    head: MatType,
    /// Leave out token_embd_comp.weight (for measuring what it buys).
    #[arg(long)]
    no_compensation: bool,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

fn stats_json(s: Option<ErrorStats>) -> serde_json::Value {
    match s {
        Some(s) => serde_json::json!({ "rmse": s.rmse, "max_abs": s.max_abs }),
        None => serde_json::Value::Null,
    }
}

pub fn run(args: Args) -> Result<(), CliError> {
    let path = args.input.display().to_string();
    let bytes = model_file::read(&args.input)?;
    let file = model_file::parse(&args.input, &bytes)?;
    let opts = QuantizeOptions {
        embedding: args.embedding.ggml(),
        linear: args.linear.ggml(),
        head: args.head.ggml(),
        compensation: !args.no_compensation,
    };
    let mut q = quantize_model(&file, &opts).map_err(|e| CliError(format!("{path}: {e}")))?;
    // Word ids in byte order, so the output loads without sorting its lexicon.
    sort_lexicon(&mut q.meta, &mut q.tensors)?;
    let out_bytes = write_model(&q.meta, &q.tensors)?;
    let out = args.output.display().to_string();
    model_file::write(&args.output, &out_bytes)?;

    let e = q.embedding;
    if args.json {
        let tensors: Vec<serde_json::Value> = q
            .tensors
            .iter()
            .map(|t| serde_json::json!({ "name": t.name, "type": t.ty.name(), "ne": t.ne, "bytes": t.data.len() }))
            .collect();
        let report = serde_json::json!({
            "input": path,
            "output": out,
            "bytes_before": bytes.len(),
            "bytes_after": out_bytes.len(),
            "ratio": bytes.len() as f64 / out_bytes.len() as f64,
            "embedding": {
                "type": e.ty.name(),
                "without_compensation": stats_json(Some(e.without_comp)),
                "with_compensation": stats_json(e.with_comp),
            },
            "tensors": tensors,
        });
        outln!("{report}");
        return Ok(());
    }
    outln!("{path} -> {out}");
    outln!("file size        {} -> {} bytes ({:.2}x smaller)", bytes.len(), out_bytes.len(), bytes.len() as f64 / out_bytes.len() as f64);
    outln!();
    outln!("| tensor | type | ne | bytes |");
    outln!("|--------|------|----|-------|");
    for t in &q.tensors {
        outln!("| {} | {} | {:?} | {} |", t.name, t.ty.name(), t.ne, t.data.len());
    }
    outln!();
    outln!("embedding reconstruction error over the whole table ({}):", e.ty.name());
    outln!("| compensation | RMSE | max abs error |");
    outln!("|--------------|------|---------------|");
    outln!("| without | {:.6e} | {:.6e} |", e.without_comp.rmse, e.without_comp.max_abs);
    match e.with_comp {
        Some(w) => outln!("| with | {:.6e} | {:.6e} |", w.rmse, w.max_abs),
        None => outln!("| with | (none written) | |"),
    }
    Ok(())
}
