/*
 * KLA's Kalman filter scan on the GPU (gpu/kalman.cuh) against nn/kalman.c on the host:
 *   - forward: y, yvar (or NULL) and the chunk checkpoints (the same layout on both devices),
 *   - backward: dv, dprec, dk, dq, dabar, dpbar, accumulated into buffers that already hold values (the GPU must
 *     add, not overwrite), with dyvar given or NULL,
 *   - two runs give the same bits (every output and gradient), and a forward without checkpoints or yvar gives y's,
 *   - the step, token by token from kalman_state_init's state with a stride past the state (left untouched):
 *     against kalman_step (y, yvar and the state) and against the GPU forward's y and yvar, bit for bit (the same
 *     device functions).
 * Shapes: B 1-2; T 1, T < chunk, T a few chunks and not a multiple; S 1, 8, 16, 32, 40 and 48 (two slots a lane,
 * the second half-used), 64; M from 2 to 10 (two and three groups of channels, a last group of 1 or 2); the backward's
 * chunk states in shared memory with 8 or 4 warps a block, and in the scratch (a chunk of 128 with S 48). Inputs:
 * prec log-uniform in [0.1, 10], abar in (0.5, 0.99) or near 1 (0.999 .. 0.999999), pbar in [0, 0.05) or 0 (no
 * process noise: the floor 1e-12 and no gradient to pbar), v, k, q, dy, dyvar N(0, 1).
 *
 * Tolerance, relative to the largest magnitude of the compared tensor (of the gradient itself for an accumulated
 * buffer): 2e-5 for y, yvar, the checkpoints and the step, 1e-4 for the gradients. Both devices run the same fp32
 * expressions per slot; they differ in the order of the sums over s (a shuffle tree against the host's vectorised
 * sum), for dk, dq in the grouping of the sum over m (groups of 8 channels against the host's blocks), and on a GPU
 * in fused multiply-adds (nvcc contracts; the host's ISO C and the emulator's ISO C++ do not, so there the per-slot
 * recursion, the checkpoints and the dynamics' gradients match bit for bit). The filter forgets its past
 * (abar / den < 1), so a rounding difference does not grow along t: the forward's elements differ by a few ulp of
 * the largest terms (emulated: at most 1.5e-7). The backward's adjoints run through T steps of divisions and their
 * gradients sum over s, m and t terms that cancel (dabar, dpbar: every token's terms of a (m, s)), so they get the
 * looser bound (emulated: at most 2.6e-7); measured maxima are printed per case and over all cases at the end.
 * Built against the CUDA backend (make CUDA=1) and, with SEQ_GPU_EMULATE, against its kernels emulated on the CPU
 * (tests/gpu/emu/: make build/release/tests-gpuemu/test_gpu_kalman). Exit status 77 and a "skipped" line when the
 * build has no usable GPU.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../gradcheck.h"
#include "../test.h"
#include "gpu/devbuf.h"
#include "gpu/kalman.cuh"
#include "kernel_check.h"
#include "nn/kalman.h"

#define TOL_FWD 2e-5
#define TOL_GRAD 1e-4
#define STEP_TOKENS 40  // the step runs the first tokens of a case (a launch a token)

typedef struct Case {
    int B, T, M, S, chunk;
    int var;       // yvar and dyvar given (else NULL)
    int near1;     // abar near 1
    int no_noise;  // pbar = 0
} Case;

static const Case CASES_[] = {
    {2, 70, 5, 16, 16, 1, 0, 0},   // T not a multiple of the chunk
    {2, 1, 3, 8, 16, 1, 0, 0},     // T 1
    {2, 40, 3, 1, 8, 1, 0, 0},     // S 1
    {1, 130, 3, 8, 64, 0, 0, 0},   // full chunks of 64 and a part; no yvar
    {2, 50, 4, 32, 16, 1, 0, 1},   // S 32, a lane a slot; no process noise
    {1, 45, 3, 48, 16, 1, 1, 0},   // two slots a lane; abar near 1
    {1, 30, 2, 16, 100, 0, 0, 0},  // chunk > T; no yvar
    {1, 150, 3, 48, 128, 1, 0, 0}, // the chunk's states do not fit in shared memory: in the scratch
    {2, 40, 10, 64, 8, 1, 0, 0},   // S 64; two groups of channels, the last of 2
    {1, 60, 9, 40, 64, 1, 1, 1},   // 4 warps a block (the states fit then): three groups, the last of 1
};
#define N_CASES_ (int)(sizeof CASES_ / sizeof CASES_[0])

// the largest errors over all cases, per tensor
enum { E_Y, E_YVAR, E_CKPT, E_DV, E_DPREC, E_DK, E_DQ, E_DABAR, E_DPBAR, E_STEP, E_N };
static const char *ERR_NAME_[E_N] = {"y", "yvar", "ckpt", "dv", "dprec", "dk", "dq", "dabar", "dpbar", "step"};
static double max_err_[E_N];

static double track_(int which, double e) {
    if (e > max_err_[which]) max_err_[which] = e;
    return e;
}

// one case's tensors on the host; sizes of each
typedef struct Tensors {
    Case c;
    size_t nM, nS, nD, nck;                       // B T M, B T S, M S, checkpoint floats
    float *v, *prec, *k, *q, *abar, *pbar, *dy, *dyvar;  // inputs (dyvar NULL without var)
    float *pv, *pprec, *pk, *pq, *pa, *pp;        // the gradient buffers' values before the backward
    float *y, *yvar, *ckpt, *dv, *dprec, *dk, *dq, *dabar, *dpbar;  // results
    float *y_plain;                               // the GPU's y from a forward without checkpoints or yvar
} Tensors;

static void results_alloc_(Tensors *t) {
    t->y = malloc(t->nM * sizeof(float));
    t->yvar = t->c.var ? malloc(t->nM * sizeof(float)) : NULL;
    t->ckpt = malloc(t->nck * sizeof(float));
    t->dv = kc_copy(t->pv, t->nM), t->dprec = kc_copy(t->pprec, t->nM);
    t->dk = kc_copy(t->pk, t->nS), t->dq = kc_copy(t->pq, t->nS);
    t->dabar = kc_copy(t->pa, t->nD), t->dpbar = kc_copy(t->pp, t->nD);
    t->y_plain = NULL;
}

static void results_free_(Tensors *t) {
    free(t->y), free(t->yvar), free(t->ckpt), free(t->dv), free(t->dprec), free(t->dk), free(t->dq);
    free(t->dabar), free(t->dpbar), free(t->y_plain);
}

static float *uniform_(GcRng *r, size_t n, float lo, float hi) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * gc_uniform(r);
    return x;
}

static void tensors_make_(Tensors *t, const Case *c, int idx) {
    memset(t, 0, sizeof *t);
    t->c = *c;
    GcRng r = {3000 + 37 * (uint64_t)idx};
    t->nM = (size_t)c->B * c->T * c->M, t->nS = (size_t)c->B * c->T * c->S, t->nD = (size_t)c->M * c->S;
    t->nck = kalman_ckpt_size(c->B, c->T, c->M, c->S, c->chunk);
    t->v = gc_randn(&r, t->nM, 1.0f);
    t->prec = uniform_(&r, t->nM, logf(0.1f), logf(10.0f));
    for (size_t i = 0; i < t->nM; i++) t->prec[i] = expf(t->prec[i]);
    t->k = gc_randn(&r, t->nS, 1.0f), t->q = gc_randn(&r, t->nS, 1.0f);
    t->abar = c->near1 ? uniform_(&r, t->nD, 0.999f, 0.999999f) : uniform_(&r, t->nD, 0.5f, 0.99f);
    t->pbar = uniform_(&r, t->nD, 0.0f, c->no_noise ? 0.0f : 0.05f);
    t->dy = gc_randn(&r, t->nM, 1.0f);
    t->dyvar = c->var ? gc_randn(&r, t->nM, 1.0f) : NULL;
    t->pv = gc_randn(&r, t->nM, 0.5f), t->pprec = gc_randn(&r, t->nM, 0.5f);
    t->pk = gc_randn(&r, t->nS, 0.5f), t->pq = gc_randn(&r, t->nS, 0.5f);
    t->pa = gc_randn(&r, t->nD, 0.5f), t->pp = gc_randn(&r, t->nD, 0.5f);
}

static void tensors_free_(Tensors *t) {
    free(t->v), free(t->prec), free(t->k), free(t->q), free(t->abar), free(t->pbar), free(t->dy), free(t->dyvar);
    free(t->pv), free(t->pprec), free(t->pk), free(t->pq), free(t->pa), free(t->pp);
}

// nn/kalman.c on the host into t's results
static void run_cpu_(Tensors *t) {
    const Case *c = &t->c;
    results_alloc_(t);
    float *scratch = malloc(kalman_scratch_size(c->B, c->T, c->M, c->S) * sizeof(float));
    kalman_scan_forward(t->y, t->yvar, t->ckpt, t->v, t->prec, t->k, t->q, t->abar, t->pbar, c->B, c->T, c->M, c->S,
                        c->chunk);
    kalman_scan_backward(t->dv, t->dprec, t->dk, t->dq, t->dabar, t->dpbar, t->dy, t->dyvar, t->ckpt, t->v, t->prec,
                         t->k, t->q, t->abar, t->pbar, c->B, c->T, c->M, c->S, c->chunk, scratch);
    free(scratch);
}

// the GPU's forward and backward on t's inputs into t's results, then a forward without checkpoints or yvar
static void run_gpu_(Tensors *t) {
    const Case *c = &t->c;
    results_alloc_(t);
    float *v = kc_up(t->v, t->nM), *prec = kc_up(t->prec, t->nM), *k = kc_up(t->k, t->nS), *q = kc_up(t->q, t->nS);
    float *abar = kc_up(t->abar, t->nD), *pbar = kc_up(t->pbar, t->nD), *dy = kc_up(t->dy, t->nM);
    float *dyvar = kc_up(t->dyvar, t->nM);
    float *dv = kc_up(t->dv, t->nM), *dprec = kc_up(t->dprec, t->nM), *dk = kc_up(t->dk, t->nS);
    float *dq = kc_up(t->dq, t->nS), *dabar = kc_up(t->dabar, t->nD), *dpbar = kc_up(t->dpbar, t->nD);
    float *y = gpu_devbuf_alloc(t->nM), *yvar = c->var ? gpu_devbuf_alloc(t->nM) : NULL;
    float *ckpt = gpu_devbuf_alloc(gpu_kalman_ckpt_size(c->B, c->T, c->M, c->S, c->chunk));
    float *scratch = gpu_devbuf_alloc(gpu_kalman_scratch_size(c->B, c->T, c->M, c->S, c->chunk));
    gpu_kalman_scan_forward(y, yvar, ckpt, v, prec, k, q, abar, pbar, c->B, c->T, c->M, c->S, c->chunk);
    gpu_kalman_scan_backward(dv, dprec, dk, dq, dabar, dpbar, dy, dyvar, ckpt, v, prec, k, q, abar, pbar, c->B, c->T,
                             c->M, c->S, c->chunk, scratch);
    gpu_devbuf_to_host(t->y, y, t->nM);
    if (yvar) gpu_devbuf_to_host(t->yvar, yvar, t->nM);
    gpu_devbuf_to_host(t->ckpt, ckpt, t->nck);
    gpu_devbuf_to_host(t->dv, dv, t->nM), gpu_devbuf_to_host(t->dprec, dprec, t->nM);
    gpu_devbuf_to_host(t->dk, dk, t->nS), gpu_devbuf_to_host(t->dq, dq, t->nS);
    gpu_devbuf_to_host(t->dabar, dabar, t->nD), gpu_devbuf_to_host(t->dpbar, dpbar, t->nD);
    gpu_kalman_scan_forward(y, NULL, NULL, v, prec, k, q, abar, pbar, c->B, c->T, c->M, c->S, c->chunk);
    t->y_plain = kc_down(y, t->nM);
    float *bufs[] = {v, prec, k, q, abar, pbar, dy, dyvar, dv, dprec, dk, dq, dabar, dpbar, y, yvar, ckpt, scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) gpu_devbuf_free(bufs[i]);
}

// max |a - b| over n and max |b| into *e, *s
static void diff_(const float *a, const float *b, size_t n, double *e, double *s) {
    for (size_t i = 0; i < n; i++) {
        *e = a[i] != a[i] ? INFINITY : fmax(*e, fabs((double)a[i] - b[i]));
        *s = fmax(*s, fabs((double)b[i]));
    }
}

// the step from kalman_state_init's state over the case's first tokens, against kalman_step on the host and the
// GPU forward's y, yvar (gpu)
static void step_check_(const Tensors *cpu, const Tensors *gpu, const char *name) {
    const Case *c = &cpu->c;
    int B = c->B, M = c->M, S = c->S, T = c->T, n = T < STEP_TOKENS ? T : STEP_TOKENS;
    size_t stride = 2 * (size_t)M * S + 3, BM = (size_t)B * M, BS = (size_t)B * S;  // 3 floats of other state
    float *hs = malloc(B * stride * sizeof(float));
    for (int b = 0; b < B; b++) {
        kalman_state_init(hs + b * stride, 1, M, S);
        for (int i = 0; i < 3; i++) hs[b * stride + 2 * (size_t)M * S + i] = 7.0f + i;
    }
    float *hv = malloc(BM * sizeof(float)), *hp = malloc(BM * sizeof(float)), *hk = malloc(BS * sizeof(float));
    float *hq = malloc(BS * sizeof(float)), *hy = malloc(BM * sizeof(float)), *hyv = malloc(BM * sizeof(float));
    float *gy = malloc(BM * sizeof(float)), *gyv = malloc(BM * sizeof(float));
    float *ds = kc_up(hs, B * stride), *dv = gpu_devbuf_alloc(BM), *dp = gpu_devbuf_alloc(BM);
    float *dk = gpu_devbuf_alloc(BS), *dq = gpu_devbuf_alloc(BS), *dy = gpu_devbuf_alloc(BM);
    float *dyv = c->var ? gpu_devbuf_alloc(BM) : NULL;
    float *abar = kc_up(cpu->abar, cpu->nD), *pbar = kc_up(cpu->pbar, cpu->nD);
    double e = 0.0, s = 0.0;
    int same = 1;
    for (int t = 0; t < n; t++) {
        for (int b = 0; b < B; b++) {
            size_t row = (size_t)b * T + t;
            memcpy(hv + (size_t)b * M, cpu->v + row * M, M * sizeof(float));
            memcpy(hp + (size_t)b * M, cpu->prec + row * M, M * sizeof(float));
            memcpy(hk + (size_t)b * S, cpu->k + row * S, S * sizeof(float));
            memcpy(hq + (size_t)b * S, cpu->q + row * S, S * sizeof(float));
        }
        gpu_devbuf_to_device(dv, hv, BM), gpu_devbuf_to_device(dp, hp, BM);
        gpu_devbuf_to_device(dk, hk, BS), gpu_devbuf_to_device(dq, hq, BS);
        gpu_kalman_step(dy, dyv, ds, stride, dv, dp, dk, dq, abar, pbar, B, M, S);
        kalman_step(hy, c->var ? hyv : NULL, hs, stride, hv, hp, hk, hq, cpu->abar, cpu->pbar, B, M, S);
        gpu_devbuf_to_host(gy, dy, BM);
        diff_(gy, hy, BM, &e, &s);
        if (c->var) gpu_devbuf_to_host(gyv, dyv, BM), diff_(gyv, hyv, BM, &e, &s);
        for (int b = 0; b < B; b++) {
            size_t row = (size_t)b * T + t;
            same &= !memcmp(gy + (size_t)b * M, gpu->y + row * M, M * sizeof(float));
            if (c->var) same &= !memcmp(gyv + (size_t)b * M, gpu->yvar + row * M, M * sizeof(float));
        }
    }
    e = s > 0 ? e / s : e;
    CHECK(track_(E_STEP, e) <= TOL_FWD, "%s: step y%s over %d tokens against kalman_step (%.2g)", name,
          c->var ? ", yvar" : "", n, e);
    CHECK(same, "%s: step gives the GPU forward's bits", name);
    float *gs = kc_down(ds, B * stride);
    double es = 0.0, ss = 0.0;
    int rest = 1;
    for (int b = 0; b < B; b++) {
        diff_(gs + b * stride, hs + b * stride, 2 * (size_t)M * S, &es, &ss);
        for (int i = 0; i < 3; i++) rest &= gs[b * stride + 2 * (size_t)M * S + i] == 7.0f + i;
    }
    es = ss > 0 ? es / ss : es;
    CHECK(es <= TOL_FWD && rest, "%s: step state against kalman_step's (%.2g), the rest of the stride untouched",
          name, es);
    free(gs);
    float *dbufs[] = {ds, dv, dp, dk, dq, dy, dyv, abar, pbar};
    for (size_t i = 0; i < sizeof dbufs / sizeof dbufs[0]; i++)
        if (dbufs[i]) gpu_devbuf_free(dbufs[i]);
    free(hs), free(hv), free(hp), free(hk), free(hq), free(hy), free(hyv), free(gy), free(gyv);
}

// 1 when the backward added something to the buffer (want against its value before)
static int moved_(const float *want, const float *base, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (want[i] != base[i]) return 1;
    return 0;
}

static void run_case_(const Case *c, int idx) {
    char name[160];
    snprintf(name, sizeof name, "B %d T %d M %d S %d chunk %d%s%s%s", c->B, c->T, c->M, c->S, c->chunk,
             c->var ? ", yvar" : "", c->near1 ? ", abar near 1" : "", c->no_noise ? ", pbar 0" : "");
    Tensors cpu, gpu, again;
    tensors_make_(&cpu, c, idx);
    gpu = cpu, again = cpu;
    run_cpu_(&cpu);
    run_gpu_(&gpu);
    run_gpu_(&again);
    double ey = track_(E_Y, kc_rel_err(gpu.y, cpu.y, NULL, cpu.nM));
    double ev = c->var ? track_(E_YVAR, kc_rel_err(gpu.yvar, cpu.yvar, NULL, cpu.nM)) : 0.0;
    double ec = track_(E_CKPT, kc_rel_err(gpu.ckpt, cpu.ckpt, NULL, cpu.nck));
    CHECK(ey <= TOL_FWD && ev <= TOL_FWD && ec <= TOL_FWD, "%s: y, yvar, checkpoints (%.2g, %.2g, %.2g)", name, ey,
          ev, ec);
    double edv = track_(E_DV, kc_rel_err(gpu.dv, cpu.dv, cpu.pv, cpu.nM));
    double edp = track_(E_DPREC, kc_rel_err(gpu.dprec, cpu.dprec, cpu.pprec, cpu.nM));
    double edk = track_(E_DK, kc_rel_err(gpu.dk, cpu.dk, cpu.pk, cpu.nS));
    double edq = track_(E_DQ, kc_rel_err(gpu.dq, cpu.dq, cpu.pq, cpu.nS));
    CHECK(edv <= TOL_GRAD && edp <= TOL_GRAD && edk <= TOL_GRAD && edq <= TOL_GRAD,
          "%s: dv, dprec, dk, dq accumulated (%.2g, %.2g, %.2g, %.2g)", name, edv, edp, edk, edq);
    double eda = track_(E_DABAR, kc_rel_err(gpu.dabar, cpu.dabar, cpu.pa, cpu.nD));
    double edb = track_(E_DPBAR, kc_rel_err(gpu.dpbar, cpu.dpbar, cpu.pp, cpu.nD));
    CHECK(eda <= TOL_GRAD && edb <= TOL_GRAD, "%s: dabar, dpbar accumulated (%.2g, %.2g)", name, eda, edb);
    if (c->no_noise) CHECK(!memcmp(gpu.dpbar, cpu.pp, cpu.nD * sizeof(float)), "%s: pbar 0 gets no gradient", name);
    int moved = moved_(cpu.dv, cpu.pv, cpu.nM) && moved_(cpu.dprec, cpu.pprec, cpu.nM) &&
                moved_(cpu.dk, cpu.pk, cpu.nS) && moved_(cpu.dq, cpu.pq, cpu.nS) && moved_(cpu.dabar, cpu.pa, cpu.nD) &&
                (c->no_noise || moved_(cpu.dpbar, cpu.pp, cpu.nD));
    CHECK(moved, "%s: the host's backward adds to every gradient compared (no comparison of zeros)", name);
    int same = kc_same_bits(gpu.y, again.y, cpu.nM) && kc_same_bits(gpu.yvar, again.yvar, cpu.nM) &&
               kc_same_bits(gpu.ckpt, again.ckpt, cpu.nck) && kc_same_bits(gpu.dv, again.dv, cpu.nM) &&
               kc_same_bits(gpu.dprec, again.dprec, cpu.nM) && kc_same_bits(gpu.dk, again.dk, cpu.nS) &&
               kc_same_bits(gpu.dq, again.dq, cpu.nS) && kc_same_bits(gpu.dabar, again.dabar, cpu.nD) &&
               kc_same_bits(gpu.dpbar, again.dpbar, cpu.nD);
    CHECK(same, "%s: a second run gives the same bits", name);
    CHECK(kc_same_bits(gpu.y_plain, gpu.y, cpu.nM), "%s: a forward without checkpoints or yvar gives y's bits", name);
    step_check_(&cpu, &gpu, name);
    results_free_(&cpu), results_free_(&gpu), results_free_(&again);
    tensors_free_(&cpu);
}

int main(void) {
    CHECK(gpu_kalman_ckpt_size(2, 70, 5, 16, 16) == kalman_ckpt_size(2, 70, 5, 16, 16),
          "the checkpoints take kalman_ckpt_size floats");
    if (!kc_have_device("gpu kalman", "the Kalman scan kernels")) return kc_skipped();
    for (int i = 0; i < N_CASES_; i++) run_case_(&CASES_[i], i);
    printf("# largest errors over the cases:");
    for (int i = 0; i < E_N; i++) printf(" %s %.2g", ERR_NAME_[i], max_err_[i]);
    printf("\n");
    fflush(stdout);
    return test_summary();
}
