/*
 * What the chunked-scan tests (test_linrec.c, test_delta.c) compare with: a float result against a double
 * reference relative to the reference's largest magnitude, and whether a buffer is all finite.
 */
#ifndef SEQ_TEST_SCAN_CHECK_H
#define SEQ_TEST_SCAN_CHECK_H

#include <math.h>
#include <stddef.h>

static inline double scan_max_abs(const double *x, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++) w = fmax(w, fabs(x[i]));
    return w;
}

// max |got - want| / max |want| (the absolute error when want is all zero)
static inline double scan_rel_err(const float *got, const double *want, size_t n) {
    double e = 0, s = scan_max_abs(want, n);
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs((double)got[i] - want[i]));
    return s > 0 ? e / s : e;
}

static inline int scan_all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

#endif
