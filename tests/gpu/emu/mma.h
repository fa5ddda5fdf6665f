/*
 * CUDA's warp matrix functions (nvcuda::wmma, <mma.h>) emulated on the CPU for tests/gpu/emu: the shapes and
 * types the backend uses (m16n16k8 with precision::tf32 inputs and float accumulators). On the GPU a fragment
 * is spread over the 32 lanes of a warp in an undocumented layout; here every lane (fiber) holds the whole
 * tile, so each lane's load, mma and store do the whole warp's work. The kernels touch fragments only through
 * these calls and element-wise loops over x[0, num_elements) that treat every element alike (the tf32
 * rounding), which mean the same in both layouts.
 *
 * __float_to_tf32 rounds as the GPU's cvt.rna.tf32.f32 (to the nearest 10-bit mantissa, ties away from zero),
 * so the 3xTF32 split of the fp32 mode is exercised with the real rounding; the products are then added in
 * float in k order (the tensor cores' order and internal precision differ: rounding-level differences only).
 */
#ifndef SEQ_GPU_EMU_MMA_H
#define SEQ_GPU_EMU_MMA_H

#include <string.h>

#include <type_traits>

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
namespace precision {
struct tf32 {};
}  // namespace precision
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
    static constexpr int rows = std::is_same<Use, matrix_b>::value ? K : M;
    static constexpr int cols = std::is_same<Use, matrix_a>::value ? K : N;
    enum { num_elements = rows * cols };
    float x[num_elements];
};

static inline float __float_to_tf32(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) {  // finite: round the 13 dropped bits, ties away from zero
        u += 0x1000u;
        u &= 0xffffe000u;
    }
    memcpy(&f, &u, 4);
    return f;
}

template <typename Use, int M, int N, int K, typename T, typename L>
static inline void fill_fragment(fragment<Use, M, N, K, T, L> &f, float v) {
    for (int i = 0; i < f.num_elements; i++) f.x[i] = v;
}

// matrix_a / matrix_b: the layout is the fragment's
template <typename Use, int M, int N, int K, typename T, typename L>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const float *p, unsigned ldm) {
    typedef fragment<Use, M, N, K, T, L> F;
    for (int r = 0; r < F::rows; r++)
        for (int c = 0; c < F::cols; c++)
            f.x[r * F::cols + c] = std::is_same<L, col_major>::value ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}

// accumulators: the layout is an argument
template <int M, int N, int K>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, float, void> &f, const float *p, unsigned ldm,
                                    layout_t l) {
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++) f.x[r * N + c] = l == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}

template <int M, int N, int K>
static inline void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float, void> &f, unsigned ldm,
                                     layout_t l) {
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++) {
            float *q = l == mem_col_major ? p + (size_t)c * ldm + r : p + (size_t)r * ldm + c;
            *q = f.x[r * N + c];
        }
}

// d = a b + c
template <int M, int N, int K, typename T, typename LA, typename LB>
static inline void mma_sync(fragment<accumulator, M, N, K, float, void> &d, const fragment<matrix_a, M, N, K, T, LA> &a,
                            const fragment<matrix_b, M, N, K, T, LB> &b,
                            const fragment<accumulator, M, N, K, float, void> &c) {
    float out[M * N];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = c.x[i * N + j];
            for (int k = 0; k < K; k++) s += a.x[i * K + k] * b.x[k * N + j];
            out[i * N + j] = s;
        }
    memcpy(d.x, out, sizeof out);
}

}  // namespace wmma
}  // namespace nvcuda

#endif
