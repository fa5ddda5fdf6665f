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

// The row loops below take the gate as constants (before, after) and are instantiated once per gate kind
// (GATED_ below), so that the loops without a gate never touch z or dz. One loop that tests the gate per
// element is if-converted by gcc into masked loads and stores of z and dz, which are NULL without a gate:
// AMD documents that the masked-out lanes of VMASKMOVPS may fault (QEMU's Zen 3 model faults them).
#define GATED_(before, after, f, ...) \
    ((before) ? f(__VA_ARGS__, 1, 0) : (after) ? f(__VA_ARGS__, 0, 1) : f(__VA_ARGS__, 0, 0))

// one group's statistics and output: x, z, out at the group's first element, wg its weights
static inline __attribute__((always_inline)) void forward_group_(float *out, float *mean, float *rstd, const float *x,
                                                                  const float *z, const float *wg, size_t ng, int D,
                                                                  const GroupNormOpts *o, int before, int after) {
    double s = 0.0, ss = 0.0;
    for (int i = 0; i < D; i++) {
        double u = u_of_(x, z, i, before);
        s += u;
        ss += u * u;
    }
    double m = o->center ? s / D : 0.0, var = ss / D - m * m;
    float r = (float)(1.0 / sqrt((var > 0 ? var : 0) + o->eps));
    if (mean) mean[ng] = (float)m;
    rstd[ng] = r;
    for (int i = 0; i < D; i++) {
        float y = (u_of_(x, z, i, before) - (float)m) * r * wg[i];
        out[i] = after ? y * z[i] * sigm_(z[i]) : y;
    }
}

void groupnorm_forward(float *out, float *mean, float *rstd, const float *x, const float *z, const float *w, int N,
                       int G, int D, const GroupNormOpts *o) {
    int before = o->gate == GROUPNORM_GATE_BEFORE, after = o->gate == GROUPNORM_GATE_AFTER;
    size_t C = (size_t)G * D;
#pragma omp parallel for schedule(static)
    for (long ng = 0; ng < (long)N * G; ng++) {
        size_t n = (size_t)ng / G, gi = (size_t)ng % G, base = n * C + gi * D;
        const float *wg = w + (o->wshared ? 0 : gi * D), *zg = z ? z + base : NULL;
        GATED_(before, after, forward_group_, out + base, mean, rstd, x + base, zg, wg, (size_t)ng, D, o);
    }
}

// rows per block of the backward: each block sums its dw partial over its rows, then the blocks are added in
// order, so dw does not depend on the thread count (a block is a fixed set of rows, whatever thread runs it)
#define GROUPNORM_ROW_BLOCK 32

// one group's dx, dz (accumulated) and its dw partial pg; every pointer at the group's first element
static inline __attribute__((always_inline)) void backward_group_(float *dx, float *dz, double *pg, const float *dout,
                                                                   const float *x, const float *z, const float *wg,
                                                                   float m, float r, int D, const GroupNormOpts *o,
                                                                   int before, int after) {
    double s1 = 0.0, s2 = 0.0;
    for (int i = 0; i < D; i++) {
        float nv = (u_of_(x, z, i, before) - m) * r;
        float dy = after ? dout[i] * z[i] * sigm_(z[i]) : dout[i];
        float dn = dy * wg[i];
        s1 += dn;
        s2 += (double)dn * nv;
        pg[i] += (double)dy * nv;
    }
    float mdn = o->center ? (float)(s1 / D) : 0.0f, mdnn = (float)(s2 / D);
    for (int i = 0; i < D; i++) {
        float nv = (u_of_(x, z, i, before) - m) * r, sg = before || after ? sigm_(z[i]) : 0.0f;
        float dy = after ? dout[i] * z[i] * sg : dout[i];
        float du = r * (dy * wg[i] - mdn - nv * mdnn);
        if (after) dz[i] += dout[i] * nv * wg[i] * sg * (1.0f + z[i] * (1.0f - sg));  // d silu(z) = s (1 + z (1 - s))
        if (before) {
            dx[i] += du * z[i] * sg;
            dz[i] += du * x[i] * sg * (1.0f + z[i] * (1.0f - sg));
        } else {
            dx[i] += du;
        }
    }
}

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
                const float *zg = z ? z + base : NULL;
                float *dzg = dz ? dz + base : NULL;
                GATED_(before, after, backward_group_, dx + base, dzg, pg, dout + base, x + base, zg, wg,
                       mean ? mean[ng] : 0.0f, rstd[ng], D, o);
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
