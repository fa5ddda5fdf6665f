/*
 * The dualities paper's pairs (docs/dualities.md) between the linear-recurrence mixers and the position
 * schemes of softmax attention, checked numerically on random inputs (B = 2, T = 27, H = 3, Dk = 8, Dv = 6,
 * engine chunk 8, so T is a multiple of no chunk):
 *
 * (a) the engine == the masked parallel form, built in double here from an explicit matrix M:
 *     linrec_forward with decay none / head / token: o = ((scale Q K^T) (.) M) V with M_ij = prod_{j<l<=i} a_l
 *     (1, gamma_h^(i-j), exp(G_i - G_j)); decay per channel (GLA) with M per key channel inside the dot product;
 *     delta_forward without and with a decay: o_i = sum_{j<=i} (q_i^T (H_i ... H_{j+1}) k_j) e^{G_i-G_j} beta_j v_j,
 *     H_l = I - beta_l k_l k_l^T, the products formed as explicit Dk x Dk matrices.
 *     Tolerance: every element within 1e-5 of the largest |output| of the reference.
 * (b) log M is what the dual softmax scheme adds to its logits. attention_forward + attention_probs (the
 *     kernel's own softmax weights) with: no options (NoPE), slopes m_h = -log gamma_h (ALiBi, the engine's
 *     head log-decays), fgate F = cumsum of the engine's token log-decays (FoX). Compared with
 *     softmax_j(scale q_i.k_j + log M_ij) in double, log M from the same decay numbers as (a): each weight to
 *     1e-5 absolute, hidden entries (j > i, M = 0, log M = -inf) NaN. Then the bias itself, recovered from the
 *     kernel's weights as log P_ij - log P_ii - scale q_i.(k_j - k_i), against log M_ij to 1e-4 + 1e-5 |log M|.
 * (c) the complex forget gate <-> RoPE: linrec_forward on q, k rotated by rotary_forward (half pairs, base 10,
 *     so the angles wrap within T) with token / per-pair decays == the complex-valued recurrence run in double,
 *     s_t = a_t e^{-i w_n} s_{t-1} + k~_t v_t^T per pair n (k~ = k_n + i k_{n+Dk/2}), o_t = scale Re(q~_t^H s_t);
 *     and the attention kernel's weights on the rotated q, k == softmax_j(scale Re(q~_i^H e^{-i w (i-j)} k~_j)),
 *     the complex gate's (undecayed) M multiplied into the logits, to 1e-5.
 * (d) DeltaNet <-> PaTH, Gated DeltaNet <-> PaTH-FoX: the transition scores q_i^T (H_i..H_{j+1}) k_j are formed
 *     once, from explicit Dk x Dk products of I - beta k k^T; (a) checks delta_forward against sum_j scores *
 *     e^{G_i-G_j} beta_j v_j, and (d) checks path_attn_forward (w = the same unit keys, the same beta, fgate =
 *     cumsum of the same log-decays) against softmax_j(scale * scores + G_i - G_j) V, to 1e-5 of max|o|.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "nn/attention.h"
#include "nn/delta.h"
#include "nn/linrec.h"
#include "nn/path_attn.h"
#include "nn/rotary.h"
#include "test.h"

enum { B_ = 2, T_ = 27, H_ = 3, DK = 8, DV = 6, CHUNK = 8 };
#define IDX(b, t, h) ((((size_t)(b) * T_ + (t)) * H_ + (h)))

// log M_ij = sum_{j<l<=i} g_l for the scalar forms (per head: g_l = g[h]); -INFINITY for j > i
static double logM_(int decay, const float *g, int b, int h, int i, int j) {
    if (j > i) return -INFINITY;
    double s = 0;
    for (int l = j + 1; l <= i; l++)
        s += decay == LINREC_NONE ? 0.0 : decay == LINREC_HEAD ? (double)g[h] : (double)g[IDX(b, l, h)];
    return s;
}

// the largest |x| over n doubles
static double maxabs_(const double *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

// max |got - want| over n, and whether every element is within tol
static int within_(const float *got, const double *want, size_t n, double tol, double *worst) {
    *worst = 0;
    for (size_t i = 0; i < n; i++) *worst = fmax(*worst, fabs((double)got[i] - want[i]));
    return *worst <= tol;
}

// (a) for the diagonal family: engine output vs ((scale Q K^T) (.) M) V in double
static void check_linrec_(const char *name, int decay, const float *q, const float *k, const float *v, const float *g) {
    LinrecDims d = {B_, T_, H_, DK, DV, decay, 0, CHUNK, 1.0f / sqrtf((float)DK)};
    size_t no = (size_t)B_ * T_ * H_ * DV;
    float *o = malloc(no * sizeof(float));
    double *ref = calloc(no, sizeof(double));
    linrec_forward(o, NULL, NULL, NULL, q, k, v, g, NULL, &d);
    for (int b = 0; b < B_; b++)
        for (int h = 0; h < H_; h++)
            for (int i = 0; i < T_; i++)
                for (int j = 0; j <= i; j++) {
                    const float *qi = q + IDX(b, i, h) * DK, *kj = k + IDX(b, j, h) * DK;
                    double a = 0;  // scale q_i.k_j M_ij (per channel: M inside the dot product)
                    if (decay == LINREC_CHANNEL) {
                        for (int c = 0; c < DK; c++) {
                            double lm = 0;
                            for (int l = j + 1; l <= i; l++) lm += g[IDX(b, l, h) * DK + c];
                            a += (double)qi[c] * kj[c] * exp(lm);
                        }
                    } else {
                        for (int c = 0; c < DK; c++) a += (double)qi[c] * kj[c];
                        a *= exp(logM_(decay, g, b, h, i, j));
                    }
                    a *= d.scale;
                    for (int e = 0; e < DV; e++) ref[IDX(b, i, h) * DV + e] += a * v[IDX(b, j, h) * DV + e];
                }
    double worst, tol = 1e-5 * maxabs_(ref, no);
    int ok = within_(o, ref, no, tol, &worst);
    CHECK(ok, "%s: linrec_forward == ((scale Q K^T) (.) M) V built in double (max err %.3g, tol %.3g = 1e-5 max|o|)",
          name, worst, tol);
    free(o);
    free(ref);
}

// the transition scores of query i: tr[j] = q_i^T (H_i ... H_{j+1}) k_j for j <= i, H_l = I - beta_l u_l u_l^T
// (u = k for DeltaNet, u = w for PaTH), the product multiplied out as explicit Dk x Dk matrices in double. Both
// sides of the DeltaNet <-> PaTH pair are checked against these same numbers.
static void transition_scores_(double *tr, const float *q, const float *k, const float *u, const float *beta, int b,
                               int h, int i) {
    double P[DK * DK], Hm[DK * DK], tmp[DK * DK];
    for (int r = 0; r < DK * DK; r++) P[r] = (r % (DK + 1)) == 0;  // the empty product (j = i)
    const float *qi = q + IDX(b, i, h) * DK;
    for (int j = i; j >= 0; j--) {
        const float *kj = k + IDX(b, j, h) * DK, *uj = u + IDX(b, j, h) * DK;
        double s = 0;
        for (int r = 0; r < DK; r++)
            for (int c = 0; c < DK; c++) s += (double)qi[r] * P[r * DK + c] * kj[c];
        tr[j] = s;
        // P <- P H_j (extended on the right)
        for (int r = 0; r < DK; r++)
            for (int c = 0; c < DK; c++) Hm[r * DK + c] = (r == c) - (double)beta[IDX(b, j, h)] * uj[r] * uj[c];
        for (int r = 0; r < DK; r++)
            for (int c = 0; c < DK; c++) {
                double acc = 0;
                for (int m = 0; m < DK; m++) acc += P[r * DK + m] * Hm[m * DK + c];
                tmp[r * DK + c] = acc;
            }
        memcpy(P, tmp, sizeof P);
    }
}

// G_i - G_j for the token log-decays g (B,T,H), 0 without g
static double gate_bias_(const float *g, int b, int h, int i, int j) {
    double G = 0;
    if (g)
        for (int l = j + 1; l <= i; l++) G += g[IDX(b, l, h)];
    return G;
}

// (a) DeltaNet / Gated DeltaNet: delta_forward vs the explicit transition products
static void check_delta_(const char *name, const float *q, const float *k, const float *v, const float *beta,
                         const float *g) {
    DeltaDims d = {B_, T_, H_, DK, DV, CHUNK, 1.0f / sqrtf((float)DK)};
    size_t no = (size_t)B_ * T_ * H_ * DV;
    float *o = malloc(no * sizeof(float));
    double *ref = calloc(no, sizeof(double)), tr[T_];
    delta_forward(o, NULL, NULL, q, k, v, beta, g, &d);
    for (int b = 0; b < B_; b++)
        for (int h = 0; h < H_; h++)
            for (int i = 0; i < T_; i++) {
                transition_scores_(tr, q, k, k, beta, b, h, i);
                for (int j = 0; j <= i; j++) {
                    double a = d.scale * tr[j] * exp(gate_bias_(g, b, h, i, j)) * beta[IDX(b, j, h)];
                    for (int e = 0; e < DV; e++) ref[IDX(b, i, h) * DV + e] += a * v[IDX(b, j, h) * DV + e];
                }
            }
    double worst, tol = 1e-5 * maxabs_(ref, no);
    int ok = within_(o, ref, no, tol, &worst);
    CHECK(ok, "%s: delta_forward == sum_j (q_i^T H_i..H_{j+1} k_j) e^{G_i-G_j} beta_j v_j from explicit products "
          "(max err %.3g, tol %.3g = 1e-5 max|o|)", name, worst, tol);
    free(o);
    free(ref);
}

// (d) the softmax twin of the delta rule: the PaTH kernel with w = DeltaNet's keys and the same beta (and FoX's
// F = cumsum g for PaTH-FoX) == softmax_j(scale q_i^T (H_i..H_{j+1}) k_j + G_i - G_j) V, the transition scores
// being the very numbers check_delta_'s reference uses
static void check_path_(const char *name, const float *q, const float *k, const float *v, const float *beta,
                        const float *g) {
    size_t n = (size_t)B_ * H_ * T_ * DK, nv = (size_t)B_ * H_ * T_ * DV, nb = (size_t)B_ * H_ * T_;
    float *qa = malloc(n * sizeof(float)), *ka = malloc(n * sizeof(float)), *va = malloc(n * sizeof(float));
    float *ba = malloc(nb * sizeof(float)), *F = malloc(nb * sizeof(float)), *lse = malloc(nb * sizeof(float));
    float *out = malloc(n * sizeof(float));
    double *ref = calloc(nv, sizeof(double)), tr[T_], sc[T_];
    for (int b = 0; b < B_; b++)
        for (int h = 0; h < H_; h++) {
            double G = 0;
            for (int t = 0; t < T_; t++) {
                size_t a = ((size_t)b * H_ + h) * T_ + t;
                for (int c = 0; c < DK; c++) {
                    qa[a * DK + c] = q[IDX(b, t, h) * DK + c];
                    ka[a * DK + c] = k[IDX(b, t, h) * DK + c];
                    va[a * DK + c] = c < DV ? v[IDX(b, t, h) * DV + c] : 0.0f;  // HS = Dk >= Dv: pad with zeros
                }
                ba[a] = beta[IDX(b, t, h)];
                if (g) G += g[IDX(b, t, h)];
                F[a] = (float)G;
            }
        }
    PathOpts po = {1.0f / sqrtf((float)DK), CHUNK, g ? F : NULL};
    path_attn_forward(out, lse, qa, ka, va, ka, ba, &po, B_, H_, T_, DK);
    for (int b = 0; b < B_; b++)
        for (int h = 0; h < H_; h++)
            for (int i = 0; i < T_; i++) {
                transition_scores_(tr, q, k, k, beta, b, h, i);
                double mx = -INFINITY, z = 0;
                for (int j = 0; j <= i; j++) {
                    sc[j] = po.scale * tr[j] + gate_bias_(g, b, h, i, j);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j <= i; j++) z += exp(sc[j] - mx);
                for (int j = 0; j <= i; j++)
                    for (int e = 0; e < DV; e++)
                        ref[IDX(b, i, h) * DV + e] += exp(sc[j] - mx) / z * v[IDX(b, j, h) * DV + e];
            }
    double worst = 0, tol = 1e-5 * maxabs_(ref, nv);
    for (int b = 0; b < B_; b++)
        for (int h = 0; h < H_; h++)
            for (int t = 0; t < T_; t++)
                for (int e = 0; e < DV; e++)
                    worst = fmax(worst, fabs(out[(((size_t)b * H_ + h) * T_ + t) * DK + e] - ref[IDX(b, t, h) * DV + e]));
    CHECK(worst <= tol, "%s: path_attn_forward (w = k, same beta) == softmax(scale q_i^T H_i..H_{j+1} k_j + G_i - G_j) V "
          "with DeltaNet's transition products (max err %.3g, tol %.3g = 1e-5 max|o|)", name, worst, tol);
    free(qa);
    free(ka);
    free(va);
    free(ba);
    free(F);
    free(lse);
    free(out);
    free(ref);
}

// (b) the softmax twin: the kernel's weights vs softmax(scale QK^T + log M) in double, and the bias recovered
// from the kernel's weights vs log M. q, k are in the engine layout (B,T,H,Dk); the attention layout is
// (B,H,T,HS) with HS = Dk.
static void check_twin_(const char *name, int decay, const float *q, const float *k, const float *g,
                        const AttnOpts *opts) {
    size_t n = (size_t)B_ * H_ * T_ * DK;
    float *qa = malloc(n * sizeof(float)), *ka = malloc(n * sizeof(float)), *va = malloc(n * sizeof(float));
    float *out = malloc(n * sizeof(float)), *lse = malloc((size_t)B_ * H_ * T_ * sizeof(float));
    float *P = malloc((size_t)T_ * T_ * sizeof(float));
    for (int b = 0; b < B_; b++)
        for (int h = 0; h < H_; h++)
            for (int t = 0; t < T_; t++)
                for (int c = 0; c < DK; c++) {
                    size_t a = (((size_t)b * H_ + h) * T_ + t) * DK + c;
                    qa[a] = q[IDX(b, t, h) * DK + c];
                    ka[a] = k[IDX(b, t, h) * DK + c];
                    va[a] = 0.5f * k[IDX(b, t, h) * DK + c];  // values do not enter the weights
                }
    attention_forward(out, lse, qa, ka, va, opts, B_, H_, T_, DK);
    double werr = 0, berr = 0;
    int wok = 1, bok = 1, hidden_ok = 1;
    double logit[T_], ref[T_];
    for (int b = 0; b < B_; b++)
        for (int h = 0; h < H_; h++) {
            size_t off = ((size_t)b * H_ + h) * T_;
            attention_probs(P, qa + off * DK, ka + off * DK, lse + off, opts, b, h, H_, T_, DK);
            for (int i = 0; i < T_; i++) {
                const float *qi = qa + (off + i) * DK;
                double mx = -INFINITY, z = 0;
                for (int j = 0; j <= i; j++) {
                    const float *kj = ka + (off + j) * DK;
                    double s = 0;
                    for (int c = 0; c < DK; c++) s += (double)qi[c] * kj[c];
                    logit[j] = opts->scale * s;  // the dot-product part; ref adds log M
                    ref[j] = logit[j] + logM_(decay, g, b, h, i, j);
                    mx = fmax(mx, ref[j]);
                }
                for (int j = 0; j <= i; j++) z += exp(ref[j] - mx);
                for (int j = 0; j < T_; j++) {
                    float p = P[(size_t)i * T_ + j];
                    if (j > i) {
                        if (!isnan(p)) hidden_ok = 0;
                        continue;
                    }
                    double want = exp(ref[j] - mx) / z, e = fabs(p - want);
                    werr = fmax(werr, e);
                    if (e > 1e-5) wok = 0;
                    // the bias the kernel added, relative to the diagonal (whose bias is 0 in every scheme)
                    double bias = log((double)p) - log((double)P[(size_t)i * T_ + i]) - (logit[j] - logit[i]);
                    double lm = logM_(decay, g, b, h, i, j), be = fabs(bias - lm);
                    berr = fmax(berr, be);
                    if (be > 1e-4 + 1e-5 * fabs(lm)) bok = 0;
                }
            }
        }
    CHECK(wok, "%s: attention_probs == softmax(scale QK^T + log M) in double, M from the engine's decays "
          "(max err %.3g, tol 1e-5)", name, werr);
    CHECK(bok, "%s: the kernel's logit bias (from its weights) == log M (max err %.3g, tol 1e-4 + 1e-5|log M|)",
          name, berr);
    CHECK(hidden_ok, "%s: j > i is hidden (M_ij = 0, log M = -inf): attention_probs gives NaN there", name);
    free(qa);
    free(ka);
    free(va);
    free(out);
    free(lse);
    free(P);
}

// (c) the complex forget gate. Pair n of a head is the complex number x_n + i x_{n+Dk/2} (rotary's half layout);
// RoPE multiplies it by e^{i t w_n}, so Re(conj(q~_i e^{i i w}) k~_j e^{i j w}) = Re(conj(q~_i) e^{-i w (i-j)} k~_j).
enum { HALF = DK / 2 };
#define ROPE_BASE 10.0
static double omega_(int n) { return pow(ROPE_BASE, -2.0 * n / DK); }

// g: LINREC_TOKEN (B,T,H) or LINREC_CHANNEL (B,T,H,Dk) with channels n and n + Dk/2 equal (one decay per pair)
static void check_complex_(const char *name, int decay, const float *q, const float *k, const float *v, const float *g) {
    LinrecDims d = {B_, T_, H_, DK, DV, decay, 0, CHUNK, 1.0f / sqrtf((float)DK)};
    size_t nk = (size_t)B_ * T_ * H_ * DK, no = (size_t)B_ * T_ * H_ * DV;
    float *qr = malloc(nk * sizeof(float)), *kr = malloc(nk * sizeof(float)), *o = malloc(no * sizeof(float));
    double *ref = calloc(no, sizeof(double));
    RotaryCfg rc = {ROTARY_HALF, (float)ROPE_BASE, NULL};
    rotary_forward(qr, q, &rc, 0, B_, T_, H_, DK);
    rotary_forward(kr, k, &rc, 0, B_, T_, H_, DK);
    linrec_forward(o, NULL, NULL, NULL, qr, kr, v, g, NULL, &d);
    double sre[HALF][DV], sim[HALF][DV];  // the complex state, one row per pair
    for (int b = 0; b < B_; b++)
        for (int h = 0; h < H_; h++) {
            memset(sre, 0, sizeof sre);
            memset(sim, 0, sizeof sim);
            for (int t = 0; t < T_; t++) {
                const float *kt = k + IDX(b, t, h) * DK, *qt = q + IDX(b, t, h) * DK, *vt = v + IDX(b, t, h) * DV;
                for (int n = 0; n < HALF; n++) {
                    double la = decay == LINREC_TOKEN ? g[IDX(b, t, h)] : g[IDX(b, t, h) * DK + n];
                    double ar = exp(la) * cos(-omega_(n)), ai = exp(la) * sin(-omega_(n));
                    for (int e = 0; e < DV; e++) {  // s <- a e^{-iw} s + k~ v
                        double r0 = sre[n][e], i0 = sim[n][e];
                        sre[n][e] = ar * r0 - ai * i0 + (double)kt[n] * vt[e];
                        sim[n][e] = ar * i0 + ai * r0 + (double)kt[n + HALF] * vt[e];
                    }
                }
                for (int e = 0; e < DV; e++) {  // Re(conj(q~) s) = q_re s_re + q_im s_im
                    double acc = 0;
                    for (int n = 0; n < HALF; n++) acc += (double)qt[n] * sre[n][e] + (double)qt[n + HALF] * sim[n][e];
                    ref[IDX(b, t, h) * DV + e] = d.scale * acc;
                }
            }
        }
    double worst, tol = 1e-5 * maxabs_(ref, no);
    int ok = within_(o, ref, no, tol, &worst);
    CHECK(ok, "%s: linrec_forward on RoPE-rotated q, k == the complex recurrence s_t = a_t e^{-iw} s_{t-1} + k~_t v_t "
          "in double (max err %.3g, tol %.3g = 1e-5 max|o|)", name, worst, tol);
    free(qr);
    free(kr);
    free(o);
    free(ref);
}

// (c) the softmax twin: RoPE attention's weights == softmax of the logits with the complex gate's rotation
// e^{-iw(i-j)} multiplied in
static void check_rope_twin_(const float *q, const float *k) {
    size_t nk = (size_t)B_ * T_ * H_ * DK;
    float *qr = malloc(nk * sizeof(float)), *kr = malloc(nk * sizeof(float)), *qa = malloc(nk * sizeof(float));
    float *ka = malloc(nk * sizeof(float)), *va = malloc(nk * sizeof(float)), *out = malloc(nk * sizeof(float));
    float *lse = malloc((size_t)B_ * H_ * T_ * sizeof(float)), *P = malloc((size_t)T_ * T_ * sizeof(float));
    RotaryCfg rc = {ROTARY_HALF, (float)ROPE_BASE, NULL};
    rotary_forward(qr, q, &rc, 0, B_, T_, H_, DK);
    rotary_forward(kr, k, &rc, 0, B_, T_, H_, DK);
    for (int b = 0; b < B_; b++)
        for (int h = 0; h < H_; h++)
            for (int t = 0; t < T_; t++)
                for (int c = 0; c < DK; c++) {
                    size_t a = (((size_t)b * H_ + h) * T_ + t) * DK + c;
                    qa[a] = qr[IDX(b, t, h) * DK + c];
                    ka[a] = kr[IDX(b, t, h) * DK + c];
                    va[a] = 0.0f;
                }
    AttnOpts opts = attn_opts_default(DK);
    attention_forward(out, lse, qa, ka, va, &opts, B_, H_, T_, DK);
    double werr = 0, logit[T_];
    for (int b = 0; b < B_; b++)
        for (int h = 0; h < H_; h++) {
            size_t off = ((size_t)b * H_ + h) * T_;
            attention_probs(P, qa + off * DK, ka + off * DK, lse + off, &opts, b, h, H_, T_, DK);
            for (int i = 0; i < T_; i++) {
                const float *qi = q + IDX(b, i, h) * DK;
                double mx = -INFINITY, z = 0;
                for (int j = 0; j <= i; j++) {
                    const float *kj = k + IDX(b, j, h) * DK;
                    double s = 0;  // Re(conj(q~_i) e^{-iw(i-j)} k~_j), the unrotated q, k
                    for (int n = 0; n < HALF; n++) {
                        double c = cos(-omega_(n) * (i - j)), sn = sin(-omega_(n) * (i - j));
                        double kre = c * kj[n] - sn * kj[n + HALF], kim = sn * kj[n] + c * kj[n + HALF];
                        s += (double)qi[n] * kre + (double)qi[n + HALF] * kim;
                    }
                    logit[j] = opts.scale * s;
                    mx = fmax(mx, logit[j]);
                }
                for (int j = 0; j <= i; j++) z += exp(logit[j] - mx);
                for (int j = 0; j <= i; j++) werr = fmax(werr, fabs(P[(size_t)i * T_ + j] - exp(logit[j] - mx) / z));
            }
        }
    CHECK(werr <= 1e-5, "RoPE <-> complex forget gate: attention_probs on rotated q, k == softmax(scale "
          "Re(q~_i^H e^{-iw(i-j)} k~_j)) in double (max err %.3g, tol 1e-5)", werr);
    free(qr);
    free(kr);
    free(qa);
    free(ka);
    free(va);
    free(out);
    free(lse);
    free(P);
}

int main(void) {
    GcRng r = {20260416};
    size_t BTH = (size_t)B_ * T_ * H_;
    float *q = gc_randn(&r, BTH * DK, 1.0f), *k = gc_randn(&r, BTH * DK, 1.0f), *v = gc_randn(&r, BTH * DV, 1.0f);
    // RetNet's decays gamma_h = 1 - 2^(-5-h) (log), and stronger ones so the bias spans several units
    float gh[H_] = {logf(1.0f - 1.0f / 32.0f), logf(0.8f), logf(0.5f)};
    float *gt = malloc(BTH * sizeof(float)), *gc = malloc(BTH * DK * sizeof(float));
    float *beta = malloc(BTH * sizeof(float)), *beta2 = malloc(BTH * sizeof(float));
    // per-token log forget gates logsigmoid(x), x ~ N(2, 1.5^2) (as FoX / Mamba2 produce: <= 0)
    for (size_t i = 0; i < BTH; i++) {
        float x = 2.0f + 1.5f * gc_normal(&r);
        gt[i] = -log1pf(expf(-x));
    }
    for (size_t i = 0; i < BTH * DK; i++) gc[i] = -0.3f * gc_uniform(&r);
    for (size_t i = 0; i < BTH; i++) beta[i] = gc_uniform(&r);
    for (size_t i = 0; i < BTH; i++) beta2[i] = 2.0f * gc_uniform(&r);

    // (a) the diagonal family
    check_linrec_("linear attention (decay none)", LINREC_NONE, q, k, v, NULL);
    check_linrec_("retnet (decay head)", LINREC_HEAD, q, k, v, gh);
    check_linrec_("mamba2 (decay token)", LINREC_TOKEN, q, k, v, gt);
    check_linrec_("gla (decay channel)", LINREC_CHANNEL, q, k, v, gc);

    // (b) their softmax twins, with the same decay numbers
    AttnOpts nope = attn_opts_default(DK);
    check_twin_("NoPE <-> linear attention", LINREC_NONE, q, k, NULL, &nope);
    float slopes[H_];
    for (int h = 0; h < H_; h++) slopes[h] = -gh[h];  // m_h = -log gamma_h
    AttnOpts alibi = attn_opts_default(DK);
    alibi.slopes = slopes;
    check_twin_("ALiBi (m_h = -log gamma_h) <-> retnet", LINREC_HEAD, q, k, gh, &alibi);
    float *F = malloc(BTH * sizeof(float));  // (B,H,T): F_t = sum_{s<=t} g_s, in double then rounded
    for (int b = 0; b < B_; b++)
        for (int h = 0; h < H_; h++) {
            double s = 0;
            for (int t = 0; t < T_; t++) {
                s += gt[IDX(b, t, h)];
                F[((size_t)b * H_ + h) * T_ + t] = (float)s;
            }
        }
    AttnOpts fox = attn_opts_default(DK);
    fox.fgate = F;
    check_twin_("FoX (F = cumsum of the log gates) <-> mamba2/gla scalar gate", LINREC_TOKEN, q, k, gt, &fox);

    // (c) the complex forget gate, with per-token decays and with per-pair decays (gla's `rotate`)
    float *gp = malloc(BTH * DK * sizeof(float));
    for (size_t r0 = 0; r0 < BTH; r0++)
        for (int c = 0; c < DK; c++) gp[r0 * DK + c] = gc[r0 * DK + c % HALF];
    check_complex_("complex gate a_t e^{-iw}, per-token a (mamba2-like)", LINREC_TOKEN, q, k, v, gt);
    check_complex_("complex gate a_t e^{-iw}, per-pair a (gla rotate)", LINREC_CHANNEL, q, k, v, gp);
    check_rope_twin_(q, k);
    free(gp);

    // (a) DeltaNet (PaTH's twin: its transition product), unit q and k as the mixers feed it
    for (size_t rI = 0; rI < BTH; rI++) {
        double sq = 0, sk = 0;
        for (int c = 0; c < DK; c++) sq += (double)q[rI * DK + c] * q[rI * DK + c], sk += (double)k[rI * DK + c] * k[rI * DK + c];
        for (int c = 0; c < DK; c++) q[rI * DK + c] /= (float)sqrt(sq), k[rI * DK + c] /= (float)sqrt(sk);
    }
    check_delta_("deltanet, beta in (0,1)", q, k, v, beta, NULL);
    check_delta_("deltanet, beta in (0,2) (negative eigenvalues)", q, k, v, beta2, NULL);
    check_delta_("gated deltanet (PaTH-FoX's twin), beta in (0,1), token log-decays", q, k, v, beta, gt);

    // (d) PaTH and PaTH-FoX: the same transition products (and FoX's F from the same log-decays) in the logits
    check_path_("PaTH <-> deltanet, beta in (0,2)", q, k, v, beta2, NULL);
    check_path_("PaTH-FoX <-> gated deltanet, beta in (0,1), token log-decays", q, k, v, beta, gt);

    free(q);
    free(k);
    free(v);
    free(gt);
    free(gc);
    free(beta);
    free(beta2);
    free(F);
    return test_summary();
}
