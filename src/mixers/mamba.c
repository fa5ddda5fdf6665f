/*
 * The `mamba` mixer: Mamba-1's selective state space block (S6), as state-spaces/mamba's `Mamba` module
 * (mamba_ssm/modules/mamba_simple.py, its slow path and selective_scan_ref) and flash-linear-attention's
 * `Mamba` layer (fla/layers/mamba.py, slow_forward) compute it, in a fused block without a separate MLP
 * (owns_mlp, like FLA's MambaBlock: x += mamba(norm(x))). With Di = expand · C inner channels, N = d_state
 * state channels per inner channel, R = dt_rank, K = conv:
 *
 *   [xi | z] = x W_in^T                               (Di, Di)
 *   u = silu(conv_K(xi) + b)                           causal depthwise
 *   [dt_low | B | C] = u W_x^T                         (R, N, N): B and C shared by every channel
 *   dt = softplus(dt_low W_dt^T + dt_bias)             (Di)
 *   A = -exp(A_log)                                    (Di, N)
 *   per channel d:  h_t = exp(dt_t A_d) (.) h_{t-1} + dt_t B_t u_t        h in R^N
 *                   y_t = C_t . h_t + D_d u_t
 *   out = (y (.) silu(z)) W_out^T
 *
 * The recurrence runs on the chunked engine nn/linrec.h with one head per inner channel (H = Di), Dk = N,
 * Dv = 1: the log-decay g = dt A per key channel and token (LINREC_CHANNEL), k = dt B, v = u, q = C, scale 1.
 * The engine reads (B,T,H,Dk) arrays and broadcasts nothing, so q (C copied to every channel), k and g are
 * materialised at BT·Di·N floats each (as mamba_ssm's selective_scan_ref materialises deltaA and deltaB_u);
 * v is u itself. With Dv = 1 the chunked form gains no matrix products: inside a chunk of L tokens the
 * per-channel scores cost about L/2 · N exps per token and channel where the sequential scan costs N, while a
 * chunk's fixed work and its checkpoint (N floats per channel) are shared by L tokens. Hence the small
 * default chunk (docs/mixers.md, "mamba": the measured trade-off); the results do not depend on it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixers/mixer.h"
#include "mixers/mixer_kit.h"
#include "nn/activation.h"
#include "nn/conv.h"
#include "nn/linrec.h"
#include "nn/matmul.h"

typedef struct MambaOpts {
    // from the config
    int d_state, dt_rank, conv, conv_bias, chunk, rescale;
    char dt_init[CFG_STR_MAX];
    double expand, dt_min, dt_max, dt_floor, dt_scale, init_std;
    // derived by check
    int Di, N, R, K, NBC;  // inner channels, state size, dt rank, conv taps, x_proj rows R + 2N
    int k_in, k_cw, k_cb, k_x, k_dtw, k_dt, k_A, k_D, k_out;  // tensor indices (k_cb -1 without conv_bias)
} MambaOpts;

#define KEY_(...) MIXER_KEY(MambaOpts, __VA_ARGS__)

static const CfgKey MAMBA_KEYS_[] = {
    KEY_("d_state", CFG_INT, d_state, "16", 1, 4096, NULL,
         "State size N per inner channel: the length of B and C (mamba_ssm d_state)."),
    KEY_("expand", CFG_FLOAT, expand, "2", 0.01, 64, NULL, "Inner channels d_inner = floor(expand · d_model)."),
    KEY_("dt_rank", CFG_INT, dt_rank, "0", 0, 65536, NULL,
         "Rank R of the step-size projection (x_proj emits R values, dt_proj maps them to d_inner); "
         "0 = mamba_ssm's \"auto\", ceil(d_model / 16)."),
    KEY_("conv", CFG_INT, conv, "4", 1, 64, NULL, "Taps K of the causal depthwise convolution on x (mamba_ssm d_conv)."),
    KEY_("conv_bias", CFG_BOOL, conv_bias, "true", 0, 0, NULL, "Give the convolution a bias (mamba_ssm conv_bias)."),
    KEY_("chunk", CFG_INT, chunk, "8", 1, 1 << 20, NULL,
         "Tokens per chunk of the chunkwise-parallel scan (nn/linrec.h): memory and speed, not results."),
    KEY_("dt_min", CFG_FLOAT, dt_min, "0.001", 1e-9, 1e3, NULL,
         "dt = softplus(dt_proj(.) + dt_bias) starts log-uniform in [dt_min, dt_max]: dt_bias = softplus^-1(dt)."),
    KEY_("dt_max", CFG_FLOAT, dt_max, "0.1", 1e-9, 1e3, NULL, "Upper end of the dt init range."),
    KEY_("dt_init_floor", CFG_FLOAT, dt_floor, "1e-4", 0, 1e3, NULL, "Initial dt values below this are raised to it."),
    KEY_("dt_init", CFG_ENUM, dt_init, "\"random\"", 0, 0, "random|constant",
         "Init of dt_proj's weight: random = U(±dt_scale / sqrt(dt_rank)), constant = dt_scale / sqrt(dt_rank)."),
    KEY_("dt_scale", CFG_FLOAT, dt_scale, "1", 0, 1e3, NULL, "Scale of dt_proj's weight init (mamba_ssm dt_scale)."),
    KEY_("init_std", CFG_FLOAT, init_std, "0.02", 0, 10, NULL,
         "Std of the normal init of in_proj, x_proj and (without rescale_prenorm_residual) out_proj."),
    KEY_("rescale_prenorm_residual", CFG_BOOL, rescale, "false", 0, 0, NULL,
         "Init out_proj as kaiming_uniform(a=sqrt 5), i.e. U(±1/sqrt(d_inner)), divided by sqrt(n_layers) "
         "(mamba_ssm's MixerModel; FLA's MambaConfig default is false: N(0, init_std))."),
};

static const CfgSection MAMBA_SCHEMA_ = {"mamba", "Options of the mamba mixer.", MAMBA_KEYS_,
                                         (int)(sizeof MAMBA_KEYS_ / sizeof MAMBA_KEYS_[0])};

// ----------------------------------------------------------------------------
// options and parameters

static int mamba_check_(MixerSpec *s, const char *path, Err *e) {
    MambaOpts *o = s->opts;
    int C = s->C;
    o->Di = (int)floor(o->expand * C + 1e-9);  // mamba_ssm: int(expand * d_model)
    if (o->Di < 1) return err_set(e, "%s.expand: %g x %d gives no inner channels", path, o->expand, C);
    o->N = o->d_state;
    o->R = o->dt_rank ? o->dt_rank : (C + 15) / 16;  // "auto": ceil(d_model / 16)
    o->K = o->conv;
    o->NBC = o->R + 2 * o->N;
    if (o->dt_min > o->dt_max) return err_set(e, "%s.dt_min: %g is above dt_max %g", path, o->dt_min, o->dt_max);
    int k = 0;
    o->k_in = k++;
    o->k_cw = k++;
    o->k_cb = o->conv_bias ? k++ : -1;
    o->k_x = k++;
    o->k_dtw = k++;
    o->k_dt = k++;
    o->k_A = k++;
    o->k_D = k++;
    o->k_out = k++;
    return 0;
}

static int mamba_params_(const MixerSpec *s, ParamTable *pt, const char *prefix, int n_layers, Err *e) {
    const MambaOpts *o = s->opts;
    int C = s->C, Di = o->Di, N = o->N, R = o->R, K = o->K;
    float std = (float)o->init_std;
    // the Conv1d keeps PyTorch's default init (neither reference re-draws it): weight and bias U(±1/sqrt(fan_in)),
    // fan_in = K for a depthwise conv
    float cb = (float)(1.0 / sqrt((double)K));
    float dts = (float)(o->dt_scale / sqrt((double)R));
    float ob = (float)(1.0 / sqrt((double)Di) / sqrt((double)(n_layers > 0 ? n_layers : 1)));
    MIXER_ADD("in_proj", 2, ((int[]){2 * Di, C}), init_normal(std), 1);  // rows [x | z]
    MIXER_ADD("conv_w", 2, ((int[]){Di, K}), init_uniform(-cb, cb), 1);
    if (o->conv_bias) MIXER_ADD("conv_b", 1, ((int[]){Di}), init_uniform(-cb, cb), 0);
    MIXER_ADD("x_proj", 2, ((int[]){o->NBC, Di}), init_normal(std), 1);  // rows [dt_low | B | C]
    MIXER_ADD("dt_proj", 2, ((int[]){Di, R}), strcmp(o->dt_init, "constant") ? init_uniform(-dts, dts) : init_const(dts),
              1);
    // drawn as dt, turned into softplus^-1(max(dt, floor)) by mamba_init_; A_log = log(1..N) there too
    MIXER_ADD("dt_bias", 1, ((int[]){Di}), ((ParamInit){INIT_LOGUNIFORM, (float)o->dt_min, (float)o->dt_max}), 0);
    MIXER_ADD("A_log", 2, ((int[]){Di, N}), ((ParamInit){INIT_CUSTOM, 0, 0}), 0);
    MIXER_ADD("D", 1, ((int[]){Di}), init_ones(), 0);
    MIXER_ADD("out_proj", 2, ((int[]){C, Di}), o->rescale ? init_uniform(-ob, ob) : init_normal(std), 1);
    return 0;
}

// S4D-real: A_d = -(1, 2, ..., N) for every channel d
static void mamba_init_(const Mixer *m) {
    const MambaOpts *o = m->spec->opts;
    mixer_dt_bias_init(mixer_param(m, o->k_dt), (size_t)o->Di, o->dt_floor);
    float *alog = mixer_param(m, o->k_A);
    for (int d = 0; d < o->Di; d++)
        for (int n = 0; n < o->N; n++) alog[(size_t)d * o->N + n] = (float)log((double)(n + 1));
}

// the recurrence's dims: one head per inner channel, q = C and k = dt B (N channels), v = u (1 channel)
static LinrecDims mamba_dims_(const MambaOpts *o, int B, int T) {
    LinrecDims d = {B, T, o->Di, o->N, 1, LINREC_CHANNEL, 0, o->chunk, 1.0f};
    return d;
}

// ----------------------------------------------------------------------------
// the pieces forward, backward and step share

// A (Di,N) = -exp(A_log)
static void mamba_A_(const MambaOpts *o, const float *A_log, float *A) {
    for (size_t i = 0; i < (size_t)o->Di * o->N; i++) A[i] = (float)-exp((double)A_log[i]);
}

// the engine's inputs for R rows from dt (R,Di), bc (R,2N) = [B | C] and A (Di,N): q = C, k = dt B,
// g = dt A, each (R,Di,N)
static void mamba_engine_in_(const MambaOpts *o, const float *A, const float *bc, const float *dt, float *q, float *k,
                             float *g, size_t R) {
    int Di = o->Di, N = o->N;
#pragma omp parallel for
    for (size_t r = 0; r < R; r++) {
        const float *Bm = bc + r * 2 * N, *Cm = Bm + N;
        for (int d = 0; d < Di; d++) {
            size_t rd = (r * Di + d) * N;
            float t = dt[r * Di + d];
            const float *Ad = A + (size_t)d * N;
            for (int n = 0; n < N; n++) {
                q[rd + n] = Cm[n];
                k[rd + n] = t * Bm[n];
                g[rd + n] = t * Ad[n];
            }
        }
    }
}

// dt (n) = softplus(dtr)
static void mamba_dt_(const float *dtr, float *dt, size_t n) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) dt[i] = (float)mixer_softplus((double)dtr[i]);
}

// the step sizes of R rows: dlow (R,R_) and bc (R,2N) from u (R,Di) by x_proj, then dtr (R,Di) = dlow W_dt^T +
// dt_bias (softplus's input) and dt = softplus(dtr)
static void mamba_select_(const Mixer *m, const float *u, float *dlow, float *bc, float *dtr, float *dt, int R) {
    const MambaOpts *o = m->spec->opts;
    int Di = o->Di;
    const float *wx = mixer_param(m, o->k_x);
    matmul_forward(dlow, u, wx, NULL, R, Di, o->R);
    matmul_forward(bc, u, wx + (size_t)o->R * Di, NULL, R, Di, 2 * o->N);
    matmul_forward(dtr, dlow, mixer_param(m, o->k_dtw), mixer_param(m, o->k_dt), R, o->R, Di);
    mamba_dt_(dtr, dt, (size_t)R * Di);
}

// y (R,Di) += D u; then yz = y silu(z)
static void mamba_out_gate_(const MambaOpts *o, const float *Dp, const float *u, const float *z, float *y, float *yz,
                            size_t R) {
    int Di = o->Di;
#pragma omp parallel for
    for (size_t r = 0; r < R; r++)
        for (int d = 0; d < Di; d++) {
            size_t i = r * Di + d;
            y[i] += Dp[d] * u[i];
            yz[i] = y[i] * (float)(z[i] * mixer_sigmoid((double)z[i]));
        }
}

// ----------------------------------------------------------------------------
// saved activations and scratch (BT = B*T)

typedef struct MambaActs {
    float *xi;    // (BT,Di) the conv input
    float *z;     // (BT,Di) the gate
    float *xc;    // (BT,Di) the conv output, before silu
    float *dlow;  // (BT,R) x_proj's dt part (dt_proj's input)
    float *bc;    // (BT,2N) x_proj's [B | C]
    float *dtr;   // (BT,Di) softplus's input
    float *y;     // (BT,Di) scan output + D u (the gate's input)
    float *yz;    // (BT,Di) y silu(z) (out_proj's input)
    float *ckpt;  // the engine's chunk-start states
} MambaActs;

static size_t mamba_layout_(const MixerSpec *s, int B, int T, float *base, MambaActs *a) {
    const MambaOpts *o = s->opts;
    size_t BT = (size_t)B * T, BTD = BT * o->Di, n = 0;
    LinrecDims d = mamba_dims_(o, B, T);
    a->xi = mixer_take(base, &n, BTD, 1);
    a->z = mixer_take(base, &n, BTD, 1);
    a->xc = mixer_take(base, &n, BTD, 1);
    a->dlow = mixer_take(base, &n, BT * o->R, 1);
    a->bc = mixer_take(base, &n, BT * 2 * o->N, 1);
    a->dtr = mixer_take(base, &n, BTD, 1);
    a->y = mixer_take(base, &n, BTD, 1);
    a->yz = mixer_take(base, &n, BTD, 1);
    a->ckpt = mixer_take(base, &n, linrec_ckpt_size(&d), 1);
    return n;
}

static size_t mamba_act_size_(const MixerSpec *s, int B, int T) {
    MambaActs a;
    return mamba_layout_(s, B, T, NULL, &a);
}

typedef struct MambaScratch {
    float *A, *u, *dt, *q, *k, *g;  // forward and backward: A and the engine's inputs (recomputed in backward)
    float *dyz, *dy, *dz, *dq, *dk, *dg, *du, *dbc, *ddtr, *ddlow, *dxc, *dxi;  // backward only
} MambaScratch;

static size_t mamba_scratch_layout_(const MixerSpec *s, int B, int T, int backward, float *base, MambaScratch *w) {
    const MambaOpts *o = s->opts;
    size_t BT = (size_t)B * T, BTD = BT * o->Di, BTDN = BTD * o->N, n = 0;
    w->A = mixer_take(base, &n, (size_t)o->Di * o->N, 1);
    w->u = mixer_take(base, &n, BTD, 1);
    w->dt = mixer_take(base, &n, BTD, 1);
    w->q = mixer_take(base, &n, BTDN, 1);
    w->k = mixer_take(base, &n, BTDN, 1);
    w->g = mixer_take(base, &n, BTDN, 1);
    w->dyz = mixer_take(base, &n, BTD, backward);
    w->dy = mixer_take(base, &n, BTD, backward);
    w->dz = mixer_take(base, &n, BTD, backward);
    w->dq = mixer_take(base, &n, BTDN, backward);
    w->dk = mixer_take(base, &n, BTDN, backward);
    w->dg = mixer_take(base, &n, BTDN, backward);
    w->du = mixer_take(base, &n, BTD, backward);
    w->dbc = mixer_take(base, &n, BT * 2 * o->N, backward);
    w->ddtr = mixer_take(base, &n, BTD, backward);
    w->ddlow = mixer_take(base, &n, BT * o->R, backward);
    w->dxc = mixer_take(base, &n, BTD, backward);
    w->dxi = mixer_take(base, &n, BTD, backward);
    return n;
}

static size_t mamba_scratch_size_(const MixerSpec *s, int B, int T) {
    MambaScratch w;
    return mamba_scratch_layout_(s, B, T, 1, NULL, &w);
}

// ----------------------------------------------------------------------------
// forward

// the backward's recomputation from the saved conv output and selection: u = silu(conv), dt, A and the engine's
// inputs q, k, g into w
static void mamba_front_(const Mixer *m, const MambaActs *a, const MambaScratch *w, int B, int T) {
    const MambaOpts *o = m->spec->opts;
    size_t BT = (size_t)B * T;
    silu_forward(w->u, a->xc, BT * o->Di);
    mamba_dt_(a->dtr, w->dt, BT * o->Di);
    mamba_A_(o, mixer_param(m, o->k_A), w->A);
    mamba_engine_in_(o, w->A, a->bc, w->dt, w->q, w->k, w->g, BT);
}

static void mamba_forward_(Mixer *m, float *out, const float *x, int B, int T) {
    const MambaOpts *o = m->spec->opts;
    int C = m->spec->C, Di = o->Di, BT = B * T;
    MambaActs a;
    MambaScratch w;
    mamba_layout_(m->spec, B, T, m->acts, &a);
    mamba_scratch_layout_(m->spec, B, T, 0, m->scratch, &w);
    const float *win = mixer_param(m, o->k_in);
    matmul_forward(a.xi, x, win, NULL, BT, C, Di);
    matmul_forward(a.z, x, win + (size_t)Di * C, NULL, BT, C, Di);
    conv1d_causal_forward(a.xc, a.xi, mixer_param(m, o->k_cw), o->conv_bias ? mixer_param(m, o->k_cb) : NULL, B, T,
                          Di, o->K);
    silu_forward(w.u, a.xc, (size_t)BT * Di);
    mamba_select_(m, w.u, a.dlow, a.bc, a.dtr, w.dt, BT);
    mamba_A_(o, mixer_param(m, o->k_A), w.A);
    mamba_engine_in_(o, w.A, a.bc, w.dt, w.q, w.k, w.g, (size_t)BT);
    LinrecDims d = mamba_dims_(o, B, T);
    linrec_forward(a.y, NULL, a.ckpt, NULL, w.q, w.k, w.u, w.g, NULL, &d);
    mamba_out_gate_(o, mixer_param(m, o->k_D), w.u, a.z, a.y, a.yz, (size_t)BT);
    matmul_forward(out, a.yz, mixer_param(m, o->k_out), NULL, BT, Di, C);
}

// ----------------------------------------------------------------------------
// backward

static void mamba_backward_(Mixer *m, float *dx, const float *dout, const float *x, int B, int T) {
    const MambaOpts *o = m->spec->opts;
    int C = m->spec->C, Di = o->Di, N = o->N, BT = B * T;
    size_t BTD = (size_t)BT * Di, BTDN = BTD * N;
    MambaActs a;
    MambaScratch w;
    mamba_layout_(m->spec, B, T, m->acts, &a);
    mamba_scratch_layout_(m->spec, B, T, 1, m->scratch, &w);

    // out = yz W_out^T
    const float *wout = mixer_param(m, o->k_out);
    matmul(w.dyz, dout, wout, BT, Di, C, 0, 0, 0);
    matmul_backward(NULL, mixer_grad(m, o->k_out), NULL, dout, a.yz, wout, BT, Di, C);
    // yz = y silu(z): dy = dyz silu(z), dz = dyz y silu'(z) with silu'(z) = s (1 + z (1 - s)), s = sigmoid(z)
#pragma omp parallel for
    for (size_t i = 0; i < BTD; i++) {
        double zi = a.z[i], s = mixer_sigmoid(zi);
        w.dy[i] = (float)(w.dyz[i] * zi * s);
        w.dz[i] = (float)(w.dyz[i] * a.y[i] * s * (1.0 + zi * (1.0 - s)));
    }

    // the engine's inputs again
    mamba_front_(m, &a, &w, B, T);
    const float *Dp = mixer_param(m, o->k_D);
    float *gD = mixer_grad(m, o->k_D), *gA = mixer_grad(m, o->k_A);

    // y = o + D u: dD_d = sum_t dy u (per channel, rows in order); du = D dy
#pragma omp parallel for
    for (int d = 0; d < Di; d++) {
        double s = 0.0;
        for (int r = 0; r < BT; r++) s += (double)w.dy[(size_t)r * Di + d] * w.u[(size_t)r * Di + d];
        gD[d] += (float)s;
    }
#pragma omp parallel for
    for (size_t i = 0; i < BTD; i++) w.du[i] = Dp[i % Di] * w.dy[i];

    // the scan: v = u, so dv lands in du
    memset(w.dq, 0, BTDN * sizeof(float));
    memset(w.dk, 0, BTDN * sizeof(float));
    memset(w.dg, 0, BTDN * sizeof(float));
    LinrecDims d = mamba_dims_(o, B, T);
    linrec_backward(w.dq, w.dk, w.du, w.dg, NULL, w.dy, NULL, a.ckpt, w.q, w.k, w.u, w.g, NULL, &d);

    // q = C, k = dt B, g = dt A: dC = sum_d dq, dB = sum_d dt dk, d dt = sum_n (dk B + dg A), and through the
    // softplus d dtr = d dt sigmoid(dtr)
#pragma omp parallel for
    for (int r = 0; r < BT; r++) {
        const float *Bm = a.bc + (size_t)r * 2 * N;
        float *dB = w.dbc + (size_t)r * 2 * N, *dC = dB + N;
        memset(dB, 0, 2 * (size_t)N * sizeof(float));
        for (int dd = 0; dd < Di; dd++) {
            size_t rd = (size_t)r * Di + dd, off = rd * N;
            const float *dqr = w.dq + off, *dkr = w.dk + off, *dgr = w.dg + off, *Ad = w.A + (size_t)dd * N;
            double t = w.dt[rd], s = 0.0;
            for (int n = 0; n < N; n++) {
                dC[n] += dqr[n];
                dB[n] += (float)(t * dkr[n]);
                s += (double)dkr[n] * Bm[n] + (double)dgr[n] * Ad[n];
            }
            w.ddtr[rd] = (float)(s * mixer_sigmoid((double)a.dtr[rd]));
        }
    }
    // dA_log = A sum_t dg dt (per channel and state, rows in order)
#pragma omp parallel for
    for (int dd = 0; dd < Di; dd++)
        for (int n = 0; n < N; n++) {
            double s = 0.0;
            for (int r = 0; r < BT; r++) {
                size_t rd = (size_t)r * Di + dd;
                s += (double)w.dg[rd * N + n] * w.dt[rd];
            }
            gA[(size_t)dd * N + n] += (float)(s * w.A[(size_t)dd * N + n]);
        }

    // dtr = dlow W_dt^T + dt_bias; [dlow | B | C] = u W_x^T
    memset(w.ddlow, 0, (size_t)BT * o->R * sizeof(float));
    const float *wdt = mixer_param(m, o->k_dtw), *wx = mixer_param(m, o->k_x);
    float *gx = mixer_grad(m, o->k_x);
    matmul_backward(w.ddlow, mixer_grad(m, o->k_dtw), mixer_grad(m, o->k_dt), w.ddtr, a.dlow, wdt, BT, o->R, Di);
    matmul_backward(w.du, gx, NULL, w.ddlow, w.u, wx, BT, Di, o->R);
    matmul_backward(w.du, gx + (size_t)o->R * Di, NULL, w.dbc, w.u, wx + (size_t)o->R * Di, BT, Di, 2 * N);

    // u = silu(xc), xc = conv(xi)
    memset(w.dxc, 0, BTD * sizeof(float));
    silu_backward(w.dxc, a.xc, w.du, BTD);
    memset(w.dxi, 0, BTD * sizeof(float));
    conv1d_causal_backward(w.dxi, mixer_grad(m, o->k_cw), o->conv_bias ? mixer_grad(m, o->k_cb) : NULL, w.dxc, a.xi,
                           mixer_param(m, o->k_cw), B, T, Di, o->K);
    // [xi | z] = x W_in^T
    const float *win = mixer_param(m, o->k_in);
    float *gwin = mixer_grad(m, o->k_in);
    matmul_backward(dx, gwin, NULL, w.dxi, x, win, BT, C, Di);
    matmul_backward(dx, gwin + (size_t)Di * C, NULL, w.dz, x, win + (size_t)Di * C, BT, C, Di);
}

// ----------------------------------------------------------------------------
// recurrent decoding: per sequence [the engine's state (Di, N) | conv state (Di, K-1)]

static size_t mamba_engine_state_(const MambaOpts *o) { return (size_t)o->Di * o->N; }

static size_t mamba_state_size_(const MixerSpec *s, int cap) {
    const MambaOpts *o = s->opts;
    (void)cap;
    return mamba_engine_state_(o) + (size_t)o->Di * (o->K - 1);
}

// Table 1 has no Mamba row; its state is the GLA row's H·dk·dv with H = d_inner, dk = N, dv = 1, and the
// short-conv row on the conv's d_inner channels
static void mamba_state_terms_(const MixerSpec *s, int T, StateTerms *st) {
    const MambaOpts *o = s->opts;
    (void)T;
    state_terms_add(st, 1, mamba_engine_state_(o), "SSM state", "d_inner·N (H·dk·dv, H = d_inner, dk = N, dv = 1) = %d·%d",
                    o->Di, o->N);
    if (o->K > 1)
        state_terms_add(st, 1, (size_t)o->Di * (o->K - 1), "short conv x", "D(k−1) with D = d_inner: %d·%d", o->Di,
                        o->K - 1);
}

static void mamba_state_init_(const Mixer *m, float *state, int B, int cap) {
    (void)cap;
    memset(state, 0, (size_t)B * mamba_state_size_(m->spec, 0) * sizeof(float));  // h = 0, zero conv history
}

static void mamba_step_(const Mixer *m, float *state, float *out, const float *x, int B, int t, int cap) {
    (void)t;
    (void)cap;
    const MambaOpts *o = m->spec->opts;
    int C = m->spec->C, Di = o->Di, N = o->N;
    size_t n = mamba_state_size_(m->spec, 0), es = mamba_engine_state_(o), Bs = (size_t)B;
    size_t BD = Bs * Di, BDN = BD * N;
    size_t total = 8 * BD + Bs * (o->R + 2 * (size_t)N) + 3 * BDN + (size_t)Di * N;
    float *buf = xmalloc(total * sizeof(float));
    float *xi = buf, *z = xi + BD, *xc = z + BD, *u = xc + BD, *dtr = u + BD, *dt = dtr + BD, *y = dt + BD;
    float *yz = y + BD, *dlow = yz + BD, *bc = dlow + Bs * o->R, *q = bc + Bs * 2 * N, *k = q + BDN, *g = k + BDN;
    float *A = g + BDN;
    const float *win = mixer_param(m, o->k_in);
    matmul_forward(xi, x, win, NULL, B, C, Di);
    matmul_forward(z, x, win + (size_t)Di * C, NULL, B, C, Di);
    for (int b = 0; b < B; b++)
        conv1d_causal_step(xc + (size_t)b * Di, state + b * n + es, xi + (size_t)b * Di, mixer_param(m, o->k_cw),
                           o->conv_bias ? mixer_param(m, o->k_cb) : NULL, 1, Di, o->K);
    silu_forward(u, xc, BD);
    mamba_select_(m, u, dlow, bc, dtr, dt, B);
    mamba_A_(o, mixer_param(m, o->k_A), A);
    mamba_engine_in_(o, A, bc, dt, q, k, g, Bs);
    LinrecDims d = mamba_dims_(o, 1, 1);
    for (int b = 0; b < B; b++)
        linrec_step(y + (size_t)b * Di, NULL, state + b * n, q + (size_t)b * Di * N, k + (size_t)b * Di * N,
                    u + (size_t)b * Di, g + (size_t)b * Di * N, NULL, &d);
    mamba_out_gate_(o, mixer_param(m, o->k_D), u, z, y, yz, Bs);
    matmul_forward(out, yz, mixer_param(m, o->k_out), NULL, B, Di, C);
    free(buf);
}

// ----------------------------------------------------------------------------
// diagnostics: the step sizes at dt_proj(.) = 0 and the skip, summarised per layer

static void mamba_diag_(const Mixer *m, cJSON *obj) {
    const MambaOpts *o = m->spec->opts;
    const float *dtb = mixer_param(m, o->k_dt), *Dp = mixer_param(m, o->k_D);
    double sd = 0, dmin = 1e300, dmax = -1e300, sD = 0;
    for (int d = 0; d < o->Di; d++) {
        double dt = mixer_softplus(dtb[d]);
        sd += dt, sD += Dp[d];
        dmin = fmin(dmin, dt), dmax = fmax(dmax, dt);
    }
    double v[4] = {sd / o->Di, dmin, dmax, sD / o->Di};
    const char *names[4] = {"dt_bias_sp_mean", "dt_bias_sp_min", "dt_bias_sp_max", "D_mean"};
    for (int i = 0; i < 4; i++) cJSON_AddItemToObject(obj, names[i], cJSON_CreateDoubleArray(&v[i], 1));
}

const MixerOps MIXER_MAMBA = {
    .name = "mamba",
    .doc = "Mamba-1 (S6): in_proj to x/z, short conv, x_proj to dt/B/C, per-channel selective scan, D skip, silu(z) gate",
    .owns_mlp = 1,
    .schema = &MAMBA_SCHEMA_,
    .opts_size = sizeof(MambaOpts),
    .check = mamba_check_,
    .params = mamba_params_,
    .init = mamba_init_,
    .act_size = mamba_act_size_,
    .scratch_size = mamba_scratch_size_,
    .forward = mamba_forward_,
    .backward = mamba_backward_,
    .state_size = mamba_state_size_,
    .state_terms = mamba_state_terms_,
    .state_init = mamba_state_init_,
    .step = mamba_step_,
    .diag = mamba_diag_,
};
