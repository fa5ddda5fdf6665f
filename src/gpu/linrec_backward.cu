// The linear-recurrence engine's backward on the GPU (gpu/linrec.cuh; gpu/linrec.cu describes the kernels and
// why they are deterministic): the state gradients walking the chunks backwards, dv, dq and dk per chunk and tile,
// the log-decays' and input gates' gradients.
#include "gpu/linrec_kit.cuh"

// ----------------------------------------------------------------------------

// backward: dv (and the value-side decay's gradient)

struct DvSmem_ {
    float *As, *ys, *vs, *xs, *ks, *Ss, *dSs, *gt, *colacc;
    double *Gd;
    ChunkScal_ *cs;
    static __host__ __device__ size_t carve(Carve_ &cv, int LCP, int decay, DvSmem_ *s) {
        s->As = cv.take<float>((size_t)LCP * (LCP + 1));
        s->ys = cv.take<float>((size_t)LCP * LR_LD);
        s->ks = cv.take<float>((size_t)LCP * LR_LD);
        s->dSs = cv.take<float>((size_t)LR_TILE * LR_LD);
        s->gt = cv.take<float>((size_t)LCP * LR_LD);
        s->cs = cv.take<ChunkScal_>(1);
        s->vs = s->xs = s->Ss = s->colacc = NULL;
        s->Gd = NULL;
        if (decay == LINREC_VCHANNEL) {  // o is recomputed: the values, q', S; the cumulative decays of the value tile
            s->vs = cv.take<float>((size_t)LCP * LR_LD);
            s->xs = cv.take<float>((size_t)LCP * LR_LD);
            s->Ss = cv.take<float>((size_t)LR_TILE * LR_LD);
            s->colacc = cv.take<float>(LR_TILE);
            s->Gd = cv.take<double>((size_t)LCP * LR_LD);
        }
        return cv.off;
    }
};

// dv (B,T,H,Dv) ACCUMULATED, key-side decays: value tile blockIdx.y of chunk blockIdx.x of (b,h) = blockIdx.z, dv_j =
// sum_{i>=j} A_ij dO_i + kt_j^T dS' (kt = fk (.) k). A from the scores kernel, dS' from the backward scan. Warp
// products: warp w the rows 16 (w / 2) .., columns 16 (w % 2) .. of the (LCP, 32) tile; CK_SPLIT's precision.
__global__ void __launch_bounds__(LR_THREADS, 2)
    linrec_dv_kernel(float *dv, const float *A, const float *k, const float *dout, const float *g, const float *li,
                     const float *states, const float *dstates, LinrecDims d) {
    GPU_DYNAMIC_SMEM(unsigned char, smem);
    DvSmem_ s;
    Carve_ cv = {(uintptr_t)smem, 0};
    int LC = lc_(d), LCP = lcp_(d), ALD = LCP + 1, nch = nchunks_(d);
    DvSmem_::carve(cv, LCP, d.decay, &s);
    int ci = blockIdx.x, v0 = blockIdx.y * LR_TILE, bh = blockIdx.z, b = bh / d.H, h = bh % d.H;
    int t0 = ci * d.chunk, L = chunk_len_(d, ci);
    int chan = d.decay == LINREC_CHANNEL, scal = scalar_decay_(d), tid = threadIdx.x;
    int w = tid >> 5, mt = w >> 1, nh = w & 1, active = 16 * mt < L;
    size_t ss = state_size_(d), KV = (size_t)d.Dk * d.Dv, cbase = ((size_t)bh * nch + ci) * ss;
    const float *dst = dstates + cbase;
    if (scal) chunk_scalars_(s.cs, d, g, li, b, h, t0, L, d.gated_in ? states[cbase + KV] : 0.0f);
    load_ll_pad_(s.As, A + ((size_t)bh * nch + ci) * LC * LC, LC, LCP, ALD);
    load_tile_(s.ys, dout, d, d.Dv, b, h, t0, L, LCP, v0, 1.0f);
    __syncthreads();
    // A^T dO: rows j of A^T are A's columns, so only i >= 16 mt contribute
    float c[2][4] = {};
    if (active)
        warp_mma_<CK_SPLIT, 2, true, false>(c, s.As + 16 * mt * ALD + 16 * mt, ALD, s.ys + 16 * mt * LR_LD + 16 * nh,
                                         LR_LD, LCP - 16 * mt);
    for (int c0 = 0; c0 < d.Dk; c0 += LR_TILE) {
        load_tile_(s.ks, k, d, d.Dk, b, h, t0, L, LCP, c0, 1.0f);
        load_state_(s.dSs, dst, d, c0, v0);
        if (chan) load_tile_(s.gt, g, d, d.Dk, b, h, t0, L, LC, c0, 1.0f);
        __syncthreads();
        scale_keys_(s.ks, s.gt, s.cs, scal, L, 1);
        __syncthreads();
        if (active) warp_mma_<CK_SPLIT, 2, false, false>(c, s.ks + 16 * mt * LR_LD, LR_LD, s.dSs + 16 * nh, LR_LD, LR_TILE);
        __syncthreads();
    }
    if (!active) return;
    auto at = [&](int n, int r) -> long long {
        int j = 16 * mt + frag_row_(r), col = 16 * nh + frag_col_(n, r);
        return j < L && v0 + col < d.Dv ? (long long)(row_(d, b, t0 + j, h) * d.Dv + v0 + col) : -1;
    };
    float old[2][4];
    frag_gather_<2>(old, dv, at);
    #pragma unroll
    for (int n = 0; n < 2; n++)
        #pragma unroll
        for (int r = 0; r < 4; r++)
            if (at(n, r) >= 0) dv[at(n, r)] = old[n][r] + c[n][r];
}

// dv (B,T,H,Dv) ACCUMULATED, the value-side decay (LINREC_VCHANNEL): value tile blockIdx.y of chunk blockIdx.x of
// (b,h) = blockIdx.z, dv_jc = sum_{i>=j} A_ij dO_ic exp(G_ic - G_jc) + fv_jc (k_j^T dS')_c, and, the value tile holding
// every term of its channels' log-decay gradient, dg (B,T,H,Dv) ACCUMULATED (when not NULL): the reverse cumulative
// sum over the chunk of dO (.) o - v (.) dv, plus at the last token carry (.) colsum(S (.) dS') + sum_j vt_j (.) (k_j^T
// dS'), with o recomputed. A from the scores kernel, dS' from the backward scan, S from states. Thread e: rows e / 32,
// + 8, ..., column e % 32 (the exponent inside the products keeps them on the CUDA cores).
__global__ void __launch_bounds__(LR_THREADS)
    linrec_dv_vside_kernel(float *dv, float *dg, const float *A, const float *q, const float *k, const float *v,
                           const float *dout, const float *g, const float *states, const float *dstates, LinrecDims d) {
    GPU_DYNAMIC_SMEM(unsigned char, smem);
    DvSmem_ s;
    Carve_ cv = {(uintptr_t)smem, 0};
    int LC = lc_(d), LCP = lcp_(d), ALD = LCP + 1, nch = nchunks_(d);
    DvSmem_::carve(cv, LCP, d.decay, &s);
    int ci = blockIdx.x, v0 = blockIdx.y * LR_TILE, bh = blockIdx.z, b = bh / d.H, h = bh % d.H;
    int t0 = ci * d.chunk, L = chunk_len_(d, ci), tid = threadIdx.x;
    size_t cbase = ((size_t)bh * nch + ci) * state_size_(d);
    const float *st = states + cbase, *dst = dstates + cbase;
    chan_cum_(s.Gd, s.gt, g, d, d.Dv, b, h, t0, L, LC, v0);
    load_ll_pad_(s.As, A + ((size_t)bh * nch + ci) * LC * LC, LC, LCP, ALD);
    load_tile_(s.ys, dout, d, d.Dv, b, h, t0, L, LC, v0, 1.0f);
    load_tile_(s.vs, v, d, d.Dv, b, h, t0, L, LC, v0, 1.0f);
    __syncthreads();
    // acc: dv's intra-chunk part; racc: q' S; dvt: k^T dS'
    float acc[LR_NR_LT], racc[LR_NR_LT], dvt[LR_NR_LT];
    #pragma unroll
    for (int r = 0; r < LR_NR_LT; r++) {
        int e = tid + r * LR_THREADS, j = e / LR_TILE, col = e % LR_TILE;
        float a = 0.0f;
        racc[r] = dvt[r] = 0.0f;
        if (j < L) {
            double gj = s.Gd[j * LR_LD + col];
            for (int i = j; i < L; i++)
                a += s.As[i * ALD + j] * s.ys[i * LR_LD + col] * expf((float)(s.Gd[i * LR_LD + col] - gj));
        }
        acc[r] = a;
    }
    float colacc = 0.0f;  // thread col < 32: carry_col sum_c S_c,col dS'_c,col
    for (int c0 = 0; c0 < d.Dk; c0 += LR_TILE) {
        load_tile_(s.ks, k, d, d.Dk, b, h, t0, L, LC, c0, 1.0f);
        load_state_(s.dSs, dst, d, c0, v0);
        load_tile_(s.xs, q, d, d.Dk, b, h, t0, L, LC, c0, d.scale);
        load_state_(s.Ss, st, d, c0, v0);
        __syncthreads();
        #pragma unroll
        for (int r = 0; r < LR_NR_LT; r++) {
            int e = tid + r * LR_THREADS, j = e / LR_TILE, col = e % LR_TILE;
            if (j >= L) continue;
            const float *kj = s.ks + j * LR_LD, *qj = s.xs + j * LR_LD;
            float a = racc[r], t = dvt[r];
            for (int x = 0; x < LR_TILE; x++) {
                a += qj[x] * s.Ss[x * LR_LD + col];
                t += kj[x] * s.dSs[x * LR_LD + col];
            }
            racc[r] = a, dvt[r] = t;
        }
        if (tid < LR_TILE) {
            float carry = expf((float)s.Gd[(L - 1) * LR_LD + tid]);
            for (int x = 0; x < LR_TILE; x++) colacc += carry * s.Ss[x * LR_LD + tid] * s.dSs[x * LR_LD + tid];
        }
        __syncthreads();
    }
    // dv += fv (.) dvt, then dG = dO (.) o - v (.) dv staged in xs, vt (.) dvt in ks (both free now)
    if (tid < LR_TILE) s.colacc[tid] = colacc;
    #pragma unroll
    for (int r = 0; r < LR_NR_LT; r++) {
        int e = tid + r * LR_THREADS, i = e / LR_TILE, col = e % LR_TILE;
        if (i >= L) continue;
        double gi = s.Gd[i * LR_LD + col], GL = s.Gd[(L - 1) * LR_LD + col];
        float oi = expf((float)gi) * racc[r];
        for (int j = 0; j <= i; j++)
            oi += s.As[i * ALD + j] * s.vs[j * LR_LD + col] * expf((float)(gi - s.Gd[j * LR_LD + col]));
        float fv = expf((float)(GL - gi)), dvi = acc[r] + fv * dvt[r], vi = s.vs[i * LR_LD + col];
        s.xs[i * LR_LD + col] = s.ys[i * LR_LD + col] * oi - vi * dvi;
        s.ks[i * LR_LD + col] = fv * vi * dvt[r];
        if (v0 + col < d.Dv) dv[row_(d, b, t0 + i, h) * d.Dv + v0 + col] += dvi;
    }
    __syncthreads();
    if (!dg) return;
    if (tid < LR_TILE) {
        int c = tid;
        float *dG = s.xs;
        dG[(L - 1) * LR_LD + c] += s.colacc[c];
        for (int i = 0; i < L; i++) dG[(L - 1) * LR_LD + c] += s.ks[i * LR_LD + c];
        for (int i = L - 2; i >= 0; i--) dG[i * LR_LD + c] += dG[(i + 1) * LR_LD + c];
    }
    __syncthreads();
    add_rows_(dg, s.xs, d, d.Dv, b, h, t0, L, v0);  // dg += dG, every thread
}

// ----------------------------------------------------------------------------
// backward: dq, dk and the key-side log-decays' gradients

struct DqkSmem_ {
    float *qs, *ks, *dAs, *Ss, *dSs, *ys, *vs, *gt, *xh, *yt;
    double *Gd;
    ChunkScal_ *cs;
    static __host__ __device__ size_t carve(Carve_ &cv, int LCP, int decay, DqkSmem_ *s) {
        s->qs = cv.take<float>((size_t)LCP * LR_LD);
        s->ks = cv.take<float>((size_t)LCP * LR_LD);
        s->dAs = cv.take<float>((size_t)LCP * (LCP + 1));
        s->Ss = cv.take<float>((size_t)LR_TILE * LR_LD);
        s->dSs = cv.take<float>((size_t)LR_TILE * LR_LD);
        s->ys = cv.take<float>((size_t)LCP * LR_LD);
        s->vs = cv.take<float>((size_t)LCP * LR_LD);
        s->gt = cv.take<float>((size_t)LCP * LR_LD);
        s->cs = cv.take<ChunkScal_>(1);
        s->Gd = NULL, s->xh = s->yt = NULL;
        if (decay == LINREC_CHANNEL) {
            s->Gd = cv.take<double>((size_t)LCP * LR_LD);
            s->xh = cv.take<float>((size_t)LR_STACK * LR_LD);
            s->yt = cv.take<float>((size_t)LR_STACK * LR_LD);
        }
        return cv.off;
    }
};

// dq, dk (B,T,H,Dk) ACCUMULATED: key tile blockIdx.y of chunk blockIdx.x of (b,h) = blockIdx.z (nn/linrec.c's
// backward; dq is scale times the gradient of q'):
//   dq'_i = sum_{j<=i} dA_ij k_j [(.) exp(G_i - G_j)] + fq_i (.) (S dO_i),  dk_j = sum_{i>=j} dA_ij q'_i [...] +
//   fk_j (.) (dS' v_j)   (LINREC_VCHANNEL: + S dr_i and + dS' vt_j, its decay inside dr and vt)
// with dA from the scores kernel (W included for the scalar decays). The key-side log-decays' gradient per channel,
// dG_i = q'_i (.) dq'_i - k_i (.) dk_i, plus at the last token carry (.) rowsum(S (.) dS') + sum_j kt_j (.) (dS' v_j):
// LINREC_CHANNEL: dg (B,T,H,Dk) ACCUMULATED with its reverse cumulative sum over the chunk. Scalar decays: pg
// (B,H,T, key tiles) WRITTEN with each token's sum of dG over the tile's channels (double), pq and pk (B,H,T, key
// tiles) with q' . dq' and k . dk over them (the stabiliser's and dli's terms); each NULL when not wanted.
// The products are warp products (warp w: rows 16 (w / 2) .., channels 16 (w % 2) .. of the (LCP, 32) tile; CK_SPLIT's
// precision); per key channel, pairs across sub-blocks go through a reference (gpu/linrec_kit.cuh) and pairs
// within one keep the exponential, summed by the lane that owns the element.
__global__ void __launch_bounds__(LR_THREADS, 2)
    linrec_dqk_kernel(float *dq, float *dk, float *dg, double *pg, float *pq, float *pk, const float *dA,
                      const float *q, const float *k, const float *v, const float *dout, const float *g,
                      const float *li, const float *states, const float *dstates, LinrecDims d) {
    GPU_DYNAMIC_SMEM(unsigned char, smem);
    DqkSmem_ s;
    Carve_ cv = {(uintptr_t)smem, 0};
    int LC = lc_(d), LCP = lcp_(d), ALD = LCP + 1, nch = nchunks_(d);
    DqkSmem_::carve(cv, LCP, d.decay, &s);
    int ci = blockIdx.x, c0 = blockIdx.y * LR_TILE, bh = blockIdx.z, b = bh / d.H, h = bh % d.H;
    int t0 = ci * d.chunk, L = chunk_len_(d, ci), NK = ntiles_(d.Dk);
    int chan = d.decay == LINREC_CHANNEL, vside = d.decay == LINREC_VCHANNEL, scal = scalar_decay_(d), tid = threadIdx.x;
    int w = tid >> 5, mt = w >> 1, nh = w & 1, active = 16 * mt < L;
    size_t ss = state_size_(d), KV = (size_t)d.Dk * d.Dv, cbase = ((size_t)bh * nch + ci) * ss;
    const float *st = states + cbase, *dst = dstates + cbase;
    if (scal) chunk_scalars_(s.cs, d, g, li, b, h, t0, L, d.gated_in ? st[KV] : 0.0f);
    if (chan) chan_cum_(s.Gd, s.gt, g, d, d.Dk, b, h, t0, L, LC, c0);
    load_tile_(s.qs, q, d, d.Dk, b, h, t0, L, LCP, c0, d.scale);
    load_tile_(s.ks, k, d, d.Dk, b, h, t0, L, LCP, c0, 1.0f);
    load_ll_pad_(s.dAs, dA + ((size_t)bh * nch + ci) * LC * LC, LC, LCP, ALD);
    __syncthreads();
    if (chan) {
        stage_refs_(s.xh, s.yt, s.qs, s.ks, s.Gd, L, LCP);
        __syncthreads();
    }
    // the intra-chunk parts: cq = dq', ck = dk (per channel first the cross-sub-block sums, then their factors and
    // the diagonal sub-block's terms)
    float cq[2][4] = {}, ck[2][4] = {}, sq[2][4] = {}, sk[2][4] = {};
    const float *dAr = s.dAs + 16 * mt * ALD;  // the warp's rows of dA
    if (active && !chan) {
        warp_mma_<CK_SPLIT, 2, false, false>(cq, dAr, ALD, s.ks + 16 * nh, LR_LD, 16 * (mt + 1));
        warp_mma_<CK_SPLIT, 2, true, false>(ck, dAr + 16 * mt, ALD, s.qs + 16 * mt * LR_LD + 16 * nh, LR_LD,
                                         LCP - 16 * mt);
    } else if (active) {
        int lo = 16 * mt, hi = min(lo + 16, L);
        if (mt > 0) warp_mma_<CK_SPLIT, 2, false, false>(cq, dAr, ALD, s.yt + tilde_off_(mt) * LR_LD + 16 * nh, LR_LD, lo);
        if (hi < L)
            warp_mma_<CK_SPLIT, 2, true, false>(ck, s.dAs + (lo + 16) * ALD + lo, ALD,
                                             s.xh + hat_off_(mt + 1) * LR_LD + 16 * nh, LR_LD, LCP - lo - 16);
        #pragma unroll
        for (int n = 0; n < 2; n++)
            #pragma unroll
            for (int r = 0; r < 4; r++) {
                int i = lo + frag_row_(r), c = 16 * nh + frag_col_(n, r);
                if (i >= L) continue;
                double gi = s.Gd[i * LR_LD + c];
                float a = mt > 0 ? expf((float)(gi - s.Gd[(lo - 1) * LR_LD + c])) * cq[n][r] : 0.0f;
                float bk = hi < L ? expf((float)(s.Gd[(hi - 1) * LR_LD + c] - gi)) * ck[n][r] : 0.0f;
                for (int j = lo; j <= i; j++)
                    a += s.dAs[i * ALD + j] * expf((float)(gi - s.Gd[j * LR_LD + c])) * s.ks[j * LR_LD + c];
                for (int j = i; j < hi; j++)
                    bk += s.dAs[j * ALD + i] * expf((float)(s.Gd[j * LR_LD + c] - gi)) * s.qs[j * LR_LD + c];
                cq[n][r] = a, ck[n][r] = bk;
            }
    }
    // the state parts: sq = dO S^T, sk = v dS'^T over the value tiles (the value-side decay: dr = fq (.) dO and
    // vt = fv (.) v instead, straight into dq', dk); rowsum(S (.) dS') for the key-side carry's gradient
    float rowacc = 0.0f;
    for (int v0 = 0; v0 < d.Dv; v0 += LR_TILE) {
        load_state_(s.Ss, st, d, c0, v0);
        load_state_(s.dSs, dst, d, c0, v0);
        load_tile_(s.ys, dout, d, d.Dv, b, h, t0, L, LCP, v0, 1.0f);
        load_tile_(s.vs, v, d, d.Dv, b, h, t0, L, LCP, v0, 1.0f);
        if (vside) load_tile_(s.gt, g, d, d.Dv, b, h, t0, L, LC, v0, 1.0f);
        __syncthreads();
        if (vside) {
            if (tid < LR_TILE) chan_factors_(s.gt, tid, L, s.vs, s.ys);
            __syncthreads();
        }
        if (active) {
            warp_mma_<CK_SPLIT, 2, false, true>(vside ? cq : sq, s.ys + 16 * mt * LR_LD, LR_LD, s.Ss + 16 * nh * LR_LD,
                                             LR_LD, LR_TILE);
            warp_mma_<CK_SPLIT, 2, false, true>(vside ? ck : sk, s.vs + 16 * mt * LR_LD, LR_LD, s.dSs + 16 * nh * LR_LD,
                                             LR_LD, LR_TILE);
        }
        if (!vside && tid < LR_TILE)
            for (int x = 0; x < LR_TILE; x++) rowacc += s.Ss[tid * LR_LD + x] * s.dSs[tid * LR_LD + x];
        __syncthreads();
    }
    // dq', dk complete: write them, and stage for the log-decays' gradients (each lane its own elements, so q' and
    // k are overwritten in place): q' (.) dq' in qs, k (.) dk in ks, dG = their difference in ys, kt (.) sk in vs
    int want_g = dg && d.decay != LINREC_NONE, want_qk = scal && d.gated_in;
    auto at = [&](int n, int r) -> long long {
        int i = 16 * mt + frag_row_(r), c = 16 * nh + frag_col_(n, r);
        return active && i < L && c0 + c < d.Dk ? (long long)(row_(d, b, t0 + i, h) * d.Dk + c0 + c) : -1;
    };
    float oq[2][4], ok[2][4];  // dq's and dk's old values (accumulated)
    frag_gather_<2>(oq, dq, at);
    frag_gather_<2>(ok, dk, at);
    if (active) {
        #pragma unroll
        for (int n = 0; n < 2; n++)
            #pragma unroll
            for (int r = 0; r < 4; r++) {
                int i = 16 * mt + frag_row_(r), c = 16 * nh + frag_col_(n, r);
                if (i >= L) continue;
                float dqp = cq[n][r], dkp = ck[n][r];
                if (!vside) {
                    float fq, fk;
                    if (chan) {
                        double gi = s.Gd[i * LR_LD + c], gL = s.Gd[(L - 1) * LR_LD + c];
                        fq = expf((float)gi), fk = expf((float)(gL - gi));
                    } else {
                        fq = s.cs->fq[i], fk = s.cs->fk[i];
                    }
                    dqp += sq[n][r] * fq;
                    dkp += sk[n][r] * fk;
                    float ki = s.ks[i * LR_LD + c], qd = s.qs[i * LR_LD + c] * dqp, kd = ki * dkp;
                    s.qs[i * LR_LD + c] = qd;
                    s.ks[i * LR_LD + c] = kd;
                    s.ys[i * LR_LD + c] = qd - kd;
                    s.vs[i * LR_LD + c] = fk * ki * sk[n][r];
                }
                if (c0 + c < d.Dk) {
                    size_t o = row_(d, b, t0 + i, h) * d.Dk + c0 + c;
                    dq[o] = oq[n][r] + d.scale * dqp;
                    dk[o] = ok[n][r] + dkp;
                }
            }
    }
    if (vside || !(want_g || want_qk)) return;
    __syncthreads();
    // the last token's terms where G_L itself appears: carry (.) rowsum(S (.) dS') and sum_j kt_j (.) sk_j; per
    // channel, dg is then the reverse cumulative sum over the chunk
    float *dGs = s.ys;
    if (want_g && tid < LR_TILE) {
        int c = tid;
        float carry = chan ? expf((float)s.Gd[(L - 1) * LR_LD + c]) : s.cs->carry;
        float *gl = dGs + (L - 1) * LR_LD + c;
        *gl += carry * rowacc;
        for (int j = 0; j < L; j++) *gl += s.vs[j * LR_LD + c];
        if (chan)
            for (int i = L - 2; i >= 0; i--) dGs[i * LR_LD + c] += dGs[(i + 1) * LR_LD + c];
    }
    if (chan) {  // dg += dG, every thread, dg's old values read in batches
        __syncthreads();
        if (want_g) add_rows_(dg, dGs, d, d.Dk, b, h, t0, L, c0);
        return;
    }
    __syncthreads();
    // scalar decays: per token, the tile's sums over its channels in order (the chunk_sums kernel adds the tiles)
    if (tid < L) {
        int i = tid;
        size_t p = ((size_t)bh * d.T + t0 + i) * NK + blockIdx.y;
        if (want_g) {
            double sg = 0.0;
            for (int c = 0; c < LR_TILE; c++) sg += dGs[i * LR_LD + c];
            pg[p] = sg;
        }
        if (want_qk) {
            float sq = 0.0f, sk = 0.0f;
            for (int c = 0; c < LR_TILE; c++) sq += s.qs[i * LR_LD + c], sk += s.ks[i * LR_LD + c];
            pq[p] = sq;
            pk[p] = sk;
        }
    }
}

// ----------------------------------------------------------------------------
// backward: the scalar decays' per-token sums, the stabiliser, the per-head sum

// the scalar log-decay of token t of (b,h) (0 for LINREC_NONE)
static __device__ __forceinline__ float g_scalar_(const LinrecDims &d, const float *g, size_t r, int h) {
    return d.decay == LINREC_HEAD ? g[h] : d.decay == LINREC_TOKEN ? g[r] : 0.0f;
}

// one thread per (b,h, chunk): the dqk kernel's partials added over the key tiles in order. pg (B,H,T, key tiles) or
// NULL: dG's reverse cumulative sum over the chunk into dg (B,T,H) ACCUMULATED (LINREC_TOKEN) or, per-head decay,
// hc (B,H,chunks) WRITTEN with the chunk's share of dg[h] (double). pk (same shape) or NULL: dli (B,T,H) += k . dk.
__global__ void linrec_chunk_sums_kernel(float *dg, float *dli, double *hc, const double *pg, const float *pk,
                                         LinrecDims d) {
    int nch = nchunks_(d), NK = ntiles_(d.Dk);
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)d.B * d.H * nch) return;
    int bh = (int)(idx / nch), ci = (int)(idx % nch), b = bh / d.H, h = bh % d.H, t0 = ci * d.chunk;
    int L = chunk_len_(d, ci);
    double acc = 0.0, hacc = 0.0;
    for (int i = L - 1; i >= 0; i--) {
        size_t p = ((size_t)bh * d.T + t0 + i) * NK, r = row_(d, b, t0 + i, h);
        if (pg) {
            double sg = 0.0;
            for (int kt = 0; kt < NK; kt++) sg += pg[p + kt];
            acc += sg;
            if (d.decay == LINREC_TOKEN) dg[r] += (float)acc;
            else hacc += acc;
        }
        if (pk) {
            float sk = 0.0f;
            for (int kt = 0; kt < NK; kt++) sk += pk[p + kt];
            dli[r] += sk;
        }
    }
    if (hc) hc[idx] = hacc;
}

// one thread per (b,h), its tokens backwards (gated_in): the stabiliser's gradient dm_t = dm_t (caller's, or 0) - q'_t .
// dq'_t (pq summed over the key tiles) + what m_{t+1} passed on, given by m_t = max(g_t + m_{t-1}, li_t) to li_t
// (dli ACCUMULATED) or to g_t (dg ACCUMULATED, LINREC_TOKEN; hs (B,H) WRITTEN, per-head decay, when not NULL) and
// m_{t-1}. The stabilisers before each token are recomputed from the chunk's checkpoint, as the forward had them.
__global__ void linrec_stabiliser_kernel(float *dg, float *dli, double *hs, const float *dm, const float *pq,
                                         const float *g, const float *li, const float *states, LinrecDims d) {
    int bh = blockIdx.x * blockDim.x + threadIdx.x;
    if (bh >= d.B * d.H) return;
    int b = bh / d.H, h = bh % d.H, nch = nchunks_(d), NK = ntiles_(d.Dk);
    size_t ss = state_size_(d), KV = (size_t)d.Dk * d.Dv;
    double carry = 0.0, dgh = 0.0, mp[LR_MAX_L];
    for (int ci = nch - 1; ci >= 0; ci--) {
        int t0 = ci * d.chunk, L = chunk_len_(d, ci);
        double mprev = states[((size_t)bh * nch + ci) * ss + KV];
        for (int i = 0; i < L; i++) {
            size_t r = row_(d, b, t0 + i, h);
            mp[i] = mprev;
            mprev = fmax((double)g_scalar_(d, g, r, h) + mprev, (double)li[r]);
        }
        for (int i = L - 1; i >= 0; i--) {
            size_t r = row_(d, b, t0 + i, h), p = ((size_t)bh * d.T + t0 + i) * NK;
            float qdq = 0.0f;
            for (int kt = 0; kt < NK; kt++) qdq += pq[p + kt];
            double dmt = (double)((dm ? dm[r] : 0.0f) - qdq) + carry;
            double gt = g_scalar_(d, g, r, h);
            if ((double)li[r] >= gt + mp[i]) {  // the forward's max chose the input gate
                dli[r] += (float)dmt;
                carry = 0.0;
            } else {
                if (dg && d.decay == LINREC_TOKEN) dg[r] += (float)dmt;
                else if (dg && d.decay == LINREC_HEAD) dgh += dmt;
                carry = dmt;
            }
        }
    }
    if (hs) hs[bh] = dgh;
}

// one thread per head: dg (H,) ACCUMULATED with the per-head decay's gradient, over b in order, each b's chunks
// (hc (B,H,chunks), or NULL) backwards and then its stabiliser's part (hs (B,H), or NULL), as nn/linrec.c orders them
__global__ void linrec_head_sum_kernel(float *dg, const double *hc, const double *hs, LinrecDims d) {
    int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= d.H) return;
    int nch = nchunks_(d);
    double s = 0.0;
    for (int b = 0; b < d.B; b++) {
        size_t bh = (size_t)b * d.H + h;
        double x = 0.0;
        if (hc)
            for (int ci = nch - 1; ci >= 0; ci--) x += hc[bh * nch + ci];
        if (hs) x += hs[bh];
        s += x;
    }
    dg[h] += (float)s;
}

// ----------------------------------------------------------------------------

// ----------------------------------------------------------------------------
// launch

void gpu_linrec_backward(float *dq, float *dk, float *dv, float *dg, float *dli, const float *dout, const float *dm,
                         const float *ckpt, const float *q, const float *k, const float *v, const float *g,
                         const float *li, float *scratch, const LinrecDims *d) {
    check_(d, "gpu_linrec_backward");
    LinrecDims dd = *d;
    Scratch_ s = {};
    scratch_layout_(d, scratch, &s);
    if (d->decay == LINREC_NONE) dg = NULL;
    int nch = nchunks_(dd), NK = ntiles_(d->Dk), NV = ntiles_(d->Dv), BH = d->B * d->H;
    int vside = d->decay == LINREC_VCHANNEL, scal = scalar_decay_(dd), head = d->decay == LINREC_HEAD;
    float *nil = NULL;
    double *nild = NULL;
    size_t b_dv = smem_of_<DvSmem_>(lcp_(dd), d->decay), b_dqk = smem_of_<DqkSmem_>(lcp_(dd), d->decay);
    smem_limit_(linrec_dv_kernel, b_dv);
    smem_limit_(linrec_dv_vside_kernel, b_dv);
    smem_limit_(linrec_dqk_kernel, b_dqk);
    linrec_states_(s.st, s.cr, q, dout, d->scale, 1, g, li, ckpt, d, "linrec.bwd.outer", "linrec.bwd.dscan");
    linrec_scores_(s.A, s.dA, q, k, v, dout, g, li, ckpt, d, "linrec.bwd.scores");
    dim3 g_dv(nch, NV, BH);
    double f_dv = chunk_flops_(dd, 2, 0, 1), f_dqk = chunk_flops_(dd, 4, 2, 0);
    if (vside)
        GPU_TIMED_FLOPS("linrec.bwd.dv", f_dv, linrec_dv_vside_kernel<<<g_dv, LR_THREADS, b_dv>>>(dv, dg, s.A, q, k, v, dout, g, ckpt, s.st, dd));
    else
        GPU_TIMED_FLOPS("linrec.bwd.dv", f_dv, linrec_dv_kernel<<<g_dv, LR_THREADS, b_dv>>>(dv, s.A, k, dout, g, li, ckpt, s.st, dd));
    KERNEL_CHECK();
    // the scalar decays' partials: dG's sums where a dg is wanted, q' . dq' and k . dk where input gates are
    double *pg = scal && dg ? s.pg : nild;
    float *pq = scal && d->gated_in ? s.pq : nil, *pk = scal && d->gated_in ? s.pk : nil;
    dim3 g_qk(nch, NK, BH);
    float *dgk = vside ? nil : dg;
    GPU_TIMED_FLOPS("linrec.bwd.dqk", f_dqk, linrec_dqk_kernel<<<g_qk, LR_THREADS, b_dqk>>>(dq, dk, dgk, pg, pq, pk, s.dA, q, k, v, dout, g, li, ckpt, s.st, dd));
    KERNEL_CHECK();
    if (!scal || !(pg || pk)) return;
    double *hc = head && pg ? s.hc : nild, *hs = head && dg && d->gated_in ? s.hs : nild;
    GPU_TIMED("linrec.bwd.sums", linrec_chunk_sums_kernel<<<gpu_blocks((size_t)BH * nch, 128), 128>>>(dg, dli, hc, pg,
                                                                                                       pk, dd));
    KERNEL_CHECK();
    if (d->gated_in) {
        GPU_TIMED("linrec.bwd.stabiliser", linrec_stabiliser_kernel<<<gpu_blocks(BH, 64), 64>>>(dg, dli, hs, dm, pq, g,
                                                                                                 li, ckpt, dd));
        KERNEL_CHECK();
    }
    if (head && dg) {
        GPU_TIMED("linrec.bwd.head_sum", linrec_head_sum_kernel<<<gpu_blocks(d->H, 64), 64>>>(dg, hc, hs, dd));
        KERNEL_CHECK();
    }
}
