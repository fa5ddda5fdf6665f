/*
 * The linear-attention family (mixers/linear.c: linear_attn, retnet, gla):
 *   - gradient checks of dx and every tensor for each mixer and option (every feature map, the normaliser,
 *     with and without the output gate);
 *   - the chunk size changes nothing (chunk 1, 3 and more than T), up to float rounding;
 *   - recurrent decoding (step) reproduces the full forward token by token to 1e-5 of the output scale;
 *   - bad options stop with the key path.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixer_layer.h"

#define GC_H 3e-3

static const char *CASES_[][2] = {
    {"linear_attn identity", "{\"kind\": \"linear_attn\", \"heads\": 2, \"feature_map\": \"identity\"}"},
    {"linear_attn elu normalize", "{\"kind\": \"linear_attn\", \"heads\": 2, \"feature_map\": \"elu\", \"normalize\": true}"},
    {"linear_attn relu", "{\"kind\": \"linear_attn\", \"heads\": 2, \"feature_map\": \"relu\"}"},
    {"linear_attn hadamard", "{\"kind\": \"linear_attn\", \"heads\": 2, \"feature_map\": \"hadamard\", \"init_std\": 0.3}"},
    {"retnet", "{\"kind\": \"retnet\", \"heads\": 2}"},
    {"retnet no gate", "{\"kind\": \"retnet\", \"heads\": 2, \"output_gate\": false, \"expand_v\": 1}"},
    {"gla", "{\"kind\": \"gla\", \"heads\": 2, \"gate_rank\": 3, \"gate_normalizer\": 2}"},
    {"gla no gate", "{\"kind\": \"gla\", \"heads\": 2, \"gate_rank\": 4, \"output_gate\": false, \"expand_k\": 1}"},
};
#define N_CASES_ ((int)(sizeof CASES_ / sizeof CASES_[0]))

static void test_gradients(void) {
    for (int i = 0; i < N_CASES_; i++) {
        Layer L;
        if (layer_build_(&L, CASES_[i][1], 8, 3)) continue;
        layer_shape_(&L, 2, 11);
        GcRng r = {(uint64_t)(40 + i)};
        layer_perturb(&L, &r, 0.2f);
        double gmax[64];
        layer_gradcheck_all(&L, CASES_[i][0], &r, GC_H, gmax);
        for (int k = 0; k < L.pt.n; k++)
            CHECK(gmax[k] > 1e-3, "%s: %s carries gradient (max|g| %.3g)", CASES_[i][0], L.pt.t[k].name, gmax[k]);
        layer_free_(&L);
    }
}

// the same outputs and gradients for any chunk size (a different summation order: float rounding only)
static void test_chunk_invariance(void) {
    int C = 8, B = 2, T = 23;
    size_t n = (size_t)B * T * C;
    for (int i = 0; i < N_CASES_; i++) {
        const int chunks[3] = {1, 3, 64};
        float *ref_dx = NULL, *ref_g = NULL;
        double worst = 0, scale = 0;
        for (int ci = 0; ci < 3; ci++) {
            char json[256];
            snprintf(json, sizeof json, "%.*s, \"chunk\": %d}", (int)strlen(CASES_[i][1]) - 1, CASES_[i][1], chunks[ci]);
            Layer L;
            if (layer_build_(&L, json, C, 5)) break;
            layer_shape_(&L, B, T);
            GcRng r = {6};
            layer_perturb(&L, &r, 0.2f);
            float *x = gc_randn(&r, n, 1.0f), *dy = gc_randn(&r, n, 1.0f), *dx = malloc(n * sizeof(float));
            layer_grads(&L, x, dy, dx);
            if (!ref_dx) {
                ref_dx = dx;
                ref_g = malloc(L.pt.numel * sizeof(float));
                memcpy(ref_g, L.grads, L.pt.numel * sizeof(float));
                for (size_t j = 0; j < n; j++) scale = fmax(scale, fabs(dx[j]));
                for (size_t j = 0; j < L.pt.numel; j++) scale = fmax(scale, fabs(ref_g[j]));
            } else {
                for (size_t j = 0; j < n; j++) worst = fmax(worst, fabs((double)dx[j] - ref_dx[j]));
                for (size_t j = 0; j < L.pt.numel; j++) worst = fmax(worst, fabs((double)L.grads[j] - ref_g[j]));
                free(dx);
            }
            free(x); free(dy);
            layer_free_(&L);
        }
        CHECK(ref_dx && worst <= 1e-5 * scale, "%s: chunk 1, 3 and 64 give the same gradients (max|d| %.2g of %.2g)",
              CASES_[i][0], worst, scale);
        free(ref_dx); free(ref_g);
    }
}

static void test_step(void) {
    for (int i = 0; i < N_CASES_; i++) {
        Layer L;
        if (layer_build_(&L, CASES_[i][1], 16, 13)) continue;
        layer_shape_(&L, 3, 40);
        GcRng r = {14};
        layer_perturb(&L, &r, 0.1f);
        float *x = gc_randn(&r, (size_t)3 * 40 * 16, 1.0f);
        double scale, worst = layer_step_error(&L, x, &scale);
        CHECK(worst <= 1e-5 * scale && scale > 1e-3, "%s: token-by-token decoding = full forward (max|d| %.2g, max|y| %.2g)",
              CASES_[i][0], worst, scale);
        free(x);
        layer_free_(&L);
    }
}

static void check_error_(const char *json, int C, const char *want) {
    MixerSpec s;
    Err e = {{0}};
    cJSON *j = cJSON_Parse(json);
    int rc = mixer_spec_parse(&s, j, NULL, "model.mixer", C, &e);
    cJSON_Delete(j);
    CHECK(rc != 0, "refused: %s", json);
    CHECK_CONTAINS(e.msg, want, "the message names what is wrong: %s", json);
    if (rc == 0) mixer_spec_free(&s);
}

static void test_bad_options(void) {
    check_error_("{\"kind\": \"gla\", \"heads\": 3}", 16, "model.mixer.expand_k");
    check_error_("{\"kind\": \"linear_attn\", \"heads\": 5}", 16, "not a multiple of heads 5");
    check_error_("{\"kind\": \"retnet\", \"heads\": 2, \"chunk\": 0}", 16, "model.mixer.chunk");
    check_error_("{\"kind\": \"retnet\", \"feature_map\": \"elu\"}", 16, "feature_map");
    check_error_("{\"kind\": \"linear_attn\", \"output_gate\": true}", 16, "output_gate");
    check_error_("{\"kind\": \"linear_attn\", \"feature_map\": \"dpfp\"}", 16, "allowed: identity, elu, relu, hadamard");
    check_error_("{\"kind\": \"retnet\", \"heads\": 16, \"expand_k\": 1}", 16, "even key head size");
}

int main(void) {
    test_gradients();
    test_chunk_invariance();
    test_step();
    test_bad_options();
    return test_summary();
}
