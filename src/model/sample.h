/*
 * Drawing the next token from a row of logits, as text generation does: temperature, then top-k, then
 * top-p (nucleus), then one uniform draw from the project's RNG (core/rng.h), so a seed reproduces a
 * generation. Temperature 0 is greedy decoding: the argmax, no draw; so is any temperature below
 * SAMPLE_GREEDY_BELOW, where softmax(logits / T) is the argmax's one-hot up to rounding, and where 1 / T
 * overflows (1e-320) the exponents would be NaN and the draw land on the least likely token.
 */
#ifndef SEQ_SAMPLE_H
#define SEQ_SAMPLE_H

#include "core/err.h"
#include "core/rng.h"

#define SAMPLE_GREEDY_BELOW 1e-6

typedef struct SampleOpts {
    double temperature;  // >= 0; 0 = greedy (argmax), 1 = the model's distribution
    int top_k;           // >= 0; keep the k most likely tokens (0 = all)
    double top_p;        // in (0, 1]; then keep the fewest most likely tokens whose probability reaches top_p
} SampleOpts;

// -1 with e set when an option is out of range (the message names the command-line flag)
int sample_check(const SampleOpts *o, Err *e);

// one token id from logits (V,): the argmax (the lowest id among equal maxima) at a temperature below
// SAMPLE_GREEDY_BELOW; otherwise
// a draw from softmax(logits / temperature) restricted to the top_k most likely ids (ties: lower id first)
// and then to the smallest prefix of those, in order of probability, whose mass reaches top_p of theirs.
// Draws one rng_uniform unless greedy.
int sample_token(const float *logits, int V, const SampleOpts *o, Rng *r);

#endif
