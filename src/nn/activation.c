/*
 * Elementwise activations and the residual add (see activation.h).
 *
 * Every loop writes only its own element (or row), so the OpenMP loops are race-free and the results
 * do not depend on the thread count. Small arrays stay serial: forking threads costs more than the
 * work below a few thousand elements.
 */
#include "nn/activation.h"

#include <math.h>

#include "nn/fastmath.h"

// GELU needs erfc/exp with IEEE semantics (llm.c's GELU backward broke under -Ofast, their issue
// #168); we never build with fast-math, and this keeps it that way
#ifdef __FAST_MATH__
#error "nn/activation.c must not be compiled with -ffast-math (GELU/SiLU rely on IEEE erfc/exp)"
#endif

#define ACT_PAR_MIN_ 4096  // below this many elements the loops run serially

#define INV_SQRT_2PI_ 0.39894228040143267794f

// ----------------------------------------------------------------------------
// GELU
//
// gelu(x) = x Phi(x), Phi the standard normal CDF; d gelu / dx = Phi(x) + x phi(x). Both come from
// the upper tail Q(u) = P(X > u) = 0.5 erfc(u/sqrt2) at u = |x|: Phi(x) = Q(u) for x < 0 (kept to full
// relative precision in the tail, where 1 + erf(x/sqrt2) would cancel) and 1 - Q(u) for x >= 0.
// Q(u) = exp(-u^2/2) * M(u), with M(u) = Q(u) exp(u^2/2) the Mills-ratio-like factor that is smooth
// and slowly varying (0.5 at 0, ~1/u for large u). M is approximated as t P(t), t = 4 / (4 + u) in
// (0, 1]: M/t is analytic in t on [0, 1], also at t -> 0 (u -> inf), so one polynomial covers every u
// with no branches (the idea of Numerical Recipes' erfcc, t = 1/(1 + z/2), but with the polynomial as
// a factor rather than in the exponent, so one exp serves Q and phi). P: degree-10 Chebyshev fit of
// M(u(t))/t on t in [4/(4 + 13.25), 1] (u <= 13.25, past which Q < FLT_MIN) made with mpmath
// (chebyfit, erfc to 40 digits), relative error 1.9e-9, coefficients rounded to float, highest first;
// |coefficients| sum to 1.75 against P >= 0.32, so the float Horner sum loses < 3 ulp. Working from x
// rather than z = x/sqrt2 also avoids rounding z, which erfcf(z) would amplify by 2z^2 in the tail.
// Measured: Phi within 4 ulp relative of erfc in double over the whole float range (test_nn_ops.c).

// exp(-u^2/2) for u >= 0: u^2 = s + s_lo exactly (fma), exp(-s/2) from an exact argument, and the
// exp(-s_lo/2) = 1 - s_lo/2 correction restores the bits the rounding of u^2 would have cost (without
// it, exp(-u^2/2) would be off by up to u^2 * 2^-25 relative: 30 ulp at u = 13). u is capped at 14
// (exp(-98) = 0 already) so that inf and huge u give 0 rather than inf - inf = NaN in s_lo.
static inline float exp_neg_half_sq_(float u) {
    float uc = u > 14.0f ? 14.0f : u;
    float s = uc * uc;
    float s_lo = fmaf(uc, uc, -s);
    float e = fast_expf_(-0.5f * s);
    return fmaf(e, -0.5f * s_lo, e);
}

// M(u) = t P(t), t = 4 / (4 + u), as described above
static inline float gelu_mills_(float u) {
    float t = 4.0f / (4.0f + u);
    float p = -1.420613471e-02f;
    p = fmaf(p, t, 1.020452306e-01f);
    p = fmaf(p, t, -2.888829410e-01f);
    p = fmaf(p, t, 3.974660933e-01f);
    p = fmaf(p, t, -3.097263873e-01f);
    p = fmaf(p, t, 2.332898229e-01f);
    p = fmaf(p, t, -1.040423196e-02f);
    p = fmaf(p, t, 1.004146263e-01f);
    p = fmaf(p, t, 9.022414684e-02f);
    p = fmaf(p, t, 1.000582203e-01f);
    p = fmaf(p, t, 9.972155094e-02f);
    return t * p;
}

// Phi(x), given e = exp(-x^2/2)
static inline float gelu_cdf_(float x, float e) {
    float q = e * gelu_mills_(fabsf(x));  // Q(|x|)
    return x < 0.0f ? q : 1.0f - q;
}

void gelu_forward(float *out, const float *inp, size_t n) {
    // out, inp are (n,)
#pragma omp parallel for schedule(static) if (n >= ACT_PAR_MIN_)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = x * gelu_cdf_(x, exp_neg_half_sq_(fabsf(x)));
    }
}

void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    // dinp is (n,), accumulated into; inp, dout are (n,)
#pragma omp parallel for schedule(static) if (n >= ACT_PAR_MIN_)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        // in the forward pass this was:
        // out[i] = x * Phi(x);
        // so d out / dx = Phi(x) + x * phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi) the standard normal
        // density, whose exp Phi shares
        float e = exp_neg_half_sq_(fabsf(x));
        float pdf = INV_SQRT_2PI_ * e;
        dinp[i] += (gelu_cdf_(x, e) + x * pdf) * dout[i];
    }
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

// only ever exponentiates a non-positive number, so nothing overflows to inf for large |x|: 1 / (1 + e^-x)
// for x >= 0, e^x / (1 + e^x) below, written as one select so the loops stay vectorisable
static inline float sigmoid_(float x) {
    float e = fast_expf_(-fabsf(x));
    float num = x >= 0.0f ? 1.0f : e;
    return num / (1.0f + e);
}

// d/dx [x * s(x)] = s + x * s * (1 - s) = s * (1 + x * (1 - s)); with s from sigmoid_ this stays
// finite: for large negative x, s underflows to 0 and the product is 0, for large positive x, 1 - s = 0
static inline float silu_grad_(float x) {
    float s = sigmoid_(x);
    return s * (1.0f + x * (1.0f - s));
}

void silu_forward(float *out, const float *inp, size_t n) {
    // out, inp are (n,)
#pragma omp parallel for schedule(static) if (n >= ACT_PAR_MIN_)
    for (size_t i = 0; i < n; i++) out[i] = inp[i] * sigmoid_(inp[i]);
}

void silu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    // dinp is (n,), accumulated into; inp, dout are (n,)
#pragma omp parallel for schedule(static) if (n >= ACT_PAR_MIN_)
    for (size_t i = 0; i < n; i++) {
        // in the forward pass this was:
        // out[i] = inp[i] * sigmoid(inp[i]);
        dinp[i] += silu_grad_(inp[i]) * dout[i];
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
        for (int i = 0; i < H; i++) out_n[i] = a_n[i] * sigmoid_(a_n[i]) * b_n[i];
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
            da_n[i] += silu_grad_(a) * b_n[i] * dout_n[i];
            db_n[i] += a * sigmoid_(a) * dout_n[i];
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
