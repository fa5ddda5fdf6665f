/*
 * Configuration: bind (validate the merged tree against a schema into a struct, with errors that say where a
 * value came from and what is allowed), dump and the Markdown reference. config.h states the contract;
 * loading and the origins table are in config.c.
 */
#include "core/config.h"
#include "core/config_internal.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// did-you-mean threshold: a typo or two, more for long names, but never a whole different word
static int near_(const char *typed, int d) {
    int len = (int)strlen(typed);
    return d < len && (d <= 2 || d <= len / 3);
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
        cfg_fmt_num(lo, a);
        cfg_fmt_num(hi, b);
        if (k->type == CFG_FLOAT && lo == -DBL_MAX && hi == DBL_MAX) snprintf(buf, n, "any finite number");
        else snprintf(buf, n, "%s to %s", a, b);
        if (nullable_(k)) cfg_append(buf, n, ", or null");
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
        for (const char *p = k->choices; *p; p++) cfg_append(buf, n, *p == '|' ? ", " : "%c", *p);
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
        return cfg_fail(e, origin, path, "string of %zu bytes is too long (at most %d allowed)", len, CFG_STR_MAX - 1);
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
    cfg_describe(v, what, sizeof what);
    l->n = 0;
    l->items = NULL;
    if (!k->section || !k->elem_size)
        return cfg_fail(e, "schema", path, "a list of objects needs .section and .elem_size");
    if (!cJSON_IsArray(v)) return cfg_fail(e, origin, path, "expected a list of objects, got %s", what);
    int n = cJSON_GetArraySize(v), lo = (int)k->min, hi = (int)k->max;
    if (hi > 0 && n > hi) return cfg_fail(e, origin, path, "list of %d items is too long (at most %d allowed)", n, hi);
    if (n < lo)
        return cfg_fail(e, origin, path, "list of %d item%s is too short (at least %d required)", n, n == 1 ? "" : "s",
                     lo);
    // a schema default is not in the tree, so the origins of its items would point at the wrong file
    const CfgOrigins *item_o = strcmp(origin ? origin : "", "schema default") == 0 ? NULL : o;
    if (n) l->items = xcalloc((size_t)n, k->elem_size);
    int rc = 0;
    for (const cJSON *c = v->child; c && !rc; c = c->next) {
        char *item = cfg_item_path(path, l->n);
        if (!cJSON_IsObject(c)) {
            cfg_describe(c, what, sizeof what);
            rc = cfg_fail(e, item_o ? cfg_origin_of(item_o, item) : origin, item, "expected an object, got %s", what);
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
    if (v) cfg_describe(v, what, sizeof what);
    switch (k->type) {
    case CFG_INT:
    case CFG_FLOAT: {
        double x = cJSON_IsNumber(v) ? v->valuedouble : 0, lo, hi;
        if (nullable_(k) && cJSON_IsNull(v)) {
            *(double *)dst = NAN;
            return 0;
        }
        if (!cJSON_IsNumber(v) || (k->type == CFG_INT && x != floor(x)))
            return cfg_fail(e, origin, path, "expected %s%s, got %s", expected[k->type], nullable_(k) ? " or null" : "",
                         what);
        bounds_(k, &lo, &hi);
        if (!(x >= lo && x <= hi)) {
            char num[32], allowed[96];
            cfg_fmt_num(x, num);
            allowed_(k, allowed, sizeof allowed);
            return cfg_fail(e, origin, path, "%s is out of range (allowed: %s)", num, allowed);
        }
        if (k->type == CFG_INT) *(int *)dst = (int)x;
        else *(double *)dst = x;
        return 0;
    }
    case CFG_BOOL:
        if (!cJSON_IsBool(v)) return cfg_fail(e, origin, path, "expected %s, got %s", expected[k->type], what);
        *(int *)dst = cJSON_IsTrue(v);
        return 0;
    case CFG_STR:
    case CFG_ENUM: {
        if (!cJSON_IsString(v)) return cfg_fail(e, origin, path, "expected %s, got %s", expected[k->type], what);
        char hint[CFG_STR_MAX + 32], allowed[CFG_STR_MAX];
        if (k->type == CFG_ENUM && !choice_ok_(k->choices, v->valuestring, hint, sizeof hint)) {
            allowed_(k, allowed, sizeof allowed);
            *strrchr(what, '(') = 0;  // the value alone: `"bin" ` without "(a string)"
            return cfg_fail(e, origin, path, "%sis not allowed (allowed: %s%s)", what, allowed, hint);
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
        if (!cJSON_IsArray(v)) return cfg_fail(e, origin, path, "expected %s, got %s", expected[k->type], what);
        int n = cJSON_GetArraySize(v);
        if (n > CFG_LIST_MAX)
            return cfg_fail(e, origin, path, "list of %d items is too long (at most %d allowed)", n, CFG_LIST_MAX);
        char *item_path = xmalloc(strlen(path) + 16);
        int rc = 0;
        for (const cJSON *c = v->child; c && !rc; c = c->next) {
            sprintf(item_path, "%s[%d]", path, l->n);
            cfg_describe(c, what, sizeof what);
            if (!cJSON_IsString(c)) rc = cfg_fail(e, origin, item_path, "expected a string, got %s", what);
            else rc = copy_str_(l->v[l->n++], c, item_path, origin, e);
        }
        free(item_path);
        return rc;
    }
    case CFG_SECTION:
        if (v && !cJSON_IsObject(v)) return cfg_fail(e, origin, path, "expected %s, got %s", expected[k->type], what);
        return bind_section_(dst, k->section, v, path, o, e);
    case CFG_OBJLIST:
        return bind_objlist_((CfgList *)dst, k, v, path, origin, o, e);
    case CFG_JSON:
        if (!cJSON_IsObject(v)) return cfg_fail(e, origin, path, "expected %s, got %s", expected[k->type], what);
        *(cJSON **)dst = cJSON_Duplicate(v, 1);
        return 0;
    }
    return cfg_fail(e, "schema", path, "unknown key type %d", (int)k->type);
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
    if (prefix[0]) cfg_append(buf, n, " (allowed keys in '%s': ", prefix);
    else cfg_append(buf, n, " (allowed keys at the top level: ");
    for (int i = 0; i < sec->n_keys; i++) cfg_append(buf, n, "%s%s", i ? ", " : "", sec->keys[i].name);
    cfg_append(buf, n, ")");
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
        char *path = cfg_join_path(prefix, c->string), hint[640];
        // "--set model.mixer.kind=kla" over a file's attention mixer keeps the file's "heads": the user
        // changed the kind, so say that and how to replace the whole object rather than blame the file
        char *kind_path = cfg_join_path(prefix, "kind"), kind[CFG_STR_MAX];
        const char *kind_from = set_kind_(o, kind_path, kind, sizeof kind), *key_from = cfg_origin_of(o, path);
        if (kind_from && key_from && strncmp(key_from, "--set ", 6) != 0)
            cfg_fail(e, kind_from, NULL, "'%s' (from %s) is not an option of %s \"%s\": a --set of '%s' alone "
                  "keeps the other options of '%s', which were for another kind; replace the whole object "
                  "instead, e.g. --set '%s={\"kind\":\"%s\"}'", path, key_from, kind_path, kind, kind_path,
                  prefix, prefix, kind);
        else {
            unknown_hint_(sec, prefix, c->string, hint, sizeof hint);
            cfg_fail(e, key_from, NULL, "unknown key '%s'%s", path, hint);
        }
        free(kind_path);
        free(path);
        return -1;
    }
    // a key missing from a list item is missing where the list was set (a list is replaced whole, never
    // merged); elsewhere it is missing from the file given to config_load
    const char *missing_from = strchr(prefix, '[') ? cfg_origin_of(o, prefix) : o ? o->root : NULL;
    for (int i = 0; i < sec->n_keys; i++) {
        const CfgKey *k = &sec->keys[i];
        char *path = cfg_join_path(prefix, k->name);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, k->name);
        const char *origin = cfg_origin_of(o, path);
        cJSON *def = NULL;
        int rc = 0;
        if (!v && k->type != CFG_SECTION) {
            if (!k->def)
                rc = cfg_fail(e, missing_from, NULL, "missing required key '%s'%s%s%s", path,
                           k->doc ? " (" : "", k->doc ? k->doc : "", k->doc ? ")" : "");
            else if (!(v = def = cJSON_Parse(k->def)))
                rc = cfg_fail(e, "schema", path, "default %s is not valid JSON", k->def);
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
        return cfg_fail(e, origins ? origins->root : NULL, NULL, "the configuration must be a JSON object");
    if (node && !cJSON_IsObject(node)) {
        char what[160];
        cfg_describe(node, what, sizeof what);
        return cfg_fail(e, cfg_origin_of(origins, path), path, "expected an object, got %s", what);
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

static void diff_add_(const cJSON *a, const cJSON *b, const char *la, const char *lb, const char *path, cJSON *out) {
    cJSON *d = cJSON_CreateObject();
    if (a) cJSON_AddItemToObject(d, la, cJSON_Duplicate(a, 1));
    if (b) cJSON_AddItemToObject(d, lb, cJSON_Duplicate(b, 1));
    cJSON_AddItemToObject(out, path, d);
}

static void diff_(const cJSON *a, const cJSON *b, const char *la, const char *lb, int one_sided, const char *path,
                  cJSON *out) {
    if (cJSON_IsObject(a) && cJSON_IsObject(b)) {
        // b's keys in b's order, then (one_sided) the keys a alone has
        for (int side = 0; side < 2; side++) {
            const cJSON *from = side ? a : b, *other = side ? b : a;
            for (const cJSON *c = from->child; c; c = c->next) {
                const cJSON *o = cJSON_GetObjectItemCaseSensitive(other, c->string);
                if ((side && o) || (!o && !one_sided)) continue;
                char *sub = xmalloc(strlen(path) + strlen(c->string) + 2);
                sprintf(sub, "%s%s%s", path, path[0] ? "." : "", c->string);
                if (!o) diff_add_(side ? c : NULL, side ? NULL : c, la, lb, sub, out);
                else diff_(o, c, la, lb, one_sided, sub, out);
                free(sub);
            }
        }
        return;
    }
    if (cJSON_IsArray(a) && cJSON_IsArray(b) && cJSON_GetArraySize(a) == cJSON_GetArraySize(b)) {
        int i = 0;
        for (const cJSON *x = a->child, *y = b->child; x && y; x = x->next, y = y->next, i++) {
            char *sub = xmalloc(strlen(path) + 24);
            sprintf(sub, "%s[%d]", path, i);
            diff_(x, y, la, lb, one_sided, sub, out);
            free(sub);
        }
        return;
    }
    int same = cJSON_IsNumber(a) && cJSON_IsNumber(b) ? a->valuedouble == b->valuedouble : cJSON_Compare(a, b, 1);
    if (!same) diff_add_(a, b, la, lb, path, out);
}

void config_diff(const cJSON *a, const cJSON *b, const char *la, const char *lb, int one_sided, cJSON *out) {
    diff_(a, b, la, lb, one_sided, "", out);
}

void config_diff_describe(const cJSON *d, const char *la, const char *pa, const char *lb, const char *pb, char *buf,
                          size_t n) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(d, la), *y = cJSON_GetObjectItemCaseSensitive(d, lb);
    char *a = x ? cJSON_PrintUnformatted(x) : NULL, *b = y ? cJSON_PrintUnformatted(y) : NULL;
    snprintf(buf, n, "%s (%.40s %s, %.40s %s)", d->string, a ? a : "absent", pa, b ? b : "absent", pb);
    free(a);
    free(b);
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
        char *sub = cfg_join_path(path, k->name);
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
