/*
 * Rotary position embedding and the causal depthwise short convolution: finite-difference gradient
 * checks, double-precision references, the algebraic properties RoPE exists for (norms kept, scores
 * that depend only on relative position), decoding paths (pos0, conv1d_causal_step) against the full
 * forward, causality, and results independent of the OpenMP thread count.
 */
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "nn/conv.h"
#include "nn/rotary.h"
#include "gradcheck.h"
#include "test.h"

// Both ops are linear in each argument that is checked (rotary in inp; conv in inp, in weight, in bias),
// so central differences have no truncation error at any step h; what is left is float rounding of the
// outputs (~1e-7 relative each, summed in double over <= a few hundred terms) divided by 2h. With h = 0.1
// that is ~1e-5 absolute at worst, so atol 1e-4 and rtol 1e-3 have a 10x margin and still catch any
// wrong term, which shows up as an O(1) error.
#define GC_H 0.1
#define GC_RTOL 1e-3
#define GC_ATOL 1e-4

static double max_abs_diff_(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m) m = d;
    }
    return m;
}

// ----------------------------------------------------------------------------
// rotary

typedef struct RotCtx {
    RotaryCfg cfg;
    int pos0, B, T, NH, HS;
    float *inp, *out, *dy;
} RotCtx;

static double rot_loss_(void *p) {
    RotCtx *c = p;
    rotary_forward(c->out, c->inp, &c->cfg, c->pos0, c->B, c->T, c->NH, c->HS);
    return gc_dot(c->dy, c->out, (size_t)c->B * c->T * c->NH * c->HS);
}

static void test_rotary_gradcheck(void) {
    GcRng rng = {11};
    int B = 2, T = 5, NH = 3, HS = 8;
    size_t n = (size_t)B * T * NH * HS;
    float freqs[3 * 4];
    for (int k = 0; k < NH * HS / 2; k++) freqs[k] = 0.05f + 0.37f * (float)k;  // a made-up per-head spectrum
    for (int variant = 0; variant < 4; variant++) {
        RotCtx c = {{variant & 1 ? ROTARY_HALF : ROTARY_INTERLEAVED, 10000.0f, variant & 2 ? freqs : NULL},
                    variant == 0 ? 0 : 37, B, T, NH, HS, gc_randn(&rng, n, 1.0f), malloc(n * sizeof(float)),
                    gc_randn(&rng, n, 1.0f)};
        float *dinp = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) dinp[i] = 0.0f;
        rotary_backward(dinp, c.dy, &c.cfg, c.pos0, B, T, NH, HS);
        char name[96];
        snprintf(name, sizeof name, "rotary dinp (%s, pos0 %d, %s freqs)",
                 variant & 1 ? "half" : "interleaved", c.pos0, variant & 2 ? "explicit" : "default");
        gradcheck_buffer(name, c.inp, dinp, n, rot_loss_, &c, GC_H, GC_RTOL, GC_ATOL, 6, 24, 100 + variant);

        // backward accumulates: a second call on top of the first doubles the gradient
        float *dinp2 = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) dinp2[i] = dinp[i];
        rotary_backward(dinp2, c.dy, &c.cfg, c.pos0, B, T, NH, HS);
        double worst = 0;
        for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(dinp2[i] - 2.0 * dinp[i]));
        CHECK(worst <= 1e-6, "rotary backward accumulates (%s), max diff %.3g", name, worst);
        free(dinp2);
        free(dinp);
        free(c.inp);
        free(c.out);
        free(c.dy);
    }
}

static void test_rotary_properties(void) {
    GcRng rng = {12};
    int B = 2, T = 33, NH = 2, HS = 16, half = HS / 2;
    size_t n = (size_t)B * T * NH * HS;
    float *x = gc_randn(&rng, n, 1.0f), *y = malloc(n * sizeof(float)), *z = malloc(n * sizeof(float));

    for (int layout = 0; layout < 2; layout++) {
        RotaryCfg cfg = {layout, 10000.0f, NULL};
        const char *lname = layout == ROTARY_HALF ? "half" : "interleaved";
        rotary_forward(y, x, &cfg, 3, B, T, NH, HS);

        // a rotation keeps each pair's length
        double worst = 0;
        for (size_t r = 0; r < n / HS; r++) {
            for (int i = 0; i < half; i++) {
                int i0 = layout == ROTARY_HALF ? i : 2 * i, i1 = layout == ROTARY_HALF ? i + half : 2 * i + 1;
                const float *xr = x + r * HS, *yr = y + r * HS;
                double nx = hypot(xr[i0], xr[i1]), ny = hypot(yr[i0], yr[i1]);
                worst = fmax(worst, fabs(nx - ny) / (nx + 1e-30));
            }
        }
        CHECK(worst <= 1e-6, "rotary %s keeps pair norms (worst relative change %.3g)", lname, worst);

        // in place gives exactly the out-of-place result
        for (size_t i = 0; i < n; i++) z[i] = x[i];
        rotary_forward(z, z, &cfg, 3, B, T, NH, HS);
        CHECK(max_abs_diff_(y, z, n) == 0.0, "rotary %s in place equals out of place", lname);

        // one token at pos0 = 3 + t equals row t of the full call (the decoding path), bit for bit
        double dec = 0;
        for (int b = 0; b < B; b++) {
            for (int t = 0; t < T; t++) {
                size_t off = ((size_t)b * T + t) * NH * HS;
                rotary_forward(z, x + off, &cfg, 3 + t, 1, 1, NH, HS);
                dec = fmax(dec, max_abs_diff_(z, y + off, (size_t)NH * HS));
            }
        }
        CHECK(dec == 0.0, "rotary %s one token at pos0 = p equals the full forward at p (max diff %.3g)", lname, dec);

        // backward is the inverse rotation: R^T R x = x
        for (size_t i = 0; i < n; i++) z[i] = 0.0f;
        rotary_backward(z, y, &cfg, 3, B, T, NH, HS);
        double inv = max_abs_diff_(z, x, n);
        CHECK(inv <= 1e-5, "rotary %s backward inverts forward (max diff %.3g)", lname, inv);

        // relative position: <rot(q,m), rot(k,n)> depends only on m - n. Tolerance 1e-4 of |q||k|
        // (the dot itself may cancel to near zero, so relative to the operands' scale).
        float q[2 * 16], k[2 * 16], qm[2 * 16], kn[2 * 16];
        gc_fill_normal(&rng, q, (size_t)NH * HS, 1.0f);
        gc_fill_normal(&rng, k, (size_t)NH * HS, 1.0f);
        double qk = sqrt(gc_dot(q, q, HS)) * sqrt(gc_dot(k, k, HS));
        const int shifts[] = {0, 1, 5, -7, 100};
        const int bases[] = {1, 40, 1000, 8000};
        for (int si = 0; si < 5; si++) {
            int d = shifts[si];
            rotary_forward(qm, q, &cfg, d > 0 ? d : 0, 1, 1, NH, HS);
            rotary_forward(kn, k, &cfg, d > 0 ? 0 : -d, 1, 1, NH, HS);
            double ref = gc_dot(qm, kn, HS);  // head 0 at positions (max(d,0), max(-d,0))
            double worst_rel = 0;
            for (int bi = 0; bi < 4; bi++) {
                int m = bases[bi] + (d > 0 ? d : 0), nn = bases[bi] + (d > 0 ? 0 : -d);
                rotary_forward(qm, q, &cfg, m, 1, 1, NH, HS);
                rotary_forward(kn, k, &cfg, nn, 1, 1, NH, HS);
                worst_rel = fmax(worst_rel, fabs(gc_dot(qm, kn, HS) - ref) / qk);
            }
            CHECK(worst_rel <= 1e-4, "rotary %s: q.k depends only on m - n = %d (worst %.3g of |q||k|)",
                  lname, d, worst_rel);
        }
    }

    // the two layouts are one op up to a channel permutation: interleaved channel 2i is half channel i,
    // interleaved channel 2i+1 is half channel i + HS/2
    float *xp = malloc(n * sizeof(float)), *yi = malloc(n * sizeof(float)), *yh = malloc(n * sizeof(float));
    for (size_t r = 0; r < n / HS; r++) {
        for (int i = 0; i < half; i++) {
            xp[r * HS + i] = x[r * HS + 2 * i];
            xp[r * HS + i + half] = x[r * HS + 2 * i + 1];
        }
    }
    RotaryCfg ci = {ROTARY_INTERLEAVED, 500000.0f, NULL}, ch = {ROTARY_HALF, 500000.0f, NULL};
    rotary_forward(yi, x, &ci, 11, B, T, NH, HS);
    rotary_forward(yh, xp, &ch, 11, B, T, NH, HS);
    double perm = 0;
    for (size_t r = 0; r < n / HS; r++) {
        for (int i = 0; i < half; i++) {
            perm = fmax(perm, fabs(yi[r * HS + 2 * i] - yh[r * HS + i]));
            perm = fmax(perm, fabs(yi[r * HS + 2 * i + 1] - yh[r * HS + i + half]));
        }
    }
    CHECK(perm == 0.0, "rotary interleaved and half agree after permuting channels (max diff %.3g)", perm);

    free(xp);
    free(yi);
    free(yh);
    free(x);
    free(y);
    free(z);
}

// T = 8192 positions against cos/sin taken entirely in double: float angles would be ~5e-4 off here
static void test_rotary_long_reference(void) {
    GcRng rng = {13};
    int T = 8192, NH = 2, HS = 64, half = HS / 2, pos0 = 100;
    size_t n = (size_t)T * NH * HS;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = 2.0f * gc_uniform(&rng) - 1.0f;  // |x| <= 1
    float freqs[2 * 32];
    for (int k = 0; k < NH * half; k++) freqs[k] = (float)pow(10000.0, -(double)k / (NH * half));  // one spectrum split over heads
    for (int variant = 0; variant < 4; variant++) {
        int layout = variant & 1 ? ROTARY_HALF : ROTARY_INTERLEAVED;
        RotaryCfg cfg = {layout, 10000.0f, variant & 2 ? freqs : NULL};
        rotary_forward(y, x, &cfg, pos0, 1, T, NH, HS);
        double worst = 0;
        for (int t = 0; t < T; t++) {
            for (int h = 0; h < NH; h++) {
                const float *xr = x + ((size_t)t * NH + h) * HS, *yr = y + ((size_t)t * NH + h) * HS;
                for (int i = 0; i < half; i++) {
                    double w = cfg.freqs ? (double)freqs[h * half + i] : pow(10000.0, -2.0 * i / HS);
                    double a = (double)(pos0 + t) * w, c = cos(a), s = sin(a);
                    int i0 = layout == ROTARY_HALF ? i : 2 * i, i1 = layout == ROTARY_HALF ? i + half : 2 * i + 1;
                    worst = fmax(worst, fabs(yr[i0] - (xr[i0] * c - xr[i1] * s)));
                    worst = fmax(worst, fabs(yr[i1] - (xr[i0] * s + xr[i1] * c)));
                }
            }
        }
        CHECK(worst <= 1e-5, "rotary %s %s freqs, T=8192 vs double reference: max abs err %.3g <= 1e-5",
              variant & 1 ? "half" : "interleaved", variant & 2 ? "explicit" : "default", worst);
    }
    free(x);
    free(y);
}

// ----------------------------------------------------------------------------
// causal conv

typedef struct ConvCtx {
    int B, T, C, K;
    float *inp, *weight, *bias, *out, *dy;
} ConvCtx;

static double conv_loss_(void *p) {
    ConvCtx *c = p;
    conv1d_causal_forward(c->out, c->inp, c->weight, c->bias, c->B, c->T, c->C, c->K);
    return gc_dot(c->dy, c->out, (size_t)c->B * c->T * c->C);
}

// out[b,t,c] = bias[c] + sum_j weight[c,j] * inp[b,t-(K-1)+j,c], all in double
static void conv_reference_(double *out, const float *inp, const float *weight, const float *bias,
                            int B, int T, int C, int K) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            for (int c = 0; c < C; c++) {
                double acc = bias ? bias[c] : 0.0;
                for (int j = 0; j < K; j++) {
                    int s = t - (K - 1) + j;
                    if (s >= 0) acc += (double)weight[c * K + j] * inp[((size_t)b * T + s) * C + c];
                }
                out[((size_t)b * T + t) * C + c] = acc;
            }
        }
    }
}

static void test_conv_gradcheck_and_reference(void) {
    GcRng rng = {21};
    const int Ks[] = {1, 3, 4, 4};
    const int Ts[] = {6, 7, 9, 2};  // the last has T < K: only part of the kernel ever sees tokens
    for (int v = 0; v < 4; v++) {
        int B = 2, T = Ts[v], C = 5, K = Ks[v];
        size_t n = (size_t)B * T * C;
        ConvCtx c = {B, T, C, K, gc_randn(&rng, n, 1.0f), gc_randn(&rng, (size_t)C * K, 0.5f), gc_randn(&rng, C, 0.5f),
                     malloc(n * sizeof(float)), gc_randn(&rng, n, 1.0f)};
        float *dinp = calloc(n, sizeof(float)), *dw = calloc((size_t)C * K, sizeof(float));
        float *db = calloc(C, sizeof(float));
        conv1d_causal_backward(dinp, dw, db, c.dy, c.inp, c.weight, B, T, C, K);
        char name[64];
        snprintf(name, sizeof name, "conv K=%d T=%d", K, T);
        char nm[96];
        snprintf(nm, sizeof nm, "%s dinp", name);
        gradcheck_buffer(nm, c.inp, dinp, n, conv_loss_, &c, GC_H, GC_RTOL, GC_ATOL, 6, 20, 200 + v);
        snprintf(nm, sizeof nm, "%s dweight", name);
        gradcheck_buffer(nm, c.weight, dw, (size_t)C * K, conv_loss_, &c, GC_H, GC_RTOL, GC_ATOL, 6, 20, 300 + v);
        snprintf(nm, sizeof nm, "%s dbias", name);
        gradcheck_buffer(nm, c.bias, db, C, conv_loss_, &c, GC_H, GC_RTOL, GC_ATOL, 6, 5, 400 + v);

        // backward accumulates into each buffer, and NULL buffers are skipped
        float *dinp2 = malloc(n * sizeof(float)), *dw2 = malloc((size_t)C * K * sizeof(float));
        for (size_t i = 0; i < n; i++) dinp2[i] = dinp[i];
        for (int i = 0; i < C * K; i++) dw2[i] = dw[i];
        conv1d_causal_backward(dinp2, NULL, NULL, c.dy, c.inp, c.weight, B, T, C, K);
        conv1d_causal_backward(NULL, dw2, NULL, c.dy, c.inp, c.weight, B, T, C, K);
        double acc = 0;
        for (size_t i = 0; i < n; i++) acc = fmax(acc, fabs(dinp2[i] - 2.0 * dinp[i]));
        for (int i = 0; i < C * K; i++) acc = fmax(acc, fabs(dw2[i] - 2.0 * dw[i]));
        CHECK(acc <= 1e-5, "%s backward accumulates, NULL grads skipped (max diff %.3g)", name, acc);

        // forward against the double reference, with and without bias
        double *ref = malloc(n * sizeof(double));
        for (int wb = 0; wb < 2; wb++) {
            float *bias = wb ? c.bias : NULL;
            conv1d_causal_forward(c.out, c.inp, c.weight, bias, B, T, C, K);
            conv_reference_(ref, c.inp, c.weight, bias, B, T, C, K);
            double worst = 0;
            for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(c.out[i] - ref[i]));
            CHECK(worst <= 1e-5, "%s forward %s bias vs double reference (max abs err %.3g)", name,
                  wb ? "with" : "without", worst);
        }
        free(ref);
        free(dinp2);
        free(dw2);
        free(dinp);
        free(dw);
        free(db);
        free(c.inp);
        free(c.weight);
        free(c.bias);
        free(c.out);
        free(c.dy);
    }
}

static void test_conv_step_and_causality(void) {
    GcRng rng = {22};
    const int Ks[] = {1, 3, 4};
    for (int v = 0; v < 3; v++) {
        int B = 3, T = 10, C = 7, K = Ks[v];
        size_t n = (size_t)B * T * C;
        float *inp = gc_randn(&rng, n, 1.0f), *w = gc_randn(&rng, (size_t)C * K, 0.5f), *bias = gc_randn(&rng, C, 0.5f);
        float *out = malloc(n * sizeof(float)), *out2 = malloc(n * sizeof(float));
        float *x = malloc((size_t)B * C * sizeof(float)), *y = malloc((size_t)B * C * sizeof(float));
        float *state = calloc((size_t)B * C * (K > 1 ? K - 1 : 1), sizeof(float));
        for (int wb = 0; wb < 2; wb++) {
            float *bb = wb ? bias : NULL;
            conv1d_causal_forward(out, inp, w, bb, B, T, C, K);
            for (size_t i = 0; i < (size_t)B * C * (K > 1 ? K - 1 : 1); i++) state[i] = 0.0f;
            double worst = 0;
            for (int t = 0; t < T; t++) {
                for (int b = 0; b < B; b++) {
                    for (int c = 0; c < C; c++) x[b * C + c] = inp[((size_t)b * T + t) * C + c];
                }
                conv1d_causal_step(y, state, x, w, bb, B, C, K);
                for (int b = 0; b < B; b++) {
                    for (int c = 0; c < C; c++) {
                        worst = fmax(worst, fabs(y[b * C + c] - out[((size_t)b * T + t) * C + c]));
                    }
                }
            }
            CHECK(worst <= 1e-6, "conv K=%d %s bias: step token by token equals the full forward (max diff %.3g)",
                  K, wb ? "with" : "without", worst);
        }

        // perturbing the input at t0 leaves every output before t0 exactly as it was, and changes t0
        conv1d_causal_forward(out, inp, w, bias, B, T, C, K);
        int t0 = 4;
        for (int c = 0; c < C; c++) inp[((size_t)1 * T + t0) * C + c] += 1.0f;
        conv1d_causal_forward(out2, inp, w, bias, B, T, C, K);
        int before_same = 1, at_changed = 0;
        for (int b = 0; b < B; b++) {
            for (int t = 0; t < T; t++) {
                for (int c = 0; c < C; c++) {
                    size_t i = ((size_t)b * T + t) * C + c;
                    if ((b != 1 || t < t0) && out[i] != out2[i]) before_same = 0;
                    if (b == 1 && t == t0 && out[i] != out2[i]) at_changed = 1;
                }
            }
        }
        CHECK(before_same && at_changed, "conv K=%d is causal (outputs before t0 and other sequences unchanged)", K);
        free(inp);
        free(w);
        free(bias);
        free(out);
        free(out2);
        free(x);
        free(y);
        free(state);
    }
}

// ----------------------------------------------------------------------------
// thread-count independence

#ifdef _OPENMP
static void test_threads(void) {
    GcRng rng = {31};
    int B = 3, T = 40, C = 150, K = 4;  // C spans several channel blocks of the dweight reduction
    size_t n = (size_t)B * T * C;
    float *inp = gc_randn(&rng, n, 1.0f), *w = gc_randn(&rng, (size_t)C * K, 0.5f), *bias = gc_randn(&rng, C, 0.5f);
    float *dy = gc_randn(&rng, n, 1.0f);
    float *res[2][4];
    int saved = omp_get_max_threads();
    for (int run = 0; run < 2; run++) {
        omp_set_num_threads(run + 1);
        float *out = malloc(n * sizeof(float)), *dinp = calloc(n, sizeof(float));
        float *dw = calloc((size_t)C * K, sizeof(float)), *db = calloc(C, sizeof(float));
        conv1d_causal_forward(out, inp, w, bias, B, T, C, K);
        conv1d_causal_backward(dinp, dw, db, dy, inp, w, B, T, C, K);
        rotary_forward(out, out, &(RotaryCfg){ROTARY_HALF, 10000.0f, NULL}, 5, B, T, 15, 10);  // C = 15 heads of 10
        res[run][0] = out;
        res[run][1] = dinp;
        res[run][2] = dw;
        res[run][3] = db;
    }
    omp_set_num_threads(saved);
    size_t sizes[4] = {n, n, (size_t)C * K, (size_t)C};
    int same = 1;
    for (int k = 0; k < 4; k++) same &= memcmp(res[0][k], res[1][k], sizes[k] * sizeof(float)) == 0;
    CHECK(same, "conv forward/backward and rotary identical with 1 and 2 OpenMP threads");
    for (int run = 0; run < 2; run++) {
        for (int k = 0; k < 4; k++) free(res[run][k]);
    }
    free(inp);
    free(w);
    free(bias);
    free(dy);
}
#endif

// the rotation fused with the (B,T,H,D) <-> (B,H,T,D) head permutation equals rotate-then-permute (forward)
// and permute-then-inverse-rotate into zeros (backward), bit for bit, for both layouts and both spectra
static void permute_(float *dst, const float *src, int B, int T, int H, int D, int to_heads) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                size_t bthd = (((size_t)b * T + t) * H + h) * D, bhtd = (((size_t)b * H + h) * T + t) * D;
                memcpy(dst + (to_heads ? bhtd : bthd), src + (to_heads ? bthd : bhtd), (size_t)D * sizeof(float));
            }
}

static void test_rotary_heads(void) {
    int B = 2, T = 37, H = 3, D = 16;
    size_t n = (size_t)B * T * H * D;
    GcRng r = {707};
    float *x = gc_randn(&r, n, 1.0f), *freqs = gc_randn(&r, (size_t)H * D / 2, 0.3f);
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float)), *c = malloc(n * sizeof(float));
    for (int layout = 0; layout < 2; layout++)
        for (int explicit_freqs = 0; explicit_freqs < 2; explicit_freqs++) {
            RotaryCfg cfg = {layout ? ROTARY_HALF : ROTARY_INTERLEAVED, 500.0f, explicit_freqs ? freqs : NULL};
            RotaryTable tab;
            rotary_table_init(&tab, &cfg, 5, T, H, D);
            rotary_forward_table(a, x, &tab, B);
            permute_(b, a, B, T, H, D, 1);
            rotary_forward_heads_table(c, x, &tab, B);
            CHECK(memcmp(b, c, n * sizeof(float)) == 0, "rotary_forward_heads_table == rotate then permute (%s, %s)",
                  layout ? "half" : "interleaved", explicit_freqs ? "explicit freqs" : "base");
            // backward: dout in (B,H,T,D); reference = permute back, then inverse-rotate into zeros
            permute_(a, x, B, T, H, D, 0);  // reuse x as a (B,H,T,D) gradient, laid out as (B,T,H,D) here
            memset(b, 0, n * sizeof(float));
            rotary_backward_table(b, a, &tab, B);
            for (size_t i = 0; i < n; i++) c[i] = 1e30f;  // stale values must be overwritten, not added to
            rotary_backward_heads_table(c, x, &tab, B);
            CHECK(memcmp(b, c, n * sizeof(float)) == 0, "rotary_backward_heads_table == permute then R^T (%s, %s)",
                  layout ? "half" : "interleaved", explicit_freqs ? "explicit freqs" : "base");
            rotary_table_free(&tab);
        }
    free(x); free(freqs); free(a); free(b); free(c);
}

int main(void) {
    test_rotary_heads();
    test_rotary_gradcheck();
    test_rotary_properties();
    test_rotary_long_reference();
    test_conv_gradcheck_and_reference();
    test_conv_step_and_causality();
#ifdef _OPENMP
    test_threads();
#endif
    return test_summary();
}
