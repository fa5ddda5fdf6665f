/*
 * Softmax cross-entropy with ignore index (see xent.h).
 *
 * Numerics: each row subtracts its maximum before exponentiating (so no logit can overflow expf,
 * however large), sums the exponentials in double, and caches max and logsum = log(sum) separately (see xent.h). The
 * loss, max + logsum - logit[target], is formed in double before rounding to float, so logits around
 * +-1e4 still give the right loss. Rows are independent, so the row loops run in parallel; the mean is summed
 * serially in row order so it does not depend on the thread count.
 */
#include "nn/xent.h"

#include <math.h>
#include <stddef.h>

static inline int target_valid_(int t, int V) { return t >= 0 && t < V; }

int crossentropy_check_targets(const int *targets, int N, int V) {
    // targets is (N,)
    for (int n = 0; n < N; n++) {
        if (targets[n] != XENT_IGNORE_INDEX && !target_valid_(targets[n], V)) return n;
    }
    return -1;
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
    for (int n = 0; n < N; n++) {
        int t = targets[n];
        if (t == XENT_IGNORE_INDEX) {
            losses[n] = 0.0f;
            stats[2 * n] = 0.0f;
            stats[2 * n + 1] = 0.0f;
            continue;
        }
        const float *logits_n = logits + (size_t)n * V;
        // start from the first logit, not from a made-up "very negative" constant
        float maxval = logits_n[0];
        for (int i = 1; i < V; i++) maxval = logits_n[i] > maxval ? logits_n[i] : maxval;
        double sum = 0.0;
        for (int i = 0; i < V; i++) sum += expf(logits_n[i] - maxval);
        double logsum = log(sum);  // sum >= 1 (the max contributes exp(0)), so logsum >= 0 is finite
        stats[2 * n] = maxval;
        stats[2 * n + 1] = (float)logsum;
        losses[n] = (float)(((double)maxval - (double)logits_n[t]) + logsum);
    }
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
            float p = expf((logits_n[i] - maxval) - logsum);
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
    for (int n = 0; n < N; n++) {
        int t = targets[n];
        float *row = logits + (size_t)n * V;
        if (!target_valid_(t, V) || n_norm <= 0) {
            for (int i = 0; i < V; i++) row[i] = 0.0f;
            continue;
        }
        float maxval = stats[2 * n], logsum = stats[2 * n + 1];
        // the same gradient as crossentropy_backward; each element is read once, then replaced
        for (int i = 0; i < V; i++) {
            float p = expf((row[i] - maxval) - logsum);
            row[i] = (p - (i == t ? 1.0f : 0.0f)) * scale;
        }
    }
}
