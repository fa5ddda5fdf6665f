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
 *   seqeval --run RUN_DIR --data test --context 4096 --attention-map DIR [--layer N]
 *       each head's attention map (softmax weights) of one layer at one context length, as PNGs
 *   seqeval --run RUN_DIR --generate --prompt TEXT | --prompt-file FILE [...]
 *       text generation (cli/generate.c has its own options: seqeval --generate --help)
 *   seqeval --run RUN_DIR --zeroshot lambada,hellaswag,...|all|paper [--limit N]
 *       zero-shot multiple-choice accuracy on data/eval (the KLA paper's Table 4; cli/zeroshot_cmd.c)
 *
 * Perplexity, --task, --probe and --zeroshot run their forward passes on the run's run.device (the GPU backend
 * for cuda, train/forward.h) unless --device says otherwise; --attention-map and --generate run on the CPU.
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
#include "cli/zeroshot_cmd.h"
#include "core/cpu.h"
#include "core/dist.h"
#include "core/png.h"
#include "data/eval_windows.h"
#include "data/npy.h"
#include "data/shard.h"
#include "train/ckptdir.h"
#include "train/evaluate.h"
#include "train/forward.h"
#include "train/run_load.h"
#include "train/run_config.h"
#include "train/safetensors.h"

static const char *PROG = "seqeval";

// the attention maps of one layer at context L: the first L tokens of the data, one forward pass, then
// the largest attention-map PNG side; longer contexts are downsampled to it (and the message says so)
#define ATTN_MAP_MAX_PX 1024

// each head's softmax weights as DIR/layer<l>_head<h>.png (docs/mixers.md; RFA: the unattenuated A^)
static int attention_maps_(Model *m, Shard *sh, int L, int layer, const char *dir, Err *e) {
    if (layer < 0) layer += m->L;
    if (layer < 0 || layer >= m->L) return err_set(e, "--layer: %d is not a layer of this %d-layer model", layer, m->L);
    int H = model_layer_attn_heads(m, layer);
    if (!H)
        return err_set(e, "--attention-map: layer %d's mixer '%s' has no attention map", layer,
                       model_layer_name(m, layer));
    if (sh->n_tokens < (uint64_t)L + 1)
        return err_set(e, "%s: %llu tokens, fewer than the %d + 1 an attention map at context %d needs", sh->path,
                       (unsigned long long)sh->n_tokens, L, L);
    uint32_t *tok = xmalloc(((size_t)L + 1) * sizeof(uint32_t));
    int *in = xmalloc((size_t)L * sizeof(int)), *tg = xmalloc((size_t)L * sizeof(int));
    int rc = shard_read(sh, tok, 0, (uint64_t)L + 1, e);
    for (int t = 0; rc == 0 && t < L; t++) {
        in[t] = (int)tok[t];
        tg[t] = (int)tok[t + 1];
    }
    if (rc == 0) rc = model_forward(m, in, tg, 1, L, e);
    if (rc == 0 && mkdir(dir, 0755) != 0 && errno != EEXIST) rc = err_set(e, "cannot create %s: %s", dir, strerror(errno));
    float *P = rc == 0 ? xmalloc((size_t)L * L * sizeof(float)) : NULL;
    for (int h = 0; h < H && rc == 0; h++) {
        model_layer_attn_map(m, layer, 0, h, P);
        char path[1400];
        snprintf(path, sizeof path, "%s/layer%d_head%d.png", dir, layer, h);
        rc = png_write_heatmap(path, P, L, L, ATTN_MAP_MAX_PX, e);
        if (rc == 0 && L > ATTN_MAP_MAX_PX)  // png_write_heatmap averages blocks down to ATTN_MAP_MAX_PX pixels
            printf("wrote %s (%d x %d PNG: the %d x %d weights downsampled, each pixel the mean of a block)\n", path,
                   ATTN_MAP_MAX_PX, ATTN_MAP_MAX_PX, L, L);
        else if (rc == 0)
            printf("wrote %s (%d x %d PNG: the %d x %d weights, one pixel each)\n", path, L, L, L, L);
    }
    free(P);
    free(tok);
    free(in);
    free(tg);
    return rc;
}

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
    const char *out = NULL, *probe = NULL, *attn_dir = NULL, *device = NULL, *precision = NULL;
    int task = 0;
    long attn_layer = -1;  // ARG_INT stores a long
    long stride = 0, vocab = 0, max_windows = 0;
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
        {"--attention-map", ARG_STR, &attn_dir, "DIR", "write each head's attention map of --layer at the first --context length as DIR/layer<l>_head<h>.png (from the first tokens of --data; contexts over 1024 are downsampled to 1024 x 1024 pixels)", 0, 0},
        {"--layer", ARG_INT, &attn_layer, "L", "layer for --attention-map (default -1 = the last; negative counts from the end)", -4096, 4096},
        {"--task", ARG_FLAG, &task, NULL, "a run trained on a data.task: loss and accuracy on the task's test split (JSON line)", 0, 0},
        {"--zeroshot", ARG_STR, &zs.tasks, "TASKS", "zero-shot accuracy on these comma-separated tasks (lambada, hellaswag, piqa, arc_easy, arc_challenge, winogrande, openbookqa, boolq, copa, siqa, winograd_wsc; all; paper = Table 4's eight) into --out (default RUN_DIR/eval-zeroshot)", 0, 0},
        {"--limit", ARG_INT, &zs.limit, "N", "--zeroshot: score the first N items of each task (default 0 = all)", 0, 1e12},
        {"--eval-data", ARG_STR, &zs.eval_dir, "DIR", "--zeroshot: folder of the evaluation sets (default data/eval)", 0, 0},
        {"--tokenizer", ARG_STR, &zs.tokenizer, "FILE", "--zeroshot: the run's SentencePiece .model (default: its data.tokenizer)", 0, 0},
        {"--device", ARG_STR, &device, "cpu|cuda", "where perplexity, --task, --probe and --zeroshot run their forward passes (default: the run's run.device; cuda needs a `make CUDA=1` build and a GPU; --attention-map and --generate run on the CPU)", 0, 0},
        {"--precision", ARG_STR, &precision, "fp32|tf32|bf16", "the GPU's matmul precision (default: the run's run.precision)", 0, 0},
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
    if (dist_size() > 1 && !help && (plan || probe || attn_dir || zs.tasks)) {
        err_set(&e, "%s runs in one process; start it without mpirun (only perplexity (--data) and --task "
                "evaluations are shared among MPI ranks)", plan ? "--plan" : probe ? "--probe" :
                attn_dir ? "--attention-map" : "--zeroshot");
        dist_die(PROG, &e);
    }
    if (help || (!run && !plan)) {
        FILE *f = help ? stdout : stderr;
        if (dist_main()) fprintf(f, "usage: seqeval --run RUN_DIR --data valid|test|FILE [--context L1,L2,...] [--stride S]\n"
                   "       seqeval --run RUN_DIR --probe TOKENS.npy --out DUMP.safetensors\n"
                   "       seqeval --run RUN_DIR --task\n"
                   "       seqeval --run RUN_DIR --zeroshot TASKS|all|paper [--limit N] [--out DIR]\n"
                   "       seqeval --run RUN_DIR --data valid|test|FILE --context L --attention-map DIR [--layer N]\n"
                   "       seqeval --data FILE --context L1,L2,... --plan\n"
                   "       seqeval --run RUN_DIR --generate --prompt TEXT|--prompt-file FILE [...]  (seqeval --generate --help)\n"
                   "perplexity, --task, --probe and --zeroshot run on the run's run.device (cpu or cuda): --device picks\n"
                   "another\n"
                   "\noptions:\n");
        if (dist_main()) args_usage(f, specs, ns);
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
    if (dist_agree(run ? run_load_model(&m, &c, run, ckpt, &e) : 0, &e) != 0) dist_die(PROG, &e);
    if (run && device) snprintf(c.run.device, sizeof c.run.device, "%s", device);
    if (run && precision) snprintf(c.run.precision, sizeof c.run.precision, "%s", precision);
    Forward fw;
    memset(&fw, 0, sizeof fw);
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
    if (attn_dir) {
        if (!run) { err_set(&e, "--attention-map needs --run"); dist_die(PROG, &e); }
        if (attention_maps_(&m, &shards[0], (int)ctx[0], (int)attn_layer, attn_dir, &e) != 0) dist_die(PROG, &e);
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
        int threads = 1;
#ifdef _OPENMP
        threads = omp_get_max_threads();
#endif
        char procs[64] = "";
        if (dist_size() > 1) snprintf(procs, sizeof procs, "%d ranks x ", dist_size());
        forward_open_(&fw, &m, &c, run);  // first: a refused device stops before anything is printed
        if (dist_main())
            fprintf(stderr, "seqeval: %s, %s%d thread%s, %s kernels\n", run, procs, threads, threads == 1 ? "" : "s",
                    kernel_set_name(kernel_set()));
        for (int i = 0; i < n_ctx; i++) {
            if (evaluate_context(&fw, shards, n_files, ctx[i], stride, max_windows, &r[i], &e) != 0) dist_die(PROG, &e);
            if (!isfinite(r[i].loss)) {
                err_set(&e, "%s: the loss at context %ld is not finite (%g): the model's outputs overflow", run, ctx[i],
                        r[i].loss);
                dist_die(PROG, &e);
            }
            if (dist_main())
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
