// The gsa mixer's device side (mixers/gsa.c is the host side and the definition; read it for the equations): the
// q, k, v streams (gpu/shortconv.cuh), the feature maps, the slots' forget gate f and write weight s = 1 - e^f,
// pass 1 of the recurrence (keys -> slots, the value-channel decay), the softmax over the M slots, pass 2 (slots ->
// values, the per-channel decay), silu, the RMSNorm over all H D channels and the output projection. The two passes
// run on gpu/linrec.cuh's engine, the softmax on gpu/slots.cuh's; the gates and their gradients are this file's
// kernels (a thread per element, in the host's order), so two runs give the same bits.
// gsa_check_ refuses chunks longer than the engine stages.
#include <math.h>

#include "gpu/activation.cuh"
#include "gpu/common.cuh"
#include "gpu/groupnorm.cuh"
#include "gpu/linrec.cuh"
#include "gpu/matmul.cuh"
#include "gpu/mixer_gpu.cuh"
#include "gpu/step.cuh"
#include "gpu/shortconv.cuh"
#include "gpu/slots.cuh"

extern "C" {
#include "mixers/gates.h"
#include "mixers/gsa.h"
}

static int gsa_check_(const MixerSpec *s, int l, Err *e) {
    const GsaOpts *o = (const GsaOpts *)s->opts;
    return gpu_refuse_chunked("gsa", l, o->chunk, GPU_LINREC_MAX_L, "recurrence", e);
}

// ----------------------------------------------------------------------------
// layout of the saved activations (mixers/gsa.c's GsaActs) and of the scratch

typedef struct GpuGsaActs {
    float *pq, *pk, *pv;        // (BT,HD) conv: the projections, the convs' inputs
    float *cq, *ck, *cv;        // (BT,HD) conv: the convs' outputs, silu's inputs
    float *qpre, *kpre, *vpre;  // (BT,HD) the streams
    float *q, *k, *v;           // (BT,HD) phi(q), phi(k) (the streams with the identity map), silu(v): what the
                                // passes read
    float *fpre, *f, *s;        // (BT,HM) f_proj x, the log forget gate, the write weight 1 - exp(f)
    float *p;                   // (BT,HM) the slot weights softmax(ok)
    float *o, *so;              // (BT,HD) pass 2's output and silu(o)
    float *rstd;                // (BT,) the norm's statistic
    float *yn;                  // (BT,HD) o_proj's input (norm)
    float *ckpt1, *ckpt2;       // the passes' chunk states
} GpuGsaActs;

static size_t gsa_layout_(const GsaOpts *o, int B, int T, float *base, GpuGsaActs *a) {
    size_t BT = (size_t)B * T, nD = BT * o->HD, nM = BT * o->HM, cv = o->K > 0, nm = o->norm != 0;
    size_t fm = o->fmap != GSA_FMAP_IDENTITY;  // the identity map reads the streams themselves
    LinrecDims d1 = gsa_dims(o, 1, B, T), d2 = gsa_dims(o, 2, B, T);
    GpuSlot slots[] = {{&a->pq, cv * nD},   {&a->pk, cv * nD},   {&a->pv, cv * nD}, {&a->cq, cv * nD},
                       {&a->ck, cv * nD},   {&a->cv, cv * nD},   {&a->qpre, nD},    {&a->kpre, nD},
                       {&a->vpre, nD},      {&a->q, fm * nD},    {&a->k, fm * nD},  {&a->v, nD},
                       {&a->fpre, nM},      {&a->f, nM},         {&a->s, nM},       {&a->p, nM},
                       {&a->o, nD},         {&a->so, nD},        {&a->rstd, nm * BT}, {&a->yn, nm * nD},
                       {&a->ckpt1, gpu_linrec_ckpt_size(&d1)}, {&a->ckpt2, gpu_linrec_ckpt_size(&d2)}};
    size_t n = gpu_take_slots(slots, sizeof slots / sizeof slots[0], base);
    if (!fm) a->q = a->qpre, a->k = a->kpre;
    return n;
}

static size_t gsa_act_size_(const MixerSpec *s, int B, int T) {
    GpuGsaActs a;
    return gsa_layout_((const GsaOpts *)s->opts, B, T, NULL, &a);
}

// The scratch: the engine's (the larger of the two passes'), the forward's ok (BT,HM), and the backward's dyn,
// dso, dO, dq, dk, dv (BT,HD); dp, dok, ds, df (BT,HM); dpre (BT, the wider of HD and HM)
typedef struct GpuGsaScratch {
    float *engine, *ok, *dyn, *dso, *dO, *dq, *dk, *dv, *dp, *dok, *ds, *df, *dpre;
} GpuGsaScratch;

static size_t scratch_layout_(const GsaOpts *o, int B, int T, float *base, GpuGsaScratch *s) {
    size_t BT = (size_t)B * T, nD = BT * o->HD, nM = BT * o->HM, w = nD > nM ? nD : nM;
    LinrecDims d1 = gsa_dims(o, 1, B, T), d2 = gsa_dims(o, 2, B, T);
    size_t e1 = gpu_linrec_scratch_size(&d1), e2 = gpu_linrec_scratch_size(&d2);
    GpuSlot slots[] = {{&s->engine, e1 > e2 ? e1 : e2}, {&s->ok, nM},  {&s->dyn, nD}, {&s->dso, nD}, {&s->dO, nD},
                       {&s->dq, nD}, {&s->dk, nD}, {&s->dv, nD}, {&s->dp, nM}, {&s->dok, nM}, {&s->ds, nM},
                       {&s->df, nM}, {&s->dpre, w}};
    return gpu_take_slots(slots, sizeof slots / sizeof slots[0], base);
}

static size_t gsa_scratch_size_(const MixerSpec *s, int B, int T) {
    GpuGsaScratch sc;
    return scratch_layout_((const GsaOpts *)s->opts, B, T, NULL, &sc);
}

// ----------------------------------------------------------------------------
// kernels

// f = logsigmoid(fpre) / normalizer and s = 1 - exp(f) = -expm1(f) (n,), in double as the host
__global__ void gsa_gates_kernel(float *f, float *s, const float *fpre, size_t n, double inv) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double fi = mixer_logsigmoid((double)fpre[i]) * inv;
    f[i] = (float)fi;
    s[i] = (float)-expm1(fi);
}

// dpre (n,) = (df + (s - 1) ds) sigmoid(-fpre) / normalizer: s = 1 - e^f passes -e^f ds to f, then the log-sigmoid
__global__ void gsa_gates_backward_kernel(float *dpre, const float *df, const float *ds, const float *s,
                                          const float *fpre, size_t n, double inv) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double dfi = (double)df[i] + ((double)s[i] - 1.0) * ds[i];
    dpre[i] = (float)(dfi * inv * mixer_sigmoid(-(double)fpre[i]));
}

// ----------------------------------------------------------------------------
// forward, backward

static GroupNormOpts gsa_norm_opts_(const GsaOpts *o) {
    return GroupNormOpts{GROUPNORM_GATE_NONE, 0, 1, (float)o->norm_eps};
}

// q or k = phi(pre) (n,); nothing for the identity map (q, k are the streams: gsa_layout_)
static void gsa_fmap_(const GsaOpts *o, float *out, const float *in, size_t n) {
    if (o->fmap == GSA_FMAP_SWISH) gpu_silu_forward(out, in, n);
    else if (o->fmap == GSA_FMAP_RELU) gpu_relu_forward(out, in, n);
}

// the forward over B,T; with a state, one token of decoding (T 1): sequence b's state at state + b * n,
// mixers/gsa.c's layout [pass 1's (H, D*M) | pass 2's (H, M*D) | the conv caches of q, k, v]
static void gsa_run_(Mixer *m, float *y, GpuAct x, int B, int T, float *state, size_t n) {
    const GsaOpts *o = (const GsaOpts *)m->spec->opts;
    int C = m->spec->C, BT = B * T;
    size_t nD = (size_t)BT * o->HD, nM = (size_t)BT * o->HM, R = (size_t)BT * o->H;
    size_t half = (size_t)o->H * o->M * o->D, K1 = o->K ? (size_t)o->K - 1 : 0;
    GpuGsaActs a;
    gsa_layout_(o, B, T, m->acts, &a);
    GpuGsaScratch s;
    scratch_layout_(o, B, T, m->scratch, &s);
    float *cs = state ? state + 2 * half : NULL;
    GPU_TIMED("gsa.qkv.forward", {
        gpu_shortconv_forward(m, o->k_q, o->k_cq, o->K, 0, a.qpre, a.cq, a.pq, x, B, T, o->HD, cs, n);
        gpu_shortconv_forward(m, o->k_k, o->k_ck, o->K, 0, a.kpre, a.ck, a.pk, x, B, T, o->HD,
                              cs ? cs + (size_t)o->HD * K1 : NULL, n);
        gpu_shortconv_forward(m, o->k_v, o->k_cv, o->K, 0, a.vpre, a.cv, a.pv, x, B, T, o->HD,
                              cs ? cs + (size_t)2 * o->HD * K1 : NULL, n);
        gsa_fmap_(o, a.q, a.qpre, nD);
        gsa_fmap_(o, a.k, a.kpre, nD);
        gpu_silu_forward(a.v, a.vpre, nD);
    });
    GPU_TIMED("gsa.gate", {
        gpu_matmul_forward(gpu_f32(a.fpre), x, mixer_param(m, o->k_f), NULL, BT, C, o->HM);
        GPU_LAUNCH(gsa_gates_kernel, nM, a.f, a.s, a.fpre, nM, 1.0 / o->gate_logit_normalizer);
    });
    LinrecDims d1 = gsa_dims(o, 1, B, T), d2 = gsa_dims(o, 2, B, T);
    if (state) GPU_TIMED("gsa.step", gpu_linrec_step(s.ok, NULL, state, n, a.q, a.k, a.s, a.f, NULL, &d1));
    else gpu_linrec_forward(s.ok, NULL, a.ckpt1, a.q, a.k, a.s, a.f, NULL, s.engine, &d1);  // timed per kernel inside
    GPU_TIMED("gsa.softmax", {
        gpu_slot_softmax(a.p, s.ok, R, o->M, 1, 1, 0, 0.0);
    });
    if (state) GPU_TIMED("gsa.step", gpu_linrec_step(a.o, NULL, state + half, n, a.p, a.s, a.v, a.f, NULL, &d2));
    else gpu_linrec_forward(a.o, NULL, a.ckpt2, a.p, a.s, a.v, a.f, NULL, s.engine, &d2);
    GPU_TIMED("gsa.out.forward", {
        gpu_silu_forward(a.so, a.o, nD);
        GroupNormOpts gn = gsa_norm_opts_(o);
        if (o->norm) gpu_groupnorm_forward(a.yn, NULL, a.rstd, a.so, NULL, mixer_param(m, o->k_norm), BT, 1, o->HD, &gn);
        gpu_matmul_forward(gpu_f32(y), gpu_f32(o->norm ? a.yn : a.so), mixer_param(m, o->k_o), NULL, BT, o->HD, C);
    });
}

static void gsa_forward_(Mixer *m, float *y, GpuAct x, int B, int T) { gsa_run_(m, y, x, B, T, NULL, 0); }

static void gsa_step_(Mixer *m, float *state, float *y, GpuAct x, int B, int t, int cap) {
    (void)t;
    gsa_run_(m, y, x, B, 1, state, m->spec->ops->state_size(m->spec, cap));
}

static void gsa_backward_(Mixer *m, float *dx, const float *dy, GpuAct x, int B, int T) {
    const GsaOpts *o = (const GsaOpts *)m->spec->opts;
    int C = m->spec->C, BT = B * T;
    size_t nD = (size_t)BT * o->HD, nM = (size_t)BT * o->HM, R = (size_t)BT * o->H;
    GpuGsaActs a;
    gsa_layout_(o, B, T, m->acts, &a);
    GpuGsaScratch s;
    scratch_layout_(o, B, T, m->scratch, &s);
    // y = yn W_o^T (yn = so without the norm); yn = RMSNorm(so); so = silu(o)
    const float *dsov = s.dyn;
    GPU_TIMED("gsa.out.backward", {
        gpu_matmul_backward(gpu_f32(s.dyn), mixer_grad(m, o->k_o), NULL, gpu_f32(dy), gpu_f32(o->norm ? a.yn : a.so),
                            mixer_param(m, o->k_o), BT, o->HD, C, 0);
        if (o->norm) {
            CUDA_CHECK(cudaMemset(s.dso, 0, nD * sizeof(float)));
            GroupNormOpts gn = gsa_norm_opts_(o);
            gpu_groupnorm_backward(s.dso, NULL, mixer_grad(m, o->k_norm), s.dyn, a.so, NULL, mixer_param(m, o->k_norm),
                                   NULL, a.rstd, BT, 1, o->HD, &gn);
            dsov = s.dso;
        }
        CUDA_CHECK(cudaMemset(s.dO, 0, nD * sizeof(float)));
        gpu_silu_backward(s.dO, a.o, dsov, nD);
    });
    // pass 2: o = Hv^T p with Hv fed by s, v and decayed by f
    CUDA_CHECK(cudaMemset(s.dp, 0, nM * sizeof(float)));
    CUDA_CHECK(cudaMemset(s.ds, 0, nM * sizeof(float)));
    CUDA_CHECK(cudaMemset(s.df, 0, nM * sizeof(float)));
    CUDA_CHECK(cudaMemset(s.dv, 0, nD * sizeof(float)));
    LinrecDims d1 = gsa_dims(o, 1, B, T), d2 = gsa_dims(o, 2, B, T);
    gpu_linrec_backward(s.dp, s.ds, s.dv, s.df, NULL, s.dO, NULL, a.ckpt2, a.p, a.s, a.v, a.f, NULL, s.engine, &d2);
    GPU_TIMED("gsa.softmax", {
        gpu_slot_softmax_backward(s.dok, a.p, s.dp, R, o->M);
    });
    // pass 1: ok = Hk^T q with Hk fed by k, s and decayed (on the slot side) by f
    CUDA_CHECK(cudaMemset(s.dq, 0, nD * sizeof(float)));
    CUDA_CHECK(cudaMemset(s.dk, 0, nD * sizeof(float)));
    gpu_linrec_backward(s.dq, s.dk, s.ds, s.df, NULL, s.dok, NULL, a.ckpt1, a.q, a.k, a.s, a.f, NULL, s.engine, &d1);
    GPU_TIMED("gsa.gate", {
        GPU_LAUNCH(gsa_gates_backward_kernel, nM, s.dpre, s.df, s.ds, a.s, a.fpre, nM, 1.0 / o->gate_logit_normalizer);
        gpu_matmul_backward(gpu_f32(dx), mixer_grad(m, o->k_f), NULL, gpu_f32(s.dpre), x, mixer_param(m, o->k_f), BT,
                            C, o->HM, 1);
    });
    // v = silu(vpre); q, k = phi(qpre), phi(kpre); then the streams back to x (dyn and dso are free since the norm's
    // backward)
    GPU_TIMED("gsa.qkv.backward", {
        CUDA_CHECK(cudaMemset(s.dpre, 0, nD * sizeof(float)));
        gpu_silu_backward(s.dpre, a.vpre, s.dv, nD);
        gpu_shortconv_backward(m, o->k_v, o->k_cv, o->K, 0, dx, s.dyn, s.dso, s.dpre, a.cv, a.pv, x, B, T, o->HD);
        const float *pre[2] = {a.qpre, a.kpre}, *cc[2] = {a.cq, a.ck}, *pp[2] = {a.pq, a.pk};
        float *dphi[2] = {s.dq, s.dk};
        int kp[2] = {o->k_q, o->k_k}, kc[2] = {o->k_cq, o->k_ck};
        for (int i = 0; i < 2; i++) {
            const float *dpp = dphi[i];
            if (o->fmap != GSA_FMAP_IDENTITY) {
                CUDA_CHECK(cudaMemset(s.dpre, 0, nD * sizeof(float)));
                if (o->fmap == GSA_FMAP_SWISH) gpu_silu_backward(s.dpre, pre[i], dphi[i], nD);
                else gpu_relu_backward(s.dpre, pre[i], dphi[i], nD);
                dpp = s.dpre;
            }
            gpu_shortconv_backward(m, kp[i], kc[i], o->K, 0, dx, s.dyn, s.dso, dpp, cc[i], pp[i], x, B, T, o->HD);
        }
    });
}

const GpuMixerOps GPU_MIXER_GSA = {"gsa", gsa_check_, gsa_act_size_, gsa_scratch_size_, gsa_forward_, gsa_backward_,
                                   gsa_step_};
