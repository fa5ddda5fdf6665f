/*
 * Rotary position embedding (RoPE) on a (B,T,NH,HS) tensor: row (b,t) holds NH heads of HS channels
 * each, as q and k come out of a projection. Within a head, HS/2 channel pairs (x0, x1) are rotated by
 * the angle pos * w_i, pos = pos0 + t:
 *
 *   y0 = x0 cos(pos w_i) - x1 sin(pos w_i)
 *   y1 = x0 sin(pos w_i) + x1 cos(pos w_i)
 *
 * Pairing layouts (i in [0, HS/2)):
 *   ROTARY_INTERLEAVED   pair i = channels (2i, 2i+1)        GPT-J / original RoFormer
 *   ROTARY_HALF          pair i = channels (i, i + HS/2)     GPT-NeoX / Llama (Hugging Face)
 *
 * Frequencies: w_i = base^(-2i/HS), the same for every head, unless cfg.freqs gives an explicit
 * (NH, HS/2) table (a mixer's own spectrum, e.g. one spectrum split across heads). Angles are formed
 * in double and only cos/sin are rounded to float, so positions of 8192 and beyond keep float accuracy
 * (a float angle would already be off by ~5e-4 rad there).
 *
 * pos0 is the position of the first token, so decoding one token at a time with pos0 = t gives the
 * same rows as the full-sequence call. HS must be even.
 *
 * rotary_forward/rotary_backward build their cos/sin table per call. Callers that rotate several
 * tensors with the same positions (q and k) can build a RotaryTable once and use the *_table variants.
 */
#ifndef SEQ_ROTARY_H
#define SEQ_ROTARY_H

enum { ROTARY_INTERLEAVED = 0, ROTARY_HALF = 1 };

#define ROTARY_BASE_DEFAULT 10000.0f

typedef struct RotaryCfg {
    int layout;             // ROTARY_INTERLEAVED or ROTARY_HALF
    float base;             // w_i = base^(-2i/HS); ignored when freqs is given
    const float *freqs;     // (NH, HS/2) explicit angular frequencies per head, or NULL
} RotaryCfg;

// cos/sin of every angle a call needs: (T, HS/2) when all heads share the default spectrum, else
// (T, NH, HS/2); head_stride is 0 in the first case so lookups are the same code
typedef struct RotaryTable {
    int layout;
    int T, NH, HS;
    int pos0;
    int head_stride;        // 0 or HS/2
    float *cos;             // (T, NH or 1, HS/2)
    float *sin;             // (T, NH or 1, HS/2)
} RotaryTable;

// The spectrally coupled bank (RFA paper, SC-RoPE / SC-RFA): one RoPE spectrum of M = NH·half frequencies
// base^(-i/M), slowest first, split into contiguous per-head bands, so head 0 gets the slowest ones:
// freqs (NH, half) with freqs[h][m] = base^(-(M-1 - (h·half + m))/M); decay (NH,) = damping · max_m freqs[h][m]
// (mu_h = b · omega_h,max), 0 for the first n_zero heads. decay may be NULL.
void rotary_sc_bank(float *freqs, float *decay, int NH, int half, double base, double damping, int n_zero);

// {ROTARY_HALF, 10000, NULL}
RotaryCfg rotary_cfg_default(void);

// fills tab for positions pos0 .. pos0+T-1 (allocates; free with rotary_table_free)
void rotary_table_init(RotaryTable *tab, const RotaryCfg *cfg, int pos0, int T, int NH, int HS);
void rotary_table_free(RotaryTable *tab);

// out, inp (B,T,NH,HS); out may alias inp (in place)
void rotary_forward(float *out, const float *inp, const RotaryCfg *cfg, int pos0, int B, int T, int NH, int HS);
// dinp, dout (B,T,NH,HS); dinp += R^T dout (the inverse rotation); dinp must not alias dout
void rotary_backward(float *dinp, const float *dout, const RotaryCfg *cfg, int pos0, int B, int T, int NH, int HS);

// the same with a prebuilt table; T, NH, HS are the table's
void rotary_forward_table(float *out, const float *inp, const RotaryTable *tab, int B);
void rotary_backward_table(float *dinp, const float *dout, const RotaryTable *tab, int B);

// the rotation fused with the (B,T,NH,HS) -> (B,NH,T,HS) head permutation that an attention kernel wants,
// one pass instead of two: out (B,NH,T,HS) gets the rows rotary_forward_table would write for inp
// (B,T,NH,HS), bit for bit. out must not alias inp.
void rotary_forward_heads_table(float *out, const float *inp, const RotaryTable *tab, int B);
// its backward: dinp (B,T,NH,HS) = R^T dout for dout (B,NH,T,HS). WRITES dinp (no +=), so the caller
// needs no zeroing pass; equals rotary_backward_table into a zeroed buffer of the permuted dout.
void rotary_backward_heads_table(float *dinp, const float *dout, const RotaryTable *tab, int B);

#endif
