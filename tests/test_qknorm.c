/*
 * attention's qk_norm options (docs/mixers.md "attention"): qk_norm_scales per_head (one scale vector per head,
 * FoX's default) and qk_norm_eps, beside the default (shared scales, eps 1e-6):
 *   - the tensors: q_norm and k_norm hold H·D scales with per_head, D shared;
 *   - gradient checks of dx and every tensor with per_head scales and a large eps (so that eps matters), with
 *     selective_rope before the norm, and with RoPE after it;
 *   - per_head scales that are all equal give the shared scales' outputs exactly;
 *   - the options without qk_norm are refused, naming the key.
 * The forward against PyTorch: the reference case fox_qknorm_per_head_eps (tests/test_torch_ref.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixer_layer.h"

#define QN_(x) "{\"kind\": \"attention\", \"heads\": 2, \"qk_norm\": true" x "}"

static const char *const CASES_[][2] = {
    {"fox qk_norm per_head eps 0.3", QN_(", \"pos\": \"fox\", \"qk_norm_scales\": \"per_head\", \"qk_norm_eps\": 0.3")},
    {"rope qk_norm per_head", QN_(", \"pos\": \"rope\", \"rope_base\": 50, \"qk_norm_scales\": \"per_head\"")},
    {"none selrope qk_norm per_head eps 0.1", QN_(", \"pos\": \"none\", \"qk_norm_scales\": \"per_head\", "
                                                  "\"qk_norm_eps\": 0.1, \"selective_rope\": {\"enabled\": true, "
                                                  "\"phi_proj_rank\": 4, \"temp_theta\": 10}")},
};

static void test_gradients(void) {
    for (int i = 0; i < (int)(sizeof CASES_ / sizeof CASES_[0]); i++) {
        Layer L;
        if (layer_build_(&L, CASES_[i][1], 8, 3)) continue;
        int kq = param_index_(&L, "q_norm"), kk = param_index_(&L, "k_norm");
        CHECK(kq >= 0 && kk >= 0 && L.pt.t[kq].numel == 8 && L.pt.t[kk].numel == 8,
              "%s: q_norm and k_norm hold H·D = 8 scales", CASES_[i][0]);
        layer_shape_(&L, 2, 7);
        GcRng r = {(uint64_t)(90 + i)};
        layer_perturb(&L, &r, 0.3f);
        layer_gradcheck_carried(&L, CASES_[i][0], &r, 3e-3, 1e-3);
        layer_free_(&L);
    }
}

// per_head scales equal in every head = the shared scales: the same outputs to the last bit
static void test_per_head_equals_shared(void) {
    Layer S, P;
    if (layer_build_(&S, QN_(", \"pos\": \"fox\""), 8, 3)) return;
    if (layer_build_(&P, QN_(", \"pos\": \"fox\", \"qk_norm_scales\": \"per_head\""), 8, 3)) return;
    layer_shape_(&S, 2, 7);
    layer_shape_(&P, 2, 7);
    GcRng r = {5};
    layer_perturb(&S, &r, 0.3f);
    // copy every tensor, tiling the shared scales over the heads
    for (int k = 0; k < S.pt.n; k++) {
        const ParamTensor *ts = &S.pt.t[k], *tp = &P.pt.t[k];
        for (size_t i = 0; i < tp->numel; i++) P.params[tp->offset + i] = S.params[ts->offset + i % ts->numel];
    }
    size_t n = (size_t)2 * 7 * 8;
    float *x = gc_randn(&r, n, 1), *ys = malloc(n * sizeof(float)), *yp = malloc(n * sizeof(float));
    S.spec.ops->forward(&S.m, ys, x, 2, 7);
    P.spec.ops->forward(&P.m, yp, x, 2, 7);
    double worst = 0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(ys[i] - yp[i]));
    CHECK(worst == 0, "per_head scales all equal = shared scales (max|diff| %.2g)", worst);
    free(x); free(ys); free(yp);
    layer_free_(&S);
    layer_free_(&P);
}

static void test_bad_options(void) {
    layer_check_error("{\"kind\": \"attention\", \"qk_norm_scales\": \"per_head\"}", 16, "model.mixer.qk_norm_scales");
    layer_check_error("{\"kind\": \"attention\", \"qk_norm_eps\": 1e-5}", 16, "model.mixer.qk_norm_eps");
    layer_check_error(QN_(", \"qk_norm_scales\": \"per_group\""), 16, "model.mixer.qk_norm_scales");
    layer_check_error(QN_(", \"qk_norm_eps\": 0"), 16, "model.mixer.qk_norm_eps");
}

int main(void) {
    test_gradients();
    test_per_head_equals_shared();
    test_bad_options();
    return test_summary();
}
