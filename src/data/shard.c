/*
 * Token shards: the seqtok format (zstd frames + frame index), llm.c .bin shards and raw token arrays,
 * behind one reader, and a writer that only ever leaves complete files on disk.
 *
 * shard_open checks the header and the whole index against the file size, so everything later reads
 * from the file can be trusted to lie inside it and no size computation can overflow. shard_read
 * decodes only the frames a window touches, through a small LRU cache; a frame's ids are checked once,
 * when it enters the cache. llmc/raw windows are pread and checked on every read (nothing is cached).
 * Multi-byte fields are little-endian on disk and always go through the get/put helpers below.
 */
#include "data/shard.h"
#include "core/files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#define LLMC_HEADER_BYTES 1024      // 256 x int32
#define LLMC_MAGIC_U16 20240520     // GPT-2 shards: version 1, uint16 tokens
#define LLMC_MAGIC_U32 20240801     // Llama-3 shards: version 7, uint32 tokens
#define RAW_CHUNK_TOKENS 65536      // llmc/raw windows are read through a scratch of this many tokens
#define FLAG_TOKENIZER_HASH 1u
#define FLAG_MINMAX 2u
#define ZSTD_LEVEL_DEFAULT 3

static const char *format_names_[] = {"auto", "seqtok", "llmc", "raw_u16", "raw_u32"};

int shard_format_parse(const char *name, ShardFormat *out) {
    for (int i = 0; i < (int)(sizeof format_names_ / sizeof format_names_[0]); i++) {
        if (name && strcmp(name, format_names_[i]) == 0) {
            *out = (ShardFormat)i;
            return 0;
        }
    }
    return -1;
}

const char *shard_format_name(ShardFormat f) {
    if ((int)f < 0 || (int)f >= (int)(sizeof format_names_ / sizeof format_names_[0])) return "unknown";
    return format_names_[f];
}

// ----------------------------------------------------------------------------------------------------
// little-endian encoding

static uint32_t get_u32_(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64_(const uint8_t *p) { return (uint64_t)get_u32_(p) | (uint64_t)get_u32_(p + 4) << 32; }

static void put_u32_(uint8_t *p, uint32_t x) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(x >> (8 * i));
}

static void put_u64_(uint8_t *p, uint64_t x) {
    put_u32_(p, (uint32_t)x);
    put_u32_(p + 4, (uint32_t)(x >> 32));
}

// n tokens of width tb: in (n*tb,) little-endian bytes -> out (n,)
static void tokens_decode_(uint32_t *out, const uint8_t *in, size_t n, int tb) {
    if (tb == 2) {
        for (size_t i = 0; i < n; i++) out[i] = (uint32_t)in[2 * i] | (uint32_t)in[2 * i + 1] << 8;
    } else {
        for (size_t i = 0; i < n; i++) out[i] = get_u32_(in + 4 * i);
    }
}

// in (n,) -> out (n*tb,) little-endian bytes; ids were checked to fit tb when appended
static void tokens_encode_(uint8_t *out, const uint32_t *in, size_t n, int tb) {
    if (tb == 2) {
        for (size_t i = 0; i < n; i++) {
            out[2 * i] = (uint8_t)in[i];
            out[2 * i + 1] = (uint8_t)(in[i] >> 8);
        }
    } else {
        for (size_t i = 0; i < n; i++) put_u32_(out + 4 * i, in[i]);
    }
}

// ----------------------------------------------------------------------------------------------------
// reader

// ids (n,) are tokens [pos0, pos0+n) of the shard
static int ids_check_(const Shard *s, const uint32_t *ids, size_t n, uint64_t pos0, Err *e) {
    uint32_t max = 0;  // a branch-free max first: the common all-valid case stays a vectorised loop
    for (size_t i = 0; i < n; i++) max = ids[i] > max ? ids[i] : max;
    if (n == 0 || max < s->vocab_size) return 0;
    size_t i = 0;
    while (ids[i] < s->vocab_size) i++;
    return err_set(e, "%s: token id %u at position %llu is >= vocab size %u (the shard does not match this vocabulary)",
                   s->path, ids[i], (unsigned long long)(pos0 + i), s->vocab_size);
}

// exactly n bytes at offset off; a short read means the file shrank after it was opened
static int read_at_(const Shard *s, void *buf, size_t n, uint64_t off, Err *e) {
    uint8_t *p = buf;
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(s->fd, p + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            return err_set(e, "%s: cannot read %zu bytes at offset %llu: %s", s->path, n, (unsigned long long)off,
                           strerror(errno));
        }
        if (r == 0) {
            return err_set(e, "%s: file ends at byte %llu, expected %zu bytes at offset %llu (did it change while open?)",
                           s->path, (unsigned long long)(off + got), n, (unsigned long long)off);
        }
        got += (size_t)r;
    }
    return 0;
}

static int bad_magic_(const Shard *s, ShardFormat asked, Err *e) {
    if (asked == SHARD_SEQTOK) {
        return err_set(e, "%s: not a seqtok shard (bad magic; for llm.c .bin use format llmc, for headerless "
                          "files raw_u16/raw_u32 with a vocab size)", s->path);
    }
    if (asked == SHARD_LLMC) {
        return err_set(e, "%s: not an llm.c shard (magic is not %d or %d; seqtok shards use format seqtok, "
                          "headerless files raw_u16/raw_u32 with a vocab size)", s->path, LLMC_MAGIC_U16, LLMC_MAGIC_U32);
    }
    return err_set(e, "%s: not a seqtok or llm.c shard (unrecognised magic; for headerless token files use "
                      "format raw_u16/raw_u32 with a vocab size)", s->path);
}

// head (nhead,) = the first min(file size, 128) bytes. A file too short to hold the magic still counts
// as seqtok when what it has matches, so it is reported as truncated rather than foreign.
static int is_seqtok_(const uint8_t *head, size_t nhead) {
    return memcmp(head, SHARD_MAGIC, nhead < 8 ? nhead : 8) == 0;
}

static int is_llmc_(const uint8_t *head, size_t nhead) {
    if (nhead < 4) return 0;
    uint32_t magic = get_u32_(head);
    return magic == LLMC_MAGIC_U16 || magic == LLMC_MAGIC_U32;
}

static int open_seqtok_(Shard *s, const uint8_t *h, size_t nhead, uint32_t vocab_arg, size_t cache_bytes, Err *e) {
    const char *p = s->path;
    unsigned long long fsize = s->file_size;
    if (!is_seqtok_(h, nhead)) return bad_magic_(s, SHARD_SEQTOK, e);
    if (s->file_size < SHARD_HEADER_BYTES) {
        return err_set(e, "%s: truncated: the seqtok header is %d bytes but the file has %llu", p, SHARD_HEADER_BYTES,
                       fsize);
    }
    uint32_t version = get_u32_(h + 8), header_bytes = get_u32_(h + 12), vocab = get_u32_(h + 16);
    uint32_t tb = get_u32_(h + 20), ft = get_u32_(h + 24), flags = get_u32_(h + 28);
    uint64_t n_tokens = get_u64_(h + 32), n_frames = get_u64_(h + 40), index_offset = get_u64_(h + 48);
    if (version != SHARD_VERSION) {
        return err_set(e, "%s: unsupported version %u (this build reads version %d)", p, version, SHARD_VERSION);
    }
    if (header_bytes != SHARD_HEADER_BYTES) {
        return err_set(e, "%s: corrupt header: header size %u (expected %d)", p, header_bytes, SHARD_HEADER_BYTES);
    }
    if (tb != 2 && tb != 4) return err_set(e, "%s: corrupt header: token width %u bytes (expected 2 or 4)", p, tb);
    if (vocab == 0) return err_set(e, "%s: corrupt header: vocab size 0", p);
    if (tb == 2 && vocab > 65536) {
        return err_set(e, "%s: corrupt header: vocab size %u does not fit 2-byte tokens", p, vocab);
    }
    if (ft == 0 || ft > SHARD_FRAME_TOKENS_MAX) {
        return err_set(e, "%s: corrupt header: %u tokens per frame (expected 1..%u)", p, ft, SHARD_FRAME_TOKENS_MAX);
    }
    if (flags & ~(FLAG_TOKENIZER_HASH | FLAG_MINMAX)) {
        return err_set(e, "%s: unsupported flags 0x%x (this build knows 0x%x)", p, flags, FLAG_TOKENIZER_HASH | FLAG_MINMAX);
    }
    uint64_t want_frames = n_tokens / ft + (n_tokens % ft != 0);
    if (n_frames != want_frames) {
        return err_set(e, "%s: corrupt header: %llu tokens in frames of %u need %llu frames, header says %llu", p,
                       (unsigned long long)n_tokens, ft, (unsigned long long)want_frames, (unsigned long long)n_frames);
    }
    if (index_offset < SHARD_HEADER_BYTES) {
        return err_set(e, "%s: corrupt header: index offset %llu lies inside the header", p,
                       (unsigned long long)index_offset);
    }
    // the index is (n_frames+1) u64 at index_offset and ends the file; compare without overflowing
    if (index_offset > s->file_size || n_frames >= (s->file_size - index_offset) / 8) {
        return err_set(e, "%s: truncated: header says %llu frames (index at byte %llu) but file ends at byte %llu", p,
                       (unsigned long long)n_frames, (unsigned long long)index_offset, fsize);
    }
    uint64_t end = index_offset + 8 * (n_frames + 1);
    if (end != s->file_size) {
        return err_set(e, "%s: corrupt: %llu bytes after the index (it ends at byte %llu, the file at %llu)", p,
                       (unsigned long long)(s->file_size - end), (unsigned long long)end, fsize);
    }
    if (vocab_arg != 0 && vocab_arg != vocab) {
        return err_set(e, "%s: vocab size %u was asked for but the shard was written for vocab size %u", p, vocab_arg,
                       vocab);
    }
    s->vocab_size = vocab;
    s->token_bytes = (int)tb;
    s->n_tokens = n_tokens;
    s->frame_tokens = ft;
    s->n_frames = n_frames;
    s->has_tokenizer_hash = (flags & FLAG_TOKENIZER_HASH) != 0;
    if (s->has_tokenizer_hash) memcpy(s->tokenizer_sha256, h + 64, 32);
    s->has_minmax = (flags & FLAG_MINMAX) != 0;
    if (s->has_minmax) {
        s->min_id = get_u32_(h + 56);
        s->max_id = get_u32_(h + 60);
        // the recorded range already tells whether the ids fit the vocabulary; say so before any read
        if (n_tokens > 0 && (s->min_id > s->max_id || s->max_id >= vocab))
            return err_set(e, "%s: header records ids %u .. %u but vocab size %u (corrupt header, or the shard does "
                           "not match this vocabulary)", p, s->min_id, s->max_id, vocab);
    }

    // the index: its size is bounded by the file's (checked above)
    size_t n_off = (size_t)(n_frames + 1);
    uint8_t *raw = xmalloc(8 * n_off);
    if (read_at_(s, raw, 8 * n_off, index_offset, e) != 0) {
        free(raw);
        return -1;
    }
    s->frame_offsets = xmalloc(8 * n_off);
    for (size_t i = 0; i < n_off; i++) s->frame_offsets[i] = get_u64_(raw + 8 * i);
    free(raw);
    const uint64_t *off = s->frame_offsets;
    if (off[0] != SHARD_HEADER_BYTES || off[n_frames] != index_offset) {
        return err_set(e, "%s: corrupt index: frames span bytes %llu..%llu, expected %d..%llu", p,
                       (unsigned long long)off[0], (unsigned long long)off[n_frames], SHARD_HEADER_BYTES,
                       (unsigned long long)index_offset);
    }
    // a frame can be no bigger than zstd's bound for its tokens: this also bounds the compressed scratch
    size_t bound = ZSTD_compressBound((size_t)ft * tb);
    size_t max_frame = 0;
    for (uint64_t i = 0; i < n_frames; i++) {
        if (off[i + 1] <= off[i]) {
            return err_set(e, "%s: corrupt index: frame %llu offsets %llu..%llu are out of order", p,
                           (unsigned long long)i, (unsigned long long)off[i], (unsigned long long)off[i + 1]);
        }
        if (off[i + 1] - off[i] > bound) {
            return err_set(e, "%s: corrupt index: frame %llu is %llu bytes, more than zstd's bound %zu for %u tokens",
                           p, (unsigned long long)i, (unsigned long long)(off[i + 1] - off[i]), bound, ft);
        }
        if (off[i + 1] - off[i] > max_frame) max_frame = (size_t)(off[i + 1] - off[i]);
    }

    s->dctx = ZSTD_createDCtx();
    if (!s->dctx) return err_set(e, "%s: cannot create a zstd decompression context", p);
    size_t slot_tokens = n_tokens < ft ? (size_t)n_tokens : ft;  // a short shard needs no full-size slots
    s->cbuf_size = max_frame;
    s->cbuf = xmalloc(max_frame);
    s->rbuf_size = slot_tokens * tb;
    s->rbuf = xmalloc(s->rbuf_size);
    // slots: cache_bytes worth (slot metadata included), at least 2, never more than there are frames
    uint64_t slots = cache_bytes / (slot_tokens * sizeof(uint32_t) + sizeof(ShardFrame));
    if (slots < 2) slots = 2;
    if (slots > n_frames) slots = n_frames;
    if (slots > INT_MAX) slots = INT_MAX;
    s->cache_slots = (int)slots;
    s->cache = xcalloc(slots, sizeof(ShardFrame));
    // slot tokens are allocated on first use, so memory follows what is actually read
    for (int i = 0; i < s->cache_slots; i++) s->cache[i].index = UINT64_MAX;
    return 0;
}

static int open_llmc_(Shard *s, const uint8_t *h, size_t nhead, uint32_t vocab_arg, Err *e) {
    const char *p = s->path;
    if (!is_llmc_(h, nhead)) return bad_magic_(s, SHARD_LLMC, e);
    if (s->file_size < LLMC_HEADER_BYTES) {
        return err_set(e, "%s: truncated: the llm.c header is %d bytes but the file has %llu", p, LLMC_HEADER_BYTES,
                       (unsigned long long)s->file_size);
    }
    uint32_t magic = get_u32_(h), version = get_u32_(h + 4);
    int32_t count = (int32_t)get_u32_(h + 8);
    uint32_t want_version = magic == LLMC_MAGIC_U16 ? 1 : 7;
    if (version != want_version) {
        return err_set(e, "%s: unsupported llm.c version %u for magic %u (expected version %u)", p, version, magic,
                       want_version);
    }
    if (count <= 0) return err_set(e, "%s: corrupt llm.c header: token count %d", p, (int)count);
    s->token_bytes = magic == LLMC_MAGIC_U16 ? 2 : 4;
    s->n_tokens = (uint64_t)count;
    s->data_offset = LLMC_HEADER_BYTES;
    uint64_t want_size = LLMC_HEADER_BYTES + s->n_tokens * (uint64_t)s->token_bytes;
    if (s->file_size != want_size) {
        return err_set(e, "%s: size mismatch: llm.c header says %llu tokens (%llu bytes) but the file is %llu bytes", p,
                       (unsigned long long)s->n_tokens, (unsigned long long)want_size, (unsigned long long)s->file_size);
    }
    s->vocab_size = vocab_arg ? vocab_arg : magic == LLMC_MAGIC_U16 ? 50257 : 128256;
    return 0;
}

static int open_raw_(Shard *s, uint32_t vocab_arg, Err *e) {
    const char *p = s->path, *name = shard_format_name(s->format);
    s->token_bytes = s->format == SHARD_RAW_U16 ? 2 : 4;
    if (vocab_arg == 0) {
        return err_set(e, "%s: format %s has no header, so the vocab size must be given (--vocab N)", p, name);
    }
    if (s->file_size % (uint64_t)s->token_bytes != 0) {
        return err_set(e, "%s: size %llu bytes is not a multiple of %d (format %s)", p,
                       (unsigned long long)s->file_size, s->token_bytes, name);
    }
    s->vocab_size = vocab_arg;
    s->n_tokens = s->file_size / (uint64_t)s->token_bytes;
    s->data_offset = 0;
    return 0;
}

int shard_open(Shard *s, const char *path, ShardFormat fmt, uint32_t vocab_size, size_t cache_bytes, Err *e) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->path = xstrdup(path);
    s->format = fmt;
    if ((int)fmt < SHARD_AUTO || (int)fmt > SHARD_RAW_U32) {
        err_set(e, "%s: unknown shard format %d", path, (int)fmt);
        goto fail;
    }
    unsigned mode = 0;
    s->fd = open_regular(path, &mode);  // a FIFO or device is refused before it can block a read
    if (s->fd == OPEN_NOT_REGULAR) {
        s->fd = -1;
        err_set(e, "%s: is %s, not a regular file; a shard must be a file", path, file_kind(mode));
        goto fail;
    }
    if (s->fd < 0) {
        err_set(e, "cannot open %s: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(s->fd, &st) != 0) {
        err_set(e, "cannot stat %s: %s", path, strerror(errno));
        goto fail;
    }
    s->file_size = (uint64_t)st.st_size;
    if (s->file_size == 0) {
        err_set(e, "%s: empty file (0 bytes), not a token shard", path);
        goto fail;
    }
    uint8_t head[SHARD_HEADER_BYTES];
    size_t nhead = s->file_size < sizeof head ? (size_t)s->file_size : sizeof head;
    if (read_at_(s, head, nhead, 0, e) != 0) goto fail;
    if (fmt == SHARD_AUTO) {
        if (is_seqtok_(head, nhead)) s->format = SHARD_SEQTOK;
        else if (is_llmc_(head, nhead)) s->format = SHARD_LLMC;
        else {
            bad_magic_(s, SHARD_AUTO, e);
            goto fail;
        }
    }
    int rc;
    if (s->format == SHARD_SEQTOK) rc = open_seqtok_(s, head, nhead, vocab_size, cache_bytes, e);
    else if (s->format == SHARD_LLMC) rc = open_llmc_(s, head, nhead, vocab_size, e);
    else rc = open_raw_(s, vocab_size, e);
    if (rc != 0) goto fail;
    if (s->format != SHARD_SEQTOK) {
        s->rbuf_size = (size_t)(s->n_tokens < RAW_CHUNK_TOKENS ? s->n_tokens : RAW_CHUNK_TOKENS) * s->token_bytes;
        s->rbuf = xmalloc(s->rbuf_size);
    }
    return 0;
fail:
    shard_close(s);
    return -1;
}

void shard_close(Shard *s) {
    if (s->fd >= 0) close(s->fd);
    ZSTD_freeDCtx(s->dctx);
    for (int i = 0; i < s->cache_slots; i++) free(s->cache[i].tokens);
    free(s->cache);
    free(s->frame_offsets);
    free(s->cbuf);
    free(s->rbuf);
    free(s->path);
    memset(s, 0, sizeof *s);
    s->fd = -1;
}

// decompress frame fi into slot's tokens, checking sizes and ids
static int frame_decode_(Shard *s, uint64_t fi, ShardFrame *slot, Err *e) {
    uint64_t a = s->frame_offsets[fi], b = s->frame_offsets[fi + 1];
    size_t csize = (size_t)(b - a);
    uint64_t first = fi * s->frame_tokens;
    size_t n = (size_t)(s->n_tokens - first < s->frame_tokens ? s->n_tokens - first : s->frame_tokens);
    size_t want = n * (size_t)s->token_bytes;
    if (read_at_(s, s->cbuf, csize, a, e) != 0) return -1;
    // exactly one zstd frame that declares exactly this frame's byte count, then decode into that many
    unsigned long long content = ZSTD_getFrameContentSize(s->cbuf, csize);
    size_t frame_size = ZSTD_findFrameCompressedSize(s->cbuf, csize);
    const char *why = NULL;
    if (content == ZSTD_CONTENTSIZE_ERROR || ZSTD_isError(frame_size)) why = "not a zstd frame";
    else if (content == ZSTD_CONTENTSIZE_UNKNOWN) why = "zstd frame does not record its content size";
    else if (content != want) why = "content size differs from the frame's token count";
    else if (frame_size != csize) why = "index entry is not exactly one zstd frame";
    if (!why) {
        size_t got = ZSTD_decompressDCtx(s->dctx, s->rbuf, want, s->cbuf, csize);
        if (ZSTD_isError(got)) why = ZSTD_getErrorName(got);
        else if (got != want) why = "decoded size differs from the frame's token count";
    }
    if (why) {
        return err_set(e, "%s: corrupt frame %llu (bytes %llu..%llu): %s", s->path, (unsigned long long)fi,
                       (unsigned long long)a, (unsigned long long)b, why);
    }
    if (!slot->tokens) slot->tokens = xmalloc(s->rbuf_size / s->token_bytes * sizeof(uint32_t));
    tokens_decode_(slot->tokens, s->rbuf, n, s->token_bytes);
    return ids_check_(s, slot->tokens, n, first, e);
}

// decoded tokens of frame fi, from the cache or decoded into its least recently used slot (empty slots
// have last_use 0, so they are filled first)
static const uint32_t *frame_get_(Shard *s, uint64_t fi, Err *e) {
    ShardFrame *victim = &s->cache[0];
    for (int i = 0; i < s->cache_slots; i++) {
        ShardFrame *f = &s->cache[i];
        if (f->index == fi) {
            f->last_use = ++s->cache_clock;
            return f->tokens;
        }
        if (f->last_use < victim->last_use) victim = f;
    }
    victim->index = UINT64_MAX;  // stays empty if decoding fails, so a bad frame is never served
    victim->last_use = 0;
    if (frame_decode_(s, fi, victim, e) != 0) return NULL;
    victim->index = fi;
    victim->last_use = ++s->cache_clock;
    return victim->tokens;
}

int shard_read(Shard *s, uint32_t *out, uint64_t start, uint64_t count, Err *e) {
    if (start > s->n_tokens || count > s->n_tokens - start) {
        return err_set(e, "%s: window of %llu tokens at position %llu is outside the shard's %llu tokens", s->path,
                       (unsigned long long)count, (unsigned long long)start, (unsigned long long)s->n_tokens);
    }
    while (count > 0) {
        uint64_t take;
        if (s->format == SHARD_SEQTOK) {
            uint64_t fi = start / s->frame_tokens, in_frame = start % s->frame_tokens;
            uint64_t frame_n = s->n_tokens - fi * s->frame_tokens;
            if (frame_n > s->frame_tokens) frame_n = s->frame_tokens;
            const uint32_t *t = frame_get_(s, fi, e);
            if (!t) return -1;
            take = frame_n - in_frame < count ? frame_n - in_frame : count;
            memcpy(out, t + in_frame, (size_t)take * sizeof(uint32_t));
        } else {
            size_t chunk = s->rbuf_size / s->token_bytes;
            take = count < chunk ? count : chunk;
            size_t nb = (size_t)take * s->token_bytes;
            if (read_at_(s, s->rbuf, nb, s->data_offset + start * s->token_bytes, e) != 0) return -1;
            tokens_decode_(out, s->rbuf, (size_t)take, s->token_bytes);
            if (ids_check_(s, out, (size_t)take, start, e) != 0) return -1;
        }
        out += take;
        start += take;
        count -= take;
    }
    return 0;
}

// ----------------------------------------------------------------------------------------------------
// writer

static void writer_free_(ShardWriter *w) {
    ZSTD_freeCCtx(w->cctx);
    free(w->path);
    free(w->pending);
    free(w->offsets);
    free(w->cbuf);
    free(w->pbuf);
    memset(w, 0, sizeof *w);
}

void shard_writer_abort(ShardWriter *w) {
    atomic_file_abort(&w->af);
    writer_free_(w);
}

// an I/O failure: the message names the temp file, then the writer removes it and closes
static int writer_fail_(ShardWriter *w, const char *what, int errnum, Err *e) {
    err_set(e, "cannot %s %s: %s", what, w->af.tmp, strerror(errnum));
    shard_writer_abort(w);
    return -1;
}

static int writer_put_(ShardWriter *w, const void *data, size_t n, Err *e) {
    if (fwrite(data, 1, n, w->af.f) != n) return writer_fail_(w, "write", errno ? errno : EIO, e);
    w->pos += n;
    return 0;
}

static int writer_flush_frame_(ShardWriter *w, Err *e) {
    size_t nb = (size_t)w->n_pending * w->token_bytes;
    tokens_encode_(w->pbuf, w->pending, w->n_pending, w->token_bytes);
    size_t csize = ZSTD_compress2(w->cctx, w->cbuf, w->cbuf_size, w->pbuf, nb);
    if (ZSTD_isError(csize)) {
        err_set(e, "%s: zstd compression failed: %s", w->path, ZSTD_getErrorName(csize));
        shard_writer_abort(w);
        return -1;
    }
    if (writer_put_(w, w->cbuf, csize, e) != 0) return -1;
    if (w->n_frames + 2 > w->offsets_cap) {
        w->offsets_cap *= 2;
        w->offsets = xrealloc(w->offsets, w->offsets_cap * sizeof(uint64_t));
    }
    w->offsets[++w->n_frames] = w->pos;
    w->n_pending = 0;
    return 0;
}

int shard_writer_open(ShardWriter *w, const char *path, uint32_t vocab_size, int token_bytes,
                      const uint8_t *tokenizer_sha256, uint32_t frame_tokens, int level, Err *e) {
    memset(w, 0, sizeof *w);
    if (vocab_size == 0) return err_set(e, "%s: cannot write a shard with vocab size 0", path);
    if (token_bytes == 0) token_bytes = vocab_size <= 65536 ? 2 : 4;
    if (token_bytes != 2 && token_bytes != 4) {
        return err_set(e, "%s: token width %d bytes (use 2, 4, or 0 to choose from the vocab size)", path, token_bytes);
    }
    if (token_bytes == 2 && vocab_size > 65536) {
        return err_set(e, "%s: 2-byte tokens cannot hold vocab size %u (use 4, or 0 to choose from the vocab size)",
                       path, vocab_size);
    }
    if (frame_tokens == 0) frame_tokens = SHARD_FRAME_TOKENS_DEFAULT;
    if (frame_tokens > SHARD_FRAME_TOKENS_MAX) {
        return err_set(e, "%s: %u tokens per frame is more than the maximum %u", path, frame_tokens,
                       SHARD_FRAME_TOKENS_MAX);
    }
    if (level == 0) level = ZSTD_LEVEL_DEFAULT;
    if (level < ZSTD_minCLevel() || level > ZSTD_maxCLevel()) {
        return err_set(e, "%s: zstd level %d is outside %d..%d", path, level, ZSTD_minCLevel(), ZSTD_maxCLevel());
    }
    if (atomic_file_open(&w->af, path, e) != 0) return -1;
    w->path = xstrdup(path);
    w->level = level;
    w->vocab_size = vocab_size;
    w->token_bytes = token_bytes;
    w->frame_tokens = frame_tokens;
    w->has_tokenizer_hash = tokenizer_sha256 != NULL;
    if (tokenizer_sha256) memcpy(w->tokenizer_sha256, tokenizer_sha256, 32);
    w->min_id = UINT32_MAX;
    w->pending = xmalloc((size_t)frame_tokens * sizeof(uint32_t));
    w->pbuf = xmalloc((size_t)frame_tokens * token_bytes);
    w->cbuf_size = ZSTD_compressBound((size_t)frame_tokens * token_bytes);
    w->cbuf = xmalloc(w->cbuf_size);
    w->offsets_cap = 64;
    w->offsets = xmalloc(w->offsets_cap * sizeof(uint64_t));
    w->offsets[0] = SHARD_HEADER_BYTES;
    // the content checksum lets a reader tell corrupted frame bytes from valid tokens
    w->cctx = ZSTD_createCCtx();
    if (!w->cctx || ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, level)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_checksumFlag, 1))) {
        err_set(e, "%s: cannot set up zstd compression at level %d", path, level);
        shard_writer_abort(w);
        return -1;
    }
    uint8_t zero[SHARD_HEADER_BYTES] = {0};  // placeholder; the real header is written by close
    return writer_put_(w, zero, sizeof zero, e);
}

int shard_writer_append(ShardWriter *w, const uint32_t *ids, size_t n, Err *e) {
    if (!w->af.f) return err_set(e, "shard writer: append after close or after a failed write");
    // the whole batch is checked before any of it is taken, so a rejected batch leaves the writer usable
    uint32_t lo = w->min_id, hi = w->max_id;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= w->vocab_size) {
            return err_set(e, "%s: token id %u (item %zu of this batch, position %llu in the shard) is >= vocab size %u",
                           w->path, ids[i], i, (unsigned long long)(w->n_tokens + i), w->vocab_size);
        }
        lo = ids[i] < lo ? ids[i] : lo;
        hi = ids[i] > hi ? ids[i] : hi;
    }
    w->min_id = lo;
    w->max_id = hi;
    w->n_tokens += n;
    while (n > 0) {
        size_t take = w->frame_tokens - w->n_pending;
        if (take > n) take = n;
        memcpy(w->pending + w->n_pending, ids, take * sizeof(uint32_t));
        w->n_pending += (uint32_t)take;
        ids += take;
        n -= take;
        if (w->n_pending == w->frame_tokens && writer_flush_frame_(w, e) != 0) return -1;
    }
    return 0;
}

int shard_writer_close(ShardWriter *w, Err *e) {
    if (!w->af.f) return err_set(e, "shard writer: close after close or after a failed write");
    if (w->n_pending > 0 && writer_flush_frame_(w, e) != 0) return -1;
    uint64_t index_offset = w->pos;
    uint8_t buf[4096];
    for (uint64_t i = 0; i <= w->n_frames;) {
        size_t k = 0;
        for (; k < sizeof buf / 8 && i <= w->n_frames; k++, i++) put_u64_(buf + 8 * k, w->offsets[i]);
        if (writer_put_(w, buf, 8 * k, e) != 0) return -1;
    }

    uint8_t h[SHARD_HEADER_BYTES] = {0};
    memcpy(h, SHARD_MAGIC, 8);
    put_u32_(h + 8, SHARD_VERSION);
    put_u32_(h + 12, SHARD_HEADER_BYTES);
    put_u32_(h + 16, w->vocab_size);
    put_u32_(h + 20, (uint32_t)w->token_bytes);
    put_u32_(h + 24, w->frame_tokens);
    put_u32_(h + 28, (w->has_tokenizer_hash ? FLAG_TOKENIZER_HASH : 0) | (w->n_tokens > 0 ? FLAG_MINMAX : 0));
    put_u64_(h + 32, w->n_tokens);
    put_u64_(h + 40, w->n_frames);
    put_u64_(h + 48, index_offset);
    put_u32_(h + 56, w->n_tokens > 0 ? w->min_id : 0);
    put_u32_(h + 60, w->max_id);
    if (w->has_tokenizer_hash) memcpy(h + 64, w->tokenizer_sha256, 32);
    if (fseek(w->af.f, 0, SEEK_SET) != 0) return writer_fail_(w, "seek in", errno, e);
    if (fwrite(h, 1, sizeof h, w->af.f) != sizeof h) return writer_fail_(w, "write", errno ? errno : EIO, e);
    // flushed, synced and renamed: the name only ever points at a complete shard
    if (atomic_file_commit(&w->af, e) != 0) {
        writer_free_(w);
        return -1;
    }
    writer_free_(w);
    return 0;
}

int shard_scan(Shard *s, uint32_t *min_id, uint32_t *max_id, Err *e) {
    // big reads: shard_read checks every id against the vocabulary on the way
    const uint64_t CHUNK = 1 << 20;
    uint32_t *buf = xmalloc(CHUNK * sizeof(uint32_t));
    uint32_t lo = UINT32_MAX, hi = 0;
    for (uint64_t off = 0; off < s->n_tokens; off += CHUNK) {
        uint64_t k = s->n_tokens - off < CHUNK ? s->n_tokens - off : CHUNK;
        if (shard_read(s, buf, off, k, e) != 0) {
            free(buf);
            return -1;
        }
        for (uint64_t i = 0; i < k; i++) {
            if (buf[i] < lo) lo = buf[i];
            if (buf[i] > hi) hi = buf[i];
        }
    }
    free(buf);
    if (s->n_tokens == 0) lo = 0;
    if (s->has_minmax && s->n_tokens > 0 && (lo != s->min_id || hi != s->max_id))
        return err_set(e, "%s: header says ids %u .. %u but the tokens span %u .. %u", s->path, s->min_id, s->max_id,
                       lo, hi);
    *min_id = lo;
    *max_id = hi;
    return 0;
}
