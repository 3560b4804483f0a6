//! AVX-512F tier (the level also requires AVX2 + FMA + F16C, which every AVX-512F CPU has).
//!
//! Matmul, the row decoders, GELU and softmax have 512-bit bodies (softmax runs over the whole
//! 20,000-word lexicon, GELU over 16 × FFN values per block: both showed in `laya bench`'s stage
//! table once the int8 matmuls got fast). The other element-wise kernels operate on rows of
//! 128..1024 values and are re-exported from the AVX2 tier, which is sound because
//! `Level::Avx512` is only granted when AVX2/FMA/F16C are present.
//!
//! Same structure as `avx2.rs`: an `R x P` tile of 16-lane accumulators, each weight unit decoded
//! once per tile and reused across positions; accumulators are folded to 8 lanes and reduced four
//! rows at a time with the AVX2 transpose-reduce.

#[cfg(target_arch = "x86")]
use core::arch::x86::*;
#[cfg(target_arch = "x86_64")]
use core::arch::x86_64::*;

pub(crate) use crate::avx2::{add, axpy, dot, layer_norm, relu};
use crate::avx2::{hsum, hsum4, wtype, T_BF16, T_F16, T_F32, T_Q4_0, T_Q4_1, T_Q8_0};
use crate::{scalar, GgmlType, MatArgs, QK};

/// Values per decode step: 16 for float types, one block of 32 (two registers) for quantised.
const fn unit(t: u8) -> usize {
    if t <= T_BF16 {
        16
    } else {
        QK
    }
}

/// Bytes per decode step: `unit(t)` values of the type, sized by laya-format's table.
const fn unit_bytes(t: u8) -> usize {
    wtype(t).row_bytes_rounded(unit(t))
}

/// # Safety
/// `p` must point to 2 readable bytes.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[inline]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees 2 readable bytes; read_unaligned has no alignment need.
    let bits = u16::from_le_bytes(unsafe { core::ptr::read_unaligned(p as *const [u8; 2]) });
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// Decodes one unit at `p`; bit-identical to `scalar::decode`.
///
/// # Safety
/// `p` must point to `unit_bytes(T)` readable bytes.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[inline]
unsafe fn decode<const T: u8>(p: *const u8) -> [__m512; 2] {
    let z = _mm512_setzero_ps();
    // SAFETY (whole block): every load reads inside the `unit_bytes(T)` bytes at `p` that the
    // caller guarantees; all loads are unaligned loads.
    unsafe {
        match T {
            T_F32 => [_mm512_loadu_ps(p as *const f32), z],
            T_F16 => [_mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)), z],
            T_BF16 => {
                let h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(p as *const __m256i));
                [_mm512_castsi512_ps(_mm512_slli_epi32::<16>(h)), z]
            }
            T_Q8_0 => {
                let d = _mm512_set1_ps(f16_at(p));
                let q = |i: usize| {
                    let b = _mm_loadu_si128(p.add(2 + 16 * i) as *const __m128i);
                    _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)))
                };
                [q(0), q(1)]
            }
            _ => {
                let off = if T == T_Q4_0 { 2 } else { 4 };
                let d = _mm512_set1_ps(f16_at(p));
                let qs = _mm_loadu_si128(p.add(off) as *const __m128i);
                let mask = _mm_set1_epi8(0x0F);
                let parts = [_mm_and_si128(qs, mask), _mm_and_si128(_mm_srli_epi16::<4>(qs), mask)];
                if T == T_Q4_0 {
                    let eight = _mm512_set1_epi32(8);
                    parts.map(|v| {
                        let q = _mm512_sub_epi32(_mm512_cvtepu8_epi32(v), eight);
                        _mm512_mul_ps(d, _mm512_cvtepi32_ps(q))
                    })
                } else {
                    let m = _mm512_set1_ps(f16_at(p.add(2)));
                    parts.map(|v| {
                        let q = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v));
                        _mm512_add_ps(_mm512_mul_ps(d, q), m)
                    })
                }
            }
        }
    }
}

/// Folds 16 lanes to 8 (lane i + lane i+8).
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[inline]
fn fold(v: __m512) -> __m256 {
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
    _mm256_add_ps(_mm512_castps512_ps256(v), hi)
}

#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[inline]
fn tile<const T: u8, const R: usize, const P: usize>(a: &MatArgs, x: &[f32], o0: usize, p0: usize, bias: Option<&[f32]>, y: &mut [f32]) {
    let (rows, cols) = (a.rows, a.cols);
    let (u, ub) = (unit(T), unit_bytes(T));
    let nv = u / 16;
    let wr: [&[u8]; R] = core::array::from_fn(|r| a.row(o0 + r));
    let xr: [&[f32]; P] = core::array::from_fn(|p| &x[(p0 + p) * cols..][..cols]);
    let n_full = cols / u;
    debug_assert!(n_full * ub <= a.rb && n_full * u <= cols);
    let mut acc = [[_mm512_setzero_ps(); P]; R];
    for b in 0..n_full {
        for r in 0..R {
            // SAFETY: b < n_full, so bytes b*ub .. (b+1)*ub lie within n_full*ub <= rb, the
            // length of the row slice wr[r].
            let wv = unsafe { decode::<T>(wr[r].as_ptr().add(b * ub)) };
            for p in 0..P {
                for v in 0..nv {
                    // SAFETY: b*u + 16v + 16 <= n_full*u <= cols = xr[p].len().
                    let xv = unsafe { _mm512_loadu_ps(xr[p].as_ptr().add(b * u + 16 * v)) };
                    acc[r][p] = _mm512_fmadd_ps(wv[v], xv, acc[r][p]);
                }
            }
        }
    }
    let c0 = n_full * u;
    let tail = cols - c0; // float types only; < 16
    if tail > 0 {
        let mut buf = [0.0f32; QK];
        let xt: [[f32; 16]; P] = core::array::from_fn(|p| {
            let mut t = [0.0f32; 16];
            t[..tail].copy_from_slice(&xr[p][c0..]);
            t
        });
        for r in 0..R {
            scalar::decode(wtype(T), wr[r], c0, tail, &mut buf);
            // SAFETY: buf has 32 >= 16 elements; xt[p] has exactly 16.
            let wv = unsafe { _mm512_loadu_ps(buf.as_ptr()) };
            for p in 0..P {
                let xv = unsafe { _mm512_loadu_ps(xt[p].as_ptr()) };
                acc[r][p] = _mm512_fmadd_ps(wv, xv, acc[r][p]);
            }
        }
    }
    for p in 0..P {
        let yr = &mut y[(p0 + p) * rows + o0..][..R];
        if R.is_multiple_of(4) {
            for g in 0..R / 4 {
                let r = 4 * g;
                let f = |k: usize| fold(acc[r + k][p]);
                let mut s = hsum4(f(0), f(1), f(2), f(3));
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
                yr[r] = hsum(fold(acc[r][p])) + bias.map_or(0.0, |b| b[o0 + r]);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Position-panel matmul (n_pos >= 5), as in `avx2.rs`: the activations are transposed into a
// stack panel `xt[i][p]` of 16 positions (one zmm), each weight scalar is broadcast and feeds all
// 16 positions in one FMA; accumulators hold `y[o, p..p+16]` directly.

/// Columns per panel chunk (16 KiB of stack), a multiple of `QK`.
const KC: usize = 256;

/// Rows per register tile: 12 accumulators cover the FMA latency of two 512-bit pipes.
const RT: usize = 12;

/// Copies `x[p0 + p, k0 + i]` for `p < np`, `i < kc` into `xt[i * 16 + p]`, zero-filling the
/// positions `np..16`.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[inline]
#[allow(clippy::too_many_arguments)]
fn transpose_panel(x: &[f32], cols: usize, p0: usize, np: usize, k0: usize, kc: usize, xt: &mut [f32; KC * 16]) {
    let xt = &mut xt[..kc * 16];
    for p in 0..np {
        let xr = &x[(p0 + p) * cols + k0..][..kc];
        for (i, v) in xr.iter().enumerate() {
            xt[i * 16 + p] = *v;
        }
    }
    if np < 16 {
        for i in 0..kc {
            xt[i * 16 + np..(i + 1) * 16].fill(0.0);
        }
    }
}

/// One `R`-row tile over one panel chunk; `y (+)=` as in the AVX2 tier (`=` plus bias on the
/// first chunk, `+=` after).
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[inline]
#[allow(clippy::too_many_arguments)]
fn panel_tile<const T: u8, const R: usize>(
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
    let xt = &xt[..kc * 16];
    let (u, ub) = (unit(T), unit_bytes(T));
    // k0 is a multiple of KC, hence of u; kc is a multiple of u (checked by the caller).
    let wr: [&[u8]; R] = core::array::from_fn(|r| &a.row(o0 + r)[k0 / u * ub..]);
    let mut acc = [_mm512_setzero_ps(); R];
    let n_full = kc / u;
    if T == T_F32 {
        for r in 0..R {
            assert!(wr[r].len() >= kc * 4);
        }
        for i in 0..kc {
            // SAFETY: (i+1)*16 <= kc*16 = xt.len().
            let xv = unsafe { _mm512_loadu_ps(xt.as_ptr().add(i * 16)) };
            for r in 0..R {
                // SAFETY: 4i + 4 <= 4kc <= wr[r].len() (asserted above).
                let w = _mm512_set1_ps(unsafe { core::ptr::read_unaligned(wr[r].as_ptr().add(4 * i) as *const f32) });
                acc[r] = _mm512_fmadd_ps(w, xv, acc[r]);
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
                for q in 0..u / 16 {
                    // SAFETY: 16q + 16 <= u <= QK = wb[r].len().
                    unsafe { _mm512_storeu_ps(wb[r].as_mut_ptr().add(16 * q), wv[q]) };
                }
            }
            for j in 0..u {
                let i = b * u + j;
                // SAFETY: i < n_full*u <= kc, so (i+1)*16 <= xt.len().
                let xv = unsafe { _mm512_loadu_ps(xt.as_ptr().add(i * 16)) };
                for r in 0..R {
                    acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(wb[r][j]), xv, acc[r]);
                }
            }
        }
    }
    let rows = a.rows;
    let first = k0 == 0;
    let mut out = [[0.0f32; 16]; R];
    for r in 0..R {
        // SAFETY: out[r] has exactly 16 elements.
        unsafe { _mm512_storeu_ps(out[r].as_mut_ptr(), acc[r]) };
    }
    for p in 0..np {
        let yr = &mut y[(p0 + p) * rows + o0..][..R];
        for r in 0..R {
            yr[r] = if first { out[r][p] + bias.map_or(0.0, |b| b[o0 + r]) } else { yr[r] + out[r][p] };
        }
    }
}

/// The panel path for positions `p0 .. p0 + np` (`np <= 16`), all rows.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
fn matmul_panel<const T: u8>(a: &MatArgs, x: &[f32], p0: usize, np: usize, bias: Option<&[f32]>, y: &mut [f32]) {
    let (rows, cols) = (a.rows, a.cols);
    let mut xt = [0.0f32; KC * 16];
    let mut k0 = 0;
    while k0 < cols {
        let kc = KC.min(cols - k0);
        transpose_panel(x, cols, p0, np, k0, kc, &mut xt);
        let mut o = 0;
        while o + RT <= rows {
            panel_tile::<T, RT>(a, &xt, o, k0, kc, p0, np, bias, y);
            o += RT;
        }
        if o + 8 <= rows {
            panel_tile::<T, 8>(a, &xt, o, k0, kc, p0, np, bias, y);
            o += 8;
        }
        if o + 4 <= rows {
            panel_tile::<T, 4>(a, &xt, o, k0, kc, p0, np, bias, y);
            o += 4;
        }
        while o < rows {
            panel_tile::<T, 1>(a, &xt, o, k0, kc, p0, np, bias, y);
            o += 1;
        }
        k0 += kc;
    }
}

#[target_feature(enable = "avx512f,avx2,fma,f16c")]
fn matmul_t<const T: u8>(a: &MatArgs, x: &[f32], n_pos: usize, bias: Option<&[f32]>, y: &mut [f32]) {
    let rows = a.rows;
    // Needs whole decode units per chunk: float types need cols % 16 == 0 here (u = 16).
    if n_pos >= 5 && a.cols.is_multiple_of(unit(T)) {
        let mut p0 = 0;
        while p0 < n_pos {
            let np = (n_pos - p0).min(16);
            matmul_panel::<T>(a, x, p0, np, bias, y);
            p0 += np;
        }
        return;
    }
    let mut o = 0;
    if n_pos == 1 {
        while o + 8 <= rows {
            tile::<T, 8, 1>(a, x, o, 0, bias, y);
            o += 8;
        }
    }
    while o + 4 <= rows {
        let mut p = 0;
        while p + 4 <= n_pos {
            tile::<T, 4, 4>(a, x, o, p, bias, y);
            p += 4;
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

#[target_feature(enable = "avx512f,avx2,fma,f16c")]
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

#[target_feature(enable = "avx512f,avx2,fma,f16c")]
fn row_op_t<const T: u8>(row: &[u8], out: &mut [f32], add: bool) {
    let (u, ub) = (unit(T), unit_bytes(T));
    let cols = out.len();
    let n_full = cols / u;
    assert!(row.len() >= n_full * ub, "row_op: row shorter than cols");
    for b in 0..n_full {
        // SAFETY: b < n_full and n_full*ub <= row.len() (asserted above).
        let wv = unsafe { decode::<T>(row.as_ptr().add(b * ub)) };
        let o = &mut out[b * u..][..u];
        for v in 0..u / 16 {
            // SAFETY: 16v + 16 <= u = o.len().
            unsafe {
                let p = o.as_mut_ptr().add(16 * v);
                let r = if add { _mm512_add_ps(_mm512_loadu_ps(p), wv[v]) } else { wv[v] };
                _mm512_storeu_ps(p, r);
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

#[target_feature(enable = "avx512f,avx2,fma,f16c")]
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

/// `exp(x)` for 16 lanes: the same Cephes-style reduction and polynomial as `avx2::exp8`
/// (relative error about 2 ulp); inputs below -87 (and `-inf`) give exactly 0, inputs above 88
/// saturate to `exp(88)`.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[inline]
fn exp16(x: __m512) -> __m512 {
    let under = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(-87.0));
    let x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0)), _mm512_set1_ps(88.0));
    // Round to nearest (the default MXCSR mode) in the conversion itself.
    let ni = _mm512_cvtps_epi32(_mm512_mul_ps(x, _mm512_set1_ps(core::f32::consts::LOG2_E)));
    let n = _mm512_cvtepi32_ps(ni);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_359_4), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm512_set1_ps(1.987_569_1e-4);
    for c in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 0.5] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    let r2 = _mm512_mul_ps(r, r);
    let e = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0)));
    let pow2 = _mm512_slli_epi32::<23>(_mm512_add_epi32(ni, _mm512_set1_epi32(127)));
    _mm512_maskz_mov_ps(!under, _mm512_mul_ps(e, _mm512_castsi512_ps(pow2)))
}

/// Lanes `0..n` set (n <= 16).
#[inline(always)]
fn tail_mask(n: usize) -> __mmask16 {
    ((1u32 << n) - 1) as __mmask16
}

#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(crate) fn gelu_tanh(x: &mut [f32]) {
    let c = _mm512_set1_ps(scalar::GELU_C);
    let a = _mm512_set1_ps(scalar::GELU_A);
    let one = _mm512_set1_ps(1.0);
    let m2 = _mm512_set1_ps(-2.0);
    let f = |v: __m512| {
        // 0.5 x (1 + tanh u) == x / (1 + exp(-2u)); no cancellation for negative x.
        let u = _mm512_mul_ps(_mm512_mul_ps(c, v), _mm512_fmadd_ps(a, _mm512_mul_ps(v, v), one));
        _mm512_div_ps(v, _mm512_add_ps(one, exp16(_mm512_mul_ps(m2, u))))
    };
    for i in (0..x.len()).step_by(16) {
        let m = tail_mask((x.len() - i).min(16));
        // SAFETY: the mask enables only lanes i..min(i+16, len); masked-off lanes are neither
        // read nor written.
        unsafe {
            let p = x.as_mut_ptr().add(i);
            _mm512_mask_storeu_ps(p, m, f(_mm512_maskz_loadu_ps(m, p)));
        }
    }
}

#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(crate) fn softmax(x: &mut [f32]) {
    if x.is_empty() {
        return;
    }
    let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
    // Two accumulators per pass: the max and sum chains are the loops' only dependencies.
    let (mut m0, mut m1) = (ninf, ninf);
    let mut i = 0;
    while i < x.len() {
        let m = tail_mask((x.len() - i).min(16));
        // SAFETY: masked load of lanes i..min(i+16, len); other lanes take -inf.
        let v = unsafe { _mm512_mask_loadu_ps(ninf, m, x.as_ptr().add(i)) };
        if (i / 16) % 2 == 0 {
            m0 = _mm512_max_ps(m0, v);
        } else {
            m1 = _mm512_max_ps(m1, v);
        }
        i += 16;
    }
    let mx = _mm512_set1_ps(_mm512_reduce_max_ps(_mm512_max_ps(m0, m1)));
    let (mut s0, mut s1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    let mut i = 0;
    while i < x.len() {
        let m = tail_mask((x.len() - i).min(16));
        // SAFETY: as above; the padded lanes are -inf, whose exp is exactly 0, and are not
        // stored.
        unsafe {
            let p = x.as_mut_ptr().add(i);
            let e = exp16(_mm512_sub_ps(_mm512_mask_loadu_ps(ninf, m, p), mx));
            if (i / 16) % 2 == 0 {
                s0 = _mm512_add_ps(s0, e);
            } else {
                s1 = _mm512_add_ps(s1, e);
            }
            _mm512_mask_storeu_ps(p, m, e);
        }
        i += 16;
    }
    let inv = _mm512_set1_ps(1.0 / _mm512_reduce_add_ps(_mm512_add_ps(s0, s1)));
    let mut i = 0;
    while i < x.len() {
        let m = tail_mask((x.len() - i).min(16));
        // SAFETY: masked to lanes i..min(i+16, len).
        unsafe {
            let p = x.as_mut_ptr().add(i);
            _mm512_mask_storeu_ps(p, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p), inv));
        }
        i += 16;
    }
}

/// One 16-lane register per chunk (masked for the last); two sum chains.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(crate) fn score_chunks(p: &[f32], share: &[f32], c: f32, out: &mut [f32], chunk_max: &mut [f32]) -> f32 {
    let n = p.len();
    let (share, out) = (&share[..n], &mut out[..n]);
    let chunk_max = &mut chunk_max[..n.div_ceil(16)];
    let (cv, z) = (_mm512_set1_ps(c), _mm512_setzero_ps());
    let (mut s0, mut s1) = (z, z);
    for (ci, m) in chunk_max.iter_mut().enumerate() {
        let i = 16 * ci;
        let k = tail_mask((n - i).min(16));
        // SAFETY: the mask enables lanes i..min(i+16, n) of p, share and out, each n long;
        // masked-off lanes are neither read nor written.
        let v = unsafe {
            let pv = _mm512_maskz_loadu_ps(k, p.as_ptr().add(i));
            let sv = _mm512_maskz_loadu_ps(k, share.as_ptr().add(i));
            let v = _mm512_mul_ps(pv, _mm512_max_ps(_mm512_sub_ps(cv, sv), z));
            _mm512_mask_storeu_ps(out.as_mut_ptr().add(i), k, v);
            v
        };
        if ci % 2 == 0 {
            s0 = _mm512_add_ps(s0, v);
        } else {
            s1 = _mm512_add_ps(s1, v);
        }
        *m = _mm512_mask_reduce_max_ps(k, v);
    }
    _mm512_reduce_add_ps(_mm512_add_ps(s0, s1))
}

/// One masked 16-lane load and reduction per run.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(crate) fn run_max(x: &[f32], out: &mut [f32]) {
    let n = x.len();
    for (ci, o) in out.iter_mut().enumerate().take(n.div_ceil(16)) {
        let i = 16 * ci;
        let k = tail_mask((n - i).min(16));
        // SAFETY: the mask enables lanes i..min(i+16, n) of x, which is n long; masked-off
        // lanes are not read.
        let v = unsafe { _mm512_maskz_loadu_ps(k, x.as_ptr().add(i)) };
        *o = _mm512_mask_reduce_max_ps(k, v);
    }
}

/// Widest head [`attention_keys_in_lanes`] takes (its transposed keys live on the stack).
const KEYS_MAX_DH: usize = 128;

/// Transposes a 16×16 block held as 16 rows: afterwards `r[c]` is column `c`.
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) fn transpose16(r: &mut [__m512; 16]) {
    let pd = _mm512_castps_pd;
    let ps = _mm512_castpd_ps;
    // Pairs of rows interleaved, then pairs of pairs: `u[4a + b]` holds, in 128-bit lane `L`,
    // column `4L + b` of rows `4a..4a+4`.
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    let mut u = [_mm512_setzero_ps(); 16];
    for a in 0..4 {
        let (t0, t1, t2, t3) = (pd(t[4 * a]), pd(t[4 * a + 1]), pd(t[4 * a + 2]), pd(t[4 * a + 3]));
        u[4 * a] = ps(_mm512_unpacklo_pd(t0, t2));
        u[4 * a + 1] = ps(_mm512_unpackhi_pd(t0, t2));
        u[4 * a + 2] = ps(_mm512_unpacklo_pd(t1, t3));
        u[4 * a + 3] = ps(_mm512_unpackhi_pd(t1, t3));
    }
    // Then the 128-bit lanes: column 4L + b gathers lane L of u[b], u[4+b], u[8+b], u[12+b].
    for b in 0..4 {
        let v0 = _mm512_shuffle_f32x4::<0x88>(u[b], u[4 + b]);
        let v1 = _mm512_shuffle_f32x4::<0xDD>(u[b], u[4 + b]);
        let v2 = _mm512_shuffle_f32x4::<0x88>(u[8 + b], u[12 + b]);
        let v3 = _mm512_shuffle_f32x4::<0xDD>(u[8 + b], u[12 + b]);
        r[b] = _mm512_shuffle_f32x4::<0x88>(v0, v2);
        r[4 + b] = _mm512_shuffle_f32x4::<0x88>(v1, v3);
        r[8 + b] = _mm512_shuffle_f32x4::<0xDD>(v0, v2);
        r[12 + b] = _mm512_shuffle_f32x4::<0xDD>(v1, v3);
    }
}

/// Attention with up to 16 keys, one lane per key. Each head's keys are transposed once
/// (`kt[c]` = column `c` of the 16 keys), so a query's 16 scores are `dh` FMAs of a broadcast
/// query element with `kt[c]` into one register, its softmax runs inside that register (masked
/// lanes are -inf, whose exp is 0), and the values are summed with the 16 weights broadcast;
/// four queries at a time.
/// The general path below spends more on the horizontal sum of each dot product than on the
/// products themselves when there are only 16 keys.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
fn attention_keys_in_lanes(q: &[f32], k: &[f32], v: &[f32], n_q: usize, n_kv: usize, d: usize, heads: usize, scale: f32, out: &mut [f32]) {
    let dh = d / heads;
    let nv = dh / 16;
    assert!((1..=16).contains(&n_kv) && dh <= KEYS_MAX_DH && dh.is_multiple_of(16));
    assert!(q.len() >= n_q * d && k.len() >= n_kv * d && v.len() >= n_kv * d && out.len() >= n_q * d);
    let ld = |s: &[f32]| {
        let s = &s[..16];
        // SAFETY: s has exactly 16 elements.
        unsafe { _mm512_loadu_ps(s.as_ptr()) }
    };
    let keys = tail_mask(n_kv);
    let vscale = _mm512_set1_ps(scale);
    let mut kt = [_mm512_setzero_ps(); KEYS_MAX_DH];
    for h in 0..heads {
        let c = h * dh;
        for i in 0..nv {
            let mut r = [_mm512_setzero_ps(); 16];
            for (j, row) in r.iter_mut().enumerate().take(n_kv) {
                *row = ld(&k[j * d + c + 16 * i..]);
            }
            transpose16(&mut r);
            kt[16 * i..16 * i + 16].copy_from_slice(&r);
        }
        let mut p = 0;
        while p + 4 <= n_q {
            queries_in_lanes::<4>(q, v, p, n_kv, d, c, dh, keys, vscale, &kt, out);
            p += 4;
        }
        while p < n_q {
            queries_in_lanes::<1>(q, v, p, n_kv, d, c, dh, keys, vscale, &kt, out);
            p += 1;
        }
    }
}

/// Queries `p0..p0+Q` of the head at column `c` for [`attention_keys_in_lanes`]: `Q`
/// independent score, softmax and value chains side by side, so their latencies overlap
/// (one query alone is a chain of dependent FMAs, reductions and an exp).
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[inline]
fn queries_in_lanes<const Q: usize>(
    q: &[f32],
    v: &[f32],
    p0: usize,
    n_kv: usize,
    d: usize,
    c: usize,
    dh: usize,
    keys: __mmask16,
    vscale: __m512,
    kt: &[__m512; KEYS_MAX_DH],
    out: &mut [f32],
) {
    let ld = |s: &[f32]| {
        let s = &s[..16];
        // SAFETY: s has exactly 16 elements.
        unsafe { _mm512_loadu_ps(s.as_ptr()) }
    };
    let qv: [&[f32]; Q] = core::array::from_fn(|t| &q[(p0 + t) * d + c..][..dh]);
    let mut a = [[_mm512_setzero_ps(); 2]; Q];
    for (cc, col) in kt[..dh].iter().enumerate() {
        for t in 0..Q {
            a[t][cc % 2] = _mm512_fmadd_ps(_mm512_set1_ps(qv[t][cc]), *col, a[t][cc % 2]);
        }
    }
    let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut probs = [[0.0f32; 16]; Q];
    for t in 0..Q {
        let s = _mm512_mask_mov_ps(ninf, keys, _mm512_mul_ps(_mm512_add_ps(a[t][0], a[t][1]), vscale));
        let e = exp16(_mm512_sub_ps(s, _mm512_set1_ps(_mm512_reduce_max_ps(s))));
        let pr = _mm512_mul_ps(e, _mm512_set1_ps(1.0 / _mm512_reduce_add_ps(e)));
        // SAFETY: probs[t] is 16 floats.
        unsafe { _mm512_storeu_ps(probs[t].as_mut_ptr(), pr) };
    }
    let nv = dh / 16;
    let mut i = 0;
    while i < nv {
        let g = (nv - i).min(4);
        let mut acc = [[_mm512_setzero_ps(); 4]; Q];
        for j in 0..n_kv {
            let vr = &v[j * d + c + 16 * i..];
            for u in 0..g {
                let x = ld(&vr[16 * u..]);
                for t in 0..Q {
                    acc[t][u] = _mm512_fmadd_ps(_mm512_set1_ps(probs[t][j]), x, acc[t][u]);
                }
            }
        }
        for t in 0..Q {
            for u in 0..g {
                let dst = &mut out[(p0 + t) * d + c + 16 * (i + u)..][..16];
                // SAFETY: dst has exactly 16 elements.
                unsafe { _mm512_storeu_ps(dst.as_mut_ptr(), acc[t][u]) };
            }
        }
        i += g;
    }
}

/// Multi-head attention with 16-lane vectors (see `Kernels::attention`), for head widths that
/// are a multiple of 16: scores four keys at a time (four FMA chains, each folded to 8 lanes
/// and reduced together), the 512-bit softmax, then the weighted values accumulated in
/// registers, up to four 16-lane chunks at a time.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
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
    let nv = dh / 16;
    let (q, k, v) = (&q[..n_q * d], &k[..n_kv * d], &v[..n_kv * d]);
    let out = &mut out[..n_q * d];
    if (1..=16).contains(&n_kv) && dh <= KEYS_MAX_DH {
        return attention_keys_in_lanes(q, k, v, n_q, n_kv, d, heads, scale, out);
    }
    let scores = &mut scores[..n_kv];
    let ld = |s: &[f32]| {
        let s = &s[..16];
        // SAFETY: s has exactly 16 elements.
        unsafe { _mm512_loadu_ps(s.as_ptr()) }
    };
    let fold = |v: __m512| _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v))));
    for p in 0..n_q {
        for h in 0..heads {
            let c = h * dh;
            let qv = &q[p * d + c..][..dh];
            let mut j = 0;
            while j + 4 <= n_kv {
                let kr: [&[f32]; 4] = core::array::from_fn(|t| &k[(j + t) * d + c..][..dh]);
                let mut acc = [_mm512_setzero_ps(); 4];
                for i in 0..nv {
                    let x = ld(&qv[16 * i..]);
                    for t in 0..4 {
                        acc[t] = _mm512_fmadd_ps(x, ld(&kr[t][16 * i..]), acc[t]);
                    }
                }
                let s4 = _mm_mul_ps(hsum4(fold(acc[0]), fold(acc[1]), fold(acc[2]), fold(acc[3])), _mm_set1_ps(scale));
                let dst = &mut scores[j..j + 4];
                // SAFETY: dst has exactly 4 elements.
                unsafe { _mm_storeu_ps(dst.as_mut_ptr(), s4) };
                j += 4;
            }
            while j < n_kv {
                let kr = &k[j * d + c..][..dh];
                let mut acc = _mm512_setzero_ps();
                for i in 0..nv {
                    acc = _mm512_fmadd_ps(ld(&qv[16 * i..]), ld(&kr[16 * i..]), acc);
                }
                scores[j] = hsum(fold(acc)) * scale;
                j += 1;
            }
            softmax(scores);
            let o = &mut out[p * d + c..][..dh];
            let mut i = 0;
            while i < nv {
                let g = (nv - i).min(4);
                let mut acc = [_mm512_setzero_ps(); 4];
                for (jj, s) in scores.iter().enumerate() {
                    let w = _mm512_set1_ps(*s);
                    let vr = &v[jj * d + c + 16 * i..];
                    for t in 0..g {
                        acc[t] = _mm512_fmadd_ps(w, ld(&vr[16 * t..]), acc[t]);
                    }
                }
                for t in 0..g {
                    let dst = &mut o[16 * (i + t)..][..16];
                    // SAFETY: dst has exactly 16 elements.
                    unsafe { _mm512_storeu_ps(dst.as_mut_ptr(), acc[t]) };
                }
                i += g;
            }
        }
    }
}
