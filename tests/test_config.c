/*
 * Config loading and binding against a small schema shaped like the real one (two sections, a nested
 * section, every key type, a required key): defaults, "base" inheritance, --set overrides, every kind of
 * error message and where it says the value came from, dump -> bind round trips, the docs, and the edit
 * distance behind the did-you-mean hints. A second schema, shaped like the model and optimizer sections,
 * covers lists of objects, raw JSON values, nullable numbers, binding at a path, --set into list items
 * and config_free (the ASan build checks that nothing leaks). Fixture files are written to a fresh
 * temporary folder.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/config.h"
#include "test.h"

typedef struct OptimCfg {
    double beta1, beta2, weight_decay;
} OptimCfg;

typedef struct DataCfg {
    CfgStrList train, val;
    int seq_len;
    char format[CFG_STR_MAX];
} DataCfg;

typedef struct TrainCfg {
    double lr;
    int steps, compile;
    OptimCfg optim;
} TrainCfg;

typedef struct TestCfg {
    char name[CFG_STR_MAX];
    DataCfg data;
    TrainCfg train;
} TestCfg;

static const CfgKey optim_keys[] = {
    {"beta1", CFG_FLOAT, offsetof(OptimCfg, beta1), "0.9", 0, 1, {NULL}, NULL, "Adam beta1."},
    {"beta2", CFG_FLOAT, offsetof(OptimCfg, beta2), "0.95", 0, 1, {NULL}, NULL, "Adam beta2."},
    {"weight_decay", CFG_FLOAT, offsetof(OptimCfg, weight_decay), "0.1", 0, 0, {NULL}, NULL, "Decoupled | decay."},
};
static const CfgSection optim_sec = {"optim", "Optimizer.", optim_keys, 3};

static const CfgKey data_keys[] = {
    {"train", CFG_STRLIST, offsetof(DataCfg, train), NULL, 0, 0, {NULL}, NULL, "Training shards."},
    {"val", CFG_STRLIST, offsetof(DataCfg, val), "[]", 0, 0, {NULL}, NULL, "Validation shards."},
    {"seq_len", CFG_INT, offsetof(DataCfg, seq_len), "512", 1, 1048576, {NULL}, NULL, "Tokens per sequence."},
    {"format", CFG_ENUM, offsetof(DataCfg, format), "\"auto\"", 0, 0, {"auto|seqtok|llmc|raw_u16|raw_u32"}, NULL,
     "Shard format."},
};
static const CfgSection data_sec = {"data", "Data.", data_keys, 4};

static const CfgKey train_keys[] = {
    {"lr", CFG_FLOAT, offsetof(TrainCfg, lr), "3e-4", 0, 10, {NULL}, NULL, "Peak learning rate."},
    {"steps", CFG_INT, offsetof(TrainCfg, steps), "1000", 1, 1e9, {NULL}, NULL, "Optimizer steps."},
    {"compile", CFG_BOOL, offsetof(TrainCfg, compile), "false", 0, 0, {NULL}, NULL, "Fuse kernels."},
    {"optim", CFG_SECTION, offsetof(TrainCfg, optim), NULL, 0, 0, {NULL}, &optim_sec, NULL},
};
static const CfgSection train_sec = {"train", "Training.", train_keys, 4};

static const CfgKey root_keys[] = {
    {"name", CFG_STR, offsetof(TestCfg, name), "\"run\"", 0, 0, {NULL}, NULL, "Run name."},
    {"data", CFG_SECTION, offsetof(TestCfg, data), NULL, 0, 0, {NULL}, &data_sec, NULL},
    {"train", CFG_SECTION, offsetof(TestCfg, train), NULL, 0, 0, {NULL}, &train_sec, NULL},
};
static const CfgSection schema = {"", NULL, root_keys, 3};

// the extended schema: lists of objects (with a nullable number and a JSON value in their items), a
// JSON value with a default, and a mixer's own options for config_bind_at
typedef struct GroupCfg {
    char match[CFG_STR_MAX];
    double lr_mult, beta1;
    int decay;
} GroupCfg;

typedef struct LayerCfg {
    char at[CFG_STR_MAX];
    cJSON *mixer;
} LayerCfg;

typedef struct ExtModelCfg {
    int dim;
    cJSON *mixer;
    CfgList layers;
} ExtModelCfg;

typedef struct ExtOptimCfg {
    double beta1;
    CfgList groups;
} ExtOptimCfg;

typedef struct ExtCfg {
    ExtModelCfg model;
    ExtOptimCfg optim;
} ExtCfg;

typedef struct MixerOpts {
    char kind[CFG_STR_MAX];
    int window;
} MixerOpts;

static const CfgKey group_keys[] = {
    {"match", CFG_STR, offsetof(GroupCfg, match), NULL, 0, 0, {NULL}, NULL, "Parameter names."},
    {"lr_mult", CFG_FLOAT, offsetof(GroupCfg, lr_mult), "1", 0, 100, {NULL}, NULL, "Learning rate factor."},
    {"beta1", CFG_FLOAT, offsetof(GroupCfg, beta1), "null", 0, 1, {NULL}, NULL, "null = the global optim.beta1."},
    {"decay", CFG_BOOL, offsetof(GroupCfg, decay), "true", 0, 0, {NULL}, NULL, "Apply weight decay."},
};
static const CfgSection group_sec = {"groups", "One parameter group.", group_keys, 4};

static const CfgKey layer_keys[] = {
    {"at", CFG_STR, offsetof(LayerCfg, at), NULL, 0, 0, {NULL}, NULL, "Layer indices."},
    {"mixer", CFG_JSON, offsetof(LayerCfg, mixer), "{}", 0, 0, {NULL}, NULL, "Mixer options (see docs/mixers.md)."},
};
static const CfgSection layer_sec = {"layers", "A per-layer override.", layer_keys, 2};

static const CfgKey ext_model_keys[] = {
    {"dim", CFG_INT, offsetof(ExtModelCfg, dim), "64", 1, 4096, {NULL}, NULL, "Width."},
    {"mixer", CFG_JSON, offsetof(ExtModelCfg, mixer), "{\"kind\": \"attn\"}", 0, 0, {NULL}, NULL,
     "Default mixer (see docs/mixers.md)."},
    {"layers", CFG_OBJLIST, offsetof(ExtModelCfg, layers), "[]", 0, 0, {.elem_size = sizeof(LayerCfg)}, &layer_sec,
     "Per-layer overrides."},
};
static const CfgSection ext_model_sec = {"model", "The network.", ext_model_keys, 3};

static const CfgKey ext_optim_keys[] = {
    {"beta1", CFG_FLOAT, offsetof(ExtOptimCfg, beta1), "0.9", 0, 1, {NULL}, NULL, "Adam beta1."},
    {"groups", CFG_OBJLIST, offsetof(ExtOptimCfg, groups), "[]", 0, 3, {.elem_size = sizeof(GroupCfg)}, &group_sec,
     "Parameter groups."},
};
static const CfgSection ext_optim_sec = {"optim", "Optimizer.", ext_optim_keys, 2};

static const CfgKey ext_root_keys[] = {
    {"model", CFG_SECTION, offsetof(ExtCfg, model), NULL, 0, 0, {NULL}, &ext_model_sec, NULL},
    {"optim", CFG_SECTION, offsetof(ExtCfg, optim), NULL, 0, 0, {NULL}, &ext_optim_sec, NULL},
};
static const CfgSection ext_schema = {"", NULL, ext_root_keys, 2};

static const CfgKey mixer_keys[] = {
    {"kind", CFG_ENUM, offsetof(MixerOpts, kind), "\"attn\"", 0, 0, {"attn|kla"}, NULL, "Mixer."},
    {"window", CFG_INT, offsetof(MixerOpts, window), "64", 1, 4096, {NULL}, NULL, "Window."},
};
static const CfgSection mixer_sec = {"mixer", NULL, mixer_keys, 2};

static char dir_[64];
static char made_[64][256];  // every file and folder written, removed in reverse order at the end
static int n_made_;

static const char *path_(const char *rel) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir_, rel);
    return buf[k];
}

static void write_(const char *rel, const char *text) {
    const char *p = path_(rel);
    const char *slash = strrchr(rel, '/');
    if (slash) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s/%.*s", dir_, (int)(slash - rel), rel);
        if (mkdir(sub, 0700) == 0) snprintf(made_[n_made_++], 256, "%s", sub);
    }
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
    for (int i = 0; i < n_made_; i++)
        if (strcmp(made_[i], p) == 0) return;
    snprintf(made_[n_made_++], 256, "%s", p);
}

// load rel with the given overrides and bind into *cfg (zeroed first); returns the error or "" on success
static const char *load_(const char *rel, const char *const *sets, int n_sets, TestCfg *cfg) {
    static Err e;
    e.msg[0] = 0;
    memset(cfg, 0, sizeof *cfg);
    CfgOrigins *o = NULL;
    cJSON *root = config_load(path_(rel), sets, n_sets, &o, &e);
    if (root && config_bind(cfg, &schema, root, o, &e) == 0) e.msg[0] = 0;
    else if (!e.msg[0]) snprintf(e.msg, sizeof e.msg, "failed without a message");
    cJSON_Delete(root);
    config_origins_free(o);
    return e.msg;
}

static const char *err_of_(const char *json, const char *const *sets, int n_sets) {
    static TestCfg cfg;
    write_("t.json", json);
    return load_("t.json", sets, n_sets, &cfg);
}

// load_ for the extended schema: *cfg is bound on success (the caller config_frees it) and holds
// nothing to free on failure
static const char *ext_load_(const char *rel, const char *const *sets, int n_sets, ExtCfg *cfg) {
    static Err e;
    e.msg[0] = 0;
    memset(cfg, 0, sizeof *cfg);
    CfgOrigins *o = NULL;
    cJSON *root = config_load(path_(rel), sets, n_sets, &o, &e);
    if (root && config_bind(cfg, &ext_schema, root, o, &e) == 0) e.msg[0] = 0;
    else if (!e.msg[0]) snprintf(e.msg, sizeof e.msg, "failed without a message");
    cJSON_Delete(root);
    config_origins_free(o);
    return e.msg;
}

static const char *ext_err_(const char *json, const char *const *sets, int n_sets) {
    ExtCfg cfg;
    write_("t.json", json);
    const char *m = ext_load_("t.json", sets, n_sets, &cfg);
    config_free(&cfg, &ext_schema);
    return m;
}

static const GroupCfg *group_(const ExtCfg *c, int i) {
    return (const GroupCfg *)c->optim.groups.items + i;
}

static const LayerCfg *layer_(const ExtCfg *c, int i) {
    return (const LayerCfg *)c->model.layers.items + i;
}

// the dump printed without whitespace, to compare two configs whole (the caller frees)
static char *dump_text_(const ExtCfg *c) {
    cJSON *d = config_dump(c, &ext_schema);
    char *text = cJSON_PrintUnformatted(d);
    cJSON_Delete(d);
    return text;
}

static void test_defaults(void) {
    TestCfg c;
    write_("plain.json", "{\"data\": {\"train\": \"a/*.bin\"}, \"train\": {\"steps\": 7}}");
    CHECK_STR(load_("plain.json", NULL, 0, &c), "", "plain config binds");
    CHECK(c.data.train.n == 1, "a single string is a list of one");
    CHECK_STR(c.data.train.v[0], "a/*.bin", "data.train value");
    CHECK(c.data.val.n == 0, "default [] is an empty list");
    CHECK(c.data.seq_len == 512, "default seq_len");
    CHECK_STR(c.data.format, "auto", "default enum");
    CHECK_STR(c.name, "run", "default string");
    CHECK(c.train.lr == 3e-4, "default float");
    CHECK(c.train.steps == 7, "file value wins over the default");
    CHECK(c.train.compile == 0, "default bool");
    CHECK(c.train.optim.beta2 == 0.95, "default in a section absent from the file");
}

static void test_base(void) {
    TestCfg c;
    write_("base.json", "{\"data\": {\"train\": [\"x\", \"y\"], \"seq_len\": 256, \"format\": \"llmc\"},"
                        " \"train\": {\"lr\": 0.1, \"optim\": {\"beta1\": 0.8}}}");
    write_("sub/mid.json", "{\"base\": \"../base.json\", \"train\": {\"steps\": 50, \"optim\": {\"beta2\": 0.99}}}");
    write_("sub/child.json", "{\"base\": \"mid.json\", \"name\": \"child\", \"data\": {\"train\": [\"z\"]}}");
    CHECK_STR(load_("sub/child.json", NULL, 0, &c), "", "two levels of base, relative paths in a subfolder");
    CHECK(c.data.train.n == 1, "a list from the child replaces the base's whole");
    CHECK_STR(c.data.train.v[0], "z", "the child's list");
    CHECK(c.data.seq_len == 256, "deep merge keeps the base's sibling keys");
    CHECK_STR(c.data.format, "llmc", "enum from the base");
    CHECK(c.train.lr == 0.1 && c.train.steps == 50, "keys from both bases");
    CHECK(c.train.optim.beta1 == 0.8 && c.train.optim.beta2 == 0.99, "nested sections merge too");
    CHECK_STR(c.name, "child", "child's own key");

    write_("sub/two.json", "{\"base\": [\"mid.json\", \"../base.json\"], \"data\": {\"seq_len\": 64}}");
    CHECK_STR(load_("sub/two.json", NULL, 0, &c), "", "a list of bases");
    CHECK(c.train.steps == 50 && c.train.lr == 0.1 && c.data.seq_len == 64, "later bases and the child win");

    // a base named twice is loaded once and merged at both places: the later mention wins, with its origin
    write_("rep_b.json", "{\"data\": {\"train\": \"x\", \"seq_len\": -1}}");
    write_("rep_c.json", "{\"data\": {\"seq_len\": 64}, \"name\": \"c\"}");
    write_("rep_a.json", "{\"base\": [\"rep_b.json\", \"rep_c.json\", \"rep_b.json\"]}");
    CHECK_CONTAINS(load_("rep_a.json", NULL, 0, &c), "rep_b.json: data.seq_len: -1 is out of range",
                   "a base named again wins over the ones between, and is named as the origin");
    write_("rep_d.json", "{\"base\": [\"rep_c.json\", \"rep_b.json\", \"rep_c.json\"]}");
    CHECK_STR(load_("rep_d.json", NULL, 0, &c), "", "the other order: rep_c.json's seq_len wins");
    CHECK(c.data.seq_len == 64 && !strcmp(c.name, "c") && c.data.train.n == 1, "... over rep_b.json's, which adds train");

    write_("cyc_a.json", "{\"base\": \"cyc_b.json\"}");
    write_("cyc_b.json", "{\"base\": \"cyc_a.json\"}");
    const char *m = load_("cyc_a.json", NULL, 0, &c);
    CHECK_CONTAINS(m, "cycle", "base cycle is an error");
    CHECK_CONTAINS(m, "cyc_a.json -> ", "cycle error lists the chain");
    CHECK_CONTAINS(m, "cyc_b.json -> ", "cycle error lists every file");

    write_("orphan.json", "{\"base\": \"nope.json\"}");
    m = load_("orphan.json", NULL, 0, &c);
    CHECK_CONTAINS(m, "orphan.json: base: cannot open \"nope.json\"", "missing base names both files");
    CHECK_CONTAINS(m, "No such file", "missing base says why");
    CHECK_CONTAINS(err_of_("{\"base\": 3}", NULL, 0), "base: expected a file name or a list of file names, got 3",
                   "base of the wrong type");
    CHECK_CONTAINS(err_of_("{\"data\": {\"base\": \"x.json\"}}", NULL, 0), "unknown key 'data.base'",
                   "base is only special at the top level");
}

static void test_bad_files(void) {
    TestCfg c;
    const char *m = load_("absent.json", NULL, 0, &c);
    CHECK_CONTAINS(m, "absent.json: cannot open (No such file", "missing file");
    write_("bad.json", "{\n  \"name\": \"x\",\n  \"data\": }\n");
    m = load_("bad.json", NULL, 0, &c);
    CHECK_CONTAINS(m, "bad.json:3:11: invalid JSON", "malformed JSON names the file, line and column");
    CHECK(strchr(m, '\n') == NULL, "error is one line");
    CHECK_CONTAINS(err_of_("{\"name\": \"x\"} trailing", NULL, 0), "t.json:1:15: invalid JSON near 'trailing'",
                   "trailing garbage");
    CHECK_CONTAINS(err_of_("{\"name\": ", NULL, 0), "t.json:1:", "truncated file");
    CHECK_CONTAINS(err_of_("", NULL, 0), "t.json:1:1: invalid JSON", "empty file");
    CHECK_CONTAINS(err_of_("[1, 2]", NULL, 0), "top level must be a JSON object, got a list", "list at the top");
    CHECK_CONTAINS(err_of_("{\"name\": \"a\", \"name\": \"b\"}", NULL, 0), "t.json: duplicate key 'name'",
                   "duplicate key");
}

static void test_bind_errors(void) {
    const char *ok = "{\"data\": {\"train\": \"x\"}, ";
    char j[512];
#define BAD_(body) (snprintf(j, sizeof j, "%s%s}", ok, body), err_of_(j, NULL, 0))
    CHECK_CONTAINS(BAD_("\"nmae\": \"x\""), "t.json: unknown key 'nmae' (did you mean 'name'?)", "root typo");
    CHECK_CONTAINS(err_of_("{\"data\": {\"train\": \"x\", \"seqlen\": 5}}", NULL, 0),
                   "t.json: unknown key 'data.seqlen' (did you mean 'data.seq_len'?)", "nested typo");
    CHECK_CONTAINS(BAD_("\"train\": {\"optim\": {\"beta3\": 1}}"),
                   "unknown key 'train.optim.beta3' (did you mean 'train.optim.beta1'?)", "typo two sections deep");
    CHECK_CONTAINS(err_of_("{\"data\": {\"train\": \"x\", \"zzzzzz\": 5}}", NULL, 0),
                   "unknown key 'data.zzzzzz' (allowed keys in 'data': train, val, seq_len, format)",
                   "no near match lists the keys");
    CHECK_CONTAINS(BAD_("\"q\": 1"), "(allowed keys at the top level: name, data, train)", "top-level key list");
    CHECK_CONTAINS(err_of_("{\"data\": {\"trian\": \"x\"}}", NULL, 0), "did you mean 'data.train'",
                   "a misspelt required key reads as a typo");

    CHECK_CONTAINS(err_of_("{\"data\": {\"train\": \"x\", \"seq_len\": \"512\"}}", NULL, 0),
                   "t.json: data.seq_len: expected an integer, got \"512\" (a string)", "integer given a string");
    CHECK_CONTAINS(err_of_("{\"data\": {\"train\": \"x\", \"seq_len\": 3.5}}", NULL, 0),
                   "data.seq_len: expected an integer, got 3.5", "integer given 3.5");
    CHECK_CONTAINS(BAD_("\"train\": {\"lr\": \"fast\"}"), "train.lr: expected a number, got \"fast\"",
                   "float given a string");
    CHECK_CONTAINS(BAD_("\"train\": {\"compile\": 1}"), "train.compile: expected true or false, got 1",
                   "bool given 1");
    CHECK_CONTAINS(BAD_("\"name\": 5"), "name: expected a string, got 5 (a number)", "string given a number");
    CHECK_CONTAINS(BAD_("\"name\": null"), "name: expected a string, got null", "string given null");
    CHECK_CONTAINS(err_of_("{\"data\": {\"train\": true}}", NULL, 0),
                   "data.train: expected a string or a list of strings, got true (a boolean)", "list given a bool");
    CHECK_CONTAINS(err_of_("{\"data\": {\"train\": [\"a\", 2]}}", NULL, 0),
                   "data.train[1]: expected a string, got 2", "list item of the wrong type");
    CHECK_CONTAINS(err_of_("{\"data\": [1]}", NULL, 0), "t.json: data: expected an object, got a list",
                   "section given a list");

    CHECK_CONTAINS(err_of_("{\"data\": {\"train\": \"x\", \"seq_len\": 0}}", NULL, 0),
                   "t.json: data.seq_len: 0 is out of range (allowed: 1 to 1048576)", "integer below range");
    CHECK_CONTAINS(err_of_("{\"data\": {\"train\": \"x\", \"seq_len\": 1048577}}", NULL, 0),
                   "data.seq_len: 1048577 is out of range", "integer above range");
    CHECK_CONTAINS(BAD_("\"train\": {\"lr\": -0.001}"), "train.lr: -0.001 is out of range (allowed: 0 to 10)",
                   "float below range");
    CHECK_CONTAINS(BAD_("\"train\": {\"optim\": {\"weight_decay\": 1e999}}"),
                   "weight_decay: inf is out of range", "an unbounded float is still finite");

    CHECK_CONTAINS(err_of_("{\"data\": {\"train\": \"x\", \"format\": \"bin\"}}", NULL, 0),
                   "data.format: \"bin\" is not allowed (allowed: auto, seqtok, llmc, raw_u16, raw_u32)",
                   "enum value not among the choices");
    CHECK_CONTAINS(err_of_("{\"data\": {\"train\": \"x\", \"format\": \"seqtk\"}}", NULL, 0),
                   "raw_u32; did you mean 'seqtok'?)", "enum did-you-mean");

    CHECK_CONTAINS(err_of_("{\"name\": \"x\"}", NULL, 0),
                   "t.json: missing required key 'data.train' (Training shards.)", "required key missing");

    char big[700];
    snprintf(big, sizeof big, "{\"data\": {\"train\": \"x\"}, \"name\": \"%0600d\"}", 0);
    CHECK_CONTAINS(err_of_(big, NULL, 0), "name: string of 600 bytes is too long (at most 511 allowed)",
                   "long string is an error, not truncated");
    CHECK_CONTAINS(err_of_("{\"data\": {\"train\": [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\","
                           "\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}}", NULL, 0),
                   "data.train: list of 17 items is too long (at most 16 allowed)", "too many list items");
#undef BAD_
}

static void test_overrides(void) {
    TestCfg c;
    write_("ov_base.json", "{\"data\": {\"train\": \"x\", \"seq_len\": 100}, \"train\": {\"lr\": 0.5}}");
    write_("ov.json", "{\"base\": \"ov_base.json\", \"train\": {\"steps\": 10}}");
    const char *sets[] = {"train.lr=3e-3", "train.steps=20", "data.seq_len=64", "name=foo bar",
                          "train.compile=true", "data.val=[\"v1\", \"v2\"]", "data.format=\"llmc\""};
    CHECK_STR(load_("ov.json", sets, 7, &c), "", "overrides apply");
    CHECK(c.train.lr == 3e-3, "--set number over a base value");
    CHECK(c.train.steps == 20, "--set wins over the file");
    CHECK(c.data.seq_len == 64, "--set wins over the base");
    CHECK_STR(c.name, "foo bar", "--set plain string");
    CHECK(c.train.compile == 1, "--set bool");
    CHECK(c.data.val.n == 2 && strcmp(c.data.val.v[1], "v2") == 0, "--set list");
    CHECK_STR(c.data.format, "llmc", "--set quoted string");

    write_("ov_min.json", "{\"data\": {\"train\": \"x\"}}");
    const char *nested[] = {"train.optim.beta1=0.5", "train.optim={\"beta2\": 0.6}", "train.lr=1", "train.lr=2"};
    CHECK_STR(load_("ov_min.json", nested, 4, &c), "", "--set creates missing sections");
    CHECK(c.train.optim.beta1 == 0.5 && c.train.optim.beta2 == 0.6, "--set an object merges into the object");
    CHECK(c.train.lr == 2, "the last --set wins");

    const char *s1[] = {"train.lr"}, *s2[] = {"=3"}, *s3[] = {"train..lr=1"}, *s4[] = {"data.seq_len.x=1"},
               *s5[] = {"data.seqlen=5"}, *s6[] = {"train.steps=many"}, *s7[] = {"foo.bar=1"};
    CHECK_CONTAINS(err_of_("{}", s1, 1), "--set train.lr: expected key=value", "--set without '='");
    CHECK_CONTAINS(err_of_("{}", s2, 1), "--set =3: empty key name", "--set with an empty key");
    CHECK_CONTAINS(err_of_("{}", s3, 1), "--set train..lr=1: empty key name", "--set with an empty component");
    CHECK_CONTAINS(err_of_("{\"data\": {\"seq_len\": 5}}", s4, 1),
                   "--set data.seq_len.x=1: 'data.seq_len' is 5 (a number), not an object", "--set into a number");
    CHECK_CONTAINS(err_of_("{\"data\": {\"train\": \"x\"}}", s5, 1),
                   "--set data.seqlen=5: unknown key 'data.seqlen' (did you mean 'data.seq_len'?)",
                   "unknown --set key names the --set");
    CHECK_CONTAINS(err_of_("{\"data\": {\"train\": \"x\"}}", s6, 1),
                   "--set train.steps=many: train.steps: expected an integer, got \"many\"", "bad --set value");
    CHECK_CONTAINS(err_of_("{\"data\": {\"train\": \"x\"}}", s7, 1), "--set foo.bar=1: unknown key 'foo'",
                   "a section created by --set is blamed on it");
}

static void test_origins(void) {
    TestCfg c;
    write_("o_base.json", "{\"data\": {\"seq_len\": 0}}");
    write_("sub/o_child.json", "{\"base\": \"../o_base.json\", \"data\": {\"train\": \"x\"}}");
    const char *m = load_("sub/o_child.json", NULL, 0, &c);
    CHECK_CONTAINS(m, "o_base.json: data.seq_len: 0 is out of range", "an error in a base names the base");
    CHECK(strstr(m, "o_child") == NULL, "and not the child");
    write_("sub/o_fix.json", "{\"base\": \"../o_base.json\", \"data\": {\"train\": \"x\", \"seq_len\": 1}}");
    CHECK_STR(load_("sub/o_fix.json", NULL, 0, &c), "", "the child overrides the bad base value");
    write_("sub/o_list.json", "{\"base\": \"../o_base.json\", \"data\": {\"train\": [\"x\", 1]}}");
    CHECK_CONTAINS(load_("sub/o_list.json", NULL, 0, &c), "o_list.json: data.train[1]:", "list items name the file");

    Err e = {{0}};
    cJSON *root = cJSON_Parse("{\"data\": {\"train\": \"x\", \"seq_len\": -1}}");
    CHECK(config_bind(&c, &schema, root, NULL, &e) == -1, "bind without origins fails");
    CHECK_STR(e.msg, "data.seq_len: -1 is out of range (allowed: 1 to 1048576)", "and names no origin");
    cJSON_Delete(root);
}

static void test_dump(void) {
    TestCfg a, b;
    write_("dump.json", "{\"name\": \"d\", \"data\": {\"train\": [\"p\", \"q\"], \"format\": \"raw_u16\"},"
                        " \"train\": {\"lr\": 3e-4, \"compile\": true, \"optim\": {\"beta1\": 0.1}}}");
    CHECK_STR(load_("dump.json", NULL, 0, &a), "", "dump fixture binds");
    a.train.optim.weight_decay = 1.0 / 3.0;
    cJSON *d = config_dump(&a, &schema);
    memset(&b, 0, sizeof b);
    Err e = {{0}};
    CHECK(config_bind(&b, &schema, d, NULL, &e) == 0, "dump binds: %.200s", e.msg);
    CHECK(memcmp(&a, &b, sizeof a) == 0, "dump -> bind gives the same struct");
    char *text = cJSON_Print(d);
    cJSON *back = cJSON_Parse(text);
    memset(&b, 0, sizeof b);
    CHECK(config_bind(&b, &schema, back, NULL, &e) == 0, "printed dump binds");
    CHECK(memcmp(&a, &b, sizeof a) == 0, "print -> parse -> bind gives the same struct (floats exact)");
    CHECK(b.train.lr == 3e-4 && b.train.optim.beta1 == 0.1 && b.train.optim.weight_decay == 1.0 / 3.0,
          "3e-4, 0.1 and 1/3 survive printing");
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(d, "data"), "val")) == 0,
          "defaults are dumped");
    CHECK(cJSON_GetObjectItem(d, "name") == d->child, "keys come in schema order");
    free(text);
    cJSON_Delete(back);
    cJSON_Delete(d);
}

static void test_docs(void) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    config_write_docs(f, &schema);
    fclose(f);
    const CfgSection *secs[] = {&schema, &data_sec, &train_sec, &optim_sec};
    int all = 1;
    for (int s = 0; s < 4; s++) {
        for (int i = 0; i < secs[s]->n_keys; i++) {
            char name[64];
            snprintf(name, sizeof name, "`%s`", secs[s]->keys[i].name);
            if (secs[s]->keys[i].type != CFG_SECTION && !strstr(buf, name)) all = 0;
        }
    }
    CHECK(all, "docs list every key");
    CHECK_CONTAINS(buf, "## train.optim\n", "nested sections get their dotted path");
    CHECK_CONTAINS(buf, "| key | type | default | allowed | description |", "table header");
    CHECK_CONTAINS(buf, "| `train` | string or list of strings | required |", "required key");
    CHECK_CONTAINS(buf, "| `seq_len` | integer | `512` | 1 to 1048576 | Tokens per sequence. |", "integer row");
    CHECK_CONTAINS(buf, "| one of | `\"auto\"` | auto, seqtok, llmc, raw_u16, raw_u32 |", "enum row");
    CHECK_CONTAINS(buf, "| any finite number | Decoupled \\| decay. |", "unbounded float, '|' escaped");
    free(buf);
}

static void test_objlist(void) {
    ExtCfg c;
    write_("ol0.json", "{}");
    CHECK_STR(ext_load_("ol0.json", NULL, 0, &c), "", "no list binds");
    CHECK(c.optim.groups.n == 0 && c.optim.groups.items == NULL, "default [] is an empty list without an array");
    config_free(&c, &ext_schema);

    write_("ol1.json", "{\"optim\": {\"groups\": [{\"match\": \"emb\"}]}}");
    CHECK_STR(ext_load_("ol1.json", NULL, 0, &c), "", "a list of one object binds");
    CHECK(c.optim.groups.n == 1 && c.optim.groups.items != NULL, "one item");
    CHECK_STR(group_(&c, 0)->match, "emb", "the item's value");
    CHECK(group_(&c, 0)->lr_mult == 1 && group_(&c, 0)->decay == 1, "the item's defaults are filled in");
    config_free(&c, &ext_schema);
    CHECK(c.optim.groups.n == 0 && c.optim.groups.items == NULL, "config_free empties the list");
    config_free(&c, &ext_schema);  // twice is harmless

    write_("ol3.json", "{\"optim\": {\"groups\": [{\"match\": \"a\", \"lr_mult\": 2, \"decay\": false},"
                       " {\"match\": \"b\", \"beta1\": 0.5}, {\"match\": \"c\"}]}}");
    CHECK_STR(ext_load_("ol3.json", NULL, 0, &c), "", "a list of three objects binds");
    CHECK(c.optim.groups.n == 3, "three items");
    CHECK(strcmp(group_(&c, 0)->match, "a") == 0 && group_(&c, 0)->lr_mult == 2 && group_(&c, 0)->decay == 0,
          "item 0 as written");
    CHECK(strcmp(group_(&c, 1)->match, "b") == 0 && group_(&c, 1)->beta1 == 0.5 && group_(&c, 1)->decay == 1,
          "item 1 as written, defaults for the rest");
    CHECK(strcmp(group_(&c, 2)->match, "c") == 0 && group_(&c, 2)->lr_mult == 1 && isnan(group_(&c, 2)->beta1),
          "item 2 all defaults");
    CHECK(c.optim.beta1 == 0.9 && c.model.dim == 64, "keys beside the list keep their defaults");

    // dump -> bind: the same items, and the same dump again
    cJSON *d = config_dump(&c, &ext_schema);
    ExtCfg b;
    memset(&b, 0, sizeof b);
    Err e = {{0}};
    CHECK(config_bind(&b, &ext_schema, d, NULL, &e) == 0, "the dump of a list binds: %.200s", e.msg);
    int same = b.optim.groups.n == c.optim.groups.n;
    for (int i = 0; same && i < b.optim.groups.n; i++) {
        const GroupCfg *x = group_(&c, i), *y = group_(&b, i);
        same = strcmp(x->match, y->match) == 0 && x->lr_mult == y->lr_mult && x->decay == y->decay &&
               (x->beta1 == y->beta1 || (isnan(x->beta1) && isnan(y->beta1)));
    }
    CHECK(same, "dump -> bind gives the same items, field by field");
    char *t1 = dump_text_(&c), *t2 = dump_text_(&b);
    CHECK_STR(t2, t1, "and the same dump");
    free(t1);
    free(t2);
    config_free(&b, &ext_schema);
    cJSON_Delete(d);
    config_free(&c, &ext_schema);

    CHECK_CONTAINS(ext_err_("{\"optim\": {\"groups\": [{\"match\": \"a\"}, {\"match\": \"b\"},"
                            " {\"match\": \"c\", \"lr_mult\": -1}]}}", NULL, 0),
                   "t.json: optim.groups[2].lr_mult: -1 is out of range (allowed: 0 to 100)", "an item's bad value");
    CHECK_CONTAINS(ext_err_("{\"optim\": {\"groups\": [{\"match\": \"a\", \"lr_mul\": 2}]}}", NULL, 0),
                   "t.json: unknown key 'optim.groups[0].lr_mul' (did you mean 'optim.groups[0].lr_mult'?)",
                   "an item's typo");
    CHECK_CONTAINS(ext_err_("{\"optim\": {\"groups\": [{\"match\": \"a\", \"zzzzzz\": 2}]}}", NULL, 0),
                   "(allowed keys in 'optim.groups[0]': match, lr_mult, beta1, decay)", "an item's allowed keys");
    CHECK_CONTAINS(ext_err_("{\"optim\": {\"groups\": [{\"match\": \"a\"}, {\"lr_mult\": 2}]}}", NULL, 0),
                   "t.json: missing required key 'optim.groups[1].match' (Parameter names.)",
                   "a required key missing from an item");
    CHECK_CONTAINS(ext_err_("{\"optim\": {\"groups\": [{\"match\": \"a\"}, {\"match\": \"b\"}, {\"match\": \"c\"},"
                            " {\"match\": \"d\"}]}}", NULL, 0),
                   "t.json: optim.groups: list of 4 items is too long (at most 3 allowed)", "too many items");
    CHECK_CONTAINS(ext_err_("{\"optim\": {\"groups\": {\"match\": \"a\"}}}", NULL, 0),
                   "t.json: optim.groups: expected a list of objects, got an object", "an object for a list");
    CHECK_CONTAINS(ext_err_("{\"optim\": {\"groups\": \"a\"}}", NULL, 0),
                   "optim.groups: expected a list of objects, got \"a\" (a string)", "a string for a list");
    CHECK_CONTAINS(ext_err_("{\"optim\": {\"groups\": [{\"match\": \"a\"}, 3]}}", NULL, 0),
                   "t.json: optim.groups[1]: expected an object, got 3 (a number)", "an item that is not an object");
    CHECK_CONTAINS(ext_err_("{\"optim\": {\"groups\": [{\"match\": \"a\", \"match\": \"b\"}]}}", NULL, 0),
                   "t.json: duplicate key 'optim.groups[0].match'", "a duplicate key inside an item");

    // a failed bind frees what it bound before the error: model.layers (with JSON values) and two items
    write_("ol_fail.json", "{\"model\": {\"layers\": [{\"at\": \"0\", \"mixer\": {\"w\": 1}}]},"
                           " \"optim\": {\"groups\": [{\"match\": \"a\"}, {\"match\": \"b\"}, {\"match\": 5}]}}");
    CHECK_CONTAINS(ext_load_("ol_fail.json", NULL, 0, &c), "optim.groups[2].match: expected a string, got 5",
                   "an error in the last item");
    CHECK(c.model.layers.n == 0 && c.model.layers.items == NULL && c.model.mixer == NULL &&
          c.optim.groups.n == 0 && c.optim.groups.items == NULL, "a failed bind leaves nothing allocated");

    // a lower bound on the count, and a list key without its element size
    static const CfgKey need_keys[] = {
        {"groups", CFG_OBJLIST, offsetof(ExtOptimCfg, groups), NULL, 1, 2, {.elem_size = sizeof(GroupCfg)},
         &group_sec, "Groups."},
    };
    static const CfgKey bad_keys[] = {{"groups", CFG_OBJLIST, offsetof(ExtOptimCfg, groups), "[]", 0, 0, {NULL},
                                       &group_sec, "Groups."}};
    const CfgSection need_sec = {"", NULL, need_keys, 1}, bad_sec = {"", NULL, bad_keys, 1};
    ExtOptimCfg oc;
    cJSON *empty = cJSON_Parse("{\"groups\": []}");
    Err e2 = {{0}};
    CHECK(config_bind(&oc, &need_sec, empty, NULL, &e2) == -1, "too few items fail");
    CHECK_STR(e2.msg, "groups: list of 0 items is too short (at least 1 required)", "min items");
    CHECK(config_bind(&oc, &bad_sec, empty, NULL, &e2) == -1, "a list key without elem_size fails");
    CHECK_STR(e2.msg, "schema: groups: a list of objects needs .section and .elem_size", "and says what is missing");
    cJSON_Delete(empty);
}

static void test_objlist_origins(void) {
    ExtCfg c;
    write_("olo_base.json", "{\"optim\": {\"groups\": [{\"match\": \"a\"}, {\"match\": \"b\", \"lr_mult\": -1}]}}");
    write_("sub/olo_child.json", "{\"base\": \"../olo_base.json\", \"optim\": {\"beta1\": 0.5}}");
    const char *m = ext_load_("sub/olo_child.json", NULL, 0, &c);
    CHECK_CONTAINS(m, "olo_base.json: optim.groups[1].lr_mult: -1 is out of range",
                   "a bad item in a base names the base");
    CHECK(strstr(m, "olo_child") == NULL, "and not the child");
    write_("sub/olo_list.json", "{\"base\": \"../olo_base.json\", \"optim\": {\"groups\": [{\"match\": \"x\"},"
                                " {\"match\": \"y\", \"beta1\": 7}]}}");
    m = ext_load_("sub/olo_list.json", NULL, 0, &c);
    CHECK_CONTAINS(m, "olo_list.json: optim.groups[1].beta1: 7 is out of range", "the child's list names the child");
    CHECK(strstr(m, "olo_base") == NULL, "and not the base whose list it replaced");
    write_("sub/olo_miss.json", "{\"base\": \"../olo_base.json\", \"optim\": {\"groups\": [{\"lr_mult\": 2}]}}");
    CHECK_CONTAINS(ext_load_("sub/olo_miss.json", NULL, 0, &c),
                   "olo_miss.json: missing required key 'optim.groups[0].match'", "a key missing from an item");
    write_("olo_top.json", "{\"base\": \"olo_miss_base.json\"}");
    write_("olo_miss_base.json", "{\"optim\": {\"groups\": [{\"match\": \"a\"}, {\"lr_mult\": 2}]}}");
    CHECK_CONTAINS(ext_load_("olo_top.json", NULL, 0, &c),
                   "olo_miss_base.json: missing required key 'optim.groups[1].match'",
                   "is reported against the file that set the list");
    write_("olo_ok.json", "{\"base\": \"olo_base.json\", \"optim\": {\"groups\": [{\"match\": \"z\"}]}}");
    CHECK_STR(ext_load_("olo_ok.json", NULL, 0, &c), "", "the child's list replaces the base's whole");
    CHECK(c.optim.groups.n == 1 && strcmp(group_(&c, 0)->match, "z") == 0, "one item, the child's");
    config_free(&c, &ext_schema);
}

static void test_json_value(void) {
    ExtCfg c, b;
    const char *mixer = "{\"kind\": \"kla\", \"window\": 8, \"extra\": [1, {\"y\": null}], \"s\": \"t\"}";
    char j[512];
    snprintf(j, sizeof j, "{\"model\": {\"mixer\": %s, \"layers\": [{\"at\": \"1\"}, {\"at\": \"2\", \"mixer\": %s}]}}",
             mixer, mixer);
    write_("js.json", j);
    CHECK_STR(ext_load_("js.json", NULL, 0, &c), "", "JSON values bind");
    cJSON *want = cJSON_Parse(mixer);
    // ext_load_ deleted the loaded tree before returning: under ASan, reading the values proves they are copies
    CHECK(c.model.mixer && cJSON_Compare(c.model.mixer, want, 1), "the value is kept whole (a deep copy)");
    CHECK(c.model.layers.n == 2 && cJSON_Compare(layer_(&c, 1)->mixer, want, 1), "a JSON value inside a list item");
    CHECK(cJSON_IsObject(layer_(&c, 0)->mixer) && layer_(&c, 0)->mixer->child == NULL,
          "a missing JSON value is its default {}, never NULL");

    cJSON *d = config_dump(&c, &ext_schema);
    CHECK(cJSON_Compare(cJSON_GetObjectItem(cJSON_GetObjectItem(d, "model"), "mixer"), want, 1),
          "dump writes the value back as it was");
    char *text = cJSON_Print(d);
    cJSON *back = cJSON_Parse(text);
    memset(&b, 0, sizeof b);
    Err e = {{0}};
    CHECK(config_bind(&b, &ext_schema, back, NULL, &e) == 0, "printed dump binds: %.200s", e.msg);
    CHECK(cJSON_Compare(b.model.mixer, c.model.mixer, 1) && cJSON_Compare(layer_(&b, 1)->mixer, want, 1),
          "print -> parse -> bind gives the same values");
    char *t1 = dump_text_(&c), *t2 = dump_text_(&b);
    CHECK_STR(t2, t1, "and the same dump");
    free(t1);
    free(t2);
    free(text);
    cJSON_Delete(back);
    cJSON_Delete(d);
    cJSON_Delete(want);
    config_free(&b, &ext_schema);
    config_free(&c, &ext_schema);
    CHECK(c.model.mixer == NULL && c.model.layers.items == NULL, "config_free releases JSON values and lists");

    write_("js_def.json", "{}");
    CHECK_STR(ext_load_("js_def.json", NULL, 0, &c), "", "defaults bind");
    want = cJSON_Parse("{\"kind\": \"attn\"}");
    CHECK(cJSON_Compare(c.model.mixer, want, 1), "a JSON default");
    cJSON_Delete(want);
    config_free(&c, &ext_schema);

    CHECK_CONTAINS(ext_err_("{\"model\": {\"mixer\": [1]}}", NULL, 0),
                   "t.json: model.mixer: expected an object, got a list", "a list for a JSON object");
    CHECK_CONTAINS(ext_err_("{\"model\": {\"mixer\": \"kla\"}}", NULL, 0),
                   "model.mixer: expected an object, got \"kla\" (a string)", "a string for a JSON object");
    CHECK_CONTAINS(ext_err_("{\"model\": {\"mixer\": null}}", NULL, 0), "model.mixer: expected an object, got null",
                   "null for a JSON object");
}

// an object naming another "kind" replaces the base's object whole (file inheritance and --set); the same
// kind merges key by key
static void test_kind_replaces(void) {
    ExtCfg c;
    write_("kind_base.json", "{\"model\": {\"mixer\": {\"kind\": \"attn\", \"heads\": 4, \"pos\": \"rope\"}}}");
    write_("kind_child.json", "{\"base\": \"kind_base.json\", \"model\": {\"mixer\": {\"kind\": \"kla\", \"d\": 8}}}");
    write_("kind_same.json", "{\"base\": \"kind_base.json\", \"model\": {\"mixer\": {\"kind\": \"attn\", \"pos\": \"alibi\"}}}");
    struct { const char *file, *set, *want, *what; } cases[] = {
        {"kind_child.json", NULL, "{\"kind\": \"kla\", \"d\": 8}", "a child file's other kind replaces the mixer"},
        {"kind_same.json", NULL, "{\"kind\": \"attn\", \"heads\": 4, \"pos\": \"alibi\"}", "the same kind merges"},
        {"kind_base.json", "model.mixer={\"kind\": \"kla\"}", "{\"kind\": \"kla\"}", "--set of another kind replaces"},
        {"kind_base.json", "model.mixer={\"pos\": \"none\"}", "{\"kind\": \"attn\", \"heads\": 4, \"pos\": \"none\"}",
         "--set without a kind merges"},
        {"kind_base.json", "model.mixer.kind=kla", "{\"kind\": \"kla\", \"heads\": 4, \"pos\": \"rope\"}",
         "--set of the kind alone is a plain value (the rest stays)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *sets[] = {cases[i].set};
        CHECK_STR(ext_load_(cases[i].file, sets, cases[i].set ? 1 : 0, &c), "", "%s: loads", cases[i].what);
        cJSON *want = cJSON_Parse(cases[i].want);
        char *got = cJSON_PrintUnformatted(c.model.mixer);
        CHECK(cJSON_Compare(c.model.mixer, want, 1), "%s: got %s", cases[i].what, got);
        free(got);
        cJSON_Delete(want);
        config_free(&c, &ext_schema);
    }
}

static void test_nullable(void) {
    ExtCfg c;
    write_("nl.json", "{\"optim\": {\"groups\": [{\"match\": \"a\"}, {\"match\": \"b\", \"beta1\": null},"
                      " {\"match\": \"c\", \"beta1\": 0.5}]}}");
    CHECK_STR(ext_load_("nl.json", NULL, 0, &c), "", "nullable numbers bind");
    CHECK(isnan(group_(&c, 0)->beta1), "missing is unset (NaN)");
    CHECK(isnan(group_(&c, 1)->beta1), "null is unset (NaN)");
    CHECK(group_(&c, 2)->beta1 == 0.5, "a number is kept");
    cJSON *d = config_dump(&c, &ext_schema);
    const cJSON *groups = cJSON_GetObjectItem(cJSON_GetObjectItem(d, "optim"), "groups");
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(groups, 0), "beta1")) &&
          cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(groups, 1), "beta1")), "dump writes unset as null");
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(groups, 2), "beta1")) == 0.5,
          "and a set value as a number");
    cJSON_Delete(d);
    config_free(&c, &ext_schema);

    CHECK_CONTAINS(ext_err_("{\"optim\": {\"groups\": [{\"match\": \"a\", \"beta1\": \"x\"}]}}", NULL, 0),
                   "t.json: optim.groups[0].beta1: expected a number or null, got \"x\" (a string)",
                   "a nullable number given a string");
    CHECK_CONTAINS(ext_err_("{\"optim\": {\"groups\": [{\"match\": \"a\", \"beta1\": 2}]}}", NULL, 0),
                   "optim.groups[0].beta1: 2 is out of range (allowed: 0 to 1, or null)", "a set value is bounded");
    CHECK_CONTAINS(ext_err_("{\"optim\": {\"beta1\": null}}", NULL, 0), "optim.beta1: expected a number, got null",
                   "null stays an error for a number with a default");
}

static void test_bind_at(void) {
    Err e = {{0}};
    write_("ba_base.json", "{\"model\": {\"layers\": [{\"at\": \"0\"}, {\"at\": \"1\", \"mixer\": {\"window\": 0}}]}}");
    write_("ba.json", "{\"base\": \"ba_base.json\", \"model\": {\"mixer\": {\"kind\": \"kla\", \"windw\": 8}}}");
    CfgOrigins *o = NULL;
    cJSON *root = config_load(path_("ba.json"), NULL, 0, &o, &e);
    CHECK(root != NULL, "bind_at fixture loads: %.200s", e.msg);
    const cJSON *model = cJSON_GetObjectItem(root, "model");
    const cJSON *layers = cJSON_GetObjectItem(model, "layers");
    MixerOpts m;
    CHECK(config_bind_at(&m, &mixer_sec, cJSON_GetObjectItem(model, "mixer"), o, "model.mixer", &e) == -1,
          "bind_at reports a typo");
    CHECK_CONTAINS(e.msg, "ba.json: unknown key 'model.mixer.windw' (did you mean 'model.mixer.window'?)",
                   "with the full path and the file");
    CHECK(config_bind_at(&m, &mixer_sec, cJSON_GetObjectItem(cJSON_GetArrayItem(layers, 1), "mixer"), o,
                         "model.layers[1].mixer", &e) == -1, "bind_at inside a list item");
    CHECK_CONTAINS(e.msg, "ba_base.json: model.layers[1].mixer.window: 0 is out of range (allowed: 1 to 4096)",
                   "names the item's path and the base that set it");
    memset(&m, 0, sizeof m);
    CHECK(config_bind_at(&m, &mixer_sec, cJSON_GetObjectItem(cJSON_GetArrayItem(layers, 0), "mixer"), o,
                         "model.layers[0].mixer", &e) == 0 && m.window == 64 && strcmp(m.kind, "attn") == 0,
          "an absent object binds its defaults");
    cJSON_Delete(root);
    config_origins_free(o);

    cJSON *node = cJSON_Parse("{\"window\": 5}");
    CHECK(config_bind_at(&m, &mixer_sec, node, NULL, "model.mixer", &e) == 0 && m.window == 5 &&
          strcmp(m.kind, "attn") == 0, "bind_at without origins");
    cJSON_Delete(node);
    node = cJSON_Parse("{\"kind\": \"kal\"}");
    CHECK(config_bind_at(&m, &mixer_sec, node, NULL, "model.layers[3].mixer", &e) == -1 &&
          strstr(e.msg, "model.layers[3].mixer.kind: \"kal\" is not allowed") == e.msg, "messages start with the path");
    cJSON_Delete(node);
    node = cJSON_CreateNumber(3);
    CHECK(config_bind_at(&m, &mixer_sec, node, NULL, "model.mixer", &e) == -1, "bind_at of a number fails");
    CHECK_STR(e.msg, "model.mixer: expected an object, got 3 (a number)", "as a type error at the path");
    CHECK(config_bind_at(&m, &mixer_sec, node, NULL, "", &e) == -1, "bind_at of a number at the root fails");
    CHECK_STR(e.msg, "the configuration must be a JSON object", "as config_bind does");
    cJSON_Delete(node);

    const char *sets[] = {"model.layers[1].mixer.window=-3"};
    root = config_load(path_("ba.json"), sets, 1, &o, &e);
    layers = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "model"), "layers");
    CHECK(config_bind_at(&m, &mixer_sec, cJSON_GetObjectItem(cJSON_GetArrayItem(layers, 1), "mixer"), o,
                         "model.layers[1].mixer", &e) == -1, "bind_at of a value set by --set");
    CHECK_CONTAINS(e.msg, "--set model.layers[1].mixer.window=-3: model.layers[1].mixer.window: -3 is out of range",
                   "names the --set");
    cJSON_Delete(root);
    config_origins_free(o);
}

static void test_set_items(void) {
    ExtCfg c;
    write_("si.json", "{\"model\": {\"layers\": [{\"at\": \"0\"}]},"
                      " \"optim\": {\"beta1\": 0.8, \"groups\": [{\"match\": \"a\"}, {\"match\": \"b\"}]}}");
    const char *sets[] = {"optim.groups[0].lr_mult=0.5", "optim.groups[1]={\"decay\": false}",
                          "model.layers[0].mixer.window=16", "optim.groups[01].beta1=null"};
    CHECK_STR(ext_load_("si.json", sets, 4, &c), "", "--set into list items");
    CHECK(group_(&c, 0)->lr_mult == 0.5, "--set a key of an item");
    CHECK(group_(&c, 1)->decay == 0 && strcmp(group_(&c, 1)->match, "b") == 0, "--set an object merges into the item");
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(layer_(&c, 0)->mixer, "window")) == 16,
          "--set creates an object inside an item");
    CHECK(isnan(group_(&c, 1)->beta1), "an index with a leading zero");
    config_free(&c, &ext_schema);

    const char *s1[] = {"optim.groups[5].lr_mult=1"}, *s2[] = {"optim.groups.0.lr_mult=1"},
               *s3[] = {"optim.beta1[0]=1"}, *s4[] = {"model.mixer[0]=1"}, *s5[] = {"optim.groups[x].a=1"},
               *s6[] = {"optim.groups[0]x=1"}, *s7[] = {"optim.groups[-1]=1"}, *s8[] = {"optim.groups[1]=3"},
               *s9[] = {"optim.groups[0].lr_mult=-1"}, *s10[] = {"optim.groups[1].lr_mul=2"};
    const char *file = "{\"optim\": {\"beta1\": 0.8, \"groups\": [{\"match\": \"a\"}, {\"match\": \"b\"}]}}";
    CHECK_CONTAINS(ext_err_(file, s1, 1), "--set optim.groups[5].lr_mult=1: 'optim.groups' has 2 items, so no item [5]",
                   "--set past the end of a list");
    CHECK_CONTAINS(ext_err_(file, s2, 1),
                   "'optim.groups' is a list, not an object (name an item: optim.groups[0], ...)",
                   "--set into a list without an index");
    CHECK_CONTAINS(ext_err_(file, s3, 1), "'optim.beta1' is 0.8 (a number), not a list", "--set an index of a number");
    CHECK_CONTAINS(ext_err_(file, s4, 1), "--set model.mixer[0]=1: 'model.mixer' is not set, so it has no item [0]",
                   "--set an index of a missing key");
    CHECK_CONTAINS(ext_err_(file, s5, 1), "bad list index after 'optim.groups' (expected [0], [1], ...)",
                   "--set a non-numeric index");
    CHECK_CONTAINS(ext_err_(file, s6, 1), "expected '.', '[' or '=' after 'optim.groups[0]'",
                   "--set junk after an index");
    CHECK_CONTAINS(ext_err_(file, s7, 1), "bad list index after 'optim.groups'", "--set a negative index");
    CHECK_CONTAINS(ext_err_(file, s8, 1), "--set optim.groups[1]=3: optim.groups[1]: expected an object, got 3",
                   "an item replaced by --set is blamed on it");
    CHECK_CONTAINS(ext_err_(file, s9, 1),
                   "--set optim.groups[0].lr_mult=-1: optim.groups[0].lr_mult: -1 is out of range",
                   "a bad value set in an item names the --set");
    CHECK_CONTAINS(ext_err_(file, s10, 1),
                   "--set optim.groups[1].lr_mul=2: unknown key 'optim.groups[1].lr_mul' (did you mean",
                   "an item's typo by --set");
    CHECK_CONTAINS(ext_err_("{\"optim\": {\"groups\": [3]}}", s9, 1),
                   "'optim.groups[0]' is 3 (a number), not an object", "--set into an item that is not an object");
}

static void test_ext_docs(void) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    config_write_docs(f, &ext_schema);
    fclose(f);
    CHECK_CONTAINS(buf, "| `groups` | list of objects (see optim.groups[]) | `[]` | at most 3 items | Parameter "
                        "groups. |", "a list of objects in its section's table");
    CHECK_CONTAINS(buf, "## optim.groups[]\n\nOne parameter group.\n\n| key |", "the items get their own table");
    CHECK_CONTAINS(buf, "| `match` | string | required |", "an item's key");
    CHECK_CONTAINS(buf, "| `beta1` | number | `null` | 0 to 1, or null | null = the global optim.beta1. |",
                   "a nullable number");
    CHECK_CONTAINS(buf, "## model.layers[]\n", "the items of a list without a bound");
    CHECK_CONTAINS(buf, "| `layers` | list of objects (see model.layers[]) | `[]` |  | Per-layer overrides. |",
                   "a list without a bound allows any count");
    CHECK_CONTAINS(buf, "| `mixer` | object (validated by its owner) | `{\"kind\": \"attn\"}` |  | Default mixer "
                        "(see docs/mixers.md). |", "a JSON value");
    CHECK(strstr(buf, "## optim.groups[]") > strstr(buf, "## optim\n"), "the items' table follows its section's");
    free(buf);

    static const CfgKey counted_keys[] = {
        {"groups", CFG_OBJLIST, offsetof(ExtOptimCfg, groups), "[]", 1, 2, {.elem_size = sizeof(GroupCfg)},
         &group_sec, "Groups."},
    };
    const CfgSection counted = {"", NULL, counted_keys, 1};
    f = open_memstream(&buf, &n);
    config_write_docs(f, &counted);
    fclose(f);
    CHECK_CONTAINS(buf, "| `groups` | list of objects (see groups[]) | `[]` | 1 to 2 items |",
                   "a counted list at the top");
    free(buf);
}

static void test_edit_distance(void) {
    CHECK(config_edit_distance("", "") == 0, "edit distance of empty strings");
    CHECK(config_edit_distance("abc", "") == 3, "edit distance to empty");
    CHECK(config_edit_distance("kitten", "sitting") == 3, "kitten/sitting");
    CHECK(config_edit_distance("seqlen", "seq_len") == 1, "one insertion");
    CHECK(config_edit_distance("lr", "rl") == 2, "a swap is two edits");
    CHECK(config_edit_distance("Lr", "lr") == 1, "case-sensitive");
}

// strings that are not UTF-8 (they would reach run names and config.json) are refused with their path,
// in files, base files, --set values, list items and key names; well-formed multi-byte text is kept
static void test_utf8(void) {
    TestCfg c;
    write_("u8_ok.json", "{\"name\": \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\", \"data\": {\"train\": \"x\"}}");
    CHECK_STR(load_("u8_ok.json", NULL, 0, &c), "", "2-, 3- and 4-byte UTF-8 in a string is accepted");
    CHECK_STR(c.name, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "... and kept byte for byte");

    char want[300];
    snprintf(want, sizeof want, "%s: name: the string is not valid UTF-8 (byte 0xff at offset 3); config strings must be UTF-8",
             path_("t.json"));
    CHECK_CONTAINS(err_of_("{\"name\": \"run\xff\", \"data\": {\"train\": \"x\"}}", NULL, 0), want,
                   "a stray 0xff in a file's string names the file, the key and the byte");
    snprintf(want, sizeof want, "%s: data.train[1]: the string is not valid UTF-8 (byte 0xc3 at offset 1)", path_("t.json"));
    CHECK_CONTAINS(err_of_("{\"data\": {\"train\": [\"a\", \"b\xc3(\"]}}", NULL, 0), want,
                   "a truncated sequence in a string list item names the item");
    const char *bad[] = {"\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\x80", "\xe2\x82"};
    const char *why[] = {"an overlong '/'", "a 3-byte overlong", "a UTF-16 surrogate", "a code point above U+10FFFF",
                         "a 0xf5 lead byte", "a lone continuation byte", "a sequence cut short"};
    for (int i = 0; i < 7; i++) {
        char json[200];
        snprintf(json, sizeof json, "{\"name\": \"%s\", \"data\": {\"train\": \"x\"}}", bad[i]);
        CHECK_CONTAINS(err_of_(json, NULL, 0), "name: the string is not valid UTF-8 (byte 0x", "%s is refused", why[i]);
    }
    snprintf(want, sizeof want, "%s: data: a key name is not valid UTF-8", path_("t.json"));
    CHECK_CONTAINS(err_of_("{\"data\": {\"train\": \"x\", \"se\xffq\": 1}}", NULL, 0), want, "a key name that is not UTF-8");

    write_("u8_base.json", "{\"name\": \"\xfe\"}");
    write_("u8_child.json", "{\"base\": \"u8_base.json\", \"data\": {\"train\": \"x\"}}");
    snprintf(want, sizeof want, "%s: name: the string is not valid UTF-8 (byte 0xfe at offset 0)", path_("u8_base.json"));
    CHECK_CONTAINS(load_("u8_child.json", NULL, 0, &c), want, "in a base file: that file is named");

    const char *s1[] = {"name=ab\xff"}, *s2[] = {"data.val=[\"ok\", \"\xe9t\xe9\"]"}, *s3[] = {"name=\"\xc3\""},
               *s4[] = {"da\xffta.x=1"}, *s5[] = {"name=caf\xc3\xa9"};
    CHECK_CONTAINS(err_of_("{\"data\": {\"train\": \"x\"}}", s1, 1),
                   "--set name=ab\\xff: name: the string is not valid UTF-8 (byte 0xff at offset 2)",
                   "a --set plain string: the --set (bad byte shown as \\xff) and the key");
    CHECK_CONTAINS(err_of_("{\"data\": {\"train\": \"x\"}}", s2, 1), "data.val[1]: the string is not valid UTF-8 (byte 0xe9 at offset 0)",
                   "a --set list of Latin-1 strings names the item");
    CHECK_CONTAINS(err_of_("{\"data\": {\"train\": \"x\"}}", s3, 1), "--set name=\"\\xc3\": name: the string is not valid UTF-8",
                   "a --set JSON string");
    CHECK_CONTAINS(err_of_("{\"data\": {\"train\": \"x\"}}", s4, 1), "--set da\\xffta.x=1: the key is not valid UTF-8",
                   "a --set key that is not UTF-8");
    CHECK_STR(load_("u8_ok.json", s5, 1, &c), "", "a --set UTF-8 string is accepted");
    CHECK_STR(c.name, "caf\xc3\xa9", "... and kept");
}

int main(void) {
    snprintf(dir_, sizeof dir_, "/tmp/seqcfgXXXXXX");
    if (!mkdtemp(dir_)) {
        perror("mkdtemp");
        return 1;
    }
    test_defaults();
    test_base();
    test_bad_files();
    test_bind_errors();
    test_overrides();
    test_origins();
    test_dump();
    test_docs();
    test_objlist();
    test_objlist_origins();
    test_json_value();
    test_kind_replaces();
    test_nullable();
    test_bind_at();
    test_set_items();
    test_ext_docs();
    test_edit_distance();
    test_utf8();
    while (n_made_ > 0) remove(made_[--n_made_]);
    CHECK(rmdir(dir_) == 0, "temporary folder cleaned up");
    return test_summary();
}
