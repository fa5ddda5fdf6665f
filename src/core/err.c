#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <stdint.h>

int err_set(Err *e, const char *fmt, ...) {
    if (!e) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int err_prefix(Err *e, const char *fmt, ...) {
    if (!e) return -1;
    char head[512], old[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    // head then as much of the old message as fits; the message stays NUL-terminated
    size_t hl = strlen(head), ol = strnlen(old, sizeof old - 1);
    if (hl + ol > sizeof e->msg - 1) ol = sizeof e->msg - 1 - hl;
    memcpy(e->msg, head, hl);
    memcpy(e->msg + hl, old, ol);
    e->msg[hl + ol] = '\0';
    return -1;
}

void err_die(const char *prog, const Err *e) {
    fflush(stdout);
    fprintf(stderr, "%s: error: %s\n", prog, (e && e->msg[0]) ? e->msg : "unknown error");
    exit(1);
}

static void oom_(size_t n) {
    fprintf(stderr, "error: out of memory allocating %zu bytes (%.1f MiB)\n", n, n / 1048576.0);
    exit(1);
}

// Large blocks (the model's parameters, gradients, Adam state and activation arena) ask the kernel for
// 2 MiB transparent huge pages, which this system otherwise gives only on request (THP "madvise" mode is the
// common default): the matmul reads 8 rows of an activation matrix at once, each row a different 4 KiB page,
// and the transposing packs walk columns of the 128 MiB logits, so with 4 KiB pages a large share of those
// loads miss the TLB (the gain: docs/results/speed_3x.md, "Huge pages"). The hint covers the whole 2 MiB
// pages inside the block; it is only advice (no error if THP is off or unsupported).
#define HUGE_MIN_BYTES_ ((size_t)4 << 20)
#define HUGE_PAGE_ ((uintptr_t)2 << 20)
static void advise_huge_(void *p, size_t n) {
#ifdef MADV_HUGEPAGE
    if (n < HUGE_MIN_BYTES_) return;
    uintptr_t a = ((uintptr_t)p + HUGE_PAGE_ - 1) & ~(HUGE_PAGE_ - 1);
    uintptr_t e = ((uintptr_t)p + n) & ~(HUGE_PAGE_ - 1);
    if (e > a) (void)madvise((void *)a, e - a, MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}

// Every block starts on a 64-byte cache line. glibc's malloc gives 16-byte alignment, and a large block
// (mmap'd) starts 16 bytes past a page, so every row of every activation would sit 16 bytes off a line: on
// Intel cores each 64-byte vector load of them spans two lines and costs two (the attention forward's p.v,
// which loads value rows, slows down most; Zen 4 splits 64-byte loads in halves anyway and runs both at the
// same speed; docs/results/speed_rounds.md, "Buffers on cache lines"). NULL when out of memory.
#define ALIGN_BYTES_ 64
static void *alloc_aligned_(size_t n) {
    void *p = NULL;
    return posix_memalign(&p, ALIGN_BYTES_, n ? n : 1) == 0 ? p : NULL;
}

void *xmalloc(size_t n) {
    void *p = alloc_aligned_(n);
    if (!p) oom_(n);
    advise_huge_(p, n);  // before the first touch, which is when pages are given out
    return p;
}

void *xmalloc_for(size_t n, const char *fmt, ...) {
    void *p = alloc_aligned_(n);
    if (!p) {
        char what[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
        fflush(stdout);
        fprintf(stderr, "error: out of memory allocating %zu bytes (%.1f MiB) for %s\n", n, n / 1048576.0, what);
        exit(1);
    }
    advise_huge_(p, n);
    return p;
}

void *xcalloc(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) oom_(SIZE_MAX);
    void *p = alloc_aligned_(n * size);
    if (!p) oom_(n * size);
    advise_huge_(p, n * size);  // before the memset's first touch
    memset(p, 0, n * size);
    return p;
}

void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) oom_(n);
    return q;
}

char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = xmalloc(n);
    memcpy(p, s, n);
    return p;
}
