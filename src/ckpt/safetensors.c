#include "ckpt/safetensors.h"
#include "core/files.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckptdir.h"

// the data section is the host's memory image, which the format defines as little-endian
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

static const struct { const char *name; size_t size; } dtypes_[ST_DTYPE_COUNT] = {
    [ST_F32] = {"F32", 4},  [ST_F64] = {"F64", 8},  [ST_F16] = {"F16", 2},  [ST_BF16] = {"BF16", 2},
    [ST_I64] = {"I64", 8},  [ST_I32] = {"I32", 4},  [ST_I16] = {"I16", 2},  [ST_I8] = {"I8", 1},
    [ST_U64] = {"U64", 8},  [ST_U32] = {"U32", 4},  [ST_U16] = {"U16", 2},  [ST_U8] = {"U8", 1},
    [ST_BOOL] = {"BOOL", 1},
};

const char *safetensors_dtype_name(SafeDtype d) { return (unsigned)d < ST_DTYPE_COUNT ? dtypes_[d].name : "?"; }
size_t safetensors_dtype_size(SafeDtype d) { return (unsigned)d < ST_DTYPE_COUNT ? dtypes_[d].size : 0; }

static int dtype_parse_(const char *s) {
    for (int d = 0; d < ST_DTYPE_COUNT; d++)
        if (strcmp(s, dtypes_[d].name) == 0) return d;
    return -1;
}

// JSON numbers are doubles: integers beyond 2^53 would silently round, so they are refused
#define JSON_INT_MAX 9007199254740992.0

// ---------------------------------------------------------------------------------------------------
// a growable string, for the header and for error lists

typedef struct Str_ {
    char *p;
    size_t n, cap;
} Str_;

static void str_addf_(Str_ *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void str_addf_(Str_ *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if (s->n + (size_t)k + 1 > s->cap) {
        s->cap = (s->n + (size_t)k + 1) * 2;
        s->p = xrealloc(s->p, s->cap);
    }
    va_start(ap, fmt);
    vsnprintf(s->p + s->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    s->n += (size_t)k;
}

// a JSON string literal; names are ASCII in practice, but any UTF-8 passes through unchanged
static void str_add_json_string_(Str_ *s, const char *v) {
    str_addf_(s, "\"");
    for (const unsigned char *c = (const unsigned char *)v; *c; c++) {
        if (*c == '"' || *c == '\\') str_addf_(s, "\\%c", *c);
        else if (*c < 0x20) str_addf_(s, "\\u%04x", *c);
        else str_addf_(s, "%c", *c);
    }
    str_addf_(s, "\"");
}

static void str_add_shape_(Str_ *s, int ndim, const int64_t *shape) {
    str_addf_(s, "[");
    for (int d = 0; d < ndim; d++) str_addf_(s, "%s%lld", d ? ", " : "", (long long)shape[d]);
    str_addf_(s, "]");
}

// ---------------------------------------------------------------------------------------------------
// writing

int safetensors_write(const char *path, const SafeTensor *tensors, int n,
                      const char *const *meta_kv, int n_meta, Err *e) {
    if (n < 0 || n_meta < 0 || (n_meta > 0 && !meta_kv)) return err_set(e, "%s: bad tensor or metadata count", path);
    uint64_t *nbytes = xcalloc((size_t)(n ? n : 1), sizeof *nbytes);
    Str_ h = {0};
    int rc = 0;
    str_addf_(&h, "{");
    if (n_meta > 0) {
        str_addf_(&h, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (!meta_kv[2 * i] || !meta_kv[2 * i + 1]) { rc = err_set(e, "%s: metadata pair %d is NULL", path, i); goto done; }
            str_add_json_string_(&h, meta_kv[2 * i]);
            str_addf_(&h, ":");
            str_add_json_string_(&h, meta_kv[2 * i + 1]);
            if (i + 1 < n_meta) str_addf_(&h, ",");
        }
        str_addf_(&h, "}%s", n ? "," : "");
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const SafeTensor *t = &tensors[i];
        if (!t->name || !t->name[0] || strcmp(t->name, "__metadata__") == 0)
            { rc = err_set(e, "%s: tensor %d has no usable name", path, i); goto done; }
        if (t->ndim < 0 || t->ndim > SAFETENSORS_NDIM_MAX || (t->ndim > 0 && !t->shape))
            { rc = err_set(e, "%s: tensor %s has %d dimensions (0..%d)", path, t->name, t->ndim, SAFETENSORS_NDIM_MAX); goto done; }
        if ((unsigned)t->dtype >= ST_DTYPE_COUNT) { rc = err_set(e, "%s: tensor %s has an unknown dtype", path, t->name); goto done; }
        for (int j = 0; j < i; j++)
            if (strcmp(tensors[j].name, t->name) == 0) { rc = err_set(e, "%s: tensor %s given twice", path, t->name); goto done; }
        uint64_t cnt = dtypes_[t->dtype].size;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0 || (double)t->shape[d] > JSON_INT_MAX || __builtin_mul_overflow(cnt, (uint64_t)t->shape[d], &cnt))
                { rc = err_set(e, "%s: tensor %s has a bad or too large shape", path, t->name); goto done; }
        }
        if (cnt && !t->data) { rc = err_set(e, "%s: tensor %s has no data", path, t->name); goto done; }
        uint64_t end;
        if (__builtin_add_overflow(off, cnt, &end) || (double)end > JSON_INT_MAX)
            { rc = err_set(e, "%s: data section too large", path); goto done; }
        nbytes[i] = cnt;
        str_add_json_string_(&h, t->name);
        str_addf_(&h, ":{\"dtype\":\"%s\",\"shape\":", dtypes_[t->dtype].name);
        str_add_shape_(&h, t->ndim, t->shape);
        str_addf_(&h, ",\"data_offsets\":[%llu,%llu]}%s", (unsigned long long)off, (unsigned long long)end,
                  i + 1 < n ? "," : "");
        off = end;
    }
    str_addf_(&h, "}");
    // pad so the data section starts 8-byte aligned: a reader that maps the file can use it in place
    while ((8 + h.n) % 8) str_addf_(&h, " ");
    if (h.n > SAFETENSORS_HEADER_MAX) { rc = err_set(e, "%s: header of %zu bytes is too large", path, h.n); goto done; }

    AtomicFile af;
    if (atomic_file_open(&af, path, e)) { rc = -1; goto done; }
    uint8_t len8[8];
    for (int b = 0; b < 8; b++) len8[b] = (uint8_t)((uint64_t)h.n >> (8 * b));
    int ok = fwrite(len8, 1, 8, af.f) == 8 && fwrite(h.p, 1, h.n, af.f) == h.n;
    for (int i = 0; ok && i < n; i++)
        if (nbytes[i] && fwrite(tensors[i].data, 1, nbytes[i], af.f) != nbytes[i]) ok = 0;
    if (!ok) {
        int err = errno;
        atomic_file_abort(&af);
        rc = err_set(e, "%s: write failed: %s", path, strerror(err ? err : EIO));
        goto done;
    }
    rc = atomic_file_commit(&af, e);
done:
    free(h.p);
    free(nbytes);
    return rc;
}

int safetensors_write_tables(const char *path, const ParamTable *pt, const char *const *prefixes,
                             const float *const *bufs, int nbuf, const char *const *meta_kv, int n_meta, Err *e) {
    int n = pt->n * nbuf;
    SafeTensor *ts = xcalloc((size_t)(n ? n : 1), sizeof *ts);
    int64_t *shapes = xcalloc((size_t)(n ? n : 1) * PARAM_NDIM_MAX, sizeof *shapes);
    char (*names)[PARAM_NAME_MAX + 64] = xcalloc((size_t)(n ? n : 1), sizeof *names);
    int rc = 0;
    for (int k = 0; k < nbuf && !rc; k++) {
        for (int i = 0; i < pt->n; i++) {
            const ParamTensor *p = &pt->t[i];
            int j = k * pt->n + i;
            const char *pre = prefixes && prefixes[k] ? prefixes[k] : "";
            if ((size_t)snprintf(names[j], sizeof names[j], "%s%s", pre, p->name) >= sizeof names[j]) {
                rc = err_set(e, "%s: tensor name %s%s is too long", path, pre, p->name);
                break;
            }
            for (int d = 0; d < p->ndim; d++) shapes[j * PARAM_NDIM_MAX + d] = p->shape[d];
            ts[j] = (SafeTensor){names[j], p->ndim, &shapes[j * PARAM_NDIM_MAX], bufs[k] + p->offset, ST_F32};
        }
    }
    if (!rc) rc = safetensors_write(path, ts, n, meta_kv, n_meta, e);
    free(names);
    free(shapes);
    free(ts);
    return rc;
}

int safetensors_write_table(const char *path, const ParamTable *pt, const float *buf,
                            const char *const *meta_kv, int n_meta, Err *e) {
    const char *pre[1] = {""};
    const float *bufs[1] = {buf};
    return safetensors_write_tables(path, pt, pre, bufs, 1, meta_kv, n_meta, e);
}

// ---------------------------------------------------------------------------------------------------
// reading

// pread until n bytes arrived; -1 with errno set, or 0 bytes short of n at end of file (errno = 0)
static int pread_full_(int fd, void *dst, size_t n, uint64_t off) {
    uint8_t *p = dst;
    while (n) {
        ssize_t k = pread(fd, p, n, (off_t)off);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (k == 0) { errno = 0; return -1; }
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

// a non-negative integer JSON number that doubles represent exactly
static int json_uint_(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0) || d > JSON_INT_MAX || d != floor(d)) return -1;
    *out = (uint64_t)d;
    return 0;
}

static const SafeTensorsFile *sort_ctx_;  // qsort has no context argument in C11

static int by_offset_(const void *a, const void *b) {
    const SafeTensorInfo *x = &sort_ctx_->t[*(const int *)a], *y = &sort_ctx_->t[*(const int *)b];
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

static int by_name_(const void *a, const void *b) {
    return strcmp(sort_ctx_->t[*(const int *)a].name, sort_ctx_->t[*(const int *)b].name);
}

// one tensor entry of the header into ti; errors name the tensor (the caller adds the file)
static int parse_tensor_(const cJSON *item, SafeTensorInfo *ti, Err *e) {
    const char *name = item->string;
    if (!cJSON_IsObject(item)) return err_set(e, "tensor '%s' is not a JSON object", name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(dt)) return err_set(e, "tensor '%s' has no \"dtype\" string", name);
    int d = dtype_parse_(dt->valuestring);
    if (d < 0) return err_set(e, "tensor '%s' has unknown dtype \"%.32s\"", name, dt->valuestring);
    ti->dtype = (SafeDtype)d;
    if (!cJSON_IsArray(sh)) return err_set(e, "tensor '%s' has no \"shape\" array", name);
    int nd = cJSON_GetArraySize(sh);
    if (nd > SAFETENSORS_NDIM_MAX) return err_set(e, "tensor '%s' has %d dimensions (at most %d)", name, nd, SAFETENSORS_NDIM_MAX);
    ti->ndim = nd;
    uint64_t numel = 1, bytes;
    int k = 0;
    for (const cJSON *v = sh->child; v; v = v->next, k++) {
        uint64_t dim;
        if (json_uint_(v, &dim)) return err_set(e, "tensor '%s': shape entry %d is not a non-negative integer", name, k);
        if (__builtin_mul_overflow(numel, dim, &numel)) return err_set(e, "tensor '%s': shape overflows", name);
        ti->shape[k] = (int64_t)dim;
    }
    if (__builtin_mul_overflow(numel, (uint64_t)dtypes_[d].size, &bytes)) return err_set(e, "tensor '%s': shape overflows", name);
    ti->numel = numel;
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 || json_uint_(of->child, &ti->begin) || json_uint_(of->child->next, &ti->end))
        return err_set(e, "tensor '%s' has no \"data_offsets\": [begin, end] pair of non-negative integers", name);
    if (ti->end < ti->begin) return err_set(e, "tensor '%s' has data_offsets [%llu, %llu] with end before begin", name,
                                            (unsigned long long)ti->begin, (unsigned long long)ti->end);
    if (ti->end - ti->begin != bytes)
        return err_set(e, "tensor '%s': data_offsets span %llu bytes but %s shape needs %llu", name,
                       (unsigned long long)(ti->end - ti->begin), dtypes_[d].name, (unsigned long long)bytes);
    return 0;
}

// everything after reading the header bytes: JSON, entries, then the layout of the data section
static int parse_header_(SafeTensorsFile *f, const char *hdr, size_t n, Err *e) {
    if (n == 0 || hdr[0] != '{') return err_set(e, "header does not start with a JSON object");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, n, &end, 0);
    if (!root) return err_set(e, "header is not valid JSON (near byte %zu)", (size_t)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - hdr : 0));
    int rc = 0;
    for (const char *p = end; p && p < hdr + n; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') { rc = err_set(e, "header has bytes after the JSON object"); goto done; }
    if (!cJSON_IsObject(root)) { rc = err_set(e, "header is not a JSON object"); goto done; }
    int cnt = cJSON_GetArraySize(root);
    f->t = xcalloc((size_t)(cnt ? cnt : 1), sizeof *f->t);
    for (const cJSON *item = root->child; item; item = item->next) {
        if (!item->string) { rc = err_set(e, "header entry without a name"); goto done; }
        if (strcmp(item->string, "__metadata__") == 0) {
            if (f->meta_key) { rc = err_set(e, "header has two \"__metadata__\" entries"); goto done; }
            if (!cJSON_IsObject(item)) { rc = err_set(e, "\"__metadata__\" is not an object"); goto done; }
            int m = cJSON_GetArraySize(item);
            f->meta_key = xcalloc((size_t)(m ? m : 1), sizeof *f->meta_key);
            f->meta_val = xcalloc((size_t)(m ? m : 1), sizeof *f->meta_val);
            for (const cJSON *kv = item->child; kv; kv = kv->next) {
                if (!cJSON_IsString(kv)) { rc = err_set(e, "metadata \"%.64s\" is not a string", kv->string); goto done; }
                f->meta_key[f->n_meta] = xstrdup(kv->string);
                f->meta_val[f->n_meta++] = xstrdup(kv->valuestring);
            }
            continue;
        }
        SafeTensorInfo *ti = &f->t[f->n];
        if (parse_tensor_(item, ti, e)) { rc = -1; goto done; }
        ti->name = xstrdup(item->string);
        f->n++;
    }
    if (!f->meta_key) {  // an empty metadata table keeps safetensors_meta simple
        f->meta_key = xcalloc(1, sizeof *f->meta_key);
        f->meta_val = xcalloc(1, sizeof *f->meta_val);
    }

    uint64_t data_len = f->file_size - f->data_start;
    int *idx = xmalloc((size_t)(f->n ? f->n : 1) * sizeof *idx);
    for (int i = 0; i < f->n; i++) idx[i] = i;
    sort_ctx_ = f;
    qsort(idx, (size_t)f->n, sizeof *idx, by_name_);
    for (int i = 1; i < f->n && !rc; i++)
        if (strcmp(f->t[idx[i]].name, f->t[idx[i - 1]].name) == 0) rc = err_set(e, "tensor '%s' appears twice", f->t[idx[i]].name);
    // the tensors must tile the data section exactly: a gap or overlap means a corrupt or foreign file
    qsort(idx, (size_t)f->n, sizeof *idx, by_offset_);
    uint64_t expect = 0;
    for (int i = 0; i < f->n && !rc; i++) {
        const SafeTensorInfo *ti = &f->t[idx[i]];
        if (ti->begin < expect)
            rc = err_set(e, "tensor '%s' data_offsets [%llu, %llu] overlap '%s'", ti->name, (unsigned long long)ti->begin,
                         (unsigned long long)ti->end, f->t[idx[i - 1]].name);
        else if (ti->begin > expect)
            rc = err_set(e, "gap of %llu bytes in the data section before tensor '%s'", (unsigned long long)(ti->begin - expect), ti->name);
        expect = ti->end;
    }
    free(idx);
    if (rc) goto done;
    if (expect > data_len)
        rc = err_set(e, "truncated: the header describes %llu data bytes but only %llu follow it",
                     (unsigned long long)expect, (unsigned long long)data_len);
    else if (expect < data_len)
        rc = err_set(e, "%llu unexpected bytes after the last tensor", (unsigned long long)(data_len - expect));
done:
    cJSON_Delete(root);
    return rc;
}

int safetensors_open(SafeTensorsFile *f, const char *path, Err *e) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    snprintf(f->path, sizeof f->path, "%s", path);
    unsigned mode = 0;
    int fd = open_regular(path, &mode);  // a FIFO or device is refused before it can block a read
    if (fd == OPEN_NOT_REGULAR) return err_set(e, "%s: is %s, not a regular file", path, file_kind(mode));
    if (fd < 0) return err_set(e, "%s: cannot open: %s", path, strerror(errno));
    f->fd = fd;
    struct stat st;
    if (fstat(fd, &st) != 0) { err_set(e, "%s: cannot stat: %s", path, strerror(errno)); goto fail; }
    f->file_size = (uint64_t)st.st_size;
    uint8_t len8[8];
    if (f->file_size < 8 || pread_full_(fd, len8, 8, 0)) {
        err_set(e, "%s: %llu bytes, too short for a safetensors file (8-byte header length first)", path, (unsigned long long)f->file_size);
        goto fail;
    }
    uint64_t hlen = 0;
    for (int b = 7; b >= 0; b--) hlen = hlen << 8 | len8[b];
    if (hlen > SAFETENSORS_HEADER_MAX) {
        err_set(e, "%s: header length %llu is over the %u-byte limit: not a safetensors file or corrupt", path,
                (unsigned long long)hlen, SAFETENSORS_HEADER_MAX);
        goto fail;
    }
    if (hlen > f->file_size - 8) {
        err_set(e, "%s: truncated: header length %llu but the file has %llu bytes", path, (unsigned long long)hlen,
                (unsigned long long)f->file_size);
        goto fail;
    }
    f->data_start = 8 + hlen;
    char *hdr = xmalloc((size_t)hlen + 1);
    if (pread_full_(fd, hdr, (size_t)hlen, 8)) {
        free(hdr);
        err_set(e, "%s: cannot read header: %s", path, errno ? strerror(errno) : "file shrank while reading");
        goto fail;
    }
    hdr[hlen] = '\0';
    int rc = parse_header_(f, hdr, (size_t)hlen, e);
    free(hdr);
    if (rc) { err_prefix(e, "%s: ", path); goto fail; }
    return 0;
fail:
    safetensors_close(f);
    return -1;
}

const SafeTensorInfo *safetensors_find(const SafeTensorsFile *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

const char *safetensors_meta(const SafeTensorsFile *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_key[i], key) == 0) return f->meta_val[i];
    return NULL;
}

int safetensors_read_as(const SafeTensorsFile *f, const char *name, SafeDtype dtype, void *dst,
                        size_t numel_expected, Err *e) {
    const SafeTensorInfo *ti = safetensors_find(f, name);
    if (!ti) return err_set(e, "%s: no tensor '%s'", f->path, name);
    if (ti->dtype != dtype)
        return err_set(e, "%s: tensor '%s' is %s, expected %s", f->path, name, dtypes_[ti->dtype].name, safetensors_dtype_name(dtype));
    if (ti->numel != numel_expected)
        return err_set(e, "%s: tensor '%s' has %llu elements, expected %zu", f->path, name, (unsigned long long)ti->numel, numel_expected);
    size_t bytes = (size_t)(ti->end - ti->begin);
    if (bytes && pread_full_(f->fd, dst, bytes, f->data_start + ti->begin))
        return err_set(e, "%s: reading tensor '%s' failed: %s", f->path, name, errno ? strerror(errno) : "file truncated");
    return 0;
}

int safetensors_read(const SafeTensorsFile *f, const char *name, float *dst, size_t numel_expected, Err *e) {
    return safetensors_read_as(f, name, ST_F32, dst, numel_expected, e);
}

void safetensors_close(SafeTensorsFile *f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    for (int i = 0; i < f->n_meta; i++) { free(f->meta_key[i]); free(f->meta_val[i]); }
    free(f->meta_key);
    free(f->meta_val);
    f->t = NULL;
    f->meta_key = f->meta_val = NULL;
    f->n = f->n_meta = 0;
}

// error lists stay one readable line: the first few names, then a count
#define LIST_SHOW 6

int safetensors_read_tables(const char *path, const ParamTable *pt, const char *const *prefixes,
                            float *const *bufs, int nbuf, Err *e) {
    SafeTensorsFile f;
    if (safetensors_open(&f, path, e)) return -1;
    uint8_t *used = xcalloc((size_t)(f.n ? f.n : 1), 1);
    const SafeTensorInfo **match = xcalloc((size_t)(pt->n * nbuf > 0 ? pt->n * nbuf : 1), sizeof *match);
    Str_ missing = {0}, shapes = {0}, extra = {0};
    int n_missing = 0, n_shape = 0, n_extra = 0;
    char name[PARAM_NAME_MAX + 64];
    for (int k = 0; k < nbuf; k++) {
        const char *pre = prefixes && prefixes[k] ? prefixes[k] : "";
        for (int i = 0; i < pt->n; i++) {
            const ParamTensor *p = &pt->t[i];
            snprintf(name, sizeof name, "%s%s", pre, p->name);
            const SafeTensorInfo *ti = safetensors_find(&f, name);
            if (!ti) {
                if (n_missing++ < LIST_SHOW) str_addf_(&missing, "%s%s", n_missing > 1 ? ", " : "", name);
                continue;
            }
            used[ti - f.t] = 1;
            int same = ti->dtype == ST_F32 && ti->ndim == p->ndim;
            for (int d = 0; same && d < p->ndim; d++) same = ti->shape[d] == p->shape[d];
            if (!same) {
                if (n_shape++ < LIST_SHOW) {
                    int64_t want[PARAM_NDIM_MAX];
                    for (int d = 0; d < p->ndim; d++) want[d] = p->shape[d];
                    str_addf_(&shapes, "%s%s is %s ", n_shape > 1 ? ", " : "", name, dtypes_[ti->dtype].name);
                    str_add_shape_(&shapes, ti->ndim, ti->shape);
                    str_addf_(&shapes, " in the file but F32 ");
                    str_add_shape_(&shapes, p->ndim, want);
                    str_addf_(&shapes, " in the model");
                }
                continue;
            }
            match[k * pt->n + i] = ti;
        }
    }
    for (int j = 0; j < f.n; j++)
        if (!used[j] && n_extra++ < LIST_SHOW) str_addf_(&extra, "%s%s", n_extra > 1 ? ", " : "", f.t[j].name);

    int rc = 0;
    if (n_missing || n_shape || n_extra) {
        Str_ m = {0};
        str_addf_(&m, "%s: does not match the model (wrong config or checkpoint?):", path);
        if (n_missing) str_addf_(&m, " %d missing tensor%s: %s%s;", n_missing, n_missing > 1 ? "s" : "", missing.p,
                                 n_missing > LIST_SHOW ? ", ..." : "");
        if (n_shape) str_addf_(&m, " %d with another shape: %s%s;", n_shape, shapes.p, n_shape > LIST_SHOW ? ", ..." : "");
        if (n_extra) str_addf_(&m, " %d extra tensor%s not in the model: %s%s;", n_extra, n_extra > 1 ? "s" : "", extra.p,
                               n_extra > LIST_SHOW ? ", ..." : "");
        m.p[m.n - 1] = '\0';  // drop the last ';'
        rc = err_set(e, "%s", m.p);
        free(m.p);
    }
    // only now is any buffer written, so a mismatch leaves the caller's parameters as they were
    for (int k = 0; k < nbuf && !rc; k++)
        for (int i = 0; i < pt->n && !rc; i++)
            rc = safetensors_read(&f, match[k * pt->n + i]->name, bufs[k] + pt->t[i].offset, pt->t[i].numel, e);
    free(missing.p);
    free(shapes.p);
    free(extra.p);
    free(match);
    free(used);
    safetensors_close(&f);
    return rc;
}

int safetensors_read_table(const char *path, const ParamTable *pt, float *buf, Err *e) {
    const char *pre[1] = {""};
    float *bufs[1] = {buf};
    return safetensors_read_tables(path, pt, pre, bufs, 1, e);
}
