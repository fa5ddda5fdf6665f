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
#include "core/dist.h"
#include "core/files.h"
#include "core/timer.h"
#include "data/tokenizer.h"
#include "ckpt/ckptdir.h"
#include "train/trainer_ckpt.h"
#include "eval/evaluate.h"
#include "ckpt/safetensors.h"

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
    if (c->train.patience > 0) {
        int task = run_config_has_task(c);
        if (!c->train.eval_every || (!task && !c->data.val.n))
            return err_set(e, "train.patience: %g epochs needs evaluations to watch: train.eval_every > 0 and "
                           "validation data (data.val, or a data.task) (set it to 0 to train to the end)",
                           c->train.patience);
        if (!task && !strcmp(c->train.patience_metric, "acc"))
            return err_set(e, "train.patience_metric: \"acc\" is a task's test accuracy, and this run trains on "
                           "shards; use \"loss\"");
    }
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

// t->run_dir = dir/name (dir alone when name is ""), refused up front when the files inside it (the longest:
// ckpt-<step>.tmp.<pid>/optim.safetensors.tmp.<pid>) would not fit FILE_PATH_MAX, instead of at the first
// checkpoint after minutes of training
static int run_dir_set_(Trainer *t, const char *dir, const char *name, Err *e) {
    const size_t inside = 96;  // room for the longest file name under the run directory
    size_t n = strlen(dir) + (name[0] ? 1 + strlen(name) : 0);
    if (n + inside >= FILE_PATH_MAX || n >= sizeof t->run_dir)
        return err_set(e, "the run directory %.60s... is %zu bytes long, more than %zu: the files inside it would not "
                       "fit a path of %d bytes; choose a shorter run.dir or run.name", dir, n,
                       (size_t)FILE_PATH_MAX - inside - 1, FILE_PATH_MAX);
    snprintf(t->run_dir, sizeof t->run_dir, "%s%s%s", dir, name[0] ? "/" : "", name);
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


// ----------------------------------------------------------------------------
// --check

static void print_split_(const char *what, const Loader *l, const RunConfig *c) {
    printf("%-11s %d shard%s  %12llu tokens  vocab %u  %llu windows of %d tokens = %llu batches of %d\n", what,
           l->n_shards, l->n_shards == 1 ? " " : "s", (unsigned long long)l->n_tokens, l->vocab_size,
           (unsigned long long)l->n_windows, c->train.seq_len + 1,
           (unsigned long long)(l->n_windows / (uint64_t)c->train.batch_size), c->train.batch_size);
}

// one layer's decoding state as Table 1 of the BLA paper writes it (MixerOps.state_terms): "name: formula = value"
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

// the epochs of data.train's windows (train.epochs' unit) that total_steps steps of grad_accum x batch_size make
static double run_epochs_(const RunConfig *c, const Loader *train, long total_steps) {
    double seqs = (double)c->train.batch_size * c->train.grad_accum;
    return train->n_windows ? (double)total_steps * seqs / (double)train->n_windows : 0.0;
}

// the run's length: steps x tokens per step, and its epochs; lead starts the line
static void print_budget_(const char *lead, const RunConfig *c, const Loader *train, long total_steps) {
    long long per_step = (long long)c->train.batch_size * c->train.grad_accum * c->train.seq_len;
    printf("%s%ld steps x %lld tokens = %.3g tokens, %.2f epochs of data.train\n", lead, total_steps, per_step,
           (double)total_steps * (double)per_step, run_epochs_(c, train, total_steps));
}

// what the run uses instead of what its config names: a model vocabulary above the data's (a paper config
// on the bundled WikiText-2), and (budget_note) a token budget of many epochs over small data
static void print_substitutions_(const RunConfig *c, const Loader *train, int model_vocab, long total_steps,
                                 int budget_note) {
    if (run_config_has_task(c)) return;
    if ((uint32_t)model_vocab > train->vocab_size)
        printf("note: model.vocab_size %d is larger than the data's %u (%s): the %u extra embedding and head rows "
               "never see a target but are counted in the parameters; model.vocab_size 0 sizes the model to the "
               "data\n", model_vocab, train->vocab_size, c->data.tokenizer[0] ? c->data.tokenizer : "its tokenizer",
               (uint32_t)model_vocab - train->vocab_size);
    if (budget_note && run_epochs_(c, train, total_steps) > 1.5) print_budget_("note: ", c, train, total_steps);
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
        rc = model_build_uninit(&m, &c->model, (int)l[0].vocab_size, NULL, e);  // shapes and options, no values
        if (rc == 0) {
            printf("model       %zu parameters, %d layers, d_model %d, vocab %d\n", model_num_params(&m), m.L, m.C, m.V);
            if (info) print_layers_(&m, c->train.seq_len);
            long total = total_steps_(c, &l[0]);
            // always: train.epochs leaves the length to the data (and the checkpoints' step numbers with it)
            if (total >= 1) print_budget_("training    ", c, &l[0], total);
            print_substitutions_(c, &l[0], m.V, total, 0);  // the budget is on the line above
            Schedule sc;
            if (total < 1) rc = err_set(e, "train: 0 steps (set train.steps, or train.epochs > 0)");
            else rc = schedule_setup_(&sc, c, total, e);
            Optim opt;
            OptimGroup *groups = NULL;
            if (rc == 0 && (rc = optim_setup_(&opt, &groups, &c->optim, &m.pt, e)) == 0) optim_free(&opt);
            free(groups);
            if (rc == 0) rc = step_check_device(&m, c->run.device, e);
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
    t->ranks = dist_size();
    t->quiet = o->quiet || !dist_main();  // rank 0 prints for all ranks
    if (o->resume_dir) {
        if (run_dir_set_(t, o->resume_dir, "", e) != 0) return -1;
    } else {
        char name[512];
        if (c->run.name[0]) snprintf(name, sizeof name, "%s", c->run.name);
        else default_run_name_(o->config_path, name, sizeof name);
        snprintf(c->run.name, sizeof c->run.name, "%s", name);
        // the run directory is a folder of run.dir: a name with a '/', "." or ".." would put it elsewhere
        if (!name[0] || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
            return err_set(e, "%s: run.name \"%.200s\" is not a folder name: the run directory is run.dir/run.name, "
                           "so the name must not hold '/' nor be empty, \".\" or \"..\"", config_path, name);
        if (run_dir_set_(t, c->run.dir, name, e) != 0) return -1;
        char latest[1200];
        int has = ckptdir_latest(t->run_dir, latest, sizeof latest, NULL);
        if (has == 1)
            return err_set(e, "%s already holds a run (%s); continue it with --resume %s, or start another with "
                           "--set run.name=NEW", t->run_dir, latest, t->run_dir);
    }
    if (run_config_check(c, e) != 0 || data_source_check_(c, e) != 0) return err_prefix(e, "%s: ", config_path);
    if (c->train.grad_accum % t->ranks != 0)
        return err_set(e, "%s: train.grad_accum is %d, not a multiple of the %d MPI ranks, which share every step's "
                       "micro-batches; set train.grad_accum to a multiple of %d (dividing train.batch_size by as much "
                       "keeps a step's windows)", config_path, c->train.grad_accum, t->ranks, t->ranks);
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
    // train.patience in steps: epochs of this run's steps (an epoch = one pass over the training windows)
    t->patience_steps = (long)ceil(c->train.patience * (double)t->train.n_windows /
                                   ((double)c->train.batch_size * c->train.grad_accum));
    if (optim_setup_(&t->opt, &t->groups, &c->optim, &t->model.pt, e) != 0 ||
        schedule_setup_(&t->sched, c, t->total_steps, e) != 0)
        return -1;
    return step_open(&t->dev, &t->model, &t->opt, c->run.device, c->run.precision, e);
}

// every rank must train the same run: its whole resolved configuration (a rank started with another --set would
// otherwise train along with its own learning rate or seed) and the options that decide where the run starts
// and stops, compared with rank 0's; the message names the keys that differ
static int same_config_(const Trainer *t, Err *e) {
    cJSON *mine = config_dump(&t->c, &RUN_CONFIG_SCHEMA), *diff = cJSON_CreateObject();
    cJSON_AddStringToObject(mine, "--resume", t->o->resume_dir ? t->o->resume_dir : "");
    cJSON_AddNumberToObject(mine, "--stop-after", (double)t->o->stop_after);
    char *text = cJSON_PrintUnformatted(mine), *text0 = dist_bcast_text(text);
    cJSON *zero = strcmp(text, text0) ? cJSON_Parse(text0) : NULL;
    if (zero) config_diff(zero, mine, "rank 0", "here", 1, diff);
    char list[700] = "";
    int n = 0;
    for (const cJSON *d = diff->child; d; d = d->next) {
        if (n++ >= 3) continue;
        char one[200];
        config_diff_describe(d, "here", "here", "rank 0", "on rank 0", one, sizeof one);
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "%s%s", l ? ", " : "", one);
    }
    char more[32] = "";
    if (n > 3) snprintf(more, sizeof more, " and %d more", n - 3);
    int rc = n ? err_set(e, "its configuration differs from rank 0's: %s%s; start every rank with the same --config, "
                         "--set and options", list, more) : 0;
    cJSON_Delete(zero);
    cJSON_Delete(diff);
    cJSON_Delete(mine);
    free(text);
    free(text0);
    return dist_agree(rc, e);
}

// every rank must see the same data and build the same model, or the ranks' steps would not line up
static int same_everywhere_(const Trainer *t, Err *e) {
    uint64_t x[] = {t->train.n_windows, t->has_val ? t->val.n_windows : 0, t->train.vocab_size,
                    (uint64_t)t->total_steps, model_num_params(&t->model)};
    static const char *const names[] = {"training windows", "validation windows", "vocabulary", "total steps",
                                        "parameters"};
    return dist_check_same(x, names, 5, "data or model", e);
}

// the run directory: a fresh run's config.json and empty log, or a resume (rank 0 writes; all ranks agree)
static int start_run_dir_(Trainer *t, const TrainerOpts *o, Err *e) {
    char log_path[1200];
    snprintf(log_path, sizeof log_path, "%s/log.jsonl", t->run_dir);
    int rc = dist_main() ? mkdir_p_(t->run_dir, e) : 0;
    if (rc == 0 && dist_main()) rc = rundir_lock(t->run_dir, e);
    if (dist_agree(rc, e) != 0) return -1;
    if (o->resume_dir) return trainer_resume(t, log_path, e);
    if (dist_main()) {
        struct stat st;
        if (stat(log_path, &st) == 0)
            fprintf(stderr, "seqtrain: note: %s had no checkpoint; starting it over\n", t->run_dir);
        rc = trainer_write_config(t, e);
        FILE *f = rc == 0 ? fopen_output(log_path, 0, e) : NULL;
        if (rc == 0) rc = f ? fclose_output(f, log_path, e) : -1;
        snprintf(log_path, sizeof log_path, "%s/diag.jsonl", t->run_dir);
        if (rc == 0) remove(log_path);  // a previous run's diagnostics; ENOENT is fine
    }
    return dist_agree(rc, e);
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
            if (!(f = fopen_output(path, 1, e))) {
                cJSON_Delete(o);
                return -1;
            }
        }
        char *txt = cJSON_PrintUnformatted(o);  // cJSON prints a non-finite number as null
        fprintf(f, "%s\n", txt);
        cJSON_free(txt);
        cJSON_Delete(o);
    }
    if (!f) return 0;
    char path[1200];
    snprintf(path, sizeof path, "%s/diag.jsonl", t->run_dir);
    return fclose_output(f, path, e);
}

// the run's log.jsonl, open for appending (rank 0; NULL on the others); every line is flushed and checked (a full
// disk is an error)
typedef struct RunLog_ {
    FILE *f;
    char path[1200];
} RunLog_;

static int log_line_(RunLog_ *log, Err *e, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int log_line_(RunLog_ *log, Err *e, const char *fmt, ...) {
    if (!log->f) return 0;  // a rank other than 0
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

// loss_out: the validation loss; acc_out: the task's test accuracy (NAN without a task, both NAN without
// validation data)
static int validate_(Trainer *t, RunLog_ *log, double *loss_out, double *acc_out, Err *e) {
    *loss_out = *acc_out = NAN;
    if (!t->has_val) return 0;
    // run.device cuda: the forward passes run on the GPU, with its parameters (eval/forward.h)
    Forward f;
    forward_init(&f, &t->model, t->dev.gpu);
    double loss, acc;
    uint64_t n;
    int task = run_config_has_task(&t->c);
    // every rank scores its share of the batches (evaluate_loss agrees and sums)
    int rc = evaluate_loss(&f, &t->val, t->c.train.batch_size, t->c.train.eval_batches, &loss, &n, task ? &acc : NULL, e);
    forward_close(&f);
    if (rc != 0) return -1;
    char lb[32], ab[32], pb[32];
    const char *cr = isatty(1) && t->ranks == 1 ? "\r\033[K" : "";  // over the progress line (not under mpirun)
    if (task) {
        // a task: accuracy over the supervised positions of its test split is the metric
        rc = log_line_(log, e, "{\"step\": %ld, \"val_loss\": %s, \"val_acc\": %s, \"val_tokens\": %llu}", t->step,
                       json_num(lb, sizeof lb, loss, 9, 0), json_num(ab, sizeof ab, acc, 6, 1), (unsigned long long)n);
        if (rc == 0 && !t->quiet) printf("%sstep %ld: test loss %.4f, accuracy %.4f (%llu positions)\n",
                                         cr, t->step, loss, acc, (unsigned long long)n);
        *acc_out = acc;
    } else {
        rc = log_line_(log, e, "{\"step\": %ld, \"val_loss\": %s, \"val_ppl\": %s, \"val_tokens\": %llu}", t->step,
                       json_num(lb, sizeof lb, loss, 9, 0), json_num(pb, sizeof pb, exp(loss), 6, 0),
                       (unsigned long long)n);
        if (rc == 0 && !t->quiet) printf("%sstep %ld: val loss %.4f, ppl %.2f (%llu tokens)\n",
                                         cr, t->step, loss, exp(loss), (unsigned long long)n);
    }
    if (dist_agree(rc, e) != 0) return -1;
    if (!isfinite(loss)) {
        char note[1400];
        trainer_last_ckpt_note(t, note, sizeof note);
        return err_set(e, "step %ld: the validation loss is not finite (%g): training diverged; %s", t->step, loss, note);
    }
    *loss_out = loss;
    return 0;
}

// train.patience: take this evaluation's metric (loss or acc, as train.patience_metric says) into the best so
// far; 1 when the best is train.patience epochs of steps behind (training stops)
static int patience_over_(Trainer *t, double loss, double acc) {
    int acc_metric = !strcmp(t->c.train.patience_metric, "acc");
    double v = acc_metric ? acc : loss;
    if (!t->has_best || (acc_metric ? v > t->best_metric : v < t->best_metric)) {
        t->has_best = 1;
        t->best_metric = v;
        t->best_step = t->step;
        return 0;
    }
    return t->step - t->best_step >= t->patience_steps;
}

// a task's final evaluation: loss and accuracy over its whole test split (on the GPU with run.device cuda): every
// rank scores its share of the test split, rank 0 writes RUN_DIR/eval/acc.json
static int final_eval_task_(Trainer *t, Err *e) {
    char dir[1200], path[1300];
    snprintf(dir, sizeof dir, "%s/eval", t->run_dir);
    snprintf(path, sizeof path, "%s/acc.json", dir);
    FILE *f = NULL;
    int rc = 0;
    if (dist_main()) {
        rc = mkdir_p_(dir, e);
        if (rc == 0 && !(f = fopen_output(path, 0, e))) rc = -1;
    }
    if (dist_agree(rc, e) != 0) {
        if (f) fclose(f);
        return -1;
    }
    double loss, acc;
    uint64_t n;
    Forward fw;
    forward_init(&fw, &t->model, t->dev.gpu);
    rc = evaluate_task(&fw, &t->c, f, &loss, &acc, &n, e);
    forward_close(&fw);
    if (f) {
        Err ce;
        if (fclose_output(f, path, &ce) != 0 && rc == 0) rc = err_set(e, "%s", ce.msg);
    }
    if (rc == 0 && dist_main())
        printf("\n%s test split: accuracy %.4f, loss %.4f over %llu supervised positions (%s)\n", t->c.data.task.kind,
               acc, loss, (unsigned long long)n, path);
    return dist_agree(rc, e);
}

// perplexity by context over eval.split: every rank scores its share of the windows, rank 0 writes the tables;
// with run.device cuda on the GPU
static int final_eval_(Trainer *t, Err *e) {
    if (run_config_has_task(&t->c)) return final_eval_task_(t, e);
    const EvalSection *ev = &t->c.eval;
    if (!ev->contexts[0]) return 0;
    long ctx[RUN_CONFIG_MAX_CONTEXTS];
    int n = run_config_eval_contexts(&t->c, ctx, e);
    if (n < 0) return -1;
    const CfgStrList *files = !strcmp(ev->split, "val") ? &t->c.data.val : &t->c.data.test;
    if (files->n == 0) return err_set(e, "eval.split: data.%s is empty", ev->split);
    Loader l;
    int rc = open_split_(&l, !strcmp(ev->split, "val") ? "data.val" : "data.test", files, &t->c, 0, e);
    if (dist_agree(rc, e) != 0) {
        if (rc == 0) loader_close(&l);
        return -1;
    }
    EvalResult *r = xcalloc((size_t)n, sizeof(EvalResult));
    Forward f;
    forward_init(&f, &t->model, t->dev.gpu);
    for (int i = 0; i < n && rc == 0; i++)
        rc = evaluate_context(&f, l.shards, l.n_shards, ctx[i], ev->stride, ev->max_windows, &r[i], e);
    forward_close(&f);
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/eval", t->run_dir);
    if (rc == 0 && dist_main()) {
        rc = mkdir_p_(dir, e);
        char what[800];
        snprintf(what, sizeof what, "%s perplexity by context (trained at %d)", ev->split, t->c.train.seq_len);
        printf("\n");
        if (rc == 0) rc = eval_write(dir, what, r, n, stdout, e);
        if (rc == 0) printf("\ntables in %s/ (ppl.md, ppl.csv, ppl.json, positions_<L>.csv)\n", dir);
        rc = dist_agree(rc, e);
    } else if (rc == 0) {
        rc = dist_agree(rc, e);
    }
    for (int i = 0; i < n; i++) eval_result_free(&r[i]);
    free(r);
    loader_close(&l);
    return rc;
}

// one step's progress line (rank 0)
static void print_progress_(const Trainer *t, int tty, double loss, float lr, double gnorm, double avg_tps) {
    char el[32], eta[32];
    size_t per_step = (size_t)t->c.train.grad_accum * t->c.train.batch_size * t->c.train.seq_len;
    fmt_duration_(t->elapsed, el, sizeof el);
    fmt_duration_((double)(t->total_steps - t->step) * (double)per_step / avg_tps, eta, sizeof eta);
    printf("%sstep %ld/%ld | loss %.4f | lr %.3e | grad %.3f | %.0f tok/s | %s elapsed | ETA %s%s",
           tty ? "\r\033[K" : "", t->step, t->total_steps, loss, lr, gnorm, avg_tps, el, eta, tty ? "" : "\n");
    fflush(stdout);
}

// With several ranks (MPI) every rank reads all of a step's micro-batches (so the data cursor, and resume,
// stay exactly as with one process) and computes micro-batches rank, rank + ranks, ...; the gradients are
// summed over the ranks in rank order and every rank applies the same update. Rank 0 writes the log and the
// checkpoints; wherever a rank can fail on its own, the ranks agree (core/dist.h) before going on.
static int loop_(Trainer *t, Err *e) {
    const RunConfig *c = &t->c;
    int B = c->train.batch_size, T = c->train.seq_len, A = c->train.grad_accum;
    int ranks = t->ranks, rank = dist_rank();
    size_t BT = (size_t)B * T;
    int *in = xmalloc((size_t)A * BT * sizeof(int)), *tg = xmalloc((size_t)A * BT * sizeof(int));
    char log_path[1200];
    snprintf(log_path, sizeof log_path, "%s/log.jsonl", t->run_dir);
    RunLog_ lg = {dist_main() ? fopen_output(log_path, 1, e) : NULL, ""}, *log = &lg;
    snprintf(lg.path, sizeof lg.path, "%s", log_path);
    int rc = dist_main() && !lg.f ? -1 : 0;
    if (dist_agree(rc, e) != 0) {
        if (lg.f) fclose(lg.f);
        free(in);
        free(tg);
        return -1;
    }
    // under mpirun rank 0's stdout is a pseudo-terminal even when the job's output goes to a file: plain lines
    int tty = isatty(1) && !t->quiet && ranks == 1;
    double t_start = time_now_s(), elapsed0 = t->elapsed, last_print = 0;
    long steps_here = 0, first_step = t->step;
    int status = 0;
    while (t->step < t->total_steps && !t->stopped_early) {
        double t0 = time_now_s();
        // all micro-batches first: the loss is a mean over every supervised token of the step, so each
        // backward needs the step's total count
        long n_sup = 0;
        for (int a = 0; a < A && rc == 0; a++) {
            rc = loader_next(&t->train, in + a * BT, tg + a * BT, B, e);
            for (size_t i = 0; rc == 0 && i < BT; i++) n_sup += tg[a * BT + i] != -100;
        }
        if (rc == 0) step_zero_grad(&t->dev);
        double loss_sum = 0;
        for (int a = rank; a < A && rc == 0; a += ranks) {
            // KLA+ samples: fresh per micro-batch, and the same again when a resumed run replays the step
            rc = step_micro_batch(&t->dev, in + a * BT, tg + a * BT, B, T, (int)n_sup,
                                  ((uint64_t)t->step << 20) ^ (uint64_t)a, &loss_sum, e);
            if (rc == 0 && a == 0 && A > ranks && steps_here == 0 && !t->quiet) {
                // a step of many micro-batches can take minutes: estimate from the first one
                double dt = time_now_s() - t0, tps = (double)BT * ranks / dt;
                char per[32], eta[32];
                fmt_duration_(dt * A / ranks, per, sizeof per);
                fmt_duration_(dt * A / ranks * (double)(t->total_steps - t->step), eta, sizeof eta);
                printf("first micro-batch (1 of %d): %.0f tok/s, so about %s per step | ETA %s\n", A, tps, per, eta);
                fflush(stdout);
            }
        }
        if ((rc = dist_agree(rc, e)) != 0) break;
        // the loss and a Ctrl-C or SIGTERM that reached any rank: every rank stops after the same step
        int sig = stop_signal_;
        double red[4] = {loss_sum, sig == SIGUSR1, sig == SIGINT, sig == SIGTERM};
        dist_sum_f64(red, 4);
        sig = red[3] > 0 ? SIGTERM : red[2] > 0 ? SIGINT : red[1] > 0 ? SIGUSR1 : 0;
        loss_sum = red[0];
        double t_red = time_now_s();
        step_reduce_grads(&t->dev);
        t_red = time_now_s() - t_red;  // the all-reduce's share of the step (logged with several ranks)
        double loss = n_sup ? loss_sum / (double)n_sup : 0;
        double gnorm = step_clip_grads(&t->dev);
        if (!isfinite(loss) || !isfinite(gnorm)) {
            char note[1400];
            trainer_last_ckpt_note(t, note, sizeof note);
            rc = err_set(e, "step %ld: the %s is not finite (loss %g, gradient norm %g): training diverged; lower "
                         "optim.lr or check the data; %s", t->step + 1, isfinite(loss) ? "gradient norm" : "loss",
                         loss, gnorm, note);
            break;
        }
        float lr = schedule_lr(&t->sched, t->step);
        float beta1 = schedule_beta1(&t->sched, t->step, (float)c->optim.beta1);
        step_update(&t->dev, lr, beta1);
        t->step++;
        steps_here++;
        t->tokens += (double)(A * BT);
        double now = time_now_s();
        t->elapsed = elapsed0 + (now - t_start);
        double tps = (double)(A * BT) / (now - t0);
        double avg_tps = (double)(A * BT) * steps_here / (now - t_start);
        char tb[32];
        int last = t->step == t->total_steps;
        if (t->step % c->train.log_every == 0 || last) {
            char red_s[96] = "", dev_s[96];
            if (ranks > 1) snprintf(red_s, sizeof red_s, ", \"allreduce_s\": %.6f", t_red);
            rc = log_line_(log, e, "{\"step\": %ld, \"loss\": %.17g, \"lr\": %.9g, \"beta1\": %.9g, \"grad_norm\": "
                           "%.9g, \"tokens_per_s\": %s, \"tokens\": %.0f, \"elapsed_s\": %.3f%s%s}", t->step, loss,
                           lr, beta1, gnorm, json_num(tb, sizeof tb, tps, 1, 1), t->tokens, t->elapsed, red_s,
                           step_log_fields(&t->dev, dev_s, sizeof dev_s));
            if (rc == 0 && dist_main()) rc = diag_write_(t, e);
            if ((rc = dist_agree(rc, e)) != 0) break;
        }
        if (!t->quiet && (now - last_print > (tty ? 0.2 : 10.0) || last || t->step == first_step + 1)) {
            last_print = now;
            print_progress_(t, tty, loss, lr, gnorm, avg_tps);
        }
        double acc = NAN, loss_v = NAN;
        int evaluated = 0;
        // the final checkpoint comes before the final validation: an error reading the validation data (or a
        // non-finite validation loss) at the end loses no training
        if (last && (rc = trainer_save_checkpoint(t, e)) != 0) break;
        if ((c->train.eval_every && t->step % c->train.eval_every == 0) || last) {
            if ((rc = validate_(t, log, &loss_v, &acc, e)) != 0) break;
            evaluated = t->has_val;
        }
        if (c->train.patience > 0 && !last && evaluated && !t->stopped_early && patience_over_(t, loss_v, acc)) {
            t->stopped_early = 1;
            char mb[32];
            rc = log_line_(log, e, "{\"step\": %ld, \"stopped_early\": true, \"patience\": %.9g, \"best_step\": %ld, "
                           "\"best_%s\": %s}", t->step, c->train.patience, t->best_step, c->train.patience_metric,
                           json_num(mb, sizeof mb, t->best_metric, 9, 0));
            if ((rc = dist_agree(rc, e)) != 0) break;
            if (!t->quiet)
                printf("%sstep %ld: no better validation %s than step %ld's %.6g for train.patience %g epochs (%ld "
                       "steps): training stops here\n", tty ? "\r\033[K" : "", t->step, c->train.patience_metric,
                       t->best_step, t->best_metric, c->train.patience, t->patience_steps);
        }
        if (c->train.stop_at_acc > 0 && !last && !t->stopped_early && acc >= c->train.stop_at_acc) {
            t->stopped_early = 1;
            rc = log_line_(log, e, "{\"step\": %ld, \"stopped_early\": true, \"val_acc\": %.6f}", t->step, acc);
            if ((rc = dist_agree(rc, e)) != 0) break;
            if (!t->quiet)
                printf("%sstep %ld: test accuracy %.4f >= train.stop_at_acc %g: training stops here\n",
                       tty ? "\r\033[K" : "", t->step, acc, c->train.stop_at_acc);
        }
        int stop = sig || (t->o->stop_after && steps_here >= t->o->stop_after);
        if (!last && ((c->train.ckpt_every && t->step % c->train.ckpt_every == 0) || stop || t->stopped_early)) {
            if ((rc = trainer_save_checkpoint(t, e)) != 0) break;
        }
        if (stop && !last && !t->stopped_early) {
            if (dist_main())
                printf("%sstopped at step %ld/%ld%s; checkpoint written. Continue with: seqtrain --resume %s\n",
                       tty ? "\n" : "", t->step, t->total_steps, sig ? " (interrupted)" : "", t->run_dir);
            status = sig ? 128 + sig : 130;
            break;
        }
    }
    if (tty) printf("\n");
    if (lg.f && fclose(lg.f) != 0 && rc == 0) rc = err_set(e, "cannot write %s: %s", lg.path, strerror(errno));
    free(in);
    free(tg);
    if (rc != 0) return -1;
    return status;
}

int trainer_main(const TrainerOpts *o, Err *e) {
    Trainer *t = xcalloc(1, sizeof(Trainer));
    t->o = o;
    int status = 1;
    // setup_ reads and checks on every rank; start_run_dir_ agrees first, so no rank writes for a failed one
    int rc = setup_(t, o, e);
    if (dist_agree(rc, e) == 0 && same_config_(t, e) == 0 && same_everywhere_(t, e) == 0 &&
        start_run_dir_(t, o, e) == 0) {
        char procs[64] = "";
        if (t->ranks > 1) snprintf(procs, sizeof procs, "%d ranks x ", t->ranks);
        if (dist_main()) {
            printf("seqtrain: %s | %zu parameters | %d layers, d_model %d, vocab %d | %ld steps of %d x %d x %d tokens | "
                   "%s%d thread%s, %s kernels\n", t->run_dir, model_num_params(&t->model), t->model.L, t->model.C,
                   t->model.V, t->total_steps, t->c.train.grad_accum, t->c.train.batch_size, t->c.train.seq_len, procs,
                   t->threads, t->threads == 1 ? "" : "s", kernel_set_name(kernel_set()));
            if (step_device_name(&t->dev)) printf("device: %s\n", step_device_name(&t->dev));
            print_substitutions_(&t->c, &t->train, t->model.V, t->total_steps, 1);
        }
        int cpus = dist_cpus_allowed();
        if (t->ranks > 1 && cpus > 0 && t->threads > cpus)
            fprintf(stderr, "seqtrain: note: rank %d runs %d threads on %d CPU%s (its affinity mask): start mpirun with "
                    "--bind-to none, or --map-by slot:PE=%d, so that each rank's threads get cores of their own\n",
                    dist_rank(), t->threads, cpus, cpus == 1 ? "" : "s", t->threads);
        signal(SIGINT, on_signal_);
        signal(SIGTERM, on_signal_);
        signal(SIGUSR1, on_signal_);  // what mpirun passes on to every rank (it ends the job on SIGINT/SIGTERM)
        rc = loop_(t, e);
        signal(SIGINT, SIG_DFL);
        signal(SIGUSR1, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        if (rc == 0) status = final_eval_(t, e) == 0 ? 0 : 1;
        else if (rc > 1) status = rc;
    }
    if (t->has_val) loader_close(&t->val);
    loader_close(&t->train);  // a zeroed Loader (setup failed early) closes as a no-op
    step_close(&t->dev);
    if (t->model.params) optim_free(&t->opt);
    model_free(&t->model);
    free(t->groups);
    run_config_free(&t->c);
    config_origins_free(t->origins);
    free(t);
    return status;
}
