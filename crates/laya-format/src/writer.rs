//! Writing GGUF containers and Laya model files.

use std::io::{self, Write};

use crate::error::FormatError;
use crate::gguf::{align_up, tensor_size, Array, GgufFile, Value, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUF_VERSION};
use crate::schema::{keys, LayaFile, Mapping, ModelMeta, FORMAT_VERSION, LAYA_ALIGNMENT};
use crate::types::GgmlType;

/// A tensor to be written: name, type, shape (`ne[0]` first) and encoded bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorData {
    pub name: String,
    pub ty: GgmlType,
    pub ne: Vec<u64>,
    pub data: Vec<u8>,
}

impl TensorData {
    /// Encodes `values` (row-major along `ne[0]`) as `ty`; see [`crate::quant::quantize`].
    ///
    /// ```
    /// use laya_format::{GgmlType, TensorData};
    /// let t = TensorData::from_f32("output_norm.bias", GgmlType::F32, &[4], &[0.0; 4])?;
    /// assert_eq!(t.data.len(), 16);
    /// # Ok::<(), laya_format::FormatError>(())
    /// ```
    pub fn from_f32(name: &str, ty: GgmlType, ne: &[u64], values: &[f32]) -> Result<Self, FormatError> {
        let expected: u64 = ne.iter().product();
        if values.len() as u64 != expected {
            return Err(FormatError::BadLength {
                what: format!("tensor '{name}'"),
                len: values.len(),
                reason: format!("its shape {ne:?} needs {expected} values"),
            });
        }
        let data = crate::quant::quantize(values, ty)?;
        Ok(TensorData { name: name.to_string(), ty, ne: ne.to_vec(), data })
    }
}

/// Builds a GGUF v3 file in memory: any metadata, any tensors, a chosen alignment.
///
/// Keys keep the order they were first added in; adding a key again replaces its value.
/// Tensors are laid out in the order added, each at the next multiple of the alignment, and the
/// file ends at the end of the last tensor.
///
/// ```
/// use laya_format::{GgmlType, GgufFile, GgufWriter, Value};
/// let mut w = GgufWriter::new();
/// w.set_alignment(64);
/// w.add_kv("general.architecture", Value::String("demo".into()));
/// w.add_tensor("w", GgmlType::Q8_0, &[32, 2], vec![0u8; 68])?;
/// let bytes = w.to_bytes();
/// let f = GgufFile::parse(&bytes)?;
/// assert_eq!(f.alignment, 64);
/// assert_eq!(f.tensors[0].offset % 64, 0);
/// # Ok::<(), laya_format::FormatError>(())
/// ```
#[derive(Debug, Clone)]
pub struct GgufWriter {
    alignment: u64,
    kv: Vec<(String, Value)>,
    tensors: Vec<TensorData>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// An empty writer with GGUF's default alignment (32) and no `general.alignment` key.
    pub fn new() -> Self {
        GgufWriter { alignment: GGUF_DEFAULT_ALIGNMENT, kv: Vec::new(), tensors: Vec::new() }
    }

    /// Sets the data alignment and writes it as the `general.alignment` key.
    /// `alignment` should be a power of two; readers refuse anything else.
    pub fn set_alignment(&mut self, alignment: u32) -> &mut Self {
        self.add_kv("general.alignment", Value::U32(alignment))
    }

    /// The alignment tensors will be placed at.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Adds (or replaces) a metadata key. A `general.alignment` u32 that is a power of two also
    /// becomes the layout alignment.
    pub fn add_kv(&mut self, key: impl Into<String>, value: Value) -> &mut Self {
        let key = key.into();
        if key == "general.alignment" {
            if let Value::U32(a) = value {
                if a.is_power_of_two() {
                    self.alignment = u64::from(a);
                }
            }
        }
        match self.kv.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.kv.push((key, value)),
        }
        self
    }

    /// Adds a tensor after checking that `data` has exactly the bytes `ty` and `ne` need.
    pub fn add_tensor(&mut self, name: &str, ty: GgmlType, ne: &[u64], data: Vec<u8>) -> Result<&mut Self, FormatError> {
        self.push_tensor(TensorData { name: name.to_string(), ty, ne: ne.to_vec(), data })
    }

    /// Adds a prepared [`TensorData`] (checked like [`GgufWriter::add_tensor`]).
    pub fn push_tensor(&mut self, t: TensorData) -> Result<&mut Self, FormatError> {
        let size = tensor_size(&t.name, &t.ne, t.ty)?;
        if size != t.data.len() as u64 {
            return Err(FormatError::DataSize { name: t.name, expected: size, found: t.data.len() as u64 });
        }
        if self.tensors.iter().any(|o| o.name == t.name) {
            return Err(FormatError::DuplicateTensor(t.name));
        }
        self.tensors.push(t);
        Ok(self)
    }

    /// The finished file.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    /// Writes the finished file to `w`.
    pub fn write_to(&self, mut w: impl Write) -> io::Result<()> {
        w.write_all(&self.to_bytes())
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let data_bytes: usize = self.tensors.iter().map(|t| t.data.len() + self.alignment as usize).sum();
        out.reserve(4096 + data_bytes);
        out.extend_from_slice(&GGUF_MAGIC);
        out.extend_from_slice(&GGUF_VERSION.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kv.len() as u64).to_le_bytes());
        for (k, v) in &self.kv {
            put_str(out, k);
            out.extend_from_slice(&v.value_type().id().to_le_bytes());
            put_value(out, v);
        }
        let mut offset = 0u64;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            offset = align_up(offset, self.alignment).unwrap_or(offset);
            offsets.push(offset);
            put_str(out, &t.name);
            out.extend_from_slice(&(t.ne.len() as u32).to_le_bytes());
            for n in &t.ne {
                out.extend_from_slice(&n.to_le_bytes());
            }
            out.extend_from_slice(&t.ty.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset += t.data.len() as u64;
        }
        if self.tensors.is_empty() {
            return;
        }
        let data_start = align_up(out.len() as u64, self.alignment).unwrap_or(out.len() as u64);
        out.resize(data_start as usize, 0);
        for (t, off) in self.tensors.iter().zip(offsets) {
            out.resize((data_start + off) as usize, 0);
            out.extend_from_slice(&t.data);
        }
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => put_str(out, s),
        Value::Array(a) => put_array(out, a),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

fn put_array(out: &mut Vec<u8>, a: &Array) {
    out.extend_from_slice(&a.element_type().id().to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! each {
        ($v:expr) => {
            for x in $v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        Array::U8(v) => out.extend_from_slice(v),
        Array::I8(v) => out.extend(v.iter().map(|&x| x as u8)),
        Array::U16(v) => each!(v),
        Array::I16(v) => each!(v),
        Array::U32(v) => each!(v),
        Array::I32(v) => each!(v),
        Array::F32(v) => each!(v),
        Array::Bool(v) => out.extend(v.iter().map(|&x| u8::from(x))),
        Array::String(v) => v.iter().for_each(|s| put_str(out, s)),
        Array::Array(v) => v.iter().for_each(|a| put_array(out, a)),
        Array::U64(v) => each!(v),
        Array::I64(v) => each!(v),
        Array::F64(v) => each!(v),
    }
}

/// The metadata of `meta` as GGUF keys, in the canonical order, with `laya.checksum` = 0.
pub fn model_keys(meta: &ModelMeta) -> Vec<(String, Value)> {
    let h = &meta.hparams;
    let s = |x: &str| Value::String(x.to_string());
    let mut kv: Vec<(String, Value)> = vec![
        (keys::ARCHITECTURE.into(), s("laya")),
        (keys::ALIGNMENT.into(), Value::U32(LAYA_ALIGNMENT)),
        (keys::NAME.into(), s(&meta.name)),
        (keys::FORMAT_VERSION.into(), Value::U32(FORMAT_VERSION)),
        (keys::CONTEXT_LENGTH.into(), Value::U32(h.context_length)),
        (keys::EMBEDDING_LENGTH.into(), Value::U32(h.embedding_length)),
        (keys::BLOCK_COUNT.into(), Value::U32(h.block_count)),
        (keys::HEAD_COUNT.into(), Value::U32(h.head_count)),
        (keys::LAYER_NORM_EPSILON.into(), Value::F32(h.layer_norm_epsilon)),
        (keys::FEED_FORWARD_LENGTH.into(), Value::Array(Array::U32(h.feed_forward_length.clone()))),
        (keys::ACTIVATION.into(), s(h.activation.name())),
        (keys::POSITION_SCHEME.into(), s(h.position_scheme.name())),
        (keys::EMBEDDING_ROWS.into(), Value::U32(h.embedding_rows)),
        (keys::EMBEDDING_MAPPING.into(), s(h.mapping.name())),
    ];
    if let Mapping::Table(cps) = &h.mapping {
        kv.push((keys::EMBEDDING_CODEPOINTS.into(), Value::Array(Array::U32(cps.clone()))));
    }
    kv.extend([
        (keys::REPLACE_CLASSES.into(), Value::U32(h.replace_classes)),
        (keys::LEXICON_WORDS.into(), Value::Array(Array::String(meta.words.clone()))),
        (keys::LEXICON_FREQUENCIES.into(), Value::Array(Array::U32(meta.frequencies.clone()))),
    ]);
    if let Some(m) = &h.memory {
        kv.push((keys::MEMORY_BUCKETS.into(), Value::U32(m.buckets)));
        kv.push((keys::MEMORY_ORDERS.into(), Value::Array(Array::U32(m.orders.clone()))));
    }
    if let Some(f) = &meta.dict_frequencies {
        kv.push((keys::LEXICON_DICT_FREQUENCIES.into(), Value::Array(Array::U32(f.clone()))));
    }
    if let Some(c) = &meta.word_class {
        kv.push((keys::LEXICON_WORD_CLASS.into(), Value::Array(Array::U32(c.clone()))));
    }
    kv.extend([
        (keys::NORMALIZATION.into(), Value::Array(Array::String(meta.normalization.iter().map(|r| r.name().to_string()).collect()))),
        (keys::PROVENANCE_LANGUAGE.into(), s(&meta.provenance.language)),
        (keys::PROVENANCE_TRAINING_DATA.into(), s(&meta.provenance.training_data)),
        (keys::PROVENANCE_CREATED.into(), s(&meta.provenance.created)),
    ]);
    if let Some(tool) = &meta.provenance.tool {
        kv.push((keys::PROVENANCE_TOOL.into(), s(tool)));
    }
    kv.push((keys::CHECKSUM.into(), Value::U64(0)));
    kv
}

/// Writes a complete Laya model file: the keys of `meta`, the `tensors` in the order given,
/// alignment 64 and the §6 checksum patched in. The result is re-parsed with
/// [`LayaFile::parse`] before it is returned, so an `Ok` file always loads.
///
/// ```
/// use laya_format::{testing, write_model, GgmlType, LayaFile};
/// let (meta, tensors) = testing::random_model(&testing::TinyConfig::small(), 7, GgmlType::Q8_0);
/// let bytes = write_model(&meta, &tensors)?;
/// assert_eq!(LayaFile::parse(&bytes)?.meta, meta);
/// # Ok::<(), laya_format::FormatError>(())
/// ```
pub fn write_model(meta: &ModelMeta, tensors: &[TensorData]) -> Result<Vec<u8>, FormatError> {
    let mut w = GgufWriter::new();
    for (k, v) in model_keys(meta) {
        w.add_kv(k, v);
    }
    for t in tensors {
        w.push_tensor(t.clone())?;
    }
    let mut bytes = w.to_bytes();
    patch_checksum(&mut bytes)?;
    LayaFile::parse(&bytes)?;
    Ok(bytes)
}

/// Recomputes the §6 checksum of a file and stores it in its `laya.checksum` key (which must
/// exist and be a u64). Returns the checksum.
///
/// ```
/// use laya_format::{checksum, patch_checksum, testing, write_model, GgmlType, LayaFile};
/// let (meta, tensors) = testing::random_model(&testing::TinyConfig::small(), 1, GgmlType::F32);
/// let mut bytes = write_model(&meta, &tensors)?;
/// let last = bytes.len() - 1;
/// bytes[last] ^= 1; // an edit…
/// assert!(LayaFile::parse(&bytes).is_err());
/// patch_checksum(&mut bytes)?; // …made deliberately
/// assert_eq!(LayaFile::parse(&bytes)?.checksum, checksum(&bytes)?);
/// # Ok::<(), laya_format::FormatError>(())
/// ```
pub fn patch_checksum(bytes: &mut [u8]) -> Result<u64, FormatError> {
    let offset = {
        let file = GgufFile::parse(bytes)?;
        crate::checksum::checksum_slot(&file)?
    };
    let sum = crate::checksum::checksum_at(bytes, offset);
    if let Some(slot) = bytes.get_mut(offset..offset + 8) {
        slot.copy_from_slice(&sum.to_le_bytes());
    }
    Ok(sum)
}

/// Puts the lexicon in byte order, moving each word's row of `output.weight`, its entry of
/// `output.bias`, its frequencies and its class with it, so that the model predicts exactly as before.
/// Returns whether anything moved.
///
/// A loader must know the words in byte order (completions of a typed prefix are one range
/// of them). A file already in that order is checked in one pass; any other is sorted at
/// every load, about a millisecond for 20,000 words (docs/format.md §4, "Lexicon order"). Laya's tools write
/// sorted lexicons.
///
/// ```
/// use laya_format::{sort_lexicon, testing, write_model, GgmlType, LayaFile};
/// let (mut meta, mut tensors) = testing::random_model(&testing::TinyConfig::small(), 3, GgmlType::Q8_0);
/// assert!(sort_lexicon(&mut meta, &mut tensors)?);
/// assert!(meta.words.iter().zip(meta.words.iter().skip(1)).all(|(a, b)| a < b));
/// assert!(!sort_lexicon(&mut meta, &mut tensors)?);
/// let bytes = write_model(&meta, &tensors)?;
/// assert_eq!(LayaFile::parse(&bytes)?.word_order, None); // already in byte order
/// # Ok::<(), laya_format::FormatError>(())
/// ```
pub fn sort_lexicon(meta: &mut ModelMeta, tensors: &mut [TensorData]) -> Result<bool, FormatError> {
    let n = meta.words.len();
    let order = crate::validate::checked_lexicon_order(&meta.words)?;
    if order.iter().enumerate().all(|(i, &id)| id as usize == i) {
        return Ok(false);
    }
    if meta.frequencies.len() != n {
        return Err(FormatError::BadLength {
            what: keys::LEXICON_FREQUENCIES.into(),
            len: meta.frequencies.len(),
            reason: format!("the lexicon has {n} words"),
        });
    }
    for (what, f) in [(keys::LEXICON_DICT_FREQUENCIES, &meta.dict_frequencies), (keys::LEXICON_WORD_CLASS, &meta.word_class)] {
        if let Some(f) = f.as_ref().filter(|f| f.len() != n) {
            return Err(FormatError::BadLength { what: what.into(), len: f.len(), reason: format!("the lexicon has {n} words") });
        }
    }
    let per_word = |t: &TensorData| t.name == "output.weight" || t.name == "output.bias";
    // Both tensors have one row per word as their last dimension; rows are whole blocks. All
    // are checked before any moves, so a refusal leaves everything as it was.
    for t in tensors.iter().filter(|t| per_word(t)) {
        let rows = t.ne.last().copied().unwrap_or(0) as usize;
        if rows != n || t.data.len() % n != 0 {
            return Err(FormatError::BadTensor {
                name: t.name.clone(),
                reason: format!("{rows} rows and {} bytes for a lexicon of {n} words", t.data.len()),
            });
        }
    }
    for t in tensors.iter_mut().filter(|t| per_word(t)) {
        let row = t.data.len() / n;
        let mut data = Vec::with_capacity(t.data.len());
        for &id in &order {
            data.extend_from_slice(&t.data[id as usize * row..(id as usize + 1) * row]);
        }
        t.data = data;
    }
    meta.words = order.iter().map(|&id| &meta.words[id as usize]).collect();
    meta.frequencies = order.iter().map(|&id| meta.frequencies[id as usize]).collect();
    for f in [&mut meta.dict_frequencies, &mut meta.word_class].into_iter().flatten() {
        *f = order.iter().map(|&id| f[id as usize]).collect();
    }
    Ok(true)
}
