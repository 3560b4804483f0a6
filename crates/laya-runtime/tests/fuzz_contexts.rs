//! Fuzz-style bounded test of prediction with arbitrary contexts: any `&str` (NUL, control
//! characters, astral codepoints, unpaired-looking sequences, huge strings) must give a
//! well-formed, deterministic answer through `Session` and through `EngineSession` — never a
//! panic. Invalid UTF-8 cannot reach a `&str`; it is the C ABI's job (laya-ffi/tests/fuzz.rs).

mod common;

use std::cell::{Cell, RefCell};

use common::model;
use laya_format::testing::TinyConfig;
use laya_format::GgmlType;
use laya_runtime::{Engine, Session};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

fn any_char() -> impl Strategy<Value = char> {
    prop_oneof![
        any::<char>(),
        Just('\0'),
        proptest::char::range('\u{1}', '\u{1f}'),
        proptest::char::range('\u{7f}', '\u{9f}'),
        proptest::char::range('\u{1F300}', '\u{1FAFF}'),
        proptest::char::range('\u{10000}', '\u{10FFFF}'),
        proptest::char::range('\u{FF01}', '\u{FF5E}'),
        proptest::char::range('\u{4E00}', '\u{4FFF}'),
        proptest::char::range('a', 'z'),
        Just(' '),
    ]
}

fn any_context() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::collection::vec(any_char(), 0..40).prop_map(|v| v.into_iter().collect()),
        1 => (prop::collection::vec(any_char(), 1..6), 1_000usize..100_000)
            .prop_map(|(v, n)| v.iter().cycle().take(n).collect()),
    ]
}

type Top = Vec<(String, usize, u32)>;

#[test]
fn arbitrary_contexts_give_well_formed_deterministic_predictions() {
    let causal = TinyConfig { position_scheme: laya_format::PositionScheme::RelativeCausal, ..TinyConfig::small() };
    let factorised = TinyConfig { word_classes: 6, ..causal.clone() };
    for (cfg, ty, ngram) in [
        (TinyConfig::small(), GgmlType::F32, false),
        (TinyConfig::small(), GgmlType::Q4_0, false),
        (causal, GgmlType::Q8_0, false),
        (factorised.clone(), GgmlType::Q8_0, false),
        (
            TinyConfig { memory: Some(laya_format::memory::Memory { buckets: 40, orders: vec![1, 3, 8] }), ..factorised.clone() },
            GgmlType::Q8_0,
            false,
        ),
        (factorised, GgmlType::Q8_0, true),
    ] {
        let m = if ngram { common::model_with_ngram(&cfg, 9, ty, "zh") } else { model(&cfg, 9, ty) };
        let pairs = m.lexicon_len() * m.config().replace_classes;
        let session = RefCell::new(Session::new(m.clone()));
        let engine_session = RefCell::new(Engine::from_model(m).session());
        let cases = Cell::new(0u32);
        let mut runner = TestRunner::new(Config { cases: 400, failure_persistence: None, ..Config::default() });
        runner
            .run(&(any_context(), 0usize..20), |(ctx, k)| {
                cases.set(cases.get() + 1);
                let mut s = session.borrow_mut();
                let first: Top = s.predict(&ctx, k).iter().map(|c| (c.word.to_string(), c.replace, c.p.to_bits())).collect();
                // After a Latin letter or digit the Latin next words stay off the bar
                // (docs/format.md §3 step 6, "Glued Latin"), so a small lexicon may offer fewer.
                // (Judged after the models' full-width rule: `０` is `0`.)
                let last = ctx.chars().last().map(|c| match c as u32 {
                    0xFF01..=0xFF5E => char::from_u32(c as u32 - 0xFEE0).unwrap_or(c),
                    _ => c,
                });
                if last.is_some_and(laya_format::punct::glues) {
                    prop_assert!(first.len() <= k.min(pairs));
                } else {
                    prop_assert_eq!(first.len(), k.min(pairs));
                }
                let n_chars = ctx.chars().count();
                let mut last = f32::INFINITY;
                for (word, replace, bits) in &first {
                    let p = f32::from_bits(*bits);
                    prop_assert!(p.is_finite() && (0.0..=1.0).contains(&p), "p = {}", p);
                    prop_assert!(p <= last);
                    last = p;
                    prop_assert!(*replace < word.chars().count());
                    prop_assert!(*replace <= n_chars.min(16));
                }
                let again: Top = s.predict(&ctx, k).iter().map(|c| (c.word.to_string(), c.replace, c.p.to_bits())).collect();
                prop_assert_eq!(&again, &first, "deterministic");
                let mut e = engine_session.borrow_mut();
                let via_engine: Top = e.predict(&ctx, k).iter().map(|c| (c.word.to_string(), c.replace, c.p.to_bits())).collect();
                prop_assert_eq!(&via_engine, &first, "engine session = session");
                // One more character: a relative_causal session computes only it, and must
                // agree with a session that computes the context whole.
                let longer = format!("{ctx}{}", ctx.chars().next().unwrap_or('字'));
                let typed: Top = s.predict(&longer, k).iter().map(|c| (c.word.to_string(), c.replace, c.p.to_bits())).collect();
                let mut fresh = Session::new(s.model().clone());
                let whole: Top = fresh.predict(&longer, k).iter().map(|c| (c.word.to_string(), c.replace, c.p.to_bits())).collect();
                prop_assert_eq!(&typed, &whole, "typed = whole");
                Ok(())
            })
            .unwrap();
        println!("session fuzz ({ty:?}): cases={} panics=0", cases.get());
    }
}
