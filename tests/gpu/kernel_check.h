// What the GPU kernels' parity tests (tests/gpu/test_gpu_*.c) share: host copies of host and device buffers, and
// the error measure of a result against the host twin's.
#ifndef SEQ_TEST_GPU_KERNEL_CHECK_H
#define SEQ_TEST_GPU_KERNEL_CHECK_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/devbuf.h"

// a new host copy of x (n floats), or NULL for x NULL
static inline float *kc_copy(const float *x, size_t n) {
    if (!x) return NULL;
    float *y = malloc((n ? n : 1) * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

// a new host copy of the device's x (n floats), or NULL for x NULL
static inline float *kc_down(const float *x, size_t n) {
    if (!x) return NULL;
    float *h = malloc((n ? n : 1) * sizeof(float));
    gpu_devbuf_to_host(h, x, n);
    return h;
}

// max |got - want| / max |want - base| over n (base NULL: zeros; gradient buffers pre-filled with base measure what
// the backward added); INFINITY when got holds a NaN (fmax would drop it)
static inline double kc_rel_err(const float *got, const float *want, const float *base, size_t n) {
    double e = 0.0, s = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (got[i] != got[i]) return INFINITY;
        e = fmax(e, fabs((double)got[i] - want[i]));
        s = fmax(s, fabs((double)want[i] - (base ? base[i] : 0.0)));
    }
    return s > 0 ? e / s : e;
}

#endif
