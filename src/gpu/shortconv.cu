// The short-convolution streams on the GPU (gpu/shortconv.cuh): mixers/shortconv.c's passes over device buffers.
#include "gpu/activation.cuh"
#include "gpu/conv.cuh"
#include "gpu/matmul.cuh"
#include "gpu/shortconv.cuh"
#include "gpu/step.cuh"

void gpu_shortconv_forward(const Mixer *m, int kp, int kc, int K, int silu0, float *s, float *c, float *p, GpuAct x,
                           int B, int T, int W, float *cache, size_t stride) {
    int BT = B * T, C = m->spec->C;
    if (kc < 0 && !silu0) {
        gpu_matmul_forward(gpu_f32(s), x, mixer_param(m, kp), NULL, BT, C, W);
        return;
    }
    if (kc >= 0) {
        gpu_matmul_forward(gpu_f32(p), x, mixer_param(m, kp), NULL, BT, C, W);
        if (cache) gpu_conv1d_causal_step(c, cache, stride, p, mixer_param(m, kc), NULL, B, W, K);
        else gpu_conv1d_causal_forward(c, p, mixer_param(m, kc), NULL, B, T, W, K);
    } else {
        gpu_matmul_forward(gpu_f32(c), x, mixer_param(m, kp), NULL, BT, C, W);
    }
    gpu_silu_forward(s, c, (size_t)BT * W);
}

void gpu_shortconv_backward(Mixer *m, int kp, int kc, int K, int silu0, float *dx, float *dc, float *dp,
                            const float *ds, const float *c, const float *p, GpuAct x, int B, int T, int W) {
    int BT = B * T, C = m->spec->C;
    size_t n = (size_t)BT * W;
    const float *dproj = ds;
    if (kc >= 0 || silu0) {
        CUDA_CHECK(cudaMemset(dc, 0, n * sizeof(float)));
        gpu_silu_backward(dc, c, ds, n);
        dproj = dc;
    }
    if (kc >= 0) {  // c = conv(p): the conv's input gradient is the projection's output gradient
        CUDA_CHECK(cudaMemset(dp, 0, n * sizeof(float)));
        gpu_conv1d_causal_backward(dp, mixer_grad(m, kc), NULL, dc, p, mixer_param(m, kc), B, T, W, K);
        dproj = dp;
    }
    gpu_matmul_backward(gpu_f32(dx), mixer_grad(m, kp), NULL, gpu_f32(dproj), x, mixer_param(m, kp), BT, C, W, 1);
}
