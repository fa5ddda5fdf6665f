// Column sums in a fixed order (gpu/colsum.cuh).
#include "gpu/colsum.cuh"

static GpuWork colsum_work_ = {NULL, 0};  // the partials' device buffer (common.cuh)

// column sums in two passes: rows in fixed chunks of COL_CHUNK, one partial per (chunk, column), then the
// partials added in chunk order
#define COL_CHUNK 64
#define COL_ROWS 8  // a chunk's rows are split over COL_ROWS threads (r, r + 8, ...), added in that order after

// partial (n_chunks, 2, C): per chunk, the sum of dout and of dout·xhat (the norms' weight gradient); dout's rows
// (floats or bf16) ld apart. A block (32, COL_ROWS) covers 32·V columns of one chunk: thread (x, y) sums V
// adjacent columns (V 4: one 16- or 8-byte load a row) over the chunk's rows y, y + COL_ROWS, ...
template <int V, typename DT>
__global__ void colsum_partial_kernel(float *partial, const DT *dout, size_t ld, const float *inp, const float *mean,
                                      const float *rstd, int N, int C, int mode) {
    __shared__ float sh[COL_ROWS][32][2 * V];
    int c = (blockIdx.y * 32 + threadIdx.x) * V, chunk = blockIdx.x, ty = threadIdx.y;  // chunks on x: gridDim.y
    int r1 = min(N, (chunk + 1) * COL_CHUNK);                                             // stops at 65535
    float s[V], sx[V];
    for (int e = 0; e < V; e++) s[e] = sx[e] = 0.0f;
    if (c < C)
        for (int r = chunk * COL_CHUNK + ty; r < r1; r += COL_ROWS) {
            float d[V], x[V];
            load_elts_<V>(d, dout + (size_t)r * ld + c);
            if (mode != COLSUM_PLAIN) load_elts_<V>(x, inp + (size_t)r * C + c);
            float mu = mode == COLSUM_LAYERNORM ? mean[r] : 0.0f, rs = mode != COLSUM_PLAIN ? rstd[r] : 0.0f;
            for (int e = 0; e < V; e++) {
                s[e] += d[e];
                if (mode != COLSUM_PLAIN) sx[e] += d[e] * (x[e] - mu) * rs;
            }
        }
    for (int e = 0; e < V; e++) sh[ty][threadIdx.x][e] = s[e], sh[ty][threadIdx.x][V + e] = sx[e];
    __syncthreads();
    if (ty != 0 || c >= C) return;
    for (int e = 0; e < V; e++) {
        float a = 0.0f, b = 0.0f;
        for (int y = 0; y < COL_ROWS; y++) a += sh[y][threadIdx.x][e], b += sh[y][threadIdx.x][V + e];
        partial[((size_t)chunk * 2) * C + c + e] = a;
        partial[((size_t)chunk * 2 + 1) * C + c + e] = b;
    }
}

// dsum (C,) += sum of partial[., 0, .]; dxhat (C,) += sum of partial[., 1, .] (either may be NULL)
__global__ void colsum_finish_kernel(float *dsum, float *dxhat, const float *partial, int n_chunks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f, sx = 0.0f;
    for (int k = 0; k < n_chunks; k++) {
        s += partial[((size_t)k * 2) * C + c];
        sx += partial[((size_t)k * 2 + 1) * C + c];
    }
    if (dsum) dsum[c] += s;
    if (dxhat) dxhat[c] += sx;
}

template <int V>
static void colsum_launch_(float *partial, GpuAct dout, size_t ld, const float *inp, const float *mean,
                           const float *rstd, int N, int C, int mode) {
    dim3 grid((N + COL_CHUNK - 1) / COL_CHUNK, gpu_blocks(C, 32 * V)), block(32, COL_ROWS);
    if (dout.bf16)
        colsum_partial_kernel<V, __nv_bfloat16><<<grid, block>>>(partial, (const __nv_bfloat16 *)dout.p, ld, inp, mean,
                                                                 rstd, N, C, mode);
    else
        colsum_partial_kernel<V, float><<<grid, block>>>(partial, (const float *)dout.p, ld, inp, mean, rstd, N, C,
                                                         mode);
    KERNEL_CHECK();
}

void gpu_colsum(float *dsum, float *dxhat, GpuAct dout, const float *inp, const float *mean, const float *rstd,
                int N, int C, int mode) {
    int n_chunks = (N + COL_CHUNK - 1) / COL_CHUNK;
    size_t ld = dout.ld ? dout.ld : C;
    float *partial = gpu_work_floats(&colsum_work_, (size_t)n_chunks * 2 * C);
    // V 4 when every row's start is aligned for the vector loads
    if (C % 4 == 0 && ld % 4 == 0 && aligned16_(dout.p) && aligned16_(inp))
        colsum_launch_<4>(partial, dout, ld, inp, mean, rstd, N, C, mode);
    else colsum_launch_<1>(partial, dout, ld, inp, mean, rstd, N, C, mode);
    colsum_finish_kernel<<<gpu_blocks(C, 128), 128>>>(dsum, dxhat, partial, n_chunks, C);
    KERNEL_CHECK();
}
