/*
 * The tensor-core instructions the backend's kernels use, emulated on the CPU for tests/gpu/emu: TF32 rounding
 * (nvcuda::wmma::__float_to_tf32, from CUDA's <mma.h>) and the warp-wide mma.sync m16n8k8 with TF32 operands and
 * m16n8k16 with bf16 operands, fp32 accumulators (inline PTX on the GPU: gpu/mma.cuh). The emulated mma.sync takes each lane's
 * registers in the layout PTX documents for that shape, so the kernels' fragment indexing is checked here as on
 * the GPU (lane = 4 g + t; m16n8k8 here, m16n8k16 below):
 *
 *   A (16x8)  a0 (g, t)   a1 (g+8, t)   a2 (g, t+4)   a3 (g+8, t+4)
 *   B (8x8)   b0 (t, g)   b1 (t+4, g)
 *   C (16x8)  c0 (g, 2t)  c1 (g, 2t+1)  c2 (g+8, 2t)  c3 (g+8, 2t+1)
 *
 * __float_to_tf32 rounds as the GPU's cvt.rna.tf32.f32 (to the nearest 10-bit mantissa, ties away from zero),
 * so the 3xTF32 split of the fp32 mode is exercised with the real rounding; the products are then added in
 * float in k order (the tensor cores' order and internal precision differ: rounding-level differences only).
 */
#ifndef SEQ_GPU_EMU_MMA_H
#define SEQ_GPU_EMU_MMA_H

#include <string.h>

#include "cuda_runtime.h"

namespace nvcuda {
namespace wmma {

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

}  // namespace wmma
}  // namespace nvcuda

// every lane's A and B registers (a0..a3, b0, b1; 32-bit words), exchanged through this
inline unsigned emu_mma_regs_[EMU_MAX_THREADS][6];

// the bf16 in half `hi` of a register, as a float (exact)
static inline float emu_bf16_half_(unsigned r, int hi) {
    unsigned u = (hi ? r >> 16 : r & 0xffffu) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// An m16n8kK mma.sync over the calling warp: d += A B, each lane passing its registers a[4], b[2] and getting its
// 4 elements of d (C's layout above); like the instruction, every lane of the warp must call it. elem(word, i) is
// element i of an exchanged register word as a float; the products are added in k order.
template <int K, typename Elem>
static inline void emu_mma_(float d[4], const unsigned a[4], const unsigned b[2], Elem elem) {
    int tid = emu_linear_tid_(), base = tid & ~31, g = (tid & 31) >> 2, t = tid & 3;
    memcpy(emu_mma_regs_[tid], a, 4 * sizeof(unsigned));
    memcpy(emu_mma_regs_[tid] + 4, b, 2 * sizeof(unsigned));
    emu_wait_(EMU_WAIT_WARP);
    constexpr int L = K / 8;  // elements a register: 1 (TF32), 2 (bf16)
    float out[4];
    for (int e = 0; e < 4; e++) {
        int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        float s = d[e];
        for (int kk = 0; kk < K; kk++) {
            // A (row, kk): lane (row % 8, (kk % 4L) / L), register row / 8 + 2 (kk / 4L); B (kk, col): lane (col,
            // (kk % 4L) / L), register 4 + kk / 4L; within the register, element kk % L
            int q = (kk % (4 * L)) / L, r = kk / (4 * L), half = kk % L;
            float av = elem(emu_mma_regs_[base + (row & 7) * 4 + q][(row >> 3) + 2 * r], half);
            float bv = elem(emu_mma_regs_[base + col * 4 + q][4 + r], half);
            s += av * bv;
        }
        out[e] = s;
    }
    emu_wait_(EMU_WAIT_WARP);  // everyone has read before anyone writes again
    memcpy(d, out, sizeof out);
}

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (the registers float bit patterns)
static inline void emu_mma_m16n8k8_tf32(float d[4], const float a[4], const float b[2]) {
    unsigned ua[4], ub[2];
    memcpy(ua, a, sizeof ua);
    memcpy(ub, b, sizeof ub);
    emu_mma_<8>(d, ua, ub, [](unsigned r, int) {
        float f;
        memcpy(&f, &r, 4);
        return f;
    });
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: each register two bf16, the lower column (A) or row (B) in
// the low half (lane = 4 g + t):
//   A (16x16)  a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
//   B (16x8)   b0 (2t..2t+1, g)  b1 (2t+8..2t+9, g)
// The products of two bf16 are exact in float.
static inline void emu_mma_m16n8k16_bf16(float d[4], const unsigned a[4], const unsigned b[2]) {
    emu_mma_<16>(d, a, b, emu_bf16_half_);
}

// every lane's row address for ldmatrix, exchanged through this
inline const void *emu_ldmatrix_rows_[EMU_MAX_THREADS];

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 over the calling warp: lane l gives the address of row l % 8
// of matrix l / 8 (eight 16-bit elements); lane 4g + t gets in r[i] matrix i's elements (g, 2t), (g, 2t+1), or
// with trans (2t, g), (2t+1, g), the first in the low half
static inline void emu_ldmatrix_x4(unsigned r[4], const void *p, bool trans) {
    int tid = emu_linear_tid_(), base = tid & ~31, g = (tid & 31) >> 2, t = tid & 3;
    if ((size_t)p % 16) {
        fprintf(stderr, "emulated CUDA: ldmatrix row address %p not 16-byte aligned\n", p);
        abort();
    }
    emu_ldmatrix_rows_[tid] = p;
    emu_wait_(EMU_WAIT_WARP);
    unsigned out[4];
    for (int i = 0; i < 4; i++) {
        unsigned short e[2];
        for (int h = 0; h < 2; h++) {
            int row = trans ? 2 * t + h : g, col = trans ? g : 2 * t + h;
            memcpy(&e[h], (const unsigned short *)emu_ldmatrix_rows_[base + 8 * i + row] + col, 2);
        }
        out[i] = e[0] | (unsigned)e[1] << 16;
    }
    emu_wait_(EMU_WAIT_WARP);  // everyone has read before anyone writes again
    memcpy(r, out, sizeof out);
}

#endif
