/*
 * FLA's ShortConvolution on projected streams (use_short_conv): q, k and v go x -> x W^T -> a causal
 * depthwise conv of K taps (nn/conv.h, no bias) -> silu, before whatever the mixer does next (feature maps,
 * L2 norms, rotations). deltanet, gated_deltanet, gla, retnet and gsa offer it as the key `conv`; this file
 * is the one place for its key, its tensors (q_conv1d, k_conv1d, v_conv1d of (width, K)), the three passes
 * over a stream (full forward, its backward, one decoding token) and the decoding cache's size, so the
 * mixers only decide where the streams go.
 *
 * A stream is the pair of tensor indices (kp projection, kc conv) in the mixer's declaration order; kc < 0
 * (K = 0) means no conv: the stream is then silu(x W^T) with silu0 set (the delta rule's convention without
 * a conv), or the raw projection x W^T with silu0 clear (gla, retnet, gsa: FLA without use_short_conv).
 *
 * Decoding cache per sequence: q (HK, K-1), k (HK, K-1), v (HV, K-1), the last K-1 projections of each
 * channel, oldest first, zeros before the first token.
 */
#ifndef SEQ_SHORTCONV_H
#define SEQ_SHORTCONV_H

#include <stddef.h>

#include "core/err.h"
#include "core/params.h"
#include "mixers/mixer.h"
#include "mixers/mixer_kit.h"

// the `conv` row of a mixer's schema, bound into the int `field` of OptsType; without_doc says what q, k, v
// are with 0 or 1 taps
#define SHORTCONV_KEY(OptsType, field, def, without_doc) \
    MIXER_KEY(OptsType, "conv", CFG_INT, field, def, 0, 64, NULL, \
              "Taps K of the causal depthwise short convolutions on q, k, v (FLA's ShortConvolution: no bias, " \
              "silu after); 0 or 1 = no conv (" without_doc ").")

// the taps from the key's value: 0 or 1 -> 0 (no conv)
static inline int shortconv_taps(int conv) { return conv > 1 ? conv : 0; }

// floats of the decoding cache per sequence: (2 HK + HV)(K - 1), 0 without a conv
static inline size_t shortconv_state_size(int HK, int HV, int K) {
    return K ? (size_t)(2 * HK + HV) * (size_t)(K - 1) : 0;
}

// the caches' term of the decoding state (MixerOps.state_terms), Table 1's short-conv row D(k_conv − 1) with
// D = 2 H dk + H dv channels; nothing without a conv
void shortconv_state_terms(StateTerms *st, int H, int Dk, int Dv, int K);

// declare q_conv1d (HK,K), k_conv1d (HK,K), v_conv1d (HV,K) under prefix: N(0, std), weight-decayed (FLA's
// _init_weights treats the Conv1d as a Linear); nothing when K = 0. Returns 0 or -1 with e set.
int shortconv_params(ParamTable *pt, const char *prefix, int HK, int HV, int K, float std, Err *e);

// one stream over B,T: s (BT,W) = silu(c); c (BT,W) = conv_K(p), silu's input, kept for the backward;
// p (BT,W) = x W^T, the conv's input, kept too; x (BT,C); kp, kc the stream's tensors. Without a conv
// (kc < 0) p is unused and: silu0 set, c = x W^T and s = silu(c); silu0 clear, s = x W^T and c is unused.
// Unused buffers may be NULL; s may alias neither c nor p.
void shortconv_forward(const Mixer *m, int kp, int kc, int K, int silu0, float *s, float *c, float *p,
                       const float *x, int B, int T, int W);

// its backward: dx (BT,C) and the two tensors' gradients accumulate (+=) from ds (BT,W), the gradient of s;
// c, p as the forward kept them; dc, dp (BT,W) scratch (what the forward left unused is unused here too)
void shortconv_backward(Mixer *m, int kp, int kc, int K, int silu0, float *dx, float *dc, float *dp,
                        const float *ds, const float *c, const float *p, const float *x, int B, int T, int W);

// one token of B sequences: s (B,W) = the forward's s at the next position; x (B,C); sequence b's cache of
// this stream (W, K-1) is state + b * stride, updated in place
void shortconv_step(const Mixer *m, int kp, int kc, int K, int silu0, float *s, float *state, size_t stride,
                    const float *x, int B, int W);

#endif
