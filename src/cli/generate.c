/*
 * seqeval --run RUN_DIR --generate --prompt TEXT | --prompt-file FILE [--batch N --max-new N --temperature T
 *     --top-k K --top-p P --seed S --context L --device cpu|cuda --precision P]
 *
 * One prompt streams its continuation to stdout as it is drawn; a prompt file (one prompt per line) is
 * generated in batches of --batch prompts (memory stays that of one batch, however long the file), each
 * prompt's text printed when its batch is done; batch k samples from seed + k. EOS prints as a newline
 * (as seqtok decode writes it). Speed goes to stderr. The generation itself is eval/generate.h; --device cuda
 * keeps every layer's decoding state on the GPU (gpu/gpu.h's decoder) in the run's run.precision (--precision for
 * another).
 */
#include "cli/generate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cli/args.h"
#include "core/cpu.h"
#include "core/files.h"
#include "data/text.h"
#include "data/tokenizer.h"
#include "eval/generate.h"
#include "eval/run_load.h"

#define REPLACEMENT_CHAR "\xEF\xBF\xBD"  // what SentencePiece decodes an unfinished UTF-8 byte sequence to
#define GENERATE_BATCH_DEFAULT 64          // prompts decoded together: the decoder's state and logits scale with it

// one sequence's text as it grows: the ids since the last EOS (the prompt's first), the bytes of their
// decoding already written, and the whole continuation
typedef struct Stream {
    uint32_t *ids;
    size_t n, cap, shown;
    char *text;  // the continuation (malloc'd, NUL-terminated)
    size_t len;
} Stream;

typedef struct StreamCtx {
    const Tokenizer *tok;
    int eos;
    Stream *s;   // (n,)
    FILE *live;  // stream to this file as tokens come (one prompt), or NULL
    Err err;
    int failed;
} StreamCtx;

static void stream_put_(StreamCtx *c, Stream *s, const char *p, size_t n) {
    s->text = xrealloc(s->text, s->len + n + 1);
    memcpy(s->text + s->len, p, n);
    s->len += n;
    s->text[s->len] = '\0';
    // a live stream that cannot be written (a full disk, a closed pipe) stops the generation
    if (c->live && (fwrite(p, 1, n, c->live) != n || fflush(c->live) != 0) && !c->failed) {
        err_set(&c->err, "cannot write the generated text to stdout: %s", strerror(errno ? errno : EIO));
        c->failed = 1;
    }
}

// the new bytes of the decoded ids since the last call; a trailing replacement character waits for the rest
// of its UTF-8 bytes. Decoding the whole segment (not the new piece alone) keeps SentencePiece's spaces right.
static void stream_token_(void *ctx, int b, int token) {
    StreamCtx *c = ctx;
    Stream *s = &c->s[b];
    if (c->failed) return;
    if (token == c->eos) {
        stream_put_(c, s, "\n", 1);
        s->n = s->shown = 0;
        return;
    }
    if (s->n == s->cap) s->ids = xrealloc(s->ids, (s->cap = s->cap ? 2 * s->cap : 64) * sizeof(uint32_t));
    s->ids[s->n++] = (uint32_t)token;
    char *text;
    size_t len;
    if (tokenizer_decode(c->tok, s->ids, s->n, &text, &len, &c->err) != 0) {
        c->failed = 1;
        return;
    }
    size_t end = len;
    while (end >= 3 && !memcmp(text + end - 3, REPLACEMENT_CHAR, 3)) end -= 3;
    if (end > s->shown) {
        stream_put_(c, s, text + s->shown, end - s->shown);
        s->shown = end;
    }
    free(text);
}

// a prompt is UTF-8 text: a NUL would cut it silently (C strings) and invalid bytes would reach the tokenizer
static int prompt_check_(const char *p, size_t len, const char *where, Err *e) {
    if (memchr(p, '\0', len)) return err_set(e, "%s holds a NUL byte; a prompt is text", where);
    size_t ok = utf8_valid_prefix(p, len);
    if (ok != len)
        return err_set(e, "%s, byte %zu: invalid UTF-8 (0x%02x); a prompt must be UTF-8 text", where, ok + 1,
                       (unsigned)(unsigned char)p[ok]);
    return 0;
}

// the prompts of a file, one per line (a final newline ends the last one); a blank line is an error
static int read_prompts_(const char *path, char ***out, int *n, Err *e) {
    int not_reg = 0;
    FILE *f = fopen_regular(path, &not_reg, NULL);
    if (!f) return err_set(e, "--prompt-file %s: %s", path, not_reg ? "not a regular file" : strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int lineno = 0, rc = 0;
    *out = NULL;
    *n = 0;
    while (rc == 0 && (got = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = '\0';
        if (got == 0) {
            rc = err_set(e, "--prompt-file %s: line %d is empty; every line is one prompt", path, lineno);
            break;
        }
        char where[1200];
        snprintf(where, sizeof where, "--prompt-file %.1000s: line %d", path, lineno);
        if ((rc = prompt_check_(line, (size_t)got, where, e)) != 0) break;
        *out = xrealloc(*out, (size_t)(*n + 1) * sizeof(char *));
        (*out)[(*n)++] = xstrdup(line);
    }
    free(line);
    fclose(f);
    if (rc == 0 && *n == 0) rc = err_set(e, "--prompt-file %s: no prompt in it (one per line)", path);
    return rc;
}

// prompts texts (n,), numbered from first + 1: encoded, generated as one batch, printed (one prompt streams
// its text as it comes, live; a batch prints each prompt's block when it is done). 0, or -1 with e set
static int generate_batch_(Model *m, Gpu *gpu, const Tokenizer *tok, char **texts, int first, int n, int live,
                           const GenerateOpts *go, GenerateStats *st, Err *e) {
    int **ids = xcalloc((size_t)n, sizeof(int *)), *lens = xmalloc((size_t)n * sizeof(int));
    StreamCtx sc = {tok, tokenizer_eos_id(tok), xcalloc((size_t)n, sizeof(Stream)), live ? stdout : NULL, {{0}}, 0};
    int rc = 0;
    for (int b = 0; b < n && rc == 0; b++) {
        uint32_t *u = NULL;
        size_t len = 0, cap = 0;
        if (tokenizer_encode(tok, texts[b], strlen(texts[b]), &u, &len, &cap, e) != 0) {
            rc = -1;
            break;
        }
        if (len == 0) {
            free(u);
            rc = err_set(e, "prompt %d (\"%.60s\") encodes to no tokens: give some text to continue", first + b + 1,
                         texts[b]);
            break;
        }
        ids[b] = xmalloc(len * sizeof(int));
        for (size_t i = 0; i < len; i++) ids[b][i] = (int)u[i];
        lens[b] = (int)len;
        // the stream starts from the prompt's ids, so the continuation's first piece gets its space right
        Stream *s = &sc.s[b];
        size_t keep = len < (size_t)go->context ? len : (size_t)go->context;
        s->ids = xmalloc((keep + 64) * sizeof(uint32_t));
        s->cap = keep + 64;
        memcpy(s->ids, u + (len - keep), keep * sizeof(uint32_t));
        s->n = keep;
        char *dec;
        size_t dlen;
        rc = tokenizer_decode(tok, s->ids, s->n, &dec, &dlen, e);
        if (rc == 0) {
            s->shown = dlen;
            free(dec);
        }
        free(u);
    }
    if (rc == 0 && live) {
        fputs(texts[0], stdout);
        fflush(stdout);
    }
    if (rc == 0) rc = generate(m, gpu, (const int *const *)ids, lens, n, go, stream_token_, &sc, NULL, st, e);
    if (rc == 0 && sc.failed) {
        *e = sc.err;
        rc = -1;
    }
    if (rc == 0) {
        errno = 0;
        if (live) fputc('\n', stdout);
        for (int b = 0; b < n && !live; b++)
            printf("=== prompt %d ===\n%s%s\n", first + b + 1, texts[b], sc.s[b].text ? sc.s[b].text : "");
        if (fflush(stdout) != 0 || ferror(stdout))
            rc = err_set(e, "cannot write the generated text to stdout: %s", strerror(errno ? errno : EIO));
    }
    for (int b = 0; b < n; b++) {
        free(ids[b]);
        free(sc.s[b].ids);
        free(sc.s[b].text);
    }
    free(ids);
    free(lens);
    free(sc.s);
    return rc;
}

int generate_main(const char *prog, int argc, char **argv) {
    const char *run = NULL, *ckpt = NULL, *prompt = NULL, *prompt_file = NULL, *tok_path = NULL, *device = "cpu",
               *precision = NULL;
    long max_new = 200, top_k = 50, seed = 1, context = 0, threads = 0, batch = GENERATE_BATCH_DEFAULT;
    double temperature = 0.8, top_p = 0.95;
    int gen = 0, help = 0;
    ArgSpec specs[] = {
        {"--run", ARG_STR, &run, "RUN_DIR", "the trained run (its config.json and newest checkpoint)", 0, 0},
        {"--ckpt", ARG_STR, &ckpt, "DIR", "a specific checkpoint directory of the run (default: the newest)", 0, 0},
        {"--generate", ARG_FLAG, &gen, NULL, "generate text", 0, 0},
        {"--prompt", ARG_STR, &prompt, "TEXT", "the text to continue (streamed to stdout as it is generated)", 0, 0},
        {"--prompt-file", ARG_STR, &prompt_file, "FILE", "one prompt per line, generated in batches of --batch prompts", 0, 0},
        {"--batch", ARG_INT, &batch, "N", "prompts of a --prompt-file generated together (default 64); memory grows with it", 1, 1 << 20},
        {"--max-new", ARG_INT, &max_new, "N", "tokens to generate per prompt (default 200)", 1, 1 << 24},
        {"--temperature", ARG_DOUBLE, &temperature, "T", "softmax temperature, 0 (or below 1e-6) = greedy (default 0.8)", 0, 0},
        {"--top-k", ARG_INT, &top_k, "K", "sample among the K most likely tokens, 0 = all (default 50)", 0, 1 << 30},
        {"--top-p", ARG_DOUBLE, &top_p, "P", "then among the fewest whose probability reaches P, in (0, 1] (default 0.95)", 0, 0},
        {"--seed", ARG_INT, &seed, "S", "sampling seed: the same seed gives the same text (default 1)", 0, 9e18},
        {"--context", ARG_INT, &context, "L", "positions attention caches hold and the longest prompt kept (default: the run's train.seq_len); full caches slide to the last L/2 tokens", 2, 1 << 24},
        {"--device", ARG_STR, &device, "cpu|cuda", "where the model decodes (default cpu); cuda keeps every layer's state and key/value cache on the GPU, in the run's run.precision, and needs a `make CUDA=1` build", 0, 0},
        {"--precision", ARG_STR, &precision, "P", "with --device cuda: fp32, tf32 or bf16 (default: the run's run.precision)", 0, 0},
        {"--tokenizer", ARG_STR, &tok_path, "MODEL", "SentencePiece model (default: the run's data.tokenizer)", 0, 0},
        ARGS_THREADS_SPEC(&threads),
        {"--help", ARG_FLAG, &help, NULL, "show this help", 0, 0},
    };
    int ns = sizeof specs / sizeof specs[0];
    Err e = {{0}};
    if (args_parse(argc, argv, 1, specs, ns, NULL, &e) != 0) err_die(prog, &e);
    if (help || !run) {
        FILE *f = help ? stdout : stderr;
        fprintf(f, "usage: seqeval --run RUN_DIR --generate --prompt TEXT [options]\n"
                   "       seqeval --run RUN_DIR --generate --prompt-file FILE [options]\n\noptions:\n");
        args_usage(f, specs, ns);
        return help ? 0 : 2;
    }
    if (!prompt == !prompt_file) {
        err_set(&e, "--generate needs --prompt TEXT or --prompt-file FILE (one of them)");
        err_die(prog, &e);
    }
    GenerateOpts go = {{temperature, (int)top_k, top_p}, (int)max_new, 0, (uint64_t)seed};
    if (sample_check(&go.sample, &e) != 0) err_die(prog, &e);
    char **texts = NULL;
    int n = 0;
    if (prompt_file) {
        if (read_prompts_(prompt_file, &texts, &n, &e) != 0) err_die(prog, &e);
    } else {
        if (!prompt[0]) { err_set(&e, "--prompt is empty: give some text to continue"); err_die(prog, &e); }
        if (prompt_check_(prompt, strlen(prompt), "--prompt", &e) != 0) err_die(prog, &e);
        texts = xmalloc(sizeof(char *));
        texts[n++] = xstrdup(prompt);
    }
    if (strcmp(device, "cpu") && strcmp(device, "cuda")) {
        err_set(&e, "--device: \"%s\" is not cpu or cuda", device);
        err_die(prog, &e);
    }
    if (kernel_set_init(&e) != 0) err_die(prog, &e);
    RunConfig c;
    Model m;
    memset(&c, 0, sizeof c);
    memset(&m, 0, sizeof m);
    if (run_load_model(&m, &c, run, ckpt, (int)threads, &e) != 0) err_die(prog, &e);
    if (!tok_path) tok_path = c.data.tokenizer;
    if (!tok_path[0]) {
        err_set(&e, "%s: the run's config names no data.tokenizer; give one with --tokenizer MODEL", run);
        err_die(prog, &e);
    }
    Tokenizer *tok = tokenizer_load(tok_path, &e);
    if (!tok) err_die(prog, &e);
    if (tokenizer_vocab_size(tok) != m.V) {
        err_set(&e, "%s: the model has a vocabulary of %d tokens but the tokenizer %s has %d; it was not trained "
                "with this tokenizer (give the right one with --tokenizer)", run, m.V, tok_path, tokenizer_vocab_size(tok));
        err_die(prog, &e);
    }
    go.context = context ? (int)context : c.train.seq_len;
    Gpu *gpu = NULL;
    if (precision) snprintf(c.run.precision, sizeof c.run.precision, "%s", precision);
    if (!strcmp(device, "cuda") && gpu_open(&gpu, &m, NULL, c.run.precision, &e) != 0) {
        err_prefix(&e, "--device cuda: ");
        err_die(prog, &e);
    }
    int nthreads = 1;
#ifdef _OPENMP
    nthreads = omp_get_max_threads();
#endif
    int n_batches = (int)((n + batch - 1) / batch);
    fprintf(stderr, "%s: %s, %d prompt%s", prog, run, n, n == 1 ? "" : "s");
    if (n_batches > 1) fprintf(stderr, " in %d batches of at most %ld", n_batches, batch);
    if (gpu) fprintf(stderr, ", context %d, device %s, %s\n", go.context, gpu_device_name(gpu), c.run.precision);
    else
        fprintf(stderr, ", context %d, %d thread%s, %s kernels\n", go.context, nthreads, nthreads == 1 ? "" : "s",
                kernel_set_name(kernel_set()));
    GenerateStats st = {0};
    int rc = 0;
    for (int b0 = 0; b0 < n && rc == 0; b0 += (int)batch) {
        // batch k draws from seed + k: the first batch (every prompt of a small file) keeps the seed's text
        GenerateOpts gk = go;
        gk.seed = go.seed + (uint64_t)(b0 / batch);
        GenerateStats sk = {0};
        rc = generate_batch_(&m, gpu, tok, texts + b0, b0, n - b0 < batch ? n - b0 : (int)batch, n == 1, &gk, &sk, &e);
        st.prompt_tokens += sk.prompt_tokens;
        st.new_tokens += sk.new_tokens;
        st.slides += sk.slides;
        st.truncated += sk.truncated;
        st.seconds += sk.seconds;
    }
    if (rc == 0) {
        if (st.truncated)
            fprintf(stderr, "%s: %d prompt%s longer than the context of %d tokens: kept the last %d\n", prog,
                    st.truncated, st.truncated == 1 ? "" : "s", go.context, go.context);
        if (st.slides)
            fprintf(stderr, "%s: the attention caches filled up %d time%s: re-encoded the last %d tokens each time\n",
                    prog, st.slides, st.slides == 1 ? "" : "s", go.context / 2);
        fprintf(stderr, "%s: %ld tokens generated (%d x %d) after %ld prompt tokens in %.2f s: %.1f tokens/s\n", prog,
                st.new_tokens, n, go.max_new, st.prompt_tokens, st.seconds,
                st.seconds > 0 ? (double)st.new_tokens / st.seconds : 0.0);
    }
    for (int b = 0; b < n; b++) free(texts[b]);
    free(texts);
    tokenizer_free(tok);
    if (gpu) gpu_close(gpu);
    model_free(&m);
    run_config_free(&c);
    if (rc != 0) err_die(prog, &e);
    return 0;
}
