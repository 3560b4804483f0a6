//! The int8 entry points of [`Kernels`] for packed weights: whether this handle packs a type,
//! the packed kernels, and their arithmetic on row-major bytes (a layer before its copy is made,
//! a factorised head's class where the file holds it).

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
use crate::packed_x86;
use crate::{packed, q8, ActBlock, GgmlType, Int8Isa, Kernels, MatArgs, Matrix, PackedQ4, PackedQ8, QK};

impl Kernels {
    /// Whether [`Kernels::matmul_q8_packed`] has a SIMD tier on this handle's int8 set
    /// (AVX-512 VNNI, AVX-VNNI, AVX2). Where it does, a runtime should repack its Q8_0 matrices
    /// ([`PackedQ8::new`]) at load and multiply them with `matmul_q8_packed`, which beats both
    /// the row-major int8 kernel and the f32 path for every shape measured (`kernel_bench`);
    /// elsewhere [`Kernels::matmul_q8`] on the file's bytes is the faster choice (the packed
    /// scalar twin exists for the tests).
    ///
    /// ```
    /// use laya_kernels::Kernels;
    /// assert!(!Kernels::scalar().packs_q8());
    /// ```
    pub fn packs_q8(&self) -> bool {
        matches!(self.int8, Int8Isa::Avx2 | Int8Isa::AvxVnni | Int8Isa::Avx512Vnni)
    }

    /// [`Kernels::matmul_q8`] on a [`PackedQ8`] matrix: the same formula, with every block's
    /// integer dot product exact and the f32 results differing from `matmul_q8`'s only by
    /// summation order (the scalar twins of the two agree bit for bit). Panics if a slice is
    /// shorter than the shape needs. Example at [`PackedQ8`].
    pub fn matmul_q8_packed(&self, w: &PackedQ8, xq: &[ActBlock], n_pos: usize, bias: Option<&[f32]>, y: &mut [f32]) {
        let nb = w.cols() / QK;
        debug_assert_eq!(xq.len(), n_pos * nb, "matmul_q8_packed: xq is not n_pos x cols/32");
        debug_assert_eq!(y.len(), n_pos * w.rows(), "matmul_q8_packed: y is not n_pos x rows");
        let xq = &xq[..n_pos * nb];
        let y = &mut y[..n_pos * w.rows()];
        let bias = bias.map(|b| {
            debug_assert_eq!(b.len(), w.rows(), "matmul_q8_packed: bias length is not rows");
            &b[..w.rows()]
        });
        match self.int8 {
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            // SAFETY: AVX-VNNI and AVX2 were detected at construction (struct invariant).
            Int8Isa::AvxVnni => unsafe { packed_x86::avxvnni::matmul(w, xq, n_pos, bias, y) },
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            // SAFETY: AVX-512F, AVX-512 VNNI and AVX2 were detected at construction.
            Int8Isa::Avx512Vnni => unsafe { packed_x86::avx512vnni::matmul(w, xq, n_pos, bias, y) },
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            // SAFETY: AVX2, FMA and F16C were detected at construction.
            Int8Isa::Avx2 => unsafe { packed_x86::avx2::matmul(w, xq, n_pos, bias, y) },
            _ => packed::matmul(w, xq, n_pos, bias, y),
        }
    }

    /// [`Kernels::matmul_q8_packed`]'s result, bit for bit, computed from the row-major Q8_0
    /// matrix `w` itself: what a runtime multiplies with while `w`'s packed copy is still being
    /// made, so that predictions do not wait for packing and do not change when it is done.
    /// Slower than the packed kernel (a reduction per block), far cheaper than packing first.
    /// Where this handle does not pack ([`Kernels::packs_q8`] false) it is the scalar
    /// row-major kernel, which equals the packed scalar twin. Panics if `w` is not Q8_0 or a
    /// slice is shorter than the shape needs.
    ///
    /// ```
    /// use laya_kernels::{ActBlock, Kernels, Matrix, PackedQ8, GgmlType};
    /// let mut w = Vec::new();
    /// for r in 0..20u8 {
    ///     w.extend([0x00, 0x3C]); // scale 1.0
    ///     w.extend((0..32).map(|i| (i * 7 + r) % 19));
    /// }
    /// let m = Matrix::new(GgmlType::Q8_0, 20, 32, &w).unwrap();
    /// let k = Kernels::detect();
    /// let mut xq = [ActBlock::ZERO; 1];
    /// k.quantize_act(&[0.3; 32], &mut xq);
    /// let (mut a, mut b) = ([0.0f32; 20], [0.0f32; 20]);
    /// k.matmul_q8_packed(&PackedQ8::new(&m).unwrap(), &xq, 1, None, &mut a);
    /// k.matmul_q8_packed_rows(&m, &xq, 1, None, &mut b);
    /// assert_eq!(a.map(f32::to_bits), b.map(f32::to_bits));
    /// ```
    pub fn matmul_q8_packed_rows(&self, w: &Matrix, xq: &[ActBlock], n_pos: usize, bias: Option<&[f32]>, y: &mut [f32]) {
        assert!(w.ty == GgmlType::Q8_0, "matmul_q8_packed_rows needs Q8_0 weights, got {}", w.ty);
        let (rb, data) = w.checked();
        let nb = w.cols / QK;
        let xq = &xq[..n_pos * nb];
        let y = &mut y[..n_pos * w.rows];
        let bias = bias.map(|b| &b[..w.rows]);
        let a = MatArgs { ty: w.ty, rows: w.rows, cols: w.cols, rb, data };
        match self.int8 {
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            // SAFETY: AVX-512F, AVX-512 VNNI and AVX2 were detected at construction.
            Int8Isa::Avx512Vnni => unsafe { packed_x86::avx512vnni_rows::matmul(&a, xq, n_pos, bias, y) },
            Int8Isa::Avx2 | Int8Isa::AvxVnni => packed::matmul_rows_fused(&a, xq, n_pos, bias, y),
            _ => q8::matmul(&a, xq, n_pos, bias, y),
        }
    }

    /// [`Kernels::matmul_q8_packed_rows`] of one position on rows `ids` of `w`, in that order,
    /// as a matrix of `ids.len()` rows: what [`PackedQ8::gather`] would pack, multiplied where
    /// the file holds it (a factorised head's class the first time it is needed). Gives the
    /// packed kernel's bits on the gathered copy. Panics if an id is out of range or a slice is
    /// shorter than the shape needs.
    ///
    /// ```
    /// use laya_kernels::{ActBlock, Kernels, Matrix, PackedQ8, GgmlType};
    /// let mut w = Vec::new();
    /// for r in 0..20u8 {
    ///     w.extend([0x00, 0x3C]); // scale 1.0
    ///     w.extend((0..32).map(|i| (i * 7 + r) % 19));
    /// }
    /// let m = Matrix::new(GgmlType::Q8_0, 20, 32, &w).unwrap();
    /// let k = Kernels::detect();
    /// let mut xq = [ActBlock::ZERO; 1];
    /// k.quantize_act(&[0.3; 32], &mut xq);
    /// let ids = [17, 2, 9];
    /// let (mut a, mut b) = ([0.0f32; 3], [0.0f32; 3]);
    /// k.matmul_q8_packed(&PackedQ8::gather(&m, &ids).unwrap(), &xq, 1, None, &mut a);
    /// k.matmul_q8_gathered_rows(&m, &ids, &xq, None, &mut b);
    /// assert_eq!(a.map(f32::to_bits), b.map(f32::to_bits));
    /// ```
    pub fn matmul_q8_gathered_rows(&self, w: &Matrix, ids: &[u32], xq: &[ActBlock], bias: Option<&[f32]>, y: &mut [f32]) {
        assert!(w.ty == GgmlType::Q8_0, "matmul_q8_gathered_rows needs Q8_0 weights, got {}", w.ty);
        let (rb, data) = w.checked();
        let (xq, y) = (&xq[..w.cols / QK], &mut y[..ids.len()]);
        let bias = bias.map(|b| &b[..ids.len()]);
        match self.int8 {
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            // SAFETY: AVX-512F, AVX-512 VNNI and AVX2 were detected at construction.
            Int8Isa::Avx512Vnni if data.len() <= i32::MAX as usize => unsafe {
                packed_x86::avx512vnni_rows::matmul_gathered(&MatArgs { ty: w.ty, rows: w.rows, cols: w.cols, rb, data }, ids, xq, bias, y)
            },
            _ => self.matmul_q8_gathered_rows_naive(w, ids, xq, bias, y),
        }
    }

    /// The naive twin of [`Kernels::matmul_q8_gathered_rows`]: each row alone through
    /// [`Kernels::matmul_q8_packed_rows`].
    pub fn matmul_q8_gathered_rows_naive(&self, w: &Matrix, ids: &[u32], xq: &[ActBlock], bias: Option<&[f32]>, y: &mut [f32]) {
        for (j, &id) in ids.iter().enumerate() {
            let row = Matrix { rows: 1, data: w.row(id as usize), ..*w };
            self.matmul_q8_packed_rows(&row, xq, 1, bias.map(|b| &b[j..=j]), &mut y[j..=j]);
        }
    }

    /// Whether [`Kernels::matmul_q4_packed`] has a SIMD tier on this handle (every x86 int8
    /// set: AVX2, AVX-VNNI, AVX-512 VNNI); a runtime should pack its Q4_0/Q4_1 linear layers
    /// ([`PackedQ4::new`]) only then.
    pub fn packs_q4(&self) -> bool {
        matches!(self.int8, Int8Isa::Avx2 | Int8Isa::AvxVnni | Int8Isa::Avx512Vnni)
    }

    /// [`Kernels::matmul_q8`] on Q4_0/Q4_1 weights packed as [`PackedQ4`]: exact integer block
    /// dot products, f32 results equal to the scalar reference's up to summation order (the
    /// scalar twins agree bit for bit). Runs the scalar twin where [`Kernels::packs_q4`] is
    /// false. Panics if a slice is shorter than the shape needs. Example at [`PackedQ4`].
    pub fn matmul_q4_packed(&self, w: &PackedQ4, xq: &[ActBlock], n_pos: usize, bias: Option<&[f32]>, y: &mut [f32]) {
        let nb = w.cols() / QK;
        debug_assert_eq!(xq.len(), n_pos * nb, "matmul_q4_packed: xq is not n_pos x cols/32");
        debug_assert_eq!(y.len(), n_pos * w.rows(), "matmul_q4_packed: y is not n_pos x rows");
        let xq = &xq[..n_pos * nb];
        let y = &mut y[..n_pos * w.rows()];
        let bias = bias.map(|b| &b[..w.rows()]);
        match self.int8 {
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            // SAFETY: AVX-512F, AVX-512 VNNI and AVX2 were detected at construction.
            Int8Isa::Avx512Vnni => unsafe { packed_x86::avx512vnni_q4::matmul(w, xq, n_pos, bias, y) },
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            // SAFETY: AVX-VNNI and AVX2 were detected at construction (struct invariant).
            Int8Isa::AvxVnni => unsafe { packed_x86::avxvnni_q4::matmul(w, xq, n_pos, bias, y) },
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            // SAFETY: AVX2 (+FMA/F16C) was detected at construction (struct invariant).
            Int8Isa::Avx2 => unsafe { packed_x86::avx2_q4::matmul(w, xq, n_pos, bias, y) },
            _ => packed::matmul_q4(w, xq, n_pos, bias, y),
        }
    }
}
