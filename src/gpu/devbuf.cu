// Device buffers: for C callers (gpu/devbuf.h), and the ops' work buffers (common.cuh's GpuWork).
#include "gpu/devbuf.h"

#include "gpu/common.cuh"

int gpu_devbuf_have_device(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear it: the caller reports "no GPU", not a later check
        return 0;
    }
    return n > 0;
}

float *gpu_devbuf_alloc(size_t n) {
    float *p = NULL;
    CUDA_CHECK(cudaMalloc(&p, (n ? n : 1) * sizeof(float)));
    return p;
}

void gpu_devbuf_free(float *p) { CUDA_CHECK(cudaFree(p)); }

void gpu_devbuf_to_device(float *dst, const float *src, size_t n) {
    CUDA_CHECK(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyHostToDevice));
}

void gpu_devbuf_to_host(float *dst, const float *src, size_t n) {
    CUDA_CHECK(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost));
}

float *gpu_work_floats(GpuWork *w, size_t n) {
    if (n > w->cap) {
        if (w->p) CUDA_CHECK(cudaFree(w->p));
        CUDA_CHECK(cudaMalloc(&w->p, n * sizeof(float)));
        w->cap = n;
    }
    return w->p;
}
