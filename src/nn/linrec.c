#include "nn/linrec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "nn/chunkmm.h"
#include "nn/fastmath.h"

/*
 * One chunk of L tokens starting at t0, for one (b,h), with the state S~ (Dk,Dv) and its stabiliser M
 * it starts from. With G_i the in-chunk cumulative log-decay up to token i (inclusive; per channel for
 * LINREC_CHANNEL), lam_j = li_j and m_i the stabiliser (both 0 without gated_in), and q' = scale q:
 *
 *   o_i   = sum_{j<=i} W_ij (q'_i . k_j) v_j  +  fq_i (.) q'_i  S~          W_ij = exp(G_i - G_j + lam_j - m_i)
 *   S~'   = diag(carry) S~  +  sum_j (fk_j (.) k_j) v_j^T                   fq_i = exp(G_i + M - m_i)
 *                                                                           fk_j = exp(G_L - G_j + lam_j - m_L)
 *                                                                           carry = exp(G_L + M - m_L)
 * (per channel, W_ij is inside the dot product: sum_c q'_ic k_jc exp(G_ic - G_jc)). Every exponent is <= 0:
 * decays only shrink going forward in time, and m_t >= G_t - G_j + lam_j + m-at-j by its recursion.
 *
 * Backward, with dS~' the gradient of the state the chunk hands on:
 *   dA_ij = do_i . v_j,  dv_j = sum_i A_ij do_i + (fk_j (.) k_j)^T dS~'
 *   dq'_i = sum_j dA_ij W_ij k_j + fq_i (.) (S~ do_i),  dk_j = sum_i dA_ij W_ij q'_i + fk_j (.) (dS~' v_j)
 *   dS~   = diag(carry) dS~' + sum_i (fq_i (.) q'_i) do_i^T
 * and the log-weights' gradients follow from each factor's exponent: the exponent of every term holding q'_i
 * has +G_i, every term holding k_j has -G_j + lam_j, so dG_i = q'_i (.) dq'_i - k_i (.) dk_i, dlam_j = k_j . dk_j,
 * plus at the chunk's last token the terms where G_L itself appears (carry and fk). dg is the reverse
 * cumulative sum of dG over the chunk. The stabiliser's own gradient: o_i carries exp(-m_i), so
 * dm_i = -q'_i . dq'_i (+ a caller's dm); the stabilisers of chunk-boundary states cancel exactly (the state
 * is rescaled by exp(-M) and read back with exp(+M)). m_t = max(g_t + m_{t-1}, lam_t) passes dm to lam_t or
 * to g_t and m_{t-1}, whichever won the max.
 */

typedef struct Work {
    int L, Dk, Dv;
    float *q, *k, *kT, *v, *a, *w, *o, *qt, *kt, *fq, *fk, *carry, *s;  // forward
    // cumulative log-decays, stabilisers, the stabiliser each token's max saw before it, log input gates: in
    // double, because differences of long sums cancel (|G| reaches L * max|g|)
    double *gc, *mi, *mp, *lam;
    float *dout, *vT, *da, *dv, *dqt, *dkt, *dq, *dk, *sT, *dsT, *ds, *dsn, *dgc, *qdq;
    double *mseq;  // backward
} Work;

static int nchunks_(const LinrecDims *d) { return (d->T + d->chunk - 1) / d->chunk; }

size_t linrec_state_size(const LinrecDims *d) { return (size_t)d->Dk * d->Dv + (d->gated_in ? 1 : 0); }

size_t linrec_ckpt_size(const LinrecDims *d) { return (size_t)d->B * d->H * nchunks_(d) * linrec_state_size(d); }

void linrec_state_init(float *state, const LinrecDims *d) {
    size_t n = linrec_state_size(d);
    for (size_t i = 0; i < (size_t)d->B * d->H; i++) {
        memset(state + i * n, 0, n * sizeof(float));
        if (d->gated_in) state[i * n + n - 1] = LINREC_M_EMPTY;
    }
}

static Work work_alloc_(const LinrecDims *d, int backward) {
    Work w;
    memset(&w, 0, sizeof w);
    int L = d->chunk < d->T ? d->chunk : d->T, K = d->Dk, V = d->Dv;
    w.L = L, w.Dk = K, w.Dv = V;
    size_t LK = (size_t)L * K, LV = (size_t)L * V, LL = (size_t)L * L, KV = (size_t)K * V;
    size_t n = 7 * LK + 2 * LV + 2 * LL + K + KV, nd = LK + 3 * (size_t)L;
    if (backward) n += LV * 3 + LL + 4 * LK + 4 * KV + LK + (size_t)d->T, nd += (size_t)d->T;
    double *pd = xcalloc(nd, sizeof(double));
    float *p = xcalloc(n, sizeof(float));
#define TAKE_(f, cnt) (w.f = p, p += (cnt))
#define TAKED_(f, cnt) (w.f = pd, pd += (cnt))
    TAKE_(q, LK), TAKE_(k, LK), TAKE_(kT, LK), TAKE_(qt, LK), TAKE_(kt, LK), TAKE_(fq, LK), TAKE_(fk, LK);
    TAKE_(v, LV), TAKE_(o, LV), TAKE_(a, LL), TAKE_(w, LL), TAKE_(carry, K), TAKE_(s, KV);
    TAKED_(gc, LK), TAKED_(mi, L), TAKED_(mp, L), TAKED_(lam, L);
    if (backward) {
        TAKE_(dout, LV), TAKE_(vT, LV), TAKE_(dv, LV), TAKE_(da, LL);
        TAKE_(dqt, LK), TAKE_(dkt, LK), TAKE_(dq, LK), TAKE_(dk, LK), TAKE_(dgc, LK);
        TAKE_(sT, KV), TAKE_(dsT, KV), TAKE_(ds, KV), TAKE_(dsn, KV);
        TAKED_(mseq, d->T), TAKE_(qdq, d->T);
    }
#undef TAKE_
#undef TAKED_
    return w;
}

// ----------------------------------------------------------------------------
// one chunk's inputs and decay factors

static size_t row_(const LinrecDims *d, int b, int t, int h) { return ((size_t)b * d->T + t) * d->H + h; }

// the log-decay of token t of (b,h) in scalar form (decay NONE/HEAD/TOKEN)
static float g_scalar_(const LinrecDims *d, const float *g, int b, int t, int h) {
    if (d->decay == LINREC_NONE) return 0.0f;
    if (d->decay == LINREC_HEAD) return g[h];
    return g[row_(d, b, t, h)];
}

// load tokens t0 .. t0+L-1 of (b,h): q' = scale q, k, v; the cumulative decays gc; the stabilisers mi from Mp
// (gated_in; written to mout when given); the factors fq, fk, carry; qt = fq (.) q', kt = fk (.) k
static void chunk_load_(Work *w, const LinrecDims *d, int b, int h, int t0, int L, const float *q, const float *k,
                        const float *v, const float *g, const float *li, float Mp, float *mout) {
    int K = d->Dk, V = d->Dv, chan = d->decay == LINREC_CHANNEL;
    float scale = d->scale;
    for (int i = 0; i < L; i++) {
        size_t r = row_(d, b, t0 + i, h);
        const float *qr = q + r * K, *kr = k + r * K;
        float *wq = w->q + (size_t)i * K, *wk = w->k + (size_t)i * K;
        for (int c = 0; c < K; c++) { wq[c] = scale * qr[c]; wk[c] = kr[c]; }
        memcpy(w->v + (size_t)i * V, v + r * V, (size_t)V * sizeof(float));
    }
    if (chan) {
        for (int i = 0; i < L; i++) {
            const float *gr = g + row_(d, b, t0 + i, h) * K;
            double *gi = w->gc + (size_t)i * K, *gp = i ? gi - K : NULL;
            for (int c = 0; c < K; c++) gi[c] = (gp ? gp[c] : 0.0) + gr[c];
        }
    } else if (d->decay == LINREC_HEAD) {
        for (int i = 0; i < L; i++) w->gc[i] = (double)(i + 1) * g[h];  // no accumulated rounding for a constant
    } else {
        double acc = 0.0;
        for (int i = 0; i < L; i++) { acc += g_scalar_(d, g, b, t0 + i, h); w->gc[i] = acc; }
    }
    double mprev = Mp;
    for (int i = 0; i < L; i++) {
        if (d->gated_in) {
            double gt = g_scalar_(d, g, b, t0 + i, h), lt = li[row_(d, b, t0 + i, h)];
            w->mp[i] = mprev;
            mprev = fmax(gt + mprev, lt);
            w->mi[i] = mprev;
            if (mout) mout[row_(d, b, t0 + i, h)] = (float)mprev;
        } else {
            w->mi[i] = 0.0;
        }
        w->lam[i] = d->gated_in ? li[row_(d, b, t0 + i, h)] : 0.0f;
    }
    double mL = w->mi[L - 1], M0 = d->gated_in ? Mp : 0.0;
    if (chan) {
        const double *gL = w->gc + (size_t)(L - 1) * K;
        for (int c = 0; c < K; c++) w->carry[c] = fast_expf_((float)gL[c]);
        for (int i = 0; i < L; i++) {
            const double *gi = w->gc + (size_t)i * K;
            float *fq = w->fq + (size_t)i * K, *fk = w->fk + (size_t)i * K;
            for (int c = 0; c < K; c++) { fq[c] = fast_expf_((float)gi[c]); fk[c] = fast_expf_((float)(gL[c] - gi[c])); }
        }
    } else {
        double gL = w->gc[L - 1];
        float cr = fast_expf_((float)(gL + M0 - mL));
        for (int c = 0; c < K; c++) w->carry[c] = cr;
        for (int i = 0; i < L; i++) {
            float a = fast_expf_((float)(w->gc[i] + M0 - w->mi[i]));
            float e = fast_expf_((float)(gL - w->gc[i] + w->lam[i] - mL));
            float *fq = w->fq + (size_t)i * K, *fk = w->fk + (size_t)i * K;
            for (int c = 0; c < K; c++) { fq[c] = a; fk[c] = e; }
        }
    }
    for (size_t i = 0; i < (size_t)L * K; i++) { w->qt[i] = w->fq[i] * w->q[i]; w->kt[i] = w->fk[i] * w->k[i]; }
}

// the chunk's decay-weighted scores A (L,L) (lower triangular) and, in scalar form, the weights W
static void chunk_scores_(Work *w, const LinrecDims *d, int L) {
    int K = d->Dk;
    memset(w->a, 0, (size_t)L * L * sizeof(float));
    if (d->decay == LINREC_CHANNEL) {
        for (int i = 0; i < L; i++) {
            const float *qi = w->q + (size_t)i * K;
            const double *gi = w->gc + (size_t)i * K;
            for (int j = 0; j <= i; j++) {
                const float *kj = w->k + (size_t)j * K;
                const double *gj = w->gc + (size_t)j * K;
                float s = 0.0f;
#pragma omp simd reduction(+ : s)
                for (int c = 0; c < K; c++) s += qi[c] * kj[c] * fast_expf_((float)(gi[c] - gj[c]));
                w->a[(size_t)i * L + j] = s;
            }
        }
        return;
    }
    transpose_(w->kT, w->k, L, K);
    mm_(w->a, w->q, w->kT, L, K, L, 0, MM_TRI_C);
    for (int i = 0; i < L; i++)
        for (int j = 0; j < L; j++) {
            float wt = j <= i ? fast_expf_((float)(w->gc[i] - w->gc[j] + w->lam[j] - w->mi[i])) : 0.0f;
            w->w[(size_t)i * L + j] = wt;
            w->a[(size_t)i * L + j] *= wt;
        }
}

// the value-side decay's chunked passes (the last sections)
static void vdecay_forward_(float *o, float *ckpt, float *state, const float *q, const float *k, const float *v,
                            const float *g, const LinrecDims *d);
static void vdecay_backward_(float *dq, float *dk, float *dv, float *dg, const float *dout, const float *ckpt,
                             const float *q, const float *k, const float *v, const float *g, const LinrecDims *d);

// LINREC_VCHANNEL has no input gates: a caller that asks for both is a programming error
static void vdecay_check_(const LinrecDims *d) {
    if (d->decay == LINREC_VCHANNEL && d->gated_in) {
        fprintf(stderr, "linrec: the value-side decay (LINREC_VCHANNEL) does not take input gates (gated_in)\n");
        abort();
    }
}

// ----------------------------------------------------------------------------
// forward

void linrec_forward(float *o, float *m, float *ckpt, float *state, const float *q, const float *k, const float *v,
                    const float *g, const float *li, const LinrecDims *d) {
    if (d->decay == LINREC_VCHANNEL) {
        vdecay_check_(d);
        vdecay_forward_(o, ckpt, state, q, k, v, g, d);
        return;
    }
    int H = d->H, K = d->Dk, V = d->Dv, nch = nchunks_(d);
    size_t ss = linrec_state_size(d), KV = (size_t)K * V;
#pragma omp parallel
    {
        Work w = work_alloc_(d, 0);
#pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < d->B * H; bh++) {
            int b = bh / H, h = bh % H;
            float Mp = d->gated_in ? LINREC_M_EMPTY : 0.0f;
            if (state) {
                memcpy(w.s, state + bh * ss, KV * sizeof(float));
                if (d->gated_in) Mp = state[bh * ss + KV];
            } else {
                memset(w.s, 0, KV * sizeof(float));
            }
            for (int ci = 0; ci < nch; ci++) {
                int t0 = ci * d->chunk, L = d->T - t0 < d->chunk ? d->T - t0 : d->chunk;
                if (ckpt) {
                    float *c = ckpt + ((size_t)bh * nch + ci) * ss;
                    memcpy(c, w.s, KV * sizeof(float));
                    if (d->gated_in) c[KV] = Mp;
                }
                chunk_load_(&w, d, b, h, t0, L, q, k, v, g, li, Mp, m);
                chunk_scores_(&w, d, L);
                memset(w.o, 0, (size_t)L * V * sizeof(float));
                mm_(w.o, w.a, w.v, L, L, V, 0, MM_TRI_A);
                mm_(w.o, w.qt, w.s, L, K, V, 0, 0);
                for (int i = 0; i < L; i++) memcpy(o + row_(d, b, t0 + i, h) * V, w.o + (size_t)i * V, V * sizeof(float));
                for (int c = 0; c < K; c++) {
                    float cr = w.carry[c], *sr = w.s + (size_t)c * V;
                    for (int j = 0; j < V; j++) sr[j] *= cr;
                }
                mm_(w.s, w.kt, w.v, K, L, V, 1, 0);
                if (d->gated_in) Mp = (float)w.mi[L - 1];  // as the checkpoint keeps it, so the backward recomputes the same
            }
            if (state) {
                memcpy(state + bh * ss, w.s, KV * sizeof(float));
                if (d->gated_in) state[bh * ss + KV] = Mp;
            }
        }
        free(w.q);
        free(w.gc);
    }
}

// ----------------------------------------------------------------------------
// backward

void linrec_backward(float *dq, float *dk, float *dv, float *dg, float *dli, const float *dout, const float *dm,
                     const float *ckpt, const float *q, const float *k, const float *v, const float *g,
                     const float *li, const LinrecDims *d) {
    if (d->decay == LINREC_VCHANNEL) {
        vdecay_check_(d);
        vdecay_backward_(dq, dk, dv, dg, dout, ckpt, q, k, v, g, d);
        return;
    }
    int H = d->H, K = d->Dk, V = d->Dv, nch = nchunks_(d), chan = d->decay == LINREC_CHANNEL;
    size_t ss = linrec_state_size(d), KV = (size_t)K * V;
    // the per-head decay's gradient: one partial per (b,h), summed over b in order afterwards
    double *dg_head = d->decay == LINREC_HEAD && dg ? xcalloc((size_t)d->B * H, sizeof(double)) : NULL;
#pragma omp parallel
    {
        Work w = work_alloc_(d, 1);
#pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < d->B * H; bh++) {
            int b = bh / H, h = bh % H;
            double dgh = 0.0;
            memset(w.ds, 0, KV * sizeof(float));
            for (int ci = nch - 1; ci >= 0; ci--) {
                int t0 = ci * d->chunk, L = d->T - t0 < d->chunk ? d->T - t0 : d->chunk;
                const float *c = ckpt + ((size_t)bh * nch + ci) * ss;
                float Mp = d->gated_in ? c[KV] : 0.0f;
                memcpy(w.s, c, KV * sizeof(float));
                chunk_load_(&w, d, b, h, t0, L, q, k, v, g, li, Mp, NULL);
                if (d->gated_in) memcpy(w.mseq + t0, w.mp, (size_t)L * sizeof(double));
                if (!chan) chunk_scores_(&w, d, L);  // per channel, the scores are formed with their gradients below
                for (int i = 0; i < L; i++)
                    memcpy(w.dout + (size_t)i * V, dout + row_(d, b, t0 + i, h) * V, V * sizeof(float));
                size_t LK = (size_t)L * K, LV = (size_t)L * V, LL = (size_t)L * L;
                // dA = dO V^T (lower part), dV = A^T dO + kt dS'
                transpose_(w.vT, w.v, L, V);
                memset(w.da, 0, LL * sizeof(float));
                mm_(w.da, w.dout, w.vT, L, V, L, 0, MM_TRI_C);
                memset(w.dv, 0, LV * sizeof(float));
                if (!chan) mm_(w.dv, w.a, w.dout, L, L, V, 1, 0);
                mm_(w.dv, w.kt, w.ds, L, K, V, 0, 0);
                // dqt = dO S^T, dkt = V dS'^T
                transpose_(w.sT, w.s, K, V);
                transpose_(w.dsT, w.ds, K, V);
                memset(w.dqt, 0, LK * sizeof(float));
                memset(w.dkt, 0, LK * sizeof(float));
                mm_(w.dqt, w.dout, w.sT, L, V, K, 0, 0);
                mm_(w.dkt, w.v, w.dsT, L, V, K, 0, 0);
                // intra-chunk: dq' = (dA (.) W) k, dk = (dA (.) W)^T q'
                memset(w.dq, 0, LK * sizeof(float));
                memset(w.dk, 0, LK * sizeof(float));
                if (chan) {
                    // one exp per (i, j, c) serves the score a_ij (for dV) and both of its gradients
                    for (int i = 0; i < L; i++) {
                        const float *qi = w.q + (size_t)i * K, *doi = w.dout + (size_t)i * V;
                        const double *gi = w.gc + (size_t)i * K;
                        float *dqi = w.dq + (size_t)i * K;
                        for (int j = 0; j <= i; j++) {
                            float da = w.da[(size_t)i * L + j], a = 0.0f;
                            const float *kj = w.k + (size_t)j * K;
                            const double *gj = w.gc + (size_t)j * K;
                            float *dkj = w.dk + (size_t)j * K, *dvj = w.dv + (size_t)j * V;
#pragma omp simd reduction(+ : a)
                            for (int cc = 0; cc < K; cc++) {
                                float e = fast_expf_((float)(gi[cc] - gj[cc]));
                                a += qi[cc] * kj[cc] * e;
                                dqi[cc] += da * e * kj[cc];
                                dkj[cc] += da * e * qi[cc];
                            }
                            for (int jj = 0; jj < V; jj++) dvj[jj] += a * doi[jj];
                        }
                    }
                } else {
                    for (int i = 0; i < L; i++)
                        for (int j = 0; j < L; j++) w.da[(size_t)i * L + j] *= w.w[(size_t)i * L + j];
                    mm_(w.dq, w.da, w.k, L, L, K, 0, MM_TRI_A);
                    mm_(w.dk, w.da, w.q, L, L, K, 1, 0);
                }
                // add the state paths; dG = q' (.) dq' - k (.) dk per channel
                for (size_t i = 0; i < LK; i++) {
                    w.dq[i] += w.dqt[i] * w.fq[i];
                    w.dk[i] += w.dkt[i] * w.fk[i];
                    w.dgc[i] = w.q[i] * w.dq[i] - w.k[i] * w.dk[i];
                }
                // G_L's own terms: carry (.) rowsum(dS' (.) S) and sum_j kt_j (.) dkt_j, row by row (contiguous)
                float *dgL = w.dgc + (size_t)(L - 1) * K;
                for (int cc = 0; cc < K; cc++) {
                    const float *sr = w.s + (size_t)cc * V, *dsr = w.ds + (size_t)cc * V;
                    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
                    for (int j = 0; j < V; j++) acc += sr[j] * dsr[j];
                    dgL[cc] += w.carry[cc] * acc;
                }
                for (int j = 0; j < L; j++) {
                    const float *ktj = w.kt + (size_t)j * K, *dktj = w.dkt + (size_t)j * K;
                    for (int cc = 0; cc < K; cc++) dgL[cc] += ktj[cc] * dktj[cc];
                }
                // write dq (d/dq = scale d/dq'), dk, dv; dli; q' . dq' for the stabiliser
                for (int i = 0; i < L; i++) {
                    size_t r = row_(d, b, t0 + i, h);
                    float *gq = dq + r * K, *gk = dk + r * K, *gv = dv + r * V;
                    const float *lq = w.dq + (size_t)i * K, *lk = w.dk + (size_t)i * K, *lv = w.dv + (size_t)i * V;
                    for (int cc = 0; cc < K; cc++) { gq[cc] += d->scale * lq[cc]; gk[cc] += lk[cc]; }
                    for (int j = 0; j < V; j++) gv[j] += lv[j];
                    if (d->gated_in) {
                        float sk = 0.0f, sq = 0.0f;
                        for (int cc = 0; cc < K; cc++) {
                            sk += w.k[(size_t)i * K + cc] * lk[cc];
                            sq += w.q[(size_t)i * K + cc] * lq[cc];
                        }
                        dli[r] += sk;
                        w.qdq[t0 + i] = sq;
                    }
                }
                // dg = reverse cumulative sum of dG over the chunk
                if (dg && d->decay != LINREC_NONE) {
                    if (chan) {
                        for (int i = L - 2; i >= 0; i--)
                            for (int cc = 0; cc < K; cc++) w.dgc[(size_t)i * K + cc] += w.dgc[(size_t)(i + 1) * K + cc];
                        for (int i = 0; i < L; i++) {
                            float *gr = dg + row_(d, b, t0 + i, h) * K;
                            for (int cc = 0; cc < K; cc++) gr[cc] += w.dgc[(size_t)i * K + cc];
                        }
                    } else {
                        double acc = 0.0;
                        for (int i = L - 1; i >= 0; i--) {
                            double s = 0.0;
                            for (int cc = 0; cc < K; cc++) s += w.dgc[(size_t)i * K + cc];
                            acc += s;
                            if (d->decay == LINREC_TOKEN) dg[row_(d, b, t0 + i, h)] += (float)acc;
                            else dgh += acc;
                        }
                    }
                }
                // dS = diag(carry) dS' + qt^T dO
                for (int cc = 0; cc < K; cc++) {
                    float cr = w.carry[cc];
                    const float *src = w.ds + (size_t)cc * V;
                    float *dst = w.dsn + (size_t)cc * V;
                    for (int j = 0; j < V; j++) dst[j] = cr * src[j];
                }
                mm_(w.dsn, w.qt, w.dout, K, L, V, 1, 0);
                float *t = w.ds;
                w.ds = w.dsn;
                w.dsn = t;
            }
            // the stabiliser: dm_t = (caller's dm) - q'_t . dq'_t, passed back through m_t = max(g_t + m_{t-1}, li_t)
            if (d->gated_in) {
                double carry = 0.0;
                for (int t = d->T - 1; t >= 0; t--) {
                    size_t r = row_(d, b, t, h);
                    double dmt = (dm ? dm[r] : 0.0f) - w.qdq[t] + carry;
                    double gt = g_scalar_(d, g, b, t, h);
                    if ((double)li[r] >= gt + w.mseq[t]) {  // the forward's max chose the input gate
                        dli[r] += (float)dmt;
                        carry = 0.0;
                    } else {
                        if (dg && d->decay == LINREC_TOKEN) dg[r] += (float)dmt;
                        else if (dg && d->decay == LINREC_HEAD) dgh += dmt;
                        carry = dmt;
                    }
                }
            }
            if (dg_head) dg_head[bh] = dgh;
        }
        free(w.q);
        free(w.gc);
    }
    if (dg_head) {
        for (int h = 0; h < H; h++) {
            double s = 0.0;
            for (int b = 0; b < d->B; b++) s += dg_head[b * H + h];
            dg[h] += (float)s;
        }
        free(dg_head);
    }
}

// ----------------------------------------------------------------------------
// one token of recurrent decoding

void linrec_step(float *o, float *m, float *state, const float *q, const float *k, const float *v, const float *g,
                 const float *li, const LinrecDims *d) {
    int H = d->H, K = d->Dk, V = d->Dv;
    size_t ss = linrec_state_size(d), KV = (size_t)K * V;
    for (int bh = 0; bh < d->B * H; bh++) {
        int h = bh % H;
        float *S = state + bh * ss;
        const float *qr = q + (size_t)bh * K, *kr = k + (size_t)bh * K, *vr = v + (size_t)bh * V;
        float gs = d->decay == LINREC_NONE ? 0.0f : d->decay == LINREC_HEAD ? g[h] : d->decay == LINREC_TOKEN ? g[bh] : 0.0f;
        float f = 1.0f, in = 1.0f;
        if (d->gated_in) {
            float Mp = S[KV], mn = fmaxf(gs + Mp, li[bh]);
            f = fast_expf_(gs + Mp - mn);
            in = fast_expf_(li[bh] - mn);
            S[KV] = mn;
            if (m) m[bh] = mn;
        } else if (d->decay != LINREC_CHANNEL && d->decay != LINREC_VCHANNEL) {
            f = fast_expf_(gs);
        }
        float *orow = o + (size_t)bh * V;
        memset(orow, 0, V * sizeof(float));
        if (d->decay == LINREC_VCHANNEL) {  // the state's columns decay: S = S diag(exp(g)) + k v^T
            const float *gr = g + (size_t)bh * V;
            float *a = orow;  // exp(g) in o's row until the first column is read; then o accumulates
            for (int j = 0; j < V; j++) a[j] = fast_expf_(gr[j]);
            for (int c = 0; c < K; c++) {
                float kc = kr[c], *sr = S + (size_t)c * V;
                for (int j = 0; j < V; j++) sr[j] = a[j] * sr[j] + kc * vr[j];
            }
            memset(orow, 0, V * sizeof(float));
            for (int c = 0; c < K; c++) {
                float qc = d->scale * qr[c], *sr = S + (size_t)c * V;
                for (int j = 0; j < V; j++) orow[j] += qc * sr[j];
            }
            continue;
        }
        for (int c = 0; c < K; c++) {
            float a = d->decay == LINREC_CHANNEL ? fast_expf_(g[(size_t)bh * K + c]) : f, kc = in * kr[c];
            float qc = d->scale * qr[c], *sr = S + (size_t)c * V;
            for (int j = 0; j < V; j++) {
                sr[j] = a * sr[j] + kc * vr[j];
                orow[j] += qc * sr[j];
            }
        }
    }
}

// ----------------------------------------------------------------------------
// the decay on the value side (LINREC_VCHANNEL): S_t = S_{t-1} diag(a_t) + k_t v_t^T, a_t = exp(g_t) per value
// channel. With G_i the in-chunk cumulative log-decay (per value channel c) and A_ij = q'_i . k_j:
//
//   o_ic  = sum_{j<=i} A_ij v_jc exp(G_ic - G_jc)  +  fq_ic (q'_i S~)_c      fq_i = exp(G_i)
//   S~'   = S~ diag(carry) + sum_j k_j (fv_j (.) v_j)^T                       fv_j = exp(G_L - G_j), carry = exp(G_L)
//
// The scores A carry no decay (a plain product); the decay sits on each output channel, so the intra-chunk
// sum is the direct O(L^2 Dv) weighted sum. Every exponent is <= 0, as in the key-side forms.
//
// Backward, with dS~' the gradient of the state the chunk hands on and dr_i = fq_i (.) do_i:
//   dA_ij = sum_c do_ic v_jc exp(G_ic - G_jc),   dv_jc = sum_i A_ij do_ic exp(G_ic - G_jc) + fv_jc (k_j^T dS~')_c
//   dq'_i = sum_j dA_ij k_j + S~ dr_i,           dk_j = sum_i dA_ij q'_i + dS~' (fv_j (.) v_j)
//   dS~   = dS~' diag(carry) + sum_i q'_i dr_i^T
// and the log-weights by their exponents: every term of o_i has +G_i, every term holding v_j has -G_j, so
// dG_i = do_i (.) o_i - v_i (.) dv_i, plus at the chunk's last token carry (.) colsum(S~ (.) dS~') +
// sum_j (fv_j (.) v_j) (.) (k_j^T dS~'). dg is the reverse cumulative sum of dG over the chunk.

typedef struct VWork {
    float *q, *k, *kT, *v, *a, *o, *r, *fq, *vt, *carry, *s, *sT;  // forward
    float *dout, *dr, *da, *dv, *dvt, *dq, *dk, *ds, *dsT, *dsn, *dgc;
    double *gc;
} VWork;

static VWork vwork_alloc_(const LinrecDims *d, int backward) {
    VWork w;
    memset(&w, 0, sizeof w);
    int L = d->chunk < d->T ? d->chunk : d->T, K = d->Dk, V = d->Dv;
    size_t LK = (size_t)L * K, LV = (size_t)L * V, LL = (size_t)L * L, KV = (size_t)K * V;
    size_t n = 3 * LK + 5 * LV + LL + V + 2 * KV;
    if (backward) n += 6 * LV + LL + 2 * LK + 3 * KV;
    float *p = xcalloc(n, sizeof(float));
    w.gc = xcalloc(LV, sizeof(double));
#define TAKE_(f, cnt) (w.f = p, p += (cnt))
    TAKE_(q, LK), TAKE_(k, LK), TAKE_(kT, LK), TAKE_(v, LV), TAKE_(o, LV), TAKE_(r, LV), TAKE_(fq, LV), TAKE_(vt, LV);
    TAKE_(a, LL), TAKE_(carry, V), TAKE_(s, KV), TAKE_(sT, KV);
    if (backward) {
        TAKE_(dout, LV), TAKE_(dr, LV), TAKE_(dv, LV), TAKE_(dvt, LV), TAKE_(dgc, LV), TAKE_(da, LL);
        TAKE_(dq, LK), TAKE_(dk, LK), TAKE_(ds, KV), TAKE_(dsT, KV), TAKE_(dsn, KV);
    }
#undef TAKE_
    return w;
}

static void vwork_free_(VWork *w) { free(w->q); free(w->gc); }

// load tokens t0 .. t0+L-1 of (b,h): q' = scale q, k, v; the cumulative decays gc (L,V); fq, carry, vt = fv (.) v;
// the scores a = q' k^T (lower triangle)
static void vchunk_load_(VWork *w, const LinrecDims *d, int b, int h, int t0, int L, const float *q, const float *k,
                         const float *v, const float *g) {
    int K = d->Dk, V = d->Dv;
    for (int i = 0; i < L; i++) {
        size_t r = row_(d, b, t0 + i, h);
        const float *qr = q + r * K, *gr = g + r * V;
        float *wq = w->q + (size_t)i * K;
        for (int c = 0; c < K; c++) wq[c] = d->scale * qr[c];
        memcpy(w->k + (size_t)i * K, k + r * K, (size_t)K * sizeof(float));
        memcpy(w->v + (size_t)i * V, v + r * V, (size_t)V * sizeof(float));
        double *gi = w->gc + (size_t)i * V, *gp = i ? gi - V : NULL;
        for (int c = 0; c < V; c++) gi[c] = (gp ? gp[c] : 0.0) + gr[c];
    }
    const double *gL = w->gc + (size_t)(L - 1) * V;
    for (int c = 0; c < V; c++) w->carry[c] = fast_expf_((float)gL[c]);
    for (int i = 0; i < L; i++) {
        const double *gi = w->gc + (size_t)i * V;
        float *fq = w->fq + (size_t)i * V, *vt = w->vt + (size_t)i * V;
        const float *vi = w->v + (size_t)i * V;
        for (int c = 0; c < V; c++) {
            fq[c] = fast_expf_((float)gi[c]);
            vt[c] = fast_expf_((float)(gL[c] - gi[c])) * vi[c];
        }
    }
    transpose_(w->kT, w->k, L, K);
    memset(w->a, 0, (size_t)L * L * sizeof(float));
    mm_(w->a, w->q, w->kT, L, K, L, 0, MM_TRI_C);
}

// o (L,V) of the loaded chunk from the state s it starts from: the decay-weighted intra-chunk sum plus fq (.) (q' S~);
// r = q' S~ is kept (the backward's dG needs the whole o)
static void vchunk_out_(VWork *w, const LinrecDims *d, int L) {
    int K = d->Dk, V = d->Dv;
    memset(w->r, 0, (size_t)L * V * sizeof(float));
    mm_(w->r, w->q, w->s, L, K, V, 0, 0);
    for (int i = 0; i < L; i++) {
        float *oi = w->o + (size_t)i * V;
        const float *ri = w->r + (size_t)i * V, *fq = w->fq + (size_t)i * V;
        const double *gi = w->gc + (size_t)i * V;
        for (int c = 0; c < V; c++) oi[c] = fq[c] * ri[c];
        for (int j = 0; j <= i; j++) {
            float aij = w->a[(size_t)i * L + j];
            const float *vj = w->v + (size_t)j * V;
            const double *gj = w->gc + (size_t)j * V;
#pragma omp simd
            for (int c = 0; c < V; c++) oi[c] += aij * vj[c] * fast_expf_((float)(gi[c] - gj[c]));
        }
    }
}

static void vdecay_forward_(float *o, float *ckpt, float *state, const float *q, const float *k, const float *v,
                            const float *g, const LinrecDims *d) {
    int H = d->H, K = d->Dk, V = d->Dv, nch = nchunks_(d);
    size_t KV = (size_t)K * V;
#pragma omp parallel
    {
        VWork w = vwork_alloc_(d, 0);
#pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < d->B * H; bh++) {
            int b = bh / H, h = bh % H;
            if (state) memcpy(w.s, state + bh * KV, KV * sizeof(float));
            else memset(w.s, 0, KV * sizeof(float));
            for (int ci = 0; ci < nch; ci++) {
                int t0 = ci * d->chunk, L = d->T - t0 < d->chunk ? d->T - t0 : d->chunk;
                if (ckpt) memcpy(ckpt + ((size_t)bh * nch + ci) * KV, w.s, KV * sizeof(float));
                vchunk_load_(&w, d, b, h, t0, L, q, k, v, g);
                vchunk_out_(&w, d, L);
                for (int i = 0; i < L; i++)
                    memcpy(o + row_(d, b, t0 + i, h) * V, w.o + (size_t)i * V, V * sizeof(float));
                // S~' = S~ diag(carry) + k^T vt
                for (int c = 0; c < K; c++) {
                    float *sr = w.s + (size_t)c * V;
                    for (int j = 0; j < V; j++) sr[j] *= w.carry[j];
                }
                mm_(w.s, w.k, w.vt, K, L, V, 1, 0);
            }
            if (state) memcpy(state + bh * KV, w.s, KV * sizeof(float));
        }
        vwork_free_(&w);
    }
}

static void vdecay_backward_(float *dq, float *dk, float *dv, float *dg, const float *dout, const float *ckpt,
                             const float *q, const float *k, const float *v, const float *g, const LinrecDims *d) {
    int H = d->H, K = d->Dk, V = d->Dv, nch = nchunks_(d);
    size_t KV = (size_t)K * V;
#pragma omp parallel
    {
        VWork w = vwork_alloc_(d, 1);
#pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < d->B * H; bh++) {
            int b = bh / H, h = bh % H;
            memset(w.ds, 0, KV * sizeof(float));
            for (int ci = nch - 1; ci >= 0; ci--) {
                int t0 = ci * d->chunk, L = d->T - t0 < d->chunk ? d->T - t0 : d->chunk;
                size_t LK = (size_t)L * K, LV = (size_t)L * V;
                memcpy(w.s, ckpt + ((size_t)bh * nch + ci) * KV, KV * sizeof(float));
                vchunk_load_(&w, d, b, h, t0, L, q, k, v, g);
                vchunk_out_(&w, d, L);
                for (int i = 0; i < L; i++)
                    memcpy(w.dout + (size_t)i * V, dout + row_(d, b, t0 + i, h) * V, V * sizeof(float));
                // intra-chunk: dA and dv, one exp per (i, j, c)
                memset(w.da, 0, (size_t)L * L * sizeof(float));
                memset(w.dv, 0, LV * sizeof(float));
                for (int i = 0; i < L; i++) {
                    const float *doi = w.dout + (size_t)i * V;
                    const double *gi = w.gc + (size_t)i * V;
                    for (int j = 0; j <= i; j++) {
                        const float *vj = w.v + (size_t)j * V;
                        const double *gj = w.gc + (size_t)j * V;
                        float *dvj = w.dv + (size_t)j * V, aij = w.a[(size_t)i * L + j], da = 0.0f;
#pragma omp simd reduction(+ : da)
                        for (int c = 0; c < V; c++) {
                            float e = fast_expf_((float)(gi[c] - gj[c]));
                            da += doi[c] * vj[c] * e;
                            dvj[c] += aij * doi[c] * e;
                        }
                        w.da[(size_t)i * L + j] = da;
                    }
                }
                // dr = fq (.) dO; dq' = dA k + dr S~^T; dk = dA^T q' + vt dS~'^T
                for (size_t i = 0; i < LV; i++) w.dr[i] = w.fq[i] * w.dout[i];
                memset(w.dq, 0, LK * sizeof(float));
                memset(w.dk, 0, LK * sizeof(float));
                mm_(w.dq, w.da, w.k, L, L, K, 0, MM_TRI_A);
                transpose_(w.sT, w.s, K, V);
                mm_(w.dq, w.dr, w.sT, L, V, K, 0, 0);
                mm_(w.dk, w.da, w.q, L, L, K, 1, 0);
                transpose_(w.dsT, w.ds, K, V);
                mm_(w.dk, w.vt, w.dsT, L, V, K, 0, 0);
                // the state path into v: dvt = k dS~', dv += fv (.) dvt (fv = vt / v is not kept: recompute it)
                memset(w.dvt, 0, LV * sizeof(float));
                mm_(w.dvt, w.k, w.ds, L, K, V, 0, 0);
                const double *gL = w.gc + (size_t)(L - 1) * V;
                for (int i = 0; i < L; i++) {
                    const double *gi = w.gc + (size_t)i * V;
                    float *dvi = w.dv + (size_t)i * V, *dgi = w.dgc + (size_t)i * V;
                    const float *dvti = w.dvt + (size_t)i * V, *vi = w.v + (size_t)i * V, *oi = w.o + (size_t)i * V;
                    const float *doi = w.dout + (size_t)i * V;
                    for (int c = 0; c < V; c++) {
                        dvi[c] += fast_expf_((float)(gL[c] - gi[c])) * dvti[c];
                        dgi[c] = doi[c] * oi[c] - vi[c] * dvi[c];
                    }
                }
                // G_L's own terms: carry (.) colsum(S~ (.) dS~') and sum_j vt_j (.) dvt_j
                float *dgL = w.dgc + (size_t)(L - 1) * V;
                for (int c = 0; c < K; c++) {
                    const float *sr = w.s + (size_t)c * V, *dsr = w.ds + (size_t)c * V;
                    for (int j = 0; j < V; j++) dgL[j] += w.carry[j] * sr[j] * dsr[j];
                }
                for (size_t i = 0; i < LV; i++) dgL[i % V] += w.vt[i] * w.dvt[i];
                // write dq (d/dq = scale d/dq'), dk, dv, and dg = the reverse cumulative sum of dG
                for (int i = L - 2; i >= 0; i--)
                    for (int c = 0; c < V; c++) w.dgc[(size_t)i * V + c] += w.dgc[(size_t)(i + 1) * V + c];
                for (int i = 0; i < L; i++) {
                    size_t r = row_(d, b, t0 + i, h);
                    float *gq = dq + r * K, *gk = dk + r * K, *gv = dv + r * V;
                    const float *lq = w.dq + (size_t)i * K, *lk = w.dk + (size_t)i * K, *lv = w.dv + (size_t)i * V;
                    for (int c = 0; c < K; c++) { gq[c] += d->scale * lq[c]; gk[c] += lk[c]; }
                    for (int c = 0; c < V; c++) gv[c] += lv[c];
                    if (dg) {
                        float *gr = dg + r * V;
                        for (int c = 0; c < V; c++) gr[c] += w.dgc[(size_t)i * V + c];
                    }
                }
                // dS~ = dS~' diag(carry) + q'^T dr
                for (int c = 0; c < K; c++) {
                    const float *src = w.ds + (size_t)c * V;
                    float *dst = w.dsn + (size_t)c * V;
                    for (int j = 0; j < V; j++) dst[j] = src[j] * w.carry[j];
                }
                mm_(w.dsn, w.q, w.dr, K, L, V, 1, 0);
                float *t = w.ds;
                w.ds = w.dsn;
                w.dsn = t;
            }
        }
        vwork_free_(&w);
    }
}
