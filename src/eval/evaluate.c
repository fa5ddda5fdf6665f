#include "eval/evaluate.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/dist.h"
#include "core/files.h"
#include "data/eval_windows.h"
#include "data/loader.h"
#include "run/run_config.h"

#define EVAL_NOISE_SEED 0x5EEDull

// windows per forward: enough to keep the matmuls busy, few enough that the (B,L,V) logits stay small
static int eval_batch_(long L) {
    long b = 4096 / L;
    return (int)(b < 1 ? 1 : b > 16 ? 16 : b);
}

int evaluate_context(Forward *f, Shard *shards, int n_shards, long L, long stride, long max_windows, EvalResult *r,
                     Err *e) {
    memset(r, 0, sizeof *r);
    r->context = L;
    r->pos_loss = xcalloc((size_t)L, sizeof(double));
    r->pos_count = xcalloc((size_t)L, sizeof(uint64_t));
    int Bmax = eval_batch_(L);
    int *in = xmalloc((size_t)Bmax * L * sizeof(int)), *tg = xmalloc((size_t)Bmax * L * sizeof(int));
    uint32_t *win = xmalloc(((size_t)L + 1) * sizeof(uint32_t));
    uint64_t *first = xmalloc((size_t)Bmax * sizeof(uint64_t));
    double total = 0;
    int rc = 0;
    // with several ranks (MPI) each scores every ranks-th batch; the sums are combined at the end
    uint64_t seen = 0, batch = 0, ranks = (uint64_t)dist_size(), rank = (uint64_t)dist_rank();
    for (int sh = 0; sh < n_shards && rc == 0; sh++) {
        EvalWindows p = eval_windows_plan(shards[sh].n_tokens, (uint64_t)L, (uint64_t)stride);
        uint64_t n = p.n_windows;
        for (uint64_t w0 = 0; w0 < n && rc == 0; w0 += (uint64_t)Bmax) {
            if (max_windows && seen >= (uint64_t)max_windows) break;
            int B = (int)((n - w0) < (uint64_t)Bmax ? (n - w0) : (uint64_t)Bmax);
            if (max_windows && seen + (uint64_t)B > (uint64_t)max_windows) B = (int)(max_windows - (long)seen);
            seen += (uint64_t)B;
            if (batch++ % ranks != rank) continue;
            for (int b = 0; b < B && rc == 0; b++) {
                uint64_t w = w0 + (uint64_t)b;
                rc = shard_read(&shards[sh], win, w * p.step, (uint64_t)L + 1, e);
                first[b] = eval_windows_first_scored(&p, (uint64_t)L, w);
                for (long t = 0; t < L; t++) {
                    in[(size_t)b * L + t] = (int)win[t];
                    // positions scored by an earlier window are ignored, so every token counts once
                    tg[(size_t)b * L + t] = (uint64_t)t >= first[b] ? (int)win[t + 1] : -100;
                }
            }
            f->m->noise_seed = EVAL_NOISE_SEED + w0;  // KLA+: the same samples at every evaluation
            if (rc == 0) rc = forward_run(f, in, tg, B, (int)L, 0, e);
            if (rc != 0) break;
            for (int b = 0; b < B; b++)
                for (long t = (long)first[b]; t < L; t++) {
                    double l = f->losses[(size_t)b * L + t];
                    r->pos_loss[t] += l;
                    r->pos_count[t]++;
                    total += l;
                    r->tokens++;
                }
            r->windows += (uint64_t)B;
        }
    }
    free(in);
    free(tg);
    free(win);
    free(first);
    if (dist_agree(rc, e) != 0) return -1;
    dist_sum_f64(&total, 1);
    dist_sum_f64(r->pos_loss, (size_t)L);
    dist_sum_u64(r->pos_count, (size_t)L);
    uint64_t counts[2] = {r->windows, r->tokens};
    dist_sum_u64(counts, 2);
    r->windows = counts[0];
    r->tokens = counts[1];
    if (r->tokens == 0)
        return err_set(e, "no window of %ld+1 tokens fits the evaluation data; use a shorter context", L);
    r->loss = total / (double)r->tokens;
    r->ppl = exp(r->loss);
    for (long t = 0; t < L; t++) r->pos_loss[t] = r->pos_count[t] ? r->pos_loss[t] / r->pos_count[t] : NAN;
    return 0;
}

void eval_result_free(EvalResult *r) {
    free(r->pos_loss);
    free(r->pos_count);
    memset(r, 0, sizeof *r);
}

const char *json_num(char *buf, size_t n, double v, int prec, int fixed) {
    if (!isfinite(v)) return "null";
    if (fixed) snprintf(buf, n, "%.*f", prec, v);
    else snprintf(buf, n, "%.*g", prec, v);
    return buf;
}

int params_first_nonfinite(const ParamTable *pt, const float *buf, size_t *at) {
    for (int k = 0; k < pt->n; k++) {
        const float *x = buf + pt->t[k].offset;
        for (size_t i = 0; i < pt->t[k].numel; i++) {
            if (!isfinite(x[i])) {
                *at = i;
                return k;
            }
        }
    }
    return -1;
}

static FILE *open_out_(const char *dir, const char *name, Err *e) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return fopen_output(path, 0, e);
}

// close a file written by eval_write, a write or flush error (full disk) named with the file; rc is the
// caller's status so far (a failure already recorded keeps its message)
static int close_out_(FILE *f, const char *dir, const char *name, int rc, Err *e) {
    if (!f) return rc;
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    Err ce;
    if (fclose_output(f, path, &ce) == 0) return rc;
    if (rc == 0) err_set(e, "%s", ce.msg);
    return -1;
}

int eval_write(const char *dir, const char *what, const EvalResult *r, int n, void *out_fp, Err *e) {
    FILE *out = out_fp;
    FILE *md = open_out_(dir, "ppl.md", e), *csv = md ? open_out_(dir, "ppl.csv", e) : NULL;
    FILE *js = csv ? open_out_(dir, "ppl.json", e) : NULL;
    if (!js) {
        if (md) fclose(md);
        if (csv) fclose(csv);
        return -1;
    }
    int rc = 0;
    FILE *tables[2] = {md, out};
    for (int k = 0; k < 2; k++) {
        if (!tables[k]) continue;
        fprintf(tables[k], "%s\n\n| context | windows | tokens scored | loss | ppl |\n|---:|---:|---:|---:|---:|\n", what);
        for (int i = 0; i < n; i++)
            fprintf(tables[k], "| %ld | %llu | %llu | %.4f | %.2f |\n", r[i].context, (unsigned long long)r[i].windows,
                    (unsigned long long)r[i].tokens, r[i].loss, r[i].ppl);
    }
    fprintf(csv, "context,windows,tokens,loss,ppl\n");
    cJSON *wj = cJSON_CreateString(what);  // escaped: a run path may hold quotes or backslashes
    char *wtxt = cJSON_PrintUnformatted(wj);
    fprintf(js, "{\"data\": %s, \"results\": [", wtxt ? wtxt : "null");
    cJSON_free(wtxt);
    cJSON_Delete(wj);
    for (int i = 0; i < n; i++) {
        fprintf(csv, "%ld,%llu,%llu,%.6f,%.4f\n", r[i].context, (unsigned long long)r[i].windows,
                (unsigned long long)r[i].tokens, r[i].loss, r[i].ppl);
        char lb[32], pb[32];
        fprintf(js, "%s{\"context\": %ld, \"windows\": %llu, \"tokens\": %llu, \"loss\": %s, \"ppl\": %s}",
                i ? ", " : "", r[i].context, (unsigned long long)r[i].windows, (unsigned long long)r[i].tokens,
                json_num(lb, sizeof lb, r[i].loss, 6, 1), json_num(pb, sizeof pb, r[i].ppl, 4, 1));
        char name[64];
        snprintf(name, sizeof name, "positions_%ld.csv", r[i].context);
        FILE *pf = rc == 0 ? open_out_(dir, name, e) : NULL;
        if (!pf) { rc = -1; break; }
        fprintf(pf, "position,loss,count\n");
        for (long t = 0; t < r[i].context; t++)
            if (r[i].pos_count[t]) fprintf(pf, "%ld,%.6f,%llu\n", t, r[i].pos_loss[t], (unsigned long long)r[i].pos_count[t]);
        rc = close_out_(pf, dir, name, rc, e);
    }
    fprintf(js, "]}\n");
    rc = close_out_(md, dir, "ppl.md", rc, e);
    rc = close_out_(csv, dir, "ppl.csv", rc, e);
    rc = close_out_(js, dir, "ppl.json", rc, e);
    return rc;
}

// positions of the batch whose target is not ignored and whose argmax logit equals it
static uint64_t count_correct_(const Forward *f, const int *tg, int B, int T) {
    // the predictions of the last forward
    uint64_t correct = 0;
    for (size_t i = 0; i < (size_t)B * T; i++)
        if (tg[i] >= 0) correct += forward_argmax(f, i) == tg[i];
    return correct;
}

int evaluate_loss(Forward *f, Loader *l, int B, long n_batches, double *loss, uint64_t *tokens, double *acc, Err *e) {
    LoaderCursor saved = loader_cursor(l);
    LoaderCursor start = {0, 0};
    if (loader_seek(l, start, e) != 0) return -1;
    int T = l->T;
    long avail = (long)(l->n_windows / (uint64_t)B);
    if (avail == 0) { B = (int)l->n_windows; avail = 1; }
    long nb = n_batches > 0 && n_batches < avail ? n_batches : avail;
    int *in = xmalloc((size_t)B * T * sizeof(int)), *tg = xmalloc((size_t)B * T * sizeof(int));
    double total = 0;
    uint64_t n = 0, correct = 0;
    int rc = 0;
    int ranks = dist_size(), rank = dist_rank();
    for (long i = 0; i < nb && rc == 0; i++) {
        rc = loader_next(l, in, tg, B, e);
        if (i % ranks != rank) continue;  // several ranks (MPI): each scores every ranks-th batch
        f->m->noise_seed = EVAL_NOISE_SEED + (uint64_t)i;  // KLA+: the same samples at every evaluation
        if (rc == 0) rc = forward_run(f, in, tg, B, T, acc != NULL, e);
        if (rc == 0) {
            total += f->loss * f->n_supervised;
            n += (uint64_t)f->n_supervised;
            if (acc) correct += count_correct_(f, tg, B, T);
        }
    }
    free(in);
    free(tg);
    loader_seek(l, saved, NULL);
    if (dist_agree(rc, e) != 0) return -1;
    dist_sum_f64(&total, 1);
    uint64_t counts[2] = {n, correct};
    dist_sum_u64(counts, 2);
    n = counts[0];
    correct = counts[1];
    *loss = n ? total / (double)n : NAN;
    *tokens = n;
    if (acc) *acc = n ? (double)correct / (double)n : NAN;
    return 0;
}

int evaluate_task_open(Loader *l, const RunConfig *c, int split, int shuffle, Err *e) {
    TaskSpec spec;
    if (run_config_task(c, &spec, e) != 0) return -1;
    LoaderOpts lo = {
        .what = split == TASK_TRAIN ? "data.task (train split)" : "data.task (test split)",
        .T = c->train.seq_len, .shuffle = shuffle, .seed = (uint64_t)c->run.seed,
        .task = &spec, .task_split = split,
        .n_examples = (uint64_t)(split == TASK_TRAIN ? c->data.task.train_examples : c->data.task.test_examples),
    };
    return loader_open(l, &lo, e);
}

int evaluate_task(Forward *f, const RunConfig *c, void *out, double *loss, double *acc, uint64_t *n, Err *e) {
    Loader l;
    if (evaluate_task_open(&l, c, TASK_TEST, 0, e) != 0) return -1;
    int rc = evaluate_loss(f, &l, c->train.batch_size, 0, loss, n, acc, e);
    loader_close(&l);
    char lb[32], ab[32];
    if (rc == 0 && out)
        fprintf((FILE *)out, "{\"task\": \"%s\", \"split\": \"test\", \"examples\": %d, \"positions\": %llu, "
                "\"loss\": %s, \"accuracy\": %s}\n", c->data.task.kind, c->data.task.test_examples,
                (unsigned long long)*n, json_num(lb, sizeof lb, *loss, 9, 0), json_num(ab, sizeof ab, *acc, 6, 1));
    return rc;
}
