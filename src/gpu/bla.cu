// The bla mixer's device side (mixers/bla.c is the host side and the layer, nn/bla.h the op; read them for the
// equations): the fused qkv projection (with `conv` the depthwise short conv over its whole width, then silu), the
// split into q, k, v, the write weights c_t[s] and log-decays log(1 - c_t[s]) (nn/bla.h's bla_coeffs computed on the
// device and broadcast to every (b,h)), pass 1 of the recurrence (keys -> slots:
// the slots are its value side, decaying per slot), the softmax over the slots position t sees (a prefix: the
// dilated times grow with s), pass 2 (slots -> values, decaying per key slot) and the output projection. Both passes
// run on gpu/linrec.cuh's engine, the softmax is gpu/slots.cuh's (gsa's, with bla's visible prefix); the split and
// the broadcast are this file's kernels (a thread per element), so two runs give the same bits.
// bla_check_ refuses chunks longer than the engine stages.
#include <math.h>

#include "gpu/activation.cuh"
#include "gpu/common.cuh"
#include "gpu/conv.cuh"
#include "gpu/linrec.cuh"
#include "gpu/matmul.cuh"
#include "gpu/mixer_gpu.cuh"
#include "gpu/slots.cuh"
#include "gpu/step.cuh"

extern "C" {
#include "mixers/bla.h"
}

static int bla_check_(const MixerSpec *s, int l, Err *e) {
    const BlaOpts *o = (const BlaOpts *)s->opts;
    return gpu_refuse_chunked("bla", l, o->chunk, GPU_LINREC_MAX_L, "recurrence", e);
}

// ----------------------------------------------------------------------------
// layout of the saved activations (mixers/bla.c's BlaActs) and of the scratch

typedef struct GpuBlaActs {
    float *xp, *cp;       // (BT,W) conv: the projection (its input) and its output (silu's input)
    float *q, *k;         // (BT,HK)
    float *v, *o;         // (BT,HV) the values and the op's output (wo's input)
    float *p;             // (BT,H,S) the slot weights
    float *ckpt1, *ckpt2; // the passes' chunk states
} GpuBlaActs;

static size_t bla_layout_(const BlaOpts *o, int B, int T, float *base, GpuBlaActs *a) {
    size_t BT = (size_t)B * T, cv = o->K > 0;
    BlaDims d = bla_dims(o, B, T);
    LinrecDims d1 = bla_pass_dims(&d, 1, B, T), d2 = bla_pass_dims(&d, 2, B, T);
    GpuSlot slots[] = {{&a->xp, cv * BT * o->W}, {&a->cp, cv * BT * o->W}, {&a->q, BT * o->HK}, {&a->k, BT * o->HK},
                       {&a->v, BT * o->HV},       {&a->o, BT * o->HV},       {&a->p, BT * o->H * o->S},
                       {&a->ckpt1, gpu_linrec_ckpt_size(&d1)}, {&a->ckpt2, gpu_linrec_ckpt_size(&d2)}};
    return gpu_take_slots(slots, sizeof slots / sizeof slots[0], base);
}

static size_t bla_act_size_(const MixerSpec *s, int B, int T) {
    GpuBlaActs a;
    return bla_layout_((const BlaOpts *)s->opts, B, T, NULL, &a);
}

// The scratch: the engine's own (the larger of the two passes'); qkv (BT,W) and the weights' tables ct, gt (T,S) and
// broadcasts cb, gb (BT,H,S); the backward's dO (BT,HV), dq, dk (BT,HK), dv (BT,HV), dc (BT,W), dp, dsc and a sink
// for the fixed weights' gradients (BT,H,S)
typedef struct GpuBlaScratch {
    float *engine, *qkv, *ct, *gt, *cb, *gb, *dO, *dq, *dk, *dv, *dc, *dp, *dsc, *sink;
} GpuBlaScratch;

static size_t scratch_layout_(const BlaOpts *o, int B, int T, float *base, GpuBlaScratch *s) {
    size_t BT = (size_t)B * T, nS = BT * o->H * o->S, tS = (size_t)T * o->S;
    BlaDims d = bla_dims(o, B, T);
    LinrecDims d1 = bla_pass_dims(&d, 1, B, T), d2 = bla_pass_dims(&d, 2, B, T);
    size_t e1 = gpu_linrec_scratch_size(&d1), e2 = gpu_linrec_scratch_size(&d2);
    GpuSlot slots[] = {{&s->engine, e1 > e2 ? e1 : e2}, {&s->qkv, BT * o->W}, {&s->ct, tS}, {&s->gt, tS},
                       {&s->cb, nS},  {&s->gb, nS},  {&s->dO, BT * o->HV}, {&s->dq, BT * o->HK},
                       {&s->dk, BT * o->HK}, {&s->dv, BT * o->HV}, {&s->dc, BT * o->W}, {&s->dp, nS},
                       {&s->dsc, nS}, {&s->sink, nS}};
    return gpu_take_slots(slots, sizeof slots / sizeof slots[0], base);
}

static size_t bla_scratch_size_(const MixerSpec *s, int B, int T) {
    GpuBlaScratch sc;
    return scratch_layout_((const BlaOpts *)s->opts, B, T, NULL, &sc);
}

// ----------------------------------------------------------------------------
// kernels

// qkv rows (R,W) <-> q, k (R,HK), v (R,HV), a thread per element of qkv: join 0 splits, 1 joins (writes qkv)
__global__ void bla_split_kernel(float *q, float *k, float *v, float *qkv, size_t R, int HK, int HV, int join) {
    int W = 2 * HK + HV;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * W) return;
    size_t r = i / W;
    int c = (int)(i % W);
    float *x = c < HK ? q + r * HK + c : c < 2 * HK ? k + r * HK + c - HK : v + r * HV + c - 2 * HK;
    if (join) qkv[i] = *x;
    else *x = qkv[i];
}

// cb, gb (rows,S) = the tables' rows of each row's position: row r = (b,t,h) of T positions (the table's row t, t0 = 0),
// or of one position (a decoding step: the table's one row); gb, gt NULL without decay
__global__ void bla_broadcast_kernel(float *cb, float *gb, const float *ct, const float *gt, size_t rows, int T,
                                     int H, int S) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * S) return;
    size_t r = i / S, t = (r / H) % T;
    int s = (int)(i % S);
    cb[i] = ct[t * S + s];
    if (gb) gb[i] = gt[t * S + s];
}

// ----------------------------------------------------------------------------
// the pieces forward, backward and step share

// ct, gt (T,S) WRITTEN: nn/bla.c's bla_coeffs on the device, a thread per (t, s) through nn/bla.h's bla_coeff, the
// host's function; gt NULL without decay
__global__ void bla_coeffs_kernel(float *ct, float *gt, long t0, int T, int S, int M, double period) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * S) return;
    double w = bla_coeff(t0 + (long)(i / S), (int)(i % S), S, M, period);
    ct[i] = (float)w;
    if (gt) gt[i] = (float)log(fmax(1.0 - w, BLA_LOG_FLOOR));
}

// the write weights of positions t0 .. t0 + T - 1 for every (b,h): the (T,S) tables ct, gt, broadcast into cb, gb
// (rows B T H); gt, gb unused without decay
static void bla_weights_(const BlaOpts *o, float *ct, float *gt, float *cb, float *gb, int B, int T, long t0) {
    size_t rows = (size_t)B * T * o->H;
    float *g = o->decay ? gt : NULL;
    GPU_LAUNCH(bla_coeffs_kernel, (size_t)T * o->S, ct, g, t0, T, o->S, o->modes, o->P);
    GPU_LAUNCH(bla_broadcast_kernel, rows * o->S, cb, o->decay ? gb : NULL, ct, g, rows, T, o->H, o->S);
}

// the forward over B,T; with a state, one token of decoding (T 1) at position t: sequence b's state at state + b * n,
// mixers/bla.c's layout [pass 1's states (H, Dk*S) | pass 2's (H, S*Dv) | the conv's cache (W, K-1)]
static void bla_run_(Mixer *m, float *y, GpuAct x, int B, int T, float *state, size_t n, int t) {
    const BlaOpts *o = (const BlaOpts *)m->spec->opts;
    int C = m->spec->C, BT = B * T;
    size_t nW = (size_t)BT * o->W, rows = (size_t)BT * o->H;
    GpuBlaActs a;
    bla_layout_(o, B, T, m->acts, &a);
    GpuBlaScratch s;
    scratch_layout_(o, B, T, m->scratch, &s);
    BlaDims d = bla_dims(o, B, T);
    size_t half = (size_t)o->H * o->Dk * o->S, os = half + (size_t)o->H * o->S * o->Dv;
    GPU_TIMED("bla.qkv.forward", {
        if (o->K) {
            gpu_matmul_forward(gpu_f32(a.xp), x, mixer_param(m, o->k_w), NULL, BT, C, o->W);
            if (state) gpu_conv1d_causal_step(a.cp, state + os, n, a.xp, mixer_param(m, o->k_conv), NULL, B, o->W, o->K);
            else gpu_conv1d_causal_forward(a.cp, a.xp, mixer_param(m, o->k_conv), NULL, B, T, o->W, o->K);
            gpu_silu_forward(s.qkv, a.cp, nW);
        } else {
            gpu_matmul_forward(gpu_f32(s.qkv), x, mixer_param(m, o->k_w), NULL, BT, C, o->W);
        }
        GPU_LAUNCH(bla_split_kernel, nW, a.q, a.k, a.v, s.qkv, (size_t)BT, o->HK, o->HV, 0);
    });
    GPU_TIMED("bla.weights", bla_weights_(o, s.ct, s.gt, s.cb, s.gb, B, T, state ? t : 0));
    LinrecDims d1 = bla_pass_dims(&d, 1, B, T), d2 = bla_pass_dims(&d, 2, B, T);
    const float *g = o->decay ? s.gb : NULL;
    // pass 1: the scores q . Kt_t[s]; the softmax over the visible slots; pass 2: o = sum_s p[s] Vt_t[s]
    if (state) GPU_TIMED("bla.step", gpu_linrec_step(a.p, NULL, state, n, a.q, a.k, s.cb, g, NULL, &d1));
    else gpu_linrec_forward(a.p, NULL, a.ckpt1, a.q, a.k, s.cb, g, NULL, s.engine, &d1);  // timed per kernel inside
    GPU_TIMED("bla.softmax", gpu_slot_softmax(a.p, a.p, rows, o->S, T, o->H, state ? (long)t : 0L, o->P));
    if (state) GPU_TIMED("bla.step", gpu_linrec_step(a.o, NULL, state + half, n, a.p, s.cb, a.v, g, NULL, &d2));
    else gpu_linrec_forward(a.o, NULL, a.ckpt2, a.p, s.cb, a.v, g, NULL, s.engine, &d2);
    GPU_TIMED("bla.out.forward",
              gpu_matmul_forward(gpu_f32(y), gpu_f32(a.o), mixer_param(m, o->k_o), NULL, BT, o->HV, C));
}

static void bla_forward_(Mixer *m, float *y, GpuAct x, int B, int T) { bla_run_(m, y, x, B, T, NULL, 0, 0); }

static void bla_step_(Mixer *m, float *state, float *y, GpuAct x, int B, int t, int cap) {
    bla_run_(m, y, x, B, 1, state, m->spec->ops->state_size(m->spec, cap), t);
}

static void bla_backward_(Mixer *m, float *dx, const float *dy, GpuAct x, int B, int T) {
    const BlaOpts *o = (const BlaOpts *)m->spec->opts;
    int C = m->spec->C, BT = B * T;
    size_t nW = (size_t)BT * o->W, nK = (size_t)BT * o->HK, nV = (size_t)BT * o->HV, rows = (size_t)BT * o->H;
    size_t nS = rows * o->S;
    GpuBlaActs a;
    bla_layout_(o, B, T, m->acts, &a);
    GpuBlaScratch s;
    scratch_layout_(o, B, T, m->scratch, &s);
    BlaDims d = bla_dims(o, B, T);
    // y = o W_o^T
    CUDA_CHECK(cudaMemset(s.dO, 0, nV * sizeof(float)));
    GPU_TIMED("bla.out.backward", gpu_matmul_backward(gpu_f32(s.dO), mixer_grad(m, o->k_o), NULL, gpu_f32(dy),
                                                      gpu_f32(a.o), mixer_param(m, o->k_o), BT, o->HV, C, 0));
    GPU_TIMED("bla.weights", bla_weights_(o, s.ct, s.gt, s.cb, s.gb, B, T, 0));
    LinrecDims d1 = bla_pass_dims(&d, 1, B, T), d2 = bla_pass_dims(&d, 2, B, T);
    const float *g = o->decay ? s.gb : NULL;
    CUDA_CHECK(cudaMemset(s.dq, 0, nK * sizeof(float)));
    CUDA_CHECK(cudaMemset(s.dk, 0, nK * sizeof(float)));  // its own slot: the slots are padded to 64 floats
    CUDA_CHECK(cudaMemset(s.dv, 0, nV * sizeof(float)));
    CUDA_CHECK(cudaMemset(s.dp, 0, nS * sizeof(float)));
    CUDA_CHECK(cudaMemset(s.sink, 0, nS * sizeof(float)));
    // pass 2, the softmax (a hidden slot has p = 0: it gets none), pass 1; the weights' gradients go to the sink
    gpu_linrec_backward(s.dp, s.sink, s.dv, NULL, NULL, s.dO, NULL, a.ckpt2, a.p, s.cb, a.v, g, NULL, s.engine, &d2);
    GPU_TIMED("bla.softmax", gpu_slot_softmax_backward(s.dsc, a.p, s.dp, rows, o->S));
    gpu_linrec_backward(s.dq, s.dk, s.sink, NULL, NULL, s.dsc, NULL, a.ckpt1, a.q, a.k, s.cb, g, NULL, s.engine, &d1);
    // q, k, v back into qkv's rows; the conv and silu; the projection
    float *dqkv = s.qkv;  // free since the forward
    GPU_TIMED("bla.qkv.backward", {
        GPU_LAUNCH(bla_split_kernel, nW, s.dq, s.dk, s.dv, dqkv, (size_t)BT, o->HK, o->HV, 1);
        if (o->K) {
            CUDA_CHECK(cudaMemset(s.dc, 0, nW * sizeof(float)));
            gpu_silu_backward(s.dc, a.cp, dqkv, nW);
            CUDA_CHECK(cudaMemset(dqkv, 0, nW * sizeof(float)));  // the conv's input gradient lands here
            gpu_conv1d_causal_backward(dqkv, mixer_grad(m, o->k_conv), NULL, s.dc, a.xp, mixer_param(m, o->k_conv), B,
                                       T, o->W, o->K);
        }
        gpu_matmul_backward(gpu_f32(dx), mixer_grad(m, o->k_w), NULL, gpu_f32(dqkv), x, mixer_param(m, o->k_w), BT, C,
                            o->W, 1);
    });
}

const GpuMixerOps GPU_MIXER_BLA = {"bla", bla_check_, bla_act_size_, bla_scratch_size_, bla_forward_, bla_backward_,
                                   bla_step_};
