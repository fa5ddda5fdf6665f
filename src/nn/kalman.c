#include "nn/kalman.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"

// channels per work item: at most 8 blocks, so the per-block partial sums of dk and dq stay small
static int kalman_block_(int M) {
    int nblk = (M + 15) / 16;
    if (nblk > 8) nblk = 8;
    return (M + nblk - 1) / nblk;
}

static int kalman_nchunks_(int T, int chunk) { return (T + chunk - 1) / chunk; }

size_t kalman_ckpt_size(int B, int T, int M, int S, int chunk) {
    return (size_t)B * kalman_nchunks_(T, chunk) * M * 2 * S;
}

size_t kalman_scratch_size(int B, int T, int M, int S) {
    int MB = kalman_block_(M), nblk = (M + MB - 1) / MB;
    // per-block dk and dq, per-row dabar and dpbar, and the clamped dynamics
    return 2 * (size_t)nblk * B * T * S + 2 * (size_t)B * M * S + 3 * (size_t)M * S;
}

// the dynamics as the recursion uses them: A2 = max(abar^2, floor), P = max(pbar, floor)
static void kalman_dyn_(float *A2, float *P, const float *abar, const float *pbar, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float a2 = abar[i] * abar[i];
        A2[i] = a2 > KALMAN_FLOOR ? a2 : KALMAN_FLOOR;
        P[i] = pbar[i] > KALMAN_FLOOR ? pbar[i] : KALMAN_FLOOR;
    }
}

// one token of one channel: (L, E) (S,) in place; pr = prec_t[m], pv = prec_t[m] v_t[m]; kt, qt (S,).
// The only place the recursion is written, so the scan and the step agree bit for bit.
static inline void kalman_update_(float *restrict L, float *restrict E, const float *restrict A2,
                                  const float *restrict P, const float *restrict Ab, float pr, float pv,
                                  const float *restrict kt, const float *restrict qt, int S, float *y, float *yvar) {
    float acc = 0.0f, accv = 0.0f;
#pragma omp simd reduction(+ : acc, accv)
    for (int s = 0; s < S; s++) {
        float inv = 1.0f / (A2[s] + P[s] * L[s]);
        float l = L[s] * inv + pr * kt[s] * kt[s];
        float e = Ab[s] * inv * E[s] + kt[s] * pv;
        L[s] = l;
        E[s] = e;
        float il = 1.0f / l;
        acc += qt[s] * e * il;
        accv += qt[s] * qt[s] * il;
    }
    *y = acc;
    if (yvar) *yvar = accv;
}

void kalman_scan_forward(float *y, float *yvar, float *ckpt, const float *v, const float *prec, const float *k,
                         const float *q, const float *abar, const float *pbar, int B, int T, int M, int S, int chunk) {
    size_t MS = (size_t)M * S;
    float *A2 = xmalloc(2 * MS * sizeof(float)), *P = A2 + MS;
    kalman_dyn_(A2, P, abar, pbar, MS);
    int MB = kalman_block_(M), nblk = (M + MB - 1) / MB, nch = kalman_nchunks_(T, chunk);
#pragma omp parallel
    {
        float *st = xmalloc((size_t)MB * 2 * S * sizeof(float));  // (MB, 2, S) [lambda | eta]
#pragma omp for schedule(dynamic, 1)
        for (int item = 0; item < B * nblk; item++) {
            int b = item / nblk, m0 = (item % nblk) * MB, m1 = m0 + MB < M ? m0 + MB : M;
            for (int m = m0; m < m1; m++) {
                float *L = st + (size_t)(m - m0) * 2 * S;
                for (int s = 0; s < S; s++) { L[s] = 1.0f; L[S + s] = 0.0f; }
            }
            for (int t = 0; t < T; t++) {
                size_t row = (size_t)b * T + t;
                if (ckpt && t % chunk == 0) {
                    float *c = ckpt + (((size_t)b * nch + t / chunk) * M + m0) * 2 * S;
                    memcpy(c, st, (size_t)(m1 - m0) * 2 * S * sizeof(float));
                }
                const float *kt = k + row * S, *qt = q + row * S;
                for (int m = m0; m < m1; m++) {
                    float *L = st + (size_t)(m - m0) * 2 * S;
                    float pr = prec[row * M + m];
                    kalman_update_(L, L + S, A2 + (size_t)m * S, P + (size_t)m * S, abar + (size_t)m * S, pr,
                                   pr * v[row * M + m], kt, qt, S, &y[row * M + m], yvar ? &yvar[row * M + m] : NULL);
                }
            }
        }
        free(st);
    }
    free(A2);
}

void kalman_scan_backward(float *dv, float *dprec, float *dk, float *dq, float *dabar, float *dpbar, const float *dy,
                          const float *dyvar, const float *ckpt, const float *v, const float *prec, const float *k,
                          const float *q, const float *abar, const float *pbar, int B, int T, int M, int S, int chunk,
                          float *scratch) {
    size_t MS = (size_t)M * S, BTS = (size_t)B * T * S;
    int MB = kalman_block_(M), nblk = (M + MB - 1) / MB, nch = kalman_nchunks_(T, chunk);
    float *pdk = scratch, *pdq = pdk + (size_t)nblk * BTS;          // (nblk, B, T, S)
    float *pda = pdq + (size_t)nblk * BTS, *pdp = pda + (size_t)B * MS;  // (B, M, S)
    float *A2 = pdp + (size_t)B * MS, *P = A2 + MS;
    kalman_dyn_(A2, P, abar, pbar, MS);
    memset(pdk, 0, 2 * (size_t)nblk * BTS * sizeof(float));
    memset(pda, 0, 2 * (size_t)B * MS * sizeof(float));
#pragma omp parallel
    {
        size_t width = (size_t)MB * 2 * S;                             // one time step of the block's states
        float *buf = xmalloc((size_t)(chunk + 1) * width * sizeof(float));  // states t0-1 .. t1-1 of a chunk
        float *gl = xmalloc(2 * (size_t)MB * S * sizeof(float)), *ge = gl + (size_t)MB * S;  // carried adjoints
#pragma omp for schedule(dynamic, 1)
        for (int item = 0; item < B * nblk; item++) {
            int b = item / nblk, blk = item % nblk, m0 = blk * MB, m1 = m0 + MB < M ? m0 + MB : M, nm = m1 - m0;
            float *bdk = pdk + (size_t)blk * BTS, *bdq = pdq + (size_t)blk * BTS;
            float *da = pda + (size_t)b * MS, *dp = pdp + (size_t)b * MS;
            memset(gl, 0, 2 * (size_t)MB * S * sizeof(float));
            for (int c = nch - 1; c >= 0; c--) {
                int t0 = c * chunk, t1 = t0 + chunk < T ? t0 + chunk : T;
                // recompute the chunk's states from its checkpoint: buf[i] = state after step t0 + i - 1
                memcpy(buf, ckpt + (((size_t)b * nch + c) * M + m0) * 2 * S, (size_t)nm * 2 * S * sizeof(float));
                for (int t = t0; t < t1; t++) {
                    size_t row = (size_t)b * T + t;
                    float *cur = buf + (size_t)(t - t0 + 1) * width;
                    memcpy(cur, cur - width, (size_t)nm * 2 * S * sizeof(float));
                    for (int m = m0; m < m1; m++) {
                        float *L = cur + (size_t)(m - m0) * 2 * S, yy;
                        float pr = prec[row * M + m];
                        kalman_update_(L, L + S, A2 + (size_t)m * S, P + (size_t)m * S, abar + (size_t)m * S, pr,
                                       pr * v[row * M + m], k + row * S, q + row * S, S, &yy, NULL);
                    }
                }
                for (int t = t1 - 1; t >= t0; t--) {
                    size_t row = (size_t)b * T + t;
                    const float *kt = k + row * S, *qt = q + row * S;
                    float *dkt = bdk + row * S, *dqt = bdq + row * S;
                    const float *prv = buf + (size_t)(t - t0) * width, *cur = prv + width;
                    for (int m = m0; m < m1; m++) {
                        size_t i = row * M + m, o = (size_t)(m - m0) * 2 * S;
                        const float *Lp = prv + o, *Ep = prv + o + S, *Lc = cur + o, *Ec = cur + o + S;
                        const float *a2 = A2 + (size_t)m * S, *pp = P + (size_t)m * S, *ab = abar + (size_t)m * S;
                        float *gL = gl + (size_t)(m - m0) * S, *gE = ge + (size_t)(m - m0) * S;
                        float *dam = da + (size_t)m * S, *dpm = dp + (size_t)m * S;
                        float g = dy[i], gv = dyvar ? dyvar[i] : 0.0f, pr = prec[i], vv = v[i];
                        float dpr = 0.0f, dvv = 0.0f;
                        const float *abm = abar + (size_t)m * S, *pbm = pbar + (size_t)m * S;
#pragma omp simd reduction(+ : dpr, dvv)
                        for (int s = 0; s < S; s++) {
                            float il = 1.0f / Lc[s], mean = Ec[s] * il;
                            // readout y += q eta / lambda, yvar += q^2 / lambda
                            float ge_ = gE[s] + g * qt[s] * il;
                            float gl_ = gL[s] - (g * qt[s] * mean + gv * qt[s] * qt[s] * il) * il;
                            dqt[s] += g * mean + 2.0f * gv * qt[s] * il;
                            // evidence: eta += k prec v, lambda += prec k^2
                            dkt[s] += ge_ * pr * vv + 2.0f * gl_ * kt[s] * pr;
                            dpr += ge_ * kt[s] * vv + gl_ * kt[s] * kt[s];
                            dvv += ge_ * kt[s] * pr;
                            // predict: lambda = lambda_p / den, eta = (abar / den) eta_p, den = A2 + P lambda_p
                            float inv = 1.0f / (a2[s] + pp[s] * Lp[s]), inv2 = inv * inv;
                            float dalpha = ge_ * Ep[s];
                            float dden = -(gl_ * Lp[s] + dalpha * ab[s]) * inv2;
                            float da2 = abm[s] * abm[s] > KALMAN_FLOOR ? dden : 0.0f;
                            dam[s] += dalpha * inv + 2.0f * ab[s] * da2;
                            dpm[s] += pbm[s] > KALMAN_FLOOR ? dden * Lp[s] : 0.0f;
                            gL[s] = gl_ * inv + dden * pp[s];  // lambda_p enters directly (1/den) and through den
                            gE[s] = ge_ * ab[s] * inv;
                        }
                        dprec[i] += dpr;
                        dv[i] += dvv;
                    }
                }
            }
        }
        free(buf);
        free(gl);
    }
    // fixed-order reductions: dk, dq over the channel blocks, the dynamics over b
#pragma omp parallel for
    for (size_t j = 0; j < BTS; j++) {
        float sk = 0.0f, sq = 0.0f;
        for (int blk = 0; blk < nblk; blk++) { sk += pdk[(size_t)blk * BTS + j]; sq += pdq[(size_t)blk * BTS + j]; }
        dk[j] += sk;
        dq[j] += sq;
    }
    for (size_t j = 0; j < MS; j++) {
        double sa = 0.0, sp = 0.0;
        for (int b = 0; b < B; b++) { sa += pda[(size_t)b * MS + j]; sp += pdp[(size_t)b * MS + j]; }
        dabar[j] += (float)sa;
        dpbar[j] += (float)sp;
    }
}

void kalman_attention_matrix(float *P, const float *prec, const float *k, const float *q, const float *abar,
                             const float *pbar, int T, int M, int S, int m) {
    float *A2 = xmalloc(2 * (size_t)S * sizeof(float)), *Pn = A2 + S;
    kalman_dyn_(A2, Pn, abar + (size_t)m * S, pbar + (size_t)m * S, (size_t)S);
    const float *ab = abar + (size_t)m * S;
    // the precision path and the gates: lam[t], f[t] (S,) each, from lambda_0 = 1 (the scan's recursion)
    float *lam = xmalloc(2 * (size_t)T * S * sizeof(float)), *f = lam + (size_t)T * S, *g = xmalloc((size_t)S * sizeof(float));
    for (int t = 0; t < T; t++) {
        float pr = prec[(size_t)t * M + m];
        for (int s = 0; s < S; s++) {
            float lp = t ? lam[(size_t)(t - 1) * S + s] : 1.0f, kt = k[(size_t)t * S + s];
            float inv = 1.0f / (A2[s] + Pn[s] * lp);
            lam[(size_t)t * S + s] = lp * inv + pr * kt * kt;
            f[(size_t)t * S + s] = ab[s] * inv;
        }
    }
    // column j: g[s] = prec_j k_j[s] prod_{r=j+1..i} f_r[s], carried down the rows i >= j
    for (int j = 0; j < T; j++) {
        float pr = prec[(size_t)j * M + m];
        for (int s = 0; s < S; s++) g[s] = pr * k[(size_t)j * S + s];
        for (int i = 0; i < j; i++) P[(size_t)i * T + j] = NAN;
        for (int i = j; i < T; i++) {
            float acc = 0.0f;
            for (int s = 0; s < S; s++) {
                if (i > j) g[s] *= f[(size_t)i * S + s];
                acc += q[(size_t)i * S + s] / lam[(size_t)i * S + s] * g[s];
            }
            P[(size_t)i * T + j] = acc;
        }
    }
    free(g);
    free(lam);
    free(A2);
}

void kalman_state_init(float *state, int B, int M, int S) {
    for (size_t bm = 0; bm < (size_t)B * M; bm++)
        for (int s = 0; s < S; s++) {
            state[bm * 2 * S + s] = 1.0f;
            state[bm * 2 * S + S + s] = 0.0f;
        }
}

void kalman_step(float *y, float *yvar, float *state, size_t stride, const float *v, const float *prec,
                 const float *k, const float *q, const float *abar, const float *pbar, int B, int M, int S) {
    size_t MS = (size_t)M * S;
    float *A2 = xmalloc(2 * MS * sizeof(float)), *P = A2 + MS;
    kalman_dyn_(A2, P, abar, pbar, MS);
    for (int b = 0; b < B; b++)
        for (int m = 0; m < M; m++) {
            size_t i = (size_t)b * M + m;
            float *L = state + b * stride + (size_t)m * 2 * S;
            kalman_update_(L, L + S, A2 + (size_t)m * S, P + (size_t)m * S, abar + (size_t)m * S, prec[i],
                           prec[i] * v[i], k + (size_t)b * S, q + (size_t)b * S, S, &y[i], yvar ? &yvar[i] : NULL);
        }
    free(A2);
}
