/*
 * Line-by-line text input for the tokenizer: plain files or zstd-compressed ones (detected by the
 * zstd magic, so `wiki.train.tokens.zst` is read as is), UTF-8 checked (an invalid byte is an error
 * naming file, line and byte offset), and optionally one field of a JSON object per line (jsonl).
 * Memory is bounded by the longest line, whatever the file size, and a line is at most max_line bytes
 * (TEXT_LINE_MAX unless the caller lowers it): /dev/zero or a .zst of one endless line is an error naming
 * the file and line, not a process that grows until the kernel kills it. A caller that keeps everything
 * it reads (the zero-shot sets) also bounds the decoded total with max_bytes.
 */
#ifndef SEQ_TEXT_H
#define SEQ_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "core/err.h"

#define TEXT_LINE_MAX ((size_t)64 << 20)  // bytes of one line (one document for seqtok)

typedef struct TextReader {
    char *path;
    FILE *fp;
    void *dctx;           // ZSTD_DStream when the file is zstd-compressed
    uint8_t *in;          // compressed input buffer
    size_t in_size, in_pos, in_len;
    uint8_t *buf;         // decoded bytes not yet returned
    size_t buf_len, buf_pos, buf_cap;
    size_t zstd_hint;     // last ZSTD_decompressStream return: 0 when a frame ended cleanly
    int eof;              // no more input bytes
    char *line;           // the current line (NUL-terminated, no '\n')
    size_t line_len, line_cap;
    uint64_t line_no;     // 1-based number of the current line
    uint64_t bytes_read;  // decoded bytes consumed so far (for progress)
    uint64_t file_size;   // bytes on disk (compressed size for zstd input)
    uint64_t file_pos;    // bytes read from disk so far
    size_t max_line;      // longest line taken (TEXT_LINE_MAX after text_open)
    uint64_t max_bytes;   // decoded bytes taken in all, 0 = no bound (text_open's default)
    const char *jsonl_key;  // non-NULL: each line is a JSON object, yield this string field
    char *field;          // the extracted field (jsonl mode)
} TextReader;

// jsonl_key: NULL for plain text (one line = one document), else the field to read from each line.
int text_open(TextReader *r, const char *path, const char *jsonl_key, Err *e);
// Next document: 1 and *text/*len set, 0 at end of input, -1 on error. *text stays valid until the
// next call. Lines end at '\n'; a trailing '\r' is kept (it is part of the text).
int text_next(TextReader *r, const char **text, size_t *len, Err *e);
void text_close(TextReader *r);

// index of the first byte that is not valid UTF-8, or len if all valid (overlongs, surrogates and
// code points above U+10FFFF are invalid)
size_t utf8_valid_prefix(const char *s, size_t len);

#endif
