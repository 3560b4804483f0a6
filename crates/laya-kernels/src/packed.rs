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
use crate::{scalar, GgmlType, KernelError, Matrix, QK};

/// Every id names a row of `w`.
fn check_ids(w: &Matrix, ids: &[u32]) -> Result<(), KernelError> {
    match ids.iter().find(|&&i| i as usize >= w.rows) {
        Some(&row) => Err(KernelError::RowOutOfRange { row: row as usize, rows: w.rows }),
        None => Ok(()),
    }
}

/// Rows interleaved in one group of a [`PackedQ8`].
pub const PACK_ROWS: usize = 16;

/// One 64-byte line; a `Vec` of these is a 64-byte aligned byte buffer without `unsafe`
/// allocation code.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

const _: () = assert!(core::mem::size_of::<Line>() == 64);
const _: () = assert!(core::mem::align_of::<Line>() == 64);

/// The accessors and `Debug` that [`PackedQ8`] and [`PackedQ4`] share (both hold `rows`, `cols`,
/// `groups`, `stride` and the 64-byte aligned `buf`).
macro_rules! packed_common {
    ($t:ident) => {
        impl $t {
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

            /// Groups of 16 rows (the last one padded).
            pub(crate) fn groups(&self) -> usize {
                self.groups
            }

            /// Bytes per group.
            pub(crate) fn stride(&self) -> usize {
                self.stride
            }

            /// The packed bytes, `groups · stride` of them, 64-byte aligned.
            pub(crate) fn bytes(&self) -> &[u8] {
                // SAFETY: `Line` is `repr(C)` around `[u8; 64]` with size 64 (asserted above),
                // so the vector's storage is `len * 64` initialised bytes with no padding,
                // borrowed for the lifetime of `&self`.
                unsafe { core::slice::from_raw_parts(self.buf.as_ptr() as *const u8, self.buf.len() * 64) }
            }
        }

        impl core::fmt::Debug for $t {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, "{} {{ rows: {}, cols: {}, groups: {} }}", stringify!($t), self.rows, self.cols, self.groups)
            }
        }
    };
}

/// A Q8_0 matrix repacked for [`crate::Kernels::matmul_q8_packed`]: 16 rows interleaved so that
/// VNNI kernels need no horizontal sums (layout in the module source, `packed.rs`). Made once,
/// at model load, from the file's row-major Q8_0 bytes; it owns its (64-byte aligned) copy, a
/// few percent larger than the original.
///
/// ```
/// use laya_kernels::{ActBlock, Kernels, Matrix, PackedQ8, GgmlType};
/// // Two Q8_0 rows of 32: scale 1.0 (f16 0x3C00), values 1 and -2.
/// let mut w = Vec::new();
/// for v in [1i8, -2] {
///     w.extend([0x00, 0x3C]);
///     w.extend(std::iter::repeat(v as u8).take(32));
/// }
/// let m = Matrix::new(GgmlType::Q8_0, 2, 32, &w).unwrap();
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
        Self::pack(w, w.rows, |i| i)
    }

    /// Packs rows `ids` of `w`, in that order, as a matrix of `ids.len()` rows (a factorised
    /// head's class, read straight from the file's word head without a gathered copy).
    pub fn gather(w: &Matrix, ids: &[u32]) -> Result<PackedQ8, KernelError> {
        check_ids(w, ids)?;
        Self::pack(w, ids.len(), |i| ids[i] as usize)
    }

    /// Output row `i` is row `src(i)` of `w`.
    fn pack(w: &Matrix, out_rows: usize, src: impl Fn(usize) -> usize) -> Result<PackedQ8, KernelError> {
        if w.ty != GgmlType::Q8_0 {
            return Err(KernelError::NotQ8_0 { ty: w.ty });
        }
        // Re-validates the byte length against the shape (a hand-built Matrix may lie).
        let w = Matrix::new(w.ty, w.rows, w.cols, w.data)?;
        let nb = w.cols / QK;
        let groups = out_rows.div_ceil(PACK_ROWS);
        let scales = (32 * nb).div_ceil(64) * 64;
        let stride = scales + 512 * nb;
        let lines = groups.checked_mul(stride / 64).ok_or(KernelError::SizeOverflow { rows: out_rows, cols: w.cols })?;
        let mut buf = vec![Line([0x80; 64]); lines];
        // Written one output line at a time, so each line's 16 × 4 bytes are plain copies the
        // compiler vectorises (a byte-by-byte scatter took ~4 ms for a 20,000-word head).
        for g in 0..groups {
            let n = PACK_ROWS.min(out_rows - g * PACK_ROWS);
            let rows: [&[u8]; PACK_ROWS] = core::array::from_fn(|r| if r < n { w.row(src(g * PACK_ROWS + r)) } else { &[] });
            let group = &mut buf[g * stride / 64..(g + 1) * stride / 64];
            let (scale_lines, weight_lines) = group.split_at_mut(scales / 64);
            // Weights start as 0x80 (weight 0) and scales as 0, so padding rows add exactly 0.
            for line in scale_lines.iter_mut() {
                line.0 = [0; 64];
            }
            for b in 0..nb {
                // Block b's 16 scales: bytes 32b + 2r.
                let line = &mut scale_lines[b / 2].0[32 * (b % 2)..][..32];
                for (r, row) in rows.iter().enumerate().take(n) {
                    line[2 * r..2 * r + 2].copy_from_slice(&row[b * Q8_BYTES..b * Q8_BYTES + 2]);
                }
                for k in 0..8 {
                    // Line 8b + k: bytes 4k..4k+4 of block b of each row, at 4r, stored w + 128.
                    let line = &mut weight_lines[8 * b + k].0;
                    let at = b * Q8_BYTES + 2 + 4 * k;
                    for (dst, row) in line.chunks_exact_mut(4).zip(&rows[..n]) {
                        let src: &[u8; 4] = row[at..at + 4].try_into().expect("a slice of 4 bytes");
                        dst.copy_from_slice(&(u32::from_ne_bytes(*src) ^ 0x8080_8080).to_ne_bytes());
                    }
                }
            }
        }
        Ok(PackedQ8 { rows: out_rows, cols: w.cols, groups, scales, stride, buf })
    }

    /// Byte offset of the weight area inside a group.
    pub(crate) fn scales(&self) -> usize {
        self.scales
    }
}

packed_common!(PackedQ8);

/// Scalar twin of `Kernels::matmul_q8_packed`: the same arithmetic, in the same order, as the
/// row-major twin `q8::matmul`, so the two agree bit for bit.
pub(crate) fn matmul(w: &PackedQ8, xq: &[ActBlock], n_pos: usize, bias: Option<&[f32]>, y: &mut [f32]) {
    let f16 = |g: &[u8], at: usize| scalar::f16_to_f32(u16::from_le_bytes([g[at], g[at + 1]]));
    twin_outputs((w.rows, w.cols, w.stride), w.bytes(), xq, n_pos, bias, y, |group, r, b, xb, acc| {
        let dw = f16(group, 32 * b + 2 * r);
        let mut isum = 0i32;
        for k in 0..8 {
            let at = w.scales + 64 * (8 * b + k) + 4 * r;
            for j in 0..4 {
                isum += (group[at + j] as i32 - 128) * xb.qs[4 * k + j] as i32;
            }
        }
        *acc += (dw * xb.d) * isum as f32;
    });
}

/// The SIMD tiers of `Kernels::matmul_q8_packed`, computed from the row-major Q8_0 layout (no
/// packed copy): per row and position, blocks in order, `acc = fma(isum, d_w·d_x, acc)` with the
/// exact integer block dot product `isum`, then `acc + bias`. Every SIMD tier of the packed
/// kernel rounds exactly this way, so this twin matches them bit for bit (`f32::mul_add` is
/// fused on every target), and the 512-bit `packed_x86::avx512vnni_rows` is tested against it.
pub(crate) fn matmul_rows_fused(a: &crate::MatArgs, xq: &[ActBlock], n_pos: usize, bias: Option<&[f32]>, y: &mut [f32]) {
    let (rows, nb) = (a.rows, a.cols / QK);
    for o in 0..rows {
        let row = a.row(o);
        for p in 0..n_pos {
            let mut acc = 0.0f32;
            for (b, xb) in xq[p * nb..][..nb].iter().enumerate() {
                let blk = &row[b * Q8_BYTES..][..Q8_BYTES];
                let dw = scalar::f16_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
                let isum: i32 = blk[2..].iter().zip(&xb.qs).map(|(&w, &x)| w as i8 as i32 * x as i32).sum();
                acc = (isum as f32).mul_add(dw * xb.d, acc);
            }
            y[p * rows + o] = acc + bias.map_or(0.0, |b| b[o]);
        }
    }
}

/// The packed scalar twins' loop over outputs: for row `o` (lane `r` of group `o / 16`) and
/// position `p`, `block(group bytes, r, b, activation block, acc)` adds block `b` to an
/// accumulator that starts at 0, blocks in order; then the bias.
fn twin_outputs(
    (rows, cols, stride): (usize, usize, usize),
    data: &[u8],
    xq: &[ActBlock],
    n_pos: usize,
    bias: Option<&[f32]>,
    y: &mut [f32],
    block: impl Fn(&[u8], usize, usize, &ActBlock, &mut f32),
) {
    let nb = cols / QK;
    for o in 0..rows {
        let (g, r) = (o / PACK_ROWS, o % PACK_ROWS);
        let group = &data[g * stride..][..stride];
        for p in 0..n_pos {
            let mut acc = 0.0f32;
            for (b, xb) in xq[p * nb..][..nb].iter().enumerate() {
                block(group, r, b, xb, &mut acc);
            }
            y[p * rows + o] = acc + bias.map_or(0.0, |b| b[o]);
        }
    }
}

/// Scale, offset and the 32 unsigned 4-bit values of one Q4_0 or Q4_1 block, so that weight
/// `j` is `d·q[j] + m` (Q4_0: `m = −8·d`, exact in f16 and f32 for every finite scale whose
/// eightfold is finite).
#[inline]
pub(crate) fn q4_block(ty: GgmlType, blk: &[u8]) -> (f32, f32, [u8; QK]) {
    let d = scalar::f16_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
    let (m, qs) = match ty {
        GgmlType::Q4_1 => (scalar::f16_to_f32(u16::from_le_bytes([blk[2], blk[3]])), &blk[4..4 + QK / 2]),
        _ => (-8.0 * d, &blk[2..2 + QK / 2]),
    };
    let mut q = [0u8; QK];
    for j in 0..QK / 2 {
        q[j] = qs[j] & 0x0F;
        q[j + 16] = qs[j] >> 4;
    }
    (d, m, q)
}

/// Scalar row-major int8 product for Q4_0/Q4_1 weights (`Kernels::matmul_q8` on those types):
/// `y[p, o] = Σ_b (d·d_x)·Σ_j q_j·x_j + (m·d_x)·Σ_j x_j + bias[o]`, blocks in order. The
/// reference the packed Q4 kernels are tested against.
pub(crate) fn matmul_q4_rows(a: &crate::MatArgs, xq: &[ActBlock], n_pos: usize, bias: Option<&[f32]>, y: &mut [f32]) {
    let (rows, nb, bb) = (a.rows, a.cols / QK, a.ty.block_bytes());
    for o in 0..rows {
        let row = a.row(o);
        for p in 0..n_pos {
            let xr = &xq[p * nb..][..nb];
            let mut acc = 0.0f32;
            for (b, xb) in xr.iter().enumerate() {
                let (d, m, q) = q4_block(a.ty, &row[b * bb..][..bb]);
                let isum: i32 = q.iter().zip(&xb.qs).map(|(&q, &x)| q as i32 * x as i32).sum();
                acc += (d * xb.d) * isum as f32;
                acc += (m * xb.d) * xb.sum as f32;
            }
            y[p * rows + o] = acc + bias.map_or(0.0, |b| b[o]);
        }
    }
}

/// A Q4_0 or Q4_1 matrix repacked for [`crate::Kernels::matmul_q4_packed`], the 4-bit sibling of
/// [`PackedQ8`]: 16 rows interleaved, so one 64-byte vector holds 4 bytes of each of 16 rows.
/// Those 4 bytes are the row's own `qs[4t..4t+4]`: their low nibbles are inputs `4t..4t+4` of
/// the block and their high nibbles inputs `16+4t..`, so a kernel masks (and shifts) one load
/// into two `vpdpbusd` operands. Values stay unsigned (0..15, the unsigned operand as is);
/// the offset (Q4_1's `m`, Q4_0's `−8·d`) is applied per block with the activation block sum.
///
/// Group layout (`nb = cols / 32`, `stride = 320·nb`): at `64·b`, 16 f16 scales `d`; at
/// `64·b + 32`, 16 f16 offsets `m`; at `64·nb + 256·b + 64·t + 4·r + j` (`t` 0..4), byte
/// `qs[4t + j]` of row `r` in block `b`.
///
/// ```
/// use laya_kernels::{ActBlock, Kernels, Matrix, PackedQ4, GgmlType};
/// // One Q4_1 row of 32: d = 1 (f16 0x3C00), m = -8 (0xC800), every value 10 (weight 2).
/// let mut w = vec![0x00, 0x3C, 0x00, 0xC8];
/// w.extend([0xAAu8; 16]);
/// let m = Matrix::new(GgmlType::Q4_1, 1, 32, &w).unwrap();
/// let p = PackedQ4::new(&m).unwrap();
/// let k = Kernels::detect();
/// let mut xq = [ActBlock::ZERO; 1];
/// k.quantize_act(&[1.0; 32], &mut xq);
/// let mut y = [0.0f32; 1];
/// k.matmul_q4_packed(&p, &xq, 1, None, &mut y);
/// assert!((y[0] - 64.0).abs() < 1e-3);
/// ```
#[derive(Clone)]
pub struct PackedQ4 {
    rows: usize,
    cols: usize,
    groups: usize,
    stride: usize,
    buf: Vec<Line>,
}

impl PackedQ4 {
    /// Repacks a Q4_0 or Q4_1 matrix. Errors on any other type.
    pub fn new(w: &Matrix) -> Result<PackedQ4, KernelError> {
        Self::pack(w, w.rows, |i| i)
    }

    /// Packs rows `ids` of `w`, in that order (see [`PackedQ8::gather`]).
    pub fn gather(w: &Matrix, ids: &[u32]) -> Result<PackedQ4, KernelError> {
        check_ids(w, ids)?;
        Self::pack(w, ids.len(), |i| ids[i] as usize)
    }

    /// Output row `i` is row `src(i)` of `w`.
    fn pack(w: &Matrix, out_rows: usize, src: impl Fn(usize) -> usize) -> Result<PackedQ4, KernelError> {
        if !matches!(w.ty, GgmlType::Q4_0 | GgmlType::Q4_1) {
            return Err(KernelError::NotQ4 { ty: w.ty });
        }
        let w = Matrix::new(w.ty, w.rows, w.cols, w.data)?;
        let (nb, bb) = (w.cols / QK, w.ty.block_bytes());
        let qs0 = bb - QK / 2;
        let groups = out_rows.div_ceil(PACK_ROWS);
        let stride = 320 * nb;
        let lines = groups.checked_mul(stride / 64).ok_or(KernelError::SizeOverflow { rows: out_rows, cols: w.cols })?;
        // Zero everywhere: padding rows have scale and offset 0 and add exactly 0. Written one
        // output line at a time, as for PackedQ8.
        let mut buf = vec![Line([0; 64]); lines];
        for g in 0..groups {
            let n = PACK_ROWS.min(out_rows - g * PACK_ROWS);
            let rows: [&[u8]; PACK_ROWS] = core::array::from_fn(|r| if r < n { w.row(src(g * PACK_ROWS + r)) } else { &[] });
            let group = &mut buf[g * stride / 64..(g + 1) * stride / 64];
            let (scale_lines, nibble_lines) = group.split_at_mut(nb);
            for b in 0..nb {
                // Line b: the 16 scales d at 2r, then the 16 offsets (Q4_1's m, or −8·d) at 32 + 2r.
                let line = &mut scale_lines[b].0;
                for (r, row) in rows.iter().enumerate().take(n) {
                    let blk = &row[b * bb..][..bb];
                    let m16 = if w.ty == GgmlType::Q4_1 {
                        [blk[2], blk[3]]
                    } else {
                        let d = scalar::f16_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
                        half::f16::from_f32(-8.0 * d).to_bits().to_le_bytes()
                    };
                    line[2 * r..2 * r + 2].copy_from_slice(&blk[..2]);
                    line[32 + 2 * r..32 + 2 * r + 2].copy_from_slice(&m16);
                }
                for t in 0..4 {
                    // Line nb + 4b + t: nibble bytes 4t..4t+4 of block b of each row, at 4r.
                    let line = &mut nibble_lines[4 * b + t].0;
                    for (r, row) in rows.iter().enumerate().take(n) {
                        let at = b * bb + qs0 + 4 * t;
                        line[4 * r..4 * r + 4].copy_from_slice(&row[at..at + 4]);
                    }
                }
            }
        }
        Ok(PackedQ4 { rows: out_rows, cols: w.cols, groups, stride, buf })
    }
}

packed_common!(PackedQ4);

/// Scalar twin of `Kernels::matmul_q4_packed`, bit-identical to `matmul_q4_rows`.
pub(crate) fn matmul_q4(w: &PackedQ4, xq: &[ActBlock], n_pos: usize, bias: Option<&[f32]>, y: &mut [f32]) {
    let nb = w.cols / QK;
    let f16 = |g: &[u8], at: usize| scalar::f16_to_f32(u16::from_le_bytes([g[at], g[at + 1]]));
    twin_outputs((w.rows, w.cols, w.stride), w.bytes(), xq, n_pos, bias, y, |group, r, b, xb, acc| {
        let (d, m) = (f16(group, 64 * b + 2 * r), f16(group, 64 * b + 32 + 2 * r));
        let mut isum = 0i32;
        for t in 0..4 {
            for j in 0..4 {
                let v = group[64 * nb + 256 * b + 64 * t + 4 * r + j];
                isum += (v & 0x0F) as i32 * xb.qs[4 * t + j] as i32;
                isum += (v >> 4) as i32 * xb.qs[16 + 4 * t + j] as i32;
            }
        }
        *acc += (d * xb.d) * isum as f32;
        *acc += (m * xb.d) * xb.sum as f32;
    });
}
