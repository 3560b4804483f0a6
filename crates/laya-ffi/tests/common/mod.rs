//! Helpers shared by the C ABI's test files.

use laya_ffi::{laya_candidate, laya_session, laya_session_predict, LAYA_OK};

/// Predicts every context once to warm up, then again while counting heap allocations: the
/// steady state of `laya_session_predict` must make none (and the counter must be live).
pub fn assert_predictions_allocate_nothing(session: *mut laya_session, contexts: &[&str]) {
    let mut out = [laya_candidate::EMPTY; 8];
    let mut n = 0;
    let mut predict_all = || {
        for ctx in contexts {
            // SAFETY: a live session (the caller's), readable context bytes, 8 writable slots,
            // a writable count.
            let st = unsafe { laya_session_predict(session, ctx.as_ptr().cast(), ctx.len(), 8, out.as_mut_ptr(), 8, &mut n) };
            assert_eq!(st, LAYA_OK);
        }
    };
    predict_all();
    let info = allocation_counter::measure(&mut predict_all);
    assert_eq!(info.count_total, 0);
    let probe = allocation_counter::measure(|| drop(std::hint::black_box(std::sync::Arc::new(1u8))));
    assert!(probe.count_total > 0, "the counter is live");
}
