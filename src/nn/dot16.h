/*
 * A dot product for the one-row kernels (decoding steps, PaTH's Householder products): 16 interleaved partial
 * sums folded by a fixed tree, so the compiler vectorises the reduction without -ffast-math (one running sum
 * is a chain of dependent adds) and every kernel set adds in the same order.
 */
#ifndef SEQ_DOT16_H
#define SEQ_DOT16_H

static inline float dot16(const float *a, const float *b, int d) {
    float acc[16] = {0};
    int i = 0;
    for (; i + 16 <= d; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += a[i + j] * b[i + j];
    for (int j = 0; i + j < d; j++) acc[j] += a[i + j] * b[i + j];
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

#endif
