// What the delta-rule engine's two files share (gpu/delta.cu: the forward and the launches' sizes,
// gpu/delta_backward.cu: the backward): the chunk's decay factors, the triangular solves, the new values U of a
// chunk, the kernel both directions launch, the scratch layout. Tile geometry and staged loads: gpu/chunk_kit.cuh.
// Internal to those files.
#ifndef SEQ_GPU_DELTA_KIT_CUH
#define SEQ_GPU_DELTA_KIT_CUH

#include <math.h>
#include <stdint.h>

#include "gpu/chunk_kit.cuh"
#include "gpu/delta.cuh"

#define DL_MAX_L GPU_DELTA_MAX_L

// ----------------------------------------------------------------------------
// one chunk's decay factors and writing strengths

// as nn/delta.c's chunk_forward_: G the in-chunk cumulative log-decay up to each token (0 without g), e_i = exp(G_i)
// (the state's weight at token i), f_i = exp(G_L - G_i) (token i's weight in the chunk's end state), eL = exp(G_L),
// b the writing strengths beta, gs the log-decays as given (0 without g)
struct DeltaScal_ {
    double G[DL_MAX_L];
    float e[DL_MAX_L], f[DL_MAX_L], b[DL_MAX_L], gs[DL_MAX_L];
    float eL;
};

// every thread of the block: cs for tokens t0 .. t0+L-1 of (b,h)
static __device__ void delta_scalars_(DeltaScal_ *cs, const DeltaDims &d, const float *beta, const float *g, int b,
                                      int h, int t0, int L) {
    int tid = threadIdx.x;
    if (tid < L) {
        size_t r = row_(d, b, t0 + tid, h);
        cs->b[tid] = beta[r];
        cs->gs[tid] = g ? g[r] : 0.0f;
    }
    __syncthreads();
    if (tid == 0) {  // L steps of a scan: one thread, from shared memory
        double acc = 0.0;
        for (int i = 0; i < L; i++) {
            acc += cs->gs[i];
            cs->G[i] = acc;
        }
        cs->eL = expf((float)acc);
    }
    __syncthreads();
    if (tid < L) {
        cs->e[tid] = expf((float)cs->G[tid]);
        cs->f[tid] = expf((float)(cs->G[L - 1] - cs->G[tid]));
    }
    __syncthreads();
}

// Gam_ij = exp(G_i - G_j), j <= i: the decay from token j to token i
static __device__ __forceinline__ float gam_(const DeltaScal_ *cs, int i, int j) {
    return expf((float)(cs->G[i] - cs->G[j]));
}

// ----------------------------------------------------------------------------
// the warp products' layout

// f(n, r, i, c) for each element of the calling warp's (16, 16) block of an (LCP, 32) warp product: warp w = 2 mt +
// nh owns rows 16 mt .., columns 16 nh .., its accumulator c[n][r] (n < 2, r < 4) is element (i, c); 8 warps cover
// 64 rows (LCP <= 64), and a warp with 16 mt >= L has zeros to hand on
template <typename F>
static __device__ __forceinline__ void frag_for_(int mt, int nh, F f) {
    #pragma unroll
    for (int n = 0; n < 2; n++)
        #pragma unroll
        for (int r = 0; r < 4; r++) f(n, r, 16 * mt + frag_row_(r), 16 * nh + frag_col_(n, r));
}

// s (rows of CK_LD): row i < L times f[i]; every thread, synchronised before and after by the caller
static __device__ void scale_rows_(float *s, const float *f, int L) {
    for (int e = threadIdx.x; e < L * CK_TILE; e += CK_THREADS) s[(e / CK_TILE) * CK_LD + e % CK_TILE] *= f[e / CK_TILE];
}

// a (32, 32) state tile's update on the tensor cores: acc (16 x 8, warp w's rows 16 (w / 4) .., columns 8 (w % 4)
// ..) += X^T Y over the LCP tokens, X (LCP rows of CK_LD, the tile's 32 channels), Y (LCP rows of CK_LD, 32 value
// columns); every lane of every warp
static __device__ __forceinline__ void state_mma_(float (*acc)[4], const float *x, const float *y, int LCP) {
    int w = threadIdx.x >> 5;
    warp_mma_<CK_SPLIT, 1, true, false>(acc, x + 16 * (w >> 2), CK_LD, y + 8 * (w & 3), CK_LD, LCP);
}
// the (row, column) in a (32, 32) state tile of element r of state_mma_'s accumulator
static __device__ __forceinline__ int st_row_(int r) { return 16 * ((threadIdx.x >> 5) >> 2) + frag_row_(r); }
static __device__ __forceinline__ int st_col_(int r) { return 8 * ((threadIdx.x >> 5) & 3) + frag_col_(0, r); }

// rows c0 .. c0 + 31 of a (Dk, 32) state column tile S (rows of CK_LD) <- eL S + X1^T Y1 (+ X2^T Y2 with x2), each
// X (LCP rows of CK_LD: the tile's 32 channels), Y (LCP rows of CK_LD: the 32 value columns); every thread
static __device__ void state_update_(float *S, int c0, float eL, const float *x1, const float *y1, const float *x2,
                                     const float *y2, int LCP) {
    float a[1][4];
    #pragma unroll
    for (int r = 0; r < 4; r++) a[0][r] = eL * S[(c0 + st_row_(r)) * CK_LD + st_col_(r)];
    state_mma_(a, x1, y1, LCP);
    if (x2) state_mma_(a, x2, y2, LCP);
    #pragma unroll
    for (int r = 0; r < 4; r++) S[(c0 + st_row_(r)) * CK_LD + st_col_(r)] = a[0][r];
}

// ----------------------------------------------------------------------------
// the unit lower-triangular solves with I + A, A_ij = b_i KK_ij (strictly lower), on a staged (L, 32) tile of
// value columns: the columns are independent, so one block solves its 32 while the rows go one after another. Every
// thread of the block; x (LC rows of CK_LD), kk (LC, LC) in shared memory; ends synchronised.

// x <- (I + A)^{-1} x: forward substitution, x_i -= A_ij x_j for j = 0, 1, ... (row j is final once step j starts)
static __device__ void solve_lower_(float *x, const float *kk, const DeltaScal_ *cs, int L, int LC) {
    for (int j = 0; j < L - 1; j++) {
        __syncthreads();
        const float *xj = x + j * CK_LD;
        for (int e = (j + 1) * CK_TILE + threadIdx.x; e < L * CK_TILE; e += CK_THREADS) {
            int i = e / CK_TILE, c = e % CK_TILE;
            float a = cs->b[i] * kk[i * LC + j];
            x[i * CK_LD + c] -= a * xj[c];
        }
    }
    __syncthreads();
}

// x <- (I + A)^{-T} x: back substitution, x_m -= A_im x_i for i = L-1, L-2, ...
static __device__ void solve_lower_t_(float *x, const float *kk, const DeltaScal_ *cs, int L, int LC) {
    for (int i = L - 1; i > 0; i--) {
        __syncthreads();
        const float *xi = x + i * CK_LD;
        float bi = cs->b[i];
        for (int e = threadIdx.x; e < i * CK_TILE; e += CK_THREADS) {
            int m = e / CK_TILE, c = e % CK_TILE;
            float a = bi * kk[i * LC + m];
            x[m * CK_LD + c] -= a * xi[c];
        }
    }
    __syncthreads();
}

// ----------------------------------------------------------------------------
// staged loads of the engine's own layouts

// s (LC rows of CK_LD) WRITTEN: the (L, 32) tile at column v0 of rows t0 .. of x (T, W) (one (b,h)'s rows of the
// scratch), zeros past L and W
static __device__ void load_rows_(float *s, const float *x, int W, int t0, int L, int LC, int v0) {
    stage_(
        LC * CK_TILE,
        [&](int e) {
            int i = e / CK_TILE, c = e % CK_TILE;
            return i < L && v0 + c < W ? x[(size_t)(t0 + i) * W + v0 + c] : 0.0f;
        },
        [&](int e, float v) { s[(e / CK_TILE) * CK_LD + e % CK_TILE] = v; });
}

// s (ntiles(Dk)·32 rows of CK_LD) WRITTEN: the (Dk, 32) column tile at v0 of the state st (Dk, Dv), zeros outside
static __device__ void load_cols_(float *s, const float *st, const DeltaDims &d, int v0) {
    stage_(
        ntiles_(d.Dk) * CK_TILE * CK_TILE,
        [&](int e) {
            int r = e / CK_TILE, x = e % CK_TILE;
            return r < d.Dk && v0 + x < d.Dv ? st[(size_t)r * d.Dv + v0 + x] : 0.0f;
        },
        [&](int e, float v) { s[(e / CK_TILE) * CK_LD + e % CK_TILE] = v; });
}

// ----------------------------------------------------------------------------
// a chunk's new values (the forward's state scan, and the backward again from the checkpoints: the same code, so
// the same bits)

// U (LCP rows of CK_LD) WRITTEN: value columns v0 .. v0+31 of the new values of chunk (t0, L) of (b,h), from the
// state's (Dk, 32) column tile S before it (ntiles(Dk)·32 rows of CK_LD, zero past Dk): KS = K S, R = b (.) (V - e
// (.) KS), U = (I + A)^{-1} R (nn/delta.c's order); zero past L and Dv. kt (LCP rows of CK_LD) is staging; kk (LC, LC)
// the chunk's K K^T (.) Gam. u and ks (T, Dv), one (b,h)'s rows, WRITTEN with U and, when not NULL, KS. K S is a warp
// product (frag_for_'s layout); every thread.
static __device__ void chunk_u_(float *U, float *u, float *ks, float *kt, const float *S, const float *kk,
                                const DeltaScal_ *cs, const float *k, const float *v, const DeltaDims &d, int b, int h,
                                int t0, int L, int LC, int LCP, int v0) {
    int w = threadIdx.x >> 5, mt = w >> 1, nh = w & 1, active = 16 * mt < L;
    float c[2][4] = {};
    load_tile_(U, v, d, d.Dv, b, h, t0, L, LCP, v0, 1.0f);  // V, which R replaces in place below
    for (int c0 = 0; c0 < d.Dk; c0 += CK_TILE) {
        load_tile_(kt, k, d, d.Dk, b, h, t0, L, LCP, c0, 1.0f);
        __syncthreads();
        if (active)
            warp_mma_<CK_SPLIT, 2, false, false>(c, kt + 16 * mt * CK_LD, CK_LD, S + c0 * CK_LD + 16 * nh, CK_LD,
                                                 CK_TILE);
        __syncthreads();
    }
    frag_for_(mt, nh, [&](int n, int r, int i, int col) {
        if (i >= LCP) return;
        int on = i < L && v0 + col < d.Dv;
        U[i * CK_LD + col] = on ? cs->b[i] * (U[i * CK_LD + col] - cs->e[i] * c[n][r]) : 0.0f;
        if (ks && on) ks[(size_t)(t0 + i) * d.Dv + v0 + col] = c[n][r];
    });
    solve_lower_(U, kk, cs, L, LC);
    for (int e = threadIdx.x; e < L * CK_TILE; e += CK_THREADS) {
        int i = e / CK_TILE, col = e % CK_TILE;
        if (v0 + col < d.Dv) u[(size_t)(t0 + i) * d.Dv + v0 + col] = U[i * CK_LD + col];
    }
}

// the shared memory of the kernels that find U (the forward's states, the backward's newvals): the state's column
// tile, KK, the staged keys, U, the chunk's factors
struct NewvalsSmem_ {
    float *S, *kk, *kt, *U;
    DeltaScal_ *cs;
    static __host__ __device__ size_t carve(Carve_ &cv, int LC, int LCP, int Dk, NewvalsSmem_ *s) {
        s->S = cv.rows((size_t)ntiles_(Dk) * CK_TILE);
        s->kk = cv.take<float>((size_t)LC * LC);
        s->kt = cv.rows(LCP);
        s->U = cv.rows(LCP);
        s->cs = cv.take<DeltaScal_>(1);
        return cv.off;
    }
};

// ----------------------------------------------------------------------------
// the kernel both directions launch (gpu/delta.cu)

// LC rounded up to 32: the chunk kernel's warps read 32 rows of keys a column block
static __host__ __device__ __forceinline__ int lcq_(int LC) { return (LC + 31) & ~31; }

struct ChunkSmem_ {
    float *qs, *ks;
    DeltaScal_ *cs;
    static __host__ __device__ size_t carve(Carve_ &cv, int LC, ChunkSmem_ *s) {
        s->qs = cv.rows(lcq_(LC));
        s->ks = cv.rows(lcq_(LC));
        s->cs = cv.take<DeltaScal_>(1);
        return cv.off;
    }
};

__global__ void __launch_bounds__(CK_THREADS)
    delta_chunk_kernel(float *kk, float *p, const float *q, const float *k, const float *beta, const float *g,
                       DeltaDims d);

// ----------------------------------------------------------------------------
// launches

// the scratch: kk, p, dp, m (B,H,chunks, LC,LC): the chunk's K K^T (.) Gam and P, the backward's dP (.) Gam and M;
// st (B,H,chunks, Dk·Dv): the forward's states without a ckpt, the backward's state gradients; u, ks, dr (B,H,T,Dv):
// U, K S and dR; then, 8-byte aligned (the caller's pointer may be any float's), the doubles gs (B,H,T) and pg
// (B,H,T, key tiles): the log-decays' per-token gradient parts
struct DeltaScratch_ {
    float *kk, *p, *dp, *m, *st, *u, *ks, *dr;
    double *gs, *pg;
};
static inline size_t delta_scratch_layout_(const DeltaDims *d, float *base, DeltaScratch_ *s) {
    size_t BH = (size_t)d->B * d->H, nch = nchunks_(*d), LC = lc_(*d), NK = ntiles_(d->Dk);
    size_t LL = BH * nch * LC * LC, ST = BH * nch * d->Dk * d->Dv, TV = BH * d->T * d->Dv;
    size_t nf = 4 * LL + ST + 3 * TV, nd = BH * d->T * (1 + NK);
    if (base) {
        s->kk = base, s->p = s->kk + LL, s->dp = s->p + LL, s->m = s->dp + LL, s->st = s->m + LL;
        s->u = s->st + ST, s->ks = s->u + TV, s->dr = s->ks + TV;
        uintptr_t p = ((uintptr_t)(base + nf) + 7) & ~(uintptr_t)7;
        s->gs = (double *)p, s->pg = s->gs + BH * d->T;
    }
    return nf + 1 + 2 * nd;
}

static inline void delta_check_(const DeltaDims *d, const char *who) {
    const char *why = gpu_delta_refusal(d);
    if (why) gpu_fail_(who, why, __FILE__, __LINE__);
}

#endif
