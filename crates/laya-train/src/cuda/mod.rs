//! Launches of the trainer's own CUDA kernels (`kernels.cu`, compiled to PTX by build.rs) on
//! candle's stream: the factorised head's within-class log-softmax and its gradient, and the
//! fused AdamW updates. Everything else a training step does on a GPU is candle's own kernels.

use std::sync::{Arc, Mutex};

mod nccl;
pub use nccl::{NcclId, NcclRank};

use candle_core::cuda_backend::cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{DeviceId, WrapErr};
use candle_core::op::BackpropOp;
use candle_core::{CudaDevice, CudaStorage, Layout, Result, Shape, Storage, Tensor};

use crate::ops::WordClasses;

/// GPU `ordinal` as a candle device for training. By default cudarc creates two CUDA events
/// with every buffer (and destroys them with it) so that buffers shared between streams stay
/// ordered; a training step allocates hundreds of tensors, all used on candle's one stream, so
/// the events were only host time, and they are turned off.
pub(crate) fn open(ordinal: usize) -> Result<candle_core::Device> {
    let dev = candle_core::Device::new_cuda(ordinal)?;
    // SAFETY: turned off before any buffer exists on this device, and every kernel and copy of a
    // training run goes to the device's one stream (`get_or_load_custom_func` launches on it,
    // candle's own ops do too), so no buffer is ever used from two streams.
    unsafe { dev.as_cuda_device()?.disable_event_tracking() };
    Ok(dev)
}

/// What a GPU op's forward keeps for its backward, in `slot`; the backward takes it (a second
/// backward through the same node finds `None` and recomputes).
pub(crate) fn keep<T>(slot: &Mutex<Option<T>>, value: T) -> Result<()> {
    *slot.lock().map_err(|_| candle_core::Error::Msg("laya cuda op: lock poisoned".into()))? = Some(value);
    Ok(())
}

/// Takes what [`keep`] left in `slot`.
pub(crate) fn take<T>(slot: &Mutex<Option<T>>) -> Result<Option<T>> {
    Ok(slot.lock().map_err(|_| candle_core::Error::Msg("laya cuda op: lock poisoned".into()))?.take())
}

/// The `cpu_fwd` of an op that only a GPU runs (the CPU takes the fused op of the same math).
pub(crate) fn refuse_cpu<T>(op: &str) -> Result<T> {
    candle_core::bail!("{op} runs on a GPU; on the CPU the fused op of the same math runs instead")
}

/// The PTX of `kernels.cu`.
const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/laya_train.ptx"));
/// candle's name for the loaded module.
const MODULE: &str = "laya_train";
/// Threads per block of the elementwise AdamW kernels.
const THREADS: u32 = 256;

/// The f32 elements a contiguous `layout` covers in `s`.
fn f32_view<'a>(s: &'a CudaStorage, l: &Layout, what: &str) -> Result<candle_core::cuda_backend::cudarc::driver::CudaView<'a, f32>> {
    let (a, b) = l.contiguous_offsets().ok_or_else(|| candle_core::Error::Msg(format!("laya cuda op: {what} must be contiguous")))?;
    Ok(s.as_cuda_slice::<f32>()?.slice(a..b))
}

/// Classes as the kernels read them: `offsets` `[K + 1]` into `words` `[V]`.
type ClassTable = Arc<(CudaSlice<u32>, CudaSlice<u32>)>;

/// The copy of a [`WordClasses`] on the GPU that last used it, made on first use: the classes
/// never change during a run, and a copy per call cost two host-to-device transfers per op.
#[derive(Clone, Default)]
pub(crate) struct OnGpu(Arc<Mutex<Option<(DeviceId, ClassTable)>>>);

impl std::fmt::Debug for OnGpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnGpu")
    }
}

/// A cache: two class lists are equal whatever either has copied to a GPU.
impl PartialEq for OnGpu {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for OnGpu {}

fn class_table(dev: &CudaDevice, classes: &WordClasses) -> Result<ClassTable> {
    let mut cache = classes.on_gpu.0.lock().map_err(|_| candle_core::Error::Msg("word classes: lock poisoned".into()))?;
    if let Some((id, table)) = cache.as_ref() {
        if *id == dev.id() {
            return Ok(table.clone());
        }
    }
    let (offsets, words) = classes.members_table();
    let offsets: Vec<u32> = offsets.iter().map(|&o| o as u32).collect();
    let mut o = dev.alloc_zeros::<u32>(offsets.len())?;
    dev.memcpy_htod(&offsets, &mut o)?;
    let mut w = dev.alloc_zeros::<u32>(words.len().max(1))?;
    if !words.is_empty() {
        dev.memcpy_htod(words, &mut w)?;
    }
    let table = Arc::new((o, w));
    *cache = Some((dev.id(), table.clone()));
    Ok(table)
}

/// `u32` values copied to the device.
fn upload_u32(dev: &CudaDevice, values: &[u32]) -> Result<CudaSlice<u32>> {
    let mut d = dev.alloc_zeros::<u32>(values.len().max(1))?;
    if !values.is_empty() {
        dev.memcpy_htod(values, &mut d)?;
    }
    Ok(d)
}

/// One warp per (row, class); rows on the grid's x axis (up to 2³¹ − 1), classes on y (up to 65,535).
fn class_grid(rows: usize, classes: usize) -> Result<LaunchConfig> {
    if classes > 65_535 || rows > i32::MAX as usize {
        candle_core::bail!("class log-softmax on the GPU: {rows} rows × {classes} classes is past the grid's limits (65,535 classes)")
    }
    Ok(LaunchConfig { grid_dim: (rows.max(1) as u32, classes.max(1) as u32, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 })
}

/// `y = x − lse_{κ(w)}(x)` per row of a contiguous `[B, V]` f32 tensor.
pub(crate) fn class_log_softmax(classes: &WordClasses, s: &CudaStorage, l: &Layout) -> Result<(CudaStorage, Shape)> {
    let (b, v) = l.shape().dims2()?;
    if classes.class_of().len() != v {
        candle_core::bail!("class log-softmax: {v} logits, {} classed words", classes.class_of().len())
    }
    let dev = &s.device;
    let x = f32_view(s, l, "logits")?;
    let table = class_table(dev, classes)?;
    let (offsets, words) = (&table.0, &table.1);
    let mut y = dev.alloc_zeros::<f32>(b * v)?;
    let func = dev.get_or_load_custom_func("laya_class_log_softmax", MODULE, PTX)?;
    let mut args = func.builder();
    let v32 = v as u32;
    args.arg(&x).arg(&mut y).arg(offsets).arg(words).arg(&v32);
    if b > 0 && classes.count() > 0 {
        // SAFETY: the kernel's arguments are, in order, the `[B, V]` input, the `[B, V]` output,
        // `[K + 1]` offsets into the `[V]` word list, and V; the grid is B × K warps and each
        // reads and writes only row B's words of class K, all within those buffers.
        unsafe { args.launch(class_grid(b, classes.count())?) }.w()?;
    }
    Ok((CudaStorage::wrap_cuda_slice(y, dev.clone()), l.shape().clone()))
}

/// `dx_w = g_w − exp(y_w) · Σ_{w'∈κ(w)} g_w'` from the forward's output `y` and the gradient `g`.
pub(crate) fn class_log_softmax_grad(
    classes: &WordClasses,
    sy: &CudaStorage,
    ly: &Layout,
    sg: &CudaStorage,
    lg: &Layout,
) -> Result<(CudaStorage, Shape)> {
    let (b, v) = ly.shape().dims2()?;
    if lg.shape() != ly.shape() || classes.class_of().len() != v {
        candle_core::bail!(
            "class log-softmax grad: output {:?}, gradient {:?}, {} classed words",
            ly.shape(),
            lg.shape(),
            classes.class_of().len()
        )
    }
    let dev = &sy.device;
    let (y, g) = (f32_view(sy, ly, "output")?, f32_view(sg, lg, "gradient")?);
    let table = class_table(dev, classes)?;
    let (offsets, words) = (&table.0, &table.1);
    let mut dx = dev.alloc_zeros::<f32>(b * v)?;
    let func = dev.get_or_load_custom_func("laya_class_log_softmax_grad", MODULE, PTX)?;
    let mut args = func.builder();
    let v32 = v as u32;
    args.arg(&y).arg(&g).arg(&mut dx).arg(offsets).arg(words).arg(&v32);
    if b > 0 && classes.count() > 0 {
        // SAFETY: as in `class_log_softmax`, with `y`, `g` and `dx` all `[B, V]`.
        unsafe { args.launch(class_grid(b, classes.count())?) }.w()?;
    }
    Ok((CudaStorage::wrap_cuda_slice(dx, dev.clone()), ly.shape().clone()))
}

/// `[B, K]` class sums `T_c = Σ_{w∈c} t_w` of a contiguous `[B, V]` f32 tensor.
pub(crate) fn class_sums(classes: &WordClasses, s: &CudaStorage, l: &Layout) -> Result<(CudaStorage, Shape)> {
    let (b, v) = l.shape().dims2()?;
    let k = classes.count();
    if classes.class_of().len() != v {
        candle_core::bail!("class sums: {v} columns, {} classed words", classes.class_of().len())
    }
    let dev = &s.device;
    let t = f32_view(s, l, "targets")?;
    let table = class_table(dev, classes)?;
    let mut out = dev.alloc_zeros::<f32>((b * k).max(1))?;
    let func = dev.get_or_load_custom_func("laya_class_sums", MODULE, PTX)?;
    let mut args = func.builder();
    let (v32, k32) = (v as u32, k as u32);
    args.arg(&t).arg(&mut out).arg(&table.0).arg(&table.1).arg(&v32).arg(&k32);
    if b > 0 && k > 0 {
        // SAFETY: `t` is `[B, V]`, `out` `[B, K]`, the table as in `class_log_softmax`; warp
        // (row, class) reads row `row`'s words of the class and writes `out[row, class]` once.
        unsafe { args.launch(class_grid(b, k)?) }.w()?;
    }
    Ok((CudaStorage::wrap_cuda_slice(out, dev.clone()), Shape::from((b, k))))
}

/// A `shape` tensor of zeros on `dev` with `values[i]` at flat position `at[i]` (positions
/// distinct and in range; checked): a batch's soft word targets from their few non-zero entries.
pub(crate) fn scatter(dev: &CudaDevice, shape: Shape, at: &[u32], values: &[f32]) -> Result<Tensor> {
    let len = shape.elem_count();
    if at.len() != values.len() || at.iter().any(|&i| i as usize >= len) {
        candle_core::bail!("scatter: {} positions and {} values into {len}", at.len(), values.len())
    }
    let mut out = dev.alloc_zeros::<f32>(len.max(1))?;
    if !at.is_empty() {
        let idx = upload_u32(dev, at)?;
        let mut val = dev.alloc_zeros::<f32>(values.len())?;
        dev.memcpy_htod(values, &mut val)?;
        let func = dev.get_or_load_custom_func("laya_scatter", MODULE, PTX)?;
        let mut args = func.builder();
        let n = at.len() as u64;
        args.arg(&mut out).arg(&idx).arg(&val).arg(&n);
        // SAFETY: every position is below the output's length (checked above); `idx` and `val`
        // hold `n` values each.
        unsafe { args.launch(elementwise(at.len())) }.w()?;
    }
    let storage = Storage::Cuda(CudaStorage::wrap_cuda_slice(out, dev.clone()));
    Ok(Tensor::from_storage(storage, shape, BackpropOp::none(), false))
}

/// `[order.len()` → `segments` rows, d]`: row `s` of the result is the sum of rows
/// `order[seg[s]..seg[s + 1]]` of `g` `[N, d]` (`seg` ascending from 0 to `order.len()`,
/// every `order` entry below N; checked).
pub(crate) fn segment_sums(g: &Tensor, order: &[u32], seg: &[u32]) -> Result<Tensor> {
    let (n, d) = g.dims2()?;
    let segments = seg.len().saturating_sub(1);
    let ok = seg.first() == Some(&0)
        && seg.last().is_some_and(|&e| e as usize == order.len())
        && seg.windows(2).all(|w| w[0] <= w[1])
        && order.iter().all(|&i| (i as usize) < n);
    if !ok {
        candle_core::bail!("segment sums: malformed segments for {n} rows")
    }
    let g = g.contiguous()?;
    let (storage, layout) = g.storage_and_layout();
    let Storage::Cuda(cs) = &*storage else { candle_core::bail!("segment sums: the gradient is not on a GPU") };
    let dev = cs.device.clone();
    let src = f32_view(cs, layout, "gradient")?;
    let mut out = dev.alloc_zeros::<f32>((segments * d).max(1))?;
    if segments > 0 && d > 0 {
        let (o, s) = (upload_u32(&dev, order)?, upload_u32(&dev, seg)?);
        let func = dev.get_or_load_custom_func("laya_segment_sums", MODULE, PTX)?;
        let mut args = func.builder();
        let d32 = d as u32;
        args.arg(&src).arg(&mut out).arg(&o).arg(&s).arg(&d32);
        let cfg = LaunchConfig { grid_dim: (segments as u32, 1, 1), block_dim: (d.min(256) as u32, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: block `s` reads rows `order[seg[s]..seg[s + 1]]` of the `[N, d]` gradient (all
        // below N, checked) and writes row `s` of the `[segments, d]` output.
        unsafe { args.launch(cfg) }.w()?;
    }
    drop(storage);
    let storage = Storage::Cuda(CudaStorage::wrap_cuda_slice(out, dev));
    Ok(Tensor::from_storage(storage, (segments, d), BackpropOp::none(), false))
}

/// The targets of a batch's rows as the within-class kernels read them, built on the host (see
/// `crate::ops::listed`): `u32s` = `pair_ptr [B + 1] | pair_class [P] | pair_row [P] | nz_ptr
/// [B + 1] | nz_word [N]`, `f32s` = `pair_mass [P] | nz_val [N]`.
pub(crate) struct ListedTargets {
    pub rows: usize,
    pub pairs: usize,
    pub entries: usize,
    pub u32s: Vec<u32>,
    pub f32s: Vec<f32>,
}

/// [`ListedTargets`] on the device.
pub(crate) struct ListedOnGpu {
    u32s: CudaSlice<u32>,
    f32s: CudaSlice<f32>,
}

impl ListedTargets {
    pub fn upload(&self, dev: &CudaDevice) -> Result<ListedOnGpu> {
        let mut f32s = dev.alloc_zeros::<f32>(self.f32s.len().max(1))?;
        if !self.f32s.is_empty() {
            dev.memcpy_htod(&self.f32s, &mut f32s)?;
        }
        Ok(ListedOnGpu { u32s: upload_u32(dev, &self.u32s)?, f32s })
    }
}

/// The per-row losses `[B]` and per-pair log-normalisers `[P]` of the within-class loss.
pub(crate) fn within_class_ce(
    classes: &WordClasses,
    listed: &ListedTargets,
    on_gpu: &ListedOnGpu,
    (sx, lx): (&CudaStorage, &Layout),
    (sb, lb): (&CudaStorage, &Layout),
) -> Result<(CudaSlice<f32>, CudaSlice<f32>)> {
    let (rows, v) = lx.shape().dims2()?;
    if rows != listed.rows || lb.shape().dims1()? != v || classes.class_of().len() != v {
        candle_core::bail!("within-class cross-entropy: logits {:?}, bias {:?}, {} target rows", lx.shape(), lb.shape(), listed.rows)
    }
    let dev = &sx.device;
    let (x, b) = (f32_view(sx, lx, "logits")?, f32_view(sb, lb, "bias")?);
    let table = class_table(dev, classes)?;
    let (r, p, n) = (listed.rows, listed.pairs, listed.entries);
    let u = &on_gpu.u32s;
    let (pair_ptr, pair_class) = (u.slice(0..r + 1), u.slice(r + 1..r + 1 + p));
    let (nz_ptr, nz_word) = (u.slice(r + 1 + 2 * p..2 * r + 2 + 2 * p), u.slice(2 * r + 2 + 2 * p..2 * r + 2 + 2 * p + n));
    let (pair_mass, nz_val) = (on_gpu.f32s.slice(0..p), on_gpu.f32s.slice(p..p + n));
    let mut lse = dev.alloc_zeros::<f32>(p.max(1))?;
    let mut loss = dev.alloc_zeros::<f32>(rows.max(1))?;
    let func = dev.get_or_load_custom_func("laya_within_class_ce", MODULE, PTX)?;
    let mut args = func.builder();
    let v32 = v as u32;
    args.arg(&x).arg(&b).arg(&table.0).arg(&table.1).arg(&pair_ptr).arg(&pair_class).arg(&pair_mass);
    args.arg(&nz_ptr).arg(&nz_word).arg(&nz_val).arg(&mut lse).arg(&mut loss).arg(&v32);
    if rows > 0 {
        // SAFETY: `listed` was built for these rows and classes (`crate::ops::listed` checks the
        // words and classes against V and K): warp `r` reads the pairs and entries of row `r`
        // within their buffers, the words of its pairs' classes in row `r` of `x` and in `b`, and
        // writes `lse` at its pairs and `loss[r]`.
        unsafe { args.launch(LaunchConfig { grid_dim: (rows as u32, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 }) }.w()?;
    }
    Ok((loss, lse))
}

/// The logits gradient `[B, V]` of the within-class loss, given the forward's `lse` and the
/// upstream gradient per row `scale` `[B]`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn within_class_ce_grad(
    classes: &WordClasses,
    listed: &ListedTargets,
    on_gpu: &ListedOnGpu,
    lse: &CudaSlice<f32>,
    (sx, lx): (&CudaStorage, &Layout),
    (sb, lb): (&CudaStorage, &Layout),
    (st, lt): (&CudaStorage, &Layout),
    scale: &Tensor,
) -> Result<(CudaStorage, Shape)> {
    let (rows, v) = lx.shape().dims2()?;
    if rows != listed.rows || lt.shape() != lx.shape() || scale.dims1()? != rows {
        candle_core::bail!(
            "within-class cross-entropy grad: logits {:?}, targets {:?}, {} target rows",
            lx.shape(),
            lt.shape(),
            listed.rows
        )
    }
    let dev = &sx.device;
    let (x, b, t) = (f32_view(sx, lx, "logits")?, f32_view(sb, lb, "bias")?, f32_view(st, lt, "targets")?);
    let (scale_storage, scale_layout) = scale.storage_and_layout();
    let Storage::Cuda(ss) = &*scale_storage else { candle_core::bail!("within-class cross-entropy grad: gradient not on the GPU") };
    let sc = f32_view(ss, scale_layout, "gradient")?;
    let table = class_table(dev, classes)?;
    let (r, p) = (listed.rows, listed.pairs);
    let u = &on_gpu.u32s;
    let (pair_class, pair_row) = (u.slice(r + 1..r + 1 + p), u.slice(r + 1 + p..r + 1 + 2 * p));
    let pair_mass = on_gpu.f32s.slice(0..p);
    let mut dx = dev.alloc_zeros::<f32>((rows * v).max(1))?;
    let func = dev.get_or_load_custom_func("laya_within_class_ce_grad", MODULE, PTX)?;
    let mut args = func.builder();
    let v32 = v as u32;
    args.arg(&x).arg(&b).arg(&t).arg(&table.0).arg(&table.1).arg(&pair_row).arg(&pair_class).arg(&pair_mass);
    args.arg(lse).arg(&sc).arg(&mut dx).arg(&v32);
    if p > 0 {
        // SAFETY: as in `within_class_ce`: warp `p` writes the words of pair `p`'s class in row
        // `pair_row[p]` (< B) of the `[B, V]` output, reading the same places of `x` and `t`.
        unsafe { args.launch(LaunchConfig { grid_dim: (p as u32, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 }) }.w()?;
    }
    Ok((CudaStorage::wrap_cuda_slice(dx, dev.clone()), lx.shape().clone()))
}

/// Sums over the rows of a contiguous `[R, C]` tensor: `[C]`, in passes of the same kernel:
/// chunks of [`COLUMN_CHUNK`] rows side by side, then chunks of those partial sums, until one row
/// is left. Every pass keeps the GPU busy (one block summing thousands of partial rows took up to
/// 90 µs); the order of the additions is fixed, so a run repeats to the byte.
pub(crate) fn column_sums(s: &CudaStorage, l: &Layout) -> Result<(CudaStorage, Shape)> {
    let (rows, cols) = l.shape().dims2()?;
    let dev = &s.device;
    let x = f32_view(s, l, "input")?;
    let chunks = rows.div_ceil(COLUMN_CHUNK).max(1);
    if chunks > 65_535 || cols > u32::MAX as usize || rows > u32::MAX as usize {
        candle_core::bail!("column sums: {rows} × {cols} is past the grid's limits")
    }
    let func = dev.get_or_load_custom_func("laya_column_sums", MODULE, PTX)?;
    let grid = |chunks: usize| column_grid(cols, chunks);
    let (c32, k32) = (cols as u32, COLUMN_CHUNK as u32);
    let mut part = dev.alloc_zeros::<f32>((chunks * cols).max(1))?;
    if cols > 0 && rows > 0 {
        let r32 = rows as u32;
        let mut args = func.builder();
        args.arg(&x).arg(&mut part).arg(&r32).arg(&c32).arg(&k32);
        // SAFETY: thread (j < cols, chunk c) reads rows c·chunk .. of column j of the `[rows,
        // cols]` input and writes `part[c, j]` of the `[chunks, cols]` buffer.
        unsafe { args.launch(grid(chunks)) }.w()?;
        let mut n = chunks;
        while n > 1 {
            let m = n.div_ceil(COLUMN_CHUNK);
            let mut next = dev.alloc_zeros::<f32>(m * cols)?;
            let n32 = n as u32;
            let mut args = func.builder();
            args.arg(&part).arg(&mut next).arg(&n32).arg(&c32).arg(&k32);
            // SAFETY: the same kernel over the `[n, cols]` partial sums: thread (j, chunk c)
            // reads rows c·chunk .. of column j of them and writes `next[c, j]` of `[m, cols]`.
            unsafe { args.launch(grid(m)) }.w()?;
            part = next;
            n = m;
        }
    }
    Ok((CudaStorage::wrap_cuda_slice(part, dev.clone()), Shape::from(cols)))
}

/// Rows per chunk of each of [`column_sums`]'s passes.
pub(crate) const COLUMN_CHUNK: usize = 64;

/// A thread per column, a chunk of rows per block row: the column kernels' grid.
fn column_grid(cols: usize, chunks: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (cols.div_ceil(THREADS as usize).max(1) as u32, chunks as u32, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The backward of `x·w + b` over the rows of `[R, F]` tensors, from the output's gradient `g`:
/// `g·w` `[R, F]`, then per chunk of [`COLUMN_CHUNK`] rows the partial sums of `g·x` and of `g`
/// (`[C, F]` each, `C` chunks), packed in that order into one `[R·F + 2·C·F]` buffer.
/// [`column_sums`] of each partial block finishes `∂w` and `∂b` with the additions, in the
/// order, of [`column_sums`] over the rows of `g·x` and `g`.
pub(crate) fn column_affine_grad((sg, lg): Arg<'_>, (sx, lx): Arg<'_>, (sw, lw): Arg<'_>) -> Result<(CudaStorage, Shape)> {
    let (rows, cols) = lg.shape().dims2()?;
    if lx.shape() != lg.shape() || lw.shape().dims1()? != cols {
        candle_core::bail!("column affine gradient: gradient {:?}, input {:?}, scale {:?}", lg.shape(), lx.shape(), lw.shape())
    }
    let chunks = rows.div_ceil(COLUMN_CHUNK).max(1);
    if chunks > 65_535 || rows > u32::MAX as usize || cols > u32::MAX as usize {
        candle_core::bail!("column affine gradient: {rows} × {cols} is past the grid's limits")
    }
    let dev = &sg.device;
    let (g, x, w) = (f32_view(sg, lg, "gradient")?, f32_view(sx, lx, "input")?, f32_view(sw, lw, "scale")?);
    let n = rows * cols + 2 * chunks * cols;
    let mut out = dev.alloc_zeros::<f32>(n.max(1))?;
    if rows > 0 && cols > 0 {
        let (mut gx, mut rest) = out.split_at_mut(rows * cols);
        let (mut part_w, mut part_b) = rest.split_at_mut(chunks * cols);
        let func = dev.get_or_load_custom_func("laya_column_affine_grad", MODULE, PTX)?;
        let (r32, c32, k32) = (rows as u32, cols as u32, COLUMN_CHUNK as u32);
        let mut args = func.builder();
        args.arg(&g).arg(&x).arg(&w).arg(&mut gx).arg(&mut part_w).arg(&mut part_b).arg(&r32).arg(&c32).arg(&k32);
        // SAFETY: thread (j < cols, chunk c) reads rows c·chunk .. of column j of `g` and `x`
        // (`[rows, cols]`, checked above) and `w[j]`, writes the same elements of `gx` and
        // element `[c, j]` of the two `[chunks, cols]` blocks.
        unsafe { args.launch(column_grid(cols, chunks)) }.w()?;
    }
    Ok((CudaStorage::wrap_cuda_slice(out, dev.clone()), Shape::from(n)))
}

/// A storage and its layout, as the custom ops receive them.
pub(crate) type Arg<'a> = (&'a CudaStorage, &'a Layout);

/// Eight warps a block, one row each: the layer kernels' rows are short.
fn row_grid(rows: usize) -> LaunchConfig {
    LaunchConfig { grid_dim: (rows.div_ceil(8).max(1) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
}

/// `(rows, row length)` of a contiguous tensor over its last dimension, checked to fit `u32`.
fn rows_of(l: &Layout) -> Result<(usize, usize)> {
    let n = l.shape().dims().last().copied().unwrap_or(1).max(1);
    let rows = l.shape().elem_count() / n;
    if rows > u32::MAX as usize || n > u32::MAX as usize {
        candle_core::bail!("row kernel: {:?} is past 2³² rows or columns", l.shape())
    }
    Ok((rows, n))
}

/// Launches the warp-per-row kernel `name` on `inputs` (all of `like`'s shape) into a new output.
fn row_kernel(name: &str, inputs: &[Arg<'_>], extra: Option<f32>) -> Result<(CudaStorage, Shape)> {
    let (s0, l0) = inputs[0];
    if inputs.iter().any(|(_, l)| l.shape() != l0.shape()) {
        candle_core::bail!("{name}: inputs of different shapes")
    }
    let (rows, n) = rows_of(l0)?;
    let dev = &s0.device;
    let views = inputs.iter().map(|(s, l)| f32_view(s, l, name)).collect::<Result<Vec<_>>>()?;
    let mut out = dev.alloc_zeros::<f32>((rows * n).max(1))?;
    let func = dev.get_or_load_custom_func(name, MODULE, PTX)?;
    let mut args = func.builder();
    for v in &views {
        args.arg(v);
    }
    let (r32, n32) = (rows as u32, n as u32);
    args.arg(&mut out).arg(&r32).arg(&n32);
    if let Some(e) = &extra {
        args.arg(e);
    }
    if rows > 0 {
        // SAFETY: every input and the output hold `rows · n` f32 values (same shape, checked);
        // warp `r < rows` reads and writes row `r` only.
        unsafe { args.launch(row_grid(rows)) }.w()?;
    }
    Ok((CudaStorage::wrap_cuda_slice(out, dev.clone()), l0.shape().clone()))
}

/// Each row of `x` to zero mean and unit (biased) variance.
pub(crate) fn normalize_rows(x: Arg<'_>, eps: f32) -> Result<(CudaStorage, Shape)> {
    row_kernel("laya_normalize_rows", &[x], Some(eps))
}

/// `dx = inv · (g − mean(g) − y · mean(g·y))` per row.
pub(crate) fn normalize_rows_grad(x: Arg<'_>, y: Arg<'_>, g: Arg<'_>, eps: f32) -> Result<(CudaStorage, Shape)> {
    row_kernel("laya_normalize_rows_grad", &[x, y, g], Some(eps))
}

/// Softmax over the last dimension.
pub(crate) fn softmax_rows(x: Arg<'_>) -> Result<(CudaStorage, Shape)> {
    row_kernel("laya_softmax_rows", &[x], None)
}

/// `dx = y · (g − Σ g·y)` per row.
pub(crate) fn softmax_rows_grad(y: Arg<'_>, g: Arg<'_>) -> Result<(CudaStorage, Shape)> {
    row_kernel("laya_softmax_rows_grad", &[y, g], None)
}

/// Launches the elementwise kernel `name` on `inputs` (all of the first's shape) into a new output.
fn elementwise_kernel(name: &str, inputs: &[Arg<'_>]) -> Result<(CudaStorage, Shape)> {
    let (s0, l0) = inputs[0];
    if inputs.iter().any(|(_, l)| l.shape() != l0.shape()) {
        candle_core::bail!("{name}: inputs of different shapes")
    }
    let n = l0.shape().elem_count();
    let dev = &s0.device;
    let views = inputs.iter().map(|(s, l)| f32_view(s, l, name)).collect::<Result<Vec<_>>>()?;
    let mut out = dev.alloc_zeros::<f32>(n.max(1))?;
    let func = dev.get_or_load_custom_func(name, MODULE, PTX)?;
    let mut args = func.builder();
    for v in &views {
        args.arg(v);
    }
    let n64 = n as u64;
    args.arg(&mut out).arg(&n64);
    if n > 0 {
        // SAFETY: every input and the output hold `n` f32 values (same shape, checked).
        unsafe { args.launch(elementwise(n)) }.w()?;
    }
    Ok((CudaStorage::wrap_cuda_slice(out, dev.clone()), l0.shape().clone()))
}

/// `gelu_tanh` elementwise.
pub(crate) fn gelu(x: Arg<'_>) -> Result<(CudaStorage, Shape)> {
    elementwise_kernel("laya_gelu", &[x])
}

/// The gradient of `gelu_tanh` from its input, output and the upstream gradient.
pub(crate) fn gelu_grad(x: Arg<'_>, y: Arg<'_>, g: Arg<'_>) -> Result<(CudaStorage, Shape)> {
    elementwise_kernel("laya_gelu_grad", &[x, y, g])
}

/// `x·w + b` (with `w`) or `x + b` for `x` `[N, F]` and `w`, `b` `[F]`.
pub(crate) fn column_affine((sx, lx): Arg<'_>, w: Option<Arg<'_>>, (sb, lb): Arg<'_>) -> Result<(CudaStorage, Shape)> {
    let (_, cols) = lx.shape().dims2()?;
    if lb.shape().dims1()? != cols || w.is_some_and(|(_, lw)| lw.shape().dims1().ok() != Some(cols)) {
        candle_core::bail!("column affine: input {:?}, parameter {:?}", lx.shape(), lb.shape())
    }
    let n = lx.shape().elem_count();
    let dev = &sx.device;
    let (x, b) = (f32_view(sx, lx, "input")?, f32_view(sb, lb, "shift")?);
    // Without a scale the kernel never reads `w`; the shift stands in for the pointer.
    let wv = match w {
        Some((sw, lw)) => f32_view(sw, lw, "scale")?,
        None => f32_view(sb, lb, "shift")?,
    };
    let mut out = dev.alloc_zeros::<f32>(n.max(1))?;
    let func = dev.get_or_load_custom_func("laya_column_affine", MODULE, PTX)?;
    let mut args = func.builder();
    let (n64, c32, scaled) = (n as u64, cols as u32, i32::from(w.is_some()));
    args.arg(&x).arg(&wv).arg(&b).arg(&mut out).arg(&n64).arg(&c32).arg(&scaled);
    if n > 0 {
        // SAFETY: `x` and the output hold `n = N·F` values, `w` and `b` `F` (checked above);
        // element `i` reads column `i % F` of them.
        unsafe { args.launch(elementwise(n)) }.w()?;
    }
    Ok((CudaStorage::wrap_cuda_slice(out, dev.clone()), lx.shape().clone()))
}

/// The soft cross-entropy of each row of `x + b` against `t` (`x`, `t` `[B, V]`, `b` `[V]`):
/// the losses `[B]` and each row's log-normaliser `[B]`.
pub(crate) fn soft_ce(x: Arg<'_>, b: Arg<'_>, t: Arg<'_>) -> Result<(CudaSlice<f32>, CudaSlice<f32>)> {
    let (rows, v) = x.1.shape().dims2()?;
    if b.1.shape().dims1()? != v || t.1.shape() != x.1.shape() || rows > i32::MAX as usize {
        candle_core::bail!("soft cross-entropy: logits {:?}, bias {:?}, targets {:?}", x.1.shape(), b.1.shape(), t.1.shape())
    }
    let dev = &x.0.device;
    let (xv, bv, tv) = (f32_view(x.0, x.1, "logits")?, f32_view(b.0, b.1, "bias")?, f32_view(t.0, t.1, "targets")?);
    let (mut loss, mut shift) = (dev.alloc_zeros::<f32>(rows.max(1))?, dev.alloc_zeros::<f32>(rows.max(1))?);
    let func = dev.get_or_load_custom_func("laya_soft_ce", MODULE, PTX)?;
    let mut args = func.builder();
    let v32 = v as u32;
    args.arg(&xv).arg(&bv).arg(&tv).arg(&mut loss).arg(&mut shift).arg(&v32);
    if rows > 0 {
        // SAFETY: block `r < rows` reads row `r` of `x` and `t` (`[rows, V]`) and `b` `[V]`, and
        // writes `loss[r]` and `shift[r]`.
        unsafe { args.launch(LaunchConfig { grid_dim: (rows as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }) }.w()?;
    }
    Ok((loss, shift))
}

/// The gradient `[B, V]` of [`soft_ce`] in `x`, from its log-normalisers and the upstream
/// gradient per row `scale`.
pub(crate) fn soft_ce_grad(x: Arg<'_>, b: Arg<'_>, t: Arg<'_>, shift: &CudaSlice<f32>, scale: &Tensor) -> Result<(CudaStorage, Shape)> {
    let (rows, v) = x.1.shape().dims2()?;
    if b.1.shape().dims1()? != v || t.1.shape() != x.1.shape() || scale.dims1()? != rows || shift.len() < rows {
        candle_core::bail!("soft cross-entropy grad: logits {:?}, bias {:?}, targets {:?}", x.1.shape(), b.1.shape(), t.1.shape())
    }
    let dev = &x.0.device;
    let (xv, bv, tv) = (f32_view(x.0, x.1, "logits")?, f32_view(b.0, b.1, "bias")?, f32_view(t.0, t.1, "targets")?);
    let (scale_storage, scale_layout) = scale.storage_and_layout();
    let Storage::Cuda(ss) = &*scale_storage else { candle_core::bail!("soft cross-entropy grad: gradient not on the GPU") };
    let sc = f32_view(ss, scale_layout, "gradient")?;
    let mut dx = dev.alloc_zeros::<f32>((rows * v).max(1))?;
    let func = dev.get_or_load_custom_func("laya_soft_ce_grad", MODULE, PTX)?;
    let mut args = func.builder();
    let v32 = v as u32;
    args.arg(&xv).arg(&bv).arg(&tv).arg(shift).arg(&sc).arg(&mut dx).arg(&v32);
    if rows > 0 {
        // SAFETY: block `r < rows` reads row `r` of `x` and `t`, `b`, `shift[r]` and `scale[r]`,
        // and writes row `r` of the `[rows, V]` output.
        unsafe { args.launch(LaunchConfig { grid_dim: (rows as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }) }.w()?;
    }
    Ok((CudaStorage::wrap_cuda_slice(dx, dev.clone()), x.1.shape().clone()))
}

/// AdamW's hyper-parameters of one update, as the kernels take them (see `crate::optim`).
#[derive(Clone, Copy)]
pub(crate) struct AdamHyper {
    pub lr: f32,
    pub b1: f32,
    pub b2: f32,
    pub eps: f32,
    pub decay: f32,
    pub bc1: f32,
    pub bc2_sqrt: f32,
    pub scale: f32,
}

fn elementwise(n: usize) -> LaunchConfig {
    // Grid-stride loops: enough blocks to fill an H200 several times over, no more.
    let blocks = n.div_ceil(THREADS as usize).clamp(1, 8192) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 }
}

/// Moments of one parameter on the GPU.
#[derive(Debug, Clone)]
pub(crate) struct DeviceMoments {
    pub m: CudaSlice<f32>,
    pub v: CudaSlice<f32>,
}

impl DeviceMoments {
    /// Zero moments, or `init` when given (a restored checkpoint), of `n` values each.
    pub fn new(dev: &CudaDevice, n: usize, init: Option<(&[f32], &[f32])>) -> Result<Self> {
        let (mut m, mut v) = (dev.alloc_zeros::<f32>(n.max(1))?, dev.alloc_zeros::<f32>(n.max(1))?);
        if let Some((hm, hv)) = init {
            if hm.len() != n || hv.len() != n {
                candle_core::bail!("adamw: {} and {} moments for a parameter of {n} values", hm.len(), hv.len())
            }
            if n > 0 {
                dev.memcpy_htod(hm, &mut m)?;
                dev.memcpy_htod(hv, &mut v)?;
            }
        }
        Ok(DeviceMoments { m, v })
    }

    /// Both moments copied to the host, `n` values each.
    pub fn to_host(&self, dev: &CudaDevice, n: usize) -> Result<(Vec<f32>, Vec<f32>)> {
        let (mut m, mut v) = (dev.clone_dtoh(&self.m)?, dev.clone_dtoh(&self.v)?);
        m.truncate(n);
        v.truncate(n);
        Ok((m, v))
    }
}

/// The dense AdamW update of the contiguous parameter `w` with gradient `g`.
pub(crate) fn adamw_dense(
    w: &mut CudaStorage,
    lw: &Layout,
    g: &CudaStorage,
    lg: &Layout,
    mv: &mut DeviceMoments,
    h: AdamHyper,
) -> Result<()> {
    let n = lw.shape().elem_count();
    let (a, b) = lw.contiguous_offsets().ok_or_else(|| candle_core::Error::Msg("adamw: parameter is not contiguous".into()))?;
    let g = f32_view(g, lg, "gradient")?;
    if g.len() != n || mv.m.len() < n || mv.v.len() < n {
        candle_core::bail!("adamw: gradient of {} values for a parameter of {n}", g.len())
    }
    let dev = w.device.clone();
    let mut wv = w.as_cuda_slice_mut::<f32>()?.slice_mut(a..b);
    let func = dev.get_or_load_custom_func("laya_adamw_dense", MODULE, PTX)?;
    let mut args = func.builder();
    let n64 = n as u64;
    args.arg(&mut wv).arg(&g).arg(&mut mv.m).arg(&mut mv.v).arg(&n64);
    args.arg(&h.lr).arg(&h.b1).arg(&h.b2).arg(&h.eps).arg(&h.decay).arg(&h.bc1).arg(&h.bc2_sqrt).arg(&h.scale);
    if n > 0 {
        // SAFETY: `w`, `g`, `m` and `v` each hold at least `n` f32 values (checked above); the
        // kernel touches elements `0..n` of each.
        unsafe { args.launch(elementwise(n)) }.w()?;
    }
    Ok(())
}

/// The lazy AdamW update of rows `rows` (distinct) of the `[R, d]` table `w`, with gradient
/// `g` `[rows.len(), d]`.
pub(crate) fn adamw_rows(
    w: &mut CudaStorage,
    lw: &Layout,
    rows: &[u32],
    (g, lg): (&CudaStorage, &Layout),
    mv: &mut DeviceMoments,
    h: AdamHyper,
) -> Result<()> {
    let (_, d) = lg.shape().dims2()?;
    let (a, b) = lw.contiguous_offsets().ok_or_else(|| candle_core::Error::Msg("adamw: embedding table is not contiguous".into()))?;
    let table_rows = (b - a) / d.max(1);
    if let Some(&r) = rows.iter().find(|&&r| r as usize >= table_rows) {
        candle_core::bail!("adamw: embedding row {r} out of range ({table_rows} rows)")
    }
    let g = f32_view(g, lg, "embedding gradient")?;
    let n = rows.len() * d;
    if g.len() != n || mv.m.len() < b - a {
        candle_core::bail!("adamw: {} gradient values for {} rows of {d}", g.len(), rows.len())
    }
    if n == 0 {
        return Ok(());
    }
    let dev = w.device.clone();
    let mut idx = dev.alloc_zeros::<u32>(rows.len())?;
    dev.memcpy_htod(rows, &mut idx)?;
    let mut wv = w.as_cuda_slice_mut::<f32>()?.slice_mut(a..b);
    let func = dev.get_or_load_custom_func("laya_adamw_rows", MODULE, PTX)?;
    let mut args = func.builder();
    let (n64, d32) = (n as u64, d as u32);
    args.arg(&mut wv).arg(&g).arg(&mut mv.m).arg(&mut mv.v).arg(&idx).arg(&n64).arg(&d32);
    args.arg(&h.lr).arg(&h.b1).arg(&h.b2).arg(&h.eps).arg(&h.decay).arg(&h.bc1).arg(&h.bc2_sqrt).arg(&h.scale);
    // SAFETY: every row index is below the table's row count (checked above), so element
    // `rows[i / d]·d + i % d` of `w`, `m` and `v` is in range for every `i < n`, and `g` holds `n`.
    unsafe { args.launch(elementwise(n)) }.w()?;
    Ok(())
}
