/*
 * The causal depthwise short convolution on the GPU, the device counterpart of nn/conv.h (FLA's ShortConvolution
 * of gla, retnet, deltanet, gated_deltanet, gsa; Mamba2's and mLSTM's conv with its bias; PaTH's w):
 *
 *   out[b,t,c] = bias[c] + sum_{j=0}^{K-1} weight[c,j] * inp[b, t-(K-1)+j, c]      (inp = 0 before t = 0)
 *
 * weight (C,K) as on the host (weight[c,K-1] multiplies the current token). Each output sums the bias, then the taps
 * in order j = 0 .. K-1, as the host does (the GPU's fused multiply-adds round differently). The weight and bias
 * gradients are sums over the B*T rows in a fixed order: rows (b,t) in chunks of 64, one partial per (chunk,
 * channel, tap), then the chunks added in order (no atomics), so two runs give the same bits.
 *
 * Every pointer is device memory. Callable from C (the parity test).
 */
#ifndef SEQ_GPU_CONV_CUH
#define SEQ_GPU_CONV_CUH

#ifdef __cplusplus
extern "C" {
#endif

// out (B,T,C) WRITTEN; inp (B,T,C); weight (C,K); bias (C,) or NULL. out must not alias inp.
void gpu_conv1d_causal_forward(float *out, const float *inp, const float *weight, const float *bias, int B, int T,
                               int C, int K);
// dinp (B,T,C) +=, dweight (C,K) +=, dbias (C,) +=: each may be NULL; dout (B,T,C); inp (B,T,C); weight (C,K).
// dinp must not alias dout.
void gpu_conv1d_causal_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                const float *weight, int B, int T, int C, int K);

#ifdef __cplusplus
}
#endif

#endif
