/*
 * Selective RoPE on the GPU, the device counterpart of mixers/selrope.h (the option block of gla,
 * gated_deltanet and attention; read it and nn/selrope.h for the maths). The same calls in the same order: the angles
 * of x into the block's saved activations, q and k rotated by them, and the backward that takes the angle gradients
 * of q and k back to the block's tensors and to dx.
 *
 * The per-token chain (conv, silu, skip difference, bias, gate) is a function of a few neighbouring tokens of p, so
 * only the angle sum Theta_t = temp (offset + sum_{s<=t} phi_s) runs along the sequence: a block of 32 channels x S
 * segments of the tokens, each thread summing its segment's phi in double, the segments' totals added in order
 * (shared memory), then each thread walking its segment again from that offset to write cos and sin (formed from the
 * angle in double and rounded once, as the host's fast_sincos_). The backward's reverse sum of the angle gradients
 * is the same walk backwards; the conv and bias gradients are fixed-order column sums (gpu/conv.cuh, gpu/colsum.cuh).
 * No atomics: two runs give the same bits.
 *
 * The saved activations and the backward's scratch are slices of the mixer's (gpu_selrope_act_size,
 * gpu_selrope_scratch_size floats). Every pointer is device memory.
 */
#ifndef SEQ_GPU_SELROPE_CUH
#define SEQ_GPU_SELROPE_CUH

#include <stddef.h>

#include "gpu/common.cuh"

extern "C" {
#include "mixers/mixer.h"
#include "mixers/selrope.h"
}

size_t gpu_selrope_act_size(const SelRopeOpts *s, int B, int T);
size_t gpu_selrope_scratch_size(const SelRopeOpts *s, int B, int T);
// the angles of x (B,T,C) into acts. With a state (decoding, T 1): sequence b's selective_rope state (the host's
// layout, mixers/selrope.h) at state + b * stride, read as the history and overwritten by it.
void gpu_selrope_forward(const Mixer *m, const SelRopeOpts *s, float *acts, GpuAct x, int B, int T, float *state,
                         size_t stride);
// q or k rows out, inp (B,T,H,2R), rows ld floats apart (0: packed, 2HR), rotated by the saved angles; out may
// alias inp
void gpu_selrope_apply(const SelRopeOpts *s, float *acts, float *out, const float *inp, size_t ld, int B, int T);
// dtheta within the scratch, zeroed: gpu_selrope_apply_backward accumulates into it for q and for k
float *gpu_selrope_dtheta(const SelRopeOpts *s, float *scratch, int B, int T);
// dinp (B,T,H,2R) WRITTEN = R^T dout (may alias dout), both with rows ld floats apart; dtheta += the angle
// gradient, given out (the rotated rows, ld_out apart); an ld of 0: packed (2HR)
void gpu_selrope_apply_backward(const SelRopeOpts *s, float *acts, float *dinp, float *dtheta, const float *dout,
                                size_t ld, const float *out, size_t ld_out, int B, int T);
// dtheta (overwritten) back to the block's tensors' gradients (+=) and dx (B,T,C) +=
void gpu_selrope_backward(Mixer *m, const SelRopeOpts *s, float *acts, float *scratch, float *dx, GpuAct x, int B,
                          int T);

#endif
