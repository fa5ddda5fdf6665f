/*
 * The `mamba2` mixer: Mamba2's SSD layer (FLA's Mamba2 torch_forward, fla/layers/mamba2.py) as a
 * fused block without a separate MLP (owns_mlp, like FLA's Mamba2Block: x += mamba2(norm(x))). With
 * Di = expand · C inner channels, H = Di / P heads of P = head_dim channels, G = n_groups groups of
 * N = d_state state channels, CD = Di + 2 G N:
 *
 *   [z | xBC | dt_raw] = x W_in^T                (Di, CD, H)
 *   xBC = silu(conv_K(xBC) + b)                  causal depthwise, K = 4
 *   [x | B | C] = xBC                            (Di, G N, G N); head h reads group h / (H / G)
 *   dt = softplus(dt_raw + dt_bias),  A = -exp(A_log)                                        (per head)
 *   per head:  S_t = exp(dt_t A) S_{t-1} + dt_t B_t x_t^T   (N x P),   y_t = S_t^T C_t + D x_t
 *   out = (groupRMSNorm(y * silu(z)) * w) W_out^T          (groups of Di / G channels, eps norm_eps)
 *
 * The recurrence is the chunked engine nn/linrec.h with q = C, k = B (copied per head), v = dt x, the
 * log-decay g = dt A per token and head (LINREC_TOKEN) and scale 1; the gated norm is nn/groupnorm.h
 * (GROUPNORM_GATE_BEFORE: Mamba2's RMSNormGated with norm_before_gate=False). docs/mixers.md ("mamba2").
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixers/mamba2.h"
#include "mixers/mixer.h"
#include "mixers/mixer_kit.h"
#include "nn/activation.h"
#include "nn/conv.h"
#include "nn/groupnorm.h"
#include "nn/linrec.h"
#include "nn/matmul.h"

#define KEY_(...) MIXER_KEY(Mamba2Opts, __VA_ARGS__)

static const CfgKey MAMBA2_KEYS_[] = {
    KEY_("d_state", CFG_INT, d_state, "128", 1, 4096, NULL,
         "State size N per head: the length of B and C (FLA state_size; 128 by default, 16-64 in small models)."),
    KEY_("expand", CFG_FLOAT, expand, "2", 0.01, 64, NULL,
         "Inner channels d_inner = floor(expand · d_model); must be a multiple of head_dim."),
    KEY_("head_dim", CFG_INT, head_dim, "64", 1, 4096, NULL,
         "Channels P per head; heads H = d_inner / head_dim (the state per head is d_state x head_dim)."),
    KEY_("n_groups", CFG_INT, n_groups, "1", 1, 4096, NULL,
         "Groups of B and C, each shared by H / n_groups consecutive heads (must divide the heads); also the "
         "groups of the gated RMSNorm (d_inner / n_groups channels each)."),
    KEY_("conv", CFG_INT, conv, "4", 1, 64, NULL, "Taps K of the causal depthwise convolution on [x | B | C]."),
    KEY_("conv_bias", CFG_BOOL, conv_bias, "true", 0, 0, NULL, "Give the convolution a bias (FLA use_conv_bias)."),
    KEY_("chunk", CFG_INT, chunk, "64", 1, 1 << 20, NULL,
         "Tokens per chunk of the chunkwise-parallel scan (nn/linrec.h): memory and speed, not results."),
    KEY_("A_init_lo", CFG_FLOAT, a_lo, "1", 1e-6, 1e6, NULL, "A = -exp(A_log) starts with -A drawn from U(A_init_lo, A_init_hi)."),
    KEY_("A_init_hi", CFG_FLOAT, a_hi, "16", 1e-6, 1e6, NULL, "Upper end of the A init range (FLA A_init_range = (1, 16))."),
    KEY_("dt_min", CFG_FLOAT, dt_min, "0.001", 1e-9, 1e3, NULL,
         "dt = softplus(dt_raw + dt_bias) starts log-uniform in [dt_min, dt_max] (dt_raw ~ 0): dt_bias = softplus^-1(dt)."),
    KEY_("dt_max", CFG_FLOAT, dt_max, "0.1", 1e-9, 1e3, NULL, "Upper end of the dt init range."),
    KEY_("dt_init_floor", CFG_FLOAT, dt_floor, "1e-4", 0, 1e3, NULL, "Initial dt values below this are raised to it."),
    KEY_("norm_eps", CFG_FLOAT, norm_eps, "1e-5", 0, 1, NULL, "eps of the gated RMSNorm (FLA norm_eps)."),
    KEY_("init_std", CFG_FLOAT, init_std, "0.02", 0, 10, NULL,
         "Std of the normal init of in_proj, the conv weight and (without rescale_prenorm_residual) out_proj."),
    KEY_("rescale_prenorm_residual", CFG_BOOL, rescale, "true", 0, 0, NULL,
         "FLA's Mamba2 init of out_proj: kaiming_uniform(a=sqrt 5), i.e. U(±1/sqrt(d_inner)), divided by "
         "sqrt(n_layers); false: N(0, init_std) like the other projections."),
};

static const CfgSection MAMBA2_SCHEMA_ = {"mamba2", "Options of the mamba2 mixer.", MAMBA2_KEYS_,
                                          (int)(sizeof MAMBA2_KEYS_ / sizeof MAMBA2_KEYS_[0])};

// ----------------------------------------------------------------------------
// options and parameters

static int mamba2_check_(MixerSpec *s, const char *path, Err *e) {
    Mamba2Opts *o = s->opts;
    int C = s->C;
    o->Di = (int)floor(o->expand * C + 1e-9);  // FLA: int(expand * hidden_size)
    if (o->Di < 1) return err_set(e, "%s.expand: %g x %d gives no inner channels", path, o->expand, C);
    o->P = o->head_dim;
    if (o->Di % o->P)
        return err_set(e, "%s.head_dim: %d does not divide d_inner = expand x d_model = %d (set head_dim or expand)",
                       path, o->P, o->Di);
    o->H = o->Di / o->P;
    o->G = o->n_groups;
    if (o->H % o->G)
        return err_set(e, "%s.n_groups: %d does not divide the %d heads (d_inner %d / head_dim %d)", path, o->G, o->H,
                       o->Di, o->P);
    o->N = o->d_state;
    o->K = o->conv;
    o->CD = o->Di + 2 * o->G * o->N;
    if (o->a_lo > o->a_hi) return err_set(e, "%s.A_init_lo: %g is above A_init_hi %g", path, o->a_lo, o->a_hi);
    if (o->dt_min > o->dt_max) return err_set(e, "%s.dt_min: %g is above dt_max %g", path, o->dt_min, o->dt_max);
    int k = 0;
    o->k_in = k++;
    o->k_cw = k++;
    o->k_cb = o->conv_bias ? k++ : -1;
    o->k_dt = k++;
    o->k_A = k++;
    o->k_D = k++;
    o->k_nw = k++;
    o->k_out = k++;
    return 0;
}

static int mamba2_params_(const MixerSpec *s, ParamTable *pt, const char *prefix, int n_layers, Err *e) {
    const Mamba2Opts *o = s->opts;
    int C = s->C, Di = o->Di, H = o->H;
    float std = (float)o->init_std;
    // FLA's _init_weights: every Linear and the Conv1d N(0, initializer_range), biases 0; with
    // rescale_prenorm_residual out_proj is re-drawn kaiming_uniform(a = sqrt 5) = U(±1/sqrt(fan_in)) and divided
    // by sqrt(num_residuals_per_layer (1) x n_layers)
    float ob = (float)(1.0 / sqrt((double)Di) / sqrt((double)(n_layers > 0 ? n_layers : 1)));
    MIXER_ADD("in_proj", 2, ((int[]){Di + o->CD + H, C}), init_normal(std), 1);  // rows [z | xBC | dt]
    MIXER_ADD("conv_w", 2, ((int[]){o->CD, o->K}), init_normal(std), 1);
    if (o->conv_bias) MIXER_ADD("conv_b", 1, ((int[]){o->CD}), init_zeros(), 0);
    // drawn as dt and as -A, turned into softplus^-1(max(dt, floor)) and log(-A) by mamba2_init_
    MIXER_ADD("dt_bias", 1, ((int[]){H}), ((ParamInit){INIT_LOGUNIFORM, (float)o->dt_min, (float)o->dt_max}), 0);
    MIXER_ADD("A_log", 1, ((int[]){H}), init_uniform((float)o->a_lo, (float)o->a_hi), 0);
    MIXER_ADD("D", 1, ((int[]){H}), init_ones(), 0);
    MIXER_ADD("norm_w", 1, ((int[]){Di}), init_ones(), 0);
    MIXER_ADD("out_proj", 2, ((int[]){C, Di}), o->rescale ? init_uniform(-ob, ob) : init_normal(std), 1);
    return 0;
}

static void mamba2_init_(const Mixer *m) {
    const Mamba2Opts *o = m->spec->opts;
    float *dt = mixer_param(m, o->k_dt), *alog = mixer_param(m, o->k_A);
    mixer_dt_bias_init(dt, (size_t)o->H, o->dt_floor);  // softplus^-1 = dt + log(-expm1(-dt)), FLA's
    for (int h = 0; h < o->H; h++) alog[h] = (float)log(alog[h]);
}

// ----------------------------------------------------------------------------
// the pieces forward, backward and step share

// dt (R,H) = softplus(dtr + dt_bias)
static void mamba2_dt_(const Mamba2Opts *o, const float *dt_bias, const float *dtr, float *dt, size_t R) {
    int H = o->H;
#pragma omp parallel for
    for (size_t i = 0; i < R * H; i++) dt[i] = (float)mixer_softplus((double)dtr[i] + dt_bias[i % H]);
}

// the engine's inputs for R rows from u = silu(conv) (R,CD) and dt (R,H): q = C and k = B of each head's group
// (R,H,N), v = dt x (R,H,P), g = dt A (R,H)
static void mamba2_engine_in_(const Mamba2Opts *o, const float *A_log, const float *u, const float *dt, float *q,
                              float *k, float *v, float *g, size_t R) {
    int H = o->H, P = o->P, N = o->N, Di = o->Di, CD = o->CD, hpg = o->H / o->G;
#pragma omp parallel for
    for (size_t r = 0; r < R; r++) {
        const float *xs = u + r * CD, *Bm = xs + Di, *Cm = Bm + (size_t)o->G * N;
        for (int h = 0; h < H; h++) {
            size_t rh = r * H + h;
            int grp = h / hpg;
            memcpy(q + rh * N, Cm + (size_t)grp * N, (size_t)N * sizeof(float));
            memcpy(k + rh * N, Bm + (size_t)grp * N, (size_t)N * sizeof(float));
            float d = dt[rh];
            for (int p = 0; p < P; p++) v[r * Di + (size_t)h * P + p] = d * xs[(size_t)h * P + p];
            g[rh] = (float)(-(double)d * exp(A_log[h]));
        }
    }
}

// y (R,Di) += D_h x, x the first Di channels of u (R,CD)
static void mamba2_skip_(const Mamba2Opts *o, const float *Dp, const float *u, float *y, size_t R) {
    int Di = o->Di, P = o->P, CD = o->CD;
#pragma omp parallel for
    for (size_t r = 0; r < R; r++)
        for (int c = 0; c < Di; c++) y[r * Di + c] += Dp[c / P] * u[r * CD + c];
}

// ----------------------------------------------------------------------------
// saved activations (Mamba2Acts, mixers/mamba2.h) and scratch (BT = B*T)

static size_t mamba2_layout_(const MixerSpec *s, int B, int T, float *base, Mamba2Acts *a) {
    const Mamba2Opts *o = s->opts;
    size_t BT = (size_t)B * T, n = 0;
    LinrecDims d = mamba2_dims(o, B, T);
    a->z = mixer_take(base, &n, BT * o->Di, 1);
    a->xbc = mixer_take(base, &n, BT * o->CD, 1);
    a->xc = mixer_take(base, &n, BT * o->CD, 1);
    a->dtr = mixer_take(base, &n, BT * o->H, 1);
    a->y = mixer_take(base, &n, BT * o->Di, 1);
    a->rstd = mixer_take(base, &n, BT * o->G, 1);
    a->yn = mixer_take(base, &n, BT * o->Di, 1);
    a->ckpt = mixer_take(base, &n, linrec_ckpt_size(&d), 1);
    return n;
}

static size_t mamba2_act_size_(const MixerSpec *s, int B, int T) {
    Mamba2Acts a;
    return mamba2_layout_(s, B, T, NULL, &a);
}

typedef struct Mamba2Scratch {
    float *u, *dt, *q, *k, *v, *g;  // forward and backward: the engine's inputs (recomputed in backward)
    float *dyn, *dyy, *dz, *dq, *dk, *dv, *dg, *du, *dxc, *dxbc, *ddtr;  // backward only
} Mamba2Scratch;

static size_t mamba2_scratch_layout_(const MixerSpec *s, int B, int T, int backward, float *base, Mamba2Scratch *w) {
    const Mamba2Opts *o = s->opts;
    size_t BT = (size_t)B * T, n = 0, BTHN = BT * o->H * o->N;
    w->u = mixer_take(base, &n, BT * o->CD, 1);
    w->dt = mixer_take(base, &n, BT * o->H, 1);
    w->q = mixer_take(base, &n, BTHN, 1);
    w->k = mixer_take(base, &n, BTHN, 1);
    w->v = mixer_take(base, &n, BT * o->Di, 1);
    w->g = mixer_take(base, &n, BT * o->H, 1);
    w->dyn = mixer_take(base, &n, BT * o->Di, backward);
    w->dyy = mixer_take(base, &n, BT * o->Di, backward);
    w->dz = mixer_take(base, &n, BT * o->Di, backward);
    w->dq = mixer_take(base, &n, BTHN, backward);
    w->dk = mixer_take(base, &n, BTHN, backward);
    w->dv = mixer_take(base, &n, BT * o->Di, backward);
    w->dg = mixer_take(base, &n, BT * o->H, backward);
    w->du = mixer_take(base, &n, BT * o->CD, backward);
    w->dxc = mixer_take(base, &n, BT * o->CD, backward);
    w->dxbc = mixer_take(base, &n, BT * o->CD, backward);
    w->ddtr = mixer_take(base, &n, BT * o->H, backward);
    return n;
}

static size_t mamba2_scratch_size_(const MixerSpec *s, int B, int T) {
    Mamba2Scratch w;
    return mamba2_scratch_layout_(s, B, T, 1, NULL, &w);
}

// ----------------------------------------------------------------------------
// forward

// from the saved conv output and dt_raw: u = silu(conv), dt and the engine's inputs q, k, v, g into w (the
// forward, and the backward's recomputation)
static void mamba2_front_(const Mixer *m, const Mamba2Acts *a, const Mamba2Scratch *w, int B, int T) {
    const Mamba2Opts *o = m->spec->opts;
    size_t BT = (size_t)B * T;
    mamba2_dt_(o, mixer_param(m, o->k_dt), a->dtr, w->dt, BT);
    silu_forward(w->u, a->xc, BT * o->CD);
    mamba2_engine_in_(o, mixer_param(m, o->k_A), w->u, w->dt, w->q, w->k, w->v, w->g, BT);
}

static void mamba2_forward_(Mixer *m, float *out, const float *x, int B, int T) {
    const Mamba2Opts *o = m->spec->opts;
    int C = m->spec->C, Di = o->Di, CD = o->CD, H = o->H, BT = B * T;
    Mamba2Acts a;
    Mamba2Scratch w;
    mamba2_layout_(m->spec, B, T, m->acts, &a);
    mamba2_scratch_layout_(m->spec, B, T, 0, m->scratch, &w);
    const float *win = mixer_param(m, o->k_in);
    matmul_forward(a.z, x, win, NULL, BT, C, Di);
    matmul_forward(a.xbc, x, win + (size_t)Di * C, NULL, BT, C, CD);
    matmul_forward(a.dtr, x, win + (size_t)(Di + CD) * C, NULL, BT, C, H);
    conv1d_causal_forward(a.xc, a.xbc, mixer_param(m, o->k_cw), o->conv_bias ? mixer_param(m, o->k_cb) : NULL, B, T,
                          CD, o->K);
    mamba2_front_(m, &a, &w, B, T);
    LinrecDims d = mamba2_dims(o, B, T);
    linrec_forward(a.y, NULL, a.ckpt, NULL, w.q, w.k, w.v, w.g, NULL, &d);
    mamba2_skip_(o, mixer_param(m, o->k_D), w.u, a.y, BT);
    GroupNormOpts gn = mamba2_norm_opts(o);
    groupnorm_forward(a.yn, NULL, a.rstd, a.y, a.z, mixer_param(m, o->k_nw), BT, o->G, Di / o->G, &gn);
    matmul_forward(out, a.yn, mixer_param(m, o->k_out), NULL, BT, Di, C);
}

// ----------------------------------------------------------------------------
// backward

static void mamba2_backward_(Mixer *m, float *dx, const float *dy, const float *x, int B, int T) {
    const Mamba2Opts *o = m->spec->opts;
    int C = m->spec->C, Di = o->Di, CD = o->CD, H = o->H, P = o->P, N = o->N, G = o->G, BT = B * T;
    int hpg = H / G;
    size_t BTHN = (size_t)BT * H * N;
    Mamba2Acts a;
    Mamba2Scratch w;
    mamba2_layout_(m->spec, B, T, m->acts, &a);
    mamba2_scratch_layout_(m->spec, B, T, 1, m->scratch, &w);

    // out = yn W_out^T
    const float *wout = mixer_param(m, o->k_out);
    matmul(w.dyn, dy, wout, BT, Di, C, 0, 0, 0);
    matmul_backward(NULL, mixer_grad(m, o->k_out), NULL, dy, a.yn, wout, BT, Di, C);
    // yn = groupRMSNorm(y silu(z)) w
    memset(w.dyy, 0, (size_t)BT * Di * sizeof(float));
    memset(w.dz, 0, (size_t)BT * Di * sizeof(float));
    GroupNormOpts gn = mamba2_norm_opts(o);
    groupnorm_backward(w.dyy, w.dz, mixer_grad(m, o->k_nw), w.dyn, a.y, a.z, mixer_param(m, o->k_nw), NULL, a.rstd, BT,
                       G, Di / G, &gn);

    // the engine's inputs again
    mamba2_front_(m, &a, &w, B, T);
    const float *Dp = mixer_param(m, o->k_D), *alog = mixer_param(m, o->k_A), *dtb = mixer_param(m, o->k_dt);
    float *gD = mixer_grad(m, o->k_D), *gA = mixer_grad(m, o->k_A), *gdtb = mixer_grad(m, o->k_dt);

    // y = o + D_h x: dD_h = sum dy x over the head's channels (per head, rows in order), dx += D_h dy
#pragma omp parallel for
    for (int h = 0; h < H; h++) {
        double s = 0.0;
        for (int r = 0; r < BT; r++)
            for (int p = 0; p < P; p++) s += (double)w.dyy[(size_t)r * Di + h * P + p] * w.u[(size_t)r * CD + h * P + p];
        gD[h] += (float)s;
    }
    memset(w.du, 0, (size_t)BT * CD * sizeof(float));
#pragma omp parallel for
    for (int r = 0; r < BT; r++)
        for (int c = 0; c < Di; c++) w.du[(size_t)r * CD + c] = Dp[c / P] * w.dyy[(size_t)r * Di + c];

    // the scan
    memset(w.dq, 0, BTHN * sizeof(float));
    memset(w.dk, 0, BTHN * sizeof(float));
    memset(w.dv, 0, (size_t)BT * Di * sizeof(float));
    memset(w.dg, 0, (size_t)BT * H * sizeof(float));
    LinrecDims d = mamba2_dims(o, B, T);
    linrec_backward(w.dq, w.dk, w.dv, w.dg, NULL, w.dyy, NULL, a.ckpt, w.q, w.k, w.v, w.g, NULL, &d);

    // v = dt x, g = dt A, dt = softplus(dt_raw + dt_bias); k, q = the group's B, C (sum over its heads)
#pragma omp parallel for
    for (int r = 0; r < BT; r++) {
        float *dur = w.du + (size_t)r * CD, *dB = dur + Di, *dC = dB + (size_t)G * N;
        const float *xs = w.u + (size_t)r * CD;
        for (int h = 0; h < H; h++) {
            size_t rh = (size_t)r * H + h;
            const float *dvr = w.dv + (size_t)r * Di + (size_t)h * P;
            double A = -exp(alog[h]), s = 0.0, dtv = w.dt[rh];
            for (int p = 0; p < P; p++) {
                s += (double)dvr[p] * xs[h * P + p];
                dur[h * P + p] += (float)(dtv * dvr[p]);
            }
            double ddt = s + w.dg[rh] * A;
            w.ddtr[rh] = (float)(ddt * mixer_sigmoid((double)a.dtr[rh] + dtb[h]));
            float *dBg = dB + (size_t)(h / hpg) * N, *dCg = dC + (size_t)(h / hpg) * N;
            for (int n = 0; n < N; n++) {
                dBg[n] += w.dk[rh * N + n];
                dCg[n] += w.dq[rh * N + n];
            }
        }
    }
    // dA_log_h = A_h sum_t dg dt; d dt_bias_h = sum_t d dt_raw (per head, rows in order)
#pragma omp parallel for
    for (int h = 0; h < H; h++) {
        double sa = 0.0, sb = 0.0;
        for (int r = 0; r < BT; r++) {
            sa += (double)w.dg[(size_t)r * H + h] * w.dt[(size_t)r * H + h];
            sb += w.ddtr[(size_t)r * H + h];
        }
        gA[h] += (float)(sa * -exp(alog[h]));
        gdtb[h] += (float)sb;
    }

    // u = silu(xc), xc = conv(xbc)
    memset(w.dxc, 0, (size_t)BT * CD * sizeof(float));
    silu_backward(w.dxc, a.xc, w.du, (size_t)BT * CD);
    memset(w.dxbc, 0, (size_t)BT * CD * sizeof(float));
    conv1d_causal_backward(w.dxbc, mixer_grad(m, o->k_cw), o->conv_bias ? mixer_grad(m, o->k_cb) : NULL, w.dxc, a.xbc,
                           mixer_param(m, o->k_cw), B, T, CD, o->K);
    // [z | xBC | dt_raw] = x W_in^T
    const float *win = mixer_param(m, o->k_in);
    float *gwin = mixer_grad(m, o->k_in);
    size_t oz = 0, ox = (size_t)Di * C, od = (size_t)(Di + CD) * C;
    matmul_backward(dx, gwin + oz, NULL, w.dz, x, win + oz, BT, C, Di);
    matmul_backward(dx, gwin + ox, NULL, w.dxbc, x, win + ox, BT, C, CD);
    matmul_backward(dx, gwin + od, NULL, w.ddtr, x, win + od, BT, C, H);
}

// ----------------------------------------------------------------------------
// recurrent decoding: per sequence [the engine's state (H, N, P) | conv state (CD, K-1)]

static size_t mamba2_engine_state_(const Mamba2Opts *o) {
    LinrecDims d = mamba2_dims(o, 1, 1);
    return (size_t)o->H * linrec_state_size(&d);
}

static size_t mamba2_state_size_(const MixerSpec *s, int cap) {
    const Mamba2Opts *o = s->opts;
    return mamba2_engine_state_(o) + (size_t)o->CD * (o->K - 1);
}

// Table 1's GLA/GDN row H·dk·dv with dk = d_state N and dv = head_dim P (Table 1 has no Mamba2 row; its state has
// the same shape), and the short-conv row on the conv's CD = d_inner + 2 G N channels (x, B, C)
static void mamba2_state_terms_(const MixerSpec *s, int T, StateTerms *st) {
    const Mamba2Opts *o = s->opts;
    (void)T;
    state_terms_add(st, 1, mamba2_engine_state_(o), "SSM state", "H·N·P (H·dk·dv, dk = N, dv = P) = %d·%d·%d", o->H, o->N,
                    o->P);
    if (o->K > 1)
        state_terms_add(st, 1, (size_t)o->CD * (o->K - 1), "short conv x, B, C",
                        "D(k−1) with D = d_inner + 2·G·N: (%d + 2·%d·%d)·%d", o->Di, o->G, o->N, o->K - 1);
}

static void mamba2_state_init_(const Mixer *m, float *state, int B, int cap) {
    const Mamba2Opts *o = m->spec->opts;
    size_t n = mamba2_state_size_(m->spec, 0), es = mamba2_engine_state_(o);
    LinrecDims d = mamba2_dims(o, 1, 1);
    for (int b = 0; b < B; b++) {
        linrec_state_init(state + b * n, &d);
        memset(state + b * n + es, 0, (n - es) * sizeof(float));
    }
}

static void mamba2_step_(const Mixer *m, float *state, float *out, const float *x, int B, int t, int cap) {
    const Mamba2Opts *o = m->spec->opts;
    int C = m->spec->C, Di = o->Di, CD = o->CD, H = o->H, N = o->N;
    size_t n = mamba2_state_size_(m->spec, 0), es = mamba2_engine_state_(o), Bs = (size_t)B;
    size_t total = Bs * (4 * (size_t)Di + 3 * (size_t)CD + 4 * (size_t)H + 2 * (size_t)H * N + (size_t)o->G);
    float *buf = xmalloc(total * sizeof(float));
    float *z = buf, *y = z + Bs * Di, *yn = y + Bs * Di, *v = yn + Bs * Di, *xbc = v + Bs * Di, *xc = xbc + Bs * CD;
    float *u = xc + Bs * CD, *dtr = u + Bs * CD, *dt = dtr + Bs * H, *g = dt + Bs * H, *q = g + Bs * H;
    float *k = q + Bs * H * N, *rstd = k + Bs * H * N;
    const float *win = mixer_param(m, o->k_in);
    matmul_forward(z, x, win, NULL, B, C, Di);
    matmul_forward(xbc, x, win + (size_t)Di * C, NULL, B, C, CD);
    matmul_forward(dtr, x, win + (size_t)(Di + CD) * C, NULL, B, C, H);
    for (int b = 0; b < B; b++)
        conv1d_causal_step(xc + (size_t)b * CD, state + b * n + es, xbc + (size_t)b * CD, mixer_param(m, o->k_cw),
                           o->conv_bias ? mixer_param(m, o->k_cb) : NULL, 1, CD, o->K);
    silu_forward(u, xc, Bs * CD);
    mamba2_dt_(o, mixer_param(m, o->k_dt), dtr, dt, Bs);
    mamba2_engine_in_(o, mixer_param(m, o->k_A), u, dt, q, k, v, g, Bs);
    LinrecDims d = mamba2_dims(o, 1, 1);
    for (int b = 0; b < B; b++)
        linrec_step(y + (size_t)b * Di, NULL, state + b * n, q + (size_t)b * H * N, k + (size_t)b * H * N,
                    v + (size_t)b * Di, g + (size_t)b * H, NULL, &d);
    mamba2_skip_(o, mixer_param(m, o->k_D), u, y, Bs);
    GroupNormOpts gn = mamba2_norm_opts(o);
    groupnorm_forward(yn, NULL, rstd, y, z, mixer_param(m, o->k_nw), B, o->G, Di / o->G, &gn);
    matmul_forward(out, yn, mixer_param(m, o->k_out), NULL, B, Di, C);
    free(buf);
}

// ----------------------------------------------------------------------------
// diagnostics: the per-head decay rates and step sizes at dt_raw = 0, summarised per layer

static void mamba2_diag_(const Mixer *m, cJSON *obj) {
    const Mamba2Opts *o = m->spec->opts;
    const float *alog = mixer_param(m, o->k_A), *dtb = mixer_param(m, o->k_dt), *Dp = mixer_param(m, o->k_D);
    double sa = 0, amin = 1e300, amax = -1e300, sd = 0, dmin = 1e300, dmax = -1e300, sD = 0;
    for (int h = 0; h < o->H; h++) {
        double A = -exp(alog[h]), dt = mixer_softplus(dtb[h]);
        sa += A, sd += dt, sD += Dp[h];
        amin = fmin(amin, A), amax = fmax(amax, A), dmin = fmin(dmin, dt), dmax = fmax(dmax, dt);
    }
    double v[7] = {sa / o->H, amin, amax, sd / o->H, dmin, dmax, sD / o->H};
    const char *names[7] = {"A_mean", "A_min", "A_max", "dt_bias_sp_mean", "dt_bias_sp_min", "dt_bias_sp_max", "D_mean"};
    for (int i = 0; i < 7; i++) cJSON_AddItemToObject(obj, names[i], cJSON_CreateDoubleArray(&v[i], 1));
}

const MixerOps MIXER_MAMBA2 = {
    .name = "mamba2",
    .doc = "Mamba2 (SSD): in_proj to z/x/B/C/dt, short conv, per-head scalar-decay state space scan, gated RMSNorm",
    .owns_mlp = 1,
    .schema = &MAMBA2_SCHEMA_,
    .opts_size = sizeof(Mamba2Opts),
    .check = mamba2_check_,
    .params = mamba2_params_,
    .init = mamba2_init_,
    .act_size = mamba2_act_size_,
    .scratch_size = mamba2_scratch_size_,
    .forward = mamba2_forward_,
    .backward = mamba2_backward_,
    .state_size = mamba2_state_size_,
    .state_terms = mamba2_state_terms_,
    .state_init = mamba2_state_init_,
    .step = mamba2_step_,
    .diag = mamba2_diag_,
};
