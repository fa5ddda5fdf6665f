/*
 * Text generation from a trained model, on token ids (the tool turns text into ids and back): n prompts are
 * decoded together as a batch through one ModelDecoder (model/model.h), every sequence fed its own tokens side
 * by side, one position per step: a sequence whose prompt is shorter starts sampling earlier. Each step's
 * logits give the next token of every sequence past its prompt (model/sample.h), handed to a callback as it is
 * drawn, so the caller can stream text.
 *
 * Lengths. A prompt longer than the context keeps its last `context` tokens (left truncation, as evaluation
 * harnesses do). Attention caches hold `context` positions; when a model with such a layer has fed that many
 * tokens, the decoder is reset and re-fed the last context/2 tokens of every sequence (a sliding window with
 * re-encoding: positions restart at 0, as a forward over those tokens would see them), then generation goes
 * on. Recurrent layers and sliding-window attention never fill up.
 */
#ifndef SEQ_GENERATE_H
#define SEQ_GENERATE_H

#include <stdint.h>
#include "gpu/gpu.h"
#include "model/model.h"
#include "model/sample.h"

typedef struct GenerateOpts {
    SampleOpts sample;
    int max_new;     // tokens generated per sequence (>= 1)
    int context;     // positions an attention cache holds, and the longest prompt kept (>= 2)
    uint64_t seed;   // one RNG stream for the whole batch: the same seed, prompts and model give the same text
} GenerateOpts;

typedef struct GenerateStats {
    long prompt_tokens;  // fed from the prompts (after truncation)
    long new_tokens;     // generated, over every sequence
    long refed_tokens;   // fed again after the caches filled up
    int slides;          // times the caches filled up
    int truncated;       // prompts cut to the context
    double seconds;      // the whole loop: prompts, generation, re-encoding
} GenerateStats;

// called once per generated token of sequence b (in order within a sequence), as soon as it is drawn
typedef void (*GenerateTokenFn)(void *ctx, int b, int token);

// prompts[b] (lens[b] >= 1 ids each), b < n; out (n, max_new) the generated ids (may be NULL); fn may be NULL.
// gpu NULL: decodes on the host model; else on that backend holding m's parameters (gpu/gpu.h's decoder: the
// states on the device, the logits back for sampling here, so the same seed draws the same way on both).
// -1 with e set for bad options, an empty prompt, a bad id or a model that cannot decode (on that device).
int generate(Model *m, Gpu *gpu, const int *const *prompts, const int *lens, int n, const GenerateOpts *o,
             GenerateTokenFn fn, void *ctx, int *out, GenerateStats *st, Err *e);

#endif
