//! Validation: how a container becomes a [`LayaFile`] — every key, the lexicon and the tensor
//! table checked against docs/format.md before anything reads them.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::error::FormatError;
use crate::gguf::{Array, GgufFile, TensorInfo, Value};
use crate::strings::Strings;
use crate::types::GgmlType;

use crate::checksum::{checksum_at, checksum_slot};
use crate::schema::*;

mod lexicon;
use lexicon::checked_order;
pub use lexicon::{check_lexicon, check_word_class, checked_lexicon_order, lexicon_order};

/// Typed access to the keys of a parsed container.
struct Keys<'f, 'a> {
    file: &'f GgufFile<'a>,
}

impl Keys<'_, '_> {
    fn req(&self, key: &str) -> Result<&Value, FormatError> {
        self.file.get(key).ok_or_else(|| FormatError::MissingKey(key.to_string()))
    }

    fn wrong(key: &str, expected: &str, v: &Value) -> FormatError {
        FormatError::WrongKeyType { key: key.into(), expected: expected.into(), found: v.type_name() }
    }

    fn u32(&self, key: &str) -> Result<u32, FormatError> {
        let v = self.req(key)?;
        v.as_u32().ok_or_else(|| Self::wrong(key, "u32", v))
    }

    fn f32(&self, key: &str) -> Result<f32, FormatError> {
        let v = self.req(key)?;
        v.as_f32().ok_or_else(|| Self::wrong(key, "f32", v))
    }

    fn str(&self, key: &str) -> Result<&str, FormatError> {
        let v = self.req(key)?;
        v.as_str().ok_or_else(|| Self::wrong(key, "string", v))
    }

    fn opt_str(&self, key: &str) -> Result<Option<&str>, FormatError> {
        match self.file.get(key) {
            None => Ok(None),
            Some(v) => v.as_str().map(Some).ok_or_else(|| Self::wrong(key, "string", v)),
        }
    }

    fn u32s(&self, key: &str) -> Result<&[u32], FormatError> {
        let v = self.req(key)?;
        v.as_u32_array().ok_or_else(|| Self::wrong(key, "u32 array", v))
    }

    /// Whether `key` is present, decoded or counted ([`GgufFile::parse_static_counting`]).
    fn has(&self, key: &str) -> bool {
        self.file.get(key).is_some() || self.file.counted.iter().any(|(k, _)| k == key)
    }

    /// The length of the `u32` array under `key`, decoded or only counted.
    fn u32s_len(&self, key: &str) -> Result<usize, FormatError> {
        match self.file.counted.iter().find(|(k, _)| k == key) {
            Some(&(_, n)) => Ok(n as usize),
            None => self.u32s(key).map(<[u32]>::len),
        }
    }

    fn strings(&self, key: &str) -> Result<&Strings, FormatError> {
        let v = self.req(key)?;
        v.as_string_array().ok_or_else(|| Self::wrong(key, "string array", v))
    }
}

fn invalid(key: &str, reason: impl Into<String>) -> FormatError {
    FormatError::InvalidValue { key: key.to_string(), reason: reason.into() }
}

fn range_u32(k: &Keys<'_, '_>, key: &str, lo: u32, hi: u32) -> Result<u32, FormatError> {
    let v = k.u32(key)?;
    if v < lo || v > hi {
        return Err(invalid(key, format!("{v} is outside {lo}..={hi}")));
    }
    Ok(v)
}

/// Reads and checks every key; returns the metadata and the alignment.
fn parse_meta(file: &GgufFile<'_>, contents: Contents) -> Result<(ModelMeta, u32, Option<Vec<u32>>), FormatError> {
    let k = Keys { file };

    let alignment = k.u32(keys::ALIGNMENT)?;
    if !alignment.is_power_of_two() || !(8..=4096).contains(&alignment) {
        return Err(invalid(keys::ALIGNMENT, format!("{alignment} is not a power of two in 8..=4096")));
    }
    let name = k.str(keys::NAME)?.to_string();

    let context_length = range_u32(&k, keys::CONTEXT_LENGTH, 1, 256)?;
    let embedding_length = range_u32(&k, keys::EMBEDDING_LENGTH, 32, 4096)?;
    if embedding_length % 32 != 0 {
        return Err(invalid(keys::EMBEDDING_LENGTH, format!("{embedding_length} is not a multiple of 32")));
    }
    let block_count = range_u32(&k, keys::BLOCK_COUNT, 1, 64)?;
    let head_count = range_u32(&k, keys::HEAD_COUNT, 1, embedding_length)?;
    if embedding_length % head_count != 0 {
        return Err(invalid(keys::HEAD_COUNT, format!("{head_count} does not divide laya.embedding_length = {embedding_length}")));
    }
    let layer_norm_epsilon = k.f32(keys::LAYER_NORM_EPSILON)?;
    if !(layer_norm_epsilon.is_finite() && layer_norm_epsilon > 0.0) {
        return Err(invalid(keys::LAYER_NORM_EPSILON, format!("{layer_norm_epsilon} is not finite and > 0")));
    }
    let ffn = k.u32s(keys::FEED_FORWARD_LENGTH)?;
    if ffn.len() != block_count as usize {
        return Err(invalid(keys::FEED_FORWARD_LENGTH, format!("has {} entries but laya.block_count = {block_count}", ffn.len())));
    }
    if let Some((l, f)) = ffn.iter().enumerate().find(|(_, &f)| f == 0 || f % 32 != 0) {
        return Err(invalid(keys::FEED_FORWARD_LENGTH, format!("entry {l} is {f}; widths must be positive multiples of 32")));
    }
    let activation_name = k.str(keys::ACTIVATION)?;
    let activation = Activation::from_name(activation_name)
        .ok_or_else(|| invalid(keys::ACTIVATION, format!("'{activation_name}' is not gelu_tanh or relu")))?;
    let pos_name = k.str(keys::POSITION_SCHEME)?;
    let position_scheme = PositionScheme::from_name(pos_name)
        .ok_or_else(|| invalid(keys::POSITION_SCHEME, format!("'{pos_name}' is not learned_absolute or relative_causal")))?;

    let embedding_rows = k.u32(keys::EMBEDDING_ROWS)?;
    let mapping_name = k.str(keys::EMBEDDING_MAPPING)?;
    let mapping = match mapping_name {
        "direct" => {
            if embedding_rows != 65536 {
                return Err(invalid(keys::EMBEDDING_ROWS, format!("{embedding_rows} rows, but the direct mapping needs 65536")));
            }
            if file.get(keys::EMBEDDING_CODEPOINTS).is_some() {
                return Err(invalid(keys::EMBEDDING_CODEPOINTS, "present, but laya.embedding.mapping is direct (only table uses it)"));
            }
            Mapping::Direct
        }
        "table" => {
            let cps = k.u32s(keys::EMBEDDING_CODEPOINTS)?;
            if embedding_rows < 2 || cps.len() as u64 != u64::from(embedding_rows) - 2 {
                return Err(invalid(
                    keys::EMBEDDING_CODEPOINTS,
                    format!("has {} entries but laya.embedding.rows = {embedding_rows} requires rows − 2", cps.len()),
                ));
            }
            for (j, &cp) in cps.iter().enumerate() {
                if cp == 0 || char::from_u32(cp).is_none() {
                    return Err(invalid(keys::EMBEDDING_CODEPOINTS, format!("entry {j} = {cp:#x} is not a non-zero Unicode scalar value")));
                }
                if j > 0 && cps[j - 1] >= cp {
                    return Err(invalid(
                        keys::EMBEDDING_CODEPOINTS,
                        format!("entry {j} = {cp:#x} does not follow {:#x} in strictly increasing order", cps[j - 1]),
                    ));
                }
            }
            Mapping::Table(cps.to_vec())
        }
        other => {
            return Err(invalid(keys::EMBEDDING_MAPPING, format!("'{other}' is not direct or table")));
        }
    };
    let replace_classes = range_u32(&k, keys::REPLACE_CLASSES, 1, context_length + 1)?;
    let memory = match (k.has(keys::MEMORY_BUCKETS), k.has(keys::MEMORY_ORDERS)) {
        (false, false) => None,
        (true, false) => return Err(invalid(keys::MEMORY_BUCKETS, format!("present without {}", keys::MEMORY_ORDERS))),
        (false, true) => return Err(invalid(keys::MEMORY_ORDERS, format!("present without {}", keys::MEMORY_BUCKETS))),
        (true, true) => {
            let m = crate::memory::Memory { buckets: k.u32(keys::MEMORY_BUCKETS)?, orders: k.u32s(keys::MEMORY_ORDERS)?.to_vec() };
            m.check().map_err(|r| invalid(keys::MEMORY_ORDERS, r))?;
            if position_scheme != PositionScheme::RelativeCausal {
                return Err(invalid(keys::MEMORY_BUCKETS, "an output memory needs laya.position_scheme = relative_causal"));
            }
            Some(m)
        }
    };

    let words = k.strings(keys::LEXICON_WORDS)?;
    let word_order = checked_order(words, contents)?;
    let per_word = |key: &str| -> Result<(), FormatError> {
        match k.u32s_len(key)? {
            n if n == words.len() => Ok(()),
            n => Err(invalid(key, format!("has {n} entries but the lexicon has {} words", words.len()))),
        }
    };
    per_word(keys::LEXICON_FREQUENCIES)?;
    // Moved out of the container by the caller, as the words are.
    let dict_frequencies = match k.has(keys::LEXICON_DICT_FREQUENCIES) {
        false => None,
        true => per_word(keys::LEXICON_DICT_FREQUENCIES).map(|()| Some(Vec::new()))?,
    };
    let word_class = match (k.has(keys::LEXICON_WORD_CLASS), contents) {
        (false, _) => None,
        (true, Contents::Indexed) => per_word(keys::LEXICON_WORD_CLASS).map(|()| Some(Vec::new()))?,
        (true, _) => {
            let c = k.u32s(keys::LEXICON_WORD_CLASS)?;
            check_word_class(c, words.len()).map_err(|r| invalid(keys::LEXICON_WORD_CLASS, r))?;
            Some(Vec::new())
        }
    };
    let normalization = k
        .strings(keys::NORMALIZATION)?
        .iter()
        .map(|s| {
            NormRule::from_name(s).ok_or_else(|| {
                invalid(
                    keys::NORMALIZATION,
                    format!("unknown rule '{s}' (known: fullwidth_ascii, lowercase_ascii); a newer runtime may be needed"),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let provenance = Provenance {
        language: k.str(keys::PROVENANCE_LANGUAGE)?.to_string(),
        training_data: k.str(keys::PROVENANCE_TRAINING_DATA)?.to_string(),
        created: k.str(keys::PROVENANCE_CREATED)?.to_string(),
        tool: k.opt_str(keys::PROVENANCE_TOOL)?.map(str::to_string),
    };

    let hparams = HParams {
        context_length,
        embedding_length,
        block_count,
        head_count,
        layer_norm_epsilon,
        feed_forward_length: ffn.to_vec(),
        activation,
        position_scheme,
        embedding_rows,
        mapping,
        replace_classes,
        memory,
    };
    let meta = ModelMeta {
        name,
        hparams,
        // Filled by the caller, which moves the (possibly large) lexicon and its per-word
        // arrays out of the container rather than copying them.
        words: Strings::new(),
        frequencies: Vec::new(),
        dict_frequencies,
        word_class,
        normalization,
        provenance,
    };
    Ok((meta, alignment, word_order))
}

/// Moves a string array out of the container (already validated by `parse_meta`).
fn take_strings(file: &mut GgufFile<'_>, key: &str) -> Strings {
    match file.kv.iter_mut().find(|(k, _)| k == key) {
        Some((_, Value::Array(Array::String(v)))) => std::mem::take(v),
        _ => Strings::new(),
    }
}

/// Moves a `u32` array out of the container (already validated by `parse_meta`); empty when
/// the key is absent.
fn take_u32s(file: &mut GgufFile<'_>, key: &str) -> Vec<u32> {
    match file.kv.iter_mut().find(|(k, _)| k == key) {
        Some((_, Value::Array(Array::U32(v)))) => std::mem::take(v),
        _ => Vec::new(),
    }
}

const MATRIX_TYPES: &[GgmlType] = &[GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1];
const FLOAT_TYPES: &[GgmlType] = &[GgmlType::F32, GgmlType::F16, GgmlType::BF16];
const F32_ONLY: &[GgmlType] = &[GgmlType::F32];
const COMP_TYPES: &[GgmlType] = &[GgmlType::F32, GgmlType::F16];

/// One row of the §7 table, instantiated for a given set of hyper-parameters.
struct TensorSpec {
    name: String,
    ne: Vec<u64>,
    allowed: &'static [GgmlType],
    /// Norms and biases: must be finite.
    finite: bool,
    /// Which keys fix the shape, for messages.
    rule: String,
    /// May be absent (`token_embd_comp.weight`).
    optional: bool,
}

/// Block tensor name suffixes in canonical order.
const BLOCK_TENSORS: [&str; 16] = [
    "attn_norm.weight",
    "attn_norm.bias",
    "attn_q.weight",
    "attn_q.bias",
    "attn_k.weight",
    "attn_k.bias",
    "attn_v.weight",
    "attn_v.bias",
    "attn_output.weight",
    "attn_output.bias",
    "ffn_norm.weight",
    "ffn_norm.bias",
    "ffn_up.weight",
    "ffn_up.bias",
    "ffn_down.weight",
    "ffn_down.bias",
];

/// The tensors a model with these hyper-parameters and `v` words must have, canonical order.
fn tensor_specs(h: &HParams, v: u64, k: u64) -> Vec<TensorSpec> {
    let d = u64::from(h.embedding_length);
    let dr = format!("laya.embedding_length = {d}");
    let spec = |name: String, ne: Vec<u64>, allowed, finite, rule: String| TensorSpec { name, ne, allowed, finite, rule, optional: false };
    let rows = u64::from(h.embedding_rows);
    let comp_rows = rows.div_ceil(u64::from(COMP_GROUP_ROWS));
    let mut out = vec![
        spec(
            "token_embd.weight".into(),
            vec![d, u64::from(h.embedding_rows)],
            MATRIX_TYPES,
            false,
            format!("{dr} and laya.embedding.rows = {}", h.embedding_rows),
        ),
        TensorSpec {
            optional: true,
            ..spec(
                TOKEN_EMBD_COMP.into(),
                vec![d, comp_rows],
                COMP_TYPES,
                true,
                format!(
                    "{dr} and ceil(laya.embedding.rows / {COMP_GROUP_ROWS}) = ceil({rows} / {COMP_GROUP_ROWS})"
                ),
            )
        },
        match h.position_scheme {
            PositionScheme::LearnedAbsolute => spec(
                "pos_embd.weight".into(),
                vec![d, u64::from(h.context_length)],
                FLOAT_TYPES,
                false,
                format!("{dr} and laya.context_length = {}", h.context_length),
            ),
            // One bias per (block, head) row and distance column; added to attention scores,
            // so it must be finite.
            PositionScheme::RelativeCausal => spec(
                "pos_embd.weight".into(),
                vec![u64::from(h.context_length), u64::from(h.block_count) * u64::from(h.head_count)],
                FLOAT_TYPES,
                true,
                format!(
                    "laya.position_scheme = relative_causal: laya.context_length = {} by laya.block_count · laya.attention.head_count = {}·{}",
                    h.context_length, h.block_count, h.head_count
                ),
            ),
        },
    ];
    for (l, &f) in h.feed_forward_length.iter().enumerate() {
        let f = u64::from(f);
        let fr = format!("{dr} and laya.feed_forward_length[{l}] = {f}");
        for suffix in BLOCK_TENSORS {
            let name = format!("blk.{l}.{suffix}");
            let s = match suffix {
                "ffn_up.weight" => spec(name, vec![d, f], MATRIX_TYPES, false, fr.clone()),
                "ffn_up.bias" => spec(name, vec![f], F32_ONLY, true, format!("laya.feed_forward_length[{l}] = {f}")),
                "ffn_down.weight" => spec(name, vec![f, d], MATRIX_TYPES, false, fr.clone()),
                s if s.ends_with("norm.weight") || s.ends_with(".bias") => spec(name, vec![d], F32_ONLY, true, dr.clone()),
                _ => spec(name, vec![d, d], MATRIX_TYPES, false, dr.clone()),
            };
            out.push(s);
        }
    }
    let c = u64::from(h.replace_classes);
    out.extend([
        spec("output_norm.weight".into(), vec![d], F32_ONLY, true, dr.clone()),
        spec("output_norm.bias".into(), vec![d], F32_ONLY, true, dr.clone()),
        spec("output.weight".into(), vec![d, v], MATRIX_TYPES, false, format!("{dr} and the lexicon size {v}")),
        spec("output.bias".into(), vec![v], F32_ONLY, true, format!("the lexicon size {v}")),
        spec("replace.weight".into(), vec![d, c], FLOAT_TYPES, false, format!("{dr} and laya.replace_classes = {c}")),
        spec("replace.bias".into(), vec![c], F32_ONLY, true, format!("laya.replace_classes = {c}")),
    ]);
    if let Some(m) = &h.memory {
        let rule = format!("{dr} and laya.memory.buckets = {}", m.buckets);
        out.push(spec(MEMORY_EMBD.into(), vec![d, u64::from(m.buckets)], MATRIX_TYPES, false, rule));
    }
    if k > 0 {
        let kr = format!("the {k} classes of laya.lexicon.word_class");
        out.extend([
            spec(OUTPUT_CLASS_W.into(), vec![d, k], MATRIX_TYPES, false, format!("{dr} and {kr}")),
            spec(OUTPUT_CLASS_B.into(), vec![k], F32_ONLY, true, kr),
        ]);
    }
    out
}

fn check_finite(name: &str, ty: GgmlType, data: &[u8]) -> Result<(), FormatError> {
    let bad = match ty {
        GgmlType::F32 => data.chunks_exact(4).position(|c| !f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_finite()),
        GgmlType::F16 => data.chunks_exact(2).position(|c| !half::f16::from_le_bytes([c[0], c[1]]).is_finite()),
        GgmlType::BF16 => data.chunks_exact(2).position(|c| !half::bf16::from_le_bytes([c[0], c[1]]).is_finite()),
        _ => None,
    };
    match bad {
        Some(index) => Err(FormatError::NonFinite { name: name.to_string(), index }),
        None => Ok(()),
    }
}

/// What both parsers check before the checksum: the architecture is `laya`, and the file has a
/// u64 `laya.checksum`. Returns the offset of its value bytes and the stored value.
fn laya_checksum_slot(file: &GgufFile<'_>) -> Result<(usize, u64), FormatError> {
    let k = Keys { file };
    let arch = k.str(keys::ARCHITECTURE)?;
    if arch != "laya" {
        return Err(invalid(keys::ARCHITECTURE, format!("'{arch}' is not a Laya model (expected \"laya\")")));
    }
    let slot = checksum_slot(file)?;
    Ok((slot, file.get(keys::CHECKSUM).and_then(Value::as_u64).unwrap_or(0)))
}

/// Files at least this large are hashed on a second thread while the rest is validated.
pub const PARALLEL_CHECKSUM_BYTES: usize = 1 << 20;

/// Whether a parse reads the data of every tensor (what [`LayaFile::parse`] does) or trusts
/// it because a full parse already did ([`LayaFile::parse_verified`]), and with it the
/// lexicon's order and per-word integers, which the caller holds in an index made from the same
/// bytes ([`LayaFile::parse_static_indexed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Contents {
    Check,
    Vouched,
    Indexed,
}

/// The per-word `u32` arrays that [`LayaFile::parse_static_indexed`] counts but does not decode.
const INDEXED_ARRAYS: [&str; 3] = [keys::LEXICON_FREQUENCIES, keys::LEXICON_DICT_FREQUENCIES, keys::LEXICON_WORD_CLASS];

impl LayaFile<'static> {
    /// [`LayaFile::parse`] (`verified: None`) or [`LayaFile::parse_verified`] of bytes that live
    /// as long as the program, a model compiled into it: the same checks, and the lexicon's
    /// words are read in place instead of copied ([`GgufFile::parse_static`]).
    ///
    /// ```
    /// use laya_format::{testing, write_model, GgmlType, LayaFile};
    /// let (meta, tensors) = testing::random_model(&testing::TinyConfig::small(), 5, GgmlType::F16);
    /// let bytes: &'static [u8] = write_model(&meta, &tensors)?.leak();
    /// let checksum = LayaFile::parse_static(bytes, None)?.checksum;
    /// assert_eq!(LayaFile::parse_static(bytes, Some(checksum))?.meta.words, meta.words);
    /// assert!(LayaFile::parse_static(bytes, Some(checksum ^ 1)).is_err());
    /// # Ok::<(), laya_format::FormatError>(())
    /// ```
    pub fn parse_static(bytes: &'static [u8], verified: Option<u64>) -> Result<LayaFile<'static>, FormatError> {
        let file = GgufFile::parse_static(bytes)?;
        match verified {
            Some(checksum) => Self::vouched_container(file, checksum),
            None => Self::parse_container(file),
        }
    }

    /// [`LayaFile::parse_static`] with `verified`, for a caller that also holds, in an index
    /// made from the same bytes when they were validated in full, the lexicon's order, its
    /// per-word integers (`laya.lexicon.frequencies`, `dict_frequencies`, `word_class`) and
    /// where its words start (`word_starts`, [`Strings::run_starts`]): those arrays are checked
    /// for their type and their length (one entry per word) but not decoded (`meta.frequencies`
    /// comes back empty, as do `dict_frequencies` and `word_class` where present), the words'
    /// order and uniqueness are not checked again (`word_order` is `None`), and the words are
    /// read with the given starts once each is checked against its length (starts that do not
    /// fit are ignored and found again). What the runtime reads from such an index it checks
    /// there (lengths, class ids in range); this saves decoding 150,000 integers and 50,000
    /// starts into fresh memory and comparing 50,000 neighbouring words, ~0.7 ms of the default
    /// model's cold start.
    ///
    /// ```
    /// use laya_format::{testing, write_model, GgmlType, LayaFile};
    /// let (meta, tensors) = testing::random_model(&testing::TinyConfig::small(), 5, GgmlType::F16);
    /// let bytes: &'static [u8] = write_model(&meta, &tensors)?.leak();
    /// let checksum = LayaFile::parse(bytes)?.checksum;
    /// let starts = meta.words.run_starts().leak();
    /// let file = LayaFile::parse_static_indexed(bytes, checksum, starts)?;
    /// assert_eq!(file.meta.words, meta.words);
    /// assert!(file.meta.frequencies.is_empty());
    /// assert!(LayaFile::parse_static_indexed(bytes, checksum ^ 1, starts).is_err());
    /// # Ok::<(), laya_format::FormatError>(())
    /// ```
    pub fn parse_static_indexed(
        bytes: &'static [u8],
        verified: u64,
        word_starts: &'static [u32],
    ) -> Result<LayaFile<'static>, FormatError> {
        let file = GgufFile::parse_static_counting(bytes, &INDEXED_ARRAYS, Some((keys::LEXICON_WORDS, word_starts)))?;
        let (_, stored) = laya_checksum_slot(&file)?;
        if stored != verified {
            return Err(FormatError::ChecksumMismatch { stored, computed: verified });
        }
        Self::parse_checked(file, stored, Contents::Indexed)
    }
}

impl<'a> LayaFile<'a> {
    /// Parses and validates a model file against every rule of docs/format.md: container, then
    /// architecture, checksum, format version, keys, lexicon and tensors.
    ///
    /// A file of [`PARALLEL_CHECKSUM_BYTES`] or more is hashed on a second thread while the
    /// rest is checked (hashing is most of a large model's load); either way the checksum is
    /// verified before this returns, and a mismatch is the error reported, whatever else is
    /// wrong with the bytes.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, FormatError> {
        Self::parse_container(GgufFile::parse(bytes)?)
    }

    /// [`LayaFile::parse`] of a parsed container.
    fn parse_container(file: GgufFile<'a>) -> Result<Self, FormatError> {
        let bytes = file.bytes();
        let (slot, stored) = laya_checksum_slot(&file)?;
        // Integrity before meaning: a damaged byte should read as damage, not as a strange value.
        let verify = |computed: u64| match computed == stored {
            true => Ok(()),
            false => Err(FormatError::ChecksumMismatch { stored, computed }),
        };
        if bytes.len() < PARALLEL_CHECKSUM_BYTES {
            verify(checksum_at(bytes, slot))?;
            return Self::parse_checked(file, stored, Contents::Check);
        }
        std::thread::scope(|scope| {
            let hasher = std::thread::Builder::new().name("laya-checksum".into()).spawn_scoped(scope, || checksum_at(bytes, slot));
            match hasher {
                Ok(h) => {
                    let parsed = Self::parse_checked(file, stored, Contents::Check);
                    // The hasher cannot panic (it only reads `bytes`); a join error would mean it did.
                    verify(h.join().map_err(|_| FormatError::ChecksumMismatch { stored, computed: !stored })?)?;
                    parsed
                }
                // No second thread to be had: hash first, as for a small file.
                Err(_) => {
                    verify(checksum_at(bytes, slot))?;
                    Self::parse_checked(file, stored, Contents::Check)
                }
            }
        })
    }

    /// For bytes that [`LayaFile::parse`] has already validated and that cannot have changed
    /// since: a model compiled into a program, which its build script validated and whose
    /// checksum it passed on as `verified`. The stored checksum must equal `verified` (so bytes
    /// other than the vouched-for ones are refused), and every check whose cost does not grow
    /// with the data is made again: the container, every count, offset, key, tensor type and
    /// shape, and the lexicon's size, order and uniqueness (which the runtime relies on). What
    /// `parse` proved by reading every byte is not proved again: the hash, the finiteness of
    /// every float tensor, the n-gram tables' lists and counts (docs/format.md §8), ~10 ms for
    /// the 30 MB default, most of an embedded model's cold start, and each word's own rules
    /// (length, no whitespace or control character).
    ///
    /// ```
    /// use laya_format::{testing, write_model, GgmlType, LayaFile};
    /// let (meta, tensors) = testing::random_model(&testing::TinyConfig::small(), 5, GgmlType::F16);
    /// let bytes = write_model(&meta, &tensors)?;
    /// let verified = LayaFile::parse(&bytes)?.checksum; // e.g. in a build script
    /// assert_eq!(LayaFile::parse_verified(&bytes, verified)?.checksum, verified);
    /// assert!(LayaFile::parse_verified(&bytes, verified ^ 1).is_err());
    /// # Ok::<(), laya_format::FormatError>(())
    /// ```
    pub fn parse_verified(bytes: &'a [u8], verified: u64) -> Result<Self, FormatError> {
        Self::vouched_container(GgufFile::parse(bytes)?, verified)
    }

    /// [`LayaFile::parse_verified`] of a parsed container.
    fn vouched_container(file: GgufFile<'a>, verified: u64) -> Result<Self, FormatError> {
        let (_, stored) = laya_checksum_slot(&file)?;
        if stored != verified {
            return Err(FormatError::ChecksumMismatch { stored, computed: verified });
        }
        Self::parse_checked(file, stored, Contents::Vouched)
    }

    /// Everything [`LayaFile::parse`] checks after the architecture and the checksum.
    fn parse_checked(mut file: GgufFile<'a>, stored: u64, contents: Contents) -> Result<Self, FormatError> {
        let k = Keys { file: &file };
        let version = k.u32(keys::FORMAT_VERSION)?;
        if version != FORMAT_VERSION {
            return Err(FormatError::UnsupportedFormatVersion { found: version, supported: FORMAT_VERSION });
        }
        if let Some((k, _)) = file.kv.iter().find(|(k, _)| k.starts_with("laya.") && !keys::LAYA_KEYS.contains(&k.as_str())) {
            return Err(FormatError::UnknownKey(k.clone()));
        }
        let (mut meta, alignment, word_order) = parse_meta(&file, contents)?;
        meta.words = take_strings(&mut file, keys::LEXICON_WORDS);
        meta.frequencies = take_u32s(&mut file, keys::LEXICON_FREQUENCIES);
        if let Some(d) = meta.dict_frequencies.as_mut() {
            *d = take_u32s(&mut file, keys::LEXICON_DICT_FREQUENCIES);
        }
        if let Some(c) = meta.word_class.as_mut() {
            *c = take_u32s(&mut file, keys::LEXICON_WORD_CLASS);
        }

        // K comes from the classes of the words; where they were not decoded, from the class
        // head's bias, whose agreement with them the full parse behind the index checked.
        let k = match (contents, &meta.word_class) {
            (Contents::Indexed, Some(_)) => file.tensors.iter().find(|t| t.name == OUTPUT_CLASS_B).map_or(0, |t| t.ne[0]),
            _ => meta.word_classes() as u64,
        };
        let specs = tensor_specs(&meta.hparams, meta.words.len() as u64, k);
        let by_name: HashMap<&str, &TensorSpec> = specs.iter().map(|s| (s.name.as_str(), s)).collect();
        let mut ngram_tensors = Vec::new();
        for t in &file.tensors {
            if crate::ngram::names::ALL.contains(&t.name.as_str()) {
                ngram_tensors.push(TensorRef { name: t.name.clone(), ty: t.ty, ne: t.ne.clone(), data: file.tensor_data(t) });
                continue;
            }
            let spec = by_name.get(t.name.as_str()).ok_or_else(|| FormatError::UnknownTensor(t.name.clone()))?;
            if !spec.allowed.contains(&t.ty) {
                return Err(FormatError::UnsupportedTensorType { name: t.name.clone(), ty: t.ty, allowed: spec.allowed.to_vec() });
            }
            if t.ne != spec.ne {
                return Err(FormatError::BadShape {
                    name: t.name.clone(),
                    expected: spec.ne.clone(),
                    found: t.ne.clone(),
                    rule: spec.rule.clone(),
                });
            }
            if spec.finite && contents == Contents::Check {
                check_finite(&t.name, t.ty, file.tensor_data(t))?;
            }
        }
        let present: HashMap<&str, &TensorInfo> = file.tensors.iter().map(|t| (t.name.as_str(), t)).collect();
        if let Some(missing) = specs.iter().find(|s| !s.optional && !present.contains_key(s.name.as_str())) {
            return Err(FormatError::MissingTensor(missing.name.clone()));
        }

        let get = |name: &str| -> Result<TensorRef<'a>, FormatError> {
            let t = present.get(name).ok_or_else(|| FormatError::MissingTensor(name.to_string()))?;
            Ok(TensorRef { name: t.name.clone(), ty: t.ty, ne: t.ne.clone(), data: file.tensor_data(t) })
        };
        let token_embd = get("token_embd.weight")?;
        let token_embd_comp = match present.contains_key(TOKEN_EMBD_COMP) {
            true => Some(get(TOKEN_EMBD_COMP)?),
            false => None,
        };
        if token_embd_comp.is_some() && !token_embd.ty.is_quantized() {
            // Compensating an exact table would only add noise; such a file is a tool bug.
            return Err(FormatError::BadTensor {
                name: TOKEN_EMBD_COMP.into(),
                reason: format!("present only with a quantised token_embd.weight (Q8_0, Q4_0, Q4_1), but it is {}", token_embd.ty.name()),
            });
        }
        let mut layers = Vec::with_capacity(meta.hparams.block_count as usize);
        for l in 0..meta.hparams.block_count {
            let b = |s: &str| get(&format!("blk.{l}.{s}"));
            layers.push(LayerTensors {
                attn_norm_w: b("attn_norm.weight")?,
                attn_norm_b: b("attn_norm.bias")?,
                attn_q_w: b("attn_q.weight")?,
                attn_q_b: b("attn_q.bias")?,
                attn_k_w: b("attn_k.weight")?,
                attn_k_b: b("attn_k.bias")?,
                attn_v_w: b("attn_v.weight")?,
                attn_v_b: b("attn_v.bias")?,
                attn_out_w: b("attn_output.weight")?,
                attn_out_b: b("attn_output.bias")?,
                ffn_norm_w: b("ffn_norm.weight")?,
                ffn_norm_b: b("ffn_norm.bias")?,
                ffn_up_w: b("ffn_up.weight")?,
                ffn_up_b: b("ffn_up.bias")?,
                ffn_down_w: b("ffn_down.weight")?,
                ffn_down_b: b("ffn_down.bias")?,
            });
        }
        Ok(LayaFile {
            token_embd,
            token_embd_comp,
            pos_embd: get("pos_embd.weight")?,
            layers,
            output_norm_w: get("output_norm.weight")?,
            output_norm_b: get("output_norm.bias")?,
            output_w: get("output.weight")?,
            output_b: get("output.bias")?,
            replace_w: get("replace.weight")?,
            replace_b: get("replace.bias")?,
            output_class: match meta.word_class {
                Some(_) => Some((get(OUTPUT_CLASS_W)?, get(OUTPUT_CLASS_B)?)),
                None => None,
            },
            memory_embd: match meta.hparams.memory {
                Some(_) => Some(get(MEMORY_EMBD)?),
                None => None,
            },
            ngram: crate::ngram::check(ngram_tensors, meta.words.len(), contents)?,
            checksum: stored,
            word_order,
            file_len: file.bytes().len(),
            alignment,
            meta,
        })
    }

    /// Every tensor in canonical order (embeddings with the optional compensation, blocks,
    /// output heads).
    pub fn tensors(&self) -> Vec<&TensorRef<'a>> {
        let mut v = vec![&self.token_embd];
        v.extend(self.token_embd_comp.as_ref());
        v.push(&self.pos_embd);
        for l in &self.layers {
            v.extend(l.all());
        }
        v.extend([&self.output_norm_w, &self.output_norm_b, &self.output_w, &self.output_b, &self.replace_w, &self.replace_b]);
        if let Some((w, b)) = &self.output_class {
            v.extend([w, b]);
        }
        v.extend(self.memory_embd.as_ref());
        if let Some(n) = &self.ngram {
            v.extend(n.tensors.iter());
        }
        v
    }

    /// A human-readable report: hyper-parameters, lexicon, provenance, tensor table, checksum.
    pub fn summary(&self) -> String {
        let m = &self.meta;
        let h = &m.hparams;
        let mut s = String::new();
        let _ = writeln!(s, "model            {}", m.name);
        let _ = writeln!(s, "format version   {FORMAT_VERSION} (GGUF v3, alignment {})", self.alignment);
        let _ = writeln!(s, "file size        {} bytes", self.file_len);
        let _ = writeln!(s, "context length   {}", h.context_length);
        let _ = writeln!(s, "embedding        {} (heads {}, head dim {})", h.embedding_length, h.head_count, h.head_dim());
        let _ = writeln!(s, "blocks           {} (ffn widths {:?})", h.block_count, h.feed_forward_length);
        let _ = writeln!(s, "activation       {}", h.activation.name());
        let _ = writeln!(s, "layer norm eps   {}", h.layer_norm_epsilon);
        match h.position_scheme {
            PositionScheme::LearnedAbsolute => {
                let _ = writeln!(s, "positions        {}", h.position_scheme.name());
            }
            PositionScheme::RelativeCausal => {
                let _ = writeln!(
                    s,
                    "positions        {} (window {}, the last {} tokens reach the output)",
                    h.position_scheme.name(),
                    h.context_length,
                    h.position_scheme.receptive_field(h.block_count, h.context_length)
                );
            }
        }
        let table = match &h.mapping {
            Mapping::Direct => String::new(),
            Mapping::Table(t) => format!(", {} codepoints", t.len()),
        };
        let _ = writeln!(s, "embedding rows   {} ({} mapping{table})", h.embedding_rows, h.mapping.name());
        let _ = writeln!(s, "replace classes  {}", h.replace_classes);
        let _ = writeln!(s, "lexicon          {} words", m.words.len());
        if let Some(c) = &m.word_class {
            let k = m.word_classes();
            let mut sizes = vec![0usize; k];
            for &x in c {
                sizes[x as usize] += 1;
            }
            let _ =
                writeln!(s, "word head        factorised over {k} classes (largest {} words)", sizes.iter().max().copied().unwrap_or(0));
        }
        if let Some(mem) = &h.memory {
            let _ = writeln!(s, "output memory    {} rows, hashed token orders {:?}", mem.buckets, mem.orders);
        }
        if let Some(d) = &m.dict_frequencies {
            let found = d.iter().filter(|&&f| f > 0).count();
            let _ = writeln!(s, "dict prior       {found} of {} words have a dictionary frequency (completion prior)", m.words.len());
        }
        let rules: Vec<&str> = m.normalization.iter().map(|r| r.name()).collect();
        let _ = writeln!(s, "normalization    [{}]", rules.join(", "));
        let p = &m.provenance;
        let words = if crate::separates_words(&p.language) {
            "words separated by spaces: completions only inside a word; case ignored in matching, typed case shown"
        } else {
            "words not separated by spaces"
        };
        let _ = writeln!(s, "language         {} ({words})", p.language);
        let _ = writeln!(s, "training data    {}", p.training_data);
        let _ = writeln!(s, "created          {}", p.created);
        if let Some(tool) = &p.tool {
            let _ = writeln!(s, "tool             {tool}");
        }
        let _ = writeln!(s, "checksum         {:#018x} (verified)", self.checksum);
        let _ = writeln!(s, "tensors:");
        let mut total = 0usize;
        for t in self.tensors() {
            total += t.data.len();
            let _ = writeln!(s, "  {:<28} {:<5} {:<14} {:>10} bytes", t.name, t.ty.name(), format!("{:?}", t.ne), t.data.len());
        }
        let _ = writeln!(s, "  total tensor data {total} bytes");
        s
    }
}

#[cfg(test)]
mod comp_tests {
    use super::*;
    use crate::quantize::QuantizeOptions;
    use crate::testing::{random_model, random_quantized_model, TinyConfig};
    use crate::writer::{write_model, TensorData};

    fn quantized() -> (ModelMeta, Vec<TensorData>) {
        // 48 table rows: two comp rows, the second one a short group of 16.
        random_quantized_model(&TinyConfig::small(), 11, &QuantizeOptions::default())
    }

    fn comp_mut(tensors: &mut [TensorData]) -> &mut TensorData {
        tensors.iter_mut().find(|t| t.name == TOKEN_EMBD_COMP).expect("the quantised model has a comp tensor")
    }

    #[test]
    fn comp_tensor_is_read_with_its_shape() {
        let (meta, tensors) = quantized();
        let bytes = write_model(&meta, &tensors).unwrap();
        let f = LayaFile::parse(&bytes).unwrap();
        let comp = f.token_embd_comp.as_ref().unwrap();
        assert_eq!(comp.ne, vec![32, 2]);
        assert_eq!(comp.ty, GgmlType::F16);
        assert_eq!(f.tensors()[1].name, TOKEN_EMBD_COMP);
        assert!(f.summary().contains(TOKEN_EMBD_COMP));
        // Without it the model is still valid (the tensor is optional).
        let without: Vec<TensorData> = tensors.into_iter().filter(|t| t.name != TOKEN_EMBD_COMP).collect();
        let bytes = write_model(&meta, &without).unwrap();
        assert!(LayaFile::parse(&bytes).unwrap().token_embd_comp.is_none());
    }

    /// Tests as data: an edit of the comp tensor and the error it must produce.
    #[test]
    fn bad_comp_tensors_are_refused() {
        type Edit = fn(&mut TensorData);
        type Expect = fn(&FormatError) -> bool;
        let cases: [(&str, Edit, Expect); 5] = [
            (
                "one group too many",
                |t| {
                    t.ne[1] += 1;
                    t.data.extend(vec![0u8; 64]);
                },
                |e| matches!(e, FormatError::BadShape { name, .. } if name == TOKEN_EMBD_COMP),
            ),
            (
                "one row per embedding row instead of per group",
                |t| {
                    t.ne[1] = 48;
                    t.data = vec![0u8; 48 * 32 * 2];
                },
                |e| matches!(e, FormatError::BadShape { expected, .. } if expected == &vec![32, 2]),
            ),
            (
                "BF16 is not a comp type",
                |t| t.ty = GgmlType::BF16,
                |e| matches!(e, FormatError::UnsupportedTensorType { name, .. } if name == TOKEN_EMBD_COMP),
            ),
            (
                "Q8_0 is not a comp type",
                |t| {
                    t.ty = GgmlType::Q8_0;
                    t.data = vec![0u8; 2 * GgmlType::Q8_0.block_bytes()];
                },
                |e| matches!(e, FormatError::UnsupportedTensorType { .. }),
            ),
            (
                "a NaN",
                |t| t.data[6..8].copy_from_slice(&half::f16::NAN.to_le_bytes()),
                |e| matches!(e, FormatError::NonFinite { name, index: 3 } if name == TOKEN_EMBD_COMP),
            ),
        ];
        for (what, edit, ok) in cases {
            let (meta, mut tensors) = quantized();
            edit(comp_mut(&mut tensors));
            match write_model(&meta, &tensors) {
                Err(e) => assert!(ok(&e), "{what}: unexpected error {e}"),
                Ok(_) => panic!("{what}: accepted"),
            }
        }
    }

    #[test]
    fn comp_with_a_float_embedding_is_refused() {
        let (meta, mut tensors) = random_model(&TinyConfig::small(), 11, GgmlType::F32);
        let comp = TensorData::from_f32(TOKEN_EMBD_COMP, GgmlType::F16, &[32, 2], &[0.0; 64]);
        tensors.insert(1, comp.unwrap());
        let err = write_model(&meta, &tensors).unwrap_err();
        assert!(matches!(&err, FormatError::BadTensor { name, .. } if name == TOKEN_EMBD_COMP), "{err}");
        assert!(err.to_string().contains("quantised"), "{err}");
    }
}
