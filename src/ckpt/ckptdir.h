/*
 * Checkpoint directories and atomic files.
 *
 * On-disk layout of a run directory:
 *
 *   run_dir/
 *     ckpt-00000500/            a complete checkpoint (the name alone means complete: see below)
 *       model.safetensors       parameters, one named tensor per ParamTable entry
 *       optim.safetensors       Adam state as tensors "m.<name>" and "v.<name>"
 *       state.json              trainer state: step, epoch, data cursor, optimizer step, resolved config
 *                               (no RNG state: data order and init derive from the seed and the cursor)
 *     ckpt-00001000/
 *     ckpt-00001500.tmp.4242/   being written by process 4242, or left behind by a crash: ignored
 *     ckpt-00001000.old.4242/   an older copy of the same step being replaced: ignored
 *                               (both removed by ckptdir_remove_leftovers once process 4242 is gone)
 *     latest                    text file "ckpt-00001000\n": the checkpoint committed last
 *     lock                      "<pid> <host>\n" of the process writing the run (rundir_lock): one at a time
 *
 * A checkpoint is written into ckpt-<step>.tmp.<pid>/ and only renamed to ckpt-<step> after every file
 * in it and the directory itself were fsync'ed, so a directory named exactly ckpt-<digits> is complete;
 * a crash or Ctrl-C at any point leaves either the previous state or the new one, plus at worst a
 * *.tmp.* directory that every reader skips. Steps are zero-padded to 8 digits so names sort in ls;
 * larger steps simply get more digits and readers order by the parsed number.
 *
 *   CkptDir c;
 *   if (ckptdir_begin(&c, run_dir, step, &e)) ...;
 *   ckptdir_path(&c, "model.safetensors", path, sizeof path, &e); safetensors_write_table(path, ...);
 *   ...; if (ckptdir_commit(&c, &e)) { ckptdir_abort(&c); ... }
 */
#ifndef SEQ_CKPTDIR_H
#define SEQ_CKPTDIR_H

#include <stdio.h>
#include "core/err.h"
#include "core/files.h"

#define CKPT_PATH_MAX FILE_PATH_MAX

typedef struct CkptDir {
    char run_dir[CKPT_PATH_MAX];
    char name[64];               // "ckpt-00000500"
    char tmp[CKPT_PATH_MAX + 160];  // run_dir/ckpt-00000500.tmp.<pid>
    char final[CKPT_PATH_MAX + 96]; // run_dir/ckpt-00000500
    long step;
    int active;                  // 1 between begin and commit/abort
} CkptDir;

// create run_dir (and parents) if missing, then the empty temp checkpoint directory for step (>= 0);
// leftovers of dead processes in run_dir are removed first (as ckptdir_remove_leftovers, no restoring)
int ckptdir_begin(CkptDir *c, const char *run_dir, long step, Err *e);
// out = path of file `name` inside the checkpoint being written
int ckptdir_path(const CkptDir *c, const char *name, char *out, size_t n, Err *e);
// fsync every file and the directory, rename it to run_dir/ckpt-<step> (an existing checkpoint of
// the same step is renamed aside first and removed after), fsync run_dir, point `latest` at it
int ckptdir_commit(CkptDir *c, Err *e);
// remove the temp directory and everything in it (no-op when not active)
void ckptdir_abort(CkptDir *c);

// One writer per run directory: an exclusive flock on run_dir/lock (created when missing), held until the
// process ends, a crash included (the kernel drops it with the descriptor); the file then names this process
// ("<pid> <host>"). A second process is refused at once, naming the holder and the run directory.
int rundir_lock(const char *run_dir, Err *e);

// newest complete checkpoint: the one `latest` names when it exists, else the highest step among
// ckpt-<digits> directories. Returns 1 and out = "run_dir/ckpt-...", 0 when there is none (out = ""),
// -1 on error (run_dir unreadable, out too small).
int ckptdir_latest(const char *run_dir, char *out, size_t n, Err *e);
// delete all complete checkpoints but the keep_last (>= 1) highest steps; the one `latest` names is
// always kept. Returns the number removed or -1.
int ckptdir_prune(const char *run_dir, int keep_last, Err *e);
// remove the ckpt-<step>.tmp.<pid> and ckpt-<step>.old.<pid> directories of processes that are no longer
// running (kill(pid, 0) fails with ESRCH; never our own pid, never a live process's), each a full model +
// optimizer state a kill left behind. A *.old.<pid> whose ckpt-<step> is missing and that `latest` names
// (killed between ckptdir_commit's renames) is renamed back instead. One line per entry goes to report (NULL: silent).
// Returns the number of entries removed or restored, or -1 (run_dir unreadable, a removal failed).
int ckptdir_remove_leftovers(const char *run_dir, FILE *report, Err *e);
// parse "ckpt-<digits>" exactly (no suffix); returns the step or -1
long ckptdir_parse_name(const char *name);
// remove a file or a directory tree (the checkpoint directories are flat, but stay general)
int remove_tree(const char *path, Err *e);

#endif
