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
 * blocking, so the AVX-512 kernels and the plain C ones (always compiled; the path of the generic and
 * avx2 kernel sets, vectorised there by the compiler) give bit-identical results. The elementwise parts (logits, masks, exp,
 * sums) do the same float operations in the same order in both paths too: sums that vectorise run over
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
 * factor of masked entries in the forward, which the clamp at 88 keeps finite (it multiplies a 0).
 */
#include "nn/attention.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"

// the AVX-512 kernels in the avx512 copy (nn/isa.h); the plain C ones elsewhere. Both give the same bits
// (tests run every kernel set the machine has)
#if ISA_AVX512
#define ATTN_SIMD_ 1
#include <immintrin.h>
#endif

// query rows and keys per tile: a (64, 64) logit tile, a (HS, 64) transposed tile and a (64, HS)
// accumulator tile stay in L1/L2 for HS <= 128; 64 columns are 4 AVX-512 vectors
#define ATTN_BR 64
#define ATTN_BC 64
// output rows per register block of the micro-kernels: 6 rows x 4 vectors = 24 of the 32 zmm registers,
// leaving room for the 4 vectors loaded per reduction step and the broadcast
#define ATTN_MR 6

#define ALWAYS_INLINE_ static inline __attribute__((always_inline))
// the plain C kernels: the whole path without AVX-512, and still compiled (unused) with it, so it never rots
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
    float n = (xc * 1.44269504f + 12582912.0f) - 12582912.0f;
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
    int32_t bits = ((int32_t)n + 127) << 23;  // n in [-126, 127]: a normal power of two
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return x < -87.0f ? 0.0f : pr * two_n;
}

// sum of 16 partial sums by a fixed tree: p[u] += p[u + w] for w = 8, 4, 2, 1 (tree16_v_ folds the same way)
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
static inline __m512 exp_neg_v_(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.0f);
    __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(88.0f));
    const __m512 big = _mm512_set1_ps(12582912.0f);
    __m512 n = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504f)), big), big);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693145752f), xc);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-1.42860677e-6f), r);
    __m512 pr = _mm512_set1_ps(1.0f / 5040.0f);
    pr = _mm512_fmadd_ps(pr, r, _mm512_set1_ps(1.0f / 720.0f));
    pr = _mm512_fmadd_ps(pr, r, _mm512_set1_ps(1.0f / 120.0f));
    pr = _mm512_fmadd_ps(pr, r, _mm512_set1_ps(1.0f / 24.0f));
    pr = _mm512_fmadd_ps(pr, r, _mm512_set1_ps(1.0f / 6.0f));
    pr = _mm512_fmadd_ps(pr, r, _mm512_set1_ps(0.5f));
    pr = _mm512_fmadd_ps(pr, r, _mm512_set1_ps(1.0f));
    pr = _mm512_fmadd_ps(pr, r, _mm512_set1_ps(1.0f));
    // pr * 2^n in one instruction: n is integral and in [-126, 127], so this is the same correctly rounded
    // product as pr * two_n in exp_neg_
    __m512 e = _mm512_scalef_ps(pr, n);
    return _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), _mm512_setzero_ps());
}

// tree16_ on the 16 lanes of v
static inline float tree16_v_(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));  // u + (u+8)
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));                 // u + (u+4)
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));                                                  // u + (u+2)
    __m128 d = _mm_add_ss(c, _mm_shuffle_ps(c, c, 1));                                              // 0 + 1
    return _mm_cvtss_f32(d);
}

static float row_dot_(const float *a, const float *b, int HS) {
    if (HS % 16 != 0) return row_dot_portable_(a, b, HS);
    __m512 p = _mm512_setzero_ps();
    for (int d = 0; d < HS; d += 16) p = _mm512_fmadd_ps(_mm512_loadu_ps(a + d), _mm512_loadu_ps(b + d), p);
    return tree16_v_(p);
}

static inline __m512i iota16_(void) {
    return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
#else
static float row_dot_(const float *a, const float *b, int HS) { return row_dot_portable_(a, b, HS); }
#endif

#ifdef ATTN_SIMD_
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
#ifdef ATTN_SIMD_
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
// R (<= ATTN_MR) rows of C = A @ Bt, vectors [V0, V1) of the 4, the accumulators in registers over all of d;
// the other vectors of the rows get 0 (entries the caller's mask hides, whatever they hold)
ALWAYS_INLINE_ void dot_block_simd_(float *restrict C, const float *restrict A, const float *restrict Bt, int R,
                                    int HS, int V0, int V1) {
    __m512 c[ATTN_MR][4];
    for (int i = 0; i < R; i++) {
        for (int v = V0; v < V1; v++) c[i][v] = _mm512_setzero_ps();
    }
    for (int d = 0; d < HS; d++) {
        const float *b = Bt + (size_t)d * ATTN_BC;
        __m512 bv[4];
        for (int v = V0; v < V1; v++) bv[v] = _mm512_loadu_ps(b + 16 * v);
        for (int i = 0; i < R; i++) {
            __m512 a = _mm512_set1_ps(A[(size_t)i * HS + d]);
            for (int v = V0; v < V1; v++) c[i][v] = _mm512_fmadd_ps(a, bv[v], c[i][v]);
        }
    }
    for (int i = 0; i < R; i++) {
        for (int v = 0; v < 4; v++) {
            __m512 x = v >= V0 && v < V1 ? c[i][v] : _mm512_setzero_ps();
            _mm512_storeu_ps(C + (size_t)i * ATTN_BC + 16 * v, x);
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
        case 0 * 5 + 1: dot_block_simd_(Ci, Ai, Bt, ATTN_MR, HS, 0, 1); break;
        case 0 * 5 + 2: dot_block_simd_(Ci, Ai, Bt, ATTN_MR, HS, 0, 2); break;
        case 0 * 5 + 3: dot_block_simd_(Ci, Ai, Bt, ATTN_MR, HS, 0, 3); break;
        case 1 * 5 + 2: dot_block_simd_(Ci, Ai, Bt, ATTN_MR, HS, 1, 2); break;
        case 1 * 5 + 3: dot_block_simd_(Ci, Ai, Bt, ATTN_MR, HS, 1, 3); break;
        case 1 * 5 + 4: dot_block_simd_(Ci, Ai, Bt, ATTN_MR, HS, 1, 4); break;
        case 2 * 5 + 3: dot_block_simd_(Ci, Ai, Bt, ATTN_MR, HS, 2, 3); break;
        case 2 * 5 + 4: dot_block_simd_(Ci, Ai, Bt, ATTN_MR, HS, 2, 4); break;
        case 3 * 5 + 4: dot_block_simd_(Ci, Ai, Bt, ATTN_MR, HS, 3, 4); break;
        case 0: memset(Ci, 0, (size_t)ATTN_MR * ATTN_BC * sizeof(float)); break;  // nothing visible
        default: dot_block_simd_(Ci, Ai, Bt, ATTN_MR, HS, 0, 4); break;
        }
    }
    float *Ci = C + (size_t)i * ATTN_BC;
    const float *Ai = A + (size_t)i * HS;
    // the row tail, all columns, with a constant row count so its accumulators stay in registers too
    switch (n - i) {
    case 5: dot_block_simd_(Ci, Ai, Bt, 5, HS, 0, 4); break;
    case 4: dot_block_simd_(Ci, Ai, Bt, 4, HS, 0, 4); break;
    case 3: dot_block_simd_(Ci, Ai, Bt, 3, HS, 0, 4); break;
    case 2: dot_block_simd_(Ci, Ai, Bt, 2, HS, 0, 4); break;
    case 1: dot_block_simd_(Ci, Ai, Bt, 1, HS, 0, 4); break;
    default: break;
    }
}

// R (<= ATTN_MR) rows x NV (<= 4) vectors of acc_tile_, accumulators in registers over all of t; Y and X
// point at the first column of the block, rows HS apart
ALWAYS_INLINE_ void acc_block_simd_(float *restrict Y, const float *restrict A, int so, int st,
                                    const float *restrict X, int nt, int HS, const float *alpha, int fresh,
                                    int R, int NV) {
    __m512 y[ATTN_MR][4];
    for (int i = 0; i < R; i++) {
        for (int v = 0; v < NV; v++) {
            if (fresh) {
                y[i][v] = _mm512_setzero_ps();
                continue;
            }
            y[i][v] = _mm512_loadu_ps(Y + (size_t)i * HS + 16 * v);
            if (alpha) y[i][v] = _mm512_mul_ps(y[i][v], _mm512_set1_ps(alpha[i]));
        }
    }
    for (int t = 0; t < nt; t++) {
        const float *x = X + (size_t)t * HS;
        const float *a = A + (size_t)t * st;
        __m512 xv[4];
        for (int v = 0; v < NV; v++) xv[v] = _mm512_loadu_ps(x + 16 * v);
        for (int i = 0; i < R; i++) {
            __m512 ai = _mm512_set1_ps(a[(size_t)i * so]);
            for (int v = 0; v < NV; v++) y[i][v] = _mm512_fmadd_ps(ai, xv[v], y[i][v]);
        }
    }
    for (int i = 0; i < R; i++) {
        for (int v = 0; v < NV; v++) {
            float *yp = Y + (size_t)i * HS + 16 * v;
            _mm512_storeu_ps(yp, fresh ? _mm512_add_ps(_mm512_loadu_ps(yp), y[i][v]) : y[i][v]);
        }
    }
}

// any block shape (head sizes that are not a multiple of 64): runtime R, NV
static __attribute__((noinline)) void acc_block_any_simd_(float *restrict Y, const float *restrict A, int so, int st,
                                                          const float *restrict X, int nt, int HS,
                                                          const float *alpha, int fresh, int R, int NV) {
    acc_block_simd_(Y, A, so, st, X, nt, HS, alpha, fresh, R, NV);
}

// acc_tile_portable_ for HS a multiple of 16: blocks of ATTN_MR rows x 64 columns
ALWAYS_INLINE_ void acc_tile_simd_(float *restrict Y, const float *restrict A, int so, int st, const float *restrict X,
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
            case 6: acc_block_simd_(Yo, Ao, so, st, Xd, ntb, HS, al, fresh, 6, 4); break;
            case 5: acc_block_simd_(Yo, Ao, so, st, Xd, ntb, HS, al, fresh, 5, 4); break;
            case 4: acc_block_simd_(Yo, Ao, so, st, Xd, ntb, HS, al, fresh, 4, 4); break;
            case 3: acc_block_simd_(Yo, Ao, so, st, Xd, ntb, HS, al, fresh, 3, 4); break;
            case 2: acc_block_simd_(Yo, Ao, so, st, Xd, ntb, HS, al, fresh, 2, 4); break;
            default: acc_block_simd_(Yo, Ao, so, st, Xd, ntb, HS, al, fresh, 1, 4); break;
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
static inline __m512 log1p_pos_v_(__m512 u) {
    const __m512 big = _mm512_set1_ps(8.5e37f), one = _mm512_set1_ps(1.0f);
    __m512 y = _mm512_mask_mov_ps(big, _mm512_cmp_ps_mask(u, big, _CMP_LT_OQ), _mm512_add_ps(one, u));
    __m512i bits = _mm512_castps_si512(y);
    __m512i k = _mm512_srai_epi32(_mm512_sub_epi32(bits, _mm512_set1_epi32(0x3f3504f3)), 23);
    __m512 m = _mm512_castsi512_ps(_mm512_sub_epi32(bits, _mm512_slli_epi32(k, 23)));
    __m512 z = _mm512_div_ps(_mm512_sub_ps(m, one), _mm512_add_ps(m, one)), z2 = _mm512_mul_ps(z, z);
    __m512 pz = _mm512_set1_ps(2.0f / 9.0f);
    pz = _mm512_fmadd_ps(pz, z2, _mm512_set1_ps(2.0f / 7.0f));
    pz = _mm512_fmadd_ps(pz, z2, _mm512_set1_ps(2.0f / 5.0f));
    pz = _mm512_fmadd_ps(pz, z2, _mm512_set1_ps(2.0f / 3.0f));
    pz = _mm512_fmadd_ps(pz, z2, _mm512_set1_ps(2.0f));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(k), _mm512_set1_ps(0.693147182f), _mm512_mul_ps(z, pz));
}

// lanes in reverse order, and the 16-bit mask of those lanes
static inline __m512 rev16_(__m512 v) {
    return _mm512_permutexvar_ps(_mm512_set_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), v);
}
static inline __mmask16 rev16_mask_(__mmask16 m) {
    unsigned x = m;
    x = ((x >> 1) & 0x5555u) | ((x & 0x5555u) << 1);
    x = ((x >> 2) & 0x3333u) | ((x & 0x3333u) << 2);
    x = ((x >> 4) & 0x0F0Fu) | ((x & 0x0F0Fu) << 4);
    x = ((x >> 8) & 0x00FFu) | ((x & 0x00FFu) << 8);
    return (__mmask16)x;
}

// the RFA logits of 16 lanes (filter_logit_'s operations); lg gets log(1 + c R2) (STUDENT)
ALWAYS_INLINE_ __m512 filter_logit_v_(int kind, __m512 dot, __m512 qn, __m512 kn, __m512 a, __m512 c, __m512 e,
                                      __m512 beta, __m512 *R2, __m512 *lg) {
    if (kind == ATTN_FILTER_DOT) {
        *R2 = *lg = _mm512_setzero_ps();
        return _mm512_mul_ps(beta, dot);
    }
    __m512 r2 = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(-2.0f), e), dot,
                                _mm512_fmadd_ps(_mm512_mul_ps(e, e), kn, qn));
    *R2 = r2;
    __m512 nbeta = _mm512_sub_ps(_mm512_setzero_ps(), beta);
    if (kind == ATTN_FILTER_GAUSS) {
        *lg = _mm512_setzero_ps();
        return _mm512_fmadd_ps(nbeta, _mm512_mul_ps(c, r2), a);
    }
    __m512 u = _mm512_mul_ps(c, r2);
    __m512 l = log1p_pos_v_(_mm512_max_ps(u, _mm512_setzero_ps()));
    *lg = l;
    return _mm512_fmadd_ps(nbeta, l, a);
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
    const __m512i iota = iota16_();
    const __m512 scale = _mm512_set1_ps(ho->scale), slope = _mm512_set1_ps(ho->slope);
    const __m512 ninf = _mm512_set1_ps(-INFINITY), ndecay = _mm512_set1_ps(-ho->decay);
    __m512i iv[4];
    __m512 mt[4], ms[4], lsum[4], Fi[4];
    __mmask16 live[4];
    // a tile that all its queries see whole needs no mask
    int full = nr == ATTN_BR && i0 >= j0 + nc - 1 && (ho->W == 0 || i0 + nr - 1 < j0 + ho->W);
    for (int v = 0; v < nv; v++) {
        iv[v] = _mm512_add_epi32(_mm512_set1_epi32(i0 + 16 * v), iota);
        live[v] = _mm512_cmplt_epi32_mask(_mm512_add_epi32(_mm512_set1_epi32(16 * v), iota), _mm512_set1_epi32(nr));
        mt[v] = _mm512_loadu_ps(m + 16 * v);
        Fi[v] = ho->F ? _mm512_maskz_loadu_ps(live[v], ho->F + i0 + 16 * v) : _mm512_setzero_ps();
    }
    __m512 qnv[4];
    const __m512 fbeta = _mm512_set1_ps(ho->beta);
    for (int v = 0; v < nv && fkind; v++) qnv[v] = _mm512_maskz_loadu_ps(live[v], qn + 16 * v);
    for (int c = 0; c < nc; c++) {
        int j = j0 + c;
        float *s = S + (size_t)c * ATTN_BR;
        __m512i jv = _mm512_set1_epi32(j), jwv = _mm512_set1_epi32(j + ho->W);
        __m512 Fj = _mm512_set1_ps(ho->F ? ho->F[j] : 0.0f);
        if (fkind) {
            __m512 knv = _mm512_set1_ps(kn[c]);
            for (int v = 0; v < nv; v++) {
                __mmask16 vis = live[v] & _mm512_cmpge_epi32_mask(iv[v], jv);
                if (ho->W) vis &= _mm512_cmplt_epi32_mask(iv[v], jwv);
                ptrdiff_t d = (ptrdiff_t)i0 + 16 * v - j;  // lag of lane 0
                __m512 R2, lg;
                __m512 x = filter_logit_v_(fkind, _mm512_loadu_ps(s + 16 * v), qnv[v], knv,
                                           _mm512_maskz_loadu_ps(vis, ho->fa + d), _mm512_maskz_loadu_ps(vis, ho->fc + d),
                                           _mm512_maskz_loadu_ps(vis, ho->fe + d), fbeta, &R2, &lg);
                x = _mm512_mask_mov_ps(ninf, vis, x);
                _mm512_storeu_ps(s + 16 * v, x);
                mt[v] = _mm512_max_ps(x, mt[v]);
            }
            continue;
        }
        for (int v = 0; v < nv; v++) {
            __m512 x = _mm512_mul_ps(_mm512_loadu_ps(s + 16 * v), scale);
            if (ho->slope != 0.0f) {
                x = _mm512_sub_ps(x, _mm512_mul_ps(slope, _mm512_cvtepi32_ps(_mm512_sub_epi32(iv[v], jv))));
            }
            if (ho->F) x = _mm512_add_ps(x, _mm512_sub_ps(Fi[v], Fj));
            if (!full) {
                __mmask16 vis = live[v] & _mm512_cmpge_epi32_mask(iv[v], jv);
                if (ho->W) vis &= _mm512_cmplt_epi32_mask(iv[v], jwv);
                x = _mm512_mask_mov_ps(ninf, vis, x);
            }
            _mm512_storeu_ps(s + 16 * v, x);
            mt[v] = _mm512_max_ps(x, mt[v]);
        }
    }
    for (int v = 0; v < nv; v++) {
        ms[v] = _mm512_mask_mov_ps(mt[v], _mm512_cmp_ps_mask(mt[v], ninf, _CMP_EQ_OQ), _mm512_setzero_ps());
        _mm512_storeu_ps(alpha + 16 * v, exp_neg_v_(_mm512_sub_ps(_mm512_loadu_ps(m + 16 * v), ms[v])));
        lsum[v] = _mm512_setzero_ps();
    }
    for (int c = 0; c < nc; c++) {
        float *s = S + (size_t)c * ATTN_BR;
        __m512i jv = _mm512_set1_epi32(j0 + c);
        for (int v = 0; v < nv; v++) {
            __m512 p = exp_neg_v_(_mm512_sub_ps(_mm512_loadu_ps(s + 16 * v), ms[v]));
            lsum[v] = _mm512_add_ps(lsum[v], p);
            if (ho->decay != 0.0f) {
                __m512 dist = _mm512_cvtepi32_ps(_mm512_sub_epi32(iv[v], jv));  // i - j
                p = _mm512_mul_ps(p, exp_neg_v_(_mm512_mul_ps(ndecay, dist)));
            }
            if (fkind) {
                // the filter's E from its lag table (masked entries have p = 0 and stay 0)
                __mmask16 vis = live[v] & _mm512_cmpge_epi32_mask(iv[v], jv);
                p = _mm512_mul_ps(p, _mm512_maskz_loadu_ps(vis, ho->fe + ((ptrdiff_t)i0 + 16 * v - (j0 + c))));
            }
            _mm512_storeu_ps(s + 16 * v, p);
        }
    }
    for (int v = 0; v < nv; v++) {
        __m512 lv = _mm512_mul_ps(_mm512_loadu_ps(l + 16 * v), _mm512_loadu_ps(alpha + 16 * v));
        _mm512_storeu_ps(l + 16 * v, _mm512_add_ps(lv, lsum[v]));
        _mm512_storeu_ps(m + 16 * v, mt[v]);
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
        if (sc->l[r] > 0.0f) {
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
    const __m512i iota = iota16_();
    const __m512i lov = _mm512_set1_epi32(lo), hiv = _mm512_set1_epi32(hi);
    const __m512 zero = _mm512_setzero_ps(), qn = _mm512_set1_ps(sc->qn[i]), beta = _mm512_set1_ps(ho->beta);
    const __m512 lse_v = _mm512_set1_ps(lse_i), D_v = _mm512_set1_ps(D), two = _mm512_set1_ps(2.0f);
    const __m512 ntwo = _mm512_set1_ps(-2.0f);
    int d0 = i - j0;
    float *ga = sc->glag, *gc = sc->glag + sc->glag_T, *gE = sc->glag + 2 * (size_t)sc->glag_T;
    float rq[ATTN_BC], rb[ATTN_BC];
    for (int v = 0; v < ATTN_BC / 16; v++) {
        int c0 = 16 * v;
        __m512i jv = _mm512_add_epi32(_mm512_set1_epi32(j0 + c0), iota);
        __mmask16 vis = _mm512_cmpge_epi32_mask(jv, lov) & _mm512_cmplt_epi32_mask(jv, hiv);
        if (!vis) {
            _mm512_storeu_ps(s + c0, zero);
            _mm512_storeu_ps(dp + c0, zero);
            _mm512_storeu_ps(rq + c0, zero);
            _mm512_storeu_ps(rb + c0, zero);
            continue;
        }
        // lane u is lag d0 - c0 - u: memory lanes base + (15 - u), base = d0 - c0 - 15
        __mmask16 mm = rev16_mask_(vis);
        ptrdiff_t base = (ptrdiff_t)d0 - c0 - 15;
        __m512 e = rev16_(_mm512_maskz_loadu_ps(mm, ho->fe + base));
        __m512 cc = rev16_(_mm512_maskz_loadu_ps(mm, ho->fc + base));
        __m512 a = rev16_(_mm512_maskz_loadu_ps(mm, ho->fa + base));
        __m512 kn = _mm512_maskz_loadu_ps(vis, sc->kn + j0 + c0);
        __m512 dot = _mm512_loadu_ps(s + c0), dw = _mm512_loadu_ps(dp + c0);
        __m512 R2, lg;
        __m512 x = filter_logit_v_(kind, dot, qn, kn, a, cc, e, beta, &R2, &lg);
        __m512 p = _mm512_maskz_mov_ps(vis, exp_neg_v_(_mm512_sub_ps(x, lse_v)));
        __m512 dl = _mm512_mul_ps(p, _mm512_sub_ps(_mm512_mul_ps(e, dw), D_v));
        _mm512_storeu_ps(s + c0, _mm512_mul_ps(p, e));
        __m512 gE_add, dR2 = zero, dcc = zero, rbv;
        if (kind == ATTN_FILTER_DOT) {
            gE_add = _mm512_mul_ps(p, dw);
            rbv = _mm512_mul_ps(dl, dot);
            _mm512_storeu_ps(dp + c0, _mm512_mul_ps(dl, beta));
        } else {
            if (kind == ATTN_FILTER_STUDENT) {
                __m512 u = _mm512_mul_ps(cc, R2);
                __m512 g = _mm512_div_ps(_mm512_mul_ps(dl, beta),
                                         _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_max_ps(u, zero)));
                __m512 ng = _mm512_sub_ps(zero, g);
                dR2 = _mm512_mul_ps(ng, cc);
                dcc = _mm512_mul_ps(ng, R2);
                rbv = _mm512_sub_ps(zero, _mm512_mul_ps(dl, lg));
            } else {
                __m512 ndlb = _mm512_mul_ps(_mm512_sub_ps(zero, dl), beta);
                dR2 = _mm512_mul_ps(ndlb, cc);
                dcc = _mm512_mul_ps(ndlb, R2);
                rbv = _mm512_sub_ps(zero, _mm512_mul_ps(_mm512_mul_ps(dl, cc), R2));
            }
            __m512 t = _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(two, e), kn), _mm512_mul_ps(two, dot));
            gE_add = _mm512_add_ps(_mm512_mul_ps(p, dw), _mm512_mul_ps(dR2, t));
            __m512 ga_v = _mm512_maskz_loadu_ps(mm, ga + base), gc_v = _mm512_maskz_loadu_ps(mm, gc + base);
            _mm512_mask_storeu_ps(ga + base, mm, _mm512_add_ps(ga_v, rev16_(dl)));
            _mm512_mask_storeu_ps(gc + base, mm, _mm512_add_ps(gc_v, rev16_(dcc)));
            __m512 dknv = _mm512_loadu_ps(sc->dkn + c0);
            _mm512_storeu_ps(sc->dkn + c0, _mm512_add_ps(dknv, _mm512_mul_ps(_mm512_mul_ps(e, e), dR2)));
            _mm512_storeu_ps(dp + c0, _mm512_mul_ps(_mm512_mul_ps(ntwo, e), dR2));
        }
        __m512 gE_v = _mm512_maskz_loadu_ps(mm, gE + base);
        _mm512_mask_storeu_ps(gE + base, mm, _mm512_add_ps(gE_v, rev16_(gE_add)));
        _mm512_storeu_ps(rq + c0, _mm512_maskz_mov_ps(vis, dR2));
        _mm512_storeu_ps(rb + c0, _mm512_maskz_mov_ps(vis, rbv));
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
    const __m512i iota = iota16_();
    const __m512 scale = _mm512_set1_ps(ho->scale), slope = _mm512_set1_ps(ho->slope);
    const __m512 lse_v = _mm512_set1_ps(lse_i), D_v = _mm512_set1_ps(D);
    const __m512 Fi = _mm512_set1_ps(ho->F ? ho->F[i] : 0.0f);
    const __m512i iv = _mm512_set1_epi32(i), lov = _mm512_set1_epi32(lo), hiv = _mm512_set1_epi32(hi);
    __m512 part = _mm512_setzero_ps();
    for (int v = 0; v < ATTN_BC / 16; v++) {
        __m512i jv = _mm512_add_epi32(_mm512_set1_epi32(j0 + 16 * v), iota);
        __mmask16 vis = _mm512_cmpge_epi32_mask(jv, lov) & _mm512_cmplt_epi32_mask(jv, hiv);
        __m512 x = _mm512_mul_ps(_mm512_loadu_ps(s + 16 * v), scale);
        if (ho->slope != 0.0f) x = _mm512_sub_ps(x, _mm512_mul_ps(slope, _mm512_cvtepi32_ps(_mm512_sub_epi32(iv, jv))));
        if (ho->F) x = _mm512_add_ps(x, _mm512_sub_ps(Fi, _mm512_maskz_loadu_ps(vis, ho->F + j0 + 16 * v)));
        __m512 p = _mm512_maskz_mov_ps(vis, exp_neg_v_(_mm512_sub_ps(x, lse_v)));
        __m512 ds = _mm512_maskz_mov_ps(vis, _mm512_mul_ps(p, _mm512_sub_ps(_mm512_loadu_ps(dp + 16 * v), D_v)));
        _mm512_storeu_ps(s + 16 * v, p);
        _mm512_storeu_ps(dp + 16 * v, _mm512_mul_ps(ds, scale));
        if (dF) {
            part = _mm512_add_ps(part, ds);
            _mm512_storeu_ps(dFk + 16 * v, _mm512_sub_ps(_mm512_loadu_ps(dFk + 16 * v), ds));
        }
    }
    if (dF) dF[i] += tree16_v_(part);
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
