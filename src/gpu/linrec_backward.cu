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
    static __host__ __device__ size_t carve(Carve_ &cv, int LC, int decay, DvSmem_ *s) {
        s->As = cv.take<float>((size_t)LC * LC);
        s->ys = cv.take<float>((size_t)LC * LR_LD);
        s->ks = cv.take<float>((size_t)LC * LR_LD);
        s->dSs = cv.take<float>((size_t)LR_TILE * LR_LD);
        s->gt = cv.take<float>((size_t)LC * LR_LD);
        s->cs = cv.take<ChunkScal_>(1);
        s->vs = s->xs = s->Ss = s->colacc = NULL;
        s->Gd = NULL;
        if (decay == LINREC_VCHANNEL) {  // o is recomputed: the values, q', S; the cumulative decays of the value tile
            s->vs = cv.take<float>((size_t)LC * LR_LD);
            s->xs = cv.take<float>((size_t)LC * LR_LD);
            s->Ss = cv.take<float>((size_t)LR_TILE * LR_LD);
            s->colacc = cv.take<float>(LR_TILE);
            s->Gd = cv.take<double>((size_t)LC * LR_LD);
        }
        return cv.off;
    }
};

// dv (B,T,H,Dv) ACCUMULATED: value tile blockIdx.y of chunk blockIdx.x of (b,h) = blockIdx.z. Key-side decays: dv_j =
// sum_{i>=j} A_ij dO_i + kt_j^T dS' (kt = fk (.) k; per channel, the state's part first, as nn/linrec.c). LINREC_VCHANNEL:
// dv_jc = sum_{i>=j} A_ij dO_ic exp(G_ic - G_jc) + fv_jc (k_j^T dS')_c, and, the value tile holding every term of its
// channels' log-decay gradient, dg (B,T,H,Dv) ACCUMULATED (when not NULL): the reverse cumulative sum over the chunk of
// dO (.) o - v (.) dv, plus at the last token carry (.) colsum(S (.) dS') + sum_j vt_j (.) (k_j^T dS'), with o recomputed.
// A from the scores kernel, dS' from the backward scan, S from states. Thread e: rows e / 32, + 8, ..., column e % 32.
__global__ void __launch_bounds__(LR_THREADS)
    linrec_dv_kernel(float *dv, float *dg, const float *A, const float *q, const float *k, const float *v,
                     const float *dout, const float *g, const float *li, const float *states, const float *dstates,
                     LinrecDims d) {
    GPU_DYNAMIC_SMEM(unsigned char, smem);
    DvSmem_ s;
    Carve_ cv = {(uintptr_t)smem, 0};
    int LC = lc_(d), nch = nchunks_(d), vside = d.decay == LINREC_VCHANNEL;
    DvSmem_::carve(cv, LC, d.decay, &s);
    int ci = blockIdx.x, v0 = blockIdx.y * LR_TILE, bh = blockIdx.z, b = bh / d.H, h = bh % d.H;
    int t0 = ci * d.chunk, L = chunk_len_(d, ci);
    int chan = d.decay == LINREC_CHANNEL, scal = scalar_decay_(d), tid = threadIdx.x;
    size_t ss = state_size_(d), KV = (size_t)d.Dk * d.Dv, cbase = ((size_t)bh * nch + ci) * ss;
    const float *st = states + cbase, *dst = dstates + cbase;
    if (scal) chunk_scalars_(s.cs, d, g, li, b, h, t0, L, d.gated_in ? st[KV] : 0.0f);
    if (vside) chan_cum_(s.Gd, s.gt, g, d, d.Dv, b, h, t0, L, LC, v0);
    load_ll_(s.As, A + ((size_t)bh * nch + ci) * LC * LC, LC);
    load_tile_(s.ys, dout, d, d.Dv, b, h, t0, L, LC, v0, 1.0f);
    if (vside) load_tile_(s.vs, v, d, d.Dv, b, h, t0, L, LC, v0, 1.0f);
    __syncthreads();
    // acc: dv (the value-side decay: its intra-chunk part); racc: q' S and dvt: k^T dS' (the value-side decay)
    float acc[LR_NR_LT], racc[LR_NR_LT], dvt[LR_NR_LT];
    #pragma unroll
    for (int r = 0; r < LR_NR_LT; r++) {
        int e = tid + r * LR_THREADS, j = e / LR_TILE, col = e % LR_TILE;
        float a = 0.0f;
        racc[r] = dvt[r] = 0.0f;
        if (!chan && j < L) {
            if (vside) {
                double gj = s.Gd[j * LR_LD + col];
                for (int i = j; i < L; i++)
                    a += s.As[i * LC + j] * s.ys[i * LR_LD + col] * expf((float)(s.Gd[i * LR_LD + col] - gj));
            } else {
                for (int i = j; i < L; i++) a += s.As[i * LC + j] * s.ys[i * LR_LD + col];
            }
        }
        acc[r] = a;
    }
    float colacc = 0.0f;  // thread col < 32 (value-side decay): carry_col sum_c S_c,col dS'_c,col
    for (int c0 = 0; c0 < d.Dk; c0 += LR_TILE) {
        load_tile_(s.ks, k, d, d.Dk, b, h, t0, L, LC, c0, 1.0f);
        load_state_(s.dSs, dst, d, c0, v0);
        if (chan) load_tile_(s.gt, g, d, d.Dk, b, h, t0, L, LC, c0, 1.0f);
        if (vside) {
            load_tile_(s.xs, q, d, d.Dk, b, h, t0, L, LC, c0, d.scale);
            load_state_(s.Ss, st, d, c0, v0);
        }
        __syncthreads();
        if (scal) {
            for (int e = tid; e < L * LR_TILE; e += LR_THREADS) {
                int i = e / LR_TILE, c = e % LR_TILE;
                s.ks[i * LR_LD + c] = s.cs->fk[i] * s.ks[i * LR_LD + c];
            }
        } else if (chan && tid < LR_TILE) {
            chan_factors_(s.gt, tid, L, s.ks, NULL);
        }
        __syncthreads();
        #pragma unroll
        for (int r = 0; r < LR_NR_LT; r++) {
            int e = tid + r * LR_THREADS, j = e / LR_TILE, col = e % LR_TILE;
            if (j >= L) continue;
            const float *kj = s.ks + j * LR_LD;
            if (vside) {
                float a = racc[r], t = dvt[r];
                const float *qj = s.xs + j * LR_LD;
                for (int c = 0; c < LR_TILE; c++) {
                    a += qj[c] * s.Ss[c * LR_LD + col];
                    t += kj[c] * s.dSs[c * LR_LD + col];
                }
                racc[r] = a, dvt[r] = t;
            } else {
                float a = acc[r];
                for (int c = 0; c < LR_TILE; c++) a += kj[c] * s.dSs[c * LR_LD + col];
                acc[r] = a;
            }
        }
        if (vside && tid < LR_TILE) {
            double GL = s.Gd[(L - 1) * LR_LD + tid];
            float carry = expf((float)GL);
            for (int c = 0; c < LR_TILE; c++) colacc += carry * s.Ss[c * LR_LD + tid] * s.dSs[c * LR_LD + tid];
        }
        __syncthreads();
    }
    if (chan) {  // the intra-chunk part after the state's, as nn/linrec.c's per-channel loop
        #pragma unroll
        for (int r = 0; r < LR_NR_LT; r++) {
            int e = tid + r * LR_THREADS, j = e / LR_TILE, col = e % LR_TILE;
            if (j >= L) continue;
            float a = acc[r];
            for (int i = j; i < L; i++) a += s.As[i * LC + j] * s.ys[i * LR_LD + col];
            acc[r] = a;
        }
    }
    if (!vside) {
        #pragma unroll
        for (int r = 0; r < LR_NR_LT; r++) {
            int e = tid + r * LR_THREADS, j = e / LR_TILE, col = e % LR_TILE;
            if (j < L && v0 + col < d.Dv) dv[row_(d, b, t0 + j, h) * d.Dv + v0 + col] += acc[r];
        }
        return;
    }
    // the value-side decay: dv += fv (.) dvt, then dG = dO (.) o - v (.) dv staged in xs, vt (.) dvt in ks (both free now)
    if (tid < LR_TILE) s.colacc[tid] = colacc;
    #pragma unroll
    for (int r = 0; r < LR_NR_LT; r++) {
        int e = tid + r * LR_THREADS, i = e / LR_TILE, col = e % LR_TILE;
        if (i >= L) continue;
        double gi = s.Gd[i * LR_LD + col], GL = s.Gd[(L - 1) * LR_LD + col];
        float oi = expf((float)gi) * racc[r];
        for (int j = 0; j <= i; j++)
            oi += s.As[i * LC + j] * s.vs[j * LR_LD + col] * expf((float)(gi - s.Gd[j * LR_LD + col]));
        float fv = expf((float)(GL - gi)), dvi = acc[r] + fv * dvt[r], vi = s.vs[i * LR_LD + col];
        s.xs[i * LR_LD + col] = s.ys[i * LR_LD + col] * oi - vi * dvi;
        s.ks[i * LR_LD + col] = fv * vi * dvt[r];
        if (v0 + col < d.Dv) dv[row_(d, b, t0 + i, h) * d.Dv + v0 + col] += dvi;
    }
    __syncthreads();
    if (dg && tid < LR_TILE && v0 + tid < d.Dv) {
        int c = tid;
        float *dG = s.xs;
        dG[(L - 1) * LR_LD + c] += s.colacc[c];
        for (int i = 0; i < L; i++) dG[(L - 1) * LR_LD + c] += s.ks[i * LR_LD + c];
        for (int i = L - 2; i >= 0; i--) dG[i * LR_LD + c] += dG[(i + 1) * LR_LD + c];
        for (int i = 0; i < L; i++) dg[row_(d, b, t0 + i, h) * d.Dv + v0 + c] += dG[i * LR_LD + c];
    }
}

// ----------------------------------------------------------------------------
// backward: dq, dk and the key-side log-decays' gradients

struct DqkSmem_ {
    float *qs, *ks, *dAs, *Ss, *dSs, *ys, *vs, *gt, *xh, *yt;
    double *Gd;
    ChunkScal_ *cs;
    static __host__ __device__ size_t carve(Carve_ &cv, int LC, int decay, DqkSmem_ *s) {
        s->qs = cv.take<float>((size_t)LC * LR_LD);
        s->ks = cv.take<float>((size_t)LC * LR_LD);
        s->dAs = cv.take<float>((size_t)LC * LC);
        s->Ss = cv.take<float>((size_t)LR_TILE * LR_LD);
        s->dSs = cv.take<float>((size_t)LR_TILE * LR_LD);
        s->ys = cv.take<float>((size_t)LC * LR_LD);
        s->vs = cv.take<float>((size_t)LC * LR_LD);
        s->gt = cv.take<float>((size_t)LC * LR_LD);
        s->cs = cv.take<ChunkScal_>(1);
        s->Gd = NULL, s->xh = s->yt = NULL;
        if (decay == LINREC_CHANNEL) {
            s->Gd = cv.take<double>((size_t)LC * LR_LD);
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
// Thread e: rows e / 32, + 8, ..., channel e % 32.
__global__ void __launch_bounds__(LR_THREADS)
    linrec_dqk_kernel(float *dq, float *dk, float *dg, double *pg, float *pq, float *pk, const float *dA,
                      const float *q, const float *k, const float *v, const float *dout, const float *g,
                      const float *li, const float *states, const float *dstates, LinrecDims d) {
    GPU_DYNAMIC_SMEM(unsigned char, smem);
    DqkSmem_ s;
    Carve_ cv = {(uintptr_t)smem, 0};
    int LC = lc_(d), nch = nchunks_(d);
    DqkSmem_::carve(cv, LC, d.decay, &s);
    int ci = blockIdx.x, c0 = blockIdx.y * LR_TILE, bh = blockIdx.z, b = bh / d.H, h = bh % d.H;
    int t0 = ci * d.chunk, L = chunk_len_(d, ci), NK = ntiles_(d.Dk);
    int chan = d.decay == LINREC_CHANNEL, vside = d.decay == LINREC_VCHANNEL, scal = scalar_decay_(d), tid = threadIdx.x;
    size_t ss = state_size_(d), KV = (size_t)d.Dk * d.Dv, cbase = ((size_t)bh * nch + ci) * ss;
    const float *st = states + cbase, *dst = dstates + cbase;
    if (scal) chunk_scalars_(s.cs, d, g, li, b, h, t0, L, d.gated_in ? st[KV] : 0.0f);
    if (chan) chan_cum_(s.Gd, s.gt, g, d, d.Dk, b, h, t0, L, LC, c0);
    load_tile_(s.qs, q, d, d.Dk, b, h, t0, L, LC, c0, d.scale);
    load_tile_(s.ks, k, d, d.Dk, b, h, t0, L, LC, c0, 1.0f);
    load_ll_(s.dAs, dA + ((size_t)bh * nch + ci) * LC * LC, LC);
    __syncthreads();
    if (chan) {
        stage_refs_(s.xh, s.yt, s.qs, s.ks, s.Gd, L);
        __syncthreads();
    }
    // the intra-chunk parts (per channel: pairs across sub-blocks through a reference, gpu/linrec_kit.cuh)
    float dqa[LR_NR_LT], dka[LR_NR_LT], dqt[LR_NR_LT], dkt[LR_NR_LT];
    #pragma unroll
    for (int r = 0; r < LR_NR_LT; r++) {
        int e = tid + r * LR_THREADS, i = e / LR_TILE, c = e % LR_TILE;
        float a = 0.0f, bk = 0.0f;
        if (i < L) {
            if (chan) {
                double gi = s.Gd[i * LR_LD + c];
                int m = blk_(i), lo = LR_SB * m, hi = min(lo + LR_SB, L);
                if (m > 0) {  // j in earlier sub-blocks: k~ through the reference R_m, then exp(G_i - R_m)
                    const float *yt = s.yt + tilde_off_(m) * LR_LD + c;
                    float x = 0.0f;
                    for (int j = 0; j < lo; j++) x += s.dAs[i * LC + j] * yt[j * LR_LD];
                    a = expf((float)(gi - s.Gd[(lo - 1) * LR_LD + c])) * x;
                }
                for (int j = lo; j <= i; j++)
                    a += s.dAs[i * LC + j] * expf((float)(gi - s.Gd[j * LR_LD + c])) * s.ks[j * LR_LD + c];
                if (hi < L) {  // j in later sub-blocks: q^ through the reference R_{m+1}, then exp(R_{m+1} - G_i)
                    const float *xh = s.xh + (hat_off_(m + 1) - hi) * LR_LD + c;
                    float x = 0.0f;
                    for (int j = hi; j < L; j++) x += s.dAs[j * LC + i] * xh[j * LR_LD];
                    bk = expf((float)(s.Gd[(hi - 1) * LR_LD + c] - gi)) * x;
                }
                for (int j = i; j < hi; j++)
                    bk += s.dAs[j * LC + i] * expf((float)(s.Gd[j * LR_LD + c] - gi)) * s.qs[j * LR_LD + c];
            } else {
                for (int j = 0; j <= i; j++) a += s.dAs[i * LC + j] * s.ks[j * LR_LD + c];
                for (int j = i; j < L; j++) bk += s.dAs[j * LC + i] * s.qs[j * LR_LD + c];
            }
        }
        dqa[r] = a, dka[r] = bk, dqt[r] = dkt[r] = 0.0f;
    }
    // the state parts: dqt = dO S^T, dkt = v dS'^T over the value tiles (the value-side decay: dr = fq (.) dO and
    // vt = fv (.) v instead, straight into dq', dk); rowsum(S (.) dS') for the key-side carry's gradient
    float rowacc = 0.0f;
    for (int v0 = 0; v0 < d.Dv; v0 += LR_TILE) {
        load_state_(s.Ss, st, d, c0, v0);
        load_state_(s.dSs, dst, d, c0, v0);
        load_tile_(s.ys, dout, d, d.Dv, b, h, t0, L, LC, v0, 1.0f);
        load_tile_(s.vs, v, d, d.Dv, b, h, t0, L, LC, v0, 1.0f);
        if (vside) load_tile_(s.gt, g, d, d.Dv, b, h, t0, L, LC, v0, 1.0f);
        __syncthreads();
        if (vside) {
            if (tid < LR_TILE) chan_factors_(s.gt, tid, L, s.vs, s.ys);
            __syncthreads();
        }
        #pragma unroll
        for (int r = 0; r < LR_NR_LT; r++) {
            int e = tid + r * LR_THREADS, i = e / LR_TILE, c = e % LR_TILE;
            if (i >= L) continue;
            const float *doi = s.ys + i * LR_LD, *vi = s.vs + i * LR_LD, *sc = s.Ss + c * LR_LD, *dsc = s.dSs + c * LR_LD;
            float a = vside ? dqa[r] : dqt[r], bk = vside ? dka[r] : dkt[r];
            for (int x = 0; x < LR_TILE; x++) {
                a += doi[x] * sc[x];
                bk += vi[x] * dsc[x];
            }
            if (vside) dqa[r] = a, dka[r] = bk;
            else dqt[r] = a, dkt[r] = bk;
        }
        if (!vside && tid < LR_TILE)
            for (int x = 0; x < LR_TILE; x++) rowacc += s.Ss[tid * LR_LD + x] * s.dSs[tid * LR_LD + x];
        __syncthreads();
    }
    // dq', dk complete: write them, and stage for the log-decays' gradients (each thread its own elements, so q' and
    // k are overwritten in place): q' (.) dq' in qs, k (.) dk in ks, dG = their difference in ys, kt (.) dkt in vs
    int want_g = dg && d.decay != LINREC_NONE, want_qk = scal && d.gated_in;
    #pragma unroll
    for (int r = 0; r < LR_NR_LT; r++) {
        int e = tid + r * LR_THREADS, i = e / LR_TILE, c = e % LR_TILE;
        if (i >= L) continue;
        float dqp = dqa[r], dkp = dka[r];
        if (!vside) {
            float fq, fk;
            if (chan) {
                double gi = s.Gd[i * LR_LD + c], gL = s.Gd[(L - 1) * LR_LD + c];
                fq = expf((float)gi), fk = expf((float)(gL - gi));
            } else {
                fq = s.cs->fq[i], fk = s.cs->fk[i];
            }
            dqp += dqt[r] * fq;
            dkp += dkt[r] * fk;
            float ki = s.ks[i * LR_LD + c], qd = s.qs[i * LR_LD + c] * dqp, kd = ki * dkp;
            s.qs[i * LR_LD + c] = qd;
            s.ks[i * LR_LD + c] = kd;
            s.ys[i * LR_LD + c] = qd - kd;
            s.vs[i * LR_LD + c] = fk * ki * dkt[r];
        }
        if (c0 + c < d.Dk) {
            size_t o = row_(d, b, t0 + i, h) * d.Dk + c0 + c;
            dq[o] += d.scale * dqp;
            dk[o] += dkp;
        }
    }
    if (vside || !(want_g || want_qk)) return;
    __syncthreads();
    // the last token's terms where G_L itself appears: carry (.) rowsum(S (.) dS') and sum_j kt_j (.) dkt_j; per
    // channel, dg is then the reverse cumulative sum over the chunk
    float *dGs = s.ys;
    if (want_g && tid < LR_TILE) {
        int c = tid;
        float carry = chan ? expf((float)s.Gd[(L - 1) * LR_LD + c]) : s.cs->carry;
        float *gl = dGs + (L - 1) * LR_LD + c;
        *gl += carry * rowacc;
        for (int j = 0; j < L; j++) *gl += s.vs[j * LR_LD + c];
        if (chan && c0 + c < d.Dk) {
            for (int i = L - 2; i >= 0; i--) dGs[i * LR_LD + c] += dGs[(i + 1) * LR_LD + c];
            for (int i = 0; i < L; i++) dg[row_(d, b, t0 + i, h) * d.Dk + c0 + c] += dGs[i * LR_LD + c];
        }
    }
    if (chan) return;
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
    int LC = lc_(dd), nch = nchunks_(dd), NK = ntiles_(d->Dk), NV = ntiles_(d->Dv), BH = d->B * d->H;
    int vside = d->decay == LINREC_VCHANNEL, scal = scalar_decay_(dd), head = d->decay == LINREC_HEAD;
    float *nil = NULL;
    double *nild = NULL;
    size_t b_sc = smem_of_<ScoresSmem_>(LC, d->decay);
    size_t b_dv = smem_of_<DvSmem_>(LC, d->decay), b_dqk = smem_of_<DqkSmem_>(LC, d->decay);
    smem_limit_(linrec_scores_kernel, b_sc);
    smem_limit_(linrec_dv_kernel, b_dv);
    smem_limit_(linrec_dqk_kernel, b_dqk);
    linrec_states_(s.st, s.cr, q, dout, d->scale, 1, g, li, ckpt, d, "linrec.bwd.outer", "linrec.bwd.dscan");
    GPU_TIMED("linrec.bwd.scores", linrec_scores_kernel<<<dim3(nch, BH), LR_THREADS, b_sc>>>(s.A, s.dA, q, k, v, dout,
                                                                                              g, li, ckpt, dd));
    KERNEL_CHECK();
    GPU_TIMED("linrec.bwd.dv", linrec_dv_kernel<<<dim3(nch, NV, BH), LR_THREADS, b_dv>>>(
                                   dv, vside ? dg : nil, s.A, q, k, v, dout, g, li, ckpt, s.st, dd));
    KERNEL_CHECK();
    // the scalar decays' partials: dG's sums where a dg is wanted, q' . dq' and k . dk where input gates are
    double *pg = scal && dg ? s.pg : nild;
    float *pq = scal && d->gated_in ? s.pq : nil, *pk = scal && d->gated_in ? s.pk : nil;
    GPU_TIMED("linrec.bwd.dqk", linrec_dqk_kernel<<<dim3(nch, NK, BH), LR_THREADS, b_dqk>>>(
                                    dq, dk, vside ? nil : dg, pg, pq, pk, s.dA, q, k, v, dout, g, li, ckpt, s.st, dd));
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
