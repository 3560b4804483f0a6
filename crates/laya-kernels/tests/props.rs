//! Property tests: every SIMD level available on this CPU against the scalar twin, and the scalar
//! twin against an independent f64 reference that decodes the GGUF bytes itself.
//!
//! Levels the CPU lacks are skipped with a printed note (run `cargo test -p laya-kernels --
//! --nocapture` to see it); AVX-512 in particular is exercised only on an AVX-512 machine.

#![allow(clippy::neg_cmp_op_on_partial_ord)] // `!(e <= tol)` also fails on NaN, on purpose
#![allow(clippy::type_complexity)]

use laya_kernels::{GgmlType, KernelError, Kernels, Level, Matrix};
use proptest::prelude::*;
use std::sync::Once;

// ---------------------------------------------------------------------------------------------
// Helpers

/// Every non-scalar level this CPU supports (with a one-time note about the others).
fn simd_levels() -> Vec<Kernels> {
    static NOTE: Once = Once::new();
    NOTE.call_once(|| {
        for l in Level::ALL {
            if !l.is_available() {
                eprintln!("note: level {l} not available on this CPU/target; its tests are skipped");
            }
        }
    });
    Level::ALL.into_iter().filter(|l| *l != Level::Scalar).filter_map(Kernels::for_level).collect()
}

fn all_levels() -> Vec<Kernels> {
    let mut v = vec![Kernels::scalar()];
    v.extend(simd_levels());
    v
}

/// xorshift64*: deterministic data from a proptest-chosen seed (cheaper than strategies for
/// tens of thousands of values, and shrinking the seed is meaningless anyway).
struct Rng(u64);
impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn byte(&mut self) -> u8 {
        (self.next() >> 56) as u8
    }
    /// Uniform in [-1, 1).
    fn f(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.f() * scale).collect()
    }
    /// A block scale: mostly ordinary, sometimes zero, negative, tiny (subnormal f16) or large.
    fn scale_f16(&mut self) -> u16 {
        let v = match self.next() % 16 {
            0 => 0.0,
            1 => 3.0e-6, // subnormal in f16
            2 => -0.04,
            3 => 7.5,
            _ => 0.001 + 0.05 * (self.f() + 1.0),
        };
        half::f16::from_f32(v).to_bits()
    }
}

fn push16(v: &mut Vec<u8>, bits: u16) {
    v.extend_from_slice(&bits.to_le_bytes());
}

/// Random weights of type `ty`, placed at byte offset `offset` of the returned buffer (so
/// `&buf[offset..]` is deliberately misaligned).
fn make_weights(ty: GgmlType, rows: usize, cols: usize, offset: usize, rng: &mut Rng) -> Vec<u8> {
    let mut v = vec![0xAAu8; offset];
    for _ in 0..rows {
        match ty {
            GgmlType::F32 => (0..cols).for_each(|_| v.extend_from_slice(&rng.f().to_le_bytes())),
            GgmlType::F16 => (0..cols).for_each(|_| push16(&mut v, half::f16::from_f32(rng.f()).to_bits())),
            GgmlType::BF16 => (0..cols).for_each(|_| push16(&mut v, half::bf16::from_f32(rng.f()).to_bits())),
            GgmlType::I16 | GgmlType::I32 => unreachable!("integer tables are not weights"),
            GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q4_1 => {
                for _ in 0..cols / 32 {
                    push16(&mut v, rng.scale_f16());
                    let nq = match ty {
                        GgmlType::Q8_0 => 32,
                        GgmlType::Q4_1 => {
                            push16(&mut v, half::f16::from_f32(rng.f() * 0.3).to_bits());
                            16
                        }
                        _ => 16,
                    };
                    (0..nq).for_each(|_| v.push(rng.byte()));
                }
            }
        }
    }
    v
}

fn f16(b: &[u8], i: usize) -> f64 {
    half::f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f64()
}

/// Independent f64 decoder straight from the format table in docs/format.md.
fn ref_dequant(ty: GgmlType, data: &[u8], rows: usize, cols: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(rows * cols);
    let rb = ty.row_bytes_rounded(cols);
    for r in 0..rows {
        let row = &data[r * rb..(r + 1) * rb];
        match ty {
            GgmlType::F32 => (0..cols).for_each(|j| out.push(f32::from_le_bytes(row[4 * j..4 * j + 4].try_into().unwrap()) as f64)),
            GgmlType::F16 => (0..cols).for_each(|j| out.push(f16(row, 2 * j))),
            GgmlType::I16 | GgmlType::I32 => unreachable!("integer tables are not weights"),
            GgmlType::BF16 => (0..cols).for_each(|j| {
                let bits = u16::from_le_bytes([row[2 * j], row[2 * j + 1]]);
                out.push(half::bf16::from_bits(bits).to_f64())
            }),
            GgmlType::Q8_0 => {
                for b in row.chunks(34) {
                    let d = f16(b, 0);
                    (0..32).for_each(|j| out.push(d * (b[2 + j] as i8) as f64));
                }
            }
            GgmlType::Q4_0 => {
                for b in row.chunks(18) {
                    let d = f16(b, 0);
                    (0..16).for_each(|j| out.push(d * ((b[2 + j] & 15) as f64 - 8.0)));
                    (0..16).for_each(|j| out.push(d * ((b[2 + j] >> 4) as f64 - 8.0)));
                }
            }
            GgmlType::Q4_1 => {
                for b in row.chunks(20) {
                    let (d, m) = (f16(b, 0), f16(b, 2));
                    (0..16).for_each(|j| out.push(d * (b[4 + j] & 15) as f64 + m));
                    (0..16).for_each(|j| out.push(d * (b[4 + j] >> 4) as f64 + m));
                }
            }
        }
    }
    out
}

/// Reference product in f64, and per output the error scale `|b| + sum |w||x|`.
fn ref_matmul(w: &[f64], rows: usize, cols: usize, x: &[f32], n_pos: usize, bias: Option<&[f32]>) -> (Vec<f64>, Vec<f64>) {
    let mut y = vec![0.0; n_pos * rows];
    let mut s = vec![0.0; n_pos * rows];
    for p in 0..n_pos {
        for o in 0..rows {
            let b = bias.map_or(0.0, |b| b[o] as f64);
            let (mut acc, mut mag) = (b, b.abs());
            for k in 0..cols {
                let t = w[o * cols + k] * x[p * cols + k] as f64;
                acc += t;
                mag += t.abs();
            }
            y[p * rows + o] = acc;
            s[p * rows + o] = mag;
        }
    }
    (y, s)
}

/// Error bound for an f32 dot product of length `cols` against the exact value: the classic
/// gamma_n bound (n * eps/2 per term magnitude) with headroom, plus an absolute floor.
fn tol(cols: usize, mag: f64) -> f64 {
    (1e-5 + (cols + 2) as f64 * f32::EPSILON as f64) * mag + 1e-6
}

fn cols_for(ty: GgmlType) -> Vec<usize> {
    if ty.is_quantized() {
        vec![32, 64, 96, 160]
    } else {
        vec![1, 3, 8, 13, 16, 32, 40, 64, 96, 160]
    }
}

fn wtype_strategy() -> impl Strategy<Value = GgmlType> {
    prop::sample::select(GgmlType::WEIGHTS.to_vec())
}

/// Runs matmul on every level and checks scalar vs f64 and SIMD vs scalar.
fn check_matmul(ty: GgmlType, rows: usize, cols: usize, n_pos: usize, with_bias: bool, offset: usize, seed: u64) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let buf = make_weights(ty, rows, cols, offset, &mut rng);
    let data = &buf[offset..];
    let m = Matrix::new(ty, rows, cols, data).map_err(|e| e.to_string())?;
    let x = rng.vec(n_pos * cols, 2.0);
    let bias = with_bias.then(|| rng.vec(rows, 1.0));
    let wref = ref_dequant(ty, data, rows, cols);
    let (yref, mag) = ref_matmul(&wref, rows, cols, &x, n_pos, bias.as_deref());

    let mut ys = vec![f32::NAN; n_pos * rows];
    Kernels::scalar().matmul(&m, &x, n_pos, bias.as_deref(), &mut ys);
    for i in 0..ys.len() {
        let e = (ys[i] as f64 - yref[i]).abs();
        if !(e <= tol(cols, mag[i])) {
            return Err(format!(
                "scalar vs f64 {ty} {rows}x{cols} n_pos={n_pos} at {i}: {} vs {} (err {e:e}, mag {:e})",
                ys[i], yref[i], mag[i]
            ));
        }
    }
    for k in simd_levels() {
        let mut yk = vec![f32::NAN; n_pos * rows];
        k.matmul(&m, &x, n_pos, bias.as_deref(), &mut yk);
        for i in 0..ys.len() {
            let e = (yk[i] as f64 - ys[i] as f64).abs();
            if !(e <= tol(cols, mag[i])) {
                return Err(format!(
                    "{} vs scalar {ty} {rows}x{cols} n_pos={n_pos} at {i}: {} vs {} (err {e:e}, mag {:e})",
                    k.level(),
                    yk[i],
                    ys[i],
                    mag[i]
                ));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// matmul

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn matmul_matches_reference(
        ty in wtype_strategy(),
        rows in 1usize..=70,
        ci in 0usize..10,
        n_pos in 1usize..=17,
        with_bias in any::<bool>(),
        offset in 0usize..4,
        seed in any::<u64>(),
    ) {
        let cs = cols_for(ty);
        let cols = cs[ci % cs.len()];
        check_matmul(ty, rows, cols, n_pos, with_bias, offset, seed).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn dequant_and_add_row_match_scalar_exactly(
        ty in wtype_strategy(),
        rows in 1usize..=5,
        ci in 0usize..10,
        offset in 0usize..4,
        seed in any::<u64>(),
    ) {
        let cs = cols_for(ty);
        let cols = cs[ci % cs.len()];
        let mut rng = Rng::new(seed);
        let buf = make_weights(ty, rows, cols, offset, &mut rng);
        let m = Matrix::new(ty, rows, cols, &buf[offset..]).unwrap();
        let wref = ref_dequant(ty, &buf[offset..], rows, cols);
        let base = rng.vec(cols, 1.0);
        for r in 0..rows {
            let mut s = vec![f32::NAN; cols];
            Kernels::scalar().dequant_row(&m, r, &mut s);
            for j in 0..cols {
                let want = wref[r * cols + j];
                // One rounding (two for Q4_1's d*q + m) away from the exact value.
                prop_assert!((s[j] as f64 - want).abs() <= 2.0 * f32::EPSILON as f64 * want.abs().max(1e-30) + 1e-38,
                    "scalar {ty} row {r} col {j}: {} vs {want}", s[j]);
            }
            let mut sa = base.clone();
            Kernels::scalar().add_row(&m, r, &mut sa);
            for k in all_levels() {
                let mut d = vec![f32::NAN; cols];
                k.dequant_row(&m, r, &mut d);
                prop_assert_eq!(d.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    s.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "{} dequant_row {} row {}", k.level(), ty, r);
                let mut a = base.clone();
                k.add_row(&m, r, &mut a);
                prop_assert_eq!(&a, &sa, "{} add_row {} row {}", k.level(), ty, r);
                for j in 0..cols {
                    prop_assert_eq!(a[j], base[j] + s[j]);
                }
            }
        }
    }
}

/// The shape grid from the task, deterministically: every type, the block-boundary rows and
/// positions (non-multiples of the 4x3 / 4x4 / 8x1 tiles), every listed column count.
#[test]
fn matmul_shape_grid() {
    let mut seed = 1;
    for ty in GgmlType::WEIGHTS {
        for cols in cols_for(ty) {
            for n_pos in [1, 2, 3, 4, 5, 16, 17] {
                for rows in [1, 3, 4, 5, 8, 9, 13, 70] {
                    seed += 1;
                    check_matmul(ty, rows, cols, n_pos, seed % 2 == 0, (seed % 4) as usize, seed).unwrap();
                }
            }
        }
    }
}

#[test]
fn matmul_output_head_shape() {
    // The memory-bound case the runtime cares about: n_pos = 1, many rows.
    for ty in GgmlType::WEIGHTS {
        check_matmul(ty, 2003, 128, 1, true, 1, 7).unwrap();
    }
}

#[test]
fn matmul_zero_positions_and_zero_cols() {
    for k in all_levels() {
        let w = [0u8; 0];
        let m = Matrix::new(GgmlType::F32, 3, 0, &w).unwrap();
        let mut y = [9.0f32; 3];
        k.matmul(&m, &[], 1, Some(&[1.0, 2.0, 3.0]), &mut y);
        assert_eq!(y, [1.0, 2.0, 3.0], "{}", k.level());
        let mut y: [f32; 0] = [];
        k.matmul(&m, &[], 0, None, &mut y);
    }
}

// ---------------------------------------------------------------------------------------------
// Format decoding as data: hand-built blocks with known values (independent of any decoder).

#[test]
fn known_blocks_decode() {
    let half_ = 0x3800u16.to_le_bytes(); // f16 0.5
    let one = 0x3C00u16.to_le_bytes(); // f16 1.0
                                       // Q8_0: d = 0.5, qs = -128, 127, 0, ...
    let mut q8 = half_.to_vec();
    q8.extend([0x80, 0x7F]);
    q8.extend([0u8; 30]);
    // Q4_0: d = 0.5, qs[0] = 0x1F: x[0] = 0.5*(15-8) = 3.5, x[16] = 0.5*(1-8) = -3.5; others 0x88 -> 0
    let mut q40 = half_.to_vec();
    q40.push(0x1F);
    q40.extend([0x88u8; 15]);
    // Q4_1: d = 0.5, m = 1.0, qs[0] = 0x1F: x[0] = 8.5, x[16] = 1.5; others 0 -> 1.0
    let mut q41 = half_.to_vec();
    q41.extend(one);
    q41.push(0x1F);
    q41.extend([0u8; 15]);
    let cases: [(GgmlType, &[u8], [(usize, f32); 3]); 3] = [
        (GgmlType::Q8_0, &q8, [(0, -64.0), (1, 63.5), (31, 0.0)]),
        (GgmlType::Q4_0, &q40, [(0, 3.5), (16, -3.5), (5, 0.0)]),
        (GgmlType::Q4_1, &q41, [(0, 8.5), (16, 1.5), (31, 1.0)]),
    ];
    for k in all_levels() {
        for (ty, bytes, expect) in &cases {
            let m = Matrix::new(*ty, 1, 32, bytes).unwrap();
            let mut out = [0.0f32; 32];
            k.dequant_row(&m, 0, &mut out);
            for (j, v) in expect {
                assert_eq!(out[*j], *v, "{} {ty} value {j}", k.level());
            }
        }
        // F16 / BF16: 1.0 and -2.0.
        let f = [0x00, 0x3C, 0x00, 0xC0];
        let bf = [0x80, 0x3F, 0x00, 0xC0];
        for (ty, b) in [(GgmlType::F16, &f), (GgmlType::BF16, &bf)] {
            let m = Matrix::new(ty, 1, 2, b).unwrap();
            let mut out = [0.0f32; 2];
            k.dequant_row(&m, 0, &mut out);
            assert_eq!(out, [1.0, -2.0], "{} {ty}", k.level());
        }
    }
}

#[test]
fn matrix_new_validates() {
    assert_eq!(
        Matrix::new(GgmlType::Q8_0, 2, 40, &[0; 68]).unwrap_err(),
        KernelError::ColsNotBlockMultiple { ty: GgmlType::Q8_0, cols: 40 }
    );
    assert!(matches!(Matrix::new(GgmlType::Q4_1, 2, 64, &[0; 79]), Err(KernelError::DataLength { expected: 80, actual: 79, .. })));
    assert!(matches!(Matrix::new(GgmlType::F32, usize::MAX, 8, &[]), Err(KernelError::SizeOverflow { .. })));
    assert!(Matrix::new(GgmlType::BF16, 3, 5, &[0; 30]).is_ok());
    for ty in GgmlType::WEIGHTS {
        assert_eq!(GgmlType::from_id(ty.id()), Some(ty));
        assert!(!ty.name().is_empty());
    }
    assert_eq!(GgmlType::from_id(6), None);
    let msg = KernelError::ColsNotBlockMultiple { ty: GgmlType::Q4_0, cols: 40 }.to_string();
    assert!(msg.contains("multiple of 32"), "{msg}");
}

/// A hand-built inconsistent Matrix (public fields) must panic, never read out of bounds.
#[test]
fn inconsistent_matrix_panics_on_every_level() {
    for k in all_levels() {
        let data = [0u8; 64];
        let bad = Matrix { ty: GgmlType::F32, rows: 5, cols: 4, data: &data }; // needs 80 bytes
        let r = std::panic::catch_unwind(|| {
            let mut y = [0.0f32; 5];
            k.matmul(&bad, &[0.0; 4], 1, None, &mut y);
        });
        assert!(r.is_err(), "{}: short data accepted", k.level());
        let bad_q = Matrix { ty: GgmlType::Q8_0, rows: 1, cols: 40, data: &data };
        let r = std::panic::catch_unwind(|| {
            let mut y = [0.0f32; 1];
            k.matmul(&bad_q, &[0.0; 40], 1, None, &mut y);
        });
        assert!(r.is_err(), "{}: quantised cols 40 accepted", k.level());
        let good = Matrix::new(GgmlType::F32, 4, 4, &data).unwrap();
        let r = std::panic::catch_unwind(|| {
            let mut y = [0.0f32; 3]; // too short
            k.matmul(&good, &[0.0; 4], 1, None, &mut y);
        });
        assert!(r.is_err(), "{}: short y accepted", k.level());
        let r = std::panic::catch_unwind(|| {
            let mut out = [0.0f32; 4];
            k.dequant_row(&good, 4, &mut out); // row out of range
        });
        assert!(r.is_err(), "{}: row 4 of 4 accepted", k.level());
    }
}

// ---------------------------------------------------------------------------------------------
// Element-wise kernels

fn vec_strategy(max: usize, scale: f32) -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(-scale..scale, 0..max)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn dot_matches(a in vec_strategy(300, 4.0), seed in any::<u64>()) {
        let b = Rng::new(seed).vec(a.len(), 4.0);
        let exact: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
        let mag: f64 = a.iter().zip(&b).map(|(x, y)| (*x as f64 * *y as f64).abs()).sum();
        for k in all_levels() {
            let d = k.dot(&a, &b) as f64;
            prop_assert!((d - exact).abs() <= tol(a.len(), mag), "{}: {d} vs {exact}", k.level());
        }
    }

    #[test]
    fn axpy_add_relu_match(x in vec_strategy(100, 10.0), alpha in -3.0f32..3.0, seed in any::<u64>()) {
        let y0 = Rng::new(seed).vec(x.len(), 10.0);
        for k in all_levels() {
            let mut y = y0.clone();
            k.axpy(alpha, &x, &mut y);
            for i in 0..x.len() {
                // FMA (one rounding) vs mul+add (two): within 1 ulp of the larger term.
                let want = alpha as f64 * x[i] as f64 + y0[i] as f64;
                let scale = (alpha * x[i]).abs().max(y0[i].abs()) as f64;
                prop_assert!((y[i] as f64 - want).abs() <= 1.5 * f32::EPSILON as f64 * scale + 1e-30, "{} axpy", k.level());
            }
            let mut y = y0.clone();
            k.add(&x, &mut y);
            for i in 0..x.len() {
                prop_assert_eq!(y[i], y0[i] + x[i]);
            }
            let mut r = x.clone();
            k.relu(&mut r);
            for i in 0..x.len() {
                prop_assert_eq!(r[i], x[i].max(0.0));
            }
        }
    }

    #[test]
    fn layer_norm_matches(x in vec_strategy(300, 5.0), offset in -100.0f32..100.0, seed in any::<u64>()) {
        let n = x.len();
        let x: Vec<f32> = x.iter().map(|v| v + offset).collect();
        let mut rng = Rng::new(seed);
        let (w, b) = (rng.vec(n, 2.0), rng.vec(n, 1.0));
        let eps = 1e-5f32;
        let mean = x.iter().map(|v| *v as f64).sum::<f64>() / n.max(1) as f64;
        let var = x.iter().map(|v| (*v as f64 - mean).powi(2)).sum::<f64>() / n.max(1) as f64;
        let rstd = 1.0 / (var + eps as f64).sqrt();
        for k in all_levels() {
            let mut out = vec![f32::NAN; n];
            k.layer_norm(&x, &w, &b, eps, &mut out);
            for i in 0..n {
                let want = (x[i] as f64 - mean) * rstd * w[i] as f64 + b[i] as f64;
                // The mean of values around |offset| carries an absolute error ~ n*eps*|offset|,
                // which normalisation scales by rstd.
                let t = 1e-4 * (1.0 + w[i].abs() as f64) * (1.0 + (offset.abs() as f64 + 5.0) * rstd * 1e-2);
                prop_assert!((out[i] as f64 - want).abs() <= t, "{} at {i}: {} vs {want}", k.level(), out[i]);
            }
        }
    }

    #[test]
    fn gelu_matches(x in vec_strategy(100, 12.0)) {
        let mut s = x.clone();
        Kernels::scalar().gelu_tanh(&mut s);
        for i in 0..x.len() {
            let v = x[i] as f64;
            let want = 0.5 * v * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v)).tanh());
            prop_assert!((s[i] as f64 - want).abs() <= 1e-6 * (1.0 + v.abs()), "scalar gelu({v}) = {} vs {want}", s[i]);
        }
        for k in simd_levels() {
            let mut g = x.clone();
            k.gelu_tanh(&mut g);
            for i in 0..x.len() {
                // Documented tolerance of the polynomial exp formulation.
                prop_assert!((g[i] - s[i]).abs() <= 2e-6 * (1.0 + x[i].abs()), "{} gelu({}) = {} vs {}", k.level(), x[i], g[i], s[i]);
            }
        }
    }

    /// Far in the tails `u³` and `exp(-2u)` overflow f32: every tier must still give a finite
    /// value within tolerance of the scalar twin (x itself, or ~0).
    #[test]
    fn gelu_extremes_match(x in prop::collection::vec(prop_oneof![-1e30f32..-5.0, 5.0f32..1e30, -12.0f32..12.0], 1..40)) {
        let mut s = x.clone();
        Kernels::scalar().gelu_tanh(&mut s);
        for k in simd_levels() {
            let mut g = x.clone();
            k.gelu_tanh(&mut g);
            for i in 0..x.len() {
                prop_assert!(g[i].is_finite(), "{} gelu({}) = {}", k.level(), x[i], g[i]);
                prop_assert!((g[i] - s[i]).abs() <= 2e-6 * (1.0 + s[i].abs()), "{} gelu({}) = {} vs {}", k.level(), x[i], g[i], s[i]);
            }
        }
    }

    #[test]
    fn softmax_matches(x in vec_strategy(200, 30.0), masked in prop::collection::vec(any::<bool>(), 200)) {
        let mut x = x;
        if x.is_empty() { return Ok(()); }
        for (i, v) in x.iter_mut().enumerate() {
            if masked[i] && i > 0 { *v = f32::NEG_INFINITY; }
        }
        let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let z: f64 = x.iter().map(|v| (*v as f64 - m).exp()).sum();
        for k in all_levels() {
            let mut s = x.clone();
            k.softmax(&mut s);
            let mut total = 0.0f64;
            for i in 0..x.len() {
                let want = (x[i] as f64 - m).exp() / z;
                prop_assert!((s[i] as f64 - want).abs() <= 2e-6 * want + 1e-7 + 1e-30,
                    "{} softmax at {i}: {} vs {want}", k.level(), s[i]);
                if x[i] == f32::NEG_INFINITY { prop_assert_eq!(s[i], 0.0); }
                total += s[i] as f64;
            }
            prop_assert!((total - 1.0).abs() < 1e-5);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// The ranking pass: outputs and chunk maxima bit-identical to the scalar twin (and to the
    /// formula), the sum within summation-order error, on lengths that end mid-chunk and with
    /// shares above, at and below `c`.
    #[test]
    fn score_chunks_matches(n in 0usize..300, c in 0.0f32..1.5, seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let p: Vec<f32> = (0..n).map(|_| (rng.f() + 1.0) * 0.5).collect();
        let share: Vec<f32> = (0..n).map(|i| match i % 5 { 0 => 0.0, 1 => c, 2 => c + 0.5, _ => (rng.f() + 1.0) * c }).collect();
        let nc = n.div_ceil(16);
        for k in all_levels() {
            let (mut out, mut mx) = (vec![f32::NAN; n], vec![f32::NAN; nc]);
            let sum = k.score_chunks(&p, &share, c, &mut out, &mut mx);
            for i in 0..n {
                prop_assert_eq!(out[i].to_bits(), (p[i] * (c - share[i]).max(0.0)).to_bits(), "{} at {}", k.level(), i);
            }
            for (j, m) in mx.iter().enumerate() {
                let want = out[16 * j..n.min(16 * j + 16)].iter().copied().fold(f32::NEG_INFINITY, f32::max);
                prop_assert_eq!(m.to_bits(), want.to_bits(), "{} chunk {}", k.level(), j);
            }
            let exact: f64 = out.iter().map(|&v| v as f64).sum();
            prop_assert!((sum as f64 - exact).abs() <= (n as f64 + 1.0) * f32::EPSILON as f64 * exact + 1e-30,
                "{} sum {} vs {}", k.level(), sum, exact);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Run maxima: every tier equal to the scalar fold, on lengths that end mid-run, with
    /// infinities and runs whose maximum sits in either half.
    #[test]
    fn run_max_matches(n in 0usize..300, seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let x: Vec<f32> = (0..n).map(|i| match i % 37 { 5 => f32::NEG_INFINITY, 29 => f32::INFINITY, _ => rng.f() * 100.0 }).collect();
        for k in all_levels() {
            let mut out = vec![f32::NAN; n.div_ceil(16) + 1];
            k.run_max(&x, &mut out);
            for (j, m) in out[..n.div_ceil(16)].iter().enumerate() {
                let want = x[16 * j..n.min(16 * j + 16)].iter().copied().fold(f32::NEG_INFINITY, f32::max);
                prop_assert_eq!(*m, want, "{} run {}", k.level(), j);
            }
            prop_assert!(out[n.div_ceil(16)].is_nan(), "{} wrote past the runs", k.level());
        }
    }
}

#[test]
fn softmax_extremes() {
    for k in all_levels() {
        let mut v = [1000.0f32, 1000.0, -1000.0, 0.0];
        k.softmax(&mut v);
        assert_eq!(v[2], 0.0);
        assert!((v[0] - 0.5).abs() < 1e-6 && (v[1] - 0.5).abs() < 1e-6, "{} {v:?}", k.level());
        let mut one = [f32::MIN];
        k.softmax(&mut one);
        assert_eq!(one, [1.0]);
        let mut empty: [f32; 0] = [];
        k.softmax(&mut empty);
    }
}

#[test]
fn detect_is_the_best_available() {
    let k = Kernels::detect();
    assert!(k.level().is_available());
    eprintln!("detected level: {}", k.level());
    assert_eq!(Kernels::for_level(k.level()), Some(k));
    if Level::Avx512.is_available() {
        assert_eq!(k.level(), Level::Avx512);
    } else if Level::Avx2.is_available() {
        assert_eq!(k.level(), Level::Avx2);
    }
}

// ---------------------------------------------------------------------------------------------
// attention

/// f64 reference of `Kernels::attention`, and per output the bound `sum_j a_j |v_j|` that scales
/// its error.
#[allow(clippy::too_many_arguments)]
fn ref_attention(q: &[f32], k: &[f32], v: &[f32], n_q: usize, n_kv: usize, d: usize, heads: usize, scale: f32) -> (Vec<f64>, Vec<f64>) {
    let dh = d / heads;
    let (mut out, mut mag) = (vec![0.0; n_q * d], vec![0.0; n_q * d]);
    for p in 0..n_q {
        for h in 0..heads {
            let c = h * dh;
            let s: Vec<f64> =
                (0..n_kv).map(|j| scale as f64 * (0..dh).map(|i| q[p * d + c + i] as f64 * k[j * d + c + i] as f64).sum::<f64>()).collect();
            let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
            for j in 0..n_kv {
                let a = (s[j] - m).exp() / z;
                for i in 0..dh {
                    out[p * d + c + i] += a * v[j * d + c + i] as f64;
                    mag[p * d + c + i] += a * (v[j * d + c + i] as f64).abs();
                }
            }
        }
    }
    (out, mag)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn attention_matches_reference(
        n_q in 1usize..=17,
        n_kv in 1usize..=17,
        heads in 1usize..=4,
        dh in prop::sample::select(vec![1usize, 3, 8, 16, 24, 48, 64, 80, 128, 144]),
        seed in any::<u64>(),
    ) {
        let d = heads * dh;
        let mut rng = Rng::new(seed);
        let (q, k, v) = (rng.vec(n_q * d, 1.5), rng.vec(n_kv * d, 1.5), rng.vec(n_kv * d, 2.0));
        let scale = 1.0 / (dh as f32).sqrt();
        let (want, mag) = ref_attention(&q, &k, &v, n_q, n_kv, d, heads, scale);
        for kern in all_levels() {
            let mut s = vec![f32::NAN; n_kv + 3];
            let mut out = vec![f32::NAN; n_q * d];
            kern.attention(&q, &k, &v, n_q, n_kv, d, heads, scale, &mut s, &mut out);
            for i in 0..out.len() {
                // Scores carry a dot-product error (<= ~dh eps * |q||k| * scale, tiny here),
                // which softmax turns into a relative error of the weights; then the sum.
                let tol = (2e-5 + (n_kv + dh) as f64 * 2.0 * f32::EPSILON as f64) * mag[i] * 4.0 + 1e-6;
                prop_assert!((out[i] as f64 - want[i]).abs() <= tol,
                    "{} attention n_q={n_q} n_kv={n_kv} heads={heads} dh={dh} at {i}: {} vs {}", kern.level(), out[i], want[i]);
            }
        }
    }
}

#[test]
#[should_panic(expected = "do not divide")]
fn attention_rejects_bad_heads() {
    let mut s = [0.0f32; 1];
    let mut out = [0.0f32; 3];
    Kernels::detect().attention(&[0.0; 3], &[0.0; 3], &[0.0; 3], 1, 1, 3, 2, 1.0, &mut s, &mut out);
}
