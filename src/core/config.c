/*
 * Configuration: load (read, "base" inheritance, --set overrides) and the origins of every value.
 * config.h states the contract; binding, dump and docs are in config_bind.c.
 *
 * Loading yields one merged cJSON tree plus a table of origins (dotted path, list items as "a.b[2]" ->
 * the file or "--set ..." that set it). The table lives beside the tree rather than inside it so the tree
 * stays plain cJSON that merges and prints with cJSON's own functions; bind consults it only when it has an
 * error to report.
 * Every error is one line shaped "<origin>: <path>: <problem>", and the first error stops the work.
 */
#include "core/config.h"
#include "core/config_internal.h"
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

// a file loaded once already: a base named again (by another file, or twice in a list) is taken from here, so
// loading is linear in the files, not exponential in the mentions (20 files naming the next twice: 2^20 loads)
typedef struct LoadedFile {
    char *canon;
    cJSON *tree;          // the file merged over its bases
    int n;
    char **path, **from;  // (n,) the origins its load set, replayed at each further mention
} LoadedFile;

typedef struct LoadChain {  // the files being loaded, outermost first, to report "base" cycles
    int n;
    char *canon[CFG_BASE_DEPTH_MAX];
    const char *shown[CFG_BASE_DEPTH_MAX];
    LoadedFile *done;     // (n_done,) every file loaded so far
    int n_done;
} LoadChain;

// ----------------------------------------------------------------------------
// small helpers (config_internal.h: the binding's code uses them too)

char *cfg_join_path(const char *prefix, const char *name) {
    char *s = xmalloc(strlen(prefix) + strlen(name) + 2);
    sprintf(s, "%s%s%s", prefix, prefix[0] ? "." : "", name);
    return s;
}

// "prefix[i]", the path of a list item
char *cfg_item_path(const char *prefix, int i) {
    char *s = xmalloc(strlen(prefix) + 16);
    sprintf(s, "%s[%d]", prefix, i);
    return s;
}

void cfg_append(char *buf, size_t n, const char *fmt, ...) {
    size_t len = strlen(buf);
    if (len + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, n - len, fmt, ap);
    va_end(ap);
}

// shortest of %.15g / %.17g that reads back as the same double, so messages show 3e-4 as 0.0003
void cfg_fmt_num(double x, char buf[32]) {
    snprintf(buf, 32, "%.15g", x);
    if (strtod(buf, NULL) != x) snprintf(buf, 32, "%.17g", x);
}

// a JSON value as an error message shows it: `"512" (a string)`, `3.5 (a number)`, `a list`;
// strings are cut short and kept on one line
void cfg_describe(const cJSON *v, char *buf, size_t n) {
    if (cJSON_IsString(v)) {
        char s[48];
        size_t k = 0;
        for (const char *p = v->valuestring; *p && k < 40; p++) s[k++] = (unsigned char)*p < 0x20 ? '?' : *p;
        s[k] = 0;
        snprintf(buf, n, "\"%s%s\" (a string)", s, v->valuestring[k] ? "..." : "");
    } else if (cJSON_IsNumber(v)) {
        char num[32];
        cfg_fmt_num(v->valuedouble, num);
        snprintf(buf, n, "%s (a number)", num);
    } else if (cJSON_IsBool(v)) {
        snprintf(buf, n, "%s (a boolean)", cJSON_IsTrue(v) ? "true" : "false");
    } else {
        snprintf(buf, n, "%s", cJSON_IsNull(v) ? "null" : cJSON_IsArray(v) ? "a list" : "an object");
    }
}

// "<origin>: <path>: <problem>", either of the first two left out when NULL
int cfg_fail(Err *e, const char *origin, const char *path, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(e, "%s%s%s%s%s", origin ? origin : "", origin ? ": " : "", path ? path : "",
                   path ? ": " : "", msg);
}
// ----------------------------------------------------------------------------
// origins

// The table is hashed so that loading stays linear in the number of values (a scan of a list per lookup would
// make it quadratic, slow for lists of thousands of items: docs/results/speed_rounds.md, "Measurements moved
// from code comments").
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
        o->stamp[i] = ++o->clock;
        return;
    }
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 64;
        o->path = xrealloc(o->path, o->cap * sizeof *o->path);
        o->from = xrealloc(o->from, o->cap * sizeof *o->from);
        o->stamp = xrealloc(o->stamp, o->cap * sizeof *o->stamp);
        free(o->slot);
        o->n_slot = 2 * o->cap;
        o->slot = xcalloc((size_t)o->n_slot, sizeof *o->slot);
        for (int k = 0; k < o->n; k++) origins_slot_(o, k);
    }
    o->path[o->n] = xstrdup(path);
    o->stamp[o->n] = ++o->clock;
    o->from[o->n++] = xstrdup(from);
    origins_slot_(o, o->n - 1);
}

// where path was set: its own entry, else its nearest recorded parent (list items, keys created by a
// --set path), else the root file
const char *cfg_origin_of(const CfgOrigins *o, const char *path) {
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
    free(o->stamp);
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
    return cfg_fail(e, from, path && path[0] ? path : NULL, "%s is not valid UTF-8 (byte 0x%02x at offset %ld); config "
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
            char *path = cfg_join_path(prefix, rep);
            cfg_fail(e, from, NULL, "duplicate key '%s'", path);
            free(path);
            return -1;
        }
    }
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        int list = cJSON_IsArray(v), rc = 0;
        char *path = list ? cfg_item_path(prefix, i) : cfg_join_path(prefix, c->string);
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
// in the sizes (a scan of dst per member would make it quadratic, slow for files of thousands of keys:
// docs/results/speed_rounds.md, "Measurements moved from code comments").
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
        cfg_fail(e, path, NULL, "is %s, not a regular file; a config must be a JSON file", file_kind(mode));
        return NULL;
    }
    if (!f) {
        cfg_fail(e, path, NULL, "cannot open (%s)", strerror(errno));
        return NULL;
    }
    size_t n = 0, cap = 4096;
    char *buf = xmalloc(cap);
    for (;;) {
        n += fread(buf + n, 1, cap - 1 - n, f);
        if (n > CFG_FILE_MAX) {  // read at most twice the limit, whatever the file's size
            fclose(f);
            free(buf);
            cfg_fail(e, path, NULL, "larger than %d MiB; a config file is at most that (is it a config?)",
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
        cfg_fail(e, path, NULL, "cannot read (%s)", strerror(errsv));
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
    cfg_describe(base, what, sizeof what);
    if (!cJSON_IsString(base) && !cJSON_IsArray(base))
        return cfg_fail(e, path, "base", "expected a file name or a list of file names, got %s", what);
    const char *slash = strrchr(path, '/');
    int dir_len = slash ? (int)(slash - path) + 1 : 0;
    const cJSON *item = cJSON_IsString(base) ? base : base->child;
    for (; item; item = cJSON_IsString(base) ? NULL : item->next) {
        cfg_describe(item, what, sizeof what);
        if (!cJSON_IsString(item) || !item->valuestring[0])
            return cfg_fail(e, path, "base", "expected a file name, got %s", what);
        const char *name = item->valuestring;
        char *full = xmalloc(dir_len + strlen(name) + 1);
        sprintf(full, "%.*s%s", name[0] == '/' ? 0 : dir_len, path, name);
        char *canon = realpath(full, NULL);
        cJSON *tree = NULL;
        if (!canon) cfg_fail(e, path, "base", "cannot open \"%s\" (%s: %s)", name, full, strerror(errno));
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
            for (int j = i; j < ch->n; j++) cfg_append(chain, sizeof chain, "%s -> ", ch->shown[j]);
            cfg_fail(e, ch->shown[ch->n - 1], "base", "cycle: %s%s", chain, path);
            free(canon);
            return NULL;
        }
    }
    if (ch->n == CFG_BASE_DEPTH_MAX) {
        cfg_fail(e, path, "base", "chain longer than %d files", CFG_BASE_DEPTH_MAX);
        free(canon);
        return NULL;
    }
    for (int i = 0; i < ch->n_done; i++) {
        const LoadedFile *d = &ch->done[i];
        if (strcmp(d->canon, canon) != 0) continue;
        for (int k = 0; k < d->n; k++) origins_set_(o, d->path[k], d->from[k]);
        free(canon);
        return cJSON_Duplicate(d->tree, 1);
    }
    ch->canon[ch->n] = canon;
    ch->shown[ch->n++] = path;
    long clock0 = o->clock;

    cJSON *own = NULL, *base = NULL, *merged = NULL;
    char *text = read_text_(path, e);
    if (text) own = parse_text_(path, text, e);
    free(text);
    if (own && !cJSON_IsObject(own)) {
        char what[160];
        cfg_describe(own, what, sizeof what);
        cfg_fail(e, path, NULL, "the top level must be a JSON object, got %s", what);
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
    if (merged) {
        // kept with the origins set since clock0: this load's, each at its last value
        ch->done = xrealloc(ch->done, (size_t)(ch->n_done + 1) * sizeof *ch->done);
        LoadedFile *d = &ch->done[ch->n_done++];
        d->canon = xstrdup(canon);
        d->tree = cJSON_Duplicate(merged, 1);
        d->n = 0;
        for (int k = 0; k < o->n; k++) d->n += o->stamp[k] > clock0;
        d->path = xmalloc((size_t)(d->n ? d->n : 1) * sizeof *d->path);
        d->from = xmalloc((size_t)(d->n ? d->n : 1) * sizeof *d->from);
        for (int k = 0, j = 0; k < o->n; k++)
            if (o->stamp[k] > clock0) {
                d->path[j] = o->path[k];
                d->from[j++] = o->from[k];
            }
        for (int k = 0; k < d->n; k++) {
            d->path[k] = xstrdup(d->path[k]);
            d->from[k] = xstrdup(d->from[k]);
        }
    }
    free(ch->canon[--ch->n]);
    return merged;
}

static void load_chain_free_(LoadChain *ch) {
    for (int i = 0; i < ch->n_done; i++) {
        LoadedFile *d = &ch->done[i];
        for (int k = 0; k < d->n; k++) {
            free(d->path[k]);
            free(d->from[k]);
        }
        free(d->path);
        free(d->from);
        free(d->canon);
        cJSON_Delete(d->tree);
    }
    free(ch->done);
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
        cfg_append(out, n, "%.*s\\x%02x", (int)at, text, (unsigned)(unsigned char)text[at]);
    cfg_append(out, n, "%s", text);
}

// "a.b[2].c=value": value is JSON when it parses whole as JSON, else a plain string; missing objects on
// the way are created, list items ("[i]", from 0) must already be there, and an object value merges into
// an object already there like a child file would (replacing it when their "kind"s differ).
static int apply_override_(cJSON *root, const char *text, CfgOrigins *o, Err *e) {
    const char *eq = strchr(text, '=');
    char origin[CFG_STR_MAX + 16];
    shown_text_(text, origin, sizeof origin);
    if (!eq) return cfg_fail(e, origin, NULL, "expected key=value (e.g. --set train.lr=3e-4)");
    // walk the path: obj is the object holding the current name, cur its value (NULL when absent) or the
    // list item its indices lead to (then held by list); walked is the path so far, indices normalised
    char *walked = xcalloc(1, (size_t)(eq - text) + 2), *name = NULL;
    cJSON *obj = root, *cur = NULL, *list = NULL;
    const char *p = text;
    int rc = 0, parts = 1;
    for (const char *q = text; q < eq; q++) parts += *q == '.' || *q == '[';
    if (parts > CFG_SET_DEPTH_MAX) {
        free(walked);
        return cfg_fail(e, origin, NULL, "the key has %d names and [i] indices; at most %d (config keys nest a few "
                     "levels deep)", parts, CFG_SET_DEPTH_MAX);
    }
    size_t walked_len = 0;
    for (;;) {
        size_t len = strcspn(p, ".[=");
        if (len == 0) {
            rc = cfg_fail(e, origin, NULL, "empty key name before '='");
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
                rc = cfg_fail(e, origin, NULL, "bad list index after '%s' (expected [0], [1], ...)", walked);
            } else if (!cur) {
                rc = cfg_fail(e, origin, NULL, "'%s' is not set, so it has no item [%d]", walked, i);
            } else if (!cJSON_IsArray(cur)) {
                cfg_describe(cur, what, sizeof what);
                rc = cfg_fail(e, origin, NULL, "'%s' is %s, not a list", walked, what);
            } else if (i >= n) {
                rc = cfg_fail(e, origin, NULL, "'%s' has %d item%s, so no item [%d]", walked, n, n == 1 ? "" : "s", i);
            } else {
                list = cur;
                cur = cJSON_GetArrayItem(list, i);
                walked_len += (size_t)sprintf(walked + walked_len, "[%d]", i);
            }
        }
        if (rc || *p == '=') break;
        if (*p != '.') {
            rc = cfg_fail(e, origin, NULL, "expected '.', '[' or '=' after '%s'", walked);
            break;
        }
        if (!cur) {
            cur = cJSON_AddObjectToObject(obj, name);
            origins_set_(o, walked, origin);
        } else if (!cJSON_IsObject(cur)) {
            char what[160];
            cfg_describe(cur, what, sizeof what);
            rc = cfg_fail(e, origin, NULL, "'%s' is %s, not an object%s%s%s", walked, what,
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
    if (!canon) cfg_fail(e, path, NULL, "cannot open (%s)", strerror(errno));
    else root = load_file_(path, canon, &ch, o, e);
    load_chain_free_(&ch);
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
