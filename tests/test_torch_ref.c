/*
 * The C model against an outside reference: for every case directory under tests/data/torch_ref/
 * (config.json of a tiny seqtrain run, its model.safetensors, tokens.npy (B, T+1), and ref.safetensors
 * written by scripts/torch_reference.py, an independent PyTorch float64 implementation of the same
 * network), run the C forward and backward on the tokens and compare the logits, the loss and the
 * gradient of every parameter with the reference. docs/reference_check.md describes the cases and how
 * to regenerate them (that needs torch; this test does not).
 *
 * Tolerance, per element of each tensor:  |c - ref| <= atol + rtol * |ref|  with
 *   atol = 2e-5 * max|ref| (over the tensor) + 1e-9,   rtol = 1e-3
 * (loss: |c - ref| <= 1e-5 * |ref|). The reference is float64 (stored as float32, a 6e-8 relative
 * rounding); the C side is float32 throughout, so each value carries a few dozen float32 roundings
 * (unit 6e-8) relative to the tensor's scale: two blocks, softmaxes, sums over B*T = 48 positions.
 * The largest errors seen when the cases were made are ~3e-6 * max|ref|, so the atol term leaves ~7x
 * headroom and the rtol term covers large elements; a real difference (a wrong slope, frequency, sign,
 * mask or decay) shows up at 1e-3 to 1 of the tensor's scale. The 1e-9 floor only matters for a tensor
 * whose reference is exactly zero.
 *
 * Usage: test_torch_ref [DIR]   (default tests/data/torch_ref, relative to the repository root)
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "data/npy.h"
#include "model/model.h"
#include "test.h"
#include "run/run_config.h"
#include "ckpt/safetensors.h"

#define REF_DIR "tests/data/torch_ref"
#define TOL_ATOL_SCALE 2e-5  // atol = TOL_ATOL_SCALE * max|ref| + TOL_ATOL_FLOOR
#define TOL_ATOL_FLOOR 1e-9
#define TOL_RTOL 1e-3
#define TOL_LOSS_RTOL 1e-5

// ----------------------------------------------------------------------------------------------------
// comparison

typedef struct Stats {
    double max_abs, max_rel, max_ref, worst;  // worst = max over elements of |c-ref| / (atol + rtol |ref|)
    size_t bad;                               // elements over the tolerance (or not finite)
} Stats;

static Stats compare_(const float *c, const float *ref, size_t n) {
    Stats s = {0};
    for (size_t i = 0; i < n; i++)
        if (fabs((double)ref[i]) > s.max_ref) s.max_ref = fabs((double)ref[i]);
    double atol = TOL_ATOL_SCALE * s.max_ref + TOL_ATOL_FLOOR;
    for (size_t i = 0; i < n; i++) {
        double r = ref[i], d = fabs((double)c[i] - r), lim = atol + TOL_RTOL * fabs(r);
        if (!isfinite(c[i]) || !(d <= lim)) s.bad++;
        if (!(d <= s.max_abs)) s.max_abs = d;  // also catches NaN
        if (fabs(r) > 0 && d / fabs(r) > s.max_rel) s.max_rel = d / fabs(r);
        if (!(d / lim <= s.worst)) s.worst = d / lim;
    }
    return s;
}

// ----------------------------------------------------------------------------------------------------
// one case

typedef struct CaseSummary {
    char name[256];
    double logits_scaled, grads_scaled, loss_err, worst;  // max|diff| / max|ref| of logits, of any grad
} CaseSummary;

// the C model of case `name`, run forward and backward on its tokens; returns 0, or -1 with msg set
static int load_and_run_(const char *dir, const char *name, Model *m, float **logits, int *B_out, int *T_out,
                         char *msg, size_t msg_n) {
    char path[2048];
    Err e = {{0}};
    // the model: config.json's model section, vocabulary from the checkpoint's wte, weights by name
    RunConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(path, sizeof path, "%s/%s/config.json", dir, name);
    if (run_config_load(&cfg, path, NULL, 0, NULL, &e) != 0) {
        snprintf(msg, msg_n, "%.300s", e.msg);
        return -1;
    }
    snprintf(path, sizeof path, "%s/%s/model.safetensors", dir, name);
    SafeTensorsFile mf;
    if (safetensors_open(&mf, path, &e) != 0) {
        run_config_free(&cfg);
        snprintf(msg, msg_n, "%.300s", e.msg);
        return -1;
    }
    const SafeTensorInfo *wte = safetensors_find(&mf, "wte");
    int V = wte && wte->ndim == 2 ? (int)wte->shape[0] : 0;
    safetensors_close(&mf);
    if (V <= 0) {
        run_config_free(&cfg);
        snprintf(msg, msg_n, "%.300s: no 2-D wte", path);
        return -1;
    }
    int rc = model_build(m, &cfg.model, V, NULL, (uint64_t)cfg.run.seed, &e);
#ifdef _OPENMP
    if (cfg.run.threads > 0) omp_set_num_threads(cfg.run.threads);  // as seqeval does with a run
#endif
    run_config_free(&cfg);
    if (rc != 0) { snprintf(msg, msg_n, "model_build: %.300s", e.msg); return -1; }
    if (safetensors_read_table(path, &m->pt, m->params, &e) != 0) {
        snprintf(msg, msg_n, "%.300s", e.msg);
        model_free(m);
        return -1;
    }
    // tokens (B, T+1): inputs [:, :-1], targets [:, 1:]
    long *tok = NULL, B = 0, T1 = 0;
    int nd = 0;
    Err ne = {{0}};
    snprintf(path, sizeof path, "%s/%s/tokens.npy", dir, name);
    if (npy_read_ints(path, &tok, &B, &T1, &nd, &ne) != 0 || nd != 2) {
        snprintf(msg, msg_n, "%.300s", nd != 2 && !ne.msg[0] ? "tokens.npy must have 2 dimensions" : ne.msg);
        free(tok);
        model_free(m);
        return -1;
    }
    if (T1 < 2) {
        free(tok);
        model_free(m);
        snprintf(msg, msg_n, "%.300s: rows need at least 2 tokens", path);
        return -1;
    }
    int T = (int)T1 - 1, BT = (int)B * T;
    int *in = malloc((size_t)BT * sizeof(int)), *tg = malloc((size_t)BT * sizeof(int));
    for (long b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            in[b * T + t] = (int)tok[b * T1 + t];
            tg[b * T + t] = (int)tok[b * T1 + t + 1];
        }
    free(tok);
    // forward + backward (the backward turns the logits buffer into dlogits: keep a copy)
    rc = model_forward(m, in, tg, (int)B, T, &e);
    free(in);
    free(tg);
    if (rc != 0) {
        snprintf(msg, msg_n, "forward: %.300s", e.msg);
        model_free(m);
        return -1;
    }
    size_t nl = (size_t)BT * (size_t)m->V;
    *logits = malloc(nl * sizeof(float));
    memcpy(*logits, m->logits, nl * sizeof(float));
    model_zero_grad(m);
    model_backward(m, m->n_supervised);
    *B_out = (int)B;
    *T_out = T;
    return 0;
}

static void run_case_(const char *dir, const char *name, CaseSummary *sum) {
    char path[2048], msg[512] = "";
    Err e = {{0}};
    memset(sum, 0, sizeof *sum);
    snprintf(sum->name, sizeof sum->name, "%s", name);
    Model m;
    float *logits = NULL;
    int B = 0, T = 0;
    int rc = load_and_run_(dir, name, &m, &logits, &B, &T, msg, sizeof msg);
    SafeTensorsFile rf;
    snprintf(path, sizeof path, "%s/%s/ref.safetensors", dir, name);
    if (rc == 0 && safetensors_open(&rf, path, &e) != 0) {
        snprintf(msg, sizeof msg, "%.300s", e.msg);
        rc = -1;
        free(logits);
        model_free(&m);
    }
    CHECK(rc == 0, "%s: model, checkpoint and tokens load, forward and backward run, reference opens (%.300s)", name,
          rc ? msg : "ok");
    if (rc != 0) return;

    // one check per reference tensor: it exists in the C model with the same shape and matches
    char *seen = calloc((size_t)m.pt.n, 1);
    int have_logits = 0, have_loss = 0;
    for (int i = 0; i < rf.n; i++) {
        const SafeTensorInfo *ti = &rf.t[i];
        const float *c = NULL;
        int64_t shape[SAFETENSORS_NDIM_MAX];
        int ndim = -1;
        if (!strcmp(ti->name, "logits")) {
            c = logits;
            ndim = 3;
            shape[0] = B; shape[1] = T; shape[2] = m.V;
            have_logits = 1;
        } else if (!strcmp(ti->name, "loss")) {
            ndim = 1;
            shape[0] = 1;
            have_loss = 1;
        } else if (!strncmp(ti->name, "grad.", 5)) {
            int k = param_find(&m.pt, ti->name + 5);
            if (k >= 0) {
                seen[k] = 1;
                const ParamTensor *p = &m.pt.t[k];
                c = m.grads + p->offset;
                ndim = p->ndim;
                for (int d = 0; d < ndim; d++) shape[d] = p->shape[d];
            }
        }
        if (ndim < 0) {
            CHECK(0, "%s: reference tensor %s has no counterpart in the C model", name, ti->name);
            continue;
        }
        int same = ti->ndim == ndim;
        for (int d = 0; same && d < ndim; d++) same = ti->shape[d] == shape[d];
        if (!same) {
            CHECK(0, "%s: reference tensor %s has another shape than the C tensor", name, ti->name);
            continue;
        }
        float *ref = malloc(ti->numel * sizeof(float));
        if (safetensors_read(&rf, ti->name, ref, (size_t)ti->numel, &e) != 0) {
            CHECK(0, "%s: reference tensor %s reads (%.200s)", name, ti->name, e.msg);
        } else if (!c) {  // the loss: a double mean in C, compared relatively
            double err = fabs(m.loss - (double)ref[0]);
            sum->loss_err = err;
            CHECK(err <= TOL_LOSS_RTOL * fabs((double)ref[0]),
                  "%s: loss %.7f vs reference %.7f (|diff| %.2e, limit %.0e x |ref|)", name, m.loss,
                  (double)ref[0], err, TOL_LOSS_RTOL);
        } else {
            Stats s = compare_(c, ref, (size_t)ti->numel);
            double scaled = s.max_ref > 0 ? s.max_abs / s.max_ref : s.max_abs;
            if (!strcmp(ti->name, "logits")) sum->logits_scaled = scaled;
            else if (scaled > sum->grads_scaled) sum->grads_scaled = scaled;
            if (s.worst > sum->worst) sum->worst = s.worst;
            CHECK(s.bad == 0,
                  "%s: %-28s max|diff| %.2e (%.2e x max|ref| %.2e), max rel %.2e, %.3f of the tolerance; "
                  "%zu of %llu elements over",
                  name, ti->name, s.max_abs, scaled, s.max_ref, s.max_rel, s.worst, s.bad,
                  (unsigned long long)ti->numel);
        }
        free(ref);
    }
    int missing = 0;
    for (int k = 0; k < m.pt.n; k++)
        if (!seen[k]) {
            missing++;
            printf("# %s: no reference gradient for %s\n", name, m.pt.t[k].name);
        }
    CHECK(have_logits && have_loss && missing == 0,
          "%s: the reference has logits, loss and a gradient for each of the %d parameters (%d missing)", name,
          m.pt.n, missing + !have_logits + !have_loss);
    free(seen);
    safetensors_close(&rf);
    free(logits);
    model_free(&m);
}

static int cmp_str_(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : REF_DIR;
    DIR *d = opendir(dir);
    CHECK(d != NULL, "case directory %s opens (run from the repository root)", dir);
    if (!d) return test_summary();
    char **names = NULL;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') continue;
        char p[2048];
        snprintf(p, sizeof p, "%s/%s/ref.safetensors", dir, de->d_name);
        FILE *f = fopen(p, "rb");
        if (!f) continue;
        fclose(f);
        names = realloc(names, (size_t)(n + 1) * sizeof(char *));
        names[n++] = strdup(de->d_name);
    }
    closedir(d);
    CHECK(n > 0, "%s holds reference cases (%d)", dir, n);
    qsort(names, (size_t)n, sizeof(char *), cmp_str_);
    CaseSummary *sums = calloc((size_t)(n ? n : 1), sizeof(CaseSummary));
    for (int i = 0; i < n; i++) run_case_(dir, names[i], &sums[i]);
    printf("# %-34s %-14s %-14s %-10s %s\n", "case", "logits err", "max grad err", "loss err", "worst/tol");
    for (int i = 0; i < n; i++)
        printf("# %-34s %.2e      %.2e      %.1e    %.3f\n", sums[i].name, sums[i].logits_scaled,
               sums[i].grads_scaled, sums[i].loss_err, sums[i].worst);
    printf("# (errors: max|c - ref| / max|ref| per tensor; worst/tol: the largest |c - ref| / (atol + rtol |ref|))\n");
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    free(sums);
    return test_summary();
}
