/*
 * Normalisation layers over the last dimension of an (N,C) activation, N = B*T rows:
 *   LayerNorm  y = (x - mean) * rstd * weight + bias, biased variance, eps LAYERNORM_EPS = 1e-5
 *              (PyTorch's default), bias optional;
 *   RMSNorm    y = x * rstd * weight, rstd = 1/sqrt(mean(x^2) + eps), eps RMSNORM_EPS = 1e-6 (fixed,
 *              like LayerNorm's, so the op keeps llm.c's signature shape; change the constant here if
 *              a reference model needs another value).
 * Forward caches the per-row statistics backward needs (mean, rstd). Backward ACCUMULATES (+=) into
 * every gradient buffer. Results do not depend on the OpenMP thread count: rows are processed
 * independently, and the weight/bias gradients are summed per column in row order.
 */
#ifndef SEQ_NN_NORM_H
#define SEQ_NN_NORM_H

#define LAYERNORM_EPS 1e-5f
#define RMSNORM_EPS 1e-6f

// bias may be NULL (no bias term)
void layernorm_forward(float *out, float *mean, float *rstd,
                       const float *inp, const float *weight, const float *bias,
                       int N, int C);
// dbias may be NULL (then no bias gradient is written; pass NULL when the forward had no bias)
void layernorm_backward(float *dinp, float *dweight, float *dbias,
                        const float *dout, const float *inp, const float *weight,
                        const float *mean, const float *rstd,
                        int N, int C);

// L2 norm of each row: out = inp / n with n = max(|inp|, eps) (L2NORM_FLOOR: KLA's q, k) or n = sqrt(|inp|^2 + eps)
// (L2NORM_ADD: flash-linear-attention's l2norm, eps inside the root). nrm (N,) keeps n for the backward; out may
// alias inp. Backward: dinp += (dout - out (out . dout)) / n, and dout / eps for a row held at the floor.
enum { L2NORM_FLOOR, L2NORM_ADD };
void l2norm_forward(float *out, float *nrm, const float *inp, int N, int C, float eps, int mode);
void l2norm_backward(float *dinp, const float *dout, const float *out, const float *nrm, int N, int C, float eps,
                     int mode);
void rmsnorm_forward(float *out, float *rstd,
                     const float *inp, const float *weight,
                     int N, int C);
void rmsnorm_backward(float *dinp, float *dweight,
                      const float *dout, const float *inp, const float *weight, const float *rstd,
                      int N, int C);

#endif
