#include "eval/generate.h"

#include <stdlib.h>
#include <string.h>

#include "core/timer.h"

// the decoder on either device: the host's ModelDecoder, or the backend's (its states on the GPU)
typedef struct Decoder {
    Model *m;
    Gpu *gpu;
    ModelDecoder host;
    int t, limit;  // the next position, and how many positions fit before a reset
} Decoder;

static int dec_init_(Decoder *d, Model *m, Gpu *gpu, int B, int cap, Err *e) {
    memset(d, 0, sizeof *d);
    d->m = m, d->gpu = gpu;
    if (!gpu) {
        if (model_decoder_init(&d->host, m, B, cap, e) != 0) return -1;
        d->limit = d->host.limit;
        return 0;
    }
    return gpu_decoder_open(gpu, B, cap, &d->limit, e);
}

static void dec_reset_(Decoder *d) {
    if (d->gpu) gpu_decoder_reset(d->gpu);
    else model_decoder_reset(&d->host, d->m);
    d->t = 0;
}

static int dec_step_(Decoder *d, const int *tokens, float *logits, Err *e) {
    int rc = d->gpu ? gpu_decoder_step(d->gpu, tokens, logits, e) : model_decoder_step(d->m, &d->host, tokens, logits, e);
    d->t += rc == 0;
    return rc;
}

static void dec_free_(Decoder *d) {
    if (d->gpu) gpu_decoder_close(d->gpu);
    else model_decoder_free(&d->host);
}

int generate(Model *m, Gpu *gpu, const int *const *prompts, const int *lens, int n, const GenerateOpts *o,
             GenerateTokenFn fn, void *ctx, int *out, GenerateStats *st, Err *e) {
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
    Decoder d;
    if (dec_init_(&d, m, gpu, n, o->context, e) != 0) return -1;
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
            dec_reset_(&d);
            for (int s = t - keep; rc == 0 && s < t; s++) {
                for (int b = 0; b < n; b++) tok[b] = hist[(size_t)b * H + s];
                rc = dec_step_(&d, tok, logits, e);
            }
            st->slides++;
            st->refed_tokens += (long)keep * n;
        }
        for (int b = 0; b < n; b++) tok[b] = hist[(size_t)b * H + t];
        if (rc == 0) rc = dec_step_(&d, tok, logits, e);
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
    dec_free_(&d);
    return rc;
}
