/*
 * The rfa mixer on its own (x -> y), with loss L = sum(dy * y): gradient checks of dx and of every tensor
 * under every ablation flag, with the tolerance tight enough and the SDE gradients large enough that a
 * wrong chain rule fails (each checked tensor must carry a gradient well above the tolerance); the mu = 0
 * heads (exact, finite, no gradient into their raw value, equal to the mu -> 0 limit); causality and
 * long-context evaluation (T = 4100 from a prefix-consistent forward).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixer_layer.h"


// every tensor and dx; `dead` lists the tensors whose gradient must be exactly 0 (unused by the options)
static void check_case_(const char *what, const char *json) {
    int C = 16, B = 2, T = 23;
    Layer L;
    if (layer_build_(&L, json, C, 77)) return;
    layer_shape_(&L, B, T);
    GcRng r = {404};
    // move the weights off the init so every path carries gradient; keep the SDE raws where they are
    // plus noise, so heads differ
    for (size_t i = 0; i < L.pt.numel; i++) L.params[i] += 0.1f * gc_normal(&r);
    double gmax[64];
    layer_gradcheck_all(&L, what, &r, 1e-2, gmax);
    for (int k = 0; k < L.pt.n; k++) {
        const ParamTensor *t = &L.pt.t[k];
        // a check at atol 1e-4 proves little for a gradient below it: the SDE tensors that the options use
        // must carry more (mu of the mu = 0 heads aside)
        if (strstr(t->name, "sde_") || strstr(t->name, "omega")) {
            int used = 1;
            if (strstr(json, "\"unitary\": true") && !strstr(t->name, "tau") && !strstr(t->name, "omega")) used = 0;
            if (strstr(json, "\"flat\"") && (strstr(t->name, "sigma") || strstr(t->name, "eta") ||
                                             strstr(t->name, "gamma"))) used = 0;
            if (used) CHECK(gmax[k] > 1e-3, "%s: %s carries gradient (max|g| %.3g > 1e-3)", what, t->name, gmax[k]);
            else CHECK(gmax[k] == 0.0, "%s: %s unused by the options, gradient exactly 0 (%.3g)", what, t->name, gmax[k]);
        }
    }
    layer_free_(&L);
}

// mu = 0 heads: E = 1 exactly, finite, no gradient into the raw mu; and the mu -> 0 limit of a learned head
// gives the same outputs
static void test_zero_decay_heads(void) {
    int C = 16, B = 1, T = 40;
    Layer a, b;
    if (layer_build_(&a, "{\"kind\": \"rfa\", \"heads\": 2, \"zero_decay_heads\": 1}", C, 5)) return;
    if (layer_build_(&b, "{\"kind\": \"rfa\", \"heads\": 2, \"zero_decay_heads\": 0}", C, 5)) return;
    layer_shape_(&a, B, T);
    layer_shape_(&b, B, T);
    // same weights; b's head 0 learns mu = softplus(raw) with raw = -40 (mu ~ 4e-18)
    memcpy(b.params, a.params, a.pt.numel * sizeof(float));
    int kmu = param_index_(&b, "sde_mu");
    b.params[b.pt.t[kmu].offset] = -40.0f;
    GcRng r = {9};
    size_t n = (size_t)B * T * C;
    float *x = gc_randn(&r, n, 1.0f), *ya = malloc(n * sizeof(float)), *yb = malloc(n * sizeof(float));
    float *dy = gc_randn(&r, n, 1.0f), *dx = calloc(n, sizeof(float));
    a.spec.ops->forward(&a.m, ya, x, B, T);
    b.spec.ops->forward(&b.m, yb, x, B, T);
    double worst = 0;
    int finite = 1;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)ya[i] - yb[i]));
        finite &= isfinite(ya[i]);
    }
    CHECK(finite && worst < 1e-6, "mu = 0 head is the exact mu -> 0 limit (max|dy| %.2g vs mu = 4e-18)", worst);
    a.spec.ops->backward(&a.m, dx, dy, x, B, T);
    int kmu_a = param_index_(&a, "sde_mu");
    float g0 = a.grads[a.pt.t[kmu_a].offset], g1 = a.grads[a.pt.t[kmu_a].offset + 1];
    CHECK(g0 == 0.0f && g1 != 0.0f && isfinite(g1), "mu = 0 head: raw mu gets exactly 0 (%g), the learned head %g",
          g0, g1);
    int fin = 1;
    for (size_t i = 0; i < a.pt.numel; i++) fin &= isfinite(a.grads[i]);
    CHECK(fin, "mu = 0 head: every gradient finite");
    free(x); free(ya); free(yb); free(dy); free(dx);
    layer_free_(&a);
    layer_free_(&b);
}

// causal, and the first positions of a T = 4100 forward equal a T = 64 forward (evaluation far past any
// training length reuses the same per-lag tables, O(T D) memory per head)
static void test_long_context(void) {
    int C = 16;
    Layer L;
    if (layer_build_(&L, "{\"kind\": \"rfa\", \"heads\": 2, \"spectral_coupling\": true, \"damping\": 0.5, "
                         "\"zero_decay_heads\": 1}", C, 8)) return;
    GcRng r = {10};
    int Tl = 4100, Ts = 64;
    float *x = gc_randn(&r, (size_t)Tl * C, 1.0f), *yl = malloc((size_t)Tl * C * sizeof(float));
    float *ys = malloc((size_t)Ts * C * sizeof(float));
    layer_shape_(&L, 1, Tl);
    L.spec.ops->forward(&L.m, yl, x, 1, Tl);
    layer_shape_(&L, 1, Ts);
    L.spec.ops->forward(&L.m, ys, x, 1, Ts);
    double worst = 0;
    int finite = 1;
    for (size_t i = 0; i < (size_t)Tl * C; i++) finite &= isfinite(yl[i]);
    for (size_t i = 0; i < (size_t)Ts * C; i++) worst = fmax(worst, fabs((double)yl[i] - ys[i]));
    CHECK(finite, "rfa forward at T = 4100 is finite");
    CHECK(worst < 1e-5, "rfa is causal: the first 64 outputs of T = 4100 equal T = 64 (max|d| %.2g)", worst);
    free(x); free(yl); free(ys);
    layer_free_(&L);
}

// attention maps: rows sum to 1 over the visible keys
static void test_attn_map(void) {
    int C = 16, T = 50;
    Layer L;
    if (layer_build_(&L, "{\"kind\": \"rfa\", \"heads\": 2}", C, 3)) return;
    layer_shape_(&L, 1, T);
    GcRng r = {11};
    float *x = gc_randn(&r, (size_t)T * C, 1.0f), *y = malloc((size_t)T * C * sizeof(float));
    float *P = malloc((size_t)T * T * sizeof(float));
    L.spec.ops->forward(&L.m, y, x, 1, T);
    CHECK(L.spec.ops->attn_heads(&L.spec) == 2, "rfa: attn_heads = 2");
    double worst = 0;
    for (int h = 0; h < 2; h++) {
        L.spec.ops->attn_map(&L.m, 0, h, P);
        for (int i = 0; i < T; i++) {
            double s = 0;
            for (int j = 0; j <= i; j++) s += P[(size_t)i * T + j];
            worst = fmax(worst, fabs(s - 1));
        }
    }
    CHECK(worst < 1e-5, "rfa attention map rows sum to 1 (max err %.2g)", worst);
    free(x); free(y); free(P);
    layer_free_(&L);
}

int main(void) {
    struct { const char *what, *json; } cases[] = {
        {"M1", "{\"kind\": \"rfa\", \"heads\": 2, \"zero_decay_heads\": 1, \"damping\": 0.5}"},
        {"M2 SC learn_omega", "{\"kind\": \"rfa\", \"heads\": 2, \"head_dim\": 4, \"spectral_coupling\": true, "
                              "\"learn_omega\": true, \"damping\": 0.5, \"zero_decay_heads\": 0}"},
        {"M2.1 gaussian", "{\"kind\": \"rfa\", \"heads\": 2, \"kernel\": \"gaussian\", \"damping\": 0.5, "
                          "\"zero_decay_heads\": 1}"},
        {"M2.2 flat prior", "{\"kind\": \"rfa\", \"heads\": 2, \"prior\": \"flat\", \"damping\": 0.5, "
                            "\"zero_decay_heads\": 1, \"bias\": false}"},
        {"M2.3 no mult gate", "{\"kind\": \"rfa\", \"heads\": 2, \"mult_gate\": false, \"damping\": 0.5, "
                              "\"zero_decay_heads\": 1}"},
        {"M2.4 no value rotation", "{\"kind\": \"rfa\", \"heads\": 2, \"rotate_values\": false, \"damping\": 0.5, "
                                   "\"zero_decay_heads\": 1, \"learn_omega\": true}"},
        {"M2.5 no rotations", "{\"kind\": \"rfa\", \"heads\": 2, \"rotations\": false, \"damping\": 0.5, "
                              "\"zero_decay_heads\": 1}"},
        {"M2.6 unitary", "{\"kind\": \"rfa\", \"heads\": 2, \"unitary\": true, \"learn_omega\": true}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case_(cases[i].what, cases[i].json);
    test_zero_decay_heads();
    test_long_context();
    test_attn_map();
    return test_summary();
}
