/*
 * state.json of a checkpoint: read and validated before anything of a run directory is touched.
 *
 * --resume trusts nothing it reads: every field must be there with its type and range (integers integral
 * and exact in a double, counters non-negative, step <= total_steps, optim_t == step), and the file must be
 * a regular file of at most 16 MiB. Each error names the file and the field. Agreement with the checkpoint
 * directory's name, the optimizer file and the run's config is checked by the trainer (train/trainer_ckpt.c),
 * which knows those.
 *
 *   CkptState st;
 *   if (ckpt_state_read(&st, "run/ckpt-00000500/state.json", &e)) ...;
 *   ... st.step, st.config ...
 *   ckpt_state_free(&st);
 */
#ifndef SEQ_CKPT_STATE_H
#define SEQ_CKPT_STATE_H

#include <stdint.h>
#include <cjson/cJSON.h>
#include "core/err.h"

#define CKPT_STATE_FILE_MAX (16 << 20)  // bytes of a state.json (a few KiB in practice)

typedef struct CkptState {
    long step, total_steps, optim_t, seed;
    uint64_t epoch, window;  // the data cursor
    double tokens, elapsed_s;
    int threads;
    int ranks;               // MPI processes that trained it (absent: 1)
    char kernels[32];        // "" when absent (checkpoints older than kernel sets)
    int stopped_early;       // absent: 0
    int has_best;            // train.patience's best evaluation so far: best_step, best_metric (absent: none)
    long best_step;
    double best_metric;
    cJSON *config;           // the resolved config at the checkpoint (owned), NULL when absent
} CkptState;

// parse and validate text (NUL-terminated); path names the file in messages
int ckpt_state_parse(CkptState *s, const char *text, const char *path, Err *e);
// read path (a regular file of at most CKPT_STATE_FILE_MAX bytes), then ckpt_state_parse
int ckpt_state_read(CkptState *s, const char *path, Err *e);
void ckpt_state_free(CkptState *s);

#endif
