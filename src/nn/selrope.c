// Selective RoPE's angle chain and rotation; nn/selrope.h documents the maths.
//
// The angle chain runs per (sequence, block of SR_BLK_ channels) over the tokens in order (forward) or in reverse
// (backward): each token's step is a few loops over the block's channels, which vectorise (nn/fastmath.h's
// sincos and sigmoid are branch-free), with the carried values (conv window, previous a, angle sum in double,
// reverse sum) in small arrays that stay in registers or L1. A block's rows are read and written with the
// stride H R, one cache line per token per array.
#include "nn/selrope.h"

#include <math.h>
#include <stddef.h>

#include "nn/fastmath.h"

#define SR_BLK_ 64         // channels per work item
#define SR_K_ 4            // the conv taps the code is specialised for (mixers/selrope.h's SELROPE_CONV_K)
#define SR_PAR_MIN_ 4096   // below this many (token, channel) pairs the passes run serially (decoding steps)

size_t selrope_chain_state_size(const SelRopeChain *o) {
    size_t HR = (size_t)o->H * o->R;
    return HR * (1 + (o->K > 0 ? (size_t)o->K - 1 : 0) + (o->skip ? 1 : 0));
}

size_t selrope_angles_work_size(const SelRopeChain *o, int B) { return (size_t)B * o->H * o->R * (o->K + 1); }

// v <- v - carry, carry <- the old v (the skip's difference with the previous token, and its adjoint with the next)
static inline __attribute__((always_inline)) void diff_carry_(float *restrict v, float *restrict carry, const int nc) {
#pragma GCC unroll 1
    for (int cc = 0; cc < nc; cc++) {
        float a = v[cc];
        v[cc] = a - carry[cc];
        carry[cc] = a;
    }
}

// one work item of selrope_angles: sequence b, channels c0 .. c0 + nc - 1, K = o->K taps. Inlined with constants
// for the common case (nc = SR_BLK_, a full block, and K = SR_K_), where every channel loop is whole vectors and the
// tap loops unroll with the window in registers, and once with the general values. The channel loops are kept loops
// (not unrolled into 16 scalar chains) so that each becomes vector operations.
static inline __attribute__((always_inline)) void angles_block_(float *restrict cs, float *restrict sn,
                                                                float *restrict csave, float *restrict fsave,
                                                                float *restrict st, const float *p, const float *gate,
                                                                const SelRopeChain *o, int b, int T, int c0,
                                                                const int nc, const int K) {
    const int H = o->H, R = o->R, HR = H * R;
    const size_t win_at = (size_t)HR, prev_at = (size_t)HR * (K > 0 ? K : 1);  // within a sequence's state
    // w[j]: tap j; win[j]: the input K-1-j tokens back (win[K-1] the current one once read)
    float w[SELROPE_K_MAX][SR_BLK_], win[SELROPE_K_MAX][SR_BLK_], prev[SR_BLK_], eb[SR_BLK_], tr[SR_BLK_];
    double acc[SR_BLK_];
    int hd[SR_BLK_];
    for (int cc = 0; cc < nc; cc++) {
        int i = c0 + cc;
        tr[cc] = o->temp[i % R];
        hd[cc] = i / R;
        eb[cc] = o->ebias ? o->ebias[i] : 0.0f;
        acc[cc] = st ? st[i] : 0.0;
        prev[cc] = st && o->skip ? st[prev_at + i] : 0.0f;
        for (int j = 0; j < K; j++) {
            w[j][cc] = o->conv[(size_t)i * K + j];
            win[j][cc] = st && j < K - 1 ? st[win_at + (size_t)i * (K - 1) + j] : 0.0f;
        }
    }
    for (int t = 0; t < T; t++) {
        const size_t row = ((size_t)b * T + t) * HR + c0;
        const float *pt = p + row;
        float f[SR_BLK_], th[SR_BLK_];
        if (K > 0) {
            // the sum as conv1d_causal_forward's: from 0, taps in order
#pragma GCC unroll 1
            for (int cc = 0; cc < nc; cc++) win[K - 1][cc] = pt[cc];
#pragma GCC unroll 1
            for (int cc = 0; cc < nc; cc++) f[cc] = 0.0f;
            for (int j = 0; j < K; j++) {
#pragma GCC unroll 1
                for (int cc = 0; cc < nc; cc++) f[cc] += w[j][cc] * win[j][cc];
            }
            for (int j = 0; j + 1 < K; j++) {
#pragma GCC unroll 1
                for (int cc = 0; cc < nc; cc++) win[j][cc] = win[j + 1][cc];
            }
            if (csave) {
#pragma GCC unroll 1
                for (int cc = 0; cc < nc; cc++) csave[row + cc] = f[cc];
            }
            if (o->silu) {
#pragma GCC unroll 1
                for (int cc = 0; cc < nc; cc++) f[cc] *= fast_sigmoidf_(f[cc]);
            }
        } else {
#pragma GCC unroll 1
            for (int cc = 0; cc < nc; cc++) f[cc] = pt[cc];
        }
        if (o->skip) diff_carry_(f, prev, nc);
        if (o->ebias) {
#pragma GCC unroll 1
            for (int cc = 0; cc < nc; cc++) f[cc] += eb[cc];
        }
        if (gate) {
            const float *g = gate + ((size_t)b * T + t) * H;
            if (fsave) {
#pragma GCC unroll 1
                for (int cc = 0; cc < nc; cc++) fsave[row + cc] = f[cc];
            }
#pragma GCC unroll 1
            for (int cc = 0; cc < nc; cc++) f[cc] *= g[hd[cc]];
        }
#pragma GCC unroll 1
        for (int cc = 0; cc < nc; cc++) {
            acc[cc] += f[cc];
            th[cc] = (float)(tr[cc] * acc[cc]);
        }
#pragma GCC unroll 1
        for (int cc = 0; cc < nc; cc++) fast_sincos_(th[cc], &sn[row + cc], &cs[row + cc]);
    }
    if (st)
        for (int cc = 0; cc < nc; cc++) {
            int i = c0 + cc;
            st[i] = (float)acc[cc];
            for (int j = 0; j + 1 < K; j++) st[win_at + (size_t)i * (K - 1) + j] = win[j][cc];
            if (o->skip) st[prev_at + i] = prev[cc];
        }
}

void selrope_angles(float *cs, float *sn, float *csave, float *fsave, float *state, size_t stride, const float *p,
                    const float *gate, const SelRopeChain *o, int B, int T) {
    const int HR = o->H * o->R, nblk = (HR + SR_BLK_ - 1) / SR_BLK_;
#pragma omp parallel for collapse(2) schedule(static) if ((long)B * T * HR >= SR_PAR_MIN_)
    for (int b = 0; b < B; b++)
        for (int blk = 0; blk < nblk; blk++) {
            const int c0 = blk * SR_BLK_;
            float *st = state ? state + (size_t)b * stride : NULL;
            if (HR - c0 >= SR_BLK_ && o->K == SR_K_)
                angles_block_(cs, sn, csave, fsave, st, p, gate, o, b, T, c0, SR_BLK_, SR_K_);
            else
                angles_block_(cs, sn, csave, fsave, st, p, gate, o, b, T, c0, HR - c0 < SR_BLK_ ? HR - c0 : SR_BLK_, o->K);
        }
}

// one work item of selrope_angles_backward: sequence b, channels c0 .. c0 + nc - 1, in reverse token order; its conv
// weight and bias gradients go to work (b, H R, K + 1). Inlined as angles_block_ is.
static inline __attribute__((always_inline)) void angles_backward_block_(
    float *dp, float *restrict dgate, float *restrict work, const float *dtheta, const float *p, const float *csave,
    const float *fsave, const float *gate, const SelRopeChain *o, int b, int T, int c0, const int nc, const int K) {
    const int H = o->H, R = o->R, HR = H * R;
    // fut[m]: dc of the token m + 1 after the current one (0 past the end)
    float w[SELROPE_K_MAX][SR_BLK_], fut[SELROPE_K_MAX][SR_BLK_], nxt[SR_BLK_], tr[SR_BLK_];
    double racc[SR_BLK_], dw[SELROPE_K_MAX][SR_BLK_], ds[SR_BLK_];
    int hd[SR_BLK_];
    for (int cc = 0; cc < nc; cc++) {
        int i = c0 + cc;
        tr[cc] = o->temp[i % R];
        hd[cc] = i / R;
        racc[cc] = 0.0, ds[cc] = 0.0, nxt[cc] = 0.0f;
        for (int j = 0; j < K; j++) w[j][cc] = o->conv[(size_t)i * K + j], fut[j][cc] = 0.0f, dw[j][cc] = 0.0;
    }
    for (int t = T - 1; t >= 0; t--) {
        const size_t row = ((size_t)b * T + t) * HR + c0;
        float d[SR_BLK_];
#pragma GCC unroll 1
        for (int cc = 0; cc < nc; cc++) {
            racc[cc] += dtheta[row + cc];
            d[cc] = (float)(tr[cc] * racc[cc]);
        }
        if (gate) {  // phi = f g: dg (per channel) = dphi f, df = dphi g
            const float *g = gate + ((size_t)b * T + t) * H;
#pragma GCC unroll 1
            for (int cc = 0; cc < nc; cc++) {
                dgate[row + cc] = d[cc] * fsave[row + cc];
                d[cc] *= g[hd[cc]];
            }
        }
#pragma GCC unroll 1
        for (int cc = 0; cc < nc; cc++) ds[cc] += d[cc];  // for the bias gradient (cheap: always formed)
        if (o->skip) diff_carry_(d, nxt, nc);  // f_t = a_t - a_{t-1}: da_t = df_t - df_{t+1}
        if (o->silu) {
#pragma GCC unroll 1
            for (int cc = 0; cc < nc; cc++) d[cc] *= fast_silu_grad_(csave[row + cc]);
        }
        if (K > 0) {
            // the input t feeds the outputs t + K-1-j by tap j: dp_t = sum_j w[j] dc_{t+K-1-j}, taps
            // in order from 0 (conv1d_causal_backward's sum); dw[j] += dc_t p_{t-(K-1)+j}
            float s[SR_BLK_];
#pragma GCC unroll 1
            for (int cc = 0; cc < nc; cc++) s[cc] = 0.0f;
            for (int j = 0; j + 1 < K; j++) {
#pragma GCC unroll 1
                for (int cc = 0; cc < nc; cc++) s[cc] += w[j][cc] * fut[K - 2 - j][cc];
            }
#pragma GCC unroll 1
            for (int cc = 0; cc < nc; cc++) s[cc] += w[K - 1][cc] * d[cc];
            for (int j = 0; j < K; j++) {
                int ts = t - (K - 1) + j;
                if (ts < 0) continue;
                const float *ps = p + ((size_t)b * T + ts) * HR + c0;
#pragma GCC unroll 1
                for (int cc = 0; cc < nc; cc++) dw[j][cc] += (double)d[cc] * ps[cc];
            }
            for (int m = K - 2; m > 0; m--) {
#pragma GCC unroll 1
                for (int cc = 0; cc < nc; cc++) fut[m][cc] = fut[m - 1][cc];
            }
            if (K > 1) {
#pragma GCC unroll 1
                for (int cc = 0; cc < nc; cc++) fut[0][cc] = d[cc];
            }
#pragma GCC unroll 1
            for (int cc = 0; cc < nc; cc++) dp[row + cc] = s[cc];
        } else {
#pragma GCC unroll 1
            for (int cc = 0; cc < nc; cc++) dp[row + cc] = d[cc];
        }
    }
    for (int cc = 0; cc < nc; cc++) {
        float *wk = work + ((size_t)b * HR + c0 + cc) * (K + 1);
        for (int j = 0; j < K; j++) wk[j] = (float)dw[j][cc];
        wk[K] = (float)ds[cc];
    }
}

void selrope_angles_backward(float *dp, float *dconv, float *dsum, float *dgate, float *work, const float *dtheta,
                             const float *p, const float *csave, const float *fsave, const float *gate,
                             const SelRopeChain *o, int B, int T) {
    const int HR = o->H * o->R, K = o->K, nblk = (HR + SR_BLK_ - 1) / SR_BLK_;
#pragma omp parallel if ((long)B * T * HR >= SR_PAR_MIN_)
    {
        // the conv weight and bias gradients of sequence b, in work, are summed over b below, in order: the same for
        // any thread count
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int blk = 0; blk < nblk; blk++) {
                const int c0 = blk * SR_BLK_;
                if (HR - c0 >= SR_BLK_ && K == SR_K_)
                    angles_backward_block_(dp, dgate, work, dtheta, p, csave, fsave, gate, o, b, T, c0, SR_BLK_, SR_K_);
                else
                    angles_backward_block_(dp, dgate, work, dtheta, p, csave, fsave, gate, o, b, T, c0,
                                           HR - c0 < SR_BLK_ ? HR - c0 : SR_BLK_, K);
            }
#pragma omp for schedule(static)
        for (int i = 0; i < HR; i++) {
            for (int j = 0; j <= K; j++) {
                if (j < K ? !dconv : !dsum) continue;
                double a = 0.0;
                for (int b = 0; b < B; b++) a += work[((size_t)b * HR + i) * (K + 1) + j];
                if (j < K) dconv[(size_t)i * K + j] += (float)a;
                else dsum[i] = (float)a;
            }
        }
    }
}

void selrope_rotate(float *out, const float *inp, const float *cs, const float *sn, int N, int H, int R) {
#pragma omp parallel for if ((long)N * H * R >= SR_PAR_MIN_)
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
#pragma omp parallel for if ((long)N * H * R >= SR_PAR_MIN_)
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
