/*
 * The linear-recurrence engine on the GPU (gpu/linrec.cuh) against nn/linrec.c on the host, for every decay form
 * (none, per head, per token, per key channel, per value channel) and mLSTM's input gates with their stabiliser:
 *   - forward: o, m (gated_in) and the chunk checkpoints (the same layout on both devices),
 *   - backward: dq, dk, dv, dg, dli, accumulated into buffers that already hold values (the GPU must add, not
 *     overwrite), with dm given or NULL and dg NULL where a caller does not want it (retnet's fixed decay),
 *   - two runs give the same bits (every output and gradient),
 *   - the refusals (these need no GPU).
 * Shapes: T not a multiple of the chunk, T < chunk, chunk 1, a full chunk of 64, Dk != Dv, Dk and Dv over several
 * 32-channel tiles and not multiples of 32, up to 256. Log-decays from near 0 (-1e-3) to strong (-5), per channel
 * with per-channel rates; log input gates N(0, 3^2).
 *
 * Tolerance, relative to the largest magnitude of the compared tensor (of the gradient itself for an accumulated
 * buffer): 2e-5 for o, m and the checkpoints, 5e-5 for the gradients. Both devices compute in fp32 with the same
 * algorithm (double cumulative log-decays, every exponent rounded to float); they differ in the order of sums
 * (tiles of 32 channels, fused multiply-adds) and expf against nn/fastmath.h's (each within 2 ulp), so an element
 * differs by a few ulp of the largest terms summed into it, times the number of terms' rounding steps (up to
 * Dk + L = 320 here): about 1e-6 of the tensor's largest magnitude. The log-decays' gradients sum q' dq' - k dk
 * over channels and tokens, terms that cancel, so they get the looser bound; measured maxima are printed per case.
 * Built twice, as test_gpu_parity.c: against the CUDA backend (make CUDA=1: build/<variant>/tests-cuda/gpu/) and,
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
#include "../linrec_g.h"
#include "gpu/devbuf.h"
#include "kernel_check.h"
#include "gpu/linrec.cuh"
#include "nn/linrec.h"

// every precision: the engine's products keep fp32's accuracy under tf32 and bf16 too (gpu/linrec_kit.cuh's
// CK_SPLIT), so each case runs in fp32 and tf32 against the same bounds
#define TOL_FWD 2e-5
#define TOL_GRAD 5e-5

static const char *DECAY_NAME_[] = {"none", "head", "token", "channel", "vchannel"};

typedef struct Case {
    int B, T, H, Dk, Dv, decay, gated, chunk;
    int no_dg, no_dm;  // dg NULL (a fixed decay), dm NULL (a caller that uses m itself)
} Case;

static const Case CASES_[] = {
    {2, 37, 2, 8, 6, LINREC_NONE, 0, 8, 0, 0},
    {2, 37, 3, 16, 16, LINREC_HEAD, 0, 16, 0, 0},
    {1, 20, 2, 12, 20, LINREC_HEAD, 0, 64, 1, 0},     // T < chunk; dg not wanted (retnet)
    {2, 50, 2, 40, 24, LINREC_TOKEN, 0, 16, 0, 0},    // two key tiles, Dk != Dv
    {1, 48, 2, 8, 40, LINREC_TOKEN, 0, 16, 0, 0},     // T a multiple of the chunk, two value tiles
    {1, 45, 2, 48, 40, LINREC_CHANNEL, 0, 64, 0, 0},  // T < chunk
    {2, 7, 1, 8, 8, LINREC_CHANNEL, 0, 1, 0, 0},      // chunk 1
    {1, 130, 1, 72, 36, LINREC_CHANNEL, 0, 64, 0, 0}, // full chunks of 64, three key tiles
    {2, 45, 2, 16, 24, LINREC_TOKEN, 1, 16, 0, 0},    // mLSTM
    {1, 33, 2, 8, 8, LINREC_HEAD, 1, 8, 0, 1},        // input gates, per-head decay, dm NULL
    {1, 23, 2, 8, 8, LINREC_NONE, 1, 5, 0, 0},        // input gates without a decay
    {1, 70, 1, 40, 8, LINREC_TOKEN, 1, 64, 0, 0},     // input gates, full chunk of 64
    {2, 40, 2, 24, 40, LINREC_VCHANNEL, 0, 16, 0, 0}, // GSA
    {1, 9, 1, 8, 12, LINREC_VCHANNEL, 0, 1, 0, 0},    // chunk 1
    {1, 70, 1, 256, 256, LINREC_TOKEN, 0, 64, 0, 0},  // the widest heads
};
#define N_CASES_ (int)(sizeof CASES_ / sizeof CASES_[0])

// a log-decay rate: near 0, moderate or strong, a third each
static float rate_(GcRng *r) {
    float u = gc_uniform(r), w = gc_uniform(r);
    return u < 1.0f / 3 ? -1e-3f - 0.01f * w : u < 2.0f / 3 ? -0.01f - 0.99f * w : -1.0f - 4.0f * w;
}

// g: per head a rate; per token and channel a rate per (h, channel) times a token's factor in [0.5, 1.5], clipped to
// [-5, -1e-3] (the per-channel forms: each channel its own rate, as GLA's and GSA's gates give)
static float *make_g_(const LinrecDims *d, GcRng *r) {
    size_t n = linrec_g_size(d);
    if (!n) return NULL;
    float *g = malloc(n * sizeof(float));
    if (d->decay == LINREC_HEAD) {
        for (int h = 0; h < d->H; h++) g[h] = rate_(r);
        return g;
    }
    int W = d->decay == LINREC_CHANNEL ? d->Dk : d->decay == LINREC_VCHANNEL ? d->Dv : 1;
    float *rates = malloc((size_t)d->H * W * sizeof(float));
    for (int i = 0; i < d->H * W; i++) rates[i] = rate_(r);
    for (size_t row = 0; row < (size_t)d->B * d->T * d->H; row++)
        for (int c = 0; c < W; c++) {
            float x = rates[(row % d->H) * W + c] * (0.5f + gc_uniform(r));
            g[row * W + c] = x < -5.0f ? -5.0f : x > -1e-3f ? -1e-3f : x;
        }
    free(rates);
    return g;
}

// one case's tensors on the host; sizes of each
typedef struct Tensors {
    LinrecDims d;
    size_t nK, nV, nH, ng, nck;
    float *q, *k, *v, *g, *li, *dout, *dm;    // inputs
    float *pq, *pk, *pv, *pg, *pli;           // the gradient buffers' values before the backward
    float *o, *m, *ckpt, *dq, *dk, *dv, *dg, *dli;  // results
} Tensors;

static void results_alloc_(Tensors *t) {
    t->o = malloc(t->nV * sizeof(float));
    t->m = t->d.gated_in ? malloc(t->nH * sizeof(float)) : NULL;
    t->ckpt = malloc(t->nck * sizeof(float));
    t->dq = kc_copy(t->pq, t->nK), t->dk = kc_copy(t->pk, t->nK), t->dv = kc_copy(t->pv, t->nV);
    t->dg = kc_copy(t->pg, t->ng), t->dli = kc_copy(t->pli, t->nH);
}

static void results_free_(Tensors *t) {
    free(t->o), free(t->m), free(t->ckpt), free(t->dq), free(t->dk), free(t->dv), free(t->dg), free(t->dli);
}

static void tensors_make_(Tensors *t, const Case *c, uint64_t seed) {
    memset(t, 0, sizeof *t);
    LinrecDims d = {c->B, c->T, c->H, c->Dk, c->Dv, c->decay, c->gated, c->chunk, 1.0f / sqrtf((float)c->Dk)};
    t->d = d;
    GcRng r = {seed};
    t->nH = (size_t)d.B * d.T * d.H, t->nK = t->nH * d.Dk, t->nV = t->nH * d.Dv;
    t->ng = c->no_dg ? 0 : linrec_g_size(&d), t->nck = linrec_ckpt_size(&d);
    t->q = gc_randn(&r, t->nK, 1.0f), t->k = gc_randn(&r, t->nK, 1.0f), t->v = gc_randn(&r, t->nV, 1.0f);
    t->g = make_g_(&d, &r);
    t->dout = gc_randn(&r, t->nV, 1.0f);
    if (d.gated_in) {
        t->li = gc_randn(&r, t->nH, 3.0f);
        t->dm = c->no_dm ? NULL : gc_randn(&r, t->nH, 1.0f);
        t->pli = gc_randn(&r, t->nH, 0.5f);
    }
    t->pq = gc_randn(&r, t->nK, 0.5f), t->pk = gc_randn(&r, t->nK, 0.5f), t->pv = gc_randn(&r, t->nV, 0.5f);
    t->pg = t->ng ? gc_randn(&r, t->ng, 0.5f) : NULL;
}

static void tensors_free_(Tensors *t) {
    free(t->q), free(t->k), free(t->v), free(t->g), free(t->li), free(t->dout), free(t->dm);
    free(t->pq), free(t->pk), free(t->pv), free(t->pg), free(t->pli);
}

// nn/linrec.c on the host into t's results
static void run_cpu_(Tensors *t) {
    results_alloc_(t);
    linrec_forward(t->o, t->m, t->ckpt, NULL, t->q, t->k, t->v, t->g, t->li, &t->d);
    linrec_backward(t->dq, t->dk, t->dv, t->dg, t->dli, t->dout, t->dm, t->ckpt, t->q, t->k, t->v, t->g, t->li, &t->d);
}

// the GPU's forward and backward on t's inputs into t's results
static void run_gpu_(Tensors *t) {
    results_alloc_(t);
    size_t ng_in = linrec_g_size(&t->d);
    float *q = kc_up(t->q, t->nK), *k = kc_up(t->k, t->nK), *v = kc_up(t->v, t->nV), *li = kc_up(t->li, t->nH);
    float *dout = kc_up(t->dout, t->nV), *dm = kc_up(t->dm, t->nH);
    float *dq = kc_up(t->dq, t->nK), *dk = kc_up(t->dk, t->nK), *dv = kc_up(t->dv, t->nV), *dli = kc_up(t->dli, t->nH);
    float *g = NULL, *dg = kc_up(t->dg, t->ng);
    if (ng_in) g = kc_up(t->g, ng_in);
    float *o = gpu_devbuf_alloc(t->nV), *m = t->d.gated_in ? gpu_devbuf_alloc(t->nH) : NULL;
    float *ckpt = gpu_devbuf_alloc(gpu_linrec_ckpt_size(&t->d));
    float *scratch = gpu_devbuf_alloc(gpu_linrec_scratch_size(&t->d));
    gpu_linrec_forward(o, m, ckpt, q, k, v, g, li, scratch, &t->d);
    gpu_linrec_backward(dq, dk, dv, dg, dli, dout, dm, ckpt, q, k, v, g, li, scratch, &t->d);
    gpu_devbuf_to_host(t->o, o, t->nV);
    if (m) gpu_devbuf_to_host(t->m, m, t->nH);
    gpu_devbuf_to_host(t->ckpt, ckpt, t->nck);
    gpu_devbuf_to_host(t->dq, dq, t->nK), gpu_devbuf_to_host(t->dk, dk, t->nK), gpu_devbuf_to_host(t->dv, dv, t->nV);
    if (dg) gpu_devbuf_to_host(t->dg, dg, t->ng);
    if (dli) gpu_devbuf_to_host(t->dli, dli, t->nH);
    float *bufs[] = {q, k, v, li, dout, dm, dq, dk, dv, dli, g, dg, o, m, ckpt, scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) gpu_devbuf_free(bufs[i]);
}

// the checkpoints: the states (relative to their largest magnitude) and, with input gates, each chunk's stabiliser
// (relative to the largest finite one: an empty state's is LINREC_M_EMPTY, -1e30, and must be that exactly)
static void ckpt_check_(const Tensors *gpu, const Tensors *cpu, const char *name, double tol) {
    size_t ss = linrec_state_size(&cpu->d), KV = (size_t)cpu->d.Dk * cpu->d.Dv, n = cpu->nck / ss;
    double e = 0.0, s = 0.0, em = 0.0, sm = 0.0;
    int empty_ok = 1;
    for (size_t c = 0; c < n; c++) {
        const float *a = gpu->ckpt + c * ss, *b = cpu->ckpt + c * ss;
        for (size_t i = 0; i < KV; i++) e = fmax(e, fabs((double)a[i] - b[i])), s = fmax(s, fabs((double)b[i]));
        if (ss == KV) continue;
        if (b[KV] == LINREC_M_EMPTY) empty_ok &= a[KV] == LINREC_M_EMPTY;
        else em = fmax(em, fabs((double)a[KV] - b[KV])), sm = fmax(sm, fabs((double)b[KV]));
    }
    e = s > 0 ? e / s : e, em = sm > 0 ? em / sm : em;
    CHECK(e <= tol, "%s: checkpoints' states (%.2g)", name, e);
    if (ss > KV) CHECK(em <= tol && empty_ok, "%s: checkpoints' stabilisers (%.2g)", name, em);
}

static void run_case_(const Case *c, int idx, const char *precision) {
    char name[180];
    snprintf(name, sizeof name, "%s%s%s%s, B %d T %d H %d Dk %d Dv %d chunk %d, %s", DECAY_NAME_[c->decay],
             c->gated ? " + input gates" : "", c->no_dg ? ", dg NULL" : "", c->no_dm ? ", dm NULL" : "", c->B, c->T,
             c->H, c->Dk, c->Dv, c->chunk, precision);
    gpu_devbuf_set_precision(precision);
    double TOL_F = TOL_FWD, TOL_G = TOL_GRAD;
    Tensors cpu, gpu, again;
    tensors_make_(&cpu, c, 1000 + 17 * idx);
    gpu = cpu, again = cpu;
    run_cpu_(&cpu);
    run_gpu_(&gpu);
    run_gpu_(&again);
    double eo = kc_rel_err(gpu.o, cpu.o, NULL, cpu.nV);
    CHECK(eo <= TOL_F, "%s: o (%.2g)", name, eo);
    ckpt_check_(&gpu, &cpu, name, TOL_F);
    if (c->gated) {
        double em = kc_rel_err(gpu.m, cpu.m, NULL, cpu.nH);
        CHECK(em <= TOL_F, "%s: m (%.2g)", name, em);
    }
    double eq = kc_rel_err(gpu.dq, cpu.dq, cpu.pq, cpu.nK), ek = kc_rel_err(gpu.dk, cpu.dk, cpu.pk, cpu.nK);
    double ev = kc_rel_err(gpu.dv, cpu.dv, cpu.pv, cpu.nV);
    CHECK(eq <= TOL_G && ek <= TOL_G && ev <= TOL_G, "%s: dq, dk, dv accumulated (%.2g, %.2g, %.2g)", name,
          eq, ek, ev);
    if (cpu.ng) {
        double eg = kc_rel_err(gpu.dg, cpu.dg, cpu.pg, cpu.ng);
        CHECK(eg <= TOL_G, "%s: dg accumulated (%.2g)", name, eg);
    }
    if (c->gated) {
        double el = kc_rel_err(gpu.dli, cpu.dli, cpu.pli, cpu.nH);
        CHECK(el <= TOL_G, "%s: dli accumulated (%.2g)", name, el);
    }
    int same = kc_same_bits(gpu.o, again.o, cpu.nV) && kc_same_bits(gpu.m, again.m, cpu.m ? cpu.nH : 0) &&
               kc_same_bits(gpu.ckpt, again.ckpt, cpu.nck) && kc_same_bits(gpu.dq, again.dq, cpu.nK) &&
               kc_same_bits(gpu.dk, again.dk, cpu.nK) && kc_same_bits(gpu.dv, again.dv, cpu.nV) &&
               kc_same_bits(gpu.dg, again.dg, cpu.ng) && kc_same_bits(gpu.dli, again.dli, cpu.dli ? cpu.nH : 0);
    CHECK(same, "%s: a second run gives the same bits", name);
    results_free_(&cpu), results_free_(&gpu), results_free_(&again);
    tensors_free_(&cpu);
}

static void refusals_(void) {
    LinrecDims d = {2, 100, 2, 16, 16, LINREC_TOKEN, 0, 65, 0.25f};
    const char *why = gpu_linrec_refusal(&d);
    CHECK(why && strstr(why, "chunk"), "refused: a chunk of 65 tokens (%s)", why ? why : "taken");
    d.T = 50;
    why = gpu_linrec_refusal(&d);
    CHECK(!why, "taken: chunk 65 at T 50, one chunk of 50 tokens (%s)", why ? why : "taken");
    d.chunk = 16, d.decay = LINREC_CHANNEL, d.gated_in = 1;
    why = gpu_linrec_refusal(&d);
    CHECK(why && strstr(why, "gated_in"), "refused: input gates with a per-channel decay (%s)", why ? why : "taken");
    d.gated_in = 0;
    CHECK(!gpu_linrec_refusal(&d), "taken: a per-channel decay without input gates");
}

int main(void) {
    refusals_();
    if (!kc_have_device("gpu linrec", "the linear-recurrence kernels")) return kc_skipped();
    for (int i = 0; i < N_CASES_; i++) {
        run_case_(&CASES_[i], i, "fp32");
        run_case_(&CASES_[i], i, "tf32");
    }
    return test_summary();
}
