/*
 * The mlstm mixer (xLSTM's mLSTM layer) and its block-diagonal projection (nn/blockdiag.h):
 *   - blockdiag against its definition, and gradient checks of its input and weight;
 *   - the layer against the parallel stabilised form of docs/mixers.md ("mlstm"; xLSTM's
 *     parallel_stabilized_simple), computed here in double from the layer's parameters, with both branches of
 *     the normaliser max(|q.n|, exp(-m)) taken;
 *   - the initialisation (forget-gate biases linspace(3, 6, H), zero gate weights, small_init / wang_init
 *     stds, decay flags) and the inner width's rounding;
 *   - gradient checks of dx and of every tensor, gate weights moved off zero, T not a multiple of the chunk: in
 *     float32 against the layer itself (mixer_layer.h), and 20x tighter against central differences of the
 *     parallel form in double;
 *   - outputs and gradients independent of the chunk size (1, 3, 64);
 *   - step == forward token by token (with and without the conv);
 *   - strong input gates over T = 2048 stay finite; options that make no sense stop with the key path.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixer_layer.h"
#include "nn/blockdiag.h"

// float32 finite differences (mixer_layer.h): the loss's rounding noise over B T C outputs, divided by 2h, is close
// to the tolerance at h = 1e-3 for this layer (exponential gates, a normaliser and a LayerNorm in a row), so the
// float check takes h = 1e-2 on a mildly perturbed layer; the strict check is the one in double below
#define ML_GC_H 1e-2
// the double check: central differences of the parallel form with the perturbation float storage really makes
#define ML_GC_H_DOUBLE 1e-4
#define ML_GC_RTOL_DOUBLE 1e-3
#define ML_GC_ATOL_DOUBLE 1e-5  // the stabiliser's max and |q.n| have kinks: a small step stays on one side of them

// ----------------------------------------------------------------------------
// the block-diagonal projection

typedef struct BdCtx {
    int N, G, Di, Do;
    float *x, *w, *y, *dy;
} BdCtx;

static double bd_loss_(void *p) {
    BdCtx *c = p;
    blockdiag_forward(c->y, c->x, c->w, c->N, c->G, c->Di, c->Do);
    return gc_dot(c->dy, c->y, (size_t)c->N * c->G * c->Do);
}

static void test_blockdiag(void) {
    const int shapes[2][3] = {{3, 4, 4}, {2, 3, 5}};  // G, Di, Do
    for (int s = 0; s < 2; s++) {
        BdCtx c = {7, shapes[s][0], shapes[s][1], shapes[s][2], NULL, NULL, NULL, NULL};
        GcRng r = {31 + (uint64_t)s};
        size_t nx = (size_t)c.N * c.G * c.Di, ny = (size_t)c.N * c.G * c.Do, nw = (size_t)c.G * c.Do * c.Di;
        c.x = gc_randn(&r, nx, 1.0f), c.w = gc_randn(&r, nw, 1.0f), c.dy = gc_randn(&r, ny, 1.0f);
        c.y = malloc(ny * sizeof(float));
        bd_loss_(&c);
        double worst = 0;
        for (int n = 0; n < c.N; n++)
            for (int g = 0; g < c.G; g++)
                for (int o = 0; o < c.Do; o++) {
                    double want = 0;
                    for (int i = 0; i < c.Di; i++)
                        want += (double)c.w[((size_t)g * c.Do + o) * c.Di + i] *
                                c.x[(size_t)n * c.G * c.Di + g * c.Di + i];
                    worst = fmax(worst, fabs(want - c.y[(size_t)n * c.G * c.Do + g * c.Do + o]));
                }
        CHECK(worst < 1e-5, "blockdiag G %d, %d -> %d: forward = sum_i w[g,o,i] x[g,i] (max|d| %.2g)", c.G, c.Di, c.Do,
              worst);
        float *dx = calloc(nx, sizeof(float)), *dw = calloc(nw, sizeof(float));
        blockdiag_backward(dx, dw, c.dy, c.x, c.w, c.N, c.G, c.Di, c.Do);
        char name[96];
        snprintf(name, sizeof name, "blockdiag G %d, %d -> %d: d input", c.G, c.Di, c.Do);
        gradcheck_buffer(name, c.x, dx, nx, bd_loss_, &c, 1e-2, 1e-3, 1e-4, 3, 6, 1);
        snprintf(name, sizeof name, "blockdiag G %d, %d -> %d: d weight", c.G, c.Di, c.Do);
        gradcheck_buffer(name, c.w, dw, nw, bd_loss_, &c, 1e-2, 1e-3, 1e-4, 3, 6, 2);
        free(c.x); free(c.w); free(c.y); free(c.dy); free(dx); free(dw);
    }
}

// ----------------------------------------------------------------------------
// the layer in double, from its parameters: xLSTM's parallel stabilised form

static const float *P_(const Layer *L, const char *suffix) {
    int k = param_index_(L, suffix);
    return k >= 0 ? L->params + L->pt.t[k].offset : NULL;
}

static double silu_(double v) { return v / (1.0 + exp(-v)); }
static double logsig_(double v) { return v >= 0 ? -log1p(exp(-v)) : v - log1p(exp(v)); }

// y (B,T,C) of the layer with I inner channels, H heads, conv K, q/k/v blocks bs; counts of the normaliser's
// branches (|q.n| above exp(-m) or not) into *n_qn, *n_floor
static void naive_layer_(const Layer *L, int I, int H, int K, int bs, double eps, const float *x, double *y,
                         int *n_qn, int *n_floor) {
    int B = L->B, T = L->T, C = L->C, D = I / H;
    size_t BT = (size_t)B * T;
    const float *wup = P_(L, "proj_up"), *cw = P_(L, "conv_w"), *cb = P_(L, "conv_b"), *wq = P_(L, "q_proj");
    const float *wk = P_(L, "k_proj"), *wv = P_(L, "v_proj"), *iw = P_(L, "igate_w"), *ib = P_(L, "igate_b");
    const float *fw = P_(L, "fgate_w"), *fb = P_(L, "fgate_b"), *nw = P_(L, "outnorm"), *sk = P_(L, "skip");
    const float *wd = P_(L, "proj_down");
    double *xm = calloc(BT * I, sizeof(double)), *z = calloc(BT * I, sizeof(double));
    double *xc = calloc(BT * I, sizeof(double)), *q = calloc(BT * I, sizeof(double));
    double *k = calloc(BT * I, sizeof(double)), *v = calloc(BT * I, sizeof(double));
    double *ig = calloc(BT * H, sizeof(double)), *fg = calloc(BT * H, sizeof(double));
    double *h = calloc(BT * I, sizeof(double));
    for (size_t r = 0; r < BT; r++)
        for (int c = 0; c < I; c++)
            for (int j = 0; j < C; j++) {
                xm[r * I + c] += (double)wup[(size_t)c * C + j] * x[r * C + j];
                z[r * I + c] += (double)wup[(size_t)(I + c) * C + j] * x[r * C + j];
            }
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < I; c++) {
                size_t r = (size_t)b * T + t;
                if (!K) { xc[r * I + c] = xm[r * I + c]; continue; }
                double s = cb[c];
                for (int j = 0; j < K; j++)
                    if (t - (K - 1) + j >= 0) s += (double)cw[c * K + j] * xm[(r - (K - 1) + j) * I + c];
                xc[r * I + c] = silu_(s);
            }
    for (size_t r = 0; r < BT; r++)
        for (int g = 0; g < I / bs; g++)
            for (int o = 0; o < bs; o++)
                for (int i = 0; i < bs; i++) {
                    size_t wi = ((size_t)g * bs + o) * bs + i, in = r * I + g * bs + i, out = r * I + g * bs + o;
                    q[out] += wq[wi] * xc[in];
                    k[out] += wk[wi] * xc[in];
                    v[out] += wv[wi] * xm[in];
                }
    for (size_t r = 0; r < BT; r++)
        for (int hh = 0; hh < H; hh++) {
            double si = ib[hh], sf = fb[hh];
            for (int c = 0; c < I; c++) {
                const double cat[3] = {q[r * I + c], k[r * I + c], v[r * I + c]};
                for (int p = 0; p < 3; p++) {
                    si += (double)iw[(size_t)hh * 3 * I + p * I + c] * cat[p];
                    sf += (double)fw[(size_t)hh * 3 * I + p * I + c] * cat[p];
                }
            }
            ig[r * H + hh] = si, fg[r * H + hh] = sf;
        }
    // per (b, head): log D_ij = sum_{l=j+1}^{i} logsigmoid(f_l) + i_j, row max m_i, C = (q k^T / sqrt D) exp(logD - m),
    // h_i = sum_j C_ij v_j / (max(|sum_j C_ij|, exp(-m_i)) + 1e-6)
    double *cum = malloc((size_t)(T + 1) * sizeof(double)), *row = malloc((size_t)T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int hh = 0; hh < H; hh++) {
            cum[0] = 0;
            for (int t = 0; t < T; t++) cum[t + 1] = cum[t] + logsig_(fg[((size_t)b * T + t) * H + hh]);
            for (int i = 0; i < T; i++) {
                double mx = -INFINITY, rs = 0;
                for (int j = 0; j <= i; j++) mx = fmax(mx, cum[i + 1] - cum[j + 1] + ig[((size_t)b * T + j) * H + hh]);
                for (int j = 0; j <= i; j++) {
                    double dot = 0;
                    const double *qi = q + ((size_t)b * T + i) * I + hh * D, *kj = k + ((size_t)b * T + j) * I + hh * D;
                    for (int c = 0; c < D; c++) dot += qi[c] * kj[c];
                    double lD = cum[i + 1] - cum[j + 1] + ig[((size_t)b * T + j) * H + hh];
                    row[j] = dot / sqrt((double)D) * exp(lD - mx);
                    rs += row[j];
                }
                if (fabs(rs) >= exp(-mx)) (*n_qn)++;
                else (*n_floor)++;
                double den = fmax(fabs(rs), exp(-mx)) + 1e-6;
                double *hi = h + ((size_t)b * T + i) * I + hh * D;
                for (int j = 0; j <= i; j++)
                    for (int c = 0; c < D; c++) hi[c] += row[j] * v[((size_t)b * T + j) * I + hh * D + c] / den;
            }
        }
    // per-head LayerNorm (weight, no bias), + skip x_c, (.) silu(z), proj_down
    for (size_t r = 0; r < BT; r++) {
        for (int hh = 0; hh < H; hh++) {
            double *hr = h + r * I + hh * D, mu = 0, var = 0;
            for (int c = 0; c < D; c++) mu += hr[c] / D;
            for (int c = 0; c < D; c++) var += (hr[c] - mu) * (hr[c] - mu) / D;
            for (int c = 0; c < D; c++) hr[c] = (hr[c] - mu) / sqrt(var + eps) * nw[hh * D + c];
        }
        for (int c = 0; c < I; c++) h[r * I + c] = (h[r * I + c] + sk[c] * xc[r * I + c]) * silu_(z[r * I + c]);
        for (int j = 0; j < C; j++) {
            double s = 0;
            for (int c = 0; c < I; c++) s += (double)wd[(size_t)j * I + c] * h[r * I + c];
            y[r * C + j] = s;
        }
    }
    free(xm); free(z); free(xc); free(q); free(k); free(v); free(ig); free(fg); free(h); free(cum); free(row);
}

// move the weights off the init: gate weights nonzero (their gradients are then exercised and the gates vary
// from token to token), input-gate biases spread by `spread` so the stabiliser switches between tokens and both
// branches of max(|q.n|, exp(-m)) occur, projections moved by N(0, proj^2)
static void perturb_(Layer *L, GcRng *r, float gate, float proj, float spread) {
    for (int k = 0; k < L->pt.n; k++) {
        const ParamTensor *t = &L->pt.t[k];
        float *p = L->params + t->offset;
        for (size_t i = 0; i < t->numel; i++) {
            if (strstr(t->name, "gate_w")) p[i] = gate * gc_normal(r);
            else if (strstr(t->name, "igate_b")) p[i] += spread * gc_normal(r);
            else if (strstr(t->name, "fgate_b")) p[i] = 1.0f + 1.5f * gc_normal(r);
            else if (strstr(t->name, "_proj") || strstr(t->name, "proj_")) p[i] += proj * gc_normal(r);
            else p[i] += 0.2f * gc_normal(r);
        }
    }
}

// the moderate perturbation the chunk, decoding and double-precision gradient checks use
static void perturb_checks_(Layer *L, GcRng *r) { perturb_(L, r, 0.3f, 0.3f, 1.5f); }

static void check_naive_(const char *what, const char *json, int I, int H, int K, float spread) {
    Layer L;
    if (layer_build_(&L, json, 16, 3)) return;
    layer_shape_(&L, 2, 19);
    GcRng r = {8};
    perturb_(&L, &r, 0.3f, 0.3f, spread);
    size_t n = (size_t)L.B * L.T * L.C;
    float *x = gc_randn(&r, n, 1.0f), *y = malloc(n * sizeof(float));
    double *yr = malloc(n * sizeof(double)), worst = 0, scale = 0;
    L.spec.ops->forward(&L.m, y, x, L.B, L.T);
    int nq = 0, nf = 0;
    naive_layer_(&L, I, H, K, 4, 1e-5, x, yr, &nq, &nf);
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs(yr[i] - y[i]));
        scale = fmax(scale, fabs(yr[i]));
    }
    CHECK(worst < 1e-5 * scale && nq > 0 && nf > 0,
          "%s: layer == B.11's parallel stabilised form in double (max|d| %.2g of max|y| %.2g; |q.n| branch %d rows, "
          "exp(-m) floor %d)", what, worst, scale, nq, nf);
    free(x); free(y); free(yr);
    layer_free_(&L);
}

static void test_vs_parallel_form(void) {
    check_naive_("mlstm d 16, inner 32, 4 heads, conv 4, chunk 5",
                 "{\"kind\": \"mlstm\", \"round_to\": 1, \"chunk\": 5}", 32, 4, 4, 1.5f);
    check_naive_("mlstm inner 64 (rounded), 2 heads, no conv, chunk 64",
                 "{\"kind\": \"mlstm\", \"heads\": 2, \"conv\": 0}", 64, 2, 0, 1.5f);
}

// ----------------------------------------------------------------------------
// initialisation and shapes

static double std_of_(const Layer *L, const char *suffix) {
    int k = param_index_(L, suffix);
    const ParamTensor *t = &L->pt.t[k];
    double s = 0;
    for (size_t i = 0; i < t->numel; i++) s += (double)L->params[t->offset + i] * L->params[t->offset + i];
    return sqrt(s / t->numel);
}

static void test_init(void) {
    Layer L;
    if (layer_build_(&L, "{\"kind\": \"mlstm\"}", 16, 5)) return;  // n_layers 2 (mixer_layer.h)
    const float *fb = P_(&L, "fgate_b");
    CHECK(fb[0] == 3.0f && fb[1] == 4.0f && fb[2] == 5.0f && fb[3] == 6.0f,
          "init: fgate_b = linspace(3, 6, 4) (%g %g %g %g)", fb[0], fb[1], fb[2], fb[3]);
    int zero = 1;
    const char *zeros[2] = {"igate_w", "fgate_w"};
    for (int z = 0; z < 2; z++) {
        const ParamTensor *t = &L.pt.t[param_index_(&L, zeros[z])];
        for (size_t i = 0; i < t->numel; i++) zero &= L.params[t->offset + i] == 0.0f;
    }
    CHECK(zero, "init: igate_w and fgate_w are zero");
    const ParamTensor *up = &L.pt.t[param_index_(&L, "proj_up")], *qp = &L.pt.t[param_index_(&L, "q_proj")];
    CHECK(up->shape[0] == 128 && up->shape[1] == 16 && qp->ndim == 3 && qp->shape[0] == 16 && qp->shape[1] == 4 &&
              qp->shape[2] == 4,
          "shapes: d_model 16 x proj_factor 2 = 32 rounds up to inner 64 (round_to 64): proj_up (128, 16), q_proj "
          "(16, 4, 4)");
    double small = sqrt(2.0 / (5.0 * 16)), wang = 2.0 / 2 / sqrt(16.0);
    CHECK(fabs(std_of_(&L, "proj_up") / small - 1) < 0.1 && fabs(std_of_(&L, "q_proj") / small - 1) < 0.25 &&
              fabs(std_of_(&L, "proj_down") / wang - 1) < 0.1,
          "init: proj_up, q_proj std %.4f, %.4f ~ small_init sqrt(2/(5d)) %.4f; proj_down %.4f ~ wang "
          "2/(L sqrt d) %.4f",
          std_of_(&L, "proj_up"), std_of_(&L, "q_proj"), small, std_of_(&L, "proj_down"), wang);
    double ib = std_of_(&L, "igate_b");
    CHECK(ib > 0.01 && ib < 0.3, "init: igate_b ~ N(0, 0.1^2) (rms %.3f)", ib);
    CHECK(std_of_(&L, "outnorm") == 1.0 && std_of_(&L, "skip") == 1.0, "init: outnorm and skip weights are 1");
    int decay_ok = 1;
    const char *nodecay[5] = {"conv_b", "igate_b", "fgate_b", "outnorm", "skip"};
    for (int i = 0; i < 5; i++) decay_ok &= L.pt.t[param_index_(&L, nodecay[i])].decay == 0;
    const char *decay[6] = {"proj_up", "conv_w", "q_proj", "igate_w", "fgate_w", "proj_down"};
    for (int i = 0; i < 6; i++) decay_ok &= L.pt.t[param_index_(&L, decay[i])].decay == 1;
    CHECK(decay_ok, "decay flags: gate biases, conv bias, outnorm, skip 0; projections and gate weights 1");
    // state: per head D (D + 1) + 1 (C~, n~, m) and the conv's last K-1 inputs per channel
    size_t ss = L.spec.ops->state_size(&L.spec, 0);
    CHECK(ss == 4 * (16 * 17 + 1) + 64 * 3, "state_size = H (D (D+1) + 1) + I (K-1) = %zu", ss);
    CHECK(L.spec.ops->owns_mlp == 1, "mlstm owns its MLP (a fused block)");
    cJSON *obj = cJSON_CreateObject();
    L.spec.ops->diag(&L.m, obj);
    const cJSON *fs = cJSON_GetObjectItemCaseSensitive(obj, "fgate_bias_sigmoid");
    CHECK(cJSON_GetArraySize(fs) == 4 && fabs(cJSON_GetArrayItem(fs, 0)->valuedouble - 1.0 / (1.0 + exp(-3.0))) < 1e-6,
          "diag: fgate_bias_sigmoid per head (sigmoid(3) first)");
    cJSON_Delete(obj);
    layer_free_(&L);
}

// ----------------------------------------------------------------------------
// gradient checks

// (1) the mixer_layer.h pattern in float32: dx and every tensor against central differences of the layer itself
static void check_grads_(const char *what, const char *json) {
    Layer L;
    if (layer_build_(&L, json, 16, 77)) return;
    layer_shape_(&L, 2, 13);
    GcRng r = {404};
    perturb_(&L, &r, 0.1f, 0.05f, 1.5f);
    layer_gradcheck_carried(&L, what, &r, ML_GC_H, 1e-2);
    layer_free_(&L);
}

// (2) the backward against central differences of the parallel form in double (naive_layer_): the loss has no
// float rounding, and the analytic side is taken along the perturbation float storage actually makes
// (fl(p + h d) - fl(p - h d)), so the tolerance can be 20x tighter than (1)'s. Directions: n_dirs random unit
// ones over the whole buffer and the first n_elems coordinates; returns the worst error / tolerance.
typedef struct NaiveCtx {
    Layer *L;
    float *x, *dy;
    double *y;
    int I, H, K, bs;
} NaiveCtx;

static double naive_loss_(void *p) {
    NaiveCtx *c = p;
    int a = 0, b = 0;
    naive_layer_(c->L, c->I, c->H, c->K, c->bs, 1e-5, c->x, c->y, &a, &b);
    double s = 0;
    for (size_t i = 0; i < (size_t)c->L->B * c->L->T * c->L->C; i++) s += c->dy[i] * c->y[i];
    return s;
}

static double exact_fd_(float *p, const float *g, size_t n, NaiveCtx *ctx, int n_dirs, int n_elems, uint64_t seed,
                        char *where, size_t wn) {
    GcRng r = {seed};
    float *saved = malloc(n * sizeof(float)), *pp = malloc(n * sizeof(float)), *pm = malloc(n * sizeof(float));
    double *dir = malloc(n * sizeof(double)), worst = 0, h = ML_GC_H_DOUBLE;
    memcpy(saved, p, n * sizeof(float));
    int total = n_dirs + (n_elems < (int)n ? n_elems : (int)n);
    for (int k = 0; k < total; k++) {
        double norm = 0, an = 0;
        for (size_t i = 0; i < n; i++) {
            dir[i] = k < n_dirs ? gc_normal(&r) : (double)(i == (size_t)(k - n_dirs));
            norm += dir[i] * dir[i];
        }
        norm = sqrt(norm);
        for (size_t i = 0; i < n; i++) {
            pp[i] = (float)(saved[i] + h * dir[i] / norm);
            pm[i] = (float)(saved[i] - h * dir[i] / norm);
            an += (double)g[i] * ((double)pp[i] - pm[i]);
        }
        memcpy(p, pp, n * sizeof(float));
        double lp = naive_loss_(ctx);
        memcpy(p, pm, n * sizeof(float));
        double lm = naive_loss_(ctx);
        memcpy(p, saved, n * sizeof(float));
        double num = (lp - lm) / (2 * h), a = an / (2 * h);
        double e = fabs(num - a) / (ML_GC_ATOL_DOUBLE + ML_GC_RTOL_DOUBLE * fmax(fabs(num), fabs(a)));
        if (e > worst) {
            worst = e;
            snprintf(where, wn, "%s %d: numeric %.7g analytic %.7g", k < n_dirs ? "direction" : "element",
                     k < n_dirs ? k : k - n_dirs, num, a);
        }
    }
    free(saved); free(pp); free(pm); free(dir);
    return worst;
}

static void check_grads_double_(const char *what, const char *json, int I, int H, int K, int bs) {
    Layer L;
    if (layer_build_(&L, json, 16, 77)) return;
    layer_shape_(&L, 2, 13);
    GcRng r = {405};
    perturb_checks_(&L, &r);
    size_t n = (size_t)L.B * L.T * L.C;
    NaiveCtx c = {&L, gc_randn(&r, n, 1.0f), gc_randn(&r, n, 1.0f), malloc(n * sizeof(double)), I, H, K, bs};
    float *y = malloc(n * sizeof(float)), *dx = calloc(n, sizeof(float));
    L.spec.ops->forward(&L.m, y, c.x, L.B, L.T);
    L.spec.ops->backward(&L.m, dx, c.dy, c.x, L.B, L.T);
    int nq = 0, nf = 0;
    naive_layer_(&L, I, H, K, bs, 1e-5, c.x, c.y, &nq, &nf);
    CHECK(nq > 0 && nf > 0, "%s: both branches of the normaliser occur (|q.n| %d rows, exp(-m) %d)", what, nq, nf);
    char where[160];
    double w = exact_fd_(c.x, dx, n, &c, 3, 6, 1, where, sizeof where);
    CHECK(w <= 1.0, "%s: dx == central differences of the parallel form in double (worst %.2f of tolerance; %s)",
          what, w, where);
    for (int k = 0; k < L.pt.n; k++) {
        const ParamTensor *t = &L.pt.t[k];
        double gm = 0;
        for (size_t i = 0; i < t->numel; i++) gm = fmax(gm, fabs(L.grads[t->offset + i]));
        w = exact_fd_(L.params + t->offset, L.grads + t->offset, t->numel, &c, 3, 6, (uint64_t)k + 2, where,
                      sizeof where);
        CHECK(w <= 1.0 && gm > 1e-2,
              "%s: %s == central differences in double (max|g| %.3g; worst %.2f of tolerance; %s)",
              what, t->name, gm, w, where);
    }
    free(c.x); free(c.dy); free(c.y); free(y); free(dx);
    layer_free_(&L);
}

static void test_gradients(void) {
    check_grads_("mlstm inner 32, 4 heads, conv 4, chunk 5 (T 13)",
                 "{\"kind\": \"mlstm\", \"round_to\": 1, \"chunk\": 5}");
    check_grads_("mlstm inner 32, no conv, chunk 64", "{\"kind\": \"mlstm\", \"round_to\": 1, \"conv\": 0}");
    check_grads_double_("mlstm inner 32, 4 heads, conv 4, chunk 5 (T 13)",
                        "{\"kind\": \"mlstm\", \"round_to\": 1, \"chunk\": 5}", 32, 4, 4, 4);
    check_grads_double_("mlstm inner 32, 2 heads, conv 2, blocks of 8, chunk 4",
                        "{\"kind\": \"mlstm\", \"round_to\": 1, \"heads\": 2, \"conv\": 2, \"qkv_blocksize\": 8, "
                        "\"chunk\": 4}", 32, 2, 2, 8);
    check_grads_double_("mlstm inner 64 (rounded), no conv, chunk 64", "{\"kind\": \"mlstm\", \"conv\": 0}", 64, 4,
                        0, 4);
}

// ----------------------------------------------------------------------------
// the chunk size changes memory and speed, not results

static void test_chunk_invariance(void) {
    const int chunks[3] = {1, 3, 64};
    ChunkDiff d;
    int rc = layer_chunk_diff(&d, "{\"kind\": \"mlstm\", \"round_to\": 1}", chunks, 3, 16, 2, 37, perturb_checks_);
    CHECK(rc == 0 && d.y <= 1e-5 * d.y_scale && d.g <= 1e-5 * d.g_scale,
          "mlstm chunk 1, 3 and 64 (T 37): outputs agree to %.2g of max|y| %.2g, gradients to %.2g of max|g| %.2g", d.y,
          d.y_scale, d.g, d.g_scale);
}

// ----------------------------------------------------------------------------
// recurrent decoding

static void check_step_(const char *what, const char *json) {
    double scale, worst = layer_decode_error(json, perturb_checks_, &scale);
    CHECK(worst <= 1e-5 * scale && scale > 1e-2,
          "%s: token-by-token decoding = full forward (max|d| %.2g of max|y| %.2g)", what, worst, scale);
}

static void test_step(void) {
    check_step_("mlstm conv 4, chunk 7", "{\"kind\": \"mlstm\", \"round_to\": 1, \"chunk\": 7}");
    check_step_("mlstm no conv, 2 heads, inner 64", "{\"kind\": \"mlstm\", \"conv\": 0, \"heads\": 2}");
}

// ----------------------------------------------------------------------------
// long sequences with strong gates

static void test_long(void) {
    int C = 16, B = 1, T = 2048;
    Layer L;
    if (layer_build_(&L, "{\"kind\": \"mlstm\", \"round_to\": 1}", C, 3)) return;
    layer_shape_(&L, B, T);
    GcRng r = {4};
    // input-gate biases of +-30..60: exp(i) far beyond float without the stabiliser
    perturb_(&L, &r, 0.3f, 0.3f, 30.0f);
    CHECK(layer_grads_finite(&L, &r), "mlstm T = %d, input-gate biases ~ N(0, 30^2): outputs and gradients finite", T);
    layer_free_(&L);
}

// ----------------------------------------------------------------------------
// options that make no sense together

static void test_bad_options(void) {
    layer_check_error("{\"kind\": \"mlstm\", \"round_to\": 1, \"heads\": 3}", 16,
                      "model.mixer.heads: 3 does not divide the inner width 32");
    layer_check_error("{\"kind\": \"mlstm\", \"round_to\": 1, \"qkv_blocksize\": 5}", 16,
                      "model.mixer.qkv_blocksize: 5 does not divide the inner width 32");
    layer_check_error("{\"kind\": \"mlstm\", \"chunk\": 0}", 16, "model.mixer.chunk");
    layer_check_error("{\"kind\": \"mlstm\", \"conv\": -1}", 16, "model.mixer.conv");
    layer_check_error("{\"kind\": \"mlstm\", \"feature_map\": \"elu\"}", 16, "model.mixer.feature_map");
}

int main(void) {
    test_blockdiag();
    test_vs_parallel_form();
    test_init();
    test_gradients();
    test_chunk_invariance();
    test_step();
    test_long();
    test_bad_options();
    return test_summary();
}
