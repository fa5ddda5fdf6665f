/*
 * The rfa mixer on its own (x -> y), with loss L = sum(dy * y): gradient checks of dx and of every tensor
 * under every ablation flag, with the tolerance tight enough and the SDE gradients large enough that a
 * wrong chain rule fails (each checked tensor must carry a gradient well above the tolerance); the mu = 0
 * heads (exact, finite, no gradient into their raw value, equal to the mu -> 0 limit); causality and
 * long-context evaluation (T = 4100 from a prefix-consistent forward); the parameter maps on a tiny layer
 * (mu = softplus + eps and its init, the unitary logit scale, the two nu forms) and the options refused.
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
    // eps 0: mu = softplus(raw) + eps would keep b's head 0 at mu >= eps
    if (layer_build_(&a, "{\"kind\": \"rfa\", \"heads\": 2, \"zero_decay_heads\": 1, \"eps\": 0}", C, 5)) return;
    if (layer_build_(&b, "{\"kind\": \"rfa\", \"heads\": 2, \"zero_decay_heads\": 0, \"eps\": 0}", C, 5)) return;
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

// the value of diag key `name` at head h
static double diag_at_(const Layer *L, const char *name, int h) {
    cJSON *obj = cJSON_CreateObject();
    L->spec.ops->diag(&L->m, obj);
    double v = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(obj, name), h)->valuedouble;
    cJSON_Delete(obj);
    return v;
}

static double softplus_(double r) { return r > 20 ? r : log1p(exp(r)); }

// Algorithm 1's mu = softplus(mu') + eps on the decaying heads (0 exactly on the others), and the init
// raw = softplus^-1(mu0 - eps) gives the same initial mu whatever eps is
static void test_mu_eps(void) {
    int C = 16;
    Layer a, b;
    if (layer_build_(&a, "{\"kind\": \"rfa\", \"heads\": 2, \"zero_decay_heads\": 1, \"damping\": 0.5, "
                         "\"eps\": 0.01}", C, 5)) return;
    if (layer_build_(&b, "{\"kind\": \"rfa\", \"heads\": 2, \"zero_decay_heads\": 1, \"damping\": 0.5, "
                         "\"eps\": 0}", C, 5)) return;
    // head 1's band max is 1 (the fastest RoPE frequency), so mu0 = damping = 0.5
    double ma = diag_at_(&a, "mu", 1), mb = diag_at_(&b, "mu", 1);
    CHECK(fabs(ma - 0.5) < 1e-6 && fabs(mb - 0.5) < 1e-6 && diag_at_(&a, "mu", 0) == 0.0,
          "mu init: %.8f (eps 0.01), %.8f (eps 0), want 0.5 both; zero-decay head 0 exactly", ma, mb);
    float *raw = a.params + a.pt.t[param_index_(&a, "sde_mu")].offset;
    raw[1] = -3.0f;
    double got = diag_at_(&a, "mu", 1), want = softplus_(-3.0) + 0.01;
    CHECK(fabs(got - want) < 1e-7, "mu = softplus(-3) + eps = %.8f (want %.8f)", got, want);
    layer_free_(&a);
    layer_free_(&b);
}

// the unitary logits tau Re(q~'k~) / sqrt(D) (sqrt_d) or / sqrt(2D) (sqrt_2d): the two agree when the
// sqrt_2d layer's tau is sqrt(2) times larger; and they differ at the same tau
static void test_rotation_scale(void) {
    int C = 16, B = 1, T = 20;
    Layer a, b;
    if (layer_build_(&a, "{\"kind\": \"rfa\", \"heads\": 2, \"unitary\": true}", C, 6)) return;
    if (layer_build_(&b, "{\"kind\": \"rfa\", \"heads\": 2, \"unitary\": true, \"rotation_scale\": \"sqrt_2d\"}",
                     C, 6)) return;
    layer_shape_(&a, B, T);
    layer_shape_(&b, B, T);
    GcRng r = {12};
    layer_perturb(&a, &r, 0.5f);  // far from uniform attention
    memcpy(b.params, a.params, a.pt.numel * sizeof(float));
    size_t n = (size_t)B * T * C;
    float *x = gc_randn(&r, n, 1.0f), *ya = malloc(n * sizeof(float)), *yb = malloc(n * sizeof(float));
    a.spec.ops->forward(&a.m, ya, x, B, T);
    b.spec.ops->forward(&b.m, yb, x, B, T);
    double same_tau = 0, scale = 0;
    for (size_t i = 0; i < n; i++) same_tau = fmax(same_tau, fabs((double)ya[i] - yb[i]));
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)ya[i]));
    int kt = param_index_(&b, "sde_tau");
    for (int h = 0; h < 2; h++) {
        float *rt = b.params + b.pt.t[kt].offset + h;
        double tau = softplus_(*rt) + 1e-6, t2 = sqrt(2.0) * tau - 1e-6;
        *rt = (float)log(expm1(t2));  // softplus^-1
    }
    b.spec.ops->forward(&b.m, yb, x, B, T);
    double worst = 0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)ya[i] - yb[i]));
    CHECK(worst < 1e-5 * scale && same_tau > 1e-3 * scale,
          "unitary: sqrt_2d at tau sqrt(2) == sqrt_d at tau (max|dy| %.2g, scale %.2g); at equal tau they differ (%.2g)",
          worst, scale, same_tau);
    free(x); free(ya); free(yb);
    layer_free_(&a);
    layer_free_(&b);
}

// nu_form: ratio nu / D = softplus(nu') + eps; authors nu = D softplus(nu') + 2 + eps; both initialised to
// nu / D = nu_over_d_init
static void test_nu_form(void) {
    int C = 16;  // heads 2: D = 8
    Layer a, r;
    if (layer_build_(&a, "{\"kind\": \"rfa\", \"heads\": 2, \"nu_form\": \"authors\", \"nu_over_d_init\": 1.5, "
                         "\"eps\": 0.01}", C, 7)) return;
    if (layer_build_(&r, "{\"kind\": \"rfa\", \"heads\": 2, \"nu_over_d_init\": 1.5, \"eps\": 0.01}", C, 7)) return;
    double na = diag_at_(&a, "nu_over_d", 0), nr = diag_at_(&r, "nu_over_d", 0);
    CHECK(fabs(na - 1.5) < 1e-6 && fabs(nr - 1.5) < 1e-6, "nu / D init 1.5 in both forms (authors %.8f, ratio %.8f)",
          na, nr);
    float *ra = a.params + a.pt.t[param_index_(&a, "sde_nu")].offset;
    float *rr = r.params + r.pt.t[param_index_(&r, "sde_nu")].offset;
    ra[1] = rr[1] = 0.25f;
    double ga = diag_at_(&a, "nu_over_d", 1) * 8, gr = diag_at_(&r, "nu_over_d", 1) * 8;
    double wa = 8 * softplus_(0.25) + 2 + 0.01, wr = 8 * (softplus_(0.25) + 0.01);
    CHECK(fabs(ga - wa) < 1e-5 && fabs(gr - wr) < 1e-5,
          "nu at raw 0.25, D 8: authors %.6f (want D sp + 2 + eps = %.6f), ratio %.6f (want D (sp + eps) = %.6f)",
          ga, wa, gr, wr);
    layer_free_(&a);
    layer_free_(&r);
    layer_check_error("{\"kind\": \"rfa\", \"heads\": 2, \"nu_form\": \"authors\", \"nu_over_d_init\": 0.2}", C,
                      "nu_over_d_init");
    layer_check_error("{\"kind\": \"rfa\", \"heads\": 2, \"nu_form\": \"paper\"}", C, "nu_form");
    layer_check_error("{\"kind\": \"rfa\", \"heads\": 2, \"rotation_scale\": \"d\"}", C, "rotation_scale");
    layer_check_error("{\"kind\": \"rfa\", \"heads\": 2, \"eps\": 0.05, \"tau_init\": 0.04}", C, "tau_init");
    layer_check_error("{\"kind\": \"rfa\", \"heads\": 2, \"eps\": 0.05, \"nu_over_d_init\": 0.05}", C, "nu_over_d_init");
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
        {"M2.6 unitary sqrt_2d", "{\"kind\": \"rfa\", \"heads\": 2, \"unitary\": true, "
                                 "\"rotation_scale\": \"sqrt_2d\", \"learn_omega\": true}"},
        {"M1 nu_form authors", "{\"kind\": \"rfa\", \"heads\": 2, \"zero_decay_heads\": 1, \"damping\": 0.5, "
                               "\"nu_form\": \"authors\", \"nu_over_d_init\": 1.5, \"eps\": 0.01}"},
        {"M2.1 gaussian nu_form authors", "{\"kind\": \"rfa\", \"heads\": 2, \"kernel\": \"gaussian\", "
                                          "\"damping\": 0.5, \"zero_decay_heads\": 1, \"nu_form\": \"authors\"}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case_(cases[i].what, cases[i].json);
    test_zero_decay_heads();
    test_long_context();
    test_mu_eps();
    test_rotation_scale();
    test_nu_form();
    test_attn_map();
    return test_summary();
}
