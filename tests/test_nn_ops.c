/*
 * The nn ops of norm.h, activation.h, xent.h and embedding.h: a finite-difference gradient check for
 * every forward/backward pair and every input and weight, forward values against references
 * computed here in double, edge cases of the cross-entropy (ignore index, all ignored, huge logits,
 * invalid targets), the += contract of every backward, and bitwise identical results with 1 and 2
 * OpenMP threads.
 *
 * Gradient-check tolerances (one set for every op): h = 1e-2, rtol = 1e-2, atol = 5e-4.
 *   - truncation: central differences err by about h^2/6 * f''' ~ 2e-5 relative for these smooth ops
 *     with O(1) inputs, far below rtol (relu is checked on inputs kept >= 0.2 from its kink, more than
 *     the largest step h, so it is linear on every stencil);
 *   - rounding: the ops compute in float, so each output that a perturbation changes carries
 *     ~6e-8 relative rounding noise, and so does each perturbed input p + h*e once stored as a float.
 *     The loss sums k such terms (values and dy of size ~1-3) in double, and dividing by 2h turns this
 *     into about 2 * sqrt(k) * 6e-8 * 3 / 0.02 ~ 2e-5 * sqrt(k) of noise in the numeric derivative:
 *     up to ~4e-4 for the k <= 500 values here. atol = 5e-4 covers that where a directional
 *     derivative is near zero (it showed up at 1.3e-4 for silu with k = 200); rtol = 1e-2 does the
 *     real work everywhere else. A smaller h would raise this noise (it grows as 1/h) without
 *     buying accuracy that matters.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "gradcheck.h"
#include "nn/activation.h"
#include "nn/embedding.h"
#include "nn/fastmath.h"
#include "nn/norm.h"
#include "nn/xent.h"
#include "test.h"

#define GC_H 1e-2
#define GC_RTOL 1e-2
#define GC_ATOL 5e-4
#define GC_DIRS 8    // random directions per buffer
#define GC_ELEMS 24  // single coordinates per buffer

// one context for every op: each loss function uses the fields its op needs
typedef struct Ctx {
    int N, C, V;
    size_t n_in, n_out;
    float *x, *x2, *w, *b;   // inputs and weights (b may be NULL)
    float *out, *c1, *c2;    // output and the forward's caches
    float *dy;               // dL/dout for L = sum(dy * out)
    int *ids;                // token ids / targets
} Ctx;

static float *zalloc_(size_t n) { return (float *)calloc(n ? n : 1, sizeof(float)); }

static float *copy_(const float *p, size_t n) {
    float *q = zalloc_(n);
    memcpy(q, p, n * sizeof(float));
    return q;
}

// a second backward call adds the same gradient again. Where the backward adds one value per element
// (tol 0), g + g is exact in float; where it adds several in turn (embedding rows with repeated ids),
// the sums round differently and tol bounds that (relative and absolute)
static void check_doubled_(const char *name, const float *once, const float *twice, size_t n, double tol) {
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++) {
        if (fabs((double)twice[i] - 2.0 * once[i]) > tol * (1.0 + fabs(2.0 * once[i]))) bad = i;
    }
    CHECK(bad == n, "%s: a second backward call doubles the gradient (first mismatch at %zu of %zu)", name,
          bad, n);
}

static void set_threads_(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

// ----------------------------------------------------------------------------
// layernorm and rmsnorm

static double layernorm_loss_(void *p) {
    Ctx *c = (Ctx *)p;
    layernorm_forward(c->out, c->c1, c->c2, c->x, c->w, c->b, c->N, c->C);
    return gc_dot(c->dy, c->out, c->n_out);
}

static void test_layernorm_grad_(int with_bias, uint64_t seed) {
    GcRng rng = {seed};
    int N = 6, C = 70;  // C > 64 so the column-block pass of the backward has a full and a partial block
    size_t n = (size_t)N * C;
    Ctx c = {.N = N, .C = C, .n_in = n, .n_out = n};
    c.x = zalloc_(n); c.w = zalloc_(C); c.b = with_bias ? zalloc_(C) : NULL;
    c.out = zalloc_(n); c.c1 = zalloc_(N); c.c2 = zalloc_(N); c.dy = zalloc_(n);
    gc_fill_normal(&rng, c.x, n, 1.0f);
    for (size_t i = 0; i < n; i++) c.x[i] += 0.5f;  // a common offset, as real activations have
    gc_fill_normal(&rng, c.w, C, 0.3f);
    for (int i = 0; i < C; i++) c.w[i] += 1.0f;
    if (c.b) gc_fill_normal(&rng, c.b, C, 0.3f);
    gc_fill_normal(&rng, c.dy, n, 1.0f);
    float *dx = zalloc_(n), *dw = zalloc_(C), *db = zalloc_(C);

    layernorm_loss_(&c);
    layernorm_backward(dx, dw, c.b ? db : NULL, c.dy, c.x, c.w, c.c1, c.c2, N, C);
    const char *tag = with_bias ? "layernorm (bias)" : "layernorm (no bias)";
    char name[96];
    snprintf(name, sizeof name, "%s inp", tag);
    gradcheck_buffer(name, c.x, dx, n, layernorm_loss_, &c, GC_H, GC_RTOL, GC_ATOL, GC_DIRS, GC_ELEMS, seed + 1);
    snprintf(name, sizeof name, "%s weight", tag);
    gradcheck_buffer(name, c.w, dw, C, layernorm_loss_, &c, GC_H, GC_RTOL, GC_ATOL, GC_DIRS, GC_ELEMS, seed + 2);
    if (c.b) {
        snprintf(name, sizeof name, "%s bias", tag);
        gradcheck_buffer(name, c.b, db, C, layernorm_loss_, &c, GC_H, GC_RTOL, GC_ATOL, GC_DIRS, GC_ELEMS,
                         seed + 3);
    } else {
        int zero = 1;
        for (int i = 0; i < C; i++) zero &= db[i] == 0.0f;
        CHECK(zero, "%s: a NULL dbias leaves the bias gradient alone", tag);
    }

    float *dx1 = copy_(dx, n), *dw1 = copy_(dw, C), *db1 = copy_(db, C);
    layernorm_backward(dx, dw, c.b ? db : NULL, c.dy, c.x, c.w, c.c1, c.c2, N, C);
    snprintf(name, sizeof name, "%s dinp", tag);
    check_doubled_(name, dx1, dx, n, 0);
    snprintf(name, sizeof name, "%s dweight", tag);
    check_doubled_(name, dw1, dw, C, 0);
    if (c.b) {
        snprintf(name, sizeof name, "%s dbias", tag);
        check_doubled_(name, db1, db, C, 0);
    }
    free(dx1); free(dw1); free(db1); free(dx); free(dw); free(db);
    free(c.x); free(c.w); free(c.b); free(c.out); free(c.c1); free(c.c2); free(c.dy);
}

static double rmsnorm_loss_(void *p) {
    Ctx *c = (Ctx *)p;
    rmsnorm_forward(c->out, c->c1, c->x, c->w, c->N, c->C);
    return gc_dot(c->dy, c->out, c->n_out);
}

static void test_rmsnorm_grad_(void) {
    GcRng rng = {11};
    int N = 5, C = 70;
    size_t n = (size_t)N * C;
    Ctx c = {.N = N, .C = C, .n_in = n, .n_out = n};
    c.x = zalloc_(n); c.w = zalloc_(C); c.out = zalloc_(n); c.c1 = zalloc_(N); c.dy = zalloc_(n);
    gc_fill_normal(&rng, c.x, n, 1.0f);
    gc_fill_normal(&rng, c.w, C, 0.3f);
    for (int i = 0; i < C; i++) c.w[i] += 1.0f;
    gc_fill_normal(&rng, c.dy, n, 1.0f);
    float *dx = zalloc_(n), *dw = zalloc_(C);
    rmsnorm_loss_(&c);
    rmsnorm_backward(dx, dw, c.dy, c.x, c.w, c.c1, N, C);
    gradcheck_buffer("rmsnorm inp", c.x, dx, n, rmsnorm_loss_, &c, GC_H, GC_RTOL, GC_ATOL, GC_DIRS, GC_ELEMS, 12);
    gradcheck_buffer("rmsnorm weight", c.w, dw, C, rmsnorm_loss_, &c, GC_H, GC_RTOL, GC_ATOL, GC_DIRS, GC_ELEMS, 13);
    float *dx1 = copy_(dx, n), *dw1 = copy_(dw, C);
    rmsnorm_backward(dx, dw, c.dy, c.x, c.w, c.c1, N, C);
    check_doubled_("rmsnorm dinp", dx1, dx, n, 0);
    check_doubled_("rmsnorm dweight", dw1, dw, C, 0);
    free(dx1); free(dw1); free(dx); free(dw);
    free(c.x); free(c.w); free(c.out); free(c.c1); free(c.dy);
}

// L2 norm of rows, both divisor conventions; FLOOR with one row below the floor (linear there)
typedef struct L2Ctx {
    int N, C, mode;
    float eps;
    float *x, *out, *nrm, *dy;
} L2Ctx;

static double l2norm_loss_(void *p) {
    L2Ctx *c = p;
    l2norm_forward(c->out, c->nrm, c->x, c->N, c->C, c->eps, c->mode);
    return gc_dot(c->dy, c->out, (size_t)c->N * c->C);
}

static void test_l2norm_(void) {
    for (int mode = 0; mode < 2; mode++) {
        GcRng rng = {(uint64_t)(31 + mode)};
        int N = 6, C = 9;
        size_t n = (size_t)N * C;
        L2Ctx c = {N, C, mode, mode == L2NORM_ADD ? 1e-2f : 0.5f, zalloc_(n), zalloc_(n), zalloc_(N), zalloc_(n)};
        gc_fill_normal(&rng, c.x, n, 1.0f);
        gc_fill_normal(&rng, c.dy, n, 1.0f);
        if (mode == L2NORM_FLOOR)
            for (int i = 0; i < C; i++) c.x[2 * C + i] *= 0.01f;  // row 2 (|x| ~ 0.03) below the floor 0.5
        l2norm_loss_(&c);
        double worst = 0;
        for (int r = 0; r < N; r++) {
            double ss = 0;
            for (int i = 0; i < C; i++) ss += (double)c.x[r * C + i] * c.x[r * C + i];
            double d = mode == L2NORM_ADD ? sqrt(ss + c.eps) : fmax(sqrt(ss), c.eps);
            for (int i = 0; i < C; i++) worst = fmax(worst, fabs(c.out[r * C + i] - c.x[r * C + i] / d));
        }
        CHECK(worst < 1e-6, "l2norm %s forward == x / n (max err %.2g)", mode ? "add" : "floor", worst);
        float *dx = zalloc_(n);
        l2norm_backward(dx, c.dy, c.out, c.nrm, N, C, c.eps, mode);
        gradcheck_buffer(mode ? "l2norm (eps in the root) inp" : "l2norm (floor) inp", c.x, dx, n, l2norm_loss_, &c,
                         GC_H, GC_RTOL, GC_ATOL, GC_DIRS, GC_ELEMS, 41);
        free(dx); free(c.x); free(c.out); free(c.nrm); free(c.dy);
    }
}

static void test_norm_forward_(void) {
    GcRng rng = {21};
    int N = 4, C = 300;
    size_t n = (size_t)N * C;
    float *x = zalloc_(n), *out = zalloc_(n), *w = zalloc_(C), *b = zalloc_(C), *mean = zalloc_(N),
          *rstd = zalloc_(N);
    gc_fill_normal(&rng, x, n, 3.0f);
    for (int r = 0; r < N; r++) {
        for (int i = 0; i < C; i++) x[(size_t)r * C + i] += 10.0f * (float)r;  // rows with large offsets
    }
    for (int i = 0; i < C; i++) w[i] = 1.0f;
    layernorm_forward(out, mean, rstd, x, w, b, N, C);
    for (int r = 0; r < N; r++) {
        double m = 0, v = 0;
        for (int i = 0; i < C; i++) m += out[(size_t)r * C + i];
        m /= C;
        for (int i = 0; i < C; i++) v += (out[(size_t)r * C + i] - m) * (out[(size_t)r * C + i] - m);
        v /= C;
        // the normalised variance is var/(var + eps) = 1 - ~1e-6 for var ~ 9
        CHECK_NEAR(m, 0.0, 1e-5, 0, "layernorm row %d: output mean is 0", r);
        CHECK_NEAR(v, 1.0, 1e-4, 0, "layernorm row %d: output variance is 1", r);
    }
    rmsnorm_forward(out, rstd, x, w, N, C);
    for (int r = 0; r < N; r++) {
        double ms = 0;
        for (int i = 0; i < C; i++) ms += (double)out[(size_t)r * C + i] * out[(size_t)r * C + i];
        CHECK_NEAR(ms / C, 1.0, 1e-4, 0, "rmsnorm row %d: output mean square is 1", r);
    }
    free(x); free(out); free(w); free(b); free(mean); free(rstd);
}

// ----------------------------------------------------------------------------
// elementwise activations, swiglu, residual

typedef void (*EltFwd)(float *, const float *, size_t);
typedef void (*EltBwd)(float *, const float *, const float *, size_t);
static EltFwd elt_fwd_;

static double elt_loss_(void *p) {
    Ctx *c = (Ctx *)p;
    elt_fwd_(c->out, c->x, c->n_in);
    return gc_dot(c->dy, c->out, c->n_out);
}

static void test_elementwise_grad_(const char *name, EltFwd fwd, EltBwd bwd, int away_from_zero, uint64_t seed) {
    GcRng rng = {seed};
    size_t n = 200;
    Ctx c = {.n_in = n, .n_out = n};
    c.x = zalloc_(n); c.out = zalloc_(n); c.dy = zalloc_(n);
    gc_fill_normal(&rng, c.x, n, 2.0f);
    if (away_from_zero) {
        // |x| >= 0.2 > h: no central-difference stencil straddles the kink at 0
        for (size_t i = 0; i < n; i++) c.x[i] = c.x[i] >= 0.0f ? 0.2f + c.x[i] : -0.2f + c.x[i];
    }
    gc_fill_normal(&rng, c.dy, n, 1.0f);
    float *dx = zalloc_(n);
    elt_fwd_ = fwd;
    elt_loss_(&c);
    bwd(dx, c.x, c.dy, n);
    char what[64];
    snprintf(what, sizeof what, "%s inp", name);
    gradcheck_buffer(what, c.x, dx, n, elt_loss_, &c, GC_H, GC_RTOL, GC_ATOL, GC_DIRS, GC_ELEMS, seed + 1);
    float *dx1 = copy_(dx, n);
    bwd(dx, c.x, c.dy, n);
    snprintf(what, sizeof what, "%s dinp", name);
    check_doubled_(what, dx1, dx, n, 0);
    free(dx1); free(dx); free(c.x); free(c.out); free(c.dy);
}

static double swiglu_loss_(void *p) {
    Ctx *c = (Ctx *)p;
    swiglu_forward(c->out, c->x, c->N, c->C);
    return gc_dot(c->dy, c->out, c->n_out);
}

static void test_swiglu_grad_(void) {
    GcRng rng = {31};
    int N = 5, H = 24;
    Ctx c = {.N = N, .C = H, .n_in = (size_t)N * 2 * H, .n_out = (size_t)N * H};
    c.x = zalloc_(c.n_in); c.out = zalloc_(c.n_out); c.dy = zalloc_(c.n_out);
    gc_fill_normal(&rng, c.x, c.n_in, 2.0f);
    gc_fill_normal(&rng, c.dy, c.n_out, 1.0f);
    float *dx = zalloc_(c.n_in);
    swiglu_loss_(&c);
    swiglu_backward(dx, c.x, c.dy, N, H);
    gradcheck_buffer("swiglu inp [a|b]", c.x, dx, c.n_in, swiglu_loss_, &c, GC_H, GC_RTOL, GC_ATOL, GC_DIRS,
                     2 * H + 8, 32);  // elements cover a full row: gate and value halves
    float *dx1 = copy_(dx, c.n_in);
    swiglu_backward(dx, c.x, c.dy, N, H);
    check_doubled_("swiglu dinp", dx1, dx, c.n_in, 0);
    // the value half of each row, against silu(a) * b computed directly
    float a = c.x[3], bv = c.x[H + 3];
    CHECK_NEAR(c.out[3], (double)a / (1.0 + exp(-(double)a)) * bv, 1e-6, 1e-6, "swiglu out = silu(a) * b");
    free(dx1); free(dx); free(c.x); free(c.out); free(c.dy);
}

static double residual_loss_(void *p) {
    Ctx *c = (Ctx *)p;
    residual_forward(c->out, c->x, c->x2, c->n_in);
    return gc_dot(c->dy, c->out, c->n_out);
}

static void test_residual_grad_(void) {
    GcRng rng = {41};
    size_t n = 150;
    Ctx c = {.n_in = n, .n_out = n};
    c.x = zalloc_(n); c.x2 = zalloc_(n); c.out = zalloc_(n); c.dy = zalloc_(n);
    gc_fill_normal(&rng, c.x, n, 1.0f);
    gc_fill_normal(&rng, c.x2, n, 1.0f);
    gc_fill_normal(&rng, c.dy, n, 1.0f);
    float *da = zalloc_(n), *db = zalloc_(n);
    residual_loss_(&c);
    residual_backward(da, db, c.dy, n);
    gradcheck_buffer("residual a", c.x, da, n, residual_loss_, &c, GC_H, GC_RTOL, GC_ATOL, GC_DIRS, GC_ELEMS, 42);
    gradcheck_buffer("residual b", c.x2, db, n, residual_loss_, &c, GC_H, GC_RTOL, GC_ATOL, GC_DIRS, GC_ELEMS, 43);
    float *da1 = copy_(da, n), *db1 = copy_(db, n);
    residual_backward(da, db, c.dy, n);
    check_doubled_("residual da", da1, da, n, 0);
    check_doubled_("residual db", db1, db, n, 0);
    free(da1); free(db1); free(da); free(db); free(c.x); free(c.x2); free(c.out); free(c.dy);
}

static void test_activation_forward_(void) {
    const float xs[] = {-6.0f, -3.0f, -1.0f, -0.5f, 0.0f, 0.3f, 1.0f, 2.5f, 4.0f};
    int n = (int)(sizeof xs / sizeof xs[0]);
    float out[9];
    gelu_forward(out, xs, (size_t)n);
    for (int i = 0; i < n; i++) {
        double x = xs[i], want = 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
        CHECK_NEAR(out[i], want, 1e-6, 1e-6, "gelu(%g) = 0.5 x (1 + erf(x/sqrt2))", x);
    }
    // large |x|: finite values and derivatives, the right limits
    const float big[] = {-1e4f, -100.0f, 100.0f, 1e4f};
    float o[4], d[4] = {0}, ones[4] = {1, 1, 1, 1};
    silu_forward(o, big, 4);
    silu_backward(d, big, ones, 4);
    int finite = 1;
    for (int i = 0; i < 4; i++) finite &= isfinite(o[i]) && isfinite(d[i]);
    CHECK(finite, "silu and its derivative stay finite at +-1e4 and +-100");
    CHECK(o[0] == 0.0f && o[3] == 1e4f && d[0] == 0.0f && d[3] == 1.0f, "silu limits: 0 and x, slopes 0 and 1");
    float g[4] = {0};
    gelu_forward(o, big, 4);
    gelu_backward(g, big, ones, 4);
    finite = 1;
    for (int i = 0; i < 4; i++) finite &= isfinite(o[i]) && isfinite(g[i]);
    CHECK(finite && o[0] == 0.0f && o[3] == 1e4f, "gelu stays finite at +-1e4 with limits 0 and x");
    const float rx[] = {-2.0f, 0.0f, 3.0f};
    float ro[3], rd[3] = {0}, rdy[3] = {5, 5, 5};
    relu_forward(ro, rx, 3);
    relu_backward(rd, rx, rdy, 3);
    CHECK(ro[0] == 0.0f && ro[1] == 0.0f && ro[2] == 3.0f && rd[0] == 0.0f && rd[1] == 0.0f && rd[2] == 5.0f,
          "relu forward and backward at -2, 0, 3");
}

// ----------------------------------------------------------------------------
// vectorised math (nn/fastmath.h and the erfc/exp inside gelu, silu) against libm in double, on dense
// grids: the small fixed-point checks above would miss a bad polynomial coefficient between points

// |got - want| in units of the float spacing at want (the subnormal spacing below FLT_MIN)
static double ulps_(float got, double want) {
    int e;
    frexp(want, &e);
    double ulp = fabs(want) < FLT_MIN ? ldexp(1.0, -149) : ldexp(1.0, e - 24);
    return fabs((double)got - want) / ulp;
}

static void test_fast_expf_(void) {
    // every 997th float of each sign, from -87.3365 (just above ln FLT_MIN) to 88.376 (just below
    // 127.5 ln2), walked through the bit patterns: ~2e6 points, every binade and exponent n; measured
    // worst 1.10 ulp (over every float in the range)
    double worst = 0;
    float worst_x = 0;
    for (int sign = 0; sign < 2; sign++) {
        float lim = sign ? 87.3365f : 88.376f;
        uint32_t top;
        memcpy(&top, &lim, sizeof top);
        for (uint32_t b = 0; b <= top; b += 997) {
            uint32_t bits = b | (uint32_t)sign << 31;
            float x;
            memcpy(&x, &bits, sizeof x);
            double u = ulps_(fast_expf_(x), exp((double)x));
            if (u > worst) { worst = u; worst_x = x; }
        }
    }
    CHECK(worst <= 2.0, "fast_expf_ within 2 ulp of exp on [-87.33, 88.37] (worst %.3f ulp at %g)", worst, worst_x);
    CHECK(fast_expf_(0.0f) == 1.0f && fast_expf_(-0.0f) == 1.0f, "fast_expf_(0) = 1 exactly");
    CHECK(fast_expf_(-87.4f) == 0.0f && fast_expf_(-1e4f) == 0.0f && fast_expf_(-INFINITY) == 0.0f,
          "fast_expf_ flushes to 0 below ln FLT_MIN, also at -1e4 and -inf");
    CHECK(isinf(fast_expf_(88.5f)) && isinf(fast_expf_(1e4f)) && isinf(fast_expf_(INFINITY)) && isnan(fast_expf_(NAN)),
          "fast_expf_ gives inf above 127.5 ln2 and NaN for NaN");
}

static void test_fast_sincos_(void) {
    // every 997th float of each sign up to 1e6 (the angles of a long sequence), through the bit patterns: ~2.5e6
    // points; then every 2^16th float up to 2^50, where the reduction must still keep every bit. Measured (every
    // 97th float to 1e6): worst 0.50008 ulp, i.e. one rounding from double plus a 1e-4 ulp error before it
    double worst = 0, worst_big = 0;
    float worst_x = 0, worst_big_x = 0;
    for (int sign = 0; sign < 2; sign++) {
        float lim = 1e6f, lim_big = 1125899906842624.0f;  // 2^50
        uint32_t top, top_big;
        memcpy(&top, &lim, sizeof top);
        memcpy(&top_big, &lim_big, sizeof top_big);
        for (uint32_t b = 0; b <= top_big; b += b <= top ? 997 : 65536) {
            uint32_t bits = b | (uint32_t)sign << 31;
            float x, sn, cs;
            memcpy(&x, &bits, sizeof x);
            fast_sincos_(x, &sn, &cs);
            double u = fmax(ulps_(sn, sin((double)x)), ulps_(cs, cos((double)x)));
            if (b <= top && u > worst) worst = u, worst_x = x;
            if (b > top && u > worst_big) worst_big = u, worst_big_x = x;
        }
    }
    CHECK(worst <= 0.501, "fast_sincos_ within 0.501 ulp of sin, cos for |x| <= 1e6 (worst %.5f ulp at %g)", worst,
          worst_x);
    CHECK(worst_big <= 0.501, "fast_sincos_ within 0.501 ulp of sin, cos for 1e6 < |x| < 2^50 (worst %.5f ulp at %g)",
          worst_big, worst_big_x);
    float sn, cs;
    fast_sincos_(0.0f, &sn, &cs);
    CHECK(sn == 0.0f && cs == 1.0f, "fast_sincos_(0) = (0, 1) exactly");
    fast_sincos_(NAN, &sn, &cs);
    int nan_ok = isnan(sn) && isnan(cs);
    fast_sincos_(INFINITY, &sn, &cs);
    CHECK(nan_ok && isnan(sn) && isnan(cs), "fast_sincos_ gives NaN for NaN and inf");
}

static void test_gelu_silu_dense_(void) {
    // x from -13 (Phi ~ 6e-39, about where it leaves the normal floats) to 8 in steps of 1e-4, plus
    // tiny |x|: 2e5+ points through the polynomial's whole t range and both branches of Phi
    size_t n = 0, cap = 230000;
    float *x = zalloc_(cap), *y = zalloc_(cap), *d = zalloc_(cap), *ones = zalloc_(cap);
    for (int k = -130000; k <= 80000; k++) x[n++] = (float)(k * 1e-4);
    for (int k = 1; k <= 40; k++) { x[n++] = ldexpf(1.0f, -k); x[n++] = -ldexpf(1.0f, -k); }
    for (size_t i = 0; i < n; i++) ones[i] = 1.0f;
    gelu_forward(y, x, n);
    gelu_backward(d, x, ones, n);
    // forward relative to |gelu| (where gelu is a normal float with room to spare: the tail is flushed
    // below ~1e-37), backward absolute + relative (it crosses 0 at x = -0.7518). Measured: forward
    // 4.2e-7 relative (Phi's erfc fit rounded in float, ~6 ulp at worst), backward 2.3e-7 absolute
    double worst_f = 0, worst_b = 0;
    float wx_f = 0, wx_b = 0;
    for (size_t i = 0; i < n; i++) {
        double xi = x[i], Phi = 0.5 * erfc(-xi / sqrt(2.0)), want = xi * Phi;
        double dwant = Phi + xi * exp(-0.5 * xi * xi) / sqrt(2.0 * M_PI);
        if (fabs(want) >= 1e-36) {
            double r = fabs(y[i] - want) / fabs(want);
            if (r > worst_f) { worst_f = r; wx_f = x[i]; }
        } else if (fabs(y[i]) > 2e-36) {
            worst_f = INFINITY; wx_f = x[i];
        }
        double rb = fabs(d[i] - dwant) / (1e-6 + 1e-6 * fabs(dwant));
        if (rb > worst_b) { worst_b = rb; wx_b = x[i]; }
    }
    CHECK(worst_f <= 1e-6, "gelu within 1e-6 relative of x Phi(x) in double on [-13, 8] (worst %.3g at %g)",
          worst_f, wx_f);
    CHECK(worst_b <= 1.0, "gelu' within 1e-6 abs+rel of Phi + x phi in double on [-13, 8] (worst %.3g of tol at %g)",
          worst_b, wx_b);

    // silu on [-87, 87] (below that the sigmoid is flushed to 0, as the forward stays exact in
    // absolute terms); measured 2e-7 relative forward, 1e-7 abs+rel backward
    n = 0;
    for (int k = -87000; k <= 87000; k++) x[n++] = (float)(k * 1e-3);
    memset(d, 0, n * sizeof(float));
    silu_forward(y, x, n);
    silu_backward(d, x, ones, n);
    worst_f = 0; worst_b = 0;
    for (size_t i = 0; i < n; i++) {
        double xi = x[i], sg = 1.0 / (1.0 + exp(-xi)), want = xi * sg, dwant = sg * (1.0 + xi * (1.0 - sg));
        if (want != 0.0) {
            double r = fabs(y[i] - want) / fabs(want);
            if (r > worst_f) { worst_f = r; wx_f = x[i]; }
        }
        double rb = fabs(d[i] - dwant) / (1e-6 + 1e-6 * fabs(dwant));
        if (rb > worst_b) { worst_b = rb; wx_b = x[i]; }
    }
    CHECK(worst_f <= 1e-6, "silu within 1e-6 relative of x sigmoid(x) in double on [-87, 87] (worst %.3g at %g)",
          worst_f, wx_f);
    CHECK(worst_b <= 1.0, "silu' within 1e-6 abs+rel in double on [-87, 87] (worst %.3g of tol at %g)", worst_b, wx_b);
    free(x); free(y); free(d); free(ones);
}

// ----------------------------------------------------------------------------
// cross-entropy

static double xent_loss_(void *p) {
    Ctx *c = (Ctx *)p;
    double mean = 0;
    crossentropy_forward(c->out, c->c1, &mean, c->x, c->ids, c->N, c->V);
    return mean;
}

static void test_xent_grad_(const char *name, const int *targets, int N, uint64_t seed) {
    GcRng rng = {seed};
    int V = 11;
    size_t n = (size_t)N * V;
    Ctx c = {.N = N, .V = V, .n_in = n};
    c.x = zalloc_(n); c.out = zalloc_(N); c.c1 = zalloc_(2 * (size_t)N);
    c.ids = (int *)malloc((size_t)N * sizeof(int));
    memcpy(c.ids, targets, (size_t)N * sizeof(int));
    gc_fill_normal(&rng, c.x, n, 2.0f);
    double mean = 0;
    int count = crossentropy_forward(c.out, c.c1, &mean, c.x, c.ids, N, V);
    float *dl = zalloc_(n);
    crossentropy_backward(dl, c.x, c.c1, c.ids, count, N, V);
    char what[96];
    snprintf(what, sizeof what, "cross-entropy logits (%s)", name);
    gradcheck_buffer(what, c.x, dl, n, xent_loss_, &c, GC_H, GC_RTOL, GC_ATOL, GC_DIRS, 2 * V, seed + 1);
    int zero = 1;
    for (int r = 0; r < N; r++) {
        for (int i = 0; i < V && targets[r] == XENT_IGNORE_INDEX; i++) zero &= dl[(size_t)r * V + i] == 0.0f;
    }
    CHECK(zero, "cross-entropy (%s): ignored rows get a zero gradient", name);

    // the in-place form gives exactly the plain form's gradient
    float *inplace = copy_(c.x, n);
    crossentropy_backward_inplace(inplace, c.c1, c.ids, count, N, V);
    CHECK(memcmp(inplace, dl, n * sizeof(float)) == 0, "cross-entropy (%s): in-place backward equals plain", name);

    // forward and in-place backward in one pass: the same losses, stats, mean, count and gradient bits
    // (also with another n_norm, as with gradient accumulation); a bad target leaves the logits untouched
    for (int norm_extra = 0; norm_extra <= 3; norm_extra += 3) {
        float *fb = copy_(c.x, n), *fb_loss = zalloc_(N), *fb_stats = zalloc_(2 * (size_t)N);
        float *want = copy_(c.x, n);
        crossentropy_backward_inplace(want, c.c1, c.ids, count + norm_extra, N, V);
        double fb_mean = -1;
        int fb_count = crossentropy_forward_backward(fb_loss, fb_stats, &fb_mean, fb, c.ids, count + norm_extra, N, V);
        CHECK(fb_count == count && fb_mean == mean && memcmp(fb_loss, c.out, (size_t)N * sizeof(float)) == 0 &&
                  memcmp(fb_stats, c.c1, 2 * (size_t)N * sizeof(float)) == 0 && memcmp(fb, want, n * sizeof(float)) == 0,
              "cross-entropy (%s): forward_backward (n_norm = count + %d) equals forward then in-place backward "
              "(count %d vs %d)", name, norm_extra, fb_count, count);
        free(fb); free(fb_loss); free(fb_stats); free(want);
    }
    {
        int *bad = (int *)malloc((size_t)N * sizeof(int));
        memcpy(bad, c.ids, (size_t)N * sizeof(int));
        bad[N - 1] = V;  // out of range, not the ignore index
        float *fb = copy_(c.x, n), *fb_loss = zalloc_(N), *fb_stats = zalloc_(2 * (size_t)N);
        double fb_mean = 0;
        int rc = crossentropy_forward_backward(fb_loss, fb_stats, &fb_mean, fb, bad, count, N, V);
        CHECK(rc == -1 && isnan(fb_mean) && memcmp(fb, c.x, n * sizeof(float)) == 0,
              "cross-entropy (%s): forward_backward refuses a target of V = %d (returns %d) and leaves the logits", name,
              V, rc);
        free(bad); free(fb); free(fb_loss); free(fb_stats);
    }

    float *dl1 = copy_(dl, n);
    crossentropy_backward(dl, c.x, c.c1, c.ids, count, N, V);
    snprintf(what, sizeof what, "cross-entropy (%s) dlogits", name);
    check_doubled_(what, dl1, dl, n, 0);
    free(inplace); free(dl1); free(dl); free(c.x); free(c.out); free(c.c1); free(c.ids);
}

static void test_xent_forward_(void) {
    // a small case against -log softmax at the target, computed in double
    enum { N = 5, V = 6 };
    float logits[N * V];
    GcRng rng = {51};
    gc_fill_normal(&rng, logits, N * V, 3.0f);
    int targets[N] = {2, XENT_IGNORE_INDEX, 0, 5, XENT_IGNORE_INDEX};
    float losses[N], lse[2 * N];
    double mean = -1;
    int count = crossentropy_forward(losses, lse, &mean, logits, targets, N, V);
    CHECK(count == 3, "cross-entropy counts the 3 supervised rows of 5 (got %d)", count);
    double sum = 0;
    for (int r = 0; r < N; r++) {
        if (targets[r] == XENT_IGNORE_INDEX) {
            CHECK(losses[r] == 0.0f, "cross-entropy row %d (ignored): loss 0", r);
            continue;
        }
        double z = 0;
        for (int i = 0; i < V; i++) z += exp((double)logits[r * V + i]);
        double want = -log(exp((double)logits[r * V + targets[r]]) / z);
        sum += want;
        CHECK_NEAR(losses[r], want, 1e-6, 1e-6, "cross-entropy row %d = -log softmax[target]", r);
    }
    CHECK_NEAR(mean, sum / 3.0, 1e-6, 1e-6, "cross-entropy mean divides by the supervised count (3), not N (5)");
    CHECK(crossentropy_check_targets(targets, N, V) == -1, "check_targets accepts [0,V) and -100");

    // all ignored: count 0, mean 0 (no 0/0), no gradient; the in-place form zeroes the buffer
    int none[N] = {XENT_IGNORE_INDEX, XENT_IGNORE_INDEX, XENT_IGNORE_INDEX, XENT_IGNORE_INDEX, XENT_IGNORE_INDEX};
    count = crossentropy_forward(losses, lse, &mean, logits, none, N, V);
    CHECK(count == 0 && mean == 0.0 && !isnan(mean), "cross-entropy all ignored: count 0, mean 0 (got %d, %g)",
          count, mean);
    float dl[N * V] = {0}, buf[N * V];
    crossentropy_backward(dl, logits, lse, none, count, N, V);
    memcpy(buf, logits, sizeof buf);
    crossentropy_backward_inplace(buf, lse, none, count, N, V);
    int zero = 1;
    for (int i = 0; i < N * V; i++) zero &= dl[i] == 0.0f && buf[i] == 0.0f;
    CHECK(zero, "cross-entropy all ignored: zero gradient from both backward forms");

    // invalid targets are an error, reported, and never read out of bounds
    int bad[N] = {1, 2, V, 0, -1};
    CHECK(crossentropy_check_targets(bad, N, V) == 2, "check_targets names the first bad target (index 2)");
    int bad2[N] = {1, -7, 0, 0, 0};
    CHECK(crossentropy_check_targets(bad2, N, V) == 1, "check_targets rejects negative targets other than -100");
    count = crossentropy_forward(losses, lse, &mean, logits, bad, N, V);
    CHECK(count == -1 && isnan(mean), "cross-entropy forward returns -1 and a NaN mean on a bad target");
    memset(dl, 0, sizeof dl);
    crossentropy_backward(dl, logits, lse, bad, 3, N, V);
    zero = 1;
    for (int i = 0; i < V; i++) zero &= dl[2 * V + i] == 0.0f && dl[4 * V + i] == 0.0f;
    CHECK(zero, "cross-entropy backward treats out-of-range targets as ignored");

    // huge logits: the max-subtraction keeps everything finite and right
    float big[2 * 4] = {1e4f, -1e4f, 0.0f, 5e3f, -1e4f, -1e4f, 1e4f, 1e4f};
    int bt[2] = {1, 2};
    float bl[2], blse[4], bd[2 * 4] = {0};
    count = crossentropy_forward(bl, blse, &mean, big, bt, 2, 4);
    crossentropy_backward(bd, big, blse, bt, count, 2, 4);
    int finite = isfinite(mean) && isfinite(bl[0]) && isfinite(bl[1]);
    for (int i = 0; i < 8; i++) finite &= isfinite(bd[i]);
    CHECK(finite, "cross-entropy with logits +-1e4: loss and gradient finite");
    CHECK_NEAR(bl[0], 2e4, 0, 1e-6, "cross-entropy with logits +-1e4: loss = 1e4 - (-1e4)");
    CHECK_NEAR(bl[1], log(2.0), 1e-6, 0, "cross-entropy with two tied 1e4 logits: loss = log 2");
    CHECK_NEAR(bd[4 + 2], -0.25, 1e-7, 0, "cross-entropy with tied 1e4 logits: dlogit = (1/2 - 1)/2");
}

// a vocabulary of the benchmark's size (and an odd one, for the 16-lane tail): loss and gradient
// against softmax in double, so the vectorised exp and the lane-split sum are checked where they are used
static void test_xent_large_v_(int V, uint64_t seed) {
    GcRng rng = {seed};
    enum { N = 3 };
    float *logits = zalloc_((size_t)N * V);
    gc_fill_normal(&rng, logits, (size_t)N * V, 3.0f);
    logits[5] = 40.0f;  // row 0 dominated by one logit: most exps far below 1, one exactly exp(0)
    int targets[N] = {5, V - 1, 7};
    float losses[N], stats[2 * N];
    double mean = 0;
    int count = crossentropy_forward(losses, stats, &mean, logits, targets, N, V);
    float *buf = copy_(logits, (size_t)N * V);
    crossentropy_backward_inplace(buf, stats, targets, count, N, V);
    double worst_l = 0, worst_g = 0;
    for (int r = 0; r < N; r++) {
        const float *row = logits + (size_t)r * V;
        double mx = row[0], z = 0;
        for (int i = 0; i < V; i++) mx = row[i] > mx ? row[i] : mx;
        for (int i = 0; i < V; i++) z += exp((double)row[i] - mx);
        double want = mx + log(z) - row[targets[r]];
        double el = fabs(losses[r] - want) / (1e-6 + 1e-6 * fabs(want));
        if (el > worst_l) worst_l = el;
        for (int i = 0; i < V; i++) {
            double g = (exp((double)row[i] - mx) / z - (i == targets[r])) / count;
            // each p on its own scale: 1e-6 relative, plus what rounding the float argument
            // a = (logit - max) - logsum to half an ulp (|a| 2^-24 absolute) costs in exp(a) for any exp
            double a = fabs((double)row[i] - mx - log(z));
            double eg = fabs(buf[(size_t)r * V + i] - g) / (1e-12 + (1e-6 + a * 6e-8) * fabs(g));
            if (eg > worst_g) worst_g = eg;
        }
    }
    CHECK(worst_l <= 1.0, "cross-entropy V=%d: loss within 1e-6 abs+rel of double (worst %.3g of tol)", V, worst_l);
    CHECK(worst_g <= 1.0, "cross-entropy V=%d: gradient within (1e-6 + |log p| 2^-24) relative of double softmax (worst %.3g of tol)",
          V, worst_g);
    free(logits); free(buf);
}

// ----------------------------------------------------------------------------
// embedding

static double embedding_loss_(void *p) {
    Ctx *c = (Ctx *)p;
    embedding_forward(c->out, c->ids, c->w, c->N, c->C);
    return gc_dot(c->dy, c->out, c->n_out);
}

static void test_embedding_grad_(void) {
    GcRng rng = {61};
    int N = 10, C = 20, V = 7;
    int ids[10] = {3, 1, 3, 0, 6, 3, 1, 5, 5, 2};  // 3 three times, 1 and 5 twice, 4 never
    Ctx c = {.N = N, .C = C, .V = V, .n_out = (size_t)N * C, .ids = ids};
    size_t nw = (size_t)V * C;
    c.w = zalloc_(nw); c.out = zalloc_(c.n_out); c.dy = zalloc_(c.n_out);
    gc_fill_normal(&rng, c.w, nw, 1.0f);
    gc_fill_normal(&rng, c.dy, c.n_out, 1.0f);
    CHECK(embedding_check_ids(ids, N, V) == -1, "embedding_check_ids accepts ids in [0,V)");
    int bad[3] = {0, 7, -1};
    CHECK(embedding_check_ids(bad, 3, V) == 1, "embedding_check_ids names the first id outside [0,V)");
    embedding_loss_(&c);
    CHECK(memcmp(c.out + 2 * C, c.w + 3 * C, (size_t)C * sizeof(float)) == 0, "embedding row 2 is wte[3]");
    float *dw = zalloc_(nw);
    embedding_backward(dw, c.dy, ids, N, C);
    gradcheck_buffer("embedding wte (repeated ids)", c.w, dw, nw, embedding_loss_, &c, GC_H, GC_RTOL, GC_ATOL,
                     GC_DIRS, 4 * C, 62);
    int zero = 1;
    for (int i = 0; i < C; i++) zero &= dw[4 * C + i] == 0.0f;
    CHECK(zero, "embedding: an unused id gets no gradient");
    float *dw1 = copy_(dw, nw);
    embedding_backward(dw, c.dy, ids, N, C);
    check_doubled_("embedding dwte", dw1, dw, nw, 1e-6);
    free(dw1); free(dw); free(c.w); free(c.out); free(c.dy);
}

// ----------------------------------------------------------------------------
// thread-count independence

static void test_threads_(void) {
    GcRng rng = {71};
    int N = 509, C = 83, V = 40, NV = 301;  // odd sizes so the thread splits are uneven
    int *ids = (int *)malloc((size_t)N * sizeof(int)), *tg = (int *)malloc((size_t)N * sizeof(int));
    for (int n = 0; n < N; n++) {
        ids[n] = (int)(gc_uniform(&rng) * 8.0f) * 5 % V;  // few distinct ids: many collisions
        tg[n] = n % 7 == 0 ? XENT_IGNORE_INDEX : (int)(gc_uniform(&rng) * (float)NV);
    }
    float *dout = zalloc_((size_t)N * C), *logits = zalloc_((size_t)N * NV);
    gc_fill_normal(&rng, dout, (size_t)N * C, 1.0f);
    gc_fill_normal(&rng, logits, (size_t)N * NV, 2.0f);
    float *inp = zalloc_((size_t)N * C), *w = zalloc_(C);
    gc_fill_normal(&rng, inp, (size_t)N * C, 1.0f);
    for (int i = 0; i < C; i++) w[i] = 1.0f + 0.01f * (float)i;

    // 1, 2 and 7 threads: at 7, the norm weight gradients' column blocks narrow to 16 columns
    // (nn/colblock.h), so the split by columns differs from the 1- and 2-thread runs' 64
    enum { RUNS = 3 };
    const int threads[RUNS] = {1, 2, 7};
    float *dwte[RUNS], *losses[RUNS], *lse[RUNS], *dl[RUNS], *ln_dx[RUNS], *ln_dw[RUNS], *ln_db[RUNS];
    double mean[RUNS];
    float *mu = zalloc_(N), *rs = zalloc_(N), *ln_out = zalloc_((size_t)N * C);
    for (int k = 0; k < RUNS; k++) {
        set_threads_(threads[k]);
        dwte[k] = zalloc_((size_t)V * C);
        embedding_backward(dwte[k], dout, ids, N, C);
        losses[k] = zalloc_(N); lse[k] = zalloc_(2 * (size_t)N); dl[k] = zalloc_((size_t)N * NV);
        int count = crossentropy_forward(losses[k], lse[k], &mean[k], logits, tg, N, NV);
        crossentropy_backward(dl[k], logits, lse[k], tg, count, N, NV);
        ln_dx[k] = zalloc_((size_t)N * C); ln_dw[k] = zalloc_(C); ln_db[k] = zalloc_(C);
        layernorm_forward(ln_out, mu, rs, inp, w, NULL, N, C);
        layernorm_backward(ln_dx[k], ln_dw[k], ln_db[k], dout, inp, w, mu, rs, N, C);
    }
    set_threads_(2);
    for (int k = 1; k < RUNS; k++) {
        int t = threads[k];
        CHECK(memcmp(dwte[0], dwte[k], (size_t)V * C * sizeof(float)) == 0,
              "embedding_backward: identical with 1 and %d threads", t);
        CHECK(mean[0] == mean[k] && memcmp(losses[0], losses[k], (size_t)N * sizeof(float)) == 0 &&
                  memcmp(lse[0], lse[k], 2 * (size_t)N * sizeof(float)) == 0,
              "crossentropy_forward: identical with 1 and %d threads", t);
        CHECK(memcmp(dl[0], dl[k], (size_t)N * NV * sizeof(float)) == 0,
              "crossentropy_backward: identical with 1 and %d threads", t);
        CHECK(memcmp(ln_dx[0], ln_dx[k], (size_t)N * C * sizeof(float)) == 0 &&
                  memcmp(ln_dw[0], ln_dw[k], (size_t)C * sizeof(float)) == 0 &&
                  memcmp(ln_db[0], ln_db[k], (size_t)C * sizeof(float)) == 0,
              "layernorm_backward: identical with 1 and %d threads", t);
    }
    // same-id rows accumulate in position order: the reference below sums them the same way
    float *ref = zalloc_((size_t)V * C);
    for (int n = 0; n < N; n++) {
        for (int i = 0; i < C; i++) ref[(size_t)ids[n] * C + i] += dout[(size_t)n * C + i];
    }
    CHECK(memcmp(ref, dwte[1], (size_t)V * C * sizeof(float)) == 0,
          "embedding_backward: bitwise equal to a serial sum in position order");
    for (int k = 0; k < RUNS; k++) {
        free(dwte[k]); free(losses[k]); free(lse[k]); free(dl[k]); free(ln_dx[k]); free(ln_dw[k]); free(ln_db[k]);
    }
    free(ref); free(mu); free(rs); free(ln_out); free(ids); free(tg); free(dout); free(logits); free(inp); free(w);
}

// zero_fill: every element of large (parallel: 1, 2 and 7 slices) and small (serial) buffers cleared, at odd
// lengths and an odd start; nothing written before or after
static void test_zero_fill_(void) {
    enum { PAD = 16 };
    const size_t lens[] = {0, 1, 1000, 262143, 262144 + 7, 1048576 + 13};
    const int threads[] = {1, 2, 7};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t n = lens[li];
        float *buf = zalloc_(n + 2 * PAD + 1), *x = buf + PAD + 1;  // x not 64-byte aligned
        for (int ti = 0; ti < 3; ti++) {
            set_threads_(threads[ti]);
            for (size_t i = 0; i < n + 2 * PAD + 1; i++) buf[i] = (float)i + 0.5f;
            zero_fill(x, n);
            size_t nonzero = 0, clobbered = 0;
            for (size_t i = 0; i < n; i++) nonzero += x[i] != 0.0f || signbit(x[i]);
            for (size_t i = 0; i < PAD + 1; i++) clobbered += buf[i] != (float)i + 0.5f;
            for (size_t i = PAD + 1 + n; i < n + 2 * PAD + 1; i++) clobbered += buf[i] != (float)i + 0.5f;
            CHECK(nonzero == 0 && clobbered == 0, "zero_fill n=%zu threads=%d: %zu left nonzero (0), %zu outside written (0)",
                  n, threads[ti], nonzero, clobbered);
        }
        free(buf);
    }
    set_threads_(2);
}

int main(void) {
    test_zero_fill_();
    test_l2norm_();
    test_layernorm_grad_(1, 1);
    test_layernorm_grad_(0, 5);
    test_rmsnorm_grad_();
    test_norm_forward_();

    test_elementwise_grad_("gelu", gelu_forward, gelu_backward, 0, 101);
    test_elementwise_grad_("relu", relu_forward, relu_backward, 1, 102);
    test_elementwise_grad_("silu", silu_forward, silu_backward, 0, 103);
    test_swiglu_grad_();
    test_residual_grad_();
    test_activation_forward_();
    test_fast_expf_();
    test_fast_sincos_();
    test_gelu_silu_dense_();

    const int t_mixed[6] = {3, XENT_IGNORE_INDEX, 0, 10, XENT_IGNORE_INDEX, 7};
    test_xent_grad_("two rows ignored", t_mixed, 6, 201);
    const int t_one[4] = {XENT_IGNORE_INDEX, XENT_IGNORE_INDEX, 4, XENT_IGNORE_INDEX};
    test_xent_grad_("all rows ignored but one", t_one, 4, 211);
    test_xent_forward_();
    test_xent_large_v_(8192, 221);
    test_xent_large_v_(1001, 231);

    test_embedding_grad_();
    test_threads_();
    return test_summary();
}
