// The zero-shot tables: the KLA paper's Table 4 layout (tasks as columns, the metric it reports under each,
// an average) and a per-task table with items, standard errors and chance levels, as Markdown, CSV and JSON.
#include "eval/zeroshot.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/files.h"

// the number the paper's table shows for a task: acc_norm where it reports that, else acc
static double table_value_(const ZeroshotResult *r, double *se) {
    int norm = r->task->table_norm && !r->task->cloze;
    *se = norm ? r->acc_norm_se : r->acc_se;
    return norm ? r->acc_norm : r->acc;
}

static const char *metric_name_(const ZeroshotResult *r) { return r->task->table_norm ? "acc_norm" : "acc"; }

static void write_md_(FILE *f, const char *model, const char *what, const ZeroshotResult *r, int n) {
    // Table 4's columns: the paper's tasks in its order, then Average (over those), then any extra tasks
    int n_paper = 0;
    double sum = 0, se;
    for (int i = 0; i < n; i++)
        if (r[i].task->in_paper) { n_paper++; sum += table_value_(&r[i], &se); }
    fprintf(f, "%s\n\nZero-shot accuracy (%%), the layout of the KLA paper's Table 4:\n\n| Model |", what);
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < n; i++)
            if (r[i].task->in_paper == !pass) fprintf(f, " %s |", r[i].task->column);
        if (pass == 0 && n_paper) fprintf(f, n_paper == 8 ? " Average |" : " Average (%d tasks) |", n_paper);
    }
    fprintf(f, "\n|---|");
    for (int i = 0; i < n + (n_paper > 0); i++) fprintf(f, "---:|");
    fprintf(f, "\n| |");
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < n; i++)
            if (r[i].task->in_paper == !pass) fprintf(f, " %s ↑ |", r[i].task->table_norm ? "accn" : "acc");
        if (pass == 0 && n_paper) fprintf(f, " acc ↑ |");
    }
    fprintf(f, "\n| %s |", model);
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < n; i++)
            if (r[i].task->in_paper == !pass) fprintf(f, " %.2f |", 100 * table_value_(&r[i], &se));
        if (pass == 0 && n_paper) fprintf(f, " %.2f |", 100 * sum / n_paper);
    }
    fprintf(f, "\n\nPer task (± the standard error: sample standard deviation over items / sqrt(items); chance: a "
               "uniform guess's expected accuracy):\n\n"
               "| task | items | of | metric | value (%%) | ± | acc (%%) | acc_norm (%%) | chance (%%) | truncated | "
               "other |\n|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|\n");
    for (int i = 0; i < n; i++) {
        double v = table_value_(&r[i], &se);
        fprintf(f, "| %s | %ld | %ld | %s | %.2f | %.2f | %.2f | ", r[i].task->name, r[i].n, r[i].n_file,
                metric_name_(&r[i]), 100 * v, 100 * se, 100 * r[i].acc);
        if (r[i].task->cloze) fprintf(f, "— | — | %ld | ppl %.2f ± %.2f |\n", r[i].truncated, r[i].ppl, r[i].ppl_se);
        else fprintf(f, "%.2f | %.2f | %ld | |\n", 100 * r[i].acc_norm, 100 * r[i].chance, r[i].truncated);
    }
}

// a CSV field, empty for a value that does not exist (acc_norm of a cloze task)
static void csv_num_(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.4f", v);
    fputc(',', f);
}

static void write_csv_(FILE *f, const char *model, const ZeroshotResult *r, int n) {
    fprintf(f, "model,task,column,metric,items,items_in_file,value_pct,stderr_pct,acc_pct,acc_stderr_pct,"
               "acc_norm_pct,acc_norm_stderr_pct,chance_pct,ppl,ppl_stderr,truncated,seconds\n");
    for (int i = 0; i < n; i++) {
        double se, v = table_value_(&r[i], &se);
        fprintf(f, "%s,%s,%s,%s,%ld,%ld,", model, r[i].task->name, r[i].task->column, metric_name_(&r[i]), r[i].n,
                r[i].n_file);
        double pct[] = {v, se, r[i].acc, r[i].acc_se, r[i].acc_norm, r[i].acc_norm_se, r[i].chance};
        for (int k = 0; k < 7; k++) csv_num_(f, 100 * pct[k]);
        csv_num_(f, r[i].ppl);
        csv_num_(f, r[i].ppl_se);
        fprintf(f, "%ld,%.3f\n", r[i].truncated, r[i].seconds);
    }
}

// a JSON number, or null for a value that does not exist (acc_norm of a cloze task)
static void js_num_(cJSON *o, const char *key, double v) {
    cJSON_AddItemToObject(o, key, isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull());
}

static char *json_text_(const char *model, const char *what, const ZeroshotResult *r, int n) {
    cJSON *root = cJSON_CreateObject(), *tasks = cJSON_CreateArray();
    cJSON_AddStringToObject(root, "model", model);
    cJSON_AddStringToObject(root, "what", what);
    cJSON_AddStringToObject(root, "units", "fractions (not percent); stderr = sample std over items / sqrt(items)");
    for (int i = 0; i < n; i++) {
        cJSON *t = cJSON_CreateObject();
        double se, v = table_value_(&r[i], &se);
        cJSON_AddStringToObject(t, "task", r[i].task->name);
        cJSON_AddStringToObject(t, "column", r[i].task->column);
        cJSON_AddStringToObject(t, "metric", metric_name_(&r[i]));
        cJSON_AddNumberToObject(t, "items", (double)r[i].n);
        cJSON_AddNumberToObject(t, "items_in_file", (double)r[i].n_file);
        js_num_(t, "value", v);
        js_num_(t, "stderr", se);
        js_num_(t, "acc", r[i].acc);
        js_num_(t, "acc_stderr", r[i].acc_se);
        js_num_(t, "acc_norm", r[i].acc_norm);
        js_num_(t, "acc_norm_stderr", r[i].acc_norm_se);
        js_num_(t, "chance", r[i].chance);
        js_num_(t, "ppl", r[i].ppl);
        js_num_(t, "ppl_stderr", r[i].ppl_se);
        cJSON_AddNumberToObject(t, "truncated", (double)r[i].truncated);
        js_num_(t, "seconds", r[i].seconds);
        cJSON_AddItemToArray(tasks, t);
    }
    cJSON_AddItemToObject(root, "tasks", tasks);
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}

int zeroshot_write(const char *dir, const char *model, const char *what, const ZeroshotResult *r, int n, FILE *out,
                   Err *e) {
    static const char *names[3] = {"zeroshot.md", "zeroshot.csv", "zeroshot.json"};
    for (int k = 0; k < 3; k++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        FILE *f = fopen_output(path, 0, e);
        if (!f) return -1;
        if (k == 0) write_md_(f, model, what, r, n);
        else if (k == 1) write_csv_(f, model, r, n);
        else {
            char *s = json_text_(model, what, r, n);
            fprintf(f, "%s\n", s);
            cJSON_free(s);
        }
        if (fclose_output(f, path, e) != 0) return -1;
    }
    if (out) write_md_(out, model, what, r, n);
    return 0;
}
