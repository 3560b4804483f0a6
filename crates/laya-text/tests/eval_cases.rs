//! The EVAL.md §2 harness against hand-computed expectations (tests/data/eval_cases.json).

use laya_text::{evaluate, evaluate_parallel, Candidate, PredictError, Predictor, SegmentMode, Segmenter};
use serde::Deserialize;
use std::collections::{HashMap, HashSet};

/// Answers from a fixed table; unknown contexts get no candidates.
#[derive(Clone)]
struct Table(HashMap<String, Vec<(String, usize)>>);

impl Predictor for Table {
    fn predict(&mut self, ctx: &str, k: usize, out: &mut Vec<Candidate>) -> Result<(), PredictError> {
        out.clear();
        // The harness asks for the bar size; a predictor may return more, only 5 are looked at.
        assert_eq!(k, 5);
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
            let mut rp = evaluate_parallel(threads, &make, case.lines.clone(), seg, &in_lex, case.limit, &|_| {}).unwrap();
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
    let e = evaluate_parallel(3, &|| Ok(Failing), lines, &gold, &|_| true, None, &|_| {}).unwrap_err();
    assert!(e.to_string().contains("boom"));
}
