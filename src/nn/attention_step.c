/*
 * One decoding step of causal softmax attention (attention_forward's formula for the newest query only),
 * over a key/value cache that the step extends. Kept apart from the tiled kernel (nn/attention.c): one query
 * row has no tiles to share, so this is a plain loop per (b, h): the logits of the cached keys, their softmax,
 * then the weighted sum of the values.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "nn/attention.h"
#include "nn/dot16.h"

void attention_step(float *out, const float *q, const float *k, const float *v, const float *g, float *kcache,
                    float *vcache, float *gcache, size_t stride, const AttnOpts *o, int t, int B, int NH, int HS,
                    int S) {
    // the oldest position a query at t sees: the window's, and no older than what S slots can hold
    int j0 = t - S + 1;
    if (o->window > 0 && t - o->window + 1 > j0) j0 = t - o->window + 1;
    if (j0 < 0) j0 = 0;
    int slot_t = t % S;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t x = ((size_t)b * NH + h) * HS;
            float *kc = kcache + b * stride + (size_t)h * S * HS, *vc = vcache + b * stride + (size_t)h * S * HS;
            float *gc = gcache ? gcache + b * stride + (size_t)h * S : NULL;
            memcpy(kc + (size_t)slot_t * HS, k + x, (size_t)HS * sizeof(float));
            memcpy(vc + (size_t)slot_t * HS, v + x, (size_t)HS * sizeof(float));
            float Ft = 0;
            if (gc) gc[slot_t] = Ft = g[(size_t)b * NH + h];
            float slope = o->slopes ? o->slopes[h] : 0.0f, decay = o->decay ? o->decay[h] : 0.0f;
            // logits, their max, then the weights: l sums exp(s - m) without the post-softmax decay (the
            // softmax's denominator, as the kernel's), w carries it
            int n = t - j0 + 1;
            float *w = xmalloc((size_t)n * sizeof(float)), m = -INFINITY, l = 0, *acc = out + x;
            for (int j = j0; j <= t; j++) {
                int sl = j % S;
                float s = o->scale * dot16(q + x, kc + (size_t)sl * HS, HS) - slope * (float)(t - j);
                if (gc) s += Ft - gc[sl];
                w[j - j0] = s;
                m = s > m ? s : m;
            }
            for (int j = 0; j < n; j++) {
                float p = expf(w[j] - m);
                l += p;
                w[j] = decay > 0 ? p * expf(-decay * (float)(t - j0 - j)) : p;
            }
            memset(acc, 0, (size_t)HS * sizeof(float));
            for (int j = j0; j <= t; j++) {
                const float *vj = vc + (size_t)(j % S) * HS;
                float wj = w[j - j0];
                for (int i = 0; i < HS; i++) acc[i] += wj * vj[i];
            }
            free(w);
            for (int i = 0; i < HS; i++) acc[i] /= l;
        }
}
