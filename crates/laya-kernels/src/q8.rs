//! Integer (int8 × int8) path for Q8_0 weights, ggml style: activations are quantised to int8
//! in blocks of 32 ([`ActBlock`]), each block dot product is an exact `i32`, and only the block
//! results are scaled and summed in f32.
//!
//! This module holds the block types and the scalar twin that the SIMD tiers
//! (`q8_x86.rs`) are tested against.

use crate::{scalar, MatArgs, QK};

/// One block of 32 activations quantised to int8: `x[j] ≈ d · qs[j]`, with the block sum of the
/// int8 values precomputed for the VNNI offset trick (see `q8_x86.rs`).
///
/// Built only by [`crate::Kernels::quantize_act`], which guarantees `qs[j] ∈ -127..=127` (never
/// −128): the AVX2 sign trick and the 16-bit pair sums of `maddubs` rely on it, so the fields
/// are private.
///
/// ```
/// use laya_kernels::{ActBlock, Kernels};
/// let x: Vec<f32> = (0..32).map(|i| i as f32 - 16.0).collect();
/// let mut q = [ActBlock::ZERO; 1];
/// Kernels::detect().quantize_act(&x, &mut q);
/// assert_eq!(q[0].qs()[0], -127); // -16 is the largest magnitude
/// assert_eq!(q[0].sum(), q[0].qs().iter().map(|&v| v as i32).sum::<i32>());
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ActBlock {
    pub(crate) d: f32,
    pub(crate) sum: i32,
    pub(crate) qs: [i8; QK],
}

// ggml-style layout checks: the SIMD tiers load `qs` as 32 contiguous bytes at offset 8.
const _: () = assert!(core::mem::size_of::<ActBlock>() == 40);
const _: () = assert!(core::mem::offset_of!(ActBlock, qs) == 8);

/// The Q8_0 weight block as stored in a GGUF file (`f16 d; i8 qs[32]`, format.md §2). Weight
/// bytes may sit at any alignment, so the kernels read them through byte offsets; this type
/// documents and checks the layout those offsets assume.
#[repr(C)]
#[allow(dead_code)]
pub(crate) struct BlockQ8_0 {
    pub d: [u8; 2],
    pub qs: [i8; QK],
}

const _: () = assert!(core::mem::offset_of!(BlockQ8_0, qs) == 2);
const _: () = assert!(crate::GgmlType::Q8_0.block_bytes() == core::mem::size_of::<BlockQ8_0>());

/// Bytes of one Q8_0 weight block.
pub(crate) const Q8_BYTES: usize = core::mem::size_of::<BlockQ8_0>();

impl ActBlock {
    /// An all-zero block (scale 0), for initialising scratch buffers.
    pub const ZERO: ActBlock = ActBlock { d: 0.0, sum: 0, qs: [0; QK] };

    /// The block scale `d` (`max|x| / 127`).
    pub fn d(&self) -> f32 {
        self.d
    }

    /// The sum of the 32 int8 values.
    pub fn sum(&self) -> i32 {
        self.sum
    }

    /// The int8 values, each in `-127..=127`.
    pub fn qs(&self) -> &[i8; QK] {
        &self.qs
    }
}

impl Default for ActBlock {
    fn default() -> Self {
        ActBlock::ZERO
    }
}

/// Scale and reciprocal of one block, shared by every tier so that the quantised values are
/// bit-identical: `d = amax / 127`, and values are `round_ties_even(x · (1/d))` (the rounding of
/// `cvtps2dq` under the default MXCSR).
#[inline(always)]
pub(crate) fn block_scale(amax: f32) -> (f32, f32) {
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    (d, id)
}

/// Scalar twin of `Kernels::quantize_act`.
pub(crate) fn quantize(x: &[f32], out: &mut [ActBlock]) {
    for (xb, ob) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let (d, id) = block_scale(amax);
        let mut sum = 0i32;
        for (q, v) in ob.qs.iter_mut().zip(xb) {
            // Finite inputs give |v·id| <= 127 (plus rounding); the clamp only matters for
            // non-finite ones and keeps the "never -128" invariant regardless.
            let r = (v * id).round_ties_even().clamp(-127.0, 127.0);
            *q = r as i8;
            sum += *q as i32;
        }
        ob.d = d;
        ob.sum = sum;
    }
}

/// Exact integer dot product of one Q8_0 weight block (34 bytes) with one activation block.
#[inline]
pub(crate) fn block_dot(w: &[u8], x: &ActBlock) -> i32 {
    let wq = &w[2..Q8_BYTES];
    wq.iter().zip(&x.qs).map(|(&w, &q)| (w as i8 as i32) * (q as i32)).sum()
}

/// Scalar twin of `Kernels::matmul_q8`:
/// `y[p, o] = Σ_b (d_w[o,b] · d_x[p,b]) · isum(o, p, b) + bias[o]`, blocks in order.
pub(crate) fn matmul(a: &MatArgs, xq: &[ActBlock], n_pos: usize, bias: Option<&[f32]>, y: &mut [f32]) {
    let (rows, nb) = (a.rows, a.cols / QK);
    for o in 0..rows {
        let row = a.row(o);
        for p in 0..n_pos {
            let xr = &xq[p * nb..][..nb];
            let mut acc = 0.0f32;
            for (b, xb) in xr.iter().enumerate() {
                let wb = &row[b * Q8_BYTES..][..Q8_BYTES];
                let dw = scalar::f16_to_f32(u16::from_le_bytes([wb[0], wb[1]]));
                acc += (dw * xb.d) * block_dot(wb, xb) as f32;
            }
            y[p * rows + o] = acc + bias.map_or(0.0, |b| b[o]);
        }
    }
}
