/*
 * Multi-head causal softmax attention, tiled with an online softmax (FlashAttention-style), so memory is
 * O(T*HS) per head and any T works (train at 512, evaluate at 4096+). q, k, v arrive already projected
 * and, for RoPE-family schemes, already rotated (nn/rotary.h); this kernel adds the schemes that act on
 * the logits or on the attention weights. For query i and key j (positions within the sequence):
 *
 *   s_ij = scale * q_i.k_j  - slopes[h] * (i - j)  + (F[i] - F[j])        visible iff j <= i and i-W < j
 *   p_ij = exp(s_ij - lse_i),   lse_i = log sum_j exp(s_ij)               (softmax over visible j)
 *   w_ij = p_ij * exp(-decay[h] * (i - j))                                 (no renormalisation)
 *   out_i = sum_j w_ij v_j
 *
 * Position schemes and how a caller gets each:
 *   none (NoPE)     no options
 *   rope, sc_rope   rotate q, k before the call (rotary_forward, with the scheme's frequencies)
 *   alibi           slopes = alibi_slopes(NH)
 *   fox             fgate = F, the cumulative sum over t of log forget gates logsigmoid(w.x + b); the
 *                   gradient dF comes back and the caller chains it through the cumsum and logsigmoid
 *   decayed_rope    rotate q, k, then either slopes = per-head decays (decay on the logits: the exponential
 *                   decay exp(-d(i-j)) multiplies the unnormalised weights, i.e. is renormalised by the
 *                   softmax) or decay = per-head decays (RFA-style post-softmax factor, not renormalised)
 *   sliding window  window = W
 *   rfa             filter = an AttnFilter (below): the Robust Filter Attention logits, which replace the
 *                   scaled dot product (slopes, fgate and decay must then be unset)
 *
 * Every output element is computed by one thread in a fixed order, so results are bit-identical for any
 * OMP_NUM_THREADS. Per-thread scratch is a few tiles (O(tile * HS)); nothing is O(T^2).
 */
#ifndef SEQ_ATTENTION_H
#define SEQ_ATTENTION_H

#include <stddef.h>

// Robust Filter Attention logits (RFA paper, Algorithm 1): for query i, key j, lag d = i - j, with
// s = q_i.k_j, qn = |q_i|^2, kn = |k_j|^2 (the kernel forms both) and per-head tables over the lag:
//   R2  = qn + E[d]^2 kn - 2 E[d] s                       (squared residual of q_i against the transported k_j)
//   STUDENT  l = a[d] - beta * log(1 + c[d] R2)
//   GAUSS    l = a[d] - beta * c[d] R2
//   DOT      l = beta * s                                  (the tables a, c are unused)
// and the post-softmax factor w_ij = p_ij E[d] (no renormalisation), E also from the table. The backward
// returns the gradients of the tables and of beta, so any parameterisation of them (a mixer's SDE
// parameters) gets its gradient by the chain rule outside the kernel.
enum { ATTN_FILTER_STUDENT = 1, ATTN_FILTER_GAUSS = 2, ATTN_FILTER_DOT = 3 };

typedef struct AttnFilter {
    int kind;               // ATTN_FILTER_*
    int lag_len;            // L >= T: the tables hold lags 0 .. L-1
    const float *bias;      // (NH, L) a[d]
    const float *prec;      // (NH, L) c[d]
    const float *decay;     // (NH, L) E[d] in (0, 1]
    const float *beta;      // (NH,)
    // backward outputs, ACCUMULATED (+=); any may be NULL. Summed over b in a fixed order.
    float *dbias, *dprec, *ddecay;  // (NH, L)
    float *dbeta;                   // (NH,)
} AttnFilter;

typedef struct AttnOpts {
    float scale;            // logits = scale * q.k (usually 1/sqrt(HS))
    int window;             // 0 = full causal; W > 0: key j visible from query i iff i-W < j <= i
    const float *slopes;    // (NH,) or NULL: additive bias -slopes[h] * (i - j) (ALiBi; "decay on logits");
                            //   fixed, gets no gradient
    const float *fgate;     // (B,NH,T) or NULL: additive bias F[i] - F[j], F the cumulative sum over t of log
                            //   forget gates (Forgetting Transformer, "fox"); F is given, its gradient returned
    const float *decay;     // (NH,) or NULL: post-softmax factor exp(-decay[h] * (i - j)), no renormalisation
                            //   (RFA paper baselines B3/B4); decay[h] >= 0, 0 = no decay
    const AttnFilter *filter;  // or NULL: RFA logits (scale unused)
} AttnOpts;

// {scale = 1/sqrt(HS), full causal, no bias, no decay}
AttnOpts attn_opts_default(int HS);

// out (B,NH,T,HS); lse (B,NH,T): log-sum-exp of each query row's logits, kept for the backward pass;
// q, k, v (B,NH,T,HS). out must not alias q, k or v. T >= 1, HS >= 1.
void attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                       const AttnOpts *o, int B, int NH, int T, int HS);

// ACCUMULATES (+=): dq, dk, dv (B,NH,T,HS); dfgate (B,NH,T) when non-NULL and o->fgate is given;
// ddecay (NH,) when non-NULL and o->decay is given. Any of dq/dk/dv may be NULL (skipped).
// dout, out (B,NH,T,HS); lse (B,NH,T) from attention_forward with the same inputs and options;
// q, k, v (B,NH,T,HS). Recomputes the weights tile by tile from lse: no T x T buffers.
// Parallel over (b,h); ddecay is summed over b in a fixed order after the parallel part.
void attention_backward(float *dq, float *dk, float *dv, float *dfgate, float *ddecay,
                        const float *dout, const float *out, const float *lse,
                        const float *q, const float *k, const float *v, const AttnOpts *o,
                        int B, int NH, int T, int HS);

// attention_backward, except that dq, dk, dv (those not NULL) are WRITTEN (=, not +=): the caller
// needs no zeroing pass over 3·B·NH·T·HS floats (each head's slices are filled while cache-hot).
// dfgate and ddecay still accumulate. Same values as attention_backward into zeroed buffers.
void attention_backward_write(float *dq, float *dk, float *dv, float *dfgate, float *ddecay,
                              const float *dout, const float *out, const float *lse,
                              const float *q, const float *k, const float *v, const AttnOpts *o,
                              int B, int NH, int T, int HS);

// the softmax weights of one head before any post-softmax factor (for attention maps): P (T, T) with
// P[i][j] = p_ij for visible j and NaN for hidden j (above the diagonal, outside the window). q, k (T, HS)
// and lse (T,) are the (b, h) slices the forward saw, h the head (for per-head options), b the batch
// row (for fgate). O(T^2 HS) time.
void attention_probs(float *P, const float *q, const float *k, const float *lse, const AttnOpts *o,
                     int b, int h, int NH, int T, int HS);

// one decoding step: the query at position t (0-based) of B sequences attends to positions <= t of its
// own sequence, as attention_forward's row t would (o->filter unsupported; o->fgate unused: g gives F).
// q, k, v (B,NH,HS) the token's (already rotated) q, k and v; g (B,NH) its cumulative log forget gate F_t,
// or NULL without one. kcache, vcache (NH,S,HS) and gcache (NH,S) (NULL without g) per sequence, sequence b's
// at b * stride floats: a ring of S slots, position j in slot j % S. The step writes position t's k, v
// (and F_t), then out (B,NH,HS). Visible: j > t - S, and j > t - window with a window; so S >= t + 1, or
// S >= window, keeps the result equal to the full forward's.
void attention_step(float *out, const float *q, const float *k, const float *v, const float *g, float *kcache,
                    float *vcache, float *gcache, size_t stride, const AttnOpts *o, int t, int B, int NH, int HS,
                    int S);

// slopes (NH,): the standard ALiBi slopes of Press et al. (2022). For NH a power of two, the geometric
// sequence slopes[h] = 2^(-8(h+1)/NH) (NH = 8: 1/2, 1/4, ..., 1/256). Otherwise, with n = the largest
// power of two below NH: the n slopes for n heads, followed by the odd-indexed slopes for 2n heads
// (2^(-8(2m+1)/(2n)) for m = 0, 1, ...) until NH slopes are taken — the rule of the reference
// implementation, which interleaves between the power-of-two sequences.
void alibi_slopes(float *slopes, int NH);

#endif
