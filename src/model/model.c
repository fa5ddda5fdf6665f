#include "model/model.h"

#include <limits.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "mixers/mixer_kit.h"
#include "nn/activation.h"
#include "nn/embedding.h"
#include "nn/matmul.h"
#include "nn/norm.h"
#include "nn/xent.h"

// ----------------------------------------------------------------------------
// configuration schema

#define MKEY_(S, name, type, field, def, lo, hi, choices, doc) \
    {name, type, offsetof(S, field), def, lo, hi, {choices}, NULL, doc}

static const CfgKey MLP_KEYS_[] = {
    MKEY_(MlpSection, "kind", CFG_ENUM, kind, "\"gelu\"", 0, 0, "gelu|swiglu|relu|none",
          "MLP after each mixer: gelu (erf) or relu with one hidden layer, swiglu (silu(a)·b), or none."),
    MKEY_(MlpSection, "ratio", CFG_FLOAT, ratio, "4", 0.01, 64, NULL, "Hidden width = round(ratio · d_model)."),
    MKEY_(MlpSection, "bias", CFG_BOOL, bias, "true", 0, 0, NULL, "Biases in the MLP's two projections."),
};
static const CfgSection MLP_SECTION_ = {"mlp", "The block's MLP.", MLP_KEYS_, 3};

static const CfgKey LAYER_KEYS_[] = {
    MKEY_(LayerOverride, "at", CFG_STR, at, NULL, 0, 0, NULL,
          "Layers this override applies to: \"11\", \"-1\" (the last), \"0,2,4\", \"3-5\"."),
    MKEY_(LayerOverride, "mixer", CFG_JSON, mixer, "{}", 0, 0, NULL,
          "Mixer options merged over model.mixer for these layers; a different \"kind\" replaces it whole."),
    MKEY_(LayerOverride, "block", CFG_ENUM, block, "\"inherit\"", 0, 0, "inherit|auto|prenorm|fused",
          "Block kind of these layers: inherit = model.block's; auto, prenorm, fused as in model.block (a kla "
          "layer in a GPT stack needs none: auto makes it fused)."),
};
static const CfgSection LAYER_SECTION_ = {"layers", "Per-layer overrides of the default mixer and block.", LAYER_KEYS_, 3};

static const CfgKey MODEL_KEYS_[] = {
    MKEY_(ModelSection, "vocab_size", CFG_INT, vocab_size, "0", 0, 1 << 24, NULL,
          "Vocabulary size; 0 = the data's (must be >= every token id)."),
    MKEY_(ModelSection, "d_model", CFG_INT, d_model, "256", 1, 1 << 16, NULL, "Model width C."),
    MKEY_(ModelSection, "n_layers", CFG_INT, n_layers, "6", 1, 1024, NULL, "Number of blocks."),
    MKEY_(ModelSection, "block", CFG_ENUM, block, "\"auto\"", 0, 0, "auto|prenorm|fused",
          "Block kind: prenorm = x += mixer(norm(x)); x += mlp(norm(x)). fused = x += mixer(norm(x)), no MLP "
          "(Mamba/KLA style: the mixer's gate is the MLP). auto = fused for a layer whose mixer carries its own "
          "MLP (owns_mlp in docs/mixers.md: kla, mamba, mamba2, mlstm), prenorm for every other layer."),
    MKEY_(ModelSection, "norm", CFG_ENUM, norm, "\"layernorm\"", 0, 0, "layernorm|rmsnorm",
          "Norm used before the mixer, before the MLP and before the head."),
    MKEY_(ModelSection, "norm_bias", CFG_BOOL, norm_bias, "true", 0, 0, NULL, "LayerNorm has a bias (ignored for rmsnorm)."),
    {"mlp", CFG_SECTION, offsetof(ModelSection, mlp), "{}", 0, 0, {NULL}, &MLP_SECTION_, "The block's MLP."},
    MKEY_(ModelSection, "mixer", CFG_JSON, mixer, "{\"kind\": \"attention\"}", 0, 0, NULL,
          "The default sequence mixer of every layer: {\"kind\": name, options...}; docs/mixers.md lists the options."),
    {"layers", CFG_OBJLIST, offsetof(ModelSection, layers), "[]", 0, 1024, {.elem_size = sizeof(LayerOverride)},
     &LAYER_SECTION_, "Per-layer overrides (hybrid stacks)."},
    MKEY_(ModelSection, "tie_embeddings", CFG_BOOL, tie_embeddings, "true", 0, 0, NULL,
          "The head reuses the token embedding matrix."),
    MKEY_(ModelSection, "head_bias", CFG_BOOL, head_bias, "false", 0, 0, NULL, "A bias on the output logits."),
    MKEY_(ModelSection, "head", CFG_ENUM, head, "\"lm\"", 0, 0, "lm|autoencoder",
          "lm = logits at every position from the last block's output (a language model). autoencoder = MAD's "
          "compression backbone: the last position's residual stream is the sequence's code; position p is "
          "decoded from code + sincos(p) by norm -> Linear(d,w1) -> GELU -> norm -> Linear(w1,w2) -> GELU, then "
          "the final norm and the head (tensors dec.*; w1 = w2 = d, MAD's, unless model.ae_width1/2 say "
          "otherwise). For data whose targets are the inputs (data.task "
          "compression); such a model cannot decode token by token."),
    MKEY_(ModelSection, "ae_width1", CFG_INT, ae_width1, "0", 0, 1 << 16, NULL,
          "model.head autoencoder: output width of the decoder's first Linear; 0 = d_model (MAD's decoder). The "
          "KLA paper's compression decoder (App. F.1.2, Table 10) is [240, 120]: ae_width1 240, ae_width2 120."),
    MKEY_(ModelSection, "ae_width2", CFG_INT, ae_width2, "0", 0, 1 << 16, NULL,
          "model.head autoencoder: output width of the decoder's second Linear, which the final norm and the head "
          "read; 0 = d_model. Another width than d_model needs tie_embeddings false."),
    MKEY_(ModelSection, "init_std", CFG_FLOAT, init_std, "0.02", 0, 10, NULL,
          "Std of the normal init of embeddings and projections; residual projections use init_std/sqrt(2·n_layers)."),
    MKEY_(ModelSection, "mc_samples", CFG_INT, mc_samples, "1", 1, 1024, NULL,
          "KLA+ probabilistic decoding (KLA paper eq. 24-25): S > 1 runs S copies of every batch, each kla layer "
          "drawing its output from its posterior, and the loss is -log mean_s p(target | sample s), for training "
          "and evaluation; accuracy uses the mean probability. 1 = the posterior mean (plain cross-entropy)."),
};
const CfgSection MODEL_SECTION = {"model", "The network.", MODEL_KEYS_, (int)(sizeof MODEL_KEYS_ / sizeof MODEL_KEYS_[0])};

// ----------------------------------------------------------------------------
// per-layer overrides

// does layer l (of L) match "11", "-1", "0,2,4", "3-5"? -1 on a malformed spec, -2 when it names a layer
// outside 0..L-1, -3 when a range is reversed ("3-1": its first layer, counted from the end when negative,
// comes after its last)
static int layer_matches_(const char *spec, int l, int L) {
    const char *p = spec;
    int hit = 0;
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10), b;
        if (end == p) return -1;
        if (*end == '-' && end[1] && end != p) {
            const char *q = end + 1;
            b = strtol(q, &end, 10);
            if (end == q) return -1;
        } else {
            b = a;
        }
        if (a < 0) a += L;
        if (b < 0) b += L;
        if (a < 0 || a >= L || b < 0 || b >= L) return -2;
        if (a > b) return -3;
        if (l >= a && l <= b) hit = 1;
        if (*end == ',') end++;
        else if (*end) return -1;
        p = end;
    }
    return hit;
}

// the mixer JSON of layer l: model.mixer with every matching override merged over it in order
static cJSON *layer_mixer_json_(const ModelSection *c, int l, char *path, size_t path_n, Err *e) {
    cJSON *j = cJSON_Duplicate(c->mixer, 1);
    snprintf(path, path_n, "model.mixer");
    const LayerOverride *ov = c->layers.items;
    for (int i = 0; i < c->layers.n; i++) {
        int hit = layer_matches_(ov[i].at, l, c->n_layers);
        if (hit == -1) {
            cJSON_Delete(j);
            err_set(e, "model.layers[%d].at: \"%s\" is not a layer list (e.g. \"11\", \"-1\", \"0,2,4\", \"3-5\")", i,
                    ov[i].at);
            return NULL;
        }
        if (hit == -2) {
            cJSON_Delete(j);
            err_set(e, "model.layers[%d].at: \"%s\" names a layer outside 0..%d (negative ones count from the end)",
                    i, ov[i].at, c->n_layers - 1);
            return NULL;
        }
        if (hit == -3) {
            cJSON_Delete(j);
            err_set(e, "model.layers[%d].at: \"%s\" has a reversed range (its first layer comes after its last; a "
                    "range goes from low to high, e.g. \"1-3\")", i, ov[i].at);
            return NULL;
        }
        if (!hit) continue;
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(ov[i].mixer, "kind");
        const cJSON *base_kind = cJSON_GetObjectItemCaseSensitive(j, "kind");
        if (kind && (!base_kind || !cJSON_Compare(kind, base_kind, 1))) {
            cJSON_Delete(j);
            j = cJSON_Duplicate(ov[i].mixer, 1);
        } else {
            for (const cJSON *it = ov[i].mixer->child; it; it = it->next) {
                cJSON_DeleteItemFromObjectCaseSensitive(j, it->string);
                cJSON_AddItemToObject(j, it->string, cJSON_Duplicate(it, 1));
            }
        }
        snprintf(path, path_n, "model.layers[%d].mixer", i);
    }
    return j;
}

// is layer l a fused block? Its block kind is model.block, then that of every matching override that names
// one, in order; "auto" asks the layer's mixer, so a GPT stack with a last KLA layer needs no block key
// (layer lists were validated by layer_mixer_json_)
static int layer_fused_(const ModelSection *c, int l, const MixerOps *ops) {
    const char *block = c->block;
    const LayerOverride *ov = c->layers.items;
    for (int i = 0; i < c->layers.n; i++)
        if (strcmp(ov[i].block, "inherit") && layer_matches_(ov[i].at, l, c->n_layers) == 1) block = ov[i].block;
    if (!strcmp(block, "auto")) return ops->owns_mlp;
    return !strcmp(block, "fused");
}

int model_resolve_mixer(ModelSection *c, const CfgOrigins *origins, Err *e) {
    MixerSpec s;
    if (mixer_spec_parse(&s, c->mixer, origins, "model.mixer", c->d_model, e) != 0) return -1;
    cJSON *full = config_dump(s.opts, s.ops->schema);
    cJSON *out = cJSON_CreateObject();  // "kind" first, then the options in schema order
    cJSON_AddStringToObject(out, "kind", s.ops->name);
    for (cJSON *it = full->child; it; it = it->next) cJSON_AddItemToObject(out, it->string, cJSON_Duplicate(it, 1));
    cJSON_Delete(full);
    mixer_spec_free(&s);
    cJSON_Delete(c->mixer);
    c->mixer = out;
    return 0;
}

// ----------------------------------------------------------------------------
// build

static int add_(ParamTable *pt, const char *name, int ndim, const int *shape, ParamInit init, int decay, Err *e) {
    return param_add(pt, name, ndim, shape, init, decay, e);
}

int model_build_uninit(Model *m, const ModelSection *c, int vocab_size, const CfgOrigins *origins, Err *e) {
    memset(m, 0, sizeof *m);
    m->V = c->vocab_size ? c->vocab_size : vocab_size;
    if (c->vocab_size && vocab_size > c->vocab_size)
        return err_set(e, "model.vocab_size: %d is smaller than the data's vocab size %d", c->vocab_size, vocab_size);
    if (m->V <= 0) return err_set(e, "model.vocab_size: unknown (set it, or give data with a vocab size)");
    m->C = c->d_model;
    m->L = c->n_layers;
    m->rms = !strcmp(c->norm, "rmsnorm");
    m->norm_bias = c->norm_bias && !m->rms;
    m->mlp_kind = !strcmp(c->mlp.kind, "none") ? MLP_NONE : !strcmp(c->mlp.kind, "relu") ? MLP_RELU
                : !strcmp(c->mlp.kind, "swiglu") ? MLP_SWIGLU : MLP_GELU;
    m->hidden = (int)lround(c->mlp.ratio * m->C);
    if (m->mlp_kind != MLP_NONE && m->hidden < 1) return err_set(e, "model.mlp.ratio: hidden width rounds to 0");
    m->mlp_bias = c->mlp.bias;
    m->tie = c->tie_embeddings;
    m->head_bias = c->head_bias;
    m->ae = !strcmp(c->head, "autoencoder");
    m->D1 = c->ae_width1 ? c->ae_width1 : m->C;
    m->D2 = c->ae_width2 ? c->ae_width2 : m->C;
    m->HW = m->ae ? m->D2 : m->C;
    if (!m->ae && (c->ae_width1 || c->ae_width2))
        return err_set(e, "model.ae_width%d: the autoencoder decoder's width, and model.head is \"%s\"; remove it or "
                       "set model.head to \"autoencoder\"", c->ae_width1 ? 1 : 2, c->head);
    if (m->tie && m->HW != m->C)
        return err_set(e, "model.ae_width2: %d, but the head is tied to the embedding of width d_model %d; set "
                       "model.tie_embeddings to false", m->HW, m->C);
    m->init_std = (float)c->init_std;
    m->mc = c->mc_samples;
    m->mspec = xcalloc((size_t)m->L, sizeof(MixerSpec));
    int n_sampling = 0;
    for (int l = 0; l < m->L; l++) {
        char path[64];
        cJSON *j = layer_mixer_json_(c, l, path, sizeof path, e);
        if (!j) { model_free(m); return -1; }
        int rc = mixer_spec_parse(&m->mspec[l], j, origins, path, m->C, e);
        cJSON_Delete(j);
        if (rc != 0) { model_free(m); return -1; }
        m->mspec[l].sample = m->mc > 1 && m->mspec[l].ops->samples_posterior;
        n_sampling += m->mspec[l].sample;
    }
    if (m->mc > 1 && !n_sampling) {
        model_free(m);
        return err_set(e, "model.mc_samples: %d samples need a layer that samples its posterior (a kla mixer); "
                       "none of the %d layers does (set it to 1)", c->mc_samples, c->n_layers);
    }

    // parameters, in forward order
    ParamTable *pt = &m->pt;
    param_table_init(pt);
    int C = m->C, V = m->V, F = m->mlp_kind == MLP_SWIGLU ? 2 * m->hidden : m->hidden;
    float std = m->init_std, std_res = (float)(m->init_std / sqrt(2.0 * m->L));
    m->lp = xcalloc((size_t)m->L, sizeof(LayerParams));
    m->mix = xcalloc((size_t)m->L, sizeof(Mixer));
    int rc = (m->k_wte = add_(pt, "wte", 2, (int[]){V, C}, init_normal(std), 0, e)) < 0;
    for (int l = 0; l < m->L && !rc; l++) {
        char n[PARAM_NAME_MAX];
        LayerParams *lp = &m->lp[l];
        memset(lp, -1, sizeof *lp);
        lp->fused = layer_fused_(c, l, m->mspec[l].ops);
        lp->has_mlp = m->mlp_kind != MLP_NONE && !lp->fused;
#define LADD_(field, suffix, ndim, shape, init, decay) \
        if (!rc) { snprintf(n, sizeof n, "blocks.%d.%s", l, suffix); \
                   rc = (lp->field = add_(pt, n, ndim, shape, init, decay, e)) < 0; }
        LADD_(ln1_w, "ln1.weight", 1, (int[]){C}, init_ones(), 0);
        if (m->norm_bias) LADD_(ln1_b, "ln1.bias", 1, (int[]){C}, init_zeros(), 0);
        if (!rc) {
            snprintf(n, sizeof n, "blocks.%d.mixer", l);
            m->mix[l].first = pt->n;
            rc = m->mspec[l].ops->params(&m->mspec[l], pt, n, m->L, e) != 0;
        }
        if (lp->has_mlp) {
            LADD_(ln2_w, "ln2.weight", 1, (int[]){C}, init_ones(), 0);
            if (m->norm_bias) LADD_(ln2_b, "ln2.bias", 1, (int[]){C}, init_zeros(), 0);
            LADD_(fc_w, "mlp.fc.weight", 2, ((int[]){F, C}), init_normal(std), 1);
            if (m->mlp_bias) LADD_(fc_b, "mlp.fc.bias", 1, (int[]){F}, init_zeros(), 0);
            LADD_(proj_w, "mlp.proj.weight", 2, ((int[]){C, m->hidden}), init_normal(std_res), 1);
            if (m->mlp_bias) LADD_(proj_b, "mlp.proj.bias", 1, (int[]){C}, init_zeros(), 0);
        }
#undef LADD_
    }
    m->k_lnf_b = m->k_head_w = m->k_head_b = -1;
    m->k_dn1_w = m->k_dn1_b = m->k_dfc1_w = m->k_dfc1_b = m->k_dn2_w = m->k_dn2_b = m->k_dfc2_w = m->k_dfc2_b = -1;
    if (m->ae) {  // MAD's decoder: Linear layers with biases, N(0, init_std) weights
        if (!rc) rc = (m->k_dn1_w = add_(pt, "dec.norm1.weight", 1, (int[]){C}, init_ones(), 0, e)) < 0;
        if (!rc && m->norm_bias) rc = (m->k_dn1_b = add_(pt, "dec.norm1.bias", 1, (int[]){C}, init_zeros(), 0, e)) < 0;
        int D1 = m->D1, D2 = m->D2;
        if (!rc) rc = (m->k_dfc1_w = add_(pt, "dec.fc1.weight", 2, (int[]){D1, C}, init_normal(std), 1, e)) < 0;
        if (!rc) rc = (m->k_dfc1_b = add_(pt, "dec.fc1.bias", 1, (int[]){D1}, init_zeros(), 0, e)) < 0;
        if (!rc) rc = (m->k_dn2_w = add_(pt, "dec.norm2.weight", 1, (int[]){D1}, init_ones(), 0, e)) < 0;
        if (!rc && m->norm_bias) rc = (m->k_dn2_b = add_(pt, "dec.norm2.bias", 1, (int[]){D1}, init_zeros(), 0, e)) < 0;
        if (!rc) rc = (m->k_dfc2_w = add_(pt, "dec.fc2.weight", 2, (int[]){D2, D1}, init_normal(std), 1, e)) < 0;
        if (!rc) rc = (m->k_dfc2_b = add_(pt, "dec.fc2.bias", 1, (int[]){D2}, init_zeros(), 0, e)) < 0;
    }
    int HW = m->HW;
    if (!rc) rc = (m->k_lnf_w = add_(pt, "lnf.weight", 1, (int[]){HW}, init_ones(), 0, e)) < 0;
    if (!rc && m->norm_bias) rc = (m->k_lnf_b = add_(pt, "lnf.bias", 1, (int[]){HW}, init_zeros(), 0, e)) < 0;
    if (!rc && !m->tie) rc = (m->k_head_w = add_(pt, "head.weight", 2, (int[]){V, HW}, init_normal(std), 1, e)) < 0;
    if (!rc && m->head_bias) rc = (m->k_head_b = add_(pt, "head.bias", 1, (int[]){V}, init_zeros(), 0, e)) < 0;
    if (rc) { model_free(m); return -1; }

    m->params = xmalloc_for(pt->numel * sizeof(float), "the %zu parameters (model.n_layers = %d, model.d_model = %d, "
                            "vocabulary %d)", (size_t)pt->numel, m->L, m->C, m->V);
    m->grads = xcalloc(pt->numel, sizeof(float));
    for (int l = 0; l < m->L; l++) {
        Mixer *mx = &m->mix[l];
        mx->spec = &m->mspec[l];
        mx->pt = pt;
        mx->params = m->params;
        mx->grads = m->grads;
    }
    return 0;
}

void model_init(Model *m, uint64_t seed) {
    param_init_all(&m->pt, m->params, seed);
    // the mixers' own rules on top (inverse softplus of a drawn dt, and the like)
    for (int l = 0; l < m->L; l++)
        if (m->mix[l].spec->ops->init) m->mix[l].spec->ops->init(&m->mix[l]);
}

int model_build(Model *m, const ModelSection *c, int vocab_size, const CfgOrigins *origins, uint64_t seed, Err *e) {
    if (model_build_uninit(m, c, vocab_size, origins, e) != 0) return -1;
    model_init(m, seed);
    return 0;
}

// the activation arena and the per-batch buffers sized with it
static void model_free_acts_(Model *m) {
    free(m->arena);
    free(m->la);
    free(m->inputs);
    free(m->targets);
    free(m->head_rows);
    free(m->head_tg);
}

void model_free(Model *m) {
    if (m->mspec)
        for (int l = 0; l < m->L; l++) mixer_spec_free(&m->mspec[l]);
    free(m->mspec);
    free(m->mix);
    free(m->lp);
    param_table_free(&m->pt);
    free(m->params);
    free(m->grads);
    model_free_acts_(m);
    memset(m, 0, sizeof *m);
}

size_t model_num_params(const Model *m) {
    size_t n = 0;
    for (int i = 0; i < m->pt.n; i++) n += m->pt.t[i].numel;
    return n;
}

// ----------------------------------------------------------------------------
// per-layer information (the optional ops read as "none")

const char *model_layer_name(const Model *m, int l) { return m->mspec[l].ops->name; }

size_t model_layer_state_size(const Model *m, int l, int cap) {
    const MixerSpec *s = &m->mspec[l];
    return s->ops->state_size ? s->ops->state_size(s, cap) : 0;
}

size_t model_layer_cache_per_token(const Model *m, int l) {
    const MixerSpec *s = &m->mspec[l];
    return s->ops->cache_per_token ? s->ops->cache_per_token(s) : 0;
}

int model_layer_state_terms(const Model *m, int l, int T, StateTerms *st) {
    const MixerSpec *s = &m->mspec[l];
    st->n = 0;
    if (!s->ops->state_terms) return 0;
    s->ops->state_terms(s, T, st);
    return 1;
}

int model_layer_diag(const Model *m, int l, cJSON *obj) {
    if (!m->mspec[l].ops->diag) return 0;
    m->mspec[l].ops->diag(&m->mix[l], obj);
    return 1;
}

int model_layer_attn_heads(const Model *m, int l) {
    const MixerSpec *s = &m->mspec[l];
    return s->ops->attn_heads && s->ops->attn_map ? s->ops->attn_heads(s) : 0;
}

void model_layer_attn_map(const Model *m, int l, int b, int h, float *P) {
    m->mspec[l].ops->attn_map(&m->mix[l], b, h, P);
}

size_t model_layer_posterior_var(const Model *m, int l, int b, float *var) {
    const MixerOps *ops = m->mspec[l].ops;
    return ops->posterior_var ? ops->posterior_var(&m->mix[l], b, var) : 0;
}

// ----------------------------------------------------------------------------
// activations: one arena for the current (B,T)

const unsigned char LAYER_ACTS_MATMUL[LAYER_ACTS] = {[LA_LN1] = 1, [LA_LN2] = 1, [LA_FC] = 1, [LA_ACT] = 1};
_Static_assert(sizeof(LayerActs) == LAYER_ACTS * sizeof(float *) &&
               offsetof(LayerActs, act) == LA_ACT * sizeof(float *), "LayerActs: one LA_* index per named buffer");

void model_layer_act_counts(const Model *m, int l, int B, int T, size_t *count) {
    size_t BT = (size_t)B * T, C = (size_t)m->C, H = (size_t)m->hidden, F = m->mlp_kind == MLP_SWIGLU ? 2 * H : H;
    size_t mlp = m->lp[l].has_mlp != 0;
    count[LA_RES] = count[LA_LN1] = BT * C;
    count[LA_LN1_MEAN] = count[LA_LN1_RSTD] = BT;
    count[LA_RES_MID] = count[LA_LN2] = mlp * BT * C;
    count[LA_LN2_MEAN] = count[LA_LN2_RSTD] = mlp * BT;
    count[LA_FC] = mlp * BT * F;
    count[LA_ACT] = mlp * BT * H;
}

int model_check_batch(const Model *m, const int *inputs, const int *targets, int BT, Err *e) {
    int bad = embedding_check_ids(inputs, BT, m->V);
    if (bad >= 0)
        return err_set(e, "input token id %d at position %d is outside the model's vocabulary of %d", inputs[bad], bad,
                       m->V);
    if (targets && (bad = crossentropy_check_targets(targets, BT, m->V)) >= 0)
        return err_set(e, "target %d at position %d is outside the vocabulary of %d (and not the ignore index -100)",
                       targets[bad], bad, m->V);
    return 0;
}

// the arena's layout: with base NULL it only counts (the arena's size in floats; the pointers it sets are
// NULL then), with the arena it points every buffer into it. mixer_take gives each buffer whole cache lines,
// as within a mixer's own activations.
static size_t model_layout_acts_(Model *m, int B, int T, float *base) {
    size_t BT = (size_t)B * T, C = (size_t)m->C, H = (size_t)m->hidden, n = 0;
    size_t F = m->mlp_kind == MLP_SWIGLU ? 2 * H : H, scratch = 0;
    for (int l = 0; l < m->L; l++) {
        const MixerSpec *s = &m->mspec[l];
        size_t sc = s->ops->scratch_size(s, B, T);
        if (sc > scratch) scratch = sc;
    }
    // the autoencoder's widths: the head reads HW = D2; its gradient buffers and dres, dtmp hold the widest
    size_t HW = (size_t)m->HW, D1 = (size_t)m->D1, D2 = (size_t)m->D2, W = C;
    if (m->ae) W = C > D1 ? (C > D2 ? C : D2) : (D1 > D2 ? D1 : D2);
    // dact only for ReLU/SwiGLU: GELU's backward is an epilogue of the matmul that forms d act
    size_t dact = m->mlp_kind == MLP_GELU ? 0 : BT * H;
#define TAKE_(ptr, count) ((ptr) = mixer_take(base, &n, (count), 1))
    for (int l = 0; l < m->L; l++) {
        LayerActs *a = &m->la[l];
        size_t count[LAYER_ACTS];
        model_layer_act_counts(m, l, B, T, count);
        for (int k = 0; k < LAYER_ACTS; k++) TAKE_(a->buf[k], count[k]);
        for (int k = 0; k < LAYER_ACTS; k++)
            if (!count[k]) a->buf[k] = NULL;
        const MixerSpec *s = &m->mspec[l];
        TAKE_(m->mix[l].acts, s->ops->act_size(s, B, T));
    }
    TAKE_(m->res_out, BT * C);
    TAKE_(m->lnf, BT * HW);
    TAKE_(m->lnf_mean, BT);
    TAKE_(m->lnf_rstd, BT);
    TAKE_(m->logits, BT * (size_t)m->V);
    TAKE_(m->xstats, 2 * BT);
    TAKE_(m->losses, BT);
    m->mc_w = NULL;
    if (m->mc > 1) TAKE_(m->mc_w, BT);
    m->dec_x = m->dec_n1 = m->dec_f1 = m->dec_a1 = m->dec_n2 = m->dec_f2 = m->dec_a2 = m->dec_g = NULL;
    m->dec_n1_mean = m->dec_n1_rstd = m->dec_n2_mean = m->dec_n2_rstd = NULL;
    if (m->ae) {
        TAKE_(m->dec_x, BT * C);
        TAKE_(m->dec_n1, BT * C);
        TAKE_(m->dec_f1, BT * D1);
        TAKE_(m->dec_a1, BT * D1);
        TAKE_(m->dec_n2, BT * D1);
        TAKE_(m->dec_f2, BT * D2);
        TAKE_(m->dec_a2, BT * D2);
        TAKE_(m->dec_g, BT * W);
        TAKE_(m->dec_n1_mean, BT);
        TAKE_(m->dec_n1_rstd, BT);
        TAKE_(m->dec_n2_mean, BT);
        TAKE_(m->dec_n2_rstd, BT);
    }
    TAKE_(m->scratch, scratch);
    TAKE_(m->dres, BT * W);
    TAKE_(m->dtmp, BT * W);
    TAKE_(m->dfc, BT * F);
    TAKE_(m->dact, dact);
    if (!dact) m->dact = NULL;
    TAKE_(m->mix_out, BT * C);
#undef TAKE_
    return n;
}

static void model_alloc_acts_(Model *m, int B, int T) {
    if (m->arena && m->B == B && m->T == T) return;
    size_t BT = (size_t)B * T;
    model_free_acts_(m);
    m->la = xcalloc((size_t)m->L, sizeof(LayerActs));
    size_t total = model_layout_acts_(m, B, T, NULL);
    m->arena = xmalloc_for(total * sizeof(float), "the activations of a batch of %d x %d tokens "
                           "(train.batch_size x train.seq_len when training) through model.n_layers = %d layers "
                           "of model.d_model = %d and a vocabulary of %d: lower train.batch_size or train.seq_len",
                           B, T, m->L, m->C, m->V);
    m->arena_size = total;
    model_layout_acts_(m, B, T, m->arena);
    m->inputs = xmalloc(BT * sizeof(int));
    m->targets = xmalloc(BT * sizeof(int));
    m->head_rows = xmalloc(BT * sizeof(int));
    m->head_tg = xmalloc(BT * sizeof(int));
    m->n_head = (int)BT;
    for (int l = 0; l < m->L; l++) {
        m->mix[l].B = B;
        m->mix[l].T = T;
        m->mix[l].scratch = m->scratch;
    }
    m->B = B;
    m->T = T;
}

// ----------------------------------------------------------------------------
// forward / backward

// the model's norm over rows of width W (its weight's length): C in the blocks, the decoder's widths after them
static void norm_forward_w_(const Model *m, float *out, float *mean, float *rstd, const float *inp, int kw, int kb,
                            int N, int W) {
    if (m->rms) rmsnorm_forward(out, rstd, inp, m->params + m->pt.t[kw].offset, N, W);
    else layernorm_forward(out, mean, rstd, inp, m->params + m->pt.t[kw].offset,
                           kb >= 0 ? m->params + m->pt.t[kb].offset : NULL, N, W);
}

static void norm_backward_w_(Model *m, float *dinp, const float *dout, const float *inp, const float *mean,
                             const float *rstd, int kw, int kb, int N, int W) {
    float *w = m->params + m->pt.t[kw].offset, *dw = m->grads + m->pt.t[kw].offset;
    if (m->rms) rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, W);
    else layernorm_backward(dinp, dw, kb >= 0 ? m->grads + m->pt.t[kb].offset : NULL, dout, inp, w, mean, rstd, N, W);
}

static void norm_forward_(const Model *m, float *out, float *mean, float *rstd, const float *inp, int kw, int kb, int N) {
    norm_forward_w_(m, out, mean, rstd, inp, kw, kb, N, m->C);
}

static void norm_backward_(Model *m, float *dinp, const float *dout, const float *inp, const float *mean,
                           const float *rstd, int kw, int kb, int N) {
    norm_backward_w_(m, dinp, dout, inp, mean, rstd, kw, kb, N, m->C);
}

#define P_(k) ((k) >= 0 ? m->params + m->pt.t[k].offset : NULL)
#define G_(k) ((k) >= 0 ? m->grads + m->pt.t[k].offset : NULL)

// KLA+ (eq. 25): per position, loss = -logsumexp_s(-ce_s) + log S over the S copies; the gradient of
// copy s is its softmax weight w_s = p_s / sum p (kept in mc_w) times its own cross-entropy gradient.
// Overwrites losses[0 .. BT1) with the marginal losses and sets loss / n_supervised per position.
static void model_mc_loss_(Model *m, size_t BT1) {
    int S = m->mc;
    double total = 0.0;
    int n = 0;
    for (size_t i = 0; i < BT1; i++) {
        if (m->targets[i] < 0) {
            for (int s = 0; s < S; s++) m->mc_w[s * BT1 + i] = 0.0f;
            m->losses[i] = 0.0f;
            continue;
        }
        double mx = -1e300, sum = 0.0;
        // a compare, not fmax (the same for every value, a NaN loss included): gcc 12's aarch64 vectoriser
        // crashes (internal compiler error in vect_transform_reduction) on this loop as an fmax reduction
        for (int s = 0; s < S; s++) {
            double x = -(double)m->losses[s * BT1 + i];
            mx = x > mx ? x : mx;
        }
        for (int s = 0; s < S; s++) sum += exp(-(double)m->losses[s * BT1 + i] - mx);
        for (int s = 0; s < S; s++) m->mc_w[s * BT1 + i] = (float)(exp(-(double)m->losses[s * BT1 + i] - mx) / sum);
        double l = -(mx + log(sum)) + log((double)S);
        m->losses[i] = (float)l;
        total += l;
        n++;
    }
    m->n_supervised = n;
    m->loss = n ? total / n : 0.0;
}

int model_argmax(const Model *m, size_t i) {
    int V = m->V, S = m->mc;
    const float *row = m->logits + i * V;
    int best = 0;
    if (S == 1) {
        for (int v = 1; v < V; v++)
            if (row[v] > row[best]) best = v;
        return best;
    }
    // mean over the copies of softmax = exp(logit - max - logsum), the forward's per-row stats
    size_t BT1 = (size_t)m->B / S * m->T;
    double best_p = -1.0;
    for (int v = 0; v < V; v++) {
        double p = 0.0;
        for (int s = 0; s < S; s++) {
            size_t r = s * BT1 + i;
            p += exp((double)m->logits[r * V + v] - m->xstats[2 * r] - m->xstats[2 * r + 1]);
        }
        if (p > best_p) { best_p = p; best = v; }
    }
    return best;
}

// The autoencoder head (model.head autoencoder), after MAD's AutoEncoder: code = res[b, T-1] (the
// encoder's residual stream at the last position, no norm), x[b,t] = code + sincos(t), then
// norm1 -> fc1 -> GELU -> norm2 -> fc2 -> GELU; returns the decoder output (B,T,D2), the final norm's input.
// sincos(t) is MAD's posemb_sincos_1d: [sin(t w_i) | cos(t w_i)], w_i = 10000^(-i/(C/2-1)), i < C/2
// (a zero last column when C is odd).
static const float *ae_forward_(Model *m, const float *res, int B, int T) {
    int C = m->C, D1 = m->D1, D2 = m->D2, half = C / 2, BT = B * T;
    float *pe = m->dec_g;  // (T,C): the gradient buffer is free during the forward
    for (int i = 0; i < half; i++) {
        double w = half > 1 ? exp(-log(10000.0) * i / (half - 1)) : 1.0;
        for (int t = 0; t < T; t++) {
            pe[(size_t)t * C + i] = (float)sin(t * w);
            pe[(size_t)t * C + half + i] = (float)cos(t * w);
        }
    }
    if (C % 2)
        for (int t = 0; t < T; t++) pe[(size_t)t * C + C - 1] = 0.0f;
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *code = res + ((size_t)b * T + T - 1) * C, *row = pe + (size_t)t * C;
            float *x = m->dec_x + ((size_t)b * T + t) * C;
            for (int i = 0; i < C; i++) x[i] = code[i] + row[i];
        }
    norm_forward_(m, m->dec_n1, m->dec_n1_mean, m->dec_n1_rstd, m->dec_x, m->k_dn1_w, m->k_dn1_b, BT);
    matmul_forward(m->dec_f1, m->dec_n1, P_(m->k_dfc1_w), P_(m->k_dfc1_b), BT, C, D1);
    gelu_forward(m->dec_a1, m->dec_f1, (size_t)BT * D1);
    norm_forward_w_(m, m->dec_n2, m->dec_n2_mean, m->dec_n2_rstd, m->dec_a1, m->k_dn2_w, m->k_dn2_b, BT, D1);
    matmul_forward(m->dec_f2, m->dec_n2, P_(m->k_dfc2_w), P_(m->k_dfc2_b), BT, D1, D2);
    gelu_forward(m->dec_a2, m->dec_f2, (size_t)BT * D2);
    return m->dec_a2;
}

// backward of ae_forward_: dout (B,T,D2) = d(loss)/d(decoder output), overwritten (it holds up to
// max(C,D1,D2) floats a row); dres (B,T,C) is set to d(loss)/d(res): zero except at each row's last position,
// which gets the sum over the decoded positions
static void ae_backward_(Model *m, float *dout, float *dres, int B, int T) {
    int C = m->C, D1 = m->D1, D2 = m->D2, BT = B * T;
    size_t BTC = (size_t)BT * C, BT1 = (size_t)BT * D1, BT2 = (size_t)BT * D2;
    float *g = m->dec_g;
    memset(g, 0, BT2 * sizeof(float));
    gelu_backward(g, m->dec_f2, dout, BT2);  // g = d f2
    // dout (BT,D1) = g (BT,D2) @ fc2_w (D2,D1): d n2
    matmul(dout, g, P_(m->k_dfc2_w), BT, D1, D2, 0, 0, 0);
    matmul_backward(NULL, G_(m->k_dfc2_w), G_(m->k_dfc2_b), g, m->dec_n2, P_(m->k_dfc2_w), BT, D1, D2);
    memset(g, 0, BT1 * sizeof(float));
    norm_backward_w_(m, g, dout, m->dec_a1, m->dec_n2_mean, m->dec_n2_rstd, m->k_dn2_w, m->k_dn2_b, BT, D1);  // g = d a1
    memset(dout, 0, BT1 * sizeof(float));
    gelu_backward(dout, m->dec_f1, g, BT1);  // dout = d f1
    matmul(g, dout, P_(m->k_dfc1_w), BT, C, D1, 0, 0, 0);  // g (BT,C) = d n1
    matmul_backward(NULL, G_(m->k_dfc1_w), G_(m->k_dfc1_b), dout, m->dec_n1, P_(m->k_dfc1_w), BT, C, D1);
    memset(dout, 0, BTC * sizeof(float));
    norm_backward_(m, dout, g, m->dec_x, m->dec_n1_mean, m->dec_n1_rstd, m->k_dn1_w, m->k_dn1_b, BT);  // d x
    memset(dres, 0, BTC * sizeof(float));
#pragma omp parallel for
    for (int b = 0; b < B; b++) {
        float *code = dres + ((size_t)b * T + T - 1) * C;
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            for (int i = 0; i < C; i++) code[i] += d[i];
        }
    }
}

// rows (rows, W): the first n rows, which belong at row indices at[0 .. n) (ascending, at[i] >= i), moved
// there in place; every other row of the BT becomes 0
static void head_scatter_(float *rows, const int *at, int n, int BT, int W) {
    int i = n - 1;
    for (int r = BT - 1; r >= 0; r--) {  // from the end: a row is moved before anything overwrites it
        float *dst = rows + (size_t)r * W;
        if (i >= 0 && at[i] == r) {
            if (i != r) memcpy(dst, rows + (size_t)i * W, (size_t)W * sizeof(float));
            i--;
        } else {
            memset(dst, 0, (size_t)W * sizeof(float));
        }
    }
}

// the rows of m->targets with a target: their indices to m->head_rows, their targets to m->head_tg, and
// when some rows have none, those rows of lnf (BT,HW) compacted to its first n_head rows. Returns n_head.
static int head_compact_(Model *m, int BT) {
    int n = 0;
    for (int r = 0; r < BT; r++) {
        if (m->targets[r] == XENT_IGNORE_INDEX) continue;
        m->head_rows[n] = r;
        m->head_tg[n++] = m->targets[r];
    }
    m->n_head = n;
    if (n == BT) return n;
    for (int i = 0; i < n; i++)  // ascending: head_rows[i] >= i, so no source row is overwritten first
        if (m->head_rows[i] != i)
            memcpy(m->lnf + (size_t)i * m->HW, m->lnf + (size_t)m->head_rows[i] * m->HW, (size_t)m->HW * sizeof(float));
    return n;
}

// model_forward; with n_norm > 0 (training, targets given), the logits become dlogits at once (the
// cross-entropy's forward and backward in one pass) and m->xent_done tells model_backward so
static int model_forward_(Model *m, const int *inputs, const int *targets, int B, int T, int n_norm, Err *e) {
    if (model_check_batch(m, inputs, targets, B * T, e) != 0) return -1;
    // KLA+: S copies of the batch, one posterior sample each
    int S = m->mc, B1 = B;
    B *= S;
    model_alloc_acts_(m, B, T);
    int BT = B * T, C = m->C, H = m->hidden, F = m->mlp_kind == MLP_SWIGLU ? 2 * H : H;
    size_t BT1 = (size_t)B1 * T;
    for (int s = 0; s < S; s++) {
        memcpy(m->inputs + s * BT1, inputs, BT1 * sizeof(int));
        if (targets) memcpy(m->targets + s * BT1, targets, BT1 * sizeof(int));
    }
    for (int l = 0; l < m->L; l++) m->mix[l].noise_seed = splitmix64(&(uint64_t){m->noise_seed ^ (0xA5A5ull + l)});
    embedding_forward(m->L ? m->la[0].res : m->res_out, m->inputs, P_(m->k_wte), BT, C);
    for (int l = 0; l < m->L; l++) {
        LayerActs *a = &m->la[l];
        const LayerParams *lp = &m->lp[l];
        float *next = l + 1 < m->L ? m->la[l + 1].res : m->res_out;
        norm_forward_(m, a->ln1, a->ln1_mean, a->ln1_rstd, a->res, lp->ln1_w, lp->ln1_b, BT);
        m->mspec[l].ops->forward(&m->mix[l], m->mix_out, a->ln1, B, T);
        if (!lp->has_mlp) {
            residual_forward(next, a->res, m->mix_out, (size_t)BT * C);
            continue;
        }
        residual_forward(a->res_mid, a->res, m->mix_out, (size_t)BT * C);
        norm_forward_(m, a->ln2, a->ln2_mean, a->ln2_rstd, a->res_mid, lp->ln2_w, lp->ln2_b, BT);
        if (m->mlp_kind == MLP_GELU) {
            // fc = ln2 @ fc_w^T + fc_b and act = gelu(fc) in one pass: GELU runs on each output tile while
            // it is in cache
            MatmulFuse fuse = {.bias = P_(lp->fc_b), .epi = MM_EPI_GELU, .act = a->act};
            matmul_fused(a->fc, a->ln2, P_(lp->fc_w), BT, F, C, 0, 1, 0, &fuse);
        } else {
            matmul_forward(a->fc, a->ln2, P_(lp->fc_w), P_(lp->fc_b), BT, C, F);
            if (m->mlp_kind == MLP_RELU) relu_forward(a->act, a->fc, (size_t)BT * H);
            else swiglu_forward(a->act, a->fc, BT, H);
        }
        matmul_forward(m->mix_out, a->act, P_(lp->proj_w), P_(lp->proj_b), BT, H, C);
        residual_forward(next, a->res_mid, m->mix_out, (size_t)BT * C);
    }
    const float *final = m->ae ? ae_forward_(m, m->res_out, B, T) : m->res_out;
    norm_forward_w_(m, m->lnf, m->lnf_mean, m->lnf_rstd, final, m->k_lnf_w, m->k_lnf_b, BT, m->HW);
    const float *head = m->tie ? P_(m->k_wte) : P_(m->k_head_w);
    m->loss = 0;
    m->n_supervised = 0;
    m->xent_done = 0;
    // a training step on a batch where some rows have no target (the tasks) runs the head and the
    // cross-entropy on the supervised rows only, compacted: the others' dlogits are exactly 0, so this skips
    // work without changing a bit
    m->n_head = BT;
    const int *tg = m->targets;
    if (targets && n_norm > 0 && S == 1 && head_compact_(m, BT) < BT) tg = m->head_tg;
    int NH = m->n_head;
    matmul_forward(m->logits, m->lnf, head, P_(m->k_head_b), NH, m->HW, m->V);
    if (targets) {
        double mean;
        if (n_norm > 0 && S == 1) {
            // (the KLA+ average over samples reads the logits after the forward, so it keeps two passes)
            m->n_supervised = crossentropy_forward_backward(m->losses, m->xstats, &mean, m->logits, tg, n_norm, NH, m->V);
            m->xent_done = 1;
        } else {
            m->n_supervised = crossentropy_forward(m->losses, m->xstats, &mean, m->logits, m->targets, BT, m->V);
        }
        m->loss = mean;
        if (NH < BT) head_scatter_(m->losses, m->head_rows, NH, BT, 1);  // per position again, 0 where ignored
        if (S > 1) model_mc_loss_(m, BT1);
    }
    return 0;
}

int model_forward(Model *m, const int *inputs, const int *targets, int B, int T, Err *e) {
    return model_forward_(m, inputs, targets, B, T, 0, e);
}

int model_forward_backward(Model *m, const int *inputs, const int *targets, int B, int T, int n_norm, Err *e) {
    int rc = model_forward_(m, inputs, targets, B, T, n_norm, e);
    if (rc == 0) model_backward(m, n_norm);
    return rc;
}

void model_zero_grad(Model *m) { zero_fill(m->grads, m->pt.numel); }

void model_backward(Model *m, int n_norm) {
    int B = m->B, T = m->T, BT = B * T, C = m->C, H = m->hidden, F = m->mlp_kind == MLP_SWIGLU ? 2 * H : H;
    size_t BTC = (size_t)BT * C;
    // the logits become dlogits in place: the (B,T,V) buffer is the largest activation (already done by
    // model_forward_backward's forward)
    if (!m->xent_done) crossentropy_backward_inplace(m->logits, m->xstats, m->targets, n_norm, BT, m->V);
    m->xent_done = 0;
    float *dlogits = m->logits;
    if (m->mc > 1)
#pragma omp parallel for
        for (int r = 0; r < BT; r++)
            for (int v = 0; v < m->V; v++) dlogits[(size_t)r * m->V + v] *= m->mc_w[r];
    float *dhead = m->tie ? G_(m->k_wte) : G_(m->k_head_w);
    const float *head = m->tie ? P_(m->k_wte) : P_(m->k_head_w);
    // dtmp (BT,HW) = dlogits (BT,V) @ head (V,HW), written rather than zeroed and accumulated (one pass
    // less over the buffer); the weight and bias gradients accumulate as usual
    int HW = m->HW, NH = m->n_head;  // NH < BT: the forward ran the head on the supervised rows only
    matmul(m->dtmp, dlogits, head, NH, HW, m->V, 0, 0, 0);
    matmul_backward(NULL, dhead, G_(m->k_head_b), dlogits, m->lnf, head, NH, HW, m->V);
    if (NH < BT) head_scatter_(m->dtmp, m->head_rows, NH, BT, HW);
    m->n_head = BT;
    zero_fill(m->dres, (size_t)BT * HW);
    norm_backward_w_(m, m->dres, m->dtmp, m->ae ? m->dec_a2 : m->res_out, m->lnf_mean, m->lnf_rstd, m->k_lnf_w,
                     m->k_lnf_b, BT, HW);
    if (m->ae) {
        // dres holds d(loss)/d(decoder output) here; dtmp becomes d(loss)/d(res_out)
        ae_backward_(m, m->dres, m->dtmp, B, T);
        memcpy(m->dres, m->dtmp, BTC * sizeof(float));
    }
    // dres holds d(loss)/d(residual stream) at the output of the current layer, walking down
    for (int l = m->L - 1; l >= 0; l--) {
        LayerActs *a = &m->la[l];
        const LayerParams *lp = &m->lp[l];
        if (lp->has_mlp) {
            // in the forward pass this was: next = res_mid + proj(act(fc(norm(res_mid))))
            if (m->mlp_kind == MLP_GELU) {
                // dfc (BT,H) = gelu'(fc) * (dres (BT,C) @ proj_w (C,H)): the GELU backward is the epilogue
                // of the matmul that forms dact, so dact never goes to memory and dfc needs no zeroing
                MatmulFuse fuse = {.epi = MM_EPI_GELU_GRAD, .pre = a->fc};
                matmul_fused(m->dfc, m->dres, P_(lp->proj_w), BT, H, C, 0, 0, 0, &fuse);
            } else {
                // dact (BT,H) = dres (BT,C) @ proj_w (C,H) written directly (no memset pass over BT*H floats)
                matmul(m->dact, m->dres, P_(lp->proj_w), BT, H, C, 0, 0, 0);
                zero_fill(m->dfc, (size_t)BT * F);
                if (m->mlp_kind == MLP_RELU) relu_backward(m->dfc, a->fc, m->dact, (size_t)BT * H);
                else swiglu_backward(m->dfc, a->fc, m->dact, BT, H);
            }
            matmul_backward(NULL, G_(lp->proj_w), G_(lp->proj_b), m->dres, a->act, P_(lp->proj_w), BT, H, C);
            // dtmp (BT,C) = dfc (BT,F) @ fc_w (F,C), written directly
            matmul(m->dtmp, m->dfc, P_(lp->fc_w), BT, C, F, 0, 0, 0);
            matmul_backward(NULL, G_(lp->fc_w), G_(lp->fc_b), m->dfc, a->ln2, P_(lp->fc_w), BT, C, F);
            norm_backward_(m, m->dres, m->dtmp, a->res_mid, a->ln2_mean, a->ln2_rstd, lp->ln2_w, lp->ln2_b, BT);
        }
        // in the forward pass this was: res_mid = res + mixer(norm(res))
        zero_fill(m->dtmp, BTC);
        m->mspec[l].ops->backward(&m->mix[l], m->dtmp, m->dres, a->ln1, B, T);
        norm_backward_(m, m->dres, m->dtmp, a->res, a->ln1_mean, a->ln1_rstd, lp->ln1_w, lp->ln1_b, BT);
    }
    embedding_backward(G_(m->k_wte), m->dres, m->inputs, BT, C);
}

// ----------------------------------------------------------------------------
// decoding, a token at a time

size_t *model_decoder_layout(const Model *m, int B, int cap, int *limit, Err *e) {
    if (m->ae) {
        err_set(e, "model.head autoencoder decodes every position from the whole sequence; it cannot decode token "
                "by token");
        return NULL;
    }
    if (B < 1 || cap < 1) {
        err_set(e, "a decoder needs at least one sequence and one position (B %d, cap %d)", B, cap);
        return NULL;
    }
    for (int l = 0; l < m->L; l++)
        if (!m->mspec[l].ops->step) {
            err_set(e, "layer %d (%s) cannot decode token by token (its mixer has no step)", l, m->mspec[l].ops->name);
            return NULL;
        }
    size_t *off = xmalloc(((size_t)m->L + 1) * sizeof(size_t));
    *limit = INT_MAX;
    off[0] = 0;
    for (int l = 0; l < m->L; l++) {
        const MixerSpec *s = &m->mspec[l];
        size_t n = s->ops->state_size(s, cap);
        if (s->ops->state_size(s, cap + 1) > n) *limit = cap;  // keeps every position: full after cap
        off[l + 1] = off[l] + (size_t)B * n;
    }
    return off;
}

int model_decoder_init(ModelDecoder *d, const Model *m, int B, int cap, Err *e) {
    memset(d, 0, sizeof *d);
    d->off = model_decoder_layout(m, B, cap, &d->limit, e);
    if (!d->off) return -1;
    d->B = B, d->cap = cap;
    d->state = xmalloc_for(d->off[m->L] * sizeof(float), "the decoding states of %d sequences at %d positions", B, cap);
    int F = m->mlp_kind == MLP_SWIGLU ? 2 * m->hidden : m->hidden;
    d->work = xmalloc((size_t)B * (3 * (size_t)m->C + F + m->hidden + 2) * sizeof(float));
    model_decoder_reset(d, m);
    return 0;
}

void model_decoder_reset(ModelDecoder *d, const Model *m) {
    for (int l = 0; l < m->L; l++) m->mspec[l].ops->state_init(&m->mix[l], d->state + d->off[l], d->B, d->cap);
    d->t = 0;
}

int model_decoder_step(Model *m, ModelDecoder *d, const int *tokens, float *logits, Err *e) {
    int B = d->B;
    if (d->t >= d->limit)
        return err_set(e, "the decoder is full: its attention caches hold %d positions (reset it and feed the last "
                       "tokens again to go on)", d->cap);
    int bad = embedding_check_ids(tokens, B, m->V);
    if (bad >= 0) return err_set(e, "token id %d of sequence %d is outside the vocabulary of %d", tokens[bad], bad, m->V);
    int C = m->C, H = m->hidden, F = m->mlp_kind == MLP_SWIGLU ? 2 * H : H;
    float *x = d->work, *ln = x + (size_t)B * C, *out = ln + (size_t)B * C, *fc = out + (size_t)B * C;
    float *act = fc + (size_t)B * F, *mean = act + (size_t)B * H, *rstd = mean + B;
    embedding_forward(x, tokens, P_(m->k_wte), B, C);
    for (int l = 0; l < m->L; l++) {
        const LayerParams *lp = &m->lp[l];
        norm_forward_(m, ln, mean, rstd, x, lp->ln1_w, lp->ln1_b, B);
        m->mspec[l].ops->step(&m->mix[l], d->state + d->off[l], out, ln, B, d->t, d->cap);
        residual_forward(x, x, out, (size_t)B * C);
        if (!lp->has_mlp) continue;
        norm_forward_(m, ln, mean, rstd, x, lp->ln2_w, lp->ln2_b, B);
        matmul_forward(fc, ln, P_(lp->fc_w), P_(lp->fc_b), B, C, F);
        if (m->mlp_kind == MLP_GELU) gelu_forward(act, fc, (size_t)B * H);
        else if (m->mlp_kind == MLP_RELU) relu_forward(act, fc, (size_t)B * H);
        else swiglu_forward(act, fc, B, H);
        matmul_forward(out, act, P_(lp->proj_w), P_(lp->proj_b), B, H, C);
        residual_forward(x, x, out, (size_t)B * C);
    }
    norm_forward_(m, ln, mean, rstd, x, m->k_lnf_w, m->k_lnf_b, B);
    matmul_forward(logits, ln, m->tie ? P_(m->k_wte) : P_(m->k_head_w), P_(m->k_head_b), B, C, m->V);
    d->t++;
    return 0;
}

void model_decoder_free(ModelDecoder *d) {
    free(d->off);
    free(d->state);
    free(d->work);
    memset(d, 0, sizeof *d);
}
