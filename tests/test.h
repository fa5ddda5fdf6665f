/*
 * A tiny test harness. Every check prints "ok - what" or "not ok - what (details)"; tests/run_all.sh
 * counts those lines over all test programs and prints the closing "N passed, N failed" line.
 * A test program exits non-zero when any of its checks failed.
 *
 *   CHECK(cond, "what %d", x)                     a boolean
 *   CHECK_NEAR(got, want, atol, rtol, "what")     |got-want| <= atol + rtol*|want|
 *   CHECK_STR(got, want, "what")                  strings equal
 *   CHECK_CONTAINS(haystack, needle, "what")      substring present (error messages)
 *   return test_summary();                        at the end of main
 */
#ifndef SEQ_TEST_H
#define SEQ_TEST_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int test_passed_ = 0, test_failed_ = 0;

static inline void test_report_(int ok, const char *file, int line, const char *detail, const char *what) {
    if (ok) {
        test_passed_++;
        printf("ok - %s\n", what);
    } else {
        test_failed_++;
        printf("not ok - %s (%s:%d%s%s)\n", what, file, line, detail[0] ? ": " : "", detail);
    }
    fflush(stdout);
}

// a check's label, cut to the buffer: through vsnprintf, because gcc's -Wformat-truncation (in -Wall) flags a
// direct snprintf of a %s argument that might not fit wherever it cannot rule that out, and whether it can
// depends on -march's inlining (an AMD host's -march=native build warned where an Intel host's did not)
__attribute__((format(printf, 3, 4))) static inline void test_what_(char *buf, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}
#define TEST_WHAT_(...) char what_[512]; test_what_(what_, sizeof what_, __VA_ARGS__)

// the condition and values are evaluated before the message is formatted, so a message may show what
// the checked call produced (e.g. CHECK(f(&e) == 0, "f: %s", e.msg) prints f's own error)
#define CHECK(cond, ...) do { int c_ = (cond) ? 1 : 0; TEST_WHAT_(__VA_ARGS__); \
    test_report_(c_, __FILE__, __LINE__, "", what_); } while (0)

#define CHECK_NEAR(got, want, atol, rtol, ...) do { \
    double g_ = (double)(got), w_ = (double)(want); char d_[160]; TEST_WHAT_(__VA_ARGS__); \
    int ok_ = fabs(g_ - w_) <= (atol) + (rtol) * fabs(w_); \
    snprintf(d_, sizeof d_, "got %.9g want %.9g (atol %g rtol %g)", g_, w_, (double)(atol), (double)(rtol)); \
    test_report_(ok_, __FILE__, __LINE__, d_, what_); } while (0)

#define CHECK_STR(got, want, ...) do { \
    const char *g_ = (got), *w_ = (want); char d_[400]; TEST_WHAT_(__VA_ARGS__); \
    int ok_ = g_ && w_ && strcmp(g_, w_) == 0; \
    snprintf(d_, sizeof d_, "got \"%.150s\" want \"%.150s\"", g_ ? g_ : "(null)", w_ ? w_ : "(null)"); \
    test_report_(ok_, __FILE__, __LINE__, d_, what_); } while (0)

#define CHECK_CONTAINS(hay, needle, ...) do { \
    const char *h_ = (hay), *n_ = (needle); char d_[400]; TEST_WHAT_(__VA_ARGS__); \
    int ok_ = h_ && n_ && strstr(h_, n_) != NULL; \
    snprintf(d_, sizeof d_, "\"%.200s\" lacks \"%.120s\"", h_ ? h_ : "(null)", n_ ? n_ : "(null)"); \
    test_report_(ok_, __FILE__, __LINE__, d_, what_); } while (0)

static inline int test_summary(void) {
    fprintf(stderr, "%d passed, %d failed\n", test_passed_, test_failed_);
    return test_failed_ ? 1 : 0;
}

#endif
