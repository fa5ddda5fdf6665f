/*
 * The delta-rule engine (DeltaNet, Gated DeltaNet; docs/mixers.md, "deltanet"): per batch row b and
 * head h, a state S (Dk,Dv) that each token corrects towards its value instead of only adding to it:
 *
 *   S_t = a_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,        o_t = S_t^T (scale q_t)
 *
 * with a_t = exp(g_t) for a log-decay g per head and token (B,T,H) (Gated DeltaNet), or g absent (a = 1,
 * DeltaNet), and the writing strength beta (B,T,H) in (0,2). The caller L2-normalises q and k (then every
 * I - beta k k^T has norm <= 1 and the state cannot grow); the engine itself takes them as they come.
 *
 * Forward and backward are chunkwise parallel (the WY / UT form of FLA's chunk kernels, derived in delta.c):
 * inside a chunk of L tokens a unit lower-triangular L x L solve turns the values into the "new values"
 * U' (what each token actually writes), after which outputs and the next state are matrix products as in
 * nn/linrec.h. The forward keeps one state per chunk start (ckpt); the backward recomputes the rest of a
 * chunk from it. All exponents are differences of in-chunk cumulative log-decays that are <= 0.
 *
 * Layouts: q, k (B,T,H,Dk); v, o (B,T,H,Dv); beta, g (B,T,H). Parallel over (b,h); every gradient belongs
 * to one (b,h), so nothing is reduced across threads and results do not depend on the thread count.
 * delta_step is one token of recurrent decoding: token by token it reproduces the forward.
 */
#ifndef SEQ_NN_DELTA_H
#define SEQ_NN_DELTA_H

#include <stddef.h>

typedef struct DeltaDims {
    int B, T, H, Dk, Dv;
    int chunk;    // tokens per chunk L >= 1 (the last chunk may be shorter)
    float scale;  // queries enter as scale * q
} DeltaDims;

// floats of one (b,h) state: Dk*Dv
size_t delta_state_size(const DeltaDims *d);
// floats of the forward's checkpoints: B H ceil(T/chunk) states
size_t delta_ckpt_size(const DeltaDims *d);
// state (B,H,state_size) set to the empty prefix (zeros)
void delta_state_init(float *state, const DeltaDims *d);

// o (B,T,H,Dv); ckpt (delta_ckpt_size) or NULL when no backward follows; state (B,H,state_size) or NULL
// (= empty): on entry the state before token 0, on exit the state after token T-1. q, k (B,T,H,Dk);
// v (B,T,H,Dv); beta (B,T,H); g (B,T,H) log-decays (<= 0), or NULL for no decay.
void delta_forward(float *o, float *ckpt, float *state, const float *q, const float *k, const float *v,
                   const float *beta, const float *g, const DeltaDims *d);

// gradients of the forward that wrote ckpt, given dout (B,T,H,Dv). Accumulated (+=): dq, dk (B,T,H,Dk),
// dv (B,T,H,Dv), dbeta (B,T,H) (NULL: not wanted, e.g. a fixed beta), dg (B,T,H) (NULL: not wanted; ignored
// when g is NULL). No gradient flows to an initial state.
void delta_backward(float *dq, float *dk, float *dv, float *dbeta, float *dg, const float *dout, const float *ckpt,
                    const float *q, const float *k, const float *v, const float *beta, const float *g,
                    const DeltaDims *d);

// one token of recurrent decoding (d->T is ignored): o (B,H,Dv); state (B,H,state_size); q, k (B,H,Dk);
// v (B,H,Dv); beta (B,H); g (B,H) or NULL
void delta_step(float *o, float *state, const float *q, const float *k, const float *v, const float *beta,
                const float *g, const DeltaDims *d);

#endif
