#include "train/trainer_ckpt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/cpu.h"
#include "core/dist.h"
#include "core/files.h"
#include "ckpt/ckpt_state.h"
#include "ckpt/ckptdir.h"
#include "eval/evaluate.h"
#include "ckpt/safetensors.h"

int trainer_write_config(const Trainer *t, Err *e) {
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
void trainer_last_ckpt_note(const Trainer *t, char *buf, size_t n) {
    char ckpt[1200];
    if (ckptdir_latest(t->run_dir, ckpt, sizeof ckpt, NULL) == 1)
        snprintf(buf, n, "the last good checkpoint is %s", ckpt);
    else snprintf(buf, n, "no checkpoint was written yet");
}

// the first NaN or infinity of the training state: into what (the tensor, named, and its value and element)
// and 1, or 0 when every parameter and moment is finite; *b = 0 the parameters, 1 and 2 Adam's moments
static int state_nonfinite_(const Trainer *t, int *b, char *what, size_t n) {
    const float *bufs[] = {t->model.params, t->opt.m, t->opt.v};
    static const char *const kind[] = {"parameter", "optimizer first moment of", "optimizer second moment of"};
    for (*b = 0; *b < 3; (*b)++) {
        size_t at;
        int k = params_first_nonfinite(&t->model.pt, bufs[*b], &at);
        if (k < 0) continue;
        snprintf(what, n, "%s '%s' holds a non-finite value (%g at element %zu)", kind[*b], t->model.pt.t[k].name,
                 (double)bufs[*b][t->model.pt.t[k].offset + at], at);
        return 1;
    }
    return 0;
}

// a checkpoint never holds a NaN or an infinity: an update that overflowed the parameters or the
// optimizer's moments stops the run here, naming the tensor, and the last good checkpoint stays the latest
static int check_finite_state_(const Trainer *t, Err *e) {
    char what[400], note[1400];
    int b;
    if (!state_nonfinite_(t, &b, what, sizeof what)) return 0;
    trainer_last_ckpt_note(t, note, sizeof note);
    return err_set(e, "step %ld: %s after the update: training diverged; no checkpoint written; %s", t->step, what,
                   note);
}

static int write_checkpoint_(Trainer *t, Err *e);

int trainer_save_checkpoint(Trainer *t, Err *e) {
    // run.device cuda: the state lives on the GPU; the files are written from the host copies, so they are
    // the CPU's format byte for byte
    step_sync_to_host(&t->dev);
    // every rank holds the same state, so every rank checks it (one message when it is not finite)
    int rc = check_finite_state_(t, e);
    if (rc == 0 && dist_main()) rc = write_checkpoint_(t, e);
    return dist_agree(rc, e);
}

static int write_checkpoint_(Trainer *t, Err *e) {
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
        cJSON_AddNumberToObject(st, "ranks", t->ranks);
        cJSON_AddStringToObject(st, "kernels", kernel_set_name(kernel_set()));
        cJSON_AddBoolToObject(st, "stopped_early", t->stopped_early);
        if (t->has_best) {  // train.patience's best evaluation, so that a resumed run stops where this one would
            cJSON_AddNumberToObject(st, "best_step", (double)t->best_step);
            cJSON_AddNumberToObject(st, "best_metric", t->best_metric);
        }
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
    // a damaged (or hand-made) checkpoint with a NaN would train NaNs from the first step
    char what[400];
    int b;
    if (state_nonfinite_(t, &b, what, sizeof what))
        return err_set(e, "%s/%s: %s: the checkpoint cannot be resumed; move it aside to resume from an earlier one",
                       ckpt, b ? "optim.safetensors" : "model.safetensors", what);
    snprintf(path, sizeof path, "%s/state.json", ckpt);
    LoaderCursor cur = {st->epoch, st->window};
    if (loader_seek(&t->train, cur, e) != 0) return err_prefix(e, "%s: ", path);
    if (!dist_main()) {
        // the notes below are rank 0's to print
    } else if (st->ranks != t->ranks) {
        fprintf(stderr, "seqtrain: note: the run was trained by %d process%s (MPI ranks) and resumes with %d: the "
                "gradients are summed in another order from here on, so the loss curve differs from an "
                "uninterrupted run in rounding (resume with %d ranks for a bit-identical one)\n", st->ranks,
                st->ranks == 1 ? "" : "es", t->ranks, st->ranks);
    }
    if (dist_main() && st->threads != t->threads)
        fprintf(stderr, "seqtrain: note: the run used %d thread%s and resumes with %d; results stay correct but are "
                "not bit-identical to an uninterrupted run (set OMP_NUM_THREADS=%d for that)\n", st->threads,
                st->threads == 1 ? "" : "s", t->threads, st->threads);
    const char *now = kernel_set_name(kernel_set());
    if (dist_main() && st->kernels[0] && strcmp(st->kernels, now) != 0) {
        // a run moved from an AVX-512 machine to an AVX2-only one cannot get its kernels back there
        KernelSet was;
        int here = kernel_set_parse(st->kernels, &was, NULL) == 0 && kernel_set_supported(was);
        fprintf(stderr, "seqtrain: note: the run used the %s kernels and resumes with %s; results stay correct but "
                "are not bit-identical to an uninterrupted run (%s%s%s)\n", st->kernels, now,
                here ? "set SEQ_KERNELS=" : "this CPU lacks the ", st->kernels, here ? " for that" : " kernels");
    }
    t->stopped_early = st->stopped_early;
    t->has_best = st->has_best;
    t->best_step = st->best_step;
    t->best_metric = st->best_metric;
    t->step = st->step;
    t->opt.t = st->optim_t;
    t->tokens = st->tokens;
    t->elapsed = st->elapsed_s;
    return 0;
}

// ----------------------------------------------------------------------------
// the config at resume: config.json (plus --set) against the config stored in the checkpoint

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

// "optim.lr (0.002 in the checkpoint, 0.5 now)" for messages
static void describe_change_(const cJSON *d, char *buf, size_t n) {
    config_diff_describe(d, "checkpoint", "in the checkpoint", "now", "now", buf, n);
}

// Compare; refuse changes no --set names; print and return (in *changes, NULL when none) those it names.
static int config_changes_(const Trainer *t, const TrainerOpts *o, const char *state_path, const CkptState *st,
                           cJSON **changes, Err *e) {
    *changes = NULL;
    if (!st->config) {
        if (dist_main())
            fprintf(stderr, "seqtrain: note: %s stores no config (an older checkpoint): config.json is not compared "
                "with it\n", state_path);
        return 0;
    }
    cJSON *now = config_dump(&t->c, &RUN_CONFIG_SCHEMA), *diff = cJSON_CreateObject();
    config_diff(st->config, now, "checkpoint", "now", 0, diff);
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
        if (dist_main()) printf("seqtrain: resuming with a changed config (--set): %s\n", one);
    }
    *changes = diff;
    return 0;
}

// keep the log lines up to the checkpoint's step, so a resumed run's log reads as one run
static int truncate_log_(const char *log_path, long step, Err *e) {
    int not_regular;
    FILE *f = fopen_regular(log_path, &not_regular, NULL);
    if (!f) return not_regular ? output_check(log_path, e) : 0;  // a link or a device is refused, a missing log is fine
    AtomicFile af;
    if (atomic_file_open(&af, log_path, e) != 0) {
        fclose(f);
        return -1;
    }
    char line[4096];
    int bad = 0;
    while (!bad && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "\"step\":");
        long s = p ? strtol(p + 7, NULL, 10) : 0;
        if (s <= step && fputs(line, af.f) == EOF) bad = 1;
    }
    fclose(f);
    if (bad) {
        int err = errno;
        atomic_file_abort(&af);
        return err_set(e, "cannot rewrite %s: %s", log_path, err ? strerror(err) : "write error");
    }
    return atomic_file_commit(&af, e);
}

// a resume with --set changes: config.json now holds the new config, and log.jsonl a line
// {"step": S, "resumed_with_changes": {"optim.lr": {"checkpoint": 0.002, "now": 0.5}, ...}}
static int record_changes_(const Trainer *t, const char *log_path, const cJSON *changes, Err *e) {
    if (trainer_write_config(t, e) != 0) return -1;
    FILE *f = fopen_output(log_path, 1, e);
    if (!f) return -1;
    char *s = cJSON_PrintUnformatted(changes);
    fprintf(f, "{\"step\": %ld, \"resumed_with_changes\": %s}\n", t->step, s);
    free(s);
    return fclose_output(f, log_path, e);
}

// ----------------------------------------------------------------------------
// --resume: everything is read and checked before the log (or anything else in the run directory) changes

int trainer_resume(Trainer *t, const char *log_path, Err *e) {
    char ckpt[1200], state_path[1300];
    int has = ckptdir_latest(t->run_dir, ckpt, sizeof ckpt, e), rc = has < 0 ? -1 : 0;
    if (has == 0) rc = err_set(e, "%s: no complete checkpoint to resume from", t->run_dir);
    CkptState st = {0};
    cJSON *changes = NULL;
    if (rc == 0) {
        snprintf(state_path, sizeof state_path, "%s/state.json", ckpt);
        rc = ckpt_state_read(&st, state_path, e);
    }
    if (rc == 0) rc = config_changes_(t, t->o, state_path, &st, &changes, e);
    if (rc == 0) rc = check_state_(t, ckpt, state_path, &st, changes != NULL, e);
    if (rc == 0) rc = load_checkpoint_(t, ckpt, &st, e);
    if (rc == 0) step_sync_from_host(&t->dev);
    ckpt_state_free(&st);
    // every rank has read and checked the checkpoint; only then does rank 0 touch the run directory
    if (dist_agree(rc, e) != 0) {
        cJSON_Delete(changes);
        return -1;
    }
    if (dist_main()) {
        rc = truncate_log_(log_path, t->step, e);
        char diag_path[1200];
        snprintf(diag_path, sizeof diag_path, "%s/diag.jsonl", t->run_dir);
        if (rc == 0) rc = truncate_log_(diag_path, t->step, e);
        if (rc == 0 && changes) rc = record_changes_(t, log_path, changes, e);
    }
    cJSON_Delete(changes);
    if (dist_agree(rc, e) != 0) return -1;
    if (!dist_main()) return 0;
    if (t->stopped_early)
        printf("%s stopped early at step %ld of %ld (train.stop_at_acc or train.patience); nothing left to train\n",
               t->run_dir, t->step, t->total_steps);
    else printf("resuming %s from %s (step %ld of %ld)\n", t->run_dir, ckpt, t->step, t->total_steps);
    return 0;
}
