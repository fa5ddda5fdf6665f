/*
 * The list of mixers. Adding a mixer = its file in mixers/, one line here, a section in docs/mixers.md,
 * a gradient check and a config.
 */
#include "mixers/mixer.h"

#include <stdlib.h>
#include <string.h>

extern const MixerOps MIXER_ATTENTION;
extern const MixerOps MIXER_RFA;
extern const MixerOps MIXER_KLA;
extern const MixerOps MIXER_LINEAR_ATTN;
extern const MixerOps MIXER_RETNET;
extern const MixerOps MIXER_GLA;
extern const MixerOps MIXER_MAMBA;
extern const MixerOps MIXER_MAMBA2;
extern const MixerOps MIXER_MLSTM;
extern const MixerOps MIXER_DELTANET, MIXER_GATED_DELTANET;
extern const MixerOps MIXER_GSA;
extern const MixerOps MIXER_BLA;

static const MixerOps *const MIXERS_[] = {
    &MIXER_ATTENTION,
    &MIXER_RFA,
    &MIXER_KLA,
    &MIXER_LINEAR_ATTN,
    &MIXER_RETNET,
    &MIXER_GLA,
    &MIXER_MAMBA,
    &MIXER_MAMBA2,
    &MIXER_MLSTM,
    &MIXER_DELTANET, &MIXER_GATED_DELTANET,
    &MIXER_GSA,
    &MIXER_BLA,
};
static const int N_MIXERS_ = (int)(sizeof MIXERS_ / sizeof MIXERS_[0]);

const MixerOps *mixer_lookup(const char *name) {
    for (int i = 0; i < N_MIXERS_; i++)
        if (strcmp(MIXERS_[i]->name, name) == 0) return MIXERS_[i];
    return NULL;
}

const char *mixer_names(void) {
    static char buf[256];
    if (!buf[0])
        for (int i = 0; i < N_MIXERS_; i++) {
            if (i) strncat(buf, ", ", sizeof buf - strlen(buf) - 1);
            strncat(buf, MIXERS_[i]->name, sizeof buf - strlen(buf) - 1);
        }
    return buf;
}

int mixer_spec_parse(MixerSpec *s, const cJSON *j, const CfgOrigins *origins, const char *path, int C, Err *e) {
    memset(s, 0, sizeof *s);
    if (!cJSON_IsObject(j)) return err_set(e, "%s: expected an object with a \"kind\"", path);
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(j, "kind");
    if (!cJSON_IsString(kind))
        return err_set(e, "%s.kind: missing or not a string (mixers: %s)", path, mixer_names());
    const MixerOps *ops = mixer_lookup(kind->valuestring);
    if (!ops) {
        const char *best = NULL;
        int best_d = 1 << 30;
        for (int i = 0; i < N_MIXERS_; i++) {
            int d = config_edit_distance(kind->valuestring, MIXERS_[i]->name);
            if (d < best_d) { best_d = d; best = MIXERS_[i]->name; }
        }
        if (best && best_d <= 3)
            return err_set(e, "%s.kind: unknown mixer \"%s\" (did you mean '%s'? mixers: %s)", path, kind->valuestring,
                           best, mixer_names());
        return err_set(e, "%s.kind: unknown mixer \"%s\" (mixers: %s)", path, kind->valuestring, mixer_names());
    }
    // the options are everything but "kind", validated by the mixer's own schema at the same path
    cJSON *opts = cJSON_Duplicate(j, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(opts, "kind");
    s->ops = ops;
    s->C = C;
    s->opts = xcalloc(1, ops->opts_size);
    int rc = config_bind_at(s->opts, ops->schema, opts, origins, path, e);
    cJSON_Delete(opts);
    if (rc == 0 && ops->check) rc = ops->check(s, path, e);
    if (rc != 0) {
        mixer_spec_free(s);
        return -1;
    }
    return 0;
}

void mixer_spec_free(MixerSpec *s) {
    if (s->opts && s->ops) config_free(s->opts, s->ops->schema);
    free(s->opts);
    memset(s, 0, sizeof *s);
}
