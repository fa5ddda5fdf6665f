// The linear-recurrence engine on the GPU (gpu/linrec.cuh): nn/linrec.c's chunkwise algorithm split into kernels
// that each parallelise one thing, FLA's layout of the chunk kernels (the backward's are in gpu/linrec_backward.cu):
//
//   outer      grid (chunks, Dk/32 x Dv/32 tiles, B·H): each chunk's contribution to the state after it, kt^T v
//              (or k^T vt), and its carry, every chunk at once; in the backward qt^T dO for the state before it
//   scan       grid (Dk·Dv/256, B·H): a thread per state element chains the chunks, S' = carry (.) S + P, writing
//              the state before each chunk (the checkpoint); backwards, the gradient each chunk's end state
//              receives. Key-side decays scale the state's rows and the value-side decay its columns, so the
//              elements are independent. With input gates a walk per (b,h) first fixes the stabiliser before
//              each chunk (a few flops a token), which the outer products then scale by.
//   scores     grid (chunks, B·H): the chunk's L x L decay-weighted scores A (q'_i . k_j W_ij, or per channel
//              inside the dot product), and in the backward also dA = dO V^T (value-side decay: inside the dot
//              product); the sums run over all of Dk (Dv) in tiles of 32, so A is formed once per chunk and read
//              by the kernels after it
//   output     grid (chunks, Dv/32, B·H): o = A v + (fq (.) q') S from the chunk's checkpoint
//   dv         grid (chunks, Dv/32, B·H): dv = A^T dO + kt dS' (value-side decay: with o recomputed, the
//              log-decays' gradients, which then live in one value tile)
//   dqk        grid (chunks, Dk/32, B·H): dq', dk from the chunk's dA, its state and state gradient; per key
//              channel the log-decays' gradient (complete for a per-channel decay; for a scalar decay a partial
//              per token and key tile)
//   chunk_sums grid (B·H·chunks threads): the scalar decays' per-token sums of those partials, reverse-summed
//              over the chunk (dg per token, or a per-(b,h,chunk) part of a per-head dg), dli's k . dk
//   stabiliser one thread per (b,h) walking its tokens backwards: the input gates' max stabiliser passes dm to
//              li or to g and the stabiliser before it (inherently sequential, a few flops a token)
//   head_sum   one thread per head: a per-head decay's gradient, summed over b and chunks in a fixed order
//
// Only the scans walk chunks in order, and they do one multiply-add an element a chunk: everything with flops runs
// a block per chunk and tile (B·H·T/L blocks and more), so a small B·H still fills the GPU and a chunk's latency
// (staging, the decays' in-chunk sums) is paid in parallel rather than once per chunk in sequence.
//
// Per-channel decays: a score term x_ic y_jc exp(G_ic - G_jc) for tokens in different 16-token sub-blocks goes
// through a reference between them (gpu/linrec_kit.cuh's stage_refs_), so those sums are plain dot products; only
// pairs within one sub-block take an exponential a term.
//
// Determinism: every element of every result is written by one thread, its sums in a fixed order (channel tiles in
// order, chunks in order, b in order); no atomics. Numerics follow nn/linrec.c: cumulative log-decays and the
// stabiliser in double within a chunk, every exponent a difference <= 0 rounded to float before expf (a factored
// term's two exponents each), the chunk-start stabiliser kept as a float in the checkpoint.
//
// The intra-chunk products are plain fp32 on the CUDA cores: a thread per output element sums over a 32-channel
// tile staged in shared memory (rows of 33 floats: a column's 32 elements in 32 banks). Each is a small dense
// matmul (A = q k^T, A v, qt S, A^T dO, kt dS, dA k, dA^T q, dO S^T, v dS^T) with the decay factors applied to an
// operand or to the result, so they can move to gpu/mma.cuh's warp products tile by tile; the per-channel forms'
// diagonal blocks (exp inside the dot product) stay elementwise.
#include "gpu/linrec_kit.cuh"

// ----------------------------------------------------------------------------
// the chunk states, both directions (the backward launches these too)

// one thread per (b,h), its tokens in order (gated_in, forward): the input gates' max stabiliser m_t = max(g_t +
// m_{t-1}, li_t), inherently sequential and a few flops a token. states (B,H,chunks, state_size): the stabiliser
// before each chunk WRITTEN into its last element (as a float, which the other kernels start from); m (B,T,H)
// WRITTEN, or NULL. chunk_scalars_ repeats these operations, so every kernel sees the same bits.
__global__ void linrec_stabiliser_walk_kernel(float *states, float *m, const float *g, const float *li, LinrecDims d) {
    int bh = blockIdx.x * blockDim.x + threadIdx.x;
    if (bh >= d.B * d.H) return;
    int b = bh / d.H, h = bh % d.H, nch = nchunks_(d);
    size_t ss = state_size_(d), KV = (size_t)d.Dk * d.Dv;
    float Mp = LINREC_M_EMPTY;
    for (int ci = 0; ci < nch; ci++) {
        int t0 = ci * d.chunk, L = chunk_len_(d, ci);
        states[((size_t)bh * nch + ci) * ss + KV] = Mp;
        double mprev = Mp;
        for (int i = 0; i < L; i++) {
            size_t r = row_(d, b, t0 + i, h);
            float gs = d.decay == LINREC_HEAD ? g[h] : d.decay == LINREC_TOKEN ? g[r] : 0.0f;
            mprev = fmax((double)gs + mprev, (double)li[r]);
            if (m) m[r] = (float)mprev;
        }
        Mp = (float)mprev;
    }
}

// One chunk's outer product, for every chunk at once (the scan below then chains them): a (32,32) tile (the
// blockIdx.y-th of the (Dk/32, Dv/32) grid) of
//   forward  (dir 0, chunk ci = blockIdx.x):     kt^T v, kt = fk (.) k, or k^T vt (LINREC_VCHANNEL), the chunk's
//            contribution to the state after it, WRITTEN into out's slot ci + 1
//   backward (dir 1, chunk ci = blockIdx.x + 1): qt^T dO, qt = fq (.) q', or q'^T dr (LINREC_VCHANNEL), its
//            contribution to the gradient of the state before it, WRITTEN into out's slot ci - 1
// out (B,H,chunks, state_size); carries (B,H,chunks, CW) WRITTEN with chunk ci's carry (CW = carry_width_: one for a
// scalar decay, per key or value channel). x, y (B,T,H, Dk | Dv): k, v forward; q, dout backward (x times xscale).
// mstates: the states whose last element holds each chunk's stabiliser (gated_in). (b,h) = blockIdx.z.
__global__ void __launch_bounds__(LR_THREADS)
    linrec_outer_kernel(float *out, float *carries, const float *x, const float *y, float xscale, int dir,
                        const float *g, const float *li, const float *mstates, LinrecDims d) {
    GPU_DYNAMIC_SMEM(unsigned char, smem);
    StatesSmem_ s;
    Carve_ cv = {(uintptr_t)smem, 0};
    int LC = lc_(d), nch = nchunks_(d), NV = ntiles_(d.Dv);
    StatesSmem_::carve(cv, LC, d.decay, &s);
    int ci = blockIdx.x + dir, v0 = (blockIdx.y % NV) * LR_TILE, c0 = (blockIdx.y / NV) * LR_TILE;
    int bh = blockIdx.z, b = bh / d.H, h = bh % d.H, t0 = ci * d.chunk, L = chunk_len_(d, ci);
    int vside = d.decay == LINREC_VCHANNEL, chan = d.decay == LINREC_CHANNEL, scal = scalar_decay_(d);
    int tid = threadIdx.x, CW = carry_width_(d);
    size_t ss = state_size_(d), KV = (size_t)d.Dk * d.Dv;
    if (scal) chunk_scalars_(s.cs, d, g, li, b, h, t0, L, d.gated_in ? mstates[((size_t)bh * nch + ci) * ss + KV] : 0.0f);
    load_tile_(s.xs, x, d, d.Dk, b, h, t0, L, LC, c0, xscale);
    load_tile_(s.ys, y, d, d.Dv, b, h, t0, L, LC, v0, 1.0f);
    if (!scal) load_tile_(s.gt, g, d, vside ? d.Dv : d.Dk, b, h, t0, L, LC, vside ? v0 : c0, 1.0f);
    __syncthreads();
    float *carry = carries + ((size_t)bh * nch + ci) * CW;
    if (scal) {
        for (int e = tid; e < L * LR_TILE; e += LR_THREADS) {
            int i = e / LR_TILE, c = e % LR_TILE;
            s.xs[i * LR_LD + c] = (dir ? s.cs->fq[i] : s.cs->fk[i]) * s.xs[i * LR_LD + c];
        }
        if (blockIdx.y == 0 && tid == 0) carry[0] = s.cs->carry;
    } else if (tid < LR_TILE) {
        float *t = chan ? s.xs : s.ys, cr = chan_factors_(s.gt, tid, L, dir ? NULL : t, dir ? t : NULL);
        int own = chan ? v0 == 0 && c0 + tid < d.Dk : c0 == 0 && v0 + tid < d.Dv;
        if (own) carry[(chan ? c0 : v0) + tid] = cr;
    }
    __syncthreads();
    float *dst = out + ((size_t)bh * nch + (dir ? ci - 1 : ci + 1)) * ss;
    #pragma unroll
    for (int r = 0; r < LR_NR_TT; r++) {
        int e = tid + r * LR_THREADS, row = e / LR_TILE, col = e % LR_TILE;
        float acc = 0.0f;
        for (int i = 0; i < L; i++) acc += s.xs[i * LR_LD + row] * s.ys[i * LR_LD + col];
        if (c0 + row < d.Dk && v0 + col < d.Dv) dst[(size_t)(c0 + row) * d.Dv + v0 + col] = acc;
    }
}

// The chunks chained, one thread per state element e of (b,h) = blockIdx.y, over the outer kernel's products:
//   forward  (dir 0): S_0 = 0, S_{c+1} = carry_c (.) S_c + P_c; st's slot c WRITTEN with S_c (the checkpoint)
//   backward (dir 1): dS_{n-1} = 0, dS_{c-1} = carry_c (.) dS_c + P_c; st's slot c WRITTEN with dS_c, the gradient
//            of the state after chunk c
// where P is what linrec_outer_kernel left in st's slots (read before each is overwritten) and carries its carries.
// A multiply-add a chunk: the loads do not depend on the chain, so the walk runs at memory speed.
__global__ void linrec_scan_kernel(float *st, const float *carries, int dir, LinrecDims d) {
    size_t KV = (size_t)d.Dk * d.Dv, e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= KV) return;
    int nch = nchunks_(d), CW = carry_width_(d), bh = blockIdx.y;
    int cidx = scalar_decay_(d) ? 0 : d.decay == LINREC_CHANNEL ? (int)(e / d.Dv) : (int)(e % d.Dv);
    size_t ss = state_size_(d), base = (size_t)bh * nch;
    float S = 0.0f;
    if (dir == 0) {
        st[base * ss + e] = 0.0f;
        for (int ci = 1; ci < nch; ci++) {
            float *p = st + (base + ci) * ss + e;
            S = carries[(base + ci - 1) * CW + cidx] * S + *p;
            *p = S;
        }
    } else {
        st[(base + nch - 1) * ss + e] = 0.0f;
        for (int ci = nch - 1; ci >= 1; ci--) {
            float *p = st + (base + ci - 1) * ss + e;
            S = carries[(base + ci) * CW + cidx] * S + *p;
            *p = S;
        }
    }
}

// the states (or their gradients, dir 1) of d into st: the outer products of every chunk, then the scan
void linrec_states_(float *st, float *carries, const float *x, const float *y, float xscale, int dir, const float *g,
                    const float *li, const float *mstates, const LinrecDims *d, const char *outer_name,
                    const char *scan_name) {
    LinrecDims dd = *d;
    int LC = lc_(dd), nch = nchunks_(dd), BH = d->B * d->H;
    size_t KV = (size_t)d->Dk * d->Dv, b_st = smem_of_<StatesSmem_>(LC, d->decay);
    smem_limit_(linrec_outer_kernel, b_st);
    dim3 grid(nch - 1, ntiles_(d->Dk) * ntiles_(d->Dv), BH);
    if (nch > 1) {
        GPU_TIMED_FLOPS(outer_name, chunk_flops_(dd, 2, 0, 0),
                        linrec_outer_kernel<<<grid, LR_THREADS, b_st>>>(st, carries, x, y, xscale, dir, g, li, mstates,
                                                                        dd));
        KERNEL_CHECK();
    }
    GPU_TIMED(scan_name, linrec_scan_kernel<<<dim3(gpu_blocks(KV, 256), BH), 256>>>(st, carries, dir, dd));
    KERNEL_CHECK();
}

// ----------------------------------------------------------------------------
// the chunk's scores

// out (LC,LC) of one chunk WRITTEN: out_ij = sum over the W channels of x'_i . y_j, x' = xscale x, inside the sum
// times exp(G_ic - G_jc) when chan (the channels' cumulative log-decays), after it times W_ij when scal; zero outside
// j <= i < L. x, y (B,T,H,W): the chunk's rows, staged a 32-channel tile at a time; the channels summed in order.
// Warp w: rows 16 (w / 2) .., the two 16-column sub-blocks from 32 (w % 2); a sub-block left of the diagonal is a
// warp product (per channel through the reference of i's sub-block), the diagonal one's terms are summed by the
// lanes that own them when chan, and right of it stays zero.
static __device__ void chunk_scores_(float *out, const float *x, const float *y, float xscale, int W, int chan,
                                     int scal, ScoresSmem_ &s, const float *g, const LinrecDims &d, int b, int h,
                                     int t0, int L, int LC) {
    int LCP = lcp_(d), w = threadIdx.x >> 5, mt = w >> 1, nh = w & 1, active = 16 * mt < L;
    float acc[2][2][4] = {};
    for (int c0 = 0; c0 < W; c0 += LR_TILE) {
        load_tile_(s.xs, x, d, W, b, h, t0, L, LCP, c0, xscale);
        load_tile_(s.ys, y, d, W, b, h, t0, L, LCP, c0, 1.0f);
        if (chan) {
            chan_cum_(s.Gd, s.gt, g, d, W, b, h, t0, L, LC, c0);
            stage_refs_(s.xh, s.yt, s.xs, s.ys, s.Gd, L, L);
        }
        __syncthreads();
        #pragma unroll
        for (int p = 0; p < 2; p++) {
            int J = 2 * nh + p;
            if (!active || J > mt) continue;
            if (!chan)
                warp_mma_<CK_SPLIT, 2, false, true>(acc[p], s.xs + 16 * mt * LR_LD, LR_LD, s.ys + 16 * J * LR_LD, LR_LD,
                                                 LR_TILE);
            else if (J < mt)
                warp_mma_<CK_SPLIT, 2, false, true>(acc[p], s.xh + hat_off_(mt) * LR_LD, LR_LD,
                                                 s.yt + (tilde_off_(mt) + 16 * J) * LR_LD, LR_LD, LR_TILE);
            else
                #pragma unroll
                for (int n = 0; n < 2; n++)
                    #pragma unroll
                    for (int r = 0; r < 4; r++) {
                        int i = 16 * mt + frag_row_(r), j = 16 * J + frag_col_(n, r);
                        if (i >= L || j > i) continue;
                        const float *xi = s.xs + i * LR_LD, *yj = s.ys + j * LR_LD;
                        const double *gi = s.Gd + i * LR_LD, *gj = s.Gd + j * LR_LD;
                        float a = acc[p][n][r];
                        for (int c = 0; c < LR_TILE; c++) a += xi[c] * yj[c] * expf((float)(gi[c] - gj[c]));
                        acc[p][n][r] = a;
                    }
        }
        __syncthreads();
    }
    #pragma unroll
    for (int p = 0; p < 2; p++)
        #pragma unroll
        for (int n = 0; n < 2; n++)
            #pragma unroll
            for (int r = 0; r < 4; r++) {
                int i = 16 * mt + frag_row_(r), j = 16 * (2 * nh + p) + frag_col_(n, r);
                if (i >= LC || j >= LC) continue;
                int on = i < L && j <= i;
                out[i * LC + j] = !on ? 0.0f : scal ? acc[p][n][r] * weight_(s.cs, i, j) : acc[p][n][r];
            }
}

// A (B,H,chunks, LC,LC) WRITTEN: chunk blockIdx.x of (b,h) = blockIdx.y: A_ij = W_ij q'_i . k_j (scalar decays),
// sum_c q'_ic k_jc exp(G_ic - G_jc) (LINREC_CHANNEL) or q'_i . k_j (LINREC_VCHANNEL: its decay acts on the values),
// for j <= i < L, zero elsewhere. With dA (same shape; the backward): also dA_ij = dO_i . v_j, times W_ij for the
// scalar decays (what dq, dk need), or sum_c dO_ic v_jc exp(G_ic - G_jc) for LINREC_VCHANNEL. Thread e's elements:
// e, e + 256, ... of the row-major (LC, LC) matrix; sums over the channels in order, a 32-channel tile at a time.
__global__ void __launch_bounds__(LR_THREADS, 2)
    linrec_scores_kernel(float *A, float *dA, const float *q, const float *k, const float *v, const float *dout,
                         const float *g, const float *li, const float *states, LinrecDims d) {
    GPU_DYNAMIC_SMEM(unsigned char, smem);
    ScoresSmem_ s;
    Carve_ cv = {(uintptr_t)smem, 0};
    int LC = lc_(d), nch = nchunks_(d);
    ScoresSmem_::carve(cv, lcp_(d), d.decay, &s);
    int ci = blockIdx.x, bh = blockIdx.y, b = bh / d.H, h = bh % d.H, t0 = ci * d.chunk, L = chunk_len_(d, ci);
    int chan = d.decay == LINREC_CHANNEL, vside = d.decay == LINREC_VCHANNEL, scal = scalar_decay_(d);
    size_t ss = state_size_(d), KV = (size_t)d.Dk * d.Dv, base = ((size_t)bh * nch + ci) * LC * LC;
    if (scal) {
        float Mp = d.gated_in ? states[((size_t)bh * nch + ci) * ss + KV] : 0.0f;
        chunk_scalars_(s.cs, d, g, li, b, h, t0, L, Mp);
    }
    chunk_scores_(A + base, q, k, d.scale, d.Dk, chan, scal, s, g, d, b, h, t0, L, LC);
    if (dA) chunk_scores_(dA + base, dout, v, 1.0f, d.Dv, vside, scal, s, g, d, b, h, t0, L, LC);
}

void linrec_scores_(float *A, float *dA, const float *q, const float *k, const float *v, const float *dout,
                    const float *g, const float *li, const float *states, const LinrecDims *d, const char *name) {
    LinrecDims dd = *d;
    size_t bytes = smem_of_<ScoresSmem_>(lcp_(dd), d->decay);
    dim3 grid(nchunks_(dd), d->B * d->H);
    smem_limit_(linrec_scores_kernel, bytes);
    GPU_TIMED_FLOPS(name, chunk_flops_(dd, 0, 1, dA ? 1 : 0),
                    linrec_scores_kernel<<<grid, LR_THREADS, bytes>>>(A, dA, q, k, v, dout, g, li, states, dd));
    KERNEL_CHECK();
}

// ----------------------------------------------------------------------------

// the outputs

struct OutSmem_ {
    float *As, *vs, *xs, *Ss, *gt;
    double *Gd;
    ChunkScal_ *cs;
    static __host__ __device__ size_t carve(Carve_ &cv, int LCP, int decay, OutSmem_ *s) {
        s->As = cv.take<float>((size_t)LCP * (LCP + 1));
        s->vs = cv.take<float>((size_t)LCP * LR_LD);
        s->xs = cv.take<float>((size_t)LCP * LR_LD);
        s->Ss = cv.take<float>((size_t)LR_TILE * LR_LD);
        s->gt = cv.take<float>((size_t)LCP * LR_LD);
        s->cs = cv.take<ChunkScal_>(1);
        s->Gd = decay == LINREC_VCHANNEL ? cv.take<double>((size_t)LCP * LR_LD) : NULL;
        return cv.off;
    }
};

// o (B,T,H,Dv) WRITTEN: value tile blockIdx.y of chunk blockIdx.x of (b,h) = blockIdx.z: o = A v + qt S (key-side
// decays, qt = fq (.) q'), or o_ic = fq_ic (q' S)_c + sum_j A_ij v_jc exp(G_ic - G_jc) (LINREC_VCHANNEL), nn/linrec.c's
// order of the sums. A from the scores kernel, S the chunk's state (states). Key-side decays: warp products (warp
// w: rows 16 (w / 2) .., columns 16 (w % 2) .. of the (LCP, 32) tile; CK_SPLIT's precision). The value-side
// decay's exponent sits inside the product: thread e's elements rows e / 32, + 8, ..., column e % 32.
__global__ void __launch_bounds__(LR_THREADS, 2)
    linrec_output_kernel(float *o, const float *A, const float *q, const float *v, const float *g, const float *li,
                         const float *states, LinrecDims d) {
    GPU_DYNAMIC_SMEM(unsigned char, smem);
    OutSmem_ s;
    Carve_ cv = {(uintptr_t)smem, 0};
    int LC = lc_(d), LCP = lcp_(d), ALD = LCP + 1, nch = nchunks_(d);
    OutSmem_::carve(cv, LCP, d.decay, &s);
    int ci = blockIdx.x, v0 = blockIdx.y * LR_TILE, bh = blockIdx.z, b = bh / d.H, h = bh % d.H;
    int t0 = ci * d.chunk, L = chunk_len_(d, ci);
    int chan = d.decay == LINREC_CHANNEL, vside = d.decay == LINREC_VCHANNEL, scal = scalar_decay_(d), tid = threadIdx.x;
    int w = tid >> 5, mt = w >> 1, nh = w & 1, active = !vside && 16 * mt < L;
    size_t ss = state_size_(d), KV = (size_t)d.Dk * d.Dv;
    const float *st = states + ((size_t)bh * nch + ci) * ss;
    if (scal) chunk_scalars_(s.cs, d, g, li, b, h, t0, L, d.gated_in ? st[KV] : 0.0f);
    if (vside) chan_cum_(s.Gd, s.gt, g, d, d.Dv, b, h, t0, L, LC, v0);
    load_ll_pad_(s.As, A + ((size_t)bh * nch + ci) * LC * LC, LC, LCP, ALD);
    load_tile_(s.vs, v, d, d.Dv, b, h, t0, L, LCP, v0, 1.0f);
    __syncthreads();
    float c[2][4] = {};  // the warp's (16, 16) block: A v, then + qt S
    if (active) warp_mma_<CK_SPLIT, 2, false, false>(c, s.As + 16 * mt * ALD, ALD, s.vs + 16 * nh, LR_LD, 16 * (mt + 1));
    float acc[LR_NR_LT];  // the value-side decay: q' S
    #pragma unroll
    for (int r = 0; r < LR_NR_LT; r++) acc[r] = 0.0f;
    for (int c0 = 0; c0 < d.Dk; c0 += LR_TILE) {
        load_tile_(s.xs, q, d, d.Dk, b, h, t0, L, LCP, c0, d.scale);
        load_state_(s.Ss, st, d, c0, v0);
        if (chan) load_tile_(s.gt, g, d, d.Dk, b, h, t0, L, LC, c0, 1.0f);
        __syncthreads();
        if (!vside) scale_keys_(s.xs, s.gt, s.cs, scal, L, 0);
        __syncthreads();
        if (active) warp_mma_<CK_SPLIT, 2, false, false>(c, s.xs + 16 * mt * LR_LD, LR_LD, s.Ss + 16 * nh, LR_LD, LR_TILE);
        if (vside) {
            #pragma unroll
            for (int r = 0; r < LR_NR_LT; r++) {
                int e = tid + r * LR_THREADS, i = e / LR_TILE, col = e % LR_TILE;
                if (i >= L) continue;
                float a = acc[r];
                for (int k = 0; k < LR_TILE; k++) a += s.xs[i * LR_LD + k] * s.Ss[k * LR_LD + col];
                acc[r] = a;
            }
        }
        __syncthreads();
    }
    if (active) {
        #pragma unroll
        for (int n = 0; n < 2; n++)
            #pragma unroll
            for (int r = 0; r < 4; r++) {
                int i = 16 * mt + frag_row_(r), col = 16 * nh + frag_col_(n, r);
                if (i < L && v0 + col < d.Dv) o[row_(d, b, t0 + i, h) * d.Dv + v0 + col] = c[n][r];
            }
    }
    if (!vside) return;
    #pragma unroll
    for (int r = 0; r < LR_NR_LT; r++) {  // the state's part first, then the chunk's tokens, as nn/linrec.c
        int e = tid + r * LR_THREADS, i = e / LR_TILE, col = e % LR_TILE;
        if (i >= L || v0 + col >= d.Dv) continue;
        double gi = s.Gd[i * LR_LD + col];
        float a = expf((float)gi) * acc[r];
        for (int j = 0; j <= i; j++)
            a += s.As[i * ALD + j] * s.vs[j * LR_LD + col] * expf((float)(gi - s.Gd[j * LR_LD + col]));
        o[row_(d, b, t0 + i, h) * d.Dv + v0 + col] = a;
    }
}

// ----------------------------------------------------------------------------
// launches

const char *gpu_linrec_refusal(const LinrecDims *d) {
    if (d->B < 1 || d->T < 1 || d->H < 1 || d->Dk < 1 || d->Dv < 1 || d->chunk < 1)
        return "B, T, H, Dk, Dv and chunk must each be at least 1";
    if (d->decay < LINREC_NONE || d->decay > LINREC_VCHANNEL) return "decay is not one of nn/linrec.h's LinrecDecay";
    if (d->gated_in && !scalar_decay_(*d))
        return "gated_in with a per-channel decay (nn/linrec.h takes input gates with decay NONE, HEAD or TOKEN only)";
    if (lc_(*d) > LR_MAX_L)
        return "chunk above 64 tokens (GPU_LINREC_MAX_L: the kernels stage min(chunk, T) rows in shared memory)";
    if ((long)d->B * d->H > 65535) return "B·H above 65535 (a grid dimension)";
    return NULL;
}

size_t gpu_linrec_ckpt_size(const LinrecDims *d) { return (size_t)d->B * d->H * nchunks_(*d) * state_size_(*d); }

size_t gpu_linrec_scratch_size(const LinrecDims *d) {
    Scratch_ s = {};
    return scratch_layout_(d, NULL, &s);
}

void gpu_linrec_forward(float *o, float *m, float *ckpt, const float *q, const float *k, const float *v,
                        const float *g, const float *li, float *scratch, const LinrecDims *d) {
    check_(d, "gpu_linrec_forward");
    LinrecDims dd = *d;
    Scratch_ s = {};
    scratch_layout_(d, scratch, &s);
    float *st = ckpt ? ckpt : s.st, *nil = NULL;
    int nch = nchunks_(dd), NV = ntiles_(d->Dv), BH = d->B * d->H;
    size_t b_out = smem_of_<OutSmem_>(lcp_(dd), d->decay);
    smem_limit_(linrec_output_kernel, b_out);
    if (d->gated_in) {
        GPU_TIMED("linrec.fwd.stabiliser",
                  linrec_stabiliser_walk_kernel<<<gpu_blocks(BH, 64), 64>>>(st, m, g, li, dd));
        KERNEL_CHECK();
    }
    linrec_states_(st, s.cr, k, v, 1.0f, 0, g, li, st, d, "linrec.fwd.outer", "linrec.fwd.scan");
    linrec_scores_(s.A, nil, q, k, nil, nil, g, li, st, d, "linrec.fwd.scores");
    dim3 g_out(nch, NV, BH);
    GPU_TIMED_FLOPS("linrec.fwd.output", chunk_flops_(dd, 2, 0, 1),
                    linrec_output_kernel<<<g_out, LR_THREADS, b_out>>>(o, s.A, q, v, g, li, st, dd));
    KERNEL_CHECK();
}

// ----------------------------------------------------------------------------
// the value side's column of ones

// va (rows, Dv+1) = v (rows, Dv) with a 1 appended per row: a thread per element of va
__global__ void linrec_ones_append_kernel(float *va, const float *v, size_t rows, int Dv) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * (Dv + 1)) return;
    size_t r = i / (Dv + 1);
    int j = i % (Dv + 1);
    va[i] = j < Dv ? v[r * Dv + j] : 1.0f;
}
// dst (rows, Dv) = src (rows, Dv+1) without its last column: a thread per element of dst
__global__ void linrec_ones_drop_kernel(float *dst, const float *src, size_t rows, int Dv) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * Dv) return;
    dst[i] = src[(i / Dv) * (Dv + 1) + i % Dv];
}

void gpu_linrec_ones_append(float *va, const float *v, size_t rows, int Dv) {
    size_t n = rows * (Dv + 1);
    if (!n) return;
    linrec_ones_append_kernel<<<gpu_blocks(n, 256), 256>>>(va, v, rows, Dv);
    KERNEL_CHECK();
}

void gpu_linrec_ones_drop(float *dst, const float *src, size_t rows, int Dv) {
    size_t n = rows * Dv;
    if (!n) return;
    linrec_ones_drop_kernel<<<gpu_blocks(n, 256), 256>>>(dst, src, rows, Dv);
    KERNEL_CHECK();
}
