/*
 * seqtrain: train a model from a run configuration, or continue one.
 *
 *   seqtrain --config FILE.json [--set key=value ...]    a new run in run.dir/run.name
 *   seqtrain --resume RUN_DIR [--set key=value ...]       continue from its newest checkpoint (a --set is a
 *                                                         deliberate change, printed and logged)
 *   seqtrain --config FILE.json --print-config           the resolved configuration
 *   seqtrain --config FILE.json --check                  validate the config and data, print the data summary
 *   seqtrain --config FILE.json --info                   --check, plus per-layer parameters and decoding state (Table 1 form)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cli/args.h"
#include "core/cpu.h"
#include "core/dist.h"
#include "ckpt/ckptdir.h"
#include "run/run_config.h"
#include "train/trainer.h"

static const char *PROG = "seqtrain";

static void usage_(FILE *f, const ArgSpec *specs, int n) {
    fprintf(f, "usage: seqtrain --config FILE.json [--set key=value ...] [options]\n"
               "       seqtrain --resume RUN_DIR [--set key=value ...]\n\n"
               "Trains the model a run configuration describes (every key: docs/config.md), logging to\n"
               "RUN_DIR/log.jsonl and checkpointing atomically into RUN_DIR/ckpt-<step>/. Ctrl-C (or SIGTERM,\n"
               "or SIGUSR1, which mpirun passes on to every rank) writes a checkpoint and exits with status 130\n"
               "(143 after SIGTERM, 138 after SIGUSR1); --resume continues\n"
               "bit-identically; it refuses a config.json edited since the checkpoint unless each change is\n"
               "also given with --set (then printed and logged in log.jsonl).\n\noptions:\n");
    args_usage(f, specs, n);
    args_env_usage(f, 0);
}

int main(int argc, char **argv) {
    dist_init(&argc, &argv, PROG);  // several processes under mpirun (make MPI=1): every rank runs this main
    const char *config = NULL, *resume = NULL;
    ArgList sets = {0};
    long stop_after = 0;
    int print_config = 0, config_docs = 0, help = 0, check = 0, info = 0, quiet = 0;
    ArgSpec specs[] = {
        {"--config", ARG_STR, &config, "FILE", "run configuration (JSON; may name a \"base\" to inherit)", 0, 0},
        {"--set", ARG_LIST, &sets, "KEY=VALUE", "override one key, e.g. --set train.seq_len=256 (repeatable)", 0, 0},
        {"--resume", ARG_STR, &resume, "RUN_DIR", "continue the run in RUN_DIR from its newest checkpoint", 0, 0},
        {"--print-config", ARG_FLAG, &print_config, NULL, "print the resolved configuration (defaults filled in) and exit", 0, 0},
        {"--check", ARG_FLAG, &check, NULL, "validate the configuration and its data, print the data summary, exit", 0, 0},
        {"--info", ARG_FLAG, &info, NULL, "--check, plus each layer's mixer, parameters and decoding state size (also as BLA Table 1's formulas), exit", 0, 0},
        {"--config-docs", ARG_FLAG, &config_docs, NULL, "print the Markdown reference of every config key and exit", 0, 0},
        {"--stop-after", ARG_INT, &stop_after, "N", "stop after N steps of this process as if interrupted (checkpoint, exit 130)", 1, 1e12},
        {"--quiet", ARG_FLAG, &quiet, NULL, "no progress line (the log file is written as usual)", 0, 0},
        {"--help", ARG_FLAG, &help, NULL, "show this help", 0, 0},
    };
    int ns = sizeof specs / sizeof specs[0];
    Err e = {{0}};
    // until training starts every rank meets the same errors, and dist_die prints them once
    if (args_parse(argc, argv, 1, specs, ns, NULL, &e) != 0) dist_die(PROG, &e);
    if (kernel_set_init(&e) != 0) dist_die(PROG, &e);  // a bad SEQ_KERNELS fails here, with every mode
    if (help || config_docs || ((print_config || check || info) && !dist_main())) {
        if (help && dist_main()) usage_(stdout, specs, ns);
        if (config_docs && dist_main()) config_write_docs(stdout, &RUN_CONFIG_SCHEMA);
        return dist_exit(0);  // these modes are rank 0's alone
    }
    if (!config == !resume) {
        if (config && resume) { err_set(&e, "give --config or --resume, not both"); dist_die(PROG, &e); }
        if (dist_main()) usage_(stderr, specs, ns);
        return dist_exit(2);
    }
    if (print_config || check || info) {
        if (!config) { err_set(&e, "--print-config, --check and --info need --config"); dist_die(PROG, &e); }
        RunConfig c;
        if (run_config_load(&c, config, sets.v, sets.n, NULL, &e) != 0) dist_die(PROG, &e);
        if (print_config) {
            cJSON *j = config_dump(&c, &RUN_CONFIG_SCHEMA);
            char *s = cJSON_Print(j);
            printf("%s\n", s);
            free(s);
            cJSON_Delete(j);
        } else if (trainer_check(&c, info, &e) != 0) {
            dist_die(PROG, &e);
        }
        run_config_free(&c);
        return dist_exit(0);
    }
    // checkpoints half-written (or being replaced) by killed processes: each a full model + optimizer
    int rc = resume && dist_main() && ckptdir_remove_leftovers(resume, stderr, &e) < 0 ? -1 : 0;
    if (dist_agree(rc, &e) != 0) dist_die(PROG, &e);
    TrainerOpts o = {.config_path = config, .sets = sets.v, .n_sets = sets.n, .resume_dir = resume,
                     .stop_after = stop_after, .quiet = quiet};
    int status = trainer_main(&o, &e);
    if (status == 1) dist_die(PROG, &e);  // every rank returns 1 together (the trainer agrees at each failure)
    return dist_exit(status);
}
