/*
 * The short-convolution streams on the GPU, the device counterpart of mixers/shortconv.h (read it for the
 * streams: projection, causal depthwise conv of K taps without bias, silu; the `silu0` convention without a conv).
 * The same arguments in the same order, with x as the model hands it to a mixer (GpuAct: floats, or bf16 in
 * run.precision bf16) and every buffer a device pointer; the passes are the gpu/ ops of the host's nn/ ones
 * (matmul, conv, silu), so results match the host's to the ops' tolerances and two runs give the same bits.
 */
#ifndef SEQ_GPU_SHORTCONV_CUH
#define SEQ_GPU_SHORTCONV_CUH

#include "gpu/common.cuh"

extern "C" {
#include "mixers/mixer.h"
}

// one stream over B,T: s (BT,W) = silu(c); c (BT,W) = conv_K(p); p (BT,W) = x W^T; x (BT,C) (see
// mixers/shortconv.h for kc < 0 and silu0). Unused buffers may be NULL; s may alias neither c nor p.
// cache NULL: the training forward (zero padding before each sequence); else one token of decoding (T 1): the conv
// reads and slides sequence b's cache of this stream (W,K-1) at cache + b * stride (shortconv_step's layout)
void gpu_shortconv_forward(const Mixer *m, int kp, int kc, int K, int silu0, float *s, float *c, float *p, GpuAct x,
                           int B, int T, int W, float *cache, size_t stride);
// its backward: dx (BT,C) and the stream's tensors' gradients accumulate (+=) from ds (BT,W); c, p as the forward
// kept them; dc, dp (BT,W) scratch
void gpu_shortconv_backward(Mixer *m, int kp, int kc, int K, int silu0, float *dx, float *dc, float *dp,
                            const float *ds, const float *c, const float *p, GpuAct x, int B, int T, int W);

#endif
