/*
 * PaTH attention (Yang et al. 2025, "PaTH Attention: Position Encoding via Accumulating Householder
 * Transformations"; the dualities paper's section on PaTH) and PaTH-FoX, for one layer's heads. For query i,
 * key j <= i:
 *
 *   H_s    = I - beta_s w_s w_s^T                      (generalised Householder; w_s unit, beta_s in (0, 2))
 *   s_ij   = scale * q_i^T (H_i H_{i-1} ... H_{j+1}) k_j  + (G_i - G_j)      (j = i: scale * q_i.k_i)
 *   out_i  = sum_j softmax_j(s_ij) v_j,   lse_i = log sum_j exp(s_ij)
 *
 * G (PaTH-FoX) is the cumulative log forget gate, as AttnOpts.fgate of nn/attention.h; its gradient comes back.
 *
 * Algorithm (nothing T x T or T x T x d is formed). Split the sequence into chunks of `chunk` positions; chunk c
 * covers [c0, c1]. Let P_c = H_{c1} ... H_{c0} (d x d), qn_i = H_{c0} ... H_i q_i (the query carried back to
 * the start of its chunk) and kn_j = H_{c1} ... H_{j+1} k_j (the key carried to the end of its chunk). For i in
 * chunk c and j in an earlier chunk c':
 *   q_i^T H_i ... H_{j+1} k_j = qn_i^T P_{c-1} ... P_{c'+1} kn_j,
 * so the forward of query chunk c walks the key chunks c-1, c-2, ..., 0 with a running row block
 * qt <- qt P_{c'} (C x d times d x d) and a flash-style online softmax over the score blocks qt kn^T; the scores
 * inside a chunk come from applying the Householders to each key in turn (O(C^2 d) per chunk). The backward
 * recomputes the chain of one query chunk (at most T x d floats), walks it upwards with the adjoint
 * (dqt_{c'} = draw kn + dqt_{c'-1} P^T, dP += qt^T dqt_{c'-1}) and finally reverses, chunk by chunk, the
 * Householder applications that made qn, kn, P and the in-chunk scores; the gradient through P_c needs
 * products of the chunk's Householders with vectors only (O(C^2 d + C d^2) per chunk).
 *
 * Work per head: about T^2 d / 2 for the scores and T^2 d^2 / (2 chunk) for the chain (with chunk ~ d about
 * twice plain attention's flops), plus O(T chunk d) of in-chunk Householder applications, which are vector
 * rather than matrix work (measured times: docs/mixers.md, `path`). Memory per head (per thread): O(T d) plus
 * (T / chunk) d x d matrices and O(chunk^2 d) for one chunk's backward; only out and lse are kept between
 * forward and backward. Every head is computed by one thread in a fixed order, so results
 * are bit-identical for any OMP_NUM_THREADS.
 *
 * Decoding (path_attn_step): when token t arrives every cached key is updated k_j <- H_t k_j before k_t is
 * appended, so the cache holds H_t ... H_{j+1} k_j and o_t is plain softmax attention over it.
 */
#ifndef SEQ_PATH_ATTN_H
#define SEQ_PATH_ATTN_H

typedef struct PathOpts {
    float scale;         // logits = scale * q^T (...) k (usually 1/sqrt(HS))
    int chunk;           // positions per chunk; 0 = 64. Changes only the float rounding
    const float *fgate;  // (B,NH,T) cumulative log forget gates G (PaTH-FoX), or NULL (PaTH)
} PathOpts;

// out (B,NH,T,HS); lse (B,NH,T); q, k, v, w (B,NH,T,HS) with w's rows unit vectors; beta (B,NH,T).
// out must not alias the inputs. T >= 1, HS >= 1.
void path_attn_forward(float *out, float *lse, const float *q, const float *k, const float *v, const float *w,
                       const float *beta, const PathOpts *o, int B, int NH, int T, int HS);

// ACCUMULATES (+=) dq, dk, dv, dw (B,NH,T,HS), dbeta (B,NH,T) and dfgate (B,NH,T) (when non-NULL and o->fgate is
// given). dw is the gradient w.r.t. w as given (the caller chains it through its normalisation). dout, out, lse
// from path_attn_forward with the same inputs and options. None of the gradients may be NULL except dfgate.
void path_attn_backward(float *dq, float *dk, float *dv, float *dw, float *dbeta, float *dfgate, const float *dout,
                        const float *out, const float *lse, const float *q, const float *k, const float *v,
                        const float *w, const float *beta, const PathOpts *o, int B, int NH, int T, int HS);

// one decoding step at position t (0-based): q, k, v, w (B,NH,HS), beta (B,NH), g (B,NH) the cumulative log
// gate G_t (or NULL without fgate; o->fgate is not read). kcache, vcache (B,NH,maxT,HS) and gcache (B,NH,maxT)
// (gcache may be NULL without g) hold positions 0..t-1; this updates the cached keys by H_t, appends position t
// and writes out (B,NH,HS). t < maxT. Token by token this reproduces path_attn_forward.
void path_attn_step(float *out, const float *q, const float *k, const float *v, const float *w, const float *beta,
                    const float *g, float *kcache, float *vcache, float *gcache, const PathOpts *o, int t, int B,
                    int NH, int HS, int maxT);

#endif
