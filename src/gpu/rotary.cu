// Rotary position embedding on (B,T,NH,HS) rows on the GPU (gpu/rotary.cuh).
#include "gpu/rotary.cuh"

#include <math.h>

#include "gpu/common.cuh"

// A thread per channel pair (b, t, h, i), i < HS/2: pair i is channels (i, i + HS/2) (ROTARY_HALF) or (2i, 2i+1)
// (ROTARY_INTERLEAVED). Its cosine and sine as nn/rotary.c's table has them (the angle in double, then rounded);
// inverse: R^T added into out (the backward), else R written (both reads before either write: in place is safe)
__global__ void rotary_kernel(float *out, const float *inp, const float *freqs, double base, int pos0, int T, int NH,
                              int HS, int half_split, int inverse, size_t n_pairs) {
    size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n_pairs) return;
    int half = HS / 2, i = (int)(p % half);
    size_t bth = p / half;  // (b*T + t)*NH + h
    int h = (int)(bth % NH), t = (int)(bth / NH % T);
    double w = freqs ? (double)freqs[(size_t)h * half + i] : pow(base, -2.0 * i / (double)HS);
    double angle = ((double)pos0 + (double)t) * w;
    float c = (float)cos(angle), s = (float)sin(angle);
    size_t row = bth * HS, i0 = row + (half_split ? i : 2 * i), i1 = row + (half_split ? i + half : 2 * i + 1);
    float x0 = inp[i0], x1 = inp[i1];
    if (inverse) {
        out[i0] += x0 * c + x1 * s;
        out[i1] += x1 * c - x0 * s;
    } else {
        float y0 = x0 * c - x1 * s, y1 = x0 * s + x1 * c;
        out[i0] = y0;
        out[i1] = y1;
    }
}

static void rotary_(float *out, const float *inp, const RotaryCfg *cfg, int pos0, int B, int T, int NH, int HS,
                    int inverse) {
    if (HS % 2) gpu_fail_("gpu_rotary", "an odd head size", __FILE__, __LINE__);
    size_t n_pairs = (size_t)B * T * NH * (HS / 2);
    if (!n_pairs) return;
    // the base as nn/rotary.c widens it: the config's float
    rotary_kernel<<<gpu_blocks(n_pairs, 256), 256>>>(out, inp, cfg->freqs, (double)cfg->base, pos0, T, NH, HS,
                                                     cfg->layout == ROTARY_HALF, inverse, n_pairs);
    KERNEL_CHECK();
}

void gpu_rotary_forward(float *out, const float *inp, const RotaryCfg *cfg, int pos0, int B, int T, int NH, int HS) {
    rotary_(out, inp, cfg, pos0, B, T, NH, HS, 0);
}

void gpu_rotary_backward(float *dinp, const float *dout, const RotaryCfg *cfg, int pos0, int B, int T, int NH,
                         int HS) {
    rotary_(dinp, dout, cfg, pos0, B, T, NH, HS, 1);
}
