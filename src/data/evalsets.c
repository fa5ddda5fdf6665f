#include "data/evalsets.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/config.h"
#include "core/files.h"
#include "data/text.h"

// A set is held in memory whole: its lines and its decoded size are bounded far above the bundled sets' (the
// longest line 4.9 KB, the largest set 7.8 MB decoded), so a small .zst that expands to gigabytes is refused
#define EVAL_LINE_MAX ((size_t)1 << 20)
#define EVAL_TEXT_MAX ((uint64_t)256 << 20)

// how the packaged fields of each file become the harness's prompt (docs/zeroshot.md)
enum {
    FMT_LAMBADA,    // {"context","continuation"}: context, " " + last word
    FMT_HELLASWAG,  // 6 text lines: context, gold, 4 endings; context, " " + ending (harness preprocess applied)
    FMT_PIQA,       // query "Question: goal\n" -> "Question: goal\nAnswer:", " " + solution
    FMT_ARC,        // query "Question: q" -> "Question: q\nAnswer:", " " + choice
    FMT_OBQA,       // query = question stem, " " + choice
    FMT_BOOLQ,      // "Passage: p\nQuestion: q?" -> "p\nQuestion: q?\nAnswer:", " no" / " yes"
    FMT_COPA,       // "premise, because" -> "premise because", " " + choice (harness: premise[:-1] + " because")
    FMT_SIQA,       // letter-choice query -> "Q: context question\nA:", " " + answer text
    FMT_PARTIAL,    // {"context_options","continuation"}: option i as context, " " + continuation after each
};

static const EvalTask TASKS_[] = {
    {"lambada", "lambada_openai.jsonl.zst", "LAMB.", FMT_LAMBADA, 1, 0, 1},
    {"hellaswag", "hellaswag_val.txt.zst", "HellaS.", FMT_HELLASWAG, 0, 1, 1},
    {"piqa", "piqa.jsonl.zst", "PIQA", FMT_PIQA, 0, 0, 1},
    {"arc_easy", "arc_easy.jsonl.zst", "Arc-E", FMT_ARC, 0, 0, 1},
    {"arc_challenge", "arc_challenge.jsonl.zst", "Arc-C", FMT_ARC, 0, 1, 1},
    {"winogrande", "winogrande.jsonl.zst", "WinoGr.", FMT_PARTIAL, 0, 0, 1},
    {"openbookqa", "openbook_qa.jsonl.zst", "OBQA", FMT_OBQA, 0, 0, 1},
    {"boolq", "boolq.jsonl.zst", "BoolQ", FMT_BOOLQ, 0, 0, 1},
    {"copa", "copa.jsonl.zst", "COPA", FMT_COPA, 0, 0, 0},
    {"siqa", "siqa.jsonl.zst", "SIQA", FMT_SIQA, 0, 0, 0},
    {"winograd_wsc", "winograd_wsc.jsonl.zst", "WSC273", FMT_PARTIAL, 0, 0, 0},
};
#define N_TASKS_ ((int)(sizeof TASKS_ / sizeof TASKS_[0]))

const EvalTask *evalset_tasks(int *n) {
    *n = N_TASKS_;
    return TASKS_;
}

const EvalTask *evalset_find(const char *name) {
    for (int i = 0; i < N_TASKS_; i++)
        if (!strcmp(TASKS_[i].name, name)) return &TASKS_[i];
    return NULL;
}

static int add_task_(const EvalTask *t, const EvalTask **out, int n, int max, Err *e) {
    for (int i = 0; i < n; i++)
        if (out[i] == t) return n;
    if (n >= max) return err_set(e, "--zeroshot: more than %d tasks", max);
    out[n] = t;
    return n + 1;
}

int evalset_parse_list(const char *s, const EvalTask **out, int max, Err *e) {
    int n = 0;
    char name[128];
    while (*s) {
        size_t len = strcspn(s, ",");
        if (len == 0 || len >= sizeof name)
            return err_set(e, "--zeroshot: '%s' is not a comma-separated list of task names", s);
        memcpy(name, s, len);
        name[len] = 0;
        s += len + (s[len] == ',');
        int all = !strcmp(name, "all"), paper = !strcmp(name, "paper");
        const EvalTask *t = evalset_find(name);
        if (all || paper) {
            for (int i = 0; i < N_TASKS_ && n >= 0; i++)
                if (all || TASKS_[i].in_paper) n = add_task_(&TASKS_[i], out, n, max, e);
        } else if (t) {
            n = add_task_(t, out, n, max, e);
        } else {
            const char *best = NULL;
            int best_d = 4;  // a suggestion only for a near miss
            char names[512] = "";
            for (int i = 0; i < N_TASKS_; i++) {
                int d = config_edit_distance(name, TASKS_[i].name);
                if (d < best_d) { best_d = d; best = TASKS_[i].name; }
                strncat(names, TASKS_[i].name, sizeof names - strlen(names) - 3);
                strcat(names, ", ");
            }
            if (best)
                return err_set(e, "--zeroshot: unknown task '%s' (did you mean '%s'?); tasks: %sall, paper", name,
                               best, names);
            return err_set(e, "--zeroshot: unknown task '%s'; tasks: %sall (every task), paper (the KLA paper's "
                           "Table 4 eight)", name, names);
        }
        if (n < 0) return -1;
    }
    if (n == 0) return err_set(e, "--zeroshot: no task named");
    // the tables follow the paper's column order whatever order the names came in
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && out[j] < out[j - 1]; j--) {
            const EvalTask *t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}

// ----------------------------------------------------------------------------------------------------
// prompt formats

static char *cat_(const char *a, size_t na, const char *b) {
    size_t nb = strlen(b);
    char *s = xmalloc(na + nb + 1);
    memcpy(s, a, na);
    memcpy(s + na, b, nb + 1);
    return s;
}

// a continuation: the delimiter space and the choice text, whose bytes acc_norm divides by
static void set_choice_(EvalItem *it, int i, const char *ctx, const char *choice) {
    it->ctx[i] = xstrdup(ctx);
    it->cont[i] = cat_(" ", 1, choice);
    it->norm_bytes[i] = strlen(choice);
}

// the harness's hellaswag preprocess: strip, " [title]" -> ". ", drop other [tags], "  " -> " "
static char *hellaswag_clean_(const char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) n--;
    char *o = xmalloc(2 * n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!strncmp(s + i, " [title]", 8) && i + 8 <= n) {
            memcpy(o + k, ". ", 2);
            k += 2;
            i += 7;
        } else if (s[i] == '[' && memchr(s + i, ']', n - i)) {
            i = (size_t)((const char *)memchr(s + i, ']', n - i) - s);
        } else if (s[i] == ' ' && k && o[k - 1] == ' ') {
            continue;
        } else {
            o[k++] = s[i];
        }
    }
    o[k] = 0;
    return o;
}

// SIQA as packaged: "Context: C\nQuestion: Q\nChoices:\nA. a\nB. b\nAnswer:" -> "Q: C Q\nA:" and a, b
static int siqa_item_(EvalItem *it, const char *q, int n_letters) {
    const char *c = strstr(q, "Context: "), *qu = strstr(q, "\nQuestion: "), *ch = strstr(q, "\nChoices:\n");
    if (!c || !qu || !ch || qu < c || ch < qu) return -1;
    c += 9;
    const char *qs = qu + 11;
    size_t nctx = (size_t)(qu - c), nq = (size_t)(ch - qs);
    char *ctx = xmalloc(nctx + nq + 8);
    snprintf(ctx, nctx + nq + 8, "Q: %.*s %.*s\nA:", (int)nctx, c, (int)nq, qs);
    const char *p = ch + 10;
    int rc = 0;
    for (int i = 0; i < n_letters && rc == 0; i++) {
        if (p[0] != 'A' + i || p[1] != '.' || p[2] != ' ') { rc = -1; break; }
        p += 3;
        size_t len = strcspn(p, "\n");
        char *ans = cat_(p, len, "");
        set_choice_(it, i, ctx, ans);
        free(ans);
        p += len + (p[len] == '\n');
    }
    free(ctx);
    return rc;
}

static const char *json_str_(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

// one jsonl line into an item; returns 0, or -1 with why set
static int json_item_(EvalItem *it, const EvalTask *t, const cJSON *o, const char **why) {
    const cJSON *gold = cJSON_GetObjectItemCaseSensitive(o, "gold");
    if (t->format == FMT_LAMBADA) {
        const char *ctx = json_str_(o, "context"), *cont = json_str_(o, "continuation");
        if (!ctx || !cont) { *why = "needs string fields \"context\" and \"continuation\""; return -1; }
        it->n_choices = 1;
        it->gold = 0;
        set_choice_(it, 0, ctx, cont);
        return 0;
    }
    // an integer: cJSON's valueint would read 0.7 as 0 (the first choice) without a word
    if (!cJSON_IsNumber(gold) || gold->valuedouble != floor(gold->valuedouble) || fabs(gold->valuedouble) > 1e9) {
        *why = "needs an integer field \"gold\" (the index of the right choice)";
        return -1;
    }
    it->gold = gold->valueint;
    if (t->format == FMT_PARTIAL) {
        const cJSON *opts = cJSON_GetObjectItemCaseSensitive(o, "context_options");
        const char *cont = json_str_(o, "continuation");
        int n = cJSON_GetArraySize(opts);
        if (!cJSON_IsArray(opts) || !cont || n < 2 || n > EVAL_CHOICES_MAX) {
            *why = "needs \"context_options\" (2 to 8 strings) and a string \"continuation\"";
            return -1;
        }
        it->n_choices = n;
        for (int i = 0; i < n; i++) {
            const cJSON *op = cJSON_GetArrayItem(opts, i);
            if (!cJSON_IsString(op)) { it->n_choices = i; *why = "a context option is not a string"; return -1; }
            set_choice_(it, i, op->valuestring, cont);
        }
        return 0;
    }
    const char *q = json_str_(o, "query");
    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(o, "choices");
    int n = cJSON_GetArraySize(ch);
    if (!q || !cJSON_IsArray(ch) || n < 2 || n > EVAL_CHOICES_MAX) {
        *why = "needs a string \"query\" and \"choices\" (2 to 8 strings)";
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (!cJSON_IsString(cJSON_GetArrayItem(ch, i))) { *why = "a choice is not a string"; return -1; }
    if (t->format == FMT_SIQA) {
        it->n_choices = n;
        if (siqa_item_(it, q, n) != 0) {
            *why = "a SIQA query is \"Context: ...\\nQuestion: ...\\nChoices:\\nA. ...\\nB. ...\\nAnswer:\"";
            return -1;
        }
        return 0;
    }
    size_t nq = strlen(q);
    char *ctx;
    if (t->format == FMT_PIQA) {
        ctx = nq && q[nq - 1] == '\n' ? cat_(q, nq, "Answer:") : cat_(q, nq, "\nAnswer:");
    } else if (t->format == FMT_ARC) {
        ctx = cat_(q, nq, "\nAnswer:");
    } else if (t->format == FMT_BOOLQ) {
        const char *p = strncmp(q, "Passage: ", 9) ? q : q + 9;
        ctx = cat_(p, strlen(p), "\nAnswer:");
    } else if (t->format == FMT_COPA) {
        // llm-foundry joins the premise and its connector with a comma, the harness with a space
        size_t k = nq;
        while (k && q[k - 1] != ' ') k--;
        ctx = xstrdup(q);
        if (k >= 2 && ctx[k - 2] == ',') memmove(ctx + k - 2, ctx + k - 1, nq - k + 2);
    } else {
        ctx = xstrdup(q);
    }
    it->n_choices = n;
    for (int i = 0; i < n; i++) set_choice_(it, i, ctx, cJSON_GetArrayItem(ch, i)->valuestring);
    free(ctx);
    return 0;
}

static void item_free_(EvalItem *it) {
    for (int i = 0; i < it->n_choices; i++) {
        free(it->ctx[i]);
        free(it->cont[i]);
    }
    memset(it, 0, sizeof *it);
}

static void push_(EvalSet *s, long *cap, const EvalItem *it) {
    if (s->n == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        s->items = xrealloc(s->items, (size_t)*cap * sizeof(EvalItem));
    }
    s->items[s->n++] = *it;
}

// HellaSwag as text, 6 lines an item: context, gold (0-3), four endings
static int load_hellaswag_(EvalSet *s, TextReader *r, long limit, Err *e) {
    long cap = 0;
    const char *line;
    size_t len;
    int got;
    EvalItem it;
    memset(&it, 0, sizeof it);
    char *ctx = NULL;
    int k = 0;
    while ((got = text_next(r, &line, &len, e)) == 1) {
        if (k == 0) {
            ctx = hellaswag_clean_(line);
        } else if (k == 1) {
            char *end;
            long g = strtol(line, &end, 10);
            if (end == line || *end || g < 0 || g > 3) {
                free(ctx);
                return err_set(e, "%s:%llu: expected the gold ending's index (0-3), got '%.40s' (HellaSwag text is 6 "
                               "lines an item)", r->path, (unsigned long long)r->line_no, line);
            }
            it.gold = (int)g;
        } else {
            char *end = hellaswag_clean_(line);
            set_choice_(&it, k - 2, ctx, end);
            free(end);
        }
        if (++k == 6) {
            it.n_choices = 4;
            s->n_file++;
            if (!limit || s->n < limit) push_(s, &cap, &it);
            else item_free_(&it);
            memset(&it, 0, sizeof it);
            free(ctx);
            ctx = NULL;
            k = 0;
        }
    }
    it.n_choices = k > 2 ? k - 2 : 0;
    item_free_(&it);
    free(ctx);
    if (got < 0) return -1;
    if (k) return err_set(e, "%s: ends inside an item (%d of its 6 lines)", r->path, k);
    return 0;
}

static int load_jsonl_(EvalSet *s, const EvalTask *t, TextReader *r, long limit, Err *e) {
    long cap = 0;
    const char *line;
    size_t len;
    int got;
    while ((got = text_next(r, &line, &len, e)) == 1) {
        if (len == 0) continue;
        s->n_file++;
        if (limit && s->n >= limit) continue;  // only counted: the table says how many the file holds
        cJSON *o = cJSON_ParseWithLength(line, len);
        EvalItem it;
        memset(&it, 0, sizeof it);
        const char *why = "is not a JSON object";
        int rc = cJSON_IsObject(o) ? json_item_(&it, t, o, &why) : -1;
        cJSON_Delete(o);
        if (rc == 0 && (it.gold < 0 || it.gold >= it.n_choices)) {
            why = "its \"gold\" is not the index of one of its choices";
            rc = -1;
        }
        if (rc != 0) {
            item_free_(&it);
            return err_set(e, "%s:%llu: %s (a %s item)", r->path, (unsigned long long)r->line_no, why, t->name);
        }
        push_(s, &cap, &it);
    }
    return got < 0 ? -1 : 0;
}

int evalset_load(EvalSet *s, const EvalTask *t, const char *dir, long limit, Err *e) {
    memset(s, 0, sizeof *s);
    s->task = t;
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, t->file);
    // a FIFO or a device would block the read or never end: refused before a byte is read
    unsigned mode = 0;
    int fd = open_regular(path, &mode);
    if (fd >= 0) close(fd);
    else if (fd == OPEN_NOT_REGULAR) err_set(e, "%s: is %s, not a regular file", path, file_kind(mode));
    else err_set(e, "%s: cannot open: %s", path, strerror(errno));
    TextReader r;
    if (fd < 0 || text_open(&r, path, NULL, e) != 0)
        return err_prefix(e, "zero-shot set '%s' (--eval-data is the folder of the sets, default data/eval): ",
                          t->name);
    r.max_line = EVAL_LINE_MAX;
    r.max_bytes = EVAL_TEXT_MAX;
    int rc = t->format == FMT_HELLASWAG ? load_hellaswag_(s, &r, limit, e) : load_jsonl_(s, t, &r, limit, e);
    text_close(&r);
    if (rc == 0 && s->n == 0) rc = err_set(e, "%s: no items", path);
    if (rc != 0) evalset_free(s);
    return rc;
}

void evalset_free(EvalSet *s) {
    for (long i = 0; i < s->n; i++) item_free_(&s->items[i]);
    free(s->items);
    memset(s, 0, sizeof *s);
}
