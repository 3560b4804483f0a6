//! The C ABI of Laya: opaque handles for an engine (one hot-swappable model), per-thread
//! sessions and a user's learned history (shared between sessions, kept in a user file),
//! predictions written into caller-owned arrays without allocating, status codes plus a
//! thread-local error message. The C declarations are in `include/laya.h`, kept in sync
//! with this file by `tests/header.rs`.
//!
//! The same functions are callable from Rust (the `rlib` crate type), which is how the tests
//! exercise them:
//!
//! ```no_run
//! use laya_ffi::*;
//! use std::ptr;
//! let mut engine = ptr::null_mut();
//! // SAFETY: a NUL-terminated path and a valid out-pointer.
//! let st = unsafe { laya_engine_open(c"model.laya".as_ptr(), &mut engine) };
//! assert_eq!(st, LAYA_OK);
//! let mut session = ptr::null_mut();
//! // SAFETY: `engine` came from laya_engine_open.
//! assert_eq!(unsafe { laya_session_new(engine, &mut session) }, LAYA_OK);
//! let mut out = [laya_candidate::EMPTY; 5];
//! let mut n = 0;
//! let ctx = "今天天气";
//! // SAFETY: `ctx` is `ctx.len()` readable bytes; `out` has room for 5 candidates.
//! let st = unsafe { laya_session_predict(session, ctx.as_ptr().cast(), ctx.len(), 5, out.as_mut_ptr(), 5, &mut n) };
//! assert_eq!(st, LAYA_OK);
//! // SAFETY: both handles are live and not used afterwards.
//! unsafe { laya_session_free(session); laya_engine_free(engine) };
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]
#![allow(non_camel_case_types)]

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::ptr;

use laya_runtime::{Engine, EngineSession, LoadError, User, UserFileError, DEFAULT_MAX_K};

/// Result of every fallible call. `LAYA_OK` is 0; anything else is an error whose details are
/// in [`laya_last_error_message`].
pub type laya_status = i32;
/// Success.
pub const LAYA_OK: laya_status = 0;
/// A required pointer argument was NULL.
pub const LAYA_ERR_NULL_ARGUMENT: laya_status = 1;
/// A context, committed text, a word or (off POSIX) a path is not valid UTF-8.
pub const LAYA_ERR_INVALID_UTF8: laya_status = 2;
/// A model file could not be opened or read, or a user file could not be read or written.
pub const LAYA_ERR_IO: laya_status = 3;
/// A model file failed validation (corrupt, truncated, wrong version, bad checksum...).
pub const LAYA_ERR_INVALID_MODEL: laya_status = 4;
/// A valid model file this runtime cannot run.
pub const LAYA_ERR_UNSUPPORTED_MODEL: laya_status = 5;
/// A bug inside Laya was caught at the boundary (no panic crosses into C); freeing the handles
/// involved is still safe.
pub const LAYA_ERR_PANIC: laya_status = 6;
/// An argument is outside the values the call accepts (an unknown completion rule, ...).
pub const LAYA_ERR_INVALID_ARGUMENT: laya_status = 7;

/// How a session combines the word and replace heads into candidate scores
/// (`laya_runtime::CompletionRule`; docs/format.md §3 step 6).
pub type laya_completion_rule = i32;
/// Splits each word's probability between "next word" and "completion".
pub const LAYA_COMPLETION_MARGINAL: laya_completion_rule = 0;
/// `P(w)·P(i)^beta` (see [`laya_session_set_completion_exponent`]).
pub const LAYA_COMPLETION_PRODUCT: laya_completion_rule = 1;
/// `P(i)·P(w)` renormalised over the words that start with the typed characters.
pub const LAYA_COMPLETION_CONDITIONAL: laya_completion_rule = 2;
/// A word that continues the typed characters is offered only as a completion, its
/// probability split between its completions in proportion to the replace head (the default).
pub const LAYA_COMPLETION_SPLIT: laya_completion_rule = 3;

/// One candidate word of a prediction.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct laya_candidate {
    /// NUL-terminated UTF-8, owned by the session; valid until the next predict on that
    /// session or its free.
    pub word: *const c_char,
    /// Length of `word` in bytes, without the NUL.
    pub word_len: usize,
    /// How many trailing characters of the context the word completes (0 = next word).
    pub replace: u32,
    /// Probability among all admissible (word, replace) pairs.
    pub p: f32,
}

impl laya_candidate {
    /// An empty candidate, for initialising output arrays.
    pub const EMPTY: laya_candidate = laya_candidate { word: ptr::null(), word_len: 0, replace: 0, p: 0.0 };
}

/// Opaque: one served model that can be swapped; shareable between threads.
pub struct laya_engine {
    engine: Engine,
}

/// Opaque: one thread's prediction context on an engine.
pub struct laya_session {
    inner: EngineSession,
    /// The words of the last prediction, each NUL-terminated: C wants terminated strings, the
    /// lexicon stores them unterminated. Grows to a high-water mark, then never allocates.
    words: Vec<u8>,
    offsets: Vec<usize>,
}

/// Opaque: one person's learned history (`laya_runtime::User`): the words they committed,
/// which word followed which, the blocklist and the incognito switch. Shareable between
/// threads and sessions; each session given it holds its own reference, so freeing the
/// handle does not end the sessions' use of it.
pub struct laya_user {
    user: User,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: &str) {
    let c = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
    // Ignored when the thread is being torn down: there is nobody left to read the message.
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = c);
}

type Failure = (laya_status, String);

/// Runs one entry point: maps errors to a status and the thread's message, and stops panics
/// at the boundary (unwinding into C is undefined behaviour).
fn guard(f: impl FnOnce() -> Result<(), Failure>) -> laya_status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => LAYA_OK,
        Ok(Err((status, msg))) => {
            set_error(&msg);
            status
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_error(&format!("internal error in Laya (please report): {what}"));
            LAYA_ERR_PANIC
        }
    }
}

fn null(what: &str) -> Failure {
    (LAYA_ERR_NULL_ARGUMENT, format!("{what} is NULL"))
}

fn load_failure(e: LoadError) -> Failure {
    let status = match e {
        LoadError::Io { .. } | LoadError::IsDirectory { .. } => LAYA_ERR_IO,
        LoadError::Format(_) | LoadError::Prepared(_) => LAYA_ERR_INVALID_MODEL,
        LoadError::Kernel(_) => LAYA_ERR_UNSUPPORTED_MODEL,
    };
    (status, e.to_string())
}

/// A user file that could not be read or written. `User::open` and `User::save` fail only
/// with `UserFileError::Io` (an unreadable file is set aside, not an error).
fn user_file_failure(e: UserFileError) -> Failure {
    (LAYA_ERR_IO, e.to_string())
}

/// The UTF-8 text `utf8[0..len]`, named `what` in error messages.
///
/// # Safety
/// `utf8` is NULL (then `len` must be 0, or the call fails) or `len` bytes readable for `'a`.
unsafe fn text_arg<'a>(utf8: *const c_char, len: usize, what: &str) -> Result<&'a str, Failure> {
    let bytes: &[u8] = if len == 0 {
        &[]
    } else if utf8.is_null() {
        return Err(null(&format!("utf8 (with len > 0) for the {what}")));
    } else {
        // SAFETY: non-NULL and `len` readable bytes for `'a` by the caller's contract.
        unsafe { std::slice::from_raw_parts(utf8.cast::<u8>(), len) }
    };
    std::str::from_utf8(bytes).map_err(|e| (LAYA_ERR_INVALID_UTF8, format!("{what} is not valid UTF-8: {e}")))
}

/// # Safety
/// `path` is NULL or a NUL-terminated string.
unsafe fn path_arg(path: *const c_char) -> Result<PathBuf, Failure> {
    if path.is_null() {
        return Err(null("path"));
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        Ok(PathBuf::from(std::ffi::OsStr::from_bytes(bytes)))
    }
    #[cfg(not(unix))]
    {
        std::str::from_utf8(bytes).map(PathBuf::from).map_err(|e| (LAYA_ERR_INVALID_UTF8, format!("path is not valid UTF-8: {e}")))
    }
}

/// The library version, a static NUL-terminated string. Thread-safe.
#[no_mangle]
pub extern "C" fn laya_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// A static, NUL-terminated name for a status code ("LAYA_OK", ...). Thread-safe.
#[no_mangle]
pub extern "C" fn laya_status_name(status: laya_status) -> *const c_char {
    let name: &'static CStr = match status {
        LAYA_OK => c"LAYA_OK",
        LAYA_ERR_NULL_ARGUMENT => c"LAYA_ERR_NULL_ARGUMENT",
        LAYA_ERR_INVALID_UTF8 => c"LAYA_ERR_INVALID_UTF8",
        LAYA_ERR_IO => c"LAYA_ERR_IO",
        LAYA_ERR_INVALID_MODEL => c"LAYA_ERR_INVALID_MODEL",
        LAYA_ERR_UNSUPPORTED_MODEL => c"LAYA_ERR_UNSUPPORTED_MODEL",
        LAYA_ERR_PANIC => c"LAYA_ERR_PANIC",
        LAYA_ERR_INVALID_ARGUMENT => c"LAYA_ERR_INVALID_ARGUMENT",
        _ => c"LAYA_UNKNOWN_STATUS",
    };
    name.as_ptr()
}

/// The message of the most recent failed call on this thread ("" if none), NUL-terminated;
/// also the warning of a [`laya_user_open`] that set an unreadable user file aside. Valid
/// until the next failing Laya call (or such an open) on the same thread. Thread-safe (per
/// thread).
#[no_mangle]
pub extern "C" fn laya_last_error_message() -> *const c_char {
    catch_unwind(|| LAST_ERROR.try_with(|e| e.borrow().as_ptr()).unwrap_or(c"".as_ptr())).unwrap_or(c"".as_ptr())
}

/// Opens and fully validates a model file and returns an engine serving it in `*out_engine`.
///
/// # Safety
/// `path` is NULL or NUL-terminated; `out_engine` is NULL or valid for one pointer write.
#[no_mangle]
pub unsafe extern "C" fn laya_engine_open(path: *const c_char, out_engine: *mut *mut laya_engine) -> laya_status {
    guard(|| {
        if out_engine.is_null() {
            return Err(null("out_engine"));
        }
        // SAFETY: non-NULL; the caller guarantees it is writable.
        unsafe { *out_engine = ptr::null_mut() };
        // SAFETY: forwarded caller contract on `path`.
        let path = unsafe { path_arg(path) }?;
        let engine = Engine::open(&path).map_err(load_failure)?;
        let handle = Box::into_raw(Box::new(laya_engine { engine }));
        // SAFETY: as above.
        unsafe { *out_engine = handle };
        Ok(())
    })
}

/// Frees an engine. NULL is ignored. Sessions created from it stay valid (they share the
/// model) and must still be freed.
///
/// # Safety
/// `engine` is NULL or a live handle from [`laya_engine_open`], not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn laya_engine_free(engine: *mut laya_engine) {
    if engine.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the handle was made by Box::into_raw in laya_engine_open and is freed once.
        drop(unsafe { Box::from_raw(engine) });
    }));
}

/// Validates the model file at `path` completely and, only if it passes, makes it the model
/// every session uses from its next prediction. On error the old model keeps serving.
///
/// # Safety
/// `engine` is NULL or a live engine handle; `path` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn laya_engine_swap(engine: *const laya_engine, path: *const c_char) -> laya_status {
    guard(|| {
        // SAFETY: NULL or a live handle by the caller's contract; only shared access.
        let engine = unsafe { engine.as_ref() }.ok_or_else(|| null("engine"))?;
        // SAFETY: forwarded caller contract on `path`.
        let path = unsafe { path_arg(path) }?;
        engine.engine.swap_to(&path).map(drop).map_err(load_failure)
    })
}

/// Writes the checksum of the engine's current model to `*out_checksum`.
///
/// # Safety
/// `engine` is NULL or a live engine handle; `out_checksum` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn laya_engine_checksum(engine: *const laya_engine, out_checksum: *mut u64) -> laya_status {
    guard(|| {
        // SAFETY: NULL or a live handle by the caller's contract.
        let engine = unsafe { engine.as_ref() }.ok_or_else(|| null("engine"))?;
        // SAFETY: NULL or writable by the caller's contract.
        let out = unsafe { out_checksum.as_mut() }.ok_or_else(|| null("out_checksum"))?;
        *out = engine.engine.current().info().checksum;
        Ok(())
    })
}

/// Creates a session (scratch buffers for one thread) on `engine`.
///
/// # Safety
/// `engine` is NULL or a live engine handle; `out_session` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn laya_session_new(engine: *const laya_engine, out_session: *mut *mut laya_session) -> laya_status {
    guard(|| {
        if out_session.is_null() {
            return Err(null("out_session"));
        }
        // SAFETY: non-NULL and writable by the caller's contract.
        unsafe { *out_session = ptr::null_mut() };
        // SAFETY: NULL or a live handle by the caller's contract.
        let engine = unsafe { engine.as_ref() }.ok_or_else(|| null("engine"))?;
        let mut inner = engine.engine.session();
        inner.warm_up();
        let session = laya_session {
            inner,
            // Typical words are a few bytes; this covers most lexicons without ever growing.
            words: Vec::with_capacity(DEFAULT_MAX_K * 32),
            offsets: Vec::with_capacity(DEFAULT_MAX_K),
        };
        // SAFETY: as above.
        unsafe { *out_session = Box::into_raw(Box::new(session)) };
        Ok(())
    })
}

/// Frees a session and the words of its last prediction. NULL is ignored.
///
/// # Safety
/// `session` is NULL or a live handle from [`laya_session_new`], not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn laya_session_free(session: *mut laya_session) {
    if session.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: made by Box::into_raw in laya_session_new and freed once.
        drop(unsafe { Box::from_raw(session) });
    }));
}

/// Ranks the `min(k, cap, 64)` most likely candidates after the context `utf8[0..len]` and
/// writes them to `out[0..*n_out]`, best first. Allocates nothing in the steady state.
///
/// # Safety
/// `session` is NULL or a live session used by no other thread during the call; `utf8` is
/// NULL (only with `len == 0`) or `len` readable bytes; `out` is NULL (only with `cap == 0`)
/// or `cap` writable candidates; `n_out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn laya_session_predict(
    session: *mut laya_session,
    utf8: *const c_char,
    len: usize,
    k: usize,
    out: *mut laya_candidate,
    cap: usize,
    n_out: *mut usize,
) -> laya_status {
    guard(|| {
        if n_out.is_null() {
            return Err(null("n_out"));
        }
        // SAFETY: non-NULL and writable by the caller's contract.
        unsafe { *n_out = 0 };
        // SAFETY: NULL or a live session with exclusive access by the caller's contract.
        let s = unsafe { session.as_mut() }.ok_or_else(|| null("session"))?;
        // SAFETY: forwarded caller contract on `utf8` and `len`; the text lives only for this
        // call.
        let context = unsafe { text_arg(utf8, len, "context") }?;
        if cap > 0 && out.is_null() {
            return Err(null("out (with cap > 0)"));
        }
        let want = k.min(cap);

        let laya_session { inner, words, offsets } = s;
        let preds = inner.predict(context, want);
        words.clear();
        offsets.clear();
        for c in preds.iter() {
            offsets.push(words.len());
            words.extend_from_slice(c.word.as_bytes());
            words.push(0);
        }
        let n = preds.len();
        let out: &mut [laya_candidate] = if n == 0 {
            &mut []
        } else {
            // SAFETY: non-NULL (checked above since n <= want <= cap) and `cap >= n`
            // writable candidates by the caller's contract.
            unsafe { std::slice::from_raw_parts_mut(out, n) }
        };
        for ((slot, c), &off) in out.iter_mut().zip(preds.iter()).zip(offsets.iter()) {
            *slot = laya_candidate {
                // `words` is not touched again until the next predict, so the pointers stay valid.
                word: words[off..].as_ptr().cast(),
                word_len: c.word.len(),
                replace: u32::try_from(c.replace).unwrap_or(u32::MAX),
                p: c.p,
            };
        }
        // SAFETY: checked non-NULL above.
        unsafe { *n_out = n };
        Ok(())
    })
}

/// Writes the checksum of the model that served this session's last prediction.
///
/// # Safety
/// `session` is NULL or a live session; `out_checksum` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn laya_session_checksum(session: *const laya_session, out_checksum: *mut u64) -> laya_status {
    guard(|| {
        // SAFETY: NULL or a live handle by the caller's contract; only shared access.
        let s = unsafe { session.as_ref() }.ok_or_else(|| null("session"))?;
        // SAFETY: NULL or writable by the caller's contract.
        let out = unsafe { out_checksum.as_mut() }.ok_or_else(|| null("out_checksum"))?;
        *out = s.inner.model().info().checksum;
        Ok(())
    })
}

/// Chooses how the session combines the word and replace heads: `LAYA_COMPLETION_SPLIT`
/// (the default), `LAYA_COMPLETION_MARGINAL`, `LAYA_COMPLETION_PRODUCT` or
/// `LAYA_COMPLETION_CONDITIONAL` (see
/// `laya_runtime::CompletionRule`). Any other value is refused with `LAYA_ERR_INVALID_ARGUMENT`
/// and leaves the session as it was. Kept across model swaps.
///
/// # Safety
/// `session` is NULL or a live session used by no other thread during the call.
#[no_mangle]
pub unsafe extern "C" fn laya_session_set_completion_rule(session: *mut laya_session, rule: laya_completion_rule) -> laya_status {
    guard(|| {
        // SAFETY: NULL or a live handle used by this thread only, by the caller's contract.
        let s = unsafe { session.as_mut() }.ok_or_else(|| null("session"))?;
        let rule = match rule {
            LAYA_COMPLETION_MARGINAL => laya_runtime::CompletionRule::Marginal,
            LAYA_COMPLETION_PRODUCT => laya_runtime::CompletionRule::Product,
            LAYA_COMPLETION_CONDITIONAL => laya_runtime::CompletionRule::Conditional,
            LAYA_COMPLETION_SPLIT => laya_runtime::CompletionRule::Split,
            other => {
                return Err((
                    LAYA_ERR_INVALID_ARGUMENT,
                    format!("unknown completion rule {other} (expected LAYA_COMPLETION_MARGINAL, _SPLIT, _PRODUCT or _CONDITIONAL)"),
                ))
            }
        };
        s.inner.session().set_completion_rule(rule);
        Ok(())
    })
}

/// Sets the exponent `beta` of `LAYA_COMPLETION_PRODUCT`: a completion scores
/// `P(w)·P(i)^beta` (smaller shows more completions, see `Session::set_completion_exponent`);
/// no effect under the other rules. Values outside `0..=1` are clamped, NaN means 1. Kept
/// across model swaps.
///
/// # Safety
/// `session` is NULL or a live session used by no other thread during the call.
#[no_mangle]
pub unsafe extern "C" fn laya_session_set_completion_exponent(session: *mut laya_session, beta: f32) -> laya_status {
    guard(|| {
        // SAFETY: NULL or a live handle used by this thread only, by the caller's contract.
        let s = unsafe { session.as_mut() }.ok_or_else(|| null("session"))?;
        s.inner.session().set_completion_exponent(beta);
        Ok(())
    })
}

/// Sets the weight `lambda` of the completion prior (`Session::set_completion_prior`; default
/// 0, the network alone): words completing the typed characters are re-ranked towards a general-purpose
/// dictionary's frequencies when the model file carries them (`laya prior`); 0 turns it off.
/// Values outside `0..=2` are clamped, NaN means 0. Kept across model swaps. Recomputes one
/// factor per lexicon word: call it when settings change, not per keystroke.
///
/// # Safety
/// `session` is NULL or a live session used by no other thread during the call.
#[no_mangle]
pub unsafe extern "C" fn laya_session_set_completion_prior(session: *mut laya_session, lambda: f32) -> laya_status {
    guard(|| {
        // SAFETY: NULL or a live handle used by this thread only, by the caller's contract.
        let s = unsafe { session.as_mut() }.ok_or_else(|| null("session"))?;
        s.inner.session().set_completion_prior(lambda);
        Ok(())
    })
}

/// Sets the weight `w` of the word trigram the model file carries (`Session::set_ngram_weight`;
/// default 0.3, `laya attach-ngram` stores one): each candidate scores `(1 − w)·P_network +
/// w·P_ngram`; 0 ranks by the network alone. No effect with a model without one. Values outside
/// `0..=1` are clamped, NaN means the default. Kept across model swaps.
///
/// # Safety
/// `session` is NULL or a live session used by no other thread during the call.
#[no_mangle]
pub unsafe extern "C" fn laya_session_set_ngram_weight(session: *mut laya_session, w: f32) -> laya_status {
    guard(|| {
        // SAFETY: NULL or a live handle used by this thread only, by the caller's contract.
        let s = unsafe { session.as_mut() }.ok_or_else(|| null("session"))?;
        s.inner.session().set_ngram_weight(w);
        Ok(())
    })
}

/// Allows one punctuation candidate on the bar when `on` is non-zero (`Session::set_punctuation_slot`;
/// default 0: a keyboard types punctuation with its own keys, so no punctuation word is a
/// candidate). With the slot, the most likely punctuation word joins the bar where its
/// probability ranks it, at most one, in its Chinese form after Chinese text (`，` for `,`).
/// Kept across model swaps.
///
/// # Safety
/// `session` is NULL or a live session used by no other thread during the call.
#[no_mangle]
pub unsafe extern "C" fn laya_session_set_punctuation_slot(session: *mut laya_session, on: i32) -> laya_status {
    guard(|| {
        // SAFETY: NULL or a live handle used by this thread only, by the caller's contract.
        let s = unsafe { session.as_mut() }.ok_or_else(|| null("session"))?;
        s.inner.session().set_punctuation_slot(on != 0);
        Ok(())
    })
}

/// Drops what the session kept from its previous prediction (a relative_causal model's keys and
/// values, `Session::forget_context`), so the next prediction is computed whole. Predictions
/// are the same either way: the session already recomputes whenever a context does not extend
/// the previous one by a few characters. Constant time.
///
/// # Safety
/// `session` is NULL or a live session used by no other thread during the call.
#[no_mangle]
pub unsafe extern "C" fn laya_session_forget_context(session: *mut laya_session) -> laya_status {
    guard(|| {
        // SAFETY: NULL or a live handle used by this thread only, by the caller's contract.
        let s = unsafe { session.as_mut() }.ok_or_else(|| null("session"))?;
        s.inner.session().forget_context();
        Ok(())
    })
}

/// Creates an empty in-memory history in `*out_user` (see [`laya_user_open`] for one kept in a
/// file; [`laya_user_save`] can still write this one to a file).
///
/// # Safety
/// `out_user` is NULL or valid for one pointer write.
#[no_mangle]
pub unsafe extern "C" fn laya_user_new(out_user: *mut *mut laya_user) -> laya_status {
    guard(|| {
        if out_user.is_null() {
            return Err(null("out_user"));
        }
        let handle = Box::into_raw(Box::new(laya_user { user: User::new() }));
        // SAFETY: non-NULL; the caller guarantees it is writable.
        unsafe { *out_user = handle };
        Ok(())
    })
}

/// Opens the history stored in the user file `path` (`laya_runtime::User::open`) into
/// `*out_user`. A missing file gives an empty history (the first [`laya_user_save`] creates
/// it). A file that is not a readable user file (damaged, truncated, foreign, from a newer
/// Laya) is renamed to `<path>.corrupt-<seconds>` and the history starts empty: the call still
/// returns `LAYA_OK`, writes 1 to `*out_set_aside` and leaves a warning naming the new path in
/// [`laya_last_error_message`], for the keyboard to show; otherwise it writes 0 there. Only an
/// I/O error (no permission, the rename failing, ...) is an error: `LAYA_ERR_IO`, with
/// `*out_user` NULL.
///
/// # Safety
/// `path` is NULL or NUL-terminated; `out_user` is NULL or valid for one pointer write;
/// `out_set_aside` is NULL (then not written) or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn laya_user_open(path: *const c_char, out_user: *mut *mut laya_user, out_set_aside: *mut i32) -> laya_status {
    guard(|| {
        if out_user.is_null() {
            return Err(null("out_user"));
        }
        // SAFETY: non-NULL; the caller guarantees it is writable.
        unsafe { *out_user = ptr::null_mut() };
        // SAFETY: NULL or writable by the caller's contract.
        let mut set_aside = unsafe { out_set_aside.as_mut() };
        if let Some(flag) = set_aside.as_deref_mut() {
            *flag = 0;
        }
        // SAFETY: forwarded caller contract on `path`.
        let path = unsafe { path_arg(path) }?;
        let opened = User::open(&path).map_err(user_file_failure)?;
        if let Some(aside) = &opened.set_aside {
            set_error(&aside.to_string());
            if let Some(flag) = set_aside {
                *flag = 1;
            }
        }
        let handle = Box::into_raw(Box::new(laya_user { user: opened.user }));
        // SAFETY: as above.
        unsafe { *out_user = handle };
        Ok(())
    })
}

/// Writes the history to the user file `path` atomically (`laya_runtime::User::save`): a
/// temporary file with mode 0600 in the same directory, fsynced and renamed over `path`;
/// concurrent saves of one file (threads or processes) are serialised by `<path>.lock`. A
/// reader sees the old file or the new one, never a mix. Errors: `LAYA_ERR_NULL_ARGUMENT`,
/// `LAYA_ERR_IO` (the old file, if any, is left as it was). Thread-safe: may run while
/// sessions predict with and learn into this history.
///
/// # Safety
/// `user` is NULL or a live user handle; `path` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn laya_user_save(user: *const laya_user, path: *const c_char) -> laya_status {
    guard(|| {
        // SAFETY: NULL or a live handle by the caller's contract; only shared access.
        let user = unsafe { user.as_ref() }.ok_or_else(|| null("user"))?;
        // SAFETY: forwarded caller contract on `path`.
        let path = unsafe { path_arg(path) }?;
        user.user.save(&path).map_err(user_file_failure)
    })
}

/// Frees a user handle. NULL is ignored. Sessions given the history with
/// [`laya_session_set_user`] keep it alive and keep learning into it; it is released with the
/// last of them.
///
/// # Safety
/// `user` is NULL or a live handle from [`laya_user_new`] or [`laya_user_open`], not used
/// afterwards.
#[no_mangle]
pub unsafe extern "C" fn laya_user_free(user: *mut laya_user) {
    if user.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: made by Box::into_raw in laya_user_new or laya_user_open and freed once.
        drop(unsafe { Box::from_raw(user) });
    }));
}

/// Makes `user` the history the session ranks with and learns into, from its next call
/// (`laya_runtime::Session::set_user`); the session keeps its own reference. Give one history
/// to every session that types for the same person. Kept across model swaps.
///
/// # Safety
/// `session` is NULL or a live session used by no other thread during the call; `user` is NULL
/// or a live user handle.
#[no_mangle]
pub unsafe extern "C" fn laya_session_set_user(session: *mut laya_session, user: *const laya_user) -> laya_status {
    guard(|| {
        // SAFETY: NULL or a live handle used by this thread only, by the caller's contract.
        let s = unsafe { session.as_mut() }.ok_or_else(|| null("session"))?;
        // SAFETY: NULL or a live handle by the caller's contract; only shared access.
        let user = unsafe { user.as_ref() }.ok_or_else(|| null("user"))?;
        s.inner.session().set_user(user.user.clone());
        Ok(())
    })
}

/// Learns committed text `utf8[0..len]` into the session's history
/// (`laya_runtime::Session::learn`): cut into words with the current model's lexicon and the
/// words already learned, punctuation, numbers and blocked words skipped. Writes the number of
/// words counted to `*out_learned` (0 in incognito, and on any error). Call it when text is
/// committed, not per keystroke (it allocates).
///
/// # Safety
/// `session` is NULL or a live session used by no other thread during the call; `utf8` is
/// NULL (only with `len == 0`) or `len` readable bytes; `out_learned` is NULL (then not
/// written) or writable.
#[no_mangle]
pub unsafe extern "C" fn laya_session_learn(
    session: *mut laya_session,
    utf8: *const c_char,
    len: usize,
    out_learned: *mut usize,
) -> laya_status {
    guard(|| {
        // SAFETY: NULL or writable by the caller's contract.
        let mut out = unsafe { out_learned.as_mut() };
        if let Some(n) = out.as_deref_mut() {
            *n = 0;
        }
        // SAFETY: NULL or a live handle used by this thread only, by the caller's contract.
        let s = unsafe { session.as_mut() }.ok_or_else(|| null("session"))?;
        // SAFETY: forwarded caller contract on `utf8` and `len`; the text lives only for this
        // call.
        let text = unsafe { text_arg(utf8, len, "text") }?;
        // Cut with the model that will serve the next prediction.
        s.inner.refresh();
        let learned = s.inner.session().learn(text);
        if let Some(n) = out {
            *n = learned;
        }
        Ok(())
    })
}

/// Forgets the word `utf8[0..len]`: its count and every pair it is in. Writes 1 to
/// `*out_forgotten` when it was learned, 0 when not. Thread-safe.
///
/// # Safety
/// `user` is NULL or a live user handle; `utf8` is NULL (only with `len == 0`) or `len`
/// readable bytes; `out_forgotten` is NULL (then not written) or writable.
#[no_mangle]
pub unsafe extern "C" fn laya_user_forget(user: *mut laya_user, utf8: *const c_char, len: usize, out_forgotten: *mut i32) -> laya_status {
    guard(|| {
        // SAFETY: NULL or writable by the caller's contract.
        let mut out = unsafe { out_forgotten.as_mut() };
        if let Some(flag) = out.as_deref_mut() {
            *flag = 0;
        }
        // SAFETY: NULL or a live handle by the caller's contract; the history has its own lock.
        let user = unsafe { user.as_ref() }.ok_or_else(|| null("user"))?;
        // SAFETY: forwarded caller contract on `utf8` and `len`.
        let word = unsafe { text_arg(utf8, len, "word") }?;
        let forgotten = user.user.write().forget(word);
        if let Some(flag) = out {
            *flag = i32::from(forgotten);
        }
        Ok(())
    })
}

/// Forgets everything learned; the blocklist and the incognito switch stay. Thread-safe.
///
/// # Safety
/// `user` is NULL or a live user handle.
#[no_mangle]
pub unsafe extern "C" fn laya_user_clear(user: *mut laya_user) -> laya_status {
    guard(|| {
        // SAFETY: NULL or a live handle by the caller's contract; the history has its own lock.
        let user = unsafe { user.as_ref() }.ok_or_else(|| null("user"))?;
        user.user.write().clear();
        Ok(())
    })
}

/// Never suggests the word `utf8[0..len]` again, whatever the network or the history says,
/// and forgets its history. Blocking a word already blocked changes nothing. Errors:
/// `LAYA_ERR_NULL_ARGUMENT`, `LAYA_ERR_INVALID_UTF8`, `LAYA_ERR_INVALID_ARGUMENT` (longer than
/// 1,024 bytes, `laya_runtime::MAX_BLOCKED_BYTES`: no word is). The empty word is never a
/// candidate; blocking it changes nothing. Thread-safe.
///
/// # Safety
/// `user` is NULL or a live user handle; `utf8` is NULL (only with `len == 0`) or `len`
/// readable bytes.
#[no_mangle]
pub unsafe extern "C" fn laya_user_block(user: *mut laya_user, utf8: *const c_char, len: usize) -> laya_status {
    guard(|| {
        // SAFETY: NULL or a live handle by the caller's contract; the history has its own lock.
        let user = unsafe { user.as_ref() }.ok_or_else(|| null("user"))?;
        // SAFETY: forwarded caller contract on `utf8` and `len`.
        let word = unsafe { text_arg(utf8, len, "word") }?;
        if word.len() > laya_runtime::MAX_BLOCKED_BYTES {
            return Err((
                LAYA_ERR_INVALID_ARGUMENT,
                format!("a blocked word is at most {} bytes; this one has {}", laya_runtime::MAX_BLOCKED_BYTES, word.len()),
            ));
        }
        user.user.write().block(word);
        Ok(())
    })
}

/// Lifts the block on the word `utf8[0..len]`. Writes 1 to `*out_was_blocked` when it was
/// blocked, 0 when not. Thread-safe.
///
/// # Safety
/// `user` is NULL or a live user handle; `utf8` is NULL (only with `len == 0`) or `len`
/// readable bytes; `out_was_blocked` is NULL (then not written) or writable.
#[no_mangle]
pub unsafe extern "C" fn laya_user_unblock(
    user: *mut laya_user,
    utf8: *const c_char,
    len: usize,
    out_was_blocked: *mut i32,
) -> laya_status {
    guard(|| {
        // SAFETY: NULL or writable by the caller's contract.
        let mut out = unsafe { out_was_blocked.as_mut() };
        if let Some(flag) = out.as_deref_mut() {
            *flag = 0;
        }
        // SAFETY: NULL or a live handle by the caller's contract; the history has its own lock.
        let user = unsafe { user.as_ref() }.ok_or_else(|| null("user"))?;
        // SAFETY: forwarded caller contract on `utf8` and `len`.
        let word = unsafe { text_arg(utf8, len, "word") }?;
        let was = user.user.write().unblock(word);
        if let Some(flag) = out {
            *flag = i32::from(was);
        }
        Ok(())
    })
}

/// Incognito when `on` is non-zero: [`laya_session_learn`] learns nothing into this history
/// (predictions still use what was learned before); 0 turns learning back on. The switch is
/// not stored in the user file: a reopened history learns. Thread-safe.
///
/// # Safety
/// `user` is NULL or a live user handle.
#[no_mangle]
pub unsafe extern "C" fn laya_user_set_incognito(user: *mut laya_user, on: i32) -> laya_status {
    guard(|| {
        // SAFETY: NULL or a live handle by the caller's contract; the history has its own lock.
        let user = unsafe { user.as_ref() }.ok_or_else(|| null("user"))?;
        user.user.write().set_incognito(on != 0);
        Ok(())
    })
}

/// Writes the number of words in the history to `*out_words`. Thread-safe.
///
/// # Safety
/// `user` is NULL or a live user handle; `out_words` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn laya_user_len(user: *const laya_user, out_words: *mut usize) -> laya_status {
    guard(|| {
        // SAFETY: NULL or writable by the caller's contract.
        let out = unsafe { out_words.as_mut() }.ok_or_else(|| null("out_words"))?;
        *out = 0;
        // SAFETY: NULL or a live handle by the caller's contract; only shared access.
        let user = unsafe { user.as_ref() }.ok_or_else(|| null("user"))?;
        *out = user.user.read().len();
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_a_status_and_a_message() {
        let st = guard(|| panic!("boom {}", 42));
        assert_eq!(st, LAYA_ERR_PANIC);
        // SAFETY: the message is NUL-terminated and owned by this thread.
        let msg = unsafe { CStr::from_ptr(laya_last_error_message()) }.to_str().unwrap().to_string();
        assert!(msg.contains("boom 42"), "{msg}");
    }

    #[test]
    fn nul_in_a_message_does_not_lose_it() {
        set_error("a\0b");
        // SAFETY: as above.
        let msg = unsafe { CStr::from_ptr(laya_last_error_message()) }.to_str().unwrap().to_string();
        assert_eq!(msg, "a\\0b");
    }
}
