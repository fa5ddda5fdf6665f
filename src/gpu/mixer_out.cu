// The linear family's output on the GPU (gpu/mixer_out.cuh): the gate's projection, the gated per-head RMSNorm and
// the output projection over device buffers.
#include "gpu/groupnorm.cuh"
#include "gpu/matmul.cuh"
#include "gpu/mixer_out.cuh"

static GroupNormOpts out_norm_opts_(int kg, float eps) {
    return GroupNormOpts{kg >= 0 ? GROUPNORM_GATE_AFTER : GROUPNORM_GATE_NONE, 0, 1, eps};
}

void gpu_mixer_out_forward(const Mixer *m, int kg, int knorm, int ko, float *y, float *yn, float *rstd, float *z,
                           const float *o, GpuAct x, int BT, int H, int Dv, float eps) {
    int C = m->spec->C, HV = H * Dv;
    if (kg >= 0) gpu_matmul_forward(gpu_f32(z), x, mixer_param(m, kg), NULL, BT, C, HV);
    GroupNormOpts gn = out_norm_opts_(kg, eps);
    gpu_groupnorm_forward(yn, NULL, rstd, o, kg >= 0 ? z : NULL, mixer_param(m, knorm), BT, H, Dv, &gn);
    gpu_matmul_forward(gpu_f32(y), gpu_f32(yn), mixer_param(m, ko), NULL, BT, HV, C);
}

void gpu_mixer_out_backward(Mixer *m, int kg, int knorm, int ko, float *dx, float *dO, float *dyn, float *dz,
                            const float *dy, const float *yn, const float *rstd, const float *z, const float *o,
                            GpuAct x, int BT, int H, int Dv, float eps) {
    int C = m->spec->C, HV = H * Dv;
    size_t n = (size_t)BT * HV;
    // y = yn W_o^T
    gpu_matmul_backward(gpu_f32(dyn), mixer_grad(m, ko), NULL, gpu_f32(dy), gpu_f32(yn), mixer_param(m, ko), BT, HV,
                        C, 0);
    // yn = norm(o) [* swish(z)]
    CUDA_CHECK(cudaMemset(dO, 0, n * sizeof(float)));
    if (kg >= 0) CUDA_CHECK(cudaMemset(dz, 0, n * sizeof(float)));
    GroupNormOpts gn = out_norm_opts_(kg, eps);
    gpu_groupnorm_backward(dO, kg >= 0 ? dz : NULL, mixer_grad(m, knorm), dyn, o, kg >= 0 ? z : NULL,
                           mixer_param(m, knorm), NULL, rstd, BT, H, Dv, &gn);
    // z = x W_g^T
    if (kg >= 0)
        gpu_matmul_backward(gpu_f32(dx), mixer_grad(m, kg), NULL, gpu_f32(dz), x, mixer_param(m, kg), BT, C, HV, 1);
}
