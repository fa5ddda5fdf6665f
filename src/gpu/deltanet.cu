// The deltanet and gated_deltanet mixers' device side (mixers/delta.c is the host side and the definition; read it
// for the equations). The same passes over device buffers: the q, k, v streams (projections, with `conv` the short
// convolutions, then silu: gpu/shortconv.cuh with its silu0 convention), the per-head L2 norms of q and k
// (gpu/l2norm.cuh), beta = sigmoid(b_proj x) (x2 with allow_neg_eigval), gated_deltanet's log-decay
// g = -exp(A_log) softplus(a_proj x + dt_bias), the chunked delta rule (gpu/delta.cuh), the per-head RMSNorm with
// its optional swish output gate and the output projection (gpu/mixer_out.cuh). The gates are formed in double and
// rounded once, as on the host (mixers/gates.h, the host's functions); A_log's and dt_bias's gradients are column
// sums in a fixed order (gpu/colsum.cuh). Every other element is one thread's, no atomics, so two runs give the same bits.
// Selective RoPE (gpu/selrope.cuh) turns q and k after silu, before the L2 norms, as on the host.
// delta_check_ refuses chunks longer than the engine stages and key heads wider than its state tiles hold.
#include <math.h>

#include "gpu/colsum.cuh"
#include "gpu/common.cuh"
#include "gpu/delta.cuh"
#include "gpu/l2norm.cuh"
#include "gpu/matmul.cuh"
#include "gpu/mixer_gpu.cuh"
#include "gpu/mixer_out.cuh"
#include "gpu/selrope.cuh"
#include "gpu/shortconv.cuh"
#include "gpu/step.cuh"

extern "C" {
#include "mixers/gates.h"
#include "mixers/delta.h"
}

static int delta_check_(const MixerSpec *s, int l, Err *e) {
    const DeltaOpts *o = (const DeltaOpts *)s->opts;
    const char *name = o->gated ? "gated_deltanet" : "deltanet";
    if (gpu_refuse_chunked(name, l, o->chunk, GPU_DELTA_MAX_L, "delta rule", e)) return -1;
    if (o->Dk > GPU_DELTA_MAX_DK)
        return err_set(e, "layer %d: %s key head size %d (expand_k d_model / heads): the GPU's delta rule takes "
                       "up to %d (model.mixer.expand_k, model.mixer.heads)", l, name, o->Dk, GPU_DELTA_MAX_DK);
    return 0;
}

// ----------------------------------------------------------------------------
// layout of the saved activations and of the scratch (mixers/delta.c's DeltaActs and backward work space)

typedef struct GpuDeltaActs {
    float *xq, *xk, *xv;  // (BT,HK) (BT,HK) (BT,HV) conv: the projections, the convs' inputs
    float *cq, *ck, *cv;  // the same widths: silu's inputs (the convs' outputs, or the projections without conv)
    float *q, *k, *v;     // what the engine reads: l2norm(silu(cq)), l2norm(silu(ck)), silu(cv)
    float *nq, *nk;       // (BT*H) the L2 norms
    float *bpre, *beta;   // (BT*H) b_proj x and beta
    float *apre, *g;      // (BT*H) gated: a_proj x and the log-decay
    float *o;             // (BT,HV) the engine's output
    float *z;             // (BT,HV) use_gate: the output gate's pre-activation
    float *rstd;          // (BT*H)
    float *yn;            // (BT,HV) normed (and gated): o_proj's input
    float *ckpt;          // the engine's chunk states
    float *rq, *rk;       // (BT,HK) selective_rope: silu(cq), silu(ck) rotated (the L2 norms' inputs)
    float *sr;            // selective_rope's (gpu/selrope.cuh)
} GpuDeltaActs;

static size_t delta_layout_(const DeltaOpts *o, int B, int T, float *base, GpuDeltaActs *a) {
    size_t BT = (size_t)B * T, nK = BT * o->HK, nV = BT * o->HV, nH = BT * o->H;
    size_t cv = o->K > 0, gt = o->gated;
    DeltaDims d = delta_mixer_dims(o, B, T);
    GpuSlot slots[] = {{&a->xq, cv * nK},   {&a->xk, cv * nK}, {&a->xv, cv * nV},   {&a->cq, nK},
                       {&a->ck, nK},        {&a->cv, nV},      {&a->q, nK},         {&a->k, nK},
                       {&a->v, nV},         {&a->nq, nH},      {&a->nk, nH},        {&a->bpre, nH},
                       {&a->beta, nH},      {&a->apre, gt * nH}, {&a->g, gt * nH},  {&a->o, nV},
                       {&a->z, o->use_gate ? nV : 0}, {&a->rstd, nH}, {&a->yn, nV},
                       {&a->ckpt, gpu_delta_ckpt_size(&d)}, {&a->rq, o->sr.enabled * nK},
                       {&a->rk, o->sr.enabled * nK}, {&a->sr, gpu_selrope_act_size(&o->sr, B, T)}};
    return gpu_take_slots(slots, sizeof slots / sizeof slots[0], base);
}

static size_t delta_act_size_(const MixerSpec *s, int B, int T) {
    GpuDeltaActs a;
    return delta_layout_((const DeltaOpts *)s->opts, B, T, NULL, &a);
}

// The scratch: the engine's own (forward and backward), then the backward's: dyn, dz, dO, dv (BT,HV); dq, dk
// (BT,HK); ds, dc, dp (BT, the wider side); dbeta, dg, da, dgg (BT*H: gated's da and dg g, A_log's and dt_bias's
// gradients before their column sums); selective_rope's own last
typedef struct GpuDeltaScratch {
    float *engine, *dyn, *dz, *dO, *dv, *dq, *dk, *ds, *dc, *dp, *dbeta, *dg, *da, *dgg, *sr;
} GpuDeltaScratch;

static size_t delta_scratch_layout_(const DeltaOpts *o, int B, int T, float *base, GpuDeltaScratch *s) {
    size_t BT = (size_t)B * T, nK = BT * o->HK, nV = BT * o->HV, nH = BT * o->H, w = nK > nV ? nK : nV;
    size_t gt = o->gated;
    DeltaDims d = delta_mixer_dims(o, B, T);
    GpuSlot slots[] = {{&s->engine, gpu_delta_scratch_size(&d)},
                       {&s->dyn, nV}, {&s->dz, o->use_gate ? nV : 0}, {&s->dO, nV}, {&s->dv, nV},
                       {&s->dq, nK}, {&s->dk, nK}, {&s->ds, w}, {&s->dc, w}, {&s->dp, o->K > 0 ? w : 0},
                       {&s->dbeta, nH}, {&s->dg, gt * nH}, {&s->da, gt * nH}, {&s->dgg, gt * nH},
                       {&s->sr, gpu_selrope_scratch_size(&o->sr, B, T)}};
    return gpu_take_slots(slots, sizeof slots / sizeof slots[0], base);
}

static size_t delta_scratch_size_(const MixerSpec *s, int B, int T) {
    GpuDeltaScratch sc;
    return delta_scratch_layout_((const DeltaOpts *)s->opts, B, T, NULL, &sc);
}

// ----------------------------------------------------------------------------
// the gates (mixers/delta.c's loops, a thread per element, in double as there)

// beta (n,) = s sigmoid(bpre), s = 2 with allow_neg_eigval, else 1
__global__ void delta_beta_kernel(float *beta, const float *bpre, size_t n, double s) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) beta[i] = (float)(s * mixer_sigmoid(bpre[i]));
}
// its backward in place: dbeta (n,) = dbeta s sg (1 - sg), sg = beta / s the sigmoid
__global__ void delta_beta_backward_kernel(float *dbeta, const float *beta, size_t n, double s) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double sg = beta[i] / s;
    dbeta[i] = (float)(dbeta[i] * s * sg * (1.0 - sg));
}
// the log-decay g (rows,H) = -exp(A_log) softplus(apre + dt_bias); alog, dtb (H,)
__global__ void delta_decay_kernel(float *g, const float *apre, const float *alog, const float *dtb, size_t n,
                                   int H) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int h = (int)(i % H);
    g[i] = (float)(-exp((double)alog[h]) * mixer_softplus((double)apre[i] + dtb[h]));
}
// its backward: dgg (rows,H) = dg g (A_log's gradient per element: dg/dA_log = g), da (rows,H) = apre's gradient
// dg (-exp(A_log)) sigmoid(apre + dt_bias) (also dt_bias's per element)
__global__ void delta_decay_backward_kernel(float *dgg, float *da, const float *dg, const float *g, const float *apre,
                                            const float *alog, const float *dtb, size_t n, int H) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int h = (int)(i % H);
    dgg[i] = dg[i] * g[i];
    da[i] = (float)(dg[i] * -exp((double)alog[h]) * mixer_sigmoid((double)apre[i] + dtb[h]));
}

// ----------------------------------------------------------------------------
// forward, backward

// the forward over B,T; with a state, one token of decoding (T 1): sequence b's state at state + b * n,
// mixers/delta.c's layout [the engine's (H, Dk*Dv) | the conv caches of q, k, v | selective_rope's]
static void delta_run_(Mixer *m, float *y, GpuAct x, int B, int T, float *state, size_t n) {
    const DeltaOpts *o = (const DeltaOpts *)m->spec->opts;
    int C = m->spec->C, BT = B * T, H = o->H;
    size_t nH = (size_t)BT * H, K1 = o->K ? (size_t)o->K - 1 : 0;
    GpuDeltaActs a;
    delta_layout_(o, B, T, m->acts, &a);
    GpuDeltaScratch sc;
    delta_scratch_layout_(o, B, T, m->scratch, &sc);
    float *cs = state ? state + (size_t)H * o->Dk * o->Dv : NULL;
    GPU_TIMED("deltanet.qkv.forward", {
        gpu_shortconv_forward(m, o->k_q, o->k_cq, o->K, 1, a.q, a.cq, a.xq, x, B, T, o->HK, cs, n);
        gpu_shortconv_forward(m, o->k_k, o->k_ck, o->K, 1, a.k, a.ck, a.xk, x, B, T, o->HK,
                              cs ? cs + (size_t)o->HK * K1 : NULL, n);
        gpu_shortconv_forward(m, o->k_v, o->k_cv, o->K, 1, a.v, a.cv, a.xv, x, B, T, o->HV,
                              cs ? cs + (size_t)2 * o->HK * K1 : NULL, n);
    });
    const float *lq = a.q, *lk = a.k;
    if (o->sr.enabled) {  // after the convs and silu, before the L2 norms
        GPU_TIMED("deltanet.selrope", {
            gpu_selrope_forward(m, &o->sr, a.sr, x, B, T, state ? state + n - selrope_state_size(&o->sr) : NULL, n);
            gpu_selrope_apply(&o->sr, a.sr, a.rq, a.q, 0, B, T);
            gpu_selrope_apply(&o->sr, a.sr, a.rk, a.k, 0, B, T);
        });
        lq = a.rq, lk = a.rk;
    }
    GPU_TIMED("deltanet.l2norm", {  // q, k (BT*H rows of Dk), in place without selective_rope
        gpu_l2norm_forward(a.q, a.nq, lq, BT * H, o->Dk, DELTA_L2_EPS, L2NORM_ADD);
        gpu_l2norm_forward(a.k, a.nk, lk, BT * H, o->Dk, DELTA_L2_EPS, L2NORM_ADD);
    });
    GPU_TIMED("deltanet.beta", {
        gpu_matmul_forward(gpu_f32(a.bpre), x, mixer_param(m, o->k_b), NULL, BT, C, H);
        GPU_LAUNCH(delta_beta_kernel, nH, a.beta, a.bpre, nH, delta_beta_scale(o));
    });
    if (o->gated)
        GPU_TIMED("deltanet.decay", {
            gpu_matmul_forward(gpu_f32(a.apre), x, mixer_param(m, o->k_a), NULL, BT, C, H);
            GPU_LAUNCH(delta_decay_kernel, nH, a.g, a.apre, mixer_param(m, o->k_A), mixer_param(m, o->k_dt), nH, H);
        });
    DeltaDims d = delta_mixer_dims(o, B, T);
    if (state) GPU_TIMED("deltanet.step", gpu_delta_step(a.o, state, n, a.q, a.k, a.v, a.beta, a.g, &d));
    else gpu_delta_forward(a.o, a.ckpt, a.q, a.k, a.v, a.beta, a.g, sc.engine, &d);  // timed per kernel inside
    GPU_TIMED("deltanet.out.forward", gpu_mixer_out_forward(m, o->k_g, o->k_norm, o->k_o, y, a.yn, a.rstd, a.z, a.o,
                                                            x, BT, H, o->Dv, (float)o->norm_eps));
}

static void delta_forward_(Mixer *m, float *y, GpuAct x, int B, int T) { delta_run_(m, y, x, B, T, NULL, 0); }

static void delta_step_(Mixer *m, float *state, float *y, GpuAct x, int B, int t, int cap) {
    (void)t;
    delta_run_(m, y, x, B, 1, state, m->spec->ops->state_size(m->spec, cap));
}

static void delta_backward_(Mixer *m, float *dx, const float *dy, GpuAct x, int B, int T) {
    const DeltaOpts *o = (const DeltaOpts *)m->spec->opts;
    int C = m->spec->C, BT = B * T, H = o->H;
    size_t nK = (size_t)BT * o->HK, nV = (size_t)BT * o->HV, nH = (size_t)BT * H;
    GpuDeltaActs a;
    delta_layout_(o, B, T, m->acts, &a);
    GpuDeltaScratch s;
    delta_scratch_layout_(o, B, T, m->scratch, &s);
    // y = yn W_o^T, yn = norm(o) [* swish(z)], z = x W_g^T
    GPU_TIMED("deltanet.out.backward", gpu_mixer_out_backward(m, o->k_g, o->k_norm, o->k_o, dx, s.dO, s.dyn, s.dz, dy,
                                                              a.yn, a.rstd, a.z, a.o, x, BT, H, o->Dv,
                                                              (float)o->norm_eps));
    // the recurrence
    CUDA_CHECK(cudaMemset(s.dq, 0, nK * sizeof(float)));
    CUDA_CHECK(cudaMemset(s.dk, 0, nK * sizeof(float)));
    CUDA_CHECK(cudaMemset(s.dv, 0, nV * sizeof(float)));
    CUDA_CHECK(cudaMemset(s.dbeta, 0, nH * sizeof(float)));
    if (o->gated) CUDA_CHECK(cudaMemset(s.dg, 0, nH * sizeof(float)));
    DeltaDims d = delta_mixer_dims(o, B, T);
    gpu_delta_backward(s.dq, s.dk, s.dv, s.dbeta, s.dg, s.dO, a.ckpt, a.q, a.k, a.v, a.beta, a.g, s.engine,
                       &d);  // timed per kernel inside
    // beta = s sigmoid(bpre)
    GPU_TIMED("deltanet.beta", {
        GPU_LAUNCH(delta_beta_backward_kernel, nH, s.dbeta, a.beta, nH, delta_beta_scale(o));
        gpu_matmul_backward(gpu_f32(dx), mixer_grad(m, o->k_b), NULL, gpu_f32(s.dbeta), x, mixer_param(m, o->k_b), BT,
                            C, H, 1);
    });
    // g = -exp(A_log) softplus(apre + dt_bias): dA_log = sum dg g, ddt_bias = sum dapre (per head, over tokens)
    if (o->gated)
        GPU_TIMED("deltanet.decay", {
            GPU_LAUNCH(delta_decay_backward_kernel, nH, s.dgg, s.da, s.dg, a.g, a.apre, mixer_param(m, o->k_A),
                       mixer_param(m, o->k_dt), nH, H);
            gpu_colsum(mixer_grad(m, o->k_A), NULL, gpu_f32(s.dgg), NULL, NULL, NULL, BT, H, COLSUM_PLAIN);
            gpu_colsum(mixer_grad(m, o->k_dt), NULL, gpu_f32(s.da), NULL, NULL, NULL, BT, H, COLSUM_PLAIN);
            gpu_matmul_backward(gpu_f32(dx), mixer_grad(m, o->k_a), NULL, gpu_f32(s.da), x, mixer_param(m, o->k_a),
                                BT, C, H, 1);
        });
    // q, k: l2norm [then selective_rope], then silu, conv, projection; v: silu, conv, projection
    float *dth = o->sr.enabled ? gpu_selrope_dtheta(&o->sr, s.sr, B, T) : NULL;
    GPU_TIMED("deltanet.l2norm", {
        CUDA_CHECK(cudaMemset(s.ds, 0, nK * sizeof(float)));
        gpu_l2norm_backward(s.ds, s.dq, a.q, a.nq, BT * H, o->Dk, DELTA_L2_EPS, L2NORM_ADD);
    });
    if (dth)
        GPU_TIMED("deltanet.selrope", gpu_selrope_apply_backward(&o->sr, a.sr, s.ds, dth, s.ds, 0, a.rq, 0, B, T));
    GPU_TIMED("deltanet.qkv.backward",
              gpu_shortconv_backward(m, o->k_q, o->k_cq, o->K, 1, dx, s.dc, s.dp, s.ds, a.cq, a.xq, x, B, T, o->HK));
    GPU_TIMED("deltanet.l2norm", {
        CUDA_CHECK(cudaMemset(s.ds, 0, nK * sizeof(float)));
        gpu_l2norm_backward(s.ds, s.dk, a.k, a.nk, BT * H, o->Dk, DELTA_L2_EPS, L2NORM_ADD);
    });
    if (dth)
        GPU_TIMED("deltanet.selrope", gpu_selrope_apply_backward(&o->sr, a.sr, s.ds, dth, s.ds, 0, a.rk, 0, B, T));
    GPU_TIMED("deltanet.qkv.backward",
              gpu_shortconv_backward(m, o->k_k, o->k_ck, o->K, 1, dx, s.dc, s.dp, s.ds, a.ck, a.xk, x, B, T, o->HK));
    if (dth) GPU_TIMED("deltanet.selrope", gpu_selrope_backward(m, &o->sr, a.sr, s.sr, dx, x, B, T));
    GPU_TIMED("deltanet.qkv.backward", {
        gpu_shortconv_backward(m, o->k_v, o->k_cv, o->K, 1, dx, s.dc, s.dp, s.dv, a.cv, a.xv, x, B, T, o->HV);
    });
}

#define DELTA_GPU_OPS_(ident, nm) \
    const GpuMixerOps ident = {nm, delta_check_, delta_act_size_, delta_scratch_size_, delta_forward_, \
                               delta_backward_, delta_step_}
DELTA_GPU_OPS_(GPU_MIXER_DELTANET, "deltanet");
DELTA_GPU_OPS_(GPU_MIXER_GATED_DELTANET, "gated_deltanet");
