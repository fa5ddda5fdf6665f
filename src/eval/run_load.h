/*
 * A trained run's model for the evaluation tools (seqeval: perplexity, probes, attention maps, generation):
 * its resolved config and the weights of a checkpoint.
 */
#ifndef SEQ_RUN_LOAD_H
#define SEQ_RUN_LOAD_H

#include "core/err.h"
#include "model/model.h"
#include "run/run_config.h"

// c from RUN_DIR/config.json, m built from it and loaded from ckpt (a checkpoint directory; NULL = the newest),
// the vocabulary read from the checkpoint's embedding; refuses weights holding a NaN or infinity (a diverged
// run). Sets the OpenMP threads to threads when > 0 (the tools' --threads), else to run.threads when that is
// given (else OMP_NUM_THREADS stands). -1 with e set.
int run_load_model(Model *m, RunConfig *c, const char *run, const char *ckpt, int threads, Err *e);

#endif
