// libFuzzer harness: the safetensors reader (ckpt/safetensors.h): header validation, then every tensor
// read in its own dtype and as F32 when it is one, and the metadata.
#include "fuzz_common.h"
#include "ckpt/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[256];
    fuzz_write("x.safetensors", data, size, path, sizeof path);
    SafeTensorsFile f;
    Err e;
    if (safetensors_open(&f, path, &e) != 0) return 0;
    for (int i = 0; i < f.n; i++) {
        const SafeTensorInfo *t = &f.t[i];
        size_t bytes = (size_t)t->numel * safetensors_dtype_size(t->dtype);
        if (t->begin > t->end || t->end > f.file_size - f.data_start || bytes != t->end - t->begin) abort();
        if (bytes > (64u << 20)) continue;
        void *buf = malloc(bytes ? bytes : 1);
        (void)safetensors_read_as(&f, t->name, t->dtype, buf, (size_t)t->numel, &e);
        if (t->dtype == ST_F32) (void)safetensors_read(&f, t->name, buf, (size_t)t->numel, &e);
        if (safetensors_find(&f, t->name) == NULL) abort();
        free(buf);
    }
    (void)safetensors_meta(&f, "step");
    safetensors_close(&f);
    return 0;
}
