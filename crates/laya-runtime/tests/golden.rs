//! Numerics against an independent implementation: scripts/reference_forward.py computes the
//! forward pass in float64 numpy from the same file, dequantising with the `gguf` package's
//! own code, and the engine must match it within a named tolerance per tensor type.

mod common;

use std::path::PathBuf;
use std::process::Command;

use laya_format::quantize::QuantizeOptions;
use laya_format::testing::random_quantized_model;
use laya_format::testing::TinyConfig;
use laya_format::{write_model, GgmlType};
use laya_runtime::{ActPrecision, Kernels, Session};

/// Max |runtime − reference| / (1 + |reference|) per logit. Both sides dequantise to the same
/// f32 weights, so what remains is f32 accumulation order against float64; quantisation error
/// itself is not part of this comparison.
fn tolerance(ty: GgmlType) -> f32 {
    match ty {
        // Integer tables are never weights (the golden files hold none).
        GgmlType::F32 | GgmlType::I16 | GgmlType::I32 => 1e-4,
        GgmlType::F16 | GgmlType::BF16 => 1e-4,
        GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q4_1 => 2e-4,
    }
}

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("LAYA_PYTHON") {
        return p.into();
    }
    let venv = workspace().join(".venv/bin/python");
    assert!(venv.exists(), "the Python reference needs the repo's venv: run scripts/setup-python.sh (or set LAYA_PYTHON)");
    venv
}

#[derive(serde::Deserialize)]
struct Golden {
    context: String,
    word_logits: Vec<f64>,
    replace_logits: Vec<f64>,
}

#[test]
fn engine_matches_numpy_reference_for_every_type_and_tier() {
    let dir = std::env::temp_dir().join(format!("laya-golden-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfgs = [
        TinyConfig::default(),
        TinyConfig { table_rows: Some(300), ..TinyConfig::default() },
        // The causal window: the reference runs the whole token stream, the engine only its
        // receptive field (the long context checks that the rest cannot matter).
        TinyConfig { position_scheme: laya_format::PositionScheme::RelativeCausal, table_rows: Some(300), ..TinyConfig::default() },
        // A factorised word head: both sides give ln P(w) whole.
        TinyConfig { position_scheme: laya_format::PositionScheme::RelativeCausal, word_classes: 12, ..TinyConfig::default() },
    ];
    for (ci, cfg) in cfgs.iter().enumerate() {
        let mut models: Vec<(String, GgmlType, Vec<u8>)> =
            [GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1]
                .into_iter()
                .map(|ty| (format!("{ty:?}"), ty, common::model_bytes(cfg, 42, ty)))
                .collect();
        // `laya quantize`'s output: Q4_1 embedding with token_embd_comp.weight, Q8_0 matrices.
        let (meta, tensors) = random_quantized_model(cfg, 42, &QuantizeOptions::default());
        assert!(tensors.iter().any(|t| t.name == laya_format::TOKEN_EMBD_COMP));
        models.push(("Q4_1+comp".into(), GgmlType::Q4_1, write_model(&meta, &tensors).unwrap()));
        for (label, ty, bytes) in models {
            let path = dir.join(format!("m{ci}-{label}.laya"));
            std::fs::write(&path, bytes).unwrap();
            let out = dir.join(format!("m{ci}-{label}.json"));
            let ctx = dir.join("contexts.json");
            std::fs::write(&ctx, serde_json::to_vec(common::CONTEXTS).unwrap()).unwrap();
            let status = Command::new(python())
                .arg(workspace().join("scripts/reference_forward.py"))
                .arg(&path)
                .arg(&ctx)
                .arg(&out)
                .status()
                .expect("run the Python reference");
            assert!(status.success(), "reference_forward.py failed for {label}");
            let golden: Vec<Golden> = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
            assert_eq!(golden.len(), common::CONTEXTS.len());

            let mut tiers = vec![Kernels::scalar(), Kernels::detect()];
            tiers.dedup_by_key(|k| k.level());
            for k in tiers {
                let model = laya_runtime::Model::load_with(&path, k).unwrap();
                let mut s = Session::new(model);
                // The reference computes with f32 activations; the int8 path has its own test
                // (tests/int8.rs) against this exact path.
                s.set_act_precision(ActPrecision::F32);
                let mut worst = 0f32;
                for g in &golden {
                    let (w, r) = s.logits(&g.context);
                    assert_eq!((w.len(), r.len()), (g.word_logits.len(), g.replace_logits.len()));
                    for (a, b) in w.iter().chain(&r).zip(g.word_logits.iter().chain(&g.replace_logits)) {
                        worst = worst.max((a - *b as f32).abs() / (1.0 + b.abs() as f32));
                    }
                }
                assert!(worst <= tolerance(ty), "{label} on {}: worst relative error {worst}", k.level());
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
