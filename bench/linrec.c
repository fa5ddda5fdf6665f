/*
 * Linear-recurrence engine benchmark (not a test): forward + backward time of the chunkwise-parallel engine
 * (nn/linrec.h) next to a naive sequential scan of the same recurrence, in one run on the same threads, for
 * each decay form (value channel: GSA's first pass), at T = 512, 2048, 8192 (H = 4, Dk = Dv = 64 by default) with B T = 32768 tokens a call
 * (B = 64, 16, 4), so that every length moves the same amount of data and only the dependence on T differs;
 * the ratio at each T and the exponent p of the time per sequence ~ T^p fitted over the measured lengths
 * (1 for a linear-time scan; --B fixes B instead of B T).
 *
 * The naive scan is what one writes first: token by token, S = a S + k v^T and o = S^T q, keeping every S_t
 * for the backward (T Dk Dv floats per (b,h): what the chunked form avoids), then the reverse sweep
 * dS += q do^T, dq = S do, dk = dS v, dv = dS^T k, dS = a dS. Inner loops run over Dv (contiguous), so the
 * compiler vectorises them; parallel over (b,h) like the engine.
 *
 * Work: the naive scan does 16 Dk Dv flops per token and head (forward: S = a S + k v^T, o = S^T q, 5 flops an
 * element; backward: dS += q do^T, dq, dk, dv, the decay's gradient and dS *= a, 11); the chunked form does
 * at least as much (the same state products plus the in-chunk scores), so "GFLOP/s" counts this naive work for
 * both: the chunked column is how fast it gets the same result, not its own flop rate.
 *
 * The delta rule (nn/delta.h; rows "delta" and "gated delta") is timed the same way against its naive scan:
 * S_t = a_t (S_{t-1} - beta_t k_t (k_t^T S_{t-1})) + beta_t k_t v_t^T, every S_t kept, and the reverse sweep
 * through the same steps (about 30 Dk Dv flops per token and head; the GFLOP/s columns still count the 16 of the
 * diagonal scan, so they compare rows of one kind only). The last column is the largest difference of the
 * two outputs relative to the largest output, so a broken scan cannot pass for a fast one.
 *
 *   make benches && OMP_NUM_THREADS=2 build/release/bench/linrec [--T 512,2048,8192] [--tokens 32768 | --B 4] [--H 4]
 *       [--D 64] [--chunk 64] [--reps 3] [--naive-max-T 8192]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "core/timer.h"
#include "nn/delta.h"
#include "nn/linrec.h"

#define MAX_T 16
#define MAX_REPS 64
#define MIN_TIME_S 0.3  // a short call repeats until this much was timed: one 2 ms call is at the mercy of the scheduler

// the naive scan: forward keeping every state, backward by the reverse sweep; per (b,h) a (T+1, K, V) buffer
static void naive_fwd_bwd_(float *o, float *dq, float *dk, float *dv, float *dg, const float *q, const float *k,
                           const float *v, const float *g, const float *dout, const LinrecDims *d) {
    int T = d->T, H = d->H, K = d->Dk, V = d->Dv, chan = d->decay == LINREC_CHANNEL, vch = d->decay == LINREC_VCHANNEL;
    size_t KV = (size_t)K * V;
#pragma omp parallel
    {
        float *S = xmalloc((size_t)(T + 1) * KV * sizeof(float)), *dS = xmalloc(KV * sizeof(float));
        float *a = xmalloc((size_t)K * sizeof(float)), *av = xmalloc((size_t)V * sizeof(float));  // av: per value channel
#pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < d->B * H; bh++) {
            int b = bh / H, h = bh % H;
            memset(S, 0, KV * sizeof(float));
            for (int t = 0; t < T; t++) {
                size_t r = ((size_t)b * T + t) * H + h;
                for (int i = 0; i < K; i++)
                    a[i] = d->decay == LINREC_NONE || vch ? 1.0f
                                                          : expf(chan ? g[r * K + i] : d->decay == LINREC_HEAD ? g[h] : g[r]);
                for (int j = 0; j < V; j++) av[j] = vch ? expf(g[r * V + j]) : 1.0f;
                const float *Sp = S + (size_t)t * KV;
                float *Sn = S + (size_t)(t + 1) * KV, *orow = o + r * V;
                memset(orow, 0, (size_t)V * sizeof(float));
                for (int i = 0; i < K; i++) {
                    float ki = k[r * K + i], qi = d->scale * q[r * K + i];
                    for (int j = 0; j < V; j++) {
                        Sn[i * V + j] = a[i] * av[j] * Sp[i * V + j] + ki * v[r * V + j];
                        orow[j] += qi * Sn[i * V + j];
                    }
                }
            }
            memset(dS, 0, KV * sizeof(float));
            for (int t = T - 1; t >= 0; t--) {
                size_t r = ((size_t)b * T + t) * H + h;
                const float *St = S + (size_t)(t + 1) * KV, *Sp = S + (size_t)t * KV, *dor = dout + r * V;
                for (int i = 0; i < K; i++)
                    a[i] = d->decay == LINREC_NONE || vch ? 1.0f
                                                          : expf(chan ? g[r * K + i] : d->decay == LINREC_HEAD ? g[h] : g[r]);
                for (int j = 0; j < V; j++) av[j] = vch ? expf(g[r * V + j]) : 1.0f;
                float dgs = 0.0f;
                for (int i = 0; i < K; i++) {
                    float qi = d->scale * q[r * K + i], acc_q = 0.0f, acc_k = 0.0f, acc_g = 0.0f;
                    for (int j = 0; j < V; j++) {
                        dS[i * V + j] += qi * dor[j];
                        acc_q += St[i * V + j] * dor[j];
                        acc_k += dS[i * V + j] * v[r * V + j];
                        dv[r * V + j] += dS[i * V + j] * k[r * K + i];
                        acc_g += dS[i * V + j] * Sp[i * V + j];
                        if (vch) dg[r * V + j] += dS[i * V + j] * Sp[i * V + j] * av[j];
                        dS[i * V + j] *= a[i] * av[j];
                    }
                    dq[r * K + i] += d->scale * acc_q;
                    dk[r * K + i] += acc_k;
                    if (chan) dg[r * K + i] += acc_g * a[i];
                    else dgs += acc_g * a[i];
                }
                if (d->decay == LINREC_TOKEN) dg[r] += dgs;
            }
        }
        free(S); free(dS); free(a); free(av);
    }
}

// the naive delta-rule scan (g NULL: no decay): forward keeping every state, then the reverse sweep
static void naive_delta_fwd_bwd_(float *o, float *dq, float *dk, float *dv, float *dbeta, float *dg, const float *q,
                                 const float *k, const float *v, const float *beta, const float *g, const float *dout,
                                 const DeltaDims *d) {
    int T = d->T, H = d->H, K = d->Dk, V = d->Dv;
    size_t KV = (size_t)K * V;
#pragma omp parallel
    {
        float *S = xmalloc((size_t)(T + 1) * KV * sizeof(float)), *dS = xmalloc(KV * sizeof(float));
        float *u = xmalloc((size_t)V * sizeof(float)), *w = xmalloc((size_t)V * sizeof(float));
#pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < d->B * H; bh++) {
            int b = bh / H, h = bh % H;
            memset(S, 0, KV * sizeof(float));
            for (int t = 0; t < T; t++) {
                size_t r = ((size_t)b * T + t) * H + h;
                const float *Sp = S + (size_t)t * KV, *kr = k + r * K, *vr = v + r * V;
                float *Sn = S + (size_t)(t + 1) * KV, *orow = o + r * V, a = g ? expf(g[r]) : 1.0f, bt = beta[r];
                memset(u, 0, (size_t)V * sizeof(float));  // u = S_{t-1}^T k
                for (int i = 0; i < K; i++)
                    for (int j = 0; j < V; j++) u[j] += kr[i] * Sp[i * V + j];
                memset(orow, 0, (size_t)V * sizeof(float));
                for (int i = 0; i < K; i++) {
                    float qi = d->scale * q[r * K + i];
                    for (int j = 0; j < V; j++) {
                        Sn[i * V + j] = a * (Sp[i * V + j] - bt * kr[i] * u[j]) + bt * kr[i] * vr[j];
                        orow[j] += qi * Sn[i * V + j];
                    }
                }
            }
            memset(dS, 0, KV * sizeof(float));
            for (int t = T - 1; t >= 0; t--) {
                size_t r = ((size_t)b * T + t) * H + h;
                const float *St = S + (size_t)(t + 1) * KV, *Sp = S + (size_t)t * KV, *dor = dout + r * V;
                const float *kr = k + r * K, *vr = v + r * V;
                float a = g ? expf(g[r]) : 1.0f, bt = beta[r], dbt = 0.0f, da = 0.0f;
                memset(u, 0, (size_t)V * sizeof(float));
                memset(w, 0, (size_t)V * sizeof(float));
                for (int i = 0; i < K; i++)
                    for (int j = 0; j < V; j++) u[j] += kr[i] * Sp[i * V + j];
                for (int i = 0; i < K; i++) {  // o = S_t^T q; the write beta k v^T; then dS' = a dS (in place)
                    float qi = d->scale * q[r * K + i], acc_q = 0.0f, acc_k = 0.0f;
                    for (int j = 0; j < V; j++) {
                        dS[i * V + j] += qi * dor[j];
                        acc_q += St[i * V + j] * dor[j];
                        acc_k += dS[i * V + j] * vr[j];
                        dv[r * V + j] += bt * dS[i * V + j] * kr[i];
                        da += dS[i * V + j] * (Sp[i * V + j] - bt * kr[i] * u[j]);
                        dS[i * V + j] *= a;
                        w[j] += kr[i] * dS[i * V + j];  // w = dS'^T k
                    }
                    dq[r * K + i] += d->scale * acc_q;
                    dk[r * K + i] += bt * acc_k;
                    dbt += kr[i] * acc_k;
                }
                // S' = S_{t-1} - beta k u^T: dbeta -= k^T dS' u, dk -= beta (dS' u + S_{t-1} w), dS_{t-1} = dS' - beta k w^T
                for (int i = 0; i < K; i++) {
                    float du = 0.0f, sw = 0.0f;
                    for (int j = 0; j < V; j++) {
                        du += dS[i * V + j] * u[j];
                        sw += Sp[i * V + j] * w[j];
                        dS[i * V + j] -= bt * kr[i] * w[j];
                    }
                    dbt -= kr[i] * du;
                    dk[r * K + i] -= bt * (du + sw);
                }
                dbeta[r] += dbt;
                if (g) dg[r] += a * da;
            }
        }
        free(S); free(dS); free(u); free(w);
    }
}

static void parse_list_(const char *s, int *out, int *n) {
    *n = 0;
    while (*s && *n < MAX_T) {
        out[(*n)++] = atoi(s);
        const char *c = strchr(s, ',');
        if (!c) break;
        s = c + 1;
    }
}

int main(int argc, char **argv) {
    int Ts[MAX_T] = {512, 2048, 8192}, nT = 3, B = 0, tokens = 32768, H = 4, D = 64, chunk = 64, reps = 3, naive_max = 8192;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "%s: missing value\n", a); return 2; }
        if (!strcmp(a, "--T")) parse_list_(v, Ts, &nT);
        else if (!strcmp(a, "--B")) B = atoi(v);
        else if (!strcmp(a, "--tokens")) tokens = atoi(v);
        else if (!strcmp(a, "--H")) H = atoi(v);
        else if (!strcmp(a, "--D")) D = atoi(v);
        else if (!strcmp(a, "--chunk")) chunk = atoi(v);
        else if (!strcmp(a, "--reps")) reps = atoi(v);
        else if (!strcmp(a, "--naive-max-T")) naive_max = atoi(v);
        else { fprintf(stderr, "unknown argument %s\n", a); return 2; }
        i++;
    }
    if (B < 0 || tokens < 1 || H < 1 || D < 1 || chunk < 1 || reps < 1 || reps > MAX_REPS || nT < 1) { fprintf(stderr, "bad sizes\n"); return 2; }
    char bs[64];
    if (B) snprintf(bs, sizeof bs, "B=%d", B);
    else snprintf(bs, sizeof bs, "B T=%d", tokens);
    printf("linrec engine vs naive sequential scan: %s H=%d Dk=Dv=%d chunk=%d, %d threads, median of >= %d calls and >= %.1f s\n\n", bs, H, D,
           chunk, bench_threads(), reps, MIN_TIME_S);
    printf("| decay | B x T | chunked fwd+bwd (ms) | naive fwd+bwd (ms) | speed-up | chunked tokens/s | chunked GFLOP/s | naive GFLOP/s |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    const char *names[5] = {"none", "head", "token", "channel", "value channel"};
    for (int decay = 0; decay < 5; decay++) {
        double tch[MAX_T];
        for (int ti = 0; ti < nT; ti++) {
            int T = Ts[ti], Bt = B ? B : (tokens / T > 0 ? tokens / T : 1);
            LinrecDims d = {Bt, T, H, D, D, decay, 0, chunk, 1.0f / sqrtf((float)D)};
            size_t BTH = (size_t)Bt * T * H, nK = BTH * D;
            size_t ng = decay == LINREC_HEAD ? (size_t)H : decay == LINREC_TOKEN ? BTH : decay >= LINREC_CHANNEL ? nK : 1;
            float *q = bench_filled(nK, 1, -1, 1), *k = bench_filled(nK, 2, -1, 1), *v = bench_filled(nK, 3, -1, 1);
            float *g = bench_filled(ng, 4, -0.5f, -0.01f), *dout = bench_filled(nK, 5, -1, 1), *o = xmalloc(nK * sizeof(float));
            float *dq = xcalloc(nK, sizeof(float)), *dk = xcalloc(nK, sizeof(float)), *dv = xcalloc(nK, sizeof(float));
            float *dg = xcalloc(ng, sizeof(float)), *ck = xmalloc(linrec_ckpt_size(&d) * sizeof(float));
            double t1[MAX_REPS], t2[MAX_REPS];
            int n1 = 0, n2 = 0;
            double tot = 0.0;
            for (int warm = 1; n1 < MAX_REPS && (n1 < reps || tot < MIN_TIME_S); warm = 0) {  // one untimed warm-up
                double t0 = time_now_s();
                linrec_forward(o, NULL, ck, NULL, q, k, v, decay ? g : NULL, NULL, &d);
                linrec_backward(dq, dk, dv, decay ? dg : NULL, NULL, dout, NULL, ck, q, k, v, decay ? g : NULL, NULL, &d);
                if (!warm) tot += (t1[n1++] = time_now_s() - t0);
            }
            tch[ti] = bench_median(t1, n1);
            double tn = NAN;
            if (T <= naive_max) {
                for (tot = 0.0; n2 < MAX_REPS && (n2 < reps || tot < MIN_TIME_S);) {
                    double t0 = time_now_s();
                    naive_fwd_bwd_(o, dq, dk, dv, dg, q, k, v, g, dout, &d);
                    tot += (t2[n2++] = time_now_s() - t0);
                }
                tn = bench_median(t2, n2);
            }
            double work = 16.0 * D * D * Bt * H * T * 1e-9;  // the naive scan's GFLOP (see the top comment)
            printf("| %s | %d x %d | %.1f | %.1f | %.2fx | %.0f | %.1f | %.1f |\n", names[decay], Bt, T, 1e3 * tch[ti], 1e3 * tn,
                   tn / tch[ti], (double)Bt * T / tch[ti], work / tch[ti], work / tn);
            fflush(stdout);
            free(q); free(k); free(v); free(g); free(dout); free(o); free(dq); free(dk); free(dv); free(dg); free(ck);
        }
        if (nT > 1) {  // least-squares slope of log(time per sequence) on log T
            double sx = 0, sy = 0, sxx = 0, sxy = 0;
            for (int ti = 0; ti < nT; ti++) {
                int Bt = B ? B : (tokens / Ts[ti] > 0 ? tokens / Ts[ti] : 1);
                double x = log((double)Ts[ti]), y = log(tch[ti] / Bt);
                sx += x, sy += y, sxx += x * x, sxy += x * y;
            }
            double p = (nT * sxy - sx * sy) / (nT * sxx - sx * sx);
            printf("| %s | time per sequence ~ T^p | p = %.3f | | | | | |\n", names[decay], p);
        }
    }
    // the delta rule: no decay (DeltaNet) and per-token decays (Gated DeltaNet), unit k as the mixers feed it
    const char *dnames[2] = {"delta", "gated delta"};
    printf("\n| rule | B x T | chunked fwd+bwd (ms) | naive fwd+bwd (ms) | speed-up | chunked tokens/s | chunked GFLOP/s | naive "
           "GFLOP/s | max|o - o_naive| / max|o| |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int gated = 0; gated < 2; gated++) {
        double tch[MAX_T];
        for (int ti = 0; ti < nT; ti++) {
            int T = Ts[ti], Bt = B ? B : (tokens / T > 0 ? tokens / T : 1);
            DeltaDims d = {Bt, T, H, D, D, chunk, 1.0f / sqrtf((float)D)};
            size_t BTH = (size_t)Bt * T * H, nK = BTH * D;
            float *q = bench_filled(nK, 1, -1, 1), *k = bench_filled(nK, 2, -1, 1), *v = bench_filled(nK, 3, -1, 1);
            for (size_t r = 0; r < BTH; r++) {
                double s = 0;
                for (int c = 0; c < D; c++) s += (double)k[r * D + c] * k[r * D + c];
                for (int c = 0; c < D; c++) k[r * D + c] /= (float)sqrt(s);
            }
            float *beta = bench_filled(BTH, 6, 0.05f, 0.95f), *g = bench_filled(BTH, 4, -0.5f, -0.01f);
            float *dout = bench_filled(nK, 5, -1, 1), *o = xmalloc(nK * sizeof(float)), *on = xmalloc(nK * sizeof(float));
            float *dq = xcalloc(nK, sizeof(float)), *dk = xcalloc(nK, sizeof(float)), *dv = xcalloc(nK, sizeof(float));
            float *db = xcalloc(BTH, sizeof(float)), *dg = xcalloc(BTH, sizeof(float));
            float *ck = xmalloc(delta_ckpt_size(&d) * sizeof(float));
            const float *gp = gated ? g : NULL;
            double t1[MAX_REPS], t2[MAX_REPS];
            int n1 = 0, n2 = 0;
            double tot = 0.0;
            for (int warm = 1; n1 < MAX_REPS && (n1 < reps || tot < MIN_TIME_S); warm = 0) {
                double t0 = time_now_s();
                delta_forward(o, ck, NULL, q, k, v, beta, gp, &d);
                delta_backward(dq, dk, dv, db, gated ? dg : NULL, dout, ck, q, k, v, beta, gp, &d);
                if (!warm) tot += (t1[n1++] = time_now_s() - t0);
            }
            tch[ti] = bench_median(t1, n1);
            double tn = NAN, diff = NAN;
            if (T <= naive_max) {
                for (tot = 0.0; n2 < MAX_REPS && (n2 < reps || tot < MIN_TIME_S);) {
                    double t0 = time_now_s();
                    naive_delta_fwd_bwd_(on, dq, dk, dv, db, dg, q, k, v, beta, gp, dout, &d);
                    tot += (t2[n2++] = time_now_s() - t0);
                }
                tn = bench_median(t2, n2);
                double mx = 0, md = 0;
                for (size_t i = 0; i < nK; i++) mx = fmax(mx, fabs(o[i])), md = fmax(md, fabs(o[i] - on[i]));
                diff = md / mx;
            }
            double work = 16.0 * D * D * Bt * H * T * 1e-9;
            printf("| %s | %d x %d | %.1f | %.1f | %.2fx | %.0f | %.1f | %.1f | %.1e |\n", dnames[gated], Bt, T, 1e3 * tch[ti],
                   1e3 * tn, tn / tch[ti], (double)Bt * T / tch[ti], work / tch[ti], work / tn, diff);
            fflush(stdout);
            free(q); free(k); free(v); free(beta); free(g); free(dout); free(o); free(on); free(dq); free(dk); free(dv);
            free(db); free(dg); free(ck);
        }
        if (nT > 1) {
            double sx = 0, sy = 0, sxx = 0, sxy = 0;
            for (int ti = 0; ti < nT; ti++) {
                int Bt = B ? B : (tokens / Ts[ti] > 0 ? tokens / Ts[ti] : 1);
                double x = log((double)Ts[ti]), y = log(tch[ti] / Bt);
                sx += x, sy += y, sxx += x * x, sxy += x * y;
            }
            double p = (nT * sxy - sx * sy) / (nT * sxx - sx * sx);
            printf("| %s | time per sequence ~ T^p | p = %.3f | | | | | | |\n", dnames[gated], p);
        }
    }
    return 0;
}
