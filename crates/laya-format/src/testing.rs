//! Deterministic random models for tests in every crate.
//!
//! The generator uses its own splitmix64 so that the same seed gives the same model on every
//! platform and crate version, without a `rand` dependency.

use crate::schema::{Activation, HParams, Mapping, ModelMeta, NormRule, PositionScheme, Provenance};
use crate::types::GgmlType;
use crate::writer::TensorData;

pub use crate::rng::SplitMix64;

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
    /// `learned_absolute` (a `[d, T]` position table) or `relative_causal` (a `[T, L·H]` bias).
    pub position_scheme: PositionScheme,
    /// `0`: a flat word head. Otherwise a factorised one with about this many classes
    /// ([`crate::assign_word_classes`]).
    pub word_classes: u32,
    /// With `word_classes`: this many of the most frequent words get classes of their own
    /// ([`crate::assign_word_classes_own`]).
    pub own_class_words: u32,
    /// An output memory (`relative_causal` only): its table gets random rows.
    pub memory: Option<crate::memory::Memory>,
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
            position_scheme: PositionScheme::LearnedAbsolute,
            word_classes: 0,
            own_class_words: 0,
            memory: None,
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
            position_scheme: PositionScheme::LearnedAbsolute,
            word_classes: 0,
            own_class_words: 0,
            memory: None,
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
        position_scheme: cfg.position_scheme,
        embedding_rows: rows,
        mapping,
        replace_classes: cfg.replace_classes,
        memory: cfg.memory.clone(),
    };
    let word_class = (cfg.word_classes > 0).then(|| {
        crate::assign_word_classes_own(
            words.iter().map(String::as_str),
            &frequencies,
            cfg.word_classes as usize,
            cfg.own_class_words as usize,
        )
    });
    let meta = ModelMeta {
        name: format!("laya-test-{seed}"),
        hparams,
        words: words.into(),
        frequencies,
        dict_frequencies: None,
        word_class,
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
    let pos_ne = match cfg.position_scheme {
        PositionScheme::LearnedAbsolute => vec![d, u64::from(cfg.context_length)],
        PositionScheme::RelativeCausal => {
            vec![u64::from(cfg.context_length), cfg.feed_forward_length.len() as u64 * u64::from(cfg.head_count)]
        }
    };
    // Relative biases get the bias scale: they shift attention, not replace it.
    let pos_kind = match cfg.position_scheme {
        PositionScheme::LearnedAbsolute => Kind::Matrix,
        PositionScheme::RelativeCausal => Kind::Bias,
    };
    add("pos_embd.weight".into(), float_ty, pos_ne, &mut rng, pos_kind);
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
    if meta.word_class.is_some() {
        let k = meta.word_classes() as u64;
        add(crate::OUTPUT_CLASS_W.into(), ty, vec![d, k], &mut rng, Kind::Matrix);
        add(crate::OUTPUT_CLASS_B.into(), GgmlType::F32, vec![k], &mut rng, Kind::Bias);
    }
    if let Some(m) = &cfg.memory {
        add(crate::MEMORY_EMBD.into(), ty, vec![d, u64::from(m.buckets)], &mut rng, Kind::Matrix);
    }
    (meta, tensors)
}

#[derive(Clone, Copy)]
enum Kind {
    Matrix,
    Bias,
    Norm,
}

/// One random corruption of `bytes`, for fuzzing readers: bit flips, byte overwrites with
/// interesting values, truncation, insertion, deletion, or a u64 field overwritten. Half of the
/// edits land in the first `hot_len` bytes (the header and tables, where the parser branches).
pub fn mutate(bytes: &[u8], rng: &mut SplitMix64, hot_len: usize) -> Vec<u8> {
    let mut b = bytes.to_vec();
    let edits = 1 + rng.below(3);
    for _ in 0..edits {
        let len = b.len() as u64;
        let hot = (hot_len as u64).min(len).max(1);
        let at = if rng.below(2) == 0 { rng.below(hot) } else { rng.below(len.max(1)) } as usize;
        match rng.below(7) {
            0 => {
                if let Some(x) = b.get_mut(at) {
                    *x ^= 1 << rng.below(8);
                }
            }
            1 => {
                const INTERESTING: [u8; 8] = [0, 1, 0x7F, 0x80, 0xFF, 9, 12, 30];
                if let Some(x) = b.get_mut(at) {
                    *x = INTERESTING[rng.below(8) as usize];
                }
            }
            2 => b.truncate(at),
            3 => {
                let n = 1 + rng.below(16) as usize;
                let ins: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
                let at = at.min(b.len());
                b.splice(at..at, ins);
            }
            4 => {
                let end = (at + 1 + rng.below(16) as usize).min(b.len());
                if at < end {
                    b.drain(at..end);
                }
            }
            5 => {
                const WIDE: [u64; 6] = [0, 1, 64, u32::MAX as u64, 1 << 40, u64::MAX];
                let v = WIDE[rng.below(6) as usize].to_le_bytes();
                for (i, x) in v.iter().enumerate() {
                    if let Some(y) = b.get_mut(at + i) {
                        *y = *x;
                    }
                }
            }
            _ => {
                if let Some(x) = b.get_mut(at) {
                    *x = rng.next_u64() as u8;
                }
            }
        }
    }
    b
}

/// Runs every reader of this crate on `bytes` (also after re-patching the checksum, so damage
/// reaches the schema checks instead of stopping at the checksum). Returns whether the model
/// loaded. A file that loads must also be writable again by [`crate::write_model`].
pub fn exercise_readers(bytes: &[u8]) -> Result<bool, String> {
    let _ = crate::GgufFile::parse(bytes);
    let _ = crate::checksum_report(bytes);
    let mut patched = bytes.to_vec();
    let _ = crate::patch_checksum(&mut patched);
    let mut loaded = false;
    for candidate in [bytes, &patched[..]] {
        if let Ok(model) = crate::LayaFile::parse(candidate) {
            loaded = true;
            let tensors: Vec<TensorData> = model.tensors().into_iter().map(|t| t.to_owned_data()).collect();
            for t in model.tensors() {
                let offset = (t.data.as_ptr() as usize).wrapping_sub(candidate.as_ptr() as usize);
                if !offset.is_multiple_of(model.alignment as usize) {
                    return Err(format!("tensor {} at unaligned offset {offset}", t.name));
                }
            }
            if let Err(e) = crate::write_model(&model.meta, &tensors) {
                return Err(format!("a file that loads cannot be written again: {e}"));
            }
        }
    }
    Ok(loaded)
}

/// A deterministic random model quantised the way `laya quantize` does it: a float (F32)
/// [`random_model`] run through [`crate::quantize::quantize_model`]. With
/// `opts.compensation` and a quantised embedding it has a `token_embd_comp.weight` tensor.
///
/// ```
/// use laya_format::{quantize::QuantizeOptions, testing, write_model, GgmlType, LayaFile};
/// let (meta, tensors) =
///     testing::random_quantized_model(&testing::TinyConfig::small(), 2, &QuantizeOptions::default());
/// let bytes = write_model(&meta, &tensors)?;
/// assert_eq!(LayaFile::parse(&bytes)?.token_embd_comp.unwrap().ty, GgmlType::F16);
/// # Ok::<(), laya_format::FormatError>(())
/// ```
pub fn random_quantized_model(cfg: &TinyConfig, seed: u64, opts: &crate::quantize::QuantizeOptions) -> (ModelMeta, Vec<TensorData>) {
    let (meta, tensors) = random_model(cfg, seed, GgmlType::F32);
    let quantized = crate::write_model(&meta, &tensors).ok().and_then(|bytes| {
        let file = crate::LayaFile::parse(&bytes).ok()?;
        crate::quantize::quantize_model(&file, opts).ok()
    });
    match quantized {
        Some(q) => (q.meta, q.tensors),
        // Only a config the generator cannot write at all ends here; return the float model so
        // callers' own checks fail loudly instead of this helper panicking.
        None => (meta, tensors),
    }
}

/// The tensors of a word trigram (docs/format.md §8) over a lexicon of `words` words, counted
/// from `lines` deterministic random lines of lexicon positions (now and then a word outside
/// the lexicon), to append to a [`random_model`]'s tensors.
///
/// ```
/// use laya_format::{testing, write_model, GgmlType, LayaFile};
/// let cfg = testing::TinyConfig::small();
/// let (meta, mut tensors) = testing::random_model(&cfg, 3, GgmlType::F32);
/// tensors.extend(testing::random_ngram(cfg.vocab, 200, 3));
/// let bytes = write_model(&meta, &tensors)?;
/// assert!(LayaFile::parse(&bytes)?.ngram.is_some());
/// # Ok::<(), laya_format::FormatError>(())
/// ```
pub fn random_ngram(words: usize, lines: usize, seed: u64) -> Vec<TensorData> {
    let mut rng = SplitMix64::new(seed ^ 0x6e67);
    let (bos, unk) = (words as u32, words as u32 + 1);
    let mut counts: std::collections::HashMap<[u32; 3], u32> = std::collections::HashMap::new();
    let mut prefix = [[0u64; crate::ngram::PREFIX_LENGTHS]; crate::ngram::PREFIX_CLASSES];
    for _ in 0..lines {
        let (mut u, mut v) = (bos, bos);
        for _ in 0..2 + rng.below(8) {
            // Skewed towards the first words, as real text is.
            let w = if rng.below(20) == 0 { unk } else { (rng.below(words as u64) * rng.below(words as u64) / words as u64) as u32 };
            *counts.entry([u, v, w]).or_insert(0) += 1;
            (u, v) = (v, w);
            prefix[rng.below(3) as usize][rng.below(5) as usize] += 1;
        }
    }
    let mut trigrams: Vec<[u32; 4]> = counts.into_iter().map(|(t, c)| [t[0], t[1], t[2], c]).collect();
    trigrams.sort_unstable();
    crate::ngram::NgramCounts::from_trigrams(words, &trigrams, prefix).expect("valid random counts").tensors()
}
