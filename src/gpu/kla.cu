// The kla mixer's device side (mixers/kla.c is the host side and the definition; read it for the equations). The same
// passes over device buffers: the input projection to [z | gate], the causal conv with its bias and silu, the sensor
// projection and its columns (v, the log-variance, k, q; the mamba sensors' low-rank variance), the L2 norms of k and
// q (L2NORM_FLOOR), the precision, the discrete dynamics abar, pbar (formed in double as on the host), the
// information-form Kalman scan (gpu/kalman.cuh), the skip and the silu gate, the output projection. The small passes
// are this file's kernels, a thread per element or row; the sums (the skip's gradient, the dynamics' gradients)
// run in a fixed order, so two runs give the same bits.
// kla_check_ refuses more state slots than the scan's kernels take.
#include <math.h>

#include "gpu/activation.cuh"
#include "gpu/colsum.cuh"
#include "gpu/common.cuh"
#include "gpu/conv.cuh"
#include "gpu/kalman.cuh"
#include "gpu/l2norm.cuh"
#include "gpu/matmul.cuh"
#include "gpu/mixer_gpu.cuh"
#include "gpu/step.cuh"

extern "C" {
#include "mixers/gates.h"
#include "mixers/kla.h"
}

static int kla_check_(const MixerSpec *s, int l, Err *e) {
    const KlaOpts *o = (const KlaOpts *)s->opts;
    if (o->S > GPU_KALMAN_MAX_S)
        return err_set(e, "layer %d: kla d_state %d: the GPU's Kalman scan takes up to %d state slots "
                       "(model.mixer.d_state)", l, o->S, GPU_KALMAN_MAX_S);
    return 0;
}

// ----------------------------------------------------------------------------
// layouts (mixers/kla.c's KlaActs and its backward's scratch)

typedef struct GpuKlaActs {
    float *z, *gate;  // (BT,M) the two halves of the input projection
    float *zc, *u;    // (BT,M) conv output, silu of it
    float *sens;      // (BT,Ns) sensor projection
    float *lv;        // (BT,M) log-variance
    float *v;         // (BT,M) plain sensors: the value (mamba: v = u)
    float *k, *q;     // (BT,S) after the optional L2 norm
    float *kn, *qn;   // (BT,) their norms' divisors
    float *prec;      // (BT,M) Lambda^v
    float *ym;        // (BT,M) the scan's mean
    float *ys, *g;    // (BT,M) before the gate, after it
    float *r;         // (BT,R) mamba: the variance's low-rank input (the first R sensor columns)
    float *ckpt;      // the scan's checkpoints
} GpuKlaActs;

static size_t kla_layout_(const KlaOpts *o, int B, int T, float *base, GpuKlaActs *a) {
    size_t BT = (size_t)B * T, BTM = BT * o->M, BTS = BT * o->S;
    GpuSlot slots[] = {{&a->z, BTM},          {&a->gate, o->gate ? BTM : 0}, {&a->zc, BTM},
                       {&a->u, BTM},          {&a->sens, BT * o->Ns},        {&a->lv, BTM},
                       {&a->v, o->mamba ? 0 : BTM}, {&a->k, BTS},            {&a->q, BTS},
                       {&a->kn, BT},          {&a->qn, BT},                  {&a->prec, BTM},
                       {&a->ym, BTM},         {&a->ys, BTM},                 {&a->g, o->gate ? BTM : 0},
                       {&a->r, o->mamba ? BT * o->R : 0},
                       {&a->ckpt, gpu_kalman_ckpt_size(B, T, o->M, o->S, o->chunk)}};
    return gpu_take_slots(slots, sizeof slots / sizeof slots[0], base);
}

static size_t kla_act_size_(const MixerSpec *s, int B, int T) {
    GpuKlaActs a;
    return kla_layout_((const KlaOpts *)s->opts, B, T, NULL, &a);
}

// the scratch: abar, pbar (M,S) (forward and backward); the backward's dg, dys, dv, dprec, du, dz, dgate (BT,M),
// dsens (BT,Ns), dk, dq, dkr, dqr (BT,S), dab, dpb (M,S), rows (BT) the skip's per-row sums, dr (BT,R), the scan's own
typedef struct GpuKlaScratch {
    float *abar, *pbar, *dg, *dys, *dv, *dprec, *du, *dz, *dgate, *dsens, *dk, *dq, *dkr, *dqr, *dab, *dpb, *rows, *dr,
        *scan;
} GpuKlaScratch;

static size_t kla_scratch_layout_(const KlaOpts *o, int B, int T, float *base, GpuKlaScratch *s) {
    size_t BT = (size_t)B * T, BTM = BT * o->M, BTS = BT * o->S, MS = (size_t)o->M * o->S;
    GpuSlot slots[] = {{&s->abar, MS},  {&s->pbar, MS},  {&s->dg, BTM},   {&s->dys, BTM},        {&s->dv, BTM},
                       {&s->dprec, BTM}, {&s->du, BTM},  {&s->dz, BTM},   {&s->dgate, BTM},      {&s->dsens, BT * o->Ns},
                       {&s->dk, BTS},   {&s->dq, BTS},   {&s->dkr, BTS},  {&s->dqr, BTS},        {&s->dab, MS},
                       {&s->dpb, MS},   {&s->rows, BT},  {&s->dr, o->mamba ? BT * o->R : 0},
                       {&s->scan, gpu_kalman_scratch_size(B, T, o->M, o->S, o->chunk)}};
    return gpu_take_slots(slots, sizeof slots / sizeof slots[0], base);
}

static size_t kla_scratch_size_(const MixerSpec *s, int B, int T) {
    GpuKlaScratch sc;
    return kla_scratch_layout_((const KlaOpts *)s->opts, B, T, NULL, &sc);
}

// ----------------------------------------------------------------------------
// the elementwise passes (mixers/kla.c's loops)

// dst (N,W) = the columns [off, off + W) of src (N,ld); put: the other way (dst's columns written from src (N,W))
__global__ void kla_cols_kernel(float *dst, const float *src, size_t N, int ld, int off, int W, int put) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= N * W) return;
    size_t i = e / W, at = i * ld + off + e % W;
    if (put) dst[at] = src[e];
    else dst[e] = src[at];
}
// prec (n,) = 1 / (softplus(lv) + vmin), in double
__global__ void kla_prec_kernel(float *prec, const float *lv, size_t n, double vmin) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) prec[i] = (float)(1.0 / (mixer_softplus(lv[i]) + vmin));
}
// its backward in place: dprec (n,) <- d lv = -dprec prec^2 sigmoid(lv)
__global__ void kla_prec_backward_kernel(float *dprec, const float *prec, const float *lv, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dprec[i] = (float)(-(double)dprec[i] * prec[i] * prec[i] * mixer_sigmoid(lv[i]));
}
// the discrete dynamics abar, pbar (M,S) from lambda_log, delta and the process noise (NULL: pbar = 0), a thread per
// element (mixers/kla.h's kla_dynamics_one, the host's function)
__global__ void kla_dynamics_kernel(float *abar, float *pbar, const float *lam, const float *dt, const float *praw,
                                    size_t n, double p_min, int zoh) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) kla_dynamics_one(abar + i, pbar + i, lam[i], dt[i], praw ? praw[i] : 0.0f, praw != NULL, p_min, zoh);
}
// dabar, dpbar (M,S) back to lambda_log, delta, the process noise (gradients +=), a thread per element
__global__ void kla_dynamics_backward_kernel(float *glam, float *gdt, float *gp, const float *dabar, const float *dpbar,
                                             const float *lam, const float *dt, const float *praw, size_t n,
                                             double p_min, int zoh) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    float sink = 0.0f;
    if (i < n)
        kla_dynamics_one_backward(glam + i, gdt + i, gp ? gp + i : &sink, dabar[i], dpbar[i], lam[i], dt[i],
                                  praw ? praw[i] : 0.0f, praw != NULL, p_min, zoh);
}
// ys (n,) = ym + lambda_skip u (skip: the one learned scalar, on the device; NULL: none)
__global__ void kla_skip_kernel(float *ys, const float *ym, const float *u, const float *skip, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) ys[i] = ym[i] + (skip ? skip[0] : 0.0f) * u[i];
}
// out (n,) *= b (n,)
__global__ void kla_mul_kernel(float *out, const float *b, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] *= b[i];
}
// the gate's backward: sg holds silu(gate) on entry; dys = dg sg, dg <- dg ys
__global__ void kla_gate_backward_kernel(float *dys, float *dg, const float *sg, const float *ys, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    dys[i] = dg[i] * sg[i];
    dg[i] *= ys[i];
}
// the skip's gradient: rows (BT,) = sum over the row's M channels of dys u (double, in order); du = lambda_skip dys
__global__ void kla_skip_rows_kernel(float *rows, float *du, const float *dys, const float *u, const float *skip,
                                     size_t BT, int M) {
    size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= BT) return;
    double s = 0.0;
    float l = skip ? skip[0] : 0.0f;
    for (int c = 0; c < M; c++) {
        size_t i = r * M + c;
        if (skip) s += (double)dys[i] * u[i];
        du[i] = l * dys[i];
    }
    rows[r] = (float)s;
}
// out (n,) += a (n,)
__global__ void kla_add_kernel(float *out, const float *a, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] += a[i];
}

// ----------------------------------------------------------------------------
// forward, backward, decoding

static void kla_cols_(float *dst, const float *src, size_t N, int ld, int off, int W, int put) {
    GPU_LAUNCH(kla_cols_kernel, N * W, dst, src, N, ld, off, W, put);
}

static void kla_dynamics_(const Mixer *m, float *abar, float *pbar) {
    const KlaOpts *o = (const KlaOpts *)m->spec->opts;
    size_t n = (size_t)o->M * o->S;
    GPU_LAUNCH(kla_dynamics_kernel, n, abar, pbar, mixer_param(m, o->k_lam), mixer_param(m, o->k_dt),
               o->process_noise ? mixer_param(m, o->k_p) : NULL, n, o->p_min, o->zoh);
}

// the forward over B,T; with a state, one token of decoding (T 1): sequence b's state at state + b * n, the host's
// layout [Kalman state (M,2,S) | conv state (M,K-1)]
static void kla_run_(Mixer *m, float *y, GpuAct x, int B, int T, float *state, size_t n) {
    const KlaOpts *o = (const KlaOpts *)m->spec->opts;
    int C = m->spec->C, M = o->M, S = o->S, Ns = o->Ns, BT = B * T, off = o->mamba ? o->R : 2 * M;
    size_t BTM = (size_t)BT * M;
    GpuKlaActs a;
    kla_layout_(o, B, T, m->acts, &a);
    GpuKlaScratch sc;
    kla_scratch_layout_(o, B, T, m->scratch, &sc);
    const float *win = mixer_param(m, o->k_in), *cw = mixer_param(m, o->k_cw), *cb = mixer_param(m, o->k_cb);
    GPU_TIMED("kla.in.forward", {
        gpu_matmul_forward(gpu_f32(a.z), x, win, NULL, BT, C, M);
        if (o->gate) gpu_matmul_forward(gpu_f32(a.gate), x, win + (size_t)M * C, NULL, BT, C, M);
        if (state) gpu_conv1d_causal_step(a.zc, state + (size_t)M * 2 * S, n, a.z, cw, cb, B, M, o->K);
        else gpu_conv1d_causal_forward(a.zc, a.z, cw, cb, B, T, M, o->K);
        gpu_silu_forward(a.u, a.zc, BTM);
    });
    GPU_TIMED("kla.sensors", {
        gpu_matmul_forward(gpu_f32(a.sens), gpu_f32(a.u), mixer_param(m, o->k_sens), NULL, BT, M, Ns);
        if (o->mamba) {  // lv = r W_ve^T + b_ve, r the first R sensor columns
            kla_cols_(a.r, a.sens, BT, Ns, 0, o->R, 0);
            gpu_matmul_forward(gpu_f32(a.lv), gpu_f32(a.r), mixer_param(m, o->k_ve), mixer_param(m, o->k_veb), BT,
                               o->R, M);
        } else {
            kla_cols_(a.v, a.sens, BT, Ns, 0, M, 0);
            kla_cols_(a.lv, a.sens, BT, Ns, M, M, 0);
        }
        kla_cols_(a.k, a.sens, BT, Ns, off, S, 0);
        kla_cols_(a.q, a.sens, BT, Ns, off + S, S, 0);
        if (o->qk_norm) {
            gpu_l2norm_forward(a.k, a.kn, a.k, BT, S, KLA_NORM_EPS, L2NORM_FLOOR);
            gpu_l2norm_forward(a.q, a.qn, a.q, BT, S, KLA_NORM_EPS, L2NORM_FLOOR);
        }
        GPU_LAUNCH(kla_prec_kernel, BTM, a.prec, a.lv, BTM, o->obs_var_min);
        kla_dynamics_(m, sc.abar, sc.pbar);
    });
    const float *v = o->mamba ? a.u : a.v;
    if (state)
        GPU_TIMED("kla.step", gpu_kalman_step(a.ym, NULL, state, n, v, a.prec, a.k, a.q, sc.abar, sc.pbar, B, M, S));
    else
        GPU_TIMED("kla.scan.forward", gpu_kalman_scan_forward(a.ym, NULL, a.ckpt, v, a.prec, a.k, a.q, sc.abar,
                                                              sc.pbar, B, T, M, S, o->chunk));
    GPU_TIMED("kla.out.forward", {
        GPU_LAUNCH(kla_skip_kernel, BTM, a.ys, a.ym, a.u, o->skip ? mixer_param(m, o->k_skip) : NULL, BTM);
        if (o->gate) {
            gpu_silu_forward(a.g, a.gate, BTM);
            GPU_LAUNCH(kla_mul_kernel, BTM, a.g, a.ys, BTM);
        }
        gpu_matmul_forward(gpu_f32(y), gpu_f32(o->gate ? a.g : a.ys), mixer_param(m, o->k_out), NULL, BT, M, C);
    });
}

static void kla_forward_(Mixer *m, float *y, GpuAct x, int B, int T) { kla_run_(m, y, x, B, T, NULL, 0); }

static void kla_step_(Mixer *m, float *state, float *y, GpuAct x, int B, int t, int cap) {
    (void)t;
    kla_run_(m, y, x, B, 1, state, m->spec->ops->state_size(m->spec, cap));
}

static void kla_backward_(Mixer *m, float *dx, const float *dy, GpuAct x, int B, int T) {
    const KlaOpts *o = (const KlaOpts *)m->spec->opts;
    int C = m->spec->C, M = o->M, S = o->S, Ns = o->Ns, BT = B * T, off = o->mamba ? o->R : 2 * M;
    size_t BTM = (size_t)BT * M, BTS = (size_t)BT * S, MS = (size_t)M * S;
    GpuKlaActs a;
    kla_layout_(o, B, T, m->acts, &a);
    GpuKlaScratch s;
    kla_scratch_layout_(o, B, T, m->scratch, &s);
    const float *skip = o->skip ? mixer_param(m, o->k_skip) : NULL;
    // out = g W_out^T, g = ys silu(gate)
    GPU_TIMED("kla.out.backward", {
        const float *wout = mixer_param(m, o->k_out);
        gpu_matmul_backward(gpu_f32(s.dg), mixer_grad(m, o->k_out), NULL, gpu_f32(dy),
                            gpu_f32(o->gate ? a.g : a.ys), wout, BT, M, C, 0);
        if (o->gate) {  // dys = dg silu(gate); d gate = silu'(gate) (dg ys)
            gpu_silu_forward(s.dv, a.gate, BTM);
            GPU_LAUNCH(kla_gate_backward_kernel, BTM, s.dys, s.dg, s.dv, a.ys, BTM);
            CUDA_CHECK(cudaMemset(s.dgate, 0, BTM * sizeof(float)));
            gpu_silu_backward(s.dgate, a.gate, s.dg, BTM);
        } else CUDA_CHECK(cudaMemcpy(s.dys, s.dg, BTM * sizeof(float), cudaMemcpyDeviceToDevice));
        // ys = ym + lambda_skip u
        GPU_LAUNCH(kla_skip_rows_kernel, BT, s.rows, s.du, s.dys, a.u, skip, BT, M);
        if (o->skip)  // the rows' sum, a column sum in a fixed order
            gpu_colsum(mixer_grad(m, o->k_skip), NULL, gpu_f32(s.rows), NULL, NULL, NULL, BT, 1, COLSUM_PLAIN);
    });
    // the scan
    GPU_TIMED("kla.scan.backward", {
        kla_dynamics_(m, s.abar, s.pbar);
        CUDA_CHECK(cudaMemset(s.dv, 0, BTM * sizeof(float)));
        CUDA_CHECK(cudaMemset(s.dprec, 0, BTM * sizeof(float)));
        CUDA_CHECK(cudaMemset(s.dk, 0, BTS * sizeof(float)));
        CUDA_CHECK(cudaMemset(s.dq, 0, BTS * sizeof(float)));
        CUDA_CHECK(cudaMemset(s.dab, 0, MS * sizeof(float)));
        CUDA_CHECK(cudaMemset(s.dpb, 0, MS * sizeof(float)));
        gpu_kalman_scan_backward(s.dv, s.dprec, s.dk, s.dq, s.dab, s.dpb, s.dys, NULL, a.ckpt, o->mamba ? a.u : a.v,
                                 a.prec, a.k, a.q, s.abar, s.pbar, B, T, M, S, o->chunk, s.scan);
        GPU_LAUNCH(kla_dynamics_backward_kernel, MS, mixer_grad(m, o->k_lam), mixer_grad(m, o->k_dt),
                   o->process_noise ? mixer_grad(m, o->k_p) : NULL, s.dab, s.dpb, mixer_param(m, o->k_lam),
                   mixer_param(m, o->k_dt), o->process_noise ? mixer_param(m, o->k_p) : NULL, MS, o->p_min, o->zoh);
    });
    GPU_TIMED("kla.sensors", {
        GPU_LAUNCH(kla_prec_backward_kernel, BTM, s.dprec, a.prec, a.lv, BTM);  // dprec <- d lv
        CUDA_CHECK(cudaMemset(s.dsens, 0, (size_t)BT * Ns * sizeof(float)));
        if (o->mamba) {  // lv = r W_ve^T + b_ve; v = u
            gpu_matmul_backward(gpu_f32(s.dr), mixer_grad(m, o->k_ve), mixer_grad(m, o->k_veb), gpu_f32(s.dprec),
                                gpu_f32(a.r), mixer_param(m, o->k_ve), BT, o->R, M, 0);
            kla_cols_(s.dsens, s.dr, BT, Ns, 0, o->R, 1);
            GPU_LAUNCH(kla_add_kernel, BTM, s.du, s.dv, BTM);
        } else {
            kla_cols_(s.dsens, s.dv, BT, Ns, 0, M, 1);
            kla_cols_(s.dsens, s.dprec, BT, Ns, M, M, 1);
        }
        const float *dkr = s.dk, *dqr = s.dq;
        if (o->qk_norm) {
            CUDA_CHECK(cudaMemset(s.dkr, 0, BTS * sizeof(float)));
            CUDA_CHECK(cudaMemset(s.dqr, 0, BTS * sizeof(float)));
            gpu_l2norm_backward(s.dkr, s.dk, a.k, a.kn, BT, S, KLA_NORM_EPS, L2NORM_FLOOR);
            gpu_l2norm_backward(s.dqr, s.dq, a.q, a.qn, BT, S, KLA_NORM_EPS, L2NORM_FLOOR);
            dkr = s.dkr, dqr = s.dqr;
        }
        kla_cols_(s.dsens, dkr, BT, Ns, off, S, 1);
        kla_cols_(s.dsens, dqr, BT, Ns, off + S, S, 1);
        // sens = u W_s^T
        gpu_matmul_backward(gpu_f32(s.du), mixer_grad(m, o->k_sens), NULL, gpu_f32(s.dsens), gpu_f32(a.u),
                            mixer_param(m, o->k_sens), BT, M, Ns, 1);
    });
    GPU_TIMED("kla.in.backward", {
        // u = silu(zc), zc = conv(z) + b
        CUDA_CHECK(cudaMemset(s.dv, 0, BTM * sizeof(float)));
        gpu_silu_backward(s.dv, a.zc, s.du, BTM);
        CUDA_CHECK(cudaMemset(s.dz, 0, BTM * sizeof(float)));
        gpu_conv1d_causal_backward(s.dz, mixer_grad(m, o->k_cw), mixer_grad(m, o->k_cb), s.dv, a.z,
                                   mixer_param(m, o->k_cw), B, T, M, o->K);
        // [z | gate] = x W_in^T
        const float *win = mixer_param(m, o->k_in);
        float *gwin = mixer_grad(m, o->k_in);
        gpu_matmul_backward(gpu_f32(dx), gwin, NULL, gpu_f32(s.dz), x, win, BT, C, M, 1);
        if (o->gate)
            gpu_matmul_backward(gpu_f32(dx), gwin + (size_t)M * C, NULL, gpu_f32(s.dgate), x, win + (size_t)M * C, BT,
                                C, M, 1);
    });
}

const GpuMixerOps GPU_MIXER_KLA = {"kla", kla_check_, kla_act_size_, kla_scratch_size_, kla_forward_, kla_backward_,
                                   kla_step_};
