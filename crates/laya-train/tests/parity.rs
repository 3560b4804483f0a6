//! The trained network in candle and the runtime on the exported file compute the same thing
//! (docs/format.md §3), within a named tolerance, for F32 and F16 export.

use laya_train::*;

/// Max |runtime − candle| / (1 + |candle|) per logit. F32 export is the same weights, so only
/// summation order differs; F16 export rounds every matrix to 11 bits of mantissa.
const TOL_F32: f32 = 1e-4;
const TOL_F16: f32 = 2e-2;

const CONTEXTS: &[&str] =
    &["", "今天天气", "明", "hello wor", "😀 emoji", "\u{0}nul\u{1}", "ａｂｃ１２３", "一二三四五六七八九十一二三四五六七八九十"];

fn config() -> ModelConfig {
    let words: Vec<String> = ["今天", "天气", "明天", "明白", "hello", "world", "的", "好"].iter().map(|s| s.to_string()).collect();
    let freqs = vec![1; words.len()];
    let mapping = laya_train::table_mapping(CONTEXTS.iter().copied(), 40, 1, &[NormRule::FullwidthAscii]);
    let mut cfg = ModelConfig::standard(words, freqs, mapping);
    cfg.d_model = 64;
    cfg.ffn = vec![96, 64];
    cfg
}

#[test]
fn runtime_matches_candle_on_the_exported_file() {
    assert_runtime_matches(&LayaNet::new(config(), 7).unwrap(), "");
}

/// The runtime's `Session::logits` on `net`'s F32 and F16 exports against `predict_logits`.
fn assert_runtime_matches(net: &LayaNet, what: &str) {
    let (want_w, want_r) = net.predict_logits(CONTEXTS).unwrap();
    let info =
        ExportInfo { name: "parity".into(), language: "zh".into(), training_data: "random init".into(), created: "2026-11-29".into() };
    for (precision, tol) in [(Precision::F32, TOL_F32), (Precision::F16, TOL_F16)] {
        let bytes = net.export_bytes(&info, precision).unwrap();
        let model = laya_runtime::Model::from_bytes(bytes).unwrap();
        let mut s = laya_runtime::Session::new(model);
        let mut worst = 0f32;
        for (i, ctx) in CONTEXTS.iter().enumerate() {
            let (w, r) = s.logits(ctx);
            assert_eq!((w.len(), r.len()), (want_w[i].len(), want_r[i].len()));
            for (a, b) in w.iter().chain(&r).zip(want_w[i].iter().chain(&want_r[i])) {
                worst = worst.max((a - b).abs() / (1.0 + b.abs()));
            }
        }
        assert!(worst <= tol, "{what}{precision:?}: worst relative difference {worst} > {tol}");
        eprintln!("{what}{precision:?}: worst relative difference {worst:.2e} (tolerance {tol:.0e})");
    }
}

/// The same for a factorised word head: the runtime's `Session::logits` returns `log P(w)`
/// (log class probability + within-class log-softmax) for it, as `LayaNet::forward` does.
#[test]
fn runtime_matches_candle_on_a_factorised_model() {
    let mut cfg = config();
    cfg.frequencies = (1..=cfg.words.len() as u32).rev().collect();
    cfg.word_class = Some(laya_format::assign_word_classes(cfg.words.iter().map(String::as_str), &cfg.frequencies, 4));
    assert!(cfg.word_classes() >= 3);
    assert_runtime_matches(&LayaNet::new(cfg, 7).unwrap(), "factorised ");
}

/// A quantised embedding with its compensation table, loaded back for fine-tuning, must give the
/// network the runtime computes: `from_laya` adds the compensation rows as the runtime does.
#[test]
fn from_laya_applies_the_embedding_compensation() {
    let net = LayaNet::new(config(), 9).unwrap();
    let info = ExportInfo { name: "q".into(), language: "zh".into(), training_data: "random".into(), created: "2026-11-29".into() };
    let bytes = net.export_bytes(&info, Precision::F32).unwrap();
    let file = laya_format::LayaFile::parse(&bytes).unwrap();
    let opts = laya_format::quantize::QuantizeOptions {
        embedding: laya_format::GgmlType::Q4_1,
        linear: laya_format::GgmlType::F32,
        head: laya_format::GgmlType::F32,
        compensation: true,
    };
    let q = laya_format::quantize::quantize_model(&file, &opts).unwrap();
    assert!(q.tensors.iter().any(|t| t.name == "token_embd_comp.weight"));
    let qbytes = laya_format::write_model(&q.meta, &q.tensors).unwrap();
    let back = LayaNet::from_laya(&laya_format::LayaFile::parse(&qbytes).unwrap()).unwrap();
    let (want_w, _) = back.predict_logits(CONTEXTS).unwrap();
    let mut s = laya_runtime::Session::new(laya_runtime::Model::from_bytes(qbytes).unwrap());
    s.set_act_precision(laya_runtime::ActPrecision::F32);
    let mut worst = 0f32;
    for (i, ctx) in CONTEXTS.iter().enumerate() {
        let (w, _) = s.logits(ctx);
        for (a, b) in w.iter().zip(&want_w[i]) {
            worst = worst.max((a - b).abs() / (1.0 + b.abs()));
        }
    }
    assert!(worst <= TOL_F32, "candle on the dequantised file vs runtime: {worst}");
}

/// The causal scheme: the candle network against the runtime computing each context whole, and
/// against one runtime session typing a long text one character at a time (kept keys and
/// values), past the receptive field (31 tokens here).
#[test]
fn runtime_matches_candle_on_a_causal_model_typed_or_whole() {
    let mut cfg = config();
    cfg.position_scheme = PositionScheme::RelativeCausal;
    let net = LayaNet::new(cfg, 11).unwrap();
    let text = "今天天气不错，明天也好。hello world 😀 一二三四五六七八九十一二三四五六七八九十";
    let prefixes: Vec<&str> = text.char_indices().map(|(i, c)| &text[..i + c.len_utf8()]).collect();
    let mut contexts: Vec<&str> = CONTEXTS.to_vec();
    contexts.extend(&prefixes);
    let (want_w, want_r) = net.predict_logits(&contexts).unwrap();
    let info =
        ExportInfo { name: "causal".into(), language: "zh".into(), training_data: "random init".into(), created: "2026-11-30".into() };
    let model = laya_runtime::Model::from_bytes(net.export_bytes(&info, Precision::F32).unwrap()).unwrap();
    let mut typing = laya_runtime::Session::new(model.clone());
    typing.set_profiling(true);
    let worst = worst_typed_or_whole(&model, &mut typing, &contexts, &want_w, &want_r);
    assert!(worst <= TOL_F32, "causal: worst relative difference {worst} > {TOL_F32}");
    // `logits` does not count in the stage times; predicting the typed prefixes in order does.
    for p in &prefixes {
        typing.predict(p, 5);
    }
    assert!(typing.stage_times().reused + 1 >= prefixes.len() as u64, "{:?}", typing.stage_times());
}

/// The worst relative difference from `want_w` / `want_r` of the logits of `contexts`, each
/// computed whole by a fresh session and by `typing`, which sees them in order (and keeps keys
/// and values where a context extends the one before).
fn worst_typed_or_whole(
    model: &std::sync::Arc<laya_runtime::Model>,
    typing: &mut laya_runtime::Session,
    contexts: &[&str],
    want_w: &[Vec<f32>],
    want_r: &[Vec<f32>],
) -> f32 {
    let mut worst = 0f32;
    for (i, ctx) in contexts.iter().enumerate() {
        let mut whole = laya_runtime::Session::new(model.clone());
        for s in [&mut whole, &mut *typing] {
            let (w, r) = s.logits(ctx);
            for (a, b) in w.iter().chain(&r).zip(want_w[i].iter().chain(&want_r[i])) {
                worst = worst.max((a - b).abs() / (1.0 + b.abs()));
            }
        }
    }
    worst
}

/// An output memory (docs/format.md §3 step 4): the runtime hashes the same tokens to the same
/// rows as the trainer, typed or whole; every table row random, so that a wrong row shows.
#[test]
fn runtime_matches_candle_with_an_output_memory() {
    let mut cfg = config();
    cfg.position_scheme = PositionScheme::RelativeCausal;
    cfg.memory = Some(laya_format::memory::Memory { buckets: 97, orders: vec![1, 2, 4] });
    let net = LayaNet::new(cfg, 3).unwrap();
    let mut rng = Rng::new(1, 5);
    for p in net.params().iter().filter(|p| p.kind == ParamKind::TokenEmbedding) {
        let v: Vec<f32> = (0..p.var.elem_count()).map(|_| (rng.uniform() - 0.5) as f32).collect();
        p.var.set(&candle_core::Tensor::from_vec(v, p.var.dims(), net.device()).unwrap()).unwrap();
    }
    let text = "今天天气不错，明天也好。hello world 😀 一二三四五六七八九十一二三四五六七八九十";
    let mut contexts: Vec<&str> = CONTEXTS.to_vec();
    contexts.extend(text.char_indices().map(|(i, c)| &text[..i + c.len_utf8()]));
    let (want_w, want_r) = net.predict_logits(&contexts).unwrap();
    let info = ExportInfo { name: "memory".into(), language: "zh".into(), training_data: "random".into(), created: "2026-12-05".into() };
    let bytes = net.export_bytes(&info, Precision::F32).unwrap();
    assert_eq!(laya_format::LayaFile::parse(&bytes).unwrap().memory_embd.unwrap().ne, vec![64, 97]);
    let model = laya_runtime::Model::from_bytes(bytes).unwrap();
    let mut typing = laya_runtime::Session::new(model.clone());
    let worst = worst_typed_or_whole(&model, &mut typing, &contexts, &want_w, &want_r);
    assert!(worst <= TOL_F32, "memory: worst relative difference {worst} > {TOL_F32}");
}
