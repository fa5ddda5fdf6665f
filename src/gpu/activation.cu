// The MLP's activations, the residual add and the mixers' silu and relu on the GPU (gpu/activation.cuh).
#include "gpu/activation.cuh"

#include <math.h>

extern "C" {
#include "model/model.h"
}

static __device__ __forceinline__ float gelu_(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
static __device__ __forceinline__ float gelu_grad_(float x) {
    float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
    return cdf + x * 0.39894228040143268f * expf(-0.5f * x * x);
}
static __device__ __forceinline__ float sigmoid_(float x) { return 1.0f / (1.0f + expf(-x)); }

// the activation of pre = inp + bias (the fc bias added here: the matmul wrote inp without it, so no pass of its
// own adds it; the same fp32 sum as adding it first, so the same bits). Every tensor of E (float, or bf16 in
// run.precision bf16: the fc output and the activation's gradient as the matmuls write and read them), the math
// in fp32. gelu and relu: V elements a thread (V 4 when 4 divides H); swiglu: one a thread
template <int V, typename E>
__global__ void act_forward_kernel(E *out, const E *inp, const float *bias, int N, int H, int kind) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V, n = (size_t)N * H;
    if (i >= n) return;
    float x[V], b[V], y[V];
    if (kind == MLP_SWIGLU) {
        size_t r = i / H, c = i % H;
        float a = to_f32_(inp[r * 2 * H + c]) + (bias ? bias[c] : 0.0f);
        float v = to_f32_(inp[r * 2 * H + H + c]) + (bias ? bias[H + c] : 0.0f);
        out[i] = to_elt_<E>(a * sigmoid_(a) * v);
        return;
    }
    load_elts_<V>(x, inp + i);
    if (bias) load_elts_<V>(b, bias + i % H);
    for (int e = 0; e < V; e++) {
        float p = x[e] + (bias ? b[e] : 0.0f);
        y[e] = kind == MLP_RELU ? (p > 0.0f ? p : 0.0f) : gelu_(p);
    }
    store_elts_<V>(out + i, y);
}

template <int V, typename E>
__global__ void act_backward_kernel(E *dinp, const E *inp, const float *bias, const E *dout, int N, int H, int kind) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V, n = (size_t)N * H;
    if (i >= n) return;
    float x[V], b[V], d[V], y[V];
    if (kind == MLP_SWIGLU) {
        size_t r = i / H, c = i % H;
        float a = to_f32_(inp[r * 2 * H + c]) + (bias ? bias[c] : 0.0f);
        float v = to_f32_(inp[r * 2 * H + H + c]) + (bias ? bias[H + c] : 0.0f);
        float g = to_f32_(dout[i]), sg = sigmoid_(a);
        // out = a sig(a) v: d a = v sig (1 + a (1 - sig)), d v = a sig
        dinp[r * 2 * H + c] = to_elt_<E>(g * v * sg * (1.0f + a * (1.0f - sg)));
        dinp[r * 2 * H + H + c] = to_elt_<E>(g * a * sg);
        return;
    }
    load_elts_<V>(x, inp + i);
    load_elts_<V>(d, dout + i);
    if (bias) load_elts_<V>(b, bias + i % H);
    for (int e = 0; e < V; e++) {
        float p = x[e] + (bias ? b[e] : 0.0f);
        y[e] = kind == MLP_RELU ? (p > 0.0f ? d[e] : 0.0f) : d[e] * gelu_grad_(p);
    }
    store_elts_<V>(dinp + i, y);
}

// V 4 where every thread's four elements lie in one row, 16-byte aligned (swiglu takes V 1; a parameter tensor,
// the bias, need not start on 16 bytes)
static int act_vec_(const void *a, const void *b, const void *c, const void *bias, int H, int kind) {
    return kind != MLP_SWIGLU && H % 4 == 0 && aligned16_(a) && aligned16_(b) && aligned16_(c) && aligned16_(bias)
               ? 4
               : 1;
}

// the tensors' common element type (float, or bf16 in run.precision bf16), checked
static int act_bf16_(GpuAct a, GpuAct b, GpuAct c) {
    if (a.bf16 != b.bf16 || a.bf16 != c.bf16) gpu_fail_("gpu_act", "float and bf16 tensors mixed", __FILE__, __LINE__);
    return a.bf16;
}

template <typename E>
static void act_forward_(E *out, const E *inp, const float *bias, int N, int H, int kind) {
    size_t n = (size_t)N * H;
    if (act_vec_(out, inp, inp, bias, H, kind) == 4)
        act_forward_kernel<4, E><<<gpu_blocks(n / 4, 256), 256>>>(out, inp, bias, N, H, kind);
    else act_forward_kernel<1, E><<<gpu_blocks(n, 256), 256>>>(out, inp, bias, N, H, kind);
    KERNEL_CHECK();
}

void gpu_act_forward(GpuAct out, GpuAct inp, const float *bias, int N, int H, int kind) {
    if (act_bf16_(out, inp, inp))
        act_forward_((__nv_bfloat16 *)out.p, (const __nv_bfloat16 *)inp.p, bias, N, H, kind);
    else act_forward_((float *)out.p, (const float *)inp.p, bias, N, H, kind);
}

template <typename E>
static void act_backward_(E *dinp, const E *inp, const float *bias, const E *dout, int N, int H, int kind) {
    size_t n = (size_t)N * H;
    if (act_vec_(dinp, inp, dout, bias, H, kind) == 4)
        act_backward_kernel<4, E><<<gpu_blocks(n / 4, 256), 256>>>(dinp, inp, bias, dout, N, H, kind);
    else act_backward_kernel<1, E><<<gpu_blocks(n, 256), 256>>>(dinp, inp, bias, dout, N, H, kind);
    KERNEL_CHECK();
}

void gpu_act_backward(GpuAct dinp, GpuAct inp, const float *bias, GpuAct dout, int N, int H, int kind) {
    if (act_bf16_(dinp, inp, dout))
        act_backward_((__nv_bfloat16 *)dinp.p, (const __nv_bfloat16 *)inp.p, bias, (const __nv_bfloat16 *)dout.p, N,
                      H, kind);
    else act_backward_((float *)dinp.p, (const float *)inp.p, bias, (const float *)dout.p, N, H, kind);
}

// out = a + (b + bias[column]): the projection's bias added here, in the order its own pass would have (the same
// bits); V 4 when 4 divides C and everything starts 16-byte aligned
template <int V>
__global__ void residual_kernel(float *out, const float *a, const float *b, const float *bias, size_t n, int C) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (i >= n) return;
    float x[V], y[V], z[V];
    load_elts_<V>(x, a + i);
    load_elts_<V>(y, b + i);
    if (bias) load_elts_<V>(z, bias + i % C);
    for (int e = 0; e < V; e++) x[e] += bias ? y[e] + z[e] : y[e];
    store_elts_<V>(out + i, x);
}

void gpu_residual(float *out, const float *a, const float *b, const float *bias, size_t n, int C) {
    if (C % 4 == 0 && aligned16_(out) && aligned16_(a) && aligned16_(b) && aligned16_(bias))
        residual_kernel<4><<<gpu_blocks(n / 4, 256), 256>>>(out, a, b, bias, n, C);
    else residual_kernel<1><<<gpu_blocks(n, 256), 256>>>(out, a, b, bias, n, C);
    KERNEL_CHECK();
}

// ----------------------------------------------------------------------------
// the mixers' silu and relu on flat buffers (nn/activation.c's silu_*, relu_*)

enum { FLAT_SILU, FLAT_RELU };

// V elements a thread (V 4: n a multiple of 4, the buffers on 16 bytes); each thread reads its elements before it
// writes them, so out may alias inp
template <int V>
__global__ void flat_forward_kernel(float *out, const float *inp, size_t n, int kind) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (i >= n) return;
    float x[V];
    load_elts_<V>(x, inp + i);
    for (int e = 0; e < V; e++) x[e] = kind == FLAT_SILU ? x[e] * sigmoid_fast_(x[e]) : (x[e] > 0.0f ? x[e] : 0.0f);
    store_elts_<V>(out + i, x);
}

// dinp += dout silu'(inp), silu' = s (1 + x (1 - s)) (fast_silu_grad_'s form); relu: dinp += dout where inp > 0
template <int V>
__global__ void flat_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n, int kind) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (i >= n) return;
    float x[V], d[V], o[V];
    load_elts_<V>(x, inp + i), load_elts_<V>(d, dout + i), load_elts_<V>(o, dinp + i);
    for (int e = 0; e < V; e++) {
        if (kind == FLAT_SILU) {
            float s = sigmoid_fast_(x[e]);
            o[e] += s * (1.0f + x[e] * (1.0f - s)) * d[e];
        } else {
            o[e] += x[e] > 0.0f ? d[e] : 0.0f;
        }
    }
    store_elts_<V>(dinp + i, o);
}

static void flat_forward_(float *out, const float *inp, size_t n, int kind) {
    if (!n) return;
    if (n % 4 == 0 && aligned16_(out) && aligned16_(inp))
        flat_forward_kernel<4><<<gpu_blocks(n / 4, 256), 256>>>(out, inp, n, kind);
    else flat_forward_kernel<1><<<gpu_blocks(n, 256), 256>>>(out, inp, n, kind);
    KERNEL_CHECK();
}

static void flat_backward_(float *dinp, const float *inp, const float *dout, size_t n, int kind) {
    if (!n) return;
    if (n % 4 == 0 && aligned16_(dinp) && aligned16_(inp) && aligned16_(dout))
        flat_backward_kernel<4><<<gpu_blocks(n / 4, 256), 256>>>(dinp, inp, dout, n, kind);
    else flat_backward_kernel<1><<<gpu_blocks(n, 256), 256>>>(dinp, inp, dout, n, kind);
    KERNEL_CHECK();
}

void gpu_silu_forward(float *out, const float *inp, size_t n) { flat_forward_(out, inp, n, FLAT_SILU); }
void gpu_silu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    flat_backward_(dinp, inp, dout, n, FLAT_SILU);
}
void gpu_relu_forward(float *out, const float *inp, size_t n) { flat_forward_(out, inp, n, FLAT_RELU); }
void gpu_relu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    flat_backward_(dinp, inp, dout, n, FLAT_RELU);
}
