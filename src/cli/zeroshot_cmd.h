/*
 * seqeval --zeroshot: the wiring between the command line and eval/zeroshot.h (tokenizer, checks that
 * it belongs to the run, the sets, the tables), kept out of seqeval.c's main.
 */
#ifndef SEQ_ZEROSHOT_CMD_H
#define SEQ_ZEROSHOT_CMD_H

#include "core/err.h"
#include "model/model.h"
#include "eval/forward.h"
#include "run/run_config.h"

typedef struct ZeroshotCmd {
    const char *run;        // RUN_DIR (names the model in the tables)
    const char *tasks;      // "lambada,piqa", "all", "paper"
    long limit;             // items per task (0 = all)
    const char *eval_dir;   // folder of the sets (data/eval)
    const char *tokenizer;  // NULL: the run's data.tokenizer
    const char *out;        // NULL: RUN_DIR/eval-zeroshot
} ZeroshotCmd;

// score the tasks (forward passes on f's device) and write the tables; prints the Markdown to stdout, progress
// to stderr
int zeroshot_cmd_run(Forward *f, const RunConfig *c, const ZeroshotCmd *z, Err *e);

#endif
