/*
 * Gradient checks by finite differences, for every forward/backward pair.
 *
 * The caller wraps its op as a scalar loss L = sum(dy * f(inputs)) with a fixed random dy, evaluated in
 * double from the op's float outputs; the op's backward with that dy gives the analytic gradient of L.
 * gradcheck_buffer() compares it with central differences (L(p + h e) - L(p - h e)) / 2h
 *   - along n_dirs random unit directions e over the whole buffer (catches any wrong element), and
 *   - along single coordinates for the first n_elems elements (pinpoints which one is wrong),
 * passing when |numeric - analytic| <= atol + rtol * max(|numeric|, |analytic|). Prints one
 * ok/not ok line per buffer through the test.h harness.
 */
#ifndef SEQ_GRADCHECK_H
#define SEQ_GRADCHECK_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include "test.h"

typedef double (*GcLossFn)(void *ctx);  // runs the forward and returns L

typedef struct GcRng { uint64_t s; } GcRng;

static inline uint64_t gc_next_(GcRng *r) {
    uint64_t x = (r->s += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
static inline float gc_uniform(GcRng *r) { return (float)((gc_next_(r) >> 40) * (1.0 / 16777216.0)); }  // [0,1)
static inline float gc_normal(GcRng *r) {
    float u = gc_uniform(r) + 1e-7f, v = gc_uniform(r);
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}
static inline void gc_fill_normal(GcRng *r, float *x, size_t n, float std) {
    for (size_t i = 0; i < n; i++) x[i] = std * gc_normal(r);
}

// a malloc'd array of n values ~ N(0, std^2)
static inline float *gc_randn(GcRng *r, size_t n, float std) {
    float *x = (float *)malloc((n ? n : 1) * sizeof(float));
    gc_fill_normal(r, x, n, std);
    return x;
}

// L = sum(dy * y) in double: the loss whose gradient w.r.t. y is dy
static inline double gc_dot(const float *dy, const float *y, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)dy[i] * (double)y[i];
    return s;
}

static inline int gradcheck_buffer(const char *name, float *p, const float *grad, size_t n, GcLossFn loss, void *ctx,
                                   double h, double rtol, double atol, int n_dirs, int n_elems, uint64_t seed) {
    GcRng rng = {seed};
    float *saved = (float *)malloc(n * sizeof(float)), *dir = (float *)malloc(n * sizeof(float));
    memcpy(saved, p, n * sizeof(float));
    double worst = 0;
    char where[160] = "";
    int ok = 1;
    int total = n_dirs + (n_elems < (int)n ? n_elems : (int)n);
    for (int k = 0; k < total; k++) {
        if (k < n_dirs) {
            double norm = 0;
            for (size_t i = 0; i < n; i++) { dir[i] = gc_normal(&rng); norm += (double)dir[i] * dir[i]; }
            norm = sqrt(norm);
            for (size_t i = 0; i < n; i++) dir[i] = (float)(dir[i] / norm);
        } else {
            memset(dir, 0, n * sizeof(float));
            dir[k - n_dirs] = 1.0f;
        }
        double analytic = 0;
        for (size_t i = 0; i < n; i++) analytic += (double)grad[i] * dir[i];
        for (size_t i = 0; i < n; i++) p[i] = saved[i] + (float)(h * dir[i]);
        double lp = loss(ctx);
        for (size_t i = 0; i < n; i++) p[i] = saved[i] - (float)(h * dir[i]);
        double lm = loss(ctx);
        memcpy(p, saved, n * sizeof(float));
        double numeric = (lp - lm) / (2 * h);
        double err = fabs(numeric - analytic), scale = fmax(fabs(numeric), fabs(analytic));
        double excess = err / (atol + rtol * scale);
        if (excess > worst) {
            worst = excess;
            snprintf(where, sizeof where, "%s %d: numeric %.6g analytic %.6g", k < n_dirs ? "direction" : "element",
                     k < n_dirs ? k : k - n_dirs, numeric, analytic);
        }
        if (excess > 1.0) ok = 0;
    }
    loss(ctx);  // leave the op's outputs as they were for the unperturbed inputs
    free(saved);
    free(dir);
    char what[512];
    snprintf(what, sizeof what, "gradcheck %.200s (%zu values; worst %.2f of tolerance: %s)", name, n, worst, where);
    test_report_(ok, __FILE__, __LINE__, ok ? "" : "exceeds atol + rtol*|g|", what);
    return ok;
}

#endif
