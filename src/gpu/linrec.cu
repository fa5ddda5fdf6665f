// The linear-recurrence engine on the GPU (gpu/linrec.cuh): nn/linrec.c's chunkwise algorithm split into kernels
// that each parallelise one thing, FLA's layout of the chunk kernels (the backward's are in gpu/linrec_backward.cu):
//
//   states     grid (Dv/32, Dk/32, B·H): a block owns a 32x32 tile of one (b,h)'s state in registers and walks
//              the chunks in order, writing the state before each chunk (the checkpoint) and stepping it with
//              S' = carry (.) S + kt^T v. Key-side decays scale the state's rows and the value-side decay its
//              columns, so the tiles are independent: a (b,h) is split over Dk/32 x Dv/32 blocks, no reduction.
//   scores     grid (chunks, B·H): the chunk's L x L decay-weighted scores A (q'_i . k_j W_ij, or per channel
//              inside the dot product), and in the backward also dA = dO V^T (value-side decay: inside the dot
//              product); the sums run over all of Dk (Dv) in tiles of 32, so A is formed once per chunk and read
//              by the kernels after it
//   output     grid (chunks, Dv/32, B·H): o = A v + (fq (.) q') S from the chunk's checkpoint
//   dstates    grid (Dv/32, Dk/32, B·H): the states kernel backwards, dS = carry (.) dS' + qt^T dO, writing the
//              gradient each chunk's end state receives
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
// Chunks are independent once the states are known, so the heavy kernels (scores, output, dv, dqk: O(L^2 d + L d^2)
// a chunk) run one block per chunk and tile, B·H·T/L blocks and more; only the states scans walk chunks in order, a
// 32x32 tile each (O(L·32·32) a chunk). One block per (b,h) scanning chunks would leave most of the GPU idle at
// small B·H and hold a whole Dk x Dv state (256 KB at 256 x 256) in one block.
//
// Determinism: every element of every result is written by one thread, its sums in a fixed order (channel tiles in
// order, chunks in order, b in order); no atomics. Numerics follow nn/linrec.c: cumulative log-decays and the
// stabiliser in double within a chunk, every exponent a difference <= 0 rounded to float before expf, the
// chunk-start stabiliser kept as a float in the checkpoint.
//
// The intra-chunk products are plain fp32 on the CUDA cores: a thread per output element sums over a 32-channel
// tile staged in shared memory (rows of 33 floats: a column's 32 elements in 32 banks). Each is a small dense
// matmul (A = q k^T, A v, qt S, A^T dO, kt dS, dA k, dA^T q, dO S^T, v dS^T) with the decay factors applied to an
// operand or to the result, so they can move to gpu/mma.cuh's warp products tile by tile; the per-channel forms'
// diagonal blocks (exp inside the dot product) stay elementwise.
#include "gpu/linrec_kit.cuh"

// ----------------------------------------------------------------------------
// the chunk states (forward; gpu/linrec_backward.cu has their gradients)

// states (B,H,chunks, state_size) WRITTEN: the (32,32) tile (blockIdx.y, blockIdx.x) of the state before each chunk of
// (b,h) = blockIdx.z, and (the first tile's block) the stabiliser before it and m (B,T,H) (gated_in; m may be NULL).
// k (B,T,H,Dk), v (B,T,H,Dv), g, li as nn/linrec.h. S' = diag(carry) S + kt^T v, kt = fk (.) k (key-side decays) or
// S' = S diag(carry) + k^T vt, vt = fv (.) v (LINREC_VCHANNEL); the tile stays in registers, 4 elements a thread.
__global__ void __launch_bounds__(LR_THREADS)
    linrec_states_kernel(float *states, float *m, const float *k, const float *v, const float *g, const float *li,
                         LinrecDims d) {
    GPU_DYNAMIC_SMEM(unsigned char, smem);
    StatesSmem_ s;
    Carve_ cv = {(uintptr_t)smem, 0};
    int LC = lc_(d), nch = nchunks_(d);
    StatesSmem_::carve(cv, LC, d.decay, &s);
    int v0 = blockIdx.x * LR_TILE, c0 = blockIdx.y * LR_TILE, bh = blockIdx.z, b = bh / d.H, h = bh % d.H;
    int first = blockIdx.x == 0 && blockIdx.y == 0, vside = d.decay == LINREC_VCHANNEL;
    int chan = d.decay == LINREC_CHANNEL, scal = scalar_decay_(d), tid = threadIdx.x;
    size_t ss = state_size_(d), KV = (size_t)d.Dk * d.Dv;
    float S[LR_NR_TT];
    #pragma unroll
    for (int r = 0; r < LR_NR_TT; r++) S[r] = 0.0f;
    float Mp = d.gated_in ? LINREC_M_EMPTY : 0.0f;
    for (int ci = 0; ci < nch; ci++) {
        int t0 = ci * d.chunk, L = chunk_len_(d, ci);
        float *st = states + ((size_t)bh * nch + ci) * ss;
        #pragma unroll
        for (int r = 0; r < LR_NR_TT; r++) {
            int e = tid + r * LR_THREADS, row = e / LR_TILE, col = e % LR_TILE;
            if (c0 + row < d.Dk && v0 + col < d.Dv) st[(size_t)(c0 + row) * d.Dv + v0 + col] = S[r];
        }
        if (d.gated_in && first && tid == 0) st[KV] = Mp;
        if (scal) {
            chunk_scalars_(s.cs, d, g, li, b, h, t0, L, Mp);
            if (d.gated_in) {
                if (first && m && tid < L) m[row_(d, b, t0 + tid, h)] = (float)s.cs->mi[tid];
                Mp = (float)s.cs->mi[L - 1];  // as the checkpoint keeps it
            }
        }
        if (ci == nch - 1) break;  // the state after the last chunk is not wanted (no state output in training)
        load_tile_(s.xs, k, d, d.Dk, b, h, t0, L, LC, c0, 1.0f);
        load_tile_(s.ys, v, d, d.Dv, b, h, t0, L, LC, v0, 1.0f);
        if (!scal) load_tile_(s.gt, g, d, vside ? d.Dv : d.Dk, b, h, t0, L, LC, vside ? v0 : c0, 1.0f);
        __syncthreads();
        if (scal) {
            for (int e = tid; e < L * LR_TILE; e += LR_THREADS) {
                int i = e / LR_TILE, c = e % LR_TILE;
                s.xs[i * LR_LD + c] = s.cs->fk[i] * s.xs[i * LR_LD + c];
            }
            if (tid < LR_TILE) s.carry[tid] = s.cs->carry;
        } else if (tid < LR_TILE) {
            s.carry[tid] = chan_factors_(s.gt, tid, L, chan ? s.xs : s.ys, NULL);
        }
        __syncthreads();
        #pragma unroll
        for (int r = 0; r < LR_NR_TT; r++) {
            int e = tid + r * LR_THREADS, row = e / LR_TILE, col = e % LR_TILE;
            float acc = S[r] * s.carry[vside ? col : row];
            for (int i = 0; i < L; i++) acc += s.xs[i * LR_LD + row] * s.ys[i * LR_LD + col];
            S[r] = acc;
        }
        __syncthreads();
    }
}

// ----------------------------------------------------------------------------
// the chunk's scores

// out (LC,LC) of one chunk WRITTEN: out_ij = sum over the W channels of x'_i . y_j, x' = xscale x, inside the sum
// times exp(G_ic - G_jc) when chan (the channels' cumulative log-decays), after it times W_ij when scal; zero outside
// j <= i < L. x, y (B,T,H,W): the chunk's rows, staged a 32-channel tile at a time; the channels summed in order.
// Thread tid's elements: tid, tid + 256, ... of the row-major matrix
static __device__ void chunk_scores_(float *out, const float *x, const float *y, float xscale, int W, int chan,
                                     int scal, ScoresSmem_ &s, const float *g, const LinrecDims &d, int b, int h,
                                     int t0, int L, int LC) {
    int tid = threadIdx.x;
    float acc[LR_NR_LL];
    #pragma unroll
    for (int r = 0; r < LR_NR_LL; r++) acc[r] = 0.0f;
    for (int c0 = 0; c0 < W; c0 += LR_TILE) {
        load_tile_(s.xs, x, d, W, b, h, t0, L, LC, c0, xscale);
        load_tile_(s.ys, y, d, W, b, h, t0, L, LC, c0, 1.0f);
        if (chan) chan_cum_(s.Gd, s.gt, g, d, W, b, h, t0, L, LC, c0);
        __syncthreads();
        #pragma unroll
        for (int r = 0; r < LR_NR_LL; r++) {
            int e = tid + r * LR_THREADS, i = e / LC, j = e % LC;
            if (e >= LC * LC || i >= L || j > i) continue;
            const float *xi = s.xs + i * LR_LD, *yj = s.ys + j * LR_LD;
            float a = acc[r];
            if (chan) {
                const double *gi = s.Gd + i * LR_LD, *gj = s.Gd + j * LR_LD;
                for (int c = 0; c < LR_TILE; c++) a += xi[c] * yj[c] * expf((float)(gi[c] - gj[c]));
            } else {
                for (int c = 0; c < LR_TILE; c++) a += xi[c] * yj[c];
            }
            acc[r] = a;
        }
        __syncthreads();
    }
    #pragma unroll
    for (int r = 0; r < LR_NR_LL; r++) {
        int e = tid + r * LR_THREADS, i = e / LC, j = e % LC;
        if (e >= LC * LC) continue;
        int on = i < L && j <= i;
        out[e] = !on ? 0.0f : scal ? acc[r] * weight_(s.cs, i, j) : acc[r];
    }
}

// A (B,H,chunks, LC,LC) WRITTEN: chunk blockIdx.x of (b,h) = blockIdx.y: A_ij = W_ij q'_i . k_j (scalar decays),
// sum_c q'_ic k_jc exp(G_ic - G_jc) (LINREC_CHANNEL) or q'_i . k_j (LINREC_VCHANNEL: its decay acts on the values),
// for j <= i < L, zero elsewhere. With dA (same shape; the backward): also dA_ij = dO_i . v_j, times W_ij for the
// scalar decays (what dq, dk need), or sum_c dO_ic v_jc exp(G_ic - G_jc) for LINREC_VCHANNEL. Thread e's elements:
// e, e + 256, ... of the row-major (LC, LC) matrix; sums over the channels in order, a 32-channel tile at a time.
__global__ void __launch_bounds__(LR_THREADS)
    linrec_scores_kernel(float *A, float *dA, const float *q, const float *k, const float *v, const float *dout,
                         const float *g, const float *li, const float *states, LinrecDims d) {
    GPU_DYNAMIC_SMEM(unsigned char, smem);
    ScoresSmem_ s;
    Carve_ cv = {(uintptr_t)smem, 0};
    int LC = lc_(d), nch = nchunks_(d);
    ScoresSmem_::carve(cv, LC, d.decay, &s);
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

// ----------------------------------------------------------------------------

// the outputs

struct OutSmem_ {
    float *As, *vs, *xs, *Ss, *gt;
    double *Gd;
    ChunkScal_ *cs;
    static __host__ __device__ size_t carve(Carve_ &cv, int LC, int decay, OutSmem_ *s) {
        s->As = cv.take<float>((size_t)LC * LC);
        s->vs = cv.take<float>((size_t)LC * LR_LD);
        s->xs = cv.take<float>((size_t)LC * LR_LD);
        s->Ss = cv.take<float>((size_t)LR_TILE * LR_LD);
        s->gt = cv.take<float>((size_t)LC * LR_LD);
        s->cs = cv.take<ChunkScal_>(1);
        s->Gd = decay == LINREC_VCHANNEL ? cv.take<double>((size_t)LC * LR_LD) : NULL;
        return cv.off;
    }
};

// o (B,T,H,Dv) WRITTEN: value tile blockIdx.y of chunk blockIdx.x of (b,h) = blockIdx.z: o = A v + qt S (key-side
// decays, qt = fq (.) q'), or o_ic = fq_ic (q' S)_c + sum_j A_ij v_jc exp(G_ic - G_jc) (LINREC_VCHANNEL), nn/linrec.c's
// order of the sums. A from the scores kernel, S the chunk's state (states). Thread e: rows e / 32, + 8, ..., column e % 32.
__global__ void __launch_bounds__(LR_THREADS)
    linrec_output_kernel(float *o, const float *A, const float *q, const float *v, const float *g, const float *li,
                         const float *states, LinrecDims d) {
    GPU_DYNAMIC_SMEM(unsigned char, smem);
    OutSmem_ s;
    Carve_ cv = {(uintptr_t)smem, 0};
    int LC = lc_(d), nch = nchunks_(d);
    OutSmem_::carve(cv, LC, d.decay, &s);
    int ci = blockIdx.x, v0 = blockIdx.y * LR_TILE, bh = blockIdx.z, b = bh / d.H, h = bh % d.H;
    int t0 = ci * d.chunk, L = chunk_len_(d, ci);
    int chan = d.decay == LINREC_CHANNEL, vside = d.decay == LINREC_VCHANNEL, scal = scalar_decay_(d), tid = threadIdx.x;
    size_t ss = state_size_(d), KV = (size_t)d.Dk * d.Dv;
    const float *st = states + ((size_t)bh * nch + ci) * ss;
    if (scal) chunk_scalars_(s.cs, d, g, li, b, h, t0, L, d.gated_in ? st[KV] : 0.0f);
    if (vside) chan_cum_(s.Gd, s.gt, g, d, d.Dv, b, h, t0, L, LC, v0);
    load_ll_(s.As, A + ((size_t)bh * nch + ci) * LC * LC, LC);
    load_tile_(s.vs, v, d, d.Dv, b, h, t0, L, LC, v0, 1.0f);
    __syncthreads();
    float acc[LR_NR_LT];
    #pragma unroll
    for (int r = 0; r < LR_NR_LT; r++) {
        int e = tid + r * LR_THREADS, i = e / LR_TILE, col = e % LR_TILE;
        float a = 0.0f;
        if (!vside && i < L)
            for (int j = 0; j <= i; j++) a += s.As[i * LC + j] * s.vs[j * LR_LD + col];
        acc[r] = a;
    }
    for (int c0 = 0; c0 < d.Dk; c0 += LR_TILE) {
        load_tile_(s.xs, q, d, d.Dk, b, h, t0, L, LC, c0, d.scale);
        load_state_(s.Ss, st, d, c0, v0);
        if (chan) load_tile_(s.gt, g, d, d.Dk, b, h, t0, L, LC, c0, 1.0f);
        __syncthreads();
        if (scal) {
            for (int e = tid; e < L * LR_TILE; e += LR_THREADS) {
                int i = e / LR_TILE, c = e % LR_TILE;
                s.xs[i * LR_LD + c] = s.cs->fq[i] * s.xs[i * LR_LD + c];
            }
        } else if (chan && tid < LR_TILE) {
            chan_factors_(s.gt, tid, L, NULL, s.xs);
        }
        __syncthreads();
        #pragma unroll
        for (int r = 0; r < LR_NR_LT; r++) {
            int e = tid + r * LR_THREADS, i = e / LR_TILE, col = e % LR_TILE;
            if (i >= L) continue;
            float a = acc[r];
            for (int c = 0; c < LR_TILE; c++) a += s.xs[i * LR_LD + c] * s.Ss[c * LR_LD + col];
            acc[r] = a;
        }
        __syncthreads();
    }
    #pragma unroll
    for (int r = 0; r < LR_NR_LT; r++) {
        int e = tid + r * LR_THREADS, i = e / LR_TILE, col = e % LR_TILE;
        if (i >= L || v0 + col >= d.Dv) continue;
        float a = acc[r];
        if (vside) {  // the state's part first, then the chunk's tokens, as nn/linrec.c
            double gi = s.Gd[i * LR_LD + col];
            a = expf((float)gi) * a;
            for (int j = 0; j <= i; j++)
                a += s.As[i * LC + j] * s.vs[j * LR_LD + col] * expf((float)(gi - s.Gd[j * LR_LD + col]));
        }
        o[row_(d, b, t0 + i, h) * d.Dv + v0 + col] = a;
    }
}

// ----------------------------------------------------------------------------

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
    int LC = lc_(dd), nch = nchunks_(dd), NK = ntiles_(d->Dk), NV = ntiles_(d->Dv), BH = d->B * d->H;
    size_t b_st = smem_of_<StatesSmem_>(LC, d->decay), b_sc = smem_of_<ScoresSmem_>(LC, d->decay);
    size_t b_out = smem_of_<OutSmem_>(LC, d->decay);
    smem_limit_(linrec_states_kernel, b_st);
    smem_limit_(linrec_scores_kernel, b_sc);
    smem_limit_(linrec_output_kernel, b_out);
    GPU_TIMED("linrec.fwd.states",
              linrec_states_kernel<<<dim3(NV, NK, BH), LR_THREADS, b_st>>>(st, d->gated_in ? m : nil, k, v, g, li, dd));
    KERNEL_CHECK();
    GPU_TIMED("linrec.fwd.scores", linrec_scores_kernel<<<dim3(nch, BH), LR_THREADS, b_sc>>>(s.A, nil, q, k, nil, nil,
                                                                                              g, li, st, dd));
    KERNEL_CHECK();
    GPU_TIMED("linrec.fwd.output",
              linrec_output_kernel<<<dim3(nch, NV, BH), LR_THREADS, b_out>>>(o, s.A, q, v, g, li, st, dd));
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
