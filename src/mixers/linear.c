/*
 * The linear-attention family around the chunked recurrence (nn/linrec.h): three registry entries that
 * share this file's layer, as flash-linear-attention defines them
 * (fla/layers/{linear_attn,multiscale_retention,gla}.py; docs/mixers.md has the equations, options and tensors):
 *
 *   q, k = x W_q^T, x W_k^T  (H heads of Dk)      v = x W_v^T  (H heads of Dv)
 *   gla, retnet with `conv` K > 1: q, k, v = silu(conv_K(...)) first (FLA's use_short_conv, mixers/shortconv.h)
 *   linear_attn  q, k <- phi(q), phi(k) per head (identity | elu+1 | relu | hadamard (W1 x + b1)(W2 x + b2));
 *                no decay; optional normaliser o / (q . sum_s k_s + 1e-10); per-head RMSNorm
 *   retnet       RoPE on q, k; fixed decay gamma_h = 1 - 2^(-5-h); per-head RMSNorm * swish(x W_g^T)
 *   gla          per-channel decay log a = logsigmoid(W_g2 (W_g1 x) + b) / normalizer; RMSNorm * swish(gate)
 *   S_t = diag(a_t) S_{t-1} + k_t v_t^T,  o_t = S_t^T q_t / sqrt(Dk),   y = o_proj(norm(o) [* swish(gate)])
 *
 * The complex forget gate (the dualities paper, "Complex forget gate <-> RoPE"; option `rotate`, always on in
 * retnet): the decay of key-channel pair i becomes a_t e^{i w_i}, a rotation by a position-independent angle times
 * the real decay. Its state is S_t = sum_j (prod a) R((t-j) w) k_j v_j^T, and since R((t-j) w) = R(t w)^T R(j w),
 * the recurrence is the real one on q_t, k_t rotated by their own position t: RoPE applied to q and k before the
 * engine (docs/dualities.md checks it against the complex recurrence).
 *
 * One options struct and one set of functions; each entry's schema lists only the keys that mean something
 * for it (a feature map on retnet is an unknown key), with that mixer's reference defaults.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixers/linear.h"
#include "mixers/mixer.h"
#include "mixers/mixer_kit.h"
#include "mixers/selrope.h"
#include "mixers/shortconv.h"
#include "nn/activation.h"
#include "nn/groupnorm.h"
#include "nn/linrec.h"
#include "nn/matmul.h"
#include "nn/rotary.h"


#define KEY_(...) MIXER_KEY(LinOpts, __VA_ARGS__)
#define KEY_HEADS_(def) KEY_("heads", CFG_INT, heads, def, 1, 1024, NULL, "Number of heads H.")
#define KEY_EXPAND_K_(def) \
    KEY_("expand_k", CFG_FLOAT, expand_k, def, 0.01, 64, NULL, "Key width H Dk = expand_k d_model (Dk = that / H).")
#define KEY_EXPAND_V_(def) \
    KEY_("expand_v", CFG_FLOAT, expand_v, def, 0.01, 64, NULL, "Value width H Dv = expand_v d_model (Dv = that / H).")
#define KEY_CHUNK_(def) \
    KEY_("chunk", CFG_INT, chunk, def, 1, 1 << 16, NULL, \
         "Tokens per chunk of the chunkwise-parallel recurrence (a speed/memory knob: results do not depend on it).")
#define KEY_EPS_(def) KEY_("norm_eps", CFG_FLOAT, norm_eps, def, 0, 1, NULL, "Epsilon of the per-head output RMSNorm.")
#define KEY_STD_ \
    KEY_("init_std", CFG_FLOAT, init_std, "0.02", 0, 10, NULL, \
         "Std of every Linear's normal init (FLA's _init_weights; biases 0, no depth scaling).")
#define KEY_ROPE_BASE_ \
    KEY_("rope_base", CFG_FLOAT, rope_base, "10000", 1, 1e12, NULL, \
         "RoPE base of the rotation (half-split pairs): pair i turns by base^(-2i/Dk) per token.")
#define KEY_ROTATE_ \
    KEY_("rotate", CFG_BOOL, rotate, "false", 0, 0, NULL, \
         "Complex forget gate: key-channel pairs rotate by a fixed angle per token on top of the decay, i.e. RoPE " \
         "on q and k (after the feature map); the linear dual of RoPE attention.")
#define KEY_CONV_ SHORTCONV_KEY(LinOpts, conv, "0", "q, k, v = the projections: FLA's default use_short_conv false")
#define KEY_GATE_ \
    KEY_("output_gate", CFG_BOOL, output_gate, "true", 0, 0, NULL, \
         "Multiply the normed output by swish(x W_g^T) (FusedRMSNormGated); false = RMSNorm only.")

static const CfgKey LINEAR_ATTN_KEYS_[] = {
    KEY_HEADS_("4"), KEY_EXPAND_K_("1"), KEY_EXPAND_V_("1"),
    KEY_("feature_map", CFG_ENUM, feature_map, "\"hadamard\"", 0, 0, "identity|elu|relu|hadamard",
         "phi on q and k per head: identity, elu(x)+1, relu, or hadamard (W1 x + b1) * (W2 x + b2) with Dk x Dk "
         "Linears, untied between q and k (FLA's default 'elementwise_product')."),
    KEY_("normalize", CFG_BOOL, normalize, "false", 0, 0, NULL,
         "Divide o_t by q_t . sum_{s<=t} k_s + 1e-10 (FLA's do_feature_map_norm)."),
    KEY_ROTATE_, KEY_ROPE_BASE_, KEY_CHUNK_("64"), KEY_EPS_("1e-5"), KEY_STD_,
};
static const CfgKey RETNET_KEYS_[] = {
    KEY_HEADS_("8"), KEY_EXPAND_K_("1"), KEY_EXPAND_V_("2"), KEY_GATE_,
    KEY_ROPE_BASE_, KEY_CONV_, KEY_CHUNK_("64"), KEY_EPS_("1e-6"), KEY_STD_,
};
static const CfgKey GLA_KEYS_[] = {
    KEY_HEADS_("4"), KEY_EXPAND_K_("0.5"), KEY_EXPAND_V_("1"), KEY_GATE_,
    KEY_("gate_rank", CFG_INT, gate_rank, "16", 1, 4096, NULL, "Rank of the decay gate: x -> rank -> H Dk."),
    KEY_("gate_normalizer", CFG_FLOAT, gate_normalizer, "16", 1e-3, 1e6, NULL,
         "log a = logsigmoid(gate) / gate_normalizer (a = 0.958 at init with 16)."),
    KEY_ROTATE_, KEY_ROPE_BASE_, KEY_CONV_, KEY_CHUNK_("16"), KEY_EPS_("1e-6"), KEY_STD_, SELROPE_KEY(LinOpts, sr),
};
#define NKEYS_(a) ((int)(sizeof a / sizeof a[0]))
static const CfgSection LINEAR_ATTN_SCHEMA_ = {"linear_attn", "Options of the linear_attn mixer.", LINEAR_ATTN_KEYS_,
                                               NKEYS_(LINEAR_ATTN_KEYS_)};
static const CfgSection RETNET_SCHEMA_ = {"retnet", "Options of the retnet mixer.", RETNET_KEYS_, NKEYS_(RETNET_KEYS_)};
static const CfgSection GLA_SCHEMA_ = {"gla", "Options of the gla mixer.", GLA_KEYS_, NKEYS_(GLA_KEYS_)};

// ----------------------------------------------------------------------------
// options and parameters

static int lin_check_(MixerSpec *s, const char *path, Err *e, int variant) {
    LinOpts *o = s->opts;
    int C = s->C;
    o->variant = variant;
    o->H = o->heads;
    o->HK = (int)lround(o->expand_k * C);
    o->HV = (int)lround(o->expand_v * C);
    if (o->HK < o->H || o->HK % o->H)
        return err_set(e, "%s.expand_k: the key width %g x %d = %d is not a multiple of heads %d", path, o->expand_k, C,
                       o->HK, o->H);
    if (o->HV < o->H || o->HV % o->H)
        return err_set(e, "%s.expand_v: the value width %g x %d = %d is not a multiple of heads %d", path, o->expand_v,
                       C, o->HV, o->H);
    o->Dk = o->HK / o->H;
    o->Dv = o->HV / o->H;
    if (variant == LIN_RETNET) o->rotate = 1;  // RetNet's retention is the complex forget gate
    if (o->rotate && o->Dk % 2)
        return err_set(e, "%s.expand_k: the rotation (RoPE) needs an even key head size (Dk = %d)", path, o->Dk);
    o->fmap = FMAP_IDENTITY;
    if (variant == LIN_LINEAR_ATTN) {
        const char *f = o->feature_map;
        o->fmap = !strcmp(f, "elu") ? FMAP_ELU : !strcmp(f, "relu") ? FMAP_RELU : !strcmp(f, "hadamard") ? FMAP_HADAMARD
                                                                                                     : FMAP_IDENTITY;
    }
    if (variant == LIN_LINEAR_ATTN) o->output_gate = 0;
    o->Dva = o->Dv + (o->normalize ? 1 : 0);
    o->GW = o->rotate ? o->HK / 2 : o->HK;
    o->K = shortconv_taps(o->conv);  // absent from linear_attn's schema: 0
    int k = 0, cv = o->K > 0;
    o->k_q = k++, o->k_k = k++, o->k_v = k++;
    o->k_cq = cv ? k++ : -1, o->k_ck = cv ? k++ : -1, o->k_cv = cv ? k++ : -1;
    int had = o->fmap == FMAP_HADAMARD;
    o->k_f1w = had ? k++ : -1, o->k_f1b = had ? k++ : -1, o->k_f2w = had ? k++ : -1, o->k_f2b = had ? k++ : -1;
    o->k_f3w = had ? k++ : -1, o->k_f3b = had ? k++ : -1, o->k_f4w = had ? k++ : -1, o->k_f4b = had ? k++ : -1;
    o->k_g = o->output_gate ? k++ : -1;
    int gla = variant == LIN_GLA;
    o->k_gk1 = gla ? k++ : -1, o->k_gk2 = gla ? k++ : -1, o->k_gkb = gla ? k++ : -1;
    o->k_norm = k++;
    o->k_o = k++;
    if (o->sr.enabled && o->rotate)
        return err_set(e, "%s.selective_rope.enabled: selective RoPE and the complex forget gate (rotate true) both "
                       "rotate q and k; use one of them", path);
    if (selrope_check(&o->sr, path, C, o->H, o->Dk, &k, e)) return -1;
    return 0;
}
static int linear_attn_check_(MixerSpec *s, const char *path, Err *e) { return lin_check_(s, path, e, LIN_LINEAR_ATTN); }
static int retnet_check_(MixerSpec *s, const char *path, Err *e) { return lin_check_(s, path, e, LIN_RETNET); }
static int gla_check_(MixerSpec *s, const char *path, Err *e) { return lin_check_(s, path, e, LIN_GLA); }

static int lin_params_(const MixerSpec *s, ParamTable *pt, const char *prefix, int n_layers, Err *e) {
    const LinOpts *o = s->opts;
    (void)n_layers;  // FLA's _init_weights: every Linear N(0, 0.02), no depth scaling (prenorm_residual_strategy None)
    int C = s->C, K = o->Dk;
    float std = (float)o->init_std;
    MIXER_ADD("q_proj", 2, ((int[]){o->HK, C}), init_normal(std), 1);
    MIXER_ADD("k_proj", 2, ((int[]){o->HK, C}), init_normal(std), 1);
    MIXER_ADD("v_proj", 2, ((int[]){o->HV, C}), init_normal(std), 1);
    if (shortconv_params(pt, prefix, o->HK, o->HV, o->K, std, e)) return -1;
    if (o->fmap == FMAP_HADAMARD) {
        // phi(x) = (W1 x + b1) * (W2 x + b2) per head, one pair for q (fmap_q.*) and one for k (fmap_k.*)
        MIXER_ADD("fmap_q.w1", 2, ((int[]){K, K}), init_normal(std), 1);
        MIXER_ADD("fmap_q.b1", 1, ((int[]){K}), init_zeros(), 0);
        MIXER_ADD("fmap_q.w2", 2, ((int[]){K, K}), init_normal(std), 1);
        MIXER_ADD("fmap_q.b2", 1, ((int[]){K}), init_zeros(), 0);
        MIXER_ADD("fmap_k.w1", 2, ((int[]){K, K}), init_normal(std), 1);
        MIXER_ADD("fmap_k.b1", 1, ((int[]){K}), init_zeros(), 0);
        MIXER_ADD("fmap_k.w2", 2, ((int[]){K, K}), init_normal(std), 1);
        MIXER_ADD("fmap_k.b2", 1, ((int[]){K}), init_zeros(), 0);
    }
    if (o->output_gate) MIXER_ADD("g_proj", 2, ((int[]){o->HV, C}), init_normal(std), 1);
    if (o->variant == LIN_GLA) {
        MIXER_ADD("gk_proj1", 2, ((int[]){o->gate_rank, C}), init_normal(std), 1);
        MIXER_ADD("gk_proj2", 2, ((int[]){o->GW, o->gate_rank}), init_normal(std), 1);
        MIXER_ADD("gk_bias", 1, ((int[]){o->GW}), init_zeros(), 0);
    }
    MIXER_ADD("o_norm", 1, ((int[]){o->Dv}), init_ones(), 0);
    MIXER_ADD("o_proj", 2, ((int[]){C, o->HV}), init_normal(std), 1);
    return selrope_params(&o->sr, pt, prefix, e);
}

// ----------------------------------------------------------------------------
// saved activations

typedef struct LinActs {
    float *pq, *pk, *pv;    // (BT,HK) (BT,HK) (BT,HV) conv: the projections, the convs' inputs
    float *cq, *ck, *cv;    // conv: the convs' outputs, silu's inputs
    float *xq, *xk, *xv;    // (BT,HK) (BT,HK) (BT,HV) the projections (conv: silu of the convs' outputs)
    float *fa, *fb;         // (BT,HK) x4 hadamard: W1 x + b1, W2 x + b2 of q (fa) and of k (fb), two slabs each
    float *q, *k, *v;       // (BT,HK) (BT,HK) (BT,H,Dva) what the recurrence reads
    float *gr, *gpre, *g;   // (BT,rank) (BT,GW) (BT,HK) gla: low-rank gate, its pre-activation, the log-decay
    float *o;               // (BT,H,Dva) the recurrence's output
    float *on;              // (BT,HV) after the normaliser (normalize) or NULL (= o)
    float *z;               // (BT,HV) output gate pre-activation
    float *rstd;            // (BT*H,)
    float *yn;              // (BT,HV) normed (and gated): o_proj's input
    float *ckpt;
    float *sr;              // selective_rope's activations (selrope_act_size)
} LinActs;

static size_t lin_layout_(const MixerSpec *s, int B, int T, float *base, LinActs *a) {
    const LinOpts *o = s->opts;
    size_t BT = (size_t)B * T, n = 0;
    int had = o->fmap == FMAP_HADAMARD, fm = o->fmap != FMAP_IDENTITY, gla = o->variant == LIN_GLA;
    int rope = o->rotate || o->sr.enabled;
    LinActs t;
    if (!a) a = &t;
    LinrecDims d = lin_dims(o, B, T);
    int cv = o->K > 0;
    a->pq = mixer_take(base, &n, BT * o->HK, cv);
    a->pk = mixer_take(base, &n, BT * o->HK, cv);
    a->pv = mixer_take(base, &n, BT * o->HV, cv);
    a->cq = mixer_take(base, &n, BT * o->HK, cv);
    a->ck = mixer_take(base, &n, BT * o->HK, cv);
    a->cv = mixer_take(base, &n, BT * o->HV, cv);
    a->xq = mixer_take(base, &n, BT * o->HK, 1);
    a->xk = mixer_take(base, &n, BT * o->HK, 1);
    a->xv = mixer_take(base, &n, BT * o->HV, 1);
    a->fa = mixer_take(base, &n, 2 * BT * o->HK, had);
    a->fb = mixer_take(base, &n, 2 * BT * o->HK, had);
    a->q = mixer_take(base, &n, BT * o->HK, fm || rope);
    a->k = mixer_take(base, &n, BT * o->HK, fm || rope);
    a->v = mixer_take(base, &n, BT * o->H * o->Dva, o->normalize);
    a->gr = mixer_take(base, &n, BT * o->gate_rank, gla);
    a->gpre = mixer_take(base, &n, BT * o->GW, gla);
    a->g = mixer_take(base, &n, BT * o->HK, gla);
    a->o = mixer_take(base, &n, BT * o->H * o->Dva, 1);
    a->on = mixer_take(base, &n, BT * o->HV, o->normalize);
    a->z = mixer_take(base, &n, BT * o->HV, o->output_gate);
    a->rstd = mixer_take(base, &n, BT * o->H, 1);
    a->yn = mixer_take(base, &n, BT * o->HV, 1);
    a->ckpt = mixer_take(base, &n, linrec_ckpt_size(&d), 1);
    a->sr = mixer_take(base, &n, selrope_act_size(&o->sr, B, T), o->sr.enabled);
    if (!a->q) a->q = a->xq, a->k = a->xk;
    if (!a->v) a->v = a->xv;
    if (!a->on) a->on = a->o;
    return n;
}

static size_t lin_act_size_(const MixerSpec *s, int B, int T) { return lin_layout_(s, B, T, NULL, NULL); }

// one slab of the backward's work space: B T times the widest row
static size_t lin_slab_(const LinOpts *o, int B, int T) {
    size_t w = (size_t)(o->HK > o->H * o->Dva ? o->HK : o->H * o->Dva);
    if ((size_t)o->gate_rank > w) w = (size_t)o->gate_rank;
    return (size_t)B * T * w;
}

static size_t lin_scratch_size_(const MixerSpec *s, int B, int T) {
    const LinOpts *o = s->opts;
    // backward: dyn, dz, don, dq, dk, dv(aug), dxq, dxk, dg, dgr: bounded by 10 slabs of the widest; then
    // selective_rope's own work space
    return 12 * lin_slab_(o, B, T) + selrope_scratch_size(&o->sr, B, T);
}

// ----------------------------------------------------------------------------
// the pieces forward and step share

static const GroupNormOpts *lin_norm_opts_(const LinOpts *o, GroupNormOpts *g) {
    *g = (GroupNormOpts){o->output_gate ? GROUPNORM_GATE_AFTER : GROUPNORM_GATE_NONE, 0, 1, (float)o->norm_eps};
    return g;
}

// q or k of N rows through the feature map: out (N,HK) from x (N,HK); fa (2,N,HK) keeps the hadamard halves
static void lin_fmap_(const Mixer *m, int which, float *out, float *fa, const float *x, int N) {
    const LinOpts *o = m->spec->opts;
    size_t n = (size_t)N * o->HK;
    switch (o->fmap) {
    case FMAP_ELU:
#pragma omp parallel for
        for (size_t i = 0; i < n; i++) out[i] = x[i] > 0.0f ? x[i] + 1.0f : expf(x[i]);
        break;
    case FMAP_RELU:
        relu_forward(out, x, n);
        break;
    case FMAP_HADAMARD: {
        int k0 = which ? o->k_f3w : o->k_f1w;  // w1, b1, w2, b2 follow in declaration order
        // per head: a row of N*H head vectors of Dk through the shared Dk x Dk Linears
        matmul_forward(fa, x, mixer_param(m, k0), mixer_param(m, k0 + 1), N * o->H, o->Dk, o->Dk);
        matmul_forward(fa + n, x, mixer_param(m, k0 + 2), mixer_param(m, k0 + 3), N * o->H, o->Dk, o->Dk);
#pragma omp parallel for
        for (size_t i = 0; i < n; i++) out[i] = fa[i] * fa[n + i];
        break;
    }
    default:
        break;
    }
}

// v (N,HV) -> (N,H,Dv+1) with a column of ones per head (the normaliser q . sum k comes out as the last column)
static void lin_augment_(const LinOpts *o, float *va, const float *v, int N) {
#pragma omp parallel for
    for (long r = 0; r < (long)N * o->H; r++) {
        memcpy(va + (size_t)r * o->Dva, v + (size_t)r * o->Dv, (size_t)o->Dv * sizeof(float));
        va[(size_t)r * o->Dva + o->Dv] = 1.0f;
    }
}

// on (N,HV) = o[:Dv] / (o[Dv] + eps) per head
static void lin_normalize_(const LinOpts *o, float *on, const float *oa, int N) {
#pragma omp parallel for
    for (long r = 0; r < (long)N * o->H; r++) {
        const float *src = oa + (size_t)r * o->Dva;
        float inv = 1.0f / (src[o->Dv] + LIN_NORMALIZE_EPS);
        for (int j = 0; j < o->Dv; j++) on[(size_t)r * o->Dv + j] = src[j] * inv;
    }
}

// the gate pre-activation index of key channel c of row r (r = token * H + head): with rotate both channels
// of a rotated pair (c, c + Dk/2) read the pair's one gate, so its decay is a complex a e^{iw}
static inline size_t lin_gate_at_(const LinOpts *o, size_t r, int c) {
    return o->rotate ? r * (o->Dk / 2) + c % (o->Dk / 2) : r * o->Dk + c;
}

// the gla log-decay g (N,HK) from x (N,C); keeps gr (N,rank) and gpre (N,GW)
static void lin_decay_(const Mixer *m, float *g, float *gr, float *gpre, const float *x, int N) {
    const LinOpts *o = m->spec->opts;
    matmul_forward(gr, x, mixer_param(m, o->k_gk1), NULL, N, m->spec->C, o->gate_rank);
    matmul_forward(gpre, gr, mixer_param(m, o->k_gk2), mixer_param(m, o->k_gkb), N, o->gate_rank, o->GW);
    float inv = (float)(1.0 / o->gate_normalizer);
#pragma omp parallel for
    for (long r = 0; r < (long)N * o->H; r++)
        for (int c = 0; c < o->Dk; c++)
            g[(size_t)r * o->Dk + c] = (float)mixer_logsigmoid(gpre[lin_gate_at_(o, (size_t)r, c)]) * inv;
}

// the fixed RetNet decays log(1 - 2^(-5-h)) (H,)
static void lin_retnet_decay_(const LinOpts *o, float *g) {
    for (int h = 0; h < o->H; h++) g[h] = (float)log1p(-ldexp(1.0, -5 - h));
}

static RotaryCfg lin_rope_(const LinOpts *o) {
    RotaryCfg r = {ROTARY_HALF, (float)o->rope_base, NULL};
    return r;
}

// ----------------------------------------------------------------------------
// forward

static void lin_forward_(Mixer *m, float *y, const float *x, int B, int T) {
    const LinOpts *o = m->spec->opts;
    int C = m->spec->C, BT = B * T;
    LinActs a;
    lin_layout_(m->spec, B, T, m->acts, &a);
    // the projections (with conv: through it and silu); everything after reads xq, xk, xv
    shortconv_forward(m, o->k_q, o->k_cq, o->K, 0, a.xq, a.cq, a.pq, x, B, T, o->HK);
    shortconv_forward(m, o->k_k, o->k_ck, o->K, 0, a.xk, a.ck, a.pk, x, B, T, o->HK);
    shortconv_forward(m, o->k_v, o->k_cv, o->K, 0, a.xv, a.cv, a.pv, x, B, T, o->HV);
    if (o->fmap != FMAP_IDENTITY) {
        lin_fmap_(m, 0, a.q, a.fa, a.xq, BT);
        lin_fmap_(m, 1, a.k, a.fb, a.xk, BT);
    }
    float gh[1024];
    const float *g = NULL;
    if (o->rotate) {  // after the feature map, in place when there is one
        RotaryCfg rc = lin_rope_(o);
        int fm = o->fmap != FMAP_IDENTITY;
        rotary_forward(a.q, fm ? a.q : a.xq, &rc, 0, B, T, o->H, o->Dk);
        rotary_forward(a.k, fm ? a.k : a.xk, &rc, 0, B, T, o->H, o->Dk);
    }
    if (o->sr.enabled) {  // gla (identity feature map): right after the projections
        selrope_forward(m, &o->sr, a.sr, x, B, T);
        selrope_apply(&o->sr, a.sr, a.q, a.xq, B, T);
        selrope_apply(&o->sr, a.sr, a.k, a.xk, B, T);
    }
    if (o->variant == LIN_RETNET) {
        lin_retnet_decay_(o, gh);
        g = gh;
    } else if (o->variant == LIN_GLA) {
        lin_decay_(m, a.g, a.gr, a.gpre, x, BT);
        g = a.g;
    }
    if (o->normalize) lin_augment_(o, a.v, a.xv, BT);
    LinrecDims d = lin_dims(o, B, T);
    linrec_forward(a.o, NULL, a.ckpt, NULL, a.q, a.k, a.v, g, NULL, &d);
    if (o->normalize) lin_normalize_(o, a.on, a.o, BT);
    if (o->output_gate) matmul_forward(a.z, x, mixer_param(m, o->k_g), NULL, BT, C, o->HV);
    GroupNormOpts gn;
    groupnorm_forward(a.yn, NULL, a.rstd, a.on, a.z, mixer_param(m, o->k_norm), BT, o->H, o->Dv, lin_norm_opts_(o, &gn));
    matmul_forward(y, a.yn, mixer_param(m, o->k_o), NULL, BT, o->HV, C);
}

// ----------------------------------------------------------------------------
// backward

// dx (N,HK) += d phi(x) given dout (N,HK) for the feature map of q (which 0) or k (1)
static void lin_fmap_backward_(Mixer *m, int which, float *dx, const float *dout, const float *x, const float *fa,
                               float *tmp, int N) {
    const LinOpts *o = m->spec->opts;
    size_t n = (size_t)N * o->HK;
    switch (o->fmap) {
    case FMAP_ELU:
#pragma omp parallel for
        for (size_t i = 0; i < n; i++) dx[i] += dout[i] * (x[i] > 0.0f ? 1.0f : expf(x[i]));
        break;
    case FMAP_RELU:
        relu_backward(dx, x, dout, n);
        break;
    case FMAP_HADAMARD: {
        int k0 = which ? o->k_f3w : o->k_f1w;
        // phi = a1 * a2: d a1 = dout * a2 (into tmp), d a2 = dout * a1 (into tmp + n)
#pragma omp parallel for
        for (size_t i = 0; i < n; i++) { tmp[i] = dout[i] * fa[n + i]; tmp[n + i] = dout[i] * fa[i]; }
        matmul_backward(dx, mixer_grad(m, k0), mixer_grad(m, k0 + 1), tmp, x, mixer_param(m, k0), N * o->H, o->Dk, o->Dk);
        matmul_backward(dx, mixer_grad(m, k0 + 2), mixer_grad(m, k0 + 3), tmp + n, x, mixer_param(m, k0 + 2), N * o->H,
                        o->Dk, o->Dk);
        break;
    }
    default:
        break;
    }
}

static void lin_backward_(Mixer *m, float *dx, const float *dy, const float *x, int B, int T) {
    const LinOpts *o = m->spec->opts;
    int C = m->spec->C, BT = B * T;
    size_t nK = (size_t)BT * o->HK, nV = (size_t)BT * o->HV, nA = (size_t)BT * o->H * o->Dva;
    LinActs a;
    lin_layout_(m->spec, B, T, m->acts, &a);
    size_t w = lin_slab_(o, B, T);
    float *dyn = m->scratch, *dz = dyn + w, *don = dz + w, *doa = don + w, *dq = doa + w, *dk = dq + w;
    float *dv = dk + w, *dxq = dv + w, *dxk = dxq + w, *dg = dxk + w, *tmp = dg + w;  // tmp: 2 slabs

    // y = yn W_o^T
    matmul(dyn, dy, mixer_param(m, o->k_o), BT, o->HV, C, 0, 0, 0);
    matmul_backward(NULL, mixer_grad(m, o->k_o), NULL, dy, a.yn, mixer_param(m, o->k_o), BT, o->HV, C);
    // yn = norm(on) [* swish(z)]
    memset(don, 0, nV * sizeof(float));
    if (o->output_gate) memset(dz, 0, nV * sizeof(float));
    GroupNormOpts gn;
    groupnorm_backward(don, o->output_gate ? dz : NULL, mixer_grad(m, o->k_norm), dyn, a.on, a.z,
                       mixer_param(m, o->k_norm), NULL, a.rstd, BT, o->H, o->Dv, lin_norm_opts_(o, &gn));
    if (o->output_gate) matmul_backward(dx, mixer_grad(m, o->k_g), NULL, dz, x, mixer_param(m, o->k_g), BT, C, o->HV);
    // on = o[:Dv] / (o[Dv] + eps)
    const float *dO = don;
    if (o->normalize) {
#pragma omp parallel for
        for (long r = 0; r < (long)BT * o->H; r++) {
            const float *src = a.o + (size_t)r * o->Dva, *dn = don + (size_t)r * o->Dv;
            float *dst = doa + (size_t)r * o->Dva, den = src[o->Dv] + LIN_NORMALIZE_EPS, s = 0.0f;
            for (int j = 0; j < o->Dv; j++) { dst[j] = dn[j] / den; s += dn[j] * src[j]; }
            dst[o->Dv] = -s / (den * den);
        }
        dO = doa;
    }
    // the recurrence
    memset(dq, 0, nK * sizeof(float));
    memset(dk, 0, nK * sizeof(float));
    memset(dv, 0, nA * sizeof(float));
    float gh[1024];
    const float *g = NULL;
    if (o->variant == LIN_RETNET) lin_retnet_decay_(o, gh), g = gh;
    if (o->variant == LIN_GLA) {
        g = a.g;
        memset(dg, 0, nK * sizeof(float));
    }
    LinrecDims d = lin_dims(o, B, T);
    linrec_backward(dq, dk, dv, o->variant == LIN_GLA ? dg : NULL, NULL, dO, NULL, a.ckpt, a.q, a.k, a.v, g, NULL, &d);
    // gla: g = logsigmoid(gpre) / normalizer, gpre = (x W1^T) W2^T + b
    if (o->variant == LIN_GLA) {
        float inv = (float)(1.0 / o->gate_normalizer);
        if (o->rotate) {  // the two channels of a pair share one gate: sum their gradients, in place (dg[.., :Dk/2])
#pragma omp parallel for
            for (long r = 0; r < (long)BT * o->H; r++) {
                float *dr = dg + (size_t)r * o->Dk;
                for (int c = 0; c < o->Dk / 2; c++) dr[c] += dr[c + o->Dk / 2];
            }
        }
        float *dgp = dyn;  // (BT,GW); dyn is free since the norm's backward
#pragma omp parallel for
        for (long r = 0; r < (long)BT * o->H; r++)
            for (int c = 0; c < o->GW / o->H; c++) {
                size_t i = (size_t)r * (o->GW / o->H) + c;
                dgp[i] = dg[(size_t)r * o->Dk + c] * inv * (float)mixer_sigmoid(-a.gpre[i]);
            }
        float *dgr = tmp;
        memset(dgr, 0, (size_t)BT * o->gate_rank * sizeof(float));
        matmul_backward(dgr, mixer_grad(m, o->k_gk2), mixer_grad(m, o->k_gkb), dgp, a.gr, mixer_param(m, o->k_gk2), BT,
                        o->gate_rank, o->GW);
        matmul_backward(dx, mixer_grad(m, o->k_gk1), NULL, dgr, x, mixer_param(m, o->k_gk1), BT, C, o->gate_rank);
    }
    // v: drop the ones column
    const float *dxv = dv;
    if (o->normalize) {
#pragma omp parallel for
        for (long r = 0; r < (long)BT * o->H; r++)
            memcpy(doa + (size_t)r * o->Dv, dv + (size_t)r * o->Dva, (size_t)o->Dv * sizeof(float));
        dxv = doa;
    }
    // q, k through RoPE or the feature map
    const float *dq0 = dq, *dk0 = dk;
    if (o->sr.enabled) {
        float *srs = m->scratch + 12 * w, *dth = selrope_dtheta(&o->sr, srs, B, T);
        selrope_apply_backward(&o->sr, a.sr, dxq, dth, dq, a.q, B, T);
        selrope_apply_backward(&o->sr, a.sr, dxk, dth, dk, a.k, B, T);
        selrope_backward(m, &o->sr, a.sr, srs, dx, x, B, T);
        dq0 = dxq, dk0 = dxk;
    } else if (o->rotate || o->fmap != FMAP_IDENTITY) {
        memset(dxq, 0, nK * sizeof(float));
        memset(dxk, 0, nK * sizeof(float));
        RotaryCfg rc = lin_rope_(o);
        if (o->fmap == FMAP_IDENTITY) {
            rotary_backward(dxq, dq, &rc, 0, B, T, o->H, o->Dk);
            rotary_backward(dxk, dk, &rc, 0, B, T, o->H, o->Dk);
        } else {
            // undo the rotation (into dyn, free since the norm's backward) before the feature map's backward
            float *dr[2] = {dq, dk}, *dxs[2] = {dxq, dxk};
            for (int w2 = 0; w2 < 2; w2++) {
                const float *dphi = dr[w2];
                if (o->rotate) {
                    memset(dyn, 0, nK * sizeof(float));
                    rotary_backward(dyn, dr[w2], &rc, 0, B, T, o->H, o->Dk);
                    dphi = dyn;
                }
                lin_fmap_backward_(m, w2, dxs[w2], dphi, w2 ? a.xk : a.xq, w2 ? a.fb : a.fa, tmp, BT);
            }
        }
        dq0 = dxq, dk0 = dxk;
    }
    // the projections (with conv: silu and the convs first; dyn and dz are free since the norm's and the
    // gate's backward)
    shortconv_backward(m, o->k_q, o->k_cq, o->K, 0, dx, dyn, dz, dq0, a.cq, a.pq, x, B, T, o->HK);
    shortconv_backward(m, o->k_k, o->k_ck, o->K, 0, dx, dyn, dz, dk0, a.ck, a.pk, x, B, T, o->HK);
    shortconv_backward(m, o->k_v, o->k_cv, o->K, 0, dx, dyn, dz, dxv, a.cv, a.pv, x, B, T, o->HV);
}

// ----------------------------------------------------------------------------
// recurrent decoding: per sequence [the recurrence's state (H, Dk*Dva) | rotate: the position (1) |
// selective_rope: its state (selrope_state_size) | conv: the caches of q, k, v (shortconv_state_size)]

static size_t lin_state_size_(const MixerSpec *s, int cap) {
    const LinOpts *o = s->opts;
    LinrecDims d = lin_dims(o, 1, 1);
    return (size_t)o->H * linrec_state_size(&d) + (o->rotate != 0) + selrope_state_size(&o->sr) +
           shortconv_state_size(o->HK, o->HV, o->K);
}

// where the position (rotate) and selective_rope's state start in a sequence's state
static size_t lin_pos_at_(const LinOpts *o) {
    LinrecDims d = lin_dims(o, 1, 1);
    return (size_t)o->H * linrec_state_size(&d);
}

// Table 1's GLA row H·dk·dv (linear_attn's and retnet's matrix states have the same shape), then what it does not
// count: the normaliser's column, the position, selective_rope's state; and Table 1's short-conv row
static void lin_state_terms_(const MixerSpec *s, int T, StateTerms *st) {
    const LinOpts *o = s->opts;
    static const char *const names[] = {"linear attention state", "RetNet state", "GLA state"};
    (void)T;
    state_terms_add(st, 1, (size_t)o->H * o->Dk * o->Dv, names[o->variant], "H·dk·dv = %d·%d·%d", o->H, o->Dk, o->Dv);
    if (o->normalize) state_terms_add(st, 0, (size_t)o->H * o->Dk, "normaliser (sum of k)", "H·dk = %d·%d", o->H, o->Dk);
    if (o->rotate) state_terms_add(st, 0, 1, "position (RoPE)", "1");
    selrope_state_terms(&o->sr, st);
    shortconv_state_terms(st, o->H, o->Dk, o->Dv, o->K);
}

// where the conv caches start (they end the state)
static size_t lin_conv_at_(const LinOpts *o) {
    return lin_pos_at_(o) + (o->rotate != 0) + selrope_state_size(&o->sr);
}

static void lin_state_init_(const Mixer *m, float *state, int B, int cap) {
    const LinOpts *o = m->spec->opts;
    LinrecDims d = lin_dims(o, 1, 1);
    size_t n = lin_state_size_(m->spec, 0), nc = shortconv_state_size(o->HK, o->HV, o->K);
    for (int b = 0; b < B; b++) {
        memset(state + b * n + lin_conv_at_(o), 0, nc * sizeof(float));  // the zero padding before the first token
        linrec_state_init(state + b * n, &d);
        if (o->rotate) state[b * n + lin_pos_at_(o)] = 0.0f;  // the next token's position (RoPE); exact to 2^24
        if (o->sr.enabled)
            memset(state + b * n + lin_pos_at_(o) + (o->rotate != 0), 0, selrope_state_size(&o->sr) * sizeof(float));
    }
}

static void lin_step_(const Mixer *m, float *state, float *y, const float *x, int B, int t, int cap) {
    const LinOpts *o = m->spec->opts;
    int C = m->spec->C;
    size_t n = lin_state_size_(m->spec, 0), rs = lin_pos_at_(o);
    size_t bk = (size_t)B * o->HK, bv = (size_t)B * o->HV, ba = (size_t)B * o->H * o->Dva;
    float *buf = xmalloc((6 * bk + 3 * bv + 2 * ba + (size_t)B * o->gate_rank + (size_t)B * o->H + 4 * bk) *
                         sizeof(float));
    float *xq = buf, *xk = xq + bk, *q = xk + bk, *k = q + bk, *g = k + bk, *gpre = g + bk, *xv = gpre + bk;
    float *z = xv + bv, *yn = z + bv, *va = yn + bv, *oa = va + ba, *gr = oa + ba, *rstd = gr + (size_t)B * o->gate_rank;
    float *fa = rstd + (size_t)B * o->H;
    float *cs = state + lin_conv_at_(o);  // the conv caches of q, k, v one after another (shortconv.h)
    size_t K1 = o->K ? (size_t)o->K - 1 : 0;
    shortconv_step(m, o->k_q, o->k_cq, o->K, 0, xq, cs, n, x, B, o->HK);
    shortconv_step(m, o->k_k, o->k_ck, o->K, 0, xk, cs + (size_t)o->HK * K1, n, x, B, o->HK);
    shortconv_step(m, o->k_v, o->k_cv, o->K, 0, xv, cs + (size_t)2 * o->HK * K1, n, x, B, o->HV);
    const float *qs = xq, *ks = xk, *vs = xv, *gp = NULL;
    float gh[1024];
    if (o->fmap != FMAP_IDENTITY) {
        lin_fmap_(m, 0, q, fa, xq, B);
        lin_fmap_(m, 1, k, fa + 2 * bk, xk, B);
        qs = q, ks = k;
    }
    if (o->rotate) {
        RotaryCfg rc = lin_rope_(o);
        for (int b = 0; b < B; b++) {  // each sequence at its own position; after the feature map, in place
            int pos = (int)state[b * n + rs];
            size_t r = (size_t)b * o->HK;
            rotary_forward(q + r, qs + r, &rc, pos, 1, 1, o->H, o->Dk);
            rotary_forward(k + r, ks + r, &rc, pos, 1, 1, o->H, o->Dk);
        }
        qs = q, ks = k;
    }
    if (o->sr.enabled) {  // identity feature map: q, k are the projections; rotated in place
        selrope_step(m, &o->sr, state + rs + (o->rotate != 0), n, xq, xk, x, B);
        qs = xq, ks = xk;
    }
    if (o->variant == LIN_RETNET) {
        lin_retnet_decay_(o, gh);
        gp = gh;
    } else if (o->variant == LIN_GLA) {
        lin_decay_(m, g, gr, gpre, x, B);
        gp = g;
    }
    if (o->normalize) {
        lin_augment_(o, va, xv, B);
        vs = va;
    }
    LinrecDims d = lin_dims(o, 1, 1);
    d.B = 1;
    for (int b = 0; b < B; b++) {
        const float *gb = o->variant == LIN_GLA ? gp + (size_t)b * o->HK : gp;
        linrec_step(oa + (size_t)b * o->H * o->Dva, NULL, state + b * n, qs + (size_t)b * o->HK, ks + (size_t)b * o->HK,
                    vs + (size_t)b * o->H * o->Dva, gb, NULL, &d);
        if (o->rotate) state[b * n + rs] += 1.0f;
    }
    const float *on = oa;
    if (o->normalize) {
        lin_normalize_(o, xv, oa, B);  // xv is free now
        on = xv;
    }
    if (o->output_gate) matmul_forward(z, x, mixer_param(m, o->k_g), NULL, B, C, o->HV);
    GroupNormOpts gn;
    groupnorm_forward(yn, NULL, rstd, on, o->output_gate ? z : NULL, mixer_param(m, o->k_norm), B, o->H, o->Dv,
                      lin_norm_opts_(o, &gn));
    matmul_forward(y, yn, mixer_param(m, o->k_o), NULL, B, o->HV, C);
    free(buf);
}

// ----------------------------------------------------------------------------

#define LIN_OPS_(ident, nm, docline, schema_, checkfn) \
    const MixerOps ident = { \
        .name = nm, \
        .doc = docline, \
        .schema = &schema_, \
        .opts_size = sizeof(LinOpts), \
        .check = checkfn, \
        .params = lin_params_, \
        .act_size = lin_act_size_, \
        .scratch_size = lin_scratch_size_, \
        .forward = lin_forward_, \
        .backward = lin_backward_, \
        .state_size = lin_state_size_, \
        .state_terms = lin_state_terms_, \
        .state_init = lin_state_init_, \
        .step = lin_step_, \
    }

LIN_OPS_(MIXER_LINEAR_ATTN, "linear_attn", "Linear attention: feature maps on q and k, no decay (FLA's LinearAttention)",
         LINEAR_ATTN_SCHEMA_, linear_attn_check_);
LIN_OPS_(MIXER_RETNET, "retnet", "RetNet multi-scale retention: RoPE, fixed per-head decays, gated per-head RMSNorm",
         RETNET_SCHEMA_, retnet_check_);
LIN_OPS_(MIXER_GLA, "gla", "Gated linear attention: a low-rank per-channel decay gate, gated per-head RMSNorm",
         GLA_SCHEMA_, gla_check_);
