/*
 * The GPU's nn ops: the device counterparts of nn/matmul.h, norm.h, activation.h, embedding.h, xent.h and
 * adamw.h, with the same shapes and argument order (outputs, then inputs, then dims). Every pointer is device
 * memory. Every reduction runs in a fixed order (no atomics), so a step gives the same bits every time on the
 * same GPU: what `--resume` needs to continue a run exactly.
 *
 * Where an op differs from its CPU twin it says so: the activation backwards WRITE their result (=, the CPU's
 * accumulate), because the model always hands them a buffer it would otherwise have to zero first.
 */
#ifndef SEQ_GPU_OPS_CUH
#define SEQ_GPU_OPS_CUH

#include <stddef.h>

// An activation tensor as the ops pass it: p points at floats, or at bfloat16s (__nv_bfloat16) when bf16 is set
// (run.precision bf16 only: there the producers of the matmuls' inputs -- the norms, the MLP's activation and its
// gradient, the attention's output rows and dqkv, the cross-entropy's dlogits -- write bf16, what the matmul
// multiplies, so that no matmul converts them; and the matmuls write bf16 what an elementwise pass reads next --
// the MLP's fc output and the activation's gradient, the qkv projection -- as autocast keeps them). ld: elements
// from one row to the next (0: the row's length, rows packed).
typedef struct GpuAct {
    void *p;
    int bf16;
    int ld;
} GpuAct;
static inline GpuAct gpu_f32(const float *p) { return GpuAct{(void *)p, 0, 0}; }
static inline GpuAct gpu_act(void *p, int bf16) { return GpuAct{p, bf16, 0}; }

// out (N,OC) = inp (N,IC) @ w (OC,IC)^T + bias (OC,) (bias may be NULL). A float inp multiplies in the
// precision's way (bf16: converted per call); a bf16 inp, or a bf16 out (the fp32 sums rounded once; no bias),
// only in run.precision bf16.
void gpu_matmul_forward(GpuAct out, GpuAct inp, const float *w, const float *bias, int N, int IC, int OC);
// dinp (N,IC) += (accumulate) or = dout (N,OC) @ w (OC,IC) when dinp.p is not NULL (bf16 only as out above, and
// not accumulated); dw (OC,IC) += dout^T @ inp; dbias (OC,) += column sums of dout when not NULL
void gpu_matmul_backward(GpuAct dinp, float *dw, float *dbias, GpuAct dout, GpuAct inp, const float *w, int N, int IC,
                         int OC, int accumulate);

// run.precision bf16 (gpu_math GPU_BF16): the matmuls above multiply bfloat16 operands into fp32 results. The
// weights come from a bf16 copy of the flat parameter buffer: gpu_bf16_shadow_init registers the buffer (params,
// n floats, device) and allocates the copy (-1: out of memory); gpu_bf16_shadow_refresh rewrites it and must
// follow every change of the parameters (upload, optimizer step). Float activations are converted per call.
int gpu_bf16_shadow_init(const float *params, size_t n);
void gpu_bf16_shadow_refresh(void);
void gpu_bf16_shadow_free(void);
// dst (n bf16, __nv_bfloat16) = src (n floats) rounded to bf16 (to nearest, ties to even)
void gpu_to_bf16(void *dst, const float *src, size_t n);

// LayerNorm (rms 0; bias may be NULL) or RMSNorm (rms 1; mean unused, may be NULL) of rows inp (N,C) with
// weight (C,): out (N,C) (floats or bf16), mean, rstd (N,) kept for the backward; eps as nn/norm.h
void gpu_norm_forward(GpuAct out, float *mean, float *rstd, const float *inp, const float *w, const float *b, int N,
                      int C, int rms);
// dinp (N,C) += ..., dw (C,) += ..., db (C,) += ... (db may be NULL)
void gpu_norm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                       const float *mean, const float *rstd, int N, int C, int rms);

// activations of the MLP; kind: MLP_GELU | MLP_RELU | MLP_SWIGLU (model/model.h). out (N,H) from pre =
// inp (N,H) (gelu, relu) or (N,2H) (swiglu: [gate | value] per row, silu(gate)·value) plus bias (F,) (the fc
// bias, which its matmul leaves out; may be NULL); every tensor floats, or every one bf16 (run.precision bf16)
void gpu_act_forward(GpuAct out, GpuAct inp, const float *bias, int N, int H, int kind);
// dinp (N,H) or (N,2H) (floats or bf16) = (WRITTEN, see above) the gradient through the activation of dout (N,H)
void gpu_act_backward(GpuAct dinp, GpuAct inp, const float *bias, GpuAct dout, int N, int H, int kind);

// out (n,) = a + (b + bias[i % C]) (bias (C,) may be NULL: a + b; out may alias a or b): the residual add with the
// branch's output projection bias, which its matmul leaves out
void gpu_residual(float *out, const float *a, const float *b, const float *bias, size_t n, int C);

// out (N,C) = wte[ids[i]] rows; ids (N,) on the device, already checked against V on the host
void gpu_embedding_forward(float *out, const int *ids, const float *wte, int N, int C);
// dwte (V,C) += sum over the positions of each token of dout (N,C): tokens (n_tok,) the distinct ids of the
// batch, their positions pos[offs[u] .. offs[u+1]) in increasing order (a host-side bucket sort of the ids:
// one block per token sums its rows in that order, so no two threads ever add into the same row)
void gpu_embedding_backward(float *dwte, const float *dout, const int *tokens, const int *offs, const int *pos,
                            int n_tok, int C);

// softmax cross-entropy of logits (N,V) against targets (N,) (-100 = ignored): losses (N,) (0 where ignored);
// with grad, the logits are overwritten by dlogits = (softmax - onehot) / n_norm (0 on ignored rows), as
// crossentropy_forward_backward does on the CPU. grad_bf16 (run.precision bf16): dlogits in bf16 instead, row i
// at the start of logits row i (a bf16 matrix with rows 2V apart: the returned GpuAct), so the head's backward
// reads half the bytes and converts nothing
GpuAct gpu_crossentropy(float *losses, float *logits, const int *targets, int N, int V, int n_norm, int grad,
                        int grad_bf16);

// the optimizer's elementwise parts over a flat buffer cut into chunks (train/optim.h's OPTIM_NORM_CHUNK
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
