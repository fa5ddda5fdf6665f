/*
 * How an evaluation at context length L walks a token stream of N tokens.
 *
 * stride 0 (or >= L): non-overlapping windows of L+1 tokens starting at multiples of L; every position of
 *   every window is scored, each with the context that precedes it inside its window.
 * stride S < L: sliding windows starting at multiples of S; the first window scores all its L positions,
 *   every later one only its last S positions, so each token is scored once with at least L-S tokens of
 *   context (the usual sliding-window perplexity).
 * The tail that does not fill a whole window is not scored, so every context length sees full windows.
 */
#ifndef SEQ_EVAL_WINDOWS_H
#define SEQ_EVAL_WINDOWS_H

#include <stdint.h>

typedef struct EvalWindows {
    uint64_t n_windows;
    uint64_t step;          // tokens between window starts (L, or S)
    uint64_t tokens_scored; // over all windows
} EvalWindows;

EvalWindows eval_windows_plan(uint64_t n_tokens, uint64_t L, uint64_t stride);
// in window w: the first scored position (0 for w = 0 or non-overlapping windows, else L - S)
uint64_t eval_windows_first_scored(const EvalWindows *p, uint64_t L, uint64_t w);

#endif
