/*
 * Shared by the libFuzzer harnesses (fuzz/fuzz_*.c, docs/fuzzing.md): the readers under test take paths,
 * so each input is written to a file in a private temporary directory first.
 */
#ifndef SEQ_FUZZ_COMMON_H
#define SEQ_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// the harness's own directory (created on first use, removed at exit): in /dev/shm when there is one (on a
// disk file system, writing a file per input costs far more than parsing it: docs/fuzzing.md), else in
// $TMPDIR or /tmp
static char fuzz_dir_[64];

static void fuzz_cleanup_(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir_);
    if (system(cmd) != 0) fprintf(stderr, "fuzz: could not remove %s\n", fuzz_dir_);
}

static const char *fuzz_dir(void) {
    if (!fuzz_dir_[0]) {
        const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
        snprintf(fuzz_dir_, sizeof fuzz_dir_, "%.40s/seqfuzz.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
        if (!mkdtemp(fuzz_dir_)) { perror("fuzz: mkdtemp"); abort(); }
        atexit(fuzz_cleanup_);
    }
    return fuzz_dir_;
}

// write data to <dir>/name; path receives the full path
static void fuzz_write(const char *name, const uint8_t *data, size_t size, char *path, size_t n) {
    snprintf(path, n, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) { perror(path); abort(); }
}

#endif
