// libFuzzer harness: the shard readers (data/shard.h): seqtok shards, llm.c .bin and raw uint16/uint32.
// The first input byte chooses the format (auto, seqtok, llmc, raw_u16, raw_u32) and a vocab size; the rest
// is the file. Every token is then read (in a few windows) and scanned.
#include "fuzz_common.h"
#include "data/shard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const ShardFormat fmts[] = {SHARD_AUTO, SHARD_SEQTOK, SHARD_LLMC, SHARD_RAW_U16, SHARD_RAW_U32};
    ShardFormat fmt = fmts[data[0] % 5];
    static const uint32_t vocabs[] = {0, 0, 50257, 256, 70000, 1, 8192, 0};
    uint32_t vocab = vocabs[(data[0] / 5) % 8];
    if ((fmt == SHARD_RAW_U16 || fmt == SHARD_RAW_U32) && vocab == 0) vocab = 65536;
    char path[256];
    fuzz_write("x.shard", data + 1, size - 1, path, sizeof path);
    Shard s;
    Err e;
    if (shard_open(&s, path, fmt, vocab, (size_t)(data[0] & 1 ? 4096 : 1 << 20), &e) != 0) return 0;
    uint64_t n = s.n_tokens;
    if (n <= (1u << 20)) {
        uint32_t *buf = malloc((n ? n : 1) * sizeof *buf);
        int rc = shard_read(&s, buf, 0, n, &e);
        if (rc == 0 && n > 3) rc = shard_read(&s, buf, n / 3, n - n / 3, &e);
        if (rc == 0 && n) rc = shard_read(&s, buf, n - 1, 1, &e);
        free(buf);
        uint32_t lo, hi;
        if (rc == 0) (void)shard_scan(&s, &lo, &hi, &e);
    }
    uint32_t one;
    (void)shard_read(&s, &one, n, 1, &e);  // past the end: an error, never a read
    shard_close(&s);
    return 0;
}
