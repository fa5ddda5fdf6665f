/* What the benchmarks share: the thread count they run with (reported next to every number), the median
 * they report of repeated timings, and filled input buffers. */
#ifndef SEQ_BENCH_H
#define SEQ_BENCH_H

#include <stdlib.h>

#include "core/err.h"
#ifdef _OPENMP
#include <omp.h>
#endif

static inline int bench_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static inline int bench_cmp_double_(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// the median of v (n > 0); sorts v in place
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double_);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// n floats uniform in [lo, hi) from a fixed seed, allocated as the model's buffers are (xmalloc: on a cache line,
// which decides whether a vector load spans two lines)
static inline float *bench_filled(size_t n, unsigned seed, float lo, float hi) {
    float *x = (float *)xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = lo + (hi - lo) * ((seed >> 8) * (1.0f / 16777216.0f));
    }
    return x;
}

#endif
