// The token embedding on the GPU (gpu/embedding.cuh).
#include "gpu/embedding.cuh"

__global__ void embedding_forward_kernel(float *out, const int *ids, const float *wte, int N, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    size_t r = i / C, c = i % C;
    out[i] = wte[(size_t)ids[r] * C + c];
}

void gpu_embedding_forward(float *out, const int *ids, const float *wte, int N, int C) {
    embedding_forward_kernel<<<gpu_blocks((size_t)N * C, 256), 256>>>(out, ids, wte, N, C);
    KERNEL_CHECK();
}

// block u (of the distinct tokens) adds its positions' rows, in order, to its own row of dwte
__global__ void embedding_backward_kernel(float *dwte, const float *dout, const int *tokens, const int *offs,
                                          const int *pos, int C) {
    int u = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;  // tokens on x: gridDim.y stops at 65535
    if (c >= C) return;
    float s = 0.0f;
    for (int k = offs[u]; k < offs[u + 1]; k++) s += dout[(size_t)pos[k] * C + c];
    dwte[(size_t)tokens[u] * C + c] += s;
}

void gpu_embedding_backward(float *dwte, const float *dout, const int *tokens, const int *offs, const int *pos,
                            int n_tok, int C) {
    if (n_tok == 0) return;
    dim3 grid(n_tok, gpu_blocks(C, 128));
    embedding_backward_kernel<<<grid, 128>>>(dwte, dout, tokens, offs, pos, C);
    KERNEL_CHECK();
}
