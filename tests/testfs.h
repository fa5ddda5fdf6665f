/*
 * Files for tests: one temporary directory per test program, paths inside it, and whole-file read and
 * write. Shared so that every test builds its fixtures the same way.
 *
 *   if (testfs_init("seqtrain_shard") != 0) return 1;   // mkdtemp /tmp/seqtrain_shard_XXXXXX into dir_
 *   path_(p, sizeof p, "a.shard");                        // dir_/a.shard
 */
#ifndef SEQ_TESTFS_H
#define SEQ_TESTFS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static char dir_[64];

static inline int testfs_init(const char *prefix) {
    snprintf(dir_, sizeof dir_, "/tmp/%s_XXXXXX", prefix);
    if (!mkdtemp(dir_)) {
        perror("mkdtemp");
        return -1;
    }
    return 0;
}

static inline void path_(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir_, name); }

static inline void file_write_(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

// the whole file in a malloc'd buffer of *n bytes plus a terminating NUL; NULL (and *n = 0) if unreadable
static inline uint8_t *file_read_(const char *path, size_t *n) {
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(size > 0 ? (size_t)size + 1 : 1);
    *n = size > 0 ? fread(buf, 1, (size_t)size, f) : 0;
    buf[*n] = 0;
    fclose(f);
    return buf;
}

#endif
