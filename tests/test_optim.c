// AdamW with parameter groups against a double-precision reference written from the formulas in
// optim.h; group resolution (first match, decay flag, errors); clipping; thread-count independence;
// exact resume from saved m, v, t.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/params.h"
#include "test.h"
#include "optim/optim.h"

// a small model-like table: names as the model declares them, decay flags as their owners would set
static void build_table_(ParamTable *pt) {
    Err e = {{0}};
    param_table_init(pt);
    param_add(pt, "wte", 2, (int[]){5, 4}, init_normal(0.02f), 0, &e);               // embedding: no decay
    param_add(pt, "blocks.0.mixer.wq", 2, (int[]){4, 4}, init_normal(0.02f), 1, &e);
    param_add(pt, "blocks.0.mixer.mu_a", 1, (int[]){4}, init_normal(0.02f), 0, &e);  // 1-D: no decay
    param_add(pt, "blocks.0.mixer.sde_log", 1, (int[]){3}, init_normal(0.02f), 0, &e);
    param_add(pt, "blocks.0.mixer.A_log", 2, (int[]){4, 2}, init_normal(0.02f), 1, &e);
    param_add(pt, "blocks.0.mlp.fc", 2, (int[]){4, 8}, init_normal(0.02f), 1, &e);
    param_add(pt, "blocks.1.mixer.wq", 2, (int[]){4, 4}, init_normal(0.02f), 1, &e);
    param_add(pt, "big.w", 2, (int[]){100, 101}, init_normal(0.02f), 1, &e);          // several norm chunks
    param_add(pt, "norm.weight", 1, (int[]){4}, init_ones(), 0, &e);
}

// the groups of the issue: RFA's SDE parameters, KLA-style state-space parameters, and two more
static void build_groups_(OptimGroup g[4]) {
    g[0] = optim_group_default();
    g[0].patterns[0] = "blocks.*.mixer.sde*";
    g[0].lr = 5e-4f;
    g[0].beta1 = 0.0f;
    g[0].eps = 1e-7f;
    g[0].clip = 1e-4f;
    g[1] = optim_group_default();
    g[1].patterns[0] = "blocks.*.mixer.A*";
    g[1].patterns[1] = "blocks.1.mixer.*";   // also takes blocks.1.mixer.wq before group 2 can
    g[1].lr_mult = 0.1f;
    g[1].weight_decay = 0.0f;
    g[2] = optim_group_default();
    g[2].patterns[0] = "blocks.*.mixer.w*";
    g[2].eps = 1e-6f;
    g[2].beta2 = 0.99f;
    g[3] = optim_group_default();
    g[3].patterns[0] = "norm.*";
    g[3].weight_decay = 0.05f;   // explicit: applies although the flag is off
}

static OptimConfig config_(const OptimGroup *g, int ng) {
    OptimConfig c = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                     .grad_clip = 0.0f, .groups = g, .n_groups = ng};
    return c;
}

// deterministic pseudo-random fill in [-a, a)
static void fill_(float *x, size_t n, unsigned seed, float a) {
    unsigned s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = a * (2.0f * (float)(s >> 8) / 16777216.0f - 1.0f);
    }
}

// what each tensor must get, written out by hand from the rules in optim.h (not from the optimizer)
typedef struct { const char *name; int group; double lr_scale; int lr_abs; double beta1; double beta2, eps, wd; } Want;
static const Want WANT_[] = {
    //  name                     group  lr x/abs   β1 (NaN=step's) β2     eps    wd
    {"wte", 4, 1.0, 0, NAN, 0.95, 1e-8, 0.0},                     // unmatched, embedding flag off
    {"blocks.0.mixer.wq", 2, 1.0, 0, NAN, 0.99, 1e-6, 0.1},       // group 2, wd inherited (flag on)
    {"blocks.0.mixer.mu_a", 4, 1.0, 0, NAN, 0.95, 1e-8, 0.0},     // unmatched 1-D
    {"blocks.0.mixer.sde_log", 0, 5e-4, 1, 0.0, 0.95, 1e-7, 0.0}, // SDE: absolute lr, β1 0, flag off
    {"blocks.0.mixer.A_log", 1, 0.1, 0, NAN, 0.95, 1e-8, 0.0},    // 0.1x lr, explicit no decay over flag on
    {"blocks.0.mlp.fc", 4, 1.0, 0, NAN, 0.95, 1e-8, 0.1},         // unmatched matrix: global wd
    {"blocks.1.mixer.wq", 1, 0.1, 0, NAN, 0.95, 1e-8, 0.0},       // first match wins: group 1, not 2
    {"big.w", 4, 1.0, 0, NAN, 0.95, 1e-8, 0.1},
    {"norm.weight", 3, 1.0, 0, NAN, 0.95, 1e-8, 0.05},            // explicit wd on a flag-off tensor
};

static void test_resolution(void) {
    ParamTable pt;
    build_table_(&pt);
    OptimGroup g[4];
    build_groups_(g);
    OptimConfig c = config_(g, 4);
    Optim o;
    Err e = {{0}};
    CHECK(optim_init(&o, &pt, &c, &e) == 0, "init with 4 groups: %.200s", e.msg);
    int ok_group = 1, ok_wd = 1;
    for (int k = 0; k < pt.n; k++) {
        ok_group &= strcmp(pt.t[k].name, WANT_[k].name) == 0 && o.tensor_group[k] == WANT_[k].group;
        ok_wd &= o.tensor_wd[k] == (float)WANT_[k].wd;
    }
    CHECK(ok_group, "every tensor owned by the expected group (first match wins)");
    CHECK(ok_wd, "weight decay resolved: flag rule for inherited, explicit value overrides the flag");
    CHECK(o.tensor_wd[0] == 0.0f && o.tensor_wd[2] == 0.0f, "decay flag default: embedding and 1-D get no decay");
    CHECK(o.rules[0].n_tensors == 1 && o.rules[1].n_tensors == 2 && o.rules[2].n_tensors == 1 &&
          o.rules[3].n_tensors == 1 && o.rules[4].n_tensors == 4, "tensor counts per group");
    optim_free(&o);

    // typo protection: a pattern that matches nothing is an error naming it
    g[2].patterns[1] = "blocks.*.mixr.w*";
    CHECK(optim_init(&o, &pt, &c, &e) == -1, "pattern matching no tensor rejected");
    CHECK_CONTAINS(e.msg, "blocks.*.mixr.w*", "error names the pattern");
    g[2].patterns[1] = NULL;
    // a group whose matches are all taken by earlier groups owns nothing: also an error
    g[3].patterns[0] = "blocks.1.mixer.wq";
    CHECK(optim_init(&o, &pt, &c, &e) == -1, "group shadowed by earlier groups rejected");
    CHECK_CONTAINS(e.msg, "owns no parameter", "shadowed group message");
    g[3].patterns[0] = "norm.*";
    g[1].lr = 1e-4f;
    CHECK(optim_init(&o, &pt, &c, &e) == -1, "lr together with lr_mult 0.1 rejected");
    CHECK_CONTAINS(e.msg, "lr_mult", "lr/lr_mult message");
    g[1].lr = NAN;
    g[0].beta1 = 1.0f;
    CHECK(optim_init(&o, &pt, &c, &e) == -1, "beta1 = 1 rejected");
    CHECK_CONTAINS(e.msg, "beta1", "beta1 message");
    g[0].beta1 = 0.0f;
    g[0].patterns[0] = NULL;
    CHECK(optim_init(&o, &pt, &c, &e) == -1, "group without patterns rejected");
    param_table_free(&pt);
}

// the update against the double reference over 5 steps with changing lr and β1
static void test_adamw_reference(void) {
    ParamTable pt;
    build_table_(&pt);
    OptimGroup g[4];
    build_groups_(g);
    OptimConfig c = config_(g, 4);
    Optim o;
    Err e = {{0}};
    CHECK(optim_init(&o, &pt, &c, &e) == 0, "init: %.200s", e.msg);
    size_t n = pt.numel;
    float *p = malloc(n * sizeof(float)), *gr = malloc(n * sizeof(float));
    double *rp = malloc(n * sizeof(double)), *rm = calloc(n, sizeof(double)), *rv = calloc(n, sizeof(double));
    param_init_all(&pt, p, 7);
    for (size_t i = 0; i < n; i++) rp[i] = p[i];
    const float lrs[5] = {1e-3f, 8e-4f, 6e-4f, 1.2e-3f, 3e-4f}, b1s[5] = {0.95f, 0.9f, 0.85f, 0.88f, 0.9f};
    for (int step = 0; step < 5; step++) {
        fill_(gr, n, 100 + step, 1.0f);
        // tiny gradients where eps is overridden (wq: 1e-6, sde: 1e-7), so a wrong eps would show
        for (int k = 1; k <= 3; k += 2)
            for (size_t i = pt.t[k].offset; i < pt.t[k].offset + pt.t[k].numel; i++) gr[i] *= 1e-6f;
        optim_step(&o, p, gr, lrs[step], b1s[step]);
        double t = step + 1;
        for (int k = 0; k < pt.n; k++) {
            const Want *w = &WANT_[k];
            double lr = w->lr_abs ? w->lr_scale * lrs[step] / 1e-3 : w->lr_scale * lrs[step];
            double b1 = isnan(w->beta1) ? b1s[step] : w->beta1;
            for (size_t i = pt.t[k].offset; i < pt.t[k].offset + pt.t[k].numel; i++) {
                double gi = gr[i];
                rp[i] -= lr * w->wd * rp[i];
                rm[i] = b1 * rm[i] + (1 - b1) * gi;
                rv[i] = w->beta2 * rv[i] + (1 - w->beta2) * gi * gi;
                double mh = rm[i] / (1 - pow(b1, t)), vh = rv[i] / (1 - pow(w->beta2, t));
                rp[i] -= lr * mh / (sqrt(vh) + w->eps);
            }
        }
    }
    CHECK(o.t == 5, "step counter after 5 updates (%ld)", o.t);
    for (int k = 0; k < pt.n; k++) {
        double worst = 0, worst_m = 0, worst_v = 0, moved = 0;
        for (size_t i = pt.t[k].offset; i < pt.t[k].offset + pt.t[k].numel; i++) {
            worst = fmax(worst, fabs(p[i] - rp[i]));
            worst_m = fmax(worst_m, fabs(o.m[i] - rm[i]));
            worst_v = fmax(worst_v, fabs(o.v[i] - rv[i]));
            moved = fmax(moved, fabs(rp[i]));
        }
        // 5 updates of size ~lr: float rounding of p (~1e-7 relative to |p| <= ~1) dominates
        CHECK(worst <= 2e-7 * fmax(moved, 1e-3), "AdamW %s: params match the double reference (max abs err %.3g)",
              pt.t[k].name, worst);
        // gradients are O(1), so m and v are O(1): float rounding is ~1e-7 absolute (m can cancel to ~0,
        // which makes a relative measure meaningless)
        CHECK(worst_m <= 1e-6 && worst_v <= 1e-6, "AdamW %s: m, v match (max abs err %.3g, %.3g)", pt.t[k].name,
              worst_m, worst_v);
    }
    // zero gradients isolate the decoupled decay: p <- p (1 - lr wd) exactly where wd is on, unchanged elsewhere
    optim_reset(&o);
    memset(gr, 0, n * sizeof(float));
    float *before = malloc(n * sizeof(float));
    memcpy(before, p, n * sizeof(float));
    optim_step(&o, p, gr, 1e-2f, 0.9f);
    int dec_ok = 1, off_ok = 1;
    for (int k = 0; k < pt.n; k++) {
        double wd = WANT_[k].wd, lr = WANT_[k].lr_abs ? WANT_[k].lr_scale * 10 : WANT_[k].lr_scale * 1e-2;
        float mul = (float)(1.0 - lr * wd);
        for (size_t i = pt.t[k].offset; i < pt.t[k].offset + pt.t[k].numel; i++) {
            if (wd > 0) dec_ok &= p[i] == before[i] * mul;
            else off_ok &= p[i] == before[i];
        }
    }
    CHECK(dec_ok, "zero grad: decayed tensors shrink by exactly (1 - lr*wd)");
    CHECK(off_ok, "zero grad: no-decay tensors (embedding, 1-D, wd 0 groups) unchanged");
    free(before);
    free(p); free(gr); free(rp); free(rm); free(rv);
    optim_free(&o);
    param_table_free(&pt);
}

// global norm of the tensors' gradients in double, the obvious way
static double ref_norm_(const ParamTable *pt, const float *g, int only) {
    double s = 0;
    for (int k = 0; k < pt->n; k++) {
        if (only >= 0 && k != only) continue;
        for (size_t i = pt->t[k].offset; i < pt->t[k].offset + pt->t[k].numel; i++) s += (double)g[i] * g[i];
    }
    return sqrt(s);
}

static void test_clipping(void) {
    ParamTable pt;
    build_table_(&pt);
    size_t n = pt.numel;
    float *gr = malloc(n * sizeof(float)), *g0 = malloc(n * sizeof(float));
    fill_(g0, n, 5, 1.0f);  // also writes the alignment gaps: they must not count
    Err e = {{0}};
    Optim o;

    // global only
    OptimConfig c = config_(NULL, 0);
    c.grad_clip = 1.0f;
    CHECK(optim_init(&o, &pt, &c, &e) == 0, "init without groups: %.200s", e.msg);
    memcpy(gr, g0, n * sizeof(float));
    double want = ref_norm_(&pt, g0, -1);
    double got = optim_grad_norm(&o, gr);
    CHECK_NEAR(got, want, 0, 1e-12, "global grad norm matches the double reference (gaps ignored)");
    double pre = optim_clip_grads(&o, gr);
    CHECK(pre == got, "clip returns the norm before clipping");
    CHECK_NEAR(ref_norm_(&pt, gr, -1), 1.0, 0, 1e-6, "global clip scales to exactly max norm 1.0");
    // below the threshold nothing changes, bit for bit
    memcpy(gr, g0, n * sizeof(float));
    for (size_t i = 0; i < n; i++) gr[i] *= 1e-3f;
    float *scaled = malloc(n * sizeof(float));
    memcpy(scaled, gr, n * sizeof(float));
    optim_clip_grads(&o, gr);
    CHECK(memcmp(gr, scaled, n * sizeof(float)) == 0, "norm below max: gradients untouched");
    optim_free(&o);

    // local clip of the SDE group (clip 1e-4), global off: only that tensor changes
    OptimGroup g[4];
    build_groups_(g);
    c = config_(g, 4);
    CHECK(optim_init(&o, &pt, &c, &e) == 0, "init with groups: %.200s", e.msg);
    int sde = param_find(&pt, "blocks.0.mixer.sde_log");
    memcpy(gr, g0, n * sizeof(float));
    double sde_norm = ref_norm_(&pt, g0, sde);
    optim_clip_grads(&o, gr);
    CHECK_NEAR(o.group_norm[0], sde_norm, 0, 1e-12, "group norm of the SDE group reported before clipping");
    CHECK_NEAR(o.grad_norm, want, 0, 1e-12, "global norm reported before clipping");
    CHECK_NEAR(ref_norm_(&pt, gr, sde), 1e-4, 0, 1e-6, "local clip: SDE group scaled to its clip 1e-4");
    int rest_same = 1;
    for (int k = 0; k < pt.n; k++)
        if (k != sde)
            rest_same &= memcmp(gr + pt.t[k].offset, g0 + pt.t[k].offset, pt.t[k].numel * sizeof(float)) == 0;
    CHECK(rest_same, "local clip leaves the other groups untouched");
    double after_local = sqrt(want * want - sde_norm * sde_norm + 1e-8);
    CHECK_NEAR(o.grad_norm_clipped, after_local, 0, 1e-9, "norm after local clips reported");
    optim_free(&o);

    // local then global: the global clip acts on the locally clipped gradients
    c.grad_clip = 0.5f;
    CHECK(optim_init(&o, &pt, &c, &e) == 0, "init with groups and global clip: %.200s", e.msg);
    memcpy(gr, g0, n * sizeof(float));
    optim_clip_grads(&o, gr);
    CHECK_NEAR(ref_norm_(&pt, gr, -1), 0.5, 0, 1e-6, "local then global: total norm = global max");
    CHECK_NEAR(ref_norm_(&pt, gr, sde), 1e-4 * 0.5 / after_local, 0, 1e-6,
               "local then global: SDE group = clip x global scale");
    // a non-finite norm leaves the gradients alone and is reported
    memcpy(gr, g0, n * sizeof(float));
    gr[pt.t[1].offset] = INFINITY;
    double inf_norm = optim_clip_grads(&o, gr);
    CHECK(isinf(inf_norm) && gr[pt.t[1].offset + 1] == g0[pt.t[1].offset + 1], "inf gradient: reported, no scaling");
    optim_free(&o);
    free(gr); free(g0); free(scaled);
    param_table_free(&pt);
}

// norms, clipping and update bit-identical for 1, 2 and 3 threads; exact resume from m, v, t
static void run_steps_(const ParamTable *pt, const OptimConfig *c, float *p, Optim *o, int steps, int first,
                       double *norms) {
    float *gr = malloc(pt->numel * sizeof(float));
    for (int s = 0; s < steps; s++) {
        fill_(gr, pt->numel, 1000 + first + s, 2.0f);
        norms[s] = optim_clip_grads(o, gr);
        optim_step(o, p, gr, 1e-3f, 0.9f);
    }
    free(gr);
}

static void test_threads_and_resume(void) {
    ParamTable pt;
    build_table_(&pt);
    OptimGroup g[4];
    build_groups_(g);
    OptimConfig c = config_(g, 4);
    c.grad_clip = 1.0f;
    size_t n = pt.numel;
    Err e = {{0}};
    float *p1 = malloc(n * sizeof(float)), *p2 = malloc(n * sizeof(float));
    double nrm1[4], nrm2[4];
    Optim o1, o2;
#ifdef _OPENMP
    int saved = omp_get_max_threads();
    int counts[2] = {2, 3};
    omp_set_num_threads(1);
    param_init_all(&pt, p1, 3);
    optim_init(&o1, &pt, &c, &e);
    run_steps_(&pt, &c, p1, &o1, 4, 0, nrm1);
    for (int ci = 0; ci < 2; ci++) {
        omp_set_num_threads(counts[ci]);
        param_init_all(&pt, p2, 3);
        optim_init(&o2, &pt, &c, &e);
        run_steps_(&pt, &c, p2, &o2, 4, 0, nrm2);
        CHECK(memcmp(nrm1, nrm2, sizeof nrm1) == 0 && memcmp(o1.group_norm, o2.group_norm, 5 * sizeof(double)) == 0,
              "norms bit-identical with 1 and %d threads", counts[ci]);
        CHECK(memcmp(p1, p2, n * sizeof(float)) == 0 && memcmp(o1.m, o2.m, n * sizeof(float)) == 0 &&
              memcmp(o1.v, o2.v, n * sizeof(float)) == 0, "params, m, v bit-identical with 1 and %d threads", counts[ci]);
        optim_free(&o2);
    }
    omp_set_num_threads(saved);
    optim_free(&o1);
#endif
    // resume: 2 steps, save (p, m, v, t), 2 more; vs a fresh optimizer restored from the save
    param_init_all(&pt, p1, 3);
    CHECK(optim_init(&o1, &pt, &c, &e) == 0, "init for resume: %.200s", e.msg);
    run_steps_(&pt, &c, p1, &o1, 2, 0, nrm1);
    float *sm = malloc(n * sizeof(float)), *sv = malloc(n * sizeof(float));
    memcpy(p2, p1, n * sizeof(float));
    memcpy(sm, o1.m, n * sizeof(float));
    memcpy(sv, o1.v, n * sizeof(float));
    long st = o1.t;
    run_steps_(&pt, &c, p1, &o1, 2, 2, nrm1);
    optim_init(&o2, &pt, &c, &e);
    memcpy(o2.m, sm, n * sizeof(float));
    memcpy(o2.v, sv, n * sizeof(float));
    o2.t = st;
    run_steps_(&pt, &c, p2, &o2, 2, 2, nrm2);
    CHECK(o2.t == 4 && memcmp(p1, p2, n * sizeof(float)) == 0 && memcmp(o1.m, o2.m, n * sizeof(float)) == 0 &&
          memcmp(o1.v, o2.v, n * sizeof(float)) == 0, "restored m, v, t resume bit-exactly");
    optim_free(&o1);
    optim_free(&o2);
    free(p1); free(p2); free(sm); free(sv);
    param_table_free(&pt);
}

int main(void) {
    test_resolution();
    test_adamw_reference();
    test_clipping();
    test_threads_and_resume();
    return test_summary();
}
