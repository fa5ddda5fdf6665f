/*
 * The deltanet and gated_deltanet mixers' options after ops->check (mixers/delta.c documents the mixers).
 * Shared with their GPU side (gpu/deltanet.cu), which reads the same resolved options and tensor indices.
 */
#ifndef SEQ_MIXERS_DELTA_H
#define SEQ_MIXERS_DELTA_H

#include <math.h>

#include "mixers/selrope.h"
#include "nn/delta.h"

#define DELTA_L2_EPS 1e-6f  // FLA's l2norm: x / sqrt(|x|^2 + 1e-6)

typedef struct DeltaOpts {
    // from the config (a key absent from an entry's schema keeps the zeroed default)
    int heads, conv, allow_neg_eigval, use_gate, chunk;
    double expand_k, expand_v, norm_eps, init_std, a_lo, a_hi, dt_min, dt_max, dt_floor;
    SelRopeOpts sr;  // gated_deltanet: selective_rope (mixers/selrope.h)
    // derived by check
    int gated, H, Dk, Dv, HK, HV, K;  // K: conv taps (0 = no conv)
    int k_q, k_k, k_v, k_cq, k_ck, k_cv, k_b, k_a, k_A, k_dt, k_g, k_norm, k_o;
} DeltaOpts;

// the recurrence's dims: queries scaled by 1/sqrt(Dk)
static inline DeltaDims delta_mixer_dims(const DeltaOpts *o, int B, int T) {
    DeltaDims d = {B, T, o->H, o->Dk, o->Dv, o->chunk, (float)(1.0 / sqrt((double)o->Dk))};
    return d;
}

// beta's scale: 2 with allow_neg_eigval (beta in (0,2)), else 1
static inline double delta_beta_scale(const DeltaOpts *o) { return o->allow_neg_eigval ? 2.0 : 1.0; }

#endif
