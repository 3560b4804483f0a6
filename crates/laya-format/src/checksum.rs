//! The §6 checksum: XXH3-64 of the whole file with the `laya.checksum` value read as zero.

use std::hash::Hasher as _;

use twox_hash::XxHash3_64;

use crate::error::FormatError;
use crate::gguf::{GgufFile, Value};
use crate::schema::keys;

/// Stored and computed checksum of a file, for tools that report rather than refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChecksumReport {
    pub stored: u64,
    pub computed: u64,
}

impl ChecksumReport {
    pub fn is_ok(&self) -> bool {
        self.stored == self.computed
    }
}

/// The §6 checksum of a model file: XXH3-64 of all bytes with the `laya.checksum` value read
/// as zero. Fails when the container is malformed or has no u64 `laya.checksum` key.
///
/// ```
/// use laya_format::{checksum, testing, write_model, GgmlType, LayaFile};
/// let (meta, tensors) = testing::random_model(&testing::TinyConfig::small(), 5, GgmlType::F16);
/// let bytes = write_model(&meta, &tensors)?;
/// assert_eq!(checksum(&bytes)?, LayaFile::parse(&bytes)?.checksum);
/// # Ok::<(), laya_format::FormatError>(())
/// ```
pub fn checksum(bytes: &[u8]) -> Result<u64, FormatError> {
    let file = GgufFile::parse(bytes)?;
    Ok(checksum_at(bytes, checksum_slot(&file)?))
}

/// Stored and computed checksum, without failing on a mismatch (for `laya inspect`).
pub fn checksum_report(bytes: &[u8]) -> Result<ChecksumReport, FormatError> {
    let file = GgufFile::parse(bytes)?;
    checksum_report_of(&file)
}

pub(crate) fn checksum_report_of(file: &GgufFile<'_>) -> Result<ChecksumReport, FormatError> {
    let slot = checksum_slot(file)?;
    let stored = file.get(keys::CHECKSUM).and_then(Value::as_u64).unwrap_or(0);
    Ok(ChecksumReport { stored, computed: checksum_at(file.bytes(), slot) })
}

/// Offset of the 8 value bytes of `laya.checksum`.
pub(crate) fn checksum_slot(file: &GgufFile<'_>) -> Result<usize, FormatError> {
    match file.get(keys::CHECKSUM) {
        None => Err(FormatError::MissingKey(keys::CHECKSUM.into())),
        Some(Value::U64(_)) => {
            file.value_offset(keys::CHECKSUM).map(|o| o as usize).ok_or_else(|| FormatError::MissingKey(keys::CHECKSUM.into()))
        }
        Some(v) => Err(FormatError::WrongKeyType { key: keys::CHECKSUM.into(), expected: "u64".into(), found: v.type_name() }),
    }
}

pub(crate) fn checksum_at(bytes: &[u8], slot: usize) -> u64 {
    let mut h = XxHash3_64::with_seed(0);
    let slot = slot.min(bytes.len());
    h.write(&bytes[..slot]);
    let after = slot.saturating_add(8).min(bytes.len());
    h.write(&[0u8; 8][..after - slot]);
    h.write(&bytes[after..]);
    h.finish()
}
