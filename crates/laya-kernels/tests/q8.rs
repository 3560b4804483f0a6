//! The int8 path (`quantize_act`, `matmul_q8`, `matmul_q8_packed` on `PackedQ8`): every int8
//! instruction set this CPU has against the scalar twin, the packed scalar twin against the
//! row-major one (bit for bit), and the scalar twin against an independent f64 computation.
//!
//! Instruction sets the CPU lacks (AVX-512 VNNI and AVX-VNNI on the Zen 3 dev machine) are
//! skipped with a printed note; `cargo test -p laya-kernels --release -- --nocapture` on a VNNI
//! host runs them all.

#![allow(clippy::neg_cmp_op_on_partial_ord)] // `!(e <= tol)` also fails on NaN, on purpose

use laya_kernels::{ActBlock, GgmlType, Int8Isa, KernelError, Kernels, Level, Matrix, PackedQ4, PackedQ8, QK};
use proptest::prelude::*;
use std::sync::Once;

/// Every int8 set available here, each paired with the widest float level it fits.
fn isas() -> Vec<Kernels> {
    static NOTE: Once = Once::new();
    NOTE.call_once(|| {
        for i in Int8Isa::ALL {
            if !i.is_available() {
                eprintln!("note: int8 set {i} not available on this CPU/target; its tests are skipped");
            }
        }
    });
    Int8Isa::ALL.into_iter().filter_map(|i| Kernels::detect().with_int8(i)).collect()
}

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
    /// Uniform in [-1, 1).
    fn f(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    /// A weight byte: mostly uniform, often the extremes -128, -127, 127 and 0.
    fn wbyte(&mut self) -> u8 {
        match self.next() % 8 {
            0 => 0x80, // -128
            1 => 0x81, // -127
            2 => 0x7F, // 127
            3 => 0,
            _ => (self.next() >> 56) as u8,
        }
    }
}

/// Activations: uniform, with whole-zero blocks, single-spike blocks and wide ranges mixed in.
fn activations(n: usize, rng: &mut Rng) -> Vec<f32> {
    let mut x = Vec::with_capacity(n);
    for _ in 0..n / QK {
        let kind = rng.next() % 6;
        let scale = [1.0, 1e-3, 50.0, 1.0, 1.0, 1.0][kind as usize];
        for j in 0..QK {
            x.push(match kind {
                0 => 0.0,
                4 if j != 7 => 0.0, // one spike
                _ => rng.f() * scale,
            });
        }
    }
    x
}

/// Q8_0 weights with scales 0 / tiny / negative / ordinary, at byte `offset` (misaligned).
fn weights(rows: usize, cols: usize, offset: usize, unit_scale: bool, rng: &mut Rng) -> Vec<u8> {
    let mut v = vec![0xAAu8; offset];
    for _ in 0..rows * cols / QK {
        let d = if unit_scale {
            1.0
        } else {
            match rng.next() % 8 {
                0 => 0.0,
                1 => 3.0e-6,
                2 => -0.04,
                _ => 0.001 + 0.02 * (rng.f() + 1.0),
            }
        };
        v.extend_from_slice(&half::f16::from_f32(d).to_bits().to_le_bytes());
        (0..QK).for_each(|_| v.push(rng.wbyte()));
    }
    v
}

fn quantize(k: Kernels, x: &[f32]) -> Vec<ActBlock> {
    let mut q = vec![ActBlock::ZERO; x.len() / QK];
    k.quantize_act(x, &mut q);
    q
}

const COLS: [usize; 7] = [32, 64, 96, 128, 160, 256, 512];

/// Q4_0 or Q4_1 weights: scales 0 / tiny / negative / ordinary, offsets of either sign, nibbles
/// uniform with the extremes 0 and 15 frequent. `unit`: d = 1 and m = 0 (Q4_1) so that
/// products with integer activations are exact.
fn q4_weights(ty: GgmlType, rows: usize, cols: usize, unit: bool, rng: &mut Rng) -> Vec<u8> {
    let mut v = Vec::new();
    let f16 = |x: f32| half::f16::from_f32(x).to_bits().to_le_bytes();
    for _ in 0..rows * cols / QK {
        let d = if unit { 1.0 } else { [0.0, 3.0e-6, -0.04, 0.01, 0.02][(rng.next() % 5) as usize] };
        v.extend_from_slice(&f16(d));
        if ty == GgmlType::Q4_1 {
            v.extend_from_slice(&f16(if unit { 0.0 } else { rng.f() * 0.2 }));
        }
        (0..QK / 2).for_each(|_| {
            let b = match rng.next() % 4 {
                0 => 0x00,
                1 => 0xFF,
                2 => 0x0F,
                _ => (rng.next() >> 56) as u8,
            };
            v.push(b);
        });
    }
    v
}

/// f32 weights of a Q4 matrix (row-major), for the f64 references.
fn q4_dequant(ty: GgmlType, w: &[u8], rows: usize, cols: usize) -> Vec<f64> {
    let m = Matrix::new(ty, rows, cols, w).unwrap();
    let mut out = vec![0.0f32; cols];
    let mut all = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        Kernels::scalar().dequant_row(&m, r, &mut out);
        all.extend(out.iter().map(|&v| v as f64));
    }
    all
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn quantize_is_bit_identical_and_within_half_a_step(nb in 1usize..40, seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let x = activations(nb * QK, &mut rng);
        let reference = quantize(Kernels::scalar(), &x);
        for (b, blk) in reference.iter().enumerate() {
            let xb = &x[b * QK..][..QK];
            let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            prop_assert_eq!(blk.d(), amax / 127.0);
            prop_assert_eq!(blk.sum(), blk.qs().iter().map(|&q| q as i32).sum::<i32>());
            for (q, v) in blk.qs().iter().zip(xb) {
                prop_assert!((-127..=127).contains(q));
                // Half a step, plus the f32 rounding of `1/d` and of `x·(1/d)` (each ≤ 2⁻²⁴
                // relative, on a value of at most 127 steps): x = 126.500005 steps can round to
                // 126 (seen once in ~10⁴ cases).
                let err = (*v as f64 - blk.d() as f64 * *q as f64).abs();
                prop_assert!(err <= blk.d() as f64 * (0.5 + 127.0 * 2f64.powi(-23)), "x {} q {} d {}", v, q, blk.d());
            }
            if amax > 0.0 {
                prop_assert!(blk.qs().iter().any(|q| q.abs() == 127));
            }
        }
        for k in isas() {
            prop_assert_eq!(&quantize(k, &x), &reference, "{}", k.int8_isa());
        }
    }

    #[test]
    fn matmul_q8_tiers_match_scalar(
        rows in 1usize..70,
        ci in 0usize..COLS.len(),
        n_pos in 1usize..=17,
        offset in 0usize..4,
        with_bias in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let cols = COLS[ci];
        let mut rng = Rng::new(seed);
        let buf = weights(rows, cols, offset, false, &mut rng);
        let m = Matrix::new(GgmlType::Q8_0, rows, cols, &buf[offset..]).unwrap();
        let x = activations(n_pos * cols, &mut rng);
        let bias: Vec<f32> = (0..rows).map(|_| rng.f()).collect();
        let bias = with_bias.then_some(&bias[..]);
        let xq = quantize(Kernels::scalar(), &x);
        let mut want = vec![0.0f32; n_pos * rows];
        Kernels::scalar().matmul_q8(&m, &xq, n_pos, bias, &mut want);

        // Magnitude of each output's terms, for the summation-order bound.
        let nb = cols / QK;
        let mag: Vec<f64> = (0..n_pos * rows).map(|i| {
            let (p, o) = (i / rows, i % rows);
            (0..nb).map(|b| {
                let w = &buf[offset + o * nb * 34 + b * 34..][..34];
                let dw = half::f16::from_bits(u16::from_le_bytes([w[0], w[1]])).to_f64();
                let xb = &xq[p * nb + b];
                let s: f64 = (0..QK).map(|j| ((w[2 + j] as i8) as f64 * xb.qs()[j] as f64).abs()).sum();
                (dw * xb.d() as f64).abs() * s
            }).sum::<f64>() + bias.map_or(0.0, |b| b[o].abs() as f64)
        }).collect();

        // The packed scalar twin does the row-major twin's arithmetic in the same order.
        let pk = PackedQ8::new(&m).unwrap();
        let mut y = vec![f32::NAN; n_pos * rows];
        Kernels::scalar().matmul_q8_packed(&pk, &xq, n_pos, bias, &mut y);
        prop_assert_eq!(&y, &want, "packed scalar twin");

        for k in isas() {
            for packed in [false, true] {
                let mut y = vec![f32::NAN; n_pos * rows];
                if packed {
                    k.matmul_q8_packed(&pk, &xq, n_pos, bias, &mut y);
                } else {
                    k.matmul_q8(&m, &xq, n_pos, bias, &mut y);
                }
                for i in 0..y.len() {
                    let tol = (nb + 32) as f64 * f32::EPSILON as f64 * mag[i] + 1e-30;
                    let e = (y[i] as f64 - want[i] as f64).abs();
                    prop_assert!(e <= tol, "{} packed {} rows {} cols {} n_pos {} at {}: {} vs {} (tol {})",
                        k.int8_isa(), packed, rows, cols, n_pos, i, y[i], want[i], tol);
                }
            }
        }
    }

    /// Unit scales and integer activations with a ±127 in every block make `d_x = 1`, so every
    /// f32 output is an exactly representable integer: the tiers' integer block dot products
    /// must agree bit for bit, extremes (−128, ±127) included.
    #[test]
    fn integer_dots_are_bit_identical(
        rows in 1usize..40,
        ci in 0usize..COLS.len(),
        n_pos in 1usize..=17,
        seed in any::<u64>(),
    ) {
        let cols = COLS[ci];
        let mut rng = Rng::new(seed);
        let buf = weights(rows, cols, 1, true, &mut rng);
        let m = Matrix::new(GgmlType::Q8_0, rows, cols, &buf[1..]).unwrap();
        let x: Vec<f32> = (0..n_pos * cols).map(|i| {
            if i % QK == (seed as usize) % QK {
                if rng.next().is_multiple_of(2) { 127.0 } else { -127.0 }
            } else {
                match rng.next() % 4 { 0 => 127.0, 1 => -127.0, _ => (rng.f() * 127.0).round() }
            }
        }).collect();
        let xq = quantize(Kernels::scalar(), &x);
        prop_assert!(xq.iter().all(|b| b.d() == 1.0));
        let w = &buf[1..];
        let nb = cols / QK;
        let exact: Vec<f32> = (0..n_pos * rows).map(|i| {
            let (p, o) = (i / rows, i % rows);
            let mut s = 0i64;
            for c in 0..cols {
                let wq = w[o * nb * 34 + c / QK * 34 + 2 + c % QK] as i8 as i64;
                s += wq * x[p * cols + c] as i64;
            }
            s as f32
        }).collect();
        let pk = PackedQ8::new(&m).unwrap();
        for k in isas() {
            let mut y = vec![f32::NAN; n_pos * rows];
            k.matmul_q8(&m, &xq, n_pos, None, &mut y);
            prop_assert_eq!(&y, &exact, "{}", k.int8_isa());
            let mut y = vec![f32::NAN; n_pos * rows];
            k.matmul_q8_packed(&pk, &xq, n_pos, None, &mut y);
            prop_assert_eq!(&y, &exact, "{} packed", k.int8_isa());
        }
    }

    /// Scalar int8 against the exact product of the dequantised weights with the unquantised
    /// activations: the only error is the activation rounding (half a step per value).
    #[test]
    fn matmul_q8_error_is_the_activation_rounding(
        rows in 1usize..30,
        ci in 0usize..COLS.len(),
        n_pos in 1usize..=6,
        seed in any::<u64>(),
    ) {
        let cols = COLS[ci];
        let mut rng = Rng::new(seed);
        let buf = weights(rows, cols, 0, false, &mut rng);
        let m = Matrix::new(GgmlType::Q8_0, rows, cols, &buf).unwrap();
        let x = activations(n_pos * cols, &mut rng);
        let xq = quantize(Kernels::scalar(), &x);
        let mut y = vec![0.0f32; n_pos * rows];
        Kernels::scalar().matmul_q8(&m, &xq, n_pos, None, &mut y);
        let nb = cols / QK;
        for p in 0..n_pos {
            for o in 0..rows {
                let (mut exact, mut bound, mut mag) = (0.0f64, 0.0f64, 0.0f64);
                for b in 0..nb {
                    let wb = &buf[o * nb * 34 + b * 34..][..34];
                    let dw = half::f16::from_bits(u16::from_le_bytes([wb[0], wb[1]])).to_f64();
                    let dx = xq[p * nb + b].d() as f64;
                    for j in 0..QK {
                        let wv = dw * (wb[2 + j] as i8) as f64;
                        let xv = x[p * cols + b * QK + j] as f64;
                        exact += wv * xv;
                        bound += wv.abs() * dx * 0.5;
                        mag += (wv * xv).abs();
                    }
                }
                let e = (y[p * rows + o] as f64 - exact).abs();
                let tol = bound * (1.0 + 1e-5) + (nb as f64 + 34.0) * f32::EPSILON as f64 * (mag + bound);
                prop_assert!(e <= tol, "p {} o {}: {} vs {} (tol {})", p, o, y[p * rows + o], exact, tol);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// 4-bit weights: the packed scalar twin equals the row-major reference (`matmul_q8` on a
    /// Q4 matrix) bit for bit; every tier's packed kernel is within the summation-order bound
    /// of it; and the reference is within the activation rounding of the exact product.
    #[test]
    fn q4_packed_matches_the_reference(
        q41 in any::<bool>(),
        rows in 1usize..70,
        ci in 0usize..COLS.len(),
        n_pos in 1usize..=17,
        with_bias in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let ty = if q41 { GgmlType::Q4_1 } else { GgmlType::Q4_0 };
        let cols = COLS[ci];
        let mut rng = Rng::new(seed);
        let buf = q4_weights(ty, rows, cols, false, &mut rng);
        let m = Matrix::new(ty, rows, cols, &buf).unwrap();
        let x = activations(n_pos * cols, &mut rng);
        let bias: Vec<f32> = (0..rows).map(|_| rng.f()).collect();
        let bias = with_bias.then_some(&bias[..]);
        let xq = quantize(Kernels::scalar(), &x);
        let mut want = vec![f32::NAN; n_pos * rows];
        Kernels::scalar().matmul_q8(&m, &xq, n_pos, bias, &mut want);
        let pk = PackedQ4::new(&m).unwrap();
        let mut y = vec![f32::NAN; n_pos * rows];
        Kernels::scalar().matmul_q4_packed(&pk, &xq, n_pos, bias, &mut y);
        prop_assert_eq!(&y, &want, "packed scalar twin");

        let wf = q4_dequant(ty, &buf, rows, cols);
        let nb = cols / QK;
        for p in 0..n_pos {
            for o in 0..rows {
                let (mut exact, mut round, mut mag) = (0.0f64, 0.0f64, 0.0f64);
                for c in 0..cols {
                    let (w, xv, dx) = (wf[o * cols + c], x[p * cols + c] as f64, xq[p * nb + c / QK].d() as f64);
                    exact += w * xv;
                    round += w.abs() * dx * 0.5;
                    mag += (w * xv).abs() + w.abs() * dx;
                }
                let b = bias.map_or(0.0, |b| b[o] as f64);
                let (i, tol_order) = (p * rows + o, (nb as f64 + 34.0) * f32::EPSILON as f64 * (mag + b.abs()) + 1e-30);
                let e = (want[i] as f64 - exact - b).abs();
                prop_assert!(e <= round * (1.0 + 1e-5) + tol_order, "{:?} reference at {}: {} vs {} (round {})", ty, i, want[i], exact + b, round);
                for k in isas() {
                    let mut y = vec![f32::NAN; n_pos * rows];
                    k.matmul_q4_packed(&pk, &xq, n_pos, bias, &mut y);
                    let e = (y[i] as f64 - want[i] as f64).abs();
                    prop_assert!(e <= tol_order, "{} {:?} rows {} cols {} n_pos {} at {}: {} vs {}", k.int8_isa(), ty, rows, cols, n_pos, i, y[i], want[i]);
                }
            }
        }
    }

    /// Unit scales (Q4_1: d = 1, m = 0; Q4_0: d = 1, so m = −8) and integer activations with a
    /// ±127 in every block: every output is an exact integer in every tier.
    #[test]
    fn q4_integer_dots_are_bit_identical(q41 in any::<bool>(), rows in 1usize..40, ci in 0usize..COLS.len(), n_pos in 1usize..=17, seed in any::<u64>()) {
        let ty = if q41 { GgmlType::Q4_1 } else { GgmlType::Q4_0 };
        let cols = COLS[ci];
        let mut rng = Rng::new(seed);
        let buf = q4_weights(ty, rows, cols, true, &mut rng);
        let m = Matrix::new(ty, rows, cols, &buf).unwrap();
        let x: Vec<f32> = (0..n_pos * cols).map(|i| if i % QK == 5 { 127.0 } else { (rng.f() * 127.0).round() }).collect();
        let xq = quantize(Kernels::scalar(), &x);
        prop_assert!(xq.iter().all(|b| b.d() == 1.0));
        let wf = q4_dequant(ty, &buf, rows, cols);
        let exact: Vec<f32> = (0..n_pos * rows).map(|i| {
            let (p, o) = (i / rows, i % rows);
            (0..cols).map(|c| wf[o * cols + c] * x[p * cols + c] as f64).sum::<f64>() as f32
        }).collect();
        let pk = PackedQ4::new(&m).unwrap();
        for k in isas() {
            let mut y = vec![f32::NAN; n_pos * rows];
            k.matmul_q4_packed(&pk, &xq, n_pos, None, &mut y);
            prop_assert_eq!(&y, &exact, "{} {:?}", k.int8_isa(), ty);
        }
    }
}

#[test]
fn q4_packing_refuses_other_types() {
    let m = Matrix::new(GgmlType::Q8_0, 1, 32, &[0u8; 34]).unwrap();
    assert_eq!(PackedQ4::new(&m).unwrap_err(), KernelError::NotQ4 { ty: GgmlType::Q8_0 });
    let ok = PackedQ4::new(&Matrix::new(GgmlType::Q4_1, 20, 64, &[0u8; 20 * 40]).unwrap()).unwrap();
    assert_eq!((ok.rows(), ok.cols(), ok.heap_bytes()), (20, 64, 2 * 320 * 2));
}

#[test]
fn zero_activations_give_the_bias_exactly() {
    let mut rng = Rng::new(7);
    for cols in COLS {
        let rows = 13;
        let buf = weights(rows, cols, 0, false, &mut rng);
        let m = Matrix::new(GgmlType::Q8_0, rows, cols, &buf).unwrap();
        let bias: Vec<f32> = (0..rows).map(|_| rng.f()).collect();
        for k in isas() {
            let xq = quantize(k, &vec![0.0; 5 * cols]);
            assert!(xq.iter().all(|b| *b == ActBlock::ZERO));
            let mut y = vec![f32::NAN; 5 * rows];
            k.matmul_q8(&m, &xq, 5, Some(&bias), &mut y);
            for p in 0..5 {
                assert_eq!(&y[p * rows..(p + 1) * rows], &bias[..], "{}", k.int8_isa());
            }
            let mut y = vec![f32::NAN; 5 * rows];
            k.matmul_q8_packed(&PackedQ8::new(&m).unwrap(), &xq, 5, Some(&bias), &mut y);
            for p in 0..5 {
                assert_eq!(&y[p * rows..(p + 1) * rows], &bias[..], "{} packed", k.int8_isa());
            }
        }
    }
}

/// The model's shapes: 16 positions through 128x128, 512x128, 128x512; one position through a
/// 20000-row head.
#[test]
fn model_shapes() {
    let mut rng = Rng::new(11);
    for (rows, cols, n_pos) in [(128, 128, 16), (512, 128, 16), (128, 512, 16), (128, 128, 1), (20000, 128, 1)] {
        let buf = weights(rows, cols, 0, false, &mut rng);
        let m = Matrix::new(GgmlType::Q8_0, rows, cols, &buf).unwrap();
        let x = activations(n_pos * cols, &mut rng);
        let bias: Vec<f32> = (0..rows).map(|_| rng.f()).collect();
        let xq = quantize(Kernels::scalar(), &x);
        let mut want = vec![0.0f32; n_pos * rows];
        Kernels::scalar().matmul_q8(&m, &xq, n_pos, Some(&bias), &mut want);
        let mut exact = vec![0.0f32; n_pos * rows];
        Kernels::scalar().matmul(&m, &x, n_pos, Some(&bias), &mut exact);
        let scale = exact.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let pk = PackedQ8::new(&m).unwrap();
        for (k, packed) in isas().into_iter().flat_map(|k| [(k, false), (k, true)]) {
            let mut y = vec![f32::NAN; n_pos * rows];
            if packed {
                k.matmul_q8_packed(&pk, &xq, n_pos, Some(&bias), &mut y);
            } else {
                k.matmul_q8(&m, &xq, n_pos, Some(&bias), &mut y);
            }
            for i in 0..y.len() {
                assert!((y[i] - want[i]).abs() <= 1e-5 * (1.0 + scale), "{} {rows}x{cols}: {} vs {}", k.int8_isa(), y[i], want[i]);
                // Against the f32 path: activation rounding only (a loose sanity bound).
                assert!((y[i] - exact[i]).abs() <= 0.02 * (1.0 + scale), "{} vs f32 path", k.int8_isa());
            }
        }
    }
}

#[test]
fn detection_prefers_the_widest_int8_set() {
    let k = Kernels::detect();
    eprintln!("detected: level {}, int8 {}", k.level(), k.int8_isa());
    assert!(k.int8_isa().is_available());
    let best =
        [Int8Isa::Avx512Vnni, Int8Isa::AvxVnni, Int8Isa::Avx2].into_iter().find(|i| k.with_int8(*i).is_some()).unwrap_or(Int8Isa::Scalar);
    assert_eq!(k.int8_isa(), best);
    assert_eq!(Kernels::scalar().int8_isa(), Int8Isa::Scalar);
    if let Some(a2) = Kernels::for_level(Level::Avx2) {
        assert!(a2.with_int8(Int8Isa::Avx512Vnni).is_none(), "AVX-512 VNNI needs the AVX-512 level");
    }
}

#[test]
#[should_panic(expected = "needs Q8_0, Q4_0 or Q4_1")]
fn matmul_q8_refuses_other_types() {
    let w = [0u8; 64];
    let m = Matrix::new(GgmlType::F16, 1, 32, &w).unwrap();
    Kernels::detect().matmul_q8(&m, &[ActBlock::ZERO], 1, None, &mut [0.0]);
}

#[test]
fn packing_refuses_other_types_and_bad_lengths() {
    let w = [0u8; 18];
    let m = Matrix::new(GgmlType::Q4_0, 1, 32, &w).unwrap();
    assert_eq!(PackedQ8::new(&m).unwrap_err(), KernelError::NotQ8_0 { ty: GgmlType::Q4_0 });
    assert!(PackedQ8::new(&m).unwrap_err().to_string().contains("Q4_0"));
    // A hand-built Matrix whose bytes do not match its shape.
    let short = Matrix { ty: GgmlType::Q8_0, rows: 2, cols: 32, data: &[0u8; 34] };
    assert!(matches!(PackedQ8::new(&short), Err(KernelError::DataLength { .. })));
    let ok = PackedQ8::new(&Matrix::new(GgmlType::Q8_0, 17, 64, &[0u8; 17 * 68]).unwrap()).unwrap();
    assert_eq!((ok.rows(), ok.cols()), (17, 64));
    assert_eq!(ok.heap_bytes(), 2 * (64 + 2 * 512)); // two groups of 16 rows
}

#[test]
#[should_panic(expected = "do not fill")]
fn quantize_refuses_partial_blocks() {
    Kernels::detect().quantize_act(&[1.0; 33], &mut [ActBlock::ZERO; 1]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// The packed kernels give every (row, position) the same bits whether it is multiplied alone
    /// or among `n_pos` positions, on every int8 set: each output accumulates its blocks in the
    /// same order whatever the tiling. laya-runtime relies on it: a relative_causal session
    /// computes a typed character's position alone and a whole context's positions together,
    /// and the two must agree to the bit (crates/laya-runtime/tests/causal.rs).
    #[test]
    fn packed_kernels_do_not_depend_on_the_number_of_positions(
        q4 in any::<bool>(),
        rows in 1usize..70,
        ci in 0usize..COLS.len(),
        n_pos in 2usize..=40,
        seed in any::<u64>(),
    ) {
        let cols = COLS[ci];
        let mut rng = Rng::new(seed);
        let (ty, buf) = if q4 { (GgmlType::Q4_1, q4_weights(GgmlType::Q4_1, rows, cols, false, &mut rng)) } else { (GgmlType::Q8_0, weights(rows, cols, 0, false, &mut rng)) };
        let m = Matrix::new(ty, rows, cols, &buf).unwrap();
        let x = activations(n_pos * cols, &mut rng);
        let bias: Vec<f32> = (0..rows).map(|_| rng.f()).collect();
        let xq = quantize(Kernels::scalar(), &x);
        let nb = cols / QK;
        let mut kernels = isas();
        kernels.push(Kernels::scalar());
        for k in kernels {
            let run = |xq: &[ActBlock], n: usize, y: &mut [f32]| {
                if q4 {
                    k.matmul_q4_packed(&PackedQ4::new(&m).unwrap(), xq, n, Some(&bias), y);
                } else {
                    k.matmul_q8_packed(&PackedQ8::new(&m).unwrap(), xq, n, Some(&bias), y);
                }
            };
            let mut all = vec![f32::NAN; n_pos * rows];
            run(&xq, n_pos, &mut all);
            for p in 0..n_pos {
                let mut one = vec![f32::NAN; rows];
                run(&xq[p * nb..(p + 1) * nb], 1, &mut one);
                let same = one.iter().zip(&all[p * rows..(p + 1) * rows]).all(|(a, b)| a.to_bits() == b.to_bits());
                prop_assert!(same, "{} {:?} rows {} cols {} position {} of {}", k.int8_isa(), ty, rows, cols, p, n_pos);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Packing rows `ids` straight from a matrix (a factorised head's class) computes exactly
    /// what packing a gathered copy of those rows does, in every tier and for every type.
    #[test]
    fn gathered_packing_equals_packing_the_gathered_rows(
        ty_i in 0usize..3,
        rows in 1usize..60,
        ci in 0usize..COLS.len(),
        picks in proptest::collection::vec(any::<prop::sample::Index>(), 1..40),
        seed in any::<u64>(),
    ) {
        let ty = [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1][ty_i];
        let cols = COLS[ci];
        let mut rng = Rng::new(seed);
        let buf = if ty == GgmlType::Q8_0 { weights(rows, cols, 0, false, &mut rng) } else { q4_weights(ty, rows, cols, false, &mut rng) };
        let m = Matrix::new(ty, rows, cols, &buf).unwrap();
        let ids: Vec<u32> = picks.iter().map(|i| i.index(rows) as u32).collect();
        let gathered: Vec<u8> = ids.iter().flat_map(|&i| m.row(i as usize).iter().copied()).collect();
        let g = Matrix::new(ty, ids.len(), cols, &gathered).unwrap();
        let xq = quantize(Kernels::scalar(), &activations(cols, &mut rng));
        for k in std::iter::once(Kernels::scalar()).chain(isas()) {
            let (mut a, mut b) = (vec![f32::NAN; ids.len()], vec![f32::NAN; ids.len()]);
            if ty == GgmlType::Q8_0 {
                k.matmul_q8_packed(&PackedQ8::gather(&m, &ids).unwrap(), &xq, 1, None, &mut a);
                k.matmul_q8_packed(&PackedQ8::new(&g).unwrap(), &xq, 1, None, &mut b);
            } else {
                k.matmul_q4_packed(&PackedQ4::gather(&m, &ids).unwrap(), &xq, 1, None, &mut a);
                k.matmul_q4_packed(&PackedQ4::new(&g).unwrap(), &xq, 1, None, &mut b);
            }
            prop_assert_eq!(&a, &b, "{} {:?}", k.int8_isa(), ty);
        }
    }
}

#[test]
fn gathering_a_row_the_matrix_lacks_is_an_error() {
    let m = Matrix::new(GgmlType::Q8_0, 2, 32, &[0u8; 2 * 34]).unwrap();
    assert_eq!(PackedQ8::gather(&m, &[0, 2]).unwrap_err(), KernelError::RowOutOfRange { row: 2, rows: 2 });
    let m = Matrix::new(GgmlType::Q4_0, 2, 32, &[0u8; 2 * 18]).unwrap();
    assert_eq!(PackedQ4::gather(&m, &[5]).unwrap_err(), KernelError::RowOutOfRange { row: 5, rows: 2 });
    assert_eq!(PackedQ8::gather(&Matrix::new(GgmlType::Q8_0, 2, 32, &[0u8; 2 * 34]).unwrap(), &[1, 1, 0]).unwrap().rows(), 3);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// `matmul_q8_packed_rows` on the row-major matrix gives the packed kernel's bits on every
    /// int8 set, for any row count (partial last groups), width and number of positions, with
    /// and without a bias: laya-runtime predicts with it until the packed copy exists, and a
    /// prediction must not change when the copy arrives.
    #[test]
    fn packed_rows_equal_the_packed_kernel(
        rows in 1usize..70,
        ci in 0usize..COLS.len(),
        n_pos in 1usize..=9,
        with_bias in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let (cols, mut rng) = (COLS[ci], Rng::new(seed));
        let buf = weights(rows, cols, 0, false, &mut rng);
        let (m, x) = (Matrix::new(GgmlType::Q8_0, rows, cols, &buf).unwrap(), activations(n_pos * cols, &mut rng));
        let bias: Vec<f32> = (0..rows).map(|_| rng.f()).collect();
        let (bias, xq) = (with_bias.then_some(&bias[..]), quantize(Kernels::scalar(), &x));
        let mut kernels = isas();
        kernels.push(Kernels::scalar());
        for k in kernels {
            let mut packed = vec![f32::NAN; n_pos * rows];
            k.matmul_q8_packed(&PackedQ8::new(&m).unwrap(), &xq, n_pos, bias, &mut packed);
            let mut direct = vec![f32::NAN; n_pos * rows];
            k.matmul_q8_packed_rows(&m, &xq, n_pos, bias, &mut direct);
            let same = packed.iter().zip(&direct).all(|(a, b)| a.to_bits() == b.to_bits());
            prop_assert!(same, "{} rows {} cols {} positions {}: {:?} vs {:?}", k.int8_isa(), rows, cols, n_pos, &packed[..rows.min(4)], &direct[..rows.min(4)]);
        }
    }

    /// A class of a factorised head gathered and packed gives the bits of
    /// `matmul_q8_gathered_rows` on the rows where the matrix holds them, and of its naive twin
    /// (each row alone through `matmul_q8_packed_rows`): laya-runtime computes a class that way
    /// the first time it is needed and packs it the second time.
    #[test]
    fn a_gathered_class_equals_its_rows_where_they_lie(
        rows in 1usize..60,
        members in proptest::collection::vec(any::<u16>(), 1..40),
        ci in 0usize..COLS.len(),
        with_bias in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let (cols, mut rng) = (COLS[ci], Rng::new(seed));
        let buf = weights(rows, cols, 0, false, &mut rng);
        let (m, x) = (Matrix::new(GgmlType::Q8_0, rows, cols, &buf).unwrap(), activations(cols, &mut rng));
        let ids: Vec<u32> = members.iter().map(|&i| u32::from(i) % rows as u32).collect();
        let bias: Vec<f32> = (0..ids.len()).map(|_| rng.f()).collect();
        let (bias, xq) = (with_bias.then_some(&bias[..]), quantize(Kernels::scalar(), &x));
        let mut kernels = isas();
        kernels.push(Kernels::scalar());
        for k in kernels {
            let mut packed = vec![f32::NAN; ids.len()];
            k.matmul_q8_packed(&PackedQ8::gather(&m, &ids).unwrap(), &xq, 1, bias, &mut packed);
            let mut fast = vec![f32::NAN; ids.len()];
            k.matmul_q8_gathered_rows(&m, &ids, &xq, bias, &mut fast);
            let mut naive = vec![f32::NAN; ids.len()];
            k.matmul_q8_gathered_rows_naive(&m, &ids, &xq, bias, &mut naive);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            prop_assert_eq!(bits(&fast), bits(&packed), "{} {} of {} rows", k.int8_isa(), ids.len(), rows);
            prop_assert_eq!(bits(&naive), bits(&packed), "{} naive", k.int8_isa());
        }
    }
}
