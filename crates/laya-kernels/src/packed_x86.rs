//! x86 tiers of `Kernels::matmul_q8_packed` and `matmul_q4_packed` (layout and reasoning in
//! `packed.rs`); the 512-bit VNNI tier is described here, the 256-bit ones at their macros.
//!
//! Per block of 32 inputs and group of 16 rows, for each position: the i32 accumulator starts
//! at `−128·Σx` (undoing the `+128` stored with the weights), takes eight `vpdpbusd` of a
//! weight vector (4 bytes of each of 16 rows) against the position's next 4 activation bytes
//! broadcast to every lane, and is then converted to f32 and accumulated with
//! `d_w[16 rows] · d_x` in one FMA. Lane `r` is row `r` throughout, so a position's 16 outputs
//! leave with one (masked) store.
//!
//! Tiles: several groups for one position (the word head: independent accumulator chains hide
//! `vpdpbusd`'s latency while the weights stream), several positions for one group otherwise
//! (each weight vector loaded once serves every position of the tile).

#[cfg(target_arch = "x86")]
use core::arch::x86::*;
#[cfg(target_arch = "x86_64")]
use core::arch::x86_64::*;

use crate::packed::{PackedQ4, PackedQ8, PACK_ROWS};
use crate::q8::ActBlock;
use crate::QK;

/// Four activation bytes `qs[4k..4k+4]` as one little-endian i32 (the broadcast operand).
#[inline(always)]
fn x4(xb: &ActBlock, k: usize) -> i32 {
    let q = &xb.qs[4 * k..4 * k + 4];
    i32::from_le_bytes([q[0] as u8, q[1] as u8, q[2] as u8, q[3] as u8])
}

/// Checks once per call what the tiles rely on for memory safety: the packed buffer holds
/// `groups` groups of `stride` bytes covering every row, and the slices fit the shape.
#[allow(clippy::too_many_arguments)]
fn check(
    len: usize,
    groups: usize,
    stride: usize,
    rows: usize,
    cols: usize,
    xq: &[ActBlock],
    n_pos: usize,
    bias: Option<&[f32]>,
    y: &[f32],
) {
    assert!(len == groups * stride && groups * PACK_ROWS >= rows);
    assert!(xq.len() >= n_pos * (cols / QK) && y.len() >= n_pos * rows);
    assert!(bias.is_none_or(|b| b.len() >= rows));
}

/// Every position of groups `g..g+G` of [`drive_tiles`], in tiles of the given widths, widest
/// first.
macro_rules! positions {
    ($tile:ident, $w:expr, $xq:expr, $n_pos:expr, $bias:expr, $y:expr, $g_n:literal, $g:expr; $($p_n:literal),+) => {{
        let mut p = 0;
        $(
            // p <= n_pos throughout, so the difference cannot wrap.
            while $n_pos - p >= $p_n {
                $tile::<$g_n, $p_n>($w, $xq, $g, p, $bias, $y);
                p += $p_n;
            }
        )+
    }};
}

/// Runs a 512-bit `tile::<G, P>(w, xq, g, p, bias, y)` over every group and position: four
/// groups at a time for one position (independent chains while the weights stream), else two
/// groups with four positions (each weight vector serves four positions, each activation
/// broadcast two groups), and a last odd group with eight, four, then single positions.
macro_rules! drive_tiles {
    ($tile:ident, $w:expr, $xq:expr, $n_pos:expr, $bias:expr, $y:expr) => {{
        let groups = $w.groups();
        if $n_pos == 1 {
            let mut g = 0;
            while g + 4 <= groups {
                $tile::<4, 1>($w, $xq, g, 0, $bias, $y);
                g += 4;
            }
            while g < groups {
                $tile::<1, 1>($w, $xq, g, 0, $bias, $y);
                g += 1;
            }
        } else {
            // Pairs of groups, four positions: each broadcast activation word then feeds two
            // `vpdpbusd` (the broadcasts, not the dot products, bound the one-group tiles).
            let mut g = 0;
            while g + 2 <= groups {
                positions!($tile, $w, $xq, $n_pos, $bias, $y, 2, g; 4, 1);
                g += 2;
            }
            if g < groups {
                positions!($tile, $w, $xq, $n_pos, $bias, $y, 1, g; 8, 4, 1);
            }
        }
    }};
}

/// Adds the bias to one group's `P` accumulators (lane = row `o0 + lane`) and stores the rows
/// that exist (`o0 + lane < rows`) of positions `p0..p0+P`.
///
/// The caller has run `check` (so `bias` and `y` cover `rows` and `(p0+P)·rows`) and passes
/// `o0 < rows`, `o0` a multiple of 16.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[inline]
fn store_group<const P: usize>(acc: &[__m512; P], bias: Option<&[f32]>, rows: usize, o0: usize, p0: usize, y: &mut [f32]) {
    let n = PACK_ROWS.min(rows - o0);
    let mask: __mmask16 = ((1u32 << n) - 1) as __mmask16;
    let bv = match bias {
        // SAFETY: the mask enables only lanes o0..o0+n <= rows <= bias.len() (check); masked-off
        // lanes are not read.
        Some(bs) => unsafe { _mm512_maskz_loadu_ps(mask, bs.as_ptr().add(o0)) },
        None => _mm512_setzero_ps(),
    };
    for p in 0..P {
        assert!((p0 + p) * rows + o0 + n <= y.len());
        // SAFETY: lanes (p0+p)·rows + o0 .. + n lie inside y (asserted); masked-off lanes are
        // not written.
        unsafe { _mm512_mask_storeu_ps(y.as_mut_ptr().add((p0 + p) * rows + o0), mask, _mm512_add_ps(acc[p], bv)) };
    }
}

/// The 256-bit tiers' epilogue: adds the bias to the `P` accumulators of the half-group of 8
/// rows starting at `o0` (lane = row) and stores the rows that exist of positions `p0..p0+P`.
/// A half entirely past `rows` (padding of the last group) stores nothing.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn store_half<const P: usize>(acc: &[__m256; P], bias: Option<&[f32]>, rows: usize, o0: usize, p0: usize, y: &mut [f32]) {
    if o0 >= rows {
        return;
    }
    let n = 8.min(rows - o0);
    let mut bv = [0.0f32; 8];
    if let Some(bs) = bias {
        bv[..n].copy_from_slice(&bs[o0..o0 + n]);
    }
    // SAFETY: bv is 8 floats.
    let bv = unsafe { _mm256_loadu_ps(bv.as_ptr()) };
    for p in 0..P {
        let v = _mm256_add_ps(acc[p], bv);
        let out = &mut y[(p0 + p) * rows + o0..][..n];
        if n == 8 {
            // SAFETY: `out` is exactly 8 floats.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), v) };
        } else {
            let mut t = [0.0f32; 8];
            // SAFETY: t is 8 floats.
            unsafe { _mm256_storeu_ps(t.as_mut_ptr(), v) };
            out.copy_from_slice(&t[..n]);
        }
    }
}

/// AVX-512 VNNI: one 512-bit register per group of 16 rows.
pub(crate) mod avx512vnni {
    use super::*;

    #[target_feature(enable = "avx512f,avx512vnni,avx2,fma,f16c")]
    #[inline]
    fn tile<const G: usize, const P: usize>(w: &PackedQ8, xq: &[ActBlock], g0: usize, p0: usize, bias: Option<&[f32]>, y: &mut [f32]) {
        let (rows, nb, stride, sc) = (w.rows(), w.cols() / QK, w.stride(), w.scales());
        let data = &w.bytes()[g0 * stride..(g0 + G) * stride];
        let xr: [&[ActBlock]; P] = core::array::from_fn(|p| &xq[(p0 + p) * nb..][..nb]);
        let mut acc = [[_mm512_setzero_ps(); P]; G];
        for b in 0..nb {
            let mut isum = [[_mm512_setzero_si512(); P]; G];
            for p in 0..P {
                let c = _mm512_set1_epi32(-128 * xr[p][b].sum);
                for g in 0..G {
                    isum[g][p] = c;
                }
            }
            for k in 0..8 {
                // SAFETY: g < G and b < nb, so g·stride + sc + 64·(8b+k) + 64 <= G·stride =
                // data.len() (stride = sc + 512·nb); unaligned load, no alignment needed.
                let wv: [__m512i; G] = core::array::from_fn(|g| unsafe {
                    _mm512_loadu_si512(data.as_ptr().add(g * stride + sc + 64 * (8 * b + k)) as *const _)
                });
                for p in 0..P {
                    let xv = _mm512_set1_epi32(x4(&xr[p][b], k));
                    for g in 0..G {
                        isum[g][p] = _mm512_dpbusd_epi32(isum[g][p], wv[g], xv);
                    }
                }
            }
            for g in 0..G {
                // SAFETY: the 16 f16 scales of block b sit at g·stride + 32b .. + 32 < sc.
                let dw = unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(data.as_ptr().add(g * stride + 32 * b) as *const __m256i)) };
                for p in 0..P {
                    let s = _mm512_mul_ps(dw, _mm512_set1_ps(xr[p][b].d));
                    acc[g][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[g][p]), s, acc[g][p]);
                }
            }
        }
        for g in 0..G {
            store_group(&acc[g], bias, rows, (g0 + g) * PACK_ROWS, p0, y);
        }
    }

    #[target_feature(enable = "avx512f,avx512vnni,avx2,fma,f16c")]
    pub(crate) fn matmul(w: &PackedQ8, xq: &[ActBlock], n_pos: usize, bias: Option<&[f32]>, y: &mut [f32]) {
        check(w.bytes().len(), w.groups(), w.stride(), w.rows(), w.cols(), xq, n_pos, bias, y);
        drive_tiles!(tile, w, xq, n_pos, bias, y)
    }
}

/// AVX-512 VNNI: the 512-bit packed kernel's arithmetic read from the file's row-major Q8_0 rows
/// (`packed::matmul_rows_fused` is its twin), for predictions made before the packed copy exists.
///
/// Per group of 16 rows and block: eight registers each hold one block of two rows (row `2i`
/// in the low half, `2i+1` in the high half); `vpdpbusd` of the `w + 128` bytes against the
/// block's activations duplicated into both halves leaves eight partial sums per row; a
/// transposing reduction (two levels of unpack-and-add, one cross-lane shuffle, one permute)
/// turns the eight registers into one whose lane `r` is row `r`'s exact `Σ(w+128)·x`. From
/// there it is the packed kernel's step: subtract `128·Σx`, convert, multiply the 16 scales
/// (gathered from the rows) by `d_x`, one FMA per block, bias, masked store. Integer sums are
/// exact in any order, and the float steps are the same instructions on the same values, so
/// the outputs equal the packed kernel's bit for bit.
pub(crate) mod avx512vnni_rows {
    use super::*;
    use crate::q8::Q8_BYTES;
    use crate::MatArgs;

    /// Output rows `o0..o0+16` (those of the `out_rows` that exist), every position; output row
    /// `o0 + r` is the matrix row starting at byte `row_at(r)` of `data`, which the caller has
    /// checked is at most `data.len() - a.rb` and below 2³¹.
    #[target_feature(enable = "avx512f,avx512vnni,avx2,fma,f16c")]
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn group(
        a: &MatArgs,
        data: &[u8],
        row_at: impl Fn(usize) -> usize,
        out_rows: usize,
        xq: &[ActBlock],
        o0: usize,
        n_pos: usize,
        bias: Option<&[f32]>,
        y: &mut [f32],
    ) {
        let nb = a.cols / QK;
        let n = PACK_ROWS.min(out_rows - o0);
        let flip = _mm512_set1_epi8(-128);
        // After the reduction lane l holds row [0,2,4,6,1,3,5,7,8,10,12,14,9,11,13,15][l];
        // this index puts row r in lane r.
        let order = _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
        let mask: __mmask16 = ((1u32 << n) - 1) as __mmask16;
        // Byte offset of each row's first block (its f16 scale) in `a.data`; 0 for lanes past n.
        let starts: [usize; PACK_ROWS] = core::array::from_fn(|r| if r < n { row_at(r) } else { 0 });
        let offsets: [i32; PACK_ROWS] = starts.map(|o| o as i32);
        // SAFETY: 16 i32 read from a local array.
        let row_offsets = unsafe { _mm512_loadu_si512(offsets.as_ptr() as *const _) };
        let pair = |a: __m512i, b: __m512i| _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
        let quad = |a: __m512i, b: __m512i| _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
        for p in 0..n_pos {
            let xr = &xq[p * nb..][..nb];
            let mut acc = _mm512_setzero_ps();
            for (b, xb) in xr.iter().enumerate() {
                // SAFETY: `qs` is 32 bytes; unaligned load.
                let xv = unsafe { _mm512_broadcast_i64x4(_mm256_loadu_si256(xb.qs.as_ptr() as *const __m256i)) };
                let mut v = [_mm512_setzero_si512(); 8];
                for (i, v) in v.iter_mut().enumerate().take(n.div_ceil(2)) {
                    // SAFETY: rows 2i (and 2i+1 when it exists) are < n, so their block b's 32
                    // values at start + 34b + 2 .. + 34 lie inside their row, inside `data`.
                    let w = unsafe {
                        let lo = data.as_ptr().add(starts[2 * i] + b * Q8_BYTES + 2);
                        let l = _mm512_zextsi256_si512(_mm256_loadu_si256(lo as *const __m256i));
                        match 2 * i + 1 < n {
                            true => {
                                let hi = data.as_ptr().add(starts[2 * i + 1] + b * Q8_BYTES + 2);
                                _mm512_inserti64x4::<1>(l, _mm256_loadu_si256(hi as *const __m256i))
                            }
                            false => l,
                        }
                    };
                    // Rows past n (a zero or absent half) give lanes that are never stored.
                    *v = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_xor_si512(w, flip), xv);
                }
                // Per 128-bit quarter q: [Σ_q v0, Σ_q v1, Σ_q v2, Σ_q v3] (and v4..v7).
                let (u0, u1) = (quad(pair(v[0], v[1]), pair(v[2], v[3])), quad(pair(v[4], v[5]), pair(v[6], v[7])));
                // Quarters 0+1 are the low rows, 2+3 the high rows of each register.
                let sums = _mm512_add_epi32(_mm512_shuffle_i32x4::<0x88>(u0, u1), _mm512_shuffle_i32x4::<0xDD>(u0, u1));
                let isum = _mm512_sub_epi32(_mm512_permutexvar_epi32(order, sums), _mm512_set1_epi32(128 * xb.sum));
                // SAFETY: lane r < n reads 4 bytes at its row's start + 34b, the scale and first
                // two values of block b, inside `data`; masked lanes read nothing.
                let scales = unsafe {
                    let at = _mm512_add_epi32(row_offsets, _mm512_set1_epi32((b * Q8_BYTES) as i32));
                    _mm512_mask_i32gather_epi32::<1>(_mm512_setzero_si512(), mask, at, data.as_ptr() as *const _)
                };
                let dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(scales));
                let s = _mm512_mul_ps(dw, _mm512_set1_ps(xb.d));
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), s, acc);
            }
            store_group(&[acc], bias, out_rows, o0, p, y);
        }
    }

    #[target_feature(enable = "avx512f,avx512vnni,avx2,fma,f16c")]
    pub(crate) fn matmul(a: &MatArgs, xq: &[ActBlock], n_pos: usize, bias: Option<&[f32]>, y: &mut [f32]) {
        assert!(a.data.len() >= a.rows * a.rb && a.rb == (a.cols / QK) * Q8_BYTES);
        assert!(xq.len() >= n_pos * (a.cols / QK) && y.len() >= n_pos * a.rows);
        assert!(bias.is_none_or(|b| b.len() >= a.rows) && PACK_ROWS * a.rb <= i32::MAX as usize);
        for o0 in (0..a.rows).step_by(PACK_ROWS) {
            let here = &a.data[o0 * a.rb..(o0 + PACK_ROWS.min(a.rows - o0)) * a.rb];
            group(a, here, |r| r * a.rb, a.rows, xq, o0, n_pos, bias, y);
        }
    }

    /// [`matmul`] of one position on rows `ids` of the matrix, in that order, as a matrix of
    /// `ids.len()` rows.
    #[target_feature(enable = "avx512f,avx512vnni,avx2,fma,f16c")]
    pub(crate) fn matmul_gathered(a: &MatArgs, ids: &[u32], xq: &[ActBlock], bias: Option<&[f32]>, y: &mut [f32]) {
        assert!(a.data.len() >= a.rows * a.rb && a.rb == (a.cols / QK) * Q8_BYTES);
        assert!(xq.len() >= a.cols / QK && y.len() >= ids.len());
        assert!(bias.is_none_or(|b| b.len() >= ids.len()) && a.rows * a.rb <= i32::MAX as usize);
        assert!(ids.iter().all(|&id| (id as usize) < a.rows), "a row id is out of range");
        for o0 in (0..ids.len()).step_by(PACK_ROWS) {
            group(a, a.data, |r| ids[o0 + r] as usize * a.rb, ids.len(), xq, o0, 1, bias, y);
        }
    }
}

/// AVX-512 VNNI for [`PackedQ4`]: each 64-byte load is masked into the low nibbles (inputs
/// `4t..4t+4` of 16 rows) and shifted into the high ones (inputs `16+4t..`), two `vpdpbusd`
/// with the values as the unsigned operand; the block's offset `m` enters with the activation
/// block sum in a second FMA.
pub(crate) mod avx512vnni_q4 {
    use super::*;

    #[target_feature(enable = "avx512f,avx512vnni,avx2,fma,f16c")]
    #[inline]
    fn tile<const G: usize, const P: usize>(w: &PackedQ4, xq: &[ActBlock], g0: usize, p0: usize, bias: Option<&[f32]>, y: &mut [f32]) {
        let (rows, nb, stride) = (w.rows(), w.cols() / QK, w.stride());
        let data = &w.bytes()[g0 * stride..(g0 + G) * stride];
        let xr: [&[ActBlock]; P] = core::array::from_fn(|p| &xq[(p0 + p) * nb..][..nb]);
        let nib = _mm512_set1_epi8(0x0F);
        let mut acc = [[_mm512_setzero_ps(); P]; G];
        for b in 0..nb {
            let mut isum = [[_mm512_setzero_si512(); P]; G];
            for t in 0..4 {
                // SAFETY: g < G, b < nb, t < 4: g·stride + 64·nb + 256·b + 64·t + 64 <=
                // G·stride = data.len() (stride = 320·nb); unaligned load.
                let v: [__m512i; G] = core::array::from_fn(|g| unsafe {
                    _mm512_loadu_si512(data.as_ptr().add(g * stride + 64 * nb + 256 * b + 64 * t) as *const _)
                });
                let lo = v.map(|v| _mm512_and_si512(v, nib));
                let hi = v.map(|v| _mm512_and_si512(_mm512_srli_epi32::<4>(v), nib));
                for p in 0..P {
                    let (xl, xh) = (_mm512_set1_epi32(x4(&xr[p][b], t)), _mm512_set1_epi32(x4(&xr[p][b], t + 4)));
                    for g in 0..G {
                        isum[g][p] = _mm512_dpbusd_epi32(isum[g][p], lo[g], xl);
                        isum[g][p] = _mm512_dpbusd_epi32(isum[g][p], hi[g], xh);
                    }
                }
            }
            for g in 0..G {
                // SAFETY: 16 f16 scales at g·stride + 64b and 16 offsets at + 32, both inside
                // the group's first 64·nb bytes.
                let (dw, mw) = unsafe {
                    let at = data.as_ptr().add(g * stride + 64 * b);
                    (
                        _mm512_cvtph_ps(_mm256_loadu_si256(at as *const __m256i)),
                        _mm512_cvtph_ps(_mm256_loadu_si256(at.add(32) as *const __m256i)),
                    )
                };
                for p in 0..P {
                    let xb = &xr[p][b];
                    let s = _mm512_mul_ps(dw, _mm512_set1_ps(xb.d));
                    acc[g][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[g][p]), s, acc[g][p]);
                    acc[g][p] = _mm512_fmadd_ps(mw, _mm512_set1_ps(xb.d * xb.sum as f32), acc[g][p]);
                }
            }
        }
        for g in 0..G {
            store_group(&acc[g], bias, rows, (g0 + g) * PACK_ROWS, p0, y);
        }
    }

    #[target_feature(enable = "avx512f,avx512vnni,avx2,fma,f16c")]
    pub(crate) fn matmul(w: &PackedQ4, xq: &[ActBlock], n_pos: usize, bias: Option<&[f32]>, y: &mut [f32]) {
        check(w.bytes().len(), w.groups(), w.stride(), w.rows(), w.cols(), xq, n_pos, bias, y);
        drive_tiles!(tile, w, xq, n_pos, bias, y)
    }
}

/// The 256-bit [`PackedQ8`] kernels, each group of 16 rows as two halves of 8 (bytes 0..32 and
/// 32..64 of every 64-byte vector), stamped out twice:
///
/// * AVX-VNNI: `vpdpbusd` of the stored `w + 128` (u8) against the broadcast activations, the
///   accumulator started at `−128·Σx`, as in the 512-bit tier;
/// * plain AVX2: `maddubs` cannot take the offset bytes (a pair of 255·127 products overflows
///   i16), so each weight vector is turned back into signed `w` (xor 0x80) and multiplied with
///   the sign trick of `q8_x86.rs`: `maddubs(|w|, x·sign(w))`, whose pairs stay within
///   2·128·127 = 32,512, then `madd` by ones to i32. No offset, so the accumulator starts at 0.
///   Lane `r` still holds row `r`'s exact block dot product: no horizontal sums, which is
///   what the row-major AVX2 kernel spends most of its time on for the word head.
macro_rules! q8_256 {
    ($module:ident, $feat:literal, $vnni:literal) => {
        pub(crate) mod $module {
            use super::*;

            /// `acc + Σ` over groups of four of `w·x` per i32 lane: `u` is the stored weight
            /// vector (`w + 128`), `s` four activation bytes broadcast.
            #[target_feature(enable = $feat)]
            #[inline]
            fn dot(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
                if $vnni {
                    #[allow(unused_unsafe)]
                    // SAFETY: only the instance compiled with avxvnni (`$vnni` is a literal)
                    // takes this branch, and dispatch selects it only after detecting AVX-VNNI.
                    unsafe {
                        _mm256_dpbusd_avx_epi32(acc, u, s)
                    }
                } else {
                    let w = _mm256_xor_si256(u, _mm256_set1_epi8(-128));
                    let p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(s, w));
                    _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)))
                }
            }

            /// The accumulator's start for an activation block with sum `sum`.
            #[inline(always)]
            fn start(sum: i32) -> i32 {
                if $vnni {
                    -128 * sum
                } else {
                    0
                }
            }

            /// `H` halves (8 rows each) starting at half `h0`, `P` positions from `p0`.
            #[target_feature(enable = $feat)]
            #[inline]
            fn tile<const H: usize, const P: usize>(
                w: &PackedQ8,
                xq: &[ActBlock],
                h0: usize,
                p0: usize,
                bias: Option<&[f32]>,
                y: &mut [f32],
            ) {
                let (rows, nb, stride, sc) = (w.rows(), w.cols() / QK, w.stride(), w.scales());
                let data = w.bytes();
                // Byte offset of half h's group, and of the half inside a 64-byte weight vector.
                let at = |h: usize| ((h0 + h) / 2 * stride, (h0 + h) % 2 * 32);
                let xr: [&[ActBlock]; P] = core::array::from_fn(|p| &xq[(p0 + p) * nb..][..nb]);
                let mut acc = [[_mm256_setzero_ps(); P]; H];
                for b in 0..nb {
                    let mut isum = [[_mm256_setzero_si256(); P]; H];
                    for p in 0..P {
                        let c = _mm256_set1_epi32(start(xr[p][b].sum));
                        for h in 0..H {
                            isum[h][p] = c;
                        }
                    }
                    for k in 0..8 {
                        let wv: [__m256i; H] = core::array::from_fn(|h| {
                            let (g, half) = at(h);
                            // SAFETY: the caller keeps (h0+H)/2 <= groups, so g + sc +
                            // 64·(8b+k) + half + 32 <= groups·stride = data.len() (check).
                            unsafe { _mm256_loadu_si256(data.as_ptr().add(g + sc + 64 * (8 * b + k) + half) as *const __m256i) }
                        });
                        for p in 0..P {
                            let xv = _mm256_set1_epi32(x4(&xr[p][b], k));
                            for h in 0..H {
                                isum[h][p] = dot(isum[h][p], wv[h], xv);
                            }
                        }
                    }
                    for h in 0..H {
                        let (g, half) = at(h);
                        // SAFETY: 8 f16 scales at g + 32b + half/2 .. + 16 <= g + sc.
                        let dw = unsafe { _mm256_cvtph_ps(_mm_loadu_si128(data.as_ptr().add(g + 32 * b + half / 2) as *const __m128i)) };
                        for p in 0..P {
                            let s = _mm256_mul_ps(dw, _mm256_set1_ps(xr[p][b].d));
                            acc[h][p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[h][p]), s, acc[h][p]);
                        }
                    }
                }
                for h in 0..H {
                    store_half(&acc[h], bias, rows, (h0 + h) * 8, p0, y);
                }
            }

            #[target_feature(enable = $feat)]
            pub(crate) fn matmul(w: &PackedQ8, xq: &[ActBlock], n_pos: usize, bias: Option<&[f32]>, y: &mut [f32]) {
                check(w.bytes().len(), w.groups(), w.stride(), w.rows(), w.cols(), xq, n_pos, bias, y);
                let halves = 2 * w.groups();
                if n_pos == 1 {
                    let mut h = 0;
                    while h + 4 <= halves {
                        tile::<4, 1>(w, xq, h, 0, bias, y);
                        h += 4;
                    }
                    while h < halves {
                        tile::<2, 1>(w, xq, h, 0, bias, y);
                        h += 2;
                    }
                    return;
                }
                for h in (0..halves).step_by(2) {
                    let mut p = 0;
                    while p + 3 <= n_pos {
                        tile::<2, 3>(w, xq, h, p, bias, y);
                        p += 3;
                    }
                    while p < n_pos {
                        tile::<2, 1>(w, xq, h, p, bias, y);
                        p += 1;
                    }
                }
            }
        }
    };
}

q8_256!(avxvnni, "avx2,fma,f16c,avxvnni", true);
q8_256!(avx2, "avx2,fma,f16c", false);

/// The 256-bit [`PackedQ4`] kernels, stamped out twice: plain AVX2 and AVX-VNNI. Each group of
/// 16 rows is two halves of 8 (bytes 0..32 and 32..64 of every 64-byte vector).
///
/// 4-bit values need no sign or offset trick on AVX2: `maddubs` multiplies them (unsigned,
/// 0..15) by the signed activations, and a pair sum is at most 2·15·127 = 3,810, so the eight
/// `maddubs` of a block (4 vectors × low and high nibbles) add up in i16 to at most 30,480 <
/// 32,767 before one `madd` widens them to i32. AVX-VNNI does the same with `vpdpbusd`.
macro_rules! q4_256 {
    ($module:ident, $feat:literal, $vnni:literal) => {
        pub(crate) mod $module {
            use super::*;

            /// `Σ` over one block of the unsigned nibbles `q[v]` times the broadcast
            /// activations `x[v]`, per i32 lane (8 rows).
            #[target_feature(enable = $feat)]
            #[inline]
            fn block_sum(q: &[__m256i; 8], x: &[__m256i; 8]) -> __m256i {
                if $vnni {
                    let mut acc = _mm256_setzero_si256();
                    for v in 0..8 {
                        #[allow(unused_unsafe)]
                        // SAFETY: only the instance compiled with avxvnni (`$vnni` is a
                        // literal) takes this branch, and dispatch selects it only after
                        // detecting AVX-VNNI.
                        unsafe {
                            acc = _mm256_dpbusd_avx_epi32(acc, q[v], x[v]);
                        }
                    }
                    acc
                } else {
                    let mut s16 = _mm256_maddubs_epi16(q[0], x[0]);
                    for v in 1..8 {
                        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(q[v], x[v]));
                    }
                    _mm256_madd_epi16(s16, _mm256_set1_epi16(1))
                }
            }

            /// `H` halves (8 rows each) from half `h0`, `P` positions from `p0`.
            #[target_feature(enable = $feat)]
            #[inline]
            fn tile<const H: usize, const P: usize>(
                w: &PackedQ4,
                xq: &[ActBlock],
                h0: usize,
                p0: usize,
                bias: Option<&[f32]>,
                y: &mut [f32],
            ) {
                let (rows, nb, stride) = (w.rows(), w.cols() / QK, w.stride());
                let data = w.bytes();
                let at = |h: usize| ((h0 + h) / 2 * stride, (h0 + h) % 2 * 32);
                let xr: [&[ActBlock]; P] = core::array::from_fn(|p| &xq[(p0 + p) * nb..][..nb]);
                let nib = _mm256_set1_epi8(0x0F);
                let mut acc = [[_mm256_setzero_ps(); P]; H];
                for b in 0..nb {
                    // q[h][2t] = low nibbles (inputs 4t..), q[h][2t+1] = high (16+4t..).
                    let q: [[__m256i; 8]; H] = core::array::from_fn(|h| {
                        let (g, half) = at(h);
                        let mut q = [_mm256_setzero_si256(); 8];
                        for t in 0..4 {
                            // SAFETY: the caller keeps (h0+H)/2 <= groups, so g + 64·nb +
                            // 256·b + 64·t + half + 32 <= groups·stride = data.len() (check).
                            let v =
                                unsafe { _mm256_loadu_si256(data.as_ptr().add(g + 64 * nb + 256 * b + 64 * t + half) as *const __m256i) };
                            q[2 * t] = _mm256_and_si256(v, nib);
                            q[2 * t + 1] = _mm256_and_si256(_mm256_srli_epi16::<4>(v), nib);
                        }
                        q
                    });
                    for p in 0..P {
                        let xb = &xr[p][b];
                        let x: [__m256i; 8] = core::array::from_fn(|v| _mm256_set1_epi32(x4(xb, v / 2 + 4 * (v % 2))));
                        let (dx, mx) = (_mm256_set1_ps(xb.d), _mm256_set1_ps(xb.d * xb.sum as f32));
                        for h in 0..H {
                            let (g, half) = at(h);
                            // SAFETY: 8 f16 scales at g + 64b + half/2 and 8 offsets 32 bytes
                            // later, inside the group's first 64·nb bytes.
                            let (dw, mw) = unsafe {
                                let s = data.as_ptr().add(g + 64 * b + half / 2);
                                (
                                    _mm256_cvtph_ps(_mm_loadu_si128(s as *const __m128i)),
                                    _mm256_cvtph_ps(_mm_loadu_si128(s.add(32) as *const __m128i)),
                                )
                            };
                            let isum = _mm256_cvtepi32_ps(block_sum(&q[h], &x));
                            acc[h][p] = _mm256_fmadd_ps(isum, _mm256_mul_ps(dw, dx), acc[h][p]);
                            acc[h][p] = _mm256_fmadd_ps(mw, mx, acc[h][p]);
                        }
                    }
                }
                for h in 0..H {
                    store_half(&acc[h], bias, rows, (h0 + h) * 8, p0, y);
                }
            }

            #[target_feature(enable = $feat)]
            pub(crate) fn matmul(w: &PackedQ4, xq: &[ActBlock], n_pos: usize, bias: Option<&[f32]>, y: &mut [f32]) {
                check(w.bytes().len(), w.groups(), w.stride(), w.rows(), w.cols(), xq, n_pos, bias, y);
                for h in (0..2 * w.groups()).step_by(2) {
                    let mut p = 0;
                    while p + 2 <= n_pos {
                        tile::<2, 2>(w, xq, h, p, bias, y);
                        p += 2;
                    }
                    if p < n_pos {
                        tile::<2, 1>(w, xq, h, p, bias, y);
                    }
                }
            }
        }
    };
}

q4_256!(avx2_q4, "avx2,fma,f16c", false);
q4_256!(avxvnni_q4, "avx2,fma,f16c,avxvnni", true);
