// What the GPU kernels' parity tests (tests/gpu/test_gpu_*.c) share: whether there is a GPU, host copies of host and
// device buffers, and the error measure of a result against the host twin's.
#ifndef SEQ_TEST_GPU_KERNEL_CHECK_H
#define SEQ_TEST_GPU_KERNEL_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "gpu/devbuf.h"

// 1 when the build has a usable GPU (the emulator always has; a "#" line then says that what runs is emulated),
// else 0 after a "skipped - name: ..." line, and main returns kc_skipped(): name names the test, what the kernels
static inline int kc_have_device(const char *name, const char *what) {
    if (!gpu_devbuf_have_device()) {
        printf("skipped - %s: no CUDA device on this machine (only the checks that need none ran)\n", name);
        return 0;
    }
#ifdef SEQ_GPU_EMULATE
    printf("# %s emulated on the CPU (tests/gpu/emu)\n", what);
#endif
    return 1;
}

// main's exit status without a GPU: 1 when a check that needs none failed, else 77 (skipped)
static inline int kc_skipped(void) {
    int rc = test_summary();
    return rc ? rc : 77;
}

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

// a new device copy of x (n floats), or NULL for x NULL
static inline float *kc_up(const float *x, size_t n) {
    if (!x) return NULL;
    float *p = gpu_devbuf_alloc(n);
    gpu_devbuf_to_device(p, x, n);
    return p;
}

// 1 when a and b (n floats) hold the same bits, or either is NULL (a result a case does not have)
static inline int kc_same_bits(const float *a, const float *b, size_t n) {
    return !a || !b || !memcmp(a, b, n * sizeof(float));
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
