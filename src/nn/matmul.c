/*
 * Matrix multiply (see matmul.h). GotoBLAS/BLIS-style blocking, written for this project:
 *
 *   for each K block of KC_ (sequential, so every C element is reduced over K in a fixed order)
 *     pack op(A)[:, kblock] into MR_-row panels   (k-major inside a panel: a[k*MR_ + i])
 *     pack op(B)[kblock, :] into NR_-col panels   (k-major inside a panel: b[k*NR_ + j])
 *     parallel over MC_ x NC_ output tiles (disjoint writes, no atomics):
 *       for each MR_ x NR_ micro-tile: micro-kernel keeps the micro-tile in registers over kc
 *
 * Packing turns all four transA/transB layouts into the same contiguous, aligned panels, so one
 * micro-kernel serves every forward and backward layout, and the panels are zero-padded to whole
 * MR_/NR_ so the kernel never needs an edge case (edge micro-tiles go through a small local tile).
 * The K loop is never split across threads and the tiling does not depend on the thread count, so
 * the result is bit-identical for any number of threads.
 */
#include "nn/matmul.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

// micro-tile shape: as many accumulators as the register file holds, leaving room for the B loads and
// the A broadcast (AVX-512: 16 zmm accumulators of 32 regs; AVX2: 12 ymm of 16 regs)
#if defined(__AVX512F__)
#define MR_ 8
#define NR_ 32
#elif defined(__AVX2__) && defined(__FMA__)
#define MR_ 6
#define NR_ 16
#else
#define MR_ 4
#define NR_ 16
#endif
#define KC_ 256          // K block: an A micro-panel (MR_ x KC_, 8 KiB) stays in L1 while B streams
#define MC_ (8 * MR_)    // output tile rows: one thread's unit of work
#define NC_ (8 * NR_)    // output tile cols: the B block (KC_ x NC_, 256 KiB) stays in L2
#define PAR_FLOPS_ 5e5   // below this much work per K block, threads cost more than they save

typedef void (*KernelFn)(int kc, const float *a, const float *b, float *c, size_t ldc, int load_c);

static int force_portable_ = 0;

void matmul_force_portable(int on) { force_portable_ = on; }

// ----------------------------------------------------------------------------
// micro-kernels: c (MR_,NR_) with row stride ldc  (=|+)=  a panel (kc,MR_)^T @ b panel (kc,NR_)
// load_c = 0 starts from zero (overwrite), 1 adds to what c holds. All use one fma per k per element in
// k order, so the portable and SIMD kernels give bit-identical results.

static void kernel_portable_(int kc, const float *a, const float *b, float *c, size_t ldc, int load_c) {
    float acc[MR_][NR_];
    for (int i = 0; i < MR_; i++) {
        for (int j = 0; j < NR_; j++) acc[i][j] = load_c ? c[i * ldc + j] : 0.0f;
    }
    for (int k = 0; k < kc; k++) {
        const float *a_k = a + (size_t)k * MR_;
        const float *b_k = b + (size_t)k * NR_;
        for (int i = 0; i < MR_; i++) {
            float a_ki = a_k[i];
            // fmaf, not a*b+c: ISO C mode compiles a*b+c unfused, and we want the same rounding as SIMD
            for (int j = 0; j < NR_; j++) acc[i][j] = fmaf(a_ki, b_k[j], acc[i][j]);
        }
    }
    for (int i = 0; i < MR_; i++) {
        for (int j = 0; j < NR_; j++) c[i * ldc + j] = acc[i][j];
    }
}

#if defined(__AVX512F__)
static void kernel_simd_(int kc, const float *a, const float *b, float *c, size_t ldc, int load_c) {
    // 8 rows x 2 zmm (32 cols) of accumulators; the constant-trip loops below are fully unrolled by gcc
    __m512 acc0[MR_], acc1[MR_];
    for (int i = 0; i < MR_; i++) {
        acc0[i] = load_c ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps();
        acc1[i] = load_c ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps();
    }
    for (int k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(b + (size_t)k * NR_);
        __m512 b1 = _mm512_load_ps(b + (size_t)k * NR_ + 16);
        const float *a_k = a + (size_t)k * MR_;
        for (int i = 0; i < MR_; i++) {
            __m512 a_ki = _mm512_set1_ps(a_k[i]);
            acc0[i] = _mm512_fmadd_ps(a_ki, b0, acc0[i]);
            acc1[i] = _mm512_fmadd_ps(a_ki, b1, acc1[i]);
        }
    }
    for (int i = 0; i < MR_; i++) {
        _mm512_storeu_ps(c + i * ldc, acc0[i]);
        _mm512_storeu_ps(c + i * ldc + 16, acc1[i]);
    }
}
#define HAVE_SIMD_KERNEL_ 1
#elif defined(__AVX2__) && defined(__FMA__)
static void kernel_simd_(int kc, const float *a, const float *b, float *c, size_t ldc, int load_c) {
    // 6 rows x 2 ymm (16 cols) of accumulators
    __m256 acc0[MR_], acc1[MR_];
    for (int i = 0; i < MR_; i++) {
        acc0[i] = load_c ? _mm256_loadu_ps(c + i * ldc) : _mm256_setzero_ps();
        acc1[i] = load_c ? _mm256_loadu_ps(c + i * ldc + 8) : _mm256_setzero_ps();
    }
    for (int k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(b + (size_t)k * NR_);
        __m256 b1 = _mm256_load_ps(b + (size_t)k * NR_ + 8);
        const float *a_k = a + (size_t)k * MR_;
        for (int i = 0; i < MR_; i++) {
            __m256 a_ki = _mm256_broadcast_ss(a_k + i);
            acc0[i] = _mm256_fmadd_ps(a_ki, b0, acc0[i]);
            acc1[i] = _mm256_fmadd_ps(a_ki, b1, acc1[i]);
        }
    }
    for (int i = 0; i < MR_; i++) {
        _mm256_storeu_ps(c + i * ldc, acc0[i]);
        _mm256_storeu_ps(c + i * ldc + 8, acc1[i]);
    }
}
#define HAVE_SIMD_KERNEL_ 1
#endif

// ----------------------------------------------------------------------------
// packing

// dst (kc, MR_) = op(A)[i0 : i0+MR_, k0 : k0+kc], rows past M zero-filled
// op(A) is (M,K): A stored (M,K) when !transA, (K,M) when transA
static void pack_a_(float *dst, const float *A, int M, int K, int transA, int i0, int k0, int kc) {
    int mr = M - i0 < MR_ ? M - i0 : MR_;
    if (transA) {
        // element (i,k) at A[k*M + i]: rows of A are contiguous along our i, so read them in order
        for (int k = 0; k < kc; k++) {
            const float *a_k = A + (size_t)(k0 + k) * M + i0;
            float *d_k = dst + (size_t)k * MR_;
            for (int i = 0; i < mr; i++) d_k[i] = a_k[i];
            for (int i = mr; i < MR_; i++) d_k[i] = 0.0f;
        }
    } else {
        // element (i,k) at A[i*K + k]: read each row sequentially, scatter with stride MR_
        for (int i = 0; i < MR_; i++) {
            if (i < mr) {
                const float *a_i = A + (size_t)(i0 + i) * K + k0;
                for (int k = 0; k < kc; k++) dst[(size_t)k * MR_ + i] = a_i[k];
            } else {
                for (int k = 0; k < kc; k++) dst[(size_t)k * MR_ + i] = 0.0f;
            }
        }
    }
}

// dst (kc, NR_) = op(B)[k0 : k0+kc, j0 : j0+NR_], cols past N zero-filled
// op(B) is (K,N): B stored (K,N) when !transB, (N,K) when transB
static void pack_b_(float *dst, const float *B, int N, int K, int transB, int j0, int k0, int kc) {
    int nr = N - j0 < NR_ ? N - j0 : NR_;
    if (transB) {
        // element (k,j) at B[j*K + k] (the Linear weight layout): read rows of B, scatter with stride NR_
        for (int j = 0; j < NR_; j++) {
            if (j < nr) {
                const float *b_j = B + (size_t)(j0 + j) * K + k0;
                for (int k = 0; k < kc; k++) dst[(size_t)k * NR_ + j] = b_j[k];
            } else {
                for (int k = 0; k < kc; k++) dst[(size_t)k * NR_ + j] = 0.0f;
            }
        }
    } else {
        for (int k = 0; k < kc; k++) {
            const float *b_k = B + (size_t)(k0 + k) * N + j0;
            float *d_k = dst + (size_t)k * NR_;
            for (int j = 0; j < nr; j++) d_k[j] = b_k[j];
            for (int j = nr; j < NR_; j++) d_k[j] = 0.0f;
        }
    }
}

// 64-byte aligned float buffer carved out of an xmalloc block (the kernels use aligned panel loads)
static float *align64_(void *raw) { return (float *)(((uintptr_t)raw + 63) & ~(uintptr_t)63); }

// ----------------------------------------------------------------------------
// one MC_ x NC_ output tile (ti, tj) for the current K block

static void compute_tile_(KernelFn kernel, float *C, const float *apack, const float *bpack, int M, int N,
                          int kc, int ti, int tj, int load_c) {
    int i_end = (ti + 1) * MC_ < M ? (ti + 1) * MC_ : M;
    int j_end = (tj + 1) * NC_ < N ? (tj + 1) * NC_ : N;
    for (int i0 = ti * MC_; i0 < i_end; i0 += MR_) {
        const float *a_p = apack + (size_t)(i0 / MR_) * MR_ * kc;
        int mr = M - i0 < MR_ ? M - i0 : MR_;
        for (int j0 = tj * NC_; j0 < j_end; j0 += NR_) {
            const float *b_p = bpack + (size_t)(j0 / NR_) * NR_ * kc;
            int nr = N - j0 < NR_ ? N - j0 : NR_;
            float *c_ij = C + (size_t)i0 * N + j0;
            if (mr == MR_ && nr == NR_) {
                kernel(kc, a_p, b_p, c_ij, (size_t)N, load_c);
            } else {
                // edge: run the full-size kernel on a local tile, copy back only the valid part
                float tile[MR_ * NR_];
                memset(tile, 0, sizeof tile);
                if (load_c) {
                    for (int i = 0; i < mr; i++) memcpy(tile + i * NR_, c_ij + (size_t)i * N, nr * sizeof(float));
                }
                kernel(kc, a_p, b_p, tile, NR_, load_c);
                for (int i = 0; i < mr; i++) memcpy(c_ij + (size_t)i * N, tile + i * NR_, nr * sizeof(float));
            }
        }
    }
}

// ----------------------------------------------------------------------------

void matmul(float *C, const float *A, const float *B, int M, int N, int K, int transA, int transB, int accumulate) {
    // C is (M,N); op(A) is (M,K); op(B) is (K,N)
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        // an empty sum: C = 0, or C unchanged when accumulating
        if (!accumulate) memset(C, 0, (size_t)M * N * sizeof(float));
        return;
    }
    KernelFn kernel = kernel_portable_;
#ifdef HAVE_SIMD_KERNEL_
    if (!force_portable_) kernel = kernel_simd_;
#endif
    int m_panels = (M + MR_ - 1) / MR_, n_panels = (N + NR_ - 1) / NR_;
    int kc_max = K < KC_ ? K : KC_;
    size_t a_floats = (size_t)m_panels * MR_ * kc_max, b_floats = (size_t)n_panels * NR_ * kc_max;
    void *raw = xmalloc((a_floats + b_floats) * sizeof(float) + 128);
    float *apack = align64_(raw);
    float *bpack = apack + ((a_floats + 15) & ~(size_t)15);  // stays 64-byte aligned
    int m_tiles = (M + MC_ - 1) / MC_, n_tiles = (N + NC_ - 1) / NC_, tiles = m_tiles * n_tiles;

    for (int k0 = 0; k0 < K; k0 += KC_) {
        int kc = K - k0 < KC_ ? K - k0 : KC_;
        // the first K block overwrites C unless accumulating; later blocks add on
        int load_c = accumulate || k0 > 0;
        double flops = 2.0 * M * N * kc;
        (void)flops;  // unused without OpenMP
#pragma omp parallel if (flops > PAR_FLOPS_)
        {
            // the two packs are independent: no barrier between them, one before the compute
#pragma omp for schedule(static) nowait
            for (int p = 0; p < m_panels; p++) {
                pack_a_(apack + (size_t)p * MR_ * kc, A, M, K, transA, p * MR_, k0, kc);
            }
#pragma omp for schedule(static)
            for (int p = 0; p < n_panels; p++) {
                pack_b_(bpack + (size_t)p * NR_ * kc, B, N, K, transB, p * NR_, k0, kc);
            }
            // dynamic: edge tiles are smaller; which thread computes a tile never changes its result
#pragma omp for schedule(dynamic, 1)
            for (int t = 0; t < tiles; t++) {
                compute_tile_(kernel, C, apack, bpack, M, N, kc, t / n_tiles, t % n_tiles, load_c);
            }
        }
    }
    free(raw);
}

void matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int BT, int C, int OC) {
    // out is (BT,OC); inp is (BT,C); weight is (OC,C); bias is (OC,) or NULL
    if (BT <= 0 || OC <= 0) return;
    if (bias != NULL) {
        // start every row from the bias and accumulate the product onto it: saves a second pass over out
#pragma omp parallel for schedule(static) if ((double)BT * OC > 1e5)
        for (int bt = 0; bt < BT; bt++) memcpy(out + (size_t)bt * OC, bias, (size_t)OC * sizeof(float));
    }
    // out = inp @ weight^T: weight stored (OC,C) = (N,K), hence transB
    matmul(out, inp, weight, BT, OC, C, 0, 1, bias != NULL);
}

void matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                     const float *weight, int BT, int C, int OC) {
    // dinp is (BT,C); dweight is (OC,C); dbias is (OC,); dout is (BT,OC); inp is (BT,C); weight is (OC,C)
    // in the forward pass this was:
    // out[bt][o] = bias[o] + sum_c inp[bt][c] * weight[o][c]
    // so now we have:
    // dinp[bt][c] += sum_o dout[bt][o] * weight[o][c]      -> dout (BT,OC) @ weight (OC,C)
    // dweight[o][c] += sum_bt dout[bt][o] * inp[bt][c]     -> dout^T (OC,BT) @ inp (BT,C)
    // dbias[o] += sum_bt dout[bt][o]
    if (dinp != NULL) matmul(dinp, dout, weight, BT, C, OC, 0, 0, 1);
    if (dweight != NULL) matmul(dweight, dout, inp, OC, C, BT, 1, 0, 1);
    if (dbias != NULL && BT > 0) {
        // each thread owns a chunk of dbias and sums over bt in order: deterministic, no atomics
#pragma omp parallel for schedule(static) if ((double)BT * OC > 1e5)
        for (int o0 = 0; o0 < OC; o0 += 64) {
            int o1 = o0 + 64 < OC ? o0 + 64 : OC;
            for (int bt = 0; bt < BT; bt++) {
                const float *dout_bt = dout + (size_t)bt * OC;
                for (int o = o0; o < o1; o++) dbias[o] += dout_bt[o];
            }
        }
    }
}
