// KLA's information-form Kalman filter scan on the GPU (gpu/kalman.cuh): a warp per (b, channel), a lane per slot.
#include "gpu/kalman.cuh"

#include "gpu/common.cuh"

#define KW_ 8                   // warps (channels) of a block: the backward sums dk, dq over them in shared memory
#define KTB_ 8                  // tokens of dk, dq terms the backward's block collects between two of its sums
#define KSMEM_CAP_ (96 * 1024)  // the most dynamic shared memory the backward asks (every sm_80+ GPU opts in to it)

static __host__ __device__ __forceinline__ int nchunks_(int T, int chunk) { return (T + chunk - 1) / chunk; }
static int warps_(int M) { return M < KW_ ? M : KW_; }

// how the backward runs a shape: W warps a block, G = ceil(M / W) channel groups, chunks of L = min(chunk, T)
// tokens whose states stay in shared memory (in_smem) or in the scratch; smem: the bytes of dynamic shared memory.
// W drops from 8 to 4 where that keeps the states in shared memory; past that they go to the scratch with all 8
// warps (fewer warps would multiply the groups, and with them dk's and dq's partials).
typedef struct KPlan_ {
    int W, G, L, in_smem;
    size_t smem;
} KPlan_;

static KPlan_ bwd_plan_(int T, int M, int S, int chunk) {
    KPlan_ p;
    p.L = chunk < T ? chunk : T;
    size_t st = (size_t)(p.L + 1) * 2 * S * sizeof(float), gb = (size_t)KTB_ * 2 * S * sizeof(float);  // a warp's
    int W0 = warps_(M);
    p.W = W0;
    if (W0 * (st + gb) > KSMEM_CAP_ && W0 > 4) p.W = 4;
    p.in_smem = p.W * (st + gb) <= KSMEM_CAP_;
    if (!p.in_smem) p.W = W0;
    p.G = (M + p.W - 1) / p.W;
    p.smem = p.W * (gb + (p.in_smem ? st : 0));
    return p;
}

static void kalman_check_(int S, int chunk, const char *who) {
    if (S < 1 || S > GPU_KALMAN_MAX_S) gpu_fail_(who, "S outside 1..GPU_KALMAN_MAX_S", __FILE__, __LINE__);
    if (chunk < 1) gpu_fail_(who, "chunk < 1", __FILE__, __LINE__);
}

// ----------------------------------------------------------------------------
// one slot

// slot s of channel m's dynamics as the recursion uses them (nn/kalman.c's kalman_dyn_) and which floors hold
struct KSlot_ {
    float a2, p, ab;  // max(abar^2, floor), max(pbar, floor), abar
    bool fa, fp;      // abar^2 above the floor, pbar above it: the gradient reaches abar, pbar
};

static __device__ __forceinline__ KSlot_ kslot_(const float *abar, const float *pbar, size_t i) {
    float ab = abar[i], a2 = ab * ab, pb = pbar[i];
    return KSlot_{a2 > KALMAN_FLOOR ? a2 : KALMAN_FLOOR, pb > KALMAN_FLOOR ? pb : KALMAN_FLOOR, ab, a2 > KALMAN_FLOOR,
                  pb > KALMAN_FLOOR};
}
// a lane's slot past S: lambda stays finite, eta and every term it adds (k = q = 0) exactly 0
static __device__ __forceinline__ KSlot_ kslot_dummy_() { return KSlot_{1.0f, 1.0f, 0.0f, false, false}; }

// one token of one slot in place, nn/kalman.c's kalman_update_ with its products in its order; pv = prec v
static __device__ __forceinline__ void kupdate_(float &L, float &E, const KSlot_ &d, float pr, float pv, float k) {
    float inv = 1.0f / (d.a2 + d.p * L);
    float l = L * inv + pr * k * k;
    float e = d.ab * inv * E + k * pv;
    L = l, E = e;
}

// one token of the warp's channel: the lane's slots s = lane + 32 j (L, E in place, d their dynamics); kt, qt (S,)
// the token's k, q. Returns y = sum_s q eta / lambda to every lane, and yvar in *yv when want_var. The forward and
// the step both call this, so they agree bit for bit.
template <int SPL>
static __device__ __forceinline__ float ktoken_(float *L, float *E, const KSlot_ *d, float pr, float pv,
                                                const float *kt, const float *qt, int S, bool want_var, float *yv) {
    int lane = threadIdx.x & 31;
    float acc = 0.0f, accv = 0.0f;
    for (int j = 0; j < SPL; j++) {
        int s = lane + 32 * j;
        float kk = s < S ? kt[s] : 0.0f, qq = s < S ? qt[s] : 0.0f;
        kupdate_(L[j], E[j], d[j], pr, pv, kk);
        float il = 1.0f / L[j];
        acc += qq * E[j] * il;
        accv += qq * qq * il;
    }
    acc = warp_sum_(acc);
    if (want_var) *yv = warp_sum_(accv);
    return acc;
}

// ----------------------------------------------------------------------------
// forward and step

struct KFwd_ {
    float *y, *yvar, *ckpt;
    const float *v, *prec, *k, *q, *abar, *pbar;
    int T, M, S, chunk;
};

// grid (ceil(M / W), B), W warps: warp w of block (x, b) runs channel m = x W + w of row b over all T tokens
template <int SPL>
__global__ void __launch_bounds__(KW_ * 32) kalman_forward_kernel(const KFwd_ a) {
    int lane = threadIdx.x & 31, m = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), b = blockIdx.y;
    if (m >= a.M) return;  // a whole warp: no barrier follows
    int S = a.S, M = a.M, nch = nchunks_(a.T, a.chunk);
    KSlot_ d[SPL];
    float L[SPL], E[SPL];
    for (int j = 0; j < SPL; j++) {
        int s = lane + 32 * j;
        d[j] = s < S ? kslot_(a.abar, a.pbar, (size_t)m * S + s) : kslot_dummy_();
        L[j] = 1.0f, E[j] = 0.0f;
    }
    for (int t = 0; t < a.T; t++) {
        size_t row = (size_t)b * a.T + t, i = row * M + m;
        if (a.ckpt && t % a.chunk == 0) {  // the state before token t: (B, nch, M, 2, S) as on the CPU
            float *c = a.ckpt + (((size_t)b * nch + t / a.chunk) * M + m) * 2 * S;
            for (int j = 0; j < SPL; j++)
                if (lane + 32 * j < S) c[lane + 32 * j] = L[j], c[S + lane + 32 * j] = E[j];
        }
        float pr = a.prec[i], yv = 0.0f;
        float yy = ktoken_<SPL>(L, E, d, pr, pr * a.v[i], a.k + row * S, a.q + row * S, S, a.yvar != NULL, &yv);
        if (lane == 0) {
            a.y[i] = yy;
            if (a.yvar) a.yvar[i] = yv;
        }
    }
}

struct KStep_ {
    float *y, *yvar, *state;
    size_t stride;
    const float *v, *prec, *k, *q, *abar, *pbar;
    int M, S;
};

// the forward's grid and warps, one token, the state read from and written back to the host's layout
template <int SPL>
__global__ void __launch_bounds__(KW_ * 32) kalman_step_kernel(const KStep_ a) {
    int lane = threadIdx.x & 31, m = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), b = blockIdx.y;
    if (m >= a.M) return;
    int S = a.S;
    float *st = a.state + b * a.stride + (size_t)m * 2 * S;  // (2, S) [lambda | eta]
    KSlot_ d[SPL];
    float L[SPL], E[SPL];
    for (int j = 0; j < SPL; j++) {
        int s = lane + 32 * j;
        d[j] = s < S ? kslot_(a.abar, a.pbar, (size_t)m * S + s) : kslot_dummy_();
        L[j] = s < S ? st[s] : 1.0f, E[j] = s < S ? st[S + s] : 0.0f;
    }
    size_t i = (size_t)b * a.M + m;
    float pr = a.prec[i], yv = 0.0f;
    float yy = ktoken_<SPL>(L, E, d, pr, pr * a.v[i], a.k + (size_t)b * S, a.q + (size_t)b * S, S, a.yvar != NULL,
                            &yv);
    for (int j = 0; j < SPL; j++)
        if (lane + 32 * j < S) st[lane + 32 * j] = L[j], st[S + lane + 32 * j] = E[j];
    if (lane == 0) {
        a.y[i] = yy;
        if (a.yvar) a.yvar[i] = yv;
    }
}

// ----------------------------------------------------------------------------
// backward

struct KBwd_ {
    float *dv, *dprec;
    float *pdk, *pdq;  // (G, B, T, S) the groups' partial sums over their channels
    float *pda, *pdp;  // (B, M, S) the dynamics' gradients per row
    float *gst;        // (B, M, L + 1, 2, S) the chunks' states when they do not fit in shared memory, else NULL
    const float *dy, *dyvar, *ckpt, *v, *prec, *k, *q, *abar, *pbar;
    int B, T, M, S, chunk, L;
};

// chunk [t0, t1)'s states from its checkpoint: st[i] (2, S) = the state after token t0 + i - 1, i = 0 .. t1 - t0.
// A lane writes (and later reads) only its own slots, so no barrier is needed.
template <int SPL>
static __device__ __forceinline__ void krecompute_(float *st, const KBwd_ &a, const KSlot_ *d, int b, int m, int c,
                                                   int t0, int t1) {
    int lane = threadIdx.x & 31, S = a.S, M = a.M;
    size_t width = 2 * (size_t)S;
    const float *ck = a.ckpt + (((size_t)b * nchunks_(a.T, a.chunk) + c) * M + m) * width;
    float L[SPL], E[SPL];
    for (int j = 0; j < SPL; j++) {
        int s = lane + 32 * j;
        L[j] = s < S ? ck[s] : 1.0f, E[j] = s < S ? ck[S + s] : 0.0f;
        if (s < S) st[s] = L[j], st[S + s] = E[j];
    }
    for (int t = t0; t < t1; t++) {
        size_t row = (size_t)b * a.T + t, i = row * M + m;
        float pr = a.prec[i], pv = pr * a.v[i], *cur = st + (t - t0 + 1) * width;
        for (int j = 0; j < SPL; j++) {
            int s = lane + 32 * j;
            kupdate_(L[j], E[j], d[j], pr, pv, s < S ? a.k[row * S + s] : 0.0f);
            if (s < S) cur[s] = L[j], cur[S + s] = E[j];
        }
    }
}

// reverse mode through token t of the warp's channel (nn/kalman.c's loop body, the same expressions): prv, cur
// (2, S) the states before and after it; gL, gE the carried adjoints of (lambda, eta), da, dp the dynamics'
// gradients (in place); gb (2, S) receives the token's dk, dq terms; dv, dprec += the warp's sums over s
template <int SPL>
static __device__ __forceinline__ void ktoken_backward_(const KBwd_ &a, const KSlot_ *d, const float *prv,
                                                        const float *cur, float *gL, float *gE, float *da, float *dp,
                                                        float *gb, int b, int m, int t) {
    int lane = threadIdx.x & 31, S = a.S;
    size_t row = (size_t)b * a.T + t, i = row * a.M + m;
    float g = a.dy[i], gv = a.dyvar ? a.dyvar[i] : 0.0f, pr = a.prec[i], vv = a.v[i];
    float dpr = 0.0f, dvv = 0.0f;
    for (int j = 0; j < SPL; j++) {
        int s = lane + 32 * j;
        bool on = s < S;
        float kk = on ? a.k[row * S + s] : 0.0f, qq = on ? a.q[row * S + s] : 0.0f;
        float Lp = on ? prv[s] : 1.0f, Ep = on ? prv[S + s] : 0.0f;
        float Lc = on ? cur[s] : 1.0f, Ec = on ? cur[S + s] : 0.0f;
        float il = 1.0f / Lc, mean = Ec * il;
        // readout y += q eta / lambda, yvar += q^2 / lambda
        float ge_ = gE[j] + g * qq * il;
        float gl_ = gL[j] - (g * qq * mean + gv * qq * qq * il) * il;
        float dqs = g * mean + 2.0f * gv * qq * il;
        // evidence: eta += k prec v, lambda += prec k^2
        float dks = ge_ * pr * vv + 2.0f * gl_ * kk * pr;
        dpr += ge_ * kk * vv + gl_ * kk * kk;
        dvv += ge_ * kk * pr;
        // predict: lambda = lambda_p / den, eta = (abar / den) eta_p, den = A2 + P lambda_p
        float inv = 1.0f / (d[j].a2 + d[j].p * Lp), inv2 = inv * inv;
        float dalpha = ge_ * Ep;
        float dden = -(gl_ * Lp + dalpha * d[j].ab) * inv2;
        float da2 = d[j].fa ? dden : 0.0f;
        da[j] += dalpha * inv + 2.0f * d[j].ab * da2;
        dp[j] += d[j].fp ? dden * Lp : 0.0f;
        gL[j] = gl_ * inv + dden * d[j].p;  // lambda_p enters directly (1/den) and through den
        gE[j] = ge_ * d[j].ab * inv;
        if (on) gb[s] = dks, gb[S + s] = dqs;
    }
    dpr = warp_sum_(dpr);
    dvv = warp_sum_(dvv);
    if (lane == 0) {
        a.dprec[i] += dpr;
        a.dv[i] += dvv;
    }
}

// the block's dk, dq terms of tokens t .. t + n - 1 (in gbuf's slots n - 1 .. 0) summed over its nact warps in warp
// order into the group's partials; every thread of the block, between two barriers
static __device__ __forceinline__ void kflush_(const KBwd_ &a, const float *gbuf, int nact, int g, int b, int t,
                                               int n) {
    int S = a.S;
    __syncthreads();
    for (int e = threadIdx.x; e < n * 2 * S; e += blockDim.x) {
        int i = e / (2 * S), which = e / S % 2, s = e % S, slot = n - 1 - i;
        float sum = 0.0f;
        for (int w = 0; w < nact; w++) sum += gbuf[((w * KTB_ + slot) * 2 + which) * S + s];
        (which ? a.pdq : a.pdk)[(((size_t)g * a.B + b) * a.T + t + i) * S + s] = sum;
    }
    __syncthreads();  // gbuf is free again
}

// grid (G, B), W warps: warp w of block (g, b) runs channel m = g W + w of row b backwards over all T tokens. Warps
// past M (the last group's) only join the block's barriers.
template <int SPL>
__global__ void kalman_backward_kernel(const KBwd_ a) {
    GPU_DYNAMIC_SMEM(float, smem);
    int W = blockDim.x >> 5, w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = blockIdx.x, b = blockIdx.y;
    int S = a.S, T = a.T, M = a.M, m = g * W + w, nact = min(W, M - g * W), nch = nchunks_(T, a.chunk);
    bool active = w < nact;
    size_t width = 2 * (size_t)S;
    float *gbuf = smem;  // (W, KTB_, 2, S): each warp's dk, dq terms of the block's last KTB_ tokens
    float *st = NULL;    // (L + 1, 2, S): the warp's chunk states
    if (active)
        st = a.gst ? a.gst + ((size_t)b * M + m) * (a.L + 1) * width
                   : smem + (size_t)W * KTB_ * width + (size_t)w * (a.L + 1) * width;
    KSlot_ d[SPL];
    float gL[SPL], gE[SPL], da[SPL], dp[SPL];
    for (int j = 0; j < SPL; j++) {
        int s = lane + 32 * j;
        d[j] = active && s < S ? kslot_(a.abar, a.pbar, (size_t)m * S + s) : kslot_dummy_();
        gL[j] = gE[j] = da[j] = dp[j] = 0.0f;
    }
    for (int c = nch - 1; c >= 0; c--) {
        int t0 = c * a.chunk, t1 = min(t0 + a.chunk, T);
        if (active) krecompute_<SPL>(st, a, d, b, m, c, t0, t1);
        for (int t = t1 - 1; t >= t0; t--) {
            int slot = (T - 1 - t) % KTB_;  // the tokens' order of the walk, KTB_ of them between two flushes
            if (active) {
                const float *prv = st + (t - t0) * width;
                ktoken_backward_<SPL>(a, d, prv, prv + width, gL, gE, da, dp, gbuf + (w * KTB_ + slot) * width, b, m,
                                      t);
            }
            if (slot == KTB_ - 1 || t == 0) kflush_(a, gbuf, nact, g, b, t, slot + 1);
        }
    }
    if (active)
        for (int j = 0; j < SPL; j++) {
            int s = lane + 32 * j;
            if (s < S) a.pda[((size_t)b * M + m) * S + s] = da[j], a.pdp[((size_t)b * M + m) * S + s] = dp[j];
        }
}

// dk, dq (B,T,S) += the groups' partials summed in group order; n = B T S
__global__ void kalman_reduce_tokens_kernel(float *dk, float *dq, const float *pdk, const float *pdq, size_t n, int G) {
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    float sk = 0.0f, sq = 0.0f;
    for (int g = 0; g < G; g++) sk += pdk[(size_t)g * n + j], sq += pdq[(size_t)g * n + j];
    dk[j] += sk;
    dq[j] += sq;
}

// dabar, dpbar (M,S) += the rows' gradients summed over b in order, in double (as on the CPU); n = M S
__global__ void kalman_reduce_dyn_kernel(float *dabar, float *dpbar, const float *pda, const float *pdp, size_t n,
                                         int B) {
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    double sa = 0.0, sp = 0.0;
    for (int b = 0; b < B; b++) sa += pda[(size_t)b * n + j], sp += pdp[(size_t)b * n + j];
    dabar[j] += (float)sa;
    dpbar[j] += (float)sp;
}

// ----------------------------------------------------------------------------
// host

size_t gpu_kalman_ckpt_size(int B, int T, int M, int S, int chunk) {
    return (size_t)B * nchunks_(T, chunk) * M * 2 * S;
}

size_t gpu_kalman_scratch_size(int B, int T, int M, int S, int chunk) {
    KPlan_ p = bwd_plan_(T, M, S, chunk);
    size_t states = p.in_smem ? 0 : (size_t)B * M * (p.L + 1) * 2 * S;
    return 2 * (size_t)p.G * B * T * S + 2 * (size_t)B * M * S + states;
}

static void fwd_launch_(const KFwd_ &a, int B) {
    int W = warps_(a.M);
    dim3 grid((a.M + W - 1) / W, B);
    if (a.S > 32) kalman_forward_kernel<2><<<grid, 32 * W>>>(a);
    else kalman_forward_kernel<1><<<grid, 32 * W>>>(a);
    KERNEL_CHECK();
}

void gpu_kalman_scan_forward(float *y, float *yvar, float *ckpt, const float *v, const float *prec, const float *k,
                             const float *q, const float *abar, const float *pbar, int B, int T, int M, int S,
                             int chunk) {
    kalman_check_(S, chunk, "gpu_kalman_scan_forward");
    if (B <= 0 || T <= 0 || M <= 0) return;
    KFwd_ a = {y, yvar, ckpt, v, prec, k, q, abar, pbar, T, M, S, chunk};
    GPU_TIMED("kalman.fwd", fwd_launch_(a, B));
}

// raises a kernel's dynamic shared memory limit above the default 48 KB where it needs more
template <typename K>
static void smem_limit_(K kernel, size_t bytes) {
    if (bytes > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

static void bwd_launch_(const KBwd_ &a, const KPlan_ &p) {
    dim3 grid(p.G, a.B);
    if (a.S > 32) {
        smem_limit_(kalman_backward_kernel<2>, p.smem);
        kalman_backward_kernel<2><<<grid, 32 * p.W, p.smem>>>(a);
    } else {
        smem_limit_(kalman_backward_kernel<1>, p.smem);
        kalman_backward_kernel<1><<<grid, 32 * p.W, p.smem>>>(a);
    }
    KERNEL_CHECK();
}

void gpu_kalman_scan_backward(float *dv, float *dprec, float *dk, float *dq, float *dabar, float *dpbar,
                              const float *dy, const float *dyvar, const float *ckpt, const float *v, const float *prec,
                              const float *k, const float *q, const float *abar, const float *pbar, int B, int T, int M,
                              int S, int chunk, float *scratch) {
    kalman_check_(S, chunk, "gpu_kalman_scan_backward");
    if (B <= 0 || T <= 0 || M <= 0) return;
    KPlan_ p = bwd_plan_(T, M, S, chunk);
    size_t BTS = (size_t)B * T * S, MS = (size_t)M * S;
    float *pdk = scratch, *pdq = pdk + p.G * BTS, *pda = pdq + p.G * BTS, *pdp = pda + B * MS;
    float *gst = p.in_smem ? NULL : pdp + B * MS;
    KBwd_ a = {dv, dprec, pdk, pdq, pda, pdp, gst, dy, dyvar, ckpt, v, prec, k, q, abar, pbar, B, T, M, S, chunk, p.L};
    GPU_TIMED("kalman.bwd", bwd_launch_(a, p));
    GPU_TIMED("kalman.bwd.reduce", GPU_LAUNCH(kalman_reduce_tokens_kernel, BTS, dk, dq, pdk, pdq, BTS, p.G);
              GPU_LAUNCH(kalman_reduce_dyn_kernel, MS, dabar, dpbar, pda, pdp, MS, B));
}

static void step_launch_(const KStep_ &a, int B) {
    int W = warps_(a.M);
    dim3 grid((a.M + W - 1) / W, B);
    if (a.S > 32) kalman_step_kernel<2><<<grid, 32 * W>>>(a);
    else kalman_step_kernel<1><<<grid, 32 * W>>>(a);
    KERNEL_CHECK();
}

void gpu_kalman_step(float *y, float *yvar, float *state, size_t stride, const float *v, const float *prec,
                     const float *k, const float *q, const float *abar, const float *pbar, int B, int M, int S) {
    kalman_check_(S, 1, "gpu_kalman_step");
    if (B <= 0 || M <= 0) return;
    KStep_ a = {y, yvar, state, stride, v, prec, k, q, abar, pbar, M, S};
    GPU_TIMED("kalman.step", step_launch_(a, B));
}
