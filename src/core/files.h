/*
 * Opening input files that must be regular files (configs, shards, checkpoints, .npy), and writing outputs.
 *
 * A FIFO (or a terminal, /dev/zero, a socket) named where a file is expected would block the open or the
 * read for ever, or never end; open_regular() opens with O_NONBLOCK, so the open returns at once, checks
 * the type with fstat and refuses anything but a regular file before a byte is read.
 *
 *   int fd = open_regular(path, &st_mode);
 *   if (fd == OPEN_NOT_REGULAR) return err_set(e, "%s: is %s, not a regular file", path, file_kind(st_mode));
 *   if (fd < 0) return err_set(e, "%s: cannot open: %s", path, strerror(errno));
 */
/*
 * Outputs go through one of two doors, both of which write only regular files:
 *
 *   AtomicFile (shards, checkpoints, state and config files, PNGs, rewritten logs): written as
 *   "<path>.tmp.<pid>" and renamed over path, so readers see the old content or the new.
 *   fopen_output (logs appended to, tables and text written in place): opened without following a
 *   symbolic link.
 *
 * Both refuse a target that exists and is not a regular file: a device, a FIFO, a directory, and a
 * symbolic link (run directories are shared places: a link planted as log.jsonl must not redirect a write,
 * and running as root, renaming over /dev/null would replace the device with a file).
 */
#ifndef SEQ_FILES_H
#define SEQ_FILES_H

#include <stdio.h>
#include "core/err.h"

#define OPEN_NOT_REGULAR (-2)

// read-only fd of a regular file (blocking mode restored, close-on-exec), -1 with errno set when open or
// fstat failed, OPEN_NOT_REGULAR (nothing left open) when it is something else; *mode (may be NULL) gets
// its st_mode
int open_regular(const char *path, unsigned *mode);
// open_regular as a FILE* for reading; NULL with *not_regular = 1 (else 0, errno set) on failure
FILE *fopen_regular(const char *path, int *not_regular, unsigned *mode);
// "a FIFO", "a directory", "a character device", "a symbolic link", ... for messages
const char *file_kind(unsigned mode);
// 1 when a and b name the same file (links followed), 0 when not or when either does not exist
int files_same(const char *a, const char *b);

// paths of outputs (and of the run directory files): longer ones are refused up front
#define FILE_PATH_MAX 1024

// 0 when path may be written: it does not exist or is a regular file; else -1 naming what it is
int output_check(const char *path, Err *e);
// path for writing, created 0644 when missing: truncated (append 0) or positioned at its end (append 1);
// never follows a symbolic link, never opens a device or a FIFO (output_check's rule). NULL with e set.
FILE *fopen_output(const char *path, int append, Err *e);
// close a FILE written with fopen_output (or any output), naming path when a write, flush or the close
// failed (a full disk); returns 0 or -1
int fclose_output(FILE *f, const char *path, Err *e);

// A file written under a temporary name ("<path>.tmp.<pid>", created fresh, never through a link) and
// renamed over path on commit, so readers see the old content or the new, never a torn file.
typedef struct AtomicFile {
    FILE *f;
    char path[FILE_PATH_MAX];
    char tmp[FILE_PATH_MAX + 32];
} AtomicFile;

// create the temporary file (after output_check(path)); af->f is open for writing on success
int atomic_file_open(AtomicFile *af, const char *path, Err *e);
// flush, fsync, close, rename over path, fsync the parent directory; on failure the temp is removed
int atomic_file_commit(AtomicFile *af, Err *e);
// close and remove the temp file (safe to call after a failed commit or twice)
void atomic_file_abort(AtomicFile *af);
// the whole of data as path, atomically (small JSON state files)
int write_file_atomic(const char *path, const void *data, size_t len, Err *e);
// fsync a directory so a rename/creation inside it survives a power loss
int fsync_dir(const char *dir, Err *e);

#endif
