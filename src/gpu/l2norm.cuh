/*
 * The L2 norm of rows on the GPU, the device counterpart of nn/norm.h's l2norm_forward / l2norm_backward: deltanet's
 * and gated_deltanet's q and k per head (L2NORM_ADD, flash-linear-attention's l2norm: n = sqrt(|x|^2 + eps)),
 * PaTH's w (L2NORM_ADD) and KLA's q, k (L2NORM_FLOOR: n = max(|x|, eps)). Read nn/norm.h for the formula.
 *
 * One warp per row, the row's sums (|x|^2 in the forward, out . dout in the backward) lane-strided in fp32 and added
 * by common.cuh's fixed shuffle tree (the host sums |x|^2 in double and out . dout in float, in index order: the
 * same numbers to fp32 rounding). No reduction crosses rows, so two runs give the same bits.
 *
 * Every pointer is device memory. Callable from C (the parity test).
 */
#ifndef SEQ_GPU_L2NORM_CUH
#define SEQ_GPU_L2NORM_CUH

#ifdef __cplusplus
extern "C" {
#endif

#include "nn/norm.h"

// out (N,C) WRITTEN = inp / n per row; nrm (N,) WRITTEN, n kept for the backward; inp (N,C); mode L2NORM_ADD or
// L2NORM_FLOOR with its eps. out may alias inp.
void gpu_l2norm_forward(float *out, float *nrm, const float *inp, int N, int C, float eps, int mode);
// dinp (N,C) += (dout - out (out . dout)) / n per row (dout / eps for a row held at L2NORM_FLOOR's floor); dout
// (N,C); out, nrm as the forward wrote them; eps and mode as given to it
void gpu_l2norm_backward(float *dinp, const float *dout, const float *out, const float *nrm, int N, int C, float eps,
                         int mode);

#ifdef __cplusplus
}
#endif

#endif
