/*
 * AdamW's elementwise update (see adamw.h). Its own nn op so that it is compiled per kernel set (nn/isa.h):
 * the loop vectorises to the set's width, with sqrt and division as vector instructions.
 */
#include "nn/adamw.h"

#include <math.h>

void adamw_update(float *params, float *m, float *v, const float *grads, size_t n, float decay, float beta1,
                  float beta2, float step, float inv_sqrt_bc2, float eps) {
    // params, m, v, grads are (n,)
    float om1 = 1.0f - beta1, om2 = 1.0f - beta2;
#pragma omp for schedule(static) nowait
    for (size_t i = 0; i < n; i++) {
        float g = grads[i];
        float mi = beta1 * m[i] + om1 * g;
        float vi = beta2 * v[i] + om2 * g * g;
        m[i] = mi;
        v[i] = vi;
        float p = params[i] * decay;  // decoupled decay on the old value, before the Adam step
        params[i] = p - step * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    }
}
