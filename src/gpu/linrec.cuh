/*
 * The linear-recurrence engine on the GPU: nn/linrec.h's forward and backward (the same recurrence, shapes,
 * layouts, accumulation and checkpoints) over device pointers, for training: the state before token 0 is empty
 * (no state argument, no gradient to one). Read nn/linrec.h for the recurrence and its stabiliser; docs/gpu.md
 * ("The linear-recurrence engine") for the kernels. In short, per (b,h) and chunk of L tokens:
 *
 *   forward    the chunk states (a scan over chunks, one block per 32x32 tile of the state, which is also the
 *              checkpoint), the decay-weighted L x L scores A, and the outputs o = A v + (fq (.) q') S
 *   backward   the state gradients (the same scan backwards), A and dA = dO v^T again, then dv, then dq and dk
 *              with the log-decays' gradients, then the per-token sums (scalar decays, the input gates'
 *              stabiliser) and, for a per-head decay, the sum over b
 *
 * Every exponent is a difference of in-chunk cumulative log-decays (double, as on the CPU) that is <= 0. No
 * atomics: every element of a result is written by one thread, every sum runs in a fixed order, so two runs give
 * the same bits. Memory: the checkpoints (B H ceil(T/L) states, nn/linrec.h's layout) and a scratch of
 * gpu_linrec_scratch_size floats (two L x L score matrices a chunk, one state a chunk for the backward's state
 * gradients, and a few floats a token), O(B T d) plus one state a chunk.
 *
 * Taken: every decay form (LINREC_NONE, HEAD, TOKEN, CHANNEL, VCHANNEL) and gated_in (with NONE, HEAD, TOKEN, as
 * on the CPU); any Dk, Dv >= 1 (tiles of 32 channels); chunk lengths min(chunk, T) up to GPU_LINREC_MAX_L.
 * Refused (gpu_linrec_refusal says why; forward and backward stop through gpu_fail_): a longer chunk, gated_in
 * with a per-channel decay.
 *
 * Precision: fp32 on the CUDA cores (shared-memory tiles, one thread per output element), whatever run.precision
 * says; the intra-chunk products are small dense matmuls written so that they can move to gpu/mma.cuh's warp
 * products later.
 *
 * Callable from C (the parity test, tests/gpu/test_gpu_linrec.c, with gpu/devbuf.h's device buffers).
 */
#ifndef SEQ_GPU_LINREC_CUH
#define SEQ_GPU_LINREC_CUH

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "nn/linrec.h"

#define GPU_LINREC_MAX_L 64  // the longest chunk the kernels stage (min(chunk, T))

// NULL when the kernels take d, else why not (one line, naming the field and value)
const char *gpu_linrec_refusal(const LinrecDims *d);

// floats of the checkpoints: nn/linrec.h's linrec_ckpt_size, the same layout (B,H,ceil(T/L), Dk*Dv [+1 m]), so a
// GPU checkpoint compares with the CPU's element by element
size_t gpu_linrec_ckpt_size(const LinrecDims *d);
// floats of the device scratch forward and backward take (either may use all of it; nothing is kept between them)
size_t gpu_linrec_scratch_size(const LinrecDims *d);

// o (B,T,H,Dv) WRITTEN; m (B,T,H) WRITTEN when gated_in, else NULL; ckpt (gpu_linrec_ckpt_size) WRITTEN, or NULL
// when no backward follows (the states then live in scratch); q, k (B,T,H,Dk); v (B,T,H,Dv); g per d->decay (NULL
// for NONE; (H,) | (B,T,H) | (B,T,H,Dk) | (B,T,H,Dv)); li (B,T,H) when gated_in, else NULL; scratch
// (gpu_linrec_scratch_size). All device pointers. The state before token 0 is empty.
void gpu_linrec_forward(float *o, float *m, float *ckpt, const float *q, const float *k, const float *v,
                        const float *g, const float *li, float *scratch, const LinrecDims *d);

// the gradients of the forward that wrote ckpt, ACCUMULATED (+=): dq, dk (B,T,H,Dk), dv (B,T,H,Dv), dg shaped like
// g (NULL: not wanted; a per-head decay's gradient is summed over b in order), dli (B,T,H) when gated_in. dout
// (B,T,H,Dv); dm (B,T,H) or NULL when gated_in; ckpt, q, k, v, g, li as given to the forward; scratch
// (gpu_linrec_scratch_size). All device pointers.
void gpu_linrec_backward(float *dq, float *dk, float *dv, float *dg, float *dli, const float *dout, const float *dm,
                         const float *ckpt, const float *q, const float *k, const float *v, const float *g,
                         const float *li, float *scratch, const LinrecDims *d);

// The normaliser column: a mixer that divides by q . sum k (linear_attn's normalize, mLSTM's q . n) gets it from the
// recurrence as one more value channel of ones. va (rows, Dv+1) WRITTEN = v (rows, Dv) with a 1 appended per row;
// the gradient back: dst (rows, Dv) WRITTEN = src (rows, Dv+1) without its last column. Device pointers.
void gpu_linrec_ones_append(float *va, const float *v, size_t rows, int Dv);
void gpu_linrec_ones_drop(float *dst, const float *src, size_t rows, int Dv);

#ifdef __cplusplus
}
#endif

#endif
