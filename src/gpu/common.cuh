/*
 * What every CUDA file of the backend shares: error checks, the one cuBLAS handle and the matmul precision.
 * One device and one stream (the default) per process: kernels run in launch order, so no file needs events.
 */
#ifndef SEQ_GPU_COMMON_CUH
#define SEQ_GPU_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "core/err.h"
}

// a failed runtime or cuBLAS call inside a step stops the program with the call and where (gpu/gpu.h says why)
void gpu_fail_(const char *what, const char *detail, const char *file, int line);
#define CUDA_CHECK(call)                                                                                   \
    do {                                                                                                   \
        cudaError_t err_ = (call);                                                                         \
        if (err_ != cudaSuccess) gpu_fail_(#call, cudaGetErrorString(err_), __FILE__, __LINE__);           \
    } while (0)
#define CUBLAS_CHECK(call)                                                                                 \
    do {                                                                                                   \
        cublasStatus_t st_ = (call);                                                                       \
        if (st_ != CUBLAS_STATUS_SUCCESS) gpu_fail_(#call, cublasGetStatusString(st_), __FILE__, __LINE__); \
    } while (0)
// after a kernel launch: a bad launch configuration shows here, a fault at the next synchronising call
#define KERNEL_CHECK() CUDA_CHECK(cudaGetLastError())

// the process's cuBLAS handle (created by gpu_open) with its math mode set from run.precision
cublasHandle_t gpu_blas(void);

// run.precision as the kernels see it (set by gpu_open): how the backend's own tensor-core kernels (attention)
// multiply. GPU_FP32: fp32 accuracy, each fp32 operand split into two TF32 parts and three products summed
// (3xTF32: about fp32's rounding, on the tensor cores); GPU_TF32: operands rounded to TF32 (10-bit mantissas);
// GPU_BF16: bfloat16 operands. Accumulation is fp32 in every mode.
typedef enum { GPU_FP32, GPU_TF32, GPU_BF16 } GpuMath;
GpuMath gpu_math(void);

// dynamic shared memory of a kernel launched with <<<grid, block, bytes>>> (the emulator defines its own)
#ifndef SEQ_GPU_EMU
#define GPU_DYNAMIC_SMEM(type, name) \
    extern __shared__ __align__(128) unsigned char name##_raw_[]; \
    type *name = (type *)name##_raw_
#endif

// SEQ_PROFILE=1 (gpu/profile.cu): GPU time per op name, from CUDA events around each GPU_TIMED call. Time only
// leaf calls (a call inside another timed one would be counted twice). gpu_prof_flush reads the intervals
// recorded so far (it waits for them: call it where the host waits for the GPU anyway); gpu_prof_print prints
// the table to stderr (gpu_close does). GPU_TIMED_FLOPS also counts the call's floating-point operations (its
// matrix products' 2 m n k, triangles halved; 0 = not counted), and the table gains their rate.
int gpu_prof_begin(const char *name, double flops);  // -1 when not profiling
void gpu_prof_end(int slot);
void gpu_prof_flush(void);
void gpu_prof_print(void);
#define GPU_TIMED_FLOPS(name, flops, ...)  /* the call: variadic, for a launch's <<<grid, block>>> commas */ \
    do {                                                                                                  \
        int prof_slot_ = gpu_prof_begin(name, flops);                                                     \
        __VA_ARGS__;                                                                                      \
        gpu_prof_end(prof_slot_);                                                                         \
    } while (0)
#define GPU_TIMED(name, ...) GPU_TIMED_FLOPS(name, 0.0, __VA_ARGS__)

// a float as a tensor element (float or bf16, rounded to nearest), and back
template <typename E>
static __device__ __forceinline__ E to_elt_(float x);
template <>
__device__ __forceinline__ float to_elt_<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 to_elt_<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
static __device__ __forceinline__ float to_f32_(float x) { return x; }
static __device__ __forceinline__ float to_f32_(__nv_bfloat16 x) { return __bfloat162float(x); }
// two bf16 as one 32-bit word, lo in the low half (the order of two consecutive elements in memory); of two
// floats, each rounded to nearest
static __device__ __forceinline__ unsigned pack_bf16_(__nv_bfloat16 lo, __nv_bfloat16 hi) {
    return (unsigned)__bfloat16_as_ushort(lo) | (unsigned)__bfloat16_as_ushort(hi) << 16;
}
static __device__ __forceinline__ unsigned pack_f32_(float lo, float hi) {
    return pack_bf16_(__float2bfloat16(lo), __float2bfloat16(hi));
}

// V consecutive elements (floats or bf16) from p into v as floats; V 4: one 16-byte (8-byte) load, p aligned so.
// Memory-bound passes move 16 bytes a thread where they can: a scalar thread per element reached about half the
// memory's bandwidth.
template <int V>
static __device__ __forceinline__ void load_elts_(float *v, const float *p) {
    if (V == 4) {
        float4 x = *(const float4 *)p;
        v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
    } else
        for (int e = 0; e < V; e++) v[e] = p[e];
}
template <int V>
static __device__ __forceinline__ void load_elts_(float *v, const __nv_bfloat16 *p) {
    if (V == 4) {
        uint2 x = *(const uint2 *)p;
        v[0] = __uint_as_float(x.x << 16), v[1] = __uint_as_float(x.x & 0xffff0000u);
        v[2] = __uint_as_float(x.y << 16), v[3] = __uint_as_float(x.y & 0xffff0000u);
    } else
        for (int e = 0; e < V; e++) v[e] = __bfloat162float(p[e]);
}
// v (V floats) to p as floats or bf16 (rounded to nearest); V 4: one 16-byte (8-byte) store
template <int V>
static __device__ __forceinline__ void store_elts_(float *p, const float *v) {
    if (V == 4) *(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
    else
        for (int e = 0; e < V; e++) p[e] = v[e];
}
template <int V>
static __device__ __forceinline__ void store_elts_(__nv_bfloat16 *p, const float *v) {
    if (V == 4) *(uint2 *)p = make_uint2(pack_f32_(v[0], v[1]), pack_f32_(v[2], v[3]));
    else
        for (int e = 0; e < V; e++) p[e] = __float2bfloat16(v[e]);
}

// the rotation of one RoPE pair (x0, x1) by the angle whose cosine and sine are c, s, in place (nn/rotary.c's
// products, in this order: the GPU's rotations give the CPU's bits up to the compiler's fused multiply-adds)
static __device__ __forceinline__ void rope_pair_(float &x0, float &x1, float c, float s) {
    float y0 = x0 * c - x1 * s, y1 = x0 * s + x1 * c;
    x0 = y0, x1 = y1;
}

// nn/fastmath.h's fast_sigmoidf_ and fast_silu_grad_ on the device: only e^-|x| is taken, 1 / (1 + e) for x >= 0,
// e / (1 + e) below; silu' = s (1 + x (1 - s))
static __device__ __forceinline__ float sigmoid_fast_(float x) {
    float e = expf(-fabsf(x));
    return (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}
static __device__ __forceinline__ float silu_grad_fast_(float x) {
    float s = sigmoid_fast_(x);
    return s * (1.0f + x * (1.0f - s));
}

// 2^x on the special-function unit (ex2.approx: the instruction __expf runs after its multiply by log2 e; the
// emulator's exp2f): a kernel that folds that multiply into a scale it applies anyway saves one a value
static __device__ __forceinline__ float exp2_fast_(float x) {
#ifdef SEQ_GPU_EMU
    return exp2f(x);
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
#endif
}

// An activation tensor as the ops pass it: p points at floats, or at bfloat16s (__nv_bfloat16) when bf16 is set
// (run.precision bf16 only: there the producers of the matmuls' inputs -- the norms, the MLP's activation and its
// gradient, the attention's output rows and dqkv, the cross-entropy's dlogits -- write bf16, what the matmul
// multiplies, so that no matmul converts them; and the matmuls write bf16 what an elementwise pass reads next --
// the MLP's fc output and the activation's gradient, the qkv projection -- as autocast keeps them). ld: elements
// from one row to the next (0: the row's length, rows packed).
typedef struct GpuAct {
    void *p;
    int bf16;
    int ld;
} GpuAct;
static inline GpuAct gpu_f32(const float *p) { return GpuAct{(void *)p, 0, 0}; }
static inline GpuAct gpu_act(void *p, int bf16) { return GpuAct{p, bf16, 0}; }

// warp and block reductions in a fixed order (a tree over the lanes, then over the warps)
static __device__ __forceinline__ float warp_sum_(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float warp_max_(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// sum (max) over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread gets the result
static __device__ __forceinline__ float block_sum_(float v, float *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum_(v);
    __syncthreads();  // sh may still be read by a previous call
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return warp_sum_(v);
}
static __device__ __forceinline__ float block_max_(float v, float *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max_(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return warp_max_(v);
}

static inline int aligned16_(const void *p) { return (uintptr_t)p % 16 == 0; }  // NULL too

// a device work buffer grown on demand, one per op family that needs one (gpu/devbuf.cu): with one stream, a later
// call reuses it only after the earlier call's kernels ran
typedef struct GpuWork {
    float *p;
    size_t cap;  // floats
} GpuWork;
// w's buffer with room for n floats (reallocated when smaller)
float *gpu_work_floats(GpuWork *w, size_t n);

// A buffer's slots, handed out in order from base (NULL: only counted), each 256-byte aligned (float4 access by the
// kernels); NULL for an empty one (what the options do not use). The mixers lay out their saved activations and
// their scratch this way: gpu_take_slots returns the floats the slots take, what act_size / scratch_size report.
typedef struct GpuSlot {
    float **p;
    size_t n;  // floats
} GpuSlot;
static inline size_t gpu_take_slots(const GpuSlot *slots, size_t k, float *base) {
    size_t n = 0;
    for (size_t i = 0; i < k; i++) {
        *slots[i].p = base && slots[i].n ? base + n : NULL;
        n += (slots[i].n + 63) & ~(size_t)63;
    }
    return n;
}

static inline unsigned gpu_blocks(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }

// kernel over n elements, a thread each in blocks of 256 (the mixers' elementwise passes), then the launch's check.
// The emulator rewrites the launches of .cu files only (tests/gpu/emu/cuda_runtime.h), so this header's is its call.
#ifdef SEQ_GPU_EMU
#define GPU_LAUNCH_(kernel, grid, block, ...) emu_launch(emu_cfg(grid, block), kernel, __VA_ARGS__)
#else
#define GPU_LAUNCH_(kernel, grid, block, ...) kernel<<<grid, block>>>(__VA_ARGS__)
#endif
#define GPU_LAUNCH(kernel, n, ...)                                                  \
    do {                                                                            \
        GPU_LAUNCH_(kernel, gpu_blocks((size_t)(n), 256), 256, __VA_ARGS__);        \
        KERNEL_CHECK();                                                             \
    } while (0)

#endif
