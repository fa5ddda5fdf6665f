// The delta-rule engine's backward on the GPU (gpu/delta.cuh; gpu/delta.cu describes the forward's kernels and why
// they are deterministic), nn/delta.c's delta_backward split into kernels:
//
//   chunk      grid (chunks, B·H): KK and P again (gpu/delta.cu)
//   newvals    grid (chunks, Dv/32, B·H): U and K S of every chunk at once from its checkpoint (the states kernel's
//              own code, so the forward's bits)
//   dstates    grid (Dv/32, B·H): the state gradients, walking the chunks backwards with a (Dk, 32) column tile of
//              dS' in shared memory: dU = P^T dO + (f (.) K) dS', dR = (I + A)^{-T} dU by back substitution,
//              dv = b (.) dR, then dS = eL dS' + (e (.) Q')^T dO + K^T dKS with dKS = -b e (.) dR. The value columns
//              stay independent backwards too (every product above keeps a column a column), so the split is the
//              forward's
//   dscores    grid (chunks, B·H): dP = dO U^T and dA = -dR U^T over all of Dv, then the L x L terms they feed: dP
//              (.) Gam and M = dA b Gam for dq and dk, dbeta complete, the log-decays' per-token part from dP, dA
//              and R
//   dqk        grid (chunks, Dk/32, B·H): dq' and dk per key tile from dP (.) Gam, M, the checkpoint, dS', U and dR,
//              and the log-decays' partial per token and key tile
//   dg_sums    one thread per (b,h, chunk): dg, the reverse cumulative sum of those parts over the chunk
#include "gpu/delta_kit.cuh"

// ----------------------------------------------------------------------------
// the new values again

// u, ks (B,H,T,Dv) WRITTEN: value tile blockIdx.y of chunk blockIdx.x of (b,h) = blockIdx.z: the chunk's new values U
// and K S from its state in ckpt (B,H,chunks, Dk·Dv). kk from the chunk kernel; k, v, beta, g as the forward's.
__global__ void __launch_bounds__(CK_THREADS)
    delta_newvals_kernel(float *u, float *ks, const float *kk, const float *k, const float *v, const float *beta,
                         const float *g, const float *ckpt, DeltaDims d) {
    GPU_DYNAMIC_SMEM(unsigned char, smem);
    NewvalsSmem_ s;
    Carve_ cv = {(uintptr_t)smem, 0};
    int LC = lc_(d), LCP = lcp_(d), nch = nchunks_(d);
    NewvalsSmem_::carve(cv, LC, LCP, d.Dk, &s);
    int ci = blockIdx.x, v0 = blockIdx.y * CK_TILE, bh = blockIdx.z, b = bh / d.H, h = bh % d.H;
    int t0 = ci * d.chunk, L = chunk_len_(d, ci);
    size_t tv = (size_t)bh * d.T * d.Dv;
    load_cols_(s.S, ckpt + ((size_t)bh * nch + ci) * d.Dk * d.Dv, d, v0);
    load_ll_(s.kk, kk + ((size_t)bh * nch + ci) * LC * LC, LC);
    delta_scalars_(s.cs, d, beta, g, b, h, t0, L);
    chunk_u_(s.U, u + tv, ks + tv, s.kt, s.S, s.kk, s.cs, k, v, d, b, h, t0, L, LC, LCP, v0);
}

// ----------------------------------------------------------------------------
// the state gradients

struct DstatesSmem_ {
    float *dS, *kk, *P, *dO, *X, *qt, *kt;
    DeltaScal_ *cs;
    static __host__ __device__ size_t carve(Carve_ &cv, int LC, int LCP, int Dk, DstatesSmem_ *s) {
        s->dS = cv.rows((size_t)ntiles_(Dk) * CK_TILE);
        s->kk = cv.take<float>((size_t)LC * LC);
        s->P = cv.take<float>((size_t)LCP * (LCP + 1));
        s->dO = cv.rows(LCP);
        s->X = cv.rows(LCP);
        s->qt = cv.rows(LCP);
        s->kt = cv.rows(LCP);
        s->cs = cv.take<DeltaScal_>(1);
        return cv.off;
    }
};

// dstates (B,H,chunks, Dk·Dv) WRITTEN: columns v0 = 32 blockIdx.x .. of dS', the gradient of the state each chunk of
// (b,h) = blockIdx.y hands on (zero for the last); dr (B,H,T,Dv) WRITTEN with dR; dv (B,T,H,Dv) ACCUMULATED with b
// (.) dR. kk, p from the chunk kernel; q, k (B,T,H,Dk), dout (B,T,H,Dv), beta, g (B,T,H). The (L, 32) products in
// frag_for_'s layout, the state tiles' in state_mma_'s.
__global__ void __launch_bounds__(CK_THREADS)
    delta_dstates_kernel(float *dstates, float *dr, float *dv, const float *kk, const float *p, const float *q,
                         const float *k, const float *dout, const float *beta, const float *g, DeltaDims d) {
    GPU_DYNAMIC_SMEM(unsigned char, smem);
    DstatesSmem_ s;
    Carve_ cv = {(uintptr_t)smem, 0};
    int LC = lc_(d), LCP = lcp_(d), ALD = LCP + 1, nch = nchunks_(d), rows = ntiles_(d.Dk) * CK_TILE;
    DstatesSmem_::carve(cv, LC, LCP, d.Dk, &s);
    int v0 = blockIdx.x * CK_TILE, bh = blockIdx.y, b = bh / d.H, h = bh % d.H, tid = threadIdx.x;
    int w = tid >> 5, mt = w >> 1, nh = w & 1;
    size_t KV = (size_t)d.Dk * d.Dv;
    float *drb = dr + (size_t)bh * d.T * d.Dv;
    for (int e = tid; e < rows * CK_LD; e += CK_THREADS) s.dS[e] = 0.0f;
    for (int ci = nch - 1; ci >= 0; ci--) {
        int t0 = ci * d.chunk, L = chunk_len_(d, ci), active = 16 * mt < L;
        float *dst = dstates + ((size_t)bh * nch + ci) * KV;
        size_t base = ((size_t)bh * nch + ci) * LC * LC;
        __syncthreads();
        for (int e = tid; e < d.Dk * CK_TILE; e += CK_THREADS) {
            int r = e / CK_TILE, c = e % CK_TILE;
            if (v0 + c < d.Dv) dst[(size_t)r * d.Dv + v0 + c] = s.dS[r * CK_LD + c];
        }
        delta_scalars_(s.cs, d, beta, g, b, h, t0, L);
        load_ll_(s.kk, kk + base, LC);
        load_ll_pad_(s.P, p + base, LC, LCP, ALD);
        load_tile_(s.dO, dout, d, d.Dv, b, h, t0, L, LCP, v0, 1.0f);
        __syncthreads();
        // dU = P^T dO (rows j: tokens i >= j), then + (f (.) K) dS'
        float du[2][4] = {};
        if (active)
            warp_mma_<CK_SPLIT, 2, true, false>(du, s.P + 16 * mt * ALD + 16 * mt, ALD, s.dO + 16 * mt * CK_LD + 16 * nh,
                                                CK_LD, LCP - 16 * mt);
        for (int c0 = 0; c0 < d.Dk; c0 += CK_TILE) {
            load_tile_(s.kt, k, d, d.Dk, b, h, t0, L, LCP, c0, 1.0f);
            __syncthreads();
            scale_rows_(s.kt, s.cs->f, L);
            __syncthreads();
            if (active)
                warp_mma_<CK_SPLIT, 2, false, false>(du, s.kt + 16 * mt * CK_LD, CK_LD, s.dS + c0 * CK_LD + 16 * nh,
                                                     CK_LD, CK_TILE);
            __syncthreads();
        }
        frag_for_(mt, nh, [&](int n, int r, int j, int c) {
            if (j < LCP) s.X[j * CK_LD + c] = j < L ? du[n][r] : 0.0f;
        });
        // dR = (I + A)^{-T} dU; dv += b (.) dR
        solve_lower_t_(s.X, s.kk, s.cs, L, LC);
        stage_(
            L * CK_TILE,  // dv's old values read in batches, then each element's dR and dv written
            [&](int e) {
                int i = e / CK_TILE, c = e % CK_TILE;
                return v0 + c < d.Dv ? dv[row_(d, b, t0 + i, h) * d.Dv + v0 + c] : 0.0f;
            },
            [&](int e, float old) {
                int i = e / CK_TILE, c = e % CK_TILE;
                if (v0 + c >= d.Dv) return;
                float x = s.X[i * CK_LD + c];
                drb[(size_t)(t0 + i) * d.Dv + v0 + c] = x;
                dv[row_(d, b, t0 + i, h) * d.Dv + v0 + c] = old + s.cs->b[i] * x;
            });
        if (ci == 0) break;  // no gradient flows to an initial state
        // dS = eL dS' + (e (.) Q')^T dO + K^T dKS, dKS_i = -b_i e_i dR_i (X becomes dKS)
        __syncthreads();
        for (int e = tid; e < L * CK_TILE; e += CK_THREADS) {
            int i = e / CK_TILE;
            s.X[i * CK_LD + e % CK_TILE] *= -s.cs->b[i] * s.cs->e[i];
        }
        for (int c0 = 0; c0 < d.Dk; c0 += CK_TILE) {
            load_tile_(s.qt, q, d, d.Dk, b, h, t0, L, LCP, c0, d.scale);
            load_tile_(s.kt, k, d, d.Dk, b, h, t0, L, LCP, c0, 1.0f);
            __syncthreads();
            scale_rows_(s.qt, s.cs->e, L);
            __syncthreads();
            state_update_(s.dS, c0, s.cs->eL, s.qt, s.dO, s.kt, s.X, LCP);
            __syncthreads();
        }
    }
}

// ----------------------------------------------------------------------------
// the L x L gradients

struct DscoresSmem_ {
    float *dO, *U, *dR, *dP, *dA;
    DeltaScal_ *cs;
    static __host__ __device__ size_t carve(Carve_ &cv, int LC, DscoresSmem_ *s) {
        s->dO = cv.rows(lcq_(LC));
        s->U = cv.rows(lcq_(LC));
        s->dR = cv.rows(lcq_(LC));
        s->dP = cv.take<float>((size_t)LC * LC);
        s->dA = cv.take<float>((size_t)LC * LC);
        s->cs = cv.take<DeltaScal_>(1);
        return cv.off;
    }
};

// chunk blockIdx.x of (b,h) = blockIdx.y, from dP = dO U^T (j <= i) and dA = -dR U^T (j < i), summed over the value
// channels in order: dp, m (B,H,chunks, LC,LC) WRITTEN with dP (.) Gam and M = dA b_i Gam (zero elsewhere); dbeta
// (B,T,H) ACCUMULATED (when not NULL) with sum_j dA_ij KK_ij + dR_i . (v_i - e_i ks_i); gs (B,H,T) WRITTEN (when not
// NULL) with token i's part of the log-decays' gradient from P, A and R: sum_j c_ij - sum_j c_ji over c = dP (.) P +
// dA (.) A, and -b_i e_i dR_i . ks_i (double, as nn/delta.c's dG). kk, p from the chunk kernel; u, ks, dr (B,H,T,Dv)
// from the newvals and dstates kernels; dout, v (B,T,H,Dv). dP and dA are warp products in the chunk kernel's layout;
// thread i < L sums token i's row and column.
__global__ void __launch_bounds__(CK_THREADS)
    delta_dscores_kernel(float *dp, float *m, float *dbeta, double *gs, const float *kk, const float *p,
                         const float *u, const float *ks, const float *dr, const float *dout, const float *v,
                         const float *beta, const float *g, DeltaDims d) {
    GPU_DYNAMIC_SMEM(unsigned char, smem);
    DscoresSmem_ s;
    Carve_ cv = {(uintptr_t)smem, 0};
    int LC = lc_(d), LCQ = lcq_(LC), nch = nchunks_(d);
    DscoresSmem_::carve(cv, LC, &s);
    int ci = blockIdx.x, bh = blockIdx.y, b = bh / d.H, h = bh % d.H, t0 = ci * d.chunk, L = chunk_len_(d, ci);
    int tid = threadIdx.x, w = tid >> 5, mt = w >> 1, nh = w & 1, active = 16 * mt < L && 32 * nh <= 16 * mt + 15;
    size_t tv = (size_t)bh * d.T * d.Dv, base = ((size_t)bh * nch + ci) * LC * LC;
    delta_scalars_(s.cs, d, beta, g, b, h, t0, L);
    float ap[4][4] = {}, aa[4][4] = {}, rv = 0.0f, rk = 0.0f;
    for (int v0 = 0; v0 < d.Dv; v0 += CK_TILE) {
        load_tile_(s.dO, dout, d, d.Dv, b, h, t0, L, LCQ, v0, 1.0f);
        load_rows_(s.U, u + tv, d.Dv, t0, L, LCQ, v0);
        load_rows_(s.dR, dr + tv, d.Dv, t0, L, LCQ, v0);
        __syncthreads();
        if (active) {
            const float *uj = s.U + 32 * nh * CK_LD;
            warp_mma_<CK_SPLIT, 4, false, true>(ap, s.dO + 16 * mt * CK_LD, CK_LD, uj, CK_LD, CK_TILE);
            warp_mma_<CK_SPLIT, 4, false, true>(aa, s.dR + 16 * mt * CK_LD, CK_LD, uj, CK_LD, CK_TILE);
        }
        if (tid < L) {  // dR_i . v_i and dR_i . ks_i for token i
            const float *ri = s.dR + tid * CK_LD, *vi = v + row_(d, b, t0 + tid, h) * d.Dv + v0;
            const float *ksi = ks + tv + (size_t)(t0 + tid) * d.Dv + v0;
            for (int c = 0; c < CK_TILE && v0 + c < d.Dv; c++) rv += ri[c] * vi[c], rk += ri[c] * ksi[c];
        }
        __syncthreads();
    }
    #pragma unroll
    for (int n = 0; n < 4; n++)
        #pragma unroll
        for (int r = 0; r < 4; r++) {
            int i = 16 * mt + frag_row_(r), j = 32 * nh + frag_col_(n, r), e = i * LC + j;
            if (i >= LC || j >= LC) continue;
            int on = i < L && j <= i;
            float gm = on ? gam_(s.cs, i, j) : 0.0f, dpv = on ? ap[n][r] : 0.0f, dav = on && j < i ? -aa[n][r] : 0.0f;
            s.dP[e] = dpv;
            s.dA[e] = dav;
            dp[base + e] = dpv * gm;
            m[base + e] = on ? dav * s.cs->b[i] * gm : 0.0f;
        }
    __syncthreads();
    if (tid >= L) return;
    int t = tid;
    const float *P = p + base, *KK = kk + base;
    float bt = s.cs->b[t], et = s.cs->e[t], db = 0.0f;
    double dG = 0.0;
    for (int j = 0; j <= t; j++) dG += (double)s.dP[t * LC + j] * P[t * LC + j];
    for (int i = t; i < L; i++) dG -= (double)s.dP[i * LC + t] * P[i * LC + t];
    for (int j = 0; j < t; j++) {
        float dav = s.dA[t * LC + j];
        dG += (double)dav * (bt * KK[t * LC + j]);
        db += dav * KK[t * LC + j];
    }
    for (int i = t + 1; i < L; i++) dG -= (double)s.dA[i * LC + t] * (s.cs->b[i] * KK[i * LC + t]);
    db += rv - et * rk;
    dG -= (double)bt * et * rk;
    if (gs) gs[(size_t)bh * d.T + t0 + t] = dG;
    if (dbeta) dbeta[row_(d, b, t0 + t, h)] += db;
}

// ----------------------------------------------------------------------------
// dq, dk and the log-decays' partials

struct DqkSmem_ {
    float *qs, *ks, *dP, *M, *St, *dSt, *dO, *U, *dR, *red;
    double *cj;
    DeltaScal_ *cs;
    static __host__ __device__ size_t carve(Carve_ &cv, int LCP, DqkSmem_ *s) {
        s->qs = cv.rows(LCP);
        s->ks = cv.rows(LCP);
        s->dP = cv.take<float>((size_t)LCP * (LCP + 1));
        s->M = cv.take<float>((size_t)LCP * (LCP + 1));
        s->St = cv.rows(CK_TILE);
        s->dSt = cv.rows(CK_TILE);
        s->dO = cv.rows(LCP);
        s->U = cv.rows(LCP);
        s->dR = cv.rows(LCP);
        s->red = cv.take<float>(CK_TILE);
        s->cj = cv.take<double>(DL_MAX_L);
        s->cs = cv.take<DeltaScal_>(1);
        return cv.off;
    }
};

// dq, dk (B,T,H,Dk) ACCUMULATED: key tile c0 = 32 blockIdx.y of chunk blockIdx.x of (b,h) = blockIdx.z (nn/delta.c's
// backward; dq is scale times the gradient of q'):
//   dq'_i = e_i (S dO_i) + sum_{j<=i} dPg_ij k_j
//   dk_i  = sum_{l>=i} dPg_li q'_l + f_i (dS' u_i) + sum_{j<i} M_ij k_j + sum_{l>i} M_li k_l - b_i e_i (S dR_i)
// with dPg = dP (.) Gam and M from the dscores kernel, S the chunk's checkpoint (ckpt), dS' its state gradient
// (dstates), U and dR (B,H,T,Dv). pg (B,H,T, key tiles) WRITTEN (when not NULL) with token i's part of the log-decays'
// gradient over the tile's channels: e_i q'_i . (S dO_i) - c_i, c_i = f_i k_i . (dS' u_i), and at the chunk's last
// token also eL <S, dS'> + sum_j c_j (double). Every product a warp product in frag_for_'s layout, so a lane holds
// the same (token, channel) of each and combines them in registers.
__global__ void __launch_bounds__(CK_THREADS, 2)
    delta_dqk_kernel(float *dq, float *dk, double *pg, const float *dp, const float *m, const float *q,
                     const float *k, const float *u, const float *dr, const float *dout, const float *beta,
                     const float *g, const float *ckpt, const float *dstates, DeltaDims d) {
    GPU_DYNAMIC_SMEM(unsigned char, smem);
    DqkSmem_ s;
    Carve_ cv = {(uintptr_t)smem, 0};
    int LC = lc_(d), LCP = lcp_(d), ALD = LCP + 1, nch = nchunks_(d);
    DqkSmem_::carve(cv, LCP, &s);
    int ci = blockIdx.x, c0 = blockIdx.y * CK_TILE, bh = blockIdx.z, b = bh / d.H, h = bh % d.H;
    int t0 = ci * d.chunk, L = chunk_len_(d, ci), NK = ntiles_(d.Dk), tid = threadIdx.x;
    int w = tid >> 5, mt = w >> 1, nh = w & 1, active = 16 * mt < L;
    size_t KV = (size_t)d.Dk * d.Dv, tv = (size_t)bh * d.T * d.Dv, base = ((size_t)bh * nch + ci) * LC * LC;
    const float *st = ckpt + ((size_t)bh * nch + ci) * KV, *dst = dstates + ((size_t)bh * nch + ci) * KV;
    delta_scalars_(s.cs, d, beta, g, b, h, t0, L);
    load_tile_(s.qs, q, d, d.Dk, b, h, t0, L, LCP, c0, d.scale);
    load_tile_(s.ks, k, d, d.Dk, b, h, t0, L, LCP, c0, 1.0f);
    load_ll_pad_(s.dP, dp + base, LC, LCP, ALD);
    load_ll_pad_(s.M, m + base, LC, LCP, ALD);
    // the state parts over the value tiles: sd = dO S^T, tk = U dS'^T, y = dR S^T; rowacc: row tid of S (.) dS'
    float sd[2][4] = {}, tk[2][4] = {}, y[2][4] = {}, rowacc = 0.0f;
    for (int v0 = 0; v0 < d.Dv; v0 += CK_TILE) {
        load_state_(s.St, st, d, c0, v0);
        load_state_(s.dSt, dst, d, c0, v0);
        load_tile_(s.dO, dout, d, d.Dv, b, h, t0, L, LCP, v0, 1.0f);
        load_rows_(s.U, u + tv, d.Dv, t0, L, LCP, v0);
        load_rows_(s.dR, dr + tv, d.Dv, t0, L, LCP, v0);
        __syncthreads();
        if (active) {
            const float *sc = s.St + 16 * nh * CK_LD, *dsc = s.dSt + 16 * nh * CK_LD;
            int xo = 16 * mt * CK_LD;
            warp_mma_<CK_SPLIT, 2, false, true>(sd, s.dO + xo, CK_LD, sc, CK_LD, CK_TILE);
            warp_mma_<CK_SPLIT, 2, false, true>(tk, s.U + xo, CK_LD, dsc, CK_LD, CK_TILE);
            warp_mma_<CK_SPLIT, 2, false, true>(y, s.dR + xo, CK_LD, sc, CK_LD, CK_TILE);
        }
        if (tid < CK_TILE)
            for (int x = 0; x < CK_TILE; x++) rowacc += s.St[tid * CK_LD + x] * s.dSt[tid * CK_LD + x];
        __syncthreads();
    }
    // the chunk's L x L parts: dPg K (j <= i), dPg^T Q' (l >= i), M K (j < i) + M^T K (l > i)
    float dqa[2][4] = {}, dka[2][4] = {}, mk[2][4] = {};
    if (active) {
        int r0 = 16 * mt, kn = 16 * nh;
        warp_mma_<CK_SPLIT, 2, false, false>(dqa, s.dP + r0 * ALD, ALD, s.ks + kn, CK_LD, r0 + 16);
        warp_mma_<CK_SPLIT, 2, true, false>(dka, s.dP + r0 * ALD + r0, ALD, s.qs + r0 * CK_LD + kn, CK_LD, LCP - r0);
        warp_mma_<CK_SPLIT, 2, false, false>(mk, s.M + r0 * ALD, ALD, s.ks + kn, CK_LD, r0 + 16);
        warp_mma_<CK_SPLIT, 2, true, false>(mk, s.M + r0 * ALD + r0, ALD, s.ks + r0 * CK_LD + kn, CK_LD, LCP - r0);
    }
    // dq', dk in nn/delta.c's order of terms; qd, kd: q' (.) sd and k (.) tk for the log-decays' partials
    auto at = [&](int n, int r) -> long long {
        int i = 16 * mt + frag_row_(r), c = 16 * nh + frag_col_(n, r);
        return i < L && c0 + c < d.Dk ? (long long)(row_(d, b, t0 + i, h) * d.Dk + c0 + c) : -1;
    };
    float oq[2][4], ok[2][4], qd[2][4] = {}, kd[2][4] = {};  // oq, ok: dq's and dk's old values (accumulated)
    frag_gather_<2>(oq, dq, at);
    frag_gather_<2>(ok, dk, at);
    frag_for_(mt, nh, [&](int n, int r, int i, int c) {
        if (i >= L) return;
        float ei = s.cs->e[i], fi = s.cs->f[i], nbe = -s.cs->b[i] * ei;
        float dqp = sd[n][r] * ei + dqa[n][r];
        float dkp = dka[n][r] + fi * tk[n][r] + mk[n][r] + nbe * y[n][r];
        qd[n][r] = s.qs[i * CK_LD + c] * sd[n][r];
        kd[n][r] = s.ks[i * CK_LD + c] * tk[n][r];
        if (c0 + c < d.Dk) {
            size_t o = row_(d, b, t0 + i, h) * d.Dk + c0 + c;
            dq[o] = oq[n][r] + d.scale * dqp;
            dk[o] = ok[n][r] + dkp;
        }
    });
    if (!pg) return;
    __syncthreads();  // every read of qs, ks done: they take q' (.) sd and k (.) tk, each thread its own elements
    frag_for_(mt, nh, [&](int n, int r, int i, int c) {
        if (i < L) s.qs[i * CK_LD + c] = qd[n][r], s.ks[i * CK_LD + c] = kd[n][r];
    });
    if (tid < CK_TILE) s.red[tid] = rowacc;
    __syncthreads();
    float qsum = 0.0f;
    if (tid < L) {
        float ksum = 0.0f;
        for (int c = 0; c < CK_TILE; c++) qsum += s.qs[tid * CK_LD + c], ksum += s.ks[tid * CK_LD + c];
        s.cj[tid] = (double)s.cs->f[tid] * ksum;
    }
    __syncthreads();
    if (tid >= L) return;
    int i = tid;
    double x = (double)s.cs->e[i] * qsum - s.cj[i];
    if (i == L - 1) {  // G_L's own terms: the carried state eL <S, dS'> and every token's c_j
        float sds = 0.0f;
        for (int c = 0; c < CK_TILE; c++) sds += s.red[c];
        x += (double)s.cs->eL * sds;
        for (int j = 0; j < L; j++) x += s.cj[j];
    }
    pg[((size_t)bh * d.T + t0 + i) * NK + blockIdx.y] = x;
}

// ----------------------------------------------------------------------------
// dg

// one thread per (b,h, chunk): dg (B,T,H) ACCUMULATED with the reverse cumulative sum over the chunk of dG_i = gs_i +
// the key tiles' pg (in order), gs (B,H,T) from the dscores kernel, pg (B,H,T, key tiles) from the dqk kernel
__global__ void delta_dg_sums_kernel(float *dg, const double *gs, const double *pg, DeltaDims d) {
    int nch = nchunks_(d), NK = ntiles_(d.Dk);
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)d.B * d.H * nch) return;
    int bh = (int)(idx / nch), ci = (int)(idx % nch), b = bh / d.H, h = bh % d.H, t0 = ci * d.chunk;
    int L = chunk_len_(d, ci);
    double acc = 0.0;
    for (int i = L - 1; i >= 0; i--) {
        size_t t = (size_t)bh * d.T + t0 + i;
        double x = gs[t];
        for (int kt = 0; kt < NK; kt++) x += pg[t * NK + kt];
        acc += x;
        dg[row_(d, b, t0 + i, h)] += (float)acc;
    }
}

// ----------------------------------------------------------------------------
// launch

void gpu_delta_backward(float *dq, float *dk, float *dv, float *dbeta, float *dg, const float *dout,
                        const float *ckpt, const float *q, const float *k, const float *v, const float *beta,
                        const float *g, float *scratch, const DeltaDims *d) {
    delta_check_(d, "gpu_delta_backward");
    DeltaDims dd = *d;
    DeltaScratch_ s = {};
    delta_scratch_layout_(d, scratch, &s);
    if (!g) dg = NULL;
    int LC = lc_(dd), nch = nchunks_(dd), NK = ntiles_(d->Dk), NV = ntiles_(d->Dv), BH = d->B * d->H;
    double *gs = dg ? s.gs : NULL, *pg = dg ? s.pg : NULL;
    int LCP = lcp_(dd);
    size_t b_ch = smem_of_<ChunkSmem_>(LC), b_nv = smem_of_<NewvalsSmem_>(LC, LCP, d->Dk);
    size_t b_ds = smem_of_<DstatesSmem_>(LC, LCP, d->Dk), b_sc = smem_of_<DscoresSmem_>(LC);
    size_t b_qk = smem_of_<DqkSmem_>(LCP);
    smem_limit_(delta_chunk_kernel, b_ch);
    smem_limit_(delta_newvals_kernel, b_nv);
    smem_limit_(delta_dstates_kernel, b_ds);
    smem_limit_(delta_dscores_kernel, b_sc);
    smem_limit_(delta_dqk_kernel, b_qk);
    GPU_TIMED_FLOPS("delta.bwd.chunk", chunk_flops_(*d, 0, 2, 0),
                    delta_chunk_kernel<<<dim3(nch, BH), CK_THREADS, b_ch>>>(s.kk, s.p, q, k, beta, g, dd));
    KERNEL_CHECK();
    GPU_TIMED_FLOPS("delta.bwd.newvals", chunk_flops_(*d, 2, 0, 1),
                    delta_newvals_kernel<<<dim3(nch, NV, BH), CK_THREADS, b_nv>>>(s.u, s.ks, s.kk, k, v, beta, g,
                                                                                 ckpt, dd));
    KERNEL_CHECK();
    GPU_TIMED_FLOPS("delta.bwd.dstates", chunk_flops_(*d, 6, 0, 2),
                    delta_dstates_kernel<<<dim3(NV, BH), CK_THREADS, b_ds>>>(s.st, s.dr, dv, s.kk, s.p, q, k, dout,
                                                                            beta, g, dd));
    KERNEL_CHECK();
    GPU_TIMED_FLOPS("delta.bwd.dscores", chunk_flops_(*d, 0, 0, 2),
                    delta_dscores_kernel<<<dim3(nch, BH), CK_THREADS, b_sc>>>(s.dp, s.m, dbeta, gs, s.kk, s.p, s.u,
                                                                             s.ks, s.dr, dout, v, beta, g, dd));
    KERNEL_CHECK();
    GPU_TIMED_FLOPS("delta.bwd.dqk", chunk_flops_(*d, 6, 4, 0),
                    delta_dqk_kernel<<<dim3(nch, NK, BH), CK_THREADS, b_qk>>>(dq, dk, pg, s.dp, s.m, q, k, s.u, s.dr,
                                                                             dout, beta, g, ckpt, s.st, dd));
    KERNEL_CHECK();
    if (!dg) return;
    GPU_TIMED("delta.bwd.dg_sums",
              delta_dg_sums_kernel<<<gpu_blocks((size_t)BH * nch, 128), 128>>>(dg, s.gs, s.pg, dd));
    KERNEL_CHECK();
}
