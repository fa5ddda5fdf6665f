#include "core/params.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

void param_table_init(ParamTable *pt) { memset(pt, 0, sizeof *pt); }

void param_table_free(ParamTable *pt) {
    free(pt->t);
    memset(pt, 0, sizeof *pt);
}

int param_find(const ParamTable *pt, const char *name) {
    for (int i = 0; i < pt->n; i++)
        if (strcmp(pt->t[i].name, name) == 0) return i;
    return -1;
}

int param_add(ParamTable *pt, const char *name, int ndim, const int *shape, ParamInit init, int decay, Err *e) {
    if (strlen(name) >= PARAM_NAME_MAX) return err_set(e, "parameter name '%s' is too long", name);
    if (ndim < 1 || ndim > PARAM_NDIM_MAX) return err_set(e, "parameter %s: %d dimensions (1..%d)", name, ndim, PARAM_NDIM_MAX);
    if (param_find(pt, name) >= 0) return err_set(e, "parameter %s declared twice", name);
    if (pt->n == pt->cap) {
        pt->cap = pt->cap ? pt->cap * 2 : 64;
        pt->t = xrealloc(pt->t, (size_t)pt->cap * sizeof(ParamTensor));
    }
    ParamTensor *t = &pt->t[pt->n];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1) return err_set(e, "parameter %s: dimension %d is %d", name, d, shape[d]);
        t->shape[d] = shape[d];
        t->numel *= (size_t)shape[d];
    }
    // keep every tensor 16-float aligned so vector kernels can assume aligned rows where it matters
    t->offset = (pt->numel + 15) & ~(size_t)15;
    t->init = init;
    t->decay = decay;
    pt->numel = t->offset + t->numel;
    return pt->n++;
}

void param_init_all(const ParamTable *pt, float *params, uint64_t seed) {
    memset(params, 0, pt->numel * sizeof(float));
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < pt->n; i++) {
        const ParamTensor *t = &pt->t[i];
        float *p = params + t->offset;
        Rng r;
        rng_seed(&r, seed ^ hash_str64(t->name));
        switch (t->init.kind) {
        case INIT_ZEROS:
        case INIT_CUSTOM:
            break;
        case INIT_ONES:
            for (size_t k = 0; k < t->numel; k++) p[k] = 1.0f;
            break;
        case INIT_CONST:
            for (size_t k = 0; k < t->numel; k++) p[k] = t->init.a;
            break;
        case INIT_NORMAL:
            for (size_t k = 0; k < t->numel; k++) p[k] = (float)(t->init.a * rng_normal(&r));
            break;
        case INIT_UNIFORM:
            for (size_t k = 0; k < t->numel; k++) p[k] = (float)(t->init.a + (t->init.b - t->init.a) * rng_uniform(&r));
            break;
        case INIT_COMPLEX_ROWS:
        case INIT_COMPLEX_COLS: {
            // (rows, cols) = shape; pairs (Re, Im) are b apart within blocks of 2b along one axis
            int half = (int)t->init.b, rows = t->shape[0], cols = t->ndim > 1 ? t->shape[1] : 1;
            int by_cols = t->init.kind == INIT_COMPLEX_COLS;
            int n_along = by_cols ? cols : rows, n_other = by_cols ? rows : cols;
            for (int blk = 0; blk + 2 * half <= n_along; blk += 2 * half)
                for (int kk = 0; kk < half; kk++)
                    for (int o = 0; o < n_other; o++) {
                        // Rayleigh(sigma) = sigma sqrt(-2 ln U), U in (0, 1]
                        double mag = t->init.a * sqrt(-2.0 * log(1.0 - rng_uniform(&r)));
                        double phase = 6.283185307179586 * rng_uniform(&r);
                        size_t re = by_cols ? (size_t)o * cols + blk + kk : (size_t)(blk + kk) * cols + o;
                        size_t im = by_cols ? re + half : re + (size_t)half * cols;
                        p[re] = (float)(mag * cos(phase));
                        p[im] = (float)(mag * sin(phase));
                    }
            break;
        }
        case INIT_LOGUNIFORM: {
            double la = log(t->init.a), lb = log(t->init.b);
            for (size_t k = 0; k < t->numel; k++) p[k] = (float)exp(la + (lb - la) * rng_uniform(&r));
            break;
        }
        }
    }
}
