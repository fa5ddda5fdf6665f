#include "ckpt/ckpt_state.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/files.h"

#define EXACT_INT_MAX 9007199254740992.0  // 2^53: integers above are not exact in a JSON double

// the field k of o as an integer in [lo, hi]; -1 with the message naming path and k otherwise
static int int_field_(const cJSON *o, const char *k, double lo, double hi, double *out, const char *path, Err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v) return err_set(e, "%s: field '%s' is missing", path, k);
    if (!cJSON_IsNumber(v)) return err_set(e, "%s: field '%s' must be an integer, not %s", path, k,
                                           cJSON_IsString(v) ? "a string" : cJSON_IsBool(v) ? "a boolean"
                                           : cJSON_IsNull(v) ? "null" : cJSON_IsArray(v) ? "a list" : "an object");
    double x = v->valuedouble;
    if (!isfinite(x) || x != floor(x)) return err_set(e, "%s: field '%s' is %.17g, not an integer", path, k, x);
    if (x < lo || x > hi) return err_set(e, "%s: field '%s' is %.17g, outside %.17g .. %.17g", path, k, x, lo, hi);
    *out = x;
    return 0;
}

static int num_field_(const cJSON *o, const char *k, double *out, const char *path, Err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v) return err_set(e, "%s: field '%s' is missing", path, k);
    if (!cJSON_IsNumber(v)) return err_set(e, "%s: field '%s' must be a number", path, k);
    if (!isfinite(v->valuedouble) || v->valuedouble < 0)
        return err_set(e, "%s: field '%s' is %g; it must be a finite number >= 0", path, k, v->valuedouble);
    *out = v->valuedouble;
    return 0;
}

int ckpt_state_parse(CkptState *s, const char *text, const char *path, Err *e) {
    memset(s, 0, sizeof *s);
    cJSON *st = cJSON_ParseWithOpts(text, NULL, 1);
    if (!st) return err_set(e, "%s: not valid JSON; a checkpoint's state.json is written by seqtrain", path);
    int rc = 0;
    double step = 0, total = 0, epoch = 0, window = 0, ot = 0, seed = 0, threads = 0, ranks = 1;
    if (!cJSON_IsObject(st)) rc = err_set(e, "%s: the top level must be a JSON object", path);
    if (!rc) rc = int_field_(st, "total_steps", 1, EXACT_INT_MAX, &total, path, e);
    if (!rc) rc = int_field_(st, "step", 0, EXACT_INT_MAX, &step, path, e);
    if (!rc && step > total)
        rc = err_set(e, "%s: field 'step' is %.0f, beyond total_steps %.0f: this checkpoint is not of this run or "
                     "the file was edited", path, step, total);
    if (!rc) rc = int_field_(st, "optim_t", 0, EXACT_INT_MAX, &ot, path, e);
    if (!rc && ot != step)
        rc = err_set(e, "%s: field 'optim_t' is %.0f but 'step' is %.0f; the optimizer takes one step per training "
                     "step, so they must agree", path, ot, step);
    if (!rc) rc = int_field_(st, "epoch", 0, EXACT_INT_MAX, &epoch, path, e);
    if (!rc) rc = int_field_(st, "window", 0, EXACT_INT_MAX, &window, path, e);
    if (!rc) rc = int_field_(st, "seed", 0, EXACT_INT_MAX, &seed, path, e);
    if (!rc) rc = int_field_(st, "threads", 1, 1 << 20, &threads, path, e);
    // absent in checkpoints older than MPI training: one process
    if (!rc && cJSON_GetObjectItemCaseSensitive(st, "ranks")) rc = int_field_(st, "ranks", 1, 1 << 24, &ranks, path, e);
    if (!rc) rc = num_field_(st, "tokens", &s->tokens, path, e);
    if (!rc) rc = num_field_(st, "elapsed_s", &s->elapsed_s, path, e);
    const cJSON *v;
    if (!rc && (v = cJSON_GetObjectItemCaseSensitive(st, "kernels"))) {
        if (!cJSON_IsString(v) || strlen(v->valuestring) >= sizeof s->kernels || !v->valuestring[0])
            rc = err_set(e, "%s: field 'kernels' must be a kernel set's name (avx512, avx2, generic)", path);
        else snprintf(s->kernels, sizeof s->kernels, "%s", v->valuestring);
    }
    if (!rc && (v = cJSON_GetObjectItemCaseSensitive(st, "stopped_early"))) {
        if (!cJSON_IsBool(v)) rc = err_set(e, "%s: field 'stopped_early' must be true or false", path);
        else s->stopped_early = cJSON_IsTrue(v);
    }
    // train.patience's best evaluation: both fields or neither, the step no later than the checkpoint's
    double best_step = 0;
    int nb = !!cJSON_GetObjectItemCaseSensitive(st, "best_step") + !!cJSON_GetObjectItemCaseSensitive(st, "best_metric");
    if (!rc && nb == 1)
        rc = err_set(e, "%s: fields 'best_step' and 'best_metric' (train.patience's best evaluation) come together; "
                     "one of them is missing", path);
    if (!rc && nb == 2) {
        rc = int_field_(st, "best_step", 0, step, &best_step, path, e);
        if (!rc) rc = num_field_(st, "best_metric", &s->best_metric, path, e);
        s->has_best = !rc;
    }
    if (!rc && (v = cJSON_GetObjectItemCaseSensitive(st, "config"))) {
        if (!cJSON_IsObject(v)) rc = err_set(e, "%s: field 'config' must be an object (the run's resolved config)", path);
        else s->config = cJSON_DetachItemViaPointer(st, (cJSON *)v);
    }
    cJSON_Delete(st);
    if (rc) {
        ckpt_state_free(s);
        return -1;
    }
    s->step = (long)step;
    s->total_steps = (long)total;
    s->optim_t = (long)ot;
    s->seed = (long)seed;
    s->epoch = (uint64_t)epoch;
    s->window = (uint64_t)window;
    s->threads = (int)threads;
    s->ranks = (int)ranks;
    s->best_step = (long)best_step;
    return 0;
}

int ckpt_state_read(CkptState *s, const char *path, Err *e) {
    memset(s, 0, sizeof *s);
    int not_regular;
    unsigned mode = 0;
    FILE *f = fopen_regular(path, &not_regular, &mode);
    if (!f && not_regular) return err_set(e, "%s: is %s, not a regular file", path, file_kind(mode));
    if (!f) return err_set(e, "%s: cannot open: %s", path, strerror(errno));
    char *buf = xmalloc(CKPT_STATE_FILE_MAX + 1);
    size_t n = fread(buf, 1, CKPT_STATE_FILE_MAX + 1, f);
    int bad = ferror(f), errsv = errno;
    fclose(f);
    int rc = 0;
    if (bad) rc = err_set(e, "%s: cannot read: %s", path, strerror(errsv));
    else if (n > CKPT_STATE_FILE_MAX)
        rc = err_set(e, "%s: larger than %d MiB, not a state file", path, CKPT_STATE_FILE_MAX >> 20);
    else if (memchr(buf, 0, n)) rc = err_set(e, "%s: holds a NUL byte, not a state file", path);
    if (!rc) {
        buf[n] = 0;
        rc = ckpt_state_parse(s, buf, path, e);
    }
    free(buf);
    return rc;
}

void ckpt_state_free(CkptState *s) {
    cJSON_Delete(s->config);
    s->config = NULL;
}
