/*
 * Attention benchmark (not a test): time and GFLOP/s of the tiled attention_forward and of forward +
 * attention_backward at B=8, NH=8, HS=64 for T=512 and T=2048, next to a naive O(T^2)-memory reference
 * (llm.c style: a full row of logits per query, straightforward loops) at T=512 in the same run.
 * Threads from OMP_NUM_THREADS.
 *
 * FLOPs counted (useful work of causal attention, masked half excluded): forward 4 T^2 HS / 2 per head
 * (q.k and p.v, 2 flops per multiply-add); backward 10 T^2 HS / 2 per head (recomputed q.k, do.v, dv, dk,
 * dq), so forward + backward = 14 T^2 HS / 2 per head. exp and the softmax bookkeeping are not counted.
 *
 * The RFA filter logits (AttnFilter, Student-t kind, the rfa mixer's hot path) are timed on the same
 * shapes, forward and forward + backward, as a ratio to the plain kernel.
 *
 *   make benches && OMP_NUM_THREADS=2 build/release/bench/attention
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "nn/attention.h"
#include "bench.h"
#include "core/timer.h"


// n floats uniform in [-1, 1)
static float *unit_(size_t n, unsigned seed) { return bench_filled(n, seed, -1.0f, 1.0f); }

// ----------------------------------------------------------------------------
// naive reference: full logit row per query, float, parallel over (b,h,i) / (b,h)

// out (B,NH,T,HS); att (B,NH,T,T) softmax weights kept for the backward; q, k, v (B,NH,T,HS)
static void naive_forward_(float *out, float *att, const float *q, const float *k, const float *v, float scale,
                           int B, int NH, int T, int HS) {
    #pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int i = 0; i < T; i++) {
                size_t bh = (size_t)b * NH + h;
                const float *q_i = q + (bh * T + i) * HS;
                float *a = att + (bh * T + i) * T, mx = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    const float *k_j = k + (bh * T + j) * HS;
                    float s = 0.0f;
                    for (int d = 0; d < HS; d++) s += q_i[d] * k_j[d];
                    a[j] = s * scale;
                    if (a[j] > mx) mx = a[j];
                }
                float sum = 0.0f;
                for (int j = 0; j <= i; j++) { a[j] = expf(a[j] - mx); sum += a[j]; }
                for (int j = 0; j <= i; j++) a[j] /= sum;
                float *o_i = out + (bh * T + i) * HS;
                for (int d = 0; d < HS; d++) o_i[d] = 0.0f;
                for (int j = 0; j <= i; j++) {
                    const float *v_j = v + (bh * T + j) * HS;
                    for (int d = 0; d < HS; d++) o_i[d] += a[j] * v_j[d];
                }
            }
        }
    }
}

// dq, dk, dv (B,NH,T,HS) +=; datt (T,) row scratch per thread; the rest as in the forward
static void naive_backward_(float *dq, float *dk, float *dv, const float *dout, const float *att, const float *q,
                            const float *k, const float *v, float scale, int B, int NH, int T, int HS) {
    #pragma omp parallel
    {
        float *da = (float *)xmalloc((size_t)T * sizeof(float));
        #pragma omp for collapse(2)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                size_t bh = (size_t)b * NH + h;
                for (int i = 0; i < T; i++) {
                    const float *a = att + (bh * T + i) * T, *do_i = dout + (bh * T + i) * HS;
                    float dsum = 0.0f;
                    for (int j = 0; j <= i; j++) {
                        const float *v_j = v + (bh * T + j) * HS;
                        float *dv_j = dv + (bh * T + j) * HS;
                        float s = 0.0f;
                        for (int d = 0; d < HS; d++) { s += do_i[d] * v_j[d]; dv_j[d] += a[j] * do_i[d]; }
                        da[j] = s;
                        dsum += a[j] * s;
                    }
                    const float *q_i = q + (bh * T + i) * HS;
                    float *dq_i = dq + (bh * T + i) * HS;
                    for (int j = 0; j <= i; j++) {
                        float ds = a[j] * (da[j] - dsum) * scale;
                        const float *k_j = k + (bh * T + j) * HS;
                        float *dk_j = dk + (bh * T + j) * HS;
                        for (int d = 0; d < HS; d++) { dq_i[d] += ds * k_j[d]; dk_j[d] += ds * q_i[d]; }
                    }
                }
            }
        }
        free(da);
    }
}

// ----------------------------------------------------------------------------

typedef struct Bufs {
    float *q, *k, *v, *out, *lse, *dout, *dq, *dk, *dv;
} Bufs;

static void bufs_init_(Bufs *b, size_t n, size_t nbt) {
    b->q = unit_(n, 1); b->k = unit_(n, 2); b->v = unit_(n, 3);
    b->dout = unit_(n, 4); b->out = unit_(n, 5); b->lse = unit_(nbt, 6);
    b->dq = unit_(n, 7); b->dk = unit_(n, 8); b->dv = unit_(n, 9);
}

static void bufs_free_(Bufs *b) {
    free(b->q); free(b->k); free(b->v); free(b->dout); free(b->out); free(b->lse);
    free(b->dq); free(b->dk); free(b->dv);
}

// best time of `what` (0 = tiled forward, 1 = tiled forward + backward, 2 = naive forward, 3 = naive
// forward + backward) over repeats filling at least ~min_s seconds
static double time_best_(int what, Bufs *bf, float *att, const AttnOpts *o, int B, int NH, int T, int HS,
                         double min_s) {
    double best = 1e30, spent = 0;
    for (int rep = 0; rep < 20 && (spent < min_s || rep < 2); rep++) {
        double t0 = time_now_s();
        if (what <= 1) attention_forward(bf->out, bf->lse, bf->q, bf->k, bf->v, o, B, NH, T, HS);
        if (what == 1) {
            attention_backward(bf->dq, bf->dk, bf->dv, NULL, NULL, bf->dout, bf->out, bf->lse, bf->q, bf->k, bf->v,
                               o, B, NH, T, HS);
        }
        if (what >= 2) naive_forward_(bf->out, att, bf->q, bf->k, bf->v, o->scale, B, NH, T, HS);
        if (what == 3) naive_backward_(bf->dq, bf->dk, bf->dv, bf->dout, att, bf->q, bf->k, bf->v, o->scale, B, NH, T, HS);
        double t = time_now_s() - t0;
        spent += t;
        if (t < best) best = t;
    }
    return best;
}

int main(void) {
    int B = 8, NH = 8, HS = 64;
    static const int Ts[] = {512, 2048};
    AttnOpts o = attn_opts_default(HS);
    printf("threads %d, B=%d NH=%d HS=%d, causal, no bias (best of repeats)\n\n", bench_threads(), B, NH, HS);
    printf("%-28s %6s %10s %9s\n", "kernel", "T", "ms", "GFLOP/s");
    for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) {
        int T = Ts[ti];
        size_t n = (size_t)B * NH * T * HS, nbt = (size_t)B * NH * T;
        double fwd_flop = 4.0 * T * (double)T * HS / 2 * B * NH, bwd_flop = 2.5 * fwd_flop;
        Bufs bf;
        bufs_init_(&bf, n, nbt);
        time_best_(0, &bf, NULL, &o, B, NH, T, HS, 0.0);  // warm-up: page in buffers, wake threads
        double tf = time_best_(0, &bf, NULL, &o, B, NH, T, HS, 0.5);
        double tfb = time_best_(1, &bf, NULL, &o, B, NH, T, HS, 0.5);
        printf("%-28s %6d %10.2f %9.1f\n", "tiled forward", T, tf * 1e3, fwd_flop / tf * 1e-9);
        printf("%-28s %6d %10.2f %9.1f\n", "tiled forward+backward", T, tfb * 1e3, (fwd_flop + bwd_flop) / tfb * 1e-9);
        if (T == 512) {
            float *att = unit_(nbt * T, 10);
            time_best_(2, &bf, att, &o, B, NH, T, HS, 0.0);
            double nf = time_best_(2, &bf, att, &o, B, NH, T, HS, 0.5);
            double nfb = time_best_(3, &bf, att, &o, B, NH, T, HS, 0.5);
            printf("%-28s %6d %10.2f %9.1f   (tiled is %.1fx faster)\n", "naive forward", T, nf * 1e3,
                   fwd_flop / nf * 1e-9, nf / tf);
            printf("%-28s %6d %10.2f %9.1f   (tiled is %.1fx faster)\n", "naive forward+backward", T, nfb * 1e3,
                   (fwd_flop + bwd_flop) / nfb * 1e-9, nfb / tfb);
            free(att);
        }
        // RFA: per-head lag tables shaped like the rfa mixer's at init
        float *tabs = (float *)xmalloc(3 * (size_t)NH * T * sizeof(float)), beta[64];
        for (int h = 0; h < NH; h++) {
            double mu = 0.002 * h;
            for (int d = 0; d < T; d++) {
                double E = exp(-mu * d), V = 0.1 * (1 - E * E) + E * E + 1.0;
                tabs[(size_t)h * T + d] = (float)-log(V);
                tabs[((size_t)NH + h) * T + d] = (float)(1.0 / (4.0 * HS / 2 * V));
                tabs[(2 * (size_t)NH + h) * T + d] = (float)E;
            }
            beta[h] = 5.0f;
        }
        AttnFilter f = {ATTN_FILTER_STUDENT, T, tabs, tabs + (size_t)NH * T, tabs + 2 * (size_t)NH * T, beta,
                        NULL, NULL, NULL, NULL};
        float *g = (float *)xcalloc(3 * (size_t)NH * T + NH, sizeof(float));
        f.dbias = g; f.dprec = g + (size_t)NH * T; f.ddecay = g + 2 * (size_t)NH * T; f.dbeta = g + 3 * (size_t)NH * T;
        AttnOpts of = o;
        of.filter = &f;
        double rf = time_best_(0, &bf, NULL, &of, B, NH, T, HS, 0.5);
        double rfb = time_best_(1, &bf, NULL, &of, B, NH, T, HS, 0.5);
        printf("%-28s %6d %10.2f %9.1f   (%.2fx the plain forward)\n", "rfa filter forward", T, rf * 1e3,
               fwd_flop / rf * 1e-9, rf / tf);
        printf("%-28s %6d %10.2f %9.1f   (%.2fx the plain forward+backward)\n", "rfa filter forward+backward", T,
               rfb * 1e3, (fwd_flop + bwd_flop) / rfb * 1e-9, rfb / tfb);
        free(tabs);
        free(g);
        bufs_free_(&bf);
    }
    return 0;
}
