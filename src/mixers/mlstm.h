/*
 * The mlstm mixer's options after ops->check (mixers/mlstm.c documents the mixer). Shared with its GPU side
 * (gpu/mlstm.cu), which reads the same resolved options and tensor indices.
 */
#ifndef SEQ_MIXERS_MLSTM_H
#define SEQ_MIXERS_MLSTM_H

#include <math.h>

#include "nn/groupnorm.h"
#include "nn/linrec.h"

#define MLSTM_EPS 1e-6  // added to the normaliser max(|q.n|, exp(-m)), as parallel_stabilized_simple's eps

typedef struct MlstmOpts {
    // from the config
    int heads, conv, qkv_blocksize, round_to, chunk;
    double proj_factor, fgate_bias_lo, fgate_bias_hi, igate_bias_std, norm_eps;
    // derived by check
    int I, H, D, Dv, K, bs, G;  // inner channels, heads, head size, D + 1, conv taps, q/k/v block size, blocks
    int k_up, k_cw, k_cb, k_q, k_k, k_v, k_iw, k_ib, k_fw, k_fb, k_norm, k_skip, k_down;  // tensor indices (-1 absent)
} MlstmOpts;

// the saved activations (BT = B*T), laid out by each side in its own buffer: the host's m->acts, the device's
typedef struct MlstmActs {
    float *xm, *z;            // (BT,I) the halves of proj_up
    float *xcp, *xc;          // (BT,I) conv output, silu of it (conv 0: absent, xc = xm)
    float *q, *k;             // (BT,I) = (B,T,H,D)
    float *v;                 // (BT,H,D+1) v with a column of ones per head
    float *ipre, *fpre, *lf;  // (BT,H) gate pre-activations, lf = logsigmoid(fpre)
    float *o, *mm;            // (BT,H,D+1) the recurrence's output [C~^T q / sqrt D | q . n~]; (BT,H) stabiliser
    float *h;                 // (BT,I) the cell's output before the outnorm
    float *mean, *rstd;       // (BT*H) outnorm statistics
    float *hs;                // (BT,I) outnorm(h) + skip (.) xc
    float *ckpt;              // the recurrence's chunk states
} MlstmActs;

// the recurrence's dims: v with its column of ones (Dv = D + 1), the forget gates' log-decay per token and head,
// the input gates with the max stabiliser, scale 1/sqrt(D)
static inline LinrecDims mlstm_dims(const MlstmOpts *o, int B, int T) {
    LinrecDims d = {B, T, o->H, o->D, o->Dv, LINREC_TOKEN, 1, o->chunk, (float)(1.0 / sqrt((double)o->D))};
    return d;
}

// the outnorm: xLSTM's MultiHeadLayerNorm, a LayerNorm per head of D channels without a gate
static inline GroupNormOpts mlstm_norm_opts(const MlstmOpts *o) {
    GroupNormOpts g = {GROUPNORM_GATE_NONE, 1, 0, (float)o->norm_eps};
    return g;
}

#endif
