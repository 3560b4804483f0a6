//! The GGUF version 3 container: metadata values and the bounds-checked parser (the tensor types
//! are in `types`).
//!
//! Nothing here knows about Laya's keys; `schema` builds on top. The parser trusts no count in
//! the file: every length is compared with the bytes that remain before anything is allocated.

use std::collections::HashSet;
use std::fmt;

use crate::error::FormatError;
use crate::strings::Strings;
use crate::types::GgmlType;

mod string_arrays;

/// The GGUF magic, "GGUF".
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// The only container version this crate reads and writes.
pub const GGUF_VERSION: u32 = 3;
/// The alignment GGUF uses when `general.alignment` is absent.
pub const GGUF_DEFAULT_ALIGNMENT: u64 = 32;
/// Longest key accepted (docs/format.md §1).
pub const MAX_KEY_LEN: u64 = 64 * 1024;
/// Deepest array nesting the container parser follows; deeper input is refused so that a crafted
/// file cannot exhaust the stack.
pub const MAX_ARRAY_DEPTH: u32 = 4;

/// The GGUF metadata value type ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    /// The type with id `id`, if GGUF defines it.
    pub fn from_id(id: u32) -> Option<Self> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The id written to the file.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// Lower-case name used in messages, e.g. `u32`.
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }

    /// Bytes of one value of a fixed-size type; the minimum encoded size for strings (the
    /// length prefix) and arrays (type + count), which bounds how many can fit in a file.
    fn min_size(self) -> usize {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }
}

/// One metadata value. Arrays are typed ([`Array`]) so a 50,000-word lexicon is one
/// `Vec<String>` rather than 50,000 boxed values.
///
/// ```
/// use laya_format::{Array, Value};
/// let v = Value::Array(Array::U32(vec![256, 256, 128]));
/// assert_eq!(v.as_u32_array(), Some(&[256, 256, 128][..]));
/// assert_eq!(v.type_name(), "u32 array");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Array),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A homogeneous GGUF array.
#[derive(Debug, Clone, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    /// Strings back to back in one buffer (a lexicon is one such array).
    String(Strings),
    /// Arrays of arrays; allowed by GGUF, refused by the Laya schema.
    Array(Vec<Array>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl Array {
    /// The element type.
    pub fn element_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::F32(_) => ValueType::F32,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::Array(_) => ValueType::Array,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F64(_) => ValueType::F64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
        }
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Value {
    /// The GGUF value type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// Human-readable type for messages: `u32`, `string array`, `array array`, …
    pub fn type_name(&self) -> String {
        match self {
            Value::Array(a) => format!("{} array", a.element_type().name()),
            v => v.value_type().name().to_string(),
        }
    }

    pub fn as_u32(&self) -> Option<u32> {
        match self {
            Value::U32(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::U64(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_f32(&self) -> Option<f32> {
        match self {
            Value::F32(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_u32_array(&self) -> Option<&[u32]> {
        match self {
            Value::Array(Array::U32(v)) => Some(v),
            _ => None,
        }
    }

    pub fn as_string_array(&self) -> Option<&Strings> {
        match self {
            Value::Array(Array::String(v)) => Some(v),
            _ => None,
        }
    }
}

/// One entry of the tensor-info table, with its offset made absolute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// Element counts, `ne[0]` fastest-varying.
    pub ne: Vec<u64>,
    pub ty: GgmlType,
    /// Absolute offset of the first data byte in the file; a multiple of the alignment.
    pub offset: u64,
    /// Data bytes.
    pub size: u64,
}

impl TensorInfo {
    /// Total number of elements.
    pub fn n_elements(&self) -> u64 {
        self.ne.iter().fold(1u64, |acc, &n| acc.saturating_mul(n))
    }
}

/// A parsed GGUF container borrowing the file bytes.
///
/// Parsing checks the container rules of docs/format.md §1 (magic, version, value types,
/// UTF-8, duplicate keys and tensors, tensor ranks and types, alignment, bounds, overlap, zero
/// padding) but no Laya key: use [`crate::LayaFile::parse`] to load a model.
///
/// ```
/// use laya_format::{GgmlType, GgufFile, GgufWriter, Value};
/// let mut w = GgufWriter::new();
/// w.add_kv("general.name", Value::String("demo".into()));
/// w.add_tensor("x", GgmlType::F32, &[2], [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect())?;
/// let bytes = w.to_bytes();
/// let file = GgufFile::parse(&bytes)?;
/// assert_eq!(file.get("general.name").and_then(|v| v.as_str()), Some("demo"));
/// assert_eq!(file.tensor_data(&file.tensors[0]), &bytes[bytes.len() - 8..]);
/// # Ok::<(), laya_format::FormatError>(())
/// ```
#[derive(Clone)]
pub struct GgufFile<'a> {
    pub version: u32,
    pub alignment: u64,
    pub kv: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    /// Absolute offset `D` of the tensor data section.
    pub data_offset: u64,
    /// Absolute offset of each value's first byte, parallel to `kv`.
    value_offsets: Vec<u64>,
    /// Keys of `u32` arrays that were checked and counted but not decoded, with their element
    /// counts ([`GgufFile::parse_static_counting`]); not in `kv`.
    pub(crate) counted: Vec<(String, u64)>,
    bytes: &'a [u8],
}

impl fmt::Debug for GgufFile<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The file bytes are left out: they can be hundreds of megabytes.
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("alignment", &self.alignment)
            .field("kv", &self.kv)
            .field("tensors", &self.tensors)
            .field("data_offset", &self.data_offset)
            .field("file_len", &self.bytes.len())
            .finish()
    }
}

impl GgufFile<'static> {
    /// [`GgufFile::parse`] for bytes that live as long as the program (a model compiled into
    /// it): string arrays of short elements (a lexicon) are read in place, not copied.
    ///
    /// ```
    /// use laya_format::{testing, write_model, GgmlType, GgufFile};
    /// let (meta, tensors) = testing::random_model(&testing::TinyConfig::small(), 5, GgmlType::F16);
    /// let bytes: &'static [u8] = write_model(&meta, &tensors)?.leak();
    /// assert_eq!(GgufFile::parse_static(bytes)?.kv, GgufFile::parse(bytes)?.kv);
    /// # Ok::<(), laya_format::FormatError>(())
    /// ```
    pub fn parse_static(bytes: &'static [u8]) -> Result<GgufFile<'static>, FormatError> {
        Self::parse_from(Reader { bytes, pos: 0, statics: Some(bytes) }, &[], None, Padding::Check)
    }

    /// [`GgufFile::parse_static`], except that the `u32` arrays under `keys` are checked as far
    /// as the container goes (type, count, bounds) and counted into
    /// [`GgufFile::counted`] instead of decoded into `kv`: for a caller that holds their
    /// contents already, in an index made from the same bytes, where decoding 50,000-entry
    /// arrays into fresh memory was a tenth of a cold start. A key under `keys` whose value is
    /// anything else is read as usual.
    ///
    /// `held`: a string array's key and the starts of its run ([`Strings::run_starts`]) as the
    /// caller's index holds them: read in place with those starts once they are checked
    /// against the lengths, where reading it otherwise builds them in fresh memory.
    ///
    /// For vouched bytes only (what the index was made from, validated in full): padding bytes
    /// are not read, since whether they are zero is a fact about the content that the full
    /// parse proved, and reading them touched a cold page of the file at every tensor.
    pub(crate) fn parse_static_counting(
        bytes: &'static [u8],
        keys: &[&str],
        held: Option<(&str, &'static [u32])>,
    ) -> Result<GgufFile<'static>, FormatError> {
        Self::parse_from(Reader { bytes, pos: 0, statics: Some(bytes) }, keys, held, Padding::Vouched)
    }
}

impl<'a> GgufFile<'a> {
    /// Parses and checks the container. Never panics and never allocates more than the input
    /// could describe.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, FormatError> {
        Self::parse_from(Reader { bytes, pos: 0, statics: None }, &[], None, Padding::Check)
    }

    /// [`GgufFile::parse`] from a reader at the start of the bytes; the `u32` arrays under
    /// `counted` are counted, not decoded, and the `held` string array read with the given
    /// starts ([`GgufFile::parse_static_counting`]).
    fn parse_from(
        mut r: Reader<'a>,
        counted: &[&str],
        held: Option<(&str, &'static [u32])>,
        padding: Padding,
    ) -> Result<Self, FormatError> {
        let check_zero = |bytes: &[u8], start: u64, end: u64, what: &str| match padding {
            Padding::Check => check_zero(bytes, start, end, what),
            Padding::Vouched => Ok(()),
        };
        let bytes = r.bytes;
        let magic = r.array4("magic")?;
        if magic != GGUF_MAGIC {
            return Err(FormatError::BadMagic { found: magic });
        }
        let version = r.u32("version")?;
        if version != GGUF_VERSION {
            return Err(FormatError::UnsupportedVersion(version));
        }
        let tensor_count = r.u64("tensor count")?;
        let kv_count = r.u64("key/value count")?;
        // A key/value takes at least 13 bytes (key length, value type, one value byte) and a
        // tensor info at least 32, so larger counts cannot be honest.
        let kv_cap = r.bounded_count(kv_count, 13, "key/value count")?;

        let mut kv: Vec<(String, Value)> = Vec::with_capacity(kv_cap);
        let mut value_offsets = Vec::with_capacity(kv_cap);
        let mut seen_keys = HashSet::with_capacity(kv_cap);
        let mut counts = Vec::new();
        for _ in 0..kv_count {
            let key = r.string("key", MAX_KEY_LEN)?;
            if !seen_keys.insert(key.clone()) {
                return Err(FormatError::DuplicateKey(key));
            }
            let what = format!("value of key '{key}'");
            let type_id = r.u32(&what)?;
            let ty = ValueType::from_id(type_id).ok_or(FormatError::BadValueType { what: what.clone(), id: type_id })?;
            if ty == ValueType::Array && counted.contains(&key.as_str()) {
                if let Some(n) = r.count_u32_array(&what)? {
                    counts.push((key, n));
                    continue;
                }
            }
            value_offsets.push(r.pos as u64);
            let held_list = match held {
                Some((k, starts)) if k == key && ty == ValueType::Array => r.held_string_array(starts),
                _ => None,
            };
            let value = match held_list {
                Some(list) => Value::Array(Array::String(list)),
                None => r.value(ty, &what, 0)?,
            };
            kv.push((key, value));
        }

        let alignment = match kv.iter().find(|(k, _)| k == "general.alignment") {
            None => GGUF_DEFAULT_ALIGNMENT,
            Some((_, Value::U32(a))) if a.is_power_of_two() => u64::from(*a),
            Some((_, Value::U32(a))) => {
                return Err(FormatError::InvalidValue { key: "general.alignment".into(), reason: format!("{a} is not a power of two") })
            }
            Some((_, v)) => {
                return Err(FormatError::WrongKeyType { key: "general.alignment".into(), expected: "u32".into(), found: v.type_name() })
            }
        };

        let t_cap = r.bounded_count(tensor_count, 32, "tensor count")?;
        let mut raw: Vec<(String, Vec<u64>, GgmlType, u64, u64)> = Vec::with_capacity(t_cap);
        let mut seen_tensors = HashSet::with_capacity(t_cap);
        for _ in 0..tensor_count {
            let name = r.string("tensor name", u64::MAX)?;
            let what = format!("info of tensor '{name}'");
            let n_dims = r.u32(&what)?;
            if !(1..=4).contains(&n_dims) {
                return Err(FormatError::BadTensor { name, reason: format!("{n_dims} dimensions; Laya tensors have 1 to 4") });
            }
            let mut ne = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                ne.push(r.u64(&what)?);
            }
            let type_id = r.u32(&what)?;
            let rel_offset = r.u64(&what)?;
            let ty = GgmlType::from_id(type_id).ok_or_else(|| FormatError::UnknownTensorType { name: name.clone(), id: type_id })?;
            let size = tensor_size(&name, &ne, ty)?;
            if rel_offset % alignment != 0 {
                return Err(FormatError::Misaligned { name, offset: rel_offset, alignment });
            }
            if !seen_tensors.insert(name.clone()) {
                return Err(FormatError::DuplicateTensor(name));
            }
            raw.push((name, ne, ty, rel_offset, size));
        }

        let table_end = r.pos as u64;
        let data_offset = align_up(table_end, alignment).ok_or(FormatError::TooLarge {
            what: "tensor data offset".into(),
            value: table_end,
            limit: u64::MAX,
        })?;
        let file_len = bytes.len() as u64;
        let data_len = file_len.saturating_sub(data_offset);

        // Check the padding before the data section; a file with no tensors may end inside it.
        check_zero(bytes, table_end, data_offset.min(file_len), "padding before the tensor data")?;
        if !raw.is_empty() && data_offset > file_len {
            return Err(FormatError::Truncated { what: "tensor data section".into(), offset: data_offset });
        }

        let mut tensors = Vec::with_capacity(raw.len());
        for (name, ne, ty, rel, size) in raw {
            // A tensor past the end is what a cut-short download looks like.
            match rel.checked_add(size) {
                Some(end) if end <= data_len => {}
                _ => {
                    return Err(FormatError::Truncated {
                        what: format!("data of tensor '{name}' ({size} bytes)"),
                        offset: data_offset.saturating_add(rel),
                    })
                }
            }
            tensors.push(TensorInfo { name, ne, ty, offset: data_offset + rel, size });
        }

        // Overlaps, gaps and trailing bytes: sort by position and walk.
        let mut order: Vec<usize> = (0..tensors.len()).collect();
        order.sort_by_key(|&i| (tensors[i].offset, tensors[i].size));
        let mut cursor = data_offset;
        let mut prev: Option<usize> = None;
        for &i in &order {
            let t = &tensors[i];
            if t.offset < cursor {
                let other = prev.map(|p| tensors[p].name.clone()).unwrap_or_default();
                return Err(FormatError::BadOffset {
                    name: t.name.clone(),
                    offset: t.offset - data_offset,
                    size: t.size,
                    reason: format!("it overlaps tensor '{other}'"),
                });
            }
            check_zero(bytes, cursor, t.offset, "padding between tensors")?;
            cursor = t.offset + t.size;
            prev = Some(i);
        }
        if !tensors.is_empty() {
            let allowed_end = align_up(cursor, alignment).unwrap_or(u64::MAX);
            if file_len > allowed_end {
                return Err(FormatError::BadPadding {
                    offset: allowed_end,
                    reason: format!(
                        "{} bytes after the last tensor; only zero padding up to the next multiple \
                         of {alignment} is allowed",
                        file_len - cursor
                    ),
                });
            }
            check_zero(bytes, cursor, file_len, "padding after the last tensor")?;
        }

        Ok(GgufFile { version, alignment, kv, tensors, data_offset, value_offsets, counted: counts, bytes })
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.kv.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Absolute offset of the first byte of `key`'s value (after its type id).
    pub fn value_offset(&self, key: &str) -> Option<u64> {
        let i = self.kv.iter().position(|(k, _)| k == key)?;
        self.value_offsets.get(i).copied()
    }

    /// The tensor named `name`, if present.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The data bytes of `t`, which must come from this file's `tensors` (another `TensorInfo`
    /// yields whatever its range covers, or an empty slice when it is out of range).
    pub fn tensor_data(&self, t: &TensorInfo) -> &'a [u8] {
        let bytes: &'a [u8] = self.bytes;
        usize::try_from(t.offset)
            .ok()
            .zip(usize::try_from(t.size).ok())
            .and_then(|(start, len)| bytes.get(start..start.checked_add(len)?))
            .unwrap_or(&[])
    }

    /// The whole file.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

/// Bytes of a tensor of type `ty` and shape `ne`, with the shape rules of §1–§2 checked.
pub(crate) fn tensor_size(name: &str, ne: &[u64], ty: GgmlType) -> Result<u64, FormatError> {
    let bad = |reason: String| FormatError::BadTensor { name: name.to_string(), reason };
    if ne.is_empty() || ne.len() > 4 {
        return Err(bad(format!("{} dimensions; Laya tensors have 1 to 4", ne.len())));
    }
    if let Some(d) = ne.iter().position(|&n| n == 0) {
        return Err(bad(format!("dimension {d} is zero")));
    }
    let bs = ty.block_size() as u64;
    if !ne[0].is_multiple_of(bs) {
        return Err(bad(format!("ne[0] = {} is not a multiple of {bs}, the block size of {}", ne[0], ty.name())));
    }
    let too_large = || FormatError::TooLarge { what: format!("size of tensor '{name}'"), value: u64::MAX, limit: u64::MAX };
    let row = (ne[0] / bs).checked_mul(ty.block_bytes() as u64).ok_or_else(too_large)?;
    ne[1..].iter().try_fold(row, |acc, &n| acc.checked_mul(n)).ok_or_else(too_large)
}

pub(crate) fn align_up(x: u64, alignment: u64) -> Option<u64> {
    let mask = alignment.checked_sub(1)?;
    x.checked_add(mask).map(|v| v & !mask)
}

/// Whether a parse reads the padding between the header, the tensors and the end.
#[derive(Clone, Copy)]
enum Padding {
    /// Every padding byte must be zero.
    Check,
    /// Bytes validated in full before ([`GgufFile::parse_static_counting`]): not read.
    Vouched,
}

fn check_zero(bytes: &[u8], start: u64, end: u64, what: &str) -> Result<(), FormatError> {
    let (s, e) = (start as usize, (end as usize).min(bytes.len()));
    if s >= e {
        return Ok(());
    }
    match bytes[s..e].iter().position(|&b| b != 0) {
        None => Ok(()),
        Some(i) => Err(FormatError::BadPadding { offset: start + i as u64, reason: format!("non-zero byte in {what}") }),
    }
}

/// A bounds-checked little-endian cursor.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// `bytes` again when they live for the whole program: string arrays are then read in
    /// place, not copied ([`Reader::one_pass_string_array`]).
    statics: Option<&'static [u8]>,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], FormatError> {
        let bytes: &'a [u8] = self.bytes;
        match self.pos.checked_add(n).and_then(|end| bytes.get(self.pos..end)) {
            Some(s) => {
                self.pos += n;
                Ok(s)
            }
            None => Err(FormatError::Truncated { what: what.to_string(), offset: self.pos as u64 }),
        }
    }

    fn array4(&mut self, what: &str) -> Result<[u8; 4], FormatError> {
        let s = self.take(4, what)?;
        Ok([s[0], s[1], s[2], s[3]])
    }

    fn array8(&mut self, what: &str) -> Result<[u8; 8], FormatError> {
        let s = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &str) -> Result<u32, FormatError> {
        Ok(u32::from_le_bytes(self.array4(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, FormatError> {
        Ok(u64::from_le_bytes(self.array8(what)?))
    }

    /// Rejects a declared count of items of at least `min_size` bytes each that cannot fit in
    /// the rest of the file, and returns a safe capacity to pre-allocate.
    /// At an array value: when its elements are `u32`, checks that they are all there and
    /// steps over them, returning their count; otherwise reads nothing and returns `None`.
    fn count_u32_array(&mut self, what: &str) -> Result<Option<u64>, FormatError> {
        let at = self.pos;
        if self.u32(what)? != ValueType::U32 as u32 {
            self.pos = at;
            return Ok(None);
        }
        let count = self.u64(what)?;
        let n = self.bounded_count(count, 4, what)?;
        self.take(n * 4, what)?;
        Ok(Some(count))
    }

    fn bounded_count(&self, count: u64, min_size: usize, what: &str) -> Result<usize, FormatError> {
        let fits = (self.remaining() / min_size.max(1)) as u64;
        if count > fits {
            return Err(FormatError::Truncated { what: format!("{what} ({count})"), offset: self.pos as u64 });
        }
        Ok(count as usize)
    }

    fn string(&mut self, what: &str, max_len: u64) -> Result<String, FormatError> {
        self.string_lazy(max_len, &|| what.to_string())
    }

    /// Reads a string, building the description only on error.
    fn string_lazy(&mut self, max_len: u64, what: &dyn Fn() -> String) -> Result<String, FormatError> {
        let start = self.pos as u64;
        let raw = self.raw_string(max_len, what)?;
        match std::str::from_utf8(raw) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => Err(FormatError::BadUtf8 { what: what(), offset: start }),
        }
    }

    /// Reads a length-prefixed string's bytes, not yet checked as UTF-8.
    fn raw_string(&mut self, max_len: u64, what: &dyn Fn() -> String) -> Result<&'a [u8], FormatError> {
        let start = self.pos as u64;
        let truncated = || FormatError::Truncated { what: what(), offset: start };
        let len_bytes = self.bytes.get(self.pos..self.pos.saturating_add(8)).ok_or_else(truncated)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(len_bytes);
        let len = u64::from_le_bytes(a);
        if len > max_len {
            return Err(FormatError::TooLarge { what: format!("length of {}", what()), value: len, limit: max_len });
        }
        if len > (self.remaining() - 8) as u64 {
            return Err(truncated());
        }
        let body = self.pos + 8;
        let end = body + len as usize;
        let bytes: &'a [u8] = self.bytes;
        let raw = bytes.get(body..end).ok_or_else(truncated)?;
        self.pos = end;
        Ok(raw)
    }

    fn value(&mut self, ty: ValueType, what: &str, depth: u32) -> Result<Value, FormatError> {
        Ok(match ty {
            ValueType::U8 => Value::U8(self.take(1, what)?[0]),
            ValueType::I8 => Value::I8(self.take(1, what)?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.fixed(what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.fixed(what)?)),
            ValueType::U32 => Value::U32(self.u32(what)?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.fixed(what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.fixed(what)?)),
            ValueType::Bool => Value::Bool(self.bool(what)?),
            ValueType::String => Value::String(self.string(what, u64::MAX)?),
            ValueType::Array => Value::Array(self.array(what, depth)?),
            ValueType::U64 => Value::U64(self.u64(what)?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.fixed(what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.fixed(what)?)),
        })
    }

    fn fixed<const N: usize>(&mut self, what: &str) -> Result<[u8; N], FormatError> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn bool(&mut self, what: &str) -> Result<bool, FormatError> {
        let offset = self.pos;
        match self.take(1, what)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(FormatError::InvalidValue { key: what.to_string(), reason: format!("bool byte at {offset} is {b}, must be 0 or 1") }),
        }
    }

    fn array(&mut self, what: &str, depth: u32) -> Result<Array, FormatError> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(FormatError::TooLarge {
                what: format!("array nesting depth of {what}"),
                value: u64::from(depth + 1),
                limit: u64::from(MAX_ARRAY_DEPTH),
            });
        }
        let elem_id = self.u32(what)?;
        let elem =
            ValueType::from_id(elem_id).ok_or_else(|| FormatError::BadValueType { what: format!("element of {what}"), id: elem_id })?;
        let count = self.u64(what)?;
        let n = self.bounded_count(count, elem.min_size(), what)?;

        macro_rules! fixed_array {
            ($variant:ident, $t:ty) => {{
                let size = std::mem::size_of::<$t>();
                let raw = self.take(n * size, what)?;
                Array::$variant(
                    raw.chunks_exact(size)
                        .map(|c| {
                            let mut a = [0u8; std::mem::size_of::<$t>()];
                            a.copy_from_slice(c);
                            <$t>::from_le_bytes(a)
                        })
                        .collect(),
                )
            }};
        }

        Ok(match elem {
            ValueType::U8 => Array::U8(self.take(n, what)?.to_vec()),
            ValueType::I8 => Array::I8(self.take(n, what)?.iter().map(|&b| b as i8).collect()),
            ValueType::U16 => fixed_array!(U16, u16),
            ValueType::I16 => fixed_array!(I16, i16),
            ValueType::U32 => fixed_array!(U32, u32),
            ValueType::I32 => fixed_array!(I32, i32),
            ValueType::F32 => fixed_array!(F32, f32),
            ValueType::U64 => fixed_array!(U64, u64),
            ValueType::I64 => fixed_array!(I64, i64),
            ValueType::F64 => fixed_array!(F64, f64),
            ValueType::Bool => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.bool(what)?);
                }
                Array::Bool(v)
            }
            ValueType::String => Array::String(self.string_array(n, what)?),
            ValueType::Array => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.array(what, depth + 1)?);
                }
                Array::Array(v)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An element: a string of characters from every UTF-8 width, raw bytes (often not UTF-8),
    /// a truncated character, or a string on either side of the fast path's 128-byte limit.
    fn element() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            4 => prop::collection::vec(prop::sample::select(vec!['a', '~', 'é', '明', '，', '😀', '\u{0}']), 0..12)
                .prop_map(|cs| cs.into_iter().collect::<String>().into_bytes()),
            1 => prop::collection::vec(any::<u8>(), 0..6),
            // A character cut short, which the next length's first byte would complete if it
            // could be 0x80-0xBF: a length of 128-191 bytes.
            1 => prop::sample::select(vec![vec![0xC3], vec![0xE6, 0x98], vec![0xF0, 0x9F, 0x98]]),
            1 => (120usize..140).prop_map(|n| "x".repeat(n).into_bytes()),
        ]
    }

    proptest! {
        /// The one-pass path reads what the general path reads, takes every valid array of
        /// elements shorter than 128 bytes, and leaves what it does not take (malformed arrays
        /// included) to the general path untouched.
        #[test]
        fn one_pass_string_arrays_read_as_any_string_array_does(
            elements in prop::collection::vec(element(), 0..20),
            cut in any::<prop::sample::Index>(),
            truncate in any::<bool>(),
        ) {
            let mut bytes = Vec::new();
            for e in &elements {
                bytes.extend_from_slice(&(e.len() as u64).to_le_bytes());
                bytes.extend_from_slice(e);
            }
            if truncate {
                bytes.truncate(cut.index(bytes.len() + 1));
            }
            let n = elements.len();
            let mut fast = Reader { bytes: &bytes, pos: 0, statics: None };
            let mut general = Reader { bytes: &bytes, pos: 0, statics: None };
            let (f, g) = (fast.one_pass_string_array(n), general.any_string_array(n, "x"));
            // The same bytes as a program's static data: read in place, with the same result,
            // unless a length has a byte of 0x80 or more (then nothing is read).
            let leaked: &'static [u8] = bytes.clone().leak();
            let mut in_place = Reader { bytes: leaked, pos: 0, statics: Some(leaked) };
            match in_place.one_pass_string_array(n) {
                Some(list) => {
                    prop_assert!(!list.is_contiguous() || n == 0);
                    prop_assert_eq!(Some(&list), f.as_ref());
                    prop_assert_eq!(in_place.pos, fast.pos);
                }
                None => {
                    prop_assert_eq!(in_place.pos, 0);
                    prop_assert!(f.is_none() || elements.iter().any(|e| e.len() >= 128), "kept in place: {f:?}");
                }
            }
            match (&f, &g) {
                (Some(f), Ok(g)) => {
                    prop_assert_eq!(f, g);
                    prop_assert_eq!(f.iter().collect::<Vec<_>>(), g.iter().collect::<Vec<_>>());
                    prop_assert_eq!(fast.pos, general.pos);
                }
                (None, _) => {
                    prop_assert_eq!(fast.pos, 0);
                    let short = elements.iter().all(|e| e.len() < 128);
                    prop_assert!(g.is_err() || !short, "the fast path refused a short, valid array");
                }
                (Some(_), Err(e)) => prop_assert!(false, "fast path read an array the general path refuses: {e}"),
            }
        }
    }
}
