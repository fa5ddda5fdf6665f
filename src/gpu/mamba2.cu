// The mamba2 mixer's device side (mixers/mamba2.c is the host side and the definition; read it for the equations).
// The same passes over device buffers: in_proj's three slices (z, xBC, dt_raw), the causal conv with its bias
// (gpu/conv.cuh) and silu, dt = softplus(dt_raw + dt_bias) and the engine's inputs (q = C and k = B of the head's
// group, v = dt x, the log-decay g = dt A), the chunked recurrence (gpu/linrec.cuh, a decay per token and head), the
// D skip, the gated RMSNorm (gpu/groupnorm.cuh) and out_proj. As on the host, the backward recomputes u, dt and the
// engine's inputs from the saved conv output and dt_raw.
// The small passes between them are this file's kernels: each element is one thread's, no sums across threads, and
// the per-head parameter gradients (D, A_log, dt_bias) are column sums in a fixed order (gpu/colsum.cuh), so two
// runs give the same bits. The gates are formed in double as on the host (mixers/gates.h, the host's functions).
// mamba2_check_ refuses chunks longer than the engine stages.
#include <math.h>

#include "gpu/activation.cuh"
#include "gpu/colsum.cuh"
#include "gpu/common.cuh"
#include "gpu/conv.cuh"
#include "gpu/groupnorm.cuh"
#include "gpu/linrec.cuh"
#include "gpu/matmul.cuh"
#include "gpu/mixer_gpu.cuh"
#include "gpu/step.cuh"

extern "C" {
#include "mixers/gates.h"
#include "mixers/mamba2.h"
}

static int mamba2_check_(const MixerSpec *s, int l, Err *e) {
    return gpu_refuse_chunked("mamba2", l, ((const Mamba2Opts *)s->opts)->chunk, GPU_LINREC_MAX_L, "recurrence", e);
}

// ----------------------------------------------------------------------------
// layout of the saved activations (mixers/mamba2.h's Mamba2Acts) and of the scratch (mixers/mamba2.c's Mamba2Scratch)

static size_t m2_layout_(const Mamba2Opts *o, int B, int T, float *base, Mamba2Acts *a) {
    size_t BT = (size_t)B * T;
    LinrecDims d = mamba2_dims(o, B, T);
    GpuSlot slots[] = {{&a->z, BT * o->Di},   {&a->xbc, BT * o->CD}, {&a->xc, BT * o->CD},
                       {&a->dtr, BT * o->H},  {&a->y, BT * o->Di},   {&a->rstd, BT * o->G},
                       {&a->yn, BT * o->Di},  {&a->ckpt, gpu_linrec_ckpt_size(&d)}};
    return gpu_take_slots(slots, sizeof slots / sizeof slots[0], base);
}

static size_t mamba2_act_size_(const MixerSpec *s, int B, int T) {
    Mamba2Acts a;
    return m2_layout_((const Mamba2Opts *)s->opts, B, T, NULL, &a);
}

// The scratch: the recurrence's own, the engine's inputs (forward and backward), then the backward's: the host's
// gradients, dgdt (BT,H) = dg dt (A_log's summand) and hsum (Di + H) the column sums of D's and A_log's summands
typedef struct GpuMamba2Scratch {
    float *engine, *u, *dt, *q, *k, *v, *g;
    float *dyn, *dyy, *dz, *dq, *dk, *dv, *dg, *du, *dxc, *dxbc, *ddtr, *dgdt, *hsum;
} GpuMamba2Scratch;

static size_t m2_scratch_layout_(const Mamba2Opts *o, int B, int T, float *base, GpuMamba2Scratch *w) {
    size_t BT = (size_t)B * T, BTHN = BT * o->H * o->N, nI = BT * o->Di, nC = BT * o->CD, nH = BT * o->H;
    LinrecDims d = mamba2_dims(o, B, T);
    GpuSlot slots[] = {{&w->engine, gpu_linrec_scratch_size(&d)},
                       {&w->u, nC},   {&w->dt, nH},   {&w->q, BTHN},  {&w->k, BTHN}, {&w->v, nI},   {&w->g, nH},
                       {&w->dyn, nI}, {&w->dyy, nI},  {&w->dz, nI},   {&w->dq, BTHN}, {&w->dk, BTHN}, {&w->dv, nI},
                       {&w->dg, nH},  {&w->du, nC},   {&w->dxc, nC},  {&w->dxbc, nC}, {&w->ddtr, nH}, {&w->dgdt, nH},
                       {&w->hsum, (size_t)o->Di + o->H}};
    return gpu_take_slots(slots, sizeof slots / sizeof slots[0], base);
}

static size_t mamba2_scratch_size_(const MixerSpec *s, int B, int T) {
    GpuMamba2Scratch w;
    return m2_scratch_layout_((const Mamba2Opts *)s->opts, B, T, NULL, &w);
}

// ----------------------------------------------------------------------------
// the elementwise passes (mixers/mamba2.c's loops, a thread per element, or per token and head)

// Mamba2's sizes as the kernels take them
typedef struct M2Dims_ {
    int H, P, N, G, Di, CD;
} M2Dims_;
static M2Dims_ m2_dims_(const Mamba2Opts *o) { return M2Dims_{o->H, o->P, o->N, o->G, o->Di, o->CD}; }

// per (token, head) i of n: dt = softplus(dt_raw + dt_bias), g = -dt exp(A_log) (in double, dt as the float kept)
__global__ void m2_dt_kernel(float *dt, float *g, const float *dtr, const float *dtb, const float *alog, size_t n,
                             int H) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int h = i % H;
    float d = (float)mixer_softplus((double)dtr[i] + dtb[h]);
    dt[i] = d;
    g[i] = (float)(-(double)d * exp((double)alog[h]));
}

// the engine's q, k (BT,H,N): the C and B of the head's group in u (BT,CD) = [x | B | C]; then v (BT,Di) = dt x.
// A thread per element of q (writing k's too), then per element of v
__global__ void m2_qkv_kernel(float *q, float *k, float *v, const float *u, const float *dt, size_t BT, M2Dims_ m) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, nq = BT * m.H * m.N;
    if (i < nq) {
        size_t r = i / ((size_t)m.H * m.N);
        int h = (int)(i / m.N % m.H), n = (int)(i % m.N), grp = h / (m.H / m.G);
        const float *Bm = u + r * m.CD + m.Di;
        q[i] = Bm[(size_t)m.G * m.N + (size_t)grp * m.N + n];
        k[i] = Bm[(size_t)grp * m.N + n];
        return;
    }
    i -= nq;
    if (i >= BT * m.Di) return;
    size_t r = i / m.Di;
    int c = (int)(i % m.Di);
    v[i] = dt[r * m.H + c / m.P] * u[r * m.CD + c];
}

// y (BT,Di) += D_h x, x the first Di channels of u (BT,CD)
__global__ void m2_skip_kernel(float *y, const float *Dp, const float *u, size_t BT, M2Dims_ m) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= BT * m.Di) return;
    size_t r = i / m.Di;
    int c = (int)(i % m.Di);
    y[i] += Dp[c / m.P] * u[r * m.CD + c];
}

// du (BT,CD) WRITTEN, a thread per element: x's channels D_h dyy + dt dv (the skip's and v = dt x's gradients), B's
// and C's the sums of dk and dq over the group's heads in order; also pd (BT,Di) = dyy x, D's summand
__global__ void m2_du_kernel(float *du, float *pd, const float *dyy, const float *dv, const float *dq, const float *dk,
                             const float *u, const float *dt, const float *Dp, size_t BT, M2Dims_ m) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= BT * m.CD) return;
    size_t r = i / m.CD;
    int c = (int)(i % m.CD);
    if (c < m.Di) {
        size_t ri = r * m.Di + c;
        int h = c / m.P;
        float s = Dp[h] * dyy[ri];
        s += dt[r * m.H + h] * dv[ri];
        du[i] = s;
        pd[ri] = dyy[ri] * u[i];
        return;
    }
    int j = c - m.Di, GN = m.G * m.N, isC = j >= GN, grp = (j % GN) / m.N, n = j % m.N, hpg = m.H / m.G;
    const float *src = isC ? dq : dk;
    float s = 0.0f;
    for (int h = grp * hpg; h < (grp + 1) * hpg; h++) s += src[(r * m.H + h) * m.N + n];
    du[i] = s;
}

// per (token, head) i of n: d dt = dv . x (double) + dg A, d dt_raw = d dt sigmoid(dt_raw + dt_bias); dgdt = dg dt,
// A_log's summand
__global__ void m2_ddt_kernel(float *ddtr, float *dgdt, const float *dv, const float *dg, const float *u,
                              const float *dt, const float *dtr, const float *dtb, const float *alog, size_t n,
                              M2Dims_ m) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t r = i / m.H;
    int h = (int)(i % m.H);
    const float *dvr = dv + r * m.Di + (size_t)h * m.P, *xs = u + r * m.CD + (size_t)h * m.P;
    double s = 0.0;
    for (int p = 0; p < m.P; p++) s += (double)dvr[p] * xs[p];
    double ddt = s + dg[i] * -exp((double)alog[h]);
    ddtr[i] = (float)(ddt * mixer_sigmoid((double)dtr[i] + dtb[h]));
    dgdt[i] = dg[i] * dt[i];
}

// per head: dD_h += the column sums hsum[:Di] of its P channels in order; dA_log_h += A_h hsum[Di + h]
__global__ void m2_head_grads_kernel(float *gD, float *gA, const float *hsum, const float *alog, M2Dims_ m) {
    int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= m.H) return;
    float s = 0.0f;
    for (int p = 0; p < m.P; p++) s += hsum[h * m.P + p];
    gD[h] += s;
    gA[h] += (float)(hsum[m.Di + h] * -exp((double)alog[h]));
}

// ----------------------------------------------------------------------------
// forward, backward

// from the saved conv output and dt_raw: u = silu(conv), dt and the engine's inputs q, k, v, g into w (the forward,
// and the backward's recomputation)
static void m2_front_(const Mixer *m, const Mamba2Acts *a, const GpuMamba2Scratch *w, int B, int T) {
    const Mamba2Opts *o = (const Mamba2Opts *)m->spec->opts;
    size_t BT = (size_t)B * T, nH = BT * o->H;
    M2Dims_ md = m2_dims_(o);
    GPU_LAUNCH(m2_dt_kernel, nH, w->dt, w->g, a->dtr, mixer_param(m, o->k_dt), mixer_param(m, o->k_A), nH, o->H);
    gpu_silu_forward(w->u, a->xc, BT * o->CD);
    GPU_LAUNCH(m2_qkv_kernel, BT * ((size_t)o->H * o->N + o->Di), w->q, w->k, w->v, w->u, w->dt, BT, md);
}

// the forward over B,T; with a state, one token of decoding (T 1): sequence b's state at state + b * n,
// mixers/mamba2.c's layout [the engine's (H, N*P) | the conv's cache (CD, K-1)]
static void mamba2_run_(Mixer *m, float *out, GpuAct x, int B, int T, float *state, size_t n) {
    const Mamba2Opts *o = (const Mamba2Opts *)m->spec->opts;
    int C = m->spec->C, Di = o->Di, CD = o->CD, H = o->H, BT = B * T;
    Mamba2Acts a;
    m2_layout_(o, B, T, m->acts, &a);
    GpuMamba2Scratch w;
    m2_scratch_layout_(o, B, T, m->scratch, &w);
    const float *win = mixer_param(m, o->k_in);
    GPU_TIMED("mamba2.in.forward", {
        gpu_matmul_forward(gpu_f32(a.z), x, win, NULL, BT, C, Di);
        gpu_matmul_forward(gpu_f32(a.xbc), x, win + (size_t)Di * C, NULL, BT, C, CD);
        gpu_matmul_forward(gpu_f32(a.dtr), x, win + (size_t)(Di + CD) * C, NULL, BT, C, H);
    });
    LinrecDims d = mamba2_dims(o, B, T);
    const float *cb = o->conv_bias ? mixer_param(m, o->k_cb) : NULL;
    if (state)
        GPU_TIMED("mamba2.conv", gpu_conv1d_causal_step(a.xc, state + (size_t)H * linrec_state_size(&d), n, a.xbc,
                                                        mixer_param(m, o->k_cw), cb, B, CD, o->K));
    else
        GPU_TIMED("mamba2.conv", gpu_conv1d_causal_forward(a.xc, a.xbc, mixer_param(m, o->k_cw), cb, B, T, CD, o->K));
    GPU_TIMED("mamba2.front", m2_front_(m, &a, &w, B, T));
    if (state) GPU_TIMED("mamba2.step", gpu_linrec_step(a.y, NULL, state, n, w.q, w.k, w.v, w.g, NULL, &d));
    else gpu_linrec_forward(a.y, NULL, a.ckpt, w.q, w.k, w.v, w.g, NULL, w.engine, &d);  // timed per kernel inside
    GPU_TIMED("mamba2.skip", GPU_LAUNCH(m2_skip_kernel, (size_t)BT * Di, a.y, mixer_param(m, o->k_D), w.u, (size_t)BT,
                                        m2_dims_(o)));
    GroupNormOpts gn = mamba2_norm_opts(o);
    GPU_TIMED("mamba2.norm", gpu_groupnorm_forward(a.yn, NULL, a.rstd, a.y, a.z, mixer_param(m, o->k_nw), BT, o->G,
                                                   Di / o->G, &gn));
    GPU_TIMED("mamba2.out.forward",
              gpu_matmul_forward(gpu_f32(out), gpu_f32(a.yn), mixer_param(m, o->k_out), NULL, BT, Di, C));
}

static void mamba2_forward_(Mixer *m, float *out, GpuAct x, int B, int T) { mamba2_run_(m, out, x, B, T, NULL, 0); }

static void mamba2_step_(Mixer *m, float *state, float *out, GpuAct x, int B, int t, int cap) {
    (void)t;
    mamba2_run_(m, out, x, B, 1, state, m->spec->ops->state_size(m->spec, cap));
}

static void mamba2_backward_(Mixer *m, float *dx, const float *dy, GpuAct x, int B, int T) {
    const Mamba2Opts *o = (const Mamba2Opts *)m->spec->opts;
    int C = m->spec->C, Di = o->Di, CD = o->CD, H = o->H, G = o->G, BT = B * T;
    size_t nI = (size_t)BT * Di, nC = (size_t)BT * CD, nH = (size_t)BT * H, BTHN = nH * o->N;
    M2Dims_ md = m2_dims_(o);
    Mamba2Acts a;
    m2_layout_(o, B, T, m->acts, &a);
    GpuMamba2Scratch w;
    m2_scratch_layout_(o, B, T, m->scratch, &w);
    // out = yn W_out^T
    const float *wout = mixer_param(m, o->k_out);
    GPU_TIMED("mamba2.out.backward", gpu_matmul_backward(gpu_f32(w.dyn), mixer_grad(m, o->k_out), NULL, gpu_f32(dy),
                                                         gpu_f32(a.yn), wout, BT, Di, C, 0));
    // yn = groupRMSNorm(y silu(z)) w
    CUDA_CHECK(cudaMemset(w.dyy, 0, nI * sizeof(float)));
    CUDA_CHECK(cudaMemset(w.dz, 0, nI * sizeof(float)));
    GroupNormOpts gn = mamba2_norm_opts(o);
    GPU_TIMED("mamba2.norm", gpu_groupnorm_backward(w.dyy, w.dz, mixer_grad(m, o->k_nw), w.dyn, a.y, a.z,
                                                    mixer_param(m, o->k_nw), NULL, a.rstd, BT, G, Di / G, &gn));
    // the engine's inputs again
    GPU_TIMED("mamba2.front", m2_front_(m, &a, &w, B, T));
    // the scan (its input y = o + D_h x: dyy is the gradient of both)
    CUDA_CHECK(cudaMemset(w.dq, 0, BTHN * sizeof(float)));
    CUDA_CHECK(cudaMemset(w.dk, 0, BTHN * sizeof(float)));
    CUDA_CHECK(cudaMemset(w.dv, 0, nI * sizeof(float)));
    CUDA_CHECK(cudaMemset(w.dg, 0, nH * sizeof(float)));
    LinrecDims d = mamba2_dims(o, B, T);
    gpu_linrec_backward(w.dq, w.dk, w.dv, w.dg, NULL, w.dyy, NULL, a.ckpt, w.q, w.k, w.v, w.g, NULL, w.engine,
                        &d);  // timed per kernel inside
    // v = dt x, y += D_h x, k and q = the group's B and C; dt = softplus(dt_raw + dt_bias), g = dt A; the per-head
    // sums (pd into dyn, free since the norm's backward)
    const float *alog = mixer_param(m, o->k_A), *dtb = mixer_param(m, o->k_dt);
    float *pd = w.dyn;
    GPU_TIMED("mamba2.front.backward", {
        GPU_LAUNCH(m2_du_kernel, nC, w.du, pd, w.dyy, w.dv, w.dq, w.dk, w.u, w.dt, mixer_param(m, o->k_D), (size_t)BT,
                   md);
        GPU_LAUNCH(m2_ddt_kernel, nH, w.ddtr, w.dgdt, w.dv, w.dg, w.u, w.dt, a.dtr, dtb, alog, nH, md);
        CUDA_CHECK(cudaMemset(w.hsum, 0, ((size_t)Di + H) * sizeof(float)));
        gpu_colsum(w.hsum, NULL, gpu_f32(pd), NULL, NULL, NULL, BT, Di, COLSUM_PLAIN);
        gpu_colsum(w.hsum + Di, NULL, gpu_f32(w.dgdt), NULL, NULL, NULL, BT, H, COLSUM_PLAIN);
        gpu_colsum(mixer_grad(m, o->k_dt), NULL, gpu_f32(w.ddtr), NULL, NULL, NULL, BT, H, COLSUM_PLAIN);
        GPU_LAUNCH(m2_head_grads_kernel, H, mixer_grad(m, o->k_D), mixer_grad(m, o->k_A), w.hsum, alog, md);
    });
    // u = silu(xc), xc = conv(xbc)
    GPU_TIMED("mamba2.conv", {
        CUDA_CHECK(cudaMemset(w.dxc, 0, nC * sizeof(float)));
        gpu_silu_backward(w.dxc, a.xc, w.du, nC);
        CUDA_CHECK(cudaMemset(w.dxbc, 0, nC * sizeof(float)));
        gpu_conv1d_causal_backward(w.dxbc, mixer_grad(m, o->k_cw), o->conv_bias ? mixer_grad(m, o->k_cb) : NULL,
                                   w.dxc, a.xbc, mixer_param(m, o->k_cw), B, T, CD, o->K);
    });
    // [z | xBC | dt_raw] = x W_in^T
    const float *win = mixer_param(m, o->k_in);
    float *gwin = mixer_grad(m, o->k_in);
    size_t ox = (size_t)Di * C, od = (size_t)(Di + CD) * C;
    GPU_TIMED("mamba2.in.backward", {
        gpu_matmul_backward(gpu_f32(dx), gwin, NULL, gpu_f32(w.dz), x, win, BT, C, Di, 1);
        gpu_matmul_backward(gpu_f32(dx), gwin + ox, NULL, gpu_f32(w.dxbc), x, win + ox, BT, C, CD, 1);
        gpu_matmul_backward(gpu_f32(dx), gwin + od, NULL, gpu_f32(w.ddtr), x, win + od, BT, C, H, 1);
    });
}

const GpuMixerOps GPU_MIXER_MAMBA2 = {"mamba2", mamba2_check_, mamba2_act_size_, mamba2_scratch_size_,
                                      mamba2_forward_, mamba2_backward_, mamba2_step_};
