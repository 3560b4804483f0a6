//! SPEC.md: zero heap allocations per prediction, counted by a real allocator.

mod common;

use common::{model, CONTEXTS};
use std::sync::Arc;

use laya_format::quantize::QuantizeOptions;
use laya_format::testing::{random_quantized_model, TinyConfig};
use laya_format::{write_model, GgmlType};
use laya_runtime::{Model, Session};

#[test]
fn predict_allocates_nothing() {
    let mut models: Vec<(String, Arc<Model>)> = [GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1]
        .into_iter()
        .map(|ty| (format!("{ty:?}"), model(&TinyConfig::default(), 2, ty)))
        .collect();
    // The compensated embedding lookup (token_embd_comp.weight) must not allocate either.
    let (meta, tensors) = random_quantized_model(&TinyConfig::default(), 2, &QuantizeOptions::default());
    models.push(("Q4_1+comp".into(), Model::from_bytes(write_model(&meta, &tensors).unwrap()).unwrap()));
    // The completion prior (dictionary frequencies in the file, default λ) reweights in place.
    models.push(("F32+dict prior".into(), common::model_with_dict(&TinyConfig::default(), 2, GgmlType::F32).0));
    // A relative_causal model keeps keys and values between predictions; typing (below, each
    // context extending the last) goes through that path, the CONTEXTS through the whole one.
    let causal = TinyConfig { position_scheme: laya_format::PositionScheme::RelativeCausal, ..TinyConfig::default() };
    for ty in [GgmlType::F32, GgmlType::Q8_0] {
        models.push((format!("causal {ty:?}"), model(&causal, 2, ty)));
    }
    // A factorised word head expands classes into buffers sized at session creation.
    let factorised = TinyConfig { word_classes: 12, ..causal.clone() };
    models.push(("factorised Q8_0".into(), common::model_with_dict(&factorised, 2, GgmlType::Q8_0).0));
    // An output memory hashes the last tokens into fixed buffers and adds rows in place.
    let memory = TinyConfig { memory: Some(laya_format::memory::Memory { buckets: 50, orders: vec![2, 3, 4] }), ..factorised.clone() };
    models.push(("factorised Q8_0 + memory".into(), model(&memory, 2, GgmlType::Q8_0)));
    // A language with case shows candidates in the typed case, from a buffer sized once.
    let (mut meta, tensors) = laya_format::testing::random_model(&factorised, 2, GgmlType::Q8_0);
    meta.provenance.language = "en".into();
    models.push(("English (case shown) Q8_0".into(), Model::from_bytes(write_model(&meta, &tensors).unwrap()).unwrap()));
    // The word trigram beside the network reads its tables in place and mixes in fixed buffers.
    models.push(("flat F32 + n-gram".into(), common::model_with_ngram(&TinyConfig::default(), 2, GgmlType::F32, "zh")));
    models.push(("factorised Q8_0 + n-gram".into(), common::model_with_ngram(&factorised, 2, GgmlType::Q8_0, "zh")));
    models.push(("English Q8_0 + n-gram".into(), common::model_with_ngram(&factorised, 2, GgmlType::Q8_0, "en")));
    let typed: Vec<String> = {
        let text = "今天天气不错，我们去公园散步吧。Typing ONE key at a time. Long enough to wrap the kept keys around";
        text.char_indices().map(|(i, c)| text[..i + c.len_utf8()].to_string()).collect()
    };
    for (ty, m) in models {
        let mut s = Session::new(m);
        s.warm_up();
        // Sanity: the counter is live, so a zero below cannot pass vacuously.
        let probe = allocation_counter::measure(|| {
            std::hint::black_box(vec![1u8; 16]);
        });
        assert!(probe.count_total >= 1);
        let info = allocation_counter::measure(|| {
            for _ in 0..3 {
                for ctx in CONTEXTS {
                    std::hint::black_box(s.predict(ctx, 5).len());
                }
            }
        });
        assert_eq!(info.count_total, 0, "{ty}: {} allocations", info.count_total);
        let info = allocation_counter::measure(|| {
            for ctx in &typed {
                std::hint::black_box(s.predict(ctx, 5).len());
            }
        });
        assert_eq!(info.count_total, 0, "{ty} typing: {} allocations", info.count_total);
        s.set_profiling(true);
        let info = allocation_counter::measure(|| {
            for ctx in CONTEXTS {
                std::hint::black_box(s.predict(ctx, 5).len());
            }
        });
        assert_eq!(info.count_total, 0, "{ty} with profiling");
    }
}
