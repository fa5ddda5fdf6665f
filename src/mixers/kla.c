/*
 * The `kla` mixer: Kalman Linear Attention as a fused Mamba-style block (KLA paper, App. A, Algorithm 1;
 * the authors' KLALayer of vaisakh-shaj/kalman-linear-attention). docs/mixers.md ("kla") has the formulas,
 * tensors and options; in short, with M = expand · C channels and S state slots per channel:
 *
 *   [z | gate] = x W_in^T                      u = silu(conv_K(z))       (causal depthwise, K = 4)
 *   plain:  [v | l | k | q] = u W_s^T          mamba: v = u, [r | k | q] = u W_s^T, l = r W_ve^T + b_ve
 *   k, q <- k/|k|, q/|q|                       Lambda^v = 1 / (softplus(l) + obs_var_min)
 *   abar = exp(-e^{lambda_log} Delta),  pbar = p/(2|a|) (1 - abar^2) (OU) or p Delta (ZOH),
 *   Delta = softplus(delta) + 1e-7
 *   y_mean, y_var = the information-form Kalman scan (nn/kalman.h)
 *   y = (y_mean [+ sqrt(y_var) eps under KLA+ sampling] + lambda_skip u) * silu(gate),   out = y W_out^T
 *
 * The block has no separate MLP (owns_mlp: model.block "auto" makes its layers fused, x += kla(norm(x)));
 * the gated product is its MLP.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "mixers/kla.h"
#include "mixers/mixer.h"
#include "mixers/mixer_kit.h"
#include "nn/activation.h"
#include "nn/conv.h"
#include "nn/kalman.h"
#include "nn/matmul.h"
#include "nn/norm.h"

#define KEY_(...) MIXER_KEY(KlaOpts, __VA_ARGS__)

static const CfgKey KLA_KEYS_[] = {
    KEY_("d_state", CFG_INT, d_state, "16", 1, 1024, NULL,
         "State slots S per channel (the paper's N / d_state: 16 by default, 32 in Table 13, 8 in the MAD table)."),
    KEY_("expand", CFG_FLOAT, expand, "1", 0.01, 64, NULL, "Channels M = round(expand · d_model) (paper: 1)."),
    KEY_("conv", CFG_INT, conv, "4", 1, 64, NULL, "Taps of the causal depthwise convolution on z (1 = a per-channel scale)."),
    KEY_("sensors", CFG_ENUM, sensors, "\"plain\"", 0, 0, "plain|mamba",
         "plain: v, log-variance, k, q all projected from u (MAD synthetics); mamba: v = u and a low-rank "
         "log-variance (FineWeb-Edu runs)."),
    KEY_("var_rank", CFG_INT, var_rank, "0", 0, 1 << 16, NULL,
         "mamba sensors: rank r of the log-variance (u -> r -> M); 0 = ceil(d_model / 8)."),
    KEY_("qk_norm", CFG_BOOL, qk_norm, "true", 0, 0, NULL, "L2-normalise k and q over the S slots (false = ablation)."),
    KEY_("obs_var_min", CFG_FLOAT, obs_var_min, "1e-4", 1e-12, 1e6, NULL,
         "sigma^2_min: observation variance = softplus(l) + obs_var_min, so Lambda^v <= 1/obs_var_min."),
    KEY_("discretization", CFG_ENUM, discretization, "\"ou\"", 0, 0, "ou|zoh",
         "Process-noise discretisation: exact OU pbar = p/(2|a|)(1 - e^{2a Delta}), or ZOH pbar = p Delta."),
    KEY_("process_noise", CFG_BOOL, process_noise, "true", 0, 0, NULL,
         "Learn the process noise p; false fixes pbar = 0 (Table 6 ablation: a fixed-gate linear recurrence)."),
    KEY_("p_init", CFG_FLOAT, p_init, "0.01", 0, 1e6, NULL, "Initial process noise p (every channel and slot)."),
    KEY_("p_min", CFG_FLOAT, p_min, "1e-7", 0, 1e6, NULL, "p is clamped to at least p_min."),
    KEY_("dt_min", CFG_FLOAT, dt_min, "0.001", 1e-9, 1e3, NULL, "Delta is initialised log-uniform in [dt_min, dt_max]."),
    KEY_("dt_max", CFG_FLOAT, dt_max, "0.1", 1e-9, 1e3, NULL, "Upper end of the Delta init range."),
    KEY_("dt_floor", CFG_FLOAT, dt_floor, "1e-4", 0, 1e3, NULL, "Initial Delta values below this are raised to it."),
    KEY_("gate", CFG_BOOL, gate, "true", 0, 0, NULL, "Multiply the output by silu(gate) (the block's gated MLP)."),
    KEY_("skip", CFG_BOOL, skip, "true", 0, 0, NULL, "The learned skip y += lambda_skip · u."),
    KEY_("skip_init", CFG_FLOAT, skip_init, "-1", -1e6, 1e6, NULL, "Initial lambda_skip."),
    KEY_("init_std", CFG_FLOAT, init_std, "0.02", 0, 10, NULL,
         "Std of every projection's normal init (the reference's _init_weights: no depth scaling)."),
    KEY_("chunk", CFG_INT, chunk, "64", 1, 1 << 20, NULL,
         "Backward checkpoint interval C: the scan keeps B·M·S·T/C states and recomputes the rest."),
};

static const CfgSection KLA_SCHEMA_ = {"kla", "Options of the kla mixer.", KLA_KEYS_,
                                       (int)(sizeof KLA_KEYS_ / sizeof KLA_KEYS_[0])};

// ----------------------------------------------------------------------------
// options and parameters

static int kla_check_(MixerSpec *s, const char *path, Err *e) {
    KlaOpts *o = s->opts;
    int C = s->C;
    o->M = (int)lround(o->expand * C);
    if (o->M < 1) return err_set(e, "%s.expand: %g x %d rounds to 0 channels", path, o->expand, C);
    o->S = o->d_state;
    o->K = o->conv;
    o->mamba = !strcmp(o->sensors, "mamba");
    o->zoh = !strcmp(o->discretization, "zoh");
    o->R = o->var_rank ? o->var_rank : (C + 7) / 8;
    if (o->dt_min > o->dt_max)
        return err_set(e, "%s.dt_min: %g is above dt_max %g", path, o->dt_min, o->dt_max);
    if (!o->mamba && o->var_rank)
        return err_set(e, "%s.var_rank: only used with \"sensors\": \"mamba\" (plain projects the full variance)", path);
    if (o->mamba && o->R > o->M)
        return err_set(e, "%s.var_rank: %d is above the %d channels", path, o->R, o->M);
    o->Ns = o->mamba ? o->R + 2 * o->S : 2 * o->M + 2 * o->S;
    int k = 0;
    o->k_in = k++;
    o->k_cw = k++;
    o->k_cb = k++;
    o->k_sens = k++;
    o->k_ve = o->mamba ? k++ : -1;
    o->k_veb = o->mamba ? k++ : -1;
    o->k_lam = k++;
    o->k_p = o->process_noise ? k++ : -1;
    o->k_dt = k++;
    o->k_skip = o->skip ? k++ : -1;
    o->k_out = k++;
    return 0;
}

static int kla_params_(const MixerSpec *s, ParamTable *pt, const char *prefix, int n_layers, Err *e) {
    const KlaOpts *o = s->opts;
    (void)n_layers;  // every projection N(0, init_std) as in the reference (its _init_weights), no depth scaling
    int C = s->C, M = o->M, S = o->S;
    float std = (float)o->init_std, cb = (float)(1.0 / sqrt((double)o->K));
    MIXER_ADD("in_proj", 2, ((int[]){(o->gate ? 2 : 1) * M, C}), init_normal(std), 1);
    MIXER_ADD("conv_w", 2, ((int[]){M, o->K}), init_uniform(-cb, cb), 1);  // PyTorch Conv1d's kaiming_uniform(a=sqrt 5)
    MIXER_ADD("conv_b", 1, ((int[]){M}), init_zeros(), 0);
    MIXER_ADD("sensor_proj", 2, ((int[]){o->Ns, M}), init_normal(std), 1);
    if (o->mamba) {
        MIXER_ADD("var_expand", 2, ((int[]){M, o->R}), init_normal(std), 1);
        MIXER_ADD("var_expand_b", 1, ((int[]){M}), init_zeros(), 0);
    }
    MIXER_ADD("lambda_log", 2, ((int[]){M, S}), init_zeros(), 0);  // a = -exp(0) = -1
    if (o->process_noise) MIXER_ADD("process_noise", 2, ((int[]){M, S}), init_const((float)o->p_init), 0);
    MIXER_ADD("delta", 2, ((int[]){M, S}), ((ParamInit){INIT_LOGUNIFORM, (float)o->dt_min, (float)o->dt_max}), 0);
    if (o->skip) MIXER_ADD("lambda_skip", 1, ((int[]){1}), init_const((float)o->skip_init), 0);
    MIXER_ADD("out_proj", 2, ((int[]){C, M}), init_normal(std), 1);
    return 0;
}

// delta was drawn log-uniform as Delta itself; store softplus^{-1}(max(Delta, dt_floor))
static void kla_init_(const Mixer *m) {
    const KlaOpts *o = m->spec->opts;
    float *dt = mixer_param(m, o->k_dt);
    mixer_dt_bias_init(dt, (size_t)o->M * o->S, o->dt_floor);
}

// the discrete dynamics abar, pbar (M,S) from lambda_log, delta, process_noise (mixers/kla.h's kla_dynamics_one)
static void kla_dynamics_(const Mixer *m, float *abar, float *pbar) {
    const KlaOpts *o = m->spec->opts;
    const float *lam = mixer_param(m, o->k_lam), *dt = mixer_param(m, o->k_dt);
    const float *praw = o->process_noise ? mixer_param(m, o->k_p) : NULL;
    for (size_t i = 0; i < (size_t)o->M * o->S; i++)
        kla_dynamics_one(abar + i, pbar + i, lam[i], dt[i], praw ? praw[i] : 0.0f, praw != NULL, o->p_min, o->zoh);
}

// chain dabar, dpbar (M,S) back to lambda_log, delta, process_noise
static void kla_dynamics_backward_(const Mixer *m, const float *dabar, const float *dpbar) {
    const KlaOpts *o = m->spec->opts;
    const float *lam = mixer_param(m, o->k_lam), *dt = mixer_param(m, o->k_dt);
    const float *praw = o->process_noise ? mixer_param(m, o->k_p) : NULL;
    float *glam = mixer_grad(m, o->k_lam), *gdt = mixer_grad(m, o->k_dt);
    float *gp = o->process_noise ? mixer_grad(m, o->k_p) : NULL, sink = 0.0f;
    for (size_t i = 0; i < (size_t)o->M * o->S; i++)
        kla_dynamics_one_backward(glam + i, gdt + i, gp ? gp + i : &sink, dabar[i], dpbar[i], lam[i], dt[i],
                                  praw ? praw[i] : 0.0f, praw != NULL, o->p_min, o->zoh);
}

// ----------------------------------------------------------------------------
// saved activations (BT = B*T)

typedef struct KlaActs {
    float *z, *gate;      // (BT,M) the two halves of the input projection
    float *zc, *u;        // (BT,M) conv output, silu of it
    float *sens;          // (BT,Ns) sensor projection
    float *lv;            // (BT,M) log-variance (mamba: after var_expand; plain: a copy)
    float *v;             // (BT,M) the value (plain: a copy out of sens; mamba: unused, v = u)
    float *k, *q;         // (BT,S) after the optional L2 norm
    float *kn, *qn;       // (BT,) the divisors of their L2 norm, max(|raw|, eps)
    float *prec;          // (BT,M) Lambda^v
    float *ym, *yvar, *eps;  // (BT,M) scan mean; variance and the noise (KLA+ sampling only)
    float *ys, *g;        // (BT,M) before the gate, after it
    float *ckpt;          // scan checkpoints
} KlaActs;

// a's pointers into base (NULL: only count); returns the floats used
static size_t kla_layout_(const MixerSpec *s, int B, int T, float *base, KlaActs *a) {
    const KlaOpts *o = s->opts;
    size_t BT = (size_t)B * T, n = 0, BTM = BT * o->M, BTS = BT * o->S;
    a->z = mixer_take(base, &n, BTM, 1);
    a->gate = mixer_take(base, &n, BTM, o->gate);
    a->zc = mixer_take(base, &n, BTM, 1);
    a->u = mixer_take(base, &n, BTM, 1);
    a->sens = mixer_take(base, &n, BT * o->Ns, 1);
    a->lv = mixer_take(base, &n, BTM, 1);
    a->v = mixer_take(base, &n, BTM, !o->mamba);
    a->k = mixer_take(base, &n, BTS, 1);
    a->q = mixer_take(base, &n, BTS, 1);
    a->kn = mixer_take(base, &n, BT, 1);
    a->qn = mixer_take(base, &n, BT, 1);
    a->prec = mixer_take(base, &n, BTM, 1);
    a->ym = mixer_take(base, &n, BTM, 1);
    a->yvar = mixer_take(base, &n, BTM, s->sample);
    a->eps = mixer_take(base, &n, BTM, s->sample);
    a->ys = mixer_take(base, &n, BTM, 1);
    a->g = mixer_take(base, &n, BTM, o->gate);
    a->ckpt = mixer_take(base, &n, kalman_ckpt_size(B, T, o->M, o->S, o->chunk), 1);
    return n;
}

static size_t kla_act_size_(const MixerSpec *s, int B, int T) {
    KlaActs a;
    return kla_layout_(s, B, T, NULL, &a);
}

static size_t kla_scratch_size_(const MixerSpec *s, int B, int T) {
    const KlaOpts *o = s->opts;
    size_t BT = (size_t)B * T, BTM = BT * o->M;
    return 7 * BTM + BT * o->Ns + 2 * BT * o->S + 4 * (size_t)o->M * o->S + kalman_scratch_size(B, T, o->M, o->S);
}

// ----------------------------------------------------------------------------
// the sensor path shared by forward and step: sens (N,Ns) -> v, lv, k, q, prec for N rows

static void kla_sensors_(const Mixer *m, const float *sens, const float *u, float *v, float *lv, float *k, float *q,
                         float *kn, float *qn, float *prec, int N) {
    const KlaOpts *o = m->spec->opts;
    int M = o->M, S = o->S, Ns = o->Ns, off = o->mamba ? o->R : 2 * M;
    if (o->mamba) {
        // lv (N,M) = r (N,R) W_ve^T + b_ve, r = the first R columns of sens: one row at a time keeps it strided-free
        float *r = xmalloc((size_t)N * o->R * sizeof(float));
        for (int i = 0; i < N; i++) memcpy(r + (size_t)i * o->R, sens + (size_t)i * Ns, (size_t)o->R * sizeof(float));
        matmul_forward(lv, r, mixer_param(m, o->k_ve), mixer_param(m, o->k_veb), N, o->R, M);
        free(r);
        (void)u;
    } else {
        for (int i = 0; i < N; i++) {
            memcpy(v + (size_t)i * M, sens + (size_t)i * Ns, (size_t)M * sizeof(float));
            memcpy(lv + (size_t)i * M, sens + (size_t)i * Ns + M, (size_t)M * sizeof(float));
        }
    }
    for (int i = 0; i < N; i++) {
        memcpy(k + (size_t)i * S, sens + (size_t)i * Ns + off, (size_t)S * sizeof(float));
        memcpy(q + (size_t)i * S, sens + (size_t)i * Ns + off + S, (size_t)S * sizeof(float));
    }
    if (o->qk_norm) {
        l2norm_forward(k, kn, k, N, S, KLA_NORM_EPS, L2NORM_FLOOR);
        l2norm_forward(q, qn, q, N, S, KLA_NORM_EPS, L2NORM_FLOOR);
    }
    double vmin = o->obs_var_min;
#pragma omp parallel for
    for (size_t i = 0; i < (size_t)N * M; i++) prec[i] = (float)(1.0 / (mixer_softplus(lv[i]) + vmin));
}

// a standard normal keyed by (seed, index): the same noise in forward and backward without storing a stream
static float kla_noise_(uint64_t seed, size_t i) {
    Rng r;
    rng_seed(&r, seed ^ (0x9E3779B97F4A7C15ull * (i + 1)));
    return (float)rng_normal(&r);
}

// ----------------------------------------------------------------------------
// forward

static void kla_forward_(Mixer *m, float *y, const float *x, int B, int T) {
    const KlaOpts *o = m->spec->opts;
    int C = m->spec->C, M = o->M, S = o->S, BT = B * T;
    size_t BTM = (size_t)BT * M;
    KlaActs a;
    kla_layout_(m->spec, B, T, m->acts, &a);
    const float *win = mixer_param(m, o->k_in);
    matmul_forward(a.z, x, win, NULL, BT, C, M);
    if (o->gate) matmul_forward(a.gate, x, win + (size_t)M * C, NULL, BT, C, M);
    conv1d_causal_forward(a.zc, a.z, mixer_param(m, o->k_cw), mixer_param(m, o->k_cb), B, T, M, o->K);
    silu_forward(a.u, a.zc, BTM);
    matmul_forward(a.sens, a.u, mixer_param(m, o->k_sens), NULL, BT, M, o->Ns);
    kla_sensors_(m, a.sens, a.u, a.v, a.lv, a.k, a.q, a.kn, a.qn, a.prec, BT);
    float *abar = m->scratch, *pbar = abar + (size_t)M * S;
    kla_dynamics_(m, abar, pbar);
    kalman_scan_forward(a.ym, a.yvar, a.ckpt, o->mamba ? a.u : a.v, a.prec, a.k, a.q, abar, pbar, B, T, M, S, o->chunk);
    float lsk = o->skip ? mixer_param(m, o->k_skip)[0] : 0.0f;
    int sample = m->spec->sample;
    uint64_t seed = m->noise_seed;
#pragma omp parallel for
    for (size_t i = 0; i < BTM; i++) {
        float yv = a.ym[i];
        if (sample) {
            a.eps[i] = kla_noise_(seed, i);
            yv += sqrtf(a.yvar[i]) * a.eps[i];
        }
        a.ys[i] = yv + lsk * a.u[i];
    }
    const float *gout = a.ys;
    if (o->gate) {
        silu_forward(a.g, a.gate, BTM);
#pragma omp parallel for
        for (size_t i = 0; i < BTM; i++) a.g[i] *= a.ys[i];
        gout = a.g;
    }
    matmul_forward(y, gout, mixer_param(m, o->k_out), NULL, BT, M, C);
}

// ----------------------------------------------------------------------------
// backward

static void kla_backward_(Mixer *m, float *dx, const float *dy, const float *x, int B, int T) {
    const KlaOpts *o = m->spec->opts;
    int C = m->spec->C, M = o->M, S = o->S, Ns = o->Ns, BT = B * T, off = o->mamba ? o->R : 2 * M;
    size_t BTM = (size_t)BT * M, BTS = (size_t)BT * S, MS = (size_t)M * S;
    KlaActs a;
    kla_layout_(m->spec, B, T, m->acts, &a);
    float *dg = m->scratch, *dys = dg + BTM, *dyv = dys + BTM, *dv = dyv + BTM, *dprec = dv + BTM;
    float *du = dprec + BTM, *dz = du + BTM, *dsens = dz + BTM, *dk = dsens + (size_t)BT * Ns, *dq = dk + BTS;
    float *abar = dq + BTS, *pbar = abar + MS, *dab = pbar + MS, *dpb = dab + MS, *ks = dpb + MS;

    // out = g W_out^T, g = ys * silu(gate)
    const float *wout = mixer_param(m, o->k_out);
    matmul(dg, dy, wout, BT, M, C, 0, 0, 0);
    matmul_backward(NULL, mixer_grad(m, o->k_out), NULL, dy, o->gate ? a.g : a.ys, wout, BT, M, C);
    float *dgate = dz;  // dz is free until the conv backward
    if (o->gate) {
        // dys = dg silu(gate); d gate = silu'(gate) (dg ys), with dv as a temporary for silu(gate)
        silu_forward(dv, a.gate, BTM);
        memset(dgate, 0, BTM * sizeof(float));
#pragma omp parallel for
        for (size_t i = 0; i < BTM; i++) { dys[i] = dg[i] * dv[i]; dg[i] *= a.ys[i]; }
        silu_backward(dgate, a.gate, dg, BTM);
    } else {
        memcpy(dys, dg, BTM * sizeof(float));
    }
    // ys = ym [+ sqrt(yvar) eps] + lambda_skip u
    float lsk = o->skip ? mixer_param(m, o->k_skip)[0] : 0.0f;
    if (o->skip) {
        // per-row sums in parallel (into dprec, free until the scan), then added in row order
#pragma omp parallel for
        for (int r = 0; r < BT; r++) {
            double sr = 0.0;
            for (int c = 0; c < M; c++) sr += (double)dys[(size_t)r * M + c] * a.u[(size_t)r * M + c];
            dprec[r] = (float)sr;
        }
        double sk = 0.0;
        for (int r = 0; r < BT; r++) sk += dprec[r];
        mixer_grad(m, o->k_skip)[0] += (float)sk;
    }
#pragma omp parallel for
    for (size_t i = 0; i < BTM; i++) du[i] = lsk * dys[i];
    if (m->spec->sample)
#pragma omp parallel for
        for (size_t i = 0; i < BTM; i++) dyv[i] = a.yvar[i] > 0.0f ? dys[i] * a.eps[i] / (2.0f * sqrtf(a.yvar[i])) : 0.0f;

    // the scan
    kla_dynamics_(m, abar, pbar);
    memset(dv, 0, 2 * BTM * sizeof(float));  // dv, dprec
    memset(dk, 0, 2 * BTS * sizeof(float));  // dk, dq
    memset(dab, 0, 2 * MS * sizeof(float));  // dab, dpb
    kalman_scan_backward(dv, dprec, dk, dq, dab, dpb, dys, m->spec->sample ? dyv : NULL, a.ckpt,
                         o->mamba ? a.u : a.v, a.prec, a.k, a.q, abar, pbar, B, T, M, S, o->chunk, ks);
    kla_dynamics_backward_(m, dab, dpb);

    // prec = 1 / (softplus(lv) + vmin): d lv = -dprec prec^2 sigmoid(lv), written over dprec
#pragma omp parallel for
    for (size_t i = 0; i < BTM; i++) dprec[i] = (float)(-(double)dprec[i] * a.prec[i] * a.prec[i] * mixer_sigmoid(a.lv[i]));
    float *dlv = dprec;
    memset(dsens, 0, (size_t)BT * Ns * sizeof(float));
    if (o->mamba) {
        // lv = r W_ve^T + b_ve with r the first R sensor columns; v = u
        float *r = dyv, *dr = dg;  // (BT,R) each, free now
        for (int i = 0; i < BT; i++) memcpy(r + (size_t)i * o->R, a.sens + (size_t)i * Ns, (size_t)o->R * sizeof(float));
        matmul(dr, dlv, mixer_param(m, o->k_ve), BT, o->R, M, 0, 0, 0);
        matmul_backward(NULL, mixer_grad(m, o->k_ve), mixer_grad(m, o->k_veb), dlv, r, mixer_param(m, o->k_ve), BT,
                        o->R, M);
        for (int i = 0; i < BT; i++) memcpy(dsens + (size_t)i * Ns, dr + (size_t)i * o->R, (size_t)o->R * sizeof(float));
#pragma omp parallel for
        for (size_t i = 0; i < BTM; i++) du[i] += dv[i];
    } else {
        for (int i = 0; i < BT; i++) {
            memcpy(dsens + (size_t)i * Ns, dv + (size_t)i * M, (size_t)M * sizeof(float));
            memcpy(dsens + (size_t)i * Ns + M, dlv + (size_t)i * M, (size_t)M * sizeof(float));
        }
    }
    // k, q through the L2 norm (into the scan's scratch ks, free again), then into their sensor columns
    float *dkr = dk, *dqr = dq;
    if (o->qk_norm) {
        dkr = ks, dqr = ks + BTS;
        memset(ks, 0, 2 * BTS * sizeof(float));
        l2norm_backward(dkr, dk, a.k, a.kn, BT, S, KLA_NORM_EPS, L2NORM_FLOOR);
        l2norm_backward(dqr, dq, a.q, a.qn, BT, S, KLA_NORM_EPS, L2NORM_FLOOR);
    }
#pragma omp parallel for
    for (int i = 0; i < BT; i++) {
        memcpy(dsens + (size_t)i * Ns + off, dkr + (size_t)i * S, (size_t)S * sizeof(float));
        memcpy(dsens + (size_t)i * Ns + off + S, dqr + (size_t)i * S, (size_t)S * sizeof(float));
    }
    // sens = u W_s^T
    const float *ws = mixer_param(m, o->k_sens);
    matmul(du, dsens, ws, BT, M, Ns, 0, 0, 1);
    matmul_backward(NULL, mixer_grad(m, o->k_sens), NULL, dsens, a.u, ws, BT, M, Ns);
    // u = silu(zc), zc = conv(z)
    float *dzc = dv;
    memset(dzc, 0, BTM * sizeof(float));
    silu_backward(dzc, a.zc, du, BTM);
    if (!o->gate) dgate = NULL;
    float *dzz = du;
    memset(dzz, 0, BTM * sizeof(float));
    conv1d_causal_backward(dzz, mixer_grad(m, o->k_cw), mixer_grad(m, o->k_cb), dzc, a.z, mixer_param(m, o->k_cw), B,
                           T, M, o->K);
    // [z | gate] = x W_in^T
    const float *win = mixer_param(m, o->k_in);
    float *gwin = mixer_grad(m, o->k_in);
    matmul_backward(dx, gwin, NULL, dzz, x, win, BT, C, M);
    if (dgate) matmul_backward(dx, gwin + (size_t)M * C, NULL, dgate, x, win + (size_t)M * C, BT, C, M);
}

// ----------------------------------------------------------------------------
// recurrent decoding: per sequence [Kalman state (M,2,S) | conv state (M,K-1)]

static size_t kla_state_size_(const MixerSpec *s, int cap) {
    const KlaOpts *o = s->opts;
    return (size_t)o->M * 2 * o->S + (size_t)o->M * (o->K - 1);
}

// not in Table 1 (BLA's): the filter's precision lambda and information vector eta per channel and slot (what the
// KLA paper's Table 12 counts), and Table 1's short-conv row on the M conv channels
static void kla_state_terms_(const MixerSpec *s, int T, StateTerms *st) {
    const KlaOpts *o = s->opts;
    (void)T;
    // the KLA paper's own state size (Table 12: 2,048 at d 64, S 16) counts this term of one layer
    state_terms_add(st, 0, (size_t)o->M * 2 * o->S, "Kalman state (lambda, eta: KLA Table 12)",
                    "2·M·S = 2·%d·%d", o->M, o->S);
    if (o->K > 1)
        state_terms_add(st, 1, (size_t)o->M * (o->K - 1), "short conv", "D(k−1) = %d·%d", o->M, o->K - 1);
}

static void kla_state_init_(const Mixer *m, float *state, int B, int cap) {
    const KlaOpts *o = m->spec->opts;
    size_t n = kla_state_size_(m->spec, 0), ks = (size_t)o->M * 2 * o->S;
    for (int b = 0; b < B; b++) {
        kalman_state_init(state + b * n, 1, o->M, o->S);
        memset(state + b * n + ks, 0, (n - ks) * sizeof(float));
    }
}

static void kla_step_(const Mixer *m, float *state, float *y, const float *x, int B, int t, int cap) {
    const KlaOpts *o = m->spec->opts;
    int C = m->spec->C, M = o->M, S = o->S, Ns = o->Ns;
    size_t n = kla_state_size_(m->spec, 0), ks = (size_t)M * 2 * S, BM = (size_t)B * M;
    float *buf = xmalloc((9 * BM + (size_t)B * Ns + 4 * (size_t)B * S + 2 * (size_t)M * S) * sizeof(float));
    float *z = buf, *gate = z + BM, *u = gate + BM, *v = u + BM, *lv = v + BM, *prec = lv + BM, *ym = prec + BM;
    float *ys = ym + BM, *tmp = ys + BM, *sens = tmp + BM, *k = sens + (size_t)B * Ns, *q = k + (size_t)B * S;
    float *kn = q + (size_t)B * S, *qn = kn + B, *abar = qn + B, *pbar = abar + (size_t)M * S;
    const float *win = mixer_param(m, o->k_in);
    matmul_forward(z, x, win, NULL, B, C, M);
    if (o->gate) matmul_forward(gate, x, win + (size_t)M * C, NULL, B, C, M);
    for (int b = 0; b < B; b++)
        conv1d_causal_step(tmp + (size_t)b * M, state + b * n + ks, z + (size_t)b * M, mixer_param(m, o->k_cw),
                           mixer_param(m, o->k_cb), 1, M, o->K);
    silu_forward(u, tmp, BM);
    matmul_forward(sens, u, mixer_param(m, o->k_sens), NULL, B, M, Ns);
    kla_sensors_(m, sens, u, v, lv, k, q, kn, qn, prec, B);
    kla_dynamics_(m, abar, pbar);
    kalman_step(ym, NULL, state, n, o->mamba ? u : v, prec, k, q, abar, pbar, B, M, S);
    float lsk = o->skip ? mixer_param(m, o->k_skip)[0] : 0.0f;
    for (size_t i = 0; i < BM; i++) ys[i] = ym[i] + lsk * u[i];
    if (o->gate) {
        silu_forward(tmp, gate, BM);
        for (size_t i = 0; i < BM; i++) ys[i] *= tmp[i];
    }
    matmul_forward(y, ys, mixer_param(m, o->k_out), NULL, B, M, C);
    free(buf);
}

// ----------------------------------------------------------------------------
// diagnostics: the learned time scales and noise, summarised per layer

static void kla_diag_(const Mixer *m, cJSON *obj) {
    const KlaOpts *o = m->spec->opts;
    size_t MS = (size_t)o->M * o->S;
    float *abar = xmalloc(2 * MS * sizeof(float)), *pbar = abar + MS;
    kla_dynamics_(m, abar, pbar);
    const float *lam = mixer_param(m, o->k_lam), *dt = mixer_param(m, o->k_dt);
    double s[5] = {0, 0, 0, 1e300, -1e300};
    for (size_t i = 0; i < MS; i++) {
        s[0] += exp(lam[i]);
        s[1] += mixer_softplus(dt[i]) + KLA_DT_EPS;
        s[2] += pbar[i];
        if (abar[i] < s[3]) s[3] = abar[i];
        if (abar[i] > s[4]) s[4] = abar[i];
    }
    double v[6] = {s[0] / MS, s[1] / MS, s[2] / MS, s[3], s[4], o->skip ? mixer_param(m, o->k_skip)[0] : 0.0};
    const char *names[6] = {"a_abs_mean", "dt_mean", "pbar_mean", "abar_min", "abar_max", "lambda_skip"};
    for (int i = 0; i < 6; i++) cJSON_AddItemToObject(obj, names[i], cJSON_CreateDoubleArray(&v[i], 1));
    free(abar);
}

// ----------------------------------------------------------------------------
// the Kalman attention matrix and the posterior variance of a batch row, from the saved activations

static int kla_attn_heads_(const MixerSpec *s) { return ((const KlaOpts *)s->opts)->M; }

// channel h's Kalman attention matrix (App. E.4-E.5): y_mean = P v exactly (kalman_attention_matrix), the
// scan's part of the block (before the skip and the gate)
static void kla_attn_map_(const Mixer *m, int b, int h, float *P) {
    const KlaOpts *o = m->spec->opts;
    int T = m->T, M = o->M, S = o->S;
    KlaActs a;
    kla_layout_(m->spec, m->B, T, m->acts, &a);
    float *abar = xmalloc(2 * (size_t)M * S * sizeof(float)), *pbar = abar + (size_t)M * S;
    kla_dynamics_(m, abar, pbar);
    size_t r = (size_t)b * T;
    kalman_attention_matrix(P, a.prec + r * M, a.k + r * S, a.q + r * S, abar, pbar, T, M, S, h);
    free(abar);
}

// the scan run again on row b for its variance (B = 1, no checkpoints)
static size_t kla_posterior_var_(const Mixer *m, int b, float *var) {
    const KlaOpts *o = m->spec->opts;
    int T = m->T, M = o->M, S = o->S;
    if (!var) return (size_t)M;
    KlaActs a;
    kla_layout_(m->spec, m->B, T, m->acts, &a);
    float *abar = xmalloc(2 * (size_t)M * S * sizeof(float)), *pbar = abar + (size_t)M * S;
    float *y = xmalloc((size_t)T * M * sizeof(float));
    kla_dynamics_(m, abar, pbar);
    size_t r = (size_t)b * T;
    kalman_scan_forward(y, var, NULL, (o->mamba ? a.u : a.v) + r * M, a.prec + r * M, a.k + r * S, a.q + r * S, abar,
                        pbar, 1, T, M, S, o->chunk);
    free(y);
    free(abar);
    return (size_t)M;
}

const MixerOps MIXER_KLA = {
    .name = "kla",
    .doc = "Kalman Linear Attention: a fused Mamba-style block around an information-form Kalman filter scan",
    .samples_posterior = 1,
    .owns_mlp = 1,
    .schema = &KLA_SCHEMA_,
    .opts_size = sizeof(KlaOpts),
    .check = kla_check_,
    .params = kla_params_,
    .init = kla_init_,
    .act_size = kla_act_size_,
    .scratch_size = kla_scratch_size_,
    .forward = kla_forward_,
    .backward = kla_backward_,
    .state_size = kla_state_size_,
    .state_terms = kla_state_terms_,
    .state_init = kla_state_init_,
    .step = kla_step_,
    .diag = kla_diag_,
    .attn_heads = kla_attn_heads_,
    .attn_map = kla_attn_map_,
    .posterior_var = kla_posterior_var_,
};
