/*
 * Decoding on the GPU (gpu/gpu.h's gpu_decoder_*, the mixers' GpuMixerOps.step: recurrent states and attention's
 * key/value caches) against the host's ModelDecoder, for every mixer the GPU takes, each option group through a
 * small model:
 *   - token by token, B sequences of different tokens: each step's logits equal the host decoder's, and the host
 *     forward's logits at that position (decode == forward), within the precision's tolerance (relative to the
 *     largest magnitude: fp32 2e-4, the devices' sums in other orders; bf16 3e-2, the matmuls' 8-bit operands, as
 *     in test_gpu_parity.c);
 *   - after gpu_decoder_reset the same tokens give bit-identical logits (the states start from the host's
 *     state_init each time, and no step reads anything but its state);
 *   - greedy generate() on the GPU continues two prompts of different lengths with the host's tokens (fp32), in a
 *     context of 10 positions, so attention's caches fill and slide (re-encoding the last 5 tokens).
 * Built against the CUDA backend and, with SEQ_GPU_EMULATE, against its kernels emulated on the CPU (CI). Exit
 * status 77 and a "skipped" line when the build has no usable GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../model_json.h"
#include "../test.h"
#include "eval/generate.h"
#include "gpu/gpu.h"

#define V_ 96
#define B_ 2
#define T_DEFAULT_ 24

typedef struct Case {
    const char *name, *json;
    int T;  // positions decoded, when not T_DEFAULT_ (0)
} Case;

#define ONE_(MIXER) "{\"d_model\": 32, \"n_layers\": 1, \"mixer\": {" MIXER "}}"
static const Case CASES_[] = {
    {"gla, conv 4", ONE_("\"kind\": \"gla\", \"heads\": 2, \"conv\": 4"), 0},
    {"gla, rotate, expand_k 1, no output gate",
     ONE_("\"kind\": \"gla\", \"heads\": 2, \"expand_k\": 1, \"rotate\": true, \"output_gate\": false"), 0},
    {"gla, selective_rope (conv 4 over phi, gate, bias)",
     ONE_("\"kind\": \"gla\", \"heads\": 2, \"expand_k\": 1, \"selective_rope\": {\"enabled\": true, "
          "\"use_gate\": true, \"use_bias\": true}"), 0},
    {"retnet, conv 4", ONE_("\"kind\": \"retnet\", \"heads\": 2, \"conv\": 4"), 0},
    {"linear_attn, elu, rotate, normaliser",
     ONE_("\"kind\": \"linear_attn\", \"heads\": 2, \"feature_map\": \"elu\", \"rotate\": true, \"normalize\": true"), 0},
    {"linear_attn, hadamard feature map", ONE_("\"kind\": \"linear_attn\", \"heads\": 2"), 0},
    {"gsa, 8 slots, conv 4", ONE_("\"kind\": \"gsa\", \"heads\": 2, \"num_slots\": 8, \"conv\": 4"), 0},
    {"gsa, relu, no norm", ONE_("\"kind\": \"gsa\", \"heads\": 2, \"num_slots\": 6, \"feature_map\": \"relu\", "
                                "\"norm\": false"), 0},
    {"deltanet, conv 4", ONE_("\"kind\": \"deltanet\", \"heads\": 2"), 0},
    {"deltanet, no conv, use_gate, allow_neg_eigval, expand_k 2",
     ONE_("\"kind\": \"deltanet\", \"heads\": 2, \"conv\": 0, \"use_gate\": true, \"allow_neg_eigval\": true, "
          "\"expand_k\": 2"), 0},
    {"gated_deltanet (defaults: conv 4, output gate)", ONE_("\"kind\": \"gated_deltanet\", \"heads\": 2"), 0},
    {"gated_deltanet, selective_rope full rank, skip_conv",
     ONE_("\"kind\": \"gated_deltanet\", \"heads\": 2, \"selective_rope\": {\"enabled\": true, "
          "\"full_rank\": true, \"skip_conv\": true}"), 0},
    {"mamba2, 2 groups, d_state 16", ONE_("\"kind\": \"mamba2\", \"d_state\": 16, \"head_dim\": 16, \"n_groups\": 2"), 0},
    {"mamba2, conv 3 without bias, prenorm block with an MLP",
     "{\"d_model\": 32, \"n_layers\": 1, \"block\": \"prenorm\", \"mixer\": {\"kind\": \"mamba2\", \"expand\": 1, "
     "\"d_state\": 8, \"head_dim\": 8, \"conv\": 3, \"conv_bias\": false}}", 0},
    {"mlstm, conv 4", ONE_("\"kind\": \"mlstm\", \"heads\": 2, \"round_to\": 16"), 0},
    {"mlstm, no conv, 4 heads", ONE_("\"kind\": \"mlstm\", \"heads\": 4, \"proj_factor\": 1.5, \"round_to\": 1, "
                                     "\"conv\": 0, \"qkv_blocksize\": 8"), 0},
    {"bla, 4 modes, no decay", ONE_("\"kind\": \"bla\", \"heads\": 2, \"modes\": 4"), 0},
    {"bla, decay, period 40, conv 4", ONE_("\"kind\": \"bla\", \"heads\": 2, \"modes\": 6, \"period\": 40, "
                                          "\"decay\": true, \"conv\": 4"), 0},
    // attention's key/value cache: every position scheme the GPU takes, a window shorter than the cache (a ring of
    // slots), qk_norm, biases; 24 positions fill one tile of the step kernel's keys
    {"kla, plain sensors, OU", ONE_("\"kind\": \"kla\""), 0},
    {"kla, mamba sensors, ZOH, no process noise", ONE_("\"kind\": \"kla\", \"sensors\": \"mamba\", "
                                                       "\"discretization\": \"zoh\", \"process_noise\": false"), 0},
    {"attention, rope, qkv/out biases", ONE_("\"kind\": \"attention\", \"heads\": 2, \"pos\": \"rope\", \"bias\": true"), 0},
    {"attention, rope interleaved, qk_norm, window 7 (a ring of 7 slots)",
     ONE_("\"kind\": \"attention\", \"heads\": 2, \"pos\": \"rope\", \"rope_layout\": \"interleaved\", "
          "\"qk_norm\": true, \"window\": 7"), 0},
    {"attention, fox, qk_norm, selective_rope (conv 4, gate)",
     ONE_("\"kind\": \"attention\", \"heads\": 2, \"pos\": \"fox\", \"qk_norm\": true, "
          "\"selective_rope\": {\"enabled\": true, \"use_gate\": true}"), 0},
    {"attention, alibi, 3 heads", ONE_("\"kind\": \"attention\", \"heads\": 3, \"head_dim\": 16, \"pos\": \"alibi\""), 0},
    {"attention, fox, window 10", ONE_("\"kind\": \"attention\", \"heads\": 2, \"pos\": \"fox\", \"window\": 10, "
                                       "\"fgate_bias_init\": 1"), 0},
    {"attention, decayed_rope (post-softmax decay), 4 heads of 12",
     ONE_("\"kind\": \"attention\", \"heads\": 4, \"head_dim\": 12, \"pos\": \"decayed_rope\", "
          "\"zero_decay_heads\": 1, \"damping\": 0.2"), 0},
    {"attention, sc_rope, decay on the logits", ONE_("\"kind\": \"attention\", \"heads\": 2, \"head_dim\": 32, "
                                                   "\"pos\": \"sc_rope\", \"decay_mode\": \"logits\""), 0},
    {"attention, pos none, one head of 128, 260 positions (two tiles of the step's keys; fp32 only)",
     ONE_("\"kind\": \"attention\", \"heads\": 1, \"head_dim\": 128, \"pos\": \"none\""), 300},
    {"hybrid: gla over attention (rope), 2 layers",
     "{\"d_model\": 32, \"n_layers\": 2, \"mixer\": {\"kind\": \"gla\", \"heads\": 2, \"conv\": 4}, "
     "\"layers\": [{\"at\": \"1\", \"mixer\": {\"kind\": \"attention\", \"heads\": 2, \"pos\": \"rope\"}}]}", 0},
    {"hybrid: gla over gated_deltanet, rmsnorm, swiglu, 2 layers",
     "{\"d_model\": 32, \"n_layers\": 2, \"norm\": \"rmsnorm\", \"mlp\": {\"kind\": \"swiglu\"}, "
     "\"mixer\": {\"kind\": \"gla\", \"heads\": 2, \"conv\": 4}, "
     "\"layers\": [{\"at\": \"1\", \"mixer\": {\"kind\": \"gated_deltanet\", \"heads\": 2}}]}", 0},
};
#undef ONE_

typedef struct Prec {
    const char *name;
    double tol;
} Prec;
static const Prec PRECS_[] = {{"fp32", 2e-4}, {"bf16", 3e-2}};

static unsigned long long rng_ = 88172645463325252ull;
static double uniform_(void) {  // xorshift64, [0, 1)
    rng_ ^= rng_ << 13, rng_ ^= rng_ >> 7, rng_ ^= rng_ << 17;
    return (rng_ >> 11) * (1.0 / 9007199254740992.0);
}

// max |a - b| / max |b| over n floats (0/0 = 0)
static double rel_err_(const float *a, const float *b, size_t n) {
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double x = fabs((double)a[i] - b[i]);
        if (!(x <= d)) d = x;
        if (fabs(b[i]) > s) s = fabs(b[i]);
    }
    return s > 0 ? d / s : d;
}

// 1 when the build has no GPU to run on (the caller skips)
static int run_case_(const Case *c, const Prec *p) {
    if (c->T && strcmp(p->name, "fp32")) return 0;  // fp32 only (the emulator's time): bf16's rounding is the short cases'
    Model m;
    if (!model_json_build_v(c->json, &m, V_, 23)) return 0;
    for (size_t i = 0; i < m.pt.numel; i++) m.params[i] += (float)(0.05 * (uniform_() - 0.5));
    Err e = {{0}};
    Gpu *g;
    if (gpu_open(&g, &m, NULL, p->name, &e) != 0) {
        int none = strstr(e.msg, "no CUDA device") != NULL;
        if (!none) CHECK(0, "%s, %s: gpu_open (%s)", c->name, p->name, e.msg);
        model_free(&m);
        return none;
    }
    int T = c->T ? c->T : T_DEFAULT_, tok[B_];
    int *in = malloc((size_t)B_ * T * sizeof(int));
    for (int i = 0; i < B_ * T; i++) in[i] = (int)(uniform_() * V_);
    // the host's forward over the whole sequences, and its decoder token by token
    CHECK(model_forward(&m, in, NULL, B_, T, &e) == 0, "%s: model_forward (%s)", c->name, e.msg);
    size_t nl = (size_t)B_ * V_;
    float *fwd = malloc((size_t)B_ * T * V_ * sizeof(float)), *host = malloc(nl * T * sizeof(float));
    float *dev = malloc(nl * T * sizeof(float)), *dev2 = malloc(nl * sizeof(float)), *row = malloc(nl * sizeof(float));
    memcpy(fwd, m.logits, (size_t)B_ * T * V_ * sizeof(float));
    ModelDecoder hd;
    CHECK(model_decoder_init(&hd, &m, B_, T, &e) == 0, "%s: model_decoder_init (%s)", c->name, e.msg);
    int limit = 0;
    int opened = gpu_decoder_open(g, B_, T, &limit, &e) == 0;
    CHECK(opened, "%s, %s: gpu_decoder_open (%s)", c->name, p->name, e.msg);
    CHECK(limit == hd.limit, "%s: the GPU decoder's limit is the host's (%d, %d)", c->name, limit, hd.limit);
    double worst_host = 0, worst_fwd = 0;
    int steps_ok = opened;
    for (int t = 0; steps_ok && t < T; t++) {
        for (int b = 0; b < B_; b++) tok[b] = in[b * T + t];
        steps_ok = model_decoder_step(&m, &hd, tok, host + t * nl, &e) == 0 && gpu_decoder_step(g, tok, dev + t * nl, &e) == 0;
        double r = rel_err_(dev + t * nl, host + t * nl, nl);
        if (!(r <= worst_host)) worst_host = r;
        for (int b = 0; b < B_; b++) memcpy(row + (size_t)b * V_, fwd + ((size_t)b * T + t) * V_, V_ * sizeof(float));
        r = rel_err_(dev + t * nl, row, nl);
        if (!(r <= worst_fwd)) worst_fwd = r;
    }
    if (opened) CHECK(steps_ok, "%s, %s: %d steps on both devices (%s)", c->name, p->name, T, e.msg);
    if (steps_ok) {
        CHECK(worst_host <= p->tol, "%s, %s: %d steps' logits are the host decoder's (rel err %.2e <= %.0e)", c->name,
              p->name, T, worst_host, p->tol);
        CHECK(worst_fwd <= p->tol, "%s, %s: and the host forward's at each position (rel err %.2e <= %.0e)", c->name,
              p->name, worst_fwd, p->tol);
        // again from the empty state: the same bits
        gpu_decoder_reset(g);
        int same = 1;
        for (int t = 0; same && t < T; t++) {
            for (int b = 0; b < B_; b++) tok[b] = in[b * T + t];
            same = gpu_decoder_step(g, tok, dev2, &e) == 0 && !memcmp(dev2, dev + t * nl, nl * sizeof(float));
        }
        CHECK(same, "%s, %s: after a reset, bit-identical logits", c->name, p->name);
    }
    model_decoder_free(&hd);
    // greedy generation of two prompts of lengths 5 and 2, on both devices
    if (!strcmp(p->name, "fp32")) {
        int p0[5] = {in[0], in[1], in[2], in[3], in[4]}, p1[2] = {in[T], in[T + 1]};
        const int *prompts[2] = {p0, p1};
        int lens[2] = {5, 2}, out_h[2 * 12], out_d[2 * 12];
        GenerateOpts o = {{0.0, 0, 1.0}, 12, 10, 7};  // 5 + 12 > 10: attention's caches fill and slide
        GenerateStats st;
        CHECK(generate(&m, NULL, prompts, lens, 2, &o, NULL, NULL, out_h, &st, &e) == 0, "generate (%s)", e.msg);
        CHECK(generate(&m, g, prompts, lens, 2, &o, NULL, NULL, out_d, &st, &e) == 0, "generate on the GPU (%s)",
              e.msg);
        CHECK(!memcmp(out_h, out_d, sizeof out_h), "%s: greedy generation on the GPU gives the host's 2 x 12 tokens "
              "(context 10: %d slides)", c->name, st.slides);
    }
    gpu_close(g);
    free(fwd); free(host); free(dev); free(dev2); free(row); free(in);
    model_free(&m);
    return 0;
}

int main(void) {
    for (size_t p = 0; p < sizeof PRECS_ / sizeof PRECS_[0]; p++)
        for (size_t c = 0; c < sizeof CASES_ / sizeof CASES_[0]; c++)
            if (run_case_(&CASES_[c], &PRECS_[p])) {
                printf("skipped - GPU decoding: no CUDA device on this machine\n");
                return 77;
            }
    return test_summary();
}
