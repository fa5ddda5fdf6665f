/*
 * Selective RoPE (nn/selrope.h, the option block mixers/selrope.h on gla, gated_deltanet and attention):
 *   - the op (the angle chain: conv, silu, skip, bias, gate, cumulative sum, cos and sin; the half-split rotation)
 *     against a naive double reference, from a carried state and split in two calls with the state between them,
 *     and its gradient checks in q, k, p, the conv weights, exp(bias) and the gate; bare (the cumulative sum
 *     only) and with every step of the chain;
 *   - each mixer with the option: gradient checks of dx and every tensor (low rank and full rank, conv with and
 *     without silu, skip_conv, bias, gate, both temperature spectra);
 *   - gla and gated_deltanet: the chunk size changes nothing and token-by-token decoding reproduces the forward;
 *   - the temperature spectra are the authors' (rfa: 0 < theta < 1, rope: theta >= 1), worked out by hand;
 *   - skip_conv is the authors': no conv tensor, no conv history, the first difference in its place;
 *   - bad options stop with the key path (rfa theta >= 1, where the spectrum has its pole, among them).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixer_layer.h"
#include "mixers/linear.h"
#include "mixers/selrope.h"
#include "nn/selrope.h"

#define GC_H 3e-3

// ----------------------------------------------------------------------------
// the op

typedef struct OpCtx {
    int B, T, H, R;
    SelRopeChain ch;
    float *q, *k, *p, *conv, *ebias, *gate, *temp, *yq, *yk, *dyq, *dyk, *cs, *sn, *csave, *fsave;
} OpCtx;

static double op_loss_(void *v) {
    OpCtx *c = v;
    size_t n = (size_t)c->B * c->T * c->H * 2 * c->R;
    selrope_angles(c->cs, c->sn, c->csave, c->fsave, NULL, 0, c->p, c->gate, &c->ch, c->B, c->T);
    selrope_rotate(c->yq, c->q, c->cs, c->sn, c->B * c->T, c->H, c->R);
    selrope_rotate(c->yk, c->k, c->cs, c->sn, c->B * c->T, c->H, c->R);
    return gc_dot(c->dyq, c->yq, n) + gc_dot(c->dyk, c->yk, n);
}

// the chain of nn/selrope.h in double, for channel i of sequence b: theta (T) from p, offset the carried angle sum
static void op_reference_(const OpCtx *c, int b, int i, double offset, double *theta) {
    int HR = c->H * c->R, K = c->ch.K;
    double acc = offset, prev = 0;
    for (int t = 0; t < c->T; t++) {
        double a = K ? 0 : c->p[((size_t)b * c->T + t) * HR + i];
        for (int j = 0; j < K; j++) {
            int s = t - (K - 1) + j;
            if (s >= 0) a += (double)c->conv[(size_t)i * K + j] * c->p[((size_t)b * c->T + s) * HR + i];
        }
        if (c->ch.silu) a = a / (1 + exp(-a));
        double f = c->ch.skip ? a - prev : a;
        prev = a;
        if (c->ch.ebias) f += c->ebias[i];
        if (c->gate) f *= c->gate[((size_t)b * c->T + t) * c->H + i / c->R];
        acc += f;
        theta[t] = c->temp[i % c->R] * acc;
    }
}

// the op against the double reference, carried state across a split, and the gradient checks of q, k, p, the conv
// weights, exp(bias) and the gate values. kind 0: the bare cumulative sum (no conv); 1: every step (conv, silu, skip,
// bias, gate) on 80 channels, one full block of nn/selrope.c's and a partial one; 2: the default chain (conv only) on
// one full block
static void test_op(int kind) {
    int full = kind == 1, conv = kind > 0;
    int B = 2, T = 9, H = kind == 0 ? 3 : kind == 1 ? 5 : 4, R = kind == 0 ? 4 : 16, HR = H * R, K = conv ? 4 : 0;
    size_t n = (size_t)B * T * H * 2 * R, na = (size_t)B * T * HR;
    GcRng r = {7 + (uint64_t)kind};
    OpCtx c = {B, T, H, R, {0}, gc_randn(&r, n, 1), gc_randn(&r, n, 1), gc_randn(&r, na, 1), NULL, NULL, NULL,
               malloc(R * sizeof(float)), malloc(n * sizeof(float)), malloc(n * sizeof(float)), gc_randn(&r, n, 1),
               gc_randn(&r, n, 1), malloc(na * sizeof(float)), malloc(na * sizeof(float)), NULL, NULL};
    for (int i = 0; i < R; i++) c.temp[i] = (float)pow(0.3, i);
    if (conv) c.conv = gc_randn(&r, (size_t)HR * K, 0.5f);
    if (full) {
        c.ebias = gc_randn(&r, HR, 0.3f);
        for (int i = 0; i < HR; i++) c.ebias[i] = expf(c.ebias[i]);
        c.gate = gc_randn(&r, (size_t)B * T * H, 1);
        for (size_t i = 0; i < (size_t)B * T * H; i++) c.gate[i] = 1.0f / (1.0f + expf(-c.gate[i]));
        c.csave = malloc(na * sizeof(float));
        c.fsave = malloc(na * sizeof(float));
    }
    c.ch = (SelRopeChain){.H = H, .R = R, .K = K, .silu = full, .skip = full, .conv = c.conv, .ebias = c.ebias,
                          .temp = c.temp};
    const char *name = kind == 0 ? "selrope op" : full ? "selrope op (conv silu skip bias gate)" : "selrope op (conv)";
    op_loss_(&c);
    double worst = 0, *th = malloc(T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int i = 0; i < HR; i++) {
            op_reference_(&c, b, i, 0.0, th);
            int h = i / R, ri = i % R;
            for (int t = 0; t < T; t++) {
                const float *x = c.q + (((size_t)b * T + t) * H + h) * 2 * R;
                const float *y = c.yq + (((size_t)b * T + t) * H + h) * 2 * R;
                double y0 = x[ri] * cos(th[t]) - x[ri + R] * sin(th[t]), y1 = x[ri] * sin(th[t]) + x[ri + R] * cos(th[t]);
                worst = fmax(worst, fmax(fabs(y0 - y[ri]), fabs(y1 - y[ri + R])));
            }
        }
    CHECK(worst < 1e-5, "%s = naive double reference (max|d| %.2g)", name, worst);
    // the carried state: an offset (and a history) in it, then two parts with the state between them = one pass
    size_t ss = selrope_chain_state_size(&c.ch);
    float *st = calloc((size_t)B * ss, sizeof(float)), *cs1 = malloc(na * sizeof(float)), *sn1 = malloc(na * sizeof(float));
    float *cs2 = malloc(na * sizeof(float)), *sn2 = malloc(na * sizeof(float));
    for (int b = 0; b < B; b++)
        for (int i = 0; i < HR; i++) st[(size_t)b * ss + i] = 0.5f * gc_normal(&r);
    float *st0 = malloc((size_t)B * ss * sizeof(float));
    memcpy(st0, st, (size_t)B * ss * sizeof(float));
    selrope_angles(cs1, sn1, NULL, NULL, st, ss, c.p, c.gate, &c.ch, B, T);  // one pass from the offset
    double wo = 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < HR; i++) {
            op_reference_(&c, b, i, st0[(size_t)b * ss + i], th);
            for (int t = 0; t < T; t++) {
                size_t at = ((size_t)b * T + t) * HR + i;
                wo = fmax(wo, fmax(fabs(cs1[at] - cos(th[t])), fabs(sn1[at] - sin(th[t]))));
            }
        }
    CHECK(wo < 1e-5, "%s: from a carried offset = reference (max|d| %.2g)", name, wo);
    // the same in two calls of 4 and T - 4 tokens (the state carries the sums, conv window and last a)
    int T1 = 4, T2 = T - T1;
    float *p1 = malloc((size_t)B * T1 * HR * sizeof(float)), *p2 = malloc((size_t)B * T2 * HR * sizeof(float));
    float *g1 = malloc((size_t)B * T1 * H * sizeof(float)), *g2 = malloc((size_t)B * T2 * H * sizeof(float));
    for (int b = 0; b < B; b++) {
        memcpy(p1 + (size_t)b * T1 * HR, c.p + (size_t)b * T * HR, (size_t)T1 * HR * sizeof(float));
        memcpy(p2 + (size_t)b * T2 * HR, c.p + ((size_t)b * T + T1) * HR, (size_t)T2 * HR * sizeof(float));
        if (full) {
            memcpy(g1 + (size_t)b * T1 * H, c.gate + (size_t)b * T * H, (size_t)T1 * H * sizeof(float));
            memcpy(g2 + (size_t)b * T2 * H, c.gate + ((size_t)b * T + T1) * H, (size_t)T2 * H * sizeof(float));
        }
    }
    memcpy(st, st0, (size_t)B * ss * sizeof(float));
    selrope_angles(cs2, sn2, NULL, NULL, st, ss, p1, full ? g1 : NULL, &c.ch, B, T1);
    float *cs3 = malloc((size_t)B * T2 * HR * sizeof(float)), *sn3 = malloc((size_t)B * T2 * HR * sizeof(float));
    selrope_angles(cs3, sn3, NULL, NULL, st, ss, p2, full ? g2 : NULL, &c.ch, B, T2);
    double wc = 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T1 * HR; i++) {
            size_t one = (size_t)b * T * HR + i, two = (size_t)b * T1 * HR + i;
            wc = fmax(wc, fmax(fabs(cs2[two] - cs1[one]), fabs(sn2[two] - sn1[one])));
        }
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T2 * HR; i++) {
            size_t one = ((size_t)b * T + T1) * HR + i, two = (size_t)b * T2 * HR + i;
            wc = fmax(wc, fmax(fabs(cs3[two] - cs1[one]), fabs(sn3[two] - sn1[one])));
        }
    CHECK(wc < 1e-5, "%s: carried across a split = one pass (max|d| %.2g)", name, wc);
    // gradients
    float *dq = malloc(n * sizeof(float)), *dk = malloc(n * sizeof(float)), *dth = calloc(na, sizeof(float));
    float *dp = malloc(na * sizeof(float)), *dconv = calloc((size_t)HR * (K ? K : 1), sizeof(float));
    float *dsum = malloc(HR * sizeof(float)), *dgc = malloc(na * sizeof(float));
    float *work = malloc(selrope_angles_work_size(&c.ch, B) * sizeof(float));
    op_loss_(&c);
    selrope_rotate_backward(dq, dth, c.dyq, c.yq, c.cs, c.sn, B * T, H, R);
    selrope_rotate_backward(dk, dth, c.dyk, c.yk, c.cs, c.sn, B * T, H, R);
    selrope_angles_backward(dp, K ? dconv : NULL, full ? dsum : NULL, full ? dgc : NULL, work, dth, c.p, c.csave,
                            c.fsave, c.gate, &c.ch, B, T);
    char what[96];  // L is linear in q and k: a large step has no truncation error and less rounding noise
    snprintf(what, sizeof what, "%s: dq", name);
    gradcheck_buffer(what, c.q, dq, n, op_loss_, &c, 1e-1, 1e-2, 1e-4, 3, 4, 1);
    snprintf(what, sizeof what, "%s: dk", name);
    gradcheck_buffer(what, c.k, dk, n, op_loss_, &c, 1e-1, 1e-2, 1e-4, 3, 4, 2);
    // dp with the whole chain: the random directions' float differences carry up to ~4e-4 of rounding through the
    // cumulative angles (direction 2 here: -0.01721 against -0.0175588; a double difference of op_reference_'s chain
    // gives -0.0175588), hence atol 1e-3 there; every element is also checked on its own
    snprintf(what, sizeof what, "%s: dp", name);
    gradcheck_buffer(what, c.p, dp, na, op_loss_, &c, 1e-2, 1e-2, full ? 1e-3 : 1e-4, 3, (int)na, 3);
    if (conv) {
        snprintf(what, sizeof what, "%s: dconv", name);
        gradcheck_buffer(what, c.conv, dconv, (size_t)HR * K, op_loss_, &c, 1e-2, 1e-2, 1e-4, 3, 4, 4);
    }
    if (full) {
        float *dg = malloc((size_t)B * T * H * sizeof(float));
        for (size_t j = 0; j < (size_t)B * T * H; j++) {
            double a = 0;
            for (int i = 0; i < R; i++) a += dgc[j * R + i];
            dg[j] = (float)a;
        }
        gradcheck_buffer("selrope op (conv silu skip bias gate): d exp(bias)", c.ebias, dsum, HR, op_loss_, &c, 1e-2,
                         1e-2, 1e-4, 3, 4, 5);
        gradcheck_buffer("selrope op (conv silu skip bias gate): dgate", c.gate, dg, (size_t)B * T * H, op_loss_, &c,
                         1e-2, 1e-2, 1e-4, 3, 4, 6);
        free(dg);
    }
    // in place: dinp may alias dout, dp may alias dtheta
    memcpy(dk, c.dyq, n * sizeof(float));
    float *dth2 = calloc(na, sizeof(float));
    selrope_rotate_backward(dk, dth2, dk, c.yq, c.cs, c.sn, B * T, H, R);
    double wi = 0;
    for (size_t i = 0; i < n; i++) wi = fmax(wi, fabs(dk[i] - dq[i]));
    selrope_rotate_backward(dq, dth2, c.dyk, c.yk, c.cs, c.sn, B * T, H, R);
    memset(dconv, 0, (size_t)HR * (K ? K : 1) * sizeof(float));
    selrope_angles_backward(dth2, K ? dconv : NULL, full ? dsum : NULL, full ? dgc : NULL, work, dth2, c.p, c.csave,
                            c.fsave, c.gate, &c.ch, B, T);
    for (size_t i = 0; i < na; i++) wi = fmax(wi, fabs(dth2[i] - dp[i]));
    CHECK(wi == 0, "%s: rotate backward and angles backward in place = out of place", name);
    free(c.q); free(c.k); free(c.p); free(c.conv); free(c.ebias); free(c.gate); free(c.temp); free(c.yq); free(c.yk);
    free(c.dyq); free(c.dyk); free(c.cs); free(c.sn); free(c.csave); free(c.fsave); free(th); free(st); free(st0);
    free(cs1); free(sn1); free(cs2); free(sn2); free(cs3); free(sn3); free(p1); free(p2); free(g1); free(g2); free(dq);
    free(dk); free(dth); free(dth2); free(dp); free(dconv); free(dsum); free(dgc); free(work);
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
    {"gla selrope no conv rfa", "{\"kind\": \"gla\", \"heads\": 2, \"gate_rank\": 3, \"gate_normalizer\": 2, \"norm_eps\": 0.01, "
                                "\"expand_k\": 1, " SR_(", \"conv\": false, \"temp_type\": \"rfa\", \"temp_theta\": 0.6, "
                                                       "\"phi_proj_rank\": 3") "}"},
    {"gla selrope skip_conv rfa", "{\"kind\": \"gla\", \"heads\": 2, \"gate_rank\": 3, \"gate_normalizer\": 2, \"norm_eps\": 0.01, "
                                  "\"expand_k\": 1, " SR_(", \"skip_conv\": true, \"temp_type\": \"rfa\", \"temp_theta\": 0.9, "
                                                         "\"phi_proj_rank\": 2") "}"},
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
                                          "\"temp_type\": \"rfa\", \"temp_theta\": 0.75") "}"},
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

// the temperatures selrope_check derives, against the authors' formulas worked out by hand (Dk 8, R 4):
// rfa theta 0.5: p = 0, pi/6, pi/3, pi/2, tan(p/2) / tan(pi/4) = 0, tan(pi/12), tan(pi/6), 1, times temp_max 2;
// rope theta 100: 1 / 100^(2r/8) = 1, 0.1^(1/2), 0.1, 0.1^(3/2)
static void test_temperatures(void) {
    const char *types[2] = {"rfa", "rope"};
    const double thetas[2] = {0.5, 100.0}, maxes[2] = {2.0, 1.0};
    const double want[2][4] = {{0.0, 2 * tan(M_PI / 12), 2 * tan(M_PI / 6), 2.0},
                               {1.0, pow(0.1, 0.5), 0.1, pow(0.1, 1.5)}};
    for (int c = 0; c < 2; c++) {
        SelRopeOpts s = {.enabled = 1, .rank = 4, .conv = 1, .temp_theta = thetas[c], .temp_max = maxes[c]};
        strcpy(s.conv_act, "none");
        strcpy(s.temp_type, types[c]);
        int k = 0;
        Err e = {{0}};
        int rc = selrope_check(&s, "model.mixer", 16, 2, 8, &k, &e);
        CHECK(rc == 0, "%s theta %g accepted (%.200s)", types[c], thetas[c], e.msg);
        double worst = 0;
        for (int r = 0; r < 4; r++) worst = fmax(worst, fabs(s.temp[r] - want[c][r]));
        CHECK(rc == 0 && worst < 1e-6, "%s theta %g: the authors' temperatures (max|diff| %.2g < 1e-6)", types[c],
              thetas[c], worst);
    }
}

// skip_conv replaces the conv (the authors' SelectiveRoPE): no phi_conv tensor, and the decoding state holds the
// angle sums and the last p only, not the conv history; conv false alone keeps neither
static void test_skip_conv(void) {
    const char *json[3] = {"{\"kind\": \"gla\", \"heads\": 2, " SR_("") "}",
                           "{\"kind\": \"gla\", \"heads\": 2, " SR_(", \"skip_conv\": true") "}",
                           "{\"kind\": \"gla\", \"heads\": 2, " SR_(", \"conv\": false") "}"};
    const int has_conv[3] = {1, 0, 0};
    const size_t state[3] = {4 * 4, 2 * 4, 4};  // H R = 4 at C 16, 2 heads, expand_k 0.5: sums + (history | last p)
    for (int i = 0; i < 3; i++) {
        Layer L;
        if (layer_build_(&L, json[i], 16, 3)) continue;
        const SelRopeOpts *s = &((const LinOpts *)L.spec.opts)->sr;
        CHECK((param_index_(&L, "selective_rope.phi_conv") >= 0) == has_conv[i], "%s: phi_conv %s", json[i],
              has_conv[i] ? "declared" : "absent");
        CHECK(selrope_state_size(s) == state[i], "%s: the decoding state is %zu floats (got %zu)", json[i], state[i],
              selrope_state_size(s));
        layer_free_(&L);
    }
}

static void test_bad_options(void) {
    layer_check_error("{\"kind\": \"gla\", \"expand_k\": 1, \"rotate\": true, " SR_("") "}", 16,
                      "model.mixer.selective_rope.enabled");
    layer_check_error("{\"kind\": \"gla\", " SR_(", \"phi_rank\": 4") "}", 16, "model.mixer.selective_rope.phi_rank");
    layer_check_error("{\"kind\": \"gla\", " SR_(", \"temp_type\": \"yarn\"") "}", 16,
                      "model.mixer.selective_rope.temp_type");
    layer_check_error("{\"kind\": \"gla\", " SR_(", \"conv\": false, \"conv_act\": \"silu\"") "}", 16,
                      "model.mixer.selective_rope.conv_act");
    layer_check_error("{\"kind\": \"gla\", " SR_(", \"skip_conv\": true, \"conv_act\": \"silu\"") "}", 16,
                      "model.mixer.selective_rope.conv_act");
    // rfa's poles (theta >= 1), RoPE's base below 1, and rfa with one pair (its only temperature is 0)
    layer_check_error("{\"kind\": \"gla\", " SR_(", \"temp_type\": \"rfa\", \"temp_theta\": 3") "}", 16,
                      "model.mixer.selective_rope.temp_theta");
    layer_check_error("{\"kind\": \"gla\", " SR_(", \"temp_type\": \"rfa\", \"temp_theta\": 1") "}", 16,
                      "pole");
    layer_check_error("{\"kind\": \"gla\", " SR_(", \"temp_theta\": 0.5") "}", 16,
                      "model.mixer.selective_rope.temp_theta");
    layer_check_error("{\"kind\": \"gla\", \"heads\": 4, " SR_(", \"temp_type\": \"rfa\", \"temp_theta\": 0.5") "}",
                      16, "model.mixer.selective_rope.temp_type");
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
    test_op(0);
    test_op(1);
    test_op(2);
    gradients_(CASES_, N_CASES_, 40);
    gradients_(ATT_CASES_, N_ATT_CASES_, 70);
    layer_cases_chunk_invariance(CASES_, N_CASES_, perturb_chunks_);
    layer_cases_decode(CASES_, N_CASES_, perturb_step_);
    test_temperatures();
    test_skip_conv();
    test_bad_options();
    return test_summary();
}
