/*
 * Whole-model gradient checks: a tiny model (V=37, C=16, 2 layers) under every position scheme of the
 * attention mixer, every MLP kind and both norms; finite differences of the mean cross-entropy against
 * the backward pass for EVERY parameter tensor (so each mixer option, the blocks, the tied/untied head
 * and the ignore index are all checked through the real forward/backward code).
 *
 * Tolerance: h = 1e-2 along unit directions, |numeric - analytic| <= 5e-4 + 2e-2 * |g|. The loss is a
 * float forward averaged in double; its rounding noise (~1e-6 absolute on a loss of ~3.6) divided by
 * 2h gives ~1e-4 in the derivative, and central differences add O(h^2) curvature terms of ~1e-4 for
 * these smooth functions. ReLU MLPs are left to test_nn_ops (inputs kept off the kink there): inside a
 * model a 1e-2 step crosses the kink for a few percent of units and finite differences stop meaning much.
 * Also: large xmalloc/xcalloc blocks (the model's buffers) are backed by transparent huge pages.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "gradcheck.h"
#include "model_json.h"
#include "model/model.h"
#include "test.h"

typedef struct Ctx {
    Model *m;
    int *in, *tg;
    int B, T;
} Ctx;

static double loss_(void *p) {
    Ctx *c = p;
    Err e;
    model_forward(c->m, c->in, c->tg, c->B, c->T, &e);
    return c->m->loss;
}

static void check_config_(const char *what, const char *json, int ignore_some, double h) {
    Err e = {{0}};
    cJSON *j = cJSON_Parse(json);
    ModelSection ms;
    memset(&ms, 0, sizeof ms);
    int rc = config_bind_at(&ms, &MODEL_SECTION, j, NULL, "model", &e);
    CHECK(rc == 0, "%s: config binds (%.200s)", what, e.msg);
    cJSON_Delete(j);
    if (rc) return;
    Model m;
    rc = model_build(&m, &ms, 37, NULL, 1234, &e);
    CHECK(rc == 0, "%s: model builds (%.200s)", what, e.msg);
    if (rc == 0) {
        // seqeval's path (build without init, the values loaded next) then model_init: the same parameters
        Model u;
        int urc = model_build_uninit(&u, &ms, 37, NULL, &e);
        CHECK(urc == 0 && u.pt.numel == m.pt.numel, "%s: model_build_uninit builds the same table", what);
        if (urc == 0) {
            model_init(&u, 1234);
            CHECK(u.pt.numel == m.pt.numel && !memcmp(u.params, m.params, m.pt.numel * sizeof(float)),
                  "%s: model_build_uninit + model_init == model_build, bit for bit (mixer init rules included)", what);
            model_free(&u);
        }
    }
    config_free(&ms, &MODEL_SECTION);
    if (rc) return;
    int B = 2, T = 11;
    int in[22], tg[22];
    GcRng r = {99};
    for (int i = 0; i < B * T; i++) {
        in[i] = (int)(gc_uniform(&r) * 37);
        tg[i] = (int)(gc_uniform(&r) * 37);
        if (ignore_some && i % 3 == 0) tg[i] = -100;
    }
    // make the weights less trivial than the init so every path carries gradient
    for (size_t i = 0; i < m.pt.numel; i++) m.params[i] += 0.05f * gc_normal(&r);
    Ctx c = {&m, in, tg, B, T};
    rc = model_forward(&m, in, tg, B, T, &e);
    CHECK(rc == 0 && isfinite(m.loss), "%s: forward ok, loss %.4f (%.200s)", what, m.loss, e.msg);
    model_zero_grad(&m);
    model_backward(&m, m.n_supervised);
    float *g = malloc(m.pt.numel * sizeof(float));
    memcpy(g, m.grads, m.pt.numel * sizeof(float));
    // the trainer's path (the cross-entropy's forward and backward in one pass; with ignored targets, the
    // head on the supervised rows only) gives the same loss, per-position losses and gradient bits, also
    // with n_norm larger than this batch's count (gradient accumulation)
    for (int extra = 0; extra <= 5; extra += 5) {
        double loss0 = m.loss;
        float *g0 = malloc(m.pt.numel * sizeof(float)), l0[22];
        model_zero_grad(&m);
        model_forward(&m, in, tg, B, T, &e);
        memcpy(l0, m.losses, sizeof l0);
        model_backward(&m, m.n_supervised + extra);
        memcpy(g0, m.grads, m.pt.numel * sizeof(float));
        model_zero_grad(&m);
        rc = model_forward_backward(&m, in, tg, B, T, m.n_supervised + extra, &e);
        CHECK(rc == 0 && m.loss == loss0 && memcmp(l0, m.losses, sizeof l0) == 0 &&
                  memcmp(g0, m.grads, m.pt.numel * sizeof(float)) == 0,
              "%s: model_forward_backward (n_norm = n_supervised + %d) = model_forward + model_backward", what, extra);
        free(g0);
    }
    for (int k = 0; k < m.pt.n; k++) {
        const ParamTensor *t = &m.pt.t[k];
        char name[200];
        snprintf(name, sizeof name, "%s: %s", what, t->name);
        gradcheck_buffer(name, m.params + t->offset, g + t->offset, t->numel, loss_, &c, h, 2e-2, 5e-4, 3, 4,
                         (uint64_t)k + 1);
    }
    free(g);
    model_free(&m);
}


// KLA+: the loss is -log mean_s p_s(target) over the S copies, computed here from the logits of each copy;
// the copies differ (each drew its own posterior sample), the marginal is at most the mean cross-entropy
// (Jensen), and a model without a sampling layer refuses mc_samples > 1
static void test_mc_loss(void) {
    const char *json = "{\"vocab_size\": 0, \"d_model\": 16, \"n_layers\": 1, \"block\": \"fused\", \"mc_samples\": 4, "
                       "\"mixer\": {\"kind\": \"kla\", \"d_state\": 3, \"init_std\": 0.3, \"dt_min\": 0.05, "
                       "\"dt_max\": 0.5, \"p_init\": 0.3}}";
    Model m;
    if (!model_json_build(json, &m, 7)) return;
    Err e = {{0}};
    int rc;
    int B = 2, T = 9, S = 4, V = 37, in[18], tg[18];
    GcRng r = {5};
    for (int i = 0; i < B * T; i++) { in[i] = (int)(gc_uniform(&r) * V); tg[i] = (int)(gc_uniform(&r) * V); }
    m.noise_seed = 3;
    rc = model_forward(&m, in, tg, B, T, &e);
    double total = 0, mean_ce = 0, spread = 0;
    for (int i = 0; i < B * T; i++) {
        double ce[4], mx = -1e300, sum = 0;
        for (int s = 0; s < S; s++) {
            const float *row = m.logits + ((size_t)s * B * T + i) * V;
            double rm = -1e300, z = 0;
            for (int v = 0; v < V; v++) rm = fmax(rm, row[v]);
            for (int v = 0; v < V; v++) z += exp(row[v] - rm);
            ce[s] = -(row[tg[i]] - rm - log(z));
            mx = fmax(mx, -ce[s]);
            mean_ce += ce[s] / S;
        }
        for (int s = 0; s < S; s++) sum += exp(-ce[s] - mx);
        total += -(mx + log(sum)) + log((double)S);
        spread = fmax(spread, fabs(ce[1] - ce[0]));
    }
    total /= B * T;
    mean_ce /= B * T;
    CHECK(rc == 0 && fabs(total - m.loss) < 1e-5, "kla+ loss = -log mean_s p_s (model %.6f, recomputed %.6f)", m.loss,
          total);
    CHECK(spread > 1e-4, "kla+ copies draw different samples (max |ce_1 - ce_0| %.3g)", spread);
    CHECK(m.loss <= mean_ce + 1e-9, "kla+ marginal loss %.5f <= mean cross-entropy of the samples %.5f", m.loss, mean_ce);
    CHECK(m.n_supervised == B * T, "kla+ counts positions, not copies (%d)", m.n_supervised);
    model_free(&m);
    // no sampling layer
    cJSON *j = cJSON_Parse("{\"vocab_size\": 0, \"d_model\": 16, \"n_layers\": 1, \"mc_samples\": 2}");
    ModelSection ms;
    memset(&ms, 0, sizeof ms);
    config_bind_at(&ms, &MODEL_SECTION, j, NULL, "model", &e);
    cJSON_Delete(j);
    rc = model_build(&m, &ms, 37, NULL, 7, &e);
    CHECK(rc != 0 && strstr(e.msg, "mc_samples"), "mc_samples without a kla layer is refused (%.200s)", e.msg);
    config_free(&ms, &MODEL_SECTION);
}

// the model of json decoded token by token (model_decoder_step, attention caches of cap positions) reproduces
// the full forward's logits at every position: max |step - forward| <= 1e-4 max |forward logit|
static void check_decode_cap_(const char *what, const char *json, int cap) {
    Model m;
    if (!model_json_build(json, &m, 11)) return;
    int B = 2, T = 30, V = 37, in[60];
    GcRng r = {12};
    for (int i = 0; i < B * T; i++) in[i] = (int)(gc_uniform(&r) * V);
    for (size_t i = 0; i < m.pt.numel; i++) m.params[i] += 0.05f * gc_normal(&r);
    Err e = {{0}};
    model_forward(&m, in, NULL, B, T, &e);
    float *full = malloc((size_t)B * T * V * sizeof(float)), *lg = malloc((size_t)B * V * sizeof(float));
    memcpy(full, m.logits, (size_t)B * T * V * sizeof(float));
    double worst = 0, scale = 0;
    ModelDecoder d;
    int rc = model_decoder_init(&d, &m, B, cap, &e);
    for (int t = 0; t < T && rc == 0; t++) {
        int tok[2] = {in[t], in[T + t]};
        rc = model_decoder_step(&m, &d, tok, lg, &e);
        for (int b = 0; b < B; b++)
            for (int v = 0; v < V; v++) {
                double f = full[((size_t)b * T + t) * V + v];
                worst = fmax(worst, fabs((double)lg[b * V + v] - f));
                scale = fmax(scale, fabs(f));
            }
    }
    CHECK(rc == 0 && worst <= 1e-4 * scale, "%s model decodes token by token = full forward logits (max|d| %.2g, "
          "max|logit| %.2g, cache of %d positions, %zu floats per sequence) %.200s", what, worst, scale, cap,
          rc == 0 ? d.off[m.L] / B : 0, rc ? e.msg : "");
    if (rc == 0) model_decoder_free(&d);
    free(full); free(lg);
    model_free(&m);
}

static void check_decode_(const char *what, const char *json) { check_decode_cap_(what, json, 30); }

// an attention model of 2 layers with the mixer options opts (a JSON fragment after "kind")
#define ATT_(opts) "{\"vocab_size\": 0, \"d_model\": 16, \"n_layers\": 2, \"mixer\": {\"kind\": \"attention\", " \
    "\"heads\": 2" opts "}}"

// decoding of a whole model: token by token = the full forward's logits, for fused kla blocks and a prenorm
// kla layer with an MLP, the linear family, attention (a key/value cache) under every position scheme, and
// hybrids; a sliding window decodes past its cache (a ring); a full cache and a mixer without a step refuse
static void test_decode(void) {
    check_decode_("kla", "{\"vocab_size\": 0, \"d_model\": 16, \"n_layers\": 3, \"block\": \"fused\", \"norm\": "
                  "\"rmsnorm\", \"mixer\": {\"kind\": \"kla\", \"d_state\": 4, \"init_std\": 0.3}, \"layers\": [{\"at\": "
                  "\"1\", \"block\": \"prenorm\", \"mixer\": {\"sensors\": \"mamba\"}}]}");
    check_decode_("retnet + gla + linear_attn", "{\"vocab_size\": 0, \"d_model\": 16, \"n_layers\": 3, \"mixer\": "
                  "{\"kind\": \"retnet\", \"heads\": 2, \"init_std\": 0.2}, \"layers\": [{\"at\": \"1\", \"mixer\": "
                  "{\"kind\": \"gla\", \"heads\": 2, \"init_std\": 0.2}}, {\"at\": \"2\", \"mixer\": {\"kind\": "
                  "\"linear_attn\", \"heads\": 2, \"feature_map\": \"elu\", \"normalize\": true, \"init_std\": 0.2}}]}");
    check_decode_("mlstm (fused) + retnet", "{\"vocab_size\": 0, \"d_model\": 16, \"n_layers\": 2, \"mixer\": {\"kind\": "
                  "\"mlstm\", \"round_to\": 1, \"chunk\": 4}, \"layers\": [{\"at\": \"1\", \"mixer\": {\"kind\": \"retnet\", "
                  "\"heads\": 2}}]}");
    check_decode_("deltanet + gated_deltanet", "{\"vocab_size\": 0, \"d_model\": 16, \"n_layers\": 2, \"mixer\": "
                  "{\"kind\": \"deltanet\", \"heads\": 2, \"chunk\": 5, \"init_std\": 0.2}, \"layers\": [{\"at\": \"1\", "
                  "\"mixer\": {\"kind\": \"gated_deltanet\", \"heads\": 2, \"allow_neg_eigval\": true, \"chunk\": 3}}]}");
    check_decode_("gsa + gsa relu no norm", "{\"vocab_size\": 0, \"d_model\": 16, \"n_layers\": 2, \"mixer\": "
                  "{\"kind\": \"gsa\", \"heads\": 2, \"num_slots\": 6, \"chunk\": 5, \"init_std\": 0.2}, \"layers\": [{\"at\": "
                  "\"1\", \"mixer\": {\"kind\": \"gsa\", \"heads\": 4, \"num_slots\": 3, \"feature_map\": \"relu\", "
                  "\"norm\": false, \"chunk\": 3}}]}");
    check_decode_("bla + bla decay conv", "{\"vocab_size\": 0, \"d_model\": 16, \"n_layers\": 2, \"mixer\": "
                  "{\"kind\": \"bla\", \"heads\": 2, \"modes\": 3, \"chunk\": 5, \"init_std\": 0.2}, \"layers\": [{\"at\": "
                  "\"1\", \"mixer\": {\"kind\": \"bla\", \"heads\": 4, \"modes\": 4, \"period\": 9.5, \"decay\": true, "
                  "\"conv\": 3, \"chunk\": 3}}]}");
    check_decode_("gla rotate + linear_attn rotate", "{\"vocab_size\": 0, \"d_model\": 16, \"n_layers\": 2, \"mixer\": "
                  "{\"kind\": \"gla\", \"heads\": 2, \"expand_k\": 1, \"rotate\": true, \"rope_base\": 20, \"chunk\": 5}, "
                  "\"layers\": [{\"at\": \"1\", \"mixer\": {\"kind\": \"linear_attn\", \"heads\": 2, \"feature_map\": \"elu\", "
                  "\"rotate\": true, \"chunk\": 3}}]}");
    check_decode_("gla selrope + gated_deltanet selrope", "{\"vocab_size\": 0, \"d_model\": 16, \"n_layers\": 2, "
                  "\"mixer\": {\"kind\": \"gla\", \"heads\": 2, \"expand_k\": 1, \"chunk\": 5, \"selective_rope\": "
                  "{\"enabled\": true, \"phi_proj_rank\": 4, \"use_bias\": true, \"temp_theta\": 100}}, \"layers\": "
                  "[{\"at\": \"1\", \"mixer\": {\"kind\": \"gated_deltanet\", \"heads\": 2, \"chunk\": 3, "
                  "\"selective_rope\": {\"enabled\": true, \"full_rank\": true, \"skip_conv\": true, "
                  "\"use_gate\": true, \"temp_theta\": 100}}}]}");
    check_decode_("mamba2 (fused) + gla", "{\"vocab_size\": 0, \"d_model\": 16, \"n_layers\": 2, \"mixer\": {\"kind\": "
                  "\"mamba2\", \"head_dim\": 8, \"d_state\": 4, \"n_groups\": 2, \"chunk\": 4}, \"layers\": [{\"at\": \"1\", "
                  "\"mixer\": {\"kind\": \"gla\", \"heads\": 2}}]}");
    check_decode_("mamba (fused) + attention", "{\"vocab_size\": 0, \"d_model\": 16, \"n_layers\": 2, \"mixer\": "
                  "{\"kind\": \"mamba\", \"d_state\": 4, \"chunk\": 3}, \"layers\": [{\"at\": \"1\", \"mixer\": "
                  "{\"kind\": \"attention\", \"heads\": 2}}]}");
    check_decode_("attention none", ATT_(", \"pos\": \"none\""));
    check_decode_("attention rope half", ATT_(", \"pos\": \"rope\", \"rope_base\": 50"));
    check_decode_("attention rope interleaved + bias", ATT_(", \"pos\": \"rope\", \"rope_layout\": \"interleaved\", "
                  "\"rope_base\": 50, \"bias\": true"));
    check_decode_("attention alibi", ATT_(", \"pos\": \"alibi\""));
    check_decode_("attention fox + qk_norm", ATT_(", \"pos\": \"fox\", \"qk_norm\": true, \"fgate_bias_init\": 0.5"));
    check_decode_("attention decayed_rope post_softmax", ATT_(", \"pos\": \"decayed_rope\", \"damping\": 0.5, "
                  "\"zero_decay_heads\": 1"));
    check_decode_("attention decayed_rope logits", ATT_(", \"pos\": \"decayed_rope\", \"decay_mode\": \"logits\", "
                  "\"damping\": 0.5, \"zero_decay_heads\": 1"));
    check_decode_("attention sc_rope post_softmax (head_dim 16)", ATT_(", \"pos\": \"sc_rope\", \"head_dim\": 16, "
                  "\"rope_base\": 100, \"damping\": 0.5, \"zero_decay_heads\": 0"));
    check_decode_("attention sc_rope logits", ATT_(", \"pos\": \"sc_rope\", \"decay_mode\": \"logits\", "
                  "\"rope_base\": 100, \"damping\": 0.5"));
    check_decode_("attention window 5 (rope)", ATT_(", \"pos\": \"rope\", \"window\": 5"));
    check_decode_cap_("attention window 5 alibi, ring of 5 in a cache of 8", ATT_(", \"pos\": \"alibi\", \"window\": 5"), 8);
    check_decode_cap_("attention window 4 fox, ring of 4 in a cache of 4", ATT_(", \"pos\": \"fox\", \"window\": 4"), 4);
    check_decode_("attention selective_rope (pos none)", ATT_(", \"pos\": \"none\", \"selective_rope\": {\"enabled\": "
                  "true, \"phi_proj_rank\": 4, \"use_bias\": true, \"temp_theta\": 100}"));
    check_decode_("attention fox + selective_rope + qk_norm", ATT_(", \"pos\": \"fox\", \"qk_norm\": true, "
                  "\"selective_rope\": {\"enabled\": true, \"full_rank\": true, \"skip_conv\": true, \"use_gate\": true, "
                  "\"temp_theta\": 100}"));
    check_decode_("attention path (rank 4)", ATT_(", \"pos\": \"path\", \"path_rank\": 4, \"path_chunk\": 7"));
    check_decode_("attention path_fox (full w)", ATT_(", \"pos\": \"path_fox\", \"path_rank\": 0, \"path_chunk\": 4"));
    check_decode_("hybrid: attention rope + kla (gpt_kla style)", "{\"vocab_size\": 0, \"d_model\": 16, \"n_layers\": 3, "
                  "\"mixer\": {\"kind\": \"attention\", \"heads\": 2}, \"layers\": [{\"at\": \"-1\", \"mixer\": {\"kind\": "
                  "\"kla\", \"d_state\": 4}}]}");
    check_decode_("hybrid: gla + attention fox window 6 + mamba2", "{\"vocab_size\": 0, \"d_model\": 16, \"n_layers\": 3, "
                  "\"mixer\": {\"kind\": \"gla\", \"heads\": 2}, \"layers\": [{\"at\": \"1\", \"mixer\": {\"kind\": "
                  "\"attention\", \"heads\": 4, \"pos\": \"fox\", \"window\": 6}}, {\"at\": \"2\", \"mixer\": {\"kind\": "
                  "\"mamba2\", \"head_dim\": 8, \"d_state\": 4, \"chunk\": 4}}]}");
    Model m;
    Err e = {{0}};
    ModelDecoder d;
    int rc;
    // a cache of 4 positions without a window is full after 4 tokens; a recurrent model has no limit
    if (model_json_build(ATT_(""), &m, 1)) {
        int tok[1] = {3};
        float l1[37];
        rc = model_decoder_init(&d, &m, 1, 4, &e);
        int full_at = -1;
        for (int t = 0; t < 6 && rc == 0 && full_at < 0; t++)
            if (model_decoder_step(&m, &d, tok, l1, &e) != 0) full_at = t;
        CHECK(rc == 0 && d.limit == 4 && full_at == 4 && strstr(e.msg, "full"),
              "an attention decoder of 4 positions refuses the 5th token (%.200s)", e.msg);
        model_decoder_reset(&d, &m);
        CHECK(model_decoder_step(&m, &d, tok, l1, &e) == 0 && d.t == 1, "after a reset it decodes again");
        tok[0] = 37;
        CHECK(model_decoder_step(&m, &d, tok, l1, &e) != 0 && strstr(e.msg, "vocabulary"),
              "a token outside the vocabulary is refused (%.200s)", e.msg);
        if (rc == 0) model_decoder_free(&d);
        model_free(&m);
    }
    if (model_json_build("{\"vocab_size\": 0, \"d_model\": 16, \"n_layers\": 1, \"mixer\": {\"kind\": \"gla\", \"heads\": 2}}", &m, 1)) {
        rc = model_decoder_init(&d, &m, 2, 4, &e);
        CHECK(rc == 0 && d.limit == INT_MAX, "a recurrent decoder has no position limit (%d)", d.limit);
        if (rc == 0) model_decoder_free(&d);
        model_free(&m);
    }
    if (model_json_build("{\"vocab_size\": 0, \"d_model\": 16, \"n_layers\": 2, \"mixer\": {\"kind\": \"attention\", \"heads\": 2}, "
               "\"layers\": [{\"at\": \"1\", \"mixer\": {\"kind\": \"rfa\", \"heads\": 2}}]}", &m, 1)) {
        rc = model_decoder_init(&d, &m, 1, 8, &e);
        CHECK(rc != 0 && strstr(e.msg, "layer 1 (rfa)"), "a model with an rfa layer cannot decode (%.200s)", e.msg);
        model_free(&m);
    }
}

// 1 when json builds no model (vocabulary 37), with the message in e
static int model_json_refused_(const char *json, Err *e) {
    Model m;
    ModelSection ms;
    memset(&ms, 0, sizeof ms);
    memset(e, 0, sizeof *e);
    cJSON *j = cJSON_Parse(json);
    int rc = config_bind_at(&ms, &MODEL_SECTION, j, NULL, "model", e);
    cJSON_Delete(j);
    if (rc == 0 && (rc = model_build(&m, &ms, 37, NULL, 5, e)) == 0) model_free(&m);
    config_free(&ms, &MODEL_SECTION);
    return rc != 0;
}

// The autoencoder head decodes every position from the last one: the logits of every position move when the
// last input token changes and none moves when any earlier token changes under a model whose mixer cannot
// see the past (window 1: each position attends to itself only); the position codes make the rows differ;
// the tensors are the MAD decoder's; and token-by-token decoding is refused.
static void test_autoencoder(void) {
    Model m;
    const char *json = "{\"vocab_size\": 0, \"d_model\": 12, \"n_layers\": 2, \"head\": \"autoencoder\", "
                       "\"norm\": \"rmsnorm\", \"tie_embeddings\": false, \"head_bias\": true, "
                       "\"mixer\": {\"kind\": \"attention\", \"heads\": 2, \"window\": 1}}";
    if (!model_json_build(json, &m, 5)) return;
    const char *names[] = {"dec.norm1.weight", "dec.fc1.weight", "dec.fc1.bias", "dec.norm2.weight",
                           "dec.fc2.weight", "dec.fc2.bias", "lnf.weight", "head.weight", "head.bias"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int found = 0;
        for (int k = 0; k < m.pt.n; k++) found |= !strcmp(m.pt.t[k].name, names[i]);
        CHECK(found, "autoencoder has tensor %s", names[i]);
    }
    int B = 1, T = 6, V = m.V, in[6] = {1, 2, 3, 4, 5, 6};
    Err e = {{0}};
    CHECK(model_forward(&m, in, NULL, B, T, &e) == 0, "autoencoder forward");
    float *ref = malloc((size_t)T * V * sizeof(float));
    memcpy(ref, m.logits, (size_t)T * V * sizeof(float));
    double rowdiff = 0;
    for (int v = 0; v < V; v++) rowdiff = fmax(rowdiff, fabs(ref[v] - ref[(T - 1) * V + v]));
    CHECK(rowdiff > 1e-4, "positions 0 and T-1 decode to different logits (max |d| %.3g > 1e-4)", rowdiff);
    for (int j = 0; j < T; j++) {
        int in2[6];
        memcpy(in2, in, sizeof in2);
        in2[j] = 30;
        model_forward(&m, in2, NULL, B, T, &e);
        double d = 0;
        for (int i = 0; i < T * V; i++) d = fmax(d, fabs(m.logits[i] - ref[i]));
        if (j < T - 1) CHECK(d == 0, "changing token %d (not the last) leaves every logit unchanged (max |d| %.3g)", j, d);
        else CHECK(d > 1e-4, "changing the last token changes the logits (max |d| %.3g > 1e-4)", d);
    }
    ModelDecoder d;
    CHECK(model_decoder_init(&d, &m, 1, 8, &e) != 0 && strstr(e.msg, "autoencoder"),
          "the autoencoder refuses token-by-token decoding (%.200s)", e.msg);
    free(ref);
    model_free(&m);
    // other decoder widths (model.ae_width1/2): the tensors take them, the final norm and the head read the second
    const char *wide = "{\"vocab_size\": 0, \"d_model\": 12, \"n_layers\": 1, \"head\": \"autoencoder\", "
                       "\"ae_width1\": 20, \"ae_width2\": 6, \"tie_embeddings\": false, \"mixer\": {\"kind\": \"attention\", \"heads\": 2}}";
    if (model_json_build(wide, &m, 5)) {
        const char *tn[] = {"dec.fc1.weight", "dec.norm2.weight", "dec.fc2.weight", "lnf.weight", "head.weight"};
        int want[][2] = {{20, 12}, {20, 0}, {6, 20}, {6, 0}, {m.V, 6}};
        for (int i = 0; i < 5; i++)
            for (int k = 0; k < m.pt.n; k++)
                if (!strcmp(m.pt.t[k].name, tn[i]))
                    CHECK(m.pt.t[k].shape[0] == want[i][0] && (want[i][1] == 0 || m.pt.t[k].shape[1] == want[i][1]),
                          "ae_width1 20, ae_width2 6: %s is (%d%s%.0d)", tn[i], want[i][0], want[i][1] ? ", " : ",",
                          want[i][1]);
        model_free(&m);
    }
    const char *tied = "{\"vocab_size\": 40, \"d_model\": 12, \"n_layers\": 1, \"head\": \"autoencoder\", "
                       "\"ae_width2\": 6, \"tie_embeddings\": true}";
    CHECK(model_json_refused_(tied, &e) && strstr(e.msg, "tie_embeddings"),
          "ae_width2 other than d_model with a tied head is refused (%.200s)", e.msg);
    const char *lm = "{\"vocab_size\": 40, \"d_model\": 12, \"n_layers\": 1, \"ae_width1\": 6}";
    CHECK(model_json_refused_(lm, &e) && strstr(e.msg, "model.ae_width1") && strstr(e.msg, "autoencoder"),
          "ae_width1 without the autoencoder head is refused (%.200s)", e.msg);
}

// xmalloc/xcalloc ask for transparent huge pages on large blocks (the model's parameter, gradient, Adam and
// activation buffers). Where the kernel hands them out on request (THP mode "madvise" or "always"), a
// touched 16 MiB xcalloc block must be backed by huge pages for the most part, and still read as zeros.
static void test_huge_pages(void) {
    char mode[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f) {
        if (!fgets(mode, sizeof mode, f)) mode[0] = '\0';
        fclose(f);
    }
    if (!strstr(mode, "[madvise]") && !strstr(mode, "[always]")) {
        printf("ok - huge pages: skipped (transparent huge pages off here: \"%.40s\")\n", mode);
        return;
    }
    size_t n = (size_t)16 << 20;
    unsigned char *p = xcalloc(n, 1);
    int zeros = 1;
    for (size_t i = 0; i < n; i += 4096) zeros &= p[i] == 0 && p[i + 4095] == 0;
    CHECK(zeros, "huge pages: a 16 MiB xcalloc block reads as zeros");
    memset(p, 1, n);
    // the block's mappings in /proc/self/smaps (the advice splits it: the huge-page part is its own mapping):
    // the sum of their AnonHugePages lines
    long huge_kib = 0, kib;
    FILE *sm = fopen("/proc/self/smaps", "r");
    char line[512];
    int in_block = 0;
    uintptr_t b0 = (uintptr_t)p, b1 = b0 + n;
    while (sm && fgets(line, sizeof line, sm)) {
        unsigned long lo, hi;
        char *dash = strchr(line, '-'), *space = strchr(line, ' ');
        if (dash && space && dash < space && sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
            in_block = lo < b1 && hi > b0;
        } else if (in_block && sscanf(line, "AnonHugePages: %ld kB", &kib) == 1) {
            huge_kib += kib;
        }
    }
    if (sm) fclose(sm);
    // 7 of the block's 2 MiB pages lie wholly inside it; at least half of them (the kernel may fall back to
    // small pages when memory is fragmented, so not all)
    CHECK(huge_kib >= 4 * 2048, "huge pages: %ld KiB of the 16 MiB block on huge pages (want >= 8192)", huge_kib);
    free(p);
}

// Every block and every activation buffer starts on a 64-byte cache line (core/err.c: on Intel cores a vector
// load that straddles two lines costs two), also at shapes whose buffers are not whole lines (B T = 21).
static int on_line_(const void *p) { return p && (uintptr_t)p % 64 == 0; }

static void test_alignment(void) {
    size_t sizes[] = {1, 17, 100000, (size_t)16 << 20};
    int ok = 1;
    for (int i = 0; i < 4; i++) {
        void *a = xmalloc(sizes[i]), *b = xcalloc(sizes[i], 1), *c = xmalloc_for(sizes[i], "test block %d", i);
        ok &= on_line_(a) && on_line_(b) && on_line_(c);
        free(a);
        free(b);
        free(c);
    }
    CHECK(ok, "xmalloc, xcalloc and xmalloc_for return 64-byte aligned blocks (1 byte to 16 MiB)");
    const char *kinds[] = {"{\"kind\": \"attention\", \"heads\": 2}", "{\"kind\": \"gla\", \"heads\": 2}"};
    for (int k = 0; k < 2; k++) {
        char json[256];
        snprintf(json, sizeof json, "{\"vocab_size\": 0, \"d_model\": 12, \"n_layers\": 2, \"mixer\": %s}", kinds[k]);
        Model m;
        if (!model_json_build(json, &m, 3)) continue;
        int B = 3, T = 7, in[21], tg[21];
        for (int i = 0; i < B * T; i++) in[i] = tg[i] = (i * 7 + 1) % m.V;
        Err e = {{0}};
        int rc = model_forward_backward(&m, in, tg, B, T, B * T, &e);
        CHECK(rc == 0, "%s model at B 3, T 7: a training step runs (%.200s)", k ? "gla" : "attention", e.msg);
        int all = on_line_(m.params) && on_line_(m.grads) && on_line_(m.arena);
        for (int l = 0; l < m.L; l++) {
            const LayerActs *a = &m.la[l];
            all &= on_line_(a->res) && on_line_(a->ln1) && on_line_(a->ln1_mean) && on_line_(a->ln1_rstd) &&
                   on_line_(a->res_mid) && on_line_(a->ln2) && on_line_(a->ln2_mean) && on_line_(a->ln2_rstd) &&
                   on_line_(a->fc) && on_line_(a->act) && on_line_(m.mix[l].acts);
        }
        all &= on_line_(m.res_out) && on_line_(m.lnf) && on_line_(m.lnf_mean) && on_line_(m.lnf_rstd) &&
               on_line_(m.logits) && on_line_(m.xstats) && on_line_(m.losses) && on_line_(m.scratch) &&
               on_line_(m.dres) && on_line_(m.dtmp) && on_line_(m.dfc) && on_line_(m.mix_out);
        CHECK(all, "%s model at B 3, T 7: parameters, gradients and every activation buffer on a cache line",
              k ? "gla" : "attention");
        model_free(&m);
    }
}

// the same tensors (names, shapes, offsets) with the same initial values: the same model
static int same_model_(const Model *a, const Model *b) {
    if (a->pt.n != b->pt.n || a->pt.numel != b->pt.numel) return 0;
    for (int k = 0; k < a->pt.n; k++) {
        const ParamTensor *x = &a->pt.t[k], *y = &b->pt.t[k];
        if (strcmp(x->name, y->name) || x->offset != y->offset || x->numel != y->numel) return 0;
    }
    return memcmp(a->params, b->params, a->pt.numel * sizeof(float)) == 0;
}

// model.block "auto" (the default): a layer whose mixer owns its MLP (kla) gets the fused block, every other
// layer prenorm; the configs that say "fused" for kla layers build the same model as before
static void test_block_auto(void) {
    Model a, b;
    const char *kla = "\"mixer\": {\"kind\": \"kla\", \"d_state\": 4}";
    char j1[512], j2[512];
    snprintf(j1, sizeof j1, "{\"d_model\": 16, \"n_layers\": 2, %s}", kla);
    snprintf(j2, sizeof j2, "{\"d_model\": 16, \"n_layers\": 2, \"block\": \"fused\", %s}", kla);
    if (model_json_build(j1, &a, 5) && model_json_build(j2, &b, 5)) {
        CHECK(a.lp[0].fused && a.lp[1].fused && !a.lp[0].has_mlp && param_find(&a.pt, "blocks.0.ln2.weight") < 0 &&
              same_model_(&a, &b), "block auto: a kla stack is fused, the same model as \"block\": \"fused\"");
        model_free(&a);
        model_free(&b);
    }
    snprintf(j1, sizeof j1, "{\"d_model\": 16, \"n_layers\": 2, \"block\": \"prenorm\", %s}", kla);
    if (model_json_build(j1, &a, 5)) {
        CHECK(!a.lp[1].fused && a.lp[1].has_mlp && param_find(&a.pt, "blocks.1.mlp.fc.weight") >= 0,
              "block prenorm: a kla layer keeps its MLP when asked");
        model_free(&a);
    }
    // a GPT stack with a last kla layer: no block key needed, the same model as the override saying "fused"
#define GPT_KLA_(block) "{\"d_model\": 16, \"n_layers\": 3, \"mixer\": {\"kind\": \"attention\", \"heads\": 2}, " \
                        "\"layers\": [{\"at\": \"-1\", " block "\"mixer\": {\"kind\": \"kla\", \"d_state\": 4}}]}"
    snprintf(j1, sizeof j1, "%s", GPT_KLA_(""));
    snprintf(j2, sizeof j2, "%s", GPT_KLA_("\"block\": \"fused\", "));
#undef GPT_KLA_
    if (model_json_build(j1, &a, 9) && model_json_build(j2, &b, 9)) {
        CHECK(!a.lp[0].fused && a.lp[0].has_mlp && !a.lp[1].fused && a.lp[2].fused && !a.lp[2].has_mlp &&
              same_model_(&a, &b), "block auto: attention layers prenorm, the last (kla) layer fused");
        // per-layer information through the model, as seqtrain --info, diag.jsonl and seqeval read it
        cJSON *o0 = cJSON_CreateObject(), *o2 = cJSON_CreateObject();
        int d0 = model_layer_diag(&a, 0, o0), d2 = model_layer_diag(&a, 2, o2);
        CHECK(!strcmp(model_layer_name(&a, 0), "attention") && !strcmp(model_layer_name(&a, 2), "kla") &&
              model_layer_attn_heads(&a, 0) == 2 && model_layer_attn_heads(&a, 2) == 16 &&
              model_layer_posterior_var(&a, 0, 0, NULL) == 0 && model_layer_posterior_var(&a, 2, 0, NULL) == 16 &&
              model_layer_cache_per_token(&a, 0) == 2 * 16 && model_layer_state_size(&a, 0, 0) == 0 &&
              model_layer_state_size(&a, 0, 10) == 10 * 2 * 16 &&
              model_layer_cache_per_token(&a, 2) == 0 && model_layer_state_size(&a, 2, 0) > 0 && !d0 && d2 &&
              cJSON_GetObjectItemCaseSensitive(o2, "dt_mean") && !o0->child,
              "model_layer_*: names, heads (a kla layer: one map per channel), posterior channels, decoding state and diagnostics of each layer");
        cJSON_Delete(o0);
        cJSON_Delete(o2);
        model_free(&a);
        model_free(&b);
    }
    // "auto" per layer under a prenorm model
    const char *mixed = "{\"d_model\": 16, \"n_layers\": 2, \"block\": \"prenorm\", \"mixer\": {\"kind\": \"attention\", "
                        "\"heads\": 2}, \"layers\": [{\"at\": \"0-1\", \"block\": \"auto\"}, {\"at\": \"1\", "
                        "\"mixer\": {\"kind\": \"kla\", \"d_state\": 4}}]}";
    if (model_json_build(mixed, &a, 3)) {
        CHECK(!a.lp[0].fused && a.lp[1].fused, "layers[].block auto: resolved per layer from its mixer");
        model_free(&a);
    }
}

int main(void) {
    test_huge_pages();
    test_alignment();
    test_block_auto();
    test_autoencoder();
    test_decode();
    test_mc_loss();
    // h: the finite-difference step, 1e-2 unless a case needs a smaller one (the linear family's per-head
    // RMSNorm of o, tiny at the first positions, is too curved for 1e-2)
    struct { const char *what, *body; int ignore; double h; } cases[] = {
        {"rope+gelu+layernorm", "\"mixer\": {\"kind\": \"attention\", \"heads\": 2, \"pos\": \"rope\"}", 0, 0},
        {"nope+rmsnorm+untied+ignore", "\"norm\": \"rmsnorm\", \"tie_embeddings\": false, \"head_bias\": true, "
         "\"mixer\": {\"kind\": \"attention\", \"heads\": 4, \"pos\": \"none\"}", 1, 0},
        {"alibi+swiglu+bias+qknorm", "\"mlp\": {\"kind\": \"swiglu\", \"ratio\": 2}, \"mixer\": {\"kind\": "
         "\"attention\", \"heads\": 2, \"pos\": \"alibi\", \"bias\": true, \"qk_norm\": true}", 0, 0},
        {"fox+window", "\"mixer\": {\"kind\": \"attention\", \"heads\": 2, \"pos\": \"fox\", \"window\": 4}", 1, 0},
        {"decayed_rope post-softmax d->2d->d", "\"mixer\": {\"kind\": \"attention\", \"heads\": 2, \"head_dim\": 16, "
         "\"pos\": \"decayed_rope\", \"damping\": 0.5, \"zero_decay_heads\": 1}", 0, 0},
        {"decayed_rope on logits", "\"mixer\": {\"kind\": \"attention\", \"heads\": 2, \"pos\": \"decayed_rope\", "
         "\"decay_mode\": \"logits\", \"damping\": 0.5, \"zero_decay_heads\": 0}", 0, 0},
        {"sc_rope interleaved, no mlp", "\"mlp\": {\"kind\": \"none\"}, \"mixer\": {\"kind\": \"attention\", "
         "\"heads\": 4, \"pos\": \"sc_rope\", \"rope_layout\": \"interleaved\", \"damping\": 0.05}", 0, 0},
        {"path (PaTH, rank 4, chunk 3)", "\"mixer\": {\"kind\": \"attention\", \"heads\": 2, \"pos\": \"path\", "
         "\"path_rank\": 4, \"path_chunk\": 3, \"init_std\": 0.3}", 0, 0},
        {"path_fox full-rank w, qk_norm", "\"mixer\": {\"kind\": \"attention\", \"heads\": 2, \"pos\": \"path_fox\", "
         "\"path_rank\": 0, \"qk_norm\": true, \"init_std\": 0.3}", 1, 0},
        {"hybrid: layer 1 alibi", "\"mixer\": {\"kind\": \"attention\", \"heads\": 2}, \"layers\": [{\"at\": \"-1\", "
         "\"mixer\": {\"pos\": \"alibi\"}}]", 0, 0},
        // rfa: every ablation flag in some case, mu = 0 heads (zero_decay_heads) in most
        {"rfa (M1) mu=0 head", "\"mixer\": {\"kind\": \"rfa\", \"heads\": 2, \"zero_decay_heads\": 1, "
         "\"damping\": 0.5}", 0, 0},
        {"rfa SC (M2) learn_omega", "\"mixer\": {\"kind\": \"rfa\", \"heads\": 2, \"head_dim\": 4, "
         "\"spectral_coupling\": true, \"learn_omega\": true, \"damping\": 0.5, \"zero_decay_heads\": 0}", 1, 0},
        {"rfa gaussian (M2.1) flat (M2.2) no bias", "\"mixer\": {\"kind\": \"rfa\", \"heads\": 2, "
         "\"kernel\": \"gaussian\", \"prior\": \"flat\", \"bias\": false, \"damping\": 0.5}", 0, 0},
        {"rfa gaussian dle", "\"mixer\": {\"kind\": \"rfa\", \"heads\": 2, \"kernel\": \"gaussian\", "
         "\"damping\": 0.5, \"zero_decay_heads\": 1}", 0, 0},
        {"rfa no gate (M2.3) no value rotation (M2.4)", "\"mixer\": {\"kind\": \"rfa\", \"heads\": 2, "
         "\"mult_gate\": false, \"rotate_values\": false, \"damping\": 0.5, \"zero_decay_heads\": 1}", 0, 0},
        {"rfa no rotations (M2.5)", "\"mixer\": {\"kind\": \"rfa\", \"heads\": 2, \"rotations\": false, "
         "\"damping\": 0.5, \"zero_decay_heads\": 1}", 0, 0},
        {"rfa unitary (M2.6) learn_omega", "\"mixer\": {\"kind\": \"rfa\", \"heads\": 2, \"unitary\": true, "
         "\"learn_omega\": true}", 0, 0},
        // kla: fused blocks (no MLP tensors), and one fused kla layer at the end of an attention stack; init_std
        // 0.3 so that k and q are not near 0, where their L2 norm is too curved for finite differences
        {"kla fused", "\"block\": \"fused\", \"norm\": \"rmsnorm\", \"mixer\": {\"kind\": \"kla\", "
         "\"d_state\": 4, \"init_std\": 0.3, \"dt_min\": 0.05, \"dt_max\": 0.5, \"p_init\": 0.3}", 0, 0},
        {"gpt + kla last layer (fused)", "\"mixer\": {\"kind\": \"attention\", \"heads\": 2}, \"layers\": "
         "[{\"at\": \"-1\", \"block\": \"fused\", \"mixer\": {\"kind\": \"kla\", \"d_state\": 2, "
         "\"sensors\": \"mamba\", \"init_std\": 0.3, \"dt_min\": 0.05, \"dt_max\": 0.5, \"p_init\": 0.3}}]", 1, 0},
        // the MAD compression head: encoder blocks, the last position's code decoded at every position
        {"autoencoder head, rmsnorm, swiglu (MAD compression)", "\"head\": \"autoencoder\", \"norm\": \"rmsnorm\", "
         "\"tie_embeddings\": false, \"head_bias\": true, \"mlp\": {\"kind\": \"swiglu\", \"ratio\": 2}, "
         "\"mixer\": {\"kind\": \"attention\", \"heads\": 2, \"pos\": \"rope\"}", 1, 0},
        {"autoencoder head, decoder widths 10 and 7 (the KLA paper's [240, 120] form), layernorm",
         "\"head\": \"autoencoder\", \"ae_width1\": 10, \"ae_width2\": 7, \"tie_embeddings\": false, "
         "\"mixer\": {\"kind\": \"attention\", \"heads\": 2}", 1, 0},
        {"autoencoder head, layernorm, fused kla, odd width", "\"head\": \"autoencoder\", \"d_model\": 15, "
         "\"block\": \"fused\", \"mixer\": {\"kind\": \"kla\", \"d_state\": 3, \"init_std\": 0.3, "
         "\"dt_min\": 0.05, \"dt_max\": 0.5, \"p_init\": 0.3}", 0, 0},
        {"kla+ (mc_samples 3): Monte-Carlo marginal likelihood", "\"block\": \"fused\", \"mc_samples\": 3, "
         "\"mixer\": {\"kind\": \"kla\", \"d_state\": 3, \"init_std\": 0.3, \"dt_min\": 0.05, \"dt_max\": 0.5, "
         "\"p_init\": 0.3}", 1, 0},
        // the linear family (mixers/linear.c): every feature map path, the normaliser, RoPE and fixed decays, the
        // per-channel gate; and a hybrid with a gla layer after attention
        {"linear_attn hadamard", "\"mixer\": {\"kind\": \"linear_attn\", \"heads\": 2, \"init_std\": 0.3}", 0, 3e-3},
        {"linear_attn elu normalize", "\"norm\": \"rmsnorm\", \"mixer\": {\"kind\": \"linear_attn\", \"heads\": 2, "
         "\"feature_map\": \"elu\", \"normalize\": true, \"init_std\": 0.3}", 1, 3e-3},
        {"retnet", "\"mixer\": {\"kind\": \"retnet\", \"heads\": 2, \"init_std\": 0.3}", 0, 3e-3},
        {"gla", "\"norm\": \"rmsnorm\", \"mixer\": {\"kind\": \"gla\", \"heads\": 2, \"gate_rank\": 4, "
         "\"gate_normalizer\": 2, \"init_std\": 0.3}", 0, 3e-3},
        {"gpt + gla last layer", "\"mixer\": {\"kind\": \"attention\", \"heads\": 2}, \"layers\": [{\"at\": \"-1\", "
         "\"mixer\": {\"kind\": \"gla\", \"heads\": 2, \"gate_rank\": 4, \"gate_normalizer\": 2, \"init_std\": 0.3}}]", 1, 1e-3},
        // mamba2 (mixers/mamba2.c): fused under block auto, B/C groups; and one mamba2 layer after attention
        {"mamba2 (auto: fused), 2 groups", "\"norm\": \"rmsnorm\", \"mixer\": {\"kind\": \"mamba2\", \"head_dim\": 8, "
         "\"d_state\": 4, \"n_groups\": 2, \"chunk\": 4, \"init_std\": 0.3, \"dt_min\": 0.1, \"dt_max\": 0.6, "
         "\"A_init_lo\": 0.5, \"A_init_hi\": 3}", 1, 0},
        {"gpt + mamba2 last layer", "\"mixer\": {\"kind\": \"attention\", \"heads\": 2}, \"layers\": [{\"at\": \"-1\", "
         "\"mixer\": {\"kind\": \"mamba2\", \"head_dim\": 8, \"d_state\": 4, \"conv_bias\": false, \"init_std\": 0.3, "
         "\"dt_min\": 0.1, \"dt_max\": 0.6}}]", 0, 0},
        // mamba (mixers/mamba.c): fused under block auto; and one mamba layer after attention
        {"mamba (auto: fused)", "\"norm\": \"rmsnorm\", \"mixer\": {\"kind\": \"mamba\", \"d_state\": 4, "
         "\"chunk\": 5, \"init_std\": 0.3, \"dt_min\": 0.1, \"dt_max\": 0.6}", 1, 0},
        {"gpt + mamba last layer", "\"mixer\": {\"kind\": \"attention\", \"heads\": 2}, \"layers\": [{\"at\": \"-1\", "
         "\"mixer\": {\"kind\": \"mamba\", \"d_state\": 3, \"dt_rank\": 2, \"conv_bias\": false, \"init_std\": 0.3, "
         "\"dt_min\": 0.1, \"dt_max\": 0.6}}]", 0, 0},
        // mlstm (mixers/mlstm.c): fused under block auto; and one mlstm layer without conv after attention
        {"mlstm (auto: fused)", "\"mixer\": {\"kind\": \"mlstm\", \"round_to\": 1, \"chunk\": 5}", 1, 0},
        {"gpt + mlstm last layer, no conv", "\"mixer\": {\"kind\": \"attention\", \"heads\": 2}, \"layers\": [{\"at\": "
         "\"-1\", \"mixer\": {\"kind\": \"mlstm\", \"heads\": 2, \"conv\": 0, \"qkv_blocksize\": 8, \"igate_bias_std\": 1}}]",
         0, 3e-3},
        // deltanet / gated_deltanet (mixers/delta.c): init_std 0.3 so that q, k are not near 0 (their L2 norm)
        {"deltanet", "\"mixer\": {\"kind\": \"deltanet\", \"heads\": 2, \"chunk\": 5, \"init_std\": 0.3}", 0, 3e-3},
        {"gated_deltanet neg eigval, no conv", "\"norm\": \"rmsnorm\", \"mixer\": {\"kind\": \"gated_deltanet\", "
         "\"heads\": 2, \"conv\": 0, \"allow_neg_eigval\": true, \"chunk\": 3, \"init_std\": 0.3, "
         "\"A_init_lo\": 0.5, \"A_init_hi\": 4}", 1, 3e-3},
        // gsa (mixers/gsa.c): init_std 0.3 so that the slot scores spread and the softmax carries q's, k's gradients
        {"gsa", "\"mixer\": {\"kind\": \"gsa\", \"heads\": 2, \"num_slots\": 6, \"chunk\": 5, \"init_std\": 0.3}", 0, 3e-3},
        // bla (mixers/bla.c): init_std 0.3 so that the slot softmax is far from uniform
        {"bla", "\"mixer\": {\"kind\": \"bla\", \"heads\": 2, \"modes\": 3, \"chunk\": 5, \"init_std\": 0.3}", 0, 3e-3},
        {"bla decay conv", "\"mixer\": {\"kind\": \"bla\", \"heads\": 2, \"modes\": 3, \"period\": 7, \"decay\": true, "
         "\"conv\": 3, \"chunk\": 4, \"init_std\": 0.3}", 0, 3e-3},
        // the complex forget gate (mixers/linear.c rotate): RoPE in front of gla's engine, one decay per rotated pair
        {"gla rotate", "\"mixer\": {\"kind\": \"gla\", \"heads\": 2, \"expand_k\": 1, \"gate_rank\": 4, \"rotate\": true, "
         "\"rope_base\": 20, \"chunk\": 5}", 0, 3e-3},
        // Selective RoPE (mixers/selrope.c) on gla, gated_deltanet and fox / NoPE attention
        {"gla selrope", "\"mixer\": {\"kind\": \"gla\", \"heads\": 2, \"expand_k\": 1, \"gate_rank\": 4, \"chunk\": 5, "
         "\"init_std\": 0.3, \"selective_rope\": {\"enabled\": true, \"phi_proj_rank\": 4, \"use_bias\": true, "
         "\"temp_theta\": 100}}", 0, 3e-3},
        {"gla selrope full rank", "\"mixer\": {\"kind\": \"gla\", \"heads\": 2, \"expand_k\": 1, \"gate_rank\": 4, "
         "\"init_std\": 0.3, \"selective_rope\": {\"enabled\": true, \"full_rank\": true, \"skip_conv\": true, "
         "\"use_gate\": true, \"temp_theta\": 100}}", 1, 3e-3},
        {"gated_deltanet selrope skip gate", "\"mixer\": {\"kind\": \"gated_deltanet\", \"heads\": 2, \"chunk\": 3, "
         "\"init_std\": 0.3, \"A_init_lo\": 0.5, \"A_init_hi\": 4, \"selective_rope\": {\"enabled\": true, "
         "\"phi_proj_rank\": 4, \"skip_conv\": true, \"use_gate\": true, \"temp_theta\": 100}}", 1, 3e-3},
        {"fox selrope", "\"mixer\": {\"kind\": \"attention\", \"heads\": 2, \"pos\": \"fox\", \"selective_rope\": "
         "{\"enabled\": true, \"phi_proj_rank\": 4, \"conv_act\": \"silu\", \"temp_theta\": 100}}", 0, 0},
        {"nope qk_norm selrope rfa", "\"mixer\": {\"kind\": \"attention\", \"heads\": 2, \"pos\": \"none\", "
         "\"qk_norm\": true, \"selective_rope\": {\"enabled\": true, \"use_gate\": true, \"temp_type\": \"rfa\", "
         "\"temp_theta\": 0.75}}", 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[2048];
        // a case may give its own d_model (it comes first in the body then)
        snprintf(json, sizeof json, "{\"vocab_size\": 0, %s\"n_layers\": 2, %s}",
                 strstr(cases[i].body, "\"d_model\"") ? "" : "\"d_model\": 16, ", cases[i].body);
        check_config_(cases[i].what, json, cases[i].ignore, cases[i].h > 0 ? cases[i].h : 1e-2);
    }
    return test_summary();
}
