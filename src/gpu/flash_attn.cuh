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
 *   forward     out, lse (kept in base 2)
 *   backward    delta_i = dout_i·out_i, then dq and the row sums of ds (a pass over key tiles per query block),
 *               then dk, dv and the column sums of ds (a pass over query tiles per key block). Two passes instead
 *               of FlashAttention-2's atomics, so every gradient element is summed by one thread in a fixed
 *               order: bit-identical runs. Key tiles wholly outside a window are skipped.
 * D (head_dim) up to GPU_ATTN_MAX_D; gpu_attn_supports says which.
 */
#ifndef SEQ_GPU_FLASH_ATTN_CUH
#define SEQ_GPU_FLASH_ATTN_CUH

#include <stddef.h>

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

// Where a (B,NH,T,D) result of the kernels lives: element (b, h, t, d) at p + b·sb + h·sh + t·st + d, floats or
// bf16. gpu_heads_packed is the head layout; gpu_heads_rows the row layout (B,T,ld) the projections take, head h
// at columns col0 + h·D: the kernels write their results where the next op reads them (the output projection's
// input; the qkv projection's dout), without a permutation pass. A result may be rotated on the way
// (gpu_heads_rotate, below: the inverse RoPE of dq and dk).
typedef struct GpuHeads {
    void *p;
    int bf16;
    size_t sb, sh, st;
    const float *cos_, *sin_;  // NULL: as computed; else RoPE's table (T, D/2), or (T, NH, D/2) with per_head
    int per_head, half_layout; // pairs (k, k + D/2) with half_layout, else (2k, 2k+1)
    float sign;                // +1 the rotation, -1 its inverse
} GpuHeads;
GpuHeads gpu_heads_packed(void *p, int bf16, int NH, int T, int D);
GpuHeads gpu_heads_rows(void *p, int bf16, int T, size_t ld, size_t col0, int D);
// *h with the rotation (sign -1: the inverse) by the table cos_, sin_ (nn/rotary.h's pairs) on the way; D even
void gpu_heads_rotate(GpuHeads *h, const float *cos_, const float *sin_, int per_head, int half_layout, float sign);

// 1 when the kernels take head_dim D
int gpu_attn_supports(int D);

// the floating-point operations of `products` (T, T)-by-D matrix products over the query-key pairs o's mask keeps
// (causal, within the window), for SEQ_PROFILE's rates: the forward has 2 (q k^T and p v), dq 3, dk/dv 4
double gpu_attention_flops(const GpuAttnOpts *o, int B, int NH, int T, int D, int products);

// out (B,NH,T,D) WRITTEN, and a second copy into out2 unless NULL (bf16: the fp32 output the backward takes and
// the bf16 rows of the output projection); lse (B,NH,T) the rows' log-sum-exp in base 2 (log2 sum_j
// 2^(s_ij log2 e): the kernels' exponentials are 2^x); q, k, v (B,NH,T,D) packed: fp32, or bf16
// (__nv_bfloat16) when run.precision is bf16 (gpu_math GPU_BF16); NH <= GPU_ATTN_MAX_HEADS
void gpu_attention_forward(const GpuHeads *out, const GpuHeads *out2, float *lse, const void *q, const void *k,
                           const void *v, const GpuAttnOpts *o, int B, int NH, int T, int D);
// dq, dk, dv (B,NH,T,D) WRITTEN (=); dfgate (B,NH,T) WRITTEN with dL/dF when o->fgate (else unused, may be NULL);
// delta (B,NH,T) scratch; dout (B,NH,T,D) packed, typed as q, k, v; out (the forward's, fp32: delta = dout·out
// takes it unrounded, or the softmax's row sums of ds drift from 0 by bf16's rounding) and lse (B,NH,T) from the
// forward with the same options
void gpu_attention_backward(const GpuHeads *dq, const GpuHeads *dk, const GpuHeads *dv, float *dfgate, float *delta,
                            const void *dout, const GpuHeads *out, const float *lse, const void *q, const void *k,
                            const void *v, const GpuAttnOpts *o, int B, int NH, int T, int D);

#endif
