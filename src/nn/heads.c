/*
 * Head permutations: one memcpy of D floats per (b, t, h); parallel over (b, t).
 */
#include "nn/heads.h"

#include <stddef.h>
#include <string.h>

void heads_split(float *dst, const float *src, int B, int T, int H, int D) {
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++)
                memcpy(dst + (((size_t)b * H + h) * T + t) * D, src + (((size_t)b * T + t) * H + h) * D,
                       (size_t)D * sizeof(float));
}

void heads_merge(float *dst, const float *src, int B, int T, int H, int D) {
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++)
                memcpy(dst + (((size_t)b * T + t) * H + h) * D, src + (((size_t)b * H + h) * T + t) * D,
                       (size_t)D * sizeof(float));
}
