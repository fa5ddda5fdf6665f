#include "run/run_config.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KEY_(S, name, type, field, def, lo, hi, choices, doc) \
    {name, type, offsetof(S, field), def, lo, hi, {choices}, NULL, doc}

static const CfgKey RUN_KEYS_[] = {
    KEY_(RunSection, "name", CFG_STR, name, "\"\"", 0, 0, NULL,
         "Run name; the run directory is run.dir/run.name. Empty: the config file's name without .json. "
         "A folder name: no '/', not '.' or '..'."),
    KEY_(RunSection, "dir", CFG_STR, dir, "\"runs\"", 0, 0, NULL, "Folder that holds run directories."),
    KEY_(RunSection, "seed", CFG_INT, seed, "1337", 0, 2147483647, NULL,
         "Seed of everything random in the run (data order, initialisation)."),
    KEY_(RunSection, "threads", CFG_INT, threads, "0", 0, 4096, NULL,
         "OpenMP threads; 0 = OMP_NUM_THREADS, or all cores when that is unset. Runs are bit-identical for a "
         "given seed and thread count on the same kind of CPU (docs/training.md, Determinism)."),
    KEY_(RunSection, "device", CFG_ENUM, device, "\"cpu\"", 0, 0, "cpu|cuda",
         "Where training runs, with its validation and final evaluation (and seqeval's, unless its --device says "
         "otherwise): cpu, or cuda (one NVIDIA GPU; needs a `make CUDA=1` build, and a model the GPU backend has "
         "kernels for: docs/gpu.md). Checkpoints are the same either way, so a run resumes on the other device "
         "with --resume RUN --set run.device=..."),
    KEY_(RunSection, "precision", CFG_ENUM, precision, "\"tf32\"", 0, 0, "fp32|tf32|bf16",
         "GPU matmul precision (run.device cuda): fp32 (fp32 accuracy), tf32 (the tensor cores' 10-bit-mantissa "
         "inputs, fp32 accumulation), or bf16 (autocast: the matmuls take bfloat16 operands of fp32 master "
         "weights and activations, fp32 accumulation and results; attention as tf32). Parameters, gradients and "
         "optimizer state are fp32 in every mode. The CPU always computes in fp32 whatever this says (docs/gpu.md)."),
};

#define TK_(name, type, field, def, lo, hi, doc) KEY_(TaskSection, name, type, field, def, lo, hi, NULL, doc)
static const CfgKey TASK_KEYS_[] = {
    KEY_(TaskSection, "kind", CFG_ENUM, kind, "\"none\"", 0, 0,
         "none|icr|noisy_icr|fuzzy_icr|selective_copy|memorization|compression|mqar|a5|s5|parity|copy|regbench",
         "The task (docs/tasks.md); none = train on data.train shards."),
    TK_("vocab", CFG_INT, vocab, "0", 0, 1 << 24, "Vocabulary size; 0 = the task's default (derived for a5/s5/parity/copy)."),
    TK_("seed", CFG_INT, seed, "12345", 0, 2147483647, "Seed of the generated examples (MAD-Lab uses 12345)."),
    TK_("train_examples", CFG_INT, train_examples, "12800", 1, 2147483647, "Training examples per epoch (MAD: 12,800; Zoology MQAR: 100,000)."),
    TK_("test_examples", CFG_INT, test_examples, "1280", 1, 2147483647, "Test examples, scored every train.eval_every steps and at the end (MAD: 1,280)."),
    TK_("noise_vocab", CFG_INT, noise_vocab, "0", 0, 1 << 20, "Noisy ICR: noise tokens (0 = 16)."),
    TK_("frac_noise", CFG_FLOAT, frac_noise, "0", 0, 1, "Noisy ICR: fraction of noise pairs (0 = 0.2)."),
    TK_("multi_query", CFG_INT, multi_query, "0", -1, 1, "ICR variants: 0 or 1 = multi-query (the benchmark), -1 = a single final query."),
    TK_("k_motif", CFG_INT, k_motif, "0", 0, 64, "Fuzzy ICR: key motif length (0 = 3)."),
    TK_("v_motif", CFG_INT, v_motif, "0", 0, 64, "Fuzzy ICR: value motif length (0 = 3)."),
    TK_("n_copy", CFG_INT, n_copy, "0", 0, 1 << 20, "Selective copying: tokens to copy (0 = 16)."),
    TK_("n_train", CFG_INT, n_train, "0", 0, 2147483647, "Memorization: distinct training examples (0 = 256)."),
    TK_("num_kv_pairs", CFG_INT, num_kv_pairs, "0", 0, 1 << 20, "MQAR: key-value pairs N (0 = 8)."),
    TK_("power_a", CFG_FLOAT, power_a, "0", 0, 1, "MQAR: power-law exponent of the query gaps (0 = 0.01)."),
    TK_("random_non_queries", CFG_INT, random_non_queries, "0", -1, 1, "MQAR: 0 or 1 = fill non-query positions with random tokens, -1 = zeros."),
    TK_("train_len_min", CFG_INT, train_len_min, "0", 0, 1 << 24, "State tracking / copying: shortest training example (0 = the task's default)."),
    TK_("train_len_max", CFG_INT, train_len_max, "0", 0, 1 << 24, "State tracking / copying: longest training example."),
    TK_("test_len_min", CFG_INT, test_len_min, "0", 0, 1 << 24, "State tracking / copying: shortest test example (length generalisation)."),
    TK_("test_len_max", CFG_INT, test_len_max, "0", 0, 1 << 24, "State tracking / copying: longest test example."),
    TK_("dfa_states_min", CFG_INT, dfa_states_min, "0", 0, 1 << 16, "RegBench: fewest DFA states."),
    TK_("dfa_states_max", CFG_INT, dfa_states_max, "0", 0, 1 << 16, "RegBench: most DFA states."),
    TK_("dfa_alphabet_min", CFG_INT, dfa_alphabet_min, "0", 0, 1 << 16, "RegBench: smallest DFA alphabet."),
    TK_("dfa_alphabet_max", CFG_INT, dfa_alphabet_max, "0", 0, 1 << 16, "RegBench: largest DFA alphabet."),
    TK_("n_strings", CFG_INT, n_strings, "0", 0, 1 << 20, "RegBench: most strings per example (0 = as many as fit)."),
};
#undef TK_
static const CfgSection TASK_SECTION_ = {"task", "A synthetic task instead of shards.", TASK_KEYS_,
                                         (int)(sizeof TASK_KEYS_ / sizeof TASK_KEYS_[0])};

static const CfgKey DATA_KEYS_[] = {
    KEY_(DataSection, "train", CFG_STRLIST, train, "[]", 0, 0, NULL,
         "Training shards: a path or glob, or a list of them (seqtok, llm.c .bin or raw files); required unless "
         "data.task is set."),
    {"task", CFG_SECTION, offsetof(DataSection, task), "{}", 0, 0, {NULL}, &TASK_SECTION_,
     "A synthetic task generated in-process (docs/tasks.md) instead of shards: training examples from its "
     "train split, validation and the final evaluation (loss and accuracy) on its test split."},
    KEY_(DataSection, "val", CFG_STRLIST, val, "[]", 0, 0, NULL,
         "Validation shards (same forms as data.train), scored every train.eval_every steps."),
    KEY_(DataSection, "test", CFG_STRLIST, test, "[]", 0, 0, NULL,
         "Test shards (same forms as data.train), used by the final perplexity-by-context table."),
    KEY_(DataSection, "format", CFG_ENUM, format, "\"auto\"", 0, 0, "auto|seqtok|llmc|raw_u16|raw_u32",
         "Shard format; auto detects seqtok and llm.c shards by their magic, raw files must be named."),
    KEY_(DataSection, "vocab_size", CFG_INT, vocab_size, "0", 0, 1 << 30, NULL,
         "Vocabulary size; 0 = from the shard headers. Required for raw shards; token ids must be below it."),
    KEY_(DataSection, "tokenizer", CFG_STR, tokenizer, "\"\"", 0, 0, NULL,
         "SentencePiece .model of the shards (optional): checked against the shards' tokenizer hash and "
         "used to print text."),
    KEY_(DataSection, "cache_mb", CFG_INT, cache_mb, "256", 1, 1 << 20, NULL,
         "Memory for decoded shard frames, shared by all shards of a split (each keeps at least two frames)."),
    KEY_(DataSection, "shuffle", CFG_BOOL, shuffle, "true", 0, 0, NULL,
         "Visit training windows in a seeded random order, new each epoch; false = file order."),
};

static const CfgKey TRAIN_KEYS_[] = {
    KEY_(TrainSection, "batch_size", CFG_INT, batch_size, "8", 1, 1 << 20, NULL, "Sequences per micro-batch (B)."),
    KEY_(TrainSection, "seq_len", CFG_INT, seq_len, "512", 1, 1 << 24, NULL,
         "Training context length T; each sequence is a window of T+1 tokens (inputs and shifted targets)."),
    KEY_(TrainSection, "grad_accum", CFG_INT, grad_accum, "1", 1, 1 << 20, NULL,
         "Micro-batches per optimizer step; the loss is averaged over all their supervised tokens. The tokens "
         "of a step, grad_accum × batch_size × seq_len, may be at most 2147483647 (2^31 − 1)."),
    KEY_(TrainSection, "steps", CFG_INT, steps, "0", 0, 2147483647, NULL,
         "Optimizer steps; 0 = derived from train.epochs."),
    KEY_(TrainSection, "epochs", CFG_FLOAT, epochs, "1", 0, 1e6, NULL,
         "Passes over the training windows when train.steps is 0 (fractions allowed)."),
    KEY_(TrainSection, "eval_every", CFG_INT, eval_every, "0", 0, 2147483647, NULL,
         "Validation loss every this many steps and at the end; 0 = only at the end."),
    KEY_(TrainSection, "eval_batches", CFG_INT, eval_batches, "0", 0, 2147483647, NULL,
         "Validation batches per evaluation (the first ones of data.val, always the same); 0 = all."),
    KEY_(TrainSection, "log_every", CFG_INT, log_every, "1", 1, 2147483647, NULL,
         "Write a log.jsonl line every this many steps."),
    KEY_(TrainSection, "ckpt_every", CFG_INT, ckpt_every, "0", 0, 2147483647, NULL,
         "Write a checkpoint every this many steps (and always at the end and on Ctrl-C); 0 = only then."),
    KEY_(TrainSection, "keep_last", CFG_INT, keep_last, "3", 1, 1 << 20, NULL,
         "Checkpoints kept in the run directory (older ones are deleted)."),
    KEY_(TrainSection, "stop_at_acc", CFG_FLOAT, stop_at_acc, "0", 0, 1, NULL,
         "Tasks only: stop training (checkpoint, final evaluation, status 0) at the first evaluation whose test "
         "accuracy reaches this (Zoology's early stop: 0.99; needs train.eval_every > 0). 0 = off."),
    KEY_(TrainSection, "patience", CFG_FLOAT, patience, "0", 0, 1e6, NULL,
         "Early stopping by patience (the KLA paper: 70 epochs, 50 for A5): stop training (checkpoint, final "
         "evaluation of the last model, status 0) at the first evaluation that comes this many epochs of steps "
         "(patience × training windows / (batch_size × grad_accum), rounded up) after the best one so far of "
         "train.patience_metric. Checked at every evaluation, so it needs train.eval_every > 0 and validation "
         "data (data.val, or a data.task's test split). 0 = off."),
    KEY_(TrainSection, "patience_metric", CFG_ENUM, patience_metric, "\"loss\"", 0, 0, "loss|acc",
         "What train.patience watches: loss = the validation loss (lower is better), acc = a task's test "
         "accuracy (higher is better). Only a strictly better value is an improvement."),
};

static const CfgKey GROUP_KEYS_[] = {
    KEY_(OptimGroupSection, "match", CFG_STRLIST, match, NULL, 0, 0, NULL,
         "Glob(s) on parameter names, e.g. \"blocks.*.mixer.fgate_b\"; the first matching group owns a tensor."),
    KEY_(OptimGroupSection, "lr_mult", CFG_FLOAT, lr_mult, "1", 0, 1e6, NULL, "Multiplies the scheduled lr."),
    KEY_(OptimGroupSection, "lr", CFG_FLOAT, lr, "null", 0, 10, NULL,
         "The group's own peak lr, scaled by the schedule like optim.lr; null = lr_mult × optim.lr."),
    KEY_(OptimGroupSection, "beta1", CFG_FLOAT, beta1, "null", 0, 0.999999, NULL, "null = optim.beta1 (or its cycle)."),
    KEY_(OptimGroupSection, "beta2", CFG_FLOAT, beta2, "null", 0, 0.999999999, NULL, "null = optim.beta2."),
    KEY_(OptimGroupSection, "eps", CFG_FLOAT, eps, "null", 0, 1, NULL, "null = optim.eps."),
    KEY_(OptimGroupSection, "weight_decay", CFG_FLOAT, weight_decay, "null", 0, 10, NULL,
         "Applies to every tensor of the group; null = optim.weight_decay on matrices only."),
    KEY_(OptimGroupSection, "clip", CFG_FLOAT, clip, "0", 0, 1e30, NULL, "Local gradient-norm clip of the group; 0 = off."),
};
static const CfgSection GROUP_SECTION_ = {"groups", "A parameter group.", GROUP_KEYS_, 8};

static const CfgKey OPTIM_KEYS_[] = {
    KEY_(OptimSection, "lr", CFG_FLOAT, lr, "3e-4", 0, 10, NULL, "Peak learning rate (the schedule scales it)."),
    KEY_(OptimSection, "beta1", CFG_FLOAT, beta1, "0.9", 0, 0.999999, NULL, "AdamW beta1."),
    KEY_(OptimSection, "beta2", CFG_FLOAT, beta2, "0.999", 0, 0.999999999, NULL, "AdamW beta2."),
    KEY_(OptimSection, "eps", CFG_FLOAT, eps, "1e-8", 0, 1, NULL, "AdamW epsilon."),
    KEY_(OptimSection, "weight_decay", CFG_FLOAT, weight_decay, "0", 0, 10, NULL,
         "Decoupled weight decay for matrices (not vectors, norms or embeddings) unless a group says otherwise."),
    KEY_(OptimSection, "grad_clip", CFG_FLOAT, grad_clip, "1", 0, 1e30, NULL, "Global gradient-norm clip; 0 = off."),
    {"groups", CFG_OBJLIST, offsetof(OptimSection, groups), "[]", 0, 64, {.elem_size = sizeof(OptimGroupSection)},
     &GROUP_SECTION_, "Parameter groups with their own settings (first match wins)."},
};

static const CfgKey SCHED_KEYS_[] = {
    KEY_(ScheduleSection, "kind", CFG_ENUM, kind, "\"cosine\"", 0, 0, "constant|cosine|onecycle|wsd",
         "Learning-rate schedule (docs/training.md has the formulas)."),
    KEY_(ScheduleSection, "warmup_steps", CFG_INT, warmup_steps, "0", 0, 2147483647, NULL,
         "constant/cosine/wsd: linear warmup steps."),
    KEY_(ScheduleSection, "warmup_frac", CFG_FLOAT, warmup_frac, "null", 0, 1, NULL,
         "Warmup as a fraction of the steps (overrides warmup_steps); null = use warmup_steps."),
    KEY_(ScheduleSection, "min_lr_frac", CFG_FLOAT, min_lr_frac, "0", 0, 1, NULL, "cosine: final lr = lr × min_lr_frac."),
    KEY_(ScheduleSection, "pct_start", CFG_FLOAT, pct_start, "0.3", 0, 1, NULL, "onecycle: fraction of steps rising."),
    KEY_(ScheduleSection, "div_factor", CFG_FLOAT, div_factor, "25", 1e-6, 1e12, NULL, "onecycle: start lr = lr / div_factor."),
    KEY_(ScheduleSection, "final_div_factor", CFG_FLOAT, final_div_factor, "1e4", 1e-6, 1e12, NULL,
         "onecycle: final lr = start lr / final_div_factor."),
    KEY_(ScheduleSection, "three_phase", CFG_BOOL, three_phase, "false", 0, 0, NULL, "onecycle: PyTorch's three_phase."),
    KEY_(ScheduleSection, "anneal", CFG_ENUM, anneal, "\"cos\"", 0, 0, "cos|linear", "onecycle: annealing shape."),
    KEY_(ScheduleSection, "cycle_momentum", CFG_BOOL, cycle_momentum, "false", 0, 0, NULL,
         "onecycle: cycle beta1 between max_momentum and base_momentum, inversely to the lr."),
    KEY_(ScheduleSection, "base_momentum", CFG_FLOAT, base_momentum, "0.85", 0, 1, NULL, "onecycle: lowest beta1."),
    KEY_(ScheduleSection, "max_momentum", CFG_FLOAT, max_momentum, "0.95", 0, 1, NULL, "onecycle: highest beta1."),
    KEY_(ScheduleSection, "decay_frac", CFG_FLOAT, decay_frac, "0.2", 0, 1, NULL, "wsd: fraction of steps in the final decay."),
    KEY_(ScheduleSection, "final_lr_frac", CFG_FLOAT, final_lr_frac, "0", 0, 1, NULL, "wsd: lr at the end = lr × final_lr_frac."),
    KEY_(ScheduleSection, "decay_shape", CFG_ENUM, decay_shape, "\"linear\"", 0, 0, "linear|1-sqrt", "wsd: shape of the decay."),
};

static const CfgKey EVAL_KEYS_[] = {
    KEY_(EvalSection, "contexts", CFG_STR, contexts, "\"\"", 0, 0, NULL,
         "Context lengths of the perplexity table written at the end of training, e.g. \"512,1024,2048,4096\": "
         "at most 32, each 1 .. 16777216 (checked before training); empty = none."),
    KEY_(EvalSection, "split", CFG_ENUM, split, "\"test\"", 0, 0, "test|val", "Which split that table scores."),
    KEY_(EvalSection, "stride", CFG_INT, stride, "0", 0, 1 << 24, NULL,
         "0 = non-overlapping windows; S = sliding windows scoring S new tokens each."),
    KEY_(EvalSection, "max_windows", CFG_INT, max_windows, "0", 0, 2147483647, NULL,
         "Score at most this many windows per context (the first ones); 0 = all."),
};

#define SECTION_(name, doc, keys) {name, doc, keys, (int)(sizeof keys / sizeof keys[0])}
static const CfgSection RUN_SECTION_ = SECTION_("run", "Where the run lives, how it is seeded and threaded, and the device it trains on.", RUN_KEYS_);
static const CfgSection DATA_SECTION_ = SECTION_("data", "Token shards and how they are read.", DATA_KEYS_);
static const CfgSection TRAIN_SECTION_ = SECTION_("train", "The training loop.", TRAIN_KEYS_);
static const CfgSection OPTIM_SECTION_ = SECTION_("optim", "AdamW and its parameter groups.", OPTIM_KEYS_);
static const CfgSection SCHED_SECTION_ = SECTION_("schedule", "The learning-rate schedule.", SCHED_KEYS_);
static const CfgSection EVAL_SECTION_ = SECTION_("eval", "The evaluation at the end of training.", EVAL_KEYS_);

#define SEC_(name, field, sec, def, doc) {name, CFG_SECTION, offsetof(RunConfig, field), def, 0, 0, {NULL}, &sec, doc}
static const CfgKey ROOT_KEYS_[] = {
    SEC_("run", run, RUN_SECTION_, "{}", "Where the run lives, how it is seeded and threaded, and the device it trains on."),
    SEC_("data", data, DATA_SECTION_, NULL, "Token shards and how they are read."),
    SEC_("model", model, MODEL_SECTION, "{}", "The network."),
    SEC_("train", train, TRAIN_SECTION_, "{}", "The training loop."),
    SEC_("optim", optim, OPTIM_SECTION_, "{}", "AdamW and its parameter groups."),
    SEC_("schedule", schedule, SCHED_SECTION_, "{}", "The learning-rate schedule."),
    SEC_("eval", eval, EVAL_SECTION_, "{}", "The evaluation at the end of training."),
};

const CfgSection RUN_CONFIG_SCHEMA = SECTION_("", "A run's configuration file.", ROOT_KEYS_);

int run_config_load(RunConfig *c, const char *path, const char *const *overrides, int n_overrides,
                    CfgOrigins **origins_out, Err *e) {
    CfgOrigins *origins = NULL;
    cJSON *root = config_load(path, overrides, n_overrides, &origins, e);
    if (!root) return -1;
    memset(c, 0, sizeof *c);
    int rc = config_bind(c, &RUN_CONFIG_SCHEMA, root, origins, e);
    if (rc == 0 && model_resolve_mixer(&c->model, origins, e) != 0) {
        config_free(c, &RUN_CONFIG_SCHEMA);  // a failed bind frees its own allocations; a failed resolve doesn't
        rc = -1;
    }
    cJSON_Delete(root);
    if (origins_out && rc == 0) *origins_out = origins;
    else config_origins_free(origins);
    return rc;
}

void run_config_free(RunConfig *c) { config_free(c, &RUN_CONFIG_SCHEMA); }

int run_config_task(const RunConfig *c, TaskSpec *t, Err *e) {
    const TaskSection *s = &c->data.task;
    memset(t, 0, sizeof *t);
    int kind = task_kind_parse(s->kind);
    if (kind < 0) return err_set(e, "data.task.kind: \"%s\" is not a task", s->kind);
    t->kind = (TaskKind)kind;
    t->vocab = s->vocab;
    t->seq_len = c->train.seq_len;
    t->seed = (uint64_t)s->seed;
    t->noise_vocab = s->noise_vocab;
    t->frac_noise = s->frac_noise;
    t->multi_query = s->multi_query;
    t->k_motif = s->k_motif;
    t->v_motif = s->v_motif;
    t->n_copy = s->n_copy;
    t->n_train = s->n_train;
    t->num_kv_pairs = s->num_kv_pairs;
    t->power_a = s->power_a;
    t->random_non_queries = s->random_non_queries;
    t->train_len_min = s->train_len_min;
    t->train_len_max = s->train_len_max;
    t->test_len_min = s->test_len_min;
    t->test_len_max = s->test_len_max;
    t->dfa_states_min = s->dfa_states_min;
    t->dfa_states_max = s->dfa_states_max;
    t->dfa_alphabet_min = s->dfa_alphabet_min;
    t->dfa_alphabet_max = s->dfa_alphabet_max;
    t->n_strings = s->n_strings;
    if (task_resolve(t, e) != 0) return err_prefix(e, "data.");
    return 0;
}

int run_config_eval_contexts(const RunConfig *c, long *ctx, Err *e) {
    const char *s = c->eval.contexts;
    if (!s[0]) return 0;
    int n = 0;
    for (const char *p = s;; n++) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[64];
        int ok = len > 0 && len < sizeof item;
        long v = 0;
        if (ok) {
            memcpy(item, p, len);
            item[len] = '\0';
            char *end;
            errno = 0;
            v = strtol(item, &end, 10);
            ok = end != item && *end == '\0' && errno == 0 && item[0] >= '0' && item[0] <= '9' && v >= 1 &&
                 v <= (1L << 24);
        }
        if (!ok)
            return err_set(e, "eval.contexts: entry %d (\"%.*s\") of \"%s\" is not a context length (a positive "
                           "integer up to 16777216); write a comma-separated list such as \"512,1024\"", n + 1,
                           (int)(len < 64 ? len : 64), p, s);
        if (n == RUN_CONFIG_MAX_CONTEXTS)
            return err_set(e, "eval.contexts: \"%s\" has more than %d lengths", s, RUN_CONFIG_MAX_CONTEXTS);
        if (ctx) ctx[n] = v;
        if (!comma) return n + 1;
        p = comma + 1;
    }
}

int run_config_check(const RunConfig *c, Err *e) {
    const TrainSection *tr = &c->train;
    int64_t per_step = (int64_t)tr->grad_accum * tr->batch_size * tr->seq_len;
    if (per_step > RUN_CONFIG_MAX_STEP_TOKENS)
        return err_set(e, "train.grad_accum x train.batch_size x train.seq_len = %d x %d x %d = %lld tokens per step; "
                       "at most %lld", tr->grad_accum, tr->batch_size, tr->seq_len, (long long)per_step,
                       RUN_CONFIG_MAX_STEP_TOKENS);
    int n = run_config_eval_contexts(c, NULL, e);
    if (n < 0) return -1;
    if (n > 0 && !run_config_has_task(c)) {
        int val = !strcmp(c->eval.split, "val");
        if ((val ? c->data.val.n : c->data.test.n) == 0)
            return err_set(e, "eval.split: \"%s\" but data.%s is empty; set data.%s, or eval.contexts to \"\"",
                           c->eval.split, c->eval.split, c->eval.split);
    }
    return 0;
}
