/*
 * The information-form Kalman filter scan of KLA on the GPU: nn/kalman.h's forward, backward and one-token step
 * (the same recurrence, floors, shapes, accumulation and checkpoint layout) over device pointers. Read nn/kalman.h
 * for the formulas. In short, per batch row b, channel m and state slot s, from lambda_0 = 1, eta_0 = 0:
 *
 *   den_t = A2 + P lambda_{t-1},  lambda_t = lambda_{t-1} / den_t + prec_t k_t[s]^2,
 *   eta_t = (abar / den_t) eta_{t-1} + k_t[s] prec_t v_t,  y_t[m] = sum_s q_t[s] eta_t / lambda_t,
 *   yvar_t[m] = sum_s q_t[s]^2 / lambda_t
 *
 * Every slot's recursion is independent and sequential in t, so the kernels give one warp to one (b, m) and one
 * lane to one slot (two slots a lane for 32 < S <= 64; lanes past S carry a dummy slot, a = P = 1, abar = k = q = 0,
 * whose terms are exactly 0), and run t in order; blocks are up to 8 warps of consecutive channels of one b.
 *
 *   forward    grid (ceil(M / W), B), W = min(M, 8) warps: each lane updates its slots token by token, the warp
 *              sums y and yvar over the slots, and (lambda, eta) go to the checkpoints at every chunk start
 *              (nn/kalman.h's layout (B, ceil(T/chunk), M, 2, S), so a GPU checkpoint compares with the CPU's)
 *   backward   grid (G, B), G = ceil(M / W) channel groups of W warps (min(M, 8), or 4 where that keeps the
 *              states below in shared memory): chunks in reverse; a warp recomputes its chunk's L + 1 states
 *              (L = min(chunk, T)) from the checkpoint into dynamic shared memory (into the scratch when they do
 *              not fit in 96 KB; a lane reads back only what it wrote, so no barrier), then runs reverse-mode
 *              through the chunk as nn/kalman.c does, the adjoints of (lambda, eta) carried in registers. dv and
 *              dprec (sums over s) are warp sums; the dynamics' gradients of one (b, m, s) stay in the lane's
 *              registers over t and go to the scratch (B, M, S). dk and dq (sums over m) go through shared memory:
 *              every 8 tokens the block sums its warps' terms in warp order into the scratch (G, B, T, S)
 *   reduce     dk, dq += the sum over the G groups in group order (a thread per (b, t, s)); dabar, dpbar += the
 *              sum over b in b order, in double (as on the CPU)
 *   step       the forward's warp on the host's decoding state (B sequences at state + b * stride, each (M, 2, S)),
 *              one token; the same device functions as the forward, so a step gives the forward's bits
 *
 * Deterministic: no atomics; every element of a result is written by one thread and every sum runs in a fixed
 * order (the warp sums by common.cuh's xor tree, the block's sum over warps, the groups and b in index order), so
 * two runs give the same bits. Memory: the checkpoints, and a scratch of gpu_kalman_scratch_size floats
 * (2 G B T S for dk, dq's partials, 2 B M S for the dynamics', plus B M (L + 1) 2 S when the chunk's states do
 * not fit in shared memory) -- O(B T S M / 8) plus O(B M S), never O(B T M S) for chunks that fit.
 *
 * Precision: fp32 per slot, the host's products in its order; the sums over s (a tree here, the host's vectorised
 * order there) and fused multiply-adds differ, so results match nn/kalman.c to a few ulp of the largest terms
 * (tests/gpu/test_gpu_kalman.c states the bounds). Taken: S from 1 to GPU_KALMAN_MAX_S, any T, M, B, chunk >= 1;
 * a wider S stops through gpu_fail_.
 *
 * Every pointer is device memory. Callable from C (the parity test, tests/gpu/test_gpu_kalman.c).
 */
#ifndef SEQ_GPU_KALMAN_CUH
#define SEQ_GPU_KALMAN_CUH

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "nn/kalman.h"

#define GPU_KALMAN_MAX_S 64  // state slots the kernels take (the mixer refuses more)

// floats of the checkpoints: nn/kalman.h's kalman_ckpt_size, the same layout (B, ceil(T/chunk), M, 2, S)
size_t gpu_kalman_ckpt_size(int B, int T, int M, int S, int chunk);
// floats of the backward's scratch (nothing in it is kept between calls)
size_t gpu_kalman_scratch_size(int B, int T, int M, int S, int chunk);

// y (B,T,M) WRITTEN; yvar (B,T,M) WRITTEN or NULL; ckpt (gpu_kalman_ckpt_size) WRITTEN, or NULL when no backward
// follows; v, prec (B,T,M); k, q (B,T,S); abar, pbar (M,S)
void gpu_kalman_scan_forward(float *y, float *yvar, float *ckpt, const float *v, const float *prec, const float *k,
                             const float *q, const float *abar, const float *pbar, int B, int T, int M, int S,
                             int chunk);

// the gradients of the forward that wrote ckpt, ACCUMULATED (+=): dv, dprec (B,T,M), dk, dq (B,T,S), dabar, dpbar
// (M,S) (summed over b). dy (B,T,M); dyvar (B,T,M) or NULL; the inputs as given to the forward; scratch
// (gpu_kalman_scratch_size floats)
void gpu_kalman_scan_backward(float *dv, float *dprec, float *dk, float *dq, float *dabar, float *dpbar,
                              const float *dy, const float *dyvar, const float *ckpt, const float *v, const float *prec,
                              const float *k, const float *q, const float *abar, const float *pbar, int B, int T, int M,
                              int S, int chunk, float *scratch);

// one token of decoding on the host's state layout (kalman_state_init, kalman_step): sequence b's state (M, 2, S)
// = [lambda | eta] per channel at state + b * stride, updated in place; y (B,M) WRITTEN, yvar (B,M) WRITTEN or NULL;
// v, prec (B,M); k, q (B,S); abar, pbar (M,S)
void gpu_kalman_step(float *y, float *yvar, float *state, size_t stride, const float *v, const float *prec,
                     const float *k, const float *q, const float *abar, const float *pbar, int B, int M, int S);

#ifdef __cplusplus
}
#endif

#endif
