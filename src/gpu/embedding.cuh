/*
 * The token embedding on the GPU, the device counterpart of nn/embedding.h.
 * Every pointer is device memory; every reduction runs in a fixed order (no atomics), so a step gives the same
 * bits every time on the same GPU.
 */
#ifndef SEQ_GPU_EMBEDDING_CUH
#define SEQ_GPU_EMBEDDING_CUH

#include "gpu/common.cuh"

// out (N,C) = wte[ids[i]] rows; ids (N,) on the device, already checked against V on the host
void gpu_embedding_forward(float *out, const int *ids, const float *wte, int N, int C);
// dwte (V,C) += sum over the positions of each token of dout (N,C): tokens (n_tok,) the distinct ids of the
// batch, their positions pos[offs[u] .. offs[u+1]) in increasing order (a host-side bucket sort of the ids:
// one block per token sums its rows in that order, so no two threads ever add into the same row)
void gpu_embedding_backward(float *dwte, const float *dout, const int *tokens, const int *offs, const int *pos,
                            int n_tok, int C);

#endif
