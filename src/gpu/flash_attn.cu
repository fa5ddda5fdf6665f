// Tiled causal attention on the GPU (gpu/flash_attn.cuh). Each kernel is a template on DM, the head size
// rounded up to 32, 64 or 128: rows are held in registers (q, the accumulators) and padded with zeros to DM
// in shared memory, so the inner loops have no bounds tests.
#include "gpu/flash_attn.cuh"

#include <math.h>

#include "gpu/common.cuh"

#define ROWS 64  // query rows (forward, dq) or key rows (dk, dv) per block: one thread each
#define TILE 32  // keys (forward, dq) or queries (dk, dv) staged in shared memory at a time

// rows [r0, r0 + TILE) of a (T,D) matrix into s (TILE, DM), zero-padded past T and past D
template <int DM>
static __device__ void load_tile_(float (*s)[DM], const float *src, int r0, int T, int D) {
    for (int i = threadIdx.x; i < TILE * DM; i += blockDim.x) {
        int r = i / DM, d = i % DM;
        s[r][d] = (r0 + r < T && d < D) ? src[(size_t)(r0 + r) * D + d] : 0.0f;
    }
}

// the key/value tile at k0 of one head into shared memory, once every thread is done with the previous one
template <int DM>
static __device__ void stage_kv_(float (*ks)[DM], float (*vs)[DM], const float *k, const float *v, int k0, int T,
                                 int D) {
    __syncthreads();
    load_tile_<DM>(ks, k, k0, T, D);
    load_tile_<DM>(vs, v, k0, T, D);
    __syncthreads();
}

template <int DM>
static __device__ void load_row_(float *reg, const float *src, int D) {
#pragma unroll
    for (int d = 0; d < DM; d++) reg[d] = d < D ? src[d] : 0.0f;
}

template <int DM>
static __device__ __forceinline__ float dot_(const float *a, const float *b) {
    float s = 0.0f;
#pragma unroll
    for (int d = 0; d < DM; d++) s += a[d] * b[d];
    return s;
}

// grid (B*NH, ceil(T/ROWS)), ROWS threads: query i = blockIdx.y*ROWS + threadIdx.x of head (b,h) = blockIdx.x
// (heads on x: gridDim.y stops at 65535)
template <int DM>
__global__ void __launch_bounds__(ROWS) attn_forward_kernel(float *out, float *lse, const float *q, const float *k,
                                                            const float *v, float scale, int T, int D) {
    __shared__ float ks[TILE][DM], vs[TILE][DM];
    size_t head = (size_t)blockIdx.x * T;
    int q0 = blockIdx.y * ROWS, i = q0 + threadIdx.x;
    float qr[DM], acc[DM];
    if (i < T) load_row_<DM>(qr, q + (head + i) * D, D);
#pragma unroll
    for (int d = 0; d < DM; d++) acc[d] = 0.0f;
    float mx = -INFINITY, l = 0.0f;
    int k_end = min(T, q0 + ROWS);  // causal: no key after the block's last query
    for (int k0 = 0; k0 < k_end; k0 += TILE) {
        stage_kv_<DM>(ks, vs, k + head * D, v + head * D, k0, T, D);
        if (i >= T || k0 > i) continue;
        int n = min(TILE, i - k0 + 1);  // keys k0 .. i of this tile are visible
        float s[TILE], tmax = -INFINITY;
#pragma unroll
        for (int j = 0; j < TILE; j++) {
            s[j] = j < n ? dot_<DM>(qr, ks[j]) * scale : -INFINITY;
            tmax = fmaxf(tmax, s[j]);
        }
        float mnew = fmaxf(mx, tmax), corr = expf(mx - mnew);  // exp(-inf) = 0 on the first tile
        l *= corr;
#pragma unroll
        for (int d = 0; d < DM; d++) acc[d] *= corr;
#pragma unroll
        for (int j = 0; j < TILE; j++) {
            float p = j < n ? expf(s[j] - mnew) : 0.0f;
            l += p;
#pragma unroll
            for (int d = 0; d < DM; d++) acc[d] += p * vs[j][d];
        }
        mx = mnew;
    }
    if (i >= T) return;
    float inv = 1.0f / l, *o = out + (head + i) * D;
#pragma unroll
    for (int d = 0; d < DM; d++)
        if (d < D) o[d] = acc[d] * inv;
    lse[head + i] = mx + logf(l);
}

// delta (B*NH*T,) = rowwise dout · out, one warp per row
__global__ void attn_delta_kernel(float *delta, const float *dout, const float *out, size_t rows, int D) {
    size_t r = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    float s = 0.0f;
    for (int d = lane; d < D; d += 32) s += dout[r * D + d] * out[r * D + d];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) delta[r] = s;
}

// dq_i = scale · sum_j p_ij (dout_i·v_j - delta_i) k_j; grid and threads as the forward
template <int DM>
__global__ void __launch_bounds__(ROWS) attn_dq_kernel(float *dq, const float *dout, const float *lse,
                                                       const float *delta, const float *q, const float *k,
                                                       const float *v, float scale, int T, int D) {
    __shared__ float ks[TILE][DM], vs[TILE][DM];
    size_t head = (size_t)blockIdx.x * T;
    int q0 = blockIdx.y * ROWS, i = q0 + threadIdx.x;
    float qr[DM], dor[DM], acc[DM], li = 0.0f, di = 0.0f;
    if (i < T) {
        load_row_<DM>(qr, q + (head + i) * D, D);
        load_row_<DM>(dor, dout + (head + i) * D, D);
        li = lse[head + i];
        di = delta[head + i];
    }
#pragma unroll
    for (int d = 0; d < DM; d++) acc[d] = 0.0f;
    int k_end = min(T, q0 + ROWS);
    for (int k0 = 0; k0 < k_end; k0 += TILE) {
        stage_kv_<DM>(ks, vs, k + head * D, v + head * D, k0, T, D);
        if (i >= T || k0 > i) continue;
        int n = min(TILE, i - k0 + 1);
        for (int j = 0; j < n; j++) {
            float p = expf(dot_<DM>(qr, ks[j]) * scale - li);
            float ds = p * (dot_<DM>(dor, vs[j]) - di);
#pragma unroll
            for (int d = 0; d < DM; d++) acc[d] += ds * ks[j][d];
        }
    }
    if (i >= T) return;
    float *o = dq + (head + i) * D;
#pragma unroll
    for (int d = 0; d < DM; d++)
        if (d < D) o[d] = acc[d] * scale;
}

// dv_j = sum_i p_ij dout_i, dk_j = scale · sum_i p_ij (dout_i·v_j - delta_i) q_i over queries i >= j;
// grid (B*NH, ceil(T/ROWS)), a thread per key row
template <int DM>
__global__ void __launch_bounds__(ROWS) attn_dkdv_kernel(float *dk, float *dv, const float *dout, const float *lse,
                                                         const float *delta, const float *q, const float *k,
                                                         const float *v, float scale, int T, int D) {
    __shared__ float qs[TILE][DM], dos[TILE][DM];
    __shared__ float ls[TILE], ds_[TILE];
    size_t head = (size_t)blockIdx.x * T;
    int j0 = blockIdx.y * ROWS, j = j0 + threadIdx.x;
    float kr[DM], vr[DM], dka[DM], dva[DM];
    if (j < T) {
        load_row_<DM>(kr, k + (head + j) * D, D);
        load_row_<DM>(vr, v + (head + j) * D, D);
    }
#pragma unroll
    for (int d = 0; d < DM; d++) dka[d] = dva[d] = 0.0f;
    for (int i0 = j0; i0 < T; i0 += TILE) {  // causal: no query before the block's first key
        __syncthreads();
        load_tile_<DM>(qs, q + head * D, i0, T, D);
        load_tile_<DM>(dos, dout + head * D, i0, T, D);
        for (int r = threadIdx.x; r < TILE; r += blockDim.x) {
            ls[r] = i0 + r < T ? lse[head + i0 + r] : 0.0f;
            ds_[r] = i0 + r < T ? delta[head + i0 + r] : 0.0f;
        }
        __syncthreads();
        if (j >= T || i0 + TILE <= j) continue;
        int r0 = max(0, j - i0), r1 = min(TILE, T - i0);  // queries i0+r0 .. i0+r1-1 see key j
        for (int r = r0; r < r1; r++) {
            float p = expf(dot_<DM>(qs[r], kr) * scale - ls[r]);
            float dsc = p * (dot_<DM>(dos[r], vr) - ds_[r]);
#pragma unroll
            for (int d = 0; d < DM; d++) {
                dva[d] += p * dos[r][d];
                dka[d] += dsc * qs[r][d];
            }
        }
    }
    if (j >= T) return;
    float *ok = dk + (head + j) * D, *ov = dv + (head + j) * D;
#pragma unroll
    for (int d = 0; d < DM; d++)
        if (d < D) {
            ok[d] = dka[d] * scale;
            ov[d] = dva[d];
        }
}

int gpu_attn_supports(int D) { return D >= 1 && D <= GPU_ATTN_MAX_D; }

// calls fn<DM> for the smallest DM of 32, 64, 128 that holds D
#define DISPATCH_DM_(D, CALL) \
    do {                      \
        if ((D) <= 32) {      \
            constexpr int DM = 32; CALL; \
        } else if ((D) <= 64) { \
            constexpr int DM = 64; CALL; \
        } else {              \
            constexpr int DM = 128; CALL; \
        }                     \
    } while (0)

void gpu_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v, float scale, int B,
                           int NH, int T, int D) {
    dim3 grid(B * NH, gpu_blocks(T, ROWS));
    DISPATCH_DM_(D, (attn_forward_kernel<DM><<<grid, ROWS>>>(out, lse, q, k, v, scale, T, D)));
    KERNEL_CHECK();
}

void gpu_attention_backward(float *dq, float *dk, float *dv, float *delta, const float *dout, const float *out,
                            const float *lse, const float *q, const float *k, const float *v, float scale, int B,
                            int NH, int T, int D) {
    size_t rows = (size_t)B * NH * T;
    attn_delta_kernel<<<gpu_blocks(rows, 8), 256>>>(delta, dout, out, rows, D);
    KERNEL_CHECK();
    dim3 grid(B * NH, gpu_blocks(T, ROWS));
    DISPATCH_DM_(D, (attn_dq_kernel<DM><<<grid, ROWS>>>(dq, dout, lse, delta, q, k, v, scale, T, D)));
    KERNEL_CHECK();
    DISPATCH_DM_(D, (attn_dkdv_kernel<DM><<<grid, ROWS>>>(dk, dv, dout, lse, delta, q, k, v, scale, T, D)));
    KERNEL_CHECK();
}
