// SEQ_PROFILE=1 on the GPU (gpu/common.cuh's GPU_TIMED): each timed op is bracketed by two CUDA events on the
// one stream, so timing adds no synchronisation; the intervals are read back at the step's own sync points
// (gpu_prof_flush) and summed per op name. Printed to stderr when the backend closes, like nn/dispatch.c's
// SEQ_PROFILE table for the CPU's ops. The first flush's intervals (the run's first forward and backward) are
// left out of the table: they carry one-time costs (CUDA loads each kernel at its first launch, cuBLAS sets up
// its workspace and picks algorithms), which would dominate the first ops of a short profile. Ops timed with a
// FLOP count (GPU_TIMED_FLOPS) show their rate in TFLOP/s: the products' useful operations over the op's time,
// the figure to hold against the GPU's peak (docs/gpu.md).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/common.cuh"

#define PROF_OPS_ 64       // distinct op names
#define PROF_PENDING_ 4096 // intervals recorded and not yet read

typedef struct {
    const char *name;
    unsigned long long calls;
    double ms, flops;
} ProfOp_;

static int on_ = -1;  // -1 until SEQ_PROFILE is read
static ProfOp_ ops_[PROF_OPS_];
static int n_ops_ = 0;
static cudaEvent_t ev_[PROF_PENDING_][2];
static int op_of_[PROF_PENDING_];
static double flops_of_[PROF_PENDING_];
static int n_pending_ = 0, n_events_ = 0;
static int warm_ = 0;       // 1 after the first flush
static double warmup_ms_;   // the first flush's intervals, summed

static int op_id_(const char *name) {
    for (int i = 0; i < n_ops_; i++)
        if (ops_[i].name == name || !strcmp(ops_[i].name, name)) return i;
    if (n_ops_ == PROF_OPS_) return -1;
    ops_[n_ops_].name = name;
    return n_ops_++;
}

int gpu_prof_begin(const char *name, double flops) {
    if (on_ < 0) {
        const char *env = getenv("SEQ_PROFILE");
        on_ = env && env[0] && strcmp(env, "0") != 0;
    }
    if (!on_) return -1;
    if (n_pending_ == PROF_PENDING_) gpu_prof_flush();
    int id = op_id_(name);
    if (id < 0) return -1;
    int s = n_pending_++;
    if (s == n_events_) {
        CUDA_CHECK(cudaEventCreate(&ev_[s][0]));
        CUDA_CHECK(cudaEventCreate(&ev_[s][1]));
        n_events_++;
    }
    op_of_[s] = id;
    flops_of_[s] = flops;
    CUDA_CHECK(cudaEventRecord(ev_[s][0], 0));
    return s;
}

void gpu_prof_end(int slot) {
    if (slot >= 0) CUDA_CHECK(cudaEventRecord(ev_[slot][1], 0));
}

void gpu_prof_flush(void) {
    if (n_pending_ == 0) return;
    CUDA_CHECK(cudaEventSynchronize(ev_[n_pending_ - 1][1]));
    for (int s = 0; s < n_pending_; s++) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, ev_[s][0], ev_[s][1]));
        if (!warm_) {
            warmup_ms_ += ms;
            continue;
        }
        ops_[op_of_[s]].calls++;
        ops_[op_of_[s]].ms += ms;
        ops_[op_of_[s]].flops += flops_of_[s];
    }
    warm_ = 1;
    n_pending_ = 0;
}

static int by_time_(const void *a, const void *b) {
    double x = ((const ProfOp_ *)a)->ms, y = ((const ProfOp_ *)b)->ms;
    return (x < y) - (x > y);
}

void gpu_prof_print(void) {
    if (on_ <= 0) return;
    gpu_prof_flush();
    double total = 0;
    for (int i = 0; i < n_ops_; i++) total += ops_[i].ms;
    qsort(ops_, (size_t)n_ops_, sizeof ops_[0], by_time_);
    fprintf(stderr, "\nSEQ_PROFILE: GPU ops (CUDA events), %.3f s of GPU time in timed ops (the first forward and "
            "backward, %.3f s with one-time setup, not counted)\n", total * 1e-3, warmup_ms_ * 1e-3);
    fprintf(stderr, "%-28s %10s %11s %7s %9s\n", "op", "calls", "seconds", "% ops", "TFLOP/s");
    for (int i = 0; i < n_ops_; i++) {
        char rate[32] = "";
        if (ops_[i].flops > 0 && ops_[i].ms > 0) snprintf(rate, sizeof rate, "%9.1f", ops_[i].flops / (ops_[i].ms * 1e9));
        fprintf(stderr, "%-28s %10llu %11.4f %6.1f%% %s\n", ops_[i].name, ops_[i].calls, ops_[i].ms * 1e-3,
                total > 0 ? 100.0 * ops_[i].ms / total : 0.0, rate);
    }
    n_ops_ = 0;
}
