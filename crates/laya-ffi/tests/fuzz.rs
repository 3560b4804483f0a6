//! Fuzz-style bounded tests of the C ABI's prediction entry point: arbitrary bytes (invalid
//! UTF-8 included) and arbitrary strings (NUL, control, astral, huge) must give either a
//! well-formed result identical to the Rust `Session`'s, or `LAYA_ERR_INVALID_UTF8` with
//! nothing written — never a crash.

use std::cell::{Cell, RefCell};
use std::ffi::CStr;
use std::path::Path;
use std::ptr;

mod common;

use laya_ffi::*;
use laya_format::testing::{random_model, TinyConfig};
use laya_format::{write_model, GgmlType};
use laya_runtime::{Model, Session};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

struct Handles {
    engine: *mut laya_engine,
    session: *mut laya_session,
    reference: Session,
}

impl Drop for Handles {
    fn drop(&mut self) {
        // SAFETY: both handles came from the open/new calls in `handles` and are freed once.
        unsafe {
            laya_session_free(self.session);
            laya_engine_free(self.engine);
        }
    }
}

fn handles(name: &str) -> Handles {
    handles_for(name, &TinyConfig::small())
}

fn handles_for(name: &str, cfg: &TinyConfig) -> Handles {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join(format!("ffi-fuzz-{name}-{}.laya", std::process::id()));
    let (mut meta, mut tensors) = random_model(cfg, 77, GgmlType::Q8_0);
    // A word trigram, so the n-gram's weight is live too (default 0.3).
    tensors.extend(laya_format::testing::random_ngram(cfg.vocab, 300, 77));
    // Dictionary frequencies, so the completion prior is live in every test (default λ).
    meta.dict_frequencies = Some((0..meta.vocab_size() as u32).map(|i| if i % 4 == 0 { 0 } else { 1 + i * 7919 % 997 }).collect());
    std::fs::write(&path, write_model(&meta, &tensors).unwrap()).unwrap();
    let reference = Session::new(Model::load(&path).unwrap());
    let cpath = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let (mut engine, mut session) = (ptr::null_mut(), ptr::null_mut());
    // SAFETY: a NUL-terminated path and valid out-pointers.
    assert_eq!(unsafe { laya_engine_open(cpath.as_ptr(), &mut engine) }, LAYA_OK);
    // SAFETY: a live engine and a valid out-pointer.
    assert_eq!(unsafe { laya_session_new(engine, &mut session) }, LAYA_OK);
    let _ = std::fs::remove_file(&path); // the mapping keeps the inode alive
    Handles { engine, session, reference }
}

/// Predicts through the C ABI and checks the result against the Rust session.
fn check(h: &mut Handles, bytes: &[u8], k: usize) -> Result<(), TestCaseError> {
    let mut out = [laya_candidate::EMPTY; 12];
    let mut n = usize::MAX;
    // SAFETY: `bytes` is `bytes.len()` readable bytes, `out` has 12 slots, `n` is writable.
    let st = unsafe { laya_session_predict(h.session, bytes.as_ptr().cast(), bytes.len(), k, out.as_mut_ptr(), out.len(), &mut n) };
    match std::str::from_utf8(bytes) {
        Err(_) => {
            prop_assert_eq!(st, LAYA_ERR_INVALID_UTF8);
            prop_assert_eq!(n, 0);
            // SAFETY: the message is a NUL-terminated string owned by this thread.
            let msg = unsafe { CStr::from_ptr(laya_last_error_message()) }.to_str().unwrap();
            prop_assert!(msg.contains("UTF-8"), "{}", msg);
        }
        Ok(ctx) => {
            prop_assert_eq!(st, LAYA_OK);
            let want: Vec<_> =
                h.reference.predict(ctx, k.min(out.len())).iter().map(|c| (c.word.to_string(), c.replace as u32, c.p.to_bits())).collect();
            prop_assert_eq!(n, want.len());
            for (c, w) in out[..n].iter().zip(&want) {
                // SAFETY: `word` points at `word_len` bytes plus a NUL, valid until the next predict.
                let word = unsafe { CStr::from_ptr(c.word) }.to_str().unwrap();
                prop_assert_eq!(word.len(), c.word_len);
                prop_assert_eq!((word.to_string(), c.replace, c.p.to_bits()), w.clone());
            }
        }
    }
    Ok(())
}

fn any_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        // Valid text with one byte damaged somewhere.
        (".{0,24}", any::<prop::sample::Index>(), any::<u8>()).prop_map(|(s, i, b): (String, _, u8)| {
            let mut v = s.into_bytes();
            if !v.is_empty() {
                let at = i.index(v.len());
                v[at] = b;
            }
            v
        }),
    ]
}

fn any_text() -> impl Strategy<Value = String> {
    let ch = prop_oneof![
        any::<char>(),
        Just('\0'),
        proptest::char::range('\u{1}', '\u{1f}'),
        proptest::char::range('\u{7f}', '\u{9f}'),
        proptest::char::range('\u{1F300}', '\u{1FAFF}'),
        proptest::char::range('\u{10000}', '\u{10FFFF}'),
        proptest::char::range('a', 'z'),
        proptest::char::range('\u{4E00}', '\u{4FFF}'),
        proptest::char::range('\u{FF01}', '\u{FF5E}'),
    ];
    prop_oneof![
        prop::collection::vec(ch.clone(), 0..40).prop_map(|v| v.into_iter().collect()),
        // Huge contexts: only the last 16 characters matter, the rest must not hurt.
        (prop::collection::vec(ch, 1..8), 1_000usize..50_000).prop_map(|(v, n)| v.iter().cycle().take(n).collect()),
    ]
}

#[test]
fn arbitrary_bytes_through_the_c_abi() {
    let h = RefCell::new(handles("bytes"));
    let mut runner = TestRunner::new(Config { cases: 1000, failure_persistence: None, ..Config::default() });
    let (valid, invalid) = (Cell::new(0u32), Cell::new(0u32));
    runner
        .run(&(any_bytes(), 0usize..16), |(bytes, k)| {
            let counter = if std::str::from_utf8(&bytes).is_ok() { &valid } else { &invalid };
            counter.set(counter.get() + 1);
            check(&mut h.borrow_mut(), &bytes, k)
        })
        .unwrap();
    let (valid, invalid) = (valid.get(), invalid.get());
    println!("ffi fuzz (bytes): cases={} valid_utf8={valid} invalid_utf8={invalid} crashes=0", valid + invalid);
    assert!(valid > 0 && invalid > 0);
}

#[test]
fn arbitrary_strings_through_the_c_abi() {
    let h = RefCell::new(handles("text"));
    let mut runner = TestRunner::new(Config { cases: 500, failure_persistence: None, ..Config::default() });
    let cases = Cell::new(0u32);
    runner
        .run(&(any_text(), 0usize..16), |(text, k)| {
            cases.set(cases.get() + 1);
            check(&mut h.borrow_mut(), text.as_bytes(), k)
        })
        .unwrap();
    let cases = cases.get();
    println!("ffi fuzz (strings incl. NUL/control/astral/huge): cases={cases} crashes=0");
}

#[test]
fn c_abi_predictions_allocate_nothing_in_the_steady_state() {
    let h = handles("alloc");
    common::assert_predictions_allocate_nothing(
        h.session,
        &["hel", "今天天气", "😀😀", "", "\0x", "a very long context beyond sixteen characters"],
    );
}

#[test]
fn null_and_invalid_arguments_give_status_codes_and_messages() {
    let h = handles("null");
    let mut n = 0usize;
    let mut out = [laya_candidate::EMPTY; 2];
    let msg = || {
        // SAFETY: NUL-terminated, owned by this thread.
        unsafe { CStr::from_ptr(laya_last_error_message()) }.to_string_lossy().into_owned()
    };
    // SAFETY (all calls below): every pointer is NULL or valid as documented in laya.h.
    unsafe {
        assert_eq!(laya_session_predict(ptr::null_mut(), ptr::null(), 0, 1, out.as_mut_ptr(), 2, &mut n), LAYA_ERR_NULL_ARGUMENT);
        assert!(msg().contains("session"), "{}", msg());
        assert_eq!(laya_session_predict(h.session, ptr::null(), 5, 1, out.as_mut_ptr(), 2, &mut n), LAYA_ERR_NULL_ARGUMENT);
        assert_eq!(laya_session_predict(h.session, ptr::null(), 0, 1, ptr::null_mut(), 2, &mut n), LAYA_ERR_NULL_ARGUMENT);
        assert_eq!(laya_session_predict(h.session, ptr::null(), 0, 1, out.as_mut_ptr(), 2, ptr::null_mut()), LAYA_ERR_NULL_ARGUMENT);
        assert_eq!(laya_session_predict(h.session, ptr::null(), 0, 5, ptr::null_mut(), 0, &mut n), LAYA_OK);
        assert_eq!(n, 0);
        assert_eq!(laya_engine_open(ptr::null(), ptr::null_mut()), LAYA_ERR_NULL_ARGUMENT);
        assert_eq!(laya_engine_swap(h.engine, c"/nonexistent.laya".as_ptr()), LAYA_ERR_IO);
        assert!(msg().contains("/nonexistent.laya"), "{}", msg());
        let mut sum = 0u64;
        assert_eq!(laya_engine_checksum(ptr::null(), &mut sum), LAYA_ERR_NULL_ARGUMENT);
        assert_eq!(laya_session_checksum(h.session, ptr::null_mut()), LAYA_ERR_NULL_ARGUMENT);
        assert_eq!(laya_session_set_completion_exponent(ptr::null_mut(), 0.5), LAYA_ERR_NULL_ARGUMENT);
        assert_eq!(laya_session_set_completion_exponent(h.session, f32::NAN), LAYA_OK);
        assert_eq!(laya_session_set_completion_prior(ptr::null_mut(), 0.5), LAYA_ERR_NULL_ARGUMENT);
        assert_eq!(laya_session_set_completion_prior(h.session, f32::NAN), LAYA_OK);
        assert_eq!(laya_session_set_completion_prior(h.session, 0.5), LAYA_OK);
        assert_eq!(laya_session_set_punctuation_slot(ptr::null_mut(), 1), LAYA_ERR_NULL_ARGUMENT);
        assert_eq!(laya_session_set_ngram_weight(ptr::null_mut(), 0.3), LAYA_ERR_NULL_ARGUMENT);
        assert_eq!(laya_session_set_ngram_weight(h.session, f32::NAN), LAYA_OK);
        assert_eq!(laya_session_forget_context(ptr::null_mut()), LAYA_ERR_NULL_ARGUMENT);
        assert_eq!(laya_session_forget_context(h.session), LAYA_OK);
        assert_eq!(laya_session_set_completion_rule(ptr::null_mut(), LAYA_COMPLETION_PRODUCT), LAYA_ERR_NULL_ARGUMENT);
        assert_eq!(laya_session_set_completion_rule(h.session, 4), LAYA_ERR_INVALID_ARGUMENT);
        assert!(msg().contains("unknown completion rule 4"), "{}", msg());
        assert_eq!(CStr::from_ptr(laya_status_name(LAYA_ERR_INVALID_ARGUMENT)).to_str().unwrap(), "LAYA_ERR_INVALID_ARGUMENT");
        let mut s = ptr::null_mut();
        assert_eq!(laya_session_new(ptr::null(), &mut s), LAYA_ERR_NULL_ARGUMENT);
        assert!(s.is_null());
        assert_eq!(CStr::from_ptr(laya_status_name(12345)).to_str().unwrap(), "LAYA_UNKNOWN_STATUS");
        assert!(!CStr::from_ptr(laya_version()).to_bytes().is_empty());
    }
    // The message is per thread: another thread has seen no error.
    let other = std::thread::spawn(|| {
        // SAFETY: NUL-terminated, owned by that thread.
        unsafe { CStr::from_ptr(laya_last_error_message()) }.to_string_lossy().into_owned()
    })
    .join()
    .unwrap();
    assert_eq!(other, "");
}

#[test]
fn completion_rule_exponent_and_prior_through_the_c_abi_match_the_rust_session() {
    use laya_runtime::CompletionRule;
    let mut h = handles("beta");
    let cases = [
        (LAYA_COMPLETION_MARGINAL, CompletionRule::Marginal, 1.0f32),
        (LAYA_COMPLETION_CONDITIONAL, CompletionRule::Conditional, 1.0),
        (LAYA_COMPLETION_SPLIT, CompletionRule::Split, 1.0),
        (LAYA_COMPLETION_PRODUCT, CompletionRule::Product, 0.0),
        (LAYA_COMPLETION_PRODUCT, CompletionRule::Product, 0.25),
        (LAYA_COMPLETION_PRODUCT, CompletionRule::Product, 1.0),
    ];
    for (lambda, punct, ngram) in [(0.0, 0, 0.3), (0.5, 1, 0.0), (2.0, 0, 1.0)] {
        // SAFETY: a live session used by this thread only.
        assert_eq!(unsafe { laya_session_set_completion_prior(h.session, lambda) }, LAYA_OK);
        h.reference.set_completion_prior(lambda);
        // SAFETY: as above.
        assert_eq!(unsafe { laya_session_set_ngram_weight(h.session, ngram) }, LAYA_OK);
        h.reference.set_ngram_weight(ngram);
        // SAFETY: as above.
        assert_eq!(unsafe { laya_session_set_punctuation_slot(h.session, punct) }, LAYA_OK);
        h.reference.set_punctuation_slot(punct != 0);
        for (c_rule, rule, beta) in cases {
            // SAFETY: as above.
            assert_eq!(unsafe { laya_session_set_completion_rule(h.session, c_rule) }, LAYA_OK);
            // SAFETY: as above.
            assert_eq!(unsafe { laya_session_set_completion_exponent(h.session, beta) }, LAYA_OK);
            h.reference.set_completion_rule(rule);
            h.reference.set_completion_exponent(beta);
            for ctx in ["hel", "今天天", "a", "", "wor", "x y"] {
                check(&mut h, ctx.as_bytes(), 8).unwrap();
            }
        }
    }
}

/// A relative_causal model typed one character at a time through the C ABI (the session keeps
/// keys and values between calls) gives, at every keystroke, what a fresh Rust session computes
/// from the whole text; `laya_session_forget_context` in between changes nothing.
#[test]
fn typing_through_the_c_abi_on_a_causal_model() {
    let cfg = TinyConfig { position_scheme: laya_format::PositionScheme::RelativeCausal, ..TinyConfig::small() };
    let h = RefCell::new(handles_for("causal", &cfg));
    let mut runner = TestRunner::new(Config { cases: 24, failure_persistence: None, ..Config::default() });
    runner
        .run(&(any_text(), any::<u8>()), |(text, forget_every)| {
            let mut h = h.borrow_mut();
            for (i, (at, c)) in text.char_indices().take(60).enumerate() {
                let prefix = &text[..at + c.len_utf8()];
                if forget_every > 0 && i % (forget_every as usize % 7 + 1) == 0 {
                    // SAFETY: a live session used by this thread only.
                    prop_assert_eq!(unsafe { laya_session_forget_context(h.session) }, LAYA_OK);
                }
                // A fresh reference each time: the whole computation.
                let model = h.reference.model().clone();
                h.reference = Session::new(model);
                check(&mut h, prefix.as_bytes(), 5)?;
            }
            Ok(())
        })
        .unwrap();
}
