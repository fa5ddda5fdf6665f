/*
 * The gates' scalar maps, in double, for the host (mixers/mixer_kit.h includes this) and the GPU's kernels alike, so
 * that a gate formed on either device is the same number up to the last bit of a double exp/log1p (the decay and
 * input gates of the linear family and KLA's dynamics are formed in double and rounded to float once). Safe for any
 * finite x: no exp of a large positive number reaches a result (softplus(x) = x above 30, where log1p(e^x) - x <
 * 1e-13; the sigmoids only ever take exp(-|x|) <= 1, one exp for either sign, then pick the numerator).
 */
#ifndef SEQ_MIXERS_GATES_H
#define SEQ_MIXERS_GATES_H

#include <math.h>

#ifdef __CUDACC__
#define GATE_FN_ static inline __host__ __device__
#else
#define GATE_FN_ static inline
#endif

GATE_FN_ double mixer_softplus(double x) { return x > 30.0 ? x : log1p(exp(x)); }

// 1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) below
GATE_FN_ double mixer_sigmoid(double x) {
    double z = exp(-fabs(x));
    return (x >= 0 ? 1.0 : z) / (1.0 + z);
}

// log sigmoid(x) = -softplus(-x) = min(x, 0) - log(1 + e^-|x|); its derivative is sigmoid(-x)
GATE_FN_ double mixer_logsigmoid(double x) { return fmin(x, 0.0) - log1p(exp(-fabs(x))); }

#undef GATE_FN_

#endif
