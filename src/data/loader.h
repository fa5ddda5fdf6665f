/*
 * Streams training windows of T+1 tokens from one or more shards.
 *
 * Every shard is cut into windows that start at multiples of T (window j = tokens [jT, jT+T], so
 * consecutive windows share one token, as in llm.c and the input/target shift). All windows of all
 * shards form one index space [0, N). An epoch visits each window exactly once: in order when shuffle
 * is off, otherwise in the order of a keyed pseudo-random permutation (a Feistel network with
 * cycle-walking) whose key depends only on (seed, epoch). The permutation needs no memory, so the whole
 * position in the data is the cursor (epoch, pos): saving and restoring it resumes exactly, with any
 * number of shards and tokens. Memory is the shards' bounded frame caches plus one window.
 * A shard shorter than T+1 tokens contributes no window (an error only when no shard has one).
 */
#ifndef SEQ_LOADER_H
#define SEQ_LOADER_H

#include <stdint.h>
#include "core/err.h"
#include "data/shard.h"
#include "data/tasks.h"

typedef struct LoaderCursor {
    uint64_t epoch;  // completed passes over the data
    uint64_t pos;    // windows already taken in this epoch
} LoaderCursor;

typedef struct LoaderOpts {
    const char *const *patterns;  // file names or glob patterns, each must match at least one file
    int n_patterns;
    const char *what;             // for messages: "data.train"
    ShardFormat format;
    uint32_t vocab_size;          // 0 = from the shard headers
    int T;                        // window = T+1 tokens
    int shuffle;
    uint64_t seed;
    size_t cache_bytes;           // decoded-frame cache, split over the shards
    // instead of shards: a synthetic task (data/tasks.h). Window j is then example j of task_split, its
    // targets the task's (TASK_IGNORE where unsupervised); n_examples windows per epoch; task->seq_len
    // is set to T. patterns, format and vocab_size are unused.
    const TaskSpec *task;
    int task_split;
    uint64_t n_examples;
} LoaderOpts;

typedef struct Loader {
    int n_shards;
    Shard *shards;
    uint64_t *first_window;  // (n_shards+1,) index of each shard's first window; last = N
    uint64_t n_windows;      // N
    uint64_t n_tokens;       // over all shards
    uint32_t vocab_size;
    int T, shuffle;
    uint64_t seed;
    LoaderCursor cur;
    uint64_t keys[4];        // Feistel round keys of the current epoch
    int half_bits;           // the permutation works on 2*half_bits-bit integers
    uint32_t *window;        // (T+1,) scratch
    int has_task, task_split;  // windows are task examples (LoaderOpts.task)
    TaskSpec task;
    int *ex_in, *ex_tg;      // (T,) scratch for one example
} Loader;

int loader_open(Loader *l, const LoaderOpts *o, Err *e);
void loader_close(Loader *l);
// the next B windows: inputs (B,T) and targets (B,T) = inputs shifted by one token (a task: its targets)
int loader_next(Loader *l, int32_t *inputs, int32_t *targets, int B, Err *e);
LoaderCursor loader_cursor(const Loader *l);
int loader_seek(Loader *l, LoaderCursor c, Err *e);  // jump to a saved cursor
// the window that position pos of epoch `epoch` reads (exposed for tests and the evaluator);
// UINT64_MAX when pos >= n_windows
uint64_t loader_window_at(Loader *l, uint64_t epoch, uint64_t pos);

#endif
