/*
 * Configuration: JSON files read with cJSON into typed C structs, through a schema.
 *
 *   config_load()  reads a file, follows "base": "other.json" (relative to the including file,
 *                  recursively, cycles are an error) with a deep merge (objects merge key by key, anything
 *                  else is replaced by the child), then applies --set overrides ("train.lr=3e-4"; the value
 *                  is parsed as JSON when it is valid JSON, otherwise taken as a string).
 *   config_bind()  validates the merged tree against a schema and fills a struct: an unknown key, a wrong
 *                  type or an out-of-range value is an error that names the key's full path, where it was
 *                  set (file or --set), the bad value, what is allowed, and a did-you-mean for near misses.
 *                  Keys missing from the tree take their schema default.
 *   config_dump()  the resolved config (every key, defaults included) as JSON, for --print-config and the
 *                  copy stored in each run directory; binding the dump again gives the same struct.
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
} CfgType;

struct CfgSection;

typedef struct CfgKey {
    const char *name;
    CfgType type;
    size_t offset;                     // offsetof(struct, field) within the section's struct
    const char *def;                   // default as JSON text ("512", "\"auto\"", "[]"); NULL = required
                                       // (ignored for CFG_SECTION: a missing section binds its defaults)
    double min, max;                   // inclusive numeric bounds (CFG_INT, CFG_FLOAT); 0, 0 = unbounded
    const char *choices;               // CFG_ENUM: "a|b|c"
    const struct CfgSection *section;  // CFG_SECTION
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

// Read path, resolve "base" chains, apply overrides (n_overrides strings "a.b.c=value").
// Returns the merged tree (caller frees with cJSON_Delete) and, if origins is non-NULL, a table of
// where each leaf was set (free with config_origins_free). NULL on error.
cJSON *config_load(const char *path, const char *const *overrides, int n_overrides,
                   CfgOrigins **origins, Err *e);
void config_origins_free(CfgOrigins *o);

// Validate root against schema and fill out (a struct laid out as the schema says). origins may be NULL.
int config_bind(void *out, const CfgSection *schema, const cJSON *root, const CfgOrigins *origins, Err *e);

// The resolved config as a JSON tree (caller frees), every key of the schema present.
cJSON *config_dump(const void *cfg, const CfgSection *schema);

// Markdown reference: one table per section (key, type, default, allowed, description).
void config_write_docs(void *fp /* FILE* */, const CfgSection *schema);

// Levenshtein distance, for did-you-mean suggestions (also used by the command-line parsers).
int config_edit_distance(const char *a, const char *b);

#endif
