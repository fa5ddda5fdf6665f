/*
 * The delta-rule mixers (mixers/delta.c: deltanet, gated_deltanet):
 *   - gradient checks of dx and every tensor for each mixer and option (with and without the short convs,
 *     negative eigenvalues, with and without the output gate);
 *   - the chunk size changes nothing (chunk 1, 3 and more than T), up to float rounding;
 *   - recurrent decoding (step) reproduces the full forward token by token to 1e-5 of the output scale;
 *   - bad options stop with the key path.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixer_layer.h"

// finite-difference step, the parameters' move off their init, and the width of the gradient checks. The output
// norm's eps is 0.01 in the cases: with 1e-5 a head whose output is near 0 makes the loss too curved for float32
// central differences (the analytic gradients agree with the float64 PyTorch reference either way)
#define GC_H 3e-3
#define GC_STD 0.2f
#define GC_C 8

static const char *const CASES_[][2] = {
    {"deltanet", "{\"kind\": \"deltanet\", \"heads\": 2, \"norm_eps\": 0.01}"},
    {"deltanet no conv", "{\"kind\": \"deltanet\", \"heads\": 2, \"norm_eps\": 0.01, \"conv\": 0}"},
    {"deltanet neg eigval gate", "{\"kind\": \"deltanet\", \"heads\": 2, \"norm_eps\": 0.01, \"allow_neg_eigval\": true, \"use_gate\": true}"},
    {"deltanet conv 3 expand_v 2", "{\"kind\": \"deltanet\", \"heads\": 2, \"norm_eps\": 0.01, \"conv\": 3, \"expand_v\": 2}"},
    {"gated_deltanet", "{\"kind\": \"gated_deltanet\", \"heads\": 2, \"norm_eps\": 0.01}"},
    {"gated_deltanet neg no gate no conv",
     "{\"kind\": \"gated_deltanet\", \"heads\": 2, \"norm_eps\": 0.01, \"allow_neg_eigval\": true, \"use_gate\": false, \"conv\": 1}"},
};
#define N_CASES_ ((int)(sizeof CASES_ / sizeof CASES_[0]))

// every parameter off its init; convs and projections large enough that q, k, v, beta and the decay vary
static void perturb_(Layer *L, GcRng *r, float std) {
    layer_perturb(L, r, std);
    // q, k are L2-normalised: rows of small norm make the loss sharp (d/dk ~ 1/|k|), so the convs are moved
    // enough that |silu(conv)| is O(1) and finite differences stay accurate
    const char *convs[3] = {"q_conv1d", "k_conv1d", "v_conv1d"};
    for (int c = 0; c < 3; c++) {
        int kc = param_index_(L, convs[c]);
        for (size_t i = 0; kc >= 0 && i < L->pt.t[kc].numel; i++) L->params[L->pt.t[kc].offset + i] += 0.5f * gc_normal(r);
    }
    int k = param_index_(L, "A_log");
    if (k >= 0) {  // decays a = exp(-A softplus(.)) in a useful range: A around 0.1 .. 1
        const ParamTensor *t = &L->pt.t[k];
        for (size_t i = 0; i < t->numel; i++) L->params[t->offset + i] = -1.0f + 0.5f * gc_normal(r);
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

// the defaults: deltanet without output gate, gated_deltanet with gate, A_log and dt_bias in range, no decay on them
static void test_defaults(void) {
    Layer L;
    if (layer_build_(&L, "{\"kind\": \"gated_deltanet\"}", 16, 7) == 0) {
        CHECK(param_index_(&L, "g_proj") >= 0 && param_index_(&L, "q_conv1d") >= 0, "gated_deltanet: g_proj, convs");
        int ka = param_index_(&L, "A_log"), kd = param_index_(&L, "dt_bias");
        CHECK(ka >= 0 && kd >= 0 && !L.pt.t[ka].decay && !L.pt.t[kd].decay, "A_log, dt_bias: no weight decay");
        int ok = 1;
        for (size_t i = 0; ka >= 0 && kd >= 0 && i < L.pt.t[ka].numel; i++) {
            double A = exp(L.params[L.pt.t[ka].offset + i]), db = L.params[L.pt.t[kd].offset + i];
            double dt = db > 30 ? db : log1p(exp(db));
            ok &= A > 0 && A < 16 && dt >= 1e-4 * 0.999 && dt <= 0.1 * 1.001;
        }
        CHECK(ok, "A in (0,16), softplus(dt_bias) in [1e-4, 0.1]");
        CHECK(L.pt.t[param_index_(&L, "v_proj")].shape[0] == 32, "gated_deltanet: expand_v 2 by default");
        layer_free_(&L);
    }
    if (layer_build_(&L, "{\"kind\": \"deltanet\"}", 16, 7) == 0) {
        CHECK(param_index_(&L, "g_proj") < 0 && param_index_(&L, "A_log") < 0, "deltanet: no gate, no decay");
        layer_free_(&L);
    }
}

// long sequences with strong writes and fast or no decay: outputs and every gradient stay finite
static void test_long(void) {
    const char *specs[2] = {"{\"kind\": \"deltanet\", \"heads\": 2, \"allow_neg_eigval\": true, \"init_std\": 1}",
                            "{\"kind\": \"gated_deltanet\", \"heads\": 2, \"init_std\": 1, \"A_init_lo\": 1e-3}"};
    for (int i = 0; i < 2; i++) {
        Layer L;
        if (layer_build_(&L, specs[i], 8, 21)) continue;
        layer_shape_(&L, 1, 4096);
        GcRng r = {22};
        CHECK(layer_grads_finite(&L, &r), "%s at T = 4096: outputs and gradients finite", specs[i]);
        layer_free_(&L);
    }
}

static void test_bad_options(void) {
    layer_check_error("{\"kind\": \"deltanet\", \"heads\": 3}", 16, "model.mixer.expand_k");
    layer_check_error("{\"kind\": \"gated_deltanet\", \"heads\": 5}", 16, "not a multiple of heads 5");
    layer_check_error("{\"kind\": \"deltanet\", \"chunk\": 0}", 16, "model.mixer.chunk");
    layer_check_error("{\"kind\": \"deltanet\", \"allow_neg_eigval\": 2}", 16, "model.mixer.allow_neg_eigval");
    layer_check_error("{\"kind\": \"deltanet\", \"beta_scale\": 2}", 16, "beta_scale");
    layer_check_error("{\"kind\": \"deltanet\", \"A_init_hi\": 4}", 16, "A_init_hi");
    layer_check_error("{\"kind\": \"gated_deltanet\", \"A_init_lo\": 8, \"A_init_hi\": 4}", 16, "model.mixer.A_init_lo");
    layer_check_error("{\"kind\": \"gated_deltanet\", \"dt_min\": 0.5}", 16, "model.mixer.dt_min");
    layer_check_error("{\"kind\": \"gated_deltanet\", \"conv\": -1}", 16, "model.mixer.conv");
}

int main(void) {
    test_gradients();
    test_chunk_invariance();
    test_step();
    test_defaults();
    test_long();
    test_bad_options();
    return test_summary();
}
