/*
 * Token shards: seqtok write/read round trips at every frame boundary, random windows against the source
 * array (with a cache big enough for everything and one that must evict), llm.c and raw files written
 * here byte by byte, and every kind of bad input, each of which must give a one-line error naming the
 * file and the problem. Everything lives in a mkdtemp directory that is removed at the end.
 */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/shard.h"
#include "test.h"
#include "testfs.h"

// splitmix64: a seeded generator of our own, so failures reproduce
static uint64_t rng_state_ = 0x5eed5eed12345678ull;
static uint64_t rng_next_(void) {
    uint64_t z = (rng_state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static uint64_t rng_below_(uint64_t n) { return rng_next_() % n; }

static void put32_(uint8_t *p, uint32_t x) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(x >> (8 * i));
}
static void put64_(uint8_t *p, uint64_t x) {
    put32_(p, (uint32_t)x);
    put32_(p + 4, (uint32_t)(x >> 32));
}
static uint64_t get64_(const uint8_t *p) {
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = x << 8 | p[i];
    return x;
}

// copy src to dst with a u32 or u64 written at byte offset off
static void patch_(const char *src, const char *dst, size_t off, uint64_t val, int width) {
    size_t n;
    uint8_t *b = file_read_(src, &n);
    if (!b) return;
    if (off + (size_t)width <= n) {
        if (width == 4) put32_(b + off, (uint32_t)val);
        else put64_(b + off, val);
    }
    file_write_(dst, b, n);
    free(b);
}

// write ids (n,) as a seqtok shard, appending in random-sized batches
static int shard_write_(const char *path, const uint32_t *ids, size_t n, uint32_t vocab, int tb, uint32_t ft,
                        const uint8_t *sha, int level, Err *e) {
    ShardWriter w;
    if (shard_writer_open(&w, path, vocab, tb, sha, ft, level, e) != 0) return -1;
    for (size_t i = 0; i < n;) {
        size_t take = 1 + (size_t)rng_below_(3 * (ft ? ft : SHARD_FRAME_TOKENS_DEFAULT));
        if (take > n - i) take = n - i;
        if (shard_writer_append(&w, ids + i, take, e) != 0) return -1;
        i += take;
    }
    return shard_writer_close(&w, e);
}

// llm.c .bin: 256 int32 header, then n tokens of width tb
static void llmc_write_(const char *path, uint32_t magic, uint32_t version, int32_t count, const uint32_t *ids,
                        size_t n, int tb, size_t extra) {
    size_t size = 1024 + n * (size_t)tb + extra;
    uint8_t *b = calloc(size, 1);
    put32_(b, magic);
    put32_(b + 4, version);
    put32_(b + 8, (uint32_t)count);
    for (size_t i = 0; i < n; i++) {
        if (tb == 2) b[1024 + 2 * i] = (uint8_t)ids[i], b[1024 + 2 * i + 1] = (uint8_t)(ids[i] >> 8);
        else put32_(b + 1024 + 4 * i, ids[i]);
    }
    file_write_(path, b, size);
    free(b);
}

static void raw_write_(const char *path, const uint32_t *ids, size_t n, int tb, size_t extra) {
    uint8_t *b = calloc(n * (size_t)tb + extra + 1, 1);
    for (size_t i = 0; i < n; i++) {
        if (tb == 2) b[2 * i] = (uint8_t)ids[i], b[2 * i + 1] = (uint8_t)(ids[i] >> 8);
        else put32_(b + 4 * i, ids[i]);
    }
    file_write_(path, b, n * (size_t)tb + extra);
    free(b);
}

// 1 when n_windows random windows (and the whole range) of s equal ids (n,)
static int windows_match_(Shard *s, const uint32_t *ids, size_t n, int n_windows) {
    uint32_t *out = malloc((n + 1) * sizeof(uint32_t));
    Err e = {{0}};
    int ok = shard_read(s, out, 0, n, &e) == 0 && (n == 0 || memcmp(out, ids, n * sizeof(uint32_t)) == 0);
    for (int k = 0; k < n_windows && ok; k++) {
        uint64_t start = rng_below_(n + 1), count = rng_below_(n - start + 1);
        if (k % 2) count = count < 40 ? count : rng_below_(40);  // short windows hit single frames
        ok = shard_read(s, out, start, count, &e) == 0 &&
             (count == 0 || memcmp(out, ids + start, count * sizeof(uint32_t)) == 0);
    }
    free(out);
    return ok;
}

static void expect_open_fail_(const char *path, ShardFormat fmt, uint32_t vocab, const char *phrase, const char *what) {
    Shard s;
    Err e = {{0}};
    CHECK(shard_open(&s, path, fmt, vocab, 1 << 20, &e) == -1, "%s: open fails", what);
    CHECK_CONTAINS(e.msg, path, "%s: error names the file", what);
    CHECK_CONTAINS(e.msg, phrase, "%s: error says \"%s\"", what, phrase);
    CHECK(strchr(e.msg, '\n') == NULL, "%s: error is one line", what);
    shard_close(&s);  // harmless after a failed open
}

// open must succeed, then reading [start, start+count) must fail with phrase
static void expect_read_fail_(const char *path, ShardFormat fmt, uint32_t vocab, uint64_t start, uint64_t count,
                              const char *phrase, const char *what) {
    Shard s;
    Err e = {{0}};
    int opened = shard_open(&s, path, fmt, vocab, 1 << 20, &e) == 0;
    CHECK(opened, "%s: open ok (%.200s)", what, e.msg);
    if (!opened) return;
    uint32_t *out = malloc((count + 1) * sizeof(uint32_t));
    CHECK(shard_read(&s, out, start, count, &e) == -1, "%s: read fails", what);
    CHECK_CONTAINS(e.msg, path, "%s: error names the file", what);
    CHECK_CONTAINS(e.msg, phrase, "%s: error says \"%s\"", what, phrase);
    free(out);
    shard_close(&s);
}

static void test_formats(void) {
    ShardFormat f = SHARD_AUTO;
    const char *names[] = {"auto", "seqtok", "llmc", "raw_u16", "raw_u32"};
    int ok = 1;
    for (int i = 0; i < 5; i++) ok &= shard_format_parse(names[i], &f) == 0 && f == (ShardFormat)i &&
                                      strcmp(shard_format_name(f), names[i]) == 0;
    CHECK(ok, "format names round trip");
    CHECK(shard_format_parse("bin", &f) == -1, "unknown format name rejected");
}

static void roundtrip_(size_t n, uint32_t vocab, int tb, uint32_t ft, int level) {
    char path[128], what[160];
    path_(path, sizeof path, "rt.shard");
    snprintf(what, sizeof what, "n=%zu vocab=%u tb=%d ft=%u level=%d", n, vocab, tb, ft, level);
    uint32_t *ids = malloc((n + 1) * sizeof(uint32_t));
    uint32_t lo = UINT32_MAX, hi = 0;
    for (size_t i = 0; i < n; i++) {
        ids[i] = i == 1 ? vocab - 1 : (uint32_t)rng_below_(vocab);  // the largest id is always present
        lo = ids[i] < lo ? ids[i] : lo;
        hi = ids[i] > hi ? ids[i] : hi;
    }
    uint8_t sha[32];
    for (int i = 0; i < 32; i++) sha[i] = (uint8_t)(0xa0 + i);
    Err e = {{0}};
    CHECK(shard_write_(path, ids, n, vocab, tb, ft, sha, level, &e) == 0, "%s: write (%.200s)", what, e.msg);

    Shard s;
    if (shard_open(&s, path, SHARD_AUTO, 0, 1 << 30, &e) != 0) {
        CHECK(0, "%s: open (%.200s)", what, e.msg);
        free(ids);
        return;
    }
    int want_tb = tb ? tb : vocab <= 65536 ? 2 : 4;
    if (ft == 0) ft = SHARD_FRAME_TOKENS_DEFAULT;
    uint64_t want_frames = (n + ft - 1) / ft;
    CHECK(s.format == SHARD_SEQTOK && s.n_tokens == n && s.vocab_size == vocab && s.token_bytes == want_tb &&
          s.frame_tokens == ft && s.n_frames == want_frames, "%s: header fields", what);
    CHECK(s.has_tokenizer_hash && memcmp(s.tokenizer_sha256, sha, 32) == 0, "%s: tokenizer hash recorded", what);
    CHECK(n == 0 ? !s.has_minmax : s.has_minmax && s.min_id == lo && s.max_id == hi, "%s: min/max recorded", what);
    CHECK(s.cache_slots == (int)want_frames, "%s: a large cache holds every frame", what);
    CHECK(windows_match_(&s, ids, n, 200), "%s: whole range and random windows match", what);
    shard_close(&s);

    // a cache of 0 bytes still keeps 2 frames; reading frames backwards evicts on every step
    CHECK(shard_open(&s, path, SHARD_SEQTOK, vocab, 0, &e) == 0, "%s: open with tiny cache", what);
    CHECK(s.cache_slots == (want_frames < 2 ? (int)want_frames : 2), "%s: tiny cache has min(2, frames) slots", what);
    CHECK(windows_match_(&s, ids, n, 200), "%s: tiny cache gives the same windows", what);
    int ok = 1;
    uint32_t *out = malloc((ft + 1) * sizeof(uint32_t));
    for (uint64_t fi = want_frames; fi-- > 0;) {
        uint64_t cnt = n - fi * ft < ft ? n - fi * ft : ft;
        ok &= shard_read(&s, out, fi * ft, cnt, &e) == 0 && memcmp(out, ids + fi * ft, cnt * sizeof(uint32_t)) == 0;
    }
    CHECK(ok, "%s: frames read backwards through the tiny cache", what);
    free(out);
    shard_close(&s);
    free(ids);
    unlink(path);
}

static void test_roundtrips(void) {
    size_t counts[] = {0, 1, 6, 7, 8, 50};
    for (int i = 0; i < 6; i++) {
        roundtrip_(counts[i], 1000, 2, 7, 0);
        roundtrip_(counts[i], 100000, 0, 7, 0);  // width chosen from the vocab: 4
    }
    roundtrip_(100000, 50257, 2, 4096, 0);
    roundtrip_(30000, 65536, 2, 1000, 19);
    roundtrip_(30000, 128256, 4, 0, -1);  // default frame size: one short frame
    roundtrip_(70000, 1u << 31, 4, 65536, 1);
}

static void test_writer(void) {
    char path[128], tmp[160], bad[200];
    path_(path, sizeof path, "w.shard");
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    Err e = {{0}};
    ShardWriter w;
    uint32_t ids[8] = {1, 2, 3, 999, 1000, 5, 6, 7};

    CHECK(shard_writer_open(&w, path, 70000, 2, NULL, 7, 0, &e) == -1, "2-byte tokens with vocab 70000 rejected");
    CHECK_CONTAINS(e.msg, path, "width error names the file");
    CHECK_CONTAINS(e.msg, "cannot hold vocab size 70000", "width error says why");
    CHECK(shard_writer_open(&w, path, 1000, 3, NULL, 7, 0, &e) == -1, "token width 3 rejected");
    CHECK(shard_writer_open(&w, path, 0, 0, NULL, 7, 0, &e) == -1, "vocab 0 rejected");
    CHECK(shard_writer_open(&w, path, 1000, 0, NULL, SHARD_FRAME_TOKENS_MAX + 1, 0, &e) == -1,
          "oversized frames rejected");

    // a shard appears only on close; until then only the temp file exists
    CHECK(shard_writer_open(&w, path, 1000, 0, NULL, 3, 0, &e) == 0, "writer open (%.200s)", e.msg);
    CHECK(shard_writer_append(&w, ids, 3, &e) == 0, "append valid ids");
    CHECK(access(tmp, F_OK) == 0 && access(path, F_OK) != 0, "temp file exists, the shard does not yet");
    CHECK(shard_writer_append(&w, ids, 8, &e) == -1, "append with id 1000 >= vocab 1000 fails");
    CHECK_CONTAINS(e.msg, path, "append error names the file");
    CHECK_CONTAINS(e.msg, "token id 1000 (item 4 of this batch, position 7 in the shard) is >= vocab size 1000",
                   "append error names id, position and vocab");
    CHECK(shard_writer_append(&w, ids + 5, 3, &e) == 0, "writer usable after a rejected batch");
    CHECK(shard_writer_close(&w, &e) == 0, "close (%.200s)", e.msg);
    CHECK(access(tmp, F_OK) != 0 && access(path, F_OK) == 0, "close renamed the temp file into place");
    Shard s;
    uint32_t out[8] = {0}, want[6] = {1, 2, 3, 5, 6, 7};
    CHECK(shard_open(&s, path, SHARD_AUTO, 1000, 0, &e) == 0 && s.n_tokens == 6 && !s.has_tokenizer_hash &&
          s.min_id == 1 && s.max_id == 7, "shard holds only the accepted batches");
    CHECK(shard_read(&s, out, 0, 6, &e) == 0 && memcmp(out, want, sizeof want) == 0, "accepted tokens read back");
    shard_close(&s);
    CHECK(shard_writer_append(&w, ids, 1, &e) == -1, "append after close fails");
    CHECK(shard_writer_close(&w, &e) == -1, "close after close fails");
    shard_writer_abort(&w);  // harmless when closed

    // abort leaves nothing behind, and an existing shard at the path is untouched
    CHECK(shard_writer_open(&w, path, 1000, 0, NULL, 3, 0, &e) == 0, "second writer open");
    CHECK(shard_writer_append(&w, ids, 3, &e) == 0, "second writer append");
    shard_writer_abort(&w);
    CHECK(access(tmp, F_OK) != 0, "abort removed the temp file");
    CHECK(shard_open(&s, path, SHARD_AUTO, 0, 0, &e) == 0 && s.n_tokens == 6, "abort left the old shard intact");
    shard_close(&s);
    unlink(path);

    snprintf(bad, sizeof bad, "%s/no/such/dir/x.shard", dir_);
    CHECK(shard_writer_open(&w, bad, 1000, 0, NULL, 0, 0, &e) == -1, "writer into a missing directory fails");
    CHECK_CONTAINS(e.msg, "cannot create", "missing directory: says it cannot create");
    CHECK_CONTAINS(e.msg, bad, "missing directory: names the file");
    CHECK_CONTAINS(e.msg, "No such file or directory", "missing directory: says why");
    shard_writer_abort(&w);

    char notdir[128];
    path_(notdir, sizeof notdir, "plainfile");
    file_write_(notdir, "x", 1);
    snprintf(bad, sizeof bad, "%s/x.shard", notdir);
    CHECK(shard_writer_open(&w, bad, 1000, 0, NULL, 0, 0, &e) == -1, "writer under a regular file fails");
    CHECK_CONTAINS(e.msg, "Not a directory", "file as directory: says why");
    unlink(notdir);

    if (geteuid() != 0) {  // root writes anywhere, so the permission check only means something for users
        char ro[128];
        path_(ro, sizeof ro, "readonly");
        mkdir(ro, 0500);
        snprintf(bad, sizeof bad, "%s/x.shard", ro);
        CHECK(shard_writer_open(&w, bad, 1000, 0, NULL, 0, 0, &e) == -1, "writer into a read-only directory fails");
        CHECK_CONTAINS(e.msg, "Permission denied", "read-only directory: says why");
        rmdir(ro);
    }

    // a full disk, simulated by a file-size limit: the write fails, the temp file goes, no shard appears
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 20000;
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    size_t n = 200000;
    uint32_t *big = malloc(n * sizeof(uint32_t));
    for (size_t i = 0; i < n; i++) big[i] = (uint32_t)rng_below_(50000);
    int rc = shard_writer_open(&w, path, 50000, 0, NULL, 1000, 0, &e);
    if (rc == 0) rc = shard_writer_append(&w, big, n, &e);
    if (rc == 0) rc = shard_writer_close(&w, &e);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, SIG_DFL);
    CHECK(rc == -1, "write past the file-size limit fails");
    CHECK_CONTAINS(e.msg, tmp, "write failure names the temp file");
    CHECK_CONTAINS(e.msg, "File too large", "write failure says why");
    CHECK(access(tmp, F_OK) != 0 && access(path, F_OK) != 0, "failed write left no temp file and no shard");
    shard_writer_abort(&w);
    free(big);
}

static void test_llmc_raw(void) {
    char path[128];
    Err e = {{0}};
    Shard s;
    size_t n = 70000;  // more than one read chunk
    uint32_t *ids = malloc(n * sizeof(uint32_t));
    for (size_t i = 0; i < n; i++) ids[i] = i == 3 ? 50256 : (uint32_t)rng_below_(50257);

    path_(path, sizeof path, "gpt2.bin");
    llmc_write_(path, 20240520, 1, (int32_t)n, ids, n, 2, 0);
    CHECK(shard_open(&s, path, SHARD_AUTO, 0, 0, &e) == 0, "llm.c .bin opens by magic (%.200s)", e.msg);
    CHECK(s.format == SHARD_LLMC && s.vocab_size == 50257 && s.token_bytes == 2 && s.n_tokens == n,
          "llm.c .bin: GPT-2 defaults");
    CHECK(windows_match_(&s, ids, n, 100), "llm.c .bin: windows match");
    shard_close(&s);

    for (size_t i = 0; i < 1000; i++) ids[i] = (uint32_t)(i % 1000);
    llmc_write_(path, 20240520, 1, 1000, ids, 1000, 2, 0);
    expect_read_fail_(path, SHARD_LLMC, 100, 0, 1000, "token id 100 at position 100 is >= vocab size 100",
                      "llm.c .bin with explicit small vocab");
    CHECK(shard_open(&s, path, SHARD_LLMC, 100, 0, &e) == 0 && shard_read(&s, ids + 2000, 0, 100, &e) == 0,
          "llm.c .bin: ids below the vocab read fine");
    shard_close(&s);
    llmc_write_(path, 20240520, 1, 1000, ids, 1000, 2, 1);
    expect_open_fail_(path, SHARD_AUTO, 0, "size mismatch", "llm.c .bin one byte too long");
    llmc_write_(path, 20240520, 1, 1000, ids, 999, 2, 0);
    expect_open_fail_(path, SHARD_AUTO, 0, "size mismatch", "llm.c .bin one token short");
    llmc_write_(path, 20240520, 2, 1000, ids, 1000, 2, 0);
    expect_open_fail_(path, SHARD_AUTO, 0, "unsupported llm.c version 2", "llm.c .bin bad version");
    llmc_write_(path, 20240520, 1, 0, ids, 0, 2, 0);
    expect_open_fail_(path, SHARD_AUTO, 0, "token count 0", "llm.c .bin with 0 tokens");
    llmc_write_(path, 20240520, 1, -5, ids, 0, 2, 0);
    expect_open_fail_(path, SHARD_AUTO, 0, "token count -5", "llm.c .bin with a negative count");
    uint8_t short_head[100] = {0};
    put32_(short_head, 20240520);
    file_write_(path, short_head, sizeof short_head);
    expect_open_fail_(path, SHARD_AUTO, 0, "truncated", "llm.c .bin truncated header");

    for (size_t i = 0; i < 5000; i++) ids[i] = i == 7 ? 128255 : (uint32_t)rng_below_(128256);
    path_(path, sizeof path, "llama3.bin");
    llmc_write_(path, 20240801, 7, 5000, ids, 5000, 4, 0);
    CHECK(shard_open(&s, path, SHARD_AUTO, 0, 0, &e) == 0 && s.vocab_size == 128256 && s.token_bytes == 4,
          "llm.c Llama-3 .bin: uint32 tokens, vocab 128256");
    CHECK(windows_match_(&s, ids, 5000, 100), "llm.c Llama-3 .bin: windows match");
    shard_close(&s);
    unlink(path);

    path_(path, sizeof path, "tokens.u16");
    for (size_t i = 0; i < n; i++) ids[i] = (uint32_t)rng_below_(65536);
    raw_write_(path, ids, n, 2, 0);
    CHECK(shard_open(&s, path, SHARD_RAW_U16, 65536, 0, &e) == 0 && s.n_tokens == n && s.token_bytes == 2,
          "raw_u16 opens (%.200s)", e.msg);
    CHECK(windows_match_(&s, ids, n, 100), "raw_u16: windows match");
    shard_close(&s);
    expect_open_fail_(path, SHARD_RAW_U16, 0, "vocab size must be given", "raw_u16 without a vocab size");
    expect_open_fail_(path, SHARD_AUTO, 0, "not a seqtok or llm.c shard", "raw file with format auto");
    for (size_t i = 0; i < 1000; i++) ids[i] = (uint32_t)(i % 1000);
    raw_write_(path, ids, 1000, 2, 0);
    expect_read_fail_(path, SHARD_RAW_U16, 600, 0, 1000, "token id 600 at position 600 is >= vocab size 600",
                      "raw_u16 with ids >= vocab");
    expect_read_fail_(path, SHARD_RAW_U16, 600, 590, 20, "at position 600", "raw_u16 window reaching a bad id");
    raw_write_(path, ids, 1000, 2, 1);
    expect_open_fail_(path, SHARD_RAW_U16, 1000, "not a multiple of 2", "raw_u16 with an odd size");

    path_(path, sizeof path, "tokens.u32");
    for (size_t i = 0; i < 3000; i++) ids[i] = (uint32_t)rng_below_(200000);
    raw_write_(path, ids, 3000, 4, 0);
    CHECK(shard_open(&s, path, SHARD_RAW_U32, 200000, 0, &e) == 0 && s.n_tokens == 3000 && s.token_bytes == 4,
          "raw_u32 opens (%.200s)", e.msg);
    CHECK(windows_match_(&s, ids, 3000, 100), "raw_u32: windows match");
    shard_close(&s);
    raw_write_(path, ids, 3000, 4, 2);
    expect_open_fail_(path, SHARD_RAW_U32, 200000, "not a multiple of 4", "raw_u32 with a ragged size");
    file_write_(path, "", 0);
    expect_open_fail_(path, SHARD_RAW_U32, 200000, "empty file", "raw_u32 empty file");
    unlink(path);
    path_(path, sizeof path, "tokens.u16");
    unlink(path);
    path_(path, sizeof path, "gpt2.bin");
    unlink(path);
    free(ids);
}

static void test_bad_seqtok(void) {
    char good[128], bad[128];
    path_(good, sizeof good, "good.shard");
    path_(bad, sizeof bad, "bad.shard");
    Err e = {{0}};
    size_t n = 1200;  // ids i % 1000 in frames of 7: the first id >= 500 is at position 500
    uint32_t *ids = malloc(n * sizeof(uint32_t));
    for (size_t i = 0; i < n; i++) ids[i] = (uint32_t)(i % 1000);
    CHECK(shard_write_(good, ids, n, 1000, 2, 7, NULL, 0, &e) == 0, "write the good shard (%.200s)", e.msg);
    size_t size;
    uint8_t *b = file_read_(good, &size);

    file_write_(bad, "", 0);
    expect_open_fail_(bad, SHARD_AUTO, 0, "empty file", "empty file");
    expect_open_fail_(bad, SHARD_SEQTOK, 0, "empty file", "empty file as seqtok");
    file_write_(bad, b, 60);
    expect_open_fail_(bad, SHARD_AUTO, 0, "truncated: the seqtok header is 128 bytes", "truncated header");
    file_write_(bad, b, 5);
    expect_open_fail_(bad, SHARD_AUTO, 0, "truncated", "file ending inside the magic");
    file_write_(bad, b, size - 4);
    expect_open_fail_(bad, SHARD_AUTO, 0, "truncated: header says 172 frames", "truncated index");
    file_write_(bad, b, 300);
    expect_open_fail_(bad, SHARD_AUTO, 0, "but file ends at byte 300", "truncated frames");
    uint8_t *longer = calloc(size + 3, 1);
    memcpy(longer, b, size);
    file_write_(bad, longer, size + 3);
    free(longer);
    expect_open_fail_(bad, SHARD_AUTO, 0, "3 bytes after the index", "trailing bytes");

    const char *text = "this is a text file, not a shard, but it is long enough to hold a header of some kind";
    file_write_(bad, text, strlen(text));
    expect_open_fail_(bad, SHARD_AUTO, 0, "not a seqtok or llm.c shard (unrecognised magic", "wrong magic, auto");
    expect_open_fail_(bad, SHARD_SEQTOK, 0, "not a seqtok shard (bad magic; for llm.c .bin use format llmc",
                      "wrong magic, seqtok");
    expect_open_fail_(good, SHARD_LLMC, 0, "not an llm.c shard", "seqtok shard opened as llmc");

    patch_(good, bad, 8, 7, 4);
    expect_open_fail_(bad, SHARD_AUTO, 0, "unsupported version 7 (this build reads version 1)", "bad version");
    patch_(good, bad, 12, 64, 4);
    expect_open_fail_(bad, SHARD_AUTO, 0, "corrupt header: header size 64", "bad header size");
    patch_(good, bad, 20, 3, 4);
    expect_open_fail_(bad, SHARD_AUTO, 0, "token width 3 bytes", "bad token width");
    patch_(good, bad, 16, 0, 4);
    expect_open_fail_(bad, SHARD_AUTO, 0, "vocab size 0", "vocab 0");
    patch_(good, bad, 16, 70000, 4);
    expect_open_fail_(bad, SHARD_AUTO, 0, "does not fit 2-byte tokens", "vocab too big for u16");
    patch_(good, bad, 24, 0, 4);
    expect_open_fail_(bad, SHARD_AUTO, 0, "0 tokens per frame", "frame_tokens 0");
    patch_(good, bad, 24, 0xffffffffu, 4);
    expect_open_fail_(bad, SHARD_AUTO, 0, "4294967295 tokens per frame", "huge frame_tokens");
    patch_(good, bad, 28, 0x10, 4);
    expect_open_fail_(bad, SHARD_AUTO, 0, "unsupported flags 0x10", "unknown flag");
    patch_(good, bad, 40, 171, 8);
    expect_open_fail_(bad, SHARD_AUTO, 0, "need 172 frames, header says 171", "frame count off by one");
    patch_(good, bad, 48, 100, 8);
    expect_open_fail_(bad, SHARD_AUTO, 0, "inside the header", "index offset inside the header");
    // a huge token count with a matching frame count: every size computation must stay overflow-safe
    patch_(good, bad, 32, UINT64_MAX, 8);
    patch_(bad, bad, 40, UINT64_MAX / 7 + 1, 8);
    expect_open_fail_(bad, SHARD_AUTO, 0, "truncated", "huge token count");
    patch_(good, bad, 48, UINT64_MAX - 8, 8);
    expect_open_fail_(bad, SHARD_AUTO, 0, "truncated", "index offset near 2^64");

    // index entries: frame 1 and 2 swapped, the first one moved, one frame bigger than zstd could make
    uint64_t index_offset = get64_(b + 48);
    uint8_t *c = malloc(size);
    memcpy(c, b, size);
    memcpy(c + index_offset + 8, b + index_offset + 16, 8);
    memcpy(c + index_offset + 16, b + index_offset + 8, 8);
    file_write_(bad, c, size);
    expect_open_fail_(bad, SHARD_AUTO, 0, "corrupt index: frame 1 offsets", "index offsets out of order");
    memcpy(c, b, size);
    put64_(c + index_offset, 129);
    file_write_(bad, c, size);
    expect_open_fail_(bad, SHARD_AUTO, 0, "corrupt index: frames span bytes 129..", "first offset not 128");
    memcpy(c, b, size);
    put64_(c + index_offset + 8, index_offset - 1);
    file_write_(bad, c, size);
    expect_open_fail_(bad, SHARD_AUTO, 0, "more than zstd's bound", "frame larger than zstd's bound");

    expect_open_fail_(good, SHARD_AUTO, 999, "vocab size 999 was asked for but the shard was written for vocab size 1000",
                      "vocab argument differs from the header");
    patch_(good, bad, 16, 500, 4);
    // the recorded min/max already contradict the smaller vocab, so open refuses the shard ...
    expect_open_fail_(bad, SHARD_AUTO, 0, "header records ids 0 .. 999 but vocab size 500",
                      "seqtok with patched header vocab (min/max recorded)");
    // ... and without the min/max flag (good.shard has no tokenizer hash: flags 0) the frame check catches it
    patch_(bad, bad, 28, 0, 4);
    expect_read_fail_(bad, SHARD_AUTO, 0, 0, n, "token id 500 at position 500 is >= vocab size 500 (the shard does not",
                      "seqtok with patched header vocab (no min/max)");
    Shard s;
    uint32_t *out = malloc(n * sizeof(uint32_t));
    CHECK(shard_open(&s, bad, SHARD_AUTO, 0, 0, &e) == 0 && shard_read(&s, out, 0, 497, &e) == 0 &&
          memcmp(out, ids, 497 * sizeof(uint32_t)) == 0, "frames below the bad id still read");
    CHECK(shard_read(&s, out, 498, 1, &e) == -1 && shard_read(&s, out, 498, 1, &e) == -1,
          "a frame with a bad id fails every time (never cached)");
    shard_close(&s);

    CHECK(shard_open(&s, good, SHARD_AUTO, 1000, 0, &e) == 0, "open good shard");
    CHECK(shard_read(&s, out, n - 1, 2, &e) == -1, "window past the end fails");
    CHECK_CONTAINS(e.msg, good, "window error names the file");
    CHECK_CONTAINS(e.msg, "window of 2 tokens at position 1199 is outside the shard's 1200 tokens", "window error");
    CHECK(shard_read(&s, out, UINT64_MAX, 2, &e) == -1, "window whose end overflows fails");
    CHECK(shard_read(&s, out, n + 1, 0, &e) == -1, "empty window past the end fails");
    CHECK(shard_read(&s, out, n, 0, &e) == 0, "empty window at the end is fine");
    shard_close(&s);

    // flip bytes inside frame 1: the zstd checksum (or the decoder) must catch it
    free(ids);
    n = 3000;
    ids = malloc(n * sizeof(uint32_t));
    for (size_t i = 0; i < n; i++) ids[i] = (uint32_t)rng_below_(50000);
    CHECK(shard_write_(good, ids, n, 50000, 0, 1000, NULL, 0, &e) == 0, "write random shard");
    free(b);
    b = file_read_(good, &size);
    uint64_t ix = get64_(b + 48), f1 = get64_(b + ix + 8), f2 = get64_(b + ix + 16);
    int all_caught = 1;
    for (uint64_t pos = f1; pos < f2; pos += (f2 - f1) / 16 + 1) {
        memcpy(c = realloc(c, size), b, size);
        c[pos] ^= 0x5a;
        file_write_(bad, c, size);
        if (shard_open(&s, bad, SHARD_AUTO, 0, 0, &e) != 0) continue;  // a flipped header byte may fail at open
        int bad_read = shard_read(&s, out, 1000, 1000, &e) == -1 && strstr(e.msg, "corrupt frame 1") != NULL;
        int good_read = shard_read(&s, out, 2000, 1000, &e) == 0 && memcmp(out, ids + 2000, 1000 * 4) == 0;
        all_caught &= bad_read && good_read;
        shard_close(&s);
    }
    CHECK(all_caught, "every flipped byte in frame 1 is reported as a corrupt frame 1; frame 2 still reads");
    memcpy(c, b, size);
    c[(f1 + f2) / 2] ^= 0xff;
    file_write_(bad, c, size);
    expect_read_fail_(bad, SHARD_AUTO, 0, 1500, 10, "corrupt frame 1 (bytes", "corrupted frame bytes");

    char missing[128];
    path_(missing, sizeof missing, "missing.shard");
    expect_open_fail_(missing, SHARD_AUTO, 0, "No such file or directory", "missing file");
    expect_open_fail_(dir_, SHARD_AUTO, 0, "not a regular file", "directory given as a shard");

    free(out);
    free(c);
    free(b);
    free(ids);
    unlink(good);
    unlink(bad);
}

int main(void) {
    if (testfs_init("seqtrain_test_shard") != 0) return 1;
    test_formats();
    test_roundtrips();
    test_writer();
    test_llmc_raw();
    test_bad_seqtok();
    CHECK(rmdir(dir_) == 0, "every temp file was cleaned up");
    return test_summary();
}
