/*
 * The linear-recurrence engine: every mixer of the linear-attention / SSM family (linear attention,
 * RetNet, GLA, Mamba2's SSD, mLSTM; docs/mixers.md, "The linear-recurrence family") is this recurrence per
 * batch row b and head h, with a state S (Dk,Dv):
 *
 *   S_t = diag(a_t) S_{t-1} + w_t k_t v_t^T,        o_t = S_t^T (scale q_t)
 *
 * The decay a_t = exp(g_t) is given as a log-decay g in one of five forms (LinrecDecay): absent (a = 1),
 * fixed per head (H,), one scalar per head and token (B,T,H), one value per key channel and token
 * (B,T,H,Dk), or one value per VALUE channel and token (B,T,H,Dv): LINREC_VCHANNEL decays the state's
 * columns, S_t = S_{t-1} diag(a_t) + k_t v_t^T (GSA's first pass, keys -> slots, where the slots are the
 * value side; nn/linrec.c's last sections). The input weight w_t is 1, or with `gated_in` exp(li_t) for per-token log input gates li
 * (B,T,H) (mLSTM's exponential input gate); then the state is kept stabilised as xLSTM does,
 * S~_t = exp(-m_t) S_t with m_t = max(g_t + m_{t-1}, li_t) (m before the first token = -inf, i.e. the
 * parallel form's row maximum), o_t is the stabilised S~_t^T (scale q_t), and m (B,T,H) is an output.
 *
 * Forward and backward are chunkwise parallel: inside a chunk of L tokens the outputs are matrix
 * products (the L x L decay-weighted scores times V, plus the chunk's queries against the state it
 * starts from); only the state passes from chunk to chunk. The forward keeps one state per chunk
 * start (ckpt); the backward recomputes everything else inside a chunk, so activation memory is the
 * inputs plus B H ceil(T/L) states and the work per token does not grow with T. All exponents are
 * differences of in-chunk cumulative log-decays that are <= 0 (decay from a later token back to an
 * earlier one, with the stabiliser subtracted), so no exp of a large positive number is ever taken,
 * however strong the decays or long the sequence.
 *
 * Layouts: q, k (B,T,H,Dk); v, o (B,T,H,Dv). Parallel over (b,h); reductions over b (the per-head
 * decay's gradient) are summed in a fixed order, so results do not depend on the thread count.
 * linrec_step is one token of recurrent decoding: token by token it reproduces the forward.
 */
#ifndef SEQ_NN_LINREC_H
#define SEQ_NN_LINREC_H

#include <stddef.h>

typedef enum { LINREC_NONE, LINREC_HEAD, LINREC_TOKEN, LINREC_CHANNEL, LINREC_VCHANNEL } LinrecDecay;

// the stabiliser of an empty state (gated_in): finite, so exp(g + m_empty - m) is exactly 0 without inf - inf
#define LINREC_M_EMPTY (-1e30f)

typedef struct LinrecDims {
    int B, T, H, Dk, Dv;
    int decay;     // LinrecDecay: the form of g
    int gated_in;  // 1: log input gates li (B,T,H) and the max stabiliser m; decay is NONE, HEAD or TOKEN
    int chunk;     // tokens per chunk L >= 1 (the last chunk may be shorter)
    float scale;   // queries enter as scale * q
} LinrecDims;

// floats of one (b,h) state: Dk*Dv, plus its stabiliser m when gated_in
size_t linrec_state_size(const LinrecDims *d);
// floats of the forward's checkpoints: B H ceil(T/chunk) states
size_t linrec_ckpt_size(const LinrecDims *d);
// state (B,H,state_size) set to the empty prefix (zeros; m = LINREC_M_EMPTY)
void linrec_state_init(float *state, const LinrecDims *d);

// o (B,T,H,Dv); m (B,T,H) when gated_in, else NULL; ckpt (linrec_ckpt_size) or NULL when no backward
// follows; state (B,H,state_size) or NULL (= empty): on entry the state before token 0 (a prefix already
// read), on exit the state after token T-1. q, k (B,T,H,Dk); v (B,T,H,Dv); g per d->decay (NULL for NONE:
// (H,) | (B,T,H) | (B,T,H,Dk) | (B,T,H,Dv)); li (B,T,H) when gated_in, else NULL.
void linrec_forward(float *o, float *m, float *ckpt, float *state, const float *q, const float *k, const float *v,
                    const float *g, const float *li, const LinrecDims *d);

// gradients of the forward that wrote ckpt, given dout (B,T,H,Dv) and, when gated_in, dm
// (B,T,H) or NULL (a caller that uses m itself, e.g. mLSTM's normaliser floor exp(-m)). Accumulated (+=):
// dq, dk (B,T,H,Dk), dv (B,T,H,Dv), dg shaped like g (NULL: not wanted, e.g. a fixed decay), dli (B,T,H).
// No gradient flows to an initial state.
void linrec_backward(float *dq, float *dk, float *dv, float *dg, float *dli, const float *dout, const float *dm,
                     const float *ckpt, const float *q, const float *k, const float *v, const float *g,
                     const float *li, const LinrecDims *d);

// one token of recurrent decoding (d->T is ignored): o (B,H,Dv); m (B,H) or NULL; state (B,H,state_size);
// q, k (B,H,Dk); v (B,H,Dv); g (H,) | (B,H) | (B,H,Dk) | (B,H,Dv) per d->decay; li (B,H) or NULL
void linrec_step(float *o, float *m, float *state, const float *q, const float *k, const float *v, const float *g,
                 const float *li, const LinrecDims *d);

#endif
