//! A model quantised by `laya_format::quantize` with the embedding's error compensation is
//! closer to the float model it came from than the same quantisation without it.

use laya_format::quantize::QuantizeOptions;
use laya_format::testing::{random_model, random_quantized_model, SplitMix64, TinyConfig};
use laya_format::{write_model, GgmlType, Mapping};
use laya_runtime::{Model, Session};

/// Contexts over many embedding rows: the compensation removes 1/32 of the squared error of a
/// row on average (the group mean of i.i.d. rounding errors), so the effect on logits only shows
/// over many rows, not over a dozen contexts that keep hitting the padding row.
fn contexts(cfg: &TinyConfig, seed: u64) -> Vec<String> {
    let mut rng = SplitMix64::new(seed);
    let (meta, _) = random_model(cfg, seed, GgmlType::F32);
    let pool: Vec<char> = match &meta.hparams.mapping {
        Mapping::Table(cps) => cps.iter().filter_map(|&c| char::from_u32(c)).collect(),
        Mapping::Direct => (0x4E00..0x5E00).chain(0x21..0x7F).filter_map(char::from_u32).collect(),
    };
    (0..400).map(|_| (0..16).map(|_| pool[rng.below(pool.len() as u64) as usize]).collect()).collect()
}

/// Mean |Δlogit| (word and replace logits) against the float model.
fn mean_abs_delta(contexts: &[String], float: &mut Session, other: &mut Session) -> f64 {
    let (mut sum, mut n) = (0f64, 0usize);
    for c in contexts {
        let (fw, fr) = float.logits(c);
        let (fw, fr) = (fw.to_vec(), fr.to_vec());
        let (w, r) = other.logits(c);
        for (a, b) in fw.iter().chain(fr.iter()).zip(w.iter().chain(r.iter())) {
            sum += f64::from((a - b).abs());
            n += 1;
        }
    }
    sum / n as f64
}

#[test]
fn compensation_brings_logits_closer_to_the_float_model() {
    let cfgs =
        [("direct 65536 rows", TinyConfig::default()), ("table 300 rows", TinyConfig { table_rows: Some(300), ..TinyConfig::default() })];
    for (what, cfg) in cfgs {
        for seed in [1, 42] {
            let (meta, tensors) = random_model(&cfg, seed, GgmlType::F32);
            let ctx = contexts(&cfg, seed);
            let mut float = Session::new(Model::from_bytes(write_model(&meta, &tensors).unwrap()).unwrap());
            let mut measure = |compensation: bool| {
                // Only the embedding is quantised, so the comparison isolates its error.
                let opts = QuantizeOptions { embedding: GgmlType::Q4_1, linear: GgmlType::F32, head: GgmlType::F32, compensation };
                let (meta, tensors) = random_quantized_model(&cfg, seed, &opts);
                let model = Model::from_bytes(write_model(&meta, &tensors).unwrap()).unwrap();
                mean_abs_delta(&ctx, &mut float, &mut Session::new(model))
            };
            let (with, without) = (measure(true), measure(false));
            eprintln!("{what}, seed {seed}: mean |dlogit| with comp {with:.6}, without {without:.6}");
            assert!(with < without, "{what}, seed {seed}: with comp {with} >= without {without}");
        }
    }
}

#[test]
fn default_quantisation_loads_and_predicts() {
    let (meta, tensors) = random_quantized_model(&TinyConfig::default(), 3, &QuantizeOptions::default());
    let model = Model::from_bytes(write_model(&meta, &tensors).unwrap()).unwrap();
    let mut s = Session::new(model);
    let c = s.predict("hel", 5);
    assert!(!c.is_empty());
}

/// `laya quantize` gives a factorised head's class head the word head's type, and the
/// quantised model ranks close to the float one.
#[test]
fn quantising_a_factorised_head() {
    let cfg = TinyConfig { word_classes: 12, ..TinyConfig::default() };
    let (meta, tensors) = random_quantized_model(&cfg, 3, &QuantizeOptions::default());
    let class_w = tensors.iter().find(|t| t.name == laya_format::OUTPUT_CLASS_W).unwrap();
    let head = tensors.iter().find(|t| t.name == "output.weight").unwrap();
    assert_eq!((class_w.ty, head.ty), (GgmlType::Q8_0, GgmlType::Q8_0));
    let q = Model::from_bytes(write_model(&meta, &tensors).unwrap()).unwrap();
    let (fmeta, ftensors) = random_model(&cfg, 3, GgmlType::F32);
    let f = Model::from_bytes(write_model(&fmeta, &ftensors).unwrap()).unwrap();
    let ctxs = contexts(&cfg, 3);
    let delta = mean_abs_delta(&ctxs, &mut Session::new(f), &mut Session::new(q));
    assert!(delta < 0.05, "mean |Δ ln P(w)| {delta}");
}
