//! The `relative_causal` position scheme (docs/format.md §3): the candle network against a naive
//! f64 reading of the spec, what the window can and cannot see, training, export and pruning.

use candle_core::Tensor;
use laya_train::*;

const WORDS: [&str; 6] = ["今天", "天气", "明天", "hello", "的", "好"];

/// A tiny causal model: `T` = `context`, blocks of the given FFN widths, d 32, 2 heads.
fn causal_cfg(context: usize, ffn: Vec<usize>) -> ModelConfig {
    let words: Vec<String> = WORDS.iter().map(|s| s.to_string()).collect();
    let mut table: Vec<u32> = ('a'..='z').map(|c| c as u32).chain((0..40).map(|i| 0x4E00 + i)).collect();
    table.sort_unstable();
    let mut cfg = ModelConfig::standard(words, vec![5, 1, 2, 1, 9, 3], Mapping::Table(table));
    cfg.context = context;
    cfg.d_model = 32;
    cfg.heads = 2;
    cfg.ffn = ffn;
    cfg.replace_classes = 4;
    cfg.position_scheme = PositionScheme::RelativeCausal;
    cfg
}

fn values(net: &LayaNet, name: &str) -> Vec<f32> {
    let p = net.params().iter().find(|p| p.name == name).unwrap();
    p.var.flatten_all().unwrap().to_vec1().unwrap()
}

/// Replaces every parameter by larger random values (the initialisation's N(0, 0.02²) makes
/// attention nearly uniform and the blocks nearly the identity, which would hide mistakes):
/// matrices and embeddings ~U(−0.5, 0.5), the relative biases ~U(−2, 2), norms 1 ± 0.3,
/// biases ~U(−0.2, 0.2).
fn randomise(net: &LayaNet, seed: u64) {
    let mut rng = Rng::new(seed, 77);
    for p in net.params() {
        let n = p.var.elem_count();
        let (centre, half) = match (p.name.as_str(), p.var.dims().len()) {
            ("pos_embd.weight", _) => (0.0, 2.0),
            (n, _) if n.ends_with("norm.weight") => (1.0, 0.3),
            (_, 2) => (0.0, 0.5),
            _ => (0.0, 0.2),
        };
        let v: Vec<f32> = (0..n).map(|_| (centre + half * (2.0 * rng.uniform() - 1.0)) as f32).collect();
        p.var.set(&Tensor::from_vec(v, p.var.dims(), net.device()).unwrap()).unwrap();
    }
}

/// Straight from format.md §3 (`relative_causal`), in f64: the whole token stream `BOS` +
/// characters, every position of every block (no receptive-field shortcut, no padding), then
/// the heads on the last position.
fn reference(net: &LayaNet, context: &str) -> (Vec<f64>, Vec<f64>) {
    let cfg = net.config();
    let (t_win, d, h) = (cfg.context, cfg.d_model, cfg.heads);
    let dh = d / h;
    let eps = cfg.eps as f64;
    let p = |name: &str| -> Vec<f64> { values(net, name).iter().map(|&x| x as f64).collect() };
    let emb = p("token_embd.weight");
    let pos = p("pos_embd.weight"); // [L·H, T] row-major
    let mut rows = vec![0usize]; // BOS
    for c in normalize(context, &cfg.normalization).chars() {
        rows.push(cfg.mapping.row(c as u32, cfg.mapping.rows()) as usize);
    }
    let n = rows.len();
    let mut x: Vec<Vec<f64>> = rows.iter().map(|&r| emb[r * d..(r + 1) * d].to_vec()).collect();
    let ln = |v: &[f64], w: &[f64], b: &[f64]| -> Vec<f64> {
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / v.len() as f64;
        v.iter().zip(w).zip(b).map(|((x, w), b)| (x - mean) / (var + eps).sqrt() * w + b).collect()
    };
    // y = W·v + b with W stored (out, in)
    let lin = |v: &[f64], w: &[f64], b: &[f64]| -> Vec<f64> {
        b.iter()
            .enumerate()
            .map(|(o, &bo)| bo + v.iter().zip(&w[o * v.len()..(o + 1) * v.len()]).map(|(a, b)| a * b).sum::<f64>())
            .collect()
    };
    for l in 0..cfg.layers() {
        let g = |s: &str| p(&format!("blk.{l}.{s}"));
        let hs: Vec<Vec<f64>> = x.iter().map(|v| ln(v, &g("attn_norm.weight"), &g("attn_norm.bias"))).collect();
        let q: Vec<Vec<f64>> = hs.iter().map(|v| lin(v, &g("attn_q.weight"), &g("attn_q.bias"))).collect();
        let k: Vec<Vec<f64>> = hs.iter().map(|v| lin(v, &g("attn_k.weight"), &g("attn_k.bias"))).collect();
        let vv: Vec<Vec<f64>> = hs.iter().map(|v| lin(v, &g("attn_v.weight"), &g("attn_v.bias"))).collect();
        let mut next = Vec::with_capacity(n);
        for t in 0..n {
            let mut o = vec![0f64; d];
            for head in 0..h {
                let span = head * dh..(head + 1) * dh;
                let keys: Vec<usize> = (t.saturating_sub(t_win - 1)..=t).collect();
                let scores: Vec<f64> = keys
                    .iter()
                    .map(|&s| {
                        let dot: f64 = q[t][span.clone()].iter().zip(&k[s][span.clone()]).map(|(a, b)| a * b).sum();
                        dot / (dh as f64).sqrt() + pos[(l * h + head) * t_win + (t - s)]
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = scores.iter().map(|s| (s - m).exp()).sum();
                for (&s, sc) in keys.iter().zip(&scores) {
                    let a = (sc - m).exp() / z;
                    for c in span.clone() {
                        o[c] += a * vv[s][c];
                    }
                }
            }
            let attn = lin(&o, &g("attn_output.weight"), &g("attn_output.bias"));
            let x1: Vec<f64> = x[t].iter().zip(&attn).map(|(a, b)| a + b).collect();
            let hf = ln(&x1, &g("ffn_norm.weight"), &g("ffn_norm.bias"));
            let up: Vec<f64> = lin(&hf, &g("ffn_up.weight"), &g("ffn_up.bias"))
                .into_iter()
                .map(|u| match cfg.activation {
                    Activation::GeluTanh => 0.5 * u * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (u + 0.044715 * u * u * u)).tanh()),
                    Activation::Relu => u.max(0.0),
                })
                .collect();
            let down = lin(&up, &g("ffn_down.weight"), &g("ffn_down.bias"));
            next.push(x1.iter().zip(&down).map(|(a, b)| a + b).collect::<Vec<f64>>());
        }
        x = next;
    }
    let z = ln(&x[n - 1], &p("output_norm.weight"), &p("output_norm.bias"));
    (lin(&z, &p("output.weight"), &p("output.bias")), lin(&z, &p("replace.weight"), &p("replace.bias")))
}

/// Contexts from empty to longer than the receptive field of every model below.
fn contexts() -> Vec<String> {
    let cjk = |i: usize| char::from_u32(0x4E00 + (i * 7 % 40) as u32).unwrap();
    let mut out: Vec<String> = ["", "a", "今", "hello wor", "\u{0}x"].iter().map(|s| s.to_string()).collect();
    for len in [8, 9, 10, 11, 29, 30, 31, 32, 45] {
        out.push((0..len).map(|i| if i % 3 == 0 { (b'a' + (i % 26) as u8) as char } else { cjk(i) }).collect());
    }
    out
}

fn max_rel_diff(a: &[f32], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| (x as f64 - y).abs() / (1.0 + y.abs())).fold(0.0, f64::max)
}

#[test]
fn candle_matches_a_naive_f64_reading_of_the_spec() {
    // T 16 with 2 blocks (R 31), and T 4 with 3 blocks (R 10: the contexts cross it often).
    for (t, ffn, act) in [(16, vec![64, 32], Activation::GeluTanh), (4, vec![64, 32, 32], Activation::Relu)] {
        let mut cfg = causal_cfg(t, ffn);
        cfg.activation = act;
        let net = LayaNet::new(cfg, 11).unwrap();
        randomise(&net, 5);
        let ctx = contexts();
        let refs: Vec<&str> = ctx.iter().map(|s| s.as_str()).collect();
        // All at once (mixed padding in one batch) and one by one.
        let (bw, br) = net.predict_logits(&refs).unwrap();
        let mut worst = 0f64;
        for (i, c) in refs.iter().enumerate() {
            let (ww, wr) = reference(&net, c);
            let (sw, sr) = net.predict_logits(&[c]).unwrap();
            for (got, want) in [(&bw[i], &ww), (&br[i], &wr), (&sw[0], &ww), (&sr[0], &wr)] {
                worst = worst.max(max_rel_diff(got, want));
            }
            // The test would pass trivially if the logits did not depend on the context.
            assert!(ww.iter().map(|x| x.abs()).sum::<f64>() > 1e-3);
        }
        assert!(worst < 1e-4, "T {t}: worst relative difference {worst}");
        // And the contexts really give different outputs.
        assert!(max_rel_diff(&bw[1], &reference(&net, refs[2]).0) > 1e-3);
    }
}

#[test]
fn only_the_last_r_tokens_matter() {
    let net = LayaNet::new(causal_cfg(16, vec![64, 32]), 3).unwrap();
    randomise(&net, 9);
    let r = net.config().seq_len();
    assert_eq!(r, 31);
    let tail: String = (0..r).map(|i| char::from_u32(0x4E00 + (i * 11 % 40) as u32).unwrap()).collect(); // R chars: no BOS in the window
    let logits = |c: &str| net.predict_logits(&[c]).unwrap().0.remove(0);
    let base = logits(&tail);
    // Anything before the last R tokens is invisible.
    for prefix in ["x", "hello world 今天天气", "\u{0}", "abcdefghijklmnopqrstuvwxyz0123456789"] {
        let got = logits(&format!("{prefix}{tail}"));
        let diff = got.iter().zip(&base).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(diff <= 1e-5, "prefix {prefix:?} changed the logits by {diff}");
    }
    // Changing the character R + 1 tokens back (the first of R + 1 characters) changes nothing.
    let long: Vec<char> = format!("丁{tail}").chars().collect();
    let mut changed = long.clone();
    changed[0] = 'q';
    let diff = logits(&changed.iter().collect::<String>())
        .iter()
        .zip(&logits(&long.iter().collect::<String>()))
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(diff <= 1e-5, "{diff}");
    // Changing any character within the last R tokens does (for these weights).
    let tail_chars: Vec<char> = tail.chars().collect();
    for k in 0..r {
        let mut c = tail_chars.clone();
        c[k] = 'q';
        let got = logits(&c.iter().collect::<String>());
        let diff = got.iter().zip(&base).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(diff > 1e-4, "changing token {k} of {r} changed nothing ({diff})");
    }
    // With R − 1 characters the stream's first token is BOS; with R it is a character.
    let short: String = tail_chars[1..].iter().collect();
    let diff = logits(&short).iter().zip(&logits(&format!("q{short}"))).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(diff > 1e-4, "BOS and a character gave the same output");
}

#[test]
fn padding_is_invisible() {
    // A short context's logits depend neither on what else is in the batch nor on the
    // embedding row the padding slots gather (row 0, also BOS).
    let net = LayaNet::new(causal_cfg(16, vec![64, 32]), 4).unwrap();
    randomise(&net, 2);
    let short = ["", "今", "abc", "今天天气不错"];
    let alone: Vec<Vec<f32>> = short.iter().map(|c| net.predict_logits(&[c]).unwrap().0.remove(0)).collect();
    let long = "一二三四五六七八九十一二三四五六七八九十一二三四五六七八九十一二三";
    let (mixed, _) = net.predict_logits(&[short[0], long, short[1], short[2], short[3]]).unwrap();
    let mixed: Vec<&Vec<f32>> = [0, 2, 3, 4].iter().map(|&i| &mixed[i]).collect();
    for (a, b) in alone.iter().zip(&mixed) {
        let diff = a.iter().zip(b.iter()).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(diff <= 1e-5, "{diff}");
    }
    // Feed the padded rows through the gathered-embedding path with the padding slots' inputs
    // replaced by large garbage: nothing may change (only masking keeps them out).
    let rows: Vec<u32> = net.encode(&short).unwrap().flatten_all().unwrap().to_vec1().unwrap();
    assert!(rows.contains(&PAD_ROW));
    let d = net.config().d_model;
    let mut tok: Vec<f32> = net.gather_rows(&rows).unwrap().flatten_all().unwrap().to_vec1().unwrap();
    for (i, &r) in rows.iter().enumerate() {
        if r == PAD_ROW {
            tok[i * d..(i + 1) * d].iter_mut().enumerate().for_each(|(j, x)| *x = 50.0 * ((i + j) % 7) as f32 - 100.0);
        }
    }
    let tok = Tensor::from_vec(tok, (rows.len(), d), net.device()).unwrap();
    let (w, _) = net.forward_embedded(&tok, &rows).unwrap();
    let w: Vec<Vec<f32>> = w.to_vec2().unwrap();
    for (a, b) in alone.iter().zip(&w) {
        let diff = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(diff <= 1e-5, "garbage in the padding changed the logits by {diff}");
    }
}

#[test]
fn encoding_is_bos_then_characters() {
    let cfg = causal_cfg(4, vec![32, 32]); // R = 7
    assert_eq!(cfg.seq_len(), 7);
    let row = |c: char| cfg.mapping.row(c as u32, cfg.mapping.rows());
    let mut out = vec![0u32; 7];
    cfg.encode_into("ab", &mut out);
    assert_eq!(out, vec![PAD_ROW, PAD_ROW, PAD_ROW, PAD_ROW, 0, row('a'), row('b')]);
    cfg.encode_into("abcdefgh", &mut out);
    assert_eq!(out, "bcdefgh".chars().map(row).collect::<Vec<_>>());
    cfg.encode_into("", &mut out);
    assert_eq!(out[6], 0);
    let set = encode_events(
        &[Event { context: "今天".into(), shown: vec![Shown { word: "天气".into(), replace: 0 }], clicked: Some(0), weight: 1.0 }],
        &cfg,
        &TrainConfig::default(),
    );
    assert_eq!((set.t, set.rows.len()), (7, 7));
}

fn events() -> Vec<Event> {
    let mut out = Vec::new();
    for i in 0..24 {
        let ctx: String = (0..(2 + i % 9)).map(|k| char::from_u32(0x4E00 + ((i * 5 + k * 3) % 40) as u32).unwrap()).collect();
        let w = WORDS[i % WORDS.len()];
        let other = WORDS[(i + 1) % WORDS.len()];
        out.push(Event {
            context: ctx,
            shown: vec![Shown { word: other.into(), replace: 0 }, Shown { word: w.into(), replace: (i % 3) as u32 }],
            clicked: Some(1),
            weight: 1.0,
        });
    }
    out
}

#[test]
fn training_lowers_the_loss_and_moves_the_biases() {
    let net = LayaNet::new(causal_cfg(16, vec![64, 32]), 1).unwrap();
    let before = values(&net, "pos_embd.weight");
    assert_eq!(before, recency_prior(2, 2, 16));
    let tc = TrainConfig { lr: 1e-2, warmup_steps: 0, ..TrainConfig::default() };
    let mut opt = AdamW::new(net.params(), &tc).unwrap();
    let set = encode_events(&events(), net.config(), &tc);
    let idx: Vec<usize> = (0..set.len()).collect();
    let batch = make_batch(&set, &idx, WORDS.len(), 4, net.device()).unwrap();
    // Every parameter, the relative biases included, gets a gradient.
    let tok = net.gather_rows(&batch.rows).unwrap();
    let leaf = candle_core::Var::from_tensor(&tok).unwrap();
    let (w, r) = net.forward_embedded(leaf.as_tensor(), &batch.rows).unwrap();
    let grads = loss_tensors(&w, &r, &batch, 1.0).unwrap().0.backward().unwrap();
    for p in net.params() {
        if p.kind == ParamKind::TokenEmbedding {
            continue; // reached through the gathered leaf
        }
        let g = grads.get(p.var.as_tensor()).unwrap_or_else(|| panic!("{} has no gradient", p.name));
        let s = g.abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(s > 0.0 && s.is_finite(), "{} gradient sum {s}", p.name);
    }
    // Padding slots get no gradient at all (they are masked keys).
    let g: Vec<f32> = grads.get(leaf.as_tensor()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
    let d = net.config().d_model;
    for (i, &row) in batch.rows.iter().enumerate() {
        let n = g[i * d..(i + 1) * d].iter().map(|x| x.abs()).sum::<f32>();
        if row == PAD_ROW {
            assert!(n < 1e-20, "padding slot {i} has gradient {n}");
        }
    }
    let first = train_step(&net, &mut opt, &batch, &tc, tc.lr).unwrap().0.total;
    let mut last = first;
    for _ in 0..30 {
        last = train_step(&net, &mut opt, &batch, &tc, tc.lr).unwrap().0.total;
    }
    assert!(last < 0.7 * first, "loss {first} -> {last}");
    let after = values(&net, "pos_embd.weight");
    let moved = before.iter().zip(&after).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(moved > 1e-3, "relative biases moved by {moved}");
}

#[test]
fn train_loop_runs_on_the_causal_scheme() {
    let tc = TrainConfig { epochs: 2, batch_size: 8, warmup_steps: 2, ..TrainConfig::default() };
    let ev = events();
    let out = train(causal_cfg(16, vec![32, 32]), tc, &ev, &ev, &RunOptions::default(), &mut NoHooks).unwrap();
    assert_eq!(out.state.epochs.len(), 2);
    assert!(out.state.epochs.iter().all(|e| e.valid.loss.total.is_finite()));
}

fn info() -> ExportInfo {
    ExportInfo { name: "causal".into(), language: "zh".into(), training_data: "random".into(), created: "2026-01-01".into() }
}

#[test]
fn export_round_trip_keeps_the_scheme_and_the_bias_table() {
    let net = LayaNet::new(causal_cfg(16, vec![64, 32]), 6).unwrap();
    randomise(&net, 6);
    let ctx = contexts();
    let refs: Vec<&str> = ctx.iter().map(|s| s.as_str()).collect();
    let (want, _) = net.predict_logits(&refs).unwrap();
    for precision in [Precision::F32, Precision::F16] {
        let bytes = net.export_bytes(&info(), precision).unwrap();
        let file = laya_format::LayaFile::parse(&bytes).unwrap();
        assert_eq!(file.meta.hparams.position_scheme, PositionScheme::RelativeCausal);
        assert_eq!(file.pos_embd.ne, vec![16, 4]); // [T, L·H]
        assert_eq!(file.pos_embd.ty, laya_format::GgmlType::F32);
        assert_eq!(file.pos_embd.to_f32().unwrap(), values(&net, "pos_embd.weight"));
        let back = LayaNet::from_laya(&file).unwrap();
        assert_eq!(back.config(), net.config());
        let (got, _) = back.predict_logits(&refs).unwrap();
        let tol = if precision == Precision::F32 { 1e-6 } else { 0.1 };
        for (g, w) in got.iter().zip(&want) {
            let diff = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(diff <= tol, "{precision:?}: {diff}");
        }
    }
}

#[test]
fn pruning_keeps_the_bias_table() {
    let net = LayaNet::new(causal_cfg(16, vec![64, 64]), 8).unwrap();
    randomise(&net, 8);
    let (small, _) = prune(&net, &[32, 64], Saliency::Magnitude).unwrap();
    assert_eq!(small.config().position_scheme, PositionScheme::RelativeCausal);
    assert_eq!(values(&small, "pos_embd.weight"), values(&net, "pos_embd.weight"));
    let file_bytes = small.export_bytes(&info(), Precision::F32).unwrap();
    let file = laya_format::LayaFile::parse(&file_bytes).unwrap();
    assert_eq!(file.meta.hparams.position_scheme, PositionScheme::RelativeCausal);
    assert_eq!(file.pos_embd.to_f32().unwrap(), values(&net, "pos_embd.weight"));
    // Taylor scores run the causal forward pass with gradients.
    let scores = taylor_scores(&net, &events(), &TrainConfig::default(), 2).unwrap();
    assert!(scores.iter().flatten().all(|s| s.is_finite()) && scores[0].iter().any(|&s| s > 0.0));
}

#[test]
fn config_json_names_the_scheme_and_old_checkpoints_read_as_learned() {
    let cfg = causal_cfg(16, vec![32]);
    let json = serde_json::to_value(&cfg).unwrap();
    assert_eq!(json["position_scheme"], "relative_causal");
    let back: ModelConfig = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back, cfg);
    let mut old = json;
    old.as_object_mut().unwrap().remove("position_scheme");
    let old: ModelConfig = serde_json::from_value(old).unwrap();
    assert_eq!(old.position_scheme, PositionScheme::LearnedAbsolute);
}
