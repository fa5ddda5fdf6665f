/*
 * GELU's value and derivative for one float, inline and branch-free, so that a loop calling them
 * vectorises: the elementwise pass (nn/activation.c) and the matmul epilogue that applies GELU to an
 * output tile while it is still in cache (nn/matmul.c) share them and give the same bits.
 *
 * gelu(x) = x Phi(x), Phi the standard normal CDF; d gelu / dx = Phi(x) + x phi(x). Both come from
 * the upper tail Q(u) = P(X > u) = 0.5 erfc(u/sqrt2) at u = |x|: Phi(x) = Q(u) for x < 0 (kept to full
 * relative precision in the tail, where 1 + erf(x/sqrt2) would cancel) and 1 - Q(u) for x >= 0.
 * Q(u) = exp(-u^2/2) * M(u), with M(u) = Q(u) exp(u^2/2) the Mills-ratio-like factor that is smooth
 * and slowly varying (0.5 at 0, ~1/u for large u). M is approximated as t P(t), t = 4 / (4 + u) in
 * (0, 1]: M/t is analytic in t on [0, 1], also at t -> 0 (u -> inf), so one polynomial covers every u
 * with no branches (the idea of Numerical Recipes' erfcc, t = 1/(1 + z/2), but with the polynomial as
 * a factor rather than in the exponent, so one exp serves Q and phi). P: degree-10 Chebyshev fit of
 * M(u(t))/t on t in [4/(4 + 13.25), 1] (u <= 13.25, past which Q < FLT_MIN) made with mpmath
 * (chebyfit, erfc to 40 digits), relative error 1.9e-9, coefficients rounded to float, highest first;
 * |coefficients| sum to 1.75 against P >= 0.32, so the float Horner sum loses < 3 ulp. Working from x
 * rather than z = x/sqrt2 also avoids rounding z, which erfcf(z) would amplify by 2z^2 in the tail.
 * Measured: Phi within 4 ulp relative of erfc in double over the whole float range (test_nn_ops.c).
 */
#ifndef SEQ_NN_GELU_H
#define SEQ_NN_GELU_H

#include <math.h>

#include "nn/fastmath.h"

#define GELU_INV_SQRT_2PI_ 0.39894228040143267794f

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

// gelu(x) = x Phi(x)
static inline float gelu_value_(float x) { return x * gelu_cdf_(x, exp_neg_half_sq_(fabsf(x))); }

// d gelu / dx = Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi) the standard normal density, whose
// exp Phi shares
static inline float gelu_grad_(float x) {
    float e = exp_neg_half_sq_(fabsf(x));
    return gelu_cdf_(x, e) + x * (GELU_INV_SQRT_2PI_ * e);
}

#endif
