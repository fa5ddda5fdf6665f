#include "nn/groupnorm.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "core/err.h"
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

// rows per block of the backward: each block sums its dw partial over its rows, then the blocks are added in
// order, so dw does not depend on the thread count (a block is a fixed set of rows, whatever thread runs it)
#define GROUPNORM_ROW_BLOCK 32

void groupnorm_backward(float *dx, float *dz, float *dw, const float *dout, const float *x, const float *z,
                        const float *w, const float *mean, const float *rstd, int N, int G, int D,
                        const GroupNormOpts *o) {
    int before = o->gate == GROUPNORM_GATE_BEFORE, after = o->gate == GROUPNORM_GATE_AFTER;
    size_t C = (size_t)G * D;
    int WC = o->wshared ? D : (int)C, nblk = (N + GROUPNORM_ROW_BLOCK - 1) / GROUPNORM_ROW_BLOCK;
    double *part = xcalloc((size_t)nblk * WC, sizeof(double));
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblk; blk++) {
        double *pw = part + (size_t)blk * WC;
        int n1 = (blk + 1) * GROUPNORM_ROW_BLOCK < N ? (blk + 1) * GROUPNORM_ROW_BLOCK : N;
        for (int n = blk * GROUPNORM_ROW_BLOCK; n < n1; n++)
            for (int gi = 0; gi < G; gi++) {
                size_t ng = (size_t)n * G + gi, base = (size_t)n * C + (size_t)gi * D;
                const float *wg = w + (o->wshared ? 0 : (size_t)gi * D);
                double *pg = pw + (o->wshared ? 0 : (size_t)gi * D);
                float m = mean ? mean[ng] : 0.0f, r = rstd[ng];
                double s1 = 0.0, s2 = 0.0;
                for (int i = 0; i < D; i++) {
                    size_t j = base + i;
                    float nv = (u_of_(x, z, j, before) - m) * r;
                    float dy = after ? dout[j] * z[j] * sigm_(z[j]) : dout[j];
                    float dn = dy * wg[i];
                    s1 += dn;
                    s2 += (double)dn * nv;
                    pg[i] += (double)dy * nv;
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
    }
#pragma omp parallel for schedule(static)
    for (int c = 0; c < WC; c++) {
        double acc = 0.0;
        for (int blk = 0; blk < nblk; blk++) acc += part[(size_t)blk * WC + c];
        dw[c] += (float)acc;
    }
    free(part);
}
