/*
 * Kernel sets: which compiled copy of the nn/ ops runs on this CPU.
 *
 * Every file under src/nn/ is compiled once per kernel set (Makefile: ISA_SETS), each copy with its own
 * instruction set and register blocking, and src/nn/dispatch.c routes every nn function to the copy of
 * the active set. One binary therefore runs the AVX-512 kernels on an AVX-512 CPU, the AVX2+FMA kernels
 * on e.g. AMD Zen 2/3, and the portable C code elsewhere (and on every non-x86 CPU, where only that copy
 * is built).
 *
 * The set is chosen on first use: the best one the CPU supports, or the one the environment variable
 * SEQ_KERNELS names (auto | avx512 | avx2 | generic), which tests and benchmarks use to run every set on
 * one machine. Naming a set this CPU (or this build) lacks is an error, never a silent fallback.
 */
#ifndef SEQ_CPU_H
#define SEQ_CPU_H

#include "core/err.h"

typedef enum KernelSet {
    KSET_GENERIC = 0,  // portable C, compiled with the build's base flags (-march=native or x86-64)
    KSET_AVX2 = 1,     // x86-64-v3: AVX2 + FMA, 16 ymm registers
    KSET_AVX512 = 2,   // x86-64-v4: AVX-512 F/BW/DQ/VL, 32 zmm registers
    KSET_COUNT
} KernelSet;

// the active set (chosen on the first call: SEQ_KERNELS, else the best supported; a bad SEQ_KERNELS is
// reported by kernel_set_init, and here makes the process exit with that message)
KernelSet kernel_set(void);
// choose the set now: SEQ_KERNELS if set (must name a known set the CPU supports), else the best one.
// Tools call this first so that a bad value is a clean error. Returns 0, or -1 with e filled in.
int kernel_set_init(Err *e);
// switch to set k (tests and benchmarks: run the same work on every set); -1 with e if unsupported
int kernel_set_use(KernelSet k, Err *e);
// 1 when this binary has set k compiled in and this CPU can run it
int kernel_set_supported(KernelSet k);
// "avx512", "avx2", "generic"
const char *kernel_set_name(KernelSet k);
// parse a name ("auto" gives the best supported set); -1 with e (naming the choices) when unknown
int kernel_set_parse(const char *name, KernelSet *k, Err *e);
// one line for messages: "avx2; this CPU and build: avx2 generic" - the active set and every set this CPU
// (and build) supports
void kernel_set_describe(char *buf, size_t n);

#endif
