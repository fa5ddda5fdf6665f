/*
 * The delta-rule engine on the GPU (DeltaNet, Gated DeltaNet): nn/delta.h's forward and backward (the same
 * recurrence, shapes, layouts, accumulation and checkpoints) over device pointers, for training: the state before
 * token 0 is empty (no state argument, no gradient to one). Read nn/delta.c for the chunkwise WY / UT form and its
 * backward; docs/gpu.md ("The delta-rule engine") for the kernels. In short, per (b,h) and chunk of L tokens:
 *
 *   forward    the chunk's L x L products K K^T and Q' K^T (decay-weighted), then the states (a scan over chunks,
 *              one block per 32 value columns of the state, which solves the chunk's unit lower-triangular system
 *              for the new values U on the way), then the outputs o = (e (.) Q') S + P U
 *   backward   U again from the checkpoints, the state gradients (the same scan backwards, with the transposed
 *              solve), then the L x L gradients dP and dA with dbeta, then dq and dk per key tile with the
 *              log-decays' partials, then dg's reverse sums
 *
 * Every exponent is a difference of in-chunk cumulative log-decays (double, as on the CPU) that is <= 0. No
 * atomics: every element of a result is written by one thread, every sum runs in a fixed order, so two runs give
 * the same bits. Memory: the checkpoints (B H ceil(T/L) states, nn/delta.h's layout) and a scratch of
 * gpu_delta_scratch_size floats (four L x L matrices a chunk, one state a chunk for the backward's state
 * gradients, three floats a token and value channel, a few doubles a token), O(B T d) plus one state a chunk.
 *
 * Taken: g NULL (DeltaNet) or per token and head (Gated DeltaNet), any beta; Dk up to GPU_DELTA_MAX_DK, any Dv
 * (tiles of 32 channels); chunk lengths min(chunk, T) up to GPU_DELTA_MAX_L. Refused (gpu_delta_refusal says why;
 * forward and backward stop through gpu_fail_): a longer chunk, a wider key side.
 *
 * Precision: the products are warp products on the tensor cores with the 3xTF32 split (gpu/chunk_kit.cuh's
 * CK_SPLIT: about fp32's rounding) whatever run.precision says; the solves are fp32 on the CUDA cores.
 *
 * Callable from C (the parity test, tests/gpu/test_gpu_delta.c, with gpu/devbuf.h's device buffers).
 */
#ifndef SEQ_GPU_DELTA_CUH
#define SEQ_GPU_DELTA_CUH

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "nn/delta.h"

#define GPU_DELTA_MAX_L 64    // the longest chunk the kernels stage (min(chunk, T))
#define GPU_DELTA_MAX_DK 256  // the widest key side: the state scans hold a (Dk, 32) tile in shared memory

// NULL when the kernels take d, else why not (one line, naming the field and value)
const char *gpu_delta_refusal(const DeltaDims *d);

// floats of the checkpoints: nn/delta.h's delta_ckpt_size, the same layout (B,H,ceil(T/L), Dk*Dv), so a GPU
// checkpoint compares with the CPU's element by element
size_t gpu_delta_ckpt_size(const DeltaDims *d);
// floats of the device scratch forward and backward take (either may use all of it; nothing is kept between them)
size_t gpu_delta_scratch_size(const DeltaDims *d);

// o (B,T,H,Dv) WRITTEN; ckpt (gpu_delta_ckpt_size) WRITTEN, or NULL when no backward follows (the states then live
// in scratch); q, k (B,T,H,Dk); v (B,T,H,Dv); beta (B,T,H); g (B,T,H) log-decays (<= 0), or NULL for no decay;
// scratch (gpu_delta_scratch_size). All device pointers. The state before token 0 is empty.
void gpu_delta_forward(float *o, float *ckpt, const float *q, const float *k, const float *v, const float *beta,
                       const float *g, float *scratch, const DeltaDims *d);

// the gradients of the forward that wrote ckpt, ACCUMULATED (+=): dq, dk (B,T,H,Dk), dv (B,T,H,Dv), dbeta (B,T,H)
// (NULL: not wanted), dg (B,T,H) (NULL: not wanted; ignored when g is NULL). dout (B,T,H,Dv); ckpt, q, k, v, beta, g
// as given to the forward; scratch (gpu_delta_scratch_size). All device pointers.
void gpu_delta_backward(float *dq, float *dk, float *dv, float *dbeta, float *dg, const float *dout,
                        const float *ckpt, const float *q, const float *k, const float *v, const float *beta,
                        const float *g, float *scratch, const DeltaDims *d);

#ifdef __cplusplus
}
#endif

#endif
