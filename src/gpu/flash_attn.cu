// Tiled causal attention on the tensor cores (gpu/flash_attn.cuh). A block is 4 warps and owns 64 rows (queries
// in the forward and dq, keys in dk/dv); each warp owns 16 of them. The other side walks in tiles of 64 staged in
// shared memory. Every product is a 16x16 warp matrix multiply (nvcuda::wmma, m16n16k8 on TF32 operands, fp32
// accumulators); the position scheme, the masks and the softmax are scalar work on the 16x64 score tile of each
// warp, two lanes per row, each taking every other column (so the two lanes of a row hit different banks). The
// scheme reaches the kernels as a GpuAttnOpts by value; each block reads its head's constants from it (head_opts_),
// and F of the tile's columns is staged in shared memory with the tile.
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

#include <type_traits>
#include <mma.h>  // the emulator's tests/gpu/emu/mma.h where it builds the kernels

#include "gpu/common.cuh"

using namespace nvcuda;

#define ROWS 64   // rows a block owns, and the tile of the other side: 4 warps x 16
#define WARPS 4
#define SLD_OF(NC) ((NC) + 4)  // row stride (floats) of NC-wide score tiles: a multiple of 4 as wmma needs
#define SLD SLD_OF(ROWS)
#define QT 32     // dk/dv's query tile: half of ROWS keeps its shared memory under a third of an SM's

typedef wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> FragB;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> FragBt;
typedef wmma::fragment<wmma::accumulator, 16, 16, 8, float> FragC;

// row stride of a staged (64, DM) tile: DM + 4 floats (keeps the 32-byte alignment wmma needs and spreads banks)
template <int DM>
struct Tile {
    static constexpr int LD = DM + 4;
    static constexpr int FLOATS = ROWS * LD;
};

// ----------------------------------------------------------------------------
// warp matrix multiply-accumulate with the precision's operand rounding

template <typename F>
static __device__ __forceinline__ void round_tf32_(F &f) {
#pragma unroll
    for (int i = 0; i < f.num_elements; i++) f.x[i] = wmma::__float_to_tf32(f.x[i]);
}

template <typename F>
static __device__ __forceinline__ void split_tf32_(F &big, F &small) {  // big holds x on entry
#pragma unroll
    for (int i = 0; i < big.num_elements; i++) {
        float x = big.x[i], b = wmma::__float_to_tf32(x);
        big.x[i] = b;
        small.x[i] = wmma::__float_to_tf32(x - b);
    }
}

// A's 16x8 slice at a, rounded for the precision (hi: tf32(x); lo, with SPLIT: tf32(x - hi))
template <bool SPLIT, typename F>
static __device__ __forceinline__ void load_operand_(F &hi, F &lo, const float *p, int ld) {
    wmma::load_matrix_sync(hi, p, ld);
    if (SPLIT) split_tf32_(hi, lo);
    else round_tf32_(hi);
}

// acc (16,16) += A B for one k-step of 8, the operands already rounded (3xTF32: lo·hi + hi·lo + hi·hi)
template <bool SPLIT, typename FA, typename FB>
static __device__ __forceinline__ void mma_step_(FragC &acc, const FA &ahi, const FA &alo, const FB &bhi,
                                                 const FB &blo) {
    if (SPLIT) {
        wmma::mma_sync(acc, alo, bhi, acc);
        wmma::mma_sync(acc, ahi, blo, acc);
    }
    wmma::mma_sync(acc, ahi, bhi, acc);
}

// The left operand of mma_, a row-major (16,K) matrix, handed out one rounded k-slice of 8 at a time: read from
// shared memory at each step (ASmem), or held in registers, loaded and rounded once (ARegs: rows a warp uses
// against every tile, e.g. its queries in the forward)
struct ASmem {
    const float *a;
    int lda;
    template <bool SPLIT>
    __device__ __forceinline__ void get(int k, FragA &hi, FragA &lo) const {
        load_operand_<SPLIT>(hi, lo, a + k, lda);
    }
};
template <int K, bool SPLIT>
struct ARegs {
    FragA hi[K / 8], lo[SPLIT ? K / 8 : 1];
    __device__ __forceinline__ void load(const float *a, int lda) {
#pragma unroll
        for (int k = 0; k < K; k += 8) load_operand_<SPLIT>(hi[k / 8], lo[SPLIT ? k / 8 : 0], a + k, lda);
    }
    template <bool S>
    __device__ __forceinline__ void get(int k, FragA &h, FragA &l) const {
        h = hi[k / 8];
        if (SPLIT) l = lo[k / 8];
    }
};

// acc[n] (16,16), n < N, += A (16,K) · B[:, 16n .. 16n+16). B: with BT, the transpose of a row-major (16N, K)
// matrix at b (B's column c is row c there: q·k^T against k's rows); else row-major (K, 16N) at b. k outermost:
// each slice of A is rounded once for all N products.
template <int K, int N, bool BT, bool SPLIT, typename ASrc>
static __device__ __forceinline__ void mma_(FragC *acc, const ASrc &A, const float *b, int ldb) {
    typedef typename std::conditional<BT, FragBt, FragB>::type FB;
#pragma unroll
    for (int k = 0; k < K; k += 8) {
        FragA ahi, alo;
        A.template get<SPLIT>(k, ahi, alo);
#pragma unroll
        for (int n = 0; n < N; n++) {
            FB bhi, blo;
            load_operand_<SPLIT>(bhi, blo, BT ? b + (size_t)n * 16 * ldb + k : b + (size_t)k * ldb + n * 16, ldb);
            mma_step_<SPLIT>(acc[n], ahi, alo, bhi, blo);
        }
    }
}

// this warp's (16,NC) scores: its 16 rows A (DM columns) against the NC rows of b (row-major, stride LD),
// S = A B^T, stored row-major into s (stride SLD_OF(NC))
template <int DM, bool SPLIT, int NC = ROWS, typename ASrc>
static __device__ __forceinline__ void scores_(float *s, const ASrc &A, const float *b) {
    FragC c[NC / 16];
#pragma unroll
    for (int n = 0; n < NC / 16; n++) wmma::fill_fragment(c[n], 0.0f);
    mma_<DM, NC / 16, true, SPLIT>(c, A, b, Tile<DM>::LD);
#pragma unroll
    for (int n = 0; n < NC / 16; n++) wmma::store_matrix_sync(s + n * 16, c[n], SLD_OF(NC), wmma::mem_row_major);
}
// ... with the 16 rows read from shared memory (row-major at a, stride LD)
template <int DM, bool SPLIT, int NC = ROWS>
static __device__ __forceinline__ void scores_rows_(float *s, const float *a, const float *b) {
    scores_<DM, SPLIT, NC>(s, ASmem{a, Tile<DM>::LD}, b);
}

// acc[n] (16,16) += P (16,KR at p, stride SLD_OF(KR)) · X[:, 16n .. 16n+16) (X (KR,DM) row-major at x, stride LD)
template <int DM, bool SPLIT, int KR = ROWS>
static __device__ __forceinline__ void accumulate_(FragC *acc, const float *p, const float *x) {
    mma_<KR, DM / 16, false, SPLIT>(acc, ASmem{p, SLD_OF(KR)}, x, Tile<DM>::LD);
}

// dq holds its queries and their dout in registers (two tiles of shared memory fewer) for TF32 operands up to
// 64 wide; 3xTF32 or wider rows would take too many registers
template <int DM, bool SPLIT>
struct DqInRegs {
    static constexpr bool value = !SPLIT && DM <= 64;
};

// Blocks per SM the kernels ask the compiler to fit in registers (__launch_bounds__'s second argument): at
// DM <= 64, shared memory fits 4 forward blocks and 3 dq and dk/dv blocks (TF32; dk/dv in 3xTF32 too), and capping
// registers to match (128 and 170 a thread) measured the forward 12% faster on an H200 (the kernels are
// latency-bound: more warps hide more of it); the others keep the compiler's choice (3xTF32 and DM 128 need
// their registers).
template <int DM, bool SPLIT>
struct MinBlocks {
    static constexpr int fwd = !SPLIT && DM <= 64 ? 4 : 1, dq = !SPLIT && DM <= 64 ? 3 : 1, dkdv = DM <= 64 ? 3 : 1;
};

// the forward holds its queries in registers (frees a tile of shared memory: more blocks per SM) unless that
// takes too many registers (3xTF32's two parts of 128-wide rows)
template <int DM, bool SPLIT>
struct QInRegs {
    static constexpr bool value = !(SPLIT && DM > 64);
};

// rows [r0, r0 + NR) of a (T,D) matrix into s (NR, LD), zero-padded past T and past D
template <int DM, int NR = ROWS>
static __device__ void load_tile_(float *s, const float *src, int r0, int T, int D) {
    constexpr int LD = Tile<DM>::LD;
    if (D % 4 == 0) {  // rows of whole float4s (src's rows start 16-byte aligned: heads are T·D floats apart)
        for (int i = threadIdx.x; i < NR * DM / 4; i += blockDim.x) {
            int r = i / (DM / 4), d = 4 * (i % (DM / 4));
            float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (r0 + r < T && d < D) x = *(const float4 *)(src + (size_t)(r0 + r) * D + d);
            *(float4 *)(s + r * LD + d) = x;
        }
        return;
    }
    for (int i = threadIdx.x; i < NR * DM; i += blockDim.x) {
        int r = i / DM, d = i % DM;
        s[r * LD + d] = (r0 + r < T && d < D) ? src[(size_t)(r0 + r) * D + d] : 0.0f;
    }
}

// rows of a (64, LD) staged tile times `mul` into dst (T,D) from row r0 (rows past T and columns past D dropped)
template <int DM>
static __device__ void store_tile_(float *dst, const float *s, float mul, int r0, int T, int D) {
    constexpr int LD = Tile<DM>::LD;
    for (int i = threadIdx.x; i < ROWS * DM; i += blockDim.x) {
        int r = i / DM, d = i % DM;
        if (r0 + r < T && d < D) dst[(size_t)(r0 + r) * D + d] = s[r * LD + d] * mul;
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

// the logit of a visible pair from its dot product q_i·k_j, in nn/attention.c's order of operations
static __device__ __forceinline__ float logit_(const HeadOpts_ &ho, float dot, int i, int j, float Fi, float Fj) {
    float x = dot * ho.scale;
    if (ho.slope != 0.0f) x -= ho.slope * (float)(i - j);
    if (ho.F) x += Fi - Fj;
    return x;
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
// The row, within its 16x16 tile, of each element of this lane's accumulator fragment: wmma leaves the layout
// unspecified, so it is learnt by loading a tile of row numbers (tmp: a (16, ld) float scratch of the warp's own,
// overwritten). Every accumulator fragment of the kernel has this layout.
static __device__ __forceinline__ void row_map_(FragC &map, float *tmp, int ld) {
    int lane = threadIdx.x & 31;
    for (int x = lane; x < 256; x += 32) tmp[(x >> 4) * ld + (x & 15)] = (float)(x >> 4);
    __syncwarp();
    wmma::load_matrix_sync(map, tmp, ld, wmma::mem_row_major);
    __syncwarp();
}

// forward: grid (B*NH, ceil(T/64)) (heads on x: gridDim.y stops at 65535), 128 threads. Shared: K, V tiles
// (64, LD) (and Q's without QREG), the scores (64, SLD), F of the key tile and each row's rescaling factor. The
// output accumulates in register fragments; when the running maximum grows, each element is rescaled by its
// row's factor, found through row_map_ (wmma does not say which lane holds which element). The running sum l is
// of the softmax weights p; P·V takes w = p·exp(-decay (i-j)) (nn/attention.c's "second accumulator").
template <int DM, bool SPLIT>
__global__ void __launch_bounds__(WARPS * 32, (MinBlocks<DM, SPLIT>::fwd)) attn_fwd_kernel(float *out, float *lse, const float *q, const float *k,
                                                             const float *v, const GpuAttnOpts o, int NH, int T,
                                                             int D) {
    constexpr int LD = Tile<DM>::LD, TF = Tile<DM>::FLOATS;
    constexpr bool QREG = QInRegs<DM, SPLIT>::value;
    GPU_DYNAMIC_SMEM(float, sm);
    float *ks = sm, *vs = ks + TF, *ss = vs + TF, *fs = ss + ROWS * SLD, *cs = fs + ROWS;
    float *qs = cs + ROWS;  // without QREG
    size_t head = (size_t)blockIdx.x * T * D;
    HeadOpts_ ho = head_opts_(o, NH, T);
    // the last query blocks see the most keys: they go first, so the grid's tail is short blocks
    int q0 = (gridDim.y - 1 - blockIdx.y) * ROWS, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r = warp * 16 + (lane >> 1), half = lane & 1, i = q0 + r;  // this lane's row and column parity
    float Fi = ho.F && i < T ? ho.F[i] : 0.0f;
    float *sw = ss + warp * 16 * SLD, *srow = ss + r * SLD, *cw = cs + warp * 16;
    FragC rmap;
    row_map_(rmap, sw, SLD);
    ARegs<DM, SPLIT> qa;  // with QREG: this warp's 16 queries, staged through K's tile
    load_tile_<DM>(QREG ? ks : qs, q + head, q0, T, D);
    if (QREG) {
        __syncthreads();
        qa.load(ks + warp * 16 * LD, LD);
    }
    FragC of[DM / 16];  // this warp's 16 rows of the output, unnormalised
#pragma unroll
    for (int n = 0; n < DM / 16; n++) wmma::fill_fragment(of[n], 0.0f);
    float mx = -INFINITY, l = 0.0f;
    int k_end = min(T, q0 + ROWS);  // causal: no key after the block's last query
    for (int k0 = key_begin_(ho, q0); k0 < k_end; k0 += ROWS) {
        __syncthreads();  // the previous tile is used up (and, the first time, Q is in place)
        load_tile_<DM>(ks, k + head, k0, T, D);
        load_tile_<DM>(vs, v + head, k0, T, D);
        load_f_(fs, ho, k0, T);
        __syncthreads();
        if (QREG) scores_<DM, SPLIT>(sw, qa, ks);
        else scores_rows_<DM, SPLIT>(sw, qs + warp * 16 * LD, ks);
        __syncwarp();
        float tmax = -INFINITY;
        for (int c = half; c < ROWS; c += 2) {
            int j = k0 + c;
            float s = (i < T && visible_(ho, i, j)) ? logit_(ho, srow[c], i, j, Fi, fs[c]) : -INFINITY;
            srow[c] = s;
            tmax = fmaxf(tmax, s);
        }
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
        float mnew = fmaxf(mx, tmax), corr = mnew == -INFINITY ? 1.0f : expf(mx - mnew), psum = 0.0f;
        for (int c = half; c < ROWS; c += 2) {
            float p = srow[c] == -INFINITY ? 0.0f : expf(srow[c] - mnew);
            srow[c] = p;
            psum += p;
        }
        if (ho.decay != 0.0f) {  // P·V takes w = p E; the sum above stays the softmax's
            for (int c = half; c < ROWS; c += 2)
                if (srow[c] != 0.0f) srow[c] *= decay_(ho, i, k0 + c);
        }
        psum += __shfl_xor_sync(0xffffffffu, psum, 1);
        l = l * corr + psum;
        mx = mnew;
        if (!half) cw[lane >> 1] = corr;
        __syncwarp();
        // O = O corr (each element by its row's factor) + P V
#pragma unroll
        for (int n = 0; n < DM / 16; n++)
#pragma unroll
            for (int e = 0; e < of[n].num_elements; e++) of[n].x[e] *= cw[(int)rmap.x[e]];
        accumulate_<DM, SPLIT>(of, sw, vs);
        __syncwarp();  // every lane's reads of the scores and factors precede the next tile's writes
    }
    __syncthreads();  // every warp is done with K's tile: it stages the output
#pragma unroll
    for (int n = 0; n < DM / 16; n++)
        wmma::store_matrix_sync(ks + warp * 16 * LD + n * 16, of[n], LD, wmma::mem_row_major);
    __syncwarp();
    if (i < T) {
        float inv = 1.0f / l;
        for (int d = half; d < D; d += 2) out[head + (size_t)i * D + d] = ks[r * LD + d] * inv;
        if (!half) lse[(size_t)blockIdx.x * T + i] = mx + logf(l);
    }
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

// ds_ij = p_ij (E_ij dout_i·v_j - delta_i) (E the post-softmax factor, 1 without decay); dq_i = scale · sum_j
// ds_ij k_j, and with F the row sums dF_i = sum_j ds_ij WRITTEN to dfgate (the dk/dv pass subtracts the column
// sums). Grid and threads as the forward; shared: Q, dO, K, V tiles, the scores and dout·v^T (64, SLD) each, F of
// the key tile. dq accumulates in register fragments (no rescaling needed); each lane sums its half of its row's
// ds in order.
template <int DM, bool SPLIT>
__global__ void __launch_bounds__(WARPS * 32, (MinBlocks<DM, SPLIT>::dq)) attn_dq_kernel(float *dq, float *dfgate, const float *dout,
                                                            const float *lse, const float *delta, const float *q,
                                                            const float *k, const float *v, const GpuAttnOpts o,
                                                            int NH, int T, int D) {
    constexpr int LD = Tile<DM>::LD, TF = Tile<DM>::FLOATS;
    constexpr bool QREG = DqInRegs<DM, SPLIT>::value;
    GPU_DYNAMIC_SMEM(float, sm);
    float *ks = sm, *vs = ks + TF, *ss = vs + TF, *ps = ss + ROWS * SLD, *fs = ps + ROWS * SLD;
    float *qs = fs + ROWS, *dos = qs + TF;  // without QREG
    size_t head = (size_t)blockIdx.x * T * D, hrow = (size_t)blockIdx.x * T;
    HeadOpts_ ho = head_opts_(o, NH, T);
    int q0 = (gridDim.y - 1 - blockIdx.y) * ROWS, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r = warp * 16 + (lane >> 1), half = lane & 1, i = q0 + r;
    float li = i < T ? lse[hrow + i] : 0.0f, di = i < T ? delta[hrow + i] : 0.0f;
    float Fi = ho.F && i < T ? ho.F[i] : 0.0f, dFi = 0.0f;
    ARegs<DM, SPLIT> qa, da;  // with QREG: this warp's queries and their dout, staged through K's and V's tiles
    load_tile_<DM>(QREG ? ks : qs, q + head, q0, T, D);
    load_tile_<DM>(QREG ? vs : dos, dout + head, q0, T, D);
    if (QREG) {
        __syncthreads();
        qa.load(ks + warp * 16 * LD, LD);
        da.load(vs + warp * 16 * LD, LD);
    }
    FragC acc[DM / 16];
#pragma unroll
    for (int n = 0; n < DM / 16; n++) wmma::fill_fragment(acc[n], 0.0f);
    int k_end = min(T, q0 + ROWS);
    for (int k0 = key_begin_(ho, q0); k0 < k_end; k0 += ROWS) {
        __syncthreads();
        load_tile_<DM>(ks, k + head, k0, T, D);
        load_tile_<DM>(vs, v + head, k0, T, D);
        load_f_(fs, ho, k0, T);
        __syncthreads();
        float *sw = ss + warp * 16 * SLD, *pw = ps + warp * 16 * SLD, *srow = ss + r * SLD, *prow = ps + r * SLD;
        if (QREG) {
            scores_<DM, SPLIT>(sw, qa, ks);  // q k^T
            scores_<DM, SPLIT>(pw, da, vs);  // dout v^T
        } else {
            scores_rows_<DM, SPLIT>(sw, qs + warp * 16 * LD, ks);
            scores_rows_<DM, SPLIT>(pw, dos + warp * 16 * LD, vs);
        }
        __syncwarp();
        for (int c = half; c < ROWS; c += 2) {
            int j = k0 + c;
            float ds = 0.0f;
            if (i < T && visible_(ho, i, j)) {
                float p = expf(logit_(ho, srow[c], i, j, Fi, fs[c]) - li);
                ds = p * (decay_(ho, i, j) * prow[c] - di);
            }
            srow[c] = ds;
            dFi += ds;
        }
        __syncwarp();
        accumulate_<DM, SPLIT>(acc, sw, ks);
    }
    if (dfgate) {  // the row's two halves, then one lane writes
        dFi += __shfl_xor_sync(0xffffffffu, dFi, 1);
        if (i < T && !half) dfgate[hrow + i] = dFi;
    }
    __syncthreads();  // every warp is done with K's tile: it stages the result
#pragma unroll
    for (int n = 0; n < DM / 16; n++)
        wmma::store_matrix_sync(ks + warp * 16 * LD + n * 16, acc[n], LD, wmma::mem_row_major);
    __syncthreads();
    store_tile_<DM>(dq + head, ks, ho.scale, q0, T, D);
}

// dv_j = sum_i w_ij dout_i, dk_j = scale · sum_i ds_ij q_i over the queries i that see key j, and with F
// dfgate_j -= sum_i ds_ij (after attn_dq_kernel wrote the row sums). Grid (B*NH, ceil(T/64)): a block owns 64 keys
// and walks the query tiles of QT from its first key on (up to the window's end). Shared: K, V tiles (64, LD), Q,
// dO tiles (QT, LD), the transposed scores and v·dout^T (64, SLD_OF(QT)) each, and the query tile's lse, delta
// and F. Query tiles of 64 held it to 2 blocks per SM by shared memory (105 KB at D 64); QT 32 fits 3 (69 KB).
// (Its keys and values in registers, as dq holds its queries, took 254 registers a thread at D 64, with spills.)
template <int DM, bool SPLIT>
__global__ void __launch_bounds__(WARPS * 32, (MinBlocks<DM, SPLIT>::dkdv)) attn_dkdv_kernel(float *dk, float *dv, float *dfgate, const float *dout,
                                                              const float *lse, const float *delta, const float *q,
                                                              const float *k, const float *v, const GpuAttnOpts o,
                                                              int NH, int T, int D) {
    constexpr int LD = Tile<DM>::LD, TF = Tile<DM>::FLOATS, QLD = SLD_OF(QT);
    GPU_DYNAMIC_SMEM(float, sm);
    float *ks = sm, *vs = ks + TF, *qs = vs + TF, *dos = qs + QT * LD, *ss = dos + QT * LD, *ps = ss + ROWS * QLD;
    float *ls = ps + ROWS * QLD, *dls = ls + QT, *fs = dls + QT;
    size_t head = (size_t)blockIdx.x * T * D, hrow = (size_t)blockIdx.x * T;
    HeadOpts_ ho = head_opts_(o, NH, T);
    int j0 = blockIdx.y * ROWS, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r = lane >> 1, half = lane & 1, j = j0 + warp * 16 + r;  // this lane's key
    float Fj = ho.F && j < T ? ho.F[j] : 0.0f, dFj = 0.0f;
    load_tile_<DM>(ks, k + head, j0, T, D);
    load_tile_<DM>(vs, v + head, j0, T, D);
    FragC dka[DM / 16], dva[DM / 16];
#pragma unroll
    for (int n = 0; n < DM / 16; n++) {
        wmma::fill_fragment(dka[n], 0.0f);
        wmma::fill_fragment(dva[n], 0.0f);
    }
    int i_end = query_end_(ho, j0, T);
    for (int i0 = j0; i0 < i_end; i0 += QT) {  // causal: no query before the block's first key
        __syncthreads();
        load_tile_<DM, QT>(qs, q + head, i0, T, D);
        load_tile_<DM, QT>(dos, dout + head, i0, T, D);
        for (int x = threadIdx.x; x < QT; x += blockDim.x) {
            ls[x] = i0 + x < T ? lse[hrow + i0 + x] : 0.0f;
            dls[x] = i0 + x < T ? delta[hrow + i0 + x] : 0.0f;
        }
        load_f_(fs, ho, i0, T, QT);
        __syncthreads();
        float *sw = ss + warp * 16 * QLD, *pw = ps + warp * 16 * QLD;
        scores_rows_<DM, SPLIT, QT>(sw, ks + warp * 16 * LD, qs);   // (k q^T): row = key, column = query
        scores_rows_<DM, SPLIT, QT>(pw, vs + warp * 16 * LD, dos);  // (v dout^T)
        __syncwarp();
        for (int c = half; c < QT; c += 2) {
            int i = i0 + c;
            float w = 0.0f, ds = 0.0f;
            if (i < T && visible_(ho, i, j)) {
                float p = expf(logit_(ho, sw[r * QLD + c], i, j, fs[c], Fj) - ls[c]), E = decay_(ho, i, j);
                w = p * E;
                ds = p * (E * pw[r * QLD + c] - dls[c]);
            }
            sw[r * QLD + c] = w;
            pw[r * QLD + c] = ds;
            dFj += ds;
        }
        __syncwarp();
        accumulate_<DM, SPLIT, QT>(dva, sw, dos);  // w^T dout
        accumulate_<DM, SPLIT, QT>(dka, pw, qs);   // ds^T q
    }
    if (dfgate) {
        dFj += __shfl_xor_sync(0xffffffffu, dFj, 1);
        if (j < T && !half) dfgate[hrow + j] -= dFj;
    }
    __syncthreads();  // every warp is done with the tiles: K and V stage the results
#pragma unroll
    for (int n = 0; n < DM / 16; n++) {
        wmma::store_matrix_sync(ks + warp * 16 * LD + n * 16, dka[n], LD, wmma::mem_row_major);
        wmma::store_matrix_sync(vs + warp * 16 * LD + n * 16, dva[n], LD, wmma::mem_row_major);
    }
    __syncthreads();
    store_tile_<DM>(dk + head, ks, ho.scale, j0, T, D);
    store_tile_<DM>(dv + head, vs, 1.0f, j0, T, D);
}

// ----------------------------------------------------------------------------
// launches

int gpu_attn_supports(int D) { return D >= 1 && D <= GPU_ATTN_MAX_D; }

template <int DM, bool SPLIT>
static size_t fwd_smem_(void) {
    return ((QInRegs<DM, SPLIT>::value ? 2 : 3) * (size_t)Tile<DM>::FLOATS + ROWS * SLD + 2 * ROWS) * sizeof(float);
}
template <int DM, bool SPLIT>
static size_t dq_smem_(void) {
    return ((DqInRegs<DM, SPLIT>::value ? 2 : 4) * (size_t)Tile<DM>::FLOATS + 2 * ROWS * SLD + ROWS) * sizeof(float);
}
template <int DM, bool SPLIT>
static size_t dkdv_smem_(void) {
    return (2 * (size_t)Tile<DM>::FLOATS + 2 * QT * Tile<DM>::LD + 2 * ROWS * SLD_OF(QT) + 3 * QT) * sizeof(float);
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
