//! `simulate_events_parallel` writes the serial log, in order, and stops cleanly on errors.

use laya_text::{
    simulate_events, simulate_events_parallel, Candidate, Event, PredictError, Predictor, SegmentMode, Segmenter, SimulateError,
};

/// Shows words that depend on the context, the typed word among them for some contexts only;
/// fails on a context containing "boom".
struct Echo;

impl Predictor for Echo {
    fn predict(&mut self, ctx: &str, k: usize, out: &mut Vec<Candidate>) -> Result<(), PredictError> {
        if ctx.contains("boom") {
            return Err(PredictError("boom".into()));
        }
        out.clear();
        let n = ctx.chars().count();
        for j in 0..k {
            let word = ["cat", "sat", "mat", "的", "天气"][(n + j) % 5].to_string();
            out.push(Candidate { word, replace: (n + j) % 2, p: 0.1 });
        }
        Ok(())
    }
}

fn lines() -> Vec<String> {
    let mut v = Vec::new();
    for i in 0..500 {
        v.push(match i % 5 {
            0 => format!("the cat sat on mat {i}"),
            1 => String::new(),
            2 => "今天 天气 不错".to_string(),
            3 => "   ".to_string(),
            _ => format!("{} 的", "a".repeat(i % 7 + 1)),
        });
    }
    v
}

fn serial(lines: &[String]) -> (Vec<Event>, laya_text::SimulateStats) {
    let seg = Segmenter::new(SegmentMode::Segmented);
    let mut events = Vec::new();
    let stats = simulate_events(
        lines.iter().cloned(),
        &seg,
        &mut Echo,
        4,
        &mut |e| {
            events.push(e);
            Ok(())
        },
        &mut |_| {},
    )
    .unwrap();
    (events, stats)
}

#[test]
fn parallel_log_equals_the_serial_one() {
    let lines = lines();
    let (want, want_stats) = serial(&lines);
    assert!(want_stats.events > 2000 && want_stats.appended > 0 && want_stats.appended < want_stats.events);
    let seg = Segmenter::new(SegmentMode::Segmented);
    for threads in [1, 2, 5] {
        let mut got = Vec::new();
        let stats = simulate_events_parallel(
            threads,
            &|| Ok(Echo),
            lines.clone(),
            &seg,
            4,
            &mut |e| {
                got.push(e);
                Ok(())
            },
            &|_| {},
        )
        .unwrap();
        assert_eq!(stats, want_stats, "{threads} threads");
        assert!(got == want, "{threads} threads: the events differ or are out of order");
    }
}

#[test]
fn ranker_sink_and_setup_errors_stop_the_run() {
    let seg = Segmenter::new(SegmentMode::Segmented);
    let mut lines = lines();
    lines[333] = "boom x".into();
    let e = simulate_events_parallel(2, &|| Ok(Echo), lines.clone(), &seg, 4, &mut |_| Ok(()), &|_| {}).unwrap_err();
    assert!(matches!(e, SimulateError::Predict(_)), "{e}");

    let mut written = 0;
    let e = simulate_events_parallel(
        3,
        &|| Ok(Echo),
        self::lines(),
        &seg,
        4,
        &mut |_| {
            written += 1;
            if written > 100 {
                Err(std::io::Error::other("disk full"))
            } else {
                Ok(())
            }
        },
        &|_| {},
    )
    .unwrap_err();
    assert!(matches!(e, SimulateError::Io(_)) && written == 101, "{e} after {written}");

    let e =
        simulate_events_parallel(2, &|| Err::<Echo, _>(PredictError("no ranker".into())), self::lines(), &seg, 4, &mut |_| Ok(()), &|_| {})
            .unwrap_err();
    assert!(e.to_string().contains("no ranker"), "{e}");
}
