/*
 * The language model: token embedding -> n_layers blocks -> final norm -> head (tied to the embedding
 * or its own matrix). Block kind `prenorm`: x += mixer(norm(x)); x += mlp(norm(x)). Every layer has the
 * model's default mixer unless model.layers overrides it, so hybrid stacks (11 attention layers and a
 * last KLA layer) are one config. Block kind `fused` (per model or per layer): x += mixer(norm(x)) with
 * no MLP, for mixers that carry their own gated MLP (KLA, Mamba). The default, `auto`, asks each layer's
 * mixer (MixerOps.owns_mlp): fused for those, prenorm for the rest. No learned position embedding:
 * positions are the mixers' business.
 *
 * Head `lm` (default): logits of the next token at every position. Head `autoencoder` (MAD's compression
 * backbone): the blocks encode the sequence, the residual stream at the last position is the code, and every
 * position p is decoded from code + sincos(p) by a two-layer MLP (norm, Linear(C,C), GELU, twice) before the
 * final norm and the head: logits (B,T,V) that reconstruct the whole input from one vector.
 *
 * Memory follows llm.c: one parameter buffer (ParamTable), one gradient buffer of the same layout, and
 * one activation arena sized for the (B,T) of the current call; a call with another (B,T) re-sizes it.
 */
#ifndef SEQ_MODEL_H
#define SEQ_MODEL_H

#include <stdint.h>
#include "core/config.h"
#include "mixers/mixer.h"
#include "core/params.h"

// --- configuration ("model" section; docs/config.md) ---
typedef struct MlpSection {
    char kind[CFG_STR_MAX];  // gelu | swiglu | relu | none
    double ratio;            // hidden = round(ratio * d_model)
    int bias;
} MlpSection;

typedef struct LayerOverride {
    char at[CFG_STR_MAX];    // "11", "-1" (last), "0,2,4", "3-5"
    cJSON *mixer;            // merged over model.mixer (replaces it when "kind" differs)
    char block[CFG_STR_MAX]; // inherit | auto | prenorm | fused
} LayerOverride;

typedef struct ModelSection {
    int vocab_size;          // 0 = the data's
    int d_model, n_layers;
    char block[CFG_STR_MAX]; // auto | prenorm | fused (no MLP: the mixer is the whole block, KLA/Mamba style)
    char norm[CFG_STR_MAX];  // layernorm | rmsnorm
    int norm_bias;
    MlpSection mlp;
    cJSON *mixer;            // {"kind": ..., options}
    CfgList layers;          // LayerOverride items
    int tie_embeddings, head_bias;
    char head[CFG_STR_MAX];  // lm | autoencoder (MAD's compression head)
    int ae_width1, ae_width2;  // the autoencoder decoder's two Linear widths (0 = d_model)
    double init_std;
    int mc_samples;          // KLA+ probabilistic decoding: S posterior samples (1 = the posterior mean)
} ModelSection;

extern const CfgSection MODEL_SECTION;

// --- the model ---
enum { MLP_NONE, MLP_GELU, MLP_RELU, MLP_SWIGLU };

typedef struct LayerParams {  // tensor indices of one block (-1 = absent)
    int ln1_w, ln1_b, ln2_w, ln2_b, fc_w, fc_b, proj_w, proj_b;
    int fused;        // the block kind resolved: x += mixer(norm(x)) only
    int has_mlp;      // prenorm with an MLP; 0 for fused blocks and model.mlp.kind none
} LayerParams;

// The activations one block keeps for its backward, by name and as an array (LAYER_ACTS buffers in this order),
// so that every device lays a layer out from the one table of model_layer_act_counts (indexed by LA_*)
enum { LA_RES, LA_LN1, LA_LN1_MEAN, LA_LN1_RSTD, LA_RES_MID, LA_LN2, LA_LN2_MEAN, LA_LN2_RSTD, LA_FC, LA_ACT, LAYER_ACTS };
typedef union LayerActs {
    struct {
        float *res;         // (B,T,C) residual stream entering the layer
        float *ln1;         // (B,T,C)
        float *ln1_mean, *ln1_rstd;  // (B*T,)
        float *res_mid;     // (B,T,C) after the mixer (blocks with an MLP)
        float *ln2;         // (B,T,C)
        float *ln2_mean, *ln2_rstd;
        float *fc;          // (B,T,F) F = hidden or 2*hidden (swiglu)
        float *act;         // (B,T,hidden)
    };
    float *buf[LAYER_ACTS];
} LayerActs;
// which of a layer's buffers are a matmul's input or output (ln1, ln2, fc, act): the GPU keeps those in bf16 under
// run.precision bf16
extern const unsigned char LAYER_ACTS_MATMUL[LAYER_ACTS];

typedef struct Model {
    int V, C, L, hidden, mlp_kind, rms, norm_bias, mlp_bias, tie, head_bias;
    int ae;             // model.head autoencoder: logits of every position decoded from the last one (MAD)
    int D1, D2;         // the autoencoder decoder's widths (model.ae_width1/2; C each by default)
    int HW;             // the width the final norm and the head read: D2 for the autoencoder, else C
    float init_std;
    MixerSpec *mspec;   // (L,)
    Mixer *mix;         // (L,)
    ParamTable pt;
    float *params, *grads;
    int k_wte, k_lnf_w, k_lnf_b, k_head_w, k_head_b;
    // the autoencoder's MLP decoder: norm1 (C) -> fc1 (D1,C) -> GELU -> norm2 (D1) -> fc2 (D2,D1) -> GELU
    // (-1 = absent)
    int k_dn1_w, k_dn1_b, k_dfc1_w, k_dfc1_b, k_dn2_w, k_dn2_b, k_dfc2_w, k_dfc2_b;
    LayerParams *lp;    // (L,)
    // activations for the current (B,T)
    int B, T;
    float *arena;
    size_t arena_size;
    LayerActs *la;      // (L,)
    float *res_out, *lnf, *lnf_mean, *lnf_rstd, *logits, *xstats, *losses;
    // autoencoder decoder, NULL for the lm head: pooled + position code and norm1 (B,T,C), fc1, gelu and
    // norm2 (B,T,D1), fc2 and gelu (B,T,D2; the input of lnf), and a gradient buffer (B,T,max(C,D1,D2); the
    // position codes in the forward)
    float *dec_x, *dec_n1, *dec_f1, *dec_a1, *dec_n2, *dec_f2, *dec_a2, *dec_g;
    float *dec_n1_mean, *dec_n1_rstd, *dec_n2_mean, *dec_n2_rstd;  // (B*T,)
    float *scratch;     // shared mixer temporaries
    float *mix_out;     // (B,T,C) a mixer's output before the residual add
    float *dres, *dtmp, *dfc, *dact;  // gradient work buffers
    int *inputs, *targets;            // copies (B*T,)
    double loss;        // mean over supervised positions of the last forward with targets
    int n_supervised;
    int xent_done;      // the last forward already turned the logits into dlogits (model_forward_backward)
    // model_forward_backward on a batch where some positions have no target (the tasks: MQAR supervises 4
    // of 64) runs the head and the cross-entropy on the n_head supervised rows only, at head_rows (B*T,):
    // lnf, logits (dlogits), xstats then hold those rows compacted. n_head = B*T when the head ran densely.
    int *head_rows, *head_tg;
    int n_head;
    // KLA+ (model.mc_samples = S > 1): every call runs S copies of the batch, each sampling layer drawing
    // its own posterior sample; the loss per position is -log mean_s p(target | sample s) (eq. 24-25).
    // B and T above are then the replicated shape (S*B rows, copy s = rows s*B .. s*B+B-1); the first B*T
    // entries of losses hold the per-position marginal losses.
    int mc;
    uint64_t noise_seed;  // keys the samples of the next forward (the trainer sets it per micro-batch)
    float *mc_w;          // (S*B*T,) each copy's weight in the gradient: softmax over s of log p
} Model;

// replace model.mixer by the full option set of its mixer (kind + every option, defaults filled in),
// validating it on the way, so a resolved config records every setting
int model_resolve_mixer(ModelSection *c, const CfgOrigins *origins, Err *e);

// build the spec from the config (vocab from the data when model.vocab_size is 0), declare and
// initialise the parameters with seed; origins may be NULL
int model_build(Model *m, const ModelSection *cfg, int vocab_size, const CfgOrigins *origins, uint64_t seed, Err *e);
// model_build without the initialisation (the parameters hold whatever malloc gave): for a model whose every
// parameter is read from a checkpoint next, where drawing the random init would only cost time (seconds for
// a 180M-parameter model); model_init then does what model_build adds
int model_build_uninit(Model *m, const ModelSection *cfg, int vocab_size, const CfgOrigins *origins, Err *e);
void model_init(Model *m, uint64_t seed);
void model_free(Model *m);
// inputs/targets (B,T); targets may be NULL (logits only). Returns 0, or -1 with e set for bad ids.
int model_forward(Model *m, const int *inputs, const int *targets, int B, int T, Err *e);
void model_zero_grad(Model *m);
// backward of the last forward (with targets); n_norm = supervised positions the loss is averaged over
// (the forward's n_supervised, or the total over accumulated micro-batches); grads += ...
void model_backward(Model *m, int n_norm);
// model_forward with targets, then model_backward(n_norm), n_norm known up front (the trainer counts the
// step's supervised tokens first): the same loss and gradients, but the cross-entropy turns the logits
// into dlogits in the same pass that computes the loss (one read of the (B,T,V) buffer, not two).
// After it, m->logits holds dlogits, not logits. n_norm <= 0 adds nothing to the gradients.
int model_forward_backward(Model *m, const int *inputs, const int *targets, int B, int T, int n_norm, Err *e);
// the parameter count; params and grads are longer (pt.numel floats: the tensors' alignment gaps, core/params.h),
// so a pass over the whole buffer takes pt.numel
size_t model_num_params(const Model *m);
// counts (LAYER_ACTS,): the floats of each of layer l's LayerActs buffers for a batch (B,T), 0 where the layer has
// no such buffer (the MLP's without an MLP)
void model_layer_act_counts(const Model *m, int l, int B, int T, size_t *counts);
// the batch's token ids against the vocabulary, inputs and targets (BT,) (targets may be NULL; -100 = ignored):
// 0, or -1 with e naming the first bad one and its position; what every device checks before a forward
int model_check_batch(const Model *m, const int *inputs, const int *targets, int BT, Err *e);
// --- decoding, a token at a time (generation) ---
// A ModelDecoder holds what B sequences need to go on token by token: every layer's recurrent state or
// key/value cache (MixerOps.state_size/state_init/step), one block per layer of (B, size[l]) floats, and the
// position t of the next token, the same for the B sequences (a batch of prompts of different lengths is fed
// side by side, each sequence its own tokens). cap is the positions an attention cache holds (the model's
// context, or the length asked for); limit is how many tokens the decoder takes before it is full: cap when a
// layer keeps every position (attention without a window, PaTH), INT_MAX when every layer is recurrent or a
// sliding window no longer than cap. Token by token, model_decoder_step reproduces model_forward's logits.
typedef struct ModelDecoder {
    int B, cap, limit;
    int t;            // tokens fed so far: the next token's position
    size_t *off;      // (L + 1,) where layer l's (B, size) block starts in state; off[L] = the total
    float *state;     // every layer's states and caches
    float *work;      // one token's activations (B rows)
} ModelDecoder;

// sized for B sequences and cap positions, at the empty prefix (t = 0); -1 with e set for a model that
// cannot decode token by token (the autoencoder head; a layer whose mixer has no step, e.g. rfa)
int model_decoder_init(ModelDecoder *d, const Model *m, int B, int cap, Err *e);
// the states' layout for B sequences and cap positions, on either device: off (L + 1,) (malloc'd) where layer l's
// (B, state_size(cap)) block starts, off[L] the total, and *limit as ModelDecoder.limit. NULL with e set when the
// model cannot decode token by token (as model_decoder_init)
size_t *model_decoder_layout(const Model *m, int B, int cap, int *limit, Err *e);
// back to the empty prefix (t = 0), the buffers kept
void model_decoder_reset(ModelDecoder *d, const Model *m);
// feed one token per sequence, tokens (B,): logits (B,V) of the next token, and t advances. -1 with e set
// for a bad id or a full decoder (t == limit; reset it and feed the last tokens again to slide)
int model_decoder_step(Model *m, ModelDecoder *d, const int *tokens, float *logits, Err *e);
void model_decoder_free(ModelDecoder *d);

// per-layer information for the tools (seqtrain --info and diag.jsonl, seqeval --attention-map), so that
// they need not reach into the mixers' ops:
// the kind of layer l's mixer ("attention", "kla", ...)
const char *model_layer_name(const Model *m, int l);
// what layer l keeps per sequence when decoding: so many floats to decode cap positions (cap 0: the part
// that does not grow, e.g. a recurrent state), and so many floats cached per token (K and V; 0 for a
// recurrent mixer)
size_t model_layer_state_size(const Model *m, int l, int cap);
size_t model_layer_cache_per_token(const Model *m, int l);
// model_layer_state_size(m, l, T) as named terms in the form of the BLA paper's Table 1 (MixerOps.state_terms);
// 0 (st->n = 0) when the layer's mixer describes none
int model_layer_state_terms(const Model *m, int l, int T, StateTerms *st);
// add layer l's diagnostics (named per-head arrays, docs/mixers.md) to obj; 0 when its mixer reports none
int model_layer_diag(const Model *m, int l, cJSON *obj);
// attention-like layers: the number of heads (0: layer l has no attention map), and head h's softmax weights
// P (T,T) of batch row b from the last forward (NaN where hidden)
int model_layer_attn_heads(const Model *m, int l);
void model_layer_attn_map(const Model *m, int l, int b, int h, float *P);
// layer l's output variance of batch row b from the last forward (MixerOps.posterior_var): var (T, n) for the n
// channels returned; var NULL returns n only; 0 for a mixer without a posterior
size_t model_layer_posterior_var(const Model *m, int l, int b, float *var);

// the predicted token of position i (< B*T of the caller's batch) of the last forward: the argmax of the
// logits, or under KLA+ of the probability averaged over the samples (positions with a target only)
int model_argmax(const Model *m, size_t i);

#endif
