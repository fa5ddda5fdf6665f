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
    // optional (NULL: no GPU decoding): one token of recurrent decoding, MixerOps.step's contract on the device. state
    // (B, MixerOps.state_size(s, cap)) in the host's layout (the host's state_init fills it), the token at position t
    // (the same for the B sequences); y (B,C) WRITTEN, x (B,C). m->acts and m->scratch are sized for (B, 1).
    void (*step)(Mixer *m, float *state, float *y, GpuAct x, int B, int t, int cap);
} GpuMixerOps;

extern const GpuMixerOps GPU_MIXER_ATTENTION;
extern const GpuMixerOps GPU_MIXER_LINEAR_ATTN, GPU_MIXER_RETNET, GPU_MIXER_GLA;  // gpu/linear.cu
extern const GpuMixerOps GPU_MIXER_GSA;
extern const GpuMixerOps GPU_MIXER_DELTANET, GPU_MIXER_GATED_DELTANET;    // gpu/deltanet.cu
extern const GpuMixerOps GPU_MIXER_MAMBA2;  // gpu/mamba2.cu
extern const GpuMixerOps GPU_MIXER_MLSTM;   // gpu/mlstm.cu
extern const GpuMixerOps GPU_MIXER_BLA;     // gpu/bla.cu
extern const GpuMixerOps GPU_MIXER_KLA;     // gpu/kla.cu

// the chunked mixers' common refusal for layer l's mixer name: a chunk above the max_chunk tokens that the GPU's
// engine (its name in the message) stages. -1 with e set, else 0.
static inline int gpu_refuse_chunked(const char *name, int l, int chunk, int max_chunk, const char *engine, Err *e) {
    if (chunk > max_chunk)
        return err_set(e, "layer %d: %s chunk %d: the GPU's %s takes chunks of 1..%d tokens (model.mixer.chunk; "
                       "results do not depend on it beyond rounding)", l, name, chunk, engine, max_chunk);
    return 0;
}

// the device side of the mixer called name (MixerOps.name), or NULL when it has none (gpu/registry.cu)
const GpuMixerOps *gpu_mixer_lookup(const char *name);
// the names of the mixers with a device side, ", "-separated, into buf (n,); returns buf
const char *gpu_mixer_names(char *buf, size_t n);

#endif
