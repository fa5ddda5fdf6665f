// The linear_attn, retnet and gla mixers' device side (mixers/linear.c is the host side and the definition; read
// it for the equations). The same passes over device buffers: the q, k, v streams (projections, with `conv` the
// short convolutions and silu: gpu/shortconv.cuh), the feature map (elu+1, relu, or hadamard's two per-head
// Linears), RoPE for the complex forget gate (`rotate`, always in retnet: gpu/rotary.cuh), the decay (retnet's
// fixed per-head one, gla's low-rank per-channel gate), the normaliser's column of ones, the chunked recurrence
// (gpu/linrec.cuh), the per-head RMSNorm with its swish output gate and the output projection (gpu/mixer_out.cuh).
// The small elementwise passes between them are this file's kernels: each element is one thread's, no sums
// across threads, so two runs give the same bits.
// linear_check_ refuses chunks longer than the engine stages.
#include <math.h>

#include "gpu/activation.cuh"
#include "gpu/common.cuh"
#include "gpu/linrec.cuh"
#include "gpu/matmul.cuh"
#include "gpu/mixer_gpu.cuh"
#include "gpu/mixer_out.cuh"
#include "gpu/rotary.cuh"
#include "gpu/selrope.cuh"
#include "gpu/shortconv.cuh"
#include "gpu/step.cuh"

extern "C" {
#include "mixers/gates.h"
#include "mixers/linear.h"
}

static const char *const LIN_NAMES_[] = {"linear_attn", "retnet", "gla"};

static int linear_check_(const MixerSpec *s, int l, Err *e) {
    const LinOpts *o = (const LinOpts *)s->opts;
    return gpu_refuse_chunked(LIN_NAMES_[o->variant], l, o->chunk, GPU_LINREC_MAX_L, "recurrence", e);
}

// ----------------------------------------------------------------------------
// layout of the saved activations and of the scratch (mixers/linear.c's LinActs, and the decays of retnet)

typedef struct GpuLinActs {
    float *pq, *pk, *pv;   // (BT,HK) (BT,HK) (BT,HV) conv: the projections, the convs' inputs
    float *cq, *ck, *cv;   // conv: the convs' outputs, silu's inputs
    float *xq, *xk, *xv;   // the streams
    float *fa, *fb;        // (2,BT,HK) each, hadamard: W1 x + b1 and W2 x + b2 of q (fa) and of k (fb)
    float *q, *k, *v;      // what the recurrence reads (q, k: the streams, or their own with a map or RoPE; v: the
                           // stream, or (BT,H,Dva) with the normaliser's column)
    float *gr, *gpre, *g;  // (BT,rank) (BT,GW) (BT,HK) gla: the low-rank gate, its pre-activation, the log-decay
    float *gh;             // (H,) retnet: the fixed log-decays
    float *o;              // (BT,H,Dva) the recurrence's output
    float *on;             // (BT,HV) after the normaliser (normalize), else o
    float *z;              // (BT,HV) the output gate's pre-activation
    float *rstd;           // (BT*H,)
    float *yn;             // (BT,HV) normed (and gated): o_proj's input
    float *ckpt;           // the recurrence's chunk states
    float *sr;             // selective_rope's (gpu/selrope.cuh)
} GpuLinActs;

static size_t lin_layout_(const LinOpts *o, int B, int T, float *base, GpuLinActs *a) {
    size_t BT = (size_t)B * T, nK = BT * o->HK, nV = BT * o->HV, nA = BT * o->H * o->Dva;
    int cv = o->K > 0, had = o->fmap == FMAP_HADAMARD, gla = o->variant == LIN_GLA;
    int own_qk = o->fmap != FMAP_IDENTITY || o->rotate || o->sr.enabled;
    LinrecDims d = lin_dims(o, B, T);
    GpuSlot slots[] = {{&a->pq, cv * nK},   {&a->pk, cv * nK},         {&a->pv, cv * nV},
                       {&a->cq, cv * nK},   {&a->ck, cv * nK},         {&a->cv, cv * nV},
                       {&a->xq, nK},        {&a->xk, nK},              {&a->xv, nV},
                       {&a->fa, had * 2 * nK}, {&a->fb, had * 2 * nK}, {&a->q, own_qk * nK},
                       {&a->k, own_qk * nK}, {&a->v, o->normalize ? nA : 0},
                       {&a->gr, gla * BT * o->gate_rank}, {&a->gpre, gla * BT * o->GW}, {&a->g, gla * nK},
                       {&a->gh, o->variant == LIN_RETNET ? (size_t)o->H : 0}, {&a->o, nA},
                       {&a->on, o->normalize ? nV : 0}, {&a->z, o->output_gate ? nV : 0}, {&a->rstd, BT * o->H},
                       {&a->yn, nV},        {&a->ckpt, gpu_linrec_ckpt_size(&d)},
                       {&a->sr, gpu_selrope_act_size(&o->sr, B, T)}};
    size_t n = gpu_take_slots(slots, sizeof slots / sizeof slots[0], base);
    if (!a->q) a->q = a->xq, a->k = a->xk;
    if (!a->v) a->v = a->xv;
    if (!a->on) a->on = a->o;
    return n;
}

static size_t linear_act_size_(const MixerSpec *s, int B, int T) {
    GpuLinActs a;
    return lin_layout_((const LinOpts *)s->opts, B, T, NULL, &a);
}

// The scratch: the recurrence's own (forward and backward), then the backward's slabs of B T times the widest row:
// dyn, dz, don, doa, dq, dk, dv, dxq, dxk, dg, and tmp (two slabs: hadamard's two factors' gradients, gla's dgr);
// selective_rope's own last
typedef struct GpuLinScratch {
    float *engine, *dyn, *dz, *don, *doa, *dq, *dk, *dv, *dxq, *dxk, *dg, *tmp, *sr;
} GpuLinScratch;

static size_t scratch_layout_(const LinOpts *o, int B, int T, float *base, GpuLinScratch *s) {
    size_t w = (size_t)(o->HK > o->H * o->Dva ? o->HK : o->H * o->Dva);
    if ((size_t)o->gate_rank > w) w = (size_t)o->gate_rank;
    w *= (size_t)B * T;
    LinrecDims d = lin_dims(o, B, T);
    GpuSlot slots[] = {{&s->engine, gpu_linrec_scratch_size(&d)}, {&s->dyn, w}, {&s->dz, w}, {&s->don, w},
                       {&s->doa, w}, {&s->dq, w}, {&s->dk, w}, {&s->dv, w}, {&s->dxq, w}, {&s->dxk, w}, {&s->dg, w},
                       {&s->tmp, 2 * w}, {&s->sr, gpu_selrope_scratch_size(&o->sr, B, T)}};
    return gpu_take_slots(slots, sizeof slots / sizeof slots[0], base);
}

static size_t linear_scratch_size_(const MixerSpec *s, int B, int T) {
    GpuLinScratch sc;
    return scratch_layout_((const LinOpts *)s->opts, B, T, NULL, &sc);
}

// ----------------------------------------------------------------------------
// the elementwise passes (mixers/linear.c's loops, a thread per element or per row)

// elu + 1: out (n,) = x + 1 (x > 0) or e^x
__global__ void lin_elu_kernel(float *out, const float *x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] > 0.0f ? x[i] + 1.0f : expf(x[i]);
}
// dx (n,) += dout times its derivative (1, or e^x)
__global__ void lin_elu_backward_kernel(float *dx, const float *dout, const float *x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dx[i] += dout[i] * (x[i] > 0.0f ? 1.0f : expf(x[i]));
}
// hadamard: out (n,) = f[i] f[n + i], the two Linears' outputs; backward: t[i] = dout f[n + i], t[n + i] = dout f[i]
__global__ void lin_mul_kernel(float *out, const float *f, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = f[i] * f[n + i];
}
__global__ void lin_mul_backward_kernel(float *t, const float *dout, const float *f, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) t[i] = dout[i] * f[n + i], t[n + i] = dout[i] * f[i];
}
// on (rows, Dv) = oa[:Dv] / (oa[Dv] + eps) per row of oa (rows, Dv+1)
__global__ void lin_normalize_kernel(float *on, const float *oa, size_t rows, int Dv) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * Dv) return;
    const float *src = oa + (i / Dv) * (Dv + 1);
    float inv = 1.0f / (src[Dv] + LIN_NORMALIZE_EPS);
    on[i] = src[i % Dv] * inv;
}
// its backward, a thread per row: doa (rows, Dv+1) = the gradient of oa from don (rows, Dv) (the host's order)
__global__ void lin_normalize_backward_kernel(float *doa, const float *don, const float *oa, size_t rows, int Dv) {
    size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float *src = oa + r * (Dv + 1), *dn = don + r * Dv;
    float *dst = doa + r * (Dv + 1), den = src[Dv] + LIN_NORMALIZE_EPS, s = 0.0f;
    for (int j = 0; j < Dv; j++) dst[j] = dn[j] / den, s += dn[j] * src[j];
    dst[Dv] = -s / (den * den);
}
// gla's log-decay g (rows, Dk) = logsigmoid(gpre) / normalizer, rows = tokens x heads; with rotate the two channels
// of a rotated pair (c, c + Dk/2) read the pair's one gate (gpre (rows, Dk/2)), else gpre (rows, Dk)
__global__ void lin_decay_kernel(float *g, const float *gpre, size_t rows, int Dk, int rotate, float inv) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * Dk) return;
    size_t r = i / Dk;
    int c = i % Dk;
    size_t at = rotate ? r * (Dk / 2) + c % (Dk / 2) : i;
    g[i] = (float)mixer_logsigmoid(gpre[at]) * inv;
}
// its backward: dgp (rows, GW/H) = dg's share of each gate (with rotate the pair's two channels summed first, in
// the host's order) times inv sigmoid(-gpre)
__global__ void lin_decay_backward_kernel(float *dgp, const float *dg, const float *gpre, size_t rows, int Dk,
                                          int rotate, float inv) {
    int Wg = rotate ? Dk / 2 : Dk;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * Wg) return;
    size_t r = i / Wg;
    int c = i % Wg;
    float d = dg[r * Dk + c];
    if (rotate) d += dg[r * Dk + c + Dk / 2];
    dgp[i] = d * inv * (float)mixer_sigmoid(-(double)gpre[i]);
}
// retnet's fixed log-decays g (H,) = log(1 - 2^(-5-h))
__global__ void lin_retnet_decay_kernel(float *g, int H) {
    int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h < H) g[h] = (float)log1p(-ldexp(1.0, -5 - h));
}

// ----------------------------------------------------------------------------
// the pieces forward and backward share

static RotaryCfg lin_rope_(const LinOpts *o) { return RotaryCfg{ROTARY_HALF, (float)o->rope_base, NULL}; }

// q (which 0) or k (1) of N rows through the feature map: out (N,HK) from x (N,HK); fa (2,N,HK) keeps hadamard's
// two Linears' outputs (per head: N*H rows of Dk through the shared Dk x Dk Linears)
static void lin_fmap_(const Mixer *m, int which, float *out, float *fa, const float *x, int N) {
    const LinOpts *o = (const LinOpts *)m->spec->opts;
    size_t n = (size_t)N * o->HK;
    if (o->fmap == FMAP_ELU) GPU_LAUNCH(lin_elu_kernel, n, out, x, n);
    else if (o->fmap == FMAP_RELU) gpu_relu_forward(out, x, n);
    else if (o->fmap == FMAP_HADAMARD) {
        int k0 = which ? o->k_f3w : o->k_f1w;  // w1, b1, w2, b2 follow in declaration order
        gpu_matmul_forward(gpu_f32(fa), gpu_f32(x), mixer_param(m, k0), mixer_param(m, k0 + 1), N * o->H, o->Dk, o->Dk);
        gpu_matmul_forward(gpu_f32(fa + n), gpu_f32(x), mixer_param(m, k0 + 2), mixer_param(m, k0 + 3), N * o->H, o->Dk,
                           o->Dk);
        GPU_LAUNCH(lin_mul_kernel, n, out, fa, n);
    }
}

// dx (N,HK) += the feature map's backward of dout (N,HK); tmp (2,N,HK) scratch
static void lin_fmap_backward_(Mixer *m, int which, float *dx, const float *dout, const float *x, const float *fa,
                               float *tmp, int N) {
    const LinOpts *o = (const LinOpts *)m->spec->opts;
    size_t n = (size_t)N * o->HK;
    if (o->fmap == FMAP_ELU) GPU_LAUNCH(lin_elu_backward_kernel, n, dx, dout, x, n);
    else if (o->fmap == FMAP_RELU) gpu_relu_backward(dx, x, dout, n);
    else if (o->fmap == FMAP_HADAMARD) {
        int k0 = which ? o->k_f3w : o->k_f1w;
        GPU_LAUNCH(lin_mul_backward_kernel, n, tmp, dout, fa, n);
        gpu_matmul_backward(gpu_f32(dx), mixer_grad(m, k0), mixer_grad(m, k0 + 1), gpu_f32(tmp), gpu_f32(x),
                            mixer_param(m, k0), N * o->H, o->Dk, o->Dk, 1);
        gpu_matmul_backward(gpu_f32(dx), mixer_grad(m, k0 + 2), mixer_grad(m, k0 + 3), gpu_f32(tmp + n), gpu_f32(x),
                            mixer_param(m, k0 + 2), N * o->H, o->Dk, o->Dk, 1);
    }
}

// ----------------------------------------------------------------------------
// forward, backward

// the forward over B,T; with a state, one token of decoding (T 1) at position t: sequence b's state at state + b * n,
// mixers/linear.c's layout [the recurrence's (H, Dk*Dva) | rotate: the position | selective_rope's | the conv caches
// of q, k, v]
static void linear_run_(Mixer *m, float *y, GpuAct x, int B, int T, float *state, size_t n, int t) {
    const LinOpts *o = (const LinOpts *)m->spec->opts;
    int C = m->spec->C, BT = B * T;
    size_t rows = (size_t)BT * o->H;
    GpuLinActs a;
    lin_layout_(o, B, T, m->acts, &a);
    GpuLinScratch sc;
    scratch_layout_(o, B, T, m->scratch, &sc);
    LinrecDims d = lin_dims(o, B, T);
    size_t es = (size_t)o->H * linrec_state_size(&d), K1 = o->K ? (size_t)o->K - 1 : 0;
    float *srs = state ? state + es + (o->rotate != 0) : NULL, *cs = srs ? srs + selrope_state_size(&o->sr) : NULL;
    GPU_TIMED("lin.qkv.forward", {
        gpu_shortconv_forward(m, o->k_q, o->k_cq, o->K, 0, a.xq, a.cq, a.pq, x, B, T, o->HK, cs, n);
        gpu_shortconv_forward(m, o->k_k, o->k_ck, o->K, 0, a.xk, a.ck, a.pk, x, B, T, o->HK,
                              cs ? cs + (size_t)o->HK * K1 : NULL, n);
        gpu_shortconv_forward(m, o->k_v, o->k_cv, o->K, 0, a.xv, a.cv, a.pv, x, B, T, o->HV,
                              cs ? cs + (size_t)2 * o->HK * K1 : NULL, n);
    });
    int fm = o->fmap != FMAP_IDENTITY;
    if (fm) GPU_TIMED("lin.fmap", { lin_fmap_(m, 0, a.q, a.fa, a.xq, BT); lin_fmap_(m, 1, a.k, a.fb, a.xk, BT); });
    if (o->rotate) {  // after the feature map, in place when there is one
        RotaryCfg rc = lin_rope_(o);
        GPU_TIMED("lin.rope", {
            gpu_rotary_forward(a.q, fm ? a.q : a.xq, &rc, state ? t : 0, B, T, o->H, o->Dk);
            gpu_rotary_forward(a.k, fm ? a.k : a.xk, &rc, state ? t : 0, B, T, o->H, o->Dk);
        });
        if (state) gpu_state_count(state + es, n, B);  // the host's step keeps the next token's position there
    }
    if (o->sr.enabled)  // gla (identity feature map): right after the projections
        GPU_TIMED("lin.selrope", {
            gpu_selrope_forward(m, &o->sr, a.sr, x, B, T, srs, n);
            gpu_selrope_apply(&o->sr, a.sr, a.q, a.xq, 0, B, T);
            gpu_selrope_apply(&o->sr, a.sr, a.k, a.xk, 0, B, T);
        });
    const float *g = NULL;
    if (o->variant == LIN_RETNET) {
        GPU_LAUNCH(lin_retnet_decay_kernel, o->H, a.gh, o->H);
        g = a.gh;
    } else if (o->variant == LIN_GLA) {
        GPU_TIMED("lin.gate", {
            gpu_matmul_forward(gpu_f32(a.gr), x, mixer_param(m, o->k_gk1), NULL, BT, C, o->gate_rank);
            gpu_matmul_forward(gpu_f32(a.gpre), gpu_f32(a.gr), mixer_param(m, o->k_gk2), mixer_param(m, o->k_gkb), BT,
                               o->gate_rank, o->GW);
            GPU_LAUNCH(lin_decay_kernel, rows * o->Dk, a.g, a.gpre, rows, o->Dk, o->rotate,
                        (float)(1.0 / o->gate_normalizer));
        });
        g = a.g;
    }
    if (o->normalize) gpu_linrec_ones_append(a.v, a.xv, rows, o->Dv);
    if (state) GPU_TIMED("lin.step", gpu_linrec_step(a.o, NULL, state, n, a.q, a.k, a.v, g, NULL, &d));
    else gpu_linrec_forward(a.o, NULL, a.ckpt, a.q, a.k, a.v, g, NULL, sc.engine, &d);  // timed per kernel inside
    if (o->normalize) GPU_LAUNCH(lin_normalize_kernel, rows * o->Dv, a.on, a.o, rows, o->Dv);
    GPU_TIMED("lin.out.forward", gpu_mixer_out_forward(m, o->k_g, o->k_norm, o->k_o, y, a.yn, a.rstd, a.z, a.on, x, BT,
                                                       o->H, o->Dv, (float)o->norm_eps));
}

static void linear_forward_(Mixer *m, float *y, GpuAct x, int B, int T) { linear_run_(m, y, x, B, T, NULL, 0, 0); }

static void linear_step_(Mixer *m, float *state, float *y, GpuAct x, int B, int t, int cap) {
    linear_run_(m, y, x, B, 1, state, m->spec->ops->state_size(m->spec, cap), t);
}

static void linear_backward_(Mixer *m, float *dx, const float *dy, GpuAct x, int B, int T) {
    const LinOpts *o = (const LinOpts *)m->spec->opts;
    int C = m->spec->C, BT = B * T;
    size_t rows = (size_t)BT * o->H, nK = (size_t)BT * o->HK, nA = rows * o->Dva;
    GpuLinActs a;
    lin_layout_(o, B, T, m->acts, &a);
    GpuLinScratch s;
    scratch_layout_(o, B, T, m->scratch, &s);
    // y = yn W_o^T, yn = norm(on) [* swish(z)], z = x W_g^T
    GPU_TIMED("lin.out.backward", gpu_mixer_out_backward(m, o->k_g, o->k_norm, o->k_o, dx, s.don, s.dyn, s.dz, dy, a.yn,
                                                         a.rstd, a.z, a.on, x, BT, o->H, o->Dv, (float)o->norm_eps));
    // on = o[:Dv] / (o[Dv] + eps)
    const float *dO = s.don;
    if (o->normalize) {
        GPU_LAUNCH(lin_normalize_backward_kernel, rows, s.doa, s.don, a.o, rows, o->Dv);
        dO = s.doa;
    }
    // the recurrence
    CUDA_CHECK(cudaMemset(s.dq, 0, nK * sizeof(float)));
    CUDA_CHECK(cudaMemset(s.dk, 0, nK * sizeof(float)));
    CUDA_CHECK(cudaMemset(s.dv, 0, nA * sizeof(float)));
    const float *g = o->variant == LIN_RETNET ? a.gh : o->variant == LIN_GLA ? a.g : NULL;
    if (o->variant == LIN_GLA) CUDA_CHECK(cudaMemset(s.dg, 0, nK * sizeof(float)));
    LinrecDims d = lin_dims(o, B, T);
    gpu_linrec_backward(s.dq, s.dk, s.dv, o->variant == LIN_GLA ? s.dg : NULL, NULL, dO, NULL, a.ckpt, a.q, a.k, a.v, g,
                        NULL, s.engine, &d);  // timed per kernel inside
    // gla: g = logsigmoid(gpre) / normalizer, gpre = (x W1^T) W2^T + b
    if (o->variant == LIN_GLA) {
        float *dgp = s.dyn, *dgr = s.tmp;  // dyn is free since the norm's backward
        GPU_TIMED("lin.gate", {
            GPU_LAUNCH(lin_decay_backward_kernel, rows * (o->GW / o->H), dgp, s.dg, a.gpre, rows, o->Dk, o->rotate,
                        (float)(1.0 / o->gate_normalizer));
            CUDA_CHECK(cudaMemset(dgr, 0, (size_t)BT * o->gate_rank * sizeof(float)));
            gpu_matmul_backward(gpu_f32(dgr), mixer_grad(m, o->k_gk2), mixer_grad(m, o->k_gkb), gpu_f32(dgp),
                                gpu_f32(a.gr), mixer_param(m, o->k_gk2), BT, o->gate_rank, o->GW, 1);
            gpu_matmul_backward(gpu_f32(dx), mixer_grad(m, o->k_gk1), NULL, gpu_f32(dgr), x, mixer_param(m, o->k_gk1),
                                BT, C, o->gate_rank, 1);
        });
    }
    // v: drop the ones column
    const float *dxv = s.dv;
    if (o->normalize) {
        gpu_linrec_ones_drop(s.doa, s.dv, rows, o->Dv);
        dxv = s.doa;
    }
    // q, k through RoPE or the feature map
    const float *dq0 = s.dq, *dk0 = s.dk;
    if (o->sr.enabled) {
        GPU_TIMED("lin.selrope", {
            float *dth = gpu_selrope_dtheta(&o->sr, s.sr, B, T);
            gpu_selrope_apply_backward(&o->sr, a.sr, s.dxq, dth, s.dq, 0, a.q, 0, B, T);
            gpu_selrope_apply_backward(&o->sr, a.sr, s.dxk, dth, s.dk, 0, a.k, 0, B, T);
            gpu_selrope_backward(m, &o->sr, a.sr, s.sr, dx, x, B, T);
        });
        dq0 = s.dxq, dk0 = s.dxk;
    } else if (o->rotate || o->fmap != FMAP_IDENTITY) {
        CUDA_CHECK(cudaMemset(s.dxq, 0, nK * sizeof(float)));
        CUDA_CHECK(cudaMemset(s.dxk, 0, nK * sizeof(float)));
        RotaryCfg rc = lin_rope_(o);
        float *dr[2] = {s.dq, s.dk}, *dxs[2] = {s.dxq, s.dxk};
        for (int w = 0; w < 2; w++) {
            if (o->fmap == FMAP_IDENTITY) {
                GPU_TIMED("lin.rope", gpu_rotary_backward(dxs[w], dr[w], &rc, 0, B, T, o->H, o->Dk));
                continue;
            }
            const float *dphi = dr[w];
            if (o->rotate) {  // undo the rotation (into dyn, free since the norm's backward) before the map's backward
                CUDA_CHECK(cudaMemset(s.dyn, 0, nK * sizeof(float)));
                GPU_TIMED("lin.rope", gpu_rotary_backward(s.dyn, dr[w], &rc, 0, B, T, o->H, o->Dk));
                dphi = s.dyn;
            }
            GPU_TIMED("lin.fmap",
                      lin_fmap_backward_(m, w, dxs[w], dphi, w ? a.xk : a.xq, w ? a.fb : a.fa, s.tmp, BT));
        }
        dq0 = s.dxq, dk0 = s.dxk;
    }
    // the streams (with conv: silu and the convs first; dyn and dz are free since the norm's and the gate's backward)
    GPU_TIMED("lin.qkv.backward", {
        gpu_shortconv_backward(m, o->k_q, o->k_cq, o->K, 0, dx, s.dyn, s.dz, dq0, a.cq, a.pq, x, B, T, o->HK);
        gpu_shortconv_backward(m, o->k_k, o->k_ck, o->K, 0, dx, s.dyn, s.dz, dk0, a.ck, a.pk, x, B, T, o->HK);
        gpu_shortconv_backward(m, o->k_v, o->k_cv, o->K, 0, dx, s.dyn, s.dz, dxv, a.cv, a.pv, x, B, T, o->HV);
    });
}

#define LIN_GPU_OPS_(ident, nm) \
    const GpuMixerOps ident = {nm, linear_check_, linear_act_size_, linear_scratch_size_, linear_forward_, \
                               linear_backward_, linear_step_}
LIN_GPU_OPS_(GPU_MIXER_LINEAR_ATTN, "linear_attn");
LIN_GPU_OPS_(GPU_MIXER_RETNET, "retnet");
LIN_GPU_OPS_(GPU_MIXER_GLA, "gla");
