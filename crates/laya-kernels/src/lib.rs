//! Compute kernels of the Laya inference runtime.
//!
//! Every kernel exists as a plain scalar reference (module `scalar`, the "twin") and as SIMD
//! tiers (AVX2+FMA+F16C, AVX-512F, NEON). The tier is chosen once with [`Kernels::detect`] and
//! the resulting [`Kernels`] value is passed around; every method dispatches on its level with a
//! single `match`.
//!
//! Weights are borrowed as raw GGUF bytes through [`Matrix`]; quantised blocks are decoded on the
//! fly, one block of 32 values at a time, into registers (or a fixed stack buffer in the scalar
//! twin). No kernel allocates.
//!
//! # Shape contract
//!
//! The runtime validates shapes once at model load, so a shape mismatch reaching a kernel is a
//! programmer error. Kernels check it with `debug_assert!` and, in every build, take sub-slices
//! with ordinary (bounds-checked) slicing before any SIMD code runs. A mismatch therefore panics
//! (or, for slices longer than needed, ignores the excess); it can never read or write out of
//! bounds. The few checks that SIMD code relies on for memory safety (the weight byte length, the
//! block multiple for quantised columns) are real `assert!`s, made once per call.
//!
//! # Example
//!
//! ```
//! use laya_kernels::{Kernels, Matrix, GgmlType};
//!
//! // A 2x3 f32 weight matrix (rows = outputs, cols = inputs), stored row-major as bytes.
//! let w: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]
//!     .iter().flat_map(|v| v.to_le_bytes()).collect();
//! let m = Matrix::new(GgmlType::F32, 2, 3, &w).unwrap();
//! let k = Kernels::detect();
//! let x = [1.0f32, 0.0, -1.0];
//! let mut y = [0.0f32; 2];
//! k.matmul(&m, &x, 1, Some(&[0.5, 0.5]), &mut y);
//! assert_eq!(y, [-1.5, -1.5]);
//! ```

#![warn(missing_docs)]

use std::fmt;

// Index loops in the tiers mirror the register tiles (acc[r][p], wv[v]); iterator chains would
// obscure them.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[allow(clippy::needless_range_loop)]
mod avx2;
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[allow(clippy::needless_range_loop)]
mod avx512;
mod denormals;
#[cfg(target_arch = "aarch64")]
#[allow(clippy::needless_range_loop)]
mod neon;
mod packed;
mod packed_entry;
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[allow(clippy::needless_range_loop)]
mod packed_x86;
mod peak;
mod q8;
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[allow(clippy::needless_range_loop)]
mod q8_x86;
mod scalar;

pub use denormals::flush_denormals;
pub use packed::{PackedQ4, PackedQ8, PACK_ROWS};
pub use peak::Peak;
pub use q8::ActBlock;

/// The storage types and their sizes are laya-format's table: one definition for the file and
/// the kernels.
pub use laya_format::{GgmlType, QK};

/// Why a [`Matrix`] could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelError {
    /// A quantised type was given a column count that is not a whole number of blocks.
    ColsNotBlockMultiple {
        /// The weight type.
        ty: GgmlType,
        /// The offending column count.
        cols: usize,
    },
    /// The byte slice does not hold exactly `rows` rows of `cols` values.
    DataLength {
        /// The weight type.
        ty: GgmlType,
        /// Rows requested.
        rows: usize,
        /// Columns requested.
        cols: usize,
        /// Bytes that shape needs.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// An integer table (I16, I32) was given as a matrix of weights.
    NotAWeightType {
        /// The table's type.
        ty: GgmlType,
    },
    /// [`PackedQ8`] was asked to repack a matrix that is not Q8_0.
    NotQ8_0 {
        /// The matrix's type.
        ty: GgmlType,
    },
    /// [`PackedQ4`] was asked to repack a matrix that is not Q4_0 or Q4_1.
    NotQ4 {
        /// The matrix's type.
        ty: GgmlType,
    },
    /// `rows * row_bytes` does not fit in `usize`.
    SizeOverflow {
        /// Rows requested.
        rows: usize,
        /// Columns requested.
        cols: usize,
    },
    /// A row to gather is not in the matrix.
    RowOutOfRange {
        /// The row asked for.
        row: usize,
        /// Rows the matrix has.
        rows: usize,
    },
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::ColsNotBlockMultiple { ty, cols } => write!(
                f,
                "{ty} weights need a column count that is a multiple of {QK}, got {cols} \
                 (re-quantise the tensor or store it as F16/F32)"
            ),
            KernelError::DataLength { ty, rows, cols, expected, actual } => write!(
                f,
                "a {rows}x{cols} {ty} matrix needs {expected} bytes but {actual} were given \
                 (the tensor data is truncated or its shape/type is wrong)"
            ),
            KernelError::NotAWeightType { ty } => write!(f, "{ty} holds integers (an n-gram table), not weights a kernel multiplies"),
            KernelError::NotQ8_0 { ty } => write!(f, "only Q8_0 matrices can be packed for the int8 kernels, this one is {ty}"),
            KernelError::NotQ4 { ty } => write!(f, "only Q4_0 and Q4_1 matrices can be packed as 4-bit, this one is {ty}"),
            KernelError::SizeOverflow { rows, cols } => {
                write!(f, "a {rows}x{cols} matrix is too large to address on this machine")
            }
            KernelError::RowOutOfRange { row, rows } => write!(f, "row {row} asked of a matrix of {rows} rows"),
        }
    }
}

impl std::error::Error for KernelError {}

/// A borrowed weight matrix: `rows` rows (outputs) of `cols` values (inputs), each row stored
/// contiguously in the GGUF encoding of `ty` (blocks run along a row).
///
/// The fields are public for convenience; the kernels re-check the byte length against the
/// shape on every call (panicking on a mismatch), so a hand-built inconsistent `Matrix` cannot
/// cause an out-of-bounds access. Prefer [`Matrix::new`], which reports the problem as an error.
#[derive(Clone, Copy, Debug)]
pub struct Matrix<'a> {
    /// Storage type.
    pub ty: GgmlType,
    /// Number of rows (output features).
    pub rows: usize,
    /// Number of columns (input features).
    pub cols: usize,
    /// Raw bytes, exactly `rows * ty.row_bytes_rounded(cols)` of them; any alignment.
    pub data: &'a [u8],
}

impl<'a> Matrix<'a> {
    /// Checks that `data` holds exactly `rows x cols` values of type `ty`.
    ///
    /// ```
    /// use laya_kernels::{Matrix, GgmlType, KernelError};
    /// let bytes = [0u8; 2 * 18];
    /// assert!(Matrix::new(GgmlType::Q4_0, 1, 64, &bytes).is_ok());
    /// assert!(matches!(Matrix::new(GgmlType::Q4_0, 1, 48, &bytes),
    ///                  Err(KernelError::ColsNotBlockMultiple { .. })));
    /// ```
    pub fn new(ty: GgmlType, rows: usize, cols: usize, data: &'a [u8]) -> Result<Self, KernelError> {
        if ty.is_integer() {
            return Err(KernelError::NotAWeightType { ty });
        }
        if !cols.is_multiple_of(ty.block_size()) {
            return Err(KernelError::ColsNotBlockMultiple { ty, cols });
        }
        let expected = cols
            .checked_mul(ty.block_bytes())
            .and_then(|b| (b / ty.block_size()).checked_mul(rows))
            .ok_or(KernelError::SizeOverflow { rows, cols })?;
        if data.len() != expected {
            return Err(KernelError::DataLength { ty, rows, cols, expected, actual: data.len() });
        }
        Ok(Matrix { ty, rows, cols, data })
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.ty.row_bytes_rounded(self.cols)
    }

    /// The bytes of row `r`. Panics if `r >= rows` or the data is too short.
    pub fn row(&self, r: usize) -> &'a [u8] {
        assert!(r < self.rows, "row {r} out of range for a matrix of {} rows", self.rows);
        let rb = self.row_bytes();
        &self.data[r * rb..(r + 1) * rb]
    }

    /// Re-validates the invariants the SIMD code relies on and returns the row stride in bytes
    /// together with the exact data slice. Panics (never UB) on an inconsistent hand-built value.
    fn checked(&self) -> (usize, &'a [u8]) {
        assert!(self.cols.is_multiple_of(self.ty.block_size()), "{} matrix with {} columns (not a multiple of {QK})", self.ty, self.cols);
        let rb = self.row_bytes();
        let len = rb.checked_mul(self.rows).expect("matrix byte size overflows usize");
        (rb, &self.data[..len])
    }
}

/// A SIMD tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Level {
    /// Portable scalar reference code.
    Scalar,
    /// x86-64 AVX2 + FMA + F16C (Haswell, Zen and later).
    Avx2,
    /// x86-64 AVX-512F (plus AVX2/FMA/F16C).
    Avx512,
    /// aarch64 Advanced SIMD.
    Neon,
}

impl Level {
    /// All levels, slowest first.
    pub const ALL: [Level; 4] = [Level::Scalar, Level::Avx2, Level::Avx512, Level::Neon];

    /// Whether the running CPU supports this level.
    pub fn is_available(self) -> bool {
        match self {
            Level::Scalar => true,
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Level::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c"),
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Level::Avx512 => Level::Avx2.is_available() && is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "aarch64")]
            Level::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Scalar => "scalar",
            Level::Avx2 => "avx2",
            Level::Avx512 => "avx512",
            Level::Neon => "neon",
        })
    }
}

/// Instruction set of the int8 kernels ([`Kernels::quantize_act`], [`Kernels::matmul_q8`]).
///
/// Chosen independently of [`Level`] because the integer dot-product extensions are separate
/// CPUID flags: many AVX-512F CPUs (Skylake-SP) lack AVX-512 VNNI, and AVX-VNNI exists on CPUs
/// without AVX-512 (Alder Lake).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Int8Isa {
    /// Portable scalar twin.
    Scalar,
    /// AVX2 `maddubs` with the sign trick.
    Avx2,
    /// AVX-VNNI: 256-bit `vpdpbusd` with the offset trick.
    AvxVnni,
    /// AVX-512 VNNI: 512-bit `vpdpbusd` with the offset trick.
    Avx512Vnni,
}

impl Int8Isa {
    /// All int8 instruction sets, slowest first.
    pub const ALL: [Int8Isa; 4] = [Int8Isa::Scalar, Int8Isa::Avx2, Int8Isa::AvxVnni, Int8Isa::Avx512Vnni];

    /// Whether the running CPU supports it (each also needs the AVX2 level; AVX-512 VNNI needs
    /// the AVX-512 level).
    pub fn is_available(self) -> bool {
        match self {
            Int8Isa::Scalar => true,
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Int8Isa::Avx2 => Level::Avx2.is_available(),
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Int8Isa::AvxVnni => Level::Avx2.is_available() && is_x86_feature_detected!("avxvnni"),
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Int8Isa::Avx512Vnni => Level::Avx512.is_available() && is_x86_feature_detected!("avx512vnni"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The float level this instruction set needs at least.
    fn min_level(self) -> Level {
        match self {
            Int8Isa::Scalar => Level::Scalar,
            Int8Isa::Avx2 | Int8Isa::AvxVnni => Level::Avx2,
            Int8Isa::Avx512Vnni => Level::Avx512,
        }
    }

    /// The best int8 set usable together with float level `l` on this CPU.
    fn best_for(l: Level) -> Int8Isa {
        let ok = |i: Int8Isa| i.is_available() && i.fits(l);
        [Int8Isa::Avx512Vnni, Int8Isa::AvxVnni, Int8Isa::Avx2].into_iter().find(|i| ok(*i)).unwrap_or(Int8Isa::Scalar)
    }

    /// Whether a `Kernels` of float level `l` may use this set (x86 sets need an x86 level at
    /// least as wide as their own).
    fn fits(self, l: Level) -> bool {
        matches!((self.min_level(), l), (Level::Scalar, _) | (Level::Avx2, Level::Avx2 | Level::Avx512) | (Level::Avx512, Level::Avx512))
    }
}

/// Parses the names [`Int8Isa`]'s `Display` prints (`scalar`, `avx2`, `avx-vnni`,
/// `avx512-vnni`).
///
/// ```
/// use laya_kernels::Int8Isa;
/// assert_eq!("avx512-vnni".parse::<Int8Isa>(), Ok(Int8Isa::Avx512Vnni));
/// assert!("sse2".parse::<Int8Isa>().is_err());
/// for i in Int8Isa::ALL {
///     assert_eq!(i.to_string().parse::<Int8Isa>(), Ok(i));
/// }
/// ```
impl std::str::FromStr for Int8Isa {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Int8Isa::ALL.into_iter().find(|i| i.to_string() == s).ok_or_else(|| {
            let names: Vec<String> = Int8Isa::ALL.iter().map(|i| i.to_string()).collect();
            format!("unknown int8 instruction set {s:?} (one of: {})", names.join(", "))
        })
    }
}

impl fmt::Display for Int8Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Int8Isa::Scalar => "scalar",
            Int8Isa::Avx2 => "avx2",
            Int8Isa::AvxVnni => "avx-vnni",
            Int8Isa::Avx512Vnni => "avx512-vnni",
        })
    }
}

/// A handle to one kernel tier. Cheap to copy; obtain it once (at model load) with
/// [`Kernels::detect`].
///
/// Invariant: a `Kernels` value only ever holds a level and an int8 set that the running CPU
/// supports (and the int8 set never needs more than the level), which is what makes the
/// dispatch to `#[target_feature]` code sound. The fields are private so the only constructors
/// are [`Kernels::detect`], [`Kernels::scalar`], [`Kernels::for_level`] and
/// [`Kernels::with_int8`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernels {
    level: Level,
    int8: Int8Isa,
}

/// Dispatches `$call` (a path in each tier module plus arguments) on `$self.level`.
macro_rules! dispatch {
    ($self:expr, $f:ident ( $($arg:expr),* )) => {
        match $self.level {
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            // SAFETY: `Kernels` is only constructed with a level the CPU supports (see the
            // struct invariant), so the target features the AVX2 code is compiled for exist.
            Level::Avx2 => unsafe { avx2::$f($($arg),*) },
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            // SAFETY: as above, AVX-512F (+AVX2/FMA/F16C) was detected at construction.
            Level::Avx512 => unsafe { avx512::$f($($arg),*) },
            #[cfg(target_arch = "aarch64")]
            // SAFETY: as above, NEON was detected at construction.
            Level::Neon => unsafe { neon::$f($($arg),*) },
            _ => scalar::$f($($arg),*),
        }
    };
}

impl Kernels {
    /// The best level the running CPU supports (AVX-512 > AVX2 > scalar on x86, NEON on
    /// aarch64). Detection costs a few CPUID reads; call it once and keep the result.
    pub fn detect() -> Kernels {
        for l in [Level::Avx512, Level::Avx2, Level::Neon] {
            if l.is_available() {
                return Kernels { level: l, int8: Int8Isa::best_for(l) };
            }
        }
        Kernels::scalar()
    }

    /// The portable scalar reference tier.
    pub fn scalar() -> Kernels {
        Kernels { level: Level::Scalar, int8: Int8Isa::Scalar }
    }

    /// The same float level with another int8 instruction set, or `None` if the CPU lacks it
    /// or it needs a wider level than this handle's (AVX-512 VNNI needs [`Level::Avx512`]).
    /// For tests and benchmarks; [`Kernels::detect`] already picks the best.
    ///
    /// ```
    /// use laya_kernels::{Int8Isa, Kernels};
    /// let k = Kernels::detect().with_int8(Int8Isa::Scalar).unwrap();
    /// assert_eq!(k.int8_isa(), Int8Isa::Scalar);
    /// assert!(Kernels::scalar().with_int8(Int8Isa::Avx512Vnni).is_none());
    /// ```
    pub fn with_int8(self, isa: Int8Isa) -> Option<Kernels> {
        (isa.is_available() && isa.fits(self.level)).then_some(Kernels { level: self.level, int8: isa })
    }

    /// The int8 instruction set this handle dispatches [`Kernels::matmul_q8`] to.
    pub fn int8_isa(&self) -> Int8Isa {
        self.int8
    }

    /// The given level, or `None` if the CPU (or this build's target architecture) lacks it.
    ///
    /// ```
    /// use laya_kernels::{Kernels, Level};
    /// assert!(Kernels::for_level(Level::Scalar).is_some());
    /// ```
    pub fn for_level(l: Level) -> Option<Kernels> {
        l.is_available().then(|| Kernels { level: l, int8: Int8Isa::best_for(l) })
    }

    /// The level this handle dispatches to.
    pub fn level(&self) -> Level {
        self.level
    }

    /// Measures this core's peak arithmetic for this handle's float level and int8 set:
    /// independent chains of FMA (`vfmadd`) and `vpdpbusd`, best of 5 runs of ~10 ms each (so
    /// about 0.1 s in all). The honest denominator of a fraction-of-peak figure on whatever CPU
    /// this runs on; on a shared or throttled machine it measures what the core gives now.
    ///
    /// ```no_run
    /// let p = laya_kernels::Kernels::detect().measure_peak();
    /// println!("f32 {:?} GFLOP/s, int8 {:?} GOP/s", p.f32_gflops, p.int8_gops);
    /// ```
    pub fn measure_peak(&self) -> Peak {
        peak::measure(self)
    }

    /// Matrix product with optional bias:
    /// `y[p*rows + o] = bias[o] + dot(W[o, :], x[p*cols .. (p+1)*cols])` for `p in 0..n_pos`.
    ///
    /// `x` is `n_pos x cols`, `y` is `n_pos x rows`, both row-major. Panics if a slice is shorter
    /// than that shape needs (see the crate-level shape contract).
    ///
    /// ```
    /// use laya_kernels::{Kernels, Matrix, GgmlType};
    /// let w: Vec<u8> = [2.0f32; 4].iter().flat_map(|v| v.to_le_bytes()).collect();
    /// let m = Matrix::new(GgmlType::F32, 2, 2, &w).unwrap();
    /// let mut y = [0.0; 4];
    /// Kernels::detect().matmul(&m, &[1.0, 1.0, 0.5, 0.0], 2, None, &mut y);
    /// assert_eq!(y, [4.0, 4.0, 1.0, 1.0]);
    /// ```
    pub fn matmul(&self, w: &Matrix, x: &[f32], n_pos: usize, bias: Option<&[f32]>, y: &mut [f32]) {
        let (rb, data) = w.checked();
        debug_assert_eq!(x.len(), n_pos * w.cols, "matmul: x is not n_pos x cols");
        debug_assert_eq!(y.len(), n_pos * w.rows, "matmul: y is not n_pos x rows");
        let x = &x[..n_pos * w.cols];
        let y = &mut y[..n_pos * w.rows];
        let bias = bias.map(|b| {
            debug_assert_eq!(b.len(), w.rows, "matmul: bias length is not rows");
            &b[..w.rows]
        });
        let a = MatArgs { ty: w.ty, rows: w.rows, cols: w.cols, rb, data };
        dispatch!(self, matmul(&a, x, n_pos, bias, y))
    }

    /// Quantises activations to int8 blocks for [`Kernels::matmul_q8`]: for each run of 32
    /// values, `d = max|x| / 127`, `qs[j] = round_half_even(x[j] / d)` (computed as
    /// `x[j] · (1/d)`), and the block sum of `qs`. A row of `cols` values (a multiple of 32)
    /// becomes `cols / 32` consecutive blocks, so `n_pos` rows quantise in one call.
    ///
    /// Every tier produces bit-identical blocks for finite inputs (the values are rounded the
    /// same way and `d` is the same scalar expression). Non-finite inputs give garbage values
    /// but keep `qs` in `-127..=127`. Panics if `x.len() != 32 · out.len()`.
    ///
    /// ```
    /// use laya_kernels::{ActBlock, Kernels};
    /// let mut x = [0.5f32; 64];
    /// x[40] = -1.0;
    /// let mut q = [ActBlock::ZERO; 2];
    /// Kernels::detect().quantize_act(&x, &mut q);
    /// assert_eq!((q[0].d(), q[0].qs()[0]), (0.5 / 127.0, 127));
    /// assert_eq!((q[1].qs()[0], q[1].qs()[8]), (64, -127)); // 0.5 / (1/127) rounds to even
    /// ```
    pub fn quantize_act(&self, x: &[f32], out: &mut [ActBlock]) {
        assert_eq!(x.len(), out.len() * QK, "quantize_act: {} values do not fill {} blocks of {QK}", x.len(), out.len());
        match self.int8 {
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Int8Isa::Avx512Vnni => {
                // SAFETY: AVX-512 VNNI implies the AVX-512 level (`fits`), detected at
                // construction (struct invariant).
                unsafe { q8_x86::quantize_avx512(x, out) }
            }
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Int8Isa::Avx2 | Int8Isa::AvxVnni => {
                // SAFETY: every x86 int8 set implies the AVX2 level (`fits`), which was
                // detected at construction (struct invariant).
                unsafe { q8_x86::quantize(x, out) }
            }
            _ => q8::quantize(x, out),
        }
    }

    /// Integer matrix product for Q8_0 weights: like [`Kernels::matmul`] with `W` a Q8_0
    /// matrix, but against activations quantised by [`Kernels::quantize_act`] (`xq` holds
    /// `n_pos` rows of `cols / 32` blocks):
    /// `y[p*rows + o] = bias[o] + Σ_b (d_w[o,b] · d_x[p,b]) · Σ_j w[o,32b+j] · q[p,32b+j]`.
    ///
    /// Each block's dot product is an exact `i32` in every tier; the f32 results differ between
    /// tiers only by summation order, bounded by `(cols/32 + 32) · 2⁻²³ · Σ_b |d_w d_x isum_b|`
    /// (the property tests check it). Against the f32 [`Kernels::matmul`] the difference is the
    /// activation rounding: at most `Σ_j |w_j| · d_x / 2` per block, plus float error.
    /// Q4_0/Q4_1 weights are accepted too (`w = d·q + m` per block, the offset entering with the
    /// activation block sum), through the scalar reference only: SIMD tiers for them read the
    /// packed layout ([`Kernels::matmul_q4_packed`]).
    /// Panics if `w` is of another type or a slice is shorter than the shape needs.
    ///
    /// ```
    /// use laya_kernels::{ActBlock, Kernels, Matrix, GgmlType};
    /// // One Q8_0 row: scale 1.0 (f16 0x3C00), values 0..32.
    /// let mut w = vec![0x00, 0x3C];
    /// w.extend((0..32).map(|i| i as u8));
    /// let m = Matrix::new(GgmlType::Q8_0, 1, 32, &w).unwrap();
    /// let k = Kernels::detect();
    /// let x = [1.0f32; 32]; // quantises exactly: d = 1/127, q = 127
    /// let mut xq = [ActBlock::ZERO; 1];
    /// k.quantize_act(&x, &mut xq);
    /// let mut y = [0.0f32; 1];
    /// k.matmul_q8(&m, &xq, 1, Some(&[0.5]), &mut y);
    /// assert!((y[0] - 496.5).abs() < 1e-3);
    /// ```
    pub fn matmul_q8(&self, w: &Matrix, xq: &[ActBlock], n_pos: usize, bias: Option<&[f32]>, y: &mut [f32]) {
        assert!(
            matches!(w.ty, GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q4_1),
            "matmul_q8 needs Q8_0, Q4_0 or Q4_1 weights, got {}",
            w.ty
        );
        let (rb, data) = w.checked();
        let nb = w.cols / QK;
        debug_assert_eq!(xq.len(), n_pos * nb, "matmul_q8: xq is not n_pos x cols/32");
        debug_assert_eq!(y.len(), n_pos * w.rows, "matmul_q8: y is not n_pos x rows");
        let xq = &xq[..n_pos * nb];
        let y = &mut y[..n_pos * w.rows];
        let bias = bias.map(|b| {
            debug_assert_eq!(b.len(), w.rows, "matmul_q8: bias length is not rows");
            &b[..w.rows]
        });
        let a = MatArgs { ty: w.ty, rows: w.rows, cols: w.cols, rb, data };
        if w.ty != GgmlType::Q8_0 {
            // 4-bit weights: only the scalar reference reads them row-major (the SIMD path for
            // them is `matmul_q4_packed`).
            return packed::matmul_q4_rows(&a, xq, n_pos, bias, y);
        }
        match self.int8 {
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            // SAFETY: AVX2 (+FMA/F16C) was detected at construction (struct invariant).
            Int8Isa::Avx2 => unsafe { q8_x86::avx2::matmul(&a, xq, n_pos, bias, y) },
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            // SAFETY: AVX-VNNI and AVX2 were detected at construction (struct invariant).
            Int8Isa::AvxVnni => unsafe { q8_x86::avxvnni::matmul(&a, xq, n_pos, bias, y) },
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            // SAFETY: AVX-512F, AVX-512 VNNI and AVX2 were detected at construction.
            Int8Isa::Avx512Vnni => unsafe { q8_x86::avx512vnni::matmul(&a, xq, n_pos, bias, y) },
            _ => q8::matmul(&a, xq, n_pos, bias, y),
        }
    }

    /// `out[..cols]` = row `r` of `w`, dequantised (an embedding lookup).
    ///
    /// ```
    /// use laya_kernels::{Kernels, Matrix, GgmlType};
    /// let w: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    /// let m = Matrix::new(GgmlType::F32, 2, 2, &w).unwrap();
    /// let mut out = [0.0; 2];
    /// Kernels::detect().dequant_row(&m, 1, &mut out);
    /// assert_eq!(out, [3.0, 4.0]);
    /// ```
    pub fn dequant_row(&self, w: &Matrix, r: usize, out: &mut [f32]) {
        debug_assert_eq!(out.len(), w.cols, "dequant_row: out length is not cols");
        let row = w.row(r);
        let _ = w.checked();
        let out = &mut out[..w.cols];
        dispatch!(self, row_op(w.ty, row, out, false))
    }

    /// `out[..cols]` += row `r` of `w`, dequantised (embedding lookup plus add).
    ///
    /// ```
    /// use laya_kernels::{Kernels, Matrix, GgmlType};
    /// let w: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    /// let m = Matrix::new(GgmlType::F32, 1, 2, &w).unwrap();
    /// let mut out = [10.0, 20.0];
    /// Kernels::detect().add_row(&m, 0, &mut out);
    /// assert_eq!(out, [11.0, 22.0]);
    /// ```
    pub fn add_row(&self, w: &Matrix, r: usize, out: &mut [f32]) {
        debug_assert_eq!(out.len(), w.cols, "add_row: out length is not cols");
        let row = w.row(r);
        let _ = w.checked();
        let out = &mut out[..w.cols];
        dispatch!(self, row_op(w.ty, row, out, true))
    }

    /// Layer normalisation of one row: `out = (x - mean) / sqrt(var + eps) * w + b`, with the
    /// biased (population) variance computed in two passes for accuracy.
    ///
    /// ```
    /// use laya_kernels::Kernels;
    /// let mut out = [0.0; 2];
    /// Kernels::detect().layer_norm(&[1.0, 3.0], &[1.0, 1.0], &[0.0, 0.0], 0.0, &mut out);
    /// assert_eq!(out, [-1.0, 1.0]);
    /// ```
    pub fn layer_norm(&self, x: &[f32], w: &[f32], b: &[f32], eps: f32, out: &mut [f32]) {
        let n = x.len();
        debug_assert!(w.len() == n && b.len() == n && out.len() == n, "layer_norm: lengths differ");
        let (w, b, out) = (&w[..n], &b[..n], &mut out[..n]);
        dispatch!(self, layer_norm(x, w, b, eps, out))
    }

    /// GELU, tanh approximation: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`, in place.
    ///
    /// The SIMD tiers evaluate it as `x / (1 + exp(-2u))` with a polynomial `exp`; they agree
    /// with the scalar twin to within `2e-6 * (1 + |x|)` absolute (the property tests check this).
    ///
    /// ```
    /// use laya_kernels::Kernels;
    /// let mut v = [0.0f32, 10.0];
    /// Kernels::detect().gelu_tanh(&mut v);
    /// assert!(v[0].abs() < 1e-7 && (v[1] - 10.0).abs() < 1e-5);
    /// ```
    pub fn gelu_tanh(&self, x: &mut [f32]) {
        dispatch!(self, gelu_tanh(x))
    }

    /// The ranking's pass over the whole lexicon: `out[i] = p[i] · max(c − share[i], 0)`, the
    /// maximum of each run of 16 outputs in `chunk_max[i / 16]` (so a top-k scan can skip every
    /// run that cannot beat its current bar), and the sum of all outputs returned. `out` and
    /// `share` need at least `p.len()` values, `chunk_max` at least `ceil(p.len() / 16)`.
    ///
    /// Every tier computes each output with the same three IEEE operations, so `out` and
    /// `chunk_max` are bit-identical across tiers; the sum differs by summation order only. A
    /// NaN in `c − share[i]` counts as 0, as in `f32::max`.
    ///
    /// ```
    /// use laya_kernels::Kernels;
    /// let (p, share) = ([0.5f32, 0.25, 0.25], [0.0f32, 0.5, 2.0]);
    /// let (mut out, mut mx) = ([0.0f32; 3], [0.0f32; 1]);
    /// let sum = Kernels::detect().score_chunks(&p, &share, 1.0, &mut out, &mut mx);
    /// assert_eq!(out, [0.5, 0.125, 0.0]);
    /// assert_eq!((mx[0], sum), (0.5, 0.625));
    /// ```
    pub fn score_chunks(&self, p: &[f32], share: &[f32], c: f32, out: &mut [f32], chunk_max: &mut [f32]) -> f32 {
        let n = p.len();
        let (share, out, chunk_max) = (&share[..n], &mut out[..n], &mut chunk_max[..n.div_ceil(16)]);
        dispatch!(self, score_chunks(p, share, c, out, chunk_max))
    }

    /// The largest value of each run of 16 of `x` into `out[i / 16]` (the last run may be
    /// shorter): what a top-k scan needs to skip every run that cannot beat its bar. `out`
    /// needs at least `ceil(x.len() / 16)` values. Every tier returns the same values for `x`
    /// without NaN (a NaN may or may not be the maximum, depending on the tier).
    ///
    /// ```
    /// use laya_kernels::Kernels;
    /// let x: Vec<f32> = (0..20).map(|i| (i % 7) as f32).collect();
    /// let mut out = [0.0f32; 2];
    /// Kernels::detect().run_max(&x, &mut out);
    /// assert_eq!(out, [6.0, 5.0]);
    /// ```
    pub fn run_max(&self, x: &[f32], out: &mut [f32]) {
        let out = &mut out[..x.len().div_ceil(16)];
        dispatch!(self, run_max(x, out))
    }

    /// `x = max(x, 0)` in place.
    ///
    /// ```
    /// use laya_kernels::Kernels;
    /// let mut v = [-1.0f32, 2.0];
    /// Kernels::detect().relu(&mut v);
    /// assert_eq!(v, [0.0, 2.0]);
    /// ```
    pub fn relu(&self, x: &mut [f32]) {
        dispatch!(self, relu(x))
    }

    /// Softmax in place, numerically stable (the maximum is subtracted before `exp`).
    ///
    /// `-inf` entries (masked positions) become exactly 0. At least one entry must be finite;
    /// otherwise the result is NaN. The SIMD tiers use a polynomial `exp` with a relative error
    /// below 3e-7 per entry.
    ///
    /// ```
    /// use laya_kernels::Kernels;
    /// let mut v = [1.0f32, 1.0, f32::NEG_INFINITY];
    /// Kernels::detect().softmax(&mut v);
    /// assert!((v[0] - 0.5).abs() < 1e-6 && v[2] == 0.0);
    /// ```
    pub fn softmax(&self, x: &mut [f32]) {
        dispatch!(self, softmax(x))
    }

    /// Multi-head self-attention without a mask, the core of one transformer block:
    /// for every query row `p < n_q` and head `h < heads` (head width `dh = d / heads`, columns
    /// `h*dh .. (h+1)*dh`), `s_j = scale * dot(q[p, head], k[j, head])` for `j < n_kv`,
    /// `a = softmax(s)`, and `out[p, head] = sum_j a_j v[j, head]`.
    ///
    /// `q` and `out` are `n_q x d`, `k` and `v` are `n_kv x d`, all row-major; `scores` is
    /// scratch of at least `n_kv` values. One call replaces `n_q * heads * (2 n_kv + 1)` calls of
    /// [`Kernels::dot`] / [`Kernels::axpy`] / [`Kernels::softmax`], and keeps the sums in
    /// registers. Panics if `heads` is 0, does not divide `d`, or a slice is too short.
    ///
    /// ```
    /// use laya_kernels::Kernels;
    /// // One query, two keys, one head of width 2: equal scores average the values.
    /// let (q, k, v) = ([1.0f32, 0.0], [1.0f32, 0.0, 1.0, 0.0], [2.0f32, 0.0, 4.0, 2.0]);
    /// let (mut s, mut out) = ([0.0f32; 2], [0.0f32; 2]);
    /// Kernels::detect().attention(&q, &k, &v, 1, 2, 2, 1, 1.0, &mut s, &mut out);
    /// assert!((out[0] - 3.0).abs() < 1e-6 && (out[1] - 1.0).abs() < 1e-6);
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &self,
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
        assert!(heads > 0 && d.is_multiple_of(heads), "attention: {heads} heads do not divide d = {d}");
        let (q, k, v) = (&q[..n_q * d], &k[..n_kv * d], &v[..n_kv * d]);
        let out = &mut out[..n_q * d];
        let scores = &mut scores[..n_kv];
        match self.level {
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Level::Avx512 if (d / heads).is_multiple_of(16) => {
                // SAFETY: AVX-512F (+AVX2/FMA/F16C) detected at construction (struct invariant).
                unsafe { avx512::attention(q, k, v, n_q, n_kv, d, heads, scale, scores, out) }
            }
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Level::Avx2 | Level::Avx512 if (d / heads).is_multiple_of(8) => {
                // SAFETY: both levels imply AVX2+FMA+F16C, detected at construction (struct
                // invariant).
                unsafe { avx2::attention(q, k, v, n_q, n_kv, d, heads, scale, scores, out) }
            }
            Level::Scalar => scalar::attention(q, k, v, n_q, n_kv, d, heads, scale, scores, out),
            _ => {
                // Other tiers and head widths: composed from this tier's own primitives.
                let dh = d / heads;
                for p in 0..n_q {
                    for h in 0..heads {
                        let c = h * dh;
                        let qv = &q[p * d + c..][..dh];
                        for (j, s) in scores.iter_mut().enumerate() {
                            *s = self.dot(qv, &k[j * d + c..][..dh]) * scale;
                        }
                        self.softmax(scores);
                        let o = &mut out[p * d + c..][..dh];
                        o.fill(0.0);
                        for (j, s) in scores.iter().enumerate() {
                            self.axpy(*s, &v[j * d + c..][..dh], o);
                        }
                    }
                }
            }
        }
    }

    /// Dot product of `a` and `b` (which must have equal length).
    ///
    /// ```
    /// use laya_kernels::Kernels;
    /// assert_eq!(Kernels::detect().dot(&[1.0, 2.0], &[3.0, 4.0]), 11.0);
    /// ```
    pub fn dot(&self, a: &[f32], b: &[f32]) -> f32 {
        debug_assert_eq!(a.len(), b.len(), "dot: lengths differ");
        let n = a.len().min(b.len());
        let (a, b) = (&a[..n], &b[..n]);
        dispatch!(self, dot(a, b))
    }

    /// `y += a * x` (equal lengths).
    ///
    /// ```
    /// use laya_kernels::Kernels;
    /// let mut y = [1.0f32, 1.0];
    /// Kernels::detect().axpy(2.0, &[1.0, 2.0], &mut y);
    /// assert_eq!(y, [3.0, 5.0]);
    /// ```
    pub fn axpy(&self, a: f32, x: &[f32], y: &mut [f32]) {
        debug_assert_eq!(x.len(), y.len(), "axpy: lengths differ");
        let n = x.len();
        let y = &mut y[..n];
        dispatch!(self, axpy(a, x, y))
    }

    /// `y += x` (equal lengths).
    ///
    /// ```
    /// use laya_kernels::Kernels;
    /// let mut y = [1.0f32, 1.0];
    /// Kernels::detect().add(&[1.0, 2.0], &mut y);
    /// assert_eq!(y, [2.0, 3.0]);
    /// ```
    pub fn add(&self, x: &[f32], y: &mut [f32]) {
        debug_assert_eq!(x.len(), y.len(), "add: lengths differ");
        let n = x.len();
        let y = &mut y[..n];
        dispatch!(self, add(x, y))
    }
}

impl Default for Kernels {
    fn default() -> Self {
        Kernels::detect()
    }
}

/// A matrix whose shape has been re-checked: `data.len() == rows * rb`, and for quantised types
/// `cols % QK == 0`. Tier code may rely on these for memory safety.
pub(crate) struct MatArgs<'a> {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub rb: usize,
    pub data: &'a [u8],
}

impl MatArgs<'_> {
    #[inline(always)]
    pub fn row(&self, o: usize) -> &[u8] {
        &self.data[o * self.rb..(o + 1) * self.rb]
    }
}
