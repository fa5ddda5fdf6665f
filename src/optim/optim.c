#include "optim/optim.h"

#include <fnmatch.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/adamw.h"
#include "nn/fastmath.h"

OptimGroup optim_group_default(void) {
    OptimGroup g;
    memset(&g, 0, sizeof g);
    g.lr_mult = 1.0f;
    g.lr = g.beta1 = g.beta2 = g.eps = g.weight_decay = NAN;
    g.clip = 0.0f;
    return g;
}

// ----------------------------------------------------------------------------
// configuration checks

static int check_beta_(float b, const char *what, int gi, Err *e) {
    if (!(b >= 0.0f && b < 1.0f)) {
        if (gi < 0) return err_set(e, "optimizer: %s must be in [0, 1), got %g", what, (double)b);
        return err_set(e, "optimizer group %d: %s must be in [0, 1), got %g", gi, what, (double)b);
    }
    return 0;
}

static int check_config_(const OptimConfig *c, Err *e) {
    if (!(c->lr > 0.0f) || !isfinite(c->lr)) return err_set(e, "optimizer: lr must be > 0, got %g", (double)c->lr);
    if (check_beta_(c->beta1, "beta1", -1, e) || check_beta_(c->beta2, "beta2", -1, e)) return -1;
    if (!(c->eps >= 0.0f) || !isfinite(c->eps)) return err_set(e, "optimizer: eps must be >= 0, got %g", (double)c->eps);
    if (!(c->weight_decay >= 0.0f) || !isfinite(c->weight_decay))
        return err_set(e, "optimizer: weight_decay must be >= 0, got %g", (double)c->weight_decay);
    if (!(c->grad_clip >= 0.0f) || !isfinite(c->grad_clip))
        return err_set(e, "optimizer: grad_clip must be >= 0 (0 = off), got %g", (double)c->grad_clip);
    if (c->n_groups < 0 || (c->n_groups > 0 && !c->groups))
        return err_set(e, "optimizer: %d groups but no group array", c->n_groups);
    for (int gi = 0; gi < c->n_groups; gi++) {
        const OptimGroup *g = &c->groups[gi];
        if (!g->patterns[0] || !g->patterns[0][0])
            return err_set(e, "optimizer group %d: no name pattern (give at least one, e.g. \"blocks.*.mixer.*\")", gi);
        if (!(g->lr_mult >= 0.0f) || !isfinite(g->lr_mult))
            return err_set(e, "optimizer group %d (%s): lr_mult must be >= 0, got %g", gi, g->patterns[0], (double)g->lr_mult);
        if (!isnan(g->lr) && (!(g->lr > 0.0f) || !isfinite(g->lr)))
            return err_set(e, "optimizer group %d (%s): lr must be > 0, got %g", gi, g->patterns[0], (double)g->lr);
        if (!isnan(g->lr) && g->lr_mult != 1.0f)
            return err_set(e, "optimizer group %d (%s): set either lr (%g, the group's own peak lr) or lr_mult (%g), not both",
                           gi, g->patterns[0], (double)g->lr, (double)g->lr_mult);
        if (!isnan(g->beta1) && check_beta_(g->beta1, "beta1", gi, e)) return -1;
        if (!isnan(g->beta2) && check_beta_(g->beta2, "beta2", gi, e)) return -1;
        if (!isnan(g->eps) && (!(g->eps >= 0.0f) || !isfinite(g->eps)))
            return err_set(e, "optimizer group %d (%s): eps must be >= 0, got %g", gi, g->patterns[0], (double)g->eps);
        if (!isnan(g->weight_decay) && (!(g->weight_decay >= 0.0f) || !isfinite(g->weight_decay)))
            return err_set(e, "optimizer group %d (%s): weight_decay must be >= 0, got %g", gi, g->patterns[0],
                           (double)g->weight_decay);
        if (!(g->clip >= 0.0f) || !isfinite(g->clip))
            return err_set(e, "optimizer group %d (%s): clip must be >= 0 (0 = off), got %g", gi, g->patterns[0], (double)g->clip);
    }
    return 0;
}

static int group_matches_(const OptimGroup *g, const char *name) {
    for (int j = 0; j < OPTIM_GROUP_PATTERNS && g->patterns[j]; j++)
        if (fnmatch(g->patterns[j], name, 0) == 0) return 1;
    return 0;
}

// ----------------------------------------------------------------------------
// setup

int optim_init(Optim *o, const ParamTable *pt, const OptimConfig *cfg, Err *e) {
    memset(o, 0, sizeof *o);
    if (check_config_(cfg, e)) return -1;
    int ng = cfg->n_groups;
    // typo protection: every pattern must match some tensor name
    for (int gi = 0; gi < ng; gi++) {
        const OptimGroup *g = &cfg->groups[gi];
        for (int j = 0; j < OPTIM_GROUP_PATTERNS && g->patterns[j]; j++) {
            int hit = 0;
            for (int k = 0; k < pt->n && !hit; k++) hit = fnmatch(g->patterns[j], pt->t[k].name, 0) == 0;
            if (!hit)
                return err_set(e, "optimizer group %d: pattern \"%s\" matches no parameter (names look like \"%s\"); "
                                  "check the spelling", gi, g->patterns[j], pt->n ? pt->t[0].name : "(no parameters)");
        }
    }
    o->pt = pt;
    o->cfg = *cfg;
    o->cfg.groups = NULL;  // borrowed pointer: not valid after init
    o->n_groups = ng;
    o->rules = xcalloc((size_t)ng + 1, sizeof *o->rules);
    o->group_norm = xcalloc((size_t)ng + 1, sizeof *o->group_norm);
    o->tensor_group = xcalloc(pt->n ? (size_t)pt->n : 1, sizeof *o->tensor_group);
    o->tensor_wd = xcalloc(pt->n ? (size_t)pt->n : 1, sizeof *o->tensor_wd);
    o->tensor_sumsq = xcalloc(pt->n ? (size_t)pt->n : 1, sizeof *o->tensor_sumsq);
    o->tensor_coef = xcalloc(pt->n ? (size_t)pt->n * OPTIM_COEF : 1, sizeof *o->tensor_coef);
    for (int gi = 0; gi < ng; gi++) {
        const OptimGroup *g = &cfg->groups[gi];
        OptimGroupRule *r = &o->rules[gi];
        r->lr_mult = g->lr_mult;
        r->lr_abs = g->lr;
        r->beta1 = g->beta1;
        r->beta2 = isnan(g->beta2) ? cfg->beta2 : g->beta2;
        r->eps = isnan(g->eps) ? cfg->eps : g->eps;
        r->clip = g->clip;
    }
    OptimGroupRule *rest = &o->rules[ng];
    rest->lr_mult = 1.0f;
    rest->lr_abs = NAN;
    rest->beta1 = NAN;
    rest->beta2 = cfg->beta2;
    rest->eps = cfg->eps;
    rest->clip = 0.0f;
    // first match wins; the weight-decay rule needs the tensor's flag, so it is resolved per tensor
    for (int k = 0; k < pt->n; k++) {
        int owner = ng;
        for (int gi = 0; gi < ng && owner == ng; gi++)
            if (group_matches_(&cfg->groups[gi], pt->t[k].name)) owner = gi;
        float wd = owner < ng ? cfg->groups[owner].weight_decay : NAN;
        o->tensor_group[k] = owner;
        o->tensor_wd[k] = isnan(wd) ? (pt->t[k].decay ? cfg->weight_decay : 0.0f) : wd;
        o->rules[owner].n_tensors++;
    }
    for (int gi = 0; gi < ng; gi++)
        if (o->rules[gi].n_tensors == 0) {
            int err = err_set(e, "optimizer group %d (\"%s\"): owns no parameter: every tensor it matches belongs to an "
                                 "earlier group (the first matching group wins); reorder or remove it",
                              gi, cfg->groups[gi].patterns[0]);
            optim_free(o);
            return err;
        }
    // fixed chunking of every tensor for the norms
    size_t nc = 0;
    for (int k = 0; k < pt->n; k++) nc += (pt->t[k].numel + OPTIM_NORM_CHUNK - 1) / OPTIM_NORM_CHUNK;
    o->n_chunks = (int)nc;
    o->chunk_sumsq = xcalloc(nc ? nc : 1, sizeof *o->chunk_sumsq);
    o->chunk_tensor = xcalloc(nc ? nc : 1, sizeof *o->chunk_tensor);
    o->chunk_start = xcalloc(nc ? nc : 1, sizeof *o->chunk_start);
    size_t c = 0;
    for (int k = 0; k < pt->n; k++)
        for (size_t i = 0; i < pt->t[k].numel; i += OPTIM_NORM_CHUNK, c++) {
            o->chunk_tensor[c] = k;
            o->chunk_start[c] = pt->t[k].offset + i;
        }
    o->m = xcalloc(pt->numel ? pt->numel : 1, sizeof(float));
    o->v = xcalloc(pt->numel ? pt->numel : 1, sizeof(float));
    o->t = 0;
    return 0;
}

void optim_free(Optim *o) {
    free(o->rules);
    free(o->group_norm);
    free(o->tensor_group);
    free(o->tensor_wd);
    free(o->tensor_sumsq);
    free(o->tensor_coef);
    free(o->chunk_sumsq);
    free(o->chunk_tensor);
    free(o->chunk_start);
    free(o->m);
    free(o->v);
    memset(o, 0, sizeof *o);
}

void optim_reset(Optim *o) {
    memset(o->m, 0, o->pt->numel * sizeof(float));
    memset(o->v, 0, o->pt->numel * sizeof(float));
    o->t = 0;
}

// ----------------------------------------------------------------------------
// gradients: norms, clipping

double optim_grad_norm(Optim *o, const float *grads) {
    const ParamTable *pt = o->pt;
    // each chunk is summed by one thread, start to end, so its partial does not depend on the team size
#pragma omp parallel for schedule(dynamic, 4)
    for (int c = 0; c < o->n_chunks; c++) {
        const ParamTensor *t = &pt->t[o->chunk_tensor[c]];
        size_t end = t->offset + t->numel, i0 = o->chunk_start[c];
        size_t i1 = i0 + OPTIM_NORM_CHUNK < end ? i0 + OPTIM_NORM_CHUNK : end;
        o->chunk_sumsq[c] = sum_sq_dev_(grads + i0, i1 - i0, 0.0);
    }
    return optim_norms_from_chunks(o);
}

double optim_norms_from_chunks(Optim *o) {
    const ParamTable *pt = o->pt;
    // combine in chunk order -> tensors -> groups and total, all sequential
    for (int k = 0; k < pt->n; k++) o->tensor_sumsq[k] = 0.0;
    for (int c = 0; c < o->n_chunks; c++) o->tensor_sumsq[o->chunk_tensor[c]] += o->chunk_sumsq[c];
    double total = 0.0;
    for (int gi = 0; gi <= o->n_groups; gi++) o->group_norm[gi] = 0.0;
    for (int k = 0; k < pt->n; k++) {
        o->group_norm[o->tensor_group[k]] += o->tensor_sumsq[k];
        total += o->tensor_sumsq[k];
    }
    for (int gi = 0; gi <= o->n_groups; gi++) o->group_norm[gi] = sqrt(o->group_norm[gi]);
    o->grad_norm = sqrt(total);
    o->grad_norm_clipped = o->grad_norm;
    return o->grad_norm;
}

int optim_clip_scales(Optim *o) {
    const ParamTable *pt = o->pt;
    int ng = o->n_groups;
    // local scales, and the global sum of squares they leave behind
    double after = 0.0;
    for (int gi = 0; gi <= ng; gi++) {
        double gn = o->group_norm[gi], clip = o->rules[gi].clip, s = 1.0;
        if (clip > 0 && gn > clip) s = clip / gn;
        after += (gn * s) * (gn * s);
    }
    after = sqrt(after);
    o->grad_norm_clipped = after;
    double global = 1.0;
    if (o->cfg.grad_clip > 0 && after > o->cfg.grad_clip) global = o->cfg.grad_clip / after;
    // one combined scale per tensor, stored in the coef scratch (free until the next update)
    int any = 0;
    for (int k = 0; k < pt->n; k++) {
        int gi = o->tensor_group[k];
        double gn = o->group_norm[gi], clip = o->rules[gi].clip, s = global;
        if (clip > 0 && gn > clip) s *= clip / gn;
        o->tensor_coef[(size_t)k * OPTIM_COEF] = (float)s;
        any |= s != 1.0;
    }
    return any;
}

double optim_clip_grads(Optim *o, float *grads) {
    const ParamTable *pt = o->pt;
    double norm = optim_grad_norm(o, grads);
    if (!isfinite(norm)) return norm;  // nothing sensible to scale by; the trainer decides (skip the update)
    if (!optim_clip_scales(o)) return norm;
#pragma omp parallel
    for (int k = 0; k < pt->n; k++) {
        float s = o->tensor_coef[(size_t)k * OPTIM_COEF];
        if (s == 1.0f) continue;
        float *g = grads + pt->t[k].offset;
        size_t n = pt->t[k].numel;
#pragma omp for schedule(static) nowait
        for (size_t i = 0; i < n; i++) g[i] *= s;
    }
    return norm;
}

// ----------------------------------------------------------------------------
// the update

void optim_step_coefs(Optim *o, float lr, float beta1) {
    const ParamTable *pt = o->pt;
    o->t++;
    double t = (double)o->t;
    // per-update scalars of each tensor, in double, once; the element loop then only reads them
    for (int k = 0; k < pt->n; k++) {
        const OptimGroupRule *r = &o->rules[o->tensor_group[k]];
        double lr_k = isnan(r->lr_abs) ? (double)lr * r->lr_mult : (double)r->lr_abs * ((double)lr / o->cfg.lr);
        double b1 = isnan(r->beta1) ? beta1 : r->beta1, b2 = r->beta2;
        float *c = o->tensor_coef + (size_t)k * OPTIM_COEF;
        c[COEF_DECAY_MUL] = (float)(1.0 - lr_k * o->tensor_wd[k]);
        c[COEF_BETA1] = (float)b1;
        c[COEF_BETA2] = (float)b2;
        c[COEF_STEP_SIZE] = (float)(lr_k / (1.0 - pow(b1, t)));
        c[COEF_INV_SQRT_BC2] = (float)(1.0 / sqrt(1.0 - pow(b2, t)));
        c[COEF_EPS] = r->eps;
    }
}

void optim_step(Optim *o, float *params, const float *grads, float lr, float beta1) {
    const ParamTable *pt = o->pt;
    optim_step_coefs(o, lr, beta1);
#pragma omp parallel
    for (int k = 0; k < pt->n; k++) {
        const float *c = o->tensor_coef + (size_t)k * OPTIM_COEF;
        size_t off = pt->t[k].offset;
        // each thread takes its share of the tensor's elements, with no barrier: tensors do not overlap
        adamw_update(params + off, o->m + off, o->v + off, grads + off, pt->t[k].numel, c[COEF_DECAY_MUL],
                     c[COEF_BETA1], c[COEF_BETA2], c[COEF_STEP_SIZE], c[COEF_INV_SQRT_BC2], c[COEF_EPS]);
    }
}
