/*
 * Pure-compute benchmark of one training step (not a test): the model and batch of a run config, timed
 * without the trainer around them, so that bench/step_overhead.sh can put seqtrain's real per-step time
 * next to it (the per-step overhead of the trainer on the many small runs of the task sweeps).
 *
 *   make benches && build/release/bench/step --config configs/tasks/mad/icr.json [--set KEY=VALUE ...]
 *       [--reps 20] [--warmup 3] [--json out.json]
 *
 * It opens the run's task (data.task: the sweeps' configs; a config without one is refused) as seqtrain
 * does, builds the model from the model section with run.seed, and times, each as the median over --reps after --warmup
 * untimed repeats:
 *   data      loader_next of one micro-batch (B,T) (generating its task examples)
 *   compute   model_zero_grad + model_forward_backward of that micro-batch, as the trainer runs it: the
 *             arithmetic of a step, nothing else (no optimizer, clipping, logging or evaluation)
 *   dense     the same on the batch with every ignored target replaced by token 0: the head and the fused
 *             cross-entropy on every position, what a step would cost if the trainer ran them on every row
 *             rather than on the supervised rows only (same cost per row; only the timing is used)
 * Threads from run.threads (0 = OMP_NUM_THREADS or all cores), as seqtrain sets them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "bench.h"
#include "cli/args.h"
#include "core/timer.h"
#include "data/loader.h"
#include "model/model.h"
#include "data/tasks.h"
#include "eval/evaluate.h"
#include "run/run_config.h"

int main(int argc, char **argv) {
    const char *config = NULL, *json = NULL;
    long reps = 20, warmup = 3;
    ArgList sets = {0};
    ArgSpec specs[] = {
        {"--config", ARG_STR, &config, "FILE", "run config (required)", 0, 0},
        {"--set", ARG_LIST, &sets, "KEY=VALUE", "config override, as seqtrain's (repeatable)", 0, 0},
        {"--reps", ARG_INT, &reps, "N", "timed repeats (default 20)", 1, 100000},
        {"--warmup", ARG_INT, &warmup, "N", "untimed repeats first (default 3)", 0, 100000},
        {"--json", ARG_STR, &json, "FILE", "also write the numbers as JSON", 0, 0},
    };
    int nspecs = (int)(sizeof specs / sizeof specs[0]);
    Err e = {{0}};
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: step --config FILE [--set KEY=VALUE ...] [options]\n\n");
            args_usage(stdout, specs, nspecs);
            return 0;
        }
    if (args_parse(argc, argv, 1, specs, nspecs, NULL, &e) != 0 || (!config && err_set(&e, "--config is required"))) {
        fprintf(stderr, "step: %s\n", e.msg);
        return 2;
    }
    RunConfig c;
    CfgOrigins *origins = NULL;
    if (run_config_load(&c, config, sets.v, sets.n, &origins, &e) != 0) {
        fprintf(stderr, "step: %s\n", e.msg);
        return 1;
    }
#ifdef _OPENMP
    if (c.run.threads > 0) omp_set_num_threads(c.run.threads);
#endif
    Loader l;
    memset(&l, 0, sizeof l);
    int rc = run_config_has_task(&c) ? evaluate_task_open(&l, &c, TASK_TRAIN, c.data.shuffle, &e)
                                     : err_set(&e, "%s: no data.task; this bench times the task sweeps' runs", config);
    Model m;
    if (rc == 0) rc = model_build(&m, &c.model, (int)l.vocab_size, origins, (uint64_t)c.run.seed, &e);
    if (rc != 0) {
        fprintf(stderr, "step: %s\n", e.msg);
        return 1;
    }
    int B = c.train.batch_size, T = c.train.seq_len, n = (int)(warmup + reps);
    size_t BT = (size_t)B * T;
    int *in = malloc(BT * sizeof(int)), *tg = malloc(BT * sizeof(int)), *tg_all = malloc(BT * sizeof(int));
    double *t_data = malloc((size_t)n * sizeof(double)), *t_comp = malloc((size_t)n * sizeof(double));
    double *t_dense = malloc((size_t)n * sizeof(double));
    for (int r = 0; r < n; r++) {
        double t0 = time_now_s();
        if (loader_next(&l, in, tg, B, &e) != 0) {
            fprintf(stderr, "step: %s\n", e.msg);
            return 1;
        }
        int n_sup = 0;
        for (size_t i = 0; i < BT; i++) {
            n_sup += tg[i] >= 0;
            tg_all[i] = tg[i] >= 0 ? tg[i] : 0;
        }
        double t1 = time_now_s();
        model_zero_grad(&m);
        if (model_forward_backward(&m, in, tg, B, T, n_sup, &e) != 0) {
            fprintf(stderr, "step: %s\n", e.msg);
            return 1;
        }
        double t2 = time_now_s();
        model_zero_grad(&m);
        if (model_forward_backward(&m, in, tg_all, B, T, (int)BT, &e) != 0) {
            fprintf(stderr, "step: %s\n", e.msg);
            return 1;
        }
        double t3 = time_now_s();
        t_data[r] = t1 - t0;
        t_comp[r] = t2 - t1;
        t_dense[r] = t3 - t2;
    }
    double data = bench_median(t_data + warmup, (int)reps), comp = bench_median(t_comp + warmup, (int)reps);
    double dense = bench_median(t_dense + warmup, (int)reps);
    printf("step: %s | %zu parameters | B %d x T %d | %d threads\n", config, model_num_params(&m), B, T, bench_threads());
    printf("data (loader_next)          %9.3f ms\n", 1e3 * data);
    printf("compute (forward+backward)  %9.3f ms  %10.0f tok/s\n", 1e3 * comp, (double)BT / comp);
    printf("dense head (every position) %9.3f ms  %10.0f tok/s  (compute is %.2fx faster)\n", 1e3 * dense,
           (double)BT / dense, dense / comp);
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) {
            fprintf(stderr, "step: cannot write %s\n", json);
            return 1;
        }
        fprintf(f, "{\"config\": \"%s\", \"params\": %zu, \"B\": %d, \"T\": %d, \"threads\": %d, \"data_ms\": %.6f, "
                "\"compute_ms\": %.6f, \"dense_ms\": %.6f}\n", config, model_num_params(&m), B, T, bench_threads(), 1e3 * data,
                1e3 * comp, 1e3 * dense);
        fclose(f);
    }
    free(in);
    free(tg);
    free(tg_all);
    free(t_data);
    free(t_comp);
    free(t_dense);
    model_free(&m);
    loader_close(&l);
    run_config_free(&c);
    config_origins_free(origins);
    return 0;
}
