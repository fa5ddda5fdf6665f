/* Wall-clock seconds from a monotonic clock, for progress lines, tokens/s and benchmarks. */
#ifndef SEQ_TIMER_H
#define SEQ_TIMER_H

#include <time.h>

static inline double time_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
