/*
 * The GPU's matmuls (cuBLAS), the device counterpart of nn/matmul.h: same shapes and argument order (outputs,
 * then inputs, then dims), and run.precision bf16's operand handling.
 * Every pointer is device memory; every reduction runs in a fixed order (no atomics), so a step gives the same
 * bits every time on the same GPU.
 */
#ifndef SEQ_GPU_MATMUL_CUH
#define SEQ_GPU_MATMUL_CUH

#include "gpu/common.cuh"

// out (N,OC) = inp (N,IC) @ w (OC,IC)^T + bias (OC,) (bias may be NULL). A float inp multiplies in the
// precision's way (bf16: converted per call); a bf16 inp, or a bf16 out (the fp32 sums rounded once; no bias),
// only in run.precision bf16.
void gpu_matmul_forward(GpuAct out, GpuAct inp, const float *w, const float *bias, int N, int IC, int OC);
// dinp (N,IC) += (accumulate) or = dout (N,OC) @ w (OC,IC) when dinp.p is not NULL (bf16 only as out above, and
// not accumulated); dw (OC,IC) += dout^T @ inp; dbias (OC,) += column sums of dout when not NULL
void gpu_matmul_backward(GpuAct dinp, float *dw, float *dbias, GpuAct dout, GpuAct inp, const float *w, int N, int IC,
                         int OC, int accumulate);

// the same in a given math instead of run.precision's (gpu_math()): any but GPU_BF16 multiplies float operands (as
// cuBLAS's math mode says: TF32 in run.precision tf32), for a small product whose bf16 rounding would accumulate
// (Selective RoPE's angle projections, summed over the sequence); GPU_BF16 only in run.precision bf16
void gpu_matmul_forward_in(GpuMath math, GpuAct out, GpuAct inp, const float *w, const float *bias, int N, int IC,
                           int OC);
void gpu_matmul_backward_in(GpuMath math, GpuAct dinp, float *dw, float *dbias, GpuAct dout, GpuAct inp,
                            const float *w, int N, int IC, int OC, int accumulate);

// run.precision bf16 (gpu_math GPU_BF16): the matmuls above multiply bfloat16 operands into fp32 results. The
// weights come from a bf16 copy of the flat parameter buffer: gpu_bf16_shadow_init registers the buffer (params,
// n floats, device) and allocates the copy (-1: out of memory); gpu_bf16_shadow_refresh rewrites it and must
// follow every change of the parameters (upload, optimizer step). Float activations are converted per call.
int gpu_bf16_shadow_init(const float *params, size_t n);
void gpu_bf16_shadow_refresh(void);
void gpu_bf16_shadow_free(void);
// dst (n bf16, __nv_bfloat16) = src (n floats) rounded to bf16 (to nearest, ties to even)
void gpu_to_bf16(void *dst, const float *src, size_t n);

#endif
