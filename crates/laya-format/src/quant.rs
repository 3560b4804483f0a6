//! Scalar reference encoding and decoding of the tensor types (docs/format.md §2).
//!
//! Rounding follows ggml's reference quantisers (`quantize_row_*_ref`) bit for bit, including
//! computing with the reciprocal of the scale, so files quantised here and by ggml / gguf-py
//! agree. Values run along `ne[0]`; `values.len()` must be a whole number of blocks.

use half::{bf16, f16};

use crate::error::FormatError;
use crate::types::GgmlType;

const QK: usize = 32;

fn check_len(what: &str, len: usize, ty: GgmlType) -> Result<(), FormatError> {
    if !len.is_multiple_of(ty.block_size()) {
        return Err(FormatError::BadLength {
            what: what.to_string(),
            len,
            reason: format!("not a multiple of {}, the block size of {}", ty.block_size(), ty.name()),
        });
    }
    Ok(())
}

/// Encodes `values` as `ty`.
///
/// F32/F16/BF16 convert each value (round to nearest even); Q8_0, Q4_0 and Q4_1 quantise blocks
/// of 32 and refuse NaN or infinite input, which would poison a whole block's scale.
///
/// ```
/// use laya_format::{quant, GgmlType};
/// let x: Vec<f32> = (0..32).map(|i| i as f32 / 31.0).collect();
/// let q = quant::quantize(&x, GgmlType::Q8_0)?;
/// assert_eq!(q.len(), 34);
/// let y = quant::dequantize(&q, GgmlType::Q8_0, 32)?;
/// assert!(x.iter().zip(&y).all(|(a, b)| (a - b).abs() < 0.01));
/// # Ok::<(), laya_format::FormatError>(())
/// ```
pub fn quantize(values: &[f32], ty: GgmlType) -> Result<Vec<u8>, FormatError> {
    check_len("quantize input", values.len(), ty)?;
    if ty.is_quantized() {
        if let Some(index) = values.iter().position(|v| !v.is_finite()) {
            return Err(FormatError::NonFinite { name: "quantize input".into(), index });
        }
    }
    let mut out = Vec::with_capacity(values.len() / ty.block_size() * ty.block_bytes());
    match ty {
        GgmlType::F32 => values.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        GgmlType::F16 => values.iter().for_each(|v| out.extend_from_slice(&f16::from_f32(*v).to_le_bytes())),
        GgmlType::BF16 => values.iter().for_each(|v| out.extend_from_slice(&bf16::from_f32(*v).to_le_bytes())),
        GgmlType::Q8_0 => values.chunks_exact(QK).for_each(|b| q8_0_block(b, &mut out)),
        GgmlType::Q4_0 => values.chunks_exact(QK).for_each(|b| q4_0_block(b, &mut out)),
        GgmlType::Q4_1 => values.chunks_exact(QK).for_each(|b| q4_1_block(b, &mut out)),
        // Integer tables are written from integers (`laya attach-ngram`); here a value is
        // rounded and saturated.
        GgmlType::I16 => values.iter().for_each(|v| out.extend_from_slice(&(v.round() as u16).to_le_bytes())),
        GgmlType::I32 => values.iter().for_each(|v| out.extend_from_slice(&(v.round() as i32).to_le_bytes())),
    }
    Ok(out)
}

fn recip_or_zero(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

fn q8_0_block(x: &[f32], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = recip_or_zero(d);
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    // `round` rounds half away from zero, like C's roundf.
    out.extend(x.iter().map(|v| (v * id).round() as i8 as u8));
}

fn q4_0_block(x: &[f32], out: &mut Vec<u8>) {
    // The value of largest magnitude keeps its sign, so it maps exactly to -8.
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = recip_or_zero(d);
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    let q = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
    for j in 0..QK / 2 {
        out.push(q(x[j]) | (q(x[j + QK / 2]) << 4));
    }
}

fn q4_1_block(x: &[f32], out: &mut Vec<u8>) {
    let min = x.iter().fold(f32::MAX, |m, &v| m.min(v));
    let max = x.iter().fold(-f32::MAX, |m, &v| m.max(v));
    let d = (max - min) / 15.0;
    let id = recip_or_zero(d);
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    out.extend_from_slice(&f16::from_f32(min).to_le_bytes());
    let q = |v: f32| (((v - min) * id + 0.5) as i8).min(15) as u8;
    for j in 0..QK / 2 {
        out.push(q(x[j]) | (q(x[j + QK / 2]) << 4));
    }
}

/// Decodes `n` values of type `ty` from `bytes`, which must be exactly their size.
pub fn dequantize(bytes: &[u8], ty: GgmlType, n: usize) -> Result<Vec<f32>, FormatError> {
    check_len("dequantize output", n, ty)?;
    let expected =
        ty.row_bytes(n).ok_or_else(|| FormatError::BadLength { what: "dequantize output".into(), len: n, reason: "too large".into() })?;
    if bytes.len() != expected {
        return Err(FormatError::BadLength {
            what: "dequantize input".into(),
            len: bytes.len(),
            reason: format!("{n} {} values take {expected} bytes", ty.name()),
        });
    }
    let mut out = Vec::with_capacity(n);
    let half_at = |b: &[u8], i: usize| f16::from_le_bytes([b[i], b[i + 1]]).to_f32();
    match ty {
        GgmlType::F32 => out.extend(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
        GgmlType::F16 => out.extend(bytes.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())),
        GgmlType::BF16 => out.extend(bytes.chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())),
        GgmlType::I16 => out.extend(bytes.chunks_exact(2).map(|c| f32::from(u16::from_le_bytes([c[0], c[1]])))),
        GgmlType::I32 => out.extend(bytes.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32)),
        GgmlType::Q8_0 => {
            for b in bytes.chunks_exact(ty.block_bytes()) {
                let d = half_at(b, 0);
                out.extend(b[2..].iter().map(|&q| d * f32::from(q as i8)));
            }
        }
        GgmlType::Q4_0 => {
            for b in bytes.chunks_exact(ty.block_bytes()) {
                let d = half_at(b, 0);
                let qs = &b[2..];
                out.extend(qs.iter().map(|&q| d * f32::from((q & 0xF) as i8 - 8)));
                out.extend(qs.iter().map(|&q| d * f32::from((q >> 4) as i8 - 8)));
            }
        }
        GgmlType::Q4_1 => {
            for b in bytes.chunks_exact(ty.block_bytes()) {
                let (d, m) = (half_at(b, 0), half_at(b, 2));
                let qs = &b[4..];
                out.extend(qs.iter().map(|&q| d * f32::from(q & 0xF) + m));
                out.extend(qs.iter().map(|&q| d * f32::from(q >> 4) + m));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_blocks_round_trip_to_zero() {
        for ty in GgmlType::ALL {
            let q = quantize(&[0.0; 64], ty).unwrap();
            assert_eq!(dequantize(&q, ty, 64).unwrap(), vec![0.0; 64], "{ty}");
        }
    }

    #[test]
    fn constant_block_q4_1_is_exact() {
        let q = quantize(&[0.75; 32], GgmlType::Q4_1).unwrap();
        assert_eq!(dequantize(&q, GgmlType::Q4_1, 32).unwrap(), vec![0.75; 32]);
    }

    #[test]
    fn q4_0_extreme_maps_to_minus_8() {
        let mut x = vec![0.1f32; 32];
        x[5] = -2.0;
        let q = quantize(&x, GgmlType::Q4_0).unwrap();
        let y = dequantize(&q, GgmlType::Q4_0, 32).unwrap();
        assert_eq!(y[5], -2.0);
        x[5] = 2.0; // positive extreme: d is negative, the value still maps to -8·d
        let y = dequantize(&quantize(&x, GgmlType::Q4_0).unwrap(), GgmlType::Q4_0, 32).unwrap();
        assert_eq!(y[5], 2.0);
    }

    #[test]
    fn q8_0_known_bytes() {
        let mut x = vec![0.0f32; 32];
        x[0] = 127.0;
        x[1] = -63.5; // exactly half: rounds away from zero
        let q = quantize(&x, GgmlType::Q8_0).unwrap();
        assert_eq!(&q[0..2], &f16::from_f32(1.0).to_le_bytes());
        assert_eq!(q[2] as i8, 127);
        assert_eq!(q[3] as i8, -64);
    }

    #[test]
    fn errors_on_bad_lengths_and_non_finite() {
        assert!(quantize(&[1.0; 31], GgmlType::Q8_0).is_err());
        assert!(dequantize(&[0; 33], GgmlType::Q8_0, 32).is_err());
        assert!(quantize(&[f32::NAN; 32], GgmlType::Q4_0).is_err());
        assert!(quantize(&[f32::NAN; 3], GgmlType::F32).is_ok());
    }

    #[test]
    fn error_bound_per_type() {
        let x: Vec<f32> = (0..256).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
        for (ty, tol) in [
            (GgmlType::F32, 0.0),
            (GgmlType::F16, 2e-3),
            (GgmlType::BF16, 2e-2),
            (GgmlType::Q8_0, 2.0 / 127.0),
            (GgmlType::Q4_0, 2.0 / 8.0),
            (GgmlType::Q4_1, 4.0 / 15.0),
        ] {
            let y = dequantize(&quantize(&x, ty).unwrap(), ty, x.len()).unwrap();
            let err = x.iter().zip(&y).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(err <= tol, "{ty}: max error {err} > {tol}");
        }
    }
}
