/*
 * Tiled causal softmax attention with an online softmax: forward and backward. See attention.h for the
 * formula and the position schemes.
 *
 * Tiles: ATTN_BR query rows x ATTN_BC keys. A key tile is transposed to (HS, ATTN_BC) so that the logits
 * of a row are ATTN_BC independent fma chains over HS (vectorised across keys, summed over d in order,
 * no reassociation needed). Tiles that are fully masked (above the diagonal, or left of the window) are
 * never visited; masked entries inside a visited tile get weight exactly 0.
 *
 * Forward, per (b, h, query tile), over key tiles left to right, per row:
 *   m  running max of the logits seen so far
 *   l  running sum of exp(s - m)                       (the softmax denominator, WITHOUT the decay)
 *   acc running sum of exp(s - m) * E * v              (the numerator, WITH E = exp(-decay (i-j)))
 * rescaled by exp(m_old - m_new) when the max grows; at the end out = acc / l and lse = m + log(l).
 *
 * Backward (FlashAttention-2 style), per (b, h): key tiles outer, query tiles inner. p is recomputed from
 * lse with the very same logits code as the forward; dk, dv and dF[j] of a key tile collect in scratch and
 * are added once, dq and dF[i] are added to the outputs directly (the thread owns the whole (b,h) slice).
 *
 * The exponential is exp_neg_ below: plain C arithmetic (range reduction + polynomial, ~2 ulp) so the
 * compiler vectorises the row loops without -ffast-math; all its arguments are <= 0 up to rounding.
 */
#include "nn/attention.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"

// query rows and keys per tile: a (ATTN_BR, ATTN_BC) logit tile and a (HS, ATTN_BC) key tile stay in L1/L2
// for HS <= 128, and ATTN_BC floats of one row are a few vector registers
#define ATTN_BR 64
#define ATTN_BC 64

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
// small helpers shared by forward and backward

// exp(x) for x <= ~88; 0 below -87 (exp(-87) ~ 1.6e-38 is 0 next to the row's max entry exp(0) = 1).
// x = n ln2 + r with |r| <= ln2/2 (ln2 split in two so n*ln2_hi is exact), exp(r) by its degree-7 Taylor
// polynomial (truncation < 6e-9 relative), times 2^n built in the exponent bits. Branch-free, so loops
// calling it vectorise.
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

// kt (HS, ATTN_BC) = transpose of the key rows k (nc, HS); columns nc.. are zero so tile_qk_ may run over
// the full tile width
static void transpose_keys_(float *restrict kt, const float *restrict k, int nc, int HS) {
    for (int d = 0; d < HS; d++) {
        float *kt_d = kt + (size_t)d * ATTN_BC;
        for (int c = 0; c < nc; c++) kt_d[c] = k[(size_t)c * HS + d];
        for (int c = nc; c < ATTN_BC; c++) kt_d[c] = 0.0f;
    }
}

// S (nr, ATTN_BC) = Q (nr, HS) @ kt (HS, ATTN_BC): every S[r][c] is the fma chain over d = 0..HS-1, so
// the forward and the backward recompute bit-identical dot products. Two rows at a time share each kt
// load and give the fma units independent chains.
static void tile_qk_(float *restrict S, const float *restrict Q, const float *restrict kt, int nr, int HS) {
    int r = 0;
    for (; r + 2 <= nr; r += 2) {
        float s0[ATTN_BC] = {0}, s1[ATTN_BC] = {0};
        const float *q0 = Q + (size_t)r * HS, *q1 = q0 + HS;
        for (int d = 0; d < HS; d++) {
            const float *kt_d = kt + (size_t)d * ATTN_BC;
            float a0 = q0[d], a1 = q1[d];
            for (int c = 0; c < ATTN_BC; c++) {
                s0[c] = fmaf(a0, kt_d[c], s0[c]);
                s1[c] = fmaf(a1, kt_d[c], s1[c]);
            }
        }
        memcpy(S + (size_t)r * ATTN_BC, s0, sizeof s0);
        memcpy(S + (size_t)(r + 1) * ATTN_BC, s1, sizeof s1);
    }
    for (; r < nr; r++) {
        float s0[ATTN_BC] = {0};
        const float *q0 = Q + (size_t)r * HS;
        for (int d = 0; d < HS; d++) {
            const float *kt_d = kt + (size_t)d * ATTN_BC;
            for (int c = 0; c < ATTN_BC; c++) s0[c] = fmaf(q0[d], kt_d[c], s0[c]);
        }
        memcpy(S + (size_t)r * ATTN_BC, s0, sizeof s0);
    }
}

// Y (nr, HS) += A (nr, ATTN_BC) @ X (nc, HS), using columns 0..nc-1 of A; zero coefficients (masked
// entries) are skipped, which changes no sum
static inline __attribute__((always_inline)) void rows_acc_hs_(float *restrict Y, const float *restrict A, const float *restrict X,
                             int nr, int nc, int HS) {
    for (int r = 0; r < nr; r++) {
        float *y = Y + (size_t)r * HS;
        const float *a = A + (size_t)r * ATTN_BC;
        for (int c = 0; c < nc; c++) {
            float ac = a[c];
            if (ac == 0.0f) continue;
            const float *x = X + (size_t)c * HS;
            for (int d = 0; d < HS; d++) y[d] = fmaf(ac, x[d], y[d]);
        }
    }
}

// Y (nc, HS) += A^T (nc, nr) @ X (nr, HS) for A (nr, ATTN_BC): Y[c] += sum_r A[r][c] X[r], r in order
static inline __attribute__((always_inline)) void cols_acc_hs_(float *restrict Y, const float *restrict A, const float *restrict X,
                             int nr, int nc, int HS) {
    for (int c = 0; c < nc; c++) {
        float *y = Y + (size_t)c * HS;
        for (int r = 0; r < nr; r++) {
            float ac = A[(size_t)r * ATTN_BC + c];
            if (ac == 0.0f) continue;
            const float *x = X + (size_t)r * HS;
            for (int d = 0; d < HS; d++) y[d] = fmaf(ac, x[d], y[d]);
        }
    }
}

// the common head size as a constant: the compiler then keeps the (HS,) accumulator row in registers
// across the loop over keys instead of loading and storing it per term (same operations, same order)
static void rows_acc_(float *restrict Y, const float *restrict A, const float *restrict X, int nr, int nc, int HS) {
    if (HS == 64) rows_acc_hs_(Y, A, X, nr, nc, 64);
    else rows_acc_hs_(Y, A, X, nr, nc, HS);
}

static void cols_acc_(float *restrict Y, const float *restrict A, const float *restrict X, int nr, int nc, int HS) {
    if (HS == 64) cols_acc_hs_(Y, A, X, nr, nc, 64);
    else cols_acc_hs_(Y, A, X, nr, nc, HS);
}

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
} HeadOpts_;

static HeadOpts_ head_opts_(const AttnOpts *o, int b, int h, int NH, int T) {
    HeadOpts_ ho;
    ho.scale = o->scale;
    ho.slope = o->slopes ? o->slopes[h] : 0.0f;
    ho.decay = o->decay ? o->decay[h] : 0.0f;
    ho.F = o->fgate ? o->fgate + ((size_t)b * NH + h) * T : NULL;
    ho.W = o->window > 0 ? o->window : 0;
    ho.has_decay = o->decay != NULL;
    return ho;
}

// s[c] for keys j = j0+c in [lo, hi): s_ij = scale * q_i.k_j - slope * (i - j) + (F[i] - F[j]), from the raw
// dot products in s. The forward and the backward both form the logits here, so p = exp(s - lse) in the
// backward sees the same floats the forward normalised.
static inline void row_logits_(float *s, const HeadOpts_ *ho, int i, int j0, int lo, int hi) {
    for (int j = lo; j < hi; j++) s[j - j0] *= ho->scale;
    if (ho->slope != 0.0f) {
        for (int j = lo; j < hi; j++) s[j - j0] -= ho->slope * (float)(i - j);
    }
    if (ho->F) {
        float Fi = ho->F[i];
        for (int j = lo; j < hi; j++) s[j - j0] += Fi - ho->F[j];
    }
}

// ----------------------------------------------------------------------------
// forward

typedef struct FwdScratch_ {
    float *kt;   // (HS, ATTN_BC) transposed key tile
    float *S;    // (ATTN_BR, ATTN_BC) logits, then weights of the current tile
    float *acc;  // (ATTN_BR, HS) running numerators
    float m[ATTN_BR], l[ATTN_BR];
} FwdScratch_;

// one query tile [i0, i1) of one head: q, k, v, out (T, HS); lse (T,)
static void forward_tile_(float *out, float *lse, const float *q, const float *k, const float *v,
                          const HeadOpts_ *ho, int i0, int i1, int HS, FwdScratch_ *sc) {
    int nr = i1 - i0;
    for (int r = 0; r < nr; r++) {
        sc->m[r] = -INFINITY;
        sc->l[r] = 0.0f;
    }
    memset(sc->acc, 0, (size_t)nr * HS * sizeof(float));
    // keys before the window of the tile's first row are invisible to every row of the tile
    int kstart = (ho->W > 0 && i0 - ho->W + 1 > 0) ? i0 - ho->W + 1 : 0;
    for (int j0 = kstart; j0 < i1; j0 += ATTN_BC) {
        int nc = i1 - j0 < ATTN_BC ? i1 - j0 : ATTN_BC;
        transpose_keys_(sc->kt, k + (size_t)j0 * HS, nc, HS);
        tile_qk_(sc->S, q + (size_t)i0 * HS, sc->kt, nr, HS);
        for (int r = 0; r < nr; r++) {
            int i = i0 + r, lo, hi;
            float *s = sc->S + (size_t)r * ATTN_BC;
            visible_range_(&lo, &hi, i, j0, nc, ho->W);
            if (lo >= hi) {  // nothing visible to this row in this tile: it adds nothing
                memset(s, 0, ATTN_BC * sizeof(float));
                continue;
            }
            row_logits_(s, ho, i, j0, lo, hi);
            float m_new = sc->m[r];
            for (int j = lo; j < hi; j++) m_new = s[j - j0] > m_new ? s[j - j0] : m_new;
            // the first visible tile has m_old = -inf: alpha = 0 multiplies l = acc = 0
            float alpha = exp_neg_(sc->m[r] - m_new);
            for (int c = 0; c < lo - j0; c++) s[c] = 0.0f;
            for (int j = lo; j < hi; j++) s[j - j0] = exp_neg_(s[j - j0] - m_new);
            for (int c = hi - j0; c < ATTN_BC; c++) s[c] = 0.0f;
            // denominator without the decay; 8 partial sums in a fixed order so the loop vectorises
            float part[8] = {0};
            for (int c = 0; c < ATTN_BC; c += 8) {
                for (int u = 0; u < 8; u++) part[u] += s[c + u];
            }
            float psum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
            sc->l[r] = sc->l[r] * alpha + psum;
            sc->m[r] = m_new;
            // the numerator gets the post-softmax decay E = exp(-decay (i-j)) (the "second accumulator")
            if (ho->decay != 0.0f) {
                for (int j = lo; j < hi; j++) s[j - j0] *= exp_neg_(-ho->decay * (float)(i - j));
            }
            if (alpha != 1.0f) {
                float *acc = sc->acc + (size_t)r * HS;
                for (int d = 0; d < HS; d++) acc[d] *= alpha;
            }
        }
        rows_acc_(sc->acc, sc->S, v + (size_t)j0 * HS, nr, nc, HS);
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
    int nqt = (T + ATTN_BR - 1) / ATTN_BR;
    #pragma omp parallel
    {
        FwdScratch_ sc;
        sc.kt = xmalloc((size_t)HS * ATTN_BC * sizeof(float));
        sc.S = xmalloc((size_t)ATTN_BR * ATTN_BC * sizeof(float));
        sc.acc = xmalloc((size_t)ATTN_BR * HS * sizeof(float));
        // later query tiles see more keys: dynamic scheduling balances the triangle
        #pragma omp for collapse(3) schedule(dynamic, 1)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                for (int qt = 0; qt < nqt; qt++) {
                    size_t bh = (size_t)b * NH + h;
                    HeadOpts_ ho = head_opts_(o, b, h, NH, T);
                    int i0 = qt * ATTN_BR, i1 = i0 + ATTN_BR < T ? i0 + ATTN_BR : T;
                    forward_tile_(out + bh * T * HS, lse + bh * T, q + bh * T * HS, k + bh * T * HS,
                                  v + bh * T * HS, &ho, i0, i1, HS, &sc);
                }
            }
        }
        free(sc.kt);
        free(sc.S);
        free(sc.acc);
    }
}

// ----------------------------------------------------------------------------
// backward

typedef struct BwdScratch_ {
    float *kt, *vt;   // (HS, ATTN_BC) transposed key and value tiles
    float *S;         // (ATTN_BR, ATTN_BC) logits, then w = p E
    float *DP;        // (ATTN_BR, ATTN_BC) do_i . v_j, then ds
    float *dk, *dv;   // (ATTN_BC, HS) gradients of the key tile, added to dk/dv once per key tile
    float dFk[ATTN_BC];  // dF of the key tile
} BwdScratch_;

// one head: every (key tile, query tile) pair that has a visible entry. Pointers are the (b,h) slices:
// dq, dk, dv, dout, out, q, k, v (T, HS); dF, lse (T,). Returns this head's contribution to ddecay.
static double backward_head_(float *dq, float *dk, float *dv, float *dF, const float *dout, const float *out,
                             const float *lse, const float *q, const float *k, const float *v,
                             const HeadOpts_ *ho, int T, int HS, BwdScratch_ *sc) {
    double ddecay = 0.0;
    for (int j0 = 0; j0 < T; j0 += ATTN_BC) {
        int nc = T - j0 < ATTN_BC ? T - j0 : ATTN_BC;
        // queries that see some key of this tile: i >= j0, and i - W < j0 + nc - 1 with a window
        int iend = T;
        if (ho->W > 0 && j0 + nc - 1 + ho->W < iend) iend = j0 + nc - 1 + ho->W;
        transpose_keys_(sc->kt, k + (size_t)j0 * HS, nc, HS);
        transpose_keys_(sc->vt, v + (size_t)j0 * HS, nc, HS);
        memset(sc->dk, 0, (size_t)ATTN_BC * HS * sizeof(float));
        memset(sc->dv, 0, (size_t)ATTN_BC * HS * sizeof(float));
        memset(sc->dFk, 0, sizeof sc->dFk);
        for (int i0 = j0; i0 < iend; i0 += ATTN_BR) {
            int nr = iend - i0 < ATTN_BR ? iend - i0 : ATTN_BR;
            const float *q_t = q + (size_t)i0 * HS, *do_t = dout + (size_t)i0 * HS;
            tile_qk_(sc->S, q_t, sc->kt, nr, HS);
            // in the forward pass this was: out_i = sum_j w_ij v_j; so dw_ij = do_i . v_j
            tile_qk_(sc->DP, do_t, sc->vt, nr, HS);
            for (int r = 0; r < nr; r++) {
                int i = i0 + r, lo, hi;
                float *s = sc->S + (size_t)r * ATTN_BC, *dp = sc->DP + (size_t)r * ATTN_BC;
                visible_range_(&lo, &hi, i, j0, nc, ho->W);
                if (lo >= hi) {
                    memset(s, 0, ATTN_BC * sizeof(float));
                    memset(dp, 0, ATTN_BC * sizeof(float));
                    continue;
                }
                // D_i = sum_j p_ij dp_ij with dp_ij = E_ij do_i.v_j, which equals do_i . out_i since
                // out_i = sum_j p_ij E_ij v_j (also with the post-softmax decay)
                const float *o_i = out + (size_t)i * HS, *do_i = dout + (size_t)i * HS;
                float D = 0.0f;
                for (int d = 0; d < HS; d++) D = fmaf(do_i[d], o_i[d], D);
                row_logits_(s, ho, i, j0, lo, hi);
                float lse_i = lse[i], dFi = 0.0f;
                for (int c = 0; c < lo - j0; c++) s[c] = dp[c] = 0.0f;
                for (int c = hi - j0; c < ATTN_BC; c++) s[c] = dp[c] = 0.0f;
                if (ho->has_decay) {
                    double dd = 0.0;
                    for (int j = lo; j < hi; j++) {
                        int c = j - j0;
                        // in the forward pass this was: p = exp(s - m) ... out = acc / l, i.e.
                        // p_ij = exp(s_ij - lse_i); w_ij = p_ij * E_ij with E_ij = exp(-decay (i-j))
                        float p = exp_neg_(s[c] - lse_i);
                        float E = exp_neg_(-ho->decay * (float)(i - j));
                        float w = p * E, dw = dp[c];
                        // dE_ij/ddecay = -(i-j) E_ij, and dL/dE_ij = p_ij dw_ij
                        dd -= (double)(i - j) * (double)(w * dw);
                        // softmax backward: ds_ij = p_ij (dp_ij - D_i), dp_ij = E_ij dw_ij
                        float ds = p * (E * dw - D);
                        s[c] = w;
                        dp[c] = ds;
                    }
                    ddecay += dd;
                } else {
                    for (int j = lo; j < hi; j++) {
                        int c = j - j0;
                        float p = exp_neg_(s[c] - lse_i);
                        float ds = p * (dp[c] - D);
                        s[c] = p;
                        dp[c] = ds;
                    }
                }
                // in the forward pass this was: s_ij = ... + (F[i] - F[j]); so dF_i += ds_ij, dF_j -= ds_ij
                if (dF) {
                    for (int c = lo - j0; c < hi - j0; c++) {
                        dFi += dp[c];
                        sc->dFk[c] -= dp[c];
                    }
                    dF[i] += dFi;
                }
            }
            // in the forward pass this was: out_i = sum_j w_ij v_j; so dv_j += sum_i w_ij do_i
            if (dv) cols_acc_(sc->dv, sc->S, do_t, nr, nc, HS);
            // in the forward pass this was: s_ij = scale * q_i.k_j + bias; so dk_j += scale sum_i ds_ij q_i
            // (scale applied once per key tile below) and dq_i += scale sum_j ds_ij k_j
            if (dk) cols_acc_(sc->dk, sc->DP, q_t, nr, nc, HS);
            if (dq) {
                for (int r = 0; r < nr; r++) {
                    float *ds = sc->DP + (size_t)r * ATTN_BC;
                    for (int c = 0; c < ATTN_BC; c++) ds[c] *= ho->scale;
                }
                rows_acc_(dq + (size_t)i0 * HS, sc->DP, k + (size_t)j0 * HS, nr, nc, HS);
            }
        }
        for (int c = 0; c < nc; c++) {
            size_t row = (size_t)(j0 + c) * HS;
            if (dk) {
                for (int d = 0; d < HS; d++) dk[row + d] += ho->scale * sc->dk[(size_t)c * HS + d];
            }
            if (dv) {
                for (int d = 0; d < HS; d++) dv[row + d] += sc->dv[(size_t)c * HS + d];
            }
            if (dF) dF[j0 + c] += sc->dFk[c];
        }
    }
    return ddecay;
}

void attention_backward(float *dq, float *dk, float *dv, float *dfgate, float *ddecay,
                        const float *dout, const float *out, const float *lse,
                        const float *q, const float *k, const float *v, const AttnOpts *o,
                        int B, int NH, int T, int HS) {
    // dq, dk, dv are (B,NH,T,HS), dfgate is (B,NH,T), ddecay is (NH,): accumulated into, may be NULL
    // dout, out are (B,NH,T,HS); lse is (B,NH,T); q, k, v are (B,NH,T,HS)
    if (!o->fgate) dfgate = NULL;
    if (!o->decay) ddecay = NULL;
    // per-(b,h) decay gradients, summed over b in order after the parallel loop (thread-count independent)
    double *dd_bh = ddecay ? xcalloc((size_t)B * NH, sizeof(double)) : NULL;
    #pragma omp parallel
    {
        BwdScratch_ sc;
        sc.kt = xmalloc((size_t)HS * ATTN_BC * sizeof(float));
        sc.vt = xmalloc((size_t)HS * ATTN_BC * sizeof(float));
        sc.S = xmalloc((size_t)ATTN_BR * ATTN_BC * sizeof(float));
        sc.DP = xmalloc((size_t)ATTN_BR * ATTN_BC * sizeof(float));
        sc.dk = xmalloc((size_t)ATTN_BC * HS * sizeof(float));
        sc.dv = xmalloc((size_t)ATTN_BC * HS * sizeof(float));
        #pragma omp for collapse(2) schedule(dynamic, 1)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                size_t bh = (size_t)b * NH + h, off = bh * T * HS;
                HeadOpts_ ho = head_opts_(o, b, h, NH, T);
                double dd = backward_head_(dq ? dq + off : NULL, dk ? dk + off : NULL, dv ? dv + off : NULL,
                                           dfgate ? dfgate + bh * T : NULL, dout + off, out + off, lse + bh * T,
                                           q + off, k + off, v + off, &ho, T, HS, &sc);
                if (dd_bh) dd_bh[bh] = dd;
            }
        }
        free(sc.kt);
        free(sc.vt);
        free(sc.S);
        free(sc.DP);
        free(sc.dk);
        free(sc.dv);
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
