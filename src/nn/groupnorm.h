/*
 * Per-head (grouped) normalisation with an optional swish gate: the output norms of the linear-attention / SSM
 * mixers (FLA's FusedRMSNormGated, Mamba2's RMSNormGated; docs/mixers.md). A row of x (N, G*D) is G groups of D
 * channels, each normalised on its own:
 *
 *   u = x                    (gate "after" or none)      u = x * silu(z)      (gate "before": Mamba2's
 *                                                                              RMSNormGated, norm_before_gate=False)
 *   n = (u - mean) * rstd     rstd = 1/sqrt(var + eps); mean = 0 and var = mean(u^2) unless center (LayerNorm)
 *   y = n * w                 w (D,) shared by the groups (FLA's per-head norms) or (G*D,) per channel
 *   out = y * silu(z)         (gate "after": FLA's FusedRMSNormGated, norm then swish gate) else y
 *
 * The forward keeps the per-group statistics (mean only when center). Backward ACCUMULATES (+=) into dx, dz
 * and dw; dw is summed over fixed blocks of rows and then the blocks in order, so results do not depend on the
 * thread count.
 */
#ifndef SEQ_NN_GROUPNORM_H
#define SEQ_NN_GROUPNORM_H

enum { GROUPNORM_GATE_NONE, GROUPNORM_GATE_AFTER, GROUPNORM_GATE_BEFORE };

typedef struct GroupNormOpts {
    int gate;      // GROUPNORM_GATE_*
    int center;    // 1: LayerNorm (subtract the mean), 0: RMSNorm
    int wshared;   // 1: w (D,) shared by the groups, 0: w (G*D,)
    float eps;
} GroupNormOpts;

// out, x, z (N, G*D) (z NULL without a gate); mean (N*G) or NULL unless center; rstd (N*G); w per o->wshared
void groupnorm_forward(float *out, float *mean, float *rstd, const float *x, const float *z, const float *w, int N,
                       int G, int D, const GroupNormOpts *o);
// dx, dz (N, G*D) (dz NULL without a gate), dw as w; the forward's inputs and statistics
void groupnorm_backward(float *dx, float *dz, float *dw, const float *dout, const float *x, const float *z,
                        const float *w, const float *mean, const float *rstd, int N, int G, int D,
                        const GroupNormOpts *o);

#endif
