// config_diff (core/config.h): the keys where two resolved configs differ, as --resume reports a config.json
// edited since the checkpoint and seqtrain under MPI reports a rank started with another configuration.
#include <stdlib.h>

#include "core/config.h"
#include "test.h"

// the entries of config_diff(a, b) described, "; "-joined, into buf
static const char *diff_(const char *a, const char *b, int one_sided, char *buf, size_t n) {
    cJSON *x = cJSON_Parse(a), *y = cJSON_Parse(b), *d = cJSON_CreateObject();
    config_diff(x, y, "was", "now", one_sided, d);
    buf[0] = '\0';
    for (const cJSON *e = d->child; e; e = e->next) {
        char one[200];
        config_diff_describe(e, "was", "before", "now", "after", one, sizeof one);
        size_t l = strlen(buf);
        snprintf(buf + l, n - l, "%s%s", l ? "; " : "", one);
    }
    cJSON_Delete(x);
    cJSON_Delete(y);
    cJSON_Delete(d);
    return buf;
}

int main(void) {
    char buf[1000];
    const char *base = "{\"optim\": {\"lr\": 0.003, \"groups\": [{\"match\": \"wte\", \"lr\": 0.05}]},"
                       " \"data\": {\"shuffle\": true, \"train\": [\"a\", \"b\"]}, \"run\": {\"seed\": 5}}";
    CHECK_STR(diff_(base, base, 1, buf, sizeof buf), "", "a config against itself: no difference");
    CHECK_STR(diff_("{\"x\": {\"lr\": 0.5}}", "{\"x\": {\"lr\": 5e-1}}", 1, buf, sizeof buf), "",
              "numbers compare by value, not by their text");
    CHECK_STR(diff_(base, "{\"optim\": {\"lr\": 0.001, \"groups\": [{\"match\": \"wte\", \"lr\": 0.06}]},"
                    " \"data\": {\"shuffle\": false, \"train\": [\"a\", \"b\"]}, \"run\": {\"seed\": 6}}",
                    1, buf, sizeof buf),
              "optim.lr (0.003 before, 0.001 after); optim.groups[0].lr (0.05 before, 0.06 after); "
              "data.shuffle (true before, false after); run.seed (5 before, 6 after)",
              "every differing leaf by its full path, list items by index, both values");
    CHECK_STR(diff_("{\"data\": {\"train\": [\"a\", \"b\"]}}", "{\"data\": {\"train\": [\"a\"]}}", 1, buf,
                    sizeof buf),
              "data.train ([\"a\",\"b\"] before, [\"a\"] after)", "a list of another length differs as a whole");
    const char *a = "{\"m\": {\"kind\": \"kla\", \"old\": 1}}", *b = "{\"m\": {\"kind\": \"kla\", \"new\": 2}}";
    CHECK_STR(diff_(a, b, 0, buf, sizeof buf), "", "keys on one side only: skipped unless asked for");
    CHECK_STR(diff_(a, b, 1, buf, sizeof buf), "m.new (absent before, 2 after); m.old (1 before, absent after)",
              "one_sided: a key only one side has, with the other side absent");
    return test_summary();
}
