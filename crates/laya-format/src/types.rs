//! The tensor-type table: the one definition of every storage type a Laya file may use. Ids,
//! names and byte sizes all derive from [`TYPES`], in the manner of ggml's type-traits table; the
//! kernels, the quantiser and the parser read it instead of writing their own sizes.

use std::fmt;

/// Values per block of the block-quantised types.
pub const QK: usize = 32;

/// The tensor element types a Laya file may use (docs/format.md §2), byte-compatible with the
/// ggml types of the same name.
///
/// ```
/// use laya_format::GgmlType;
/// assert_eq!(GgmlType::from_id(8), Some(GgmlType::Q8_0));
/// assert_eq!(GgmlType::Q8_0.block_bytes(), 34);
/// assert_eq!(GgmlType::Q8_0.row_bytes(64), Some(68));
/// assert_eq!(GgmlType::Q8_0.row_bytes(40), None); // not a whole number of blocks
/// ```
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    /// IEEE binary32, little endian.
    F32,
    /// IEEE binary16, little endian.
    F16,
    /// 18-byte blocks of 32: `f16 d; u8 qs[16]`, low nibbles first, `x = d·(q−8)`.
    Q4_0,
    /// 20-byte blocks of 32: `f16 d; f16 m; u8 qs[16]`, low nibbles first, `x = d·q + m`.
    Q4_1,
    /// 34-byte blocks of 32: `f16 d; i8 qs[32]`, `x = d·q`.
    Q8_0,
    /// 16-bit integer, little endian. Laya reads it as unsigned (word positions and counts of
    /// the n-gram tables, docs/format.md §8).
    I16,
    /// 32-bit signed integer, little endian.
    I32,
    /// bfloat16 (the upper half of a binary32), little endian.
    BF16,
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct TypeTraits {
    /// The type this row describes.
    pub ty: GgmlType,
    /// The ggml type id stored in a tensor-info record.
    pub id: u32,
    /// The ggml spelling of the name.
    pub name: &'static str,
    /// Values per block: 1 for float and integer types, [`QK`] for quantised ones.
    pub block_size: usize,
    /// Bytes of a block's scale and offset fields (f16 each) before its values.
    pub header_bytes: usize,
    /// Bits per stored value.
    pub bits: usize,
}

/// Every supported type, in id order; `TYPES[t as usize].ty == t`.
pub const TYPES: [TypeTraits; 8] = [
    TypeTraits { ty: GgmlType::F32, id: 0, name: "F32", block_size: 1, header_bytes: 0, bits: 32 },
    TypeTraits { ty: GgmlType::F16, id: 1, name: "F16", block_size: 1, header_bytes: 0, bits: 16 },
    TypeTraits { ty: GgmlType::Q4_0, id: 2, name: "Q4_0", block_size: QK, header_bytes: 2, bits: 4 },
    TypeTraits { ty: GgmlType::Q4_1, id: 3, name: "Q4_1", block_size: QK, header_bytes: 4, bits: 4 },
    TypeTraits { ty: GgmlType::Q8_0, id: 8, name: "Q8_0", block_size: QK, header_bytes: 2, bits: 8 },
    TypeTraits { ty: GgmlType::I16, id: 25, name: "I16", block_size: 1, header_bytes: 0, bits: 16 },
    TypeTraits { ty: GgmlType::I32, id: 26, name: "I32", block_size: 1, header_bytes: 0, bits: 32 },
    TypeTraits { ty: GgmlType::BF16, id: 30, name: "BF16", block_size: 1, header_bytes: 0, bits: 16 },
];

impl GgmlType {
    /// Every supported type, in id order.
    pub const ALL: [GgmlType; 8] =
        [GgmlType::F32, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::I16, GgmlType::I32, GgmlType::BF16];

    /// The types that hold weights (every type but the integer tables), in id order.
    pub const WEIGHTS: [GgmlType; 6] = [GgmlType::F32, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::BF16];

    /// This type's row of [`TYPES`].
    pub const fn traits(self) -> &'static TypeTraits {
        &TYPES[self as usize]
    }

    /// The ggml type id stored in the file.
    pub const fn id(self) -> u32 {
        self.traits().id
    }

    /// The type with ggml id `id`, if Laya supports it.
    pub const fn from_id(id: u32) -> Option<Self> {
        let mut i = 0;
        while i < TYPES.len() {
            if TYPES[i].id == id {
                return Some(TYPES[i].ty);
            }
            i += 1;
        }
        None
    }

    /// The ggml name, e.g. `Q4_0`.
    pub const fn name(self) -> &'static str {
        self.traits().name
    }

    /// Values per block: [`QK`] for the quantised types, 1 otherwise.
    pub const fn block_size(self) -> usize {
        self.traits().block_size
    }

    /// Bytes per block: its header and its values.
    pub const fn block_bytes(self) -> usize {
        let t = self.traits();
        t.header_bytes + t.block_size * t.bits / 8
    }

    /// Whether the type holds integers (the n-gram tables), not numbers a kernel multiplies.
    pub const fn is_integer(self) -> bool {
        matches!(self, GgmlType::I16 | GgmlType::I32)
    }

    /// Whether the type is block-quantised (rows must be a multiple of [`QK`] long).
    pub const fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Bytes taken by `n` consecutive elements (one row along `ne[0]`); `None` when `n` is not a
    /// whole number of blocks or the size overflows.
    pub const fn row_bytes(self, n: usize) -> Option<usize> {
        if !n.is_multiple_of(self.block_size()) {
            return None;
        }
        (n / self.block_size()).checked_mul(self.block_bytes())
    }

    /// Bytes of `n` elements rounded up to whole blocks, saturating at `usize::MAX` (for sizing
    /// checks that report the mismatch themselves).
    pub const fn row_bytes_rounded(self, n: usize) -> usize {
        n.div_ceil(self.block_size()).saturating_mul(self.block_bytes())
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_rows_are_in_enum_order_and_ids_round_trip() {
        for (i, t) in GgmlType::ALL.into_iter().enumerate() {
            assert_eq!(TYPES[t as usize].ty, t);
            assert_eq!(GgmlType::from_id(t.id()), Some(t), "{i}");
        }
        assert_eq!(GgmlType::from_id(6), None);
    }

    #[test]
    fn block_bytes_are_ggmls() {
        let bytes: Vec<usize> = GgmlType::ALL.iter().map(|t| t.block_bytes()).collect();
        assert_eq!(bytes, [4, 2, 18, 20, 34, 2, 4, 2]);
    }
}
