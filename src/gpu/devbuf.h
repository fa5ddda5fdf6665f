/*
 * Device buffers for C callers without the CUDA runtime's headers: the kernels' parity tests
 * (tests/gpu/test_gpu_*.c) allocate, fill and read back device memory through these. The emulated backend
 * (tests/gpu/emu/) provides the same calls on the CPU.
 */
#ifndef SEQ_GPU_DEVBUF_H
#define SEQ_GPU_DEVBUF_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// 1 when a CUDA device is there (the emulator always has one), else 0
int gpu_devbuf_have_device(void);
// n floats of device memory (a CUDA error stops the program, gpu/gpu.h says why)
float *gpu_devbuf_alloc(size_t n);
void gpu_devbuf_free(float *p);
// copies of n floats each way; they wait for the kernels launched before
void gpu_devbuf_to_device(float *dst, const float *src, size_t n);
void gpu_devbuf_to_host(float *dst, const float *src, size_t n);
// how the kernels' warp products multiply for a caller without a model (gpu_open sets it from run.precision):
// "fp32", "tf32" or "bf16" (gpu/common.cuh's GpuMath); the default is tf32
void gpu_devbuf_set_precision(const char *precision);

#ifdef __cplusplus
}
#endif

#endif
