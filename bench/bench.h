/* What the benchmarks share: the thread count they run with (reported next to every number). */
#ifndef SEQ_BENCH_H
#define SEQ_BENCH_H

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

#endif
