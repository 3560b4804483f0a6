//! The HTTP service of `laya serve` (docs/serve.md): routes, limits, JSON errors and the session
//! pool; the hot swap of the model is in `reload.rs`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use laya_runtime::{Model, Session, User};
use serde::Deserialize;

use super::reload::{self, Watched};
use crate::CliError;

/// The most candidates one request may ask for.
pub const MAX_K: usize = 32;
/// Request bodies above this are refused with 413: a context is the text before a cursor.
pub const MAX_BODY: usize = 64 * 1024;
/// Requests served at once; more wait their turn (2 cores run at most 2 predictions anyway).
const MAX_CONCURRENT: usize = 64;
/// A request (slow body included) that takes longer is answered 408.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Sessions kept; the least recently used one is dropped to make room for a new client id.
const MAX_SESSIONS: usize = 64;
/// The longest client id.
const MAX_SESSION_ID: usize = 128;
/// The header naming the client id when the body has no `"session"`.
const SESSION_HEADER: &str = "x-laya-session";
/// The header with the server-side time of the decision, in microseconds; the body stays the
/// docs/evaluation.md §1 object.
const TIME_HEADER: &str = "x-laya-us";

const PAGE: &str = include_str!("page.html");

/// A pooled session and the model generation it predicts with.
struct Pooled {
    session: Session,
    generation: u64,
}

#[derive(Default)]
struct Pool {
    clock: u64,
    slots: HashMap<String, (u64, Arc<tokio::sync::Mutex<Pooled>>)>,
}

pub struct State {
    model: RwLock<Arc<Model>>,
    /// Bumped on every swap; a session compares it with its own before predicting.
    generation: AtomicU64,
    /// `--model`, watched for replacement; `None` for the embedded model.
    watched: Option<Watched>,
    user_path: Option<PathBuf>,
    /// Serialises writes of the user file.
    saving: Mutex<()>,
    pool: Mutex<Pool>,
    make: Box<dyn Fn(Arc<Model>) -> Session + Send + Sync>,
    user: User,
}

impl State {
    pub fn new(
        model: Arc<Model>,
        watched: Option<Watched>,
        user_path: Option<PathBuf>,
        make: Box<dyn Fn(Arc<Model>) -> Session + Send + Sync>,
    ) -> State {
        // The one history every session shares, taken from a session so it is the one `make` sets.
        let user = make(model.clone()).user().clone();
        State {
            model: RwLock::new(model),
            generation: AtomicU64::new(0),
            watched,
            user_path,
            saving: Mutex::new(()),
            pool: Mutex::new(Pool::default()),
            make,
            user,
        }
    }

    fn current_model(&self) -> Arc<Model> {
        self.model.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(super) fn watched(&self) -> Option<&Watched> {
        self.watched.as_ref()
    }

    /// Makes `model` current; returns the new generation. Requests in flight finish on the old
    /// model, and each session moves at its next request (`refresh`).
    pub(super) fn swap_in(&self, model: Arc<Model>) -> u64 {
        *self.model.write().unwrap_or_else(|p| p.into_inner()) = model;
        self.generation.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The session of client `id`, made (and the least recently used one dropped) when new.
    fn session(&self, id: &str) -> Arc<tokio::sync::Mutex<Pooled>> {
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        pool.clock += 1;
        let now = pool.clock;
        if let Some((last, s)) = pool.slots.get_mut(id) {
            *last = now;
            return s.clone();
        }
        if pool.slots.len() >= MAX_SESSIONS {
            if let Some(oldest) = pool.slots.iter().min_by_key(|(_, (last, _))| *last).map(|(k, _)| k.clone()) {
                pool.slots.remove(&oldest);
            }
        }
        let generation = self.generation.load(Ordering::Acquire);
        let s = Arc::new(tokio::sync::Mutex::new(Pooled { session: (self.make)(self.current_model()), generation }));
        pool.slots.insert(id.to_string(), (now, s.clone()));
        s
    }

    /// Moves `p` to the current model after a swap (one atomic load otherwise).
    fn refresh(&self, p: &mut Pooled) {
        let generation = self.generation.load(Ordering::Acquire);
        if p.generation != generation {
            p.session.set_model(self.current_model());
            p.generation = generation;
        }
    }

    /// Writes the history back to `--user`, if given.
    fn save(&self) -> Result<(), ApiError> {
        let Some(path) = &self.user_path else { return Ok(()) };
        let _one = self.saving.lock().unwrap_or_else(|p| p.into_inner());
        self.user.save(path).map_err(|e| error(StatusCode::INTERNAL_SERVER_ERROR, format!("saving the user file {}: {e}", path.display())))
    }
}

/// hyper's read buffer, which must hold the request line and all headers: past it hyper answers
/// a bare 431 and closes the connection before [`limit_headers`] can answer. hyper's default
/// (about 400 KiB) is raised so that the JSON 431 covers headers up to 1 MiB; a connection's
/// buffer only grows this far while such headers arrive.
pub const HYPER_MAX_BUF: usize = 1024 * 1024;
/// Header lines hyper parses (its default is 100); more get hyper's bare 431, as above.
pub const HYPER_MAX_HEADERS: usize = 1024;

/// Binds `addr`, prints the bound address on stdout and serves until SIGINT or SIGTERM.
///
/// Connections are served by hyper's HTTP/1 builder, not `axum::serve`, which does not expose
/// the read buffer limit ([`HYPER_MAX_BUF`]).
pub async fn serve(state: Arc<State>, addr: SocketAddr) -> Result<(), CliError> {
    let mut listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| CliError(format!("cannot listen on {addr}: {e}")))?;
    let bound = listener.local_addr().map_err(|e| CliError(format!("cannot listen on {addr}: {e}")))?;
    outln!("laya serve: listening on http://{bound}");
    tokio::spawn(reload::on_sighup(state.clone()));
    tokio::spawn(reload::on_change(state.clone()));
    let app = router(state.clone());
    let mut http = hyper::server::conn::http1::Builder::new();
    http.max_buf_size(HYPER_MAX_BUF).max_headers(HYPER_MAX_HEADERS);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut stop = pin!(shutdown());
    loop {
        // axum's `Listener` retries after a transient accept error (a reset, or no file
        // descriptor left, after a pause) instead of ending the service.
        let (tcp, _) = tokio::select! {
            conn = axum::serve::Listener::accept(&mut listener) => conn,
            () = &mut stop => break,
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let conn = graceful.watch(http.serve_connection(hyper_util::rt::TokioIo::new(tcp), service));
        // A connection's error (a client gone, hyper's own 431) concerns that client alone.
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
    // No new connections; those open finish their request in flight, then close.
    drop(listener);
    graceful.shutdown().await;
    state.save().map_err(|_| CliError("could not save the user file at exit".into()))
}

pub fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/healthz", get(healthz))
        .route("/v1/predict", post(predict))
        .route("/v1/learn", post(learn))
        .route("/v1/forget", post(forget))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such path; see docs/serve.md for the API".into()) })
        .method_not_allowed_fallback(|| async { error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed for this path".into()) })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::from_fn(limit_headers))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, TIMEOUT))
        .layer(tower::limit::GlobalConcurrencyLimitLayer::new(MAX_CONCURRENT))
        .layer(axum::middleware::map_response(json_errors))
        .with_state(state)
}

/// Most header bytes (names and values) a request may carry, and most header lines: a browser
/// or a client library sends well under 2 KiB in under 20 lines.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
pub const MAX_HEADERS: usize = 64;

/// Refuses a request whose headers are over [`MAX_HEADER_BYTES`] or [`MAX_HEADERS`] with a JSON
/// 431, before any handler runs (hyper's own, larger read buffer bounds what reaches this).
async fn limit_headers(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let headers = req.headers();
    let bytes: usize = headers.iter().map(|(k, v)| k.as_str().len() + v.len()).sum();
    if bytes > MAX_HEADER_BYTES || headers.len() > MAX_HEADERS {
        let msg = format!(
            "the request headers are {bytes} bytes in {} lines; at most {MAX_HEADER_BYTES} bytes and {MAX_HEADERS} lines",
            headers.len()
        );
        return error(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, msg).into_response();
    }
    next.run(req).await
}

/// Errors made by the layers (the time-out's 408) get the JSON body every other error has.
async fn json_errors(res: Response) -> Response {
    let json = res.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if (res.status().is_client_error() || res.status().is_server_error()) && !json {
        let reason = res.status().canonical_reason().unwrap_or("error").to_lowercase();
        return error(res.status(), reason).into_response();
    }
    res
}

/// A refused or failed request: its status and what to do about it, sent as `{"error": ...}`.
struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, [(header::CONTENT_TYPE, "application/json")], serde_json::json!({ "error": self.1 }).to_string()).into_response()
    }
}

fn error(status: StatusCode, msg: String) -> ApiError {
    ApiError(status, msg)
}

fn json(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn page() -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE).into_response()
}

async fn healthz(axum::extract::State(st): axum::extract::State<Arc<State>>) -> Response {
    // Generation first: a swap stores the model before it counts, so a count that shows the swap
    // comes with the new model's checksum.
    let generation = st.generation.load(Ordering::Acquire);
    let checksum = format!("{:016x}", st.current_model().info().checksum);
    json(serde_json::json!({ "ok": true, "model_generation": generation, "model_checksum": checksum }).to_string())
}

/// The body as a `T`: 415 without a JSON content type, 413 when too large, 400 when it is not
/// a JSON object of the right fields and types.
fn body<T: serde::de::DeserializeOwned>(headers: &HeaderMap, body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let mime = ct.split(';').next().unwrap_or("").trim();
    if !mime.eq_ignore_ascii_case("application/json") {
        return Err(error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "send the body as JSON with Content-Type: application/json".into()));
    }
    let bytes = body.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => error(StatusCode::PAYLOAD_TOO_LARGE, format!("the request body is over {MAX_BODY} bytes")),
        status => error(status, e.body_text()),
    })?;
    // serde reads a struct from an array too (`["今天"]`); the API takes objects only.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(error(StatusCode::BAD_REQUEST, "the body must be a JSON object, e.g. {\"context\": \"今天\"}".into()));
    }
    crate::predict::from_json(&bytes).map_err(|e| error(StatusCode::BAD_REQUEST, format!("bad JSON body: {e}")))
}

/// The client id: the body's `"session"`, else the `x-laya-session` header, else the default "".
fn session_id<'a>(field: Option<&'a str>, headers: &'a HeaderMap) -> Result<&'a str, ApiError> {
    let id = field.or_else(|| headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok())).unwrap_or("");
    if id.len() > MAX_SESSION_ID {
        return Err(error(StatusCode::BAD_REQUEST, format!("a session id is at most {MAX_SESSION_ID} bytes")));
    }
    Ok(id)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PredictReq {
    context: String,
    k: Option<usize>,
    session: Option<String>,
}

async fn predict(
    axum::extract::State(st): axum::extract::State<Arc<State>>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: PredictReq = body(&headers, raw)?;
    let k = req.k.unwrap_or(5);
    if k > MAX_K {
        return Err(error(StatusCode::BAD_REQUEST, format!("\"k\" is at most {MAX_K}")));
    }
    let id = session_id(req.session.as_deref(), &headers)?;
    let session = st.session(id);
    let mut pooled = session.lock().await;
    st.refresh(&mut pooled);
    let start = Instant::now();
    let predictions = pooled.session.predict(&req.context, k);
    let us = start.elapsed().as_micros();
    let out = serde_json::to_string(&crate::predict::to_out(&predictions));
    drop(pooled);
    let text = out.map_err(|e| error(StatusCode::INTERNAL_SERVER_ERROR, format!("writing the answer: {e}")))?;
    let mut res = json(text);
    res.headers_mut().insert(TIME_HEADER, HeaderValue::from(us as u64));
    Ok(res)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LearnReq {
    learn: String,
    session: Option<String>,
}

/// docs/evaluation.md §4: `{"learn": text}` → `{"learned": n}`, for every session at once.
async fn learn(
    axum::extract::State(st): axum::extract::State<Arc<State>>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: LearnReq = body(&headers, raw)?;
    let id = session_id(req.session.as_deref(), &headers)?;
    let session = st.session(id);
    let learned = session.lock().await.session.learn(&req.learn);
    if learned > 0 {
        st.save()?;
    }
    Ok(json(serde_json::json!({ "learned": learned }).to_string()))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ForgetReq {
    forget: String,
    session: Option<String>,
}

/// docs/evaluation.md §4: `{"forget": word}` → `{"forgotten": bool}`.
async fn forget(
    axum::extract::State(st): axum::extract::State<Arc<State>>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: ForgetReq = body(&headers, raw)?;
    // The history is shared: the session id is checked but names no other history.
    session_id(req.session.as_deref(), &headers)?;
    let forgotten = st.user.write().forget(&req.forget);
    if forgotten {
        st.save()?;
    }
    Ok(json(serde_json::json!({ "forgotten": forgotten }).to_string()))
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown() {
    let int = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = int => {}, _ = term => {} }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn headers(content_type: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(content_type) {
            h.insert(header::CONTENT_TYPE, v);
        }
        h
    }

    proptest! {
        /// Any bytes under any content type: a request or a 400/415 with a message, no panic.
        #[test]
        fn any_body_is_read_or_refused_with_400_or_415(bytes in proptest::collection::vec(any::<u8>(), 0..256), ct in "[a-z/;= -]{0,30}") {
            for ct in [ct.as_str(), "application/json", "Application/JSON; charset=utf-8"] {
                if let Err(ApiError(status, msg)) = body::<PredictReq>(&headers(ct), Ok(Bytes::from(bytes.clone()))) {
                    prop_assert!(matches!(status.as_u16(), 400 | 415), "{status}");
                    prop_assert!(!msg.is_empty());
                }
            }
        }

        /// A well-formed request reads back as sent; a negative `k` is a 400.
        #[test]
        fn a_request_reads_back_as_sent(context in any::<String>(), k in -3i64..100, session in proptest::option::of("[a-z0-9]{0,8}")) {
            let sent = serde_json::json!({ "context": context, "k": k, "session": session }).to_string();
            match body::<PredictReq>(&headers("application/json"), Ok(Bytes::from(sent))) {
                Ok(req) => {
                    prop_assert!(k >= 0);
                    prop_assert_eq!(req.context, context);
                    prop_assert_eq!(req.k, Some(k as usize));
                    prop_assert_eq!(req.session, session);
                }
                Err(ApiError(status, _)) => {
                    prop_assert!(k < 0);
                    prop_assert_eq!(status, StatusCode::BAD_REQUEST);
                }
            }
        }
    }
}
