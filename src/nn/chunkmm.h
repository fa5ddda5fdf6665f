/*
 * Small dense products inside one chunk of the chunked recurrence engines (nn/linrec.c, nn/delta.c):
 * internal to nn/, included by each engine's .c, so it is compiled into every kernel-set copy and picks
 * its vector path with ISA_AVX512 / ISA_AVX2 (nn/isa.h).
 */
#ifndef SEQ_NN_CHUNKMM_H
#define SEQ_NN_CHUNKMM_H

#include <stddef.h>

#include "nn/simd16.h"

// small dense products inside a chunk (row-major; the innermost loop runs over contiguous memory, so the
// compiler vectorises it with the kernel set's instructions)

// C (M,N) += op(A) B (K,N) with op(A) = A (M,K), or A^T for A stored (K,M) (trans); tri MM_TRI_A: op(A) is
// lower triangular (M = K), so row block i reads k <= its last row only; MM_TRI_C: only C's lower triangle
// (j <= i, M = N) is wanted (causal scores), so row block i stops at column block i. The vector sets keep a 4 x 16 block of C
// in registers across the k loop (4 fmas per load of B; ISO C turns off fma contraction, so the plain loop
// would not fuse a multiply-add); the generic set runs the same i-k-j loop the compiler vectorises.
static inline float a_at_(const float *A, int M, int K, int i, int kk, int trans) {
    return trans ? A[(size_t)kk * M + i] : A[(size_t)i * K + kk];
}

enum { MM_FULL, MM_TRI_A, MM_TRI_C };

static inline void mm_(float *restrict C, const float *restrict A, const float *restrict Bm, int M, int K, int N, int trans,
                int tri) {
    int i0 = 0;
#if ISA_AVX512 || ISA_AVX2
    for (; i0 + 4 <= M; i0 += 4) {
        int kend = tri == MM_TRI_A && i0 + 4 < K ? i0 + 4 : K, jend = tri == MM_TRI_C && i0 + 4 < N ? i0 + 4 : N;
        for (int j0 = 0; j0 < jend; j0 += 16) {
            int w = N - j0 < 16 ? N - j0 : 16;
            m16 mk = (m16)(w == 16 ? 0xffffu : (1u << w) - 1u);
            float *c = C + (size_t)i0 * N + j0;
            v16f c0 = v16_maskz_loadu(mk, c), c1 = v16_maskz_loadu(mk, c + N);
            v16f c2 = v16_maskz_loadu(mk, c + 2 * N), c3 = v16_maskz_loadu(mk, c + 3 * N);
            for (int kk = 0; kk < kend; kk++) {
                v16f b = v16_maskz_loadu(mk, Bm + (size_t)kk * N + j0);
                c0 = v16_fmadd(v16_set1(a_at_(A, M, K, i0, kk, trans)), b, c0);
                c1 = v16_fmadd(v16_set1(a_at_(A, M, K, i0 + 1, kk, trans)), b, c1);
                c2 = v16_fmadd(v16_set1(a_at_(A, M, K, i0 + 2, kk, trans)), b, c2);
                c3 = v16_fmadd(v16_set1(a_at_(A, M, K, i0 + 3, kk, trans)), b, c3);
            }
            v16_mask_storeu(c, mk, c0);
            v16_mask_storeu(c + N, mk, c1);
            v16_mask_storeu(c + 2 * N, mk, c2);
            v16_mask_storeu(c + 3 * N, mk, c3);
        }
    }
#endif
    for (; i0 < M; i0++) {  // every row (generic), or the last M % 4 rows
        int kend = tri == MM_TRI_A && i0 + 1 < K ? i0 + 1 : K, jend = tri == MM_TRI_C && i0 + 1 < N ? i0 + 1 : N;
        float *restrict c = C + (size_t)i0 * N;
        for (int kk = 0; kk < kend; kk++) {
            float a = a_at_(A, M, K, i0, kk, trans);
            const float *restrict b = Bm + (size_t)kk * N;
            for (int j = 0; j < jend; j++) c[j] += a * b[j];
        }
    }
}

// out (C,R) = in (R,C)^T
static inline void transpose_(float *restrict out, const float *restrict in, int R, int C) {
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) out[(size_t)c * R + r] = in[(size_t)r * C + c];
}

#endif
