/*
 * The mixer interface: a mixer maps x (B,T,C) to y (B,T,C) and owns its projections, so attention with
 * any position scheme, complex-valued filters (RFA) or fused recurrent blocks (KLA) fit the model the
 * same way. One MixerOps per family, listed in mixers/registry.c; variants and ablations of one paper
 * are options of one mixer, not copies of it.
 *
 * Every mixer file includes mixers/mixer_kit.h too: the schema row, tensor declaration, activation layout,
 * head resolution and scalar gates it would otherwise copy from the others.
 *
 * Life cycle (model.c drives it):
 *   spec    the options, validated with the mixer's own config schema (config_bind_at) and then by
 *           ops->check, which sees the model width C;
 *   params  ops->params declares the tensors (names below the layer prefix, shapes, init, decay flag)
 *           into the model's table; the model hands each layer's Mixer the flat buffers afterwards;
 *   run     forward keeps what backward needs in m->acts (ops->act_size floats for B,T); x must stay
 *           valid until backward (the model keeps every layer's input); backward ACCUMULATES into dx
 *           and into the parameter gradients; m->scratch (ops->scratch_size floats, shared by all
 *           layers) is free for temporaries in both passes.
 */
#ifndef SEQ_MIXER_H
#define SEQ_MIXER_H

#include <stddef.h>
#include <stdint.h>
#include "core/config.h"
#include "core/err.h"
#include "core/params.h"

struct MixerOps;

typedef struct MixerSpec {
    const struct MixerOps *ops;
    void *opts;   // the mixer's options struct (ops->opts_size bytes), bound from its schema
    int C;        // model width
    int sample;   // set by the model: draw this layer's output from its posterior (KLA+, model.mc_samples > 1)
} MixerSpec;

typedef struct Mixer {
    const MixerSpec *spec;
    const ParamTable *pt;
    int first;        // index in pt of the first tensor this mixer declared
    float *params;    // the model's flat parameter buffer
    float *grads;     // the model's flat gradient buffer
    float *acts;      // (act_size,) this layer's saved activations
    float *scratch;   // (scratch_size,) shared temporaries
    int B, T;         // the shape acts were sized for
    uint64_t noise_seed;  // keys the noise of a sampling forward (spec->sample); the backward sees the same
} Mixer;

// One named term of a layer's decoding state, written as the BLA paper's Table 1 writes state sizes (H·dk·dv,
// H(dk+dv)·min(w,L), D(k_conv − 1), ...) with this layer's numbers substituted. A mixer's terms add up to
// exactly what it keeps per sequence to decode T positions: state_size(s, T).
typedef struct StateTerm {
    char name[48];      // what the floats are: "GLA state", "KV cache", "short conv", "position", ...
    char formula[160];  // symbols = numbers, e.g. "H·dk·dv = 4·32·32" (the printer appends " = value")
    size_t value;       // floats per sequence
    int table1;         // 1: one of Table 1's rows (its "paper count"); 0: state Table 1 does not count
} StateTerm;

#define STATE_TERMS_MAX 8
typedef struct StateTerms {
    int n;
    StateTerm t[STATE_TERMS_MAX];
} StateTerms;

// the sum of st's values; with table1_only, of Table 1's rows only (the paper's count)
static inline size_t state_terms_total(const StateTerms *st, int table1_only) {
    size_t n = 0;
    for (int i = 0; i < st->n; i++)
        if (!table1_only || st->t[i].table1) n += st->t[i].value;
    return n;
}

typedef struct MixerOps {
    const char *name;
    const char *doc;                  // one line saying what the mixer is, for a reader of the registry
    int samples_posterior;            // forward honours spec->sample: a draw from its posterior (KLA+)
    // the mixer carries its own gated MLP (KLA, Mamba-style blocks): model.block "auto" gives its layers the
    // fused block x += mixer(norm(x)) with no separate MLP; every other mixer gets prenorm's MLP after it
    int owns_mlp;
    const CfgSection *schema;         // the options (model.mixer.* keys besides "kind")
    size_t opts_size;
    // cross-key validation once C is known (e.g. heads divide the width); may fill derived fields
    int (*check)(MixerSpec *s, const char *path, Err *e);
    // declare tensors under prefix ("blocks.3.mixer"); n_layers lets projections scale their init
    int (*params)(const MixerSpec *s, ParamTable *pt, const char *prefix, int n_layers, Err *e);
    // fill INIT_CUSTOM tensors after the table's rules ran (e.g. frequency banks); may be NULL
    void (*init)(const Mixer *m);
    size_t (*act_size)(const MixerSpec *s, int B, int T);
    size_t (*scratch_size)(const MixerSpec *s, int B, int T);
    void (*forward)(Mixer *m, float *y, const float *x, int B, int T);        // y, x (B,T,C)
    void (*backward)(Mixer *m, float *dx, const float *dy, const float *x, int B, int T);  // dx += ...
    // Decoding, token by token (model_decoder_* in model/model.h drives it). state_size(s, cap): floats one
    // sequence needs to decode up to cap positions: a recurrent state (the same for every cap) and, for
    // attention, a cache of keys and values; state_size(s, 0) is the part that does not grow with cap. A
    // mixer whose state_size(s, cap + 1) > state_size(s, cap) keeps every position and takes t < cap only;
    // otherwise (recurrent, or a sliding window no longer than cap: a ring) any t.
    size_t (*state_size)(const MixerSpec *s, int cap);
    // optional (NULL = cannot decode): set B sequences' states (B, state_size(s, cap)) to the empty prefix,
    // and advance them by the token at position t (0-based, the same for the B sequences): x, y (B,C).
    // A token at a time reproduces forward.
    void (*state_init)(const Mixer *m, float *state, int B, int cap);
    void (*step)(const Mixer *m, float *state, float *y, const float *x, int B, int t, int cap);
    size_t (*cache_per_token)(const MixerSpec *s);  // floats cached per token when decoding (K and V); 0 = none
    // optional (NULL = no formula): the decoding state at context T as named terms (StateTerm above) that add up
    // to state_size(s, T); seqtrain --info prints them (docs/mixers.md "State sizes")
    void (*state_terms)(const MixerSpec *s, int T, StateTerms *st);
    // optional (NULL = none): per-head quantities worth watching during training, added to obj as named
    // arrays (the trainer writes them to diag.jsonl)
    void (*diag)(const Mixer *m, cJSON *obj);
    // optional (NULL = not an attention-like mixer): number of heads, and head h's attention map of batch
    // row b from the last forward's saved activations: P (T,T), the weight of input position j in output i
    // (softmax weights for attention; kla: a channel's signed Kalman attention matrix), NaN where hidden
    int (*attn_heads)(const MixerSpec *s);
    void (*attn_map)(const Mixer *m, int b, int h, float *P);
    // optional (NULL = no posterior): batch row b's output variance from the last forward's saved activations,
    // var (T, n) for the n channels returned (var NULL: only n). kla: the readout variance sum_s q^2 / lambda
    size_t (*posterior_var)(const Mixer *m, int b, float *var);
} MixerOps;

const MixerOps *mixer_lookup(const char *name);
// "attention, ..." for messages
const char *mixer_names(void);
// parse {"kind": ..., options...} at `path` into s (allocates s->opts)
int mixer_spec_parse(MixerSpec *s, const cJSON *j, const CfgOrigins *origins, const char *path, int C, Err *e);
void mixer_spec_free(MixerSpec *s);
// a mixer's tensor k (in declaration order) within its parameter / gradient buffer
static inline float *mixer_param(const Mixer *m, int k) { return m->params + m->pt->t[m->first + k].offset; }
static inline float *mixer_grad(const Mixer *m, int k) { return m->grads + m->pt->t[m->first + k].offset; }

#endif
