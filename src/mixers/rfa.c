/*
 * The `rfa` mixer: Robust Filter Attention (RFA paper, Algorithm 1, App. D.3) and SC-RFA, with the App.
 * E.2 ablations as options. docs/mixers.md ("rfa") has the formulas, tensors and options; in short, per
 * head and lag d = i - j:
 *
 *   q~, k~, v~ = e^{-i w t} (q, k, v)       complex channels stored as [Re (D) | Im (D)] per head
 *   mu = softplus(mu') + eps (0 exactly on the zero-decay heads), nu = D (softplus(nu') + eps) (nu_form
 *   "ratio") or D softplus(nu') + 2 + eps ("authors"), kappa = (nu + D) / D
 *   E_d = e^{-mu d},  V_d = s~2 (1 - E_d^2) + eta2 E_d^2 + gamma2
 *   l_ij = -tau log V_d - tau kappa log(1 + |q_i - E_d k_j|^2 / (nu V_d)),   A = softmax(l) * E
 *   out_i = e^{+i w i} sum_j A_ij v~_j,   y = out W_o^T
 *
 * Everything that depends only on the lag and the head (E, V, the additive bias a = -tau log V, the
 * precision c = 1/(nu V)) is a per-head table of length T built here from the SDE parameters; the
 * attention kernel (nn/attention.c, AttnFilter) forms the logits from the tables, q~.k~ and the norms,
 * and returns the gradients of the tables, which this file chains back to mu, s~2, eta2, gamma2, nu, tau.
 * Rotations are RoPE in the "half" layout with head size 2D and per-head, per-channel frequencies
 * -w (conjugate pairs: channel 2m turns with +w'_m, 2m+1 with -w'_m); the counter-rotation of the output
 * is the transpose of that rotation, i.e. rotary_backward.
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
#include "nn/rotary.h"

#define RFA_MAX_HEADS 64
#define RFA_MAX_HALF 128  // D / 2: complex channels per head up to 256

enum { RFA_STUDENT, RFA_GAUSS };

typedef struct RfaOpts {
    // from the config
    int heads, head_dim, bias, spectral_coupling, zero_decay_heads, learn_omega, mult_gate, rotate_values,
        rotations, unitary;
    double damping, rope_base, sigma_tilde2_init, eta2_init, gamma2_init, nu_over_d_init, tau_init, eps;
    char kernel[CFG_STR_MAX], prior[CFG_STR_MAX], rotation_scale[CFG_STR_MAX], nu_form[CFG_STR_MAX];
    // derived by check
    int H, D, HD2;       // heads, complex channels per head, 2 H D real channels
    int gauss, flat, rot_qk, rot_v, n_zero, nu_authors;
    double unit_scale;   // unitary logits tau Re(q~'k~) / unit_scale: sqrt(D) or sqrt(2D)
    double nu_shift;     // nu / D = softplus(nu') + nu_shift: eps (ratio) or (2 + eps) / D (authors)
    int k_wqkv, k_bqkv, k_wo, k_bo, k_mu, k_sig, k_eta, k_gam, k_nu, k_tau, k_om;  // tensor indices (-1 absent)
    float omega0[RFA_MAX_HEADS * RFA_MAX_HALF];  // (H, D/2) w'_{h,m}: the fixed spectrum / learnable init
    float mu0[RFA_MAX_HEADS];                    // (H,) initial decays
} RfaOpts;

#define KEY_(...) MIXER_KEY(RfaOpts, __VA_ARGS__)

static const CfgKey RFA_KEYS_[] = {
    KEY_("heads", CFG_INT, heads, "8", 1, RFA_MAX_HEADS, NULL, "Number of heads H."),
    KEY_("head_dim", CFG_INT, head_dim, "0", 0, 2 * RFA_MAX_HALF, NULL,
         "Complex channels per head D (2D reals); 0 = C/H, so q, k, v map d -> 2d reals as in the paper."),
    KEY_("bias", CFG_BOOL, bias, "true", 0, 0, NULL, "Biases on the q/k/v and output projections."),
    KEY_("spectral_coupling", CFG_BOOL, spectral_coupling, "false", 0, 0, NULL,
         "SC-RFA (M2): one frequency bank split monotonically across heads instead of the full spectrum in each."),
    KEY_("damping", CFG_FLOAT, damping, "0.05", 0, 1e6, NULL,
         "b in mu_h = b · max(omega_h), the initial decay of each head (paper: 0.05; Table 2 sweeps it)."),
    KEY_("zero_decay_heads", CFG_INT, zero_decay_heads, "2", 0, RFA_MAX_HEADS, NULL,
         "The first this-many heads have mu = 0 exactly (lossless integrators; paper: 2 of 8)."),
    KEY_("rope_base", CFG_FLOAT, rope_base, "10000", 1, 1e12, NULL, "Base of the frequency spectrum."),
    KEY_("learn_omega", CFG_BOOL, learn_omega, "false", 0, 0, NULL,
         "Learn the frequencies (tensor `omega`, H x D/2) instead of keeping the RoPE spectrum fixed."),
    KEY_("kernel", CFG_ENUM, kernel, "\"student\"", 0, 0, "student|gaussian",
         "Robust Student-t weighting, or the exponential kernel exp(-d^2/nu) of ablation M2.1."),
    KEY_("prior", CFG_ENUM, prior, "\"dle\"", 0, 0, "dle|flat",
         "Precision prior from the SDE (dle), or constant over the lag (flat, ablation M2.2: V = 1)."),
    KEY_("mult_gate", CFG_BOOL, mult_gate, "true", 0, 0, NULL,
         "The precision P = 1/V multiplies the residual; false = constant P (ablation M2.3)."),
    KEY_("rotate_values", CFG_BOOL, rotate_values, "true", 0, 0, NULL,
         "Rotate values into the shared frame and back (false = ablation M2.4)."),
    KEY_("rotations", CFG_BOOL, rotations, "true", 0, 0, NULL, "Any rotation of q, k, v (false = ablation M2.5)."),
    KEY_("unitary", CFG_BOOL, unitary, "false", 0, 0, NULL,
         "Pure-rotation limit (M2.6): mu = 0, no noise, logits tau · Re(q~'k~) / sqrt(D) (see rotation_scale)."),
    KEY_("rotation_scale", CFG_ENUM, rotation_scale, "\"sqrt_d\"", 0, 0, "sqrt_d|sqrt_2d",
         "With unitary: divide Re(q~'k~) by sqrt(D), D complex channels (the authors' code), or by sqrt(2D), "
         "the real width (seqtrain before this option)."),
    KEY_("nu_form", CFG_ENUM, nu_form, "\"ratio\"", 0, 0, "ratio|authors",
         "Student-t dof: nu = D (softplus(nu') + eps) (ratio), or nu = D softplus(nu') + 2 + eps as in the "
         "authors' code (nu > 2: finite variance); nu_over_d_init sets nu / D in both."),
    KEY_("sigma_tilde2_init", CFG_FLOAT, sigma_tilde2_init, "0.1", 1e-6, 1e6, NULL,
         "Initial steady-state process variance s~^2 (the same in every head)."),
    KEY_("eta2_init", CFG_FLOAT, eta2_init, "1", 1e-6, 1e6, NULL,
         "Initial key measurement noise eta^2 (> s~^2: the integrative regime, App. D.2)."),
    KEY_("gamma2_init", CFG_FLOAT, gamma2_init, "1", 1e-6, 1e6, NULL, "Initial query measurement noise gamma^2."),
    KEY_("nu_over_d_init", CFG_FLOAT, nu_over_d_init, "4", 1e-3, 1e6, NULL, "Initial Student-t dof per channel nu/D."),
    KEY_("tau_init", CFG_FLOAT, tau_init, "1", 1e-3, 1e3, NULL, "Initial inverse softmax temperature tau."),
    KEY_("eps", CFG_FLOAT, eps, "1e-6", 0, 1, NULL,
         "Added to softplus outputs that must stay positive (mu of the decaying heads, s~^2, eta^2, gamma^2, "
         "nu, tau; Algorithm 1); the *_init values must exceed it."),
};

static const CfgSection RFA_SCHEMA_ = {"rfa", "Options of the rfa mixer.", RFA_KEYS_,
                                       (int)(sizeof RFA_KEYS_ / sizeof RFA_KEYS_[0])};

// ----------------------------------------------------------------------------
// options

static int rfa_check_(MixerSpec *s, const char *path, Err *e) {
    RfaOpts *o = s->opts;
    int C = s->C;
    o->H = o->heads;
    if (mixer_heads_resolve(path, C, o->H, o->head_dim, 2 * RFA_MAX_HALF, &o->D, e) != 0) return -1;
    if (o->D % 2)
        return err_set(e, "%s.head_dim: %d complex channels per head must be even (frequencies come in conjugate "
                       "pairs)", path, o->D);
    if (o->zero_decay_heads > o->H)
        return err_set(e, "%s.zero_decay_heads: %d is more than the %d heads", path, o->zero_decay_heads, o->H);
    if (o->learn_omega && !o->rotations)
        return err_set(e, "%s.learn_omega: frequencies are unused with \"rotations\": false; drop one of them", path);
    o->HD2 = 2 * o->H * o->D;
    o->gauss = !strcmp(o->kernel, "gaussian");
    o->flat = !strcmp(o->prior, "flat");
    o->rot_qk = o->rotations;
    o->rot_v = o->rotations && o->rotate_values;
    o->n_zero = o->unitary ? o->H : o->zero_decay_heads;
    o->unit_scale = sqrt(strcmp(o->rotation_scale, "sqrt_2d") ? (double)o->D : 2.0 * o->D);
    o->nu_authors = !strcmp(o->nu_form, "authors");
    o->nu_shift = o->nu_authors ? (2.0 + o->eps) / o->D : o->eps;
    // each init value v is stored as softplus^-1(v - floor): it must exceed the floor its map adds
    const char *init_key[4] = {"sigma_tilde2_init", "eta2_init", "gamma2_init", "tau_init"};
    double init_val[4] = {o->sigma_tilde2_init, o->eta2_init, o->gamma2_init, o->tau_init};
    for (int i = 0; i < 4; i++)
        if (init_val[i] <= o->eps)
            return err_set(e, "%s.%s: %g must exceed eps (%g), which softplus(.) + eps cannot go below", path,
                           init_key[i], init_val[i], o->eps);
    if (o->nu_over_d_init <= o->nu_shift)
        return err_set(e, "%s.nu_over_d_init: %g must exceed %g, the least nu / D that nu_form \"%s\" reaches "
                       "with D = %d", path, o->nu_over_d_init, o->nu_shift, o->nu_form, o->D);
    int k = 0;
    o->k_wqkv = k++;
    o->k_bqkv = o->bias ? k++ : -1;
    o->k_wo = k++;
    o->k_bo = o->bias ? k++ : -1;
    o->k_mu = k++;
    o->k_sig = k++;
    o->k_eta = k++;
    o->k_gam = k++;
    o->k_nu = k++;
    o->k_tau = k++;
    o->k_om = o->learn_omega ? k++ : -1;
    // frequencies: the RoPE spectrum in every head, or (SC) one bank of M = H D/2 split across heads,
    // slowest first; mu_h = b · max of head h's SC band in both cases ("the same spread of decay rates")
    int half = o->D / 2;
    rotary_sc_bank(o->spectral_coupling ? o->omega0 : NULL, o->mu0, o->H, half, o->rope_base, o->damping, o->n_zero);
    if (!o->spectral_coupling)
        for (int h = 0; h < o->H; h++)
            for (int m = 0; m < half; m++) o->omega0[h * half + m] = (float)pow(o->rope_base, -2.0 * m / o->D);
    return 0;
}

// ----------------------------------------------------------------------------
// parameters

static int rfa_params_(const MixerSpec *s, ParamTable *pt, const char *prefix, int n_layers, Err *e) {
    const RfaOpts *o = s->opts;
    (void)n_layers;  // the complex init scales with the fan-in and fan-out, not the depth (App. D.2)
    int C = s->C, HD = o->H * o->D, HD2 = o->HD2;
    float eps = (float)o->eps;
    MIXER_ADD("wqkv", 2, ((int[]){3 * HD2, C}), init_complex(0, (float)sqrt(1.0 / (C + HD)), o->D), 1);
    if (o->bias) MIXER_ADD("bqkv", 1, ((int[]){3 * HD2}), init_zeros(), 0);
    MIXER_ADD("wo", 2, ((int[]){C, HD2}), init_complex(1, (float)(sqrt(1.0 / (C + HD)) / sqrt(2.0)), o->D), 1);
    if (o->bias) MIXER_ADD("bo", 1, ((int[]){C}), init_zeros(), 0);
    MIXER_ADD("sde_mu", 1, ((int[]){o->H}), ((ParamInit){INIT_CUSTOM, 0, 0}), 0);
    MIXER_ADD("sde_sigma", 1, ((int[]){o->H}), init_const((float)mixer_inv_softplus(o->sigma_tilde2_init - eps)), 0);
    MIXER_ADD("sde_eta", 1, ((int[]){o->H}), init_const((float)mixer_inv_softplus(o->eta2_init - eps)), 0);
    MIXER_ADD("sde_gamma", 1, ((int[]){o->H}), init_const((float)mixer_inv_softplus(o->gamma2_init - eps)), 0);
    MIXER_ADD("sde_nu", 1, ((int[]){o->H}),
              init_const((float)mixer_inv_softplus(o->nu_over_d_init - o->nu_shift)), 0);
    MIXER_ADD("sde_tau", 1, ((int[]){o->H}), init_const((float)mixer_inv_softplus(o->tau_init - eps)), 0);
    if (o->learn_omega) MIXER_ADD("omega", 2, ((int[]){o->H, o->D / 2}), ((ParamInit){INIT_CUSTOM, 0, 0}), 0);
    return 0;
}

static void rfa_init_(const Mixer *m) {
    const RfaOpts *o = m->spec->opts;
    float *mu = mixer_param(m, o->k_mu);
    // heads with mu = 0 never read their raw value; it stays 0. mu = softplus(raw) + eps, so raw =
    // softplus^-1(mu0 - eps) (floored: damping 0 gives mu ~ eps)
    for (int h = 0; h < o->H; h++)
        mu[h] = h < o->n_zero ? 0.0f : (float)mixer_inv_softplus(fmax(o->mu0[h] - o->eps, 1e-12));
    if (o->learn_omega) memcpy(mixer_param(m, o->k_om), o->omega0, (size_t)o->H * (o->D / 2) * sizeof(float));
}

// the per-head SDE quantities from the raw parameters (double)
typedef struct RfaHead_ {
    double mu, st2, eta2, gam2, nod, tau;
} RfaHead_;

static RfaHead_ rfa_head_(const Mixer *m, int h) {
    const RfaOpts *o = m->spec->opts;
    RfaHead_ p;
    p.mu = h < o->n_zero ? 0.0 : mixer_softplus(mixer_param(m, o->k_mu)[h]) + o->eps;
    p.st2 = mixer_softplus(mixer_param(m, o->k_sig)[h]) + o->eps;
    p.eta2 = mixer_softplus(mixer_param(m, o->k_eta)[h]) + o->eps;
    p.gam2 = mixer_softplus(mixer_param(m, o->k_gam)[h]) + o->eps;
    p.nod = mixer_softplus(mixer_param(m, o->k_nu)[h]) + o->nu_shift;  // nu / D; d nod / d raw = sigmoid
    p.tau = mixer_softplus(mixer_param(m, o->k_tau)[h]) + o->eps;
    return p;
}

// ----------------------------------------------------------------------------
// saved activations (BT = B*T)

typedef struct RfaActs {
    float *qh, *kh, *vh;        // (B,H,T,2D) what the kernel saw (rotated unless an ablation says not)
    float *mh;                  // (B,H,T,2D) kernel output, in the rotated frame
    float *lse;                 // (B,H,T)
    float *o_lin;               // (B,T,2HD) input of the output projection
    float *ta, *tc, *te, *tv;   // (H,T) lag tables a, c, E and the variance V
    float *beta;                // (H,)
    float *rcos, *rsin;         // (T,H,D) the rotary table of the forward
    float *freqs;               // (H,D) per-channel rotary frequencies (-w)
} RfaActs;

// a's pointers into base (NULL: only count); returns the floats used
static size_t rfa_layout_(const RfaOpts *o, int B, int T, float *base, RfaActs *a) {
    size_t BT = (size_t)B * T, n = 0, big = BT * o->HD2, ht = (size_t)o->H * T;
    size_t rot = (size_t)T * o->H * o->D;
    int rotates = o->rot_qk;
    a->qh = mixer_take(base, &n, big, 1);
    a->kh = mixer_take(base, &n, big, 1);
    a->vh = mixer_take(base, &n, big, 1);
    a->mh = mixer_take(base, &n, big, 1);
    a->lse = mixer_take(base, &n, BT * o->H, 1);
    a->o_lin = mixer_take(base, &n, big, 1);
    a->ta = mixer_take(base, &n, ht, 1);
    a->tc = mixer_take(base, &n, ht, 1);
    a->te = mixer_take(base, &n, ht, 1);
    a->tv = mixer_take(base, &n, ht, 1);
    a->beta = mixer_take(base, &n, (size_t)o->H, 1);
    a->rcos = mixer_take(base, &n, rot, rotates);
    a->rsin = mixer_take(base, &n, rot, rotates);
    a->freqs = mixer_take(base, &n, (size_t)o->H * o->D, 1);
    return n;
}

static size_t rfa_act_size_(const MixerSpec *s, int B, int T) {
    RfaActs a;
    return rfa_layout_(s->opts, B, T, NULL, &a);
}

static size_t rfa_scratch_size_(const MixerSpec *s, int B, int T) {
    const RfaOpts *o = s->opts;
    size_t big = (size_t)B * T * o->HD2;
    return 5 * big + 3 * (size_t)o->H * T + o->H;
}

static RotaryTable rfa_table_view_(const RfaOpts *o, const RfaActs *a, int T) {
    RotaryTable tab = {ROTARY_HALF, T, o->H, 2 * o->D, 0, o->D, a->rcos, a->rsin};
    return tab;
}

// the lag tables of every head for lags 0..T-1, and beta
static void rfa_tables_(const Mixer *m, RfaActs *a, int T) {
    const RfaOpts *o = m->spec->opts;
    for (int h = 0; h < o->H; h++) {
        RfaHead_ p = rfa_head_(m, h);
        double nu = p.nod * o->D, kappa = 1.0 + p.nod;
        a->beta[h] = (float)(o->unitary ? p.tau / o->unit_scale : o->gauss ? p.tau : p.tau * kappa);
        for (int d = 0; d < T; d++) {
            size_t t = (size_t)h * T + d;
            double E = exp(-p.mu * d), E2 = E * E;
            double V = o->flat ? 1.0 : p.st2 * (1.0 - E2) + p.eta2 * E2 + p.gam2;
            a->te[t] = (float)E;
            a->tv[t] = (float)V;
            a->ta[t] = (float)(-p.tau * log(V));
            a->tc[t] = (float)(o->mult_gate ? 1.0 / (nu * V) : 1.0 / nu);
        }
    }
}

static AttnFilter rfa_filter_(const RfaOpts *o, const RfaActs *a, int T) {
    AttnFilter f = {0};
    f.kind = o->unitary ? ATTN_FILTER_DOT : o->gauss ? ATTN_FILTER_GAUSS : ATTN_FILTER_STUDENT;
    f.lag_len = T;
    f.bias = a->ta;
    f.prec = a->tc;
    f.decay = a->te;
    f.beta = a->beta;
    return f;
}

// ----------------------------------------------------------------------------
// forward

static void rfa_forward_(Mixer *m, float *y, const float *x, int B, int T) {
    const RfaOpts *o = m->spec->opts;
    int C = m->spec->C, H = o->H, D2 = 2 * o->D, HD2 = o->HD2, BT = B * T, half = o->D / 2;
    RfaActs a;
    rfa_layout_(o, B, T, m->acts, &a);
    const float *wqkv = mixer_param(m, o->k_wqkv);
    const float *bqkv = o->bias ? mixer_param(m, o->k_bqkv) : NULL;
    float *lin = m->scratch;  // (BT, 2HD) one projection at a time
    rfa_tables_(m, &a, T);
    // per-channel rotary frequencies -w: channel 2m turns with +w'_m, channel 2m+1 with -w'_m
    const float *om = o->learn_omega ? mixer_param(m, o->k_om) : o->omega0;
    for (int h = 0; h < H; h++)
        for (int c = 0; c < o->D; c++) {
            float w = om[h * half + c / 2];
            a.freqs[h * o->D + c] = c % 2 ? w : -w;
        }
    RotaryTable tab;
    if (o->rot_qk) {
        RotaryCfg rc = {ROTARY_HALF, (float)o->rope_base, a.freqs};
        rotary_table_init(&tab, &rc, 0, T, H, D2);
        memcpy(a.rcos, tab.cos, (size_t)T * H * o->D * sizeof(float));
        memcpy(a.rsin, tab.sin, (size_t)T * H * o->D * sizeof(float));
        rotary_table_free(&tab);
        tab = rfa_table_view_(o, &a, T);
    }
    float *dst[3] = {a.qh, a.kh, a.vh};
    for (int part = 0; part < 3; part++) {
        // part 0 = q, 1 = k, 2 = v: rows [part*2HD, (part+1)*2HD) of wqkv
        matmul_forward(lin, x, wqkv + (size_t)part * HD2 * C, bqkv ? bqkv + (size_t)part * HD2 : NULL, BT, C, HD2);
        int rotate = part < 2 ? o->rot_qk : o->rot_v;
        if (rotate) rotary_forward_heads_table(dst[part], lin, &tab, B);  // multiply by e^{-i w t}, permute
        else heads_split(dst[part], lin, B, T, H, D2);
    }
    AttnFilter f = rfa_filter_(o, &a, T);
    AttnOpts ko = attn_opts_default(D2);
    ko.filter = &f;
    attention_forward(a.mh, a.lse, a.qh, a.kh, a.vh, &ko, B, H, T, D2);
    // back into the query's frame: e^{+i w t} = the transpose of the forward rotation
    if (o->rot_v) rotary_backward_heads_table(a.o_lin, a.mh, &tab, B);
    else heads_merge(a.o_lin, a.mh, B, T, H, D2);
    matmul_forward(y, a.o_lin, mixer_param(m, o->k_wo), o->bias ? mixer_param(m, o->k_bo) : NULL, BT, HD2, C);
}

// ----------------------------------------------------------------------------
// backward

// g (H, D) += sum over b, t of t * (dy_b y_a - dy_a y_b) for channel pairs (a, b) = (c, c + D) of y, dy
// (B,H,T,2D): the gradient of a rotation's frequency (y = R(f t) x gives dL/df = sum_t t (dy x J y)), and
// the cross product is invariant under a common rotation, so it can be taken in either frame
static void rfa_freq_grad_(double *g, const float *y, const float *dy, double sign, int B, int H, int T, int D) {
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                size_t row = (((size_t)b * H + h) * T + t) * 2 * D;
                const float *yr = y + row, *dyr = dy + row;
                for (int c = 0; c < D; c++)
                    g[h * D + c] += sign * t * ((double)dyr[c + D] * yr[c] - (double)dyr[c] * yr[c + D]);
            }
}

static void rfa_backward_(Mixer *m, float *dx, const float *dy, const float *x, int B, int T) {
    const RfaOpts *o = m->spec->opts;
    int C = m->spec->C, H = o->H, D2 = 2 * o->D, HD2 = o->HD2, BT = B * T;
    size_t big = (size_t)BT * HD2, ht = (size_t)H * T;
    RfaActs a;
    rfa_layout_(o, B, T, m->acts, &a);
    float *s0 = m->scratch, *dmh = s0 + big;                  // (BT,2HD), (B,H,T,2D)
    float *dqh = dmh + big, *dkh = dqh + big, *dvh = dkh + big;
    float *ga = dvh + big, *gc = ga + ht, *gE = gc + ht, *gbeta = gE + ht;
    RotaryTable tab = rfa_table_view_(o, &a, T);

    // in the forward pass this was: y = o_lin W_o^T + b_o
    matmul(s0, dy, mixer_param(m, o->k_wo), BT, HD2, C, 0, 0, 0);
    matmul_backward(NULL, mixer_grad(m, o->k_wo), o->bias ? mixer_grad(m, o->k_bo) : NULL, dy, a.o_lin,
                    mixer_param(m, o->k_wo), BT, HD2, C);
    // o_lin = R^T m  =>  dm = R do_lin
    if (o->rot_v) rotary_forward_heads_table(dmh, s0, &tab, B);
    else heads_split(dmh, s0, B, T, H, D2);
    memset(ga, 0, (3 * ht + H) * sizeof(float));
    AttnFilter f = rfa_filter_(o, &a, T);
    f.dbias = ga;
    f.dprec = gc;
    f.ddecay = gE;
    f.dbeta = gbeta;
    AttnOpts ko = attn_opts_default(D2);
    ko.filter = &f;
    attention_backward_write(dqh, dkh, dvh, NULL, NULL, dmh, a.mh, a.lse, a.qh, a.kh, a.vh, &ko, B, H, T, D2);

    if (o->learn_omega) {
        // the rotation frequency is -w for q, k, v and +w for the output; channels 2m, 2m+1 share w'_m
        // with signs +, -
        double *g = calloc((size_t)H * o->D, sizeof(double));
        rfa_freq_grad_(g, a.qh, dqh, -1.0, B, H, T, o->D);
        rfa_freq_grad_(g, a.kh, dkh, -1.0, B, H, T, o->D);
        if (o->rot_v) {
            rfa_freq_grad_(g, a.vh, dvh, -1.0, B, H, T, o->D);
            rfa_freq_grad_(g, a.mh, dmh, 1.0, B, H, T, o->D);
        }
        float *dom = mixer_grad(m, o->k_om);
        for (int h = 0; h < H; h++)
            for (int mm = 0; mm < o->D / 2; mm++)
                dom[h * (o->D / 2) + mm] += (float)(g[h * o->D + 2 * mm] - g[h * o->D + 2 * mm + 1]);
        free(g);
    }

    float *dwqkv = mixer_grad(m, o->k_wqkv);
    float *dbqkv = o->bias ? mixer_grad(m, o->k_bqkv) : NULL;
    const float *wqkv = mixer_param(m, o->k_wqkv);
    const float *dsrc[3] = {dqh, dkh, dvh};
    for (int part = 0; part < 3; part++) {
        int rotate = part < 2 ? o->rot_qk : o->rot_v;
        if (rotate) rotary_backward_heads_table(s0, dsrc[part], &tab, B);
        else heads_merge(s0, dsrc[part], B, T, H, D2);
        matmul_backward(dx, dwqkv + (size_t)part * HD2 * C, dbqkv ? dbqkv + (size_t)part * HD2 : NULL, s0, x,
                        wqkv + (size_t)part * HD2 * C, BT, C, HD2);
    }

    // the SDE parameters, by the chain rule through the tables (rfa_tables_)
    for (int h = 0; h < H; h++) {
        RfaHead_ p = rfa_head_(m, h);
        double kappa = 1.0 + p.nod;
        double dtau = 0, dnod = 0, dst2 = 0, deta2 = 0, dgam2 = 0, dmu = 0;
        double gb = gbeta[h];
        if (o->unitary) {
            dtau = gb / o->unit_scale;  // beta = tau / sqrt(D) or tau / sqrt(2D)
        } else {
            dtau = o->gauss ? gb : gb * kappa;  // beta = tau (gauss) or tau kappa
            if (!o->gauss) dnod += gb * p.tau;
        }
        for (int d = 0; d < T; d++) {
            size_t t = (size_t)h * T + d;
            double E = a.te[t], V = a.tv[t], c = a.tc[t];
            double dE = gE[t];
            if (!o->unitary) {
                // a = -tau log V, c = 1/(nu V) (or 1/nu), nu = nod D
                dtau += ga[t] * -log(V);
                dnod += gc[t] * (-c / p.nod);
                if (!o->flat) {
                    double dV = ga[t] * (-p.tau / V) + (o->mult_gate ? gc[t] * (-c / V) : 0.0);
                    // V = s~2 (1 - E^2) + eta2 E^2 + gamma2
                    dst2 += dV * (1.0 - E * E);
                    deta2 += dV * E * E;
                    dgam2 += dV;
                    dE += dV * 2.0 * E * (p.eta2 - p.st2);
                }
            }
            dmu += dE * (-(double)d * E);  // E = exp(-mu d)
        }
        // through the softplus: d softplus(r)/dr = sigmoid(r)
#define RAW_(k, g) mixer_grad(m, k)[h] += (float)((g) * mixer_sigmoid(mixer_param(m, k)[h]))
        if (h >= o->n_zero) RAW_(o->k_mu, dmu);
        RAW_(o->k_sig, dst2);
        RAW_(o->k_eta, deta2);
        RAW_(o->k_gam, dgam2);
        RAW_(o->k_nu, dnod);
        RAW_(o->k_tau, dtau);
#undef RAW_
    }
}

// ----------------------------------------------------------------------------
// diagnostics and attention maps

static void rfa_diag_(const Mixer *m, cJSON *obj) {
    const RfaOpts *o = m->spec->opts;
    double v[7][RFA_MAX_HEADS];
    for (int h = 0; h < o->H; h++) {
        RfaHead_ p = rfa_head_(m, h);
        double row[7] = {p.mu, p.st2, p.eta2, p.gam2, p.eta2 - p.st2, p.nod, p.tau};
        for (int q = 0; q < 7; q++) v[q][h] = row[q];
    }
    const char *names[7] = {"mu", "sigma_tilde2", "eta2", "gamma2", "alpha", "nu_over_d", "tau"};
    for (int q = 0; q < 7; q++) cJSON_AddItemToObject(obj, names[q], cJSON_CreateDoubleArray(v[q], o->H));
}

static int rfa_attn_heads_(const MixerSpec *s) { return ((const RfaOpts *)s->opts)->H; }

// the unattenuated weights A^ (before the factor E), as the paper plots them (App. F.3)
static void rfa_attn_map_(const Mixer *m, int b, int h, float *P) {
    const RfaOpts *o = m->spec->opts;
    int T = m->T, D2 = 2 * o->D;
    RfaActs a;
    rfa_layout_(o, m->B, T, m->acts, &a);
    AttnFilter f = rfa_filter_(o, &a, T);
    AttnOpts ko = attn_opts_default(D2);
    ko.filter = &f;
    size_t off = ((size_t)b * o->H + h) * T * D2;
    attention_probs(P, a.qh + off, a.kh + off, a.lse + ((size_t)b * o->H + h) * T, &ko, b, h, o->H, T, D2);
}

// complex k and v of every head: 2 x 2 H D reals per token
static size_t rfa_cache_per_token_(const MixerSpec *s) { return 2 * (size_t)((const RfaOpts *)s->opts)->HD2; }

// what decoding would keep: the cache of cap positions (RFA has no step yet, so nothing allocates it; seqtrain
// --info reports it)
static size_t rfa_state_size_(const MixerSpec *s, int cap) { return rfa_cache_per_token_(s) * (size_t)cap; }

// Table 1's attention row H(dk+dv)·L at L = T, k and v complex: dk = dv = 2 D reals
static void rfa_state_terms_(const MixerSpec *s, int T, StateTerms *st) {
    const RfaOpts *o = s->opts;
    state_terms_add(st, 1, 2 * (size_t)o->HD2 * (size_t)T, "KV cache (complex k, v)",
                    "H(dk+dv)·T (dk = dv = 2·D reals) = %d·(%d+%d)·%d", o->H, 2 * o->D, 2 * o->D, T);
}

const MixerOps MIXER_RFA = {
    .name = "rfa",
    .doc = "Robust Filter Attention (RFA / SC-RFA) with the paper's ablations as options",
    .schema = &RFA_SCHEMA_,
    .opts_size = sizeof(RfaOpts),
    .check = rfa_check_,
    .params = rfa_params_,
    .init = rfa_init_,
    .act_size = rfa_act_size_,
    .scratch_size = rfa_scratch_size_,
    .forward = rfa_forward_,
    .backward = rfa_backward_,
    .state_size = rfa_state_size_,
    .cache_per_token = rfa_cache_per_token_,
    .state_terms = rfa_state_terms_,
    .diag = rfa_diag_,
    .attn_heads = rfa_attn_heads_,
    .attn_map = rfa_attn_map_,
};
