/*
 * SHA-256 as specified in FIPS 180-4 (sections 4.1.2, 4.2.2, 5.1.1, 5.3.3 and 6.2). Shards record the
 * hash of the tokenizer that produced them, so a reader can tell a shard from a different vocabulary.
 * Written for clarity rather than speed: it hashes tokenizer files (a few MB) once per run.
 */
#include "core/sha256.h"
#include "core/files.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

// first 32 bits of the fractional parts of the cube roots of the first 64 primes (FIPS 180-4 4.2.2)
static const uint32_t K_[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t rotr_(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static uint32_t load_be32_(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void store_be32_(uint8_t *p, uint32_t x) {
    p[0] = (uint8_t)(x >> 24);
    p[1] = (uint8_t)(x >> 16);
    p[2] = (uint8_t)(x >> 8);
    p[3] = (uint8_t)x;
}

// one 64-byte block into the hash state (FIPS 180-4 6.2.2)
static void compress_(uint32_t state[8], const uint8_t block[64]) {
    uint32_t w[64];  // the message schedule
    for (int t = 0; t < 16; t++) w[t] = load_be32_(block + 4 * t);
    for (int t = 16; t < 64; t++) {
        uint32_t s0 = rotr_(w[t - 15], 7) ^ rotr_(w[t - 15], 18) ^ (w[t - 15] >> 3);
        uint32_t s1 = rotr_(w[t - 2], 17) ^ rotr_(w[t - 2], 19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
    for (int t = 0; t < 64; t++) {
        uint32_t big_s1 = rotr_(e, 6) ^ rotr_(e, 11) ^ rotr_(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = h + big_s1 + ch + K_[t] + w[t];
        uint32_t big_s0 = rotr_(a, 2) ^ rotr_(a, 13) ^ rotr_(a, 22);
        uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = big_s0 + maj;
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
}

void sha256_init(Sha256 *c) {
    // first 32 bits of the fractional parts of the square roots of the first 8 primes (FIPS 180-4 5.3.3)
    static const uint32_t h0[8] = {
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
    };
    memcpy(c->h, h0, sizeof h0);
    c->n_bytes = 0;
    c->n_buf = 0;
}

void sha256_update(Sha256 *c, const void *data, size_t n) {
    const uint8_t *p = data;
    c->n_bytes += n;
    if (c->n_buf > 0) {  // top up a partial block first
        size_t take = 64 - c->n_buf < n ? 64 - c->n_buf : n;
        memcpy(c->buf + c->n_buf, p, take);
        c->n_buf += take;
        p += take;
        n -= take;
        if (c->n_buf < 64) return;
        compress_(c->h, c->buf);
        c->n_buf = 0;
    }
    for (; n >= 64; p += 64, n -= 64) compress_(c->h, p);
    memcpy(c->buf, p, n);
    c->n_buf = n;
}

void sha256_final(Sha256 *c, uint8_t out[32]) {
    // padding (FIPS 180-4 5.1.1): a 1 bit, zeros up to 56 mod 64 bytes, then the bit length big-endian
    uint64_t n_bits = c->n_bytes * 8;
    c->buf[c->n_buf++] = 0x80;
    if (c->n_buf > 56) {
        memset(c->buf + c->n_buf, 0, 64 - c->n_buf);
        compress_(c->h, c->buf);
        c->n_buf = 0;
    }
    memset(c->buf + c->n_buf, 0, 56 - c->n_buf);
    store_be32_(c->buf + 56, (uint32_t)(n_bits >> 32));
    store_be32_(c->buf + 60, (uint32_t)n_bits);
    compress_(c->h, c->buf);
    for (int i = 0; i < 8; i++) store_be32_(out + 4 * i, c->h[i]);
    sha256_init(c);  // a finished context holds no trace of the message
}

int sha256_file(const char *path, uint8_t out[32], Err *e) {
    int not_regular;
    unsigned mode = 0;
    FILE *f = fopen_regular(path, &not_regular, &mode);  // a FIFO named as a tokenizer model never blocks
    if (!f && not_regular) return err_set(e, "%s: is %s, not a regular file", path, file_kind(mode));
    if (!f) return err_set(e, "cannot open %s: %s", path, strerror(errno));
    Sha256 c;
    sha256_init(&c);
    uint8_t buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) sha256_update(&c, buf, n);
    if (ferror(f)) {
        int err = errno;
        fclose(f);
        return err_set(e, "cannot read %s: %s", path, strerror(err));
    }
    fclose(f);
    sha256_final(&c, out);
    return 0;
}

void sha256_hex(const uint8_t d[32], char out[65]) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
    out[64] = '\0';
}

static int hex_digit_(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

int sha256_from_hex(const char *hex, uint8_t out[32]) {
    uint8_t d[32];  // out is left untouched on bad input
    if (!hex) return -1;
    for (int i = 0; i < 32; i++) {
        int hi = hex_digit_(hex[2 * i]);
        if (hi < 0) return -1;  // also stops at a NUL, so a short string never reads past its end
        int lo = hex_digit_(hex[2 * i + 1]);
        if (lo < 0) return -1;
        d[i] = (uint8_t)(hi << 4 | lo);
    }
    if (hex[64] != '\0') return -1;
    memcpy(out, d, sizeof d);
    return 0;
}
