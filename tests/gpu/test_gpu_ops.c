/*
 * The linear-recurrence mixers' GPU ops against their host twins in src/nn/, on random inputs:
 *   gpu/groupnorm.cuh  nn/groupnorm.h  every gate (none, after, before), RMSNorm and LayerNorm, shared and per-channel
 *                                      weights, mean NULL where the host allows it
 *   gpu/conv.cuh       nn/conv.h       with and without bias, K = 1 .. 6, T shorter than the taps, a chunk of rows
 *                                      spanning two sequences, NULL gradients
 *   gpu/l2norm.cuh     nn/norm.h       l2norm, L2NORM_ADD and L2NORM_FLOOR (rows held at the floor), in place
 *   gpu/activation.cuh nn/activation.h silu and relu on flat buffers (inputs up to |x| ~ 40, exact zeros), in place
 *   gpu/blockdiag.cuh  nn/blockdiag.h  xLSTM's 4 x 4 blocks and odd ones, NULL gradients
 *   gpu/rotary.cuh     nn/rotary.h     half-split and interleaved pairs, pos0 > 0, a per-head spectrum, in place
 * For each: the forward's outputs, and the backward's gradients accumulated into buffers that already hold values
 * (the GPU must add, not overwrite), at odd sizes (widths not multiples of 4, so the scalar paths run beside the
 * 16-byte ones; rows not multiples of the 64-row chunks of the weight gradients; a weight not on 16 bytes, as a
 * parameter in the flat buffer may be), and a second run that must give the same bits.
 *
 * Tolerance, relative to the largest magnitude of the compared tensor (of the accumulated part for a gradient):
 * 1e-5 for the forwards, 2e-5 for the gradients. Both sides compute in fp32 with the same formulas and orders; they
 * differ in the order of the row sums (lane-strided warp trees and 64-row chunks on the GPU, index order or double
 * on the host), in expf against nn/fastmath.h's (each within 2 ulp) and in fused multiply-adds, so an element
 * differs by a few ulp of the largest terms summed into it: about 1e-6 at these sizes. The gradients subtract means
 * (the norms' backwards) and sum up to 450 rows (the weights'), so they get the looser bound; the measured maxima
 * are printed per case. Rotations and relu are one product each: they get the same bounds with room to spare.
 *
 * Built twice, as test_gpu_linrec.c: against the CUDA backend (make CUDA=1: build/<variant>/tests-cuda/gpu/) and,
 * with SEQ_GPU_EMULATE, against its kernels emulated on the CPU (tests/gpu/emu/). Exit status 77 and a "skipped"
 * line when the build has no usable GPU.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../gradcheck.h"
#include "../test.h"
#include "gpu/activation.cuh"
#include "gpu/blockdiag.cuh"
#include "gpu/conv.cuh"
#include "gpu/groupnorm.cuh"
#include "gpu/l2norm.cuh"
#include "gpu/devbuf.h"
#include "kernel_check.h"
#include "gpu/rotary.cuh"
#include "nn/activation.h"
#include "nn/blockdiag.h"
#include "nn/conv.h"
#include "nn/groupnorm.h"
#include "nn/norm.h"
#include "nn/rotary.h"

#define TOL_FWD 1e-5
#define TOL_GRAD 2e-5

// ----------------------------------------------------------------------------
// helpers

// device buffers of one GPU run, freed together
typedef struct Dev {
    float *p[32];
    int n;
} Dev;

// n floats of device memory at offset off (1: not on 16 bytes) from a fresh buffer, holding x (n floats) or, with x
// NULL, what the allocator left (NaN bytes on the emulator: a kernel that reads what nobody wrote shows)
static float *dev_(Dev *d, const float *x, size_t n, int off) {
    float *p = gpu_devbuf_alloc(n + off);
    d->p[d->n++] = p;
    if (x) gpu_devbuf_to_device(p + off, x, n);
    return p + off;
}

static void dev_free_(Dev *d) {
    for (int i = 0; i < d->n; i++) gpu_devbuf_free(d->p[i]);
    d->n = 0;
}

// kc_rel_err over the rows (of C floats each) whose index is (tiny) or is not (!tiny) a multiple of 3: the l2 norm's
// tiny rows have outputs and gradients of another scale, measured apart so that neither hides the other's errors
static double rel_err_rows_(const float *got, const float *want, const float *base, int n_rows, int C, int tiny) {
    double d = 0.0, s = 0.0;
    for (int r = 0; r < n_rows; r++) {
        if ((r % 3 == 0) != tiny) continue;
        for (int i = 0; i < C; i++) {
            size_t k = (size_t)r * C + i;
            if (got[k] != got[k]) return INFINITY;
            d = fmax(d, fabs((double)got[k] - want[k]));
            s = fmax(s, fabs((double)want[k] - (base ? base[k] : 0.0)));
        }
    }
    return s > 0 ? d / s : d;
}

static void free_all_(float **p, int n) {
    for (int i = 0; i < n; i++) free(p[i]), p[i] = NULL;
}

// the worst error of each op over its cases, printed at the end
static double worst_[6][2];
enum { OP_GN, OP_CONV, OP_L2, OP_FLAT, OP_BD, OP_ROPE };
static const char *OP_NAME_[] = {"groupnorm", "conv1d_causal", "l2norm", "silu/relu", "blockdiag", "rotary"};
static void note_(int op, int grad, double e) { worst_[op][grad] = fmax(worst_[op][grad], e); }

// ----------------------------------------------------------------------------
// groupnorm

typedef struct GnCase {
    int N, G, D, gate, center, wshared, no_mean, w_off;  // no_mean: mean NULL (RMSNorm); w_off: w not on 16 bytes
    float eps, offset;                                   // offset: added to x (LayerNorm's mean)
} GnCase;

static const GnCase GN_CASES_[] = {
    {37, 3, 12, GROUPNORM_GATE_AFTER, 0, 1, 1, 0, 1e-6f, 0.0f},   // gla, retnet, deltanet: gated RMSNorm per head
    {29, 4, 20, GROUPNORM_GATE_NONE, 0, 1, 1, 1, 1e-5f, 0.0f},    // linear_attn; w not on 16 bytes
    {41, 2, 24, GROUPNORM_GATE_BEFORE, 0, 0, 1, 0, 1e-5f, 0.0f},  // mamba2: RMSNormGated, per-channel w
    {33, 4, 7, GROUPNORM_GATE_NONE, 1, 0, 0, 0, 1e-5f, 3.0f},     // mlstm: MultiHeadLayerNorm, odd D
    {70, 1, 45, GROUPNORM_GATE_NONE, 0, 0, 0, 0, 1e-6f, 0.0f},    // gsa: one group of all channels, mean kept
    {150, 3, 70, GROUPNORM_GATE_AFTER, 1, 1, 0, 0, 1e-5f, 1.0f},  // LayerNorm gated after, 450 groups of 70
    {66, 2, 64, GROUPNORM_GATE_BEFORE, 1, 1, 0, 0, 1e-5f, -2.0f}, // LayerNorm gated before, two row chunks
};

typedef struct GnData {
    float *x, *z, *w, *dout, *pdx, *pdz, *pdw;  // inputs; the gradient buffers' values before the backward
    float *out, *mean, *rstd, *dx, *dz, *dw;    // results
} GnData;

static void gn_cpu_(const GnCase *c, const GnData *in, GnData *r) {
    GroupNormOpts o = {c->gate, c->center, c->wshared, c->eps};
    size_t n = (size_t)c->N * c->G * c->D, ng = (size_t)c->N * c->G, nw = (size_t)(c->wshared ? c->D : c->G * c->D);
    r->out = malloc(n * sizeof(float)), r->rstd = malloc(ng * sizeof(float));
    r->mean = c->no_mean ? NULL : malloc(ng * sizeof(float));
    r->dx = kc_copy(in->pdx, n), r->dz = kc_copy(in->pdz, n), r->dw = kc_copy(in->pdw, nw);
    groupnorm_forward(r->out, r->mean, r->rstd, in->x, in->z, in->w, c->N, c->G, c->D, &o);
    groupnorm_backward(r->dx, r->dz, r->dw, in->dout, in->x, in->z, in->w, r->mean, r->rstd, c->N, c->G, c->D, &o);
}

static void gn_gpu_(const GnCase *c, const GnData *in, GnData *r) {
    GroupNormOpts o = {c->gate, c->center, c->wshared, c->eps};
    size_t n = (size_t)c->N * c->G * c->D, ng = (size_t)c->N * c->G, nw = (size_t)(c->wshared ? c->D : c->G * c->D);
    Dev d = {0};
    float *x = dev_(&d, in->x, n, 0), *z = in->z ? dev_(&d, in->z, n, 0) : NULL, *w = dev_(&d, in->w, nw, c->w_off);
    float *dout = dev_(&d, in->dout, n, 0), *out = dev_(&d, NULL, n, 0), *rstd = dev_(&d, NULL, ng, 0);
    float *mean = c->no_mean ? NULL : dev_(&d, NULL, ng, 0);
    float *dx = dev_(&d, in->pdx, n, 0), *dz = in->pdz ? dev_(&d, in->pdz, n, 0) : NULL;
    float *dw = dev_(&d, in->pdw, nw, c->w_off);
    gpu_groupnorm_forward(out, mean, rstd, x, z, w, c->N, c->G, c->D, &o);
    gpu_groupnorm_backward(dx, dz, dw, dout, x, z, w, mean, rstd, c->N, c->G, c->D, &o);
    r->out = kc_down(out, n), r->mean = kc_down(mean, ng), r->rstd = kc_down(rstd, ng);
    r->dx = kc_down(dx, n), r->dz = kc_down(dz, n), r->dw = kc_down(dw, nw);
    dev_free_(&d);
}

static void gn_case_(const GnCase *c, int idx) {
    static const char *gate[] = {"no gate", "gate after", "gate before"};
    char name[160];
    snprintf(name, sizeof name, "groupnorm %s, %s, %s w, N %d G %d D %d%s%s", c->center ? "LayerNorm" : "RMSNorm",
             gate[c->gate], c->wshared ? "shared" : "per-channel", c->N, c->G, c->D, c->no_mean ? ", mean NULL" : "",
             c->w_off ? ", w off 16 bytes" : "");
    size_t n = (size_t)c->N * c->G * c->D, ng = (size_t)c->N * c->G, nw = (size_t)(c->wshared ? c->D : c->G * c->D);
    GcRng rng = {2000 + 31 * idx};
    GnData in = {0}, cpu = {0}, gpu = {0}, again = {0};
    in.x = gc_randn(&rng, n, 1.0f);
    for (size_t i = 0; i < n; i++) in.x[i] += c->offset;
    int gated = c->gate != GROUPNORM_GATE_NONE;
    in.z = gated ? gc_randn(&rng, n, 2.0f) : NULL;
    in.w = gc_randn(&rng, nw, 0.3f);
    for (size_t i = 0; i < nw; i++) in.w[i] += 1.0f;
    in.dout = gc_randn(&rng, n, 1.0f);
    in.pdx = gc_randn(&rng, n, 0.5f), in.pdz = gated ? gc_randn(&rng, n, 0.5f) : NULL;
    in.pdw = gc_randn(&rng, nw, 0.5f);
    gn_cpu_(c, &in, &cpu);
    gn_gpu_(c, &in, &gpu);
    gn_gpu_(c, &in, &again);
    double eo = kc_rel_err(gpu.out, cpu.out, NULL, n), er = kc_rel_err(gpu.rstd, cpu.rstd, NULL, ng);
    double em = cpu.mean ? kc_rel_err(gpu.mean, cpu.mean, NULL, ng) : 0.0;
    double ex = kc_rel_err(gpu.dx, cpu.dx, in.pdx, n), ez = gated ? kc_rel_err(gpu.dz, cpu.dz, in.pdz, n) : 0.0;
    double ew = kc_rel_err(gpu.dw, cpu.dw, in.pdw, nw);
    note_(OP_GN, 0, fmax(eo, fmax(er, em))), note_(OP_GN, 1, fmax(ex, fmax(ez, ew)));
    CHECK(eo <= TOL_FWD && er <= TOL_FWD && em <= TOL_FWD, "%s: out, rstd, mean (%.2g, %.2g, %.2g)", name, eo, er, em);
    CHECK(ex <= TOL_GRAD && ez <= TOL_GRAD && ew <= TOL_GRAD, "%s: dx, dz, dw accumulated (%.2g, %.2g, %.2g)", name, ex,
          ez, ew);
    int same = kc_same_bits(gpu.out, again.out, n) && kc_same_bits(gpu.mean, again.mean, ng) &&
               kc_same_bits(gpu.rstd, again.rstd, ng) && kc_same_bits(gpu.dx, again.dx, n) &&
               kc_same_bits(gpu.dz, again.dz, n) && kc_same_bits(gpu.dw, again.dw, nw);
    CHECK(same, "%s: a second run gives the same bits", name);
    GnData *all[] = {&in, &cpu, &gpu, &again};
    for (int k = 0; k < 4; k++) {
        float *p[] = {all[k]->x, all[k]->z, all[k]->w, all[k]->dout, all[k]->pdx, all[k]->pdz, all[k]->pdw,
                      all[k]->out, all[k]->mean, all[k]->rstd, all[k]->dx, all[k]->dz, all[k]->dw};
        free_all_(p, (int)(sizeof p / sizeof p[0]));
    }
}

// ----------------------------------------------------------------------------
// conv1d_causal

typedef struct ConvCase {
    int B, T, C, K, bias, no_dinp, no_dw, off;  // no_dw: dweight and dbias NULL; off: inp, dinp not on 16 bytes
} ConvCase;

static const ConvCase CONV_CASES_[] = {
    {2, 37, 12, 4, 1, 0, 0, 0},  // mamba2, mlstm: with bias
    {3, 29, 7, 4, 0, 0, 0, 0},   // shortconv (no bias), odd channels, B*T = 87
    {1, 3, 5, 4, 1, 0, 0, 0},    // T shorter than the taps
    {2, 70, 16, 6, 1, 0, 0, 0},  // the second chunk of 64 rows spans both sequences
    {2, 20, 9, 1, 1, 0, 0, 0},   // one tap
    {2, 33, 8, 3, 0, 1, 0, 1},   // dinp NULL; tensors not on 16 bytes
    {1, 65, 6, 4, 1, 0, 1, 0},   // dweight, dbias NULL
};

typedef struct ConvData {
    float *inp, *w, *b, *dout, *pdi, *pdw, *pdb;
    float *out, *dinp, *dw, *db;
} ConvData;

static void conv_gpu_(const ConvCase *c, const ConvData *in, ConvData *r) {
    size_t n = (size_t)c->B * c->T * c->C, nw = (size_t)c->C * c->K;
    Dev d = {0};
    float *inp = dev_(&d, in->inp, n, c->off), *w = dev_(&d, in->w, nw, 0);
    float *b = in->b ? dev_(&d, in->b, c->C, 0) : NULL;
    float *dout = dev_(&d, in->dout, n, c->off), *out = dev_(&d, NULL, n, c->off);
    float *dinp = in->pdi ? dev_(&d, in->pdi, n, c->off) : NULL, *dw = in->pdw ? dev_(&d, in->pdw, nw, 0) : NULL;
    float *db = in->pdb ? dev_(&d, in->pdb, c->C, 0) : NULL;
    gpu_conv1d_causal_forward(out, inp, w, b, c->B, c->T, c->C, c->K);
    gpu_conv1d_causal_backward(dinp, dw, db, dout, inp, w, c->B, c->T, c->C, c->K);
    r->out = kc_down(out, n), r->dinp = kc_down(dinp, n), r->dw = kc_down(dw, nw), r->db = kc_down(db, c->C);
    dev_free_(&d);
}

static void conv_case_(const ConvCase *c, int idx) {
    char name[160];
    snprintf(name, sizeof name, "conv1d_causal B %d T %d C %d K %d%s%s%s%s", c->B, c->T, c->C, c->K,
             c->bias ? ", bias" : "", c->no_dinp ? ", dinp NULL" : "", c->no_dw ? ", dweight dbias NULL" : "",
             c->off ? ", off 16 bytes" : "");
    size_t n = (size_t)c->B * c->T * c->C, nw = (size_t)c->C * c->K;
    GcRng rng = {3000 + 31 * idx};
    ConvData in = {0}, cpu = {0}, gpu = {0}, again = {0};
    in.inp = gc_randn(&rng, n, 1.0f), in.w = gc_randn(&rng, nw, 0.5f);
    in.b = c->bias ? gc_randn(&rng, c->C, 0.5f) : NULL;
    in.dout = gc_randn(&rng, n, 1.0f);
    in.pdi = c->no_dinp ? NULL : gc_randn(&rng, n, 0.5f);
    in.pdw = c->no_dw ? NULL : gc_randn(&rng, nw, 0.5f);
    in.pdb = c->no_dw || !c->bias ? NULL : gc_randn(&rng, c->C, 0.5f);
    cpu.out = malloc(n * sizeof(float)), cpu.dinp = kc_copy(in.pdi, n), cpu.dw = kc_copy(in.pdw, nw);
    cpu.db = kc_copy(in.pdb, c->C);
    conv1d_causal_forward(cpu.out, in.inp, in.w, in.b, c->B, c->T, c->C, c->K);
    conv1d_causal_backward(cpu.dinp, cpu.dw, cpu.db, in.dout, in.inp, in.w, c->B, c->T, c->C, c->K);
    conv_gpu_(c, &in, &gpu);
    conv_gpu_(c, &in, &again);
    double eo = kc_rel_err(gpu.out, cpu.out, NULL, n);
    double ei = cpu.dinp ? kc_rel_err(gpu.dinp, cpu.dinp, in.pdi, n) : 0.0;
    double ew = cpu.dw ? kc_rel_err(gpu.dw, cpu.dw, in.pdw, nw) : 0.0;
    double eb = cpu.db ? kc_rel_err(gpu.db, cpu.db, in.pdb, c->C) : 0.0;
    note_(OP_CONV, 0, eo), note_(OP_CONV, 1, fmax(ei, fmax(ew, eb)));
    CHECK(eo <= TOL_FWD, "%s: out (%.2g)", name, eo);
    CHECK(ei <= TOL_GRAD && ew <= TOL_GRAD && eb <= TOL_GRAD, "%s: dinp, dweight, dbias accumulated (%.2g, %.2g, %.2g)",
          name, ei, ew, eb);
    int same = kc_same_bits(gpu.out, again.out, n) && kc_same_bits(gpu.dinp, again.dinp, n) &&
               kc_same_bits(gpu.dw, again.dw, nw) && kc_same_bits(gpu.db, again.db, c->C);
    CHECK(same, "%s: a second run gives the same bits", name);
    ConvData *all[] = {&in, &cpu, &gpu, &again};
    for (int k = 0; k < 4; k++) {
        float *p[] = {all[k]->inp, all[k]->w,   all[k]->b,    all[k]->dout, all[k]->pdi, all[k]->pdw,
                      all[k]->pdb, all[k]->out, all[k]->dinp, all[k]->dw,   all[k]->db};
        free_all_(p, (int)(sizeof p / sizeof p[0]));
    }
}

// ----------------------------------------------------------------------------
// l2norm

typedef struct L2Case {
    int N, C, mode, inplace, tiny;  // inplace: out = inp; tiny: every third row scaled by 1e-7 (under a floor of 1e-6)
    float eps;
} L2Case;

static const L2Case L2_CASES_[] = {
    {74, 16, L2NORM_ADD, 0, 0, 1e-6f},    // deltanet's q, k: B*T*H rows of Dk
    {37, 13, L2NORM_ADD, 1, 0, 1e-6f},    // odd width, in place
    {20, 70, L2NORM_ADD, 0, 1, 1e-6f},    // rows wider than a warp's 64 lanes x 1, some nearly zero
    {40, 8, L2NORM_FLOOR, 0, 1, 1e-6f},   // KLA: rows at the floor
    {30, 12, L2NORM_FLOOR, 1, 1, 1e-3f},  // in place, a floor of 1e-3
};

typedef struct L2Data {
    float *inp, *dout, *pdi;
    float *out, *nrm, *dinp;
} L2Data;

static void l2_gpu_(const L2Case *c, const L2Data *in, L2Data *r) {
    size_t n = (size_t)c->N * c->C;
    Dev d = {0};
    float *inp = dev_(&d, in->inp, n, 0), *out = c->inplace ? inp : dev_(&d, NULL, n, 0);
    float *nrm = dev_(&d, NULL, c->N, 0);
    float *dout = dev_(&d, in->dout, n, 0), *dinp = dev_(&d, in->pdi, n, 0);
    gpu_l2norm_forward(out, nrm, inp, c->N, c->C, c->eps, c->mode);
    gpu_l2norm_backward(dinp, dout, out, nrm, c->N, c->C, c->eps, c->mode);
    r->out = kc_down(out, n), r->nrm = kc_down(nrm, c->N), r->dinp = kc_down(dinp, n);
    dev_free_(&d);
}

static void l2_case_(const L2Case *c, int idx) {
    char name[160];
    snprintf(name, sizeof name, "l2norm %s eps %g, N %d C %d%s%s", c->mode == L2NORM_ADD ? "add" : "floor",
             (double)c->eps, c->N, c->C, c->inplace ? ", in place" : "", c->tiny ? ", tiny rows" : "");
    size_t n = (size_t)c->N * c->C;
    GcRng rng = {4000 + 31 * idx};
    L2Data in = {0}, cpu = {0}, gpu = {0}, again = {0};
    in.inp = gc_randn(&rng, n, 1.0f);
    if (c->tiny)
        for (int r = 0; r < c->N; r += 3)
            for (int i = 0; i < c->C; i++) in.inp[(size_t)r * c->C + i] *= 1e-7f;
    in.dout = gc_randn(&rng, n, 1.0f), in.pdi = gc_randn(&rng, n, 0.5f);
    cpu.out = malloc(n * sizeof(float)), cpu.nrm = malloc(c->N * sizeof(float)), cpu.dinp = kc_copy(in.pdi, n);
    l2norm_forward(cpu.out, cpu.nrm, in.inp, c->N, c->C, c->eps, c->mode);
    l2norm_backward(cpu.dinp, in.dout, cpu.out, cpu.nrm, c->N, c->C, c->eps, c->mode);
    l2_gpu_(c, &in, &gpu);
    l2_gpu_(c, &in, &again);
    // with tiny rows, the two kinds of rows apart, each relative to its own scale (the larger error counts)
    double eo = kc_rel_err(gpu.out, cpu.out, NULL, n), ei = kc_rel_err(gpu.dinp, cpu.dinp, in.pdi, n);
    if (c->tiny) {
        eo = fmax(rel_err_rows_(gpu.out, cpu.out, NULL, c->N, c->C, 0),
                  rel_err_rows_(gpu.out, cpu.out, NULL, c->N, c->C, 1));
        ei = fmax(rel_err_rows_(gpu.dinp, cpu.dinp, in.pdi, c->N, c->C, 0),
                  rel_err_rows_(gpu.dinp, cpu.dinp, in.pdi, c->N, c->C, 1));
    }
    double en = kc_rel_err(gpu.nrm, cpu.nrm, NULL, c->N);
    note_(OP_L2, 0, fmax(eo, en)), note_(OP_L2, 1, ei);
    CHECK(eo <= TOL_FWD && en <= TOL_FWD, "%s: out, nrm (%.2g, %.2g)", name, eo, en);
    CHECK(ei <= TOL_GRAD, "%s: dinp accumulated (%.2g)", name, ei);
    CHECK(kc_same_bits(gpu.out, again.out, n) && kc_same_bits(gpu.nrm, again.nrm, c->N) &&
              kc_same_bits(gpu.dinp, again.dinp, n),
          "%s: a second run gives the same bits", name);
    L2Data *all[] = {&in, &cpu, &gpu, &again};
    for (int k = 0; k < 4; k++) {
        float *p[] = {all[k]->inp, all[k]->dout, all[k]->pdi, all[k]->out, all[k]->nrm, all[k]->dinp};
        free_all_(p, 6);
    }
}

// ----------------------------------------------------------------------------
// silu, relu on flat buffers

typedef struct FlatCase {
    size_t n;
    int relu, inplace;
} FlatCase;

static const FlatCase FLAT_CASES_[] = {
    {1000, 0, 0},  // 16-byte path
    {1001, 0, 1},  // scalar path, in place
    {1003, 1, 0},
    {1000, 1, 1},
};

static void flat_gpu_(const FlatCase *c, const float *x, const float *dout, const float *pdi, float **out,
                      float **dinp) {
    Dev d = {0};
    float *dx = dev_(&d, x, c->n, 0), *o = c->inplace ? dx : dev_(&d, NULL, c->n, 0);
    float *dd = dev_(&d, dout, c->n, 0), *di = dev_(&d, pdi, c->n, 0);
    // the backward reads the forward's input: in place, it runs first (on the host's twin the same)
    if (c->inplace) (c->relu ? gpu_relu_backward : gpu_silu_backward)(di, dx, dd, c->n);
    (c->relu ? gpu_relu_forward : gpu_silu_forward)(o, dx, c->n);
    if (!c->inplace) (c->relu ? gpu_relu_backward : gpu_silu_backward)(di, dx, dd, c->n);
    *out = kc_down(o, c->n), *dinp = kc_down(di, c->n);
    dev_free_(&d);
}

static void flat_case_(const FlatCase *c, int idx) {
    char name[120];
    snprintf(name, sizeof name, "%s n %zu%s", c->relu ? "relu" : "silu", c->n, c->inplace ? ", in place" : "");
    GcRng rng = {5000 + 31 * idx};
    float *x = gc_randn(&rng, c->n, 8.0f), *dout = gc_randn(&rng, c->n, 1.0f), *pdi = gc_randn(&rng, c->n, 0.5f);
    for (size_t i = 0; i < c->n; i += 17) x[i] = 0.0f;  // relu's kink, taken as 0 on both sides
    x[1] = 40.0f, x[2] = -40.0f;                        // sigmoid's tails
    float *out = malloc(c->n * sizeof(float)), *dinp = kc_copy(pdi, c->n), *gout, *gdinp, *aout, *adinp;
    (c->relu ? relu_forward : silu_forward)(out, x, c->n);
    (c->relu ? relu_backward : silu_backward)(dinp, x, dout, c->n);
    flat_gpu_(c, x, dout, pdi, &gout, &gdinp);
    flat_gpu_(c, x, dout, pdi, &aout, &adinp);
    double eo = kc_rel_err(gout, out, NULL, c->n), ei = kc_rel_err(gdinp, dinp, pdi, c->n);
    note_(OP_FLAT, 0, eo), note_(OP_FLAT, 1, ei);
    CHECK(eo <= TOL_FWD, "%s: out (%.2g)", name, eo);
    CHECK(ei <= TOL_GRAD, "%s: dinp accumulated (%.2g)", name, ei);
    CHECK(kc_same_bits(gout, aout, c->n) && kc_same_bits(gdinp, adinp, c->n), "%s: a second run gives the same bits", name);
    float *p[] = {x, dout, pdi, out, dinp, gout, gdinp, aout, adinp};
    free_all_(p, 9);
}

// ----------------------------------------------------------------------------
// blockdiag

typedef struct BdCase {
    int N, G, Di, Do, no_dinp, no_dw;
} BdCase;

static const BdCase BD_CASES_[] = {
    {37, 5, 4, 4, 0, 0},   // mlstm's q, k, v: xLSTM's 4 x 4 blocks
    {130, 3, 3, 5, 0, 0},  // Do != Di, three chunks of rows
    {10, 2, 7, 2, 1, 0},   // dinp NULL
    {70, 4, 4, 4, 0, 1},   // dw NULL
};

typedef struct BdData {
    float *inp, *w, *dout, *pdi, *pdw;
    float *out, *dinp, *dw;
} BdData;

static void bd_gpu_(const BdCase *c, const BdData *in, BdData *r) {
    size_t ni = (size_t)c->N * c->G * c->Di, no = (size_t)c->N * c->G * c->Do, nw = (size_t)c->G * c->Do * c->Di;
    Dev d = {0};
    float *inp = dev_(&d, in->inp, ni, 0), *w = dev_(&d, in->w, nw, 0), *dout = dev_(&d, in->dout, no, 0);
    float *out = dev_(&d, NULL, no, 0), *dinp = in->pdi ? dev_(&d, in->pdi, ni, 0) : NULL;
    float *dw = in->pdw ? dev_(&d, in->pdw, nw, 0) : NULL;
    gpu_blockdiag_forward(out, inp, w, c->N, c->G, c->Di, c->Do);
    gpu_blockdiag_backward(dinp, dw, dout, inp, w, c->N, c->G, c->Di, c->Do);
    r->out = kc_down(out, no), r->dinp = kc_down(dinp, ni), r->dw = kc_down(dw, nw);
    dev_free_(&d);
}

static void bd_case_(const BdCase *c, int idx) {
    char name[120];
    snprintf(name, sizeof name, "blockdiag N %d G %d Di %d Do %d%s%s", c->N, c->G, c->Di, c->Do,
             c->no_dinp ? ", dinp NULL" : "", c->no_dw ? ", dw NULL" : "");
    size_t ni = (size_t)c->N * c->G * c->Di, no = (size_t)c->N * c->G * c->Do, nw = (size_t)c->G * c->Do * c->Di;
    GcRng rng = {6000 + 31 * idx};
    BdData in = {0}, cpu = {0}, gpu = {0}, again = {0};
    in.inp = gc_randn(&rng, ni, 1.0f), in.w = gc_randn(&rng, nw, 0.5f), in.dout = gc_randn(&rng, no, 1.0f);
    in.pdi = c->no_dinp ? NULL : gc_randn(&rng, ni, 0.5f), in.pdw = c->no_dw ? NULL : gc_randn(&rng, nw, 0.5f);
    cpu.out = malloc(no * sizeof(float)), cpu.dinp = kc_copy(in.pdi, ni), cpu.dw = kc_copy(in.pdw, nw);
    blockdiag_forward(cpu.out, in.inp, in.w, c->N, c->G, c->Di, c->Do);
    blockdiag_backward(cpu.dinp, cpu.dw, in.dout, in.inp, in.w, c->N, c->G, c->Di, c->Do);
    bd_gpu_(c, &in, &gpu);
    bd_gpu_(c, &in, &again);
    double eo = kc_rel_err(gpu.out, cpu.out, NULL, no);
    double ei = cpu.dinp ? kc_rel_err(gpu.dinp, cpu.dinp, in.pdi, ni) : 0.0;
    double ew = cpu.dw ? kc_rel_err(gpu.dw, cpu.dw, in.pdw, nw) : 0.0;
    note_(OP_BD, 0, eo), note_(OP_BD, 1, fmax(ei, ew));
    CHECK(eo <= TOL_FWD, "%s: out (%.2g)", name, eo);
    CHECK(ei <= TOL_GRAD && ew <= TOL_GRAD, "%s: dinp, dw accumulated (%.2g, %.2g)", name, ei, ew);
    CHECK(kc_same_bits(gpu.out, again.out, no) && kc_same_bits(gpu.dinp, again.dinp, ni) &&
              kc_same_bits(gpu.dw, again.dw, nw),
          "%s: a second run gives the same bits", name);
    BdData *all[] = {&in, &cpu, &gpu, &again};
    for (int k = 0; k < 4; k++) {
        float *p[] = {all[k]->inp, all[k]->w,   all[k]->dout, all[k]->pdi,
                      all[k]->pdw, all[k]->out, all[k]->dinp, all[k]->dw};
        free_all_(p, 8);
    }
}

// ----------------------------------------------------------------------------
// rotary

typedef struct RopeCase {
    int B, T, NH, HS, layout, pos0, freqs, inplace;  // freqs: a per-head spectrum instead of the base's
} RopeCase;

static const RopeCase ROPE_CASES_[] = {
    {2, 19, 3, 8, ROTARY_HALF, 0, 0, 0},         // retnet, gla / linear_attn with rotate: half-split pairs
    {1, 33, 2, 6, ROTARY_INTERLEAVED, 5, 0, 1},  // interleaved, from position 5, in place
    {2, 11, 2, 10, ROTARY_HALF, 3, 1, 0},        // a per-head spectrum
};

static void rope_gpu_(const RopeCase *c, const float *x, const float *fr, const float *dout, const float *pdi,
                      float **out, float **dinp) {
    size_t n = (size_t)c->B * c->T * c->NH * c->HS;
    Dev d = {0};
    float *dx = dev_(&d, x, n, 0), *o = c->inplace ? dx : dev_(&d, NULL, n, 0);
    float *dd = dev_(&d, dout, n, 0), *di = dev_(&d, pdi, n, 0);
    RotaryCfg cfg = {c->layout, 10000.0f, fr ? dev_(&d, fr, (size_t)c->NH * (c->HS / 2), 0) : NULL};
    gpu_rotary_forward(o, dx, &cfg, c->pos0, c->B, c->T, c->NH, c->HS);
    gpu_rotary_backward(di, dd, &cfg, c->pos0, c->B, c->T, c->NH, c->HS);
    *out = kc_down(o, n), *dinp = kc_down(di, n);
    dev_free_(&d);
}

static void rope_case_(const RopeCase *c, int idx) {
    char name[140];
    snprintf(name, sizeof name, "rotary %s B %d T %d NH %d HS %d pos0 %d%s%s",
             c->layout == ROTARY_HALF ? "half" : "interleaved", c->B, c->T, c->NH, c->HS, c->pos0,
             c->freqs ? ", per-head spectrum" : "", c->inplace ? ", in place" : "");
    size_t n = (size_t)c->B * c->T * c->NH * c->HS, nf = (size_t)c->NH * (c->HS / 2);
    GcRng rng = {7000 + 31 * idx};
    float *x = gc_randn(&rng, n, 1.0f), *dout = gc_randn(&rng, n, 1.0f), *pdi = gc_randn(&rng, n, 0.5f), *fr = NULL;
    if (c->freqs) {
        fr = malloc(nf * sizeof(float));
        rotary_sc_bank(fr, NULL, c->NH, c->HS / 2, 10000.0, 0.0, 0);
    }
    RotaryCfg cfg = {c->layout, 10000.0f, fr};
    float *out = malloc(n * sizeof(float)), *dinp = kc_copy(pdi, n), *gout, *gdinp, *aout, *adinp;
    rotary_forward(out, x, &cfg, c->pos0, c->B, c->T, c->NH, c->HS);
    rotary_backward(dinp, dout, &cfg, c->pos0, c->B, c->T, c->NH, c->HS);
    rope_gpu_(c, x, fr, dout, pdi, &gout, &gdinp);
    rope_gpu_(c, x, fr, dout, pdi, &aout, &adinp);
    double eo = kc_rel_err(gout, out, NULL, n), ei = kc_rel_err(gdinp, dinp, pdi, n);
    note_(OP_ROPE, 0, eo), note_(OP_ROPE, 1, ei);
    CHECK(eo <= TOL_FWD, "%s: out (%.2g)", name, eo);
    CHECK(ei <= TOL_GRAD, "%s: dinp accumulated (%.2g)", name, ei);
    CHECK(kc_same_bits(gout, aout, n) && kc_same_bits(gdinp, adinp, n), "%s: a second run gives the same bits", name);
    float *p[] = {x, dout, pdi, fr, out, dinp, gout, gdinp, aout, adinp};
    free_all_(p, 10);
}

// ----------------------------------------------------------------------------

#define FOR_CASES_(arr, fn) \
    for (int i = 0; i < (int)(sizeof arr / sizeof arr[0]); i++) fn(&arr[i], i)

int main(void) {
    if (!kc_have_device("gpu ops", "the mixers' ops")) return kc_skipped();
    FOR_CASES_(GN_CASES_, gn_case_);
    FOR_CASES_(CONV_CASES_, conv_case_);
    FOR_CASES_(L2_CASES_, l2_case_);
    FOR_CASES_(FLAT_CASES_, flat_case_);
    FOR_CASES_(BD_CASES_, bd_case_);
    FOR_CASES_(ROPE_CASES_, rope_case_);
    for (int op = 0; op < 6; op++)
        printf("# %-13s worst relative error: forward %.2g, gradients %.2g\n", OP_NAME_[op], worst_[op][0],
               worst_[op][1]);
    return test_summary();
}
