//! Helpers shared by the two Rust peers (`laya-peer`, `candle-peer`), included with `#[path]` so
//! both standalone packages speak exactly the same protocol to `peers.py`:
//!
//! ```text
//! PEER MODEL.laya CONTEXTS.json ITERS WARMUP OUT.json LOGITS.f32 [TYPING.json PASSES TYPING_LOGITS.f32]
//! ```
//!
//! OUT.json holds the cold start, the raw per-decision times, the peak RSS and the top-5 word ids
//! per context; LOGITS.f32 holds the word logits of every context (little-endian f32, row-major),
//! so the driver can compare peers value by value.
//!
//! With the three optional arguments the peer also runs the *typing* mode: TYPING.json is a
//! sequence of requests (a text typed one character at a time, every prefix a request), decided
//! in order — one untimed pass, then PASSES timed passes — and OUT.json gains `typing_times_ns`
//! and `typing_top5`, TYPING_LOGITS.f32 the word logits of each request of one pass.
use std::fmt;
use std::path::PathBuf;
use std::time::Instant;

/// Why a peer could not run; each message says what to fix.
#[derive(Debug)]
pub enum PeerError {
    /// Wrong command line.
    Usage(String),
    /// A file could not be read or written.
    Io(PathBuf, std::io::Error),
    /// CONTEXTS.json is not a JSON array of strings.
    Contexts(PathBuf, String),
    /// The model could not be loaded or run.
    Model(String),
}

impl fmt::Display for PeerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerError::Usage(m) => write!(
                f,
                "{m}\nusage: PEER MODEL.laya CONTEXTS.json ITERS WARMUP OUT.json LOGITS.f32 [TYPING.json PASSES TYPING_LOGITS.f32]"
            ),
            PeerError::Io(p, e) => write!(f, "{}: {e}", p.display()),
            PeerError::Contexts(p, m) => write!(f, "{}: expected a JSON array of strings: {m}", p.display()),
            PeerError::Model(m) => write!(f, "model: {m}"),
        }
    }
}

impl std::error::Error for PeerError {}

/// The parsed command line.
#[derive(Debug, Clone, PartialEq)]
pub struct Args {
    pub model: PathBuf,
    pub contexts: PathBuf,
    pub iters: usize,
    pub warmup: usize,
    pub out: PathBuf,
    pub logits: PathBuf,
    /// The typing mode, when asked for.
    pub typing: Option<Typing>,
}

/// The typing mode's arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct Typing {
    /// JSON array of the requests, in typing order.
    pub requests: PathBuf,
    /// Timed passes over the requests (after one untimed pass).
    pub passes: usize,
    pub logits: PathBuf,
}

impl Args {
    /// Parses the six positional arguments, or nine with the typing mode (program name already
    /// removed).
    pub fn parse(args: &[String]) -> Result<Args, PeerError> {
        if args.len() != 6 && args.len() != 9 {
            return Err(PeerError::Usage(format!("expected 6 or 9 arguments, got {}", args.len())));
        }
        let num = |i: usize, what: &str| {
            args[i].parse::<usize>().map_err(|_| PeerError::Usage(format!("{what} must be a whole number, got {:?}", args[i])))
        };
        Ok(Args {
            model: args[0].clone().into(),
            contexts: args[1].clone().into(),
            iters: num(2, "ITERS")?,
            warmup: num(3, "WARMUP")?,
            out: args[4].clone().into(),
            logits: args[5].clone().into(),
            typing: match args.len() {
                9 => Some(Typing { requests: args[6].clone().into(), passes: num(7, "PASSES")?, logits: args[8].clone().into() }),
                _ => None,
            },
        })
    }
}

/// Reads CONTEXTS.json (a file, because contexts may hold NUL, which no command line carries).
pub fn read_contexts(path: &PathBuf) -> Result<Vec<String>, PeerError> {
    let text = std::fs::read_to_string(path).map_err(|e| PeerError::Io(path.clone(), e))?;
    let contexts: Vec<String> = serde_json::from_str(&text).map_err(|e| PeerError::Contexts(path.clone(), e.to_string()))?;
    if contexts.is_empty() {
        return Err(PeerError::Contexts(path.clone(), "the array is empty".into()));
    }
    Ok(contexts)
}

/// Indices of the `k` largest values, largest first; ties go to the lower index and NaN ranks
/// last, so every peer (and numpy's stable argsort on the negated logits) agrees on the order.
pub fn top_k(values: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..values.len()).collect();
    let key = |i: usize| if values[i].is_nan() { f32::NEG_INFINITY } else { values[i] };
    idx.sort_by(|&a, &b| key(b).total_cmp(&key(a)).then(a.cmp(&b)));
    idx.truncate(k);
    idx
}

/// Peak resident set of this process in MB (VmHWM), `None` where /proc is unavailable.
pub fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Times `decide` on the contexts in turn: `warmup` untimed calls, then `iters` timed ones.
pub fn time_decisions(contexts: &[String], warmup: usize, iters: usize, mut decide: impl FnMut(&str)) -> Vec<u64> {
    for i in 0..warmup {
        decide(&contexts[i % contexts.len()]);
    }
    let mut times = Vec::with_capacity(iters);
    for i in 0..iters {
        let ctx = &contexts[i % contexts.len()];
        let t0 = Instant::now();
        decide(ctx);
        times.push(t0.elapsed().as_nanos() as u64);
    }
    times
}

/// Times `decide` on the typing requests in order: one untimed pass, then `passes` timed ones.
/// Every request extends the one before it (except the first of each pass), which is what lets
/// a runtime that keeps keys and values between keystrokes reuse them.
pub fn time_typing(requests: &[String], passes: usize, mut decide: impl FnMut(&str)) -> Vec<u64> {
    requests.iter().for_each(|r| decide(r));
    let mut times = Vec::with_capacity(passes * requests.len());
    for _ in 0..passes {
        for r in requests {
            let t0 = Instant::now();
            decide(r);
            times.push(t0.elapsed().as_nanos() as u64);
        }
    }
    times
}

/// The typing mode's results, for [`write_results`].
pub struct TypingResults<'a> {
    pub times_ns: &'a [u64],
    pub logits: &'a [Vec<f32>],
}

/// Embedding rows of a `relative_causal` context (docs/format.md §3): the last `r` tokens of
/// BOS (row 0) followed by every character, each through `row` (normalisation and mapping).
/// A stream shorter than `r` keeps its BOS and is not padded here (a peer that computes
/// dynamic shapes needs no padding).
#[allow(dead_code)] // laya-peer leaves encoding to the runtime
pub fn causal_rows(context: &str, r: usize, mut row: impl FnMut(char) -> u32) -> Vec<u32> {
    let n = context.chars().count();
    let mut rows = Vec::with_capacity(r.min(n + 1));
    if n < r {
        rows.push(0);
    }
    rows.extend(context.chars().skip(n.saturating_sub(r)).map(&mut row));
    rows
}

fn write_f32(path: &PathBuf, logits: &[Vec<f32>]) -> Result<(), PeerError> {
    let mut bytes = Vec::with_capacity(logits.iter().map(|l| 4 * l.len()).sum());
    for v in logits.iter().flatten() {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(path, bytes).map_err(|e| PeerError::Io(path.clone(), e))
}

/// Writes OUT.json and LOGITS.f32 (and TYPING_LOGITS.f32 with the typing mode).
pub fn write_results(
    args: &Args,
    peer: &str,
    cold_start_ms: f64,
    times_ns: &[u64],
    logits: &[Vec<f32>],
    typing: Option<TypingResults<'_>>,
    notes: &str,
) -> Result<(), PeerError> {
    let top5: Vec<Vec<usize>> = logits.iter().map(|l| top_k(l, 5)).collect();
    let mut report = serde_json::json!({
        "peer": peer,
        "cold_start_ms": cold_start_ms,
        "times_ns": times_ns,
        "peak_rss_mb": peak_rss_mb(),
        "top5": top5,
        "vocab": logits.first().map_or(0, Vec::len),
        "notes": notes,
    });
    if let (Some(t), Some(spec)) = (&typing, &args.typing) {
        let top5: Vec<Vec<usize>> = t.logits.iter().map(|l| top_k(l, 5)).collect();
        report["typing_times_ns"] = serde_json::json!(t.times_ns);
        report["typing_top5"] = serde_json::json!(top5);
        write_f32(&spec.logits, t.logits)?;
    }
    std::fs::write(&args.out, report.to_string()).map_err(|e| PeerError::Io(args.out.clone(), e))?;
    write_f32(&args.logits, logits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_orders_by_value_then_index_and_puts_nan_last() {
        assert_eq!(top_k(&[1.0, 3.0, 2.0, 3.0, f32::NAN, 0.5], 5), vec![1, 3, 2, 0, 5]);
        assert_eq!(top_k(&[1.0], 5), vec![0]);
    }

    #[test]
    fn args_need_six_numbers_in_place() {
        let ok: Vec<String> = ["m", "c", "10", "2", "o", "l"].iter().map(|s| s.to_string()).collect();
        let a = Args::parse(&ok).unwrap();
        assert_eq!((a.iters, a.warmup), (10, 2));
        assert_eq!(a.typing, None);
        let typing: Vec<String> = ["m", "c", "10", "2", "o", "l", "t", "3", "tl"].iter().map(|s| s.to_string()).collect();
        let t = Args::parse(&typing).unwrap().typing.unwrap();
        assert_eq!((t.requests.to_str(), t.passes, t.logits.to_str()), (Some("t"), 3, Some("tl")));
        assert!(Args::parse(&typing[..7]).is_err());
        let bad: Vec<String> = ["m", "c", "ten", "2", "o", "l"].iter().map(|s| s.to_string()).collect();
        assert!(Args::parse(&bad).unwrap_err().to_string().contains("ITERS"));
        assert!(Args::parse(&ok[..3]).is_err());
    }

    #[test]
    fn contexts_must_be_a_string_array() {
        let dir = std::env::temp_dir().join(format!("peer-ctx-{}", std::process::id()));
        std::fs::write(&dir, "[\"\", \"\\u0000a\", \"今天😀\"]").unwrap();
        assert_eq!(read_contexts(&dir).unwrap(), vec!["".to_string(), "\0a".into(), "今天😀".into()]);
        std::fs::write(&dir, "[1, 2]").unwrap();
        assert!(matches!(read_contexts(&dir), Err(PeerError::Contexts(..))));
        std::fs::remove_file(&dir).unwrap();
    }

    #[test]
    fn timing_cycles_over_contexts() {
        let ctx = vec!["a".to_string(), "b".to_string()];
        let mut seen = Vec::new();
        let t = time_decisions(&ctx, 1, 3, |c| seen.push(c.to_string()));
        assert_eq!(t.len(), 3);
        assert_eq!(seen, vec!["a", "a", "b", "a"]);
    }

    #[test]
    fn typing_is_one_untimed_pass_then_timed_passes_in_order() {
        let req = vec!["".to_string(), "a".to_string(), "ab".to_string()];
        let mut seen = Vec::new();
        let t = time_typing(&req, 2, |c| seen.push(c.to_string()));
        assert_eq!(t.len(), 6);
        assert_eq!(seen, ["", "a", "ab", "", "a", "ab", "", "a", "ab"]);
    }

    #[test]
    fn causal_rows_keep_bos_until_the_stream_is_longer_than_r() {
        let row = |c: char| c as u32;
        assert_eq!(causal_rows("", 4, row), vec![0]);
        assert_eq!(causal_rows("abc", 4, row), vec![0, 97, 98, 99]);
        assert_eq!(causal_rows("abcd", 4, row), vec![97, 98, 99, 100]);
        assert_eq!(causal_rows("今天abcde", 4, row), vec![98, 99, 100, 101]);
    }
}
