/*
 * The block-diagonal projection on the GPU, the device counterpart of nn/blockdiag.h (xLSTM's LinearHeadwiseExpand:
 * the mLSTM layer's q, k, v projections). A row of inp (N, G*Di) is G blocks of Di channels, each mapped by its own
 * Do x Di matrix, no bias:
 *
 *   out[n, g*Do + o] = sum_{i<Di} w[g, o, i] * inp[n, g*Di + i]        w (G, Do, Di)
 *
 * A thread per output element on the CUDA cores, fp32 whatever run.precision says, each sum in the host's order
 * (i = 0 .. Di-1 in the forward, o = 0 .. Do-1 into dinp in the backward): meant for xLSTM's small blocks (4 x 4,
 * qkv_blocksize), where a block is a few multiply-adds and a matmul library has nothing to tile; blocks of hundreds
 * of channels would want a batched GEMM instead. The weight gradient sums the N rows in a fixed order: rows in
 * chunks of 64, one partial per (chunk, weight), then the chunks in order (no atomics), so two runs give the same
 * bits.
 *
 * Every pointer is device memory. Callable from C (the parity test).
 */
#ifndef SEQ_GPU_BLOCKDIAG_CUH
#define SEQ_GPU_BLOCKDIAG_CUH

#ifdef __cplusplus
extern "C" {
#endif

// out (N, G*Do) WRITTEN; inp (N, G*Di); w (G, Do, Di). out must not alias inp.
void gpu_blockdiag_forward(float *out, const float *inp, const float *w, int N, int G, int Di, int Do);
// dinp (N, G*Di) += and dw (G, Do, Di) +=, each may be NULL; dout (N, G*Do); inp, w as given to the forward
void gpu_blockdiag_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w, int N, int G,
                            int Di, int Do);

#ifdef __cplusplus
}
#endif

#endif
