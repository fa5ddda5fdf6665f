/*
 * Matmul benchmark (not a test): GFLOP/s of the forward (out = inp @ W^T) and the two backward layouts
 * (dinp += dout @ W, dweight += dout^T @ inp) at the Linear shapes of bench/configs/speed_rope.json with
 * B*T = 4096 tokens (q/k/v and output projections of 8 heads x 64 = 2d, MLP fc/proj, LM head with
 * V = 8192), next to this machine's
 * fp32 peak measured by a register-resident FMA loop on every thread (widest vectors the CPU has). Threads
 * from OMP_NUM_THREADS, kernel set from SEQ_KERNELS (core/cpu.h; default: the best the CPU supports).
 *
 *   make benches && OMP_NUM_THREADS=2 build/release/bench/matmul
 *   SEQ_KERNELS=avx2 OMP_NUM_THREADS=2 build/release/bench/matmul      the AVX2 kernels on an AVX-512 CPU
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "nn/matmul.h"
#include "bench.h"
#include "core/cpu.h"
#include "core/timer.h"


#define PEAK_ACC 12  // independent FMA chains per thread: more than latency x FMA ports, so the ports saturate

// flops done by one thread in `iters` rounds of PEAK_ACC vector FMAs of one kernel set's width (compiled for
// that set with a target attribute, like the set's copy of nn/); the result goes to *sink so the compiler
// cannot drop the loop
#if defined(__x86_64__) && defined(SEQ_X86_SETS)
__attribute__((target("avx512f"))) static double peak_avx512_(long iters, float *sink) {
    __m512 acc[PEAK_ACC], x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-3f);
    for (int i = 0; i < PEAK_ACC; i++) acc[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < iters; it++) {
        for (int i = 0; i < PEAK_ACC; i++) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
    }
    __m512 s = acc[0];
    for (int i = 1; i < PEAK_ACC; i++) s = _mm512_add_ps(s, acc[i]);
    *sink = _mm512_reduce_add_ps(s);
    return 2.0 * 16 * PEAK_ACC * iters;
}

__attribute__((target("avx2,fma"))) static double peak_avx2_(long iters, float *sink) {
    __m256 acc[PEAK_ACC], x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-3f);
    for (int i = 0; i < PEAK_ACC; i++) acc[i] = _mm256_set1_ps((float)i);
    for (long it = 0; it < iters; it++) {
        for (int i = 0; i < PEAK_ACC; i++) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
    }
    float lanes[8];
    __m256 s = acc[0];
    for (int i = 1; i < PEAK_ACC; i++) s = _mm256_add_ps(s, acc[i]);
    _mm256_storeu_ps(lanes, s);
    *sink = lanes[0] + lanes[7];
    return 2.0 * 8 * PEAK_ACC * iters;
}
#endif

static double peak_generic_(long iters, float *sink) {
    float acc[PEAK_ACC][8];
    for (int i = 0; i < PEAK_ACC; i++) {
        for (int l = 0; l < 8; l++) acc[i][l] = (float)(i + l);
    }
    for (long it = 0; it < iters; it++) {
        for (int i = 0; i < PEAK_ACC; i++) {
            for (int l = 0; l < 8; l++) acc[i][l] = fmaf(acc[i][l], 0.999f, 1e-3f);
        }
    }
    *sink = acc[0][0] + acc[PEAK_ACC - 1][7];
    return 2.0 * 8 * PEAK_ACC * iters;
}

static double peak_thread_(KernelSet k, long iters, float *sink) {
#if defined(__x86_64__) && defined(SEQ_X86_SETS)
    if (k == KSET_AVX512) return peak_avx512_(iters, sink);
    if (k == KSET_AVX2) return peak_avx2_(iters, sink);
#endif
    return peak_generic_(iters, sink);
}

// all threads at once, like the matmul itself runs: flops over the wall clock. *solo (may be NULL) gets, for
// the best round, the sum of each thread's own rate (its flops over its own time): well above the wall rate
// when the threads did not all run at once, e.g. on a virtual machine whose CPUs share cores underneath
// (16 threads on 32 vCPUs can run in two waves)
static double peak_gflops_(KernelSet k, double *solo) {
    long iters = 20000000;
    double best = 0, best_solo = 0;
    for (int rep = 0; rep < 3; rep++) {
        double flops = 0, rates = 0, t0 = time_now_s();
        float sinks[256] = {0};
#pragma omp parallel reduction(+ : flops, rates)
        {
            int tid = 0;
#ifdef _OPENMP
            tid = omp_get_thread_num() % 256;
#endif
            double ts = time_now_s(), f = peak_thread_(k, iters, &sinks[tid]);
            flops += f;
            rates += f / (time_now_s() - ts);
        }
        double t = time_now_s() - t0;
        if (sinks[0] == 12345.0f) printf("(sink)\n");
        if (flops / t > best) best = flops / t, best_solo = rates;
    }
    if (solo) *solo = best_solo * 1e-9;
    return best * 1e-9;
}

// one benchmark shape: C (M,N) = op(A) op(B), its buffers, and the fastest call seen so far
typedef struct {
    int M, N, K, ta, tb, acc;
    float *A, *B, *C;
    double best;  // seconds
} Shape_;

static void shape_init_(Shape_ *s, int M, int N, int K, int ta, int tb, int acc) {
    *s = (Shape_){M, N, K, ta, tb, acc, bench_filled((size_t)M * K, 1, -0.05f, 0.05f),
                  bench_filled((size_t)K * N, 2, -0.05f, 0.05f),
                  bench_filled((size_t)M * N, 3, -0.05f, 0.05f), 1e30};
}

// one round of a shape: an untimed call (its operands back in cache, as when the reps run back to back),
// then timed calls filling about `budget` seconds (at least 2), keeping the fastest
static void shape_round_(Shape_ *s, double budget) {
    matmul(s->C, s->A, s->B, s->M, s->N, s->K, s->ta, s->tb, s->acc);
    double spent = 0;
    for (int rep = 0; rep < 20 && (spent < budget || rep < 2); rep++) {
        double t0 = time_now_s();
        matmul(s->C, s->A, s->B, s->M, s->N, s->K, s->ta, s->tb, s->acc);
        double t = time_now_s() - t0;
        spent += t;
        if (t < s->best) s->best = t;
    }
}

int main(void) {
    int BT = 4096;
    // Linear layers (C -> OC) of the d=256, 6-layer benchmark model: each of q, k, v (d -> 2d, three
    // separate matmuls per layer), the attention output (2d -> d), MLP fc, MLP proj, LM head
    static const struct { const char *name; int C, OC; } layers[] = {
        {"attn q|k|v", 256, 512}, {"attn out", 512, 256}, {"mlp fc", 256, 1024}, {"mlp proj", 1024, 256},
        {"lm head", 256, 8192},
    };
    Err e = {{0}};
    if (kernel_set_init(&e) != 0) {
        fprintf(stderr, "bench/matmul: %s\n", e.msg);
        return 1;
    }
    // the machine's peak: FMAs of the widest vectors this CPU has (the % column); and of the active set's
    // width, when that is narrower (e.g. SEQ_KERNELS=avx2 on an AVX-512 CPU with two 512-bit FMA ports).
    // Measured before and again after the shapes, keeping the higher: on a shared machine a reading taken
    // while another job holds a core only comes out low (which would put shares of it over 100%), and the table
    // is printed after both
    KernelSet active = kernel_set(), widest = KSET_GENERIC;
    for (int k = 0; k < KSET_COUNT; k++)
        if (kernel_set_supported((KernelSet)k)) widest = (KernelSet)k;
    double solo = 0, solo_after = 0;
    double peak = peak_gflops_(widest, &solo);
    enum { SHAPES = 15 };
    _Static_assert(sizeof layers / sizeof layers[0] * 3 == SHAPES, "three layouts per layer");
    char shapes[SHAPES][48];
    const char *names[SHAPES], *layouts[SHAPES];
    double ms[SHAPES], gf[SHAPES];
    double total_ms = 0, total_flops = 0;  // the 15 shapes of one training step (each layer type once)
    int n = 0;
    Shape_ sh[SHAPES];
    for (size_t l = 0; l < sizeof layers / sizeof layers[0]; l++) {
        int C = layers[l].C, OC = layers[l].OC;
        // forward out (BT,OC) = inp (BT,C) @ W^T; dinp (BT,C) += dout (BT,OC) @ W (OC,C);
        // dweight (OC,C) += dout^T (OC,BT) @ inp (BT,C)
        struct { const char *layout; int M, N, K, ta, tb, acc; } runs[] = {
            {"fwd   out = inp W^T  (NT)", BT, OC, C, 0, 1, 0},
            {"bwd  dinp += dout W  (NN)", BT, C, OC, 0, 0, 1},
            {"bwd dW += dout^T inp (TN)", OC, C, BT, 1, 0, 1},
        };
        for (int r = 0; r < 3; r++, n++) {
            shape_init_(&sh[n], runs[r].M, runs[r].N, runs[r].K, runs[r].ta, runs[r].tb, runs[r].acc);
            names[n] = layers[l].name;
            snprintf(shapes[n], sizeof shapes[n], "%dx%dx%d", runs[r].M, runs[r].N, runs[r].K);
            layouts[n] = runs[r].layout;
        }
    }
    // ROUNDS passes over all shapes, each shape's fastest call over all of them: a shape's samples are
    // spread over the whole run, so a few seconds in which another job holds a core of this (shared)
    // machine slow some samples of every shape, not all samples of one
    enum { ROUNDS = 6 };
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < n; i++) shape_round_(&sh[i], 0.3 / ROUNDS);
    }
    for (int i = 0; i < n; i++) {
        ms[i] = sh[i].best * 1e3;
        gf[i] = 2.0 * sh[i].M * sh[i].N * sh[i].K / sh[i].best * 1e-9;
        total_ms += ms[i];
        total_flops += 2.0 * sh[i].M * sh[i].N * sh[i].K;
        free(sh[i].A); free(sh[i].B); free(sh[i].C);
    }
    double peak_after = peak_gflops_(widest, &solo_after);
    if (peak_after > peak) peak = peak_after, solo = solo_after;
    printf("kernel set %s, threads %d, measured fp32 FMA peak %.1f GFLOP/s (%s vectors)\n", kernel_set_name(active),
           bench_threads(), peak, kernel_set_name(widest));
    if (solo > 1.15 * peak) {
        // the threads took turns: the peak (and every share of it) is of the cores the machine gave, not of its CPUs
        printf("note: the threads did not all run at once: each thread's own rate adds up to %.1f GFLOP/s, %.2fx the\n"
               "      peak over the wall clock (the CPUs share cores underneath, or another job held some); the shares\n"
               "      of the peak below are of what this machine gave, and its speed may change from run to run\n",
               solo, solo / peak);
    }
    if (active != widest) {
        printf("peak with %s vectors: %.1f GFLOP/s\n", kernel_set_name(active), peak_gflops_(active, NULL));
    }
    printf("\n");
    printf("%-10s %-20s %-28s %9s %9s %7s\n", "layer", "M x N x K", "layout", "ms", "GFLOP/s", "% peak");
    for (int i = 0; i < n; i++) {
        printf("%-10s %-20s %-28s %9.2f %9.1f %6.1f%%\n", names[i], shapes[i], layouts[i], ms[i], gf[i],
               100.0 * gf[i] / peak);
    }
    double total_gf = total_flops / (total_ms * 1e-3) * 1e-9;
    printf("%-10s %-20s %-28s %9.2f %9.1f %6.1f%%\n", "total", "15 shapes", "", total_ms, total_gf, 100.0 * total_gf / peak);
    return 0;
}
