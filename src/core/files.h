/*
 * Opening input files that must be regular files (configs, shards, checkpoints, .npy).
 *
 * A FIFO (or a terminal, /dev/zero, a socket) named where a file is expected would block the open or the
 * read for ever, or never end; open_regular() opens with O_NONBLOCK, so the open returns at once, checks
 * the type with fstat and refuses anything but a regular file before a byte is read.
 *
 *   int fd = open_regular(path, &st_mode);
 *   if (fd == OPEN_NOT_REGULAR) return err_set(e, "%s: is %s, not a regular file", path, file_kind(st_mode));
 *   if (fd < 0) return err_set(e, "%s: cannot open: %s", path, strerror(errno));
 */
#ifndef SEQ_FILES_H
#define SEQ_FILES_H

#include <stdio.h>

#define OPEN_NOT_REGULAR (-2)

// read-only fd of a regular file (blocking mode restored, close-on-exec), -1 with errno set when open or
// fstat failed, OPEN_NOT_REGULAR (nothing left open) when it is something else; *mode (may be NULL) gets
// its st_mode
int open_regular(const char *path, unsigned *mode);
// open_regular as a FILE* for reading; NULL with *not_regular = 1 (else 0, errno set) on failure
FILE *fopen_regular(const char *path, int *not_regular, unsigned *mode);
// "a FIFO", "a directory", "a character device", ... for messages
const char *file_kind(unsigned mode);

#endif
