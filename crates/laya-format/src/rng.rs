//! The one pseudo-random generator of the workspace: splitmix64, so that test models, weight
//! initialisation and shuffling depend only on a seed, on every platform and dependency version.

/// The splitmix64 generator (Steele, Lea, Flood 2014): tiny, fast, statistically good enough for
/// initialisation, shuffling and test data (not for anything secret).
///
/// ```
/// let mut r = laya_format::rng::SplitMix64::new(7);
/// let a = r.next_u64();
/// assert_ne!(a, r.next_u64());
/// assert_eq!(a, laya_format::rng::SplitMix64::new(7).next_u64());
/// ```
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`; 0 when `n == 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in `[-scale, scale)`.
    pub fn symmetric(&mut self, scale: f32) -> f32 {
        (self.unit() * 2.0 - 1.0) * scale
    }
}
