// The optimizer's elementwise parts on the GPU (gpu/adamw.cuh): one block per chunk.
#include "gpu/adamw.cuh"

#include <math.h>

extern "C" {
#include "optim/optim.h"
}

__global__ void chunk_sumsq_kernel(double *sums, const float *x, const size_t *start, const int *len) {
    __shared__ double sh[256];
    int c = blockIdx.x;
    const float *p = x + start[c];
    double s = 0.0;
    for (int i = threadIdx.x; i < len[c]; i += blockDim.x) s += (double)p[i] * (double)p[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) sums[c] = sh[0];
}

void gpu_chunk_sumsq(double *sums, const float *x, const size_t *start, const int *len, int n_chunks) {
    if (n_chunks == 0) return;
    chunk_sumsq_kernel<<<n_chunks, 256>>>(sums, x, start, len);
    KERNEL_CHECK();
}

__global__ void chunk_scale_kernel(float *x, const size_t *start, const int *len, const int *tensor, const float *coef) {
    int c = blockIdx.x;
    float s = coef[(size_t)tensor[c] * OPTIM_COEF];
    if (s == 1.0f) return;
    float *p = x + start[c];
    for (int i = threadIdx.x; i < len[c]; i += blockDim.x) p[i] *= s;
}

void gpu_chunk_scale(float *x, const size_t *start, const int *len, const int *tensor, const float *coef,
                     int n_chunks) {
    if (n_chunks == 0) return;
    chunk_scale_kernel<<<n_chunks, 256>>>(x, start, len, tensor, coef);
    KERNEL_CHECK();
}

__global__ void adamw_kernel(float *params, float *m, float *v, const float *grads, const size_t *start,
                             const int *len, const int *tensor, const float *coef) {
    int c = blockIdx.x;
    const float *k = coef + (size_t)tensor[c] * OPTIM_COEF;
    float decay = k[COEF_DECAY_MUL], b1 = k[COEF_BETA1], b2 = k[COEF_BETA2], step = k[COEF_STEP_SIZE];
    float ibc2 = k[COEF_INV_SQRT_BC2], eps = k[COEF_EPS], om1 = 1.0f - b1, om2 = 1.0f - b2;
    size_t o = start[c];
    for (int i = threadIdx.x; i < len[c]; i += blockDim.x) {
        float g = grads[o + i];
        float mi = b1 * m[o + i] + om1 * g;
        float vi = b2 * v[o + i] + om2 * g * g;
        m[o + i] = mi;
        v[o + i] = vi;
        float p = params[o + i] * decay;  // decoupled decay on the old value, as nn/adamw.c
        params[o + i] = p - step * mi / (sqrtf(vi) * ibc2 + eps);
    }
}

void gpu_adamw(float *params, float *m, float *v, const float *grads, const size_t *start, const int *len,
               const int *tensor, const float *coef, int n_chunks) {
    if (n_chunks == 0) return;
    adamw_kernel<<<n_chunks, 256>>>(params, m, v, grads, start, len, tensor, coef);
    KERNEL_CHECK();
}
