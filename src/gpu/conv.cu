// The causal depthwise short convolution on the GPU (gpu/conv.cuh).
#include "gpu/conv.cuh"

#include "gpu/common.cuh"

// A thread per V adjacent channels of one row (b,t) (V 4: C a multiple of 4 and the tensors on 16 bytes): the bias,
// then the taps j = j0 .. K-1 that land on a real token (t - (K-1) + j >= 0), in the host's order
template <int V>
__global__ void conv_forward_kernel(float *out, const float *inp, const float *weight, const float *bias, int T, int C,
                                    int K, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (i >= n) return;
    size_t r = i / C;  // the row b*T + t
    int c = (int)(i % C), t = (int)(r % T), j0 = K - 1 - t > 0 ? K - 1 - t : 0;
    float acc[V], xv[V];
    for (int e = 0; e < V; e++) acc[e] = bias ? bias[c + e] : 0.0f;
    for (int j = j0; j < K; j++) {
        load_elts_<V>(xv, inp + (r - (K - 1) + j) * C + c);
        for (int e = 0; e < V; e++) acc[e] += weight[(size_t)(c + e) * K + j] * xv[e];
    }
    store_elts_<V>(out + i, acc);
}

// dinp[b,s,c] += sum over the outputs t = s + (K-1) - j inside the sequence of weight[c,j] dout[b,t,c]: a thread per V
// channels of row (b,s), the taps in the host's order, their sum added once
template <int V>
__global__ void conv_dinp_kernel(float *dinp, const float *dout, const float *weight, int T, int C, int K, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (i >= n) return;
    size_t r = i / C;
    int c = (int)(i % C), s = (int)(r % T), j0 = s + (K - 1) - (T - 1) > 0 ? s + (K - 1) - (T - 1) : 0;
    float acc[V], dv[V], o[V];
    for (int e = 0; e < V; e++) acc[e] = 0.0f;
    for (int j = j0; j < K; j++) {
        load_elts_<V>(dv, dout + (r + (K - 1) - j) * C + c);
        for (int e = 0; e < V; e++) acc[e] += weight[(size_t)(c + e) * K + j] * dv[e];
    }
    load_elts_<V>(o, dinp + i);
    for (int e = 0; e < V; e++) o[e] += acc[e];
    store_elts_<V>(dinp + i, o);
}

// the weight and bias gradients in two passes: rows r = b*T + t in chunks of CONV_CHUNK (a chunk may span two
// sequences: each row finds its own t)
#define CONV_CHUNK 64

// partial (n_chunks, K+1, C): per chunk, channel c and tap j < K the sum of dout[r,c] inp[r-(K-1)+j, c] over the
// chunk's rows whose input exists, and at j = K the sum of dout[r,c] (the bias). A thread per (chunk, j, c), the
// chunk's rows in order: chunks on the grid's x (gridDim.y stops at 65535), blocks of channels on y (consecutive
// threads, consecutive addresses), taps on z
__global__ void conv_dw_partial_kernel(float *partial, const float *dout, const float *inp, int BT, int T, int C,
                                       int K) {
    int c = blockIdx.y * blockDim.x + threadIdx.x, chunk = blockIdx.x, j = blockIdx.z;
    if (c >= C) return;
    int r0 = chunk * CONV_CHUNK, r1 = min(BT, r0 + CONV_CHUNK);
    float s = 0.0f;
    for (int r = r0; r < r1; r++) {
        float d = dout[(size_t)r * C + c];
        if (j == K) s += d;
        else if (r % T - (K - 1) + j >= 0) s += d * inp[(size_t)(r - (K - 1) + j) * C + c];
    }
    partial[((size_t)chunk * (K + 1) + j) * C + c] = s;
}

// dweight[c,j] += and dbias[c] += the partials' chunks in order: a thread per (j, c)
__global__ void conv_dw_finish_kernel(float *dweight, float *dbias, const float *partial, int n_chunks, int C, int K) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (K + 1) * C) return;
    int j = idx / C, c = idx % C;
    if (j == K ? !dbias : !dweight) return;
    float s = 0.0f;
    for (int k = 0; k < n_chunks; k++) s += partial[((size_t)k * (K + 1) + j) * C + c];
    if (j == K) dbias[c] += s;
    else dweight[(size_t)c * K + j] += s;
}

static GpuWork conv_work_ = {NULL, 0};  // the partials' device buffer (common.cuh)

void gpu_conv1d_causal_forward(float *out, const float *inp, const float *weight, const float *bias, int B, int T,
                               int C, int K) {
    size_t n = (size_t)B * T * C;
    if (!n) return;
    if (C % 4 == 0 && aligned16_(out) && aligned16_(inp))
        conv_forward_kernel<4><<<gpu_blocks(n / 4, 256), 256>>>(out, inp, weight, bias, T, C, K, n);
    else conv_forward_kernel<1><<<gpu_blocks(n, 256), 256>>>(out, inp, weight, bias, T, C, K, n);
    KERNEL_CHECK();
}

void gpu_conv1d_causal_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                const float *weight, int B, int T, int C, int K) {
    size_t n = (size_t)B * T * C;
    if (!n) return;
    if (dinp) {
        if (C % 4 == 0 && aligned16_(dinp) && aligned16_(dout))
            conv_dinp_kernel<4><<<gpu_blocks(n / 4, 256), 256>>>(dinp, dout, weight, T, C, K, n);
        else conv_dinp_kernel<1><<<gpu_blocks(n, 256), 256>>>(dinp, dout, weight, T, C, K, n);
        KERNEL_CHECK();
    }
    if (!dweight && !dbias) return;
    int BT = B * T, n_chunks = (BT + CONV_CHUNK - 1) / CONV_CHUNK;
    float *partial = gpu_work_floats(&conv_work_, (size_t)n_chunks * (K + 1) * C);
    dim3 grid(n_chunks, gpu_blocks(C, 128), K + 1);
    conv_dw_partial_kernel<<<grid, 128>>>(partial, dout, inp, BT, T, C, K);
    KERNEL_CHECK();
    conv_dw_finish_kernel<<<gpu_blocks((size_t)(K + 1) * C, 128), 128>>>(dweight, dbias, partial, n_chunks, C, K);
    KERNEL_CHECK();
}
