/*
 * The delta-rule mixers on the engine of nn/delta.h: two registry entries that share this file's layer, as
 * flash-linear-attention defines them (fla/layers/delta_net.py, fla/layers/gated_deltanet.py;
 * docs/mixers.md has the equations, options and tensors):
 *
 *   q, k, v = silu(conv_K(x W_q^T)), silu(conv_K(x W_k^T)), silu(conv_K(x W_v^T))   (no conv: silu(x W^T))
 *   q, k <- l2norm(q), l2norm(k) per head (eps 1e-6 inside the root)      beta = sigmoid(x W_b^T) (x2: (0,2))
 *   gated_deltanet: g = -exp(A_log) softplus(x W_a^T + dt_bias) per head and token, a = exp(g)
 *   S_t = a_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,   o_t = S_t^T q_t / sqrt(Dk)
 *   y = o_proj(RMSNorm_head(o) [* swish(x W_g^T)])
 *
 * One options struct (mixers/delta.h, shared with the GPU side gpu/deltanet.cu) and one set of functions; each entry's schema lists only the keys that mean something
 * for it (the A / dt init ranges on deltanet are unknown keys), with that mixer's reference defaults.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixers/delta.h"
#include "mixers/mixer.h"
#include "mixers/mixer_kit.h"
#include "mixers/selrope.h"
#include "mixers/shortconv.h"
#include "nn/activation.h"
#include "nn/delta.h"
#include "nn/groupnorm.h"
#include "nn/matmul.h"
#include "nn/norm.h"

#define KEY_(...) MIXER_KEY(DeltaOpts, __VA_ARGS__)
#define KEY_COMMON_(gate_def, gate_doc) \
    KEY_("heads", CFG_INT, heads, "4", 1, 1024, NULL, "Number of heads H."), \
    KEY_("expand_k", CFG_FLOAT, expand_k, "1", 0.01, 64, NULL, \
         "Key width H Dk = expand_k d_model (Dk = that / H; FLA's head_dim = expand_k d_model / heads)."), \
    SHORTCONV_KEY(DeltaOpts, conv, "4", "q, k, v = silu(projection), as FLA without use_short_conv"), \
    KEY_("allow_neg_eigval", CFG_BOOL, allow_neg_eigval, "false", 0, 0, NULL, \
         "beta = 2 sigmoid(b_proj x) in (0,2) (negative eigenvalues of I - beta k k^T); false: sigmoid, (0,1)."), \
    KEY_("use_gate", CFG_BOOL, use_gate, gate_def, 0, 0, NULL, gate_doc), \
    KEY_("chunk", CFG_INT, chunk, "32", 1, 1 << 16, NULL, \
         "Tokens per chunk of the chunkwise (WY) recurrence (a speed/memory knob: results do not depend on it)."), \
    KEY_("norm_eps", CFG_FLOAT, norm_eps, "1e-5", 0, 1, NULL, "Epsilon of the per-head output RMSNorm."), \
    KEY_("init_std", CFG_FLOAT, init_std, "0.02", 0, 10, NULL, \
         "Std of the normal init of every projection and conv weight (FLA's _init_weights, no depth scaling).")

static const CfgKey DELTANET_KEYS_[] = {
    KEY_COMMON_("false", "Multiply the normed output by swish(g_proj x) (FusedRMSNormGated); false = per-head RMSNorm."),
    KEY_("expand_v", CFG_FLOAT, expand_v, "1", 0.01, 64, NULL, "Value width H Dv = expand_v d_model (Dv = that / H)."),
};
static const CfgKey GATED_DELTANET_KEYS_[] = {
    KEY_COMMON_("true", "Multiply the normed output by swish(g_proj x) (FusedRMSNormGated); false = per-head RMSNorm."),
    KEY_("expand_v", CFG_FLOAT, expand_v, "2", 0.01, 64, NULL, "Value width H Dv = expand_v d_model (Dv = that / H)."),
    KEY_("A_init_lo", CFG_FLOAT, a_lo, "0", 0, 1e6, NULL,
         "g = -exp(A_log) softplus(...): A = exp(A_log) starts drawn from U(A_init_lo, A_init_hi)."),
    KEY_("A_init_hi", CFG_FLOAT, a_hi, "16", 1e-6, 1e6, NULL, "Upper end of the A init range."),
    KEY_("dt_min", CFG_FLOAT, dt_min, "0.001", 1e-9, 1e3, NULL,
         "dt_bias = softplus^-1(dt) with dt drawn log-uniform in [dt_min, dt_max)."),
    KEY_("dt_max", CFG_FLOAT, dt_max, "0.1", 1e-9, 1e3, NULL, "Upper end of the dt init range."),
    KEY_("dt_init_floor", CFG_FLOAT, dt_floor, "1e-4", 0, 1e3, NULL, "Initial dt values below this are raised to it."),
    SELROPE_KEY(DeltaOpts, sr),
};
#define NKEYS_(a) ((int)(sizeof a / sizeof a[0]))
static const CfgSection DELTANET_SCHEMA_ = {"deltanet", "Options of the deltanet mixer.", DELTANET_KEYS_,
                                            NKEYS_(DELTANET_KEYS_)};
static const CfgSection GATED_DELTANET_SCHEMA_ = {"gated_deltanet", "Options of the gated_deltanet mixer.",
                                                  GATED_DELTANET_KEYS_, NKEYS_(GATED_DELTANET_KEYS_)};

// ----------------------------------------------------------------------------
// options and parameters

static int delta_check_(MixerSpec *s, const char *path, Err *e, int gated) {
    DeltaOpts *o = s->opts;
    int C = s->C;
    o->gated = gated;
    o->H = o->heads;
    if (mixer_widths_resolve(path, C, o->H, o->expand_k, o->expand_v, &o->HK, &o->HV, e)) return -1;
    o->Dk = o->HK / o->H;
    o->Dv = o->HV / o->H;
    o->K = shortconv_taps(o->conv);
    if (gated) {
        if (o->a_lo >= o->a_hi) return err_set(e, "%s.A_init_lo: %g is not below A_init_hi %g", path, o->a_lo, o->a_hi);
        if (o->dt_min > o->dt_max) return err_set(e, "%s.dt_min: %g is above dt_max %g", path, o->dt_min, o->dt_max);
    }
    int k = 0, cv = o->K > 0;
    o->k_q = k++, o->k_k = k++, o->k_v = k++;
    o->k_cq = cv ? k++ : -1, o->k_ck = cv ? k++ : -1, o->k_cv = cv ? k++ : -1;
    o->k_b = k++;
    o->k_a = gated ? k++ : -1, o->k_A = gated ? k++ : -1, o->k_dt = gated ? k++ : -1;
    o->k_g = o->use_gate ? k++ : -1;
    o->k_norm = k++;
    o->k_o = k++;
    return selrope_check(&o->sr, path, C, o->H, o->Dk, &k, e);
}
static int deltanet_check_(MixerSpec *s, const char *path, Err *e) { return delta_check_(s, path, e, 0); }
static int gated_deltanet_check_(MixerSpec *s, const char *path, Err *e) { return delta_check_(s, path, e, 1); }

static int delta_params_(const MixerSpec *s, ParamTable *pt, const char *prefix, int n_layers, Err *e) {
    const DeltaOpts *o = s->opts;
    (void)n_layers;  // FLA's _init_weights: every Linear and Conv1d N(0, 0.02), no depth scaling
    int C = s->C, H = o->H;
    float std = (float)o->init_std;
    MIXER_ADD("q_proj", 2, ((int[]){o->HK, C}), init_normal(std), 1);
    MIXER_ADD("k_proj", 2, ((int[]){o->HK, C}), init_normal(std), 1);
    MIXER_ADD("v_proj", 2, ((int[]){o->HV, C}), init_normal(std), 1);
    if (shortconv_params(pt, prefix, o->HK, o->HV, o->K, std, e)) return -1;
    MIXER_ADD("b_proj", 2, ((int[]){H, C}), init_normal(std), 1);
    if (o->gated) {
        MIXER_ADD("a_proj", 2, ((int[]){H, C}), init_normal(std), 1);
        // drawn as A and dt, turned into log A and softplus^-1(max(dt, floor)) by delta_init_
        MIXER_ADD("A_log", 1, ((int[]){H}), init_uniform((float)o->a_lo, (float)o->a_hi), 0);
        MIXER_ADD("dt_bias", 1, ((int[]){H}), ((ParamInit){INIT_LOGUNIFORM, (float)o->dt_min, (float)o->dt_max}), 0);
    }
    if (o->use_gate) MIXER_ADD("g_proj", 2, ((int[]){o->HV, C}), init_normal(std), 1);
    MIXER_ADD("o_norm", 1, ((int[]){o->Dv}), init_ones(), 0);
    MIXER_ADD("o_proj", 2, ((int[]){C, o->HV}), init_normal(std), 1);
    return selrope_params(&o->sr, pt, prefix, e);
}

static void delta_init_(const Mixer *m) {
    const DeltaOpts *o = m->spec->opts;
    if (!o->gated) return;
    float *alog = mixer_param(m, o->k_A), *dt = mixer_param(m, o->k_dt);
    for (int h = 0; h < o->H; h++)
        alog[h] = (float)log(fmax((double)alog[h], (double)FLT_MIN));  // A = 0 exactly (probability ~0) stays finite
    mixer_dt_bias_init(dt, (size_t)o->H, o->dt_floor);
}

// ----------------------------------------------------------------------------
// saved activations

typedef struct DeltaActs {
    float *xq, *xk, *xv;  // (BT,HK) (BT,HK) (BT,HV) the projections (conv inputs; NULL without conv)
    float *cq, *ck, *cv;  // the same widths: silu's inputs (conv outputs, or the projections without conv)
    float *q, *k, *v;     // what the engine reads: l2norm(silu(cq)), l2norm(silu(ck)), silu(cv)
    float *nq, *nk;       // (BT*H) the l2 norms
    float *bpre, *beta;   // (BT*H) b_proj x and beta
    float *apre, *g;      // (BT*H) gated: a_proj x and the log-decay
    float *o;             // (BT,HV) the engine's output
    float *z;             // (BT,HV) output gate pre-activation
    float *rstd;          // (BT*H)
    float *yn;            // (BT,HV) normed (and gated): o_proj's input
    float *ckpt;
    float *rq, *rk;       // (BT,HK) selective_rope: silu(cq), silu(ck) rotated (the l2norms' inputs)
    float *sr;            // selective_rope's activations (selrope_act_size)
} DeltaActs;

static size_t delta_layout_(const MixerSpec *s, int B, int T, float *base, DeltaActs *a) {
    const DeltaOpts *o = s->opts;
    size_t BT = (size_t)B * T, n = 0, BH = BT * o->H;
    int cv = o->K > 0;
    DeltaActs t;
    if (!a) a = &t;
    DeltaDims d = delta_mixer_dims(o, B, T);
    a->xq = mixer_take(base, &n, BT * o->HK, cv);
    a->xk = mixer_take(base, &n, BT * o->HK, cv);
    a->xv = mixer_take(base, &n, BT * o->HV, cv);
    a->cq = mixer_take(base, &n, BT * o->HK, 1);
    a->ck = mixer_take(base, &n, BT * o->HK, 1);
    a->cv = mixer_take(base, &n, BT * o->HV, 1);
    a->q = mixer_take(base, &n, BT * o->HK, 1);
    a->k = mixer_take(base, &n, BT * o->HK, 1);
    a->v = mixer_take(base, &n, BT * o->HV, 1);
    a->nq = mixer_take(base, &n, BH, 1);
    a->nk = mixer_take(base, &n, BH, 1);
    a->bpre = mixer_take(base, &n, BH, 1);
    a->beta = mixer_take(base, &n, BH, 1);
    a->apre = mixer_take(base, &n, BH, o->gated);
    a->g = mixer_take(base, &n, BH, o->gated);
    a->o = mixer_take(base, &n, BT * o->HV, 1);
    a->z = mixer_take(base, &n, BT * o->HV, o->use_gate);
    a->rstd = mixer_take(base, &n, BH, 1);
    a->yn = mixer_take(base, &n, BT * o->HV, 1);
    a->ckpt = mixer_take(base, &n, delta_ckpt_size(&d), 1);
    a->rq = mixer_take(base, &n, BT * o->HK, o->sr.enabled);
    a->rk = mixer_take(base, &n, BT * o->HK, o->sr.enabled);
    a->sr = mixer_take(base, &n, selrope_act_size(&o->sr, B, T), o->sr.enabled);
    return n;
}

static size_t delta_act_size_(const MixerSpec *s, int B, int T) { return delta_layout_(s, B, T, NULL, NULL); }

// the backward's own work space: dyn, dz, do, dv (HV); dq, dk (HK); ds, dc, dp (widest); dbeta, dg, da (H)
static size_t delta_work_size_(const DeltaOpts *o, int B, int T) {
    size_t BT = (size_t)B * T, w = (size_t)(o->HK > o->HV ? o->HK : o->HV);
    return BT * (4 * (size_t)o->HV + 2 * (size_t)o->HK + 3 * w + 3 * (size_t)o->H);
}

// then selective_rope's
static size_t delta_scratch_size_(const MixerSpec *s, int B, int T) {
    const DeltaOpts *o = s->opts;
    return delta_work_size_(o, B, T) + selrope_scratch_size(&o->sr, B, T);
}

// ----------------------------------------------------------------------------
// the pieces forward and step share

static GroupNormOpts delta_norm_opts_(const DeltaOpts *o) {
    GroupNormOpts g = {o->use_gate ? GROUPNORM_GATE_AFTER : GROUPNORM_GATE_NONE, 0, 1, (float)o->norm_eps};
    return g;
}

// beta (R,) from its pre-activation
static void delta_beta_(const DeltaOpts *o, float *beta, const float *bpre, size_t R) {
    double s = delta_beta_scale(o);
#pragma omp parallel for if (R >= 4096)
    for (size_t i = 0; i < R; i++) beta[i] = (float)(s * mixer_sigmoid(bpre[i]));
}

// the log-decay g (R,H) = -exp(A_log) softplus(apre + dt_bias)
static void delta_decay_(const Mixer *m, float *g, const float *apre, size_t R) {
    const DeltaOpts *o = m->spec->opts;
    const float *alog = mixer_param(m, o->k_A), *dtb = mixer_param(m, o->k_dt);
    int H = o->H;
#pragma omp parallel for if (R * H >= 4096)
    for (size_t i = 0; i < R * H; i++)
        g[i] = (float)(-exp((double)alog[i % H]) * mixer_softplus((double)apre[i] + dtb[i % H]));
}

// ----------------------------------------------------------------------------
// forward

static void delta_forward_(Mixer *m, float *y, const float *x, int B, int T) {
    const DeltaOpts *o = m->spec->opts;
    int C = m->spec->C, BT = B * T, H = o->H;
    DeltaActs a;
    delta_layout_(m->spec, B, T, m->acts, &a);
    shortconv_forward(m, o->k_q, o->k_cq, o->K, 1, a.q, a.cq, a.xq, x, B, T, o->HK);
    shortconv_forward(m, o->k_k, o->k_ck, o->K, 1, a.k, a.ck, a.xk, x, B, T, o->HK);
    shortconv_forward(m, o->k_v, o->k_cv, o->K, 1, a.v, a.cv, a.xv, x, B, T, o->HV);
    const float *lq = a.q, *lk = a.k;
    if (o->sr.enabled) {  // after the convs and silu, before the L2 norms (as in the Selective RoPE authors' code)
        selrope_forward(m, &o->sr, a.sr, x, B, T);
        selrope_apply(&o->sr, a.sr, a.rq, a.q, B, T);
        selrope_apply(&o->sr, a.sr, a.rk, a.k, B, T);
        lq = a.rq, lk = a.rk;
    }
    l2norm_forward(a.q, a.nq, lq, BT * H, o->Dk, DELTA_L2_EPS, L2NORM_ADD);
    l2norm_forward(a.k, a.nk, lk, BT * H, o->Dk, DELTA_L2_EPS, L2NORM_ADD);
    matmul_forward(a.bpre, x, mixer_param(m, o->k_b), NULL, BT, C, H);
    delta_beta_(o, a.beta, a.bpre, (size_t)BT * H);
    if (o->gated) {
        matmul_forward(a.apre, x, mixer_param(m, o->k_a), NULL, BT, C, H);
        delta_decay_(m, a.g, a.apre, (size_t)BT);
    }
    DeltaDims d = delta_mixer_dims(o, B, T);
    delta_forward(a.o, a.ckpt, NULL, a.q, a.k, a.v, a.beta, a.g, &d);
    if (o->use_gate) matmul_forward(a.z, x, mixer_param(m, o->k_g), NULL, BT, C, o->HV);
    GroupNormOpts gn = delta_norm_opts_(o);
    groupnorm_forward(a.yn, NULL, a.rstd, a.o, a.z, mixer_param(m, o->k_norm), BT, H, o->Dv, &gn);
    matmul_forward(y, a.yn, mixer_param(m, o->k_o), NULL, BT, o->HV, C);
}

// ----------------------------------------------------------------------------
// backward

static void delta_backward_(Mixer *m, float *dx, const float *dy, const float *x, int B, int T) {
    const DeltaOpts *o = m->spec->opts;
    int C = m->spec->C, BT = B * T, H = o->H;
    size_t nK = (size_t)BT * o->HK, nV = (size_t)BT * o->HV, nH = (size_t)BT * H;
    size_t w = (size_t)BT * (o->HK > o->HV ? o->HK : o->HV);
    DeltaActs a;
    delta_layout_(m->spec, B, T, m->acts, &a);
    float *dyn = m->scratch, *dz = dyn + nV, *dO = dz + nV, *dv = dO + nV, *dq = dv + nV, *dk = dq + nK;
    float *ds = dk + nK, *dc = ds + w, *dp = dc + w, *dbeta = dp + w, *dg = dbeta + nH, *da = dg + nH;

    // y = yn W_o^T
    memset(dyn, 0, nV * sizeof(float));
    matmul_backward(dyn, mixer_grad(m, o->k_o), NULL, dy, a.yn, mixer_param(m, o->k_o), BT, o->HV, C);
    // yn = norm(o) [* swish(z)]
    memset(dO, 0, nV * sizeof(float));
    if (o->use_gate) memset(dz, 0, nV * sizeof(float));
    GroupNormOpts gn = delta_norm_opts_(o);
    groupnorm_backward(dO, o->use_gate ? dz : NULL, mixer_grad(m, o->k_norm), dyn, a.o, a.z, mixer_param(m, o->k_norm),
                       NULL, a.rstd, BT, H, o->Dv, &gn);
    if (o->use_gate) matmul_backward(dx, mixer_grad(m, o->k_g), NULL, dz, x, mixer_param(m, o->k_g), BT, C, o->HV);
    // the recurrence
    memset(dq, 0, nK * sizeof(float));
    memset(dk, 0, nK * sizeof(float));
    memset(dv, 0, nV * sizeof(float));
    memset(dbeta, 0, nH * sizeof(float));
    if (o->gated) memset(dg, 0, nH * sizeof(float));
    DeltaDims d = delta_mixer_dims(o, B, T);
    delta_backward(dq, dk, dv, dbeta, o->gated ? dg : NULL, dO, a.ckpt, a.q, a.k, a.v, a.beta, a.g, &d);
    // beta = s sigmoid(bpre): dbpre = dbeta beta (1 - beta / s)
    double sc = delta_beta_scale(o);
    for (size_t i = 0; i < nH; i++) {
        double sg = a.beta[i] / sc;
        dbeta[i] = (float)(dbeta[i] * sc * sg * (1.0 - sg));
    }
    matmul_backward(dx, mixer_grad(m, o->k_b), NULL, dbeta, x, mixer_param(m, o->k_b), BT, C, H);
    // g = -exp(A_log) softplus(apre + dt_bias): dA_log = dg g, dapre = dg (-exp(A_log)) sigmoid(apre + dt_bias)
    if (o->gated) {
        const float *alog = mixer_param(m, o->k_A), *dtb = mixer_param(m, o->k_dt);
        float *dA = mixer_grad(m, o->k_A), *ddt = mixer_grad(m, o->k_dt);
        for (size_t i = 0; i < nH; i++) {  // sequential: the per-head sums do not depend on the thread count
            int h = (int)(i % H);
            dA[h] += dg[i] * a.g[i];
            da[i] = (float)(dg[i] * -exp((double)alog[h]) * mixer_sigmoid((double)a.apre[i] + dtb[h]));
            ddt[h] += da[i];
        }
        matmul_backward(dx, mixer_grad(m, o->k_a), NULL, da, x, mixer_param(m, o->k_a), BT, C, H);
    }
    // q, k: l2norm [then selective_rope] then silu, conv, projection; v: silu, conv, projection
    float *srs = m->scratch + delta_work_size_(o, B, T);
    float *dth = o->sr.enabled ? selrope_dtheta(&o->sr, srs, B, T) : NULL;
    memset(ds, 0, nK * sizeof(float));
    l2norm_backward(ds, dq, a.q, a.nq, BT * H, o->Dk, DELTA_L2_EPS, L2NORM_ADD);
    if (dth) selrope_apply_backward(&o->sr, a.sr, ds, dth, ds, a.rq, B, T);
    shortconv_backward(m, o->k_q, o->k_cq, o->K, 1, dx, dc, dp, ds, a.cq, a.xq, x, B, T, o->HK);
    memset(ds, 0, nK * sizeof(float));
    l2norm_backward(ds, dk, a.k, a.nk, BT * H, o->Dk, DELTA_L2_EPS, L2NORM_ADD);
    if (dth) selrope_apply_backward(&o->sr, a.sr, ds, dth, ds, a.rk, B, T);
    shortconv_backward(m, o->k_k, o->k_ck, o->K, 1, dx, dc, dp, ds, a.ck, a.xk, x, B, T, o->HK);
    if (dth) selrope_backward(m, &o->sr, a.sr, srs, dx, x, B, T);
    shortconv_backward(m, o->k_v, o->k_cv, o->K, 1, dx, dc, dp, dv, a.cv, a.xv, x, B, T, o->HV);
}

// ----------------------------------------------------------------------------
// recurrent decoding: per sequence [the engine's state (H, Dk*Dv) | conv states q (HK,K-1), k (HK,K-1), v (HV,K-1) |
// selective_rope: its state (selrope_state_size)]

static size_t delta_engine_state_(const DeltaOpts *o) {
    DeltaDims d = delta_mixer_dims(o, 1, 1);
    return (size_t)o->H * delta_state_size(&d);
}

static size_t delta_state_size_(const MixerSpec *s, int cap) {
    const DeltaOpts *o = s->opts;
    return delta_engine_state_(o) + shortconv_state_size(o->HK, o->HV, o->K) + selrope_state_size(&o->sr);
}

// Table 1's GDN row H·dk·dv (DeltaNet's state has the same shape), selective_rope's state, Table 1's short-conv row
static void delta_state_terms_(const MixerSpec *s, int T, StateTerms *st) {
    const DeltaOpts *o = s->opts;
    (void)T;
    state_terms_add(st, 1, delta_engine_state_(o), o->gated ? "GDN state" : "DeltaNet state", "H·dk·dv = %d·%d·%d",
                    o->H, o->Dk, o->Dv);
    selrope_state_terms(&o->sr, st);
    shortconv_state_terms(st, o->H, o->Dk, o->Dv, o->K);
}

static void delta_state_init_(const Mixer *m, float *state, int B, int cap) {
    memset(state, 0, (size_t)B * delta_state_size_(m->spec, 0) * sizeof(float));  // the empty prefix, zero padding
}

static void delta_step_(const Mixer *m, float *state, float *y, const float *x, int B, int t, int cap) {
    const DeltaOpts *o = m->spec->opts;
    int C = m->spec->C, H = o->H;
    size_t n = delta_state_size_(m->spec, 0), es = delta_engine_state_(o);
    size_t bk = (size_t)B * o->HK, bv = (size_t)B * o->HV, bh = (size_t)B * H;
    float *buf = xmalloc((2 * bk + 4 * bv + 5 * bh) * sizeof(float));
    float *q = buf, *k = q + bk, *v = k + bk, *z = v + bv, *oo = z + bv, *yn = oo + bv;
    float *bpre = yn + bv, *beta = bpre + bh, *apre = beta + bh, *g = apre + bh, *rstd = g + bh;
    float *cs = state + es;  // the conv caches of q, k, v one after another (shortconv.h)
    size_t K1 = o->K ? (size_t)o->K - 1 : 0;
    shortconv_step(m, o->k_q, o->k_cq, o->K, 1, q, cs, n, x, B, o->HK);
    shortconv_step(m, o->k_k, o->k_ck, o->K, 1, k, cs + (size_t)o->HK * K1, n, x, B, o->HK);
    shortconv_step(m, o->k_v, o->k_cv, o->K, 1, v, cs + (size_t)2 * o->HK * K1, n, x, B, o->HV);
    if (o->sr.enabled) selrope_step(m, &o->sr, state + n - selrope_state_size(&o->sr), n, q, k, x, B);
    l2norm_forward(q, rstd, q, B * H, o->Dk, DELTA_L2_EPS, L2NORM_ADD);
    l2norm_forward(k, rstd, k, B * H, o->Dk, DELTA_L2_EPS, L2NORM_ADD);
    matmul_forward(bpre, x, mixer_param(m, o->k_b), NULL, B, C, H);
    delta_beta_(o, beta, bpre, bh);
    if (o->gated) {
        matmul_forward(apre, x, mixer_param(m, o->k_a), NULL, B, C, H);
        delta_decay_(m, g, apre, (size_t)B);
    }
    DeltaDims d = delta_mixer_dims(o, 1, 1);
    for (int b = 0; b < B; b++)
        delta_step(oo + (size_t)b * o->HV, state + b * n, q + (size_t)b * o->HK, k + (size_t)b * o->HK,
                   v + (size_t)b * o->HV, beta + (size_t)b * H, o->gated ? g + (size_t)b * H : NULL, &d);
    if (o->use_gate) matmul_forward(z, x, mixer_param(m, o->k_g), NULL, B, C, o->HV);
    GroupNormOpts gn = delta_norm_opts_(o);
    groupnorm_forward(yn, NULL, rstd, oo, o->use_gate ? z : NULL, mixer_param(m, o->k_norm), B, H, o->Dv, &gn);
    matmul_forward(y, yn, mixer_param(m, o->k_o), NULL, B, o->HV, C);
    free(buf);
}

// ----------------------------------------------------------------------------

#define DELTA_OPS_(ident, nm, docline, schema_, checkfn) \
    const MixerOps ident = { \
        .name = nm, \
        .doc = docline, \
        .schema = &schema_, \
        .opts_size = sizeof(DeltaOpts), \
        .check = checkfn, \
        .params = delta_params_, \
        .init = delta_init_, \
        .act_size = delta_act_size_, \
        .scratch_size = delta_scratch_size_, \
        .forward = delta_forward_, \
        .backward = delta_backward_, \
        .state_size = delta_state_size_, \
        .state_terms = delta_state_terms_, \
        .state_init = delta_state_init_, \
        .step = delta_step_, \
    }

DELTA_OPS_(MIXER_DELTANET, "deltanet", "DeltaNet: the delta rule with L2-normalised q, k, short convs, beta = sigmoid",
           DELTANET_SCHEMA_, deltanet_check_);
DELTA_OPS_(MIXER_GATED_DELTANET, "gated_deltanet",
           "Gated DeltaNet: the delta rule with a Mamba2-style per-head decay, gated per-head RMSNorm",
           GATED_DELTANET_SCHEMA_, gated_deltanet_check_);
