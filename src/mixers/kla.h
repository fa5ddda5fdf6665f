/*
 * The kla mixer's options (mixers/kla.c is the layer, nn/kalman.h the scan): shared by the host side and the GPU's
 * (gpu/kla.cu), which read the same struct the host's check resolved.
 */
#ifndef SEQ_MIXERS_KLA_H
#define SEQ_MIXERS_KLA_H

#include <math.h>

#include "core/config.h"
#include "mixers/gates.h"

#define KLA_DT_EPS 1e-7  // added to softplus(delta), as in the reference
#define KLA_NORM_EPS 1e-12f

typedef struct KlaOpts {
    // from the config
    int d_state, conv, var_rank, qk_norm, process_noise, gate, skip, chunk;
    double expand, init_std, obs_var_min, p_init, p_min, dt_min, dt_max, dt_floor, skip_init;
    char sensors[CFG_STR_MAX], discretization[CFG_STR_MAX];
    // derived by check
    int M, S, K, R, Ns;     // channels, state slots, conv taps, variance rank (mamba), sensor outputs
    int mamba, zoh;
    int k_in, k_cw, k_cb, k_sens, k_ve, k_veb, k_lam, k_p, k_dt, k_skip, k_out;  // tensor indices (-1 absent)
} KlaOpts;

// The discrete dynamics of one (channel, slot) and their gradient, shared by the host (mixers/kla.c) and the GPU
// (gpu/kla.cu) so that both form them the same way, in double: w = e^{lambda_log}, Delta = softplus(delta) + 1e-7,
// abar = e^{-w Delta}, pbar = p/(2w) (1 - e^{-2 w Delta}) (OU) or p Delta (ZOH), p = max(process_noise, p_min), or 0
// without process noise (has_p 0)
#ifdef __CUDACC__
#define KLA_FN_ static inline __host__ __device__
#else
#define KLA_FN_ static inline
#endif
KLA_FN_ void kla_dynamics_one(float *abar, float *pbar, float lam, float dt, float praw, int has_p, double p_min,
                              int zoh) {
    double w = exp((double)lam), D = mixer_softplus(dt) + KLA_DT_EPS;
    *abar = (float)exp(-w * D);
    if (!has_p) {
        *pbar = 0.0f;
        return;
    }
    double p = praw > p_min ? praw : p_min;
    *pbar = (float)(zoh ? p * D : p * -expm1(-2.0 * w * D) / (2.0 * w));
}
// its backward: glam, gdt, gp (gp unused without process noise) += the gradients of dabar, dpbar
KLA_FN_ void kla_dynamics_one_backward(float *glam, float *gdt, float *gp, double dabar, double dpbar, float lam,
                                       float dt, float praw, int has_p, double p_min, int zoh) {
    double w = exp((double)lam), D = mixer_softplus(dt) + KLA_DT_EPS, ab = exp(-w * D);
    double dD = dabar * (-w * ab), dw = dabar * (-D * ab);
    if (has_p) {
        int live = praw > p_min;
        double p = live ? praw : p_min, g = dpbar;
        if (zoh) {
            dD += g * p;
            if (live) *gp += (float)(g * D);
        } else {
            double x = 2.0 * w * D, ex = exp(-x), f = -expm1(-x);
            dD += g * p * ex;
            dw += g * p * (D * ex / w - f / (2.0 * w * w));
            if (live) *gp += (float)(g * f / (2.0 * w));
        }
    }
    *glam += (float)(dw * w);
    *gdt += (float)(dD * mixer_sigmoid(dt));
}
#undef KLA_FN_

#endif
