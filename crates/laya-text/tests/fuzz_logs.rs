//! Fuzzing the keyboard-log reader: arbitrary bytes, and valid logs with random damage, must
//! give events or counted, line-numbered errors — never a panic.
//!
//! The suite runs a short pass; a longer bounded run is one command:
//!
//!     LAYA_FUZZ_CASES=200000 cargo test --release -p laya-text --test fuzz_logs -- --nocapture

use laya_text::{read_events, write_event, Event, OnError, Shown};
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("LAYA_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000)
}

fn valid_log() -> Vec<u8> {
    let mut out = Vec::new();
    for (ctx, word, replace) in [("", "今天", 0u32), ("今", "今天", 1), ("hello wor", "world", 3), ("😀", "好", 0)] {
        let e = Event {
            context: ctx.to_string(),
            shown: vec![Shown { word: word.to_string(), replace }, Shown { word: "的".into(), replace: 0 }],
            clicked: Some(0),
            weight: 1.0,
        };
        write_event(&mut out, &e).unwrap();
    }
    out
}

fn check(bytes: &[u8]) {
    let n_lines = bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()).count();
    match read_events(bytes, OnError::Skip) {
        Ok((events, stats)) => {
            assert!(events.len() + stats.skipped <= n_lines.max(stats.lines));
            for e in &events {
                if let Some(c) = e.clicked {
                    assert!(c < e.shown.len(), "a returned event's click points into shown");
                }
            }
        }
        // Only a failing reader (I/O) may end a Skip-mode read; invalid UTF-8 is per line.
        Err(e) => {
            let _ = e.to_string();
        }
    }
    // Stop mode: an error must name a line number when it is about a line.
    if let Err(e) = read_events(bytes, OnError::Stop) {
        assert!(!e.to_string().is_empty());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        check(&bytes);
    }

    #[test]
    fn damaged_valid_logs_never_panic(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in any::<usize>(),
    ) {
        let mut bytes = valid_log();
        for (at, b) in edits {
            let i = at % bytes.len();
            bytes[i] = b;
        }
        let keep = cut % (bytes.len() + 1);
        bytes.truncate(keep);
        check(&bytes);
    }
}

#[test]
fn the_undamaged_log_reads_back() {
    let (events, stats) = read_events(&valid_log()[..], OnError::Stop).unwrap();
    assert_eq!((events.len(), stats.skipped), (4, 0));
}
