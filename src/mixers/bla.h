/*
 * The bla mixer's options (mixers/bla.c is the layer, nn/bla.h the op): shared by the host side and the GPU's
 * (gpu/bla.cu), which read the same struct the host's check resolved.
 */
#ifndef SEQ_MIXERS_BLA_H
#define SEQ_MIXERS_BLA_H

#include <math.h>

#include "nn/bla.h"

typedef struct BlaOpts {
    // from the config
    int heads, modes, decay, conv, chunk;
    double period, resolution, expand_k, expand_v, init_std;
    // derived by check
    int H, S, Dk, Dv, HK, HV, W, K;  // W = 2 HK + HV, the fused projection's width; K conv taps (0 = none)
    double P;                        // the period in tokens
    int k_w, k_conv, k_o;
} BlaOpts;

// the op's dims for a (B,T) batch
static inline BlaDims bla_dims(const BlaOpts *o, int B, int T) {
    BlaDims d = {B, T, o->H, o->Dk, o->Dv, o->modes, o->P, o->decay, o->chunk, (float)(1.0 / sqrt((double)o->Dk))};
    return d;
}

#endif
