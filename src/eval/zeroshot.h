/*
 * Zero-shot evaluation (the KLA paper's Table 4): a trained language model scores the items of the
 * data/eval sets (data/evalsets.h) the way EleutherAI's lm-evaluation-harness does (docs/zeroshot.md).
 *
 * Each choice of an item is a (context, continuation) request: its score is the log-likelihood of the
 * continuation's tokens given the context. acc = the choice with the highest total log-likelihood is the
 * gold one; acc_norm = the same with each log-likelihood divided by its choice's length in UTF-8 bytes;
 * LAMBADA (cloze): acc = the greedy continuation (argmax at every position) equals the target tokens, and
 * perplexity = exp(-mean over items of the target's log-likelihood). Standard errors are the harness's:
 * the sample standard deviation (n - 1) over items / sqrt(n).
 *
 * Tokens: the context's trailing whitespace moves to the continuation; the context is encoded as a text
 * start (SentencePiece's dummy prefix, as seqtok encode encodes a line), the continuation as the text that
 * follows it (no dummy prefix: " word" gets the ids it has inside running text); an empty context is the
 * EOS token, which precedes every line in training. A sequence longer than the model's context + 1 loses
 * its oldest tokens, so the continuation stays whole while it fits (a continuation longer than the
 * context keeps its last max_context tokens scored).
 *
 * All choices of an item go through one batched forward (a row each, padded to the longest), and several
 * items share a forward up to a token budget; causal masking makes the padding invisible.
 */
#ifndef SEQ_ZEROSHOT_H
#define SEQ_ZEROSHOT_H

#include <stdint.h>
#include <stdio.h>
#include "core/err.h"
#include "data/evalsets.h"
#include "data/tokenizer.h"
#include "model/model.h"
#include "eval/forward.h"

// the tokens of one request after truncation: ids (n,) = the kept context tokens, then the continuation's;
// the last n_scored of them are scored (each predicted from everything before it)
typedef struct ZeroshotTokens {
    uint32_t *ids;
    int n;          // tokens kept (<= max_context + 1)
    int n_ctx;      // context tokens before truncation (1 for the EOS of an empty context)
    int n_cont;     // continuation tokens before truncation
    int n_scored;   // continuation tokens scored (n_cont unless the continuation alone exceeds the context)
    int truncated;  // 1: tokens were dropped from the left
} ZeroshotTokens;

typedef struct ZeroshotResult {
    const EvalTask *task;
    long n, n_file;              // items scored, items in the file
    double acc, acc_se;          // fractions
    double acc_norm, acc_norm_se;  // NAN for a cloze task
    double ppl, ppl_se;          // cloze only (NAN otherwise); ppl_se by the delta method
    double chance;               // a uniform guess's expected accuracy: the mean of 1 / choices (0 for cloze)
    long truncated;              // requests cut from the left
    double seconds;
} ZeroshotResult;

typedef struct ZeroshotOpts {
    long limit;          // items per task (0 = all)
    int max_context;     // the model's context: sequences keep their last max_context + 1 tokens
    int progress;        // a progress line with ETA on stderr
} ZeroshotOpts;

// tokens of one request (see above); z->ids is malloc'd (zeroshot_tokens_free)
int zeroshot_tokens(ZeroshotTokens *z, const Tokenizer *tok, const char *ctx, const char *cont, int max_context,
                    Err *e);
void zeroshot_tokens_free(ZeroshotTokens *z);
// 64-bit FNV-1a of the ids: the committed reference dump records it instead of the ids themselves
uint64_t zeroshot_ids_hash(const uint32_t *ids, int n);
// one batched forward of requests r (n,): ll (n,) the log-likelihood of each scored continuation, greedy
// (n,) 1 when the argmax at every scored position is the target (greedy may be NULL); on f's device
int zeroshot_score(Forward *f, const ZeroshotTokens *r, int n, double *ll, int *greedy, Err *e);
// every item of a set (o->limit of them)
int zeroshot_run(Forward *f, const Tokenizer *tok, const EvalSet *s, const ZeroshotOpts *o, ZeroshotResult *r,
                 Err *e);
// zeroshot.md / zeroshot.csv / zeroshot.json into dir (the Markdown also to out, may be NULL): the paper's
// Table 4 layout (one row: model) and a per-task table with items, standard errors and chance levels
int zeroshot_write(const char *dir, const char *model, const char *what, const ZeroshotResult *r, int n,
                   FILE *out, Err *e);

#endif
