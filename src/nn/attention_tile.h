/*
 * The tile kernels and per-head options of the tiled attention (nn/attention.h), shared by the forward
 * (nn/attention.c) and the backward (nn/attention_backward.c). Private to those two files: every function
 * here is static, so each file gets its own copy, compiled once per kernel set like the files themselves.
 *
 * Tiles: up to ATTN_BR query rows x ATTN_BC keys (both 64). Every tile costs a handful of small matrix
 * products, each done by a register-blocked micro-kernel (ATTN_MR = 6 output rows x 64 columns, i.e. 24
 * AVX-512 accumulators, kept in registers across the whole reduction, like nn/matmul.c):
 *
 *   dot_tile_   C (n, 64) = A (n, HS) @ Bt (HS, 64)      Bt a transposed (HS, 64) tile, zero-padded
 *   acc_tile_   Y (n, HS) (*alpha) += A' (n, m) @ X (m, HS)   A' read with any strides (A or its transpose)
 *
 * Every output element is one fma chain over the reduction index in increasing order, whatever the
 * blocking, so the SIMD kernels (16-lane vectors, nn/simd16.h: the avx512 and avx2 kernel sets) and the plain
 * C ones (always compiled; the generic set's path) give bit-identical results. The elementwise parts (logits,
 * masks, exp, sums) do the same float operations in the same order in both paths too: sums that vectorise run over
 * 16 interleaved partial sums (lane u takes the terms u, u+16, ...) folded by a fixed tree. Terms that the
 * causal or window mask zeroes are skipped per register block (the same blocks in both paths), which
 * saves about half of the products of the diagonal tiles.
 *
 * The exponential is exp_neg_ below (range reduction + polynomial, ~2 ulp, 0 below -87), with an
 * AVX-512 twin doing the identical operations; its arguments are <= 0 up to rounding, except the decay
 * factor of masked entries in the forward, which the clamp at 88 keeps finite (it multiplies a 0). A NaN
 * argument (a diverged model) gives NaN in every kernel set, without undefined behaviour, so it reaches the
 * loss and the trainer's non-finite stop.
 */
#ifndef SEQ_NN_ATTENTION_TILE_H
#define SEQ_NN_ATTENTION_TILE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "nn/attention.h"


// the SIMD kernels in the avx512 and avx2 copies (nn/isa.h), on 16-lane vectors; the plain C ones in the
// generic copy. All give the same bits (tests compare every kernel set the machine has)
#if ISA_AVX512 || ISA_AVX2
#define ATTN_SIMD_ 1
#include "nn/simd16.h"
#endif

// query rows and keys per tile: a (64, 64) logit tile, a (HS, 64) transposed tile and a (64, HS)
// accumulator tile stay in L1/L2 for HS <= 128; 64 columns are 4 AVX-512 vectors
#define ATTN_BR 64
#define ATTN_BC 64
// output rows per register block of the micro-kernels: 6 rows x 4 vectors = 24 of the 32 zmm registers,
// leaving room for the 4 vectors loaded per reduction step and the broadcast
#define ATTN_MR 6
// 16-column vectors (v16f) per register block: AVX-512 holds all 4 of a 64-column tile (24 zmm); with AVX2
// a v16f is 2 ymm, so one vector at a time (6 rows x 2 ymm = 12 of the 16 ymm registers) and the block
// repeats for each vector. Every output element is the same fma chain either way.
#if ISA_AVX512
#define ATTN_VB 4
#else
#define ATTN_VB 1
#endif

#define ALWAYS_INLINE_ static inline __attribute__((always_inline))
// the plain C kernels: the generic set's whole path, and still compiled (unused) in the SIMD sets, so it never rots
#define PORTABLE_ static __attribute__((unused))

// ----------------------------------------------------------------------------
// elementwise helpers shared by forward and backward

// exp(x) for x <= ~88; 0 below -87 (exp(-87) ~ 1.6e-38 is 0 next to the row's max entry exp(0) = 1).
// x = n ln2 + r with |r| <= ln2/2 (ln2 split in two so n*ln2_hi is exact), exp(r) by its degree-7 Taylor
// polynomial (truncation < 6e-9 relative), times 2^n built in the exponent bits. Branch-free, so loops
// calling it vectorise; exp_neg_v_ is the same sequence of operations on 16 lanes.
static inline float exp_neg_(float x) {
    float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    // round to nearest by the 1.5 * 2^23 trick (exact for |x log2e| < 2^22; no reassociation without fast-math)
    float t = xc * 1.44269504f + 12582912.0f;
    float n = t - 12582912.0f;
    float r = fmaf(n, -0.693145752f, xc);
    r = fmaf(n, -1.42860677e-6f, r);
    float pr = 1.0f / 5040.0f;
    pr = fmaf(pr, r, 1.0f / 720.0f);
    pr = fmaf(pr, r, 1.0f / 120.0f);
    pr = fmaf(pr, r, 1.0f / 24.0f);
    pr = fmaf(pr, r, 1.0f / 6.0f);
    pr = fmaf(pr, r, 0.5f);
    pr = fmaf(pr, r, 1.0f);
    pr = fmaf(pr, r, 1.0f);
    // 2^n from the bits of t (0x4B400000 + n): (bits + 127) << 23 in unsigned arithmetic drops the 0x4B4...
    // part and leaves the biased exponent n + 127, n in [-126, 127], as fast_expf_ in nn/fastmath.h does. No
    // float -> int conversion, so a NaN x (which passes the clamps) is no undefined behaviour: NaN out
    uint32_t bits;
    memcpy(&bits, &t, sizeof bits);
    bits = (bits + 127u) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return x < -87.0f ? 0.0f : pr * two_n;
}

// sum of 16 partial sums by a fixed tree: p[u] += p[u + w] for w = 8, 4, 2, 1 (v16_tree_sum folds the same way)
static inline float tree16_(float p[16]) {
    for (int w = 8; w >= 1; w /= 2) {
        for (int u = 0; u < w; u++) p[u] += p[u + w];
    }
    return p[0];
}

// a . b over HS terms as 16 interleaved fma chains (lane u: d = u, u+16, ...) folded by tree16_
static float row_dot_portable_(const float *a, const float *b, int HS) {
    float p[16] = {0};
    for (int d = 0; d < HS; d++) p[d & 15] = fmaf(a[d], b[d], p[d & 15]);
    return tree16_(p);
}

#ifdef ATTN_SIMD_
static inline v16f exp_neg_v_(v16f x) {
    const v16f lo = v16_set1(-87.0f);
    // max/min return their second operand when one is NaN: x second, so a NaN lane stays NaN (NaN out, as
    // exp_neg_ gives) instead of becoming the clamp value exp(-87)
    v16f xc = v16_min(v16_set1(88.0f), v16_max(lo, x));
    const v16f big = v16_set1(12582912.0f);
    v16f n = v16_sub(v16_add(v16_mul(xc, v16_set1(1.44269504f)), big), big);
    v16f r = v16_fmadd(n, v16_set1(-0.693145752f), xc);
    r = v16_fmadd(n, v16_set1(-1.42860677e-6f), r);
    v16f pr = v16_set1(1.0f / 5040.0f);
    pr = v16_fmadd(pr, r, v16_set1(1.0f / 720.0f));
    pr = v16_fmadd(pr, r, v16_set1(1.0f / 120.0f));
    pr = v16_fmadd(pr, r, v16_set1(1.0f / 24.0f));
    pr = v16_fmadd(pr, r, v16_set1(1.0f / 6.0f));
    pr = v16_fmadd(pr, r, v16_set1(0.5f));
    pr = v16_fmadd(pr, r, v16_set1(1.0f));
    pr = v16_fmadd(pr, r, v16_set1(1.0f));
    // pr * 2^n: n is integral and in [-126, 127], so this is the same correctly rounded product as
    // pr * two_n in exp_neg_
    v16f e = v16_scale2n(pr, n);
    return v16_mask_mov(e, v16_cmplt(x, lo), v16_zero());
}

static float row_dot_(const float *a, const float *b, int HS) {
    if (HS % 16 != 0) return row_dot_portable_(a, b, HS);
    v16f p = v16_zero();
    for (int d = 0; d < HS; d += 16) p = v16_fmadd(v16_loadu(a + d), v16_loadu(b + d), p);
    return v16_tree_sum(p);
}

#else
static float row_dot_(const float *a, const float *b, int HS) { return row_dot_portable_(a, b, HS); }
#endif

#if ISA_AVX512
// dst (16, ldd) = transpose of src (16, lds), in registers: pairs, then quads within 128-bit lanes, then lanes
static inline void transpose16_(float *restrict dst, size_t ldd, const float *restrict src, size_t lds) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + (size_t)i * lds);
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);      // lane L: r_i[4L], r_i+1[4L], r_i[4L+1], r_i+1[4L+1]
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);  // the same for 4L+2, 4L+3
    }
    for (int g = 0; g < 16; g += 4) {
        // r[g+k], lane L: rows g..g+3 of column 4L+k
        r[g] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
        r[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xEE);
        r[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
        r[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
    }
    for (int k = 0; k < 4; k++) {
        __m512 a = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x88), b = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x88);
        __m512 c = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xDD), d = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xDD);
        _mm512_storeu_ps(dst + (size_t)k * ldd, _mm512_shuffle_f32x4(a, b, 0x88));         // column k
        _mm512_storeu_ps(dst + (size_t)(4 + k) * ldd, _mm512_shuffle_f32x4(c, d, 0x88));   // column 4+k
        _mm512_storeu_ps(dst + (size_t)(8 + k) * ldd, _mm512_shuffle_f32x4(a, b, 0xDD));   // column 8+k
        _mm512_storeu_ps(dst + (size_t)(12 + k) * ldd, _mm512_shuffle_f32x4(c, d, 0xDD));  // column 12+k
    }
}
#endif

// dst (HS, ATTN_BC) = transpose of the rows src (n, HS); columns n.. are zero so dot_tile_ may run over
// the full tile width
static void transpose_rows_(float *restrict dst, const float *restrict src, int n, int HS) {
    int c0 = 0;
#if ISA_AVX512
    int d0 = 0;
    // whole 16 x 16 blocks in registers, the edges below element by element
    for (; c0 + 16 <= n; c0 += 16) {
        for (d0 = 0; d0 + 16 <= HS; d0 += 16) {
            transpose16_(dst + (size_t)d0 * ATTN_BC + c0, ATTN_BC, src + (size_t)c0 * HS + d0, HS);
        }
    }
    for (int d = d0; d < HS; d++) {
        for (int c = 0; c < c0; c++) dst[(size_t)d * ATTN_BC + c] = src[(size_t)c * HS + d];
    }
#endif
    for (int d = 0; d < HS; d++) {
        float *dst_d = dst + (size_t)d * ATTN_BC;
        for (int c = c0; c < n; c++) dst_d[c] = src[(size_t)c * HS + d];
        for (int c = n; c < ATTN_BC; c++) dst_d[c] = 0.0f;
    }
}

// ----------------------------------------------------------------------------
// micro-kernels

// C (n, ATTN_BC) = A (n, HS) @ Bt (HS, ATTN_BC): every C[i][c] is the fma chain over d = 0..HS-1 from 0,
// so the forward (keys as A) and the backward (queries as A) get bit-identical dot products
PORTABLE_ void dot_tile_portable_(float *restrict C, const float *restrict A, const float *restrict Bt, int n, int HS) {
    int i = 0;
    // two rows at a time share each Bt load and give the fma units independent chains
    for (; i + 2 <= n; i += 2) {
        float c0[ATTN_BC] = {0}, c1[ATTN_BC] = {0};
        const float *a0 = A + (size_t)i * HS, *a1 = a0 + HS;
        for (int d = 0; d < HS; d++) {
            const float *b = Bt + (size_t)d * ATTN_BC;
            float x0 = a0[d], x1 = a1[d];
            for (int c = 0; c < ATTN_BC; c++) {
                c0[c] = fmaf(x0, b[c], c0[c]);
                c1[c] = fmaf(x1, b[c], c1[c]);
            }
        }
        memcpy(C + (size_t)i * ATTN_BC, c0, sizeof c0);
        memcpy(C + (size_t)(i + 1) * ATTN_BC, c1, sizeof c1);
    }
    for (; i < n; i++) {
        float c0[ATTN_BC] = {0};
        const float *a0 = A + (size_t)i * HS;
        for (int d = 0; d < HS; d++) {
            const float *b = Bt + (size_t)d * ATTN_BC;
            for (int c = 0; c < ATTN_BC; c++) c0[c] = fmaf(a0[d], b[c], c0[c]);
        }
        memcpy(C + (size_t)i * ATTN_BC, c0, sizeof c0);
    }
}

// the reduction range [t0, t1) of output rows [o, o+R): t - o in [dlo, dhi] for some row, within [0, nt)
static inline void block_range_(int *t0, int *t1, int o, int R, int nt, int dlo, int dhi) {
    int a = o + dlo > 0 ? o + dlo : 0, b = o + R + dhi < nt ? o + R + dhi : nt;
    *t0 = a;
    *t1 = b > a ? b : a;
}

// no limit on t - o (dlo, dhi of a side that is not masked)
#define ATTN_NOLIM_ (1 << 28)

// Y (n, HS) = Y * alpha[o] (when alpha) + sum over t < nt, in order, of A[o*so + t*st] * X[t] with X (nt, HS),
// one fma per term. (so, st) = (1, ATTN_BR) reads a transposed (nt, ATTN_BR) A, (ATTN_BC, 1) a plain one.
// fresh: the sum starts from 0 and is added to Y at the end instead (Y = Y + sum), so an output that
// already holds a large value (dq, accumulated over key tiles) is rounded once per tile, not once per term.
// Only the terms with t - o in [dlo, dhi] can be nonzero (the causal and window masks): each block of
// ATTN_MR rows sums over the t its rows may see (block_range_), the other terms are exact zeros.
ALWAYS_INLINE_ void acc_tile_portable_hs_(float *restrict Y, const float *restrict A, int so, int st,
                                          const float *restrict X, int n, int nt, int HS, const float *alpha,
                                          int fresh, int dlo, int dhi) {
    for (int o = 0; o < n; o++) {
        float *y = Y + (size_t)o * HS;
        // the same t range for every row of a register block as in the SIMD kernels (same bits)
        int ob = o - o % ATTN_MR, t0, t1;
        block_range_(&t0, &t1, ob, n - ob < ATTN_MR ? n - ob : ATTN_MR, nt, dlo, dhi);
        if (alpha) {
            for (int d = 0; d < HS; d++) y[d] *= alpha[o];
        }
        // columns in chunks of 64: the chunk's sums live in a local row (in registers for HS = 64)
        for (int d0 = 0; d0 < HS; d0 += 64) {
            int w = HS - d0 < 64 ? HS - d0 : 64;
            float acc[64];
            for (int d = 0; d < w; d++) acc[d] = fresh ? 0.0f : y[d0 + d];
            for (int t = t0; t < t1; t++) {
                float a = A[(size_t)o * so + (size_t)t * st];
                const float *x = X + (size_t)t * HS + d0;
                for (int d = 0; d < w; d++) acc[d] = fmaf(a, x[d], acc[d]);
            }
            for (int d = 0; d < w; d++) y[d0 + d] = fresh ? y[d0 + d] + acc[d] : acc[d];
        }
    }
}

// the common head size as a constant: the compiler then keeps the (HS,) row in registers across t
static void acc_tile_portable_(float *restrict Y, const float *restrict A, int so, int st, const float *restrict X,
                               int n, int nt, int HS, const float *alpha, int fresh, int dlo, int dhi) {
    if (HS == 64) acc_tile_portable_hs_(Y, A, so, st, X, n, nt, 64, alpha, fresh, dlo, dhi);
    else acc_tile_portable_hs_(Y, A, so, st, X, n, nt, HS, alpha, fresh, dlo, dhi);
}

#ifdef ATTN_SIMD_
// R (<= ATTN_MR) rows of C = A @ Bt, vectors [V0, V1) of the 4 (at most ATTN_VB of them), the accumulators in
// registers over all of d; the other vectors of the rows are left alone
ALWAYS_INLINE_ void dot_block_simd_(float *restrict C, const float *restrict A, const float *restrict Bt, int R,
                                    int HS, int V0, int V1) {
    v16f c[ATTN_MR][4];
    for (int i = 0; i < R; i++) {
        for (int v = V0; v < V1; v++) c[i][v] = v16_zero();
    }
    for (int d = 0; d < HS; d++) {
        const float *b = Bt + (size_t)d * ATTN_BC;
        v16f bv[4];
        for (int v = V0; v < V1; v++) bv[v] = v16_loadu(b + 16 * v);
        for (int i = 0; i < R; i++) {
            v16f a = v16_set1(A[(size_t)i * HS + d]);
            for (int v = V0; v < V1; v++) c[i][v] = v16_fmadd(a, bv[v], c[i][v]);
        }
    }
    for (int i = 0; i < R; i++) {
        for (int v = V0; v < V1; v++) v16_storeu(C + (size_t)i * ATTN_BC + 16 * v, c[i][v]);
    }
}

// dot_block_simd_ over vectors [V0, V1) in register blocks of ATTN_VB vectors; the other vectors of the rows
// get 0 (entries the caller's mask hides, whatever they hold)
ALWAYS_INLINE_ void dot_rows_simd_(float *restrict C, const float *restrict A, const float *restrict Bt, int R,
                                   int HS, int V0, int V1) {
    for (int v = V0; v < V1; v += ATTN_VB) dot_block_simd_(C, A, Bt, R, HS, v, v + ATTN_VB < V1 ? v + ATTN_VB : V1);
    for (int i = 0; i < R; i++) {
        for (int v = 0; v < 4; v++) {
            if (v < V0 || v >= V1) v16_storeu(C + (size_t)i * ATTN_BC + 16 * v, v16_zero());
        }
    }
}

// dot_tile_portable_, except that entries the mask hides may be 0 instead: row i needs only the columns c
// with c - i in [dlo, dhi], so a register block computes the 16-column vectors that hold such a column for
// one of its rows (about a third of a diagonal tile is skipped)
static void dot_tile_(float *restrict C, const float *restrict A, const float *restrict Bt, int n, int HS, int dlo,
                      int dhi) {
    int i = 0;
    for (; i + ATTN_MR <= n; i += ATTN_MR) {
        float *Ci = C + (size_t)i * ATTN_BC;
        const float *Ai = A + (size_t)i * HS;
        int lo = i + dlo, hi = i + ATTN_MR - 1 + dhi;  // the columns some row of the block needs
        int v0 = lo <= 0 ? 0 : (lo / 16 < 4 ? lo / 16 : 4), v1 = hi < 0 ? 0 : (hi / 16 + 1 < 4 ? hi / 16 + 1 : 4);
        // constant vector ranges, so the accumulators stay in registers
        switch (v1 > v0 ? v0 * 5 + v1 : 0) {
        case 0 * 5 + 1: dot_rows_simd_(Ci, Ai, Bt, ATTN_MR, HS, 0, 1); break;
        case 0 * 5 + 2: dot_rows_simd_(Ci, Ai, Bt, ATTN_MR, HS, 0, 2); break;
        case 0 * 5 + 3: dot_rows_simd_(Ci, Ai, Bt, ATTN_MR, HS, 0, 3); break;
        case 1 * 5 + 2: dot_rows_simd_(Ci, Ai, Bt, ATTN_MR, HS, 1, 2); break;
        case 1 * 5 + 3: dot_rows_simd_(Ci, Ai, Bt, ATTN_MR, HS, 1, 3); break;
        case 1 * 5 + 4: dot_rows_simd_(Ci, Ai, Bt, ATTN_MR, HS, 1, 4); break;
        case 2 * 5 + 3: dot_rows_simd_(Ci, Ai, Bt, ATTN_MR, HS, 2, 3); break;
        case 2 * 5 + 4: dot_rows_simd_(Ci, Ai, Bt, ATTN_MR, HS, 2, 4); break;
        case 3 * 5 + 4: dot_rows_simd_(Ci, Ai, Bt, ATTN_MR, HS, 3, 4); break;
        case 0: memset(Ci, 0, (size_t)ATTN_MR * ATTN_BC * sizeof(float)); break;  // nothing visible
        default: dot_rows_simd_(Ci, Ai, Bt, ATTN_MR, HS, 0, 4); break;
        }
    }
    float *Ci = C + (size_t)i * ATTN_BC;
    const float *Ai = A + (size_t)i * HS;
    // the row tail, all columns, with a constant row count so its accumulators stay in registers too
    switch (n - i) {
    case 5: dot_rows_simd_(Ci, Ai, Bt, 5, HS, 0, 4); break;
    case 4: dot_rows_simd_(Ci, Ai, Bt, 4, HS, 0, 4); break;
    case 3: dot_rows_simd_(Ci, Ai, Bt, 3, HS, 0, 4); break;
    case 2: dot_rows_simd_(Ci, Ai, Bt, 2, HS, 0, 4); break;
    case 1: dot_rows_simd_(Ci, Ai, Bt, 1, HS, 0, 4); break;
    default: break;
    }
}

#if ISA_AVX2
// acc_block_simd_ below for AVX2 (one 16-column vector): the 6 x 2 ymm accumulators as named variables and X's
// two halves loaded once per t, the same operations. Written with arrays, or with named variables but without
// the asm below that pins them, gcc folds the X loads into every FMA (18 loads per 12 FMAs), and the loads, not
// the FMAs, set the speed.
#define ROWS6_(X) X(0) X(1) X(2) X(3) X(4) X(5)
ALWAYS_INLINE_ void acc_block_avx2_(float *restrict Y, const float *restrict A, int so, int st,
                                    const float *restrict X, int nt, int HS, const float *alpha, int fresh, int R) {
#define INIT_(i)                                                                   \
    __m256 yl##i = _mm256_setzero_ps(), yh##i = _mm256_setzero_ps();               \
    if (R > (i) && !fresh) {                                                       \
        yl##i = _mm256_loadu_ps(Y + (size_t)(i) * HS);                             \
        yh##i = _mm256_loadu_ps(Y + (size_t)(i) * HS + 8);                         \
        if (alpha) {                                                               \
            yl##i = _mm256_mul_ps(yl##i, _mm256_set1_ps(alpha[i]));                \
            yh##i = _mm256_mul_ps(yh##i, _mm256_set1_ps(alpha[i]));                \
        }                                                                          \
    }
#define STEP_(i)                                                                   \
    if (R > (i)) {                                                                 \
        __m256 ai = _mm256_broadcast_ss(a + (size_t)(i) * so);                     \
        yl##i = _mm256_fmadd_ps(ai, xl, yl##i);                                    \
        yh##i = _mm256_fmadd_ps(ai, xh, yh##i);                                    \
    }
#define STORE_(i)                                                                  \
    if (R > (i)) {                                                                 \
        float *yp = Y + (size_t)(i) * HS;                                          \
        _mm256_storeu_ps(yp, fresh ? _mm256_add_ps(_mm256_loadu_ps(yp), yl##i) : yl##i);         \
        _mm256_storeu_ps(yp + 8, fresh ? _mm256_add_ps(_mm256_loadu_ps(yp + 8), yh##i) : yh##i); \
    }
    ROWS6_(INIT_)
    for (int t = 0; t < nt; t++) {
        const float *x = X + (size_t)t * HS;
        const float *a = A + (size_t)t * st;
        __m256 xl = _mm256_loadu_ps(x), xh = _mm256_loadu_ps(x + 8);
        // an empty asm that "changes" the two halves, so gcc must hold them in registers: otherwise it
        // still folds the X loads back into every FMA (12 loads + 6 broadcasts per 12 FMAs)
        __asm__("" : "+x"(xl), "+x"(xh));
        ROWS6_(STEP_)
    }
    ROWS6_(STORE_)
#undef INIT_
#undef STEP_
#undef STORE_
}
#endif

// R (<= ATTN_MR) rows x NV (<= ATTN_VB) vectors of acc_tile_, accumulators in registers over all of t; Y and X
// point at the first column of the block, rows HS apart
ALWAYS_INLINE_ void acc_block_simd_(float *restrict Y, const float *restrict A, int so, int st,
                                    const float *restrict X, int nt, int HS, const float *alpha, int fresh,
                                    int R, int NV) {
#if ISA_AVX2
    if (NV == 1) {
        acc_block_avx2_(Y, A, so, st, X, nt, HS, alpha, fresh, R);
        return;
    }
#endif
    v16f y[ATTN_MR][4];
    for (int i = 0; i < R; i++) {
        for (int v = 0; v < NV; v++) {
            if (fresh) {
                y[i][v] = v16_zero();
                continue;
            }
            y[i][v] = v16_loadu(Y + (size_t)i * HS + 16 * v);
            if (alpha) y[i][v] = v16_mul(y[i][v], v16_set1(alpha[i]));
        }
    }
    for (int t = 0; t < nt; t++) {
        const float *x = X + (size_t)t * HS;
        const float *a = A + (size_t)t * st;
        v16f xv[4];
        for (int v = 0; v < NV; v++) xv[v] = v16_loadu(x + 16 * v);
        for (int i = 0; i < R; i++) {
            v16f ai = v16_set1(a[(size_t)i * so]);
            for (int v = 0; v < NV; v++) y[i][v] = v16_fmadd(ai, xv[v], y[i][v]);
        }
    }
    for (int i = 0; i < R; i++) {
        for (int v = 0; v < NV; v++) {
            float *yp = Y + (size_t)i * HS + 16 * v;
            v16_storeu(yp, fresh ? v16_add(v16_loadu(yp), y[i][v]) : y[i][v]);
        }
    }
}

// R rows x NV vectors in register blocks of ATTN_VB vectors
ALWAYS_INLINE_ void acc_rows_simd_(float *restrict Y, const float *restrict A, int so, int st, const float *restrict X,
                                   int nt, int HS, const float *alpha, int fresh, int R, int NV) {
    for (int v = 0; v < NV; v += ATTN_VB) {
        acc_block_simd_(Y + 16 * v, A, so, st, X + 16 * v, nt, HS, alpha, fresh, R, NV - v < ATTN_VB ? NV - v : ATTN_VB);
    }
}

// any block shape (head sizes that are not a multiple of 64): runtime R, NV
static __attribute__((noinline)) void acc_block_any_simd_(float *restrict Y, const float *restrict A, int so, int st,
                                                          const float *restrict X, int nt, int HS,
                                                          const float *alpha, int fresh, int R, int NV) {
    acc_rows_simd_(Y, A, so, st, X, nt, HS, alpha, fresh, R, NV);
}

// acc_tile_portable_ for HS a multiple of 16: blocks of ATTN_MR rows x 64 columns. A call of its own, not
// inlined into the tile loops, so that their live values do not crowd the inner loop's registers: inlined with
// AVX2, values around the call hold 3 of the 16 ymm registers and gcc spills two of the 12 accumulators
// instead; inlined with AVX-512, the forward's loop reloads its row stride and end from the stack on every step
// (docs/results/speed_rounds.md: "Both sides held to AVX2", and "Measurements moved from code comments").
static __attribute__((noinline)) void acc_tile_simd_(float *restrict Y, const float *restrict A, int so, int st,
                                                     const float *restrict X, int n, int nt, int HS,
                                                     const float *alpha, int fresh, int dlo, int dhi) {
    for (int o = 0; o < n; o += ATTN_MR) {
        int R = n - o < ATTN_MR ? n - o : ATTN_MR, t0, t1;
        block_range_(&t0, &t1, o, R, nt, dlo, dhi);
        const float *Ao = A + (size_t)o * so + (size_t)t0 * st, *al = alpha ? alpha + o : NULL;
        int ntb = t1 - t0;
        for (int d0 = 0; d0 < HS; d0 += 64) {
            float *Yo = Y + (size_t)o * HS + d0;
            const float *Xd = X + (size_t)t0 * HS + d0;
            if (HS - d0 < 64) {
                acc_block_any_simd_(Yo, Ao, so, st, Xd, ntb, HS, al, fresh, R, (HS - d0) / 16);
                continue;
            }
            switch (R) {
            case 6: acc_rows_simd_(Yo, Ao, so, st, Xd, ntb, HS, al, fresh, 6, 4); break;
            case 5: acc_rows_simd_(Yo, Ao, so, st, Xd, ntb, HS, al, fresh, 5, 4); break;
            case 4: acc_rows_simd_(Yo, Ao, so, st, Xd, ntb, HS, al, fresh, 4, 4); break;
            case 3: acc_rows_simd_(Yo, Ao, so, st, Xd, ntb, HS, al, fresh, 3, 4); break;
            case 2: acc_rows_simd_(Yo, Ao, so, st, Xd, ntb, HS, al, fresh, 2, 4); break;
            default: acc_rows_simd_(Yo, Ao, so, st, Xd, ntb, HS, al, fresh, 1, 4); break;
            }
        }
    }
}

ALWAYS_INLINE_ void acc_tile_(float *restrict Y, const float *restrict A, int so, int st, const float *restrict X,
                              int n, int nt, int HS, const float *alpha, int fresh, int dlo, int dhi) {
    if (HS % 16 == 0) acc_tile_simd_(Y, A, so, st, X, n, nt, HS, alpha, fresh, dlo, dhi);
    else acc_tile_portable_(Y, A, so, st, X, n, nt, HS, alpha, fresh, dlo, dhi);
}
#else
static void dot_tile_(float *restrict C, const float *restrict A, const float *restrict Bt, int n, int HS, int dlo,
                      int dhi) {
    dot_tile_portable_(C, A, Bt, n, HS);
}

static void acc_tile_(float *restrict Y, const float *restrict A, int so, int st, const float *restrict X, int n,
                      int nt, int HS, const float *alpha, int fresh, int dlo, int dhi) {
    acc_tile_portable_(Y, A, so, st, X, n, nt, HS, alpha, fresh, dlo, dhi);
}
#endif

// ----------------------------------------------------------------------------
// options

// the first and one-past-last key of the key tile [j0, j0+nc) that query i sees
static inline void visible_range_(int *lo, int *hi, int i, int j0, int nc, int W) {
    int a = j0, b = j0 + nc;
    if (W > 0 && i - W + 1 > a) a = i - W + 1;
    if (i + 1 < b) b = i + 1;
    *lo = a;
    *hi = b;
}

// per-(b,h) view of the options
typedef struct HeadOpts_ {
    float scale, slope, decay;
    const float *F;  // (T,) or NULL
    int W;
    int has_decay;   // decay given: the backward then returns ddecay even where decay[h] = 0
    // RFA logits (AttnFilter): kind (0 = none), this head's lag tables (L,) and beta
    int fkind;
    const float *fa, *fc, *fe;
    float beta;
} HeadOpts_;

static HeadOpts_ head_opts_(const AttnOpts *o, int b, int h, int NH, int T) {
    HeadOpts_ ho;
    ho.scale = o->scale;
    ho.slope = o->slopes ? o->slopes[h] : 0.0f;
    ho.decay = o->decay ? o->decay[h] : 0.0f;
    ho.F = o->fgate ? o->fgate + ((size_t)b * NH + h) * T : NULL;
    // a window of T or more hides nothing (i - j < T): treat it as full causal, which also keeps the index
    // arithmetic with W (j + W, i0 - j0 - W + 1, ...) far from int overflow
    ho.W = o->window > 0 && o->window < T ? o->window : 0;
    ho.has_decay = o->decay != NULL;
    const AttnFilter *f = o->filter;
    ho.fkind = f ? f->kind : 0;
    ho.fa = f ? f->bias + (size_t)h * f->lag_len : NULL;
    ho.fc = f ? f->prec + (size_t)h * f->lag_len : NULL;
    ho.fe = f ? f->decay + (size_t)h * f->lag_len : NULL;
    ho.beta = f ? f->beta[h] : 0.0f;
    return ho;
}

// log(1 + u) for u >= 0, branch-free so the loops calling it vectorise: y = 1 + u = 2^e m with m in
// [sqrt(1/2), sqrt(2)), log m = 2 atanh(z), z = (m-1)/(m+1), |z| <= 0.172, by its odd series to z^9
// (truncation < 3e-9 relative). y is capped at 2^126 (u that large only arises from overflowed inputs).
// The rounding of 1 + u costs at most 6e-8 absolute, nothing next to the logits it enters.
static inline float log1p_pos_(float u) {
    float y = u < 8.5e37f ? 1.0f + u : 8.5e37f;
    int32_t bits;
    memcpy(&bits, &y, sizeof bits);
    // shift the mantissa range so that m lands in [sqrt(1/2), sqrt(2)): subtract the bits of sqrt(1/2)
    int32_t k = (bits - 0x3f3504f3) >> 23;       // the exponent e
    int32_t mb = bits - (k << 23);               // y / 2^e
    float m;
    memcpy(&m, &mb, sizeof m);
    float z = (m - 1.0f) / (m + 1.0f), z2 = z * z;
    float pz = 2.0f / 9.0f;
    pz = fmaf(pz, z2, 2.0f / 7.0f);
    pz = fmaf(pz, z2, 2.0f / 5.0f);
    pz = fmaf(pz, z2, 2.0f / 3.0f);
    pz = fmaf(pz, z2, 2.0f);
    return fmaf((float)k, 0.693147182f, z * pz);
}

#ifdef ATTN_SIMD_
// log1p_pos_ on 16 lanes (the same operations)
static inline v16f log1p_pos_v_(v16f u) {
    const v16f big = v16_set1(8.5e37f), one = v16_set1(1.0f);
    v16f y = v16_mask_mov(big, v16_cmplt(u, big), v16_add(one, u));
    v16i bits = v16_bits(y);
    v16i k = v16i_srai(v16i_sub(bits, v16i_set1(0x3f3504f3)), 23);
    v16f m = v16_from_bits(v16i_sub(bits, v16i_slli(k, 23)));
    v16f z = v16_div(v16_sub(m, one), v16_add(m, one)), z2 = v16_mul(z, z);
    v16f pz = v16_set1(2.0f / 9.0f);
    pz = v16_fmadd(pz, z2, v16_set1(2.0f / 7.0f));
    pz = v16_fmadd(pz, z2, v16_set1(2.0f / 5.0f));
    pz = v16_fmadd(pz, z2, v16_set1(2.0f / 3.0f));
    pz = v16_fmadd(pz, z2, v16_set1(2.0f));
    return v16_fmadd(v16i_to_float(k), v16_set1(0.693147182f), v16_mul(z, pz));
}

// the 16-bit lane mask in reverse lane order (the mask of v16_reverse's result)
static inline m16 rev16_mask_(m16 m) {
    unsigned x = m;
    x = ((x >> 1) & 0x5555u) | ((x & 0x5555u) << 1);
    x = ((x >> 2) & 0x3333u) | ((x & 0x3333u) << 2);
    x = ((x >> 4) & 0x0F0Fu) | ((x & 0x0F0Fu) << 4);
    x = ((x >> 8) & 0x00FFu) | ((x & 0x00FFu) << 8);
    return (m16)x;
}

// the RFA logits of 16 lanes (filter_logit_'s operations); lg gets log(1 + c R2) (STUDENT)
ALWAYS_INLINE_ v16f filter_logit_v_(int kind, v16f dot, v16f qn, v16f kn, v16f a, v16f c, v16f e,
                                      v16f beta, v16f *R2, v16f *lg) {
    if (kind == ATTN_FILTER_DOT) {
        *R2 = *lg = v16_zero();
        return v16_mul(beta, dot);
    }
    v16f r2 = v16_fmadd(v16_mul(v16_set1(-2.0f), e), dot,
                                v16_fmadd(v16_mul(e, e), kn, qn));
    *R2 = r2;
    v16f nbeta = v16_sub(v16_zero(), beta);
    if (kind == ATTN_FILTER_GAUSS) {
        *lg = v16_zero();
        return v16_fmadd(nbeta, v16_mul(c, r2), a);
    }
    v16f u = v16_mul(c, r2);
    v16f l = log1p_pos_v_(v16_max(u, v16_zero()));
    *lg = l;
    return v16_fmadd(nbeta, l, a);
}
#endif

// the RFA logit (attention.h, AttnFilter) of one entry at lag d; *R2 and *lg (log(1 + c R2), STUDENT) are
// returned for the backward. Forward and backward call this with the same inputs (same floats out). kind
// is a compile-time constant at every call (the loops are instantiated per kind), so they vectorise.
ALWAYS_INLINE_ float filter_logit_(int kind, float dot, float qn, float kn, float a, float c, float e, float beta,
                                   float *R2, float *lg) {
    if (kind == ATTN_FILTER_DOT) {
        *R2 = 0.0f;
        *lg = 0.0f;
        return beta * dot;
    }
    float r2 = fmaf(-2.0f * e, dot, fmaf(e * e, kn, qn));
    *R2 = r2;
    if (kind == ATTN_FILTER_GAUSS) {
        *lg = 0.0f;
        return fmaf(-beta, c * r2, a);
    }
    // R2 >= 0 up to rounding; a slightly negative value must not reach the log's domain edge
    float u = c * r2;
    float l = log1p_pos_(u > 0.0f ? u : 0.0f);
    *lg = l;
    return fmaf(-beta, l, a);
}

// s_ij = scale * q_i.k_j - slope * (i - j) + (F[i] - F[j]) from the raw dot product. The forward and the
// backward both form the logits with these operations (the SIMD code with the same ones, in this order),
// so p = exp(s - lse) in the backward sees the same floats the forward normalised.
static inline float logit_(float dot, const HeadOpts_ *ho, int i, int j) {
    float x = dot * ho->scale;
    if (ho->slope != 0.0f) x -= ho->slope * (float)(i - j);
    if (ho->F) x += ho->F[i] - ho->F[j];
    return x;
}

static void *scratch_alloc_(size_t nfloats) {
    // 64-byte aligned for whole-cache-line vectors (the kernels use unaligned loads, so this is speed only)
    size_t bytes = (nfloats * sizeof(float) + 63) / 64 * 64;
    void *p = aligned_alloc(64, bytes);
    return p ? p : xmalloc(bytes);
}

#endif
