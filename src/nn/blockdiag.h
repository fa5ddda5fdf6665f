/*
 * Block-diagonal projection: xLSTM's LinearHeadwiseExpand (xlstm/components/linear_headwise.py), the q, k, v
 * projections of the mLSTM layer. A row of inp (N, G*Di) is G blocks of Di channels, each mapped by its own
 * Do x Di matrix (no bias: xLSTM's mLSTM layer builds them with bias=False):
 *
 *   out[n, g*Do + o] = sum_{i<Di} w[g, o, i] * inp[n, g*Di + i]        w (G, Do, Di)
 *
 * (torch.einsum("...hd,hod->...ho", x, w) on x viewed as (..., G, Di)). Backward ACCUMULATES (+=) into dinp
 * and dw; dw is summed over rows in row order per block, so results do not depend on the thread count.
 */
#ifndef SEQ_NN_BLOCKDIAG_H
#define SEQ_NN_BLOCKDIAG_H

// out (N, G*Do); inp (N, G*Di); w (G, Do, Di). out must not alias inp.
void blockdiag_forward(float *out, const float *inp, const float *w, int N, int G, int Di, int Do);

// dinp (N, G*Di) and dw (G, Do, Di), each accumulated and each may be NULL; dout (N, G*Do); inp as forward
void blockdiag_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w, int N, int G,
                        int Di, int Do);

#endif
