/*
 * Errors that carry a message up to the caller.
 *
 * Library code (core/, data/, ...) never exits: it fills an Err with a one-line message that names the
 * file, key or value at fault and what to do, and returns -1. Only the command-line tools decide to
 * print it and exit (err_die). This keeps every failure testable in-process.
 */
#ifndef SEQ_ERR_H
#define SEQ_ERR_H

#include <stddef.h>

typedef struct Err {
    char msg[1024];
} Err;

// format a message into e (e may be NULL); always returns -1 so callers can `return err_set(...)`
int err_set(Err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// prepend context ("file.json: ") to an existing message; returns -1
int err_prefix(Err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// print "prog: error: msg" to stderr and exit(1)
void err_die(const char *prog, const Err *e) __attribute__((noreturn));

// allocation that cannot fail silently: on failure prints the size and exits (llm.c's mallocCheck)
void *xmalloc(size_t n);
// xmalloc whose failure also says what the block was for and which settings size it (printf-style), e.g.
// "the activations of 8 x 512 tokens (train.batch_size x train.seq_len)": a big block is sized by the
// config, and the user needs to know which key to lower
void *xmalloc_for(size_t n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);

#endif
