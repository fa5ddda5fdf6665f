/*
 * The RFA filter logits of the attention kernel (attention.h, AttnFilter): forward against a direct
 * double-precision evaluation of the formulas, gradient checks of every input (q, k, v, the three lag
 * tables, beta) for each kind with and without a window, attention_probs, and bit-identical results for
 * any thread count.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/cpu.h"
#include "gradcheck.h"
#include "nn/attention.h"
#include "test.h"

#define GC_H 1e-2
#define GC_RTOL 2e-2
#define GC_ATOL 2e-3

typedef struct Case {
    int B, NH, T, HS, L;
    float *q, *k, *v, *a, *c, *e, *beta;
    AttnFilter f;
    AttnOpts o;
} Case;

static const char *kind_name_(int kind) {
    return kind == ATTN_FILTER_STUDENT ? "student" : kind == ATTN_FILTER_GAUSS ? "gauss" : "dot";
}

static void case_init_(Case *cs, GcRng *r, int kind, int B, int NH, int T, int HS, int W) {
    memset(cs, 0, sizeof *cs);
    cs->B = B; cs->NH = NH; cs->T = T; cs->HS = HS; cs->L = T + 3;  // tables may be longer than T
    size_t n = (size_t)B * NH * T * HS, nl = (size_t)NH * cs->L;
    cs->q = gc_randn(r, n, 0.5f);
    cs->k = gc_randn(r, n, 0.5f);
    cs->v = gc_randn(r, n, 1.0f);
    cs->a = malloc(nl * sizeof(float));
    cs->c = malloc(nl * sizeof(float));
    cs->e = malloc(nl * sizeof(float));
    cs->beta = malloc((size_t)NH * sizeof(float));
    for (int h = 0; h < NH; h++) {
        // head 0 without decay (E = 1, the mu = 0 heads), the others with the RFA prior's shape
        double mu = h == 0 ? 0.0 : 0.03 * h;
        for (int d = 0; d < cs->L; d++) {
            double E = exp(-mu * d), V = 0.1 * (1 - E * E) + 0.7 * E * E + 0.4;
            cs->e[(size_t)h * cs->L + d] = (float)E;
            cs->a[(size_t)h * cs->L + d] = (float)(-1.3 * log(V));
            cs->c[(size_t)h * cs->L + d] = (float)(1.0 / (2.0 * V));
        }
        cs->beta[h] = kind == ATTN_FILTER_DOT ? 0.9f : 1.3f + 0.4f * h;
    }
    cs->f = (AttnFilter){kind, cs->L, cs->a, cs->c, cs->e, cs->beta, NULL, NULL, NULL, NULL};
    cs->o = attn_opts_default(HS);
    cs->o.window = W;
    cs->o.filter = &cs->f;
}

static void case_free_(Case *cs) {
    free(cs->q); free(cs->k); free(cs->v); free(cs->a); free(cs->c); free(cs->e); free(cs->beta);
}

// the logit of (i, j) in double, straight from the formulas
static double ref_logit_(const Case *cs, const float *qi, const float *kj, int h, int lag) {
    double s = 0, qn = 0, kn = 0;
    for (int d = 0; d < cs->HS; d++) {
        s += (double)qi[d] * kj[d];
        qn += (double)qi[d] * qi[d];
        kn += (double)kj[d] * kj[d];
    }
    size_t t = (size_t)h * cs->L + lag;
    double E = cs->e[t], R2 = qn + E * E * kn - 2 * E * s;
    switch (cs->f.kind) {
    case ATTN_FILTER_STUDENT: return cs->a[t] - cs->beta[h] * log1p(cs->c[t] * R2);
    case ATTN_FILTER_GAUSS: return cs->a[t] - cs->beta[h] * cs->c[t] * R2;
    default: return cs->beta[h] * s;
    }
}

static void test_forward_reference(void) {
    GcRng r = {71};
    int kinds[3] = {ATTN_FILTER_STUDENT, ATTN_FILTER_GAUSS, ATTN_FILTER_DOT};
    for (int kk = 0; kk < 3; kk++) {
        for (int W = 0; W <= 9; W += 9) {
            Case cs;
            case_init_(&cs, &r, kinds[kk], 2, 2, 133, 16, W);
            size_t n = (size_t)cs.B * cs.NH * cs.T * cs.HS;
            float *out = malloc(n * sizeof(float)), *lse = malloc((size_t)cs.B * cs.NH * cs.T * sizeof(float));
            attention_forward(out, lse, cs.q, cs.k, cs.v, &cs.o, cs.B, cs.NH, cs.T, cs.HS);
            double worst = 0, worst_lse = 0;
            double *w = malloc((size_t)cs.T * sizeof(double));
            for (int bh = 0; bh < cs.B * cs.NH; bh++) {
                int h = bh % cs.NH;
                size_t off = (size_t)bh * cs.T * cs.HS;
                for (int i = 0; i < cs.T; i++) {
                    int j0 = W && i - W + 1 > 0 ? i - W + 1 : 0;
                    double mx = -INFINITY, sum = 0;
                    for (int j = j0; j <= i; j++) {
                        w[j] = ref_logit_(&cs, cs.q + off + (size_t)i * cs.HS, cs.k + off + (size_t)j * cs.HS, h, i - j);
                        mx = fmax(mx, w[j]);
                    }
                    for (int j = j0; j <= i; j++) sum += exp(w[j] - mx);
                    double l = mx + log(sum);
                    worst_lse = fmax(worst_lse, fabs(l - lse[(size_t)bh * cs.T + i]) / (1 + fabs(l)));
                    for (int d = 0; d < cs.HS; d++) {
                        double acc = 0;
                        for (int j = j0; j <= i; j++)
                            acc += exp(w[j] - l) * cs.e[(size_t)h * cs.L + (i - j)] * cs.v[off + (size_t)j * cs.HS + d];
                        worst = fmax(worst, fabs(acc - out[off + (size_t)i * cs.HS + d]));
                    }
                }
            }
            CHECK(worst < 2e-5 && worst_lse < 2e-6, "filter forward [%s, window %d] vs double reference: max|dout| %.2g, "
                  "max rel|dlse| %.2g", kind_name_(kinds[kk]), W, worst, worst_lse);
            free(w); free(out); free(lse);
            case_free_(&cs);
        }
    }
}

typedef struct Ctx {
    Case *cs;
    float *out, *lse, *dy;
} Ctx;

static double loss_(void *p) {
    Ctx *c = p;
    Case *cs = c->cs;
    attention_forward(c->out, c->lse, cs->q, cs->k, cs->v, &cs->o, cs->B, cs->NH, cs->T, cs->HS);
    return gc_dot(c->dy, c->out, (size_t)cs->B * cs->NH * cs->T * cs->HS);
}

static void test_gradcheck(void) {
    GcRng r = {72};
    int kinds[3] = {ATTN_FILTER_STUDENT, ATTN_FILTER_GAUSS, ATTN_FILTER_DOT};
    for (int kk = 0; kk < 3; kk++) {
        for (int W = 0; W <= 20; W += 20) {
            Case cs;
            case_init_(&cs, &r, kinds[kk], 2, 2, 70, 8, W);  // T = 70 crosses a tile edge
            size_t n = (size_t)cs.B * cs.NH * cs.T * cs.HS, nl = (size_t)cs.NH * cs.L;
            Ctx c = {&cs, malloc(n * sizeof(float)), malloc((size_t)cs.B * cs.NH * cs.T * sizeof(float)),
                     gc_randn(&r, n, 1.0f)};
            float *dq = calloc(n, sizeof(float)), *dk = calloc(n, sizeof(float)), *dv = calloc(n, sizeof(float));
            float *da = calloc(nl, sizeof(float)), *dc = calloc(nl, sizeof(float)), *de = calloc(nl, sizeof(float));
            float *db = calloc((size_t)cs.NH, sizeof(float));
            cs.f.dbias = da; cs.f.dprec = dc; cs.f.ddecay = de; cs.f.dbeta = db;
            loss_(&c);
            attention_backward(dq, dk, dv, NULL, NULL, c.dy, c.out, c.lse, cs.q, cs.k, cs.v, &cs.o, cs.B, cs.NH, cs.T,
                               cs.HS);
            cs.f.dbias = cs.f.dprec = cs.f.ddecay = cs.f.dbeta = NULL;
            char name[96];
            const char *kn = kind_name_(kinds[kk]);
            uint64_t seed = 500 + 10 * (uint64_t)kk + (uint64_t)W;
            snprintf(name, sizeof name, "filter dq [%s, window %d]", kn, W);
            gradcheck_buffer(name, cs.q, dq, n, loss_, &c, GC_H, GC_RTOL, GC_ATOL, 4, 4, seed);
            snprintf(name, sizeof name, "filter dk [%s, window %d]", kn, W);
            gradcheck_buffer(name, cs.k, dk, n, loss_, &c, GC_H, GC_RTOL, GC_ATOL, 4, 4, seed + 1);
            snprintf(name, sizeof name, "filter dv [%s, window %d]", kn, W);
            gradcheck_buffer(name, cs.v, dv, n, loss_, &c, GC_H, GC_RTOL, GC_ATOL, 4, 4, seed + 2);
            snprintf(name, sizeof name, "filter dE table [%s, window %d]", kn, W);
            gradcheck_buffer(name, cs.e, de, nl, loss_, &c, 1e-3, GC_RTOL, GC_ATOL, 4, 6, seed + 3);
            snprintf(name, sizeof name, "filter dbeta [%s, window %d]", kn, W);
            gradcheck_buffer(name, cs.beta, db, (size_t)cs.NH, loss_, &c, 1e-3, GC_RTOL, GC_ATOL, 2, 2, seed + 4);
            if (kinds[kk] != ATTN_FILTER_DOT) {
                snprintf(name, sizeof name, "filter da table [%s, window %d]", kn, W);
                gradcheck_buffer(name, cs.a, da, nl, loss_, &c, GC_H, GC_RTOL, GC_ATOL, 4, 6, seed + 5);
                snprintf(name, sizeof name, "filter dc table [%s, window %d]", kn, W);
                gradcheck_buffer(name, cs.c, dc, nl, loss_, &c, 1e-3, GC_RTOL, GC_ATOL, 4, 6, seed + 6);
            } else {
                int zero = 1;
                for (size_t i = 0; i < nl; i++) zero &= da[i] == 0.0f && dc[i] == 0.0f;
                CHECK(zero, "filter [dot]: the a and c tables get no gradient");
            }
            // lags the sequence never reaches (d >= T, and d >= W with a window) get exactly 0
            int tail_zero = 1;
            for (int h = 0; h < cs.NH; h++)
                for (int d = W ? W : cs.T; d < cs.L; d++) tail_zero &= de[(size_t)h * cs.L + d] == 0.0f;
            CHECK(tail_zero, "filter [%s, window %d]: unreachable lags get zero gradient", kn, W);
            free(c.out); free(c.lse); free(c.dy);
            free(dq); free(dk); free(dv); free(da); free(dc); free(de); free(db);
            case_free_(&cs);
        }
    }
}

// attention_probs: rows of the softmax (before E) sum to 1, NaN where hidden, equal the reference
static void test_probs(void) {
    GcRng r = {73};
    Case cs;
    case_init_(&cs, &r, ATTN_FILTER_STUDENT, 1, 2, 90, 16, 0);
    size_t n = (size_t)cs.NH * cs.T * cs.HS;
    float *out = malloc(n * sizeof(float)), *lse = malloc((size_t)cs.NH * cs.T * sizeof(float));
    float *P = malloc((size_t)cs.T * cs.T * sizeof(float));
    attention_forward(out, lse, cs.q, cs.k, cs.v, &cs.o, 1, cs.NH, cs.T, cs.HS);
    int h = 1;
    size_t off = (size_t)h * cs.T * cs.HS;
    attention_probs(P, cs.q + off, cs.k + off, lse + (size_t)h * cs.T, &cs.o, 0, h, cs.NH, cs.T, cs.HS);
    double worst_sum = 0, worst = 0;
    int nan_ok = 1;
    for (int i = 0; i < cs.T; i++) {
        double sum = 0, mx = -INFINITY, z = 0;
        for (int j = 0; j <= i; j++) mx = fmax(mx, ref_logit_(&cs, cs.q + off + (size_t)i * cs.HS, cs.k + off + (size_t)j * cs.HS, h, i - j));
        for (int j = 0; j <= i; j++) z += exp(ref_logit_(&cs, cs.q + off + (size_t)i * cs.HS, cs.k + off + (size_t)j * cs.HS, h, i - j) - mx);
        for (int j = 0; j < cs.T; j++) {
            float p = P[(size_t)i * cs.T + j];
            if (j > i) { nan_ok &= isnan(p); continue; }
            sum += p;
            double ref = exp(ref_logit_(&cs, cs.q + off + (size_t)i * cs.HS, cs.k + off + (size_t)j * cs.HS, h, i - j) - mx) / z;
            worst = fmax(worst, fabs(ref - p));
        }
        worst_sum = fmax(worst_sum, fabs(sum - 1));
    }
    CHECK(nan_ok, "attention_probs: NaN above the diagonal");
    CHECK(worst_sum < 1e-5 && worst < 1e-6, "attention_probs [student]: rows sum to 1 (max err %.2g), match the "
          "reference (max err %.2g)", worst_sum, worst);
    free(out); free(lse); free(P);
    case_free_(&cs);
}

#ifdef _OPENMP
// forward and backward give the same bits with 1 and 2 threads
static void test_threads(void) {
    GcRng r = {74};
    Case cs;
    case_init_(&cs, &r, ATTN_FILTER_STUDENT, 2, 3, 150, 16, 0);
    size_t n = (size_t)cs.B * cs.NH * cs.T * cs.HS, nl = (size_t)cs.NH * cs.L, nt = (size_t)cs.B * cs.NH * cs.T;
    float *dy = gc_randn(&r, n, 1.0f);
    float *res[2][6];
    for (int run = 0; run < 2; run++) {
        omp_set_num_threads(run + 1);
        float *out = malloc(n * sizeof(float)), *lse = malloc(nt * sizeof(float));
        float *dq = calloc(n, sizeof(float)), *de = calloc(nl, sizeof(float)), *db = calloc((size_t)cs.NH, sizeof(float));
        float *dk = calloc(n, sizeof(float));
        attention_forward(out, lse, cs.q, cs.k, cs.v, &cs.o, cs.B, cs.NH, cs.T, cs.HS);
        cs.f.ddecay = de; cs.f.dbeta = db;
        attention_backward(dq, dk, NULL, NULL, NULL, dy, out, lse, cs.q, cs.k, cs.v, &cs.o, cs.B, cs.NH, cs.T, cs.HS);
        cs.f.ddecay = NULL; cs.f.dbeta = NULL;
        res[run][0] = out; res[run][1] = lse; res[run][2] = dq; res[run][3] = de; res[run][4] = db; res[run][5] = dk;
    }
    omp_set_num_threads(2);
    size_t sizes[6] = {n, nt, n, nl, (size_t)cs.NH, n};
    int same = 1;
    for (int w = 0; w < 6; w++) same &= memcmp(res[0][w], res[1][w], sizes[w] * sizeof(float)) == 0;
    CHECK(same, "filter forward/backward bit-identical with 1 and 2 threads");
    for (int run = 0; run < 2; run++)
        for (int w = 0; w < 6; w++) free(res[run][w]);
    free(dy);
    case_free_(&cs);
}
#endif

// every kernel set the CPU supports gives the same bits as the active one, for each filter kind, with and
// without a window, at a head size that is a multiple of 16 and one that is not
static void test_kernel_sets(void) {
    static const int kinds[] = {ATTN_FILTER_DOT, ATTN_FILTER_GAUSS, ATTN_FILTER_STUDENT};
    KernelSet active = kernel_set();
    for (int ki = 0; ki < 3; ki++) {
        for (int variant = 0; variant < 2; variant++) {
            GcRng r = {808 + (uint64_t)(ki * 2 + variant)};
            Case cs;
            int HS = variant ? 16 : 12, W = variant ? 40 : 0;
            case_init_(&cs, &r, kinds[ki], 1, 2, 130, HS, W);
            size_t n = (size_t)cs.B * cs.NH * cs.T * cs.HS, nl = (size_t)cs.NH * cs.L, nt = (size_t)cs.B * cs.NH * cs.T;
            size_t sizes[6] = {n, nt, n, nl, (size_t)cs.NH, n};
            float *dy = gc_randn(&r, n, 1.0f);
            float *res[2][6];
            for (int run = 0; run < 2; run++) {
                res[run][0] = malloc(n * sizeof(float));
                res[run][1] = malloc(nt * sizeof(float));
                res[run][2] = malloc(n * sizeof(float));
                res[run][3] = malloc(nl * sizeof(float));
                res[run][4] = malloc((size_t)cs.NH * sizeof(float));
                res[run][5] = malloc(n * sizeof(float));
            }
            for (int ks = -1; ks < KSET_COUNT; ks++) {
                // ks = -1: the active set, into res[0]; then each other supported set, into res[1]
                if (ks == (int)active || (ks >= 0 && !kernel_set_supported((KernelSet)ks))) continue;
                float **o = res[ks < 0 ? 0 : 1];
                if (ks >= 0) kernel_set_use((KernelSet)ks, NULL);
                memset(o[2], 0, n * sizeof(float)); memset(o[3], 0, nl * sizeof(float));
                memset(o[4], 0, (size_t)cs.NH * sizeof(float)); memset(o[5], 0, n * sizeof(float));
                attention_forward(o[0], o[1], cs.q, cs.k, cs.v, &cs.o, cs.B, cs.NH, cs.T, cs.HS);
                cs.f.ddecay = o[3]; cs.f.dbeta = o[4];
                attention_backward(o[2], o[5], NULL, NULL, NULL, dy, o[0], o[1], cs.q, cs.k, cs.v, &cs.o, cs.B, cs.NH,
                                   cs.T, cs.HS);
                cs.f.ddecay = NULL; cs.f.dbeta = NULL;
                if (ks < 0) continue;
                kernel_set_use(active, NULL);
                int same = 1;
                for (int w = 0; w < 6; w++) same &= memcmp(res[0][w], res[1][w], sizes[w] * sizeof(float)) == 0;
                CHECK(same, "filter %s HS=%d W=%d: kernel set %s bit-identical to %s (forward and backward)",
                      kind_name_(kinds[ki]), HS, W, kernel_set_name((KernelSet)ks), kernel_set_name(active));
            }
            for (int run = 0; run < 2; run++)
                for (int w = 0; w < 6; w++) free(res[run][w]);
            free(dy);
            case_free_(&cs);
        }
    }
}

int main(void) {
    test_kernel_sets();
    test_forward_reference();
    test_gradcheck();
    test_probs();
#ifdef _OPENMP
    test_threads();
#endif
    return test_summary();
}
