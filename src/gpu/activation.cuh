/*
 * The MLP's activations and the residual add on the GPU, the device counterparts of nn/activation.h and
 * nn/gelu.h. Unlike the CPU's, the MLP's activation backwards WRITE their result (=), because the model always hands
 * them a buffer it would otherwise have to zero first. The mixers' silu and relu on flat buffers (the last section:
 * nn/activation.h's silu_* and relu_*, callable from C) keep the host's semantics: their backwards ACCUMULATE (+=).
 * Every pointer is device memory; every reduction runs in a fixed order (no atomics), so a step gives the same
 * bits every time on the same GPU.
 */
#ifndef SEQ_GPU_ACTIVATION_CUH
#define SEQ_GPU_ACTIVATION_CUH

#include <stddef.h>

#ifdef __cplusplus  // the MLP's ops take GpuAct (common.cuh, C++); C sees only the flat ops below
#include "gpu/common.cuh"

// activations of the MLP; kind: MLP_GELU | MLP_RELU | MLP_SWIGLU (model/model.h). out (N,H) from pre =
// inp (N,H) (gelu, relu) or (N,2H) (swiglu: [gate | value] per row, silu(gate)·value) plus bias (F,) (the fc
// bias, which its matmul leaves out; may be NULL); every tensor floats, or every one bf16 (run.precision bf16)
void gpu_act_forward(GpuAct out, GpuAct inp, const float *bias, int N, int H, int kind);
// dinp (N,H) or (N,2H) (floats or bf16) = (WRITTEN, see above) the gradient through the activation of dout (N,H)
void gpu_act_backward(GpuAct dinp, GpuAct inp, const float *bias, GpuAct dout, int N, int H, int kind);

// out (n,) = a + (b + bias[i % C]) (bias (C,) may be NULL: a + b; out may alias a or b): the residual add with the
// branch's output projection bias, which its matmul leaves out
void gpu_residual(float *out, const float *a, const float *b, const float *bias, size_t n, int C);

extern "C" {
#endif

// the mixers' maps on flat fp32 buffers of n elements, the host's formulas (nn/fastmath.h's sigmoid: e^-|x| only):
// out (n,) WRITTEN = silu(inp) = inp sigmoid(inp) or relu(inp) = max(inp, 0) (out may alias inp); dinp (n,) +=
// dout (n,) times the derivative at inp (n,) (relu's is 0 at 0), as silu_backward / relu_backward add
void gpu_silu_forward(float *out, const float *inp, size_t n);
void gpu_silu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void gpu_relu_forward(float *out, const float *inp, size_t n);
void gpu_relu_backward(float *dinp, const float *inp, const float *dout, size_t n);

#ifdef __cplusplus
}
#endif

#endif
