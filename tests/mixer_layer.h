/*
 * One mixer on its own, outside a model, for the mixer tests: build it from a JSON spec at width C with its
 * own parameter table, size its activations for (B,T), and the loss L = sum(dy * y) the gradient checks use.
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

static inline int param_index_(const Layer *L, const char *suffix) {
    char name[PARAM_NAME_MAX];
    snprintf(name, sizeof name, "mixer.%s", suffix);
    return param_find(&L->pt, name);
}

// move every parameter off its init by N(0, std^2), so every path carries gradient
static inline void layer_perturb(Layer *L, GcRng *r, float std) {
    for (size_t i = 0; i < L->pt.numel; i++) L->params[i] += std * gc_normal(r);
}

// forward and backward of x, dy (B,T,C) at the layer's shape: dx (B,T,C) and the parameter gradients (in
// L->grads) from zero
static inline void layer_grads(Layer *L, const float *x, const float *dy, float *dx) {
    size_t n = (size_t)L->B * L->T * L->C;
    float *y = (float *)malloc(n * sizeof(float));
    memset(dx, 0, n * sizeof(float));
    memset(L->grads, 0, L->pt.numel * sizeof(float));
    L->spec.ops->forward(&L->m, y, x, L->B, L->T);
    L->spec.ops->backward(&L->m, dx, dy, x, L->B, L->T);
    free(y);
}

// recurrent decoding against the full forward on x (B,T,C): the largest |step - forward| over every output,
// and in *scale the largest |forward|
static inline double layer_step_error(Layer *L, const float *x, double *scale) {
    int B = L->B, T = L->T, C = L->C;
    size_t n = (size_t)B * T * C;
    float *y = (float *)malloc(n * sizeof(float));
    L->spec.ops->forward(&L->m, y, x, B, T);
    size_t ss = L->spec.ops->state_size(&L->spec);
    float *state = (float *)malloc((size_t)B * ss * sizeof(float)), *xt = (float *)malloc((size_t)B * C * sizeof(float));
    float *yt = (float *)malloc((size_t)B * C * sizeof(float));
    L->spec.ops->state_init(&L->m, state, B);
    double worst = 0;
    *scale = 0;
    for (int t = 0; t < T; t++) {
        for (int b = 0; b < B; b++) memcpy(xt + (size_t)b * C, x + ((size_t)b * T + t) * C, (size_t)C * sizeof(float));
        L->spec.ops->step(&L->m, state, yt, xt, B);
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

#endif
