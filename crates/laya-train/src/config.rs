//! Model and training configuration (every size is a setting, not a constant).

use crate::codec::{encode_causal_into, encode_context_into};
use crate::error::{Result, TrainError};
use laya_format::{Activation, Mapping, NormRule, PositionScheme};
use serde::{Deserialize, Serialize};

/// The shape of the network and how text reaches it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// `T`: scalar values of context the model sees (16 in the shipped models).
    pub context: usize,
    /// `d`: embedding width (multiple of 32 and of `heads`).
    pub d_model: usize,
    /// `H`: attention heads.
    pub heads: usize,
    /// `F_l` for every block; its length is the block count `L`.
    pub ffn: Vec<usize>,
    /// `C`: replace classes (a click with replace `i ≥ C` is trained as class `C − 1`).
    pub replace_classes: usize,
    /// FFN activation.
    #[serde(with = "activation_name")]
    pub activation: Activation,
    /// LayerNorm epsilon.
    pub eps: f32,
    /// Codepoint → row mapping (decides the embedding rows `R`).
    #[serde(with = "mapping_serde")]
    pub mapping: Mapping,
    /// Normalisation rules applied to every context, in order.
    #[serde(with = "rule_names")]
    pub normalization: Vec<NormRule>,
    /// The lexicon: `V` distinct words, the output classes of the word head.
    pub words: Vec<String>,
    /// Corpus count of each word (stored in the model file; not used by training).
    pub frequencies: Vec<u32>,
    /// How positions are encoded (`laya.position_scheme`, docs/format.md §3). A checkpoint
    /// written before this setting existed reads as `LearnedAbsolute`, what it was trained with.
    #[serde(default = "learned_absolute", with = "scheme_name")]
    pub position_scheme: PositionScheme,
    /// `None`: a flat word head. Otherwise the class of each word of a factorised head
    /// (`laya.lexicon.word_class`, docs/format.md §3 step 5): `P(w) = P(κ(w)) · P(w | κ(w))`,
    /// classes `0..K`, none empty; `laya train --word-classes` chooses them with
    /// [`laya_format::assign_word_classes`]. A checkpoint written before this setting existed
    /// reads as `None`, what it was trained with (and a flat one is written without the key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub word_class: Option<Vec<u32>>,
    /// `None`: no output memory. Otherwise its buckets and orders (`laya.memory.*`,
    /// docs/format.md §3 step 4; `relative_causal` only): the token embedding table holds its
    /// rows after the [`ModelConfig::rows`] character rows, so that they train as embedding
    /// rows do. A checkpoint written before this setting existed reads as `None`.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "memory_serde")]
    pub memory: Option<laya_format::memory::Memory>,
}

/// `Memory` (from laya-format, which has no serde) as `{"buckets": B, "orders": [n…]}`.
mod memory_serde {
    use laya_format::memory::Memory;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    struct Stored {
        buckets: u32,
        orders: Vec<u32>,
    }

    pub fn serialize<S: Serializer>(m: &Option<Memory>, ser: S) -> Result<S::Ok, S::Error> {
        m.as_ref().map(|m| Stored { buckets: m.buckets, orders: m.orders.clone() }).serialize(ser)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(de: D) -> Result<Option<Memory>, D::Error> {
        Ok(Option::<Stored>::deserialize(de)?.map(|s| Memory { buckets: s.buckets, orders: s.orders }))
    }
}

fn learned_absolute() -> PositionScheme {
    PositionScheme::LearnedAbsolute
}

/// `PositionScheme` (from laya-format, which has no serde) as its model-file name.
mod scheme_name {
    use laya_format::PositionScheme;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(s: &PositionScheme, ser: S) -> Result<S::Ok, S::Error> {
        ser.serialize_str(s.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(de: D) -> Result<PositionScheme, D::Error> {
        let name = String::deserialize(de)?;
        PositionScheme::from_name(&name).ok_or_else(|| serde::de::Error::custom(format!("unknown position scheme '{name}'")))
    }
}

/// `Activation` as its model-file name (`"gelu_tanh"`), as checkpoints have always stored it.
mod activation_name {
    use laya_format::Activation;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(a: &Activation, ser: S) -> Result<S::Ok, S::Error> {
        ser.serialize_str(a.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(de: D) -> Result<Activation, D::Error> {
        let name = String::deserialize(de)?;
        Activation::from_name(&name).ok_or_else(|| serde::de::Error::custom(format!("unknown activation '{name}'")))
    }
}

/// Normalisation rules as their model-file names (`["fullwidth_ascii"]`).
mod rule_names {
    use laya_format::NormRule;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(rules: &[NormRule], ser: S) -> Result<S::Ok, S::Error> {
        rules.iter().map(|r| r.name()).collect::<Vec<_>>().serialize(ser)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(de: D) -> Result<Vec<NormRule>, D::Error> {
        let names = Vec::<String>::deserialize(de)?;
        names
            .iter()
            .map(|n| NormRule::from_name(n).ok_or_else(|| serde::de::Error::custom(format!("unknown normalisation rule '{n}'"))))
            .collect()
    }
}

/// `Mapping` as checkpoints store it: `"Direct"` or `{"Table": [codepoints]}`.
mod mapping_serde {
    use laya_format::Mapping;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    enum Stored {
        Direct,
        Table(Vec<u32>),
    }

    pub fn serialize<S: Serializer>(m: &Mapping, ser: S) -> Result<S::Ok, S::Error> {
        match m {
            Mapping::Direct => Stored::Direct,
            Mapping::Table(t) => Stored::Table(t.clone()),
        }
        .serialize(ser)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(de: D) -> Result<Mapping, D::Error> {
        Ok(match Stored::deserialize(de)? {
            Stored::Direct => Mapping::Direct,
            Stored::Table(t) => Mapping::Table(t),
        })
    }
}

impl ModelConfig {
    /// The original design (T 16, d 128, 2 heads, 3 blocks of FFN 512, 8 replace classes,
    /// gelu_tanh, full-width normalisation) for a given lexicon and mapping.
    ///
    /// ```
    /// use laya_train::{Mapping, ModelConfig};
    /// let cfg = ModelConfig::standard(vec!["你好".into()], vec![3], Mapping::Direct);
    /// assert_eq!((cfg.context, cfg.d_model, cfg.ffn.len()), (16, 128, 3));
    /// cfg.validate().unwrap();
    /// ```
    pub fn standard(words: Vec<String>, frequencies: Vec<u32>, mapping: Mapping) -> Self {
        ModelConfig {
            context: 16,
            d_model: 128,
            heads: 2,
            ffn: vec![512; 3],
            replace_classes: 8,
            activation: Activation::GeluTanh,
            eps: 1e-5,
            mapping,
            normalization: vec![NormRule::FullwidthAscii],
            words,
            frequencies,
            position_scheme: PositionScheme::LearnedAbsolute,
            word_class: None,
            memory: None,
        }
    }

    /// `K`, the classes of a factorised word head; 0 for a flat one.
    pub fn word_classes(&self) -> usize {
        self.word_class.as_deref().and_then(|c| c.iter().max()).map_or(0, |&m| m as usize + 1)
    }

    /// Rows per sample that the trainer feeds: `T` for learned positions; for the causal
    /// window the receptive field `R = L·(T−1)+1` (docs/format.md §3), the only tokens that can
    /// reach the output.
    ///
    /// ```
    /// use laya_train::{Mapping, ModelConfig, PositionScheme};
    /// let mut cfg = ModelConfig::standard(vec!["你好".into()], vec![3], Mapping::Direct);
    /// cfg.ffn = vec![256; 2];
    /// assert_eq!(cfg.seq_len(), 16);
    /// cfg.position_scheme = PositionScheme::RelativeCausal;
    /// assert_eq!(cfg.seq_len(), 31);
    /// ```
    pub fn seq_len(&self) -> usize {
        self.position_scheme.receptive_field(self.layers() as u32, self.context as u32) as usize
    }

    /// Encodes one context into `out` (`seq_len()` rows): [`encode_context_into`] for learned
    /// positions, [`encode_causal_into`] (BOS, then the characters, padded with
    /// [`crate::PAD_ROW`]) for the causal window.
    pub fn encode_into(&self, context: &str, out: &mut [u32]) {
        match self.position_scheme {
            PositionScheme::LearnedAbsolute => encode_context_into(context, &self.normalization, &self.mapping, out),
            PositionScheme::RelativeCausal => encode_causal_into(context, &self.normalization, &self.mapping, out),
        }
    }

    /// Blocks `L`.
    pub fn layers(&self) -> usize {
        self.ffn.len()
    }

    /// Embedding rows `R`.
    pub fn rows(&self) -> usize {
        self.mapping.rows() as usize
    }

    /// Rows of the token embedding table: the [`ModelConfig::rows`] character rows, then the
    /// output memory's buckets.
    pub fn table_rows(&self) -> usize {
        self.rows() + self.memory.as_ref().map_or(0, |m| m.buckets as usize)
    }

    /// The table rows of the output memory for each sample of encoded `rows`
    /// ([`ModelConfig::encode_into`], `seq_len()` values a sample): one per order, after the
    /// character rows, sample by sample; empty without a memory.
    pub fn memory_rows(&self, rows: &[u32]) -> Vec<u32> {
        let Some(m) = &self.memory else { return Vec::new() };
        let s = self.seq_len();
        let base = self.rows() as u32;
        let mut out = vec![0u32; rows.len() / s.max(1) * m.orders.len()];
        for (sample, o) in rows.chunks_exact(s).zip(out.chunks_exact_mut(m.orders.len())) {
            m.rows(&sample[s - (laya_format::memory::MAX_ORDER as usize).min(s)..], o);
            o.iter_mut().for_each(|r| *r += base);
        }
        out
    }

    /// The table rows a forward pass over encoded `rows` reads: `rows` themselves, then
    /// [`ModelConfig::memory_rows`].
    pub fn gathered_rows<'a>(&self, rows: &'a [u32]) -> std::borrow::Cow<'a, [u32]> {
        match self.memory {
            None => std::borrow::Cow::Borrowed(rows),
            Some(_) => {
                let mut all = rows.to_vec();
                all.extend(self.memory_rows(rows));
                std::borrow::Cow::Owned(all)
            }
        }
    }

    /// Lexicon size `V`.
    pub fn vocab(&self) -> usize {
        self.words.len()
    }

    /// Checks the rules of format.md §4 that a model file must obey.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(TrainError::Config(m));
        if !(1..=256).contains(&self.context) {
            return bad(format!("context {} must be in 1..=256", self.context));
        }
        if self.heads == 0 || self.d_model < 32 || !self.d_model.is_multiple_of(32) || !self.d_model.is_multiple_of(self.heads) {
            return bad(format!("d_model {} must be a multiple of 32 (≥ 32) and of heads {}", self.d_model, self.heads));
        }
        if self.ffn.is_empty() || self.ffn.len() > 64 || self.ffn.iter().any(|&f| f == 0 || f % 32 != 0) {
            return bad(format!("ffn widths {:?}: 1..=64 blocks, each a positive multiple of 32", self.ffn));
        }
        if self.replace_classes == 0 || self.replace_classes > self.context + 1 {
            return bad(format!("replace_classes {} must be in 1..={}", self.replace_classes, self.context + 1));
        }
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return bad(format!("eps {} must be finite and positive", self.eps));
        }
        if self.words.is_empty() {
            return bad("the lexicon is empty".into());
        }
        if self.frequencies.len() != self.words.len() {
            return bad(format!("{} frequencies for {} words", self.frequencies.len(), self.words.len()));
        }
        let mut seen = std::collections::HashSet::new();
        for w in &self.words {
            let n = w.chars().count();
            if n == 0 || n > 64 || w.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return bad(format!("lexicon word {w:?} must have 1..=64 characters, no whitespace or control"));
            }
            if !seen.insert(w.as_str()) {
                return bad(format!("lexicon word {w:?} appears twice"));
            }
        }
        if let Some(c) = &self.word_class {
            laya_format::check_word_class(c, self.words.len()).map_err(|r| TrainError::Config(format!("word_class {r}")))?;
        }
        if let Some(m) = &self.memory {
            m.check().map_err(|r| TrainError::Config(format!("output memory: {r}")))?;
            if self.position_scheme != PositionScheme::RelativeCausal {
                return bad("an output memory needs the relative_causal position scheme".into());
            }
        }
        if let Mapping::Table(t) = &self.mapping {
            if t.windows(2).any(|p| p[0] >= p[1]) || t.first() == Some(&0) {
                return bad("table mapping must be strictly increasing and must not contain codepoint 0".into());
            }
        }
        Ok(())
    }
}

/// What the word head is trained to predict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Objective {
    /// Soft target over the shown words, the clicked one weighted `click_weight`, the rest `shown_weight`.
    ClickWeighted,
    /// Plain cross-entropy on the clicked word (ablation).
    Clicked,
}

/// Which of the other shown candidates join the click-weighted target. `TrainConfig::default()`
/// uses `SameReplace`; the enum's `Default`, `All`, is what a checkpoint written before this
/// setting existed was trained with, so resuming one keeps its target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShownScope {
    /// Every other shown in-lexicon word (the original behaviour).
    #[default]
    All,
    /// Only those with the clicked candidate's `replace`: alternatives for the same reading of
    /// the context. A bar shown mid-word often holds next words too (`replace` 0 after a typed
    /// character); the word head predicts the word being typed, so with `All` it learns to put
    /// mass on next words exactly where the person is in the middle of one.
    SameReplace,
}

/// Learning-rate decay after warm-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decay {
    /// Half-cosine from the peak to `min_lr_ratio · peak`.
    Cosine,
    /// Straight line from the peak to `min_lr_ratio · peak`.
    Linear,
    /// Stay at the peak.
    Constant,
}

/// Optimisation settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// Events per mini-batch.
    pub batch_size: usize,
    /// Maximum passes over the training events.
    pub epochs: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Steps of linear warm-up from 0 to `lr`.
    pub warmup_steps: usize,
    /// Shape of the decay after warm-up (over all `epochs`).
    pub decay: Decay,
    /// Final learning rate as a fraction of `lr`.
    pub min_lr_ratio: f64,
    /// AdamW β1.
    pub beta1: f64,
    /// AdamW β2.
    pub beta2: f64,
    /// AdamW ε.
    pub adam_eps: f64,
    /// Decoupled weight decay, applied to matrices only (not embeddings, norms or biases).
    pub weight_decay: f64,
    /// Clip the global gradient L2 norm to this value (0 disables).
    pub grad_clip: f64,
    /// Word-head objective.
    pub objective: Objective,
    /// Weight of the clicked word in the click-weighted target.
    pub click_weight: f32,
    /// Weight of every other shown in-lexicon word in the click-weighted target.
    pub shown_weight: f32,
    /// Which other shown words the click-weighted target includes.
    #[serde(default)]
    pub shown_scope: ShownScope,
    /// λ: total loss = word loss + λ · replace loss.
    pub replace_loss_weight: f32,
    /// Seed of the initialisation and of the shuffling.
    pub seed: u64,
    /// Report training progress every this many steps.
    pub log_every: usize,
    /// Stop after this many epochs without a better validation loss (0 disables).
    pub patience: usize,
    /// Match clicked and shown words to the lexicon case-insensitively
    /// ([`laya_format::fold_case`]): `The` at a sentence start is a click on `the`. Set for a
    /// model whose language ignores case ([`laya_format::ignores_case`]), as the runtime
    /// matches it.
    #[serde(default)]
    pub fold_case: bool,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            batch_size: 128,
            epochs: 10,
            lr: 2e-3,
            warmup_steps: 200,
            decay: Decay::Cosine,
            min_lr_ratio: 0.05,
            beta1: 0.9,
            beta2: 0.999,
            adam_eps: 1e-8,
            weight_decay: 0.01,
            grad_clip: 1.0,
            objective: Objective::ClickWeighted,
            click_weight: 3.0,
            shown_weight: 1.0,
            shown_scope: ShownScope::SameReplace,
            replace_loss_weight: 1.0,
            seed: 42,
            log_every: 50,
            patience: 2,
            fold_case: false,
        }
    }
}

impl TrainConfig {
    /// Checks ranges.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(TrainError::Config(m));
        if self.batch_size == 0 {
            return bad("batch_size must be positive".into());
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return bad(format!("lr {} must be positive", self.lr));
        }
        if !(0.0..1.0).contains(&self.beta1) || !(0.0..1.0).contains(&self.beta2) {
            return bad("beta1 and beta2 must be in [0, 1)".into());
        }
        if !(self.click_weight >= 0.0 && self.shown_weight >= 0.0 && self.replace_loss_weight >= 0.0) {
            return bad("click_weight, shown_weight and replace_loss_weight must be ≥ 0".into());
        }
        if !(0.0..=1.0).contains(&self.min_lr_ratio) {
            return bad("min_lr_ratio must be in [0, 1]".into());
        }
        Ok(())
    }
}
