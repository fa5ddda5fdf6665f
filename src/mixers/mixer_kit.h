/*
 * What every mixer file needs besides its own maths, in one place so that a new mixer does not start by
 * copying the last one's macros: the row of an options schema, declaring a tensor under the layer's
 * prefix, laying saved activations out one after another, resolving heads x head size against the width,
 * and the scalar gate functions (softplus, sigmoid, logsigmoid, the inverse softplus that raw parameters
 * are initialised with). docs/mixers.md ("Adding a mixer") shows them in use.
 */
#ifndef SEQ_MIXER_KIT_H
#define SEQ_MIXER_KIT_H

#include <math.h>
#include <stddef.h>

#include "core/config.h"
#include "core/err.h"
#include "core/params.h"
#include "mixers/gates.h"
#include "mixers/mixer.h"

// ----------------------------------------------------------------------------
// options schema

// one CfgKey of a mixer's schema, bound into `field` of its options struct OptsType; a mixer file wraps it
// once: #define KEY_(...) MIXER_KEY(XxxOpts, __VA_ARGS__)
#define MIXER_KEY(OptsType, name, type, field, def, lo, hi, choices, doc) \
    {name, type, offsetof(OptsType, field), def, lo, hi, {choices}, NULL, doc}

// resolve heads and head_dim (0 = C / heads) into *D, the channels per head. Errors name the key path:
// `path.heads` when heads do not divide the width C (and head_dim is 0), `path.head_dim` when D is above
// max_dim (0 = no limit; mixers with per-head arrays of fixed size set it). Returns 0 or -1 with e set.
int mixer_heads_resolve(const char *path, int C, int heads, int head_dim, int max_dim, int *D, Err *e);

// the key and value widths H*Dk = expand_k*C and H*Dv = expand_v*C (rounded) of the mixers with expansion
// factors; -1 with e set (naming `path.expand_k` / `path.expand_v`) when heads do not divide one
int mixer_widths_resolve(const char *path, int C, int heads, double expand_k, double expand_v, int *HK, int *HV,
                         Err *e);

// ----------------------------------------------------------------------------
// parameters

// declare the tensor "prefix.suffix" into pt (shape, init rule, weight-decay default: 1 for matrices, 0 for
// vectors and per-head scalars); returns its index, or -1 with e set (a name too long or declared twice)
int mixer_param_add(ParamTable *pt, const char *prefix, const char *suffix, int ndim, const int *shape,
                    ParamInit init, int decay, Err *e);

// the same inside a mixer's params function, whose arguments are named pt, prefix and e as in MixerOps:
// returns -1 from it on an error, so the declarations read one tensor a line
//   MIXER_ADD("wo", 2, ((int[]){C, HD}), init_normal(std_out), 1);
#define MIXER_ADD(suffix, ndim, shape, init, decay) \
    do { if (mixer_param_add(pt, prefix, suffix, ndim, shape, init, decay, e) < 0) return -1; } while (0)

// ----------------------------------------------------------------------------
// saved activations

// the next `count` floats of an activation layout: base + *n, and *n advances, when cond holds; NULL (and
// *n unchanged) when the buffer is absent (!cond). With base NULL it only counts, so one layout function
// gives both act_size (base NULL) and the pointers (base = m->acts):
//   a->q_lin = mixer_take(base, &n, BT * HD, o->qk_norm);
// Each buffer takes whole cache lines (16 floats), so every one starts on a line as the arena does
// (core/err.c says why that matters).
static inline float *mixer_take(float *base, size_t *n, size_t count, int cond) {
    if (!cond) return NULL;
    float *p = base ? base + *n : NULL;
    *n += (count + 15) & ~(size_t)15;
    return p;
}

// ----------------------------------------------------------------------------
// decoding-state terms (MixerOps.state_terms)

// append the term {name, formula (printf fmt, ...), value, table1} to st; a term past STATE_TERMS_MAX is a
// programming error and aborts
void state_terms_add(StateTerms *st, int table1, size_t value, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

// ----------------------------------------------------------------------------
// scalar gates, in double: mixer_softplus, mixer_sigmoid, mixer_logsigmoid (mixers/gates.h, shared with the GPU)

// softplus^{-1}(y) = log(e^y - 1), y > 0: the raw value that a softplus-parameterised quantity starts from
static inline double mixer_inv_softplus(double y) { return y > 30.0 ? y : log(expm1(y)); }

// Mamba's step-size init in place: n values drawn log-uniform as the step dt itself (INIT_LOGUNIFORM in
// [dt_min, dt_max]) become the raw bias softplus^{-1}(max(dt, floor)), so softplus(bias) starts at dt
static inline void mixer_dt_bias_init(float *dt, size_t n, double floor) {
    for (size_t i = 0; i < n; i++) dt[i] = (float)mixer_inv_softplus(dt[i] > floor ? dt[i] : floor);
}

#endif
