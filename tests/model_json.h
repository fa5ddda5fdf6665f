/*
 * A whole model for the model-level tests, from the JSON of a config's `model` section (vocabulary 37, or V).
 */
#ifndef SEQ_TEST_MODEL_JSON_H
#define SEQ_TEST_MODEL_JSON_H

#include <stdint.h>
#include <string.h>

#include "core/config.h"
#include "model/model.h"
#include "test.h"

// m built from json with a vocabulary of V, or NULL with a failed check naming the error
static inline Model *model_json_build_v(const char *json, Model *m, int V, uint64_t seed) {
    Err e = {{0}};
    cJSON *j = cJSON_Parse(json);
    ModelSection ms;
    memset(&ms, 0, sizeof ms);
    int rc = config_bind_at(&ms, &MODEL_SECTION, j, NULL, "model", &e);
    cJSON_Delete(j);
    if (rc == 0) rc = model_build(m, &ms, V, NULL, seed, &e);
    config_free(&ms, &MODEL_SECTION);
    CHECK(rc == 0, "model builds (%.200s)", e.msg);
    return rc == 0 ? m : NULL;
}

static inline Model *model_json_build(const char *json, Model *m, uint64_t seed) {
    return model_json_build_v(json, m, 37, seed);
}

#endif
