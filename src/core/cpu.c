/*
 * Kernel set detection and choice (see cpu.h).
 */
#include "core/cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const NAMES_[KSET_COUNT] = {"generic", "avx2", "avx512"};

// -1 until chosen. Read and written atomically: the first nn call may come from inside a parallel region,
// and every racing thread would store the same value anyway.
static int active_ = -1;

int kernel_set_supported(KernelSet k) {
    switch (k) {
    case KSET_GENERIC:
        return 1;
#if defined(SEQ_X86_SETS) && (defined(__x86_64__) || defined(__i386__))
    // __builtin_cpu_supports also asks the OS (XGETBV) whether it saves the ymm/zmm registers
    case KSET_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case KSET_AVX512:
        return kernel_set_supported(KSET_AVX2) && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vl");
#endif
    default:
        return 0;
    }
}

const char *kernel_set_name(KernelSet k) { return k >= 0 && k < KSET_COUNT ? NAMES_[k] : "?"; }

static KernelSet best_(void) {
    for (int k = KSET_COUNT - 1; k > 0; k--) {
        if (kernel_set_supported((KernelSet)k)) return (KernelSet)k;
    }
    return KSET_GENERIC;
}

int kernel_set_parse(const char *name, KernelSet *k, Err *e) {
    if (strcmp(name, "auto") == 0) {
        *k = best_();
        return 0;
    }
    for (int i = 0; i < KSET_COUNT; i++) {
        if (strcmp(name, NAMES_[i]) == 0) {
            *k = (KernelSet)i;
            return 0;
        }
    }
    return err_set(e, "unknown kernel set \"%s\": use auto, avx512, avx2 or generic", name);
}

int kernel_set_use(KernelSet k, Err *e) {
    if (!kernel_set_supported(k)) {
        char cpu[128];
        kernel_set_describe(cpu, sizeof cpu);
        return err_set(e, "kernel set %s is not available here (%s)%s", kernel_set_name(k), cpu,
                       k != KSET_GENERIC ? "; unset SEQ_KERNELS or set it to auto" : "");
    }
    __atomic_store_n(&active_, (int)k, __ATOMIC_RELAXED);
    return 0;
}

int kernel_set_init(Err *e) {
    const char *env = getenv("SEQ_KERNELS");
    KernelSet k = best_();
    if (env != NULL && env[0] != '\0') {
        if (kernel_set_parse(env, &k, e) != 0) return err_prefix(e, "SEQ_KERNELS: ");
        if (kernel_set_use(k, e) != 0) return err_prefix(e, "SEQ_KERNELS=%s: ", env);
        return 0;
    }
    return kernel_set_use(k, e);
}

KernelSet kernel_set(void) {
    int k = __atomic_load_n(&active_, __ATOMIC_RELAXED);
    if (k >= 0) return (KernelSet)k;
    // The first nn call may come from every thread of a parallel region at once. A bad SEQ_KERNELS then
    // ends the process from one of them: one message, and _Exit, since exit() would run the atexit
    // handlers and free what the other threads are still using (a crash after the message, e.g. on a CPU
    // without AVX-512 asked for avx512).
    Err e = {{0}};
    if (kernel_set_init(&e) != 0) {
        static int reported_ = 0;
        if (__atomic_exchange_n(&reported_, 1, __ATOMIC_ACQ_REL) == 0) {
            fprintf(stderr, "error: %s\n", e.msg);
            fflush(NULL);
            _Exit(1);
        }
        for (;;) pause();  // the reporting thread ends the process
    }
    return (KernelSet)__atomic_load_n(&active_, __ATOMIC_RELAXED);
}

void kernel_set_describe(char *buf, size_t n) {
    int k = __atomic_load_n(&active_, __ATOMIC_RELAXED);
    int len = snprintf(buf, n, "%s; this CPU and build:", k >= 0 ? NAMES_[k] : "not chosen");
    for (int i = KSET_COUNT - 1; i >= 0 && len > 0 && (size_t)len < n; i--) {
        if (kernel_set_supported((KernelSet)i)) len += snprintf(buf + len, n - (size_t)len, " %s", NAMES_[i]);
    }
}
