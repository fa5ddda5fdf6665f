/*
 * The training loop behind `seqtrain --config X.json`: data, model, AdamW, schedule, periodic validation,
 * a JSONL log, a progress line with ETA, atomic checkpoints (every N steps, at the end, and on Ctrl-C or
 * SIGTERM), and `--resume RUN_DIR`, which continues so that the loss curve is bit-identical to an
 * uninterrupted run with the same thread count. docs/training.md describes the run directory.
 */
#ifndef SEQ_TRAINER_H
#define SEQ_TRAINER_H

#include "core/err.h"
#include "data/loader.h"
#include "model/model.h"
#include "optim/optim.h"
#include "optim/schedule.h"
#include "run/run_config.h"
#include "train/step.h"

typedef struct TrainerOpts {
    const char *config_path;   // NULL when resuming
    const char *const *sets;
    int n_sets;
    const char *resume_dir;    // NULL for a fresh run
    long stop_after;           // stop (checkpoint + exit as if interrupted) after this many steps of this
                               // process; 0 = no such stop (tests of resume use it)
    int quiet;                 // no progress line
} TrainerOpts;

typedef struct Trainer {
    RunConfig c;
    CfgOrigins *origins;
    char run_dir[1024];
    Loader train, val;
    int has_val;
    Model model;
    Optim opt;
    OptimGroup *groups;
    Schedule sched;
    Step dev;               // the training step on run.device (train/step.h); evaluation runs there too
                            //   (eval/forward.h, with dev.gpu)
    long step, total_steps;
    double tokens;          // tokens trained on, over all processes of the run
    double elapsed;         // seconds of training, over all processes of the run
    int threads;            // OpenMP threads of this process
    int ranks;              // processes training together (MPI ranks; 1 without MPI)
    int quiet;              // no progress output (--quiet, or a rank other than 0)
    int stopped_early;      // train.stop_at_acc was reached or train.patience ran out (recorded in the checkpoint:
                            //   a resume does not train on)
    long patience_steps;    // train.patience in steps
    int has_best;           // train.patience: an evaluation was watched; its best value and step (in the checkpoint)
    double best_metric;
    long best_step;
    const TrainerOpts *o;
} Trainer;

// --check: open every split (vocab sizes must agree, data.tokenizer must match the shards), read and
// print the first training window, build the model (validating every mixer option), print the summary
int trainer_check(const RunConfig *c, int info, Err *e);

// returns the process exit status: 0 finished; 130 stopped by SIGINT or --stop-after, 143 by SIGTERM, 138 by
// SIGUSR1 (a checkpoint is written in each case); 1 error (e set)
int trainer_main(const TrainerOpts *o, Err *e);

#endif
