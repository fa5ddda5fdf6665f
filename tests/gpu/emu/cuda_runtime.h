/*
 * The CUDA runtime emulated on the CPU, so the GPU backend's kernels (the CUDA files of src/gpu/) run where no GPU is: the suite
 * builds them with g++ against this header and tests/gpu/emu/cublas_v2.h and runs the GPU-vs-CPU parity test on
 * them (tests/gpu/run.sh). It checks the kernels' indexing, tiling, barriers and math, not the GPU's own
 * behaviour (real float rounding of the device's libm, TF32, memory faults, launch limits): that needs a GPU.
 *
 * How: a launch `k<<<grid, block[, smem]>>>(args)` is rewritten to `emu_launch(emu_cfg(grid, block[, smem]), k,
 * args)` (the Makefile's perl line). The blocks of a grid run one after another; the threads of a block are fibers on one OS thread
 * (started by makecontext/setcontext, switched by _setjmp/_longjmp, which makes no system call: the Makefile
 * compiles this with -U_FORTIFY_SOURCE, whose longjmp check refuses a jump to another stack), each run until it
 * finishes or waits at a barrier: __syncthreads waits for every live thread of the block, a warp shuffle for
 * every live thread of its warp (two waits: write, then read). __shared__ arrays are function-level statics,
 * shared by the fibers of the block that runs. Device memory is host memory.
 */
#ifndef SEQ_GPU_EMU_CUDA_RUNTIME_H
#define SEQ_GPU_EMU_CUDA_RUNTIME_H

#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>

#include <functional>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

struct alignas(16) float4_emu_ {
    float v[4];
};
struct alignas(16) float4 {
    float x, y, z, w;
};
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
struct alignas(8) uint2 {
    unsigned x, y;
};
static inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
static inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

inline uint3 threadIdx, blockIdx;  // of the fiber that runs
inline dim3 blockDim, gridDim;

static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
// the fast exponential: the GPU's ex2.approx of x·log2(e) (here an exact exp2f of the same product)
// (glibc declares a __expf of its own, not exported: the name is redirected)
static inline float emu_expf_(float x) { return exp2f(x * 1.4426950408889634f); }
#define __expf(x) emu_expf_(x)

// ----------------------------------------------------------------------------
// fibers

enum { EMU_RUN, EMU_WAIT_WARP, EMU_WAIT_BLOCK, EMU_DONE };
#define EMU_STACK (256 * 1024)
#define EMU_MAX_THREADS 1024

struct EmuFiber {
    ucontext_t ctx;  // the start
    jmp_buf jb;      // where it waits
    uint3 tid;
    int state, started;
};

inline jmp_buf emu_sched_;
inline EmuFiber *emu_cur_ = NULL;
inline std::function<void()> *emu_body_ = NULL;
inline float emu_xchg_[EMU_MAX_THREADS];

static inline int emu_linear_tid_(void) { return (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)); }

static inline void emu_wait_(int state) {
    emu_cur_->state = state;
    if (!_setjmp(emu_cur_->jb)) _longjmp(emu_sched_, 1);
}

static inline void __syncthreads(void) { emu_wait_(EMU_WAIT_BLOCK); }
// a warp's lanes wait for each other (what the kernels need between a warp-wide store_matrix_sync and lanes
// reading it, on the GPU as here, where each fiber runs on to its next barrier before the next one starts)
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    (void)mask;
    emu_wait_(EMU_WAIT_WARP);
}

static inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
    (void)mask;
    int t = emu_linear_tid_();
    emu_xchg_[t] = v;
    emu_wait_(EMU_WAIT_WARP);
    float r = emu_xchg_[t ^ lane_mask];
    emu_wait_(EMU_WAIT_WARP);  // everyone has read before anyone writes again
    return r;
}

static void emu_entry_(void) {
    (*emu_body_)();
    emu_cur_->state = EMU_DONE;
    _longjmp(emu_sched_, 1);
}

static inline void emu_run_(dim3 grid, dim3 block, std::function<void()> *body) {
    static std::vector<char> stacks;
    static std::vector<EmuFiber> fibers;
    int n = (int)(block.x * block.y * block.z);
    if (n < 1 || n > EMU_MAX_THREADS) {
        fprintf(stderr, "emulated CUDA: a block of %d threads\n", n);
        abort();
    }
    if (stacks.size() < (size_t)n * EMU_STACK) stacks.resize((size_t)n * EMU_STACK);
    fibers.resize(n);
    gridDim = grid;
    blockDim = block;
    emu_body_ = body;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                for (int i = 0; i < n; i++) {
                    EmuFiber *f = &fibers[i];
                    getcontext(&f->ctx);
                    f->ctx.uc_stack.ss_sp = stacks.data() + (size_t)i * EMU_STACK;
                    f->ctx.uc_stack.ss_size = EMU_STACK;
                    f->ctx.uc_link = NULL;
                    makecontext(&f->ctx, emu_entry_, 0);
                    f->tid = {i % block.x, (i / block.x) % block.y, i / (block.x * block.y)};
                    f->state = EMU_RUN;
                    f->started = 0;
                }
                for (;;) {
                    for (int i = 0; i < n; i++) {
                        if (fibers[i].state != EMU_RUN) continue;
                        emu_cur_ = &fibers[i];
                        threadIdx = fibers[i].tid;
                        blockIdx = {bx, by, bz};
                        if (!_setjmp(emu_sched_)) {
                            if (fibers[i].started) _longjmp(fibers[i].jb, 1);
                            fibers[i].started = 1;
                            setcontext(&fibers[i].ctx);
                        }
                    }
                    // every fiber waits or is done: release whole warps at a shuffle, the block at __syncthreads
                    int live = 0, at_block = 0, released = 0;
                    for (int w = 0; w * 32 < n; w++) {
                        int wl = 0, ww = 0;
                        for (int i = w * 32; i < n && i < w * 32 + 32; i++) {
                            wl += fibers[i].state != EMU_DONE;
                            ww += fibers[i].state == EMU_WAIT_WARP;
                            at_block += fibers[i].state == EMU_WAIT_BLOCK;
                        }
                        live += wl;
                        if (wl && ww == wl) {
                            for (int i = w * 32; i < n && i < w * 32 + 32; i++) fibers[i].state = EMU_RUN;
                            released = 1;
                        }
                    }
                    if (!live) break;
                    if (!released && at_block == live) {
                        for (int i = 0; i < n; i++)
                            if (fibers[i].state == EMU_WAIT_BLOCK) fibers[i].state = EMU_RUN;
                        released = 1;
                    }
                    if (!released) {
                        fprintf(stderr, "emulated CUDA: deadlock in block (%u,%u,%u): threads wait at different "
                                "barriers\n", bx, by, bz);
                        abort();
                    }
                }
            }
}

// the launch configuration; smem: the bytes of dynamic shared memory (GPU_DYNAMIC_SMEM), one buffer that the
// fibers of the running block share
struct EmuCfg {
    dim3 grid, block;
    size_t smem;
};
static inline EmuCfg emu_cfg(dim3 grid, dim3 block, size_t smem = 0) { return EmuCfg{grid, block, smem}; }
inline std::vector<float4_emu_> emu_dyn_smem_;

template <typename K, typename... A>
static inline void emu_launch(EmuCfg cfg, K kernel, A... args) {
    // the buffer of the dynamic shared memory, 16-byte aligned, filled with NaN bytes as device memory is
    emu_dyn_smem_.assign((cfg.smem + 15) / 16 + 1, float4_emu_{});
    memset((void *)emu_dyn_smem_.data(), 0xff, emu_dyn_smem_.size() * sizeof(float4_emu_));
    std::function<void()> body = [&]() { kernel(args...); };
    emu_run_(cfg.grid, cfg.block, &body);
}
#define SEQ_GPU_EMU 1
#define GPU_DYNAMIC_SMEM(type, name) type *name = (type *)emu_dyn_smem_.data()
template <typename F>
static inline int cudaFuncSetAttribute(F f, int attr, int value) { (void)f, (void)attr, (void)value; return 0; }
enum { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

// ----------------------------------------------------------------------------
// the runtime calls the backend makes

typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 };
typedef enum { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice } cudaMemcpyKind;

struct cudaDeviceProp {
    char name[256];
    int major, minor;
    size_t totalGlobalMem;
};

static inline const char *cudaGetErrorString(cudaError_t e) { return e ? "out of memory (emulated)" : "no error"; }
static inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
static inline cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
static inline cudaError_t cudaSetDevice(int d) { (void)d; return cudaSuccess; }
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    (void)d;
    snprintf(p->name, sizeof p->name, "CPU emulation (tests/gpu/emu)");
    p->major = p->minor = 0;
    p->totalGlobalMem = 0;
    return cudaSuccess;
}
// device memory: host blocks with their size in a 16-byte header (malloc's alignment kept), counted in
// emu_mem_used_ so that cudaMemGetInfo, and with it gpu_mem_used, reads the bytes the backend holds (the parity
// test checks with it that re-sized activations free the old ones)
#define EMU_MEM_HEADER 16
#define EMU_MEM_TOTAL ((size_t)80 << 30)  // what cudaMemGetInfo calls the device's total
inline size_t emu_mem_used_ = 0;
template <typename T>
static inline cudaError_t cudaMalloc(T **p, size_t n) {
    char *b = (char *)malloc(EMU_MEM_HEADER + (n ? n : 1));
    if (!b) return cudaErrorMemoryAllocation;
    memcpy(b, &n, sizeof n);
    emu_mem_used_ += n;
    // filled with NaN bytes: a kernel that reads memory nobody wrote shows up in the results
    memset(b + EMU_MEM_HEADER, 0xff, n);
    *p = (T *)(void *)(b + EMU_MEM_HEADER);
    return cudaSuccess;
}
static inline cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;  // cudaFree(0): CUDA's idiom for creating the context
    char *b = (char *)p - EMU_MEM_HEADER;
    size_t n;
    memcpy(&n, b, sizeof n);
    emu_mem_used_ -= n;
    free(b);
    return cudaSuccess;
}
// events: the host's clock when recorded (kernels run at their launch, so that is when the stream reaches it)
struct EmuEvent {
    double ms;
};
typedef EmuEvent *cudaEvent_t;
static inline cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = (EmuEvent *)calloc(1, sizeof(EmuEvent)); return cudaSuccess; }
static inline cudaError_t cudaEventRecord(cudaEvent_t e, int stream) {
    (void)stream;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    e->ms = ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
    return cudaSuccess;
}
static inline cudaError_t cudaEventSynchronize(cudaEvent_t e) { (void)e; return cudaSuccess; }
static inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) { *ms = (float)(b->ms - a->ms); return cudaSuccess; }
static inline cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b) {
    *total_b = EMU_MEM_TOTAL;
    *free_b = EMU_MEM_TOTAL - emu_mem_used_;
    return cudaSuccess;
}
static inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind k) {
    (void)k;
    memcpy(d, s, n);
    return cudaSuccess;
}
static inline cudaError_t cudaMemset(void *d, int v, size_t n) { memset(d, v, n); return cudaSuccess; }
// the stream's copy: the stream is where kernels already ran (they run at their launch), so this is a copy too
static inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, int stream) {
    (void)stream;
    return cudaMemcpy(d, s, n, k);
}

#endif
