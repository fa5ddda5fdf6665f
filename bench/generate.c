/*
 * Generation speed (not a test): tokens/s of token-by-token decoding (model_decoder_step + greedy sampling)
 * with the context already holding L tokens, for a run config's model with random weights (speed does not
 * depend on the weights). An attention layer's step reads its whole cache, O(L) per token; a recurrent
 * layer's does not depend on L.
 *
 *   make benches && build/release/bench/generate --config configs/lm/cpu/gpt.json [--set KEY=VALUE ...]
 *       [--contexts 128,2048] [--tokens 32] [--batch 1] [--reps 3] [--vocab 8192]
 *
 * Per context L: a decoder of B sequences with room for L + tokens positions is fed L random tokens (not
 * timed), then `tokens` more are generated and timed; the median over --reps such runs (each with a fresh
 * decoder) is printed as one Markdown row. Threads from OMP_NUM_THREADS (run.threads when the config sets it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "bench.h"
#include "cli/args.h"
#include "core/cpu.h"
#include "core/timer.h"
#include "model/model.h"
#include "model/sample.h"
#include "run/run_config.h"

static int fail_(const Err *e) {
    fprintf(stderr, "generate: %s\n", e->msg);
    return 1;
}

int main(int argc, char **argv) {
    const char *config = NULL, *contexts = "128,2048";
    long tokens = 32, batch = 1, reps = 3, vocab = 8192;
    int header = 0;
    ArgList sets = {0};
    ArgSpec specs[] = {
        {"--config", ARG_STR, &config, "FILE", "run config (required)", 0, 0},
        {"--set", ARG_LIST, &sets, "KEY=VALUE", "config override, as seqtrain's (repeatable)", 0, 0},
        {"--contexts", ARG_STR, &contexts, "L1,L2,...", "tokens already in the context when timing starts (default 128,2048)", 0, 0},
        {"--tokens", ARG_INT, &tokens, "N", "tokens generated and timed per run (default 32)", 1, 1 << 20},
        {"--batch", ARG_INT, &batch, "B", "sequences decoded together (default 1)", 1, 4096},
        {"--reps", ARG_INT, &reps, "N", "runs per context, the median reported (default 3)", 1, 1000},
        {"--vocab", ARG_INT, &vocab, "V", "vocabulary when model.vocab_size is 0 (default 8192, the bundled tokenizer's)", 2, 1 << 24},
        {"--header", ARG_FLAG, &header, NULL, "print the table's header first", 0, 0},
    };
    int nspecs = (int)(sizeof specs / sizeof specs[0]);
    Err e = {{0}};
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: generate --config FILE [--set KEY=VALUE ...] [options]\n\n");
            args_usage(stdout, specs, nspecs);
            return 0;
        }
    if (args_parse(argc, argv, 1, specs, nspecs, NULL, &e) != 0 || (!config && err_set(&e, "--config is required"))) {
        fprintf(stderr, "generate: %s\n", e.msg);
        return 2;
    }
    long ctx[16];
    int n_ctx = args_int_list(contexts, ctx, 16, 1, 1 << 22, "--contexts", &e);
    if (n_ctx < 0 || kernel_set_init(&e) != 0) return fail_(&e);
    RunConfig c;
    CfgOrigins *origins = NULL;
    if (run_config_load(&c, config, sets.v, sets.n, &origins, &e) != 0) return fail_(&e);
#ifdef _OPENMP
    if (c.run.threads > 0) omp_set_num_threads(c.run.threads);
#endif
    Model m;
    if (model_build(&m, &c.model, (int)vocab, origins, (uint64_t)c.run.seed, &e) != 0) return fail_(&e);
    int B = (int)batch, V = m.V;
    int *tok = malloc((size_t)B * sizeof(int));
    float *logits = malloc((size_t)B * V * sizeof(float));
    double *secs = malloc((size_t)reps * sizeof(double));
    SampleOpts greedy = {0, 0, 1};
    Rng r;
    rng_seed(&r, 1);
    if (header)
        printf("| config | mixers | parameters | batch | context | tokens/s | ms per step | threads | kernels |\n"
               "|---|---|---:|---:|---:|---:|---:|---:|---|\n");
    char mixers[256] = "";
    for (int l = 0; l < m.L; l++)
        if (!strstr(mixers, model_layer_name(&m, l)) && strlen(mixers) < 200)
            snprintf(mixers + strlen(mixers), sizeof mixers - strlen(mixers), "%s%s", mixers[0] ? "+" : "",
                     model_layer_name(&m, l));
    for (int i = 0; i < n_ctx; i++) {
        int L = (int)ctx[i];
        for (int rep = 0; rep < reps; rep++) {
            ModelDecoder d;
            if (model_decoder_init(&d, &m, B, L + (int)tokens, &e) != 0) return fail_(&e);
            for (int t = 0; t < L; t++) {
                for (int b = 0; b < B; b++) tok[b] = (int)(rng_u64(&r) % (uint64_t)V);
                if (model_decoder_step(&m, &d, tok, logits, &e) != 0) return fail_(&e);
            }
            double t0 = time_now_s();
            for (int s = 0; s < tokens; s++) {
                for (int b = 0; b < B; b++) tok[b] = sample_token(logits + (size_t)b * V, V, &greedy, &r);
                if (model_decoder_step(&m, &d, tok, logits, &e) != 0) return fail_(&e);
            }
            secs[rep] = time_now_s() - t0;
            model_decoder_free(&d);
        }
        double s = bench_median(secs, (int)reps);
        printf("| %s | %s | %zu | %d | %d | %.0f | %.3f | %d | %s |\n", config, mixers, model_num_params(&m), B, L,
               (double)tokens * B / s, 1e3 * s / (double)tokens, bench_threads(), kernel_set_name(kernel_set()));
        fflush(stdout);
    }
    free(tok);
    free(logits);
    free(secs);
    model_free(&m);
    run_config_free(&c);
    config_origins_free(origins);
    return 0;
}
