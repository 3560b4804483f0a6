//! Hot model update: one [`Engine`] serves predictions from the current model and can switch to
//! a new model file while other threads keep predicting.
//!
//! The rules (SPEC.md "Hot model update"):
//! * a new file becomes current only after [`Model::load`] has validated all of it (checksum
//!   included); a refused file changes nothing;
//! * every prediction is served by exactly one complete model: an [`EngineSession`] holds an
//!   `Arc<Model>` for the whole call, so a swap in the middle of a prediction cannot affect it;
//! * the steady state costs one atomic load per prediction and allocates nothing: a session
//!   clones the shared `Arc` only when the generation counter says the model changed.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use crate::error::LoadError;
use crate::model::Model;
use crate::session::{Predictions, Session, DEFAULT_MAX_K};

struct Shared {
    current: ArcSwap<Model>,
    /// Bumped after every store into `current`. Sessions compare it with the generation they
    /// last saw, which is cheaper than an `ArcSwap` load and never touches reference counts.
    generation: AtomicU64,
    /// Serialises swaps so that a [`SwapReport`]'s "old" is really the model it replaced.
    swapping: Mutex<()>,
}

/// A handle serving predictions from one loaded model that can switch to a new model file.
/// Cloning is cheap and every clone controls the same current model; it is `Send + Sync`.
///
/// ```
/// use laya_format::{testing::{random_model, TinyConfig}, write_model, GgmlType};
/// let dir = std::env::temp_dir().join(format!("laya-engine-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let (a, b) = (dir.join("a.laya"), dir.join("b.laya"));
/// for (path, seed) in [(&a, 1), (&b, 2)] {
///     let (meta, tensors) = random_model(&TinyConfig::small(), seed, GgmlType::F32);
///     std::fs::write(path, write_model(&meta, &tensors)?)?;
/// }
///
/// let engine = laya_runtime::Engine::open(&a)?;
/// let mut session = engine.session(); // one per thread
/// let before: Vec<String> = session.predict("he", 3).iter().map(|c| c.word.to_string()).collect();
///
/// let report = engine.swap_to(&b)?; // validated first; on error the old model keeps serving
/// assert_eq!(report.generation, 1);
/// assert!(engine.swap_to(dir.join("missing.laya")).is_err());
/// assert_eq!(engine.current().info().checksum, report.new_checksum);
///
/// session.predict("he", 3); // picks up model b
/// assert_eq!(session.model().info().checksum, report.new_checksum);
/// # let _ = before;
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Engine {
    shared: Arc<Shared>,
}

/// What a successful [`Engine::swap_to`] did.
#[derive(Debug, Clone)]
pub struct SwapReport {
    /// The generation now current (the first model is generation 0; each swap adds 1).
    pub generation: u64,
    /// Checksum of the model that was replaced.
    pub old_checksum: u64,
    /// Checksum of the model now serving.
    pub new_checksum: u64,
    /// Time spent mapping and validating the new file.
    pub load_time: Duration,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("generation", &self.generation())
            .field("checksum", &format_args!("{:016x}", self.current().info().checksum))
            .finish()
    }
}

impl Engine {
    /// Loads and validates `path` and serves it.
    pub fn open(path: impl AsRef<Path>) -> Result<Engine, LoadError> {
        Ok(Engine::from_model(Model::load(path)?))
    }

    /// Serves a model that is already loaded (embedded, from memory, or shared with others).
    pub fn from_model(model: Arc<Model>) -> Engine {
        Engine { shared: Arc::new(Shared { current: ArcSwap::new(model), generation: AtomicU64::new(0), swapping: Mutex::new(()) }) }
    }

    /// Loads and fully validates `path`, then makes it the current model. On error nothing
    /// changes: the old model keeps serving and the error says why the file was refused.
    ///
    /// Predictions already running finish on the model they started with; each
    /// [`EngineSession`] switches at its next prediction.
    pub fn swap_to(&self, path: impl AsRef<Path>) -> Result<SwapReport, LoadError> {
        let start = Instant::now();
        // Validation happens here, outside the swap lock, so a slow disk does not hold up a
        // concurrent swap to an in-memory model.
        let model = Model::load(path)?;
        let load_time = start.elapsed();
        Ok(SwapReport { load_time, ..self.swap_to_model(model) })
    }

    /// Makes an already-validated model current (a `Model` cannot exist unvalidated).
    pub fn swap_to_model(&self, model: Arc<Model>) -> SwapReport {
        // Packed here, off the keystroke path, so that sessions picking the model up allocate
        // nothing (a fresh model packs its word classes on first use otherwise).
        model.pack();
        let _guard = self.shared.swapping.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let new_checksum = model.info().checksum;
        let old = self.shared.current.swap(model);
        // Release pairs with the Acquire in `EngineSession::refresh`: a session that sees the
        // new generation also sees the new model in `current`.
        let generation = self.shared.generation.fetch_add(1, Ordering::AcqRel) + 1;
        SwapReport { generation, old_checksum: old.info().checksum, new_checksum, load_time: Duration::ZERO }
    }

    /// The model serving now (a new `Arc`; holding it keeps that model alive).
    pub fn current(&self) -> Arc<Model> {
        self.shared.current.load_full()
    }

    /// How many swaps have succeeded.
    pub fn generation(&self) -> u64 {
        self.shared.generation.load(Ordering::Acquire)
    }

    /// A prediction context for one thread, returning at most [`DEFAULT_MAX_K`] candidates.
    pub fn session(&self) -> EngineSession {
        self.session_with_max_k(DEFAULT_MAX_K)
    }

    /// A prediction context for one thread, returning at most `max_k` candidates.
    pub fn session_with_max_k(&self, max_k: usize) -> EngineSession {
        // Generation first, model second: if a swap lands in between, the session holds a
        // model at least as new as `seen` and simply reloads once more at its next call.
        let seen = self.generation();
        let model = self.current();
        EngineSession { shared: Arc::clone(&self.shared), session: Session::with_max_k(model, max_k), seen }
    }
}

/// One thread's prediction context on an [`Engine`]: a [`Session`] that follows swaps.
/// Holds the engine's shared state, so it stays valid after every `Engine` clone is dropped.
///
/// ```no_run
/// let engine = laya_runtime::Engine::open("model.laya")?;
/// let worker = {
///     let engine = engine.clone();
///     std::thread::spawn(move || {
///         let mut s = engine.session();
///         for _ in 0..1000 {
///             s.predict("hel", 5);
///         }
///     })
/// };
/// engine.swap_to("new.laya")?;
/// worker.join().unwrap();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct EngineSession {
    shared: Arc<Shared>,
    session: Session,
    seen: u64,
}

impl EngineSession {
    /// Picks up the engine's current model if a swap happened since the last call. Costs one
    /// atomic load when nothing changed.
    #[inline]
    pub fn refresh(&mut self) {
        let generation = self.shared.generation.load(Ordering::Acquire);
        if generation != self.seen {
            self.seen = generation;
            self.session.set_model(self.shared.current.load_full());
        }
    }

    /// Ranks the `k` most likely candidates after `context` on the engine's current model
    /// (see [`Session::predict`]). Allocates nothing unless a swap brought a larger model.
    pub fn predict(&mut self, context: &str, k: usize) -> Predictions<'_> {
        self.refresh();
        self.session.predict(context, k)
    }

    /// The model that served (or will serve) this session's last prediction.
    pub fn model(&self) -> &Arc<Model> {
        self.session.model()
    }

    /// The underlying session, for profiling and raw outputs. A model set on it by hand
    /// (`Session::set_model`) serves only until the engine's next swap.
    pub fn session(&mut self) -> &mut Session {
        &mut self.session
    }

    /// Touches the current model's pages and runs a few predictions (see [`Session::warm_up`]).
    pub fn warm_up(&mut self) {
        self.refresh();
        self.session.warm_up();
    }
}

// Engines are shared across threads and sessions move to worker threads: keep it that way.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    const fn send<T: Send>() {}
    send_sync::<Engine>();
    send::<EngineSession>();
};
