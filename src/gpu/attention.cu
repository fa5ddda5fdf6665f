// The `attention` mixer's device side (mixers/attention.c is the host side and the definition): x (B,T,C) ->
// qkv = x wqkv^T + bqkv (one (3HD, C) projection, rows [q | k | v]) -> q, k, v (B,H,T,D) -> qk_norm (per-head
// RMSNorm of q and k) -> RoPE on q, k (rope, decayed_rope; sc_rope with its per-head spectrum) -> tiled causal
// attention with the scheme's logit bias, post-softmax decay and window (gpu/flash_attn.cu) -> (B,T,HD) -> the
// (C, HD) output projection. fox adds F = cumsum_t logsigmoid(x wf^T + bf) per head, and its gradient back;
// selective_rope (gpu/selrope.cuh) turns the q and k rows of the projection before everything else.
// attention_gpu_check_ refuses pos path / path_fox and qk_norm other than the default (shared scales, eps 1e-6).
#include <math.h>

#include "gpu/common.cuh"
#include "gpu/flash_attn.cuh"
#include "gpu/mixer_gpu.cuh"
#include "gpu/rotary.cuh"
#include "gpu/selrope.cuh"
#include "gpu/matmul.cuh"
#include "gpu/norm.cuh"

extern "C" {
#include "mixers/gates.h"
#include "mixers/attention.h"
#include "nn/rotary.h"
}

static_assert(ATT_MAX_HEADS <= GPU_ATTN_MAX_HEADS, "the kernels' options hold a constant per head");

static int rotates_(const AttentionOpts *o) {
    return o->pos_kind == POS_ROPE || o->pos_kind == POS_DECAYED_ROPE || o->pos_kind == POS_SC_ROPE;
}
static int per_head_rope_(const AttentionOpts *o) { return o->pos_kind == POS_SC_ROPE; }
// qkv_heads_kernel does the permutations and RoPE in one pass: not with qk_norm (its norm comes between the two),
// and only for an even D (the kernel works on pairs)
static int fused_heads_(const AttentionOpts *o) { return !o->qk_norm && !o->sr.enabled && o->D % 2 == 0; }

static int attention_gpu_check_(const MixerSpec *s, int l, Err *e) {
    const AttentionOpts *o = (const AttentionOpts *)s->opts;
    if (o->path)
        return err_set(e, "layer %d: attention pos \"%s\" (PaTH) has no GPU kernels yet; with run.device cuda, "
                       "model.mixer.pos takes none, rope, alibi, fox, decayed_rope or sc_rope (or train on "
                       "run.device cpu)", l, o->pos);
    // the GPU's qk_norm is the default one: scales shared by the heads, eps 1e-6 (gpu_norm_forward's)
    if (o->qk_norm && o->qn_per_head)
        return err_set(e, "layer %d: attention qk_norm_scales \"per_head\" has no GPU kernels yet; with run.device "
                       "cuda, model.mixer.qk_norm_scales takes shared (or train on run.device cpu)", l);
    if (o->qk_norm && (float)o->qk_norm_eps != 1e-6f)
        return err_set(e, "layer %d: attention qk_norm_eps %g has no GPU kernels yet; with run.device cuda, "
                       "model.mixer.qk_norm_eps takes 1e-6 (or train on run.device cpu)", l, o->qk_norm_eps);
    if (!gpu_attn_supports(o->D))
        return err_set(e, "layer %d: attention head_dim %d: the GPU kernel takes head_dim 1..%d (model.mixer.heads / "
                       "head_dim)", l, o->D, GPU_ATTN_MAX_D);
    return 0;
}

// the kernels' options: mixers/attention.c's att_kernel_opts_ with the per-head constants copied in
static GpuAttnOpts kernel_opts_(const AttentionOpts *o, const float *fg_cum) {
    GpuAttnOpts k = {};
    k.scale = 1.0f / sqrtf((float)o->D);
    k.window = o->window;
    if (o->fgate) k.fgate = fg_cum;
    int decayed = o->pos_kind == POS_DECAYED_ROPE || o->pos_kind == POS_SC_ROPE;
    for (int h = 0; h < o->H; h++) {
        if (o->pos_kind == POS_ALIBI || (decayed && o->decay_logits)) k.slopes[h] = o->slopes[h];
        if (decayed && !o->decay_logits) k.decay[h] = o->decays[h];
    }
    return k;
}

// ----------------------------------------------------------------------------
// layout of the saved activations and of the scratch

typedef struct GpuAttActs {
    float *qh, *kh, *vh;       // (B,H,T,D) what the kernel saw (fp32 modes, and bf16's unfused path)
    float *oh;                 // (B,H,T,D) bf16: the kernel's output in fp32 (the backward's delta takes it)
    float *qb, *kb, *vb;       // (B,H,T,D) bf16 (__nv_bfloat16) in run.precision bf16: what the kernel saw
    float *lse;                // (B,H,T)
    float *o_lin;              // (B,T,HD) the kernel's output, the output projection's input (bf16 in bf16)
    float *cos_, *sin_;        // (T, D/2) the RoPE table, (T, H, D/2) with sc_rope's per-head spectrum
    float *freqs;              // (H, D/2) sc_rope's spectrum (a copy of the host's)
    float *q_lin, *k_lin;      // (B,H,T,D) q, k before qk_norm
    float *q_rstd, *k_rstd;    // (B,H,T) their norms' 1/rms
    float *fg_pre;             // (B,T,H) fox's forget-gate pre-activations
    float *fg_cum;             // (B,H,T) F = cumsum_t logsigmoid(pre)
    float *sr;                 // selective_rope's (gpu/selrope.cuh)
} GpuAttActs;

static size_t att_layout_(const AttentionOpts *o, int B, int T, float *base, GpuAttActs *a) {
    size_t big = (size_t)B * T * o->HD, heads = (size_t)B * T * o->H, half = o->D / 2;
    // bf16: the kernel's q, k, v in bf16 (half a float each), written straight by the fused permutation
    int bf = gpu_math() == GPU_BF16;
    size_t f32 = bf && fused_heads_(o) ? 0 : big, bfh = bf ? (big + 1) / 2 : 0;
    size_t rope = rotates_(o) ? (size_t)T * (per_head_rope_(o) ? o->H : 1) * half : 0;
    size_t freqs = per_head_rope_(o) ? (size_t)o->H * half : 0, qkn = o->qk_norm ? 1 : 0, fox = o->fgate ? 1 : 0;
    GpuSlot slots[] = {{&a->qh, f32},        {&a->kh, f32},        {&a->vh, f32},          {&a->oh, bf ? big : 0},
                 {&a->qb, bfh},        {&a->kb, bfh},        {&a->vb, bfh},
                 {&a->lse, heads},     {&a->o_lin, bf ? bfh : big},     {&a->cos_, rope},       {&a->sin_, rope},
                 {&a->freqs, freqs},   {&a->q_lin, qkn * big}, {&a->k_lin, qkn * big}, {&a->q_rstd, qkn * heads},
                 {&a->k_rstd, qkn * heads}, {&a->fg_pre, fox * heads}, {&a->fg_cum, fox * heads},
                 {&a->sr, gpu_selrope_act_size(&o->sr, B, T)}};
    return gpu_take_slots(slots, sizeof slots / sizeof slots[0], base);
}

// q, k or v (part 0, 1, 2) as the attention kernels take it: the bf16 copy in run.precision bf16, else fp32
static const void *kernel_in_(const GpuAttActs *a, int part) {
    if (gpu_math() == GPU_BF16) return part == 0 ? a->qb : part == 1 ? a->kb : a->vb;
    return part == 0 ? a->qh : part == 1 ? a->kh : a->vh;
}

static size_t attention_gpu_act_size_(const MixerSpec *s, int B, int T) {
    GpuAttActs a;
    return att_layout_((const AttentionOpts *)s->opts, B, T, NULL, &a);
}

// the kernel's fp32 output: o_lin's rows in fp32 modes, oh (packed) in bf16
static GpuHeads out_heads_(const GpuAttActs *a, int T, int H, int D) {
    if (gpu_math() == GPU_BF16) return gpu_heads_packed(a->oh, 0, H, T, D);
    return gpu_heads_rows(a->o_lin, 0, T, (size_t)H * D, 0, D);
}

// The scratch. Forward: qkv (BT,3HD) at its start. Backward: dqkv (BT,3HD) (do_lin (BT,HD) shares its space: it
// is read before dqkv is written); without the fused permutation dq, dk, dv (B,H,T,D) for the merge; doh
// (B,H,T,D), fp32's dout and the qk_norm backward's input gradient; dob, bf16's dout (bf16); delta (B,H,T); fox's
// dF (B,H,T) and dpre (B,T,H); selective_rope's backward scratch
typedef struct GpuAttScratch {
    float *dqkv, *dq, *dk, *dv, *doh, *dob, *delta, *dF, *dpre, *sr;
} GpuAttScratch;

static size_t scratch_layout_(const AttentionOpts *o, int B, int T, float *base, GpuAttScratch *s) {
    size_t big = (size_t)B * T * o->HD, heads = (size_t)B * T * o->H, fox = o->fgate ? heads : 0;
    int bf = gpu_math() == GPU_BF16, fused = fused_heads_(o);
    GpuSlot slots[] = {{&s->dqkv, 3 * big},        {&s->dq, fused ? 0 : big},  {&s->dk, fused ? 0 : big},
                     {&s->dv, fused ? 0 : big},  {&s->doh, bf && fused ? 0 : big}, {&s->dob, bf ? (big + 1) / 2 : 0},
                     {&s->delta, heads},         {&s->dF, fox},              {&s->dpre, fox},
                     {&s->sr, gpu_selrope_scratch_size(&o->sr, B, T)}};
    return gpu_take_slots(slots, sizeof slots / sizeof slots[0], base);
}

// decoding's buffers in the scratch (attention_gpu_step_): qkv (B,3HD), then q, k, v (B,HD each), fox's F (B,H) and
// qk_norm's 1/rms (B,H); the normed q, k and the output reuse qkv's space
static size_t step_scratch_(const AttentionOpts *o, int B) { return 6 * (size_t)B * o->HD + 2 * (size_t)B * o->H; }

static size_t attention_gpu_scratch_size_(const MixerSpec *s, int B, int T) {
    GpuAttScratch sc;
    size_t n = scratch_layout_((const AttentionOpts *)s->opts, B, T, NULL, &sc);
    size_t st = T == 1 ? step_scratch_((const AttentionOpts *)s->opts, B) : 0;
    return n > st ? n : st;
}

// ----------------------------------------------------------------------------
// kernels: head permutations, RoPE, fox's forget gates

// V consecutive elements (V = 4 when 4 divides D: every row of both layouts then starts 16-byte aligned), floats
// or bf16 either side
template <int V, typename DT, typename ST>
static __device__ __forceinline__ void copy_(DT *dst, const ST *src) {
    float v[V];
    load_elts_<V>(v, src);
    store_elts_<V>(dst, v);
}

// between the head layout (B,H,T,D) of HT and columns [col0, col0 + H·D) of the row layout (B,T,stride) of RT
// (float, or bf16: the bf16 kernels' dout), V elements per thread: merge 0
// splits (heads = rows' columns), merge 1 merges (rows' columns = heads)
template <int V, typename HT, typename RT>
__global__ void permute_heads_kernel(HT *heads, RT *rows, int stride, int col0, int B, int T, int H, int D,
                                     int merge) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V, n = (size_t)B * T * H * D;
    if (i >= n) return;
    int d = i % D, h = (i / D) % H;
    size_t bt = i / ((size_t)H * D);
    int t = bt % T, b = bt / T;
    HT *hp = heads + (((size_t)b * H + h) * T + t) * D + d;
    RT *rp = rows + bt * stride + col0 + (size_t)h * D + d;
    if (merge) copy_<V>(rp, hp);
    else copy_<V>(hp, rp);
}

// cos, sin (T, nh, half) of t·w, in double then rounded, as nn/rotary.c's table: w = freqs[h·half + k] (nh = H,
// sc_rope's per-head spectrum) or base^(-2k/D) (freqs NULL, nh = 1)
__global__ void rope_table_kernel(float *cos_, float *sin_, const float *freqs, int T, int nh, int half, double base,
                                  int D) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * nh * half) return;
    int t = i / (nh * half), hk = i % (nh * half);
    double w = freqs ? (double)freqs[hk] : pow(base, -2.0 * (hk % half) / (double)D);
    double angle = (double)t * w;
    cos_[i] = (float)cos(angle);
    sin_[i] = (float)sin(angle);
}

// x (B,H,T,D) rotated in place: pair k = (k, k + D/2) (half) or (2k, 2k+1) (interleaved); the table's rows are
// (T, H, D/2) with per_head, else (T, D/2); forward y0 = x0 c - x1 s, y1 = x0 s + x1 c; inverse (the backward)
// with s -> -s
__global__ void rope_kernel(float *x, const float *cos_, const float *sin_, size_t rows, int T, int H, int D,
                            int per_head, int half_layout, float sign) {
    int half = D / 2;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * half) return;
    size_t row = i / half;
    int k = i % half, t = row % T, h = (row / T) % H;
    size_t ti = ((size_t)t * (per_head ? H : 1) + (per_head ? h : 0)) * half + k;
    float *p = x + row * D;
    int i0 = half_layout ? k : 2 * k, i1 = half_layout ? k + half : 2 * k + 1;
    rope_pair_(p[i0], p[i1], cos_[ti], sign * sin_[ti]);
}

// the qkv rows (B,T,3HD) of RT (the projection's output: floats, or bf16 in run.precision bf16) plus the bias
// (3HD,) (may be NULL; the projection leaves it out, so no pass of its own adds it) split into q, k, v in the
// head layout (B,H,T,D) of HT (float, or bf16 for the bf16 kernels) in one pass, q and k rotated on the way (ROT:
// RoPE with rope_kernel's table and pairs). A thread per V pairs (b, t, h, k..k+V-1): V 4 takes the half
// layout's pairs (k, k + D/2) four at a time in 16-byte loads (D/2 a multiple of 4). The same sums and products
// as the bias, permute and rope_kernel passes, so the same bits (in bf16, the same bits rounded).
// (The backward's merge is the attention kernels' epilogue: gpu/flash_attn.cu's write_rows_.)
template <bool ROT, int V, typename HT, typename RT>
__global__ void qkv_heads_kernel(HT *qh, HT *kh, HT *vh, const RT *qkv, const float *bias, const float *cos_,
                                 const float *sin_, int B, int T, int H, int D, int per_head, int half_layout) {
    int half = D / 2;
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (i >= (size_t)B * T * H * half) return;
    int k = i % half, h = (i / half) % H;
    size_t bt = i / ((size_t)H * half);
    int t = bt % T, b = bt / T;
    int i0 = half_layout ? k : 2 * k, i1 = half_layout ? k + half : 2 * k + 1;
    float c[V], s[V];
    if (ROT) {
        size_t ti = ((size_t)t * (per_head ? H : 1) + (per_head ? h : 0)) * half + k;
        load_elts_<V>(c, cos_ + ti);
        load_elts_<V>(s, sin_ + ti);
    }
    size_t hrow = (((size_t)b * H + h) * T + t) * D;
    const RT *row = qkv + bt * 3 * (size_t)H * D + (size_t)h * D;
    HT *heads[3] = {qh, kh, vh};
    for (int part = 0; part < 3; part++) {
        HT *hp = heads[part] + hrow;
        const RT *rp = row + (size_t)part * H * D;
        float x0[V], x1[V];
        load_elts_<V>(x0, rp + i0), load_elts_<V>(x1, rp + i1);
        if (bias) {  // a parameter tensor: not always 16-byte aligned
            const float *b = bias + (size_t)part * H * D + (size_t)h * D;
            for (int e = 0; e < V; e++) x0[e] += b[i0 + e], x1[e] += b[i1 + e];
        }
        if (ROT && part < 2)
            for (int e = 0; e < V; e++) rope_pair_(x0[e], x1[e], c[e], s[e]);
        store_elts_<V>(hp + i0, x0), store_elts_<V>(hp + i1, x1);
    }
}

// fox: F (B,H,T) = cumsum over t of logsigmoid(pre (B,T,H)), summed in double as mixers/attention.c does (a thread
// per (b, h); mixers/gates.h's log-sigmoid)
__global__ void fox_cumsum_kernel(float *F, const float *pre, int B, int T, int H) {
    int bh = blockIdx.x * blockDim.x + threadIdx.x;
    if (bh >= B * H) return;
    int b = bh / H, h = bh % H;
    double acc = 0.0;
    for (int t = 0; t < T; t++) {
        double x = pre[((size_t)b * T + t) * H + h];
        acc += mixer_logsigmoid(x);
        F[(size_t)bh * T + t] = (float)acc;
    }
}

// its backward: dpre (B,T,H) = sigmoid(-pre) · sum_{t' >= t} dF[t'] (d logsigmoid(z)/dz = sigmoid(-z)), the
// suffix sums in double in the CPU's order
__global__ void fox_backward_kernel(float *dpre, const float *dF, const float *pre, int B, int T, int H) {
    int bh = blockIdx.x * blockDim.x + threadIdx.x;
    if (bh >= B * H) return;
    int b = bh / H, h = bh % H;
    double acc = 0.0;
    for (int t = T - 1; t >= 0; t--) {
        size_t at = ((size_t)b * T + t) * H + h;
        acc += dF[(size_t)bh * T + t];
        dpre[at] = (float)(acc * mixer_sigmoid(-(double)pre[at]));
    }
}

// fox's F into a.fg_cum: the gate projection pre = x wf^T + bf (B,T,H), then the cumulative log-sigmoid
static void fox_forward_(Mixer *m, const GpuAttActs *a, GpuAct x, int B, int T) {
    const AttentionOpts *o = (const AttentionOpts *)m->spec->opts;
    gpu_matmul_forward(gpu_f32(a->fg_pre), x, mixer_param(m, o->k_fw), mixer_param(m, o->k_fb), B * T, m->spec->C, o->H);
    fox_cumsum_kernel<<<gpu_blocks((size_t)B * o->H, 64), 64>>>(a->fg_cum, a->fg_pre, B, T, o->H);
    KERNEL_CHECK();
}

// its backward from dF (B,H,T): dpre (B,T,H) scratch, then the projection's gradients and dx (+=)
static void fox_backward_(Mixer *m, float *dx, float *dpre, const float *dF, const GpuAttActs *a, GpuAct x, int B,
                          int T) {
    const AttentionOpts *o = (const AttentionOpts *)m->spec->opts;
    fox_backward_kernel<<<gpu_blocks((size_t)B * o->H, 64), 64>>>(dpre, dF, a->fg_pre, B, T, o->H);
    KERNEL_CHECK();
    gpu_matmul_backward(gpu_f32(dx), mixer_grad(m, o->k_fw), mixer_grad(m, o->k_fb), gpu_f32(dpre), x, mixer_param(m, o->k_fw), B * T,
                        m->spec->C, o->H, 1);
}

template <typename HT, typename RT>
static void permute_(HT *heads, RT *rows, int stride, int col0, int B, int T, int H, int D, int merge) {
    size_t n = (size_t)B * T * H * D;
    if (D % 4 == 0)
        permute_heads_kernel<4, HT, RT><<<gpu_blocks(n / 4, 256), 256>>>(heads, rows, stride, col0, B, T, H, D, merge);
    else
        permute_heads_kernel<1, HT, RT><<<gpu_blocks(n, 256), 256>>>(heads, rows, stride, col0, B, T, H, D, merge);
    KERNEL_CHECK();
}

// qkv_heads_kernel for o's scheme (RoPE or none), four pairs a thread in the half layout when D/2 allows
template <bool ROT, int V, typename HT, typename RT>
static void qkv_heads_launch_(HT *qh, HT *kh, HT *vh, const RT *qkv, const float *bias, const GpuAttActs *a,
                              const AttentionOpts *o, int B, int T) {
    size_t n = (size_t)B * T * o->H * (o->D / 2) / V;
    qkv_heads_kernel<ROT, V, HT, RT><<<gpu_blocks(n, 256), 256>>>(qh, kh, vh, qkv, bias, ROT ? a->cos_ : nullptr,
                                                                 ROT ? a->sin_ : nullptr, B, T, o->H, o->D,
                                                                 per_head_rope_(o), !ROT || o->layout == ROTARY_HALF);
    KERNEL_CHECK();
}

template <typename HT, typename RT>
static void qkv_heads_(HT *qh, HT *kh, HT *vh, const RT *qkv, const float *bias, const GpuAttActs *a,
                       const AttentionOpts *o, int B, int T) {
    // the rows, heads and table then all start 16-byte aligned (the arena's slots are 256-byte aligned); without
    // RoPE the pairs are any split of the row, so the half layout's
    int vec = (o->layout == ROTARY_HALF || !rotates_(o)) && (o->D / 2) % 4 == 0;
    if (rotates_(o) && vec) qkv_heads_launch_<true, 4>(qh, kh, vh, qkv, bias, a, o, B, T);
    else if (rotates_(o)) qkv_heads_launch_<true, 1>(qh, kh, vh, qkv, bias, a, o, B, T);
    else if (vec) qkv_heads_launch_<false, 4>(qh, kh, vh, qkv, bias, a, o, B, T);
    else qkv_heads_launch_<false, 1>(qh, kh, vh, qkv, bias, a, o, B, T);
}

static void rope_(float *x, const GpuAttActs *a, const AttentionOpts *o, int B, int T, float sign) {
    size_t rows = (size_t)B * o->H * T;
    rope_kernel<<<gpu_blocks(rows * (o->D / 2), 256), 256>>>(x, a->cos_, a->sin_, rows, T, o->H, o->D,
                                                            per_head_rope_(o), o->layout == ROTARY_HALF, sign);
    KERNEL_CHECK();
}

static void rope_table_(const GpuAttActs *a, const AttentionOpts *o, int T) {
    int half = o->D / 2, nh = per_head_rope_(o) ? o->H : 1;
    if (per_head_rope_(o))  // the host's spectrum (mixers/attention.c's check built it); no host wait
        CUDA_CHECK(cudaMemcpyAsync(a->freqs, o->freqs, (size_t)o->H * half * sizeof(float), cudaMemcpyHostToDevice,
                                   0));
    // the config's base is a double, nn/rotary.h's a float: round it the same way
    rope_table_kernel<<<gpu_blocks((size_t)T * nh * half, 256), 256>>>(a->cos_, a->sin_, a->freqs, T, nh, half,
                                                                      (double)(float)o->rope_base, o->D);
    KERNEL_CHECK();
}

// ----------------------------------------------------------------------------
// decoding with a key/value cache: mixers/attention.c's att_step_ and nn/attention_step.c over device buffers.
// One sequence's state (the host's layout): [F (H doubles as 2H floats, fox) | kc (H,S,D) | vc (H,S,D) | gc (H,S),
// fox] with position j in slot j % S.

// fox: F (a double per head in the state) += logsigmoid(pre); g (B,H) = F rounded, what the cache keeps
__global__ void fox_step_kernel(float *g, float *state, size_t stride, const float *pre, int B, int H) {
    int bh = blockIdx.x * blockDim.x + threadIdx.x;
    if (bh >= B * H) return;
    double *F = (double *)(state + (size_t)(bh / H) * stride) + bh % H;  // 8-byte aligned: stride, offsets even
    double f = *F + mixer_logsigmoid((double)pre[bh]);
    *F = f;
    g[bh] = (float)f;
}

#define ATT_STEP_THREADS 128
#define ATT_STEP_TILE 256  // keys scored at a time; the softmax is carried from tile to tile (online)

// a block per (b,h): the token's k, v (and F) into slot t % S, then the keys j0..t in tiles: logits (scale q.k, the
// scheme's slope and fox's F_t - F_j), the running max and sum, and the values' weighted sum with the post-softmax
// decay (left out of the sum, as the host's); thread i owns output channels i and i + ATT_STEP_THREADS (D <= 256)
__global__ void attn_step_kernel(float *out, const float *q, const float *k, const float *v, const float *g,
                                 float *state, size_t stride, size_t fixed, GpuAttnOpts ko, int t, int H, int D,
                                 int S) {
    __shared__ float qs[2 * ATT_STEP_THREADS], sc[ATT_STEP_TILE], red[2];
    int bh = blockIdx.x, b = bh / H, h = bh % H, tid = threadIdx.x, HD = H * D;
    float *seq = state + b * stride + fixed;
    float *kc = seq + (size_t)h * S * D, *vc = seq + (size_t)S * HD + (size_t)h * S * D;
    float *gc = g ? seq + 2 * (size_t)S * HD + (size_t)h * S : NULL;
    int j0 = t - S + 1;
    if (ko.window > 0 && t - ko.window + 1 > j0) j0 = t - ko.window + 1;
    if (j0 < 0) j0 = 0;
    int slot = t % S;
    size_t x = (size_t)bh * D;
    for (int i = tid; i < D; i += blockDim.x) {
        kc[(size_t)slot * D + i] = k[x + i];
        vc[(size_t)slot * D + i] = v[x + i];
        qs[i] = q[x + i];
    }
    float Ft = g ? g[bh] : 0.0f;
    if (gc && tid == 0) gc[slot] = Ft;
    __syncthreads();
    float slope = ko.slopes[h], decay = ko.decay[h], m = -INFINITY, l = 0.0f, acc[2] = {0.0f, 0.0f};
    for (int base = j0; base <= t; base += ATT_STEP_TILE) {
        int n = min(ATT_STEP_TILE, t + 1 - base);
        for (int jj = tid; jj < n; jj += blockDim.x) {
            int j = base + jj;
            const float *kj = kc + (size_t)(j % S) * D;
            float d = 0.0f;
            for (int i = 0; i < D; i++) d += qs[i] * kj[i];
            float s = ko.scale * d - slope * (float)(t - j);
            if (gc) s += Ft - gc[j % S];
            sc[jj] = s;
        }
        __syncthreads();
        if (tid == 0) {
            float mx = m;
            for (int jj = 0; jj < n; jj++) mx = fmaxf(mx, sc[jj]);
            red[0] = mx;
        }
        __syncthreads();
        float mn = red[0], corr = expf(m - mn);  // m = -inf on the first tile: corr 0, nothing to rescale
        for (int jj = tid; jj < n; jj += blockDim.x) sc[jj] = expf(sc[jj] - mn);
        __syncthreads();
        if (tid == 0) {
            float sum = 0.0f;
            for (int jj = 0; jj < n; jj++) sum += sc[jj];
            red[1] = sum;
        }
        for (int r = 0; r < 2; r++) {
            int i = tid + r * blockDim.x;
            if (i >= D) break;
            float a = acc[r] * corr;
            for (int jj = 0; jj < n; jj++) {
                int j = base + jj;
                float w = decay > 0.0f ? sc[jj] * expf(-decay * (float)(t - j)) : sc[jj];
                a += w * vc[(size_t)(j % S) * D + i];
            }
            acc[r] = a;
        }
        __syncthreads();
        l = l * corr + red[1];
        m = mn;
    }
    for (int r = 0; r < 2; r++) {
        int i = tid + r * blockDim.x;
        if (i < D) out[x + i] = acc[r] / l;
    }
}

// ----------------------------------------------------------------------------
// forward, backward

static void attention_gpu_forward_(Mixer *m, float *y, GpuAct x, int B, int T) {
    const AttentionOpts *o = (const AttentionOpts *)m->spec->opts;
    int C = m->spec->C, H = o->H, D = o->D, HD = o->HD, BT = B * T;
    GpuAttActs a;
    att_layout_(o, B, T, m->acts, &a);
    // qkv (BT,3HD): with the fused split its bias is added there, and in bf16 the projection writes bf16
    float *qkv = m->scratch;
    int bf = gpu_math() == GPU_BF16;
    const float *bqkv = o->bias ? mixer_param(m, o->k_bqkv) : NULL;
    GPU_TIMED("attn.qkv.forward", gpu_matmul_forward(gpu_act(qkv, bf && fused_heads_(o)), x, mixer_param(m, o->k_wqkv),
                                                     fused_heads_(o) ? NULL : bqkv, BT, C, 3 * HD));
    if (rotates_(o)) GPU_TIMED("attn.rope", rope_table_(&a, o, T));
    if (o->sr.enabled)  // q and k rows turned in place before the permutation (and before qk_norm, as on the host)
        GPU_TIMED("attn.selrope", {
            gpu_selrope_forward(m, &o->sr, a.sr, x, B, T, NULL, 0);
            gpu_selrope_apply(&o->sr, a.sr, qkv, qkv, 3 * (size_t)HD, B, T);
            gpu_selrope_apply(&o->sr, a.sr, qkv + HD, qkv + HD, 3 * (size_t)HD, B, T);
        });
    __nv_bfloat16 *qb = (__nv_bfloat16 *)a.qb, *kb = (__nv_bfloat16 *)a.kb, *vb = (__nv_bfloat16 *)a.vb;
    if (fused_heads_(o)) {  // and RoPE; bf16: straight to the bf16 copies
        if (bf) GPU_TIMED("attn.permute", qkv_heads_(qb, kb, vb, (const __nv_bfloat16 *)qkv, bqkv, &a, o, B, T));
        else GPU_TIMED("attn.permute", qkv_heads_(a.qh, a.kh, a.vh, (const float *)qkv, bqkv, &a, o, B, T));
    } else {
        // qk_norm: q, k land in q_lin, k_lin first; the norm writes what the kernel sees (rows of D in either
        // layout), then RoPE rotates that
        float *dst[3] = {o->qk_norm ? a.q_lin : a.qh, o->qk_norm ? a.k_lin : a.kh, a.vh};
        for (int part = 0; part < 3; part++)
            GPU_TIMED("attn.permute", permute_(dst[part], qkv, 3 * HD, part * HD, B, T, H, D, 0));
        if (o->qk_norm) {
            GPU_TIMED("attn.qk_norm", gpu_norm_forward(gpu_f32(a.qh), NULL, a.q_rstd, a.q_lin, mixer_param(m, o->k_qn), NULL,
                                                       BT * H, D, 1));
            GPU_TIMED("attn.qk_norm", gpu_norm_forward(gpu_f32(a.kh), NULL, a.k_rstd, a.k_lin, mixer_param(m, o->k_kn), NULL,
                                                       BT * H, D, 1));
        }
        if (rotates_(o)) {
            GPU_TIMED("attn.rope", rope_(a.qh, &a, o, B, T, 1.0f));
            GPU_TIMED("attn.rope", rope_(a.kh, &a, o, B, T, 1.0f));
        }
        if (bf) {
            size_t big = (size_t)BT * HD;
            GPU_TIMED("attn.permute", gpu_to_bf16(qb, a.qh, big));
            GPU_TIMED("attn.permute", gpu_to_bf16(kb, a.kh, big));
            GPU_TIMED("attn.permute", gpu_to_bf16(vb, a.vh, big));
        }
    }
    if (o->fgate) GPU_TIMED("attn.fgate", fox_forward_(m, &a, x, B, T));
    GpuAttnOpts ko = kernel_opts_(o, a.fg_cum);
    // the output straight into the output projection's input rows; bf16 there and fp32 in oh
    GpuHeads out = out_heads_(&a, T, H, D), rows = gpu_heads_rows(a.o_lin, 1, T, HD, 0, D);
    GPU_TIMED_FLOPS("attn.kernel.forward", gpu_attention_flops(&ko, B, H, T, D, 2),
                    gpu_attention_forward(&out, bf ? &rows : NULL, a.lse, kernel_in_(&a, 0), kernel_in_(&a, 1),
                                          kernel_in_(&a, 2), &ko, B, H, T, D));
    GPU_TIMED("attn.out.forward", gpu_matmul_forward(gpu_f32(y), gpu_act(a.o_lin, bf), mixer_param(m, o->k_wo),
                                                     o->bias ? mixer_param(m, o->k_bo) : NULL, BT, HD, C));
}

// one token at position t for B sequences (mixers/attention.c's att_step_): qkv (one projection with its bias), qk_norm,
// RoPE at t, fox's F, the cached attention, the output projection
static void attention_gpu_step_(Mixer *m, float *state, float *y, GpuAct x, int B, int t, int cap) {
    const AttentionOpts *o = (const AttentionOpts *)m->spec->opts;
    int C = m->spec->C, H = o->H, D = o->D, HD = o->HD;
    int S = o->window > 0 && o->window < cap ? o->window : cap;
    // the state's fixed part: [fox's F (2H) | selective_rope's], then the caches
    size_t n = m->spec->ops->state_size(m->spec, cap), fsz = o->fgate ? 2 * (size_t)H : 0, bd = (size_t)B * HD;
    size_t fixed = fsz + selrope_state_size(&o->sr);
    // the scratch (step_scratch_): qkv (B,3HD) | q, k, v (B,H,1,D) | F (B,H) | 1/rms (B,H)
    float *qkv = m->scratch, *q = qkv + 3 * bd, *k = q + bd, *v = k + bd, *g = v + bd, *rstd = g + (size_t)B * H;
    GPU_TIMED("attn.qkv.forward", gpu_matmul_forward(gpu_f32(qkv), x, mixer_param(m, o->k_wqkv),
                                                     o->bias ? mixer_param(m, o->k_bqkv) : NULL, B, C, 3 * HD));
    if (o->sr.enabled) {
        GpuAttActs a;
        att_layout_(o, B, 1, m->acts, &a);
        GPU_TIMED("attn.selrope", {
            gpu_selrope_forward(m, &o->sr, a.sr, x, B, 1, state + fsz, n);
            gpu_selrope_apply(&o->sr, a.sr, qkv, qkv, 3 * (size_t)HD, B, 1);
            gpu_selrope_apply(&o->sr, a.sr, qkv + HD, qkv + HD, 3 * (size_t)HD, B, 1);
        });
    }
    float *dst[3] = {q, k, v};
    for (int part = 0; part < 3; part++)
        GPU_TIMED("attn.permute", permute_(dst[part], qkv, 3 * HD, part * HD, B, 1, H, D, 0));
    if (o->qk_norm) {  // into qkv's first two thirds, free now
        GPU_TIMED("attn.qk_norm", {
            gpu_norm_forward(gpu_f32(qkv), NULL, rstd, q, mixer_param(m, o->k_qn), NULL, B * H, D, 1);
            gpu_norm_forward(gpu_f32(qkv + bd), NULL, rstd, k, mixer_param(m, o->k_kn), NULL, B * H, D, 1);
        });
        q = qkv, k = qkv + bd;
    }
    if (rotates_(o)) {
        GpuAttActs a;
        att_layout_(o, B, 1, m->acts, &a);
        RotaryCfg rc = {o->layout, (float)o->rope_base, NULL};
        if (per_head_rope_(o)) {  // the host's spectrum on the device
            CUDA_CHECK(cudaMemcpy(a.freqs, o->freqs, (size_t)H * (D / 2) * sizeof(float), cudaMemcpyHostToDevice));
            rc.freqs = a.freqs;
        }
        GPU_TIMED("attn.rope", {
            gpu_rotary_forward(q, q, &rc, t, B, 1, H, D);
            gpu_rotary_forward(k, k, &rc, t, B, 1, H, D);
        });
    }
    if (o->fgate)  // g holds the gate's pre-activations, then F in place
        GPU_TIMED("attn.fgate", {
            gpu_matmul_forward(gpu_f32(g), x, mixer_param(m, o->k_fw), mixer_param(m, o->k_fb), B, C, H);
            fox_step_kernel<<<gpu_blocks((size_t)B * H, 64), 64>>>(g, state, n, g, B, H);
            KERNEL_CHECK();
        });
    float *out = qkv + 2 * bd;  // v's third of qkv: v is packed apart
    GpuAttnOpts ko = kernel_opts_(o, NULL);
    GPU_TIMED("attn.step", {
        attn_step_kernel<<<B * H, ATT_STEP_THREADS>>>(out, q, k, v, o->fgate ? g : NULL, state, n, fixed, ko, t, H, D,
                                                      S);
        KERNEL_CHECK();
    });
    GPU_TIMED("attn.out.forward", gpu_matmul_forward(gpu_f32(y), gpu_f32(out), mixer_param(m, o->k_wo),
                                                     o->bias ? mixer_param(m, o->k_bo) : NULL, B, HD, C));
}

static void attention_gpu_backward_(Mixer *m, float *dx, const float *dy, GpuAct x, int B, int T) {
    const AttentionOpts *o = (const AttentionOpts *)m->spec->opts;
    int C = m->spec->C, H = o->H, D = o->D, HD = o->HD, BT = B * T;
    size_t big = (size_t)BT * HD;
    GpuAttActs a;
    att_layout_(o, B, T, m->acts, &a);
    GpuAttScratch sc;
    scratch_layout_(o, B, T, m->scratch, &sc);
    float *dqkv = sc.dqkv, *dq = sc.dq, *dk = sc.dk, *dv = sc.dv, *doh = sc.doh, *do_lin = sc.dqkv;
    int bf = gpu_math() == GPU_BF16;
    // y = o_lin wo^T + bo
    GPU_TIMED("attn.out.backward", gpu_matmul_backward(gpu_f32(do_lin), mixer_grad(m, o->k_wo), o->bias ? mixer_grad(m, o->k_bo) : NULL,
                                                       gpu_f32(dy), gpu_act(a.o_lin, bf), mixer_param(m, o->k_wo), BT,
                                                       HD, C, 0));
    // bf16: the kernels take dout in bf16, as q, k, v
    __nv_bfloat16 *dob = (__nv_bfloat16 *)sc.dob;
    if (bf) GPU_TIMED("attn.permute", permute_(dob, do_lin, HD, 0, B, T, H, D, 0));
    else GPU_TIMED("attn.permute", permute_(doh, do_lin, HD, 0, B, T, H, D, 0));
    GpuAttnOpts ko = kernel_opts_(o, a.fg_cum);
    // dq, dk, dv: with the fused permutation, straight into the qkv projection's dout rows (bf16 in bf16: the same
    // bits as converting after), dq and dk through R^T (the inverse rotation) on the way; else packed, merged below
    GpuHeads out = out_heads_(&a, T, H, D), dst[3];
    float *packed[3] = {dq, dk, dv};
    for (int part = 0; part < 3; part++) {
        if (!fused_heads_(o)) {
            dst[part] = gpu_heads_packed(packed[part], 0, H, T, D);
            continue;
        }
        dst[part] = gpu_heads_rows(dqkv, bf, T, 3 * (size_t)HD, (size_t)part * HD, D);
        if (part < 2 && rotates_(o))
            gpu_heads_rotate(&dst[part], a.cos_, a.sin_, per_head_rope_(o), o->layout == ROTARY_HALF, -1.0f);
    }
    // timed inside, per kernel (attn.kernel.delta, .dq, .dkdv)
    gpu_attention_backward(&dst[0], &dst[1], &dst[2], sc.dF, sc.delta, bf ? (const void *)dob : doh, &out,
                           a.lse, kernel_in_(&a, 0), kernel_in_(&a, 1), kernel_in_(&a, 2), &ko, B, H, T, D);
    GpuAct dqkv_in = gpu_act(dqkv, bf && fused_heads_(o));
    if (!fused_heads_(o)) {
        if (rotates_(o)) {
            GPU_TIMED("attn.rope", rope_(dq, &a, o, B, T, -1.0f));
            GPU_TIMED("attn.rope", rope_(dk, &a, o, B, T, -1.0f));
        }
        float *src[3] = {dq, dk, dv};
        for (int part = 0; part < 3; part++) {
            if (part < 2 && o->qk_norm) {
                // the norm's backward accumulates into its input gradient: doh (free since the kernel's backward)
                // is zeroed for it, and becomes what goes back through the permutation
                int kn = part ? o->k_kn : o->k_qn;
                const float *lin = part ? a.k_lin : a.q_lin, *rstd = part ? a.k_rstd : a.q_rstd;
                CUDA_CHECK(cudaMemset(doh, 0, big * sizeof(float)));
                GPU_TIMED("attn.qk_norm", gpu_norm_backward(doh, mixer_grad(m, kn), NULL, src[part], lin,
                                                            mixer_param(m, kn), NULL, rstd, BT * H, D, 1));
                src[part] = doh;
            }
            GPU_TIMED("attn.permute", permute_(src[part], dqkv, 3 * HD, part * HD, B, T, H, D, 1));
        }
    }
    if (o->sr.enabled)  // dq, dk rows back through the rotation, in place; the rotated rows (what the norm or the kernel
        // took) merged into doh, free now
        GPU_TIMED("attn.selrope", {
            float *dth = gpu_selrope_dtheta(&o->sr, sc.sr, B, T);
            for (int part = 0; part < 2; part++) {
                float *rot = o->qk_norm ? (part ? a.k_lin : a.q_lin) : (part ? a.kh : a.qh);
                permute_(rot, doh, HD, 0, B, T, H, D, 1);
                gpu_selrope_apply_backward(&o->sr, a.sr, dqkv + part * HD, dth, dqkv + part * HD, 3 * (size_t)HD, doh,
                                           0, B, T);
            }
        });
    GPU_TIMED("attn.qkv.backward", gpu_matmul_backward(gpu_f32(dx), mixer_grad(m, o->k_wqkv), o->bias ? mixer_grad(m, o->k_bqkv) : NULL,
                                                       dqkv_in, x, mixer_param(m, o->k_wqkv), BT, C, 3 * HD, 1));
    if (o->sr.enabled) GPU_TIMED("attn.selrope", gpu_selrope_backward(m, &o->sr, a.sr, sc.sr, dx, x, B, T));
    if (o->fgate) GPU_TIMED("attn.fgate", fox_backward_(m, dx, sc.dpre, sc.dF, &a, x, B, T));
}

const GpuMixerOps GPU_MIXER_ATTENTION = {
    "attention",
    attention_gpu_check_,
    attention_gpu_act_size_,
    attention_gpu_scratch_size_,
    attention_gpu_forward_,
    attention_gpu_backward_,
    attention_gpu_step_,
};
