/*
 * The linear-attention family (mixers/linear.c: linear_attn, retnet, gla):
 *   - gradient checks of dx and every tensor for each mixer and option (every feature map, the normaliser,
 *     with and without the output gate, the complex forget gate `rotate`, the short conv `conv` of gla and
 *     retnet);
 *   - the chunk size changes nothing (chunk 1, 3 and more than T), up to float rounding;
 *   - recurrent decoding (step) reproduces the full forward token by token to 1e-5 of the output scale (with
 *     a conv, through the conv caches it carries);
 *   - bad options stop with the key path.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixer_layer.h"

#define GC_H 3e-3

static const char *const CASES_[][2] = {
    {"linear_attn identity", "{\"kind\": \"linear_attn\", \"heads\": 2, \"feature_map\": \"identity\"}"},
    {"linear_attn elu normalize", "{\"kind\": \"linear_attn\", \"heads\": 2, \"feature_map\": \"elu\", \"normalize\": true}"},
    {"linear_attn relu", "{\"kind\": \"linear_attn\", \"heads\": 2, \"feature_map\": \"relu\"}"},
    {"linear_attn hadamard", "{\"kind\": \"linear_attn\", \"heads\": 2, \"feature_map\": \"hadamard\", \"init_std\": 0.3}"},
    {"retnet", "{\"kind\": \"retnet\", \"heads\": 2}"},
    {"retnet no gate", "{\"kind\": \"retnet\", \"heads\": 2, \"output_gate\": false, \"expand_v\": 1}"},
    {"gla", "{\"kind\": \"gla\", \"heads\": 2, \"gate_rank\": 3, \"gate_normalizer\": 2}"},
    {"gla no gate", "{\"kind\": \"gla\", \"heads\": 2, \"gate_rank\": 4, \"output_gate\": false, \"expand_k\": 1}"},
    // the complex forget gate: RoPE in front of the engine (fast base so the angles turn within T), after a map
    {"linear_attn identity rotate", "{\"kind\": \"linear_attn\", \"heads\": 2, \"feature_map\": \"identity\", "
                                    "\"rotate\": true, \"rope_base\": 20}"},
    {"linear_attn elu rotate normalize", "{\"kind\": \"linear_attn\", \"heads\": 2, \"feature_map\": \"elu\", "
                                              "\"normalize\": true, \"rotate\": true, \"rope_base\": 20}"},
    {"gla rotate", "{\"kind\": \"gla\", \"heads\": 2, \"gate_rank\": 3, \"gate_normalizer\": 2, \"expand_k\": 1, "
                   "\"rotate\": true, \"rope_base\": 20}"},
    // FLA's use_short_conv: q, k, v = silu(conv_K(projection)) before the rest (decode carries the conv caches)
    {"gla conv 4", "{\"kind\": \"gla\", \"heads\": 2, \"gate_rank\": 3, \"gate_normalizer\": 2, \"conv\": 4}"},
    {"gla conv 2 rotate", "{\"kind\": \"gla\", \"heads\": 2, \"gate_rank\": 3, \"gate_normalizer\": 2, "
                          "\"expand_k\": 1, \"rotate\": true, \"rope_base\": 20, \"conv\": 2}"},
    {"gla conv 3 selective_rope", "{\"kind\": \"gla\", \"heads\": 2, \"gate_rank\": 3, \"gate_normalizer\": 2, "
                                  "\"conv\": 3, \"selective_rope\": {\"enabled\": true, \"phi_proj_rank\": 2, "
                                  "\"temp_theta\": 20}}"},
    {"retnet conv 3", "{\"kind\": \"retnet\", \"heads\": 2, \"conv\": 3}"},
};
#define N_CASES_ ((int)(sizeof CASES_ / sizeof CASES_[0]))

static void test_gradients(void) {
    for (int i = 0; i < N_CASES_; i++) {
        Layer L;
        if (layer_build_(&L, CASES_[i][1], 8, 3)) continue;
        layer_shape_(&L, 2, 11);
        GcRng r = {(uint64_t)(40 + i)};
        layer_perturb(&L, &r, 0.2f);
        layer_gradcheck_carried(&L, CASES_[i][0], &r, GC_H, 1e-3);
        layer_free_(&L);
    }
}

static void perturb_chunks_(Layer *L, GcRng *r) { layer_perturb(L, r, 0.2f); }
static void perturb_step_(Layer *L, GcRng *r) { layer_perturb(L, r, 0.1f); }

static void test_chunk_invariance(void) { layer_cases_chunk_invariance(CASES_, N_CASES_, perturb_chunks_); }

static void test_step(void) { layer_cases_decode(CASES_, N_CASES_, perturb_step_); }

static void test_bad_options(void) {
    layer_check_error("{\"kind\": \"gla\", \"heads\": 3}", 16, "model.mixer.expand_k");
    layer_check_error("{\"kind\": \"linear_attn\", \"heads\": 5}", 16, "not a multiple of heads 5");
    layer_check_error("{\"kind\": \"retnet\", \"heads\": 2, \"chunk\": 0}", 16, "model.mixer.chunk");
    layer_check_error("{\"kind\": \"retnet\", \"feature_map\": \"elu\"}", 16, "feature_map");
    layer_check_error("{\"kind\": \"linear_attn\", \"output_gate\": true}", 16, "output_gate");
    layer_check_error("{\"kind\": \"linear_attn\", \"feature_map\": \"dpfp\"}", 16,
                      "allowed: identity, elu, relu, hadamard");
    layer_check_error("{\"kind\": \"retnet\", \"heads\": 16, \"expand_k\": 1}", 16, "even key head size");
    layer_check_error("{\"kind\": \"gla\", \"heads\": 8, \"expand_k\": 1, \"rotate\": true}", 24, "even key head size");
    layer_check_error("{\"kind\": \"retnet\", \"rotate\": true}", 16, "rotate");
    layer_check_error("{\"kind\": \"linear_attn\", \"conv\": 4}", 16, "conv");
    layer_check_error("{\"kind\": \"gla\", \"conv\": 65}", 16, "model.mixer.conv");
}

int main(void) {
    test_gradients();
    test_chunk_invariance();
    test_step();
    test_bad_options();
    return test_summary();
}
