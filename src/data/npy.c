#include "data/npy.h"
#include "core/files.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int npy_read_ints(const char *path, long **out, long *rows, long *cols, int *ndim, Err *e) {
    int not_regular;
    unsigned mode = 0;
    FILE *f = fopen_regular(path, &not_regular, &mode);
    if (!f && not_regular) return err_set(e, "%s: is %s, not a regular file", path, file_kind(mode));
    if (!f) return err_set(e, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    uint64_t size = fstat(fileno(f), &st) == 0 ? (uint64_t)st.st_size : 0;
    unsigned char pre[12];
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        fclose(f);
        return err_set(e, "%s: not a .npy file", path);
    }
    size_t hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
    if (pre[6] >= 2) {  // versions 2 and 3 have a 4-byte header length
        if (fread(pre + 10, 1, 2, f) != 2) { fclose(f); return err_set(e, "%s: truncated header", path); }
        hlen |= (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    }
    size_t pre_len = pre[6] >= 2 ? 12 : 10;
    if (hlen > size - pre_len) {  // before allocating: the header must be in the file
        fclose(f);
        return err_set(e, "%s: truncated header (%zu bytes announced, the file has %llu)", path, hlen,
                       (unsigned long long)size);
    }
    char *h = xcalloc(hlen + 1, 1);
    if (fread(h, 1, hlen, f) != hlen) {
        free(h);
        fclose(f);
        return err_set(e, "%s: truncated header", path);
    }
    // width in bytes, negative for unsigned types
    int width = strstr(h, "'<i8'") ? 8 : strstr(h, "'<i4'") ? 4 : strstr(h, "'<u4'") ? -4 : strstr(h, "'<u2'") ? -2 : 0;
    const char *sh = strstr(h, "'shape': (");
    long r = 0, c = 1;
    int nd = 0;
    if (sh) {
        char *end;
        r = strtol(sh + 10, &end, 10);
        nd = end != sh + 10;
        if (nd && *end == ',' && end[1] == ' ' && end[2] != ')') {
            c = strtol(end + 2, &end, 10);
            nd = 2;
        }
        if (nd && *end != ')' && !(*end == ',' && end[1] == ')')) nd = 3;  // three or more dimensions
    }
    int fortran = strstr(h, "'fortran_order': True") != NULL;
    free(h);
    if (!width || fortran || nd < 1 || nd > 2 || r <= 0 || c <= 0) {
        fclose(f);
        return err_set(e, "%s: need a C-order int32/int64/uint16/uint32 array of 1 or 2 dimensions", path);
    }
    uint64_t w = (uint64_t)(width < 0 ? -width : width), avail = (size - pre_len - hlen) / w;
    if ((uint64_t)r > avail || (uint64_t)c > avail / (uint64_t)r) {  // r, c > 0 here
        fclose(f);
        return err_set(e, "%s: shape %ld x %ld needs more values than the file's %llu", path, r, c,
                       (unsigned long long)avail);
    }
    size_t n = (size_t)r * (size_t)c;
    unsigned char *raw = xmalloc(n * w);
    size_t got = fread(raw, w, n, f);
    fclose(f);
    if (got != n) {
        free(raw);
        return err_set(e, "%s: holds %zu of %zu values", path, got, n);
    }
    long *v = xmalloc(n * sizeof(long));
    for (size_t i = 0; i < n; i++) {
        uint64_t x = 0;
        for (size_t k = 0; k < w; k++) x |= (uint64_t)raw[i * w + k] << (8 * k);
        v[i] = width == 4 ? (long)(int32_t)(uint32_t)x : width == 8 ? (long)(int64_t)x : (long)x;
    }
    free(raw);
    *out = v;
    *rows = r;
    *cols = c;
    *ndim = nd;
    return 0;
}
