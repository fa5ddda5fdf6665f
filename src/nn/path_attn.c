/*
 * PaTH attention: chunked forward and backward with O(T d) memory per head (nn/path_attn.h explains the
 * algorithm). Per head, positions [c*C, c*C + n) form chunk c; every chunk but the last is full.
 */
#include "nn/path_attn.h"
#include "nn/dot16.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "nn/chunkmm.h"
#include "nn/fastmath.h"

#define PATH_CHUNK_DEFAULT 64

// ----------------------------------------------------------------------------
// small vector helpers (d = head size)

// nn/dot16.h: the same sums in every kernel set
static inline float dot_(const float *a, const float *b, int d) { return dot16(a, b, d); }

static inline void axpy_(float *y, float a, const float *x, int d) {
    for (int i = 0; i < d; i++) y[i] += a * x[i];
}

// x <- H x = x - beta (w.x) w
static inline void house_(float *x, const float *w, float beta, int d) { axpy_(x, -beta * dot_(w, x, d), w, d); }

// reverse of y = x - beta (w.x) w, given x (the input) and dy: dx = dy - beta (w.dy) w (in place on dy),
// dbeta += -(w.x)(w.dy), dw += -beta ((w.x) dy + (w.dy) x)
static inline void house_back_(float *dy, float *dw, float *dbeta, const float *x, const float *w, float beta, int d) {
    float wx = dot_(w, x, d), wdy = dot_(w, dy, d);
    *dbeta -= wx * wdy;
    for (int r = 0; r < d; r++) dw[r] -= beta * (wx * dy[r] + wdy * x[r]);
    axpy_(dy, -beta * wdy, w, d);
}

// ----------------------------------------------------------------------------
// per-chunk pieces of one head (pointers already at the chunk's first position; n positions)

// P (d,d) = H_{n-1} ... H_0, by M <- M - beta w (w^T M) from M = I; also PT = P^T when non-NULL
static void chunk_product_(float *P, float *PT, float *r, const float *w, const float *beta, int n, int d) {
    memset(P, 0, (size_t)d * d * sizeof(float));
    for (int i = 0; i < d; i++) P[(size_t)i * d + i] = 1.0f;
    for (int s = 0; s < n; s++) {
        const float *ws = w + (size_t)s * d;
        memset(r, 0, d * sizeof(float));
        for (int i = 0; i < d; i++) axpy_(r, ws[i], P + (size_t)i * d, d);  // r = w^T M
        for (int i = 0; i < d; i++) axpy_(P + (size_t)i * d, -beta[s] * ws[i], r, d);
    }
    if (PT) transpose_(PT, P, d, d);
}

// The Householder applications below run step by step over all the chunk's vectors at once: the chains of
// different vectors are independent, so a step is throughput-bound, where one vector's chain (dot, then
// axpy, then the next dot) would wait on every reduction.

// qn (n,d): qn_i = H_0 ... H_i q_i (H_i applied first)
static void chunk_queries_(float *qn, const float *q, const float *w, const float *beta, int n, int d) {
    memcpy(qn, q, (size_t)n * d * sizeof(float));
    for (int s = n - 1; s >= 0; s--)
        for (int i = s; i < n; i++) house_(qn + (size_t)i * d, w + (size_t)s * d, beta[s], d);
}

// in-chunk raw scores R (n,ldr): R[i][j] = q_i^T H_i ... H_{j+1} k_j for j <= i (above the diagonal untouched);
// U (n,d) ends as kn: kn_j = H_{n-1} ... H_{j+1} k_j; knT (d,ldk) (or NULL) its transpose
static void chunk_keys_(float *R, int ldr, float *U, float *knT, int ldk, const float *q, const float *k,
                        const float *w, const float *beta, int n, int d) {
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < i; j++) house_(U + (size_t)j * d, w + (size_t)i * d, beta[i], d);
        memcpy(U + (size_t)i * d, k + (size_t)i * d, d * sizeof(float));
        for (int j = 0; j <= i; j++) R[(size_t)i * ldr + j] = dot_(q + (size_t)i * d, U + (size_t)j * d, d);
    }
    if (knT)
        for (int j = 0; j < n; j++)
            for (int r = 0; r < d; r++) knT[(size_t)r * ldk + j] = U[(size_t)j * d + r];
}

// one block of logits S (nq, nk) (masked entries -INFINITY) into each query row's running max m, sum l and
// unnormalised output acc (nq, d): S becomes exp(S - m_new); V (nk, d)
static void online_(float *S, int nq, int nk, const float *V, float *acc, float *m, float *l, int d) {
    for (int i = 0; i < nq; i++) {
        float *s = S + (size_t)i * nk, mx = -INFINITY;
        for (int j = 0; j < nk; j++) mx = s[j] > mx ? s[j] : mx;
        if (mx == -INFINITY) {  // nothing visible in this block: the row adds nothing
            for (int j = 0; j < nk; j++) s[j] = 0;
            continue;
        }
        float mn = mx > m[i] ? mx : m[i];
        float corr = m[i] == -INFINITY ? 0.0f : expf(m[i] - mn), sum = 0;
        for (int j = 0; j < nk; j++) {
            s[j] = fast_expf_(s[j] - mn);
            sum += s[j];
        }
        l[i] = l[i] * corr + sum;
        m[i] = mn;
        if (corr != 1.0f)
            for (int r = 0; r < d; r++) acc[(size_t)i * d + r] *= corr;
    }
    mm_(acc, S, V, nq, nk, d, 0, MM_FULL);
}

static inline int chunk_of_(const PathOpts *o) { return o->chunk > 0 ? o->chunk : PATH_CHUNK_DEFAULT; }

// ----------------------------------------------------------------------------
// forward

static size_t fwd_scratch_(int T, int d, int C) {
    size_t nc = (size_t)(T + C - 1) / C;
    return nc * d * d + nc * d * C + 4 * (size_t)C * d + 2 * (size_t)C * C + 2 * (size_t)C + 2 * (size_t)d;
}

// one head: out (T,d), lse (T,), inputs (T,d) / (T,), G (T,) or NULL
static void head_forward_(float *out, float *lse, const float *q, const float *k, const float *v, const float *w,
                          const float *beta, const float *G, float scale, int T, int d, int C, float *ws) {
    int nc = (T + C - 1) / C;
    float *P = ws, *knT = P + (size_t)nc * d * d, *qn = knT + (size_t)nc * d * C, *qt = qn + (size_t)C * d;
    float *qt2 = qt + (size_t)C * d, *acc = qt2 + (size_t)C * d, *S = acc + (size_t)C * d, *R = S + (size_t)C * C;
    float *m = R + (size_t)C * C, *l = m + C, *u = l + C;
    for (int c = 0; c < nc; c++) {
        int t0 = c * C, n = T - t0 < C ? T - t0 : C;
        const float *wc = w + (size_t)t0 * d, *bc = beta + t0;
        // this chunk's pieces: later query chunks need P_c (when c is between) and kn_c
        if (c > 0 && c < nc - 1) chunk_product_(P + (size_t)c * d * d, NULL, u, wc, bc, n, d);
        chunk_queries_(qn, q + (size_t)t0 * d, wc, bc, n, d);
        chunk_keys_(R, C, qt2, knT + (size_t)c * d * C, C, q + (size_t)t0 * d, k + (size_t)t0 * d, wc, bc, n, d);
        for (int i = 0; i < n; i++) {
            m[i] = -INFINITY;
            l[i] = 0;
        }
        memset(acc, 0, (size_t)n * d * sizeof(float));
        // in-chunk block
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                S[(size_t)i * n + j] =
                    j <= i ? scale * R[(size_t)i * C + j] + (G ? G[t0 + i] - G[t0 + j] : 0.0f) : -INFINITY;
        online_(S, n, n, v + (size_t)t0 * d, acc, m, l, d);
        // earlier chunks, nearest first: qt = qn P_{c-1} ... P_{c'+1}
        const float *cur = qn;
        for (int cp = c - 1; cp >= 0; cp--) {
            if (cp < c - 1) {
                float *nxt = cur == qt ? qt2 : qt;
                memset(nxt, 0, (size_t)n * d * sizeof(float));
                mm_(nxt, cur, P + (size_t)(cp + 1) * d * d, n, d, d, 0, MM_FULL);
                cur = nxt;
            }
            int k0 = cp * C;
            memset(S, 0, (size_t)n * C * sizeof(float));
            mm_(S, cur, knT + (size_t)cp * d * C, n, d, C, 0, MM_FULL);
            for (int i = 0; i < n; i++)
                for (int j = 0; j < C; j++)
                    S[(size_t)i * C + j] = scale * S[(size_t)i * C + j] + (G ? G[t0 + i] - G[k0 + j] : 0.0f);
            online_(S, n, C, v + (size_t)k0 * d, acc, m, l, d);
        }
        for (int i = 0; i < n; i++) {
            float inv = 1.0f / l[i];
            for (int r = 0; r < d; r++) out[(size_t)(t0 + i) * d + r] = acc[(size_t)i * d + r] * inv;
            lse[t0 + i] = m[i] + logf(l[i]);
        }
    }
}

void path_attn_forward(float *out, float *lse, const float *q, const float *k, const float *v, const float *w,
                       const float *beta, const PathOpts *o, int B, int NH, int T, int HS) {
    int C = chunk_of_(o);
    if (C > T) C = T;
    size_t nws = fwd_scratch_(T, HS, C);
#pragma omp parallel
    {
        float *ws = (float *)xmalloc(nws * sizeof(float));
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                size_t bh = (size_t)b * NH + h, off = bh * T * HS;
                head_forward_(out + off, lse + bh * T, q + off, k + off, v + off, w + off, beta + bh * T,
                              o->fgate ? o->fgate + bh * T : NULL, o->scale, T, HS, C, ws);
            }
        free(ws);
    }
}

// ----------------------------------------------------------------------------
// backward

static size_t bwd_scratch_(int T, int d, int C) {
    size_t nc = (size_t)(T + C - 1) / C, Td = (size_t)nc * C * d;
    return 3 * nc * d * d           // P, PT, dP
           + 5 * Td                 // kn, knT, vT, dkn, dqn
           + Td                     // the chain qt_{c'} of one query chunk
           + (size_t)nc * C * C     // in-chunk draw of every chunk
           + 2 * (size_t)C * d      // g, g2
           + 2 * (size_t)C * C      // S, dp
           + (size_t)C * d          // Z (the chunk's vectors)
           + (size_t)C * (C + 1) / 2 * d  // SN (the snapshots of the chunk's Householder sequences)
           + 2 * (size_t)C + 4 * (size_t)d;
}

// reverse of chunk c's Householder applications: given dqn, dkn (n,d), the in-chunk draw (n, ldr) and dP (d,d)
// (or NULL), accumulate dq, dk, dw (n,d) and dbeta (n). SN (n(n+1)/2, d) and Z (n,d) scratch
static void chunk_backward_(float *dq, float *dk, float *dw, float *dbeta, const float *dqn, const float *dkn,
                            const float *draw, int ldr, float *dP, const float *q, const float *k, const float *w,
                            const float *beta, int n, int d, float *SN, float *Z) {
#define TRI_(m) ((size_t)(m) * ((m) + 1) / 2 * d)  // offset of snapshot m (m + 1 rows) in SN
    // keys: snapshot i holds, for j <= i, H_i ... H_{j+1} k_j (what q_i meets); kn_j = snapshot n-1's row j
    for (int i = 0; i < n; i++) {
        float *Si = SN + TRI_(i);
        if (i > 0) memcpy(Si, SN + TRI_(i - 1), (size_t)i * d * sizeof(float));
        for (int j = 0; j < i; j++) house_(Si + (size_t)j * d, w + (size_t)i * d, beta[i], d);
        memcpy(Si + (size_t)i * d, k + (size_t)i * d, d * sizeof(float));
    }
    // adjoints of the keys' states, from dkn down through H_{n-1}, ..., picking up raw_ij = q_i . state on the way
    memcpy(Z, dkn, (size_t)n * d * sizeof(float));
    for (int i = n - 1; i >= 0; i--) {
        const float *Si = SN + TRI_(i);
        for (int j = 0; j <= i; j++) {
            float g = draw[(size_t)i * ldr + j];
            axpy_(Z + (size_t)j * d, g, q + (size_t)i * d, d);
            axpy_(dq + (size_t)i * d, g, Si + (size_t)j * d, d);
        }
        if (i > 0) {
            const float *Sp = SN + TRI_(i - 1);
            for (int j = 0; j < i; j++)
                house_back_(Z + (size_t)j * d, dw + (size_t)i * d, dbeta + i, Sp + (size_t)j * d, w + (size_t)i * d,
                            beta[i], d);
        }
    }
    for (size_t x = 0; x < (size_t)n * d; x++) dk[x] += Z[x];
    // queries: qn_i = H_0 ... H_i q_i; snapshot n-1-s holds rows i >= s before H_s is applied
    memcpy(Z, q, (size_t)n * d * sizeof(float));
    for (int s = n - 1; s >= 0; s--) {
        memcpy(SN + TRI_(n - 1 - s), Z + (size_t)s * d, (size_t)(n - s) * d * sizeof(float));
        for (int i = s; i < n; i++) house_(Z + (size_t)i * d, w + (size_t)s * d, beta[s], d);
    }
    memcpy(Z, dqn, (size_t)n * d * sizeof(float));
    for (int s = 0; s < n; s++) {
        const float *Qs = SN + TRI_(n - 1 - s);
        for (int i = s; i < n; i++)
            house_back_(Z + (size_t)i * d, dw + (size_t)s * d, dbeta + s, Qs + (size_t)(i - s) * d, w + (size_t)s * d,
                        beta[s], d);
    }
    for (size_t x = 0; x < (size_t)n * d; x++) dq[x] += Z[x];
#undef TRI_
    if (!dP) return;
    // P = H_{n-1} ... H_0 from I: step s is Y = X - beta w (w^T X) with X = H_{s-1} ... H_0, so (dY = dP first)
    //   a = dY^T w, r = X^T w = H_0 ... H_{s-1} w, xa = X a = H_{s-1} ... H_0 a
    //   dbeta -= a.r, dw -= beta (dY r + xa), dX = dY - beta w a^T
    // (products of the Householders with vectors only: X is never formed). r (rows of Z) for every s first,
    // then a (rows of SN) for s = n-1 down to 0 with the d x d updates of dY, then xa in place of a
    float *r = Z, *a = SN;
    memcpy(r, w, (size_t)n * d * sizeof(float));
    for (int p = n - 2; p >= 0; p--)
        for (int s = p + 1; s < n; s++) house_(r + (size_t)s * d, w + (size_t)p * d, beta[p], d);
    for (int s = n - 1; s >= 0; s--) {
        const float *ws = w + (size_t)s * d, *rs = r + (size_t)s * d;
        float *as = a + (size_t)s * d, *dws = dw + (size_t)s * d;
        memset(as, 0, d * sizeof(float));
        for (int i = 0; i < d; i++) axpy_(as, ws[i], dP + (size_t)i * d, d);
        dbeta[s] -= dot_(as, rs, d);
        for (int i = 0; i < d; i++) dws[i] -= beta[s] * dot_(dP + (size_t)i * d, rs, d);
        for (int i = 0; i < d; i++) axpy_(dP + (size_t)i * d, -beta[s] * ws[i], as, d);
    }
    for (int p = 0; p < n - 1; p++)
        for (int s = p + 1; s < n; s++) house_(a + (size_t)s * d, w + (size_t)p * d, beta[p], d);
    for (int s = 0; s < n; s++) axpy_(dw + (size_t)s * d, -beta[s], a + (size_t)s * d, d);
}

// one head; gradients accumulate into the head's slices
static void head_backward_(float *dq, float *dk, float *dv, float *dw, float *dbeta, float *dG, const float *dout,
                           const float *out, const float *lse, const float *q, const float *k, const float *v,
                           const float *w, const float *beta, const float *G, float scale, int T, int d, int C,
                           float *ws) {
    int nc = (T + C - 1) / C;
    size_t dd = (size_t)d * d, Td = (size_t)nc * C * d;
    float *P = ws, *PT = P + nc * dd, *dP = PT + nc * dd, *kn = dP + nc * dd, *knT = kn + Td, *vT = knT + Td;
    float *dkn = vT + Td, *dqn = dkn + Td, *chain = dqn + Td, *drawc = chain + Td;
    float *g = drawc + (size_t)nc * C * C, *g2 = g + (size_t)C * d;
    float *S = g2 + (size_t)C * d, *dp = S + (size_t)C * C, *Z = dp + (size_t)C * C;
    float *SN = Z + (size_t)C * d, *delta = SN + (size_t)C * (C + 1) / 2 * d, *va = delta + C;
    memset(dP, 0, nc * dd * sizeof(float));
    memset(dkn, 0, 2 * Td * sizeof(float));
    // every chunk's kn, knT, vT, P, PT
    for (int c = 0; c < nc; c++) {
        int t0 = c * C, n = T - t0 < C ? T - t0 : C;
        const float *wc = w + (size_t)t0 * d, *bc = beta + t0;
        if (c > 0 && c < nc - 1) chunk_product_(P + c * dd, PT + c * dd, va, wc, bc, n, d);
        chunk_keys_(drawc + (size_t)c * C * C, C, kn + (size_t)t0 * d, knT + (size_t)c * d * C, C, q + (size_t)t0 * d,
                    k + (size_t)t0 * d, wc, bc, n, d);
        for (int j = 0; j < n; j++)
            for (int r = 0; r < d; r++) vT[(size_t)c * d * C + (size_t)r * C + j] = v[(size_t)(t0 + j) * d + r];
    }
    for (int c = 0; c < nc; c++) {
        int t0 = c * C, n = T - t0 < C ? T - t0 : C;
        const float *wc = w + (size_t)t0 * d, *bc = beta + t0, *dO = dout + (size_t)t0 * d;
        for (int i = 0; i < n; i++) delta[i] = dot_(dO + (size_t)i * d, out + (size_t)(t0 + i) * d, d);
        // in-chunk block (raw scores from the first pass, in dr): ds = p (dO.v - delta); dv += p^T dO; draw = scale ds
        float *dr = drawc + (size_t)c * C * C;
        memset(dp, 0, (size_t)n * C * sizeof(float));
        mm_(dp, dO, vT + (size_t)c * d * C, n, d, C, 0, MM_FULL);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                size_t ij = (size_t)i * C + j;
                if (j > i) {
                    S[(size_t)i * n + j] = dr[ij] = 0;
                    continue;
                }
                float s = scale * dr[ij] + (G ? G[t0 + i] - G[t0 + j] : 0.0f);
                float p = fast_expf_(s - lse[t0 + i]);
                float ds = p * (dp[ij] - delta[i]);
                S[(size_t)i * n + j] = p;  // (n, n) for the product below
                if (dG) {
                    dG[t0 + i] += ds;
                    dG[t0 + j] -= ds;
                }
                dr[ij] = scale * ds;
            }
        mm_(dv + (size_t)t0 * d, S, dO, n, n, d, 1, MM_FULL);
        if (c == 0) continue;
        // the chain, nearest chunk first: chain[c'] = qn P_{c-1} ... P_{c'+1}
        chunk_queries_(chain + (size_t)(c - 1) * C * d, q + (size_t)t0 * d, wc, bc, n, d);
        for (int cp = c - 2; cp >= 0; cp--) {
            float *dst = chain + (size_t)cp * C * d;
            memset(dst, 0, (size_t)n * d * sizeof(float));
            mm_(dst, chain + (size_t)(cp + 1) * C * d, P + (size_t)(cp + 1) * dd, n, d, d, 0, MM_FULL);
        }
        // upwards: g = dqt_{c'} = draw_{c'} kn_{c'} + dqt_{c'-1} P_{c'}^T, dP_{c'} += qt_{c'}^T dqt_{c'-1}
        for (int cp = 0; cp < c; cp++) {
            int k0 = cp * C;
            const float *qt = chain + (size_t)cp * C * d;
            if (cp > 0) {
                mm_(dP + cp * dd, qt, g, d, n, d, 1, MM_FULL);
                memset(g2, 0, (size_t)n * d * sizeof(float));
                mm_(g2, g, PT + cp * dd, n, d, d, 0, MM_FULL);
                float *tmp = g;
                g = g2;
                g2 = tmp;
            } else {
                memset(g, 0, (size_t)n * d * sizeof(float));
            }
            memset(S, 0, (size_t)n * C * sizeof(float));
            mm_(S, qt, knT + (size_t)cp * d * C, n, d, C, 0, MM_FULL);
            memset(dp, 0, (size_t)n * C * sizeof(float));
            mm_(dp, dO, vT + (size_t)cp * d * C, n, d, C, 0, MM_FULL);
            for (int i = 0; i < n; i++)
                for (int j = 0; j < C; j++) {
                    size_t ij = (size_t)i * C + j;
                    float s = scale * S[ij] + (G ? G[t0 + i] - G[k0 + j] : 0.0f);
                    float p = fast_expf_(s - lse[t0 + i]);
                    float ds = p * (dp[ij] - delta[i]);
                    S[ij] = p;
                    if (dG) {
                        dG[t0 + i] += ds;
                        dG[k0 + j] -= ds;
                    }
                    dp[ij] = scale * ds;  // draw
                }
            mm_(dv + (size_t)k0 * d, S, dO, C, n, d, 1, MM_FULL);
            mm_(dkn + (size_t)k0 * d, dp, qt, C, n, d, 1, MM_FULL);
            mm_(g, dp, kn + (size_t)k0 * d, n, C, d, 0, MM_FULL);
        }
        for (size_t x = 0; x < (size_t)n * d; x++) dqn[(size_t)t0 * d + x] += g[x];
    }
    // reverse the Householder applications of every chunk
    for (int c = 0; c < nc; c++) {
        int t0 = c * C, n = T - t0 < C ? T - t0 : C;
        size_t o = (size_t)t0 * d;
        chunk_backward_(dq + o, dk + o, dw + o, dbeta + t0, dqn + o, dkn + o, drawc + (size_t)c * C * C, C,
                        c > 0 && c < nc - 1 ? dP + c * dd : NULL, q + o, k + o, w + o, beta + t0, n, d, SN, Z);
    }
}

void path_attn_backward(float *dq, float *dk, float *dv, float *dw, float *dbeta, float *dfgate, const float *dout,
                        const float *out, const float *lse, const float *q, const float *k, const float *v,
                        const float *w, const float *beta, const PathOpts *o, int B, int NH, int T, int HS) {
    int C = chunk_of_(o);
    if (C > T) C = T;
    size_t nws = bwd_scratch_(T, HS, C);
#pragma omp parallel
    {
        float *ws = (float *)xmalloc(nws * sizeof(float));
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                size_t bh = (size_t)b * NH + h, off = bh * T * HS;
                head_backward_(dq + off, dk + off, dv + off, dw + off, dbeta + bh * T,
                               o->fgate && dfgate ? dfgate + bh * T : NULL, dout + off, out + off, lse + bh * T,
                               q + off, k + off, v + off, w + off, beta + bh * T, o->fgate ? o->fgate + bh * T : NULL,
                               o->scale, T, HS, C, ws);
            }
        free(ws);
    }
}

// ----------------------------------------------------------------------------
// decoding

void path_attn_step(float *out, const float *q, const float *k, const float *v, const float *w, const float *beta,
                    const float *g, float *kcache, float *vcache, float *gcache, const PathOpts *o, int t, int B,
                    int NH, int HS, int maxT) {
    int d = HS;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t bh = (size_t)b * NH + h, x = bh * d;
            float *kc = kcache + bh * maxT * d, *vc = vcache + bh * maxT * d;
            // the cached keys move by H_t, then position t joins unchanged
            for (int j = 0; j < t; j++) house_(kc + (size_t)j * d, w + x, beta[bh], d);
            memcpy(kc + (size_t)t * d, k + x, d * sizeof(float));
            memcpy(vc + (size_t)t * d, v + x, d * sizeof(float));
            if (g) gcache[bh * maxT + t] = g[bh];
            float mx = -INFINITY, sum = 0, *o_bh = out + x;
            for (int j = 0; j <= t; j++) {
                float s = o->scale * dot_(q + x, kc + (size_t)j * d, d) + (g ? g[bh] - gcache[bh * maxT + j] : 0.0f);
                mx = s > mx ? s : mx;
            }
            memset(o_bh, 0, d * sizeof(float));
            for (int j = 0; j <= t; j++) {
                float s = o->scale * dot_(q + x, kc + (size_t)j * d, d) + (g ? g[bh] - gcache[bh * maxT + j] : 0.0f);
                float p = expf(s - mx);
                sum += p;
                axpy_(o_bh, p, vc + (size_t)j * d, d);
            }
            for (int r = 0; r < d; r++) o_bh[r] /= sum;
        }
}
