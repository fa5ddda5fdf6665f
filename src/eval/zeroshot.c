#include "eval/zeroshot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"

#define ZS_NOISE_SEED 0x2E05ull   // KLA+: the same posterior samples at every evaluation
#define ZS_BATCH_TOKENS 4096      // rows x T per forward: keeps the (B,T,V) logits near evaluate.c's size

// ----------------------------------------------------------------------------------------------------
// tokens of one request

static int is_space_(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

int zeroshot_tokens(ZeroshotTokens *z, const Tokenizer *tok, const char *ctx, const char *cont, int max_context,
                    Err *e) {
    memset(z, 0, sizeof *z);
    // the harness moves the context's trailing whitespace to the continuation, where the word boundary
    // belongs for a tokenizer that starts words with their space
    size_t nctx = strlen(ctx), ncont = strlen(cont), k = nctx;
    while (k && is_space_(ctx[k - 1])) k--;
    char *c2 = xmalloc(nctx - k + ncont + 1);
    memcpy(c2, ctx + k, nctx - k);
    memcpy(c2 + (nctx - k), cont, ncont + 1);
    size_t nc2 = nctx - k + ncont;
    uint32_t *ids = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    if (k == 0) {
        // nothing to condition on: the EOS that ends every line in training, so the continuation is scored
        // as the start of a line, and encoded as one (with the dummy prefix)
        int eos = tokenizer_eos_id(tok);
        if (eos < 0) rc = err_set(e, "zero-shot: an empty context needs the tokenizer's EOS token, and it has none");
        else {
            ids = xmalloc(16 * sizeof(uint32_t));
            cap = 16;
            ids[n++] = (uint32_t)eos;
            rc = tokenizer_encode(tok, c2, nc2, &ids, &n, &cap, e);
        }
        z->n_ctx = 1;
    } else {
        rc = tokenizer_encode(tok, ctx, k, &ids, &n, &cap, e);
        z->n_ctx = (int)n;
        if (rc == 0) rc = tokenizer_encode_continuation(tok, c2, nc2, &ids, &n, &cap, e);
    }
    free(c2);
    if (rc != 0) {
        free(ids);
        return -1;
    }
    z->n_cont = (int)n - z->n_ctx;
    if (z->n_cont == 0) {
        free(ids);
        return err_set(e, "zero-shot: the continuation '%.60s' has no tokens: nothing to score", cont);
    }
    // keep the last max_context + 1 tokens: max_context inputs, each predicting the next
    size_t keep = (size_t)max_context + 1;
    if (n > keep) {
        memmove(ids, ids + (n - keep), keep * sizeof(uint32_t));
        n = keep;
        z->truncated = 1;
    }
    z->ids = ids;
    z->n = (int)n;
    z->n_scored = z->n_cont < z->n - 1 ? z->n_cont : z->n - 1;
    return 0;
}

void zeroshot_tokens_free(ZeroshotTokens *z) {
    free(z->ids);
    memset(z, 0, sizeof *z);
}

uint64_t zeroshot_ids_hash(const uint32_t *ids, int n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++)
        for (int b = 0; b < 4; b++) {
            h ^= (ids[i] >> (8 * b)) & 0xFF;
            h *= 0x100000001b3ull;
        }
    return h;
}

// ----------------------------------------------------------------------------------------------------
// scoring

int zeroshot_score(Forward *f, const ZeroshotTokens *r, int n, double *ll, int *greedy, Err *e) {
    // r (n,) requests, one batch row each; T = the longest's inputs
    int T = 1;
    for (int b = 0; b < n; b++)
        if (r[b].n - 1 > T) T = r[b].n - 1;
    int *in = xmalloc((size_t)n * T * sizeof(int)), *tg = xmalloc((size_t)n * T * sizeof(int));
    for (int b = 0; b < n; b++) {
        int nb = r[b].n - 1, first = nb - r[b].n_scored;
        for (int t = 0; t < T; t++) {
            // padding after the row's end: any valid id, never a target, and causal masking keeps it from
            // the row's real positions
            in[(size_t)b * T + t] = t < nb ? (int)r[b].ids[t] : 0;
            tg[(size_t)b * T + t] = t >= first && t < nb ? (int)r[b].ids[t + 1] : -100;
        }
    }
    int rc = forward_run(f, in, tg, n, T, greedy != NULL, e);
    for (int b = 0; b < n && rc == 0; b++) {
        int nb = r[b].n - 1, first = nb - r[b].n_scored, all = 1;
        double s = 0;
        for (int t = first; t < nb; t++) {
            size_t i = (size_t)b * T + t;
            s -= f->losses[i];
            if (greedy && all) all = forward_argmax(f, i) == tg[i];
        }
        ll[b] = s;
        if (greedy) greedy[b] = all;
    }
    free(in);
    free(tg);
    return rc;
}

// running sums of a 0/1 (or real) score over items, for a mean and the harness's standard error
typedef struct Moments { double s, s2; long n; } Moments;

static void moments_add_(Moments *mo, double x) {
    mo->s += x;
    mo->s2 += x * x;
    mo->n++;
}

static double moments_mean_(const Moments *mo) { return mo->n ? mo->s / mo->n : NAN; }

// sample standard deviation (n - 1) / sqrt(n), as lm-evaluation-harness's mean_stderr
static double moments_se_(const Moments *mo) {
    if (mo->n < 2) return NAN;
    double mean = mo->s / mo->n, var = (mo->s2 - mo->n * mean * mean) / (mo->n - 1);
    return sqrt(var > 0 ? var : 0) / sqrt((double)mo->n);
}

static void progress_(const ZeroshotResult *r, long done, long total, double secs, int final) {
    double rate = secs > 0 ? done / secs : 0, eta = rate > 0 ? (total - done) / rate : 0;
    fprintf(stderr, "\r  %-14s %6ld/%ld items  %7.1f items/s  %s %5.0fs   ", r->task->name, done, total, rate,
            final ? "took" : "ETA ", final ? secs : eta);
    if (final) fputc('\n', stderr);
    fflush(stderr);
}

// the items [i0, i1) of one forward: their choices' requests, scores into acc/norm/ppl sums
static int score_items_(Forward *f, const EvalSet *s, long i0, long i1, ZeroshotTokens *req, const int *row0,
                        Moments *acc, Moments *norm, Moments *llm, Err *e) {
    int rows = row0[i1 - i0];
    double *ll = xmalloc((size_t)rows * sizeof(double));
    int *greedy = xmalloc((size_t)rows * sizeof(int));
    f->m->noise_seed = ZS_NOISE_SEED + (uint64_t)i0;
    int rc = zeroshot_score(f, req, rows, ll, greedy, e);
    for (long i = i0; i < i1 && rc == 0; i++) {
        const EvalItem *it = &s->items[i];
        const double *l = ll + row0[i - i0];
        if (s->task->cloze) {
            moments_add_(acc, greedy[row0[i - i0]]);
            moments_add_(llm, l[0]);
            continue;
        }
        int best = 0, best_n = 0;
        for (int c = 1; c < it->n_choices; c++) {
            // the first of equal scores wins, as numpy's argmax
            if (l[c] > l[best]) best = c;
            double a = l[c] / (double)(it->norm_bytes[c] ? it->norm_bytes[c] : 1);
            double b = l[best_n] / (double)(it->norm_bytes[best_n] ? it->norm_bytes[best_n] : 1);
            if (a > b) best_n = c;
        }
        moments_add_(acc, best == it->gold);
        moments_add_(norm, best_n == it->gold);
    }
    free(ll);
    free(greedy);
    return rc;
}

int zeroshot_run(Forward *f, const Tokenizer *tok, const EvalSet *s, const ZeroshotOpts *o, ZeroshotResult *r,
                 Err *e) {
    memset(r, 0, sizeof *r);
    r->task = s->task;
    r->n_file = s->n_file;
    long n = o->limit && o->limit < s->n ? o->limit : s->n;
    Moments acc = {0}, norm = {0}, llm = {0};
    double chance = 0, t0 = time_now_s(), last = t0;
    ZeroshotTokens *req = xmalloc((size_t)ZS_BATCH_TOKENS * sizeof(ZeroshotTokens));
    int row0[ZS_BATCH_TOKENS + 1];
    int rc = 0;
    for (long i0 = 0; i0 < n && rc == 0;) {
        // as many whole items as fit the token budget (at least one)
        long i1 = i0;
        int rows = 0, T = 0;
        while (i1 < n && rc == 0) {
            const EvalItem *it = &s->items[i1];
            if (rows + it->n_choices > ZS_BATCH_TOKENS) break;
            int T1 = T;
            for (int c = 0; c < it->n_choices && rc == 0; c++) {
                rc = zeroshot_tokens(&req[rows + c], tok, it->ctx[c], it->cont[c], o->max_context, e);
                if (rc != 0) {
                    err_prefix(e, "%s item %ld choice %d: ", s->task->name, i1 + 1, c);
                    for (int k = 0; k < c; k++) zeroshot_tokens_free(&req[rows + k]);
                }
                else if (req[rows + c].n - 1 > T1) T1 = req[rows + c].n - 1;
            }
            if (rc != 0) break;
            if (i1 > i0 && (long)(rows + it->n_choices) * T1 > ZS_BATCH_TOKENS) {
                for (int c = 0; c < it->n_choices; c++) zeroshot_tokens_free(&req[rows + c]);
                break;
            }
            row0[i1 - i0] = rows;
            for (int c = 0; c < it->n_choices; c++) r->truncated += req[rows + c].truncated;
            rows += it->n_choices;
            T = T1;
            chance += s->task->cloze ? 0.0 : 1.0 / it->n_choices;
            i1++;
        }
        row0[i1 - i0] = rows;
        if (rc == 0) rc = score_items_(f, s, i0, i1, req, row0, &acc, &norm, &llm, e);
        for (int k = 0; k < rows; k++) zeroshot_tokens_free(&req[k]);
        i0 = i1;
        double now = time_now_s();
        if (o->progress && rc == 0 && (now - last > 0.5 || i0 == n)) {
            progress_(r, i0, n, now - t0, i0 == n);
            last = now;
        }
    }
    free(req);
    if (rc != 0) return -1;
    r->n = n;
    r->seconds = time_now_s() - t0;
    r->chance = chance / n;
    r->acc = moments_mean_(&acc);
    r->acc_se = moments_se_(&acc);
    r->acc_norm = r->acc_norm_se = r->ppl = r->ppl_se = NAN;
    if (s->task->cloze) {
        // the harness's perplexity: exp of minus the mean per-item log-likelihood; its error by the delta method
        r->ppl = exp(-moments_mean_(&llm));
        r->ppl_se = r->ppl * moments_se_(&llm);
    } else {
        r->acc_norm = moments_mean_(&norm);
        r->acc_norm_se = moments_se_(&norm);
    }
    return 0;
}
