// Tiled causal attention on the tensor cores (gpu/flash_attn.cuh), FlashAttention-2's layout: a block is 4 warps
// and owns 64 rows (queries in the forward and dq, keys in dk/dv); each warp owns 16 of them and keeps its scores,
// its softmax and its accumulators in registers. The other side walks in tiles staged in shared memory. Every
// product is a warp-wide mma.sync m16n8k8 on TF32 operands with fp32 accumulators, whose register layout PTX
// documents (lane = 4 g + t, g = lane / 4, t = lane % 4):
//
//   A (16x8, row-major)  a0 (g, t)    a1 (g+8, t)    a2 (g, t+4)    a3 (g+8, t+4)
//   B (8x8, k x n)       b0 (t, g)    b1 (t+4, g)
//   C (16x8)             c0 (g, 2t)   c1 (g, 2t+1)   c2 (g+8, 2t)   c3 (g+8, 2t+1)
//
// So a lane holds columns 2t, 2t+1 of rows g and g+8 of each 8-column slice of its scores: a row's maximum and sum
// are 4 lanes' (two shuffles), and the row's scale factors are per lane. A score tile goes straight on as the left
// operand of the next product (P·V) by reading its 8 columns in the order 0 2 4 6 1 3 5 7 (a0 = c0, a1 = c2,
// a2 = c1, a3 = c3) and the right operand's rows in the same order: no shuffle and no trip through shared memory.
// The position scheme reaches the kernels as a GpuAttnOpts by value; each block reads its head's constants from it
// (head_opts_), and F of the tile's rows is staged in shared memory with the tile.
//
// Precision (gpu_math): GPU_TF32 rounds each operand to TF32; GPU_FP32 splits each fp32 operand x into
// big = tf32(x) and small = tf32(x - big) and sums small·big + big·small + big·big (3xTF32), which keeps about
// fp32's accuracy on the tensor cores. The scores, the softmax, the accumulators and every output are fp32.
//
// Kernels are templates on DM (the head size rounded up to 32, 64 or 128: tiles are zero-padded past D, so the
// loops have no bounds tests) and on SPLIT (3xTF32 or not). Tiles are zero-padded past T too; the causal and
// window masks and the bounds are applied to the scores.
#include "gpu/flash_attn.cuh"

#include <math.h>
#include <stdint.h>

#include <mma.h>  // wmma::__float_to_tf32; the emulator's tests/gpu/emu/mma.h (with its mma.sync) where it builds the kernels

#include "gpu/common.cuh"

#define ROWS 64   // rows a block owns, and the forward's and dq's key tile: 4 warps x 16
#define WARPS 4
#define QT 32     // dk/dv's query tile

// row stride (floats) of a staged (rows, DM) tile: DM + 4 spreads a warp's fragment loads over all 32 banks
// (rows g at stride DM + 4 = 4 mod 32 banks, columns t: 4g + t; rows 2t: 8t + g)
template <int DM>
struct Tile {
    static constexpr int LD = DM + 4;
    static constexpr int FLOATS = ROWS * LD;
};

// ----------------------------------------------------------------------------
// warp matrix multiply-accumulate

// d (16x8, C layout) += a (16x8) b (8x8), operands already TF32 (fp32 bit patterns with the low 13 bits zero)
static __device__ __forceinline__ void mma_(float d[4], const float a[4], const float b[2]) {
#ifdef SEQ_GPU_EMU
    emu_mma_m16n8k8(d, a, b);
#else
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(__float_as_uint(a[0])), "r"(__float_as_uint(a[1])), "r"(__float_as_uint(a[2])),
                   "r"(__float_as_uint(a[3])), "r"(__float_as_uint(b[0])), "r"(__float_as_uint(b[1])));
#endif
}

// N floats rounded for the precision: hi = tf32(x), and with SPLIT lo = tf32(x - hi)
template <bool SPLIT, int N>
static __device__ __forceinline__ void round_(float *hi, float *lo) {  // hi holds x on entry
#pragma unroll
    for (int e = 0; e < N; e++) {
        float x = hi[e], b = nvcuda::wmma::__float_to_tf32(x);
        hi[e] = b;
        if (SPLIT) lo[e] = nvcuda::wmma::__float_to_tf32(x - b);
    }
}

// d += A B with the precision's products (3xTF32: lo·hi + hi·lo + hi·hi)
template <bool SPLIT>
static __device__ __forceinline__ void mma_step_(float d[4], const float *ahi, const float *alo, const float *bhi,
                                                 const float *blo) {
    if (SPLIT) {
        mma_(d, alo, bhi);
        mma_(d, ahi, blo);
    }
    mma_(d, ahi, bhi);
}

// this lane's part of the A operand at p (the (16, 8) slice's (0, 0), row-major, stride ld)
static __device__ __forceinline__ void frag_a_(float a[4], const float *p, int ld) {
    int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    a[0] = p[g * ld + t];
    a[1] = p[(g + 8) * ld + t];
    a[2] = p[g * ld + t + 4];
    a[3] = p[(g + 8) * ld + t + 4];
}

// The left operand, a row-major (16,K) matrix, one rounded k-slice of 8 at a time: read from shared memory at each
// step (ASmem), or held in registers, loaded and rounded once (ARegs: rows a warp uses against every tile, e.g. its
// queries in the forward)
struct ASmem {
    const float *a;
    int lda;
    template <bool SPLIT>
    __device__ __forceinline__ void get(int k, float hi[4], float lo[4]) const {
        frag_a_(hi, a + k, lda);
        round_<SPLIT, 4>(hi, lo);
    }
};
template <int K, bool SPLIT>
struct ARegs {
    float hi[K / 8][4], lo[SPLIT ? K / 8 : 1][4];
    __device__ __forceinline__ void load(const float *a, int lda) {
#pragma unroll
        for (int k = 0; k < K; k += 8) {
            frag_a_(hi[k / 8], a + k, lda);
            round_<SPLIT, 4>(hi[k / 8], lo[SPLIT ? k / 8 : 0]);
        }
    }
    template <bool S>
    __device__ __forceinline__ void get(int k, float h[4], float l[4]) const {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            h[e] = hi[k / 8][e];
            if (SPLIT) l[e] = lo[k / 8][e];
        }
    }
};

// s[n] (16, 8), n < N: this warp's scores A (16,K) · Bt^T against the 8N rows of Bt (row-major at bt, stride ld;
// Bt's row c is B's column c: q·k^T against k's rows), WRITTEN. k outermost: each slice of A is rounded once.
template <int K, int N, bool SPLIT, typename ASrc>
static __device__ __forceinline__ void scores_(float (*s)[4], const ASrc &A, const float *bt, int ld) {
    int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
#pragma unroll
    for (int n = 0; n < N; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int k = 0; k < K; k += 8) {
        float ahi[4], alo[4];
        A.template get<SPLIT>(k, ahi, alo);
#pragma unroll
        for (int n = 0; n < N; n++) {
            const float *p = bt + (n * 8 + g) * ld + k + t;
            float bhi[2] = {p[0], p[4]}, blo[2];
            round_<SPLIT, 2>(bhi, blo);
            mma_step_<SPLIT>(s[n], ahi, alo, bhi, blo);
        }
    }
}

// acc[n] (16, 8), n < N, += P (16,KP) · X[:, 8n .. 8n+8): P this warp's scores in registers (KP/8 slices in the C
// layout, as scores_ leaves them), X (KP, 8N) row-major at x (stride ld). Slice kk's columns are taken in the order
// 0 2 4 6 1 3 5 7 (A's column t is P's 2t, t + 4 is 2t + 1), X's rows likewise.
template <int KP, int N, bool SPLIT>
static __device__ __forceinline__ void accumulate_(float (*acc)[4], const float (*p)[4], const float *x, int ld) {
    int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
#pragma unroll
    for (int kk = 0; kk < KP / 8; kk++) {
        float ahi[4] = {p[kk][0], p[kk][2], p[kk][1], p[kk][3]}, alo[4];
        round_<SPLIT, 4>(ahi, alo);
        const float *xr = x + (kk * 8 + 2 * t) * ld + g;
#pragma unroll
        for (int n = 0; n < N; n++) {
            float bhi[2] = {xr[n * 8], xr[ld + n * 8]}, blo[2];
            round_<SPLIT, 2>(bhi, blo);
            mma_step_<SPLIT>(acc[n], ahi, alo, bhi, blo);
        }
    }
}

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
// too many registers (3xTF32's two parts of 128-wide rows); dq holds its queries and their dout, dk/dv its keys and
// values, for TF32 operands up to 64 wide.
template <int DM, bool SPLIT>
struct QInRegs {
    static constexpr bool value = !(SPLIT && DM > 64);
};
template <int DM, bool SPLIT>
struct PairInRegs {
    static constexpr bool value = !SPLIT && DM <= 64;
};
// Blocks per SM the kernels ask the compiler to fit in registers (__launch_bounds__'s second argument)
template <int DM, bool SPLIT>
struct MinBlocks {
    static constexpr int fwd = DM <= 64 && !SPLIT ? 3 : DM <= 64 ? 2 : 1, dq = DM <= 64 ? 2 : 1, dkdv = DM <= 64 ? 2 : 1;
};

// ----------------------------------------------------------------------------
// asynchronous tile copies (cp.async: global to shared memory without a trip through registers, so the next tile
// loads while the warps work on this one)

// 16 bytes from src to shared dst, or (bytes 0) 16 zero bytes
static __device__ __forceinline__ void cp_async16_(float *dst, const float *src, int bytes) {
#ifdef SEQ_GPU_EMU
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (bytes) memcpy(&x, src, 16);
    memcpy(dst, &x, 16);
#else
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
#endif
}
// closes the group of this thread's copies issued since the last commit
static __device__ __forceinline__ void cp_commit_(void) {
#ifndef SEQ_GPU_EMU
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// waits until at most N of this thread's committed groups are pending (a __syncthreads then shows every thread's)
template <int N>
static __device__ __forceinline__ void cp_wait_(void) {
#ifndef SEQ_GPU_EMU
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// rows [r0, r0 + NR) of a (T,D) matrix into s (NR, LD), zero-padded past T and past D: asynchronous (cp_commit_,
// cp_wait_) when D is a multiple of 4 (rows of whole float4s, 16-byte aligned: heads are T·D floats apart),
// else plain stores, done at the next __syncthreads
template <int DM, int NR = ROWS>
static __device__ void load_tile_(float *s, const float *src, int r0, int T, int D) {
    constexpr int LD = Tile<DM>::LD;
    if (D % 4 == 0) {
        for (int i = threadIdx.x; i < NR * DM / 4; i += blockDim.x) {
            int r = i / (DM / 4), d = 4 * (i % (DM / 4));
            bool in = r0 + r < T && d < D;
            cp_async16_(s + r * LD + d, in ? src + (size_t)(r0 + r) * D + d : src, in ? 16 : 0);
        }
        return;
    }
    for (int i = threadIdx.x; i < NR * DM; i += blockDim.x) {
        int r = i / DM, d = i % DM;
        s[r * LD + d] = (r0 + r < T && d < D) ? src[(size_t)(r0 + r) * D + d] : 0.0f;
    }
}

// this warp's (16, 8N) result in registers times `mul` into dst (T,D), its rows from r0 (rows past T and columns
// past D dropped)
template <int N>
static __device__ __forceinline__ void store_rows_(float *dst, const float (*acc)[4], float mul, int r0, int T,
                                                   int D) {
    int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
#pragma unroll
    for (int n = 0; n < N; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int r = r0 + g + 8 * (e >> 1), d = 8 * n + 2 * t + (e & 1);
            if (r < T && d < D) dst[(size_t)r * D + d] = acc[n][e] * mul;
        }
}

// ----------------------------------------------------------------------------
// the position scheme, per block (nn/attention.c's HeadOpts_ and logit_)

// the scheme of the block's (b, h) (blockIdx.x = b·NH + h)
struct HeadOpts_ {
    float scale, slope, decay;
    const float *F;  // (T,) or NULL
    int W;           // 0 = full causal
};

static __device__ __forceinline__ HeadOpts_ head_opts_(const GpuAttnOpts &o, int NH, int T) {
    int h = blockIdx.x % NH;
    HeadOpts_ ho;
    ho.scale = o.scale;
    ho.slope = o.slopes[h];
    ho.decay = o.decay[h];
    ho.F = o.fgate ? o.fgate + (size_t)blockIdx.x * T : NULL;
    ho.W = o.window > 0 && o.window < T ? o.window : 0;  // a window of T or more hides nothing, as on the CPU
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

// F of rows [r0, r0 + n) into s (0 past T, and without F)
static __device__ void load_f_(float *s, const HeadOpts_ &ho, int r0, int T, int n = ROWS) {
    for (int x = threadIdx.x; x < n; x += blockDim.x) s[x] = ho.F && r0 + x < T ? ho.F[r0 + x] : 0.0f;
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
// s[n][e] (this lane's dot products of a tile, n < N) turned into logits, WRITTEN in place; with MASKED,
// -INFINITY where the pair is not visible or the query is past T (without, the caller knows every pair is
// visible: no test). The lane's two rows are ri[0..1] with F values Fr, its columns c0 + 8n + 2t + {0, 1} with F
// at fc[8n + 2t + {0, 1}]. QROWS: rows are queries and columns keys (forward, dq), else the other way (dk/dv).
// Branch-free in the scheme: a missing slope or F adds exact zeros (nn/attention.c's order of operations).
template <int N, bool MASKED, bool QROWS>
static __device__ __forceinline__ void logits_(float (*s)[4], const HeadOpts_ &ho, const int ri[2], const float Fr[2],
                                               int c0, const float *fc, int T) {
    int t = threadIdx.x & 3;
#pragma unroll
    for (int n = 0; n < N; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int r = e >> 1, c = 8 * n + 2 * t + (e & 1);
            int qi = QROWS ? ri[r] : c0 + c, kj = QROWS ? c0 + c : ri[r];
            float x = s[n][e] * ho.scale;
            x -= ho.slope * (float)(qi - kj);
            x += QROWS ? Fr[r] - fc[c] : fc[c] - Fr[r];
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

// ... both in one call: the mask only where needed (the branch is uniform over the warp)
template <int N, bool QROWS>
static __device__ __forceinline__ void tile_logits_(float (*s)[4], const HeadOpts_ &ho, int r0, const int ri[2],
                                                    const float Fr[2], int c0, const float *fc, int T) {
    if (all_visible_<QROWS>(ho, r0, c0, 8 * N, T)) logits_<N, false, QROWS>(s, ho, ri, Fr, c0, fc, T);
    else logits_<N, true, QROWS>(s, ho, ri, Fr, c0, fc, T);
}

// forward: grid (B*NH, ceil(T/64)) (heads on x: gridDim.y stops at 65535), 128 threads. Shared: two sets of K, V
// tiles (64, LD) and F of the key tile, the next set loading (cp.async) while the warps work on the other, and
// without QREG Q's tile. Each warp's scores, softmax and output stay in registers; a lane's running maximum is its
// rows' (shared by the row's 4 lanes), its running sum l its own columns' part, summed over the row's lanes at the
// end. l sums the softmax weights p; P·V takes w = p·exp(-decay (i-j)) (nn/attention.c's "second accumulator").
template <int DM, bool SPLIT>
__global__ void __launch_bounds__(WARPS * 32, (MinBlocks<DM, SPLIT>::fwd))
    attn_fwd_kernel(float *out, float *lse, const float *q, const float *k, const float *v, const GpuAttnOpts o,
                    int NH, int T, int D) {
    constexpr int LD = Tile<DM>::LD, TF = Tile<DM>::FLOATS, NT = ROWS / 8, ND = DM / 8;
    constexpr int SET = 2 * TF + ROWS;  // K, V, F of one key tile
    constexpr bool QREG = QInRegs<DM, SPLIT>::value;
    GPU_DYNAMIC_SMEM(float, sm);
    float *qs = sm + 2 * SET;  // without QREG
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
        float *base = sm + set * SET;
        load_tile_<DM>(base, k + head, k0, T, D);
        load_tile_<DM>(base + TF, v + head, k0, T, D);
        load_f_(base + 2 * TF, ho, k0, T);
        cp_commit_();
    };
    ARegs<DM, SPLIT> qa;  // with QREG: this warp's 16 queries, staged through set 1's K tile
    load_tile_<DM>(QREG ? sm + SET : qs, q + head, q0, T, D);
    stage(0, kb);
    cp_wait_<0>();
    __syncthreads();
    if (QREG) {
        qa.load(sm + SET + warp * 16 * LD, LD);
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
        const float *ks = sm + set * SET, *vs = ks + TF, *fs = vs + TF;
        float s[NT][4];
        if (QREG) scores_<DM, NT, SPLIT>(s, qa, ks, LD);
        else scores_<DM, NT, SPLIT>(s, ASmem{qs + warp * 16 * LD, LD}, ks, LD);
        tile_logits_<NT, true>(s, ho, rw, i, Fi, k0, fs, T);
        float corr[2], mz[2], psum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float tmax = -INFINITY;
#pragma unroll
            for (int n = 0; n < NT; n++) tmax = fmaxf(tmax, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
            float mnew = fmaxf(mx[r], row_max_(tmax));
            corr[r] = mnew == -INFINITY ? 1.0f : __expf(mx[r] - mnew);
            mx[r] = mnew;
            mz[r] = mnew == -INFINITY ? 0.0f : mnew;  // a row with nothing visible yet: exp(-inf - 0) = 0
        }
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float p = __expf(s[n][e] - mz[e >> 1]);
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
        accumulate_<ROWS, ND, SPLIT>(acc, s, vs, LD);
        __syncthreads();  // every warp is done with this set before the next iteration refills it
    }
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] = row_sum_(l[r]);
        inv[r] = 1.0f / l[r];
        if (i[r] < T && t == 0) lse[(size_t)blockIdx.x * T + i[r]] = mx[r] + logf(l[r]);
    }
#pragma unroll
    for (int n = 0; n < ND; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[n][e] *= inv[e >> 1];
    store_rows_<ND>(out + head, acc, 1.0f, rw, T, D);
}

// delta (B*NH*T,) = rowwise dout · out, one warp per row (= sum_j w_ij dout_i·v_j, the softmax backward's term,
// with the post-softmax decay too)
__global__ void attn_delta_kernel(float *delta, const float *dout, const float *out, size_t rows, int D) {
    size_t r = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    float s = 0.0f;
    for (int d = lane; d < D; d += 32) s += dout[r * D + d] * out[r * D + d];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) delta[r] = s;
}

// ds of a tile from its logits s (WRITTEN in place) and dp = dout·v: ds = p (E dp - delta), p = exp(s - lse) (0
// where s is -inf), E = exp(-decay (i - j)) (1 without decay, and where p is 0); dsum[r] += each row's ds, and with
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
            float p = __expf(s[n][e] - L), E = 1.0f;
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
template <int DM, bool SPLIT>
__global__ void __launch_bounds__(WARPS * 32, (MinBlocks<DM, SPLIT>::dq))
    attn_dq_kernel(float *dq, float *dfgate, const float *dout, const float *lse, const float *delta, const float *q,
                   const float *k, const float *v, const GpuAttnOpts o, int NH, int T, int D) {
    constexpr int LD = Tile<DM>::LD, TF = Tile<DM>::FLOATS, NT = ROWS / 8, ND = DM / 8;
    constexpr int SET = 2 * TF + ROWS;
    constexpr bool PREG = PairInRegs<DM, SPLIT>::value;
    GPU_DYNAMIC_SMEM(float, sm);
    float *qs = sm + 2 * SET, *dos = qs + TF;  // without PREG
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
        float *base = sm + set * SET;
        load_tile_<DM>(base, k + head, k0, T, D);
        load_tile_<DM>(base + TF, v + head, k0, T, D);
        load_f_(base + 2 * TF, ho, k0, T);
        cp_commit_();
    };
    ARegs<DM, SPLIT> qa, da;  // with PREG: this warp's queries and their dout, staged through set 1's K and V
    load_tile_<DM>(PREG ? sm + SET : qs, q + head, q0, T, D);
    load_tile_<DM>(PREG ? sm + SET + TF : dos, dout + head, q0, T, D);
    stage(0, kb);
    cp_wait_<0>();
    __syncthreads();
    if (PREG) {
        qa.load(sm + SET + warp * 16 * LD, LD);
        da.load(sm + SET + TF + warp * 16 * LD, LD);
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
        const float *ks = sm + set * SET, *vs = ks + TF, *fs = vs + TF;
        float s[NT][4], dp[NT][4];
        if (PREG) {
            scores_<DM, NT, SPLIT>(s, qa, ks, LD);   // q k^T
            scores_<DM, NT, SPLIT>(dp, da, vs, LD);  // dout v^T
        } else {
            scores_<DM, NT, SPLIT>(s, ASmem{qs + warp * 16 * LD, LD}, ks, LD);
            scores_<DM, NT, SPLIT>(dp, ASmem{dos + warp * 16 * LD, LD}, vs, LD);
        }
        tile_logits_<NT, true>(s, ho, rw, i, Fi, k0, fs, T);
        tile_ds_<NT, true, false>(s, dp, NULL, ho, i, k0, li, di, NULL, NULL, dF);
        accumulate_<ROWS, ND, SPLIT>(acc, s, ks, LD);  // ds k
        __syncthreads();
    }
    if (dfgate) {  // the row's 4 lanes, then one writes
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float x = row_sum_(dF[r]);
            if (i[r] < T && t == 0) dfgate[hrow + i[r]] = x;
        }
    }
    store_rows_<ND>(dq + head, acc, ho.scale, rw, T, D);
}

// dv_j = sum_i w_ij dout_i, dk_j = scale · sum_i ds_ij q_i over the queries i that see key j, and with F
// dfgate_j -= sum_i ds_ij (after attn_dq_kernel wrote the row sums). Grid (B*NH, ceil(T/64)): a block owns 64 keys
// (each warp 16) and walks the query tiles of QT from its first key on (up to the window's end). Shared: K, V
// tiles (64, LD) and two sets of Q, dO tiles (QT, LD) with the query tile's lse, delta and F (the next loading
// while this one is used). The transposed scores (row = key, column = query), ds and the gradients stay in
// registers.
template <int DM, bool SPLIT>
__global__ void __launch_bounds__(WARPS * 32, (MinBlocks<DM, SPLIT>::dkdv))
    attn_dkdv_kernel(float *dk, float *dv, float *dfgate, const float *dout, const float *lse, const float *delta,
                     const float *q, const float *k, const float *v, const GpuAttnOpts o, int NH, int T, int D) {
    constexpr int LD = Tile<DM>::LD, TF = Tile<DM>::FLOATS, NT = QT / 8, ND = DM / 8;
    constexpr int SET = 2 * QT * LD + 3 * QT;  // Q, dO, lse, delta, F of one query tile
    constexpr bool PREG = PairInRegs<DM, SPLIT>::value;
    GPU_DYNAMIC_SMEM(float, sm);
    float *ks = sm + 2 * SET, *vs = ks + TF;
    size_t head = (size_t)blockIdx.x * T * D, hrow = (size_t)blockIdx.x * T;
    HeadOpts_ ho = head_opts_(o, NH, T);
    int j0 = blockIdx.y * ROWS, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int g = lane >> 2, t = lane & 3, rw = j0 + warp * 16;
    int j[2] = {rw + g, rw + g + 8};  // this lane's two keys
    float Fj[2], dF[2] = {0.0f, 0.0f};
    for (int r = 0; r < 2; r++) Fj[r] = ho.F && j[r] < T ? ho.F[j[r]] : 0.0f;
    int i_end = query_end_(ho, j0, T);
    auto stage = [&](int set, int i0) {
        float *base = sm + set * SET, *ls = base + 2 * QT * LD;
        load_tile_<DM, QT>(base, q + head, i0, T, D);
        load_tile_<DM, QT>(base + QT * LD, dout + head, i0, T, D);
        for (int x = threadIdx.x; x < QT; x += blockDim.x) {
            ls[x] = i0 + x < T ? lse[hrow + i0 + x] : 0.0f;
            ls[QT + x] = i0 + x < T ? delta[hrow + i0 + x] : 0.0f;
        }
        load_f_(ls + 2 * QT, ho, i0, T, QT);
        cp_commit_();
    };
    load_tile_<DM>(ks, k + head, j0, T, D);
    load_tile_<DM>(vs, v + head, j0, T, D);
    stage(0, j0);  // causal: no query before the block's first key
    cp_wait_<0>();
    __syncthreads();
    ARegs<DM, SPLIT> ka, va;  // with PREG: this warp's keys and values
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
        const float *qs = sm + set * SET, *dos = qs + QT * LD, *ls = dos + QT * LD, *dls = ls + QT, *fs = dls + QT;
        float s[NT][4], dp[NT][4];
        if (PREG) {
            scores_<DM, NT, SPLIT>(s, ka, qs, LD);    // k q^T: row = key, column = query
            scores_<DM, NT, SPLIT>(dp, va, dos, LD);  // v dout^T
        } else {
            scores_<DM, NT, SPLIT>(s, ASmem{ks + warp * 16 * LD, LD}, qs, LD);
            scores_<DM, NT, SPLIT>(dp, ASmem{vs + warp * 16 * LD, LD}, dos, LD);
        }
        tile_logits_<NT, false>(s, ho, rw, j, Fj, i0, fs, T);
        float w[NT][4];  // the weights p E that dv takes
        tile_ds_<NT, false, true>(s, dp, w, ho, j, i0, NULL, NULL, ls, dls, dF);
        accumulate_<QT, ND, SPLIT>(dva, w, dos, LD);  // w^T dout
        accumulate_<QT, ND, SPLIT>(dka, s, qs, LD);   // ds^T q
        __syncthreads();
    }
    if (dfgate) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float x = row_sum_(dF[r]);
            if (j[r] < T && t == 0) dfgate[hrow + j[r]] -= x;
        }
    }
    store_rows_<ND>(dk + head, dka, ho.scale, rw, T, D);
    store_rows_<ND>(dv + head, dva, 1.0f, rw, T, D);
}

// ----------------------------------------------------------------------------
// launches

int gpu_attn_supports(int D) { return D >= 1 && D <= GPU_ATTN_MAX_D; }

template <int DM, bool SPLIT>
static size_t fwd_smem_(void) {
    return (2 * (2 * (size_t)Tile<DM>::FLOATS + ROWS) + (QInRegs<DM, SPLIT>::value ? 0 : Tile<DM>::FLOATS)) *
           sizeof(float);
}
template <int DM, bool SPLIT>
static size_t dq_smem_(void) {
    return (2 * (2 * (size_t)Tile<DM>::FLOATS + ROWS) + (PairInRegs<DM, SPLIT>::value ? 0 : 2 * Tile<DM>::FLOATS)) *
           sizeof(float);
}
template <int DM, bool SPLIT>
static size_t dkdv_smem_(void) {
    return (2 * (2 * (size_t)QT * Tile<DM>::LD + 3 * QT) + 2 * Tile<DM>::FLOATS) * sizeof(float);
}

// launches KERNEL<DM, SPLIT> (DM: the smallest of 32, 64, 128 that holds D; SPLIT: fp32 mode) with `smem` bytes
// of dynamic shared memory, raising the kernel's limit above the default 48 KB first
#define LAUNCH_(KERNEL, SMEM, grid, ...)                                                                        \
    do {                                                                                                       \
        if (gpu_math() == GPU_FP32) LAUNCH_DM_(KERNEL, true, SMEM, grid, __VA_ARGS__);                          \
        else LAUNCH_DM_(KERNEL, false, SMEM, grid, __VA_ARGS__);                                                \
    } while (0)
#define LAUNCH_DM_(KERNEL, SPLIT, SMEM, grid, ...)                                                              \
    do {                                                                                                       \
        if (D <= 32) LAUNCH_ONE_(KERNEL, 32, SPLIT, SMEM, grid, __VA_ARGS__);                                  \
        else if (D <= 64) LAUNCH_ONE_(KERNEL, 64, SPLIT, SMEM, grid, __VA_ARGS__);                             \
        else LAUNCH_ONE_(KERNEL, 128, SPLIT, SMEM, grid, __VA_ARGS__);                                         \
    } while (0)
#define LAUNCH_ONE_(KERNEL, DMV, SPLIT, SMEM, grid, ...)                                                        \
    do {                                                                                                       \
        size_t bytes_ = SMEM<DMV, SPLIT>();                                                                    \
        CUDA_CHECK(cudaFuncSetAttribute(KERNEL<DMV, SPLIT>, cudaFuncAttributeMaxDynamicSharedMemorySize,       \
                                        (int)bytes_));                                                         \
        KERNEL<DMV, SPLIT><<<grid, WARPS * 32, bytes_>>>(__VA_ARGS__);                                         \
    } while (0)

void gpu_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                           const GpuAttnOpts *o, int B, int NH, int T, int D) {
    dim3 grid(B * NH, gpu_blocks(T, ROWS));
    LAUNCH_(attn_fwd_kernel, fwd_smem_, grid, out, lse, q, k, v, *o, NH, T, D);
    KERNEL_CHECK();
}

void gpu_attention_backward(float *dq, float *dk, float *dv, float *dfgate, float *delta, const float *dout,
                            const float *out, const float *lse, const float *q, const float *k, const float *v,
                            const GpuAttnOpts *o, int B, int NH, int T, int D) {
    size_t rows = (size_t)B * NH * T;
    if (!o->fgate) dfgate = NULL;
    GPU_TIMED("attn.kernel.delta", attn_delta_kernel<<<gpu_blocks(rows, 8), 256>>>(delta, dout, out, rows, D));
    KERNEL_CHECK();
    dim3 grid(B * NH, gpu_blocks(T, ROWS));
    // dq first: it writes dfgate's row sums, which dk/dv's pass then takes its column sums from
    GPU_TIMED("attn.kernel.dq", LAUNCH_(attn_dq_kernel, dq_smem_, grid, dq, dfgate, dout, lse, delta, q, k, v, *o, NH, T, D));
    KERNEL_CHECK();
    GPU_TIMED("attn.kernel.dkdv",
              LAUNCH_(attn_dkdv_kernel, dkdv_smem_, grid, dk, dv, dfgate, dout, lse, delta, q, k, v, *o, NH, T, D));
    KERNEL_CHECK();
}
