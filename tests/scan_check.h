/*
 * What the chunked-scan tests (test_linrec.c, test_delta.c) compare with: a float result against a double
 * reference relative to the reference's largest magnitude, and whether a buffer is all finite; the unit rows the
 * delta rule's mixers hand their engine (test_delta.c, gpu/test_gpu_delta.c).
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

// rows of n floats scaled to unit length, as the mixers L2-normalise q and k
static inline void scan_l2_rows(float *x, size_t rows, int n) {
    for (size_t r = 0; r < rows; r++) {
        double s = 0;
        for (int i = 0; i < n; i++) s += (double)x[r * n + i] * x[r * n + i];
        float inv = (float)(1.0 / sqrt(s + 1e-12));
        for (int i = 0; i < n; i++) x[r * n + i] *= inv;
    }
}

#endif
