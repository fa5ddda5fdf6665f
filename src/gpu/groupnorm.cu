// Per-head (grouped) normalisation with an optional swish gate on the GPU (gpu/groupnorm.cuh).
#include "gpu/groupnorm.cuh"

#include <math.h>

#include "gpu/common.cuh"

// nn/groupnorm.c's sigmoid, 1 / (1 + e^-x) (inf for a large negative x gives 0, as there)
static __device__ __forceinline__ float gn_sigm_(float x) { return 1.0f / (1.0f + expf(-x)); }

// V elements of the normalised value's input u from x (and z): x, or x * silu(z) with the gate before the norm
// (nn/groupnorm.c's u_of_, its products in its order)
template <int V>
static __device__ __forceinline__ void gn_load_u_(float *u, const float *x, const float *z, int before) {
    load_elts_<V>(u, x);
    if (before) {
        float zv[V];
        load_elts_<V>(zv, z);
        for (int e = 0; e < V; e++) u[e] = u[e] * zv[e] * gn_sigm_(zv[e]);
    }
}

// One warp per group ng of the NG = N*G groups, V adjacent channels a lane at a time (V 4: 16-byte loads, D a
// multiple of 4 and every tensor aligned). The mean (center only), then the squares about it, then the output.
template <int V>
__global__ void groupnorm_forward_kernel(float *out, float *mean, float *rstd, const float *x, const float *z,
                                         const float *w, int NG, int G, int D, GroupNormOpts o) {
    int ng = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (ng >= NG) return;
    int before = o.gate == GROUPNORM_GATE_BEFORE, after = o.gate == GROUPNORM_GATE_AFTER;
    size_t base = (size_t)ng * D;
    // without a gate zg stands in as x's group, never read (no pointer arithmetic on a NULL z)
    const float *xg = x + base, *zg = z ? z + base : xg, *wg = w + (o.wshared ? 0 : (size_t)(ng % G) * D);
    float u[V], zv[V], wv[V], y[V];
    float mu = 0.0f;
    if (o.center) {
        float s = 0.0f;
        for (int c = V * lane; c < D; c += 32 * V) {
            gn_load_u_<V>(u, xg + c, zg + c, before);
            for (int e = 0; e < V; e++) s += u[e];
        }
        mu = warp_sum_(s) / D;
    }
    float ss = 0.0f;
    for (int c = V * lane; c < D; c += 32 * V) {
        gn_load_u_<V>(u, xg + c, zg + c, before);
        for (int e = 0; e < V; e++) ss += (u[e] - mu) * (u[e] - mu);
    }
    float r = 1.0f / sqrtf(warp_sum_(ss) / D + o.eps);
    for (int c = V * lane; c < D; c += 32 * V) {
        gn_load_u_<V>(u, xg + c, zg + c, before);
        load_elts_<V>(wv, wg + c);
        if (after) load_elts_<V>(zv, zg + c);
        for (int e = 0; e < V; e++) {
            y[e] = (u[e] - mu) * r * wv[e];
            if (after) y[e] = y[e] * zv[e] * gn_sigm_(zv[e]);
        }
        store_elts_<V>(out + base + c, y);
    }
    if (lane == 0) {
        if (mean) mean[ng] = mu;
        rstd[ng] = r;
    }
}

// dx, dz of one group a warp (the host's backward_group_): with nv = (u - m) r, dy = dout [* silu(z) after],
// dn = dy w: du = r (dn - mean(dn) - nv mean(dn nv)) (LayerNorm; RMSNorm drops mean(dn)), then through the gate
template <int V>
__global__ void groupnorm_backward_kernel(float *dx, float *dz, const float *dout, const float *x, const float *z,
                                          const float *w, const float *mean, const float *rstd, int NG, int G, int D,
                                          GroupNormOpts o) {
    int ng = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (ng >= NG) return;
    int before = o.gate == GROUPNORM_GATE_BEFORE, after = o.gate == GROUPNORM_GATE_AFTER;
    size_t base = (size_t)ng * D;
    const float *xg = x + base, *zg = z ? z + base : xg, *dyg = dout + base;  // zg: as in the forward
    const float *wg = w + (o.wshared ? 0 : (size_t)(ng % G) * D);
    float m = mean ? mean[ng] : 0.0f, r = rstd[ng];
    float u[V], xv[V], zv[V], dv[V], wv[V], a[V], b[V];
    float s1 = 0.0f, s2 = 0.0f;
    for (int c = V * lane; c < D; c += 32 * V) {
        gn_load_u_<V>(u, xg + c, zg + c, before);
        load_elts_<V>(dv, dyg + c), load_elts_<V>(wv, wg + c);
        if (after) load_elts_<V>(zv, zg + c);
        for (int e = 0; e < V; e++) {
            float nv = (u[e] - m) * r, dy = after ? dv[e] * zv[e] * gn_sigm_(zv[e]) : dv[e], dn = dy * wv[e];
            s1 += dn;
            s2 += dn * nv;
        }
    }
    float mdn = o.center ? warp_sum_(s1) / D : 0.0f, mdnn = warp_sum_(s2) / D;
    for (int c = V * lane; c < D; c += 32 * V) {
        gn_load_u_<V>(u, xg + c, zg + c, before);
        load_elts_<V>(dv, dyg + c), load_elts_<V>(wv, wg + c);
        if (before || after) load_elts_<V>(zv, zg + c);
        if (before) load_elts_<V>(xv, xg + c);
        load_elts_<V>(a, dx + base + c);
        if (before || after) load_elts_<V>(b, dz + base + c);
        for (int e = 0; e < V; e++) {
            float nv = (u[e] - m) * r, sg = before || after ? gn_sigm_(zv[e]) : 0.0f;
            float dy = after ? dv[e] * zv[e] * sg : dv[e];
            float du = r * (dy * wv[e] - mdn - nv * mdnn);
            if (after) b[e] += dv[e] * nv * wv[e] * sg * (1.0f + zv[e] * (1.0f - sg));  // d silu(z) = s (1 + z (1 - s))
            if (before) {
                a[e] += du * zv[e] * sg;
                b[e] += du * xv[e] * sg * (1.0f + zv[e] * (1.0f - sg));
            } else {
                a[e] += du;
            }
        }
        store_elts_<V>(dx + base + c, a);
        if (before || after) store_elts_<V>(dz + base + c, b);
    }
}

// the weight gradient's column sums in two passes: the rows of the (R, W) view of the groups (wshared: R = N*G
// groups of W = D columns; else R = N rows of W = G*D), whose element (r, c) is at r*W + c either way, in chunks
// of GN_CHUNK rows
#define GN_CHUNK 64
#define GN_ROWS 8  // a chunk's rows are split over GN_ROWS threads (y, y + 8, ...), added in that order after

// partial (n_chunks, W): per chunk and column the sum of dy * nv. A block (32, GN_ROWS) covers 32 columns of one
// chunk (chunks on x)
__global__ void groupnorm_dw_partial_kernel(float *partial, const float *dout, const float *x, const float *z,
                                            const float *mean, const float *rstd, int R, int W, int G, int D,
                                            GroupNormOpts o) {
    __shared__ float sh[GN_ROWS][32];
    int c = blockIdx.y * 32 + threadIdx.x, chunk = blockIdx.x, ty = threadIdx.y;
    int before = o.gate == GROUPNORM_GATE_BEFORE, after = o.gate == GROUPNORM_GATE_AFTER;
    int r1 = min(R, (chunk + 1) * GN_CHUNK);
    float s = 0.0f;
    if (c < W)
        for (int r = chunk * GN_CHUNK + ty; r < r1; r += GN_ROWS) {
            size_t i = (size_t)r * W + c, ng = o.wshared ? (size_t)r : (size_t)r * G + c / D;
            float u = x[i], zi = before || after ? z[i] : 0.0f;
            if (before) u = u * zi * gn_sigm_(zi);
            float nv = (u - (mean ? mean[ng] : 0.0f)) * rstd[ng];
            float dy = after ? dout[i] * zi * gn_sigm_(zi) : dout[i];
            s += dy * nv;
        }
    sh[ty][threadIdx.x] = s;
    __syncthreads();
    if (ty != 0 || c >= W) return;
    for (int y = 1; y < GN_ROWS; y++) s += sh[y][threadIdx.x];
    partial[(size_t)chunk * W + c] = s;
}

// dw (W,) += the partials' chunks in order
__global__ void groupnorm_dw_finish_kernel(float *dw, const float *partial, int n_chunks, int W) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= W) return;
    float s = 0.0f;
    for (int k = 0; k < n_chunks; k++) s += partial[(size_t)k * W + c];
    dw[c] += s;
}

static GpuWork groupnorm_work_ = {NULL, 0};  // the partials' device buffer (common.cuh)

// V 4 when D is a multiple of 4 and every tensor starts on 16 bytes (then so does every group and w's slice)
static int gn_vec_(int D, const void *a, const void *b, const void *c, const void *d, const void *e) {
    return D % 4 == 0 && aligned16_(a) && aligned16_(b) && aligned16_(c) && aligned16_(d) && aligned16_(e) ? 4 : 1;
}

void gpu_groupnorm_forward(float *out, float *mean, float *rstd, const float *x, const float *z, const float *w,
                           int N, int G, int D, const GroupNormOpts *o) {
    int NG = N * G;
    if (NG <= 0 || D <= 0) return;
    if (o->gate != GROUPNORM_GATE_NONE && !z)
        gpu_fail_("gpu_groupnorm_forward", "a gate without z", __FILE__, __LINE__);
    const float *zz = o->gate != GROUPNORM_GATE_NONE ? z : NULL;
    unsigned nb = gpu_blocks((size_t)NG, 8);
    if (gn_vec_(D, out, x, zz, w, NULL) == 4)
        groupnorm_forward_kernel<4><<<nb, 256>>>(out, mean, rstd, x, zz, w, NG, G, D, *o);
    else groupnorm_forward_kernel<1><<<nb, 256>>>(out, mean, rstd, x, zz, w, NG, G, D, *o);
    KERNEL_CHECK();
}

void gpu_groupnorm_backward(float *dx, float *dz, float *dw, const float *dout, const float *x, const float *z,
                            const float *w, const float *mean, const float *rstd, int N, int G, int D,
                            const GroupNormOpts *o) {
    int NG = N * G;
    if (NG <= 0 || D <= 0) return;
    int gated = o->gate != GROUPNORM_GATE_NONE;
    if (gated && (!z || !dz)) gpu_fail_("gpu_groupnorm_backward", "a gate without z or dz", __FILE__, __LINE__);
    const float *zz = gated ? z : NULL;
    float *dzz = gated ? dz : NULL;
    unsigned nb = gpu_blocks((size_t)NG, 8);
    if (gn_vec_(D, dx, dzz, dout, x, zz) == 4 && aligned16_(w))
        groupnorm_backward_kernel<4><<<nb, 256>>>(dx, dzz, dout, x, zz, w, mean, rstd, NG, G, D, *o);
    else groupnorm_backward_kernel<1><<<nb, 256>>>(dx, dzz, dout, x, zz, w, mean, rstd, NG, G, D, *o);
    KERNEL_CHECK();
    if (!dw) return;
    int R = o->wshared ? NG : N, W = o->wshared ? D : G * D, n_chunks = (R + GN_CHUNK - 1) / GN_CHUNK;
    float *partial = gpu_work_floats(&groupnorm_work_, (size_t)n_chunks * W);
    dim3 grid(n_chunks, gpu_blocks(W, 32)), block(32, GN_ROWS);
    groupnorm_dw_partial_kernel<<<grid, block>>>(partial, dout, x, zz, mean, rstd, R, W, G, D, *o);
    KERNEL_CHECK();
    groupnorm_dw_finish_kernel<<<gpu_blocks(W, 128), 128>>>(dw, partial, n_chunks, W);
    KERNEL_CHECK();
}
