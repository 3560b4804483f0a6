//! `laya predict`: one context as a table, or docs/evaluation.md §1 JSON-lines contract.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use laya_runtime::{Session, User};
use laya_text::{Candidate, Predictor};
use serde::Serialize;
use unicode_width::UnicodeWidthStr;

use crate::predictors::{load_ngram, Interpolated, Kind, LearningNgram, ModelPredictor, INTERPOLATION_DEPTH};
use crate::CliError;

#[derive(clap::Args)]
pub struct Args {
    /// The text before the cursor (omit with --jsonl).
    context: Option<String>,
    /// Read {"context": "..."} JSON lines from stdin, write one JSON line each.
    #[arg(long)]
    jsonl: bool,
    #[command(flatten)]
    model: crate::ModelChoice,
    /// Number of candidates.
    #[arg(long, default_value_t = 5)]
    top: usize,
    /// Print the single result as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Which predictor answers.
    #[arg(long, value_enum, default_value_t = Kind::Model)]
    predictor: Kind,
    #[command(flatten)]
    tuning: crate::predictors::Tuning,
    /// The n-gram file for --predictor ngram and interpolated (made by `laya ngram`).
    #[arg(long)]
    ngram: Option<PathBuf>,
    /// How `--predictor interpolated` mixes: `linear`; `within-class` (the network keeps its
    /// mass on each replace count, the n-gram reorders the words inside it); `han-linear`
    /// (linear after a Han character, within-class elsewhere).
    #[arg(long, value_enum, default_value_t = crate::predictors::NgramMix::HanLinear)]
    ngram_mix: crate::predictors::NgramMix,
    /// The user file (docs/personalisation.md): the learned history is read from it at start
    /// (an empty one when it is missing; an unreadable one is set aside with a warning) and
    /// written back atomically at exit. Without it, what `{"learn"}` lines teach lives for the
    /// process.
    #[arg(long)]
    user: Option<PathBuf>,
    /// Learn nothing: every `{"learn"}` line answers `{"learned": 0}` (what was learned before
    /// still ranks).
    #[arg(long)]
    incognito: bool,
}

/// The predictor behind `laya predict`: the engine directly (zero-allocation path), or the
/// baseline through the harness trait.
enum Backend {
    Model(Box<Session>),
    Ngram(Box<LearningNgram>, Vec<Candidate>),
    Interpolated(Box<Interpolated>, Vec<Candidate>),
}

impl Backend {
    fn session(&mut self) -> &mut Session {
        match self {
            Backend::Model(s) => s,
            Backend::Ngram(p, _) => &mut p.session,
            Backend::Interpolated(p, _) => &mut p.model.session,
        }
    }

    fn answer(&mut self, context: &str, k: usize) -> Result<Out<'_>, CliError> {
        match self {
            Backend::Model(s) => Ok(to_out(&s.predict(context, k))),
            Backend::Ngram(p, buf) => harness_answer(&mut **p, buf, context, k),
            Backend::Interpolated(p, buf) => harness_answer(&mut **p, buf, context, k),
        }
    }
}

/// The answer of a predictor behind the harness's trait, kept in `buf`.
fn harness_answer<'a>(p: &mut dyn Predictor, buf: &'a mut Vec<Candidate>, context: &str, k: usize) -> Result<Out<'a>, CliError> {
    p.predict(context, k, buf).map_err(|e| CliError(e.to_string()))?;
    Ok(Out { candidates: buf.iter().map(|c| OutCandidate { word: &c.word, replace: c.replace, p: c.p }).collect() })
}

#[derive(Serialize)]
pub(crate) struct Out<'a> {
    candidates: Vec<OutCandidate<'a>>,
}

#[derive(Serialize)]
struct OutCandidate<'a> {
    word: &'a str,
    replace: usize,
    p: f32,
}

pub fn run(args: Args) -> Result<(), CliError> {
    if args.jsonl && args.context.is_some() {
        return Err(CliError("give either a context argument or --jsonl, not both".into()));
    }
    if !args.jsonl && args.context.is_none() {
        return Err(CliError("missing context: `laya predict \"今天天气\"` or `laya predict --jsonl`".into()));
    }
    let model = args.model.load()?;
    // The interpolated predictor mixes the model's best INTERPOLATION_DEPTH candidates.
    let depth = if args.predictor == Kind::Interpolated { INTERPOLATION_DEPTH } else { 1 };
    let mut session = Session::with_max_k(model, args.top.max(depth));
    args.tuning.apply(&mut session, args.tuning.check()?);
    if let Some(path) = &args.user {
        session.set_user(open_user(path)?);
    }
    session.user().write().set_incognito(args.incognito);
    let mut backend = match args.predictor {
        Kind::Model => Backend::Model(Box::new(session)),
        Kind::Ngram => Backend::Ngram(Box::new(LearningNgram::new(load_ngram(args.ngram.as_deref())?, session)), Vec::new()),
        Kind::Interpolated => {
            let ngram = load_ngram(args.ngram.as_deref())?;
            Backend::Interpolated(
                Box::new(Interpolated::new(ModelPredictor { session }, ngram, args.tuning.ngram_weight, args.ngram_mix)),
                Vec::new(),
            )
        }
    };
    let Some(context) = args.context else {
        let mut forgot = false;
        let streamed = jsonl(&mut backend, args.top, &mut forgot);
        // Saved even when stdout failed: what was learned is the person's, not the pipe's. In
        // incognito nothing is learned, so the file is written only when a word was forgotten.
        let saved = match &args.user {
            Some(path) if !args.incognito || forgot => backend.session().user().save(path).map_err(CliError::from),
            _ => Ok(()),
        };
        return streamed.and(saved);
    };
    let out = backend.answer(&context, args.top)?;
    if args.json {
        outln!("{}", serde_json::to_string(&out)?);
        return Ok(());
    }
    // `{:<20}` pads by chars, and a CJK character takes two columns: pad by display width, and
    // widen the column for a longer word so the numbers after it stay in line.
    let width = out.candidates.iter().map(|c| c.word.width()).fold(WORD_COLUMN, usize::max);
    outln!("{:>4}  {} {:>7}  {:>8}", "rank", pad("word", width), "replace", "p");
    for (i, c) in out.candidates.iter().enumerate() {
        outln!("{:>4}  {} {:>7}  {:>8.4}", i + 1, pad(c.word, width), c.replace, c.p);
    }
    Ok(())
}

/// The history in the `--user` file of `predict` and `serve`: refused before the first request
/// when it cannot be written back, not at exit when the history would be lost; an unreadable
/// one is set aside with a warning.
pub(crate) fn open_user(path: &std::path::Path) -> Result<User, CliError> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    if path.is_dir() || !dir.is_dir() {
        return Err(CliError(format!("--user {}: not a file in an existing directory", path.display())));
    }
    let opened = User::open(path)?;
    if let Some(aside) = &opened.set_aside {
        eprintln!("laya: warning: user file {}: {aside}", path.display());
    }
    Ok(opened.user)
}

/// The docs/evaluation.md §1 candidate object, shared by `predict --jsonl` and `serve`.
pub(crate) fn to_out<'a>(p: &laya_runtime::Predictions<'a>) -> Out<'a> {
    Out { candidates: p.iter().map(|c| OutCandidate { word: c.word, replace: c.replace, p: c.p }).collect() }
}

/// The least display width of the table's word column.
const WORD_COLUMN: usize = 20;

/// `word` followed by spaces up to `width` terminal columns.
fn pad(word: &str, width: usize) -> String {
    format!("{word}{}", " ".repeat(width.saturating_sub(word.width())))
}

/// One input line: exactly one of the keys (docs/evaluation.md §1 and §4).
#[derive(serde::Deserialize)]
struct In {
    context: Option<String>,
    learn: Option<String>,
    forget: Option<String>,
}

/// docs/evaluation.md §1: one output line per input line, in order, flushed; a bad line gets
/// `{"error": ...}` and the stream goes on; only a failing stdin ends it with an error.
fn jsonl(backend: &mut Backend, top: usize, forgot: &mut bool) -> Result<(), CliError> {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut line = Vec::new();
    let mut n = 0u64;
    loop {
        line.clear();
        let read = input.read_until(b'\n', &mut line).map_err(|e| CliError(format!("reading stdin: {e}")))?;
        if read == 0 {
            break;
        }
        n += 1;
        let mut text = trim_newline(&line);
        // Windows editors start UTF-8 files with a byte order mark; it is not part of the JSON.
        if n == 1 {
            text = text.strip_prefix(UTF8_BOM).unwrap_or(text);
        }
        // Checked before `In` is read: serde also reads a struct from an array
        // (`["今天", null, null]` would be a context).
        let reply = match not_an_object(text) {
            Some(kind) => {
                let msg = format!("line {n}: {kind}; a line must be a JSON object like {{\"context\": \"...\"}}");
                serde_json::json!({ "error": msg }).to_string()
            }
            None => reply(backend, text, n, top, forgot)?,
        };
        writeln!(out, "{reply}").and_then(|_| out.flush()).map_err(crate::stdout_error)?;
    }
    Ok(())
}

/// The answer to one line that is a JSON object or not JSON at all.
fn reply(backend: &mut Backend, text: &[u8], n: u64, top: usize, forgot: &mut bool) -> Result<String, CliError> {
    Ok(match from_json::<In>(text) {
        Ok(In { context: Some(c), learn: None, forget: None }) => serde_json::to_string(&backend.answer(&c, top)?)?,
        Ok(In { context: None, learn: Some(t), forget: None }) => {
            let learned = backend.session().learn(&t);
            serde_json::json!({ "learned": learned }).to_string()
        }
        Ok(In { context: None, learn: None, forget: Some(w) }) => {
            let forgotten = backend.session().user().write().forget(&w);
            *forgot |= forgotten;
            serde_json::json!({ "forgotten": forgotten }).to_string()
        }
        Ok(_) => {
            serde_json::json!({ "error": format!("line {n}: expected exactly one of \"context\", \"learn\", \"forget\"") }).to_string()
        }
        Err(e) => serde_json::to_string(&serde_json::json!({ "error": format!("line {n}: {}", describe(text, &e)) }))?,
    })
}

/// `text` read as JSON; docs/evaluation.md §1: a lone surrogate escape is valid JSON, it reads
/// as U+FFFD (for `predict --jsonl` and `serve` alike).
pub(crate) fn from_json<T: serde::de::DeserializeOwned>(text: &[u8]) -> Result<T, serde_json::Error> {
    match serde_json::from_slice::<T>(text) {
        Err(e) => lone_surrogates_replaced(text).map_or(Err(e), |fixed| serde_json::from_slice::<T>(&fixed)),
        ok => ok,
    }
}

/// The byte order mark some editors put at the start of a UTF-8 file.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// What `text` holds when it is valid JSON but not an object (`"an array"`, ...); `None` for an
/// object, and for a line that is not JSON at all, which gets the parser's message instead.
fn not_an_object(text: &[u8]) -> Option<&'static str> {
    if text.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        return None;
    }
    let value =
        serde_json::from_slice::<serde_json::Value>(text).ok().or_else(|| serde_json::from_slice(&lone_surrogates_replaced(text)?).ok())?;
    Some(match value {
        serde_json::Value::Object(_) => return None,
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Null => "null",
    })
}

/// `text` with every `\uD800`–`\uDFFF` escape that is not half of a surrogate pair
/// written `\uFFFD`; `None` when there is none.
fn lone_surrogates_replaced(text: &[u8]) -> Option<Vec<u8>> {
    let hex = |at: usize| -> Option<u32> {
        let digits = text.get(at..at + 4)?;
        u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
    };
    // The code unit of a `\u` escape starting at `at`.
    let unit = |at: usize| if text.get(at) == Some(&b'\\') && text.get(at + 1) == Some(&b'u') { hex(at + 2) } else { None };
    let (mut out, mut i, mut changed) = (Vec::with_capacity(text.len()), 0, false);
    while i < text.len() {
        if text[i] != b'\\' {
            out.push(text[i]);
            i += 1;
            continue;
        }
        match unit(i) {
            Some(0xD800..=0xDBFF) if matches!(unit(i + 6), Some(0xDC00..=0xDFFF)) => {
                out.extend_from_slice(&text[i..i + 12]);
                i += 12;
            }
            Some(0xD800..=0xDFFF) => {
                out.extend_from_slice(b"\\uFFFD");
                i += 6;
                changed = true;
            }
            _ => {
                // Any other escape: copy it whole, so an escaped backslash is never read as one.
                let end = (i + 2).min(text.len());
                out.extend_from_slice(&text[i..end]);
                i = end;
            }
        }
    }
    changed.then_some(out)
}

fn trim_newline(b: &[u8]) -> &[u8] {
    let b = b.strip_suffix(b"\n").unwrap_or(b);
    b.strip_suffix(b"\r").unwrap_or(b)
}

fn describe(text: &[u8], e: &serde_json::Error) -> String {
    if std::str::from_utf8(text).is_err() {
        "the line is not valid UTF-8".into()
    } else if text.iter().all(|c| c.is_ascii_whitespace()) {
        "empty line; expected {\"context\": \"...\"}, {\"learn\": \"...\"} or {\"forget\": \"...\"}".into()
    } else {
        format!("expected {{\"context\": \"...\"}}, {{\"learn\": \"...\"}} or {{\"forget\": \"...\"}}: {e}")
    }
}
