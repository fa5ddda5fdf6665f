/*
 * Tiled causal softmax attention with an online softmax: forward and backward. See attention.h for the
 * formula and the position schemes.
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
 * Forward, per (b, h, query tile): Q of the tile is transposed once, so each key tile gives the logits
 * TRANSPOSED, S^T (keys, queries) = K Q^T, and the softmax runs down the columns: the running max, sum and
 * rescale factor of 16 queries are one vector, with no horizontal reductions. Per query, over key tiles:
 *   m  running max of the logits seen so far
 *   l  running sum of exp(s - m)                       (the softmax denominator, WITHOUT the decay)
 *   acc running sum of exp(s - m) * E * v              (the numerator, WITH E = exp(-decay (i-j)))
 * rescaled by exp(m_old - m_new) when the max grows; at the end out = acc / l and lse = m + log(l).
 * Masked entries get logit -inf, so weight exactly 0. Work items are the query tiles, head by head (the
 * head's K and V stay in cache while both threads take its tiles), the longest tiles of a head first.
 *
 * Backward (FlashAttention-2 style), per (b, h): key tiles outer (K and V transposed once per key tile),
 * query tiles inner. p is recomputed from lse with the same logit and exp operations as the forward (the
 * dot products are the same fma chains), dk, dv and dF[j] of a key tile collect in scratch and are added
 * once, dq and dF[i] are added to the outputs directly (the thread owns the whole (b,h) slice); dq once per
 * tile pair, from a sum started at 0, so the caller's values in dq see one rounding per tile.
 *
 * The exponential is exp_neg_ below (range reduction + polynomial, ~2 ulp, 0 below -87), with an
 * AVX-512 twin doing the identical operations; its arguments are <= 0 up to rounding, except the decay
 * factor of masked entries in the forward, which the clamp at 88 keeps finite (it multiplies a 0). A NaN
 * argument (a diverged model) gives NaN in every kernel set, without undefined behaviour, so it reaches the
 * loss and the trainer's non-finite stop.
 */
#include "nn/attention.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"

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

AttnOpts attn_opts_default(int HS) {
    AttnOpts o = {0};
    o.scale = 1.0f / sqrtf((float)HS);
    return o;
}

void alibi_slopes(float *slopes, int NH) {
    // slopes is (NH,)
    int n = 1;
    while (n * 2 <= NH) n *= 2;  // the largest power of two <= NH
    for (int h = 0; h < NH && h < n; h++) slopes[h] = (float)exp2(-8.0 * (h + 1) / n);
    // the reference rule for other NH: slopes of 2n heads at odd exponents, 2^(-8 (2m+1) / (2n))
    for (int h = n; h < NH; h++) slopes[h] = (float)exp2(-8.0 * (2 * (h - n) + 1) / (2.0 * n));
}

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
// two halves loaded once per t, the same operations. Written with arrays, gcc folded the X loads into every
// FMA (18 loads per 12 FMAs), and the loads, not the FMAs, set the speed; with named variables it still did,
// until the asm below pinned them.
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

// acc_tile_portable_ for HS a multiple of 16: blocks of ATTN_MR rows x 64 columns. Not inlined with AVX2:
// inside the forward's tile loop, values live around the call held 3 of the 16 ymm registers, and with X
// pinned (acc_block_avx2_) gcc spilled two of the 12 accumulators to the stack in the inner loop instead
// (forward 99-114 GFLOP/s on the EPYC's 2 threads, 123-161 as a call). AVX-512's 32 registers leave room, and
// there the call cost a little.
#if ISA_AVX2
#define ACC_TILE_INLINE_ static __attribute__((noinline))
#else
#define ACC_TILE_INLINE_ ALWAYS_INLINE_
#endif
ACC_TILE_INLINE_ void acc_tile_simd_(float *restrict Y, const float *restrict A, int so, int st, const float *restrict X,
                                   int n, int nt, int HS, const float *alpha, int fresh, int dlo, int dhi) {
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

// s[r] = the logit of query r (lag d0 + r) against a key with squared norm kn, for r in [rlo, rhi)
ALWAYS_INLINE_ void filter_logits_k_(int kind, float *restrict s, const float *restrict qn, float kn,
                                     const HeadOpts_ *ho, int d0, int rlo, int rhi) {
    const float *restrict fa = ho->fa + d0, *restrict fc = ho->fc + d0, *restrict fe = ho->fe + d0;
    float beta = ho->beta;
    for (int r = rlo; r < rhi; r++) {
        float R2, lg;
        s[r] = filter_logit_(kind, s[r], qn[r], kn, fa[r], fc[r], fe[r], beta, &R2, &lg);
    }
}

static void filter_logits_(float *s, const float *qn, float kn, const HeadOpts_ *ho, int d0, int rlo, int rhi) {
    switch (ho->fkind) {
    case ATTN_FILTER_STUDENT: filter_logits_k_(ATTN_FILTER_STUDENT, s, qn, kn, ho, d0, rlo, rhi); break;
    case ATTN_FILTER_GAUSS: filter_logits_k_(ATTN_FILTER_GAUSS, s, qn, kn, ho, d0, rlo, rhi); break;
    default: filter_logits_k_(ATTN_FILTER_DOT, s, qn, kn, ho, d0, rlo, rhi); break;
    }
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

// ----------------------------------------------------------------------------
// forward

typedef struct FwdScratch_ {
    float *qt;   // (HS, ATTN_BR) transposed query tile
    float *S;    // (ATTN_BC, ATTN_BR) transposed logits, then weights, of the current key tile
    float *acc;  // (ATTN_BR, HS) running numerators
    float m[ATTN_BR], l[ATTN_BR], alpha[ATTN_BR];  // running max, running sum, this tile's rescale factor
    float qn[ATTN_BR], kn[ATTN_BC];  // RFA: squared norms of the tile's queries and keys
} FwdScratch_;

// S (nc, ATTN_BR): S[c][r] = q_{i0+r} . k_{j0+c} on entry; on return the weights exp(s - m_new) E (0 where
// masked), with m, l updated and alpha = exp(m_old - m_new) for rescaling acc. Columns r >= nr are unused.
// With the RFA filter: qn (nr,), kn (nc,) the squared norms of the queries and keys; this function is then
// the path of every build (the filter's logits have no SIMD twin; the loops are left to the compiler).
PORTABLE_ void fwd_softmax_portable_(float *S, float *m, float *l, float *alpha, const HeadOpts_ *ho, int i0, int nr,
                                  int j0, int nc, const float *qn, const float *kn) {
    float mt[ATTN_BR], ms[ATTN_BR], lsum[ATTN_BR];
    for (int r = 0; r < nr; r++) mt[r] = m[r];
    for (int c = 0; c < nc; c++) {
        int j = j0 + c;
        float *s = S + (size_t)c * ATTN_BR;
        if (ho->fkind) {
            // visible queries r: i0 + r >= j (and inside the window); the others get -inf
            int rlo = j - i0 > 0 ? j - i0 : 0, rhi = ho->W ? j + ho->W - i0 : nr;
            if (rhi > nr) rhi = nr;
            for (int r = 0; r < rlo && r < nr; r++) s[r] = -INFINITY;
            for (int r = rhi > rlo ? rhi : rlo; r < nr; r++) s[r] = -INFINITY;
            filter_logits_(s, qn, kn[c], ho, i0 - j, rlo, rhi);
            for (int r = 0; r < nr; r++) mt[r] = s[r] > mt[r] ? s[r] : mt[r];
            continue;
        }
        for (int r = 0; r < nr; r++) {
            int i = i0 + r;
            float x = logit_(s[r], ho, i, j);
            x = (i >= j && (ho->W == 0 || i < j + ho->W)) ? x : -INFINITY;
            s[r] = x;
            mt[r] = x > mt[r] ? x : mt[r];
        }
    }
    for (int r = 0; r < nr; r++) {
        // a query with nothing visible yet keeps m = -inf; subtracting 0 then keeps exp(-inf - 0) = 0
        ms[r] = mt[r] == -INFINITY ? 0.0f : mt[r];
        alpha[r] = exp_neg_(m[r] - ms[r]);
        lsum[r] = 0.0f;
    }
    for (int c = 0; c < nc; c++) {
        int j = j0 + c;
        float *s = S + (size_t)c * ATTN_BR;
        for (int r = 0; r < nr; r++) {
            float p = exp_neg_(s[r] - ms[r]);
            lsum[r] += p;
            s[r] = p;
        }
        // the numerator gets the post-softmax decay E = exp(-decay (i-j)) (the "second accumulator");
        // masked entries have p = 0 and E finite (clamped), so they stay 0
        if (ho->decay != 0.0f) {
            for (int r = 0; r < nr; r++) s[r] *= exp_neg_(-ho->decay * (float)(i0 + r - j));
        }
        if (ho->fkind) {
            // the filter's E from its lag table, for the visible entries (the others are 0 already)
            int rlo = j - i0 > 0 ? j - i0 : 0;
            for (int r = rlo; r < nr; r++) s[r] *= ho->fe[i0 + r - j];
        }
    }
    for (int r = 0; r < nr; r++) {
        l[r] = l[r] * alpha[r] + lsum[r];
        m[r] = mt[r];
    }
}

#ifdef ATTN_SIMD_
// fwd_softmax_portable_ with 16 queries per vector (the same operations; lanes r >= nr are masked off)
// fkind 0: the plain logits; else the RFA filter's (filter_logit_v_), with lag d = i - j running forward
// along the 16 queries of a vector, so the tables are plain masked loads at d
ALWAYS_INLINE_ void fwd_softmax_simd_(int fkind, float *S, float *m, float *l, float *alpha, const HeadOpts_ *ho,
                                      int i0, int nr, int j0, int nc, const float *qn, const float *kn) {
    int nv = (nr + 15) / 16;
    const v16i iota = v16i_iota();
    const v16f scale = v16_set1(ho->scale), slope = v16_set1(ho->slope);
    const v16f ninf = v16_set1(-INFINITY), ndecay = v16_set1(-ho->decay);
    v16i iv[4];
    v16f mt[4], ms[4], lsum[4], Fi[4];
    m16 live[4];
    // a tile that all its queries see whole needs no mask
    int full = nr == ATTN_BR && i0 >= j0 + nc - 1 && (ho->W == 0 || i0 + nr - 1 < j0 + ho->W);
    for (int v = 0; v < nv; v++) {
        iv[v] = v16i_add(v16i_set1(i0 + 16 * v), iota);
        live[v] = v16i_cmplt(v16i_add(v16i_set1(16 * v), iota), v16i_set1(nr));
        mt[v] = v16_loadu(m + 16 * v);
        Fi[v] = ho->F ? v16_maskz_loadu(live[v], ho->F + i0 + 16 * v) : v16_zero();
    }
    v16f qnv[4];
    const v16f fbeta = v16_set1(ho->beta);
    for (int v = 0; v < nv && fkind; v++) qnv[v] = v16_maskz_loadu(live[v], qn + 16 * v);
    for (int c = 0; c < nc; c++) {
        int j = j0 + c;
        float *s = S + (size_t)c * ATTN_BR;
        v16i jv = v16i_set1(j), jwv = v16i_set1(j + ho->W);
        v16f Fj = v16_set1(ho->F ? ho->F[j] : 0.0f);
        if (fkind) {
            v16f knv = v16_set1(kn[c]);
            for (int v = 0; v < nv; v++) {
                m16 vis = live[v] & v16i_cmpge(iv[v], jv);
                if (ho->W) vis &= v16i_cmplt(iv[v], jwv);
                ptrdiff_t d = (ptrdiff_t)i0 + 16 * v - j;  // lag of lane 0
                v16f R2, lg;
                v16f x = filter_logit_v_(fkind, v16_loadu(s + 16 * v), qnv[v], knv,
                                           v16_maskz_loadu(vis, ho->fa + d), v16_maskz_loadu(vis, ho->fc + d),
                                           v16_maskz_loadu(vis, ho->fe + d), fbeta, &R2, &lg);
                x = v16_mask_mov(ninf, vis, x);
                v16_storeu(s + 16 * v, x);
                mt[v] = v16_max(x, mt[v]);
            }
            continue;
        }
        for (int v = 0; v < nv; v++) {
            v16f x = v16_mul(v16_loadu(s + 16 * v), scale);
            if (ho->slope != 0.0f) {
                x = v16_sub(x, v16_mul(slope, v16i_to_float(v16i_sub(iv[v], jv))));
            }
            if (ho->F) x = v16_add(x, v16_sub(Fi[v], Fj));
            if (!full) {
                m16 vis = live[v] & v16i_cmpge(iv[v], jv);
                if (ho->W) vis &= v16i_cmplt(iv[v], jwv);
                x = v16_mask_mov(ninf, vis, x);
            }
            v16_storeu(s + 16 * v, x);
            mt[v] = v16_max(x, mt[v]);
        }
    }
    for (int v = 0; v < nv; v++) {
        ms[v] = v16_mask_mov(mt[v], v16_cmpeq(mt[v], ninf), v16_zero());
        v16_storeu(alpha + 16 * v, exp_neg_v_(v16_sub(v16_loadu(m + 16 * v), ms[v])));
        lsum[v] = v16_zero();
    }
    for (int c = 0; c < nc; c++) {
        float *s = S + (size_t)c * ATTN_BR;
        v16i jv = v16i_set1(j0 + c);
        for (int v = 0; v < nv; v++) {
            v16f p = exp_neg_v_(v16_sub(v16_loadu(s + 16 * v), ms[v]));
            lsum[v] = v16_add(lsum[v], p);
            if (ho->decay != 0.0f) {
                v16f dist = v16i_to_float(v16i_sub(iv[v], jv));  // i - j
                p = v16_mul(p, exp_neg_v_(v16_mul(ndecay, dist)));
            }
            if (fkind) {
                // the filter's E from its lag table (masked entries have p = 0 and stay 0)
                m16 vis = live[v] & v16i_cmpge(iv[v], jv);
                p = v16_mul(p, v16_maskz_loadu(vis, ho->fe + ((ptrdiff_t)i0 + 16 * v - (j0 + c))));
            }
            v16_storeu(s + 16 * v, p);
        }
    }
    for (int v = 0; v < nv; v++) {
        v16f lv = v16_mul(v16_loadu(l + 16 * v), v16_loadu(alpha + 16 * v));
        v16_storeu(l + 16 * v, v16_add(lv, lsum[v]));
        v16_storeu(m + 16 * v, mt[v]);
    }
}
static void fwd_softmax_(float *S, float *m, float *l, float *alpha, const HeadOpts_ *ho, int i0, int nr, int j0,
                         int nc, const float *qn, const float *kn) {
    switch (ho->fkind) {  // the kind as a constant, so the filter's branches fold away
    case ATTN_FILTER_STUDENT: fwd_softmax_simd_(ATTN_FILTER_STUDENT, S, m, l, alpha, ho, i0, nr, j0, nc, qn, kn); break;
    case ATTN_FILTER_GAUSS: fwd_softmax_simd_(ATTN_FILTER_GAUSS, S, m, l, alpha, ho, i0, nr, j0, nc, qn, kn); break;
    case ATTN_FILTER_DOT: fwd_softmax_simd_(ATTN_FILTER_DOT, S, m, l, alpha, ho, i0, nr, j0, nc, qn, kn); break;
    default: fwd_softmax_simd_(0, S, m, l, alpha, ho, i0, nr, j0, nc, qn, kn); break;
    }
}

#else
static void fwd_softmax_(float *S, float *m, float *l, float *alpha, const HeadOpts_ *ho, int i0, int nr, int j0,
                         int nc, const float *qn, const float *kn) {
    fwd_softmax_portable_(S, m, l, alpha, ho, i0, nr, j0, nc, qn, kn);
}
#endif

// one query tile [i0, i1) of one head: q, k, v, out (T, HS); lse (T,)
static void forward_tile_(float *out, float *lse, const float *q, const float *k, const float *v,
                          const HeadOpts_ *ho, int i0, int i1, int HS, FwdScratch_ *sc) {
    int nr = i1 - i0;
    for (int r = 0; r < ATTN_BR; r++) {
        sc->m[r] = -INFINITY;
        sc->l[r] = 0.0f;
    }
    memset(sc->acc, 0, (size_t)nr * HS * sizeof(float));
    transpose_rows_(sc->qt, q + (size_t)i0 * HS, nr, HS);
    if (ho->fkind) {
        for (int r = 0; r < nr; r++) sc->qn[r] = row_dot_(q + (size_t)(i0 + r) * HS, q + (size_t)(i0 + r) * HS, HS);
    }
    // keys before the window of the tile's first row are invisible to every row of the tile; from this
    // start, every row sees at least one key of the first key tile
    int kstart = (ho->W > 0 && i0 - ho->W + 1 > 0) ? i0 - ho->W + 1 : 0;
    for (int j0 = kstart; j0 < i1; j0 += ATTN_BC) {
        int nc = i1 - j0 < ATTN_BC ? i1 - j0 : ATTN_BC;
        // key c is seen by query r iff r - c >= j0 - i0 (causal) and r - c < j0 - i0 + W (window)
        dot_tile_(sc->S, k + (size_t)j0 * HS, sc->qt, nc, HS, j0 - i0, ho->W ? j0 - i0 + ho->W - 1 : ATTN_NOLIM_);
        if (ho->fkind) {
            for (int c = 0; c < nc; c++) sc->kn[c] = row_dot_(k + (size_t)(j0 + c) * HS, k + (size_t)(j0 + c) * HS, HS);
        }
        fwd_softmax_(sc->S, sc->m, sc->l, sc->alpha, ho, i0, nr, j0, nc, sc->qn, sc->kn);
        // acc[r] = alpha[r] acc[r] + sum_c S[c][r] v_c
        // query r sees key c only if c - r <= i0 - j0 (causal) and c - r > i0 - j0 - W (window)
        int dlo = ho->W ? i0 - j0 - ho->W + 1 : -ATTN_NOLIM_;
        acc_tile_(sc->acc, sc->S, 1, ATTN_BR, v + (size_t)j0 * HS, nr, nc, HS, sc->alpha, 0, dlo, i0 - j0);
    }
    for (int r = 0; r < nr; r++) {
        int i = i0 + r;
        float *out_i = out + (size_t)i * HS;
        const float *acc = sc->acc + (size_t)r * HS;
        if (sc->l[r] != 0.0f) {  // NaN (a NaN logit or value) stays NaN: out and lse NaN, not "no key"
            float inv = 1.0f / sc->l[r];
            for (int d = 0; d < HS; d++) out_i[d] = acc[d] * inv;
            lse[i] = sc->m[r] + logf(sc->l[r]);
        } else {
            // no visible key (cannot happen with causal masking, j = i is always visible): an empty sum
            for (int d = 0; d < HS; d++) out_i[d] = 0.0f;
            lse[i] = -INFINITY;
        }
    }
}

void attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                       const AttnOpts *o, int B, int NH, int T, int HS) {
    // out is (B,NH,T,HS); lse is (B,NH,T); q, k, v are (B,NH,T,HS)
    int nqt = (T + ATTN_BR - 1) / ATTN_BR, nbh = B * NH;
    #pragma omp parallel
    {
        FwdScratch_ sc;
        float *buf = scratch_alloc_((size_t)HS * ATTN_BR + (size_t)ATTN_BC * ATTN_BR + (size_t)ATTN_BR * HS);
        sc.qt = buf;
        sc.S = sc.qt + (size_t)HS * ATTN_BR;
        sc.acc = sc.S + (size_t)ATTN_BC * ATTN_BR;
        // head by head, so the head's keys and values stay in cache while the threads share its query
        // tiles; within a head the later query tiles (more keys) go first, dynamically, so the threads
        // end with the small tiles and finish together
        #pragma omp for schedule(dynamic, 1)
        for (int it = 0; it < nqt * nbh; it++) {
            int bh = it / nqt, qt = nqt - 1 - it % nqt;
            size_t off = (size_t)bh * T * HS;
            HeadOpts_ ho = head_opts_(o, bh / NH, bh % NH, NH, T);
            int i0 = qt * ATTN_BR, i1 = i0 + ATTN_BR < T ? i0 + ATTN_BR : T;
            forward_tile_(out + off, lse + (size_t)bh * T, q + off, k + off, v + off, &ho, i0, i1, HS, &sc);
        }
        free(buf);
    }
}

// ----------------------------------------------------------------------------
// backward

typedef struct BwdScratch_ {
    float *kt, *vt;   // (HS, ATTN_BC) transposed key and value tiles
    float *S;         // (ATTN_BR, ATTN_BC) q.k dots, then w = p E
    float *DP;        // (ATTN_BR, ATTN_BC) do.v dots, then scale * ds
    float *dk, *dv;   // (ATTN_BC, HS) gradients of the key tile, added to dk/dv once per key tile
    float dFk[ATTN_BC];  // dF of the key tile
    float *D;         // (T,) D_i = do_i . out_i of the current head, formed once per query row
    // RFA filter: squared norms of the head's queries and keys (T,), the gradients of those norms
    // (dqn per query over the whole head, dkn per key of the current tile), and this (b,h)'s gradients
    // of the lag tables (3, T: a, c, E) and of beta
    float *qn, *kn, *dqn;
    float dkn[ATTN_BC];
    float *glag, gbeta;
    int glag_T;       // stride of glag's three rows
} BwdScratch_;

// The per-row part of the backward for query i against keys j0 + c, c < ATTN_BC, visible for j in [lo, hi):
// s (ATTN_BC,) holds q_i.k_j and becomes w_ij = p_ij E_ij; dp (ATTN_BC,) holds do_i.v_j (= dw_ij) and
// becomes scale * ds_ij; entries outside [lo, hi) become 0. With dF: dF[i] += sum_j ds_ij, dFk[c] -= ds_ij.
// lse_i from the forward; D = do_i . out_i.

// the post-softmax decay case (plain C in every build; returns this row's ddecay term)
static double bwd_row_decay_(float *s, float *dp, float *dFk, float *dF, const HeadOpts_ *ho, int i, int j0,
                             int lo, int hi, float lse_i, float D) {
    double dd = 0.0;
    float part[16] = {0};
    for (int c = 0; c < ATTN_BC; c++) {
        int j = j0 + c;
        float w = 0.0f, ds = 0.0f;
        if (j >= lo && j < hi) {
            // in the forward pass this was: p = exp(s - m) ... out = acc / l, i.e.
            // p_ij = exp(s_ij - lse_i); w_ij = p_ij * E_ij with E_ij = exp(-decay (i-j))
            float p = exp_neg_(logit_(s[c], ho, i, j) - lse_i);
            float E = exp_neg_(-ho->decay * (float)(i - j));
            float dw = dp[c];
            w = p * E;
            // dE_ij/ddecay = -(i-j) E_ij, and dL/dE_ij = p_ij dw_ij
            dd -= (double)(i - j) * (double)(w * dw);
            // softmax backward: ds_ij = p_ij (dp_ij - D_i), dp_ij = E_ij dw_ij; D_i = sum_j p_ij dp_ij
            ds = p * (E * dw - D);
        }
        s[c] = w;
        dp[c] = ds * ho->scale;
        if (dF) {
            part[c & 15] += ds;
            dFk[c] -= ds;
        }
    }
    // in the forward pass this was: s_ij = ... + (F[i] - F[j]); so dF_i += ds_ij, dF_j -= ds_ij
    if (dF) dF[i] += tree16_(part);
    return dd;
}

// the RFA filter case (plain C in every build): the row's entries from the logits of filter_logit_, the
// post-softmax factor E from the table; dp becomes the coefficient of q_i.k_j (dq_i += dp_j k_j, ...),
// and the norm terms go to dqn_i (returned), dkn[c]; the table and beta gradients to sc->glag, sc->gbeta.
// Lags run backwards along the row (d = i - j0 - c): the tables are read through pointers at d = i - j0
// with index -c, which the compiler vectorises with a lane reversal.
ALWAYS_INLINE_ float bwd_row_filter_k_(int kind, float *restrict s, float *restrict dp, BwdScratch_ *sc,
                                       const HeadOpts_ *ho, int i, int j0, int lo, int hi, float lse_i, float D) {
    int clo = lo - j0, chi = hi - j0, d0 = i - j0;
    float qn = sc->qn[i], beta = ho->beta;
    // the row's two sums (dqn_i and beta's gradient) are formed after the loop from these per-key terms:
    // a float sum inside the loop would keep it from vectorising (it would need reassociation)
    float rq[ATTN_BC], rb[ATTN_BC];
    const float *restrict kn = sc->kn + j0;
    float *restrict dkn = sc->dkn;
    const float *restrict fa = ho->fa + d0, *restrict fc = ho->fc + d0, *restrict fe = ho->fe + d0;
    float *restrict ga = sc->glag + d0, *restrict gc = sc->glag + sc->glag_T + d0,
          *restrict gE = sc->glag + 2 * (size_t)sc->glag_T + d0;
    for (int c = 0; c < clo; c++) s[c] = dp[c] = rq[c] = rb[c] = 0.0f;
    for (int c = chi > clo ? chi : clo; c < ATTN_BC; c++) s[c] = dp[c] = rq[c] = rb[c] = 0.0f;
    for (int c = clo; c < chi; c++) {
        float R2, lg, e = fe[-c], cc = fc[-c], dot = s[c];
        float x = filter_logit_(kind, dot, qn, kn[c], fa[-c], cc, e, beta, &R2, &lg);
        float p = exp_neg_(x - lse_i);
        float dw = dp[c];
        // softmax backward with the post-softmax factor, as in bwd_row_decay_: w = p E
        float dl = p * (e * dw - D);
        s[c] = p * e;
        if (kind == ATTN_FILTER_DOT) {
            // in the forward pass this was: l = beta s
            gE[-c] += p * dw;
            rb[c] = dl * dot;
            rq[c] = 0.0f;
            dp[c] = dl * beta;
            continue;
        }
        // in the forward pass this was: l = a - beta log(1 + c R2) (or a - beta c R2), p = exp(l - lse),
        // with R2 = qn + E^2 kn - 2 E s
        float dR2, dcc;
        if (kind == ATTN_FILTER_STUDENT) {
            float u = cc * R2;
            float g = dl * beta / (1.0f + (u > 0.0f ? u : 0.0f));  // -dl/du
            dR2 = -g * cc;
            dcc = -g * R2;
            rb[c] = -(dl * lg);
        } else {
            dR2 = -dl * beta * cc;
            dcc = -dl * beta * R2;
            rb[c] = -(dl * cc * R2);
        }
        ga[-c] += dl;
        gc[-c] += dcc;
        // E enters w = p E and R2 (E^2 kn - 2 E s)
        gE[-c] += p * dw + dR2 * (2.0f * e * kn[c] - 2.0f * dot);
        rq[c] = dR2;
        dkn[c] += e * e * dR2;
        dp[c] = -2.0f * e * dR2;
    }
    // the sums in a fixed order: 16 interleaved partial sums folded by tree16_
    float pq[16] = {0}, pb[16] = {0};
    for (int c = 0; c < ATTN_BC; c++) {
        pq[c & 15] += rq[c];
        pb[c & 15] += rb[c];
    }
    sc->gbeta += tree16_(pb);
    return tree16_(pq);
}

#ifdef ATTN_SIMD_
// bwd_row_filter_k_ on 4 vectors of 16 keys (the same operations). The lags of a vector run backwards, so
// the tables are read (and the table gradients updated) as 16 ascending lags reversed into key order.
ALWAYS_INLINE_ float bwd_row_filter_simd_(int kind, float *restrict s, float *restrict dp, BwdScratch_ *sc,
                                          const HeadOpts_ *ho, int i, int j0, int lo, int hi, float lse_i, float D) {
    const v16i iota = v16i_iota();
    const v16i lov = v16i_set1(lo), hiv = v16i_set1(hi);
    const v16f zero = v16_zero(), qn = v16_set1(sc->qn[i]), beta = v16_set1(ho->beta);
    const v16f lse_v = v16_set1(lse_i), D_v = v16_set1(D), two = v16_set1(2.0f);
    const v16f ntwo = v16_set1(-2.0f);
    int d0 = i - j0;
    float *ga = sc->glag, *gc = sc->glag + sc->glag_T, *gE = sc->glag + 2 * (size_t)sc->glag_T;
    float rq[ATTN_BC], rb[ATTN_BC];
    for (int v = 0; v < ATTN_BC / 16; v++) {
        int c0 = 16 * v;
        v16i jv = v16i_add(v16i_set1(j0 + c0), iota);
        m16 vis = v16i_cmpge(jv, lov) & v16i_cmplt(jv, hiv);
        if (!vis) {
            v16_storeu(s + c0, zero);
            v16_storeu(dp + c0, zero);
            v16_storeu(rq + c0, zero);
            v16_storeu(rb + c0, zero);
            continue;
        }
        // lane u is lag d0 - c0 - u: memory lanes base + (15 - u), base = d0 - c0 - 15
        m16 mm = rev16_mask_(vis);
        ptrdiff_t base = (ptrdiff_t)d0 - c0 - 15;
        v16f e = v16_reverse(v16_maskz_loadu(mm, ho->fe + base));
        v16f cc = v16_reverse(v16_maskz_loadu(mm, ho->fc + base));
        v16f a = v16_reverse(v16_maskz_loadu(mm, ho->fa + base));
        v16f kn = v16_maskz_loadu(vis, sc->kn + j0 + c0);
        v16f dot = v16_loadu(s + c0), dw = v16_loadu(dp + c0);
        v16f R2, lg;
        v16f x = filter_logit_v_(kind, dot, qn, kn, a, cc, e, beta, &R2, &lg);
        v16f p = v16_maskz_mov(vis, exp_neg_v_(v16_sub(x, lse_v)));
        v16f dl = v16_mul(p, v16_sub(v16_mul(e, dw), D_v));
        v16_storeu(s + c0, v16_mul(p, e));
        v16f gE_add, dR2 = zero, dcc = zero, rbv;
        if (kind == ATTN_FILTER_DOT) {
            gE_add = v16_mul(p, dw);
            rbv = v16_mul(dl, dot);
            v16_storeu(dp + c0, v16_mul(dl, beta));
        } else {
            if (kind == ATTN_FILTER_STUDENT) {
                v16f u = v16_mul(cc, R2);
                v16f g = v16_div(v16_mul(dl, beta),
                                         v16_add(v16_set1(1.0f), v16_max(u, zero)));
                v16f ng = v16_sub(zero, g);
                dR2 = v16_mul(ng, cc);
                dcc = v16_mul(ng, R2);
                rbv = v16_sub(zero, v16_mul(dl, lg));
            } else {
                v16f ndlb = v16_mul(v16_sub(zero, dl), beta);
                dR2 = v16_mul(ndlb, cc);
                dcc = v16_mul(ndlb, R2);
                rbv = v16_sub(zero, v16_mul(v16_mul(dl, cc), R2));
            }
            v16f t = v16_sub(v16_mul(v16_mul(two, e), kn), v16_mul(two, dot));
            gE_add = v16_add(v16_mul(p, dw), v16_mul(dR2, t));
            v16f ga_v = v16_maskz_loadu(mm, ga + base), gc_v = v16_maskz_loadu(mm, gc + base);
            v16_mask_storeu(ga + base, mm, v16_add(ga_v, v16_reverse(dl)));
            v16_mask_storeu(gc + base, mm, v16_add(gc_v, v16_reverse(dcc)));
            v16f dknv = v16_loadu(sc->dkn + c0);
            v16_storeu(sc->dkn + c0, v16_add(dknv, v16_mul(v16_mul(e, e), dR2)));
            v16_storeu(dp + c0, v16_mul(v16_mul(ntwo, e), dR2));
        }
        v16f gE_v = v16_maskz_loadu(mm, gE + base);
        v16_mask_storeu(gE + base, mm, v16_add(gE_v, v16_reverse(gE_add)));
        v16_storeu(rq + c0, v16_maskz_mov(vis, dR2));
        v16_storeu(rb + c0, v16_maskz_mov(vis, rbv));
    }
    float pq[16] = {0}, pb[16] = {0};
    for (int c = 0; c < ATTN_BC; c++) {
        pq[c & 15] += rq[c];
        pb[c & 15] += rb[c];
    }
    sc->gbeta += tree16_(pb);
    return tree16_(pq);
}
#define BWD_ROW_FILTER_K_ bwd_row_filter_simd_
#else
#define BWD_ROW_FILTER_K_ bwd_row_filter_k_
#endif

static float bwd_row_filter_(float *s, float *dp, BwdScratch_ *sc, const HeadOpts_ *ho, int i, int j0, int lo, int hi,
                             float lse_i, float D) {
    switch (ho->fkind) {
    case ATTN_FILTER_STUDENT: return BWD_ROW_FILTER_K_(ATTN_FILTER_STUDENT, s, dp, sc, ho, i, j0, lo, hi, lse_i, D);
    case ATTN_FILTER_GAUSS: return BWD_ROW_FILTER_K_(ATTN_FILTER_GAUSS, s, dp, sc, ho, i, j0, lo, hi, lse_i, D);
    default: return BWD_ROW_FILTER_K_(ATTN_FILTER_DOT, s, dp, sc, ho, i, j0, lo, hi, lse_i, D);
    }
}

PORTABLE_ void bwd_row_portable_(float *s, float *dp, float *dFk, float *dF, const HeadOpts_ *ho, int i, int j0,
                              int lo, int hi, float lse_i, float D) {
    float part[16] = {0};
    for (int c = 0; c < ATTN_BC; c++) {
        int j = j0 + c;
        float p = 0.0f, ds = 0.0f;
        if (j >= lo && j < hi) {
            p = exp_neg_(logit_(s[c], ho, i, j) - lse_i);
            ds = p * (dp[c] - D);
        }
        s[c] = p;
        dp[c] = ds * ho->scale;
        if (dF) {
            part[c & 15] += ds;
            dFk[c] -= ds;
        }
    }
    if (dF) dF[i] += tree16_(part);
}

#ifdef ATTN_SIMD_
// bwd_row_portable_ on 4 vectors of 16 keys (the same operations)
static void bwd_row_(float *s, float *dp, float *dFk, float *dF, const HeadOpts_ *ho, int i, int j0, int lo, int hi,
                     float lse_i, float D) {
    const v16i iota = v16i_iota();
    const v16f scale = v16_set1(ho->scale), slope = v16_set1(ho->slope);
    const v16f lse_v = v16_set1(lse_i), D_v = v16_set1(D);
    const v16f Fi = v16_set1(ho->F ? ho->F[i] : 0.0f);
    const v16i iv = v16i_set1(i), lov = v16i_set1(lo), hiv = v16i_set1(hi);
    v16f part = v16_zero();
    for (int v = 0; v < ATTN_BC / 16; v++) {
        v16i jv = v16i_add(v16i_set1(j0 + 16 * v), iota);
        m16 vis = v16i_cmpge(jv, lov) & v16i_cmplt(jv, hiv);
        v16f x = v16_mul(v16_loadu(s + 16 * v), scale);
        if (ho->slope != 0.0f) x = v16_sub(x, v16_mul(slope, v16i_to_float(v16i_sub(iv, jv))));
        if (ho->F) x = v16_add(x, v16_sub(Fi, v16_maskz_loadu(vis, ho->F + j0 + 16 * v)));
        v16f p = v16_maskz_mov(vis, exp_neg_v_(v16_sub(x, lse_v)));
        v16f ds = v16_maskz_mov(vis, v16_mul(p, v16_sub(v16_loadu(dp + 16 * v), D_v)));
        v16_storeu(s + 16 * v, p);
        v16_storeu(dp + 16 * v, v16_mul(ds, scale));
        if (dF) {
            part = v16_add(part, ds);
            v16_storeu(dFk + 16 * v, v16_sub(v16_loadu(dFk + 16 * v), ds));
        }
    }
    if (dF) dF[i] += v16_tree_sum(part);
}
#else
static void bwd_row_(float *s, float *dp, float *dFk, float *dF, const HeadOpts_ *ho, int i, int j0, int lo, int hi,
                     float lse_i, float D) {
    bwd_row_portable_(s, dp, dFk, dF, ho, i, j0, lo, hi, lse_i, D);
}
#endif

// one head: every (key tile, query tile) pair that has a visible entry. Pointers are the (b,h) slices:
// dq, dk, dv, dout, out, q, k, v (T, HS); dF, lse (T,). Returns this head's contribution to ddecay.
static double backward_head_(float *dq, float *dk, float *dv, float *dF, const float *dout, const float *out,
                             const float *lse, const float *q, const float *k, const float *v,
                             const HeadOpts_ *ho, int T, int HS, int overwrite, BwdScratch_ *sc) {
    double ddecay = 0.0;
    // overwrite: dq collects once per tile pair, so it starts from zero here (the slice stays in cache
    // for the tile pairs that follow); dk, dv are stored once per key tile below instead of added
    if (overwrite && dq) memset(dq, 0, (size_t)T * HS * sizeof(float));
    // D_i = sum_j p_ij dp_ij with dp_ij = E_ij do_i.v_j, which equals do_i . out_i since
    // out_i = sum_j p_ij E_ij v_j (also with the post-softmax decay); every key tile of row i needs it
    for (int i = 0; i < T; i++) sc->D[i] = row_dot_(dout + (size_t)i * HS, out + (size_t)i * HS, HS);
    if (ho->fkind) {
        // the same norms (same fma chains) as the forward's
        for (int i = 0; i < T; i++) {
            sc->qn[i] = row_dot_(q + (size_t)i * HS, q + (size_t)i * HS, HS);
            sc->kn[i] = row_dot_(k + (size_t)i * HS, k + (size_t)i * HS, HS);
            sc->dqn[i] = 0.0f;
        }
    }
    for (int j0 = 0; j0 < T; j0 += ATTN_BC) {
        int nc = T - j0 < ATTN_BC ? T - j0 : ATTN_BC;
        // queries that see some key of this tile: i >= j0, and i - W < j0 + nc - 1 with a window
        int iend = T;
        if (ho->W > 0 && j0 + nc - 1 + ho->W < iend) iend = j0 + nc - 1 + ho->W;
        transpose_rows_(sc->kt, k + (size_t)j0 * HS, nc, HS);
        transpose_rows_(sc->vt, v + (size_t)j0 * HS, nc, HS);
        memset(sc->dk, 0, (size_t)nc * HS * sizeof(float));
        memset(sc->dv, 0, (size_t)nc * HS * sizeof(float));
        memset(sc->dFk, 0, sizeof sc->dFk);
        memset(sc->dkn, 0, sizeof sc->dkn);
        for (int i0 = j0; i0 < iend; i0 += ATTN_BR) {
            int nr = iend - i0 < ATTN_BR ? iend - i0 : ATTN_BR;
            const float *q_t = q + (size_t)i0 * HS, *do_t = dout + (size_t)i0 * HS;
            // query r sees key c iff c - r <= i0 - j0 (causal) and c - r > i0 - j0 - W (window)
            int dlo_q = ho->W ? i0 - j0 - ho->W + 1 : -ATTN_NOLIM_;
            dot_tile_(sc->S, q_t, sc->kt, nr, HS, dlo_q, i0 - j0);
            // in the forward pass this was: out_i = sum_j w_ij v_j; so dw_ij = do_i . v_j
            dot_tile_(sc->DP, do_t, sc->vt, nr, HS, dlo_q, i0 - j0);
            for (int r = 0; r < nr; r++) {
                int i = i0 + r, lo, hi;
                visible_range_(&lo, &hi, i, j0, nc, ho->W);
                float *s = sc->S + (size_t)r * ATTN_BC, *dp = sc->DP + (size_t)r * ATTN_BC;
                float D = sc->D[i];
                if (ho->fkind) sc->dqn[i] += bwd_row_filter_(s, dp, sc, ho, i, j0, lo, hi, lse[i], D);
                else if (ho->has_decay) ddecay += bwd_row_decay_(s, dp, sc->dFk, dF, ho, i, j0, lo, hi, lse[i], D);
                else bwd_row_(s, dp, sc->dFk, dF, ho, i, j0, lo, hi, lse[i], D);
            }
            // in the forward pass this was: out_i = sum_j w_ij v_j; so dv_j += sum_i w_ij do_i
            // key c is seen by query r only if r - c >= j0 - i0 (causal) and r - c < j0 - i0 + W (window)
            int dhi_k = ho->W ? j0 - i0 + ho->W - 1 : ATTN_NOLIM_;
            if (dv) acc_tile_(sc->dv, sc->S, 1, ATTN_BC, do_t, nc, nr, HS, NULL, 0, j0 - i0, dhi_k);
            // in the forward pass this was: s_ij = scale * q_i.k_j + bias; so dk_j += sum_i (scale ds_ij) q_i
            // and dq_i += sum_j (scale ds_ij) k_j
            if (dk) acc_tile_(sc->dk, sc->DP, 1, ATTN_BC, q_t, nc, nr, HS, NULL, 0, j0 - i0, dhi_k);
            if (dq) {
                acc_tile_(dq + (size_t)i0 * HS, sc->DP, ATTN_BC, 1, k + (size_t)j0 * HS, nr, nc, HS, NULL, 1, dlo_q,
                          i0 - j0);
            }
        }
        if (ho->fkind && dk) {
            // in the forward pass this was: R2 = ... + E^2 |k_j|^2 ...; so dk_j += 2 k_j dkn_j
            for (int c = 0; c < nc; c++) {
                const float *kr = k + (size_t)(j0 + c) * HS;
                float g = 2.0f * sc->dkn[c];
                for (int d = 0; d < HS; d++) sc->dk[(size_t)c * HS + d] += g * kr[d];
            }
        }
        for (int c = 0; c < nc; c++) {
            size_t row = (size_t)(j0 + c) * HS;
            if (dk && overwrite) memcpy(dk + row, sc->dk + (size_t)c * HS, (size_t)HS * sizeof(float));
            else if (dk) {
                for (int d = 0; d < HS; d++) dk[row + d] += sc->dk[(size_t)c * HS + d];
            }
            if (dv && overwrite) memcpy(dv + row, sc->dv + (size_t)c * HS, (size_t)HS * sizeof(float));
            else if (dv) {
                for (int d = 0; d < HS; d++) dv[row + d] += sc->dv[(size_t)c * HS + d];
            }
            if (dF) dF[j0 + c] += sc->dFk[c];
        }
    }
    if (ho->fkind && dq) {
        // in the forward pass this was: R2 = |q_i|^2 + ...; so dq_i += 2 q_i dqn_i
        for (int i = 0; i < T; i++) {
            float g = 2.0f * sc->dqn[i];
            for (int d = 0; d < HS; d++) dq[(size_t)i * HS + d] += g * q[(size_t)i * HS + d];
        }
    }
    return ddecay;
}

// attention_backward (overwrite = 0) and attention_backward_write (overwrite = 1)
static void attention_backward_(float *dq, float *dk, float *dv, float *dfgate, float *ddecay,
                                const float *dout, const float *out, const float *lse,
                                const float *q, const float *k, const float *v, const AttnOpts *o,
                                int B, int NH, int T, int HS, int overwrite) {
    // dq, dk, dv are (B,NH,T,HS), dfgate is (B,NH,T), ddecay is (NH,): accumulated into, may be NULL
    // dout, out are (B,NH,T,HS); lse is (B,NH,T); q, k, v are (B,NH,T,HS)
    if (!o->fgate) dfgate = NULL;
    if (!o->decay) ddecay = NULL;
    const AttnFilter *f = o->filter;
    // per-(b,h) filter gradients: lag tables (3, T) then beta, summed over b in order afterwards
    size_t gstride = 3 * (size_t)T + 1;
    float *g_bh = f ? xcalloc((size_t)B * NH * gstride, sizeof(float)) : NULL;
    // per-(b,h) decay gradients, summed over b in order after the parallel loop (thread-count independent)
    double *dd_bh = ddecay ? xcalloc((size_t)B * NH, sizeof(double)) : NULL;
    #pragma omp parallel
    {
        BwdScratch_ sc;
        size_t tile_hs = (size_t)HS * ATTN_BC, tile_sq = (size_t)ATTN_BR * ATTN_BC;
        float *buf = scratch_alloc_(4 * tile_hs + 2 * tile_sq + 4 * (size_t)T);
        sc.kt = buf;
        sc.vt = sc.kt + tile_hs;
        sc.dk = sc.vt + tile_hs;
        sc.dv = sc.dk + tile_hs;
        sc.S = sc.dv + tile_hs;
        sc.DP = sc.S + tile_sq;
        sc.D = sc.DP + tile_sq;
        sc.qn = sc.D + T;
        sc.kn = sc.qn + T;
        sc.dqn = sc.kn + T;
        sc.glag_T = T;
        // every head is the same amount of work
        #pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < B * NH; bh++) {
            size_t off = (size_t)bh * T * HS;
            HeadOpts_ ho = head_opts_(o, bh / NH, bh % NH, NH, T);
            if (g_bh) {
                sc.glag = g_bh + (size_t)bh * gstride;
                sc.gbeta = 0.0f;
            }
            double dd = backward_head_(dq ? dq + off : NULL, dk ? dk + off : NULL, dv ? dv + off : NULL,
                                       dfgate ? dfgate + (size_t)bh * T : NULL, dout + off, out + off,
                                       lse + (size_t)bh * T, q + off, k + off, v + off, &ho, T, HS, overwrite, &sc);
            if (dd_bh) dd_bh[bh] = dd;
            if (g_bh) g_bh[(size_t)bh * gstride + 3 * (size_t)T] = sc.gbeta;
        }
        free(buf);
    }
    if (f) {
        for (int h = 0; h < NH; h++) {
            float *outs[3] = {f->dbias, f->dprec, f->ddecay};
            for (int w = 0; w < 3; w++) {
                if (!outs[w]) continue;
                for (int d = 0; d < T; d++) {
                    double acc = 0.0;
                    for (int b = 0; b < B; b++) acc += g_bh[((size_t)b * NH + h) * gstride + (size_t)w * T + d];
                    outs[w][(size_t)h * f->lag_len + d] += (float)acc;
                }
            }
            if (f->dbeta) {
                double acc = 0.0;
                for (int b = 0; b < B; b++) acc += g_bh[((size_t)b * NH + h) * gstride + 3 * (size_t)T];
                f->dbeta[h] += (float)acc;
            }
        }
        free(g_bh);
    }
    if (ddecay) {
        for (int h = 0; h < NH; h++) {
            double acc = 0.0;
            for (int b = 0; b < B; b++) acc += dd_bh[(size_t)b * NH + h];
            ddecay[h] += (float)acc;
        }
        free(dd_bh);
    }
}

void attention_backward(float *dq, float *dk, float *dv, float *dfgate, float *ddecay,
                        const float *dout, const float *out, const float *lse,
                        const float *q, const float *k, const float *v, const AttnOpts *o,
                        int B, int NH, int T, int HS) {
    attention_backward_(dq, dk, dv, dfgate, ddecay, dout, out, lse, q, k, v, o, B, NH, T, HS, 0);
}

void attention_backward_write(float *dq, float *dk, float *dv, float *dfgate, float *ddecay,
                              const float *dout, const float *out, const float *lse,
                              const float *q, const float *k, const float *v, const AttnOpts *o,
                              int B, int NH, int T, int HS) {
    attention_backward_(dq, dk, dv, dfgate, ddecay, dout, out, lse, q, k, v, o, B, NH, T, HS, 1);
}

// ----------------------------------------------------------------------------
// attention maps

void attention_probs(float *P, const float *q, const float *k, const float *lse, const AttnOpts *o,
                     int b, int h, int NH, int T, int HS) {
    // P is (T, T); q, k are this head's (T, HS) slices, lse its (T,) slice
    HeadOpts_ ho = head_opts_(o, b, h, NH, T);
    // the keys' squared norms once, not once per (i, j)
    float *kn = ho.fkind ? xmalloc((size_t)T * sizeof(float)) : NULL;
    for (int j = 0; kn && j < T; j++) kn[j] = row_dot_(k + (size_t)j * HS, k + (size_t)j * HS, HS);
    #pragma omp parallel for schedule(dynamic, 16)
    for (int i = 0; i < T; i++) {
        const float *qi = q + (size_t)i * HS;
        float qn = ho.fkind ? row_dot_(qi, qi, HS) : 0.0f;
        float *row = P + (size_t)i * T;
        for (int j = 0; j < T; j++) {
            if (j > i || (ho.W && i - j >= ho.W)) {
                row[j] = NAN;
                continue;
            }
            const float *kj = k + (size_t)j * HS;
            // the forward's dot product: one fma chain over d from 0 (dot_tile_)
            float dot = 0.0f;
            for (int d = 0; d < HS; d++) dot = fmaf(qi[d], kj[d], dot);
            float x;
            if (ho.fkind) {
                float R2, lg;
                size_t d = (size_t)(i - j);
                switch (ho.fkind) {  // constant kinds, as in the kernels
                case ATTN_FILTER_STUDENT:
                    x = filter_logit_(ATTN_FILTER_STUDENT, dot, qn, kn[j], ho.fa[d], ho.fc[d], ho.fe[d],
                                      ho.beta, &R2, &lg);
                    break;
                case ATTN_FILTER_GAUSS:
                    x = filter_logit_(ATTN_FILTER_GAUSS, dot, qn, kn[j], ho.fa[d], ho.fc[d], ho.fe[d],
                                      ho.beta, &R2, &lg);
                    break;
                default:
                    x = filter_logit_(ATTN_FILTER_DOT, dot, qn, 0.0f, 0.0f, 0.0f, 1.0f, ho.beta, &R2, &lg);
                    break;
                }
            } else {
                x = logit_(dot, &ho, i, j);
            }
            row[j] = exp_neg_(x - lse[i]);
        }
    }
    free(kn);
}
