/*
 * The BLA mixer (mixers/bla.c, nn/bla.c; the BLA paper):
 *   - the layer's forward == a naive reference in double written from Algorithm 1 (the interpolation
 *     matrices A, B of eq. 12, interpolate = cos(t modes) A^T + sin(t modes) B^T, the slot states updated
 *     token by token, the mask on the dilated time grid, and the decay of section 3.3), with and without
 *     decay, conv, key expansion, integer and fractional periods, to 1e-5 of the output scale;
 *   - the convolution form (eq. 5-6 and 13, Algorithm 2) gives the same outputs when P = 2M - 1 (the
 *     permutation of eq. 15-16), and different ones when P > 2M - 1 (seqtrain follows Algorithms 1 and 3);
 *   - the paper's exactness claims against the attention mixer with the same weights: P = L = 2M - 1 without
 *     decay is causal attention (Fig. 2b), outputs and attention maps; P = 2M - 1 with decay is sliding-window
 *     attention of 2M - 1 positions at L > 2M - 1 (section 3.3);
 *   - gradient checks of dx and every tensor; the chunk size changes nothing; decoding == forward;
 *   - the state is H (2M - 1) (Dk + Dv) floats (plus the conv cache); long sequences with
 *     growing slots (P > 2M - 1, decay) stay finite; bad options stop with the key path and allowed range.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixer_layer.h"

#define GC_H 3e-3
#define GC_C 8
#define PI_ 3.14159265358979323846

static const char *const CASES_[][2] = {
    {"bla M 3 resolution 2", "{\"kind\": \"bla\", \"heads\": 2, \"modes\": 3}"},
    {"bla decay period 7.5 conv 3",
     "{\"kind\": \"bla\", \"heads\": 2, \"modes\": 3, \"period\": 7.5, \"decay\": true, \"conv\": 3}"},
    {"bla decay expand_k 0.5 period 9",
     "{\"kind\": \"bla\", \"heads\": 2, \"modes\": 4, \"period\": 9, \"decay\": true, \"expand_k\": 0.5}"},
    {"bla M 1 expand_v 1.5", "{\"kind\": \"bla\", \"heads\": 1, \"modes\": 1, \"expand_v\": 1.5}"},
};
#define N_CASES_ ((int)(sizeof CASES_ / sizeof CASES_[0]))

// what the naive reference needs of each case (the order of CASES_)
typedef struct NaiveOpts {
    int H, M, decay, K, Dk, Dv;
    double P;
} NaiveOpts;
static const NaiveOpts NAIVE_[N_CASES_] = {
    {2, 3, 0, 0, 4, 4, 10.0},
    {2, 3, 1, 3, 4, 4, 7.5},
    {2, 4, 1, 0, 2, 4, 9.0},
    {1, 1, 0, 0, 8, 12, 2.0},
};

// the q, k, v rows (T, W) of batch row b in double: projection [conv + silu]
static void naive_qkv_(const Layer *L, const NaiveOpts *no, const float *x, int b, int T, double *qkv) {
    int C = L->C, W = no->H * (2 * no->Dk + no->Dv);
    const float *w = layer_tensor(L, "wqkv"), *cw = layer_tensor(L, "conv1d");
    double *pre = malloc((size_t)T * W * sizeof(double));
    for (int t = 0; t < T; t++)
        for (int i = 0; i < W; i++) {
            double s = 0.0;
            for (int c = 0; c < C; c++) s += (double)w[(size_t)i * C + c] * x[((size_t)b * T + t) * C + c];
            pre[(size_t)t * W + i] = s;
        }
    for (int t = 0; t < T; t++)
        for (int i = 0; i < W; i++) {
            double u = pre[(size_t)t * W + i];
            if (no->K) {  // out_t = sum_j w[j] in_{t - (K-1) + j}, then silu
                u = 0.0;
                for (int j = 0; j < no->K; j++) {
                    int tt = t - (no->K - 1) + j;
                    if (tt >= 0) u += (double)cw[(size_t)i * no->K + j] * pre[(size_t)tt * W + i];
                }
                u = u / (1.0 + exp(-u));
            }
            qkv[(size_t)t * W + i] = u;
        }
    free(pre);
}

// Algorithm 1 for one head: q, k (T,Dk), v (T,Dv) rows with strides; o (T,Dv)
static void naive_alg1_(const NaiveOpts *no, int T, const double *q, const double *k, const double *v, int stride,
                        double *o) {
    int M = no->M, S = 2 * M - 1, Dk = no->Dk, Dv = no->Dv;
    double *A = malloc((size_t)S * M * sizeof(double)), *Bm = malloc((size_t)S * M * sizeof(double));
    for (int s = 0; s < S; s++)  // eq. 12 with omega = 2 pi / (2M - 1)
        for (int m = 0; m < M; m++) {
            A[s * M + m] = m == 0 ? 1.0 / S : 2.0 * cos(m * 2 * PI_ / S * s) / S;
            Bm[s * M + m] = m == 0 ? 0.0 : 2.0 * sin(m * 2 * PI_ / S * s) / S;
        }
    double *Ks = calloc((size_t)S * Dk, sizeof(double)), *Vs = calloc((size_t)S * Dv, sizeof(double));
    double *ip = malloc(S * sizeof(double)), *sc = malloc(S * sizeof(double));
    for (int t = 0; t < T; t++) {
        for (int s = 0; s < S; s++) {
            double a = 0.0;
            for (int m = 0; m < M; m++) {
                double mode = 2 * PI_ / no->P * m;
                a += cos(t * mode) * A[s * M + m] + sin(t * mode) * Bm[s * M + m];
            }
            ip[s] = a;
        }
        for (int s = 0; s < S; s++) {
            double keep = no->decay ? 1.0 - ip[s] : 1.0;
            for (int c = 0; c < Dk; c++) Ks[s * Dk + c] = keep * Ks[s * Dk + c] + ip[s] * k[(size_t)t * stride + c];
            for (int c = 0; c < Dv; c++) Vs[s * Dv + c] = keep * Vs[s * Dv + c] + ip[s] * v[(size_t)t * stride + c];
        }
        double mx = -INFINITY, sum = 0.0;
        for (int s = 0; s < S; s++) {
            double dil = nearbyint((double)s / S * no->P), dot = 0.0;
            for (int c = 0; c < Dk; c++) dot += q[(size_t)t * stride + c] * Ks[s * Dk + c];
            sc[s] = t >= dil ? dot / sqrt((double)Dk) : -INFINITY;
            mx = fmax(mx, sc[s]);
        }
        for (int s = 0; s < S; s++) sum += (sc[s] = exp(sc[s] - mx));
        for (int c = 0; c < Dv; c++) {
            double acc = 0.0;
            for (int s = 0; s < S; s++) acc += sc[s] / sum * Vs[s * Dv + c];
            o[(size_t)t * Dv + c] = acc;
        }
    }
    free(A); free(Bm); free(Ks); free(Vs); free(ip); free(sc);
}

// Algorithm 2 (no decay): the cos/sin states of eq. 5, rotated each step, read through A and B into the
// slots by lag (eq. 13), the mask on the lag's dilated time
static void naive_alg2_(const NaiveOpts *no, int T, const double *q, const double *k, const double *v, int stride,
                        double *o) {
    int M = no->M, S = 2 * M - 1, Dk = no->Dk, Dv = no->Dv, D = Dk > Dv ? Dk : Dv;
    double *Kc = calloc((size_t)M * D, sizeof(double)), *Ks = calloc((size_t)M * D, sizeof(double));
    double *Vc = calloc((size_t)M * D, sizeof(double)), *Vsn = calloc((size_t)M * D, sizeof(double));
    double *sc = malloc(S * sizeof(double)), *kt = malloc(D * sizeof(double)), *vt = malloc((size_t)S * Dv * sizeof(double));
    for (int t = 0; t < T; t++) {
        for (int m = 0; m < M; m++) {
            double cm = cos(2 * PI_ / no->P * m), sm = sin(2 * PI_ / no->P * m);
            for (int c = 0; c < Dk; c++) {
                double a = Kc[m * D + c], b = Ks[m * D + c];
                Kc[m * D + c] = cm * a - sm * b + k[(size_t)t * stride + c];
                Ks[m * D + c] = sm * a + cm * b;
            }
            for (int c = 0; c < Dv; c++) {
                double a = Vc[m * D + c], b = Vsn[m * D + c];
                Vc[m * D + c] = cm * a - sm * b + v[(size_t)t * stride + c];
                Vsn[m * D + c] = sm * a + cm * b;
            }
        }
        double mx = -INFINITY, sum = 0.0;
        for (int s = 0; s < S; s++) {
            double dot = 0.0;
            for (int c = 0; c < Dk; c++) kt[c] = 0.0;
            for (int c = 0; c < Dv; c++) vt[s * Dv + c] = 0.0;
            for (int m = 0; m < M; m++) {
                double A = m == 0 ? 1.0 / S : 2.0 * cos(m * 2 * PI_ / S * s) / S;
                double B = m == 0 ? 0.0 : 2.0 * sin(m * 2 * PI_ / S * s) / S;
                for (int c = 0; c < Dk; c++) kt[c] += A * Kc[m * D + c] + B * Ks[m * D + c];
                for (int c = 0; c < Dv; c++) vt[s * Dv + c] += A * Vc[m * D + c] + B * Vsn[m * D + c];
            }
            for (int c = 0; c < Dk; c++) dot += q[(size_t)t * stride + c] * kt[c];
            sc[s] = t >= nearbyint((double)s / S * no->P) ? dot / sqrt((double)Dk) : -INFINITY;
            mx = fmax(mx, sc[s]);
        }
        for (int s = 0; s < S; s++) sum += (sc[s] = exp(sc[s] - mx));
        for (int c = 0; c < Dv; c++) {
            double acc = 0.0;
            for (int s = 0; s < S; s++) acc += sc[s] / sum * vt[s * Dv + c];
            o[(size_t)t * Dv + c] = acc;
        }
    }
    free(Kc); free(Ks); free(Vc); free(Vsn); free(sc); free(kt); free(vt);
}

// the layer in double: y (B,T,C) by Algorithm 1 (alg 1) or 2 (alg 2) per head
static void naive_(const Layer *L, const NaiveOpts *no, const float *x, int B, int T, int alg, double *y) {
    int C = L->C, H = no->H, Dk = no->Dk, Dv = no->Dv, W = H * (2 * Dk + Dv);
    const float *wo = layer_tensor(L, "wo");
    double *qkv = malloc((size_t)T * W * sizeof(double)), *o = malloc((size_t)T * H * Dv * sizeof(double));
    double *oh = malloc((size_t)T * Dv * sizeof(double));
    for (int b = 0; b < B; b++) {
        naive_qkv_(L, no, x, b, T, qkv);
        for (int h = 0; h < H; h++) {
            const double *q = qkv + h * Dk, *k = qkv + H * Dk + h * Dk, *v = qkv + 2 * H * Dk + h * Dv;
            (alg == 1 ? naive_alg1_ : naive_alg2_)(no, T, q, k, v, W, oh);
            for (int t = 0; t < T; t++)
                for (int c = 0; c < Dv; c++) o[((size_t)t * H + h) * Dv + c] = oh[(size_t)t * Dv + c];
        }
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                double s = 0.0;
                for (int i = 0; i < H * Dv; i++) s += (double)wo[(size_t)c * H * Dv + i] * o[(size_t)t * H * Dv + i];
                y[((size_t)b * T + t) * C + c] = s;
            }
    }
    free(qkv); free(o); free(oh);
}

// every parameter off its init, the projections further, so that the slot softmax is far from uniform
static void perturb_(Layer *L, GcRng *r, float std) {
    layer_perturb(L, r, std);
    const ParamTensor *t = &L->pt.t[param_index_(L, "wqkv")];
    for (size_t i = 0; i < t->numel; i++) L->params[t->offset + i] += 0.3f * gc_normal(r);
}

static double max_abs_(const double *a, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(a[i]));
    return m;
}

static void test_naive(void) {
    for (int i = 0; i < N_CASES_; i++) {
        Layer L;
        if (layer_build_(&L, CASES_[i][1], GC_C, 3)) continue;
        int B = 2, T = 23;
        layer_shape_(&L, B, T);
        GcRng r = {(uint64_t)(70 + i)};
        perturb_(&L, &r, 0.3f);
        size_t n = (size_t)B * T * GC_C;
        float *x = gc_randn(&r, n, 1.0f), *y = malloc(n * sizeof(float));
        double *yr = malloc(n * sizeof(double)), e = 0.0, sc;
        L.spec.ops->forward(&L.m, y, x, B, T);
        naive_(&L, &NAIVE_[i], x, B, T, 1, yr);
        for (size_t j = 0; j < n; j++) e = fmax(e, fabs(y[j] - yr[j]));
        sc = max_abs_(yr, n);
        CHECK(sc > 0.1 && e <= 1e-5 * sc, "%s: forward == Algorithm 1 in double (max err %.2g of %.2g)", CASES_[i][0],
              e, sc);
        free(x); free(y); free(yr);
        layer_free_(&L);
    }
}

// Algorithm 2 (the convolution form) against Algorithm 1: the same when P = 2M - 1, not when P > 2M - 1
static void test_algorithms(void) {
    const char *json[2] = {"{\"kind\": \"bla\", \"heads\": 2, \"modes\": 3, \"resolution\": 1}",
                           "{\"kind\": \"bla\", \"heads\": 2, \"modes\": 3, \"resolution\": 2}"};
    for (int i = 0; i < 2; i++) {
        Layer L;
        if (layer_build_(&L, json[i], GC_C, 3)) continue;
        int B = 1, T = 17;
        NaiveOpts no = {2, 3, 0, 0, 4, 4, i ? 10.0 : 5.0};
        GcRng r = {(uint64_t)(90 + i)};
        perturb_(&L, &r, 0.3f);
        size_t n = (size_t)B * T * GC_C;
        float *x = gc_randn(&r, n, 1.0f);
        double *y1 = malloc(n * sizeof(double)), *y2 = malloc(n * sizeof(double)), e = 0.0;
        naive_(&L, &no, x, B, T, 1, y1);
        naive_(&L, &no, x, B, T, 2, y2);
        for (size_t j = 0; j < n; j++) e = fmax(e, fabs(y1[j] - y2[j]));
        double sc = max_abs_(y1, n);
        if (i == 0)
            CHECK(e <= 1e-10 * sc, "P = 2M - 1: Algorithm 2 (convolution form) == Algorithm 1 (max diff %.2g of %.2g)", e,
                  sc);
        else
            CHECK(e > 1e-3 * sc, "P = 2(2M - 1): Algorithm 2 differs from Algorithm 1 (max diff %.2g of %.2g): the "
                  "slots sit on a grid anchored at t = 0, not at the present", e, sc);
        free(x); free(y1); free(y2);
        layer_free_(&L);
    }
}

// an attention layer (pos none, no bias) with the bla layer's weights: the same tensors, wqkv then wo
static int attention_twin_(Layer *A, const Layer *L, int H, int window) {
    char json[160];
    snprintf(json, sizeof json, "{\"kind\": \"attention\", \"pos\": \"none\", \"heads\": %d, \"window\": %d}", H, window);
    if (layer_build_(A, json, L->C, 1)) return -1;
    const char *names[2] = {"wqkv", "wo"};
    for (int i = 0; i < 2; i++) {
        const ParamTensor *ta = &A->pt.t[param_index_(A, names[i])], *tb = &L->pt.t[param_index_(L, names[i])];
        CHECK(ta->numel == tb->numel, "attention %s has the shape of bla's", names[i]);
        memcpy(A->params + ta->offset, L->params + tb->offset, ta->numel * sizeof(float));
    }
    return 0;
}

// the paper's exactness claims: (a) P = L = 2M - 1, no decay: causal attention (Fig. 2b), outputs and maps;
// (b) P = 2M - 1, decay, L = 3 (2M - 1) + 2: sliding-window attention of 2M - 1 positions (section 3.3)
static void test_exactness(void) {
    for (int c = 0; c < 2; c++) {
        int M = 4, S = 2 * M - 1, H = 2, B = 2, T = c == 0 ? S : 3 * S + 2;
        char json[160];
        snprintf(json, sizeof json, "{\"kind\": \"bla\", \"heads\": %d, \"modes\": %d, \"resolution\": 1%s}", H, M,
                 c ? ", \"decay\": true" : "");
        Layer L, A;
        if (layer_build_(&L, json, GC_C, 3)) continue;
        GcRng r = {(uint64_t)(50 + c)};
        perturb_(&L, &r, 0.3f);
        if (attention_twin_(&A, &L, H, c ? S : 0)) { layer_free_(&L); continue; }
        layer_shape_(&L, B, T);
        layer_shape_(&A, B, T);
        size_t n = (size_t)B * T * GC_C;
        float *x = gc_randn(&r, n, 1.0f), *yb = malloc(n * sizeof(float)), *ya = malloc(n * sizeof(float));
        L.spec.ops->forward(&L.m, yb, x, B, T);
        A.spec.ops->forward(&A.m, ya, x, B, T);
        double e = 0.0, sc = 0.0;
        for (size_t j = 0; j < n; j++) {
            e = fmax(e, fabs((double)yb[j] - ya[j]));
            sc = fmax(sc, fabs(ya[j]));
        }
        if (c == 0)
            CHECK(sc > 0.1 && e <= 1e-5 * sc, "P = L = 2M - 1 = %d, no decay: bla == causal attention with the same "
                  "weights (max|d| %.2g of %.2g)", S, e, sc);
        else
            CHECK(sc > 0.1 && e <= 1e-5 * sc, "P = 2M - 1 = %d, decay, L = %d: bla == sliding-window attention of %d "
                  "positions (max|d| %.2g of %.2g)", S, T, S, e, sc);
        // the attention maps: the same weights on every visible pair, hidden above the diagonal
        float *Pb = malloc((size_t)T * T * sizeof(float)), *Pa = malloc((size_t)T * T * sizeof(float));
        double em = 0.0;
        int hidden_ok = 1;
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) {
                L.spec.ops->attn_map(&L.m, b, h, Pb);
                A.spec.ops->attn_map(&A.m, b, h, Pa);
                for (size_t j = 0; j < (size_t)T * T; j++) {
                    int above = j % T > j / T;
                    if (above) hidden_ok &= isnan(Pb[j]);
                    else em = fmax(em, fabs((double)Pb[j] - (isnan(Pa[j]) ? 0.0 : Pa[j])));
                }
            }
        CHECK(hidden_ok && em <= 1e-5, "%s: bla's attention map == attention's (max|d| %.2g), NaN above the diagonal",
              c ? "window" : "causal", em);
        free(Pb); free(Pa); free(x); free(yb); free(ya);
        layer_free_(&A);
        layer_free_(&L);
    }
}

static void test_gradients(void) {
    for (int i = 0; i < N_CASES_; i++) {
        Layer L;
        if (layer_build_(&L, CASES_[i][1], GC_C, 3)) continue;
        layer_shape_(&L, 2, 13);
        GcRng r = {(uint64_t)(40 + i)};
        perturb_(&L, &r, 0.2f);
        layer_gradcheck_carried(&L, CASES_[i][0], &r, GC_H, 1e-3);
        layer_free_(&L);
    }
}

static void perturb_chunks_(Layer *L, GcRng *r) { perturb_(L, r, 0.3f); }

static void test_chunk_invariance(void) { layer_cases_chunk_invariance(CASES_, N_CASES_, perturb_chunks_); }

static void test_step(void) { layer_cases_decode(CASES_, N_CASES_, perturb_chunks_); }

// defaults: 1 head of C, M 8 (15 slots), resolution 2 (P = 30); state H S (Dk + Dv) (+ W (K - 1) with conv)
static void test_defaults_and_state(void) {
    Layer L;
    if (layer_build_(&L, "{\"kind\": \"bla\"}", 16, 7)) return;
    CHECK(L.pt.n == 2 && L.pt.t[param_index_(&L, "wqkv")].shape[0] == 48,
          "bla defaults: wqkv (3 C, C) and wo only (no conv)");
    size_t ss = L.spec.ops->state_size(&L.spec, 0);
    CHECK(ss == (size_t)1 * 15 * (16 + 16), "bla defaults: state H (2M - 1) (Dk + Dv) = %zu", ss);
    layer_free_(&L);
    if (layer_build_(&L, "{\"kind\": \"bla\", \"heads\": 2, \"modes\": 5, \"conv\": 4, \"expand_k\": 2}", 16, 7)) return;
    ss = L.spec.ops->state_size(&L.spec, 0);
    CHECK(ss == (size_t)2 * 9 * (16 + 8) + (2 * 32 + 16) * 3,
          "bla H 2, M 5, Dk 16, Dv 8, conv 4: state 2 * 9 * (16 + 8) + (2 HDk + HDv)(K - 1) = %zu", ss);
    layer_free_(&L);
}

// a long sequence at P > 2M - 1 with decay (slots that may grow by up to 22% a step) and large projections
static void test_long(void) {
    const char *json[2] = {"{\"kind\": \"bla\", \"heads\": 2, \"modes\": 6, \"resolution\": 1.3, \"decay\": true, "
                           "\"init_std\": 1}",
                           "{\"kind\": \"bla\", \"heads\": 2, \"modes\": 6, \"init_std\": 1}"};
    for (int i = 0; i < 2; i++) {
        Layer L;
        if (layer_build_(&L, json[i], 8, 21)) return;
        layer_shape_(&L, 1, 4096);
        GcRng r = {22};
        CHECK(layer_grads_finite(&L, &r), "bla at T = 4096 (%s): outputs and gradients finite",
              i ? "no decay, resolution 2" : "decay, resolution 1.3");
        layer_free_(&L);
    }
}

static void test_bad_options(void) {
    layer_check_error("{\"kind\": \"bla\", \"modes\": 0}", 16, "model.mixer.modes");
    layer_check_error("{\"kind\": \"bla\", \"modes\": 4, \"period\": 6}", 16, "model.mixer.period: 6 is shorter than 2M - 1 = 7");
    layer_check_error("{\"kind\": \"bla\", \"resolution\": 0.5}", 16, "model.mixer.resolution: 0.5 is below 1");
    layer_check_error("{\"kind\": \"bla\", \"resolution\": 2, \"period\": 40}", 16, "set one");
    layer_check_error("{\"kind\": \"bla\", \"heads\": 3}", 16, "model.mixer.expand_k");
    layer_check_error("{\"kind\": \"bla\", \"heads\": 4, \"modes\": 1000}", 16, "allowed: M <= 512");
    layer_check_error("{\"kind\": \"bla\", \"num_slots\": 8}", 16, "num_slots");
    layer_check_error("{\"kind\": \"bla\", \"window\": 8}", 16, "window");
}

int main(void) {
    test_naive();
    test_algorithms();
    test_exactness();
    test_gradients();
    test_chunk_invariance();
    test_step();
    test_defaults_and_state();
    test_long();
    test_bad_options();
    return test_summary();
}
