#include "data/text.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zstd.h>
#include <cjson/cJSON.h>

static const uint8_t ZSTD_MAGIC_[4] = {0x28, 0xB5, 0x2F, 0xFD};

int text_open(TextReader *r, const char *path, const char *jsonl_key, Err *e) {
    memset(r, 0, sizeof *r);
    r->fp = fopen(path, "rb");
    if (!r->fp) return err_set(e, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(r->fp), &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            fclose(r->fp);
            r->fp = NULL;
            return err_set(e, "%s: is a directory, expected a text file", path);
        }
        r->file_size = (uint64_t)st.st_size;
    }
    r->path = xstrdup(path);
    r->jsonl_key = jsonl_key;
    r->max_line = TEXT_LINE_MAX;
    r->in_size = ZSTD_DStreamInSize();
    r->in = xmalloc(r->in_size);
    // the sniffed bytes of a plain file are moved into buf, so buf must hold in_size bytes too
    r->buf_cap = ZSTD_DStreamOutSize() > r->in_size ? ZSTD_DStreamOutSize() : r->in_size;
    r->buf = xmalloc(r->buf_cap);
    // sniff the zstd magic; whatever was read stays in `in` and is consumed first
    r->in_len = fread(r->in, 1, r->in_size, r->fp);
    r->file_pos = r->in_len;
    if (r->in_len >= 4 && memcmp(r->in, ZSTD_MAGIC_, 4) == 0) {
        r->dctx = ZSTD_createDStream();
        ZSTD_initDStream(r->dctx);
    } else {
        memcpy(r->buf, r->in, r->in_len);  // plain text: in_size == buf_cap is not guaranteed
        r->buf_len = r->in_len;
        r->in_len = 0;
    }
    return 0;
}

// refill buf with the next decoded bytes; returns bytes available (0 at end), -1 on error
static long text_fill_(TextReader *r, Err *e) {
    r->buf_pos = 0;
    r->buf_len = 0;
    while (r->buf_len == 0) {
        if (r->dctx) {
            if (r->in_pos == r->in_len) {
                r->in_len = fread(r->in, 1, r->in_size, r->fp);
                r->in_pos = 0;
                r->file_pos += r->in_len;
                if (r->in_len == 0) {
                    if (ferror(r->fp)) return err_set(e, "%s: read error: %s", r->path, strerror(errno));
                    // a non-zero hint means the decoder still expects bytes of the current frame
                    if (r->zstd_hint != 0) return err_set(e, "%s: truncated zstd stream", r->path);
                    return 0;
                }
            }
            ZSTD_inBuffer ib = {r->in, r->in_len, r->in_pos};
            ZSTD_outBuffer ob = {r->buf, r->buf_cap, 0};
            size_t ret = ZSTD_decompressStream(r->dctx, &ob, &ib);
            if (ZSTD_isError(ret))
                return err_set(e, "%s: corrupt zstd data near compressed byte %llu: %s", r->path,
                               (unsigned long long)(r->file_pos - r->in_len + ib.pos), ZSTD_getErrorName(ret));
            r->in_pos = ib.pos;
            r->buf_len = ob.pos;
            r->zstd_hint = ret;
        } else {
            r->buf_len = fread(r->buf, 1, r->buf_cap, r->fp);
            r->file_pos += r->buf_len;
            if (r->buf_len == 0) {
                if (ferror(r->fp)) return err_set(e, "%s: read error: %s", r->path, strerror(errno));
                return 0;
            }
        }
    }
    return (long)r->buf_len;
}

// read one raw line into r->line; 1 ok, 0 end of input, -1 error
static int text_read_line_(TextReader *r, Err *e) {
    r->line_len = 0;
    int got_any = 0;
    for (;;) {
        if (r->buf_pos == r->buf_len) {
            if (r->eof) break;
            long n = text_fill_(r, e);
            if (n < 0) return -1;
            if (n == 0) { r->eof = 1; break; }
        }
        got_any = 1;
        uint8_t *start = r->buf + r->buf_pos;
        size_t avail = r->buf_len - r->buf_pos;
        uint8_t *nl = memchr(start, '\n', avail);
        size_t take = nl ? (size_t)(nl - start) : avail;
        if (r->line_len + take > r->max_line)
            return err_set(e, "%s: line %llu is longer than %zu bytes, the most one line may hold (is it a text file?)",
                           r->path, (unsigned long long)r->line_no + 1, r->max_line);
        if (r->max_bytes && r->bytes_read + take > r->max_bytes)
            return err_set(e, "%s: holds more than %llu MiB of text by line %llu, the most this reader takes (a "
                           "compressed file can expand a thousandfold: is it the right file?)", r->path,
                           (unsigned long long)(r->max_bytes >> 20), (unsigned long long)r->line_no + 1);
        if (r->line_len + take + 1 > r->line_cap) {
            r->line_cap = (r->line_len + take + 1) * 2;
            r->line = xrealloc(r->line, r->line_cap);
        }
        memcpy(r->line + r->line_len, start, take);
        r->line_len += take;
        r->buf_pos += take + (nl ? 1 : 0);
        r->bytes_read += take + (nl ? 1 : 0);
        if (nl) break;
    }
    if (!got_any && r->line_len == 0) return 0;
    if (!r->line) r->line = xmalloc(r->line_cap = 64);
    r->line[r->line_len] = '\0';
    r->line_no++;
    return 1;
}

// does a JSON line hold the escape \u0000? cJSON would decode it into a NUL that ends the C string,
// silently cutting the document short; walking escape by escape keeps "\\u0000" (a backslash) apart
static int json_has_escaped_nul_(const char *s, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] == 'u' && i + 5 < n && !strncmp(s + i + 2, "0000", 4)) return 1;
        i++;  // skip the escaped character
    }
    return 0;
}

int text_next(TextReader *r, const char **text, size_t *len, Err *e) {
    int rc = text_read_line_(r, e);
    if (rc <= 0) return rc;
    if (memchr(r->line, '\0', r->line_len))
        return err_set(e, "%s: line %llu contains a NUL byte (binary file? expected UTF-8 text)", r->path,
                       (unsigned long long)r->line_no);
    size_t ok = utf8_valid_prefix(r->line, r->line_len);
    if (ok != r->line_len)
        return err_set(e, "%s: line %llu, byte %zu: invalid UTF-8 (0x%02x); convert the file to UTF-8 first "
                       "(e.g. iconv -f latin1 -t utf-8)", r->path, (unsigned long long)r->line_no, ok + 1,
                       (unsigned)(uint8_t)r->line[ok]);
    if (!r->jsonl_key) {
        *text = r->line;
        *len = r->line_len;
        return 1;
    }
    if (json_has_escaped_nul_(r->line, r->line_len))
        return err_set(e, "%s: line %llu: contains the escape \\u0000 (a NUL character), which a text document "
                       "cannot hold", r->path, (unsigned long long)r->line_no);
    // the line is NUL-terminated and NUL-free (checked above), so requiring the parse to end at the NUL
    // rejects trailing garbage such as a second object on the same line
    cJSON *j = cJSON_ParseWithOpts(r->line, NULL, 1);
    if (!j) return err_set(e, "%s: line %llu: not valid JSON (jsonl expects one JSON object per line)", r->path,
                           (unsigned long long)r->line_no);
    const cJSON *f = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, r->jsonl_key) : NULL;
    if (!cJSON_IsString(f)) {
        cJSON_Delete(j);
        return err_set(e, "%s: line %llu: no string field \"%s\" (choose the field with --jsonl-key)", r->path,
                       (unsigned long long)r->line_no, r->jsonl_key);
    }
    free(r->field);
    r->field = xstrdup(f->valuestring);  // cJSON strings are NUL-free, so strlen is the length
    cJSON_Delete(j);
    *text = r->field;
    *len = strlen(r->field);
    return 1;
}

void text_close(TextReader *r) {
    if (r->fp) fclose(r->fp);
    if (r->dctx) ZSTD_freeDStream(r->dctx);
    free(r->in);
    free(r->buf);
    free(r->line);
    free(r->field);
    free(r->path);
    memset(r, 0, sizeof *r);
}

size_t utf8_valid_prefix(const char *str, size_t len) {
    const uint8_t *s = (const uint8_t *)str;
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t n;
        uint32_t cp, min;
        if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; min = 0x80; }
        else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; min = 0x800; }
        else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; min = 0x10000; }
        else return i;
        if (i + n > len) return i;
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += n;
    }
    return len;
}
