#include "cli/zeroshot_cmd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/sha256.h"
#include "data/evalsets.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "eval/zeroshot.h"

// the tokenizer must be the one the run was trained with: the same vocabulary size as the model, and the
// same file as the training shards recorded (seqtok shards carry their tokenizer's sha256)
static int check_tokenizer_(const Model *m, const RunConfig *c, const Tokenizer *tok, const char *path, Err *e) {
    int V = tokenizer_vocab_size(tok);
    if (V != m->V)
        return err_set(e, "%s has %d pieces but the model's vocabulary is %d: this run was not trained with this "
                       "tokenizer (give the run's own with --tokenizer)", path, V, m->V);
    if (c->data.train.n == 0 || strpbrk(c->data.train.v[0], "*?[")) return 0;
    Shard sh;
    Err ignore;
    ShardFormat fmt;
    shard_format_parse(c->data.format, &fmt);
    if (shard_open(&sh, c->data.train.v[0], fmt, 0, 1u << 20, &ignore) != 0) return 0;  // data gone: vocab only
    int rc = 0;
    if (sh.has_tokenizer_hash && memcmp(sh.tokenizer_sha256, tokenizer_sha256(tok), 32) != 0) {
        char a[65], b[65];
        sha256_hex(sh.tokenizer_sha256, a);
        sha256_hex(tokenizer_sha256(tok), b);
        rc = err_set(e, "%s (sha256 %.12s...) is not the tokenizer of the run's training shard %s (%.12s...): give "
                     "the run's own with --tokenizer", path, b, c->data.train.v[0], a);
    }
    shard_close(&sh);
    return rc;
}

int zeroshot_cmd_run(Forward *f, const RunConfig *c, const ZeroshotCmd *z, Err *e) {
    const Model *m = f->m;
    const EvalTask *tasks[EVAL_TASKS_MAX];
    int nt = evalset_parse_list(z->tasks, tasks, EVAL_TASKS_MAX, e);
    if (nt < 0) return -1;
    if (m->ae)
        return err_set(e, "%s: model.head is autoencoder (MAD's compression head), not a language model: its logits "
                       "reconstruct the input instead of predicting the next token", z->run);
    const char *tpath = z->tokenizer ? z->tokenizer : c->data.tokenizer;
    if (!tpath[0])
        return err_set(e, "%s/config.json has no data.tokenizer: give the run's SentencePiece model with --tokenizer "
                       "(e.g. data/tokenizer/wikitext2_bpe8192.model)", z->run);
    Tokenizer *tok = tokenizer_load(tpath, e);
    if (!tok) return -1;
    if (check_tokenizer_(m, c, tok, tpath, e) != 0) {
        tokenizer_free(tok);
        return -1;
    }
    char dir[1400];
    if (z->out) snprintf(dir, sizeof dir, "%s", z->out);
    else snprintf(dir, sizeof dir, "%s/eval-zeroshot", z->run);
    int rc = 0;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) rc = err_set(e, "cannot create %s: %s", dir, strerror(errno));
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    fprintf(stderr, "seqeval: zero-shot on %d task%s, %s, context %d, %d thread%s, device %s\n", nt, nt == 1 ? "" : "s",
            z->run, c->train.seq_len, threads, threads == 1 ? "" : "s", forward_device(f));
    ZeroshotResult *r = xcalloc((size_t)nt, sizeof(ZeroshotResult));
    ZeroshotOpts o = {z->limit, c->train.seq_len, 1};
    for (int i = 0; i < nt && rc == 0; i++) {
        EvalSet s;
        rc = evalset_load(&s, tasks[i], z->eval_dir, z->limit, e);
        if (rc == 0) {
            rc = zeroshot_run(f, tok, &s, &o, &r[i], e);
            evalset_free(&s);
        }
    }
    if (rc == 0) {
        const char *model = strrchr(z->run, '/') && strrchr(z->run, '/')[1] ? strrchr(z->run, '/') + 1 : z->run;
        char what[1600], lim[64] = "all";
        if (z->limit) snprintf(lim, sizeof lim, "at most %ld (--limit)", z->limit);
        snprintf(what, sizeof what, "%s: zero-shot, %s items per task, context %d (train.seq_len), tokenizer %s",
                 z->run, lim, c->train.seq_len, tpath);
        rc = zeroshot_write(dir, model, what, r, nt, stdout, e);
        if (rc == 0) printf("\nwritten to %s/ (zeroshot.md, zeroshot.csv, zeroshot.json)\n", dir);
    }
    free(r);
    tokenizer_free(tok);
    return rc;
}
