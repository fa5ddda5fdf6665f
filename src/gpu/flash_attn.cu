// Tiled causal attention on the tensor cores (gpu/flash_attn.cuh), FlashAttention-2's layout: a block is 4 warps
// and owns 64 rows (queries in the forward and dq, keys in dk/dv); each warp owns 16 of them and keeps its scores,
// its softmax and its accumulators in registers (gpu/mma.cuh: mma.sync, whose layout puts columns 2t, 2t+1 of
// rows g and g+8 in lane 4g + t: a row's maximum and sum are 4 lanes', two shuffles). The other side walks in
// tiles staged in shared memory by cp.async, two sets, the next loading while the warps work on this one. A score
// tile goes on as the left operand of the next product (P·V) without leaving the registers. The results leave
// through shared memory, 16-byte pieces of rows, in the layout the next op reads (the epilogue, GpuHeads).
// The position scheme reaches the kernels as a GpuAttnOpts by value; each block reads its head's constants from it
// (head_opts_), and F of the tile's rows is staged in shared memory with the tile.
//
// Precision (gpu_math, gpu/mma.cuh's policies): tf32 rounds fp32 operands to TF32; fp32 splits each into two
// TF32 parts and sums three products (3xTF32: about fp32's accuracy); bf16 takes q, k, v and dout in bf16 (what
// the producers wrote) and packs the weights and ds to bf16 for their products. The scores, the softmax, the
// accumulators are fp32; the outputs fp32, or bf16 where the destination is (the projections' bf16 inputs).
//
// Kernels are templates on DM (the head size rounded up to 32, 64 or 128: tiles are zero-padded past D, so the
// loops have no bounds tests) and on the math policy M. Tiles are zero-padded past T too; the causal and window
// masks and the bounds are applied to the scores.
#include "gpu/flash_attn.cuh"

#include <math.h>

#include <algorithm>

#include "gpu/common.cuh"
#include "gpu/mma.cuh"

#define ROWS 64   // rows a block owns, and the forward's and dq's key tile: 4 warps x 16
#define WARPS 4
#define QT 32     // dk/dv's query tile
#define LOG2E_ 1.4426950408889634f

// a staged (NR, DM) tile of M's elements: rows of LD = DM + PAD (gpu/mma.cuh: fragment loads hit 32 banks)
template <int DM, typename M, int NR = ROWS>
struct Tile {
    static constexpr int LD = DM + M::PAD;
    static constexpr int ELEMS = NR * LD;
};

// the sum (or maximum) of a row's value over its 4 lanes (the lanes of one g)
static __device__ __forceinline__ float row_sum_(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
static __device__ __forceinline__ float row_max_(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

// Register budgets. The forward holds its queries in registers (frees a tile of shared memory) unless that takes
// too many (3xTF32's two parts of 128-wide rows); dq holds its queries and their dout, dk/dv its keys and values,
// when both fit (TF32 up to 64 wide, bf16 up to 128).
template <int DM, typename M>
struct QInRegs {
    static constexpr bool value = !(M::SPLIT && DM > 64);
};
template <int DM, typename M>
struct PairInRegs {
    static constexpr bool value = !M::SPLIT && DM * sizeof(typename M::Elt) <= 256;
};
// Blocks per SM the kernels ask the compiler to fit in registers (__launch_bounds__'s second argument). The
// kernels are latency-bound: more warps beat a few spilled registers, so bf16 at DM 64 asks for 3 blocks of dq
// and dk/dv and 4 of the forward; dk/dv at 4 would spill hundreds of bytes (docs/gpu.md, and the timings in
// docs/results/speed_rounds.md, "Measurements moved from code comments").
template <int DM, typename M>
struct MinBlocks {
    static constexpr bool BF = sizeof(typename M::Elt) == 2;
    static constexpr int fwd = DM <= 64 ? (BF ? 4 : M::SPLIT ? 2 : 3) : 1, dq = DM <= 64 ? (BF ? 3 : 2) : 1,
                         dkdv = DM <= 64 ? (BF ? 3 : 2) : 1;
};

// The epilogue: a warp's (16, 8N) result goes out through shared memory. In registers a lane holds 2 columns of
// 8 rows a slice, so storing from there writes 8 rows' sectors a store; staged as rows, 16-byte pieces of a row
// go out together, in the destination's layout and type (GpuHeads), rotated on the way where it asks.

// floats a staged row: 8N + 4 puts rows g of stage_rows_' stores 4 banks apart
template <int N>
struct Stage {
    static constexpr int LW = 8 * N + 4;
};

// this warp's result times `mul` into w (16 rows of Stage<N>::LW floats, the warp's own); a __syncwarp after
template <int N>
static __device__ __forceinline__ void stage_rows_(float *w, const float (*acc)[4], float mul) {
    int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
#pragma unroll
    for (int n = 0; n < N; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) w[(g + 8 * (e >> 1)) * Stage<N>::LW + 8 * n + 2 * t + (e & 1)] = acc[n][e] * mul;
    __syncwarp();
}

// the 16 staged rows (lw floats apart) to dst's rows r0.. of the block's head (blockIdx.x = b·NH + h), rows past T
// dropped. A lane's unit of work: V elements; with the half layout's rotation V pairs (k, k + D/2); with the
// interleaved one V pairs (2k, 2k+1), 2V elements (V 4 or 2: 16-byte pieces, where D and dst's strides allow).
template <int V, int ROT>  // ROT: 0 none, 1 half layout, 2 interleaved
static __device__ void write_rows_(const GpuHeads &dst, const float *w, int lw, int r0, int T, int D, int NH) {
    int lane = threadIdx.x & 31, h = blockIdx.x % NH, half = D / 2;
    int units = (ROT ? half : D) / V;  // a row's
    size_t base = (size_t)(blockIdx.x / NH) * dst.sb + (size_t)h * dst.sh;
    for (int i = lane; i < 16 * units; i += 32) {
        int r = i / units, u = (i % units) * V;
        if (r0 + r >= T) break;  // the rows past T come last
        const float *src = w + r * lw;
        size_t at = base + (size_t)(r0 + r) * dst.st;
        float x0[2 * V], x1[V], c[V], sn[V];
        if (ROT) {
            size_t tb = ((size_t)(r0 + r) * (dst.per_head ? NH : 1) + (dst.per_head ? h : 0)) * half + u;
            load_elts_<V>(c, dst.cos_ + tb);
            load_elts_<V>(sn, dst.sin_ + tb);
        }
        if (ROT == 1) {
            load_elts_<V>(x0, src + u);
            load_elts_<V>(x1, src + u + half);
            for (int e = 0; e < V; e++) rope_pair_(x0[e], x1[e], c[e], dst.sign * sn[e]);
        } else {
            load_elts_<ROT == 2 ? 2 * V : V>(x0, src + (ROT == 2 ? 2 * u : u));
            if (ROT == 2)
                for (int e = 0; e < V; e++) rope_pair_(x0[2 * e], x0[2 * e + 1], c[e], dst.sign * sn[e]);
        }
        if (dst.bf16) {
            __nv_bfloat16 *o = (__nv_bfloat16 *)dst.p + at;
            store_elts_<ROT == 2 ? 2 * V : V>(o + (ROT == 2 ? 2 * u : u), x0);
            if (ROT == 1) store_elts_<V>(o + u + half, x1);
        } else {
            float *o = (float *)dst.p + at;
            store_elts_<ROT == 2 ? 2 * V : V>(o + (ROT == 2 ? 2 * u : u), x0);
            if (ROT == 1) store_elts_<V>(o + u + half, x1);
        }
    }
}

// 1 when every row of h starts on a multiple of 4 elements (16 bytes of floats, 8 of bf16) from an aligned p
static __host__ __device__ __forceinline__ bool heads_aligned4_(const GpuHeads &h) {
    size_t a = (size_t)h.p / (h.bf16 ? 2 : 4);
    return a % 4 == 0 && h.st % 4 == 0 && h.sh % 4 == 0 && h.sb % 4 == 0;
}

// write_rows_ for dst's rotation, 16-byte pieces where every piece starts aligned (the rows, the pair's second half
// and the table's rows), then a __syncwarp (w may be staged again)
static __device__ void write_heads_(const GpuHeads &dst, const float *w, int lw, int r0, int T, int D, int NH) {
    bool al = heads_aligned4_(dst);
    if (!dst.cos_) {
        if (al && D % 4 == 0) write_rows_<4, 0>(dst, w, lw, r0, T, D, NH);
        else write_rows_<1, 0>(dst, w, lw, r0, T, D, NH);
    } else if (dst.half_layout) {
        if (al && D % 8 == 0) write_rows_<4, 1>(dst, w, lw, r0, T, D, NH);
        else write_rows_<1, 1>(dst, w, lw, r0, T, D, NH);
    } else {
        if (al && D % 4 == 0) write_rows_<2, 2>(dst, w, lw, r0, T, D, NH);
        else write_rows_<1, 2>(dst, w, lw, r0, T, D, NH);
    }
    __syncwarp();
}

// ----------------------------------------------------------------------------
// the position scheme, per block (nn/attention_tile.h's HeadOpts_; logits_ below is its logit_)

// the scheme of the block's (b, h) (blockIdx.x = b·NH + h)
struct HeadOpts_ {
    float scale, slope, decay;
    const float *F;  // (T,) or NULL
    int W;           // 0 = full causal
    // Units of a score tile x (logits_): with a slope or F (bias), x is the logit; without, x stays the dot
    // product q·k and the logit is scale·x (scale > 0: the maximum is taken over x all the same), so the scale
    // rides in the exponent's multiply: exp(logit - m) = 2^(c2 x - c2 m'), c2 = (bias ? 1 : scale)·log2 e
    bool bias;
    float c2;
};

static __device__ __forceinline__ HeadOpts_ head_opts_(const GpuAttnOpts &o, int NH, int T) {
    int h = blockIdx.x % NH;
    HeadOpts_ ho;
    ho.scale = o.scale;
    ho.slope = o.slopes[h];
    ho.decay = o.decay[h];
    ho.F = o.fgate ? o.fgate + (size_t)blockIdx.x * T : NULL;
    ho.W = o.window > 0 && o.window < T ? o.window : 0;  // a window of T or more hides nothing, as on the CPU
    ho.bias = ho.slope != 0.0f || ho.F || !(o.scale > 0.0f);
    ho.c2 = (ho.bias ? 1.0f : o.scale) * LOG2E_;
    return ho;
}

// key j visible from query i < T
static __device__ __forceinline__ bool visible_(const HeadOpts_ &ho, int i, int j) {
    return j <= i && (ho.W == 0 || i - j < ho.W);
}

// the post-softmax factor exp(-decay (i - j)) of a visible pair (only there: masked pairs would overflow)
static __device__ __forceinline__ float decay_(const HeadOpts_ &ho, int i, int j) {
    return ho.decay != 0.0f ? expf(-ho.decay * (float)(i - j)) : 1.0f;
}

// the floats src[r0 .. r0 + n) of a head's row into s (0 past T), n a multiple of 4: by cp.async in 16-byte pieces
// where those start aligned (T a multiple of 4), else plain loads; either is done at the next cp_wait_ and
// __syncthreads. (A plain load stalls its warp until the value arrives, and the others then wait for it at the
// barrier.)
static __device__ void load_floats_(float *s, const float *src, int r0, int T, int n) {
    if (T % 4 == 0 && (size_t)src % 16 == 0) {
        for (int x = 4 * threadIdx.x; x < n; x += 4 * blockDim.x) {
            bool in = r0 + x < T;
            cp_async16_(s + x, in ? src + r0 + x : src, in ? 16 : 0);
        }
        return;
    }
    for (int x = threadIdx.x; x < n; x += blockDim.x) s[x] = r0 + x < T ? src[r0 + x] : 0.0f;
}

// F of rows [r0, r0 + n) into s (0 past T, and without F)
static __device__ void load_f_(float *s, const HeadOpts_ &ho, int r0, int T, int n = ROWS) {
    if (ho.F) load_floats_(s, ho.F, r0, T, n);
    else
        for (int x = threadIdx.x; x < n; x += blockDim.x) s[x] = 0.0f;
}

// the first key tile the query block at q0 sees (a window hides the tiles before i - W + 1 of its first row)
static __device__ __forceinline__ int key_begin_(const HeadOpts_ &ho, int q0) {
    return ho.W && q0 - ho.W + 1 > 0 ? (q0 - ho.W + 1) / ROWS * ROWS : 0;
}

// one past the last query that sees a key of the block at j0 (its last key j0 + 63 is seen up to j0 + 62 + W)
static __device__ __forceinline__ int query_end_(const HeadOpts_ &ho, int j0, int T) {
    return ho.W ? min(T, j0 + ROWS - 1 + ho.W) : T;
}

// ----------------------------------------------------------------------------
// s[n][e] (this lane's dot products of a tile, n < N) turned into the scores x (HeadOpts_: with BIAS the logits,
// without the dot products as they are), WRITTEN in place; with MASKED, -INFINITY where the pair is not visible
// or the query is past T (without, the caller knows every pair is visible: no test). The lane's two rows are ri[0..1] with F values Fr, its columns c0 + 8n + 2t + {0, 1} with F
// at fc[8n + 2t + {0, 1}]. QROWS: rows are queries and columns keys (forward, dq), else the other way (dk/dv).
// Branch-free in the scheme: a missing slope or F adds exact zeros (nn/attention_tile.h's order of operations).
template <int N, bool MASKED, bool QROWS, bool BIAS>
static __device__ __forceinline__ void logits_(float (*s)[4], const HeadOpts_ &ho, const int ri[2], const float Fr[2],
                                               int c0, const float *fc, int T) {
    int t = threadIdx.x & 3;
#pragma unroll
    for (int n = 0; n < N; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int r = e >> 1, c = 8 * n + 2 * t + (e & 1);
            int qi = QROWS ? ri[r] : c0 + c, kj = QROWS ? c0 + c : ri[r];
            float x = s[n][e];
            if (BIAS) {
                x *= ho.scale;
                x -= ho.slope * (float)(qi - kj);
                x += QROWS ? Fr[r] - fc[c] : fc[c] - Fr[r];
            }
            if (MASKED && !(qi < T && visible_(ho, qi, kj))) x = -INFINITY;
            s[n][e] = x;
        }
}

// 1 when every pair of rows [r0, r0 + 16) x columns [c0, c0 + nc) is visible (QROWS as in logits_): logits_ can
// skip its masks. The tiles below the diagonal, most of them at long T.
template <bool QROWS>
static __device__ __forceinline__ bool all_visible_(const HeadOpts_ &ho, int r0, int c0, int nc, int T) {
    int qlo = QROWS ? r0 : c0, qhi = QROWS ? r0 + 15 : c0 + nc - 1;  // first and last query
    int klo = QROWS ? c0 : r0, khi = QROWS ? c0 + nc - 1 : r0 + 15;  // first and last key
    return khi <= qlo && qhi < T && (ho.W == 0 || qhi - klo < ho.W);
}

// ... both in one call: the mask only where needed, the bias only where there is one (the branches are uniform
// over the warp; a tile wholly visible without bias is already its scores)
template <int N, bool QROWS>
static __device__ __forceinline__ void tile_logits_(float (*s)[4], const HeadOpts_ &ho, int r0, const int ri[2],
                                                    const float Fr[2], int c0, const float *fc, int T) {
    bool all = all_visible_<QROWS>(ho, r0, c0, 8 * N, T);
    if (ho.bias) {
        if (all) logits_<N, false, QROWS, true>(s, ho, ri, Fr, c0, fc, T);
        else logits_<N, true, QROWS, true>(s, ho, ri, Fr, c0, fc, T);
    } else if (!all)
        logits_<N, true, QROWS, false>(s, ho, ri, Fr, c0, fc, T);
}

// forward: grid (B*NH, ceil(T/64)) (heads on x: gridDim.y stops at 65535), 128 threads. Shared: two sets of K, V
// tiles (64, LD) and F of the key tile, the next set loading (cp.async) while the warps work on the other, and
// without QREG Q's tile; the tiles first (set s: K at 2s·TE, V after it; Q at 4·TE), then the floats. Each
// warp's scores, softmax and output stay in registers; a lane's running maximum is its rows' (shared by the row's
// 4 lanes), its running sum l its own columns' part, summed over the row's lanes at the end. l sums the softmax weights p; P·V takes w = p·exp(-decay (i-j)) (nn/attention.c's "second accumulator").
template <int DM, typename M>
__global__ void __launch_bounds__(WARPS * 32, (MinBlocks<DM, M>::fwd))
    attn_fwd_kernel(const GpuHeads out, const GpuHeads out2, float *lse, const typename M::Elt *q, const typename M::Elt *k,
                    const typename M::Elt *v, const GpuAttnOpts o, int NH, int T, int D) {
    typedef typename M::Elt E;
    constexpr int LD = Tile<DM, M>::LD, TE = Tile<DM, M>::ELEMS, NT = ROWS / 8, ND = DM / 8;
    constexpr bool QREG = QInRegs<DM, M>::value;
    GPU_DYNAMIC_SMEM(unsigned char, raw);
    E *tiles = (E *)raw, *qs = tiles + 4 * TE;       // qs without QREG
    float *fl = (float *)(tiles + (QREG ? 4 : 5) * TE);  // set s: F of its key tile at fl + s·ROWS
    size_t head = (size_t)blockIdx.x * T * D;
    HeadOpts_ ho = head_opts_(o, NH, T);
    // the last query blocks see the most keys: they go first, so the grid's tail is short blocks
    int q0 = (gridDim.y - 1 - blockIdx.y) * ROWS, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int g = lane >> 2, t = lane & 3, rw = q0 + warp * 16;  // rw: the warp's first row
    int i[2] = {rw + g, rw + g + 8};                       // this lane's two rows
    float Fi[2];
    for (int r = 0; r < 2; r++) Fi[r] = ho.F && i[r] < T ? ho.F[i[r]] : 0.0f;
    int kb = key_begin_(ho, q0), k_end = min(T, q0 + ROWS);  // causal: no key after the block's last query
    auto stage = [&](int set, int k0) {  // K, V, F of the key tile at k0 into set 0 or 1
        load_tile_<DM, ROWS, LD>(tiles + 2 * set * TE, k + head, k0, T, D);
        load_tile_<DM, ROWS, LD>(tiles + (2 * set + 1) * TE, v + head, k0, T, D);
        load_f_(fl + set * ROWS, ho, k0, T);
        cp_commit_();
    };
    ARegs<DM, M> qa;  // with QREG: this warp's 16 queries, staged through set 1's K tile
    load_tile_<DM, ROWS, LD>(QREG ? tiles + 2 * TE : qs, q + head, q0, T, D);
    stage(0, kb);
    cp_wait_<0>();
    __syncthreads();
    if (QREG) {
        qa.load(tiles + 2 * TE + warp * 16 * LD, LD);
        __syncthreads();  // set 1 is free for the next tile
    }
    float acc[ND][4];  // this warp's 16 rows of the output, unnormalised
#pragma unroll
    for (int n = 0; n < ND; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    float mx[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    for (int k0 = kb, set = 0; k0 < k_end; k0 += ROWS, set ^= 1) {
        if (k0 + ROWS < k_end) stage(set ^ 1, k0 + ROWS);
        else cp_commit_();  // an empty group: the wait below then always leaves one
        cp_wait_<1>();  // this tile's copies are done (the next tile's may still run)
        __syncthreads();
        const E *ks = tiles + 2 * set * TE, *vs = ks + TE;
        const float *fs = fl + set * ROWS;
        float s[NT][4];
        if (QREG) mma_scores_<DM, NT, M>(s, qa, ks, LD);
        else mma_scores_<DM, NT, M>(s, ASmem<M>{qs + warp * 16 * LD, LD}, ks, LD);
        tile_logits_<NT, true>(s, ho, rw, i, Fi, k0, fs, T);
        float corr[2], mz[2], psum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float tmax = -INFINITY;
#pragma unroll
            for (int n = 0; n < NT; n++) tmax = fmaxf(tmax, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
            float mnew = fmaxf(mx[r], row_max_(tmax));
            corr[r] = mnew == -INFINITY ? 1.0f : exp2_fast_(ho.c2 * (mx[r] - mnew));
            mx[r] = mnew;
            mz[r] = mnew == -INFINITY ? 0.0f : ho.c2 * mnew;  // a row with nothing visible yet: 2^(-inf - 0) = 0
        }
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float p = exp2_fast_(fmaf(s[n][e], ho.c2, -mz[e >> 1]));
                psum[e >> 1] += p;
                s[n][e] = p;
            }
        if (ho.decay != 0.0f) {  // P·V takes w = p E; the sum stays the softmax's
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (s[n][e] != 0.0f) s[n][e] *= decay_(ho, i[e >> 1], k0 + 8 * n + 2 * t + (e & 1));
        }
#pragma unroll
        for (int r = 0; r < 2; r++) l[r] = l[r] * corr[r] + psum[r];
        // O = O corr (each row by its factor) + P V
#pragma unroll
        for (int n = 0; n < ND; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[n][e] *= corr[e >> 1];
        mma_accumulate_<ROWS, ND, M>(acc, s, vs, LD);
        __syncthreads();  // every warp is done with this set before the next iteration refills it
    }
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] = row_sum_(l[r]);
        inv[r] = 1.0f / l[r];
        if (i[r] < T && t == 0) lse[(size_t)blockIdx.x * T + i[r]] = ho.c2 * mx[r] + log2f(l[r]);  // base 2
    }
#pragma unroll
    for (int n = 0; n < ND; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[n][e] *= inv[e >> 1];
    float *w = (float *)raw + warp * 16 * Stage<ND>::LW;  // the tiles are free: the loop ended at a barrier
    stage_rows_<ND>(w, acc, 1.0f);
    write_heads_(out, w, Stage<ND>::LW, rw, T, D, NH);
    if (out2.p) write_heads_(out2, w, Stage<ND>::LW, rw, T, D, NH);
}

// delta (B,NH,T) = rowwise dout · out (= sum_j w_ij dout_i·v_j, the softmax backward's term, with the post-softmax
// decay too): dout packed (B,NH,T,D) of E, out (fp32) where the forward wrote it. 16 lanes a row, V adjacent
// columns a lane at a time (V 4: D a multiple of 4 and out's rows 16-byte aligned).
template <int V, typename E>
__global__ void attn_delta_kernel(float *delta, const E *dout, const GpuHeads out, int NH, int T, int D,
                                  size_t rows) {
    size_t r = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 16;  // r = (b·NH + h)·T + t
    int lane = threadIdx.x & 15;
    bool live = r < rows;  // every lane of the warp reaches the shuffles
    size_t bh = r / T;
    const float *o = (const float *)out.p + (bh / NH) * out.sb + (bh % NH) * out.sh + (r % T) * out.st;
    const E *dy = dout + r * D;
    float s = 0.0f;
    for (int d = V * lane; live && d < D; d += 16 * V) {
        float a[V], b[V];
        load_elts_<V>(a, dy + d);
        load_elts_<V>(b, o + d);
        for (int e = 0; e < V; e++) s += a[e] * b[e];
    }
    for (int m = 8; m > 0; m >>= 1) s += __shfl_xor_sync(0xffffffffu, s, m);
    if (live && lane == 0) delta[r] = s;
}

// ds of a tile from its scores s (logits_; WRITTEN in place) and dp = dout·v: ds = p (E dp - delta), p =
// exp(logit - lse) = 2^(c2 s - lse2) (0 where s is -inf; lse2 the forward's base-2 log-sum-exp), E = exp(-decay (i - j)) (1 without decay, and where p is 0); dsum[r] += each row's ds, and with
// W the weights w = p E into w. Rows and columns as logits_; with QROWS the row's lse and delta are lr[r], dr[r],
// else the column's lc[c], dc[c].
template <int N, bool QROWS, bool W>
static __device__ __forceinline__ void tile_ds_(float (*s)[4], const float (*dp)[4], float (*w)[4],
                                                const HeadOpts_ &ho, const int ri[2], int c0, const float *lr,
                                                const float *dr, const float *lc, const float *dc, float dsum[2]) {
    int t = threadIdx.x & 3;
#pragma unroll
    for (int n = 0; n < N; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int r = e >> 1, c = 8 * n + 2 * t + (e & 1);
            float L = QROWS ? lr[r] : lc[c], dl = QROWS ? dr[r] : dc[c];
            float p = exp2_fast_(fmaf(s[n][e], ho.c2, -L)), E = 1.0f;
            if (ho.decay != 0.0f && p != 0.0f) E = decay_(ho, QROWS ? ri[r] : c0 + c, QROWS ? c0 + c : ri[r]);
            float ds = p * (E * dp[n][e] - dl);
            if (W) w[n][e] = p * E;
            s[n][e] = ds;
            dsum[r] += ds;
        }
}

// ds_ij = p_ij (E_ij dout_i·v_j - delta_i) (E the post-softmax factor, 1 without decay); dq_i = scale · sum_j
// ds_ij k_j, and with F the row sums dF_i = sum_j ds_ij WRITTEN to dfgate (the dk/dv pass subtracts the column
// sums). Grid and threads as the forward; shared: two sets of K, V tiles and F (the next loading while this one
// is used), and Q, dO tiles without PREG. Scores, ds and dq stay in registers; each lane sums its part of its
// rows' ds in order, then the row's 4 lanes.
template <int DM, typename M>
__global__ void __launch_bounds__(WARPS * 32, (MinBlocks<DM, M>::dq))
    attn_dq_kernel(const GpuHeads dq, float *dfgate, const typename M::Elt *dout, const float *lse, const float *delta,
                   const typename M::Elt *q, const typename M::Elt *k, const typename M::Elt *v, const GpuAttnOpts o,
                   int NH, int T, int D) {
    typedef typename M::Elt E;
    constexpr int LD = Tile<DM, M>::LD, TE = Tile<DM, M>::ELEMS, NT = ROWS / 8, ND = DM / 8;
    constexpr bool PREG = PairInRegs<DM, M>::value;
    GPU_DYNAMIC_SMEM(unsigned char, raw);
    E *tiles = (E *)raw, *qs = tiles + 4 * TE, *dos = qs + TE;  // set s: K at 2s·TE, V after it; qs, dos without PREG
    float *fl = (float *)(tiles + (PREG ? 4 : 6) * TE);          // set s: F at fl + s·ROWS
    size_t head = (size_t)blockIdx.x * T * D, hrow = (size_t)blockIdx.x * T;
    HeadOpts_ ho = head_opts_(o, NH, T);
    int q0 = (gridDim.y - 1 - blockIdx.y) * ROWS, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int g = lane >> 2, t = lane & 3, rw = q0 + warp * 16;
    int i[2] = {rw + g, rw + g + 8};
    float li[2], di[2], Fi[2], dF[2] = {0.0f, 0.0f};
    for (int r = 0; r < 2; r++) {
        li[r] = i[r] < T ? lse[hrow + i[r]] : 0.0f;
        di[r] = i[r] < T ? delta[hrow + i[r]] : 0.0f;
        Fi[r] = ho.F && i[r] < T ? ho.F[i[r]] : 0.0f;
    }
    int kb = key_begin_(ho, q0), k_end = min(T, q0 + ROWS);
    auto stage = [&](int set, int k0) {
        load_tile_<DM, ROWS, LD>(tiles + 2 * set * TE, k + head, k0, T, D);
        load_tile_<DM, ROWS, LD>(tiles + (2 * set + 1) * TE, v + head, k0, T, D);
        load_f_(fl + set * ROWS, ho, k0, T);
        cp_commit_();
    };
    ARegs<DM, M> qa, da;  // with PREG: this warp's queries and their dout, staged through set 1's K and V
    load_tile_<DM, ROWS, LD>(PREG ? tiles + 2 * TE : qs, q + head, q0, T, D);
    load_tile_<DM, ROWS, LD>(PREG ? tiles + 3 * TE : dos, dout + head, q0, T, D);
    stage(0, kb);
    cp_wait_<0>();
    __syncthreads();
    if (PREG) {
        qa.load(tiles + 2 * TE + warp * 16 * LD, LD);
        da.load(tiles + 3 * TE + warp * 16 * LD, LD);
        __syncthreads();
    }
    float acc[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    for (int k0 = kb, set = 0; k0 < k_end; k0 += ROWS, set ^= 1) {
        if (k0 + ROWS < k_end) stage(set ^ 1, k0 + ROWS);
        else cp_commit_();  // an empty group: the wait below then always leaves one
        cp_wait_<1>();
        __syncthreads();
        const E *ks = tiles + 2 * set * TE, *vs = ks + TE;
        const float *fs = fl + set * ROWS;
        float s[NT][4], dp[NT][4];
        if (PREG) {
            mma_scores_<DM, NT, M>(s, qa, ks, LD);   // q k^T
            mma_scores_<DM, NT, M>(dp, da, vs, LD);  // dout v^T
        } else {
            mma_scores_<DM, NT, M>(s, ASmem<M>{qs + warp * 16 * LD, LD}, ks, LD);
            mma_scores_<DM, NT, M>(dp, ASmem<M>{dos + warp * 16 * LD, LD}, vs, LD);
        }
        tile_logits_<NT, true>(s, ho, rw, i, Fi, k0, fs, T);
        tile_ds_<NT, true, false>(s, dp, NULL, ho, i, k0, li, di, NULL, NULL, dF);
        mma_accumulate_<ROWS, ND, M>(acc, s, ks, LD);  // ds k
        __syncthreads();
    }
    if (dfgate) {  // the row's 4 lanes, then one writes
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float x = row_sum_(dF[r]);
            if (i[r] < T && t == 0) dfgate[hrow + i[r]] = x;
        }
    }
    float *w = (float *)raw + warp * 16 * Stage<ND>::LW;  // the tiles are free: the loop ended at a barrier
    stage_rows_<ND>(w, acc, ho.scale);
    write_heads_(dq, w, Stage<ND>::LW, rw, T, D, NH);
}

// dv_j = sum_i w_ij dout_i, dk_j = scale · sum_i ds_ij q_i over the queries i that see key j, and with F
// dfgate_j -= sum_i ds_ij (after attn_dq_kernel wrote the row sums). Grid (B*NH, ceil(T/64)): a block owns 64 keys
// (each warp 16) and walks the query tiles of QT from its first key on (up to the window's end). Shared: K, V
// tiles (64, LD) and two sets of Q, dO tiles (QT, LD) with the query tile's lse, delta and F (the next loading
// while this one is used). The transposed scores (row = key, column = query), ds and the gradients stay in
// registers.
template <int DM, typename M>
__global__ void __launch_bounds__(WARPS * 32, (MinBlocks<DM, M>::dkdv))
    attn_dkdv_kernel(const GpuHeads dk, const GpuHeads dv, float *dfgate, const typename M::Elt *dout, const float *lse,
                     const float *delta, const typename M::Elt *q, const typename M::Elt *k, const typename M::Elt *v,
                     const GpuAttnOpts o, int NH, int T, int D) {
    typedef typename M::Elt E;
    constexpr int LD = Tile<DM, M>::LD, TE = Tile<DM, M>::ELEMS, TQ = Tile<DM, M, QT>::ELEMS, NT = QT / 8, ND = DM / 8;
    constexpr bool PREG = PairInRegs<DM, M>::value;
    GPU_DYNAMIC_SMEM(unsigned char, raw);
    E *tiles = (E *)raw, *ks = tiles + 4 * TQ, *vs = ks + TE;  // set s: Q at 2s·TQ, dO after it; then K, V
    float *fl = (float *)(vs + TE);                            // set s: lse, delta, F of its queries at fl + 3s·QT
    size_t head = (size_t)blockIdx.x * T * D, hrow = (size_t)blockIdx.x * T;
    HeadOpts_ ho = head_opts_(o, NH, T);
    int j0 = blockIdx.y * ROWS, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int g = lane >> 2, t = lane & 3, rw = j0 + warp * 16;
    int j[2] = {rw + g, rw + g + 8};  // this lane's two keys
    float Fj[2], dF[2] = {0.0f, 0.0f};
    for (int r = 0; r < 2; r++) Fj[r] = ho.F && j[r] < T ? ho.F[j[r]] : 0.0f;
    int i_end = query_end_(ho, j0, T);
    auto stage = [&](int set, int i0) {
        float *ls = fl + 3 * set * QT;
        load_tile_<DM, QT, LD>(tiles + 2 * set * TQ, q + head, i0, T, D);
        load_tile_<DM, QT, LD>(tiles + (2 * set + 1) * TQ, dout + head, i0, T, D);
        load_floats_(ls, lse + hrow, i0, T, QT);
        load_floats_(ls + QT, delta + hrow, i0, T, QT);
        load_f_(ls + 2 * QT, ho, i0, T, QT);
        cp_commit_();
    };
    load_tile_<DM, ROWS, LD>(ks, k + head, j0, T, D);
    load_tile_<DM, ROWS, LD>(vs, v + head, j0, T, D);
    stage(0, j0);  // causal: no query before the block's first key
    cp_wait_<0>();
    __syncthreads();
    ARegs<DM, M> ka, va;  // with PREG: this warp's keys and values
    if (PREG) {
        ka.load(ks + warp * 16 * LD, LD);
        va.load(vs + warp * 16 * LD, LD);
    }
    float dka[ND][4], dva[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dka[n][e] = dva[n][e] = 0.0f;
    for (int i0 = j0, set = 0; i0 < i_end; i0 += QT, set ^= 1) {
        if (i0 + QT < i_end) stage(set ^ 1, i0 + QT);
        else cp_commit_();
        cp_wait_<1>();
        __syncthreads();
        const E *qs = tiles + 2 * set * TQ, *dos = qs + TQ;
        const float *ls = fl + 3 * set * QT, *dls = ls + QT, *fs = dls + QT;
        float s[NT][4], dp[NT][4];
        if (PREG) {
            mma_scores_<DM, NT, M>(s, ka, qs, LD);    // k q^T: row = key, column = query
            mma_scores_<DM, NT, M>(dp, va, dos, LD);  // v dout^T
        } else {
            mma_scores_<DM, NT, M>(s, ASmem<M>{ks + warp * 16 * LD, LD}, qs, LD);
            mma_scores_<DM, NT, M>(dp, ASmem<M>{vs + warp * 16 * LD, LD}, dos, LD);
        }
        tile_logits_<NT, false>(s, ho, rw, j, Fj, i0, fs, T);
        float w[NT][4];  // the weights p E that dv takes
        tile_ds_<NT, false, true>(s, dp, w, ho, j, i0, NULL, NULL, ls, dls, dF);
        mma_accumulate_<QT, ND, M>(dva, w, dos, LD);  // w^T dout
        mma_accumulate_<QT, ND, M>(dka, s, qs, LD);   // ds^T q
        __syncthreads();
    }
    if (dfgate) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float x = row_sum_(dF[r]);
            if (j[r] < T && t == 0) dfgate[hrow + j[r]] -= x;
        }
    }
    float *w = (float *)raw + warp * 16 * Stage<ND>::LW;  // the tiles are free: the loop ended at a barrier
    stage_rows_<ND>(w, dka, ho.scale);
    write_heads_(dk, w, Stage<ND>::LW, rw, T, D, NH);
    stage_rows_<ND>(w, dva, 1.0f);
    write_heads_(dv, w, Stage<ND>::LW, rw, T, D, NH);
}

// ----------------------------------------------------------------------------
// launches

int gpu_attn_supports(int D) { return D >= 1 && D <= GPU_ATTN_MAX_D; }

// dynamic shared memory of each kernel (bytes): its tiles, then its floats; at least the epilogue's staged rows
template <int DM>
static size_t with_stage_(size_t bytes) {
    return std::max(bytes, (size_t)WARPS * 16 * Stage<DM / 8>::LW * sizeof(float));
}
template <int DM, typename M>
static size_t fwd_smem_(void) {
    return with_stage_<DM>((QInRegs<DM, M>::value ? 4 : 5) * Tile<DM, M>::ELEMS * sizeof(typename M::Elt) +
                           2 * ROWS * sizeof(float));
}
template <int DM, typename M>
static size_t dq_smem_(void) {
    return with_stage_<DM>((PairInRegs<DM, M>::value ? 4 : 6) * Tile<DM, M>::ELEMS * sizeof(typename M::Elt) +
                           2 * ROWS * sizeof(float));
}
template <int DM, typename M>
static size_t dkdv_smem_(void) {
    return with_stage_<DM>((4 * Tile<DM, M, QT>::ELEMS + 2 * Tile<DM, M>::ELEMS) * sizeof(typename M::Elt) +
                           6 * QT * sizeof(float));
}

// a kernel's launch for one DM and policy M (L<DM, M>::run), chosen from D (the smallest of 32, 64, 128 that holds
// it) and run.precision; the tensors the precision gives as bf16 arrive as void pointers
template <template <int, typename> class L, typename M, typename... A>
static void by_dm_(int D, A... a) {
    if (D <= 32) L<32, M>::run(a...);
    else if (D <= 64) L<64, M>::run(a...);
    else L<128, M>::run(a...);
}
template <template <int, typename> class L, typename... A>
static void dispatch_(int D, A... a) {
    switch (gpu_math()) {
        case GPU_FP32: by_dm_<L, MathTf32<true>>(D, a...); break;
        case GPU_TF32: by_dm_<L, MathTf32<false>>(D, a...); break;
        case GPU_BF16: by_dm_<L, MathBf16>(D, a...); break;
    }
}
// raises a kernel's dynamic shared memory limit above the default 48 KB
template <typename K>
static void smem_limit_(K kernel, size_t bytes) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

template <int DM, typename M>
struct FwdLaunch {
    static void run(const GpuHeads *out, const GpuHeads *out2, float *lse, const void *q, const void *k,
                    const void *v, GpuAttnOpts o, int B, int NH, int T, int D) {
        typedef const typename M::Elt *P;
        size_t bytes = fwd_smem_<DM, M>();
        smem_limit_(attn_fwd_kernel<DM, M>, bytes);
        dim3 grid(B * NH, gpu_blocks(T, ROWS));
        attn_fwd_kernel<DM, M><<<grid, WARPS * 32, bytes>>>(*out, *out2, lse, (P)q, (P)k, (P)v, o, NH, T, D);
    }
};
template <int DM, typename M>
struct DqLaunch {
    static void run(const GpuHeads *dq, float *dfgate, const void *dout, const float *lse, const float *delta,
                    const void *q, const void *k, const void *v, GpuAttnOpts o, int B, int NH, int T, int D) {
        typedef const typename M::Elt *P;
        size_t bytes = dq_smem_<DM, M>();
        smem_limit_(attn_dq_kernel<DM, M>, bytes);
        dim3 grid(B * NH, gpu_blocks(T, ROWS));
        attn_dq_kernel<DM, M><<<grid, WARPS * 32, bytes>>>(*dq, dfgate, (P)dout, lse, delta, (P)q, (P)k, (P)v, o, NH,
                                                           T, D);
    }
};
template <int DM, typename M>
struct DkdvLaunch {
    static void run(const GpuHeads *dk, const GpuHeads *dv, float *dfgate, const void *dout, const float *lse,
                    const float *delta, const void *q, const void *k, const void *v, GpuAttnOpts o, int B, int NH,
                    int T, int D) {
        typedef const typename M::Elt *P;
        size_t bytes = dkdv_smem_<DM, M>();
        smem_limit_(attn_dkdv_kernel<DM, M>, bytes);
        dim3 grid(B * NH, gpu_blocks(T, ROWS));
        attn_dkdv_kernel<DM, M><<<grid, WARPS * 32, bytes>>>(*dk, *dv, dfgate, (P)dout, lse, delta, (P)q, (P)k, (P)v,
                                                             o, NH, T, D);
    }
};

GpuHeads gpu_heads_packed(void *p, int bf16, int NH, int T, int D) {
    GpuHeads h = {};
    h.p = p, h.bf16 = bf16, h.st = D, h.sh = (size_t)T * D, h.sb = (size_t)NH * T * D;
    return h;
}

GpuHeads gpu_heads_rows(void *p, int bf16, int T, size_t ld, size_t col0, int D) {
    GpuHeads h = {};
    h.p = bf16 ? (void *)((__nv_bfloat16 *)p + col0) : (void *)((float *)p + col0);
    h.bf16 = bf16, h.st = ld, h.sh = D, h.sb = (size_t)T * ld;
    return h;
}

void gpu_heads_rotate(GpuHeads *h, const float *cos_, const float *sin_, int per_head, int half_layout, float sign) {
    h->cos_ = cos_, h->sin_ = sin_, h->per_head = per_head, h->half_layout = half_layout, h->sign = sign;
}

double gpu_attention_flops(const GpuAttnOpts *o, int B, int NH, int T, int D, int products) {
    double W = o->window > 0 && o->window < T ? o->window : T;
    double pairs = W * (W + 1) / 2 + ((double)T - W) * W;  // query i sees min(i + 1, W) keys
    return 2.0 * products * D * pairs * B * NH;
}

void gpu_attention_forward(const GpuHeads *out, const GpuHeads *out2, float *lse, const void *q, const void *k,
                           const void *v, const GpuAttnOpts *o, int B, int NH, int T, int D) {
    GpuHeads none = {};
    dispatch_<FwdLaunch>(D, out, out2 ? out2 : &none, lse, q, k, v, *o, B, NH, T, D);
    KERNEL_CHECK();
}

// delta for dout of E: V 4 where every row of out starts 16-byte aligned
template <typename E>
static void delta_(float *delta, const void *dout, const GpuHeads *out, int NH, int T, int D, size_t rows) {
    unsigned blocks = gpu_blocks(rows * 16, 256);
    if (D % 4 == 0 && heads_aligned4_(*out))
        attn_delta_kernel<4, E><<<blocks, 256>>>(delta, (const E *)dout, *out, NH, T, D, rows);
    else
        attn_delta_kernel<1, E><<<blocks, 256>>>(delta, (const E *)dout, *out, NH, T, D, rows);
}

void gpu_attention_backward(const GpuHeads *dq, const GpuHeads *dk, const GpuHeads *dv, float *dfgate, float *delta,
                            const void *dout, const GpuHeads *out, const float *lse, const void *q, const void *k,
                            const void *v, const GpuAttnOpts *o, int B, int NH, int T, int D) {
    size_t rows = (size_t)B * NH * T;
    if (!o->fgate) dfgate = NULL;
    if (gpu_math() == GPU_BF16) GPU_TIMED("attn.kernel.delta", delta_<__nv_bfloat16>(delta, dout, out, NH, T, D, rows));
    else GPU_TIMED("attn.kernel.delta", delta_<float>(delta, dout, out, NH, T, D, rows));
    KERNEL_CHECK();
    // dq first: it writes dfgate's row sums, which dk/dv's pass then takes its column sums from
    GPU_TIMED_FLOPS("attn.kernel.dq", gpu_attention_flops(o, B, NH, T, D, 3),
                    dispatch_<DqLaunch>(D, dq, dfgate, dout, lse, delta, q, k, v, *o, B, NH, T, D));
    KERNEL_CHECK();
    GPU_TIMED_FLOPS("attn.kernel.dkdv", gpu_attention_flops(o, B, NH, T, D, 4),
                    dispatch_<DkdvLaunch>(D, dk, dv, dfgate, dout, lse, delta, q, k, v, *o, B, NH, T, D));
    KERNEL_CHECK();
}
