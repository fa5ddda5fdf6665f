// LayerNorm and RMSNorm on the GPU (gpu/norm.cuh): one warp per row.
#include "gpu/norm.cuh"

#include <math.h>

#include "gpu/colsum.cuh"

extern "C" {
#include "nn/norm.h"
}

template <typename OT>
__global__ void norm_forward_kernel(OT *out, float *mean, float *rstd, const float *inp, const float *w,
                                    const float *b, int N, int C, int rms) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    float mu = 0.0f;
    if (!rms) {
        float s = 0.0f;
        for (int i = lane; i < C; i += 32) s += x[i];
        mu = warp_sum_(s) / C;
    }
    float v = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float d = x[i] - mu;
        v += d * d;
    }
    float rs = rsqrtf(warp_sum_(v) / C + (rms ? RMSNORM_EPS : LAYERNORM_EPS));
    OT *y = out + (size_t)row * C;
    for (int i = lane; i < C; i += 32) y[i] = to_elt_<OT>((x[i] - mu) * rs * w[i] + (b ? b[i] : 0.0f));
    if (lane == 0) {
        if (mean) mean[row] = mu;
        rstd[row] = rs;
    }
}

void gpu_norm_forward(GpuAct out, float *mean, float *rstd, const float *inp, const float *w, const float *b, int N,
                      int C, int rms) {
    if (rms) mean = NULL, b = NULL;
    if (out.bf16)
        norm_forward_kernel<__nv_bfloat16><<<gpu_blocks(N, 8), 256>>>((__nv_bfloat16 *)out.p, mean, rstd, inp, w, b, N,
                                                                     C, rms);
    else norm_forward_kernel<float><<<gpu_blocks(N, 8), 256>>>((float *)out.p, mean, rstd, inp, w, b, N, C, rms);
    KERNEL_CHECK();
}

// dinp += rstd (dn - mean(dn) - xhat mean(dn xhat)), dn = dout w (LayerNorm); RMSNorm drops the mean(dn) term.
// One warp per row, VEC adjacent columns a lane at a time (VEC 4: 16-byte loads; C a multiple of 4, rows aligned)
template <int VEC>
__global__ void norm_backward_kernel(float *dinp, const float *dout, const float *inp, const float *w,
                                     const float *mean, const float *rstd, int N, int C, int rms) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    float mu = rms ? 0.0f : mean[row], rs = rstd[row];
    float s = 0.0f, sx = 0.0f, xv[VEC], dv[VEC], wv[VEC];
    for (int c = VEC * lane; c < C; c += 32 * VEC) {
        load_elts_<VEC>(xv, x + c), load_elts_<VEC>(dv, dy + c), load_elts_<VEC>(wv, w + c);
        for (int e = 0; e < VEC; e++) {
            float dn = dv[e] * wv[e];
            s += dn;
            sx += dn * (xv[e] - mu) * rs;
        }
    }
    s = rms ? 0.0f : warp_sum_(s) / C;
    sx = warp_sum_(sx) / C;
    float *dx = dinp + (size_t)row * C, o[VEC];
    for (int c = VEC * lane; c < C; c += 32 * VEC) {  // the row again (from the cache)
        load_elts_<VEC>(xv, x + c), load_elts_<VEC>(dv, dy + c), load_elts_<VEC>(wv, w + c), load_elts_<VEC>(o, dx + c);
        for (int e = 0; e < VEC; e++) o[e] += rs * (dv[e] * wv[e] - s - (xv[e] - mu) * rs * sx);
        store_elts_<VEC>(dx + c, o);
    }
}

void gpu_norm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                       const float *mean, const float *rstd, int N, int C, int rms) {
    unsigned nb = gpu_blocks(N, 8);
    if (C % 4 == 0 && aligned16_(dinp) && aligned16_(dout) && aligned16_(inp) && aligned16_(w))
        norm_backward_kernel<4><<<nb, 256>>>(dinp, dout, inp, w, mean, rstd, N, C, rms);
    else norm_backward_kernel<1><<<nb, 256>>>(dinp, dout, inp, w, mean, rstd, N, C, rms);
    KERNEL_CHECK();
    gpu_colsum(rms ? NULL : db, dw, gpu_f32(dout), inp, mean, rstd, N, C, rms ? COLSUM_RMSNORM : COLSUM_LAYERNORM);
}
