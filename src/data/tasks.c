/*
 * Synthetic tasks: names, per-example random streams and the dispatch to the task families
 * (tasks_mad.c: the MAD suite; tasks_seq.c: MQAR, state tracking, copying, RegBench).
 */
#include "data/tasks.h"

#include <string.h>

static const char *const TASK_NAMES_[TASK_COUNT] = {
    "icr", "noisy_icr", "fuzzy_icr", "selective_copy", "memorization", "compression",
    "mqar", "a5", "s5", "parity", "copy", "regbench",
};

int task_kind_parse(const char *name) {
    for (int k = 0; k < TASK_COUNT; k++)
        if (!strcmp(name, TASK_NAMES_[k])) return k;
    return -1;
}

const char *task_kind_name(TaskKind k) { return k >= 0 && k < TASK_COUNT ? TASK_NAMES_[k] : "?"; }

static int task_is_mad_(TaskKind k) { return k <= TASK_COMPRESSION; }

void task_rng(Rng *r, const TaskSpec *t, int split, uint64_t index) {
    // splitmix of (seed, kind, split, index): streams of different examples (and of different tasks with
    // the same seed) are unrelated
    uint64_t h = t->seed ^ 0x7461736b73ull ^ ((uint64_t)t->kind << 48);  // "tasks"
    uint64_t a = splitmix64(&h) ^ ((uint64_t)split * 0x9E3779B97F4A7C15ull);
    uint64_t b = splitmix64(&a) ^ index;
    rng_seed(r, splitmix64(&b));
}

int task_resolve(TaskSpec *t, Err *e) {
    if (t->kind < 0 || t->kind >= TASK_COUNT) return err_set(e, "task: unknown kind %d", (int)t->kind);
    return task_is_mad_(t->kind) ? task_resolve_mad(t, e) : task_resolve_seq(t, e);
}

int task_example(const TaskSpec *t, int split, uint64_t index, int *inputs, int *targets) {
    return task_is_mad_(t->kind) ? task_example_mad(t, split, index, inputs, targets)
                                 : task_example_seq(t, split, index, inputs, targets);
}
