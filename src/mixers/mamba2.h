/*
 * The mamba2 mixer's options after ops->check (mixers/mamba2.c documents the mixer). Shared with its GPU side
 * (gpu/mamba2.cu), which reads the same resolved options and tensor indices.
 */
#ifndef SEQ_MIXERS_MAMBA2_H
#define SEQ_MIXERS_MAMBA2_H

#include "nn/groupnorm.h"
#include "nn/linrec.h"

typedef struct Mamba2Opts {
    // from the config
    int d_state, head_dim, n_groups, conv, conv_bias, chunk, rescale;
    double expand, a_lo, a_hi, dt_min, dt_max, dt_floor, norm_eps, init_std;
    // derived by check
    int Di, H, P, N, G, K, CD;  // inner channels, heads, head size, state size, groups, conv taps, conv channels
    int k_in, k_cw, k_cb, k_dt, k_A, k_D, k_nw, k_out;  // tensor indices (k_cb -1 without conv_bias)
} Mamba2Opts;

// the saved activations (BT = B*T), laid out by each side in its own buffer: the host's m->acts, the device's
typedef struct Mamba2Acts {
    float *z;     // (BT,Di) the gate
    float *xbc;   // (BT,CD) conv input
    float *xc;    // (BT,CD) conv output, before silu
    float *dtr;   // (BT,H) dt_raw
    float *y;     // (BT,Di) scan output + D x (the norm's input)
    float *rstd;  // (BT,G)
    float *yn;    // (BT,Di) the norm's output (out_proj's input)
    float *ckpt;  // the engine's chunk-start states
} Mamba2Acts;

// the recurrence's dims: q = C, k = B (N channels), v = dt x (P channels), a log-decay per token and head, scale 1
static inline LinrecDims mamba2_dims(const Mamba2Opts *o, int B, int T) {
    LinrecDims d = {B, T, o->H, o->N, o->P, LINREC_TOKEN, 0, o->chunk, 1.0f};
    return d;
}

// the gated RMSNorm: Mamba2's RMSNormGated with norm_before_gate=False, groups of Di / G channels
static inline GroupNormOpts mamba2_norm_opts(const Mamba2Opts *o) {
    GroupNormOpts g = {GROUPNORM_GATE_BEFORE, 0, 0, (float)o->norm_eps};
    return g;
}

#endif
