/*
 * Perplexity by context length: a trained model scores the windows of an evaluation stream
 * (data/eval_windows.h says which windows and which positions of each are scored), giving per context
 * length the tokens scored, the mean loss, the perplexity and the mean loss at every position of the
 * window (the "per-position loss curve" that shows whether a model uses context beyond its training
 * length).
 */
#ifndef SEQ_EVALUATE_H
#define SEQ_EVALUATE_H

#include <stdint.h>
#include "core/err.h"
#include "data/shard.h"
#include "model/model.h"
#include "eval/forward.h"

typedef struct EvalResult {
    long context;
    uint64_t windows, tokens;
    double loss, ppl;
    double *pos_loss;      // (context,) mean loss at each position (NaN where nothing was scored)
    uint64_t *pos_count;   // (context,)
} EvalResult;

// a number for a JSON file: v printed with %.*g (fixed = 0) or %.*f (fixed = 1) at prec into buf, or "null"
// when v is not finite (JSON has no inf or nan; docs/formats.md). Returns buf or the literal "null".
const char *json_num(char *buf, size_t n, double v, int prec, int fixed);
// the first non-finite entry of a parameter table's buffer (the tensor's index, *at its element), or -1
int params_first_nonfinite(const ParamTable *pt, const float *buf, size_t *at);
// score the windows of every shard for context L (stride 0 = non-overlapping); max_windows 0 = all. Every
// evaluation runs its forward passes through f: on the host model or the GPU (eval/forward.h)
int evaluate_context(Forward *f, Shard *shards, int n_shards, long L, long stride, long max_windows,
                     EvalResult *r, Err *e);
void eval_result_free(EvalResult *r);
// ppl.md / ppl.csv / ppl.json and positions_<L>.csv into dir; the Markdown table also to out (may be NULL)
int eval_write(const char *dir, const char *what, const EvalResult *r, int n, void *out /* FILE* */, Err *e);
// the mean loss over the first n_batches batches of (B, T) windows of a loader (0 = all), in order, and
// (acc not NULL) the fraction of supervised positions whose argmax logit is the target
struct Loader;
int evaluate_loss(Forward *f, struct Loader *l, int B, long n_batches, double *loss, uint64_t *tokens, double *acc,
                  Err *e);

// a split of the run's data.task as a loader (split TASK_TRAIN: train_examples per epoch; TASK_TEST:
// test_examples), windows of train.seq_len
struct RunConfig;
int evaluate_task_open(struct Loader *l, const struct RunConfig *c, int split, int shuffle, Err *e);
// loss and accuracy over the whole test split of the run's task, printed as one JSON line to out
// (RUN_DIR/eval/acc.json, and seqeval --task; out NULL: nothing printed, as on ranks other than 0)
int evaluate_task(Forward *f, const struct RunConfig *c, void *out /* FILE* */, double *loss, double *acc, uint64_t *n,
                  Err *e);

#endif
