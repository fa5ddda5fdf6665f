/*
 * The delta-rule engine (nn/delta.h) against a naive sequential scan in double, token by token
 * (S_t = a_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, o_t = S_t^T (scale q_t), q and k unit rows):
 *   - chunked forward == sequential with and without the decay, beta in (0,1) and in (0,2), for chunk sizes
 *     1, 3, 8, 16, T and 64 > T (T = 37 is a multiple of none of them), to 1e-5 of the largest output;
 *   - gradient checks of q, k, v, beta and the log-decays;
 *   - the gradients do not depend on the chunk size;
 *   - step == forward token by token, and forward in two pieces (initial and final state) == in one;
 *   - T = 8192 with strong decays and beta near 2 stays finite and matches the scan, and its gradients with
 *     chunk 64 match those with chunk 1 (the token-by-token backward).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "scan_check.h"
#include "nn/delta.h"
#include "test.h"

#define GC_H 3e-3
#define GC_RTOL 1e-2
#define GC_ATOL 2e-3

typedef struct Case {
    DeltaDims d;
    int gated;
    float *q, *k, *v, *beta, *g;
    float *o, *ckpt, *dout;
} Case;

// random inputs: q, k unit rows, v N(0,1), beta in [blo, bhi], log-decays in [glo, ghi] (gated)
static void case_make_(Case *c, DeltaDims d, int gated, uint64_t seed, float blo, float bhi, float glo, float ghi) {
    memset(c, 0, sizeof *c);
    c->d = d;
    c->gated = gated;
    GcRng r = {seed};
    size_t BTH = (size_t)d.B * d.T * d.H;
    c->q = gc_randn(&r, BTH * d.Dk, 1.0f);
    c->k = gc_randn(&r, BTH * d.Dk, 1.0f);
    scan_l2_rows(c->q, BTH, d.Dk);
    scan_l2_rows(c->k, BTH, d.Dk);
    c->v = gc_randn(&r, BTH * d.Dv, 1.0f);
    c->beta = malloc(BTH * sizeof(float));
    for (size_t i = 0; i < BTH; i++) c->beta[i] = blo + (bhi - blo) * gc_uniform(&r);
    if (gated) {
        c->g = malloc(BTH * sizeof(float));
        for (size_t i = 0; i < BTH; i++) c->g[i] = glo + (ghi - glo) * gc_uniform(&r);
    }
    c->o = malloc(BTH * d.Dv * sizeof(float));
    c->dout = gc_randn(&r, BTH * d.Dv, 1.0f);
    c->ckpt = malloc(delta_ckpt_size(&d) * sizeof(float));
}

static void case_free_(Case *c) {
    free(c->q); free(c->k); free(c->v); free(c->beta); free(c->g); free(c->o); free(c->ckpt); free(c->dout);
}

static void set_chunk_(Case *c, int chunk) {
    c->d.chunk = chunk;
    free(c->ckpt);
    c->ckpt = malloc(delta_ckpt_size(&c->d) * sizeof(float));
}

// the sequential recurrence in double: o (B,T,H,Dv)
static void naive_(const Case *c, double *o) {
    const DeltaDims *d = &c->d;
    int K = d->Dk, V = d->Dv;
    double *S = malloc((size_t)K * V * sizeof(double)), *ks = malloc((size_t)V * sizeof(double));
    for (int b = 0; b < d->B; b++)
        for (int h = 0; h < d->H; h++) {
            memset(S, 0, (size_t)K * V * sizeof(double));
            for (int t = 0; t < d->T; t++) {
                size_t r = ((size_t)b * d->T + t) * d->H + h;
                const float *k = c->k + r * K, *v = c->v + r * V, *q = c->q + r * K;
                double a = c->g ? exp(c->g[r]) : 1.0, bt = c->beta[r];
                for (int j = 0; j < V; j++) {  // S <- a (S - bt k (k^T S)) + bt k v^T
                    double s = 0;
                    for (int i = 0; i < K; i++) s += k[i] * S[i * V + j];
                    ks[j] = s;
                }
                for (int i = 0; i < K; i++)
                    for (int j = 0; j < V; j++) S[i * V + j] = a * (S[i * V + j] - bt * k[i] * ks[j]) + bt * k[i] * v[j];
                for (int j = 0; j < V; j++) {
                    double s = 0;
                    for (int i = 0; i < K; i++) s += d->scale * q[i] * S[i * V + j];
                    o[r * V + j] = s;
                }
            }
        }
    free(S);
    free(ks);
}

static DeltaDims dims_(int B, int T, int H, int Dk, int Dv, int chunk) {
    DeltaDims d = {B, T, H, Dk, Dv, chunk, 1.0f / sqrtf((float)Dk)};
    return d;
}

// ----------------------------------------------------------------------------

static void test_chunked_vs_sequential(void) {
    int chunks[] = {1, 3, 8, 16, 37, 64};
    for (int gated = 0; gated < 2; gated++)
        for (int wide = 0; wide < 2; wide++) {
            Case c;
            float bhi = wide ? 1.99f : 1.0f;
            case_make_(&c, dims_(2, 37, 3, 8, 6, 1), gated, 100 + gated + 10 * wide, 0.01f, bhi, -1.5f, -0.01f);
            size_t nO = (size_t)2 * 37 * 3 * 6;
            double *o = malloc(nO * sizeof(double));
            naive_(&c, o);
            for (int ci = 0; ci < 6; ci++) {
                set_chunk_(&c, chunks[ci]);
                delta_forward(c.o, c.ckpt, NULL, c.q, c.k, c.v, c.beta, c.g, &c.d);
                double e = scan_rel_err(c.o, o, nO);
                CHECK(e < 1e-5, "chunked (%d) == sequential: %s, beta in (0,%g) (rel err %.2g)", chunks[ci],
                      gated ? "decay" : "no decay", bhi, e);
            }
            free(o);
            case_free_(&c);
        }
}

// ----------------------------------------------------------------------------

static double loss_(void *p) {
    Case *c = p;
    const DeltaDims *d = &c->d;
    delta_forward(c->o, c->ckpt, NULL, c->q, c->k, c->v, c->beta, c->g, d);
    return gc_dot(c->dout, c->o, (size_t)d->B * d->T * d->H * d->Dv);
}

typedef struct Grads {
    float *dq, *dk, *dv, *db, *dg;
} Grads;

static Grads grads_(Case *c) {
    const DeltaDims *d = &c->d;
    size_t BTH = (size_t)d->B * d->T * d->H;
    Grads gr = {calloc(BTH * d->Dk, sizeof(float)), calloc(BTH * d->Dk, sizeof(float)), calloc(BTH * d->Dv, sizeof(float)),
                calloc(BTH, sizeof(float)), calloc(BTH, sizeof(float))};
    delta_forward(c->o, c->ckpt, NULL, c->q, c->k, c->v, c->beta, c->g, d);
    delta_backward(gr.dq, gr.dk, gr.dv, gr.db, c->g ? gr.dg : NULL, c->dout, c->ckpt, c->q, c->k, c->v, c->beta, c->g,
                   d);
    return gr;
}

static void grads_free_(Grads *g) { free(g->dq); free(g->dk); free(g->dv); free(g->db); free(g->dg); }

static void test_gradcheck(void) {
    for (int gated = 0; gated < 2; gated++)
        for (int wide = 0; wide < 2; wide++) {
            Case c;
            float bhi = wide ? 1.9f : 1.0f;
            case_make_(&c, dims_(2, 13, 2, 4, 3, 4), gated, 200 + gated + 10 * wide, 0.05f, bhi, -1.0f, -0.05f);
            const DeltaDims *d = &c.d;
            size_t BTH = (size_t)d->B * d->T * d->H;
            Grads gr = grads_(&c);
            char name[96];
            uint64_t seed = 300 + gated + 10 * wide;
            const char *tag = gated ? "decay" : "no decay";
            snprintf(name, sizeof name, "delta dq (%s, beta in (0,%g))", tag, bhi);
            gradcheck_buffer(name, c.q, gr.dq, BTH * d->Dk, loss_, &c, GC_H, GC_RTOL, GC_ATOL, 4, 6, seed);
            snprintf(name, sizeof name, "delta dk (%s, beta in (0,%g))", tag, bhi);
            gradcheck_buffer(name, c.k, gr.dk, BTH * d->Dk, loss_, &c, GC_H, GC_RTOL, GC_ATOL, 4, 6, seed + 1);
            snprintf(name, sizeof name, "delta dv (%s, beta in (0,%g))", tag, bhi);
            gradcheck_buffer(name, c.v, gr.dv, BTH * d->Dv, loss_, &c, GC_H, GC_RTOL, GC_ATOL, 4, 6, seed + 2);
            snprintf(name, sizeof name, "delta dbeta (%s, beta in (0,%g))", tag, bhi);
            gradcheck_buffer(name, c.beta, gr.db, BTH, loss_, &c, GC_H, GC_RTOL, GC_ATOL, 4, 6, seed + 3);
            if (gated) {
                snprintf(name, sizeof name, "delta dg (beta in (0,%g))", bhi);
                gradcheck_buffer(name, c.g, gr.dg, BTH, loss_, &c, GC_H, GC_RTOL, GC_ATOL, 4, 6, seed + 4);
            }
            grads_free_(&gr);
            case_free_(&c);
        }
}

// the same gradients whatever the chunk size
static void test_grads_chunk_independent(void) {
    for (int gated = 0; gated < 2; gated++) {
        Case c;
        case_make_(&c, dims_(2, 29, 2, 8, 5, 29), gated, 400 + gated, 0.05f, 1.95f, -0.8f, -0.02f);
        const DeltaDims *d = &c.d;
        size_t BTH = (size_t)d->B * d->T * d->H;
        Grads ref = grads_(&c);
        int chunks[] = {1, 4, 7};
        for (int ci = 0; ci < 3; ci++) {
            set_chunk_(&c, chunks[ci]);
            Grads gr = grads_(&c);
            struct { const char *n; float *a, *b; size_t len; } bufs[] = {
                {"dq", gr.dq, ref.dq, BTH * d->Dk}, {"dk", gr.dk, ref.dk, BTH * d->Dk}, {"dv", gr.dv, ref.dv, BTH * d->Dv},
                {"dbeta", gr.db, ref.db, BTH}, {"dg", gr.dg, ref.dg, gated ? BTH : 0}};
            for (int k = 0; k < 5; k++) {
                if (!bufs[k].len) continue;
                double e = 0, s = 0;
                for (size_t i = 0; i < bufs[k].len; i++) {
                    e = fmax(e, fabs(bufs[k].a[i] - bufs[k].b[i]));
                    s = fmax(s, fabs(bufs[k].b[i]));
                }
                CHECK(e <= 1e-5 * s + 1e-6, "%s with chunk %d == chunk 29: %s (max err %.2g of %.2g)", bufs[k].n,
                      chunks[ci], gated ? "decay" : "no decay", e, s);
            }
            grads_free_(&gr);
        }
        grads_free_(&ref);
        case_free_(&c);
    }
}

// ----------------------------------------------------------------------------

static void test_step_and_state(void) {
    for (int gated = 0; gated < 2; gated++) {
        int B = 2, T = 21, H = 2, K = 5, V = 4;
        Case c;
        case_make_(&c, dims_(B, T, H, K, V, 8), gated, 500 + gated, 0.05f, 1.95f, -1.0f, -0.05f);
        const DeltaDims *d = &c.d;
        size_t ss = delta_state_size(d);
        delta_forward(c.o, NULL, NULL, c.q, c.k, c.v, c.beta, c.g, d);
        // token by token
        float *state = malloc((size_t)B * H * ss * sizeof(float));
        delta_state_init(state, d);
        float *qt = malloc((size_t)B * H * K * sizeof(float)), *kt = malloc((size_t)B * H * K * sizeof(float));
        float *vt = malloc((size_t)B * H * V * sizeof(float)), *bt = malloc((size_t)B * H * sizeof(float));
        float *gt = malloc((size_t)B * H * sizeof(float)), *ot = malloc((size_t)B * H * V * sizeof(float));
        double eo = 0, so = 0;
        for (int t = 0; t < T; t++) {
            for (int b = 0; b < B; b++)
                for (int h = 0; h < H; h++) {
                    size_t r = ((size_t)b * T + t) * H + h, s = (size_t)b * H + h;
                    memcpy(qt + s * K, c.q + r * K, K * sizeof(float));
                    memcpy(kt + s * K, c.k + r * K, K * sizeof(float));
                    memcpy(vt + s * V, c.v + r * V, V * sizeof(float));
                    bt[s] = c.beta[r];
                    if (gated) gt[s] = c.g[r];
                }
            DeltaDims d1 = *d;
            d1.T = 1;
            delta_step(ot, state, qt, kt, vt, bt, gated ? gt : NULL, &d1);
            for (int b = 0; b < B; b++)
                for (int h = 0; h < H; h++) {
                    size_t r = ((size_t)b * T + t) * H + h, s = (size_t)b * H + h;
                    for (int j = 0; j < V; j++) {
                        eo = fmax(eo, fabs(ot[s * V + j] - c.o[r * V + j]));
                        so = fmax(so, fabs(c.o[r * V + j]));
                    }
                }
        }
        CHECK(eo <= 1e-5 * so, "step == forward token by token: %s (max err %.2g of %.2g)", gated ? "decay" : "no decay",
              eo, so);
        // forward in two pieces through the state == in one (B = 1 keeps the slicing simple)
        DeltaDims d1 = *d;
        d1.B = 1;
        int T1 = 9;
        float *o_full = malloc((size_t)T * H * V * sizeof(float)), *o_two = malloc((size_t)T * H * V * sizeof(float));
        delta_forward(o_full, NULL, NULL, c.q, c.k, c.v, c.beta, c.g, &d1);
        delta_state_init(state, &d1);
        d1.T = T1;
        delta_forward(o_two, NULL, state, c.q, c.k, c.v, c.beta, c.g, &d1);
        d1.T = T - T1;
        size_t o1 = (size_t)T1 * H;
        delta_forward(o_two + o1 * V, NULL, state, c.q + o1 * K, c.k + o1 * K, c.v + o1 * V, c.beta + o1,
                      gated ? c.g + o1 : NULL, &d1);
        double e2 = 0, s2 = 0;
        for (size_t i = 0; i < (size_t)T * H * V; i++) {
            e2 = fmax(e2, fabs(o_two[i] - o_full[i]));
            s2 = fmax(s2, fabs(o_full[i]));
        }
        CHECK(e2 <= 1e-5 * s2, "forward in two pieces through the state == in one: %s (max err %.2g)",
              gated ? "decay" : "no decay", e2);
        free(o_full); free(o_two);
        free(state); free(qt); free(kt); free(vt); free(bt); free(gt); free(ot);
        case_free_(&c);
    }
}

// ----------------------------------------------------------------------------

// T = 8192, decays down to exp(-30) per token, beta up to 1.999: no inf, no NaN, same as the scan
static void test_long_strong_decays(void) {
    for (int gated = 0; gated < 2; gated++) {
        Case c;
        case_make_(&c, dims_(1, 8192, 2, 8, 8, 64), gated, 600 + gated, 1.9f, 1.999f, -30.0f, -0.001f);
        const DeltaDims *d = &c.d;
        size_t BTH = (size_t)d->T * d->H, nO = BTH * d->Dv;
        double *o = malloc(nO * sizeof(double));
        naive_(&c, o);
        Grads gr = grads_(&c);
        double e = scan_rel_err(c.o, o, nO);
        CHECK(e < 1e-5, "T = 8192, beta in [1.9, 2)%s: chunked == sequential (rel err %.2g)",
              gated ? ", log-decays in [-30, 0)" : "", e);
        int fin = scan_all_finite(gr.dq, BTH * d->Dk) && scan_all_finite(gr.dk, BTH * d->Dk) && scan_all_finite(gr.dv, nO) &&
                  scan_all_finite(gr.db, BTH) && scan_all_finite(gr.dg, BTH);
        CHECK(fin, "T = 8192, beta near 2%s: every gradient finite", gated ? ", strong decays" : "");
        set_chunk_(&c, 1);
        Grads g1 = grads_(&c);
        struct { const char *n; float *a, *b; size_t len; } bufs[] = {
            {"dq", gr.dq, g1.dq, BTH * d->Dk}, {"dk", gr.dk, g1.dk, BTH * d->Dk}, {"dv", gr.dv, g1.dv, nO},
            {"dbeta", gr.db, g1.db, BTH}, {"dg", gr.dg, g1.dg, gated ? BTH : 0}};
        for (int k = 0; k < 5; k++) {
            if (!bufs[k].len) continue;
            double eg = 0, sg = 0;
            for (size_t i = 0; i < bufs[k].len; i++) {
                eg = fmax(eg, fabs(bufs[k].a[i] - bufs[k].b[i]));
                sg = fmax(sg, fabs(bufs[k].b[i]));
            }
            CHECK(eg <= 1e-4 * sg, "T = 8192, beta near 2%s: %s with chunk 64 == chunk 1 (max err %.2g of %.2g)",
                  gated ? ", strong decays" : "", bufs[k].n, eg, sg);
        }
        grads_free_(&g1);
        grads_free_(&gr);
        free(o);
        case_free_(&c);
    }
}

int main(void) {
    test_chunked_vs_sequential();
    test_gradcheck();
    test_grads_chunk_independent();
    test_step_and_state();
    test_long_strong_decays();
    return test_summary();
}
