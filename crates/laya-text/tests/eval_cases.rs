//! The docs/evaluation.md §2 harness against hand-computed expectations (tests/data/eval_cases.json).

use laya_text::{evaluate, evaluate_parallel, Candidate, PredictError, Predictor, SegmentMode, Segmenter, BAR, DEEP};
use serde::Deserialize;
use std::collections::{HashMap, HashSet};

/// Answers from a fixed table; unknown contexts get no candidates.
#[derive(Clone)]
struct Table(HashMap<String, Vec<(String, usize)>>);

impl Predictor for Table {
    fn predict(&mut self, ctx: &str, k: usize, out: &mut Vec<Candidate>) -> Result<(), PredictError> {
        out.clear();
        // The harness asks for the bar size (or, for the breakdown, DEEP); a predictor may
        // return more, only the first k are looked at.
        assert!(k == BAR || k == DEEP, "asked for {k}");
        if let Some(c) = self.0.get(ctx) {
            out.extend(c.iter().map(|(w, r)| Candidate { word: w.clone(), replace: *r, p: 0.1 }));
        }
        Ok(())
    }
}

#[derive(Deserialize)]
struct Case {
    name: String,
    mode: String,
    lines: Vec<String>,
    limit: Option<usize>,
    lexicon: Option<Vec<String>>,
    table: HashMap<String, Vec<(String, usize)>>,
    expect: HashMap<String, f64>,
    /// `laya eval --breakdown`'s object, when the case pins it.
    expect_breakdown: Option<serde_json::Value>,
}

#[test]
fn eval_cases() {
    let cases: Vec<Case> = serde_json::from_str(include_str!("data/eval_cases.json")).unwrap();
    let gold = Segmenter::new(SegmentMode::Segmented);
    let auto = Segmenter::new(SegmentMode::Auto);
    for case in cases {
        let seg = if case.mode == "auto" { &auto } else { &gold };
        let lex: Option<HashSet<String>> = case.lexicon.map(|l| l.into_iter().collect());
        let in_lex = |w: &str| lex.as_ref().is_none_or(|l| l.contains(w));
        let mut p = Table(case.table);
        let r = evaluate(&mut p, case.lines.clone().into_iter(), seg, &in_lex, case.limit, &mut |_| {}).unwrap();
        // The threaded harness gives the same report on one, two and five threads (every
        // field but the wall time).
        for threads in [1, 2, 5] {
            let make = || Ok(p.clone());
            let mut rp = evaluate_parallel(threads, &make, case.lines.clone(), seg, &in_lex, case.limit, &|_| {}, false).unwrap();
            rp.seconds = r.seconds;
            assert_eq!(rp, r, "{}: {threads} threads", case.name);
        }
        let got = serde_json::to_value(&r).unwrap();
        for (k, want) in &case.expect {
            let g = got[k].as_f64().unwrap_or_else(|| panic!("{}: no key {k}", case.name));
            assert!((g - want).abs() < 1e-12, "{}: {k} = {g}, expected {want}", case.name);
        }
        let keys: Vec<&String> = got.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 10, "{}: report keys {keys:?}", case.name);
        // With the breakdown: the same figures (predictions included), plus the breakdown,
        // whose shares add up to one per row.
        let make = || Ok(p.clone());
        let mut rb = evaluate_parallel(2, &make, case.lines.clone(), seg, &in_lex, case.limit, &|_| {}, true).unwrap();
        rb.seconds = r.seconds;
        let b = rb.breakdown.take().unwrap_or_else(|| panic!("{}: no breakdown", case.name));
        assert_eq!(rb, r, "{}: the breakdown changed the report", case.name);
        for row in [&b.k0, &b.k1] {
            let sum = row.oov + row.top5_alone + row.outranked;
            assert!(sum == 0.0 || (sum - 1.0).abs() < 1e-12, "{}: shares add up to {sum}", case.name);
            assert!(row.crowded_out <= row.top5_alone, "{}", case.name);
        }
        if let Some(want) = &case.expect_breakdown {
            let got = serde_json::to_value(&b).unwrap();
            for slot in ["k0", "k1"] {
                for key in ["oov", "top5_alone", "crowded_out", "outranked"] {
                    let (g, w) = (got[slot][key].as_f64().unwrap(), want[slot][key].as_f64().unwrap());
                    assert!((g - w).abs() < 1e-12, "{}: {slot}.{key} = {g}, expected {w}", case.name);
                }
            }
        }
    }
}

struct Failing;
impl Predictor for Failing {
    fn predict(&mut self, _: &str, _: usize, _: &mut Vec<Candidate>) -> Result<(), PredictError> {
        Err(PredictError("boom".into()))
    }
}

#[test]
fn predictor_errors_propagate() {
    let gold = Segmenter::new(SegmentMode::Segmented);
    let e = evaluate(&mut Failing, ["a".to_string()].into_iter(), &gold, &|_| true, None, &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("boom"));
    let lines: Vec<String> = (0..100).map(|_| "a b".to_string()).collect();
    let e = evaluate_parallel(3, &|| Ok(Failing), lines, &gold, &|_| true, None, &|_| {}, false).unwrap_err();
    assert!(e.to_string().contains("boom"));
}
