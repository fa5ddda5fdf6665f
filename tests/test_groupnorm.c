/*
 * The grouped norm with optional swish gate (nn/groupnorm.h): forward against the formula in double for
 * every mode (RMS / LayerNorm, gate none / after / before, weight shared / per channel), and gradient
 * checks of x, z and w.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "nn/groupnorm.h"
#include "test.h"

typedef struct Ctx {
    int N, G, D;
    GroupNormOpts o;
    float *x, *z, *w, *out, *mean, *rstd, *dout;
} Ctx;

static double loss_(void *p) {
    Ctx *c = p;
    groupnorm_forward(c->out, c->mean, c->rstd, c->x, c->z, c->w, c->N, c->G, c->D, &c->o);
    return gc_dot(c->dout, c->out, (size_t)c->N * c->G * c->D);
}

static double silu_(double v) { return v / (1.0 + exp(-v)); }

int main(void) {
    const char *gate_name[] = {"none", "after", "before"};
    for (int gate = 0; gate < 3; gate++)
        for (int center = 0; center < 2; center++)
            for (int wshared = 0; wshared < 2; wshared++) {
                Ctx c;
                memset(&c, 0, sizeof c);
                c.N = 5, c.G = 3, c.D = 7;
                c.o = (GroupNormOpts){gate, center, wshared, 1e-5f};
                size_t n = (size_t)c.N * c.G * c.D, nw = wshared ? (size_t)c.D : n / c.N;
                GcRng r = {(uint64_t)(10 + gate * 4 + center * 2 + wshared)};
                c.x = gc_randn(&r, n, 1.0f);
                c.z = gate ? gc_randn(&r, n, 1.5f) : NULL;
                c.w = gc_randn(&r, nw, 0.5f);
                for (size_t i = 0; i < nw; i++) c.w[i] += 1.0f;
                for (size_t i = 0; i < n; i++) c.x[i] += 0.3f;  // an offset, so centring matters
                c.out = malloc(n * sizeof(float));
                c.mean = center ? malloc((size_t)c.N * c.G * sizeof(float)) : NULL;
                c.rstd = malloc((size_t)c.N * c.G * sizeof(float));
                c.dout = gc_randn(&r, n, 1.0f);
                loss_(&c);
                double worst = 0;
                for (int row = 0; row < c.N; row++)
                    for (int g = 0; g < c.G; g++) {
                        double u[64], s = 0, ss = 0;
                        for (int i = 0; i < c.D; i++) {
                            size_t j = ((size_t)row * c.G + g) * c.D + i;
                            u[i] = gate == GROUPNORM_GATE_BEFORE ? c.x[j] * silu_(c.z[j]) : c.x[j];
                            s += u[i];
                        }
                        double m = center ? s / c.D : 0;
                        for (int i = 0; i < c.D; i++) ss += (u[i] - m) * (u[i] - m);
                        double rs = 1.0 / sqrt(ss / c.D + 1e-5);
                        for (int i = 0; i < c.D; i++) {
                            size_t j = ((size_t)row * c.G + g) * c.D + i;
                            double y = (u[i] - m) * rs * c.w[wshared ? i : g * c.D + i];
                            if (gate == GROUPNORM_GATE_AFTER) y *= silu_(c.z[j]);
                            worst = fmax(worst, fabs(y - c.out[j]) / (1 + fabs(y)));
                        }
                    }
                CHECK(worst < 1e-5, "groupnorm forward == formula: gate %s, %s, weight %s (max rel err %.2g)", gate_name[gate],
                      center ? "layernorm" : "rmsnorm", wshared ? "shared" : "per channel", worst);
                float *dx = calloc(n, sizeof(float)), *dz = calloc(n, sizeof(float)), *dw = calloc(nw, sizeof(float));
                groupnorm_backward(dx, gate ? dz : NULL, dw, c.dout, c.x, c.z, c.w, c.mean, c.rstd, c.N, c.G, c.D, &c.o);
                char name[128];
                snprintf(name, sizeof name, "groupnorm dx (gate %s, %s, weight %s)", gate_name[gate],
                         center ? "layernorm" : "rmsnorm", wshared ? "shared" : "per channel");
                gradcheck_buffer(name, c.x, dx, n, loss_, &c, 3e-3, 1e-2, 1e-3, 4, 6, 1);
                if (gate) {
                    name[11] = 'z';
                    gradcheck_buffer(name, c.z, dz, n, loss_, &c, 3e-3, 1e-2, 1e-3, 4, 6, 2);
                }
                name[11] = 'w';
                gradcheck_buffer(name, c.w, dw, nw, loss_, &c, 3e-3, 1e-2, 1e-3, 4, 6, 3);
                free(c.x); free(c.z); free(c.w); free(c.out); free(c.mean); free(c.rstd); free(c.dout);
                free(dx); free(dz); free(dw);
            }
    return test_summary();
}
