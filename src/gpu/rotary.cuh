/*
 * Rotary position embedding on a (B,T,NH,HS) tensor on the GPU, the device counterpart of nn/rotary.h's
 * rotary_forward / rotary_backward: the linear mixers' complex forget gate (retnet always, gla and linear_attn with
 * `rotate`: RoPE on q and k in their projection's row layout). Read nn/rotary.h for the pairing layouts
 * (ROTARY_INTERLEAVED, ROTARY_HALF) and the frequencies.
 *
 * As on the host, each angle (pos0 + t) w_i is formed in double (w_i = base^(-2i/HS) in double, or the given
 * per-head frequency) and only its cosine and sine are rounded to float, so the GPU's rotation factors are the
 * host table's (up to the last bit of the double sin/cos); the rotation's products are in the host's order. A thread
 * per channel pair computes its own factors (no table, no scratch): the same double work as the host's table, once per
 * (b, h) instead of once, which is small beside the pass over the tensor. No reductions.
 *
 * Every pointer is device memory, cfg->freqs included (NULL: the default spectrum); cfg itself is a host struct.
 * Callable from C (the parity test).
 */
#ifndef SEQ_GPU_ROTARY_CUH
#define SEQ_GPU_ROTARY_CUH

#ifdef __cplusplus
extern "C" {
#endif

#include "nn/rotary.h"

// out (B,T,NH,HS) WRITTEN = inp (B,T,NH,HS) rotated at positions pos0 .. pos0+T-1; out may alias inp; cfg->freqs
// (NH, HS/2) device or NULL. HS even.
void gpu_rotary_forward(float *out, const float *inp, const RotaryCfg *cfg, int pos0, int B, int T, int NH, int HS);
// dinp (B,T,NH,HS) += R^T dout (B,T,NH,HS) (the inverse rotation); dinp must not alias dout
void gpu_rotary_backward(float *dinp, const float *dout, const RotaryCfg *cfg, int pos0, int B, int T, int NH,
                         int HS);

#ifdef __cplusplus
}
#endif

#endif
