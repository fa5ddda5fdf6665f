/*
 * The device side of a mixer. A mixer trains on the GPU when it has one of these, listed in gpu/registry.cu's
 * table; MixerOps (mixers/mixer.h) stays the host side and the one place its options are
 * parsed, checked and its tensors declared. The device side gets the SAME Mixer struct as the CPU's forward
 * and backward, with every buffer in it (params, grads, acts, scratch) a device pointer of the same layout,
 * so mixer_param()/mixer_grad() and the option struct work unchanged. The contract is the CPU's: forward
 * keeps what backward needs in m->acts; backward ACCUMULATES into dx and the parameter gradients; m->scratch
 * is shared by all layers. x, the block's normed input, comes as the model keeps it: floats, or bf16 in
 * run.precision bf16 (gpu/common.cuh's GpuAct: what the model's matmuls take; hand it to them as it is).
 *
 * Adding a mixer's kernels = a gpu/<mixer>.cu with a GpuMixerOps, one line in gpu/registry.cu's table, and its
 * rows in the parity test (tests/gpu/test_gpu_parity.c). docs/gpu.md has the walk-through.
 */
#ifndef SEQ_GPU_MIXER_GPU_CUH
#define SEQ_GPU_MIXER_GPU_CUH

#include <stddef.h>

#include "gpu/common.cuh"

extern "C" {
#include "core/err.h"
#include "mixers/mixer.h"
}

typedef struct GpuMixerOps {
    const char *name;  // the MixerOps name it serves
    // refuse options the kernels do not cover: -1 with e naming layer l's key and value (checked before any
    // device memory is taken)
    int (*check)(const MixerSpec *s, int l, Err *e);
    size_t (*act_size)(const MixerSpec *s, int B, int T);      // device floats kept for backward
    size_t (*scratch_size)(const MixerSpec *s, int B, int T);  // device floats of temporaries
    void (*forward)(Mixer *m, float *y, GpuAct x, int B, int T);                     // y, x (B,T,C)
    void (*backward)(Mixer *m, float *dx, const float *dy, GpuAct x, int B, int T);  // dx += ...
} GpuMixerOps;

// kernel over n elements (or rows), a thread each in blocks of 256, with the launch check: the mixers' small
// elementwise passes between the ops. The emulator rewrites the launches of .cu files only (the Makefile's perl), so
// this header writes its launch the rewritten way there.
#ifdef SEQ_GPU_EMU
#define MIXER_LAUNCH_CALL_(kernel, n, ...) emu_launch(emu_cfg(gpu_blocks((size_t)(n), 256), 256), kernel, __VA_ARGS__)
#else
#define MIXER_LAUNCH_CALL_(kernel, n, ...) kernel<<<gpu_blocks((size_t)(n), 256), 256>>>(__VA_ARGS__)
#endif
#define MIXER_LAUNCH(kernel, n, ...)                      \
    do {                                                  \
        MIXER_LAUNCH_CALL_(kernel, n, __VA_ARGS__);       \
        KERNEL_CHECK();                                   \
    } while (0)

extern const GpuMixerOps GPU_MIXER_ATTENTION;
extern const GpuMixerOps GPU_MIXER_LINEAR_ATTN, GPU_MIXER_RETNET, GPU_MIXER_GLA;  // gpu/linear.cu
extern const GpuMixerOps GPU_MIXER_MAMBA2;  // gpu/mamba2.cu
extern const GpuMixerOps GPU_MIXER_MLSTM;   // gpu/mlstm.cu

// the device side of the mixer called name (MixerOps.name), or NULL when it has none (gpu/registry.cu)
const GpuMixerOps *gpu_mixer_lookup(const char *name);
// the names of the mixers with a device side, ", "-separated, into buf (n,); returns buf
const char *gpu_mixer_names(char *buf, size_t n);

#endif
