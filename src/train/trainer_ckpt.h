/*
 * The trainer's side of run directories: its config.json, atomic checkpoints (model, optimizer, state.json
 * with the data cursor) and --resume, which reads and checks everything a checkpoint says before a byte of
 * the run directory changes (docs/checkpoints.md lists the checks). Only trainer.c calls these.
 *
 * With several ranks (MPI) every rank calls them: all ranks read a checkpoint, rank 0 alone writes, and
 * each call ends with the ranks agreeing on its outcome (core/dist.h), so that no rank waits for one that
 * failed.
 */
#ifndef SEQ_TRAINER_CKPT_H
#define SEQ_TRAINER_CKPT_H

#include <stddef.h>
#include "core/err.h"
#include "train/trainer.h"

// RUN_DIR/config.json: the resolved config (rank 0 writes)
int trainer_write_config(const Trainer *t, Err *e);
// the end of a divergence message: which checkpoint is the last good one
void trainer_last_ckpt_note(const Trainer *t, char *buf, size_t n);
// ckpt-<step>/ with model.safetensors, optim.safetensors and state.json, then prune to train.keep_last;
// refused (no checkpoint) when a parameter or moment is not finite
int trainer_save_checkpoint(Trainer *t, Err *e);
// --resume: the newest checkpoint's state, config (changes only through --set), parameters, optimizer and
// data cursor; log.jsonl and diag.jsonl cut back to its step (log_path: RUN_DIR/log.jsonl)
int trainer_resume(Trainer *t, const char *log_path, Err *e);

#endif
