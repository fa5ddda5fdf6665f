/*
 * Synthetic tasks (MAD suite, MQAR, state tracking, copying, RegBench): generated in-process, one example
 * at a time, from (seed, split, index) alone, so a dataset is identical on every run, for any thread count
 * and any visiting order, and needs no files. Exact rules: MAD-Lab's and Zoology's generators (docs/tasks.md
 * names them) and the papers cited per task in tasks_*.c. The public generators draw every example from one shared
 * numpy stream; here each example has its own stream (seed, split, index), so the datasets follow the same
 * distributions but are not numerically the same sequences as the Python ones.
 *
 * An example is `len` input tokens and `len` targets aligned with them (targets[t] is what the model must
 * predict after reading inputs[0..t]); TASK_IGNORE marks unsupervised positions, and accuracy is taken over
 * the others. Examples shorter than the task's max length are padded by the caller's choice of length: the
 * generator returns the real length and fills the rest with the task's pad token / TASK_IGNORE.
 */
#ifndef SEQ_TASKS_H
#define SEQ_TASKS_H

#include <stdint.h>
#include "core/err.h"
#include "core/rng.h"

#define TASK_IGNORE (-100)

enum { TASK_TRAIN = 0, TASK_TEST = 1 };

typedef enum {
    TASK_ICR,            // MAD in-context recall
    TASK_NOISY_ICR,      // MAD noisy in-context recall
    TASK_FUZZY_ICR,      // MAD fuzzy in-context recall
    TASK_SELECTIVE_COPY, // MAD selective copying
    TASK_MEMORIZATION,   // MAD memorization (fixed key-value map across the dataset)
    TASK_COMPRESSION,    // MAD compression (needs the autoencoder head: target = the input itself)
    TASK_MQAR,           // Zoology multi-query associative recall
    TASK_A5,             // word problem of A5 (prefix products), Merrill et al. 2024
    TASK_S5,             // word problem of S5
    TASK_PARITY,         // S2: running parity
    TASK_COPY,           // Jelassi et al. 2024 copying
    TASK_REGBENCH,       // in-context learning of random DFAs (Akyurek et al. 2024)
    TASK_COUNT
} TaskKind;

// every option of every task; each task reads the fields its rules name (tasks.md) and ignores the rest.
// 0 means "the task's default" (task_resolve fills it in). The on/off switches multi_query and
// random_non_queries are on by default: 0 or 1 = on, -1 = off.
typedef struct TaskSpec {
    TaskKind kind;
    int vocab;             // V (MAD: 16 / 32 / 256; MQAR: 8192 ...); for A5/S5/parity/copy/regbench: derived
    int seq_len;           // inputs per example (the max for variable-length tasks)
    uint64_t seed;
    // MAD
    int noise_vocab;       // noisy ICR: 16
    double frac_noise;     // noisy ICR: 0.2
    int multi_query;       // ICR variants: 1 in the benchmark
    int k_motif, v_motif;  // fuzzy ICR: 3, 3
    int n_copy;            // selective copying: 16
    int n_train;           // memorization: 256 training examples (the dataset size matters there)
    // MQAR
    int num_kv_pairs;      // N
    double power_a;        // 0.01
    int random_non_queries;
    // state tracking / copying: lengths of the train and test split (length generalisation)
    int train_len_min, train_len_max, test_len_min, test_len_max;
    // RegBench
    int dfa_states_min, dfa_states_max, dfa_alphabet_min, dfa_alphabet_max, n_strings;
} TaskSpec;

// name <-> kind ("icr", "noisy_icr", "fuzzy_icr", "selective_copy", "memorization", "compression",
// "mqar", "a5", "s5", "parity", "copy", "regbench"); -1 when unknown
int task_kind_parse(const char *name);
const char *task_kind_name(TaskKind k);
// fill defaults (0 fields) and validate; errors name the field and the allowed range
int task_resolve(TaskSpec *t, Err *e);
// example `index` of `split`: inputs[0..seq_len), targets[0..seq_len) (padded); returns the real length
int task_example(const TaskSpec *t, int split, uint64_t index, int *inputs, int *targets);
// RegBench: is `token` a valid next token after inputs[0..pos] of that example under its DFA (a symbol with
// an edge from the current state, or the separator once the current string is accepted)? 1 / 0; -1 when
// pos is outside the example or the task is not RegBench. Regenerates the example: O(seq_len).
int task_regbench_valid(const TaskSpec *t, int split, uint64_t index, int pos, int token);
// the example's own random stream: (seed, kind, split, index) -> independent of any other example
void task_rng(Rng *r, const TaskSpec *t, int split, uint64_t index);

// implemented per family (tasks_mad.c, tasks_seq.c); task_example dispatches on kind
int task_resolve_mad(TaskSpec *t, Err *e);
int task_example_mad(const TaskSpec *t, int split, uint64_t index, int *inputs, int *targets);
int task_resolve_seq(TaskSpec *t, Err *e);
int task_example_seq(const TaskSpec *t, int split, uint64_t index, int *inputs, int *targets);

#endif
