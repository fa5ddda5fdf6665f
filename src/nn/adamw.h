/*
 * The AdamW update of one contiguous run of parameters (the elementwise half of optim/optim.c's step:
 * the optimizer computes the per-tensor scalars in double once, this loop only reads them).
 */
#ifndef SEQ_ADAMW_H
#define SEQ_ADAMW_H

#include <stddef.h>

// params, m, v (n,) updated in place from grads (n,):
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   params = params * decay - step * m / (sqrt(v) * inv_sqrt_bc2 + eps)
// decay = 1 - lr wd (decoupled, on the old value), step = lr / (1 - beta1^t), inv_sqrt_bc2 = 1 / sqrt(1 - beta2^t).
// A worksharing loop: called by every thread of a parallel region, it splits the n elements among them
// (static, no barrier at the end); called outside one, a single thread does all. Elementwise, so any split
// gives the same bits.
void adamw_update(float *params, float *m, float *v, const float *grads, size_t n, float decay, float beta1,
                  float beta2, float step, float inv_sqrt_bc2, float eps);

#endif
