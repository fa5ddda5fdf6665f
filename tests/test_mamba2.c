/*
 * The mamba2 mixer (Mamba2 / SSD, src/mixers/mamba2.c):
 *   - the forward equals a plain sequential recurrence written here in double from the equations
 *     (docs/mixers.md, "mamba2"), with one and two groups of B/C;
 *   - gradient checks of dx and of every tensor (A_log, dt_bias, D, conv weights and bias, norm weight,
 *     both projections), with T not a multiple of the chunk;
 *   - the chunk size changes neither the outputs nor the gradients (chunk 1, 3, 64 at T = 50);
 *   - recurrent decoding (step) reproduces the forward token by token to 1e-5 relative;
 *   - the init (FLA's: A = -U(1, 16), dt log-uniform, D = 1, out_proj rescaled), the decay flags and the
 *     decoding state size;
 *   - options that make no sense together stop with the key path.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixer_layer.h"

// finite-difference step: the loss sums ~700 float32 outputs of size ~5, so its rounding (~1e-5) over 2h
// must stay well below the tolerance (h = 3e-3 leaves ~2e-3 of noise on small gradients); the O(h^2) error at
// 1e-2 is below 0.5 of the tolerance
#define M2_GC_H 1e-2

// d_model 16, expand 2 -> d_inner 32, head_dim 8 -> 4 heads, d_state 4
#define M2_BASE "\"kind\": \"mamba2\", \"head_dim\": 8, \"d_state\": 4"

// move the parameters off the init so every path carries gradient: dt = softplus(dt_bias) in ~[0.3, 1.3] and
// A = -exp(A_log) in ~[-2, -0.5], so the decays exp(dt A) span 0.1 .. 0.85 within T = 23 tokens
static void perturb_(Layer *L, GcRng *r) {
    for (int k = 0; k < L->pt.n; k++) {
        const ParamTensor *t = &L->pt.t[k];
        float *p = L->params + t->offset;
        for (size_t i = 0; i < t->numel; i++) {
            if (strstr(t->name, "A_log")) p[i] = -0.7f + 1.4f * gc_uniform(r);
            else if (strstr(t->name, "dt_bias")) p[i] = -1.0f + 1.5f * gc_uniform(r);
            else if (strstr(t->name, ".D")) p[i] = 0.5f + gc_uniform(r);
            else if (strstr(t->name, "norm_w")) p[i] = 1.0f + 0.2f * gc_normal(r);
            else if (strstr(t->name, "conv_b")) p[i] = 0.2f * gc_normal(r);
            else p[i] += 0.3f * gc_normal(r);
        }
    }
}

// ----------------------------------------------------------------------------
// the forward against the sequential recurrence, in double

static double silu_(double v) { return v / (1.0 + exp(-v)); }
static double softplus_(double v) { return v > 30 ? v : log1p(exp(v)); }

static void naive_forward_(const Layer *L, const float *x, double *out, int B, int T, int P, int N, int G, int K,
                           int has_bias) {
    int C = L->C, Di = 2 * C, H = Di / P, CD = Di + 2 * G * N, NP = Di + CD + H;
    const float *win = layer_tensor(L, "in_proj"), *cw = layer_tensor(L, "conv_w"), *cb = has_bias ? layer_tensor(L, "conv_b") : NULL;
    const float *dtb = layer_tensor(L, "dt_bias"), *alog = layer_tensor(L, "A_log"), *Dp = layer_tensor(L, "D");
    const float *nw = layer_tensor(L, "norm_w"), *wout = layer_tensor(L, "out_proj");
    double *proj = calloc((size_t)T * NP, sizeof(double)), *u = calloc((size_t)T * CD, sizeof(double));
    double *S = calloc((size_t)H * N * P, sizeof(double)), *y = calloc(Di, sizeof(double));
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++)
            for (int j = 0; j < NP; j++) {
                double s = 0;
                for (int c = 0; c < C; c++) s += (double)win[(size_t)j * C + c] * x[((size_t)b * T + t) * C + c];
                proj[(size_t)t * NP + j] = s;
            }
        for (int t = 0; t < T; t++)
            for (int c = 0; c < CD; c++) {
                double s = cb ? cb[c] : 0.0;
                for (int j = 0; j < K; j++) {
                    int ts = t - (K - 1) + j;
                    if (ts >= 0) s += (double)cw[(size_t)c * K + j] * proj[(size_t)ts * NP + Di + c];
                }
                u[(size_t)t * CD + c] = silu_(s);
            }
        memset(S, 0, (size_t)H * N * P * sizeof(double));
        for (int t = 0; t < T; t++) {
            const double *xs = u + (size_t)t * CD, *Bm = xs + Di, *Cm = Bm + G * N, *z = proj + (size_t)t * NP;
            for (int h = 0; h < H; h++) {
                int grp = h / (H / G);
                double dt = softplus_(proj[(size_t)t * NP + Di + CD + h] + dtb[h]), A = -exp(alog[h]);
                double decay = exp(dt * A);
                for (int n = 0; n < N; n++)
                    for (int p = 0; p < P; p++) {
                        double *s = S + ((size_t)h * N + n) * P + p;
                        *s = decay * *s + dt * Bm[grp * N + n] * xs[h * P + p];
                    }
                for (int p = 0; p < P; p++) {
                    double acc = Dp[h] * xs[h * P + p];
                    for (int n = 0; n < N; n++) acc += S[((size_t)h * N + n) * P + p] * Cm[grp * N + n];
                    y[h * P + p] = acc;
                }
            }
            // y * silu(z), then RMSNorm over each group of Di / G channels, times the weight
            int gs = Di / G;
            for (int gi = 0; gi < G; gi++) {
                double ss = 0;
                for (int c = gi * gs; c < (gi + 1) * gs; c++) {
                    y[c] *= silu_(z[c]);
                    ss += y[c] * y[c];
                }
                double r = 1.0 / sqrt(ss / gs + 1e-5);
                for (int c = gi * gs; c < (gi + 1) * gs; c++) y[c] *= r * nw[c];
            }
            for (int c = 0; c < C; c++) {
                double s = 0;
                for (int j = 0; j < Di; j++) s += (double)wout[(size_t)c * Di + j] * y[j];
                out[((size_t)b * T + t) * C + c] = s;
            }
        }
    }
    free(proj); free(u); free(S); free(y);
}

static void check_naive_(const char *what, const char *json, int P, int N, int G, int K, int has_bias) {
    int C = 16, B = 2, T = 29;
    Layer L;
    if (layer_build_(&L, json, C, 31)) return;
    layer_shape_(&L, B, T);
    GcRng r = {32};
    perturb_(&L, &r);
    size_t n = (size_t)B * T * C;
    float *x = gc_randn(&r, n, 1.0f), *y = malloc(n * sizeof(float));
    double *ref = malloc(n * sizeof(double));
    L.spec.ops->forward(&L.m, y, x, B, T);
    naive_forward_(&L, x, ref, B, T, P, N, G, K, has_bias);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs(y[i] - ref[i]));
        scale = fmax(scale, fabs(ref[i]));
    }
    CHECK(worst <= 1e-5 * scale && scale > 1e-2, "%s: forward = sequential recurrence in double (max|d| %.2g, max|y| %.2g)",
          what, worst, scale);
    free(x); free(y); free(ref);
    layer_free_(&L);
}

static void test_naive(void) {
    check_naive_("mamba2 1 group", "{" M2_BASE ", \"chunk\": 5}", 8, 4, 1, 4, 1);
    check_naive_("mamba2 2 groups", "{" M2_BASE ", \"n_groups\": 2, \"chunk\": 7}", 8, 4, 2, 4, 1);
    check_naive_("mamba2 4 groups, head_dim 4, d_state 3, conv 2, no conv bias",
                 "{\"kind\": \"mamba2\", \"head_dim\": 4, \"d_state\": 3, \"n_groups\": 4, \"conv\": 2, "
                 "\"conv_bias\": false}", 4, 3, 4, 2, 0);
}

// ----------------------------------------------------------------------------
// gradient checks

static void test_gradients(void) {
    layer_gradcheck_perturbed("mamba2 n_groups 1, chunk 5", "{" M2_BASE ", \"chunk\": 5}", perturb_, M2_GC_H);
    layer_gradcheck_perturbed("mamba2 n_groups 2, chunk 64", "{" M2_BASE ", \"n_groups\": 2}", perturb_, M2_GC_H);
    layer_gradcheck_perturbed("mamba2 n_groups 2, conv 3 without bias, chunk 4",
                              "{" M2_BASE ", \"n_groups\": 2, \"conv\": 3, \"conv_bias\": false, \"chunk\": 4}", perturb_, M2_GC_H);
}

// ----------------------------------------------------------------------------
// the chunk size: memory and speed, not results

static void test_chunk_invariance(void) {
    layer_chunk_check("mamba2", "{" M2_BASE ", \"n_groups\": 2}", perturb_);
}

// ----------------------------------------------------------------------------
// recurrent decoding

static void check_step_(const char *what, const char *json) {
    double scale, worst = layer_decode_error(json, perturb_, &scale);
    CHECK(worst <= 1e-5 * scale && scale > 1e-2,
          "%s: token-by-token decoding = full forward (max|d| %.2g, max|y| %.2g)", what, worst, scale);
}

static void test_step(void) {
    check_step_("mamba2 1 group, chunk 7", "{" M2_BASE ", \"chunk\": 7}");
    check_step_("mamba2 2 groups, conv 2 without bias", "{" M2_BASE ", \"n_groups\": 2, \"conv\": 2, \"conv_bias\": false}");
}

// ----------------------------------------------------------------------------
// init, decay flags, state size

static void test_init(void) {
    Layer L;
    if (layer_build_(&L, "{" M2_BASE ", \"n_groups\": 2}", 16, 3)) return;
    const ParamTensor *t;
    int H = 4, Di = 32, CD = Di + 2 * 2 * 4, K = 4;
    const float *alog = layer_tensor(&L, "A_log"), *dtb = layer_tensor(&L, "dt_bias"), *Dp = layer_tensor(&L, "D");
    int ok_a = 1, ok_dt = 1, ok_d = 1;
    for (int h = 0; h < H; h++) {
        double A = exp(alog[h]), dt = softplus_(dtb[h]);
        ok_a &= A >= 1.0 - 1e-5 && A <= 16.0 + 1e-4;
        ok_dt &= dt >= 1e-3 * (1 - 1e-4) && dt <= 0.1 * (1 + 1e-4);
        ok_d &= Dp[h] == 1.0f;
    }
    CHECK(ok_a, "mamba2 init: -A = exp(A_log) in [1, 16]");
    CHECK(ok_dt, "mamba2 init: softplus(dt_bias) in [dt_min, dt_max] = [0.001, 0.1]");
    CHECK(ok_d, "mamba2 init: D = 1");
    // out_proj: U(±1/sqrt(d_inner)) / sqrt(n_layers); the layer is built with n_layers 2
    int ko = param_index_(&L, "out_proj");
    t = &L.pt.t[ko];
    double bound = 1.0 / sqrt(32.0) / sqrt(2.0), mx = 0;
    for (size_t i = 0; i < t->numel; i++) mx = fmax(mx, fabs(L.params[t->offset + i]));
    CHECK(mx <= bound && mx > 0.8 * bound, "mamba2 init: out_proj within ±1/sqrt(d_inner · n_layers) = %.4f (max %.4f)",
          bound, mx);
    CHECK(L.pt.t[param_index_(&L, "in_proj")].shape[0] == Di + CD + H && L.pt.t[param_index_(&L, "conv_w")].shape[0] == CD,
          "mamba2: in_proj has d_inner + conv_dim + heads rows, conv_w conv_dim rows");
    const char *nodecay[] = {"A_log", "dt_bias", "D", "norm_w", "conv_b"};
    int flags = 1;
    for (int i = 0; i < 5; i++) flags &= L.pt.t[param_index_(&L, nodecay[i])].decay == 0;
    flags &= L.pt.t[param_index_(&L, "in_proj")].decay == 1 && L.pt.t[ko].decay == 1;
    CHECK(flags, "mamba2: A_log, dt_bias, D, norm_w, conv_b without weight decay; projections with");
    size_t ss = L.spec.ops->state_size(&L.spec, 0);
    CHECK(ss == (size_t)H * 4 * 8 + (size_t)CD * (K - 1), "mamba2: decoding state = H N P + conv_dim (K-1) = %zu floats",
          ss);
    CHECK(L.spec.ops->owns_mlp == 1, "mamba2 owns its MLP (a fused block)");
    layer_free_(&L);
    // without rescale_prenorm_residual out_proj is N(0, init_std)
    if (layer_build_(&L, "{" M2_BASE ", \"rescale_prenorm_residual\": false, \"init_std\": 0.05}", 16, 3)) return;
    t = &L.pt.t[param_index_(&L, "out_proj")];
    double ss2 = 0;
    for (size_t i = 0; i < t->numel; i++) ss2 += (double)L.params[t->offset + i] * L.params[t->offset + i];
    double sd = sqrt(ss2 / t->numel);
    CHECK(fabs(sd - 0.05) < 0.005, "mamba2 init: rescale_prenorm_residual false -> out_proj N(0, init_std) (std %.4f)", sd);
    layer_free_(&L);
}

// ----------------------------------------------------------------------------
// options that make no sense together

static void test_bad_options(void) {
    layer_check_error("{\"kind\": \"mamba2\"}", 16, "model.mixer.head_dim");  // d_inner 32, head_dim 64
    layer_check_error("{\"kind\": \"mamba2\", \"head_dim\": 12}", 16, "model.mixer.head_dim");
    layer_check_error("{\"kind\": \"mamba2\", \"head_dim\": 8, \"n_groups\": 3}", 16, "model.mixer.n_groups");
    layer_check_error("{\"kind\": \"mamba2\", \"head_dim\": 8, \"chunk\": 0}", 16, "model.mixer.chunk");
    layer_check_error("{\"kind\": \"mamba2\", \"head_dim\": 8, \"feature_map\": \"elu\"}", 16, "feature_map");
    layer_check_error("{\"kind\": \"mamba2\", \"head_dim\": 8, \"dt_min\": 0.5}", 16, "model.mixer.dt_min");
    layer_check_error("{\"kind\": \"mamba2\", \"head_dim\": 8, \"A_init_lo\": 20}", 16, "model.mixer.A_init_lo");
    layer_check_error("{\"kind\": \"mamba2\", \"head_dim\": 8, \"d_state\": 0}", 16, "model.mixer.d_state");
    layer_check_error("{\"kind\": \"mamba2\", \"head_dim\": 8, \"expand\": 0.01}", 16, "model.mixer.expand");
}

int main(void) {
    test_naive();
    test_gradients();
    test_chunk_invariance();
    test_step();
    test_init();
    test_bad_options();
    return test_summary();
}
