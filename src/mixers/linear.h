/*
 * The linear_attn, retnet and gla mixers' options after ops->check (mixers/linear.c documents the mixers).
 * Shared with their GPU side (gpu/linear.cu), which reads the same resolved options and tensor indices.
 */
#ifndef SEQ_MIXERS_LINEAR_H
#define SEQ_MIXERS_LINEAR_H

#include <math.h>

#include "core/config.h"
#include "mixers/selrope.h"
#include "nn/linrec.h"

enum { LIN_LINEAR_ATTN, LIN_RETNET, LIN_GLA };
enum { FMAP_IDENTITY, FMAP_ELU, FMAP_RELU, FMAP_HADAMARD };

#define LIN_NORMALIZE_EPS 1e-10f  // the reference's denominator floor

typedef struct LinOpts {
    // from the config (a key absent from an entry's schema keeps the zeroed default)
    int heads, gate_rank, output_gate, normalize, chunk, rotate, conv;
    double expand_k, expand_v, gate_normalizer, norm_eps, rope_base, init_std;
    char feature_map[CFG_STR_MAX];
    SelRopeOpts sr;  // gla: selective_rope (mixers/selrope.h)
    // derived by check
    int variant, fmap, H, Dk, Dv, HK, HV, Dva;  // Dva: Dv + 1 with the normaliser's column of ones
    int K;   // gla, retnet: short-conv taps (0 = none)
    int GW;  // gla: gate width, HK, or HK/2 with rotate (one decay per rotated pair: a complex gate a e^{iw})
    int k_q, k_k, k_v, k_cq, k_ck, k_cv, k_f1w, k_f1b, k_f2w, k_f2b, k_f3w, k_f3b, k_f4w, k_f4b;
    int k_g, k_gk1, k_gk2, k_gkb, k_norm, k_o;
} LinOpts;

// the recurrence's dims: the value side has the normaliser's column of ones; retnet decays per head, gla per key
// channel and token, linear_attn not at all
static inline LinrecDims lin_dims(const LinOpts *o, int B, int T) {
    LinrecDims d = {B, T, o->H, o->Dk, o->Dva, LINREC_NONE, 0, o->chunk, (float)(1.0 / sqrt((double)o->Dk))};
    d.decay = o->variant == LIN_RETNET ? LINREC_HEAD : o->variant == LIN_GLA ? LINREC_CHANNEL : LINREC_NONE;
    return d;
}

#endif
