//! Micro benchmark for the matmul kernels (no criterion; prints a table).
//!
//! ```text
//! cargo run --release -p laya-kernels --example kernel_bench [peak_gflops]
//! ```
//!
//! `peak_gflops` (default 115, a Zen 3 core at ~3.6 GHz: 2 FMA/cycle x 8 lanes x 2 flops) is only
//! used to print the fraction of peak. Results are the best of several timed batches, so they
//! reflect the kernel rather than scheduling noise; on a shared machine expect some variance.

use laya_kernels::{ActBlock, GgmlType, Int8Isa, Kernels, Level, Matrix, PackedQ4, PackedQ8, QK};
use std::hint::black_box;
use std::time::{Duration, Instant};

fn weights(ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let n = rows * ty.row_bytes_rounded(cols);
    let mut s = 0x1234_5678u32;
    let mut v: Vec<u8> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 24) as u8
        })
        .collect();
    // Make every element/scale a small finite number so timings are not skewed by NaN/denormals.
    match ty {
        GgmlType::F32 => v.chunks_mut(4).for_each(|c| c.copy_from_slice(&0.01f32.to_le_bytes())),
        GgmlType::F16 | GgmlType::BF16 => v.chunks_mut(2).for_each(|c| c[1] = 0x3C),
        _ => v.chunks_mut(ty.block_bytes()).for_each(|b| {
            b[0] = 0x00;
            b[1] = 0x20;
            if ty == GgmlType::Q4_1 {
                b[2] = 0x00;
                b[3] = 0x20;
            }
        }),
    }
    v
}

/// Best seconds per call over many short batches. On a shared machine a batch that was
/// preempted or shared a cache with a neighbour is slower, never faster, so the minimum over
/// batches of ~100 µs (shorter than a scheduler slice) is the stable figure.
fn time(mut f: impl FnMut(), _iters: usize) -> f64 {
    let t = Instant::now();
    let mut n = 0;
    while t.elapsed() < Duration::from_millis(20) {
        f();
        n += 1;
    }
    let per = t.elapsed().as_secs_f64() / n as f64;
    let iters = ((100e-6 / per) as usize).max(1);
    let mut best = f64::INFINITY;
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(300) {
        let t = Instant::now();
        for _ in 0..iters {
            f();
        }
        best = best.min(t.elapsed().as_secs_f64() / iters as f64);
    }
    best
}

fn main() {
    let peak: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(115.0);
    let levels: Vec<Kernels> = Level::ALL.into_iter().filter_map(Kernels::for_level).collect();
    println!("detected: {}   (peak for %: {peak} GFLOP/s)", Kernels::detect().level());
    let best = Kernels::detect();
    let f32_peak = best.measure_peak().f32_gflops;
    let vnni256_peak = best.with_int8(Int8Isa::AvxVnni).and_then(|k| k.measure_peak().int8_gops);
    let vnni512_peak = best.with_int8(Int8Isa::Avx512Vnni).and_then(|k| k.measure_peak().int8_gops);
    let show = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.0}"));
    println!(
        "measured peak of this core: f32 FMA {} GFLOP/s, AVX-VNNI int8 {} GOP/s, AVX-512 VNNI int8 {} GOP/s",
        show(f32_peak),
        show(vnni256_peak),
        show(vnni512_peak)
    );
    println!("{:<8} {:<5} {:>5} {:>5} {:>5} {:>10} {:>7}", "level", "type", "n_pos", "rows", "cols", "GFLOP/s", "%peak");
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1] {
        for (n_pos, rows, cols) in [(16, 128, 128), (16, 512, 128), (16, 128, 512)] {
            if ty != GgmlType::F32 && (rows, cols) != (128, 128) {
                continue;
            }
            let w = weights(ty, rows, cols);
            let m = Matrix::new(ty, rows, cols, &w).unwrap();
            let x = vec![0.5f32; n_pos * cols];
            let b = vec![0.1f32; rows];
            let mut y = vec![0.0f32; n_pos * rows];
            for k in &levels {
                let s = time(|| k.matmul(&m, black_box(&x), n_pos, Some(&b), black_box(&mut y)), 200);
                let gf = 2.0 * (n_pos * rows * cols) as f64 / s / 1e9;
                println!(
                    "{:<8} {:<5} {:>5} {:>5} {:>5} {:>10.1} {:>6.0}%",
                    k.level().to_string(),
                    ty.name(),
                    n_pos,
                    rows,
                    cols,
                    gf,
                    100.0 * gf / peak
                );
            }
        }
    }
    println!();
    println!("cold weights: 16 positions, cycling through 48 different matrices (~3 MB f32), as a");
    println!("prediction does (each matrix is read once, from L3 or memory rather than L1/L2):");
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_1] {
        let (rows, cols, n_pos, copies) = (128, 128, 16, 48);
        let ws: Vec<Vec<u8>> = (0..copies).map(|_| weights(ty, rows, cols)).collect();
        let ms: Vec<Matrix> = ws.iter().map(|w| Matrix::new(ty, rows, cols, w).unwrap()).collect();
        let x = vec![0.5f32; n_pos * cols];
        let b = vec![0.1f32; rows];
        let mut y = vec![0.0f32; n_pos * rows];
        for k in &levels {
            if k.level() == Level::Scalar {
                continue;
            }
            let mut i = 0;
            let s = time(
                || {
                    i = (i + 1) % copies;
                    k.matmul(&ms[i], black_box(&x), n_pos, Some(&b), black_box(&mut y))
                },
                200,
            );
            let gf = 2.0 * (n_pos * rows * cols) as f64 / s / 1e9;
            println!(
                "{:<8} {:<5} {:>5} {:>5} {:>5} {:>10.1} {:>6.0}%",
                k.level().to_string(),
                ty.name(),
                n_pos,
                rows,
                cols,
                gf,
                100.0 * gf / peak
            );
        }
    }
    println!();
    println!("int8 activations x Q8_0 weights (GFLOP/s-equivalent: 2 x MACs / time) against the");
    println!("f32-activation Q8_0 matmul of the best level; `int8+q` includes quantising x;");
    println!("`packed` is matmul_q8_packed on the 16-row interleaved copy (PackedQ8), `%peak` its");
    println!("share of the measured int8 peak of that instruction set:");
    println!(
        "{:<12} {:>5} {:>5} {:>5} {:>10} {:>10} {:>10} {:>10} {:>6}",
        "int8 set", "n_pos", "rows", "cols", "f32-act", "int8", "int8+q", "packed", "%peak"
    );
    for (n_pos, rows, cols) in [(16, 128, 128), (16, 512, 128), (16, 128, 512), (1, 128, 128), (1, 20000, 128)] {
        let w = weights(GgmlType::Q8_0, rows, cols);
        let m = Matrix::new(GgmlType::Q8_0, rows, cols, &w).unwrap();
        let pk = PackedQ8::new(&m).unwrap();
        let x: Vec<f32> = (0..n_pos * cols).map(|i| ((i * 7919) % 200) as f32 / 100.0 - 1.0).collect();
        let b = vec![0.1f32; rows];
        let mut y = vec![0.0f32; n_pos * rows];
        let mut xq = vec![ActBlock::ZERO; n_pos * cols / QK];
        let gf = |s: f64| 2.0 * (n_pos * rows * cols) as f64 / s / 1e9;
        let f32_act = gf(time(|| best.matmul(&m, black_box(&x), n_pos, Some(&b), black_box(&mut y)), 200));
        for isa in Int8Isa::ALL {
            let Some(k) = best.with_int8(isa) else { continue };
            k.quantize_act(&x, &mut xq);
            let int8 = gf(time(|| k.matmul_q8(&m, black_box(&xq), n_pos, Some(&b), black_box(&mut y)), 200));
            let with_q = gf(time(
                || {
                    k.quantize_act(black_box(&x), &mut xq);
                    k.matmul_q8(&m, &xq, n_pos, Some(&b), black_box(&mut y))
                },
                200,
            ));
            let packed = gf(time(|| k.matmul_q8_packed(&pk, black_box(&xq), n_pos, Some(&b), black_box(&mut y)), 200));
            let isa_peak = match isa {
                Int8Isa::Avx512Vnni => vnni512_peak,
                Int8Isa::AvxVnni => vnni256_peak,
                _ => None,
            };
            println!(
                "{:<12} {:>5} {:>5} {:>5} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>6}",
                isa.to_string(),
                n_pos,
                rows,
                cols,
                f32_act,
                int8,
                with_q,
                packed,
                isa_peak.map_or("-".to_string(), |p| format!("{:.0}%", 100.0 * packed / p))
            );
        }
    }
    println!();
    println!("4-bit weights, int8 activations: matmul_q4_packed (PackedQ4, Q4_1) where the CPU has");
    println!("a SIMD tier for it (GFLOP/s-equivalent; the word head row also as GB/s of packed bytes):");
    println!("{:<12} {:>5} {:>5} {:>5} {:>10} {:>8}", "int8 set", "n_pos", "rows", "cols", "q4 packed", "GB/s");
    for (n_pos, rows, cols) in [(16, 128, 128), (16, 128, 512), (1, 20000, 128)] {
        let w = weights(GgmlType::Q4_1, rows, cols);
        let pk = PackedQ4::new(&Matrix::new(GgmlType::Q4_1, rows, cols, &w).unwrap()).unwrap();
        let x: Vec<f32> = (0..n_pos * cols).map(|i| ((i * 7919) % 200) as f32 / 100.0 - 1.0).collect();
        let b = vec![0.1f32; rows];
        let mut y = vec![0.0f32; n_pos * rows];
        let mut xq = vec![ActBlock::ZERO; n_pos * cols / QK];
        for k in [best.with_int8(Int8Isa::Scalar), Some(best)].into_iter().flatten() {
            if k.int8_isa() != Int8Isa::Scalar && !k.packs_q4() {
                continue;
            }
            k.quantize_act(&x, &mut xq);
            let t = time(|| k.matmul_q4_packed(&pk, black_box(&xq), n_pos, Some(&b), black_box(&mut y)), 200);
            println!(
                "{:<12} {:>5} {:>5} {:>5} {:>10.1} {:>8.1}",
                k.int8_isa().to_string(),
                n_pos,
                rows,
                cols,
                2.0 * (n_pos * rows * cols) as f64 / t / 1e9,
                pk.heap_bytes() as f64 / t / 1e9
            );
        }
    }
    println!();
    println!("output head, n_pos = 1, 20000 x 128 (weights streamed once per call):");
    println!("{:<8} {:<5} {:>10} {:>10}", "level", "type", "GB/s", "us/call");
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0] {
        let (rows, cols) = (20000, 128);
        let w = weights(ty, rows, cols);
        let m = Matrix::new(ty, rows, cols, &w).unwrap();
        let x = vec![0.5f32; cols];
        let b = vec![0.1f32; rows];
        let mut y = vec![0.0f32; rows];
        for k in &levels {
            let s = time(|| k.matmul(&m, black_box(&x), 1, Some(&b), black_box(&mut y)), 20);
            println!("{:<8} {:<5} {:>10.1} {:>10.1}", k.level().to_string(), ty.name(), w.len() as f64 / s / 1e9, s * 1e6);
        }
    }
}
