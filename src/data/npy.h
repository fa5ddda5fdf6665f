/*
 * NumPy .npy arrays of integer token ids (the format `seqeval --probe` and the reference tests read).
 * Versions 1-3 of the format; little-endian int32, int64, uint16 or uint32; C order; 1 or 2 dimensions.
 */
#ifndef SEQ_NPY_H
#define SEQ_NPY_H

#include "core/err.h"

// *out (rows * cols,) malloc'd; a 1-D array of n values gives rows = n, cols = 1 (*ndim says which)
int npy_read_ints(const char *path, long **out, long *rows, long *cols, int *ndim, Err *e);

#endif
