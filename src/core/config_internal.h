/*
 * What config.c (loading, origins) and config_bind.c (binding, dump, docs) share: the wording of paths, values
 * and errors, and the origin of a value. Not part of the interface (config.h is).
 */
#ifndef SEQ_CONFIG_INTERNAL_H
#define SEQ_CONFIG_INTERNAL_H

#include <stddef.h>
#include <cjson/cJSON.h>

#include "core/config.h"
#include "core/err.h"

// where each value came from: dotted path (list items as "a.b[2]") -> the file or "--set ..." that set it
struct CfgOrigins {
    char *root;  // the file given to config_load: missing keys are reported against it
    int n, cap;
    char **path, **from;
    int *slot, n_slot;  // open-addressing hash of path -> index + 1 (0 empty), n_slot a power of 2 >= 2 cap
    long *stamp, clock;  // (n,) when each entry was set last, on a clock ticking once a set: a file's load
                         // set the entries stamped after its start (config.c caches them with the file)
};

// "prefix.name" (or "name" at the top), freshly allocated
char *cfg_join_path(const char *prefix, const char *name);
// "prefix[i]", the path of a list item, freshly allocated
char *cfg_item_path(const char *prefix, int i);
// printf-style append to the NUL-terminated buf of n bytes, cut short when full
void cfg_append(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// shortest of %.15g / %.17g that reads back as the same double, so messages show 3e-4 as 0.0003
void cfg_fmt_num(double x, char buf[32]);
// a JSON value as an error message shows it: `"512" (a string)`, `3.5 (a number)`, `a list`
void cfg_describe(const cJSON *v, char *buf, size_t n);
// "<origin>: <path>: <problem>" into e, either of the first two left out when NULL; returns -1
int cfg_fail(Err *e, const char *origin, const char *path, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
// the file or --set that set path (or its nearest recorded parent), else the root file; NULL without origins
const char *cfg_origin_of(const CfgOrigins *o, const char *path);

#endif
