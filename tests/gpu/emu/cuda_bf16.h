/*
 * CUDA's bfloat16 type (<cuda_bf16.h>) emulated on the CPU for tests/gpu/emu: the bits of a bf16 (the top 16
 * of a float), the two conversions the backend uses, rounding as the GPU does (to nearest, ties to even), and
 * its bits as an unsigned short.
 */
#ifndef SEQ_GPU_EMU_CUDA_BF16_H
#define SEQ_GPU_EMU_CUDA_BF16_H

#include <string.h>

struct __nv_bfloat16 {
    unsigned short x;
};

static inline __nv_bfloat16 __float2bfloat16(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) u = 0x7fc00000u;  // NaN stays a NaN
    else u += 0x7fffu + ((u >> 16) & 1u);                 // to nearest, ties to even (inf stays inf)
    __nv_bfloat16 b;
    b.x = (unsigned short)(u >> 16);
    return b;
}

static inline float __bfloat162float(__nv_bfloat16 b) {
    unsigned u = (unsigned)b.x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.x; }

#endif
