/*
 * The schema of a run's configuration file: one C struct per section, one CfgKey table per struct.
 * docs/config.md is generated from these tables (`seqtrain --config-docs`), so a key cannot exist
 * without its documentation; tests/test_docs.sh checks the committed file is current.
 */
#ifndef SEQ_RUN_CONFIG_H
#define SEQ_RUN_CONFIG_H

#include <string.h>

#include "core/config.h"
#include "data/tasks.h"
#include "model/model.h"

typedef struct RunSection {
    char name[CFG_STR_MAX];
    char dir[CFG_STR_MAX];
    int seed;
    int threads;
    char device[CFG_STR_MAX];     // cpu | cuda
    char precision[CFG_STR_MAX];  // fp32 | tf32 | bf16 (GPU matmuls; the CPU is fp32)
} RunSection;

// a synthetic task instead of shards (data/tasks.h; docs/tasks.md)
typedef struct TaskSection {
    char kind[CFG_STR_MAX];
    int vocab, seed, train_examples, test_examples;
    int noise_vocab;
    double frac_noise;
    int multi_query, k_motif, v_motif, n_copy, n_train;
    int num_kv_pairs;
    double power_a;
    int random_non_queries;
    int train_len_min, train_len_max, test_len_min, test_len_max;
    int dfa_states_min, dfa_states_max, dfa_alphabet_min, dfa_alphabet_max, n_strings;
} TaskSection;

typedef struct DataSection {
    CfgStrList train, val, test;
    TaskSection task;
    char format[CFG_STR_MAX];
    int vocab_size;
    char tokenizer[CFG_STR_MAX];
    int cache_mb;
    int shuffle;
} DataSection;

typedef struct TrainSection {
    int batch_size;
    int seq_len;
    int grad_accum;
    int steps;
    double epochs;
    int eval_every, eval_batches, log_every, ckpt_every, keep_last;
    double stop_at_acc;  // a task's early stop: test accuracy at an evaluation (0 = off)
    double patience;     // early stop after this many epochs without a better validation metric (0 = off)
    char patience_metric[CFG_STR_MAX];  // loss | acc
} TrainSection;

typedef struct OptimGroupSection {
    CfgStrList match;
    double lr_mult, lr, beta1, beta2, eps, weight_decay, clip;
} OptimGroupSection;

typedef struct OptimSection {
    double lr, beta1, beta2, eps, weight_decay, grad_clip;
    CfgList groups;  // OptimGroupSection items
} OptimSection;

typedef struct ScheduleSection {
    char kind[CFG_STR_MAX];
    int warmup_steps;
    double warmup_frac, min_lr_frac;
    double pct_start, div_factor, final_div_factor;
    int three_phase, cycle_momentum;
    char anneal[CFG_STR_MAX];
    double base_momentum, max_momentum;
    double decay_frac, final_lr_frac;
    char decay_shape[CFG_STR_MAX];
} ScheduleSection;

typedef struct EvalSection {
    char contexts[CFG_STR_MAX];
    char split[CFG_STR_MAX];
    int stride;
    int max_windows;
} EvalSection;

typedef struct RunConfig {
    RunSection run;
    DataSection data;
    ModelSection model;
    TrainSection train;
    OptimSection optim;
    ScheduleSection schedule;
    EvalSection eval;
} RunConfig;

extern const CfgSection RUN_CONFIG_SCHEMA;

// load + resolve (base, --set) + validate + bind: what every tool does with --config and --set.
// origins (may be NULL) receives the table of where values were set (free with config_origins_free);
// the config owns allocations: run_config_free() when done.
int run_config_load(RunConfig *c, const char *path, const char *const *overrides, int n_overrides,
                    CfgOrigins **origins, Err *e);
void run_config_free(RunConfig *c);
// data.task as a resolved TaskSpec (seq_len = train.seq_len); an error names the bad key
int run_config_task(const RunConfig *c, TaskSpec *t, Err *e);
static inline int run_config_has_task(const RunConfig *c) { return strcmp(c->data.task.kind, "none") != 0; }
// the most tokens one optimizer step may hold: train.grad_accum x train.batch_size x train.seq_len
#define RUN_CONFIG_MAX_STEP_TOKENS 2147483647LL
#define RUN_CONFIG_MAX_CONTEXTS 32
// eval.contexts as lengths (at most RUN_CONFIG_MAX_CONTEXTS, each 1 .. 2^24); returns how many (0 when empty)
// or -1 with an error naming eval.contexts and the bad entry
int run_config_eval_contexts(const RunConfig *c, long *ctx, Err *e);
// the checks across keys that need no data: eval.contexts, eval.split against its data, the tokens per
// step; run by --check and before training (the schedule's checks need the step count: the trainer's)
int run_config_check(const RunConfig *c, Err *e);

#endif
