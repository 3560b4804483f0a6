//! Q8_0 weights repacked for the VNNI kernels ([`PackedQ8`]), and their scalar twin.
//!
//! The row-major Q8_0 layout of the file makes an int8 kernel finish every (row, position)
//! pair with a horizontal sum, and load a 2-byte scale per row and block: on an AVX-512 VNNI
//! core that bookkeeping, not `vpdpbusd`, bounded the word head (benchmarks/README.md). The
//! packed layout puts **16 rows side by side** so that one 512-bit register holds four
//! consecutive weights of each of 16 rows, and `vpdpbusd` against four broadcast activation
//! bytes adds one partial dot product to each row's own lane: after the eight 4-byte steps of a
//! block, lane `r` holds row `r`'s exact block dot product. No horizontal sums, one vector of
//! 16 scales per block, and the 16 outputs of a position are stored with one instruction.
//!
//! # Layout
//!
//! Rows are taken in groups of 16 (the last group padded with zero rows of scale 0). A group
//! of a matrix with `nb = cols / 32` blocks is `stride` bytes, 64-byte aligned:
//!
//! | offset | bytes | content |
//! |---|---|---|
//! | `32·b + 2·r` | 2 | f16 scale of row `r` (0..16) in block `b` |
//! | `scales + 64·(8·b + k) + 4·r + j` | 1 | `w[r][32·b + 4·k + j] + 128` as u8 (`k` 0..8, `j` 0..4) |
//!
//! where `scales = round_up(32·nb, 64)` and `stride = scales + 512·nb`. The weights are stored
//! with the `+128` offset already applied (the "offset trick" of `q8_x86.rs`: `vpdpbusd`
//! multiplies unsigned by signed bytes), so the kernel's only correction is `−128·Σx` per
//! activation block, which [`ActBlock`] carries precomputed. Each lane holds a whole block's
//! dot product, so the correction is exact in i32 and costs no precision.

use crate::q8::{ActBlock, Q8_BYTES};
use crate::{scalar, KernelError, Matrix, WType, QK};

/// Rows interleaved in one group of a [`PackedQ8`].
pub const PACK_ROWS: usize = 16;

/// One 64-byte line; a `Vec` of these is a 64-byte aligned byte buffer without `unsafe`
/// allocation code.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

const _: () = assert!(core::mem::size_of::<Line>() == 64);
const _: () = assert!(core::mem::align_of::<Line>() == 64);

/// A Q8_0 matrix repacked for [`crate::Kernels::matmul_q8_packed`]: 16 rows interleaved so that
/// VNNI kernels need no horizontal sums (layout in the module source, `packed.rs`). Made once,
/// at model load, from the file's row-major Q8_0 bytes; it owns its (64-byte aligned) copy, a
/// few percent larger than the original.
///
/// ```
/// use laya_kernels::{ActBlock, Kernels, Matrix, PackedQ8, WType};
/// // Two Q8_0 rows of 32: scale 1.0 (f16 0x3C00), values 1 and -2.
/// let mut w = Vec::new();
/// for v in [1i8, -2] {
///     w.extend([0x00, 0x3C]);
///     w.extend(std::iter::repeat(v as u8).take(32));
/// }
/// let m = Matrix::new(WType::Q8_0, 2, 32, &w).unwrap();
/// let p = PackedQ8::new(&m).unwrap();
/// let k = Kernels::detect();
/// let mut xq = [ActBlock::ZERO; 1];
/// k.quantize_act(&[1.0; 32], &mut xq);
/// let mut y = [0.0f32; 2];
/// k.matmul_q8_packed(&p, &xq, 1, None, &mut y);
/// assert!((y[0] - 32.0).abs() < 1e-3 && (y[1] + 64.0).abs() < 1e-3);
/// ```
#[derive(Clone)]
pub struct PackedQ8 {
    rows: usize,
    cols: usize,
    groups: usize,
    scales: usize,
    stride: usize,
    buf: Vec<Line>,
}

impl PackedQ8 {
    /// Repacks a Q8_0 matrix. Errors if `w` is of another type.
    pub fn new(w: &Matrix) -> Result<PackedQ8, KernelError> {
        if w.ty != WType::Q8_0 {
            return Err(KernelError::NotQ8_0 { ty: w.ty });
        }
        // Re-validates the byte length against the shape (a hand-built Matrix may lie).
        let w = Matrix::new(w.ty, w.rows, w.cols, w.data)?;
        let nb = w.cols / QK;
        let groups = w.rows.div_ceil(PACK_ROWS);
        let scales = (32 * nb).div_ceil(64) * 64;
        let stride = scales + 512 * nb;
        let lines = groups
            .checked_mul(stride / 64)
            .ok_or(KernelError::SizeOverflow { rows: w.rows, cols: w.cols })?;
        let mut buf = vec![Line([0x80; 64]); lines];
        for g in 0..groups {
            let group = &mut buf[g * stride / 64..(g + 1) * stride / 64];
            // Weights start as 0x80 (weight 0) and scales as 0, so padding rows add exactly 0.
            for line in &mut group[..scales / 64] {
                line.0 = [0; 64];
            }
            for r in 0..PACK_ROWS.min(w.rows - g * PACK_ROWS) {
                let row = w.row(g * PACK_ROWS + r);
                for b in 0..nb {
                    let blk = &row[b * Q8_BYTES..][..Q8_BYTES];
                    let at = 32 * b + 2 * r;
                    group[at / 64].0[at % 64..at % 64 + 2].copy_from_slice(&blk[..2]);
                    for k in 0..8 {
                        for j in 0..4 {
                            let at = scales + 64 * (8 * b + k) + 4 * r + j;
                            group[at / 64].0[at % 64] = blk[2 + 4 * k + j] ^ 0x80;
                        }
                    }
                }
            }
        }
        Ok(PackedQ8 { rows: w.rows, cols: w.cols, groups, scales, stride, buf })
    }

    /// Output rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Heap bytes of the packed copy.
    pub fn heap_bytes(&self) -> usize {
        self.buf.len() * 64
    }

    pub(crate) fn groups(&self) -> usize {
        self.groups
    }

    /// Byte offset of the weight area inside a group.
    pub(crate) fn scales(&self) -> usize {
        self.scales
    }

    /// Bytes per group of 16 rows.
    pub(crate) fn stride(&self) -> usize {
        self.stride
    }

    /// The packed bytes, `groups · stride` of them, 64-byte aligned.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `Line` is `repr(C)` around `[u8; 64]` with size 64 (asserted above), so the
        // vector's storage is `len * 64` initialised bytes with no padding, borrowed for the
        // lifetime of `&self`.
        unsafe { core::slice::from_raw_parts(self.buf.as_ptr() as *const u8, self.buf.len() * 64) }
    }
}

impl core::fmt::Debug for PackedQ8 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "PackedQ8 {{ rows: {}, cols: {}, groups: {} }}", self.rows, self.cols, self.groups)
    }
}

/// Scalar twin of `Kernels::matmul_q8_packed`: the same arithmetic, in the same order, as the
/// row-major twin `q8::matmul`, so the two agree bit for bit.
pub(crate) fn matmul(w: &PackedQ8, xq: &[ActBlock], n_pos: usize, bias: Option<&[f32]>, y: &mut [f32]) {
    let (rows, nb) = (w.rows, w.cols / QK);
    let data = w.bytes();
    for o in 0..rows {
        let (g, r) = (o / PACK_ROWS, o % PACK_ROWS);
        let group = &data[g * w.stride..][..w.stride];
        for p in 0..n_pos {
            let xr = &xq[p * nb..][..nb];
            let mut acc = 0.0f32;
            for (b, xb) in xr.iter().enumerate() {
                let dw = scalar::f16_to_f32(u16::from_le_bytes([group[32 * b + 2 * r], group[32 * b + 2 * r + 1]]));
                let mut isum = 0i32;
                for k in 0..8 {
                    let at = w.scales + 64 * (8 * b + k) + 4 * r;
                    for j in 0..4 {
                        isum += (group[at + j] as i32 - 128) * xb.qs[4 * k + j] as i32;
                    }
                }
                acc += (dw * xb.d) * isum as f32;
            }
            y[p * rows + o] = acc + bias.map_or(0.0, |b| b[o]);
        }
    }
}
