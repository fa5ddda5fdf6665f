/*
 * One token of recurrent decoding on the GPU: the device counterparts of nn/linrec.h's linrec_step, nn/delta.h's
 * delta_step and nn/conv.h's conv1d_causal_step, for the mixers' GpuMixerOps.step (gpu/mixer_gpu.cuh). The states
 * are the host's, in the host's layout (MixerOps.state_size floats a sequence, sequence b's at state + b * stride),
 * so a state moves between the devices as one copy and the GPU decoder starts from the host's state_init.
 *
 * Each column j of a (Dk,Dv) state is one thread's (the state's update and the output read it alone), walking the
 * key channels in the host's order, so the result is the host's up to expf's rounding and two runs give the same
 * bits. Decoding is a few small kernels a layer and token; it is latency-bound, not a throughput path.
 */
#ifndef SEQ_GPU_STEP_CUH
#define SEQ_GPU_STEP_CUH

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "nn/delta.h"
#include "nn/linrec.h"

// linrec_step for d->B sequences (d->T ignored): o (B,H,Dv) WRITTEN; m (B,H) WRITTEN when gated_in (may be NULL);
// state: sequence b's (H, linrec_state_size(d)) at state + b * stride, updated; q, k (B,H,Dk); v (B,H,Dv); g per
// d->decay: NULL (NONE), (H,) (HEAD), (B,H) (TOKEN), (B,H,Dk) (CHANNEL), (B,H,Dv) (VCHANNEL); li (B,H) when
// gated_in. Device pointers.
void gpu_linrec_step(float *o, float *m, float *state, size_t stride, const float *q, const float *k, const float *v,
                     const float *g, const float *li, const LinrecDims *d);

// delta_step for d->B sequences: o (B,H,Dv) WRITTEN; state: sequence b's (H, Dk*Dv) at state + b * stride, updated;
// q, k (B,H,Dk); v (B,H,Dv); beta (B,H); g (B,H) log-decays or NULL. Device pointers.
void gpu_delta_step(float *o, float *state, size_t stride, const float *q, const float *k, const float *v,
                    const float *beta, const float *g, const DeltaDims *d);

// conv1d_causal_step for B sequences of C channels: out (B,C) WRITTEN (may be x); cache: sequence b's (C,K-1), oldest
// input first, at cache + b * stride, slid by one; x (B,C); weight (C,K); bias (C,) or NULL. Device pointers.
void gpu_conv1d_causal_step(float *out, float *cache, size_t stride, const float *x, const float *weight,
                            const float *bias, int B, int C, int K);

// state[b * stride] += 1 for b < B: a position counter kept in a state (RoPE's, as the host's step keeps it)
void gpu_state_count(float *state, size_t stride, int B);

#ifdef __cplusplus
}
#endif

#endif
