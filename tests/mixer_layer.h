/*
 * One mixer on its own, outside a model, for the mixer tests: build it from a JSON spec at width C with its
 * own parameter table, size its activations for (B,T), and the loss L = sum(dy * y) the gradient checks use;
 * then the checks the chunked, recurrent mixers share (chunk invariance, step == forward, refused options).
 */
#ifndef SEQ_TEST_MIXER_LAYER_H
#define SEQ_TEST_MIXER_LAYER_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "mixers/mixer.h"
#include "test.h"

typedef struct Layer {
    MixerSpec spec;
    ParamTable pt;
    Mixer m;
    float *params, *grads, *acts, *scratch;
    int B, T, C;
} Layer;

static inline int layer_build_(Layer *L, const char *json, int C, uint64_t seed) {
    memset(L, 0, sizeof *L);
    Err e = {{0}};
    cJSON *j = cJSON_Parse(json);
    int rc = mixer_spec_parse(&L->spec, j, NULL, "model.mixer", C, &e);
    cJSON_Delete(j);
    CHECK(rc == 0, "parse %s (%.200s)", json, e.msg);
    if (rc) return -1;
    param_table_init(&L->pt);
    rc = L->spec.ops->params(&L->spec, &L->pt, "mixer", 2, &e);
    CHECK(rc == 0, "params %s (%.200s)", json, e.msg);
    if (rc) return -1;
    L->C = C;
    L->params = malloc(L->pt.numel * sizeof(float));
    L->grads = calloc(L->pt.numel, sizeof(float));
    param_init_all(&L->pt, L->params, seed);
    L->m.spec = &L->spec;
    L->m.pt = &L->pt;
    L->m.first = 0;
    L->m.params = L->params;
    L->m.grads = L->grads;
    if (L->spec.ops->init) L->spec.ops->init(&L->m);
    return 0;
}

static inline void layer_shape_(Layer *L, int B, int T) {
    free(L->acts);
    free(L->scratch);
    L->B = B;
    L->T = T;
    L->acts = calloc(L->spec.ops->act_size(&L->spec, B, T), sizeof(float));
    L->scratch = calloc(L->spec.ops->scratch_size(&L->spec, B, T) + 1, sizeof(float));
    L->m.acts = L->acts;
    L->m.scratch = L->scratch;
    L->m.B = B;
    L->m.T = T;
}

static inline void layer_free_(Layer *L) {
    free(L->params); free(L->grads); free(L->acts); free(L->scratch);
    param_table_free(&L->pt);
    mixer_spec_free(&L->spec);
}

typedef struct Ctx {
    Layer *L;
    float *x, *y, *dy;
} Ctx;

static inline double layer_loss_(void *p) {
    Ctx *c = p;
    Layer *L = c->L;
    L->spec.ops->forward(&L->m, c->y, c->x, L->B, L->T);
    return gc_dot(c->dy, c->y, (size_t)L->B * L->T * L->C);
}

// the gradient checks of one layer at (B, T) with its current parameters: random x and dy, finite
// outputs and dx, then dx and every tensor against central differences with step h (rtol 2e-2, atol 1e-4);
// gmax (pt.n) gets each tensor's largest |gradient| for the caller's own checks that the tensors the
// options use carry gradient well above the tolerance
static inline void layer_gradcheck_all(Layer *L, const char *what, GcRng *r, double h, double *gmax) {
    int B = L->B, T = L->T, C = L->C;
    size_t n = (size_t)B * T * C;
    Ctx c = {L, gc_randn(r, n, 1.0f), (float *)malloc(n * sizeof(float)), gc_randn(r, n, 1.0f)};
    float *dx = (float *)calloc(n, sizeof(float));
    layer_loss_(&c);
    L->spec.ops->backward(&L->m, dx, c.dy, c.x, B, T);
    float *g = (float *)malloc(L->pt.numel * sizeof(float));
    memcpy(g, L->grads, L->pt.numel * sizeof(float));
    int finite = 1;
    for (size_t i = 0; i < n; i++) finite &= isfinite(c.y[i]) && isfinite(dx[i]);
    CHECK(finite, "%s: outputs and dx finite", what);
    char name[200];
    snprintf(name, sizeof name, "%s: dx", what);
    gradcheck_buffer(name, c.x, dx, n, layer_loss_, &c, h, 2e-2, 1e-4, 3, 4, 1);
    for (int k = 0; k < L->pt.n; k++) {
        const ParamTensor *t = &L->pt.t[k];
        double gm = 0;
        for (size_t i = 0; i < t->numel; i++) gm = fmax(gm, fabs(g[t->offset + i]));
        gmax[k] = gm;
        snprintf(name, sizeof name, "%s: %s (max|g| %.3g)", what, t->name, gm);
        gradcheck_buffer(name, L->params + t->offset, g + t->offset, t->numel, layer_loss_, &c, h, 2e-2, 1e-4, 3, 4,
                         (uint64_t)k + 2);
    }
    free(g); free(dx); free(c.x); free(c.y); free(c.dy);
}

// layer_gradcheck_all, then every tensor must carry gradient above gmin: a check at atol 1e-4 proves little
// for a gradient below it
static inline void layer_gradcheck_carried(Layer *L, const char *what, GcRng *r, double h, double gmin) {
    double *gmax = (double *)malloc((size_t)L->pt.n * sizeof(double));
    layer_gradcheck_all(L, what, r, h, gmax);
    for (int k = 0; k < L->pt.n; k++)
        CHECK(gmax[k] > gmin, "%s: %s carries gradient (max|g| %.3g > %g)", what, L->pt.t[k].name, gmax[k], gmin);
    free(gmax);
}

static inline int param_index_(const Layer *L, const char *suffix) {
    char name[PARAM_NAME_MAX];
    snprintf(name, sizeof name, "mixer.%s", suffix);
    return param_find(&L->pt, name);
}

// the layer's tensor mixer.<suffix> in its parameter buffer, NULL when it has none
static inline const float *layer_tensor(const Layer *L, const char *suffix) {
    int k = param_index_(L, suffix);
    return k >= 0 ? L->params + L->pt.t[k].offset : NULL;
}

// move every parameter off its init by N(0, std^2), so every path carries gradient
static inline void layer_perturb(Layer *L, GcRng *r, float std) {
    for (size_t i = 0; i < L->pt.numel; i++) L->params[i] += std * gc_normal(r);
}

// forward and backward of x, dy (B,T,C) at the layer's shape: y and dx (B,T,C), and the parameter gradients
// (in L->grads) from zero
static inline void layer_grads(Layer *L, const float *x, const float *dy, float *y, float *dx) {
    size_t n = (size_t)L->B * L->T * L->C;
    memset(dx, 0, n * sizeof(float));
    memset(L->grads, 0, L->pt.numel * sizeof(float));
    L->spec.ops->forward(&L->m, y, x, L->B, L->T);
    L->spec.ops->backward(&L->m, dx, dy, x, L->B, L->T);
}

// forward and backward of x, dy ~ N(0, 1) drawn from r at the layer's shape (long T, extreme gates): whether the
// outputs, dx and every parameter gradient are finite
static inline int layer_grads_finite(Layer *L, GcRng *r) {
    size_t n = (size_t)L->B * L->T * L->C;
    float *x = gc_randn(r, n, 1.0f), *dy = gc_randn(r, n, 1.0f);
    float *y = (float *)malloc(n * sizeof(float)), *dx = (float *)malloc(n * sizeof(float));
    layer_grads(L, x, dy, y, dx);
    int finite = 1;
    for (size_t i = 0; i < n; i++) finite &= isfinite(y[i]) && isfinite(dx[i]);
    for (size_t i = 0; i < L->pt.numel; i++) finite &= isfinite(L->grads[i]);
    free(x); free(dy); free(y); free(dx);
    return finite;
}

// recurrent decoding against the full forward on x (B,T,C): the largest |step - forward| over every output,
// and in *scale the largest |forward|
static inline double layer_step_error(Layer *L, const float *x, double *scale) {
    int B = L->B, T = L->T, C = L->C;
    size_t n = (size_t)B * T * C;
    float *y = (float *)malloc(n * sizeof(float));
    L->spec.ops->forward(&L->m, y, x, B, T);
    size_t ss = L->spec.ops->state_size(&L->spec, T);
    float *state = (float *)malloc((size_t)B * ss * sizeof(float)), *xt = (float *)malloc((size_t)B * C * sizeof(float));
    float *yt = (float *)malloc((size_t)B * C * sizeof(float));
    L->spec.ops->state_init(&L->m, state, B, T);
    double worst = 0;
    *scale = 0;
    for (int t = 0; t < T; t++) {
        for (int b = 0; b < B; b++) memcpy(xt + (size_t)b * C, x + ((size_t)b * T + t) * C, (size_t)C * sizeof(float));
        L->spec.ops->step(&L->m, state, yt, xt, B, t, T);
        for (int b = 0; b < B; b++)
            for (int c = 0; c < C; c++) {
                double full = y[((size_t)b * T + t) * C + c];
                worst = fmax(worst, fabs(full - yt[(size_t)b * C + c]));
                *scale = fmax(*scale, fabs(full));
            }
    }
    free(y); free(state); free(xt); free(yt);
    return worst;
}

// ----------------------------------------------------------------------------
// the checks every chunked, recurrent mixer shares: chunk invariance, decoding, options it refuses

// how a test moves a layer's parameters off its init before a check (layer_perturb at some std, or its own
// ranges for the dynamics), drawing from r
typedef void (*LayerPerturbFn)(Layer *L, GcRng *r);

// what layer_chunk_diff finds: the largest differences from the first chunk size's results, and the scales
typedef struct ChunkDiff {
    double y, g;              // max|y - y_ref|; max|dx - dx_ref| and max|grad - grad_ref| over every parameter
    double y_scale, g_scale;  // max|y_ref|; max|dx_ref| and max|grad_ref|
} ChunkDiff;

// the chunk size changes memory and speed, not results: the layer of json (an object without "chunk") with
// "chunk" set to each of chunks[0..n_chunks), at width C and (B,T), built from seed 5 and moved by perturb on
// GcRng {6}, then the forward and backward of x and dy ~ N(0, 1) drawn after; *d gets the largest differences
// from chunks[0]'s outputs and gradients. Returns 0, or -1 where a layer could not be built.
static inline int layer_chunk_diff(ChunkDiff *d, const char *json, const int *chunks, int n_chunks, int C, int B,
                                   int T, LayerPerturbFn perturb) {
    size_t n = (size_t)B * T * C, np = 0;
    float *ref_y = NULL, *ref_dx = NULL, *ref_g = NULL;
    int rc = 0;
    memset(d, 0, sizeof *d);
    for (int ci = 0; ci < n_chunks; ci++) {
        char js[256];
        snprintf(js, sizeof js, "%.*s, \"chunk\": %d}", (int)strlen(json) - 1, json, chunks[ci]);
        Layer L;
        if ((rc = layer_build_(&L, js, C, 5))) break;
        layer_shape_(&L, B, T);
        GcRng r = {6};
        perturb(&L, &r);
        float *x = gc_randn(&r, n, 1.0f), *dy = gc_randn(&r, n, 1.0f);
        float *y = (float *)malloc(n * sizeof(float)), *dx = (float *)malloc(n * sizeof(float));
        layer_grads(&L, x, dy, y, dx);
        if (!ref_y) {
            ref_y = y, ref_dx = dx, np = L.pt.numel;
            ref_g = (float *)malloc(np * sizeof(float));
            memcpy(ref_g, L.grads, np * sizeof(float));
            for (size_t i = 0; i < n; i++) {
                d->y_scale = fmax(d->y_scale, fabs(y[i]));
                d->g_scale = fmax(d->g_scale, fabs(dx[i]));
            }
            for (size_t i = 0; i < np; i++) d->g_scale = fmax(d->g_scale, fabs(ref_g[i]));
        } else {
            for (size_t i = 0; i < n; i++) {
                d->y = fmax(d->y, fabs((double)y[i] - ref_y[i]));
                d->g = fmax(d->g, fabs((double)dx[i] - ref_dx[i]));
            }
            for (size_t i = 0; i < np; i++) d->g = fmax(d->g, fabs((double)L.grads[i] - ref_g[i]));
            free(y); free(dx);
        }
        free(x); free(dy);
        layer_free_(&L);
    }
    free(ref_y); free(ref_dx); free(ref_g);
    return rc;
}

// recurrent decoding of the layer of json at width 16 and (B,T) = (3,40), built from seed 13 and moved by
// perturb on GcRng {14}, against its full forward on x ~ N(0, 1) drawn after: layer_step_error's largest
// |step - forward|, and in *scale the largest |forward| (infinity and 0 where the layer could not be built)
static inline double layer_decode_error(const char *json, LayerPerturbFn perturb, double *scale) {
    int C = 16, B = 3, T = 40;
    Layer L;
    *scale = 0;
    if (layer_build_(&L, json, C, 13)) return INFINITY;
    layer_shape_(&L, B, T);
    GcRng r = {14};
    perturb(&L, &r);
    float *x = gc_randn(&r, (size_t)B * T * C, 1.0f);
    double worst = layer_step_error(&L, x, scale);
    free(x);
    layer_free_(&L);
    return worst;
}

// options that make no sense: the spec json at width C is refused, with a message that contains want (the key
// path, or what is wrong)
static inline void layer_check_error(const char *json, int C, const char *want) {
    MixerSpec s;
    Err e = {{0}};
    cJSON *j = cJSON_Parse(json);
    int rc = mixer_spec_parse(&s, j, NULL, "model.mixer", C, &e);
    cJSON_Delete(j);
    CHECK(rc != 0, "refused: %s", json);
    CHECK_CONTAINS(e.msg, want, "the error for %s contains \"%s\"", json, want);
    if (rc == 0) mixer_spec_free(&s);
}

// the gradient check of the layer of json at width 16 and (B,T) = (2,23), built from seed 77 and moved by perturb
// on GcRng {404}: layer_gradcheck_carried with step h, every tensor carrying gradient above 1e-2
static inline void layer_gradcheck_perturbed(const char *what, const char *json, LayerPerturbFn perturb, double h) {
    Layer L;
    if (layer_build_(&L, json, 16, 77)) return;
    layer_shape_(&L, 2, 23);
    GcRng r = {404};
    perturb(&L, &r);
    layer_gradcheck_carried(&L, what, &r, h, 1e-2);
    layer_free_(&L);
}

// chunk 1, 3 and 64 give the same outputs and gradients at width 16 and (B,T) = (2,50) (layer_chunk_diff), each
// to 1e-5 of its scale
static inline void layer_chunk_check(const char *what, const char *json, LayerPerturbFn perturb) {
    const int chunks[3] = {1, 3, 64};
    ChunkDiff d;
    int rc = layer_chunk_diff(&d, json, chunks, 3, 16, 2, 50, perturb);
    CHECK(rc == 0 && d.y <= 1e-5 * d.y_scale && d.y_scale > 1e-2,
          "%s: chunk 1, 3, 64 give the same outputs (max|d| %.2g, max|y| %.2g)", what, d.y, d.y_scale);
    CHECK(rc == 0 && d.g <= 1e-5 * d.g_scale && d.g_scale > 1e-2,
          "%s: chunk 1, 3, 64 give the same dx and parameter gradients (max|d| %.2g, max|g| %.2g)", what, d.g,
          d.g_scale);
}

// the two checks every chunked mixer's test runs over its table of cases {what, json}: chunk 1, 3 and 64 give
// the same outputs and gradients (C 8, B 2, T 23: not a multiple of 3), and token-by-token decoding reproduces
// the full forward, each to 1e-5 of its scale
static inline void layer_cases_chunk_invariance(const char *const (*cases)[2], int n, LayerPerturbFn perturb) {
    const int chunks[3] = {1, 3, 64};
    for (int i = 0; i < n; i++) {
        ChunkDiff d;
        int rc = layer_chunk_diff(&d, cases[i][1], chunks, 3, 8, 2, 23, perturb);
        CHECK(rc == 0 && d.y <= 1e-5 * d.y_scale && d.g <= 1e-5 * d.g_scale,
              "%s: chunk 1, 3 and 64 give the same outputs (max|d| %.2g of %.2g) and gradients (max|d| %.2g of %.2g)",
              cases[i][0], d.y, d.y_scale, d.g, d.g_scale);
    }
}

static inline void layer_cases_decode(const char *const (*cases)[2], int n, LayerPerturbFn perturb) {
    for (int i = 0; i < n; i++) {
        double scale, worst = layer_decode_error(cases[i][1], perturb, &scale);
        CHECK(worst <= 1e-5 * scale && scale > 1e-3, "%s: token-by-token decoding = full forward (max|d| %.2g, max|y| %.2g)",
              cases[i][0], worst, scale);
    }
}

#endif
