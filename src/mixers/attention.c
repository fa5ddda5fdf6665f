/*
 * The `attention` mixer: multi-head causal softmax attention with the position schemes the papers
 * compare, all through one tiled online-softmax kernel (nn/attention.c):
 *
 *   none          NoPE: no position information besides causality
 *   rope          rotary q/k, base and pair layout configurable
 *   alibi         additive bias -m_h (i-j), standard slopes
 *   fox           Forgetting Transformer: additive bias F_i - F_j, F = cumsum_t logsigmoid(w_h·x_t + b_h)
 *   decayed_rope  RoPE with a per-head exponential decay e^{-mu_h (i-j)} (RFA paper B3), either as the
 *                 RFA-style post-softmax factor (decay_mode "post_softmax", the paper's baseline code) or
 *                 as an additive logit bias -mu_h (i-j) (decay_mode "logits")
 *   sc_rope       spectrally coupled RoPE (B4): one RoPE spectrum of H·D/2 frequencies split monotonically
 *                 across heads (head 0 slowest), decay mu_h = b · max(omega_h); decay as in decayed_rope
 * In decayed_rope and sc_rope the first zero_decay_heads heads have mu = 0 (the RFA paper's 2 of 8
 * "infinite-horizon" heads); decayed_rope uses the same mu_h spread with the full spectrum in every head.
 *
 * Shapes: x (B,T,C) -> q,k,v (B,T,H,D) by three row-slices of one (3HD, C) projection, so the papers'
 * d -> 2d -> d attention is heads·head_dim = 2C; optional per-head RMS QK-norm; then rope; then the
 * kernel on (B,H,T,D); then the (C, HD) output projection.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixers/mixer.h"
#include "mixers/mixer_kit.h"
#include "nn/attention.h"
#include "nn/heads.h"
#include "nn/matmul.h"
#include "nn/norm.h"
#include "nn/rotary.h"

#define ATT_MAX_HEADS 64
#define ATT_MAX_HALF 256  // head_dim / 2

enum { POS_NONE, POS_ROPE, POS_ALIBI, POS_FOX, POS_DECAYED_ROPE, POS_SC_ROPE };
static const char *const POS_NAMES_[] = {"none", "rope", "alibi", "fox", "decayed_rope", "sc_rope"};

typedef struct AttentionOpts {
    // from the config
    int heads, head_dim, bias, qk_norm, window;
    char pos[CFG_STR_MAX], rope_layout[CFG_STR_MAX], decay_mode[CFG_STR_MAX];
    double rope_base, damping, fgate_bias_init, init_std;
    int zero_decay_heads;
    // derived by check
    int H, D, HD, pos_kind, layout, decay_logits;
    int k_wqkv, k_bqkv, k_wo, k_bo, k_qn, k_kn, k_fw, k_fb;  // tensor indices (-1 = absent)
    float slopes[ATT_MAX_HEADS];                  // alibi slopes or decays on logits
    float decays[ATT_MAX_HEADS];                  // mu_h
    float freqs[ATT_MAX_HEADS * ATT_MAX_HALF];    // (H, D/2) sc_rope spectrum
} AttentionOpts;

#define KEY_(...) MIXER_KEY(AttentionOpts, __VA_ARGS__)

static const CfgKey ATT_KEYS_[] = {
    KEY_("heads", CFG_INT, heads, "8", 1, ATT_MAX_HEADS, NULL, "Number of heads H."),
    KEY_("head_dim", CFG_INT, head_dim, "0", 0, 2 * ATT_MAX_HALF, NULL,
         "Channels per head D; 0 = C/H. H·D may differ from C (the RFA paper's d->2d->d uses H·D = 2C)."),
    KEY_("bias", CFG_BOOL, bias, "false", 0, 0, NULL, "Biases on the q/k/v and output projections."),
    KEY_("qk_norm", CFG_BOOL, qk_norm, "false", 0, 0, NULL,
         "RMS-normalise q and k per head (learned scale of D, shared by the heads) before the position scheme."),
    KEY_("window", CFG_INT, window, "0", 0, 1 << 24, NULL,
         "Sliding window: a query sees the last `window` positions (itself included); 0 = all."),
    KEY_("pos", CFG_ENUM, pos, "\"rope\"", 0, 0, "none|rope|alibi|fox|decayed_rope|sc_rope",
         "Position scheme (docs/mixers.md)."),
    KEY_("rope_base", CFG_FLOAT, rope_base, "10000", 1, 1e12, NULL, "RoPE base: omega_i = base^(-2i/D)."),
    KEY_("rope_layout", CFG_ENUM, rope_layout, "\"half\"", 0, 0, "half|interleaved",
         "RoPE channel pairs: (i, i+D/2) (GPT-NeoX/Llama) or (2i, 2i+1) (GPT-J)."),
    KEY_("decay_mode", CFG_ENUM, decay_mode, "\"post_softmax\"", 0, 0, "post_softmax|logits",
         "decayed_rope/sc_rope: multiply the softmax by e^{-mu(i-j)} (RFA baseline) or add -mu(i-j) to the logits."),
    KEY_("damping", CFG_FLOAT, damping, "0.05", 0, 1e6, NULL,
         "decayed_rope/sc_rope: b in mu_h = b · max(omega_h) (RFA paper: 0.05 for the main models)."),
    KEY_("zero_decay_heads", CFG_INT, zero_decay_heads, "2", 0, ATT_MAX_HEADS, NULL,
         "decayed_rope/sc_rope: the first this-many heads get mu = 0 (RFA paper: 2 of 8)."),
    KEY_("fgate_bias_init", CFG_FLOAT, fgate_bias_init, "3", -100, 100, NULL,
         "fox: initial forget-gate bias (sigmoid(3) = 0.95 keeps ~20 tokens of memory at the start)."),
    KEY_("init_std", CFG_FLOAT, init_std, "0.02", 0, 10, NULL,
         "Std of the projections' normal init; the output projection uses init_std/sqrt(2·n_layers)."),
};

static const CfgSection ATT_SCHEMA_ = {"attention", "Options of the attention mixer.", ATT_KEYS_,
                                       (int)(sizeof ATT_KEYS_ / sizeof ATT_KEYS_[0])};

// ----------------------------------------------------------------------------
// options

static int att_check_(MixerSpec *s, const char *path, Err *e) {
    AttentionOpts *o = s->opts;
    int C = s->C;
    o->H = o->heads;
    if (mixer_heads_resolve(path, C, o->H, o->head_dim, 2 * ATT_MAX_HALF, &o->D, e) != 0) return -1;
    o->HD = o->H * o->D;
    for (int i = 0; i < 6; i++)
        if (!strcmp(o->pos, POS_NAMES_[i])) o->pos_kind = i;
    int rotary = o->pos_kind == POS_ROPE || o->pos_kind == POS_DECAYED_ROPE || o->pos_kind == POS_SC_ROPE;
    if (rotary && o->D % 2) return err_set(e, "%s.head_dim: %d must be even for %s", path, o->D, o->pos);
    o->layout = !strcmp(o->rope_layout, "half") ? ROTARY_HALF : ROTARY_INTERLEAVED;
    o->decay_logits = !strcmp(o->decay_mode, "logits");
    if ((o->pos_kind == POS_DECAYED_ROPE || o->pos_kind == POS_SC_ROPE) && o->zero_decay_heads > o->H)
        return err_set(e, "%s.zero_decay_heads: %d is more than the %d heads", path, o->zero_decay_heads, o->H);
    // tensor indices in declaration order (att_params declares exactly these)
    int k = 0;
    o->k_wqkv = k++;
    o->k_bqkv = o->bias ? k++ : -1;
    o->k_wo = k++;
    o->k_bo = o->bias ? k++ : -1;
    o->k_qn = o->qk_norm ? k++ : -1;
    o->k_kn = o->qk_norm ? k++ : -1;
    o->k_fw = o->pos_kind == POS_FOX ? k++ : -1;
    o->k_fb = o->pos_kind == POS_FOX ? k++ : -1;
    // fixed (not learned) per-head constants of the position scheme
    int half = o->D / 2;
    if (o->pos_kind == POS_ALIBI) alibi_slopes(o->slopes, o->H);
    if (o->pos_kind == POS_DECAYED_ROPE || o->pos_kind == POS_SC_ROPE) {
        // one spectrum split across heads; mu_h couples to the fastest frequency of head h's band
        rotary_sc_bank(o->freqs, o->decays, o->H, half, o->rope_base, o->damping, o->zero_decay_heads);
        for (int h = 0; h < o->H; h++) o->slopes[h] = o->decays[h];
    }
    return 0;
}

// ----------------------------------------------------------------------------
// parameters

static int att_params_(const MixerSpec *s, ParamTable *pt, const char *prefix, int n_layers, Err *e) {
    const AttentionOpts *o = s->opts;
    int C = s->C, HD = o->HD;
    float std = (float)o->init_std, std_out = (float)(o->init_std / sqrt(2.0 * n_layers));
    MIXER_ADD("wqkv", 2, ((int[]){3 * HD, C}), init_normal(std), 1);
    if (o->bias) MIXER_ADD("bqkv", 1, ((int[]){3 * HD}), init_zeros(), 0);
    MIXER_ADD("wo", 2, ((int[]){C, HD}), init_normal(std_out), 1);
    if (o->bias) MIXER_ADD("bo", 1, ((int[]){C}), init_zeros(), 0);
    if (o->qk_norm) {
        MIXER_ADD("q_norm", 1, ((int[]){o->D}), init_ones(), 0);
        MIXER_ADD("k_norm", 1, ((int[]){o->D}), init_ones(), 0);
    }
    if (o->pos_kind == POS_FOX) {
        MIXER_ADD("fgate_w", 2, ((int[]){o->H, C}), init_normal(std), 1);
        MIXER_ADD("fgate_b", 1, ((int[]){o->H}), init_const((float)o->fgate_bias_init), 0);
    }
    return 0;
}

// ----------------------------------------------------------------------------
// saved activations, in floats, laid out one after another (BT = B*T)

static int att_rotates_(const AttentionOpts *o) {
    return o->pos_kind == POS_ROPE || o->pos_kind == POS_DECAYED_ROPE || o->pos_kind == POS_SC_ROPE;
}

typedef struct AttActs {
    float *q_lin, *k_lin;   // (B,T,HD) pre-norm q, k (qk_norm only)
    float *q_rstd, *k_rstd; // (B*T*H,) (qk_norm only)
    float *qh, *kh, *vh;    // (B,H,T,D) what the kernel saw
    float *oh;              // (B,H,T,D) kernel output
    float *lse;             // (B,H,T)
    float *o_lin;           // (B,T,HD) input of the output projection
    float *fg_pre;          // (B,T,H) forget-gate pre-activations (fox)
    float *fg_cum;          // (B,H,T) F = cumsum logsigmoid (fox)
    float *rope_cos, *rope_sin;  // (T, H or 1, D/2) the forward's rotary table, reused by the backward
                                 //   (building it costs T·D/2 double cos and sin)
} AttActs;

// a's pointers into base (NULL: only count); returns the floats used
static size_t att_layout_(const AttentionOpts *o, int B, int T, float *base, AttActs *a) {
    size_t BT = (size_t)B * T, n = 0;
    size_t big = BT * o->HD, heads = BT * o->H;
    int fox = o->pos_kind == POS_FOX;
    a->q_lin = mixer_take(base, &n, big, o->qk_norm);
    a->k_lin = mixer_take(base, &n, big, o->qk_norm);
    a->q_rstd = mixer_take(base, &n, heads, o->qk_norm);
    a->k_rstd = mixer_take(base, &n, heads, o->qk_norm);
    a->qh = mixer_take(base, &n, big, 1);
    a->kh = mixer_take(base, &n, big, 1);
    a->vh = mixer_take(base, &n, big, 1);
    a->oh = mixer_take(base, &n, big, 1);
    a->lse = mixer_take(base, &n, heads, 1);
    a->o_lin = mixer_take(base, &n, big, 1);
    a->fg_pre = mixer_take(base, &n, heads, fox);
    a->fg_cum = mixer_take(base, &n, heads, fox);
    size_t rope_n = (size_t)T * (o->pos_kind == POS_SC_ROPE ? o->H : 1) * (o->D / 2);  // as rotary_table_init
    a->rope_cos = mixer_take(base, &n, rope_n, att_rotates_(o));
    a->rope_sin = mixer_take(base, &n, rope_n, att_rotates_(o));
    return n;
}

static size_t att_act_size_(const MixerSpec *s, int B, int T) {
    AttActs a;
    return att_layout_(s->opts, B, T, NULL, &a);
}

static size_t att_scratch_size_(const MixerSpec *s, int B, int T) {
    const AttentionOpts *o = s->opts;
    size_t BT = (size_t)B * T;
    return 7 * BT * o->HD + 2 * BT * o->H;
}

static RotaryCfg att_rotary_(const AttentionOpts *o) {
    RotaryCfg rc = {o->layout, (float)o->rope_base, NULL};
    if (o->pos_kind == POS_SC_ROPE) rc.freqs = o->freqs;
    return rc;
}

static AttnOpts att_kernel_opts_(const AttentionOpts *o, const AttActs *a) {
    AttnOpts k = {0};
    k.scale = 1.0f / sqrtf((float)o->D);
    k.window = o->window;
    if (o->pos_kind == POS_ALIBI) k.slopes = o->slopes;
    if (o->pos_kind == POS_FOX) k.fgate = a->fg_cum;
    if (o->pos_kind == POS_DECAYED_ROPE || o->pos_kind == POS_SC_ROPE) {
        if (o->decay_logits) k.slopes = o->slopes;
        else k.decay = o->decays;
    }
    return k;
}

// ----------------------------------------------------------------------------
// forward

static void att_forward_(Mixer *m, float *y, const float *x, int B, int T) {
    const AttentionOpts *o = m->spec->opts;
    int C = m->spec->C, H = o->H, D = o->D, HD = o->HD, BT = B * T;
    AttActs a;
    att_layout_(o, B, T, m->acts, &a);
    const float *wqkv = mixer_param(m, o->k_wqkv);
    const float *bqkv = o->bias ? mixer_param(m, o->k_bqkv) : NULL;
    float *lin = m->scratch;                   // (BT,HD) one projection at a time
    float *rot = m->scratch + (size_t)BT * HD; // (BT,HD) normalised copy (qk_norm)
    RotaryCfg rc = att_rotary_(o);
    // one cos/sin table for q and k (same positions), instead of one per rotary_forward call
    RotaryTable tab;
    if (att_rotates_(o)) {
        rotary_table_init(&tab, &rc, 0, T, H, D);
        size_t n = (size_t)T * (tab.head_stride ? H : 1) * (D / 2);
        memcpy(a.rope_cos, tab.cos, n * sizeof(float));
        memcpy(a.rope_sin, tab.sin, n * sizeof(float));
    }
    float *dst[3] = {a.qh, a.kh, a.vh};
    for (int part = 0; part < 3; part++) {
        // part 0 = q, 1 = k, 2 = v: rows [part*HD, (part+1)*HD) of wqkv
        float *out = (part < 2 && o->qk_norm) ? (part == 0 ? a.q_lin : a.k_lin) : lin;
        matmul_forward(out, x, wqkv + (size_t)part * HD * C, bqkv ? bqkv + (size_t)part * HD : NULL, BT, C, HD);
        const float *cur = out;
        if (part < 2 && o->qk_norm) {
            rmsnorm_forward(rot, part == 0 ? a.q_rstd : a.k_rstd, out, mixer_param(m, part == 0 ? o->k_qn : o->k_kn),
                            BT * H, D);
            cur = rot;
        }
        if (part < 2 && att_rotates_(o)) {
            // rotate and permute to (B,H,T,D) in one pass
            rotary_forward_heads_table(dst[part], cur, &tab, B);
        } else {
            heads_split(dst[part], cur, B, T, H, D);
        }
    }
    if (att_rotates_(o)) rotary_table_free(&tab);
    if (o->pos_kind == POS_FOX) {
        // a = x W_f^T + b_f (B,T,H); F[b,h,t] = sum_{s<=t} logsigmoid(a[b,s,h])
        matmul_forward(a.fg_pre, x, mixer_param(m, o->k_fw), mixer_param(m, o->k_fb), BT, C, H);
#pragma omp parallel for collapse(2)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) {
                double acc = 0;
                for (int t = 0; t < T; t++) {
                    acc += mixer_logsigmoid(a.fg_pre[((size_t)b * T + t) * H + h]);
                    a.fg_cum[((size_t)b * H + h) * T + t] = (float)acc;
                }
            }
    }
    AttnOpts ko = att_kernel_opts_(o, &a);
    attention_forward(a.oh, a.lse, a.qh, a.kh, a.vh, &ko, B, H, T, D);
    heads_merge(a.o_lin, a.oh, B, T, H, D);
    matmul_forward(y, a.o_lin, mixer_param(m, o->k_wo), o->bias ? mixer_param(m, o->k_bo) : NULL, BT, HD, C);
}

// ----------------------------------------------------------------------------
// backward

static void att_backward_(Mixer *m, float *dx, const float *dy, const float *x, int B, int T) {
    const AttentionOpts *o = m->spec->opts;
    int C = m->spec->C, H = o->H, D = o->D, HD = o->HD, BT = B * T;
    size_t big = (size_t)BT * HD;
    AttActs a;
    att_layout_(o, B, T, m->acts, &a);
    float *s0 = m->scratch, *s1 = s0 + big;                  // two (BT,HD) work buffers
    float *dqh = s1 + big, *dkh = dqh + big, *dvh = dkh + big;  // (B,H,T,D)
    float *dlin = dvh + big, *drot = dlin + big;             // (BT,HD)
    float *dF = drot + big, *dfg = dF + (size_t)BT * H;      // (B,H,T), (B,T,H)

    // in the forward pass this was: y = o_lin W_o^T + b_o
    // dO (BT,HD) = dy (BT,C) @ W_o (C,HD), written directly (no zeroing pass); the weight gradients accumulate
    matmul(s0, dy, mixer_param(m, o->k_wo), BT, HD, C, 0, 0, 0);
    matmul_backward(NULL, mixer_grad(m, o->k_wo), o->bias ? mixer_grad(m, o->k_bo) : NULL, dy, a.o_lin,
                    mixer_param(m, o->k_wo), BT, HD, C);
    heads_split(s1, s0, B, T, H, D);  // dO in (B,H,T,D)
    if (o->pos_kind == POS_FOX) memset(dF, 0, (size_t)BT * H * sizeof(float));
    AttnOpts ko = att_kernel_opts_(o, &a);
    // writes dqh, dkh, dvh (no zeroing pass needed); dF accumulates
    attention_backward_write(dqh, dkh, dvh, o->pos_kind == POS_FOX ? dF : NULL, NULL, s1, a.oh, a.lse, a.qh, a.kh, a.vh,
                       &ko, B, H, T, D);

    float *dwqkv = mixer_grad(m, o->k_wqkv);
    float *dbqkv = o->bias ? mixer_grad(m, o->k_bqkv) : NULL;
    const float *wqkv = mixer_param(m, o->k_wqkv);
    // the forward's cos/sin table, kept in the activations (same cfg, positions 0..T-1, H, D)
    RotaryTable tab = {o->layout, T, H, D, 0, o->pos_kind == POS_SC_ROPE ? D / 2 : 0, a.rope_cos, a.rope_sin};
    const float *dsrc[3] = {dqh, dkh, dvh};
    for (int part = 0; part < 3; part++) {
        // undo the head permutation, then the rotation (both in one pass when there is one), then the
        // norm, then the projection
        float *cur = s0;
        if (part < 2 && att_rotates_(o)) {
            rotary_backward_heads_table(drot, dsrc[part], &tab, B);  // writes drot (B,T,H,D)
            cur = drot;
        } else {
            heads_merge(s0, dsrc[part], B, T, H, D);
        }
        if (part < 2 && o->qk_norm) {
            memset(dlin, 0, big * sizeof(float));
            const float *lin = part == 0 ? a.q_lin : a.k_lin;
            int kn = part == 0 ? o->k_qn : o->k_kn;
            rmsnorm_backward(dlin, mixer_grad(m, kn), cur, lin, mixer_param(m, kn), part == 0 ? a.q_rstd : a.k_rstd,
                             BT * H, D);
            cur = dlin;
        }
        matmul_backward(dx, dwqkv + (size_t)part * HD * C, dbqkv ? dbqkv + (size_t)part * HD : NULL, cur, x,
                        wqkv + (size_t)part * HD * C, BT, C, HD);
    }
    if (o->pos_kind == POS_FOX) {
        // in the forward pass this was: F[t] = sum_{s<=t} logsigmoid(a[s]); so
        // da[s] = sigmoid(-a[s]) * sum_{t>=s} dF[t]  (d logsigmoid(z)/dz = sigmoid(-z))
#pragma omp parallel for collapse(2)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) {
                double acc = 0;
                for (int t = T - 1; t >= 0; t--) {
                    acc += dF[((size_t)b * H + h) * T + t];
                    double sig_neg = mixer_sigmoid(-(double)a.fg_pre[((size_t)b * T + t) * H + h]);
                    dfg[((size_t)b * T + t) * H + h] = (float)(acc * sig_neg);
                }
            }
        matmul_backward(dx, mixer_grad(m, o->k_fw), mixer_grad(m, o->k_fb), dfg, x, mixer_param(m, o->k_fw), BT, C, H);
    }
}

static size_t att_state_size_(const MixerSpec *s) { return 0; }

// k and v of every head: 2 H D floats per token (a window caps the cache at `window` tokens)
static size_t att_cache_per_token_(const MixerSpec *s) {
    const AttentionOpts *o = s->opts;
    return 2 * (size_t)o->HD;
}

static int att_attn_heads_(const MixerSpec *s) { return ((const AttentionOpts *)s->opts)->H; }

static void att_attn_map_(const Mixer *m, int b, int h, float *P) {
    const AttentionOpts *o = m->spec->opts;
    int T = m->T, D = o->D;
    AttActs a;
    att_layout_(o, m->B, T, m->acts, &a);
    AttnOpts ko = att_kernel_opts_(o, &a);
    size_t off = ((size_t)b * o->H + h) * T * D;
    attention_probs(P, a.qh + off, a.kh + off, a.lse + ((size_t)b * o->H + h) * T, &ko, b, h, o->H, T, D);
}

const MixerOps MIXER_ATTENTION = {
    .name = "attention",
    .doc = "multi-head causal softmax attention; positions none|rope|alibi|fox|decayed_rope|sc_rope",
    .schema = &ATT_SCHEMA_,
    .opts_size = sizeof(AttentionOpts),
    .check = att_check_,
    .params = att_params_,
    .init = NULL,
    .act_size = att_act_size_,
    .scratch_size = att_scratch_size_,
    .forward = att_forward_,
    .backward = att_backward_,
    .state_size = att_state_size_,
    .cache_per_token = att_cache_per_token_,
    .diag = NULL,
    .attn_heads = att_attn_heads_,
    .attn_map = att_attn_map_,
};
