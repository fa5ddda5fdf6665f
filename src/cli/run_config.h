/*
 * The schema of a run's configuration file: one C struct per section, one CfgKey table per struct.
 * docs/config.md is generated from these tables (`seqtrain --config-docs`), so a key cannot exist
 * without its documentation; tests/test_docs.sh checks the committed file is current.
 */
#ifndef SEQ_RUN_CONFIG_H
#define SEQ_RUN_CONFIG_H

#include "core/config.h"

typedef struct RunSection {
    int seed;
    int threads;
} RunSection;

typedef struct DataSection {
    CfgStrList train, val, test;
    char format[CFG_STR_MAX];
    int vocab_size;
    char tokenizer[CFG_STR_MAX];
    int cache_mb;
    int shuffle;
} DataSection;

typedef struct TrainSection {
    int batch_size;
    int seq_len;
} TrainSection;

typedef struct RunConfig {
    RunSection run;
    DataSection data;
    TrainSection train;
} RunConfig;

extern const CfgSection RUN_CONFIG_SCHEMA;

// load + resolve (base, --set) + validate + bind: what every tool does with --config and --set
int run_config_load(RunConfig *c, const char *path, const char *const *overrides, int n_overrides, Err *e);

#endif
