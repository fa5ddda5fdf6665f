/*
 * Causal softmax attention on the GPU, tiled with an online softmax (FlashAttention's algorithm), the device
 * twin of nn/attention.h for the schemes that need nothing but q, k, v (none; rope rotates q and k before
 * the call). Memory is O(T·D) per head: the forward keeps the output and one log-sum-exp per query, the
 * backward recomputes the weights tile by tile from them.
 *
 *   s_ij = scale · q_i·k_j (j <= i),  lse_i = log sum_j exp(s_ij),  out_i = sum_j exp(s_ij - lse_i) v_j
 *
 * Kernels (fp32 on the CUDA cores, a thread per query row, or per key row in the backward's dk/dv pass; K/V or
 * Q/dO tiles staged in shared memory, every thread reading the same staged row at once, so the reads are
 * broadcasts):
 *   forward     out, lse
 *   backward    delta_i = dout_i·out_i, then dq (a pass over key tiles per query block) and dk, dv (a pass over
 *               query tiles per key block). Two passes instead of FlashAttention-2's atomics, so every
 *               gradient element is summed by one thread in a fixed order: bit-identical runs.
 * D (head_dim) up to GPU_ATTN_MAX_D; gpu_attn_supports says which.
 */
#ifndef SEQ_GPU_FLASH_ATTN_CUH
#define SEQ_GPU_FLASH_ATTN_CUH

#define GPU_ATTN_MAX_D 128

// 1 when the kernels take head_dim D
int gpu_attn_supports(int D);

// out (B,NH,T,D), lse (B,NH,T); q, k, v (B,NH,T,D)
void gpu_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v, float scale, int B,
                           int NH, int T, int D);
// dq, dk, dv (B,NH,T,D) WRITTEN (=); delta (B,NH,T) scratch; dout, out (B,NH,T,D); lse (B,NH,T) from the forward
void gpu_attention_backward(float *dq, float *dk, float *dv, float *delta, const float *dout, const float *out,
                            const float *lse, const float *q, const float *k, const float *v, float scale, int B,
                            int NH, int T, int D);

#endif
