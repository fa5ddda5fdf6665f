/*
 * Zero-shot evaluation (src/eval/zeroshot.c, src/data/evalsets.c) against an outside reference, and its
 * tokenisation edge cases.
 *
 * tests/data/zeroshot/ holds a tiny checkpoint (d_model 16, 2 attention layers, context 64, 150 steps of
 * WikiText-2 with the bundled tokenizer) and ref.tsv, written by scripts/zeroshot_reference.py: the first 50
 * items of every task scored by PyTorch in float64, each request on its own, with its own prompt formats
 * and Python SentencePiece. For every choice this test forms the same request in C and checks
 *   - the token counts and the hash of the ids: exactly equal (the prompt formats, the context/continuation
 *     split and the left truncation agree token for token);
 *   - the continuation's log-likelihood: |c - ref| <= 1e-4 |ref|. The C side is float32: each log-softmax
 *     over 8192 logits and the few-token sum carry ~1e-6 relative rounding (the largest seen when the dump
 *     was made is printed), so 1e-4 leaves ~100x headroom while a wrong token, position or mask moves a
 *     log-likelihood by whole units;
 *   - greedy (LAMBADA's criterion) equal.
 * Then zeroshot_run (several items batched per forward, padded) must give the accuracies that the
 * reference's log-likelihoods imply, and LAMBADA's perplexity at 1e-4.
 *
 * Usage: test_zeroshot   (run from the repository root: it reads tests/data/zeroshot, data/eval, data/tokenizer)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cli/zeroshot_cmd.h"
#include "data/evalsets.h"
#include "data/tokenizer.h"
#include "test.h"
#include "run/run_config.h"
#include "ckpt/safetensors.h"
#include "eval/zeroshot.h"

#define CASE_DIR "tests/data/zeroshot"
#define TOKENIZER "data/tokenizer/wikitext2_bpe8192.model"
#define EVAL_DIR "data/eval"
#define LL_RTOL 1e-4
#define PAD_RTOL 1e-6   // the same request alone and padded in a batch: only summation order may differ

typedef struct RefRow {
    char task[32];
    int item, choice, n_ctx, n_cont, n_scored, greedy;
    unsigned long long hash;
    double ll;
} RefRow;

static RefRow *read_ref_(const char *path, int *n) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char line[512];
    int cap = 0;
    RefRow *rows = NULL;
    *n = 0;
    while (fgets(line, sizeof line, f)) {
        RefRow r;
        if (line[0] == '#' || !strncmp(line, "task\t", 5)) continue;
        if (sscanf(line, "%31s %d %d %d %d %d %llx %lf %d", r.task, &r.item, &r.choice, &r.n_ctx, &r.n_cont,
                   &r.n_scored, &r.hash, &r.ll, &r.greedy) != 9)
            continue;
        if (*n == cap) rows = realloc(rows, (size_t)(cap = cap ? 2 * cap : 1024) * sizeof(RefRow));
        rows[(*n)++] = r;
    }
    fclose(f);
    return rows;
}

// the committed checkpoint; vocab > 0 builds the same network with another vocabulary, untrained
static int load_model_(Model *m, RunConfig *c, int vocab) {
    Err e = {{0}};
    memset(c, 0, sizeof *c);
    if (run_config_load(c, CASE_DIR "/config.json", NULL, 0, NULL, &e) != 0) {
        printf("# %s\n", e.msg);
        return -1;
    }
    int V = vocab;
    if (!V) {
        SafeTensorsFile f;
        if (safetensors_open(&f, CASE_DIR "/model.safetensors", &e) != 0) return -1;
        const SafeTensorInfo *wte = safetensors_find(&f, "wte");
        V = wte ? (int)wte->shape[0] : 0;
        safetensors_close(&f);
    }
    if (model_build(m, &c->model, V, NULL, 1, &e) != 0) return -1;
    if (!vocab && safetensors_read_table(CASE_DIR "/model.safetensors", &m->pt, m->params, &e) != 0) return -1;
    return 0;
}

// ----------------------------------------------------------------------------------------------------
// the reference

static void check_reference_(Model *m, const Tokenizer *tok, int T) {
    Forward f;  // the host model (the GPU's scoring runs through the same loops: tests/gpu/run.sh)
    forward_init(&f, m, NULL);
    int nr = 0;
    RefRow *ref = read_ref_(CASE_DIR "/ref.tsv", &nr);
    CHECK(ref && nr > 1000, "read %s: %d rows", CASE_DIR "/ref.tsv", nr);
    if (!ref) return;
    int k = 0;
    double worst_all = 0;
    while (k < nr) {
        const EvalTask *t = evalset_find(ref[k].task);
        CHECK(t != NULL, "reference task '%s' exists", ref[k].task);
        if (!t) return;
        int last_item = -1, k0 = k;
        for (int j = k; j < nr && !strcmp(ref[j].task, t->name); j++) last_item = ref[j].item;
        EvalSet s;
        Err e = {{0}};
        int rc = evalset_load(&s, t, EVAL_DIR, last_item + 1, &e);
        CHECK(rc == 0 && s.n == last_item + 1, "%s: load %d items: %.200s", t->name, last_item + 1, e.msg);
        if (rc != 0) return;
        int bad_ids = 0, bad_ll = 0, bad_greedy = 0, rows = 0, failed = 0;
        double worst = 0;
        // accuracies the reference's log-likelihoods imply, and its LAMBADA log-likelihood sum
        double acc = 0, acc_n = 0, ll_sum = 0;
        for (long i = 0; i < s.n; i++) {
            const EvalItem *it = &s.items[i];
            ZeroshotTokens z[EVAL_CHOICES_MAX];
            double ll[EVAL_CHOICES_MAX], rll[EVAL_CHOICES_MAX];
            int greedy[EVAL_CHOICES_MAX];
            int nc = it->n_choices;
            for (int c = 0; c < nc; c++) {
                if (zeroshot_tokens(&z[c], tok, it->ctx[c], it->cont[c], T, &e) != 0 && failed++ < 3)
                    printf("# %s item %ld: %.200s\n", t->name, i, e.msg);
                const RefRow *r = k < nr ? &ref[k] : NULL;
                if (!r || r->item != i || r->choice != c) { bad_ids++; continue; }
                k++;
                rows++;
                if (z[c].n_ctx != r->n_ctx || z[c].n_cont != r->n_cont || z[c].n_scored != r->n_scored ||
                    zeroshot_ids_hash(z[c].ids, z[c].n) != r->hash) {
                    if (bad_ids++ < 3)
                        printf("# %s item %ld choice %d: C n_ctx %d n_cont %d n_scored %d, ref %d %d %d%s\n", t->name,
                               i, c, z[c].n_ctx, z[c].n_cont, z[c].n_scored, r->n_ctx, r->n_cont, r->n_scored,
                               zeroshot_ids_hash(z[c].ids, z[c].n) != r->hash ? ", ids differ" : "");
                }
                rll[c] = r->ll;
            }
            if (zeroshot_score(&f, z, nc, ll, greedy, &e) != 0 && failed++ < 3) printf("# score: %.200s\n", e.msg);
            int best = 0, best_n = 0;
            for (int c = 0; c < nc; c++) {
                const RefRow *r = &ref[k - nc + c];
                double rel = fabs(ll[c] - rll[c]) / fabs(rll[c]);
                if (rel > worst) worst = rel;
                if (!(rel <= LL_RTOL)) bad_ll++;
                bad_greedy += greedy[c] != r->greedy;
                if (rll[c] > rll[best]) best = c;
                if (rll[c] / (double)it->norm_bytes[c] > rll[best_n] / (double)it->norm_bytes[best_n]) best_n = c;
                zeroshot_tokens_free(&z[c]);
            }
            if (t->cloze) {
                acc += ref[k - 1].greedy;
                ll_sum += rll[0];
            } else {
                acc += best == it->gold;
                acc_n += best_n == it->gold;
            }
        }
        if (worst > worst_all) worst_all = worst;
        CHECK(failed == 0, "%s: every request tokenised and scored", t->name);
        CHECK(bad_ids == 0 && rows == k - k0, "%s: %d requests' tokens equal the reference's (%d differ)", t->name,
              rows, bad_ids);
        CHECK(bad_ll == 0, "%s: log-likelihoods within %g relative (worst %.2e, %d over)", t->name, LL_RTOL, worst,
              bad_ll);
        CHECK(bad_greedy == 0, "%s: greedy flags equal (%d differ)", t->name, bad_greedy);
        // the batched run: several items per forward, padded rows
        ZeroshotOpts o = {0, T, 0};
        ZeroshotResult r;
        CHECK(zeroshot_run(&f, tok, &s, &o, &r, &e) == 0, "%s: zeroshot_run: %.200s", t->name, e.msg);
        CHECK_NEAR(r.acc, acc / s.n, 1e-12, 0, "%s: batched acc = the reference's", t->name);
        if (t->cloze) {
            CHECK_NEAR(r.ppl, exp(-ll_sum / s.n), 0, LL_RTOL, "%s: perplexity = the reference's", t->name);
        } else {
            CHECK_NEAR(r.acc_norm, acc_n / s.n, 1e-12, 0, "%s: batched acc_norm = the reference's", t->name);
            CHECK_NEAR(r.acc_se, sqrt(r.acc * (1 - r.acc) / (s.n - 1)), 1e-12, 0,
                       "%s: standard error = sample std / sqrt(n)", t->name);
        }
        evalset_free(&s);
    }
    printf("# worst relative log-likelihood difference over all tasks: %.2e\n", worst_all);
    free(ref);
}

// ----------------------------------------------------------------------------------------------------
// tokenisation edge cases

static int ids_equal_(const uint32_t *a, const uint32_t *b, int n) { return !memcmp(a, b, (size_t)n * sizeof *a); }

static void check_tokens_(const Tokenizer *tok) {
    Err e = {{0}};
    ZeroshotTokens z, z2;
    uint32_t *whole = NULL;
    size_t n = 0, cap = 0;

    // a leading space belongs to the continuation: its ids are those of the word inside the whole text
    const char *text = "The cat sat on the mat";
    tokenizer_encode(tok, text, strlen(text), &whole, &n, &cap, &e);
    CHECK(zeroshot_tokens(&z, tok, "The cat sat on the", " mat", 64, &e) == 0, "leading space: %.200s", e.msg);
    CHECK(z.n == (int)n && ids_equal_(z.ids, whole, z.n), "context + \" mat\" = the ids of the whole text (%d vs %zu)",
          z.n, n);
    CHECK(z.n_cont >= 1 && z.n_scored == z.n_cont && !z.truncated, "the continuation is scored whole (%d tokens)",
          z.n_cont);
    char *dec = NULL;
    size_t dl = 0;
    tokenizer_decode(tok, z.ids, (size_t)z.n_ctx, &dec, &dl, &e);
    CHECK_STR(dec, "The cat sat on the", "the context's tokens end before the space");
    free(dec);
    // a trailing space on the context moves to the continuation: the same request
    CHECK(zeroshot_tokens(&z2, tok, "The cat sat on the ", "mat", 64, &e) == 0, "trailing space: %.200s", e.msg);
    CHECK(z2.n == z.n && z2.n_ctx == z.n_ctx && ids_equal_(z2.ids, z.ids, z.n),
          "\"... the \" + \"mat\" is tokenised as \"... the\" + \" mat\"");
    zeroshot_tokens_free(&z2);
    zeroshot_tokens_free(&z);

    // an empty (or blank) context: EOS, then the continuation encoded as a text start
    n = 0;
    tokenizer_encode(tok, "Hello world", 11, &whole, &n, &cap, &e);
    CHECK(zeroshot_tokens(&z, tok, "", "Hello world", 64, &e) == 0, "empty context: %.200s", e.msg);
    CHECK(z.n_ctx == 1 && z.ids[0] == (uint32_t)tokenizer_eos_id(tok), "empty context = the EOS token (id %d)",
          tokenizer_eos_id(tok));
    CHECK(z.n == 1 + (int)n && ids_equal_(z.ids + 1, whole, (int)n) && z.n_scored == (int)n,
          "then every token of the continuation, scored");
    zeroshot_tokens_free(&z);
    CHECK(zeroshot_tokens(&z, tok, "  ", "Hello", 64, &e) == 0 && z.ids[0] == (uint32_t)tokenizer_eos_id(tok),
          "a blank context is empty too");
    zeroshot_tokens_free(&z);
    CHECK(zeroshot_tokens(&z, tok, "context", "", 64, &e) != 0, "an empty continuation is refused");
    CHECK_CONTAINS(e.msg, "nothing to score", "... saying so");

    // longer than the window: the oldest context tokens go, the continuation stays whole
    const char *lctx = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen";
    ZeroshotTokens full;
    CHECK(zeroshot_tokens(&full, tok, lctx, " fifteen sixteen", 1000, &e) == 0, "long context: %.200s", e.msg);
    CHECK(zeroshot_tokens(&z, tok, lctx, " fifteen sixteen", 8, &e) == 0, "long context, window 8: %.200s", e.msg);
    CHECK(z.truncated && z.n == 9 && ids_equal_(z.ids, full.ids + full.n - 9, 9),
          "a %d-token request keeps its last 9 tokens in a window of 8", full.n);
    CHECK(z.n_scored == full.n_cont && z.n_cont == full.n_cont, "the %d continuation tokens are all scored",
          full.n_cont);
    zeroshot_tokens_free(&z);
    zeroshot_tokens_free(&full);
    // a choice longer than the window: the window is all continuation, its last 8 tokens scored
    const char *lcont = " one two three four five six seven eight nine ten eleven twelve";
    CHECK(zeroshot_tokens(&full, tok, "Count:", lcont, 1000, &e) == 0, "long choice: %.200s", e.msg);
    CHECK(zeroshot_tokens(&z, tok, "Count:", lcont, 8, &e) == 0, "long choice, window 8: %.200s", e.msg);
    CHECK(full.n_cont > 9, "the choice has %d tokens, more than the window + 1", full.n_cont);
    CHECK(z.n == 9 && z.n_scored == 8 && ids_equal_(z.ids, full.ids + full.n - 9, 9),
          "its last 9 tokens kept, the last 8 scored (each after the one before)");
    zeroshot_tokens_free(&z);
    zeroshot_tokens_free(&full);
    free(whole);
}

// padding rows to the longest one in a batch changes nothing (causal masking)
static void check_padding_(Model *m, const Tokenizer *tok) {
    Err e = {{0}};
    Forward f;
    forward_init(&f, m, NULL);
    ZeroshotTokens z[2];
    zeroshot_tokens(&z[0], tok, "A short one", " here", 64, &e);
    zeroshot_tokens(&z[1], tok, "A much longer context, with many more words in it than the first has", " there", 64,
                    &e);
    double alone, both[2];
    zeroshot_score(&f, z, 1, &alone, NULL, &e);
    zeroshot_score(&f, z, 2, both, NULL, &e);
    CHECK_NEAR(both[0], alone, 0, PAD_RTOL, "a request padded in a batch scores as alone");
    zeroshot_tokens_free(&z[0]);
    zeroshot_tokens_free(&z[1]);
}

// ----------------------------------------------------------------------------------------------------
// sets and bad input

static void check_sets_(void) {
    const EvalTask *t[EVAL_TASKS_MAX];
    Err e = {{0}};
    CHECK(evalset_parse_list("all", t, EVAL_TASKS_MAX, &e) == 11, "all = 11 tasks");
    CHECK(evalset_parse_list("paper", t, EVAL_TASKS_MAX, &e) == 8 && !strcmp(t[0]->name, "lambada") &&
              !strcmp(t[7]->name, "boolq"), "paper = Table 4's eight, in its order");
    CHECK(evalset_parse_list("piqa,boolq,piqa", t, EVAL_TASKS_MAX, &e) == 2, "a repeated task counts once");
    CHECK(evalset_parse_list("lambda", t, EVAL_TASKS_MAX, &e) < 0, "unknown task refused");
    CHECK_CONTAINS(e.msg, "did you mean 'lambada'", "... with a did-you-mean");
    CHECK(evalset_parse_list("piqa,,boolq", t, EVAL_TASKS_MAX, &e) < 0, "an empty name is refused");
    CHECK(evalset_parse_list("zzzzzzzz", t, EVAL_TASKS_MAX, &e) < 0 && strstr(e.msg, "tasks: lambada"),
          "a far miss lists the tasks");
    // items in each file (data/eval/README.md)
    static const struct { const char *name; long n; int choices; } want[] = {
        {"lambada", 5153, 1}, {"hellaswag", 10042, 4}, {"piqa", 1838, 2}, {"arc_easy", 2376, 4},
        {"arc_challenge", 1172, 4}, {"winogrande", 1267, 2}, {"openbookqa", 500, 4}, {"boolq", 3270, 2},
        {"copa", 100, 2}, {"siqa", 1954, 2}, {"winograd_wsc", 273, 2}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        EvalSet s;
        int rc = evalset_load(&s, evalset_find(want[i].name), EVAL_DIR, 3, &e);
        CHECK(rc == 0 && s.n == 3 && s.n_file == want[i].n && s.items[0].n_choices == want[i].choices,
              "%s: %ld items in the file (want %ld), %d choices", want[i].name, rc == 0 ? s.n_file : -1L, want[i].n,
              rc == 0 ? s.items[0].n_choices : -1);
        if (rc == 0) evalset_free(&s);
    }
    // the prompt formats of a few first items (docs/zeroshot.md)
    EvalSet s;
    if (evalset_load(&s, evalset_find("copa"), EVAL_DIR, 1, &e) == 0) {
        CHECK_STR(s.items[0].ctx[0], "The man turned on the faucet therefore", "copa: premise + \" therefore\"");
        CHECK_STR(s.items[0].cont[1], " water flowed from the spout.", "copa: \" \" + choice");
        evalset_free(&s);
    }
    if (evalset_load(&s, evalset_find("arc_easy"), EVAL_DIR, 1, &e) == 0) {
        CHECK_CONTAINS(s.items[0].ctx[0], "?\nAnswer:", "arc: \"Question: ...?\\nAnswer:\"");
        CHECK(s.items[0].norm_bytes[0] == strlen(s.items[0].cont[0]) - 1, "acc_norm counts the choice without its space");
        evalset_free(&s);
    }
    if (evalset_load(&s, evalset_find("boolq"), EVAL_DIR, 1, &e) == 0) {
        CHECK(strncmp(s.items[0].ctx[0], "Passage: ", 9) && strstr(s.items[0].ctx[0], "\nQuestion: ") &&
                  strstr(s.items[0].ctx[0], "?\nAnswer:"), "boolq: \"passage\\nQuestion: ...?\\nAnswer:\"");
        CHECK_STR(s.items[0].cont[0], " no", "boolq: \" no\" / \" yes\"");
        evalset_free(&s);
    }
    if (evalset_load(&s, evalset_find("siqa"), EVAL_DIR, 1, &e) == 0) {
        CHECK_STR(s.items[0].ctx[0], "Q: Tracy didn't go home that evening and resisted Riley's attacks. What does Tracy "
                  "need to do before this?\nA:", "siqa: \"Q: context question\\nA:\"");
        CHECK_STR(s.items[0].cont[1], " Find somewhere to go", "siqa: the answer text, not its letter");
        evalset_free(&s);
    }
    CHECK(evalset_load(&s, evalset_find("piqa"), "no/such/dir", 0, &e) != 0, "a missing set is refused");
    CHECK_CONTAINS(e.msg, "--eval-data", "... naming the option that finds the sets");
}

// a model whose vocabulary is not the tokenizer's is refused before anything is scored
static void check_vocab_mismatch_(void) {
    Model m;
    RunConfig c;
    memset(&m, 0, sizeof m);
    if (load_model_(&m, &c, 64) != 0) { CHECK(0, "build a 64-token model"); return; }
    ZeroshotCmd z = {"runs/none", "piqa", 2, EVAL_DIR, TOKENIZER, "/nonexistent/out"};
    Err e = {{0}};
    Forward f;
    forward_init(&f, &m, NULL);
    CHECK(zeroshot_cmd_run(&f, &c, &z, &e) != 0, "vocab 64 vs the 8192-piece tokenizer refused");
    CHECK_CONTAINS(e.msg, "not trained with this tokenizer", "... saying why: %.200s", e.msg);
    model_free(&m);
    run_config_free(&c);
}

int main(void) {
#ifdef _OPENMP
    omp_set_num_threads(2);
#endif
    Err e = {{0}};
    Tokenizer *tok = tokenizer_load(TOKENIZER, &e);
    CHECK(tok != NULL, "load %s: %.200s", TOKENIZER, e.msg);
    if (!tok) return test_summary();
    Model m;
    RunConfig c;
    memset(&m, 0, sizeof m);
    int ok = load_model_(&m, &c, 0) == 0;
    CHECK(ok, "load the committed checkpoint %s", CASE_DIR);
    check_sets_();
    check_tokens_(tok);
    if (ok) {
        check_padding_(&m, tok);
        check_reference_(&m, tok, c.train.seq_len);
        model_free(&m);
        run_config_free(&c);
    }
    check_vocab_mismatch_();
    tokenizer_free(tok);
    return test_summary();
}
