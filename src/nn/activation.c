/*
 * Elementwise activations and the residual add (see activation.h).
 *
 * Every loop writes only its own element (or row), so the OpenMP loops are race-free and the results
 * do not depend on the thread count. Small arrays stay serial: forking threads costs more than the
 * work below a few thousand elements.
 */
#include "nn/activation.h"

#include <math.h>
#include <string.h>

#include "nn/fastmath.h"
#include "nn/gelu.h"

// GELU needs erfc/exp with IEEE semantics (llm.c's GELU backward broke under -Ofast, their issue
// #168); we never build with fast-math, and this keeps it that way
#ifdef __FAST_MATH__
#error "nn/activation.c must not be compiled with -ffast-math (GELU/SiLU rely on IEEE erfc/exp)"
#endif

#define ACT_PAR_MIN_ 4096  // below this many elements the loops run serially
#define ZERO_PAR_MIN_ (1 << 18)  // zero_fill: 1 MiB; a memset of less is over before the threads wake
#define ZERO_CHUNK_ ((size_t)1 << 14)  // zero_fill's unit of work: 64 KiB

// ----------------------------------------------------------------------------
// GELU (nn/gelu.h)

void gelu_forward(float *out, const float *inp, size_t n) {
    // out, inp are (n,)
#pragma omp parallel for schedule(static) if (n >= ACT_PAR_MIN_)
    for (size_t i = 0; i < n; i++) out[i] = gelu_value_(inp[i]);
}

void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    // dinp is (n,), accumulated into; inp, dout are (n,)
    // in the forward pass this was: out[i] = gelu(inp[i]); so dinp[i] += gelu'(inp[i]) * dout[i]
#pragma omp parallel for schedule(static) if (n >= ACT_PAR_MIN_)
    for (size_t i = 0; i < n; i++) dinp[i] += gelu_grad_(inp[i]) * dout[i];
}

// ----------------------------------------------------------------------------
// ReLU

void relu_forward(float *out, const float *inp, size_t n) {
    // out, inp are (n,)
#pragma omp parallel for schedule(static) if (n >= ACT_PAR_MIN_)
    for (size_t i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void relu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    // dinp is (n,), accumulated into; inp, dout are (n,)
#pragma omp parallel for schedule(static) if (n >= ACT_PAR_MIN_)
    for (size_t i = 0; i < n; i++) {
        // in the forward pass this was:
        // out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
        dinp[i] += inp[i] > 0.0f ? dout[i] : 0.0f;
    }
}

// ----------------------------------------------------------------------------
// SiLU and SwiGLU

void silu_forward(float *out, const float *inp, size_t n) {
    // out, inp are (n,)
#pragma omp parallel for schedule(static) if (n >= ACT_PAR_MIN_)
    for (size_t i = 0; i < n; i++) out[i] = inp[i] * fast_sigmoidf_(inp[i]);
}

void silu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    // dinp is (n,), accumulated into; inp, dout are (n,)
#pragma omp parallel for schedule(static) if (n >= ACT_PAR_MIN_)
    for (size_t i = 0; i < n; i++) {
        // in the forward pass this was:
        // out[i] = inp[i] * sigmoid(inp[i]);
        dinp[i] += fast_silu_grad_(inp[i]) * dout[i];
    }
}

void swiglu_forward(float *out, const float *inp, int N, int H) {
    // out is (N,H): silu(a) * b
    // inp is (N,2H): each row holds the gate a in [0,H) and the value b in [H,2H)
#pragma omp parallel for schedule(static) if ((size_t)N * H >= ACT_PAR_MIN_)
    for (int n = 0; n < N; n++) {
        const float *a_n = inp + (size_t)n * 2 * H;
        const float *b_n = a_n + H;
        float *out_n = out + (size_t)n * H;
        for (int i = 0; i < H; i++) out_n[i] = a_n[i] * fast_sigmoidf_(a_n[i]) * b_n[i];
    }
}

void swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int H) {
    // dinp is (N,2H), accumulated into: [da | db] per row
    // inp is (N,2H): [a | b] per row, as in the forward
    // dout is (N,H)
#pragma omp parallel for schedule(static) if ((size_t)N * H >= ACT_PAR_MIN_)
    for (int n = 0; n < N; n++) {
        const float *a_n = inp + (size_t)n * 2 * H;
        const float *b_n = a_n + H;
        const float *dout_n = dout + (size_t)n * H;
        float *da_n = dinp + (size_t)n * 2 * H;
        float *db_n = da_n + H;
        for (int i = 0; i < H; i++) {
            float a = a_n[i];
            // in the forward pass this was:
            // out_n[i] = a * sigmoid(a) * b_n[i];
            da_n[i] += fast_silu_grad_(a) * b_n[i] * dout_n[i];
            db_n[i] += a * fast_sigmoidf_(a) * dout_n[i];
        }
    }
}

// ----------------------------------------------------------------------------
// residual

void residual_forward(float *out, const float *a, const float *b, size_t n) {
    // out, a, b are (n,); out may alias a or b (each element is read before it is written)
#pragma omp parallel for schedule(static) if (n >= ACT_PAR_MIN_)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void zero_fill(float *x, size_t n) {
    // x is (n,). A memset per 64 KiB chunk, the chunks split over the threads: a single thread's memset of the
    // model's gradients and the backward's (B,T,C) buffers would run outside every other op's parallel speed-up
    // (docs/results/speed_rounds.md, "16 threads again")
#pragma omp parallel for schedule(static) if (n >= ZERO_PAR_MIN_)
    for (size_t i0 = 0; i0 < n; i0 += ZERO_CHUNK_) {
        size_t len = n - i0 < ZERO_CHUNK_ ? n - i0 : ZERO_CHUNK_;
        memset(x + i0, 0, len * sizeof(float));
    }
}

void residual_backward(float *da, float *db, const float *dout, size_t n) {
    // da, db are (n,), accumulated into; dout is (n,)
#pragma omp parallel for schedule(static) if (n >= ACT_PAR_MIN_)
    for (size_t i = 0; i < n; i++) {
        // in the forward pass this was:
        // out[i] = a[i] + b[i];
        da[i] += dout[i];
        db[i] += dout[i];
    }
}
