/*
 * Rotary position embedding: cos/sin tables built in double, then one rotation per channel pair.
 * See rotary.h for the layouts and the frequency conventions.
 */
#include "nn/rotary.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "core/err.h"

RotaryCfg rotary_cfg_default(void) {
    RotaryCfg cfg = {ROTARY_HALF, ROTARY_BASE_DEFAULT, NULL};
    return cfg;
}

void rotary_sc_bank(float *freqs, float *decay, int NH, int half, double base, double damping, int n_zero) {
    int M = NH * half;
    for (int h = 0; h < NH; h++) {
        double wmax = 0;
        for (int m = 0; m < half; m++) {
            int g = h * half + m;  // position in the slowest-first master order
            double w = pow(base, -(double)(M - 1 - g) / M);
            if (freqs) freqs[g] = (float)w;
            if (w > wmax) wmax = w;
        }
        if (decay) decay[h] = h < n_zero ? 0.0f : (float)(damping * wmax);
    }
}

// ----------------------------------------------------------------------------
// cos/sin tables

void rotary_table_init(RotaryTable *tab, const RotaryCfg *cfg, int pos0, int T, int NH, int HS) {
    // freqs, when given, is (NH, HS/2)
    int half = HS / 2;
    int nhead = cfg->freqs ? NH : 1;  // heads that have their own spectrum
    tab->layout = cfg->layout;
    tab->T = T;
    tab->NH = NH;
    tab->HS = HS;
    tab->pos0 = pos0;
    tab->head_stride = cfg->freqs ? half : 0;
    size_t n = (size_t)T * nhead * half;
    tab->cos = xmalloc((n ? n : 1) * sizeof(float));
    tab->sin = xmalloc((n ? n : 1) * sizeof(float));

    // the default spectrum stays in double: rounding w_i to float first would cost pos * 6e-8 rad
    double *w = xmalloc((size_t)(nhead * half > 0 ? nhead * half : 1) * sizeof(double));
    for (int h = 0; h < nhead; h++) {
        for (int i = 0; i < half; i++) {
            w[h * half + i] = cfg->freqs ? (double)cfg->freqs[h * half + i]
                                         : pow((double)cfg->base, -2.0 * i / (double)HS);
        }
    }
    // sin/cos in double dominate here; rows are independent
    #pragma omp parallel for
    for (int t = 0; t < T; t++) {
        double pos = (double)pos0 + (double)t;
        float *cos_t = tab->cos + (size_t)t * nhead * half;
        float *sin_t = tab->sin + (size_t)t * nhead * half;
        for (int k = 0; k < nhead * half; k++) {
            double angle = pos * w[k];
            cos_t[k] = (float)cos(angle);
            sin_t[k] = (float)sin(angle);
        }
    }
    free(w);
}

void rotary_table_free(RotaryTable *tab) {
    free(tab->cos);
    free(tab->sin);
    tab->cos = tab->sin = NULL;
}

// ----------------------------------------------------------------------------
// forward and backward

// one (position, head) row of HS channels: pair i is channels (i*st, i*st + off), i.e. st = 2, off = 1
// (interleaved) or st = 1, off = HS/2 (half-split). The caller passes st as a literal, so each layout gets
// its own vectorised loop (a layout test inside the loop kept it scalar).
static inline __attribute__((always_inline)) void rotate_row_(float *y, const float *x, const float *c,
                                                              const float *s, int half, int st, int off,
                                                              int inverse, int accumulate) {
    for (int i = 0; i < half; i++) {
        int i0 = i * st, i1 = i * st + off;
        float x0 = x[i0], x1 = x[i1];
        // forward: y0 = x0 c - x1 s, y1 = x0 s + x1 c; its gradient is the transposed rotation
        float y0 = inverse ? x0 * c[i] + x1 * s[i] : x0 * c[i] - x1 * s[i];
        float y1 = inverse ? x1 * c[i] - x0 * s[i] : x0 * s[i] + x1 * c[i];
        if (accumulate) {
            y[i0] += y0;
            y[i1] += y1;
        } else {
            y[i0] = y0;
            y[i1] = y1;
        }
    }
}

// One walker for all four public variants, specialised by constant flags (always inlined):
//   inverse     the rotation R (forward) or its transpose R^T = R^{-1} (backward)
//   in_heads    inp is (B,NH,T,HS) instead of (B,T,NH,HS)       out_heads  likewise for out
//   accumulate  out += instead of out = (llm.c backward convention)
// Both reads of a pair happen before either write, which is what makes the in-place forward safe.
static inline __attribute__((always_inline)) void rotary_apply_(float *out, const float *inp, const RotaryTable *tab,
                                                                 int B, int inverse, int in_heads, int out_heads,
                                                                 int accumulate) {
    int T = tab->T, NH = tab->NH, HS = tab->HS, half = HS / 2;
    size_t row_cs = (size_t)(tab->head_stride ? NH : 1) * half;  // table floats per position
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const float *cos_t = tab->cos + (size_t)t * row_cs;
            const float *sin_t = tab->sin + (size_t)t * row_cs;
            for (int h = 0; h < NH; h++) {
                size_t bthd = (((size_t)b * T + t) * NH + h) * HS, bhtd = (((size_t)b * NH + h) * T + t) * HS;
                const float *x = inp + (in_heads ? bhtd : bthd);
                float *y = out + (out_heads ? bhtd : bthd);
                const float *cos_th = cos_t + h * tab->head_stride;
                const float *sin_th = sin_t + h * tab->head_stride;
                if (tab->layout == ROTARY_INTERLEAVED) {
                    rotate_row_(y, x, cos_th, sin_th, half, 2, 1, inverse, accumulate);
                } else {
                    rotate_row_(y, x, cos_th, sin_th, half, 1, half, inverse, accumulate);
                }
            }
        }
    }
}

void rotary_forward_table(float *out, const float *inp, const RotaryTable *tab, int B) {
    rotary_apply_(out, inp, tab, B, 0, 0, 0, 0);  // out, inp (B,T,NH,HS); out may be inp
}

void rotary_backward_table(float *dinp, const float *dout, const RotaryTable *tab, int B) {
    rotary_apply_(dinp, dout, tab, B, 1, 0, 0, 1);  // dinp += R^T dout, both (B,T,NH,HS)
}

void rotary_forward_heads_table(float *out, const float *inp, const RotaryTable *tab, int B) {
    rotary_apply_(out, inp, tab, B, 0, 0, 1, 0);  // out (B,NH,T,HS) = R inp (B,T,NH,HS)
}

void rotary_backward_heads_table(float *dinp, const float *dout, const RotaryTable *tab, int B) {
    rotary_apply_(dinp, dout, tab, B, 1, 1, 0, 0);  // dinp (B,T,NH,HS) = R^T dout (B,NH,T,HS), written
}

void rotary_forward(float *out, const float *inp, const RotaryCfg *cfg, int pos0, int B, int T, int NH, int HS) {
    // out, inp are (B,T,NH,HS); out may be inp
    RotaryTable tab;
    rotary_table_init(&tab, cfg, pos0, T, NH, HS);
    rotary_forward_table(out, inp, &tab, B);
    rotary_table_free(&tab);
}

void rotary_backward(float *dinp, const float *dout, const RotaryCfg *cfg, int pos0, int B, int T, int NH, int HS) {
    // dinp, dout are (B,T,NH,HS)
    RotaryTable tab;
    rotary_table_init(&tab, cfg, pos0, T, NH, HS);
    rotary_backward_table(dinp, dout, &tab, B);
    rotary_table_free(&tab);
}
