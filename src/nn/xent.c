/*
 * Softmax cross-entropy with ignore index (see xent.h).
 *
 * Numerics: each row subtracts its maximum before exponentiating (so no logit can overflow exp,
 * however large), sums the exponentials in double (16 lanes in a fixed order, see row_sumexp_), and
 * caches max and logsum = log(sum) separately (see xent.h). The loss, max + logsum - logit[target], is
 * formed in double before rounding to float, so logits around +-1e4 still give the right loss. Rows
 * are independent, so the row loops run in parallel; the mean is summed serially in row order so it
 * does not depend on the thread count. exp is fast_expf_ (nn/fastmath.h): vectorised, <= 2 ulp, and
 * its arguments here are all <= 0 up to rounding, where it is exact in range and 0 below -87.3.
 */
#include "nn/xent.h"

#include <math.h>
#include <stddef.h>

#include "nn/fastmath.h"

#define XENT_LANES_ 16  // one AVX-512 vector of floats; the fixed lane split of the row sums

// max of row (V,), V >= 1: 16 running maxima (lane u sees i = u, u+16, ...), folded at the end. max is
// exact and order-independent (up to the sign of tied zeros), so this is only a form gcc vectorises:
// "a > b ? a : b" is exactly x86 maxps, but one serial running max is a chain it will not reorder.
static float row_max_(const float *row, int V) {
    float m[XENT_LANES_];
    for (int u = 0; u < XENT_LANES_; u++) m[u] = row[0];
    int i = 0;
    for (; i + XENT_LANES_ <= V; i += XENT_LANES_) {
        // kept a loop (not unrolled into 16 scalar chains) so that it becomes one vector operation
#pragma GCC unroll 1
        for (int u = 0; u < XENT_LANES_; u++) m[u] = row[i + u] > m[u] ? row[i + u] : m[u];
    }
    for (int u = 0; i + u < V; u++) m[u] = row[i + u] > m[u] ? row[i + u] : m[u];
    float maxval = m[0];
    for (int u = 1; u < XENT_LANES_; u++) maxval = m[u] > maxval ? m[u] : maxval;
    return maxval;
}

// sum(exp(row - maxval)) over row (V,), in double: 16 double partial sums (lane u takes i = u, u+16,
// ...; the tail goes to lanes 0..V%16-1), added in a fixed tree. The order depends only on V, so the
// result is the same for any thread count; double lanes keep the sum exact to ~1e-16 relative, as the
// serial double sum did.
static double row_sumexp_(const float *row, float maxval, int V) {
    double acc[XENT_LANES_] = {0};
    int i = 0;
    for (; i + XENT_LANES_ <= V; i += XENT_LANES_) {
        // two loops, each kept a loop (not unrolled into 16 scalar chains), each one vector operation
        float e[XENT_LANES_];
#pragma GCC unroll 1
        for (int u = 0; u < XENT_LANES_; u++) e[u] = fast_expf_(row[i + u] - maxval);
#pragma GCC unroll 1
        for (int u = 0; u < XENT_LANES_; u++) acc[u] += (double)e[u];
    }
    for (int u = 0; i + u < V; u++) acc[u] += (double)fast_expf_(row[i + u] - maxval);
    for (int w = XENT_LANES_ / 2; w >= 1; w /= 2) {
        for (int u = 0; u < w; u++) acc[u] += acc[u + w];
    }
    return acc[0];
}

static inline int target_valid_(int t, int V) { return t >= 0 && t < V; }

int crossentropy_check_targets(const int *targets, int N, int V) {
    // targets is (N,)
    for (int n = 0; n < N; n++) {
        if (targets[n] != XENT_IGNORE_INDEX && !target_valid_(targets[n], V)) return n;
    }
    return -1;
}

// the forward of row n: losses[n], stats[2n..2n+1]; target t valid or XENT_IGNORE_INDEX
static void row_forward_(float *losses, float *stats, const float *logits_n, int t, int n, int V) {
    if (t == XENT_IGNORE_INDEX) {
        losses[n] = 0.0f;
        stats[2 * n] = 0.0f;
        stats[2 * n + 1] = 0.0f;
        return;
    }
    // starts from the first logit, not from a made-up "very negative" constant
    float maxval = row_max_(logits_n, V);
    double sum = row_sumexp_(logits_n, maxval, V);
    double logsum = log(sum);  // sum >= 1 (the max contributes exp(0)), so logsum >= 0 is finite
    stats[2 * n] = maxval;
    stats[2 * n + 1] = (float)logsum;
    losses[n] = (float)(((double)maxval - (double)logits_n[t]) + logsum);
}

// row (V,): logits on entry, (softmax - onehot(t)) * scale on return; 0 for an ignored row or scale 0
static void row_backward_inplace_(float *row, const float *stats_n, int t, float scale, int V) {
    if (!target_valid_(t, V) || scale == 0.0f) {
        for (int i = 0; i < V; i++) row[i] = 0.0f;
        return;
    }
    float maxval = stats_n[0], logsum = stats_n[1];
    // the same gradient as crossentropy_backward; each element is read once, then replaced
    for (int i = 0; i < V; i++) {
        float p = fast_expf_((row[i] - maxval) - logsum);
        row[i] = (p - (i == t ? 1.0f : 0.0f)) * scale;
    }
}

// the mean over the supervised rows, summed in row order (thread-count independent); returns their count
static int mean_loss_(double *mean_loss, const float *losses, const int *targets, int N) {
    int count = 0;
    double total = 0.0;
    for (int n = 0; n < N; n++) {
        if (targets[n] == XENT_IGNORE_INDEX) continue;
        count++;
        total += losses[n];
    }
    *mean_loss = count > 0 ? total / count : 0.0;
    return count;
}

int crossentropy_forward(float *losses, float *stats, double *mean_loss,
                         const float *logits, const int *targets,
                         int N, int V) {
    // losses is (N,): per-row loss, 0 where ignored
    // stats is (N,2): per row the max logit and log(sum(exp(logit - max))), cached for the backward
    // mean_loss: the mean loss over supervised rows
    // logits is (N,V), targets is (N,) with values in [0,V) or XENT_IGNORE_INDEX
    if (crossentropy_check_targets(targets, N, V) >= 0) {
        *mean_loss = NAN;
        return -1;
    }
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) row_forward_(losses, stats, logits + (size_t)n * V, targets[n], n, V);
    return mean_loss_(mean_loss, losses, targets, N);
}

int crossentropy_forward_backward(float *losses, float *stats, double *mean_loss, float *logits,
                                  const int *targets, int n_norm, int N, int V) {
    // as crossentropy_forward, then crossentropy_backward_inplace on logits (N,V), row by row: a row
    // (V floats, e.g. 32 KiB) is still in L1/L2 for its backward, so the (N,V) buffer is read from memory
    // once instead of twice
    if (crossentropy_check_targets(targets, N, V) >= 0) {
        *mean_loss = NAN;
        return -1;
    }
    float scale = n_norm > 0 ? 1.0f / (float)n_norm : 0.0f;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *row = logits + (size_t)n * V;
        row_forward_(losses, stats, row, targets[n], n, V);
        row_backward_inplace_(row, stats + 2 * n, targets[n], scale, V);
    }
    return mean_loss_(mean_loss, losses, targets, N);
}

void crossentropy_backward(float *dlogits,
                           const float *logits, const float *stats, const int *targets,
                           int n_norm, int N, int V) {
    // dlogits is (N,V), accumulated into; must not alias logits (use the _inplace form for that)
    // logits is (N,V), stats is (N,2) as cached by the forward, targets is (N,)
    if (n_norm <= 0) return;
    float scale = 1.0f / (float)n_norm;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        int t = targets[n];
        if (!target_valid_(t, V)) continue;  // ignored (or invalid) rows add nothing
        const float *logits_n = logits + (size_t)n * V;
        float *dlogits_n = dlogits + (size_t)n * V;
        float maxval = stats[2 * n], logsum = stats[2 * n + 1];
        // in the forward pass this was:
        // losses[n] = (maxval - logits_n[t]) + logsum;   mean_loss = sum(losses) / n_norm
        // maxval + logsum is the log-sum-exp, whose derivative w.r.t. logit_i is softmax_i
        // (maxval itself cancels out), and d logits_n[t] / d logit_i = [i == t]
        for (int i = 0; i < V; i++) {
            float p = fast_expf_((logits_n[i] - maxval) - logsum);
            dlogits_n[i] += (p - (i == t ? 1.0f : 0.0f)) * scale;
        }
    }
}

void crossentropy_backward_inplace(float *logits,
                                   const float *stats, const int *targets,
                                   int n_norm, int N, int V) {
    // logits is (N,V): logits on entry, dlogits (overwritten, not accumulated) on return
    // stats is (N,2) as cached by the forward, targets is (N,)
    float scale = n_norm > 0 ? 1.0f / (float)n_norm : 0.0f;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) row_backward_inplace_(logits + (size_t)n * V, stats + 2 * n, targets[n], scale, V);
}
