#include "train/trainer.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/cpu.h"
#include "core/timer.h"
#include "data/tokenizer.h"
#include "train/ckpt_state.h"
#include "train/ckptdir.h"
#include "train/evaluate.h"
#include "train/safetensors.h"

static volatile sig_atomic_t stop_signal_ = 0;

static void on_signal_(int sig) {
    if (stop_signal_) _exit(128 + sig);  // a second Ctrl-C does not wait for the checkpoint
    stop_signal_ = sig;
}

static void fmt_duration_(double s, char *buf, size_t n) {
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60) snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, n, "%lds", t);
}

static int mkdir_p_(const char *path, Err *e) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return err_set(e, "cannot create %s: %s", tmp, strerror(errno));
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return err_set(e, "cannot create %s: %s", tmp, strerror(errno));
    return 0;
}

// ----------------------------------------------------------------------------
// setup

static int open_split_(Loader *l, const char *what, const CfgStrList *files, const RunConfig *c, int shuffle, Err *e) {
    const char *pats[CFG_LIST_MAX];
    for (int i = 0; i < files->n; i++) pats[i] = files->v[i];
    ShardFormat fmt;
    shard_format_parse(c->data.format, &fmt);
    LoaderOpts lo = {
        .patterns = pats, .n_patterns = files->n, .what = what, .format = fmt,
        .vocab_size = (uint32_t)c->data.vocab_size, .T = c->train.seq_len, .shuffle = shuffle,
        .seed = (uint64_t)c->run.seed, .cache_bytes = (size_t)c->data.cache_mb << 20,
    };
    return loader_open(l, &lo, e);
}

// data.task and shards exclude each other; without a task, data.train is required
static int data_source_check_(const RunConfig *c, Err *e) {
    if (c->train.stop_at_acc > 0 && (!run_config_has_task(c) || !c->train.eval_every))
        return err_set(e, "train.stop_at_acc: %g needs an accuracy to watch: a data.task and train.eval_every > 0 "
                       "(set it to 0 to train to the end)", c->train.stop_at_acc);
    if (run_config_has_task(c)) {
        if (c->data.train.n || c->data.val.n || c->data.test.n)
            return err_set(e, "data.task: the run trains on the task \"%s\"; remove data.train/val/test (or set "
                           "data.task.kind to \"none\" to train on them)", c->data.task.kind);
        if (c->data.tokenizer[0]) return err_set(e, "data.tokenizer: a task has no tokenizer; remove it");
        return 0;
    }
    if (c->data.train.n == 0)
        return err_set(e, "data.train: no training shards given (set data.train, or data.task for a synthetic task)");
    return 0;
}

static int tokenizer_check_(const RunConfig *c, const Loader *l, Err *e) {
    if (!c->data.tokenizer[0]) return 0;
    Tokenizer *tok = tokenizer_load(c->data.tokenizer, e);
    if (!tok) return err_prefix(e, "data.tokenizer: ");
    int rc = 0;
    if ((uint32_t)tokenizer_vocab_size(tok) != l->vocab_size)
        rc = err_set(e, "data.tokenizer: %s has %d pieces but the shards' vocab size is %u", c->data.tokenizer,
                     tokenizer_vocab_size(tok), l->vocab_size);
    for (int i = 0; rc == 0 && i < l->n_shards; i++)
        if (l->shards[i].has_tokenizer_hash && memcmp(l->shards[i].tokenizer_sha256, tokenizer_sha256(tok), 32))
            rc = err_set(e, "data.tokenizer: %s was encoded with another tokenizer than %s (sha256 differs)",
                         l->shards[i].path, c->data.tokenizer);
    tokenizer_free(tok);
    return rc;
}

// the optim section -> AdamW over the model's table (*groups holds the patterns' owner array; free it)
static int optim_setup_(Optim *opt, OptimGroup **groups, const OptimSection *os, const ParamTable *pt, Err *e) {
    const OptimGroupSection *gs = os->groups.items;
    *groups = xcalloc((size_t)os->groups.n + 1, sizeof(OptimGroup));
    for (int i = 0; i < os->groups.n; i++) {
        OptimGroup *g = &(*groups)[i];
        *g = optim_group_default();
        if (gs[i].match.n > OPTIM_GROUP_PATTERNS)
            return err_set(e, "optim.groups[%d].match: at most %d patterns", i, OPTIM_GROUP_PATTERNS);
        for (int k = 0; k < gs[i].match.n; k++) g->patterns[k] = gs[i].match.v[k];
        g->lr_mult = (float)gs[i].lr_mult;
        g->lr = (float)gs[i].lr;
        g->beta1 = (float)gs[i].beta1;
        g->beta2 = (float)gs[i].beta2;
        g->eps = (float)gs[i].eps;
        g->weight_decay = (float)gs[i].weight_decay;
        g->clip = (float)gs[i].clip;
    }
    OptimConfig oc = {
        .lr = (float)os->lr, .beta1 = (float)os->beta1, .beta2 = (float)os->beta2, .eps = (float)os->eps,
        .weight_decay = (float)os->weight_decay, .grad_clip = (float)os->grad_clip,
        .groups = *groups, .n_groups = os->groups.n,
    };
    if (optim_init(opt, pt, &oc, e) != 0) return err_prefix(e, "optim: ");
    return 0;
}

// the schedule section over total_steps steps -> *sc; run by --check too, so that a schedule the run would
// refuse at start-up (a wsd warmup overlapping its decay) fails --check
static int schedule_setup_(Schedule *sc, const RunConfig *c, long total_steps, Err *e) {
    const ScheduleSection *s = &c->schedule;
    ScheduleKind kind;
    if (schedule_kind_parse(s->kind, &kind, e) != 0) return err_prefix(e, "schedule.kind: ");
    schedule_default(sc, kind, c->optim.lr, total_steps);
    if (kind == SCHED_ONECYCLE && (s->warmup_steps || !isnan(s->warmup_frac)))
        return err_set(e, "schedule.warmup_steps/warmup_frac: onecycle warms up over schedule.pct_start; remove them");
    sc->warmup_steps = isnan(s->warmup_frac) ? s->warmup_steps : lround(s->warmup_frac * total_steps);
    sc->min_lr_frac = s->min_lr_frac;
    sc->pct_start = s->pct_start;
    sc->div_factor = s->div_factor;
    sc->final_div_factor = s->final_div_factor;
    sc->three_phase = s->three_phase;
    sc->anneal = !strcmp(s->anneal, "linear") ? ANNEAL_LINEAR : ANNEAL_COS;
    sc->cycle_momentum = s->cycle_momentum;
    sc->base_momentum = s->base_momentum;
    sc->max_momentum = s->max_momentum;
    sc->decay_frac = s->decay_frac;
    sc->final_lr_frac = s->final_lr_frac;
    sc->decay_shape = !strcmp(s->decay_shape, "1-sqrt") ? WSD_SQRT : WSD_LINEAR;
    if (schedule_check(sc, e) != 0)
        return err_prefix(e, "schedule (schedule.kind %s over %ld steps): ", s->kind, total_steps);
    return 0;
}

static void default_run_name_(const char *config_path, char *out, size_t n) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", config_path);
    char *b = basename(tmp);
    char *dot = strrchr(b, '.');
    if (dot && !strcmp(dot, ".json")) *dot = '\0';
    snprintf(out, n, "%s", b);
}

static int write_config_(const Trainer *t, Err *e) {
    cJSON *j = config_dump(&t->c, &RUN_CONFIG_SCHEMA);
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", t->run_dir);
    size_t n = strlen(s);
    s = xrealloc(s, n + 2);
    s[n] = '\n';
    s[n + 1] = '\0';
    int rc = write_file_atomic(path, s, n + 1, e);
    free(s);
    return rc;
}

// ----------------------------------------------------------------------------
// checkpoints

// the end of the non-finite stops' messages: which checkpoint is the last good one
static void last_ckpt_note_(const Trainer *t, char *buf, size_t n) {
    char ckpt[1200];
    if (ckptdir_latest(t->run_dir, ckpt, sizeof ckpt, NULL) == 1)
        snprintf(buf, n, "the last good checkpoint is %s", ckpt);
    else snprintf(buf, n, "no checkpoint was written yet");
}

// a checkpoint never holds a NaN or an infinity: an update that overflowed the parameters or the
// optimizer's moments stops the run here, naming the tensor, and the last good checkpoint stays the latest
static int check_finite_state_(const Trainer *t, Err *e) {
    const float *bufs[] = {t->model.params, t->opt.m, t->opt.v};
    const char *what[] = {"parameter", "optimizer first moment of", "optimizer second moment of"};
    for (int b = 0; b < 3; b++) {
        size_t at;
        int k = params_first_nonfinite(&t->model.pt, bufs[b], &at);
        if (k < 0) continue;
        char note[1400];
        last_ckpt_note_(t, note, sizeof note);
        return err_set(e, "step %ld: %s '%s' holds a non-finite value (%g at element %zu) after the update: training "
                       "diverged; no checkpoint written; %s", t->step, what[b], t->model.pt.t[k].name,
                       (double)bufs[b][t->model.pt.t[k].offset + at], at, note);
    }
    return 0;
}

static int save_checkpoint_(Trainer *t, Err *e) {
    // run.device cuda: the state lives on the GPU; the files are written from the host copies, so they are
    // the CPU's format byte for byte
    if (t->gpu) gpu_download(t->gpu, t->model.params, t->opt.m, t->opt.v);
    if (check_finite_state_(t, e) != 0) return -1;
    CkptDir cd;
    if (ckptdir_begin(&cd, t->run_dir, t->step, e) != 0) return -1;
    char path[2048];
    char step_s[32];
    snprintf(step_s, sizeof step_s, "%ld", t->step);
    const char *meta[] = {"format", "seqtrain", "step", step_s};
    const char *pre[] = {"m.", "v."};
    const float *bufs[] = {t->opt.m, t->opt.v};
    int rc = ckptdir_path(&cd, "model.safetensors", path, sizeof path, e);
    if (rc == 0) rc = safetensors_write_table(path, &t->model.pt, t->model.params, meta, 2, e);
    if (rc == 0) rc = ckptdir_path(&cd, "optim.safetensors", path, sizeof path, e);
    if (rc == 0) rc = safetensors_write_tables(path, &t->model.pt, pre, bufs, 2, meta, 2, e);
    if (rc == 0) {
        LoaderCursor cur = loader_cursor(&t->train);
        cJSON *st = cJSON_CreateObject();
        cJSON_AddNumberToObject(st, "step", (double)t->step);
        cJSON_AddNumberToObject(st, "total_steps", (double)t->total_steps);
        cJSON_AddNumberToObject(st, "epoch", (double)cur.epoch);
        cJSON_AddNumberToObject(st, "window", (double)cur.pos);
        cJSON_AddNumberToObject(st, "optim_t", (double)t->opt.t);
        cJSON_AddNumberToObject(st, "tokens", t->tokens);
        cJSON_AddNumberToObject(st, "elapsed_s", t->elapsed);
        cJSON_AddNumberToObject(st, "seed", t->c.run.seed);
        cJSON_AddNumberToObject(st, "threads", t->threads);
        cJSON_AddStringToObject(st, "kernels", kernel_set_name(kernel_set()));
        cJSON_AddBoolToObject(st, "stopped_early", t->stopped_early);
        cJSON_AddItemToObject(st, "config", config_dump(&t->c, &RUN_CONFIG_SCHEMA));
        char *s = cJSON_Print(st);
        cJSON_Delete(st);
        rc = ckptdir_path(&cd, "state.json", path, sizeof path, e);
        if (rc == 0) rc = write_file_atomic(path, s, strlen(s), e);
        free(s);
    }
    if (rc == 0) rc = ckptdir_commit(&cd, e);
    if (rc != 0) {
        ckptdir_abort(&cd);
        return err_prefix(e, "checkpoint at step %ld: ", t->step);
    }
    if (ckptdir_prune(t->run_dir, t->c.train.keep_last, e) < 0) return -1;
    return 0;
}

// the "step" metadata of a checkpoint's safetensors file ("" when it has none)
static int file_step_(const char *path, char *out, size_t n, Err *e) {
    SafeTensorsFile f;
    if (safetensors_open(&f, path, e) != 0) return -1;
    const char *v = safetensors_meta(&f, "step");
    snprintf(out, n, "%s", v ? v : "");
    safetensors_close(&f);
    return 0;
}

// Everything state.json says must agree with the rest before a byte of the run directory changes: the
// checkpoint directory's name, the step the model and optimizer files record, the number of steps the
// config gives, and where the data cursor stands after that many steps. `changed`: the config was changed
// on purpose (--set), so the step count and cursor may move.
static int check_state_(const Trainer *t, const char *ckpt, const char *state_path, const CkptState *st, int changed,
                        Err *e) {
    const char *base = strrchr(ckpt, '/');
    long dir_step = ckptdir_parse_name(base ? base + 1 : ckpt);
    if (dir_step != st->step)
        return err_set(e, "%s: field 'step' is %ld but the checkpoint directory is %s (step %ld); the file was "
                       "edited or moved", state_path, st->step, base ? base + 1 : ckpt, dir_step);
    static const char *files[] = {"model.safetensors", "optim.safetensors"};
    for (int i = 0; i < 2; i++) {
        char path[1300], meta[64], want[32];
        snprintf(path, sizeof path, "%s/%s", ckpt, files[i]);
        if (file_step_(path, meta, sizeof meta, e) != 0) return -1;
        snprintf(want, sizeof want, "%ld", st->step);
        if (meta[0] && strcmp(meta, want) != 0)
            return err_set(e, "%s: field 'step' is %ld but %s records step %s; the files are of different "
                           "checkpoints", state_path, st->step, path, meta);
    }
    if (st->total_steps != t->total_steps && !changed)
        return err_set(e, "%s: field 'total_steps': the run was planned for %ld steps but its config now gives %ld; "
                       "the data or config changed since the checkpoint", state_path, st->total_steps, t->total_steps);
    if (st->step > t->total_steps)
        return err_set(e, "%s: field 'step' is %ld, beyond the %ld steps the config gives", state_path, st->step,
                       t->total_steps);
    if (!changed) {
        // the cursor after step * grad_accum * batch_size windows (it moves to the next epoch lazily)
        unsigned __int128 used = (unsigned __int128)st->step * (unsigned)t->c.train.grad_accum *
                                 (unsigned)t->c.train.batch_size, N = t->train.n_windows;
        unsigned __int128 ep = used == 0 || N == 0 ? 0 : (used - 1) / N, pos = used - ep * N;
        if (N && (ep != st->epoch || pos != st->window))
            return err_set(e, "%s: fields 'epoch' %llu and 'window' %llu are not where %ld steps of %d x %d windows "
                           "leave the data (epoch %llu, window %llu of %llu); the file was edited or the data changed",
                           state_path, (unsigned long long)st->epoch, (unsigned long long)st->window, st->step,
                           t->c.train.grad_accum, t->c.train.batch_size, (unsigned long long)ep,
                           (unsigned long long)pos, (unsigned long long)N);
    }
    if (st->seed != t->c.run.seed && !changed)
        return err_set(e, "%s: field 'seed' is %ld but the config's run.seed is %ld", state_path, st->seed,
                       (long)t->c.run.seed);
    return 0;
}

static int load_checkpoint_(Trainer *t, const char *ckpt, const CkptState *st, Err *e) {
    char path[2048];
    snprintf(path, sizeof path, "%s/model.safetensors", ckpt);
    if (safetensors_read_table(path, &t->model.pt, t->model.params, e) != 0) return -1;
    snprintf(path, sizeof path, "%s/optim.safetensors", ckpt);
    const char *pre[] = {"m.", "v."};
    float *bufs[] = {t->opt.m, t->opt.v};
    if (safetensors_read_tables(path, &t->model.pt, pre, bufs, 2, e) != 0) return -1;
    snprintf(path, sizeof path, "%s/state.json", ckpt);
    LoaderCursor cur = {st->epoch, st->window};
    if (loader_seek(&t->train, cur, e) != 0) return err_prefix(e, "%s: ", path);
    if (st->threads != t->threads)
        fprintf(stderr, "seqtrain: note: the run used %d thread%s and resumes with %d; results stay correct but are "
                "not bit-identical to an uninterrupted run (set OMP_NUM_THREADS=%d for that)\n", st->threads,
                st->threads == 1 ? "" : "s", t->threads, st->threads);
    const char *now = kernel_set_name(kernel_set());
    if (st->kernels[0] && strcmp(st->kernels, now) != 0)
        fprintf(stderr, "seqtrain: note: the run used the %s kernels and resumes with %s; results stay correct but "
                "are not bit-identical to an uninterrupted run (set SEQ_KERNELS=%s for that)\n", st->kernels, now,
                st->kernels);
    t->stopped_early = st->stopped_early;
    t->step = st->step;
    t->opt.t = st->optim_t;
    t->tokens = st->tokens;
    t->elapsed = st->elapsed_s;
    return 0;
}

// ----------------------------------------------------------------------------
// the config at resume: config.json (plus --set) against the config stored in the checkpoint

// every leaf where `was` (the checkpoint's) and `now` differ, as "path": {"checkpoint": ..., "now": ...} in
// out. Keys on one side only are a schema of another version (a newer key binds its default): skipped.
static void config_diff_(const cJSON *was, const cJSON *now, const char *path, cJSON *out) {
    if (cJSON_IsObject(was) && cJSON_IsObject(now)) {
        for (const cJSON *c = now->child; c; c = c->next) {
            const cJSON *w = cJSON_GetObjectItemCaseSensitive(was, c->string);
            if (!w) continue;
            char *sub = xmalloc(strlen(path) + strlen(c->string) + 2);
            sprintf(sub, "%s%s%s", path, path[0] ? "." : "", c->string);
            config_diff_(w, c, sub, out);
            free(sub);
        }
        return;
    }
    if (cJSON_IsArray(was) && cJSON_IsArray(now) && cJSON_GetArraySize(was) == cJSON_GetArraySize(now)) {
        int i = 0;
        for (const cJSON *w = was->child, *c = now->child; w && c; w = w->next, c = c->next, i++) {
            char *sub = xmalloc(strlen(path) + 24);
            sprintf(sub, "%s[%d]", path, i);
            config_diff_(w, c, sub, out);
            free(sub);
        }
        return;
    }
    int same = cJSON_IsNumber(was) && cJSON_IsNumber(now) ? was->valuedouble == now->valuedouble
                                                          : cJSON_Compare(was, now, 1);
    if (same) return;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddItemToObject(d, "checkpoint", cJSON_Duplicate(was, 1));
    cJSON_AddItemToObject(d, "now", cJSON_Duplicate(now, 1));
    cJSON_AddItemToObject(out, path, d);
}

// does one of the --set keys name path or a key above it?
static int set_covers_(const TrainerOpts *o, const char *path) {
    for (int i = 0; i < o->n_sets; i++) {
        const char *eq = strchr(o->sets[i], '=');
        size_t n = eq ? (size_t)(eq - o->sets[i]) : strlen(o->sets[i]);
        if (strncmp(path, o->sets[i], n) == 0 && (path[n] == 0 || path[n] == '.' || path[n] == '['))
            return 1;
    }
    return 0;
}

// "optim.lr (0.002 in the checkpoint, 0.5 now)" for messages, values cut short
static void describe_change_(const cJSON *d, char *buf, size_t n) {
    char *w = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(d, "checkpoint"));
    char *c = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(d, "now"));
    snprintf(buf, n, "%s (%.40s in the checkpoint, %.40s now)", d->string, w, c);
    free(w);
    free(c);
}

// Compare; refuse changes no --set names; print and return (in *changes, NULL when none) those it names.
static int config_changes_(const Trainer *t, const TrainerOpts *o, const char *state_path, const CkptState *st,
                           cJSON **changes, Err *e) {
    *changes = NULL;
    if (!st->config) {
        fprintf(stderr, "seqtrain: note: %s stores no config (an older checkpoint): config.json is not compared "
                "with it\n", state_path);
        return 0;
    }
    cJSON *now = config_dump(&t->c, &RUN_CONFIG_SCHEMA), *diff = cJSON_CreateObject();
    config_diff_(st->config, now, "", diff);
    cJSON_Delete(now);
    char list[700] = "", fix[400] = "";
    int n_bad = 0;
    for (const cJSON *d = diff->child; d; d = d->next) {
        if (set_covers_(o, d->string)) continue;
        if (n_bad++ < 4) {
            char one[200];
            describe_change_(d, one, sizeof one);
            size_t l = strlen(list);
            snprintf(list + l, sizeof list - l, "%s%s", l ? ", " : "", one);
            char *v = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(d, "now"));
            l = strlen(fix);
            snprintf(fix + l, sizeof fix - l, " --set '%s=%.60s'", d->string, v);
            free(v);
        }
    }
    if (n_bad) {
        cJSON_Delete(diff);
        char more[48] = "";
        if (n_bad > 4) snprintf(more, sizeof more, " and %d more", n_bad - 4);
        return err_set(e, "%s/config.json differs from the config stored in %s: %s%s; restore config.json, or make "
                       "the change explicit: seqtrain --resume %s%s", t->run_dir, state_path, list, more, t->run_dir,
                       fix);
    }
    if (!diff->child) {
        cJSON_Delete(diff);
        return 0;
    }
    for (const cJSON *d = diff->child; d; d = d->next) {
        char one[200];
        describe_change_(d, one, sizeof one);
        printf("seqtrain: resuming with a changed config (--set): %s\n", one);
    }
    *changes = diff;
    return 0;
}

// keep the log lines up to the checkpoint's step, so a resumed run's log reads as one run
static int truncate_log_(const char *log_path, long step, Err *e) {
    FILE *f = fopen(log_path, "rb");
    if (!f) return 0;
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s.tmp", log_path);
    FILE *o = fopen(tmp, "wb");
    if (!o) { fclose(f); return err_set(e, "cannot write %s: %s", tmp, strerror(errno)); }
    char line[4096];
    int bad = 0;
    while (!bad && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "\"step\":");
        long s = p ? strtol(p + 7, NULL, 10) : 0;
        if (s <= step && fputs(line, o) == EOF) bad = 1;
    }
    fclose(f);
    errno = 0;
    if (ferror(o)) bad = 1;
    if (fclose(o) != 0) bad = 1;
    if (bad) {
        int err = errno;
        remove(tmp);
        return err_set(e, "cannot rewrite %s: writing %s failed: %s", log_path, tmp, err ? strerror(err) : "write error");
    }
    if (rename(tmp, log_path) != 0) return err_set(e, "cannot rewrite %s: %s", log_path, strerror(errno));
    return 0;
}

// a resume with --set changes: config.json now holds the new config, and log.jsonl a line
// {"step": S, "resumed_with_changes": {"optim.lr": {"checkpoint": 0.002, "now": 0.5}, ...}}
static int record_changes_(const Trainer *t, const char *log_path, const cJSON *changes, Err *e) {
    if (write_config_(t, e) != 0) return -1;
    char *s = cJSON_PrintUnformatted(changes);
    FILE *f = fopen(log_path, "a");
    int bad = !f || fprintf(f, "{\"step\": %ld, \"resumed_with_changes\": %s}\n", t->step, s) < 0;
    int err = errno;
    if (f && fclose(f) != 0 && !bad) bad = 1, err = errno;
    free(s);
    if (bad) return err_set(e, "cannot write %s: %s", log_path, strerror(err));
    return 0;
}

// ----------------------------------------------------------------------------
// --check

static void print_split_(const char *what, const Loader *l, const RunConfig *c) {
    printf("%-11s %d shard%s  %12llu tokens  vocab %u  %llu windows of %d tokens = %llu batches of %d\n", what,
           l->n_shards, l->n_shards == 1 ? " " : "s", (unsigned long long)l->n_tokens, l->vocab_size,
           (unsigned long long)l->n_windows, c->train.seq_len + 1,
           (unsigned long long)(l->n_windows / (uint64_t)c->train.batch_size), c->train.batch_size);
}

// one layer's decoding state as Table 1 of paper 002 writes it (MixerOps.state_terms): "name: formula = value"
// per term, those Table 1 does not count marked so, then Table 1's count next to the full one when they differ
// (else the total of several terms).
// Adds Table 1's count to *paper; the cell is empty for a mixer that describes no terms.
static void print_state_terms_(const Model *m, int l, int T, size_t *paper) {
    StateTerms st;
    if (!model_layer_state_terms(m, l, T, &st) || !st.n) return;
    for (int i = 0; i < st.n; i++) {
        // " = value" unless the formula already ends in it ("H = 4", "1")
        char v[32];
        const char *f = st.t[i].formula, *last = strrchr(f, '=');
        snprintf(v, sizeof v, "%zu", st.t[i].value);
        last = last ? last + 1 + (last[1] == ' ') : f;
        printf("%s%s%s: %s", i ? "; " : "", st.t[i].name, st.t[i].table1 ? "" : " (not in Table 1)", f);
        if (strcmp(last, v)) printf(" = %s", v);
    }
    size_t p = state_terms_total(&st, 1), all = state_terms_total(&st, 0);
    if (p != all) printf("; Table 1 counts %zu of %zu", p, all);
    else if (st.n > 1) printf("; total %zu", all);
    *paper += p;
}

// --info: each layer's mixer, its parameters and what it keeps per sequence when decoding (BLA Table 1's
// state-size accounting): a fixed recurrent state, and/or a cache that grows by so many floats per token (up to a
// window); the last column writes it as Table 1's formulas with the layer's numbers
static void print_layers_(const Model *m, int T) {
    printf("\n| layer | mixer | mixer parameters | decoding state (floats) | at T = %d | Table 1 formula at T = %d |\n"
           "|---:|---|---:|---|---:|---|\n", T, T);
    size_t total = 0, paper = 0;
    for (int l = 0; l < m->L; l++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "blocks.%d.mixer.", l);
        size_t n = 0;
        for (int k = 0; k < m->pt.n; k++)
            if (!strncmp(m->pt.t[k].name, prefix, strlen(prefix))) n += m->pt.t[k].numel;
        size_t fixed = model_layer_state_size(m, l, 0), per_tok = model_layer_cache_per_token(m, l);
        size_t at_T = model_layer_state_size(m, l, T);  // a sliding window caps the cache
        total += at_T;
        char what[96];
        if (per_tok && fixed) snprintf(what, sizeof what, "%zu + %zu per token (KV cache)", fixed, per_tok);
        else if (per_tok) snprintf(what, sizeof what, "%zu per token (KV cache)", per_tok);
        else snprintf(what, sizeof what, "%zu (recurrent)", fixed);
        printf("| %d | %s%s | %zu | %s | %zu | ", l, model_layer_name(m, l), m->lp[l].has_mlp ? "" : " (no MLP)", n,
               what, at_T);
        print_state_terms_(m, l, T, &paper);
        printf(" |\n");
    }
    printf("| all | | | | %zu | Table 1 counts %zu |\n", total, paper);
}

// train.steps, or the steps of train.epochs over the training windows
static long total_steps_(const RunConfig *c, const Loader *train) {
    long per_step = (long)c->train.batch_size * c->train.grad_accum;
    return c->train.steps ? c->train.steps : (long)ceil(c->train.epochs * (double)train->n_windows / (double)per_step);
}

// what the run uses instead of what its config names: a model vocabulary above the data's (a paper config
// on the bundled WikiText-2), and a token budget of many epochs over small data
static void print_substitutions_(const RunConfig *c, const Loader *train, int model_vocab, long total_steps) {
    if (run_config_has_task(c)) return;
    if ((uint32_t)model_vocab > train->vocab_size)
        printf("note: model.vocab_size %d is larger than the data's %u (%s): the %u extra embedding and head rows "
               "never see a target but are counted in the parameters; model.vocab_size 0 sizes the model to the "
               "data\n", model_vocab, train->vocab_size, c->data.tokenizer[0] ? c->data.tokenizer : "its tokenizer",
               (uint32_t)model_vocab - train->vocab_size);
    int64_t per_step = (int64_t)c->train.grad_accum * c->train.batch_size * c->train.seq_len;
    double budget = (double)total_steps * (double)per_step;
    double epochs = train->n_tokens ? budget / (double)train->n_tokens : 0;
    if (epochs > 1.5)
        printf("note: %ld steps x %lld tokens = %.3g tokens, %.1f epochs of the %llu training tokens (%s)\n",
               total_steps, (long long)per_step, budget, epochs,
               (unsigned long long)train->n_tokens, train->n_shards ? train->shards[0].path : "");
}

int trainer_check(const RunConfig *c, int info, Err *e) {
    Loader l[3];
    memset(l, 0, sizeof l);
    const CfgStrList *files[3] = {&c->data.train, &c->data.val, &c->data.test};
    const char *what[3] = {"data.train", "data.val", "data.test"};
    int opened = 0, rc = run_config_check(c, e);
    if (rc == 0) rc = data_source_check_(c, e);
    if (rc == 0 && run_config_has_task(c)) {
        // the task's two splits in l[0] (train) and l[1] (test)
        rc = evaluate_task_open(&l[0], c, TASK_TRAIN, c->data.shuffle, e);
        if (rc == 0) rc = evaluate_task_open(&l[1], c, TASK_TEST, 0, e);
        if (rc == 0)
            printf("task        %s: vocab %u, %llu train / %llu test examples of %d tokens\n", c->data.task.kind,
                   l[0].vocab_size, (unsigned long long)l[0].n_windows, (unsigned long long)l[1].n_windows,
                   c->train.seq_len);
        opened = 3;
    }
    for (int i = 0; i < 3 && rc == 0 && !run_config_has_task(c); i++, opened++) {
        if (files[i]->n == 0) { memset(&l[i], 0, sizeof l[i]); continue; }
        rc = open_split_(&l[i], what[i], files[i], c, i == 0 && c->data.shuffle, e);
        if (rc != 0) break;
        print_split_(what[i], &l[i], c);
        if (i > 0 && l[i].vocab_size != l[0].vocab_size)
            rc = err_set(e, "%s: %s has vocab size %u but data.train's %s has %u; all splits must use one vocabulary",
                         what[i], l[i].shards[0].path, l[i].vocab_size, l[0].shards[0].path, l[0].vocab_size);
    }
    for (int i = 0; i < 3 && rc == 0; i++)
        if (l[i].shards) rc = tokenizer_check_(c, &l[i], e);
    if (rc == 0 && c->data.tokenizer[0]) {
        int T = c->train.seq_len, n = T < 24 ? T : 24;
        int32_t *x = xmalloc((size_t)T * sizeof(int32_t)), *y = xmalloc((size_t)T * sizeof(int32_t));
        Tokenizer *tok = NULL;
        rc = loader_next(&l[0], x, y, 1, e);
        if (rc == 0 && !(tok = tokenizer_load(c->data.tokenizer, e))) rc = err_prefix(e, "data.tokenizer: ");
        if (rc == 0) {
            uint32_t ids[24];
            for (int t = 0; t < n; t++) ids[t] = (uint32_t)x[t];
            char *text;
            size_t len;
            rc = tokenizer_decode(tok, ids, (size_t)n, &text, &len, e);
            if (rc == 0) {
                for (size_t k = 0; k < len; k++) if (text[k] == '\n') text[k] = ' ';
                printf("first training window, %d tokens: \"%s\"\n", n, text);
                free(text);
            }
        }
        if (tok) tokenizer_free(tok);
        free(x);
        free(y);
    }
    if (rc == 0) {
        Model m;
        rc = model_build(&m, &c->model, (int)l[0].vocab_size, NULL, (uint64_t)c->run.seed, e);
        if (rc == 0) {
            printf("model       %zu parameters, %d layers, d_model %d, vocab %d\n", model_num_params(&m), m.L, m.C, m.V);
            if (info) print_layers_(&m, c->train.seq_len);
            long total = total_steps_(c, &l[0]);
            print_substitutions_(c, &l[0], m.V, total);
            Schedule sc;
            if (total < 1) rc = err_set(e, "train: 0 steps (set train.steps, or train.epochs > 0)");
            else rc = schedule_setup_(&sc, c, total, e);
            Optim opt;
            OptimGroup *groups = NULL;
            if (rc == 0 && (rc = optim_setup_(&opt, &groups, &c->optim, &m.pt, e)) == 0) optim_free(&opt);
            free(groups);
            if (rc == 0 && !strcmp(c->run.device, "cuda")) rc = gpu_check_model(&m, e);
            model_free(&m);
        }
    }
    for (int i = 0; i < opened && i < 3; i++) loader_close(&l[i]);
    if (rc == 0) printf("config and data OK\n");
    return rc;
}

// ----------------------------------------------------------------------------
// the loop

static int setup_(Trainer *t, const TrainerOpts *o, Err *e) {
    char config_path[1200];
    if (o->resume_dir) {
        snprintf(config_path, sizeof config_path, "%s/config.json", o->resume_dir);
    } else {
        snprintf(config_path, sizeof config_path, "%s", o->config_path);
    }
    if (run_config_load(&t->c, config_path, o->sets, o->n_sets, &t->origins, e) != 0) return -1;
    RunConfig *c = &t->c;
#ifdef _OPENMP
    if (c->run.threads > 0) omp_set_num_threads(c->run.threads);
    t->threads = omp_get_max_threads();
#else
    t->threads = 1;
#endif
    if (o->resume_dir) {
        snprintf(t->run_dir, sizeof t->run_dir, "%s", o->resume_dir);
    } else {
        char name[512];
        if (c->run.name[0]) snprintf(name, sizeof name, "%s", c->run.name);
        else default_run_name_(o->config_path, name, sizeof name);
        snprintf(c->run.name, sizeof c->run.name, "%s", name);
        snprintf(t->run_dir, sizeof t->run_dir, "%s/%s", c->run.dir, name);
        char latest[1200];
        int has = ckptdir_latest(t->run_dir, latest, sizeof latest, NULL);
        if (has == 1)
            return err_set(e, "%s already holds a run (%s); continue it with --resume %s, or start another with "
                           "--set run.name=NEW", t->run_dir, latest, t->run_dir);
    }
    if (run_config_check(c, e) != 0 || data_source_check_(c, e) != 0) return err_prefix(e, "%s: ", config_path);
    if (run_config_has_task(c)) {
        if (evaluate_task_open(&t->train, c, TASK_TRAIN, c->data.shuffle, e) != 0) return -1;
        if (evaluate_task_open(&t->val, c, TASK_TEST, 0, e) != 0) return -1;
        t->has_val = 1;
    } else if (open_split_(&t->train, "data.train", &c->data.train, c, c->data.shuffle, e) != 0) {
        return -1;
    }
    if (c->data.val.n) {
        if (open_split_(&t->val, "data.val", &c->data.val, c, 0, e) != 0) return -1;
        t->has_val = 1;
        if (t->val.vocab_size != t->train.vocab_size)
            return err_set(e, "data.val: %s has vocab size %u but data.train's %s has %u", t->val.shards[0].path,
                           t->val.vocab_size, t->train.shards[0].path, t->train.vocab_size);
    }
    if (tokenizer_check_(c, &t->train, e) != 0) return -1;
    if (model_build(&t->model, &c->model, (int)t->train.vocab_size, t->origins, (uint64_t)c->run.seed, e) != 0)
        return -1;
    t->total_steps = total_steps_(c, &t->train);
    if (t->total_steps < 1) return err_set(e, "train: 0 steps (set train.steps, or train.epochs > 0)");
    if (optim_setup_(&t->opt, &t->groups, &c->optim, &t->model.pt, e) != 0 ||
        schedule_setup_(&t->sched, c, t->total_steps, e) != 0)
        return -1;
    if (!strcmp(c->run.device, "cuda") && gpu_open(&t->gpu, &t->model, &t->opt, c->run.precision, e) != 0) return -1;
    if (mkdir_p_(t->run_dir, e) != 0) return -1;
    char log_path[1200];
    snprintf(log_path, sizeof log_path, "%s/log.jsonl", t->run_dir);
    if (o->resume_dir) {
        char ckpt[1200], state_path[1300];
        int has = ckptdir_latest(t->run_dir, ckpt, sizeof ckpt, e);
        if (has < 0) return -1;
        if (has == 0) return err_set(e, "%s: no complete checkpoint to resume from", t->run_dir);
        // everything is read and checked before the log (or anything else in the run directory) changes
        snprintf(state_path, sizeof state_path, "%s/state.json", ckpt);
        CkptState st;
        cJSON *changes = NULL;
        if (ckpt_state_read(&st, state_path, e) != 0) return -1;
        int rc = config_changes_(t, o, state_path, &st, &changes, e);
        if (rc == 0) rc = check_state_(t, ckpt, state_path, &st, changes != NULL, e);
        if (rc == 0) rc = load_checkpoint_(t, ckpt, &st, e);
        if (rc == 0 && t->gpu) gpu_upload(t->gpu, t->model.params, t->opt.m, t->opt.v);
        ckpt_state_free(&st);
        if (rc == 0) rc = truncate_log_(log_path, t->step, e);
        char diag_path[1200];
        snprintf(diag_path, sizeof diag_path, "%s/diag.jsonl", t->run_dir);
        if (rc == 0) rc = truncate_log_(diag_path, t->step, e);
        if (rc == 0 && changes) rc = record_changes_(t, log_path, changes, e);
        cJSON_Delete(changes);
        if (rc != 0) return -1;
        if (t->stopped_early)
            printf("%s stopped early at step %ld of %ld (train.stop_at_acc reached); nothing left to train\n",
                   t->run_dir, t->step, t->total_steps);
        else printf("resuming %s from %s (step %ld of %ld)\n", t->run_dir, ckpt, t->step, t->total_steps);
    } else {
        struct stat st;
        if (stat(log_path, &st) == 0)
            fprintf(stderr, "seqtrain: note: %s had no checkpoint; starting it over\n", t->run_dir);
        if (write_config_(t, e) != 0) return -1;
        FILE *f = fopen(log_path, "w");
        if (!f) return err_set(e, "cannot write %s: %s", log_path, strerror(errno));
        fclose(f);
        snprintf(log_path, sizeof log_path, "%s/diag.jsonl", t->run_dir);
        remove(log_path);  // a previous run's diagnostics; ENOENT is fine
    }
    return 0;
}

// one line per layer whose mixer reports diagnostics (docs/mixers.md): {"step", "layer", name: [per head]}
static int diag_write_(const Trainer *t, Err *e) {
    const Model *m = &t->model;
    FILE *f = NULL;
    for (int l = 0; l < m->L; l++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "step", (double)t->step);
        cJSON_AddNumberToObject(o, "layer", l);
        if (!model_layer_diag(m, l, o)) {
            cJSON_Delete(o);
            continue;
        }
        if (!f) {
            char path[1200];
            snprintf(path, sizeof path, "%s/diag.jsonl", t->run_dir);
            if (!(f = fopen(path, "a"))) {
                cJSON_Delete(o);
                return err_set(e, "cannot write %s: %s", path, strerror(errno));
            }
        }
        char *txt = cJSON_PrintUnformatted(o);  // cJSON prints a non-finite number as null
        fprintf(f, "%s\n", txt);
        cJSON_free(txt);
        cJSON_Delete(o);
    }
    if (!f) return 0;
    errno = 0;
    int bad = ferror(f);
    if (fclose(f) != 0) bad = 1;
    if (bad) return err_set(e, "cannot write %s/diag.jsonl: %s", t->run_dir, errno ? strerror(errno) : "write error");
    return 0;
}

// the run's log.jsonl, open for appending; every line is flushed and checked (a full disk is an error)
typedef struct RunLog_ {
    FILE *f;
    char path[1200];
} RunLog_;

static int log_line_(RunLog_ *log, Err *e, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int log_line_(RunLog_ *log, Err *e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    errno = 0;
    int bad = vfprintf(log->f, fmt, ap) < 0;
    va_end(ap);
    if (fputc('\n', log->f) == EOF) bad = 1;
    if (fflush(log->f) != 0 || ferror(log->f)) bad = 1;
    if (bad) return err_set(e, "cannot write %s: %s", log->path, errno ? strerror(errno) : "write error");
    return 0;
}

// acc: the task's test accuracy (NAN without a task)
static int validate_(Trainer *t, RunLog_ *log, double *acc_out, Err *e) {
    *acc_out = NAN;
    if (!t->has_val) return 0;
    // run.device cuda: evaluation runs on the host model (docs/gpu.md), with the GPU's parameters
    if (t->gpu) gpu_download(t->gpu, t->model.params, NULL, NULL);
    double loss, acc;
    uint64_t n;
    int task = run_config_has_task(&t->c);
    if (evaluate_loss(&t->model, &t->val, t->c.train.batch_size, t->c.train.eval_batches, &loss, &n, task ? &acc : NULL,
                      e) != 0)
        return -1;
    char lb[32], ab[32], pb[32];
    if (task) {
        // a task: accuracy over the supervised positions of its test split is the metric
        if (log_line_(log, e, "{\"step\": %ld, \"val_loss\": %s, \"val_acc\": %s, \"val_tokens\": %llu}", t->step,
                      json_num(lb, sizeof lb, loss, 9, 0), json_num(ab, sizeof ab, acc, 6, 1), (unsigned long long)n))
            return -1;
        if (!t->o->quiet) printf("%sstep %ld: test loss %.4f, accuracy %.4f (%llu positions)\n",
                                 isatty(1) ? "\r\033[K" : "", t->step, loss, acc, (unsigned long long)n);
        *acc_out = acc;
    } else {
        if (log_line_(log, e, "{\"step\": %ld, \"val_loss\": %s, \"val_ppl\": %s, \"val_tokens\": %llu}", t->step,
                      json_num(lb, sizeof lb, loss, 9, 0), json_num(pb, sizeof pb, exp(loss), 6, 0),
                      (unsigned long long)n))
            return -1;
        if (!t->o->quiet) printf("%sstep %ld: val loss %.4f, ppl %.2f (%llu tokens)\n", isatty(1) ? "\r\033[K" : "",
                                 t->step, loss, exp(loss), (unsigned long long)n);
    }
    if (!isfinite(loss)) {
        char note[1400];
        last_ckpt_note_(t, note, sizeof note);
        return err_set(e, "step %ld: the validation loss is not finite (%g): training diverged; %s", t->step, loss, note);
    }
    return 0;
}

// a task's final evaluation: loss and accuracy over its whole test split, to RUN_DIR/eval/acc.json
static int final_eval_task_(Trainer *t, Err *e) {
    char dir[1200], path[1300];
    snprintf(dir, sizeof dir, "%s/eval", t->run_dir);
    if (mkdir_p_(dir, e) != 0) return -1;
    snprintf(path, sizeof path, "%s/acc.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return err_set(e, "cannot write %s: %s", path, strerror(errno));
    double loss, acc;
    uint64_t n;
    int rc = evaluate_task(&t->model, &t->c, f, &loss, &acc, &n, e);
    errno = 0;
    int bad = ferror(f);
    if (fclose(f) != 0) bad = 1;
    if (bad && rc == 0) rc = err_set(e, "cannot write %s: %s", path, errno ? strerror(errno) : "write error");
    if (rc == 0)
        printf("\n%s test split: accuracy %.4f, loss %.4f over %llu supervised positions (%s)\n", t->c.data.task.kind,
               acc, loss, (unsigned long long)n, path);
    return rc;
}

static int final_eval_(Trainer *t, Err *e) {
    if (t->gpu) gpu_download(t->gpu, t->model.params, NULL, NULL);
    if (run_config_has_task(&t->c)) return final_eval_task_(t, e);
    const EvalSection *ev = &t->c.eval;
    if (!ev->contexts[0]) return 0;
    long ctx[RUN_CONFIG_MAX_CONTEXTS];
    int n = run_config_eval_contexts(&t->c, ctx, e);
    if (n < 0) return -1;
    const CfgStrList *files = !strcmp(ev->split, "val") ? &t->c.data.val : &t->c.data.test;
    if (files->n == 0) return err_set(e, "eval.split: data.%s is empty", ev->split);
    Loader l;
    if (open_split_(&l, !strcmp(ev->split, "val") ? "data.val" : "data.test", files, &t->c, 0, e) != 0) return -1;
    EvalResult *r = xcalloc((size_t)n, sizeof(EvalResult));
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        rc = evaluate_context(&t->model, l.shards, l.n_shards, ctx[i], ev->stride, ev->max_windows, &r[i], e);
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/eval", t->run_dir);
    if (rc == 0) rc = mkdir_p_(dir, e);
    if (rc == 0) {
        char what[800];
        snprintf(what, sizeof what, "%s perplexity by context (trained at %d)", ev->split, t->c.train.seq_len);
        printf("\n");
        rc = eval_write(dir, what, r, n, stdout, e);
        printf("\ntables in %s/ (ppl.md, ppl.csv, ppl.json, positions_<L>.csv)\n", dir);
    }
    for (int i = 0; i < n; i++) eval_result_free(&r[i]);
    free(r);
    loader_close(&l);
    return rc;
}

static int loop_(Trainer *t, Err *e) {
    const RunConfig *c = &t->c;
    int B = c->train.batch_size, T = c->train.seq_len, A = c->train.grad_accum;
    size_t BT = (size_t)B * T;
    int *in = xmalloc((size_t)A * BT * sizeof(int)), *tg = xmalloc((size_t)A * BT * sizeof(int));
    char log_path[1200];
    snprintf(log_path, sizeof log_path, "%s/log.jsonl", t->run_dir);
    RunLog_ lg = {fopen(log_path, "a"), ""}, *log = &lg;
    snprintf(lg.path, sizeof lg.path, "%s", log_path);
    if (!lg.f) { free(in); free(tg); return err_set(e, "cannot append to %s: %s", log_path, strerror(errno)); }
    int tty = isatty(1) && !t->o->quiet;
    double t_start = time_now_s(), elapsed0 = t->elapsed, last_print = 0;
    long steps_here = 0, first_step = t->step;
    int rc = 0, status = 0;
    while (t->step < t->total_steps && !t->stopped_early) {
        double t0 = time_now_s();
        // all micro-batches first: the loss is a mean over every supervised token of the step, so each
        // backward needs the step's total count
        long n_sup = 0;
        for (int a = 0; a < A && rc == 0; a++) {
            rc = loader_next(&t->train, in + a * BT, tg + a * BT, B, e);
            for (size_t i = 0; rc == 0 && i < BT; i++) n_sup += tg[a * BT + i] != -100;
        }
        if (rc != 0) break;
        if (t->gpu) gpu_zero_grad(t->gpu);
        else model_zero_grad(&t->model);
        double loss_sum = 0;
        for (int a = 0; a < A && rc == 0; a++) {
            if (t->gpu) {
                double mb_loss;
                int mb_sup;
                rc = gpu_forward_backward(t->gpu, in + a * BT, tg + a * BT, B, T, (int)n_sup, &mb_loss, &mb_sup, e);
                if (rc == 0) loss_sum += mb_loss * mb_sup;
            } else {
                // KLA+ samples: fresh per micro-batch, and the same again when a resumed run replays the step
                t->model.noise_seed = ((uint64_t)t->step << 20) ^ (uint64_t)a;
                rc = model_forward_backward(&t->model, in + a * BT, tg + a * BT, B, T, (int)n_sup, e);
                if (rc == 0) loss_sum += t->model.loss * t->model.n_supervised;
            }
            if (rc == 0 && a == 0 && A > 1 && steps_here == 0 && !t->o->quiet) {
                // a step of many micro-batches can take minutes: estimate from the first one
                double dt = time_now_s() - t0, tps = (double)BT / dt;
                char per[32], eta[32];
                fmt_duration_(dt * A, per, sizeof per);
                fmt_duration_(dt * A * (double)(t->total_steps - t->step), eta, sizeof eta);
                printf("first micro-batch (1 of %d): %.0f tok/s, so about %s per step | ETA %s\n", A, tps, per, eta);
                fflush(stdout);
            }
        }
        if (rc != 0) break;
        double loss = n_sup ? loss_sum / (double)n_sup : 0;
        double gnorm = t->gpu ? gpu_clip_grads(t->gpu, &t->opt) : optim_clip_grads(&t->opt, t->model.grads);
        if (!isfinite(loss) || !isfinite(gnorm)) {
            char note[1400];
            last_ckpt_note_(t, note, sizeof note);
            rc = err_set(e, "step %ld: the %s is not finite (loss %g, gradient norm %g): training diverged; lower "
                         "optim.lr or check the data; %s", t->step + 1, isfinite(loss) ? "gradient norm" : "loss",
                         loss, gnorm, note);
            break;
        }
        float lr = schedule_lr(&t->sched, t->step);
        float beta1 = schedule_beta1(&t->sched, t->step, (float)c->optim.beta1);
        if (t->gpu) gpu_optim_step(t->gpu, &t->opt, lr, beta1);
        else optim_step(&t->opt, t->model.params, t->model.grads, lr, beta1);
        t->step++;
        steps_here++;
        t->tokens += (double)(A * BT);
        double now = time_now_s();
        t->elapsed = elapsed0 + (now - t_start);
        double tps = (double)(A * BT) / (now - t0);
        double avg_tps = (double)(A * BT) * steps_here / (now - t_start);
        char tb[32];
        if ((t->step % c->train.log_every == 0 || t->step == t->total_steps) &&
            (rc = log_line_(log, e, "{\"step\": %ld, \"loss\": %.17g, \"lr\": %.9g, \"beta1\": %.9g, \"grad_norm\": "
                            "%.9g, \"tokens_per_s\": %s, \"tokens\": %.0f, \"elapsed_s\": %.3f}", t->step, loss, lr,
                            beta1, gnorm, json_num(tb, sizeof tb, tps, 1, 1), t->tokens, t->elapsed)) != 0)
            break;
        if ((t->step % c->train.log_every == 0 || t->step == t->total_steps) && (rc = diag_write_(t, e)) != 0) break;
        if (!t->o->quiet && (now - last_print > (tty ? 0.2 : 10.0) || t->step == t->total_steps || t->step == first_step + 1)) {
            last_print = now;
            char el[32], eta[32];
            fmt_duration_(t->elapsed, el, sizeof el);
            fmt_duration_((double)(t->total_steps - t->step) * (double)(A * BT) / avg_tps, eta, sizeof eta);
            printf("%sstep %ld/%ld | loss %.4f | lr %.3e | grad %.3f | %.0f tok/s | %s elapsed | ETA %s%s",
                   tty ? "\r\033[K" : "", t->step, t->total_steps, loss, lr, gnorm, avg_tps, el, eta, tty ? "" : "\n");
            fflush(stdout);
        }
        int last = t->step == t->total_steps;
        double acc = NAN;
        // the final checkpoint comes before the final validation: an error reading the validation data (or a
        // non-finite validation loss) at the end loses no training
        if (last && (rc = save_checkpoint_(t, e)) != 0) break;
        if ((c->train.eval_every && t->step % c->train.eval_every == 0) || last)
            if ((rc = validate_(t, log, &acc, e)) != 0) break;
        if (c->train.stop_at_acc > 0 && !last && acc >= c->train.stop_at_acc) {
            t->stopped_early = 1;
            if ((rc = log_line_(log, e, "{\"step\": %ld, \"stopped_early\": true, \"val_acc\": %.6f}", t->step, acc)))
                break;
            if (!t->o->quiet)
                printf("%sstep %ld: test accuracy %.4f >= train.stop_at_acc %g: training stops here\n",
                       tty ? "\r\033[K" : "", t->step, acc, c->train.stop_at_acc);
        }
        int stop = stop_signal_ || (t->o->stop_after && steps_here >= t->o->stop_after);
        if (!last && ((c->train.ckpt_every && t->step % c->train.ckpt_every == 0) || stop || t->stopped_early)) {
            if ((rc = save_checkpoint_(t, e)) != 0) break;
        }
        if (stop && !last && !t->stopped_early) {
            printf("%sstopped at step %ld/%ld%s; checkpoint written. Continue with: seqtrain --resume %s\n",
                   tty ? "\n" : "", t->step, t->total_steps, stop_signal_ ? " (interrupted)" : "", t->run_dir);
            status = stop_signal_ ? 128 + stop_signal_ : 130;
            break;
        }
    }
    if (tty) printf("\n");
    if (fclose(lg.f) != 0 && rc == 0) rc = err_set(e, "cannot write %s: %s", lg.path, strerror(errno));
    free(in);
    free(tg);
    if (rc != 0) return -1;
    return status;
}

int trainer_main(const TrainerOpts *o, Err *e) {
    Trainer *t = xcalloc(1, sizeof(Trainer));
    t->o = o;
    int status = 1;
    if (setup_(t, o, e) == 0) {
        printf("seqtrain: %s | %zu parameters | %d layers, d_model %d, vocab %d | %ld steps of %d x %d x %d tokens | "
               "%d thread%s, %s kernels\n", t->run_dir, model_num_params(&t->model), t->model.L, t->model.C,
               t->model.V, t->total_steps, t->c.train.grad_accum, t->c.train.batch_size, t->c.train.seq_len,
               t->threads, t->threads == 1 ? "" : "s", kernel_set_name(kernel_set()));
        if (t->gpu) printf("device: %s\n", gpu_device_name(t->gpu));
        print_substitutions_(&t->c, &t->train, t->model.V, t->total_steps);
        signal(SIGINT, on_signal_);
        signal(SIGTERM, on_signal_);
        int rc = loop_(t, e);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        if (rc == 0) status = final_eval_(t, e) == 0 ? 0 : 1;
        else if (rc > 1) status = rc;
    }
    if (t->has_val) loader_close(&t->val);
    loader_close(&t->train);  // a zeroed Loader (setup failed early) closes as a no-op
    gpu_close(t->gpu);
    if (t->model.params) optim_free(&t->opt);
    model_free(&t->model);
    free(t->groups);
    run_config_free(&t->c);
    config_origins_free(t->origins);
    free(t);
    return status;
}
