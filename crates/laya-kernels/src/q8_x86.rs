//! x86 tiers of the int8 path (`Kernels::quantize_act`, `Kernels::matmul_q8`).
//!
//! * Quantiser: AVX2 for every x86 tier (it is a few hundred values per call).
//! * `avx2`: 256-bit, one block per register, ggml's **sign trick**: `maddubs(|w|, x·sign(w))`
//!   then `madd(·, 1)` to eight i32 lanes. `maddubs` multiplies u8 by i8 and saturates its pair
//!   sums to i16; with `|w| <= 128` and `|x| <= 127` a pair is at most 32,512, so it never
//!   saturates. `|w|` of −128 is 0x80 = 128 as u8, which is right; the sign is applied to the
//!   activation because the quantiser never produces −128 (negating −128 would overflow).
//! * `avxvnni` (256-bit `vpdpbusd`, AVX-VNNI) and `avx512vnni` (512-bit, two blocks per
//!   register): the **offset trick**. `vpdpbusd` multiplies *unsigned* bytes by signed bytes
//!   and accumulates into i32 without intermediate saturation. The weights become the unsigned
//!   side with `w ^ 0x80 = w + 128` (one xor per weight block, shared by every position of a
//!   tile), the activations stay signed, and `Σ (w+128)·x = Σ w·x + 128·Σ x`: the correction
//!   `−128·Σx` is made per lane (one `vpdpbusd` of 128s with the activations, once per
//!   activation block and shared by every row of a tile) and is the accumulator's start value.
//!   Per lane, not once for the block: lanes that each carry a large `+128·Σx` part and cancel
//!   only in the horizontal sum would lose that much precision when converted and scaled in f32
//!   (a first version did, and the property test caught it on an AVX-512 VNNI host). The sign
//!   trick would instead cost two `vpsignb` per
//!   (row, position) pair, inside the innermost loop. The offset trick is exact for every i8
//!   weight, −128 included.
//!
//! Integer block dot products are exact in every tier; per lane they are converted to f32
//! (exactly: |lane| < 2^24), multiplied by `d_w·d_x` and accumulated, so the f32 results differ
//! from the scalar twin only by summation order.

#[cfg(target_arch = "x86")]
use core::arch::x86::*;
#[cfg(target_arch = "x86_64")]
use core::arch::x86_64::*;

use crate::q8::{block_scale, ActBlock, Q8_BYTES};
use crate::{MatArgs, QK};

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

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}

/// Quantises `x` (a whole number of 32-value blocks) into `out`; bit-identical to
/// `q8::quantize` for finite inputs.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn quantize(x: &[f32], out: &mut [ActBlock]) {
    let sign = _mm256_set1_ps(-0.0);
    // packs works per 128-bit lane; this restores the order of the 4-byte groups.
    let perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let m127 = _mm256_set1_epi8(-127);
    let ones8 = _mm256_set1_epi8(1);
    let ones16 = _mm256_set1_epi16(1);
    for (xb, ob) in x.chunks_exact(QK).zip(out.iter_mut()) {
        // SAFETY: xb has exactly 32 elements, so 8i + 8 <= 32.
        let v: [__m256; 4] = core::array::from_fn(|i| unsafe { _mm256_loadu_ps(xb.as_ptr().add(8 * i)) });
        let a = v.map(|v| _mm256_andnot_ps(sign, v));
        let m = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let m = _mm_max_ss(m, _mm_movehdup_ps(m));
        let (d, id) = block_scale(_mm_cvtss_f32(m));
        let idv = _mm256_set1_ps(id);
        let i = v.map(|v| _mm256_cvtps_epi32(_mm256_mul_ps(v, idv)));
        let p = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
        let q = _mm256_max_epi8(_mm256_permutevar8x32_epi32(p, perm), m127);
        // SAFETY: ob.qs is exactly 32 bytes.
        unsafe { _mm256_storeu_si256(ob.qs.as_mut_ptr() as *mut __m256i, q) };
        // Summed from the stored bytes (not the i32s) so it always matches `qs`.
        ob.sum = hsum_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16));
        ob.d = d;
    }
}

/// `quantize` with 512-bit registers, 16 blocks at a time: the 16 block maxima come out of one
/// register transpose and 15 `max`es (instead of a horizontal reduction each), and the 16
/// scales out of two vector divisions (instead of two scalar ones per block). Bit-identical to
/// `q8::quantize` for finite inputs, like the AVX2 version, which takes the last `n % 16` blocks.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(crate) fn quantize_avx512(x: &[f32], out: &mut [ActBlock]) {
    let full = out.len() / 16 * 16;
    assert!(x.len() >= out.len() * QK);
    let m127 = _mm512_set1_epi32(-127);
    let ld = |s: &[f32]| {
        let s = &s[..16];
        // SAFETY: s has exactly 16 elements.
        unsafe { _mm512_loadu_ps(s.as_ptr()) }
    };
    for g in (0..full).step_by(16) {
        let xs = &x[g * QK..(g + 16) * QK];
        let mut m: [__m512; 16] = core::array::from_fn(|i| {
            let (a, b) = (ld(&xs[QK * i..]), ld(&xs[QK * i + 16..]));
            _mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b))
        });
        // After the transpose, lane i of every m[c] belongs to block i.
        crate::avx512::transpose16(&mut m);
        let amax = m.iter().fold(_mm512_setzero_ps(), |acc, &v| _mm512_max_ps(acc, v));
        // block_scale, 16 lanes at once: d = amax / 127, id = 1 / d, or 0 where d is 0.
        let d = _mm512_div_ps(amax, _mm512_set1_ps(127.0));
        let nonzero = _mm512_cmp_ps_mask::<_CMP_NEQ_UQ>(d, _mm512_setzero_ps());
        let id = _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(1.0), d);
        let (mut ds, mut ids) = ([0.0f32; 16], [0.0f32; 16]);
        // SAFETY: both arrays are 16 floats.
        unsafe {
            _mm512_storeu_ps(ds.as_mut_ptr(), d);
            _mm512_storeu_ps(ids.as_mut_ptr(), id);
        }
        for (i, ob) in out[g..g + 16].iter_mut().enumerate() {
            let idv = _mm512_set1_ps(ids[i]);
            // Rounded to nearest-even by the conversion (default MXCSR), as the scalar twin.
            let qa = _mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(ld(&xs[QK * i..]), idv)), m127);
            let qb = _mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(ld(&xs[QK * i + 16..]), idv)), m127);
            // Finite inputs give values in -127..=127, which the saturating narrowing keeps.
            let (ba, bb) = (_mm512_cvtsepi32_epi8(qa), _mm512_cvtsepi32_epi8(qb));
            // SAFETY: ob.qs is exactly 32 bytes: two 16-byte stores at 0 and 16.
            unsafe {
                _mm_storeu_si128(ob.qs.as_mut_ptr() as *mut __m128i, ba);
                _mm_storeu_si128(ob.qs.as_mut_ptr().add(16) as *mut __m128i, bb);
            }
            ob.sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
            ob.d = ds[i];
        }
    }
    quantize(&x[full * QK..out.len() * QK], &mut out[full..]);
}

/// The 256-bit kernels, stamped out twice: with the sign trick on plain AVX2 and with
/// `vpdpbusd` (offset trick) on AVX-VNNI. Only `block_dot` and the weight preparation differ.
macro_rules! q8_256 {
    ($module:ident, $feat:literal, $vnni:literal) => {
        pub(crate) mod $module {
            use super::*;

            /// Weight block prepared once per tile: AVX2 keeps `w` and `|w|`; VNNI keeps
            /// `w + 128` (as u8) in both.
            #[target_feature(enable = $feat)]
            #[inline]
            fn prep(w: __m256i) -> [__m256i; 2] {
                if $vnni {
                    let u = _mm256_xor_si256(w, _mm256_set1_epi8(-128));
                    [u, u]
                } else {
                    [w, _mm256_sign_epi8(w, w)]
                }
            }

            /// The start value of `block_dot` for activations `x`: `−128·Σx` per lane for
            /// the offset trick, zero for the sign trick.
            #[target_feature(enable = $feat)]
            #[inline]
            fn lane_offset(x: __m256i) -> __m256i {
                if $vnni {
                    #[allow(unused_unsafe)]
                    // SAFETY: as in `block_dot`: only the avxvnni instance takes this branch.
                    let c = unsafe { vnni_dot(_mm256_setzero_si256(), _mm256_set1_epi8(-128), x) };
                    _mm256_sub_epi32(_mm256_setzero_si256(), c)
                } else {
                    _mm256_setzero_si256()
                }
            }

            /// Eight i32 lanes, each exactly its part of `Σ w·x` of one block (`init` from
            /// `lane_offset`).
            #[target_feature(enable = $feat)]
            #[inline]
            fn block_dot(w: [__m256i; 2], x: __m256i, init: __m256i) -> __m256i {
                if $vnni {
                    #[allow(unused_unsafe)]
                    // SAFETY: this branch exists only in the instance whose target features
                    // include avxvnni (`$vnni` is a literal), which dispatch selects only
                    // after detecting AVX-VNNI.
                    unsafe {
                        vnni_dot(init, w[0], x)
                    }
                } else {
                    let sx = _mm256_sign_epi8(x, w[0]);
                    let p16 = _mm256_maddubs_epi16(w[1], sx);
                    _mm256_madd_epi16(p16, _mm256_set1_epi16(1))
                }
            }

            /// One `R x P` tile: rows `o0..o0+R`, positions `p0..p0+P`.
            #[target_feature(enable = $feat)]
            #[inline]
            fn tile<const R: usize, const P: usize>(
                a: &MatArgs,
                xq: &[ActBlock],
                o0: usize,
                p0: usize,
                bias: Option<&[f32]>,
                y: &mut [f32],
            ) {
                let (rows, nb) = (a.rows, a.cols / QK);
                let wr: [&[u8]; R] = core::array::from_fn(|r| &a.row(o0 + r)[..nb * Q8_BYTES]);
                let xr: [&[ActBlock]; P] = core::array::from_fn(|p| &xq[(p0 + p) * nb..][..nb]);
                let mut acc = [[_mm256_setzero_ps(); P]; R];
                for b in 0..nb {
                    let mut wv = [[_mm256_setzero_si256(); 2]; R];
                    let mut dw = [0.0f32; R];
                    for r in 0..R {
                        // SAFETY: b < nb, so the 34 bytes at b*34 lie inside wr[r] (nb*34
                        // bytes): the scale at +0..2, the values at +2..34.
                        unsafe {
                            let p = wr[r].as_ptr().add(b * Q8_BYTES);
                            dw[r] = f16_at(p);
                            wv[r] = prep(_mm256_loadu_si256(p.add(2) as *const __m256i));
                        }
                    }
                    for p in 0..P {
                        let xb = &xr[p][b];
                        // SAFETY: xb.qs is exactly 32 bytes.
                        let xv = unsafe { _mm256_loadu_si256(xb.qs.as_ptr() as *const __m256i) };
                        let init = lane_offset(xv);
                        for r in 0..R {
                            let s = _mm256_cvtepi32_ps(block_dot(wv[r], xv, init));
                            let sc = _mm256_set1_ps(dw[r] * xb.d);
                            acc[r][p] = _mm256_fmadd_ps(s, sc, acc[r][p]);
                        }
                    }
                }
                for p in 0..P {
                    for r in 0..R {
                        y[(p0 + p) * rows + o0 + r] = hsum_ps(acc[r][p]) + bias.map_or(0.0, |b| b[o0 + r]);
                    }
                }
            }

            #[target_feature(enable = $feat)]
            pub(crate) fn matmul(a: &MatArgs, xq: &[ActBlock], n_pos: usize, bias: Option<&[f32]>, y: &mut [f32]) {
                let rows = a.rows;
                let mut o = 0;
                if n_pos == 1 {
                    // The word head: memory-bound, four rows give four independent chains.
                    while o + 4 <= rows {
                        tile::<4, 1>(a, xq, o, 0, bias, y);
                        o += 4;
                    }
                    while o < rows {
                        tile::<1, 1>(a, xq, o, 0, bias, y);
                        o += 1;
                    }
                    return;
                }
                while o < rows {
                    let r2 = o + 2 <= rows;
                    let mut p = 0;
                    while p + 4 <= n_pos {
                        if r2 {
                            tile::<2, 4>(a, xq, o, p, bias, y);
                        } else {
                            tile::<1, 4>(a, xq, o, p, bias, y);
                        }
                        p += 4;
                    }
                    while p < n_pos {
                        if r2 {
                            tile::<2, 1>(a, xq, o, p, bias, y);
                        } else {
                            tile::<1, 1>(a, xq, o, p, bias, y);
                        }
                        p += 1;
                    }
                    o += if r2 { 2 } else { 1 };
                }
            }
        }
    };
}

/// `vpdpbusd` on 256-bit registers where AVX-VNNI is enabled; never called otherwise (the
/// AVX2 instance of the macro takes the other branch of a constant `if`).
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
#[inline]
fn vnni_dot(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
    _mm256_dpbusd_avx_epi32(acc, u, s)
}

q8_256!(avx2, "avx2,fma,f16c", false);
q8_256!(avxvnni, "avx2,fma,f16c,avxvnni", true);

/// AVX-512 VNNI: two blocks per 512-bit register, offset trick (module docs).
pub(crate) mod avx512vnni {
    use super::*;

    /// Loads two 32-byte halves into one zmm (`hi` may be `None`: zero upper half).
    ///
    /// # Safety
    /// `lo` (and `hi` if given) must point to 32 readable bytes.
    #[target_feature(enable = "avx512f,avx512vnni,avx2,fma,f16c")]
    #[inline]
    unsafe fn load2(lo: *const u8, hi: Option<*const u8>) -> __m512i {
        // SAFETY: the caller guarantees 32 readable bytes at each pointer; unaligned loads.
        unsafe {
            let l = _mm512_zextsi256_si512(_mm256_loadu_si256(lo as *const __m256i));
            match hi {
                Some(h) => _mm512_inserti64x4::<1>(l, _mm256_loadu_si256(h as *const __m256i)),
                None => l,
            }
        }
    }

    /// Lanes 0..8 = `lo`, lanes 8..16 = `hi`.
    #[target_feature(enable = "avx512f,avx512vnni,avx2,fma,f16c")]
    #[inline]
    fn halves(lo: f32, hi: f32) -> __m512 {
        _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(lo), _mm512_set1_ps(hi))
    }

    #[target_feature(enable = "avx512f,avx512vnni,avx2,fma,f16c")]
    #[inline]
    fn tile<const R: usize, const P: usize>(a: &MatArgs, xq: &[ActBlock], o0: usize, p0: usize, bias: Option<&[f32]>, y: &mut [f32]) {
        let (rows, nb) = (a.rows, a.cols / QK);
        let wr: [&[u8]; R] = core::array::from_fn(|r| &a.row(o0 + r)[..nb * Q8_BYTES]);
        let xr: [&[ActBlock]; P] = core::array::from_fn(|p| &xq[(p0 + p) * nb..][..nb]);
        let flip = _mm512_set1_epi8(-128);
        let mut acc = [[_mm512_setzero_ps(); P]; R];
        let mut b = 0;
        while b < nb {
            // Two blocks b, b+1 per register; a last odd block runs with a zero upper half
            // (zero activations and correction there, so those lanes add exactly 0).
            let two = b + 1 < nb;
            let mut wu = [_mm512_setzero_si512(); R];
            let mut dw = [_mm512_setzero_ps(); R];
            for r in 0..R {
                // SAFETY: b (and b+1 when `two`) < nb, so each 34-byte block lies inside
                // wr[r] (nb*34 bytes): the scale at +0..2, the values at +2..34.
                unsafe {
                    let p = wr[r].as_ptr().add(b * Q8_BYTES);
                    let hi = two.then(|| p.add(Q8_BYTES + 2));
                    wu[r] = _mm512_xor_si512(load2(p.add(2), hi), flip);
                    let d1 = if two { f16_at(p.add(Q8_BYTES)) } else { 0.0 };
                    dw[r] = halves(f16_at(p), d1);
                }
            }
            for p in 0..P {
                let x0 = &xr[p][b];
                let x1 = if two { Some(&xr[p][b + 1]) } else { None };
                // SAFETY: each `qs` is exactly 32 bytes.
                let xv = unsafe { load2(x0.qs.as_ptr() as *const u8, x1.map(|x| x.qs.as_ptr() as *const u8)) };
                let d1 = x1.map_or(0.0, |x| x.d);
                // −128·Σx per lane (module docs); zero lanes stay zero.
                let init = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), flip, xv));
                let dx = halves(x0.d, d1);
                for r in 0..R {
                    let s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(init, wu[r], xv));
                    acc[r][p] = _mm512_fmadd_ps(s, _mm512_mul_ps(dw[r], dx), acc[r][p]);
                }
            }
            b += 2;
        }
        for p in 0..P {
            for r in 0..R {
                y[(p0 + p) * rows + o0 + r] = _mm512_reduce_add_ps(acc[r][p]) + bias.map_or(0.0, |b| b[o0 + r]);
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512vnni,avx2,fma,f16c")]
    pub(crate) fn matmul(a: &MatArgs, xq: &[ActBlock], n_pos: usize, bias: Option<&[f32]>, y: &mut [f32]) {
        let rows = a.rows;
        let mut o = 0;
        if n_pos == 1 {
            while o + 8 <= rows {
                tile::<8, 1>(a, xq, o, 0, bias, y);
                o += 8;
            }
            while o < rows {
                tile::<1, 1>(a, xq, o, 0, bias, y);
                o += 1;
            }
            return;
        }
        while o < rows {
            let r4 = o + 4 <= rows;
            let mut p = 0;
            while p + 4 <= n_pos {
                if r4 {
                    tile::<4, 4>(a, xq, o, p, bias, y);
                } else {
                    tile::<1, 4>(a, xq, o, p, bias, y);
                }
                p += 4;
            }
            while p < n_pos {
                if r4 {
                    tile::<4, 1>(a, xq, o, p, bias, y);
                } else {
                    tile::<1, 1>(a, xq, o, p, bias, y);
                }
                p += 1;
            }
            o += if r4 { 4 } else { 1 };
        }
    }
}
