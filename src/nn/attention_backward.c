/*
 * Tiled causal softmax attention: the backward (attention.h; the forward and what the tiles are in
 * nn/attention.c and nn/attention_tile.h).
 *
 * Backward (FlashAttention-2 style), per (b, h): key tiles outer (K and V transposed once per key tile),
 * query tiles inner. p is recomputed from lse with the same logit and exp operations as the forward (the
 * dot products are the same fma chains), dk, dv and dF[j] of a key tile collect in scratch and are added
 * once, dq and dF[i] are added to the outputs directly (the thread owns the whole (b,h) slice); dq once per
 * tile pair, from a sum started at 0, so the caller's values in dq see one rounding per tile.
 */
#include "nn/attention.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "nn/attention_tile.h"

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
