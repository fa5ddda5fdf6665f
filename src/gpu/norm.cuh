/*
 * LayerNorm and RMSNorm on the GPU, the device counterpart of nn/norm.h.
 * Every pointer is device memory; every reduction runs in a fixed order (no atomics), so a step gives the same
 * bits every time on the same GPU.
 */
#ifndef SEQ_GPU_NORM_CUH
#define SEQ_GPU_NORM_CUH

#include "gpu/common.cuh"

// LayerNorm (rms 0; bias may be NULL) or RMSNorm (rms 1; mean unused, may be NULL) of rows inp (N,C) with
// weight (C,): out (N,C) (floats or bf16), mean, rstd (N,) kept for the backward; eps as nn/norm.h
void gpu_norm_forward(GpuAct out, float *mean, float *rstd, const float *inp, const float *w, const float *b, int N,
                      int C, int rms);
// dinp (N,C) += ..., dw (C,) += ..., db (C,) += ... (db may be NULL)
void gpu_norm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                       const float *mean, const float *rstd, int N, int C, int rms);

#endif
