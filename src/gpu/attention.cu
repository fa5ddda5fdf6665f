// The `attention` mixer's device side (mixers/attention.c is the host side and the definition): x (B,T,C) ->
// qkv = x wqkv^T + bqkv (one (3HD, C) projection, rows [q | k | v]) -> q, k, v (B,H,T,D) -> RoPE on q, k ->
// tiled causal attention (gpu/flash_attn.cu) -> (B,T,HD) -> the (C, HD) output projection.
// The GPU takes pos none and rope, without qk_norm, window or selective_rope; attention_gpu_check_ refuses the rest.
#include <math.h>

#include "gpu/common.cuh"
#include "gpu/flash_attn.cuh"
#include "gpu/mixer_gpu.cuh"
#include "gpu/ops.cuh"

extern "C" {
#include "mixers/attention.h"
#include "nn/rotary.h"
}

static int rotates_(const AttentionOpts *o) { return o->pos_kind == POS_ROPE; }

static int attention_gpu_check_(const MixerSpec *s, int l, Err *e) {
    const AttentionOpts *o = (const AttentionOpts *)s->opts;
    if (o->pos_kind != POS_NONE && o->pos_kind != POS_ROPE)
        return err_set(e, "layer %d: attention pos \"%s\" has no GPU kernels yet; with run.device cuda, "
                       "model.mixer.pos takes none or rope (or train on run.device cpu)", l, o->pos);
    if (o->qk_norm)
        return err_set(e, "layer %d: attention qk_norm true has no GPU kernels yet; with run.device cuda, "
                       "model.mixer.qk_norm must be false", l);
    if (o->window)
        return err_set(e, "layer %d: attention window %d has no GPU kernels yet; with run.device cuda, "
                       "model.mixer.window must be 0", l, o->window);
    if (o->sr.enabled)
        return err_set(e, "layer %d: attention selective_rope has no GPU kernels yet; with run.device cuda, "
                       "model.mixer.selective_rope must be off", l);
    if (!gpu_attn_supports(o->D))
        return err_set(e, "layer %d: attention head_dim %d: the GPU kernel takes head_dim 1..%d (model.mixer.heads / "
                       "head_dim)", l, o->D, GPU_ATTN_MAX_D);
    return 0;
}

// ----------------------------------------------------------------------------
// layout of the saved activations and of the scratch

typedef struct GpuAttActs {
    float *qh, *kh, *vh, *oh;  // (B,H,T,D) what the kernel saw, its output
    float *lse;                // (B,H,T)
    float *o_lin;              // (B,T,HD) the output projection's input
    float *cos_, *sin_;        // (T, D/2) the RoPE table (rope only)
} GpuAttActs;

static size_t att_layout_(const AttentionOpts *o, int B, int T, float *base, GpuAttActs *a) {
    size_t big = (size_t)B * T * o->HD, heads = (size_t)B * T * o->H, rope = rotates_(o) ? (size_t)T * (o->D / 2) : 0;
    size_t n = 0;
    float **slots[] = {&a->qh, &a->kh, &a->vh, &a->oh, &a->lse, &a->o_lin, &a->cos_, &a->sin_};
    size_t sizes[] = {big, big, big, big, heads, big, rope, rope};
    for (int i = 0; i < 8; i++) {
        *slots[i] = base ? base + n : NULL;
        n += sizes[i];
    }
    return n;
}

static size_t attention_gpu_act_size_(const MixerSpec *s, int B, int T) {
    GpuAttActs a;
    return att_layout_((const AttentionOpts *)s->opts, B, T, NULL, &a);
}

// forward: qkv (BT,3HD). backward: dqkv (BT,3HD), dq, dk, dv, dout (B,H,T,D) each, delta (B,H,T); do_lin
// (BT,HD) shares dqkv's space (it is read before dqkv is written)
static size_t attention_gpu_scratch_size_(const MixerSpec *s, int B, int T) {
    const AttentionOpts *o = (const AttentionOpts *)s->opts;
    size_t big = (size_t)B * T * o->HD;
    return 7 * big + (size_t)B * T * o->H;
}

// ----------------------------------------------------------------------------
// kernels: head permutations and RoPE

// dst (B,H,T,D) = columns [col0, col0 + H·D) of src (B,T,stride)
__global__ void split_heads_kernel(float *dst, const float *src, int stride, int col0, int B, int T, int H, int D) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = (size_t)B * T * H * D;
    if (i >= n) return;
    int d = i % D, h = (i / D) % H;
    size_t bt = i / ((size_t)H * D);
    int t = bt % T, b = bt / T;
    dst[(((size_t)b * H + h) * T + t) * D + d] = src[bt * stride + col0 + (size_t)h * D + d];
}

// columns [col0, col0 + H·D) of dst (B,T,stride) = src (B,H,T,D)
__global__ void merge_heads_kernel(float *dst, int stride, int col0, const float *src, int B, int T, int H, int D) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = (size_t)B * T * H * D;
    if (i >= n) return;
    int d = i % D, h = (i / D) % H;
    size_t bt = i / ((size_t)H * D);
    int t = bt % T, b = bt / T;
    dst[bt * stride + col0 + (size_t)h * D + d] = src[(((size_t)b * H + h) * T + t) * D + d];
}

// cos, sin (T, half) of t·w_i, w_i = base^(-2i/D), in double then rounded, as nn/rotary.c's table
__global__ void rope_table_kernel(float *cos_, float *sin_, int T, int half, double base, int D) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * half) return;
    int t = i / half, k = i % half;
    double angle = (double)t * pow(base, -2.0 * k / (double)D);
    cos_[i] = (float)cos(angle);
    sin_[i] = (float)sin(angle);
}

// x (B,H,T,D) rotated in place: pair k = (k, k + D/2) (half) or (2k, 2k+1) (interleaved);
// forward y0 = x0 c - x1 s, y1 = x0 s + x1 c; inverse (the backward) with s -> -s
__global__ void rope_kernel(float *x, const float *cos_, const float *sin_, size_t rows, int T, int D, int half_layout,
                            float sign) {
    int half = D / 2;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * half) return;
    size_t row = i / half;
    int k = i % half, t = row % T;
    float c = cos_[(size_t)t * half + k], s = sign * sin_[(size_t)t * half + k];
    float *p = x + row * D;
    int i0 = half_layout ? k : 2 * k, i1 = half_layout ? k + half : 2 * k + 1;
    float x0 = p[i0], x1 = p[i1];
    p[i0] = x0 * c - x1 * s;
    p[i1] = x0 * s + x1 * c;
}

static void permute_(float *heads, const float *rows, int stride, int col0, int B, int T, int H, int D, int merge) {
    size_t n = (size_t)B * T * H * D;
    if (merge) merge_heads_kernel<<<gpu_blocks(n, 256), 256>>>((float *)rows, stride, col0, heads, B, T, H, D);
    else split_heads_kernel<<<gpu_blocks(n, 256), 256>>>(heads, rows, stride, col0, B, T, H, D);
    KERNEL_CHECK();
}

static void rope_(float *x, const GpuAttActs *a, const AttentionOpts *o, int B, int T, float sign) {
    size_t rows = (size_t)B * o->H * T;
    rope_kernel<<<gpu_blocks(rows * (o->D / 2), 256), 256>>>(x, a->cos_, a->sin_, rows, T, o->D,
                                                            o->layout == ROTARY_HALF, sign);
    KERNEL_CHECK();
}

// ----------------------------------------------------------------------------
// forward, backward

static void attention_gpu_forward_(Mixer *m, float *y, const float *x, int B, int T) {
    const AttentionOpts *o = (const AttentionOpts *)m->spec->opts;
    int C = m->spec->C, H = o->H, D = o->D, HD = o->HD, BT = B * T;
    GpuAttActs a;
    att_layout_(o, B, T, m->acts, &a);
    float *qkv = m->scratch;  // (BT,3HD)
    GPU_TIMED("attn.qkv.forward", gpu_matmul_forward(qkv, x, mixer_param(m, o->k_wqkv),
                                                     o->bias ? mixer_param(m, o->k_bqkv) : NULL, BT, C, 3 * HD));
    float *dst[3] = {a.qh, a.kh, a.vh};
    for (int part = 0; part < 3; part++) GPU_TIMED("attn.permute", permute_(dst[part], qkv, 3 * HD, part * HD, B, T, H, D, 0));
    if (rotates_(o)) {
        int half = D / 2;
        // the config's base is a double, nn/rotary.h's a float: round it the same way
        rope_table_kernel<<<gpu_blocks((size_t)T * half, 256), 256>>>(a.cos_, a.sin_, T, half,
                                                                     (double)(float)o->rope_base, D);
        KERNEL_CHECK();
        GPU_TIMED("attn.rope", rope_(a.qh, &a, o, B, T, 1.0f));
        GPU_TIMED("attn.rope", rope_(a.kh, &a, o, B, T, 1.0f));
    }
    GPU_TIMED("attn.kernel.forward", gpu_attention_forward(a.oh, a.lse, a.qh, a.kh, a.vh, 1.0f / sqrtf((float)D), B, H, T, D));
    GPU_TIMED("attn.permute", permute_(a.oh, a.o_lin, HD, 0, B, T, H, D, 1));
    GPU_TIMED("attn.out.forward", gpu_matmul_forward(y, a.o_lin, mixer_param(m, o->k_wo),
                                                     o->bias ? mixer_param(m, o->k_bo) : NULL, BT, HD, C));
}

static void attention_gpu_backward_(Mixer *m, float *dx, const float *dy, const float *x, int B, int T) {
    const AttentionOpts *o = (const AttentionOpts *)m->spec->opts;
    int C = m->spec->C, H = o->H, D = o->D, HD = o->HD, BT = B * T;
    size_t big = (size_t)BT * HD;
    GpuAttActs a;
    att_layout_(o, B, T, m->acts, &a);
    float *dqkv = m->scratch, *dq = dqkv + 3 * big, *dk = dq + big, *dv = dk + big, *doh = dv + big;
    float *delta = doh + big, *do_lin = dqkv;
    // y = o_lin wo^T + bo
    GPU_TIMED("attn.out.backward", gpu_matmul_backward(do_lin, mixer_grad(m, o->k_wo), o->bias ? mixer_grad(m, o->k_bo) : NULL,
                                                       dy, a.o_lin, mixer_param(m, o->k_wo), BT, HD, C, 0));
    GPU_TIMED("attn.permute", permute_(doh, do_lin, HD, 0, B, T, H, D, 0));
    GPU_TIMED("attn.kernel.backward", gpu_attention_backward(dq, dk, dv, delta, doh, a.oh, a.lse, a.qh, a.kh, a.vh,
                                                             1.0f / sqrtf((float)D), B, H, T, D));
    if (rotates_(o)) {
        GPU_TIMED("attn.rope", rope_(dq, &a, o, B, T, -1.0f));  // R^T: the inverse rotation
        GPU_TIMED("attn.rope", rope_(dk, &a, o, B, T, -1.0f));
    }
    float *src[3] = {dq, dk, dv};
    for (int part = 0; part < 3; part++) GPU_TIMED("attn.permute", permute_(src[part], dqkv, 3 * HD, part * HD, B, T, H, D, 1));
    GPU_TIMED("attn.qkv.backward", gpu_matmul_backward(dx, mixer_grad(m, o->k_wqkv), o->bias ? mixer_grad(m, o->k_bqkv) : NULL,
                                                       dqkv, x, mixer_param(m, o->k_wqkv), BT, C, 3 * HD, 1));
}

const GpuMixerOps GPU_MIXER_ATTENTION = {
    "attention",
    attention_gpu_check_,
    attention_gpu_act_size_,
    attention_gpu_scratch_size_,
    attention_gpu_forward_,
    attention_gpu_backward_,
};
