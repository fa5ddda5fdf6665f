// One token of recurrent decoding on the GPU (gpu/step.cuh): the host's step arithmetic, a block per (b,h) and a
// thread per column of its state.
#include "gpu/common.cuh"
#include "gpu/step.cuh"

#define STEP_THREADS 128

// a block per (b,h); thread j (and j + STEP_THREADS ...) owns column j of S (Dk,Dv). The input gate's stabiliser is
// read by every thread before the barrier and written by thread 0 after it.
__global__ void linrec_step_kernel(float *o, float *mo, float *state, size_t stride, const float *q, const float *k,
                                   const float *v, const float *g, const float *li, LinrecDims d) {
    int bh = blockIdx.x, b = bh / d.H, h = bh % d.H, K = d.Dk, V = d.Dv;
    size_t KV = (size_t)K * V;
    float *S = state + b * stride + h * (KV + (d.gated_in ? 1 : 0));
    const float *qr = q + (size_t)bh * K, *kr = k + (size_t)bh * K, *vr = v + (size_t)bh * V;
    float gs = d.decay == LINREC_HEAD ? g[h] : d.decay == LINREC_TOKEN ? g[bh] : 0.0f;
    float f = 1.0f, in = 1.0f;
    if (d.gated_in) {
        float Mp = S[KV], mn = fmaxf(gs + Mp, li[bh]);
        f = expf(gs + Mp - mn);
        in = expf(li[bh] - mn);
        __syncthreads();  // every thread has read the old stabiliser
        if (threadIdx.x == 0) {
            S[KV] = mn;
            if (mo) mo[bh] = mn;
        }
    } else if (d.decay != LINREC_CHANNEL && d.decay != LINREC_VCHANNEL) {
        f = expf(gs);
    }
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float acc = 0.0f, vj = vr[j];
        if (d.decay == LINREC_VCHANNEL) {  // the columns decay: S = S diag(exp(g)) + k v^T, then o = q'S
            float a = expf(g[(size_t)bh * V + j]);
            for (int c = 0; c < K; c++) S[(size_t)c * V + j] = a * S[(size_t)c * V + j] + kr[c] * vj;
            for (int c = 0; c < K; c++) acc += d.scale * qr[c] * S[(size_t)c * V + j];
        } else {
            for (int c = 0; c < K; c++) {
                float a = d.decay == LINREC_CHANNEL ? expf(g[(size_t)bh * K + c]) : f, kc = in * kr[c];
                float s = a * S[(size_t)c * V + j] + kc * vj;
                S[(size_t)c * V + j] = s;
                acc += d.scale * qr[c] * s;
            }
        }
        o[(size_t)bh * V + j] = acc;
    }
}

void gpu_linrec_step(float *o, float *m, float *state, size_t stride, const float *q, const float *k, const float *v,
                     const float *g, const float *li, const LinrecDims *d) {
    GPU_LAUNCH_(linrec_step_kernel, d->B * d->H, STEP_THREADS, o, m, state, stride, q, k, v, g, li, *d);
    KERNEL_CHECK();
}

// u = beta (v - a S^T k) (what the token writes), S <- a S + k u^T, o = q'S: column j's alone
__global__ void delta_step_kernel(float *o, float *state, size_t stride, const float *q, const float *k,
                                  const float *v, const float *beta, const float *g, DeltaDims d) {
    int bh = blockIdx.x, b = bh / d.H, h = bh % d.H, K = d.Dk, V = d.Dv;
    float *S = state + b * stride + (size_t)h * K * V;
    const float *qr = q + (size_t)bh * K, *kr = k + (size_t)bh * K, *vr = v + (size_t)bh * V;
    float a = g ? expf(g[bh]) : 1.0f, bt = beta[bh];
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float sk = 0.0f, acc = 0.0f;
        for (int c = 0; c < K; c++) sk += kr[c] * S[(size_t)c * V + j];
        float u = bt * (vr[j] - a * sk);
        for (int c = 0; c < K; c++) {
            float s = a * S[(size_t)c * V + j] + kr[c] * u;
            S[(size_t)c * V + j] = s;
            acc += d.scale * qr[c] * s;
        }
        o[(size_t)bh * V + j] = acc;
    }
}

void gpu_delta_step(float *o, float *state, size_t stride, const float *q, const float *k, const float *v,
                    const float *beta, const float *g, const DeltaDims *d) {
    GPU_LAUNCH_(delta_step_kernel, d->B * d->H, STEP_THREADS, o, state, stride, q, k, v, beta, g, *d);
    KERNEL_CHECK();
}

// a thread per (b,c): the bias, the cached taps, the current token's; then the window slides
__global__ void conv_step_kernel(float *out, float *cache, size_t stride, const float *x, const float *weight,
                                 const float *bias, int B, int C, int K) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * C) return;
    int b = (int)(i / C), c = (int)(i % C);
    float *st = cache + b * stride + (size_t)c * (K - 1);
    const float *w = weight + (size_t)c * K;
    float xc = x[i], acc = bias ? bias[c] : 0.0f;  // x read before out is written: out may be x
    for (int j = 0; j < K - 1; j++) acc += w[j] * st[j];
    acc += w[K - 1] * xc;
    out[i] = acc;
    for (int j = 0; j + 1 < K - 1; j++) st[j] = st[j + 1];
    if (K > 1) st[K - 2] = xc;
}

void gpu_conv1d_causal_step(float *out, float *cache, size_t stride, const float *x, const float *weight,
                            const float *bias, int B, int C, int K) {
    GPU_LAUNCH(conv_step_kernel, (size_t)B * C, out, cache, stride, x, weight, bias, B, C, K);
}

__global__ void state_count_kernel(float *state, size_t stride, int B) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b < B) state[b * stride] += 1.0f;
}

void gpu_state_count(float *state, size_t stride, int B) { GPU_LAUNCH(state_count_kernel, B, state, stride, B); }
