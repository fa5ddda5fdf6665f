/*
 * The `attention` mixer's options after ops->check (mixers/attention.c documents the mixer). Shared with its
 * GPU side (gpu/attention.cu), which reads the same resolved options and tensor indices.
 */
#ifndef SEQ_MIXERS_ATTENTION_H
#define SEQ_MIXERS_ATTENTION_H

#include "core/config.h"
#include "mixers/selrope.h"

#define ATT_MAX_HEADS 64
#define ATT_MAX_HALF 256  // head_dim / 2

enum { POS_NONE, POS_ROPE, POS_ALIBI, POS_FOX, POS_DECAYED_ROPE, POS_SC_ROPE, POS_PATH, POS_PATH_FOX, POS_COUNT_ };

typedef struct AttentionOpts {
    // from the config
    int heads, head_dim, bias, qk_norm, window;
    char pos[CFG_STR_MAX], rope_layout[CFG_STR_MAX], decay_mode[CFG_STR_MAX];
    double rope_base, damping, fgate_bias_init, init_std;
    int zero_decay_heads, path_rank, path_chunk;
    double qk_norm_eps;
    char qk_norm_scales[CFG_STR_MAX];
    SelRopeOpts sr;  // selective_rope (mixers/selrope.h), with pos none or fox
    // derived by check
    int H, D, HD, pos_kind, layout, decay_logits, path, fgate, R;  // R = the resolved path rank
    int qn_per_head;  // qk_norm scales: (H, D), one set per head, instead of (D) shared
    int k_wqkv, k_bqkv, k_wo, k_bo, k_qn, k_kn, k_fw, k_fb;  // tensor indices (-1 = absent)
    int k_pw1, k_pw2, k_pconv, k_pbw, k_pbb;                 // path: w projection(s), w conv, beta projection
    float slopes[ATT_MAX_HEADS];                  // alibi slopes or decays on logits
    float decays[ATT_MAX_HEADS];                  // mu_h
    float freqs[ATT_MAX_HEADS * ATT_MAX_HALF];    // (H, D/2) sc_rope spectrum
} AttentionOpts;

#endif
