//! `laya train`: keyboard logs in, an evaluated `.laya` model out (click-weighted objective,
//! progress bar, checkpoints and resume, early stopping, loss curve, final table).

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use laya_train::{
    even_stride, load_init, train, train_from, ExportInfo, InitOptions, Mapping, ModelConfig, NormRule, Objective, PositionScheme,
    Precision, PriorCarry, RankOptions, RunOptions, TrainConfig,
};

use crate::train_io::{read_log, BarHooks};
use crate::CliError;

/// Thread set-up of the commands that train (`train`, and `prune` for its fine-tuning). Call it
/// first, before any tensor operation and before this process starts a thread: candle reads
/// `RAYON_NUM_THREADS` from the environment, for its matmuls, its elementwise pool and the
/// size of the pool the steps run on (`laya_train::training_pool`).
pub fn set_training_threads(threads: Option<u16>) {
    if let Some(n) = threads {
        std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    }
    // Training runs its batch shards side by side, each with one candle thread.
    laya_train::configure_candle_threads();
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ObjectiveArg {
    /// Soft target over the shown candidates: the clicked one weighs --click-weight, others --shown-weight.
    ClickWeighted,
    /// Plain cross-entropy on the clicked word (the ablation).
    Clicked,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ShownScopeArg {
    /// Every other shown candidate.
    All,
    /// Only those shown with the clicked candidate's replace.
    SameReplace,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PrecisionArg {
    F32,
    F16,
}

impl From<PrecisionArg> for Precision {
    fn from(p: PrecisionArg) -> Precision {
        match p {
            PrecisionArg::F32 => Precision::F32,
            PrecisionArg::F16 => Precision::F16,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum PositionsArg {
    /// A learned embedding per position of a right-aligned window of --context characters,
    /// bidirectional attention (the shipped models before 2026-11-30).
    LearnedAbsolute,
    /// Causal attention over a sliding window of --context tokens with a learned bias per
    /// block, head and distance: a runtime can keep work from one keystroke to the next
    /// (docs/format.md §3, docs/training.md). The shipped models' scheme and the default.
    RelativeCausal,
}

impl PositionsArg {
    fn scheme(self) -> PositionScheme {
        match self {
            PositionsArg::LearnedAbsolute => PositionScheme::LearnedAbsolute,
            PositionsArg::RelativeCausal => PositionScheme::RelativeCausal,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MappingArg {
    /// 65,536 rows: BMP codepoint = row, astral codepoints share the surrogate rows.
    Direct,
    /// Rows only for the --table-rows most frequent characters of the training contexts.
    Table,
}

#[derive(clap::Args)]
pub struct Args {
    /// Training keyboard log (docs/logs.md), e.g. from `laya simulate`.
    #[arg(long)]
    events: PathBuf,
    /// Validation keyboard log (early stopping and the per-epoch metrics).
    #[arg(long)]
    valid_events: Option<PathBuf>,
    /// The lexicon (TSV from `laya lexicon`): the words the model can predict.
    #[arg(long, required_unless_present = "init", conflicts_with = "init")]
    lexicon: Option<PathBuf>,
    /// Start from this model file instead of a fresh network: continue training it, or adapt it
    /// to a domain's logs. Its lexicon, character table and sizes are kept (the size flags are
    /// ignored); the optimiser starts fresh with this run's schedule. Quantised files are refused.
    #[arg(long)]
    init: Option<PathBuf>,
    /// Where to write the model.
    #[arg(long)]
    out: PathBuf,
    /// Use at most this many training events (an even stride through the log).
    #[arg(long)]
    max_events: Option<usize>,
    /// Use at most this many validation events.
    #[arg(long, default_value_t = 20_000)]
    max_valid_events: usize,
    /// Stop at the first malformed log line instead of skipping it (skips are counted and shown).
    #[arg(long)]
    strict: bool,
    #[arg(long, value_enum, default_value_t = ObjectiveArg::ClickWeighted)]
    objective: ObjectiveArg,
    /// Weight of the clicked candidate in the click-weighted target.
    #[arg(long, default_value_t = 3.0)]
    click_weight: f32,
    /// Weight of every other shown candidate.
    #[arg(long, default_value_t = 1.0)]
    shown_weight: f32,
    /// Which other shown candidates join the click-weighted target: `all`, or `same-replace`
    /// (only those shown with the clicked candidate's replace: next words shown mid-word are
    /// not alternatives to the word being typed).
    #[arg(long, value_enum, default_value_t = ShownScopeArg::SameReplace)]
    shown_scope: ShownScopeArg,
    #[arg(long, default_value_t = 3)]
    epochs: usize,
    #[arg(long, default_value_t = 128)]
    batch_size: usize,
    /// Peak learning rate (AdamW, linear warm-up, cosine decay).
    #[arg(long, default_value_t = 2e-3)]
    lr: f64,
    #[arg(long, default_value_t = 200)]
    warmup_steps: usize,
    /// Epochs without a better validation loss before stopping.
    #[arg(long, default_value_t = 2)]
    patience: usize,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Threads for the training steps (default: RAYON_NUM_THREADS, else the physical cores).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    #[arg(long, default_value_t = 16)]
    context: usize,
    /// Width of the residual stream (the shipped model: 192).
    #[arg(long, default_value_t = 192)]
    d_model: usize,
    /// Attention heads; they divide `--d-model` (the shipped model: 3).
    #[arg(long, default_value_t = 3)]
    heads: usize,
    /// Transformer blocks (the shipped model: 3).
    #[arg(long, default_value_t = 3)]
    layers: usize,
    /// FFN width of every block (the shipped model: 512).
    #[arg(long, default_value_t = 512)]
    ffn: usize,
    #[arg(long, default_value_t = 8)]
    replace_classes: usize,
    #[arg(long, value_enum, default_value_t = MappingArg::Table)]
    mapping: MappingArg,
    /// Position scheme of a new model: relative_causal (default, the shipped models) or
    /// learned_absolute. With --init the model's own scheme is kept; naming a different one is
    /// an error.
    #[arg(long, value_enum)]
    positions: Option<PositionsArg>,
    /// Factorise the word head of a new model over about N classes of words (words sharing a
    /// first character share a class; laya_format::assign_word_classes): P(w) = P(class) ·
    /// P(w | class), so a runtime can rank candidates expanding a few classes instead of
    /// scoring every word. 0: a flat head. Absent: for a new model the shipped models' head
    /// (512, with --own-class-words 1024); with --init the model's own head. With --init a
    /// factorised model's own head is kept (naming a different one is an error) and a flat
    /// model gains one.
    #[arg(long)]
    word_classes: Option<usize>,
    /// With --word-classes: the N most frequent words each get a class of their own
    /// (laya_format::assign_word_classes_own), which the class head scores exactly as a flat
    /// head would; the others are grouped by first character.
    #[arg(long, default_value_t = 0, requires = "word_classes")]
    own_class_words: usize,
    /// Give the model an output memory of N rows (docs/format.md §3 step 4): each prediction
    /// adds the rows picked by hashes of its last few characters (--memory-orders) to what the
    /// heads read, a memory of which words follow which character sequences that costs a row
    /// lookup per order. 0: none. With --init, a model without a memory gains one (its rows at
    /// zero); one with a memory keeps it.
    #[arg(long, default_value_t = 0)]
    memory_buckets: u32,
    /// With --memory-buckets: the orders hashed, comma-separated, each 1..=8 (order n hashes
    /// the last n characters).
    #[arg(long, value_delimiter = ',', default_value = "2,3,4")]
    memory_orders: Vec<u32>,
    /// Embedding rows for the table mapping (2 reserved: padding and unknown).
    #[arg(long, default_value_t = 6000)]
    table_rows: usize,
    #[arg(long, value_enum, default_value_t = PrecisionArg::F16)]
    precision: PrecisionArg,
    /// Directory for checkpoints, the loss curve and resume state.
    #[arg(long)]
    checkpoint_dir: Option<PathBuf>,
    /// Continue an interrupted run from --checkpoint-dir.
    #[arg(long)]
    resume: bool,
    /// Also checkpoint every N steps (0: at epoch ends and on Ctrl-C).
    #[arg(long, default_value_t = 2000)]
    checkpoint_every: usize,
    /// End training after this many seconds, as if the epochs had run out there: the epoch cut
    /// short is validated, the learning rate has decayed to its floor by then, and the model is
    /// written. For a machine lent for a fixed time.
    #[arg(long, value_name = "SECONDS", value_parser = parse_time_limit)]
    time_limit: Option<std::time::Duration>,
    /// Where the steps run: cpu, cuda (the first GPU) or cuda:N. A GPU needs a laya built with
    /// the `cuda` feature (scripts/build-cuda.sh).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Train on this many GPUs at once, from --device's on (`--device cuda --gpus 4`: GPUs 0–3),
    /// one rank each through NCCL: every rank trains on its own shard of the log (line `i` to
    /// rank `i mod N`) with --batch-size samples a step, gradients summed every step
    /// (docs/training.md, "Several GPUs"). A run resumes on another number of GPUs. `--gpus 1`
    /// runs that path on one GPU (to check NCCL, or to see what it costs).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    gpus: Option<u16>,
    /// Deal the log into this many shards and take --batch-size / S from each every step: what
    /// S GPUs with a batch of --batch-size / S each train on, on one device (to check such a
    /// run against one device).
    #[arg(long, default_value_t = 0, conflicts_with = "gpus")]
    data_shards: usize,
    /// `general.name` of the model.
    #[arg(long, default_value = "laya-model")]
    name: String,
    /// Language tag stored in the model (BCP 47). In a language with spaces between words
    /// (`en`, not `zh`) clicks match the lexicon whatever their case, as the runtime does.
    #[arg(long, default_value = "zh")]
    language: String,
    /// What the model was trained on, stored in the model.
    #[arg(long, default_value = "")]
    training_data: String,
}

/// The word head of a new model without --word-classes: the shipped models' (about 512 classes,
/// the 1,024 most frequent words each in a class of its own; docs/training.md).
const DEFAULT_WORD_CLASSES: (usize, usize) = (512, 1024);

pub fn run(args: Args) -> Result<(), CliError> {
    set_training_threads(args.threads);
    // Before the first step, not after the last: a run must never end with nowhere to go.
    laya_train::check_output_path(&args.out)?;
    if args.resume && args.checkpoint_dir.is_none() {
        return Err(CliError("--resume needs --checkpoint-dir (where the interrupted run saved its state)".into()));
    }
    // Before reading anything: a missing GPU should not cost the wait.
    let device = laya_train::parse_device(&args.device)?;
    if args.gpus.is_some() && device.is_cpu() {
        return Err(CliError("--gpus trains on several GPUs: give --device cuda (the CPU already uses every core)".into()));
    }
    let classes = match (args.word_classes, &args.init) {
        (Some(k), _) => Some((k, args.own_class_words)),
        (None, None) => Some(DEFAULT_WORD_CLASSES),
        (None, Some(_)) => None,
    };
    let memory =
        (args.memory_buckets > 0).then(|| laya_format::memory::Memory { buckets: args.memory_buckets, orders: args.memory_orders.clone() });
    if let Some(m) = &memory {
        m.check().map_err(|r| CliError(format!("--memory-buckets / --memory-orders: {r}")))?;
    }
    let init = match &args.init {
        Some(p) => Some(load_init(
            p,
            InitOptions { word_classes: classes, positions: args.positions.map(PositionsArg::scheme), memory: memory.clone() },
        )?),
        None => None,
    };
    let lexicon = match &args.lexicon {
        Some(path) if init.is_none() => {
            let lexicon = crate::lexicon::read_lexicon(path)?;
            if lexicon.is_empty() {
                return Err(CliError(format!("{} has no words", path.display())));
            }
            Some(laya_train::lexicon_in_file_order(lexicon.words, lexicon.freqs))
        }
        _ => None,
    };
    let mut events = read_log(&args.events, args.strict, "training log")?;
    if let Some(max) = args.max_events {
        events = even_stride(events, max);
    }
    let valid = match &args.valid_events {
        Some(p) => even_stride(read_log(p, args.strict, "validation log")?, args.max_valid_events),
        None => Vec::new(),
    };
    let model_cfg = match (&init, lexicon) {
        (Some(_), _) => None,
        (None, Some((words, freqs))) => {
            let rules = vec![NormRule::FullwidthAscii];
            let mapping = match args.mapping {
                MappingArg::Direct => Mapping::Direct,
                MappingArg::Table => laya_train::table_mapping(events.iter().map(|e| e.context.as_str()), args.table_rows, 1, &rules),
            };
            let word_class = classes
                .filter(|&(k, _)| k > 0)
                .map(|(k, own)| laya_format::assign_word_classes_own(words.iter().map(String::as_str), &freqs, k, own));
            Some(ModelConfig {
                context: args.context,
                d_model: args.d_model,
                heads: args.heads,
                ffn: vec![args.ffn; args.layers],
                replace_classes: args.replace_classes,
                normalization: rules,
                position_scheme: args.positions.map_or(PositionScheme::RelativeCausal, PositionsArg::scheme),
                word_class,
                memory: memory.clone(),
                ..ModelConfig::standard(words, freqs, mapping)
            })
        }
        (None, None) => return Err(CliError("give --lexicon (a new model) or --init (continue a model)".into())),
    };
    let shape = init.as_ref().map_or_else(|| model_cfg.as_ref().expect("a new model has a config"), |i| i.net.config());
    let threads = laya_train::training_threads();
    let runs_on = if device.is_cpu() { format!("{threads} thread{}", if threads == 1 { "" } else { "s" }) } else { args.device.clone() };
    eprintln!(
        "training on {} events, validating on {} events, lexicon {} words, {runs_on}, positions {}, {}",
        events.len(),
        valid.len(),
        shape.vocab(),
        shape.position_scheme.name(),
        laya_train::head_description(shape.word_class.as_deref())
    );
    let cfg = TrainConfig {
        batch_size: args.batch_size,
        epochs: args.epochs,
        lr: args.lr,
        warmup_steps: args.warmup_steps,
        objective: match args.objective {
            ObjectiveArg::ClickWeighted => Objective::ClickWeighted,
            ObjectiveArg::Clicked => Objective::Clicked,
        },
        click_weight: args.click_weight,
        shown_weight: args.shown_weight,
        shown_scope: match args.shown_scope {
            ShownScopeArg::All => laya_train::ShownScope::All,
            ShownScopeArg::SameReplace => laya_train::ShownScope::SameReplace,
        },
        seed: args.seed,
        patience: args.patience,
        log_every: 20,
        fold_case: laya_format::ignores_case(&args.language),
        ..TrainConfig::default()
    };
    if let Some(dir) = &args.checkpoint_dir {
        std::fs::create_dir_all(dir).map_err(|e| CliError(format!("cannot create {}: {e}", dir.display())))?;
    }
    let mut hooks = BarHooks::start();
    let (bar, stop) = (hooks.bar.clone(), hooks.stop.clone());
    let (outcome, source) = if let Some(gpus) = args.gpus {
        let ranks = RankOptions {
            checkpoint_dir: args.checkpoint_dir.clone(),
            resume: args.resume,
            checkpoint_every: args.checkpoint_every,
            time_limit: args.time_limit,
        };
        let source = init.as_ref().map(|i| i.source.clone());
        drop((init, device));
        let start = |_: usize, _: &laya_train::Device| match (&args.init, &model_cfg) {
            (Some(p), _) => Ok(load_init(
                p,
                InitOptions { word_classes: classes, positions: args.positions.map(PositionsArg::scheme), memory: memory.clone() },
            )?
            .net),
            (None, Some(mc)) => laya_train::LayaNet::new(mc.clone(), cfg.seed),
            (None, None) => unreachable!("checked above"),
        };
        (crate::gpus::train(&args.device, gpus.into(), &start, &cfg, events, &valid, &ranks, &mut hooks)?, source)
    } else {
        let opts = RunOptions {
            checkpoint_dir: args.checkpoint_dir.clone(),
            resume: args.resume,
            checkpoint_every: args.checkpoint_every,
            device,
            time_limit: args.time_limit,
            data_shards: args.data_shards,
            ..RunOptions::default()
        };
        match (init, model_cfg) {
            (Some(i), _) => (train_from(i.net, cfg, &events, &valid, &opts, &mut hooks)?, Some(i.source)),
            (None, Some(model_cfg)) => (train(model_cfg, cfg, &events, &valid, &opts, &mut hooks)?, None),
            (None, None) => unreachable!("checked above"),
        }
    };
    bar.finish_and_clear();

    let s = &outcome.train_stats;
    eprintln!(
        "events used {}, without a click {}, bad click index {}, clicked word outside the lexicon {} (replace head only)",
        s.used, s.no_click, s.bad_click, s.clicked_oov
    );
    outln!("{}", laya_train::summary_table(&outcome.state));
    let p = outcome.state.epochs.iter().fold(laya_train::Phases::default(), |a, e| laya_train::Phases {
        batching: a.batching + e.phases.batching,
        compute: a.compute + e.phases.compute,
        reduce: a.reduce + e.phases.reduce,
    });
    let sums = if args.gpus.is_some() { format!(", sums across GPUs {:.1} s", p.reduce) } else { String::new() };
    outln!("training time: batching {:.1} s, steps {:.1} s{sums}", p.batching, p.compute);
    if outcome.stop_reason == laya_train::StopReason::TimeLimit {
        let secs = args.time_limit.map_or(0.0, |l| l.as_secs_f64());
        outln!("stopped at the time limit ({secs} s) after {} steps", outcome.state.step);
    }
    if stop.load(Ordering::Relaxed) {
        let dir = args.checkpoint_dir.as_ref().map(|d| d.display().to_string()).unwrap_or_else(|| "(none)".into());
        return Err(CliError(format!("interrupted; checkpoint in {dir}: continue with the same command plus --resume (no model written)")));
    }

    let info = ExportInfo {
        name: args.name.clone(),
        language: args.language.clone(),
        training_data: args.training_data.clone(),
        created: laya_train::today_utc(),
    };
    let (bytes, carry) = outcome.net.export_carrying(&info, args.precision.into(), source.as_ref())?;
    let init_name = args.init.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
    match carry {
        PriorCarry::Kept => outln!("kept the dictionary frequencies (completion prior) of {init_name}"),
        PriorCarry::Dropped => {
            outln!("note: {init_name} has dictionary frequencies but the lexicon changed; run `laya prior --dict DICT` on the new model")
        }
        PriorCarry::Absent => {}
    }
    laya_train::save_model(&args.out, &bytes)?;
    let svg = args.out.with_extension("loss.svg");
    std::fs::write(&svg, laya_train::loss_svg(&outcome.state))?;
    outln!("wrote {} ({} bytes) and its loss curve {}", args.out.display(), bytes.len(), svg.display());
    Ok(())
}

/// `--time-limit`: a positive, finite number of seconds.
fn parse_time_limit(s: &str) -> Result<std::time::Duration, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => std::time::Duration::try_from_secs_f64(v).map_err(|e| e.to_string()),
        _ => Err(format!("{s:?} is not a positive number of seconds")),
    }
}
