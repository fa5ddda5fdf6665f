/*
 * Configuration: load (read, "base" inheritance, --set overrides), bind (validate against a schema into
 * a struct), dump and document. config.h states the contract.
 *
 * Loading yields one merged cJSON tree plus a table of origins (dotted path, list items as "a.b[2]" ->
 * the file or "--set ..." that set it). The table lives beside the tree rather than inside it so the tree
 * stays plain cJSON that merges and prints with cJSON's own functions; bind consults it only when it has an
 * error to report.
 * Every error is one line shaped "<origin>: <path>: <problem>", and the first error stops the work.
 */
#include "core/config.h"
#include "core/files.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CFG_BASE_DEPTH_MAX 32  // files in one chain of "base" links
#define CFG_FILE_MAX (16 << 20)  // bytes of one config file
#define CFG_SET_DEPTH_MAX 64     // names and [i] indices in one --set key path (the schema nests a few levels)

struct CfgOrigins {
    char *root;  // the file given to config_load: missing keys are reported against it
    int n, cap;
    char **path, **from;
    int *slot, n_slot;  // open-addressing hash of path -> index + 1 (0 empty), n_slot a power of 2 >= 2 cap
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

// "prefix[i]", the path of a list item
static char *item_path_(const char *prefix, int i) {
    char *s = xmalloc(strlen(prefix) + 16);
    sprintf(s, "%s[%d]", prefix, i);
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

// The table is hashed so that loading stays linear in the number of values (a 16,000-item list was
// quadratic with a list scan: 0.4-1.1 s).
static size_t path_hash_(const char *s, size_t len) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return (size_t)(h ^ h >> 29);
}

// index of the entry whose path is the first len bytes of path, or -1
static int origins_find_(const CfgOrigins *o, const char *path, size_t len) {
    if (!o->n_slot) return -1;
    for (size_t s = path_hash_(path, len) & (size_t)(o->n_slot - 1);; s = (s + 1) & (size_t)(o->n_slot - 1)) {
        int i = o->slot[s] - 1;
        if (i < 0) return -1;
        if (strncmp(o->path[i], path, len) == 0 && o->path[i][len] == 0) return i;
    }
}

static void origins_slot_(CfgOrigins *o, int i) {
    size_t s = path_hash_(o->path[i], strlen(o->path[i])) & (size_t)(o->n_slot - 1);
    while (o->slot[s]) s = (s + 1) & (size_t)(o->n_slot - 1);
    o->slot[s] = i + 1;
}

static void origins_set_(CfgOrigins *o, const char *path, const char *from) {
    int i = origins_find_(o, path, strlen(path));
    if (i >= 0) {
        free(o->from[i]);
        o->from[i] = xstrdup(from);
        return;
    }
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 64;
        o->path = xrealloc(o->path, o->cap * sizeof *o->path);
        o->from = xrealloc(o->from, o->cap * sizeof *o->from);
        free(o->slot);
        o->n_slot = 2 * o->cap;
        o->slot = xcalloc((size_t)o->n_slot, sizeof *o->slot);
        for (int k = 0; k < o->n; k++) origins_slot_(o, k);
    }
    o->path[o->n] = xstrdup(path);
    o->from[o->n++] = xstrdup(from);
    origins_slot_(o, o->n - 1);
}

// where path was set: its own entry, else its nearest recorded parent (list items, keys created by a
// --set path), else the root file
static const char *origins_get_(const CfgOrigins *o, const char *path) {
    if (!o) return NULL;
    size_t len = strlen(path);
    for (;;) {
        int i = origins_find_(o, path, len);
        if (i >= 0) return o->from[i];
        while (len > 0 && path[len - 1] != '.' && path[len - 1] != '[') len--;
        if (len == 0) return o->root;
        len--;  // drop the '.' or '['
    }
}

void config_origins_free(CfgOrigins *o) {
    if (!o) return;
    for (int i = 0; i < o->n; i++) {
        free(o->path[i]);
        free(o->from[i]);
    }
    free(o->path);
    free(o->from);
    free(o->slot);
    free(o->root);
    free(o);
}

// offset of the first byte of s that is not well-formed UTF-8 (overlong forms, UTF-16 surrogates and
// code points above U+10FFFF included), or -1 when all of s is
static long utf8_bad_at_(const char *str) {
    const unsigned char *s = (const unsigned char *)str;
    for (long i = 0; s[i];) {
        unsigned c = s[i];
        int n = c < 0x80 ? 0 : c >= 0xc2 && c <= 0xdf ? 1 : c >= 0xe0 && c <= 0xef ? 2
              : c >= 0xf0 && c <= 0xf4 ? 3 : -1;  // c0, c1 (overlong) and f5..ff never start one
        if (n < 0) return i;
        // the second byte's range is narrower after e0 (overlong), ed (surrogates), f0 (overlong), f4 (> 10ffff)
        unsigned lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80, hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
        for (int k = 1; k <= n; k++) {
            unsigned b = s[i + k];
            if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xbf)) return i;
        }
        i += 1 + n;
    }
    return -1;
}

// a string value (or key name) that is not UTF-8 would reach run names and the config.json that other
// tools (Python's json) must read back: refused, naming where it is
static int check_utf8_(const char *s, const char *from, const char *path, const char *what, Err *e) {
    long at = utf8_bad_at_(s);
    if (at < 0) return 0;
    return fail_(e, from, path && path[0] ? path : NULL, "%s is not valid UTF-8 (byte 0x%02x at offset %ld); config "
                 "strings must be UTF-8", what, (unsigned)(unsigned char)s[at], at);
}

// Record everything inside v (members of an object, items of a list as "prefix[i]", recursively) as set
// by `from`; a number or string has nothing inside. cJSON keeps both copies of a repeated key and the
// merge would silently keep one, so repeats are caught here, and strings that are not UTF-8 too.
static int cmp_name_(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

// the first repeated member name of object v (sorted, so n log n in its size), or NULL
static const char *repeated_key_(const cJSON *v) {
    int n = 0;
    for (const cJSON *c = v->child; c; c = c->next) n++;
    if (n < 2) return NULL;
    const char **names = xmalloc((size_t)n * sizeof *names);
    n = 0;
    for (const cJSON *c = v->child; c; c = c->next) names[n++] = c->string;
    qsort(names, (size_t)n, sizeof *names, cmp_name_);
    const char *rep = NULL;
    for (int i = 1; i < n && !rep; i++)
        if (strcmp(names[i - 1], names[i]) == 0) rep = names[i];
    free(names);
    return rep;
}

static int record_tree_(CfgOrigins *o, const char *prefix, const cJSON *v, const char *from, Err *e) {
    int i = 0;
    if (cJSON_IsObject(v)) {
        for (const cJSON *c = v->child; c; c = c->next)
            if (check_utf8_(c->string, from, prefix, "a key name", e)) return -1;
        const char *rep = repeated_key_(v);
        if (rep) {
            char *path = join_path_(prefix, rep);
            fail_(e, from, NULL, "duplicate key '%s'", path);
            free(path);
            return -1;
        }
    }
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        int list = cJSON_IsArray(v), rc = 0;
        char *path = list ? item_path_(prefix, i) : join_path_(prefix, c->string);
        if (cJSON_IsString(c)) rc = check_utf8_(c->valuestring, from, path, "the string", e);
        if (!rc) origins_set_(o, path, from);
        if (!rc) rc = record_tree_(o, path, c, from, e);
        free(path);
        if (rc) return -1;
    }
    return 0;
}

// ----------------------------------------------------------------------------
// loading

// do two objects name different "kind"s (a mixer, schedule or task of another kind)? Such an object
// replaces the other whole, since the options of one kind mean nothing to another (an attention mixer's
// "heads" merged into a kla mixer would be an unknown key).
static int kinds_differ_(const cJSON *a, const cJSON *b) {
    const cJSON *ka = cJSON_GetObjectItemCaseSensitive(a, "kind"), *kb = cJSON_GetObjectItemCaseSensitive(b, "kind");
    return cJSON_IsString(ka) && cJSON_IsString(kb) && strcmp(ka->valuestring, kb->valuestring) != 0;
}

// Move every member of src into dst: objects on both sides merge key by key (unless they name different
// kinds), anything else from src replaces dst's member whole (a list in a child file is the new list, not
// an append). Empties src. dst's members are found through a hash of their names, so merging stays linear
// in the sizes (a lookup per member was quadratic: two files of 16,000 keys took 0.5 s).
static void merge_into_(cJSON *dst, cJSON *src) {
    size_t n = 2;
    for (const cJSON *c = dst->child; c; c = c->next) n++;
    for (const cJSON *c = src->child; c; c = c->next) n++;
    size_t cap = 4;
    while (cap < 2 * n) cap *= 2;
    cJSON **slot = xcalloc(cap, sizeof *slot);
    for (cJSON *d = dst->child; d; d = d->next) {
        size_t s = path_hash_(d->string, strlen(d->string)) & (cap - 1);
        while (slot[s]) s = (s + 1) & (cap - 1);
        slot[s] = d;
    }
    while (src->child) {
        cJSON *c = cJSON_DetachItemViaPointer(src, src->child);
        size_t s = path_hash_(c->string, strlen(c->string)) & (cap - 1);
        while (slot[s] && strcmp(slot[s]->string, c->string) != 0) s = (s + 1) & (cap - 1);
        cJSON *d = slot[s];
        if (d && cJSON_IsObject(d) && cJSON_IsObject(c) && !kinds_differ_(d, c)) {
            merge_into_(d, c);
            cJSON_Delete(c);
        } else if (d) {
            cJSON_ReplaceItemViaPointer(dst, d, c);
            slot[s] = c;
        } else {
            cJSON_AddItemToObject(dst, c->string, c);
            slot[s] = c;
        }
    }
    free(slot);
}

// a config file: a regular file (a FIFO or device would block or never end: refused before reading) of at
// most CFG_FILE_MAX bytes
static char *read_text_(const char *path, Err *e) {
    int not_regular;
    unsigned mode = 0;
    FILE *f = fopen_regular(path, &not_regular, &mode);
    if (!f && not_regular) {
        fail_(e, path, NULL, "is %s, not a regular file; a config must be a JSON file", file_kind(mode));
        return NULL;
    }
    if (!f) {
        fail_(e, path, NULL, "cannot open (%s)", strerror(errno));
        return NULL;
    }
    size_t n = 0, cap = 4096;
    char *buf = xmalloc(cap);
    for (;;) {
        n += fread(buf + n, 1, cap - 1 - n, f);
        if (n > CFG_FILE_MAX) {  // read at most twice the limit, whatever the file's size
            fclose(f);
            free(buf);
            fail_(e, path, NULL, "larger than %d MiB; a config file is at most that (is it a config?)",
                  CFG_FILE_MAX >> 20);
            return NULL;
        }
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

// One "[i]" of an override path at *p: the index (at most INT_MAX), *p moved past the ']'; -1 if malformed.
static int parse_index_(const char **p) {
    const char *s = *p + 1;
    long i = 0;
    if (*s < '0' || *s > '9') return -1;
    for (; *s >= '0' && *s <= '9'; s++)
        if ((i = 10 * i + (*s - '0')) > INT_MAX) return -1;
    if (*s != ']') return -1;
    *p = s + 1;
    return (int)i;
}

// "--set <text>" for messages, bytes that are not UTF-8 shown as \xNN (the text itself is refused)
static void shown_text_(const char *text, char *out, size_t n) {
    snprintf(out, n, "--set ");
    for (long at; (at = utf8_bad_at_(text)) >= 0; text += at + 1)
        append_(out, n, "%.*s\\x%02x", (int)at, text, (unsigned)(unsigned char)text[at]);
    append_(out, n, "%s", text);
}

// "a.b[2].c=value": value is JSON when it parses whole as JSON, else a plain string; missing objects on
// the way are created, list items ("[i]", from 0) must already be there, and an object value merges into
// an object already there like a child file would (replacing it when their "kind"s differ).
static int apply_override_(cJSON *root, const char *text, CfgOrigins *o, Err *e) {
    const char *eq = strchr(text, '=');
    char origin[CFG_STR_MAX + 16];
    shown_text_(text, origin, sizeof origin);
    if (!eq) return fail_(e, origin, NULL, "expected key=value (e.g. --set train.lr=3e-4)");
    // walk the path: obj is the object holding the current name, cur its value (NULL when absent) or the
    // list item its indices lead to (then held by list); walked is the path so far, indices normalised
    char *walked = xcalloc(1, (size_t)(eq - text) + 2), *name = NULL;
    cJSON *obj = root, *cur = NULL, *list = NULL;
    const char *p = text;
    int rc = 0, parts = 1;
    for (const char *q = text; q < eq; q++) parts += *q == '.' || *q == '[';
    if (parts > CFG_SET_DEPTH_MAX) {
        free(walked);
        return fail_(e, origin, NULL, "the key has %d names and [i] indices; at most %d (config keys nest a few "
                     "levels deep)", parts, CFG_SET_DEPTH_MAX);
    }
    size_t walked_len = 0;
    for (;;) {
        size_t len = strcspn(p, ".[=");
        if (len == 0) {
            rc = fail_(e, origin, NULL, "empty key name before '='");
            break;
        }
        free(name);
        name = strndup(p, len);
        walked_len += (size_t)sprintf(walked + walked_len, "%s%s", walked[0] ? "." : "", name);
        cur = cJSON_GetObjectItemCaseSensitive(obj, name);
        list = NULL;
        for (p += len; *p == '[' && !rc;) {
            int i = parse_index_(&p), n = cJSON_GetArraySize(cur);
            char what[160];
            if (i < 0) {
                rc = fail_(e, origin, NULL, "bad list index after '%s' (expected [0], [1], ...)", walked);
            } else if (!cur) {
                rc = fail_(e, origin, NULL, "'%s' is not set, so it has no item [%d]", walked, i);
            } else if (!cJSON_IsArray(cur)) {
                describe_(cur, what, sizeof what);
                rc = fail_(e, origin, NULL, "'%s' is %s, not a list", walked, what);
            } else if (i >= n) {
                rc = fail_(e, origin, NULL, "'%s' has %d item%s, so no item [%d]", walked, n, n == 1 ? "" : "s", i);
            } else {
                list = cur;
                cur = cJSON_GetArrayItem(list, i);
                walked_len += (size_t)sprintf(walked + walked_len, "[%d]", i);
            }
        }
        if (rc || *p == '=') break;
        if (*p != '.') {
            rc = fail_(e, origin, NULL, "expected '.', '[' or '=' after '%s'", walked);
            break;
        }
        if (!cur) {
            cur = cJSON_AddObjectToObject(obj, name);
            origins_set_(o, walked, origin);
        } else if (!cJSON_IsObject(cur)) {
            char what[160];
            describe_(cur, what, sizeof what);
            rc = fail_(e, origin, NULL, "'%s' is %s, not an object%s%s%s", walked, what,
                       cJSON_IsArray(cur) ? " (name an item: " : "", cJSON_IsArray(cur) ? walked : "",
                       cJSON_IsArray(cur) ? "[0], ...)" : "");
            break;
        }
        obj = cur;
        p++;
    }
    cJSON *val = NULL;
    if (!rc) {
        val = cJSON_ParseWithOpts(eq + 1, NULL, 1);
        if (!val) val = cJSON_CreateString(eq + 1);
        origins_set_(o, walked, origin);
        rc = check_utf8_(walked, origin, NULL, "the key", e);
        if (!rc && cJSON_IsString(val)) rc = check_utf8_(val->valuestring, origin, walked, "the string", e);
        if (!rc) rc = record_tree_(o, walked, val, origin, e);
    }
    if (rc) {
        cJSON_Delete(val);
    } else if (cur && cJSON_IsObject(cur) && cJSON_IsObject(val) && !kinds_differ_(cur, val)) {
        merge_into_(cur, val);
        cJSON_Delete(val);
    } else if (list) {
        cJSON_ReplaceItemViaPointer(list, cur, val);
    } else if (cur) {
        cJSON_ReplaceItemInObjectCaseSensitive(obj, name, val);
    } else {
        cJSON_AddItemToObject(obj, name, val);
    }
    free(name);
    free(walked);
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

// a CFG_FLOAT whose default is null: null (or absence) means unset, stored as NaN
static int nullable_(const CfgKey *k) {
    return k->type == CFG_FLOAT && k->def && strcmp(k->def, "null") == 0;
}

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
        if (nullable_(k)) append_(buf, n, ", or null");
    } else if (k->type == CFG_OBJLIST) {
        int lo = (int)k->min, hi = (int)k->max;
        if (lo > 0 && hi > 0) snprintf(buf, n, "%d to %d items", lo, hi);
        else if (hi > 0) snprintf(buf, n, "at most %d item%s", hi, hi == 1 ? "" : "s");
        else if (lo > 0) snprintf(buf, n, "at least %d item%s", lo, lo == 1 ? "" : "s");
    } else if (k->type == CFG_STRLIST) {
        snprintf(buf, n, "at most %d entries", CFG_LIST_MAX);
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
static void free_keys_(char *p, const CfgSection *sec, int n_keys);

// the items of a bound list of objects and the list's array, leaving an empty list
static void free_list_(CfgList *l, const CfgKey *k) {
    for (int i = 0; i < l->n; i++) free_keys_((char *)l->items + i * k->elem_size, k->section, k->section->n_keys);
    free(l->items);
    l->items = NULL;
    l->n = 0;
}

// what binding allocated in the first n_keys keys of sec (bound, or zeroed)
static void free_keys_(char *p, const CfgSection *sec, int n_keys) {
    for (int i = 0; i < n_keys; i++) {
        const CfgKey *k = &sec->keys[i];
        char *dst = p + k->offset;
        if (k->type == CFG_SECTION) {
            free_keys_(dst, k->section, k->section->n_keys);
        } else if (k->type == CFG_OBJLIST) {
            free_list_((CfgList *)dst, k);
        } else if (k->type == CFG_JSON) {
            cJSON_Delete(*(cJSON **)dst);
            *(cJSON **)dst = NULL;
        }
    }
}

// A list of objects: each item is bound into a zeroed element of a fresh array, with its own path
// ("groups[2]") so that errors and origins name the item. On error the array is freed again.
static int bind_objlist_(CfgList *l, const CfgKey *k, const cJSON *v, const char *path, const char *origin,
                         const CfgOrigins *o, Err *e) {
    char what[160];
    describe_(v, what, sizeof what);
    l->n = 0;
    l->items = NULL;
    if (!k->section || !k->elem_size)
        return fail_(e, "schema", path, "a list of objects needs .section and .elem_size");
    if (!cJSON_IsArray(v)) return fail_(e, origin, path, "expected a list of objects, got %s", what);
    int n = cJSON_GetArraySize(v), lo = (int)k->min, hi = (int)k->max;
    if (hi > 0 && n > hi) return fail_(e, origin, path, "list of %d items is too long (at most %d allowed)", n, hi);
    if (n < lo)
        return fail_(e, origin, path, "list of %d item%s is too short (at least %d required)", n, n == 1 ? "" : "s",
                     lo);
    // a schema default is not in the tree, so the origins of its items would point at the wrong file
    const CfgOrigins *item_o = strcmp(origin ? origin : "", "schema default") == 0 ? NULL : o;
    if (n) l->items = xcalloc((size_t)n, k->elem_size);
    int rc = 0;
    for (const cJSON *c = v->child; c && !rc; c = c->next) {
        char *item = item_path_(path, l->n);
        if (!cJSON_IsObject(c)) {
            describe_(c, what, sizeof what);
            rc = fail_(e, item_o ? origins_get_(item_o, item) : origin, item, "expected an object, got %s", what);
        } else {
            rc = bind_section_((char *)l->items + l->n * k->elem_size, k->section, c, item, item_o, e);
            l->n += !rc;
        }
        free(item);
    }
    if (rc) free_list_(l, k);
    return rc;
}

static int bind_value_(char *dst, const CfgKey *k, const cJSON *v, const char *path, const char *origin,
                       const CfgOrigins *o, Err *e) {
    static const char *expected[] = {
        [CFG_INT] = "an integer", [CFG_FLOAT] = "a number", [CFG_BOOL] = "true or false",
        [CFG_STR] = "a string", [CFG_ENUM] = "a string", [CFG_STRLIST] = "a string or a list of strings",
        [CFG_SECTION] = "an object", [CFG_OBJLIST] = "a list of objects", [CFG_JSON] = "an object",
    };
    char what[160] = "";
    if (v) describe_(v, what, sizeof what);
    switch (k->type) {
    case CFG_INT:
    case CFG_FLOAT: {
        double x = cJSON_IsNumber(v) ? v->valuedouble : 0, lo, hi;
        if (nullable_(k) && cJSON_IsNull(v)) {
            *(double *)dst = NAN;
            return 0;
        }
        if (!cJSON_IsNumber(v) || (k->type == CFG_INT && x != floor(x)))
            return fail_(e, origin, path, "expected %s%s, got %s", expected[k->type], nullable_(k) ? " or null" : "",
                         what);
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
    case CFG_OBJLIST:
        return bind_objlist_((CfgList *)dst, k, v, path, origin, o, e);
    case CFG_JSON:
        if (!cJSON_IsObject(v)) return fail_(e, origin, path, "expected %s, got %s", expected[k->type], what);
        *(cJSON **)dst = cJSON_Duplicate(v, 1);
        return 0;
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

// when a dotted "--set <kind_path>=x" (or ="x") set kind_path, that --set with kind = x; else NULL. The
// kind may be gone from the object being bound (a mixer's options are bound without it)
static const char *set_kind_(const CfgOrigins *o, const char *kind_path, char *kind, size_t n) {
    for (int i = 0; o && i < o->n; i++) {
        if (strcmp(o->path[i], kind_path) != 0) continue;
        const char *from = o->from[i];
        size_t len = strlen(kind_path);
        if (strncmp(from, "--set ", 6) != 0 || strncmp(from + 6, kind_path, len) != 0 || from[6 + len] != '=')
            return NULL;
        const char *val = from + 7 + len;
        cJSON *j = cJSON_Parse(val);
        snprintf(kind, n, "%s", cJSON_IsString(j) ? j->valuestring : val);
        cJSON_Delete(j);
        return from;
    }
    return NULL;
}

// obj may be NULL (a section absent from the file): every key then takes its default. On error, what the
// keys bound so far allocated is freed again.
static int bind_section_(char *out, const CfgSection *sec, const cJSON *obj, const char *prefix,
                         const CfgOrigins *o, Err *e) {
    // unknown keys first: a misspelt required key should read as a typo, not as a missing key
    for (const cJSON *c = obj ? obj->child : NULL; c; c = c->next) {
        int i = 0;
        while (i < sec->n_keys && strcmp(sec->keys[i].name, c->string) != 0) i++;
        if (i < sec->n_keys) continue;
        char *path = join_path_(prefix, c->string), hint[640];
        // "--set model.mixer.kind=kla" over a file's attention mixer keeps the file's "heads": the user
        // changed the kind, so say that and how to replace the whole object rather than blame the file
        char *kind_path = join_path_(prefix, "kind"), kind[CFG_STR_MAX];
        const char *kind_from = set_kind_(o, kind_path, kind, sizeof kind), *key_from = origins_get_(o, path);
        if (kind_from && key_from && strncmp(key_from, "--set ", 6) != 0)
            fail_(e, kind_from, NULL, "'%s' (from %s) is not an option of %s \"%s\": a --set of '%s' alone "
                  "keeps the other options of '%s', which were for another kind; replace the whole object "
                  "instead, e.g. --set '%s={\"kind\":\"%s\"}'", path, key_from, kind_path, kind, kind_path,
                  prefix, prefix, kind);
        else {
            unknown_hint_(sec, prefix, c->string, hint, sizeof hint);
            fail_(e, key_from, NULL, "unknown key '%s'%s", path, hint);
        }
        free(kind_path);
        free(path);
        return -1;
    }
    // a key missing from a list item is missing where the list was set (a list is replaced whole, never
    // merged); elsewhere it is missing from the file given to config_load
    const char *missing_from = strchr(prefix, '[') ? origins_get_(o, prefix) : o ? o->root : NULL;
    for (int i = 0; i < sec->n_keys; i++) {
        const CfgKey *k = &sec->keys[i];
        char *path = join_path_(prefix, k->name);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, k->name);
        const char *origin = origins_get_(o, path);
        cJSON *def = NULL;
        int rc = 0;
        if (!v && k->type != CFG_SECTION) {
            if (!k->def)
                rc = fail_(e, missing_from, NULL, "missing required key '%s'%s%s%s", path,
                           k->doc ? " (" : "", k->doc ? k->doc : "", k->doc ? ")" : "");
            else if (!(v = def = cJSON_Parse(k->def)))
                rc = fail_(e, "schema", path, "default %s is not valid JSON", k->def);
            origin = "schema default";
        }
        if (!rc) rc = bind_value_(out + k->offset, k, v, path, origin, o, e);
        cJSON_Delete(def);
        free(path);
        if (rc) {
            free_keys_(out, sec, i);
            return -1;
        }
    }
    return 0;
}

int config_bind_at(void *out, const CfgSection *schema, const cJSON *node, const CfgOrigins *origins,
                   const char *path, Err *e) {
    if (!path[0] && !cJSON_IsObject(node))
        return fail_(e, origins ? origins->root : NULL, NULL, "the configuration must be a JSON object");
    if (node && !cJSON_IsObject(node)) {
        char what[160];
        describe_(node, what, sizeof what);
        return fail_(e, origins_get_(origins, path), path, "expected an object, got %s", what);
    }
    return bind_section_(out, schema, node, path, origins, e);
}

int config_bind(void *out, const CfgSection *schema, const cJSON *root, const CfgOrigins *origins, Err *e) {
    return config_bind_at(out, schema, root, origins, "", e);
}

void config_free(void *cfg, const CfgSection *schema) {
    if (cfg) free_keys_(cfg, schema, schema->n_keys);
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
        case CFG_FLOAT:
            v = nullable_(k) && isnan(*(const double *)p) ? cJSON_CreateNull() : cJSON_CreateNumber(*(const double *)p);
            break;
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
        case CFG_OBJLIST: {
            const CfgList *l = (const CfgList *)p;
            v = cJSON_CreateArray();
            for (int j = 0; j < l->n; j++)
                cJSON_AddItemToArray(v, dump_section_((const char *)l->items + j * k->elem_size, k->section));
            break;
        }
        case CFG_JSON: {
            const cJSON *j = *(cJSON *const *)p;
            v = j ? cJSON_Duplicate(j, 1) : cJSON_CreateObject();  // NULL: a zeroed or freed config
            break;
        }
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

// heading forced for the items of a list of objects, which the list's row points to
static void docs_section_(FILE *f, const CfgSection *sec, const char *path, const char *doc, int heading) {
    static const char *type_name[] = {
        [CFG_INT] = "integer", [CFG_FLOAT] = "number", [CFG_BOOL] = "boolean", [CFG_STR] = "string",
        [CFG_ENUM] = "one of", [CFG_STRLIST] = "string or list of strings", [CFG_SECTION] = "section",
        [CFG_OBJLIST] = "list of objects", [CFG_JSON] = "object (validated by its owner)",
    };
    int rows = 0;
    for (int i = 0; i < sec->n_keys; i++) rows += sec->keys[i].type != CFG_SECTION;
    if (rows || (doc && doc[0]) || heading) fprintf(f, "## %s\n\n", path[0] ? path : "top level");
    if (doc && doc[0]) fprintf(f, "%s\n\n", doc);
    if (rows) fputs("| key | type | default | allowed | description |\n|---|---|---|---|---|\n", f);
    for (int i = 0; i < sec->n_keys; i++) {
        const CfgKey *k = &sec->keys[i];
        if (k->type == CFG_SECTION) continue;
        char name[256], def[CFG_STR_MAX + 8], allowed[CFG_STR_MAX], type[CFG_STR_MAX];
        snprintf(name, sizeof name, "`%s`", k->name);
        if (k->type == CFG_OBJLIST) snprintf(type, sizeof type, "%s (see %s%s%s[])", type_name[k->type], path,
                                             path[0] ? "." : "", k->name);
        else snprintf(type, sizeof type, "%s", type_name[k->type]);
        if (k->def) snprintf(def, sizeof def, "`%s`", k->def);
        else snprintf(def, sizeof def, "required");
        allowed_(k, allowed, sizeof allowed);
        put_cell_(f, name);
        put_cell_(f, type);
        put_cell_(f, def);
        put_cell_(f, allowed);
        put_cell_(f, k->doc ? k->doc : "");
        fputs("|\n", f);
    }
    if (rows) fputc('\n', f);
    // nested sections and the items of lists of objects, in schema order
    for (int i = 0; i < sec->n_keys; i++) {
        const CfgKey *k = &sec->keys[i];
        if (k->type != CFG_SECTION && k->type != CFG_OBJLIST) continue;
        char *sub = join_path_(path, k->name);
        if (k->type == CFG_SECTION) {
            docs_section_(f, k->section, sub, k->doc ? k->doc : k->section->doc, 0);
        } else {
            char *items = xmalloc(strlen(sub) + 3);
            sprintf(items, "%s[]", sub);
            docs_section_(f, k->section, items, k->section->doc, 1);
            free(items);
        }
        free(sub);
    }
}

void config_write_docs(void *fp, const CfgSection *schema) {
    docs_section_(fp, schema, "", schema->doc, 0);
}
