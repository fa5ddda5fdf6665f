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
 *   path          PaTH (FLA's PathAttention): logits q_i^T H_i ... H_{j+1} k_j with H_s = I - beta_s w_s w_s^T,
 *                 w = l2norm_head(silu(conv3(W_w2 W_w1 x))) (low rank path_rank; 0 = one full projection),
 *                 beta = 2 sigmoid(W_b x + b_b) per head; kernel nn/path_attn.c (O(T d) memory, no T x T)
 *   path_fox      PaTH plus fox's forget-gate bias F_i - F_j (same parameters and code as fox)
 *
 * Shapes: x (B,T,C) -> q,k,v (B,T,H,D) by three row-slices of one (3HD, C) projection, so the papers'
 * d -> 2d -> d attention is heads·head_dim = 2C; optional per-head RMS QK-norm; then rope; then the
 * kernel on (B,H,T,D); then the (C, HD) output projection.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixers/attention.h"
#include "mixers/mixer.h"
#include "mixers/mixer_kit.h"
#include "mixers/selrope.h"
#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/conv.h"
#include "nn/heads.h"
#include "nn/matmul.h"
#include "nn/norm.h"
#include "nn/path_attn.h"
#include "nn/rotary.h"

static const char *const POS_NAMES_[] = {"none",         "rope",    "alibi", "fox",
                                         "decayed_rope", "sc_rope", "path",  "path_fox"};

#define PATH_CONV_K 3           // taps of the causal short conv on w (FLA's conv_size)
#define PATH_L2_EPS 1e-6f       // FLA's l2norm: w / sqrt(|w|^2 + 1e-6)
#define PATH_RANK_DEFAULT 32    // FLA's low-rank w projection
#define PATH_CHUNK_DEFAULT 64


#define KEY_(...) MIXER_KEY(AttentionOpts, __VA_ARGS__)

static const CfgKey ATT_KEYS_[] = {
    KEY_("heads", CFG_INT, heads, "8", 1, ATT_MAX_HEADS, NULL, "Number of heads H."),
    KEY_("head_dim", CFG_INT, head_dim, "0", 0, 2 * ATT_MAX_HALF, NULL,
         "Channels per head D; 0 = C/H. H·D may differ from C (the RFA paper's d->2d->d uses H·D = 2C)."),
    KEY_("bias", CFG_BOOL, bias, "false", 0, 0, NULL, "Biases on the q/k/v and output projections."),
    KEY_("qk_norm", CFG_BOOL, qk_norm, "false", 0, 0, NULL,
         "RMS-normalise q and k per head (learned scales) before the position scheme (after Selective RoPE)."),
    KEY_("qk_norm_eps", CFG_FLOAT, qk_norm_eps, "1e-6", 1e-12, 1, NULL,
         "qk_norm: eps inside the root, 1/sqrt(mean(q^2) + eps) (FLA's RMSNorm and FoX use 1e-5)."),
    KEY_("qk_norm_scales", CFG_ENUM, qk_norm_scales, "\"shared\"", 0, 0, "shared|per_head",
         "qk_norm: one scale vector of D shared by the heads (FoX's compatibility mode), or one per head, H·D "
         "(FoX's default, FLA's GroupNorm)."),
    KEY_("window", CFG_INT, window, "0", 0, 1 << 24, NULL,
         "Sliding window: a query sees the last `window` positions (itself included); 0 = all."),
    KEY_("pos", CFG_ENUM, pos, "\"rope\"", 0, 0, "none|rope|alibi|fox|decayed_rope|sc_rope|path|path_fox",
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
         "fox, path_fox: initial forget-gate bias (sigmoid(3) = 0.95 keeps ~20 tokens of memory at the start)."),
    KEY_("path_rank", CFG_INT, path_rank, "-1", -1, 4096, NULL,
         "path, path_fox: rank of the w projection Linear(C, r) -> Linear(r, H·D); 0 = one full Linear(C, H·D); "
         "-1 = unset (32; any other value needs pos path or path_fox)."),
    KEY_("path_chunk", CFG_INT, path_chunk, "0", 0, 1 << 16, NULL,
         "path, path_fox: positions per chunk of the PaTH kernel (changes only float rounding); 0 = unset (64)."),
    KEY_("init_std", CFG_FLOAT, init_std, "0.02", 0, 10, NULL,
         "Std of the projections' normal init; the output projection uses init_std/sqrt(2·n_layers)."),
    SELROPE_KEY(AttentionOpts, sr),
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
    for (int i = 0; i < POS_COUNT_; i++)
        if (!strcmp(o->pos, POS_NAMES_[i])) o->pos_kind = i;
    o->path = o->pos_kind == POS_PATH || o->pos_kind == POS_PATH_FOX;
    o->fgate = o->pos_kind == POS_FOX || o->pos_kind == POS_PATH_FOX;
    if (!o->path && o->path_rank >= 0)
        return err_set(e, "%s.path_rank: %d is only for pos path|path_fox (pos is \"%s\"); allowed for %s: -1 (unset)",
                       path, o->path_rank, o->pos, o->pos);
    if (!o->path && o->path_chunk > 0)
        return err_set(e, "%s.path_chunk: %d is only for pos path|path_fox (pos is \"%s\"); allowed for %s: 0 (unset)",
                       path, o->path_chunk, o->pos, o->pos);
    if (o->path && o->window)
        return err_set(e, "%s.window: %d with pos %s; PaTH attends to every earlier position, allowed: 0", path,
                       o->window, o->pos);
    o->R = o->path_rank < 0 ? PATH_RANK_DEFAULT : o->path_rank;
    o->qn_per_head = !strcmp(o->qk_norm_scales, "per_head");
    if (!o->qk_norm && o->qn_per_head)
        return err_set(e, "%s.qk_norm_scales: \"per_head\" needs qk_norm true; allowed without it: shared", path);
    if (!o->qk_norm && (float)o->qk_norm_eps != RMSNORM_EPS)
        return err_set(e, "%s.qk_norm_eps: %g needs qk_norm true; allowed without it: 1e-6 (the default)", path,
                       o->qk_norm_eps);
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
    o->k_fw = o->fgate ? k++ : -1;
    o->k_fb = o->fgate ? k++ : -1;
    o->k_pw1 = o->path && o->R > 0 ? k++ : -1;
    o->k_pw2 = o->path ? k++ : -1;
    o->k_pconv = o->path ? k++ : -1;
    o->k_pbw = o->path ? k++ : -1;
    o->k_pbb = o->path ? k++ : -1;
    if (o->sr.enabled && o->pos_kind != POS_NONE && o->pos_kind != POS_FOX)
        return err_set(e, "%s.pos: \"%s\" with selective_rope; allowed with selective_rope: none, fox", path, o->pos);
    if (selrope_check(&o->sr, path, C, o->H, o->D, &k, e)) return -1;
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
        int n = o->qn_per_head ? o->HD : o->D;
        MIXER_ADD("q_norm", 1, ((int[]){n}), init_ones(), 0);
        MIXER_ADD("k_norm", 1, ((int[]){n}), init_ones(), 0);
    }
    if (o->fgate) {
        MIXER_ADD("fgate_w", 2, ((int[]){o->H, C}), init_normal(std), 1);
        MIXER_ADD("fgate_b", 1, ((int[]){o->H}), init_const((float)o->fgate_bias_init), 0);
    }
    if (o->path) {
        // FLA's PathAttention: w_proj = Linear(C, r) -> Linear(r, H·D) without biases (or one Linear(C, H·D)),
        // a depthwise causal conv of 3 taps without bias, bt_proj = Linear(C, H) with bias
        if (o->R > 0) {
            MIXER_ADD("path_w1", 2, ((int[]){o->R, C}), init_normal(std), 1);
            MIXER_ADD("path_w2", 2, ((int[]){HD, o->R}), init_normal(std), 1);
        } else {
            MIXER_ADD("path_w", 2, ((int[]){HD, C}), init_normal(std), 1);
        }
        MIXER_ADD("path_conv", 2, ((int[]){HD, PATH_CONV_K}), init_normal(std), 1);
        MIXER_ADD("path_bw", 2, ((int[]){o->H, C}), init_normal(std), 1);
        MIXER_ADD("path_bb", 1, ((int[]){o->H}), init_zeros(), 0);
    }
    return selrope_params(&o->sr, pt, prefix, e);
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
    float *pw_low;          // (B,T,R) x W_w1^T (path, R > 0)
    float *pw_lin;          // (B,T,HD) the conv's input
    float *pw_conv;         // (B,T,HD) the conv's output (silu's input)
    float *pw_unit;         // (B,T,HD) l2norm(silu(conv)) per head
    float *pw_nrm;          // (B*T*H,) the norms
    float *wh;              // (B,H,T,D) w as the kernel saw it
    float *pb_pre;          // (B,T,H) beta pre-activations
    float *betah;           // (B,H,T) beta = 2 sigmoid(pre)
    float *sr;              // selective_rope's activations (selrope_act_size)
} AttActs;

// a's pointers into base (NULL: only count); returns the floats used
static size_t att_layout_(const AttentionOpts *o, int B, int T, float *base, AttActs *a) {
    size_t BT = (size_t)B * T, n = 0;
    size_t big = BT * o->HD, heads = BT * o->H;
    int fox = o->fgate, pa = o->path;
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
    a->pw_low = mixer_take(base, &n, BT * o->R, pa && o->R > 0);
    a->pw_lin = mixer_take(base, &n, big, pa);
    a->pw_conv = mixer_take(base, &n, big, pa);
    a->pw_unit = mixer_take(base, &n, big, pa);
    a->pw_nrm = mixer_take(base, &n, heads, pa);
    a->wh = mixer_take(base, &n, big, pa);
    a->pb_pre = mixer_take(base, &n, heads, pa);
    a->betah = mixer_take(base, &n, heads, pa);
    a->sr = mixer_take(base, &n, selrope_act_size(&o->sr, B, T), o->sr.enabled);
    return n;
}

static size_t att_act_size_(const MixerSpec *s, int B, int T) {
    AttActs a;
    return att_layout_(s->opts, B, T, NULL, &a);
}

// the passes' own work space; path: dwh (B,H,T,D) and two (BT,HD) work buffers, dbeta (B,H,T), dpre (B,T,H), (BT,R)
static size_t att_work_size_(const AttentionOpts *o, int B, int T) {
    size_t BT = (size_t)B * T;
    size_t path = o->path ? 3 * BT * o->HD + 2 * BT * o->H + BT * o->R : 0;
    return 7 * BT * o->HD + 2 * BT * o->H + path;
}

// then selective_rope's
static size_t att_scratch_size_(const MixerSpec *s, int B, int T) {
    const AttentionOpts *o = s->opts;
    return att_work_size_(o, B, T) + selrope_scratch_size(&o->sr, B, T);
}

static PathOpts att_path_opts_(const AttentionOpts *o, const AttActs *a) {
    PathOpts p = {1.0f / sqrtf((float)o->D), o->path_chunk > 0 ? o->path_chunk : PATH_CHUNK_DEFAULT, NULL};
    if (o->fgate) p.fgate = a->fg_cum;
    return p;
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
    if (o->fgate) k.fgate = a->fg_cum;
    if (o->pos_kind == POS_DECAYED_ROPE || o->pos_kind == POS_SC_ROPE) {
        if (o->decay_logits) k.slopes = o->slopes;
        else k.decay = o->decays;
    }
    return k;
}

// ----------------------------------------------------------------------------
// PaTH's w and beta (as FLA's PathAttention): w = l2norm_head(silu(conv3(x W_w1^T W_w2^T))),
// beta = 2 sigmoid(x W_b^T + b_b)

static void path_forward_(Mixer *m, AttActs *a, const float *x, int B, int T) {
    const AttentionOpts *o = m->spec->opts;
    int C = m->spec->C, H = o->H, D = o->D, HD = o->HD, BT = B * T;
    if (o->R > 0) {
        matmul_forward(a->pw_low, x, mixer_param(m, o->k_pw1), NULL, BT, C, o->R);
        matmul_forward(a->pw_lin, a->pw_low, mixer_param(m, o->k_pw2), NULL, BT, o->R, HD);
    } else {
        matmul_forward(a->pw_lin, x, mixer_param(m, o->k_pw2), NULL, BT, C, HD);
    }
    conv1d_causal_forward(a->pw_conv, a->pw_lin, mixer_param(m, o->k_pconv), NULL, B, T, HD, PATH_CONV_K);
    silu_forward(a->pw_unit, a->pw_conv, (size_t)BT * HD);
    l2norm_forward(a->pw_unit, a->pw_nrm, a->pw_unit, BT * H, D, PATH_L2_EPS, L2NORM_ADD);
    heads_split(a->wh, a->pw_unit, B, T, H, D);
    matmul_forward(a->pb_pre, x, mixer_param(m, o->k_pbw), mixer_param(m, o->k_pbb), BT, C, H);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++)
                a->betah[((size_t)b * H + h) * T + t] = (float)(2.0 * mixer_sigmoid(a->pb_pre[((size_t)b * T + t) * H + h]));
}

// dwh (B,H,T,D) and dbeta (B,H,T) from the kernel back to x and the path tensors; accumulates dx.
// s0, s1 (BT,HD), sr (BT,R) and dpre (BT,H) scratch
static void path_backward_(Mixer *m, float *dx, const float *dwh, const float *dbeta, float *s0, float *s1, float *sr,
                           float *dpre, const AttActs *a, const float *x, int B, int T) {
    const AttentionOpts *o = m->spec->opts;
    int C = m->spec->C, H = o->H, D = o->D, HD = o->HD, BT = B * T;
    size_t big = (size_t)BT * HD;
    // beta = 2 sigmoid(pre): dpre = dbeta * 2 sig (1 - sig)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                double sg = mixer_sigmoid(a->pb_pre[((size_t)b * T + t) * H + h]);
                dpre[((size_t)b * T + t) * H + h] = (float)(dbeta[((size_t)b * H + h) * T + t] * 2.0 * sg * (1.0 - sg));
            }
    matmul_backward(dx, mixer_grad(m, o->k_pbw), mixer_grad(m, o->k_pbb), dpre, x, mixer_param(m, o->k_pbw), BT, C, H);
    heads_merge(s0, dwh, B, T, H, D);  // d(unit w) (BT,HD)
    memset(s1, 0, big * sizeof(float));
    l2norm_backward(s1, s0, a->pw_unit, a->pw_nrm, BT * H, D, PATH_L2_EPS, L2NORM_ADD);  // d silu out
    memset(s0, 0, big * sizeof(float));
    silu_backward(s0, a->pw_conv, s1, big);  // d conv out
    memset(s1, 0, big * sizeof(float));
    conv1d_causal_backward(s1, mixer_grad(m, o->k_pconv), NULL, s0, a->pw_lin, mixer_param(m, o->k_pconv), B, T, HD,
                           PATH_CONV_K);  // d conv in
    if (o->R > 0) {
        memset(sr, 0, (size_t)BT * o->R * sizeof(float));
        matmul_backward(sr, mixer_grad(m, o->k_pw2), NULL, s1, a->pw_low, mixer_param(m, o->k_pw2), BT, o->R, HD);
        matmul_backward(dx, mixer_grad(m, o->k_pw1), NULL, sr, x, mixer_param(m, o->k_pw1), BT, C, o->R);
    } else {
        matmul_backward(dx, mixer_grad(m, o->k_pw2), NULL, s1, x, mixer_param(m, o->k_pw2), BT, C, HD);
    }
}

// ----------------------------------------------------------------------------
// qk_norm: an RMSNorm over each head's D channels of q or k, eps qk_norm_eps, with the scales w (D) shared by the
// heads or (H, D) one per head

// out, inp (N,H,D); rstd (N*H) kept for the backward; out may not alias inp
static void att_qknorm_forward_(const AttentionOpts *o, float *out, float *rstd, const float *inp, const float *w,
                                int N) {
    int H = o->H, D = o->D;
#pragma omp parallel for schedule(static) if ((long)N * H * D >= 4096)
    for (long r = 0; r < (long)N * H; r++) {
        const float *x = inp + (size_t)r * D, *wr = w + (o->qn_per_head ? (size_t)(r % H) * D : 0);
        float *y = out + (size_t)r * D;
        double ss = 0.0;
        for (int i = 0; i < D; i++) ss += (double)x[i] * x[i];
        float rs = (float)(1.0 / sqrt(ss / D + o->qk_norm_eps));
        for (int i = 0; i < D; i++) y[i] = (x[i] * rs) * wr[i];
        rstd[r] = rs;
    }
}

// dinp (N,H,D) written; dw (D or H D) accumulated, each column summed over the rows in order
static void att_qknorm_backward_(const AttentionOpts *o, float *dinp, float *dw, const float *dout, const float *inp,
                                 const float *w, const float *rstd, int N) {
    int H = o->H, D = o->D;
    // y_i = x_i r w_i, r = 1/sqrt(mean(x^2) + eps): dx_i = r (w_i dy_i - n_i mean_j(w_j dy_j n_j)), n = x r
#pragma omp parallel for schedule(static) if ((long)N * H * D >= 4096)
    for (long r = 0; r < (long)N * H; r++) {
        const float *x = inp + (size_t)r * D, *dy = dout + (size_t)r * D;
        const float *wr = w + (o->qn_per_head ? (size_t)(r % H) * D : 0);
        float *dx = dinp + (size_t)r * D, rs = rstd[r];
        double acc = 0.0;
        for (int i = 0; i < D; i++) acc += (double)wr[i] * dy[i] * x[i] * rs;
        float m = (float)(acc / D);
        for (int i = 0; i < D; i++) dx[i] = rs * (wr[i] * dy[i] - x[i] * rs * m);
    }
    int nw = o->qn_per_head ? H * D : D;
#pragma omp parallel for schedule(static)
    for (int c = 0; c < nw; c++) {
        double acc = 0.0;
        int i = c % D;
        for (long r = o->qn_per_head ? c / D : 0; r < (long)N * H; r += o->qn_per_head ? H : 1)
            acc += (double)dout[(size_t)r * D + i] * inp[(size_t)r * D + i] * rstd[r];
        dw[c] += (float)acc;
    }
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
    // selective_rope: the angles once for q and k; the rotation comes before qk_norm (the authors' attention layer
    // rotates, then normalises; docs/mixers.md "Selective RoPE"), in place on the projection, which the norm's
    // backward then reads as its input
    if (o->sr.enabled) selrope_forward(m, &o->sr, a.sr, x, B, T);
    float *dst[3] = {a.qh, a.kh, a.vh};
    for (int part = 0; part < 3; part++) {
        // part 0 = q, 1 = k, 2 = v: rows [part*HD, (part+1)*HD) of wqkv
        float *out = (part < 2 && o->qk_norm) ? (part == 0 ? a.q_lin : a.k_lin) : lin;
        matmul_forward(out, x, wqkv + (size_t)part * HD * C, bqkv ? bqkv + (size_t)part * HD : NULL, BT, C, HD);
        const float *cur = out;
        if (part < 2 && o->sr.enabled) selrope_apply(&o->sr, a.sr, out, out, B, T);
        if (part < 2 && o->qk_norm) {
            att_qknorm_forward_(o, rot, part == 0 ? a.q_rstd : a.k_rstd, out,
                                mixer_param(m, part == 0 ? o->k_qn : o->k_kn), BT);
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
    if (o->fgate) {
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
    if (o->path) {
        path_forward_(m, &a, x, B, T);
        PathOpts po = att_path_opts_(o, &a);
        path_attn_forward(a.oh, a.lse, a.qh, a.kh, a.vh, a.wh, a.betah, &po, B, H, T, D);
    } else {
        AttnOpts ko = att_kernel_opts_(o, &a);
        attention_forward(a.oh, a.lse, a.qh, a.kh, a.vh, &ko, B, H, T, D);
    }
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
    if (o->fgate) memset(dF, 0, (size_t)BT * H * sizeof(float));
    if (o->path) {
        // the kernel accumulates: zero dq, dk, dv, dw, dbeta first
        float *dwh = dfg + (size_t)BT * H, *dbeta = dwh + big;
        memset(dqh, 0, 3 * big * sizeof(float));
        memset(dwh, 0, (big + (size_t)BT * H) * sizeof(float));
        PathOpts po = att_path_opts_(o, &a);
        path_attn_backward(dqh, dkh, dvh, dwh, dbeta, o->fgate ? dF : NULL, s1, a.oh, a.lse, a.qh, a.kh, a.vh, a.wh,
                           a.betah, &po, B, H, T, D);
        float *ps0 = dbeta + (size_t)BT * H, *ps1 = ps0 + big, *sr = ps1 + big, *dpre = sr + (size_t)BT * o->R;
        path_backward_(m, dx, dwh, dbeta, ps0, ps1, sr, dpre, &a, x, B, T);
    } else {
        AttnOpts ko = att_kernel_opts_(o, &a);
        // writes dqh, dkh, dvh (no zeroing pass needed); dF accumulates
        attention_backward_write(dqh, dkh, dvh, o->fgate ? dF : NULL, NULL, s1, a.oh, a.lse, a.qh, a.kh, a.vh, &ko, B,
                                 H, T, D);
    }

    float *dwqkv = mixer_grad(m, o->k_wqkv);
    float *dbqkv = o->bias ? mixer_grad(m, o->k_bqkv) : NULL;
    const float *wqkv = mixer_param(m, o->k_wqkv);
    // the forward's cos/sin table, kept in the activations (same cfg, positions 0..T-1, H, D)
    RotaryTable tab = {o->layout, T, H, D, 0, o->pos_kind == POS_SC_ROPE ? D / 2 : 0, a.rope_cos, a.rope_sin};
    const float *dsrc[3] = {dqh, dkh, dvh};
    float *srs = m->scratch + att_work_size_(o, B, T);
    float *dth = o->sr.enabled ? selrope_dtheta(&o->sr, srs, B, T) : NULL;
    for (int part = 0; part < 3; part++) {
        // undo the head permutation, then RoPE's rotation (both in one pass when there is one), then the norm,
        // then Selective RoPE's rotation, then the projection
        float *cur = s0;
        if (part < 2 && att_rotates_(o)) {
            rotary_backward_heads_table(drot, dsrc[part], &tab, B);  // writes drot (B,T,H,D)
            cur = drot;
        } else {
            heads_merge(s0, dsrc[part], B, T, H, D);
        }
        if (part < 2 && o->qk_norm) {
            const float *lin = part == 0 ? a.q_lin : a.k_lin;
            int kn = part == 0 ? o->k_qn : o->k_kn;
            att_qknorm_backward_(o, dlin, mixer_grad(m, kn), cur, lin, mixer_param(m, kn),
                                 part == 0 ? a.q_rstd : a.k_rstd, BT);
            cur = dlin;
        }
        if (part < 2 && dth) {
            // the rotated rows: the norm's saved input with qk_norm, else back from what the kernel saw (drot is
            // free: no RoPE with selective_rope)
            const float *rows = part == 0 ? a.q_lin : a.k_lin;
            if (!o->qk_norm) {
                heads_merge(drot, part == 0 ? a.qh : a.kh, B, T, H, D);
                rows = drot;
            }
            selrope_apply_backward(&o->sr, a.sr, cur, dth, cur, rows, B, T);
        }
        matmul_backward(dx, dwqkv + (size_t)part * HD * C, dbqkv ? dbqkv + (size_t)part * HD : NULL, cur, x,
                        wqkv + (size_t)part * HD * C, BT, C, HD);
    }
    if (dth) selrope_backward(m, &o->sr, a.sr, srs, dx, x, B, T);
    if (o->fgate) {
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

// ----------------------------------------------------------------------------
// decoding with a key/value cache
//
// One sequence's state, for a capacity of cap positions:
//   [F (H doubles, as 2H floats) | path conv cache (HD, 2) | selective_rope | kc (H,S,D) | vc (H,S,D) | gc (H,S)]
// F is fox's running sum of log forget gates, kept in double as the forward's cumsum is (its float copies in gc
// are what the forward's fg_cum holds); kc, vc the rotated keys and the values; gc each cached position's F. A
// sliding window shorter than cap keeps only S = window slots, a ring (position j in slot j % S), so it decodes
// any length in fixed memory. PaTH keeps every position (its cached keys move with each new token).

static int att_slots_(const AttentionOpts *o, int cap) { return o->window > 0 && o->window < cap ? o->window : cap; }

// floats of the part that does not grow with cap, and where the caches start
static size_t att_fixed_size_(const AttentionOpts *o) {
    return (o->fgate ? 2 * (size_t)o->H : 0) + (o->path ? (size_t)o->HD * (PATH_CONV_K - 1) : 0) +
           selrope_state_size(&o->sr);
}

static size_t att_state_size_(const MixerSpec *s, int cap) {
    const AttentionOpts *o = s->opts;
    size_t S = (size_t)att_slots_(o, cap);
    return att_fixed_size_(o) + S * (2 * (size_t)o->HD + (o->fgate ? (size_t)o->H : 0));
}

static void att_state_init_(const Mixer *m, float *state, int B, int cap) {
    // zeros are the empty prefix of every part (F = 0, conv inputs before t = 0, selective_rope's angle sums);
    // the cache slots are written before they are read
    size_t n = att_state_size_(m->spec, cap), f = att_fixed_size_(m->spec->opts);
    for (int b = 0; b < B; b++) memset(state + b * n, 0, f * sizeof(float));
}

static void att_step_(const Mixer *m, float *state, float *y, const float *x, int B, int t, int cap) {
    const AttentionOpts *o = m->spec->opts;
    int C = m->spec->C, H = o->H, D = o->D, HD = o->HD, S = att_slots_(o, cap);
    size_t n = att_state_size_(m->spec, cap), bd = (size_t)B * HD, bh = (size_t)B * H;
    size_t path_conv = o->path ? (size_t)HD * (PATH_CONV_K - 1) : 0, fsz = o->fgate ? 2 * (size_t)H : 0;
    float *sr_state = state + fsz + path_conv, *kc = state + att_fixed_size_(o), *vc = kc + (size_t)S * HD;
    float *gc = o->fgate ? vc + (size_t)S * HD : NULL;
    float *buf = xmalloc((6 * bd + 4 * bh + (size_t)B * o->R) * sizeof(float));
    float *q = buf, *k = q + bd, *v = k + bd, *ob = v + bd, *pw = ob + bd, *tmp = pw + bd;
    float *rstd = tmp + bd, *g = rstd + bh, *pb = g + bh, *beta = pb + bh, *low = beta + bh;
    const float *wqkv = mixer_param(m, o->k_wqkv);
    const float *bqkv = o->bias ? mixer_param(m, o->k_bqkv) : NULL;
    float *dst[3] = {q, k, v};
    for (int part = 0; part < 3; part++)
        matmul_forward(dst[part], x, wqkv + (size_t)part * HD * C, bqkv ? bqkv + (size_t)part * HD : NULL, B, C, HD);
    // as the forward: Selective RoPE, then qk_norm, then RoPE (never both rotations)
    if (o->sr.enabled) selrope_step(m, &o->sr, sr_state, n, q, k, x, B);
    for (int part = 0; part < 2 && o->qk_norm; part++) {
        att_qknorm_forward_(o, tmp, rstd, dst[part], mixer_param(m, part == 0 ? o->k_qn : o->k_kn), B);
        memcpy(dst[part], tmp, bd * sizeof(float));
    }
    if (att_rotates_(o)) {  // the token's position is t in every sequence
        RotaryCfg rc = att_rotary_(o);
        rotary_forward(q, q, &rc, t, B, 1, H, D);
        rotary_forward(k, k, &rc, t, B, 1, H, D);
    }
    if (o->fgate) {
        // F_t = F_{t-1} + logsigmoid(w_f·x + b_f), summed in double as the forward's cumsum
        matmul_forward(g, x, mixer_param(m, o->k_fw), mixer_param(m, o->k_fb), B, C, H);
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) {
                double F;
                memcpy(&F, state + b * n + 2 * (size_t)h, sizeof F);
                F += mixer_logsigmoid(g[(size_t)b * H + h]);
                memcpy(state + b * n + 2 * (size_t)h, &F, sizeof F);
                g[(size_t)b * H + h] = (float)F;
            }
    }
    AttActs none = {0};  // no saved activations: the kernel options' per-token arrays come from the state
    if (o->path) {
        // w and beta of this token as path_forward_, the conv through its cache of the last two inputs
        if (o->R > 0) {
            matmul_forward(low, x, mixer_param(m, o->k_pw1), NULL, B, C, o->R);
            matmul_forward(tmp, low, mixer_param(m, o->k_pw2), NULL, B, o->R, HD);
        } else {
            matmul_forward(tmp, x, mixer_param(m, o->k_pw2), NULL, B, C, HD);
        }
        for (int b = 0; b < B; b++)
            conv1d_causal_step(pw + (size_t)b * HD, state + b * n + fsz, tmp + (size_t)b * HD,
                               mixer_param(m, o->k_pconv), NULL, 1, HD, PATH_CONV_K);
        silu_forward(pw, pw, bd);
        l2norm_forward(pw, rstd, pw, B * H, D, PATH_L2_EPS, L2NORM_ADD);
        matmul_forward(pb, x, mixer_param(m, o->k_pbw), mixer_param(m, o->k_pbb), B, C, H);
        for (size_t i = 0; i < bh; i++) beta[i] = (float)(2.0 * mixer_sigmoid(pb[i]));
        PathOpts po = att_path_opts_(o, &none);
        for (int b = 0; b < B; b++) {
            size_t r = (size_t)b * HD, rh = (size_t)b * H;
            path_attn_step(ob + r, q + r, k + r, v + r, pw + r, beta + rh, o->fgate ? g + rh : NULL, kc + b * n,
                           vc + b * n, gc ? gc + b * n : NULL, &po, t, 1, H, D, S);
        }
    } else {
        AttnOpts ko = att_kernel_opts_(o, &none);
        attention_step(ob, q, k, v, o->fgate ? g : NULL, kc, vc, gc, n, &ko, t, B, H, D, S);
    }
    // (B,H,D) is (B,HD) for one token: the heads are already merged
    matmul_forward(y, ob, mixer_param(m, o->k_wo), o->bias ? mixer_param(m, o->k_bo) : NULL, B, HD, C);
    free(buf);
}

// k and v of every head: 2 H D floats per token (a window caps the cache at `window` tokens); fox adds F
static size_t att_cache_per_token_(const MixerSpec *s) {
    const AttentionOpts *o = s->opts;
    return 2 * (size_t)o->HD + (o->fgate ? (size_t)o->H : 0);
}

// Table 1's SWA row H(dk+dv)·min(w,L) (full attention: w = L = T), then what Table 1 does not count: fox's
// forget-gate sum of every cached position and the running sum itself, PaTH's w-conv inputs, selective_rope's
// state; together exactly att_state_size_(s, T)
static void att_state_terms_(const MixerSpec *s, int T, StateTerms *st) {
    const AttentionOpts *o = s->opts;
    size_t n = (size_t)att_slots_(o, T);
    if (o->window)
        state_terms_add(st, 1, 2 * (size_t)o->HD * n, "KV cache", "H(dk+dv)·min(w,T) = %d·(%d+%d)·min(%d,%d)", o->H,
                        o->D, o->D, o->window, T);
    else
        state_terms_add(st, 1, 2 * (size_t)o->HD * n, "KV cache", "H(dk+dv)·T = %d·(%d+%d)·%d", o->H, o->D, o->D, T);
    if (o->fgate) {
        if (o->window)
            state_terms_add(st, 0, (size_t)o->H * n, "forget-gate sums F_j", "H·min(w,T) = %d·min(%d,%d)", o->H,
                            o->window, T);
        else
            state_terms_add(st, 0, (size_t)o->H * n, "forget-gate sums F_j", "H·T = %d·%d", o->H, T);
        state_terms_add(st, 0, 2 * (size_t)o->H, "running sum F_t", "H doubles = 2·%d", o->H);
    }
    if (o->path)
        state_terms_add(st, 0, (size_t)o->HD * (PATH_CONV_K - 1), "PaTH conv on w", "H·dk·(k−1) = %d·%d·%d", o->H,
                        o->D, PATH_CONV_K - 1);
    selrope_state_terms(&o->sr, st);
}

static int att_attn_heads_(const MixerSpec *s) { return ((const AttentionOpts *)s->opts)->H; }

static void att_attn_map_(const Mixer *m, int b, int h, float *P) {
    const AttentionOpts *o = m->spec->opts;
    int T = m->T, D = o->D;
    AttActs a;
    att_layout_(o, m->B, T, m->acts, &a);
    size_t off = ((size_t)b * o->H + h) * T * D;
    if (o->path) {
        // O(T^2 D): carry each key forward through H_{j+1}, H_{j+2}, ... and read the weights off the saved lse
        const float *q = a.qh + off, *k = a.kh + off, *w = a.wh + off, *bt = a.betah + ((size_t)b * o->H + h) * T;
        const float *lse = a.lse + ((size_t)b * o->H + h) * T;
        const float *F = o->fgate ? a.fg_cum + ((size_t)b * o->H + h) * T : NULL;
        float *u = malloc((size_t)D * sizeof(float)), scale = 1.0f / sqrtf((float)D);
        for (int j = 0; j < T; j++) {
            memcpy(u, k + (size_t)j * D, (size_t)D * sizeof(float));
            for (int i = 0; i < j; i++) P[(size_t)i * T + j] = NAN;
            for (int i = j; i < T; i++) {
                float wu = 0, s = 0;
                if (i > j) {
                    for (int r = 0; r < D; r++) wu += w[(size_t)i * D + r] * u[r];
                    for (int r = 0; r < D; r++) u[r] -= bt[i] * wu * w[(size_t)i * D + r];
                }
                for (int r = 0; r < D; r++) s += q[(size_t)i * D + r] * u[r];
                P[(size_t)i * T + j] = expf(scale * s + (F ? F[i] - F[j] : 0.0f) - lse[i]);
            }
        }
        free(u);
        return;
    }
    AttnOpts ko = att_kernel_opts_(o, &a);
    attention_probs(P, a.qh + off, a.kh + off, a.lse + ((size_t)b * o->H + h) * T, &ko, b, h, o->H, T, D);
}

const MixerOps MIXER_ATTENTION = {
    .name = "attention",
    .doc = "multi-head causal softmax attention; positions none|rope|alibi|fox|decayed_rope|sc_rope|path|path_fox",
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
    .state_init = att_state_init_,
    .step = att_step_,
    .cache_per_token = att_cache_per_token_,
    .state_terms = att_state_terms_,
    .diag = NULL,
    .attn_heads = att_attn_heads_,
    .attn_map = att_attn_map_,
};
