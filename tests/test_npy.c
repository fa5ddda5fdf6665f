/*
 * The .npy reader (data/npy.h) on good and hostile files, among them the two that fuzz/fuzz_npy.c found: a
 * shape whose product overflows (2^62 x 4 int32 values), which must not become a wrapped-around buffer that
 * fread overruns, and a header length of 4 GiB, which must be checked against the file before anything is
 * allocated. Both are errors, as is a FIFO (refused before it can block).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/npy.h"
#include "test.h"

static char dir_[64];

static void write_npy_(const char *path, int version, const char *header, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    size_t hl = strlen(header);
    unsigned char pre[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', (unsigned char)version, 0};
    size_t np = version >= 2 ? 12 : 10;
    for (size_t k = 0; k < np - 8; k++) pre[8 + k] = (unsigned char)(hl >> (8 * k));
    fwrite(pre, 1, np, f);
    fwrite(header, 1, hl, f);
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

int main(void) {
    snprintf(dir_, sizeof dir_, "/tmp/test_npy.XXXXXX");
    if (!mkdtemp(dir_)) return 1;
    char path[128];
    long *v = NULL, r = 0, c = 0;
    int nd = 0;
    Err e = {{0}};

    snprintf(path, sizeof path, "%s/good.npy", dir_);
    int32_t vals[6] = {1, -2, 3, 4, 5, 6};
    write_npy_(path, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }\n", vals, sizeof vals);
    CHECK(npy_read_ints(path, &v, &r, &c, &nd, &e) == 0 && r == 2 && c == 3 && nd == 2 && v[1] == -2 && v[5] == 6,
          "a 2 x 3 int32 array reads");
    free(v);

    snprintf(path, sizeof path, "%s/overflow.npy", dir_);
    write_npy_(path, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }\n", vals,
               sizeof vals);
    CHECK(npy_read_ints(path, &v, &r, &c, &nd, &e) != 0, "shape 2^62 x 4 (the product overflows) is an error");
    CHECK_CONTAINS(e.msg, "needs more values", "... saying the file is too small for the shape");

    snprintf(path, sizeof path, "%s/short.npy", dir_);
    write_npy_(path, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3, 3), }\n", vals, sizeof vals);
    CHECK(npy_read_ints(path, &v, &r, &c, &nd, &e) != 0, "shape 3 x 3 with 6 values is an error");

    snprintf(path, sizeof path, "%s/bighdr.npy", dir_);
    FILE *f = fopen(path, "wb");
    fwrite("\x93NUMPY\x02\x00\xff\xff\xff\xff{}", 1, 14, f);  // version 2: a 4 GiB header length
    fclose(f);
    CHECK(npy_read_ints(path, &v, &r, &c, &nd, &e) != 0, "a header length of 4 GiB in a 14-byte file is an error");
    CHECK_CONTAINS(e.msg, "truncated header", "... a truncated header");

    snprintf(path, sizeof path, "%s/fifo.npy", dir_);
    CHECK(mkfifo(path, 0600) == 0, "mkfifo");
    CHECK(npy_read_ints(path, &v, &r, &c, &nd, &e) != 0, "a FIFO is refused (and does not block)");
    CHECK_CONTAINS(e.msg, "not a regular file", "... as not a regular file");

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir_);
    return test_summary();
}
