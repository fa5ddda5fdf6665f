/*
 * The mamba mixer (Mamba-1's selective SSM, src/mixers/mamba.c):
 *   - the forward equals a plain sequential selective scan written here in double from the equations
 *     (docs/mixers.md, "mamba"), with dt_rank auto and explicit, conv 2 without bias;
 *   - gradient checks of dx and of every tensor (A_log, dt_bias, dt_proj, x_proj, D, conv weight and bias, both
 *     projections), with T not a multiple of the chunk;
 *   - the chunk size changes neither the outputs nor the gradients (chunk 1, 3, 64 at T = 50);
 *   - recurrent decoding (step) reproduces the forward token by token to 1e-5 relative;
 *   - the init (S4D-real A = -(1..N), dt log-uniform, dt_proj U(±dt_scale/sqrt(dt_rank)) or constant, D = 1,
 *     the conv's PyTorch default), the parameter count, the decay flags and the decoding state size;
 *   - options that make no sense together stop with the key path.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixer_layer.h"

// finite-difference step and tolerance as tests/test_mamba2.c (a loss over ~700 float32 outputs)
#define MB_GC_H 1e-2

// d_model 16, expand 2 -> d_inner 32, d_state 4, dt_rank auto = ceil(16 / 16) = 1
#define MB_BASE "\"kind\": \"mamba\", \"d_state\": 4"

// move the parameters off the init so every path carries gradient: dt = softplus(dt_bias + ...) around
// [0.3, 1.3] and -A in [0.5, 2], so the decays exp(dt A) span ~0.07 .. 0.85 within T = 23 tokens
static void perturb_(Layer *L, GcRng *r) {
    for (int k = 0; k < L->pt.n; k++) {
        const ParamTensor *t = &L->pt.t[k];
        float *p = L->params + t->offset;
        for (size_t i = 0; i < t->numel; i++) {
            if (strstr(t->name, "A_log")) p[i] = -0.7f + 1.4f * gc_uniform(r);
            else if (strstr(t->name, "dt_bias")) p[i] = -1.0f + 1.5f * gc_uniform(r);
            else if (strstr(t->name, ".D")) p[i] = 0.5f + gc_uniform(r);
            else if (strstr(t->name, "conv_b")) p[i] = 0.2f * gc_normal(r);
            else p[i] += 0.2f * gc_normal(r);
        }
    }
}

// ----------------------------------------------------------------------------
// the forward against the sequential selective scan, in double

static double silu_(double v) { return v / (1.0 + exp(-v)); }
static double softplus_(double v) { return v > 30 ? v : log1p(exp(v)); }

static void naive_forward_(const Layer *L, const float *x, double *out, int B, int T, int N, int R, int K) {
    int C = L->C, Di = 2 * C;
    const float *win = layer_tensor(L, "in_proj"), *cw = layer_tensor(L, "conv_w"), *cb = layer_tensor(L, "conv_b");
    const float *wx = layer_tensor(L, "x_proj"), *wdt = layer_tensor(L, "dt_proj"), *dtb = layer_tensor(L, "dt_bias");
    const float *alog = layer_tensor(L, "A_log"), *Dp = layer_tensor(L, "D"), *wout = layer_tensor(L, "out_proj");
    double *proj = calloc((size_t)T * 2 * Di, sizeof(double)), *u = calloc((size_t)T * Di, sizeof(double));
    double *h = calloc((size_t)Di * N, sizeof(double)), *sel = calloc((size_t)R + 2 * N, sizeof(double));
    double *y = calloc(Di, sizeof(double));
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++)
            for (int j = 0; j < 2 * Di; j++) {
                double s = 0;
                for (int c = 0; c < C; c++) s += (double)win[(size_t)j * C + c] * x[((size_t)b * T + t) * C + c];
                proj[(size_t)t * 2 * Di + j] = s;
            }
        for (int t = 0; t < T; t++)
            for (int d = 0; d < Di; d++) {
                double s = cb ? cb[d] : 0.0;
                for (int j = 0; j < K; j++) {
                    int ts = t - (K - 1) + j;
                    if (ts >= 0) s += (double)cw[(size_t)d * K + j] * proj[(size_t)ts * 2 * Di + d];
                }
                u[(size_t)t * Di + d] = silu_(s);
            }
        memset(h, 0, (size_t)Di * N * sizeof(double));
        for (int t = 0; t < T; t++) {
            const double *ut = u + (size_t)t * Di, *z = proj + (size_t)t * 2 * Di + Di;
            for (int j = 0; j < R + 2 * N; j++) {
                double s = 0;
                for (int d = 0; d < Di; d++) s += (double)wx[(size_t)j * Di + d] * ut[d];
                sel[j] = s;
            }
            const double *Bm = sel + R, *Cm = Bm + N;
            for (int d = 0; d < Di; d++) {
                double s = dtb[d];
                for (int j = 0; j < R; j++) s += (double)wdt[(size_t)d * R + j] * sel[j];
                double dt = softplus_(s), acc = Dp[d] * ut[d];
                for (int n = 0; n < N; n++) {
                    double *hn = h + (size_t)d * N + n, A = -exp(alog[(size_t)d * N + n]);
                    *hn = exp(dt * A) * *hn + dt * Bm[n] * ut[d];
                    acc += Cm[n] * *hn;
                }
                y[d] = acc * silu_(z[d]);
            }
            for (int c = 0; c < C; c++) {
                double s = 0;
                for (int d = 0; d < Di; d++) s += (double)wout[(size_t)c * Di + d] * y[d];
                out[((size_t)b * T + t) * C + c] = s;
            }
        }
    }
    free(proj); free(u); free(h); free(sel); free(y);
}

static void check_naive_(const char *what, const char *json, int N, int R, int K) {
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
    naive_forward_(&L, x, ref, B, T, N, R, K);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs(y[i] - ref[i]));
        scale = fmax(scale, fabs(ref[i]));
    }
    CHECK(worst <= 1e-5 * scale && scale > 1e-2,
          "%s: forward = sequential selective scan in double (max|d| %.2g, max|y| %.2g)", what, worst, scale);
    free(x); free(y); free(ref);
    layer_free_(&L);
}

static void test_naive(void) {
    check_naive_("mamba dt_rank auto (1), chunk 5", "{" MB_BASE ", \"chunk\": 5}", 4, 1, 4);
    check_naive_("mamba dt_rank 3, d_state 3, conv 2 without bias, chunk 7",
                 "{\"kind\": \"mamba\", \"d_state\": 3, \"dt_rank\": 3, \"conv\": 2, \"conv_bias\": false, "
                 "\"chunk\": 7}", 3, 3, 2);
}

// ----------------------------------------------------------------------------
// gradient checks

static void test_gradients(void) {
    layer_gradcheck_perturbed("mamba chunk 5", "{" MB_BASE ", \"chunk\": 5}", perturb_, MB_GC_H);
    layer_gradcheck_perturbed("mamba dt_rank 2, conv 3 without bias, chunk 64",
                              "{" MB_BASE ", \"dt_rank\": 2, \"conv\": 3, \"conv_bias\": false, \"chunk\": 64}", perturb_,
                              MB_GC_H);
}

// ----------------------------------------------------------------------------
// the chunk size: memory and speed, not results

static void test_chunk_invariance(void) {
    layer_chunk_check("mamba", "{" MB_BASE ", \"dt_rank\": 2}", perturb_);
}

// ----------------------------------------------------------------------------
// recurrent decoding

static void test_step(void) {
    static const char *const cases[][2] = {
        {"mamba chunk 7", "{" MB_BASE ", \"chunk\": 7}"},
        {"mamba dt_rank 2, conv 2 without bias", "{" MB_BASE ", \"dt_rank\": 2, \"conv\": 2, \"conv_bias\": false}"},
    };
    layer_cases_decode(cases, 2, perturb_);
}

// ----------------------------------------------------------------------------
// init, decay flags, state size

static void test_init(void) {
    Layer L;
    if (layer_build_(&L, "{" MB_BASE ", \"dt_rank\": 4}", 16, 3)) return;
    int Di = 32, N = 4, R = 4, K = 4;
    const float *alog = layer_tensor(&L, "A_log"), *dtb = layer_tensor(&L, "dt_bias"), *Dp = layer_tensor(&L, "D");
    const float *wdt = layer_tensor(&L, "dt_proj"), *cw = layer_tensor(&L, "conv_w"), *cb = layer_tensor(&L, "conv_b");
    int ok_a = 1, ok_dt = 1, ok_d = 1;
    double wmax = 0, cmax = 0, bmax = 0;
    for (int d = 0; d < Di; d++) {
        for (int n = 0; n < N; n++) ok_a &= alog[d * N + n] == (float)log(n + 1.0);
        double dt = softplus_(dtb[d]);
        ok_dt &= dt >= 1e-3 * (1 - 1e-4) && dt <= 0.1 * (1 + 1e-4);
        ok_d &= Dp[d] == 1.0f;
        for (int j = 0; j < R; j++) wmax = fmax(wmax, fabs(wdt[d * R + j]));
        for (int j = 0; j < K; j++) cmax = fmax(cmax, fabs(cw[d * K + j]));
        bmax = fmax(bmax, fabs(cb[d]));
    }
    CHECK(ok_a, "mamba init: A_log = log(1..N) in every channel (S4D-real A = -(1, ..., N))");
    CHECK(ok_dt, "mamba init: softplus(dt_bias) in [dt_min, dt_max] = [0.001, 0.1]");
    CHECK(ok_d, "mamba init: D = 1");
    CHECK(wmax <= 0.5 && wmax > 0.4, "mamba init: dt_proj U(±1/sqrt(dt_rank)) = U(±0.5) (max %.3f)", wmax);
    CHECK(cmax <= 0.5 && cmax > 0.4 && bmax <= 0.5 && bmax > 0.3,
          "mamba init: conv weight and bias U(±1/sqrt(K)) = U(±0.5), PyTorch's default (max %.3f, %.3f)", cmax, bmax);
    CHECK(L.pt.t[param_index_(&L, "in_proj")].shape[0] == 2 * Di && L.pt.t[param_index_(&L, "x_proj")].shape[0] == R + 2 * N &&
              L.pt.t[param_index_(&L, "dt_proj")].shape[1] == R && L.pt.t[param_index_(&L, "A_log")].shape[1] == N,
          "mamba: in_proj 2 d_inner rows, x_proj dt_rank + 2 N rows, dt_proj dt_rank columns, A_log (d_inner, N)");
    const char *nodecay[] = {"A_log", "dt_bias", "D", "conv_b"};
    int flags = 1;
    for (int i = 0; i < 4; i++) flags &= L.pt.t[param_index_(&L, nodecay[i])].decay == 0;
    const char *decay[] = {"in_proj", "x_proj", "dt_proj", "conv_w", "out_proj"};
    for (int i = 0; i < 5; i++) flags &= L.pt.t[param_index_(&L, decay[i])].decay == 1;
    CHECK(flags, "mamba: A_log, dt_bias, D, conv_b without weight decay; the matrices with");
    size_t ss = L.spec.ops->state_size(&L.spec, 0);
    CHECK(ss == (size_t)Di * N + (size_t)Di * (K - 1), "mamba: decoding state = d_inner N + d_inner (K-1) = %zu floats",
          ss);
    CHECK(L.spec.ops->owns_mlp == 1, "mamba owns its MLP (a fused block)");
    layer_free_(&L);
    // dt_rank auto = ceil(d_model / 16): 2 at d_model 17 (expand 2 -> d_inner 34)
    if (layer_build_(&L, "{\"kind\": \"mamba\", \"d_state\": 4}", 17, 3)) return;
    CHECK(L.pt.t[param_index_(&L, "dt_proj")].shape[1] == 2 && L.pt.t[param_index_(&L, "in_proj")].shape[0] == 68,
          "mamba: dt_rank auto at d_model 17 = ceil(17/16) = 2, d_inner = floor(2 · 17) = 34");
    layer_free_(&L);
    // the parameter count of mamba_ssm's Mamba(d_model=128) with its defaults: in_proj 512·128, conv1d 256·4 + 256,
    // x_proj (8 + 32)·256, dt_proj 256·8 + 256, A_log 256·16, D 256, out_proj 128·256
    if (layer_build_(&L, "{\"kind\": \"mamba\"}", 128, 3)) return;
    CHECK(L.pt.numel == 116480, "mamba at d_model 128 with the defaults has mamba_ssm's 116480 parameters (%zu)",
          L.pt.numel);
    layer_free_(&L);
    // dt_init constant with dt_scale 2: every dt_proj weight 2 / sqrt(dt_rank); out_proj rescaled
    if (layer_build_(&L, "{" MB_BASE ", \"dt_rank\": 4, \"dt_init\": \"constant\", \"dt_scale\": 2, "
                     "\"rescale_prenorm_residual\": true}", 16, 3)) return;
    wdt = layer_tensor(&L, "dt_proj");
    int same = 1;
    for (int i = 0; i < Di * R; i++) same &= wdt[i] == 1.0f;
    CHECK(same, "mamba init: dt_init constant, dt_scale 2 -> dt_proj = 2 / sqrt(4) = 1 everywhere");
    const ParamTensor *t = &L.pt.t[param_index_(&L, "out_proj")];
    double bound = 1.0 / sqrt(32.0) / sqrt(2.0), mx = 0;
    for (size_t i = 0; i < t->numel; i++) mx = fmax(mx, fabs(L.params[t->offset + i]));
    CHECK(mx <= bound && mx > 0.8 * bound,
          "mamba init: rescale_prenorm_residual -> out_proj within ±1/sqrt(d_inner · n_layers) = %.4f (max %.4f)",
          bound, mx);
    layer_free_(&L);
}

// ----------------------------------------------------------------------------
// options that make no sense together

static void test_bad_options(void) {
    layer_check_error("{\"kind\": \"mamba\", \"d_state\": 0}", 16, "model.mixer.d_state");
    layer_check_error("{\"kind\": \"mamba\", \"expand\": 0.01}", 16, "model.mixer.expand");
    layer_check_error("{\"kind\": \"mamba\", \"dt_min\": 0.5}", 16, "model.mixer.dt_min");
    layer_check_error("{\"kind\": \"mamba\", \"dt_rank\": -1}", 16, "model.mixer.dt_rank");
    layer_check_error("{\"kind\": \"mamba\", \"dt_init\": \"zero\"}", 16, "model.mixer.dt_init");
    layer_check_error("{\"kind\": \"mamba\", \"chunk\": 0}", 16, "model.mixer.chunk");
    layer_check_error("{\"kind\": \"mamba\", \"conv\": 0}", 16, "model.mixer.conv");
    layer_check_error("{\"kind\": \"mamba\", \"head_dim\": 8}", 16, "head_dim");
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
