/*
 * The delta-rule engine on the GPU (gpu/delta.cuh) against nn/delta.c on the host, DeltaNet (no decay) and Gated
 * DeltaNet (log-decays per token and head), q and k L2-normalised rows as the mixers hand them:
 *   - forward: o and the chunk checkpoints (the same layout on both devices),
 *   - backward: dq, dk, dv, dbeta, dg, accumulated into buffers that already hold values (the GPU must add, not
 *     overwrite), with dbeta NULL (a fixed beta) and dg NULL where a caller does not want them,
 *   - two runs give the same bits (every output and gradient), and a forward without checkpoints gives o's bits,
 *   - the refusals (these need no GPU).
 * Shapes: T not a multiple of the chunk, T < chunk, chunk 1, full chunks of 64, Dk != Dv, Dk and Dv over several
 * 32-channel tiles and not multiples of 32, up to 128 and a key side of 256 (the widest taken). beta in (0, 1) and up to 1.9 (allow_neg_eigval's (0, 2));
 * log-decays from near 0 (-1e-3) to strong (-5), each head its own rate.
 *
 * Tolerance, relative to the largest magnitude of the compared tensor (of the gradient itself for an accumulated
 * buffer): 2e-5 for o and the checkpoints, 5e-5 for the gradients. Both devices compute in fp32 with the same
 * algorithm (double cumulative log-decays, every exponent rounded to float, R = b (V - e K S) solved for U by
 * substitution, never through an explicit inverse); they differ in the order of sums (tiles of 32 channels, the
 * CPU's blocked solve, fused multiply-adds) and in expf against nn/fastmath.h's (each within 2 ulp), so an element
 * differs by a few ulp of the largest terms summed into it times the rounding steps on its way (Dk + L products,
 * then up to L substitution steps): about 1e-6 of the tensor's largest magnitude. The gradients take about three
 * times the steps (dR through the transposed solve, then products with U, dR and the state over Dk + Dv + L terms),
 * and dbeta and dg sum terms that cancel (dg: q' dq' - k dk over channels and tokens), so they get the looser bound.
 * Measured maxima are printed per case.
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
#include "../scan_check.h"
#include "../test.h"
#include "gpu/delta.cuh"
#include "gpu/devbuf.h"
#include "kernel_check.h"
#include "nn/delta.h"

#define TOL_FWD 2e-5
#define TOL_GRAD 5e-5

typedef struct Case {
    int B, T, H, Dk, Dv, chunk;
    int gated;        // g given (Gated DeltaNet) or NULL (DeltaNet)
    float beta_hi;    // beta uniform in (0.05, beta_hi)
    int no_db, no_dg; // dbeta NULL (a fixed beta), dg NULL (a caller that learns no decay)
} Case;

static const Case CASES_[] = {
    {2, 37, 2, 8, 6, 8, 0, 1.0f, 0, 0},
    {2, 37, 3, 16, 16, 16, 1, 1.9f, 0, 0},
    {1, 20, 2, 12, 20, 64, 1, 1.0f, 0, 1},      // T < chunk; dg not wanted
    {2, 50, 2, 40, 24, 16, 1, 1.9f, 0, 0},      // two key tiles, Dk != Dv
    {1, 48, 2, 8, 40, 16, 0, 1.9f, 1, 0},       // T a multiple of the chunk, two value tiles; dbeta not wanted
    {2, 7, 1, 8, 8, 1, 1, 1.9f, 0, 0},          // chunk 1
    {1, 130, 1, 72, 36, 64, 1, 1.9f, 0, 0},     // full chunks of 64, three key tiles
    {1, 45, 2, 100, 70, 64, 0, 1.0f, 0, 0},     // T < chunk, tiles past 96 channels
    {1, 23, 2, 8, 8, 5, 1, 1.0f, 1, 1},         // neither dbeta nor dg
    {1, 70, 1, 128, 128, 64, 1, 1.9f, 0, 0},    // wide heads
    {1, 40, 1, 256, 48, 32, 1, 1.9f, 0, 0},     // the widest key side taken
};
#define N_CASES_ (int)(sizeof CASES_ / sizeof CASES_[0])

// a log-decay rate of class cls: near 0 (0), moderate (1) or strong (2)
static float rate_(GcRng *r, int cls) {
    float w = gc_uniform(r);
    return cls == 0 ? -1e-3f - 0.01f * w : cls == 1 ? -0.01f - 0.99f * w : -1.0f - 4.0f * w;
}

// g (B,T,H): per (b,h) a rate, of class (b H + h + idx) mod 3 so that every case has each class where it has three
// sequences (and its first one gentle or moderate otherwise), times a token's factor in [0.5, 1.5], clipped to
// [-5, -1e-3]
static float *make_g_(const DeltaDims *d, GcRng *r, int idx) {
    size_t n = (size_t)d->B * d->T * d->H;
    int BH = d->B * d->H;
    float *g = malloc(n * sizeof(float)), *rates = malloc((size_t)BH * sizeof(float));
    for (int bh = 0; bh < BH; bh++) rates[bh] = rate_(r, (bh + idx) % 3 == 2 && BH < 3 ? 1 : (bh + idx) % 3);
    for (size_t row = 0; row < n; row++) {
        size_t b = row / ((size_t)d->T * d->H);
        float x = rates[b * d->H + row % d->H] * (0.5f + gc_uniform(r));
        g[row] = x < -5.0f ? -5.0f : x > -1e-3f ? -1e-3f : x;
    }
    free(rates);
    return g;
}

// one case's tensors on the host; sizes of each
typedef struct Tensors {
    DeltaDims d;
    size_t nK, nV, nH, nck;
    float *q, *k, *v, *beta, *g, *dout;       // inputs
    float *pq, *pk, *pv, *pb, *pg;            // the gradient buffers' values before the backward
    float *o, *ckpt, *dq, *dk, *dv, *db, *dg; // results
    float *o_nockpt;                          // the GPU's o from a forward without checkpoints
} Tensors;

static void results_alloc_(Tensors *t) {
    t->o = malloc(t->nV * sizeof(float));
    t->ckpt = malloc(t->nck * sizeof(float));
    t->dq = kc_copy(t->pq, t->nK), t->dk = kc_copy(t->pk, t->nK), t->dv = kc_copy(t->pv, t->nV);
    t->db = kc_copy(t->pb, t->nH), t->dg = kc_copy(t->pg, t->nH);
}

static void results_free_(Tensors *t) {
    free(t->o_nockpt), free(t->o), free(t->ckpt), free(t->dq), free(t->dk), free(t->dv), free(t->db), free(t->dg);
}

static void tensors_make_(Tensors *t, const Case *c, int idx) {
    memset(t, 0, sizeof *t);
    DeltaDims d = {c->B, c->T, c->H, c->Dk, c->Dv, c->chunk, 1.0f / sqrtf((float)c->Dk)};
    t->d = d;
    GcRng r = {2000 + 31 * (uint64_t)idx};
    t->nH = (size_t)d.B * d.T * d.H, t->nK = t->nH * d.Dk, t->nV = t->nH * d.Dv, t->nck = delta_ckpt_size(&d);
    t->q = gc_randn(&r, t->nK, 1.0f), t->k = gc_randn(&r, t->nK, 1.0f), t->v = gc_randn(&r, t->nV, 1.0f);
    scan_l2_rows(t->q, t->nH, d.Dk);
    scan_l2_rows(t->k, t->nH, d.Dk);
    t->beta = malloc(t->nH * sizeof(float));
    for (size_t i = 0; i < t->nH; i++) t->beta[i] = 0.05f + (c->beta_hi - 0.05f) * gc_uniform(&r);
    t->g = c->gated ? make_g_(&d, &r, idx) : NULL;
    t->dout = gc_randn(&r, t->nV, 1.0f);
    t->pq = gc_randn(&r, t->nK, 0.5f), t->pk = gc_randn(&r, t->nK, 0.5f), t->pv = gc_randn(&r, t->nV, 0.5f);
    t->pb = c->no_db ? NULL : gc_randn(&r, t->nH, 0.5f);
    t->pg = c->gated && !c->no_dg ? gc_randn(&r, t->nH, 0.5f) : NULL;
}

static void tensors_free_(Tensors *t) {
    free(t->q), free(t->k), free(t->v), free(t->beta), free(t->g), free(t->dout);
    free(t->pq), free(t->pk), free(t->pv), free(t->pb), free(t->pg);
}

// nn/delta.c on the host into t's results
static void run_cpu_(Tensors *t) {
    results_alloc_(t);
    delta_forward(t->o, t->ckpt, NULL, t->q, t->k, t->v, t->beta, t->g, &t->d);
    delta_backward(t->dq, t->dk, t->dv, t->db, t->dg, t->dout, t->ckpt, t->q, t->k, t->v, t->beta, t->g, &t->d);
}

// the GPU's forward and backward on t's inputs into t's results
static void run_gpu_(Tensors *t) {
    results_alloc_(t);
    float *q = kc_up(t->q, t->nK), *k = kc_up(t->k, t->nK), *v = kc_up(t->v, t->nV), *beta = kc_up(t->beta, t->nH);
    float *g = kc_up(t->g, t->nH), *dout = kc_up(t->dout, t->nV);
    float *dq = kc_up(t->dq, t->nK), *dk = kc_up(t->dk, t->nK), *dv = kc_up(t->dv, t->nV);
    float *db = kc_up(t->db, t->nH), *dg = kc_up(t->dg, t->nH);
    float *o = gpu_devbuf_alloc(t->nV), *ckpt = gpu_devbuf_alloc(gpu_delta_ckpt_size(&t->d));
    float *scratch = gpu_devbuf_alloc(gpu_delta_scratch_size(&t->d));
    gpu_delta_forward(o, ckpt, q, k, v, beta, g, scratch, &t->d);
    gpu_delta_backward(dq, dk, dv, db, dg, dout, ckpt, q, k, v, beta, g, scratch, &t->d);
    gpu_devbuf_to_host(t->o, o, t->nV);
    gpu_devbuf_to_host(t->ckpt, ckpt, t->nck);
    gpu_delta_forward(o, NULL, q, k, v, beta, g, scratch, &t->d);  // no backward follows: the states in scratch
    t->o_nockpt = kc_down(o, t->nV);
    gpu_devbuf_to_host(t->dq, dq, t->nK), gpu_devbuf_to_host(t->dk, dk, t->nK), gpu_devbuf_to_host(t->dv, dv, t->nV);
    if (db) gpu_devbuf_to_host(t->db, db, t->nH);
    if (dg) gpu_devbuf_to_host(t->dg, dg, t->nH);
    float *bufs[] = {q, k, v, beta, g, dout, dq, dk, dv, db, dg, o, ckpt, scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) gpu_devbuf_free(bufs[i]);
}

static void run_case_(const Case *c, int idx) {
    char name[160];
    snprintf(name, sizeof name, "%s, beta < %.1f%s%s, B %d T %d H %d Dk %d Dv %d chunk %d",
             c->gated ? "gated" : "no decay", c->beta_hi, c->no_db ? ", dbeta NULL" : "",
             c->no_dg ? ", dg NULL" : "", c->B, c->T, c->H, c->Dk, c->Dv, c->chunk);
    Tensors cpu, gpu, again;
    tensors_make_(&cpu, c, idx);
    gpu = cpu, again = cpu;
    run_cpu_(&cpu);
    run_gpu_(&gpu);
    run_gpu_(&again);
    double eo = kc_rel_err(gpu.o, cpu.o, NULL, cpu.nV), ec = kc_rel_err(gpu.ckpt, cpu.ckpt, NULL, cpu.nck);
    CHECK(eo <= TOL_FWD, "%s: o (%.2g)", name, eo);
    CHECK(ec <= TOL_FWD, "%s: checkpoints (%.2g)", name, ec);
    double eq = kc_rel_err(gpu.dq, cpu.dq, cpu.pq, cpu.nK), ek = kc_rel_err(gpu.dk, cpu.dk, cpu.pk, cpu.nK);
    double ev = kc_rel_err(gpu.dv, cpu.dv, cpu.pv, cpu.nV);
    CHECK(eq <= TOL_GRAD && ek <= TOL_GRAD && ev <= TOL_GRAD, "%s: dq, dk, dv accumulated (%.2g, %.2g, %.2g)", name,
          eq, ek, ev);
    if (cpu.db) {
        double eb = kc_rel_err(gpu.db, cpu.db, cpu.pb, cpu.nH);
        CHECK(eb <= TOL_GRAD, "%s: dbeta accumulated (%.2g)", name, eb);
    }
    if (cpu.dg) {
        double eg = kc_rel_err(gpu.dg, cpu.dg, cpu.pg, cpu.nH);
        CHECK(eg <= TOL_GRAD, "%s: dg accumulated (%.2g)", name, eg);
    }
    int same = kc_same_bits(gpu.o, again.o, cpu.nV) && kc_same_bits(gpu.ckpt, again.ckpt, cpu.nck) &&
               kc_same_bits(gpu.dq, again.dq, cpu.nK) && kc_same_bits(gpu.dk, again.dk, cpu.nK) &&
               kc_same_bits(gpu.dv, again.dv, cpu.nV) && kc_same_bits(gpu.db, again.db, cpu.nH) &&
               kc_same_bits(gpu.dg, again.dg, cpu.nH);
    CHECK(same, "%s: a second run gives the same bits", name);
    CHECK(kc_same_bits(gpu.o, gpu.o_nockpt, cpu.nV), "%s: o without checkpoints has the same bits", name);
    results_free_(&cpu), results_free_(&gpu), results_free_(&again);
    tensors_free_(&cpu);
}

static void refusals_(void) {
    DeltaDims d = {2, 100, 2, 16, 16, 65, 0.25f};
    const char *why = gpu_delta_refusal(&d);
    CHECK(why && strstr(why, "chunk"), "refused: a chunk of 65 tokens (%s)", why ? why : "taken");
    d.T = 50;
    why = gpu_delta_refusal(&d);
    CHECK(!why, "taken: chunk 65 at T 50, one chunk of 50 tokens (%s)", why ? why : "taken");
    d.chunk = 64, d.Dk = 257;
    why = gpu_delta_refusal(&d);
    CHECK(why && strstr(why, "Dk"), "refused: Dk 257 (%s)", why ? why : "taken");
    d.Dk = 256, d.Dv = 1000;
    why = gpu_delta_refusal(&d);
    CHECK(!why, "taken: Dk 256, Dv 1000 (%s)", why ? why : "taken");
    d.Dv = 0;
    why = gpu_delta_refusal(&d);
    CHECK(why != NULL, "refused: Dv 0 (%s)", why ? why : "taken");
}

int main(void) {
    refusals_();
    if (!kc_have_device("gpu delta", "the delta-rule kernels")) return kc_skipped();
    for (int i = 0; i < N_CASES_; i++) run_case_(&CASES_[i], i);
    return test_summary();
}
