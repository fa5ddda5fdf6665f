/*
 * Sampling (model/sample.h) and generation (eval/generate.h):
 *   - greedy is the argmax; top-k 1 is greedy at any temperature;
 *   - draws follow softmax(logits / T) restricted by top-k and top-p: frequencies over 200000 draws within
 *     0.005 of the renormalised probabilities (the binomial standard deviation is at most 0.0012);
 *   - a seed reproduces a sequence of draws; bad options are refused;
 *   - generate(), greedy, on a batch of prompts of different lengths, with and without the attention caches
 *     filling up (re-encoding the last context/2 tokens), on a hybrid model and on every mixer that decodes
 *     (attention, kla, linear_attn, retnet, gla, mamba, mamba2, mlstm, deltanet, gated_deltanet, gsa, bla): every
 *     generated token is the argmax of model_forward over the tokens the decoder holds at that step.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "gradcheck.h"
#include "model/model.h"
#include "model/sample.h"
#include "test.h"
#include "eval/generate.h"

static void test_sample(void) {
    float lg[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.0f};
    Rng r;
    rng_seed(&r, 1);
    SampleOpts greedy = {0, 0, 1}, k1 = {5, 1, 1};
    CHECK(sample_token(lg, 6, &greedy, &r) == 1, "greedy = argmax, the lower id among equal maxima");
    CHECK(sample_token(lg, 6, &k1, &r) == 1, "top-k 1 is greedy at temperature 5");
    // temperatures below the threshold: greedy, never a draw from NaN weights (1 / 1e-320 overflows)
    const double tiny[3] = {1e-320, 1e-300, 0.5 * SAMPLE_GREEDY_BELOW};
    for (int i = 0; i < 3; i++) {
        SampleOpts t = {tiny[i], 0, 1};
        int all = 1;
        for (int k = 0; k < 20; k++) all &= sample_token(lg, 6, &t, &r) == 1;
        CHECK(all, "temperature %g is greedy (argmax 1 in 20 draws of 20)", tiny[i]);
    }
    // the distribution: temperature 0.7, then top-k 4 (ids 1, 3, 4, 0), then top-p 0.9 of those
    double T = 0.7, p[6], tot = 0;
    for (int i = 0; i < 6; i++) tot += p[i] = exp(lg[i] / T);
    int order[4] = {1, 3, 4, 0};
    struct { SampleOpts o; int keep; } cases[] = {
        {{0.7, 0, 1}, 6}, {{0.7, 4, 1}, 4}, {{0.7, 4, 0.9}, 0}, {{0.7, 0, 0.3}, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const SampleOpts *o = &cases[c].o;
        double want[6] = {0}, kept = 0;
        if (cases[c].keep == 6) {
            for (int i = 0; i < 6; i++) want[i] = p[i] / tot;
        } else {
            // the kept ids in order of probability, as many as top-k and top-p allow
            double k4 = 0, cum = 0;
            for (int j = 0; j < 4; j++) k4 += p[order[j]];
            double lim = o->top_k ? k4 : tot;
            int n = 0;
            for (int j = 0; j < 4; j++) {
                cum += p[order[j]];
                n++;
                if (o->top_p < 1 && cum >= o->top_p * lim) break;
            }
            for (int j = 0; j < n; j++) kept += p[order[j]];
            for (int j = 0; j < n; j++) want[order[j]] = p[order[j]] / kept;
        }
        long count[6] = {0};
        int N = 200000;
        rng_seed(&r, 7 + c);
        for (int i = 0; i < N; i++) count[sample_token(lg, 6, o, &r)]++;
        double worst = 0;
        for (int i = 0; i < 6; i++) worst = fmax(worst, fabs((double)count[i] / N - want[i]));
        CHECK(worst < 0.005, "temperature %.1f top-k %d top-p %.1f: frequencies = the renormalised softmax "
              "(max |d| %.4f < 0.005)", o->temperature, o->top_k, o->top_p, worst);
    }
    SampleOpts s = {1, 0, 1};
    int a[50], b[50], same = 1;
    rng_seed(&r, 3);
    for (int i = 0; i < 50; i++) a[i] = sample_token(lg, 6, &s, &r);
    rng_seed(&r, 3);
    for (int i = 0; i < 50; i++) same &= (b[i] = sample_token(lg, 6, &s, &r)) == a[i];
    CHECK(same, "the same seed draws the same 50 tokens");
    Err e = {{0}};
    SampleOpts bad[] = {{-1, 0, 1}, {NAN, 0, 1}, {1, -2, 1}, {1, 0, 0}, {1, 0, 1.5}};
    const char *msg[] = {"--temperature", "--temperature", "--top-k", "--top-p", "--top-p"};
    for (int i = 0; i < 5; i++)
        CHECK(sample_check(&bad[i], &e) != 0 && strstr(e.msg, msg[i]), "bad option %d refused (%.200s)", i, e.msg);
}

static Model *build_(const char *json, Model *m) {
    Err e = {{0}};
    cJSON *j = cJSON_Parse(json);
    ModelSection ms;
    memset(&ms, 0, sizeof ms);
    int rc = config_bind_at(&ms, &MODEL_SECTION, j, NULL, "model", &e);
    cJSON_Delete(j);
    if (rc == 0) rc = model_build(m, &ms, 37, NULL, 3, &e);
    config_free(&ms, &MODEL_SECTION);
    CHECK(rc == 0, "model builds (%.200s)", e.msg);
    if (rc) return NULL;
    GcRng g = {4};
    for (size_t i = 0; i < m->pt.numel; i++) m->params[i] += 0.3f * gc_normal(&g);  // confident logits
    return m;
}

// greedy generate() of two prompts (lengths 5 and 2) = the argmax of the forward over what the decoder holds
static void check_greedy_(const char *what, const char *json, int context) {
    Model m;
    if (!build_(json, &m)) return;
    int p0[5] = {3, 14, 15, 9, 26}, p1[2] = {5, 35}, lens[2] = {5, 2}, max_new = 16;
    const int *prompts[2] = {p0, p1};
    GenerateOpts o = {{0, 0, 1}, max_new, context, 1};
    int out[32];
    GenerateStats st;
    Err e = {{0}};
    int rc = generate(&m, NULL, prompts, lens, 2, &o, NULL, NULL, out, &st, &e);
    CHECK(rc == 0 && st.new_tokens == 2 * max_new, "%s: generate runs (%.200s)", what, e.msg);
    if (rc) { model_free(&m); return; }
    // replay the decoder's window: it holds hist[w0 .. t]; when full it restarts from the last limit/2 tokens
    ModelDecoder d;
    model_decoder_init(&d, &m, 1, context, &e);
    int limit = d.limit;
    model_decoder_free(&d);
    int hist[2][32], bad = 0, checked = 0, slides = 0;
    for (int b = 0; b < 2; b++) {
        memcpy(hist[b], prompts[b], (size_t)lens[b] * sizeof(int));
        memcpy(hist[b] + lens[b], out + b * max_new, (size_t)max_new * sizeof(int));
    }
    int w0 = 0, held = 0, steps = 5 + max_new - 1;
    for (int t = 0; t < steps; t++) {
        if (held == limit) {
            w0 = t - limit / 2;
            held = limit / 2;
            slides++;
        }
        held++;
        for (int b = 0; b < 2; b++) {
            int g = t + 1 - lens[b];  // index of the token generated from step t
            if (g < 0 || g >= max_new) continue;
            model_forward(&m, hist[b] + w0, NULL, 1, t - w0 + 1, &e);
            bad += model_argmax(&m, (size_t)(t - w0)) != out[b * max_new + g];
            checked++;
        }
    }
    CHECK(bad == 0 && checked == 2 * max_new && slides == st.slides,
          "%s: %d greedy tokens = argmax of the full forward over the decoder's window (%d differ; %d slides)", what,
          checked, bad, slides);
    model_free(&m);
}

static void test_generate_greedy(void) {
    const char *att = "{\"vocab_size\": 0, \"d_model\": 16, \"n_layers\": 2, \"mixer\": {\"kind\": \"attention\", "
                      "\"heads\": 2, \"pos\": \"rope\"}}";
    check_greedy_("attention rope, caches never full", att, 64);
    check_greedy_("attention rope, caches of 8 slide", att, 8);
    check_greedy_("kla", "{\"vocab_size\": 0, \"d_model\": 16, \"n_layers\": 2, \"mixer\": {\"kind\": \"kla\", "
                  "\"d_state\": 4}}", 8);
    check_greedy_("hybrid attention fox + gla, caches of 6 slide", "{\"vocab_size\": 0, \"d_model\": 16, \"n_layers\": 2, "
                  "\"mixer\": {\"kind\": \"attention\", \"heads\": 2, \"pos\": \"fox\"}, \"layers\": [{\"at\": \"1\", "
                  "\"mixer\": {\"kind\": \"gla\", \"heads\": 2}}]}", 6);
    // every other mixer that decodes (rfa does not: test_model checks that it is refused)
    static const char *const mixers[][2] = {
        {"linear_attn", "{\"kind\": \"linear_attn\", \"heads\": 2, \"feature_map\": \"elu\"}"},
        {"retnet", "{\"kind\": \"retnet\", \"heads\": 2}"},
        {"gla with selective_rope", "{\"kind\": \"gla\", \"heads\": 2, \"selective_rope\": {\"enabled\": true}}"},
        {"mamba", "{\"kind\": \"mamba\", \"d_state\": 4}"},
        {"mamba2", "{\"kind\": \"mamba2\", \"head_dim\": 8, \"d_state\": 4}"},
        {"mlstm", "{\"kind\": \"mlstm\", \"heads\": 2, \"round_to\": 1}"},
        {"deltanet", "{\"kind\": \"deltanet\", \"heads\": 2}"},
        {"gated_deltanet", "{\"kind\": \"gated_deltanet\", \"heads\": 2}"},
        {"gsa", "{\"kind\": \"gsa\", \"heads\": 2, \"num_slots\": 4}"},
        {"bla with decay", "{\"kind\": \"bla\", \"heads\": 2, \"modes\": 3, \"decay\": true}"},
        {"attention path_fox, caches of 8 slide", "{\"kind\": \"attention\", \"heads\": 2, \"pos\": \"path_fox\"}"},
    };
    for (size_t i = 0; i < sizeof mixers / sizeof mixers[0]; i++) {
        char json[512];
        snprintf(json, sizeof json, "{\"vocab_size\": 0, \"d_model\": 16, \"n_layers\": 2, \"mixer\": %s}", mixers[i][1]);
        check_greedy_(mixers[i][0], json, 8);
    }
    Model m;
    if (!build_("{\"vocab_size\": 0, \"d_model\": 16, \"n_layers\": 1, \"mixer\": {\"kind\": \"gla\", \"heads\": 2}}", &m))
        return;
    int p[1] = {1}, zero = 0, len1 = 1;
    const int *pp[1] = {p};
    GenerateOpts o = {{0, 0, 1}, 4, 8, 1};
    GenerateStats st;
    Err e = {{0}};
    CHECK(generate(&m, NULL, pp, &zero, 1, &o, NULL, NULL, NULL, &st, &e) != 0 && strstr(e.msg, "empty"),
          "an empty prompt is refused (%.200s)", e.msg);
    o.sample.top_p = 0;
    CHECK(generate(&m, NULL, pp, &len1, 1, &o, NULL, NULL, NULL, &st, &e) != 0 && strstr(e.msg, "--top-p"),
          "a bad sampling option is refused (%.200s)", e.msg);
    p[0] = 99;
    o.sample.top_p = 1;
    CHECK(generate(&m, NULL, pp, &len1, 1, &o, NULL, NULL, NULL, &st, &e) != 0 && strstr(e.msg, "vocabulary"),
          "a prompt id outside the vocabulary is refused (%.200s)", e.msg);
    model_free(&m);
}

int main(void) {
    test_sample();
    test_generate_greedy();
    return test_summary();
}
