// What the linear-recurrence engine's two files share (gpu/linrec.cu: the forward and the launches' sizes,
// gpu/linrec_backward.cu: the backward): the chunk's decay factors, the shared-memory carvings of the kernels both
// directions launch, the scratch layout; the tile geometry and staged loads come from gpu/chunk_kit.cuh. Internal to
// those files.
#ifndef SEQ_GPU_LINREC_KIT_CUH
#define SEQ_GPU_LINREC_KIT_CUH

#include <math.h>
#include <stdint.h>

#include "gpu/chunk_kit.cuh"
#include "gpu/linrec.cuh"

#define LR_THREADS CK_THREADS
#define LR_TILE CK_TILE
#define LR_LD CK_LD
#define LR_MAX_L GPU_LINREC_MAX_L
#define LR_NR_LT (LR_MAX_L * LR_TILE / LR_THREADS)   // ... of an L x 32 result
#define LR_NR_TT (LR_TILE * LR_TILE / LR_THREADS)    // ... of a 32 x 32 state tile

// ----------------------------------------------------------------------------
// shapes

static __host__ __device__ __forceinline__ size_t state_size_(const LinrecDims &d) {
    return (size_t)d.Dk * d.Dv + (d.gated_in ? 1 : 0);
}
static __host__ __device__ __forceinline__ int scalar_decay_(int decay) {
    return decay != LINREC_CHANNEL && decay != LINREC_VCHANNEL;
}
static __host__ __device__ __forceinline__ int scalar_decay_(const LinrecDims &d) { return scalar_decay_(d.decay); }
// the floats of one chunk's carry: one for a scalar decay, one per key (LINREC_CHANNEL) or value channel
static __host__ __device__ __forceinline__ int carry_width_(const LinrecDims &d) {
    return scalar_decay_(d) ? 1 : d.decay == LINREC_CHANNEL ? d.Dk : d.Dv;
}

// ----------------------------------------------------------------------------
// one chunk's decay factors

// the scalar decays' per-token factors of one chunk (NONE, HEAD, TOKEN, with or without input gates), as
// nn/linrec.c's chunk_load_: G the in-chunk cumulative log-decay, mp / mi the stabiliser before / after each
// token, lam the log input gate; fq = exp(G_i + M - mi_i), fk = exp(G_L - G_i + lam_i - m_L), carry = exp(G_L + M -
// m_L) (M: the stabiliser the chunk starts from)
struct ChunkScal_ {
    double G[LR_MAX_L], mi[LR_MAX_L], mp[LR_MAX_L], lam[LR_MAX_L];
    float gs[LR_MAX_L], ls[LR_MAX_L];
    float fq[LR_MAX_L], fk[LR_MAX_L];
    float carry;
};

// every thread of the block: cs for tokens t0 .. t0+L-1 of (b,h), from the stabiliser Mp before them (gated_in; a
// float, as the checkpoint keeps it, so the forward and backward compute the same)
static __device__ void chunk_scalars_(ChunkScal_ *cs, const LinrecDims &d, const float *g, const float *li, int b,
                                      int h, int t0, int L, float Mp) {
    int tid = threadIdx.x;
    if (tid < L) {
        size_t r = row_(d, b, t0 + tid, h);
        cs->gs[tid] = d.decay == LINREC_HEAD ? g[h] : d.decay == LINREC_TOKEN ? g[r] : 0.0f;
        cs->ls[tid] = d.gated_in ? li[r] : 0.0f;
    }
    __syncthreads();
    if (tid == 0) {  // L steps of a scan: one thread, from shared memory
        double acc = 0.0, mprev = Mp;
        for (int i = 0; i < L; i++) {
            acc += cs->gs[i];
            cs->G[i] = d.decay == LINREC_HEAD ? (double)(i + 1) * cs->gs[0] : acc;  // no rounding for a constant
            if (d.gated_in) {
                cs->mp[i] = mprev;
                mprev = fmax((double)cs->gs[i] + mprev, (double)cs->ls[i]);
                cs->mi[i] = mprev;
            } else {
                cs->mp[i] = cs->mi[i] = 0.0;
            }
            cs->lam[i] = cs->ls[i];
        }
    }
    __syncthreads();
    double gL = cs->G[L - 1], mL = cs->mi[L - 1], M0 = d.gated_in ? (double)Mp : 0.0;
    if (tid < L) {
        cs->fq[tid] = expf((float)(cs->G[tid] + M0 - cs->mi[tid]));
        cs->fk[tid] = expf((float)(gL - cs->G[tid] + cs->lam[tid] - mL));
    }
    if (tid == 0) cs->carry = expf((float)(gL + M0 - mL));
    __syncthreads();
}

// the weight W_ij = exp(G_i - G_j + lam_j - m_i) of the scalar decays' score (i, j), j <= i
static __device__ __forceinline__ float weight_(const ChunkScal_ *cs, int i, int j) {
    return expf((float)(cs->G[i] - cs->G[j] + cs->lam[j] - cs->mi[i]));
}

// every thread: Gd (LC rows of LR_LD doubles) WRITTEN with the in-chunk cumulative log-decays of channels c0 .. c0+31
// of g (B,T,H,W) (double: differences of sums up to L·|g| cancel); gt (LC rows of LR_LD) is scratch
static __device__ void chan_cum_(double *Gd, float *gt, const float *g, const LinrecDims &d, int W, int b, int h,
                                 int t0, int L, int LC, int c0) {
    load_tile_(gt, g, d, W, b, h, t0, L, LC, c0, 1.0f);
    __syncthreads();
    if (threadIdx.x < LR_TILE) {
        int c = threadIdx.x;
        double acc = 0.0;
        for (int i = 0; i < L; i++) {
            acc += gt[i * LR_LD + c];
            Gd[i * LR_LD + c] = acc;
        }
    }
    __syncthreads();
}

// one thread per channel c of a staged g tile gt (L rows): x[i][c] *= exp(G_L - G_i) (the factor of a token's
// contribution to the chunk's end state) and y[i][c] *= exp(G_i) (of the state's contribution to token i), either
// may be NULL; returns exp(G_L), the state's carry. Two passes over the same sums: G_i is not kept.
static __device__ float chan_factors_(const float *gt, int c, int L, float *x, float *y) {
    double GL = 0.0;
    for (int i = 0; i < L; i++) GL += gt[i * LR_LD + c];
    double acc = 0.0;
    for (int i = 0; i < L; i++) {
        acc += gt[i * LR_LD + c];
        if (x) x[i * LR_LD + c] = expf((float)(GL - acc)) * x[i * LR_LD + c];
        if (y) y[i * LR_LD + c] = expf((float)acc) * y[i * LR_LD + c];
    }
    return expf((float)GL);
}

// every thread: a staged key-side tile x (L rows) times its decay factors to the chunk's end (to_end: fk, or exp(G_L -
// G_i) per channel) or from its start (fq, or exp(G_i)): the scalar decays' from cs, a per-channel decay's from its
// staged log-decays gt (threads 0..31, a channel each). The caller syncs before and after.
static __device__ void scale_keys_(float *x, const float *gt, const ChunkScal_ *cs, int scal, int L, int to_end) {
    if (scal) {
        for (int e = threadIdx.x; e < L * LR_TILE; e += LR_THREADS) {
            int i = e / LR_TILE, c = e % LR_TILE;
            x[i * LR_LD + c] = (to_end ? cs->fk[i] : cs->fq[i]) * x[i * LR_LD + c];
        }
    } else if (threadIdx.x < LR_TILE) {
        chan_factors_(gt, threadIdx.x, L, to_end ? x : NULL, to_end ? NULL : x);
    }
}

// ----------------------------------------------------------------------------
// the per-channel decays' exponents through references

// A per-channel score term x_ic y_jc exp(G_ic - G_jc), j <= i, factors through any reference R between the two
// tokens, exp(G_i - R) exp(R - G_j), both exponents <= 0 (the cumulative log-decays fall), so neither overflows and
// the sums become plain dot products. The chunk's rows split into sub-blocks of LR_SB; for sub-block m >= 1 the
// reference R_m = G at its row before (G_{16m-1}). A pair in different sub-blocks, blk(j) < m <= blk(i), takes
// one of them; a pair within one sub-block keeps its exponent inside the product (LR_SB^2 / 2 terms a sub-block).
//   xh (the hat stack):   x_i exp(G_i - R_m) for rows i >= LR_SB m, sub-blocks m = 1 .. nb-1 stacked
//   yt (the tilde stack): y_j exp(R_m - G_j) for rows j < LR_SB m, the same m
#define LR_SB 16
#define LR_NB (LR_MAX_L / LR_SB)
#define LR_STACK (LR_SB * LR_NB * (LR_NB - 1) / 2)  // rows of either stack: 96 for chunks of 64

// where reference m's rows start: in the tilde stack (rows 0 .. 16m-1) and the hat stack (rows 16m .. LR_MAX_L-1)
static __device__ __forceinline__ int tilde_off_(int m) { return LR_SB * (m - 1) * m / 2; }
static __device__ __forceinline__ int hat_off_(int m) { return LR_SB * ((m - 1) * LR_NB - (m - 1) * m / 2); }

// every thread: xh (LR_STACK rows of LR_LD) and yt (the same) WRITTEN from the staged x, y (LC rows) and the
// cumulative log-decays Gd (LC rows of doubles) of one 32-channel tile; either may be NULL. The hat stack's rows from
// L up to LP (the warp products' padded rows) are zero.
static __device__ void stage_refs_(float *xh, float *yt, const float *x, const float *y, const double *Gd, int L,
                                   int LP) {
    int nb = (L + LR_SB - 1) / LR_SB;
    for (int m = 1; m < nb; m++) {
        const double *R = Gd + (LR_SB * m - 1) * LR_LD;
        if (xh)
            for (int e = threadIdx.x; e < (LP - LR_SB * m) * LR_TILE; e += LR_THREADS) {
                int i = LR_SB * m + e / LR_TILE, c = e % LR_TILE;
                xh[(hat_off_(m) + i - LR_SB * m) * LR_LD + c] =
                    i < L ? x[i * LR_LD + c] * expf((float)(Gd[i * LR_LD + c] - R[c])) : 0.0f;
            }
        if (yt)
            for (int e = threadIdx.x; e < LR_SB * m * LR_TILE; e += LR_THREADS) {
                int j = e / LR_TILE, c = e % LR_TILE;
                yt[(tilde_off_(m) + j) * LR_LD + c] = y[j * LR_LD + c] * expf((float)(R[c] - Gd[j * LR_LD + c]));
            }
    }
}

// ----------------------------------------------------------------------------
// the shared memory of the kernels both directions launch

struct StatesSmem_ {
    float *xs, *ys, *gt, *carry;
    ChunkScal_ *cs;
    static __host__ __device__ size_t carve(Carve_ &cv, int LC, int decay, StatesSmem_ *s) {
        s->xs = cv.take<float>((size_t)LC * LR_LD);
        s->ys = cv.take<float>((size_t)LC * LR_LD);
        s->gt = cv.take<float>((size_t)LC * LR_LD);
        s->carry = cv.take<float>(LR_TILE);
        s->cs = cv.take<ChunkScal_>(1);
        return cv.off;
    }
};

struct ScoresSmem_ {
    float *xs, *ys, *gt, *xh, *yt;
    double *Gd;
    ChunkScal_ *cs;
    static __host__ __device__ size_t carve(Carve_ &cv, int LC, int decay, ScoresSmem_ *s) {
        s->xs = cv.take<float>((size_t)LC * LR_LD);
        s->ys = cv.take<float>((size_t)LC * LR_LD);
        s->gt = cv.take<float>((size_t)LC * LR_LD);
        s->cs = cv.take<ChunkScal_>(1);
        s->Gd = NULL, s->xh = s->yt = NULL;
        if (!scalar_decay_(decay)) {
            s->Gd = cv.take<double>((size_t)LC * LR_LD);
            s->xh = cv.take<float>((size_t)LR_STACK * LR_LD);
            s->yt = cv.take<float>((size_t)LR_STACK * LR_LD);
        }
        return cv.off;
    }
};


// the states (dir 0) or their gradients (dir 1) into st, launched by either direction (gpu/linrec.cu): the chunks'
// outer products of x (times xscale) and y in parallel, then a scan over the chunks with their carries (scratch of
// chunks x carry_width_ floats a (b,h)); mstates holds the stabilisers (gated_in). Kernel names for SEQ_PROFILE.
void linrec_states_(float *st, float *carries, const float *x, const float *y, float xscale, int dir, const float *g,
                    const float *li, const float *mstates, const LinrecDims *d, const char *outer_name,
                    const char *scan_name);

// the chunk scores A (and with dA non-NULL the backward's dA) into the scratch, launched by either direction
// (gpu/linrec.cu); name for SEQ_PROFILE
void linrec_scores_(float *A, float *dA, const float *q, const float *k, const float *v, const float *dout,
                    const float *g, const float *li, const float *states, const LinrecDims *d, const char *name);

// ----------------------------------------------------------------------------
// launches

// the scratch: A and dA (B,H,chunks, LC,LC); st (B,H,chunks, state_size): the forward's states without a ckpt, the
// backward's state gradients; cr (B,H,chunks, carry_width_) the chunks' carries; pq, pk (B,H,T, key tiles); then, 8-byte aligned (the caller's pointer may be any
// float's), the doubles pg (B,H,T, key tiles), hc (B,H,chunks), hs (B,H)
struct Scratch_ {
    float *A, *dA, *st, *cr, *pq, *pk;
    double *pg, *hc, *hs;
};
static inline size_t scratch_layout_(const LinrecDims *d, float *base, Scratch_ *s) {
    size_t BH = (size_t)d->B * d->H, nch = nchunks_(*d), LC = lc_(*d), NK = ntiles_(d->Dk);
    size_t LL = BH * nch * LC * LC, ST = BH * nch * state_size_(*d), P = BH * d->T * NK;
    size_t CR = BH * nch * carry_width_(*d), nf = 2 * LL + ST + CR + 2 * P, nd = P + BH * nch + BH;
    if (base) {
        s->A = base, s->dA = base + LL, s->st = s->dA + LL, s->cr = s->st + ST, s->pq = s->cr + CR, s->pk = s->pq + P;
        uintptr_t p = ((uintptr_t)(base + nf) + 7) & ~(uintptr_t)7;
        s->pg = (double *)p, s->hc = s->pg + P, s->hs = s->hc + BH * nch;
    }
    return nf + 1 + 2 * nd;
}

static inline void check_(const LinrecDims *d, const char *who) {
    const char *why = gpu_linrec_refusal(d);
    if (why) gpu_fail_(who, why, __FILE__, __LINE__);
}

#endif
