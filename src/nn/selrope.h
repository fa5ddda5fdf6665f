/*
 * Selective RoPE (paper 003; reference/seed_mixers.md C.3), the pure op: input-dependent cumulative angles
 * and the rotation they drive. Tensors are rows of H heads; a head of q or k has Dk = 2R channels rotated in
 * NeoX half-split pairs (r, r + R), the same angle for q and k:
 *
 *   Theta[b,t,h,r] = temp[r] * (offset[b,h,r] + sum_{s<=t} phi[b,s,h,r])
 *   y[r]   = x[r] cos Theta - x[r+R] sin Theta,    y[r+R] = x[r] sin Theta + x[r+R] cos Theta
 *
 * Backward: dx = R(Theta)^T dy; dTheta[r] = dy[r+R] y[r] - dy[r] y[r+R] (summed over q and k by the caller
 * accumulating), and dphi[t] = temp * sum_{s>=t} dTheta[s] (a reverse cumulative sum).
 * Sums run in double; the angle is rounded to float once, and its cos and sin (in double, rounded to float) are
 * formed once by selrope_cossin for the four rotations of a step (q, k, forward and backward).
 */
#ifndef SEQ_SELROPE_H
#define SEQ_SELROPE_H

#include <stddef.h>

// theta (B,T,H,R) from phi (B,T,H,R); temp (R,); offset (B,H,R) the carried angle sums (NULL = 0);
// last (B,H,R) gets offset + sum over all T of phi (the next call's offset), may be NULL
void selrope_angles(float *theta, float *last, const float *phi, const float *temp, const float *offset, int B, int T,
                    int H, int R);
// dphi (B,T,H,R) = temp[r] * reverse cumsum over t of dtheta (written, not accumulated)
void selrope_angles_backward(float *dphi, const float *dtheta, const float *temp, int B, int T, int H, int R);
// cs, sn (n,) = cos, sin of theta (n,); sn may not alias theta, cs may (then theta is overwritten)
void selrope_cossin(float *cs, float *sn, const float *theta, size_t n);
// out, inp (N,H,2R) rotated by the angles whose cos, sin are cs, sn (N,H,R); out may alias inp
void selrope_rotate(float *out, const float *inp, const float *cs, const float *sn, int N, int H, int R);
// dinp (N,H,2R) = R^T dout (written; may alias dout); dtheta (N,H,R) += the angle gradient, given out (the
// forward's rotated rows)
void selrope_rotate_backward(float *dinp, float *dtheta, const float *dout, const float *out, const float *cs,
                             const float *sn, int N, int H, int R);

#endif
