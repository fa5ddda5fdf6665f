/*
 * The short-convolution streams of mixers/shortconv.h: projection, causal depthwise conv, silu.
 */
#include "mixers/shortconv.h"

#include <string.h>

#include "mixers/mixer_kit.h"
#include "nn/activation.h"
#include "nn/conv.h"
#include "nn/matmul.h"

int shortconv_params(ParamTable *pt, const char *prefix, int HK, int HV, int K, float std, Err *e) {
    if (!K) return 0;
    MIXER_ADD("q_conv1d", 2, ((int[]){HK, K}), init_normal(std), 1);
    MIXER_ADD("k_conv1d", 2, ((int[]){HK, K}), init_normal(std), 1);
    MIXER_ADD("v_conv1d", 2, ((int[]){HV, K}), init_normal(std), 1);
    return 0;
}

void shortconv_state_terms(StateTerms *st, int H, int Dk, int Dv, int K) {
    if (!K) return;
    state_terms_add(st, 1, shortconv_state_size(H * Dk, H * Dv, K), "short conv q, k, v",
                    "(2·H·dk + H·dv)(k−1) = (2·%d·%d + %d·%d)·%d", H, Dk, H, Dv, K - 1);
}

void shortconv_forward(const Mixer *m, int kp, int kc, int K, int silu0, float *s, float *c, float *p,
                       const float *x, int B, int T, int W) {
    // s, c, p (B*T,W); x (B*T,C)
    int BT = B * T, C = m->spec->C;
    if (kc < 0 && !silu0) {
        matmul_forward(s, x, mixer_param(m, kp), NULL, BT, C, W);
        return;
    }
    if (kc >= 0) {
        matmul_forward(p, x, mixer_param(m, kp), NULL, BT, C, W);
        conv1d_causal_forward(c, p, mixer_param(m, kc), NULL, B, T, W, K);
    } else {
        matmul_forward(c, x, mixer_param(m, kp), NULL, BT, C, W);
    }
    silu_forward(s, c, (size_t)BT * W);
}

void shortconv_backward(Mixer *m, int kp, int kc, int K, int silu0, float *dx, float *dc, float *dp,
                        const float *ds, const float *c, const float *p, const float *x, int B, int T, int W) {
    // dx (B*T,C) +=; dc, dp (B*T,W) scratch; ds, c, p (B*T,W); x (B*T,C)
    int BT = B * T, C = m->spec->C;
    size_t n = (size_t)BT * W;
    if (kc < 0 && !silu0) {  // s = x W^T
        matmul_backward(dx, mixer_grad(m, kp), NULL, ds, x, mixer_param(m, kp), BT, C, W);
        return;
    }
    memset(dc, 0, n * sizeof(float));
    silu_backward(dc, c, ds, n);
    const float *dproj = dc;
    if (kc >= 0) {  // c = conv(p): the conv's input gradient is the projection's output gradient
        memset(dp, 0, n * sizeof(float));
        conv1d_causal_backward(dp, mixer_grad(m, kc), NULL, dc, p, mixer_param(m, kc), B, T, W, K);
        dproj = dp;
    }
    matmul_backward(dx, mixer_grad(m, kp), NULL, dproj, x, mixer_param(m, kp), BT, C, W);
}

void shortconv_step(const Mixer *m, int kp, int kc, int K, int silu0, float *s, float *state, size_t stride,
                    const float *x, int B, int W) {
    // s (B,W); state: sequence b's (W,K-1) at b * stride; x (B,C)
    matmul_forward(s, x, mixer_param(m, kp), NULL, B, m->spec->C, W);
    if (kc >= 0)
        for (int b = 0; b < B; b++)  // in place: conv1d_causal_step lets out alias x
            conv1d_causal_step(s + (size_t)b * W, state + (size_t)b * stride, s + (size_t)b * W, mixer_param(m, kc),
                               NULL, 1, W, K);
    if (kc >= 0 || silu0) silu_forward(s, s, (size_t)B * W);
}
