/*
 * LayerNorm and RMSNorm, forward and backward (see norm.h for the conventions).
 *
 * Row statistics are summed in double: with C in the thousands and activations with a large common
 * offset, a float sum of squares loses digits; eight interleaved partial sums keep that vectorised.
 * Backward runs in two parallel passes so that every write is owned by one thread:
 *   1. over rows: dinp (each row only touches its own dinp row);
 *   2. over blocks of columns: dweight/dbias (each thread owns whole columns and sums them over the
 *      rows in row order, so the result is the same for any thread count).
 */
#include "nn/norm.h"

#include <math.h>
#include <stddef.h>

#include "nn/colblock.h"
#include "nn/fastmath.h"

// the other row sums run in FM_LANES_ interleaved double partial sums like sum_sq_dev_ (nn/fastmath.h)

static double row_sum_(const float *x, int C) {
    double s[FM_LANES_] = {0};
    int i = 0;
    for (; i + FM_LANES_ <= C; i += FM_LANES_) {
        for (int l = 0; l < FM_LANES_; l++) s[l] += x[i + l];
    }
    for (; i < C; i++) s[i % FM_LANES_] += x[i];
    return fm_lanes_total_(s);
}

// the backward's row sums: *sum_dn = sum_i dnorm_i, *sum_dnn = sum_i dnorm_i norm_i, with
// dnorm_i = weight[i] dout[i] and norm_i = (inp[i] - m) r (m = 0 for RMSNorm)
static void row_dnorm_sums_(double *sum_dn, double *sum_dnn, const float *dout, const float *inp,
                            const float *weight, float m, float r, int C) {
    double s1[FM_LANES_] = {0}, s2[FM_LANES_] = {0};
    int i = 0;
    for (; i + FM_LANES_ <= C; i += FM_LANES_) {
        for (int l = 0; l < FM_LANES_; l++) {
            float norm_i = (inp[i + l] - m) * r;
            float dnorm_i = weight[i + l] * dout[i + l];
            s1[l] += dnorm_i;
            s2[l] += (double)dnorm_i * norm_i;
        }
    }
    for (; i < C; i++) {
        float norm_i = (inp[i] - m) * r;
        float dnorm_i = weight[i] * dout[i];
        s1[i % FM_LANES_] += dnorm_i;
        s2[i % FM_LANES_] += (double)dnorm_i * norm_i;
    }
    *sum_dn = fm_lanes_total_(s1);
    *sum_dnn = fm_lanes_total_(s2);
}

// dweight (C,) += sum_n norm[n,i] * dout[n,i] and dbias (C,) += sum_n dout[n,i], where
// norm = (inp - mean) * rstd (mean NULL for RMSNorm). Threads own blocks of columns (nn/colblock.h) and sum
// rows in order in double, so the result does not depend on the thread count.
static void norm_param_backward_(float *dweight, float *dbias, const float *dout, const float *inp,
                                 const float *mean, const float *rstd, int N, int C) {
    int w = col_block_width_(C);
    int n_blocks = (C + w - 1) / w;
#pragma omp parallel for schedule(static)
    for (int cb = 0; cb < n_blocks; cb++) {
        int c0 = cb * w;
        int c1 = c0 + w < C ? c0 + w : C;
        double dw[COL_BLOCK_MAX_] = {0}, db[COL_BLOCK_MAX_] = {0};
        for (int n = 0; n < N; n++) {
            const float *dout_n = dout + (size_t)n * C;
            const float *inp_n = inp + (size_t)n * C;
            float m = mean ? mean[n] : 0.0f, r = rstd[n];
            for (int i = c0; i < c1; i++) {
                // in the forward pass this was:
                // out_n[i] = norm_i * weight[i] + bias[i];
                float norm_i = (inp_n[i] - m) * r;
                dw[i - c0] += (double)norm_i * dout_n[i];
                db[i - c0] += dout_n[i];
            }
        }
        for (int i = c0; i < c1; i++) {
            dweight[i] += (float)dw[i - c0];
            if (dbias != NULL) dbias[i] += (float)db[i - c0];
        }
    }
}

// ----------------------------------------------------------------------------
// LayerNorm

void layernorm_forward(float *out, float *mean, float *rstd,
                       const float *inp, const float *weight, const float *bias,
                       int N, int C) {
    // out is (N,C): the normalised, scaled and shifted rows
    // mean, rstd are (N,): per-row mean and 1/std, cached for the backward pass
    // inp is (N,C): the activations, one row per (b,t) position
    // weight, bias are (C,): bias may be NULL
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *inp_n = inp + (size_t)n * C;
        float *out_n = out + (size_t)n * C;
        double m = row_sum_(inp_n, C) / C;
        // two-pass variance: subtracting the mean first avoids cancellation of E[x^2] - E[x]^2
        double var = sum_sq_dev_(inp_n, (size_t)C, m) / C;  // biased (divide by C, not C-1), as in PyTorch
        float m_f = (float)m;
        float r_f = (float)(1.0 / sqrt(var + LAYERNORM_EPS));
        // normalise with the float values that are cached, so backward sees exactly this forward
        for (int i = 0; i < C; i++) {
            float norm_i = (inp_n[i] - m_f) * r_f;
            out_n[i] = norm_i * weight[i] + (bias != NULL ? bias[i] : 0.0f);
        }
        mean[n] = m_f;
        rstd[n] = r_f;
    }
}

void layernorm_backward(float *dinp, float *dweight, float *dbias,
                        const float *dout, const float *inp, const float *weight,
                        const float *mean, const float *rstd,
                        int N, int C) {
    // dinp is (N,C), dweight and dbias are (C,): accumulated into (+=); dbias may be NULL
    // dout is (N,C): gradient of the loss w.r.t. out
    // inp is (N,C), weight is (C,), mean and rstd are (N,): as in / as cached by the forward
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *dout_n = dout + (size_t)n * C;
        const float *inp_n = inp + (size_t)n * C;
        float *dinp_n = dinp + (size_t)n * C;
        float m = mean[n], r = rstd[n];
        // in the forward pass this was:
        // out_n[i] = norm_i * weight[i] + bias[i];   with norm_i = (inp_n[i] - mean) * rstd
        // so dnorm_i = weight[i] * dout_n[i]. norm depends on every input of the row through mean
        // and rstd, which gives the two row-mean terms below
        double dnorm_mean, dnorm_norm_mean;
        row_dnorm_sums_(&dnorm_mean, &dnorm_norm_mean, dout_n, inp_n, weight, m, r, C);
        float dnm = (float)(dnorm_mean / C);
        float dnnm = (float)(dnorm_norm_mean / C);
        for (int i = 0; i < C; i++) {
            float norm_i = (inp_n[i] - m) * r;
            float dnorm_i = weight[i] * dout_n[i];
            float dval = 0.0f;
            dval += dnorm_i;            // term 1: the direct path
            dval -= dnm;                // term 2: through the mean
            dval -= norm_i * dnnm;      // term 3: through rstd
            dval *= r;                  // final scale
            dinp_n[i] += dval;
        }
    }

    norm_param_backward_(dweight, dbias, dout, inp, mean, rstd, N, C);
}

// ----------------------------------------------------------------------------
// RMSNorm

void rmsnorm_forward(float *out, float *rstd,
                     const float *inp, const float *weight,
                     int N, int C) {
    // out is (N,C): the normalised and scaled rows
    // rstd is (N,): per-row 1/rms, cached for the backward pass
    // inp is (N,C), weight is (C,)
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *inp_n = inp + (size_t)n * C;
        float *out_n = out + (size_t)n * C;
        double ss = sum_sq_dev_(inp_n, (size_t)C, 0.0);
        float r_f = (float)(1.0 / sqrt(ss / C + RMSNORM_EPS));
        for (int i = 0; i < C; i++) out_n[i] = (inp_n[i] * r_f) * weight[i];
        rstd[n] = r_f;
    }
}

void rmsnorm_backward(float *dinp, float *dweight,
                      const float *dout, const float *inp, const float *weight, const float *rstd,
                      int N, int C) {
    // dinp is (N,C), dweight is (C,): accumulated into (+=)
    // dout is (N,C): gradient of the loss w.r.t. out
    // inp is (N,C), weight is (C,), rstd is (N,): as in / as cached by the forward
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *dout_n = dout + (size_t)n * C;
        const float *inp_n = inp + (size_t)n * C;
        float *dinp_n = dinp + (size_t)n * C;
        float r = rstd[n];
        // in the forward pass this was:
        // out_n[i] = (inp_n[i] * rstd) * weight[i];   with rstd = 1/sqrt(mean(inp_n^2) + eps)
        // d rstd / d inp_j = -rstd^3 * inp_j / C = -rstd * norm_j / C, so besides the direct path
        // every input gets -norm_i * mean(dnorm * norm), all times rstd
        double dnorm_sum_unused, dnorm_norm_mean;
        row_dnorm_sums_(&dnorm_sum_unused, &dnorm_norm_mean, dout_n, inp_n, weight, 0.0f, r, C);
        float dnnm = (float)(dnorm_norm_mean / C);
        for (int i = 0; i < C; i++) {
            float norm_i = inp_n[i] * r;
            float dnorm_i = weight[i] * dout_n[i];
            float dval = 0.0f;
            dval += dnorm_i;            // term 1: the direct path
            dval -= norm_i * dnnm;      // term 2: through rstd
            dval *= r;                  // final scale
            dinp_n[i] += dval;
        }
    }

    norm_param_backward_(dweight, NULL, dout, inp, NULL, rstd, N, C);
}

void l2norm_forward(float *out, float *nrm, const float *inp, int N, int C, float eps, int mode) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        double ss = 0.0;
        for (int i = 0; i < C; i++) ss += (double)x[i] * x[i];
        float r = mode == L2NORM_ADD ? (float)sqrt(ss + eps) : (float)sqrt(ss);
        if (mode == L2NORM_FLOOR && !(r > eps)) r = eps;
        nrm[n] = r;
        float inv = 1.0f / r, *y = out + (size_t)n * C;
        for (int i = 0; i < C; i++) y[i] = x[i] * inv;
    }
}

void l2norm_backward(float *dinp, const float *dout, const float *out, const float *nrm, int N, int C, float eps,
                     int mode) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *dy = dout + (size_t)n * C, *y = out + (size_t)n * C;
        float *dx = dinp + (size_t)n * C, r = nrm[n];
        if (mode == L2NORM_FLOOR && r <= eps) {  // held at the floor: out = inp / eps, linear
            for (int i = 0; i < C; i++) dx[i] += dy[i] / eps;
            continue;
        }
        float dot = 0.0f;
        for (int i = 0; i < C; i++) dot += y[i] * dy[i];
        for (int i = 0; i < C; i++) dx[i] += (dy[i] - y[i] * dot) / r;
    }
}
