// The GPU's matmuls (gpu/matmul.cuh): cuBLAS, column-major (a row-major (N,IC) matrix is a column-major
// (IC,N) one), with run.precision bf16's operands.
#include "gpu/matmul.cuh"

#include <string.h>

#include "gpu/colsum.cuh"

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

// cublasSgemm's arguments (column-major), in bf16 when math is GPU_BF16: A (lda x ka) and B (ldb x kb) are
// the column-major extents of the operands as stored, lda and ldb their packed leading dimensions (an operand's
// own ld replaces it); C floats, or bf16 (beta 0: the fp32 sums rounded once)
static void gemm_(GpuMath math, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, GpuAct A, int lda,
                  size_t ka, GpuAct B, int ldb, size_t kb, float beta, GpuAct C, int ldc) {
    const float one = 1.0f;
    if (math != GPU_BF16) {
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
    gpu_matmul_forward_in(gpu_math(), out, inp, w, bias, N, IC, OC);
}

void gpu_matmul_backward(GpuAct dinp, float *dw, float *dbias, GpuAct dout, GpuAct inp, const float *w, int N, int IC,
                         int OC, int accumulate) {
    gpu_matmul_backward_in(gpu_math(), dinp, dw, dbias, dout, inp, w, N, IC, OC, accumulate);
}

void gpu_matmul_forward_in(GpuMath math, GpuAct out, GpuAct inp, const float *w, const float *bias, int N, int IC,
                           int OC) {
    // out^T (OC,N) = w (OC,IC) @ inp^T (IC,N): w is the column-major (IC,OC) matrix, transposed
    gemm_(math, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, gpu_f32(w), IC, OC, inp, IC, N, 0.0f, out, OC);
    if (bias) {
        if (out.bf16) gpu_fail_("gpu_matmul_forward", "a bias on a bf16 result", __FILE__, __LINE__);
        size_t n = (size_t)N * OC;
        add_bias_kernel<<<gpu_blocks(n, 256), 256>>>((float *)out.p, bias, n, OC);
        KERNEL_CHECK();
    }
}

void gpu_matmul_backward_in(GpuMath math, GpuAct dinp, float *dw, float *dbias, GpuAct dout, GpuAct inp,
                            const float *w, int N, int IC, int OC, int accumulate) {
    // bf16: a float dout (N,OC) converted once for both products
    if (math == GPU_BF16) dout = bf16_of_(dout, (size_t)N * OC, 2);
    if (dinp.p)  // dinp^T (IC,N) = w^T (IC,OC) @ dout^T (OC,N)
        gemm_(math, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, gpu_f32(w), IC, OC, dout, OC, N, accumulate ? 1.0f : 0.0f,
              dinp, IC);
    // dw^T (IC,OC) += inp^T (IC,N) @ dout (N,OC)
    gemm_(math, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, inp, IC, N, dout, OC, N, 1.0f, gpu_f32(dw), IC);
    if (dbias) gpu_colsum(dbias, NULL, dout, NULL, NULL, NULL, N, OC, COLSUM_PLAIN);
}
