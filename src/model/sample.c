#include "model/sample.h"

#include <math.h>
#include <stdlib.h>

int sample_check(const SampleOpts *o, Err *e) {
    if (!(o->temperature >= 0) || !isfinite(o->temperature))
        return err_set(e, "--temperature: %g; allowed: 0 (greedy) or more", o->temperature);
    if (o->top_k < 0) return err_set(e, "--top-k: %d; allowed: 0 (all tokens) or more", o->top_k);
    if (!(o->top_p > 0 && o->top_p <= 1))
        return err_set(e, "--top-p: %g is outside (0, 1]; 1 keeps every token", o->top_p);
    return 0;
}

static int argmax_(const float *x, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static const float *cmp_logits_;  // qsort has no context argument; sample_token is not reentrant across threads

// larger logit first, lower id first among equal ones: a total order, so the result never depends on qsort
static int by_logit_(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    float li = cmp_logits_[i], lj = cmp_logits_[j];
    if (li != lj) return li > lj ? -1 : 1;
    return i < j ? -1 : (i > j);
}

int sample_token(const float *logits, int V, const SampleOpts *o, Rng *r) {
    if (o->temperature < SAMPLE_GREEDY_BELOW || o->top_k == 1) return argmax_(logits, V);
    int k = o->top_k > 0 && o->top_k < V ? o->top_k : V;
    int *idx = malloc((size_t)V * sizeof(int));
    double *p = malloc((size_t)k * sizeof(double));
    int n = 0;
    if (k < V) {
        // the k largest by insertion into a sorted list: most ids fail the comparison with the list's last
        for (int i = 0; i < V; i++) {
            if (n == k && !(logits[i] > logits[idx[k - 1]])) continue;
            int at = n < k ? n++ : k - 1;
            while (at > 0 && logits[i] > logits[idx[at - 1]]) {
                idx[at] = idx[at - 1];
                at--;
            }
            idx[at] = i;
        }
    } else {
        for (int i = 0; i < V; i++) idx[i] = i;
        cmp_logits_ = logits;
        qsort(idx, (size_t)V, sizeof(int), by_logit_);
        n = V;
    }
    // softmax of the kept logits / temperature (the largest first, so exp never overflows)
    double total = 0, inv_t = 1.0 / o->temperature, top = logits[idx[0]];
    for (int j = 0; j < n; j++) total += p[j] = exp(((double)logits[idx[j]] - top) * inv_t);
    int keep = n;
    if (o->top_p < 1) {
        double cum = 0;
        for (keep = 0; keep < n;) {
            cum += p[keep++];
            if (cum >= o->top_p * total) break;
        }
        total = cum;
    }
    double u = rng_uniform(r) * total, acc = 0;
    int tok = idx[keep - 1];  // rounding can leave u at the very top of the last interval
    for (int j = 0; j < keep; j++) {
        acc += p[j];
        if (u < acc) {
            tok = idx[j];
            break;
        }
    }
    free(idx);
    free(p);
    return tok;
}
