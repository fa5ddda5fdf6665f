#include "data/loader.h"

#include <glob.h>
#include <stdlib.h>
#include <string.h>

#include "core/sha256.h"

static uint64_t splitmix64_(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// the four Feistel round keys of one epoch: a pure function of (seed, epoch)
static void epoch_keys_(uint64_t seed, uint64_t epoch, uint64_t keys[4]) {
    uint64_t s = splitmix64_(seed ^ 0x5EC7A1Eull) ^ splitmix64_(epoch + 1);
    for (int i = 0; i < 4; i++) keys[i] = s = splitmix64_(s + (uint64_t)i);
}

// a bijection on [0, 2^(2h)): four Feistel rounds over two h-bit halves
static uint64_t feistel_(const uint64_t keys[4], int h, uint64_t x) {
    uint64_t mask = (h >= 32) ? 0xFFFFFFFFull : ((1ull << h) - 1);
    uint64_t L = x >> h, R = x & mask;
    for (int r = 0; r < 4; r++) {
        uint64_t F = splitmix64_(R ^ keys[r]) & mask;
        uint64_t nL = R;
        R = L ^ F;
        L = nL;
    }
    return (L << h) | R;
}

uint64_t loader_window_at(Loader *l, uint64_t epoch, uint64_t pos) {
    if (pos >= l->n_windows) return UINT64_MAX;  // cycle-walking would never land for such a pos
    if (!l->shuffle) return pos;
    uint64_t other[4];
    const uint64_t *keys = l->keys;
    if (epoch != l->cur.epoch) {
        epoch_keys_(l->seed, epoch, other);
        keys = other;
    }
    // cycle-walking: apply the permutation of the larger power-of-4 domain until the value lands in
    // [0, N); the domain is < 4N, so this takes few steps on average and stays a bijection on [0, N)
    uint64_t x = pos;
    do x = feistel_(keys, l->half_bits, x); while (x >= l->n_windows);
    return x;
}

// expand every pattern into paths (glob sorts them, so the shard order is stable)
static int loader_glob_(const LoaderOpts *o, const char *what, char ***paths, int *n, Err *e) {
    int cap = 0;
    *paths = NULL;
    *n = 0;
    for (int i = 0; i < o->n_patterns; i++) {
        glob_t g;
        int rc = glob(o->patterns[i], GLOB_ERR, NULL, &g);
        if (rc != 0) {
            globfree(&g);
            if (rc == GLOB_NOMATCH)
                return err_set(e, "%s: '%s' matches no file (run `make data` to prepare the bundled shards, or "
                               "fix the path)", what, o->patterns[i]);
            return err_set(e, "%s: cannot expand '%s' (read error)", what, o->patterns[i]);
        }
        for (size_t k = 0; k < g.gl_pathc; k++) {
            if (*n == cap) {
                cap = cap ? cap * 2 : 8;
                *paths = xrealloc(*paths, (size_t)cap * sizeof(char *));
            }
            (*paths)[(*n)++] = xstrdup(g.gl_pathv[k]);
        }
        globfree(&g);
    }
    return 0;
}

// all shards must speak the same vocabulary and, where recorded, come from the same tokenizer
static int loader_check_shards_(const Loader *l, const char *what, Err *e) {
    const Shard *a = &l->shards[0];
    for (int i = 1; i < l->n_shards; i++) {
        const Shard *b = &l->shards[i];
        if (b->vocab_size != a->vocab_size)
            return err_set(e, "%s: %s has vocab size %u but %s has %u; all shards must use one vocabulary", what,
                           b->path, b->vocab_size, a->path, a->vocab_size);
        if (a->has_tokenizer_hash && b->has_tokenizer_hash && memcmp(a->tokenizer_sha256, b->tokenizer_sha256, 32)) {
            char ha[65], hb[65];
            sha256_hex(a->tokenizer_sha256, ha);
            sha256_hex(b->tokenizer_sha256, hb);
            return err_set(e, "%s: %s and %s were encoded with different tokenizers (sha256 %.12s... vs %.12s...)",
                           what, a->path, b->path, ha, hb);
        }
    }
    return 0;
}

// the task mode of loader_open: no shards, N = n_examples windows that are generated on demand
static int loader_open_task_(Loader *l, const LoaderOpts *o, const char *what, Err *e) {
    l->task = *o->task;
    l->task.seq_len = o->T;
    if (task_resolve(&l->task, e) != 0) return err_prefix(e, "%s: ", what);
    if (o->n_examples == 0) return err_set(e, "%s: a task needs at least one example per epoch", what);
    l->has_task = 1;
    l->task_split = o->task_split;
    l->n_windows = o->n_examples;
    l->n_tokens = o->n_examples * (uint64_t)o->T;
    l->vocab_size = (uint32_t)l->task.vocab;
    l->ex_in = xmalloc((size_t)o->T * sizeof(int));
    l->ex_tg = xmalloc((size_t)o->T * sizeof(int));
    return 0;
}

int loader_open(Loader *l, const LoaderOpts *o, Err *e) {
    memset(l, 0, sizeof *l);
    const char *what = o->what ? o->what : "data";
    if (o->task) {
        if (o->T < 1) return err_set(e, "%s: window length T must be >= 1 (got %d)", what, o->T);
        if (loader_open_task_(l, o, what, e) != 0) {
            loader_close(l);
            return -1;
        }
        goto permutation;
    }
    if (o->n_patterns <= 0) return err_set(e, "%s: no shard files given", what);
    if (o->T < 1) return err_set(e, "%s: window length T must be >= 1 (got %d)", what, o->T);
    char **paths;
    int n_paths, rc = loader_glob_(o, what, &paths, &n_paths, e);
    if (rc == 0) {
        // the frame cache budget is shared by the shards; each keeps at least two frames (shard.c)
        size_t per_shard = o->cache_bytes / (size_t)n_paths;
        l->shards = xcalloc((size_t)n_paths, sizeof(Shard));
        l->first_window = xcalloc((size_t)n_paths + 1, sizeof(uint64_t));
        for (int i = 0; i < n_paths && rc == 0; i++) {
            rc = shard_open(&l->shards[i], paths[i], o->format, o->vocab_size, per_shard, e);
            if (rc != 0) { err_prefix(e, "%s: ", what); break; }
            l->n_shards++;
            Shard *s = &l->shards[i];
            uint64_t n = s->n_tokens > 0 ? (s->n_tokens - 1) / (uint64_t)o->T : 0;
            l->first_window[i + 1] = l->first_window[i] + n;
            l->n_tokens += s->n_tokens;
        }
    }
    for (int i = 0; i < n_paths; i++) free(paths[i]);
    free(paths);
    if (rc == 0) rc = loader_check_shards_(l, what, e);
    if (rc != 0) {
        loader_close(l);
        return -1;
    }
    l->vocab_size = l->shards[0].vocab_size;
    l->n_windows = l->first_window[l->n_shards];
    if (l->n_windows == 0) {
        err_set(e, "%s: %d shard(s) with %llu tokens hold no window of %d tokens (seq_len %d + 1); use a "
                "shorter seq_len or more data", what, l->n_shards, (unsigned long long)l->n_tokens, o->T + 1, o->T);
        loader_close(l);
        return -1;
    }
permutation:
    l->T = o->T;
    l->shuffle = o->shuffle;
    l->seed = o->seed;
    int bits = 1;
    while (bits < 64 && (1ull << bits) < l->n_windows) bits++;
    l->half_bits = (bits + 1) / 2;
    l->window = xmalloc(((size_t)o->T + 1) * sizeof(uint32_t));
    epoch_keys_(l->seed, 0, l->keys);
    return 0;
}

void loader_close(Loader *l) {
    for (int i = 0; i < l->n_shards; i++) shard_close(&l->shards[i]);
    free(l->shards);
    free(l->first_window);
    free(l->window);
    free(l->ex_in);
    free(l->ex_tg);
    memset(l, 0, sizeof *l);
}

int loader_next(Loader *l, int32_t *inputs, int32_t *targets, int B, Err *e) {
    // inputs (B,T), targets (B,T)
    int T = l->T;
    for (int b = 0; b < B; b++) {
        if (l->cur.pos == l->n_windows) {
            l->cur.epoch++;
            l->cur.pos = 0;
            epoch_keys_(l->seed, l->cur.epoch, l->keys);
        }
        uint64_t w = loader_window_at(l, l->cur.epoch, l->cur.pos);
        if (l->has_task) {
            task_example(&l->task, l->task_split, w, l->ex_in, l->ex_tg);
            for (int t = 0; t < T; t++) {
                inputs[(size_t)b * T + t] = (int32_t)l->ex_in[t];
                targets[(size_t)b * T + t] = (int32_t)l->ex_tg[t];
            }
            l->cur.pos++;
            continue;
        }
        // binary search for the shard holding window w
        int lo = 0, hi = l->n_shards - 1;
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (l->first_window[mid] <= w) lo = mid; else hi = mid - 1;
        }
        uint64_t start = (w - l->first_window[lo]) * (uint64_t)T;
        if (shard_read(&l->shards[lo], l->window, start, (uint64_t)T + 1, e) != 0) return -1;
        int32_t *in_b = inputs + (size_t)b * T;
        int32_t *tg_b = targets + (size_t)b * T;
        for (int t = 0; t < T; t++) {
            in_b[t] = (int32_t)l->window[t];
            tg_b[t] = (int32_t)l->window[t + 1];
        }
        l->cur.pos++;
    }
    return 0;
}

LoaderCursor loader_cursor(const Loader *l) { return l->cur; }

int loader_seek(Loader *l, LoaderCursor c, Err *e) {
    if (c.pos > l->n_windows)
        return err_set(e, "data cursor at window %llu of an epoch of %llu windows: the data changed since the "
                       "checkpoint (different shards or seq_len)", (unsigned long long)c.pos,
                       (unsigned long long)l->n_windows);
    l->cur = c;
    epoch_keys_(l->seed, c.epoch, l->keys);
    return 0;
}
