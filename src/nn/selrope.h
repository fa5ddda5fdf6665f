/*
 * Selective RoPE (the Selective RoPE paper; docs/mixers.md, "Selective RoPE"), the pure op: from the projection p
 * of the input, the input-dependent cumulative angles, and the rotation they drive. Tensors are rows of H heads;
 * the angle rows are (H,R), and a head of q or k has Dk = 2R channels rotated in NeoX half-split pairs (r, r + R),
 * the same angle for q and k. Per channel i = (h,r) of a sequence:
 *
 *   a_t     = act(sum_{j<K} conv[i,j] p_{t-K+1+j})      (K = 0: a = p; act: identity or silu; p_{<0} = the state)
 *   f_t     = a_t - a_{t-1} (skip) ;  f_t += ebias[i] (ebias: exp of the bias) ;  phi_t = f_t * gate[t,h] (gate)
 *   Theta_t = temp[r] * (offset[i] + sum_{s<=t} phi_s)
 *   y[r]    = x[r] cos Theta - x[r+R] sin Theta,    y[r+R] = x[r] sin Theta + x[r+R] cos Theta
 *
 * selrope_angles does the per-token chain above to cos and sin in one pass over the tokens (per sequence and
 * block of channels), keeping the conv window, the previous a and the angle sum in registers: the rotations of
 * a step (q, k, forward and backward) read its cos and sin. Its backward is one pass in reverse order:
 * dphi_t = temp * sum_{s>=t} dTheta_s (a reverse cumulative sum), then back through the gate, bias, skip, act
 * and conv to dp. Sums (the angle, the reverse sum, the conv weight and bias gradients) run in double; the angle
 * is rounded to float once and its cos and sin (nn/fastmath.h's fast_sincos_) are rounded once from double.
 * Every channel's result is independent of the thread count and of how the channels are blocked.
 */
#ifndef SEQ_SELROPE_H
#define SEQ_SELROPE_H

#include <stddef.h>

#define SELROPE_K_MAX 8  // conv taps at most

// the per-token chain between the projection p and the angles (see above); pointers not owned
typedef struct SelRopeChain {
    int H, R;            // heads, pairs per head (rows of H R channels)
    int K;               // conv taps (0: no conv, a = p)
    int silu, skip;      // act = silu (needs K > 0); f = a_t - a_{t-1}
    const float *conv;   // (H R, K) conv weights, weight[i, K-1] on the current token; NULL when K = 0
    const float *ebias;  // (H R) exp(bias) added to f, or NULL
    const float *temp;   // (R) temperatures
} SelRopeChain;

// decoding state of one sequence, in floats: [angle sums (H R) | K > 0: conv window (H R, K-1), oldest input
// first | skip: the last a (H R)]
size_t selrope_chain_state_size(const SelRopeChain *o);
// cs, sn (B,T,H,R) = cos, sin of Theta from p (B,T,H,R). gate (B,T,H) the gate values (not their logits) or
// NULL. Saved for the backward when non-NULL: csave (B,T,H,R) the conv output (act's input, needed with silu),
// fsave (B,T,H,R) f before the gate (needed with a gate). state: sequence b's at state + b * stride
// (selrope_chain_state_size floats), read as the carried history and overwritten by it after the T tokens;
// NULL = the empty history (zeros), nothing written.
void selrope_angles(float *cs, float *sn, float *csave, float *fsave, float *state, size_t stride, const float *p,
                    const float *gate, const SelRopeChain *o, int B, int T);
// floats of selrope_angles_backward's work space: B H R (K + 1)
size_t selrope_angles_work_size(const SelRopeChain *o, int B);
// backward of selrope_angles without a carried state: dp (B,T,H,R) from dtheta (B,T,H,R) (written; dp may alias
// dtheta). dconv (H R, K) accumulated (+=) when K > 0; dsum (H R) = sum over (b,t) of df (written, with ebias:
// the bias gradient is dsum * ebias); dgate (B,T,H,R) = dphi * f per channel (written, with a gate: the gate's
// gradient is its sum over the head's R channels). work: selrope_angles_work_size floats.
void selrope_angles_backward(float *dp, float *dconv, float *dsum, float *dgate, float *work, const float *dtheta,
                             const float *p, const float *csave, const float *fsave, const float *gate,
                             const SelRopeChain *o, int B, int T);
// out, inp (N,H,2R) rotated by the angles whose cos, sin are cs, sn (N,H,R); out may alias inp
void selrope_rotate(float *out, const float *inp, const float *cs, const float *sn, int N, int H, int R);
// dinp (N,H,2R) = R^T dout (written; may alias dout); dtheta (N,H,R) += the angle gradient, given out (the
// forward's rotated rows)
void selrope_rotate_backward(float *dinp, float *dtheta, const float *dout, const float *out, const float *cs,
                             const float *sn, int N, int H, int R);

#endif
