/*
 * Tiled causal softmax attention with an online softmax: the forward and the attention maps. See
 * attention.h for the formula and the position schemes, nn/attention_tile.h for the tiles and their
 * kernels, nn/attention_backward.c for the backward.
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
 */
#include "nn/attention.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "nn/attention_tile.h"

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
// forward

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
