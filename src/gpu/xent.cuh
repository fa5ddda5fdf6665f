/*
 * The softmax cross-entropy of the head on the GPU (nn/xent.h's), and the argmax of evaluation.
 * Every pointer is device memory; every reduction runs in a fixed order (no atomics), so a step gives the same
 * bits every time on the same GPU.
 */
#ifndef SEQ_GPU_XENT_CUH
#define SEQ_GPU_XENT_CUH

#include "gpu/common.cuh"

// softmax cross-entropy of logits (N,V) against targets (N,) (-100 = ignored): losses (N,) (0 where ignored);
// with grad, the logits are overwritten by dlogits = (softmax - onehot) / n_norm (0 on ignored rows), as
// crossentropy_forward_backward does on the CPU. grad_bf16 (run.precision bf16): dlogits in bf16 instead, row i
// at the start of logits row i (a bf16 matrix with rows 2V apart: the returned GpuAct), so the head's backward
// reads half the bytes and converts nothing
GpuAct gpu_crossentropy(float *losses, float *logits, const int *targets, int N, int V, int n_norm, int grad,
                        int grad_bf16);
// out (N,) = each row of logits (N,V)'s predicted token by model_argmax's rule: the first index of the largest
// value, NaNs never chosen; 0 when the row's first value is NaN
void gpu_argmax_rows(int *out, const float *logits, int N, int V);

#endif
