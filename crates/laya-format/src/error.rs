//! The one error type of this crate.

use std::fmt;

use crate::types::GgmlType;

/// Everything that can be wrong with a GGUF container or a Laya model file.
///
/// Messages name the key, tensor or byte offset at fault and, where the fix is not obvious,
/// what was expected instead, so `laya inspect` can print them as they are.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum FormatError {
    /// The file ends (or a declared length runs) past the end of the bytes.
    Truncated { what: String, offset: u64 },
    /// The first four bytes are not `GGUF`.
    BadMagic { found: [u8; 4] },
    /// A GGUF container version other than 3.
    UnsupportedVersion(u32),
    /// A `laya.format_version` this reader does not know.
    UnsupportedFormatVersion { found: u32, supported: u32 },
    /// A metadata value type id outside 0..=12.
    BadValueType { what: String, id: u32 },
    /// A string that is not valid UTF-8.
    BadUtf8 { what: String, offset: u64 },
    /// A count, size or nesting depth beyond what this reader accepts.
    TooLarge { what: String, value: u64, limit: u64 },
    /// A required key is absent.
    MissingKey(String),
    /// A key has a value of another type than the specification requires.
    WrongKeyType { key: String, expected: String, found: String },
    /// A key has the right type but a value outside the allowed range or set.
    InvalidValue { key: String, reason: String },
    /// A `laya.*` key that this format version does not define.
    UnknownKey(String),
    /// The same key appears twice.
    DuplicateKey(String),
    /// A tensor name outside the table of docs/format.md §7.
    UnknownTensor(String),
    /// A required tensor is absent.
    MissingTensor(String),
    /// Two tensors have the same name.
    DuplicateTensor(String),
    /// A ggml type id this reader does not support (anything but 0, 1, 2, 3, 8, 30).
    UnknownTensorType { name: String, id: u32 },
    /// A supported type that is not allowed for this particular tensor.
    UnsupportedTensorType { name: String, ty: GgmlType, allowed: Vec<GgmlType> },
    /// A tensor whose dimensions are malformed on their own (bad rank, a zero dimension,
    /// a row length that is not a whole number of quantisation blocks).
    BadTensor { name: String, reason: String },
    /// A tensor whose shape disagrees with the hyper-parameters.
    BadShape { name: String, expected: Vec<u64>, found: Vec<u64>, rule: String },
    /// A tensor whose data lies outside the data section or overlaps another tensor.
    BadOffset { name: String, offset: u64, size: u64, reason: String },
    /// A tensor offset that is not a multiple of `general.alignment`.
    Misaligned { name: String, offset: u64, alignment: u64 },
    /// A padding byte that is not zero, or bytes after the last tensor.
    BadPadding { offset: u64, reason: String },
    /// The stored `laya.checksum` differs from the checksum of the bytes.
    ChecksumMismatch { stored: u64, computed: u64 },
    /// A NaN or infinity in a tensor that must be finite.
    NonFinite { name: String, index: usize },
    /// A lexicon word that breaks a rule of `laya.lexicon.words`.
    Lexicon { index: usize, reason: String },
    /// Tensor data of the wrong byte length for its type and shape.
    DataSize { name: String, expected: u64, found: u64 },
    /// A value count that does not fit the quantisation block size.
    BadLength { what: String, len: usize, reason: String },
}

fn shape(ne: &[u64]) -> String {
    let parts: Vec<String> = ne.iter().map(|n| n.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use FormatError::*;
        match self {
            Truncated { what, offset } => write!(f, "file is truncated or damaged: {what} at byte {offset} runs past the end of the file"),
            BadMagic { found } => write!(f, "not a GGUF file: the first bytes are {found:02x?}, expected \"GGUF\" (47 47 55 46)"),
            UnsupportedVersion(v) => write!(f, "GGUF version {v} is not supported; Laya reads GGUF version 3 only (re-export the model)"),
            UnsupportedFormatVersion { found, supported } => write!(
                f,
                "laya.format_version = {found} is not supported by this reader, which knows version \
                 {supported}; use a runtime that matches the model (or re-export the model)"
            ),
            BadValueType { what, id } => {
                write!(f, "{what} has unknown value type id {id} (GGUF defines 0..=12)")
            }
            BadUtf8 { what, offset } => write!(f, "{what} at byte {offset} is not valid UTF-8"),
            TooLarge { what, value, limit } => {
                write!(f, "{what} is {value}, more than the limit of {limit}")
            }
            MissingKey(k) => write!(f, "required key '{k}' is missing (see docs/format.md §4)"),
            WrongKeyType { key, expected, found } => {
                write!(f, "key '{key}' has type {found} but must be {expected}")
            }
            InvalidValue { key, reason } => write!(f, "key '{key}' is invalid: {reason}"),
            UnknownKey(k) => write!(
                f,
                "unknown key '{k}': laya.* keys may change the forward pass, so a reader refuses \
                 keys it does not know (a newer runtime may be needed)"
            ),
            DuplicateKey(k) => write!(f, "key '{k}' appears more than once"),
            UnknownTensor(n) => write!(
                f,
                "unknown tensor '{n}': not a Laya tensor name (docs/format.md §7), or a block index \
                 beyond laya.block_count"
            ),
            MissingTensor(n) => write!(f, "required tensor '{n}' is missing"),
            DuplicateTensor(n) => write!(f, "tensor '{n}' appears more than once"),
            UnknownTensorType { name, id } => write!(
                f,
                "tensor '{name}' has ggml type id {id}, which Laya does not support (supported: \
                 F32=0, F16=1, Q4_0=2, Q4_1=3, Q8_0=8, BF16=30)"
            ),
            UnsupportedTensorType { name, ty, allowed } => {
                let allowed: Vec<&str> = allowed.iter().map(|t| t.name()).collect();
                write!(f, "tensor '{name}' has type {} but must be one of {}", ty.name(), allowed.join(", "))
            }
            BadTensor { name, reason } => write!(f, "tensor '{name}' is malformed: {reason}"),
            BadShape { name, expected, found, rule } => {
                write!(f, "tensor '{name}' has shape {} but {rule} requires {}", shape(found), shape(expected))
            }
            BadOffset { name, offset, size, reason } => write!(f, "tensor '{name}' (offset {offset}, {size} bytes) is misplaced: {reason}"),
            Misaligned { name, offset, alignment } => write!(
                f,
                "tensor '{name}' starts at data offset {offset}, which is not a multiple of \
                 general.alignment = {alignment}"
            ),
            BadPadding { offset, reason } => write!(f, "bad padding at byte {offset}: {reason}"),
            ChecksumMismatch { stored, computed } => write!(
                f,
                "checksum mismatch: laya.checksum is {stored:#018x} but the file hashes to \
                 {computed:#018x}; the file is corrupted or was edited without re-patching the \
                 checksum"
            ),
            NonFinite { name, index } => {
                write!(f, "tensor '{name}' has a NaN or infinite value at element {index}")
            }
            Lexicon { index, reason } => {
                write!(f, "laya.lexicon.words[{index}] is invalid: {reason}")
            }
            DataSize { name, expected, found } => {
                write!(f, "tensor '{name}' has {found} bytes of data but its type and shape need {expected}")
            }
            BadLength { what, len, reason } => write!(f, "{what} has {len} values: {reason}"),
        }
    }
}

impl std::error::Error for FormatError {}
