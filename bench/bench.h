/* What the benchmarks share: the thread count they run with (reported next to every number), and the
 * median they report of repeated timings. */
#ifndef SEQ_BENCH_H
#define SEQ_BENCH_H

#include <stdlib.h>
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

#endif
