#include "nn/delta.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "nn/chunkmm.h"
#include "nn/fastmath.h"

/*
 * One chunk of L tokens for one (b,h), starting from the state S (Dk,Dv). G_i is the in-chunk cumulative
 * log-decay up to token i (inclusive; 0 without decay), Gam_ij = exp(G_i - G_j) for j <= i, e_i = exp(G_i),
 * f_j = exp(G_L - G_j) with G_L the chunk's last G, q' = scale q, b = beta.
 *
 * Unrolling the recurrence from S, every state inside the chunk has the form
 *   S_i = e_i S + sum_{j<=i} Gam_ij k_j u_j^T
 * for "new values" u_j; putting it into S_i = a_i S_{i-1} - b_i k_i k_i^T (a_i S_{i-1}) + b_i k_i v_i^T gives
 *   u_i = b_i (v_i - e_i S^T k_i - sum_{j<i} Gam_ij (k_i . k_j) u_j),
 * i.e. (I + A) U = R with the strictly lower A_ij = b_i (k_i . k_j) Gam_ij and R_i = b_i (v_i - e_i S^T k_i):
 * one unit lower-triangular solve by forward substitution (FLA's WY form U - W S with T = (I + A)^{-1},
 * applied to the right-hand side in one go). Then
 *   o_i    = e_i S^T q'_i + sum_{j<=i} P_ij u_j            P_ij = (q'_i . k_j) Gam_ij
 *   S_next = e_L S + sum_j f_j k_j u_j^T
 *
 * Backward, with dS' the gradient of S_next:
 *   dU_j = sum_{i>=j} P_ij do_i + f_j dS'^T k_j,  dP_ij = do_i . u_j (j <= i)
 *   dq'_i = e_i S do_i + sum_j dP_ij Gam_ij k_j,  dk_j += sum_i dP_ij Gam_ij q'_i + f_j dS' u_j
 *   the solve: dR = (I + A)^{-T} dU (back substitution), dA_ij = -dR_i . u_j (j < i)
 *   A: db_i += sum_j dA_ij (k_i . k_j) Gam_ij, and with M_ij = dA_ij b_i Gam_ij: dK += M K + M^T K
 *   R: dv_i += b_i dR_i, db_i += dR_i . (v_i - e_i S^T k_i), dKS_i = -b_i e_i dR_i, dk_i += S dKS_i
 *   dS = e_L dS' + (e (.) Q')^T dO + K^T dKS
 * and the log-decays: each factor exp(G_i - G_j) gives dG_i += c, dG_j -= c for its term's contribution c
 * (c = dP_ij P_ij, dA_ij A_ij, f_j (k_j . dS' u_j)), each e_i gives dG_i += its term, e_L gives
 * dG_L += e_L <S, dS'>; dg is the reverse cumulative sum of dG over the chunk.
 *
 * Every exponent is a difference G_i - G_j with j <= i, or G_i itself, so <= 0: no overflow however strong the
 * decays. The solve never forms T = (I + A)^{-1}: it solves for U, which is bounded (u_i is what token i
 * writes, b_i (v_i - (a_i S_{i-1})^T k_i), and |I - b k k^T| <= 1 for unit k and b in [0,2]), so the float
 * error stays that of the sequential recurrence (tests/test_delta.c: T = 8192, beta near 2).
 */

typedef struct Work {
    int L, Dk, Dv;
    float *q, *k, *kT, *qe, *kf, *v, *b, *e, *f, *gam, *kk, *a, *p, *ks, *u, *o, *s, *blk;  // forward
    double *gc;
    float *dout, *du, *dr, *uT, *dp, *da, *dq, *dk, *dks, *dv, *db, *tk, *sT, *dsT, *ds, *dsn;  // backward
    double *dG;
} Work;

enum { SOLVE_BLK_ = 16 };  // rows per block of the triangular solves

static int nchunks_(const DeltaDims *d) { return (d->T + d->chunk - 1) / d->chunk; }

size_t delta_state_size(const DeltaDims *d) { return (size_t)d->Dk * d->Dv; }

size_t delta_ckpt_size(const DeltaDims *d) { return (size_t)d->B * d->H * nchunks_(d) * delta_state_size(d); }

void delta_state_init(float *state, const DeltaDims *d) {
    memset(state, 0, (size_t)d->B * d->H * delta_state_size(d) * sizeof(float));
}

static Work work_alloc_(const DeltaDims *d, int backward) {
    Work w;
    memset(&w, 0, sizeof w);
    int L = d->chunk < d->T ? d->chunk : d->T, K = d->Dk, V = d->Dv;
    w.L = L, w.Dk = K, w.Dv = V;
    size_t LK = (size_t)L * K, LV = (size_t)L * V, LL = (size_t)L * L, KV = (size_t)K * V;
    size_t n = 5 * LK + 4 * LV + 3 * (size_t)L + 4 * LL + KV + SOLVE_BLK_ * (size_t)L, nd = (size_t)L;
    if (backward) n += 6 * LV + 2 * LL + 3 * LK + (size_t)L + 4 * KV, nd += (size_t)L;
    double *pd = xcalloc(nd, sizeof(double));
    float *p = xcalloc(n, sizeof(float));
#define TAKE_(fld, cnt) (w.fld = p, p += (cnt))
#define TAKED_(fld, cnt) (w.fld = pd, pd += (cnt))
    TAKE_(q, LK), TAKE_(k, LK), TAKE_(kT, LK), TAKE_(qe, LK), TAKE_(kf, LK);
    TAKE_(v, LV), TAKE_(ks, LV), TAKE_(u, LV), TAKE_(o, LV);
    TAKE_(b, L), TAKE_(e, L), TAKE_(f, L);
    TAKE_(gam, LL), TAKE_(kk, LL), TAKE_(a, LL), TAKE_(p, LL), TAKE_(s, KV), TAKE_(blk, SOLVE_BLK_ * (size_t)L);
    TAKED_(gc, L);
    if (backward) {
        TAKE_(dout, LV), TAKE_(du, LV), TAKE_(dr, LV), TAKE_(uT, LV), TAKE_(dks, LV), TAKE_(dv, LV);
        TAKE_(dp, LL), TAKE_(da, LL), TAKE_(dq, LK), TAKE_(dk, LK), TAKE_(tk, LK), TAKE_(db, L);
        TAKE_(sT, KV), TAKE_(dsT, KV), TAKE_(ds, KV), TAKE_(dsn, KV);
        TAKED_(dG, L);
    }
#undef TAKE_
#undef TAKED_
    return w;
}

static void work_free_(Work *w) {
    free(w->q);
    free(w->gc);
}

static size_t row_(const DeltaDims *d, int b, int t, int h) { return ((size_t)b * d->T + t) * d->H + h; }

static float dot_(const float *restrict x, const float *restrict y, int n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s += x[i] * y[i];
    return s;
}

// ----------------------------------------------------------------------------
// the unit lower-triangular solves with I + A (A (L,L) strictly lower), in blocks of SOLVE_BLK_ rows: a block
// first takes its products with every row already solved in one mm_ (against a copy of -A's block, so the
// small kernel keeps C in registers), then solves among its own rows one by one; blk holds SOLVE_BLK_ L floats

// X (L,V) <- (I + A)^{-1} X: forward substitution, x_i -= sum_{j<i} A_ij x_j
static void solve_lower_(float *x, const float *a, float *blk, int L, int V) {
    for (int i0 = 0; i0 < L; i0 += SOLVE_BLK_) {
        int bs = L - i0 < SOLVE_BLK_ ? L - i0 : SOLVE_BLK_;
        if (i0) {
            for (int i = 0; i < bs; i++)
                for (int j = 0; j < i0; j++) blk[(size_t)i * i0 + j] = -a[(size_t)(i0 + i) * L + j];
            mm_(x + (size_t)i0 * V, blk, x, bs, i0, V, 0, MM_FULL);
        }
        for (int i = i0 + 1; i < i0 + bs; i++) {
            float *xi = x + (size_t)i * V;
            for (int j = i0; j < i; j++) {
                float aij = a[(size_t)i * L + j];
                const float *xj = x + (size_t)j * V;
                for (int c = 0; c < V; c++) xi[c] -= aij * xj[c];
            }
        }
    }
}

// X (L,V) <- (I + A)^{-T} X: back substitution, x_m -= sum_{i>m} A_im x_i
static void solve_lower_t_(float *x, const float *a, float *blk, int L, int V) {
    for (int m0 = (L - 1) / SOLVE_BLK_ * SOLVE_BLK_; m0 >= 0; m0 -= SOLVE_BLK_) {
        int bs = L - m0 < SOLVE_BLK_ ? L - m0 : SOLVE_BLK_, i0 = m0 + bs, n = L - i0;
        if (n) {
            for (int m = 0; m < bs; m++)
                for (int i = 0; i < n; i++) blk[(size_t)m * n + i] = -a[(size_t)(i0 + i) * L + m0 + m];
            mm_(x + (size_t)m0 * V, blk, x + (size_t)i0 * V, bs, n, V, 0, MM_FULL);
        }
        for (int i = i0 - 1; i > m0; i--) {
            const float *xi = x + (size_t)i * V;
            for (int m = m0; m < i; m++) {
                float aim = a[(size_t)i * L + m];
                float *xm = x + (size_t)m * V;
                for (int c = 0; c < V; c++) xm[c] -= aim * xi[c];
            }
        }
    }
}

// ----------------------------------------------------------------------------
// one chunk's forward, from the state in w->s (left unchanged): every quantity the backward needs, and o

static void chunk_forward_(Work *w, const DeltaDims *d, int b, int h, int t0, int L, const float *q, const float *k,
                           const float *v, const float *beta, const float *g) {
    int K = d->Dk, V = d->Dv;
    size_t LL = (size_t)L * L;
    double acc = 0.0;
    for (int i = 0; i < L; i++) {
        size_t r = row_(d, b, t0 + i, h);
        const float *qr = q + r * K, *kr = k + r * K;
        float *wq = w->q + (size_t)i * K, *wk = w->k + (size_t)i * K;
        for (int c = 0; c < K; c++) { wq[c] = d->scale * qr[c]; wk[c] = kr[c]; }
        memcpy(w->v + (size_t)i * V, v + r * V, (size_t)V * sizeof(float));
        w->b[i] = beta[r];
        if (g) acc += g[r];
        w->gc[i] = acc;
    }
    double gL = w->gc[L - 1];
    for (int i = 0; i < L; i++) {
        w->e[i] = fast_expf_((float)w->gc[i]);
        w->f[i] = fast_expf_((float)(gL - w->gc[i]));
        for (int c = 0; c < K; c++) {
            w->qe[(size_t)i * K + c] = w->e[i] * w->q[(size_t)i * K + c];
            w->kf[(size_t)i * K + c] = w->f[i] * w->k[(size_t)i * K + c];
        }
    }
    // Gam, K K^T (.) Gam (strictly lower), A = b (.) that, P = Q' K^T (.) Gam (lower)
    transpose_(w->kT, w->k, L, K);
    memset(w->kk, 0, LL * sizeof(float));
    memset(w->p, 0, LL * sizeof(float));
    mm_(w->kk, w->k, w->kT, L, K, L, 0, MM_TRI_C);
    mm_(w->p, w->q, w->kT, L, K, L, 0, MM_TRI_C);
    for (int i = 0; i < L; i++)
        for (int j = 0; j < L; j++) {
            size_t ij = (size_t)i * L + j;
            float gm = j <= i ? fast_expf_((float)(w->gc[i] - w->gc[j])) : 0.0f;
            w->gam[ij] = gm;
            w->kk[ij] = j < i ? w->kk[ij] * gm : 0.0f;
            w->a[ij] = w->b[i] * w->kk[ij];
            w->p[ij] *= gm;
        }
    // R = b (.) (V - e (.) K S), then U = (I + A)^{-1} R by forward substitution
    memset(w->ks, 0, (size_t)L * V * sizeof(float));
    mm_(w->ks, w->k, w->s, L, K, V, 0, MM_FULL);
    for (int i = 0; i < L; i++) {
        float *ui = w->u + (size_t)i * V;
        const float *vi = w->v + (size_t)i * V, *ksi = w->ks + (size_t)i * V;
        float bi = w->b[i], ei = w->e[i];
        for (int j = 0; j < V; j++) ui[j] = bi * (vi[j] - ei * ksi[j]);
    }
    solve_lower_(w->u, w->a, w->blk, L, V);
    // o = (e (.) Q') S + P U
    memset(w->o, 0, (size_t)L * V * sizeof(float));
    mm_(w->o, w->qe, w->s, L, K, V, 0, MM_FULL);
    mm_(w->o, w->p, w->u, L, L, V, 0, MM_TRI_A);
}

// S <- e_L S + (f (.) K)^T U
static void chunk_next_state_(Work *w, int L) {
    int K = w->Dk, V = w->Dv;
    float eL = w->e[L - 1];
    for (size_t i = 0; i < (size_t)K * V; i++) w->s[i] *= eL;
    mm_(w->s, w->kf, w->u, K, L, V, 1, MM_FULL);
}

// ----------------------------------------------------------------------------
// forward

void delta_forward(float *o, float *ckpt, float *state, const float *q, const float *k, const float *v,
                   const float *beta, const float *g, const DeltaDims *d) {
    int H = d->H, V = d->Dv, nch = nchunks_(d);
    size_t KV = delta_state_size(d);
#pragma omp parallel
    {
        Work w = work_alloc_(d, 0);
#pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < d->B * H; bh++) {
            int b = bh / H, h = bh % H;
            if (state) memcpy(w.s, state + bh * KV, KV * sizeof(float));
            else memset(w.s, 0, KV * sizeof(float));
            for (int ci = 0; ci < nch; ci++) {
                int t0 = ci * d->chunk, L = d->T - t0 < d->chunk ? d->T - t0 : d->chunk;
                if (ckpt) memcpy(ckpt + ((size_t)bh * nch + ci) * KV, w.s, KV * sizeof(float));
                chunk_forward_(&w, d, b, h, t0, L, q, k, v, beta, g);
                for (int i = 0; i < L; i++)
                    memcpy(o + row_(d, b, t0 + i, h) * V, w.o + (size_t)i * V, V * sizeof(float));
                chunk_next_state_(&w, L);
            }
            if (state) memcpy(state + bh * KV, w.s, KV * sizeof(float));
        }
        work_free_(&w);
    }
}

// ----------------------------------------------------------------------------
// backward

void delta_backward(float *dq, float *dk, float *dv, float *dbeta, float *dg, const float *dout, const float *ckpt,
                    const float *q, const float *k, const float *v, const float *beta, const float *g,
                    const DeltaDims *d) {
    int H = d->H, K = d->Dk, V = d->Dv, nch = nchunks_(d);
    size_t KV = delta_state_size(d);
#pragma omp parallel
    {
        Work w = work_alloc_(d, 1);
#pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < d->B * H; bh++) {
            int b = bh / H, h = bh % H;
            memset(w.ds, 0, KV * sizeof(float));  // dS' of the last chunk: nothing uses the final state
            for (int ci = nch - 1; ci >= 0; ci--) {
                int t0 = ci * d->chunk, L = d->T - t0 < d->chunk ? d->T - t0 : d->chunk;
                size_t LK = (size_t)L * K, LV = (size_t)L * V, LL = (size_t)L * L;
                memcpy(w.s, ckpt + ((size_t)bh * nch + ci) * KV, KV * sizeof(float));
                chunk_forward_(&w, d, b, h, t0, L, q, k, v, beta, g);
                for (int i = 0; i < L; i++)
                    memcpy(w.dout + (size_t)i * V, dout + row_(d, b, t0 + i, h) * V, V * sizeof(float));
                memset(w.dG, 0, (size_t)L * sizeof(double));
                memset(w.db, 0, (size_t)L * sizeof(float));
                memset(w.dq, 0, LK * sizeof(float));
                memset(w.dk, 0, LK * sizeof(float));
                memset(w.dv, 0, LV * sizeof(float));
                transpose_(w.uT, w.u, L, V);
                transpose_(w.sT, w.s, K, V);
                transpose_(w.dsT, w.ds, K, V);
                // the state read by the queries: dq' = e (.) (dO S^T), dG_i += e_i q'_i . (S do_i)
                mm_(w.dq, w.dout, w.sT, L, V, K, 0, MM_FULL);
                for (int i = 0; i < L; i++) {
                    float *dqi = w.dq + (size_t)i * K, ei = w.e[i];
                    w.dG[i] += (double)ei * dot_(w.q + (size_t)i * K, dqi, K);
                    for (int c = 0; c < K; c++) dqi[c] *= ei;
                }
                // the scores: dU = P^T dO, dP = dO U^T (lower); dq' += (dP (.) Gam) K, dk += (dP (.) Gam)^T Q'
                memset(w.du, 0, LV * sizeof(float));
                mm_(w.du, w.p, w.dout, L, L, V, 1, MM_FULL);
                memset(w.dp, 0, LL * sizeof(float));
                mm_(w.dp, w.dout, w.uT, L, V, L, 0, MM_TRI_C);
                for (int i = 0; i < L; i++)
                    for (int j = 0; j < L; j++) {
                        size_t ij = (size_t)i * L + j;
                        if (j > i) { w.dp[ij] = 0.0f; continue; }
                        double c = (double)w.dp[ij] * w.p[ij];
                        w.dG[i] += c;
                        w.dG[j] -= c;
                        w.dp[ij] *= w.gam[ij];
                    }
                mm_(w.dq, w.dp, w.k, L, L, K, 0, MM_TRI_A);
                mm_(w.dk, w.dp, w.q, L, L, K, 1, MM_FULL);
                // the next state: dU_j += f_j dS'^T k_j, dk_j += f_j dS' u_j, e_L and f's decays
                mm_(w.du, w.kf, w.ds, L, K, V, 0, MM_FULL);
                memset(w.tk, 0, LK * sizeof(float));
                mm_(w.tk, w.u, w.dsT, L, V, K, 0, MM_FULL);
                double dgl = (double)w.e[L - 1] * dot_(w.s, w.ds, (int)KV);
                for (int j = 0; j < L; j++) {
                    float *tkj = w.tk + (size_t)j * K, *dkj = w.dk + (size_t)j * K, fj = w.f[j];
                    double c = (double)fj * dot_(w.k + (size_t)j * K, tkj, K);
                    dgl += c;
                    w.dG[j] -= c;
                    for (int cc = 0; cc < K; cc++) dkj[cc] += fj * tkj[cc];
                }
                w.dG[L - 1] += dgl;
                // the solve: dR = (I + A)^{-T} dU by back substitution
                memcpy(w.dr, w.du, LV * sizeof(float));
                solve_lower_t_(w.dr, w.a, w.blk, L, V);
                // dA = -dR U^T (strictly lower); through A_ij = b_i kk_ij
                memset(w.da, 0, LL * sizeof(float));
                mm_(w.da, w.dr, w.uT, L, V, L, 0, MM_TRI_C);
                for (int i = 0; i < L; i++)
                    for (int j = 0; j < L; j++) {
                        size_t ij = (size_t)i * L + j;
                        if (j >= i) { w.da[ij] = 0.0f; continue; }
                        float dav = -w.da[ij];
                        double c = (double)dav * w.a[ij];
                        w.dG[i] += c;
                        w.dG[j] -= c;
                        w.db[i] += dav * w.kk[ij];
                        w.da[ij] = dav * w.b[i] * w.gam[ij];  // M
                    }
                mm_(w.dk, w.da, w.k, L, L, K, 0, MM_TRI_A);
                mm_(w.dk, w.da, w.k, L, L, K, 1, MM_FULL);
                // R_i = b_i (v_i - e_i ks_i)
                for (int i = 0; i < L; i++) {
                    const float *dri = w.dr + (size_t)i * V, *vi = w.v + (size_t)i * V, *ksi = w.ks + (size_t)i * V;
                    float *dvi = w.dv + (size_t)i * V, *dksi = w.dks + (size_t)i * V, bi = w.b[i], ei = w.e[i];
                    float rv = dot_(dri, vi, V), rk = dot_(dri, ksi, V);
                    w.db[i] += rv - ei * rk;
                    w.dG[i] -= (double)bi * ei * rk;
                    for (int j = 0; j < V; j++) {
                        dvi[j] = bi * dri[j];
                        dksi[j] = -bi * ei * dri[j];
                    }
                }
                mm_(w.dk, w.dks, w.sT, L, V, K, 0, MM_FULL);
                // write dq (= scale dq'), dk, dv, dbeta, dg (reverse cumulative sum of dG)
                double acc = 0.0;
                for (int i = L - 1; i >= 0; i--) {
                    size_t r = row_(d, b, t0 + i, h);
                    float *gq = dq + r * K, *gk = dk + r * K, *gv = dv + r * V;
                    const float *lq = w.dq + (size_t)i * K, *lk = w.dk + (size_t)i * K, *lv = w.dv + (size_t)i * V;
                    for (int cc = 0; cc < K; cc++) { gq[cc] += d->scale * lq[cc]; gk[cc] += lk[cc]; }
                    for (int j = 0; j < V; j++) gv[j] += lv[j];
                    if (dbeta) dbeta[r] += w.db[i];
                    acc += w.dG[i];
                    if (g && dg) dg[r] += (float)acc;
                }
                // dS = e_L dS' + (e (.) Q')^T dO + K^T dKS
                float eL = w.e[L - 1];
                for (size_t i = 0; i < KV; i++) w.dsn[i] = eL * w.ds[i];
                mm_(w.dsn, w.qe, w.dout, K, L, V, 1, MM_FULL);
                mm_(w.dsn, w.k, w.dks, K, L, V, 1, MM_FULL);
                float *t = w.ds;
                w.ds = w.dsn;
                w.dsn = t;
            }
        }
        work_free_(&w);
    }
}

// ----------------------------------------------------------------------------
// one token of recurrent decoding

void delta_step(float *o, float *state, const float *q, const float *k, const float *v, const float *beta,
                const float *g, const DeltaDims *d) {
    int K = d->Dk, V = d->Dv;
    size_t KV = delta_state_size(d);
    for (int bh = 0; bh < d->B * d->H; bh++) {
        float *S = state + bh * KV, *orow = o + (size_t)bh * V;
        const float *qr = q + (size_t)bh * K, *kr = k + (size_t)bh * K, *vr = v + (size_t)bh * V;
        float a = g ? fast_expf_(g[bh]) : 1.0f, bt = beta[bh];
        // u = b (v - a S^T k): what the token writes; S <- a S + k u^T
        memset(orow, 0, V * sizeof(float));
        for (int c = 0; c < K; c++) {
            const float *sr = S + (size_t)c * V;
            for (int j = 0; j < V; j++) orow[j] += kr[c] * sr[j];  // S^T k, kept in o for now
        }
        for (int j = 0; j < V; j++) orow[j] = bt * (vr[j] - a * orow[j]);
        float *u = orow;
        for (int c = 0; c < K; c++) {
            float *sr = S + (size_t)c * V, kc = kr[c];
            for (int j = 0; j < V; j++) sr[j] = a * sr[j] + kc * u[j];
        }
        memset(orow, 0, V * sizeof(float));
        for (int c = 0; c < K; c++) {
            float qc = d->scale * qr[c];
            const float *sr = S + (size_t)c * V;
            for (int j = 0; j < V; j++) orow[j] += qc * sr[j];
        }
    }
}
