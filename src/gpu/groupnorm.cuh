/*
 * Per-head (grouped) normalisation with an optional swish gate on the GPU, the device counterpart of nn/groupnorm.h
 * (the output norms of the linear-attention / SSM mixers: FLA's FusedRMSNormGated, Mamba2's RMSNormGated, xLSTM's
 * MultiHeadLayerNorm). The same formula, options (GroupNormOpts), shapes and argument order; read nn/groupnorm.h
 * for the maths. A row of x (N, G*D) is G groups of D channels, so group ng = n G + g is the D floats at ng D.
 *
 * One warp per group: the statistics in two passes over the group in fp32 (the mean, then the squares about it;
 * the host sums s and ss in double and takes ss/D - m^2: the same numbers to fp32 rounding), lane-strided sums
 * added by common.cuh's fixed shuffle tree. The weight gradient is a column sum over rows in a fixed order: rows
 * in chunks of 64, one partial per (chunk, column), then the chunks added in order (gpu/colsum.cu's two passes,
 * here with the product dy n recomputed from the statistics), no atomics, so two runs give the same bits.
 *
 * Every pointer is device memory except o (a host struct, as on the host). Callable from C (the parity test).
 */
#ifndef SEQ_GPU_GROUPNORM_CUH
#define SEQ_GPU_GROUPNORM_CUH

#ifdef __cplusplus
extern "C" {
#endif

#include "nn/groupnorm.h"

// out (N, G*D) WRITTEN; mean (N*G) WRITTEN when not NULL (0 unless o->center; may be NULL unless o->center);
// rstd (N*G) WRITTEN; x (N, G*D); z (N, G*D) the gate (NULL without one); w (D,) with o->wshared, else (G*D,)
void gpu_groupnorm_forward(float *out, float *mean, float *rstd, const float *x, const float *z, const float *w,
                           int N, int G, int D, const GroupNormOpts *o);
// dx (N, G*D) +=; dz (N, G*D) += (with a gate; NULL without one); dw (as w) += (rows summed in a fixed order);
// dout (N, G*D); x, z, w, mean, rstd as given to and written by the forward (mean may be NULL unless o->center)
void gpu_groupnorm_backward(float *dx, float *dz, float *dw, const float *dout, const float *x, const float *z,
                            const float *w, const float *mean, const float *rstd, int N, int G, int D,
                            const GroupNormOpts *o);

#ifdef __cplusplus
}
#endif

#endif
