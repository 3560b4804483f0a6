//! aarch64 NEON tier.
//!
//! Deliberately straightforward (it is compile-checked on the x86 development machine but has
//! not been benchmarked on ARM hardware): each 32-value unit of a weight row is decoded once with
//! the scalar twin's decoder into a stack buffer, then dotted against every position with 4-lane
//! FMAs. gelu and softmax use the scalar twin (no vector `exp` here yet).

use core::arch::aarch64::*;

use crate::{scalar, GgmlType, MatArgs, QK};

#[target_feature(enable = "neon")]
#[inline]
fn ld(s: &[f32]) -> float32x4_t {
    let s = &s[..4];
    // SAFETY: s has exactly 4 elements.
    unsafe { vld1q_f32(s.as_ptr()) }
}

#[target_feature(enable = "neon")]
#[inline]
fn st(d: &mut [f32], v: float32x4_t) {
    let d = &mut d[..4];
    // SAFETY: d has exactly 4 elements.
    unsafe { vst1q_f32(d.as_mut_ptr(), v) }
}

#[target_feature(enable = "neon")]
pub(crate) fn matmul(a: &MatArgs, x: &[f32], n_pos: usize, bias: Option<&[f32]>, y: &mut [f32]) {
    let (rows, cols) = (a.rows, a.cols);
    let mut buf = [0.0f32; QK];
    let mut xt = [0.0f32; QK];
    for o in 0..rows {
        let row = a.row(o);
        for p in 0..n_pos {
            y[p * rows + o] = bias.map_or(0.0, |b| b[o]);
        }
        let mut c = 0;
        while c < cols {
            let n = QK.min(cols - c);
            if n < QK {
                buf = [0.0; QK]; // zero lanes past the tail
            }
            scalar::decode(a.ty, row, c, n, &mut buf);
            for p in 0..n_pos {
                let xs = &x[p * cols + c..][..n];
                let xs: &[f32] = if n == QK {
                    xs
                } else {
                    xt[..n].copy_from_slice(xs);
                    xt[n..].fill(0.0);
                    &xt
                };
                let mut acc = [vdupq_n_f32(0.0); 2];
                for v in 0..QK / 4 {
                    acc[v & 1] = vfmaq_f32(acc[v & 1], ld(&buf[4 * v..]), ld(&xs[4 * v..]));
                }
                y[p * rows + o] += vaddvq_f32(vaddq_f32(acc[0], acc[1]));
            }
            c += n;
        }
    }
}

#[target_feature(enable = "neon")]
pub(crate) fn row_op(ty: GgmlType, row: &[u8], out: &mut [f32], add: bool) {
    // Embedding lookups are one row per token: the scalar decoder is fast enough.
    scalar::row_op(ty, row, out, add)
}

#[target_feature(enable = "neon")]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [vdupq_n_f32(0.0); 4];
    let mut i = 0;
    while i + 16 <= n {
        for k in 0..4 {
            acc[k] = vfmaq_f32(acc[k], ld(&a[i + 4 * k..]), ld(&b[i + 4 * k..]));
        }
        i += 16;
    }
    let mut s = vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3])));
    for j in i..n {
        s += a[j] * b[j];
    }
    s
}

#[target_feature(enable = "neon")]
pub(crate) fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    let n = x.len().min(y.len());
    let av = vdupq_n_f32(a);
    let mut i = 0;
    while i + 4 <= n {
        let r = vfmaq_f32(ld(&y[i..]), av, ld(&x[i..]));
        st(&mut y[i..], r);
        i += 4;
    }
    for j in i..n {
        y[j] += a * x[j];
    }
}

#[target_feature(enable = "neon")]
pub(crate) fn add(x: &[f32], y: &mut [f32]) {
    let n = x.len().min(y.len());
    let mut i = 0;
    while i + 4 <= n {
        let r = vaddq_f32(ld(&y[i..]), ld(&x[i..]));
        st(&mut y[i..], r);
        i += 4;
    }
    for j in i..n {
        y[j] += x[j];
    }
}

#[target_feature(enable = "neon")]
pub(crate) fn relu(x: &mut [f32]) {
    let z = vdupq_n_f32(0.0);
    let mut it = x.chunks_exact_mut(4);
    for c in &mut it {
        let v = vmaxq_f32(ld(c), z);
        st(c, v);
    }
    for v in it.into_remainder() {
        *v = v.max(0.0);
    }
}

#[target_feature(enable = "neon")]
pub(crate) fn layer_norm(x: &[f32], w: &[f32], b: &[f32], eps: f32, out: &mut [f32]) {
    let n = x.len();
    if n == 0 {
        return;
    }
    let (w, b, out) = (&w[..n], &b[..n], &mut out[..n]);
    let n4 = n / 4 * 4;
    let mut s = vdupq_n_f32(0.0);
    for i in (0..n4).step_by(4) {
        s = vaddq_f32(s, ld(&x[i..]));
    }
    let mean = (vaddvq_f32(s) + x[n4..].iter().sum::<f32>()) / n as f32;
    let mv = vdupq_n_f32(mean);
    let mut q = vdupq_n_f32(0.0);
    for i in (0..n4).step_by(4) {
        let d = vsubq_f32(ld(&x[i..]), mv);
        q = vfmaq_f32(q, d, d);
    }
    let var = (vaddvq_f32(q) + x[n4..].iter().map(|v| (v - mean) * (v - mean)).sum::<f32>()) / n as f32;
    let r = 1.0 / (var + eps).sqrt();
    let rv = vdupq_n_f32(r);
    for i in (0..n4).step_by(4) {
        let d = vmulq_f32(vsubq_f32(ld(&x[i..]), mv), rv);
        st(&mut out[i..], vfmaq_f32(ld(&b[i..]), d, ld(&w[i..])));
    }
    for i in n4..n {
        out[i] = (x[i] - mean) * r * w[i] + b[i];
    }
}

#[target_feature(enable = "neon")]
pub(crate) fn gelu_tanh(x: &mut [f32]) {
    scalar::gelu_tanh(x)
}

#[target_feature(enable = "neon")]
pub(crate) fn softmax(x: &mut [f32]) {
    scalar::softmax(x)
}

#[target_feature(enable = "neon")]
pub(crate) fn run_max(x: &[f32], out: &mut [f32]) {
    scalar::run_max(x, out)
}

#[target_feature(enable = "neon")]
pub(crate) fn score_chunks(p: &[f32], share: &[f32], c: f32, out: &mut [f32], chunk_max: &mut [f32]) -> f32 {
    scalar::score_chunks(p, share, c, out, chunk_max)
}
