/*
 * BLA, Blurry Window Attention (the BLA paper; docs/mixers.md has the equations, options and tensors): softmax
 * attention over a fixed number of slots, 2M - 1 per head, into which keys and values are written through
 * the Dirichlet kernel of M Fourier modes with period P (the op: nn/bla.h). The paper has no public code;
 * this layer is the plain attention block around the op, as eq. 14 and Algorithm 1 state it:
 *
 *   q, k, v = row slices of x W_qkv^T   [short conv of `conv` taps over all three, then silu (FLA's short conv)]
 *
 * The projection is one fused (2 HK + HV, C) tensor and the short conv one depthwise conv over its width
 * (the same as three convs over q, k, v; mixers/shortconv.h gives the key, the taps and the cache's size).
 *   o = BLA(q, k, v)  per head, scores scaled by 1 / sqrt(Dk)      y = o W_o^T
 *
 * Without the conv and with expand_k = expand_v = 1 the tensors are exactly the attention mixer's (wqkv
 * (3HD, C), wo (C, HD), no biases), so the paper's exactness claims are checked against `attention` with the
 * same weights: P = L = 2M - 1 without decay is causal attention (Fig. 2b), P = 2M - 1 with decay is
 * sliding-window attention of 2M - 1 positions (section 3.3) (tests/test_bla.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mixers/bla.h"
#include "mixers/mixer.h"
#include "mixers/mixer_kit.h"
#include "mixers/shortconv.h"
#include "nn/activation.h"
#include "nn/bla.h"
#include "nn/conv.h"
#include "nn/matmul.h"

#define KEY_(...) MIXER_KEY(BlaOpts, __VA_ARGS__)
static const CfgKey BLA_KEYS_[] = {
    KEY_("heads", CFG_INT, heads, "1", 1, 1024, NULL, "Number of heads H (BLA paper: 1 or 2 on MQAR, 4 on RegBench)."),
    KEY_("modes", CFG_INT, modes, "8", 1, 2048, NULL,
         "Fourier modes M: each head keeps S = 2M - 1 key slots and 2M - 1 value slots (paper: M = 4 ... 64)."),
    KEY_("period", CFG_FLOAT, period, "0", 0, 1e9, NULL,
         "Period P of the fundamental mode in tokens, P >= 2M - 1; 0 = unset (P = resolution x (2M - 1)). "
         "Set period or resolution, not both."),
    KEY_("resolution", CFG_FLOAT, resolution, "0", 0, 1e6, NULL,
         "Token resolution P / (2M - 1) (eq. 18), >= 1; 0 = unset (2, the paper's optimum and its MQAR setting, "
         "unless period is set)."),
    KEY_("decay", CFG_BOOL, decay, "false", 0, 0, NULL,
         "Slots decay by 1 - D_{M,s}(t) as they are written (section 3.3); with P = 2M - 1 this is sliding-window "
         "attention. The paper runs MQAR without and RegBench with it."),
    SHORTCONV_KEY(BlaOpts, conv, "0", "the paper: no help for BLA on MQAR, off on RegBench"),
    KEY_("expand_k", CFG_FLOAT, expand_k, "1", 0.01, 64, NULL, "Key width H Dk = expand_k d_model (Dk = that / H)."),
    KEY_("expand_v", CFG_FLOAT, expand_v, "1", 0.01, 64, NULL, "Value width H Dv = expand_v d_model (Dv = that / H)."),
    KEY_("chunk", CFG_INT, chunk, "16", 1, 1 << 16, NULL,
         "Tokens per chunk of the chunked form (Algorithm 3): a speed/memory knob, results do not depend on it "
         "(16: with decay the in-chunk work is one exp per pair of tokens and slot, 2.4x less than at 64)."),
    KEY_("init_std", CFG_FLOAT, init_std, "0.02", 0, 10, NULL,
         "Std of the normal init of the projections and the conv (FLA's _init_weights, no depth scaling)."),
};
static const CfgSection BLA_SCHEMA_ = {"bla", "Options of the bla mixer.", BLA_KEYS_,
                                       (int)(sizeof BLA_KEYS_ / sizeof BLA_KEYS_[0])};

// ----------------------------------------------------------------------------
// options and parameters

static int bla_check_(MixerSpec *s, const char *path, Err *e) {
    BlaOpts *o = s->opts;
    o->H = o->heads;
    if (mixer_widths_resolve(path, s->C, o->H, o->expand_k, o->expand_v, &o->HK, &o->HV, e)) return -1;
    o->Dk = o->HK / o->H;
    o->Dv = o->HV / o->H;
    o->W = 2 * o->HK + o->HV;
    o->S = 2 * o->modes - 1;
    if ((long)o->H * o->S > BLA_MAX_HS)
        return err_set(e, "%s.modes: %d heads x %d slots (2M - 1, M = %d) is more than %d; allowed: M <= %d", path,
                       o->H, o->S, o->modes, BLA_MAX_HS, (BLA_MAX_HS / o->H + 1) / 2);
    if (o->period > 0 && o->resolution > 0)
        return err_set(e, "%s.resolution: %g and period %g are both set; set one (period = resolution x (2M - 1))",
                       path, o->resolution, o->period);
    if (o->resolution > 0 && o->resolution < 1)
        return err_set(e, "%s.resolution: %g is below 1 (a period shorter than 2M - 1 = %d); allowed: >= 1", path,
                       o->resolution, o->S);
    if (o->period > 0 && o->period < o->S)
        return err_set(e, "%s.period: %g is shorter than 2M - 1 = %d (M = %d), which the paper requires; allowed: "
                       ">= %d, or 0 (unset)", path, o->period, o->S, o->modes, o->S);
    o->P = o->period > 0 ? o->period : (o->resolution > 0 ? o->resolution : 2.0) * o->S;
    o->K = shortconv_taps(o->conv);
    int k = 0;
    o->k_w = k++;
    o->k_conv = o->K ? k++ : -1;
    o->k_o = k++;
    return 0;
}

static int bla_params_(const MixerSpec *s, ParamTable *pt, const char *prefix, int n_layers, Err *e) {
    const BlaOpts *o = s->opts;
    (void)n_layers;
    float std = (float)o->init_std;
    MIXER_ADD("wqkv", 2, ((int[]){o->W, s->C}), init_normal(std), 1);
    if (o->K) MIXER_ADD("conv1d", 2, ((int[]){o->W, o->K}), init_normal(std), 1);
    MIXER_ADD("wo", 2, ((int[]){s->C, o->HV}), init_normal(std), 1);
    return 0;
}

// ----------------------------------------------------------------------------
// saved activations

typedef struct BlaActs {
    float *xp, *cp;  // (BT,W) with the conv: the projection (its input) and its output (silu's input)
    float *q, *k;    // (BT,HK)
    float *v, *o;    // (BT,HV) the values and the op's output (wo's input)
    float *p;        // (BT,H,S) the slot weights
    float *ckpt;
} BlaActs;

static size_t bla_layout_(const MixerSpec *s, int B, int T, float *base, BlaActs *a) {
    const BlaOpts *o = s->opts;
    size_t BT = (size_t)B * T, n = 0;
    BlaActs t;
    if (!a) a = &t;
    BlaDims d = bla_dims(o, B, T);
    a->xp = mixer_take(base, &n, BT * o->W, o->K > 0);
    a->cp = mixer_take(base, &n, BT * o->W, o->K > 0);
    a->q = mixer_take(base, &n, BT * o->HK, 1);
    a->k = mixer_take(base, &n, BT * o->HK, 1);
    a->v = mixer_take(base, &n, BT * o->HV, 1);
    a->o = mixer_take(base, &n, BT * o->HV, 1);
    a->p = mixer_take(base, &n, BT * o->H * o->S, 1);
    a->ckpt = mixer_take(base, &n, bla_ckpt_size(&d), 1);
    return n;
}

static size_t bla_act_size_(const MixerSpec *s, int B, int T) { return bla_layout_(s, B, T, NULL, NULL); }

// forward: the projection (W); backward: do (HV), dq, dk, dv = dqkv (W), the conv's dc (W); then the op's work
static size_t bla_scratch_size_(const MixerSpec *s, int B, int T) {
    const BlaOpts *o = s->opts;
    BlaDims d = bla_dims(o, B, T);
    return (size_t)B * T * (o->HV + 3 * (size_t)o->W) + bla_work_size(&d, 1);
}

// ----------------------------------------------------------------------------
// the pieces forward, backward and step share

// qkv rows (R,W) -> q, k (R,HK), v (R,HV); bla_join_ the other way (overwrites qkv)
static void bla_split_(const BlaOpts *o, float *q, float *k, float *v, const float *qkv, size_t R) {
#pragma omp parallel for if (R * o->W >= 65536)
    for (size_t r = 0; r < R; r++) {
        const float *x = qkv + r * o->W;
        memcpy(q + r * o->HK, x, (size_t)o->HK * sizeof(float));
        memcpy(k + r * o->HK, x + o->HK, (size_t)o->HK * sizeof(float));
        memcpy(v + r * o->HV, x + 2 * o->HK, (size_t)o->HV * sizeof(float));
    }
}

static void bla_join_(const BlaOpts *o, float *qkv, const float *q, const float *k, const float *v, size_t R) {
#pragma omp parallel for if (R * o->W >= 65536)
    for (size_t r = 0; r < R; r++) {
        float *x = qkv + r * o->W;
        memcpy(x, q + r * o->HK, (size_t)o->HK * sizeof(float));
        memcpy(x + o->HK, k + r * o->HK, (size_t)o->HK * sizeof(float));
        memcpy(x + 2 * o->HK, v + r * o->HV, (size_t)o->HV * sizeof(float));
    }
}

// ----------------------------------------------------------------------------
// forward and backward

static void bla_forward_(Mixer *m, float *y, const float *x, int B, int T) {
    const BlaOpts *o = m->spec->opts;
    int C = m->spec->C, BT = B * T;
    size_t nW = (size_t)BT * o->W;
    BlaActs a;
    bla_layout_(m->spec, B, T, m->acts, &a);
    float *qkv = m->scratch, *work = qkv + nW;
    if (o->K) {
        matmul_forward(a.xp, x, mixer_param(m, o->k_w), NULL, BT, C, o->W);
        conv1d_causal_forward(a.cp, a.xp, mixer_param(m, o->k_conv), NULL, B, T, o->W, o->K);
        silu_forward(qkv, a.cp, nW);
    } else {
        matmul_forward(qkv, x, mixer_param(m, o->k_w), NULL, BT, C, o->W);
    }
    bla_split_(o, a.q, a.k, a.v, qkv, (size_t)BT);
    BlaDims d = bla_dims(o, B, T);
    bla_forward(a.o, a.p, a.ckpt, a.q, a.k, a.v, work, &d);
    matmul_forward(y, a.o, mixer_param(m, o->k_o), NULL, BT, o->HV, C);
}

static void bla_backward_(Mixer *m, float *dx, const float *dy, const float *x, int B, int T) {
    const BlaOpts *o = m->spec->opts;
    int C = m->spec->C, BT = B * T;
    size_t nW = (size_t)BT * o->W, nK = (size_t)BT * o->HK, nV = (size_t)BT * o->HV;
    BlaActs a;
    bla_layout_(m->spec, B, T, m->acts, &a);
    float *dO = m->scratch, *dq = dO + nV, *dk = dq + nK, *dv = dk + nK, *dqkv = dv + nV, *dc = dqkv + nW;
    float *work = dc + nW;
    memset(dO, 0, nV * sizeof(float));
    matmul_backward(dO, mixer_grad(m, o->k_o), NULL, dy, a.o, mixer_param(m, o->k_o), BT, o->HV, C);
    memset(dq, 0, (2 * nK + nV) * sizeof(float));
    BlaDims d = bla_dims(o, B, T);
    bla_backward(dq, dk, dv, dO, a.p, a.ckpt, a.q, a.k, a.v, work, &d);
    bla_join_(o, dqkv, dq, dk, dv, (size_t)BT);
    const float *dproj = dqkv;
    if (o->K) {
        memset(dc, 0, nW * sizeof(float));
        silu_backward(dc, a.cp, dqkv, nW);
        memset(dqkv, 0, nW * sizeof(float));  // dqkv is read: the conv's input gradient lands here
        conv1d_causal_backward(dqkv, mixer_grad(m, o->k_conv), NULL, dc, a.xp, mixer_param(m, o->k_conv), B, T, o->W,
                               o->K);
    }
    matmul_backward(dx, mixer_grad(m, o->k_w), NULL, dproj, x, mixer_param(m, o->k_w), BT, C, o->W);
}

// ----------------------------------------------------------------------------
// recurrent decoding: per sequence [the op's state (both passes' slots) | conv state (W, K-1)]; the weights c_t
// depend on the position t, which the decoder passes in

static size_t bla_op_state_(const BlaOpts *o) {
    BlaDims d = bla_dims(o, 1, 1);
    return bla_state_size(&d);
}

static size_t bla_state_size_(const MixerSpec *s, int cap) {
    const BlaOpts *o = s->opts;
    return bla_op_state_(o) + shortconv_state_size(o->HK, o->HV, o->K);
}

// Table 1's BLA row H(dk+dv)(2M-1) and its short-conv row
static void bla_state_terms_(const MixerSpec *s, int T, StateTerms *st) {
    const BlaOpts *o = s->opts;
    (void)T;
    state_terms_add(st, 1, bla_op_state_(o), "BLA slots", "H(dk+dv)(2M−1) = %d·(%d+%d)·%d", o->H, o->Dk, o->Dv, o->S);
    shortconv_state_terms(st, o->H, o->Dk, o->Dv, o->K);
}

static void bla_state_init_(const Mixer *m, float *state, int B, int cap) {
    memset(state, 0, (size_t)B * bla_state_size_(m->spec, cap) * sizeof(float));  // empty slots, zero conv
}

static void bla_step_(const Mixer *m, float *state, float *y, const float *x, int B, int t, int cap) {
    const BlaOpts *o = m->spec->opts;
    int C = m->spec->C;
    size_t n = bla_state_size_(m->spec, cap), os = bla_op_state_(o), bw = (size_t)B * o->W;
    float *buf = xmalloc((bw + 2 * (size_t)B * o->HK + 2 * (size_t)B * o->HV) * sizeof(float));
    float *qkv = buf, *q = qkv + bw, *k = q + (size_t)B * o->HK, *v = k + (size_t)B * o->HK, *oo = v + (size_t)B * o->HV;
    matmul_forward(qkv, x, mixer_param(m, o->k_w), NULL, B, C, o->W);
    if (o->K) {
        for (int b = 0; b < B; b++)
            conv1d_causal_step(qkv + (size_t)b * o->W, state + b * n + os, qkv + (size_t)b * o->W,
                               mixer_param(m, o->k_conv), NULL, 1, o->W, o->K);
        silu_forward(qkv, qkv, bw);
    }
    bla_split_(o, q, k, v, qkv, (size_t)B);
    BlaDims d = bla_dims(o, 1, 1);
    for (int b = 0; b < B; b++)
        bla_step(oo + (size_t)b * o->HV, NULL, state + b * n, q + (size_t)b * o->HK, k + (size_t)b * o->HK,
                 v + (size_t)b * o->HV, t, &d);
    matmul_forward(y, oo, mixer_param(m, o->k_o), NULL, B, o->HV, C);
    free(buf);
}

// ----------------------------------------------------------------------------
// attention maps: the weight query t gives value t' is sum_s p_t[s] w_s(t, t'), w_s(t, t') = c_t'[s] times the
// slot's decays a_u[s] for t' < u <= t (1 without decay): the blurry mask of the paper's Fig. 2

static int bla_attn_heads_(const MixerSpec *s) { return ((const BlaOpts *)s->opts)->H; }

static void bla_attn_map_(const Mixer *m, int b, int h, float *P) {
    const BlaOpts *o = m->spec->opts;
    int T = m->T, S = o->S;
    BlaActs a;
    bla_layout_(m->spec, m->B, T, m->acts, &a);
    BlaDims d = bla_dims(o, m->B, T);
    float *c = xmalloc((2 * (size_t)T * S + T) * sizeof(float)), *g = c + (size_t)T * S, *w = g + (size_t)T * S;
    bla_coeffs(c, g, 0, T, &d);
    for (size_t i = 0; i < (size_t)T * T; i++) P[i] = (size_t)(i % T) > i / T ? NAN : 0.0f;
    for (int s = 0; s < S; s++) {
        for (int t = 0; t < T; t++) {
            float at = o->decay ? expf(g[(size_t)t * S + s]) : 1.0f, cts = c[(size_t)t * S + s];
            for (int u = 0; u < t; u++) w[u] *= at;
            w[t] = cts;
            float pt = a.p[(((size_t)b * T + t) * o->H + h) * S + s];
            for (int u = 0; u <= t; u++) P[(size_t)t * T + u] += pt * w[u];
        }
    }
    free(c);
}

// ----------------------------------------------------------------------------

const MixerOps MIXER_BLA = {
    .name = "bla",
    .doc = "Blurry Window Attention: softmax attention over 2M-1 slots written through a Dirichlet kernel of M modes",
    .schema = &BLA_SCHEMA_,
    .opts_size = sizeof(BlaOpts),
    .check = bla_check_,
    .params = bla_params_,
    .act_size = bla_act_size_,
    .scratch_size = bla_scratch_size_,
    .forward = bla_forward_,
    .backward = bla_backward_,
    .state_size = bla_state_size_,
    .state_terms = bla_state_terms_,
    .state_init = bla_state_init_,
    .step = bla_step_,
    .attn_heads = bla_attn_heads_,
    .attn_map = bla_attn_map_,
};
