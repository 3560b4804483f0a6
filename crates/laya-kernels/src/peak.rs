//! The core's peak arithmetic, measured: many independent chains of one instruction, so the
//! execution ports, not latency, bound the loop. The denominators of "fraction of peak" without
//! guessing clock speeds, turbo states or port counts.

#[cfg(target_arch = "x86")]
use core::arch::x86::*;
#[cfg(target_arch = "x86_64")]
use core::arch::x86_64::*;

/// Independent accumulator chains (enough to cover latency × ports on current x86 cores).
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
const CHAINS: usize = 12;
/// Instructions per chain and run: ~10 ms per run on a 3 GHz core.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
const ITERS: usize = 2_000_000;

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[target_feature(enable = "avx2,fma")]
fn fma256() -> f32 {
    let mut a = [_mm256_set1_ps(1.0); CHAINS];
    let (m, c) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
    for _ in 0..ITERS {
        for v in &mut a {
            *v = _mm256_fmadd_ps(*v, m, c);
        }
    }
    let s = a.iter().fold(_mm256_setzero_ps(), |s, v| _mm256_add_ps(s, *v));
    _mm_cvtss_f32(_mm256_castps256_ps128(s))
}

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[target_feature(enable = "avx512f")]
fn fma512() -> f32 {
    let mut a = [_mm512_set1_ps(1.0); CHAINS];
    let (m, c) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
    for _ in 0..ITERS {
        for v in &mut a {
            *v = _mm512_fmadd_ps(*v, m, c);
        }
    }
    _mm512_reduce_add_ps(a.iter().fold(_mm512_setzero_ps(), |s, v| _mm512_add_ps(s, *v)))
}

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[target_feature(enable = "avx2,avxvnni")]
fn vnni256() -> i32 {
    let mut a = [_mm256_setzero_si256(); CHAINS];
    let (u, s) = (_mm256_set1_epi8(3), _mm256_set1_epi8(-1));
    for _ in 0..ITERS {
        for v in &mut a {
            *v = _mm256_dpbusd_avx_epi32(*v, u, s);
        }
    }
    _mm256_extract_epi32::<0>(a.iter().fold(_mm256_setzero_si256(), |s, v| _mm256_add_epi32(s, *v)))
}

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[target_feature(enable = "avx512f,avx512vnni")]
fn vnni512() -> i32 {
    let mut a = [_mm512_setzero_si512(); CHAINS];
    let (u, s) = (_mm512_set1_epi8(3), _mm512_set1_epi8(-1));
    for _ in 0..ITERS {
        for v in &mut a {
            *v = _mm512_dpbusd_epi32(*v, u, s);
        }
    }
    _mm512_reduce_add_epi32(a.iter().fold(_mm512_setzero_si512(), |s, v| _mm512_add_epi32(s, *v)))
}

/// Best of 5 runs of `f`, in G(FL)OP/s: `lanes` multiply-adds per instruction, 2 ops each.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
fn rate(lanes: usize, f: impl Fn()) -> f64 {
    let ops = (CHAINS * ITERS * lanes * 2) as f64;
    (0..5)
        .map(|_| {
            let t = std::time::Instant::now();
            f();
            ops / t.elapsed().as_secs_f64() / 1e9
        })
        .fold(0.0, f64::max)
}

/// Measured peak arithmetic of one core for a [`crate::Kernels`] handle (see
/// [`crate::Kernels::measure_peak`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Peak {
    /// f32 FMA throughput of the handle's float level, GFLOP/s (`None` on levels without a
    /// probe: scalar, NEON).
    pub f32_gflops: Option<f64>,
    /// `vpdpbusd` throughput of the handle's int8 set, GOP/s (2 ops per multiply-add; `None`
    /// for sets without it: scalar, AVX2).
    pub int8_gops: Option<f64>,
}

pub(crate) fn measure(k: &crate::Kernels) -> Peak {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        use crate::{Int8Isa, Level};
        let f32_gflops = match k.level() {
            // SAFETY: a `Kernels` holds only levels the CPU has (struct invariant).
            Level::Avx512 => Some(rate(16, || {
                std::hint::black_box(unsafe { fma512() });
            })),
            // SAFETY: as above; the AVX2 level includes FMA.
            Level::Avx2 => Some(rate(8, || {
                std::hint::black_box(unsafe { fma256() });
            })),
            _ => None,
        };
        let int8_gops = match k.int8_isa() {
            // SAFETY: a `Kernels` holds only int8 sets the CPU has (struct invariant).
            Int8Isa::Avx512Vnni => Some(rate(64, || {
                std::hint::black_box(unsafe { vnni512() });
            })),
            // SAFETY: as above.
            Int8Isa::AvxVnni => Some(rate(32, || {
                std::hint::black_box(unsafe { vnni256() });
            })),
            _ => None,
        };
        Peak { f32_gflops, int8_gops }
    }
    #[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
    {
        let _ = k;
        Peak { f32_gflops: None, int8_gops: None }
    }
}
