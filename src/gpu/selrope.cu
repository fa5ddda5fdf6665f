// Selective RoPE on the GPU (gpu/selrope.cuh): mixers/selrope.c's passes over device buffers.
#include "gpu/selrope.cuh"

#include <math.h>
#include <string.h>

#include "gpu/colsum.cuh"
#include "gpu/conv.cuh"
#include "gpu/l2norm.cuh"
#include "gpu/matmul.cuh"

#define SR_L2_EPS 1e-6f  // mixers/selrope.c's
#define SR_SEGS_MAX 32   // token segments of a chain block (32 channels x segments threads)
#define SR_ROWS_ 1024    // rows of one partial sum of the full-rank weight gradient
// the projections to phi and the gate take float operands in every precision: each angle sums phi over the sequence,
// so bf16's rounding of phi (2^-8) would accumulate along it; they are rank-r products, small beside the mixer's
#define SR_MATH_ GPU_FP32

// ----------------------------------------------------------------------------
// layouts (mixers/selrope.c's SrActs and SrWork, on the device)

typedef struct GpuSrActs {
    float *xn, *xnrm;  // (BT,C) (BT*H) the per-head unit input and its norms
    float *u;          // (BT,rank) low rank: W1 xn
    float *w;          // (HR*Dh + HR) full rank: scale_h W_hr / |W_hr| and the row norms
    float *eb;         // (HR) use_bias: exp(phi_bias)
    float *p;          // (BT,HR) the projection
    float *c;          // (BT,HR) silu: the conv output
    float *f;          // (BT,HR) use_gate: phi before the gate
    float *g;          // (BT,H) use_gate: the gate values
    float *cs, *sn;    // (BT,HR) cos and sin of the angles
} GpuSrActs;

static size_t sr_layout_(const SelRopeOpts *s, int B, int T, float *base, GpuSrActs *a) {
    size_t BT = (size_t)B * T, HR = s->HR;
    int on = s->enabled, lo = on && !s->full_rank, fr = on && s->full_rank;
    GpuSlot slots[] = {{&a->xn, on * BT * s->C},         {&a->xnrm, on * BT * s->H},
                       {&a->u, lo * BT * s->rank},       {&a->w, fr * (HR * s->Dh + HR)},
                       {&a->eb, (on && s->use_bias) * HR}, {&a->p, on * BT * HR},
                       {&a->c, (on && s->silu) * BT * HR}, {&a->f, (on && s->use_gate) * BT * HR},
                       {&a->g, (on && s->use_gate) * BT * s->H}, {&a->cs, on * BT * HR},
                       {&a->sn, on * BT * HR}};
    return gpu_take_slots(slots, sizeof slots / sizeof slots[0], base);
}

size_t gpu_selrope_act_size(const SelRopeOpts *s, int B, int T) {
    GpuSrActs a;
    return sr_layout_(s, B, T, NULL, &a);
}

// the backward's: dtheta (then the gradient of f in place), dgate, dc (the conv output's gradient), dp, dsum (the
// bias's column sums), dxn, du (low rank), dg (the gate logits'), full rank: dw (the effective weight's), ud (HR)
// and the partial sums of dw (double, chunks of SR_ROWS_ rows)
typedef struct GpuSrWork {
    float *dtheta, *dgate, *dc, *dp, *dsum, *dxn, *du, *dg, *dw, *ud, *part;
} GpuSrWork;

static size_t sr_work_(const SelRopeOpts *s, int B, int T, float *base, GpuSrWork *w) {
    size_t BT = (size_t)B * T, HR = s->HR, nch = (BT + SR_ROWS_ - 1) / SR_ROWS_;
    int on = s->enabled, fr = on && s->full_rank;
    GpuSlot slots[] = {{&w->dtheta, on * BT * HR},  {&w->dgate, (on && s->use_gate) * BT * HR},
                       {&w->dc, on * BT * HR},      {&w->dp, on * BT * HR},
                       {&w->dsum, (on && s->use_bias) * HR}, {&w->dxn, on * BT * s->C},
                       {&w->du, (on && !s->full_rank) * BT * s->rank}, {&w->dg, (on && s->use_gate) * BT * s->H},
                       {&w->dw, fr * HR * s->Dh},  {&w->ud, fr * HR},
                       {&w->part, fr * 2 * nch * HR * s->Dh}};
    return gpu_take_slots(slots, sizeof slots / sizeof slots[0], base);
}

size_t gpu_selrope_scratch_size(const SelRopeOpts *s, int B, int T) {
    GpuSrWork w;
    return sr_work_(s, B, T, NULL, &w);
}

// ----------------------------------------------------------------------------
// the angle chain

typedef struct SrChain {
    int H, R, HR, silu, skip;
    const float *conv;   // (HR, K) or NULL
    const float *ebias;  // (HR) exp(bias) or NULL
    int rfa;             // the temperature spectrum (mixers/selrope.c's selrope_temperature_): rfa or rope
    double theta, tmax;  // its temp_theta and temp_max
} SrChain;

// channel pair r's temperature, as the host's table has it (formed in double, rounded once)
static __device__ float sr_temp_(const SrChain &o, int r) {
    if (o.rfa) {
        double pmax = o.theta * M_PI, top = sqrt((1.0 - cos(pmax)) / (1.0 + cos(pmax)));
        double c = cos(pmax * r / (o.R - 1));
        return (float)(o.tmax * sqrt((1.0 - c) / (1.0 + c)) / top);
    }
    return (float)(o.tmax / pow(o.theta, 2.0 * r / (2 * o.R)));
}

// one token of channel i: from the input pt and the carried window (the K-1 previous inputs, oldest first) and
// previous a, f before the gate (nn/selrope.c's order of operations); c: the conv output (act's input)
template <int K>
static __device__ __forceinline__ float sr_token_(float pt, float *win, float &prev, float &c, const float *w,
                                                  const SrChain &o, float eb) {
    float a;
    if (K > 0) {
        a = 0.0f;
        for (int j = 0; j < K - 1; j++) a += w[j] * win[j];
        a += w[K - 1] * pt;
        for (int j = 0; j + 2 < K; j++) win[j] = win[j + 1];
        if (K > 1) win[K - 2] = pt;
        c = a;
        if (o.silu) a *= sigmoid_fast_(a);
    } else a = pt;
    float f = a;
    if (o.skip) f = a - prev, prev = a;
    if (o.ebias) f += eb;
    return f;
}

// grid (ceil(HR/32), B), block (32, S): thread (lane, s) walks channel blockIdx.x*32 + lane over the tokens of
// segment s, [s T / S, (s+1) T / S). Pass 1 sums phi over the segment (double), the segments' totals are added in
// order, pass 2 walks again from the offset writing cos, sin (and csave, fsave). A segment that starts at t0 > 0
// first replays the max(K, 1) tokens before it (without output) to fill the window and the previous a. With a
// state (S 1): the history comes from it and goes back to it.
template <int K>
__global__ void sr_angles_kernel(float *cs, float *sn, float *csave, float *fsave, float *state, size_t stride,
                                 const float *p, const float *gate, SrChain o, int T) {
    constexpr int KW = K > 1 ? K - 1 : 1;  // the window's length (used only when K > 1)
    __shared__ double tot[SR_SEGS_MAX][32];
    const int lane = threadIdx.x, sg = threadIdx.y, S = blockDim.y, b = blockIdx.y;
    const int i = blockIdx.x * 32 + lane, HR = o.HR;
    const bool live = i < HR;
    const int t0 = (int)((long)sg * T / S), t1 = (int)((long)(sg + 1) * T / S);
    float w[K > 0 ? K : 1], win0[K > 1 ? K - 1 : 1], prev0 = 0.0f, eb = 0.0f, tr = 0.0f;
    double acc0 = 0.0;
    int h = 0;
    float *st = state ? state + (size_t)b * stride : NULL;
    const size_t win_at = HR, prev_at = (size_t)HR * (K > 0 ? K : 1);
    if (live) {
        h = i / o.R;
        tr = sr_temp_(o, i % o.R);
        if (o.ebias) eb = o.ebias[i];
        for (int j = 0; j < K; j++) w[j] = o.conv[(size_t)i * K + j];
        for (int j = 0; j + 1 < K; j++) win0[j] = st ? st[win_at + (size_t)i * KW + j] : 0.0f;
        if (st) {
            acc0 = st[i];
            if (o.skip) prev0 = st[prev_at + i];
        }
    }
    const float *pb = p + (size_t)b * T * HR + i;
    const float *gb = gate ? gate + (size_t)b * T * o.H + h : NULL;
    const int tw = t0 - (K > 0 ? K : 1) < 0 ? 0 : t0 - (K > 0 ? K : 1);  // replay from here
    // pass 1: the segment's sum of phi
    double sum = 0.0;
    if (live && S > 1) {
        float win[K > 1 ? K - 1 : 1], prev = prev0, c;
        for (int j = 0; j + 1 < K; j++) win[j] = win0[j];
        for (int t = tw; t < t1; t++) {
            float f = sr_token_<K>(pb[(size_t)t * HR], win, prev, c, w, o, eb);
            if (t < t0) continue;
            if (gb) f *= gb[(size_t)t * o.H];
            sum += f;
        }
    }
    tot[sg][lane] = sum;
    __syncthreads();
    if (!live) return;
    double acc = acc0;
    for (int q = 0; q < sg; q++) acc += tot[q][lane];
    // pass 2: the walk that writes
    float win[K > 1 ? K - 1 : 1], prev = prev0, c = 0.0f;
    for (int j = 0; j + 1 < K; j++) win[j] = win0[j];
    for (int t = tw; t < t1; t++) {
        float f = sr_token_<K>(pb[(size_t)t * HR], win, prev, c, w, o, eb);
        if (t < t0) continue;
        size_t row = ((size_t)b * T + t) * HR + i;
        if (csave) csave[row] = c;
        if (gb) {
            if (fsave) fsave[row] = f;
            f *= gb[(size_t)t * o.H];
        }
        acc += f;
        float th = (float)(tr * acc);
        double sd, cd;
        sincos((double)th, &sd, &cd);
        sn[row] = (float)sd, cs[row] = (float)cd;
    }
    if (st) {
        st[i] = (float)acc;
        for (int j = 0; j + 1 < K; j++) st[win_at + (size_t)i * KW + j] = win[j];
        if (o.skip) st[prev_at + i] = prev;
    }
}

// the reverse walk: df (B,T,HR) = (temp sum_{s>=t} dtheta_s) [* g], in place of dtheta; dgate (B,T,HR) = dphi f
// with a gate. The same grid and segments as sr_angles_kernel, the later segments' totals added in order.
__global__ void sr_angles_backward_kernel(float *dtheta, float *dgate, const float *fsave, const float *gate, SrChain o,
                                          int T) {
    __shared__ double tot[SR_SEGS_MAX][32];
    const int lane = threadIdx.x, sg = threadIdx.y, S = blockDim.y, b = blockIdx.y;
    const int i = blockIdx.x * 32 + lane, HR = o.HR;
    const bool live = i < HR;
    const int t0 = (int)((long)sg * T / S), t1 = (int)((long)(sg + 1) * T / S);
    float *db = dtheta + (size_t)b * T * HR + i;
    double sum = 0.0;
    if (live && S > 1)
        for (int t = t1 - 1; t >= t0; t--) sum += db[(size_t)t * HR];
    tot[sg][lane] = sum;
    __syncthreads();
    if (!live) return;
    double racc = 0.0;
    for (int q = S - 1; q > sg; q--) racc += tot[q][lane];
    const float tr = sr_temp_(o, i % o.R);
    const int h = i / o.R;
    for (int t = t1 - 1; t >= t0; t--) {
        size_t row = ((size_t)b * T + t) * HR + i;
        racc += dtheta[row];
        float d = (float)(tr * racc);
        if (gate) {
            dgate[row] = d * fsave[row];
            d *= gate[((size_t)b * T + t) * o.H + h];
        }
        dtheta[row] = d;
    }
}

// dc (B,T,HR) from df: skip: da_t = df_t - df_{t+1}; silu: times its derivative at the conv output csave
__global__ void sr_dconv_kernel(float *dc, const float *df, const float *csave, int skip, int T, int HR, size_t n) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n) return;
    float d = df[e];
    if (skip) d -= (int)(e / HR % T) + 1 < T ? df[e + HR] : 0.0f;
    if (csave) d *= silu_grad_fast_(csave[e]);
    dc[e] = d;
}

static int sr_segments_(int T) {
    int S = T / 64;
    return S < 1 ? 1 : S > SR_SEGS_MAX ? SR_SEGS_MAX : S;
}

// ----------------------------------------------------------------------------
// the small passes around the chain (a thread per element or row; sums in the host's order)

// x (n,) as floats (bf16 widened)
__global__ void sr_widen_kernel(float *out, const __nv_bfloat16 *x, size_t n) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < n) out[e] = __bfloat162float(x[e]);
}
__global__ void sr_exp_kernel(float *out, const float *x, int n) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e < n) out[e] = expf(x[e]);
}
__global__ void sr_sigmoid_kernel(float *g, size_t n) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < n) g[e] = sigmoid_fast_(g[e]);
}
// full rank: a thread per row i of W (HR, Dh): nrm[i] = |W_i| + 1e-12 (double, in order), w_i = scale_{i/R} W_i /
// nrm[i]
__global__ void sr_full_weight_kernel(float *w, float *nrm, const float *W, const float *sc, int HR, int Dh, int R) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= HR) return;
    const float *Wi = W + (size_t)i * Dh;
    double ss = 0.0;
    for (int j = 0; j < Dh; j++) ss += (double)Wi[j] * Wi[j];
    double n = sqrt(ss) + 1e-12;
    for (int j = 0; j < Dh; j++) w[(size_t)i * Dh + j] = (float)(sc[i / R] * Wi[j] / n);
    nrm[i] = (float)n;
}
// p (N,H,R) = per head w_h (R,Dh) xn_h: a thread per output, the dot in order
__global__ void sr_full_proj_kernel(float *p, const float *xn, const float *w, int N, int H, int R, int Dh) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (size_t)N * H * R) return;
    size_t r = e / R;  // (row, head)
    int i = (int)(e % R), h = (int)(r % H);
    const float *xr = xn + r * Dh, *wr = w + ((size_t)h * R + i) * Dh;
    float acc = 0.0f;
    for (int j = 0; j < Dh; j++) acc += wr[j] * xr[j];
    p[e] = acc;
}
// its input gradient: dxn (N,H,Dh) WRITTEN = sum_i dp (N,H,R) w_h (R,Dh), i in order
__global__ void sr_full_dx_kernel(float *dxn, const float *dp, const float *w, int N, int H, int R, int Dh) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (size_t)N * H * Dh) return;
    size_t r = e / Dh;
    int j = (int)(e % Dh), h = (int)(r % H);
    const float *d = dp + r * R, *wc = w + (size_t)h * R * Dh + j;
    float acc = 0.0f;
    for (int i = 0; i < R; i++) acc += d[i] * wc[(size_t)i * Dh];
    dxn[e] = acc;
}
// the effective weight's gradient, rows of N in chunks of SR_ROWS_: part (chunk, HR, Dh) doubles of
// sum_rows dp[row, hi] xn[row, h, j]; grid (ceil(HR Dh / 256), chunks)
__global__ void sr_full_dw_part_kernel(double *part, const float *dp, const float *xn, int N, int H, int R, int Dh) {
    int e = blockIdx.x * blockDim.x + threadIdx.x, HR = H * R;
    if (e >= HR * Dh) return;
    int hi = e / Dh, j = e % Dh, h = hi / R;
    int r0 = blockIdx.y * SR_ROWS_, r1 = r0 + SR_ROWS_ < N ? r0 + SR_ROWS_ : N;
    double acc = 0.0;
    for (int r = r0; r < r1; r++) acc += (double)dp[(size_t)r * HR + hi] * xn[((size_t)r * H + h) * Dh + j];
    part[(size_t)blockIdx.y * HR * Dh + e] = acc;
}
__global__ void sr_full_dw_sum_kernel(float *dw, const double *part, int nch, int n) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n) return;
    double acc = 0.0;
    for (int c = 0; c < nch; c++) acc += part[(size_t)c * n + e];
    dw[e] = (float)acc;
}
// w = sc W / |W|: a thread per row hi: ud[hi] = <W_hi / |W_hi|, dw_hi>, dW_hi += sc/|W| (dw - u ud)
__global__ void sr_full_wgrad_kernel(float *dW, float *ud, const float *dw, const float *W, const float *sc,
                                     const float *nrm, int HR, int Dh, int R) {
    int hi = blockIdx.x * blockDim.x + threadIdx.x;
    if (hi >= HR) return;
    const float *Wr = W + (size_t)hi * Dh, *dwr = dw + (size_t)hi * Dh;
    double u = 0.0;
    for (int j = 0; j < Dh; j++) u += (double)Wr[j] / nrm[hi] * dwr[j];
    double f = sc[hi / R] / nrm[hi];
    for (int j = 0; j < Dh; j++) dW[(size_t)hi * Dh + j] += (float)(f * (dwr[j] - Wr[j] / nrm[hi] * u));
    ud[hi] = (float)u;
}
// dsc[h] += its rows' ud, in order
__global__ void sr_full_sgrad_kernel(float *dsc, const float *ud, int H, int R) {
    int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= H) return;
    for (int i = 0; i < R; i++) dsc[h] += ud[h * R + i];
}
// dbias (HR) += dsum exp(bias)
__global__ void sr_bias_grad_kernel(float *db, const float *dsum, const float *bias, int n) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e < n) db[e] += (float)(dsum[e] * exp((double)bias[e]));
}
// the gate: dg (rows = N H) = (sum over the head's R channels of dgate) g (1 - g)
__global__ void sr_gate_grad_kernel(float *dg, const float *dgate, const float *g, size_t rows, int R) {
    size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    double acc = 0.0, sg = g[r];
    for (int i = 0; i < R; i++) acc += dgate[r * R + i];
    dg[r] = (float)(acc * sg * (1.0 - sg));
}
// rotations of rows of H heads of 2R channels, ld floats apart, by (N,H,R) angles, a thread per pair (nn/selrope.c's
// selrope_rotate and its backward)
__global__ void sr_rotate_kernel(float *out, const float *inp, const float *cs, const float *sn, size_t n, int HR,
                                 int R, size_t ld) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n) return;
    size_t at = e / HR * ld + (e % HR) / R * 2 * R + e % R;
    float x0 = inp[at], x1 = inp[at + R], c = cs[e], s = sn[e];
    out[at] = x0 * c - x1 * s;
    out[at + R] = x0 * s + x1 * c;
}
__global__ void sr_rotate_backward_kernel(float *dinp, float *dtheta, const float *dout, size_t ld, const float *out,
                                          size_t ld_out, const float *cs, const float *sn, size_t n, int HR, int R) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n) return;
    size_t in_row = (e % HR) / R * 2 * R + e % R, at = e / HR * ld + in_row, ao = e / HR * ld_out + in_row;
    float d0 = dout[at], d1 = dout[at + R], c = cs[e], s = sn[e];
    dtheta[e] += d1 * out[ao] - d0 * out[ao + R];
    dinp[at] = d0 * c + d1 * s;
    dinp[at + R] = d1 * c - d0 * s;
}

// ----------------------------------------------------------------------------
// forward, backward

static SrChain sr_chain_(const Mixer *m, const SelRopeOpts *s, const float *eb) {
    return SrChain{s->H, s->R, s->HR, s->silu, s->skip_conv, s->has_conv ? mixer_param(m, s->k_conv) : NULL, eb,
                   !strcmp(s->temp_type, "rfa"), s->temp_theta, s->temp_max};
}

void gpu_selrope_forward(const Mixer *m, const SelRopeOpts *s, float *acts, GpuAct x, int B, int T, float *state,
                         size_t stride) {
    GpuSrActs a;
    sr_layout_(s, B, T, acts, &a);
    int N = B * T, HR = s->HR;
    size_t nC = (size_t)N * s->C;
    // xn = l2norm(x) per head chunk
    if (x.ld) gpu_fail_("gpu_selrope_forward", "a strided input", __FILE__, __LINE__);
    const float *xf = (const float *)x.p;
    if (x.bf16) {
        GPU_LAUNCH(sr_widen_kernel, nC, a.xn, (const __nv_bfloat16 *)x.p, nC);
        xf = a.xn;
    }
    gpu_l2norm_forward(a.xn, a.xnrm, xf, N * s->H, s->Dh, SR_L2_EPS, L2NORM_ADD);
    if (!s->full_rank) {
        gpu_matmul_forward_in(SR_MATH_, gpu_f32(a.u), gpu_f32(a.xn), mixer_param(m, s->k_w1), NULL, N, s->C,
                              s->rank);
        gpu_matmul_forward_in(SR_MATH_, gpu_f32(a.p), gpu_f32(a.u), mixer_param(m, s->k_w2), NULL, N, s->rank, HR);
    } else {
        float *nrm = a.w + (size_t)HR * s->Dh;
        GPU_LAUNCH(sr_full_weight_kernel, HR, a.w, nrm, mixer_param(m, s->k_w2), mixer_param(m, s->k_scale), HR, s->Dh,
                   s->R);
        GPU_LAUNCH(sr_full_proj_kernel, (size_t)N * HR, a.p, a.xn, a.w, N, s->H, s->R, s->Dh);
    }
    if (s->use_bias) GPU_LAUNCH(sr_exp_kernel, HR, a.eb, mixer_param(m, s->k_bias), HR);
    if (s->use_gate) {
        gpu_matmul_forward_in(SR_MATH_, gpu_f32(a.g), gpu_f32(a.xn), mixer_param(m, s->k_gw), mixer_param(m, s->k_gb),
                              N, s->C, s->H);
        GPU_LAUNCH(sr_sigmoid_kernel, (size_t)N * s->H, a.g, (size_t)N * s->H);
    }
    SrChain ch = sr_chain_(m, s, s->use_bias ? a.eb : NULL);
    int S = state ? 1 : sr_segments_(T);
    dim3 grid((HR + 31) / 32, B), block(32, S);
    if (s->has_conv)
        GPU_LAUNCH_(sr_angles_kernel<SELROPE_CONV_K>, grid, block, a.cs, a.sn, a.c, a.f, state, stride, a.p, a.g, ch,
                    T);
    else GPU_LAUNCH_(sr_angles_kernel<0>, grid, block, a.cs, a.sn, a.c, a.f, state, stride, a.p, a.g, ch, T);
    KERNEL_CHECK();
}

void gpu_selrope_apply(const SelRopeOpts *s, float *acts, float *out, const float *inp, size_t ld, int B, int T) {
    GpuSrActs a;
    sr_layout_(s, B, T, acts, &a);
    size_t n = (size_t)B * T * s->HR;
    GPU_LAUNCH(sr_rotate_kernel, n, out, inp, a.cs, a.sn, n, s->HR, s->R, ld ? ld : 2 * (size_t)s->HR);
}

float *gpu_selrope_dtheta(const SelRopeOpts *s, float *scratch, int B, int T) {
    GpuSrWork w;
    sr_work_(s, B, T, scratch, &w);
    CUDA_CHECK(cudaMemset(w.dtheta, 0, (size_t)B * T * s->HR * sizeof(float)));
    return w.dtheta;
}

void gpu_selrope_apply_backward(const SelRopeOpts *s, float *acts, float *dinp, float *dtheta, const float *dout,
                                size_t ld, const float *out, size_t ld_out, int B, int T) {
    GpuSrActs a;
    sr_layout_(s, B, T, acts, &a);
    size_t n = (size_t)B * T * s->HR, packed = 2 * (size_t)s->HR;
    GPU_LAUNCH(sr_rotate_backward_kernel, n, dinp, dtheta, dout, ld ? ld : packed, out, ld_out ? ld_out : packed, a.cs,
               a.sn, n, s->HR, s->R);
}

void gpu_selrope_backward(Mixer *m, const SelRopeOpts *s, float *acts, float *scratch, float *dx, GpuAct x, int B,
                          int T) {
    (void)x;  // the backward reads the saved xn
    GpuSrActs a;
    sr_layout_(s, B, T, acts, &a);
    GpuSrWork w;
    sr_work_(s, B, T, scratch, &w);
    int N = B * T, HR = s->HR, K = s->has_conv ? SELROPE_CONV_K : 0;
    size_t n = (size_t)N * HR;
    SrChain ch = sr_chain_(m, s, s->use_bias ? a.eb : NULL);
    dim3 grid((HR + 31) / 32, B), block(32, sr_segments_(T));
    GPU_LAUNCH_(sr_angles_backward_kernel, grid, block, w.dtheta, w.dgate, a.f, s->use_gate ? a.g : NULL, ch, T);
    KERNEL_CHECK();
    if (s->use_bias) {  // phi += exp(bias): dbias = sum df exp(bias)
        CUDA_CHECK(cudaMemset(w.dsum, 0, (size_t)HR * sizeof(float)));
        gpu_colsum(w.dsum, NULL, gpu_f32(w.dtheta), NULL, NULL, NULL, N, HR, COLSUM_PLAIN);
        GPU_LAUNCH(sr_bias_grad_kernel, HR, mixer_grad(m, s->k_bias), w.dsum, mixer_param(m, s->k_bias), HR);
    }
    float *dp = K ? w.dp : w.dc;
    GPU_LAUNCH(sr_dconv_kernel, n, w.dc, w.dtheta, s->silu ? a.c : NULL, s->skip_conv, T, HR, n);
    if (K) {
        CUDA_CHECK(cudaMemset(dp, 0, n * sizeof(float)));
        gpu_conv1d_causal_backward(dp, mixer_grad(m, s->k_conv), NULL, w.dc, a.p, mixer_param(m, s->k_conv), B, T, HR,
                                   K);
    }
    // dxn: written by the projection's backward, then the gate's added
    if (!s->full_rank) {
        gpu_matmul_backward_in(SR_MATH_, gpu_f32(w.du), mixer_grad(m, s->k_w2), NULL, gpu_f32(dp), gpu_f32(a.u),
                               mixer_param(m, s->k_w2), N, s->rank, HR, 0);
        gpu_matmul_backward_in(SR_MATH_, gpu_f32(w.dxn), mixer_grad(m, s->k_w1), NULL, gpu_f32(w.du), gpu_f32(a.xn),
                               mixer_param(m, s->k_w1), N, s->C, s->rank, 0);
    } else {
        int Dh = s->Dh, nch = (N + SR_ROWS_ - 1) / SR_ROWS_;
        const float *nrm = a.w + (size_t)HR * Dh;
        GPU_LAUNCH(sr_full_dx_kernel, (size_t)N * s->H * Dh, w.dxn, dp, a.w, N, s->H, s->R, Dh);
        dim3 pg(gpu_blocks((size_t)HR * Dh, 256), nch);
        GPU_LAUNCH_(sr_full_dw_part_kernel, pg, 256, (double *)w.part, dp, a.xn, N, s->H, s->R, Dh);
        KERNEL_CHECK();
        GPU_LAUNCH(sr_full_dw_sum_kernel, HR * Dh, w.dw, (const double *)w.part, nch, HR * Dh);
        GPU_LAUNCH(sr_full_wgrad_kernel, HR, mixer_grad(m, s->k_w2), w.ud, w.dw, mixer_param(m, s->k_w2),
                   mixer_param(m, s->k_scale), nrm, HR, Dh, s->R);
        GPU_LAUNCH(sr_full_sgrad_kernel, s->H, mixer_grad(m, s->k_scale), w.ud, s->H, s->R);
    }
    if (s->use_gate) {
        size_t rows = (size_t)N * s->H;
        GPU_LAUNCH(sr_gate_grad_kernel, rows, w.dg, w.dgate, a.g, rows, s->R);
        gpu_matmul_backward_in(SR_MATH_, gpu_f32(w.dxn), mixer_grad(m, s->k_gw), mixer_grad(m, s->k_gb),
                               gpu_f32(w.dg), gpu_f32(a.xn), mixer_param(m, s->k_gw), N, s->C, s->H, 1);
    }
    gpu_l2norm_backward(dx, w.dxn, a.xn, a.xnrm, N * s->H, s->Dh, SR_L2_EPS, L2NORM_ADD);
}
