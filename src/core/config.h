/*
 * Configuration: JSON files read with cJSON into typed C structs, through a schema.
 *
 *   config_load()  reads a file, follows "base": "other.json" (relative to the including file,
 *                  recursively, cycles are an error) with a deep merge (objects merge key by key, anything
 *                  else is replaced by the child), then applies --set overrides ("train.lr=3e-4"; the value
 *                  is parsed as JSON when it is valid JSON, otherwise taken as a string). An override path
 *                  reaches into lists by index ("optim.groups[0].lr_mult=0.5"); the item must exist.
 *   config_bind()  validates the merged tree against a schema and fills a struct: an unknown key, a wrong
 *                  type or an out-of-range value is an error that names the key's full path (list items
 *                  as "optim.groups[1].lr_mult"), where it was set (file or --set), the bad value, what is
 *                  allowed, and a did-you-mean for near misses. Keys missing from the tree take their
 *                  schema default. config_bind_at() does the same for an object deeper in the tree (the
 *                  options of a mixer, validated by the mixer's own schema).
 *   config_dump()  the resolved config (every key, defaults included) as JSON, for --print-config and the
 *                  copy stored in each run directory; binding the dump again gives the same struct.
 *   config_diff()  the keys where two dumps differ (a checkpoint's config against the run's, rank 0's
 *                  against another MPI rank's), for messages naming each key and both values.
 *   config_free()  frees what bind allocated: a config whose schema has CFG_OBJLIST or CFG_JSON keys owns
 *                  memory and must be freed (configs of the other types own none; freeing them is harmless).
 *   config_write_docs()  the Markdown reference of a schema (docs/config.md is generated from it).
 */
#ifndef SEQ_CONFIG_H
#define SEQ_CONFIG_H

#include <stddef.h>
#include <cjson/cJSON.h>
#include "core/err.h"

#define CFG_STR_MAX 512   // bytes of a string value, NUL included
#define CFG_LIST_MAX 16   // items of a string list

typedef struct CfgStrList {  // a string or a list of strings ("data.train": "a/*.shard" or [...])
    int n;
    char v[CFG_LIST_MAX][CFG_STR_MAX];
} CfgStrList;

typedef enum {
    CFG_INT,      // int; bounds min..max
    CFG_FLOAT,    // double; bounds min..max
    CFG_BOOL,     // int 0/1
    CFG_STR,      // char[CFG_STR_MAX]
    CFG_ENUM,     // char[CFG_STR_MAX] holding one of choices ("a|b|c")
    CFG_STRLIST,  // CfgStrList
    CFG_SECTION,  // nested object described by .section, stored inline at .offset
    CFG_OBJLIST,  // CfgList of items of .elem_size bytes, each an object described by .section;
                  // items min..max (max 0 = no limit); default JSON text such as "[]"
    CFG_JSON,     // cJSON * (a deep copy, owned by the config) of any JSON object, left for its owner to
                  // validate (e.g. with config_bind_at); default such as "{}", so it is never NULL
} CfgType;

typedef struct CfgList {  // a bound CFG_OBJLIST: n items, an array allocated by bind (NULL when n == 0)
    int n;
    void *items;
} CfgList;

struct CfgSection;

typedef struct CfgKey {
    const char *name;
    CfgType type;
    size_t offset;                     // offsetof(struct, field) within the section's struct
    const char *def;                   // default as JSON text ("512", "\"auto\"", "[]"); NULL = required
                                       // (ignored for CFG_SECTION: a missing section binds its defaults);
                                       // "null" for a CFG_FLOAT makes it nullable: JSON null or a missing
                                       // key means unset, stored as NaN (the doc says what unset means)
    double min, max;                   // inclusive numeric bounds (CFG_INT, CFG_FLOAT); 0, 0 = unbounded;
                                       // CFG_OBJLIST: bounds on the number of items, max 0 = no limit
    union {                            // CFG_ENUM: choices "a|b|c"; CFG_OBJLIST: elem_size, the sizeof one
        const char *choices;           // item's struct. Initialised in braces, {"a|b"} or {NULL} (the
        size_t elem_size;              // first member) or {.elem_size = sizeof(Item)}, so that every key
    };                                 // keeps nine positional fields
    const struct CfgSection *section;  // CFG_SECTION; CFG_OBJLIST: the schema of one item
    const char *doc;                   // one or two sentences for docs/config.md and --help
} CfgKey;

typedef struct CfgSection {
    const char *name;  // "" for the root
    const char *doc;
    const CfgKey *keys;
    int n_keys;
} CfgSection;

// Where each value came from, so errors can name the file or the --set that set it.
typedef struct CfgOrigins CfgOrigins;

// Read path, resolve "base" chains, apply overrides (n_overrides strings "a.b[2].c=value").
// Returns the merged tree (caller frees with cJSON_Delete) and, if origins is non-NULL, a table of
// where each value was set, list items included as "a.b[2]" (free with config_origins_free). NULL on error.
cJSON *config_load(const char *path, const char *const *overrides, int n_overrides,
                   CfgOrigins **origins, Err *e);
void config_origins_free(CfgOrigins *o);

// Validate root against schema and fill out (a struct laid out as the schema says). origins may be NULL.
// out's previous contents are overwritten, not freed. On error, whatever this call allocated is freed
// again; on success, a schema with CFG_OBJLIST or CFG_JSON keys needs config_free(out, schema) later.
int config_bind(void *out, const CfgSection *schema, const cJSON *root, const CfgOrigins *origins, Err *e);

// config_bind for the object node found at path of the loaded tree ("model.mixer",
// "model.layers[2].mixer"; "" is the root, and then the same as config_bind): messages name keys by their
// full path and origins finds the file or --set that set them. A NULL node (absent from the tree) binds
// the schema's defaults, except at the root; anything but an object is an error.
int config_bind_at(void *out, const CfgSection *schema, const cJSON *node, const CfgOrigins *origins,
                   const char *path, Err *e);

// Free what bind allocated in cfg (CFG_OBJLIST arrays, recursively, and CFG_JSON copies) and leave those
// fields empty (n 0, NULL), so freeing twice is harmless. cfg must have been bound, or zeroed.
// run_config_load's callers (the tools) free nothing yet: they must once the run schema has such keys.
void config_free(void *cfg, const CfgSection *schema);

// The resolved config as a JSON tree (caller frees), every key of the schema present (unset nullable
// numbers as null, lists of objects item by item, CFG_JSON values as they are).
cJSON *config_dump(const void *cfg, const CfgSection *schema);

// Every leaf where two config_dump trees differ, added to out as "path": {la: a's value, lb: b's value}, paths as
// keys are written ("optim.lr", "model.layers[0].at"); numbers compare by value. A key only one side has is
// skipped (a schema of another version: a newer key binds its default) or, with one_sided, given with that
// side's value alone. Lists of another length differ as a whole.
void config_diff(const cJSON *a, const cJSON *b, const char *la, const char *lb, int one_sided, cJSON *out);
// one of config_diff's entries for a message: "optim.lr (0.002 <pa>, 0.5 <pb>)", each value cut to 40
// characters, a missing side "absent"; buf (n,)
void config_diff_describe(const cJSON *d, const char *la, const char *pa, const char *lb, const char *pb, char *buf,
                          size_t n);

// Markdown reference: one table per section (key, type, default, allowed, description), the items of
// a list of objects under "## path[]".
void config_write_docs(void *fp /* FILE* */, const CfgSection *schema);

// Levenshtein distance, for did-you-mean suggestions (also used by the command-line parsers).
int config_edit_distance(const char *a, const char *b);

#endif
