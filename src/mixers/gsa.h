/*
 * The gsa mixer's options after ops->check (mixers/gsa.c documents the mixer). Shared with its GPU side
 * (gpu/gsa.cu), which reads the same resolved options and tensor indices.
 */
#ifndef SEQ_MIXERS_GSA_H
#define SEQ_MIXERS_GSA_H

#include "core/config.h"
#include "nn/linrec.h"

enum { GSA_FMAP_SWISH, GSA_FMAP_RELU, GSA_FMAP_IDENTITY };

typedef struct GsaOpts {
    // from the config
    int heads, head_dim, num_slots, norm, chunk, conv;
    double gate_logit_normalizer, norm_eps, init_std;
    char feature_map[CFG_STR_MAX];
    // derived by check
    int fmap, H, D, M, HD, HM, K;  // K: conv taps (0 = no conv)
    int k_q, k_k, k_v, k_cq, k_ck, k_cv, k_f, k_norm, k_o;
} GsaOpts;

// pass 1: q, k (D) -> the slots (M), decay on the slot (value) side; pass 2: p, s (M) -> v (D), decay per key slot
static inline LinrecDims gsa_dims(const GsaOpts *o, int pass, int B, int T) {
    LinrecDims d = {B, T, o->H, pass == 1 ? o->D : o->M, pass == 1 ? o->M : o->D,
                    pass == 1 ? LINREC_VCHANNEL : LINREC_CHANNEL, 0, o->chunk, 1.0f};
    return d;
}


#endif
