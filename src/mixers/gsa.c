/*
 * GSA, Gated Slot Attention, as flash-linear-attention defines it (fla/layers/gsa.py and fla/ops/gsa/naive.py;
 * docs/mixers.md has the equations, options and tensors): per head, M slots that keys and values are written
 * into with a data-dependent forget gate, read by a softmax over the slots. Two passes of the linear-recurrence
 * engine (nn/linrec.h) with one softmax between them:
 *
 *   q, k = phi(x W_q^T), phi(x W_k^T) (phi = swish by default)     v = silu(x W_v^T)      (H heads of D)
 *   with `conv` K > 1 each projection goes through silu(conv_K(.)) first (FLA's use_short_conv, mixers/shortconv.h):
 *   q = phi(silu(conv_K(x W_q^T))), ..., v = silu(silu(conv_K(x W_v^T))) (FLA's ShortConvolution ends in silu)
 *   f_t = logsigmoid(x W_f^T) / gate_logit_normalizer  (H heads of M)      s_t = 1 - exp(f_t)
 *   pass 1 (keys -> slots)   Hk_t = Hk_{t-1} diag(exp f_t) + k_t s_t^T    ok_t = Hk_t^T q_t    (LINREC_VCHANNEL)
 *                            p_t = softmax over the M slots of ok_t
 *   pass 2 (slots -> values) Hv_t = diag(exp f_t) Hv_{t-1} + s_t v_t^T    o_t = Hv_t^T p_t     (LINREC_CHANNEL)
 *   y = o_proj(RMSNorm over all H D channels (silu(o)))      (scale 1: q enters unscaled)
 *
 * The first pass decays the slots, which are its value side: that is the engine's value-channel form. The
 * recurrent state per sequence is both passes' states, H M (D + D) floats, and the conv caches.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mixers/gsa.h"
#include "mixers/mixer.h"
#include "mixers/mixer_kit.h"
#include "mixers/shortconv.h"
#include "nn/activation.h"
#include "nn/groupnorm.h"
#include "nn/linrec.h"
#include "nn/matmul.h"


#define KEY_(...) MIXER_KEY(GsaOpts, __VA_ARGS__)
static const CfgKey GSA_KEYS_[] = {
    KEY_("heads", CFG_INT, heads, "4", 1, 1024, NULL, "Number of heads H."),
    KEY_("head_dim", CFG_INT, head_dim, "0", 0, 4096, NULL,
         "Key and value size D per head; 0 = d_model / heads (FLA's expand_k = expand_v = 1)."),
    KEY_("num_slots", CFG_INT, num_slots, "64", 1, 4096, NULL, "Memory slots M per head (FLA's GSAConfig: 64)."),
    KEY_("gate_logit_normalizer", CFG_FLOAT, gate_logit_normalizer, "8", 1e-3, 1e6, NULL,
         "f = logsigmoid(f_proj x) / gate_logit_normalizer, the slots' log forget gate (e^f = 0.917 at init with 8)."),
    KEY_("feature_map", CFG_ENUM, feature_map, "\"swish\"", 0, 0, "swish|relu|identity",
         "phi on q and k: swish x sigmoid(x) (FLA's default), relu, or identity."),
    KEY_("norm", CFG_BOOL, norm, "true", 0, 0, NULL,
         "RMSNorm over all H D output channels after silu, before o_proj (FLA always norms); false: o_proj(silu(o))."),
    KEY_("norm_eps", CFG_FLOAT, norm_eps, "1e-6", 0, 1, NULL,
         "Epsilon of the output RMSNorm (FLA's models pass config.norm_eps = 1e-6 to the layer)."),
    SHORTCONV_KEY(GsaOpts, conv, "0", "q, k, v = the projections: FLA's default use_short_conv false"),
    KEY_("chunk", CFG_INT, chunk, "16", 1, 1 << 16, NULL,
         "Tokens per chunk of both chunkwise-parallel passes (a speed/memory knob: results do not depend on it)."),
    KEY_("init_std", CFG_FLOAT, init_std, "0.02", 0, 10, NULL,
         "Std of every Linear's normal init (FLA's _init_weights; no depth scaling)."),
};
static const CfgSection GSA_SCHEMA_ = {"gsa", "Options of the gsa mixer.", GSA_KEYS_,
                                       (int)(sizeof GSA_KEYS_ / sizeof GSA_KEYS_[0])};

// ----------------------------------------------------------------------------
// options and parameters

static int gsa_check_(MixerSpec *s, const char *path, Err *e) {
    GsaOpts *o = s->opts;
    o->H = o->heads;
    if (mixer_heads_resolve(path, s->C, o->heads, o->head_dim, 0, &o->D, e)) return -1;
    o->M = o->num_slots;
    o->HD = o->H * o->D;
    o->HM = o->H * o->M;
    const char *f = o->feature_map;
    o->fmap = !strcmp(f, "relu") ? GSA_FMAP_RELU : !strcmp(f, "identity") ? GSA_FMAP_IDENTITY : GSA_FMAP_SWISH;
    o->K = shortconv_taps(o->conv);
    int k = 0, cv = o->K > 0;
    o->k_q = k++, o->k_k = k++, o->k_v = k++;
    o->k_cq = cv ? k++ : -1, o->k_ck = cv ? k++ : -1, o->k_cv = cv ? k++ : -1;
    o->k_f = k++;
    o->k_norm = o->norm ? k++ : -1;
    o->k_o = k++;
    return 0;
}

static int gsa_params_(const MixerSpec *s, ParamTable *pt, const char *prefix, int n_layers, Err *e) {
    const GsaOpts *o = s->opts;
    (void)n_layers;  // FLA's _init_weights: every Linear N(0, 0.02), no depth scaling
    int C = s->C;
    float std = (float)o->init_std;
    MIXER_ADD("q_proj", 2, ((int[]){o->HD, C}), init_normal(std), 1);
    MIXER_ADD("k_proj", 2, ((int[]){o->HD, C}), init_normal(std), 1);
    MIXER_ADD("v_proj", 2, ((int[]){o->HD, C}), init_normal(std), 1);
    if (shortconv_params(pt, prefix, o->HD, o->HD, o->K, std, e)) return -1;
    MIXER_ADD("f_proj", 2, ((int[]){o->HM, C}), init_normal(std), 1);
    if (o->norm) MIXER_ADD("g_norm", 1, ((int[]){o->HD}), init_ones(), 0);
    MIXER_ADD("o_proj", 2, ((int[]){C, o->HD}), init_normal(std), 1);
    return 0;
}

// ----------------------------------------------------------------------------
// saved activations

typedef struct GsaActs {
    float *pq, *pk, *pv;        // (BT,HD) conv: the projections, the convs' inputs
    float *cq, *ck, *cv;        // (BT,HD) conv: the convs' outputs, silu's inputs
    float *qpre, *kpre, *vpre;  // (BT,HD) the projections (conv: silu of the convs' outputs)
    float *q, *k, *v;           // (BT,HD) phi(q), phi(k), silu(v): what the passes read
    float *fpre, *f, *s;        // (BT,HM) f_proj x, the log forget gate, the write weight 1 - exp(f)
    float *p;                   // (BT,HM) the slot weights softmax(ok) (ok itself is not needed again)
    float *o, *so;              // (BT,HD) pass 2's output and silu(o)
    float *rstd;                // (BT,) the norm's statistic
    float *yn;                  // (BT,HD) o_proj's input
    float *ckpt1, *ckpt2;       // the passes' chunk states
} GsaActs;

static size_t gsa_layout_(const MixerSpec *s, int B, int T, float *base, GsaActs *a) {
    const GsaOpts *o = s->opts;
    size_t BT = (size_t)B * T, n = 0, nD = BT * o->HD, nM = BT * o->HM;
    GsaActs t;
    if (!a) a = &t;
    LinrecDims d1 = gsa_dims(o, 1, B, T), d2 = gsa_dims(o, 2, B, T);
    int cv = o->K > 0;
    a->pq = mixer_take(base, &n, nD, cv);
    a->pk = mixer_take(base, &n, nD, cv);
    a->pv = mixer_take(base, &n, nD, cv);
    a->cq = mixer_take(base, &n, nD, cv);
    a->ck = mixer_take(base, &n, nD, cv);
    a->cv = mixer_take(base, &n, nD, cv);
    a->qpre = mixer_take(base, &n, nD, 1);
    a->kpre = mixer_take(base, &n, nD, 1);
    a->vpre = mixer_take(base, &n, nD, 1);
    a->q = mixer_take(base, &n, nD, 1);
    a->k = mixer_take(base, &n, nD, 1);
    a->v = mixer_take(base, &n, nD, 1);
    a->fpre = mixer_take(base, &n, nM, 1);
    a->f = mixer_take(base, &n, nM, 1);
    a->s = mixer_take(base, &n, nM, 1);
    a->p = mixer_take(base, &n, nM, 1);
    a->o = mixer_take(base, &n, nD, 1);
    a->so = mixer_take(base, &n, nD, 1);
    a->rstd = mixer_take(base, &n, BT, o->norm);
    a->yn = mixer_take(base, &n, nD, o->norm);
    a->ckpt1 = mixer_take(base, &n, linrec_ckpt_size(&d1), 1);
    a->ckpt2 = mixer_take(base, &n, linrec_ckpt_size(&d2), 1);
    return n;
}

static size_t gsa_act_size_(const MixerSpec *s, int B, int T) { return gsa_layout_(s, B, T, NULL, NULL); }

static size_t gsa_scratch_size_(const MixerSpec *s, int B, int T) {
    const GsaOpts *o = s->opts;
    size_t BT = (size_t)B * T, w = (size_t)(o->HD > o->HM ? o->HD : o->HM);
    // forward: ok (HM); backward: dyn, dso, do, dq, dk, dv (HD); dp, dok, ds, df (HM); dpre (widest)
    return BT * (6 * (size_t)o->HD + 4 * (size_t)o->HM + w);
}

// ----------------------------------------------------------------------------
// the pieces forward and step share

static GroupNormOpts gsa_norm_opts_(const GsaOpts *o) {
    GroupNormOpts g = {GROUPNORM_GATE_NONE, 0, 1, (float)o->norm_eps};
    return g;
}

static void gsa_fmap_(const GsaOpts *o, float *out, const float *in, size_t n) {
    if (o->fmap == GSA_FMAP_SWISH) silu_forward(out, in, n);
    else if (o->fmap == GSA_FMAP_RELU) relu_forward(out, in, n);
    else memcpy(out, in, n * sizeof(float));
}

// f = logsigmoid(fpre) / normalizer and s = 1 - exp(f) (R,) in double: s = -expm1(f) keeps its digits when f -> 0
static void gsa_gates_(const GsaOpts *o, float *f, float *s, const float *fpre, size_t R) {
    double inv = 1.0 / o->gate_logit_normalizer;
#pragma omp parallel for if (R >= 4096)
    for (size_t i = 0; i < R; i++) {
        double fi = mixer_logsigmoid((double)fpre[i]) * inv;
        f[i] = (float)fi;
        s[i] = (float)-expm1(fi);
    }
}

// p = softmax(ok) over each row of M slots (R rows); p may alias ok
static void gsa_softmax_(float *p, const float *ok, size_t R, int M) {
#pragma omp parallel for if (R * M >= 4096)
    for (size_t r = 0; r < R; r++) {
        const float *x = ok + r * M;
        float *y = p + r * M, mx = x[0];
        for (int j = 1; j < M; j++) mx = fmaxf(mx, x[j]);
        double sum = 0.0;
        for (int j = 0; j < M; j++) {
            y[j] = expf(x[j] - mx);
            sum += y[j];
        }
        float inv = (float)(1.0 / sum);
        for (int j = 0; j < M; j++) y[j] *= inv;
    }
}

// silu(o) -> [RMSNorm] -> o_proj, for R rows; yn (R,HD) is used only with the norm
static void gsa_output_(const Mixer *m, float *y, float *so, float *yn, float *rstd, const float *o_, int R) {
    const GsaOpts *o = m->spec->opts;
    silu_forward(so, o_, (size_t)R * o->HD);
    const float *in = so;
    if (o->norm) {
        GroupNormOpts gn = gsa_norm_opts_(o);
        groupnorm_forward(yn, NULL, rstd, so, NULL, mixer_param(m, o->k_norm), R, 1, o->HD, &gn);
        in = yn;
    }
    matmul_forward(y, in, mixer_param(m, o->k_o), NULL, R, o->HD, m->spec->C);
}

// ----------------------------------------------------------------------------
// forward

static void gsa_forward_(Mixer *m, float *y, const float *x, int B, int T) {
    const GsaOpts *o = m->spec->opts;
    int C = m->spec->C, BT = B * T;
    size_t nD = (size_t)BT * o->HD, nM = (size_t)BT * o->HM;
    GsaActs a;
    gsa_layout_(m->spec, B, T, m->acts, &a);
    float *ok = m->scratch;
    shortconv_forward(m, o->k_q, o->k_cq, o->K, 0, a.qpre, a.cq, a.pq, x, B, T, o->HD);
    shortconv_forward(m, o->k_k, o->k_ck, o->K, 0, a.kpre, a.ck, a.pk, x, B, T, o->HD);
    shortconv_forward(m, o->k_v, o->k_cv, o->K, 0, a.vpre, a.cv, a.pv, x, B, T, o->HD);
    matmul_forward(a.fpre, x, mixer_param(m, o->k_f), NULL, BT, C, o->HM);
    gsa_fmap_(o, a.q, a.qpre, nD);
    gsa_fmap_(o, a.k, a.kpre, nD);
    silu_forward(a.v, a.vpre, nD);
    gsa_gates_(o, a.f, a.s, a.fpre, nM);
    LinrecDims d1 = gsa_dims(o, 1, B, T), d2 = gsa_dims(o, 2, B, T);
    linrec_forward(ok, NULL, a.ckpt1, NULL, a.q, a.k, a.s, a.f, NULL, &d1);
    gsa_softmax_(a.p, ok, (size_t)BT * o->H, o->M);
    linrec_forward(a.o, NULL, a.ckpt2, NULL, a.p, a.s, a.v, a.f, NULL, &d2);
    gsa_output_(m, y, a.so, a.yn, a.rstd, a.o, BT);
}

// ----------------------------------------------------------------------------
// backward

static void gsa_backward_(Mixer *m, float *dx, const float *dy, const float *x, int B, int T) {
    const GsaOpts *o = m->spec->opts;
    int C = m->spec->C, BT = B * T, M = o->M;
    size_t nD = (size_t)BT * o->HD, nM = (size_t)BT * o->HM;
    GsaActs a;
    gsa_layout_(m->spec, B, T, m->acts, &a);
    float *dyn = m->scratch, *dso = dyn + nD, *dO = dso + nD, *dq = dO + nD, *dk = dq + nD, *dv = dk + nD;
    float *dp = dv + nD, *dok = dp + nM, *ds = dok + nM, *df = ds + nM, *dpre = df + nM;

    // y = yn W_o^T (yn = so without the norm); yn = RMSNorm(so); so = silu(o)
    memset(dyn, 0, nD * sizeof(float));
    matmul_backward(dyn, mixer_grad(m, o->k_o), NULL, dy, o->norm ? a.yn : a.so, mixer_param(m, o->k_o), BT, o->HD, C);
    const float *dsov = dyn;
    if (o->norm) {
        memset(dso, 0, nD * sizeof(float));
        GroupNormOpts gn = gsa_norm_opts_(o);
        groupnorm_backward(dso, NULL, mixer_grad(m, o->k_norm), dyn, a.so, NULL, mixer_param(m, o->k_norm), NULL,
                           a.rstd, BT, 1, o->HD, &gn);
        dsov = dso;
    }
    memset(dO, 0, nD * sizeof(float));
    silu_backward(dO, a.o, dsov, nD);
    // pass 2: o = Hv^T p with Hv fed by s, v and decayed by f
    memset(dp, 0, nM * sizeof(float));
    memset(ds, 0, nM * sizeof(float));
    memset(df, 0, nM * sizeof(float));
    memset(dv, 0, nD * sizeof(float));
    LinrecDims d1 = gsa_dims(o, 1, B, T), d2 = gsa_dims(o, 2, B, T);
    linrec_backward(dp, ds, dv, df, NULL, dO, NULL, a.ckpt2, a.p, a.s, a.v, a.f, NULL, &d2);
    // p = softmax(ok): dok = p (.) (dp - p . dp) per row of M slots
#pragma omp parallel for if (nM >= 4096)
    for (size_t r = 0; r < (size_t)BT * o->H; r++) {
        const float *pr = a.p + r * M, *dpr = dp + r * M;
        double dot = 0.0;
        for (int j = 0; j < M; j++) dot += (double)pr[j] * dpr[j];
        for (int j = 0; j < M; j++) dok[r * M + j] = (float)(pr[j] * (dpr[j] - dot));
    }
    // pass 1: ok = Hk^T q with Hk fed by k, s and decayed (on the slot side) by f
    memset(dq, 0, nD * sizeof(float));
    memset(dk, 0, nD * sizeof(float));
    linrec_backward(dq, dk, ds, df, NULL, dok, NULL, a.ckpt1, a.q, a.k, a.s, a.f, NULL, &d1);
    // s = 1 - exp(f): df -= exp(f) ds = (s - 1) ds; f = logsigmoid(fpre) / n: dfpre = df sigmoid(-fpre) / n
    double inv = 1.0 / o->gate_logit_normalizer;
#pragma omp parallel for if (nM >= 4096)
    for (size_t i = 0; i < nM; i++) {
        double dfi = (double)df[i] + ((double)a.s[i] - 1.0) * ds[i];
        dpre[i] = (float)(dfi * inv * mixer_sigmoid(-(double)a.fpre[i]));
    }
    matmul_backward(dx, mixer_grad(m, o->k_f), NULL, dpre, x, mixer_param(m, o->k_f), BT, C, o->HM);
    // v = silu(vpre); q, k = phi(qpre), phi(kpre); then, with the conv, vpre = silu(cv) and so on back to x
    // (dyn and dso are free since the norm's backward)
    memset(dpre, 0, nD * sizeof(float));
    silu_backward(dpre, a.vpre, dv, nD);
    shortconv_backward(m, o->k_v, o->k_cv, o->K, 0, dx, dyn, dso, dpre, a.cv, a.pv, x, B, T, o->HD);
    const float *pre[2] = {a.qpre, a.kpre}, *cc[2] = {a.cq, a.ck}, *pp[2] = {a.pq, a.pk};
    float *dphi[2] = {dq, dk};
    int kp[2] = {o->k_q, o->k_k}, kc[2] = {o->k_cq, o->k_ck};
    for (int i = 0; i < 2; i++) {
        const float *dpp = dphi[i];
        if (o->fmap != GSA_FMAP_IDENTITY) {
            memset(dpre, 0, nD * sizeof(float));
            if (o->fmap == GSA_FMAP_SWISH) silu_backward(dpre, pre[i], dphi[i], nD);
            else relu_backward(dpre, pre[i], dphi[i], nD);
            dpp = dpre;
        }
        shortconv_backward(m, kp[i], kc[i], o->K, 0, dx, dyn, dso, dpp, cc[i], pp[i], x, B, T, o->HD);
    }
}

// ----------------------------------------------------------------------------
// recurrent decoding: per sequence [pass 1's state (H, D*M) | pass 2's state (H, M*D) | conv: the caches of q, k,
// v (shortconv_state_size)]

// both passes' states: H M (Dk + Dv), Dk = Dv = D
static size_t gsa_slots_size_(const GsaOpts *o) { return 2 * (size_t)o->H * o->M * o->D; }

static size_t gsa_state_size_(const MixerSpec *s, int cap) {
    const GsaOpts *o = s->opts;
    return gsa_slots_size_(o) + shortconv_state_size(o->HD, o->HD, o->K);
}

// Table 1's GSA row H(dk+dv)S (dk = dv = D) and its short-conv row
static void gsa_state_terms_(const MixerSpec *s, int T, StateTerms *st) {
    const GsaOpts *o = s->opts;
    (void)T;
    state_terms_add(st, 1, gsa_slots_size_(o), "GSA slots", "H(dk+dv)S = %d·(%d+%d)·%d", o->H, o->D, o->D, o->M);
    shortconv_state_terms(st, o->H, o->D, o->D, o->K);
}

static void gsa_state_init_(const Mixer *m, float *state, int B, int cap) {
    memset(state, 0, (size_t)B * gsa_state_size_(m->spec, 0) * sizeof(float));  // the empty prefix
}

static void gsa_step_(const Mixer *m, float *state, float *y, const float *x, int B, int t, int cap) {
    const GsaOpts *o = m->spec->opts;
    int C = m->spec->C;
    size_t n = gsa_state_size_(m->spec, 0), half = gsa_slots_size_(o) / 2, bd = (size_t)B * o->HD;
    size_t bm = (size_t)B * o->HM;
    float *buf = xmalloc((7 * bd + 3 * bm + (size_t)B) * sizeof(float));
    float *q = buf, *k = q + bd, *v = k + bd, *oo = v + bd, *so = oo + bd, *yn = so + bd, *tmp = yn + bd;
    float *f = tmp + bd, *s = f + bm, *p = s + bm, *rstd = p + bm;
    float *cs = state + gsa_slots_size_(o);  // the conv caches of q, k, v one after another
    size_t K1 = o->K ? (size_t)o->K - 1 : 0;
    shortconv_step(m, o->k_q, o->k_cq, o->K, 0, tmp, cs, n, x, B, o->HD);
    gsa_fmap_(o, q, tmp, bd);
    shortconv_step(m, o->k_k, o->k_ck, o->K, 0, tmp, cs + (size_t)o->HD * K1, n, x, B, o->HD);
    gsa_fmap_(o, k, tmp, bd);
    shortconv_step(m, o->k_v, o->k_cv, o->K, 0, tmp, cs + (size_t)2 * o->HD * K1, n, x, B, o->HD);
    silu_forward(v, tmp, bd);
    matmul_forward(p, x, mixer_param(m, o->k_f), NULL, B, C, o->HM);  // p holds f_proj x until the gates are made
    gsa_gates_(o, f, s, p, bm);
    LinrecDims d1 = gsa_dims(o, 1, 1, 1), d2 = gsa_dims(o, 2, 1, 1);
    for (int b = 0; b < B; b++) {
        size_t rd = (size_t)b * o->HD, rm = (size_t)b * o->HM;
        linrec_step(p + rm, NULL, state + b * n, q + rd, k + rd, s + rm, f + rm, NULL, &d1);
        gsa_softmax_(p + rm, p + rm, (size_t)o->H, o->M);
        linrec_step(oo + rd, NULL, state + b * n + half, p + rm, s + rm, v + rd, f + rm, NULL, &d2);
    }
    gsa_output_(m, y, so, yn, rstd, oo, B);
    free(buf);
}

// ----------------------------------------------------------------------------

const MixerOps MIXER_GSA = {
    .name = "gsa",
    .doc = "Gated Slot Attention: two gated linear passes through M slots per head with a softmax between them",
    .schema = &GSA_SCHEMA_,
    .opts_size = sizeof(GsaOpts),
    .check = gsa_check_,
    .params = gsa_params_,
    .act_size = gsa_act_size_,
    .scratch_size = gsa_scratch_size_,
    .forward = gsa_forward_,
    .backward = gsa_backward_,
    .state_size = gsa_state_size_,
    .state_terms = gsa_state_terms_,
    .state_init = gsa_state_init_,
    .step = gsa_step_,
};
