/*
 * seqtok: train a SentencePiece tokenizer, encode text/jsonl into token shards, decode shards back to
 * text, and inspect shards. See `seqtok --help` and docs/formats.md.
 */
#include <errno.h>
#include <math.h>
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

#include "cli/args.h"
#include "core/files.h"
#include "core/timer.h"
#include "core/sha256.h"
#include "data/shard.h"
#include "data/text.h"
#include "data/tokenizer.h"

static const char *PROG = "seqtok";

static void usage_(FILE *f) {
    fprintf(f,
            "usage: seqtok <command> [options]\n\n"
            "commands:\n"
            "  train    train a SentencePiece model on text or jsonl files (plain or .zst)\n"
            "  encode   text/jsonl (plain or .zst) -> token shard, one EOS after every line/record\n"
            "  decode   shard (or --ids) -> text, EOS written as a newline\n"
            "  info     header, token count, vocab, tokenizer hash and min/max id of shards\n\n"
            "`seqtok <command> --help` lists the command's options.\n");
}

// jsonl when asked for, or when the name says so (x.jsonl, x.jsonl.zst)
static const char *jsonl_key_for_(const char *path, const char *key) {
    if (key) return key;
    return (strstr(path, ".jsonl") != NULL) ? "text" : NULL;
}

// ----------------------------------------------------------------------------
// train

typedef struct InputFiles {  // walks several input files as one stream of lines
    const ArgList *paths;
    const char *jsonl_key;
    int idx, open;
    TextReader r;
    uint64_t lines;
} InputFiles;

static int input_next_(void *ctx, const char **text, size_t *len, Err *e) {
    InputFiles *in = ctx;
    for (;;) {
        if (!in->open) {
            if (in->idx == in->paths->n) return 0;
            const char *p = in->paths->v[in->idx];
            if (text_open(&in->r, p, jsonl_key_for_(p, in->jsonl_key), e) != 0) return -1;
            in->open = 1;
        }
        int rc = text_next(&in->r, text, len, e);
        if (rc == 1) { in->lines++; return 1; }
        text_close(&in->r);
        in->open = 0;
        if (rc < 0) return -1;
        in->idx++;
    }
}

static int cmd_train_(int argc, char **argv) {
    ArgList inputs = {0};
    const char *prefix = NULL, *model_type = "bpe", *jsonl_key = NULL;
    long vocab = 8192, threads = 2, max_len = 65536, sentences = 0, seed = 0, byte_fallback = 1;
    double coverage = 0.9995;
    int help = 0;
    ArgSpec specs[] = {
        {"--input", ARG_LIST, &inputs, "FILE", "training text (repeatable; .zst and .jsonl understood)", 0, 0},
        {"--model-prefix", ARG_STR, &prefix, "PREFIX", "writes PREFIX.model and PREFIX.vocab (required)", 0, 0},
        {"--vocab-size", ARG_INT, &vocab, "N", "vocabulary size (default 8192)", 16, 1 << 22},
        {"--model-type", ARG_STR, &model_type, "TYPE", "bpe | unigram | char | word (default bpe)", 0, 0},
        {"--character-coverage", ARG_DOUBLE, &coverage, "F",
         "fraction of characters given their own piece; rarer ones fall back to bytes (default 0.9995)", 0.5, 1},
        {"--byte-fallback", ARG_INT, &byte_fallback, "0|1", "unknown characters become byte pieces (default 1)", 0, 1},
        {"--jsonl-key", ARG_STR, &jsonl_key, "KEY", "read this field of each JSON line (default text for .jsonl)", 0, 0},
        {"--threads", ARG_INT, &threads, "N", "trainer threads (default 2)", 1, 1024},
        {"--max-sentence-length", ARG_INT, &max_len, "BYTES", "longer lines are skipped (default 65536)", 16, 1 << 30},
        {"--input-sentence-size", ARG_INT, &sentences, "N", "sample N lines, 0 = all (default 0)", 0, 1e12},
        {"--seed", ARG_INT, &seed, "N", "seed of the trainer's sampling (default 0)", 0, 2147483647},
        {"--help", ARG_FLAG, &help, NULL, "show this help", 0, 0},
    };
    int ns = sizeof specs / sizeof specs[0];
    Err e = {{0}};
    if (args_parse(argc, argv, 2, specs, ns, NULL, &e) != 0) err_die(PROG, &e);
    if (help) {
        printf("usage: seqtok train --input FILE [--input FILE ...] --model-prefix PREFIX [options]\n\n");
        args_usage(stdout, specs, ns);
        return 0;
    }
    if (inputs.n == 0) { err_set(&e, "train: --input is required"); err_die(PROG, &e); }
    if (!prefix) { err_set(&e, "train: --model-prefix is required"); err_die(PROG, &e); }
    if (strcmp(model_type, "bpe") && strcmp(model_type, "unigram") && strcmp(model_type, "char") &&
        strcmp(model_type, "word")) {
        err_set(&e, "train: --model-type '%s' is not one of bpe, unigram, char, word", model_type);
        err_die(PROG, &e);
    }
    // fail on an unwritable prefix before minutes of training, not after; SentencePiece writes PREFIX.model
    // and PREFIX.vocab in place, so neither may be a link, a device or one of the inputs
    static const char *const outs[3] = {"model", "vocab", "model.probe"};
    for (int k = 0; k < 3; k++) {
        char out[4096];
        snprintf(out, sizeof out, "%s.%s", prefix, outs[k]);
        if (output_check(out, &e) != 0) err_die(PROG, &e);
        for (int i = 0; i < inputs.n; i++)
            if (files_same(inputs.v[i], out)) {
                err_set(&e, "train: %s is also the --input %s; writing it would destroy the input", out, inputs.v[i]);
                err_die(PROG, &e);
            }
        FILE *pf = k == 2 ? fopen_output(out, 0, &e) : NULL;
        if (k == 2 && (!pf || fclose_output(pf, out, &e) != 0)) err_die(PROG, &e);
        if (k == 2) remove(out);
    }
    InputFiles in = {.paths = &inputs, .jsonl_key = jsonl_key};
    TokenizerTrainOpts o = {
        .model_prefix = prefix, .vocab_size = (int)vocab, .model_type = model_type,
        .character_coverage = coverage, .byte_fallback = (int)byte_fallback, .threads = (int)threads,
        .max_sentence_length = (int)max_len, .input_sentence_size = sentences, .seed = (int)seed,
    };
    double t0 = time_now_s();
    printf("seqtok train: %s, vocab %ld, coverage %g, %d input file(s)\n", model_type, vocab, coverage, inputs.n);
    fflush(stdout);
    if (tokenizer_train(&o, input_next_, &in, &e) != 0) {
        if (in.open) text_close(&in.r);
        err_die(PROG, &e);
    }
    char model[4096];
    snprintf(model, sizeof model, "%s.model", prefix);
    // SentencePiece stops early (hard_vocab_limit off) when the text has no more merges to give
    Tokenizer *tok = tokenizer_load(model, &e);
    if (!tok) err_die(PROG, &e);
    if (tokenizer_vocab_size(tok) < vocab)
        fprintf(stderr, "seqtok: note: %s has %d pieces, fewer than the --vocab-size %ld asked for: the input holds "
                "too little text for more (give more text, or ask for fewer)\n", model, tokenizer_vocab_size(tok), vocab);
    tokenizer_free(tok);
    uint8_t sha[32];
    char hex[65];
    if (sha256_file(model, sha, &e) != 0) err_die(PROG, &e);
    sha256_hex(sha, hex);
    printf("wrote %s (%llu lines, %.1f s)\nsha256 %s\n", model, (unsigned long long)in.lines, time_now_s() - t0, hex);
    return 0;
}

// ----------------------------------------------------------------------------
// encode

// Ctrl-C or SIGTERM ends an encode at once, wherever it is (inside a long line's read or encoding, too): the
// handler removes the temporary shard and exits with the message made ready before it was installed; only
// async-signal-safe calls (write, unlink, _exit)
static char interrupted_msg_[FILE_PATH_MAX + 96], interrupted_tmp_[FILE_PATH_MAX + 32];
static size_t interrupted_len_;
static void on_signal_(int sig) {
    (void)sig;
    unlink(interrupted_tmp_);
    ssize_t n = write(2, interrupted_msg_, interrupted_len_);
    (void)n;
    _exit(1);
}

typedef struct EncodeBatch {  // lines read ahead, encoded in parallel, appended in order
    char *text;               // all lines back to back
    size_t text_len, text_cap;
    size_t *start, *len;      // (n,) per line
    int n, cap;
    uint32_t **ids;           // (n,) per-line id arrays
    size_t *n_ids, *cap_ids;
} EncodeBatch;

static void batch_push_(EncodeBatch *b, const char *s, size_t len) {
    if (b->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 1024;
        b->start = xrealloc(b->start, b->cap * sizeof(size_t));
        b->len = xrealloc(b->len, b->cap * sizeof(size_t));
        b->ids = xrealloc(b->ids, b->cap * sizeof(uint32_t *));
        b->n_ids = xrealloc(b->n_ids, b->cap * sizeof(size_t));
        b->cap_ids = xrealloc(b->cap_ids, b->cap * sizeof(size_t));
        for (int i = b->n; i < b->cap; i++) { b->ids[i] = NULL; b->cap_ids[i] = 0; }
    }
    if (b->text_len + len > b->text_cap) {
        b->text_cap = (b->text_len + len) * 2 + 4096;
        b->text = xrealloc(b->text, b->text_cap);
    }
    if (len) memcpy(b->text + b->text_len, s, len);  // an empty first line: b->text is still NULL
    b->start[b->n] = b->text_len;
    b->len[b->n] = len;
    b->text_len += len;
    b->n++;
}

static void batch_free_(EncodeBatch *b) {
    for (int i = 0; i < b->cap; i++) free(b->ids[i]);
    free(b->text); free(b->start); free(b->len); free(b->ids); free(b->n_ids); free(b->cap_ids);
}

// encode the batch's lines in parallel; a failure is reported for the first failing line
static int batch_encode_(EncodeBatch *b, const Tokenizer *tok, Err *e) {
    int failed = -1;
    Err first = {{0}};
#pragma omp parallel for schedule(dynamic, 32)
    for (int i = 0; i < b->n; i++) {
        Err le = {{0}};
        b->n_ids[i] = 0;
        if (tokenizer_encode(tok, b->text + b->start[i], b->len[i], &b->ids[i], &b->n_ids[i], &b->cap_ids[i], &le)) {
#pragma omp critical
            if (failed < 0 || i < failed) { failed = i; first = le; }
        }
    }
    if (failed >= 0) { *e = first; return -1; }
    return 0;
}

static int cmd_encode_(int argc, char **argv) {
    ArgList inputs = {0};
    const char *model = NULL, *output = NULL, *jsonl_key = NULL;
    long frame_tokens = SHARD_FRAME_TOKENS_DEFAULT, level = 3, threads = 0, batch_bytes = 8 << 20;
    int no_eos = 0, help = 0, quiet = 0;
    ArgSpec specs[] = {
        {"--model", ARG_STR, &model, "FILE", "SentencePiece .model (required)", 0, 0},
        {"--input", ARG_LIST, &inputs, "FILE", "text or jsonl, plain or .zst (repeatable, in order)", 0, 0},
        {"--output", ARG_STR, &output, "FILE", "the shard to write (required; written atomically)", 0, 0},
        {"--jsonl-key", ARG_STR, &jsonl_key, "KEY", "read this field of each JSON line (default text for .jsonl)", 0, 0},
        {"--no-eos", ARG_FLAG, &no_eos, NULL, "do not append EOS after each line/record", 0, 0},
        {"--frame-tokens", ARG_INT, &frame_tokens, "N", "tokens per zstd frame (default 32768)", 64, 1 << 24},
        {"--level", ARG_INT, &level, "N", "zstd level (default 3)", 1, 19},
        {"--threads", ARG_INT, &threads, "N", "encoding threads (default: OMP_NUM_THREADS or all cores)", 0, 1024},
        {"--quiet", ARG_FLAG, &quiet, NULL, "no progress line", 0, 0},
        {"--help", ARG_FLAG, &help, NULL, "show this help", 0, 0},
    };
    int ns = sizeof specs / sizeof specs[0];
    Err e = {{0}};
    if (args_parse(argc, argv, 2, specs, ns, NULL, &e) != 0) err_die(PROG, &e);
    if (help) {
        printf("usage: seqtok encode --model M.model --input FILE [--input FILE ...] --output X.shard [options]\n\n"
               "Every line of a text file (every record of a jsonl file) is one document: its tokens are\n"
               "followed by the model's EOS id, so decode writes it back as that line plus a newline.\n\n");
        args_usage(stdout, specs, ns);
        return 0;
    }
    if (!model) { err_set(&e, "encode: --model is required"); err_die(PROG, &e); }
    if (inputs.n == 0) { err_set(&e, "encode: --input is required"); err_die(PROG, &e); }
    if (!output) { err_set(&e, "encode: --output is required"); err_die(PROG, &e); }
    for (int i = 0; i < inputs.n; i++)
        if (files_same(inputs.v[i], output) || files_same(model, output)) {
            err_set(&e, "encode: --output %s is also an input (%s); writing it would destroy the input", output,
                    files_same(model, output) ? model : inputs.v[i]);
            err_die(PROG, &e);
        }
#ifdef _OPENMP
    if (threads > 0) omp_set_num_threads((int)threads);
#endif
    Tokenizer *tok = tokenizer_load(model, &e);
    if (!tok) err_die(PROG, &e);
    int eos = tokenizer_eos_id(tok);
    if (!no_eos && eos < 0) {
        err_set(&e, "encode: %s has no EOS piece; retrain it with seqtok train or pass --no-eos", model);
        err_die(PROG, &e);
    }
    ShardWriter w;
    if (shard_writer_open(&w, output, (uint32_t)tokenizer_vocab_size(tok), 0, tokenizer_sha256(tok),
                          (uint32_t)frame_tokens, (int)level, &e) != 0)
        err_die(PROG, &e);
    snprintf(interrupted_msg_, sizeof interrupted_msg_, "%s: error: encode: interrupted; %s not written\n", PROG, output);
    snprintf(interrupted_tmp_, sizeof interrupted_tmp_, "%s", w.af.tmp);
    interrupted_len_ = strlen(interrupted_msg_);
    signal(SIGINT, on_signal_);
    signal(SIGTERM, on_signal_);
    InputFiles in = {.paths = &inputs, .jsonl_key = jsonl_key};
    EncodeBatch b = {0};
    uint32_t eos_id = (uint32_t)eos;
    uint64_t docs = 0;
    double t0 = time_now_s(), last = t0;
    // a terminal gets a line redrawn twice a second; a log file gets a new line every 10 seconds
    int tty = isatty(2), progress = !quiet, shown = 0;
    double every = tty ? 0.5 : 10.0;
    int rc = 0, done = 0;
    while (!done && rc == 0) {
        b.n = 0;
        b.text_len = 0;
        while (b.text_len < (size_t)batch_bytes) {
            const char *s;
            size_t len;
            int r = input_next_(&in, &s, &len, &e);
            if (r < 0) { rc = -1; break; }
            if (r == 0) { done = 1; break; }
            batch_push_(&b, s, len);
        }
        if (rc == 0 && b.n > 0) rc = batch_encode_(&b, tok, &e);
        for (int i = 0; rc == 0 && i < b.n; i++) {
            rc = shard_writer_append(&w, b.ids[i], b.n_ids[i], &e);
            if (rc == 0 && !no_eos) rc = shard_writer_append(&w, &eos_id, 1, &e);
            docs++;
        }
        double t = time_now_s();
        if (progress && rc == 0 && t - last > every) {
            last = t;
            shown = 1;
            const char *cur = in.idx < inputs.n ? inputs.v[in.idx] : inputs.v[inputs.n - 1];
            double frac = in.open && in.r.file_size ? (double)in.r.file_pos / in.r.file_size : 1.0;
            fprintf(stderr, "%s  %s %5.1f%%  %llu docs  %llu tokens  %.0f tokens/s   %s", tty ? "\r" : "", cur, 100 * frac,
                    (unsigned long long)docs, (unsigned long long)w.n_tokens, w.n_tokens / (t - t0), tty ? "" : "\n");
        }
    }
    if (tty && shown) fprintf(stderr, "\n");
    if (in.open) text_close(&in.r);
    batch_free_(&b);
    uint64_t n_tokens = w.n_tokens;
    // the shard is whole from here on: a signal during the rename must not remove it and call it unwritten
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    if (rc == 0) rc = shard_writer_close(&w, &e);
    else shard_writer_abort(&w);
    tokenizer_free(tok);
    if (rc != 0) err_die(PROG, &e);
    double dt = time_now_s() - t0;
    printf("wrote %s: %llu documents, %llu tokens in %.2f s (%.0f tokens/s)\n", output, (unsigned long long)docs,
           (unsigned long long)n_tokens, dt, n_tokens / (dt > 0 ? dt : 1e-9));
    return 0;
}

// ----------------------------------------------------------------------------
// decode and info share the way a shard is opened from the command line

typedef struct ShardArgs {
    const char *format;
    long vocab;
} ShardArgs;

static void shard_open_cli_(Shard *s, const char *path, const ShardArgs *a) {
    Err e = {{0}};
    ShardFormat f;
    if (shard_format_parse(a->format, &f) != 0) {
        err_set(&e, "--format '%s' is not one of auto, seqtok, llmc, raw_u16, raw_u32", a->format);
        err_die(PROG, &e);
    }
    if (shard_open(s, path, f, (uint32_t)a->vocab, 64u << 20, &e) != 0) err_die(PROG, &e);
}

static int cmd_decode_(int argc, char **argv) {
    const char *model = NULL, *input = NULL, *output = NULL, *ids_arg = NULL;
    long start = 0, count = -1;
    int help = 0, force = 0;
    ShardArgs sa = {"auto", 0};
    ArgSpec specs[] = {
        {"--model", ARG_STR, &model, "FILE", "SentencePiece .model (required)", 0, 0},
        {"--input", ARG_STR, &input, "FILE", "shard to decode", 0, 0},
        {"--ids", ARG_STR, &ids_arg, "1,2,3", "decode these ids instead of a shard", 0, 0},
        {"--start", ARG_INT, &start, "N", "first token (default 0)", 0, 1e18},
        {"--count", ARG_INT, &count, "N", "tokens to decode (default: to the end)", 0, 1e18},
        {"--output", ARG_STR, &output, "FILE", "write here instead of stdout", 0, 0},
        {"--format", ARG_STR, &sa.format, "FMT", "auto | seqtok | llmc | raw_u16 | raw_u32 (default auto)", 0, 0},
        {"--vocab", ARG_INT, &sa.vocab, "N", "vocab size (required for raw formats)", 0, 1 << 30},
        {"--force", ARG_FLAG, &force, NULL, "decode even if the shard names another tokenizer", 0, 0},
        {"--help", ARG_FLAG, &help, NULL, "show this help", 0, 0},
    };
    int ns = sizeof specs / sizeof specs[0];
    Err e = {{0}};
    if (args_parse(argc, argv, 2, specs, ns, NULL, &e) != 0) err_die(PROG, &e);
    if (help) {
        printf("usage: seqtok decode --model M.model (--input X.shard | --ids 1,2,3) [options]\n\n"
               "EOS ids are written as newlines, so decoding a whole shard made by `seqtok encode` gives\n"
               "back the input text.\n\n");
        args_usage(stdout, specs, ns);
        return 0;
    }
    if (!model) { err_set(&e, "decode: --model is required"); err_die(PROG, &e); }
    if (!input == !ids_arg) { err_set(&e, "decode: give exactly one of --input or --ids"); err_die(PROG, &e); }
    Tokenizer *tok = tokenizer_load(model, &e);
    if (!tok) err_die(PROG, &e);
    uint32_t *ids = NULL;
    uint64_t n = 0;
    Shard s = {0};
    if (ids_arg) {
        long tmp[ARGS_LIST_MAX * 64];
        int k = args_int_list(ids_arg, tmp, (int)(sizeof tmp / sizeof tmp[0]), 0, 0x7fffffff, "--ids", &e);
        if (k < 0) err_die(PROG, &e);
        ids = xmalloc((size_t)k * sizeof(uint32_t));
        for (int i = 0; i < k; i++) ids[i] = (uint32_t)tmp[i];
        n = (uint64_t)k;
    } else {
        shard_open_cli_(&s, input, &sa);
        if (s.has_tokenizer_hash && memcmp(s.tokenizer_sha256, tokenizer_sha256(tok), 32) && !force) {
            char a[65], b[65];
            sha256_hex(s.tokenizer_sha256, a);
            sha256_hex(tokenizer_sha256(tok), b);
            err_set(&e, "decode: %s was encoded with tokenizer sha256 %.16s..., but %s is %.16s... (use the "
                    "matching model, or --force)", input, a, model, b);
            err_die(PROG, &e);
        }
        if ((uint64_t)start > s.n_tokens) {
            err_set(&e, "decode: --start %ld is past the end of %s (%llu tokens)", start, input,
                    (unsigned long long)s.n_tokens);
            err_die(PROG, &e);
        }
        n = count < 0 ? s.n_tokens - (uint64_t)start : (uint64_t)count;
        if ((uint64_t)start + n > s.n_tokens) {
            err_set(&e, "decode: tokens %ld..%llu are past the end of %s (%llu tokens)", start,
                    (unsigned long long)(start + n), input, (unsigned long long)s.n_tokens);
            err_die(PROG, &e);
        }
    }
    FILE *out = stdout;
    if (output && ((input && files_same(input, output)) || files_same(model, output))) {
        err_set(&e, "decode: --output %s is also an input; writing it would destroy the input", output);
        err_die(PROG, &e);
    }
    if (output && !(out = fopen_output(output, 0, &e))) err_die(PROG, &e);
    // decode in chunks; a document (the ids between two EOS) may straddle chunks, so its ids are kept
    // until its EOS arrives, then decoded as one piece of text
    const uint64_t CHUNK = 1 << 20;
    uint32_t *chunk = ids ? ids : xmalloc(CHUNK * sizeof(uint32_t));
    uint32_t *doc = NULL;
    size_t doc_n = 0, doc_cap = 0;
    uint32_t eos = (uint32_t)tokenizer_eos_id(tok);
    for (uint64_t off = 0; off < n;) {
        uint64_t k = ids ? n : (n - off < CHUNK ? n - off : CHUNK);
        if (!ids && shard_read(&s, chunk, (uint64_t)start + off, k, &e) != 0) err_die(PROG, &e);
        for (uint64_t i = 0; i <= k; i++) {
            int end_doc = (i == k) ? (off + k == n) : (chunk[i] == eos);
            if (!end_doc) {
                if (i == k) break;
                if (doc_n == doc_cap) { doc_cap = doc_cap * 2 + 1024; doc = xrealloc(doc, doc_cap * sizeof(uint32_t)); }
                doc[doc_n++] = chunk[i];
                continue;
            }
            char *text;
            size_t len;
            if (tokenizer_decode(tok, doc, doc_n, &text, &len, &e) != 0) err_die(PROG, &e);
            fwrite(text, 1, len, out);
            if (i < k) fputc('\n', out);  // the EOS itself
            free(text);
            doc_n = 0;
        }
        off += k;
    }
    if (out != stdout && fclose_output(out, output, &e) != 0) err_die(PROG, &e);
    if (out == stdout && fflush(stdout) != 0) { err_set(&e, "decode: write error: %s", strerror(errno)); err_die(PROG, &e); }
    free(doc);
    free(chunk);
    if (!ids_arg) shard_close(&s);
    tokenizer_free(tok);
    return 0;
}

static int cmd_info_(int argc, char **argv) {
    ArgList files = {0};
    int help = 0, verify = 0;
    ShardArgs sa = {"auto", 0};
    ArgSpec specs[] = {
        {"--format", ARG_STR, &sa.format, "FMT", "auto | seqtok | llmc | raw_u16 | raw_u32 (default auto)", 0, 0},
        {"--vocab", ARG_INT, &sa.vocab, "N", "vocab size (required for raw formats)", 0, 1 << 30},
        {"--verify", ARG_FLAG, &verify, NULL, "decode every token: checks frames, ids and the recorded min/max", 0, 0},
        {"--help", ARG_FLAG, &help, NULL, "show this help", 0, 0},
    };
    int ns = sizeof specs / sizeof specs[0];
    Err e = {{0}};
    if (args_parse(argc, argv, 2, specs, ns, &files, &e) != 0) err_die(PROG, &e);
    if (help) {
        printf("usage: seqtok info [options] SHARD [SHARD ...]\n\n"
               "min/max id come from the header of seqtok shards and from a full scan otherwise.\n\n");
        args_usage(stdout, specs, ns);
        return 0;
    }
    if (files.n == 0) { err_set(&e, "info: give at least one shard file"); err_die(PROG, &e); }
    for (int f = 0; f < files.n; f++) {
        Shard s;
        shard_open_cli_(&s, files.v[f], &sa);
        uint32_t lo = s.min_id, hi = s.max_id;
        int have = s.has_minmax;
        if (verify || !s.has_minmax) {
            if (shard_scan(&s, &lo, &hi, &e) != 0) err_die(PROG, &e);
            have = s.n_tokens > 0;
        }
        char hex[65] = "none";
        if (s.has_tokenizer_hash) sha256_hex(s.tokenizer_sha256, hex);
        printf("%s\n", s.path);
        printf("  format          %s\n", shard_format_name(s.format));
        printf("  tokens          %llu\n", (unsigned long long)s.n_tokens);
        printf("  vocab size      %u\n", s.vocab_size);
        printf("  token width     %d bytes\n", s.token_bytes);
        if (s.format == SHARD_SEQTOK)
            printf("  frames          %llu x %u tokens\n", (unsigned long long)s.n_frames, s.frame_tokens);
        printf("  file size       %llu bytes (%.3f bytes/token)\n", (unsigned long long)s.file_size,
               s.n_tokens ? (double)s.file_size / s.n_tokens : 0.0);
        printf("  tokenizer       %s\n", hex);
        if (have) printf("  ids             %u .. %u\n", lo, hi);
        else printf("  ids             (empty)\n");
        if (verify) printf("  verified        all %llu tokens decode and are < %u\n", (unsigned long long)s.n_tokens,
                           s.vocab_size);
        shard_close(&s);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage_(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "train")) return cmd_train_(argc, argv);
    if (!strcmp(cmd, "encode")) return cmd_encode_(argc, argv);
    if (!strcmp(cmd, "decode")) return cmd_decode_(argc, argv);
    if (!strcmp(cmd, "info")) return cmd_info_(argc, argv);
    Err e;
    err_set(&e, "unknown command '%s' (commands: train, encode, decode, info; see seqtok --help)", cmd);
    err_die(PROG, &e);
}
