// The block-diagonal projection on the GPU (gpu/blockdiag.cuh).
#include "gpu/blockdiag.cuh"

#include "gpu/common.cuh"

// out[n, g*Do + o] = sum_i w[g,o,i] inp[n, g*Di + i]: a thread per output element, i in order from 0 (the host's)
__global__ void blockdiag_forward_kernel(float *out, const float *inp, const float *w, int G, int Di, int Do,
                                         size_t n) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    size_t row = idx / ((size_t)G * Do);
    int go = (int)(idx % ((size_t)G * Do)), g = go / Do;  // go = g*Do + o, w's row
    const float *x = inp + row * G * Di + (size_t)g * Di, *wr = w + (size_t)go * Di;
    float acc = 0.0f;
    for (int i = 0; i < Di; i++) acc += wr[i] * x[i];
    out[idx] = acc;
}

// dinp[n, g*Di + i] += sum_o dout[n, g*Do + o] w[g,o,i]: a thread per input element, each term added to dinp in turn
// (o in order from 0), as the host adds them
__global__ void blockdiag_dinp_kernel(float *dinp, const float *dout, const float *w, int G, int Di, int Do,
                                      size_t n) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    size_t row = idx / ((size_t)G * Di);
    int gi = (int)(idx % ((size_t)G * Di)), g = gi / Di, i = gi % Di;
    const float *dy = dout + row * G * Do + (size_t)g * Do, *wg = w + (size_t)g * Do * Di + i;
    float acc = dinp[idx];
    for (int o = 0; o < Do; o++) acc += dy[o] * wg[(size_t)o * Di];
    dinp[idx] = acc;
}

// the weight gradient in two passes: rows in chunks of BD_CHUNK, one partial per (chunk, weight), then the chunks in
// order
#define BD_CHUNK 64

// partial (n_chunks, NW): per chunk and weight (g,o,i) the sum of dout[n, g*Do + o] inp[n, g*Di + i] over the chunk's
// rows in order. A thread per (chunk, weight): chunks on the grid's x, blocks of weights on y
__global__ void blockdiag_dw_partial_kernel(float *partial, const float *dout, const float *inp, int N, int G, int Di,
                                            int Do) {
    size_t NW = (size_t)G * Do * Di, k = (size_t)blockIdx.y * blockDim.x + threadIdx.x;
    if (k >= NW) return;
    int chunk = blockIdx.x, r1 = min(N, (chunk + 1) * BD_CHUNK);
    int go = (int)(k / Di), i = (int)(k % Di), g = go / Do;  // go = g*Do + o
    size_t ci = (size_t)G * Di, co = (size_t)G * Do;
    float s = 0.0f;
    for (int r = chunk * BD_CHUNK; r < r1; r++)
        s += dout[(size_t)r * co + go] * inp[(size_t)r * ci + (size_t)g * Di + i];
    partial[(size_t)chunk * NW + k] = s;
}

// dw (NW,) += the partials' chunks in order
__global__ void blockdiag_dw_finish_kernel(float *dw, const float *partial, int n_chunks, size_t NW) {
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= NW) return;
    float s = 0.0f;
    for (int c = 0; c < n_chunks; c++) s += partial[(size_t)c * NW + k];
    dw[k] += s;
}

static GpuWork blockdiag_work_ = {NULL, 0};  // the partials' device buffer (common.cuh)

void gpu_blockdiag_forward(float *out, const float *inp, const float *w, int N, int G, int Di, int Do) {
    size_t n = (size_t)N * G * Do;
    if (!n) return;
    blockdiag_forward_kernel<<<gpu_blocks(n, 256), 256>>>(out, inp, w, G, Di, Do, n);
    KERNEL_CHECK();
}

void gpu_blockdiag_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w, int N, int G,
                            int Di, int Do) {
    size_t n = (size_t)N * G * Di, NW = (size_t)G * Do * Di;
    if (!n || !Do) return;
    if (dinp) {
        blockdiag_dinp_kernel<<<gpu_blocks(n, 256), 256>>>(dinp, dout, w, G, Di, Do, n);
        KERNEL_CHECK();
    }
    if (!dw) return;
    int n_chunks = (N + BD_CHUNK - 1) / BD_CHUNK;
    if (gpu_blocks(NW, 128) > 65535)  // the grid's y
        gpu_fail_("gpu_blockdiag_backward", "more than 65535 x 128 weights", __FILE__, __LINE__);
    float *partial = gpu_work_floats(&blockdiag_work_, (size_t)n_chunks * NW);
    dim3 grid(n_chunks, gpu_blocks(NW, 128));
    blockdiag_dw_partial_kernel<<<grid, 128>>>(partial, dout, inp, N, G, Di, Do);
    KERNEL_CHECK();
    blockdiag_dw_finish_kernel<<<gpu_blocks(NW, 128), 128>>>(dw, partial, n_chunks, NW);
    KERNEL_CHECK();
}
