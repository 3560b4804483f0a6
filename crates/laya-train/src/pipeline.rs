//! The steps around a training run that every command shares: where the network starts
//! (`--init`, word classes, positions), the lexicon's order, checking the output before the
//! first step, exporting with the completion prior carried over, and one atomic write.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use laya_format::{GgmlType, LayaFile, ModelMeta, PositionScheme};

use crate::error::{io_err, Result, TrainError};
use crate::export::{ExportInfo, Precision};
use crate::model::LayaNet;

/// How a run may change the model it continues (`laya train --init`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InitOptions {
    /// `Some((k, own))`: the word head is factorised over about `k` classes, the `own` most
    /// frequent words each in a class of its own ([`laya_format::assign_word_classes_own`]). A
    /// flat model gains such a head; a factorised one must already have exactly this one. `k == 0`
    /// asks for a flat head.
    pub word_classes: Option<(usize, usize)>,
    /// The position scheme the caller expects; a model's scheme cannot change.
    pub positions: Option<PositionScheme>,
    /// An output memory the model should have: one without a memory gains this one (its rows
    /// at zero, so the model predicts as before until training moves them); one with a memory
    /// must already have exactly this one.
    pub memory: Option<laya_format::memory::Memory>,
}

/// A model to continue training: the network and the metadata of the file it came from (whose
/// completion-prior frequencies [`LayaNet::export_carrying`] carries over).
pub struct InitModel {
    /// The network, with the word head `InitOptions::word_classes` asked for.
    pub net: LayaNet,
    /// The source file's metadata.
    pub source: ModelMeta,
}

/// Loads `path` to continue training from. Quantised files are refused, because their rounding
/// would be baked into the starting weights; a changed position scheme or word-class map is
/// refused with the flag to leave out.
///
/// ```no_run
/// use laya_train::{load_init, InitOptions};
/// let init = load_init(std::path::Path::new("models/default-f16.laya"), InitOptions::default())?;
/// println!("{} words", init.net.config().vocab());
/// # Ok::<(), laya_train::TrainError>(())
/// ```
pub fn load_init(path: &Path, opts: InitOptions) -> Result<InitModel> {
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    let bad = |m: String| TrainError::Init(format!("{}: {m}", path.display()));
    let file = LayaFile::parse(&bytes).map_err(|e| bad(e.to_string()))?;
    if let Some(t) = file.tensors().iter().find(|t| !matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)) {
        return Err(bad(format!("tensor {} is {}; continue training from the f32/f16 model, before `laya quantize`", t.name, t.ty)));
    }
    let source = file.meta.clone();
    let have = source.hparams.position_scheme;
    if let Some(want) = opts.positions.filter(|&p| p != have) {
        return Err(bad(format!(
            "--positions {} conflicts with this {} model; a model's position scheme cannot change (leave --positions out to keep it)",
            want.name(),
            have.name()
        )));
    }
    let want = opts
        .word_classes
        .and_then(|(k, own)| (k > 0).then(|| laya_format::assign_word_classes_own(source.words.iter(), &source.frequencies, k, own)));
    let net = match (&source.word_class, want) {
        (_, None) if opts.word_classes.is_none() => LayaNet::from_laya(&file)?,
        (None, Some(map)) => LayaNet::from_laya_with_classes(&file, Some(map))?,
        (have, want) if *have == want => LayaNet::from_laya(&file)?,
        (have, _) => {
            let (k, _) = opts.word_classes.unwrap_or_default();
            return Err(bad(format!(
                "--word-classes {k} conflicts with this model's {}; a factorised model's classes cannot change (leave --word-classes out to keep them)",
                head_description(have.as_deref())
            )));
        }
    };
    let net = match (&source.hparams.memory, opts.memory) {
        (_, None) => net,
        (None, Some(m)) => net.with_memory(m)?,
        (Some(have), Some(want)) if *have == want => net,
        (Some(have), Some(_)) => {
            return Err(bad(format!(
                "this model has an output memory of {} rows, orders {:?}, which cannot change (leave --memory-buckets out to keep it)",
                have.buckets, have.orders
            )))
        }
    };
    Ok(InitModel { net, source })
}

/// "a flat word head" or "a word head factorised over K classes (largest N words)".
///
/// ```
/// assert_eq!(laya_train::head_description(Some(&[0, 1, 1])), "a word head factorised over 2 classes (largest 2 words)");
/// ```
pub fn head_description(word_class: Option<&[u32]>) -> String {
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

/// Words and their counts in byte order, the order a model file stores its lexicon in so that
/// the runtime checks it in one pass at load (docs/format.md §4, "Lexicon order").
///
/// ```
/// let (w, f) = laya_train::lexicon_in_file_order(vec!["b".into(), "a".into()], vec![1, 2]);
/// assert_eq!((w, f), (vec!["a".to_string(), "b".into()], vec![2, 1]));
/// ```
pub fn lexicon_in_file_order(words: Vec<String>, freqs: Vec<u32>) -> (Vec<String>, Vec<u32>) {
    let mut pairs: Vec<(String, u32)> = words.into_iter().zip(freqs).collect();
    pairs.sort_unstable();
    pairs.into_iter().unzip()
}

/// Refuses an output path a finished run could not write: a directory, a missing or
/// unwritable directory (probed by creating and removing a file in it). Call it before training.
///
/// ```
/// assert!(laya_train::check_output_path(&std::env::temp_dir()).is_err()); // a directory
/// assert!(laya_train::check_output_path(std::path::Path::new("/no/such/dir/m.laya")).is_err());
/// ```
pub fn check_output_path(path: &Path) -> Result<()> {
    let bad = |m: String| Err(TrainError::Output(m));
    if path.is_dir() {
        return bad(format!("{} is a directory; name the model file to write (e.g. {}/model.laya)", path.display(), path.display()));
    }
    if path.file_name().is_none() {
        return bad(format!("{} names no file", path.display()));
    }
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return bad(format!("{}: the directory {} does not exist; create it first", path.display(), dir.display()));
    }
    let probe = dir.join(format!(".laya-write-probe-{}", std::process::id()));
    if let Err(e) = std::fs::File::create(&probe) {
        return bad(format!("{}: cannot write in {}: {e}", path.display(), dir.display()));
    }
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Writes a trained model to `path` atomically ([`laya_format::write_file_atomically`]). If that
/// fails (the directory went away during a long run), the model is written to the system's
/// temporary directory instead and the error says where: a trained model is never lost.
pub fn save_model(path: &Path, bytes: &[u8]) -> Result<()> {
    let Err(e) = laya_format::write_file_atomically(path, bytes) else { return Ok(()) };
    let rescue: PathBuf = std::env::temp_dir().join(format!("laya-train-{}.laya", std::process::id()));
    Err(match laya_format::write_file_atomically(&rescue, bytes) {
        Ok(()) => TrainError::Output(format!(
            "cannot write {}: {e}; the trained model was written to {} instead",
            path.display(),
            rescue.display()
        )),
        Err(e2) => TrainError::Output(format!("cannot write {}: {e}; writing it to {} failed too: {e2}", path.display(), rescue.display())),
    })
}

/// What became of the completion prior (the dictionary frequencies) of the model a run started
/// from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriorCarry {
    /// The source had none.
    Absent,
    /// Every word of the new model had one in the source: kept.
    Kept,
    /// A word of the new model is not in the source's lexicon: dropped (run `laya prior`).
    Dropped,
}

/// The source's dictionary frequency of each of `words`, if it has them for all of them.
fn carried_frequencies(words: &[String], source: &ModelMeta) -> (Option<Vec<u32>>, PriorCarry) {
    let Some(freqs) = &source.dict_frequencies else { return (None, PriorCarry::Absent) };
    let by_word: HashMap<&str, u32> = source.words.iter().zip(freqs).map(|(w, &f)| (w, f)).collect();
    match words.iter().map(|w| by_word.get(w.as_str()).copied()).collect::<Option<Vec<u32>>>() {
        Some(carried) => (Some(carried), PriorCarry::Kept),
        None => (None, PriorCarry::Dropped),
    }
}

impl LayaNet {
    /// [`LayaNet::export_bytes`] with the completion prior of `source` (the model the run
    /// started from) carried over word by word, in one write of the file.
    pub fn export_carrying(&self, info: &ExportInfo, precision: Precision, source: Option<&ModelMeta>) -> Result<(Vec<u8>, PriorCarry)> {
        let (freqs, carry) = match source {
            Some(s) => carried_frequencies(&self.config().words, s),
            None => (None, PriorCarry::Absent),
        };
        Ok((self.export_bytes_with(info, precision, freqs)?, carry))
    }
}

/// Today's date in UTC as ISO 8601 (`YYYY-MM-DD`), for [`ExportInfo::created`].
pub fn today_utc() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()[..10].to_string()
}

/// At most `max` events, an even stride through them, so that every part of a corpus stays
/// represented (`max == 0`: all).
///
/// ```
/// assert_eq!(laya_train::even_stride((0..10).collect(), 5), vec![1, 3, 5, 7, 9]);
/// ```
pub fn even_stride<T>(items: Vec<T>, max: usize) -> Vec<T> {
    if items.len() <= max || max == 0 {
        return items;
    }
    let n = items.len();
    items.into_iter().enumerate().filter(|(i, _)| (i * max) / n != ((i + 1) * max) / n).map(|(_, e)| e).collect()
}

/// The GPU a `--device` names: `None` for `cpu`, 0 for `cuda`, `N` for `cuda:N`.
///
/// ```
/// assert_eq!(laya_train::gpu_ordinal("cpu").unwrap(), None);
/// assert_eq!(laya_train::gpu_ordinal("cuda").unwrap(), Some(0));
/// assert_eq!(laya_train::gpu_ordinal("cuda:3").unwrap(), Some(3));
/// assert!(laya_train::gpu_ordinal("gpu").is_err());
/// ```
pub fn gpu_ordinal(spec: &str) -> Result<Option<usize>> {
    match spec.trim() {
        "cpu" => Ok(None),
        "cuda" => Ok(Some(0)),
        s => match s.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(n)) => Ok(Some(n)),
            _ => Err(TrainError::Config(format!("unknown device {spec:?}: expected cpu, cuda or cuda:N"))),
        },
    }
}

/// The device of `laya train --device`: `cpu`, `cuda` (the first GPU) or `cuda:N`. A GPU needs
/// a build with the `cuda` feature (scripts/build-cuda.sh) and a working NVIDIA driver; either
/// missing is an error that says so.
///
/// ```
/// assert!(laya_train::parse_device("cpu").unwrap().is_cpu());
/// assert!(laya_train::parse_device("tpu").is_err());
/// assert!(laya_train::parse_device("cuda:x").is_err());
/// ```
pub fn parse_device(spec: &str) -> Result<candle_core::Device> {
    let Some(ordinal) = gpu_ordinal(spec)? else { return Ok(candle_core::Device::Cpu) };
    if !cfg!(feature = "cuda") {
        return Err(TrainError::Config(format!(
            "--device {spec}: this laya was built without CUDA; build it with scripts/build-cuda.sh (cargo feature `cuda`)"
        )));
    }
    #[cfg(feature = "cuda")]
    let opened = crate::cuda::open(ordinal);
    #[cfg(not(feature = "cuda"))]
    let opened = candle_core::Device::new_cuda(ordinal);
    // candle appends a backtrace to a driver error: its first line is the reason.
    opened.map_err(|e| TrainError::Config(format!("--device {spec}: cannot open the GPU: {}", e.to_string().lines().next().unwrap_or(""))))
}
