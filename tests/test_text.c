/*
 * The text reader: plain files line by line (final newline or not, empty lines, '\r' kept), the same
 * bytes zstd-compressed (one frame, several frames, large inputs that span many zstd blocks) read back
 * identically, long lines, and every input that must be refused with a message naming file and line:
 * invalid UTF-8, NUL bytes, truncated zstd, bad jsonl. utf8_valid_prefix is checked on its own against
 * each class of malformed sequence. Everything lives in a mkdtemp directory that is removed at the end.
 */
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "data/text.h"
#include "test.h"
#include "testfs.h"


// data (n,) compressed as one zstd frame at level 3 with a content checksum, as the zstd CLI writes
// it (so corrupted bytes are detectable); returns the compressed size, *out malloc'd
static size_t zstd_frame_(const void *data, size_t n, uint8_t **out) {
    size_t cap = ZSTD_compressBound(n);
    *out = malloc(cap);
    ZSTD_CCtx *c = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, 3);
    ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1);
    size_t got = ZSTD_compress2(c, *out, cap, data, n);
    ZSTD_freeCCtx(c);
    return ZSTD_isError(got) ? 0 : got;
}

// data (n,) compressed by streaming in uneven chunks, so the frame does not record its content size
// (what `cat file | zstd` produces)
static void zstd_write_streamed_(const char *path, const char *data, size_t n) {
    size_t cap = ZSTD_compressBound(n) + 4096;
    uint8_t *z = malloc(cap);
    ZSTD_CCtx *c = ZSTD_createCCtx();
    ZSTD_outBuffer ob = {z, cap, 0};
    for (size_t off = 0, k = 1; off < n; off += k, k = k * 3 + 7) {
        if (k > n - off) k = n - off;
        ZSTD_inBuffer ib = {data + off, k, 0};
        while (ib.pos < ib.size) ZSTD_compressStream2(c, &ob, &ib, ZSTD_e_continue);
    }
    ZSTD_inBuffer end = {NULL, 0, 0};
    while (ZSTD_compressStream2(c, &ob, &end, ZSTD_e_end) > 0) {}
    ZSTD_freeCCtx(c);
    file_write_(path, z, ob.pos);
    free(z);
}

static void zstd_write_(const char *path, const void *data, size_t n) {
    uint8_t *z;
    size_t c = zstd_frame_(data, n, &z);
    file_write_(path, z, c);
    free(z);
}

// splitmix64, seeded, so failures reproduce
static uint64_t rng_state_ = 0x7e57a11ce5eedull;
static uint64_t rng_next_(void) {
    uint64_t z = (rng_state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// The lines a correct reader yields for data (n,): split at '\n', a final '\n' ends the last line
// rather than starting an empty one. Compares them with what text_next returns for path; returns 1 when
// every line matches and the reader ends cleanly, else 0 with why filled in.
static int read_matches_(const char *path, const char *data, size_t n, char *why, size_t why_n) {
    TextReader r;
    Err e = {{0}};
    why[0] = '\0';
    if (text_open(&r, path, NULL, &e) != 0) {
        snprintf(why, why_n, "open: %.200s", e.msg);
        return 0;
    }
    size_t pos = 0;
    uint64_t line = 0;
    int ok = 1;
    for (;;) {
        const char *t;
        size_t len;
        int rc = text_next(&r, &t, &len, &e);
        if (rc < 0) {
            snprintf(why, why_n, "line %llu: %.200s", (unsigned long long)(line + 1), e.msg);
            ok = 0;
            break;
        }
        if (rc == 0) {
            if (pos != n) {
                snprintf(why, why_n, "ended at byte %zu of %zu", pos, n);
                ok = 0;
            }
            break;
        }
        line++;
        if (pos >= n) {
            snprintf(why, why_n, "extra line %llu after the end", (unsigned long long)line);
            ok = 0;
            break;
        }
        const char *nl = memchr(data + pos, '\n', n - pos);
        size_t want = nl ? (size_t)(nl - (data + pos)) : n - pos;
        if (len != want || memcmp(t, data + pos, want) != 0 || t[len] != '\0') {
            snprintf(why, why_n, "line %llu: got %zu bytes, want %zu", (unsigned long long)line, len, want);
            ok = 0;
            break;
        }
        if (r.line_no != line) {
            snprintf(why, why_n, "line_no %llu, want %llu", (unsigned long long)r.line_no, (unsigned long long)line);
            ok = 0;
            break;
        }
        pos += want + (nl ? 1 : 0);
    }
    text_close(&r);
    return ok;
}

// the whole file must fail: returns the first error message (into msg) and the call's return code
static int read_error_(const char *path, const char *key, char *msg, size_t msg_n) {
    TextReader r;
    Err e = {{0}};
    msg[0] = '\0';
    if (text_open(&r, path, key, &e) != 0) {
        snprintf(msg, msg_n, "%s", e.msg);
        return -1;
    }
    int rc;
    const char *t;
    size_t len;
    while ((rc = text_next(&r, &t, &len, &e)) == 1) {}
    if (rc < 0) snprintf(msg, msg_n, "%s", e.msg);
    text_close(&r);
    return rc;
}

static void check_plain_and_zstd_(const char *name, const char *data, size_t n) {
    char p[128], pz[160], why[256];
    path_(p, sizeof p, name);
    snprintf(pz, sizeof pz, "%s.zst", p);
    file_write_(p, data, n);
    zstd_write_(pz, data, n);
    CHECK(read_matches_(p, data, n, why, sizeof why), "plain %s: lines read back %s", name, why);
    CHECK(read_matches_(pz, data, n, why, sizeof why), "zstd %s: lines read back identically %s", name, why);
    unlink(p);
    unlink(pz);
}

static void test_lines_(void) {
    static const char a[] = "first\nsecond\nthird\n";
    static const char b[] = "first\nsecond\nthird";
    static const char c[] = "\n\nmiddle\n\n\nend\n";
    static const char d[] = "dos line\r\nlast\r";
    static const char u[] = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\n\xe4\xb8\xad\xe6\x96\x87\n";
    check_plain_and_zstd_("final_nl.txt", a, sizeof a - 1);
    check_plain_and_zstd_("no_final_nl.txt", b, sizeof b - 1);
    check_plain_and_zstd_("empty_lines.txt", c, sizeof c - 1);
    check_plain_and_zstd_("crlf.txt", d, sizeof d - 1);
    check_plain_and_zstd_("utf8.txt", u, sizeof u - 1);
    check_plain_and_zstd_("one_newline.txt", "\n", 1);

    // spelled out once, so the helper's own notion of lines is checked too
    char p[128];
    path_(p, sizeof p, "spelled.txt");
    file_write_(p, d, sizeof d - 1);
    TextReader r;
    Err e = {{0}};
    const char *t = NULL;
    size_t len = 0;
    CHECK(text_open(&r, p, NULL, &e) == 0, "open %s", p);
    CHECK(text_next(&r, &t, &len, &e) == 1 && len == 9 && memcmp(t, "dos line\r", 9) == 0,
          "'\\r' before '\\n' is kept");
    CHECK(text_next(&r, &t, &len, &e) == 1 && len == 5 && memcmp(t, "last\r", 5) == 0,
          "last line without '\\n' keeps '\\r'");
    CHECK(text_next(&r, &t, &len, &e) == 0, "then end of input");
    CHECK(text_next(&r, &t, &len, &e) == 0, "end of input is sticky");
    text_close(&r);
    unlink(p);

    // an empty file has no lines (plain and zstd of nothing)
    char pz[128];
    path_(p, sizeof p, "empty.txt");
    path_(pz, sizeof pz, "empty.txt.zst");
    file_write_(p, "", 0);
    zstd_write_(pz, "", 0);
    char why[256];
    CHECK(read_matches_(p, "", 0, why, sizeof why), "empty plain file: no lines %s", why);
    CHECK(read_matches_(pz, "", 0, why, sizeof why), "empty zstd frame: no lines %s", why);
    unlink(p);
    unlink(pz);
}

// n bytes of printable text in lines of random length (0..max_line), newline-terminated or not
static char *random_text_(size_t n, size_t max_line, int final_nl) {
    char *s = malloc(n + 1);
    size_t i = 0;
    while (i < n) {
        size_t len = (size_t)(rng_next_() % (max_line + 1));
        for (size_t k = 0; k < len && i < n; k++) s[i++] = (char)(' ' + rng_next_() % 95);
        if (i < n) s[i++] = '\n';
    }
    if (n) s[n - 1] = final_nl ? '\n' : 'x';
    s[n] = '\0';
    return s;
}

static void test_large_(void) {
    // one 1 MB line (longer than any internal buffer), then a short one
    size_t n = (1u << 20) + 3;
    char *big = malloc(n + 8);
    for (size_t i = 0; i < n; i++) big[i] = (char)('a' + i % 26);
    memcpy(big + n, "\nshort\n", 7);
    check_plain_and_zstd_("long_line.txt", big, n + 7);
    free(big);

    // multi-megabyte inputs: many zstd blocks and many reader refills; sizes chosen off any power of two.
    // Hard-to-compress text makes compressed blocks large, easy text makes them small.
    static const size_t sizes[] = {131072, 131073, 300001, 1048576 + 17, 3 * 1048576 + 5};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        char *txt = random_text_(sizes[k], 200, (int)(k & 1));
        char name[64];
        snprintf(name, sizeof name, "random_%zu.txt", sizes[k]);
        check_plain_and_zstd_(name, txt, sizes[k]);
        free(txt);
    }
    // a frame without a recorded content size, decoded purely by streaming
    char *st = random_text_(700001, 300, 1);
    char p[128], why[256];
    path_(p, sizeof p, "streamed.txt.zst");
    zstd_write_streamed_(p, st, 700001);
    CHECK(read_matches_(p, st, 700001, why, sizeof why), "zstd frame of unknown content size read back %s", why);
    unlink(p);
    free(st);

    size_t m = 2 * 1048576 + 11;
    char *rep = malloc(m);
    for (size_t i = 0; i < m; i++) rep[i] = (i % 61 == 60) ? '\n' : (char)('a' + (i / 61) % 26);
    check_plain_and_zstd_("compressible.txt", rep, m);
    free(rep);
}

static void test_zstd_frames_(void) {
    // two frames back to back decode as their concatenation, with a line spanning the boundary
    static const char part1[] = "one\ntwo\nthr", part2[] = "ee\nfour\n";
    uint8_t *z1, *z2;
    size_t c1 = zstd_frame_(part1, sizeof part1 - 1, &z1), c2 = zstd_frame_(part2, sizeof part2 - 1, &z2);
    uint8_t *both = malloc(c1 + c2);
    memcpy(both, z1, c1);
    memcpy(both + c1, z2, c2);
    char p[128], why[256];
    path_(p, sizeof p, "two_frames.zst");
    file_write_(p, both, c1 + c2);
    static const char whole[] = "one\ntwo\nthree\nfour\n";
    CHECK(read_matches_(p, whole, sizeof whole - 1, why, sizeof why), "two concatenated zstd frames %s", why);

    // truncated: the last bytes of the frame are missing
    char msg[1200];
    file_write_(p, z1, c1 - 3);
    CHECK(read_error_(p, NULL, msg, sizeof msg) < 0, "truncated .zst is an error");
    CHECK_CONTAINS(msg, "truncated", "truncated .zst: message says truncated");
    CHECK_CONTAINS(msg, p, "truncated .zst: message names the file");
    // cut right after the 4-byte magic, and inside the frame header
    file_write_(p, z1, 4);
    CHECK(read_error_(p, NULL, msg, sizeof msg) < 0, ".zst of only the magic is an error");
    CHECK_CONTAINS(msg, "truncated", "only the magic: message says truncated");
    file_write_(p, z1, 6);
    CHECK(read_error_(p, NULL, msg, sizeof msg) < 0, ".zst cut in the frame header is an error");
    // truncated after a complete first frame: the second one is cut
    file_write_(p, both, c1 + c2 / 2);
    CHECK(read_error_(p, NULL, msg, sizeof msg) < 0, "second frame cut in half is an error");
    CHECK_CONTAINS(msg, "truncated", "second frame cut: message says truncated");
    // a large frame cut in the middle (many blocks already decoded)
    char *txt = random_text_(600000, 120, 1);
    uint8_t *zb;
    size_t cb = zstd_frame_(txt, 600000, &zb);
    file_write_(p, zb, cb / 2);
    CHECK(read_error_(p, NULL, msg, sizeof msg) < 0, "large .zst cut in half is an error");
    CHECK_CONTAINS(msg, "truncated", "large .zst cut in half: message says truncated");
    // corrupt bytes inside a checksummed frame: an error, not garbage text
    if (cb > 200) zb[cb / 2] ^= 0xFF, zb[cb / 2 + 1] ^= 0x5A;
    file_write_(p, zb, cb);
    CHECK(read_error_(p, NULL, msg, sizeof msg) < 0, "corrupted .zst is an error");
    CHECK_CONTAINS(msg, p, "corrupted .zst: message names the file");
    free(txt);
    free(zb);
    unlink(p);
    free(z1);
    free(z2);
    free(both);
}

static void test_bad_text_(void) {
    char p[128], msg[1200];
    path_(p, sizeof p, "bad.txt");

    // invalid UTF-8 on line 3 (a lone continuation byte), plain and compressed
    static const char inv[] = "fine\nalso fine\nbad \x80 byte\nnever read\n";
    file_write_(p, inv, sizeof inv - 1);
    CHECK(read_error_(p, NULL, msg, sizeof msg) < 0, "invalid UTF-8 is an error");
    CHECK_CONTAINS(msg, p, "invalid UTF-8: message names the file");
    CHECK_CONTAINS(msg, "line 3", "invalid UTF-8: message names line 3");
    CHECK_CONTAINS(msg, "byte 5", "invalid UTF-8: message gives the 1-based byte in the line");
    char pz[160];
    snprintf(pz, sizeof pz, "%s.zst", p);
    zstd_write_(pz, inv, sizeof inv - 1);
    CHECK(read_error_(pz, NULL, msg, sizeof msg) < 0, "invalid UTF-8 inside zstd is an error");
    CHECK_CONTAINS(msg, "line 3", "invalid UTF-8 inside zstd: message names line 3");
    unlink(pz);

    // the lines before the bad one are still delivered
    TextReader r;
    Err e = {{0}};
    const char *t;
    size_t len;
    CHECK(text_open(&r, p, NULL, &e) == 0, "reopen bad.txt");
    CHECK(text_next(&r, &t, &len, &e) == 1 && len == 4, "line 1 before the bad line is read");
    CHECK(text_next(&r, &t, &len, &e) == 1 && len == 9, "line 2 before the bad line is read");
    CHECK(text_next(&r, &t, &len, &e) == -1, "line 3 fails");
    text_close(&r);

    // overlong encoding of '/' (C0 AF) and a surrogate (ED A0 80) are invalid too
    static const char over[] = "a\nb\xc0\xaf\n";
    file_write_(p, over, sizeof over - 1);
    CHECK(read_error_(p, NULL, msg, sizeof msg) < 0, "overlong UTF-8 is an error");
    CHECK_CONTAINS(msg, "line 2", "overlong UTF-8: message names line 2");

    // a NUL byte inside a line
    static const char nul[] = "ok\nhas a \0 NUL\n";
    file_write_(p, nul, sizeof nul - 1);
    CHECK(read_error_(p, NULL, msg, sizeof msg) < 0, "NUL byte is an error");
    CHECK_CONTAINS(msg, "NUL", "NUL byte: message says NUL");
    CHECK_CONTAINS(msg, "line 2", "NUL byte: message names line 2");
    CHECK_CONTAINS(msg, p, "NUL byte: message names the file");
    unlink(p);

    // a missing file and a directory
    char missing[128];
    path_(missing, sizeof missing, "does_not_exist.txt");
    CHECK(read_error_(missing, NULL, msg, sizeof msg) < 0, "missing file is an error");
    CHECK_CONTAINS(msg, missing, "missing file: message names it");
    char sub[128];
    path_(sub, sizeof sub, "subdir");
    mkdir(sub, 0700);
    CHECK(read_error_(sub, NULL, msg, sizeof msg) < 0, "directory is an error");
    CHECK_CONTAINS(msg, sub, "directory: message names it");
    CHECK_CONTAINS(msg, "directory", "directory: message says directory");
    rmdir(sub);
}

static void test_jsonl_(void) {
    char p[128], msg[1200];
    path_(p, sizeof p, "docs.jsonl");
    static const char ok[] = "{\"text\": \"hello\", \"id\": 1}\n"
                             "{\"id\": 2, \"text\": \"line\\nbreak \\u00e9\\t\\\"q\\\"\"}\n"
                             "{\"text\": \"\"}\n"
                             "{\"text\": \"caf\xc3\xa9\"}";
    file_write_(p, ok, sizeof ok - 1);
    TextReader r;
    Err e = {{0}};
    const char *t = NULL;
    size_t len = 0;
    CHECK(text_open(&r, p, "text", &e) == 0, "open jsonl");
    CHECK(text_next(&r, &t, &len, &e) == 1 && len == 5 && memcmp(t, "hello", 5) == 0, "jsonl line 1: field value");
    static const char want2[] = "line\nbreak \xc3\xa9\t\"q\"";
    CHECK(text_next(&r, &t, &len, &e) == 1 && len == sizeof want2 - 1 && memcmp(t, want2, len) == 0,
          "jsonl line 2: escapes decoded, key order irrelevant");
    CHECK(text_next(&r, &t, &len, &e) == 1 && len == 0, "jsonl line 3: empty string");
    CHECK(text_next(&r, &t, &len, &e) == 1 && len == 5 && memcmp(t, "caf\xc3\xa9", 5) == 0,
          "jsonl line 4: raw UTF-8, no final newline");
    CHECK(text_next(&r, &t, &len, &e) == 0, "jsonl: end");
    text_close(&r);

    // the same through zstd
    char pz[160];
    snprintf(pz, sizeof pz, "%s.zst", p);
    zstd_write_(pz, ok, sizeof ok - 1);
    CHECK(text_open(&r, pz, "text", &e) == 0, "open jsonl.zst");
    int n = 0, rc;
    while ((rc = text_next(&r, &t, &len, &e)) == 1) n++;
    CHECK(rc == 0 && n == 4, "jsonl.zst: 4 documents (rc %d, n %d)", rc, n);
    text_close(&r);
    unlink(pz);

    // missing key on line 2
    static const char nokey[] = "{\"text\": \"a\"}\n{\"body\": \"b\"}\n";
    file_write_(p, nokey, sizeof nokey - 1);
    CHECK(read_error_(p, "text", msg, sizeof msg) < 0, "missing key is an error");
    CHECK_CONTAINS(msg, "line 2", "missing key: message names line 2");
    CHECK_CONTAINS(msg, "\"text\"", "missing key: message names the key");
    CHECK_CONTAINS(msg, p, "missing key: message names the file");

    // the key is present but not a string
    static const char notstr[] = "{\"text\": 5}\n";
    file_write_(p, notstr, sizeof notstr - 1);
    CHECK(read_error_(p, "text", msg, sizeof msg) < 0, "non-string field is an error");
    CHECK_CONTAINS(msg, "line 1", "non-string field: message names line 1");

    // not JSON on line 3, and a JSON array rather than an object
    static const char bad[] = "{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"text\": \"c\"\n";
    file_write_(p, bad, sizeof bad - 1);
    CHECK(read_error_(p, "text", msg, sizeof msg) < 0, "bad JSON is an error");
    CHECK_CONTAINS(msg, "line 3", "bad JSON: message names line 3");
    CHECK_CONTAINS(msg, "JSON", "bad JSON: message says JSON");
    static const char arr[] = "[\"text\", \"a\"]\n";
    file_write_(p, arr, sizeof arr - 1);
    CHECK(read_error_(p, "text", msg, sizeof msg) < 0, "a JSON array line is an error");
    CHECK_CONTAINS(msg, "line 1", "JSON array: message names line 1");

    // a line must be one JSON value: a second object or trailing garbage after the first is not jsonl,
    // and taking the first object alone would silently drop the rest of the line
    static const char two_obj[] = "{\"text\": \"a\"}\n{\"text\": \"b\"} {\"text\": \"c\"}\n";
    file_write_(p, two_obj, sizeof two_obj - 1);
    CHECK(read_error_(p, "text", msg, sizeof msg) < 0, "two JSON objects on one line are an error");
    CHECK_CONTAINS(msg, "line 2", "two objects on a line: message names line 2");
    static const char trailing[] = "{\"text\": \"a\"} trailing\n";
    file_write_(p, trailing, sizeof trailing - 1);
    CHECK(read_error_(p, "text", msg, sizeof msg) < 0, "trailing garbage after the object is an error");
    // trailing whitespace (a CRLF file's '\r') is still valid JSON
    static const char crlf[] = "{\"text\": \"a\"}\r\n{\"text\": \"b\"}  \r\n";
    file_write_(p, crlf, sizeof crlf - 1);
    CHECK(read_error_(p, "text", msg, sizeof msg) == 0, "jsonl with CRLF line ends reads cleanly %.200s", msg);

    // invalid UTF-8 is caught before the JSON parser sees it
    static const char inv[] = "{\"text\": \"a\xff\"}\n";
    file_write_(p, inv, sizeof inv - 1);
    CHECK(read_error_(p, "text", msg, sizeof msg) < 0, "jsonl with invalid UTF-8 is an error");
    CHECK_CONTAINS(msg, "UTF-8", "jsonl invalid UTF-8: message says UTF-8");

    // an escaped NUL (\u0000) must not silently cut the document short: either the whole value comes
    // back (len 3) or the line is refused, as a raw NUL byte is in plain text
    static const char esc_nul[] = "{\"text\": \"a\\u0000b\"}\n";
    file_write_(p, esc_nul, sizeof esc_nul - 1);
    CHECK(text_open(&r, p, "text", &e) == 0, "open jsonl with \\u0000");
    rc = text_next(&r, &t, &len, &e);
    CHECK(rc < 0 || (rc == 1 && len == 3), "jsonl \"a\\u0000b\": refused or read whole (rc %d, len %zu)", rc,
          rc == 1 ? len : (size_t)0);
    text_close(&r);
    // an escaped backslash followed by "u0000" is plain text, not a NUL: it must be read as is
    static const char esc_bs[] = "{\"text\": \"a\\\\u0000b\"}\n";
    file_write_(p, esc_bs, sizeof esc_bs - 1);
    CHECK(text_open(&r, p, "text", &e) == 0, "open jsonl with \\\\u0000");
    rc = text_next(&r, &t, &len, &e);
    CHECK(rc == 1 && len == 8 && memcmp(t, "a\\u0000b", 8) == 0,
          "jsonl \"a\\\\u0000b\": a backslash then u0000, read as 8 bytes (rc %d)", rc);
    text_close(&r);
    unlink(p);
}

static void test_utf8_(void) {
    struct { const char *s; size_t len, want; const char *what; } cases[] = {
        {"", 0, 0, "empty"},
        {"plain ascii", 11, 11, "ASCII"},
        {"\x7f", 1, 1, "DEL is valid"},
        {"\xc2\x80", 2, 2, "U+0080 (smallest 2-byte)"},
        {"\xdf\xbf", 2, 2, "U+07FF"},
        {"\xe0\xa0\x80", 3, 3, "U+0800 (smallest 3-byte)"},
        {"\xed\x9f\xbf", 3, 3, "U+D7FF (below the surrogates)"},
        {"\xee\x80\x80", 3, 3, "U+E000 (above the surrogates)"},
        {"\xef\xbf\xbf", 3, 3, "U+FFFF"},
        {"\xf0\x90\x80\x80", 4, 4, "U+10000 (smallest 4-byte)"},
        {"\xf4\x8f\xbf\xbf", 4, 4, "U+10FFFF (largest)"},
        {"ab\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z", 12, 12, "mixed multi-byte"},
        {"\xc0\x80", 2, 0, "overlong NUL C0 80"},
        {"\xc1\xbf", 2, 0, "overlong C1 BF"},
        {"\xe0\x80\x80", 3, 0, "overlong 3-byte E0 80 80"},
        {"\xe0\x9f\xbf", 3, 0, "overlong 3-byte E0 9F BF"},
        {"\xf0\x80\x80\x80", 4, 0, "overlong 4-byte F0 80 80 80"},
        {"\xf0\x8f\xbf\xbf", 4, 0, "overlong 4-byte F0 8F BF BF"},
        {"\xed\xa0\x80", 3, 0, "surrogate U+D800 (ED A0 80)"},
        {"\xed\xbf\xbf", 3, 0, "surrogate U+DFFF (ED BF BF)"},
        {"\xf4\x90\x80\x80", 4, 0, "U+110000 (F4 90 80 80)"},
        {"\xf5\x80\x80\x80", 4, 0, "lead byte F5"},
        {"\xf8\x88\x80\x80\x80", 5, 0, "5-byte form F8"},
        {"\xff", 1, 0, "FF"},
        {"\xfe", 1, 0, "FE"},
        {"\x80", 1, 0, "lone continuation byte"},
        {"ab\xbf", 3, 2, "continuation byte after ASCII"},
        {"\xc3", 1, 0, "2-byte sequence cut after the lead"},
        {"ab\xe2\x82", 4, 2, "3-byte sequence cut after 2 bytes"},
        {"xyz\xf0\x9f\x98", 6, 3, "4-byte sequence cut after 3 bytes"},
        {"\xc3\x28", 2, 0, "2-byte lead followed by ASCII"},
        {"\xe2\x28\xa1", 3, 0, "3-byte sequence with a bad second byte"},
        {"\xe2\x82\x28", 3, 0, "3-byte sequence with a bad third byte"},
        {"\xf0\x9f\x98\x28", 4, 0, "4-byte sequence with a bad last byte"},
        {"ok\xc3\xa9\xed\xa0\x80tail", 10, 4, "valid prefix then a surrogate: index of the surrogate"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t got = utf8_valid_prefix(cases[i].s, cases[i].len);
        CHECK(got == cases[i].want, "utf8_valid_prefix: %s (got %zu, want %zu)", cases[i].what, got, cases[i].want);
    }
    // the length bounds the scan: a valid sequence beyond len is not looked at, one cut by len is invalid
    CHECK(utf8_valid_prefix("a\xc3\xa9", 1) == 1, "utf8_valid_prefix stops at len");
    CHECK(utf8_valid_prefix("a\xc3\xa9", 2) == 1, "a sequence cut by len is invalid");
}

int main(void) {
    if (testfs_init("seqtrain_text") != 0) return 1;
    test_lines_();
    test_large_();
    test_zstd_frames_();
    test_bad_text_();
    test_jsonl_();
    test_utf8_();
    CHECK(rmdir(dir_) == 0, "every temp file was cleaned up");
    return test_summary();
}
