//! Deterministic random models for tests in every crate.
//!
//! The generator uses its own splitmix64 so that the same seed gives the same model on every
//! platform and crate version, without a `rand` dependency.

use crate::gguf::GgmlType;
use crate::schema::{Activation, HParams, Mapping, ModelMeta, NormRule, PositionScheme, Provenance};
use crate::writer::TensorData;

/// The splitmix64 generator (Steele, Lea, Flood 2014): tiny, fast, good enough for test data.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`; 0 when `n == 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in `[-scale, scale)`.
    pub fn symmetric(&mut self, scale: f32) -> f32 {
        (self.unit() * 2.0 - 1.0) * scale
    }
}

/// Sizes of a random model. `TinyConfig::default()` is a miniature of the shipped shape
/// (context 16, d 64, 2 heads, 2 blocks, direct mapping); [`TinyConfig::small`] is the smallest
/// useful file, for fuzzing and doctests.
#[derive(Debug, Clone, PartialEq)]
pub struct TinyConfig {
    pub context_length: u32,
    pub embedding_length: u32,
    pub head_count: u32,
    /// One entry per block (so this also sets the block count).
    pub feed_forward_length: Vec<u32>,
    /// `None`: the direct mapping with 65,536 rows. `Some(r)`: a table mapping with `r` rows.
    pub table_rows: Option<u32>,
    /// Lexicon size `V`.
    pub vocab: usize,
    /// `C`.
    pub replace_classes: u32,
    pub activation: Activation,
}

impl Default for TinyConfig {
    fn default() -> Self {
        TinyConfig {
            context_length: 16,
            embedding_length: 64,
            head_count: 2,
            feed_forward_length: vec![128, 96],
            table_rows: None,
            vocab: 200,
            replace_classes: 8,
            activation: Activation::GeluTanh,
        }
    }
}

impl TinyConfig {
    /// d 32, one block, a 48-row table, 24 words: a file of a few tens of KiB.
    pub fn small() -> Self {
        TinyConfig {
            context_length: 16,
            embedding_length: 32,
            head_count: 2,
            feed_forward_length: vec![64],
            table_rows: Some(48),
            vocab: 24,
            replace_classes: 8,
            activation: Activation::GeluTanh,
        }
    }
}

const FIXED_WORDS: [&str; 8] = ["的", "12月", "hello", "中国", "😀", "👍🏽", "naïve", "東京"];

fn made_up_word(rng: &mut SplitMix64) -> String {
    let len = 1 + rng.below(4) as usize;
    match rng.below(4) {
        // ASCII
        0 => (0..len + 1).map(|_| char::from(b'a' + rng.below(26) as u8)).collect(),
        // CJK unified ideographs (a common block)
        1 | 2 => (0..len).filter_map(|_| char::from_u32(0x4E00 + rng.below(0x600) as u32)).collect(),
        // emoji, sometimes after a CJK character
        _ => {
            let mut w = String::new();
            if rng.below(2) == 0 {
                w.extend(char::from_u32(0x4E00 + rng.below(0x100) as u32));
            }
            w.extend(char::from_u32(0x1F600 + rng.below(0x50) as u32));
            w
        }
    }
}

/// A deterministic random model: metadata and all tensors in canonical order.
///
/// Matrices and `token_embd` use `ty`; `pos_embd` and `replace.weight` use `ty` when it is a
/// float type and F32 otherwise; norms and biases are F32. Weights are small uniform values,
/// norm weights are near 1.
///
/// ```
/// use laya_format::{testing, GgmlType};
/// let (a, ta) = testing::random_model(&testing::TinyConfig::small(), 9, GgmlType::Q4_1);
/// let (b, tb) = testing::random_model(&testing::TinyConfig::small(), 9, GgmlType::Q4_1);
/// assert_eq!((a, ta), (b, tb));
/// ```
pub fn random_model(cfg: &TinyConfig, seed: u64, ty: GgmlType) -> (ModelMeta, Vec<TensorData>) {
    let mut rng = SplitMix64::new(seed);

    let mut words: Vec<String> = Vec::with_capacity(cfg.vocab);
    let mut seen = std::collections::HashSet::new();
    for w in FIXED_WORDS.iter().take(cfg.vocab) {
        seen.insert(w.to_string());
        words.push(w.to_string());
    }
    while words.len() < cfg.vocab {
        let w = made_up_word(&mut rng);
        if seen.insert(w.clone()) {
            words.push(w);
        }
    }
    let frequencies: Vec<u32> = (0..words.len()).map(|i| 1 + (1_000_000 / (i as u32 + 1)) + rng.below(7) as u32).collect();

    let (rows, mapping) = match cfg.table_rows {
        None => (65536, Mapping::Direct),
        Some(r) => {
            let r = r.max(2);
            // Characters of the lexicon first, then ASCII, then CJK filler; sorted at the end.
            let want = (r - 2) as usize;
            let mut cps: Vec<u32> = Vec::with_capacity(want);
            let candidates = words.iter().flat_map(|w| w.chars().map(|c| c as u32)).chain(0x21..0x7F).chain(0x5000..);
            for cp in candidates {
                if cps.len() == want {
                    break;
                }
                if !cps.contains(&cp) {
                    cps.push(cp);
                }
            }
            cps.sort_unstable();
            (r, Mapping::Table(cps))
        }
    };

    let hparams = HParams {
        context_length: cfg.context_length,
        embedding_length: cfg.embedding_length,
        block_count: cfg.feed_forward_length.len() as u32,
        head_count: cfg.head_count,
        layer_norm_epsilon: 1e-5,
        feed_forward_length: cfg.feed_forward_length.clone(),
        activation: cfg.activation,
        position_scheme: PositionScheme::LearnedAbsolute,
        embedding_rows: rows,
        mapping,
        replace_classes: cfg.replace_classes,
    };
    let meta = ModelMeta {
        name: format!("laya-test-{seed}"),
        hparams,
        words,
        frequencies,
        normalization: vec![NormRule::FullwidthAscii, NormRule::LowercaseAscii],
        provenance: Provenance {
            language: "zh".into(),
            training_data: "random weights from laya_format::testing".into(),
            created: "2025-01-01".into(),
            tool: Some(format!("laya-format {}", env!("CARGO_PKG_VERSION"))),
        },
    };

    let d = u64::from(cfg.embedding_length);
    let float_ty = if matches!(ty, GgmlType::F16 | GgmlType::BF16) { ty } else { GgmlType::F32 };
    let mut tensors = Vec::new();
    let mut add = |name: String, ty: GgmlType, ne: Vec<u64>, rng: &mut SplitMix64, kind: Kind| {
        let n: u64 = ne.iter().product();
        let scale = match kind {
            Kind::Matrix => 1.0 / (ne[0] as f32).sqrt(),
            Kind::Bias => 0.05,
            Kind::Norm => 0.1,
        };
        let values: Vec<f32> = (0..n)
            .map(|_| match kind {
                Kind::Norm => 1.0 + rng.symmetric(scale),
                _ => rng.symmetric(scale),
            })
            .collect();
        let data = crate::quant::quantize(&values, ty).unwrap_or_default();
        tensors.push(TensorData { name, ty, ne, data });
    };
    add("token_embd.weight".into(), ty, vec![d, u64::from(rows)], &mut rng, Kind::Matrix);
    add("pos_embd.weight".into(), float_ty, vec![d, u64::from(cfg.context_length)], &mut rng, Kind::Matrix);
    for (l, &f) in cfg.feed_forward_length.iter().enumerate() {
        let f = u64::from(f);
        let p = |s: &str| format!("blk.{l}.{s}");
        add(p("attn_norm.weight"), GgmlType::F32, vec![d], &mut rng, Kind::Norm);
        add(p("attn_norm.bias"), GgmlType::F32, vec![d], &mut rng, Kind::Bias);
        for m in ["attn_q", "attn_k", "attn_v", "attn_output"] {
            add(p(&format!("{m}.weight")), ty, vec![d, d], &mut rng, Kind::Matrix);
            add(p(&format!("{m}.bias")), GgmlType::F32, vec![d], &mut rng, Kind::Bias);
        }
        add(p("ffn_norm.weight"), GgmlType::F32, vec![d], &mut rng, Kind::Norm);
        add(p("ffn_norm.bias"), GgmlType::F32, vec![d], &mut rng, Kind::Bias);
        add(p("ffn_up.weight"), ty, vec![d, f], &mut rng, Kind::Matrix);
        add(p("ffn_up.bias"), GgmlType::F32, vec![f], &mut rng, Kind::Bias);
        add(p("ffn_down.weight"), ty, vec![f, d], &mut rng, Kind::Matrix);
        add(p("ffn_down.bias"), GgmlType::F32, vec![d], &mut rng, Kind::Bias);
    }
    let v = cfg.vocab as u64;
    let c = u64::from(cfg.replace_classes);
    add("output_norm.weight".into(), GgmlType::F32, vec![d], &mut rng, Kind::Norm);
    add("output_norm.bias".into(), GgmlType::F32, vec![d], &mut rng, Kind::Bias);
    add("output.weight".into(), ty, vec![d, v], &mut rng, Kind::Matrix);
    add("output.bias".into(), GgmlType::F32, vec![v], &mut rng, Kind::Bias);
    add("replace.weight".into(), float_ty, vec![d, c], &mut rng, Kind::Matrix);
    add("replace.bias".into(), GgmlType::F32, vec![c], &mut rng, Kind::Bias);
    (meta, tensors)
}

#[derive(Clone, Copy)]
enum Kind {
    Matrix,
    Bias,
    Norm,
}
