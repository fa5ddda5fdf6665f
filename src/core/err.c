#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) oom_(n);
    return p;
}

void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) oom_(n * size);
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
