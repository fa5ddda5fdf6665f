/*
 * Command-line options from a table, so that parsing, validation and --help come from one place and
 * cannot disagree. Accepts `--name value` and `--name=value`; an unknown option is an error with a
 * did-you-mean; numbers are checked completely (no trailing garbage) and against their bounds.
 */
#ifndef SEQ_ARGS_H
#define SEQ_ARGS_H

#include <stdio.h>
#include "core/err.h"

#define ARGS_LIST_MAX 64

typedef enum { ARG_STR, ARG_INT, ARG_DOUBLE, ARG_FLAG, ARG_LIST } ArgType;

typedef struct ArgList {  // a repeatable option (--set a=1 --set b=2) or the positional arguments
    int n;
    const char *v[ARGS_LIST_MAX];
} ArgList;

typedef struct ArgSpec {
    const char *name;     // "--vocab-size"
    ArgType type;
    void *dst;            // const char** | long* | double* | int* (flag) | ArgList*
    const char *metavar;  // "N", "FILE" (NULL for flags)
    const char *help;     // one line; say the default here
    double min, max;      // bounds for ARG_INT / ARG_DOUBLE (both 0 = unbounded)
} ArgSpec;

// the --threads option of the tools that load a trained run (seqeval and its --generate; run_load_model applies it)
#define ARGS_THREADS_SPEC(dst)                                                                                      \
    {"--threads", ARG_INT, (dst), "N", "CPU threads (default: the run's run.threads, or OMP_NUM_THREADS where that is 0)", \
     1, 4096}

// argv[start..argc) against specs; positional arguments go to *positional (NULL = none allowed)
int args_parse(int argc, char **argv, int start, const ArgSpec *specs, int n_specs, ArgList *positional, Err *e);
void args_usage(FILE *f, const ArgSpec *specs, int n_specs);
// the "environment:" part of seqtrain's and seqeval's --help: the variables they read, with this CPU's kernel sets;
// threads_opt: the tool has a --threads option, which OMP_NUM_THREADS yields to
void args_env_usage(FILE *f, int threads_opt);
// "512,1024,2048" -> out (up to max values, each in [lo, hi]); returns the count or -1
int args_int_list(const char *s, long *out, int max, long lo, long hi, const char *what, Err *e);

#endif
