//! Flush-to-zero for the calling thread's floating-point unit.
//!
//! Results smaller than `f32::MIN_POSITIVE` (subnormals) cost some CPUs a microcode assist of
//! a hundred cycles or more per operation; Intel's do, AMD's Zen cores mostly do not. Training
//! produces them where attention probabilities and their gradients underflow, so a trainer's
//! threads set flush-to-zero and denormals-are-zero: such values become 0, which changes
//! nothing that matters (they are below 1.2e-38) and keeps every operation at full speed.

/// Sets flush-to-zero and denormals-are-zero on the calling thread (x86-64: MXCSR bits 15
/// and 6; aarch64: FPCR.FZ). Every SSE, AVX and AVX-512 (or NEON) operation this thread runs
/// afterwards treats subnormal inputs and results as 0. No effect on other architectures.
/// Call it at the start of each thread that does heavy float work (for example as a rayon
/// pool's `start_handler`); the runtime does not use it.
///
/// ```
/// laya_kernels::flush_denormals();
/// let tiny = std::hint::black_box(f32::MIN_POSITIVE);
/// let half = std::hint::black_box(0.5f32);
/// if cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
///     assert_eq!(tiny * half, 0.0);
/// }
/// ```
pub fn flush_denormals() {
    #[cfg(target_arch = "x86_64")]
    {
        let mut csr: u32 = 0;
        // SAFETY: stmxcsr stores this thread's MXCSR into `csr`, a live local of 4 bytes.
        unsafe { std::arch::asm!("stmxcsr [{}]", in(reg) &mut csr, options(nostack, preserves_flags)) };
        csr |= (1 << 15) | (1 << 6);
        // SAFETY: ldmxcsr loads `csr`, this thread's own MXCSR with only FTZ and DAZ added (both
        // defined on every x86-64 CPU); it changes rounding of subnormals, not memory.
        unsafe { std::arch::asm!("ldmxcsr [{}]", in(reg) &csr, options(nostack, preserves_flags)) };
    }
    #[cfg(target_arch = "aarch64")]
    {
        let mut fpcr: u64;
        // SAFETY: reads this thread's FPCR into a register.
        unsafe { std::arch::asm!("mrs {}, fpcr", out(reg) fpcr, options(nomem, nostack, preserves_flags)) };
        fpcr |= 1 << 24;
        // SAFETY: writes this thread's FPCR with only FZ added; it changes rounding of
        // subnormals, not memory.
        unsafe { std::arch::asm!("msr fpcr, {}", in(reg) fpcr, options(nomem, nostack, preserves_flags)) };
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn subnormal_results_flush_on_this_thread_only() {
        let half = std::hint::black_box(0.5f32);
        let tiny = std::hint::black_box(f32::MIN_POSITIVE);
        std::thread::spawn(move || {
            assert!(tiny * half > 0.0, "a fresh thread keeps subnormals");
            super::flush_denormals();
            // Opaque again: the compiler assumes the default float environment and would reuse
            // the product computed above.
            let (tiny, half) = (std::hint::black_box(tiny), std::hint::black_box(half));
            if cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
                assert_eq!(tiny * half, 0.0);
                // Subnormal inputs count as zero too.
                let sub = std::hint::black_box(f32::from_bits(1));
                assert_eq!(sub * 2.0f32.powi(30), 0.0);
            }
        })
        .join()
        .unwrap();
    }
}
