/*
 * Decoding-state sizes in the form of the BLA paper's Table 1 (MixerOps.state_terms, seqtrain --info's last column):
 * for every mixer kind and option combinations (short conv on and off, a window or none, expand_k / expand_v,
 * slots, heads, head_dim, the position schemes that carry state, selective_rope, the normaliser, rotate):
 *   - the terms add up EXACTLY to what the layer keeps per sequence at context T, state_size + cache_per_token
 *     x min(window, T) (model_layer_state_size(m, l, T)), at T = 40 and T = 10 (below and above a window of 16);
 *   - both that total and Table 1's count (the terms that are Table 1 rows) equal numbers worked out by hand
 *     from Table 1's formulas here (C = 16), e.g. gla with conv 4: H dk dv + (2 H dk + H dv)(k - 1) = 64 + 96;
 *   - for the mixers that decode token by token, the decoder's block per sequence (what model_decoder_init
 *     allocates per sequence) is the sum of both layers' terms;
 *   - a few formula strings come out with the numbers substituted as Table 1 writes them;
 *   - a mixer without the optional callback still reports its size and no terms.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model_json.h"
#include "test.h"

#define C_ 16

typedef struct Case {
    const char *what, *mixer;
    size_t all40, paper40, all10, paper10;  // expected floats per sequence at T = 40 and 10: all terms, Table 1's
} Case;

// at C = 16: H heads, dk = dv = 16 / H unless expand_k / expand_v / head_dim say otherwise
static const Case CASES_[] = {
    // attention: H(dk+dv)·min(w,T), H 2, dk = dv = 8: 32 per token
    {"attention rope", "{\"kind\": \"attention\", \"heads\": 2}", 1280, 1280, 320, 320},
    {"attention none window 16", "{\"kind\": \"attention\", \"heads\": 2, \"pos\": \"none\", \"window\": 16}", 512,
     512, 320, 320},
    // fox: + H forget-gate sums per cached token, + the running sum F_t (H doubles = 2 H floats)
    {"attention fox window 16", "{\"kind\": \"attention\", \"heads\": 2, \"pos\": \"fox\", \"window\": 16}", 548, 512,
     344, 320},
    // path: + H dk (3 - 1) = 32 for the conv on w; path_fox: and the gate sums
    {"attention path", "{\"kind\": \"attention\", \"heads\": 2, \"pos\": \"path\"}", 1312, 1280, 352, 320},
    {"attention path_fox", "{\"kind\": \"attention\", \"heads\": 2, \"pos\": \"path_fox\"}", 1396, 1280, 376, 320},
    // selective_rope: H R (angle sums) + H R 3 (its conv), R = dk / 2 = 4
    {"attention none selective_rope", "{\"kind\": \"attention\", \"heads\": 2, \"pos\": \"none\", "
                                      "\"selective_rope\": {\"enabled\": true}}", 1312, 1280, 352, 320},
    // rfa: complex k and v, dk = dv = 2 D = 16
    {"rfa", "{\"kind\": \"rfa\", \"heads\": 2}", 2560, 2560, 640, 640},
    // kla: 2 M S (not in Table 1) + M (k - 1), M = 16, S = 4
    {"kla conv 4", "{\"kind\": \"kla\", \"d_state\": 4, \"conv\": 4}", 176, 48, 176, 48},
    {"kla conv 1", "{\"kind\": \"kla\", \"d_state\": 4, \"conv\": 1}", 128, 0, 128, 0},
    // mamba2: H N P = 4·4·8 + (d_inner + 2 G N)(k - 1) = (32 + 8)·3
    {"mamba2", "{\"kind\": \"mamba2\", \"d_state\": 4, \"head_dim\": 8, \"conv\": 4}", 248, 248, 248, 248},
    // mamba: d_inner N + d_inner (k - 1) = 32·4 + 32·3; conv 1: the SSM state alone
    {"mamba", "{\"kind\": \"mamba\", \"d_state\": 4, \"conv\": 4}", 224, 224, 224, 224},
    {"mamba expand 1 conv 1", "{\"kind\": \"mamba\", \"d_state\": 8, \"expand\": 1, \"conv\": 1}", 128, 128, 128,
     128},
    // mlstm: I = 32, H 2, D 16: H D D + (H D + H, not in Table 1) + I (k - 1)
    {"mlstm", "{\"kind\": \"mlstm\", \"heads\": 2, \"round_to\": 1}", 642, 608, 642, 608},
    {"mlstm conv 0", "{\"kind\": \"mlstm\", \"heads\": 2, \"round_to\": 1, \"conv\": 0}", 546, 512, 546, 512},
    // linear family: H dk dv (+ H dk normaliser, + 1 position) + (2 H dk + H dv)(k - 1)
    {"linear_attn elu normalize rotate", "{\"kind\": \"linear_attn\", \"heads\": 2, \"feature_map\": \"elu\", "
                                         "\"normalize\": true, \"rotate\": true}", 145, 128, 145, 128},
    {"retnet expand_v 2 conv 3", "{\"kind\": \"retnet\", \"heads\": 2, \"conv\": 3}", 385, 384, 385, 384},
    {"gla expand_k 0.5 conv 4", "{\"kind\": \"gla\", \"heads\": 2, \"conv\": 4}", 160, 160, 160, 160},
    {"gla conv 0", "{\"kind\": \"gla\", \"heads\": 2}", 64, 64, 64, 64},
    // selective_rope with skip_conv (no conv over phi): angle sums H R + the last p H R, H R = 2 · 2
    {"gla selective_rope skip_conv", "{\"kind\": \"gla\", \"heads\": 2, \"selective_rope\": {\"enabled\": true, "
                                     "\"skip_conv\": true}}", 72, 64, 72, 64},
    {"gla expand_k 1 expand_v 2 rotate", "{\"kind\": \"gla\", \"heads\": 2, \"expand_k\": 1, \"expand_v\": 2, "
                                         "\"rotate\": true}", 257, 256, 257, 256},
    // delta rule: H dk dv + (2 H dk + H dv)(k - 1)
    {"deltanet conv 4", "{\"kind\": \"deltanet\", \"heads\": 2}", 272, 272, 272, 272},
    {"deltanet conv 0", "{\"kind\": \"deltanet\", \"heads\": 2, \"conv\": 0}", 128, 128, 128, 128},
    {"gated_deltanet expand_v 2", "{\"kind\": \"gated_deltanet\", \"heads\": 2}", 448, 448, 448, 448},
    {"gated_deltanet selective_rope", "{\"kind\": \"gated_deltanet\", \"heads\": 2, \"selective_rope\": "
                                      "{\"enabled\": true}}", 480, 448, 480, 448},
    // gsa: H(dk+dv)S + (2 H dk + H dv)(k - 1)
    {"gsa 5 slots", "{\"kind\": \"gsa\", \"heads\": 2, \"num_slots\": 5}", 160, 160, 160, 160},
    {"gsa 4 heads 3 slots conv 2", "{\"kind\": \"gsa\", \"heads\": 4, \"num_slots\": 3, \"conv\": 2}", 144, 144, 144,
     144},
    {"gsa head_dim 3", "{\"kind\": \"gsa\", \"heads\": 2, \"head_dim\": 3, \"num_slots\": 4}", 48, 48, 48, 48},
    // bla: H(dk+dv)(2M-1) + (2 H dk + H dv)(k - 1)
    {"bla M 3", "{\"kind\": \"bla\", \"heads\": 2, \"modes\": 3}", 160, 160, 160, 160},
    {"bla M 4 conv 3 expand_k 0.5", "{\"kind\": \"bla\", \"heads\": 2, \"modes\": 4, \"conv\": 3, \"expand_k\": 0.5}",
     232, 232, 232, 232},
};
#define N_CASES_ ((int)(sizeof CASES_ / sizeof CASES_[0]))

// a 2-layer model of width C_ around the mixer spec json; 0, or -1 (reported)
static int build_(Model *m, const char *what, const char *mixer) {
    char json[1024];
    snprintf(json, sizeof json, "{\"d_model\": %d, \"n_layers\": 2, \"mixer\": %s}", C_, mixer);
    int ok = model_json_build(json, m, 1) != NULL;
    CHECK(ok, "%s: built", what);
    return ok ? 0 : -1;
}

static void test_cases(void) {
    for (int i = 0; i < N_CASES_; i++) {
        const Case *c = &CASES_[i];
        Model m;
        if (build_(&m, c->what, c->mixer)) continue;
        const int Ts[2] = {40, 10};
        const size_t all[2] = {c->all40, c->all10}, paper[2] = {c->paper40, c->paper10};
        size_t terms_sum = 0;
        for (int k = 0; k < 2; k++) {
            StateTerms st;
            int has = model_layer_state_terms(&m, 0, Ts[k], &st);
            size_t sum = state_terms_total(&st, 0), p = state_terms_total(&st, 1);
            size_t kept = model_layer_state_size(&m, 0, Ts[k]);
            CHECK(has && st.n > 0 && sum == kept,
                  "%s at T = %d: the %d terms add up to what the layer keeps (%zu = state %zu + %zu per token)", c->what,
                  Ts[k], st.n, sum, model_layer_state_size(&m, 0, 0), model_layer_cache_per_token(&m, 0));
            CHECK(sum == all[k] && p == paper[k], "%s at T = %d: %zu floats (want %zu), Table 1 counts %zu (want %zu)",
                  c->what, Ts[k], sum, all[k], p, paper[k]);
            if (k == 0) terms_sum = sum;
        }
        // the decoder's block per sequence for 40 positions (what model_decoder_init allocates) is both layers' terms
        ModelDecoder d;
        Err e = {{0}};
        if (model_decoder_init(&d, &m, 1, 40, &e) == 0) {
            StateTerms st1;
            model_layer_state_terms(&m, 1, 40, &st1);
            size_t ms = d.off[m.L];
            CHECK(ms == terms_sum + state_terms_total(&st1, 0) && ms == 2 * all[0],
                  "%s: the decoder keeps %zu floats per sequence = the two layers' terms", c->what, ms);
            model_decoder_free(&d);
        }
        model_free(&m);
    }
}

// the formulas as Table 1 writes them, with this layer's numbers
static void check_formulas_(const char *mixer, int T, int n, const char *const *want) {
    Model m;
    if (build_(&m, mixer, mixer)) return;
    StateTerms st;
    model_layer_state_terms(&m, 0, T, &st);
    CHECK(st.n == n, "%s: %d terms (want %d)", mixer, st.n, n);
    for (int i = 0; i < n && i < st.n; i++) CHECK_STR(st.t[i].formula, want[i], "%s: term %d's formula", mixer, i);
    model_free(&m);
}

static void test_formulas(void) {
    check_formulas_("{\"kind\": \"gla\", \"heads\": 2, \"conv\": 4}", 40, 2,
                    (const char *const[]){"H·dk·dv = 2·4·8", "(2·H·dk + H·dv)(k−1) = (2·2·4 + 2·8)·3"});
    check_formulas_("{\"kind\": \"attention\", \"heads\": 2, \"pos\": \"fox\", \"window\": 16}", 40, 3,
                    (const char *const[]){"H(dk+dv)·min(w,T) = 2·(8+8)·min(16,40)", "H·min(w,T) = 2·min(16,40)",
                                          "H doubles = 2·2"});
    check_formulas_("{\"kind\": \"attention\", \"heads\": 4}", 64, 1,
                    (const char *const[]){"H(dk+dv)·T = 4·(4+4)·64"});
    check_formulas_("{\"kind\": \"gsa\", \"heads\": 2, \"num_slots\": 5}", 40, 1,
                    (const char *const[]){"H(dk+dv)S = 2·(8+8)·5"});
    check_formulas_("{\"kind\": \"bla\", \"heads\": 2, \"modes\": 3}", 40, 1,
                    (const char *const[]){"H(dk+dv)(2M−1) = 2·(8+8)·5"});
    check_formulas_("{\"kind\": \"gated_deltanet\", \"heads\": 2, \"conv\": 0}", 40, 1,
                    (const char *const[]){"H·dk·dv = 2·8·16"});
}

// the callback is optional: without it a layer still has its size, and no terms
static void test_optional(void) {
    Model m;
    if (build_(&m, "gla without state_terms", "{\"kind\": \"gla\", \"heads\": 2}")) return;
    MixerOps ops = *m.mspec[0].ops;
    const MixerOps *saved = m.mspec[0].ops;
    ops.state_terms = NULL;
    m.mspec[0].ops = &ops;
    StateTerms st;
    int has = model_layer_state_terms(&m, 0, 40, &st);
    CHECK(!has && st.n == 0 && model_layer_state_size(&m, 0, 40) == 64,
          "a mixer without state_terms: no terms, its size (64) still reported");
    m.mspec[0].ops = saved;
    model_free(&m);
}

int main(void) {
    test_cases();
    test_formulas();
    test_optional();
    return test_summary();
}
