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

// channel offsets of pair i: (2i, 2i+1) or (i, i+HS/2)
static inline void rotary_pair_(int layout, int HS, int i, int *i0, int *i1) {
    if (layout == ROTARY_INTERLEAVED) {
        *i0 = 2 * i;
        *i1 = 2 * i + 1;
    } else {
        *i0 = i;
        *i1 = i + HS / 2;
    }
}

void rotary_forward_table(float *out, const float *inp, const RotaryTable *tab, int B) {
    // out, inp are (B,T,NH,HS); out may be inp
    int T = tab->T, NH = tab->NH, HS = tab->HS, half = HS / 2;
    size_t row_cs = (size_t)(tab->head_stride ? NH : 1) * half;  // table floats per position
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const float *inp_bt = inp + ((size_t)b * T + t) * NH * HS;
            float *out_bt = out + ((size_t)b * T + t) * NH * HS;
            const float *cos_t = tab->cos + (size_t)t * row_cs;
            const float *sin_t = tab->sin + (size_t)t * row_cs;
            for (int h = 0; h < NH; h++) {
                const float *inp_bth = inp_bt + h * HS;
                float *out_bth = out_bt + h * HS;
                const float *cos_th = cos_t + h * tab->head_stride;
                const float *sin_th = sin_t + h * tab->head_stride;
                for (int i = 0; i < half; i++) {
                    int i0, i1;
                    rotary_pair_(tab->layout, HS, i, &i0, &i1);
                    // both reads happen before either write, which is what makes in place safe
                    float x0 = inp_bth[i0], x1 = inp_bth[i1];
                    float c = cos_th[i], s = sin_th[i];
                    out_bth[i0] = x0 * c - x1 * s;
                    out_bth[i1] = x0 * s + x1 * c;
                }
            }
        }
    }
}

void rotary_backward_table(float *dinp, const float *dout, const RotaryTable *tab, int B) {
    // dinp, dout are (B,T,NH,HS)
    int T = tab->T, NH = tab->NH, HS = tab->HS, half = HS / 2;
    size_t row_cs = (size_t)(tab->head_stride ? NH : 1) * half;
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float *dinp_bt = dinp + ((size_t)b * T + t) * NH * HS;
            const float *dout_bt = dout + ((size_t)b * T + t) * NH * HS;
            const float *cos_t = tab->cos + (size_t)t * row_cs;
            const float *sin_t = tab->sin + (size_t)t * row_cs;
            for (int h = 0; h < NH; h++) {
                float *dinp_bth = dinp_bt + h * HS;
                const float *dout_bth = dout_bt + h * HS;
                const float *cos_th = cos_t + h * tab->head_stride;
                const float *sin_th = sin_t + h * tab->head_stride;
                for (int i = 0; i < half; i++) {
                    int i0, i1;
                    rotary_pair_(tab->layout, HS, i, &i0, &i1);
                    float dy0 = dout_bth[i0], dy1 = dout_bth[i1];
                    float c = cos_th[i], s = sin_th[i];
                    // in the forward pass this was:
                    // out_bth[i0] = x0 * c - x1 * s;
                    // out_bth[i1] = x0 * s + x1 * c;
                    // so the gradient is the transposed (= inverse) rotation:
                    dinp_bth[i0] += dy0 * c + dy1 * s;
                    dinp_bth[i1] += dy1 * c - dy0 * s;
                }
            }
        }
    }
}

void rotary_forward_heads_table(float *out, const float *inp, const RotaryTable *tab, int B) {
    // out is (B,NH,T,HS); inp is (B,T,NH,HS)
    int T = tab->T, NH = tab->NH, HS = tab->HS, half = HS / 2;
    size_t row_cs = (size_t)(tab->head_stride ? NH : 1) * half;
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const float *inp_bt = inp + ((size_t)b * T + t) * NH * HS;
            const float *cos_t = tab->cos + (size_t)t * row_cs;
            const float *sin_t = tab->sin + (size_t)t * row_cs;
            for (int h = 0; h < NH; h++) {
                const float *inp_bth = inp_bt + h * HS;
                float *out_bht = out + (((size_t)b * NH + h) * T + t) * HS;
                const float *cos_th = cos_t + h * tab->head_stride;
                const float *sin_th = sin_t + h * tab->head_stride;
                for (int i = 0; i < half; i++) {
                    int i0, i1;
                    rotary_pair_(tab->layout, HS, i, &i0, &i1);
                    // the same expressions as rotary_forward_table, so the same bits
                    float x0 = inp_bth[i0], x1 = inp_bth[i1];
                    float c = cos_th[i], s = sin_th[i];
                    out_bht[i0] = x0 * c - x1 * s;
                    out_bht[i1] = x0 * s + x1 * c;
                }
            }
        }
    }
}

void rotary_backward_heads_table(float *dinp, const float *dout, const RotaryTable *tab, int B) {
    // dinp is (B,T,NH,HS), written; dout is (B,NH,T,HS)
    int T = tab->T, NH = tab->NH, HS = tab->HS, half = HS / 2;
    size_t row_cs = (size_t)(tab->head_stride ? NH : 1) * half;
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float *dinp_bt = dinp + ((size_t)b * T + t) * NH * HS;
            const float *cos_t = tab->cos + (size_t)t * row_cs;
            const float *sin_t = tab->sin + (size_t)t * row_cs;
            for (int h = 0; h < NH; h++) {
                float *dinp_bth = dinp_bt + h * HS;
                const float *dout_bht = dout + (((size_t)b * NH + h) * T + t) * HS;
                const float *cos_th = cos_t + h * tab->head_stride;
                const float *sin_th = sin_t + h * tab->head_stride;
                for (int i = 0; i < half; i++) {
                    int i0, i1;
                    rotary_pair_(tab->layout, HS, i, &i0, &i1);
                    float dy0 = dout_bht[i0], dy1 = dout_bht[i1];
                    float c = cos_th[i], s = sin_th[i];
                    // the transposed (= inverse) rotation, as in rotary_backward_table
                    dinp_bth[i0] = dy0 * c + dy1 * s;
                    dinp_bth[i1] = dy1 * c - dy0 * s;
                }
            }
        }
    }
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
