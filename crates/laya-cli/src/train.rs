//! `laya train`: keyboard logs in, an evaluated `.laya` model out (click-weighted objective,
//! progress bar, checkpoints and resume, early stopping, loss curve, final table).

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};
use laya_format::{GgmlType, LayaFile};
use laya_text::{read_events, Event, Lexicon, OnError};
use laya_train::{
    train, train_from, EpochReport, ExportInfo, LayaNet, Mapping, ModelConfig, NormRule, Objective, PositionScheme, Precision, RunOptions,
    StepReport, TrainConfig, TrainHooks,
};

use crate::CliError;

/// Thread set-up of the commands that train (`train`, and `prune` for its fine-tuning). Call it
/// first, before any tensor operation and before this process starts a thread: candle reads
/// `RAYON_NUM_THREADS` from the environment, for its matmuls, its elementwise pool and the
/// size of the pool the steps run on (`laya_train::training_pool`).
pub fn set_training_threads(threads: Option<u16>) {
    if let Some(n) = threads {
        std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    }
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
    #[arg(long, default_value_t = 128)]
    d_model: usize,
    #[arg(long, default_value_t = 2)]
    heads: usize,
    /// Transformer blocks (the shipped models: 2).
    #[arg(long, default_value_t = 2)]
    layers: usize,
    /// FFN width of every block (the shipped models: 256).
    #[arg(long, default_value_t = 256)]
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
    /// scoring every word. 0 or absent: a flat head. With --init a factorised model's own head
    /// is kept (naming a different one is an error) and a flat model gains one.
    #[arg(long)]
    word_classes: Option<usize>,
    /// With --word-classes: the N most frequent words each get a class of their own
    /// (laya_format::assign_word_classes_own), which the class head scores exactly as a flat
    /// head would; the others are grouped by first character.
    #[arg(long, default_value_t = 0, requires = "word_classes")]
    own_class_words: usize,
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
    /// `general.name` of the model.
    #[arg(long, default_value = "laya-model")]
    name: String,
    /// Language tag stored in the model.
    #[arg(long, default_value = "zh")]
    language: String,
    /// What the model was trained on, stored in the model.
    #[arg(long, default_value = "")]
    training_data: String,
}

pub(crate) fn read_log(path: &Path, strict: bool, what: &str) -> Result<Vec<Event>, CliError> {
    let f = std::fs::File::open(path).map_err(|e| CliError(format!("cannot read {}: {e}", path.display())))?;
    let mode = if strict { OnError::Stop } else { OnError::Skip };
    let (events, stats) = read_events(BufReader::new(f), mode)?;
    if stats.skipped > 0 {
        eprintln!("{what}: skipped {} malformed line(s) of {}; first ones:", stats.skipped, path.display());
        for e in &stats.errors {
            eprintln!("  {e}");
        }
    }
    if events.is_empty() {
        return Err(CliError(format!("{} has no usable events", path.display())));
    }
    Ok(events)
}

/// An even stride through the log keeps every part of the corpus represented.
pub(crate) fn stride(events: Vec<Event>, max: usize) -> Vec<Event> {
    if events.len() <= max || max == 0 {
        return events;
    }
    let n = events.len();
    events.into_iter().enumerate().filter(|(i, _)| (i * max) / n != ((i + 1) * max) / n).map(|(_, e)| e).collect()
}

pub(crate) struct BarHooks {
    pub(crate) bar: ProgressBar,
    pub(crate) stop: Arc<AtomicBool>,
}

impl BarHooks {
    /// A step progress bar plus a Ctrl-C handler that asks the loop to stop at the next batch.
    pub(crate) fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        {
            let stop = stop.clone();
            // A second Ctrl-C while the checkpoint is written still kills the process.
            let _ = ctrlc::set_handler(move || {
                if stop.swap(true, Ordering::Relaxed) {
                    std::process::exit(130);
                }
            });
        }
        let bar = ProgressBar::new(1);
        bar.set_style(
            ProgressStyle::with_template("[{elapsed_precise}] [{bar:30}] {pos}/{len} steps ETA {eta} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        BarHooks { bar, stop }
    }
}

impl TrainHooks for BarHooks {
    fn on_step(&mut self, r: &StepReport) {
        self.bar.set_length(r.total_steps as u64);
        self.bar.set_position(r.step as u64);
        self.bar.set_message(format!(
            "epoch {} loss {:.3} (word {:.3} replace {:.3}) {:.0} samples/s",
            r.epoch + 1,
            r.loss.total,
            r.loss.word,
            r.loss.replace,
            r.samples_per_sec
        ));
    }
    fn on_epoch(&mut self, r: &EpochReport) {
        self.bar.println(format!(
            "epoch {}: train loss {:.4}, valid loss {:.4}, valid top1 {:.2}% top5 {:.2}%{}",
            r.epoch + 1,
            r.train_loss,
            r.valid.loss.total,
            100.0 * r.valid.top1,
            100.0 * r.valid.top5,
            if r.best { " (best)" } else { "" }
        ));
    }
    fn should_stop(&mut self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Loads a model file to continue training from; quantised files are refused because their
/// rounding would be baked into the starting weights.
fn load_init(path: &Path) -> Result<LayaNet, CliError> {
    let bytes = std::fs::read(path).map_err(|e| CliError(format!("cannot read {}: {e}", path.display())))?;
    let file = laya_format::LayaFile::parse(&bytes).map_err(|e| CliError(format!("{}: {e}", path.display())))?;
    if let Some(t) = file.tensors().iter().find(|t| !matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)) {
        return Err(CliError(format!(
            "{}: tensor {} is {:?}; continue training from the f32/f16 model, before `laya quantize`",
            path.display(),
            t.name,
            t.ty
        )));
    }
    Ok(LayaNet::from_laya(&file)?)
}

pub fn run(args: Args) -> Result<(), CliError> {
    set_training_threads(args.threads);
    // Before the first step, not after the last: a run must never end with nowhere to go.
    check_output_path(&args.out)?;
    if args.resume && args.checkpoint_dir.is_none() {
        return Err(CliError("--resume needs --checkpoint-dir (where the interrupted run saved its state)".into()));
    }
    let init = match &args.init {
        Some(p) => Some(load_init(p)?),
        None => None,
    };
    if let (Some(net), Some(pos)) = (&init, args.positions) {
        let have = net.config().position_scheme;
        if pos.scheme() != have {
            return Err(CliError(format!(
                "--positions {} conflicts with --init {}, a {} model; a model's position scheme cannot change (leave --positions out to keep it)",
                pos.scheme().name(),
                args.init.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
                have.name()
            )));
        }
    }
    // --word-classes with --init: a flat model gains a class head (its word rows kept, the class
    // head started from them); a factorised one keeps its own, and another map is refused.
    let init = match (init, args.word_classes) {
        (Some(net), Some(k)) => {
            let cfg = net.config();
            let want = (k > 0).then(|| {
                laya_format::assign_word_classes_own(cfg.words.iter().map(String::as_str), &cfg.frequencies, k, args.own_class_words)
            });
            match (&cfg.word_class, want) {
                (None, Some(map)) => {
                    let path = args.init.as_ref().expect("init was loaded from a path");
                    let bytes = std::fs::read(path).map_err(|e| CliError(format!("cannot read {}: {e}", path.display())))?;
                    let file = laya_format::LayaFile::parse(&bytes).map_err(|e| CliError(format!("{}: {e}", path.display())))?;
                    Some(LayaNet::from_laya_with_classes(&file, Some(map))?)
                }
                (have, want) if *have == want => Some(net),
                (have, _) => {
                    return Err(CliError(format!(
                        "--word-classes {k} conflicts with --init {}, a model with {}; a factorised model's classes cannot change (leave --word-classes out to keep them)",
                        args.init.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
                        head_description(have.as_deref())
                    )));
                }
            }
        }
        (init, _) => init,
    };
    let lexicon = match (&args.lexicon, &init) {
        (Some(path), _) => {
            let lex_file = std::fs::File::open(path).map_err(|e| CliError(format!("cannot read {}: {e}", path.display())))?;
            let mut lexicon = Lexicon::read_tsv(BufReader::new(lex_file))?;
            if lexicon.is_empty() {
                return Err(CliError(format!("{} has no words", path.display())));
            }
            // Word ids in byte order: the runtime then checks the lexicon in one pass at load
            // instead of sorting it (docs/format.md §4, "Lexicon order").
            let mut pairs: Vec<(String, u32)> = lexicon.words.into_iter().zip(lexicon.freqs).collect();
            pairs.sort_unstable();
            (lexicon.words, lexicon.freqs) = pairs.into_iter().unzip();
            Some(lexicon)
        }
        _ => None,
    };
    let mut events = read_log(&args.events, args.strict, "training log")?;
    if let Some(max) = args.max_events {
        events = stride(events, max);
    }
    let valid = match &args.valid_events {
        Some(p) => stride(read_log(p, args.strict, "validation log")?, args.max_valid_events),
        None => Vec::new(),
    };
    let words = init.as_ref().map_or_else(|| lexicon.as_ref().map_or(0, |l| l.len()), |n| n.config().vocab());
    let threads = laya_train::training_threads();
    let scheme = init
        .as_ref()
        .map_or_else(|| args.positions.map_or(PositionScheme::RelativeCausal, PositionsArg::scheme), |n| n.config().position_scheme);
    let word_class = match (&init, &lexicon) {
        (Some(n), _) => n.config().word_class.clone(),
        (None, Some(l)) => args
            .word_classes
            .filter(|&k| k > 0)
            .map(|k| laya_format::assign_word_classes_own(l.words.iter().map(String::as_str), &l.freqs, k, args.own_class_words)),
        (None, None) => None,
    };
    eprintln!(
        "training on {} events, validating on {} events, lexicon {words} words, {threads} thread{}, positions {}, {}",
        events.len(),
        valid.len(),
        if threads == 1 { "" } else { "s" },
        scheme.name(),
        head_description(word_class.as_deref())
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
        ..TrainConfig::default()
    };
    if let Some(dir) = &args.checkpoint_dir {
        std::fs::create_dir_all(dir).map_err(|e| CliError(format!("cannot create {}: {e}", dir.display())))?;
    }
    let opts = RunOptions { checkpoint_dir: args.checkpoint_dir.clone(), resume: args.resume, checkpoint_every: args.checkpoint_every };

    let mut hooks = BarHooks::start();
    let (bar, stop) = (hooks.bar.clone(), hooks.stop.clone());
    let outcome = match (init, lexicon) {
        (Some(net), _) => train_from(net, cfg, &events, &valid, &opts, &mut hooks)?,
        (None, Some(lexicon)) => {
            let rules = vec![NormRule::FullwidthAscii];
            let mapping = match args.mapping {
                MappingArg::Direct => Mapping::Direct,
                MappingArg::Table => laya_train::table_mapping(events.iter().map(|e| e.context.as_str()), args.table_rows, 1, &rules),
            };
            let model_cfg = ModelConfig {
                context: args.context,
                d_model: args.d_model,
                heads: args.heads,
                ffn: vec![args.ffn; args.layers],
                replace_classes: args.replace_classes,
                normalization: rules,
                position_scheme: scheme,
                word_class,
                ..ModelConfig::standard(lexicon.words, lexicon.freqs, mapping)
            };
            train(model_cfg, cfg, &events, &valid, &opts, &mut hooks)?
        }
        (None, None) => return Err(CliError("give --lexicon (a new model) or --init (continue a model)".into())),
    };
    bar.finish_and_clear();

    let s = &outcome.train_stats;
    eprintln!(
        "events used {}, without a click {}, bad click index {}, clicked word outside the lexicon {} (replace head only)",
        s.used, s.no_click, s.bad_click, s.clicked_oov
    );
    outln!("{}", laya_train::summary_table(&outcome.state));
    if stop.load(Ordering::Relaxed) {
        let dir = args.checkpoint_dir.as_ref().map(|d| d.display().to_string()).unwrap_or_else(|| "(none)".into());
        return Err(CliError(format!("interrupted; checkpoint in {dir}: continue with the same command plus --resume (no model written)")));
    }

    let info = ExportInfo {
        name: args.name.clone(),
        language: args.language.clone(),
        training_data: args.training_data.clone(),
        created: today(),
    };
    let precision = match args.precision {
        PrecisionArg::F32 => Precision::F32,
        PrecisionArg::F16 => Precision::F16,
    };
    let mut bytes = outcome.net.export_bytes(&info, precision)?;
    if let Some(init) = &args.init {
        let source = LayaFile::parse(&std::fs::read(init)?)?.meta;
        match crate::prior::carry_dict_frequencies(&mut bytes, &source)? {
            Some(true) => outln!("kept the dictionary frequencies (completion prior) of {}", init.display()),
            Some(false) => outln!(
                "note: {} has dictionary frequencies but the lexicon changed; run `laya prior --dict DICT` on the new model",
                init.display()
            ),
            None => {}
        }
    }
    if let Err(e) = write_atomically(&args.out, &bytes) {
        // The output went away during the run: the trained weights are kept somewhere.
        let rescue = std::env::temp_dir().join(format!("laya-train-{}.laya", std::process::id()));
        return Err(match write_atomically(&rescue, &bytes) {
            Ok(()) => CliError(format!("{}; the trained model was written to {} instead", e.0, rescue.display())),
            Err(e2) => CliError(format!("{}; writing it to {} failed too: {}", e.0, rescue.display(), e2.0)),
        });
    }
    let svg = args.out.with_extension("loss.svg");
    std::fs::write(&svg, laya_train::loss_svg(&outcome.state))?;
    outln!("wrote {} ({} bytes) and its loss curve {}", args.out.display(), bytes.len(), svg.display());
    Ok(())
}

/// "a flat word head" or "a word head factorised over K classes (largest N words)".
fn head_description(word_class: Option<&[u32]>) -> String {
    match word_class {
        None => "a flat word head".into(),
        Some(c) => {
            let k = c.iter().max().map_or(0, |&m| m as usize + 1);
            let mut sizes = vec![0usize; k];
            c.iter().for_each(|&x| sizes[x as usize] += 1);
            format!("a word head factorised over {k} classes (largest {} words)", sizes.iter().max().copied().unwrap_or(0))
        }
    }
}

/// Refuses an output path a finished run could not write: a directory, a missing or
/// unwritable directory (probed by creating and removing a file in it).
pub(crate) fn check_output_path(path: &Path) -> Result<(), CliError> {
    if path.is_dir() {
        return Err(CliError(format!(
            "--out {} is a directory; name the model file to write (e.g. {}/model.laya)",
            path.display(),
            path.display()
        )));
    }
    if path.file_name().is_none() {
        return Err(CliError(format!("--out {} names no file", path.display())));
    }
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(CliError(format!("--out {}: the directory {} does not exist; create it first", path.display(), dir.display())));
    }
    let probe = dir.join(format!(".laya-write-probe-{}", std::process::id()));
    std::fs::File::create(&probe).map_err(|e| CliError(format!("--out {}: cannot write in {}: {e}", path.display(), dir.display())))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Temp file in the same directory, fsync, rename: an interrupted write never leaves a torn
/// model, and a failed one leaves no temporary file behind.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    use std::io::Write;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{}.tmp-{}", path.file_name().and_then(|n| n.to_str()).unwrap_or("model"), std::process::id()));
    let write = || -> Result<(), CliError> {
        let mut f = std::fs::File::create(&tmp).map_err(|e| CliError(format!("cannot write {}: {e}", tmp.display())))?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(|e| CliError(format!("cannot move the model to {}: {e}", path.display())))
    };
    write().inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// UTC date as ISO 8601 (YYYY-MM-DD).
pub(crate) fn today() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()[..10].to_string()
}
