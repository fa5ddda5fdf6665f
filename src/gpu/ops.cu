// The GPU's nn ops (gpu/ops.cuh). Kernels favour plainness over the last few percent: matmuls are cuBLAS,
// the rest are memory-bound passes whose reductions are warp/block trees in a fixed order.
#include "gpu/ops.cuh"

#include <cuda_bf16.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

#include "gpu/common.cuh"

extern "C" {
#include "model/model.h"
#include "nn/norm.h"
#include "nn/xent.h"
#include "train/optim.h"
}

// ----------------------------------------------------------------------------
// helpers

static __device__ __forceinline__ float warp_sum_(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float warp_max_(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// sum (max) over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread gets the result
static __device__ float block_sum_(float v, float *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum_(v);
    __syncthreads();  // sh may still be read by a previous call
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return warp_sum_(v);
}
static __device__ float block_max_(float v, float *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max_(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return warp_max_(v);
}

static int aligned16_(const void *p) { return (uintptr_t)p % 16 == 0; }  // NULL too

// a device work buffer for the two-pass column reductions, grown on demand (one stream: a later op only
// reuses it after the earlier one's kernels ran)
static float *tmp_buf_ = NULL;
static size_t tmp_cap_ = 0;
static float *tmp_floats_(size_t n) {
    if (n > tmp_cap_) {
        if (tmp_buf_) CUDA_CHECK(cudaFree(tmp_buf_));
        CUDA_CHECK(cudaMalloc(&tmp_buf_, n * sizeof(float)));
        tmp_cap_ = n;
    }
    return tmp_buf_;
}

// column sums in two passes: rows in fixed chunks of COL_CHUNK, one partial per (chunk, column), then the
// partials added in chunk order
#define COL_CHUNK 64
#define COL_ROWS 8  // a chunk's rows are split over COL_ROWS threads (r, r + 8, ...), added in that order after

enum { COLSUM_PLAIN, COLSUM_LAYERNORM, COLSUM_RMSNORM };

// partial (n_chunks, 2, C): per chunk, the sum of dout and of dout·xhat (the norms' weight gradient); dout's rows
// (floats or bf16) ld apart. A block (32, COL_ROWS) covers 32·V columns of one chunk: thread (x, y) sums V
// adjacent columns (V 4: one 16- or 8-byte load a row) over the chunk's rows y, y + COL_ROWS, ...
template <int V, typename DT>
__global__ void colsum_partial_kernel(float *partial, const DT *dout, size_t ld, const float *inp, const float *mean,
                                      const float *rstd, int N, int C, int mode) {
    __shared__ float sh[COL_ROWS][32][2 * V];
    int c = (blockIdx.y * 32 + threadIdx.x) * V, chunk = blockIdx.x, ty = threadIdx.y;  // chunks on x: gridDim.y
    int r1 = min(N, (chunk + 1) * COL_CHUNK);                                             // stops at 65535
    float s[V], sx[V];
    for (int e = 0; e < V; e++) s[e] = sx[e] = 0.0f;
    if (c < C)
        for (int r = chunk * COL_CHUNK + ty; r < r1; r += COL_ROWS) {
            float d[V], x[V];
            load_elts_<V>(d, dout + (size_t)r * ld + c);
            if (mode != COLSUM_PLAIN) load_elts_<V>(x, inp + (size_t)r * C + c);
            float mu = mode == COLSUM_LAYERNORM ? mean[r] : 0.0f, rs = mode != COLSUM_PLAIN ? rstd[r] : 0.0f;
            for (int e = 0; e < V; e++) {
                s[e] += d[e];
                if (mode != COLSUM_PLAIN) sx[e] += d[e] * (x[e] - mu) * rs;
            }
        }
    for (int e = 0; e < V; e++) sh[ty][threadIdx.x][e] = s[e], sh[ty][threadIdx.x][V + e] = sx[e];
    __syncthreads();
    if (ty != 0 || c >= C) return;
    for (int e = 0; e < V; e++) {
        float a = 0.0f, b = 0.0f;
        for (int y = 0; y < COL_ROWS; y++) a += sh[y][threadIdx.x][e], b += sh[y][threadIdx.x][V + e];
        partial[((size_t)chunk * 2) * C + c + e] = a;
        partial[((size_t)chunk * 2 + 1) * C + c + e] = b;
    }
}

// dsum (C,) += sum of partial[., 0, .]; dxhat (C,) += sum of partial[., 1, .] (either may be NULL)
__global__ void colsum_finish_kernel(float *dsum, float *dxhat, const float *partial, int n_chunks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f, sx = 0.0f;
    for (int k = 0; k < n_chunks; k++) {
        s += partial[((size_t)k * 2) * C + c];
        sx += partial[((size_t)k * 2 + 1) * C + c];
    }
    if (dsum) dsum[c] += s;
    if (dxhat) dxhat[c] += sx;
}

template <int V>
static void colsum_launch_(float *partial, GpuAct dout, size_t ld, const float *inp, const float *mean,
                           const float *rstd, int N, int C, int mode) {
    dim3 grid((N + COL_CHUNK - 1) / COL_CHUNK, gpu_blocks(C, 32 * V)), block(32, COL_ROWS);
    if (dout.bf16)
        colsum_partial_kernel<V, __nv_bfloat16><<<grid, block>>>(partial, (const __nv_bfloat16 *)dout.p, ld, inp, mean,
                                                                 rstd, N, C, mode);
    else
        colsum_partial_kernel<V, float><<<grid, block>>>(partial, (const float *)dout.p, ld, inp, mean, rstd, N, C,
                                                         mode);
    KERNEL_CHECK();
}

static void colsum_(float *dsum, float *dxhat, GpuAct dout, const float *inp, const float *mean, const float *rstd,
                    int N, int C, int mode) {
    int n_chunks = (N + COL_CHUNK - 1) / COL_CHUNK;
    size_t ld = dout.ld ? dout.ld : C;
    float *partial = tmp_floats_((size_t)n_chunks * 2 * C);
    // V 4 when every row's start is aligned for the vector loads
    if (C % 4 == 0 && ld % 4 == 0 && aligned16_(dout.p) && aligned16_(inp))
        colsum_launch_<4>(partial, dout, ld, inp, mean, rstd, N, C, mode);
    else colsum_launch_<1>(partial, dout, ld, inp, mean, rstd, N, C, mode);
    colsum_finish_kernel<<<gpu_blocks(C, 128), 128>>>(dsum, dxhat, partial, n_chunks, C);
    KERNEL_CHECK();
}

// ----------------------------------------------------------------------------
// matmul (cuBLAS, column-major: a row-major (N,IC) matrix is a column-major (IC,N) one)

__global__ void add_bias_kernel(float *out, const float *bias, size_t n, int OC) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] += bias[i % OC];
}

// ---- run.precision bf16: bfloat16 operands, fp32 results (cublasGemmEx, fp32 accumulation)
// The parameters' bf16 copy (gpu_bf16_shadow_*): a weight operand inside the registered buffer is read from it;
// any other operand is converted into one of three scratch buffers, grown on demand (one stream: a later
// matmul reuses them only after the earlier one ran). Slot 2 holds a matmul backward's dout, converted once for
// both of its products.

static struct {
    const float *params;  // the registered fp32 buffer (device), n floats
    size_t n;
    __nv_bfloat16 *copy;  // its bf16 copy
    __nv_bfloat16 *scratch[3];
    size_t cap[3];
} bf16_ = {NULL, 0, NULL, {NULL, NULL, NULL}, {0, 0, 0}};

// V elements a thread: V = 4 reads a float4 and writes 8 bytes (both pointers then 16- and 8-byte aligned), which
// runs the conversion near the memory's bandwidth; a scalar thread per element reached about half of it
template <int V>
__global__ void to_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (i + V <= n) {
        float x[V];
        load_elts_<V>(x, src + i);
        store_elts_<V>(dst + i, x);
        return;
    }
    for (size_t e = i; e < n; e++) dst[e] = __float2bfloat16(src[e]);  // the last thread's tail
}

static void to_bf16_(__nv_bfloat16 *dst, const float *src, size_t n) {
    if (!n) return;
    if ((uintptr_t)src % 16 == 0 && (uintptr_t)dst % 8 == 0)
        to_bf16_kernel<4><<<gpu_blocks((n + 3) / 4, 256), 256>>>(dst, src, n);
    else to_bf16_kernel<1><<<gpu_blocks(n, 256), 256>>>(dst, src, n);
    KERNEL_CHECK();
}

void gpu_to_bf16(void *dst, const float *src, size_t n) { to_bf16_((__nv_bfloat16 *)dst, src, n); }

int gpu_bf16_shadow_init(const float *params, size_t n) {
    bf16_.params = params;
    bf16_.n = n;
    if (cudaMalloc(&bf16_.copy, (n ? n : 1) * sizeof(__nv_bfloat16)) != cudaSuccess) {
        cudaGetLastError();
        bf16_.copy = NULL;
        return -1;
    }
    gpu_bf16_shadow_refresh();
    return 0;
}

void gpu_bf16_shadow_refresh(void) {
    if (bf16_.copy) to_bf16_(bf16_.copy, bf16_.params, bf16_.n);
}

void gpu_bf16_shadow_free(void) {
    if (bf16_.copy) CUDA_CHECK(cudaFree(bf16_.copy));
    for (int i = 0; i < 3; i++)
        if (bf16_.scratch[i]) CUDA_CHECK(cudaFree(bf16_.scratch[i]));
    memset(&bf16_, 0, sizeof bf16_);
}

// x as the bf16 matrix GemmEx takes, n elements from its start: as it is when already bf16, the parameters' copy
// when it lies in them, else converted into scratch buffer `slot`
static GpuAct bf16_of_(GpuAct x, size_t n, int slot) {
    if (x.bf16) return x;
    const float *f = (const float *)x.p;
    if (bf16_.copy && f >= bf16_.params && f + n <= bf16_.params + bf16_.n)
        return GpuAct{bf16_.copy + (f - bf16_.params), 1, x.ld};
    if (x.ld) gpu_fail_("bf16_of_", "a strided float operand (the ops never pass one)", __FILE__, __LINE__);
    if (n > bf16_.cap[slot]) {
        if (bf16_.scratch[slot]) CUDA_CHECK(cudaFree(bf16_.scratch[slot]));
        CUDA_CHECK(cudaMalloc(&bf16_.scratch[slot], n * sizeof(__nv_bfloat16)));
        bf16_.cap[slot] = n;
    }
    to_bf16_(bf16_.scratch[slot], f, n);
    return GpuAct{bf16_.scratch[slot], 1, 0};
}

// cublasSgemm's arguments (column-major), in bf16 when run.precision is bf16: A (lda x ka) and B (ldb x kb) are
// the column-major extents of the operands as stored, lda and ldb their packed leading dimensions (an operand's
// own ld replaces it); C floats, or bf16 (beta 0: the fp32 sums rounded once)
static void gemm_(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, GpuAct A, int lda, size_t ka,
                  GpuAct B, int ldb, size_t kb, float beta, GpuAct C, int ldc) {
    const float one = 1.0f;
    if (gpu_math() != GPU_BF16) {
        if (A.bf16 || B.bf16 || C.bf16) gpu_fail_("gemm_", "a bf16 tensor outside run.precision bf16", __FILE__, __LINE__);
        CUBLAS_CHECK(cublasSgemm(gpu_blas(), ta, tb, m, n, k, &one, (const float *)A.p, A.ld ? A.ld : lda,
                                 (const float *)B.p, B.ld ? B.ld : ldb, &beta, (float *)C.p, ldc));
        return;
    }
    if (C.bf16 && beta != 0.0f) gpu_fail_("gemm_", "accumulating into a bf16 result", __FILE__, __LINE__);
    GpuAct a = bf16_of_(A, (size_t)lda * ka, 0), b = bf16_of_(B, (size_t)ldb * kb, 1);
    CUBLAS_CHECK(cublasGemmEx(gpu_blas(), ta, tb, m, n, k, &one, a.p, CUDA_R_16BF, a.ld ? a.ld : lda, b.p, CUDA_R_16BF,
                              b.ld ? b.ld : ldb, &beta, C.p, C.bf16 ? CUDA_R_16BF : CUDA_R_32F, ldc,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void gpu_matmul_forward(GpuAct out, GpuAct inp, const float *w, const float *bias, int N, int IC, int OC) {
    // out^T (OC,N) = w (OC,IC) @ inp^T (IC,N): w is the column-major (IC,OC) matrix, transposed
    gemm_(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, gpu_f32(w), IC, OC, inp, IC, N, 0.0f, out, OC);
    if (bias) {
        if (out.bf16) gpu_fail_("gpu_matmul_forward", "a bias on a bf16 result", __FILE__, __LINE__);
        size_t n = (size_t)N * OC;
        add_bias_kernel<<<gpu_blocks(n, 256), 256>>>((float *)out.p, bias, n, OC);
        KERNEL_CHECK();
    }
}

void gpu_matmul_backward(GpuAct dinp, float *dw, float *dbias, GpuAct dout, GpuAct inp, const float *w, int N, int IC,
                         int OC, int accumulate) {
    // bf16: a float dout (N,OC) converted once for both products
    if (gpu_math() == GPU_BF16) dout = bf16_of_(dout, (size_t)N * OC, 2);
    if (dinp.p)  // dinp^T (IC,N) = w^T (IC,OC) @ dout^T (OC,N)
        gemm_(CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, gpu_f32(w), IC, OC, dout, OC, N, accumulate ? 1.0f : 0.0f, dinp,
              IC);
    // dw^T (IC,OC) += inp^T (IC,N) @ dout (N,OC)
    gemm_(CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, inp, IC, N, dout, OC, N, 1.0f, gpu_f32(dw), IC);
    if (dbias) colsum_(dbias, NULL, dout, NULL, NULL, NULL, N, OC, COLSUM_PLAIN);
}

// ----------------------------------------------------------------------------
// norms: one warp per row

template <typename OT>
__global__ void norm_forward_kernel(OT *out, float *mean, float *rstd, const float *inp, const float *w,
                                    const float *b, int N, int C, int rms) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    float mu = 0.0f;
    if (!rms) {
        float s = 0.0f;
        for (int i = lane; i < C; i += 32) s += x[i];
        mu = warp_sum_(s) / C;
    }
    float v = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float d = x[i] - mu;
        v += d * d;
    }
    float rs = rsqrtf(warp_sum_(v) / C + (rms ? RMSNORM_EPS : LAYERNORM_EPS));
    OT *y = out + (size_t)row * C;
    for (int i = lane; i < C; i += 32) y[i] = to_elt_<OT>((x[i] - mu) * rs * w[i] + (b ? b[i] : 0.0f));
    if (lane == 0) {
        if (mean) mean[row] = mu;
        rstd[row] = rs;
    }
}

void gpu_norm_forward(GpuAct out, float *mean, float *rstd, const float *inp, const float *w, const float *b, int N,
                      int C, int rms) {
    if (rms) mean = NULL, b = NULL;
    if (out.bf16)
        norm_forward_kernel<__nv_bfloat16><<<gpu_blocks(N, 8), 256>>>((__nv_bfloat16 *)out.p, mean, rstd, inp, w, b, N,
                                                                     C, rms);
    else norm_forward_kernel<float><<<gpu_blocks(N, 8), 256>>>((float *)out.p, mean, rstd, inp, w, b, N, C, rms);
    KERNEL_CHECK();
}

// dinp += rstd (dn - mean(dn) - xhat mean(dn xhat)), dn = dout w (LayerNorm); RMSNorm drops the mean(dn) term.
// One warp per row, VEC adjacent columns a lane at a time (VEC 4: 16-byte loads; C a multiple of 4, rows aligned)
template <int VEC>
__global__ void norm_backward_kernel(float *dinp, const float *dout, const float *inp, const float *w,
                                     const float *mean, const float *rstd, int N, int C, int rms) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    float mu = rms ? 0.0f : mean[row], rs = rstd[row];
    float s = 0.0f, sx = 0.0f, xv[VEC], dv[VEC], wv[VEC];
    for (int c = VEC * lane; c < C; c += 32 * VEC) {
        load_elts_<VEC>(xv, x + c), load_elts_<VEC>(dv, dy + c), load_elts_<VEC>(wv, w + c);
        for (int e = 0; e < VEC; e++) {
            float dn = dv[e] * wv[e];
            s += dn;
            sx += dn * (xv[e] - mu) * rs;
        }
    }
    s = rms ? 0.0f : warp_sum_(s) / C;
    sx = warp_sum_(sx) / C;
    float *dx = dinp + (size_t)row * C, o[VEC];
    for (int c = VEC * lane; c < C; c += 32 * VEC) {  // the row again (from the cache)
        load_elts_<VEC>(xv, x + c), load_elts_<VEC>(dv, dy + c), load_elts_<VEC>(wv, w + c), load_elts_<VEC>(o, dx + c);
        for (int e = 0; e < VEC; e++) o[e] += rs * (dv[e] * wv[e] - s - (xv[e] - mu) * rs * sx);
        store_elts_<VEC>(dx + c, o);
    }
}

void gpu_norm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                       const float *mean, const float *rstd, int N, int C, int rms) {
    unsigned nb = gpu_blocks(N, 8);
    if (C % 4 == 0 && aligned16_(dinp) && aligned16_(dout) && aligned16_(inp) && aligned16_(w))
        norm_backward_kernel<4><<<nb, 256>>>(dinp, dout, inp, w, mean, rstd, N, C, rms);
    else norm_backward_kernel<1><<<nb, 256>>>(dinp, dout, inp, w, mean, rstd, N, C, rms);
    KERNEL_CHECK();
    colsum_(rms ? NULL : db, dw, gpu_f32(dout), inp, mean, rstd, N, C, rms ? COLSUM_RMSNORM : COLSUM_LAYERNORM);
}

// ----------------------------------------------------------------------------
// activations

static __device__ __forceinline__ float gelu_(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
static __device__ __forceinline__ float gelu_grad_(float x) {
    float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
    return cdf + x * 0.39894228040143268f * expf(-0.5f * x * x);
}
static __device__ __forceinline__ float sigmoid_(float x) { return 1.0f / (1.0f + expf(-x)); }

// the activation of pre = inp + bias (the fc bias added here: the matmul wrote inp without it, so no pass of its
// own adds it; the same fp32 sum as adding it first, so the same bits). Every tensor of E (float, or bf16 in
// run.precision bf16: the fc output and the activation's gradient as the matmuls write and read them), the math
// in fp32. gelu and relu: V elements a thread (V 4 when 4 divides H); swiglu: one a thread
template <int V, typename E>
__global__ void act_forward_kernel(E *out, const E *inp, const float *bias, int N, int H, int kind) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V, n = (size_t)N * H;
    if (i >= n) return;
    float x[V], b[V], y[V];
    if (kind == MLP_SWIGLU) {
        size_t r = i / H, c = i % H;
        float a = to_f32_(inp[r * 2 * H + c]) + (bias ? bias[c] : 0.0f);
        float v = to_f32_(inp[r * 2 * H + H + c]) + (bias ? bias[H + c] : 0.0f);
        out[i] = to_elt_<E>(a * sigmoid_(a) * v);
        return;
    }
    load_elts_<V>(x, inp + i);
    if (bias) load_elts_<V>(b, bias + i % H);
    for (int e = 0; e < V; e++) {
        float p = x[e] + (bias ? b[e] : 0.0f);
        y[e] = kind == MLP_RELU ? (p > 0.0f ? p : 0.0f) : gelu_(p);
    }
    store_elts_<V>(out + i, y);
}

template <int V, typename E>
__global__ void act_backward_kernel(E *dinp, const E *inp, const float *bias, const E *dout, int N, int H, int kind) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V, n = (size_t)N * H;
    if (i >= n) return;
    float x[V], b[V], d[V], y[V];
    if (kind == MLP_SWIGLU) {
        size_t r = i / H, c = i % H;
        float a = to_f32_(inp[r * 2 * H + c]) + (bias ? bias[c] : 0.0f);
        float v = to_f32_(inp[r * 2 * H + H + c]) + (bias ? bias[H + c] : 0.0f);
        float g = to_f32_(dout[i]), sg = sigmoid_(a);
        // out = a sig(a) v: d a = v sig (1 + a (1 - sig)), d v = a sig
        dinp[r * 2 * H + c] = to_elt_<E>(g * v * sg * (1.0f + a * (1.0f - sg)));
        dinp[r * 2 * H + H + c] = to_elt_<E>(g * a * sg);
        return;
    }
    load_elts_<V>(x, inp + i);
    load_elts_<V>(d, dout + i);
    if (bias) load_elts_<V>(b, bias + i % H);
    for (int e = 0; e < V; e++) {
        float p = x[e] + (bias ? b[e] : 0.0f);
        y[e] = kind == MLP_RELU ? (p > 0.0f ? d[e] : 0.0f) : d[e] * gelu_grad_(p);
    }
    store_elts_<V>(dinp + i, y);
}

// V 4 where every thread's four elements lie in one row, 16-byte aligned (swiglu takes V 1; a parameter tensor,
// the bias, need not start on 16 bytes)
static int act_vec_(const void *a, const void *b, const void *c, const void *bias, int H, int kind) {
    return kind != MLP_SWIGLU && H % 4 == 0 && aligned16_(a) && aligned16_(b) && aligned16_(c) && aligned16_(bias)
               ? 4
               : 1;
}

// the tensors' common element type (float, or bf16 in run.precision bf16), checked
static int act_bf16_(GpuAct a, GpuAct b, GpuAct c) {
    if (a.bf16 != b.bf16 || a.bf16 != c.bf16) gpu_fail_("gpu_act", "float and bf16 tensors mixed", __FILE__, __LINE__);
    return a.bf16;
}

template <typename E>
static void act_forward_(E *out, const E *inp, const float *bias, int N, int H, int kind) {
    size_t n = (size_t)N * H;
    if (act_vec_(out, inp, inp, bias, H, kind) == 4)
        act_forward_kernel<4, E><<<gpu_blocks(n / 4, 256), 256>>>(out, inp, bias, N, H, kind);
    else act_forward_kernel<1, E><<<gpu_blocks(n, 256), 256>>>(out, inp, bias, N, H, kind);
    KERNEL_CHECK();
}

void gpu_act_forward(GpuAct out, GpuAct inp, const float *bias, int N, int H, int kind) {
    if (act_bf16_(out, inp, inp))
        act_forward_((__nv_bfloat16 *)out.p, (const __nv_bfloat16 *)inp.p, bias, N, H, kind);
    else act_forward_((float *)out.p, (const float *)inp.p, bias, N, H, kind);
}

template <typename E>
static void act_backward_(E *dinp, const E *inp, const float *bias, const E *dout, int N, int H, int kind) {
    size_t n = (size_t)N * H;
    if (act_vec_(dinp, inp, dout, bias, H, kind) == 4)
        act_backward_kernel<4, E><<<gpu_blocks(n / 4, 256), 256>>>(dinp, inp, bias, dout, N, H, kind);
    else act_backward_kernel<1, E><<<gpu_blocks(n, 256), 256>>>(dinp, inp, bias, dout, N, H, kind);
    KERNEL_CHECK();
}

void gpu_act_backward(GpuAct dinp, GpuAct inp, const float *bias, GpuAct dout, int N, int H, int kind) {
    if (act_bf16_(dinp, inp, dout))
        act_backward_((__nv_bfloat16 *)dinp.p, (const __nv_bfloat16 *)inp.p, bias, (const __nv_bfloat16 *)dout.p, N,
                      H, kind);
    else act_backward_((float *)dinp.p, (const float *)inp.p, bias, (const float *)dout.p, N, H, kind);
}

// out = a + (b + bias[column]): the projection's bias added here, in the order its own pass would have (the same
// bits); V 4 when 4 divides C and everything starts 16-byte aligned
template <int V>
__global__ void residual_kernel(float *out, const float *a, const float *b, const float *bias, size_t n, int C) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (i >= n) return;
    float x[V], y[V], z[V];
    load_elts_<V>(x, a + i);
    load_elts_<V>(y, b + i);
    if (bias) load_elts_<V>(z, bias + i % C);
    for (int e = 0; e < V; e++) x[e] += bias ? y[e] + z[e] : y[e];
    store_elts_<V>(out + i, x);
}

void gpu_residual(float *out, const float *a, const float *b, const float *bias, size_t n, int C) {
    if (C % 4 == 0 && aligned16_(out) && aligned16_(a) && aligned16_(b) && aligned16_(bias))
        residual_kernel<4><<<gpu_blocks(n / 4, 256), 256>>>(out, a, b, bias, n, C);
    else residual_kernel<1><<<gpu_blocks(n, 256), 256>>>(out, a, b, bias, n, C);
    KERNEL_CHECK();
}

// ----------------------------------------------------------------------------
// embedding

__global__ void embedding_forward_kernel(float *out, const int *ids, const float *wte, int N, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    size_t r = i / C, c = i % C;
    out[i] = wte[(size_t)ids[r] * C + c];
}

void gpu_embedding_forward(float *out, const int *ids, const float *wte, int N, int C) {
    embedding_forward_kernel<<<gpu_blocks((size_t)N * C, 256), 256>>>(out, ids, wte, N, C);
    KERNEL_CHECK();
}

// block u (of the distinct tokens) adds its positions' rows, in order, to its own row of dwte
__global__ void embedding_backward_kernel(float *dwte, const float *dout, const int *tokens, const int *offs,
                                          const int *pos, int C) {
    int u = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;  // tokens on x: gridDim.y stops at 65535
    if (c >= C) return;
    float s = 0.0f;
    for (int k = offs[u]; k < offs[u + 1]; k++) s += dout[(size_t)pos[k] * C + c];
    dwte[(size_t)tokens[u] * C + c] += s;
}

void gpu_embedding_backward(float *dwte, const float *dout, const int *tokens, const int *offs, const int *pos,
                            int n_tok, int C) {
    if (n_tok == 0) return;
    dim3 grid(n_tok, gpu_blocks(C, 128));
    embedding_backward_kernel<<<grid, 128>>>(dwte, dout, tokens, offs, pos, C);
    KERNEL_CHECK();
}

// ----------------------------------------------------------------------------
// cross-entropy: one block per row

// VEC elements a thread at a time (VEC 4: 16-byte loads, V a multiple of 4). grad_bf16: dlogits as bf16 at the
// start of the row's own bytes. Element i's bf16 overlaps float i/2, so the row goes in steps of VEC·blockDim.x
// elements, each step's floats read before the barrier and its bf16s written after it: a step writes over floats
// [base/2, (base + VEC·blockDim.x)/2), all read by then, and never over a later step's floats.
template <int VEC>
__global__ void crossentropy_kernel(float *losses, float *logits, const int *targets, int V, float inv_norm, int grad,
                                    int grad_bf16) {
    __shared__ float sh[32];
    int row = blockIdx.x, tg = targets[row], step = VEC * blockDim.x;
    float *x = logits + (size_t)row * V;
    __nv_bfloat16 *xh = (__nv_bfloat16 *)x;
    if (tg == XENT_IGNORE_INDEX || tg < 0 || tg >= V) {
        if (threadIdx.x == 0) losses[row] = 0.0f;
        if (grad)
            for (int i = threadIdx.x; i < V; i += blockDim.x) {
                if (grad_bf16) xh[i] = __float2bfloat16(0.0f);
                else x[i] = 0.0f;
            }
        return;
    }
    // the max and the sum of exp(x - max) in one read of the row (online: a larger value rescales the sum)
    float mx = -INFINITY, s = 0.0f;
    for (int i = threadIdx.x * VEC; i < V; i += step) {
        float v[VEC], m = -INFINITY;
        load_elts_<VEC>(v, x + i);
        for (int e = 0; e < VEC; e++) m = fmaxf(m, v[e]);
        if (m > mx) s *= expf(mx - m), mx = m;  // expf(-inf) = 0 for the first values
        for (int e = 0; e < VEC; e++) s += expf(v[e] - mx);
    }
    float bmx = block_max_(mx, sh);
    s = mx == -INFINITY ? 0.0f : s * expf(mx - bmx);
    mx = bmx;
    float logsum = logf(block_sum_(s, sh));
    float xt = x[tg];
    __syncthreads();  // every thread has read x[tg] before any overwrites it
    if (threadIdx.x == 0) losses[row] = -((xt - mx) - logsum);
    if (!grad) return;
    for (int base = 0; base < V; base += step) {
        int i = base + threadIdx.x * VEC;
        float d[VEC];
        if (i < V) {
            load_elts_<VEC>(d, x + i);
            for (int e = 0; e < VEC; e++) d[e] = (expf((d[e] - mx) - logsum) - (i + e == tg ? 1.0f : 0.0f)) * inv_norm;
        }
        if (!grad_bf16) {
            if (i < V) store_elts_<VEC>(x + i, d);
            continue;
        }
        __syncthreads();
        if (i < V) store_elts_<VEC>(xh + i, d);
    }
}

GpuAct gpu_crossentropy(float *losses, float *logits, const int *targets, int N, int V, int n_norm, int grad,
                        int grad_bf16) {
    float inv = n_norm > 0 ? 1.0f / (float)n_norm : 0.0f;
    if (V % 4 == 0 && aligned16_(logits)) crossentropy_kernel<4><<<N, 256>>>(losses, logits, targets, V, inv, grad, grad_bf16);
    else crossentropy_kernel<1><<<N, 256>>>(losses, logits, targets, V, inv, grad, grad_bf16);
    KERNEL_CHECK();
    return grad_bf16 ? GpuAct{logits, 1, 2 * V} : gpu_f32(logits);
}

// ----------------------------------------------------------------------------
// optimizer: one block per chunk

__global__ void chunk_sumsq_kernel(double *sums, const float *x, const size_t *start, const int *len) {
    __shared__ double sh[256];
    int c = blockIdx.x;
    const float *p = x + start[c];
    double s = 0.0;
    for (int i = threadIdx.x; i < len[c]; i += blockDim.x) s += (double)p[i] * (double)p[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) sums[c] = sh[0];
}

void gpu_chunk_sumsq(double *sums, const float *x, const size_t *start, const int *len, int n_chunks) {
    if (n_chunks == 0) return;
    chunk_sumsq_kernel<<<n_chunks, 256>>>(sums, x, start, len);
    KERNEL_CHECK();
}

__global__ void chunk_scale_kernel(float *x, const size_t *start, const int *len, const int *tensor, const float *coef) {
    int c = blockIdx.x;
    float s = coef[(size_t)tensor[c] * OPTIM_COEF];
    if (s == 1.0f) return;
    float *p = x + start[c];
    for (int i = threadIdx.x; i < len[c]; i += blockDim.x) p[i] *= s;
}

void gpu_chunk_scale(float *x, const size_t *start, const int *len, const int *tensor, const float *coef,
                     int n_chunks) {
    if (n_chunks == 0) return;
    chunk_scale_kernel<<<n_chunks, 256>>>(x, start, len, tensor, coef);
    KERNEL_CHECK();
}

__global__ void adamw_kernel(float *params, float *m, float *v, const float *grads, const size_t *start,
                             const int *len, const int *tensor, const float *coef) {
    int c = blockIdx.x;
    const float *k = coef + (size_t)tensor[c] * OPTIM_COEF;
    float decay = k[COEF_DECAY_MUL], b1 = k[COEF_BETA1], b2 = k[COEF_BETA2], step = k[COEF_STEP_SIZE];
    float ibc2 = k[COEF_INV_SQRT_BC2], eps = k[COEF_EPS], om1 = 1.0f - b1, om2 = 1.0f - b2;
    size_t o = start[c];
    for (int i = threadIdx.x; i < len[c]; i += blockDim.x) {
        float g = grads[o + i];
        float mi = b1 * m[o + i] + om1 * g;
        float vi = b2 * v[o + i] + om2 * g * g;
        m[o + i] = mi;
        v[o + i] = vi;
        float p = params[o + i] * decay;  // decoupled decay on the old value, as nn/adamw.c
        params[o + i] = p - step * mi / (sqrtf(vi) * ibc2 + eps);
    }
}

void gpu_adamw(float *params, float *m, float *v, const float *grads, const size_t *start, const int *len,
               const int *tensor, const float *coef, int n_chunks) {
    if (n_chunks == 0) return;
    adamw_kernel<<<n_chunks, 256>>>(params, m, v, grads, start, len, tensor, coef);
    KERNEL_CHECK();
}
