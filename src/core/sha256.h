/* SHA-256 (FIPS 180-4), used to tie shards to the tokenizer that made them. */
#ifndef SEQ_SHA256_H
#define SEQ_SHA256_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"

typedef struct Sha256 {
    uint32_t h[8];
    uint64_t n_bytes;
    uint8_t buf[64];
    size_t n_buf;
} Sha256;

void sha256_init(Sha256 *c);
void sha256_update(Sha256 *c, const void *data, size_t n);
void sha256_final(Sha256 *c, uint8_t out[32]);
int sha256_file(const char *path, uint8_t out[32], Err *e);
void sha256_hex(const uint8_t d[32], char out[65]);  // lower-case hex + NUL
int sha256_from_hex(const char *hex, uint8_t out[32]); // 0 ok, -1 not 64 hex digits

#endif
