#include "nn/groupnorm.h"

#include <math.h>
#include <stddef.h>

#include "nn/fastmath.h"

static inline float sigm_(float x) { return 1.0f / (1.0f + fast_expf_(-x)); }

// the normalised value's input u of element i of a row: x, or x * silu(z) with the gate before the norm
static inline float u_of_(const float *x, const float *z, size_t i, int before) {
    return before ? x[i] * z[i] * sigm_(z[i]) : x[i];
}

void groupnorm_forward(float *out, float *mean, float *rstd, const float *x, const float *z, const float *w, int N,
                       int G, int D, const GroupNormOpts *o) {
    int before = o->gate == GROUPNORM_GATE_BEFORE, after = o->gate == GROUPNORM_GATE_AFTER;
    size_t C = (size_t)G * D;
#pragma omp parallel for schedule(static)
    for (long ng = 0; ng < (long)N * G; ng++) {
        size_t n = (size_t)ng / G, gi = (size_t)ng % G, base = n * C + gi * D;
        const float *wg = w + (o->wshared ? 0 : gi * D);
        double s = 0.0, ss = 0.0;
        for (int i = 0; i < D; i++) {
            double u = u_of_(x, z, base + i, before);
            s += u;
            ss += u * u;
        }
        double m = o->center ? s / D : 0.0, var = ss / D - m * m;
        float r = (float)(1.0 / sqrt((var > 0 ? var : 0) + o->eps));
        if (mean) mean[ng] = (float)m;
        rstd[ng] = r;
        for (int i = 0; i < D; i++) {
            size_t j = base + i;
            float y = (u_of_(x, z, j, before) - (float)m) * r * wg[i];
            out[j] = after ? y * z[j] * sigm_(z[j]) : y;
        }
    }
}

void groupnorm_backward(float *dx, float *dz, float *dw, const float *dout, const float *x, const float *z,
                        const float *w, const float *mean, const float *rstd, int N, int G, int D,
                        const GroupNormOpts *o) {
    int before = o->gate == GROUPNORM_GATE_BEFORE, after = o->gate == GROUPNORM_GATE_AFTER;
    size_t C = (size_t)G * D;
    // pass 1, per (row, group): dx and dz
#pragma omp parallel for schedule(static)
    for (long ng = 0; ng < (long)N * G; ng++) {
        size_t n = (size_t)ng / G, gi = (size_t)ng % G, base = n * C + gi * D;
        const float *wg = w + (o->wshared ? 0 : gi * D);
        float m = mean ? mean[ng] : 0.0f, r = rstd[ng];
        double s1 = 0.0, s2 = 0.0;
        for (int i = 0; i < D; i++) {
            size_t j = base + i;
            float nv = (u_of_(x, z, j, before) - m) * r;
            float dy = after ? dout[j] * z[j] * sigm_(z[j]) : dout[j];
            float dn = dy * wg[i];
            s1 += dn;
            s2 += (double)dn * nv;
        }
        float mdn = o->center ? (float)(s1 / D) : 0.0f, mdnn = (float)(s2 / D);
        for (int i = 0; i < D; i++) {
            size_t j = base + i;
            float nv = (u_of_(x, z, j, before) - m) * r, sg = z ? sigm_(z[j]) : 0.0f;
            float dy = after ? dout[j] * z[j] * sg : dout[j];
            float du = r * (dy * wg[i] - mdn - nv * mdnn);
            if (after) dz[j] += dout[j] * nv * wg[i] * sg * (1.0f + z[j] * (1.0f - sg));  // d silu(z) = s (1 + z (1 - s))
            if (before) {
                dx[j] += du * z[j] * sg;
                dz[j] += du * x[j] * sg * (1.0f + z[j] * (1.0f - sg));
            } else {
                dx[j] += du;
            }
        }
    }
    // pass 2, per weight column: dw summed over rows (and groups when shared) in order
    int WC = o->wshared ? D : (int)C;
#pragma omp parallel for schedule(static)
    for (int c = 0; c < WC; c++) {
        double acc = 0.0;
        for (size_t n = 0; n < (size_t)N; n++)
            for (int gi = (o->wshared ? 0 : c / D); gi < (o->wshared ? G : c / D + 1); gi++) {
                size_t j = n * C + (size_t)gi * D + (size_t)(c % D), ng = n * G + gi;
                float nv = (u_of_(x, z, j, before) - (mean ? mean[ng] : 0.0f)) * rstd[ng];
                float dy = after ? dout[j] * z[j] * sigm_(z[j]) : dout[j];
                acc += (double)dy * nv;
            }
        dw[c] += (float)acc;
    }
}
