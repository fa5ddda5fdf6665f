/*
 * Selective RoPE (nn/selrope.h, the option block mixers/selrope.h on gla, gated_deltanet and attention):
 *   - the op against a naive double reference (cumulative angles, half-split rotation, carried offset) and its
 *     gradient check in q, k and phi (through the temperature and the cumulative sum);
 *   - each mixer with the option: gradient checks of dx and every tensor (low rank and full rank, conv with and
 *     without silu, skip_conv, bias, gate, both temperature spectra);
 *   - gla and gated_deltanet: the chunk size changes nothing and token-by-token decoding reproduces the forward;
 *   - bad options stop with the key path.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixer_layer.h"
#include "nn/selrope.h"

#define GC_H 3e-3

// ----------------------------------------------------------------------------
// the op

typedef struct OpCtx {
    int B, T, H, R;
    float *q, *k, *phi, *temp, *off, *theta, *yq, *yk, *dyq, *dyk, *cs, *sn;
} OpCtx;

static double op_loss_(void *p) {
    OpCtx *c = p;
    size_t n = (size_t)c->B * c->T * c->H * 2 * c->R;
    selrope_angles(c->theta, NULL, c->phi, c->temp, c->off, c->B, c->T, c->H, c->R);
    selrope_cossin(c->cs, c->sn, c->theta, (size_t)c->B * c->T * c->H * c->R);
    selrope_rotate(c->yq, c->q, c->cs, c->sn, c->B * c->T, c->H, c->R);
    selrope_rotate(c->yk, c->k, c->cs, c->sn, c->B * c->T, c->H, c->R);
    return gc_dot(c->dyq, c->yq, n) + gc_dot(c->dyk, c->yk, n);
}

static void test_op(void) {
    int B = 2, T = 9, H = 3, R = 4, HR = H * R;
    size_t n = (size_t)B * T * H * 2 * R, na = (size_t)B * T * HR;
    GcRng r = {7};
    OpCtx c = {B, T, H, R, gc_randn(&r, n, 1), gc_randn(&r, n, 1), gc_randn(&r, na, 1), malloc(R * sizeof(float)),
               gc_randn(&r, (size_t)B * HR, 1), malloc(na * sizeof(float)), malloc(n * sizeof(float)),
               malloc(n * sizeof(float)), gc_randn(&r, n, 1), gc_randn(&r, n, 1), malloc(na * sizeof(float)),
               malloc(na * sizeof(float))};
    for (int i = 0; i < R; i++) c.temp[i] = (float)pow(0.3, i);
    op_loss_(&c);
    // naive reference in double
    double worst = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < R; i++) {
                double acc = c.off[(size_t)b * HR + h * R + i];
                for (int t = 0; t < T; t++) {
                    acc += c.phi[((size_t)b * T + t) * HR + h * R + i];
                    double th = c.temp[i] * acc;
                    const float *x = c.q + (((size_t)b * T + t) * H + h) * 2 * R;
                    const float *y = c.yq + (((size_t)b * T + t) * H + h) * 2 * R;
                    double y0 = x[i] * cos(th) - x[i + R] * sin(th), y1 = x[i] * sin(th) + x[i + R] * cos(th);
                    worst = fmax(worst, fmax(fabs(y0 - y[i]), fabs(y1 - y[i + R])));
                }
            }
    CHECK(worst < 1e-5, "selrope op = naive double reference (max|d| %.2g)", worst);
    // carried offset: two halves with the state between them give the whole
    float *last = malloc((size_t)B * HR * sizeof(float)), *th2 = malloc(na * sizeof(float));
    float *ph1 = malloc((size_t)B * 4 * HR * sizeof(float)), *ph2 = malloc((size_t)B * (T - 4) * HR * sizeof(float));
    for (int b = 0; b < B; b++) {
        memcpy(ph1 + (size_t)b * 4 * HR, c.phi + (size_t)b * T * HR, 4 * HR * sizeof(float));
        memcpy(ph2 + (size_t)b * (T - 4) * HR, c.phi + ((size_t)b * T + 4) * HR, (T - 4) * HR * sizeof(float));
    }
    selrope_angles(th2, last, ph1, c.temp, c.off, B, 4, H, R);
    selrope_angles(th2, NULL, ph2, c.temp, last, B, T - 4, H, R);
    double wc = 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < (T - 4) * HR; i++)
            wc = fmax(wc, fabs(th2[(size_t)b * (T - 4) * HR + i] - c.theta[((size_t)b * T + 4) * HR + i]));
    CHECK(wc < 1e-5, "angles carried across a split = one pass (max|d| %.2g)", wc);
    // gradients
    float *dq = malloc(n * sizeof(float)), *dk = malloc(n * sizeof(float)), *dth = calloc(na, sizeof(float));
    float *dphi = malloc(na * sizeof(float));
    selrope_rotate_backward(dq, dth, c.dyq, c.yq, c.cs, c.sn, B * T, H, R);
    selrope_rotate_backward(dk, dth, c.dyk, c.yk, c.cs, c.sn, B * T, H, R);
    selrope_angles_backward(dphi, dth, c.temp, B, T, H, R);
    gradcheck_buffer("selrope op: dq", c.q, dq, n, op_loss_, &c, 1e-3, 1e-2, 1e-4, 3, 4, 1);
    gradcheck_buffer("selrope op: dk", c.k, dk, n, op_loss_, &c, 1e-3, 1e-2, 1e-4, 3, 4, 2);
    gradcheck_buffer("selrope op: dphi", c.phi, dphi, na, op_loss_, &c, 1e-2, 1e-2, 1e-4, 3, 4, 3);
    // in place: dinp may alias dout
    memcpy(dk, c.dyq, n * sizeof(float));
    memset(dth, 0, na * sizeof(float));
    selrope_rotate_backward(dk, dth, dk, c.yq, c.cs, c.sn, B * T, H, R);
    double wi = 0;
    for (size_t i = 0; i < n; i++) wi = fmax(wi, fabs(dk[i] - dq[i]));
    CHECK(wi == 0, "rotate backward in place = out of place");
    free(c.q); free(c.k); free(c.phi); free(c.temp); free(c.off); free(c.theta); free(c.yq); free(c.yk);
    free(c.dyq); free(c.dyk); free(c.cs); free(c.sn); free(last); free(th2); free(ph1); free(ph2); free(dq); free(dk); free(dth); free(dphi);
}

// ----------------------------------------------------------------------------
// the mixers

#define SR_(x) "\"selective_rope\": {\"enabled\": true" x "}"
static const char *const CASES_[][2] = {
    {"gla selrope", "{\"kind\": \"gla\", \"heads\": 2, \"gate_rank\": 3, \"gate_normalizer\": 2, \"expand_k\": 1, \"norm_eps\": 0.01, "
                    SR_(", \"phi_proj_rank\": 4, \"temp_theta\": 10") "}"},
    {"gla selrope full rank silu bias gate",
     "{\"kind\": \"gla\", \"heads\": 2, \"gate_rank\": 3, \"gate_normalizer\": 2, \"expand_k\": 1, \"norm_eps\": 0.01, "
     SR_(", \"full_rank\": true, \"conv_act\": \"silu\", \"use_bias\": true, \"use_gate\": true, \"temp_theta\": 10") "}"},
    {"gla selrope no conv skip rfa", "{\"kind\": \"gla\", \"heads\": 2, \"gate_rank\": 3, \"gate_normalizer\": 2, \"norm_eps\": 0.01, "
                                     "\"expand_k\": 1, " SR_(", \"conv\": false, \"skip_conv\": true, \"temp_type\": "
                                                            "\"rfa\", \"temp_theta\": 3, \"phi_proj_rank\": 3") "}"},
    {"gated_deltanet selrope", "{\"kind\": \"gated_deltanet\", \"heads\": 2, \"norm_eps\": 0.01, "
                               SR_(", \"phi_proj_rank\": 4, \"temp_theta\": 10") "}"},
    {"gated_deltanet selrope skip bias gate full rank",
     "{\"kind\": \"gated_deltanet\", \"heads\": 2, \"norm_eps\": 0.01, "
     SR_(", \"full_rank\": true, \"skip_conv\": true, \"use_bias\": true, \"use_gate\": true, \"temp_theta\": 10") "}"},
};
#define N_CASES_ ((int)(sizeof CASES_ / sizeof CASES_[0]))

static const char *const ATT_CASES_[][2] = {
    {"fox selrope", "{\"kind\": \"attention\", \"heads\": 2, \"pos\": \"fox\", "
                    SR_(", \"phi_proj_rank\": 4, \"temp_theta\": 10") "}"},
    {"nope selrope qk_norm gate rfa", "{\"kind\": \"attention\", \"heads\": 2, \"pos\": \"none\", \"qk_norm\": true, "
                                      SR_(", \"use_gate\": true, \"use_bias\": true, \"conv_act\": \"silu\", "
                                          "\"temp_type\": \"rfa\", \"temp_theta\": 3") "}"},
    {"fox selrope full rank skip", "{\"kind\": \"attention\", \"heads\": 2, \"head_dim\": 6, \"pos\": \"fox\", "
                                   SR_(", \"full_rank\": true, \"skip_conv\": true, \"temp_theta\": 10") "}"},
};
#define N_ATT_CASES_ ((int)(sizeof ATT_CASES_ / sizeof ATT_CASES_[0]))

// every parameter off its init; the q, k, v convs of gated_deltanet large enough that the L2-normed rows are O(1)
static void perturb_(Layer *L, GcRng *r, float std) {
    layer_perturb(L, r, std);
    const char *convs[3] = {"q_conv1d", "k_conv1d", "v_conv1d"};
    for (int c = 0; c < 3; c++) {
        int kc = param_index_(L, convs[c]);
        for (size_t i = 0; kc >= 0 && i < L->pt.t[kc].numel; i++) L->params[L->pt.t[kc].offset + i] += 0.5f * gc_normal(r);
    }
    int k = param_index_(L, "A_log");
    if (k >= 0) {
        const ParamTensor *t = &L->pt.t[k];
        for (size_t i = 0; i < t->numel; i++) L->params[t->offset + i] = -1.0f + 0.5f * gc_normal(r);
    }
}

static void gradients_(const char *const (*cases)[2], int n, int seed0) {
    for (int i = 0; i < n; i++) {
        Layer L;
        if (layer_build_(&L, cases[i][1], 8, 3)) continue;
        layer_shape_(&L, 2, 11);
        GcRng r = {(uint64_t)(seed0 + i)};
        perturb_(&L, &r, 0.2f);
        layer_gradcheck_carried(&L, cases[i][0], &r, GC_H, 1e-3);
        layer_free_(&L);
    }
}

static void perturb_chunks_(Layer *L, GcRng *r) { perturb_(L, r, 0.2f); }
static void perturb_step_(Layer *L, GcRng *r) { perturb_(L, r, 0.1f); }

static void test_bad_options(void) {
    layer_check_error("{\"kind\": \"gla\", \"expand_k\": 1, \"rotate\": true, " SR_("") "}", 16,
                      "model.mixer.selective_rope.enabled");
    layer_check_error("{\"kind\": \"gla\", " SR_(", \"phi_rank\": 4") "}", 16, "model.mixer.selective_rope.phi_rank");
    layer_check_error("{\"kind\": \"gla\", " SR_(", \"temp_type\": \"yarn\"") "}", 16,
                      "model.mixer.selective_rope.temp_type");
    layer_check_error("{\"kind\": \"gla\", " SR_(", \"conv\": false, \"conv_act\": \"silu\"") "}", 16,
                      "model.mixer.selective_rope.conv_act");
    layer_check_error("{\"kind\": \"gated_deltanet\", " SR_(", \"phi_proj_rank\": 0") "}", 16,
                      "model.mixer.selective_rope.phi_proj_rank");
    layer_check_error("{\"kind\": \"attention\", \"pos\": \"rope\", " SR_("") "}", 16, "model.mixer.pos");
    layer_check_error("{\"kind\": \"attention\", \"heads\": 3, \"head_dim\": 4, \"pos\": \"fox\", " SR_("") "}", 16,
                      "model.mixer.selective_rope");
    layer_check_error("{\"kind\": \"attention\", \"heads\": 2, \"head_dim\": 5, \"pos\": \"none\", " SR_("") "}", 16,
                      "even");
    layer_check_error("{\"kind\": \"gated_deltanet\", \"selective_rope\": true}", 16, "model.mixer.selective_rope");
}

int main(void) {
    test_op();
    gradients_(CASES_, N_CASES_, 40);
    gradients_(ATT_CASES_, N_ATT_CASES_, 70);
    layer_cases_chunk_invariance(CASES_, N_CASES_, perturb_chunks_);
    layer_cases_decode(CASES_, N_CASES_, perturb_step_);
    test_bad_options();
    return test_summary();
}
