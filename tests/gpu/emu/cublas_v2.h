/*
 * The cuBLAS calls of the GPU backend, emulated on the CPU for tests/gpu/emu/cuda_runtime.h's purpose: SGEMM on
 * column-major matrices with BLAS's transpose, leading-dimension and alpha/beta conventions, summed in double,
 * and GEMMEx on bfloat16 operands with a float or bf16 result (the operands' bf16 values, summed the same way). The math
 * mode is recorded and ignored (no TF32 here).
 */
#ifndef SEQ_GPU_EMU_CUBLAS_V2_H
#define SEQ_GPU_EMU_CUBLAS_V2_H

#include "cuda_bf16.h"
#include "cuda_runtime.h"

typedef struct EmuBlas_ {
    int math;
} *cublasHandle_t;
typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7 } cublasStatus_t;
typedef enum { CUBLAS_OP_N, CUBLAS_OP_T } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH, CUBLAS_TF32_TENSOR_OP_MATH } cublasMath_t;

static inline cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = (cublasHandle_t)calloc(1, sizeof(struct EmuBlas_));
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
    h->math = m;
    return CUBLAS_STATUS_SUCCESS;
}
static inline const char *cublasGetStatusString(cublasStatus_t s) { return s ? "invalid value (emulated)" : "success"; }

// C (m,n) = alpha op(A) (m,k) op(B) (k,n) + beta C, column-major; beta 0 ignores C's old contents
static inline cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha, const float *A, int lda, const float *B, int ldb,
                                         const float *beta, float *C, int ldc) {
    (void)h;
    if (m < 0 || n < 0 || k < 0 || lda < (ta == CUBLAS_OP_N ? m : k) || ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m)
        return CUBLAS_STATUS_INVALID_VALUE;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int p = 0; p < k; p++) {
                float a = ta == CUBLAS_OP_N ? A[i + (size_t)p * lda] : A[p + (size_t)i * lda];
                float b = tb == CUBLAS_OP_N ? B[p + (size_t)j * ldb] : B[j + (size_t)p * ldb];
                s += (double)a * b;
            }
            float *c = &C[i + (size_t)j * ldc];
            *c = (float)(*alpha * s + (*beta != 0.0f ? (double)*beta * *c : 0.0));
        }
    return CUBLAS_STATUS_SUCCESS;
}

typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;

// cublasSgemm's contract with A and B of type CUDA_R_16BF and C of CUDA_R_32F, or of CUDA_R_16BF with beta 0 (the
// float result rounded to nearest, as the GPU's epilogue does): the combinations the backend uses
static inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                          const void *B, cudaDataType bt, int ldb, const void *beta, void *C,
                                          cudaDataType ct, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    (void)algo;
    if (at != CUDA_R_16BF || bt != CUDA_R_16BF || (ct != CUDA_R_32F && ct != CUDA_R_16BF) ||
        compute != CUBLAS_COMPUTE_32F || (ct == CUDA_R_16BF && *(const float *)beta != 0.0f) || ldc < m)
        return CUBLAS_STATUS_INVALID_VALUE;
    size_t na = (size_t)lda * (ta == CUBLAS_OP_N ? k : m), nb = (size_t)ldb * (tb == CUBLAS_OP_N ? n : k);
    float *fa = (float *)malloc((na ? na : 1) * sizeof(float)), *fb = (float *)malloc((nb ? nb : 1) * sizeof(float));
    for (size_t i = 0; i < na; i++) fa[i] = __bfloat162float(((const __nv_bfloat16 *)A)[i]);
    for (size_t i = 0; i < nb; i++) fb[i] = __bfloat162float(((const __nv_bfloat16 *)B)[i]);
    size_t nc = (size_t)ldc * n;
    float *fc = ct == CUDA_R_32F ? (float *)C : (float *)malloc((nc ? nc : 1) * sizeof(float));
    cublasStatus_t st = cublasSgemm(h, ta, tb, m, n, k, (const float *)alpha, fa, lda, fb, ldb, (const float *)beta,
                                    fc, ldc);
    if (ct == CUDA_R_16BF) {
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) ((__nv_bfloat16 *)C)[i + (size_t)j * ldc] = __float2bfloat16(fc[i + (size_t)j * ldc]);
        free(fc);
    }
    free(fa);
    free(fb);
    return st;
}

#endif
