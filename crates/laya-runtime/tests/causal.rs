//! `relative_causal` models (docs/format.md §3): a session keeps each block's keys and values
//! between keystrokes and computes only the new characters. That must change nothing: every
//! prediction made incrementally equals, to the bit, the same context computed from scratch.

mod common;

use std::sync::Arc;

use laya_format::quantize::QuantizeOptions;
use laya_format::testing::{random_quantized_model, TinyConfig};
use laya_format::{write_model, GgmlType, PositionScheme};
use laya_runtime::{ActPrecision, Int8Isa, Kernels, Model, Session, MAX_INCREMENTAL_CHARS};

fn causal(ffn: Vec<u32>) -> TinyConfig {
    TinyConfig { position_scheme: PositionScheme::RelativeCausal, feed_forward_length: ffn, ..TinyConfig::default() }
}

/// What a person does in a text field, as the sequence of contexts the keyboard asks about:
/// typing one character at a time, committing candidates of several characters, deleting,
/// pasting more than the incremental limit, and typing on long enough that the kept keys and
/// values wrap around.
fn keystrokes() -> Vec<String> {
    let mut out = Vec::new();
    let mut text = String::new();
    let push = |out: &mut Vec<String>, text: &mut String, add: &str| {
        text.push_str(add);
        out.push(text.clone());
    };
    for c in "今天天气不错，我们去".chars() {
        push(&mut out, &mut text, &c.to_string());
    }
    for word in ["公园", "散步吧", "😀", "ｈｅｌｌｏ", "a\u{0}b", "、"] {
        push(&mut out, &mut text, word); // a committed candidate: several characters at once
    }
    text.pop();
    out.push(text.clone()); // backspace
    out.push(text.clone()); // the same context again
    push(&mut out, &mut text, "这是一段粘贴进来的很长的文字超过了上限"); // a paste
    for c in "typing on and on so that the window slides well past the cache capacity, 然后继续输入中文字符直到缓存回绕好几次为止。".chars()
    {
        push(&mut out, &mut text, &c.to_string());
    }
    out
}

fn models() -> Vec<(String, Arc<Model>, Kernels)> {
    let mut out = Vec::new();
    // Every f32 tier, and every int8 instruction set this CPU has on top of the best one
    // (packed layers are computed several positions at once when a context is computed whole).
    let mut tiers = vec![Kernels::scalar(), Kernels::detect()];
    tiers.extend(Int8Isa::ALL.into_iter().filter_map(|isa| Kernels::detect().with_int8(isa)));
    tiers.dedup_by_key(|k| (k.level(), k.int8_isa()));
    for k in tiers {
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_1] {
            for cfg in [causal(vec![128, 96]), causal(vec![64, 32, 64])] {
                let label = format!("{ty:?} {} blocks on {:?}/{:?}", cfg.feed_forward_length.len(), k.level(), k.int8_isa());
                out.push((label, common::model_with(&cfg, 3, ty, k), k));
            }
        }
        let (meta, tensors) = random_quantized_model(&causal(vec![128, 96]), 3, &QuantizeOptions::default());
        let m = Model::from_bytes_with(write_model(&meta, &tensors).unwrap(), k).unwrap();
        out.push((format!("laya quantize output on {:?}", k.level()), m, k));
    }
    out
}

#[test]
fn typing_incrementally_equals_computing_from_scratch() {
    let contexts = keystrokes();
    for (label, model, _) in models() {
        for act in [ActPrecision::F32, ActPrecision::Int8, ActPrecision::Int8All] {
            let mut typing = Session::new(Arc::clone(&model));
            typing.set_act_precision(act);
            typing.set_profiling(true);
            for ctx in &contexts {
                let (w, r) = typing.logits(ctx);
                // A fresh session has nothing kept, so it computes the context whole.
                let mut fresh = Session::new(Arc::clone(&model));
                fresh.set_act_precision(act);
                let (fw, fr) = fresh.logits(ctx);
                let same = w.iter().chain(&r).zip(fw.iter().chain(&fr)).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{label}, {act:?}: context {ctx:?} differs when typed");
                // And the ranked candidates, through predict.
                let a: Vec<(String, usize, u32)> =
                    typing.predict(ctx, 5).iter().map(|c| (c.word.to_string(), c.replace, c.p.to_bits())).collect();
                let b: Vec<(String, usize, u32)> =
                    fresh.predict(ctx, 5).iter().map(|c| (c.word.to_string(), c.replace, c.p.to_bits())).collect();
                assert_eq!(a, b, "{label}, {act:?}: {ctx:?}");
            }
            // Guard against a test that passes because nothing was ever reused: predict sees
            // each context right after `logits` did (k = 0, computed whole), so count through a
            // second pass that only types.
            let mut s = Session::new(Arc::clone(&model));
            s.set_act_precision(act);
            s.set_profiling(true);
            for ctx in &contexts {
                s.predict(ctx, 5);
            }
            let t = s.stage_times();
            assert!(t.reused * 10 >= t.predictions * 8, "{label}: only {} of {} reused", t.reused, t.predictions);
            assert!(t.reused < t.predictions, "{label}: the paste and the backspace must recompute");
        }
    }
}

#[test]
fn reuse_follows_the_rules() {
    let model = common::model(&causal(vec![128, 96]), 5, GgmlType::F32);
    let mut s = Session::new(model);
    s.set_profiling(true);
    let reused = |s: &mut Session, ctx: &str| {
        let before = s.stage_times().reused;
        s.predict(ctx, 5);
        s.stage_times().reused > before
    };
    assert!(!reused(&mut s, "今天"), "nothing kept yet");
    assert!(reused(&mut s, "今天天"));
    assert!(reused(&mut s, &format!("今天天{}", "气".repeat(MAX_INCREMENTAL_CHARS))));
    assert!(!reused(&mut s, &format!("今天天{}", "气".repeat(2 * MAX_INCREMENTAL_CHARS + 1))), "more than the limit at once");
    assert!(!reused(&mut s, "今天"), "a deletion recomputes");
    assert!(!reused(&mut s, "今天"), "the same context again recomputes");
    assert!(!reused(&mut s, "x今天天"), "a change before the cursor recomputes");
    // A short context aligns at its start: "天天" then "今天天" shares a suffix but not the start.
    assert!(!reused(&mut s, "天天"));
    assert!(!reused(&mut s, "今天天"));
    // Changing precision or model drops what was kept.
    assert!(reused(&mut s, "今天天气"));
    s.set_act_precision(ActPrecision::F32);
    assert!(!reused(&mut s, "今天天气好"));
    assert!(reused(&mut s, "今天天气好啊"));
    let other = common::model(&causal(vec![128, 96]), 6, GgmlType::F32);
    s.set_model(other);
    assert!(!reused(&mut s, "今天天气好啊!"));
}

#[test]
fn only_the_receptive_field_matters() {
    // 2 blocks, T = 16: the last 31 tokens reach the output; a 32nd one back does not.
    let model = common::model(&causal(vec![128, 96]), 7, GgmlType::F32);
    assert_eq!(model.config().receptive_field, 31);
    let mut s = Session::new(model);
    let tail: String = "零一二三四五六七八九十甲乙丙丁戊己庚辛壬癸子丑寅卯辰巳午未申酉".chars().take(31).collect();
    let a = s.logits(&format!("很久以前{tail}"));
    let b = s.logits(&format!("完全不同的开头{tail}"));
    assert_eq!(a, b);
    // With fewer tokens than that the start of the text (BOS) is visible.
    let short: String = tail.chars().skip(2).collect();
    let c = s.logits(&format!("很{short}"));
    let d = s.logits(&format!("完{short}"));
    assert_ne!(c, d);
}

#[test]
fn swapping_between_causal_and_learned_models_mid_typing() {
    // A hot swap (Engine, C ABI) calls set_model between keystrokes; what was kept for one model
    // must never leak into another's prediction.
    let causal_a = common::model(&causal(vec![128, 96]), 8, GgmlType::Q8_0);
    let causal_b = common::model(&causal(vec![128, 96]), 9, GgmlType::Q8_0);
    let learned = common::model(&TinyConfig { feed_forward_length: vec![128, 96], ..TinyConfig::default() }, 8, GgmlType::Q8_0);
    // A factorised head of the same shape otherwise: the session's class buffers must follow.
    let factorised = common::model(&TinyConfig { word_classes: 12, ..causal(vec![128, 96]) }, 8, GgmlType::Q8_0);
    let order = [&causal_a, &causal_b, &learned, &causal_a, &factorised, &causal_a, &learned, &factorised, &causal_b];
    let mut s = Session::new(Arc::clone(&causal_a));
    let mut text = String::from("今天");
    for (i, m) in order.iter().cycle().take(40).enumerate() {
        s.set_model(Arc::clone(m));
        text.push(char::from_u32(0x4E00 + (i as u32 * 37) % 500).unwrap());
        let got = s.logits(&text);
        let want = Session::new(Arc::clone(m)).logits(&text);
        assert_eq!(got, want, "after {i} swaps, context {text:?}");
    }
}
