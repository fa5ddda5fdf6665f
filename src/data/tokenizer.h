/*
 * SentencePiece behind a C interface (the shim in tokenizer_spm.cc is the project's only C++).
 *
 * A tokenizer is identified by the sha256 of its .model file: shards record it, so a shard encoded
 * with one tokenizer is never silently decoded or trained against another.
 */
#ifndef SEQ_TOKENIZER_H
#define SEQ_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Tokenizer Tokenizer;

Tokenizer *tokenizer_load(const char *model_path, Err *e);
void tokenizer_free(Tokenizer *t);
int tokenizer_vocab_size(const Tokenizer *t);
int tokenizer_eos_id(const Tokenizer *t);  // -1 when the model has none
const uint8_t *tokenizer_sha256(const Tokenizer *t);  // (32,) hash of the .model file

// Encode text (len bytes, UTF-8) and append the ids to the growing array *ids (*n used, *cap
// allocated; realloc'd as needed). Safe to call from several threads on one Tokenizer.
int tokenizer_encode(const Tokenizer *t, const char *text, size_t len, uint32_t **ids, size_t *n,
                     size_t *cap, Err *e);
// Encode text that continues an earlier text (zero-shot continuations, " word"): as tokenizer_encode, but
// without SentencePiece's dummy prefix (the "\u2581" it puts before a text's first word), so " word" gets
// the ids it has inside a longer text instead of a doubled word boundary.
int tokenizer_encode_continuation(const Tokenizer *t, const char *text, size_t len, uint32_t **ids, size_t *n,
                                  size_t *cap, Err *e);
// Decode ids (n,) to a malloc'd NUL-terminated string (*len bytes). Ids must be < vocab size.
int tokenizer_decode(const Tokenizer *t, const uint32_t *ids, size_t n, char **text, size_t *len, Err *e);

// Training input is pulled line by line from a callback: 1 = a line in *text/*len, 0 = end, -1 = error
// (with e filled), so inputs can be zstd files or jsonl without temporary copies.
typedef int (*TokenizerLineFn)(void *ctx, const char **text, size_t *len, Err *e);

typedef struct TokenizerTrainOpts {
    const char *model_prefix;      // writes <prefix>.model and <prefix>.vocab
    int vocab_size;
    const char *model_type;        // bpe | unigram | char | word
    double character_coverage;     // fraction of characters covered by pieces; the rest fall back to bytes
    int byte_fallback;             // 1: unknown characters become UTF-8 byte pieces (lossless round trip)
    int threads;
    int max_sentence_length;       // bytes; longer lines are skipped by the trainer
    long input_sentence_size;      // 0 = use every line
    int seed;                      // seeds SentencePiece's sampling of input sentences
} TokenizerTrainOpts;

int tokenizer_train(const TokenizerTrainOpts *o, TokenizerLineFn next, void *ctx, Err *e);

#ifdef __cplusplus
}
#endif

#endif
