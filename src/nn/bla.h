/*
 * Blurry Window Attention (the BLA paper): per batch row b and head h, a state of S = 2M - 1 key slots and
 * S value slots (Dk and Dv wide), written through the Dirichlet kernel of M Fourier modes with period P and
 * read by a softmax over the slots. In the paper's efficient form (Algorithm 1 recurrent, Algorithm 3
 * chunked), with t = 0, 1, ... the absolute position and c_t (S,) the interpolation weights,
 *
 *   c_t[s] = D_M(2 pi (t / P - s / S)),   D_M(phi) = (1 + 2 sum_{m=1}^{M-1} cos(m phi)) / S      (eq. 9, 12, 17)
 *   Kt_t[s] = a_t[s] Kt_{t-1}[s] + c_t[s] k_t,   Vt_t[s] = a_t[s] Vt_{t-1}[s] + c_t[s] v_t   (eq. 16)
 *   o_t = sum_s p_t[s] Vt_t[s],   p_t = softmax_s(scale q_t . Kt_t[s] + mask_t[s])            (eq. 14)
 *
 * with a_t = 1 (no decay) or a_t = 1 - c_t (section 3.3: the slot being written forgets what it held, so
 * P = S is sliding-window attention of S positions). The mask hides slot s until t >= round(s P / S), its
 * dilated time: before it the slot holds only blurred zeros from before the sequence.
 *
 * c_t[s] is exactly Algorithm 1's cos(t modes) A^T + sin(t modes) B^T (modes = 2 pi m / P, A and B of
 * eq. 12 with omega = 2 pi / S) by cos(x)cos(y) + sin(x)sin(y) = cos(x - y). Kt and Vt are the two passes
 * of nn/linrec.h that GSA uses (keys -> slots with the decay on the slot side, slots -> values with the
 * decay per key slot), with the fixed write weights c and log-decays log(1 - c) (floored at 1e-13: a slot
 * written with weight exactly 1 keeps a 1e-13 trace, not a log(0); a smaller floor makes the engine's
 * products of decays subnormal floats, which are slow: docs/mixers.md, "bla"). 1 - c lies in [0, 1.22]: at P > S
 * the kernel's side lobes are negative, so a slot may grow by up to 22% per step; the engine's exponents
 * are differences inside one chunk, so this stays finite.
 *
 * Layouts: q, k (B,T,H,Dk); v, o (B,T,H,Dv); p (B,T,H,S) the slot weights (the backward needs them).
 * Memory O(B T H (Dk + Dv + S)): no T x T matrix. The forward always starts from the empty prefix at
 * t = 0 (training); bla_step decodes one token at a time (the caller gives its position), and token by token
 * reproduces the forward.
 */
#ifndef SEQ_NN_BLA_H
#define SEQ_NN_BLA_H

#include <math.h>
#include <stddef.h>

#include "nn/linrec.h"

#define BLA_LOG_FLOOR 1e-13  // 1 - c below this is taken as this: log(0) would poison the engine's sums, and a
                             // smaller floor makes products of decays subnormal (slow) floats
#define BLA_MAX_HS 4096  // heads x slots of one decoding step (its work rows live on the stack)

typedef struct BlaDims {
    int B, T, H, Dk, Dv;
    int M;          // Fourier modes; S = 2M - 1 slots
    double period;  // P >= 2M - 1 (tokens); P / (2M - 1) is the paper's token resolution (eq. 18)
    int decay;      // 1: the slots decay by 1 - c_t (section 3.3)
    int chunk;      // tokens per chunk of both passes (changes only float rounding)
    float scale;    // queries enter as scale * q (1 / sqrt(Dk))
} BlaDims;

// S = 2M - 1
static inline int bla_slots(const BlaDims *d) { return 2 * d->M - 1; }
// the dilated time of slot s, round(s P / S) (ties to even, as torch.round): the first position that sees it
static inline int bla_dilated_time(const BlaDims *d, int s) {
    return (int)nearbyint((double)s * d->period / (2 * d->M - 1));
}
// the interpolation weight of slot s of S at position t (M modes, the period in tokens), in double: the phase t / P
// reduced to [0, 1) first (the angle stays small however long the sequence), sum_{m=1}^{M-1} cos(m phi) by the
// Chebyshev recurrence cos((m+1)x) = 2 cos x cos(mx) - cos((m-1)x). One function for the host and the GPU's kernel
// (gpu/bla.cu), so both tables are the same up to the last bit of cos.
#ifdef __CUDACC__
__host__ __device__
#endif
static inline double bla_coeff(long t, int s, int S, int M, double period) {
    const double two_pi = 6.283185307179586476925287;
    double tp = fmod((double)t, period) / period, phi = two_pi * (tp - (double)s / S);
    double c1 = cos(phi), prev = 1.0, cur = c1, sum = 0.0;
    for (int m = 1; m < M; m++) {
        sum += cur;
        double next = 2.0 * c1 * cur - prev;
        prev = cur, cur = next;
    }
    return (1.0 + 2.0 * sum) / S;
}
// c (n,S) the interpolation weights of positions t0 .. t0+n-1; g (n,S) log(max(1 - c, BLA_LOG_FLOOR)), or NULL
void bla_coeffs(float *c, float *g, long t0, int n, const BlaDims *d);
// the recurrence of pass 1 (keys -> slots: q, k, the weights c as values, decays per slot on the value side) or pass 2
// (slots -> values: p, c as keys, v, decays per key slot) over a (B,T) batch
static inline LinrecDims bla_pass_dims(const BlaDims *d, int pass, int B, int T) {
    int S = bla_slots(d), dec = d->decay;
    LinrecDims l = {B, T, d->H, pass == 1 ? d->Dk : S, pass == 1 ? S : d->Dv,
                    pass == 1 ? (dec ? LINREC_VCHANNEL : LINREC_NONE) : (dec ? LINREC_CHANNEL : LINREC_NONE), 0,
                    d->chunk, pass == 1 ? d->scale : 1.0f};
    return l;
}
// floats of the work space bla_forward / bla_backward take
size_t bla_work_size(const BlaDims *d, int backward);
// floats of the forward's checkpoints (both passes' chunk states)
size_t bla_ckpt_size(const BlaDims *d);
// floats of one sequence's decoding state: both passes' states, H S (Dk + Dv)
size_t bla_state_size(const BlaDims *d);
// state (B, bla_state_size) set to the empty prefix (zeros)
void bla_state_init(float *state, const BlaDims *d);

// o (B,T,H,Dv); p (B,T,H,S); ckpt (bla_ckpt_size) or NULL when no backward follows; work (bla_work_size(d, 0));
// q, k (B,T,H,Dk); v (B,T,H,Dv)
void bla_forward(float *o, float *p, float *ckpt, const float *q, const float *k, const float *v, float *work,
                 const BlaDims *d);

// gradients of the forward that wrote p and ckpt, given dout (B,T,H,Dv); accumulated (+=): dq, dk (B,T,H,Dk),
// dv (B,T,H,Dv); work (bla_work_size(d, 1))
void bla_backward(float *dq, float *dk, float *dv, const float *dout, const float *p, const float *ckpt,
                  const float *q, const float *k, const float *v, float *work, const BlaDims *d);

// one token at position t (0-based, the same for the B sequences) of recurrent decoding (d->T is ignored):
// o (B,H,Dv); state (B, bla_state_size); q, k (B,H,Dk); v (B,H,Dv); p (B,H,S) the slot weights (may be NULL)
void bla_step(float *o, float *p, float *state, const float *q, const float *k, const float *v, long t,
              const BlaDims *d);

#endif
