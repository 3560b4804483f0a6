//! Damaged n-gram tables (docs/format.md §8): whatever is written into them, a file is either
//! refused at load with the tensor named, or it loads and every prediction is well formed —
//! counts and totals that disagree with each other must not make the runtime panic, divide by
//! zero or rank a non-finite probability.

mod common;

use common::CONTEXTS;
use laya_format::ngram::names;
use laya_format::testing::{random_model, random_ngram, SplitMix64, TinyConfig};
use laya_format::{write_model, GgmlType, TensorData};
use laya_runtime::{Model, Session};

#[test]
fn damaged_tables_are_refused_or_predict_well_formed_bars() {
    let cfg = TinyConfig { word_classes: 6, ..TinyConfig::small() };
    let (meta, tensors) = random_model(&cfg, 4, GgmlType::F32);
    let ngram = random_ngram(cfg.vocab, 300, 4);
    let (mut refused, mut loaded) = (0, 0);
    for seed in 0..300u64 {
        let mut rng = SplitMix64::new(seed);
        let mut damaged: Vec<TensorData> = ngram.clone();
        // A few entries of one integer table overwritten: small values (plausible counts and
        // positions) as often as arbitrary ones.
        let t = &mut damaged[rng.below(names::ALL.len() as u64 - 1) as usize];
        let width = t.ty.block_bytes();
        let entries = t.data.len() / width;
        for _ in 0..1 + rng.below(4) {
            if entries == 0 {
                break;
            }
            let at = rng.below(entries as u64) as usize * width;
            let value = if rng.below(2) == 0 { rng.below(40) } else { rng.next_u64() };
            t.data[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
        }
        let mut all = tensors.clone();
        all.extend(damaged);
        let Ok(bytes) = write_model(&meta, &all) else {
            refused += 1;
            continue;
        };
        loaded += 1;
        let mut s = Session::new(Model::from_bytes(bytes).expect("a file write_model accepts loads"));
        for ctx in CONTEXTS {
            let bar = s.predict(ctx, 5);
            let mut last = f32::INFINITY;
            for c in bar.iter() {
                assert!(c.p.is_finite() && c.p >= 0.0 && c.p <= last + 1e-6, "seed {seed} {ctx:?}: {}", c.p);
                last = c.p;
                assert!(c.replace < c.word.chars().count(), "seed {seed} {ctx:?}");
            }
        }
    }
    println!("damaged n-gram tables: {refused} refused, {loaded} loaded and predicted");
    assert!(refused > 0 && loaded > 0, "{refused} refused, {loaded} loaded: both paths must be taken");
}
