/*
 * The GPU backend against the CPU (`make test-cuda`, tests/gpu/run.sh): for small models covering every
 * option the GPU takes (LayerNorm/RMSNorm with and without bias, gelu/relu/swiglu/no MLP, tied and untied
 * heads with and without bias, attention with every position scheme the GPU takes (none, rope in both layouts,
 * alibi, fox, decayed_rope and sc_rope with the decay on the logits and after the softmax), a sliding window
 * (longer sequences, so whole key tiles fall outside it) and qk_norm, head sizes on all three kernel widths,
 * projection biases), in fp32, tf32 and bf16:
 *   - logits, loss and every parameter's gradient of one forward/backward (targets with ignored positions),
 *   - the losses, gradient norms, parameter updates and Adam moments of 6 AdamW steps with parameter groups and
 *     local and global clipping active (not for the position schemes' cases: Case.grads_only),
 *   - bit-identical gradients from two runs of the same step (what a bit-identical --resume needs),
 *   - evaluation's forward (gpu_forward_eval): per-position losses and predictions at several shapes up to one
 *     window of 4096 tokens, and no device memory kept from an earlier shape,
 * and the refusals of what the GPU has no kernels for (those need no GPU, so they run wherever it builds).
 * Built twice: against the CUDA backend (make CUDA=1) and, with SEQ_GPU_EMULATE, against its kernels emulated
 * on the CPU (tests/gpu/emu/, fp32 and bf16), which is how CI checks them.
 *
 * Tolerances are relative to the largest magnitude of the compared tensor (max |gpu - cpu| / max |cpu|):
 * fp32 2e-4 (the two devices add in different orders), tf32 3e-2 (cuBLAS rounds matmul inputs to 10-bit
 * mantissas, ~5e-4 relative per product, compounded over the layers), bf16 3e-2 (8-bit mantissas: ~4e-3 per
 * operand, the attention kernels' q, k, v, dout and weights included; measured on an H200: logits 4.5e-3,
 * gradients up to 2.15e-2, fox's gate bias, a sum of every position's dF); the loss a tenth of that; the L2
 * difference of the parameter updates ten times it (see there). Exit status 77 and a "skipped" line when the
 * build has no usable GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../model_json.h"
#include "../test.h"
#include "gpu/gpu.h"
#include "optim/optim.h"

// V above the cross-entropy kernel's 256 threads per row; T more than one 64-row block and a partial 32-key tile.
// The emulator (a fiber per CUDA thread) takes a smaller batch to stay within a minute.
#ifdef SEQ_GPU_EMULATE
#define V_ 600
#define B_ 2
#define T_ 70
#else
#define V_ 1000
#define B_ 3
#define T_ 77
#endif

typedef struct Case {
    const char *name, *json;
    // relu's derivative jumps at 0: where TF32's or bf16's rounding moves a pre-activation across 0 the two
    // devices gate that element differently, an O(1) difference in the gradients upstream of it (and in Adam's
    // moments). On an H200 fc.weight's gradient differs by up to 1.2e-1 (tf32: how many gates flip varies from
    // run to run with cuBLAS's choice of kernel) and 1.6e-1 (bf16), the first moments by up to 5.0e-1. Such a
    // case gets the precision's kink_slack times its tolerances of the gradients and moments, and its gradients
    // are compared in L2 (|gpu - cpu|_2 / |cpu|_2: a flipped gate weighs by its share of the tensor; the max over
    // elements reached 3.2e-1 on a relu feature map's q_proj, where one flipped term stands against a sum of 140);
    // fp32 keeps its own tolerance (it rounds too little to flip a gate at step 0 here). A kinked case skips the
    // 6 AdamW steps (grads_only): once a gate flips, the two devices' parameters part by an O(1) step in the
    // weights upstream of it, at any precision (fp32 on one draw: updates 1.0e-2 in L2, first moments 1.5e-1),
    // and the optimizer is checked by the other cases.
    int kinked;
    int B, T;  // the batch, when not B_ x T_ (0)
    // 1: only the forward, the gradients and the repeated step; the position schemes' cases skip the 6 AdamW steps
    // (the optimizer does not depend on the mixer's options, and each step costs seconds on the emulator)
    int grads_only;
} Case;

static const Case CASES_[] = {
    {"layernorm, gelu, rope half, tied, D 16",
     "{\"d_model\": 32, \"n_layers\": 2, \"mixer\": {\"kind\": \"attention\", \"heads\": 2, \"pos\": \"rope\"}}",
     0, 0, 0, 0},
    {"rmsnorm, swiglu, pos none, untied + head bias, qkv/out biases, D 48 (kernel width 64)",
     "{\"d_model\": 48, \"n_layers\": 2, \"norm\": \"rmsnorm\", \"mlp\": {\"kind\": \"swiglu\", \"ratio\": 2.5, "
     "\"bias\": false}, \"tie_embeddings\": false, \"head_bias\": true, "
     "\"mixer\": {\"kind\": \"attention\", \"heads\": 3, \"head_dim\": 48, \"pos\": \"none\", \"bias\": true}}",
     0, 0, 0, 0},
    {"layernorm without bias, relu, rope interleaved, H·D = 2C, D 32",
     "{\"d_model\": 64, \"n_layers\": 2, \"norm_bias\": false, \"mlp\": {\"kind\": \"relu\"}, "
     "\"mixer\": {\"kind\": \"attention\", \"heads\": 4, \"head_dim\": 32, \"pos\": \"rope\", "
     "\"rope_layout\": \"interleaved\", \"rope_base\": 500}}", 1, 0, 0, 1},
    {"no MLP, one head of D 128 (kernel width 128), 3 layers",
     "{\"d_model\": 64, \"n_layers\": 3, \"mlp\": {\"kind\": \"none\"}, "
     "\"mixer\": {\"kind\": \"attention\", \"heads\": 1, \"head_dim\": 128, \"pos\": \"rope\"}}", 0, 0, 0, 0},
    // the autoencoder head (MAD's compression decoder): d_model's widths with layernorm; the KLA paper's [40, 24]
    // with rmsnorm and an untied head (the final norm and the head read 24)
    {"autoencoder head, layernorm", "{\"d_model\": 32, \"n_layers\": 1, \"head\": \"autoencoder\", \"mixer\": "
     "{\"kind\": \"attention\", \"heads\": 2}}", 0, 0, 0, 0},
    {"autoencoder head of widths 40, 24, rmsnorm, untied, gla",
     "{\"d_model\": 32, \"n_layers\": 1, \"head\": \"autoencoder\", \"ae_width1\": 40, \"ae_width2\": 24, "
     "\"norm\": \"rmsnorm\", \"tie_embeddings\": false, \"mixer\": {\"kind\": \"gla\", \"heads\": 2}}", 0, 0, 0, 1},
    // the position schemes: one small layer each, no training steps and one sequence where the batch adds nothing
    // (fox's F is per sequence), so they add little to the emulated test's time (decay on the logits is alibi's
    // bias with other slopes: sc_rope's case has it for the RoPE family)
#define SCHEME_(MIXER) "{\"d_model\": 32, \"n_layers\": 1, \"mixer\": {\"kind\": \"attention\", " MIXER "}}"
    {"alibi, 3 heads (slopes of a non-power-of-two), D 16",
     SCHEME_("\"heads\": 3, \"head_dim\": 16, \"pos\": \"alibi\""), 0, 1, 0, 1},
    {"fox, qkv/out biases, D 16", SCHEME_("\"heads\": 2, \"pos\": \"fox\", \"bias\": true, "
                                         "\"fgate_bias_init\": 1"), 0, 0, 0, 1},
    {"decayed_rope, post-softmax decay, 4 heads (1 without decay), D 12 (the kernels rotate one pair at a time)",
     SCHEME_("\"heads\": 4, \"head_dim\": 12, \"pos\": \"decayed_rope\", \"zero_decay_heads\": 1, "
             "\"damping\": 0.2"), 0, 1, 0, 1},
    {"rope interleaved, D 10 (one pair at a time)",
     SCHEME_("\"heads\": 2, \"head_dim\": 10, \"pos\": \"rope\", \"rope_layout\": \"interleaved\""), 0, 1, 0,
     1},
    {"sc_rope, post-softmax decay, interleaved, qk_norm, D 16",
     SCHEME_("\"heads\": 2, \"pos\": \"sc_rope\", \"rope_layout\": \"interleaved\", \"zero_decay_heads\": 0, "
             "\"damping\": 0.2, \"qk_norm\": true"), 0, 1, 0, 1},
    {"sc_rope, decay on the logits, 2 heads, D 32 (dq, dk rotated by the kernels, per head)",
     SCHEME_("\"heads\": 2, \"head_dim\": 32, \"pos\": \"sc_rope\", \"decay_mode\": \"logits\", "
             "\"zero_decay_heads\": 1"), 0, 1, 0, 1},
    // T 150 and 152: three key tiles, the window hides the first from the last query block and the last from the
    // first key block
    {"rope, window 40, qk_norm, T 150", SCHEME_("\"heads\": 2, \"pos\": \"rope\", \"window\": 40, "
                                                "\"qk_norm\": true"), 0, 1, 150, 1},
    {"fox, window 40, T 152 (a multiple of 4: F, lse and delta staged by cp.async)",
     SCHEME_("\"heads\": 2, \"pos\": \"fox\", \"window\": 40"), 0, 1, 152, 1},
    // selective_rope on attention: the rows of the projection turned before the permutation (and before qk_norm)
    {"pos none, selective_rope (low rank 16, conv 4), D 16",
     SCHEME_("\"heads\": 2, \"pos\": \"none\", \"selective_rope\": {\"enabled\": true}"), 0, 0, 0, 1},
    {"fox, qk_norm, selective_rope skip_conv, gate, D 16",
     SCHEME_("\"heads\": 2, \"pos\": \"fox\", \"qk_norm\": true, \"selective_rope\": {\"enabled\": true, "
             "\"skip_conv\": true, \"use_gate\": true}"), 0, 0, 0, 1},
#undef SCHEME_
    // the linear family (gpu/linear.cu): each option through one small layer, the hybrid with training steps
#define LIN_(MIXER) "{\"d_model\": 32, \"n_layers\": 1, \"mixer\": {" MIXER "}}"
    {"linear_attn, hadamard feature map (chunk 16: five chunks)",
     LIN_("\"kind\": \"linear_attn\", \"heads\": 2, \"chunk\": 16"), 0, 0, 0, 1},
    // the normaliser with elu + 1 (positive, so q . sum k stays away from 0), not with relu or hadamard: a row
    // whose q . sum k is at 0 gives an O(1) ratio out of any rounding (1e-10 is the only floor), so bf16 moved
    // the logits by 6e-1 (relu, on an H100) and 1.2 (hadamard, on the emulator)
    {"linear_attn, elu, rotate, normaliser", LIN_("\"kind\": \"linear_attn\", \"heads\": 2, "
                                                  "\"feature_map\": \"elu\", \"rotate\": true, "
                                                  "\"normalize\": true"), 0, 0, 0, 1},
    {"linear_attn, relu, rotate, chunk 8",
     LIN_("\"kind\": \"linear_attn\", \"heads\": 4, \"feature_map\": \"relu\", \"rotate\": true, "
          "\"chunk\": 8"), 1, 0, 0, 1},
    {"linear_attn, identity feature map", LIN_("\"kind\": \"linear_attn\", \"heads\": 2, "
                                               "\"feature_map\": \"identity\""), 0, 0, 0, 1},
    {"retnet, conv 4", LIN_("\"kind\": \"retnet\", \"heads\": 2, \"conv\": 4"), 0, 0, 0, 1},
    {"gla, rotate, no output gate, chunk 64", LIN_("\"kind\": \"gla\", \"heads\": 2, \"expand_k\": 1, "
                                                   "\"rotate\": true, \"output_gate\": false, \"chunk\": 64"),
     0, 0, 0, 1},
    // selective_rope (gpu/selrope.cu) on gla: the defaults (low rank, conv 4); full rank with the skip difference,
    // bias, gate and rfa temperatures; the conv's silu with the gate across T 200 (the angle sum in 3 segments)
    {"gla, selective_rope (low rank 16, conv 4)", LIN_("\"kind\": \"gla\", \"heads\": 2, \"expand_k\": 1, "
                                                     "\"selective_rope\": {\"enabled\": true}"), 0, 0, 0, 1},
    {"gla, selective_rope full rank, skip_conv, bias, gate, temp rfa",
     LIN_("\"kind\": \"gla\", \"heads\": 2, \"expand_k\": 1, \"selective_rope\": {\"enabled\": true, "
          "\"full_rank\": true, \"skip_conv\": true, \"use_bias\": true, \"use_gate\": true, "
          "\"temp_type\": \"rfa\", \"temp_theta\": 0.5}"), 0, 0, 0, 1},
    {"gla, selective_rope conv + silu, gate, rank 4, T 200",
     LIN_("\"kind\": \"gla\", \"heads\": 2, \"selective_rope\": {\"enabled\": true, \"conv_act\": \"silu\", "
          "\"use_gate\": true, \"phi_proj_rank\": 4}"), 0, 0, 200, 1},
    {"hybrid: gla (conv 4) over attention, 2 layers, training steps",
     "{\"d_model\": 32, \"n_layers\": 2, \"norm\": \"rmsnorm\", \"mlp\": {\"kind\": \"swiglu\"}, "
     "\"mixer\": {\"kind\": \"gla\", \"heads\": 2, \"conv\": 4}, "
     "\"layers\": [{\"at\": \"1\", \"mixer\": {\"kind\": \"attention\", \"heads\": 2}}]}", 0, 0, 0, 0},
    {"gsa, swish, 8 slots, RMSNorm (chunk 16)", LIN_("\"kind\": \"gsa\", \"heads\": 2, \"num_slots\": 8"), 0, 0, 0, 1},
    {"gsa, relu, conv 4, no norm, 12 slots, chunk 64",
     LIN_("\"kind\": \"gsa\", \"heads\": 2, \"num_slots\": 12, \"feature_map\": \"relu\", \"conv\": 4, "
          "\"norm\": false, \"chunk\": 64"), 1, 0, 0, 1},
    {"gsa, identity feature map, 4 heads, chunk 8",
     LIN_("\"kind\": \"gsa\", \"heads\": 4, \"num_slots\": 6, \"feature_map\": \"identity\", "
          "\"chunk\": 8"), 0, 0, 0, 1},
#undef LIN_
    // the delta rule (gpu/deltanet.cu): each option group through one small layer, chunks of 8, 16, 32 and 64 across
    // T 70 (the last chunk partial); the hybrid with training steps
#define DELTA_(MIXER) "{\"d_model\": 32, \"n_layers\": 1, \"mixer\": {" MIXER "}}"
    {"deltanet, conv 4, chunk 16", DELTA_("\"kind\": \"deltanet\", \"heads\": 2, \"chunk\": 16"), 0, 0, 0, 1},
    {"deltanet, no conv, use_gate, allow_neg_eigval, expand_k 2, chunk 64",
     DELTA_("\"kind\": \"deltanet\", \"heads\": 2, \"conv\": 0, \"use_gate\": true, "
            "\"allow_neg_eigval\": true, \"expand_k\": 2, \"chunk\": 64"), 0, 0, 0, 1},
    {"gated_deltanet, conv 4, output gate, expand_v 2 (defaults), chunk 32",
     DELTA_("\"kind\": \"gated_deltanet\", \"heads\": 2"), 0, 0, 0, 1},
    {"gated_deltanet, conv 1 (none), no gate, allow_neg_eigval, A and dt init ranges, 4 heads, chunk 8",
     DELTA_("\"kind\": \"gated_deltanet\", \"heads\": 4, \"conv\": 1, \"use_gate\": false, "
            "\"allow_neg_eigval\": true, \"A_init_lo\": 1, \"A_init_hi\": 4, \"dt_min\": 0.01, "
            "\"dt_max\": 0.2, \"dt_init_floor\": 0.02, \"chunk\": 8"), 0, 0, 0, 1},
    {"gated_deltanet, selective_rope (low rank 16, conv 4)",
     DELTA_("\"kind\": \"gated_deltanet\", \"heads\": 2, \"chunk\": 16, \"selective_rope\": {\"enabled\": true}"),
     0, 0, 0, 1},
    {"gated_deltanet, selective_rope full rank, no conv over phi, bias, temp_max 2",
     DELTA_("\"kind\": \"gated_deltanet\", \"heads\": 2, \"chunk\": 16, \"selective_rope\": {\"enabled\": true, "
            "\"full_rank\": true, \"conv\": false, \"use_bias\": true, \"temp_max\": 2}"), 0, 0, 0, 1},
    {"hybrid: gated_deltanet (conv 4) over attention, 2 layers, training steps",
     "{\"d_model\": 32, \"n_layers\": 2, \"norm\": \"rmsnorm\", \"mlp\": {\"kind\": \"swiglu\"}, "
     "\"mixer\": {\"kind\": \"gated_deltanet\", \"heads\": 2, \"chunk\": 16}, "
     "\"layers\": [{\"at\": \"1\", \"mixer\": {\"kind\": \"attention\", \"heads\": 2}}]}", 0, 0, 0, 0},
#undef DELTA_
    // the state-space mixers (gpu/mamba2.cu, gpu/mlstm.cu): each option group through one small layer (a fused
    // block, their default, unless said), the hybrid with training steps. Closest to the tolerance: the per-head
    // gate biases' gradients in bf16, each a sum over every position (as fox's gate bias): mamba2's dt_bias 2.3e-2
    // in the hybrid, mlstm's igate_b 1.6e-2 in the no-conv case (3.2e-2 on other draws)
#define SSM_(MIXER) "{\"d_model\": 32, \"n_layers\": 1, \"mixer\": {" MIXER "}}"
    {"mamba2, 2 groups of 2 heads, d_state 16, chunk 16 (five chunks)",
     SSM_("\"kind\": \"mamba2\", \"d_state\": 16, \"head_dim\": 16, \"n_groups\": 2, \"chunk\": 16"), 0, 0,
     0, 1},
    {"mamba2, expand 1, conv 3 without bias, one group, chunk 64 (64 + 6), prenorm block with an MLP",
     "{\"d_model\": 32, \"n_layers\": 1, \"block\": \"prenorm\", \"mixer\": {\"kind\": \"mamba2\", "
     "\"expand\": 1, \"d_state\": 8, \"head_dim\": 8, \"conv\": 3, \"conv_bias\": false, "
     "\"rescale_prenorm_residual\": false}}", 0, 0, 0, 1},
    {"mlstm, 2 heads of 32, conv 4, blocks of 4, chunk 16",
     SSM_("\"kind\": \"mlstm\", \"heads\": 2, \"round_to\": 16, \"chunk\": 16"), 0, 0, 0, 1},
    {"mlstm, no conv, 4 heads of 12, blocks of 8, chunk 64 (64 + 6)",
     SSM_("\"kind\": \"mlstm\", \"heads\": 4, \"proj_factor\": 1.5, \"round_to\": 1, \"conv\": 0, "
          "\"qkv_blocksize\": 8"), 0, 0, 0, 1},
    {"hybrid: mamba2 (fused) over attention, 2 layers, training steps",
     "{\"d_model\": 32, \"n_layers\": 2, \"norm\": \"rmsnorm\", \"mlp\": {\"kind\": \"swiglu\"}, "
     "\"mixer\": {\"kind\": \"mamba2\", \"d_state\": 16, \"head_dim\": 16, \"chunk\": 32}, "
     "\"layers\": [{\"at\": \"1\", \"mixer\": {\"kind\": \"attention\", \"heads\": 2}}]}", 0, 0, 0, 0},
#undef SSM_
    // BLA (gpu/bla.cu): the two passes through 2M - 1 slots with the visible-slot softmax between them; with and
    // without the slots' decay (its log-decays can be positive: 1 - c reaches 1.22), the fused short conv
#define BLA_(MIXER) "{\"d_model\": 32, \"n_layers\": 1, \"mixer\": {" MIXER "}}"
    {"bla, 4 modes (7 slots), resolution 2, no decay, chunk 16, B 1 x T 45 (buffers not a multiple of 64 floats)",
     BLA_("\"kind\": \"bla\", \"heads\": 2, \"modes\": 4, \"chunk\": 16"), 0, 1, 45, 1},
    {"bla, decay, period 7 (sliding window), conv 4, expand_v 2, chunk 64",
     BLA_("\"kind\": \"bla\", \"heads\": 2, \"modes\": 4, \"period\": 7, \"decay\": true, \"conv\": 4, "
          "\"expand_v\": 2, \"chunk\": 64"), 0, 0, 0, 1},
    {"bla, decay, 6 modes, period 40 (side lobes: 1 - c above 1), chunk 8",
     BLA_("\"kind\": \"bla\", \"heads\": 4, \"modes\": 6, \"period\": 40, \"decay\": true, \"chunk\": 8"),
     0, 0, 0, 1},
#undef BLA_
    // KLA (gpu/kla.cu): the fused block around the Kalman scan (gpu/kalman.cu); plain sensors with OU, mamba sensors
    // with ZOH and no qk_norm, no process noise (the Table 6 ablation) without gate or skip, 32 slots
#define KLA_(MIXER) "{\"d_model\": 32, \"n_layers\": 1, \"mixer\": {" MIXER "}}"
    {"kla, plain sensors, OU, 16 slots, chunk 16", KLA_("\"kind\": \"kla\", \"chunk\": 16"), 0, 0, 0, 1},
    {"kla, mamba sensors of rank 6, ZOH, no qk_norm, expand 1.5, conv 3",
     KLA_("\"kind\": \"kla\", \"sensors\": \"mamba\", \"var_rank\": 6, \"discretization\": \"zoh\", "
          "\"qk_norm\": false, \"expand\": 1.5, \"conv\": 3, \"d_state\": 8"), 0, 0, 0, 1},
    {"kla, no process noise, no gate, no skip, 32 slots, chunk 64",
     KLA_("\"kind\": \"kla\", \"process_noise\": false, \"gate\": false, \"skip\": false, \"d_state\": 32"),
     0, 0, 0, 1},
#undef KLA_
};


typedef struct Prec {
    const char *name;
    double tol;
    double kink_slack;  // the tolerance factor of a kinked case's gradients and moments (see Case)
    // Adam's first moments after the 6 steps, in units of the gradients' tolerance: they average 6 gradients taken
    // at parameters that drift apart step by step. bf16 drifts the most: the rmsnorm case's blocks.1.ln1.weight
    // differs by 2.08e-1 in the emulator, 7x its tolerance.
    double mom;
} Prec;
#define ALL_CASES_ (int)(sizeof CASES_ / sizeof CASES_[0])  // every precision runs every case
#ifdef SEQ_GPU_EMULATE
// the kernels on the CPU (tests/gpu/emu/): cuBLAS's emulation has no TF32; bf16 (its GemmEx rounds the operands as
// the GPU does) on every case: its attention kernels load their operands with ldmatrix, fp32's without
static const Prec PRECS_[] = {{"fp32", 2e-4, 1, 5}, {"bf16", 3e-2, 10, 10}};
#else
static const Prec PRECS_[] = {{"fp32", 2e-4, 1, 5}, {"tf32", 3e-2, 10, 5}, {"bf16", 3e-2, 10, 10}};
#endif

static unsigned long long rng_ = 88172645463325252ull;
static double uniform_(void) {  // xorshift64, [0, 1)
    rng_ ^= rng_ << 13, rng_ ^= rng_ >> 7, rng_ ^= rng_ << 17;
    return (double)(rng_ >> 11) / 9007199254740992.0;
}
// each case draws from its own stream, keyed by its name and precision (FNV-1a of the two), so adding a case does
// not change the parameters and batches of the others
static void rng_seed_(const char *a, const char *b) {
    unsigned long long h = 14695981039346656037ull;
    for (const char *s = a; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    for (const char *s = b; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    rng_ = h ? h : 88172645463325252ull;  // xorshift's state must not be 0
}

// max |a - b| / max |b| over n floats (0/0 = 0)
static double rel_err_(const float *a, const float *b, size_t n) {
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double x = fabs((double)a[i] - b[i]);
        if (!(x <= d)) d = x;  // NaN propagates
        if (fabs(b[i]) > s) s = fabs(b[i]);
    }
    return s > 0 ? d / s : d;
}

// |a - b|_2 / |b|_2 over n floats (0/0 = 0): a kinked case's gradients (see Case)
static double l2_rel_err_(const float *a, const float *b, size_t n) {
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double x = (double)a[i] - b[i];
        d += x * x;
        s += (double)b[i] * b[i];
    }
    return s > 0 ? sqrt(d / s) : sqrt(d);
}

static void batch_(int *in, int *tg, int n) {
    for (int i = 0; i < n; i++) {
        in[i] = (int)(uniform_() * V_);
        tg[i] = uniform_() < 0.1 ? -100 : (int)(uniform_() * V_);
    }
}

static int optim_make_(Optim *o, const Model *m) {
    OptimGroup g = optim_group_default();
    g.patterns[0] = "blocks.*.mixer.*";
    g.lr_mult = 0.5f;
    g.weight_decay = 0.2f;
    g.clip = 0.05f;  // small enough to bind: the local clip runs every step
    OptimConfig oc = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                      .grad_clip = 0.5f, .groups = &g, .n_groups = 1};
    Err e = {{0}};
    int rc = optim_init(o, &m->pt, &oc, &e);
    CHECK(rc == 0, "optimizer (%s)", e.msg);
    return rc;
}

// 6 AdamW steps on fresh batches, the same on both devices: losses, gradient norms, the updates and Adam's first
// moments
static void train_steps_(const Case *c, const Prec *p, Model *m, Optim *o, Gpu *g, int *in, int *tg, int B, int T,
                         double gtol) {
    int BT = B * T;
    size_t N = m->pt.numel;
    Err e = {{0}};
    float *p0 = malloc(N * sizeof(float));
    memcpy(p0, m->params, N * sizeof(float));
    double worst_loss = 0, worst_norm = 0;
    for (int s = 0; s < 6; s++) {
        batch_(in, tg, BT);
        int n_sup = 0;
        for (int i = 0; i < BT; i++) n_sup += tg[i] != -100;
        model_zero_grad(m);
        CHECK(model_forward_backward(m, in, tg, B, T, n_sup, &e) == 0, "model_forward_backward (%s)", e.msg);
        double lc = m->loss, lg;
        int sg;
        gpu_zero_grad(g);
        CHECK(gpu_forward_backward(g, in, tg, B, T, n_sup, &lg, &sg, &e) == 0, "gpu step (%s)", e.msg);
        double nc = optim_clip_grads(o, m->grads);
        long t_before = o->t;
        optim_step(o, m->params, m->grads, 3e-3f, 0.9f);
        o->t = t_before;  // the GPU's update is the same update: same t
        double ng = gpu_clip_grads(g, o);
        gpu_optim_step(g, o, 3e-3f, 0.9f);
        double dl = fabs(lg - lc) / fabs(lc), dn = fabs(ng - nc) / nc;
        if (dl > worst_loss) worst_loss = dl;
        if (dn > worst_norm) worst_norm = dn;
    }
    CHECK(worst_loss <= p->tol * 0.1, "%s, %s: 6 training steps' losses agree (worst rel %.2e)", c->name, p->name,
          worst_loss);
    CHECK(worst_norm <= p->tol, "%s, %s: their gradient norms agree (worst rel %.2e)", c->name, p->name, worst_norm);
    float *p_gpu = malloc(N * sizeof(float)), *m_gpu = malloc(N * sizeof(float)), *v_gpu = malloc(N * sizeof(float));
    gpu_download(g, p_gpu, m_gpu, v_gpu);
    // the updates, |(p_gpu - p0) - (p_cpu - p0)| / |p_cpu - p0| in L2 over all tensors: Adam normalises each
    // element, so one whose gradient is at the rounding level may step either way on the two devices; the L2
    // ratio weighs such elements by their (tiny) share, while a wrong update would make it O(1)
    double dd = 0, du = 0, wm = 0;
    for (int k = 0; k < m->pt.n; k++) {
        const ParamTensor *t = &m->pt.t[k];
        for (size_t i = t->offset; i < t->offset + t->numel; i++) {
            double d = (double)p_gpu[i] - m->params[i], u = (double)m->params[i] - p0[i];
            dd += d * d;
            du += u * u;
        }
        double rm = rel_err_(m_gpu + t->offset, o->m + t->offset, t->numel);
        if (!(rm <= wm)) wm = rm;
    }
    double wp = du > 0 ? sqrt(dd / du) : sqrt(dd);
    CHECK(wp <= 10 * p->tol, "%s, %s: the 6 steps' parameter updates agree (L2 rel %.2e <= %.0e)", c->name, p->name, wp,
          10 * p->tol);
    CHECK(wm <= p->mom * gtol, "%s, %s: Adam first moments agree (worst rel %.2e <= %.1e)", c->name, p->name, wm,
          p->mom * gtol);
    free(p0);
    free(p_gpu);
    free(m_gpu);
    free(v_gpu);
}

// 1 when the build has no GPU to run on (the caller skips)
static int run_case_(const Case *c, const Prec *p) {
    int B = c->B ? c->B : B_, T = c->T ? c->T : T_;
    rng_seed_(c->name, p->name);
    Model m;
    if (!model_json_build_v(c->json, &m, V_, 17)) return 0;
    // every parameter moved off its init, so biases and norm weights matter
    for (size_t i = 0; i < m.pt.numel; i++) m.params[i] += (float)(0.05 * (uniform_() - 0.5));
    Optim o;
    if (optim_make_(&o, &m)) { model_free(&m); return 0; }
    Err e = {{0}};
    Gpu *g;
    if (gpu_open(&g, &m, &o, p->name, &e) != 0) {
        int none = strstr(e.msg, "no CUDA device") != NULL;
        if (!none) CHECK(0, "%s, %s: gpu_open (%s)", c->name, p->name, e.msg);
        optim_free(&o);
        model_free(&m);
        return none;
    }
    int BT = B * T;
    int *in = malloc(BT * sizeof(int)), *tg = malloc(BT * sizeof(int));
    batch_(in, tg, BT);
    size_t NL = (size_t)BT * V_, N = m.pt.numel;
    float *logits_gpu = malloc(NL * sizeof(float)), *logits_cpu = malloc(NL * sizeof(float));
    float *grads_gpu = malloc(N * sizeof(float));
    // forward: logits and loss
    double loss_gpu, loss_cpu;
    int sup_gpu;
    CHECK(gpu_forward(g, in, tg, B, T, logits_gpu, &loss_gpu, &sup_gpu, &e) == 0, "gpu_forward (%s)", e.msg);
    CHECK(model_forward(&m, in, tg, B, T, &e) == 0, "model_forward (%s)", e.msg);
    loss_cpu = m.loss;
    memcpy(logits_cpu, m.logits, NL * sizeof(float));
    CHECK(sup_gpu == m.n_supervised, "%s, %s: supervised positions %d = %d", c->name, p->name, sup_gpu, m.n_supervised);
    double el = rel_err_(logits_gpu, logits_cpu, NL);
    CHECK(el <= p->tol, "%s, %s: logits agree (rel err %.2e <= %.0e)", c->name, p->name, el, p->tol);
    CHECK_NEAR(loss_gpu, loss_cpu, 0, p->tol * 0.1, "%s, %s: loss", c->name, p->name);
    // backward: every tensor's gradient
    model_zero_grad(&m);
    model_backward(&m, m.n_supervised);
    gpu_zero_grad(g);
    double l2;
    CHECK(gpu_forward_backward(g, in, tg, B, T, sup_gpu, &l2, &sup_gpu, &e) == 0, "gpu_forward_backward (%s)", e.msg);
    CHECK(l2 == loss_gpu, "%s, %s: forward_backward's loss is the forward's (%.9g, %.9g)", c->name, p->name, l2,
          loss_gpu);
    gpu_download_grads(g, grads_gpu);
    double gtol = p->tol * (c->kinked ? p->kink_slack : 1.0);
    double worst = 0;
    const char *worst_name = "";
    int bad = 0;
    for (int k = 0; k < m.pt.n; k++) {
        const ParamTensor *t = &m.pt.t[k];
        double r = c->kinked && p->kink_slack > 1 ? l2_rel_err_(grads_gpu + t->offset, m.grads + t->offset, t->numel)
                                                  : rel_err_(grads_gpu + t->offset, m.grads + t->offset, t->numel);
        if (!(r <= gtol)) {
            bad++;
            printf("# %s, %s: gradient of %s: rel err %.3e\n", c->name, p->name, t->name, r);
        }
        if (!(r <= worst)) worst = r, worst_name = t->name;
    }
    CHECK(!bad, "%s, %s: all %d gradients agree (worst %.2e, %s; tol %.1e)", c->name, p->name, m.pt.n, worst,
          worst_name, gtol);
    // the same step again: the same bits
    float *grads2 = malloc(N * sizeof(float));
    gpu_zero_grad(g);
    CHECK(gpu_forward_backward(g, in, tg, B, T, sup_gpu, &l2, &sup_gpu, &e) == 0, "gpu_forward_backward (%s)", e.msg);
    gpu_download_grads(g, grads2);
    int same = 1;
    for (int k = 0; k < m.pt.n; k++)
        same &= !memcmp(grads2 + m.pt.t[k].offset, grads_gpu + m.pt.t[k].offset, m.pt.t[k].numel * sizeof(float));
    CHECK(same, "%s, %s: a repeated step gives bit-identical gradients", c->name, p->name);
    free(grads2);
    if (!c->grads_only) train_steps_(c, p, &m, &o, g, in, tg, B, T, gtol);
    gpu_close(g);
    free(in);
    free(tg);
    free(logits_gpu);
    free(logits_cpu);
    free(grads_gpu);
    optim_free(&o);
    model_free(&m);
    return 0;
}

// evaluation on the GPU (gpu_forward_eval, what eval/forward.h runs seqeval's and the trainer's evaluations on):
// a backend opened without an optimizer, per-position losses and predictions against the host's at several
// (B,T) shapes, one a single window of EVAL_LONG_ tokens, with and without targets; and the device memory: the
// activations re-sized for each shape replace the old ones (the same shape after a round holds the same bytes).
// A prediction may differ from the host's only at a near-tie: where the host's logit of the GPU's pick is within
// the tolerance (times the row's largest magnitude) of the host's largest.
#ifdef SEQ_GPU_EMULATE
// the emulator runs attention's O(T^2) work on one core: 600 tokens (ten partial 64-row tiles) check the same
// indexing in a twentieth of 4096's time, and only fp32 runs it (CI's time)
#define EVAL_LONG_ 600
#define EVAL_PRECS_ 1
#else
#define EVAL_LONG_ 4096
#define EVAL_PRECS_ (sizeof PRECS_ / sizeof PRECS_[0])
#endif
// the emulator counts the bytes cudaMalloc holds exactly; a GPU's cudaMemGetInfo moves in pages (2 MiB), so there a
// difference below 4 MiB passes (a leaked activation arena of the long window, 39 MB here, still fails)
#ifdef SEQ_GPU_EMULATE
#define MEM_SLACK_ 0
#else
#define MEM_SLACK_ ((size_t)4 << 20)
#endif
static int mem_near_(size_t a, size_t b) { return (a > b ? a - b : b - a) <= MEM_SLACK_; }
static int eval_case_(const Prec *p) {
    Model m;
    if (!model_json_build_v(CASES_[0].json, &m, V_, 29)) return 0;
    for (size_t i = 0; i < m.pt.numel; i++) m.params[i] += (float)(0.05 * (uniform_() - 0.5));
    Err e = {{0}};
    Gpu *g;
    if (gpu_open(&g, &m, NULL, p->name, &e) != 0) {
        int none = strstr(e.msg, "no CUDA device") != NULL;
        if (!none) CHECK(0, "eval, %s: gpu_open without an optimizer (%s)", p->name, e.msg);
        model_free(&m);
        return none;
    }
    size_t held = gpu_mem_used(g), N = m.pt.numel, tables = (size_t)m.pt.n * OPTIM_COEF * sizeof(float) + 4096;
    size_t shadow = strcmp(p->name, "bf16") ? 0 : N * 2;  // bf16: the bfloat16 copy of the parameters
    CHECK(held <= 2 * N * sizeof(float) + shadow + tables + MEM_SLACK_, "eval, %s: a backend without an optimizer holds "
          "parameters, gradients (and bf16's copy) only (%zu bytes for %zu parameters)", p->name, held, N);
    static const int shapes[][2] = {{B_, T_}, {1, EVAL_LONG_}, {B_, T_}, {1, EVAL_LONG_}, {B_, T_}};
    int n_shapes = sizeof shapes / sizeof shapes[0];
    size_t mem[5];
    int *in = malloc(EVAL_LONG_ * sizeof(int)), *tg = malloc(EVAL_LONG_ * sizeof(int));
    int *pred = malloc(EVAL_LONG_ * sizeof(int)), *pred2 = malloc(EVAL_LONG_ * sizeof(int));
    float *losses = malloc(EVAL_LONG_ * sizeof(float));
    for (int k = 0; k < n_shapes; k++) {
        int B = shapes[k][0], T = shapes[k][1], BT = B * T, sup;
        batch_(in, tg, BT);
        double loss;
        CHECK(gpu_forward_eval(g, in, tg, B, T, losses, pred, &loss, &sup, &e) == 0, "gpu_forward_eval (%s)", e.msg);
        mem[k] = gpu_mem_used(g);
        CHECK(model_forward(&m, in, tg, B, T, &e) == 0, "model_forward (%s)", e.msg);
        double el = rel_err_(losses, m.losses, (size_t)BT);
        CHECK(el <= p->tol, "eval, %s, B %d x T %d: per-position losses agree (rel err %.2e <= %.0e)", p->name, B, T, el,
              p->tol);
        CHECK_NEAR(loss, m.loss, 0, p->tol * 0.1, "eval, %s, B %d x T %d: mean loss", p->name, B, T);
        CHECK(sup == m.n_supervised, "eval, %s: supervised positions %d = %d", p->name, sup, m.n_supervised);
        int differ = 0, far = 0;
        for (int i = 0; i < BT; i++) {
            int c = model_argmax(&m, (size_t)i);
            if (pred[i] == c) continue;
            differ++;
            const float *row = m.logits + (size_t)i * V_;
            double mx = 0;
            for (int v = 0; v < V_; v++) mx = fmax(mx, fabs(row[v]));
            far += !(row[c] - row[pred[i]] <= p->tol * mx);
        }
        CHECK(far == 0, "eval, %s, B %d x T %d: predictions are the host's argmax (%d of %d differ, %d beyond a near-tie)",
              p->name, B, T, differ, BT, far);
        // logits only: the same predictions, no losses
        CHECK(gpu_forward_eval(g, in, NULL, B, T, losses, pred2, &loss, &sup, &e) == 0, "gpu_forward_eval (%s)", e.msg);
        CHECK(!memcmp(pred, pred2, (size_t)BT * sizeof(int)) && sup == 0 && loss == 0 && losses[0] == 0,
              "eval, %s, B %d x T %d: without targets the same predictions, no losses", p->name, B, T);
    }
    // the first round may grow what cuBLAS keeps; from the second on every shape holds what it held a round before
    CHECK(mem_near_(mem[3], mem[1]) && mem_near_(mem[4], mem[2]), "eval, %s: re-sized activations free the old ones (bytes in use at "
          "T %d: %zu then %zu; at T %d: %zu then %zu)", p->name, EVAL_LONG_, mem[1], mem[3], T_, mem[2], mem[4]);
    CHECK(mem[1] > mem[0], "eval, %s: the long window takes more memory (%zu > %zu bytes)", p->name, mem[1], mem[0]);
    // the argmax's rule where it matters: exact ties and a NaN. The (tied) embedding all zero except row 0: every
    // logit is exactly 0 but logit 0, which is 0 (all tied: the first index wins) or NaN (nothing compares
    // greater: 0 again, where skipping the NaN would give 1). No input is token 0.
    const ParamTensor *wte = &m.pt.t[m.k_wte];
    for (int nan = 0; nan < 2; nan++) {
        memset(m.params + wte->offset, 0, wte->numel * sizeof(float));
        for (int c = 0; c < m.C; c++) m.params[wte->offset + c] = nan ? NAN : 0.0f;
        gpu_upload(g, m.params, NULL, NULL);
        for (int i = 0; i < B_ * T_; i++) in[i] = 1 + i % (V_ - 1);
        int sup, host0 = 1, gpu0 = 1;
        double loss;
        CHECK(gpu_forward_eval(g, in, NULL, B_, T_, NULL, pred, &loss, &sup, &e) == 0, "gpu_forward_eval (%s)", e.msg);
        CHECK(model_forward(&m, in, NULL, B_, T_, &e) == 0, "model_forward (%s)", e.msg);
        for (int i = 0; i < B_ * T_; i++) host0 &= model_argmax(&m, (size_t)i) == 0, gpu0 &= pred[i] == 0;
        CHECK(host0 && gpu0, "eval, %s: logits all 0%s: every prediction is 0 (host %d, GPU %d)", p->name,
              nan ? " but a NaN logit 0" : "", host0, gpu0);
    }
    gpu_close(g);
    free(in);
    free(tg);
    free(pred);
    free(pred2);
    free(losses);
    model_free(&m);
    return 0;
}

// what the GPU refuses, and how it says so
static void refusals_(void) {
    static const struct {
        const char *json, *want;
    } R[] = {
        {"{\"d_model\": 32, \"n_layers\": 1, \"mixer\": {\"kind\": \"attention\", \"heads\": 2, \"pos\": \"path\"}}",
         "attention pos \"path\" (PaTH) has no GPU kernels yet"},
        {"{\"d_model\": 32, \"n_layers\": 1, \"mixer\": {\"kind\": \"attention\", \"heads\": 2, "
         "\"pos\": \"path_fox\"}}",
         "attention pos \"path_fox\" (PaTH) has no GPU kernels yet"},
        {"{\"d_model\": 32, \"n_layers\": 1, \"mixer\": {\"kind\": \"attention\", \"heads\": 2, \"qk_norm\": true, "
         "\"qk_norm_scales\": \"per_head\"}}",
         "attention qk_norm_scales \"per_head\" has no GPU kernels yet"},
        {"{\"d_model\": 32, \"n_layers\": 1, \"mixer\": {\"kind\": \"attention\", \"heads\": 2, \"qk_norm\": true, "
         "\"qk_norm_eps\": 1e-5}}",
         "attention qk_norm_eps 1e-05 has no GPU kernels yet"},
        {"{\"d_model\": 32, \"n_layers\": 2, \"layers\": [{\"at\": \"1\", \"mixer\": {\"kind\": \"rfa\"}}]}",
         "layer 1: mixer \"rfa\" has no GPU kernels yet"},
        {"{\"d_model\": 32, \"n_layers\": 1, \"mixer\": {\"kind\": \"kla\", \"d_state\": 100}}",
         "layer 0: kla d_state 100"},
        {"{\"d_model\": 32, \"n_layers\": 2, \"layers\": [{\"at\": \"0\", \"mixer\": {\"kind\": \"mamba\"}}]}",
         "layer 0: mixer \"mamba\" has no GPU kernels yet (model.mixer.kind or model.layers"},
        {"{\"d_model\": 32, \"n_layers\": 1, \"mixer\": {\"kind\": \"mamba2\", \"head_dim\": 16, \"chunk\": 128}}",
         "layer 0: mamba2 chunk 128"},
        {"{\"d_model\": 32, \"n_layers\": 1, \"mixer\": {\"kind\": \"mlstm\", \"chunk\": 100}}",
         "layer 0: mlstm chunk 100"},
        {"{\"d_model\": 32, \"n_layers\": 1, \"mixer\": {\"kind\": \"linear_attn\", \"chunk\": 128}}",
         "layer 0: linear_attn chunk 128"},
        {"{\"d_model\": 32, \"n_layers\": 1, \"mixer\": {\"kind\": \"gsa\", \"chunk\": 65}}", "layer 0: gsa chunk 65"},
        {"{\"d_model\": 32, \"n_layers\": 1, \"mixer\": {\"kind\": \"bla\", \"chunk\": 80}}", "layer 0: bla chunk 80"},
        {"{\"d_model\": 32, \"n_layers\": 1, \"mixer\": {\"kind\": \"deltanet\", \"chunk\": 128}}",
         "layer 0: deltanet chunk 128"},
        {"{\"d_model\": 32, \"n_layers\": 1, \"mixer\": {\"kind\": \"gated_deltanet\", \"heads\": 1, "
         "\"expand_k\": 16}}",
         "layer 0: gated_deltanet key head size 512"},
        {"{\"d_model\": 64, \"n_layers\": 1, \"mixer\": {\"kind\": \"attention\", \"heads\": 1, \"head_dim\": 256}}",
         "head_dim 256"},
    };
    for (size_t i = 0; i < sizeof R / sizeof R[0]; i++) {
        Model m;
        if (!model_json_build(R[i].json, &m, 3)) continue;
        Err e = {{0}};
        CHECK(gpu_check_model(&m, &e) != 0, "refused: %s", R[i].want);
        CHECK_CONTAINS(e.msg, R[i].want, "the refusal names it");
        model_free(&m);
    }
    Model m;
    if (model_json_build(CASES_[0].json, &m, 3)) {
        Err e = {{0}};
        CHECK(gpu_check_model(&m, &e) == 0, "accepted: %s (%s)", CASES_[0].name, e.msg);
        Optim o;
        if (!optim_make_(&o, &m)) {
            Gpu *g = NULL;
            CHECK(gpu_open(&g, &m, &o, "fp16", &e) != 0, "run.precision fp16 is refused");
            CHECK_CONTAINS(e.msg, "fp16", "the refusal names fp16");
            optim_free(&o);
        }
        model_free(&m);
    }
}

int main(void) {
    refusals_();
#ifdef SEQ_GPU_EMULATE
    printf("# the GPU backend's kernels emulated on the CPU (tests/gpu/emu): fp32 and bf16; tf32 needs a GPU\n");
#endif
    for (size_t p = 0; p < sizeof PRECS_ / sizeof PRECS_[0]; p++)
        for (int c = 0; c <= ALL_CASES_; c++)
            if (c < ALL_CASES_ ? run_case_(&CASES_[c], &PRECS_[p]) : p < EVAL_PRECS_ && eval_case_(&PRECS_[p])) {
                printf("skipped - GPU parity: no CUDA device on this machine (the refusal checks above ran)\n");
                int rc = test_summary();
                return rc ? rc : 77;
            }
    return test_summary();
}
