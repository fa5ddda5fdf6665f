// The mixers with a device side (gpu/mixer_gpu.cuh): adding one is its gpu/<mixer>.cu and a line here.
#include <stdio.h>
#include <string.h>

#include "gpu/mixer_gpu.cuh"

static const GpuMixerOps *const GPU_MIXERS_[] = {
    &GPU_MIXER_ATTENTION,
    &GPU_MIXER_LINEAR_ATTN,
    &GPU_MIXER_RETNET,
    &GPU_MIXER_GLA,
    &GPU_MIXER_GSA,
    &GPU_MIXER_DELTANET,
    &GPU_MIXER_GATED_DELTANET,
    &GPU_MIXER_MAMBA2,
    &GPU_MIXER_MLSTM,
    &GPU_MIXER_BLA,
    &GPU_MIXER_KLA,
};
static const int N_GPU_MIXERS_ = (int)(sizeof GPU_MIXERS_ / sizeof GPU_MIXERS_[0]);

const GpuMixerOps *gpu_mixer_lookup(const char *name) {
    for (int i = 0; i < N_GPU_MIXERS_; i++)
        if (!strcmp(GPU_MIXERS_[i]->name, name)) return GPU_MIXERS_[i];
    return NULL;
}

const char *gpu_mixer_names(char *buf, size_t n) {
    if (n) buf[0] = '\0';
    for (int i = 0; i < N_GPU_MIXERS_; i++) {
        size_t used = strlen(buf);
        snprintf(buf + used, n - used, "%s%s", i ? ", " : "", GPU_MIXERS_[i]->name);
    }
    return buf;
}
