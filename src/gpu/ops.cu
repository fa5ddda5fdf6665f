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
#define COL_THREADS 128

enum { COLSUM_PLAIN, COLSUM_LAYERNORM, COLSUM_RMSNORM };

// partial (n_chunks, 2, C): per chunk, the sum of dout and of dout·xhat (the norms' weight gradient)
__global__ void colsum_partial_kernel(float *partial, const float *dout, const float *inp, const float *mean,
                                      const float *rstd, int N, int C, int mode) {
    int c = blockIdx.y * blockDim.x + threadIdx.x, chunk = blockIdx.x;  // chunks on x: gridDim.y stops at 65535
    if (c >= C) return;
    int r0 = chunk * COL_CHUNK, r1 = min(N, r0 + COL_CHUNK);
    float s = 0.0f, sx = 0.0f;
    for (int r = r0; r < r1; r++) {
        float d = dout[(size_t)r * C + c];
        s += d;
        if (mode == COLSUM_LAYERNORM) sx += d * (inp[(size_t)r * C + c] - mean[r]) * rstd[r];
        else if (mode == COLSUM_RMSNORM) sx += d * inp[(size_t)r * C + c] * rstd[r];
    }
    partial[((size_t)chunk * 2) * C + c] = s;
    partial[((size_t)chunk * 2 + 1) * C + c] = sx;
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

static void colsum_(float *dsum, float *dxhat, const float *dout, const float *inp, const float *mean,
                    const float *rstd, int N, int C, int mode) {
    int n_chunks = (N + COL_CHUNK - 1) / COL_CHUNK;
    float *partial = tmp_floats_((size_t)n_chunks * 2 * C);
    dim3 grid(n_chunks, gpu_blocks(C, COL_THREADS));
    colsum_partial_kernel<<<grid, COL_THREADS>>>(partial, dout, inp, mean, rstd, N, C, mode);
    KERNEL_CHECK();
    colsum_finish_kernel<<<gpu_blocks(C, COL_THREADS), COL_THREADS>>>(dsum, dxhat, partial, n_chunks, C);
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
    if (V == 4 && i + 4 <= n) {
        float4 x = *(const float4 *)(src + i);
        uint2 y;
        y.x = pack_f32_(x.x, x.y);
        y.y = pack_f32_(x.z, x.w);
        *(uint2 *)(dst + i) = y;
        return;
    }
    for (size_t e = i; e < i + V && e < n; e++) dst[e] = __float2bfloat16(src[e]);
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

// x (n floats) as bf16: the parameters' copy when x lies in them, else converted into scratch buffer `slot`
static const __nv_bfloat16 *bf16_of_(const float *x, size_t n, int slot) {
    if (bf16_.copy && x >= bf16_.params && x + n <= bf16_.params + bf16_.n) return bf16_.copy + (x - bf16_.params);
    if (n > bf16_.cap[slot]) {
        if (bf16_.scratch[slot]) CUDA_CHECK(cudaFree(bf16_.scratch[slot]));
        CUDA_CHECK(cudaMalloc(&bf16_.scratch[slot], n * sizeof(__nv_bfloat16)));
        bf16_.cap[slot] = n;
    }
    to_bf16_(bf16_.scratch[slot], x, n);
    return bf16_.scratch[slot];
}

// cublasSgemm's arguments (column-major), in bf16 when run.precision is bf16: A (lda x ka) and B (ldb x kb) are
// the column-major extents of the operands as stored; Bh, when not NULL, is B already in bf16
static void gemm_(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *A, int lda, size_t ka,
                  const float *B, const __nv_bfloat16 *Bh, int ldb, size_t kb, float beta, float *C, int ldc) {
    const float one = 1.0f;
    if (gpu_math() != GPU_BF16) {
        CUBLAS_CHECK(cublasSgemm(gpu_blas(), ta, tb, m, n, k, &one, A, lda, B, ldb, &beta, C, ldc));
        return;
    }
    const __nv_bfloat16 *a = bf16_of_(A, (size_t)lda * ka, 0), *b = Bh ? Bh : bf16_of_(B, (size_t)ldb * kb, 1);
    CUBLAS_CHECK(cublasGemmEx(gpu_blas(), ta, tb, m, n, k, &one, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &beta, C,
                              CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void gpu_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int IC, int OC) {
    // out^T (OC,N) = w (OC,IC) @ inp^T (IC,N): w is the column-major (IC,OC) matrix, transposed
    gemm_(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, w, IC, OC, inp, NULL, IC, N, 0.0f, out, OC);
    if (bias) {
        size_t n = (size_t)N * OC;
        add_bias_kernel<<<gpu_blocks(n, 256), 256>>>(out, bias, n, OC);
        KERNEL_CHECK();
    }
}

void gpu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                         int N, int IC, int OC, int accumulate) {
    // bf16: dout (N,OC) converted once for both products
    const __nv_bfloat16 *douth = gpu_math() == GPU_BF16 ? bf16_of_(dout, (size_t)N * OC, 2) : NULL;
    if (dinp)  // dinp^T (IC,N) = w^T (IC,OC) @ dout^T (OC,N)
        gemm_(CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, w, IC, OC, dout, douth, OC, N, accumulate ? 1.0f : 0.0f, dinp, IC);
    // dw^T (IC,OC) += inp^T (IC,N) @ dout (N,OC)
    gemm_(CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, inp, IC, N, dout, douth, OC, N, 1.0f, dw, IC);
    if (dbias) colsum_(dbias, NULL, dout, NULL, NULL, NULL, N, OC, COLSUM_PLAIN);
}

// ----------------------------------------------------------------------------
// norms: one warp per row

__global__ void norm_forward_kernel(float *out, float *mean, float *rstd, const float *inp, const float *w,
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
    float *y = out + (size_t)row * C;
    for (int i = lane; i < C; i += 32) y[i] = (x[i] - mu) * rs * w[i] + (b ? b[i] : 0.0f);
    if (lane == 0) {
        if (mean) mean[row] = mu;
        rstd[row] = rs;
    }
}

void gpu_norm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b, int N,
                      int C, int rms) {
    norm_forward_kernel<<<gpu_blocks(N, 8), 256>>>(out, rms ? NULL : mean, rstd, inp, w, rms ? NULL : b, N, C, rms);
    KERNEL_CHECK();
}

// dinp += rstd (dn - mean(dn) - xhat mean(dn xhat)), dn = dout w (LayerNorm); RMSNorm drops the mean(dn) term
__global__ void norm_backward_kernel(float *dinp, const float *dout, const float *inp, const float *w,
                                     const float *mean, const float *rstd, int N, int C, int rms) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    float mu = rms ? 0.0f : mean[row], rs = rstd[row];
    float s = 0.0f, sx = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float dn = dy[i] * w[i], xh = (x[i] - mu) * rs;
        s += dn;
        sx += dn * xh;
    }
    s = rms ? 0.0f : warp_sum_(s) / C;
    sx = warp_sum_(sx) / C;
    float *dx = dinp + (size_t)row * C;
    for (int i = lane; i < C; i += 32) {
        float dn = dy[i] * w[i], xh = (x[i] - mu) * rs;
        dx[i] += rs * (dn - s - xh * sx);
    }
}

void gpu_norm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                       const float *mean, const float *rstd, int N, int C, int rms) {
    norm_backward_kernel<<<gpu_blocks(N, 8), 256>>>(dinp, dout, inp, w, mean, rstd, N, C, rms);
    KERNEL_CHECK();
    colsum_(rms ? NULL : db, dw, dout, inp, mean, rstd, N, C, rms ? COLSUM_RMSNORM : COLSUM_LAYERNORM);
}

// ----------------------------------------------------------------------------
// activations

static __device__ __forceinline__ float gelu_(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
static __device__ __forceinline__ float gelu_grad_(float x) {
    float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
    return cdf + x * 0.39894228040143268f * expf(-0.5f * x * x);
}
static __device__ __forceinline__ float sigmoid_(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void act_forward_kernel(float *out, const float *inp, int N, int H, int kind) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = (size_t)N * H;
    if (i >= n) return;
    if (kind == MLP_SWIGLU) {
        size_t r = i / H, c = i % H;
        float a = inp[r * 2 * H + c], b = inp[r * 2 * H + H + c];
        out[i] = a * sigmoid_(a) * b;
    } else if (kind == MLP_RELU) {
        out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
    } else {
        out[i] = gelu_(inp[i]);
    }
}

__global__ void act_backward_kernel(float *dinp, const float *inp, const float *dout, int N, int H, int kind) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = (size_t)N * H;
    if (i >= n) return;
    float d = dout[i];
    if (kind == MLP_SWIGLU) {
        size_t r = i / H, c = i % H;
        float a = inp[r * 2 * H + c], b = inp[r * 2 * H + H + c], sg = sigmoid_(a);
        // out = a sig(a) b: d a = b sig (1 + a (1 - sig)), d b = a sig
        dinp[r * 2 * H + c] = d * b * sg * (1.0f + a * (1.0f - sg));
        dinp[r * 2 * H + H + c] = d * a * sg;
    } else if (kind == MLP_RELU) {
        dinp[i] = inp[i] > 0.0f ? d : 0.0f;
    } else {
        dinp[i] = d * gelu_grad_(inp[i]);
    }
}

void gpu_act_forward(float *out, const float *inp, int N, int H, int kind) {
    act_forward_kernel<<<gpu_blocks((size_t)N * H, 256), 256>>>(out, inp, N, H, kind);
    KERNEL_CHECK();
}

void gpu_act_backward(float *dinp, const float *inp, const float *dout, int N, int H, int kind) {
    act_backward_kernel<<<gpu_blocks((size_t)N * H, 256), 256>>>(dinp, inp, dout, N, H, kind);
    KERNEL_CHECK();
}

__global__ void residual_kernel(float *out, const float *a, const float *b, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

void gpu_residual(float *out, const float *a, const float *b, size_t n) {
    residual_kernel<<<gpu_blocks(n, 256), 256>>>(out, a, b, n);
    KERNEL_CHECK();
}

void gpu_add_inplace(float *dst, const float *src, size_t n) { gpu_residual(dst, dst, src, n); }

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

__global__ void crossentropy_kernel(float *losses, float *logits, const int *targets, int V, float inv_norm, int grad) {
    __shared__ float sh[32];
    int row = blockIdx.x, tg = targets[row];
    float *x = logits + (size_t)row * V;
    if (tg == XENT_IGNORE_INDEX || tg < 0 || tg >= V) {
        if (threadIdx.x == 0) losses[row] = 0.0f;
        if (grad)
            for (int i = threadIdx.x; i < V; i += blockDim.x) x[i] = 0.0f;
        return;
    }
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, x[i]);
    mx = block_max_(mx, sh);
    float s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(x[i] - mx);
    float logsum = logf(block_sum_(s, sh));
    float xt = x[tg];
    __syncthreads();  // every thread has read x[tg] before any overwrites it
    if (threadIdx.x == 0) losses[row] = -((xt - mx) - logsum);
    if (grad)
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            float p = expf((x[i] - mx) - logsum);
            x[i] = (p - (i == tg ? 1.0f : 0.0f)) * inv_norm;
        }
}

void gpu_crossentropy(float *losses, float *logits, const int *targets, int N, int V, int n_norm, int grad) {
    float inv = n_norm > 0 ? 1.0f / (float)n_norm : 0.0f;
    crossentropy_kernel<<<N, 256>>>(losses, logits, targets, V, inv, grad);
    KERNEL_CHECK();
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
