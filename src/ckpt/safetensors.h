/*
 * safetensors files: the checkpoint format, readable by HuggingFace's safetensors, PyTorch (via that
 * package) and scripts/safetensors_read.py.
 *
 *   bytes 0..7    N, u64 little-endian: length of the header
 *   bytes 8..8+N  UTF-8 JSON object, padded with spaces so the data starts 8-byte aligned:
 *                 {"blocks.0.w": {"dtype": "F32", "shape": [4, 8], "data_offsets": [0, 128]}, ...,
 *                  "__metadata__": {"key": "value", ...}}   (metadata values are strings)
 *   then          the data section: raw little-endian tensors; data_offsets are [begin, end) byte
 *                 offsets into it, and the tensors tile it exactly (no gaps, no overlap, no slack)
 *
 * Writes are atomic (temp file, fsync, rename), so a crash leaves the previous file intact. Reads go
 * straight into the caller's buffer with pread: a checkpoint is never held in memory twice.
 */
#ifndef SEQ_SAFETENSORS_H
#define SEQ_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "core/params.h"

#define SAFETENSORS_NDIM_MAX 8
#define SAFETENSORS_HEADER_MAX (100u << 20)  // the same bound as the reference reader

typedef enum {
    ST_F32 = 0,  // the default, so {name, ndim, shape, data} initialisers mean F32
    ST_F64, ST_F16, ST_BF16,
    ST_I64, ST_I32, ST_I16, ST_I8,
    ST_U64, ST_U32, ST_U16, ST_U8,
    ST_BOOL,
    ST_DTYPE_COUNT
} SafeDtype;

const char *safetensors_dtype_name(SafeDtype d);  // "F32"
size_t safetensors_dtype_size(SafeDtype d);       // bytes per element

// one tensor to write; data holds prod(shape) elements of dtype (native little-endian)
typedef struct SafeTensor {
    const char *name;
    int ndim;               // 0 (a scalar) .. SAFETENSORS_NDIM_MAX
    const int64_t *shape;
    const void *data;
    SafeDtype dtype;
} SafeTensor;

// Write n tensors, in the given order, plus n_meta metadata pairs (meta_kv[2i] = key, [2i+1] = value;
// NULL when n_meta = 0). Names must be unique, non-empty and not "__metadata__".
int safetensors_write(const char *path, const SafeTensor *tensors, int n,
                      const char *const *meta_kv, int n_meta, Err *e);
// every tensor of a ParamTable, from buf (pt->numel floats), under its table name
int safetensors_write_table(const char *path, const ParamTable *pt, const float *buf,
                            const char *const *meta_kv, int n_meta, Err *e);
// several buffers with the same layout in one file: tensor "<prefixes[k]><name>" from bufs[k]
// (optimizer state: prefixes {"m.", "v."}, bufs {m, v})
int safetensors_write_tables(const char *path, const ParamTable *pt, const char *const *prefixes,
                             const float *const *bufs, int nbuf, const char *const *meta_kv, int n_meta, Err *e);

typedef struct SafeTensorInfo {
    char *name;
    SafeDtype dtype;
    int ndim;
    int64_t shape[SAFETENSORS_NDIM_MAX];
    uint64_t numel;
    uint64_t begin, end;  // byte offsets into the data section
} SafeTensorInfo;

typedef struct SafeTensorsFile {
    char path[1024];
    int fd;
    uint64_t data_start;  // 8 + N
    uint64_t file_size;
    SafeTensorInfo *t;    // in header order
    int n;
    char **meta_key, **meta_val;
    int n_meta;
} SafeTensorsFile;

// open and validate the whole header (every error names the file); on failure f is left closed
int safetensors_open(SafeTensorsFile *f, const char *path, Err *e);
const SafeTensorInfo *safetensors_find(const SafeTensorsFile *f, const char *name);  // NULL if absent
// read tensor `name` (dtype F32, exactly numel_expected elements) into dst
int safetensors_read(const SafeTensorsFile *f, const char *name, float *dst, size_t numel_expected, Err *e);
// the same for any dtype: dst receives numel_expected * dtype_size bytes
int safetensors_read_as(const SafeTensorsFile *f, const char *name, SafeDtype dtype, void *dst,
                        size_t numel_expected, Err *e);
const char *safetensors_meta(const SafeTensorsFile *f, const char *key);  // NULL if absent
void safetensors_close(SafeTensorsFile *f);

// Strict inverse of safetensors_write_table: the file must hold exactly the table's tensors, as F32
// with the table's shapes; every mismatch is reported (naming tensors and shapes) before buf is
// touched, so a config/checkpoint mismatch never leaves a half-loaded model.
int safetensors_read_table(const char *path, const ParamTable *pt, float *buf, Err *e);
int safetensors_read_tables(const char *path, const ParamTable *pt, const char *const *prefixes,
                            float *const *bufs, int nbuf, Err *e);

#endif
