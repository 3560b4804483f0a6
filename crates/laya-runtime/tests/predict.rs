//! Behaviour of `Session::predict` on small generated models: the contract of SPEC.md.

mod common;

use common::{aligned, model, CONTEXTS};
use laya_format::testing::TinyConfig;
use laya_format::GgmlType;
use laya_runtime::{Model, Session};

#[test]
fn candidates_obey_the_replace_contract_on_every_kind_of_context() {
    for ty in [GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_1] {
        let m = model(&TinyConfig::default(), 7, ty);
        let mut s = Session::new(m);
        for ctx in CONTEXTS {
            let preds = s.predict(ctx, 5);
            assert_eq!(preds.len(), 5, "{ty:?} {ctx:?}");
            let chars: Vec<char> = ctx.chars().collect();
            let mut last = f32::INFINITY;
            for c in preds.iter() {
                assert!(c.p.is_finite() && c.p >= 0.0 && c.p <= 1.0, "{c:?}");
                assert!(c.p <= last + 1e-6, "sorted best-first");
                last = c.p;
                assert!(c.replace < c.word.chars().count(), "{c:?}");
                assert!(c.replace <= chars.len(), "{c:?} for {ctx:?}");
                if c.replace > 0 {
                    // The context is normalised first (fullwidth → ASCII).
                    let tail: String = chars[chars.len() - c.replace..]
                        .iter()
                        .map(|&ch| match ch as u32 {
                            0xFF01..=0xFF5E => char::from_u32(ch as u32 - 0xFEE0).unwrap(),
                            0x3000 => ' ',
                            _ => ch,
                        })
                        .collect();
                    assert!(c.word.starts_with(&tail), "{c:?} does not start with {tail:?}");
                }
            }
        }
    }
}

#[test]
fn k_zero_and_k_larger_than_capacity() {
    let m = model(&TinyConfig::default(), 1, GgmlType::F32);
    let mut s = Session::with_max_k(m, 3);
    assert!(s.predict("hel", 0).is_empty());
    assert_eq!(s.predict("hel", 100).len(), 3);
}

#[test]
fn probabilities_of_all_admissible_pairs_sum_to_one() {
    let cfg = TinyConfig::default();
    let m = model(&cfg, 3, GgmlType::F32);
    let n = m.lexicon_len() * m.config().replace_classes;
    let mut s = Session::with_max_k(m, n);
    for ctx in CONTEXTS {
        let total: f32 = s.predict(ctx, n).iter().map(|c| c.p).sum();
        // After a Latin letter or digit the Latin next words keep their share off the bar
        // (docs/format.md §3 step 6, "Glued Latin").
        // (Judged after the model's full-width rule: `１` is `1`.)
        let last = ctx.chars().last().map(|c| match c as u32 {
            0xFF01..=0xFF5E => char::from_u32(c as u32 - 0xFEE0).unwrap_or(c),
            _ => c,
        });
        if last.is_some_and(laya_format::punct::glues) {
            assert!(total < 1.0 + 1e-3, "{ctx:?}: {total}");
        } else {
            assert!((total - 1.0).abs() < 1e-3, "{ctx:?}: {total}");
        }
    }
}

#[test]
fn same_context_same_answer_across_sessions_and_threads() {
    let m = model(&TinyConfig::default(), 11, GgmlType::Q8_0);
    let mut s = Session::new(m.clone());
    let want: Vec<Vec<(String, usize)>> =
        CONTEXTS.iter().map(|c| s.predict(c, 5).iter().map(|c| (c.word.to_string(), c.replace)).collect()).collect();
    std::thread::scope(|sc| {
        for _ in 0..4 {
            let (m, want) = (m.clone(), &want);
            sc.spawn(move || {
                let mut s = Session::new(m);
                for _ in 0..20 {
                    for (ctx, w) in CONTEXTS.iter().zip(want) {
                        let got: Vec<(String, usize)> = s.predict(ctx, 5).iter().map(|c| (c.word.to_string(), c.replace)).collect();
                        assert_eq!(&got, w);
                    }
                }
            });
        }
    });
}

#[test]
fn every_kernel_tier_agrees_with_the_scalar_reference() {
    use laya_runtime::{Kernels, Level};
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1] {
        let scalar = common::model_with(&TinyConfig::default(), 5, ty, Kernels::scalar());
        // The f32 kernels: across float levels, int8 activations can round a value the other
        // way and amplify a 1e-7 difference; the int8 sets are compared in tests/int8.rs.
        let mut rs = Session::new(scalar);
        rs.set_act_precision(laya_runtime::ActPrecision::F32);
        for level in [Level::Avx2, Level::Avx512, Level::Neon] {
            let Some(k) = Kernels::for_level(level) else { continue };
            let mut s = Session::new(common::model_with(&TinyConfig::default(), 5, ty, k));
            s.set_act_precision(laya_runtime::ActPrecision::F32);
            for ctx in CONTEXTS {
                let (a, ar) = rs.logits(ctx);
                let (b, br) = s.logits(ctx);
                for (x, y) in a.iter().chain(&ar).zip(b.iter().chain(&br)) {
                    assert!((x - y).abs() <= 1e-3 * (1.0 + x.abs()), "{ty:?} {level} {ctx:?}: {x} vs {y}");
                }
            }
        }
    }
}

/// The naive reference of the ranking (docs/format.md §3 step 6) under every completion rule:
/// every admissible pair scored from the session's own logits, straight from the rule's
/// definition, sorted. The fast path must give the same top-k and the same probabilities.
#[test]
fn ranking_matches_a_naive_reference_for_every_completion_rule() {
    use laya_runtime::CompletionRule;
    let cfg = TinyConfig::default();
    let rules = [
        (CompletionRule::Marginal, 1.0f32),
        (CompletionRule::Split, 1.0),
        (CompletionRule::Conditional, 1.0),
        (CompletionRule::Product, 1.0),
        (CompletionRule::Product, 0.5),
        (CompletionRule::Product, 0.25),
        (CompletionRule::Product, 0.0),
    ];
    // Words the split rule took off the next-word list: the contexts must exercise it.
    let mut split_words = 0;
    // Completions the prior moved by more than 1%: likewise.
    let mut reweighted = 0;
    // (model, its per-word prior shift ln(d/Σd) − ln((c+1)/Σ(c+1)) or none, λ): a file
    // without dictionary frequencies at the default λ, then one with them at several λ.
    // The same with factorised word heads (the runtime expands classes lazily; `logits` gives
    // ln P(w) whole, which the reference softmaxes back to P(w)), in f32 and through the int8
    // class rows.
    // 12 and 60 classes asked: fewer than, and more than, the k + 3 best that ranking visits
    // before its second pass.
    let factorised = TinyConfig { word_classes: 12, ..TinyConfig::default() };
    let many = TinyConfig { word_classes: 60, ..TinyConfig::default() };
    // The 30 most frequent words alone in their classes (no row computed for them).
    let own = TinyConfig { word_classes: 12, own_class_words: 30, ..TinyConfig::default() };
    assert!(common::model(&many, 7, GgmlType::F32).config().word_classes > 5 + 3);
    let mut cases = Vec::new();
    for (cfg, seed, ty) in [
        (&cfg, 3, GgmlType::F32),
        (&cfg, 11, GgmlType::F32),
        (&factorised, 3, GgmlType::F32),
        (&factorised, 5, GgmlType::Q8_0),
        (&many, 7, GgmlType::F32),
        (&own, 9, GgmlType::Q8_0),
    ] {
        cases.push((model(cfg, seed, ty), None, laya_runtime::DEFAULT_COMPLETION_PRIOR));
        let (m, meta) = common::model_with_dict(cfg, seed, ty);
        let d = meta.dict_frequencies.clone().unwrap();
        let both: Vec<usize> = (0..d.len()).filter(|&i| d[i] > 0).collect();
        let sd: f64 = both.iter().map(|&i| d[i] as f64).sum();
        let sc: f64 = both.iter().map(|&i| meta.frequencies[i] as f64 + 1.0).sum();
        let shift: Vec<f64> = (0..d.len())
            .map(|i| if d[i] == 0 { 0.0 } else { (d[i] as f64 / sd).ln() - ((meta.frequencies[i] as f64 + 1.0) / sc).ln() })
            .collect();
        for lambda in [0.0, 0.5, 2.0] {
            cases.push((m.clone(), Some(shift.clone()), lambda));
        }
    }
    for (m, shift, lambda) in cases {
        let mut s = Session::new(m.clone());
        s.set_completion_prior(lambda);
        let prior = |id: usize| shift.as_ref().map_or(1.0, |sh| (lambda as f64 * sh[id]).exp());
        for (rule, beta) in rules {
            s.set_completion_rule(rule);
            s.set_completion_exponent(beta);
            for ctx in CONTEXTS {
                let (wl, rl) = s.logits(ctx);
                let softmax = |x: &[f32]| -> Vec<f64> {
                    let mx = x.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
                    let e: Vec<f64> = x.iter().map(|&v| (v as f64 - mx).exp()).collect();
                    let z: f64 = e.iter().sum();
                    e.iter().map(|v| v / z).collect()
                };
                let (pw, pi) = (softmax(&wl), softmax(&rl));
                let chars: Vec<char> = ctx
                    .chars()
                    .map(|ch| match ch as u32 {
                        0xFF01..=0xFF5E => char::from_u32(ch as u32 - 0xFEE0).unwrap(),
                        0x3000 => ' ',
                        _ => ch,
                    })
                    .collect();
                let n = chars.len().min(m.config().context_length);
                // adm[i]: the ids admissible with i >= 1 typed characters.
                let adm: Vec<Vec<usize>> = (0..pi.len().min(n + 1))
                    .map(|i| {
                        if i == 0 {
                            return Vec::new();
                        }
                        let tail: String = chars[chars.len() - i..].iter().collect();
                        (0..m.lexicon_len())
                            .filter(|&id| {
                                let w = m.word(id).unwrap();
                                w.starts_with(&tail) && w.chars().count() > i
                            })
                            .collect()
                    })
                    .collect();
                let mass: Vec<f64> = adm.iter().map(|ids| ids.iter().map(|&id| pw[id]).sum()).collect();
                // The prior reweights each class's words and keeps the class's mass.
                let weighted: Vec<f64> = adm.iter().map(|ids| ids.iter().map(|&id| pw[id] * prior(id)).sum()).collect();
                let pwc = |id: usize, i: usize| -> f64 {
                    if weighted[i] > 0.0 {
                        pw[id] * prior(id) * mass[i] / weighted[i]
                    } else {
                        pw[id]
                    }
                };
                let factor = |i: usize| -> f64 {
                    match rule {
                        CompletionRule::Product => pi[i].powf(beta as f64),
                        CompletionRule::Conditional if mass[i] > 0.0 => pi[i] / mass[i],
                        CompletionRule::Marginal if mass[i] > 0.0 => (pi[i] / mass[i]).min(1.0),
                        _ => 0.0,
                    }
                };
                let mut pairs: Vec<(f64, String, usize)> = Vec::new();
                // Next words glued to a typed Latin word count in the total, off the bar.
                let glued = chars.last().is_some_and(|&c| laya_format::punct::glues(c));
                let mut off_bar = 0.0f64;
                for (id, &p) in pw.iter().enumerate() {
                    let w = m.word(id).unwrap().to_string();
                    let own: Vec<usize> = (1..adm.len()).filter(|&i| adm[i].contains(&id)).collect();
                    if rule == CompletionRule::Split {
                        // Split: P(w) goes to the word's completions in proportion to P(i).
                        let norm: f64 = own.iter().map(|&i| pi[i]).sum();
                        split_words += usize::from(norm > 0.0);
                        let next = if norm > 0.0 { 0.0 } else { p };
                        if glued && w.starts_with(laya_format::punct::glues) {
                            off_bar += next;
                        } else {
                            pairs.push((next, w.clone(), 0));
                        }
                        for &i in &own {
                            reweighted += usize::from((pwc(id, i) - p).abs() > 0.01 * p);
                            pairs.push((if norm > 0.0 { pwc(id, i) * pi[i] / norm } else { 0.0 }, w.clone(), i));
                        }
                        continue;
                    }
                    let taken: f64 = own.iter().map(|&i| factor(i)).sum();
                    let next = match rule {
                        CompletionRule::Marginal => p * (1.0 - taken).max(0.0),
                        _ => p * pi[0],
                    };
                    if glued && w.starts_with(laya_format::punct::glues) {
                        off_bar += next;
                    } else {
                        pairs.push((next, w.clone(), 0));
                    }
                    for &i in &own {
                        pairs.push((pwc(id, i) * factor(i), w.clone(), i));
                    }
                }
                let total: f64 = pairs.iter().map(|p| p.0).sum::<f64>() + off_bar;
                pairs.sort_by(|a, b| b.0.total_cmp(&a.0));
                let got = s.predict(ctx, 5);
                assert_eq!(got.len(), 5.min(pairs.len()));
                let fifth = pairs[got.len() - 1].0 / total;
                for c in got.iter() {
                    let r = pairs.iter().find(|p| p.1 == c.word && p.2 == c.replace).expect("admissible");
                    let want = r.0 / total;
                    assert!(
                        (c.p as f64 - want).abs() <= 1e-5 + 1e-4 * want,
                        "{rule:?} β {beta} λ {lambda} {ctx:?} {c:?}: reference p {want}"
                    );
                    assert!(c.p as f64 >= fifth - 1e-5, "{rule:?} β {beta} λ {lambda} {ctx:?}: {c:?} is not among the reference top 5");
                }
            }
        }
    }
    assert!(split_words > 0, "no context continues a lexicon word");
    assert!(reweighted > 0, "the completion prior moved no completion");
}

/// A model whose lexicon `sort_lexicon` put in byte order (the one-pass load path) predicts
/// what the unsorted original predicts: the same words and replace counts in the same order,
/// for every weight type the head can have. Probabilities agree to the last bits only, since
/// the normalising sum adds the words in another order.
#[test]
fn a_sorted_lexicon_predicts_exactly_as_the_original() {
    let cfg = TinyConfig::default();
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_1] {
        let (meta, tensors) = laya_format::testing::random_model(&cfg, 11, ty);
        let (mut smeta, mut stensors) = (meta.clone(), tensors.clone());
        assert!(laya_format::sort_lexicon(&mut smeta, &mut stensors).unwrap(), "the generator's words are unsorted");
        let original = Model::from_bytes(laya_format::write_model(&meta, &tensors).unwrap()).unwrap();
        let sorted = Model::from_bytes(laya_format::write_model(&smeta, &stensors).unwrap()).unwrap();
        let n = original.lexicon_len();
        let (mut a, mut b) = (Session::with_max_k(original, n), Session::with_max_k(sorted, n));
        for ctx in CONTEXTS {
            let pa: Vec<_> = a.predict(ctx, 8).iter().map(|c| (c.word.to_string(), c.replace, c.p)).collect();
            let pb: Vec<_> = b.predict(ctx, 8).iter().map(|c| (c.word.to_string(), c.replace, c.p)).collect();
            let words = |p: &[(String, usize, f32)]| p.iter().map(|c| (c.0.clone(), c.1)).collect::<Vec<_>>();
            assert_eq!(words(&pa), words(&pb), "{ty:?} {ctx:?}");
            for (x, y) in pa.iter().zip(&pb) {
                assert!((x.2 - y.2).abs() <= 1e-5 * x.2, "{ty:?} {ctx:?}: {x:?} vs {y:?}");
            }
        }
    }
}

/// A model compiled into the program (64-byte aligned static bytes: its lexicon read in place,
/// not copied) predicts exactly what the same bytes on the heap predict: checksum verified at
/// build time or not, with its lexicon index prepared at build time or built at load, with a
/// sorted or an unsorted lexicon. An index prepared for the other model is refused.
#[test]
fn a_model_read_in_place_predicts_as_a_copy_does() {
    let cfg = TinyConfig { word_classes: 6, ..TinyConfig::default() };
    let (meta, tensors) = laya_format::testing::random_model(&cfg, 13, GgmlType::Q8_0);
    let (mut smeta, mut stensors) = (meta.clone(), tensors.clone());
    laya_format::sort_lexicon(&mut smeta, &mut stensors).unwrap();
    let files = [laya_format::write_model(&meta, &tensors).unwrap(), laya_format::write_model(&smeta, &stensors).unwrap()];
    let heaps: Vec<_> = files.iter().map(|b| Model::from_bytes(b.clone()).unwrap()).collect();
    let indexes: Vec<_> = heaps.iter().map(|m| aligned(&m.prepared_index())).collect();
    for (i, (bytes, heap)) in files.iter().zip(&heaps).enumerate() {
        let (bytes, checksum) = (aligned(bytes), heap.info().checksum);
        let refusal =
            |index: &'static [u8]| Model::from_static_prepared(bytes, checksum, index).err().map(|e| e.to_string()).unwrap_or_default();
        let wrong = refusal(indexes[1 - i]);
        assert!(wrong.contains("prepared index") && wrong.contains("checksum"), "{wrong}");
        // A class member past the lexicon (the twelfth array of prepared.rs's layout: the count
        // of each array, then its elements padded to 8 bytes), and a word's class past the
        // class head (the twenty-fifth).
        let sizes = [2, 1, 1, 4, 8, 2, 1, 4, 1, 1, 4, 4, 4, 4, 8, 8, 2, 2, 2, 8, 4, 4, 4, 4];
        let index = indexes[i];
        let array_at = |k: usize| {
            sizes[..k].iter().fold(56, |at, size| {
                at + 8 + (u64::from_le_bytes(index[at..at + 8].try_into().unwrap()) as usize * size).next_multiple_of(8)
            })
        };
        for k in [11, 24] {
            let mut damaged = index.to_vec();
            damaged[array_at(k) + 8..array_at(k) + 12].copy_from_slice(&u32::MAX.to_le_bytes());
            assert!(refusal(aligned(&damaged)).contains("class members"), "array {k}: {}", refusal(aligned(&damaged)));
        }
        let loads = [
            Model::from_static(bytes).unwrap(),
            Model::from_static_verified(bytes, checksum).unwrap(),
            Model::from_static_prepared(bytes, checksum, indexes[i]).unwrap(),
        ];
        for in_place in loads {
            assert_eq!(in_place.info().storage, "embedded");
            let n = heap.lexicon_len();
            assert!((0..n).all(|id| in_place.word(id) == heap.word(id)));
            let (mut a, mut b) = (Session::with_max_k(heap.clone(), n), Session::with_max_k(in_place, n));
            for ctx in CONTEXTS {
                let pa: Vec<_> = a.predict(ctx, 8).iter().map(|c| (c.word.to_string(), c.replace, c.p.to_bits())).collect();
                let pb: Vec<_> = b.predict(ctx, 8).iter().map(|c| (c.word.to_string(), c.replace, c.p.to_bits())).collect();
                assert_eq!(pa, pb, "{ctx:?}");
            }
        }
    }
}

/// A model with dictionary frequencies (a completion prior, and a unigram that cuts by them)
/// loaded with its prepared index, where those per-word integers are read from the index and not
/// from the file, predicts bit for bit what the heap copy predicts, with the prior on and off.
#[test]
fn a_prepared_model_with_dictionary_frequencies_predicts_as_a_copy_does() {
    let cfg = TinyConfig { word_classes: 6, ..TinyConfig::default() };
    let (mut meta, tensors) = laya_format::testing::random_model(&cfg, 7, GgmlType::Q8_0);
    meta.dict_frequencies = Some(common::dict_frequencies(meta.vocab_size()));
    let bytes = laya_format::write_model(&meta, &tensors).unwrap();
    let heap = Model::from_bytes(bytes.clone()).unwrap();
    let index = aligned(&heap.prepared_index());
    let (bytes, checksum) = (aligned(&bytes), heap.info().checksum);
    let prepared = Model::from_static_prepared(bytes, checksum, index).unwrap();
    assert!(heap.info().dict_words > 0);
    assert_eq!(prepared.info().dict_words, heap.info().dict_words);
    for lambda in [0.0, 0.5] {
        let (mut a, mut b) = (Session::new(heap.clone()), Session::new(prepared.clone()));
        a.set_completion_prior(lambda);
        b.set_completion_prior(lambda);
        for ctx in CONTEXTS {
            let pa: Vec<_> = a.predict(ctx, 16).iter().map(|c| (c.word.to_string(), c.replace, c.p.to_bits())).collect();
            let pb: Vec<_> = b.predict(ctx, 16).iter().map(|c| (c.word.to_string(), c.replace, c.p.to_bits())).collect();
            assert_eq!(pa, pb, "λ = {lambda}, {ctx:?}");
        }
    }
}

/// λ = 0, or a file without dictionary frequencies, ranks exactly as before the prior existed;
/// a positive λ changes completions only: next-word candidates keep their probabilities.
#[test]
fn the_completion_prior_moves_completions_only() {
    let cfg = TinyConfig::default();
    let plain = model(&cfg, 7, GgmlType::F32);
    let (with_dict, _) = common::model_with_dict(&cfg, 7, GgmlType::F32);
    assert_eq!(plain.info().dict_words, 0);
    assert!(with_dict.info().dict_words > 0);
    let (mut a, mut b) = (Session::new(plain), Session::new(with_dict));
    b.set_completion_prior(0.0);
    let mut changed = 0;
    for ctx in CONTEXTS {
        let list = |s: &mut Session| -> Vec<(String, usize, f32)> {
            s.predict(ctx, 64).iter().map(|c| (c.word.to_string(), c.replace, c.p)).collect()
        };
        assert_eq!(list(&mut a), list(&mut b), "λ = 0 on {ctx:?}");
        b.set_completion_prior(1.0);
        let (before, after) = (list(&mut a), list(&mut b));
        b.set_completion_prior(0.0);
        for (w, r, p) in &after {
            if *r == 0 {
                let old = before.iter().find(|x| &x.0 == w && x.1 == 0).map(|x| x.2);
                if let Some(old) = old {
                    assert!((old - p).abs() <= 1e-6 + 1e-5 * old, "{ctx:?}: next word {w} moved {old} -> {p}");
                }
            }
        }
        changed += usize::from(before != after);
    }
    assert!(changed > 0, "λ = 1 changed no prediction");
    // Out-of-range weights are clamped, NaN turns the prior off.
    b.set_completion_prior(f32::NAN);
    assert_eq!(b.completion_prior(), 0.0);
    b.set_completion_prior(9.0);
    assert_eq!(b.completion_prior(), 2.0);
}

/// A tiny model whose lexicon holds punctuation words (`,` `。` `……`) besides its words, with
/// a flat word head (`word_classes` 0) or a factorised one.
fn model_with_punctuation(word_classes: u32) -> std::sync::Arc<Model> {
    let cfg = TinyConfig { word_classes, own_class_words: word_classes / 2, ..TinyConfig::default() };
    let (mut meta, tensors) = laya_format::testing::random_model(&cfg, 5, GgmlType::F32);
    let mut words = meta.words.to_vec();
    for (i, p) in [",", "。", "……"].into_iter().enumerate() {
        words[10 + i] = p.to_string();
    }
    meta.words = words.iter().collect();
    Model::from_bytes(laya_format::write_model(&meta, &tensors).unwrap()).unwrap()
}

#[test]
fn punctuation_is_never_a_candidate_unless_the_session_allows_one_slot() {
    for classes in [0, 16] {
        let m = model_with_punctuation(classes);
        let all = m.lexicon_len() * m.config().replace_classes;
        let mut s = Session::with_max_k(m, all);
        let is_punct = laya_format::is_punctuation_word;
        for ctx in ["", "今天", "hello ", "的", "a"] {
            s.set_punctuation_slot(false);
            let words: Vec<(String, usize)> = s.predict(ctx, all).iter().map(|c| (c.word.to_string(), c.replace)).collect();
            assert!(!words.is_empty() && words.iter().all(|(w, _)| !is_punct(w)), "{ctx:?}: {words:?}");
            s.set_punctuation_slot(true);
            let with: Vec<(String, usize)> = s.predict(ctx, all).iter().map(|c| (c.word.to_string(), c.replace)).collect();
            let marks: Vec<&String> = with.iter().map(|(w, _)| w).filter(|w| is_punct(w)).collect();
            assert_eq!(marks.len(), 1, "{ctx:?}: exactly one punctuation candidate when all are asked for: {with:?}");
            // The slot adds the mark and leaves the words' order alone.
            let rest: Vec<(String, usize)> = with.iter().filter(|(w, _)| !is_punct(w)).cloned().collect();
            assert_eq!(rest, words, "{ctx:?}");
            // After Chinese text an ASCII mark takes its Chinese form; elsewhere it stays as stored.
            let mark = marks[0].as_str();
            if ctx == "今天" || ctx == "的" {
                assert!(mark == "，" || mark == "。" || mark == "……", "{ctx:?}: {mark}");
            } else {
                assert!(mark == "," || mark == "。" || mark == "……", "{ctx:?}: {mark}");
            }
        }
    }
}

#[test]
fn a_punctuation_slot_takes_a_place_on_a_short_bar_only_by_its_probability() {
    for classes in [0, 16] {
        let m = model_with_punctuation(classes);
        let all = m.lexicon_len() * m.config().replace_classes;
        let mut s = Session::with_max_k(m, all);
        s.set_punctuation_slot(true);
        for ctx in ["", "今天", "hello"] {
            let full: Vec<(String, f32)> = s.predict(ctx, all).iter().map(|c| (c.word.to_string(), c.p)).collect();
            for k in 1..6 {
                let bar: Vec<(String, f32)> = s.predict(ctx, k).iter().map(|c| (c.word.to_string(), c.p)).collect();
                assert_eq!(bar, full[..k], "{ctx:?} k={k}");
            }
        }
    }
}

/// A factorised head computes a Q8_0 class from the file's rows the first time a prediction
/// expands it and packs it the second time (a Q4 class is packed at once); `pack` packs the
/// rest. Every way the candidates and logits are the same, to the bit, and after `warm_up`
/// predictions allocate nothing (zero_alloc.rs).
#[test]
fn classes_from_rows_then_packed_predict_as_classes_packed_at_once() {
    let own = TinyConfig { word_classes: 12, own_class_words: 30, ..TinyConfig::default() };
    for ty in [GgmlType::Q8_0, GgmlType::Q4_1] {
        let (lazy, eager) = (common::model(&own, 11, ty), common::model(&own, 11, ty));
        // The layers' copies (made by the packer thread) first, so that what changes below
        // is the classes.
        lazy.pack_layers();
        let before = lazy.packed_bytes();
        eager.pack();
        // Packing is per CPU: where the kernels pack this type, lazy classes are filled in.
        let packs = eager.packed_bytes() > before;
        let (mut a, mut b) = (Session::new(lazy.clone()), Session::new(eager.clone()));
        for round in 0..2 {
            for ctx in common::CONTEXTS {
                let pa: Vec<(String, usize, u32)> =
                    a.predict(ctx, 8).iter().map(|c| (c.word.to_string(), c.replace, c.p.to_bits())).collect();
                let pb: Vec<(String, usize, u32)> =
                    b.predict(ctx, 8).iter().map(|c| (c.word.to_string(), c.replace, c.p.to_bits())).collect();
                assert_eq!(pa, pb, "{ty:?} {ctx:?} round {round}");
                if round == 0 && *ctx == common::CONTEXTS[0] && packs {
                    // The first prediction's classes are all new: Q8_0 copies none of them.
                    assert_eq!(lazy.packed_bytes() == before, ty == GgmlType::Q8_0, "{ty:?}: after the first prediction");
                }
            }
        }
        let (ll, le) = (a.logits("今天"), b.logits("今天"));
        assert_eq!(ll, le, "{ty:?}: logits");
        if packs {
            assert!(lazy.packed_bytes() > before, "{ty:?}: classes needed again were packed");
            lazy.pack();
            assert_eq!(lazy.packed_bytes(), eager.packed_bytes(), "{ty:?}");
            assert_eq!(a.logits("今天"), le, "{ty:?}: logits after pack");
        }
    }
}

/// In a language written with spaces (`laya.provenance.language`, `laya_format::separates_words`)
/// a context ending in a letter, digit or apostrophe is inside a word: the bar holds completions
/// only, with the probabilities they have anyway, and neither the network nor the learned
/// history adds a next word that would be glued to it. After a space, or in Chinese with the
/// same weights, next words come back.
#[test]
fn a_spaced_language_offers_no_next_word_inside_a_word() {
    use laya_format::testing::random_model;
    for cfg in [TinyConfig::default(), TinyConfig { word_classes: 12, ..TinyConfig::default() }] {
        let (mut meta, tensors) = random_model(&cfg, 11, GgmlType::Q8_0);
        let zh = Model::from_bytes(laya_format::write_model(&meta, &tensors).unwrap()).unwrap();
        meta.provenance.language = "en-GB".into();
        let en = Model::from_bytes(laya_format::write_model(&meta, &tensors).unwrap()).unwrap();
        let (mut zs, mut es) = (Session::new(zh), Session::new(en));
        let bar = |s: &mut Session, ctx: &str| s.predict(ctx, 8).iter().map(|c| (c.word.to_string(), c.replace, c.p)).collect::<Vec<_>>();
        let mut zh_next_words_inside = 0;
        for ctx in ["hel", "hello wor", "a", "naï", "don'", "x9", "hello"] {
            let (z, e) = (bar(&mut zs, ctx), bar(&mut es, ctx));
            assert!(e.iter().all(|c| c.1 > 0), "{ctx:?}: {e:?}");
            zh_next_words_inside += z.iter().filter(|c| c.1 == 0).count();
            for c in &e {
                if let Some(same) = z.iter().find(|d| (&d.0, d.1) == (&c.0, c.1)) {
                    assert!((same.2 - c.2).abs() <= 1e-6, "{ctx:?}: {c:?} against {same:?}");
                }
            }
        }
        assert!(zh_next_words_inside > 0, "the same weights in Chinese offer next words there");
        // After a space the same next words, shown with a capital where a sentence starts.
        for ctx in ["hello ", "", "hi, ", "😀", "Done. "] {
            let shown = |w: String| {
                let mut s = String::new();
                laya_format::display_case(&w, "", laya_format::starts_sentence(ctx), &mut s);
                s
            };
            let z: Vec<_> = bar(&mut zs, ctx).into_iter().map(|(w, i, p)| (shown(w), i, p)).collect();
            assert_eq!(z, bar(&mut es, ctx), "{ctx:?}");
        }
        // A learned pair brings its word back after a space, never glued to the first word.
        for _ in 0..3 {
            es.learn("hello zork");
        }
        assert!(bar(&mut es, "hello ").iter().any(|c| (c.0.as_str(), c.1) == ("zork", 0)), "{:?}", bar(&mut es, "hello "));
        assert!(bar(&mut es, "hello").iter().all(|c| c.1 > 0), "{:?}", bar(&mut es, "hello"));
    }
}

/// In a language with spaces a completion replaces the whole word being typed, never its tail:
/// after `xhel` no candidate completes `hel` or `el` (that would glue `xhello`), neither from
/// the network nor from the learned history; after `x hel` or `x-hel` it completes `hel`.
/// Chinese, with the same weights, completes the tail, and the probabilities of the pairs both
/// offer are equal (the pairs kept off the bar still count in the total).
#[test]
fn a_spaced_language_completes_whole_words_only() {
    use laya_format::testing::random_model;
    for cfg in [TinyConfig::default(), TinyConfig { word_classes: 12, ..TinyConfig::default() }] {
        let (mut meta, tensors) = random_model(&cfg, 13, GgmlType::Q8_0);
        let mut words: Vec<String> = meta.words.iter().map(str::to_string).collect();
        for (i, w) in ["hello", "help", "held", "elk", "lo"].iter().enumerate() {
            words[i] = w.to_string();
        }
        meta.words = words.iter().collect();
        let zh = Model::from_bytes(laya_format::write_model(&meta, &tensors).unwrap()).unwrap();
        meta.provenance.language = "en".into();
        let en = Model::from_bytes(laya_format::write_model(&meta, &tensors).unwrap()).unwrap();
        let (mut zs, mut es) = (Session::new(zh), Session::new(en));
        let bar = |s: &mut Session, ctx: &str| s.predict(ctx, 64).iter().map(|c| (c.word.to_string(), c.replace, c.p)).collect::<Vec<_>>();
        // The word being typed: the letters, digits and apostrophes at the end.
        let typed_word = |ctx: &str| ctx.chars().rev().take_while(|c| c.is_alphanumeric() || *c == '\'').count();
        let mut zh_tails = 0;
        for ctx in ["xhel", "say xhel", "xel", "hhel", "x hel", "x-hel", "hel"] {
            // `xhel` starts no word of the lexicon: nothing on the bar rather than a tail's words.
            let (z, e) = (bar(&mut zs, ctx), bar(&mut es, ctx));
            for c in &e {
                assert_eq!(c.1, typed_word(ctx), "{ctx:?}: {c:?} completes part of a word; bar {e:?}");
                if let Some(same) = z.iter().find(|d| (&d.0, d.1) == (&c.0, c.1)) {
                    assert!((same.2 - c.2).abs() <= 1e-6, "{ctx:?}: {c:?} against {same:?}");
                }
            }
            zh_tails += z.iter().filter(|c| c.1 > 0 && c.1 < typed_word(ctx)).count();
        }
        assert!(zh_tails > 0, "Chinese completes the tail of a typed run");
        for ctx in ["x hel", "x-hel"] {
            assert!(bar(&mut es, ctx).iter().any(|c| (c.0.as_str(), c.1) == ("hello", 3)), "{ctx:?}: {:?}", bar(&mut es, ctx));
        }
        // A learned word is no exception.
        for _ in 0..5 {
            es.learn("zorbly");
            zs.learn("zorbly");
        }
        assert!(bar(&mut zs, "xzor").iter().any(|c| (c.0.as_str(), c.1) == ("zorbly", 3)), "{:?}", bar(&mut zs, "xzor"));
        assert!(!bar(&mut es, "xzor").iter().any(|c| c.0 == "zorbly"), "{:?}", bar(&mut es, "xzor"));
        assert!(bar(&mut es, "x zor").iter().any(|c| (c.0.as_str(), c.1) == ("zorbly", 3)), "{:?}", bar(&mut es, "x zor"));
    }
}

/// In a language with letter case (`laya_format::ignores_case`) a typed prefix finds its words
/// in any case and each candidate is shown in the typed case: `hel` → `hello`, `Hel` → `Hello`,
/// `HEL` → `HELLO`, `mon` → `Monday` (a capital of the lexicon's stays); a sentence's first
/// word gets a capital; of two words that differ only in case the more frequent one alone is a
/// candidate; learning `The` counts for `the`. Chinese with the same weights matches exactly.
#[test]
fn a_language_with_case_matches_and_shows_the_typed_case() {
    use laya_format::testing::random_model;
    for cfg in [TinyConfig::default(), TinyConfig { word_classes: 12, ..TinyConfig::default() }] {
        let (mut meta, tensors) = random_model(&cfg, 12, GgmlType::Q8_0);
        let mut words: Vec<String> = meta.words.iter().map(str::to_string).collect();
        for (i, w) in ["hello", "Hello", "Monday", "the", "help"].iter().enumerate() {
            words[i] = w.to_string();
        }
        meta.words = words.iter().collect();
        // As the shipped models: the network sees case (no `lowercase_ascii`).
        meta.normalization = vec![laya_format::NormRule::FullwidthAscii];
        let zh = Model::from_bytes(laya_format::write_model(&meta, &tensors).unwrap()).unwrap();
        meta.provenance.language = "en".into();
        let en = Model::from_bytes(laya_format::write_model(&meta, &tensors).unwrap()).unwrap();
        let (mut zs, mut es) = (Session::new(zh), Session::new(en));
        let bar = |s: &mut Session, ctx: &str| s.predict(ctx, 64).iter().map(|c| (c.word.to_string(), c.replace)).collect::<Vec<_>>();
        let has = |b: &[(String, usize)], w: &str, i: usize| b.iter().any(|c| (c.0.as_str(), c.1) == (w, i));
        for (ctx, want, never) in [
            ("say hel", ["hello", "help"], "Hello"),
            ("say Hel", ["Hello", "Help"], "hello"),
            ("say HEL", ["HELLO", "HELP"], "Hello"),
            ("say mon", ["Monday", "Monday"], "monday"),
            ("say MON", ["MONDAY", "MONDAY"], "Monday"),
        ] {
            let b = bar(&mut es, ctx);
            for w in want {
                assert!(has(&b, w, 3), "{ctx:?}: {w} missing from {b:?}");
            }
            assert!(!b.iter().any(|c| c.0 == never), "{ctx:?}: {never} in {b:?}");
            // Every completion starts with what was typed, in any case.
            let typed = laya_format::fold_case(&ctx[4..]);
            for (w, i) in b.iter().filter(|c| c.1 > 0) {
                let folded = laya_format::fold_case(w);
                assert!(
                    folded.starts_with(&typed[typed.len() - typed.chars().rev().take(*i).map(char::len_utf8).sum::<usize>()..]),
                    "{ctx:?}: {w} ({i})"
                );
            }
        }
        // Chinese keeps case exactly: `Hel` completes to no form of `help`.
        let z = bar(&mut zs, "say Hel");
        assert!(!has(&z, "Help", 3) && !has(&z, "help", 3), "{z:?}");
        // A sentence's first word gets a capital, and the bar never shows two cases of one word.
        for ctx in ["", "Yes. ", "ok? "] {
            let b = bar(&mut es, ctx);
            assert!(b.iter().all(|c| !c.0.starts_with(|ch: char| ch.is_lowercase())), "{ctx:?}: {b:?}");
            let mut folded: Vec<String> = b.iter().map(|c| laya_format::fold_case(&c.0)).collect();
            folded.sort();
            let n = folded.len();
            folded.dedup();
            assert_eq!(folded.len(), n, "{ctx:?}: {b:?}");
        }
        // Inside a sentence next words keep the lexicon's form, less the rarer `Hello`.
        let e = bar(&mut es, "I saw ");
        let z: Vec<_> = bar(&mut zs, "I saw ").into_iter().filter(|c| c.0 != "Hello").collect();
        assert_eq!(e[..z.len()], z[..]);
        // Learning `The` counts for `the`, the lexicon's form.
        es.learn("The");
        assert!(es.user().read().count("the") > 0.99 && es.user().read().count("The") == 0.0);
    }
}

/// In a language without spaces, right after a Latin letter or digit no next word starts with
/// one (it would be glued to the typed word: `hello` + `host`); next words in Han and
/// completions of the typed letters stay, with the probabilities they have anyway. After a
/// space, or after Han, Latin next words come back.
#[test]
fn chinese_offers_no_latin_next_word_glued_to_a_latin_word() {
    use laya_format::punct::glues;
    use laya_format::testing::random_model;
    for cfg in [TinyConfig::default(), TinyConfig { word_classes: 12, ..TinyConfig::default() }] {
        let (meta, tensors) = random_model(&cfg, 13, GgmlType::Q8_0);
        let mut s = Session::new(Model::from_bytes(laya_format::write_model(&meta, &tensors).unwrap()).unwrap());
        let bar = |s: &mut Session, ctx: &str| s.predict(ctx, 64).iter().map(|c| (c.word.to_string(), c.replace, c.p)).collect::<Vec<_>>();
        let latin_next = |b: &[(String, usize, f32)]| b.iter().filter(|c| c.1 == 0 && c.0.starts_with(glues)).count();
        for ctx in ["hello", "用iPhone", "x9", "版本3"] {
            let b = bar(&mut s, ctx);
            assert_eq!(latin_next(&b), 0, "{ctx:?}: {b:?}");
            assert!(b.iter().any(|c| c.1 == 0), "{ctx:?}: Han next words stay: {b:?}");
        }
        let mut latin_after_space = 0;
        for ctx in ["hello ", "今天", "", "好。"] {
            latin_after_space += latin_next(&bar(&mut s, ctx));
        }
        assert!(latin_after_space > 0, "Latin next words come back after a space or Han");
    }
}
