/*
 * The training-data loader. The trainer's exact resume rests on three properties checked here:
 *   - every window is T+1 consecutive tokens of one shard starting at a multiple of T, and an epoch
 *     visits each window exactly once (a bijection, whatever the shuffle);
 *   - the stream is a pure function of (shards, T, seed): same seed, same batches; cache size irrelevant;
 *   - the cursor (epoch, pos) is the whole state: a fresh loader seeked to a saved cursor yields exactly
 *     the batches the original yields next, across epoch boundaries too.
 * The shards hold self-describing tokens, tok(id, i) = id << 20 | i, so the content of any window tells
 * which shard and which position it came from, and a wrong window cannot pass unnoticed. Everything lives
 * in a mkdtemp directory that is removed at the end.
 */
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/loader.h"
#include "test.h"
#include "testfs.h"


// ----------------------------------------------------------------------------------------------------
// test data

#define ID_SHIFT 20
#define POS_MASK ((1u << ID_SHIFT) - 1)
#define VOCAB_BIG (1u << 22)  // ids up to 4 shards of < 2^20 tokens; needs 4-byte tokens
#define FRAME 64              // small frames, so windows span several frames and caches must evict

static uint32_t tok_(uint32_t id, uint64_t i) { return id << ID_SHIFT | (uint32_t)i; }

// the three shards of the multi-shard tests, written in an order unlike their sorted one
typedef struct { const char *name; uint32_t id; uint64_t len; } ShardSpec;
static const ShardSpec specs_[3] = {
    {"b.shard", 0, 1000},
    {"c.shard", 1, 777},
    {"a.shard", 2, 1501},
};
static const int sorted_[3] = {2, 0, 1};  // specs_ index of a, b, c: the order glob must give

// a seqtok shard of tok(id, i) for i < len; sha NULL = no tokenizer recorded
static int write_seqtok_(const char *rel, uint32_t id, uint64_t len, uint32_t vocab, const uint8_t *sha) {
    char p[160];
    path_(p, sizeof p, rel);
    ShardWriter w;
    Err e = {{0}};
    if (shard_writer_open(&w, p, vocab, 0, sha, FRAME, 1, &e) != 0) {
        fprintf(stderr, "writer: %s\n", e.msg);
        return -1;
    }
    uint32_t buf[97];  // appended in odd-sized batches that straddle frames
    for (uint64_t i = 0; i < len;) {
        size_t k = 0;
        for (; k < 97 && i < len; k++, i++) buf[k] = tok_(id, i) % vocab;
        if (shard_writer_append(&w, buf, k, &e) != 0) {
            fprintf(stderr, "append: %s\n", e.msg);
            shard_writer_abort(&w);
            return -1;
        }
    }
    return shard_writer_close(&w, &e);
}

// little-endian u16 tokens ids (n,) after an optional llm.c header (256 x int32: magic, version, count)
static void write_u16_(const char *path, const uint32_t *ids, size_t n, int llmc) {
    size_t hdr = llmc ? 1024 : 0;
    uint8_t *b = calloc(hdr + 2 * n + 1, 1);
    if (llmc) {
        uint32_t h[3] = {20240520u, 1u, (uint32_t)n};
        for (int k = 0; k < 3; k++)
            for (int j = 0; j < 4; j++) b[4 * k + j] = (uint8_t)(h[k] >> (8 * j));
    }
    for (size_t i = 0; i < n; i++) {
        b[hdr + 2 * i] = (uint8_t)ids[i];
        b[hdr + 2 * i + 1] = (uint8_t)(ids[i] >> 8);
    }
    file_write_(path, b, hdr + 2 * n);
    free(b);
}

// ----------------------------------------------------------------------------------------------------
// loader helpers

static int open_(Loader *l, const char *const *rel, int n, int T, int shuffle, uint64_t seed, size_t cache,
                 ShardFormat fmt, uint32_t vocab, Err *e) {
    e->msg[0] = '\0';  // messages are printed with the check: only this call's error belongs there
    char paths[8][160];
    const char *pp[8];
    for (int i = 0; i < n && i < 8; i++) {
        path_(paths[i], sizeof paths[i], rel[i]);
        pp[i] = paths[i];
    }
    LoaderOpts o = {pp, n, "data.train", fmt, vocab, T, shuffle, seed, cache, NULL, 0, 0};
    return loader_open(l, &o, e);
}

// loader_next, or an error when the loader is not open: a failed open leaves it zeroed, and a check that
// already reported that failure should not be followed by a crash
static int next_(Loader *l, int32_t *in, int32_t *tg, int B, Err *e) {
    if (l->n_windows == 0) return err_set(e, "loader is not open");
    return loader_next(l, in, tg, B, e);
}

static int open_multi_(Loader *l, int T, int shuffle, uint64_t seed, size_t cache, Err *e) {
    const char *pat[1] = {"multi/*.shard"};
    return open_(l, pat, 1, T, shuffle, seed, cache, SHARD_AUTO, 0, e);
}

// first global window index of each spec (by specs_ index) under sorted order, and N, for T
static uint64_t layout_(int T, uint64_t first[3]) {
    uint64_t acc = 0;
    for (int k = 0; k < 3; k++) {
        int s = sorted_[k];
        first[s] = acc;
        acc += (specs_[s].len - 1) / (uint64_t)T;
    }
    return acc;
}

// Which global window inputs/targets (T,) hold, from their content alone; UINT64_MAX when the content is
// not T+1 consecutive tokens of one of the three shards starting at a multiple of T, or targets are not
// inputs shifted by one.
static uint64_t decode_(const int32_t *in, const int32_t *tg, int T) {
    uint32_t id = (uint32_t)in[0] >> ID_SHIFT, start = (uint32_t)in[0] & POS_MASK;
    int s = -1;
    for (int k = 0; k < 3; k++)
        if (specs_[k].id == id) s = k;
    // the window's last token, start+T, must lie inside the shard
    if (s < 0 || start % (uint32_t)T != 0 || start + (uint64_t)T >= specs_[s].len) return UINT64_MAX;
    for (int t = 0; t < T; t++) {
        if ((uint32_t)in[t] != tok_(id, start + (uint64_t)t)) return UINT64_MAX;
        if ((uint32_t)tg[t] != tok_(id, start + (uint64_t)t + 1)) return UINT64_MAX;
    }
    uint64_t first[3];
    layout_(T, first);
    return first[s] + start / (uint64_t)T;
}

// n windows through loader_next in batches of B (the last batch may be short); their global indices by
// content into idx (n,) (UINT64_MAX for malformed ones). Returns loader_next's failure, else 0.
static int read_indices_(Loader *l, uint64_t *idx, uint64_t n, int B, Err *e) {
    int T = l->T;
    e->msg[0] = '\0';
    int32_t *in = malloc((size_t)B * T * sizeof(int32_t)), *tg = malloc((size_t)B * T * sizeof(int32_t));
    int rc = 0;
    for (uint64_t i = 0; i < n && rc == 0;) {
        int b = (uint64_t)B < n - i ? B : (int)(n - i);
        rc = next_(l, in, tg, b, e);
        for (int k = 0; k < b && rc == 0; k++, i++) idx[i] = decode_(in + (size_t)k * T, tg + (size_t)k * T, T);
    }
    free(in);
    free(tg);
    return rc;
}

// nb batches of B windows: inputs then targets of each batch, appended to buf ((nb*2*B*T,) int32)
static int read_batches_(Loader *l, int32_t *buf, int nb, int B, Err *e) {
    size_t bt = (size_t)B * l->T;
    e->msg[0] = '\0';
    for (int i = 0; i < nb; i++)
        if (next_(l, buf + 2 * bt * i, buf + 2 * bt * i + bt, B, e) != 0) return -1;
    return 0;
}

// the cursor after `taken` windows: the epoch rolls over lazily, when the next window is taken
static LoaderCursor cursor_after_(uint64_t taken, uint64_t N) {
    LoaderCursor c = {taken / N, taken % N};
    if (taken > 0 && c.pos == 0) c.epoch--, c.pos = N;
    return c;
}

// 1 when idx (n,) holds each of 0..n-1 exactly once
static int is_permutation_(const uint64_t *idx, uint64_t n) {
    unsigned char *seen = calloc(n ? n : 1, 1);
    int ok = 1;
    for (uint64_t i = 0; i < n && ok; i++) {
        if (idx[i] >= n || seen[idx[i]]) ok = 0;
        else seen[idx[i]] = 1;
    }
    free(seen);
    return ok;
}

// ----------------------------------------------------------------------------------------------------
// tests

static void test_layout_(void) {
    Loader l;
    Err e = {{0}};
    const int T = 16;
    uint64_t first[3], N = layout_(T, first);
    CHECK(open_multi_(&l, T, 0, 1, 1 << 20, &e) == 0, "open multi/*.shard: %.200s", e.msg);
    CHECK(l.n_shards == 3, "glob found 3 shards (got %d)", l.n_shards);
    CHECK(l.n_windows == N && N == 93 + 62 + 48, "n_windows = sum of floor((n-1)/T) = %llu (got %llu)",
          (unsigned long long)N, (unsigned long long)l.n_windows);
    CHECK(l.n_tokens == 1000 + 777 + 1501, "n_tokens summed over shards");
    CHECK(l.vocab_size == VOCAB_BIG, "vocab from the shard headers");
    for (int k = 0; k < 3 && l.n_shards == 3; k++) {
        const char *p = l.shards[k].path, *slash = strrchr(p, '/');
        CHECK_STR(slash ? slash + 1 : p, specs_[sorted_[k]].name, "shard %d in sorted order", k);
        CHECK(l.first_window[k] == first[sorted_[k]], "first_window[%d]", k);
    }
    CHECK(l.first_window[3] == N, "first_window[n_shards] = N");

    // shuffle off: window p of every epoch is window p, and its content is tokens [pT, pT+T] of its shard
    uint64_t *idx = malloc(3 * N * sizeof *idx);
    CHECK(read_indices_(&l, idx, 3 * N, 7, &e) == 0, "three epochs in batches of 7: %.200s", e.msg);
    int bad = 0;
    for (uint64_t i = 0; i < 3 * N; i++) bad += idx[i] != i % N;
    CHECK(bad == 0, "shuffle off: identity order, every window well formed, epochs repeat (%d bad)", bad);
    LoaderCursor c = loader_cursor(&l);
    CHECK(c.epoch == 2 && c.pos == N, "cursor after 3 whole epochs is (2, N) (got %llu, %llu)",
          (unsigned long long)c.epoch, (unsigned long long)c.pos);
    int moved = 0;
    for (uint64_t p = 0; p < N; p++) moved += loader_window_at(&l, 5, p) != p;
    CHECK(moved == 0, "shuffle off: window_at(5, p) == p for every p (%d differ)", moved);
    free(idx);
    loader_close(&l);

    // T=1: every token but the last starts a window
    CHECK(open_multi_(&l, 1, 1, 3, 1 << 20, &e) == 0, "open with T=1: %.200s", e.msg);
    uint64_t N1 = layout_(1, first);
    CHECK(l.n_windows == N1 && N1 == 999 + 776 + 1500, "T=1: n_windows = n_tokens - n_shards");
    idx = malloc(N1 * sizeof *idx);
    CHECK(read_indices_(&l, idx, N1, 13, &e) == 0, "T=1 epoch: %.200s", e.msg);
    CHECK(is_permutation_(idx, N1), "T=1, shuffled: one epoch visits every window once, all well formed");
    free(idx);
    loader_close(&l);

    // T=100: each window spans two or three 64-token frames
    CHECK(open_multi_(&l, 100, 1, 3, 1 << 20, &e) == 0, "open with T=100: %.200s", e.msg);
    uint64_t N100 = layout_(100, first);
    CHECK(l.n_windows == N100 && N100 == 15 + 9 + 7, "T=100: n_windows");
    idx = malloc(N100 * sizeof *idx);
    CHECK(read_indices_(&l, idx, N100, 4, &e) == 0 && is_permutation_(idx, N100),
          "T=100, windows across frames: one epoch visits every window once, all well formed");
    free(idx);
    loader_close(&l);
}

static void test_shuffle_(void) {
    Loader l;
    Err e = {{0}};
    const int T = 16;
    uint64_t first[3], N = layout_(T, first);
    CHECK(open_multi_(&l, T, 1, 42, 1 << 20, &e) == 0, "open shuffled: %.200s", e.msg);

    // loader_window_at is a bijection on [0, N) for several epochs
    uint64_t *perm = malloc(N * sizeof *perm);
    int all_perm = 1;
    for (uint64_t ep = 0; ep < 6; ep++) {
        for (uint64_t p = 0; p < N; p++) perm[p] = loader_window_at(&l, ep, p);
        all_perm &= is_permutation_(perm, N);
    }
    CHECK(all_perm, "window_at is a permutation of [0, N) in epochs 0..5");

    // what loader_next reads (by content) is what window_at says, for two epochs and a bit
    uint64_t total = 2 * N + 10;
    uint64_t *idx = malloc(total * sizeof *idx);
    CHECK(read_indices_(&l, idx, total, 5, &e) == 0, "read 2 epochs + 10 windows: %.200s", e.msg);
    CHECK(is_permutation_(idx, N), "epoch 0 through loader_next visits every window exactly once");
    CHECK(is_permutation_(idx + N, N), "epoch 1 through loader_next visits every window exactly once");
    int agree = 1;
    for (uint64_t i = 0; i < total; i++) agree &= idx[i] == loader_window_at(&l, i / N, i % N);
    CHECK(agree, "loader_next reads window_at(epoch, pos) at every step");
    uint64_t same = 0, fixed = 0;
    for (uint64_t p = 0; p < N; p++) same += idx[p] == idx[N + p], fixed += idx[p] == p;
    CHECK(same < N / 4, "epoch 1 order differs from epoch 0 (%llu of %llu positions equal)", (unsigned long long)same,
          (unsigned long long)N);
    CHECK(fixed < N / 4, "the shuffle moves windows (%llu of %llu fixed points)", (unsigned long long)fixed,
          (unsigned long long)N);
    free(perm);
    free(idx);
    loader_close(&l);

    // permutations for every small N, and N at powers of two and four (the Feistel domain boundaries):
    // one raw shard of N+1 tokens with T=1 has exactly N windows
    static const uint64_t more[] = {63, 64, 65, 255, 256, 257, 1023, 1024, 1025, 4097};
    int bad_n = 0;
    char first_bad[96] = "";
    for (int k = 0; k < 40 + (int)(sizeof more / sizeof more[0]); k++) {
        uint64_t n = k < 40 ? (uint64_t)k + 1 : more[k - 40];
        uint32_t *ids = malloc((n + 1) * sizeof *ids);
        for (uint64_t i = 0; i <= n; i++) ids[i] = (uint32_t)(i % 1000);
        char p[160];
        path_(p, sizeof p, "small/n.raw");
        write_u16_(p, ids, n + 1, 0);
        free(ids);
        const char *pat[1] = {"small/n.raw"};
        Loader s;
        if (open_(&s, pat, 1, 1, 1, 99 + n, 0, SHARD_RAW_U16, 1000, &e) != 0 || s.n_windows != n) {
            bad_n++;
            continue;
        }
        uint64_t *q = malloc(n * sizeof *q);
        for (uint64_t ep = 0; ep < 4; ep++) {
            for (uint64_t i = 0; i < n; i++) q[i] = loader_window_at(&s, ep, i);
            if (!is_permutation_(q, n) && !first_bad[0])
                snprintf(first_bad, sizeof first_bad, "(first: N=%llu epoch %llu)", (unsigned long long)n,
                         (unsigned long long)ep);
            bad_n += !is_permutation_(q, n);
        }
        free(q);
        loader_close(&s);
        unlink(p);
    }
    CHECK(bad_n == 0, "window_at is a bijection for N = 1..40 and around powers of 2 and 4 %s", first_bad);
}

static void test_determinism_(void) {
    Err e = {{0}};
    const int T = 16, B = 5, NB = 100;  // 500 windows: about 2.5 epochs
    size_t n = (size_t)NB * 2 * B * T;
    int32_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    Loader la, lb, lc;
    CHECK(open_multi_(&la, T, 1, 7, 1 << 20, &e) == 0 && read_batches_(&la, a, NB, B, &e) == 0,
          "seed 7, first: %.200s", e.msg);
    CHECK(open_multi_(&lb, T, 1, 7, 1 << 20, &e) == 0 && read_batches_(&lb, b, NB, B, &e) == 0,
          "seed 7, second: %.200s", e.msg);
    CHECK(open_multi_(&lc, T, 1, 8, 1 << 20, &e) == 0 && read_batches_(&lc, c, NB, B, &e) == 0,
          "seed 8: %.200s", e.msg);
    CHECK(memcmp(a, b, n * sizeof *a) == 0, "same seed: identical batch streams over 2.5 epochs");
    CHECK(memcmp(a, c, n * sizeof *a) != 0, "different seeds: different streams");
    // and different in most places, not just somewhere
    size_t diff = 0, bt = (size_t)B * T;
    for (int i = 0; i < NB; i++)
        for (int k = 0; k < B; k++) diff += a[2 * bt * i + (size_t)k * T] != c[2 * bt * i + (size_t)k * T];
    CHECK(diff > (size_t)NB * B / 2, "different seeds: most windows differ (%zu of %d)", diff, NB * B);
    loader_close(&la);
    loader_close(&lb);
    loader_close(&lc);

    // the cache size never changes what is read: 1 byte (2 frames per shard, constant eviction) vs plenty
    Loader small, big;
    int32_t *s = malloc(n * sizeof *s);
    CHECK(open_multi_(&small, T, 1, 7, 1, &e) == 0 && read_batches_(&small, s, NB, B, &e) == 0,
          "tiny cache: %.200s", e.msg);
    CHECK(small.n_shards == 3 && small.shards[0].cache_slots == 2, "tiny cache: 2 frame slots per shard (got %d)",
          small.n_shards == 3 ? small.shards[0].cache_slots : -1);
    CHECK(open_multi_(&big, T, 1, 7, 64u << 20, &e) == 0 && read_batches_(&big, b, NB, B, &e) == 0,
          "big cache: %.200s", e.msg);
    CHECK(memcmp(a, s, n * sizeof *a) == 0, "tiny cache: same stream as the 1 MiB cache");
    CHECK(memcmp(a, b, n * sizeof *a) == 0, "64 MiB cache: same stream as the 1 MiB cache");
    loader_close(&small);
    loader_close(&big);
    free(a);
    free(b);
    free(c);
    free(s);
}

// read K batches, save the cursor, read M more (A); a fresh loader seeked to the cursor reads M (B); a
// used loader (advanced by `detour` batches first, into another epoch) seeked to it reads M (C)
static void check_resume_(int T, int B, int K, int M, int detour, size_t cache, const char *what) {
    Err e = {{0}};
    Loader l1, l2, l3;
    size_t n = (size_t)M * 2 * B * T;
    int32_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    int32_t *skip = malloc(((size_t)(K > detour ? K : detour) + 1) * 2 * B * T * sizeof *skip);
    int ok = open_multi_(&l1, T, 1, 1234, 1 << 20, &e) == 0 && read_batches_(&l1, skip, K, B, &e) == 0;
    CHECK(ok, "%s: first %d batches: %.200s", what, K, e.msg);
    if (!ok) goto out;
    LoaderCursor cur = loader_cursor(&l1);
    LoaderCursor want = cursor_after_((uint64_t)K * B, l1.n_windows);
    CHECK(cur.epoch == want.epoch && cur.pos == want.pos, "%s: cursor (%llu, %llu), want (%llu, %llu)", what,
          (unsigned long long)cur.epoch, (unsigned long long)cur.pos, (unsigned long long)want.epoch,
          (unsigned long long)want.pos);
    CHECK(read_batches_(&l1, a, M, B, &e) == 0, "%s: %d batches after the cursor: %.200s", what, M, e.msg);

    CHECK(open_multi_(&l2, T, 1, 1234, cache, &e) == 0, "%s: fresh loader: %.200s", what, e.msg);
    CHECK(loader_seek(&l2, cur, &e) == 0, "%s: seek: %.200s", what, e.msg);
    LoaderCursor back = loader_cursor(&l2);
    CHECK(back.epoch == cur.epoch && back.pos == cur.pos, "%s: cursor reads back after seek", what);
    CHECK(read_batches_(&l2, b, M, B, &e) == 0 && memcmp(a, b, n * sizeof *a) == 0,
          "%s: fresh loader seeked to the cursor reads the same %d batches", what, M);

    CHECK(open_multi_(&l3, T, 1, 1234, 1 << 20, &e) == 0 && read_batches_(&l3, skip, detour, B, &e) == 0 &&
              loader_seek(&l3, cur, &e) == 0,
          "%s: used loader seeks: %.200s", what, e.msg);
    CHECK(read_batches_(&l3, c, M, B, &e) == 0 && memcmp(a, c, n * sizeof *a) == 0,
          "%s: a loader already %d batches in, seeked to the cursor, reads the same batches", what, detour);
    loader_close(&l2);
    loader_close(&l3);
    loader_close(&l1);
out:
    free(a);
    free(b);
    free(c);
    free(skip);
}

static void test_cursor_(void) {
    const int T = 16;  // N = 203
    check_resume_(T, 8, 0, 10, 3, 1 << 20, "from the start");
    check_resume_(T, 8, 3, 10, 40, 1 << 20, "inside epoch 0");
    check_resume_(T, 8, 22, 10, 5, 1 << 20, "epoch 0 -> 1 inside the resumed batches");  // windows 176..255
    check_resume_(T, 8, 80, 30, 7, 1 << 20, "after several epochs");                   // from window 640
    check_resume_(T, 7, 29, 5, 2, 1 << 20, "cursor exactly at an epoch's end");         // 203 = 29*7
    check_resume_(T, 203, 2, 2, 1, 1 << 20, "batch = one whole epoch");
    check_resume_(T, 5, 61, 12, 90, 1, "tiny cache in the resumed loader");
    check_resume_(3, 64, 40, 20, 11, 1 << 20, "T=3, many epochs");

    // a cursor at the end of an epoch and the start of the next are the same place
    Err e = {{0}};
    Loader a, b;
    uint64_t N = 203;
    int32_t x[2 * 4 * 16], y[2 * 4 * 16];
    CHECK(open_multi_(&a, T, 1, 5, 1 << 20, &e) == 0 && open_multi_(&b, T, 1, 5, 1 << 20, &e) == 0, "open two");
    LoaderCursor end0 = {3, N}, start1 = {4, 0};
    CHECK(loader_seek(&a, end0, &e) == 0 && loader_seek(&b, start1, &e) == 0,
          "seek to (3, N) and (4, 0): %.200s", e.msg);
    CHECK(read_batches_(&a, x, 1, 4, &e) == 0 && read_batches_(&b, y, 1, 4, &e) == 0 && memcmp(x, y, sizeof x) == 0,
          "(3, N) continues like (4, 0)");
    LoaderCursor ca = loader_cursor(&a);
    CHECK(ca.epoch == 4 && ca.pos == 4, "cursor after wrapping from (3, N) is (4, 4)");

    // pos beyond the epoch: the data changed since the checkpoint
    LoaderCursor past = {0, N + 1};
    e.msg[0] = '\0';
    CHECK(loader_seek(&a, past, &e) != 0, "seek to pos N+1 is an error");
    CHECK_CONTAINS(e.msg, "204", "seek error names the position");
    CHECK_CONTAINS(e.msg, "203", "seek error names the epoch length");
    LoaderCursor far = {0, UINT64_MAX};
    CHECK(loader_seek(&a, far, &e) != 0, "seek to pos UINT64_MAX is an error");
    // a large epoch number is fine: the permutation is a pure function of it
    LoaderCursor late = {1000000, 17};
    CHECK(loader_seek(&a, late, &e) == 0, "seek to epoch 1e6");
    uint64_t idx[3];
    CHECK(read_indices_(&a, idx, 3, 3, &e) == 0 && idx[0] == loader_window_at(&a, 1000000, 17) &&
              idx[2] == loader_window_at(&a, 1000000, 19),
          "epoch 1e6 reads window_at(1e6, 17..19)");
    loader_close(&a);
    loader_close(&b);
}

static void test_patterns_(void) {
    Err e = {{0}};
    Loader l;
    char p1[160], p2[160];

    // a list of two patterns: shards in pattern order, each pattern's matches sorted
    const char *two[2] = {"multi/c.shard", "multi/[ab].shard"};
    CHECK(open_(&l, two, 2, 16, 0, 1, 1 << 20, SHARD_AUTO, 0, &e) == 0, "two patterns: %.200s", e.msg);
    CHECK(l.n_shards == 3 && l.n_windows == 48 + 93 + 62, "two patterns: 3 shards, %d windows", 48 + 93 + 62);
    if (l.n_shards == 3) {
        CHECK(strstr(l.shards[0].path, "c.shard") && strstr(l.shards[1].path, "a.shard") &&
                  strstr(l.shards[2].path, "b.shard"),
              "two patterns: c, then a and b sorted");
    }
    int32_t in[16], tg[16];
    CHECK(next_(&l, in, tg, 1, &e) == 0 && (uint32_t)in[0] == tok_(1, 0), "two patterns: window 0 is c's first");
    loader_close(&l);

    // a pattern that matches nothing, alone and after one that matched (no leak of the first's paths)
    const char *none[1] = {"multi/*.nothing"};
    e.msg[0] = '\0';
    CHECK(open_(&l, none, 1, 16, 0, 1, 1 << 20, SHARD_AUTO, 0, &e) != 0, "pattern matching nothing: error");
    path_(p1, sizeof p1, "multi/*.nothing");
    CHECK_CONTAINS(e.msg, p1, "no match: message names the pattern");
    CHECK_CONTAINS(e.msg, "matches no file", "no match: message says it matches no file");
    CHECK_CONTAINS(e.msg, "data.train", "no match: message names the setting");
    const char *then_none[2] = {"multi/*.shard", "nowhere/x.shard"};
    e.msg[0] = '\0';
    CHECK(open_(&l, then_none, 2, 16, 0, 1, 1 << 20, SHARD_AUTO, 0, &e) != 0, "second pattern matching nothing: error");
    CHECK_CONTAINS(e.msg, "nowhere/x.shard", "second pattern: message names it");
    loader_close(&l);  // harmless after a failed open

    // shards of different vocab sizes: both files named
    CHECK(write_seqtok_("vocab/x.shard", 0, 300, VOCAB_BIG, NULL) == 0 &&
              write_seqtok_("vocab/y.shard", 0, 300, 50000, NULL) == 0,
          "write two shards of different vocab sizes");
    const char *vv[1] = {"vocab/*.shard"};
    e.msg[0] = '\0';
    CHECK(open_(&l, vv, 1, 16, 0, 1, 1 << 20, SHARD_AUTO, 0, &e) != 0, "different vocab sizes: error");
    path_(p1, sizeof p1, "vocab/x.shard");
    path_(p2, sizeof p2, "vocab/y.shard");
    CHECK_CONTAINS(e.msg, p1, "vocab mismatch names the first file");
    CHECK_CONTAINS(e.msg, p2, "vocab mismatch names the second file");
    CHECK_CONTAINS(e.msg, "vocab", "vocab mismatch says vocab");
    unlink(p1);
    unlink(p2);

    // shards from different tokenizers
    uint8_t sha1[32], sha2[32];
    memset(sha1, 0x11, 32);
    memset(sha2, 0x22, 32);
    CHECK(write_seqtok_("vocab/x.shard", 0, 300, VOCAB_BIG, sha1) == 0 &&
              write_seqtok_("vocab/y.shard", 0, 300, VOCAB_BIG, sha2) == 0,
          "write two shards of different tokenizers");
    e.msg[0] = '\0';
    CHECK(open_(&l, vv, 1, 16, 0, 1, 1 << 20, SHARD_AUTO, 0, &e) != 0, "different tokenizers: error");
    CHECK_CONTAINS(e.msg, "tokenizer", "tokenizer mismatch says tokenizer");
    unlink(p1);
    unlink(p2);

    // too short for one window of T+1 tokens; exactly T+1 gives one window
    CHECK(write_seqtok_("short/s.shard", 3, 10, VOCAB_BIG, NULL) == 0, "write a 10-token shard");
    const char *sh[1] = {"short/s.shard"};
    e.msg[0] = '\0';
    CHECK(open_(&l, sh, 1, 16, 0, 1, 1 << 20, SHARD_AUTO, 0, &e) != 0, "shard shorter than T+1: error");
    CHECK_CONTAINS(e.msg, "seq_len", "too short: message mentions seq_len");
    CHECK(open_(&l, sh, 1, 10, 1, 1, 1 << 20, SHARD_AUTO, 0, &e) != 0, "10 tokens, T=10: no window, error");
    CHECK(open_(&l, sh, 1, 9, 1, 1, 1 << 20, SHARD_AUTO, 0, &e) == 0 && l.n_windows == 1, "10 tokens, T=9: one window");
    loader_close(&l);
    CHECK(open_(&l, sh, 1, 0, 0, 1, 1 << 20, SHARD_AUTO, 0, &e) != 0, "T=0 is an error");

    // a pattern naming a directory
    const char *dirpat[1] = {"short"};
    CHECK(open_(&l, dirpat, 1, 4, 0, 1, 1 << 20, SHARD_AUTO, 0, &e) != 0, "a directory as a shard: error");
    CHECK_CONTAINS(e.msg, "not a regular file", "directory: message says not a regular file");

    // a short shard between long ones holds no window and is skipped, whatever its place
    const char *mixed[3] = {"multi/a.shard", "short/s.shard", "multi/b.shard"};
    CHECK(open_(&l, mixed, 3, 16, 0, 1, 1 << 20, SHARD_AUTO, 0, &e) == 0, "a, short, b: %.200s", e.msg);
    CHECK(l.n_shards == 3 && l.n_windows == 93 + 62, "a, short, b: the short shard adds no window");
    uint64_t *idx = malloc(l.n_windows * sizeof *idx);
    CHECK(read_indices_(&l, idx, l.n_windows, 9, &e) == 0, "a, short, b: read an epoch");
    int bad = 0;  // decode_ numbers windows as a, b, c: here a's then b's, so the identity again
    for (uint64_t i = 0; i < l.n_windows; i++) bad += idx[i] != i;
    CHECK(bad == 0, "a, short, b: windows come from a then b, none from the short shard (%d bad)", bad);
    free(idx);
    loader_close(&l);
    const char *last_short[2] = {"multi/c.shard", "short/s.shard"};
    CHECK(open_(&l, last_short, 2, 16, 1, 9, 1 << 20, SHARD_AUTO, 0, &e) == 0 && l.n_windows == 48,
          "c, short: 48 windows");
    idx = malloc(48 * sizeof *idx);
    CHECK(read_indices_(&l, idx, 48, 48, &e) == 0, "c, short: read an epoch");
    int from_c = 1;
    for (int i = 0; i < 48; i++) from_c &= idx[i] != UINT64_MAX;
    CHECK(from_c, "c, short (last): every window is a well formed window of c");
    free(idx);
    loader_close(&l);
    path_(p1, sizeof p1, "short/s.shard");
    unlink(p1);
}

// ids >= vocab in llm.c and raw shards are found when read: an error naming file and position
static void test_bad_ids_(void) {
    Err e = {{0}};
    Loader l;
    uint32_t ids[100];
    for (int i = 0; i < 100; i++) ids[i] = (uint32_t)i;
    char raw[160], llmc[160];
    path_(raw, sizeof raw, "bad/ids.raw");
    path_(llmc, sizeof llmc, "bad/ids.bin");
    write_u16_(raw, ids, 100, 0);
    write_u16_(llmc, ids, 100, 1);
    int32_t in[8], tg[8];

    // raw_u16, vocab 50, T=8, in order: windows 0..5 cover tokens 0..48, window 6 holds id 50 at position 50
    const char *pr[1] = {"bad/ids.raw"};
    CHECK(open_(&l, pr, 1, 8, 0, 1, 0, SHARD_RAW_U16, 50, &e) == 0, "open raw_u16 with vocab 50: %.200s", e.msg);
    int good = 0, rc = 0;
    while (good < 20 && (rc = next_(&l, in, tg, 1, &e)) == 0) good++;
    CHECK(rc == -1 && good == 6, "raw_u16: 6 windows read, the 7th fails (read %d, rc %d)", good, rc);
    CHECK_CONTAINS(e.msg, raw, "bad id: message names the file");
    CHECK_CONTAINS(e.msg, "position 50", "bad id: message names position 50");
    CHECK_CONTAINS(e.msg, "vocab", "bad id: message says vocab");
    loader_close(&l);

    // the same through llm.c format with an explicit vocab, in one batch call
    const char *pl[1] = {"bad/ids.bin"};
    int32_t bin[10 * 8], btg[10 * 8];
    CHECK(open_(&l, pl, 1, 8, 0, 1, 0, SHARD_LLMC, 50, &e) == 0, "open llmc with vocab 50: %.200s", e.msg);
    e.msg[0] = '\0';
    CHECK(next_(&l, bin, btg, 10, &e) == -1, "llmc: a batch holding a bad id fails");
    CHECK_CONTAINS(e.msg, llmc, "llmc bad id: message names the file");
    CHECK_CONTAINS(e.msg, "position 50", "llmc bad id: message names position 50");
    loader_close(&l);

    // shuffled: windows 6..11 of 12 hold bad ids, so the first epoch hits one, as an error, never a crash;
    // the cursor stays on the bad window, so asking again fails again rather than skipping data
    CHECK(open_(&l, pr, 1, 8, 1, 77, 0, SHARD_RAW_U16, 50, &e) == 0, "open raw_u16 shuffled");
    int calls = 0;
    while (calls < 12 && next_(&l, in, tg, 1, &e) == 0) calls++;
    CHECK(calls < 12, "shuffled: a bad window is met within the first epoch (after %d good ones)", calls);
    CHECK_CONTAINS(e.msg, raw, "shuffled bad id: message names the file");
    LoaderCursor stuck = loader_cursor(&l);
    CHECK(next_(&l, in, tg, 1, &e) == -1 && loader_cursor(&l).pos == stuck.pos,
          "after a bad window the cursor does not move past it");
    loader_close(&l);

    // vocab large enough: the same files read cleanly, llm.c default vocab (50257) included
    CHECK(open_(&l, pl, 1, 8, 0, 1, 0, SHARD_AUTO, 0, &e) == 0 && l.vocab_size == 50257, "llmc auto: vocab 50257");
    uint64_t nw = l.n_windows;
    int all = 1;
    for (uint64_t w = 0; w < nw; w++) {
        all &= next_(&l, in, tg, 1, &e) == 0;
        for (int t = 0; t < 8; t++) all &= in[t] == (int32_t)(w * 8 + (uint64_t)t) && tg[t] == in[t] + 1;
    }
    CHECK(all && nw == 12, "llmc auto: all 12 windows read, content = positions");
    loader_close(&l);
    unlink(raw);
    unlink(llmc);
}

static void test_edges_(void) {
    Err e = {{0}};
    Loader l;
    char p[160];

    // n_windows == 1: every epoch is that one window
    CHECK(write_seqtok_("edge/one.shard", 0, 17, VOCAB_BIG, NULL) == 0, "write a 17-token shard");
    const char *one[1] = {"edge/one.shard"};
    CHECK(open_(&l, one, 1, 16, 1, 5, 1 << 20, SHARD_AUTO, 0, &e) == 0 && l.n_windows == 1,
          "T=16 over 17 tokens: one window");
    int32_t in[5 * 16], tg[5 * 16];
    CHECK(next_(&l, in, tg, 5, &e) == 0, "5 windows of a 1-window loader: %.200s", e.msg);
    int same = 1;
    for (int b = 0; b < 5; b++)
        for (int t = 0; t < 16; t++) same &= in[b * 16 + t] == t && tg[b * 16 + t] == t + 1;
    CHECK(same, "n_windows 1: the batch is the one window 5 times");
    LoaderCursor c = loader_cursor(&l);
    CHECK(c.epoch == 4 && c.pos == 1, "n_windows 1: cursor (4, 1) after 5 windows (got %llu, %llu)",
          (unsigned long long)c.epoch, (unsigned long long)c.pos);
    CHECK(loader_window_at(&l, 123, 0) == 0, "n_windows 1: window_at is 0");
    loader_close(&l);
    path_(p, sizeof p, "edge/one.shard");
    unlink(p);

    // ~1M windows: a u16 raw shard of 2,000,001 tokens with T=2; window_at must be a bijection
    const uint64_t n_tok = 2000001, N = 1000000;
    uint32_t *ids = malloc(n_tok * sizeof *ids);
    for (uint64_t i = 0; i < n_tok; i++) ids[i] = (uint32_t)(i % 65536);
    path_(p, sizeof p, "edge/big.raw");
    write_u16_(p, ids, n_tok, 0);
    free(ids);
    const char *big[1] = {"edge/big.raw"};
    CHECK(open_(&l, big, 1, 2, 1, 2024, 0, SHARD_RAW_U16, 65536, &e) == 0 && l.n_windows == N,
          "1M windows: %.200s", e.msg);
    uint64_t *perm = malloc(N * sizeof *perm);
    for (uint64_t ep = 0; ep < 2; ep++) {
        for (uint64_t i = 0; i < N; i++) perm[i] = loader_window_at(&l, ep, i);
        CHECK(is_permutation_(perm, N), "1M windows: window_at is a bijection in epoch %llu", (unsigned long long)ep);
    }
    // and the first windows read carry the tokens of the windows window_at names
    int32_t bin[64 * 2], btg[64 * 2];
    CHECK(next_(&l, bin, btg, 64, &e) == 0, "1M windows: read 64");
    int match = 1;
    for (int b = 0; b < 64; b++) {
        uint64_t w = loader_window_at(&l, 0, (uint64_t)b);
        for (int t = 0; t < 2; t++) {
            match &= bin[2 * b + t] == (int32_t)((2 * w + (uint64_t)t) % 65536);
            match &= btg[2 * b + t] == (int32_t)((2 * w + (uint64_t)t + 1) % 65536);
        }
    }
    CHECK(match, "1M windows: content of the first 64 windows matches window_at");
    free(perm);
    loader_close(&l);
    unlink(p);
}

int main(void) {
    if (testfs_init("seqtrain_loader") != 0) return 1;
    static const char *subs[] = {"multi", "vocab", "short", "bad", "edge", "small"};
    char p[160];
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        path_(p, sizeof p, subs[i]);
        mkdir(p, 0700);
    }
    int wrote = 1;
    for (int k = 0; k < 3; k++) {
        char rel[64];
        snprintf(rel, sizeof rel, "multi/%s", specs_[k].name);
        wrote &= write_seqtok_(rel, specs_[k].id, specs_[k].len, VOCAB_BIG, NULL) == 0;
    }
    CHECK(wrote, "write the three test shards");

    test_layout_();
    test_shuffle_();
    test_determinism_();
    test_cursor_();
    test_patterns_();
    test_bad_ids_();
    test_edges_();

    for (int k = 0; k < 3; k++) {
        char rel[64];
        snprintf(rel, sizeof rel, "multi/%s", specs_[k].name);
        path_(p, sizeof p, rel);
        unlink(p);
    }
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        path_(p, sizeof p, subs[i]);
        rmdir(p);
    }
    CHECK(rmdir(dir_) == 0, "every temp file was cleaned up");
    return test_summary();
}
