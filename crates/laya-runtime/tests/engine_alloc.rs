//! SPEC.md: zero heap allocations per prediction also through the hot-swap engine — in the
//! steady state and when a session picks up a same-shaped model after a swap.

mod common;

use common::{model, CONTEXTS};
use laya_format::testing::TinyConfig;
use laya_format::GgmlType;
use laya_runtime::Engine;

#[test]
fn engine_sessions_allocate_nothing_even_across_a_swap() {
    let cfg = TinyConfig::small();
    // `b` carries a word trigram: what the n-gram derives from its tables is computed at load,
    // not when a session first predicts with it.
    let (a, b) = (model(&cfg, 5, GgmlType::Q4_0), common::model_with_ngram(&cfg, 6, GgmlType::Q4_0, "zh"));
    let engine = Engine::from_model(a.clone());
    let mut s = engine.session();
    s.warm_up();
    let probe = allocation_counter::measure(|| {
        std::hint::black_box(vec![1u8; 16]);
    });
    assert!(probe.count_total >= 1, "the counter is live");

    let steady = allocation_counter::measure(|| {
        for ctx in CONTEXTS {
            std::hint::black_box(s.predict(ctx, 5).len());
        }
    });
    assert_eq!(steady.count_total, 0, "steady state");

    for next in [&b, &a, &b] {
        // The swap itself may allocate (it is not on the keystroke path); picking it up must not.
        engine.swap_to_model(next.clone());
        let pickup = allocation_counter::measure(|| {
            for ctx in CONTEXTS {
                std::hint::black_box(s.predict(ctx, 5).len());
            }
        });
        assert_eq!(pickup.count_total, 0, "picking up a swapped model");
        assert!(std::sync::Arc::ptr_eq(s.model(), next));
    }
}
