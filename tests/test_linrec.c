/*
 * The linear-recurrence engine (nn/linrec.h) against a naive sequential scan in double, token by token:
 *   - chunked forward == sequential for every decay form (none, per head, per token, per key channel, per value
 *     channel), with and
 *     without exponential input gates (mLSTM's stabilised form), for chunk sizes 1, 3, 8, 16 and T (T = 37 is
 *     a multiple of none of them), to 1e-5 of the largest output;
 *   - gradient checks of q, k, v, the log-decays and the log input gates (and the stabiliser output m);
 *   - the gradients do not depend on the chunk size;
 *   - step == forward token by token, and forward in two pieces (initial and final state) == in one;
 *   - T = 8192 with strong decays (and input gates up to e^60) stays finite and matches the scan.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "linrec_g.h"
#include "scan_check.h"
#include "nn/linrec.h"
#include "test.h"

#define GC_H 3e-3
#define GC_H_GATED 1e-3  // the stabiliser's max has kinks; a smaller step stays on one side of them
#define GC_RTOL 1e-2
#define GC_ATOL 2e-3

static const char *DECAY_NAME_[] = {"none", "head", "token", "channel", "vchannel"};
#define N_DECAY_ 5

// input gates go with the scalar decays only
static int skip_(int gated, int decay) { return gated && (decay == LINREC_CHANNEL || decay == LINREC_VCHANNEL); }

typedef struct Case {
    LinrecDims d;
    float *q, *k, *v, *g, *li;
    float *o, *m, *ckpt;
    float *dout, *dm;
} Case;

// random inputs; log-decays in [glo, ghi], log input gates N(li_mean, li_std^2)
static void case_make_(Case *c, LinrecDims d, uint64_t seed, float glo, float ghi, float li_mean, float li_std) {
    memset(c, 0, sizeof *c);
    c->d = d;
    GcRng r = {seed};
    size_t BTH = (size_t)d.B * d.T * d.H, ng = linrec_g_size(&d);
    c->q = gc_randn(&r, BTH * d.Dk, 1.0f);
    c->k = gc_randn(&r, BTH * d.Dk, 1.0f);
    c->v = gc_randn(&r, BTH * d.Dv, 1.0f);
    c->g = ng ? malloc(ng * sizeof(float)) : NULL;
    for (size_t i = 0; i < ng; i++) c->g[i] = glo + (ghi - glo) * gc_uniform(&r);
    if (d.gated_in) {
        c->li = gc_randn(&r, BTH, li_std);
        for (size_t i = 0; i < BTH; i++) c->li[i] += li_mean;
        c->m = malloc(BTH * sizeof(float));
        c->dm = gc_randn(&r, BTH, 1.0f);
    }
    c->o = malloc(BTH * d.Dv * sizeof(float));
    c->dout = gc_randn(&r, BTH * d.Dv, 1.0f);
    c->ckpt = malloc(linrec_ckpt_size(&d) * sizeof(float));
}

static void case_free_(Case *c) {
    free(c->q); free(c->k); free(c->v); free(c->g); free(c->li); free(c->o); free(c->m); free(c->ckpt);
    free(c->dout); free(c->dm);
}

// the sequential recurrence in double: o (B,T,H,Dv) and m (B,T,H) (gated_in)
static void naive_(const Case *c, double *o, double *m) {
    const LinrecDims *d = &c->d;
    int K = d->Dk, V = d->Dv;
    double *S = malloc((size_t)K * V * sizeof(double));
    for (int b = 0; b < d->B; b++)
        for (int h = 0; h < d->H; h++) {
            memset(S, 0, (size_t)K * V * sizeof(double));
            double mp = -INFINITY;
            for (int t = 0; t < d->T; t++) {
                size_t r = ((size_t)b * d->T + t) * d->H + h;
                double in = 1.0, f = 1.0;
                double gs = d->decay == LINREC_HEAD ? c->g[h] : d->decay == LINREC_TOKEN ? c->g[r] : 0.0;
                if (d->gated_in) {
                    double mn = fmax(gs + mp, c->li[r]);
                    f = exp(gs + mp - mn);
                    in = exp(c->li[r] - mn);
                    mp = mn;
                    m[r] = mn;
                } else {
                    f = exp(gs);
                }
                for (int i = 0; i < K; i++)
                    for (int j = 0; j < V; j++) {
                        double a = d->decay == LINREC_CHANNEL ? exp(c->g[r * K + i])
                                   : d->decay == LINREC_VCHANNEL ? exp(c->g[r * V + j]) : f;
                        S[i * V + j] = a * S[i * V + j] + in * c->k[r * K + i] * c->v[r * V + j];
                    }
                for (int j = 0; j < V; j++) {
                    double s = 0.0;
                    for (int i = 0; i < K; i++) s += d->scale * c->q[r * K + i] * S[i * V + j];
                    o[r * V + j] = s;
                }
            }
        }
    free(S);
}

static LinrecDims dims_(int B, int T, int H, int Dk, int Dv, int decay, int gated, int chunk) {
    LinrecDims d = {B, T, H, Dk, Dv, decay, gated, chunk, 1.0f / sqrtf((float)Dk)};
    return d;
}

// ----------------------------------------------------------------------------

static void test_chunked_vs_sequential(void) {
    int chunks[] = {1, 3, 8, 16, 37};
    for (int gated = 0; gated < 2; gated++)
        for (int decay = 0; decay < N_DECAY_; decay++) {
            if (skip_(gated, decay)) continue;
            Case c;
            case_make_(&c, dims_(2, 37, 3, 8, 6, decay, gated, 1), 100 + decay + 10 * gated, -1.5f, -0.01f, 0.0f, 2.0f);
            size_t BTH = (size_t)2 * 37 * 3, nO = BTH * 6;
            double *o = malloc(nO * sizeof(double)), *m = malloc(BTH * sizeof(double));
            naive_(&c, o, m);
            for (int ci = 0; ci < 5; ci++) {
                c.d.chunk = chunks[ci];
                free(c.ckpt);
                c.ckpt = malloc(linrec_ckpt_size(&c.d) * sizeof(float));
                linrec_forward(c.o, c.m, c.ckpt, NULL, c.q, c.k, c.v, c.g, c.li, &c.d);
                double e = scan_rel_err(c.o, o, nO);
                CHECK(e < 1e-5, "chunked (%d) == sequential: decay %s%s (rel err %.2g)", chunks[ci], DECAY_NAME_[decay],
                      gated ? ", input gates" : "", e);
                if (gated) {
                    double em = 0;
                    for (size_t i = 0; i < BTH; i++) em = fmax(em, fabs(c.m[i] - m[i]) / (1.0 + fabs(m[i])));
                    CHECK(em < 1e-5, "chunked (%d) stabiliser m == sequential: decay %s (rel err %.2g)", chunks[ci],
                          DECAY_NAME_[decay], em);
                }
            }
            free(o); free(m);
            case_free_(&c);
        }
}

// ----------------------------------------------------------------------------

typedef struct GcCtx {
    Case *c;
} GcCtx;

static double loss_(void *p) {
    Case *c = ((GcCtx *)p)->c;
    const LinrecDims *d = &c->d;
    size_t BTH = (size_t)d->B * d->T * d->H;
    linrec_forward(c->o, c->m, c->ckpt, NULL, c->q, c->k, c->v, c->g, c->li, d);
    double L = gc_dot(c->dout, c->o, BTH * d->Dv);
    if (d->gated_in) L += gc_dot(c->dm, c->m, BTH);
    return L;
}

typedef struct Grads {
    float *dq, *dk, *dv, *dg, *dli;
} Grads;

static Grads grads_(Case *c) {
    const LinrecDims *d = &c->d;
    size_t BTH = (size_t)d->B * d->T * d->H;
    Grads gr = {calloc(BTH * d->Dk, sizeof(float)), calloc(BTH * d->Dk, sizeof(float)), calloc(BTH * d->Dv, sizeof(float)),
                calloc(linrec_g_size(d) + 1, sizeof(float)), calloc(BTH, sizeof(float))};
    linrec_forward(c->o, c->m, c->ckpt, NULL, c->q, c->k, c->v, c->g, c->li, d);
    linrec_backward(gr.dq, gr.dk, gr.dv, c->g ? gr.dg : NULL, d->gated_in ? gr.dli : NULL, c->dout,
                    d->gated_in ? c->dm : NULL, c->ckpt, c->q, c->k, c->v, c->g, c->li, d);
    return gr;
}

static void grads_free_(Grads *g) { free(g->dq); free(g->dk); free(g->dv); free(g->dg); free(g->dli); }

static void test_gradcheck(void) {
    for (int gated = 0; gated < 2; gated++)
        for (int decay = 0; decay < N_DECAY_; decay++) {
            if (skip_(gated, decay)) continue;
            Case c;
            case_make_(&c, dims_(2, 13, 2, 4, 3, decay, gated, 4), 200 + decay + 10 * gated, -1.0f, -0.05f, 0.0f, 1.0f);
            const LinrecDims *d = &c.d;
            size_t BTH = (size_t)d->B * d->T * d->H;
            Grads gr = grads_(&c);
            GcCtx ctx = {&c};
            char name[96];
            uint64_t seed = 300 + decay;
            const char *tag = gated ? ", input gates" : "";
            double h = gated ? GC_H_GATED : GC_H;
            snprintf(name, sizeof name, "linrec dq (decay %s%s)", DECAY_NAME_[decay], tag);
            gradcheck_buffer(name, c.q, gr.dq, BTH * d->Dk, loss_, &ctx, h, GC_RTOL, GC_ATOL, 4, 6, seed);
            snprintf(name, sizeof name, "linrec dk (decay %s%s)", DECAY_NAME_[decay], tag);
            gradcheck_buffer(name, c.k, gr.dk, BTH * d->Dk, loss_, &ctx, h, GC_RTOL, GC_ATOL, 4, 6, seed + 1);
            snprintf(name, sizeof name, "linrec dv (decay %s%s)", DECAY_NAME_[decay], tag);
            gradcheck_buffer(name, c.v, gr.dv, BTH * d->Dv, loss_, &ctx, h, GC_RTOL, GC_ATOL, 4, 6, seed + 2);
            if (c.g) {
                snprintf(name, sizeof name, "linrec dg (decay %s%s)", DECAY_NAME_[decay], tag);
                gradcheck_buffer(name, c.g, gr.dg, linrec_g_size(d), loss_, &ctx, h, GC_RTOL, GC_ATOL, 4, 6, seed + 3);
            }
            if (gated) {
                snprintf(name, sizeof name, "linrec dli (decay %s)", DECAY_NAME_[decay]);
                gradcheck_buffer(name, c.li, gr.dli, BTH, loss_, &ctx, h, GC_RTOL, GC_ATOL, 4, 6, seed + 4);
            }
            grads_free_(&gr);
            case_free_(&c);
        }
}

// the same gradients whatever the chunk size
static void test_grads_chunk_independent(void) {
    for (int gated = 0; gated < 2; gated++)
        for (int decay = 0; decay < N_DECAY_; decay++) {
            if (skip_(gated, decay)) continue;
            Case c;
            case_make_(&c, dims_(2, 29, 2, 8, 5, decay, gated, 29), 400 + decay + 10 * gated, -0.8f, -0.02f, 0.0f, 1.5f);
            const LinrecDims *d = &c.d;
            size_t BTH = (size_t)d->B * d->T * d->H;
            Grads ref = grads_(&c);
            int chunks[] = {1, 4, 7};
            for (int ci = 0; ci < 3; ci++) {
                c.d.chunk = chunks[ci];
                free(c.ckpt);
                c.ckpt = malloc(linrec_ckpt_size(&c.d) * sizeof(float));
                Grads gr = grads_(&c);
                struct { const char *n; float *a, *b; size_t len; } bufs[] = {
                    {"dq", gr.dq, ref.dq, BTH * d->Dk}, {"dk", gr.dk, ref.dk, BTH * d->Dk}, {"dv", gr.dv, ref.dv, BTH * d->Dv},
                    {"dg", gr.dg, ref.dg, c.g ? linrec_g_size(d) : 0}, {"dli", gr.dli, ref.dli, gated ? BTH : 0}};
                for (int k = 0; k < 5; k++) {
                    if (!bufs[k].len) continue;
                    double e = 0, s = 0;
                    for (size_t i = 0; i < bufs[k].len; i++) {
                        e = fmax(e, fabs(bufs[k].a[i] - bufs[k].b[i]));
                        s = fmax(s, fabs(bufs[k].b[i]));
                    }
                    CHECK(e <= 1e-5 * s + 1e-6, "%s with chunk %d == chunk 29: decay %s%s (max err %.2g of %.2g)", bufs[k].n,
                          chunks[ci], DECAY_NAME_[decay], gated ? ", input gates" : "", e, s);
                }
                grads_free_(&gr);
            }
            grads_free_(&ref);
            case_free_(&c);
        }
}

// ----------------------------------------------------------------------------

static void test_step_and_state(void) {
    for (int gated = 0; gated < 2; gated++)
        for (int decay = 0; decay < N_DECAY_; decay++) {
            if (skip_(gated, decay)) continue;
            int B = 2, T = 21, H = 2, K = 5, V = 4;
            Case c;
            case_make_(&c, dims_(B, T, H, K, V, decay, gated, 8), 500 + decay + 10 * gated, -1.0f, -0.05f, 0.0f, 2.0f);
            const LinrecDims *d = &c.d;
            size_t BTH = (size_t)B * T * H, ss = linrec_state_size(d);
            linrec_forward(c.o, c.m, NULL, NULL, c.q, c.k, c.v, c.g, c.li, d);
            // token by token
            float *state = malloc((size_t)B * H * ss * sizeof(float));
            linrec_state_init(state, d);
            float *qt = malloc((size_t)B * H * K * sizeof(float)), *kt = malloc((size_t)B * H * K * sizeof(float));
            float *vt = malloc((size_t)B * H * V * sizeof(float));
            float *gt = malloc((size_t)B * H * (K + V) * sizeof(float));  // per key or per value channel
            float *lt = malloc((size_t)B * H * sizeof(float)), *ot = malloc((size_t)B * H * V * sizeof(float));
            float *mt = malloc((size_t)B * H * sizeof(float));
            double eo = 0, em = 0, so = 0;
            for (int t = 0; t < T; t++) {
                for (int b = 0; b < B; b++)
                    for (int h = 0; h < H; h++) {
                        size_t r = ((size_t)b * T + t) * H + h, s = (size_t)b * H + h;
                        memcpy(qt + s * K, c.q + r * K, K * sizeof(float));
                        memcpy(kt + s * K, c.k + r * K, K * sizeof(float));
                        memcpy(vt + s * V, c.v + r * V, V * sizeof(float));
                        if (decay == LINREC_TOKEN) gt[s] = c.g[r];
                        if (decay == LINREC_CHANNEL) memcpy(gt + s * K, c.g + r * K, K * sizeof(float));
                        if (decay == LINREC_VCHANNEL) memcpy(gt + s * V, c.g + r * V, V * sizeof(float));
                        if (gated) lt[s] = c.li[r];
                    }
                const float *gp = decay == LINREC_HEAD ? c.g : decay == LINREC_NONE ? NULL : gt;
                LinrecDims d1 = *d;
                d1.T = 1;
                linrec_step(ot, gated ? mt : NULL, state, qt, kt, vt, gp, gated ? lt : NULL, &d1);
                for (int b = 0; b < B; b++)
                    for (int h = 0; h < H; h++) {
                        size_t r = ((size_t)b * T + t) * H + h, s = (size_t)b * H + h;
                        for (int j = 0; j < V; j++) {
                            eo = fmax(eo, fabs(ot[s * V + j] - c.o[r * V + j]));
                            so = fmax(so, fabs(c.o[r * V + j]));
                        }
                        if (gated) em = fmax(em, fabs(mt[s] - c.m[r]));
                    }
            }
            CHECK(eo <= 1e-5 * so, "step == forward token by token: decay %s%s (max err %.2g of %.2g)", DECAY_NAME_[decay],
                  gated ? ", input gates" : "", eo, so);
            if (gated) CHECK(em <= 1e-5, "step's stabiliser == forward's: decay %s (max err %.2g)", DECAY_NAME_[decay], em);
            // forward in two pieces through the state == in one (B = 1 keeps the slicing simple)
            LinrecDims d1 = *d;
            d1.B = 1;
            int T1 = 9;
            float *o_full = malloc((size_t)T * H * V * sizeof(float)), *o_two = malloc((size_t)T * H * V * sizeof(float));
            float *m_full = malloc((size_t)T * H * sizeof(float)), *m_two = malloc((size_t)T * H * sizeof(float));
            linrec_forward(o_full, gated ? m_full : NULL, NULL, NULL, c.q, c.k, c.v, c.g, c.li, &d1);
            linrec_state_init(state, &d1);
            d1.T = T1;
            const float *g1 = decay == LINREC_HEAD || decay == LINREC_NONE ? c.g : c.g;
            linrec_forward(o_two, gated ? m_two : NULL, NULL, state, c.q, c.k, c.v, g1, c.li, &d1);
            d1.T = T - T1;
            size_t gstep = decay == LINREC_TOKEN ? (size_t)T1 * H : decay == LINREC_CHANNEL ? (size_t)T1 * H * K
                           : decay == LINREC_VCHANNEL ? (size_t)T1 * H * V : 0;
            linrec_forward(o_two + (size_t)T1 * H * V, gated ? m_two + (size_t)T1 * H : NULL, NULL, state,
                           c.q + (size_t)T1 * H * K, c.k + (size_t)T1 * H * K, c.v + (size_t)T1 * H * V,
                           c.g ? c.g + gstep : NULL, gated ? c.li + (size_t)T1 * H : NULL, &d1);
            double e2 = 0, s2 = 0;
            for (size_t i = 0; i < (size_t)T * H * V; i++) {
                e2 = fmax(e2, fabs(o_two[i] - o_full[i]));
                s2 = fmax(s2, fabs(o_full[i]));
            }
            CHECK(e2 <= 1e-5 * s2, "forward in two pieces through the state == in one: decay %s%s (max err %.2g)",
                  DECAY_NAME_[decay], gated ? ", input gates" : "", e2);
            free(o_full); free(o_two); free(m_full); free(m_two);
            free(state); free(qt); free(kt); free(vt); free(gt); free(lt); free(ot); free(mt);
            (void)BTH;
            case_free_(&c);
        }
}

// ----------------------------------------------------------------------------

// T = 8192, decays down to exp(-30) per token and input gates up to e^60: no inf, no NaN, same as the scan
static void test_long_strong_decays(void) {
    for (int gated = 0; gated < 2; gated++)
        for (int decay = 1; decay < N_DECAY_; decay++) {
            if (skip_(gated, decay)) continue;
            Case c;
            case_make_(&c, dims_(1, 8192, 2, 8, 8, decay, gated, 64), 600 + decay + 10 * gated, -30.0f, -0.001f, 40.0f,
                       10.0f);
            const LinrecDims *d = &c.d;
            size_t BTH = (size_t)d->T * d->H, nO = BTH * d->Dv;
            double *o = malloc(nO * sizeof(double)), *m = malloc(BTH * sizeof(double));
            naive_(&c, o, m);
            Grads gr = grads_(&c);
            double e = scan_rel_err(c.o, o, nO);
            CHECK(e < 1e-5, "T = 8192, log-decays in [-30, 0): chunked == sequential, decay %s%s (rel err %.2g)",
                  DECAY_NAME_[decay], gated ? ", input gates N(40, 10^2)" : "", e);
            int fin = scan_all_finite(gr.dq, BTH * d->Dk) && scan_all_finite(gr.dk, BTH * d->Dk) && scan_all_finite(gr.dv, nO) &&
                      scan_all_finite(gr.dg, linrec_g_size(d)) && (!gated || scan_all_finite(gr.dli, BTH));
            CHECK(fin, "T = 8192, strong decays: every gradient finite (decay %s%s)", DECAY_NAME_[decay],
                  gated ? ", input gates" : "");
            grads_free_(&gr);
            free(o); free(m);
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
