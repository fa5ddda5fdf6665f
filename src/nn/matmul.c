/*
 * Matrix multiply (see matmul.h). GotoBLAS/BLIS-style blocking, written for this project:
 *
 *   one parallel region per call; the output is cut into MT x NT tiles (plan_), handed out statically (from
 *   MM_GRAIN_THREADS_ threads on: dynamically, several per thread); a weight gradient with a small output and
 *   a long K is also cut into K slices (k_slices_), each computed over its own copy of the output, and these
 *   are then added onto C in order
 *   for each tile a thread owns:
 *     for each K block of kc (in order, so every C element is reduced over K in a fixed order)
 *       pack op(A)[tile rows, kblock] into MR_-row panels  (k-major inside a panel: a[k*MR_ + i]),
 *         only when A is stored transposed: a row-major A is read in place by the micro-kernel
 *         (MR_ row pointers), except for a last panel of fewer than MR_ rows
 *       pack op(B)[kblock, tile cols] into NR_-col panels  (k-major inside a panel: b[k*NR_ + j])
 *       for each MR_ x NR_ micro-tile: micro-kernel keeps the micro-tile in registers over kc
 *         (matmul_fused: starting from the bias row in the first K block; after the last K block, the
 *         epilogue runs on each finished MR_-row strip of the tile)
 *
 * Each thread packs into its own buffers, so there is no barrier anywhere inside the region: a thread
 * that gets descheduled on a busy machine delays only its own tiles, not every K block of everyone.
 * The C tile stays in cache across its K blocks instead of making one pass over all of C per K block.
 * When all of K is one block, consecutive tiles of a thread in the same tile row reuse the packed A.
 * Packing turns all four transA/transB layouts into the same contiguous, aligned B panels (and A panels or
 * in-place A rows), so one micro-kernel body serves every forward and backward layout, and the panels are
 * zero-padded to whole MR_/NR_ so the kernel never needs an edge case (edge micro-tiles go through a
 * small local tile).
 * Every output element is one fma chain over k = 0..K-1 starting from 0 (or C): K blocking only stores
 * and reloads the exact float, so neither the tiling nor the thread count changes a single bit. With K slices
 * it is one chain per slice, summed in slice order; the slices depend on the shape only, so the same holds.
 */
#include "nn/matmul.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "nn/colblock.h"
#include "nn/gelu.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#if ISA_AVX512 || ISA_AVX2
#include <immintrin.h>
#endif

// micro-tile shape per kernel set (nn/isa.h): as many accumulators as the register file holds, leaving room
// for the B loads and the A broadcast (AVX-512: 8 x 32 = 16 zmm accumulators of 32 registers; AVX2: the
// BLIS 6 x 16 = 12 ymm of 16; generic: the portable kernel, vectorised by the compiler)
#if ISA_AVX512
#define MR_ 8
#define NR_ 32
#elif ISA_AVX2
#define MR_ 6
#define NR_ 16
#else
#define MR_ 4
#define NR_ 16
#endif
// K block: an A micro-panel (MR_ x kc) stays in L1 while the B block streams from L2. K is cut into
// equal blocks of at most KC_ (no short tail block), rounded up to a multiple of 8 for the transposing packs.
#ifndef KC_
#define KC_ 256
#endif
#ifndef MT_MAX_
// output tile rows at most. Each tile repacks its B block per K block, so tall tiles amortize that; the
// A block (MT_MAX_ x KC_, 512 KiB) plus the B block still fit a 1-2 MiB L2 (the micro-kernel streams one
// 8 KiB A micro-panel at a time from it). The fastest of the heights tried (docs/results/speed_rounds.md,
// "Measurements moved from code comments")
#define MT_MAX_ 512
#endif
#ifndef NT_MAX_
#define NT_MAX_ 256  // output tile cols at most: the B block (KC_ x NT_MAX_, 256 KiB) stays in L2
#endif
// the same when A is read in place (no A block to keep in L2): with one K block, only by the B repacks (taller
// tiles repack B fewer times); with several, also by the C tile, which every K block reads and writes again
// and which should stay in L2/L3 (the fastest of the heights tried at the model's shapes:
// docs/results/speed_rounds.md, "Measurements moved from code comments")
#ifndef MT_MAX_IN_PLACE_
#define MT_MAX_IN_PLACE_ 4096
#endif
#ifndef MT_MAX_IN_PLACE_KBLOCKS_
#define MT_MAX_IN_PLACE_KBLOCKS_ 1024
#endif
#define PAR_FLOPS_ 2e6  // below this much work per call, waking threads costs more than it saves
// from this many threads on, each matmul is cut into MM_GRAIN_ tiles per thread, handed out dynamically, so
// that the threads finish together when some vCPUs of a shared machine run slow; with few threads the smaller
// tiles' extra packing costs more than that gains, so they keep one static run each
// (docs/results/speed_rounds.md, "16 threads again", change 1)
#define MM_GRAIN_THREADS_ 8
#define MM_GRAIN_ 4

// a: op(A) element (i,k) of the micro-panel at a[i*a_rs + k*a_ks]: a packed panel (a_rs 1, a_ks MR_) or
// MR_ rows of a row-major A read in place (a_rs = lda, a_ks 1). c0 (NR_,) or NULL: without load_c, every
// row's sums start from c0 (the bias) instead of 0
typedef void (*KernelFn)(int kc, const float *a, size_t a_rs, size_t a_ks, const float *b, float *c, size_t ldc,
                         int load_c, const float *c0);

// ----------------------------------------------------------------------------
// micro-kernels: c (MR_,NR_) with row stride ldc  (=|+)=  a (MR_,kc) @ b panel (kc,NR_)
// load_c = 0 starts from zero or c0 (overwrite), 1 adds to what c holds. All use one fma per k per element
// in k order, so the portable and SIMD kernels give bit-identical results, packed A or not.

// the generic set's kernel; compiled (unused) into the SIMD sets too, so it never rots
static __attribute__((unused)) void kernel_portable_(int kc, const float *a, size_t a_rs, size_t a_ks, const float *b, float *c,
                             size_t ldc, int load_c, const float *c0) {
    float acc[MR_][NR_];
    for (int i = 0; i < MR_; i++) {
        for (int j = 0; j < NR_; j++) acc[i][j] = load_c ? c[i * ldc + j] : (c0 ? c0[j] : 0.0f);
    }
    for (int k = 0; k < kc; k++) {
        const float *a_k = a + (size_t)k * a_ks;
        const float *b_k = b + (size_t)k * NR_;
        for (int i = 0; i < MR_; i++) {
            float a_ki = a_k[i * a_rs];
            // fmaf, not a*b+c: ISO C mode compiles a*b+c unfused, and we want the same rounding as SIMD
            for (int j = 0; j < NR_; j++) acc[i][j] = fmaf(a_ki, b_k[j], acc[i][j]);
        }
    }
    for (int i = 0; i < MR_; i++) {
        for (int j = 0; j < NR_; j++) c[i * ldc + j] = acc[i][j];
    }
}

// SIMD kernels: MR_ rows x 2 vectors (NR_ cols) of accumulators, as many as the register file holds next
// to the two B vectors and the A broadcast. The accumulators are named variables, one pair per row
// (FOR_ROWS_), not an array: gcc kept an array of 12 ymm accumulators in registers but also stored all of
// them to the stack on every k step, which held the AVX2 kernel to a third of the FMA peak.
#if ISA_AVX512
#define VEC_ __m512
#define VW_ 16
#define VLOAD_ _mm512_load_ps
#define VLOADU_ _mm512_loadu_ps
#define VSTOREU_ _mm512_storeu_ps
#define VZERO_ _mm512_setzero_ps
#define VBCAST_(p) _mm512_set1_ps(*(p))
#define VFMA_ _mm512_fmadd_ps
#define FOR_ROWS_(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define HAVE_SIMD_KERNEL_ 1
#elif ISA_AVX2
#define VEC_ __m256
#define VW_ 8
#define VLOAD_ _mm256_load_ps
#define VLOADU_ _mm256_loadu_ps
#define VSTOREU_ _mm256_storeu_ps
#define VZERO_ _mm256_setzero_ps
#define VBCAST_(p) _mm256_broadcast_ss(p)
#define VFMA_ _mm256_fmadd_ps
#define FOR_ROWS_(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define HAVE_SIMD_KERNEL_ 1
#endif

#ifdef HAVE_SIMD_KERNEL_
// row i's two accumulators: from c, the bias row c0, or zero; one k step (A_AT_(i, k) reads op(A)(i,k), defined
// by each kernel below); the store back
#define ACC_INIT_(i)                                                                   \
    VEC_ acc0_##i = load_c ? VLOADU_(c + (i) * ldc) : c0 ? VLOADU_(c0) : VZERO_();      \
    VEC_ acc1_##i = load_c ? VLOADU_(c + (i) * ldc + VW_) : c0 ? VLOADU_(c0 + VW_) : VZERO_();
#define ACC_STEP_(i)                            \
    {                                           \
        VEC_ a_ki = VBCAST_(&A_AT_(i, k));      \
        acc0_##i = VFMA_(a_ki, b0, acc0_##i);   \
        acc1_##i = VFMA_(a_ki, b1, acc1_##i);   \
    }
#define ACC_STORE_(i)                            \
    VSTOREU_(c + (i) * ldc, acc0_##i);           \
    VSTOREU_(c + (i) * ldc + VW_, acc1_##i);
#define KERNEL_BODY_                                     \
    FOR_ROWS_(ACC_INIT_)                                 \
    for (int k = 0; k < kc; k++) {                       \
        VEC_ b0 = VLOAD_(b + (size_t)k * NR_);           \
        VEC_ b1 = VLOAD_(b + (size_t)k * NR_ + VW_);     \
        FOR_ROWS_(ACC_STEP_)                             \
    }                                                    \
    FOR_ROWS_(ACC_STORE_)

static void kernel_simd_packed_(int kc, const float *a, const float *b, float *c, size_t ldc, int load_c,
                                const float *c0) {
#define A_AT_(i, k) a[(size_t)(k) * MR_ + (i)]
    KERNEL_BODY_
#undef A_AT_
}

// MR_ rows of a row-major A read in place: one base register per row, indexed by k, so no packing pass and
// no extra address arithmetic
static void kernel_simd_rows_(int kc, const float *a, size_t lda, const float *b, float *c, size_t ldc,
                              int load_c, const float *c0) {
    const float *a_r[MR_];
    for (int i = 0; i < MR_; i++) a_r[i] = a + i * lda;
#define A_AT_(i, k) a_r[i][k]
    KERNEL_BODY_
#undef A_AT_
}
#undef KERNEL_BODY_

static void kernel_simd_(int kc, const float *a, size_t a_rs, size_t a_ks, const float *b, float *c, size_t ldc,
                         int load_c, const float *c0) {
    if (a_ks == 1) {
        kernel_simd_rows_(kc, a, a_rs, b, c, ldc, load_c, c0);
    } else {
        kernel_simd_packed_(kc, a, b, c, ldc, load_c, c0);
    }
}
#endif

// ----------------------------------------------------------------------------
// packing

#if ISA_AVX512 || ISA_AVX2
// dst[k*ldd + i] = src[i*lds + k] for i, k < 8: an 8x8 transpose in registers, so the transposing packs
// read whole 32-byte rows and write whole 32-byte rows instead of moving one float at a time
static inline void transpose8x8_(const float *src, size_t lds, float *dst, size_t ldd) {
    __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + lds);
    __m256 r2 = _mm256_loadu_ps(src + 2 * lds), r3 = _mm256_loadu_ps(src + 3 * lds);
    __m256 r4 = _mm256_loadu_ps(src + 4 * lds), r5 = _mm256_loadu_ps(src + 5 * lds);
    __m256 r6 = _mm256_loadu_ps(src + 6 * lds), r7 = _mm256_loadu_ps(src + 7 * lds);
    // interleave row pairs: t0 = r0[0] r1[0] r0[1] r1[1] | r0[4] r1[4] r0[5] r1[5], ...
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    // 4-row columns: s0 = col 0 of rows 0-3 | col 4 of rows 0-3, s1 = cols 1|5, s2 = cols 2|6, s3 = cols 3|7
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    // join the rows 0-3 and rows 4-7 halves of each column
    _mm256_storeu_ps(dst, _mm256_permute2f128_ps(s0, s4, 0x20));
    _mm256_storeu_ps(dst + ldd, _mm256_permute2f128_ps(s1, s5, 0x20));
    _mm256_storeu_ps(dst + 2 * ldd, _mm256_permute2f128_ps(s2, s6, 0x20));
    _mm256_storeu_ps(dst + 3 * ldd, _mm256_permute2f128_ps(s3, s7, 0x20));
    _mm256_storeu_ps(dst + 4 * ldd, _mm256_permute2f128_ps(s0, s4, 0x31));
    _mm256_storeu_ps(dst + 5 * ldd, _mm256_permute2f128_ps(s1, s5, 0x31));
    _mm256_storeu_ps(dst + 6 * ldd, _mm256_permute2f128_ps(s2, s6, 0x31));
    _mm256_storeu_ps(dst + 7 * ldd, _mm256_permute2f128_ps(s3, s7, 0x31));
}
#define HAVE_TRANSPOSE8_ 1
#endif

// dst (kc, w) with row stride ldd = src (w, kc) with row stride lds, transposed, for w <= 8 rows of
// src (dst columns past w are left alone). Whole 8x8 blocks go through registers when w == 8.
static void pack_transpose_(float *dst, size_t ldd, const float *src, size_t lds, int w, int kc) {
    int k = 0;
#ifdef HAVE_TRANSPOSE8_
    if (w == 8) {
        for (; k + 8 <= kc; k += 8) transpose8x8_(src + k, lds, dst + (size_t)k * ldd, ldd);
    }
#endif
    for (int i = 0; i < w; i++) {
        const float *s_i = src + (size_t)i * lds;
        for (int kk = k; kk < kc; kk++) dst[(size_t)kk * ldd + i] = s_i[kk];
    }
}

// dst (kc, MR_) = op(A)[i0 : i0+MR_, k0 : k0+kc], rows past M zero-filled, for A stored (M,K) (!transA):
// element (i,k) at A[i*K + k], so an (mr, kc) block is transposed into the panel, in 8-row groups
static void pack_a_rows_(float *dst, const float *A, int M, int K, int i0, int k0, int kc) {
    int mr = M - i0 < MR_ ? M - i0 : MR_;
    for (int g = 0; g < MR_; g += 8) {
        int w = mr - g < 8 ? mr - g : 8;
        if (w > 0) pack_transpose_(dst + g, MR_, A + (size_t)(i0 + g) * K + k0, (size_t)K, w, kc);
    }
    if (mr < MR_) {
        for (int k = 0; k < kc; k++) {
            for (int i = mr; i < MR_; i++) dst[(size_t)k * MR_ + i] = 0.0f;
        }
    }
}

// panels (each (kc, w)) = X[k0 : k0+kc, c0 : c_end] for X stored (K, ld) with the panel direction
// contiguous (A when transA, B when !transB); columns past c_end zero-filled. Walks X in chunks of KCHUNK_
// rows, every panel per chunk: the chunk's row segments (KCHUNK_ x tile width) stay in L1 and each panel
// gets a contiguous KCHUNK_ x w run. Walking one panel over all kc instead touches a different page per k
// when ld is large (the LM head dW: A^T rows are V floats apart); walking one row over all panels writes
// to panels kc*w floats apart, which all fall in the same L1 set.
#define KCHUNK_ 16
static void pack_rows_contig_(float *dst, const float *X, size_t ld, int c0, int c_end, int w, int k0, int kc,
                              int panels) {
    for (int kb = 0; kb < kc; kb += KCHUNK_) {
        int ke = kb + KCHUNK_ < kc ? kb + KCHUNK_ : kc;
        for (int p = 0; p < panels; p++) {
            int c = c0 + p * w, n = c_end - c < w ? c_end - c : w;
            for (int k = kb; k < ke; k++) {
                const float *x_k = X + (size_t)(k0 + k) * ld + c;
                float *d = dst + (size_t)p * w * kc + (size_t)k * w;
                if (n == w) {
                    // w is MR_ (A panels) or NR_ (B panels): constant sizes, so the copy is inlined as vector
                    // moves (a memcpy call per 32 bytes cost more than the copy)
                    if (w == MR_) {
                        memcpy(d, x_k, MR_ * sizeof(float));
                    } else {
                        memcpy(d, x_k, NR_ * sizeof(float));
                    }
                } else {
                    for (int j = 0; j < n; j++) d[j] = x_k[j];
                    for (int j = n; j < w; j++) d[j] = 0.0f;
                }
            }
        }
    }
}

// dst (kc, NR_) = op(B)[k0 : k0+kc, j0 : j0+NR_], cols past N zero-filled, for B stored (N,K) (transB,
// the Linear weight layout): element (k,j) at B[j*K + k], transposed 8 rows of B at a time
static void pack_b_cols_(float *dst, const float *B, int N, int K, int j0, int k0, int kc) {
    int nr = N - j0 < NR_ ? N - j0 : NR_;
    for (int g = 0; g < NR_; g += 8) {
        int w = nr - g < 8 ? nr - g : 8;
        if (w > 0) pack_transpose_(dst + g, NR_, B + (size_t)(j0 + g) * K + k0, (size_t)K, w, kc);
    }
    if (nr < NR_) {
        for (int k = 0; k < kc; k++) {
            for (int j = nr; j < NR_; j++) dst[(size_t)k * NR_ + j] = 0.0f;
        }
    }
}

// ----------------------------------------------------------------------------
// per-thread buffers: the packing buffer (allocated on a thread's first call at the fixed maximum size) and the
// K slices' scratch of a calling thread (grown as needed), reused by every later call (no malloc in the hot
// path; the OpenMP pool threads live as long as the process). Every block is also linked into one list that an
// atexit handler frees, so nothing is left to leak.

#define APACK_FLOATS_ ((size_t)MT_MAX_ * KC_)  // A block (MT_MAX_ rows, KC_)
#define BPACK_FLOATS_ ((size_t)KC_ * NT_MAX_)  // B block (KC_, NT_MAX_ cols)
#define BLOCK_HDR_ 64  // a block's list link, padded to a cache line (xmalloc's blocks start on one)

static _Thread_local float *pack_buf_ = NULL;  // this thread's buffer: APACK_FLOATS_ + BPACK_FLOATS_
static _Thread_local size_t pack_cap_ = 0;
static void *block_list_ = NULL;  // every thread's raw blocks; each starts with the next pointer
static int block_atexit_ = 0;

static void free_blocks_(void) {
    while (block_list_ != NULL) {
        void *next = *(void **)block_list_;
        free(block_list_);
        block_list_ = next;
    }
}

// *buf: this thread's block of at least n floats (*cap of them), on a cache line (the kernels use aligned panel
// loads); a smaller block it held is freed
static float *thread_block_(float **buf, size_t *cap, size_t n) {
    if (*cap >= n) return *buf;
    char *raw = (char *)xmalloc(n * sizeof(float) + BLOCK_HDR_);
    char *old = *buf ? (char *)*buf - BLOCK_HDR_ : NULL;
#pragma omp critical(matmul_block_list)
    {
        if (!block_atexit_) atexit(free_blocks_);
        block_atexit_ = 1;
        void **link = &block_list_;
        while (old && *link && *link != old) link = (void **)*link;
        if (old && *link == old) *link = *(void **)old;
        *(void **)raw = block_list_;
        block_list_ = raw;
    }
    free(old);
    *buf = (float *)(raw + BLOCK_HDR_);
    *cap = n;
    return *buf;
}

// ----------------------------------------------------------------------------
// tiling

typedef struct Tiling {
    int mt, nt;              // output tile rows (multiple of MR_) and cols (multiple of NR_)
    int m_tiles, n_tiles;    // tile grid
    int kc;                  // K block (the last one may be shorter)
} Tiling;

// choose the tile shape: big tiles amortize packing (each tile repacks its A rows and B cols per K block),
// but the tile count must split evenly over the threads. Scores each candidate by the rows x cols a thread
// computes in the slowest share (padding included), inflated by the packing overhead of small tiles.
// With A read in place only the height is searched (a narrower tile would read the A rows once more per
// column tile, which the score does not count); with A packed (the weight gradients) the width too: the
// full width would leave few, short tiles for many threads on a small output with a long K (the q|k|v
// weight gradient, 512 x 256 over K 4096, as 64 tiles of 8 x 256 at 16 threads would repack all of B (K x 256)
// for every 8 rows; 32 x 64 tiles copy 2.75x less; docs/results/speed_rounds.md, "16 threads again", change 3)
static Tiling plan_(int M, int N, int K, int threads, int a_in_place) {
    Tiling t = {0};
    int n_full = (N + NR_ - 1) / NR_ * NR_, m_full = (M + MR_ - 1) / MR_ * MR_;
    // A read in place has no A block to keep in L2, so tiles may be taller: each tile packs its B block
    // once per K block, so fewer, taller tiles pack B fewer times
    // (a packed A block must fit apack: MT_MAX_ rounded down to whole panels, 510 rows for the AVX2 set's
    // MR_ 6; rounding up to 516 would let the last panel run into bpack and overwrite part of it)
    int mt_max = !a_in_place ? MT_MAX_ / MR_ * MR_
                             : ((K <= KC_ ? MT_MAX_IN_PLACE_ : MT_MAX_IN_PLACE_KBLOCKS_) + MR_ - 1) / MR_ * MR_;
    int nt_top = n_full < NT_MAX_ ? n_full : NT_MAX_;
    int nt_min = a_in_place ? nt_top : NR_;
    double best = 1e300;
    for (int nt_try = nt_top; nt_try >= nt_min; nt_try -= NR_) {
        int n_tiles = (N + nt_try - 1) / nt_try;
        // even N tiles: e.g. N = 288 as 160 + 128 rather than 256 + 32
        int cols = ((N + n_tiles - 1) / n_tiles + NR_ - 1) / NR_ * NR_;
        for (int m_tiles = (M + mt_max - 1) / mt_max; m_tiles <= m_full / MR_; m_tiles++) {
            int rows = (M + m_tiles - 1) / m_tiles;  // rows of the tiles if spread evenly
            rows = (rows + MR_ - 1) / MR_ * MR_;
            if (rows > mt_max) continue;
            long tiles = (long)m_tiles * n_tiles;
            long share = (tiles + threads - 1) / threads;
            // packing: per tile and K element, A costs ~ rows/8 and B ~ cols/8 micro-kernel steps' worth
            double cost = (double)share * rows * cols * (1.0 + 8.0 / rows + (a_in_place ? 0.0 : 8.0 / cols));
            if (cost < best * 0.999) {
                best = cost;
                t.mt = rows;
                t.nt = cols;
                t.n_tiles = n_tiles;
            }
        }
    }
    t.m_tiles = (M + t.mt - 1) / t.mt;
    int k_blocks = (K + KC_ - 1) / KC_;
    t.kc = (K + k_blocks - 1) / k_blocks;
    t.kc = (t.kc + 7) / 8 * 8;
    if (t.kc > KC_) t.kc = KC_;
    return t;
}

// the fused elementwise step on the final values of C rows [i0, i0+mr) x cols [j0, j0+nr) (c points at
// (i0, j0), row stride ldc): the same operations as the separate pass (nn/activation.c), on the strip of
// rows the micro-kernel has just finished (still in L1/L2) instead of on all of C after the matmul
static void epilogue_(const MatmulFuse *f, float *c, size_t ldc, int i0, int j0, int mr, int nr) {
    for (int i = 0; i < mr; i++) {
        float *c_i = c + (size_t)i * ldc;
        size_t off = (size_t)(i0 + i) * ldc + j0;
        if (f->epi == MM_EPI_GELU) {
            float *act = f->act + off;
            for (int j = 0; j < nr; j++) act[j] = gelu_value_(c_i[j]);
        } else if (f->epi == MM_EPI_GELU_GRAD) {
            const float *pre = f->pre + off;
            for (int j = 0; j < nr; j++) c_i[j] = gelu_grad_(pre[j]) * c_i[j];
        }
    }
}

// the epilogue's operand (GELU: act, written; GELU': pre, read) at rows [i0, i0+mr) x cols [j0, j0+nr), requested
// before the panel's micro-kernels run so that it arrives while they compute. The epilogue reads it in short runs
// (a tile's width per row, rows ldc floats apart) that the hardware prefetchers do not pick up: without this the
// GELU' epilogue waits on memory and costs more than a separate pass over the whole array
// (docs/results/speed_rounds.md, "Fourth session")
static void epilogue_prefetch_(const MatmulFuse *f, size_t ldc, int i0, int j0, int mr, int nr) {
    const float *p = f->epi == MM_EPI_GELU ? f->act : f->pre;
    int write = f->epi == MM_EPI_GELU;
    for (int i = 0; i < mr; i++) {
        const char *row = (const char *)(p + (size_t)(i0 + i) * ldc + j0);
        for (size_t b = 0; b < (size_t)nr * sizeof(float); b += 64) {
            if (write) __builtin_prefetch(row + b, 1, 2);
            else __builtin_prefetch(row + b, 0, 2);
        }
    }
}

// one output tile (rows i_begin.., cols j_begin..) over k in [k_begin, k_end) (all of K, or one K slice); K is
// the full length (the row stride of A or B where they are stored with k along their rows)
static void compute_tile_(KernelFn kernel, float *buf, float *C, const float *A, const float *B, int M, int N,
                          int K, int transA, int transB, int accumulate, int i_begin, int i_end, int j_begin,
                          int j_end, int k_begin, int k_end, int kc_max, int a_packed, const MatmulFuse *f) {
    const float *bias = f && !accumulate ? f->bias : NULL;
    int epi = f && f->epi != MM_EPI_NONE;
    float *apack = buf, *bpack = buf + APACK_FLOATS_;
    int m_panels = (i_end - i_begin + MR_ - 1) / MR_, n_panels = (j_end - j_begin + NR_ - 1) / NR_;
    for (int k0 = k_begin; k0 < k_end; k0 += kc_max) {
        int kc = k_end - k0 < kc_max ? k_end - k0 : kc_max;
        // the first K block overwrites C (starting from the bias, if any) unless accumulating; later blocks
        // add on; the last one leaves the final values for the epilogue
        int load_c = accumulate || k0 > k_begin, last = k0 + kc >= k_end;
        // apack: m_panels x (kc, MR_); bpack: n_panels x (kc, NR_)
        if (a_packed || !transA) {
            // apack already holds these rows over all of K (one K block), packed by the previous tile; or
            // A is row-major and the kernel reads its rows in place (only a short edge panel is packed)
        } else {
            pack_rows_contig_(apack, A, (size_t)M, i_begin, i_end, MR_, k0, kc, m_panels);
        }
        if (transB) {
            for (int p = 0; p < n_panels; p++) {
                pack_b_cols_(bpack + (size_t)p * NR_ * kc, B, j_end, K, j_begin + p * NR_, k0, kc);
            }
        } else {
            pack_rows_contig_(bpack, B, (size_t)N, j_begin, j_end, NR_, k0, kc, n_panels);
        }
        for (int p = 0; p < m_panels; p++) {
            int i0 = i_begin + p * MR_;
            int mr = i_end - i0 < MR_ ? i_end - i0 : MR_;
            // op(A) panel rows i0.., K block k0..: in place (row stride K) or packed (k-major, MR_ wide)
            const float *a_p = apack + (size_t)p * MR_ * kc;
            size_t a_rs = 1, a_ks = MR_;
            if (!transA) {
                if (mr == MR_) {
                    a_p = A + (size_t)i0 * K + k0;
                    a_rs = (size_t)K;
                    a_ks = 1;
                } else {
                    a_p = apack;  // the last rows of A: packed, zero-filled past M
                    pack_a_rows_(apack, A, i_end, K, i0, k0, kc);
                }
            }
            if (last && epi) epilogue_prefetch_(f, N, i0, j_begin, mr, j_end - j_begin);
            for (int q = 0; q < n_panels; q++) {
                int j0 = j_begin + q * NR_;
                const float *b_p = bpack + (size_t)q * NR_ * kc;
                int nr = j_end - j0 < NR_ ? j_end - j0 : NR_;
                float *c_ij = C + (size_t)i0 * N + j0;
                const float *c0 = bias && !load_c ? bias + j0 : NULL;
                if (mr == MR_ && nr == NR_) {
                    kernel(kc, a_p, a_rs, a_ks, b_p, c_ij, (size_t)N, load_c, c0);
                } else {
                    // edge: run the full-size kernel on a local tile (and bias row), copy back only the valid part
                    float tile[MR_ * NR_], c0_tile[NR_] = {0};
                    memset(tile, 0, sizeof tile);
                    if (load_c) {
                        for (int i = 0; i < mr; i++) memcpy(tile + i * NR_, c_ij + (size_t)i * N, nr * sizeof(float));
                    }
                    if (c0) memcpy(c0_tile, c0, nr * sizeof(float));
                    kernel(kc, a_p, a_rs, a_ks, b_p, tile, NR_, load_c, c0 ? c0_tile : NULL);
                    for (int i = 0; i < mr; i++) memcpy(c_ij + (size_t)i * N, tile + i * NR_, nr * sizeof(float));
                }
            }
            // the panel's rows of the tile are final: one strip of mr rows x the tile's columns
            if (last && epi) epilogue_(f, C + (size_t)i0 * N + j_begin, (size_t)N, i0, j_begin, mr, j_end - j_begin);
        }
    }
}

// ----------------------------------------------------------------------------

// A few rows against a Linear layer's weight, stored (N,K) (transB), as decoding gives (one token per
// sequence): the tiled path would pack all of B for them and run MR_ - M padded rows, several times the
// work of reading B once. Each output is the same single fma chain over k in increasing order from the
// bias (or 0, or C when accumulating) as in every micro-kernel, so the bits are those of the tiled path.
#define ROWS_MAX_ 4  // M up to this takes the row path
#define ROWS_NB_ 8   // outputs per block: independent fma chains for the pipeline

static void rows_transb_(float *C, const float *A, const float *B, int M, int N, int K, int accumulate,
                         const float *bias, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int n0 = 0; n0 < N; n0 += ROWS_NB_) {
        int nb = N - n0 < ROWS_NB_ ? N - n0 : ROWS_NB_;
        for (int i = 0; i < M; i++) {
            const float *a = A + (size_t)i * K;
            float *c = C + (size_t)i * N + n0, acc[ROWS_NB_];
            for (int j = 0; j < nb; j++) acc[j] = accumulate ? c[j] : (bias ? bias[n0 + j] : 0.0f);
            if (nb == ROWS_NB_) {
                const float *b = B + (size_t)n0 * K;
                for (int k = 0; k < K; k++)
                    for (int j = 0; j < ROWS_NB_; j++) acc[j] = fmaf(a[k], b[(size_t)j * K + k], acc[j]);
            } else {
                for (int j = 0; j < nb; j++) {
                    const float *b = B + (size_t)(n0 + j) * K;
                    for (int k = 0; k < K; k++) acc[j] = fmaf(a[k], b[k], acc[j]);
                }
            }
            for (int j = 0; j < nb; j++) c[j] = acc[j];
        }
    }
}

// work item `item` of a call: K slice item / tiles (k in [slice * k_len, +k_len), into C for slice 0, else into
// its part of the scratch, from zero), tile item % tiles of plan t (row-major over the tile grid). A thread's
// consecutive tiles often share their tile row (always under the static schedule), and when the k range is one
// K block they then share its packed A too (the LM head forward: 32 column tiles per row): *last_ti is the row
// (numbered per slice) this thread's apack holds
static void run_item_(KernelFn kernel, float *buf, float *C, float *scratch, const float *A, const float *B, int M,
                      int N, int K, int k_len, int transA, int transB, int accumulate, const Tiling *t, int item,
                      int *last_ti, const MatmulFuse *f) {
    int tiles = t->m_tiles * t->n_tiles, slice = item / tiles, tile = item % tiles;
    int k_begin = slice * k_len, k_end = k_begin + k_len < K ? k_begin + k_len : K;
    float *out = slice ? scratch + (size_t)(slice - 1) * M * N : C;
    int ti = tile / t->n_tiles, tj = tile % t->n_tiles;
    int i_begin = ti * t->mt, j_begin = tj * t->nt;
    int i_end = i_begin + t->mt < M ? i_begin + t->mt : M;
    int j_end = j_begin + t->nt < N ? j_begin + t->nt : N;
    int row_id = slice * t->m_tiles + ti;
    int a_packed = row_id == *last_ti && k_end - k_begin <= t->kc;
    compute_tile_(kernel, buf, out, A, B, M, N, K, transA, transB, slice ? 0 : accumulate, i_begin, i_end, j_begin,
                  j_end, k_begin, k_end, t->kc, a_packed, f);
    *last_ti = row_id;
}

// K slices: a weight gradient (transA: K = the tokens) with a small output and a long K is cut into slices
// of K that are computed independently (slice 0 into C, the others from zero into a scratch), then added onto
// C in slice order. Without them, 16 threads cut a 512 x 256 output (the q, k, v weight gradients over 4096
// tokens) into 64 tiles of 32 x 64, and each tile repacks its A rows and B columns over all of K: as much
// copying as computing (docs/results/speed_rounds.md, "K slices for the weight gradients"). With 4 slices the
// same threads get 4x larger tiles.
// The slices depend on M, N and K only, never on the thread count, so the bits do not either; they do differ
// from one fma chain over all of K (each slice's chain starts from 0, and the slices are then summed).
#define KSPLIT_MIN_K_ 2048           // shorter K: no slices
#define KSPLIT_MAX_OUT_ (1L << 19)   // outputs up to this many elements (larger ones have tiles enough)
#define KSPLIT_LEN_ 1024             // slice length (4 K blocks), so slices = K / 1024 ...
#define KSPLIT_MAX_ 8                // ... up to 8 (the scratch holds slices - 1 outputs)

static int k_slices_(int M, int N, int K, int transA, const MatmulFuse *f) {
    if (!transA || K < KSPLIT_MIN_K_ || (long)M * N > KSPLIT_MAX_OUT_) return 1;
    if (f && (f->bias || f->epi != MM_EPI_NONE)) return 1;  // the bias and epilogues belong to one chain
    int s = (K + KSPLIT_LEN_ - 1) / KSPLIT_LEN_;
    return s < KSPLIT_MAX_ ? s : KSPLIT_MAX_;
}

// the calling thread's scratch for the slices past the first, grown as needed and kept for later calls
static _Thread_local float *slice_buf_ = NULL;
static _Thread_local size_t slice_cap_ = 0;  // floats

void matmul(float *C, const float *A, const float *B, int M, int N, int K, int transA, int transB, int accumulate) {
    matmul_fused(C, A, B, M, N, K, transA, transB, accumulate, NULL);
}

void matmul_fused(float *C, const float *A, const float *B, int M, int N, int K, int transA, int transB,
                  int accumulate, const MatmulFuse *f) {
    // C is (M,N); op(A) is (M,K); op(B) is (K,N); f->bias (N,); f->act, f->pre (M,N)
    if (M <= 0 || N <= 0) return;
    if (f && f->bias && accumulate) {
        fprintf(stderr, "matmul_fused: a bias with accumulate is not supported (add the bias to C first)\n");
        abort();
    }
    if (K <= 0) {
        // an empty sum: C = 0 (or the bias), or C unchanged when accumulating; then the epilogue
        if (!accumulate) {
            for (int i = 0; i < M; i++) {
                float *c_i = C + (size_t)i * N;
                if (f && f->bias) memcpy(c_i, f->bias, (size_t)N * sizeof(float));
                else memset(c_i, 0, (size_t)N * sizeof(float));
            }
        }
        if (f && f->epi != MM_EPI_NONE) epilogue_(f, C, (size_t)N, 0, 0, M, N);
        return;
    }
#ifdef HAVE_SIMD_KERNEL_
    KernelFn kernel = kernel_simd_;
#else
    KernelFn kernel = kernel_portable_;
#endif
    int threads = 1;
#ifdef _OPENMP
    if (2.0 * M * N * K > PAR_FLOPS_ && !omp_in_parallel()) threads = omp_get_max_threads();
#endif
    if (M <= ROWS_MAX_ && transB && !transA && !(f && f->epi != MM_EPI_NONE)) {
        rows_transb_(C, A, B, M, N, K, accumulate, f ? f->bias : NULL, threads);
        return;
    }
    // many threads: plan for MM_GRAIN_ tiles per thread and hand them out dynamically (below); with K slices,
    // the slices share those tiles
    int grain = threads >= MM_GRAIN_THREADS_ ? MM_GRAIN_ : 1;
    int slices = k_slices_(M, N, K, transA, f);
    int k_len = slices > 1 ? ((K + slices - 1) / slices + 7) / 8 * 8 : K;  // slice length (the last may be shorter)
    int units = threads * grain / slices;
    Tiling t = plan_(M, N, k_len, units > 1 ? units : 1, !transA);
    int tiles = t.m_tiles * t.n_tiles, items = slices * tiles;
    size_t mn = (size_t)M * N;
    float *scratch = slices > 1 ? thread_block_(&slice_buf_, &slice_cap_, (size_t)(slices - 1) * mn) : NULL;
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        float *buf = thread_block_(&pack_buf_, &pack_cap_, APACK_FLOATS_ + BPACK_FLOATS_);
        int last_ti = -1;  // tile row whose A block this thread's apack holds (when K is a single block)
        // which thread computes a tile never changes its result, so the schedule is free to choose:
        // static (one contiguous run of tiles per thread, no shared counter) with few threads; dynamic with
        // many, where a thread that the machine slows down (a shared virtual machine's vCPU) would otherwise
        // hold every other thread at the end of each matmul
        if (grain > 1) {
#pragma omp for schedule(dynamic, 1)
            for (int item = 0; item < items; item++) run_item_(kernel, buf, C, scratch, A, B, M, N, K, k_len, transA,
                                                              transB, accumulate, &t, item, &last_ti, f);
        } else {
#pragma omp for schedule(static)
            for (int item = 0; item < items; item++) run_item_(kernel, buf, C, scratch, A, B, M, N, K, k_len, transA,
                                                              transB, accumulate, &t, item, &last_ti, f);
        }
        // the slices past the first onto C, in slice order (after the loop's barrier: every slice is done)
        if (slices > 1) {
#pragma omp for schedule(static)
            for (int i = 0; i < M; i++) {
                float *c_i = C + (size_t)i * N;
                for (int s = 1; s < slices; s++) {
                    const float *p_i = scratch + (size_t)(s - 1) * mn + (size_t)i * N;
                    for (int j = 0; j < N; j++) c_i[j] += p_i[j];
                }
            }
        }
    }
}

void matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int BT, int C, int OC) {
    // out is (BT,OC); inp is (BT,C); weight is (OC,C); bias is (OC,) or NULL
    // out = inp @ weight^T: weight stored (OC,C) = (N,K), hence transB; every output's sum starts from its
    // bias inside the micro-kernel (no pass over out to fill in the bias first)
    matmul_fused(out, inp, weight, BT, OC, C, 0, 1, 0, &(MatmulFuse){.bias = bias});
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
        // each thread owns a block of dbias columns (nn/colblock.h) and sums over bt in order: deterministic,
        // no atomics
        int w = col_block_width_(OC);
#pragma omp parallel for schedule(static) if ((double)BT * OC > 1e5)
        for (int o0 = 0; o0 < OC; o0 += w) {
            int o1 = o0 + w < OC ? o0 + w : OC;
            for (int bt = 0; bt < BT; bt++) {
                const float *dout_bt = dout + (size_t)bt * OC;
                for (int o = o0; o < o1; o++) dbias[o] += dout_bt[o];
            }
        }
    }
}
