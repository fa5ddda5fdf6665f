// libFuzzer harness: the .npy reader (data/npy.h) on arbitrary files.
#include "fuzz_common.h"
#include "data/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[256];
    fuzz_write("x.npy", data, size, path, sizeof path);
    long *v = NULL, rows = 0, cols = 0;
    int ndim = 0;
    Err e;
    if (npy_read_ints(path, &v, &rows, &cols, &ndim, &e) == 0) {
        unsigned long sum = 0;
        for (long i = 0; i < rows * cols; i++) sum += (unsigned long)v[i];  // every element must be readable (ASan)
        if (ndim < 1 || ndim > 2 || rows < 0 || cols < 1) abort();
        free(v);
        (void)sum;
    }
    return 0;
}
