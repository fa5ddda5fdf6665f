#include "nn/bla.h"

#include <math.h>
#include <string.h>



// the number of slots position t sees: the dilated times grow with s, so the visible slots are a prefix
static int visible_(const BlaDims *d, long t) {
    int S = bla_slots(d), n = 0;
    while (n < S && bla_dilated_time(d, n) <= t) n++;
    return n;
}

void bla_coeffs(float *c, float *g, long t0, int n, const BlaDims *d) {
    int S = bla_slots(d);
    for (int i = 0; i < n; i++)
        for (int s = 0; s < S; s++) {
            double w = bla_coeff(t0 + i, s, S, d->M, d->period);
            c[(size_t)i * S + s] = (float)w;
            if (g) g[(size_t)i * S + s] = (float)log(fmax(1.0 - w, BLA_LOG_FLOOR));
        }
}

static size_t rows_(const BlaDims *d) { return (size_t)d->B * d->T * d->H; }

size_t bla_work_size(const BlaDims *d, int backward) {
    size_t S = (size_t)bla_slots(d), n = rows_(d) * S;
    // the (T,S) tables of c and g, their broadcasts to every (b,h); backward: dp, dscores, a sink for the
    // gradients of the fixed write weights
    return 2 * (size_t)d->T * S + 2 * n + (backward ? 3 * n : 0);
}

size_t bla_ckpt_size(const BlaDims *d) {
    LinrecDims d1 = bla_pass_dims(d, 1, d->B, d->T), d2 = bla_pass_dims(d, 2, d->B, d->T);
    return linrec_ckpt_size(&d1) + linrec_ckpt_size(&d2);
}

size_t bla_state_size(const BlaDims *d) { return (size_t)d->H * bla_slots(d) * (d->Dk + d->Dv); }

void bla_state_init(float *state, const BlaDims *d) {
    memset(state, 0, (size_t)d->B * bla_state_size(d) * sizeof(float));
}

// the weights c and log-decays g of every (b,t,h) row, from the (T,S) tables: cb, gb (B,T,H,S)
static void coeffs_broadcast_(float *cb, float *gb, float *ct, float *gt, const BlaDims *d) {
    int S = bla_slots(d);
    bla_coeffs(ct, d->decay ? gt : NULL, 0, d->T, d);
    size_t rows = rows_(d);
#pragma omp parallel for if (rows * S >= 65536)
    for (size_t r = 0; r < rows; r++) {
        size_t t = (r / d->H) % d->T;
        memcpy(cb + r * S, ct + t * S, S * sizeof(float));
        if (d->decay) memcpy(gb + r * S, gt + t * S, S * sizeof(float));
    }
}

// p = softmax over the slots position t sees of the scores in p (in place); the hidden slots get 0
static void slot_softmax_(float *p, long t, int H, const BlaDims *d) {
    int S = bla_slots(d), n = visible_(d, t);
    for (int h = 0; h < H; h++) {
        float *x = p + (size_t)h * S, mx = x[0];
        for (int s = 1; s < n; s++) mx = fmaxf(mx, x[s]);
        double sum = 0.0;
        for (int s = 0; s < n; s++) {
            x[s] = expf(x[s] - mx);
            sum += x[s];
        }
        float inv = (float)(1.0 / sum);
        for (int s = 0; s < n; s++) x[s] *= inv;
        for (int s = n; s < S; s++) x[s] = 0.0f;
    }
}

void bla_forward(float *o, float *p, float *ckpt, const float *q, const float *k, const float *v, float *work,
                 const BlaDims *d) {
    int S = bla_slots(d);
    size_t n = rows_(d) * S;
    float *ct = work, *gt = ct + (size_t)d->T * S, *cb = gt + (size_t)d->T * S, *gb = cb + n;
    coeffs_broadcast_(cb, gb, ct, gt, d);
    LinrecDims d1 = bla_pass_dims(d, 1, d->B, d->T), d2 = bla_pass_dims(d, 2, d->B, d->T);
    float *ck1 = ckpt, *ck2 = ckpt ? ckpt + linrec_ckpt_size(&d1) : NULL;
    const float *g = d->decay ? gb : NULL;
    // pass 1: the scores q . Kt_t[s], Kt fed by k with weights c (the slots are its value side)
    linrec_forward(p, NULL, ck1, NULL, q, k, cb, g, NULL, &d1);
#pragma omp parallel for if (n >= 65536)
    for (long bt = 0; bt < (long)d->B * d->T; bt++) slot_softmax_(p + (size_t)bt * d->H * S, bt % d->T, d->H, d);
    // pass 2: o = sum_s p[s] Vt_t[s], Vt fed by v with weights c (the slots are its key side)
    linrec_forward(o, NULL, ck2, NULL, p, cb, v, g, NULL, &d2);
}

void bla_backward(float *dq, float *dk, float *dv, const float *dout, const float *p, const float *ckpt,
                  const float *q, const float *k, const float *v, float *work, const BlaDims *d) {
    int S = bla_slots(d);
    size_t n = rows_(d) * S;
    float *ct = work, *gt = ct + (size_t)d->T * S, *cb = gt + (size_t)d->T * S, *gb = cb + n;
    float *dp = gb + n, *dsc = dp + n, *sink = dsc + n;
    coeffs_broadcast_(cb, gb, ct, gt, d);
    LinrecDims d1 = bla_pass_dims(d, 1, d->B, d->T), d2 = bla_pass_dims(d, 2, d->B, d->T);
    const float *ck1 = ckpt, *ck2 = ckpt + linrec_ckpt_size(&d1), *g = d->decay ? gb : NULL;
    memset(dp, 0, n * sizeof(float));
    memset(sink, 0, n * sizeof(float));
    linrec_backward(dp, sink, dv, NULL, NULL, dout, NULL, ck2, p, cb, v, g, NULL, &d2);
    // softmax: dscore = p (.) (dp - p . dp); hidden slots have p = 0, so they get none
#pragma omp parallel for if (n >= 65536)
    for (size_t r = 0; r < rows_(d); r++) {
        const float *pr = p + r * S, *dpr = dp + r * S;
        double dot = 0.0;
        for (int s = 0; s < S; s++) dot += (double)pr[s] * dpr[s];
        for (int s = 0; s < S; s++) dsc[r * S + s] = (float)(pr[s] * (dpr[s] - dot));
    }
    linrec_backward(dq, dk, sink, NULL, NULL, dsc, NULL, ck1, q, k, cb, g, NULL, &d1);
}

// per sequence: [pass 1's states (H, Dk*S) | pass 2's states (H, S*Dv)]
void bla_step(float *o, float *p, float *state, const float *q, const float *k, const float *v, long t,
              const BlaDims *d) {
    int S = bla_slots(d), H = d->H;
    size_t ss = bla_state_size(d), half1 = (size_t)H * d->Dk * S;
    float c[BLA_MAX_HS], g[BLA_MAX_HS], sc[BLA_MAX_HS];  // (H,S) rows
    LinrecDims d1 = bla_pass_dims(d, 1, 1, 1), d2 = bla_pass_dims(d, 2, 1, 1);
    bla_coeffs(c, d->decay ? g : NULL, t, 1, d);  // the same weights for every sequence and head
    for (int h = 1; h < H; h++) {
        memcpy(c + (size_t)h * S, c, S * sizeof(float));
        if (d->decay) memcpy(g + (size_t)h * S, g, S * sizeof(float));
    }
    const float *gg = d->decay ? g : NULL;
    for (int b = 0; b < d->B; b++) {
        float *st = state + (size_t)b * ss;
        linrec_step(sc, NULL, st, q + (size_t)b * H * d->Dk, k + (size_t)b * H * d->Dk, c, gg, NULL, &d1);
        slot_softmax_(sc, t, H, d);
        linrec_step(o + (size_t)b * H * d->Dv, NULL, st + half1, sc, c, v + (size_t)b * H * d->Dv, gg, NULL, &d2);
        if (p) memcpy(p + (size_t)b * H * S, sc, (size_t)H * S * sizeof(float));
    }
}
