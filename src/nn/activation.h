/*
 * Elementwise activations and the residual add, forward and backward:
 *   gelu      exact erf form 0.5 x (1 + erf(x/sqrt2)) (not the tanh approximation)
 *   relu      max(x, 0); the derivative at exactly 0 is taken as 0
 *   silu      x * sigmoid(x), finite for any finite x
 *   swiglu    inp (N,2H) holds [a | b] per row, out (N,H) = silu(a) * b
 *   residual  out = a + b
 *   zero_fill x = 0, in parallel
 * Backward ACCUMULATES (+=) into every gradient buffer and needs the forward's input (not its
 * output), so out must not overwrite inp when a backward follows. Element counts are size_t
 * because B*T*4C can pass 2^31 at larger sizes.
 */
#ifndef SEQ_NN_ACTIVATION_H
#define SEQ_NN_ACTIVATION_H

#include <stddef.h>

void gelu_forward(float *out, const float *inp, size_t n);
void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

void relu_forward(float *out, const float *inp, size_t n);
void relu_backward(float *dinp, const float *inp, const float *dout, size_t n);

void silu_forward(float *out, const float *inp, size_t n);
void silu_backward(float *dinp, const float *inp, const float *dout, size_t n);

void swiglu_forward(float *out, const float *inp, int N, int H);
void swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int H);

void residual_forward(float *out, const float *a, const float *b, size_t n);
void residual_backward(float *da, float *db, const float *dout, size_t n);

// x (n,) = 0, the threads each clearing a slice (large buffers: the gradients, the backward's (B,T,C) sums)
void zero_fill(float *x, size_t n);

#endif
