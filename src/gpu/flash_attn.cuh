/*
 * Causal softmax attention on the GPU, tiled with an online softmax (FlashAttention's algorithm), the device
 * twin of nn/attention.h with the position schemes that act on the scores or the weights (q and k arrive already
 * rotated for the RoPE family). Memory is O(T·D) per head: the forward keeps the output and one log-sum-exp per
 * query, the backward recomputes the weights tile by tile from them. For query i, key j:
 *
 *   s_ij = scale q_i·k_j - slopes[h] (i - j) + (F_i - F_j)       visible iff j <= i and i - W < j (window W)
 *   p_ij = exp(s_ij - lse_i),  lse_i = log sum_j exp(s_ij)        (softmax over the visible j)
 *   w_ij = p_ij exp(-decay[h] (i - j))                            (post-softmax decay, not renormalised)
 *   out_i = sum_j w_ij v_j
 *
 * Kernels (gpu/flash_attn.cu: mma.sync warp products on the tensor cores, gpu/mma.cuh; scores in registers):
 *   forward     out, lse
 *   backward    delta_i = dout_i·out_i, then dq and the row sums of ds (a pass over key tiles per query block),
 *               then dk, dv and the column sums of ds (a pass over query tiles per key block). Two passes instead
 *               of FlashAttention-2's atomics, so every gradient element is summed by one thread in a fixed
 *               order: bit-identical runs. Key tiles wholly outside a window are skipped.
 * D (head_dim) up to GPU_ATTN_MAX_D; gpu_attn_supports says which.
 */
#ifndef SEQ_GPU_FLASH_ATTN_CUH
#define SEQ_GPU_FLASH_ATTN_CUH

#define GPU_ATTN_MAX_D 128
#define GPU_ATTN_MAX_HEADS 64

// the options of nn/attention.h's AttnOpts the GPU takes, passed to the kernels by value (per-head constants
// included, so a launch needs no device copy of them); {0} with scale set is plain causal attention
typedef struct GpuAttnOpts {
    float scale;                       // s = scale q·k + ...
    int window;                        // 0: full causal; W > 0: key j visible from query i iff i - W < j <= i
    const float *fgate;                // (B,NH,T) F on the device, or NULL: s += F_i - F_j (fox)
    float slopes[GPU_ATTN_MAX_HEADS];  // s -= slopes[h] (i - j) (alibi; decay on the logits); 0 = none
    float decay[GPU_ATTN_MAX_HEADS];   // w = p exp(-decay[h] (i - j)), not renormalised; 0 = none
} GpuAttnOpts;

// 1 when the kernels take head_dim D
int gpu_attn_supports(int D);

// out (B,NH,T,D), lse (B,NH,T); q, k, v (B,NH,T,D): fp32, or bf16 (__nv_bfloat16) when run.precision is bf16
// (gpu_math GPU_BF16); NH <= GPU_ATTN_MAX_HEADS
void gpu_attention_forward(float *out, float *lse, const void *q, const void *k, const void *v, const GpuAttnOpts *o,
                           int B, int NH, int T, int D);
// dq, dk, dv (B,NH,T,D) WRITTEN (=); dfgate (B,NH,T) WRITTEN with dL/dF when o->fgate (else unused, may be NULL);
// delta (B,NH,T) scratch; dout (B,NH,T,D) typed as q, k, v; out (B,NH,T,D) fp32; lse (B,NH,T) from the forward
// with the same options
void gpu_attention_backward(float *dq, float *dk, float *dv, float *dfgate, float *delta, const void *dout,
                            const float *out, const float *lse, const void *q, const void *k, const void *v,
                            const GpuAttnOpts *o, int B, int NH, int T, int D);

#endif
