// The softmax cross-entropy and the argmax of the head on the GPU (gpu/xent.cuh): one block per row.
#include "gpu/xent.cuh"

#include <math.h>

extern "C" {
#include "nn/xent.h"
}

// VEC elements a thread at a time (VEC 4: 16-byte loads, V a multiple of 4). grad_bf16: dlogits as bf16 at the
// start of the row's own bytes. Element i's bf16 overlaps float i/2, so the row goes in steps of VEC·blockDim.x
// elements, each step's floats read before the barrier and its bf16s written after it: a step writes over floats
// [base/2, (base + VEC·blockDim.x)/2), all read by then, and never over a later step's floats.
template <int VEC>
__global__ void crossentropy_kernel(float *losses, float *logits, const int *targets, int V, float inv_norm, int grad,
                                    int grad_bf16) {
    __shared__ float sh[32];
    int row = blockIdx.x, tg = targets[row], step = VEC * blockDim.x;
    float *x = logits + (size_t)row * V;
    __nv_bfloat16 *xh = (__nv_bfloat16 *)x;
    if (tg == XENT_IGNORE_INDEX || tg < 0 || tg >= V) {
        if (threadIdx.x == 0) losses[row] = 0.0f;
        if (grad)
            for (int i = threadIdx.x; i < V; i += blockDim.x) {
                if (grad_bf16) xh[i] = __float2bfloat16(0.0f);
                else x[i] = 0.0f;
            }
        return;
    }
    // the max and the sum of exp(x - max) in one read of the row (online: a larger value rescales the sum)
    float mx = -INFINITY, s = 0.0f;
    for (int i = threadIdx.x * VEC; i < V; i += step) {
        float v[VEC], m = -INFINITY;
        load_elts_<VEC>(v, x + i);
        for (int e = 0; e < VEC; e++) m = fmaxf(m, v[e]);
        if (m > mx) s *= expf(mx - m), mx = m;  // expf(-inf) = 0 for the first values
        for (int e = 0; e < VEC; e++) s += expf(v[e] - mx);
    }
    float bmx = block_max_(mx, sh);
    s = mx == -INFINITY ? 0.0f : s * expf(mx - bmx);
    mx = bmx;
    float logsum = logf(block_sum_(s, sh));
    float xt = x[tg];
    __syncthreads();  // every thread has read x[tg] before any overwrites it
    if (threadIdx.x == 0) losses[row] = -((xt - mx) - logsum);
    if (!grad) return;
    for (int base = 0; base < V; base += step) {
        int i = base + threadIdx.x * VEC;
        float d[VEC];
        if (i < V) {
            load_elts_<VEC>(d, x + i);
            for (int e = 0; e < VEC; e++) d[e] = (expf((d[e] - mx) - logsum) - (i + e == tg ? 1.0f : 0.0f)) * inv_norm;
        }
        if (!grad_bf16) {
            if (i < V) store_elts_<VEC>(x + i, d);
            continue;
        }
        __syncthreads();
        if (i < V) store_elts_<VEC>(xh + i, d);
    }
}

GpuAct gpu_crossentropy(float *losses, float *logits, const int *targets, int N, int V, int n_norm, int grad,
                        int grad_bf16) {
    float inv = n_norm > 0 ? 1.0f / (float)n_norm : 0.0f;
    if (V % 4 == 0 && aligned16_(logits)) crossentropy_kernel<4><<<N, 256>>>(losses, logits, targets, V, inv, grad, grad_bf16);
    else crossentropy_kernel<1><<<N, 256>>>(losses, logits, targets, V, inv, grad, grad_bf16);
    KERNEL_CHECK();
    return grad_bf16 ? GpuAct{logits, 1, 2 * V} : gpu_f32(logits);
}

// ----------------------------------------------------------------------------
// argmax (evaluation)

#define ARGMAX_THREADS_ 128  // a power of two (the tree below)

// gpu_argmax_rows: the first index of the largest value, NaNs never chosen; a NaN first value gives 0 (the CPU's scan never leaves it: nothing compares greater).
// A selection, not a sum: the (value, lower index) order picks one element whatever order the tree combines in.
__global__ void argmax_rows_kernel(int *out, const float *logits, int V) {
    __shared__ float sv[ARGMAX_THREADS_];
    __shared__ int si[ARGMAX_THREADS_];
    const float *x = logits + (size_t)blockIdx.x * V;
    float bv = -INFINITY;
    int bi = -1;  // -1: no candidate yet (every value seen so far NaN)
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        if (x[i] > bv || (bi < 0 && x[i] == bv)) bv = x[i], bi = i;  // strict: this thread's first of equals
    sv[threadIdx.x] = bv;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) {
            float ov = sv[threadIdx.x + o];
            int oi = si[threadIdx.x + o], mi = si[threadIdx.x];
            if (oi >= 0 && (mi < 0 || ov > sv[threadIdx.x] || (ov == sv[threadIdx.x] && oi < mi))) {
                sv[threadIdx.x] = ov;
                si[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = isnan(x[0]) || si[0] < 0 ? 0 : si[0];
}

void gpu_argmax_rows(int *out, const float *logits, int N, int V) {
    argmax_rows_kernel<<<N, ARGMAX_THREADS_>>>(out, logits, V);
    KERNEL_CHECK();
}
