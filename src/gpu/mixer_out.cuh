/*
 * The linear family's output on the GPU (gpu/linear.cu, gpu/deltanet.cu): the recurrence's output o through the
 * per-head RMSNorm with its optional swish gate (FLA's FusedRMSNormGated: gpu/groupnorm.cuh, one weight of Dv
 * shared by the heads, no centring) and the output projection, as the host's mixers end (mixers/linear.c,
 * mixers/delta.c):
 *
 *   z = x W_g^T (with the gate),   yn = RMSNorm_head(o) [* swish(z)],   y = yn W_o^T
 *
 * kg, knorm, ko are the mixer's tensor indices of W_g (-1: no gate), the norm's weight and W_o. x comes as the
 * model hands it (GpuAct); every buffer is a device pointer.
 */
#ifndef SEQ_GPU_MIXER_OUT_CUH
#define SEQ_GPU_MIXER_OUT_CUH

#include "gpu/common.cuh"

extern "C" {
#include "mixers/mixer.h"
}

// y (BT,C) WRITTEN; yn (BT,H*Dv), rstd (BT*H) and, with the gate, z (BT,H*Dv) WRITTEN, kept for the backward;
// o (BT,H*Dv); x (BT,C); eps the norm's
void gpu_mixer_out_forward(const Mixer *m, int kg, int knorm, int ko, float *y, float *yn, float *rstd, float *z,
                           const float *o, GpuAct x, int BT, int H, int Dv, float eps);
// its backward: dO (BT,H*Dv) WRITTEN, o's gradient; dx (BT,C) and the three tensors' gradients accumulate (+=)
// from dy (BT,C); yn, rstd, z, o, x as the forward had them; dyn, dz (BT,H*Dv) scratch (dz unused without the gate)
void gpu_mixer_out_backward(Mixer *m, int kg, int knorm, int ko, float *dx, float *dO, float *dyn, float *dz,
                            const float *dy, const float *yn, const float *rstd, const float *z, const float *o,
                            GpuAct x, int BT, int H, int Dv, float eps);

#endif
