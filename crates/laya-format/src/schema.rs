//! The Laya schema on top of the GGUF container, as types: keys (docs/format.md §4), the rules
//! that give a file its meaning (activation, positions, mapping, normalisation: §3–§5) and the
//! parsed model (§7). How a file is checked is in `validate`, the checksum (§6) in `checksum`.

use std::fmt;

use crate::error::FormatError;
use crate::strings::Strings;
use crate::types::GgmlType;

/// The `laya.format_version` this crate reads and writes.
pub const FORMAT_VERSION: u32 = 1;
/// The alignment Laya writes.
pub const LAYA_ALIGNMENT: u32 = 64;
/// Most words a lexicon may hold.
pub const MAX_WORDS: usize = 1_000_000;
/// Longest word, in Unicode scalar values.
pub const MAX_WORD_CHARS: usize = 64;
/// Name of the optional error-compensation tensor of a quantised embedding (docs/format.md §7).
pub const TOKEN_EMBD_COMP: &str = "token_embd_comp.weight";
/// The class head of a factorised word head (`[d, K]`; with `laya.lexicon.word_class`).
pub const OUTPUT_CLASS_W: &str = "output_class.weight";
/// Its bias (`[K]`).
pub const OUTPUT_CLASS_B: &str = "output_class.bias";
/// The output memory's table (with `laya.memory.*` only; docs/format.md §3 step 4).
pub const MEMORY_EMBD: &str = "memory_embd.weight";
/// Embedding rows that share one row of `token_embd_comp.weight`.
pub const COMP_GROUP_ROWS: u32 = 32;

/// The key names of docs/format.md §4.
pub mod keys {
    pub const ARCHITECTURE: &str = "general.architecture";
    pub const ALIGNMENT: &str = "general.alignment";
    pub const NAME: &str = "general.name";
    pub const FORMAT_VERSION: &str = "laya.format_version";
    pub const CONTEXT_LENGTH: &str = "laya.context_length";
    pub const EMBEDDING_LENGTH: &str = "laya.embedding_length";
    pub const BLOCK_COUNT: &str = "laya.block_count";
    pub const HEAD_COUNT: &str = "laya.attention.head_count";
    pub const LAYER_NORM_EPSILON: &str = "laya.attention.layer_norm_epsilon";
    pub const FEED_FORWARD_LENGTH: &str = "laya.feed_forward_length";
    pub const ACTIVATION: &str = "laya.activation";
    pub const POSITION_SCHEME: &str = "laya.position_scheme";
    pub const EMBEDDING_ROWS: &str = "laya.embedding.rows";
    pub const EMBEDDING_MAPPING: &str = "laya.embedding.mapping";
    pub const EMBEDDING_CODEPOINTS: &str = "laya.embedding.codepoints";
    pub const REPLACE_CLASSES: &str = "laya.replace_classes";
    pub const LEXICON_WORDS: &str = "laya.lexicon.words";
    pub const LEXICON_FREQUENCIES: &str = "laya.lexicon.frequencies";
    pub const LEXICON_DICT_FREQUENCIES: &str = "laya.lexicon.dict_frequencies";
    pub const LEXICON_WORD_CLASS: &str = "laya.lexicon.word_class";
    pub const MEMORY_BUCKETS: &str = "laya.memory.buckets";
    pub const MEMORY_ORDERS: &str = "laya.memory.orders";
    pub const NORMALIZATION: &str = "laya.normalization";
    pub const PROVENANCE_LANGUAGE: &str = "laya.provenance.language";
    pub const PROVENANCE_TRAINING_DATA: &str = "laya.provenance.training_data";
    pub const PROVENANCE_CREATED: &str = "laya.provenance.created";
    pub const PROVENANCE_TOOL: &str = "laya.provenance.tool";
    pub const CHECKSUM: &str = "laya.checksum";

    /// Every `laya.*` key of format version 1; any other `laya.*` key is refused.
    pub const LAYA_KEYS: [&str; 25] = [
        FORMAT_VERSION,
        CONTEXT_LENGTH,
        EMBEDDING_LENGTH,
        BLOCK_COUNT,
        HEAD_COUNT,
        LAYER_NORM_EPSILON,
        FEED_FORWARD_LENGTH,
        ACTIVATION,
        POSITION_SCHEME,
        EMBEDDING_ROWS,
        EMBEDDING_MAPPING,
        EMBEDDING_CODEPOINTS,
        REPLACE_CLASSES,
        LEXICON_WORDS,
        LEXICON_FREQUENCIES,
        LEXICON_DICT_FREQUENCIES,
        LEXICON_WORD_CLASS,
        MEMORY_BUCKETS,
        MEMORY_ORDERS,
        NORMALIZATION,
        PROVENANCE_LANGUAGE,
        PROVENANCE_TRAINING_DATA,
        PROVENANCE_CREATED,
        PROVENANCE_TOOL,
        CHECKSUM,
    ];
}

/// The feed-forward activation (`laya.activation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³)))`
    GeluTanh,
    Relu,
}

impl Activation {
    pub fn name(self) -> &'static str {
        match self {
            Activation::GeluTanh => "gelu_tanh",
            Activation::Relu => "relu",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "gelu_tanh" => Some(Activation::GeluTanh),
            "relu" => Some(Activation::Relu),
            _ => None,
        }
    }
}

/// How positions are encoded (`laya.position_scheme`, docs/format.md §3).
///
/// ```
/// use laya_format::PositionScheme;
/// let s = PositionScheme::from_name("relative_causal").unwrap();
/// assert_eq!(s.name(), "relative_causal");
/// // 2 blocks, window 16: the last 31 tokens decide the output.
/// assert_eq!(s.receptive_field(2, 16), 31);
/// assert_eq!(PositionScheme::LearnedAbsolute.receptive_field(2, 16), 16);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PositionScheme {
    /// One learned `pos_embd` row per position of a right-aligned window of `T` values,
    /// bidirectional attention. One new character moves every other one: nothing carries over
    /// from one keystroke to the next.
    LearnedAbsolute,
    /// No position embedding; causal attention over a sliding window of `T` tokens with a
    /// learned bias per block, head and distance (`pos_embd.weight` is `[T, L·H]`). Every
    /// token's keys and values depend only on what precedes it, so a runtime can keep them
    /// from one keystroke to the next and compute only the new characters.
    RelativeCausal,
}

impl PositionScheme {
    pub fn name(self) -> &'static str {
        match self {
            PositionScheme::LearnedAbsolute => "learned_absolute",
            PositionScheme::RelativeCausal => "relative_causal",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "learned_absolute" => Some(PositionScheme::LearnedAbsolute),
            "relative_causal" => Some(PositionScheme::RelativeCausal),
            _ => None,
        }
    }

    /// How many of the last tokens can change the output of a model with `blocks` blocks and
    /// `context_length` `T`: `T` for learned positions, `L·(T−1)+1` for the causal window
    /// (each block reaches `T−1` tokens further back).
    pub fn receptive_field(self, blocks: u32, context_length: u32) -> u32 {
        match self {
            PositionScheme::LearnedAbsolute => context_length,
            PositionScheme::RelativeCausal => blocks * context_length.saturating_sub(1) + 1,
        }
    }
}

/// Codepoint → embedding row (`laya.embedding.mapping`, docs/format.md §4).
///
/// ```
/// use laya_format::Mapping;
/// assert_eq!(Mapping::Direct.row('中' as u32, 65536), 0x4E2D);
/// assert_eq!(Mapping::Direct.row('😀' as u32, 65536), 0xD800 + (0x1F600 - 0x10000) % 0x800);
/// let table = Mapping::Table(vec!['a' as u32, 'b' as u32, '中' as u32]);
/// assert_eq!(table.row(0, 5), 0); // padding
/// assert_eq!(table.row('b' as u32, 5), 3);
/// assert_eq!(table.row('z' as u32, 5), 1); // unknown
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mapping {
    /// BMP values use their own row; astral values share the 2,048 surrogate rows.
    Direct,
    /// Sorted codepoints with their own row (`j + 2`); 0 is padding, 1 unknown.
    Table(Vec<u32>),
}

impl Mapping {
    pub fn name(&self) -> &'static str {
        match self {
            Mapping::Direct => "direct",
            Mapping::Table(_) => "table",
        }
    }

    /// The number of embedding rows this mapping addresses: 65,536 for `direct`, the table's
    /// length plus the padding and unknown rows for `table`.
    ///
    /// ```
    /// use laya_format::Mapping;
    /// assert_eq!(Mapping::Direct.rows(), 65536);
    /// assert_eq!(Mapping::Table(vec![97, 98]).rows(), 4);
    /// ```
    pub fn rows(&self) -> u32 {
        match self {
            Mapping::Direct => 0x10000,
            Mapping::Table(t) => (t.len() as u32).saturating_add(2),
        }
    }

    /// The embedding row of scalar value `cp` in a table of `rows` rows. Allocation-free.
    /// The result is always `< rows` (for `rows > 0`): a value the mapping would place beyond the
    /// table, which a validated file cannot produce, falls back to the unknown row 1.
    #[inline]
    pub fn row(&self, cp: u32, rows: u32) -> u32 {
        let r = match self {
            Mapping::Direct => {
                if cp < 0x10000 {
                    cp
                } else {
                    0xD800 + (cp - 0x10000) % 0x800
                }
            }
            Mapping::Table(table) => {
                if cp == 0 {
                    0
                } else {
                    match table.binary_search(&cp) {
                        Ok(j) => j as u32 + 2,
                        Err(_) => 1,
                    }
                }
            }
        };
        if r < rows {
            r
        } else {
            u32::from(rows > 1)
        }
    }
}

/// One normalisation rule (`laya.normalization`, docs/format.md §5).
///
/// ```
/// use laya_format::NormRule;
/// assert_eq!(NormRule::FullwidthAscii.apply('１'), '1');
/// assert_eq!(NormRule::FullwidthAscii.apply('\u{3000}'), ' ');
/// assert_eq!(NormRule::LowercaseAscii.apply('Q'), 'q');
/// assert_eq!(NormRule::LowercaseAscii.apply('Ä'), 'Ä');
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormRule {
    FullwidthAscii,
    LowercaseAscii,
}

impl NormRule {
    pub fn name(self) -> &'static str {
        match self {
            NormRule::FullwidthAscii => "fullwidth_ascii",
            NormRule::LowercaseAscii => "lowercase_ascii",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "fullwidth_ascii" => Some(NormRule::FullwidthAscii),
            "lowercase_ascii" => Some(NormRule::LowercaseAscii),
            _ => None,
        }
    }

    /// Maps one scalar value (one in, one out, so character counts are preserved).
    #[inline]
    pub fn apply(self, c: char) -> char {
        match self {
            NormRule::FullwidthAscii => match c {
                '\u{FF01}'..='\u{FF5E}' => char::from_u32(c as u32 - 0xFF01 + 0x21).unwrap_or(c),
                '\u{3000}' => ' ',
                _ => c,
            },
            NormRule::LowercaseAscii => c.to_ascii_lowercase(),
        }
    }

    /// Applies `rules` in order to `c`.
    #[inline]
    pub fn apply_all(rules: &[NormRule], c: char) -> char {
        rules.iter().fold(c, |c, r| r.apply(c))
    }
}

/// Applies `rules` in order to every scalar value of `text` (as many scalar values out as in, so
/// a `replace` count computed on the result is valid against `text`).
///
/// ```
/// use laya_format::{normalize, NormRule};
/// assert_eq!(normalize("１２月ＡＢ，", &[NormRule::FullwidthAscii, NormRule::LowercaseAscii]), "12月ab,");
/// ```
pub fn normalize(text: &str, rules: &[NormRule]) -> String {
    text.chars().map(|c| NormRule::apply_all(rules, c)).collect()
}

/// The hyper-parameters of the network (docs/format.md §3–§4).
#[derive(Debug, Clone, PartialEq)]
pub struct HParams {
    pub context_length: u32,
    pub embedding_length: u32,
    pub block_count: u32,
    pub head_count: u32,
    pub layer_norm_epsilon: f32,
    pub feed_forward_length: Vec<u32>,
    pub activation: Activation,
    pub position_scheme: PositionScheme,
    pub embedding_rows: u32,
    pub mapping: Mapping,
    pub replace_classes: u32,
    /// The output memory (`laya.memory.*`), `relative_causal` models only.
    pub memory: Option<crate::memory::Memory>,
}

impl HParams {
    /// `dh = d / H`.
    pub fn head_dim(&self) -> u32 {
        self.embedding_length.checked_div(self.head_count).unwrap_or(0)
    }
}

/// Where a model came from (`laya.provenance.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    pub language: String,
    pub training_data: String,
    pub created: String,
    pub tool: Option<String>,
}

/// Primary language subtags of scripts written without spaces between words (Chinese,
/// Japanese, Thai, Lao, Khmer, Burmese, Tibetan).
const UNSPACED_LANGUAGES: [&str; 9] = ["zh", "yue", "wuu", "ja", "th", "lo", "km", "my", "bo"];

/// Whether `language` (a BCP 47 tag, `laya.provenance.language`) separates words with spaces.
/// In such a language a context that ends in a letter, a digit or an apostrophe is inside a
/// word, so the runtime offers completions there and next words only after a space
/// (docs/format.md §3 step 6). An empty tag leaves that rule off; any other tag counts as
/// spaced unless its primary subtag is one of the unspaced languages.
///
/// ```
/// assert!(laya_format::separates_words("en"));
/// assert!(laya_format::separates_words("en-GB"));
/// assert!(!laya_format::separates_words("zh"));
/// assert!(!laya_format::separates_words("zh-Hant"));
/// assert!(!laya_format::separates_words(""));
/// ```
pub fn separates_words(language: &str) -> bool {
    let primary = language.split(['-', '_']).next().unwrap_or("").trim().to_ascii_lowercase();
    !primary.is_empty() && !UNSPACED_LANGUAGES.contains(&primary.as_str())
}

/// Everything in a model file except the tensors.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelMeta {
    pub name: String,
    pub hparams: HParams,
    /// The lexicon: word `i` is row `i` of the word head.
    pub words: Strings,
    pub frequencies: Vec<u32>,
    /// Optional: each word's frequency in a general-purpose dictionary (0 = not in it), the
    /// genre-neutral prior the runtime ranks completions with (docs/format.md §3 step 6).
    pub dict_frequencies: Option<Vec<u32>>,
    /// Optional: the class of each word when the word head is factorised,
    /// `P(w) = P(class(w)) · P(w | class(w))` (docs/format.md §3 step 5). Classes are numbered
    /// `0..K` and none is empty; `K` is [`ModelMeta::word_classes`].
    pub word_class: Option<Vec<u32>>,
    pub normalization: Vec<NormRule>,
    pub provenance: Provenance,
}

impl ModelMeta {
    /// `V`, the lexicon size.
    pub fn vocab_size(&self) -> usize {
        self.words.len()
    }

    /// `K`, the classes of a factorised word head; 0 for a flat head.
    pub fn word_classes(&self) -> usize {
        self.word_class.as_deref().map_or(0, class_count)
    }
}

/// A validated tensor borrowing its bytes from the file.
#[derive(Clone, PartialEq)]
pub struct TensorRef<'a> {
    pub name: String,
    pub ty: GgmlType,
    /// Element counts, `ne[0]` first (for a matrix: `[in, out]`).
    pub ne: Vec<u64>,
    /// Exactly the tensor's bytes; starts at an offset of the file that is a multiple of the
    /// file's alignment.
    pub data: &'a [u8],
}

impl fmt::Debug for TensorRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TensorRef")
            .field("name", &self.name)
            .field("ty", &self.ty)
            .field("ne", &self.ne)
            .field("bytes", &self.data.len())
            .finish()
    }
}

impl TensorRef<'_> {
    /// Elements per row (`ne[0]`).
    pub fn row_len(&self) -> usize {
        self.ne.first().copied().unwrap_or(0) as usize
    }

    /// Number of rows (product of `ne[1..]`; 1 for a vector).
    pub fn n_rows(&self) -> usize {
        self.ne.iter().skip(1).fold(1u64, |a, &n| a.saturating_mul(n)) as usize
    }

    /// Total elements.
    pub fn n_elements(&self) -> usize {
        self.ne.iter().fold(1u64, |a, &n| a.saturating_mul(n)) as usize
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.ty.row_bytes(self.row_len()).unwrap_or(0)
    }

    /// The bytes of row `i`, if it exists.
    pub fn row(&self, i: usize) -> Option<&[u8]> {
        let rb = self.row_bytes();
        self.data.get(i.checked_mul(rb)?..i.checked_add(1)?.checked_mul(rb)?)
    }

    /// An owned copy, ready for [`crate::write_model`] (tools that rewrite a file keep the
    /// tensors they do not change this way).
    ///
    /// ```
    /// use laya_format::{testing, write_model, GgmlType, LayaFile, TensorData};
    /// let (meta, tensors) = testing::random_model(&testing::TinyConfig::small(), 2, GgmlType::Q8_0);
    /// let bytes = write_model(&meta, &tensors)?;
    /// let file = LayaFile::parse(&bytes)?;
    /// let copied: Vec<TensorData> = file.tensors().into_iter().map(|t| t.to_owned_data()).collect();
    /// assert_eq!(write_model(&file.meta, &copied)?, bytes);
    /// # Ok::<(), laya_format::FormatError>(())
    /// ```
    pub fn to_owned_data(&self) -> crate::TensorData {
        crate::TensorData { name: self.name.clone(), ty: self.ty, ne: self.ne.clone(), data: self.data.to_vec() }
    }

    /// All values decoded to f32 (row-major along `ne[0]`).
    pub fn to_f32(&self) -> Result<Vec<f32>, FormatError> {
        crate::quant::dequantize(self.data, self.ty, self.n_elements())
    }
}

/// The tensors of one block.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerTensors<'a> {
    pub attn_norm_w: TensorRef<'a>,
    pub attn_norm_b: TensorRef<'a>,
    pub attn_q_w: TensorRef<'a>,
    pub attn_q_b: TensorRef<'a>,
    pub attn_k_w: TensorRef<'a>,
    pub attn_k_b: TensorRef<'a>,
    pub attn_v_w: TensorRef<'a>,
    pub attn_v_b: TensorRef<'a>,
    pub attn_out_w: TensorRef<'a>,
    pub attn_out_b: TensorRef<'a>,
    pub ffn_norm_w: TensorRef<'a>,
    pub ffn_norm_b: TensorRef<'a>,
    pub ffn_up_w: TensorRef<'a>,
    pub ffn_up_b: TensorRef<'a>,
    pub ffn_down_w: TensorRef<'a>,
    pub ffn_down_b: TensorRef<'a>,
}

impl<'a> LayerTensors<'a> {
    /// The sixteen tensors in canonical order.
    pub fn all(&self) -> [&TensorRef<'a>; 16] {
        [
            &self.attn_norm_w,
            &self.attn_norm_b,
            &self.attn_q_w,
            &self.attn_q_b,
            &self.attn_k_w,
            &self.attn_k_b,
            &self.attn_v_w,
            &self.attn_v_b,
            &self.attn_out_w,
            &self.attn_out_b,
            &self.ffn_norm_w,
            &self.ffn_norm_b,
            &self.ffn_up_w,
            &self.ffn_up_b,
            &self.ffn_down_w,
            &self.ffn_down_b,
        ]
    }
}

/// A fully validated Laya model borrowing the file bytes.
///
/// ```
/// use laya_format::{testing, write_model, GgmlType, LayaFile};
/// let (meta, tensors) = testing::random_model(&testing::TinyConfig::small(), 3, GgmlType::Q4_0);
/// let bytes = write_model(&meta, &tensors)?;
/// let model = LayaFile::parse(&bytes)?;
/// assert_eq!(model.layers.len() as u32, model.meta.hparams.block_count);
/// assert_eq!(model.output_w.ne, vec![32, model.meta.words.len() as u64]);
/// assert!(model.summary().contains("checksum"));
/// # Ok::<(), laya_format::FormatError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct LayaFile<'a> {
    pub meta: ModelMeta,
    pub token_embd: TensorRef<'a>,
    /// `token_embd_comp.weight`: the mean quantisation error of each group of
    /// [`COMP_GROUP_ROWS`] embedding rows, per column, added back at lookup. Present only with
    /// a quantised `token_embd`.
    pub token_embd_comp: Option<TensorRef<'a>>,
    pub pos_embd: TensorRef<'a>,
    pub layers: Vec<LayerTensors<'a>>,
    pub output_norm_w: TensorRef<'a>,
    pub output_norm_b: TensorRef<'a>,
    pub output_w: TensorRef<'a>,
    pub output_b: TensorRef<'a>,
    pub replace_w: TensorRef<'a>,
    pub replace_b: TensorRef<'a>,
    /// `output_class.weight` and `output_class.bias`: the class head of a factorised word head
    /// (present exactly when `meta.word_class` is).
    pub output_class: Option<(TensorRef<'a>, TensorRef<'a>)>,
    /// `memory_embd.weight`, `[d, buckets]`: the output memory's rows (present exactly when
    /// `meta.hparams.memory` is).
    pub memory_embd: Option<TensorRef<'a>>,
    /// The word trigram beside the network (docs/format.md §8), when the file has one.
    pub ngram: Option<crate::ngram::NgramTensors<'a>>,
    /// The verified `laya.checksum`.
    pub checksum: u64,
    /// The lexicon's word ids in byte order ([`crate::lexicon_order`]), a by-product of
    /// validation; `None` when that is the file's order (as Laya's tools write lexicons).
    pub word_order: Option<Vec<u32>>,
    pub file_len: usize,
    /// `general.alignment`.
    pub alignment: u32,
}

/// `K` for a class map: one more than its largest class (0 for an empty map).
pub(crate) fn class_count(c: &[u32]) -> usize {
    c.iter().max().map_or(0, |&m| m as usize + 1)
}
