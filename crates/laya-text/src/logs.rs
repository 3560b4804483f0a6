//! Keyboard logs: the JSONL event format of docs/logs.md, its reader and writer, and simulated
//! events from plain text.

use crate::eval::{Candidate, PredictError, Predictor};
use crate::normalize::normalize_text;
use crate::segment::Segmenter;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::io::{self, BufRead, Write};

/// Newest event format version this reader understands.
pub const LOG_VERSION: u32 = 1;

/// One candidate shown on the bar.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shown {
    /// The word shown.
    pub word: String,
    /// How many trailing context characters it would replace.
    #[serde(default)]
    pub replace: u32,
}

/// One keyboard event: what was typed, what was shown, what was picked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Text before the cursor when the bar was shown.
    pub context: String,
    /// Candidates shown, in bar order.
    pub shown: Vec<Shown>,
    /// Index into `shown` of the candidate the person tapped; `None`: they tapped none (kept
    /// typing), so every shown candidate was a miss.
    pub clicked: Option<usize>,
    /// Importance of the event (default 1).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub weight: f32,
}

fn one() -> f32 {
    1.0
}

fn is_one(w: &f32) -> bool {
    *w == 1.0
}

#[derive(Deserialize)]
struct RawEvent {
    #[serde(default)]
    v: Option<u32>,
    context: String,
    shown: Vec<Shown>,
    #[serde(default)]
    clicked: Option<usize>,
    #[serde(default = "one")]
    weight: f32,
}

/// What is wrong with one line of a log.
#[derive(Debug, Clone, PartialEq)]
pub enum EventErrorKind {
    /// Not JSON, or not an object with the required fields.
    Json(String),
    /// `v` is newer than this reader.
    Version(u32),
    /// A shown word is empty or has whitespace/control characters.
    BadWord(usize),
    /// `shown[i].replace` is not below the word's length, or the context does not end with the
    /// word's first `replace` characters.
    BadReplace(usize),
    /// `clicked` is not an index into `shown`.
    BadClicked(usize),
    /// `weight` is negative or not finite.
    BadWeight,
}

/// An error in a log, with the 1-based line it is on.
#[derive(Debug)]
pub enum LogError {
    /// Reading failed (after `line` lines).
    Io {
        /// Lines read before the failure.
        line: usize,
        /// The underlying error.
        source: io::Error,
    },
    /// Line `line` is not a valid event.
    Event {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        kind: EventErrorKind,
    },
}

impl fmt::Display for EventErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EventErrorKind::Json(m) => write!(f, "not a valid event: {m}"),
            EventErrorKind::Version(v) => write!(f, "event version {v} is newer than this reader (version {LOG_VERSION}); update laya"),
            EventErrorKind::BadWord(i) => write!(f, "shown[{i}].word is empty or contains whitespace or control characters"),
            EventErrorKind::BadReplace(i) => write!(
                f,
                "shown[{i}].replace must be below the word's length and the context must end with that many of its first characters"
            ),
            EventErrorKind::BadClicked(i) => write!(f, "clicked = {i} is not an index into shown"),
            EventErrorKind::BadWeight => write!(f, "weight must be a finite number >= 0"),
        }
    }
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::Io { line, source } => write!(f, "reading the log after line {line}: {source}"),
            LogError::Event { line, kind } => write!(f, "log line {line}: {kind}"),
        }
    }
}

impl std::error::Error for LogError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LogError::Io { source, .. } => Some(source),
            LogError::Event { .. } => None,
        }
    }
}

/// What to do with an invalid line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// Count it, remember the first few errors, go on.
    Skip,
    /// Return the error.
    Stop,
}

/// Counts of a [`read_events`] run.
#[derive(Debug, Default)]
pub struct ReadStats {
    /// Lines read (blank lines included).
    pub lines: usize,
    /// Events returned.
    pub events: usize,
    /// Invalid lines skipped.
    pub skipped: usize,
    /// The first [`ReadStats::MAX_ERRORS`] errors, with their line numbers.
    pub errors: Vec<LogError>,
}

impl ReadStats {
    /// How many errors [`ReadStats::errors`] keeps.
    pub const MAX_ERRORS: usize = 10;
}

fn is_shown_word(w: &str) -> bool {
    !w.is_empty() && !w.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// Parses and validates one event line (see docs/logs.md).
///
/// ```
/// let e = laya_text::parse_event(r#"{"context":"今天天","shown":[{"word":"天气","replace":1}],"clicked":0,"extra":1}"#).unwrap();
/// assert_eq!(e.clicked, Some(0));
/// assert!(laya_text::parse_event(r#"{"context":"x","shown":[{"word":"yes","replace":1}],"clicked":null}"#).is_err());
/// ```
pub fn parse_event(line: &str) -> Result<Event, EventErrorKind> {
    let raw: RawEvent = serde_json::from_str(line).map_err(|e| EventErrorKind::Json(e.to_string()))?;
    if let Some(v) = raw.v {
        if v > LOG_VERSION {
            return Err(EventErrorKind::Version(v));
        }
    }
    let ctx_norm: Vec<char> = normalize_text(&raw.context).chars().collect();
    for (i, s) in raw.shown.iter().enumerate() {
        if !is_shown_word(&s.word) {
            return Err(EventErrorKind::BadWord(i));
        }
        let r = s.replace as usize;
        let wn: Vec<char> = normalize_text(&s.word).chars().collect();
        if r >= wn.len() || r > ctx_norm.len() || ctx_norm[ctx_norm.len() - r..] != wn[..r] {
            return Err(EventErrorKind::BadReplace(i));
        }
    }
    if let Some(c) = raw.clicked {
        if c >= raw.shown.len() {
            return Err(EventErrorKind::BadClicked(c));
        }
    }
    if !raw.weight.is_finite() || raw.weight < 0.0 {
        return Err(EventErrorKind::BadWeight);
    }
    Ok(Event { context: raw.context, shown: raw.shown, clicked: raw.clicked, weight: raw.weight })
}

/// Reads a JSONL log: one event per line, blank lines ignored.
///
/// With [`OnError::Stop`] the first invalid line is returned as an error; with
/// [`OnError::Skip`] it is counted in [`ReadStats::skipped`] (the first few kept in
/// [`ReadStats::errors`]). A read failure always stops.
///
/// ```
/// use laya_text::{read_events, OnError};
/// let log = "{\"context\":\"\",\"shown\":[{\"word\":\"我\",\"replace\":0}],\"clicked\":0}\n\nnot json\n";
/// let (events, stats) = read_events(log.as_bytes(), OnError::Skip).unwrap();
/// assert_eq!((events.len(), stats.lines, stats.skipped), (1, 3, 1));
/// assert!(read_events(log.as_bytes(), OnError::Stop).unwrap_err().to_string().contains("line 3"));
/// ```
pub fn read_events<R: BufRead>(reader: R, mode: OnError) -> Result<(Vec<Event>, ReadStats), LogError> {
    let mut stats = ReadStats::default();
    let mut events = Vec::new();
    for line in reader.lines() {
        let line = line.map_err(|source| LogError::Io { line: stats.lines, source })?;
        stats.lines += 1;
        if line.trim().is_empty() {
            continue;
        }
        match parse_event(&line) {
            Ok(e) => events.push(e),
            Err(kind) => {
                let err = LogError::Event { line: stats.lines, kind };
                match mode {
                    OnError::Stop => return Err(err),
                    OnError::Skip => {
                        stats.skipped += 1;
                        if stats.errors.len() < ReadStats::MAX_ERRORS {
                            stats.errors.push(err);
                        }
                    }
                }
            }
        }
    }
    stats.events = events.len();
    Ok((events, stats))
}

/// Writes one event as a JSON line (`v` included, `weight` only when it is not 1).
///
/// ```
/// use laya_text::{write_event, Event, Shown};
/// let e = Event { context: "he".into(), shown: vec![Shown { word: "hello".into(), replace: 2 }], clicked: Some(0), weight: 1.0 };
/// let mut buf = Vec::new();
/// write_event(&mut buf, &e).unwrap();
/// assert_eq!(String::from_utf8(buf).unwrap(), "{\"v\":1,\"context\":\"he\",\"shown\":[{\"word\":\"hello\",\"replace\":2}],\"clicked\":0}\n");
/// ```
pub fn write_event<W: Write>(mut w: W, e: &Event) -> io::Result<()> {
    #[derive(Serialize)]
    struct Out<'a> {
        v: u32,
        #[serde(flatten)]
        e: &'a Event,
    }
    serde_json::to_writer(&mut w, &Out { v: LOG_VERSION, e }).map_err(io::Error::other)?;
    w.write_all(b"\n")
}

/// Counts of a [`simulate_events`] run.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SimulateStats {
    /// Lines simulated.
    pub lines: usize,
    /// Words simulated.
    pub words: usize,
    /// Events emitted.
    pub events: usize,
    /// Events where the ranker did not show the typed word, so it was appended.
    pub appended: usize,
}

/// Error of [`simulate_events`]: the ranker or the sink failed.
#[derive(Debug)]
pub enum SimulateError {
    /// The ranker failed.
    Predict(PredictError),
    /// The sink (e.g. the output file) failed.
    Io(io::Error),
}

impl fmt::Display for SimulateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimulateError::Predict(e) => write!(f, "simulating events: {e}"),
            SimulateError::Io(e) => write!(f, "writing simulated events: {e}"),
        }
    }
}

impl std::error::Error for SimulateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SimulateError::Predict(e) => Some(e),
            SimulateError::Io(e) => Some(e),
        }
    }
}

/// Turns plain text into keyboard events (docs/logs.md "Simulated logs").
///
/// For every word W of every line (split by `seg`, typed as [`Segmenter::typed_line`]) and every
/// prefix length i = 0 .. len(W)−1: context = the line's typed text before W + W[..i];
/// shown = the ranker's top `k`; clicked = the index of (W, i) among them, or, when the ranker
/// did not show it, (W, i) is appended as an extra shown item and clicked. Every event thus
/// teaches the typed word. `progress` gets each line's byte length + 1.
///
/// ```
/// use laya_text::{simulate_events, Candidate, PredictError, Predictor, Segmenter, SegmentMode};
/// struct Empty;
/// impl Predictor for Empty {
///     fn predict(&mut self, _: &str, _: usize, out: &mut Vec<Candidate>) -> Result<(), PredictError> { out.clear(); Ok(()) }
/// }
/// let seg = Segmenter::new(SegmentMode::Segmented);
/// let mut events = Vec::new();
/// let stats = simulate_events(["hi you"].into_iter().map(String::from), &seg, &mut Empty, 5,
///     &mut |e| { events.push(e); Ok(()) }, &mut |_| {}).unwrap();
/// assert_eq!(stats.events, 5);
/// assert_eq!(events[4].context, "hi yo");
/// assert_eq!(events[4].shown[0].word, "you");
/// ```
pub fn simulate_events(
    lines: impl Iterator<Item = String>,
    seg: &Segmenter,
    ranker: &mut dyn Predictor,
    k: usize,
    sink: &mut dyn FnMut(Event) -> io::Result<()>,
    progress: &mut dyn FnMut(u64),
) -> Result<SimulateStats, SimulateError> {
    let mut stats = SimulateStats::default();
    let mut out: Vec<Candidate> = Vec::with_capacity(k + 1);
    for raw in lines {
        progress(raw.len() as u64 + 1);
        simulate_line(&raw, seg, ranker, k, &mut out, &mut stats, &mut |e| sink(e).map_err(SimulateError::Io))?;
    }
    Ok(stats)
}

/// [`simulate_events`] on `threads` threads, each with its own ranker from `make`; the events
/// reach `sink` in the order of the lines, so the log is byte-identical to the serial one
/// whatever the thread count.
///
/// ```
/// use laya_text::{simulate_events, simulate_events_parallel, Candidate, PredictError, Predictor, Segmenter, SegmentMode};
/// struct Empty;
/// impl Predictor for Empty {
///     fn predict(&mut self, _: &str, _: usize, out: &mut Vec<Candidate>) -> Result<(), PredictError> { out.clear(); Ok(()) }
/// }
/// let seg = Segmenter::new(SegmentMode::Segmented);
/// let lines: Vec<String> = (0..300).map(|i| format!("w{i} x")).collect();
/// let (mut one, mut three) = (Vec::new(), Vec::new());
/// simulate_events(lines.clone().into_iter(), &seg, &mut Empty, 5, &mut |e| { one.push(e); Ok(()) }, &mut |_| {}).unwrap();
/// simulate_events_parallel(3, &|| Ok(Empty), lines, &seg, 5, &mut |e| { three.push(e); Ok(()) }, &|_| {}).unwrap();
/// assert_eq!(one, three);
/// ```
pub fn simulate_events_parallel<P: Predictor>(
    threads: usize,
    make: &(dyn Fn() -> Result<P, PredictError> + Sync),
    lines: Vec<String>,
    seg: &Segmenter,
    k: usize,
    sink: &mut dyn FnMut(Event) -> io::Result<()>,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<SimulateStats, SimulateError> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    const CHUNK: usize = 64;
    type Done = (usize, Result<(Vec<Event>, SimulateStats), SimulateError>);
    let threads = threads.max(1);
    let (cursor, stop) = (AtomicUsize::new(0), AtomicBool::new(false));
    // Workers take chunks of lines in order from a shared cursor and hand back each chunk's
    // events; this thread writes them in chunk order. The channel is bounded so a slow sink
    // holds the workers back instead of buffering the whole log.
    let (tx, rx) = std::sync::mpsc::sync_channel::<Done>(threads * 4);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let tx = tx.clone();
            let (cursor, stop, lines) = (&cursor, &stop, &lines);
            scope.spawn(move || {
                let mut ranker = match make() {
                    Ok(r) => r,
                    Err(e) => {
                        stop.store(true, Ordering::Relaxed);
                        let _ = tx.send((usize::MAX, Err(SimulateError::Predict(e))));
                        return;
                    }
                };
                let mut out: Vec<Candidate> = Vec::with_capacity(k + 1);
                while !stop.load(Ordering::Relaxed) {
                    let c = cursor.fetch_add(1, Ordering::Relaxed);
                    let Some(chunk) = lines.chunks(CHUNK).nth(c) else { return };
                    let (mut events, mut stats) = (Vec::new(), SimulateStats::default());
                    let mut result = Ok(());
                    for raw in chunk {
                        progress(raw.len() as u64 + 1);
                        result = simulate_line(raw, seg, &mut ranker, k, &mut out, &mut stats, &mut |e| {
                            events.push(e);
                            Ok(())
                        });
                        if result.is_err() {
                            break;
                        }
                    }
                    if tx.send((c, result.map(|()| (events, stats)))).is_err() {
                        return;
                    }
                }
            });
        }
        drop(tx);
        let mut pending = std::collections::BTreeMap::new();
        let (mut next, mut total, mut first_err) = (0usize, SimulateStats::default(), None);
        // Drained to the end even after an error, so no worker stays blocked on a full channel.
        for (c, done) in rx {
            if c == usize::MAX {
                // A worker could not make its ranker.
                if let Err(e) = done {
                    first_err.get_or_insert(e);
                }
                continue;
            }
            pending.insert(c, done);
            while let Some(done) = pending.remove(&next) {
                next += 1;
                if first_err.is_some() {
                    continue;
                }
                let written = done.and_then(|(events, stats)| {
                    for e in events {
                        sink(e).map_err(SimulateError::Io)?;
                    }
                    Ok(stats)
                });
                match written {
                    Ok(st) => {
                        total.lines += st.lines;
                        total.words += st.words;
                        total.events += st.events;
                        total.appended += st.appended;
                    }
                    Err(e) => {
                        stop.store(true, Ordering::Relaxed);
                        first_err = Some(e);
                    }
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(total),
        }
    })
}

/// The events of one line of text (nothing for a blank line), in order, into `emit`.
fn simulate_line<P: Predictor + ?Sized>(
    raw: &str,
    seg: &Segmenter,
    ranker: &mut P,
    k: usize,
    out: &mut Vec<Candidate>,
    stats: &mut SimulateStats,
    emit: &mut dyn FnMut(Event) -> Result<(), SimulateError>,
) -> Result<(), SimulateError> {
    let raw = raw.trim_end_matches(['\n', '\r']);
    if raw.trim().is_empty() {
        return Ok(());
    }
    stats.lines += 1;
    let line = seg.typed_line(raw);
    for r in &line.words {
        stats.words += 1;
        let w = &line.text[r.clone()];
        for (i, (b, _)) in w.char_indices().enumerate() {
            let context = format!("{}{}", &line.text[..r.start], &w[..b]);
            out.clear();
            ranker.predict(&context, k, out).map_err(SimulateError::Predict)?;
            let mut shown: Vec<Shown> = out.iter().take(k).map(|c| Shown { word: c.word.clone(), replace: c.replace as u32 }).collect();
            let clicked = match shown.iter().position(|s| s.word == w && s.replace as usize == i) {
                Some(p) => p,
                None => {
                    stats.appended += 1;
                    shown.push(Shown { word: w.to_string(), replace: i as u32 });
                    shown.len() - 1
                }
            };
            stats.events += 1;
            emit(Event { context, shown, clicked: Some(clicked), weight: 1.0 })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn errors_are_typed_and_numbered() {
        let log = [
            r#"{"context":"a","shown":[],"clicked":null}"#,
            r#"{"context":"a","shown":[{"word":"ab","replace":1}],"clicked":1}"#,
            r#"{"v":2,"context":"a","shown":[],"clicked":null}"#,
            r#"{"context":"a","shown":[{"word":"a b","replace":0}],"clicked":0}"#,
            r#"{"context":"a","shown":[{"word":"ab","replace":1}],"clicked":0,"weight":-1}"#,
            r#"{"shown":[]}"#,
            r#"{"context":"１","shown":[{"word":"1月","replace":1}]}"#,
        ]
        .join("\n");
        let (ev, st) = read_events(log.as_bytes(), OnError::Skip).unwrap();
        assert_eq!(ev.len(), 2);
        assert_eq!(ev[1].clicked, None, "a missing clicked reads as null");
        assert_eq!(st.skipped, 5);
        let kinds: Vec<_> = st
            .errors
            .iter()
            .map(|e| match e {
                LogError::Event { line, kind } => (*line, kind.clone()),
                LogError::Io { .. } => unreachable!(),
            })
            .collect();
        assert_eq!(kinds[0], (2, EventErrorKind::BadClicked(1)));
        assert_eq!(kinds[1], (3, EventErrorKind::Version(2)));
        assert_eq!(kinds[2], (4, EventErrorKind::BadWord(0)));
        assert_eq!(kinds[3], (5, EventErrorKind::BadWeight));
        assert!(matches!(kinds[4], (6, EventErrorKind::Json(_))));
    }

    proptest! {
        #[test]
        fn write_then_read(ctx in "[a-z中 ]{0,6}", word in "[a-z中]{1,4}", clicked in proptest::option::of(0usize..1), weight in 0.0f32..10.0) {
            let e = Event { context: ctx, shown: vec![Shown { word, replace: 0 }], clicked, weight };
            let mut buf = Vec::new();
            write_event(&mut buf, &e).unwrap();
            let (ev, st) = read_events(&buf[..], OnError::Stop).unwrap();
            prop_assert_eq!(st.events, 1);
            prop_assert_eq!(&ev[0], &e);
        }

        #[test]
        fn reader_never_panics(s in "\\PC{0,80}") {
            let _ = read_events(s.as_bytes(), OnError::Skip);
        }
    }
}
