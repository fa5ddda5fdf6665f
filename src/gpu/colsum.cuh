/*
 * Column sums of a row-major matrix in a fixed order (two passes: rows in fixed chunks, then the chunks' partials
 * in order), shared by the matmul's bias gradient and the norms' weight gradients.
 */
#ifndef SEQ_GPU_COLSUM_CUH
#define SEQ_GPU_COLSUM_CUH

#include "gpu/common.cuh"

enum { COLSUM_PLAIN, COLSUM_LAYERNORM, COLSUM_RMSNORM };

// dsum (C,) += the column sums of dout (N,C) (floats or bf16, rows dout.ld apart; 0: C); mode LAYERNORM/RMSNORM
// also dxhat (C,) += the column sums of dout·xhat, xhat = (inp - mean) * rstd (mean unused for RMSNORM); dsum
// or dxhat may be NULL
void gpu_colsum(float *dsum, float *dxhat, GpuAct dout, const float *inp, const float *mean, const float *rstd,
                int N, int C, int mode);

#endif
