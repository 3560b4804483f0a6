//! The scalar twin: the reference every SIMD tier is tested against, and the fallback on CPUs
//! without SIMD support. Written for clarity; the only concession to speed is decoding each
//! weight block once per row rather than once per position.

use crate::{GgmlType, MatArgs, QK};

#[inline]
pub(crate) fn f16_to_f32(bits: u16) -> f32 {
    half::f16::from_bits(bits).to_f32()
}

#[inline]
pub(crate) fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

#[inline]
fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

/// Decodes values `c .. c+n` of a row (`n <= 32`; for quantised types `c` is a block start and
/// `n == 32`) into `out[..n]`. Quantised formulas are written so that each value is rounded
/// exactly once; the SIMD tiers use the same operations and match bit for bit.
#[inline]
pub(crate) fn decode(ty: GgmlType, row: &[u8], c: usize, n: usize, out: &mut [f32; QK]) {
    match ty {
        GgmlType::F32 => {
            for (j, o) in out[..n].iter_mut().enumerate() {
                let i = (c + j) * 4;
                *o = f32::from_le_bytes([row[i], row[i + 1], row[i + 2], row[i + 3]]);
            }
        }
        GgmlType::F16 => {
            for (j, o) in out[..n].iter_mut().enumerate() {
                *o = f16_to_f32(u16_at(row, (c + j) * 2));
            }
        }
        GgmlType::BF16 => {
            for (j, o) in out[..n].iter_mut().enumerate() {
                *o = bf16_to_f32(u16_at(row, (c + j) * 2));
            }
        }
        GgmlType::Q8_0 => {
            let bb = GgmlType::Q8_0.block_bytes();
            let b = &row[c / QK * bb..][..bb];
            let d = f16_to_f32(u16_at(b, 0));
            for j in 0..QK {
                out[j] = d * (b[2 + j] as i8 as f32);
            }
        }
        GgmlType::Q4_0 => {
            let bb = GgmlType::Q4_0.block_bytes();
            let b = &row[c / QK * bb..][..bb];
            let d = f16_to_f32(u16_at(b, 0));
            for j in 0..QK / 2 {
                let q = b[2 + j];
                out[j] = d * ((q & 0xF) as i32 - 8) as f32;
                out[j + 16] = d * ((q >> 4) as i32 - 8) as f32;
            }
        }
        GgmlType::Q4_1 => {
            let bb = GgmlType::Q4_1.block_bytes();
            let b = &row[c / QK * bb..][..bb];
            let d = f16_to_f32(u16_at(b, 0));
            let m = f16_to_f32(u16_at(b, 2));
            for j in 0..QK / 2 {
                let q = b[4 + j];
                out[j] = d * (q & 0xF) as f32 + m;
                out[j + 16] = d * (q >> 4) as f32 + m;
            }
        }
        // `Matrix::new` refuses integer tables; decoded as numbers for completeness.
        GgmlType::I16 => {
            for (j, o) in out[..n].iter_mut().enumerate() {
                *o = f32::from(u16_at(row, (c + j) * 2));
            }
        }
        GgmlType::I32 => {
            for (j, o) in out[..n].iter_mut().enumerate() {
                let i = (c + j) * 4;
                *o = i32::from_le_bytes([row[i], row[i + 1], row[i + 2], row[i + 3]]) as f32;
            }
        }
    }
}

pub(crate) fn matmul(a: &MatArgs, x: &[f32], n_pos: usize, bias: Option<&[f32]>, y: &mut [f32]) {
    let (rows, cols) = (a.rows, a.cols);
    let mut buf = [0.0f32; QK];
    for o in 0..rows {
        let row = a.row(o);
        for p in 0..n_pos {
            y[p * rows + o] = 0.0;
        }
        let mut c = 0;
        while c < cols {
            let n = QK.min(cols - c);
            decode(a.ty, row, c, n, &mut buf);
            for p in 0..n_pos {
                let xs = &x[p * cols + c..][..n];
                let mut s = 0.0f32;
                for j in 0..n {
                    s += buf[j] * xs[j];
                }
                y[p * rows + o] += s;
            }
            c += n;
        }
        if let Some(b) = bias {
            for p in 0..n_pos {
                y[p * rows + o] += b[o];
            }
        }
    }
}

pub(crate) fn row_op(ty: GgmlType, row: &[u8], out: &mut [f32], add: bool) {
    let mut buf = [0.0f32; QK];
    for (ci, chunk) in out.chunks_mut(QK).enumerate() {
        let n = chunk.len();
        decode(ty, row, ci * QK, n, &mut buf);
        for (o, v) in chunk.iter_mut().zip(&buf[..n]) {
            *o = if add { *o + *v } else { *v };
        }
    }
}

pub(crate) fn layer_norm(x: &[f32], w: &[f32], b: &[f32], eps: f32, out: &mut [f32]) {
    let n = x.len();
    if n == 0 {
        return;
    }
    let mean = x.iter().sum::<f32>() / n as f32;
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n as f32;
    let rstd = 1.0 / (var + eps).sqrt();
    for i in 0..n {
        out[i] = (x[i] - mean) * rstd * w[i] + b[i];
    }
}

pub(crate) const GELU_C: f32 = 0.797_884_6; // sqrt(2/pi)
pub(crate) const GELU_A: f32 = 0.044_715;

pub(crate) fn gelu_tanh(x: &mut [f32]) {
    for v in x {
        let u = GELU_C * (*v + GELU_A * *v * *v * *v);
        *v = 0.5 * *v * (1.0 + u.tanh());
    }
}

/// Lanes of one chunk of [`crate::Kernels::score_chunks`].
pub(crate) const SCORE_CHUNK: usize = 16;

pub(crate) fn score_chunks(p: &[f32], share: &[f32], c: f32, out: &mut [f32], chunk_max: &mut [f32]) -> f32 {
    let mut sum = 0.0f32;
    let chunks = p.chunks(SCORE_CHUNK).zip(share.chunks(SCORE_CHUNK)).zip(out.chunks_mut(SCORE_CHUNK));
    for (((pc, sc), oc), m) in chunks.zip(chunk_max.iter_mut()) {
        let mut mx = f32::NEG_INFINITY;
        for ((o, &pv), &sv) in oc.iter_mut().zip(pc).zip(sc) {
            *o = pv * (c - sv).max(0.0);
            sum += *o;
            mx = mx.max(*o);
        }
        *m = mx;
    }
    sum
}

pub(crate) fn run_max(x: &[f32], out: &mut [f32]) {
    for (o, run) in out.iter_mut().zip(x.chunks(SCORE_CHUNK)) {
        *o = run.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    }
}

pub(crate) fn relu(x: &mut [f32]) {
    for v in x {
        *v = v.max(0.0);
    }
}

pub(crate) fn softmax(x: &mut [f32]) {
    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut s = 0.0f32;
    for v in x.iter_mut() {
        *v = (*v - m).exp();
        s += *v;
    }
    let inv = 1.0 / s;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

pub(crate) fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}

pub(crate) fn add(x: &[f32], y: &mut [f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += x;
    }
}

/// Multi-head attention over `n_kv` keys for `n_q` queries (see `Kernels::attention`).
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
    let scores = &mut scores[..n_kv];
    for p in 0..n_q {
        for h in 0..heads {
            let c = h * dh;
            let qv = &q[p * d + c..][..dh];
            for (j, s) in scores.iter_mut().enumerate() {
                *s = dot(qv, &k[j * d + c..][..dh]) * scale;
            }
            softmax(scores);
            let o = &mut out[p * d + c..][..dh];
            o.fill(0.0);
            for (j, s) in scores.iter().enumerate() {
                axpy(*s, &v[j * d + c..][..dh], o);
            }
        }
    }
}
