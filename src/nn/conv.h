/*
 * Causal depthwise short convolution along time (the "ShortConvolution" of linear-attention and SSM
 * mixers): every channel c has its own K taps, and output t sees inputs t-K+1 .. t only.
 *
 *   out[b,t,c] = bias[c] + sum_{j=0}^{K-1} weight[c,j] * inp[b, t-(K-1)+j, c]      (inp = 0 before t=0)
 *
 * Weight layout (C,K): PyTorch's Conv1d(C, C, K, groups=C, padding=K-1) weight (C,1,K) squeezed, so
 * weight[c,K-1] multiplies the current token and weight[c,0] the oldest. bias may be NULL.
 *
 * conv1d_causal_step is the same op for one token of recurrent decoding; it keeps the last K-1 inputs
 * per (b,c) in a state that starts at zero (the zero padding), and reproduces the full forward token
 * by token.
 */
#ifndef SEQ_CONV_H
#define SEQ_CONV_H

// out (B,T,C); inp (B,T,C); weight (C,K); bias (C) or NULL. out must not alias inp.
void conv1d_causal_forward(float *out, const float *inp, const float *weight, const float *bias,
                           int B, int T, int C, int K);

// dinp (B,T,C), dweight (C,K), dbias (C): each accumulated (+=), each may be NULL;
// dout (B,T,C); inp (B,T,C); weight (C,K). dinp must not alias dout.
// dweight/dbias are summed over (b,t) in a fixed order per channel, so they do not depend on the
// number of threads.
void conv1d_causal_backward(float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight,
                            int B, int T, int C, int K);

// out (B,C); state (B,C,K-1): the last K-1 inputs of each (b,c), oldest first (zeros before the first
// token), updated in place; x (B,C) the current token's input; weight (C,K); bias (C) or NULL.
// out may alias x; neither may alias state.
void conv1d_causal_step(float *out, float *state, const float *x, const float *weight, const float *bias,
                        int B, int C, int K);

#endif
