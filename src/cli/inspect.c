#include "cli/inspect.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/files.h"
#include "core/png.h"
#include "data/loader.h"
#include "data/tasks.h"
#include "eval/evaluate.h"

// the largest attention-map PNG side; longer contexts are downsampled to it (and the message says so)
#define ATTN_MAP_MAX_PX 1024

int inspect_input_task(InspectInput *x, const RunConfig *c, Err *e) {
    memset(x, 0, sizeof *x);
    Loader l;
    if (evaluate_task_open(&l, c, TASK_TEST, 0, e) != 0) return -1;
    int T = c->train.seq_len;
    int32_t *in = xmalloc((size_t)T * sizeof(int32_t)), *tg = xmalloc((size_t)T * sizeof(int32_t));
    int rc = loader_next(&l, in, tg, 1, e);
    loader_close(&l);
    if (rc != 0) {
        free(in);
        free(tg);
        return -1;
    }
    x->in = in;
    x->tg = tg;
    x->T = T;
    snprintf(x->what, sizeof x->what, "the first test example of the task %s (%d tokens)", c->data.task.kind, T);
    return 0;
}

int inspect_input_shard(InspectInput *x, Shard *sh, int L, Err *e) {
    memset(x, 0, sizeof *x);
    if (sh->n_tokens < (uint64_t)L + 1)
        return err_set(e, "%s: %llu tokens, fewer than the %d + 1 a map at context %d needs", sh->path,
                       (unsigned long long)sh->n_tokens, L, L);
    uint32_t *tok = xmalloc(((size_t)L + 1) * sizeof(uint32_t));
    int rc = shard_read(sh, tok, 0, (uint64_t)L + 1, e);
    if (rc == 0) {
        x->in = xmalloc((size_t)L * sizeof(int));
        x->tg = xmalloc((size_t)L * sizeof(int));
        for (int t = 0; t < L; t++) {
            x->in[t] = (int)tok[t];
            x->tg[t] = (int)tok[t + 1];
        }
        x->T = L;
        snprintf(x->what, sizeof x->what, "the first %d tokens of %s", L, sh->path);
    }
    free(tok);
    return rc;
}

void inspect_input_free(InspectInput *x) {
    free(x->in);
    free(x->tg);
    memset(x, 0, sizeof *x);
}

// the layer index (negative from the end) checked against the model
static int layer_index_(const Model *m, int *layer, Err *e) {
    if (*layer < 0) *layer += m->L;
    if (*layer < 0 || *layer >= m->L)
        return err_set(e, "--layer: %d is not a layer of this %d-layer model", *layer, m->L);
    return 0;
}

// the T x T matrix as text, "nan" where hidden
static int write_matrix_(const char *path, const float *P, int T, Err *e) {
    FILE *f = fopen_output(path, 0, e);
    if (!f) return -1;
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++) {
            float v = P[(size_t)i * T + j];
            if (isnan(v)) fputs("nan", f);
            else fprintf(f, "%.6g", v);
            fputc(j + 1 < T ? ' ' : '\n', f);
        }
    return fclose_output(f, path, e);
}

int inspect_attention_maps(Model *m, const InspectInput *x, int layer, const long *heads, int n_heads, int matrix,
                           const char *dir, Err *e) {
    if (layer_index_(m, &layer, e) != 0) return -1;
    int H = model_layer_attn_heads(m, layer), T = x->T;
    if (!H)
        return err_set(e, "--attention-map: layer %d's mixer '%s' has no attention map", layer,
                       model_layer_name(m, layer));
    for (int k = 0; k < n_heads; k++)
        if (heads[k] < 0 || heads[k] >= H)
            return err_set(e, "--heads: %ld is not a head of layer %d (it has %d: 0 .. %d)", heads[k], layer, H, H - 1);
    int rc = model_forward(m, x->in, x->tg, 1, T, e);
    if (rc == 0 && mkdir(dir, 0755) != 0 && errno != EEXIST) rc = err_set(e, "cannot create %s: %s", dir, strerror(errno));
    float *P = rc == 0 ? xmalloc((size_t)T * T * sizeof(float)) : NULL;
    int n = n_heads ? n_heads : H;
    for (int k = 0; k < n && rc == 0; k++) {
        int h = n_heads ? (int)heads[k] : k;
        model_layer_attn_map(m, layer, 0, h, P);
        int sign = 0;
        for (size_t i = 0; i < (size_t)T * T && !sign; i++) sign = P[i] < 0.0f;
        char path[1400];
        snprintf(path, sizeof path, "%s/layer%d_head%d.png", dir, layer, h);
        rc = sign ? png_write_heatmap_signed(path, P, T, T, ATTN_MAP_MAX_PX, e)
                  : png_write_heatmap(path, P, T, T, ATTN_MAP_MAX_PX, e);
        const char *how = sign ? "signed weights: blue < 0 < red" : "weights";
        if (rc == 0 && T > ATTN_MAP_MAX_PX)  // the heatmap averages blocks down to ATTN_MAP_MAX_PX pixels
            printf("wrote %s (%d x %d PNG: the %d x %d %s downsampled, each pixel the mean of a block)\n", path,
                   ATTN_MAP_MAX_PX, ATTN_MAP_MAX_PX, T, T, how);
        else if (rc == 0)
            printf("wrote %s (%d x %d PNG: the %d x %d %s, one pixel each)\n", path, T, T, T, T, how);
        if (rc == 0 && matrix) {
            snprintf(path, sizeof path, "%s/layer%d_head%d.tsv", dir, layer, h);
            rc = write_matrix_(path, P, T, e);
            if (rc == 0) printf("wrote %s (the %d x %d weights as text)\n", path, T, T);
        }
    }
    free(P);
    return rc;
}

int inspect_posterior_var(Model *m, const InspectInput *x, int layer, const char *path, Err *e) {
    if (layer_index_(m, &layer, e) != 0) return -1;
    size_t n = model_layer_posterior_var(m, layer, 0, NULL);
    if (!n)
        return err_set(e, "--posterior-var: layer %d's mixer '%s' has no posterior (kla has)", layer,
                       model_layer_name(m, layer));
    int T = x->T;
    if (model_forward(m, x->in, x->tg, 1, T, e) != 0) return -1;
    float *var = xmalloc((size_t)T * n * sizeof(float));
    model_layer_posterior_var(m, layer, 0, var);
    FILE *f = fopen_output(path, 0, e);
    int rc = f ? 0 : -1;
    if (f) {
        fprintf(f, "position\tinput\ttarget\tmean");
        for (size_t c = 0; c < n; c++) fprintf(f, "\tch%zu", c);
        fputc('\n', f);
        for (int t = 0; t < T; t++) {
            double s = 0.0;
            for (size_t c = 0; c < n; c++) s += var[(size_t)t * n + c];
            fprintf(f, "%d\t%d\t%d\t%.6g", t, x->in[t], x->tg[t], s / (double)n);
            for (size_t c = 0; c < n; c++) fprintf(f, "\t%.6g", var[(size_t)t * n + c]);
            fputc('\n', f);
        }
        rc = fclose_output(f, path, e);
    }
    if (rc == 0)
        printf("wrote %s (layer %d's output variance at %d positions x %zu channels, of %s)\n", path, layer, T, n,
               x->what);
    free(var);
    return rc;
}
