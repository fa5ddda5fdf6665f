#include "cli/run_config.h"

#include <stddef.h>
#include <string.h>

#define KEY_(S, name, type, field, def, lo, hi, choices, doc) \
    {name, type, offsetof(S, field), def, lo, hi, choices, NULL, doc}

static const CfgKey RUN_KEYS_[] = {
    KEY_(RunSection, "seed", CFG_INT, seed, "1337", 0, 2147483647, NULL,
         "Seed of everything random in the run (data order, initialisation)."),
    KEY_(RunSection, "threads", CFG_INT, threads, "0", 0, 4096, NULL,
         "OpenMP threads; 0 = OMP_NUM_THREADS, or all cores when that is unset."),
};

static const CfgKey DATA_KEYS_[] = {
    KEY_(DataSection, "train", CFG_STRLIST, train, NULL, 0, 0, NULL,
         "Training shards: a path or glob, or a list of them (seqtok, llm.c .bin or raw files)."),
    KEY_(DataSection, "val", CFG_STRLIST, val, "[]", 0, 0, NULL, "Validation shards (same forms as data.train)."),
    KEY_(DataSection, "test", CFG_STRLIST, test, "[]", 0, 0, NULL, "Test shards (same forms as data.train)."),
    KEY_(DataSection, "format", CFG_ENUM, format, "\"auto\"", 0, 0, "auto|seqtok|llmc|raw_u16|raw_u32",
         "Shard format; auto detects seqtok and llm.c shards by their magic, raw files must be named."),
    KEY_(DataSection, "vocab_size", CFG_INT, vocab_size, "0", 0, 1 << 30, NULL,
         "Vocabulary size; 0 = from the shard headers. Required for raw shards; token ids must be below it."),
    KEY_(DataSection, "tokenizer", CFG_STR, tokenizer, "\"\"", 0, 0, NULL,
         "SentencePiece .model of the shards (optional): checked against the shards' tokenizer hash and "
         "used to print text."),
    KEY_(DataSection, "cache_mb", CFG_INT, cache_mb, "256", 1, 1 << 20, NULL,
         "Memory for decoded shard frames, shared by all shards of a split (each keeps at least two frames)."),
    KEY_(DataSection, "shuffle", CFG_BOOL, shuffle, "true", 0, 0, NULL,
         "Visit training windows in a seeded random order, new each epoch; false = file order."),
};

static const CfgKey TRAIN_KEYS_[] = {
    KEY_(TrainSection, "batch_size", CFG_INT, batch_size, "8", 1, 1 << 20, NULL, "Sequences per micro-batch (B)."),
    KEY_(TrainSection, "seq_len", CFG_INT, seq_len, "512", 1, 1 << 24, NULL,
         "Training context length T; each sequence is a window of T+1 tokens (inputs and shifted targets)."),
};

#define SECTION_(name, doc, keys) {name, doc, keys, (int)(sizeof keys / sizeof keys[0])}
static const CfgSection RUN_SECTION_ = SECTION_("run", "How the run is seeded and threaded.", RUN_KEYS_);
static const CfgSection DATA_SECTION_ = SECTION_("data", "Token shards and how they are read.", DATA_KEYS_);
static const CfgSection TRAIN_SECTION_ = SECTION_("train", "Batch shape of training.", TRAIN_KEYS_);

static const CfgKey ROOT_KEYS_[] = {
    {"run", CFG_SECTION, offsetof(RunConfig, run), "{}", 0, 0, NULL, &RUN_SECTION_, RUN_SECTION_.doc},
    {"data", CFG_SECTION, offsetof(RunConfig, data), NULL, 0, 0, NULL, &DATA_SECTION_, DATA_SECTION_.doc},
    {"train", CFG_SECTION, offsetof(RunConfig, train), "{}", 0, 0, NULL, &TRAIN_SECTION_, TRAIN_SECTION_.doc},
};

const CfgSection RUN_CONFIG_SCHEMA = SECTION_("", "A run's configuration file.", ROOT_KEYS_);

int run_config_load(RunConfig *c, const char *path, const char *const *overrides, int n_overrides, Err *e) {
    CfgOrigins *origins = NULL;
    cJSON *root = config_load(path, overrides, n_overrides, &origins, e);
    if (!root) return -1;
    memset(c, 0, sizeof *c);
    int rc = config_bind(c, &RUN_CONFIG_SCHEMA, root, origins, e);
    cJSON_Delete(root);
    config_origins_free(origins);
    return rc;
}
