// The softmax over a row of slots and its backward (gpu/slots.cuh): gsa's M slots, bla's 2M - 1.
#include <math.h>

#include "gpu/common.cuh"
#include "gpu/slots.cuh"

// a thread per row r: p = softmax of x's row over the slots it sees (a prefix of n), 0 for the rest; in place allowed
__global__ void slot_softmax_kernel(float *p, const float *x, size_t R, int S, int T, int H, long t0, double period) {
    size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= R) return;
    int n = S;
    if (period > 0) {  // bla: the slots s with round(s P / S) <= t (ties to even, as nn/bla.h's bla_dilated_time)
        long t = t0 + (long)((r / H) % T);
        n = 0;
        while (n < S && (long)nearbyint((double)n * period / S) <= t) n++;
    }
    const float *xr = x + r * S;
    float *y = p + r * S, mx = xr[0];
    for (int s = 1; s < n; s++) mx = fmaxf(mx, xr[s]);
    double sum = 0.0;
    for (int s = 0; s < n; s++) {
        y[s] = expf(xr[s] - mx);
        sum += y[s];
    }
    float inv = (float)(1.0 / sum);
    for (int s = 0; s < n; s++) y[s] *= inv;
    for (int s = n; s < S; s++) y[s] = 0.0f;
}

void gpu_slot_softmax(float *p, const float *x, size_t R, int S, int T, int H, long t0, double period) {
    GPU_LAUNCH(slot_softmax_kernel, R, p, x, R, S, T, H, t0, period);
}

// dok (R,M) = p (.) (dp - p . dp) per row, the dot product in double
__global__ void slot_softmax_backward_kernel(float *dok, const float *p, const float *dp, size_t R, int M) {
    size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= R) return;
    const float *pr = p + r * M, *dpr = dp + r * M;
    double dot = 0.0;
    for (int j = 0; j < M; j++) dot += (double)pr[j] * dpr[j];
    for (int j = 0; j < M; j++) dok[r * M + j] = (float)(pr[j] * (dpr[j] - dot));
}

void gpu_slot_softmax_backward(float *dok, const float *p, const float *dp, size_t R, int M) {
    GPU_LAUNCH(slot_softmax_backward_kernel, R, dok, p, dp, R, M);
}
