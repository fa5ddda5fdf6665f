/*
 * The plain names of every nn function: each routes the call to the copy of the active kernel set
 * (nn/isa.h explains the copies, core/cpu.h how the set is chosen). This file is compiled once, without
 * SEQ_ISA. Each copy is declared with the type of the header's prototype (__typeof__), so a copy whose
 * signature drifted from its header does not compile; a missing copy does not link.
 *
 * The cost is one indirect call per op call, against ops that each touch at least a row of data.
 *
 * SEQ_PROFILE=1 in the environment times every call that passes through here (wall clock, per op) and prints
 * the table to stderr at exit: where a run's time goes, on any machine, without a profiler.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cpu.h"
#include "nn/activation.h"
#include "nn/adamw.h"
#include "nn/attention.h"
#include "nn/bla.h"
#include "nn/blockdiag.h"
#include "nn/conv.h"
#include "nn/delta.h"
#include "nn/embedding.h"
#include "nn/groupnorm.h"
#include "nn/heads.h"
#include "nn/kalman.h"
#include "nn/linrec.h"
#include "nn/matmul.h"
#include "nn/norm.h"
#include "nn/path_attn.h"
#include "nn/rotary.h"
#include "nn/selrope.h"
#include "nn/xent.h"

// ----------------------------------------------------------------------------
// SEQ_PROFILE: per-op call counts and wall time. An op that calls another inside nn/ calls it directly (not
// through here), so its time includes the inner one's. An op called from inside a parallel region (by each
// thread) adds every thread's time: such rows are thread-seconds and may exceed the wall time.

#define PROF_MAX_ 96
typedef struct ProfEntry_ {
    const char *name;
    uint64_t calls, ns;
} ProfEntry_;
static ProfEntry_ prof_[PROF_MAX_];
static int prof_n_ = 0;
static int prof_on_ = -1;  // -1 until SEQ_PROFILE is read
static uint64_t prof_t0_ = 0;

static uint64_t now_ns_(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int prof_cmp_(const void *a, const void *b) {
    uint64_t x = ((const ProfEntry_ *)a)->ns, y = ((const ProfEntry_ *)b)->ns;
    return (x < y) - (x > y);
}

static void prof_print_(void) {
    double wall = (double)(now_ns_() - prof_t0_) * 1e-9, total = 0;
    qsort(prof_, (size_t)prof_n_, sizeof prof_[0], prof_cmp_);
    fprintf(stderr, "\nSEQ_PROFILE: nn ops, %s kernels, %.3f s since the first op\n", kernel_set_name(kernel_set()), wall);
    fprintf(stderr, "%-34s %10s %11s %7s\n", "op", "calls", "seconds", "% wall");
    for (int i = 0; i < prof_n_; i++) {
        double sec = (double)prof_[i].ns * 1e-9;
        total += sec;
        fprintf(stderr, "%-34s %10llu %11.3f %6.1f%%\n", prof_[i].name, (unsigned long long)prof_[i].calls, sec,
                100.0 * sec / wall);
    }
    fprintf(stderr, "%-34s %10s %11.3f %6.1f%%  (the rest: outside nn/ ops)\n", "all ops", "", total, 100.0 * total / wall);
}

static int profiling_(void) {
    int on = __atomic_load_n(&prof_on_, __ATOMIC_RELAXED);
    if (on >= 0) return on;
    const char *env = getenv("SEQ_PROFILE");
    on = env != NULL && env[0] != '\0' && strcmp(env, "0") != 0;
#pragma omp critical(seq_prof)
    {
        if (prof_on_ < 0) {
            prof_t0_ = now_ns_();
            if (on) atexit(prof_print_);
            __atomic_store_n(&prof_on_, on, __ATOMIC_RELAXED);
        }
    }
    return on;
}

// the entry of op `name`, created on its first timed call (-1 when the table is full: not timed)
static int prof_id_(const char *name) {
    int id = -1;
#pragma omp critical(seq_prof)
    {
        for (int i = 0; i < prof_n_ && id < 0; i++)
            if (prof_[i].name == name) id = i;
        if (id < 0 && prof_n_ < PROF_MAX_) {
            prof_[prof_n_].name = name;
            id = prof_n_++;
        }
    }
    return id;
}

// run CALL (a statement calling op f), timed when profiling
#define TIMED_(f, CALL)                                                   \
    if (!profiling_()) {                                                  \
        CALL;                                                             \
    } else {                                                              \
        static int id_ = -2;                                              \
        if (__atomic_load_n(&id_, __ATOMIC_RELAXED) == -2)                \
            __atomic_store_n(&id_, prof_id_(#f), __ATOMIC_RELAXED);       \
        uint64_t t0_ = now_ns_();                                         \
        CALL;                                                             \
        int i_ = __atomic_load_n(&id_, __ATOMIC_RELAXED);                 \
        if (i_ >= 0) {                                                    \
            __atomic_fetch_add(&prof_[i_].calls, 1, __ATOMIC_RELAXED);    \
            __atomic_fetch_add(&prof_[i_].ns, now_ns_() - t0_, __ATOMIC_RELAXED); \
        }                                                                 \
    }

// COPIES_(f): the table of f's copies, indexed by KernelSet (the x86 sets exist only where the Makefile
// built them: SEQ_X86_SETS)
#if defined(SEQ_X86_SETS)
#define COPIES_(f)                                                \
    extern __typeof__(f) f##_generic, f##_avx2, f##_avx512;       \
    static __typeof__(f) *const f##_copies_[KSET_COUNT] = {f##_generic, f##_avx2, f##_avx512};
#else
#define COPIES_(f)                                                \
    extern __typeof__(f) f##_generic;                             \
    static __typeof__(f) *const f##_copies_[KSET_COUNT] = {f##_generic, f##_generic, f##_generic};
#endif
// a function returning void / a value: its copies and its definition under the plain name
#define VOID_(f, params, args) \
    COPIES_(f)                 \
    void f params { TIMED_(f, f##_copies_[kernel_set()] args) }
#define RET_(type, f, params, args)                   \
    COPIES_(f)                                        \
    type f params {                                   \
        type r_;                                      \
        TIMED_(f, r_ = f##_copies_[kernel_set()] args) \
        return r_;                                    \
    }

// activation.h
VOID_(gelu_forward, (float *out, const float *inp, size_t n), (out, inp, n))
VOID_(gelu_backward, (float *dinp, const float *inp, const float *dout, size_t n), (dinp, inp, dout, n))
VOID_(relu_forward, (float *out, const float *inp, size_t n), (out, inp, n))
VOID_(relu_backward, (float *dinp, const float *inp, const float *dout, size_t n), (dinp, inp, dout, n))
VOID_(silu_forward, (float *out, const float *inp, size_t n), (out, inp, n))
VOID_(silu_backward, (float *dinp, const float *inp, const float *dout, size_t n), (dinp, inp, dout, n))
VOID_(swiglu_forward, (float *out, const float *inp, int N, int H), (out, inp, N, H))
VOID_(swiglu_backward, (float *dinp, const float *inp, const float *dout, int N, int H), (dinp, inp, dout, N, H))
VOID_(residual_forward, (float *out, const float *a, const float *b, size_t n), (out, a, b, n))
VOID_(residual_backward, (float *da, float *db, const float *dout, size_t n), (da, db, dout, n))
VOID_(zero_fill, (float *x, size_t n), (x, n))

// adamw.h
VOID_(adamw_update,
      (float *params, float *m, float *v, const float *grads, size_t n, float decay, float beta1, float beta2,
       float step, float inv_sqrt_bc2, float eps),
      (params, m, v, grads, n, decay, beta1, beta2, step, inv_sqrt_bc2, eps))

// attention.h
RET_(AttnOpts, attn_opts_default, (int HS), (HS))
VOID_(alibi_slopes, (float *slopes, int NH), (slopes, NH))
VOID_(attention_forward,
      (float *out, float *lse, const float *q, const float *k, const float *v, const AttnOpts *o, int B, int NH,
       int T, int HS),
      (out, lse, q, k, v, o, B, NH, T, HS))
VOID_(attention_backward,
      (float *dq, float *dk, float *dv, float *dfgate, float *ddecay, const float *dout, const float *out,
       const float *lse, const float *q, const float *k, const float *v, const AttnOpts *o, int B, int NH, int T,
       int HS),
      (dq, dk, dv, dfgate, ddecay, dout, out, lse, q, k, v, o, B, NH, T, HS))
VOID_(attention_backward_write,
      (float *dq, float *dk, float *dv, float *dfgate, float *ddecay, const float *dout, const float *out,
       const float *lse, const float *q, const float *k, const float *v, const AttnOpts *o, int B, int NH, int T,
       int HS),
      (dq, dk, dv, dfgate, ddecay, dout, out, lse, q, k, v, o, B, NH, T, HS))
VOID_(attention_probs,
      (float *P, const float *q, const float *k, const float *lse, const AttnOpts *o, int b, int h, int NH, int T,
       int HS),
      (P, q, k, lse, o, b, h, NH, T, HS))
VOID_(attention_step,
      (float *out, const float *q, const float *k, const float *v, const float *g, float *kcache, float *vcache,
       float *gcache, size_t stride, const AttnOpts *o, int t, int B, int NH, int HS, int S),
      (out, q, k, v, g, kcache, vcache, gcache, stride, o, t, B, NH, HS, S))

// bla.h
VOID_(bla_coeffs, (float *c, float *g, long t0, int n, const BlaDims *d), (c, g, t0, n, d))
RET_(size_t, bla_work_size, (const BlaDims *d, int backward), (d, backward))
RET_(size_t, bla_ckpt_size, (const BlaDims *d), (d))
RET_(size_t, bla_state_size, (const BlaDims *d), (d))
VOID_(bla_state_init, (float *state, const BlaDims *d), (state, d))
VOID_(bla_forward,
      (float *o, float *p, float *ckpt, const float *q, const float *k, const float *v, float *work, const BlaDims *d),
      (o, p, ckpt, q, k, v, work, d))
VOID_(bla_backward,
      (float *dq, float *dk, float *dv, const float *dout, const float *p, const float *ckpt, const float *q,
       const float *k, const float *v, float *work, const BlaDims *d),
      (dq, dk, dv, dout, p, ckpt, q, k, v, work, d))
VOID_(bla_step,
      (float *o, float *p, float *state, const float *q, const float *k, const float *v, long t, const BlaDims *d),
      (o, p, state, q, k, v, t, d))

// blockdiag.h
VOID_(blockdiag_forward, (float *out, const float *inp, const float *w, int N, int G, int Di, int Do),
      (out, inp, w, N, G, Di, Do))
VOID_(blockdiag_backward,
      (float *dinp, float *dw, const float *dout, const float *inp, const float *w, int N, int G, int Di, int Do),
      (dinp, dw, dout, inp, w, N, G, Di, Do))

// conv.h
VOID_(conv1d_causal_forward,
      (float *out, const float *inp, const float *weight, const float *bias, int B, int T, int C, int K),
      (out, inp, weight, bias, B, T, C, K))
VOID_(conv1d_causal_backward,
      (float *dinp, float *dweight, float *dbias, const float *dout, const float *inp, const float *weight, int B,
       int T, int C, int K),
      (dinp, dweight, dbias, dout, inp, weight, B, T, C, K))
VOID_(conv1d_causal_step,
      (float *out, float *state, const float *x, const float *weight, const float *bias, int B, int C, int K),
      (out, state, x, weight, bias, B, C, K))

// embedding.h
RET_(int, embedding_check_ids, (const int *ids, int N, int V), (ids, N, V))
VOID_(embedding_forward, (float *out, const int *ids, const float *wte, int N, int C), (out, ids, wte, N, C))
VOID_(embedding_backward, (float *dwte, const float *dout, const int *ids, int N, int C), (dwte, dout, ids, N, C))

// groupnorm.h
VOID_(groupnorm_forward,
      (float *out, float *mean, float *rstd, const float *x, const float *z, const float *w, int N, int G, int D,
       const GroupNormOpts *o),
      (out, mean, rstd, x, z, w, N, G, D, o))
VOID_(groupnorm_backward,
      (float *dx, float *dz, float *dw, const float *dout, const float *x, const float *z, const float *w,
       const float *mean, const float *rstd, int N, int G, int D, const GroupNormOpts *o),
      (dx, dz, dw, dout, x, z, w, mean, rstd, N, G, D, o))

// heads.h
VOID_(heads_split, (float *dst, const float *src, int B, int T, int H, int D), (dst, src, B, T, H, D))
VOID_(heads_merge, (float *dst, const float *src, int B, int T, int H, int D), (dst, src, B, T, H, D))

// kalman.h
RET_(size_t, kalman_ckpt_size, (int B, int T, int M, int S, int chunk), (B, T, M, S, chunk))
RET_(size_t, kalman_scratch_size, (int B, int T, int M, int S), (B, T, M, S))
VOID_(kalman_scan_forward,
      (float *y, float *yvar, float *ckpt, const float *v, const float *prec, const float *k, const float *q,
       const float *abar, const float *pbar, int B, int T, int M, int S, int chunk),
      (y, yvar, ckpt, v, prec, k, q, abar, pbar, B, T, M, S, chunk))
VOID_(kalman_scan_backward,
      (float *dv, float *dprec, float *dk, float *dq, float *dabar, float *dpbar, const float *dy,
       const float *dyvar, const float *ckpt, const float *v, const float *prec, const float *k, const float *q,
       const float *abar, const float *pbar, int B, int T, int M, int S, int chunk, float *scratch),
      (dv, dprec, dk, dq, dabar, dpbar, dy, dyvar, ckpt, v, prec, k, q, abar, pbar, B, T, M, S, chunk, scratch))
VOID_(kalman_state_init, (float *state, int B, int M, int S), (state, B, M, S))
VOID_(kalman_attention_matrix,
      (float *P, const float *prec, const float *k, const float *q, const float *abar, const float *pbar, int T, int M,
       int S, int m),
      (P, prec, k, q, abar, pbar, T, M, S, m))
VOID_(kalman_step,
      (float *y, float *yvar, float *state, size_t stride, const float *v, const float *prec, const float *k,
       const float *q, const float *abar, const float *pbar, int B, int M, int S),
      (y, yvar, state, stride, v, prec, k, q, abar, pbar, B, M, S))

// delta.h
RET_(size_t, delta_state_size, (const DeltaDims *d), (d))
RET_(size_t, delta_ckpt_size, (const DeltaDims *d), (d))
VOID_(delta_state_init, (float *state, const DeltaDims *d), (state, d))
VOID_(delta_forward,
      (float *o, float *ckpt, float *state, const float *q, const float *k, const float *v, const float *beta,
       const float *g, const DeltaDims *d),
      (o, ckpt, state, q, k, v, beta, g, d))
VOID_(delta_backward,
      (float *dq, float *dk, float *dv, float *dbeta, float *dg, const float *dout, const float *ckpt, const float *q,
       const float *k, const float *v, const float *beta, const float *g, const DeltaDims *d),
      (dq, dk, dv, dbeta, dg, dout, ckpt, q, k, v, beta, g, d))
VOID_(delta_step,
      (float *o, float *state, const float *q, const float *k, const float *v, const float *beta, const float *g,
       const DeltaDims *d),
      (o, state, q, k, v, beta, g, d))

// linrec.h
RET_(size_t, linrec_state_size, (const LinrecDims *d), (d))
RET_(size_t, linrec_ckpt_size, (const LinrecDims *d), (d))
VOID_(linrec_state_init, (float *state, const LinrecDims *d), (state, d))
VOID_(linrec_forward,
      (float *o, float *m, float *ckpt, float *state, const float *q, const float *k, const float *v, const float *g,
       const float *li, const LinrecDims *d),
      (o, m, ckpt, state, q, k, v, g, li, d))
VOID_(linrec_backward,
      (float *dq, float *dk, float *dv, float *dg, float *dli, const float *dout, const float *dm, const float *ckpt,
       const float *q, const float *k, const float *v, const float *g, const float *li, const LinrecDims *d),
      (dq, dk, dv, dg, dli, dout, dm, ckpt, q, k, v, g, li, d))
VOID_(linrec_step,
      (float *o, float *m, float *state, const float *q, const float *k, const float *v, const float *g,
       const float *li, const LinrecDims *d),
      (o, m, state, q, k, v, g, li, d))

// matmul.h
VOID_(matmul, (float *C, const float *A, const float *B, int M, int N, int K, int transA, int transB, int accumulate),
      (C, A, B, M, N, K, transA, transB, accumulate))
VOID_(matmul_fused,
      (float *C, const float *A, const float *B, int M, int N, int K, int transA, int transB, int accumulate,
       const MatmulFuse *f),
      (C, A, B, M, N, K, transA, transB, accumulate, f))
VOID_(matmul_forward, (float *out, const float *inp, const float *weight, const float *bias, int BT, int C, int OC),
      (out, inp, weight, bias, BT, C, OC))
VOID_(matmul_backward,
      (float *dinp, float *dweight, float *dbias, const float *dout, const float *inp, const float *weight, int BT,
       int C, int OC),
      (dinp, dweight, dbias, dout, inp, weight, BT, C, OC))

// norm.h
VOID_(layernorm_forward,
      (float *out, float *mean, float *rstd, const float *inp, const float *weight, const float *bias, int N, int C),
      (out, mean, rstd, inp, weight, bias, N, C))
VOID_(layernorm_backward,
      (float *dinp, float *dweight, float *dbias, const float *dout, const float *inp, const float *weight,
       const float *mean, const float *rstd, int N, int C),
      (dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C))
VOID_(l2norm_forward, (float *out, float *nrm, const float *inp, int N, int C, float eps, int mode),
      (out, nrm, inp, N, C, eps, mode))
VOID_(l2norm_backward,
      (float *dinp, const float *dout, const float *out, const float *nrm, int N, int C, float eps, int mode),
      (dinp, dout, out, nrm, N, C, eps, mode))
VOID_(rmsnorm_forward, (float *out, float *rstd, const float *inp, const float *weight, int N, int C),
      (out, rstd, inp, weight, N, C))
VOID_(rmsnorm_backward,
      (float *dinp, float *dweight, const float *dout, const float *inp, const float *weight, const float *rstd,
       int N, int C),
      (dinp, dweight, dout, inp, weight, rstd, N, C))

// path_attn.h
VOID_(path_attn_forward,
      (float *out, float *lse, const float *q, const float *k, const float *v, const float *w, const float *beta,
       const PathOpts *o, int B, int NH, int T, int HS),
      (out, lse, q, k, v, w, beta, o, B, NH, T, HS))
VOID_(path_attn_backward,
      (float *dq, float *dk, float *dv, float *dw, float *dbeta, float *dfgate, const float *dout, const float *out,
       const float *lse, const float *q, const float *k, const float *v, const float *w, const float *beta,
       const PathOpts *o, int B, int NH, int T, int HS),
      (dq, dk, dv, dw, dbeta, dfgate, dout, out, lse, q, k, v, w, beta, o, B, NH, T, HS))
VOID_(path_attn_step,
      (float *out, const float *q, const float *k, const float *v, const float *w, const float *beta, const float *g,
       float *kcache, float *vcache, float *gcache, const PathOpts *o, int t, int B, int NH, int HS, int maxT),
      (out, q, k, v, w, beta, g, kcache, vcache, gcache, o, t, B, NH, HS, maxT))

// rotary.h
VOID_(rotary_sc_bank, (float *freqs, float *decay, int NH, int half, double base, double damping, int n_zero),
      (freqs, decay, NH, half, base, damping, n_zero))
RET_(RotaryCfg, rotary_cfg_default, (void), ())
VOID_(rotary_table_init, (RotaryTable *tab, const RotaryCfg *cfg, int pos0, int T, int NH, int HS),
      (tab, cfg, pos0, T, NH, HS))
VOID_(rotary_table_free, (RotaryTable *tab), (tab))
VOID_(rotary_forward, (float *out, const float *inp, const RotaryCfg *cfg, int pos0, int B, int T, int NH, int HS),
      (out, inp, cfg, pos0, B, T, NH, HS))
VOID_(rotary_backward, (float *dinp, const float *dout, const RotaryCfg *cfg, int pos0, int B, int T, int NH, int HS),
      (dinp, dout, cfg, pos0, B, T, NH, HS))
VOID_(rotary_forward_table, (float *out, const float *inp, const RotaryTable *tab, int B), (out, inp, tab, B))
VOID_(rotary_backward_table, (float *dinp, const float *dout, const RotaryTable *tab, int B), (dinp, dout, tab, B))
VOID_(rotary_forward_heads_table, (float *out, const float *inp, const RotaryTable *tab, int B), (out, inp, tab, B))
VOID_(rotary_backward_heads_table, (float *dinp, const float *dout, const RotaryTable *tab, int B),
      (dinp, dout, tab, B))

// selrope.h
RET_(size_t, selrope_chain_state_size, (const SelRopeChain *o), (o))
VOID_(selrope_angles,
      (float *cs, float *sn, float *csave, float *fsave, float *state, size_t stride, const float *p,
       const float *gate, const SelRopeChain *o, int B, int T),
      (cs, sn, csave, fsave, state, stride, p, gate, o, B, T))
RET_(size_t, selrope_angles_work_size, (const SelRopeChain *o, int B), (o, B))
VOID_(selrope_angles_backward,
      (float *dp, float *dconv, float *dsum, float *dgate, float *work, const float *dtheta, const float *p,
       const float *csave, const float *fsave, const float *gate, const SelRopeChain *o, int B, int T),
      (dp, dconv, dsum, dgate, work, dtheta, p, csave, fsave, gate, o, B, T))
VOID_(selrope_rotate, (float *out, const float *inp, const float *cs, const float *sn, int N, int H, int R),
      (out, inp, cs, sn, N, H, R))
VOID_(selrope_rotate_backward,
      (float *dinp, float *dtheta, const float *dout, const float *out, const float *cs, const float *sn, int N, int H,
       int R),
      (dinp, dtheta, dout, out, cs, sn, N, H, R))

// xent.h
RET_(int, crossentropy_check_targets, (const int *targets, int N, int V), (targets, N, V))
RET_(int, crossentropy_forward,
     (float *losses, float *stats, double *mean_loss, const float *logits, const int *targets, int N, int V),
     (losses, stats, mean_loss, logits, targets, N, V))
VOID_(crossentropy_backward,
      (float *dlogits, const float *logits, const float *stats, const int *targets, int n_norm, int N, int V),
      (dlogits, logits, stats, targets, n_norm, N, V))
VOID_(crossentropy_backward_inplace,
      (float *logits, const float *stats, const int *targets, int n_norm, int N, int V),
      (logits, stats, targets, n_norm, N, V))
RET_(int, crossentropy_forward_backward,
     (float *losses, float *stats, double *mean_loss, float *logits, const int *targets, int n_norm, int N, int V),
     (losses, stats, mean_loss, logits, targets, n_norm, N, V))
