/*
 * The optimizer's elementwise parts on the GPU (nn/adamw.h's formula; the scalars come from optim/optim.h's
 * host logic, shared with the CPU).
 * Every pointer is device memory; every reduction runs in a fixed order (no atomics), so a step gives the same
 * bits every time on the same GPU.
 */
#ifndef SEQ_GPU_ADAMW_CUH
#define SEQ_GPU_ADAMW_CUH

#include "gpu/common.cuh"

// the optimizer's elementwise parts over a flat buffer cut into chunks (optim/optim.h's OPTIM_NORM_CHUNK
// chunks): chunk c is [start[c], start[c] + len[c]) of tensor tensor[c]; coef (n_tensors, OPTIM_COEF) holds
// each tensor's scalars from optim_step_coefs / optim_clip_scales.
// sums (n_chunks,) = each chunk's sum of squares, in double
void gpu_chunk_sumsq(double *sums, const float *x, const size_t *start, const int *len, int n_chunks);
// x *= coef[tensor * OPTIM_COEF] (the clip scale) over every chunk
void gpu_chunk_scale(float *x, const size_t *start, const int *len, const int *tensor, const float *coef,
                     int n_chunks);
// AdamW (nn/adamw.h's formula) over every chunk
void gpu_adamw(float *params, float *m, float *v, const float *grads, const size_t *start, const int *len,
               const int *tensor, const float *coef, int n_chunks);

#endif
