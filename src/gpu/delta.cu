// The delta-rule engine on the GPU (gpu/delta.cuh): nn/delta.c's chunkwise WY / UT algorithm split into kernels
// that each parallelise one thing (the backward's are in gpu/delta_backward.cu):
//
//   chunk      grid (chunks, B·H): the chunk's L x L matrices KK = K K^T (.) Gam (strictly lower) and P = Q' K^T
//              (.) Gam (lower), summed over all of Dk in tiles of 32; they depend on no state, so every chunk runs
//              at once, and the kernels after read them
//   states     grid (Dv/32, B·H): a block owns the (Dk, 32) column tile of one (b,h)'s state in shared memory and
//              walks the chunks in order: writes the state before each (the checkpoint), finds the chunk's new
//              values U = (I + A)^{-1} (b (.) (V - e (.) K S)), A_ij = b_i KK_ij, by forward substitution, and steps
//              S' = eL S + (f (.) K)^T U
//   output     grid (chunks, Dv/32, B·H): o = (e (.) Q') S + P U from the chunk's checkpoint and U
//
// Why the state is split over value columns only: in S' = a (I - b k k^T) S + b k v^T the factor on the left mixes
// S's rows (key channels) but never its columns, so each value column evolves alone given k, b and the decay; K S,
// the solve and the step of one column tile need the whole key side, which the block holds (Dk <= 256: 33 KB). The
// chunk's L x L solve sits on this sequential path, one substitution step per token with the 32 columns' L rows
// spread over the block; everything of O(L² d) that needs no state (KK, P, o) runs in the chunk-parallel kernels.
//
// Determinism: every element of every result is written by one thread, its sums in a fixed order (channel tiles
// in order, tokens in order, chunks in order); no atomics. Numerics follow nn/delta.c: cumulative log-decays in
// double within a chunk, every exponent a difference <= 0 rounded to float before expf, the same products in the
// same order (R before the solve, the solve itself rather than the explicit inverse of the WY form), so U stays
// bounded as on the CPU however close beta gets to 2.
//
// Every product (the chunk's L x L matrices, K S, the state step, the outputs, and the backward's) is a warp product on
// the tensor cores (gpu/chunk_kit.cuh's warp_mma_, CK_SPLIT's precision: the 3xTF32 split, about fp32's rounding)
// over fp32 tiles staged in shared memory; the triangular solves stay on the CUDA cores, one substitution step a
// token with the 32 columns' rows spread over the block.
#include "gpu/delta_kit.cuh"

// ----------------------------------------------------------------------------
// the chunk's L x L matrices (forward and backward)

// kk, p (B,H,chunks, LC,LC) WRITTEN for chunk blockIdx.x of (b,h) = blockIdx.y: KK_ij = (k_i . k_j) Gam_ij for j < i,
// P_ij = (q'_i . k_j) Gam_ij for j <= i (q' = scale q), zero elsewhere. q, k (B,T,H,Dk); beta, g (B,T,H) (g NULL: no
// decay). Warp products: warp w = 2 mt + nh the rows 16 mt .., columns 32 nh .. of both (64, 64) results (a block
// wholly above the diagonal skips its products), summed over the key channels in tiles of 32, in order.
__global__ void __launch_bounds__(CK_THREADS)
    delta_chunk_kernel(float *kk, float *p, const float *q, const float *k, const float *beta, const float *g,
                       DeltaDims d) {
    GPU_DYNAMIC_SMEM(unsigned char, smem);
    ChunkSmem_ s;
    Carve_ cv = {(uintptr_t)smem, 0};
    int LC = lc_(d), LCQ = lcq_(LC), nch = nchunks_(d);
    ChunkSmem_::carve(cv, LC, &s);
    int ci = blockIdx.x, bh = blockIdx.y, b = bh / d.H, h = bh % d.H, t0 = ci * d.chunk, L = chunk_len_(d, ci);
    int w = threadIdx.x >> 5, mt = w >> 1, nh = w & 1, active = 16 * mt < L && 32 * nh <= 16 * mt + 15;
    delta_scalars_(s.cs, d, beta, g, b, h, t0, L);
    float akk[4][4] = {}, ap[4][4] = {};
    for (int c0 = 0; c0 < d.Dk; c0 += CK_TILE) {
        load_tile_(s.qs, q, d, d.Dk, b, h, t0, L, LCQ, c0, d.scale);
        load_tile_(s.ks, k, d, d.Dk, b, h, t0, L, LCQ, c0, 1.0f);
        __syncthreads();
        if (active) {
            const float *kj = s.ks + 32 * nh * CK_LD;
            warp_mma_<CK_SPLIT, 4, false, true>(ap, s.qs + 16 * mt * CK_LD, CK_LD, kj, CK_LD, CK_TILE);
            warp_mma_<CK_SPLIT, 4, false, true>(akk, s.ks + 16 * mt * CK_LD, CK_LD, kj, CK_LD, CK_TILE);
        }
        __syncthreads();
    }
    size_t base = ((size_t)bh * nch + ci) * LC * LC;
    #pragma unroll
    for (int n = 0; n < 4; n++)
        #pragma unroll
        for (int r = 0; r < 4; r++) {
            int i = 16 * mt + frag_row_(r), j = 32 * nh + frag_col_(n, r);
            if (i >= LC || j >= LC) continue;
            float gm = i < L && j <= i ? gam_(s.cs, i, j) : 0.0f;
            kk[base + i * LC + j] = j < i ? akk[n][r] * gm : 0.0f;
            p[base + i * LC + j] = ap[n][r] * gm;
        }
}

// ----------------------------------------------------------------------------
// the chunk states and new values

// states (B,H,chunks, Dk·Dv) WRITTEN: columns v0 = 32 blockIdx.x .. of the state before each chunk of (b,h) =
// blockIdx.y; u (B,H,T,Dv) WRITTEN with the chunk's new values U (chunk_u_). kk from the chunk kernel; k (B,T,H,Dk),
// v (B,T,H,Dv), beta, g (B,T,H). The step S' = eL S + (f (.) K)^T U, nn/delta.c's chunk_next_state_, is per state
// element: thread e's elements e, e + 256, ... of each (32, 32) tile of rows.
__global__ void __launch_bounds__(CK_THREADS)
    delta_states_kernel(float *states, float *u, const float *kk, const float *k, const float *v, const float *beta,
                        const float *g, DeltaDims d) {
    GPU_DYNAMIC_SMEM(unsigned char, smem);
    NewvalsSmem_ s;
    Carve_ cv = {(uintptr_t)smem, 0};
    int LC = lc_(d), LCP = lcp_(d), nch = nchunks_(d), rows = ntiles_(d.Dk) * CK_TILE;
    NewvalsSmem_::carve(cv, LC, LCP, d.Dk, &s);
    int v0 = blockIdx.x * CK_TILE, bh = blockIdx.y, b = bh / d.H, h = bh % d.H, tid = threadIdx.x;
    size_t KV = (size_t)d.Dk * d.Dv;
    float *ub = u + (size_t)bh * d.T * d.Dv;
    for (int e = tid; e < rows * CK_LD; e += CK_THREADS) s.S[e] = 0.0f;
    for (int ci = 0; ci < nch; ci++) {
        int t0 = ci * d.chunk, L = chunk_len_(d, ci);
        float *st = states + ((size_t)bh * nch + ci) * KV;
        __syncthreads();
        for (int e = tid; e < d.Dk * CK_TILE; e += CK_THREADS) {
            int r = e / CK_TILE, c = e % CK_TILE;
            if (v0 + c < d.Dv) st[(size_t)r * d.Dv + v0 + c] = s.S[r * CK_LD + c];
        }
        delta_scalars_(s.cs, d, beta, g, b, h, t0, L);
        load_ll_(s.kk, kk + ((size_t)bh * nch + ci) * LC * LC, LC);
        __syncthreads();
        chunk_u_(s.U, ub, NULL, s.kt, s.S, s.kk, s.cs, k, v, d, b, h, t0, L, LC, LCP, v0);
        if (ci == nch - 1) break;  // the state after the last chunk is not wanted (no state output in training)
        for (int c0 = 0; c0 < d.Dk; c0 += CK_TILE) {
            load_tile_(s.kt, k, d, d.Dk, b, h, t0, L, LCP, c0, 1.0f);
            __syncthreads();
            scale_rows_(s.kt, s.cs->f, L);
            __syncthreads();
            state_update_(s.S, c0, s.cs->eL, s.kt, s.U, NULL, NULL, LCP);
            __syncthreads();
        }
    }
}

// ----------------------------------------------------------------------------
// the outputs

struct OutSmem_ {
    float *P, *U, *qt, *St;
    DeltaScal_ *cs;
    static __host__ __device__ size_t carve(Carve_ &cv, int LCP, OutSmem_ *s) {
        s->P = cv.take<float>((size_t)LCP * (LCP + 1));
        s->U = cv.rows(LCP);
        s->qt = cv.rows(LCP);
        s->St = cv.rows(CK_TILE);
        s->cs = cv.take<DeltaScal_>(1);
        return cv.off;
    }
};

// o (B,T,H,Dv) WRITTEN: value tile blockIdx.y of chunk blockIdx.x of (b,h) = blockIdx.z: o = (e (.) Q') S + P U, the
// state's part first as in nn/delta.c. P from the chunk kernel, U from the states kernel, S the chunk's state
// (states); q (B,T,H,Dk). Warp products, frag_for_'s layout.
__global__ void __launch_bounds__(CK_THREADS)
    delta_output_kernel(float *o, const float *p, const float *u, const float *q, const float *beta, const float *g,
                        const float *states, DeltaDims d) {
    GPU_DYNAMIC_SMEM(unsigned char, smem);
    OutSmem_ s;
    Carve_ cv = {(uintptr_t)smem, 0};
    int LC = lc_(d), LCP = lcp_(d), ALD = LCP + 1, nch = nchunks_(d);
    OutSmem_::carve(cv, LCP, &s);
    int ci = blockIdx.x, v0 = blockIdx.y * CK_TILE, bh = blockIdx.z, b = bh / d.H, h = bh % d.H;
    int t0 = ci * d.chunk, L = chunk_len_(d, ci);
    int w = threadIdx.x >> 5, mt = w >> 1, nh = w & 1, active = 16 * mt < L;
    const float *st = states + ((size_t)bh * nch + ci) * d.Dk * d.Dv;
    delta_scalars_(s.cs, d, beta, g, b, h, t0, L);
    load_ll_pad_(s.P, p + ((size_t)bh * nch + ci) * LC * LC, LC, LCP, ALD);
    load_rows_(s.U, u + (size_t)bh * d.T * d.Dv, d.Dv, t0, L, LCP, v0);
    float c[2][4] = {};
    for (int c0 = 0; c0 < d.Dk; c0 += CK_TILE) {
        load_tile_(s.qt, q, d, d.Dk, b, h, t0, L, LCP, c0, d.scale);
        load_state_(s.St, st, d, c0, v0);
        __syncthreads();
        scale_rows_(s.qt, s.cs->e, L);
        __syncthreads();
        if (active)
            warp_mma_<CK_SPLIT, 2, false, false>(c, s.qt + 16 * mt * CK_LD, CK_LD, s.St + 16 * nh, CK_LD, CK_TILE);
        __syncthreads();
    }
    if (!active) return;
    warp_mma_<CK_SPLIT, 2, false, false>(c, s.P + 16 * mt * ALD, ALD, s.U + 16 * nh, CK_LD, 16 * (mt + 1));
    frag_for_(mt, nh, [&](int n, int r, int i, int col) {
        if (i < L && v0 + col < d.Dv) o[row_(d, b, t0 + i, h) * d.Dv + v0 + col] = c[n][r];
    });
}

// ----------------------------------------------------------------------------
// launches

const char *gpu_delta_refusal(const DeltaDims *d) {
    if (d->B < 1 || d->T < 1 || d->H < 1 || d->Dk < 1 || d->Dv < 1 || d->chunk < 1)
        return "B, T, H, Dk, Dv and chunk must each be at least 1";
    if (lc_(*d) > DL_MAX_L)
        return "chunk above 64 tokens (GPU_DELTA_MAX_L: the kernels stage min(chunk, T) rows in shared memory)";
    if (d->Dk > GPU_DELTA_MAX_DK)
        return "Dk above 256 (GPU_DELTA_MAX_DK: the state scans hold a (Dk, 32) state tile in shared memory)";
    if ((long)d->B * d->H > 65535) return "B·H above 65535 (a grid dimension)";
    return NULL;
}

size_t gpu_delta_ckpt_size(const DeltaDims *d) { return (size_t)d->B * d->H * nchunks_(*d) * d->Dk * d->Dv; }

size_t gpu_delta_scratch_size(const DeltaDims *d) {
    DeltaScratch_ s = {};
    return delta_scratch_layout_(d, NULL, &s);
}

void gpu_delta_forward(float *o, float *ckpt, const float *q, const float *k, const float *v, const float *beta,
                       const float *g, float *scratch, const DeltaDims *d) {
    delta_check_(d, "gpu_delta_forward");
    DeltaDims dd = *d;
    DeltaScratch_ s = {};
    delta_scratch_layout_(d, scratch, &s);
    float *st = ckpt ? ckpt : s.st;
    int LC = lc_(dd), nch = nchunks_(dd), NV = ntiles_(d->Dv), BH = d->B * d->H;
    int LCP = lcp_(dd);
    size_t b_ch = smem_of_<ChunkSmem_>(LC), b_st = smem_of_<NewvalsSmem_>(LC, LCP, d->Dk);
    size_t b_out = smem_of_<OutSmem_>(LCP);
    smem_limit_(delta_chunk_kernel, b_ch);
    smem_limit_(delta_states_kernel, b_st);
    smem_limit_(delta_output_kernel, b_out);
    GPU_TIMED_FLOPS("delta.fwd.chunk", chunk_flops_(*d, 0, 2, 0),
                    delta_chunk_kernel<<<dim3(nch, BH), CK_THREADS, b_ch>>>(s.kk, s.p, q, k, beta, g, dd));
    KERNEL_CHECK();
    GPU_TIMED_FLOPS("delta.fwd.states", chunk_flops_(*d, 4, 0, 1),
                    delta_states_kernel<<<dim3(NV, BH), CK_THREADS, b_st>>>(st, s.u, s.kk, k, v, beta, g, dd));
    KERNEL_CHECK();
    GPU_TIMED_FLOPS("delta.fwd.output", chunk_flops_(*d, 2, 0, 1),
                    delta_output_kernel<<<dim3(nch, NV, BH), CK_THREADS, b_out>>>(o, s.p, s.u, q, beta, g, st,
                                                                                 dd));
    KERNEL_CHECK();
}
