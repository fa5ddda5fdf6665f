// The selective_rope option block shared by gla, gated_deltanet and attention; mixers/selrope.h has the maths.
#include "mixers/selrope.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixers/mixer_kit.h"
#include "nn/matmul.h"
#include "nn/norm.h"
#include "nn/selrope.h"

#define SR_L2_EPS 1e-6f

#define KEY_(...) MIXER_KEY(SelRopeOpts, __VA_ARGS__)
static const CfgKey SELROPE_KEYS_[] = {
    KEY_("enabled", CFG_BOOL, enabled, "false", 0, 0, NULL, "Rotate q and k by the selective (input-dependent) angles."),
    KEY_("phi_proj_rank", CFG_INT, rank, "16", 1, 4096, NULL,
         "Rank r of the angle projection W2 (W1 xn): C -> r -> H·Dk/2 (the MAD config uses 32)."),
    KEY_("full_rank", CFG_BOOL, full_rank, "false", 0, 0, NULL,
         "Per-head full-rank projection with weight norm, scale_h · normalize(W_h) over C/H inputs, instead of "
         "the low-rank one (phi_proj_rank unused)."),
    KEY_("conv", CFG_BOOL, conv, "true", 0, 0, NULL,
         "Causal depthwise short convolution (4 taps, no bias) over phi; unused with skip_conv. false with skip_conv "
         "false: phi as projected, neither conv nor difference (a seqtrain addition)."),
    KEY_("conv_act", CFG_ENUM, conv_act, "\"none\"", 0, 0, "none|silu", "Activation after the conv over phi."),
    KEY_("skip_conv", CFG_BOOL, skip_conv, "false", 0, 0, NULL,
         "No conv over phi: the first difference phi_t - phi_{t-1} in its place (the authors' skip_conv)."),
    KEY_("use_bias", CFG_BOOL, use_bias, "false", 0, 0, NULL, "phi += exp(phi_bias) (per head and pair; 1 at init)."),
    KEY_("use_gate", CFG_BOOL, use_gate, "false", 0, 0, NULL,
         "phi *= sigmoid(gate_w xn + gate_b), one gate per head (the authors' phase_gate_proj)."),
    KEY_("temp_type", CFG_ENUM, temp_type, "\"rope\"", 0, 0, "rope|rfa",
         "Fixed temperature spectrum: rope temp_max / theta^(2r/Dk) (theta >= 1), or rfa "
         "sqrt((1-cos p)/(1+cos p)) over p = linspace(0, theta·pi, Dk/2), scaled to max temp_max (0 < theta < 1)."),
    KEY_("temp_theta", CFG_FLOAT, temp_theta, "500000", 1e-9, 1e12, NULL,
         "theta of the temperature spectrum: at least 1 for rope, below 1 for rfa (the authors' ranges)."),
    KEY_("temp_max", CFG_FLOAT, temp_max, "1", 1e-9, 1e9, NULL, "Largest temperature (not trained)."),
};
const CfgSection SELROPE_SECTION = {"selective_rope", "Selective RoPE on q and k (docs/mixers.md).", SELROPE_KEYS_,
                                    (int)(sizeof SELROPE_KEYS_ / sizeof SELROPE_KEYS_[0])};

// ----------------------------------------------------------------------------
// options and parameters

// the authors' rotary_temperature: rfa is tan(p/2) at R evenly spaced p in [0, theta·pi], theta < 1 keeping the
// last p below pi (the pole of (1-cos p)/(1+cos p)), so the spectrum rises from 0 to temp_max; rope is RoPE's
// frequencies times temp_max. selrope_check has refused the thetas outside those ranges.
static void selrope_temperature_(SelRopeOpts *s, int Dk) {
    int R = s->R;
    if (!strcmp(s->temp_type, "rfa")) {
        double pmax = s->temp_theta * M_PI, tmax = sqrt((1.0 - cos(pmax)) / (1.0 + cos(pmax)));
        for (int r = 0; r < R; r++) {
            double p = pmax * r / (R - 1), c = cos(p);
            s->temp[r] = (float)(s->temp_max * sqrt((1.0 - c) / (1.0 + c)) / tmax);
        }
    } else {
        for (int r = 0; r < R; r++) s->temp[r] = (float)(s->temp_max / pow(s->temp_theta, 2.0 * r / Dk));
    }
}

int selrope_check(SelRopeOpts *s, const char *path, int C, int H, int Dk, int *k, Err *e) {
    s->k_w1 = s->k_w2 = s->k_scale = s->k_conv = s->k_bias = s->k_gw = s->k_gb = -1;
    if (!s->enabled) return 0;
    if (C % H)
        return err_set(e, "%s.selective_rope: the width %d is not a multiple of the %d heads (phi reads x per head)",
                       path, C, H);
    if (Dk % 2 || Dk / 2 > SELROPE_MAX_R)
        return err_set(e, "%s.selective_rope: the key head size %d must be even and at most %d", path, Dk,
                       2 * SELROPE_MAX_R);
    s->C = C, s->H = H, s->Dh = C / H, s->R = Dk / 2, s->HR = H * s->R;
    s->silu = !strcmp(s->conv_act, "silu");
    s->has_conv = s->conv && !s->skip_conv;
    if (s->silu && !s->has_conv)
        return err_set(e, "%s.selective_rope.conv_act: \"silu\" acts after the conv over phi, and %s has none; "
                       "allowed there: none", path, s->skip_conv ? "skip_conv true" : "conv false");
    int rfa = !strcmp(s->temp_type, "rfa");
    if (rfa && !(s->temp_theta < 1.0))
        return err_set(e, "%s.selective_rope.temp_theta: %g with temp_type rfa; the spectrum tan(p/2) over "
                       "p = linspace(0, theta·pi, Dk/2) has a pole at p = pi, so theta must be below 1 (the authors' "
                       "0 < theta < 1; e.g. 0.5)", path, s->temp_theta);
    if (!rfa && s->temp_theta < 1.0)
        return err_set(e, "%s.selective_rope.temp_theta: %g with temp_type rope; RoPE's base must be at least 1 (the "
                       "authors' range; below 1 the temperatures grow with r), or use temp_type rfa", path,
                       s->temp_theta);
    if (rfa && s->R < 2)
        return err_set(e, "%s.selective_rope.temp_type: rfa with key head size %d (one pair): its spectrum starts at "
                       "tan(0) = 0, so the only pair would never turn; needs a key head size of at least 4, or use rope",
                       path, Dk);
    selrope_temperature_(s, Dk);
    if (s->full_rank) s->k_w2 = (*k)++, s->k_scale = (*k)++;
    else s->k_w1 = (*k)++, s->k_w2 = (*k)++;
    if (s->has_conv) s->k_conv = (*k)++;
    if (s->use_bias) s->k_bias = (*k)++;
    if (s->use_gate) s->k_gw = (*k)++, s->k_gb = (*k)++;
    return 0;
}

int selrope_params(const SelRopeOpts *s, ParamTable *pt, const char *base, Err *e) {
    if (!s->enabled) return 0;
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s.selective_rope", base);
    // nn.Linear-like scales (1/sqrt(fan_in)), so that phi is O(1) at init and the angles turn
    if (s->full_rank) {
        MIXER_ADD("phi_w", 2, ((int[]){s->HR, s->Dh}), init_normal(1.0f), 1);
        MIXER_ADD("phi_scale", 1, ((int[]){s->H}), init_ones(), 0);
    } else {
        MIXER_ADD("phi_w1", 2, ((int[]){s->rank, s->C}), init_normal((float)(1.0 / sqrt(s->C / (double)s->H))), 1);
        MIXER_ADD("phi_w2", 2, ((int[]){s->HR, s->rank}), init_normal((float)(1.0 / sqrt((double)s->rank))), 1);
    }
    if (s->has_conv) MIXER_ADD("phi_conv", 2, ((int[]){s->HR, SELROPE_CONV_K}), init_normal(0.5f), 1);
    if (s->use_bias) MIXER_ADD("phi_bias", 1, ((int[]){s->HR}), init_zeros(), 0);
    if (s->use_gate) {
        MIXER_ADD("gate_w", 2, ((int[]){s->H, s->C}), init_normal(0.02f), 1);
        MIXER_ADD("gate_b", 1, ((int[]){s->H}), init_zeros(), 0);
    }
    return 0;
}

// ----------------------------------------------------------------------------
// activations

typedef struct SrActs {
    float *xn, *xnrm;  // (BT,C) (BT*H) the per-head unit input and its norms
    float *u;          // (BT,rank) low rank: W1 xn
    float *w;          // (HR*Dh + HR) full rank: the effective weight scale_h W_hr / |W_hr| and the row norms
    float *eb;         // (HR) use_bias: exp(phi_bias)
    float *p;          // (BT,HR) the projection
    float *c;          // (BT,HR) silu: the conv output (its input)
    float *f;          // (BT,HR) use_gate: phi before the gate
    float *g;          // (BT,H) use_gate: the gate values sigmoid(gate_w xn + gate_b)
    float *cs, *sn;    // (BT,HR) cos and sin of the angles
} SrActs;

static size_t sr_layout_(const SelRopeOpts *s, int B, int T, float *base, SrActs *a) {
    size_t BT = (size_t)B * T, n = 0;
    SrActs t;
    if (!a) a = &t;
    int on = s->enabled;
    a->xn = mixer_take(base, &n, BT * s->C, on);
    a->xnrm = mixer_take(base, &n, BT * s->H, on);
    a->u = mixer_take(base, &n, BT * s->rank, on && !s->full_rank);
    a->w = mixer_take(base, &n, (size_t)s->HR * s->Dh + s->HR, on && s->full_rank);
    a->eb = mixer_take(base, &n, s->HR, on && s->use_bias);
    a->p = mixer_take(base, &n, BT * s->HR, on);
    a->c = mixer_take(base, &n, BT * s->HR, on && s->silu);
    a->f = mixer_take(base, &n, BT * s->HR, on && s->use_gate);
    a->g = mixer_take(base, &n, BT * s->H, on && s->use_gate);
    a->cs = mixer_take(base, &n, BT * s->HR, on);
    a->sn = mixer_take(base, &n, BT * s->HR, on);
    return n;
}

size_t selrope_act_size(const SelRopeOpts *s, int B, int T) { return sr_layout_(s, B, T, NULL, NULL); }

void selrope_apply(const SelRopeOpts *s, float *acts, float *out, const float *inp, int B, int T) {
    SrActs a;
    sr_layout_(s, B, T, acts, &a);
    selrope_rotate(out, inp, a.cs, a.sn, B * T, s->H, s->R);
}

void selrope_apply_backward(const SelRopeOpts *s, float *acts, float *dinp, float *dtheta, const float *dout,
                            const float *out, int B, int T) {
    SrActs a;
    sr_layout_(s, B, T, acts, &a);
    selrope_rotate_backward(dinp, dtheta, dout, out, a.cs, a.sn, B * T, s->H, s->R);
}

// ----------------------------------------------------------------------------
// the pieces forward and step share

// the chain from p to the angles (nn/selrope.h); eb the exp(bias) values or NULL
static SelRopeChain sr_chain_(const Mixer *m, const SelRopeOpts *s, const float *eb) {
    return (SelRopeChain){.H = s->H, .R = s->R, .K = s->has_conv ? SELROPE_CONV_K : 0, .silu = s->silu,
                          .skip = s->skip_conv, .conv = m && s->has_conv ? mixer_param(m, s->k_conv) : NULL,
                          .ebias = eb, .temp = s->temp};
}

// full rank: the effective weight (HR, Dh) scale_h W_hr / |W_hr|, and the row norms (HR)
static void sr_full_weight_(const Mixer *m, const SelRopeOpts *s, float *w, float *nrm) {
    const float *W = mixer_param(m, s->k_w2), *sc = mixer_param(m, s->k_scale);
    for (int i = 0; i < s->HR; i++) {
        double ss = 0;
        for (int j = 0; j < s->Dh; j++) ss += (double)W[(size_t)i * s->Dh + j] * W[(size_t)i * s->Dh + j];
        double n = sqrt(ss) + 1e-12;
        nrm[i] = (float)n;
        for (int j = 0; j < s->Dh; j++) w[(size_t)i * s->Dh + j] = (float)(sc[i / s->R] * W[(size_t)i * s->Dh + j] / n);
    }
}

// what the angle chain reads, for N rows of x (N,C): xn (N,C) and its norms (N*H), the projection p (N,HR) (u
// (N,rank) low rank; w the effective weight and norms, full rank), eb exp(bias) (HR), and the gate values g
// (N,H)
static void sr_inputs_(const Mixer *m, const SelRopeOpts *s, float *xn, float *xnrm, float *u, float *w, float *eb,
                       float *p, float *g, const float *x, int N) {
    l2norm_forward(xn, xnrm, x, N * s->H, s->Dh, SR_L2_EPS, L2NORM_ADD);
    if (!s->full_rank) {
        matmul_forward(u, xn, mixer_param(m, s->k_w1), NULL, N, s->C, s->rank);
        matmul_forward(p, u, mixer_param(m, s->k_w2), NULL, N, s->rank, s->HR);
    } else {
        sr_full_weight_(m, s, w, w + (size_t)s->HR * s->Dh);
#pragma omp parallel for if ((long)N * s->HR >= 4096)
        for (long r = 0; r < (long)N * s->H; r++) {
            int h = (int)(r % s->H);
            const float *xr = xn + (size_t)r * s->Dh;
            for (int i = 0; i < s->R; i++) {
                const float *wr = w + ((size_t)h * s->R + i) * s->Dh;
                float acc = 0;
                for (int j = 0; j < s->Dh; j++) acc += wr[j] * xr[j];
                p[(size_t)r * s->R + i] = acc;
            }
        }
    }
    if (s->use_bias) {
        const float *bias = mixer_param(m, s->k_bias);
        for (int i = 0; i < s->HR; i++) eb[i] = expf(bias[i]);
    }
    if (s->use_gate) {
        matmul_forward(g, xn, mixer_param(m, s->k_gw), mixer_param(m, s->k_gb), N, s->C, s->H);
        for (size_t i = 0; i < (size_t)N * s->H; i++) g[i] = (float)mixer_sigmoid(g[i]);
    }
}

// ----------------------------------------------------------------------------
// forward, backward

void selrope_forward(const Mixer *m, const SelRopeOpts *s, float *acts, const float *x, int B, int T) {
    SrActs a;
    sr_layout_(s, B, T, acts, &a);
    sr_inputs_(m, s, a.xn, a.xnrm, a.u, a.w, a.eb, a.p, a.g, x, B * T);
    SelRopeChain ch = sr_chain_(m, s, a.eb);
    selrope_angles(a.cs, a.sn, a.c, a.f, NULL, 0, a.p, a.g, &ch, B, T);
}

// the work space: dtheta, then dp in its place (n); use_gate: dgate (n); the chain's work and dsum (HR);
// dxn (BT C), du (BT rank), dg (BT H); full rank: the effective weight's gradient (HR Dh)
typedef struct SrWork {
    float *dtheta, *dgate, *chain, *dsum, *dxn, *du, *dg, *dw;
} SrWork;

static size_t sr_work_(const SelRopeOpts *s, int B, int T, float *base, SrWork *w) {
    size_t BT = (size_t)B * T, n = 0;
    SrWork t;
    if (!w) w = &t;
    SelRopeChain ch = sr_chain_(NULL, s, NULL);
    int on = s->enabled;
    w->dtheta = mixer_take(base, &n, BT * s->HR, on);
    w->dgate = mixer_take(base, &n, BT * s->HR, on && s->use_gate);
    w->chain = mixer_take(base, &n, selrope_angles_work_size(&ch, B), on);
    w->dsum = mixer_take(base, &n, s->HR, on);
    w->dxn = mixer_take(base, &n, BT * s->C, on);
    w->du = mixer_take(base, &n, BT * s->rank, on && !s->full_rank);
    w->dg = mixer_take(base, &n, BT * s->H, on && s->use_gate);
    w->dw = mixer_take(base, &n, (size_t)s->HR * s->Dh, on && s->full_rank);
    return n;
}

size_t selrope_scratch_size(const SelRopeOpts *s, int B, int T) { return sr_work_(s, B, T, NULL, NULL); }

float *selrope_dtheta(const SelRopeOpts *s, float *scratch, int B, int T) {
    memset(scratch, 0, (size_t)B * T * s->HR * sizeof(float));
    return scratch;
}

void selrope_backward(Mixer *m, const SelRopeOpts *s, float *acts, float *scratch, float *dx, const float *x, int B,
                      int T) {
    SrActs a;
    SrWork w;
    sr_layout_(s, B, T, acts, &a);
    sr_work_(s, B, T, scratch, &w);
    int BT = B * T, HR = s->HR;
    SelRopeChain ch = sr_chain_(m, s, a.eb);
    float *dp = w.dtheta;  // in place
    selrope_angles_backward(dp, s->has_conv ? mixer_grad(m, s->k_conv) : NULL, s->use_bias ? w.dsum : NULL, w.dgate,
                            w.chain, w.dtheta, a.p, a.c, a.f, a.g, &ch, B, T);
    if (s->use_bias) {  // phi += exp(bias): dbias = sum df exp(bias)
        const float *bias = mixer_param(m, s->k_bias);
        float *db = mixer_grad(m, s->k_bias);
        for (int i = 0; i < HR; i++) db[i] += (float)(w.dsum[i] * exp((double)bias[i]));
    }
    // dxn: written by the projection's backward, then the gate's added
    if (!s->full_rank) {
        const float *W1 = mixer_param(m, s->k_w1), *W2 = mixer_param(m, s->k_w2);
        matmul(w.du, dp, W2, BT, s->rank, HR, 0, 0, 0);                      // du = dp W2
        matmul(mixer_grad(m, s->k_w2), dp, a.u, HR, s->rank, BT, 1, 0, 1);  // dW2 += dp^T u
        matmul(w.dxn, w.du, W1, BT, s->C, s->rank, 0, 0, 0);                 // dxn = du W1
        matmul(mixer_grad(m, s->k_w1), w.du, a.xn, s->rank, s->C, BT, 1, 0, 1);  // dW1 += du^T xn
    } else {
        int Dh = s->Dh, R = s->R;
        const float *wf = a.w, *nrm = a.w + (size_t)HR * Dh;
        float *dw = w.dw;
        // dxn_h = sum_i dp_hi w_hi; dw_hi = sum_rows dp_hi xn_h (per (h,i): a fixed order)
#pragma omp parallel for
        for (long r = 0; r < (long)BT * s->H; r++) {
            int h = (int)(r % s->H);
            float *dxr = w.dxn + (size_t)r * Dh;
            for (int j = 0; j < Dh; j++) dxr[j] = 0.0f;
            for (int i = 0; i < R; i++) {
                float d = dp[(size_t)r * R + i];
                const float *wr = wf + ((size_t)h * R + i) * Dh;
                for (int j = 0; j < Dh; j++) dxr[j] += d * wr[j];
            }
        }
#pragma omp parallel for
        for (int hi = 0; hi < HR; hi++) {
            int h = hi / R;
            for (int j = 0; j < Dh; j++) {
                double acc = 0;
                for (int t = 0; t < BT; t++) acc += (double)dp[(size_t)t * HR + hi] * a.xn[((size_t)t * s->H + h) * Dh + j];
                dw[(size_t)hi * Dh + j] = (float)acc;
            }
        }
        // w = sc W / |W|: dsc_h += sum_i <dw_hi, w_hi> / sc_h; dW_hi += sc/|W| (dw - u <u, dw>), u = W / |W|
        const float *W = mixer_param(m, s->k_w2), *sc = mixer_param(m, s->k_scale);
        float *dW = mixer_grad(m, s->k_w2), *dsc = mixer_grad(m, s->k_scale);
        for (int hi = 0; hi < HR; hi++) {
            const float *Wr = W + (size_t)hi * Dh, *dwr = dw + (size_t)hi * Dh;
            double ud = 0;
            for (int j = 0; j < Dh; j++) ud += (double)Wr[j] / nrm[hi] * dwr[j];
            dsc[hi / R] += (float)ud;
            double f = sc[hi / R] / nrm[hi];
            for (int j = 0; j < Dh; j++) dW[(size_t)hi * Dh + j] += (float)(f * (dwr[j] - Wr[j] / nrm[hi] * ud));
        }
    }
    if (s->use_gate) {
        // phi = f g, g = sigmoid(z): dz = (sum over the head's channels of dphi f) g (1 - g)
        for (size_t r = 0; r < (size_t)BT * s->H; r++) {
            double acc = 0, sg = a.g[r];
            for (int i = 0; i < s->R; i++) acc += w.dgate[r * s->R + i];
            w.dg[r] = (float)(acc * sg * (1.0 - sg));
        }
        matmul_backward(w.dxn, mixer_grad(m, s->k_gw), mixer_grad(m, s->k_gb), w.dg, a.xn, mixer_param(m, s->k_gw), BT,
                        s->C, s->H);
    }
    l2norm_backward(dx, w.dxn, a.xn, a.xnrm, BT * s->H, s->Dh, SR_L2_EPS, L2NORM_ADD);
}

// ----------------------------------------------------------------------------
// recurrent decoding

size_t selrope_state_size(const SelRopeOpts *s) {
    if (!s->enabled) return 0;
    SelRopeChain ch = sr_chain_(NULL, s, NULL);
    return selrope_chain_state_size(&ch);
}

void selrope_state_terms(const SelRopeOpts *s, StateTerms *st) {
    if (!s->enabled) return;
    size_t HR = (size_t)s->HR;
    state_terms_add(st, 0, HR, "selective_rope angle sums", "H·R = %d·%d", s->H, s->R);
    if (s->has_conv)
        state_terms_add(st, 0, HR * (SELROPE_CONV_K - 1), "selective_rope conv", "H·R·(k−1) = %d·%d·%d", s->H, s->R,
                        SELROPE_CONV_K - 1);
    if (s->skip_conv) state_terms_add(st, 0, HR, "selective_rope last phi", "H·R = %d·%d", s->H, s->R);
}

void selrope_step(const Mixer *m, const SelRopeOpts *s, float *state, size_t stride, float *q, float *k,
                  const float *x, int B) {
    size_t bh = (size_t)B * s->HR, wn = s->full_rank ? (size_t)s->HR * s->Dh + s->HR : 0;
    float *buf = xmalloc(((size_t)B * s->C + (size_t)B * s->H * 2 + (size_t)B * s->rank + wn + s->HR + 3 * bh) *
                         sizeof(float));
    float *xn = buf, *xnrm = xn + (size_t)B * s->C, *g = xnrm + (size_t)B * s->H, *u = g + (size_t)B * s->H;
    float *w = u + (size_t)B * s->rank, *eb = w + wn, *p = eb + s->HR, *cs = p + bh, *sn = cs + bh;
    sr_inputs_(m, s, xn, xnrm, u, w, eb, p, g, x, B);
    SelRopeChain ch = sr_chain_(m, s, s->use_bias ? eb : NULL);
    selrope_angles(cs, sn, NULL, NULL, state, stride, p, s->use_gate ? g : NULL, &ch, B, 1);
    selrope_rotate(q, q, cs, sn, B, s->H, s->R);
    selrope_rotate(k, k, cs, sn, B, s->H, s->R);
    free(buf);
}
