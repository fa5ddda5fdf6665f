/*
 * The information-form Kalman filter scan of KLA (KLA paper, Theorems 1-2, eq. 22-23): per batch row b,
 * channel m and state slot s, with time-invariant discrete dynamics abar, pbar (M,S) and per-token
 * evidence v, prec (B,T,M) (value and its precision Lambda^v) and k, q (B,T,S), from lambda_0 = 1,
 * eta_0 = 0:
 *
 *   den_t = A2 + P lambda_{t-1}                A2 = max(abar^2, 1e-12), P = max(pbar, 1e-12)
 *   lambda_t = lambda_{t-1} / den_t + prec_t k_t[s]^2
 *   eta_t = (abar / den_t) eta_{t-1} + k_t[s] prec_t v_t
 *   y_t[m] = sum_s q_t[s] eta_t / lambda_t,    yvar_t[m] = sum_s q_t[s]^2 / lambda_t
 *
 * The forward is the sequential scan (the exact reference; on a CPU also the fastest form). It stores
 * (lambda, eta) at the start of every chunk of `chunk` steps; the backward walks the chunks in reverse,
 * recomputes one chunk's states from its checkpoint and runs reverse-mode through it, so memory is
 * O(B T M) for the inputs plus O(B M S T / chunk) for the checkpoints, never O(B T M S).
 * kalman_step is one token of recurrent decoding with the same arithmetic, bit for bit.
 *
 * Parallel over (b, block of channels); every reduction (over s for y, over m for dk/dq, over b for the
 * dynamics' gradients) is done in a fixed order, so results do not depend on the thread count.
 */
#ifndef SEQ_NN_KALMAN_H
#define SEQ_NN_KALMAN_H

#include <stddef.h>

#define KALMAN_FLOOR 1e-12f  // the floor on abar^2 and pbar (pbar = 0 is the no-process-noise ablation)

// floats of the checkpoint buffer: (B, ceil(T/chunk), M, 2, S)
size_t kalman_ckpt_size(int B, int T, int M, int S, int chunk);
// floats of scratch kalman_scan_backward needs
size_t kalman_scratch_size(int B, int T, int M, int S);

// y (B,T,M); yvar (B,T,M) or NULL; ckpt (kalman_ckpt_size) or NULL when no backward follows;
// v, prec (B,T,M); k, q (B,T,S); abar, pbar (M,S)
void kalman_scan_forward(float *y, float *yvar, float *ckpt, const float *v, const float *prec, const float *k,
                         const float *q, const float *abar, const float *pbar, int B, int T, int M, int S, int chunk);

// gradients of L given dy (and dyvar, or NULL) of the forward that wrote ckpt. dv, dprec (B,T,M) and
// dk, dq (B,T,S) are accumulated (+=); dabar, dpbar (M,S) are accumulated with the sum over b.
void kalman_scan_backward(float *dv, float *dprec, float *dk, float *dq, float *dabar, float *dpbar, const float *dy,
                          const float *dyvar, const float *ckpt, const float *v, const float *prec, const float *k,
                          const float *q, const float *abar, const float *pbar, int B, int T, int M, int S, int chunk,
                          float *scratch);

// The scan unrolled into its attention matrix (KLA paper, Theorem 2 and App. E.4): for channel m of one
// sequence, with f_r[s] = abar[s] / den_r[s] (the history-dependent forget gate of eq. 19) and eta_0 = 0,
//   y[i] = sum_{j <= i} P[i,j] v[j],   P[i,j] = prec_j sum_s (q_i[s] / lambda_i[s]) k_j[s] prod_{r=j+1..i} f_r[s]
// (the paper's M_seq = diag(q ⊙ lambda^-1) W, summed over the slots). P (T,T) row-major, NaN above the
// diagonal; prec (T,M) read at column m; k, q (T,S); abar, pbar (M,S). O(T^2 S) time.
void kalman_attention_matrix(float *P, const float *prec, const float *k, const float *q, const float *abar,
                             const float *pbar, int T, int M, int S, int m);

// recurrent decoding: state (B, M, 2, S) = [lambda | eta] per channel, set by kalman_state_init
void kalman_state_init(float *state, int B, int M, int S);
// one token: y, yvar (B,M) (yvar may be NULL); v, prec (B,M); k, q (B,S); sequence b's state starts at
// state + b * stride (stride >= 2 M S: a caller may keep other state of the sequence after it)
void kalman_step(float *y, float *yvar, float *state, size_t stride, const float *v, const float *prec,
                 const float *k, const float *q, const float *abar, const float *pbar, int B, int M, int S);

#endif
