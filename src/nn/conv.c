/*
 * Causal depthwise short convolution: full-sequence forward/backward and a one-token decoding step.
 * See conv.h for the formula and the (C,K) weight layout.
 *
 * Every output is summed as bias, then taps j = 0 .. K-1 in order, in the forward and in the step
 * function alike, so decoding token by token gives the same floats as the full forward.
 */
#include "nn/conv.h"

#include <stddef.h>
#include <stdlib.h>

#include "core/err.h"

// channels per work item of the weight-gradient reduction: enough to stream (b,t) rows contiguously,
// few enough that a thread's double accumulators stay in L1
#define CONV_DW_BLOCK 64

void conv1d_causal_forward(float *out, const float *inp, const float *weight, const float *bias,
                           int B, int T, int C, int K) {
    // out is (B,T,C); inp is (B,T,C); weight is (C,K); bias is (C) or NULL
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float *out_bt = out + ((size_t)b * T + t) * C;
            // first tap that lands on a real token: t-(K-1)+j >= 0
            int j0 = (K - 1 - t) > 0 ? K - 1 - t : 0;
            for (int c = 0; c < C; c++) {
                const float *w_c = weight + (size_t)c * K;
                float acc = bias ? bias[c] : 0.0f;
                for (int j = j0; j < K; j++) {
                    acc += w_c[j] * inp[((size_t)b * T + (t - (K - 1) + j)) * C + c];
                }
                out_bt[c] = acc;
            }
        }
    }
}

void conv1d_causal_backward(float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight,
                            int B, int T, int C, int K) {
    // dinp is (B,T,C), dweight is (C,K), dbias is (C): all accumulated into, any may be NULL
    // dout is (B,T,C); inp is (B,T,C); weight is (C,K)

    // in the forward pass this was:
    // acc += w_c[j] * inp[b, t-(K-1)+j, c];
    // so input s receives from every output t = s+(K-1)-j that is inside the sequence. Each (b,s) row
    // is written by one iteration only, so rows parallelise without races.
    if (dinp) {
        #pragma omp parallel for collapse(2)
        for (int b = 0; b < B; b++) {
            for (int s = 0; s < T; s++) {
                float *dinp_bs = dinp + ((size_t)b * T + s) * C;
                // last tap whose output exists: t = s+(K-1)-j <= T-1
                int j0 = s + (K - 1) - (T - 1) > 0 ? s + (K - 1) - (T - 1) : 0;
                for (int c = 0; c < C; c++) {
                    const float *w_c = weight + (size_t)c * K;
                    float acc = 0.0f;
                    for (int j = j0; j < K; j++) {
                        acc += w_c[j] * dout[((size_t)b * T + (s + (K - 1) - j)) * C + c];
                    }
                    dinp_bs[c] += acc;
                }
            }
        }
    }

    // in the forward pass this was:
    // float acc = bias[c]; acc += w_c[j] * inp[b, t-(K-1)+j, c];
    // so dweight[c,j] = sum_{b,t} dout[b,t,c] * inp[b,t-(K-1)+j,c] and dbias[c] = sum_{b,t} dout[b,t,c].
    // Each work item owns a block of channels (distinct weight rows) and sums over (b,t) in a fixed
    // order, in double because B*T terms are many: the result does not depend on the thread count.
    if (dweight || dbias) {
        int nblocks = (C + CONV_DW_BLOCK - 1) / CONV_DW_BLOCK;
        #pragma omp parallel
        {
            double *acc = xmalloc((size_t)CONV_DW_BLOCK * (K + 1) * sizeof(double));
            #pragma omp for schedule(static)
            for (int blk = 0; blk < nblocks; blk++) {
                int c0 = blk * CONV_DW_BLOCK;
                int nc = C - c0 < CONV_DW_BLOCK ? C - c0 : CONV_DW_BLOCK;
                // acc[cc*(K+1) + j] for the taps, acc[cc*(K+1) + K] for the bias
                for (int k = 0; k < nc * (K + 1); k++) acc[k] = 0.0;
                for (int b = 0; b < B; b++) {
                    for (int t = 0; t < T; t++) {
                        const float *dout_bt = dout + ((size_t)b * T + t) * C + c0;
                        int j0 = (K - 1 - t) > 0 ? K - 1 - t : 0;
                        for (int j = j0; j < K; j++) {
                            const float *inp_src = inp + ((size_t)b * T + (t - (K - 1) + j)) * C + c0;
                            for (int cc = 0; cc < nc; cc++) {
                                acc[cc * (K + 1) + j] += (double)dout_bt[cc] * (double)inp_src[cc];
                            }
                        }
                        for (int cc = 0; cc < nc; cc++) acc[cc * (K + 1) + K] += (double)dout_bt[cc];
                    }
                }
                for (int cc = 0; cc < nc; cc++) {
                    int c = c0 + cc;
                    if (dweight) {
                        for (int j = 0; j < K; j++) dweight[(size_t)c * K + j] += (float)acc[cc * (K + 1) + j];
                    }
                    if (dbias) dbias[c] += (float)acc[cc * (K + 1) + K];
                }
            }
            free(acc);
        }
    }
}

void conv1d_causal_step(float *out, float *state, const float *x, const float *weight, const float *bias,
                        int B, int C, int K) {
    // out is (B,C); state is (B,C,K-1), oldest input first; x is (B,C); weight is (C,K); bias is (C) or NULL
    #pragma omp parallel for
    for (int b = 0; b < B; b++) {
        for (int c = 0; c < C; c++) {
            float *state_bc = state + ((size_t)b * C + c) * (K - 1);
            const float *w_c = weight + (size_t)c * K;
            float x_bc = x[(size_t)b * C + c];  // read before out is written: out may be x
            // same order as the forward: bias, then taps 0..K-1, the last one on the current token.
            // Zero state entries stand for the zero padding; adding w*0 leaves acc as it was.
            float acc = bias ? bias[c] : 0.0f;
            for (int j = 0; j < K - 1; j++) acc += w_c[j] * state_bc[j];
            acc += w_c[K - 1] * x_bc;
            out[(size_t)b * C + c] = acc;
            // slide the window: drop the oldest input, append the current one
            for (int j = 0; j + 1 < K - 1; j++) state_bc[j] = state_bc[j + 1];
            if (K > 1) state_bc[K - 2] = x_bc;
        }
    }
}
