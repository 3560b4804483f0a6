//! `laya`: the command line of the Laya typing decision engine.
//!
//! Every subcommand prints one clear line and exits non-zero on a user error; no panics and
//! no backtraces for mistakes like a missing file or a corrupt model.

/// The system allocator, counted for `laya bench`.
static ALLOCATOR: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

/// `ALLOCATOR`; in a build with the training commands, until a command that allocates heavily
/// switches to mimalloc (`heap.rs`).
#[cfg(feature = "train")]
#[global_allocator]
static HEAP: heap::Heap = heap::Heap;
#[cfg(not(feature = "train"))]
#[global_allocator]
static HEAP: &stats_alloc::StatsAlloc<std::alloc::System> = ALLOCATOR;

/// `println!` that returns from the enclosing function with a [`CliError`] when stdout fails
/// instead of panicking, so `laya inspect --words m.laya | head` ends quietly.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*).map_err($crate::stdout_error)?
    }};
}

/// `print!` with the same error handling as [`outln!`].
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*).map_err($crate::stdout_error)?
    }};
}

mod attach_ngram;
mod bench;
mod default_model;
mod deferred;
mod eval;
#[cfg(feature = "train")]
mod gpus;
#[cfg(feature = "train")]
mod heap;
mod inspect;
mod install;
mod lexicon;
mod model_file;
mod ngram;
mod predict;
mod predictors;
mod prior;
mod progress;
#[cfg(feature = "train")]
mod prune;
mod quantize;
mod recase;
mod serve;
mod simulate;
#[cfg(feature = "train")]
mod train;
#[cfg(feature = "train")]
mod train_io;
mod user;

use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use deferred::Deferred;
use laya_runtime::Model;

#[derive(Parser)]
#[command(name = "laya", version, about = "On-device typing decision engine: which words to show next")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Predict candidates for a context (a table), or for JSON lines on stdin (--jsonl).
    Predict(Deferred<predict::Args>),
    /// Show a model file: hyper-parameters, tensors, lexicon, checksum verdict.
    Inspect(Deferred<inspect::Args>),
    /// Time single predictions: p50/p99, cold start, allocations, per-stage breakdown.
    Bench(Deferred<bench::Args>),
    /// Simulate typing a text file with a 5-candidate bar: KSR and top-k hit rates (docs/evaluation.md §2).
    /// The model's lexicon also defines out-of-vocabulary.
    Eval(Deferred<eval::Args>),
    /// Choose a lexicon from corpus and dictionary counts; report coverage.
    Lexicon(Deferred<lexicon::Args>),
    /// Train the word n-gram baseline on a text file.
    Ngram(Deferred<ngram::Args>),
    /// Store a word trigram in a model file: sessions mix it into the network's candidates.
    AttachNgram(Deferred<attach_ngram::Args>),
    /// Turn text into simulated keyboard logs (docs/logs.md).
    Simulate(Deferred<simulate::Args>),
    /// Train a model from keyboard logs (click-weighted), with checkpoints, resume and a loss curve.
    #[cfg(feature = "train")]
    Train(Deferred<Box<train::Args>>),
    /// Validate a model file and install it atomically into a directory (temp, fsync, rename).
    Install(Deferred<install::Args>),
    /// Quantise a float model: INT4 embedding with error compensation, INT8 linears.
    Quantize(Deferred<quantize::Args>),
    /// Prune FFN blocks in whole 4×4 blocks to narrower widths, optionally fine-tuning after.
    #[cfg(feature = "train")]
    Prune(Deferred<prune::Args>),
    /// Store each lexicon word's dictionary frequency in a model: the completion prior.
    Prior(Deferred<prior::Args>),
    /// Give a case-ignoring model's words the spellings of a lexicon (`States` → `states`), without training.
    Recase(Deferred<recase::Args>),
    /// A local JSON service and a typing page on http://127.0.0.1:8757 (docs/serve.md). A
    /// --model file is reloaded on SIGHUP and when it is replaced (`laya install --into` its
    /// directory).
    Serve(Deferred<serve::Args>),
    /// Look into, edit and export a user file: the learned history and the blocklist.
    User(Deferred<user::Args>),
}

/// A user-facing error: one line, exit code 1 (2 for usage errors, which clap handles).
pub struct CliError(pub String);

impl<E: std::fmt::Display> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError(e.to_string())
    }
}

/// The message of the error a write to a closed stdout turns into; `main` exits quietly on it,
/// as Unix tools do when the reader of their output has gone (`| head`).
const STDOUT_CLOSED: &str = "stdout was closed by its reader";

/// The [`CliError`] of a failed write to stdout.
pub fn stdout_error(e: std::io::Error) -> CliError {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        CliError(STDOUT_CLOSED.into())
    } else {
        CliError(format!("writing stdout: {e}"))
    }
}

/// The model named by `--model`, or the Chinese one embedded in this binary.
pub fn load_model(path: Option<&std::path::Path>) -> Result<Arc<Model>, CliError> {
    load_model_for(path, default_model::Lang::Zh)
}

/// The model named by `--model`, or the one of `lang` embedded in this binary.
pub fn load_model_for(path: Option<&std::path::Path>, lang: default_model::Lang) -> Result<Arc<Model>, CliError> {
    match path {
        Some(p) => Ok(Model::load(p)?),
        None => {
            let m = embedded(lang)?;
            Ok(m.load(laya_kernels::Kernels::detect())
                .map_err(|e| CliError(format!("the embedded {} model is invalid: {e}", lang.name())))?)
        }
    }
}

/// The model of `lang` embedded in this binary (validated when it was built).
pub fn embedded(lang: default_model::Lang) -> Result<default_model::Embedded, CliError> {
    default_model::get(lang).ok_or_else(|| {
        CliError(format!(
            "no {} model is embedded in this build; pass --model FILE \
             (models are made with `laya train`, see docs/training.md)",
            lang.name()
        ))
    })
}

/// `--model` and `--lang`: which model a command runs.
#[derive(clap::Args, Clone, Debug)]
pub struct ModelChoice {
    /// Model file (default: the model of --lang embedded in this binary).
    #[arg(long)]
    pub model: Option<std::path::PathBuf>,
    /// Which embedded model to use when no --model is given: zh (Chinese, the default) or en
    /// (English).
    #[arg(long, value_enum, default_value_t, conflicts_with = "model")]
    pub lang: default_model::Lang,
}

impl ModelChoice {
    /// Loads the chosen model.
    pub fn load(&self) -> Result<Arc<Model>, CliError> {
        load_model_for(self.model.as_deref(), self.lang)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Commands that read a corpus or train allocate heavily; one that answers keystrokes starts lean.
    #[cfg(feature = "train")]
    if matches!(
        cli.command,
        Command::Train(_) | Command::Prune(_) | Command::Eval(_) | Command::Lexicon(_) | Command::Ngram(_) | Command::Simulate(_)
    ) {
        heap::use_mimalloc();
    }
    let result = match cli.command {
        Command::Predict(Deferred(a)) => predict::run(a),
        Command::Inspect(Deferred(a)) => inspect::run(a),
        Command::Bench(Deferred(a)) => bench::run(a),
        Command::Eval(Deferred(a)) => eval::run(a),
        Command::Lexicon(Deferred(a)) => lexicon::run(a),
        Command::Ngram(Deferred(a)) => ngram::run(a),
        Command::AttachNgram(Deferred(a)) => attach_ngram::run(a),
        Command::Simulate(Deferred(a)) => simulate::run(a),
        #[cfg(feature = "train")]
        Command::Train(Deferred(a)) => train::run(*a),
        Command::Install(Deferred(a)) => install::run(a),
        Command::Quantize(Deferred(a)) => quantize::run(a),
        #[cfg(feature = "train")]
        Command::Prune(Deferred(a)) => prune::run(a),
        Command::Prior(Deferred(a)) => prior::run(a),
        Command::Recase(Deferred(a)) => recase::run(a),
        Command::Serve(Deferred(a)) => serve::run(a),
        Command::User(Deferred(a)) => user::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError(msg)) if msg == STDOUT_CLOSED => ExitCode::SUCCESS,
        Err(CliError(msg)) => {
            eprintln!("laya: error: {msg}");
            ExitCode::FAILURE
        }
    }
}
