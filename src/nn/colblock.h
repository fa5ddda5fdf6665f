/*
 * Column blocks for the sums over rows that threads split by columns: a bias or norm weight gradient,
 * sum over N rows of each of C columns. Each column is summed over the rows in order, whatever the block
 * width, so the width never changes a result; it only decides how many threads get work.
 */
#ifndef SEQ_NN_COLBLOCK_H
#define SEQ_NN_COLBLOCK_H

#ifdef _OPENMP
#include <omp.h>
#endif

#define COL_BLOCK_MAX_ 64  // floats: 4 cache lines of a row per block, and the accumulators stay in L1

// 64 columns when that gives every thread a block, else narrower, down to 16 (one cache line: threads still
// never share a line of the output). At d_model 256, 64-wide blocks kept 12 of 16 threads idle.
static inline int col_block_width_(int C) {
    int threads = 1;
#ifdef _OPENMP
    threads = omp_in_parallel() ? 1 : omp_get_max_threads();
#endif
    int w = COL_BLOCK_MAX_;
    while (w > 16 && (C + w - 1) / w < threads) w /= 2;
    return w;
}

#endif
