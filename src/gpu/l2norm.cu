// The L2 norm of rows on the GPU (gpu/l2norm.cuh): one warp per row.
#include "gpu/l2norm.cuh"

#include <math.h>

#include "gpu/common.cuh"

// V adjacent channels a lane at a time (V 4: 16-byte loads, C a multiple of 4 and the rows aligned). Every lane
// reads the elements it writes, after the row's sum, so out may alias inp.
template <int V>
__global__ void l2norm_forward_kernel(float *out, float *nrm, const float *inp, int N, int C, float eps, int mode) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    float *y = out + (size_t)row * C, v[V];
    float ss = 0.0f;
    for (int c = V * lane; c < C; c += 32 * V) {
        load_elts_<V>(v, x + c);
        for (int e = 0; e < V; e++) ss += v[e] * v[e];
    }
    ss = warp_sum_(ss);
    float r = mode == L2NORM_ADD ? sqrtf(ss + eps) : sqrtf(ss);
    if (mode == L2NORM_FLOOR && !(r > eps)) r = eps;
    float inv = 1.0f / r;
    for (int c = V * lane; c < C; c += 32 * V) {
        load_elts_<V>(v, x + c);
        for (int e = 0; e < V; e++) v[e] *= inv;
        store_elts_<V>(y + c, v);
    }
    if (lane == 0) nrm[row] = r;
}

// dinp += (dout - out (out . dout)) / n; a row held at the floor (L2NORM_FLOOR, n <= eps) is out = inp / eps, linear
template <int V>
__global__ void l2norm_backward_kernel(float *dinp, const float *dout, const float *out, const float *nrm, int N, int C,
                                       float eps, int mode) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *dy = dout + (size_t)row * C, *y = out + (size_t)row * C;
    float *dx = dinp + (size_t)row * C, r = nrm[row], yv[V], dv[V], o[V];
    int floor_ = mode == L2NORM_FLOOR && r <= eps;  // the whole warp's row: the same branch for every lane
    float dot = 0.0f;
    if (!floor_) {
        for (int c = V * lane; c < C; c += 32 * V) {
            load_elts_<V>(yv, y + c), load_elts_<V>(dv, dy + c);
            for (int e = 0; e < V; e++) dot += yv[e] * dv[e];
        }
        dot = warp_sum_(dot);
    }
    for (int c = V * lane; c < C; c += 32 * V) {
        load_elts_<V>(dv, dy + c), load_elts_<V>(o, dx + c);
        if (floor_)
            for (int e = 0; e < V; e++) o[e] += dv[e] / eps;
        else {
            load_elts_<V>(yv, y + c);
            for (int e = 0; e < V; e++) o[e] += (dv[e] - yv[e] * dot) / r;
        }
        store_elts_<V>(dx + c, o);
    }
}

void gpu_l2norm_forward(float *out, float *nrm, const float *inp, int N, int C, float eps, int mode) {
    if (N <= 0) return;
    unsigned nb = gpu_blocks((size_t)N, 8);
    if (C % 4 == 0 && aligned16_(out) && aligned16_(inp))
        l2norm_forward_kernel<4><<<nb, 256>>>(out, nrm, inp, N, C, eps, mode);
    else l2norm_forward_kernel<1><<<nb, 256>>>(out, nrm, inp, N, C, eps, mode);
    KERNEL_CHECK();
}

void gpu_l2norm_backward(float *dinp, const float *dout, const float *out, const float *nrm, int N, int C, float eps,
                         int mode) {
    if (N <= 0) return;
    unsigned nb = gpu_blocks((size_t)N, 8);
    if (C % 4 == 0 && aligned16_(dinp) && aligned16_(dout) && aligned16_(out))
        l2norm_backward_kernel<4><<<nb, 256>>>(dinp, dout, out, nrm, N, C, eps, mode);
    else l2norm_backward_kernel<1><<<nb, 256>>>(dinp, dout, out, nrm, N, C, eps, mode);
    KERNEL_CHECK();
}
