// What the chunked recurrence engines' kernels share (gpu/linrec*.cu, gpu/delta*.cu): the tile geometry, the
// carving of a kernel's dynamic shared memory and its limit, the token rows of a chunk and the staged loads of
// (B,T,H,W) rows, of a state's tiles and of a chunk's L x L matrix. D is an engine's dims struct (LinrecDims,
// DeltaDims): the fields B, T, H, Dk, Dv and chunk are all these read. Internal to those files.
#ifndef SEQ_GPU_CHUNK_KIT_CUH
#define SEQ_GPU_CHUNK_KIT_CUH

#include <stdint.h>

#include "gpu/common.cuh"
#include "gpu/mma.cuh"

#define CK_THREADS 256  // a block's threads (8 warps)
#define CK_TILE 32      // channels of a staged tile (key or value side), and a state tile's side
#define CK_LD 33        // floats (doubles) a staged row: 32 + 1, so a column's elements fall in distinct banks
// The chunk products' precision: the 3xTF32 split (about fp32's rounding) under every run.precision. Plain TF32
// operands under tf32 and bf16 are faster, but the decay parameters' gradients, sums over every token of
// q' (.) dq' - k (.) dk whose terms cancel, then lose digits to the operands' rounding, past the parity test's
// tolerance on an H100 (docs/gpu.md has the measurements).
#define CK_SPLIT true

// ----------------------------------------------------------------------------
// shapes

// the row of token t of (b,h) in a (B,T,H, ...) tensor
template <typename D>
static __host__ __device__ __forceinline__ size_t row_(const D &d, int b, int t, int h) {
    return ((size_t)b * d.T + t) * d.H + h;
}
template <typename D>
static __host__ __device__ __forceinline__ int nchunks_(const D &d) {
    return (d.T + d.chunk - 1) / d.chunk;
}
// the rows a chunk's staged tiles have: min(chunk, T)
template <typename D>
static __host__ __device__ __forceinline__ int lc_(const D &d) {
    return d.chunk < d.T ? d.chunk : d.T;
}
template <typename D>
static __host__ __device__ __forceinline__ int chunk_len_(const D &d, int ci) {
    int t0 = ci * d.chunk;
    return d.T - t0 < d.chunk ? d.T - t0 : d.chunk;
}
static __host__ __device__ __forceinline__ int ntiles_(int n) { return (n + CK_TILE - 1) / CK_TILE; }

// the floating-point operations of a kernel over all of d (SEQ_PROFILE's rates, GPU_TIMED_FLOPS): per token of
// every (b,h), a * Dk Dv + l * L Dk + v * L Dv with L the chunk (an L x L product over W channels is a triangle:
// L^2 W a chunk, 2 L^2 W / 2)
template <typename D>
static inline double chunk_flops_(const D &d, double a, double l, double v) {
    double L = lc_(d), Dk = d.Dk, Dv = d.Dv;
    return (double)d.B * d.H * d.T * (a * Dk * Dv + l * L * Dk + v * L * Dv);
}

// a kernel's dynamic shared memory handed out in order, 16-byte aligned; the host runs the same carving from 0 to
// size the launch
struct Carve_ {
    uintptr_t base;
    size_t off;
    template <typename T>
    __host__ __device__ T *take(size_t n) {
        off = (off + 15) & ~(size_t)15;
        T *p = (T *)(base + off);
        off += n * sizeof(T);
        return p;
    }
    // n staged rows of CK_LD floats
    __host__ __device__ float *rows(size_t n) { return take<float>(n * CK_LD); }
};

// a kernel's dynamic shared memory (bytes): the carving S::carve(cv, args..., &s) run from 0
template <typename S, typename... A>
static size_t smem_of_(A... args) {
    Carve_ cv = {0, 0};
    S s;
    return S::carve(cv, args..., &s);
}

// raises a kernel's dynamic shared memory limit above the default 48 KB where it needs more (an H100 takes 227 KB
// a block)
template <typename K>
static void smem_limit_(K kernel, size_t bytes) {
    if (bytes > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

// ----------------------------------------------------------------------------
// staged loads (every thread of the block)

// n elements staged: thread e's elements e, e + 256, ... as put(i, get(i)), get returning the (bounds-checked) value.
// The loads go out CK_BATCH at a time before any store, so a thread waits for one memory latency a batch rather than
// one an element: a kernel with few blocks (the state walks, one block per SM) is otherwise bound by that latency.
#define CK_BATCH 8
template <typename G, typename P>
static __device__ __forceinline__ void stage_(int n, G get, P put) {
    for (int e0 = threadIdx.x; e0 < n; e0 += CK_BATCH * CK_THREADS) {
        float r[CK_BATCH];
        #pragma unroll
        for (int u = 0; u < CK_BATCH; u++) {
            int e = e0 + u * CK_THREADS;
            r[u] = e < n ? get(e) : 0.0f;
        }
        #pragma unroll
        for (int u = 0; u < CK_BATCH; u++) {
            int e = e0 + u * CK_THREADS;
            if (e < n) put(e, r[u]);
        }
    }
}

// x (B,T,H,W) ACCUMULATED: the (L, 32) tile at channel c0 for tokens t0 .. += s (L rows of CK_LD), channels past W
// left; every thread, x's old values read in batches (stage_)
template <typename D>
static __device__ void add_rows_(float *x, const float *s, const D &d, int W, int b, int h, int t0, int L, int c0) {
    stage_(
        L * CK_TILE,
        [&](int e) {
            int i = e / CK_TILE, c = e % CK_TILE;
            return c0 + c < W ? x[row_(d, b, t0 + i, h) * W + c0 + c] : 0.0f;
        },
        [&](int e, float old) {
            int i = e / CK_TILE, c = e % CK_TILE;
            if (c0 + c < W) x[row_(d, b, t0 + i, h) * W + c0 + c] = old + s[i * CK_LD + c];
        });
}

// s (LC rows of CK_LD) WRITTEN: mul times the (L, 32) tile of x (B,T,H,W) at channel c0 for tokens t0 ..; zeros past
// L and W, so the products over it need no bounds
template <typename D>
static __device__ void load_tile_(float *s, const float *x, const D &d, int W, int b, int h, int t0, int L, int LC,
                                  int c0, float mul) {
    stage_(
        LC * CK_TILE,
        [&](int e) {
            int i = e / CK_TILE, c = e % CK_TILE;
            return i < L && c0 + c < W ? mul * x[row_(d, b, t0 + i, h) * W + c0 + c] : 0.0f;
        },
        [&](int e, float v) { s[(e / CK_TILE) * CK_LD + e % CK_TILE] = v; });
}

// s (32 rows of CK_LD) WRITTEN: the (32, 32) tile at (c0, v0) of the state st (Dk, Dv), zeros outside
template <typename D>
static __device__ void load_state_(float *s, const float *st, const D &d, int c0, int v0) {
    stage_(
        CK_TILE * CK_TILE,
        [&](int e) {
            int r = e / CK_TILE, x = e % CK_TILE;
            return c0 + r < d.Dk && v0 + x < d.Dv ? st[(size_t)(c0 + r) * d.Dv + v0 + x] : 0.0f;
        },
        [&](int e, float v) { s[(e / CK_TILE) * CK_LD + e % CK_TILE] = v; });
}

// s (LC, LC) WRITTEN: one chunk's (LC, LC) matrix of the scratch
static __device__ void load_ll_(float *s, const float *src, int LC) {
    stage_(LC * LC, [&](int e) { return src[e]; }, [&](int e, float v) { s[e] = v; });
}

// s (LCP rows of ld) WRITTEN: one chunk's (LC, LC) matrix of the scratch, zero-padded to LCP x LCP (the warp
// products' k runs in steps of 8 and m in 16)
static __device__ void load_ll_pad_(float *s, const float *src, int LC, int LCP, int ld) {
    stage_(
        LCP * LCP,
        [&](int e) {
            int i = e / LCP, j = e % LCP;
            return i < LC && j < LC ? src[i * LC + j] : 0.0f;
        },
        [&](int e, float v) { s[(e / LCP) * ld + e % LCP] = v; });
}
// LC rounded up to the warp products' 16 rows
template <typename D>
static __host__ __device__ __forceinline__ int lcp_(const D &d) {
    return (lc_(d) + 15) & ~15;
}

// ----------------------------------------------------------------------------
// warp products on the tensor cores (gpu/mma.cuh's TF32 policy: SPLIT, the 3xTF32 split, for fp32; plain TF32 for
// tf32 and bf16) over fp32 tiles in shared memory

// acc[n] (16 x 8), n < NS, += X (16, K) Y[:, 8n .. 8n+8): X's element (i, k) at x[i * xld + k], or x[k * xld + i]
// with XT (X read transposed); Y's (k, n) at y[k * yld + n], or y[n * yld + k] with YT. K a multiple of 8; every
// lane of the warp calls it (mma.sync)
template <bool SPLIT, int NS, bool XT, bool YT>
static __device__ __forceinline__ void warp_mma_(float (*acc)[4], const float *x, int xld, const float *y, int yld,
                                                 int K) {
    typedef MathTf32<SPLIT> M;
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    for (int k0 = 0; k0 < K; k0 += 8) {
        typename M::A a;
        a.hi[0] = XT ? x[(k0 + t) * xld + g] : x[g * xld + k0 + t];
        a.hi[1] = XT ? x[(k0 + t) * xld + g + 8] : x[(g + 8) * xld + k0 + t];
        a.hi[2] = XT ? x[(k0 + t + 4) * xld + g] : x[g * xld + k0 + t + 4];
        a.hi[3] = XT ? x[(k0 + t + 4) * xld + g + 8] : x[(g + 8) * xld + k0 + t + 4];
        M::template round_<4>(a.hi, a.lo);
#pragma unroll
        for (int n = 0; n < NS; n++) {
            typename M::B b;
            b.hi[0] = YT ? y[(8 * n + g) * yld + k0 + t] : y[(k0 + t) * yld + 8 * n + g];
            b.hi[1] = YT ? y[(8 * n + g) * yld + k0 + t + 4] : y[(k0 + t + 4) * yld + 8 * n + g];
            M::template round_<2>(b.hi, b.lo);
            M::mma(acc[n], a, b);
        }
    }
}

// old[n][r] = out[idx(n, r)] for the NS x 4 elements of a warp product's accumulator whose idx(n, r) >= 0 (else 0):
// the old values of an accumulated result, read before any of them is written, so their latencies overlap (a
// read after a store to the same array cannot be moved ahead of it)
template <int NS, typename I>
static __device__ __forceinline__ void frag_gather_(float (*old)[4], const float *out, I idx) {
    #pragma unroll
    for (int n = 0; n < NS; n++)
        #pragma unroll
        for (int r = 0; r < 4; r++) {
            long long o = idx(n, r);
            old[n][r] = o >= 0 ? out[o] : 0.0f;
        }
}

// the (row, column) of element r (0..3) of slice n of a warp product's accumulator, within its (16, 8 NS) block
static __device__ __forceinline__ int frag_row_(int r) { return ((threadIdx.x & 31) >> 2) + (r >> 1) * 8; }
static __device__ __forceinline__ int frag_col_(int n, int r) { return 8 * n + 2 * (threadIdx.x & 3) + (r & 1); }

#endif
