/*
 * Token embedding forward and backward (see embedding.h).
 *
 * The backward scatters rows into dwte, and two positions with the same id would race if positions
 * were split over threads. Splitting the columns instead gives every thread whole columns of dwte,
 * which it fills by walking the positions in order: no atomics, no per-thread copies of dwte (which
 * is V*C floats), and the sum order per element is fixed whatever the thread count.
 */
#include "nn/embedding.h"

#include <stddef.h>

// columns per work item in the backward: 16 floats = one 64-byte cache line, so threads never share
// a line of dwte
#define EMB_COL_BLOCK_ 16

int embedding_check_ids(const int *ids, int N, int V) {
    // ids is (N,)
    for (int n = 0; n < N; n++) {
        if (ids[n] < 0 || ids[n] >= V) return n;
    }
    return -1;
}

void embedding_forward(float *out, const int *ids, const float *wte, int N, int C) {
    // out is (N,C): one embedding row per position
    // ids is (N,): token ids in [0,V)
    // wte is (V,C): the token embedding table
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *wte_id = wte + (size_t)ids[n] * C;
        float *out_n = out + (size_t)n * C;
        for (int i = 0; i < C; i++) out_n[i] = wte_id[i];
    }
}

void embedding_backward(float *dwte, const float *dout, const int *ids, int N, int C) {
    // dwte is (V,C), accumulated into
    // dout is (N,C): gradient w.r.t. the forward's out
    // ids is (N,): as in the forward
    int n_blocks = (C + EMB_COL_BLOCK_ - 1) / EMB_COL_BLOCK_;
#pragma omp parallel for schedule(static)
    for (int cb = 0; cb < n_blocks; cb++) {
        int c0 = cb * EMB_COL_BLOCK_;
        int c1 = c0 + EMB_COL_BLOCK_ < C ? c0 + EMB_COL_BLOCK_ : C;
        for (int n = 0; n < N; n++) {
            const float *dout_n = dout + (size_t)n * C;
            float *dwte_id = dwte + (size_t)ids[n] * C;
            // in the forward pass this was:
            // out_n[i] = wte_id[i];
            for (int i = c0; i < c1; i++) dwte_id[i] += dout_n[i];
        }
    }
}
