#include "data/eval_windows.h"

EvalWindows eval_windows_plan(uint64_t n_tokens, uint64_t L, uint64_t stride) {
    EvalWindows p = {0, L, 0};
    if (L == 0 || n_tokens <= L) return p;  // a window needs L+1 tokens (no L+1: it may overflow)
    p.step = (stride == 0 || stride >= L) ? L : stride;
    // window w covers tokens [w*step, w*step + L]; it must end inside the stream
    p.n_windows = (n_tokens - 1 - L) / p.step + 1;
    p.tokens_scored = L + (p.n_windows - 1) * p.step;
    return p;
}

uint64_t eval_windows_first_scored(const EvalWindows *p, uint64_t L, uint64_t w) {
    return (w == 0 || p->step == L) ? 0 : L - p->step;
}
