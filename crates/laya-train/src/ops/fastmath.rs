//! Vectorisable `exp` and `tanh` and the log-sum-exp of a row, shared by the losses and layers.

/// `exp(v)` for the loss and activation loops, written so that they vectorise (libm's `expf`
/// is a scalar call per element and was ~4% of a step, `tanhf` via `expm1f` another 12%).
/// Cody–Waite reduction `v = n·ln2 + r`, |r| ≤ ln2/2, a degree-6 Taylor polynomial for `e^r`
/// (truncation < 1.2e-7 relative) and `2^n` built in the exponent bits. Inputs are clamped to
/// [−87, 88], where `e^v` is a normal f32; below that the result is ~1.6e-38 instead of a
/// smaller value or zero, which no sum of probabilities notices. Relative error ≤ 3e-7
/// (`fast_exp_and_tanh_track_f64` checks it).
#[inline(always)]
pub(crate) fn fast_exp(v: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // 1.5·2^23: adding and subtracting it rounds to the nearest integer without `round`.
    const ROUND: f32 = 12_582_912.0;
    let v = v.clamp(-87.0, 88.0);
    let n = (v * LOG2E + ROUND) - ROUND;
    let r = (v - n * LN2_HI) - n * LN2_LO;
    let p = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    p * scale
}

/// `tanh(u)` from [`fast_exp`]: `sign(u)·(1 − 2 / (e^{2|u|} + 1))`, exact to ~2e-7 absolute.
#[inline(always)]
pub(crate) fn fast_tanh(u: f32) -> f32 {
    // tanh(10) is 1 in f32, and 1 − 2/(e^20 + 1) rounds to it; the clamp keeps e^{2|u|} finite.
    let a = u.abs().min(10.0);
    let t = 1.0 - 2.0 / (fast_exp(2.0 * a) + 1.0);
    t.copysign(u)
}

/// `Σ exp(x_j + b_j − m)`, accumulated in 8 lanes so that the exponentials vectorise.
#[inline(always)]
pub(crate) fn sum_exp_shifted(x: &[f32], b: &[f32], m: f32) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (xs, bs) = (x.chunks_exact(8), b.chunks_exact(8));
    let (xr, br) = (xs.remainder(), bs.remainder());
    for (xc, bc) in xs.zip(bs) {
        for j in 0..8 {
            lanes[j] += fast_exp(xc[j] + bc[j] - m);
        }
    }
    for (&x, &b) in xr.iter().zip(br) {
        lanes[0] += fast_exp(x + b - m);
    }
    lanes.iter().sum()
}

/// Per row: `max` and `log Σ exp(z − max)`.
pub(crate) fn row_lse(z: &[f32]) -> (f32, f32) {
    let m = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    // A zero bias: the same vectorised loop as the biased rows.
    const ZEROS: [f32; 8] = [0.0; 8];
    let mut lanes = [0.0f32; 8];
    let zs = z.chunks_exact(8);
    let rest = zs.remainder();
    for zc in zs {
        lanes.iter_mut().zip(zc).for_each(|(l, &x)| *l += fast_exp(x - m));
    }
    let s = lanes.iter().sum::<f32>() + sum_exp_shifted(rest, &ZEROS[..rest.len()], m);
    (m, s.ln())
}

/// Per row: `max(x + b)` and `log Σ exp(x + b − max)`.
pub(crate) fn biased_row_lse(x: &[f32], b: &[f32]) -> (f32, f32) {
    let m = x.iter().zip(b).map(|(&x, &b)| x + b).fold(f32::NEG_INFINITY, f32::max);
    (m, sum_exp_shifted(x, b, m).ln())
}

#[cfg(test)]
mod tests {
    use super::{fast_exp, fast_tanh};

    #[test]
    fn fast_exp_and_tanh_track_f64() {
        let mut worst = (0.0f64, 0.0f64);
        let mut v = -87.0f32;
        while v <= 88.0 {
            let want = (v as f64).exp();
            worst.0 = worst.0.max(((fast_exp(v) as f64) - want).abs() / want);
            v += 0.001_3;
        }
        let mut u = -12.0f32;
        while u <= 12.0 {
            worst.1 = worst.1.max(((fast_tanh(u) as f64) - (u as f64).tanh()).abs());
            u += 0.000_37;
        }
        assert!(worst.0 <= 3e-7, "exp relative error {}", worst.0);
        assert!(worst.1 <= 2.5e-7, "tanh absolute error {}", worst.1);
        assert_eq!(fast_tanh(0.0), 0.0);
        assert_eq!(fast_tanh(-40.0), -1.0);
        assert_eq!(fast_exp(0.0), 1.0);
        assert!(fast_exp(-1000.0) < 2e-38 && fast_exp(-1000.0) >= 0.0);
    }
}
