/*
 * Configuration: load (read, "base" inheritance, --set overrides), bind (validate against a schema into
 * a struct), dump and document. config.h states the contract.
 *
 * Loading yields one merged cJSON tree plus a table of origins (dotted path -> the file or "--set ..."
 * that set it). The table lives beside the tree rather than inside it so the tree stays plain cJSON that
 * merges and prints with cJSON's own functions; bind consults it only when it has an error to report.
 * Every error is one line shaped "<origin>: <path>: <problem>", and the first error stops the work.
 */
#include "core/config.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CFG_BASE_DEPTH_MAX 32  // files in one chain of "base" links

struct CfgOrigins {
    char *root;  // the file given to config_load: missing keys are reported against it
    int n, cap;
    char **path, **from;
};

typedef struct LoadChain {  // the files being loaded, outermost first, to report "base" cycles
    int n;
    char *canon[CFG_BASE_DEPTH_MAX];
    const char *shown[CFG_BASE_DEPTH_MAX];
} LoadChain;

// ----------------------------------------------------------------------------
// small helpers

static char *join_path_(const char *prefix, const char *name) {
    char *s = xmalloc(strlen(prefix) + strlen(name) + 2);
    sprintf(s, "%s%s%s", prefix, prefix[0] ? "." : "", name);
    return s;
}

static void append_(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append_(char *buf, size_t n, const char *fmt, ...) {
    size_t len = strlen(buf);
    if (len + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, n - len, fmt, ap);
    va_end(ap);
}

// shortest of %.15g / %.17g that reads back as the same double, so messages show 3e-4 as 0.0003
static void fmt_num_(double x, char buf[32]) {
    snprintf(buf, 32, "%.15g", x);
    if (strtod(buf, NULL) != x) snprintf(buf, 32, "%.17g", x);
}

// a JSON value as an error message shows it: `"512" (a string)`, `3.5 (a number)`, `a list`;
// strings are cut short and kept on one line
static void describe_(const cJSON *v, char *buf, size_t n) {
    if (cJSON_IsString(v)) {
        char s[48];
        size_t k = 0;
        for (const char *p = v->valuestring; *p && k < 40; p++) s[k++] = (unsigned char)*p < 0x20 ? '?' : *p;
        s[k] = 0;
        snprintf(buf, n, "\"%s%s\" (a string)", s, v->valuestring[k] ? "..." : "");
    } else if (cJSON_IsNumber(v)) {
        char num[32];
        fmt_num_(v->valuedouble, num);
        snprintf(buf, n, "%s (a number)", num);
    } else if (cJSON_IsBool(v)) {
        snprintf(buf, n, "%s (a boolean)", cJSON_IsTrue(v) ? "true" : "false");
    } else {
        snprintf(buf, n, "%s", cJSON_IsNull(v) ? "null" : cJSON_IsArray(v) ? "a list" : "an object");
    }
}

// did-you-mean threshold: a typo or two, more for long names, but never a whole different word
static int near_(const char *typed, int d) {
    int len = (int)strlen(typed);
    return d < len && (d <= 2 || d <= len / 3);
}

// "<origin>: <path>: <problem>", either of the first two left out when NULL
static int fail_(Err *e, const char *origin, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_(Err *e, const char *origin, const char *path, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(e, "%s%s%s%s%s", origin ? origin : "", origin ? ": " : "", path ? path : "",
                   path ? ": " : "", msg);
}

int config_edit_distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    int *row = xmalloc((m + 1) * sizeof *row);  // one row of the DP table, updated in place
    for (size_t j = 0; j <= m; j++) row[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    int d = row[m];
    free(row);
    return d;
}

// ----------------------------------------------------------------------------
// origins

static void origins_set_(CfgOrigins *o, const char *path, const char *from) {
    for (int i = 0; i < o->n; i++) {
        if (strcmp(o->path[i], path) == 0) {
            free(o->from[i]);
            o->from[i] = xstrdup(from);
            return;
        }
    }
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 64;
        o->path = xrealloc(o->path, o->cap * sizeof *o->path);
        o->from = xrealloc(o->from, o->cap * sizeof *o->from);
    }
    o->path[o->n] = xstrdup(path);
    o->from[o->n++] = xstrdup(from);
}

// where path was set: its own entry, else its nearest recorded parent (list items, keys created by a
// --set path), else the root file
static const char *origins_get_(const CfgOrigins *o, const char *path) {
    if (!o) return NULL;
    const char *found = o->root;
    char *p = xstrdup(path);
    for (;;) {
        int i = 0;
        while (i < o->n && strcmp(o->path[i], p) != 0) i++;
        if (i < o->n) {
            found = o->from[i];
            break;
        }
        char *dot = strrchr(p, '.'), *bracket = strrchr(p, '[');
        char *cut = dot > bracket ? dot : bracket;
        if (!cut) break;
        *cut = 0;
    }
    free(p);
    return found;
}

void config_origins_free(CfgOrigins *o) {
    if (!o) return;
    for (int i = 0; i < o->n; i++) {
        free(o->path[i]);
        free(o->from[i]);
    }
    free(o->path);
    free(o->from);
    free(o->root);
    free(o);
}

// Record every member of obj (recursively) as set by `from`. cJSON keeps both copies of a repeated key
// and the merge would silently keep one, so repeats are caught here.
static int record_tree_(CfgOrigins *o, const char *prefix, const cJSON *obj, const char *from, Err *e) {
    for (const cJSON *c = obj->child; c; c = c->next) {
        char *path = join_path_(prefix, c->string);
        int rc = 0;
        for (const cJSON *d = obj->child; d != c && !rc; d = d->next)
            if (strcmp(d->string, c->string) == 0) rc = fail_(e, from, NULL, "duplicate key '%s'", path);
        if (!rc) origins_set_(o, path, from);
        if (!rc && cJSON_IsObject(c)) rc = record_tree_(o, path, c, from, e);
        free(path);
        if (rc) return -1;
    }
    return 0;
}

// ----------------------------------------------------------------------------
// loading

// Move every member of src into dst: objects on both sides merge key by key, anything else from src
// replaces dst's member whole (a list in a child file is the new list, not an append). Empties src.
static void merge_into_(cJSON *dst, cJSON *src) {
    while (src->child) {
        cJSON *c = cJSON_DetachItemViaPointer(src, src->child);
        cJSON *d = cJSON_GetObjectItemCaseSensitive(dst, c->string);
        if (d && cJSON_IsObject(d) && cJSON_IsObject(c)) {
            merge_into_(d, c);
            cJSON_Delete(c);
        } else if (d) {
            cJSON_ReplaceItemViaPointer(dst, d, c);
        } else {
            cJSON_AddItemToObject(dst, c->string, c);
        }
    }
}

static char *read_text_(const char *path, Err *e) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fail_(e, path, NULL, "cannot open (%s)", strerror(errno));
        return NULL;
    }
    size_t n = 0, cap = 4096;
    char *buf = xmalloc(cap);
    for (;;) {
        n += fread(buf + n, 1, cap - 1 - n, f);
        if (n < cap - 1) break;
        cap *= 2;
        buf = xrealloc(buf, cap);
    }
    int bad = ferror(f), errsv = errno;
    fclose(f);
    if (bad) {
        free(buf);
        fail_(e, path, NULL, "cannot read (%s)", strerror(errsv));
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

// parse, or report "file:line:col: invalid JSON near '...'" from where cJSON stopped
static cJSON *parse_text_(const char *path, const char *text, Err *e) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);  // 1: trailing garbage is an error too
    if (root) return root;
    if (!end) end = text;
    int line = 1;
    const char *bol = text;
    for (const char *p = text; p < end; p++)
        if (*p == '\n') line++, bol = p + 1;
    char near[32];
    size_t k = 0;
    for (; end[k] && end[k] != '\n' && end[k] != '\r' && k < 24; k++)
        near[k] = (unsigned char)end[k] < 0x20 ? ' ' : end[k];
    near[k] = 0;
    if (k) err_set(e, "%s:%d:%d: invalid JSON near '%s'", path, line, (int)(end - bol) + 1, near);
    else err_set(e, "%s:%d:%d: invalid JSON (unexpected end of line or file)", path, line, (int)(end - bol) + 1);
    return NULL;
}

static cJSON *load_file_(const char *path, char *canon, LoadChain *ch, CfgOrigins *o, Err *e);

// Load each base named by `base` (a string or a list, relative to the naming file) into merged, in
// order, so later bases win over earlier ones.
static int load_bases_(cJSON *merged, const cJSON *base, const char *path, LoadChain *ch, CfgOrigins *o,
                       Err *e) {
    char what[160];
    describe_(base, what, sizeof what);
    if (!cJSON_IsString(base) && !cJSON_IsArray(base))
        return fail_(e, path, "base", "expected a file name or a list of file names, got %s", what);
    const char *slash = strrchr(path, '/');
    int dir_len = slash ? (int)(slash - path) + 1 : 0;
    const cJSON *item = cJSON_IsString(base) ? base : base->child;
    for (; item; item = cJSON_IsString(base) ? NULL : item->next) {
        describe_(item, what, sizeof what);
        if (!cJSON_IsString(item) || !item->valuestring[0])
            return fail_(e, path, "base", "expected a file name, got %s", what);
        const char *name = item->valuestring;
        char *full = xmalloc(dir_len + strlen(name) + 1);
        sprintf(full, "%.*s%s", name[0] == '/' ? 0 : dir_len, path, name);
        char *canon = realpath(full, NULL);
        cJSON *tree = NULL;
        if (!canon) fail_(e, path, "base", "cannot open \"%s\" (%s: %s)", name, full, strerror(errno));
        else tree = load_file_(full, canon, ch, o, e);
        free(full);
        if (!tree) return -1;
        merge_into_(merged, tree);
        cJSON_Delete(tree);
    }
    return 0;
}

// One file merged over its bases. Takes ownership of canon (path through realpath, to spot cycles).
static cJSON *load_file_(const char *path, char *canon, LoadChain *ch, CfgOrigins *o, Err *e) {
    for (int i = 0; i < ch->n; i++) {
        if (strcmp(ch->canon[i], canon) == 0) {
            char chain[600] = "";
            for (int j = i; j < ch->n; j++) append_(chain, sizeof chain, "%s -> ", ch->shown[j]);
            fail_(e, ch->shown[ch->n - 1], "base", "cycle: %s%s", chain, path);
            free(canon);
            return NULL;
        }
    }
    if (ch->n == CFG_BASE_DEPTH_MAX) {
        fail_(e, path, "base", "chain longer than %d files", CFG_BASE_DEPTH_MAX);
        free(canon);
        return NULL;
    }
    ch->canon[ch->n] = canon;
    ch->shown[ch->n++] = path;

    cJSON *own = NULL, *base = NULL, *merged = NULL;
    char *text = read_text_(path, e);
    if (text) own = parse_text_(path, text, e);
    free(text);
    if (own && !cJSON_IsObject(own)) {
        char what[160];
        describe_(own, what, sizeof what);
        fail_(e, path, NULL, "the top level must be a JSON object, got %s", what);
    } else if (own) {
        base = cJSON_DetachItemFromObjectCaseSensitive(own, "base");
        merged = cJSON_CreateObject();
        if ((base && load_bases_(merged, base, path, ch, o, e)) || record_tree_(o, "", own, path, e)) {
            cJSON_Delete(merged);
            merged = NULL;
        } else {
            merge_into_(merged, own);
        }
    }
    cJSON_Delete(own);
    cJSON_Delete(base);
    free(ch->canon[--ch->n]);
    return merged;
}

// "a.b.c=value": value is JSON when it parses whole as JSON, else a plain string; missing objects on the
// way are created, and an object value merges into an object already there like a child file would.
static int apply_override_(cJSON *root, const char *text, CfgOrigins *o, Err *e) {
    const char *eq = strchr(text, '=');
    char origin[CFG_STR_MAX + 16];
    snprintf(origin, sizeof origin, "--set %s", text);
    if (!eq) return fail_(e, origin, NULL, "expected key=value (e.g. --set train.lr=3e-4)");
    char *key = strndup(text, eq - text);
    if (!key[0] || key[0] == '.' || key[strlen(key) - 1] == '.' || strstr(key, "..")) {
        free(key);
        return fail_(e, origin, NULL, "empty key name before '='");
    }
    cJSON *obj = root;
    char *c = key, *dot;
    while ((dot = strchr(c, '.'))) {
        *dot = 0;  // key now reads as the path walked so far
        cJSON *next = cJSON_GetObjectItemCaseSensitive(obj, c);
        if (!next) {
            next = cJSON_AddObjectToObject(obj, c);
            origins_set_(o, key, origin);
        } else if (!cJSON_IsObject(next)) {
            char what[160];
            describe_(next, what, sizeof what);
            int rc = fail_(e, origin, NULL, "'%s' is %s, not an object", key, what);
            free(key);
            return rc;
        }
        *dot = '.';
        obj = next;
        c = dot + 1;
    }
    cJSON *val = cJSON_ParseWithOpts(eq + 1, NULL, 1);
    if (!val) val = cJSON_CreateString(eq + 1);
    origins_set_(o, key, origin);
    int rc = cJSON_IsObject(val) ? record_tree_(o, key, val, origin, e) : 0;
    cJSON *old = cJSON_GetObjectItemCaseSensitive(obj, c);
    if (rc) {
        cJSON_Delete(val);
    } else if (old && cJSON_IsObject(old) && cJSON_IsObject(val)) {
        merge_into_(old, val);
        cJSON_Delete(val);
    } else if (old) {
        cJSON_ReplaceItemInObjectCaseSensitive(obj, c, val);
    } else {
        cJSON_AddItemToObject(obj, c, val);
    }
    free(key);
    return rc;
}

cJSON *config_load(const char *path, const char *const *overrides, int n_overrides, CfgOrigins **origins,
                   Err *e) {
    CfgOrigins *o = xcalloc(1, sizeof *o);
    o->root = xstrdup(path);
    LoadChain ch = {0};
    char *canon = realpath(path, NULL);
    cJSON *root = NULL;
    if (!canon) fail_(e, path, NULL, "cannot open (%s)", strerror(errno));
    else root = load_file_(path, canon, &ch, o, e);
    for (int i = 0; root && i < n_overrides; i++) {
        if (apply_override_(root, overrides[i], o, e)) {
            cJSON_Delete(root);
            root = NULL;
        }
    }
    if (origins && root) {
        *origins = o;
    } else {
        if (origins) *origins = NULL;
        config_origins_free(o);
    }
    return root;
}

// ----------------------------------------------------------------------------
// binding

// min == max == 0 means no bounds beyond the C type's
static void bounds_(const CfgKey *k, double *lo, double *hi) {
    int none = k->min == 0 && k->max == 0;
    if (k->type == CFG_INT) {
        *lo = none ? INT_MIN : fmax(k->min, INT_MIN);
        *hi = none ? INT_MAX : fmin(k->max, INT_MAX);
    } else {
        *lo = none ? -DBL_MAX : k->min;
        *hi = none ? DBL_MAX : k->max;
    }
}

// what a key accepts, for messages and docs: "1 to 1048576", "auto, seqtok, llmc"
static void allowed_(const CfgKey *k, char *buf, size_t n) {
    buf[0] = 0;
    if (k->type == CFG_INT || k->type == CFG_FLOAT) {
        double lo, hi;
        char a[32], b[32];
        bounds_(k, &lo, &hi);
        fmt_num_(lo, a);
        fmt_num_(hi, b);
        if (k->type == CFG_FLOAT && lo == -DBL_MAX && hi == DBL_MAX) snprintf(buf, n, "any finite number");
        else snprintf(buf, n, "%s to %s", a, b);
    } else if (k->type == CFG_BOOL) {
        snprintf(buf, n, "true, false");
    } else if (k->type == CFG_ENUM) {
        for (const char *p = k->choices; *p; p++) append_(buf, n, *p == '|' ? ", " : "%c", *p);
    }
}

// whether s is one of "a|b|c"; if not, the nearest choice (if near enough) goes to hint
static int choice_ok_(const char *choices, const char *s, char *hint, size_t n) {
    int best = INT_MAX;
    hint[0] = 0;
    for (const char *p = choices; *p;) {
        size_t len = strcspn(p, "|");
        char tok[CFG_STR_MAX];
        snprintf(tok, sizeof tok, "%.*s", (int)len, p);
        if (strcmp(tok, s) == 0) return 1;
        int d = config_edit_distance(s, tok);
        if (d < best && near_(s, d)) {
            best = d;
            snprintf(hint, n, "; did you mean '%s'?", tok);
        }
        p += len + (p[len] == '|');
    }
    return 0;
}

static int copy_str_(char *dst, const cJSON *v, const char *path, const char *origin, Err *e) {
    size_t len = strlen(v->valuestring);
    if (len >= CFG_STR_MAX)
        return fail_(e, origin, path, "string of %zu bytes is too long (at most %d allowed)", len, CFG_STR_MAX - 1);
    memset(dst, 0, CFG_STR_MAX);  // whole buffer, so equal configs compare equal with memcmp
    memcpy(dst, v->valuestring, len);
    return 0;
}

static int bind_section_(char *out, const CfgSection *sec, const cJSON *obj, const char *prefix,
                         const CfgOrigins *o, Err *e);

static int bind_value_(char *dst, const CfgKey *k, const cJSON *v, const char *path, const char *origin,
                       const CfgOrigins *o, Err *e) {
    static const char *expected[] = {
        [CFG_INT] = "an integer", [CFG_FLOAT] = "a number", [CFG_BOOL] = "true or false",
        [CFG_STR] = "a string", [CFG_ENUM] = "a string", [CFG_STRLIST] = "a string or a list of strings",
        [CFG_SECTION] = "an object",
    };
    char what[160] = "";
    if (v) describe_(v, what, sizeof what);
    switch (k->type) {
    case CFG_INT:
    case CFG_FLOAT: {
        double x = cJSON_IsNumber(v) ? v->valuedouble : 0, lo, hi;
        if (!cJSON_IsNumber(v) || (k->type == CFG_INT && x != floor(x)))
            return fail_(e, origin, path, "expected %s, got %s", expected[k->type], what);
        bounds_(k, &lo, &hi);
        if (!(x >= lo && x <= hi)) {
            char num[32], allowed[96];
            fmt_num_(x, num);
            allowed_(k, allowed, sizeof allowed);
            return fail_(e, origin, path, "%s is out of range (allowed: %s)", num, allowed);
        }
        if (k->type == CFG_INT) *(int *)dst = (int)x;
        else *(double *)dst = x;
        return 0;
    }
    case CFG_BOOL:
        if (!cJSON_IsBool(v)) return fail_(e, origin, path, "expected %s, got %s", expected[k->type], what);
        *(int *)dst = cJSON_IsTrue(v);
        return 0;
    case CFG_STR:
    case CFG_ENUM: {
        if (!cJSON_IsString(v)) return fail_(e, origin, path, "expected %s, got %s", expected[k->type], what);
        char hint[CFG_STR_MAX + 32], allowed[CFG_STR_MAX];
        if (k->type == CFG_ENUM && !choice_ok_(k->choices, v->valuestring, hint, sizeof hint)) {
            allowed_(k, allowed, sizeof allowed);
            *strrchr(what, '(') = 0;  // the value alone: `"bin" ` without "(a string)"
            return fail_(e, origin, path, "%sis not allowed (allowed: %s%s)", what, allowed, hint);
        }
        return copy_str_(dst, v, path, origin, e);
    }
    case CFG_STRLIST: {
        CfgStrList *l = (CfgStrList *)dst;
        memset(l, 0, sizeof *l);
        if (cJSON_IsString(v)) {
            l->n = 1;
            return copy_str_(l->v[0], v, path, origin, e);
        }
        if (!cJSON_IsArray(v)) return fail_(e, origin, path, "expected %s, got %s", expected[k->type], what);
        int n = cJSON_GetArraySize(v);
        if (n > CFG_LIST_MAX)
            return fail_(e, origin, path, "list of %d items is too long (at most %d allowed)", n, CFG_LIST_MAX);
        char *item_path = xmalloc(strlen(path) + 16);
        int rc = 0;
        for (const cJSON *c = v->child; c && !rc; c = c->next) {
            sprintf(item_path, "%s[%d]", path, l->n);
            describe_(c, what, sizeof what);
            if (!cJSON_IsString(c)) rc = fail_(e, origin, item_path, "expected a string, got %s", what);
            else rc = copy_str_(l->v[l->n++], c, item_path, origin, e);
        }
        free(item_path);
        return rc;
    }
    case CFG_SECTION:
        if (v && !cJSON_IsObject(v)) return fail_(e, origin, path, "expected %s, got %s", expected[k->type], what);
        return bind_section_(dst, k->section, v, path, o, e);
    }
    return fail_(e, "schema", path, "unknown key type %d", (int)k->type);
}

static void unknown_hint_(const CfgSection *sec, const char *prefix, const char *name, char *buf, size_t n) {
    int best = -1, best_d = INT_MAX;
    for (int i = 0; i < sec->n_keys; i++) {
        int d = config_edit_distance(name, sec->keys[i].name);
        if (d < best_d) best = i, best_d = d;
    }
    buf[0] = 0;
    if (best >= 0 && near_(name, best_d)) {
        snprintf(buf, n, " (did you mean '%s%s%s'?)", prefix, prefix[0] ? "." : "", sec->keys[best].name);
        return;
    }
    if (prefix[0]) append_(buf, n, " (allowed keys in '%s': ", prefix);
    else append_(buf, n, " (allowed keys at the top level: ");
    for (int i = 0; i < sec->n_keys; i++) append_(buf, n, "%s%s", i ? ", " : "", sec->keys[i].name);
    append_(buf, n, ")");
}

// obj may be NULL (a section absent from the file): every key then takes its default
static int bind_section_(char *out, const CfgSection *sec, const cJSON *obj, const char *prefix,
                         const CfgOrigins *o, Err *e) {
    // unknown keys first: a misspelt required key should read as a typo, not as a missing key
    for (const cJSON *c = obj ? obj->child : NULL; c; c = c->next) {
        int i = 0;
        while (i < sec->n_keys && strcmp(sec->keys[i].name, c->string) != 0) i++;
        if (i < sec->n_keys) continue;
        char *path = join_path_(prefix, c->string), hint[640];
        unknown_hint_(sec, prefix, c->string, hint, sizeof hint);
        fail_(e, origins_get_(o, path), NULL, "unknown key '%s'%s", path, hint);
        free(path);
        return -1;
    }
    for (int i = 0; i < sec->n_keys; i++) {
        const CfgKey *k = &sec->keys[i];
        char *path = join_path_(prefix, k->name);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, k->name);
        const char *origin = origins_get_(o, path);
        cJSON *def = NULL;
        int rc = 0;
        if (!v && k->type != CFG_SECTION) {
            if (!k->def)
                rc = fail_(e, o ? o->root : NULL, NULL, "missing required key '%s'%s%s%s", path,
                           k->doc ? " (" : "", k->doc ? k->doc : "", k->doc ? ")" : "");
            else if (!(v = def = cJSON_Parse(k->def)))
                rc = fail_(e, "schema", path, "default %s is not valid JSON", k->def);
            origin = "schema default";
        }
        if (!rc) rc = bind_value_(out + k->offset, k, v, path, origin, o, e);
        cJSON_Delete(def);
        free(path);
        if (rc) return -1;
    }
    return 0;
}

int config_bind(void *out, const CfgSection *schema, const cJSON *root, const CfgOrigins *origins, Err *e) {
    if (!cJSON_IsObject(root))
        return fail_(e, origins ? origins->root : NULL, NULL, "the configuration must be a JSON object");
    return bind_section_(out, schema, root, "", origins, e);
}

// ----------------------------------------------------------------------------
// dump and docs

static cJSON *dump_section_(const char *in, const CfgSection *sec) {
    cJSON *obj = cJSON_CreateObject();
    for (int i = 0; i < sec->n_keys; i++) {
        const CfgKey *k = &sec->keys[i];
        const char *p = in + k->offset;
        cJSON *v = NULL;
        switch (k->type) {
        case CFG_INT: v = cJSON_CreateNumber(*(const int *)p); break;
        case CFG_FLOAT: v = cJSON_CreateNumber(*(const double *)p); break;
        case CFG_BOOL: v = cJSON_CreateBool(*(const int *)p); break;
        case CFG_STR:
        case CFG_ENUM: v = cJSON_CreateString(p); break;
        case CFG_STRLIST: {
            const CfgStrList *l = (const CfgStrList *)p;
            v = cJSON_CreateArray();
            for (int j = 0; j < l->n; j++) cJSON_AddItemToArray(v, cJSON_CreateString(l->v[j]));
            break;
        }
        case CFG_SECTION: v = dump_section_(p, k->section); break;
        }
        cJSON_AddItemToObject(obj, k->name, v);
    }
    return obj;
}

cJSON *config_dump(const void *cfg, const CfgSection *schema) {
    return dump_section_(cfg, schema);
}

// a Markdown table cell: '|' would end the cell and a newline the row
static void put_cell_(FILE *f, const char *s) {
    fputs("| ", f);
    for (; *s; s++) {
        if (*s == '|') fputs("\\|", f);
        else fputc(*s == '\n' ? ' ' : *s, f);
    }
    fputc(' ', f);
}

static void docs_section_(FILE *f, const CfgSection *sec, const char *path, const char *doc) {
    static const char *type_name[] = {
        [CFG_INT] = "integer", [CFG_FLOAT] = "number", [CFG_BOOL] = "boolean", [CFG_STR] = "string",
        [CFG_ENUM] = "one of", [CFG_STRLIST] = "string or list of strings", [CFG_SECTION] = "section",
    };
    int rows = 0;
    for (int i = 0; i < sec->n_keys; i++) rows += sec->keys[i].type != CFG_SECTION;
    if (rows || (doc && doc[0])) fprintf(f, "## %s\n\n", path[0] ? path : "top level");
    if (doc && doc[0]) fprintf(f, "%s\n\n", doc);
    if (rows) fputs("| key | type | default | allowed | description |\n|---|---|---|---|---|\n", f);
    for (int i = 0; i < sec->n_keys; i++) {
        const CfgKey *k = &sec->keys[i];
        if (k->type == CFG_SECTION) continue;
        char name[256], def[CFG_STR_MAX + 8], allowed[CFG_STR_MAX];
        snprintf(name, sizeof name, "`%s`", k->name);
        if (k->def) snprintf(def, sizeof def, "`%s`", k->def);
        else snprintf(def, sizeof def, "required");
        allowed_(k, allowed, sizeof allowed);
        put_cell_(f, name);
        put_cell_(f, type_name[k->type]);
        put_cell_(f, def);
        put_cell_(f, allowed);
        put_cell_(f, k->doc ? k->doc : "");
        fputs("|\n", f);
    }
    if (rows) fputc('\n', f);
    for (int i = 0; i < sec->n_keys; i++) {
        const CfgKey *k = &sec->keys[i];
        if (k->type != CFG_SECTION) continue;
        char *sub = join_path_(path, k->name);
        docs_section_(f, k->section, sub, k->doc ? k->doc : k->section->doc);
        free(sub);
    }
}

void config_write_docs(void *fp, const CfgSection *schema) {
    docs_section_(fp, schema, "", schema->doc);
}
