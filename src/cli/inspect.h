/*
 * seqeval's views inside a trained model on one example: each head's attention map of a layer as a PNG
 * (optionally also as a text matrix for gnuplot), and the per-position output variance of a layer whose mixer
 * carries a posterior (kla) as a table.
 *
 * The example is the first L + 1 tokens of a shard (inputs and next-token targets), or, for a run trained on
 * a data.task, the first example of the task's test split at the run's train.seq_len (its targets are the
 * task's, -100 where nothing is supervised).
 *
 *   InspectInput x;
 *   inspect_input_task(&x, &run_config, &e) or inspect_input_shard(&x, &shard, L, &e);
 *   inspect_attention_maps(&model, &x, layer, heads, n_heads, matrix, "maps", &e);
 *   inspect_posterior_var(&model, &x, layer, "var.tsv", &e);
 *   inspect_input_free(&x);
 */
#ifndef SEQ_CLI_INSPECT_H
#define SEQ_CLI_INSPECT_H

#include "core/err.h"
#include "data/shard.h"
#include "model/model.h"
#include "run/run_config.h"

typedef struct InspectInput {
    int *in, *tg;  // (T,) input tokens and their targets
    int T;
    char what[CFG_STR_MAX + 96];  // where the example comes from, for messages
} InspectInput;

int inspect_input_task(InspectInput *x, const RunConfig *c, Err *e);
int inspect_input_shard(InspectInput *x, Shard *sh, int L, Err *e);
void inspect_input_free(InspectInput *x);

// one forward of x, then DIR/layer<l>_head<h>.png for each head of `heads` (n_heads 0: every head); with matrix,
// also DIR/layer<l>_head<h>.tsv: the T x T weights, one row per line, "nan" where hidden (gnuplot's `matrix`
// format). A map with negative weights (kla) is drawn with png_write_heatmap_signed. layer < 0 counts from the end.
int inspect_attention_maps(Model *m, const InspectInput *x, int layer, const long *heads, int n_heads, int matrix,
                           const char *dir, Err *e);

// one forward of x, then path: a tab-separated table with the header "position input target mean ch0 ch1 ...":
// per position the input token, its target (-100: not supervised), the layer's output variance averaged over its
// channels and each channel's (MixerOps.posterior_var)
int inspect_posterior_var(Model *m, const InspectInput *x, int layer, const char *path, Err *e);

#endif
