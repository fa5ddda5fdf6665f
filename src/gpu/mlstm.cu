// The mlstm mixer's device side (mixers/mlstm.c is the host side and the definition; read it for the equations).
// The same passes over device buffers: proj_up's two halves, the causal conv with its bias (gpu/conv.cuh) and silu,
// the block-diagonal q, k, v (gpu/blockdiag.cuh), v's column of ones, the input and forget gates, the stabilised
// recurrence (gpu/linrec.cuh with gated_in), the normaliser max(|q.n|, exp(-m)), the per-head LayerNorm
// (gpu/groupnorm.cuh), the skip, the silu(z) gate and proj_down.
// The gates: the host multiplies [q | k | v] by each gate's weight as three matrices (v's with a zero in each head's
// ones column, so it takes the augmented v); here both gates are one matmul of the rows [q | k | v~] (BT, 2I + H(D+1))
// by the two gates' weights laid out the same way (2H, 2I + H(D+1)), built on the device from the parameters each
// step. The same sums in another order: fp32 rounding apart, the host's numbers.
// The small passes between them are this file's kernels: each element is one thread's, no sums across threads, and
// the skip's gradient is a column sum in a fixed order (gpu/colsum.cuh), so two runs give the same bits; the
// normaliser and the gates are formed in double as on the host (mixers/gates.h, the host's functions).
// mlstm_check_ refuses chunks longer than the engine stages.
#include <math.h>

#include "gpu/activation.cuh"
#include "gpu/blockdiag.cuh"
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
#include "mixers/mlstm.h"
}

static int mlstm_check_(const MixerSpec *s, int l, Err *e) {
    return gpu_refuse_chunked("mlstm", l, ((const MlstmOpts *)s->opts)->chunk, GPU_LINREC_MAX_L, "recurrence", e);
}

// ----------------------------------------------------------------------------
// layout of the saved activations (mixers/mlstm.h's MlstmActs) and of the scratch

static size_t ml_layout_(const MlstmOpts *o, int B, int T, float *base, MlstmActs *a) {
    size_t BT = (size_t)B * T, BTI = BT * o->I, BTH = BT * o->H, BTA = BTH * o->Dv, cv = o->K > 0;
    LinrecDims d = mlstm_dims(o, B, T);
    GpuSlot slots[] = {{&a->xm, BTI},  {&a->z, BTI},    {&a->xcp, cv * BTI}, {&a->xc, cv * BTI}, {&a->q, BTI},
                       {&a->k, BTI},   {&a->v, BTA},    {&a->ipre, BTH},     {&a->fpre, BTH},    {&a->lf, BTH},
                       {&a->o, BTA},   {&a->mm, BTH},   {&a->h, BTI},        {&a->mean, BTH},    {&a->rstd, BTH},
                       {&a->hs, BTI},  {&a->ckpt, gpu_linrec_ckpt_size(&d)}};
    size_t n = gpu_take_slots(slots, sizeof slots / sizeof slots[0], base);
    if (!o->K) a->xc = a->xm;
    return n;
}

static size_t mlstm_act_size_(const MixerSpec *s, int B, int T) {
    MlstmActs a;
    return ml_layout_((const MlstmOpts *)s->opts, B, T, NULL, &a);
}

// The scratch: the recurrence's own; the gates' rows cat (BT,W) = [q | k | v~], W = 2I + H(D+1), their weights and
// biases w2 (2H,W) + (2H), their pre-activations pre2 (BT,2H) (forward and backward); then the backward's: the
// gradients of the same (dcat, dw2, dpre2), and slabs of (BT,I), (BT,H,D+1) and (BT,H)
typedef struct GpuMlstmScratch {
    float *engine, *cat, *w2, *pre2, *t0, *t1;         // t0, t1 (BT,I): v before its ones, silu(z) . hs
    float *dcat, *dw2, *dpre2;
    float *dgp, *sz, *dhs, *dz, *pskip, *dxc, *dh, *dq, *dk, *dv, *dxm, *dxcp;  // (BT,I)
    float *dO, *dva;                                   // (BT,H,D+1)
    float *dm, *dlf, *dli;                             // (BT,H)
} GpuMlstmScratch;

static int gate_width_(const MlstmOpts *o) { return 2 * o->I + o->H * o->Dv; }

static size_t ml_scratch_layout_(const MlstmOpts *o, int B, int T, float *base, GpuMlstmScratch *w) {
    size_t BT = (size_t)B * T, nI = BT * o->I, nA = BT * o->H * o->Dv, nH = BT * o->H;
    size_t W = gate_width_(o), nW = 2 * (size_t)o->H * (W + 1);
    LinrecDims d = mlstm_dims(o, B, T);
    GpuSlot slots[] = {{&w->engine, gpu_linrec_scratch_size(&d)}, {&w->cat, BT * W}, {&w->w2, nW},
                       {&w->pre2, 2 * nH}, {&w->t0, nI}, {&w->t1, nI}, {&w->dcat, BT * W}, {&w->dw2, nW},
                       {&w->dpre2, 2 * nH}, {&w->dgp, nI}, {&w->sz, nI}, {&w->dhs, nI}, {&w->dz, nI},
                       {&w->pskip, nI}, {&w->dxc, nI}, {&w->dh, nI}, {&w->dq, nI}, {&w->dk, nI}, {&w->dv, nI},
                       {&w->dxm, nI}, {&w->dxcp, nI}, {&w->dO, nA}, {&w->dva, nA}, {&w->dm, nH}, {&w->dlf, nH},
                       {&w->dli, nH}};
    return gpu_take_slots(slots, sizeof slots / sizeof slots[0], base);
}

static size_t mlstm_scratch_size_(const MixerSpec *s, int B, int T) {
    GpuMlstmScratch w;
    return ml_scratch_layout_((const MlstmOpts *)s->opts, B, T, NULL, &w);
}

// ----------------------------------------------------------------------------
// the elementwise passes (mixers/mlstm.c's loops, a thread per element, or per token and head)

// mLSTM's sizes as the kernels take them
typedef struct MlDims_ {
    int I, H, D, Dv;
} MlDims_;
static MlDims_ ml_dims_(const MlstmOpts *o) { return MlDims_{o->I, o->H, o->D, o->Dv}; }

// the column of the gates' row layout [q | k | v~] that a gate weight's column c of [q | k | v] (3I) multiplies
static __device__ __forceinline__ int ml_gate_col_(int c, MlDims_ m) {
    return c < 2 * m.I ? c : 2 * m.I + (c - 2 * m.I) / m.D * m.Dv + (c - 2 * m.I) % m.D;
}

// w2 (2H, W) then b2 (2H): the input gate's rows then the forget gate's, each W (H,3I) moved to the row layout
// with 0 in every ones column, and the biases. A thread per element of w2 and b2
__global__ void ml_gate_weights_kernel(float *w2, const float *wi, const float *bi, const float *wf, const float *bf,
                                       MlDims_ m) {
    int W = 2 * m.I + m.H * m.Dv;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, nw = 2 * (size_t)m.H * W;
    if (i >= nw + 2 * m.H) return;
    if (i >= nw) {
        int r = (int)(i - nw);
        w2[i] = r < m.H ? bi[r] : bf[r - m.H];
        return;
    }
    int r = (int)(i / W), col = (int)(i % W), h = r % m.H;
    const float *wr = (r < m.H ? wi : wf) + (size_t)h * 3 * m.I;
    if (col < 2 * m.I) w2[i] = wr[col];
    else {
        int cc = col - 2 * m.I, j = cc % m.Dv;
        w2[i] = j == m.D ? 0.0f : wr[2 * m.I + cc / m.Dv * m.D + j];
    }
}

// cat (BT, W) = [q | k | va] per row: q, k (BT,I), va (BT,H(D+1)). A thread per element of cat
__global__ void ml_cat_kernel(float *cat, const float *q, const float *k, const float *va, size_t BT, MlDims_ m) {
    int W = 2 * m.I + m.H * m.Dv;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= BT * W) return;
    size_t r = i / W;
    int col = (int)(i % W);
    if (col < m.I) cat[i] = q[r * m.I + col];
    else if (col < 2 * m.I) cat[i] = k[r * m.I + col - m.I];
    else cat[i] = va[r * (W - 2 * m.I) + col - 2 * m.I];
}

// its gradient back: dq, dk (BT,I) and dva (BT,H(D+1)) += dcat's parts. A thread per element of dcat
__global__ void ml_cat_backward_kernel(float *dq, float *dk, float *dva, const float *dcat, size_t BT, MlDims_ m) {
    int W = 2 * m.I + m.H * m.Dv;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= BT * W) return;
    size_t r = i / W;
    int col = (int)(i % W);
    if (col < m.I) dq[r * m.I + col] += dcat[i];
    else if (col < 2 * m.I) dk[r * m.I + col - m.I] += dcat[i];
    else dva[r * (W - 2 * m.I) + col - 2 * m.I] += dcat[i];
}

// per (token, head) i of n: ipre, fpre from pre2 (BT,2H) = [input gates | forget gates], lf = logsigmoid(fpre)
__global__ void ml_gate_split_kernel(float *ipre, float *fpre, float *lf, const float *pre2, size_t n, int H) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t r = i / H;
    int h = (int)(i % H);
    float f = pre2[r * 2 * H + H + h];
    ipre[i] = pre2[r * 2 * H + h];
    fpre[i] = f;
    lf[i] = (float)mixer_logsigmoid(f);
}

// dpre2 (BT,2H) = [dli | dlf sigmoid(-fpre)] (lf = logsigmoid(fpre)). A thread per (token, head)
__global__ void ml_gate_dpre_kernel(float *dpre2, const float *dli, const float *dlf, const float *fpre, size_t n,
                                    int H) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t r = i / H;
    int h = (int)(i % H);
    dpre2[r * 2 * H + h] = dli[i];
    dpre2[r * 2 * H + H + h] = dlf[i] * (float)mixer_sigmoid(-(double)fpre[i]);
}

// the gates' parameter gradients from dw2 (2H,W) + db2 (2H): gwi, gwf (H,3I) += the columns of [q | k | v] (the ones
// columns dropped), gbi, gbf (H) += the biases'. A thread per (gate, h, c), c = 3I the bias
__global__ void ml_gate_grads_kernel(float *gwi, float *gbi, float *gwf, float *gbf, const float *dw2, MlDims_ m) {
    int W = 2 * m.I + m.H * m.Dv, n3 = 3 * m.I + 1;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= 2 * (size_t)m.H * n3) return;
    int r = (int)(i / n3), c = (int)(i % n3), h = r % m.H, gate = r / m.H;
    if (c == 3 * m.I) {
        (gate ? gbf : gbi)[h] += dw2[2 * (size_t)m.H * W + r];
        return;
    }
    (gate ? gwf : gwi)[(size_t)h * 3 * m.I + c] += dw2[(size_t)r * W + ml_gate_col_(c, m)];
}

// h (BT,I) = o[:D] / (max(|o[D]|, exp(-m)) + eps) per (token, head), in double as exp(-m) may pass float's range.
// A thread per element of h
__global__ void ml_normalise_kernel(float *h, const float *oa, const float *mm, size_t n, MlDims_ m) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t r = i / m.D;
    const float *src = oa + r * m.Dv;
    double den = fmax(fabs((double)src[m.D]), exp(-(double)mm[r])) + MLSTM_EPS, inv = 1.0 / den;
    h[i] = (float)(src[i % m.D] * inv);
}

// its backward per (token, head) r of n: dO (BT,H,D+1) and dm (BT,H) WRITTEN from dh (BT,I); the branch the max
// took gets den's gradient (mixers/mlstm.c's loop)
__global__ void ml_normalise_backward_kernel(float *dO, float *dm, const float *dh, const float *oa, const float *mm,
                                             size_t n, MlDims_ m) {
    size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    const float *src = oa + r * m.Dv, *dhr = dh + r * m.D;
    float *dor = dO + r * m.Dv;
    double on = src[m.D], e = exp(-(double)mm[r]), den = fmax(fabs(on), e) + MLSTM_EPS, s = 0.0;
    for (int j = 0; j < m.D; j++) {
        dor[j] = (float)(dhr[j] / den);
        s += (double)dhr[j] * src[j];
    }
    double sd = s / den;  // d den = -sd / den
    if (fabs(on) >= e) {
        dor[m.D] = (float)(on > 0 ? -sd / den : sd / den);
        dm[r] = 0.0f;
    } else {
        dor[m.D] = 0.0f;
        dm[r] = (float)(sd * (e / den));  // d exp(-m) / dm = -exp(-m)
    }
}

// the output side, a thread per element of (BT,I): hs += skip (.) xc, then g = silu(z) hs (g holds silu(z) on entry)
__global__ void ml_skip_gate_kernel(float *hs, float *g, const float *skip, const float *xc, size_t n, int I) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    hs[i] += skip[i % I] * xc[i];
    g[i] *= hs[i];
}

// its backward, a thread per element of (BT,I), from dgp = dy W_down and sz = silu(z): dhs = dgp sz, dgp *= hs (z's
// gradient before silu), pskip = dhs xc (skip's summand), dxc = skip dhs
__global__ void ml_skip_gate_backward_kernel(float *dhs, float *dgp, float *pskip, float *dxc, const float *sz,
                                             const float *hs, const float *xc, const float *skip, size_t n, int I) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float d = dgp[i] * sz[i];
    dhs[i] = d;
    dgp[i] *= hs[i];
    pskip[i] = d * xc[i];
    dxc[i] = skip[i % I] * d;
}

// g (n,) = hs silu(z), with sz = silu(z) given
__global__ void ml_mul_kernel(float *g, const float *hs, const float *sz, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] = hs[i] * sz[i];
}

// ----------------------------------------------------------------------------
// forward, backward

// the gates' weights w2 and rows cat from the parameters and q, k, va (BT rows)
static void ml_gate_rows_(const Mixer *m, const GpuMlstmScratch *w, const float *q, const float *k, const float *va,
                          int BT) {
    const MlstmOpts *o = (const MlstmOpts *)m->spec->opts;
    MlDims_ md = ml_dims_(o);
    size_t W = gate_width_(o);
    GPU_LAUNCH(ml_gate_weights_kernel, 2 * (size_t)o->H * (W + 1), w->w2, mixer_param(m, o->k_iw),
               mixer_param(m, o->k_ib), mixer_param(m, o->k_fw), mixer_param(m, o->k_fb), md);
    GPU_LAUNCH(ml_cat_kernel, (size_t)BT * W, w->cat, q, k, va, (size_t)BT, md);
}

// the forward over B,T; with a state, one token of decoding (T 1): sequence b's state at state + b * n,
// mixers/mlstm.c's layout [the recurrence's (H, D(D+1) + 1) | the conv's cache (I, K-1)]
static void mlstm_run_(Mixer *m, float *y, GpuAct x, int B, int T, float *state, size_t n) {
    const MlstmOpts *o = (const MlstmOpts *)m->spec->opts;
    int C = m->spec->C, I = o->I, H = o->H, BT = B * T;
    size_t nI = (size_t)BT * I, nH = (size_t)BT * H, W = gate_width_(o);
    MlDims_ md = ml_dims_(o);
    MlstmActs a;
    ml_layout_(o, B, T, m->acts, &a);
    GpuMlstmScratch w;
    ml_scratch_layout_(o, B, T, m->scratch, &w);
    const float *wup = mixer_param(m, o->k_up);
    GPU_TIMED("mlstm.up.forward", {
        gpu_matmul_forward(gpu_f32(a.xm), x, wup, NULL, BT, C, I);
        gpu_matmul_forward(gpu_f32(a.z), x, wup + (size_t)I * C, NULL, BT, C, I);
    });
    LinrecDims d = mlstm_dims(o, B, T);
    if (o->K)
        GPU_TIMED("mlstm.conv", {
            if (state)
                gpu_conv1d_causal_step(a.xcp, state + (size_t)H * linrec_state_size(&d), n, a.xm,
                                       mixer_param(m, o->k_cw), mixer_param(m, o->k_cb), B, I, o->K);
            else
                gpu_conv1d_causal_forward(a.xcp, a.xm, mixer_param(m, o->k_cw), mixer_param(m, o->k_cb), B, T, I,
                                          o->K);
            gpu_silu_forward(a.xc, a.xcp, nI);
        });
    // q, k = blockdiag(xc), v = blockdiag(xm) with its ones
    GPU_TIMED("mlstm.qkv.forward", {
        gpu_blockdiag_forward(a.q, a.xc, mixer_param(m, o->k_q), BT, o->G, o->bs, o->bs);
        gpu_blockdiag_forward(a.k, a.xc, mixer_param(m, o->k_k), BT, o->G, o->bs, o->bs);
        gpu_blockdiag_forward(w.t0, a.xm, mixer_param(m, o->k_v), BT, o->G, o->bs, o->bs);
        gpu_linrec_ones_append(a.v, w.t0, nH, o->D);
    });
    // [ipre | fpre] = [q | k | v] [W_i | W_f]^T + [b_i | b_f], lf = logsigmoid(fpre)
    GPU_TIMED("mlstm.gates.forward", {
        ml_gate_rows_(m, &w, a.q, a.k, a.v, BT);
        gpu_matmul_forward(gpu_f32(w.pre2), gpu_f32(w.cat), w.w2, w.w2 + 2 * (size_t)H * W, BT, (int)W, 2 * H);
        GPU_LAUNCH(ml_gate_split_kernel, nH, a.ipre, a.fpre, a.lf, w.pre2, nH, H);
    });
    if (state) GPU_TIMED("mlstm.step", gpu_linrec_step(a.o, a.mm, state, n, a.q, a.k, a.v, a.lf, a.ipre, &d));
    else gpu_linrec_forward(a.o, a.mm, a.ckpt, a.q, a.k, a.v, a.lf, a.ipre, w.engine, &d);  // timed per kernel inside
    GPU_TIMED("mlstm.normalise", GPU_LAUNCH(ml_normalise_kernel, nI, a.h, a.o, a.mm, nI, md));
    // hs = outnorm(h) + skip (.) xc, y = (hs (.) silu(z)) W_down^T
    GroupNormOpts gn = mlstm_norm_opts(o);
    GPU_TIMED("mlstm.norm", gpu_groupnorm_forward(a.hs, a.mean, a.rstd, a.h, NULL, mixer_param(m, o->k_norm), BT, H,
                                                  o->D, &gn));
    GPU_TIMED("mlstm.out.gate", {
        gpu_silu_forward(w.t1, a.z, nI);
        GPU_LAUNCH(ml_skip_gate_kernel, nI, a.hs, w.t1, mixer_param(m, o->k_skip), a.xc, nI, I);
    });
    GPU_TIMED("mlstm.down.forward",
              gpu_matmul_forward(gpu_f32(y), gpu_f32(w.t1), mixer_param(m, o->k_down), NULL, BT, I, C));
}

static void mlstm_forward_(Mixer *m, float *y, GpuAct x, int B, int T) { mlstm_run_(m, y, x, B, T, NULL, 0); }

static void mlstm_step_(Mixer *m, float *state, float *y, GpuAct x, int B, int t, int cap) {
    (void)t;
    mlstm_run_(m, y, x, B, 1, state, m->spec->ops->state_size(m->spec, cap));
}

static void mlstm_backward_(Mixer *m, float *dx, const float *dy, GpuAct x, int B, int T) {
    const MlstmOpts *o = (const MlstmOpts *)m->spec->opts;
    int C = m->spec->C, I = o->I, H = o->H, BT = B * T;
    size_t nI = (size_t)BT * I, nH = (size_t)BT * H, nA = nH * o->Dv, W = gate_width_(o);
    MlDims_ md = ml_dims_(o);
    MlstmActs a;
    ml_layout_(o, B, T, m->acts, &a);
    GpuMlstmScratch w;
    ml_scratch_layout_(o, B, T, m->scratch, &w);
    // y = g W_down^T, g = hs (.) silu(z)
    GPU_TIMED("mlstm.out.gate", {
        gpu_silu_forward(w.sz, a.z, nI);
        GPU_LAUNCH(ml_mul_kernel, nI, w.t1, a.hs, w.sz, nI);
    });
    GPU_TIMED("mlstm.down.backward", gpu_matmul_backward(gpu_f32(w.dgp), mixer_grad(m, o->k_down), NULL, gpu_f32(dy),
                                                         gpu_f32(w.t1), mixer_param(m, o->k_down), BT, I, C, 0));
    // g = hs (.) silu(z), hs = outnorm(h) + skip (.) xc
    GPU_TIMED("mlstm.out.gate", {
        GPU_LAUNCH(ml_skip_gate_backward_kernel, nI, w.dhs, w.dgp, w.pskip, w.dxc, w.sz, a.hs, a.xc,
                   mixer_param(m, o->k_skip), nI, I);
        CUDA_CHECK(cudaMemset(w.dz, 0, nI * sizeof(float)));
        gpu_silu_backward(w.dz, a.z, w.dgp, nI);
        gpu_colsum(mixer_grad(m, o->k_skip), NULL, gpu_f32(w.pskip), NULL, NULL, NULL, BT, I, COLSUM_PLAIN);
    });
    // the outnorm
    CUDA_CHECK(cudaMemset(w.dh, 0, nI * sizeof(float)));
    GroupNormOpts gn = mlstm_norm_opts(o);
    GPU_TIMED("mlstm.norm", gpu_groupnorm_backward(w.dh, NULL, mixer_grad(m, o->k_norm), w.dhs, a.h, NULL,
                                                   mixer_param(m, o->k_norm), a.mean, a.rstd, BT, H, o->D, &gn));
    // h = o[:D] / den
    GPU_TIMED("mlstm.normalise",
              GPU_LAUNCH(ml_normalise_backward_kernel, nH, w.dO, w.dm, w.dh, a.o, a.mm, nH, md));
    // the recurrence
    CUDA_CHECK(cudaMemset(w.dq, 0, nI * sizeof(float)));
    CUDA_CHECK(cudaMemset(w.dk, 0, nI * sizeof(float)));
    CUDA_CHECK(cudaMemset(w.dva, 0, nA * sizeof(float)));
    CUDA_CHECK(cudaMemset(w.dlf, 0, nH * sizeof(float)));
    CUDA_CHECK(cudaMemset(w.dli, 0, nH * sizeof(float)));
    LinrecDims d = mlstm_dims(o, B, T);
    gpu_linrec_backward(w.dq, w.dk, w.dva, w.dlf, w.dli, w.dO, w.dm, a.ckpt, a.q, a.k, a.v, a.lf, a.ipre, w.engine,
                        &d);  // timed per kernel inside
    // the gates: lf = logsigmoid(fpre), [ipre | fpre] = cat w2^T + b2
    GPU_TIMED("mlstm.gates.backward", {
        ml_gate_rows_(m, &w, a.q, a.k, a.v, BT);
        GPU_LAUNCH(ml_gate_dpre_kernel, nH, w.dpre2, w.dli, w.dlf, a.fpre, nH, H);
        CUDA_CHECK(cudaMemset(w.dw2, 0, 2 * (size_t)H * (W + 1) * sizeof(float)));
        gpu_matmul_backward(gpu_f32(w.dcat), w.dw2, w.dw2 + 2 * (size_t)H * W, gpu_f32(w.dpre2), gpu_f32(w.cat), w.w2,
                            BT, (int)W, 2 * H, 0);
        GPU_LAUNCH(ml_cat_backward_kernel, (size_t)BT * W, w.dq, w.dk, w.dva, w.dcat, (size_t)BT, md);
        GPU_LAUNCH(ml_gate_grads_kernel, 2 * (size_t)H * (3 * I + 1), mixer_grad(m, o->k_iw), mixer_grad(m, o->k_ib),
                   mixer_grad(m, o->k_fw), mixer_grad(m, o->k_fb), w.dw2, md);
    });
    // q, k = blockdiag(xc), v = blockdiag(xm) (the ones column dropped): dxc +=, dxm
    GPU_TIMED("mlstm.qkv.backward", {
        gpu_linrec_ones_drop(w.dv, w.dva, nH, o->D);
        CUDA_CHECK(cudaMemset(w.dxm, 0, nI * sizeof(float)));
        gpu_blockdiag_backward(w.dxc, mixer_grad(m, o->k_q), w.dq, a.xc, mixer_param(m, o->k_q), BT, o->G, o->bs,
                               o->bs);
        gpu_blockdiag_backward(w.dxc, mixer_grad(m, o->k_k), w.dk, a.xc, mixer_param(m, o->k_k), BT, o->G, o->bs,
                               o->bs);
        gpu_blockdiag_backward(w.dxm, mixer_grad(m, o->k_v), w.dv, a.xm, mixer_param(m, o->k_v), BT, o->G, o->bs,
                               o->bs);
    });
    // xc = silu(conv(xm)), or xc = xm
    if (o->K)
        GPU_TIMED("mlstm.conv", {
            CUDA_CHECK(cudaMemset(w.dxcp, 0, nI * sizeof(float)));
            gpu_silu_backward(w.dxcp, a.xcp, w.dxc, nI);
            gpu_conv1d_causal_backward(w.dxm, mixer_grad(m, o->k_cw), mixer_grad(m, o->k_cb), w.dxcp, a.xm,
                                       mixer_param(m, o->k_cw), B, T, I, o->K);
        });
    else gpu_residual(w.dxm, w.dxm, w.dxc, NULL, nI, I);
    // [x_m | z] = x W_up^T
    const float *wup = mixer_param(m, o->k_up);
    float *gup = mixer_grad(m, o->k_up);
    GPU_TIMED("mlstm.up.backward", {
        gpu_matmul_backward(gpu_f32(dx), gup, NULL, gpu_f32(w.dxm), x, wup, BT, C, I, 1);
        gpu_matmul_backward(gpu_f32(dx), gup + (size_t)I * C, NULL, gpu_f32(w.dz), x, wup + (size_t)I * C, BT, C, I,
                            1);
    });
}

const GpuMixerOps GPU_MIXER_MLSTM = {"mlstm", mlstm_check_, mlstm_act_size_, mlstm_scratch_size_, mlstm_forward_,
                                     mlstm_backward_, mlstm_step_};
