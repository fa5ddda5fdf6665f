// Selective RoPE's angles and rotation; nn/selrope.h documents the maths.
#include "nn/selrope.h"

#include <math.h>
#include <stddef.h>

void selrope_angles(float *theta, float *last, const float *phi, const float *temp, const float *offset, int B, int T,
                    int H, int R) {
    int HR = H * R;
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int i = 0; i < HR; i++) {
            double acc = offset ? offset[(size_t)b * HR + i] : 0.0, tr = temp[i % R];
            for (int t = 0; t < T; t++) {
                size_t at = ((size_t)b * T + t) * HR + i;
                acc += phi[at];
                theta[at] = (float)(tr * acc);
            }
            if (last) last[(size_t)b * HR + i] = (float)acc;
        }
}

void selrope_angles_backward(float *dphi, const float *dtheta, const float *temp, int B, int T, int H, int R) {
    int HR = H * R;
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int i = 0; i < HR; i++) {
            double acc = 0.0, tr = temp[i % R];
            for (int t = T - 1; t >= 0; t--) {
                size_t at = ((size_t)b * T + t) * HR + i;
                acc += dtheta[at];
                dphi[at] = (float)(tr * acc);
            }
        }
}

void selrope_cossin(float *cs, float *sn, const float *theta, size_t n) {
#pragma omp parallel for if (n >= 4096)
    for (size_t i = 0; i < n; i++) {
        double th = theta[i];
        sn[i] = (float)sin(th);
        cs[i] = (float)cos(th);
    }
}

void selrope_rotate(float *out, const float *inp, const float *cs, const float *sn, int N, int H, int R) {
#pragma omp parallel for if ((long)N * H * R >= 4096)
    for (long nh = 0; nh < (long)N * H; nh++) {
        const float *x = inp + (size_t)nh * 2 * R, *c = cs + (size_t)nh * R, *s = sn + (size_t)nh * R;
        float *y = out + (size_t)nh * 2 * R;
        for (int r = 0; r < R; r++) {
            float x0 = x[r], x1 = x[r + R];
            y[r] = x0 * c[r] - x1 * s[r];
            y[r + R] = x0 * s[r] + x1 * c[r];
        }
    }
}

void selrope_rotate_backward(float *dinp, float *dtheta, const float *dout, const float *out, const float *cs,
                             const float *sn, int N, int H, int R) {
#pragma omp parallel for if ((long)N * H * R >= 4096)
    for (long nh = 0; nh < (long)N * H; nh++) {
        const float *dy = dout + (size_t)nh * 2 * R, *y = out + (size_t)nh * 2 * R;
        const float *c = cs + (size_t)nh * R, *s = sn + (size_t)nh * R;
        float *dx = dinp + (size_t)nh * 2 * R, *dt = dtheta + (size_t)nh * R;
        for (int r = 0; r < R; r++) {
            float d0 = dy[r], d1 = dy[r + R];
            dt[r] += d1 * y[r] - d0 * y[r + R];
            dx[r] = d0 * c[r] + d1 * s[r];
            dx[r + R] = d1 * c[r] - d0 * s[r];
        }
    }
}
