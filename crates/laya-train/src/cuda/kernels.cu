// The trainer's own CUDA kernels (feature `cuda`): the factorised head's within-class
// log-softmax and its gradient, and the fused AdamW updates. build.rs compiles this file to PTX
// with nvcc; src/cuda/mod.rs launches it on candle's CUDA stream. Every other training op on a
// GPU is a composition of candle's kernels (src/ops/composed.rs).

#include <math_constants.h>

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// y_w = x_w - lse_{class(w)}(x) for every word of class blockIdx.y in row blockIdx.x. One warp
// per (row, class): a class holds one to a few hundred words, scattered over the row, listed in
// words[offsets[c] .. offsets[c + 1]].
extern "C" __global__ void laya_class_log_softmax(const float* x, float* y, const unsigned int* offsets,
                                                  const unsigned int* words, unsigned int v) {
    const unsigned int c = blockIdx.y;
    const size_t base = (size_t)blockIdx.x * v;
    const unsigned int lo = offsets[c], hi = offsets[c + 1];
    float m = -CUDART_INF_F;
    for (unsigned int i = lo + threadIdx.x; i < hi; i += 32) m = fmaxf(m, x[base + words[i]]);
    m = warp_max(m);
    float s = 0.0f;
    for (unsigned int i = lo + threadIdx.x; i < hi; i += 32) s += expf(x[base + words[i]] - m);
    const float lse = m + logf(warp_sum(s));
    for (unsigned int i = lo + threadIdx.x; i < hi; i += 32) {
        const size_t at = base + words[i];
        y[at] = x[at] - lse;
    }
}

// dx_w = g_w - exp(y_w) * sum_{w' in class(w)} g_w', from the forward's output y.
extern "C" __global__ void laya_class_log_softmax_grad(const float* y, const float* g, float* dx,
                                                       const unsigned int* offsets, const unsigned int* words,
                                                       unsigned int v) {
    const unsigned int c = blockIdx.y;
    const size_t base = (size_t)blockIdx.x * v;
    const unsigned int lo = offsets[c], hi = offsets[c + 1];
    float s = 0.0f;
    for (unsigned int i = lo + threadIdx.x; i < hi; i += 32) s += g[base + words[i]];
    s = warp_sum(s);
    for (unsigned int i = lo + threadIdx.x; i < hi; i += 32) {
        const size_t at = base + words[i];
        dx[at] = g[at] - expf(y[at]) * s;
    }
}

// One AdamW update of w, m, v at element i; the same arithmetic as optim.rs's Hyper::update.
__device__ __forceinline__ void adamw(float* w, float g, float* m, float* v, float lr, float b1, float b2,
                                      float eps, float decay, float bc1, float bc2_sqrt, float scale) {
    g *= scale;
    const float mi = b1 * *m + (1.0f - b1) * g;
    const float vi = b2 * *v + (1.0f - b2) * g * g;
    *m = mi;
    *v = vi;
    const float step = lr * (mi / bc1) / (sqrtf(vi) / bc2_sqrt + eps);
    *w = *w * decay - step;
}

extern "C" __global__ void laya_adamw_dense(float* w, const float* g, float* m, float* v, unsigned long long n,
                                            float lr, float b1, float b2, float eps, float decay, float bc1,
                                            float bc2_sqrt, float scale) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x) {
        adamw(&w[i], g[i], &m[i], &v[i], lr, b1, b2, eps, decay, bc1, bc2_sqrt, scale);
    }
}

// The lazy update of the embedding table: only rows[r] (distinct, checked in range by the
// caller), with gradient row r of g [nrows, d].
extern "C" __global__ void laya_adamw_rows(float* w, const float* g, float* m, float* v, const unsigned int* rows,
                                           unsigned long long n, unsigned int d, float lr, float b1, float b2,
                                           float eps, float decay, float bc1, float bc2_sqrt, float scale) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x) {
        const size_t at = (size_t)rows[i / d] * d + i % d;
        adamw(&w[at], g[i], &m[at], &v[at], lr, b1, b2, eps, decay, bc1, bc2_sqrt, scale);
    }
}

// out[row, c] = sum of t[row, w] over the words w of class c: one warp per (row, class) as in
// laya_class_log_softmax (candle's index_add walks the V ids serially per output column).
extern "C" __global__ void laya_class_sums(const float* t, float* out, const unsigned int* offsets,
                                           const unsigned int* words, unsigned int v, unsigned int k) {
    const unsigned int c = blockIdx.y;
    const size_t base = (size_t)blockIdx.x * v;
    const unsigned int lo = offsets[c], hi = offsets[c + 1];
    float s = 0.0f;
    for (unsigned int i = lo + threadIdx.x; i < hi; i += 32) s += t[base + words[i]];
    s = warp_sum(s);
    if (threadIdx.x == 0) out[(size_t)blockIdx.x * k + c] = s;
}

// out[at[i]] = val[i] for i < n (distinct positions), into a zeroed buffer: a batch's soft word
// targets, a handful per row of [B, V].
extern "C" __global__ void laya_scatter(float* out, const unsigned int* at, const float* val, unsigned long long n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x) {
        out[at[i]] = val[i];
    }
}

// out[s, :] = sum of g[order[e], :] for e in seg[s] .. seg[s + 1]: the gradient of each distinct
// embedding row from the rows a batch gathered, summed in a fixed order (runs repeat exactly).
// One block per distinct row, its threads across the d columns.
extern "C" __global__ void laya_segment_sums(const float* g, float* out, const unsigned int* order,
                                             const unsigned int* seg, unsigned int d) {
    const unsigned int s = blockIdx.x;
    const unsigned int lo = seg[s], hi = seg[s + 1];
    for (unsigned int j = threadIdx.x; j < d; j += blockDim.x) {
        float acc = 0.0f;
        for (unsigned int e = lo; e < hi; ++e) acc += g[(size_t)order[e] * d + j];
        out[(size_t)s * d + j] = acc;
    }
}

// The within-class part of the factorised word loss for the rows' few target classes, the
// word head's bias added on the fly. One warp per row r: for each of its (class c, mass T_c)
// pairs p in pair_ptr[r] .. pair_ptr[r + 1], lse_c(x_r + b) over the class's words (kept in
// lse[p] for the backward); then loss[r] = sum_p T_c lse_c - sum over the row's non-zero
// targets (nz_ptr[r] .. nz_ptr[r + 1]: word, value) of t_w (x_w + b_w).
extern "C" __global__ void laya_within_class_ce(const float* x, const float* b, const unsigned int* offsets,
                                                const unsigned int* words, const unsigned int* pair_ptr,
                                                const unsigned int* pair_class, const float* pair_mass,
                                                const unsigned int* nz_ptr, const unsigned int* nz_word,
                                                const float* nz_val, float* lse_out, float* loss, unsigned int v) {
    const unsigned int r = blockIdx.x;
    const size_t base = (size_t)r * v;
    float total = 0.0f;
    for (unsigned int p = pair_ptr[r]; p < pair_ptr[r + 1]; ++p) {
        const unsigned int c = pair_class[p];
        const unsigned int lo = offsets[c], hi = offsets[c + 1];
        float m = -CUDART_INF_F;
        for (unsigned int i = lo + threadIdx.x; i < hi; i += 32) m = fmaxf(m, x[base + words[i]] + b[words[i]]);
        m = warp_max(m);
        float s = 0.0f;
        for (unsigned int i = lo + threadIdx.x; i < hi; i += 32) s += expf(x[base + words[i]] + b[words[i]] - m);
        const float lse = m + logf(warp_sum(s));
        if (threadIdx.x == 0) lse_out[p] = lse;
        total += pair_mass[p] * lse;
    }
    float s = 0.0f;
    for (unsigned int k = nz_ptr[r] + threadIdx.x; k < nz_ptr[r + 1]; k += 32) s += nz_val[k] * (x[base + nz_word[k]] + b[nz_word[k]]);
    s = warp_sum(s);
    if (threadIdx.x == 0) loss[r] = total - s;
}

// Its gradient in the logits, into a zeroed [B, V]: for the words w of pair p's class (one warp
// per pair), dx[r, w] = (T_c softmax_c(x_r + b)_w - t[r, w]) scale[r].
extern "C" __global__ void laya_within_class_ce_grad(const float* x, const float* b, const float* t,
                                                     const unsigned int* offsets, const unsigned int* words,
                                                     const unsigned int* pair_row, const unsigned int* pair_class,
                                                     const float* pair_mass, const float* lse, const float* scale,
                                                     float* dx, unsigned int v) {
    const unsigned int p = blockIdx.x;
    const unsigned int r = pair_row[p], c = pair_class[p];
    const size_t base = (size_t)r * v;
    const float tc = pair_mass[p], l = lse[p], s = scale[r];
    for (unsigned int i = offsets[c] + threadIdx.x; i < offsets[c + 1]; i += 32) {
        const size_t at = base + words[i];
        dx[at] = (tc * expf(x[at] + b[words[i]] - l) - t[at]) * s;
    }
}

// part[c, j] = sum of x[row, j] over the rows of chunk c (rows c*chunk .. (c+1)*chunk), rows in
// order: one thread per column, so a row's reads are coalesced across threads, and chunks of rows
// on the grid's y axis so that a tall, narrow [rows, d] has work for the whole GPU. Further passes
// of the same kernel sum the partial rows the same way until one is left: the result does not
// depend on timing.
extern "C" __global__ void laya_column_sums(const float* x, float* part, unsigned int rows, unsigned int cols,
                                            unsigned int chunk) {
    const unsigned int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    const size_t lo = (size_t)blockIdx.y * chunk;
    const size_t hi = min((size_t)rows, lo + chunk);
    float acc = 0.0f;
    for (size_t r = lo; r < hi; ++r) acc += x[r * cols + j];
    part[(size_t)blockIdx.y * cols + j] = acc;
}

// The backward of y = x*w + b (columns scaled and shifted): gx = g*w, and per chunk of rows the
// partial sums of g*x (for dw) and of g (for db) as laya_column_sums's first pass would make them
// from the products: the products are rounded before they are added (__fmul_rn, no fused
// multiply-add), so dw and db are the same bits as summing a separate product. One read of g and x.
extern "C" __global__ void laya_column_affine_grad(const float* g, const float* x, const float* w, float* gx,
                                                   float* part_w, float* part_b, unsigned int rows,
                                                   unsigned int cols, unsigned int chunk) {
    const unsigned int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    const size_t lo = (size_t)blockIdx.y * chunk;
    const size_t hi = min((size_t)rows, lo + chunk);
    const float wj = w[j];
    float aw = 0.0f, ab = 0.0f;
    for (size_t r = lo; r < hi; ++r) {
        const float gr = g[r * cols + j];
        gx[r * cols + j] = __fmul_rn(gr, wj);
        aw += __fmul_rn(gr, x[r * cols + j]);
        ab += gr;
    }
    part_w[(size_t)blockIdx.y * cols + j] = aw;
    part_b[(size_t)blockIdx.y * cols + j] = ab;
}

// Row kernels of the layers (the same arithmetic as src/ops/layers.rs): one warp per row, eight
// rows a block; rows are short (d_model, FFN width, or a softmax over at most L(T-1)+1 keys).
#define ROW_OF_WARP() (blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32)
#define LANE() (threadIdx.x % 32)

extern "C" __global__ void laya_normalize_rows(const float* x, float* y, unsigned int rows, unsigned int d, float eps) {
    const unsigned int r = ROW_OF_WARP();
    if (r >= rows) return;
    const float* xr = x + (size_t)r * d;
    float s = 0.0f;
    for (unsigned int j = LANE(); j < d; j += 32) s += xr[j];
    const float mean = warp_sum(s) / d;
    float q = 0.0f;
    for (unsigned int j = LANE(); j < d; j += 32) q += (xr[j] - mean) * (xr[j] - mean);
    const float inv = 1.0f / sqrtf(warp_sum(q) / d + eps);
    for (unsigned int j = LANE(); j < d; j += 32) y[(size_t)r * d + j] = (xr[j] - mean) * inv;
}

// dx = inv (g - mean(g) - y mean(g y)) per row.
extern "C" __global__ void laya_normalize_rows_grad(const float* x, const float* y, const float* g, float* dx,
                                                    unsigned int rows, unsigned int d, float eps) {
    const unsigned int r = ROW_OF_WARP();
    if (r >= rows) return;
    const size_t base = (size_t)r * d;
    float s = 0.0f;
    for (unsigned int j = LANE(); j < d; j += 32) s += x[base + j];
    const float mean = warp_sum(s) / d;
    float q = 0.0f, gs = 0.0f, gy = 0.0f;
    for (unsigned int j = LANE(); j < d; j += 32) {
        q += (x[base + j] - mean) * (x[base + j] - mean);
        gs += g[base + j];
        gy += g[base + j] * y[base + j];
    }
    const float inv = 1.0f / sqrtf(warp_sum(q) / d + eps);
    const float gm = warp_sum(gs) / d, gym = warp_sum(gy) / d;
    for (unsigned int j = LANE(); j < d; j += 32) dx[base + j] = inv * (g[base + j] - gm - y[base + j] * gym);
}

extern "C" __global__ void laya_softmax_rows(const float* x, float* y, unsigned int rows, unsigned int n) {
    const unsigned int r = ROW_OF_WARP();
    if (r >= rows) return;
    const size_t base = (size_t)r * n;
    float m = -CUDART_INF_F;
    for (unsigned int j = LANE(); j < n; j += 32) m = fmaxf(m, x[base + j]);
    m = warp_max(m);
    float s = 0.0f;
    for (unsigned int j = LANE(); j < n; j += 32) s += expf(x[base + j] - m);
    const float inv = 1.0f / warp_sum(s);
    for (unsigned int j = LANE(); j < n; j += 32) y[base + j] = expf(x[base + j] - m) * inv;
}

// dx = y (g - sum g y) per row.
extern "C" __global__ void laya_softmax_rows_grad(const float* y, const float* g, float* dx, unsigned int rows, unsigned int n) {
    const unsigned int r = ROW_OF_WARP();
    if (r >= rows) return;
    const size_t base = (size_t)r * n;
    float dot = 0.0f;
    for (unsigned int j = LANE(); j < n; j += 32) dot += y[base + j] * g[base + j];
    dot = warp_sum(dot);
    for (unsigned int j = LANE(); j < n; j += 32) dx[base + j] = y[base + j] * (g[base + j] - dot);
}

#define SQRT_2_OVER_PI 0.7978846f

extern "C" __global__ void laya_gelu(const float* x, float* y, unsigned long long n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x) {
        const float v = x[i];
        y[i] = 0.5f * v * (1.0f + tanhf(SQRT_2_OVER_PI * (v + 0.044715f * v * v * v)));
    }
}

// The backward from the output, as on the CPU: t = tanh(..) recovered as 2y/x - 1.
extern "C" __global__ void laya_gelu_grad(const float* x, const float* y, const float* g, float* dx, unsigned long long n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x) {
        const float v = x[i];
        const float t = fabsf(v) > 1e-4f ? fminf(fmaxf(2.0f * y[i] / v - 1.0f, -1.0f), 1.0f) : tanhf(SQRT_2_OVER_PI * v);
        const float du = SQRT_2_OVER_PI * (1.0f + 3.0f * 0.044715f * v * v);
        dx[i] = g[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
    }
}

// y[i, j] = x[i, j] w[j] + b[j] (scaled) or x[i, j] + b[j].
extern "C" __global__ void laya_column_affine(const float* x, const float* w, const float* b, float* y,
                                              unsigned long long n, unsigned int cols, int scaled) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x) {
        const unsigned int j = i % cols;
        y[i] = scaled ? x[i] * w[j] + b[j] : x[i] + b[j];
    }
}

// Reductions over a block of 256 threads (8 warps); every thread gets the result.
__device__ __forceinline__ float block_reduce(float v, bool is_max) {
    __shared__ float part[8];
    __shared__ float result;
    v = is_max ? warp_max(v) : warp_sum(v);
    if (LANE() == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        float w = threadIdx.x < 8 ? part[threadIdx.x] : (is_max ? -CUDART_INF_F : 0.0f);
        w = is_max ? warp_max(w) : warp_sum(w);
        if (threadIdx.x == 0) result = w;
    }
    __syncthreads();
    const float r = result;
    __syncthreads();
    return r;
}

// The dense soft cross-entropy of one row per block (256 threads): shift[r] = lse(x_r + b) and
// loss[r] = -sum_j t_j (x_j + b_j - shift[r]).
extern "C" __global__ void laya_soft_ce(const float* x, const float* b, const float* t, float* loss, float* shift,
                                        unsigned int v) {
    const size_t base = (size_t)blockIdx.x * v;
    float m = -CUDART_INF_F;
    for (unsigned int j = threadIdx.x; j < v; j += blockDim.x) m = fmaxf(m, x[base + j] + b[j]);
    m = block_reduce(m, true);
    float s = 0.0f, tz = 0.0f, tsum = 0.0f;
    for (unsigned int j = threadIdx.x; j < v; j += blockDim.x) {
        const float z = x[base + j] + b[j];
        s += expf(z - m);
        const float tj = t[base + j];
        if (tj != 0.0f) {
            tz += tj * z;
            tsum += tj;
        }
    }
    const float sh = m + logf(block_reduce(s, false));
    tz = block_reduce(tz, false);
    tsum = block_reduce(tsum, false);
    if (threadIdx.x == 0) {
        shift[blockIdx.x] = sh;
        loss[blockIdx.x] = tsum * sh - tz;
    }
}

// Its gradient in x: dx = (exp(x + b - shift) sum(t) - t) scale[r].
extern "C" __global__ void laya_soft_ce_grad(const float* x, const float* b, const float* t, const float* shift,
                                             const float* scale, float* dx, unsigned int v) {
    const size_t base = (size_t)blockIdx.x * v;
    float tsum = 0.0f;
    for (unsigned int j = threadIdx.x; j < v; j += blockDim.x) tsum += t[base + j];
    tsum = block_reduce(tsum, false);
    const float sh = shift[blockIdx.x], sc = scale[blockIdx.x];
    for (unsigned int j = threadIdx.x; j < v; j += blockDim.x) {
        dx[base + j] = (expf(x[base + j] + b[j] - sh) * tsum - t[base + j]) * sc;
    }
}
