/*
 * The `mlstm` mixer: xLSTM's mLSTM layer (NX-AI/xlstm, xlstm/blocks/mlstm/{layer,cell,backends}.py), a whole block
 * without a separate MLP. docs/mixers.md ("mlstm") has the formulas, tensors and options; in short, with I = inner
 * channels, H heads of D = I/H:
 *
 *   [x_m | z] = x W_up^T                     x_c = silu(conv_K(x_m))  (causal depthwise, bias; K = 0: x_c = x_m)
 *   q, k = blockdiag(x_c), v = blockdiag(x_m)   (LinearHeadwiseExpand, blocks of qkv_blocksize, no bias)
 *   i~, f~ = [q | k | v] W_i^T + b_i, [q | k | v] W_f^T + b_f       (one scalar per head and token)
 *   per head, the stabilised recurrence (nn/linrec.h with g = logsigmoid(f~), li = i~, scale 1/sqrt(D)):
 *     C_t = f'_t C_{t-1} + i'_t k_t v_t^T / sqrt(D),  n_t = f'_t n_{t-1} + i'_t k_t / sqrt(D)
 *     h_t = C_t^T q_t / (max(|q_t^T n_t|, exp(-m_t)) + 1e-6)
 *   the normaliser q^T n comes out of the engine as the last column of v augmented with ones (Dv = D + 1)
 *   y = (MultiHeadLayerNorm(h) + skip (.) x_c) (.) silu(z)  W_down^T
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixers/mixer.h"
#include "mixers/mixer_kit.h"
#include "mixers/mlstm.h"
#include "nn/activation.h"
#include "nn/blockdiag.h"
#include "nn/conv.h"
#include "nn/groupnorm.h"
#include "nn/linrec.h"
#include "nn/matmul.h"

#define KEY_(...) MIXER_KEY(MlstmOpts, __VA_ARGS__)

static const CfgKey MLSTM_KEYS_[] = {
    KEY_("heads", CFG_INT, heads, "4", 1, 1024, NULL,
         "Heads H of the mLSTM cell (xLSTM's num_heads); must divide the inner width I, head size D = I / H."),
    KEY_("proj_factor", CFG_FLOAT, proj_factor, "2", 0.01, 64, NULL,
         "Up-projection factor: I = proj_factor · d_model, rounded up to a multiple of round_to."),
    KEY_("round_to", CFG_INT, round_to, "64", 1, 4096, NULL,
         "The inner width is rounded up to a multiple of this (xLSTM's round_proj_up_to_multiple_of 64; 1 = no "
         "rounding)."),
    KEY_("conv", CFG_INT, conv, "4", 0, 64, NULL,
         "Taps of the causal depthwise convolution (with bias) before silu on the q/k path; 0 = none (x_c = x_m)."),
    KEY_("qkv_blocksize", CFG_INT, qkv_blocksize, "4", 1, 4096, NULL,
         "Block size of the block-diagonal q, k, v projections (LinearHeadwiseExpand); must divide I."),
    KEY_("chunk", CFG_INT, chunk, "64", 1, 1 << 16, NULL,
         "Tokens per chunk of the chunkwise-parallel recurrence (a speed/memory knob: results do not depend on it)."),
    KEY_("fgate_bias_lo", CFG_FLOAT, fgate_bias_lo, "3", -1e3, 1e3, NULL,
         "Forget-gate bias init: linspace(fgate_bias_lo, fgate_bias_hi, H) over the heads."),
    KEY_("fgate_bias_hi", CFG_FLOAT, fgate_bias_hi, "6", -1e3, 1e3, NULL, "Upper end of the forget-gate bias init."),
    KEY_("igate_bias_std", CFG_FLOAT, igate_bias_std, "0.1", 0, 10, NULL, "Input-gate bias init ~ N(0, std^2)."),
    KEY_("norm_eps", CFG_FLOAT, norm_eps, "1e-5", 1e-12, 1, NULL,
         "Epsilon of the per-head output LayerNorm (MultiHeadLayerNorm)."),
};

static const CfgSection MLSTM_SCHEMA_ = {"mlstm", "Options of the mlstm mixer.", MLSTM_KEYS_,
                                         (int)(sizeof MLSTM_KEYS_ / sizeof MLSTM_KEYS_[0])};

// ----------------------------------------------------------------------------
// options and parameters

static int ml_check_(MixerSpec *s, const char *path, Err *e) {
    MlstmOpts *o = s->opts;
    int C = s->C;
    // xLSTM's UpProjConfigMixin: ceil(proj_factor * d / round_to) * round_to, in the same double arithmetic
    double blocks = ceil(o->proj_factor * C / o->round_to);
    if (blocks * o->round_to > (double)(1 << 24))
        return err_set(e, "%s.proj_factor: the inner width %g x %d is too large", path, o->proj_factor, C);
    o->I = (int)blocks * o->round_to;
    o->H = o->heads;
    if (o->I % o->H)
        return err_set(e, "%s.heads: %d does not divide the inner width %d (proj_factor %g x d_model %d, rounded up "
                       "to a multiple of round_to %d)", path, o->H, o->I, o->proj_factor, C, o->round_to);
    if (o->I % o->qkv_blocksize)
        return err_set(e, "%s.qkv_blocksize: %d does not divide the inner width %d", path, o->qkv_blocksize, o->I);
    o->D = o->I / o->H;
    o->Dv = o->D + 1;
    o->K = o->conv;
    o->bs = o->qkv_blocksize;
    o->G = o->I / o->bs;
    int k = 0;
    o->k_up = k++;
    o->k_cw = o->K ? k++ : -1;
    o->k_cb = o->K ? k++ : -1;
    o->k_q = k++, o->k_k = k++, o->k_v = k++;
    o->k_iw = k++, o->k_ib = k++, o->k_fw = k++, o->k_fb = k++;
    o->k_norm = k++;
    o->k_skip = k++;
    o->k_down = k++;
    return 0;
}

static int ml_params_(const MixerSpec *s, ParamTable *pt, const char *prefix, int n_layers, Err *e) {
    const MlstmOpts *o = s->opts;
    int C = s->C, I = o->I, H = o->H;
    // xLSTM's small_init (proj_up and q/k/v, with the model width) and wang_init (proj_down, with the block count)
    float small = (float)sqrt(2.0 / (5.0 * C)), wang = (float)(2.0 / n_layers / sqrt((double)C));
    float cb = o->K ? (float)(1.0 / sqrt((double)o->K)) : 0.0f;  // PyTorch Conv1d's default: fan_in = K (depthwise)
    MIXER_ADD("proj_up", 2, ((int[]){2 * I, C}), init_normal(small), 1);  // rows [x_m | z]
    if (o->K) {
        MIXER_ADD("conv_w", 2, ((int[]){I, o->K}), init_uniform(-cb, cb), 1);
        MIXER_ADD("conv_b", 1, ((int[]){I}), init_uniform(-cb, cb), 0);
    }
    MIXER_ADD("q_proj", 3, ((int[]){o->G, o->bs, o->bs}), init_normal(small), 1);
    MIXER_ADD("k_proj", 3, ((int[]){o->G, o->bs, o->bs}), init_normal(small), 1);
    MIXER_ADD("v_proj", 3, ((int[]){o->G, o->bs, o->bs}), init_normal(small), 1);
    MIXER_ADD("igate_w", 2, ((int[]){H, 3 * I}), init_zeros(), 1);  // columns [q | k | v]
    MIXER_ADD("igate_b", 1, ((int[]){H}), init_normal((float)o->igate_bias_std), 0);
    MIXER_ADD("fgate_w", 2, ((int[]){H, 3 * I}), init_zeros(), 1);
    MIXER_ADD("fgate_b", 1, ((int[]){H}), ((ParamInit){INIT_CUSTOM, 0, 0}), 0);  // linspace, in ml_init_
    MIXER_ADD("outnorm", 1, ((int[]){I}), init_ones(), 0);
    MIXER_ADD("skip", 1, ((int[]){I}), init_ones(), 0);
    MIXER_ADD("proj_down", 2, ((int[]){C, I}), init_normal(wang), 1);
    return 0;
}

// fgate_b = linspace(lo, hi, H) (xLSTM's bias_linspace_init_; one head gets lo)
static void ml_init_(const Mixer *m) {
    const MlstmOpts *o = m->spec->opts;
    float *fb = mixer_param(m, o->k_fb);
    for (int h = 0; h < o->H; h++)
        fb[h] = o->H == 1 ? (float)o->fgate_bias_lo
                          : (float)(o->fgate_bias_lo + (o->fgate_bias_hi - o->fgate_bias_lo) * h / (o->H - 1));
}

// ----------------------------------------------------------------------------
// saved activations (MlstmActs, mixers/mlstm.h; BT = B*T)

static size_t ml_layout_(const MixerSpec *s, int B, int T, float *base, MlstmActs *a) {
    const MlstmOpts *o = s->opts;
    size_t BT = (size_t)B * T, n = 0, BTI = BT * o->I, BTH = BT * o->H, BTA = BTH * o->Dv;
    LinrecDims d = mlstm_dims(o, B, T);
    a->xm = mixer_take(base, &n, BTI, 1);
    a->z = mixer_take(base, &n, BTI, 1);
    a->xcp = mixer_take(base, &n, BTI, o->K > 0);
    a->xc = mixer_take(base, &n, BTI, o->K > 0);
    a->q = mixer_take(base, &n, BTI, 1);
    a->k = mixer_take(base, &n, BTI, 1);
    a->v = mixer_take(base, &n, BTA, 1);
    a->ipre = mixer_take(base, &n, BTH, 1);
    a->fpre = mixer_take(base, &n, BTH, 1);
    a->lf = mixer_take(base, &n, BTH, 1);
    a->o = mixer_take(base, &n, BTA, 1);
    a->mm = mixer_take(base, &n, BTH, 1);
    a->h = mixer_take(base, &n, BTI, 1);
    a->mean = mixer_take(base, &n, BTH, 1);
    a->rstd = mixer_take(base, &n, BTH, 1);
    a->hs = mixer_take(base, &n, BTI, 1);
    a->ckpt = mixer_take(base, &n, linrec_ckpt_size(&d), 1);
    if (!o->K) a->xc = a->xm;
    return n;
}

static size_t ml_act_size_(const MixerSpec *s, int B, int T) {
    MlstmActs a;
    return ml_layout_(s, B, T, NULL, &a);
}

// backward: 5 slabs of (BT,I), 2 of (BT,H,D+1), 3 of (BT,H); the forward needs 2 of (BT,I)
static size_t ml_scratch_size_(const MixerSpec *s, int B, int T) {
    const MlstmOpts *o = s->opts;
    size_t BT = (size_t)B * T;
    return BT * (5 * (size_t)o->I + 2 * (size_t)o->H * o->Dv + 3 * (size_t)o->H);
}

// ----------------------------------------------------------------------------
// the pieces forward, backward and step share (N rows)

// va (N,H,D+1) = v (N,H,D) with a 1 appended per head: the recurrence's last output column is then q . n~
static void ml_augment_(const MlstmOpts *o, float *va, const float *v, int N) {
#pragma omp parallel for schedule(static)
    for (long r = 0; r < (long)N * o->H; r++) {
        memcpy(va + (size_t)r * o->Dv, v + (size_t)r * o->D, (size_t)o->D * sizeof(float));
        va[(size_t)r * o->Dv + o->D] = 1.0f;
    }
}

// a gate's weight W (H,3I) over [q | k | v] as three contiguous matrices: wq, wk (H,I) and wv (H,H(D+1)), the
// last with a zero in each head's ones column so that it multiplies the augmented v directly
static void ml_gate_split_(const MlstmOpts *o, const float *W, float *wq, float *wk, float *wv) {
    int I = o->I, D = o->D, Dv = o->Dv, HA = o->H * Dv;
    for (int h = 0; h < o->H; h++) {
        const float *wr = W + (size_t)h * 3 * I;
        memcpy(wq + (size_t)h * I, wr, (size_t)I * sizeof(float));
        memcpy(wk + (size_t)h * I, wr + I, (size_t)I * sizeof(float));
        for (int hh = 0; hh < o->H; hh++) {
            memcpy(wv + (size_t)h * HA + (size_t)hh * Dv, wr + 2 * I + (size_t)hh * D, (size_t)D * sizeof(float));
            wv[(size_t)h * HA + (size_t)hh * Dv + D] = 0.0f;
        }
    }
}

// pre (N,H) = [q | k | v] W^T + b, v augmented (N,H,D+1)
static void ml_gate_forward_(const MlstmOpts *o, float *pre, const float *q, const float *k, const float *va,
                             const float *W, const float *b, int N) {
    int I = o->I, H = o->H, HA = H * o->Dv;
    float *wq = xmalloc((size_t)H * (2 * I + HA) * sizeof(float)), *wk = wq + (size_t)H * I, *wv = wk + (size_t)H * I;
    ml_gate_split_(o, W, wq, wk, wv);
    matmul_forward(pre, q, wq, b, N, I, H);
    matmul(pre, k, wk, N, H, I, 0, 1, 1);
    matmul(pre, va, wv, N, H, HA, 0, 1, 1);
    free(wq);
}

// the gate's backward: dq, dk += dpre W_q, W_k; dva += dpre W_v (nothing reaches the ones column's use);
// dW += dpre^T [q | k | v]; db += sum dpre
static void ml_gate_backward_(const MlstmOpts *o, float *dq, float *dk, float *dva, float *dW, float *db,
                              const float *dpre, const float *q, const float *k, const float *va, const float *W,
                              int N) {
    int I = o->I, H = o->H, D = o->D, Dv = o->Dv, HA = H * Dv;
    size_t nw = (size_t)H * (2 * I + HA);
    float *wq = xmalloc(2 * nw * sizeof(float)), *wk = wq + (size_t)H * I, *wv = wk + (size_t)H * I;
    float *gq = wq + nw, *gk = gq + (size_t)H * I, *gv = gk + (size_t)H * I;
    ml_gate_split_(o, W, wq, wk, wv);
    memset(gq, 0, nw * sizeof(float));
    matmul_backward(dq, gq, db, dpre, q, wq, N, I, H);
    matmul_backward(dk, gk, NULL, dpre, k, wk, N, I, H);
    matmul_backward(dva, gv, NULL, dpre, va, wv, N, HA, H);
    for (int h = 0; h < H; h++) {
        float *dr = dW + (size_t)h * 3 * I;
        for (int c = 0; c < I; c++) {
            dr[c] += gq[(size_t)h * I + c];
            dr[I + c] += gk[(size_t)h * I + c];
        }
        for (int hh = 0; hh < H; hh++)
            for (int j = 0; j < D; j++) dr[2 * I + hh * D + j] += gv[(size_t)h * HA + (size_t)hh * Dv + j];
    }
    free(wq);
}

// the cell's inputs from xm, xc (N,I): q, k (N,I), va (N,H,D+1) (v through vtmp (N,I)), the gate pre-activations
// ipre, fpre and lf = logsigmoid(fpre) (N,H)
static void ml_cell_in_(const Mixer *m, float *q, float *k, float *va, float *vtmp, float *ipre, float *fpre,
                        float *lf, const float *xm, const float *xc, int N) {
    const MlstmOpts *o = m->spec->opts;
    blockdiag_forward(q, xc, mixer_param(m, o->k_q), N, o->G, o->bs, o->bs);
    blockdiag_forward(k, xc, mixer_param(m, o->k_k), N, o->G, o->bs, o->bs);
    blockdiag_forward(vtmp, xm, mixer_param(m, o->k_v), N, o->G, o->bs, o->bs);
    ml_augment_(o, va, vtmp, N);
    ml_gate_forward_(o, ipre, q, k, va, mixer_param(m, o->k_iw), mixer_param(m, o->k_ib), N);
    ml_gate_forward_(o, fpre, q, k, va, mixer_param(m, o->k_fw), mixer_param(m, o->k_fb), N);
    for (size_t i = 0; i < (size_t)N * o->H; i++) lf[i] = (float)mixer_logsigmoid(fpre[i]);
}

// h (N,I) = o[:D] / (max(|o[D]|, exp(-m)) + eps) per (row, head); in double, as exp(-m) may pass float's range
static void ml_normalise_(const MlstmOpts *o, float *h, const float *oa, const float *mm, int N) {
#pragma omp parallel for schedule(static)
    for (long r = 0; r < (long)N * o->H; r++) {
        const float *src = oa + (size_t)r * o->Dv;
        double den = fmax(fabs((double)src[o->D]), exp(-(double)mm[r])) + MLSTM_EPS, inv = 1.0 / den;
        for (int j = 0; j < o->D; j++) h[(size_t)r * o->D + j] = (float)(src[j] * inv);
    }
}

// the cell's output side from h (N,I): hs = outnorm(h) + skip (.) xc (mean, rstd (N*H) kept), then
// y (N,C) = (hs (.) silu(z)) W_down^T with g (N,I) as a temporary
static void ml_cell_out_(const Mixer *m, float *y, float *hs, float *mean, float *rstd, float *g, const float *h,
                         const float *xc, const float *z, int N) {
    const MlstmOpts *o = m->spec->opts;
    int I = o->I;
    GroupNormOpts gn = mlstm_norm_opts(o);
    groupnorm_forward(hs, mean, rstd, h, NULL, mixer_param(m, o->k_norm), N, o->H, o->D, &gn);
    const float *skip = mixer_param(m, o->k_skip);
    silu_forward(g, z, (size_t)N * I);
#pragma omp parallel for schedule(static)
    for (long r = 0; r < (long)N; r++)
        for (int c = 0; c < I; c++) {
            size_t i = (size_t)r * I + c;
            hs[i] += skip[c] * xc[i];
            g[i] *= hs[i];
        }
    matmul_forward(y, g, mixer_param(m, o->k_down), NULL, N, I, m->spec->C);
}

// ----------------------------------------------------------------------------
// forward

static void ml_forward_(Mixer *m, float *y, const float *x, int B, int T) {
    const MlstmOpts *o = m->spec->opts;
    int C = m->spec->C, I = o->I, BT = B * T;
    MlstmActs a;
    ml_layout_(m->spec, B, T, m->acts, &a);
    float *s0 = m->scratch, *s1 = s0 + (size_t)BT * I;
    const float *wup = mixer_param(m, o->k_up);
    matmul_forward(a.xm, x, wup, NULL, BT, C, I);
    matmul_forward(a.z, x, wup + (size_t)I * C, NULL, BT, C, I);
    if (o->K) {
        conv1d_causal_forward(a.xcp, a.xm, mixer_param(m, o->k_cw), mixer_param(m, o->k_cb), B, T, I, o->K);
        silu_forward(a.xc, a.xcp, (size_t)BT * I);
    }
    ml_cell_in_(m, a.q, a.k, a.v, s0, a.ipre, a.fpre, a.lf, a.xm, a.xc, BT);
    LinrecDims d = mlstm_dims(o, B, T);
    linrec_forward(a.o, a.mm, a.ckpt, NULL, a.q, a.k, a.v, a.lf, a.ipre, &d);
    ml_normalise_(o, a.h, a.o, a.mm, BT);
    ml_cell_out_(m, y, a.hs, a.mean, a.rstd, s1, a.h, a.xc, a.z, BT);
}

// ----------------------------------------------------------------------------
// backward

static void ml_backward_(Mixer *m, float *dx, const float *dy, const float *x, int B, int T) {
    const MlstmOpts *o = m->spec->opts;
    int C = m->spec->C, I = o->I, H = o->H, D = o->D, Dv = o->Dv, BT = B * T;
    size_t BTI = (size_t)BT * I, BTH = (size_t)BT * H, BTA = BTH * Dv;
    MlstmActs a;
    ml_layout_(m->spec, B, T, m->acts, &a);
    float *sA = m->scratch, *sB = sA + BTI, *sC = sB + BTI, *sD = sC + BTI, *sE = sD + BTI;
    float *sF = sE + BTI, *sG = sF + BTA, *dm = sG + BTA, *dlf = dm + BTH, *dli = dlf + BTH;

    // y = g W_down^T, g = hs (.) silu(z): dgp (sA), silu(z) (sB), g (sC)
    const float *wdown = mixer_param(m, o->k_down);
    float *dgp = sA, *sz = sB, *g = sC;
    matmul(dgp, dy, wdown, BT, I, C, 0, 0, 0);
    silu_forward(sz, a.z, BTI);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < BTI; i++) g[i] = a.hs[i] * sz[i];
    matmul_backward(NULL, mixer_grad(m, o->k_down), NULL, dy, g, wdown, BT, I, C);
    // dhs = dgp silu(z) (sC); dz = silu'(z) (dgp hs) (sD)
    float *dhs = sC, *dz = sD;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < BTI; i++) { dhs[i] = dgp[i] * sz[i]; dgp[i] *= a.hs[i]; }
    memset(dz, 0, BTI * sizeof(float));
    silu_backward(dz, a.z, dgp, BTI);
    // hs = outnorm(h) + skip (.) xc: dskip summed over rows in order, per block of columns; dxc (sA) = skip dhs
    const float *skip = mixer_param(m, o->k_skip);
    float *gskip = mixer_grad(m, o->k_skip), *dxc = sA;
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < I; c0 += 64) {
        int c1 = c0 + 64 < I ? c0 + 64 : I;
        double acc[64] = {0};
        for (size_t r = 0; r < (size_t)BT; r++)
            for (int c = c0; c < c1; c++) acc[c - c0] += (double)dhs[r * I + c] * a.xc[r * I + c];
        for (int c = c0; c < c1; c++) gskip[c] += (float)acc[c - c0];
    }
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < (size_t)BT; r++)
        for (int c = 0; c < I; c++) dxc[r * I + c] = skip[c] * dhs[r * I + c];
    // the outnorm: dh (sB)
    float *dh = sB;
    memset(dh, 0, BTI * sizeof(float));
    GroupNormOpts gn = mlstm_norm_opts(o);
    groupnorm_backward(dh, NULL, mixer_grad(m, o->k_norm), dhs, a.h, NULL, mixer_param(m, o->k_norm), a.mean, a.rstd,
                       BT, H, D, &gn);
    // h = o[:D] / den, den = max(|o[D]|, exp(-m)) + eps: dO (sF), dm; the branch the max took gets den's gradient
    float *dO = sF;
#pragma omp parallel for schedule(static)
    for (long r = 0; r < (long)BTH; r++) {
        const float *src = a.o + (size_t)r * Dv, *dhr = dh + (size_t)r * D;
        float *dor = dO + (size_t)r * Dv;
        double on = src[D], e = exp(-(double)a.mm[r]), den = fmax(fabs(on), e) + MLSTM_EPS, s = 0.0;
        for (int j = 0; j < D; j++) {
            dor[j] = (float)(dhr[j] / den);
            s += (double)dhr[j] * src[j];
        }
        double sd = s / den;  // d den = -sd / den
        if (fabs(on) >= e) {
            dor[D] = (float)(on > 0 ? -sd / den : sd / den);
            dm[r] = 0.0f;
        } else {
            dor[D] = 0.0f;
            dm[r] = (float)(sd * (e / den));  // d exp(-m) / dm = -exp(-m)
        }
    }
    // the recurrence: dq (sC), dk (sB), dva (sG), dlf, dli
    float *dq = sC, *dk = sB, *dva = sG;
    memset(dq, 0, BTI * sizeof(float));
    memset(dk, 0, BTI * sizeof(float));
    memset(dva, 0, BTA * sizeof(float));
    memset(dlf, 0, 2 * BTH * sizeof(float));  // dlf, dli
    LinrecDims d = mlstm_dims(o, B, T);
    linrec_backward(dq, dk, dva, dlf, dli, dO, dm, a.ckpt, a.q, a.k, a.v, a.lf, a.ipre, &d);
    // lf = logsigmoid(fpre): d fpre = dlf sigmoid(-fpre), in place
    for (size_t i = 0; i < BTH; i++) dlf[i] *= (float)mixer_sigmoid(-a.fpre[i]);
    ml_gate_backward_(o, dq, dk, dva, mixer_grad(m, o->k_iw), mixer_grad(m, o->k_ib), dli, a.q, a.k, a.v,
                      mixer_param(m, o->k_iw), BT);
    ml_gate_backward_(o, dq, dk, dva, mixer_grad(m, o->k_fw), mixer_grad(m, o->k_fb), dlf, a.q, a.k, a.v,
                      mixer_param(m, o->k_fw), BT);
    // v: drop the ones column (dv into sF, free now)
    float *dv = sF;
#pragma omp parallel for schedule(static)
    for (long r = 0; r < (long)BTH; r++) memcpy(dv + (size_t)r * D, dva + (size_t)r * Dv, (size_t)D * sizeof(float));
    // q, k = blockdiag(xc), v = blockdiag(xm): dxc (sA) +=, dxm (sE)
    float *dxm = sE;
    memset(dxm, 0, BTI * sizeof(float));
    blockdiag_backward(dxc, mixer_grad(m, o->k_q), dq, a.xc, mixer_param(m, o->k_q), BT, o->G, o->bs, o->bs);
    blockdiag_backward(dxc, mixer_grad(m, o->k_k), dk, a.xc, mixer_param(m, o->k_k), BT, o->G, o->bs, o->bs);
    blockdiag_backward(dxm, mixer_grad(m, o->k_v), dv, a.xm, mixer_param(m, o->k_v), BT, o->G, o->bs, o->bs);
    // xc = silu(conv(xm)) (dxcp in sC), or xc = xm
    if (o->K) {
        float *dxcp = sC;
        memset(dxcp, 0, BTI * sizeof(float));
        silu_backward(dxcp, a.xcp, dxc, BTI);
        conv1d_causal_backward(dxm, mixer_grad(m, o->k_cw), mixer_grad(m, o->k_cb), dxcp, a.xm,
                               mixer_param(m, o->k_cw), B, T, I, o->K);
    } else {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < BTI; i++) dxm[i] += dxc[i];
    }
    // [x_m | z] = x W_up^T
    const float *wup = mixer_param(m, o->k_up);
    float *gup = mixer_grad(m, o->k_up);
    matmul_backward(dx, gup, NULL, dxm, x, wup, BT, C, I);
    matmul_backward(dx, gup + (size_t)I * C, NULL, dz, x, wup + (size_t)I * C, BT, C, I);
}

// ----------------------------------------------------------------------------
// recurrent decoding: per sequence [the recurrence's state (H, D(D+1) + 1) | conv state (I, K-1)]

static size_t ml_engine_state_(const MlstmOpts *o) {
    LinrecDims d = mlstm_dims(o, 1, 1);
    return (size_t)o->H * linrec_state_size(&d);
}

static size_t ml_state_size_(const MixerSpec *s, int cap) {
    const MlstmOpts *o = s->opts;
    return ml_engine_state_(o) + (o->K ? (size_t)o->I * (o->K - 1) : 0);
}

// Table 1's GLA/GDN row H·dk·dv for the matrix memory C (dk = dv = D), then what Table 1 does not count: the
// normaliser n and the stabiliser m per head; and the short-conv row on the I inner channels
static void ml_state_terms_(const MixerSpec *s, int T, StateTerms *st) {
    const MlstmOpts *o = s->opts;
    (void)T;
    state_terms_add(st, 1, (size_t)o->H * o->D * o->D, "matrix memory C", "H·dk·dv = %d·%d·%d", o->H, o->D, o->D);
    state_terms_add(st, 0, (size_t)o->H * o->D, "normaliser n", "H·dk = %d·%d", o->H, o->D);
    state_terms_add(st, 0, (size_t)o->H, "stabiliser m", "H = %d", o->H);
    if (o->K > 1) state_terms_add(st, 1, (size_t)o->I * (o->K - 1), "short conv", "D(k−1) = %d·%d", o->I, o->K - 1);
}

static void ml_state_init_(const Mixer *m, float *state, int B, int cap) {
    const MlstmOpts *o = m->spec->opts;
    LinrecDims d = mlstm_dims(o, 1, 1);
    size_t n = ml_state_size_(m->spec, 0), es = ml_engine_state_(o);
    for (int b = 0; b < B; b++) {
        linrec_state_init(state + b * n, &d);  // C~ = 0, n~ = 0, m = LINREC_M_EMPTY (the parallel form's row max)
        memset(state + b * n + es, 0, (n - es) * sizeof(float));
    }
}

static void ml_step_(const Mixer *m, float *state, float *y, const float *x, int B, int t, int cap) {
    const MlstmOpts *o = m->spec->opts;
    int C = m->spec->C, I = o->I, H = o->H;
    size_t n = ml_state_size_(m->spec, 0), es = ml_engine_state_(o), BI = (size_t)B * I, BH = (size_t)B * H;
    size_t BA = BH * o->Dv;
    float *buf = xmalloc((9 * BI + 2 * BA + 7 * BH) * sizeof(float));
    float *xm = buf, *z = xm + BI, *xcp = z + BI, *xc = xcp + BI, *q = xc + BI, *k = q + BI, *tmp = k + BI;
    float *h = tmp + BI, *hs = h + BI, *va = hs + BI, *oa = va + BA, *ipre = oa + BA, *fpre = ipre + BH;
    float *lf = fpre + BH, *mm = lf + BH, *mean = mm + BH, *rstd = mean + BH;
    const float *wup = mixer_param(m, o->k_up);
    matmul_forward(xm, x, wup, NULL, B, C, I);
    matmul_forward(z, x, wup + (size_t)I * C, NULL, B, C, I);
    if (o->K) {
        for (int b = 0; b < B; b++)
            conv1d_causal_step(xcp + (size_t)b * I, state + b * n + es, xm + (size_t)b * I, mixer_param(m, o->k_cw),
                               mixer_param(m, o->k_cb), 1, I, o->K);
        silu_forward(xc, xcp, BI);
    } else {
        memcpy(xc, xm, BI * sizeof(float));
    }
    ml_cell_in_(m, q, k, va, tmp, ipre, fpre, lf, xm, xc, B);
    LinrecDims d = mlstm_dims(o, 1, 1);
    for (int b = 0; b < B; b++)
        linrec_step(oa + (size_t)b * H * o->Dv, mm + (size_t)b * H, state + b * n, q + (size_t)b * I,
                    k + (size_t)b * I, va + (size_t)b * H * o->Dv, lf + (size_t)b * H, ipre + (size_t)b * H, &d);
    ml_normalise_(o, h, oa, mm, B);
    ml_cell_out_(m, y, hs, mean, rstd, tmp, h, xc, z, B);
    free(buf);
}

// ----------------------------------------------------------------------------
// diagnostics: the gates' biases per head (sigmoid of the forget bias = the forget gate where the weights
// contribute nothing, 0.95-0.998 at init) and the mean skip weight

static void ml_diag_(const Mixer *m, cJSON *obj) {
    const MlstmOpts *o = m->spec->opts;
    const float *fb = mixer_param(m, o->k_fb), *ib = mixer_param(m, o->k_ib), *sk = mixer_param(m, o->k_skip);
    double *v = xmalloc(2 * (size_t)o->H * sizeof(double)), s = 0.0;
    for (int h = 0; h < o->H; h++) {
        v[h] = mixer_sigmoid(fb[h]);
        v[o->H + h] = ib[h];
    }
    for (int c = 0; c < o->I; c++) s += sk[c];
    s /= o->I;
    cJSON_AddItemToObject(obj, "fgate_bias_sigmoid", cJSON_CreateDoubleArray(v, o->H));
    cJSON_AddItemToObject(obj, "igate_bias", cJSON_CreateDoubleArray(v + o->H, o->H));
    cJSON_AddItemToObject(obj, "skip_mean", cJSON_CreateDoubleArray(&s, 1));
    free(v);
}

const MixerOps MIXER_MLSTM = {
    .name = "mlstm",
    .doc = "xLSTM's mLSTM layer: exponential input gates with a max stabiliser, a matrix memory and its normaliser",
    .owns_mlp = 1,
    .schema = &MLSTM_SCHEMA_,
    .opts_size = sizeof(MlstmOpts),
    .check = ml_check_,
    .params = ml_params_,
    .init = ml_init_,
    .act_size = ml_act_size_,
    .scratch_size = ml_scratch_size_,
    .forward = ml_forward_,
    .backward = ml_backward_,
    .state_size = ml_state_size_,
    .state_terms = ml_state_terms_,
    .state_init = ml_state_init_,
    .step = ml_step_,
    .diag = ml_diag_,
};
