#include "nn/blockdiag.h"

#include <stdlib.h>

#include "core/err.h"

// The loops take the block sizes as arguments of inline functions that the callers invoke with the constants 4, 4
// (xLSTM's default qkv_proj_blocksize) or with the runtime sizes: with constants the compiler unrolls a block
// into a few vector operations, which the runtime-size loops (a reduction of 4 products) never become.

// y (Do) per block from x (Di), wt (G, Di, Do): the weights transposed so that one input multiplies a contiguous row
static inline void fwd_row_(float *restrict y, const float *restrict x, const float *restrict wt, int G, int Di,
                            int Do) {
    for (int g = 0; g < G; g++) {
        const float *xg = x + (size_t)g * Di, *wg = wt + (size_t)g * Di * Do;
        float *yg = y + (size_t)g * Do;
        for (int o = 0; o < Do; o++) yg[o] = 0.0f;
        for (int i = 0; i < Di; i++) {
            float xi = xg[i];
            for (int o = 0; o < Do; o++) yg[o] += wg[(size_t)i * Do + o] * xi;
        }
    }
}

// dx (Di) per block += sum_o dy[o] w[g, o, :]
static inline void bwd_row_(float *restrict dx, const float *restrict dy, const float *restrict w, int G, int Di,
                            int Do) {
    for (int g = 0; g < G; g++) {
        const float *wg = w + (size_t)g * Do * Di, *dyg = dy + (size_t)g * Do;
        float *dxg = dx + (size_t)g * Di;
        for (int o = 0; o < Do; o++) {
            float d = dyg[o];
            for (int i = 0; i < Di; i++) dxg[i] += d * wg[(size_t)o * Di + i];
        }
    }
}

// acc (Do, Di) = sum over the N rows, in order, of block g's dy x^T
static inline void dw_block_(double *restrict acc, const float *restrict dout, const float *restrict inp, size_t N,
                             size_t ci, size_t co, int g, int Di, int Do) {
    for (int j = 0; j < Do * Di; j++) acc[j] = 0.0;
    for (size_t n = 0; n < N; n++) {
        const float *dyg = dout + n * co + (size_t)g * Do, *xg = inp + n * ci + (size_t)g * Di;
        for (int o = 0; o < Do; o++) {
            double d = dyg[o];
            for (int i = 0; i < Di; i++) acc[o * Di + i] += d * xg[i];
        }
    }
}

void blockdiag_forward(float *out, const float *inp, const float *w, int N, int G, int Di, int Do) {
    size_t ci = (size_t)G * Di, co = (size_t)G * Do, nw = (size_t)G * Di * Do;
    float *wt = xmalloc(nw * sizeof(float));
    for (int g = 0; g < G; g++)
        for (int o = 0; o < Do; o++)
            for (int i = 0; i < Di; i++) wt[((size_t)g * Di + i) * Do + o] = w[((size_t)g * Do + o) * Di + i];
    int four = Di == 4 && Do == 4;
#pragma omp parallel for schedule(static)
    for (long n = 0; n < (long)N; n++) {
        if (four) fwd_row_(out + (size_t)n * co, inp + (size_t)n * ci, wt, G, 4, 4);
        else fwd_row_(out + (size_t)n * co, inp + (size_t)n * ci, wt, G, Di, Do);
    }
    free(wt);
}

void blockdiag_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w, int N, int G,
                        int Di, int Do) {
    size_t ci = (size_t)G * Di, co = (size_t)G * Do;
    int four = Di == 4 && Do == 4;
    if (dinp) {
#pragma omp parallel for schedule(static)
        for (long n = 0; n < (long)N; n++) {
            if (four) bwd_row_(dinp + (size_t)n * ci, dout + (size_t)n * co, w, G, 4, 4);
            else bwd_row_(dinp + (size_t)n * ci, dout + (size_t)n * co, w, G, Di, Do);
        }
    }
    if (dw) {
        // one block per iteration, rows in order (the same sums whatever the thread count)
#pragma omp parallel
        {
            double *acc = xmalloc((size_t)Do * Di * sizeof(double));
#pragma omp for schedule(static)
            for (int g = 0; g < G; g++) {
                if (four) dw_block_(acc, dout, inp, (size_t)N, ci, co, g, 4, 4);
                else dw_block_(acc, dout, inp, (size_t)N, ci, co, g, Di, Do);
                float *dwg = dw + (size_t)g * Do * Di;
                for (int j = 0; j < Do * Di; j++) dwg[j] += (float)acc[j];
            }
            free(acc);
        }
    }
}
