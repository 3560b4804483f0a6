//! Damaged n-gram tables (docs/format.md §8): whatever is written into them, a file is either
//! refused at load with the tensor named, or it loads and every prediction is well formed —
//! counts and totals that disagree with each other must not make the runtime panic, divide by
//! zero or rank a non-finite probability.

mod common;

use common::{aligned, CONTEXTS};
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

/// A model with an n-gram compiled into the program with its prepared index (which carries the
/// n-gram's best unigram candidates and long lists) predicts bit for bit what the same bytes on
/// the heap predict, where the lists are picked from the counts; candidates past the lexicon in
/// the index are refused, and so are long lists without the counts of their words.
#[test]
fn prepared_ngram_lists_predict_as_lists_picked_from_the_counts() {
    // Enough words and lines that some follower lists are long (prepared with their counts).
    let cfg = TinyConfig { word_classes: 6, vocab: 700, ..TinyConfig::small() };
    let (meta, mut tensors) = random_model(&cfg, 4, GgmlType::F32);
    tensors.extend(random_ngram(cfg.vocab, 6000, 4));
    let bytes = write_model(&meta, &tensors).unwrap();
    let heap = Model::from_bytes(bytes.clone()).unwrap();
    let index = heap.prepared_index();
    // The n-gram's six arrays follow thirteen others of these element sizes
    // (crates/laya-runtime/src/prepared.rs).
    let sizes = [2, 1, 1, 4, 8, 2, 1, 4, 1, 1, 4, 4, 4];
    let count = |at: usize| u64::from_le_bytes(index[at..at + 8].try_into().unwrap()) as usize;
    let (bytes, checksum) = (aligned(&bytes), heap.info().checksum);
    let prepared = Model::from_static_prepared(bytes, checksum, aligned(&index)).unwrap();
    let n = heap.lexicon_len();
    let (mut a, mut b) = (Session::with_max_k(heap, n), Session::with_max_k(prepared, n));
    for ctx in CONTEXTS {
        let pa: Vec<_> = a.predict(ctx, 8).iter().map(|c| (c.word.to_string(), c.replace, c.p.to_bits())).collect();
        let pb: Vec<_> = b.predict(ctx, 8).iter().map(|c| (c.word.to_string(), c.replace, c.p.to_bits())).collect();
        assert_eq!(pa, pb, "{ctx:?}");
    }
    // The first of the best unigram candidates (array 13) made a position past the lexicon.
    let top_at = sizes.iter().fold(56, |at, size| at + 8 + (count(at) * size).next_multiple_of(8));
    assert!(count(top_at) > 0);
    let mut damaged = index.clone();
    damaged[top_at + 8..top_at + 12].copy_from_slice(&u32::MAX.to_le_bytes());
    let refused = Model::from_static_prepared(bytes, checksum, aligned(&damaged)).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(refused.contains("n-gram candidates"), "{refused}");
    // The counts of the best unigram candidates in each long list (array 18) left out.
    let sizes = [2, 1, 1, 4, 8, 2, 1, 4, 1, 1, 4, 4, 4, 4, 8, 8, 2, 2];
    let c1_at = sizes.iter().fold(56, |at, size| at + 8 + (count(at) * size).next_multiple_of(8));
    assert!(count(c1_at) > 0, "the test n-gram has long lists");
    let mut damaged = index[..c1_at].to_vec();
    damaged.extend_from_slice(&0u64.to_le_bytes());
    damaged.extend_from_slice(&index[c1_at + 8 + (2 * count(c1_at)).next_multiple_of(8)..]);
    let refused = Model::from_static_prepared(bytes, checksum, aligned(&damaged)).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(refused.contains("counts do not match"), "{refused}");
}
