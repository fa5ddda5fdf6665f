/*
 * seqeval: evaluate a trained run.
 *
 *   seqeval --run RUN_DIR --data valid|test|FILE --context 512,1024,2048,4096 [--stride S]
 *       perplexity by context length (train short, test long) as Markdown, CSV and JSON, plus the mean
 *       loss at every position of the window (positions_<L>.csv)
 *   seqeval --run RUN_DIR --probe tokens.npy --out dump.safetensors
 *       logits, loss and the gradient of every parameter for one batch, for comparison with outside
 *       references (tokens.npy: integer array (B, T+1); inputs are [:, :-1], targets [:, 1:])
 *   seqeval --data FILE --context ... --plan
 *       only the evaluation plan (windows and tokens scored per length), no model needed
 *   seqeval --run RUN_DIR --task
 *       a run trained on a synthetic task (data.task): loss and accuracy on the task's test split
 *   seqeval --run RUN_DIR --data test --context 4096 --attention-map DIR [--layer N] [--heads H,...] [--matrix]
 *   seqeval --run RUN_DIR --task --attention-map DIR ...
 *       each head's attention map of one layer (softmax weights; kla: each channel's Kalman attention matrix) on
 *       the first tokens of the data or the first test example of a task, as PNGs (cli/inspect.h)
 *   seqeval --run RUN_DIR --task|--data ... --posterior-var FILE.tsv [--layer N]
 *       a kla layer's output variance at every position of that example, per channel
 *   seqeval --run RUN_DIR --generate --prompt TEXT | --prompt-file FILE [...]
 *       text generation (cli/generate.c has its own options: seqeval --generate --help)
 *   seqeval --run RUN_DIR --zeroshot lambada,hellaswag,...|all|paper [--limit N]
 *       zero-shot multiple-choice accuracy on data/eval (the KLA paper's Table 4; cli/zeroshot_cmd.c)
 *
 * Perplexity, --task, --probe and --zeroshot run their forward passes on the run's run.device (the GPU backend
 * for cuda, eval/forward.h) unless --device says otherwise; --attention-map runs on the CPU, and --generate on the
 * CPU unless it is given --device cuda (cli/generate.c).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cli/args.h"
#include "cli/generate.h"
#include "cli/inspect.h"
#include "cli/zeroshot_cmd.h"
#include "core/cpu.h"
#include "core/dist.h"
#include "core/files.h"
#include "data/eval_windows.h"
#include "data/npy.h"
#include "data/shard.h"
#include "ckpt/ckptdir.h"
#include "eval/evaluate.h"
#include "eval/forward.h"
#include "eval/run_load.h"
#include "run/run_config.h"
#include "ckpt/safetensors.h"

static const char *PROG = "seqeval";

// --probe: the logits, loss and every parameter's gradient for the batch of TOKENS.npy, from the forward's device
static int probe_(Forward *f, const char *npy, const char *out, Err *e) {
    const Model *m = f->m;
    long *tok = NULL, B = 0, T1 = 0;
    int nd = 0;
    if (npy_read_ints(npy, &tok, &B, &T1, &nd, e) != 0) return -1;
    if (nd != 2 || T1 < 2) {
        free(tok);
        return err_set(e, "%s: need a (B, T+1) array: each row holds inputs and their next-token targets", npy);
    }
    int T = (int)T1 - 1;
    int *in = xmalloc((size_t)B * T * sizeof(int)), *tg = xmalloc((size_t)B * T * sizeof(int));
    for (long b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            in[b * T + t] = (int)tok[b * T1 + t];  // out-of-range ids are refused by model_forward
            tg[b * T + t] = (int)tok[b * T1 + t + 1];
        }
    free(tok);
    // logits and gradients from the forward's device (the host model's or the GPU's)
    float *logits = xmalloc((size_t)B * T * m->V * sizeof(float)), *grads = xmalloc(m->pt.numel * sizeof(float));
    double loss_d = 0;
    int rc = forward_probe(f, in, tg, (int)B, T, logits, grads, &loss_d, e);
    if (rc == 0) {
        int n = m->pt.n + 2;
        SafeTensor *ts = xcalloc((size_t)n, sizeof(SafeTensor));
        int64_t *shapes = xcalloc((size_t)n * PARAM_NDIM_MAX, sizeof(int64_t));
        char **names = xcalloc((size_t)n, sizeof(char *));
        float loss = (float)loss_d;
        shapes[0] = B; shapes[1] = T; shapes[2] = m->V;
        ts[0] = (SafeTensor){"logits", 3, shapes, logits, ST_F32};
        shapes[PARAM_NDIM_MAX] = 1;
        ts[1] = (SafeTensor){"loss", 1, shapes + PARAM_NDIM_MAX, &loss, ST_F32};
        for (int k = 0; k < m->pt.n; k++) {
            const ParamTensor *pt = &m->pt.t[k];
            names[k + 2] = xmalloc(strlen(pt->name) + 6);
            sprintf(names[k + 2], "grad.%s", pt->name);
            int64_t *s = shapes + (size_t)(k + 2) * PARAM_NDIM_MAX;
            for (int d = 0; d < pt->ndim; d++) s[d] = pt->shape[d];
            ts[k + 2] = (SafeTensor){names[k + 2], pt->ndim, s, grads + pt->offset, ST_F32};
        }
        const char *meta[] = {"format", "seqtrain-probe"};
        rc = safetensors_write(out, ts, n, meta, 1, e);
        if (rc == 0)
            printf("wrote %s: logits (%ld, %d, %d), loss %.6f, %d gradients (%s)\n", out, B, T, m->V, loss_d, m->pt.n,
                   forward_device(f));
        for (int k = 0; k < n; k++) free(names[k]);
        free(names);
        free(shapes);
        free(ts);
    }
    free(logits);
    free(grads);
    free(in);
    free(tg);
    return rc;
}

// perplexity, --task, --probe and --zeroshot run their forward passes on c->run.device (the run's, or --device)
static void forward_open_(Forward *f, Model *m, const RunConfig *c, const char *run) {
    Err e = {{0}};
    int cuda = !strcmp(c->run.device, "cuda");
    if (cuda && dist_size() > 1) {
        err_set(&e, "run.device cuda (the run's config.json or --device cuda): the GPU backend evaluates in one "
                "process; start seqeval without mpirun, or evaluate on the CPU with --device cpu");
        dist_die(PROG, &e);
    }
    if (forward_open(f, m, c->run.device, c->run.precision, &e) != 0) {
        err_prefix(&e, "%s: evaluating on the GPU (run.device cuda of its config.json, or --device cuda; --device cpu "
                   "evaluates on the CPU): ", run);
        dist_die(PROG, &e);
    }
    if (cuda) fprintf(stderr, "seqeval: device %s\n", forward_device(f));
}

// the perplexity tables (rank 0): RUN_DIR/eval-<data>/ or --out, and the Markdown table on stdout
static void write_tables_(const RunConfig *c, const EvalResult *r, int n_ctx, const char *run, const char *data,
                          int split, long stride, const char *out) {
    Err e = {{0}};
    char dir[1200];
    if (out) snprintf(dir, sizeof dir, "%s", out);
    else snprintf(dir, sizeof dir, "%s/eval-%s%s", run, split ? data : "file", stride ? "-sliding" : "");
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        err_set(&e, "cannot create %s: %s", dir, strerror(errno));
        dist_die(PROG, &e);
    }
    char what[1400];
    snprintf(what, sizeof what, "%s: %s perplexity by context (trained at %d%s)", run, data, c->train.seq_len,
             stride ? ", sliding windows" : "");
    if (eval_write(dir, what, r, n_ctx, stdout, &e) != 0) dist_die(PROG, &e);
    printf("\nwritten to %s/ (ppl.md, ppl.csv, ppl.json, positions_<L>.csv)\n", dir);
}

int main(int argc, char **argv) {
    const char *run = NULL, *ckpt = NULL, *data = NULL, *contexts = "512,1024,2048,4096", *format = "auto";
    const char *out = NULL, *probe = NULL, *attn_dir = NULL, *heads_s = NULL, *var_path = NULL;
    const char *device = NULL, *precision = NULL;
    int task = 0, matrix = 0;
    long attn_layer = -1;  // ARG_INT stores a long
    long stride = 0, vocab = 0, max_windows = 0, threads = 0;
    int help = 0, plan = 0;
    ZeroshotCmd zs = {NULL, NULL, 0, "data/eval", NULL, NULL};
    ArgSpec specs[] = {
        {"--run", ARG_STR, &run, "RUN_DIR", "the trained run (its config.json and newest checkpoint)", 0, 0},
        {"--ckpt", ARG_STR, &ckpt, "DIR", "a specific checkpoint directory of the run (default: the newest)", 0, 0},
        {"--data", ARG_STR, &data, "valid|test|FILE", "evaluation tokens: the run's data.val (valid or val) / data.test, or a shard file", 0, 0},
        {"--context", ARG_STR, &contexts, "L1,L2,...", "context lengths (default 512,1024,2048,4096)", 0, 0},
        {"--stride", ARG_INT, &stride, "S", "sliding windows scoring S new tokens each (default 0 = non-overlapping)", 0, 1 << 24},
        {"--max-windows", ARG_INT, &max_windows, "N", "score at most N windows per length (default 0 = all)", 0, 1e12},
        {"--out", ARG_STR, &out, "PATH", "output folder for the tables (default RUN_DIR/eval-<data>), or the probe's .safetensors", 0, 0},
        {"--probe", ARG_STR, &probe, "TOKENS.npy", "write logits, loss and every parameter's gradient for this batch to --out", 0, 0},
        {"--attention-map", ARG_STR, &attn_dir, "DIR", "write each head's attention map of --layer as DIR/layer<l>_head<h>.png, at the first --context length from the first tokens of --data, or with --task on the test split's first example (kla: each channel's signed Kalman attention matrix; sides over 1024 are downsampled to 1024 pixels)", 0, 0},
        {"--layer", ARG_INT, &attn_layer, "L", "layer for --attention-map and --posterior-var (default -1 = the last; negative counts from the end)", -4096, 4096},
        {"--heads", ARG_STR, &heads_s, "H1,H2,...", "--attention-map: only these heads (kla: channels); default all", 0, 0},
        {"--matrix", ARG_FLAG, &matrix, NULL, "--attention-map: also write each map as DIR/layer<l>_head<h>.tsv (text, for gnuplot)", 0, 0},
        {"--posterior-var", ARG_STR, &var_path, "FILE.tsv", "write --layer's output variance (a kla layer's posterior) at every position of the example, per channel and averaged", 0, 0},
        {"--task", ARG_FLAG, &task, NULL, "a run trained on a data.task: loss and accuracy on the task's test split (JSON line); with --attention-map or --posterior-var, the example is the test split's first", 0, 0},
        {"--zeroshot", ARG_STR, &zs.tasks, "TASKS", "zero-shot accuracy on these comma-separated tasks (lambada, hellaswag, piqa, arc_easy, arc_challenge, winogrande, openbookqa, boolq, copa, siqa, winograd_wsc; all; paper = Table 4's eight) into --out (default RUN_DIR/eval-zeroshot)", 0, 0},
        {"--limit", ARG_INT, &zs.limit, "N", "--zeroshot: score the first N items of each task (default 0 = all)", 0, 1e12},
        {"--eval-data", ARG_STR, &zs.eval_dir, "DIR", "--zeroshot: folder of the evaluation sets (default data/eval)", 0, 0},
        {"--tokenizer", ARG_STR, &zs.tokenizer, "FILE", "--zeroshot: the run's SentencePiece .model (default: its data.tokenizer)", 0, 0},
        {"--device", ARG_STR, &device, "cpu|cuda", "where perplexity, --task, --probe and --zeroshot run their forward passes (default: the run's run.device; cuda needs a `make CUDA=1` build and a GPU; --attention-map runs on the CPU; --generate decodes on the CPU unless given --device cuda itself)", 0, 0},
        {"--precision", ARG_STR, &precision, "fp32|tf32|bf16", "the GPU's matmul precision (default: the run's run.precision)", 0, 0},
        ARGS_THREADS_SPEC(&threads),
        {"--plan", ARG_FLAG, &plan, NULL, "print only the windows and tokens each length would score (no model)", 0, 0},
        {"--format", ARG_STR, &format, "FMT", "shard format of a FILE (default auto)", 0, 0},
        {"--vocab", ARG_INT, &vocab, "N", "vocab size of a raw FILE", 0, 1 << 30},
        {"--help", ARG_FLAG, &help, NULL, "show this help", 0, 0},
    };
    int ns = sizeof specs / sizeof specs[0];
    Err e = {{0}};
    // several processes under mpirun (make MPI=1) share the windows of a perplexity or --task evaluation
    dist_init(&argc, &argv, PROG);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--generate")) {
            if (dist_size() > 1) {
                err_set(&e, "--generate runs in one process; start it without mpirun");
                dist_die(PROG, &e);
            }
            return dist_exit(generate_main(PROG, argc, argv));
        }
    if (args_parse(argc, argv, 1, specs, ns, NULL, &e) != 0) dist_die(PROG, &e);
    if (kernel_set_init(&e) != 0) dist_die(PROG, &e);
    if (dist_size() > 1 && !help && (plan || probe || attn_dir || var_path || zs.tasks)) {
        err_set(&e, "%s runs in one process; start it without mpirun (only perplexity (--data) and --task "
                "evaluations are shared among MPI ranks)", plan ? "--plan" : probe ? "--probe" :
                attn_dir ? "--attention-map" : var_path ? "--posterior-var" : "--zeroshot");
        dist_die(PROG, &e);
    }
    if (help || (!run && !plan)) {
        FILE *f = help ? stdout : stderr;
        if (dist_main()) fprintf(f, "usage: seqeval --run RUN_DIR --data valid|test|FILE [--context L1,L2,...] [--stride S]\n"
                   "       seqeval --run RUN_DIR --probe TOKENS.npy --out DUMP.safetensors\n"
                   "       seqeval --run RUN_DIR --task\n"
                   "       seqeval --run RUN_DIR --zeroshot TASKS|all|paper [--limit N] [--out DIR]\n"
                   "       seqeval --run RUN_DIR --data valid|test|FILE --context L --attention-map DIR [--layer N] [--heads H,...] [--matrix]\n"
                   "       seqeval --run RUN_DIR --task --attention-map DIR | --posterior-var FILE.tsv [--layer N]\n"
                   "       seqeval --data FILE --context L1,L2,... --plan\n"
                   "       seqeval --run RUN_DIR --generate --prompt TEXT|--prompt-file FILE [...]  (seqeval --generate --help)\n"
                   "perplexity, --task, --probe and --zeroshot run on the run's run.device (cpu or cuda): --device picks\n"
                   "another\n"
                   "\noptions:\n");
        if (dist_main()) {
            args_usage(f, specs, ns);
            args_env_usage(f, 1);
        }
        return dist_exit(help ? 0 : 2);
    }
    if (device && strcmp(device, "cpu") && strcmp(device, "cuda")) {
        err_set(&e, "--device: \"%s\" is not cpu or cuda", device);
        dist_die(PROG, &e);
    }
    if (precision && strcmp(precision, "fp32") && strcmp(precision, "tf32") && strcmp(precision, "bf16")) {
        err_set(&e, "--precision: \"%s\" is not fp32, tf32 or bf16", precision);
        dist_die(PROG, &e);
    }
    RunConfig c;
    memset(&c, 0, sizeof c);
    Model m;
    memset(&m, 0, sizeof m);
    if (dist_agree(run ? run_load_model(&m, &c, run, ckpt, (int)threads, &e) : 0, &e) != 0) dist_die(PROG, &e);
    if (run && device) snprintf(c.run.device, sizeof c.run.device, "%s", device);
    if (run && precision) snprintf(c.run.precision, sizeof c.run.precision, "%s", precision);
    Forward fw;
    memset(&fw, 0, sizeof fw);
    long heads[256];
    int n_heads = heads_s ? args_int_list(heads_s, heads, 256, 0, 1 << 20, "--heads", &e) : 0;
    if (n_heads < 0) dist_die(PROG, &e);
    if ((heads_s || matrix) && !attn_dir) { err_set(&e, "--heads and --matrix go with --attention-map"); dist_die(PROG, &e); }
    if (attn_dir || var_path) {
        // the views inside the model (cli/inspect.h) on one example: a task's first test example, or --data's first
        // tokens (below, once the shards are open)
        if (!run) { err_set(&e, "%s needs --run", attn_dir ? "--attention-map" : "--posterior-var"); dist_die(PROG, &e); }
        if (task && !run_config_has_task(&c)) {
            err_set(&e, "--task: %s trains on shards, not on a data.task; use --data and --context", run);
            dist_die(PROG, &e);
        }
    }
    if (task && (attn_dir || var_path)) {
        InspectInput x;
        if (inspect_input_task(&x, &c, &e) != 0) dist_die(PROG, &e);
        if (attn_dir && inspect_attention_maps(&m, &x, (int)attn_layer, heads, n_heads, matrix, attn_dir, &e) != 0)
            dist_die(PROG, &e);
        if (var_path && inspect_posterior_var(&m, &x, (int)attn_layer, var_path, &e) != 0) dist_die(PROG, &e);
        inspect_input_free(&x);
        model_free(&m);
        run_config_free(&c);
        return dist_exit(0);
    }
    if (task) {
        if (!run) { err_set(&e, "--task needs --run"); dist_die(PROG, &e); }
        if (!run_config_has_task(&c)) {
            err_set(&e, "--task: %s trains on shards, not on a data.task; use --data for perplexity", run);
            dist_die(PROG, &e);
        }
        double loss, acc;
        uint64_t n;
        forward_open_(&fw, &m, &c, run);
        if (evaluate_task(&fw, &c, dist_main() ? stdout : NULL, &loss, &acc, &n, &e) != 0) dist_die(PROG, &e);
        forward_close(&fw);
        if (!isfinite(loss)) {
            err_set(&e, "%s: the test loss is not finite (%g): the model's outputs overflow", run, loss);
            dist_die(PROG, &e);
        }
        model_free(&m);
        run_config_free(&c);
        return dist_exit(0);
    }
    if (zs.tasks) {
        if (!run) { err_set(&e, "--zeroshot needs --run"); dist_die(PROG, &e); }
        zs.run = run;
        zs.out = out;
        forward_open_(&fw, &m, &c, run);
        if (zeroshot_cmd_run(&fw, &c, &zs, &e) != 0) dist_die(PROG, &e);
        forward_close(&fw);
        model_free(&m);
        run_config_free(&c);
        return dist_exit(0);
    }
    if (probe) {
        if (!out) { err_set(&e, "--probe needs --out FILE.safetensors"); dist_die(PROG, &e); }
        if (files_same(probe, out)) {
            err_set(&e, "--out %s is the --probe input; writing it would destroy the input", out);
            dist_die(PROG, &e);
        }
        forward_open_(&fw, &m, &c, run);
        if (probe_(&fw, probe, out, &e) != 0) dist_die(PROG, &e);
        forward_close(&fw);
        model_free(&m);
        run_config_free(&c);
        return dist_exit(0);
    }
    if (!data) { err_set(&e, "--data is required (valid, test or a shard file)"); dist_die(PROG, &e); }
    long ctx[32];
    int n_ctx = args_int_list(contexts, ctx, 32, 1, 1 << 24, "--context", &e);
    if (n_ctx < 0) dist_die(PROG, &e);

    // resolve --data into shard files
    const char *files[CFG_LIST_MAX];
    int n_files = 0;
    ShardFormat fmt;
    int split = !strcmp(data, "valid") || !strcmp(data, "val") || !strcmp(data, "test");
    if (split) {
        if (!run) { err_set(&e, "--data %s needs --run (the run's config says which files that is)", data); dist_die(PROG, &e); }
        const CfgStrList *l = strcmp(data, "test") ? &c.data.val : &c.data.test;
        if (l->n == 0) { err_set(&e, "%s/config.json: data.%s is empty", run, strcmp(data, "test") ? "val" : "test"); dist_die(PROG, &e); }
        for (int i = 0; i < l->n; i++) files[n_files++] = l->v[i];
        shard_format_parse(c.data.format, &fmt);
        vocab = c.data.vocab_size;
    } else {
        files[n_files++] = data;
        if (shard_format_parse(format, &fmt) != 0) {
            err_set(&e, "--format '%s' is not one of auto, seqtok, llmc, raw_u16, raw_u32", format);
            dist_die(PROG, &e);
        }
    }
    Shard *shards = xcalloc((size_t)n_files, sizeof(Shard));
    for (int f = 0; f < n_files; f++) {
        if (dist_agree(shard_open(&shards[f], files[f], fmt, (uint32_t)vocab, 64u << 20, &e), &e) != 0)
            dist_die(PROG, &e);
        if (plan) {  // every token is read once, as the evaluation will: a bad frame or id fails here
            uint32_t lo, hi;
            if (shard_scan(&shards[f], &lo, &hi, &e) != 0) dist_die(PROG, &e);
        } else if (shards[f].vocab_size > (uint32_t)m.V) {
            err_set(&e, "%s: vocab size %u is larger than the model's %d", files[f], shards[f].vocab_size, m.V);
            dist_die(PROG, &e);
        }
    }
    if (attn_dir || var_path) {
        InspectInput x;
        if (inspect_input_shard(&x, &shards[0], (int)ctx[0], &e) != 0) dist_die(PROG, &e);
        if (attn_dir && inspect_attention_maps(&m, &x, (int)attn_layer, heads, n_heads, matrix, attn_dir, &e) != 0)
            dist_die(PROG, &e);
        if (var_path && inspect_posterior_var(&m, &x, (int)attn_layer, var_path, &e) != 0) dist_die(PROG, &e);
        inspect_input_free(&x);
    } else if (plan) {
        printf("| context | windows | tokens scored |\n|---:|---:|---:|\n");
        for (int i = 0; i < n_ctx; i++) {
            uint64_t w = 0, scored = 0;
            for (int f = 0; f < n_files; f++) {
                EvalWindows p = eval_windows_plan(shards[f].n_tokens, (uint64_t)ctx[i], (uint64_t)stride);
                w += p.n_windows;
                scored += p.tokens_scored;
            }
            printf("| %ld | %llu | %llu |\n", ctx[i], (unsigned long long)w, (unsigned long long)scored);
        }
    } else {
        EvalResult *r = xcalloc((size_t)n_ctx, sizeof(EvalResult));
        int nthreads = 1;
#ifdef _OPENMP
        nthreads = omp_get_max_threads();
#endif
        char procs[64] = "";
        if (dist_size() > 1) snprintf(procs, sizeof procs, "%d ranks x ", dist_size());
        forward_open_(&fw, &m, &c, run);  // first: a refused device stops before anything is printed
        if (dist_main())
            fprintf(stderr, "seqeval: %s, %s%d thread%s, %s kernels\n", run, procs, nthreads, nthreads == 1 ? "" : "s",
                    kernel_set_name(kernel_set()));
        for (int i = 0; i < n_ctx; i++) {
            if (evaluate_context(&fw, shards, n_files, ctx[i], stride, max_windows, &r[i], &e) != 0) dist_die(PROG, &e);
            if (!isfinite(r[i].loss)) {
                err_set(&e, "%s: the loss at context %ld is not finite (%g): the model's outputs overflow", run, ctx[i],
                        r[i].loss);
                dist_die(PROG, &e);
            }
            if (dist_main() && fw.gpu)  // the activations of this context's batch are still held: its footprint
                fprintf(stderr, "  context %ld: %llu tokens, ppl %.2f, GPU memory %.1f MiB\n", ctx[i],
                        (unsigned long long)r[i].tokens, r[i].ppl, gpu_mem_used(fw.gpu) / 1048576.0);
            else if (dist_main())
                fprintf(stderr, "  context %ld: %llu tokens, ppl %.2f\n", ctx[i], (unsigned long long)r[i].tokens,
                        r[i].ppl);
        }
        forward_close(&fw);
        if (dist_main()) write_tables_(&c, r, n_ctx, run, data, split, stride, out);
        for (int i = 0; i < n_ctx; i++) eval_result_free(&r[i]);
        free(r);
    }
    for (int f = 0; f < n_files; f++) shard_close(&shards[f]);
    free(shards);
    if (run) {
        model_free(&m);
        run_config_free(&c);
    }
    return dist_exit(0);
}
