/*
 * seqeval: perplexity by context length. This foundation build resolves the evaluation data (a file,
 * or the valid/test split of a config) and prints the evaluation plan for each context length: how many
 * windows, and how many tokens each length scores (non-overlapping windows, or sliding ones with
 * --stride), after reading every token once to check it. Scoring those windows needs a trained run, which comes with the model and trainer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/run_config.h"
#include "data/eval_windows.h"
#include "data/shard.h"

static const char *PROG = "seqeval";

int main(int argc, char **argv) {
    const char *data = NULL, *config = NULL, *contexts = "512,1024,2048,4096", *format = "auto";
    long stride = 0, vocab = 0;
    int help = 0;
    ArgList sets = {0};
    ArgSpec specs[] = {
        {"--data", ARG_STR, &data, "valid|test|FILE", "evaluation tokens: a split of --config, or a shard file", 0, 0},
        {"--config", ARG_STR, &config, "FILE", "run configuration whose data.val / data.test to use", 0, 0},
        {"--set", ARG_LIST, &sets, "KEY=VALUE", "override a key of --config (repeatable)", 0, 0},
        {"--context", ARG_STR, &contexts, "L1,L2,...", "context lengths (default 512,1024,2048,4096)", 0, 0},
        {"--stride", ARG_INT, &stride, "S", "sliding windows scoring S new tokens each (default 0 = non-overlapping)", 0, 1 << 24},
        {"--format", ARG_STR, &format, "FMT", "shard format of a FILE (default auto)", 0, 0},
        {"--vocab", ARG_INT, &vocab, "N", "vocab size of a raw FILE", 0, 1 << 30},
        {"--help", ARG_FLAG, &help, NULL, "show this help", 0, 0},
    };
    int ns = sizeof specs / sizeof specs[0];
    Err e = {{0}};
    if (args_parse(argc, argv, 1, specs, ns, NULL, &e) != 0) err_die(PROG, &e);
    if (help || !data) {
        FILE *f = help ? stdout : stderr;
        fprintf(f, "usage: seqeval --data valid|test|FILE [--config FILE] [--context L1,L2,...] [--stride S]\n\n"
                   "Prints, for each context length, the windows and tokens an evaluation scores.\n\noptions:\n");
        args_usage(f, specs, ns);
        return help ? 0 : 2;
    }
    long ctx[32];
    int n_ctx = args_int_list(contexts, ctx, 32, 1, 1 << 24, "--context", &e);
    if (n_ctx < 0) err_die(PROG, &e);

    // resolve --data into shard files
    const char *files[CFG_LIST_MAX];
    int n_files = 0;
    RunConfig c;
    ShardFormat fmt;
    if (!strcmp(data, "valid") || !strcmp(data, "test")) {
        if (!config) { err_set(&e, "--data %s needs --config to say which files that is", data); err_die(PROG, &e); }
        if (run_config_load(&c, config, sets.v, sets.n, &e) != 0) err_die(PROG, &e);
        const CfgStrList *l = !strcmp(data, "valid") ? &c.data.val : &c.data.test;
        if (l->n == 0) {
            err_set(&e, "%s: data.%s is empty", config, !strcmp(data, "valid") ? "val" : "test");
            err_die(PROG, &e);
        }
        for (int i = 0; i < l->n; i++) files[n_files++] = l->v[i];
        shard_format_parse(c.data.format, &fmt);
        vocab = c.data.vocab_size;
    } else {
        files[n_files++] = data;
        if (shard_format_parse(format, &fmt) != 0) {
            err_set(&e, "--format '%s' is not one of auto, seqtok, llmc, raw_u16, raw_u32", format);
            err_die(PROG, &e);
        }
    }
    // evaluation treats the files as one stream per file; windows never cross files
    printf("| context | windows | tokens scored |\n|---:|---:|---:|\n");
    uint64_t *n_tok = xcalloc((size_t)n_files, sizeof(uint64_t));
    for (int f = 0; f < n_files; f++) {
        Shard s;
        if (shard_open(&s, files[f], fmt, (uint32_t)vocab, 1 << 20, &e) != 0) err_die(PROG, &e);
        // every token is read once, as the evaluation will: a bad frame or id fails here, not mid-way
        uint32_t lo, hi;
        if (shard_scan(&s, &lo, &hi, &e) != 0) err_die(PROG, &e);
        n_tok[f] = s.n_tokens;
        shard_close(&s);
    }
    for (int i = 0; i < n_ctx; i++) {
        uint64_t w = 0, scored = 0;
        for (int f = 0; f < n_files; f++) {
            EvalWindows p = eval_windows_plan(n_tok[f], (uint64_t)ctx[i], (uint64_t)stride);
            w += p.n_windows;
            scored += p.tokens_scored;
        }
        printf("| %ld | %llu | %llu |\n", ctx[i], (unsigned long long)w, (unsigned long long)scored);
    }
    free(n_tok);
    return 0;
}
