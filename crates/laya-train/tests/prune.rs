use laya_train::*;
use proptest::prelude::*;

fn tiny_cfg(ffn: Vec<usize>, activation: Activation) -> ModelConfig {
    let words: Vec<String> = (0..30).map(|i| format!("w{i}")).collect();
    let freqs = vec![1; words.len()];
    let mut table: Vec<u32> = ('a'..='z').map(|c| c as u32).chain((0..40).map(|i| 0x4E00 + i)).collect();
    table.sort_unstable();
    let mut cfg = ModelConfig::standard(words, freqs, Mapping::Table(table));
    cfg.d_model = 32;
    cfg.heads = 2;
    cfg.ffn = ffn;
    cfg.activation = activation;
    cfg
}

const CONTEXTS: [&str; 5] = ["", "abc", "一丁七", "hello wor", "丂七丈三上下丌不与丐丑"];

fn values(net: &LayaNet, name: &str) -> Vec<f32> {
    let p = net.params().iter().find(|p| p.name == name).unwrap();
    p.var.flatten_all().unwrap().to_vec1().unwrap()
}

fn set_values(net: &LayaNet, name: &str, v: Vec<f32>) {
    let p = net.params().iter().find(|p| p.name == name).unwrap();
    let t = candle_core::Tensor::from_vec(v, p.var.dims(), net.device()).unwrap();
    p.var.set(&t).unwrap();
}

/// Multiplies group `g`'s up rows, bias entries and down columns of block `l` by `factor`.
fn scale_group(net: &LayaNet, l: usize, g: usize, factor: f32) {
    let (d, f) = (net.config().d_model, net.config().ffn[l]);
    let units = g * PRUNE_GROUP..(g + 1) * PRUNE_GROUP;
    let mut up = values(net, &format!("blk.{l}.ffn_up.weight"));
    let mut bias = values(net, &format!("blk.{l}.ffn_up.bias"));
    let mut down = values(net, &format!("blk.{l}.ffn_down.weight"));
    for u in units {
        up[u * d..(u + 1) * d].iter_mut().for_each(|w| *w *= factor);
        bias[u] *= factor;
        for r in 0..d {
            down[r * f + u] *= factor;
        }
    }
    set_values(net, &format!("blk.{l}.ffn_up.weight"), up);
    set_values(net, &format!("blk.{l}.ffn_up.bias"), bias);
    set_values(net, &format!("blk.{l}.ffn_down.weight"), down);
}

/// Gives every bias a non-zero value so the zero-unit test also covers biases.
fn nonzero_biases(net: &LayaNet) {
    for p in net.params() {
        if p.name.ends_with(".bias") {
            let n = p.var.elem_count();
            let v: Vec<f32> = (0..n).map(|i| 0.01 * ((i % 7) as f32 - 3.0)).collect();
            set_values(net, &p.name, v);
        }
    }
}

#[test]
fn keeping_every_unit_is_an_exact_copy() {
    let net = LayaNet::new(tiny_cfg(vec![64, 96], Activation::GeluTanh), 5).unwrap();
    nonzero_biases(&net);
    let (same, report) = prune(&net, &[64, 96], Saliency::Magnitude).unwrap();
    assert_eq!(same.config(), net.config());
    assert_eq!(report.params_before, report.params_after);
    for (a, b) in net.params().iter().zip(same.params()) {
        assert_eq!(a.name, b.name);
        assert_eq!(values(&net, &a.name), values(&same, &b.name), "{}", a.name);
    }
    for b in &report.blocks {
        assert_eq!(b.kept_units, (0..b.old_width).collect::<Vec<_>>());
        assert_eq!(b.kept_saliency, 1.0);
    }
    assert_eq!(net.predict_logits(&CONTEXTS).unwrap(), same.predict_logits(&CONTEXTS).unwrap());
}

#[test]
fn removing_all_zero_units_leaves_logits_unchanged() {
    for activation in [Activation::GeluTanh, Activation::Relu] {
        let net = LayaNet::new(tiny_cfg(vec![64, 96], activation), 11).unwrap();
        nonzero_biases(&net);
        // Interleaved, not a tail: the kept units must keep their order around the holes.
        let dead0: Vec<usize> = (0..16).filter(|g| g % 2 == 1).collect();
        let dead1: Vec<usize> = vec![0, 2, 3, 7, 8, 13, 17, 23];
        for &g in &dead0 {
            scale_group(&net, 0, g, 0.0);
        }
        for &g in &dead1 {
            scale_group(&net, 1, g, 0.0);
        }
        let before = net.predict_logits(&CONTEXTS).unwrap();
        let (small, report) = prune(&net, &[32, 64], Saliency::Magnitude).unwrap();
        assert_eq!(small.config().ffn, vec![32, 64]);
        for (b, dead) in report.blocks.iter().zip([&dead0, &dead1]) {
            assert!(b.kept_units.iter().all(|u| !dead.contains(&(u / PRUNE_GROUP))), "{:?}", b.kept_units);
            assert_eq!(b.kept_saliency, 1.0);
        }
        // Every removed term is an exact 0 (act(0) = 0 for GELU and ReLU), but candle's gemm
        // blocks the reduction by the inner dimension, so a shorter FFN may add the same
        // non-zero terms in another order: equal up to reassociation, a few ulps.
        let after = small.predict_logits(&CONTEXTS).unwrap();
        let flat = |x: &(Vec<Vec<f32>>, Vec<Vec<f32>>)| x.0.iter().chain(&x.1).flatten().copied().collect::<Vec<f32>>();
        let (a, b) = (flat(&before), flat(&after));
        assert_eq!(a.len(), b.len());
        let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(worst <= 1e-6, "{activation:?}: max |Δlogit| {worst}");
    }
}

#[test]
fn kept_rows_and_columns_are_copied_in_order() {
    let net = LayaNet::new(tiny_cfg(vec![64], Activation::GeluTanh), 2).unwrap();
    let scores = vec![(0..16).map(|g| ((g * 7) % 16) as f64).collect::<Vec<f64>>()];
    let (small, report) = prune_with_scores(&net, &[32], &scores).unwrap();
    let kept = &report.blocks[0].kept_units;
    assert!(kept.windows(2).all(|w| w[0] < w[1]));
    let d = 32;
    let (up, bias, down) = (values(&net, "blk.0.ffn_up.weight"), values(&net, "blk.0.ffn_up.bias"), values(&net, "blk.0.ffn_down.weight"));
    let (sup, sbias, sdown) =
        (values(&small, "blk.0.ffn_up.weight"), values(&small, "blk.0.ffn_up.bias"), values(&small, "blk.0.ffn_down.weight"));
    for (i, &u) in kept.iter().enumerate() {
        assert_eq!(sup[i * d..(i + 1) * d], up[u * d..(u + 1) * d]);
        assert_eq!(sbias[i], bias[u]);
        for r in 0..d {
            assert_eq!(sdown[r * 32 + i], down[r * 64 + u]);
        }
    }
    // Everything outside the FFN matrices is untouched.
    assert_eq!(values(&net, "blk.0.ffn_down.bias"), values(&small, "blk.0.ffn_down.bias"));
    assert_eq!(values(&net, "output.weight"), values(&small, "output.weight"));
}

#[test]
fn magnitude_saliency_removes_the_smallest_groups() {
    let net = LayaNet::new(tiny_cfg(vec![128], Activation::GeluTanh), 9).unwrap();
    let small_groups = [1usize, 4, 5, 9, 12, 16, 22, 30];
    for &g in &small_groups {
        scale_group(&net, 0, g, 0.05);
    }
    let scores = magnitude_scores(&net).unwrap();
    let (_, report) = prune(&net, &[96], Saliency::Magnitude).unwrap();
    let removed: Vec<usize> = (0..32).filter(|g| !report.blocks[0].kept_units.contains(&(g * PRUNE_GROUP))).collect();
    assert_eq!(removed, small_groups);
    let kept_min = report.blocks[0].kept_units.iter().map(|u| scores[0][u / 4]).fold(f64::INFINITY, f64::min);
    assert!(small_groups.iter().all(|&g| scores[0][g] < kept_min));
    assert!(report.blocks[0].kept_saliency > 0.99 && report.blocks[0].kept_saliency < 1.0);
}

#[test]
fn magnitude_counts_up_and_down_alike() {
    // Scaling a whole matrix must not change which groups win: each matrix is normalised.
    let net = LayaNet::new(tiny_cfg(vec![64], Activation::GeluTanh), 4).unwrap();
    let a = magnitude_scores(&net).unwrap();
    let down = values(&net, "blk.0.ffn_down.weight");
    set_values(&net, "blk.0.ffn_down.weight", down.iter().map(|w| w * 100.0).collect());
    let b = magnitude_scores(&net).unwrap();
    for (x, y) in a[0].iter().zip(&b[0]) {
        // ×100 in f32 rounds each weight, so agreement is to f32 precision.
        assert!((x - y).abs() < 1e-6 * x.abs().max(1.0), "{x} vs {y}");
    }
}

fn events() -> Vec<Event> {
    (0..24)
        .map(|i| {
            let ctx: String = (0..(2 + i % 5)).map(|k| char::from_u32(0x4E00 + ((i * 5 + k * 3) % 40) as u32).unwrap()).collect();
            Event {
                context: ctx,
                shown: vec![
                    Shown { word: format!("w{}", (i + 3) % 30), replace: 0 },
                    Shown { word: format!("w{i}"), replace: (i % 3) as u32 },
                ],
                clicked: Some(1),
                weight: 1.0,
            }
        })
        .collect()
}

#[test]
fn taylor_saliency_is_zero_for_dead_groups_and_prunes_them() {
    let net = LayaNet::new(tiny_cfg(vec![64], Activation::GeluTanh), 21).unwrap();
    let dead = [2usize, 3, 6, 7, 10, 11, 14, 15];
    for &g in &dead {
        scale_group(&net, 0, g, 0.0);
    }
    let tc = TrainConfig { batch_size: 8, ..TrainConfig::default() };
    let ev = events();
    let scores = taylor_scores(&net, &ev, &tc, 3).unwrap();
    assert_eq!(scores[0].len(), 16);
    for (g, &s) in scores[0].iter().enumerate() {
        if dead.contains(&g) {
            assert_eq!(s, 0.0, "group {g}");
        } else {
            assert!(s > 0.0, "group {g}");
        }
    }
    let (_, report) = prune(&net, &[32], Saliency::Taylor { events: &ev, train: &tc, batches: 3 }).unwrap();
    assert!(report.blocks[0].kept_units.iter().all(|u| !dead.contains(&(u / 4))));
    assert!(matches!(taylor_scores(&net, &[], &tc, 3), Err(PruneError::NoEvents(_))));
}

#[test]
fn bad_widths_and_fractions_are_refused_with_reasons() {
    let net = LayaNet::new(tiny_cfg(vec![64, 96, 64], Activation::GeluTanh), 1).unwrap();
    let err = |w: &[usize]| prune(&net, w, Saliency::Magnitude).unwrap_err();
    assert!(matches!(err(&[0]), PruneError::BadWidth { width: 0, .. }));
    assert!(err(&[0]).to_string().contains("must be positive"));
    let e = err(&[48]);
    assert!(matches!(e, PruneError::BadWidth { block: 0, width: 48, current: 64 }));
    assert!(e.to_string().contains("multiple of 32 (try 32 or 64)"), "{e}");
    let e = err(&[64, 128, 64]);
    assert!(matches!(e, PruneError::BadWidth { block: 1, width: 128, current: 96 }));
    assert!(e.to_string().contains("larger than the current width"), "{e}");
    let e = err(&[96]); // fine for block 1, too wide for block 0
    assert!(matches!(e, PruneError::BadWidth { block: 0, .. }));
    let e = err(&[32, 32]);
    assert!(matches!(e, PruneError::WidthCount { blocks: 3, given: 2 }));
    assert!(e.to_string().contains("comma list of 3"), "{e}");
    assert!(matches!(err(&[]), PruneError::WidthCount { given: 0, .. }));
    assert!(matches!(widths_for_keep(&[64], 0.0), Err(PruneError::BadKeep(_))));
    assert!(matches!(widths_for_keep(&[64], f64::NAN), Err(PruneError::BadKeep(_))));
    assert!(matches!(widths_for_keep(&[64, 96], 0.4), Err(PruneError::KeepTooSmall { block: 0, .. })));
    assert_eq!(widths_for_keep(&[64, 96, 256], 1.0).unwrap(), vec![64, 96, 256]);
    assert_eq!(widths_for_keep(&[320], 0.7).unwrap(), vec![224]);
    let bad_scores = vec![vec![1.0; 16], vec![1.0; 3], vec![1.0; 16]];
    assert!(matches!(prune_with_scores(&net, &[32], &bad_scores), Err(PruneError::ScoreShape(_))));
}

#[test]
fn pruned_net_fine_tunes_exports_and_loads_in_the_runtime() {
    let net = LayaNet::new(tiny_cfg(vec![64, 96], Activation::GeluTanh), 8).unwrap();
    let (small, _) = prune(&net, &[32, 64], Saliency::Magnitude).unwrap();
    let ev = events();
    let tc = TrainConfig { epochs: 1, batch_size: 8, warmup_steps: 1, ..TrainConfig::default() };
    let out = train_from(small, tc, &ev, &ev, &RunOptions::default(), &mut NoHooks).unwrap();
    assert_eq!(out.net.config().ffn, vec![32, 64]);
    assert_eq!(out.state.epochs.len(), 1);
    let info = ExportInfo { name: "pruned".into(), language: "zh".into(), training_data: "test".into(), created: "2026-01-01".into() };
    let bytes = out.net.export_bytes(&info, Precision::F32).unwrap();
    let model = laya_runtime::Model::from_bytes(bytes).unwrap();
    assert_eq!(model.config().ffn, vec![32, 64]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Whatever the scores, the kept groups are exactly a top-`width/4` set: no removed group
    /// scores above a kept one, and the kept saliency share is consistent with the scores.
    #[test]
    fn kept_groups_are_a_top_set(raw in proptest::collection::vec(0u32..50, 24), keep in 1usize..=3) {
        let net = LayaNet::new(tiny_cfg(vec![96], Activation::Relu), 3).unwrap();
        let scores = vec![raw.iter().map(|&x| x as f64).collect::<Vec<f64>>()];
        let (small, report) = prune_with_scores(&net, &[keep * 32], &scores).unwrap();
        prop_assert_eq!(small.config().ffn.clone(), vec![keep * 32]);
        let b = &report.blocks[0];
        prop_assert_eq!(b.kept_units.len(), keep * 32);
        let kept: Vec<usize> = b.kept_units.iter().step_by(4).map(|u| u / 4).collect();
        let min_kept = kept.iter().map(|&g| scores[0][g]).fold(f64::INFINITY, f64::min);
        for g in (0..24).filter(|g| !kept.contains(g)) {
            prop_assert!(scores[0][g] <= min_kept);
        }
        let total: f64 = scores[0].iter().sum();
        let share: f64 = kept.iter().map(|&g| scores[0][g]).sum::<f64>() / total;
        if total > 0.0 {
            prop_assert!((b.kept_saliency - share).abs() < 1e-12);
        }
    }
}

/// A factorised word head is not pruned: the class map and the class head come through whole.
#[test]
fn pruning_carries_a_factorised_head_through() {
    let mut cfg = tiny_cfg(vec![64, 96], Activation::GeluTanh);
    cfg.word_class = Some((0..30).map(|i| (i % 4) as u32).collect());
    let net = LayaNet::new(cfg, 5).unwrap();
    let (small, _) = prune(&net, &[32, 64], Saliency::Magnitude).unwrap();
    assert_eq!(small.config().word_class, net.config().word_class);
    for name in [laya_format::OUTPUT_CLASS_W, laya_format::OUTPUT_CLASS_B] {
        assert_eq!(values(&net, name), values(&small, name), "{name}");
    }
}
