//! AVX2 + FMA + F16C tier.
//!
//! Every function here is `#[target_feature(enable = "avx2,fma,f16c")]`; the dispatcher in
//! `lib.rs` only calls them when those features were detected. Inside, `unsafe` is limited to raw
//! loads/stores, each justified against a slice that was taken with ordinary bounds-checked
//! slicing.
//!
//! matmul layout: `W` rows and `x` rows are both contiguous along `cols`, so every output is a
//! dot product. A micro-kernel computes an `R x P` tile (R weight rows, P positions) with one
//! 8-lane accumulator per output, decoding each weight chunk once and reusing it for all P
//! positions; at the end four accumulators are transposed-and-reduced with `hadd` into four
//! adjacent outputs (one 128-bit store).

#[cfg(target_arch = "x86")]
use core::arch::x86::*;
#[cfg(target_arch = "x86_64")]
use core::arch::x86_64::*;

use crate::{scalar, GgmlType, MatArgs, QK};

// Type tags as const-generic parameters: a `match` on them folds away after monomorphisation,
// which keeps a single micro-kernel body for all six formats without relying on inlining through
// trait methods (which would lack the target features).
pub(crate) const T_F32: u8 = 0;
pub(crate) const T_F16: u8 = 1;
pub(crate) const T_BF16: u8 = 2;
pub(crate) const T_Q8_0: u8 = 3;
pub(crate) const T_Q4_0: u8 = 4;
pub(crate) const T_Q4_1: u8 = 5;

/// Values decoded per step: 8 (one register) for float types, one block of 32 for quantised.
const fn unit(t: u8) -> usize {
    if t <= T_BF16 {
        8
    } else {
        QK
    }
}

/// Bytes per decode step: `unit(t)` values of the type, sized by laya-format's table.
const fn unit_bytes(t: u8) -> usize {
    wtype(t).row_bytes_rounded(unit(t))
}

pub(crate) const fn wtype(t: u8) -> GgmlType {
    match t {
        T_F32 => GgmlType::F32,
        T_F16 => GgmlType::F16,
        T_BF16 => GgmlType::BF16,
        T_Q8_0 => GgmlType::Q8_0,
        T_Q4_0 => GgmlType::Q4_0,
        _ => GgmlType::Q4_1,
    }
}

/// Reads the little-endian f16 at `p` as f32.
///
/// # Safety
/// `p` must point to 2 readable bytes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees 2 readable bytes; read_unaligned has no alignment need.
    let bits = u16::from_le_bytes(unsafe { core::ptr::read_unaligned(p as *const [u8; 2]) });
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// Decodes one unit (see [`unit`]) starting at `p` into registers; only the first
/// `unit(T) / 8` are meaningful. Bit-identical to `scalar::decode`.
///
/// # Safety
/// `p` must point to `unit_bytes(T)` readable bytes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn decode<const T: u8>(p: *const u8) -> [__m256; 4] {
    let z = _mm256_setzero_ps();
    // SAFETY (whole block): every load below reads inside the `unit_bytes(T)` bytes at `p`
    // that the caller guarantees; all loads are unaligned-tolerant (`loadu`/`loadl`).
    unsafe {
        match T {
            T_F32 => [_mm256_loadu_ps(p as *const f32), z, z, z],
            T_F16 => [_mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)), z, z, z],
            T_BF16 => {
                let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i));
                [_mm256_castsi256_ps(_mm256_slli_epi32::<16>(h)), z, z, z]
            }
            T_Q8_0 => {
                let d = _mm256_set1_ps(f16_at(p));
                let q = |i: usize| {
                    let b = _mm_loadl_epi64(p.add(2 + 8 * i) as *const __m128i);
                    _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)))
                };
                [q(0), q(1), q(2), q(3)]
            }
            _ => {
                // Q4_0 / Q4_1: 16 bytes of nibbles; low nibbles are values 0..16, high 16..32.
                let off = if T == T_Q4_0 { 2 } else { 4 };
                let d = _mm256_set1_ps(f16_at(p));
                let qs = _mm_loadu_si128(p.add(off) as *const __m128i);
                let mask = _mm_set1_epi8(0x0F);
                let lo = _mm_and_si128(qs, mask);
                let hi = _mm_and_si128(_mm_srli_epi16::<4>(qs), mask);
                let parts = [lo, _mm_srli_si128::<8>(lo), hi, _mm_srli_si128::<8>(hi)];
                if T == T_Q4_0 {
                    let eight = _mm256_set1_epi32(8);
                    parts.map(|v| {
                        let q = _mm256_sub_epi32(_mm256_cvtepu8_epi32(v), eight);
                        _mm256_mul_ps(d, _mm256_cvtepi32_ps(q))
                    })
                } else {
                    let m = _mm256_set1_ps(f16_at(p.add(2)));
                    parts.map(|v| {
                        let q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
                        // mul then add (not fma) to round like the scalar twin.
                        _mm256_add_ps(_mm256_mul_ps(d, q), m)
                    })
                }
            }
        }
    }
}

/// Sums of four vectors, one per lane of the result: `[Σa, Σb, Σc, Σd]`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) fn hsum4(a: __m256, b: __m256, c: __m256, d: __m256) -> __m128 {
    let ab = _mm256_hadd_ps(a, b); // a01 a23 b01 b23 | a45 a67 b45 b67
    let cd = _mm256_hadd_ps(c, d);
    let abcd = _mm256_hadd_ps(ab, cd); // a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7
    _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps::<1>(abcd))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// One `R x P` output tile: rows `o0..o0+R`, positions `p0..p0+P`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn tile<const T: u8, const R: usize, const P: usize>(a: &MatArgs, x: &[f32], o0: usize, p0: usize, bias: Option<&[f32]>, y: &mut [f32]) {
    let (rows, cols) = (a.rows, a.cols);
    let (u, ub) = (unit(T), unit_bytes(T));
    let nv = u / 8;
    let wr: [&[u8]; R] = core::array::from_fn(|r| a.row(o0 + r));
    let xr: [&[f32]; P] = core::array::from_fn(|p| &x[(p0 + p) * cols..][..cols]);
    let n_full = cols / u;
    // The loads below rely on these; they hold for every type by construction of row_bytes.
    debug_assert!(n_full * ub <= a.rb && n_full * u <= cols);
    let mut acc = [[_mm256_setzero_ps(); P]; R];
    for b in 0..n_full {
        for r in 0..R {
            // SAFETY: b < n_full, so bytes b*ub .. (b+1)*ub lie within n_full*ub <= rb, the
            // length of the row slice wr[r].
            let wv = unsafe { decode::<T>(wr[r].as_ptr().add(b * ub)) };
            for p in 0..P {
                for v in 0..nv {
                    // SAFETY: b*u + 8v + 8 <= n_full*u <= cols = xr[p].len().
                    let xv = unsafe { _mm256_loadu_ps(xr[p].as_ptr().add(b * u + 8 * v)) };
                    acc[r][p] = _mm256_fmadd_ps(wv[v], xv, acc[r][p]);
                }
            }
        }
    }
    let c0 = n_full * u;
    let tail = cols - c0; // non-zero only for float types (quantised cols are block multiples)
    if tail > 0 {
        // Zero-padded stack copies keep the tail in the vector path without over-reading.
        let mut buf = [0.0f32; QK];
        let xt: [[f32; 8]; P] = core::array::from_fn(|p| {
            let mut t = [0.0f32; 8];
            t[..tail].copy_from_slice(&xr[p][c0..]);
            t
        });
        for r in 0..R {
            scalar::decode(wtype(T), wr[r], c0, tail, &mut buf);
            // SAFETY: buf has 32 >= 8 elements; xt[p] has exactly 8.
            let wv = unsafe { _mm256_loadu_ps(buf.as_ptr()) };
            for p in 0..P {
                let xv = unsafe { _mm256_loadu_ps(xt[p].as_ptr()) };
                acc[r][p] = _mm256_fmadd_ps(wv, xv, acc[r][p]);
            }
        }
    }
    for p in 0..P {
        let yr = &mut y[(p0 + p) * rows + o0..][..R];
        if R.is_multiple_of(4) {
            for g in 0..R / 4 {
                let r = 4 * g;
                let mut s = hsum4(acc[r][p], acc[r + 1][p], acc[r + 2][p], acc[r + 3][p]);
                if let Some(b) = bias {
                    let b = &b[o0 + r..][..4];
                    // SAFETY: b has exactly 4 elements.
                    s = _mm_add_ps(s, unsafe { _mm_loadu_ps(b.as_ptr()) });
                }
                let out = &mut yr[r..r + 4];
                // SAFETY: out has exactly 4 elements.
                unsafe { _mm_storeu_ps(out.as_mut_ptr(), s) };
            }
        } else {
            for r in 0..R {
                yr[r] = hsum(acc[r][p]) + bias.map_or(0.0, |b| b[o0 + r]);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Position-panel matmul (n_pos >= 5): the activations are transposed into a stack panel
// `xt[i][p]` (8 or 16 positions per column), so one weight scalar, broadcast, feeds 8 positions
// per FMA and the accumulators hold `y[o, p..p+8]` directly: rank-1 updates, no horizontal sums,
// and each weight (or decoded block) is read once per 16 positions.

/// Columns per panel chunk: 256 x 16 floats = 16 KiB of stack, half of a Zen 3 L1D, leaving room
/// for the weight rows streaming past. A multiple of `QK` so quantised blocks never straddle.
const KC: usize = 256;

/// Rows per register tile: `R x V` accumulators (12 for 16 positions) keep both FMA pipes busy
/// through the 4-cycle latency.
const RT: usize = 6;

/// Copies `x[p0 + p, k0 + i]` for `p < np`, `i < kc` into `xt[i * s + p]`, zero-filling
/// positions `np..s` so padded lanes compute harmless zeros.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
#[allow(clippy::too_many_arguments)]
fn transpose_panel(s: usize, x: &[f32], cols: usize, p0: usize, np: usize, k0: usize, kc: usize, xt: &mut [f32; KC * 16]) {
    let xt = &mut xt[..kc * s];
    for p in 0..np {
        let xr = &x[(p0 + p) * cols + k0..][..kc];
        for (i, v) in xr.iter().enumerate() {
            xt[i * s + p] = *v;
        }
    }
    if np < s {
        for i in 0..kc {
            xt[i * s + np..(i + 1) * s].fill(0.0);
        }
    }
}

/// One `R`-row tile over one panel chunk: `acc[r][v] = sum_i W[o0 + r, k0 + i] * xt[i][8v..]`,
/// then `y[p0 + p, o0 + r] (+)= acc` for the `np` real positions (`=` plus bias on the first
/// chunk, `+=` on later ones).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
#[allow(clippy::too_many_arguments)]
fn panel_tile<const T: u8, const R: usize, const V: usize>(
    a: &MatArgs,
    xt: &[f32; KC * 16],
    o0: usize,
    k0: usize,
    kc: usize,
    p0: usize,
    np: usize,
    bias: Option<&[f32]>,
    y: &mut [f32],
) {
    let s = 8 * V;
    let xt = &xt[..kc * s];
    let (u, ub) = (unit(T), unit_bytes(T));
    // k0 and kc are multiples of u (KC is a multiple of 32; a float tail has u = 8 and is
    // handled as a whole unit below only when complete).
    let wr: [&[u8]; R] = core::array::from_fn(|r| &a.row(o0 + r)[k0 / u * ub..]);
    let mut acc = [[_mm256_setzero_ps(); V]; R];
    let n_full = kc / u;
    if T == T_F32 {
        for r in 0..R {
            assert!(wr[r].len() >= kc * 4);
        }
        for i in 0..kc {
            // SAFETY: (i+1)*s <= kc*s = xt.len(), and 8v + 8 <= s.
            let xv: [__m256; V] = core::array::from_fn(|v| unsafe { _mm256_loadu_ps(xt.as_ptr().add(i * s + 8 * v)) });
            for r in 0..R {
                // SAFETY: 4i + 4 <= 4kc <= wr[r].len() (asserted above).
                let w = _mm256_set1_ps(unsafe { core::ptr::read_unaligned(wr[r].as_ptr().add(4 * i) as *const f32) });
                for v in 0..V {
                    acc[r][v] = _mm256_fmadd_ps(w, xv[v], acc[r][v]);
                }
            }
        }
    } else {
        for r in 0..R {
            assert!(wr[r].len() >= n_full * ub);
        }
        let mut wb = [[0.0f32; QK]; R];
        for b in 0..n_full {
            for r in 0..R {
                // SAFETY: (b+1)*ub <= n_full*ub <= wr[r].len() (asserted above).
                let wv = unsafe { decode::<T>(wr[r].as_ptr().add(b * ub)) };
                for q in 0..u / 8 {
                    // SAFETY: 8q + 8 <= u <= QK = wb[r].len().
                    unsafe { _mm256_storeu_ps(wb[r].as_mut_ptr().add(8 * q), wv[q]) };
                }
            }
            for j in 0..u {
                let i = b * u + j;
                // SAFETY: i < n_full*u <= kc, so (i+1)*s <= xt.len().
                let xv: [__m256; V] = core::array::from_fn(|v| unsafe { _mm256_loadu_ps(xt.as_ptr().add(i * s + 8 * v)) });
                for r in 0..R {
                    let w = _mm256_set1_ps(wb[r][j]);
                    for v in 0..V {
                        acc[r][v] = _mm256_fmadd_ps(w, xv[v], acc[r][v]);
                    }
                }
            }
        }
    }
    let rows = a.rows;
    let first = k0 == 0;
    let mut out = [[0.0f32; 16]; R];
    for r in 0..R {
        for v in 0..V {
            // SAFETY: 8v + 8 <= 8V <= 16 = out[r].len().
            unsafe { _mm256_storeu_ps(out[r].as_mut_ptr().add(8 * v), acc[r][v]) };
        }
    }
    for p in 0..np {
        let yr = &mut y[(p0 + p) * rows + o0..][..R];
        for r in 0..R {
            yr[r] = if first { out[r][p] + bias.map_or(0.0, |b| b[o0 + r]) } else { yr[r] + out[r][p] };
        }
    }
}

/// The panel path for positions `p0 .. p0 + np` (`np <= 16`), all rows.
#[target_feature(enable = "avx2,fma,f16c")]
fn matmul_panel<const T: u8, const V: usize>(a: &MatArgs, x: &[f32], p0: usize, np: usize, bias: Option<&[f32]>, y: &mut [f32]) {
    let (rows, cols) = (a.rows, a.cols);
    let mut xt = [0.0f32; KC * 16];
    let mut k0 = 0;
    while k0 < cols {
        let kc = KC.min(cols - k0);
        transpose_panel(8 * V, x, cols, p0, np, k0, kc, &mut xt);
        let mut o = 0;
        while o + RT <= rows {
            panel_tile::<T, RT, V>(a, &xt, o, k0, kc, p0, np, bias, y);
            o += RT;
        }
        if o + 4 <= rows {
            panel_tile::<T, 4, V>(a, &xt, o, k0, kc, p0, np, bias, y);
            o += 4;
        }
        if o + 2 <= rows {
            panel_tile::<T, 2, V>(a, &xt, o, k0, kc, p0, np, bias, y);
            o += 2;
        }
        if o < rows {
            panel_tile::<T, 1, V>(a, &xt, o, k0, kc, p0, np, bias, y);
        }
        k0 += kc;
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn matmul_t<const T: u8>(a: &MatArgs, x: &[f32], n_pos: usize, bias: Option<&[f32]>, y: &mut [f32]) {
    let rows = a.rows;
    // Float tails (cols not a multiple of 8) stay on the dot-product tiles below.
    if n_pos >= 5 && a.cols.is_multiple_of(8) {
        let mut p0 = 0;
        while p0 < n_pos {
            let np = (n_pos - p0).min(16);
            if np > 8 {
                matmul_panel::<T, 2>(a, x, p0, np, bias, y);
            } else {
                matmul_panel::<T, 1>(a, x, p0, np, bias, y);
            }
            p0 += np;
        }
        return;
    }
    let mut o = 0;
    if n_pos == 1 {
        // Memory-bound (the output head): 8 independent rows give enough FMA chains in flight.
        while o + 8 <= rows {
            tile::<T, 8, 1>(a, x, o, 0, bias, y);
            o += 8;
        }
    }
    if T >= T_Q8_0 && n_pos > 1 {
        // Quantised weights with several positions: decoding a block costs more than the FMAs
        // it feeds, so decode each row once per 8 positions (8 accumulators + 4 weight regs).
        while o < rows {
            let mut p = 0;
            while p + 8 <= n_pos {
                tile::<T, 1, 8>(a, x, o, p, bias, y);
                p += 8;
            }
            if p + 4 <= n_pos {
                tile::<T, 1, 4>(a, x, o, p, bias, y);
                p += 4;
            }
            while p < n_pos {
                tile::<T, 1, 1>(a, x, o, p, bias, y);
                p += 1;
            }
            o += 1;
        }
        return;
    }
    while o + 4 <= rows {
        let mut p = 0;
        while p + 3 <= n_pos {
            tile::<T, 4, 3>(a, x, o, p, bias, y);
            p += 3;
        }
        if p + 2 <= n_pos {
            tile::<T, 4, 2>(a, x, o, p, bias, y);
            p += 2;
        }
        if p < n_pos {
            tile::<T, 4, 1>(a, x, o, p, bias, y);
        }
        o += 4;
    }
    while o < rows {
        let mut p = 0;
        while p + 4 <= n_pos {
            tile::<T, 1, 4>(a, x, o, p, bias, y);
            p += 4;
        }
        while p < n_pos {
            tile::<T, 1, 1>(a, x, o, p, bias, y);
            p += 1;
        }
        o += 1;
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn matmul(a: &MatArgs, x: &[f32], n_pos: usize, bias: Option<&[f32]>, y: &mut [f32]) {
    match a.ty {
        GgmlType::F32 => matmul_t::<T_F32>(a, x, n_pos, bias, y),
        GgmlType::F16 => matmul_t::<T_F16>(a, x, n_pos, bias, y),
        GgmlType::BF16 => matmul_t::<T_BF16>(a, x, n_pos, bias, y),
        GgmlType::Q8_0 => matmul_t::<T_Q8_0>(a, x, n_pos, bias, y),
        GgmlType::Q4_0 => matmul_t::<T_Q4_0>(a, x, n_pos, bias, y),
        GgmlType::Q4_1 => matmul_t::<T_Q4_1>(a, x, n_pos, bias, y),
        // `Matrix::new` refuses integer tables: no matrix of them reaches a kernel.
        GgmlType::I16 | GgmlType::I32 => {}
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn row_op_t<const T: u8>(row: &[u8], out: &mut [f32], add: bool) {
    let (u, ub) = (unit(T), unit_bytes(T));
    let cols = out.len();
    let n_full = cols / u;
    // The row must hold `cols` values; check once so the unchecked decode below stays in bounds.
    assert!(row.len() >= n_full * ub, "row_op: row shorter than cols");
    for b in 0..n_full {
        // SAFETY: b < n_full and n_full*ub <= row.len() (asserted above).
        let wv = unsafe { decode::<T>(row.as_ptr().add(b * ub)) };
        let o = &mut out[b * u..][..u];
        for v in 0..u / 8 {
            // SAFETY: 8v + 8 <= u = o.len().
            unsafe {
                let p = o.as_mut_ptr().add(8 * v);
                let r = if add { _mm256_add_ps(_mm256_loadu_ps(p), wv[v]) } else { wv[v] };
                _mm256_storeu_ps(p, r);
            }
        }
    }
    let c0 = n_full * u;
    if c0 < cols {
        let mut buf = [0.0f32; QK];
        scalar::decode(wtype(T), row, c0, cols - c0, &mut buf);
        for (o, v) in out[c0..].iter_mut().zip(buf) {
            *o = if add { *o + v } else { v };
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn row_op(ty: GgmlType, row: &[u8], out: &mut [f32], add: bool) {
    match ty {
        GgmlType::F32 => row_op_t::<T_F32>(row, out, add),
        GgmlType::F16 => row_op_t::<T_F16>(row, out, add),
        GgmlType::BF16 => row_op_t::<T_BF16>(row, out, add),
        GgmlType::Q8_0 => row_op_t::<T_Q8_0>(row, out, add),
        GgmlType::Q4_0 => row_op_t::<T_Q4_0>(row, out, add),
        GgmlType::Q4_1 => row_op_t::<T_Q4_1>(row, out, add),
        GgmlType::I16 | GgmlType::I32 => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Element-wise kernels. Tails shorter than 8 go through a padded stack buffer, so every lane
// operation is the same code path.

/// Loads up to 8 values of `s` (zero-padded with `pad`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn load_tail(s: &[f32], pad: f32) -> __m256 {
    let mut t = [pad; 8];
    t[..s.len()].copy_from_slice(s);
    // SAFETY: t has 8 elements.
    unsafe { _mm256_loadu_ps(t.as_ptr()) }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn store_tail(d: &mut [f32], v: __m256) {
    let mut t = [0.0f32; 8];
    // SAFETY: t has 8 elements.
    unsafe { _mm256_storeu_ps(t.as_mut_ptr(), v) };
    let n = d.len();
    d.copy_from_slice(&t[..n]);
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn ld(s: &[f32]) -> __m256 {
    let s = &s[..8];
    // SAFETY: s has exactly 8 elements.
    unsafe { _mm256_loadu_ps(s.as_ptr()) }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn st(d: &mut [f32], v: __m256) {
    let d = &mut d[..8];
    // SAFETY: d has exactly 8 elements.
    unsafe { _mm256_storeu_ps(d.as_mut_ptr(), v) }
}

/// Applies `f` to every 8-lane chunk of `x` in place (tail padded with `pad`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn map_inplace(x: &mut [f32], pad: f32, mut f: impl FnMut(__m256) -> __m256) {
    let mut it = x.chunks_exact_mut(8);
    for c in &mut it {
        st(c, f(ld(c)));
    }
    let r = it.into_remainder();
    if !r.is_empty() {
        let v = f(load_tail(r, pad));
        store_tail(r, v);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for k in 0..4 {
            acc[k] = _mm256_fmadd_ps(ld(&a[i + 8 * k..]), ld(&b[i + 8 * k..]), acc[k]);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(ld(&a[i..]), ld(&b[i..]), acc[0]);
        i += 8;
    }
    if i < n {
        acc[1] = _mm256_fmadd_ps(load_tail(&a[i..], 0.0), load_tail(&b[i..], 0.0), acc[1]);
    }
    let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    hsum(s)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    let n = x.len().min(y.len());
    let (x, y) = (&x[..n], &mut y[..n]);
    let av = _mm256_set1_ps(a);
    let mut i = 0;
    while i + 8 <= n {
        let r = _mm256_fmadd_ps(av, ld(&x[i..]), ld(&y[i..]));
        st(&mut y[i..], r);
        i += 8;
    }
    for j in i..n {
        y[j] += a * x[j];
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn add(x: &[f32], y: &mut [f32]) {
    let n = x.len().min(y.len());
    let (x, y) = (&x[..n], &mut y[..n]);
    let mut i = 0;
    while i + 8 <= n {
        let r = _mm256_add_ps(ld(&x[i..]), ld(&y[i..]));
        st(&mut y[i..], r);
        i += 8;
    }
    for j in i..n {
        y[j] += x[j];
    }
}

/// Two 8-lane halves per 16-value chunk; the partial last chunk is padded with `p = 0` (score
/// 0, adds nothing) and `-inf` for its maximum.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn score_chunks(p: &[f32], share: &[f32], c: f32, out: &mut [f32], chunk_max: &mut [f32]) -> f32 {
    let n = p.len();
    let (share, out) = (&share[..n], &mut out[..n]);
    let (cv, z) = (_mm256_set1_ps(c), _mm256_setzero_ps());
    let mut sums = [z; 2];
    for (ci, m) in chunk_max.iter_mut().enumerate().take(n.div_ceil(16)) {
        let mut mx = _mm256_set1_ps(f32::NEG_INFINITY);
        for h in 0..2 {
            let i = 16 * ci + 8 * h;
            if i >= n {
                break;
            }
            let k = (n - i).min(8);
            let (pv, sv) = if k == 8 { (ld(&p[i..]), ld(&share[i..])) } else { (load_tail(&p[i..], 0.0), load_tail(&share[i..], 0.0)) };
            let v = _mm256_mul_ps(pv, _mm256_max_ps(_mm256_sub_ps(cv, sv), z));
            sums[h] = _mm256_add_ps(sums[h], v);
            if k == 8 {
                st(&mut out[i..], v);
                mx = _mm256_max_ps(mx, v);
            } else {
                store_tail(&mut out[i..], v);
                let mut t = [f32::NEG_INFINITY; 8];
                t[..k].copy_from_slice(&out[i..]);
                mx = _mm256_max_ps(mx, ld(&t));
            }
        }
        *m = hmax(mx);
    }
    hsum(_mm256_add_ps(sums[0], sums[1]))
}

/// The largest of the 8 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn hmax(v: __m256) -> f32 {
    let m128 = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let m128 = _mm_max_ps(m128, _mm_movehl_ps(m128, m128));
    _mm_cvtss_f32(_mm_max_ss(m128, _mm_movehdup_ps(m128)))
}

/// Two 8-lane halves per full run; a partial last run is folded by the scalar twin.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn run_max(x: &[f32], out: &mut [f32]) {
    let runs = x.chunks_exact(16);
    let rest = runs.remainder();
    let full = x.len() / 16;
    for (o, run) in out.iter_mut().zip(runs) {
        *o = hmax(_mm256_max_ps(ld(run), ld(&run[8..])));
    }
    if !rest.is_empty() {
        scalar::run_max(rest, &mut out[full..=full]);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn relu(x: &mut [f32]) {
    let z = _mm256_setzero_ps();
    map_inplace(x, 0.0, |v| _mm256_max_ps(v, z));
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn layer_norm(x: &[f32], w: &[f32], b: &[f32], eps: f32, out: &mut [f32]) {
    let n = x.len();
    if n == 0 {
        return;
    }
    let (w, b, out) = (&w[..n], &b[..n], &mut out[..n]);
    let mut s = _mm256_setzero_ps();
    let mut i = 0;
    while i + 8 <= n {
        s = _mm256_add_ps(s, ld(&x[i..]));
        i += 8;
    }
    if i < n {
        s = _mm256_add_ps(s, load_tail(&x[i..], 0.0));
    }
    let mean = hsum(s) / n as f32;
    let mv = _mm256_set1_ps(mean);
    let mut q = _mm256_setzero_ps();
    i = 0;
    while i + 8 <= n {
        let d = _mm256_sub_ps(ld(&x[i..]), mv);
        q = _mm256_fmadd_ps(d, d, q);
        i += 8;
    }
    if i < n {
        // Pad with the mean so padded lanes contribute exactly zero.
        let d = _mm256_sub_ps(load_tail(&x[i..], mean), mv);
        q = _mm256_fmadd_ps(d, d, q);
    }
    let var = hsum(q) / n as f32;
    let rstd = _mm256_set1_ps(1.0 / (var + eps).sqrt());
    i = 0;
    while i + 8 <= n {
        let d = _mm256_mul_ps(_mm256_sub_ps(ld(&x[i..]), mv), rstd);
        st(&mut out[i..], _mm256_fmadd_ps(d, ld(&w[i..]), ld(&b[i..])));
        i += 8;
    }
    if i < n {
        let d = _mm256_mul_ps(_mm256_sub_ps(load_tail(&x[i..], 0.0), mv), rstd);
        let r = _mm256_fmadd_ps(d, load_tail(&w[i..], 0.0), load_tail(&b[i..], 0.0));
        store_tail(&mut out[i..], r);
    }
}

/// `exp(x)` for 8 lanes (Cephes-style: 2^n * p(r) with a degree-6 polynomial, relative error
/// about 2 ulp). Inputs above 88 saturate to `exp(88)`; inputs below -87 (including `-inf`) give
/// exactly 0, a deviation below 1.7e-38 absolute from the true value.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) fn exp8(x: __m256) -> __m256 {
    let under = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(-87.0));
    let x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0)), _mm256_set1_ps(88.0));
    let n =
        _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(x, _mm256_set1_ps(core::f32::consts::LOG2_E)));
    // Cody-Waite: ln2 split so n*LN2_HI is exact.
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm256_set1_ps(1.987_569_1e-4);
    for c in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 0.5] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let r2 = _mm256_mul_ps(r, r);
    let e = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0)));
    let pow2 = _mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)));
    let v = _mm256_mul_ps(e, _mm256_castsi256_ps(pow2));
    _mm256_andnot_ps(under, v)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn gelu_tanh(x: &mut [f32]) {
    let c = _mm256_set1_ps(scalar::GELU_C);
    let a = _mm256_set1_ps(scalar::GELU_A);
    let one = _mm256_set1_ps(1.0);
    let m2 = _mm256_set1_ps(-2.0);
    map_inplace(x, 0.0, |v| {
        // 0.5 x (1 + tanh u) == x / (1 + exp(-2u)); no cancellation for negative x.
        let x2 = _mm256_mul_ps(v, v);
        let u = _mm256_mul_ps(_mm256_mul_ps(c, v), _mm256_fmadd_ps(a, x2, one));
        let e = exp8(_mm256_mul_ps(m2, u));
        _mm256_div_ps(v, _mm256_add_ps(one, e))
    });
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn softmax(x: &mut [f32]) {
    if x.is_empty() {
        return;
    }
    let mut mv = _mm256_set1_ps(f32::NEG_INFINITY);
    let mut it = x.chunks_exact(8);
    for c in &mut it {
        mv = _mm256_max_ps(mv, ld(c));
    }
    mv = _mm256_max_ps(mv, load_tail(it.remainder(), f32::NEG_INFINITY));
    let m128 = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps::<1>(mv));
    let m128 = _mm_max_ps(m128, _mm_movehl_ps(m128, m128));
    let m128 = _mm_max_ss(m128, _mm_movehdup_ps(m128));
    let m = _mm256_set1_ps(_mm_cvtss_f32(m128));
    let mut s = _mm256_setzero_ps();
    // Padding with -inf makes the padded lanes' exp exactly 0, so the sum is unaffected.
    map_inplace(x, f32::NEG_INFINITY, |v| {
        let e = exp8(_mm256_sub_ps(v, m));
        s = _mm256_add_ps(s, e);
        e
    });
    let inv = _mm256_set1_ps(1.0 / hsum(s));
    map_inplace(x, 0.0, |v| _mm256_mul_ps(v, inv));
}

/// Multi-head attention, one query and head at a time, with the head's scores, softmax and
/// weighted sum of values kept in registers (see `Kernels::attention`). Requires `dh % 8 == 0`
/// (the dispatcher routes other head sizes to the composed path).
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    n_q: usize,
    n_kv: usize,
    d: usize,
    heads: usize,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let dh = d / heads;
    let nv = dh / 8;
    let (q, k, v) = (&q[..n_q * d], &k[..n_kv * d], &v[..n_kv * d]);
    let out = &mut out[..n_q * d];
    let scores = &mut scores[..n_kv];
    let sc = _mm256_set1_ps(scale);
    for p in 0..n_q {
        for h in 0..heads {
            let c = h * dh;
            let qv = &q[p * d + c..][..dh];
            // Four keys at a time: four independent FMA chains, one transpose-reduce.
            let mut j = 0;
            while j + 4 <= n_kv {
                let kr: [&[f32]; 4] = core::array::from_fn(|t| &k[(j + t) * d + c..][..dh]);
                let mut acc = [_mm256_setzero_ps(); 4];
                for i in 0..nv {
                    let x = ld(&qv[8 * i..]);
                    for t in 0..4 {
                        acc[t] = _mm256_fmadd_ps(x, ld(&kr[t][8 * i..]), acc[t]);
                    }
                }
                let s4 = _mm_mul_ps(hsum4(acc[0], acc[1], acc[2], acc[3]), _mm256_castps256_ps128(sc));
                let dst = &mut scores[j..j + 4];
                // SAFETY: dst has exactly 4 elements.
                unsafe { _mm_storeu_ps(dst.as_mut_ptr(), s4) };
                j += 4;
            }
            while j < n_kv {
                let kr = &k[j * d + c..][..dh];
                let mut acc = _mm256_setzero_ps();
                for i in 0..nv {
                    acc = _mm256_fmadd_ps(ld(&qv[8 * i..]), ld(&kr[8 * i..]), acc);
                }
                scores[j] = hsum(acc) * scale;
                j += 1;
            }
            softmax(scores);
            // Output in groups of up to four 8-lane chunks, accumulated in registers over keys.
            let o = &mut out[p * d + c..][..dh];
            let mut i = 0;
            while i < nv {
                let g = (nv - i).min(4);
                let mut acc = [_mm256_setzero_ps(); 4];
                for (jj, s) in scores.iter().enumerate() {
                    let w = _mm256_set1_ps(*s);
                    let vr = &v[jj * d + c + 8 * i..];
                    for t in 0..g {
                        acc[t] = _mm256_fmadd_ps(w, ld(&vr[8 * t..]), acc[t]);
                    }
                }
                for t in 0..g {
                    st(&mut o[8 * (i + t)..], acc[t]);
                }
                i += g;
            }
        }
    }
}
