/*
 * Config loading and binding against a small schema shaped like the real one (two sections, a nested
 * section, every key type, a required key): defaults, "base" inheritance, --set overrides, every kind of
 * error message and where it says the value came from, dump -> bind round trips, the docs, and the edit
 * distance behind the did-you-mean hints. Fixture files are written to a fresh temporary folder.
 */
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
    {"beta1", CFG_FLOAT, offsetof(OptimCfg, beta1), "0.9", 0, 1, NULL, NULL, "Adam beta1."},
    {"beta2", CFG_FLOAT, offsetof(OptimCfg, beta2), "0.95", 0, 1, NULL, NULL, "Adam beta2."},
    {"weight_decay", CFG_FLOAT, offsetof(OptimCfg, weight_decay), "0.1", 0, 0, NULL, NULL, "Decoupled | decay."},
};
static const CfgSection optim_sec = {"optim", "Optimizer.", optim_keys, 3};

static const CfgKey data_keys[] = {
    {"train", CFG_STRLIST, offsetof(DataCfg, train), NULL, 0, 0, NULL, NULL, "Training shards."},
    {"val", CFG_STRLIST, offsetof(DataCfg, val), "[]", 0, 0, NULL, NULL, "Validation shards."},
    {"seq_len", CFG_INT, offsetof(DataCfg, seq_len), "512", 1, 1048576, NULL, NULL, "Tokens per sequence."},
    {"format", CFG_ENUM, offsetof(DataCfg, format), "\"auto\"", 0, 0, "auto|seqtok|llmc|raw_u16|raw_u32", NULL,
     "Shard format."},
};
static const CfgSection data_sec = {"data", "Data.", data_keys, 4};

static const CfgKey train_keys[] = {
    {"lr", CFG_FLOAT, offsetof(TrainCfg, lr), "3e-4", 0, 10, NULL, NULL, "Peak learning rate."},
    {"steps", CFG_INT, offsetof(TrainCfg, steps), "1000", 1, 1e9, NULL, NULL, "Optimizer steps."},
    {"compile", CFG_BOOL, offsetof(TrainCfg, compile), "false", 0, 0, NULL, NULL, "Fuse kernels."},
    {"optim", CFG_SECTION, offsetof(TrainCfg, optim), NULL, 0, 0, NULL, &optim_sec, NULL},
};
static const CfgSection train_sec = {"train", "Training.", train_keys, 4};

static const CfgKey root_keys[] = {
    {"name", CFG_STR, offsetof(TestCfg, name), "\"run\"", 0, 0, NULL, NULL, "Run name."},
    {"data", CFG_SECTION, offsetof(TestCfg, data), NULL, 0, 0, NULL, &data_sec, NULL},
    {"train", CFG_SECTION, offsetof(TestCfg, train), NULL, 0, 0, NULL, &train_sec, NULL},
};
static const CfgSection schema = {"", NULL, root_keys, 3};

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

static void test_edit_distance(void) {
    CHECK(config_edit_distance("", "") == 0, "edit distance of empty strings");
    CHECK(config_edit_distance("abc", "") == 3, "edit distance to empty");
    CHECK(config_edit_distance("kitten", "sitting") == 3, "kitten/sitting");
    CHECK(config_edit_distance("seqlen", "seq_len") == 1, "one insertion");
    CHECK(config_edit_distance("lr", "rl") == 2, "a swap is two edits");
    CHECK(config_edit_distance("Lr", "lr") == 1, "case-sensitive");
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
    test_edit_distance();
    while (n_made_ > 0) remove(made_[--n_made_]);
    CHECK(rmdir(dir_) == 0, "temporary folder cleaned up");
    return test_summary();
}
