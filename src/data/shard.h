/*
 * Token shards: one file of token ids plus what is needed to check them.
 *
 * Formats read (docs/formats.md has the byte layout of each):
 *   seqtok  our own: header (magic, version, vocab, token width, count, tokenizer sha256, min/max id),
 *           tokens in independently decodable zstd frames, and a frame index at the end, so any window
 *           can be read by decompressing only the frames it touches.
 *   llmc    karpathy/llm.c .bin: 256 x int32 header (magic 20240520 version 1 -> uint16 tokens;
 *           magic 20240801 version 7 -> uint32 tokens), then the raw tokens.
 *   raw_u16 / raw_u32   a headerless array of little-endian tokens; needs the vocab size from the user.
 * Every read checks ids against the vocab size: an id >= vocab is an error naming file and position.
 */
#ifndef SEQ_SHARD_H
#define SEQ_SHARD_H

#include <stdint.h>
#include <stddef.h>
#include "core/err.h"
#include "core/files.h"

#define SHARD_MAGIC "SEQSHRD1"  // 8 bytes at offset 0 of a seqtok shard
#define SHARD_VERSION 1
#define SHARD_HEADER_BYTES 128
#define SHARD_FRAME_TOKENS_DEFAULT 32768
#define SHARD_FRAME_TOKENS_MAX (1u << 24)  // larger frames are refused, so a bad header cannot make a reader
                                           // allocate gigabytes per cached frame

typedef enum {
    SHARD_AUTO = 0,  // detect seqtok / llmc by magic; raw needs to be named
    SHARD_SEQTOK,
    SHARD_LLMC,
    SHARD_RAW_U16,
    SHARD_RAW_U32,
} ShardFormat;

// "auto" "seqtok" "llmc" "raw_u16" "raw_u32" <-> enum; returns -1 for an unknown name
int shard_format_parse(const char *name, ShardFormat *out);
const char *shard_format_name(ShardFormat f);

typedef struct ShardFrame {  // one decoded frame held in the cache
    uint64_t index;          // frame number, UINT64_MAX when the slot is empty
    uint64_t last_use;       // for LRU eviction
    uint32_t *tokens;        // (frame_tokens,)
} ShardFrame;

typedef struct Shard {
    char *path;
    ShardFormat format;
    int fd;
    uint64_t file_size;
    uint32_t vocab_size;     // ids must be < vocab_size
    int token_bytes;         // 2 or 4
    uint64_t n_tokens;
    int has_tokenizer_hash;  // seqtok shards written with a tokenizer
    uint8_t tokenizer_sha256[32];
    int has_minmax;          // seqtok shards record min/max id at write time
    uint32_t min_id, max_id;
    // seqtok: frames
    uint32_t frame_tokens;
    uint64_t n_frames;
    uint64_t *frame_offsets;  // (n_frames+1,) byte offsets; frame i is [off[i], off[i+1])
    void *dctx;               // ZSTD_DCtx
    uint8_t *cbuf;            // compressed-frame scratch
    size_t cbuf_size;
    ShardFrame *cache;        // decoded frames, LRU
    int cache_slots;
    uint64_t cache_clock;
    // llmc/raw: tokens start here
    uint64_t data_offset;
    uint8_t *rbuf;            // little-endian token bytes before widening: pread (llmc/raw), zstd output (seqtok)
    size_t rbuf_size;
} Shard;

// Open and validate a shard. fmt SHARD_AUTO detects seqtok and llmc by magic. vocab_size: 0 = take it
// from the header (seqtok) or the format's default (llmc: 50257 for GPT-2 shards, 128256 for Llama-3);
// required for raw; when given for a seqtok shard it must equal the header's. cache_bytes bounds the
// decoded-frame cache (at least 2 frames are kept). On failure s is left closed (shard_close is harmless).
int shard_open(Shard *s, const char *path, ShardFormat fmt, uint32_t vocab_size, size_t cache_bytes, Err *e);
void shard_close(Shard *s);
// tokens [start, start+count) into out (count,); errors on out-of-range windows, corrupt frames and
// ids >= vocab_size (naming file and token position). One Shard serves one thread at a time: the frame
// cache and scratch buffers are shared state.
int shard_read(Shard *s, uint32_t *out, uint64_t start, uint64_t count, Err *e);

// Read every token once: checks all frames and ids (and the header's min/max where recorded) and
// returns the smallest and largest id (both 0 for an empty shard).
int shard_scan(Shard *s, uint32_t *min_id, uint32_t *max_id, Err *e);

// Writer: streams tokens into a temp file, then index + header + fsync + rename, so a shard on disk
// is always complete. token_bytes 0 = 2 when vocab_size <= 65536 else 4.
typedef struct ShardWriter {
    char *path;
    AtomicFile af;          // the temporary file, renamed over path by close
    void *cctx;             // ZSTD_CCtx
    int level;
    uint32_t vocab_size;
    int token_bytes;
    uint32_t frame_tokens;
    int has_tokenizer_hash;
    uint8_t tokenizer_sha256[32];
    uint32_t *pending;      // (frame_tokens,) tokens not yet written as a frame
    uint32_t n_pending;
    uint64_t n_tokens;
    uint32_t min_id, max_id;
    uint64_t *offsets;
    uint64_t n_frames, offsets_cap;
    uint64_t pos;           // bytes written so far
    uint8_t *cbuf, *pbuf;
    size_t cbuf_size;
} ShardWriter;

// tokenizer_sha256 may be NULL (unknown tokenizer); frame_tokens 0 = SHARD_FRAME_TOKENS_DEFAULT;
// level = zstd level (0 = default 3)
int shard_writer_open(ShardWriter *w, const char *path, uint32_t vocab_size, int token_bytes,
                      const uint8_t *tokenizer_sha256, uint32_t frame_tokens, int level, Err *e);
// ids (n,). A batch holding an id >= vocab_size is rejected whole and the writer stays usable; after an
// I/O error (disk full...) the writer has already removed its temp file and closed itself.
int shard_writer_append(ShardWriter *w, const uint32_t *ids, size_t n, Err *e);
int shard_writer_close(ShardWriter *w, Err *e);  // finish and rename into place
void shard_writer_abort(ShardWriter *w);         // drop the temp file (on error or Ctrl-C); harmless when closed

#endif
