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

// every lane's A and B registers, exchanged through this (a0..a3, b0, b1 per thread)
inline float emu_mma_regs_[EMU_MAX_THREADS][6];

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32: d += A B over the calling warp, each lane passing its
// registers (a[4], b[2]) and getting its 4 elements of d. Like the instruction, every lane of the warp must call it.
static inline void emu_mma_m16n8k8_tf32(float d[4], const float a[4], const float b[2]) {
    int tid = emu_linear_tid_(), base = tid & ~31, g = (tid & 31) >> 2, t = tid & 3;
    memcpy(emu_mma_regs_[tid], a, 4 * sizeof(float));
    memcpy(emu_mma_regs_[tid] + 4, b, 2 * sizeof(float));
    emu_wait_(EMU_WAIT_WARP);
    float out[4];
    for (int e = 0; e < 4; e++) {
        int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        float s = d[e];
        for (int kk = 0; kk < 8; kk++) {
            float av = emu_mma_regs_[base + (row & 7) * 4 + (kk & 3)][(row >> 3) + 2 * (kk >> 2)];
            float bv = emu_mma_regs_[base + col * 4 + (kk & 3)][4 + (kk >> 2)];
            s += av * bv;
        }
        out[e] = s;
    }
    emu_wait_(EMU_WAIT_WARP);  // everyone has read before anyone writes again
    memcpy(d, out, sizeof out);
}


// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: each register two bf16, the lower column (A) or row (B) in
// the low half (lane = 4 g + t):
//   A (16x16)  a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
//   B (16x8)   b0 (2t..2t+1, g)  b1 (2t+8..2t+9, g)
// The products of two bf16 are exact in float; they are added in k order.
inline unsigned emu_mma_regs16_[EMU_MAX_THREADS][6];

static inline float emu_bf16_half_(unsigned r, int hi) {
    unsigned u = (hi ? r >> 16 : r & 0xffffu) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline void emu_mma_m16n8k16_bf16(float d[4], const unsigned a[4], const unsigned b[2]) {
    int tid = emu_linear_tid_(), base = tid & ~31, g = (tid & 31) >> 2, t = tid & 3;
    memcpy(emu_mma_regs16_[tid], a, 4 * sizeof(unsigned));
    memcpy(emu_mma_regs16_[tid] + 4, b, 2 * sizeof(unsigned));
    emu_wait_(EMU_WAIT_WARP);
    float out[4];
    for (int e = 0; e < 4; e++) {
        int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        float s = d[e];
        for (int kk = 0; kk < 16; kk++) {
            // A (row, kk): lane (row % 8, (kk % 8) / 2), register (row / 8) + 2 (kk / 8), half kk % 2
            float av = emu_bf16_half_(emu_mma_regs16_[base + (row & 7) * 4 + ((kk & 7) >> 1)][(row >> 3) + 2 * (kk >> 3)],
                                      kk & 1);
            // B (kk, col): lane (col, (kk % 8) / 2), register kk / 8, half kk % 2
            float bv = emu_bf16_half_(emu_mma_regs16_[base + col * 4 + ((kk & 7) >> 1)][4 + (kk >> 3)], kk & 1);
            s += av * bv;
        }
        out[e] = s;
    }
    emu_wait_(EMU_WAIT_WARP);
    memcpy(d, out, sizeof out);
}

#endif
