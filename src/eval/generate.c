#include "eval/generate.h"

#include <stdlib.h>
#include <string.h>

#include "core/timer.h"

int generate(Model *m, const int *const *prompts, const int *lens, int n, const GenerateOpts *o, GenerateTokenFn fn,
             void *ctx, int *out, GenerateStats *st, Err *e) {
    memset(st, 0, sizeof *st);
    if (sample_check(&o->sample, e) != 0) return -1;
    if (n < 1) return err_set(e, "no prompt to continue");
    if (o->max_new < 1) return err_set(e, "--max-new: %d; allowed: 1 or more", o->max_new);
    if (o->context < 2) return err_set(e, "--context: %d; allowed: 2 or more", o->context);
    int longest = 0;
    for (int b = 0; b < n; b++) {
        if (lens[b] < 1) return err_set(e, "prompt %d is empty (no tokens): give some text to continue", b + 1);
        int len = lens[b] < o->context ? lens[b] : o->context;
        if (len > longest) longest = len;
    }
    ModelDecoder d;
    if (model_decoder_init(&d, m, n, o->context, e) != 0) return -1;
    double t0 = time_now_s();
    // hist (n, H): the tokens fed to each sequence, position by position, then those it generated
    int H = longest + o->max_new, V = m->V, rc = 0;
    int *hist = xmalloc((size_t)n * H * sizeof(int)), *plen = xmalloc((size_t)n * sizeof(int));
    int *made = xcalloc((size_t)n, sizeof(int)), *tok = xmalloc((size_t)n * sizeof(int));
    float *logits = xmalloc((size_t)n * V * sizeof(float));
    for (int b = 0; b < n; b++) {
        plen[b] = lens[b] < o->context ? lens[b] : o->context;
        st->truncated += plen[b] < lens[b];
        memcpy(hist + (size_t)b * H, prompts[b] + (lens[b] - plen[b]), (size_t)plen[b] * sizeof(int));
        st->prompt_tokens += plen[b];
    }
    Rng r;
    rng_seed(&r, o->seed);
    int done = 0;
    for (int t = 0; rc == 0 && done < n; t++) {  // step t feeds position t of every sequence's history
        if (d.t == d.limit) {
            // full: start again from the last half of the context, re-encoding it
            int keep = d.limit / 2;
            model_decoder_reset(&d, m);
            for (int s = t - keep; rc == 0 && s < t; s++) {
                for (int b = 0; b < n; b++) tok[b] = hist[(size_t)b * H + s];
                rc = model_decoder_step(m, &d, tok, logits, e);
            }
            st->slides++;
            st->refed_tokens += (long)keep * n;
        }
        for (int b = 0; b < n; b++) tok[b] = hist[(size_t)b * H + t];
        if (rc == 0) rc = model_decoder_step(m, &d, tok, logits, e);
        for (int b = 0; b < n && rc == 0; b++) {
            if (t + 1 < plen[b] || made[b] == o->max_new) {
                // still reading its prompt, or finished: it keeps being fed (its last token) with the batch
                if (made[b] == o->max_new) hist[(size_t)b * H + t + 1] = hist[(size_t)b * H + t];
                continue;
            }
            int next = sample_token(logits + (size_t)b * V, V, &o->sample, &r);
            hist[(size_t)b * H + t + 1] = next;
            if (out) out[(size_t)b * o->max_new + made[b]] = next;
            made[b]++;
            st->new_tokens++;
            if (fn) fn(ctx, b, next);
            if (made[b] == o->max_new) done++;
        }
    }
    st->seconds = time_now_s() - t0;
    free(hist); free(plen); free(made); free(tok); free(logits);
    model_decoder_free(&d);
    return rc;
}
