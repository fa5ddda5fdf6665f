// libFuzzer harness: the config loader (core/config.h through run/run_config.h): a run config, a base
// file it may inherit from, and --set overrides, then binding against the schema, validation and dump.
// The input is split at NUL bytes: part 0 is main.json, part 1 base.json (main may say "base":
// "base.json"), parts 2.. (at most 8) are --set strings.
#include "fuzz_common.h"
#include "run/run_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *part[10];
    size_t len[10];
    int n = 0;
    size_t start = 0;
    for (size_t i = 0; i <= size && n < 10; i++) {
        if (i == size || data[i] == 0) {
            part[n] = data + start;
            len[n++] = i - start;
            start = i + 1;
        }
    }
    char main_path[256], base_path[256];
    fuzz_write("main.json", part[0], len[0], main_path, sizeof main_path);
    fuzz_write("base.json", n > 1 ? part[1] : (const uint8_t *)"{}", n > 1 ? len[1] : 2, base_path, sizeof base_path);
    char *sets[8];
    int n_sets = 0;
    for (int i = 2; i < n; i++) {
        sets[n_sets] = malloc(len[i] + 1);
        memcpy(sets[n_sets], part[i], len[i]);
        sets[n_sets++][len[i]] = 0;
    }
    RunConfig c;
    Err e;
    if (run_config_load(&c, main_path, (const char *const *)sets, n_sets, NULL, &e) == 0) {
        (void)run_config_check(&c, &e);
        cJSON *j = config_dump(&c, &RUN_CONFIG_SCHEMA);
        char *s = cJSON_PrintUnformatted(j);
        free(s);
        cJSON_Delete(j);
        run_config_free(&c);
    }
    for (int i = 0; i < n_sets; i++) free(sets[i]);
    return 0;
}
