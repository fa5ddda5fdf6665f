/*
 * Vectorisable float math for the elementwise hot loops (activation.c, xent.c; attention.c can use
 * the same exp). Plain C, branch-free: inlined into a loop, gcc -O3 turns every operation below into
 * one SIMD instruction (fmaf -> vfmadd, the ?: selects -> compare + blend/max, memcpy type-puns ->
 * register moves), where a call to libm's expf/erfcf keeps the loop scalar. No fast-math needed:
 * the operations are written in the order they are to be evaluated, and fmaf is spelled out.
 *
 * fast_expf_(x)  exp(x), <= 2 ulp for -87.33 <= x <= 88.37 (measured: tests/test_nn_ops.c);
 *                0 below ln(FLT_MIN) = -87.3365 (results that would be subnormal are flushed);
 *                +inf above 127.5 ln2 = 88.376 (expf itself overflows only above 88.7228: results in
 *                [2^127.5, FLT_MAX] are given up so that 2^n stays a normal float; every caller here
 *                only exponentiates numbers <= 0); NaN gives NaN.
 * fast_sigmoidf_(x), fast_silu_grad_(x)   1 / (1 + e^-x) and d/dx [x sigmoid(x)] from fast_expf_.
 * fast_sincos_(x)  sin and cos of a float, each within 0.5 ulp + 1e-4 ulp of the true value for
 *                |x| < 2^50 (rounded once from double; measured: tests/test_nn_ops.c); NaN and inf give NaN.
 */
#ifndef SEQ_NN_FASTMATH_H
#define SEQ_NN_FASTMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __FAST_MATH__
#error "nn/fastmath.h relies on IEEE float semantics (the round-to-integer trick); do not use -ffast-math"
#endif

#define FAST_EXP_LO_ (-87.3365f)  // just above ln(FLT_MIN): n = -126 at the lowest, 2^n normal
#define FAST_EXP_HI_ 88.3762f     // just below 127.5 ln2: n = 127 at the highest, 2^n normal

// exp(x) = 2^n * exp(r), n = round(x / ln2), r = x - n ln2 in [-ln2/2, ln2/2].
//  - n: adding 1.5 * 2^23 rounds x log2(e) to an integer (to nearest, by the FPU's rounding), which
//    lands in the low mantissa bits of t; subtracting it again gives n as a float, exactly.
//  - r: ln2 = LN2_HI_ + LN2_LO_, LN2_HI_ = ln2 truncated to 16 bits (0xB172 / 2^16) so n * LN2_HI_
//    is exact for |n| <= 2^8 and the first fma is exact (Cody-Waite reduction); LN2_LO_ = the float
//    nearest ln2 - LN2_HI_ (the pair is ln2 to 5.5e-14, i.e. < 1e-11 relative over the whole range).
//  - exp(r): degree-6 Chebyshev fit of exp on [-0.3466, 0.3466] (mpmath.chebyfit, coefficients
//    rounded to float, highest first), max error 2.0e-9 < 0.03 ulp, so rounding in the 6 fmas
//    dominates the error.
//  - 2^n: the bits of t are 0x4B400000 + n; (bits + 127) << 23 in unsigned arithmetic drops the
//    0x4B4... part out of the top and leaves the biased exponent n + 127 (no signed overflow, no
//    float -> int conversion, so NaN and huge inputs are harmless; the selects below sort them out).
static inline float fast_expf_(float x) {
    const float LOG2E_ = 1.44269504088896341f;
    const float LN2_HI_ = 0.693145751953125f;
    const float LN2_LO_ = 1.42860677e-6f;
    const float ROUND_ = 12582912.0f;  // 1.5 * 2^23
    float xc = x < FAST_EXP_LO_ ? FAST_EXP_LO_ : (x > FAST_EXP_HI_ ? FAST_EXP_HI_ : x);
    float t = fmaf(xc, LOG2E_, ROUND_);
    float n = t - ROUND_;
    float r = fmaf(n, -LN2_HI_, xc);
    r = fmaf(n, -LN2_LO_, r);
    float p = 1.39411166e-3f;
    p = fmaf(p, r, 8.37513246e-3f);
    p = fmaf(p, r, 4.16663513e-2f);
    p = fmaf(p, r, 1.66664153e-1f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    uint32_t tb;
    memcpy(&tb, &t, sizeof tb);
    uint32_t sb = (tb + 127u) << 23;
    float scale;
    memcpy(&scale, &sb, sizeof scale);
    float y = p * scale;
    y = x < FAST_EXP_LO_ ? 0.0f : y;
    return x > FAST_EXP_HI_ ? __builtin_inff() : y;
}

// only ever exponentiates a non-positive number, so nothing overflows to inf for large |x|: 1 / (1 + e^-x)
// for x >= 0, e^x / (1 + e^x) below, written as one select so the loops stay vectorisable
static inline float fast_sigmoidf_(float x) {
    float e = fast_expf_(-fabsf(x));
    float num = x >= 0.0f ? 1.0f : e;
    return num / (1.0f + e);
}

// d/dx [x * s(x)] = s + x * s * (1 - s) = s * (1 + x * (1 - s)); with s from fast_sigmoidf_ this stays
// finite: for large negative x, s underflows to 0 and the product is 0, for large positive x, 1 - s = 0
static inline float fast_silu_grad_(float x) {
    float s = fast_sigmoidf_(x);
    return s * (1.0f + x * (1.0f - s));
}

// sin and cos of x, in double and rounded once to float, branch-free so that a loop over it vectorises (libm's
// sin and cos keep a loop scalar).
//  - n = round(x 2/pi) by the 1.5 * 2^52 trick (as fast_expf_'s, in double: exact for |x 2/pi| < 2^51), whose
//    low two mantissa bits are n mod 4, the quadrant, also for negative n (2^51 is a multiple of 4).
//  - r = x - n pi/2 in [-pi/4, pi/4] (a little beyond where x 2/pi rounds to the tie): pi/2 = PIO2_HI_ + PIO2_LO_
//    (the double nearest pi/2 and the double nearest the rest; the pair is pi/2 to 1e-33), two fmas, so r is
//    good to ~1e-16 absolute for |n| < 2^50: a float x carries at most 24 bits, the reduction loses none.
//  - sin r, cos r: their Taylor series to r^11 and r^12 (truncation < 7e-12 and < 4e-13 on |r| <= pi/4, 1e-4
//    ulp of a float), Horner in double.
//  - quadrant q: (sin, cos) x = (s, c), (c, -s), (-s, -c), (-c, s) for q = 0, 1, 2, 3.
static inline void fast_sincos_(float x, float *sn, float *cs) {
    const double TWO_OVER_PI_ = 0.63661977236758134308;
    const double PIO2_HI_ = 1.5707963267948966192;
    const double PIO2_LO_ = 6.123233995736766036e-17;
    const double ROUND_ = 6755399441055744.0;  // 1.5 * 2^52
    double xd = x;
    double t = fma(xd, TWO_OVER_PI_, ROUND_);
    double n = t - ROUND_;
    double r = fma(-n, PIO2_HI_, xd);
    r = fma(-n, PIO2_LO_, r);
    double r2 = r * r;
    double ps = -2.5052108385441720e-08;  // -1/11!
    ps = fma(ps, r2, 2.7557319223985893e-06);  // 1/9!
    ps = fma(ps, r2, -1.9841269841269841e-04);  // -1/7!
    ps = fma(ps, r2, 8.3333333333333333e-03);   // 1/5!
    ps = fma(ps, r2, -1.6666666666666667e-01);  // -1/3!
    double s = fma(r * r2, ps, r);
    double pc = 2.0876756987868099e-09;          // 1/12!
    pc = fma(pc, r2, -2.7557319223985888e-07);   // -1/10!
    pc = fma(pc, r2, 2.4801587301587302e-05);    // 1/8!
    pc = fma(pc, r2, -1.3888888888888889e-03);   // -1/6!
    pc = fma(pc, r2, 4.1666666666666667e-02);    // 1/4!
    pc = fma(pc, r2, -0.5);
    double c = fma(pc, r2, 1.0);
    uint64_t tb;
    memcpy(&tb, &t, sizeof tb);
    uint64_t q = tb & 3u;
    double s1 = (q & 1u) ? c : s, c1 = (q & 1u) ? s : c;
    *sn = (float)((q & 2u) ? -s1 : s1);
    *cs = (float)(((q + 1u) & 2u) ? -c1 : c1);
}

// Sums of many floats in double run in FM_LANES_ interleaved partial sums (lane l takes the elements
// i = l mod FM_LANES_), added in a fixed order at the end: the same result for any thread count, like
// one serial sum, but without its chain of dependent adds (4 cycles an element).
#define FM_LANES_ 8

static inline double fm_lanes_total_(const double s[FM_LANES_]) {
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

// sum_i (x[i] - m)^2 over x (n,), in double (m = 0: the sum of squares)
static inline double sum_sq_dev_(const float *x, size_t n, double m) {
    double s[FM_LANES_] = {0};
    size_t i = 0;
    for (; i + FM_LANES_ <= n; i += FM_LANES_) {
        for (int l = 0; l < FM_LANES_; l++) {
            double d = x[i + l] - m;
            s[l] += d * d;
        }
    }
    for (; i < n; i++) s[i % FM_LANES_] += (x[i] - m) * (x[i] - m);
    return fm_lanes_total_(s);
}

#endif
