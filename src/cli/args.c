#include "cli/args.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/cpu.h"

// 0 and *out, -1 when s is not an integer, -2 when it is one too large for a long (ERANGE)
static int parse_long_(const char *s, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end) return -1;
    if (errno) return -2;
    *out = v;
    return 0;
}

// as parse_long_: -2 when s overflows a double (1e999); one that underflows (1e-999) reads as 0 or tiny
static int parse_double_(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end) return -1;
    if (errno == ERANGE && (v == HUGE_VAL || v == -HUGE_VAL)) return -2;
    *out = v;
    return 0;
}

static const ArgSpec *args_find_(const ArgSpec *specs, int n, const char *name, size_t len) {
    for (int i = 0; i < n; i++)
        if (strlen(specs[i].name) == len && strncmp(specs[i].name, name, len) == 0) return &specs[i];
    return NULL;
}

static int args_unknown_(const ArgSpec *specs, int n, const char *arg, size_t len, Err *e) {
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)(len < 100 ? len : 100), arg);
    const char *best = NULL;
    int best_d = 1 << 30;
    for (int i = 0; i < n; i++) {
        int d = config_edit_distance(name, specs[i].name);
        if (d < best_d) { best_d = d; best = specs[i].name; }
    }
    if (best && best_d <= 3) return err_set(e, "unknown option '%s' (did you mean '%s'?); see --help", name, best);
    return err_set(e, "unknown option '%s'; see --help", name);
}

static int args_store_(const ArgSpec *sp, const char *val, Err *e) {
    switch (sp->type) {
    case ARG_STR:
        *(const char **)sp->dst = val;
        return 0;
    case ARG_LIST: {
        ArgList *l = sp->dst;
        if (l->n == ARGS_LIST_MAX) return err_set(e, "%s given more than %d times", sp->name, ARGS_LIST_MAX);
        l->v[l->n++] = val;
        return 0;
    }
    case ARG_INT: {
        long v;
        int rc = parse_long_(val, &v);
        if (rc == -2 && (sp->min != 0 || sp->max != 0))
            return err_set(e, "%s: %s is out of range (allowed: %.0f to %.0f)", sp->name, val, sp->min, sp->max);
        if (rc == -2)
            return err_set(e, "%s: %s is out of range (allowed: %ld to %ld)", sp->name, val, LONG_MIN, LONG_MAX);
        if (rc != 0) return err_set(e, "%s: '%s' is not an integer", sp->name, val);
        if ((sp->min != 0 || sp->max != 0) && (v < sp->min || v > sp->max))
            return err_set(e, "%s: %ld is out of range (allowed: %.0f to %.0f)", sp->name, v, sp->min, sp->max);
        *(long *)sp->dst = v;
        return 0;
    }
    case ARG_DOUBLE: {
        double v;
        int rc = parse_double_(val, &v);
        if (rc == -2 && (sp->min != 0 || sp->max != 0))
            return err_set(e, "%s: %s is out of range (allowed: %g to %g)", sp->name, val, sp->min, sp->max);
        if (rc == -2) return err_set(e, "%s: %s is out of range (larger than any finite number)", sp->name, val);
        if (rc != 0) return err_set(e, "%s: '%s' is not a number", sp->name, val);
        if ((sp->min != 0 || sp->max != 0) && (v < sp->min || v > sp->max))
            return err_set(e, "%s: %g is out of range (allowed: %g to %g)", sp->name, v, sp->min, sp->max);
        *(double *)sp->dst = v;
        return 0;
    }
    case ARG_FLAG:
        *(int *)sp->dst = 1;
        return 0;
    }
    return err_set(e, "%s: bad option type", sp->name);
}

int args_parse(int argc, char **argv, int start, const ArgSpec *specs, int n_specs, ArgList *positional, Err *e) {
    for (int i = start; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            if (!positional) return err_set(e, "unexpected argument '%s'; see --help", a);
            if (positional->n == ARGS_LIST_MAX) return err_set(e, "too many arguments (at most %d)", ARGS_LIST_MAX);
            positional->v[positional->n++] = a;
            continue;
        }
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const ArgSpec *sp = args_find_(specs, n_specs, a, len);
        if (!sp) return args_unknown_(specs, n_specs, a, len, e);
        if (sp->type == ARG_FLAG) {
            if (eq) return err_set(e, "%s takes no value", sp->name);
            args_store_(sp, NULL, e);
            continue;
        }
        const char *val = eq ? eq + 1 : NULL;
        if (!val) {
            if (i + 1 >= argc) return err_set(e, "%s needs a value (%s)", sp->name, sp->metavar ? sp->metavar : "");
            val = argv[++i];
        }
        if (args_store_(sp, val, e) != 0) return -1;
    }
    return 0;
}

void args_usage(FILE *f, const ArgSpec *specs, int n_specs) {
    for (int i = 0; i < n_specs; i++) {
        char left[64];
        snprintf(left, sizeof left, "%s%s%s", specs[i].name, specs[i].metavar ? " " : "",
                 specs[i].metavar ? specs[i].metavar : "");
        fprintf(f, "  %-28s %s\n", left, specs[i].help);
    }
}

void args_env_usage(FILE *f, int threads_opt) {
    char sets[160];
    kernel_set_describe(sets, sizeof sets);
    fprintf(f, "\nenvironment:\n"
               "  %-28s %s\n  %-28s %s\n  %-28s (active: %s)\n  %-28s %s\n",
            "SEQ_KERNELS=SET", "the kernel set: auto (the default: the best this CPU has), avx512, avx2 or generic;",
            "", "a set the CPU lacks is an error", "", sets, "SEQ_PROFILE=1",
            "time every nn op and print the table to stderr at exit");
    fprintf(f, "  %-28s %s\n", "OMP_NUM_THREADS=N",
            threads_opt ? "threads, where no --threads is given and run.threads is 0 (its default)"
                        : "threads, where run.threads is 0 (its default)");
}

int args_int_list(const char *s, long *out, int max, long lo, long hi, const char *what, Err *e) {
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || (*end && *end != ','))
            return err_set(e, "%s: '%s' is not a comma-separated list of integers", what, s);
        if (v < lo || v > hi) return err_set(e, "%s: %ld is out of range (allowed: %ld to %ld)", what, v, lo, hi);
        if (n == max) return err_set(e, "%s: more than %d values", what, max);
        out[n++] = v;
        p = *end ? end + 1 : end;
    }
    if (n == 0) return err_set(e, "%s: empty list", what);
    return n;
}
