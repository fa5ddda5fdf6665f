/*
 * Evaluation window plans: the closed-form counts of eval_windows_plan against the definition, and a
 * simulation over a bitmap of token positions that every scored target lies inside the stream, is
 * scored exactly once, and that the scored targets are exactly positions 1..tokens_scored (no gaps,
 * so the perplexity covers one contiguous prefix of the stream).
 */
#include <stdint.h>
#include <stdlib.h>

#include "data/eval_windows.h"
#include "test.h"

// what the header promises, written independently of the implementation
static void expected_(uint64_t N, uint64_t L, uint64_t S, uint64_t *n, uint64_t *step, uint64_t *scored) {
    *step = (S == 0 || S >= L) ? L : S;
    if (L == 0 || N < L + 1) {
        *n = 0;
        *scored = 0;
        return;
    }
    if (*step == L) {
        *n = (N - 1) / L;
        *scored = *n * L;
    } else {
        *n = (N - 1 - L) / S + 1;
        *scored = L + (*n - 1) * S;
    }
}

// replay the plan over positions [0, N): window w reads tokens [w*step, w*step+L] and scores targets
// w*step+1+i for i in [first, L). Returns the number of problems found (0 = consistent).
static int simulate_(uint64_t N, uint64_t L, const EvalWindows *p) {
    unsigned char *hit = calloc(N + 1, 1);
    int bad = 0;
    uint64_t count = 0;
    for (uint64_t w = 0; w < p->n_windows; w++) {
        uint64_t base = w * p->step;
        if (base + L > N - 1) bad++;  // window must end inside the stream
        uint64_t first = eval_windows_first_scored(p, L, w);
        if (first >= L) bad++;
        for (uint64_t i = first; i < L && base + 1 + i < N; i++) {
            if (hit[base + 1 + i]++) bad++;  // scored twice
            count++;
        }
    }
    if (count != p->tokens_scored) bad++;
    // scored targets form exactly the prefix 1..tokens_scored
    for (uint64_t t = 0; t < N; t++) {
        int want = t >= 1 && t <= p->tokens_scored;
        if ((hit[t] != 0) != want) { bad++; break; }
    }
    // the plan takes every full window: one more would run past the end
    if (p->n_windows > 0 && p->n_windows * p->step + L <= N - 1) bad++;
    free(hit);
    return bad;
}

static void test_exhaustive_small_(void) {
    int mismatches = 0, sim_bad = 0, cases = 0;
    char first_fail[200] = "";
    for (uint64_t N = 0; N <= 70; N++)
        for (uint64_t L = 1; L <= 12; L++)
            for (uint64_t S = 0; S <= L + 2; S++) {
                EvalWindows p = eval_windows_plan(N, L, S);
                uint64_t n, step, scored;
                expected_(N, L, S, &n, &step, &scored);
                cases++;
                if (p.n_windows != n || p.tokens_scored != scored || (n > 0 && p.step != step)) {
                    if (!mismatches++)
                        snprintf(first_fail, sizeof first_fail,
                                 "N=%llu L=%llu S=%llu: got n=%llu scored=%llu step=%llu",
                                 (unsigned long long)N, (unsigned long long)L, (unsigned long long)S,
                                 (unsigned long long)p.n_windows, (unsigned long long)p.tokens_scored,
                                 (unsigned long long)p.step);
                }
                if (N > 0 && simulate_(N, L, &p)) sim_bad++;
            }
    CHECK(mismatches == 0, "plan counts match the formulas over %d (N, L, stride) cases %s", cases, first_fail);
    CHECK(sim_bad == 0, "every plan scores each target once, contiguously from position 1 (%d bad)", sim_bad);
}

static void test_named_cases_(void) {
    // non-overlapping: stride 0 and stride >= L behave the same
    EvalWindows a = eval_windows_plan(1001, 100, 0);
    CHECK(a.n_windows == 10 && a.tokens_scored == 1000 && a.step == 100,
          "N=1001 L=100 stride 0: 10 windows, 1000 scored");
    EvalWindows b = eval_windows_plan(1000, 100, 0);
    CHECK(b.n_windows == 9 && b.tokens_scored == 900, "N=1000 L=100: the last window lacks its final target");
    EvalWindows c = eval_windows_plan(1001, 100, 100);
    EvalWindows d = eval_windows_plan(1001, 100, 250);
    CHECK(c.n_windows == a.n_windows && c.step == 100 && d.n_windows == a.n_windows && d.step == 100,
          "stride == L and stride > L are non-overlapping");
    CHECK(eval_windows_first_scored(&a, 100, 0) == 0 && eval_windows_first_scored(&a, 100, 7) == 0,
          "non-overlapping windows score every position");

    // sliding: N=1001, L=100, S=25 -> (1000-100)/25+1 = 37 windows, 100 + 36*25 = 1000 scored
    EvalWindows s = eval_windows_plan(1001, 100, 25);
    CHECK(s.n_windows == 37 && s.step == 25 && s.tokens_scored == 1000, "sliding L=100 S=25 over 1001 tokens");
    CHECK(eval_windows_first_scored(&s, 100, 0) == 0, "first sliding window scores all L positions");
    CHECK(eval_windows_first_scored(&s, 100, 1) == 75 && eval_windows_first_scored(&s, 100, 36) == 75,
          "later sliding windows score only their last S positions");
    CHECK(simulate_(1001, 100, &s) == 0, "sliding L=100 S=25: each token scored exactly once");
    EvalWindows s2 = eval_windows_plan(1010, 100, 25);
    CHECK(s2.n_windows == 37 && s2.tokens_scored == 1000 && simulate_(1010, 100, &s2) == 0,
          "sliding: a tail shorter than S is not scored");

    // too short for one window
    CHECK(eval_windows_plan(100, 100, 0).n_windows == 0, "N = L: no window of L+1 tokens");
    CHECK(eval_windows_plan(100, 100, 0).tokens_scored == 0, "N = L: nothing scored");
    CHECK(eval_windows_plan(0, 100, 10).n_windows == 0, "N = 0: no window");
    CHECK(eval_windows_plan(101, 100, 10).n_windows == 1 && eval_windows_plan(101, 100, 10).tokens_scored == 100,
          "N = L+1: exactly one window, sliding or not");

    // L = 1: every token after the first is scored once, with no context
    EvalWindows one = eval_windows_plan(50, 1, 0);
    CHECK(one.n_windows == 49 && one.tokens_scored == 49 && simulate_(50, 1, &one) == 0,
          "L=1: 49 windows over 50 tokens");
    EvalWindows one_s = eval_windows_plan(50, 1, 1);
    CHECK(one_s.n_windows == 49 && one_s.step == 1, "L=1 stride 1 is non-overlapping");
    CHECK(eval_windows_plan(1, 1, 0).n_windows == 0, "L=1, N=1: no window");

    // S = 1: the densest sliding evaluation
    EvalWindows d1 = eval_windows_plan(64, 8, 1);
    CHECK(d1.n_windows == 56 && d1.tokens_scored == 63 && simulate_(64, 8, &d1) == 0, "L=8 S=1 over 64 tokens");

    CHECK(eval_windows_plan(100, 0, 0).n_windows == 0, "L = 0 gives no window (no division by zero)");
}

static void test_large_(void) {
    // counts for a stream far larger than any bitmap: the closed forms, no overflow for realistic sizes
    uint64_t N = 1000000000001ull, L = 1024, S = 512;
    EvalWindows p = eval_windows_plan(N, L, S);
    CHECK(p.n_windows == (N - 1 - L) / S + 1, "1e12 tokens, sliding: window count");
    CHECK(p.tokens_scored == L + (p.n_windows - 1) * S && p.tokens_scored <= N - 1, "1e12 tokens: scored <= N-1");
    EvalWindows q = eval_windows_plan(N, L, 0);
    CHECK(q.n_windows == (N - 1) / L && q.tokens_scored == q.n_windows * L, "1e12 tokens, non-overlapping");
    // the guard `N < L+1` must not wrap: with L = UINT64_MAX no stream holds a window
    EvalWindows r = eval_windows_plan(10, UINT64_MAX, 0);
    CHECK(r.n_windows == 0 && r.tokens_scored == 0, "L = UINT64_MAX over 10 tokens: no window (got %llu windows)",
          (unsigned long long)r.n_windows);
}

int main(void) {
    test_exhaustive_small_();
    test_named_cases_();
    test_large_();
    return test_summary();
}
