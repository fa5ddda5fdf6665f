/*
 * Selective RoPE (the Selective RoPE paper; docs/mixers.md, "Selective RoPE") as an option block of a mixer: the
 * `selective_rope` object of gla, gated_deltanet and attention. One copy of the glue (parameters, activations,
 * forward, backward, one-token step) that each of those mixers calls around its q and k; the op itself (cumulative
 * angles, rotation) is nn/selrope.h. Per token, with x the layer input (B,T,C) and H the mixer's heads:
 *
 *   xn   = l2norm(x per head chunk of C/H)                       (eps 1e-6 inside the root, as FLA's l2norm)
 *   p    = W2 (W1 xn)                      low rank, W1 (rank,C), W2 (H R, rank), no bias
 *        | scale_h normalize(W_h) xn_h     full_rank: W (H R, C/H), scale (H), each row of W_h normalised
 *   a    = act(conv4(p))   (conv: depthwise causal K=4, no bias; act none|silu)
 *        | p - p_{t-1}     (skip_conv, the authors': the first difference in place of the conv)
 *        | p               (conv false, skip_conv false: a seqtrain addition)
 *   f    = a ;  f += exp(phi_bias) (use_bias)
 *   phi  = f * sigmoid(gate_w xn + gate_b)   (use_gate: one gate per head, as the authors' phase_gate_proj)
 *   Theta_t = temperature * (offset + sum_{s<=t} phi_s);  q, k <- R(Theta_t) q, R(Theta_t) k  (half-split pairs)
 *
 * The step state per sequence: [angle sum (H R) | conv cache (H R, 3) | skip_conv: last p (H R)].
 */
#ifndef SEQ_MIXERS_SELROPE_H
#define SEQ_MIXERS_SELROPE_H

#include <stddef.h>

#include "core/config.h"
#include "mixers/mixer.h"

#define SELROPE_MAX_R 512  // Dk / 2 at most
#define SELROPE_CONV_K 4

typedef struct SelRopeOpts {
    // from the config
    int enabled, rank, full_rank, conv, skip_conv, use_bias, use_gate;
    char conv_act[CFG_STR_MAX], temp_type[CFG_STR_MAX];
    double temp_theta, temp_max;
    // derived by selrope_check
    int C, H, Dh, R, HR, silu, has_conv;  // has_conv: conv and not skip_conv
    int k_w1, k_w2, k_scale, k_conv, k_bias, k_gw, k_gb;  // tensor indices in the mixer (-1 = absent)
    float temp[SELROPE_MAX_R];
} SelRopeOpts;

extern const CfgSection SELROPE_SECTION;

// the schema row of a mixer whose options struct OptsType holds a SelRopeOpts at `field`
#define SELROPE_KEY(OptsType, field) \
    {"selective_rope", CFG_SECTION, offsetof(OptsType, field), "{}", 0, 0, {NULL}, &SELROPE_SECTION, \
     "Selective RoPE on q and k (input-dependent cumulative rotation; docs/mixers.md \"Selective RoPE\")."}

// once the mixer knows C, H and its key head size Dk: validates (errors name path.selective_rope.*), fills the
// derived fields and assigns tensor indices from *k on (advancing it). Nothing happens unless enabled.
int selrope_check(SelRopeOpts *s, const char *path, int C, int H, int Dk, int *k, Err *e);
// declares the tensors "prefix.selective_rope.*" in the order selrope_check numbered them
int selrope_params(const SelRopeOpts *s, ParamTable *pt, const char *prefix, Err *e);
size_t selrope_act_size(const SelRopeOpts *s, int B, int T);
// the angles of x (B,T,C) into the block's activations acts (selrope_act_size floats), kept as their cos and sin
void selrope_forward(const Mixer *m, const SelRopeOpts *s, float *acts, const float *x, int B, int T);
// after selrope_forward: q or k rows out, inp (B,T,H,2R) rotated by the saved angles; out may alias inp
void selrope_apply(const SelRopeOpts *s, float *acts, float *out, const float *inp, int B, int T);
// its backward: dinp = R^T dout (may alias dout), dtheta (B,T,H,R) += the angle gradient given out (the rotated rows)
void selrope_apply_backward(const SelRopeOpts *s, float *acts, float *dinp, float *dtheta, const float *dout,
                            const float *out, int B, int T);
// floats of the backward's work space (0 unless enabled), a slice of the mixer's scratch that nothing else uses
// during the backward: dtheta (B,T,H,R) first (selrope_dtheta), then selrope_backward's temporaries
size_t selrope_scratch_size(const SelRopeOpts *s, int B, int T);
// dtheta within that work space, zeroed: selrope_apply_backward accumulates into it for q and for k
float *selrope_dtheta(const SelRopeOpts *s, float *scratch, int B, int T);
// backward: takes dtheta (overwritten) back to the tensors and adds the input gradient into dx (B,T,C);
// scratch (selrope_scratch_size) is the one selrope_dtheta was given
void selrope_backward(Mixer *m, const SelRopeOpts *s, float *acts, float *scratch, float *dx, const float *x, int B,
                      int T);
size_t selrope_state_size(const SelRopeOpts *s);
// its terms of the decoding state (MixerOps.state_terms): the angle sums, the conv history, the last phi
void selrope_state_terms(const SelRopeOpts *s, StateTerms *st);
// one token of B sequences: state of sequence b at state + b * stride (zeroed = the empty prefix); rotates q and k
// (B, H, 2R) in place
void selrope_step(const Mixer *m, const SelRopeOpts *s, float *state, size_t stride, float *q, float *k,
                  const float *x, int B);

#endif
