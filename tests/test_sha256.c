/*
 * SHA-256 against the FIPS 180-4 / NIST example vectors, fed whole and in odd-sized pieces (so every
 * buffering path in sha256_update runs), plus sha256_file and the hex helpers.
 */
#include <stdlib.h>
#include <unistd.h>

#include "core/sha256.h"
#include "test.h"

static void hex_of_(const void *data, size_t n, char out[65]) {
    Sha256 c;
    uint8_t d[32];
    sha256_init(&c);
    sha256_update(&c, data, n);
    sha256_final(&c, d);
    sha256_hex(d, out);
}

static void test_vectors(void) {
    char hex[65];
    hex_of_("", 0, hex);
    CHECK_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "sha256 of \"\"");
    hex_of_("abc", 3, hex);
    CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "sha256 of \"abc\"");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    hex_of_(m448, strlen(m448), hex);
    CHECK_STR(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1", "sha256 of the 448-bit message");
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqr"
                       "lmnopqrsmnopqrstnopqrstu";
    hex_of_(m896, strlen(m896), hex);
    CHECK_STR(hex, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1", "sha256 of the 896-bit message");

    // one million 'a', in chunks of 1, 2, ..., 97 bytes, cycling: crosses block edges at every offset
    static char a[100];
    memset(a, 'a', sizeof a);
    Sha256 c;
    uint8_t d[32];
    sha256_init(&c);
    size_t left = 1000000, step = 1;
    while (left > 0) {
        size_t n = step < left ? step : left;
        sha256_update(&c, a, n);
        left -= n;
        step = step % 97 + 1;
    }
    sha256_final(&c, d);
    sha256_hex(d, hex);
    CHECK_STR(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", "sha256 of a million 'a'");

    // messages of every length around the padding boundary (55, 56, 63, 64 bytes) agree whole vs. split
    char msg[130];
    for (int i = 0; i < 130; i++) msg[i] = (char)('A' + i % 26);
    int agree = 1;
    for (size_t len = 0; len <= 130; len++) {
        char whole[65], split[65];
        hex_of_(msg, len, whole);
        sha256_init(&c);
        sha256_update(&c, msg, len / 3);
        sha256_update(&c, msg + len / 3, 0);
        sha256_update(&c, msg + len / 3, len - len / 3);
        sha256_final(&c, d);
        sha256_hex(d, split);
        if (strcmp(whole, split) != 0) agree = 0;
    }
    CHECK(agree, "split updates agree with one update for lengths 0..130");
}

static void test_file(void) {
    char dir[] = "/tmp/seqtrain_test_sha256_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char path[256];
    snprintf(path, sizeof path, "%s/abc.txt", dir);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "create temp file");
    if (!f) return;
    fputs("abc", f);
    fclose(f);

    uint8_t d[32];
    char hex[65];
    Err e = {{0}};
    CHECK(sha256_file(path, d, &e) == 0, "sha256_file ok");
    sha256_hex(d, hex);
    CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "sha256_file of \"abc\"");

    char missing[300];
    snprintf(missing, sizeof missing, "%s/missing.txt", dir);
    CHECK(sha256_file(missing, d, &e) == -1, "sha256_file of a missing file fails");
    CHECK_CONTAINS(e.msg, missing, "error names the file");
    CHECK_CONTAINS(e.msg, "No such file", "error says why");

    unlink(path);
    rmdir(dir);
}

static void test_hex(void) {
    uint8_t d[32], back[32];
    for (int i = 0; i < 32; i++) d[i] = (uint8_t)(i * 37 + 5);
    char hex[65];
    sha256_hex(d, hex);
    CHECK(strlen(hex) == 64, "hex is 64 characters");
    CHECK(sha256_from_hex(hex, back) == 0 && memcmp(d, back, 32) == 0, "hex round trip");

    const char *upper = "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD";
    CHECK(sha256_from_hex(upper, back) == 0, "upper-case hex accepted");
    sha256_hex(back, hex);
    CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "upper-case hex decodes");

    memset(back, 0xab, sizeof back);
    CHECK(sha256_from_hex("", back) == -1, "empty string rejected");
    CHECK(sha256_from_hex(NULL, back) == -1, "NULL rejected");
    CHECK(sha256_from_hex("ba7816bf", back) == -1, "short string rejected");
    char bad[80];
    snprintf(bad, sizeof bad, "%s0", upper);
    CHECK(sha256_from_hex(bad, back) == -1, "65 digits rejected");
    snprintf(bad, sizeof bad, "%s", upper);
    bad[63] = '\0';
    CHECK(sha256_from_hex(bad, back) == -1, "63 digits rejected");
    snprintf(bad, sizeof bad, "%s", upper);
    bad[10] = 'g';
    CHECK(sha256_from_hex(bad, back) == -1, "non-hex digit rejected");
    bad[10] = ' ';
    CHECK(sha256_from_hex(bad, back) == -1, "space rejected");
    int untouched = 1;
    for (int i = 0; i < 32; i++) untouched &= back[i] == 0xab;
    CHECK(untouched, "output untouched on bad input");
}

int main(void) {
    test_vectors();
    test_file();
    test_hex();
    return test_summary();
}
