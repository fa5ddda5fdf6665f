/*
 * PaTH and PaTH-FoX attention (nn/path_attn.h):
 *   - the chunked forward (out and lse) against a naive double reference that applies the Householders to
 *     every key, at T = 1, 5, 37, 130, several chunk sizes and head sizes, with and without the forget gate,
 *     and with betas near 0 and near 2;
 *   - finite-difference gradient checks of q, k, v, w, beta and G;
 *   - the chunk size changes nothing beyond rounding, forward and backward;
 *   - decoding with the key-updating cache (path_attn_step) reproduces the forward token by token;
 *   - results bit-identical for 1 and 2 threads; a T = 4096 forward and backward stays finite;
 *   - the `attention` mixer with pos "path" / "path_fox": gradient checks of dx and every tensor, path_chunk
 *     invariance, its tensors and inits, T = 1500 finite, attention maps, bad options.
 */
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "nn/path_attn.h"
#include "mixer_layer.h"

// Forward tolerance against the double reference. The kernel forms the logits through float Householder
// applications and d x d chain products (T = 130 at chunk 4: 32 of them), each with relative rounding ~d * 6e-8
// of the contractive products (|H| <= 1), so logits are good to ~1e-6 and out, lse to a few 1e-6.
#define FWD_ATOL 1e-5
#define FWD_RTOL 1e-5
// Gradient checks (as tests/test_attention.c): O(h^2) truncation plus float rounding of L over 2h; a wrong
// term is O(0.1..1)
#define GC_H 5e-3
#define GC_RTOL 1e-2
#define GC_ATOL 2e-3

typedef struct PIn {
    int B, NH, T, HS;
    float *q, *k, *v, *w, *beta, *G;  // G NULL for plain PaTH
    PathOpts o;
} PIn;

// random inputs: w unit rows, beta uniform in [blo, bhi], G cumulative logsigmoid(N(2, 1)) when fox
static void pin_init_(PIn *in, GcRng *r, int B, int NH, int T, int HS, int fox, int chunk, float blo, float bhi) {
    size_t n = (size_t)B * NH * T * HS, nbt = (size_t)B * NH * T;
    in->B = B, in->NH = NH, in->T = T, in->HS = HS;
    in->q = gc_randn(r, n, 1.0f);
    in->k = gc_randn(r, n, 1.0f);
    in->v = gc_randn(r, n, 1.0f);
    in->w = gc_randn(r, n, 1.0f);
    for (size_t t = 0; t < nbt; t++) {
        double s = 0;
        for (int i = 0; i < HS; i++) s += (double)in->w[t * HS + i] * in->w[t * HS + i];
        for (int i = 0; i < HS; i++) in->w[t * HS + i] = (float)(in->w[t * HS + i] / sqrt(s));
    }
    in->beta = malloc(nbt * sizeof(float));
    for (size_t t = 0; t < nbt; t++) in->beta[t] = blo + (bhi - blo) * gc_uniform(r);
    in->G = NULL;
    if (fox) {
        in->G = malloc(nbt * sizeof(float));
        for (size_t bh = 0; bh < (size_t)B * NH; bh++) {
            double acc = 0;
            for (int t = 0; t < T; t++) {
                double a = 2.0 + gc_normal(r);
                acc += -log1p(exp(-a));
                in->G[bh * T + t] = (float)acc;
            }
        }
    }
    in->o = (PathOpts){1.0f / sqrtf((float)HS), chunk, in->G};
}

static void pin_free_(PIn *in) {
    free(in->q); free(in->k); free(in->v); free(in->w); free(in->beta); free(in->G);
}

// naive reference in double: every score by applying H_{j+1}, ..., H_i to k_j; out (B,NH,T,HS), lse (B,NH,T)
static void reference_(double *out, double *lse, const PIn *in) {
    int T = in->T, d = in->HS;
    double *S = malloc((size_t)T * T * sizeof(double)), *u = malloc(d * sizeof(double));
    for (int bh = 0; bh < in->B * in->NH; bh++) {
        size_t off = (size_t)bh * T * d;
        const float *q = in->q + off, *k = in->k + off, *v = in->v + off, *w = in->w + off, *be = in->beta + (size_t)bh * T;
        for (int j = 0; j < T; j++) {
            for (int r = 0; r < d; r++) u[r] = k[(size_t)j * d + r];
            for (int i = j; i < T; i++) {
                if (i > j) {  // u <- H_i u
                    double wu = 0;
                    for (int r = 0; r < d; r++) wu += (double)w[(size_t)i * d + r] * u[r];
                    for (int r = 0; r < d; r++) u[r] -= (double)be[i] * wu * w[(size_t)i * d + r];
                }
                double s = 0;
                for (int r = 0; r < d; r++) s += (double)q[(size_t)i * d + r] * u[r];
                S[(size_t)i * T + j] = in->o.scale * s + (in->G ? (double)in->G[bh * T + i] - in->G[bh * T + j] : 0.0);
            }
        }
        for (int i = 0; i < T; i++) {
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j <= i; j++) mx = fmax(mx, S[(size_t)i * T + j]);
            for (int r = 0; r < d; r++) out[off + (size_t)i * d + r] = 0;
            for (int j = 0; j <= i; j++) {
                double p = exp(S[(size_t)i * T + j] - mx);
                sum += p;
                for (int r = 0; r < d; r++) out[off + (size_t)i * d + r] += p * v[(size_t)j * d + r];
            }
            for (int r = 0; r < d; r++) out[off + (size_t)i * d + r] /= sum;
            lse[(size_t)bh * T + i] = mx + log(sum);
        }
    }
    free(S);
    free(u);
}

// worst |got - want| / (atol + rtol |want|) over n values
static double excess_(const float *got, const double *want, size_t n, double atol, double rtol) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(got[i] - want[i]) / (atol + rtol * fabs(want[i]));
        if (!(e <= worst)) worst = e;  // NaN counts as worst
    }
    return worst;
}

static void test_forward_reference(void) {
    int Ts[4] = {1, 5, 37, 130}, chunks[3] = {4, 16, 64};
    GcRng r = {11};
    for (int ti = 0; ti < 4; ti++)
        for (int ci = 0; ci < 3; ci++)
            for (int fox = 0; fox < 2; fox++) {
                int HS = ci == 1 ? 16 : 8, B = 2, NH = 2, T = Ts[ti];
                PIn in;
                pin_init_(&in, &r, B, NH, T, HS, fox, chunks[ci], 0.0f, 2.0f);
                size_t n = (size_t)B * NH * T * HS, nbt = (size_t)B * NH * T;
                float *out = malloc(n * sizeof(float)), *lse = malloc(nbt * sizeof(float));
                double *ro = malloc(n * sizeof(double)), *rl = malloc(nbt * sizeof(double));
                path_attn_forward(out, lse, in.q, in.k, in.v, in.w, in.beta, &in.o, B, NH, T, HS);
                reference_(ro, rl, &in);
                double e = fmax(excess_(out, ro, n, FWD_ATOL, FWD_RTOL), excess_(lse, rl, nbt, FWD_ATOL, FWD_RTOL));
                CHECK(e <= 1.0, "%s forward == reference: T %d chunk %d HS %d (worst %.3f of tolerance)",
                      fox ? "path_fox" : "path", T, chunks[ci], HS, e);
                free(out); free(lse); free(ro); free(rl);
                pin_free_(&in);
            }
    // betas at the ends of (0, 2): nearly no transport, and nearly a reflection
    float lo[2] = {0.0f, 1.999f}, hi[2] = {1e-3f, 2.0f};
    for (int e2 = 0; e2 < 2; e2++) {
        int B = 1, NH = 2, T = 70, HS = 8;
        PIn in;
        pin_init_(&in, &r, B, NH, T, HS, e2, 16, lo[e2], hi[e2]);
        size_t n = (size_t)B * NH * T * HS, nbt = (size_t)B * NH * T;
        float *out = malloc(n * sizeof(float)), *lse = malloc(nbt * sizeof(float));
        double *ro = malloc(n * sizeof(double)), *rl = malloc(nbt * sizeof(double));
        path_attn_forward(out, lse, in.q, in.k, in.v, in.w, in.beta, &in.o, B, NH, T, HS);
        reference_(ro, rl, &in);
        double e = fmax(excess_(out, ro, n, FWD_ATOL, FWD_RTOL), excess_(lse, rl, nbt, FWD_ATOL, FWD_RTOL));
        CHECK(e <= 1.0, "forward == reference with beta in [%g, %g] (worst %.3f of tolerance)", lo[e2], hi[e2], e);
        free(out); free(lse); free(ro); free(rl);
        pin_free_(&in);
    }
}

// ----------------------------------------------------------------------------
// gradients

typedef struct PCtx {
    PIn *in;
    float *out, *lse, *dy;
} PCtx;

static double path_loss_(void *ctx) {
    PCtx *c = ctx;
    PIn *in = c->in;
    in->o.fgate = in->G;
    path_attn_forward(c->out, c->lse, in->q, in->k, in->v, in->w, in->beta, &in->o, in->B, in->NH, in->T, in->HS);
    return gc_dot(c->dy, c->out, (size_t)in->B * in->NH * in->T * in->HS);
}

// gradients of L = sum(dy * out) into g[0..5] = dq, dk, dv, dw, dbeta, dG (zeroed here)
static void run_grads_(PIn *in, float *out, float *lse, const float *dy, float *g[6]) {
    size_t n = (size_t)in->B * in->NH * in->T * in->HS, nbt = (size_t)in->B * in->NH * in->T;
    for (int t = 0; t < 6; t++) memset(g[t], 0, (t < 4 ? n : nbt) * sizeof(float));
    path_attn_forward(out, lse, in->q, in->k, in->v, in->w, in->beta, &in->o, in->B, in->NH, in->T, in->HS);
    path_attn_backward(g[0], g[1], g[2], g[3], g[4], g[5], dy, out, lse, in->q, in->k, in->v, in->w, in->beta, &in->o,
                       in->B, in->NH, in->T, in->HS);
}

static void test_gradcheck(void) {
    int B = 1, NH = 2, T = 37, HS = 8;  // chunk 8: five chunks, so three d x d products in the chain
    size_t n = (size_t)B * NH * T * HS, nbt = (size_t)B * NH * T;
    GcRng r = {202};
    const char *names[6] = {"dq", "dk", "dv", "dw", "dbeta", "dG"};
    for (int fox = 0; fox < 2; fox++) {
        PIn in;
        pin_init_(&in, &r, B, NH, T, HS, fox, 8, 0.1f, 1.9f);
        PCtx c = {&in, malloc(n * sizeof(float)), malloc(nbt * sizeof(float)), gc_randn(&r, n, 1.0f)};
        float *g[6];
        for (int t = 0; t < 6; t++) g[t] = malloc((t < 4 ? n : nbt) * sizeof(float));
        run_grads_(&in, c.out, c.lse, c.dy, g);
        float *bufs[6] = {in.q, in.k, in.v, in.w, in.beta, in.G};
        for (int t = 0; t < 6; t++) {
            if (!bufs[t]) {
                int zero = 1;
                for (size_t i = 0; i < nbt; i++) zero &= g[t][i] == 0.0f;
                CHECK(zero, "dG untouched without the forget gate");
                continue;
            }
            char name[64];
            snprintf(name, sizeof name, "%s [%s]", names[t], fox ? "path_fox" : "path");
            gradcheck_buffer(name, bufs[t], g[t], t < 4 ? n : nbt, path_loss_, &c, GC_H, GC_RTOL, GC_ATOL, 4, 6,
                             300 + (uint64_t)t);
        }
        for (int t = 0; t < 6; t++) free(g[t]);
        free(c.out); free(c.lse); free(c.dy);
        pin_free_(&in);
    }
}

// chunk 3 (T not a multiple), 8 and one chunk for the whole sequence: same forward and gradients
static void test_chunk_invariance(void) {
    int B = 2, NH = 1, T = 50, HS = 8, chunks[3] = {3, 8, 64};
    size_t n = (size_t)B * NH * T * HS, nbt = (size_t)B * NH * T;
    GcRng r = {33};
    PIn in;
    pin_init_(&in, &r, B, NH, T, HS, 1, 64, 0.0f, 2.0f);
    float *dy = gc_randn(&r, n, 1.0f), *out[3], *lse[3], *g[3][6];
    for (int c = 0; c < 3; c++) {
        out[c] = malloc(n * sizeof(float));
        lse[c] = malloc(nbt * sizeof(float));
        for (int t = 0; t < 6; t++) g[c][t] = malloc((t < 4 ? n : nbt) * sizeof(float));
        in.o.chunk = chunks[c];
        run_grads_(&in, out[c], lse[c], dy, g[c]);
    }
    for (int c = 0; c < 2; c++) {
        double worst = 0, gscale = 0;
        for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(out[c][i] - out[2][i]));
        for (size_t i = 0; i < nbt; i++) worst = fmax(worst, fabs(lse[c][i] - lse[2][i]));
        CHECK(worst <= 1e-5, "chunk %d == one chunk: out, lse (max diff %.2e, bound 1e-5)", chunks[c], worst);
        worst = 0;
        for (int t = 0; t < 6; t++)
            for (size_t i = 0; i < (t < 4 ? n : nbt); i++) {
                worst = fmax(worst, fabs(g[c][t][i] - g[2][t][i]));
                gscale = fmax(gscale, fabs(g[2][t][i]));
            }
        CHECK(worst <= 1e-5 * fmax(1.0, gscale), "chunk %d == one chunk: every gradient (max diff %.2e, scale %.2f)",
              chunks[c], worst, gscale);
    }
    for (int c = 0; c < 3; c++) {
        free(out[c]); free(lse[c]);
        for (int t = 0; t < 6; t++) free(g[c][t]);
    }
    free(dy);
    pin_free_(&in);
}

// token by token with the key-updating cache == the forward
static void test_step(void) {
    int B = 2, NH = 2, T = 45, HS = 8;
    GcRng r = {44};
    for (int fox = 0; fox < 2; fox++) {
        PIn in;
        pin_init_(&in, &r, B, NH, T, HS, fox, 8, 0.0f, 2.0f);
        size_t n = (size_t)B * NH * T * HS, nbt = (size_t)B * NH * T, nbh = (size_t)B * NH;
        float *out = malloc(n * sizeof(float)), *lse = malloc(nbt * sizeof(float));
        path_attn_forward(out, lse, in.q, in.k, in.v, in.w, in.beta, &in.o, B, NH, T, HS);
        float *kc = malloc(n * sizeof(float)), *vc = malloc(n * sizeof(float)), *gc = malloc(nbt * sizeof(float));
        float *xs[5], *o = malloc(nbh * HS * sizeof(float)), *bt = malloc(nbh * sizeof(float)), *gt = malloc(nbh * sizeof(float));
        for (int i = 0; i < 4; i++) xs[i] = malloc(nbh * HS * sizeof(float));
        double worst = 0;
        for (int t = 0; t < T; t++) {
            const float *src[4] = {in.q, in.k, in.v, in.w};
            for (size_t bh = 0; bh < nbh; bh++) {
                for (int i = 0; i < 4; i++) memcpy(xs[i] + bh * HS, src[i] + (bh * T + t) * HS, HS * sizeof(float));
                bt[bh] = in.beta[bh * T + t];
                gt[bh] = fox ? in.G[bh * T + t] : 0;
            }
            path_attn_step(o, xs[0], xs[1], xs[2], xs[3], bt, fox ? gt : NULL, kc, vc, fox ? gc : NULL, &in.o, t, B, NH,
                           HS, T);
            for (size_t bh = 0; bh < nbh; bh++)
                for (int i = 0; i < HS; i++) worst = fmax(worst, fabs(o[bh * HS + i] - out[(bh * T + t) * HS + i]));
        }
        CHECK(worst <= 1e-5, "%s: decoding step == forward (max diff %.2e, bound 1e-5)", fox ? "path_fox" : "path",
              worst);
        for (int i = 0; i < 4; i++) free(xs[i]);
        free(o); free(bt); free(gt); free(kc); free(vc); free(gc); free(out); free(lse);
        pin_free_(&in);
    }
}

#ifdef _OPENMP
static void test_threads(void) {
    int B = 2, NH = 3, T = 100, HS = 16;
    size_t n = (size_t)B * NH * T * HS, nbt = (size_t)B * NH * T;
    GcRng r = {55};
    PIn in;
    pin_init_(&in, &r, B, NH, T, HS, 1, 16, 0.0f, 2.0f);
    float *dy = gc_randn(&r, n, 1.0f), *out[2], *lse[2], *g[2][6];
    int saved = omp_get_max_threads(), same = 1;
    for (int c = 0; c < 2; c++) {
        out[c] = malloc(n * sizeof(float));
        lse[c] = malloc(nbt * sizeof(float));
        for (int t = 0; t < 6; t++) g[c][t] = malloc((t < 4 ? n : nbt) * sizeof(float));
        omp_set_num_threads(c + 1);
        run_grads_(&in, out[c], lse[c], dy, g[c]);
    }
    omp_set_num_threads(saved);
    same = !memcmp(out[0], out[1], n * sizeof(float)) && !memcmp(lse[0], lse[1], nbt * sizeof(float));
    for (int t = 0; t < 6; t++) same &= !memcmp(g[0][t], g[1][t], (t < 4 ? n : nbt) * sizeof(float));
    CHECK(same, "forward and backward bit-identical with 1 and 2 threads");
    for (int c = 0; c < 2; c++) {
        free(out[c]); free(lse[c]);
        for (int t = 0; t < 6; t++) free(g[c][t]);
    }
    free(dy);
    pin_free_(&in);
}
#endif

// T = 4096: O(T d) memory, outputs and gradients finite
static void test_long(void) {
    int B = 1, NH = 1, T = 4096, HS = 32;
    size_t n = (size_t)T * HS, nbt = T;
    GcRng r = {66};
    PIn in;
    pin_init_(&in, &r, B, NH, T, HS, 1, 0, 0.0f, 2.0f);
    float *dy = gc_randn(&r, n, 1.0f), *out = malloc(n * sizeof(float)), *lse = malloc(nbt * sizeof(float)), *g[6];
    for (int t = 0; t < 6; t++) g[t] = malloc((t < 4 ? n : nbt) * sizeof(float));
    run_grads_(&in, out, lse, dy, g);
    int finite = 1;
    for (size_t i = 0; i < n; i++) finite &= isfinite(out[i]);
    for (int t = 0; t < 6; t++)
        for (size_t i = 0; i < (t < 4 ? n : nbt); i++) finite &= isfinite(g[t][i]);
    CHECK(finite, "path_fox at T = 4096 (chunk 64, HS 32): outputs and gradients finite");
    for (int t = 0; t < 6; t++) free(g[t]);
    free(dy); free(out); free(lse);
    pin_free_(&in);
}

// ----------------------------------------------------------------------------
// the attention mixer with pos path / path_fox

static const char *const CASES_[][2] = {
    {"attention path", "{\"kind\": \"attention\", \"pos\": \"path\", \"heads\": 2, \"path_chunk\": 4}"},
    {"attention path_fox rank 0 qk_norm",
     "{\"kind\": \"attention\", \"pos\": \"path_fox\", \"heads\": 2, \"path_rank\": 0, \"qk_norm\": true, \"path_chunk\": 3}"},
    {"attention path_fox rank 4 bias",
     "{\"kind\": \"attention\", \"pos\": \"path_fox\", \"heads\": 2, \"path_rank\": 4, \"bias\": true}"},
};
#define N_CASES_ ((int)(sizeof CASES_ / sizeof CASES_[0]))

// every parameter off its init; w's conv moved enough that |silu(conv)| is O(1) (w is L2-normalised: a short
// row makes the loss sharp, d/dw ~ 1/|w|)
static void perturb_(Layer *L, GcRng *r) {
    layer_perturb(L, r, 0.2f);
    int kc = param_index_(L, "path_conv");
    for (size_t i = 0; kc >= 0 && i < L->pt.t[kc].numel; i++) L->params[L->pt.t[kc].offset + i] += 0.5f * gc_normal(r);
}

static void test_layer_gradients(void) {
    for (int i = 0; i < N_CASES_; i++) {
        Layer L;
        if (layer_build_(&L, CASES_[i][1], 8, 3)) continue;
        layer_shape_(&L, 2, 11);
        GcRng r = {(uint64_t)(70 + i)};
        perturb_(&L, &r);
        layer_gradcheck_carried(&L, CASES_[i][0], &r, 3e-3, 1e-3);
        layer_free_(&L);
    }
}

// path_chunk 2 and 64 (one chunk): the same outputs and gradients to 1e-5 of their scales
static void test_layer_chunks(void) {
    const char *specs[2] = {"{\"kind\": \"attention\", \"pos\": \"path_fox\", \"heads\": 2, \"path_chunk\": 2}",
                            "{\"kind\": \"attention\", \"pos\": \"path_fox\", \"heads\": 2, \"path_chunk\": 64}"};
    int B = 2, T = 23, C = 8;
    size_t n = (size_t)B * T * C;
    float *y[2], *dx[2], *g[2];
    size_t np = 0;
    for (int c = 0; c < 2; c++) {
        Layer L;
        y[c] = malloc(n * sizeof(float)), dx[c] = malloc(n * sizeof(float)), g[c] = NULL;
        if (layer_build_(&L, specs[c], C, 5)) continue;
        layer_shape_(&L, B, T);
        GcRng r = {6};
        perturb_(&L, &r);
        float *x = gc_randn(&r, n, 1.0f), *dy = gc_randn(&r, n, 1.0f);
        layer_grads(&L, x, dy, y[c], dx[c]);
        np = L.pt.numel;
        g[c] = malloc(np * sizeof(float));
        memcpy(g[c], L.grads, np * sizeof(float));
        free(x); free(dy);
        layer_free_(&L);
    }
    double dyv = 0, ys = 0, dg = 0, gs = 0;
    for (size_t i = 0; i < n; i++) {
        dyv = fmax(dyv, fabs(y[0][i] - y[1][i]));
        ys = fmax(ys, fabs(y[1][i]));
        dg = fmax(dg, fabs(dx[0][i] - dx[1][i]));
        gs = fmax(gs, fabs(dx[1][i]));
    }
    for (size_t i = 0; g[0] && g[1] && i < np; i++) {
        dg = fmax(dg, fabs(g[0][i] - g[1][i]));
        gs = fmax(gs, fabs(g[1][i]));
    }
    CHECK(g[0] && g[1] && dyv <= 1e-5 * ys && dg <= 1e-5 * gs,
          "path_fox layer: path_chunk 2 == 64: outputs (max|d| %.2g of %.2g), gradients (max|d| %.2g of %.2g)", dyv, ys,
          dg, gs);
    for (int c = 0; c < 2; c++) {
        free(y[c]); free(dx[c]); free(g[c]);
    }
}

static void test_layer_params(void) {
    Layer L;
    if (layer_build_(&L, "{\"kind\": \"attention\", \"pos\": \"path_fox\", \"heads\": 4}", 16, 7) == 0) {
        int k1 = param_index_(&L, "path_w1"), k2 = param_index_(&L, "path_w2"), kc = param_index_(&L, "path_conv");
        int kb = param_index_(&L, "path_bb"), kf = param_index_(&L, "fgate_b");
        CHECK(k1 >= 0 && L.pt.t[k1].shape[0] == 32 && L.pt.t[k1].shape[1] == 16, "path_w1 (32, C): rank 32 by default");
        CHECK(k2 >= 0 && L.pt.t[k2].shape[0] == 16 && L.pt.t[k2].shape[1] == 32, "path_w2 (H·D, 32)");
        CHECK(kc >= 0 && L.pt.t[kc].shape[1] == 3, "path_conv (H·D, 3)");
        CHECK(kb >= 0 && L.params[L.pt.t[kb].offset] == 0.0f && !L.pt.t[kb].decay, "path_bb zero, no weight decay");
        CHECK(kf >= 0 && L.params[L.pt.t[kf].offset] == 3.0f, "path_fox: fgate_b as fox (3)");
        layer_shape_(&L, 1, 1500);
        GcRng r = {8};
        CHECK(layer_grads_finite(&L, &r), "path_fox layer at T = 1500: outputs and gradients finite");
        layer_free_(&L);
    }
    if (layer_build_(&L, "{\"kind\": \"attention\", \"pos\": \"path\", \"heads\": 4, \"path_rank\": 0}", 16, 7) == 0) {
        CHECK(param_index_(&L, "path_w1") < 0 && param_index_(&L, "path_w") >= 0 && param_index_(&L, "fgate_w") < 0,
              "path_rank 0: one full w projection, no forget gate");
        layer_free_(&L);
    }
}

// attention maps (naive O(T^2 D) in the mixer) against the kernel's lse: every row sums to 1, NaN above the diagonal
static void test_layer_attn_map(void) {
    int C = 16, T = 70;
    Layer L;
    if (layer_build_(&L, "{\"kind\": \"attention\", \"pos\": \"path_fox\", \"heads\": 2, \"path_chunk\": 16}", C, 3))
        return;
    layer_shape_(&L, 1, T);
    GcRng r = {12};
    perturb_(&L, &r);
    float *x = gc_randn(&r, (size_t)T * C, 1.0f), *y = malloc((size_t)T * C * sizeof(float));
    float *P = malloc((size_t)T * T * sizeof(float));
    L.spec.ops->forward(&L.m, y, x, 1, T);
    double worst = 0;
    int nan_above = 1;
    for (int h = 0; h < 2; h++) {
        L.spec.ops->attn_map(&L.m, 0, h, P);
        for (int i = 0; i < T; i++) {
            double s = 0;
            for (int j = 0; j < T; j++) {
                if (j <= i) s += P[(size_t)i * T + j];
                else nan_above &= isnan(P[(size_t)i * T + j]);
            }
            worst = fmax(worst, fabs(s - 1));
        }
    }
    CHECK(worst < 1e-5 && nan_above, "path_fox attention map rows sum to 1 with the kernel's lse (max err %.2g)", worst);
    free(x); free(y); free(P);
    layer_free_(&L);
}

static void test_bad_options(void) {
    layer_check_error("{\"kind\": \"attention\", \"pos\": \"rope\", \"path_rank\": 8}", 16, "model.mixer.path_rank");
    layer_check_error("{\"kind\": \"attention\", \"pos\": \"fox\", \"path_chunk\": 8}", 16, "model.mixer.path_chunk");
    layer_check_error("{\"kind\": \"attention\", \"pos\": \"path\", \"window\": 8}", 16, "model.mixer.window");
    layer_check_error("{\"kind\": \"attention\", \"pos\": \"path\", \"path_rank\": -2}", 16, "model.mixer.path_rank");
    layer_check_error("{\"kind\": \"attention\", \"pos\": \"paths\"}", 16, "model.mixer.pos");
}

int main(void) {
    test_forward_reference();
    test_gradcheck();
    test_chunk_invariance();
    test_step();
#ifdef _OPENMP
    test_threads();
#endif
    test_long();
    test_layer_gradients();
    test_layer_chunks();
    test_layer_params();
    test_layer_attn_map();
    test_bad_options();
    return test_summary();
}
