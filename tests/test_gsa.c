/*
 * The GSA mixer (mixers/gsa.c):
 *   - the layer's forward == a naive sequential reference in double of FLA's fla/ops/gsa/naive.py (both
 *     slot states updated token by token, the softmax between them), for each feature map, with and without
 *     the norm, with and without the short conv (conv), to 1e-5 of the output scale;
 *   - gradient checks of dx and every tensor;
 *   - the chunk size changes nothing; recurrent decoding (step) reproduces the forward token by token;
 *   - the state is H M (Dk + Dv) floats (plus the conv caches); long sequences with fast-forgetting slots stay finite;
 *   - bad options stop with the key path.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixer_layer.h"

// finite-difference step and the parameters' move off their init. The output norm's eps is 0.01 in the cases
// with the norm, as in test_delta_mixers.c: with 1e-6 a near-zero output row makes the loss too curved for
// float32 central differences
#define GC_H 3e-3
#define GC_STD 0.2f
#define GC_C 8

static const char *const CASES_[][2] = {
    {"gsa", "{\"kind\": \"gsa\", \"heads\": 2, \"num_slots\": 5, \"norm_eps\": 0.01}"},
    {"gsa relu no norm",
     "{\"kind\": \"gsa\", \"heads\": 2, \"num_slots\": 3, \"feature_map\": \"relu\", \"norm\": false}"},
    {"gsa identity head_dim 3 normalizer 2",
     "{\"kind\": \"gsa\", \"heads\": 2, \"head_dim\": 3, \"num_slots\": 4, \"feature_map\": \"identity\", "
     "\"gate_logit_normalizer\": 2, \"norm_eps\": 0.01}"},
    // FLA's use_short_conv: q, k, v = silu(conv_K(projection)) before the feature map (v: silu twice)
    {"gsa conv 4", "{\"kind\": \"gsa\", \"heads\": 2, \"num_slots\": 5, \"norm_eps\": 0.01, \"conv\": 4}"},
    {"gsa identity no norm head_dim 3 conv 2",
     "{\"kind\": \"gsa\", \"heads\": 2, \"head_dim\": 3, \"num_slots\": 4, \"feature_map\": \"identity\", "
     "\"norm\": false, \"gate_logit_normalizer\": 2, \"conv\": 2}"},
};
#define N_CASES_ ((int)(sizeof CASES_ / sizeof CASES_[0]))

// what the naive reference needs to know of each case (the same order as CASES_): heads, head size, slots,
// feature map (0 swish, 1 relu, 2 identity), norm, normalizer, eps, conv taps (0 = none)
typedef struct NaiveOpts {
    int H, D, M, fmap, norm, K;
    double normalizer, eps;
} NaiveOpts;
static const NaiveOpts NAIVE_[N_CASES_] = {
    {2, 4, 5, 0, 1, 0, 8.0, 0.01},
    {2, 4, 3, 1, 0, 0, 8.0, 1e-6},
    {2, 3, 4, 2, 1, 0, 2.0, 0.01},
    {2, 4, 5, 0, 1, 4, 8.0, 0.01},
    {2, 3, 4, 2, 0, 2, 2.0, 1e-6},
};

static double phi_(int fmap, double x) { return fmap == 0 ? x / (1.0 + exp(-x)) : fmap == 1 ? fmax(x, 0.0) : x; }
static double silu_(double x) { return x / (1.0 + exp(-x)); }

// row (OC,) = W (OC,IC) x (IC,) in double
static void proj_(double *row, const float *W, const float *x, int OC, int IC) {
    for (int i = 0; i < OC; i++) {
        double s = 0.0;
        for (int c = 0; c < IC; c++) s += (double)W[(size_t)i * IC + c] * x[c];
        row[i] = s;
    }
}

// row (W,) at token t of sequence b: the projection of x (B,T,C) by W (W,C), or with K taps silu of the causal
// depthwise conv wc (W,K) over the projections of tokens t-K+1 .. t (zeros before 0)
static void stream_(double *row, const float *W, const float *wc, int K, const float *x, int b, int t, int T, int C,
                    int OC) {
    const float *xb = x + (size_t)b * T * C;
    if (!K) {
        proj_(row, W, xb + (size_t)t * C, OC, C);
        return;
    }
    double *pj = malloc((size_t)OC * sizeof(double));
    for (int i = 0; i < OC; i++) row[i] = 0.0;
    for (int j = 0; j < K; j++) {
        int s = t - (K - 1) + j;
        if (s < 0) continue;
        proj_(pj, W, xb + (size_t)s * C, OC, C);
        for (int i = 0; i < OC; i++) row[i] += (double)wc[(size_t)i * K + j] * pj[i];
    }
    for (int i = 0; i < OC; i++) row[i] = silu_(row[i]);
    free(pj);
}

// y (B,T,C) of the layer L on x by the formulas of FLA's naive GSA (docs/mixers.md, "gsa"), one token at a time
// in double
static void naive_(const Layer *L, const NaiveOpts *no, const float *x, double *y) {
    int B = L->B, T = L->T, C = L->C, H = no->H, D = no->D, M = no->M, HD = H * D, HM = H * M;
    const float *Wq = layer_tensor(L, "q_proj"), *Wk = layer_tensor(L, "k_proj"), *Wv = layer_tensor(L, "v_proj");
    const float *Wf = layer_tensor(L, "f_proj"), *Wo = layer_tensor(L, "o_proj"), *gw = layer_tensor(L, "g_norm");
    const float *cq = layer_tensor(L, "q_conv1d"), *ck = layer_tensor(L, "k_conv1d"), *cv = layer_tensor(L, "v_conv1d");
    double *Hk = malloc((size_t)H * D * M * sizeof(double)), *Hv = malloc((size_t)H * M * D * sizeof(double));
    double *q = malloc((size_t)(4 * HD + 3 * HM) * sizeof(double));
    double *k = q + HD, *v = k + HD, *o = v + HD, *f = o + HD, *s = f + HM, *p = s + HM;
    for (int b = 0; b < B; b++) {
        memset(Hk, 0, (size_t)H * D * M * sizeof(double));
        memset(Hv, 0, (size_t)H * M * D * sizeof(double));
        for (int t = 0; t < T; t++) {
            const float *xt = x + ((size_t)b * T + t) * C;
            stream_(q, Wq, cq, no->K, x, b, t, T, C, HD);
            stream_(k, Wk, ck, no->K, x, b, t, T, C, HD);
            stream_(v, Wv, cv, no->K, x, b, t, T, C, HD);
            proj_(f, Wf, xt, HM, C);
            for (int i = 0; i < HD; i++) {
                q[i] = phi_(no->fmap, q[i]);
                k[i] = phi_(no->fmap, k[i]);
                v[i] = silu_(v[i]);
            }
            for (int i = 0; i < HM; i++) {
                f[i] = -log1p(exp(-f[i])) / no->normalizer;  // logsigmoid
                s[i] = 1.0 - exp(f[i]);
            }
            for (int h = 0; h < H; h++) {
                double *hk = Hk + (size_t)h * D * M, *hv = Hv + (size_t)h * M * D;
                const double *qh = q + h * D, *kh = k + h * D, *vh = v + h * D, *fh = f + h * M, *sh = s + h * M;
                double *ph = p + h * M, mx = -INFINITY, z = 0.0;
                // pass 1: Hk = Hk diag(exp f) + k s^T, ok = Hk^T q, p = softmax(ok)
                for (int i = 0; i < D; i++)
                    for (int j = 0; j < M; j++) hk[i * M + j] = hk[i * M + j] * exp(fh[j]) + kh[i] * sh[j];
                for (int j = 0; j < M; j++) {
                    double a = 0.0;
                    for (int i = 0; i < D; i++) a += hk[i * M + j] * qh[i];
                    ph[j] = a;
                    mx = fmax(mx, a);
                }
                for (int j = 0; j < M; j++) z += (ph[j] = exp(ph[j] - mx));
                for (int j = 0; j < M; j++) ph[j] /= z;
                // pass 2: Hv = diag(exp f) Hv + s v^T, o = Hv^T p
                for (int j = 0; j < M; j++)
                    for (int i = 0; i < D; i++) hv[j * D + i] = hv[j * D + i] * exp(fh[j]) + sh[j] * vh[i];
                for (int i = 0; i < D; i++) {
                    double a = 0.0;
                    for (int j = 0; j < M; j++) a += hv[j * D + i] * ph[j];
                    o[h * D + i] = a;
                }
            }
            // y = o_proj(RMSNorm(silu(o)))
            double ms = 0.0;
            for (int i = 0; i < HD; i++) {
                o[i] = silu_(o[i]);
                ms += o[i] * o[i] / HD;
            }
            double rstd = no->norm ? 1.0 / sqrt(ms + no->eps) : 1.0;
            for (int i = 0; i < HD; i++) o[i] *= no->norm ? rstd * gw[i] : 1.0;
            double *yt = y + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++) {
                double a = 0.0;
                for (int i = 0; i < HD; i++) a += (double)Wo[(size_t)c * HD + i] * o[i];
                yt[c] = a;
            }
        }
    }
    free(Hk); free(Hv); free(q);
}

// every parameter off its init; q and k moved further, so the slot scores ok spread and the softmax between the
// passes carries q's and k's gradients well above float32's finite-difference noise; the conv taps (when there
// are) further still, to a few tenths to one, so that silu(conv(.)) passes the projections on at their scale
static void perturb_(Layer *L, GcRng *r, float std) {
    layer_perturb(L, r, std);
    const char *names[5] = {"q_proj", "k_proj", "q_conv1d", "k_conv1d", "v_conv1d"};
    const float move[5] = {0.3f, 0.3f, 0.6f, 0.6f, 0.6f};
    for (int c = 0; c < 5; c++) {
        int k = param_index_(L, names[c]);
        if (k < 0) continue;
        const ParamTensor *t = &L->pt.t[k];
        for (size_t i = 0; i < t->numel; i++) L->params[t->offset + i] += move[c] * gc_normal(r);
    }
}

static void test_naive(void) {
    for (int i = 0; i < N_CASES_; i++) {
        Layer L;
        if (layer_build_(&L, CASES_[i][1], GC_C, 3)) continue;
        int B = 2, T = 19;
        layer_shape_(&L, B, T);
        GcRng r = {(uint64_t)(70 + i)};
        perturb_(&L, &r, 0.3f);
        size_t n = (size_t)B * T * GC_C;
        float *x = gc_randn(&r, n, 1.0f), *y = malloc(n * sizeof(float));
        double *yr = malloc(n * sizeof(double)), e = 0.0, sc = 0.0;
        L.spec.ops->forward(&L.m, y, x, B, T);
        naive_(&L, &NAIVE_[i], x, yr);
        for (size_t j = 0; j < n; j++) {
            e = fmax(e, fabs(y[j] - yr[j]));
            sc = fmax(sc, fabs(yr[j]));
        }
        CHECK(sc > 0.1 && e <= 1e-5 * sc, "%s: forward == naive sequential reference (max err %.2g of %.2g)",
              CASES_[i][0], e, sc);
        free(x); free(y); free(yr);
        layer_free_(&L);
    }
}

static void test_gradients(void) {
    for (int i = 0; i < N_CASES_; i++) {
        Layer L;
        if (layer_build_(&L, CASES_[i][1], GC_C, 3)) continue;
        layer_shape_(&L, 2, 11);
        GcRng r = {(uint64_t)(40 + i)};
        perturb_(&L, &r, GC_STD);
        layer_gradcheck_carried(&L, CASES_[i][0], &r, GC_H, 1e-3);
        layer_free_(&L);
    }
}

static void perturb_chunks_(Layer *L, GcRng *r) { perturb_(L, r, 0.3f); }
static void perturb_step_(Layer *L, GcRng *r) { perturb_(L, r, 0.2f); }

static void test_chunk_invariance(void) { layer_cases_chunk_invariance(CASES_, N_CASES_, perturb_chunks_); }

static void test_step(void) { layer_cases_decode(CASES_, N_CASES_, perturb_step_); }

// the defaults (FLA's GSAConfig): 4 heads of C/4, 64 slots, the norm, no conv; state H M (Dk + Dv); with conv 4 the
// q, k, v caches add 3 H D (K - 1)
static void test_defaults(void) {
    Layer L;
    if (layer_build_(&L, "{\"kind\": \"gsa\"}", 16, 7)) return;
    CHECK(L.pt.t[param_index_(&L, "f_proj")].shape[0] == 4 * 64, "gsa: f_proj (H M, C) = (256, 16)");
    CHECK(L.pt.t[param_index_(&L, "q_proj")].shape[0] == 16, "gsa: q_proj (H D, C) = (16, 16)");
    int kn = param_index_(&L, "g_norm");
    CHECK(kn >= 0 && L.pt.t[kn].numel == 16 && !L.pt.t[kn].decay && L.params[L.pt.t[kn].offset] == 1.0f,
          "gsa: g_norm over all 16 value channels, ones, no weight decay");
    size_t ss = L.spec.ops->state_size(&L.spec, 0);
    CHECK(ss == (size_t)4 * 64 * (4 + 4), "gsa: state size H M (Dk + Dv) = %zu", ss);
    CHECK(param_index_(&L, "q_conv1d") < 0, "gsa: no conv tensors by default");
    layer_free_(&L);
    if (layer_build_(&L, "{\"kind\": \"gsa\", \"conv\": 4}", 16, 7)) return;
    ss = L.spec.ops->state_size(&L.spec, 0);
    CHECK(ss == (size_t)4 * 64 * (4 + 4) + 3 * 16 * 3, "gsa conv 4: state size H M (Dk + Dv) + 3 H D (K - 1) = %zu", ss);
    int kc = param_index_(&L, "v_conv1d");
    CHECK(kc >= 0 && L.pt.t[kc].shape[0] == 16 && L.pt.t[kc].shape[1] == 4, "gsa conv 4: v_conv1d (H D, K) = (16, 4)");
    layer_free_(&L);
}

// a long sequence with large projections (gates near 0 and near 1, peaked softmaxes): everything finite
static void test_long(void) {
    Layer L;
    const char *json = "{\"kind\": \"gsa\", \"heads\": 2, \"num_slots\": 8, \"init_std\": 1, "
                       "\"gate_logit_normalizer\": 0.1}";
    if (layer_build_(&L, json, 8, 21))
        return;
    layer_shape_(&L, 1, 4096);
    GcRng r = {22};
    CHECK(layer_grads_finite(&L, &r), "gsa at T = 4096, strong gates: outputs and gradients finite");
    layer_free_(&L);
}

static void test_bad_options(void) {
    layer_check_error("{\"kind\": \"gsa\", \"heads\": 3}", 16, "model.mixer.heads");
    layer_check_error("{\"kind\": \"gsa\", \"num_slots\": 0}", 16, "model.mixer.num_slots");
    layer_check_error("{\"kind\": \"gsa\", \"feature_map\": \"t2r\"}", 16, "model.mixer.feature_map");
    layer_check_error("{\"kind\": \"gsa\", \"gate_logit_normalizer\": 0}", 16, "model.mixer.gate_logit_normalizer");
    layer_check_error("{\"kind\": \"gsa\", \"chunk\": 0}", 16, "model.mixer.chunk");
    layer_check_error("{\"kind\": \"gsa\", \"norm\": 1}", 16, "model.mixer.norm");
    layer_check_error("{\"kind\": \"gsa\", \"use_short_conv\": true}", 16, "use_short_conv");
    layer_check_error("{\"kind\": \"gsa\", \"conv\": -1}", 16, "model.mixer.conv");
}

int main(void) {
    test_naive();
    test_gradients();
    test_chunk_invariance();
    test_step();
    test_defaults();
    test_long();
    test_bad_options();
    return test_summary();
}
