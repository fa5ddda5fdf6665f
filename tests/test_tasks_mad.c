/*
 * The MAD-Lab task generators (src/data/tasks_mad.c). Checked here:
 *   - defaults and validation of task_resolve (errors name the field);
 *   - determinism: an example is a pure function of (seed, split, index), whatever the visiting order;
 *   - the rules of each task over 500 examples per split, by re-deriving the targets from the inputs:
 *     recall (key/value ranges, one value per key, test supervision only on repeated keys + the final
 *     probe, train targets = inputs shifted), noise (range, never supervised, fraction ~0.2), fuzzy motifs
 *     (lengths, left padding), selective copying (layout and targets), memorization (one fixed bijection for
 *     the whole dataset, n_train distinct train examples) and compression (targets == inputs).
 */
#include <stdint.h>
#include <stdlib.h>

#include "data/tasks.h"
#include "test.h"

#define N_EX 500
#define MAXT 512

static TaskSpec spec_(TaskKind kind) {
    TaskSpec t;
    memset(&t, 0, sizeof t);
    t.kind = kind;
    t.seed = 1234;
    Err e = {{0}};
    if (task_resolve(&t, &e) != 0) fprintf(stderr, "resolve %s: %s\n", task_kind_name(kind), e.msg);
    return t;
}

// every input in [0, V); every target TASK_IGNORE or in [0, V); returns 1 when fine
static int in_range_(const TaskSpec *t, const int *in, const int *tg) {
    for (int j = 0; j < t->seq_len; j++)
        if (in[j] < 0 || in[j] >= t->vocab || (tg[j] != TASK_IGNORE && (tg[j] < 0 || tg[j] >= t->vocab))) return 0;
    return 1;
}

// ----------------------------------------------------------------------------------------------------
// determinism

static void check_determinism_(TaskKind kind) {
    TaskSpec t = spec_(kind);
    int T = t.seq_len;
    for (int split = 0; split < 2; split++) {
        enum { N = 64 };
        static int in[N][MAXT], tg[N][MAXT], in2[MAXT], tg2[MAXT];
        int lens[N], same_len = 1, same = 1, equal_pairs = 0, order[N], ok_range = 1;
        for (int i = 0; i < N; i++) {
            lens[i] = task_example(&t, split, (uint64_t)i, in[i], tg[i]);
            ok_range &= in_range_(&t, in[i], tg[i]);
        }
        // again, in a shuffled order
        Rng r;
        rng_seed(&r, 99);
        for (int i = 0; i < N; i++) order[i] = i;
        for (int i = N - 1; i > 0; i--) { int j = (int)(rng_u64(&r) % (uint64_t)(i + 1)), x = order[i]; order[i] = order[j]; order[j] = x; }
        for (int k = 0; k < N; k++) {
            int i = order[k];
            same_len &= task_example(&t, split, (uint64_t)i, in2, tg2) == lens[i];
            same &= !memcmp(in2, in[i], T * sizeof(int)) && !memcmp(tg2, tg[i], T * sizeof(int));
        }
        for (int i = 0; i < N; i++)
            for (int j = i + 1; j < N; j++) equal_pairs += !memcmp(in[i], in[j], T * sizeof(int));
        const char *sp = split ? "test" : "train";
        CHECK(ok_range, "%s %s: tokens and targets in [0, V) or ignored", task_kind_name(kind), sp);
        CHECK(same_len && same, "%s %s: shuffled regeneration identical", task_kind_name(kind), sp);
        CHECK(equal_pairs == 0, "%s %s: different indices differ (%d equal pairs)", task_kind_name(kind), sp, equal_pairs);
        TaskSpec t2 = t;
        t2.seed = 4321;
        task_example(&t2, split, 0, in2, tg2);
        CHECK(memcmp(in2, in[0], T * sizeof(int)) != 0, "%s %s: another seed differs", task_kind_name(kind), sp);
    }
}

// ----------------------------------------------------------------------------------------------------
// in-context recall, plain and noisy (multi-query)

static void check_icr_(TaskKind kind) {
    TaskSpec t = spec_(kind);
    int V = t.vocab, T = t.seq_len, nsv = V - t.noise_vocab, nk = nsv / 2;
    for (int split = 0; split < 2; split++) {
        int in[MAXT], tg[MAXT], raw[MAXT + 1], map[MAXT], seen[MAXT];
        int bad_len = 0, bad_pair = 0, bad_map = 0, bad_tg = 0, bad_tail = 0, noise_sup = 0, probe_unseen = 0;
        long n_noise = 0, n_tok = 0;
        for (int x = 0; x < N_EX; x++) {
            int len = task_example(&t, split, (uint64_t)x, in, tg);
            bad_len += len != T - 1;
            bad_tail += in[T - 1] != 0 || tg[T - 1] != TASK_IGNORE;
            // the raw sequence: the inputs plus the last target (the probe's value, supervised in both splits)
            memcpy(raw, in, (size_t)len * sizeof(int));
            raw[len] = tg[len - 1];
            for (int k = 0; k < nk; k++) map[k] = -1, seen[k] = 0;
            for (int i = 0; i < T / 2; i++) {
                int k = raw[2 * i], v = raw[2 * i + 1], last = i == T / 2 - 1;
                int want = TASK_IGNORE;
                if (k >= nsv && v >= nsv) {  // a noise pair
                    n_noise += 2;
                    bad_pair += k >= V || v >= V || last;
                    if (split == TASK_TEST)  // train supervises every next token, noise included
                        noise_sup += tg[2 * i] != TASK_IGNORE || (2 * i - 1 >= 0 && tg[2 * i - 1] != TASK_IGNORE);
                } else if (k < nk && v >= nk && v < nsv) {
                    if (map[k] >= 0 && map[k] != v) bad_map++;
                    map[k] = v;
                    if (seen[k] || last) want = v;
                    if (last) probe_unseen += !seen[k];
                    seen[k] = 1;
                } else {
                    bad_pair++;
                }
                n_tok += 2;
                if (split == TASK_TEST) {
                    bad_tg += tg[2 * i] != want;
                    if (!last) bad_tg += tg[2 * i + 1] != TASK_IGNORE;
                }
            }
            if (split == TASK_TRAIN)
                for (int j = 0; j < len; j++) bad_tg += tg[j] != raw[j + 1];
        }
        const char *n = task_kind_name(kind), *sp = split ? "test" : "train";
        CHECK(bad_len == 0 && bad_tail == 0, "%s %s: length seq_len-1, the last slot ignored", n, sp);
        CHECK(bad_pair == 0, "%s %s: pairs are key+value or noise+noise, keys in [0,%d), values in [%d,%d)", n, sp, nk, nk, nsv);
        CHECK(bad_map == 0, "%s %s: one value per key within a sequence (%d conflicts)", n, sp, bad_map);
        CHECK(probe_unseen == 0, "%s %s: the final probe's key appeared before", n, sp);
        CHECK(bad_tg == 0, "%s %s: targets follow the split rule (%d wrong)", n, sp, bad_tg);
        if (split == TASK_TEST) CHECK(noise_sup == 0, "%s test: noise never supervised", n);
        double frac = (double)n_noise / (double)n_tok;
        if (kind == TASK_ICR) CHECK(n_noise == 0, "icr %s: no noise", sp);
        // per sequence 62 of 64 pairs may be noise at 0.2: expected ~0.194, std ~0.002 over 500 sequences
        else CHECK_NEAR(frac, 0.2 * 62.0 / 64.0, 0.015, 0, "noisy_icr %s: noise fraction", sp);
    }
    if (kind == TASK_ICR) {
        // single-query form: [pairs..., copy_prefix, k_probe, v_probe], only the probe's value supervised at test
        TaskSpec s = t;
        s.multi_query = -1;
        Err e = {{0}};
        CHECK(task_resolve(&s, &e) == 0, "icr multi_query=-1 resolves: %.200s", e.msg);
        int in[MAXT], tg[MAXT], n_sup = 0, bad = 0, nk1 = (V - 1) / 2;  // keys [0, 7), values [7, 15)
        for (int x = 0; x < 100; x++) {
            bad += task_example(&s, TASK_TEST, (uint64_t)x, in, tg) != T;
            bad += in[T - 2] != V - 1 || tg[T - 1] < nk1 || tg[T - 1] >= V - 1 || in[T - 1] >= nk1;
            for (int j = 0; j < T; j++) n_sup += tg[j] != TASK_IGNORE;
        }
        CHECK(bad == 0 && n_sup == 100, "icr single-query: copy prefix then probe, one supervised target (%d)", n_sup);
    }
}

// ----------------------------------------------------------------------------------------------------
// fuzzy in-context recall (multi-query: pad = V-1)

static void check_fuzzy_(void) {
    TaskSpec t = spec_(TASK_FUZZY_ICR);
    int V = t.vocab, T = t.seq_len, pad = V - 1, nsv = V - 1, nk = nsv / 2;
    for (int split = 0; split < 2; split++) {
        int in[MAXT], tg[MAXT], raw[MAXT + 1], want[MAXT + 1];
        int bad_len = 0, bad_pad = 0, bad_motif = 0, bad_map = 0, bad_tg = 0, min_pad = T, max_pad = 0;
        int kmin = 99, kmax = 0;
        for (int x = 0; x < N_EX; x++) {
            bad_len += task_example(&t, split, (uint64_t)x, in, tg) != T;
            int n_pad = 0;
            while (n_pad < T && in[n_pad] == pad) n_pad++;
            for (int j = n_pad; j < T; j++) bad_pad += in[j] == pad;
            if (n_pad < min_pad) min_pad = n_pad;
            if (n_pad > max_pad) max_pad = n_pad;
            // raw = the unpadded sequence, last token from the last target
            int R = T + 1 - n_pad;
            memcpy(raw, in + n_pad, (size_t)(R - 1) * sizeof(int));
            raw[R - 1] = tg[T - 1];
            // runs: key motif (tokens < nk) then value motif (nk <= tok < nsv), alternating
            int keys[128][3], vals[128][3], nkey[128], nval[128], np = 0, q = 0;
            while (q < R && np < 128) {
                int a = q;
                while (q < R && raw[q] < nk) q++;
                int b = q;
                while (q < R && raw[q] >= nk && raw[q] < nsv) q++;
                int lk = b - a, lv = q - b;
                int lk_ok = split == TASK_TRAIN ? (lk >= 1 && lk <= 3) : lk == 3;
                if (!lk_ok || lv < 1 || lv > 3) { bad_motif++; break; }
                if (lk < kmin) kmin = lk;
                if (lk > kmax) kmax = lk;
                for (int i = 0; i < lk; i++) for (int j = 0; j < i; j++) bad_motif += raw[a + i] == raw[a + j];
                for (int i = 0; i < lv; i++) for (int j = 0; j < i; j++) bad_motif += raw[b + i] == raw[b + j];
                // same key seen before? then same value, and supervised at test
                int prev = -1;
                for (int p = 0; p < np && prev < 0; p++)
                    if (nkey[p] == lk && !memcmp(keys[p], raw + a, lk * sizeof(int))) prev = p;
                if (prev >= 0) bad_map += nval[prev] != lv || memcmp(vals[prev], raw + b, lv * sizeof(int)) != 0;
                int last = q == R;
                for (int i = a; i < q; i++) want[i] = (i >= b && (prev >= 0 || last)) ? raw[i] : TASK_IGNORE;
                memcpy(keys[np], raw + a, lk * sizeof(int));
                memcpy(vals[np], raw + b, lv * sizeof(int));
                nkey[np] = lk, nval[np] = lv, np++;
            }
            // targets: padded position j+1 < n_pad is ignored, else raw (train) / the rule above (test)
            for (int j = 0; j < T; j++) {
                int r = j + 1 - n_pad;
                int w = r < 0 ? TASK_IGNORE : split == TASK_TRAIN ? raw[r] : want[r];
                bad_tg += tg[j] != w;
            }
        }
        const char *sp = split ? "test" : "train";
        CHECK(bad_len == 0, "fuzzy_icr %s: length seq_len", sp);
        CHECK(bad_pad == 0 && min_pad >= 1, "fuzzy_icr %s: padding only on the left (pads %d..%d)", sp, min_pad, max_pad);
        CHECK(bad_motif == 0, "fuzzy_icr %s: key/value motifs of distinct tokens, lengths in range (%d bad)", sp, bad_motif);
        CHECK(split == TASK_TRAIN ? (kmin == 1 && kmax == 3) : (kmin == 3 && kmax == 3),
              "fuzzy_icr %s: key motif lengths %d..%d", sp, kmin, kmax);
        CHECK(bad_map == 0, "fuzzy_icr %s: one value motif per key motif", sp);
        CHECK(bad_tg == 0, "fuzzy_icr %s: targets follow the split rule (%d wrong)", sp, bad_tg);
    }
}

// ----------------------------------------------------------------------------------------------------
// selective copying, memorization, compression (no shift: train == test format)

static void check_selective_copy_(void) {
    TaskSpec t = spec_(TASK_SELECTIVE_COPY);
    int T = t.seq_len, n = t.n_copy, copy = t.vocab - 1, blank = t.vocab - 2;
    for (int split = 0; split < 2; split++) {
        int in[MAXT], tg[MAXT], bad = 0, bad_tg = 0, last_blank = 0;
        long lead = 0;  // blanks before the first data token: Binomial(num_blank, 1/n_copy)
        for (int x = 0; x < N_EX; x++) {
            bad += task_example(&t, split, (uint64_t)x, in, tg) != T;
            int got[MAXT], m = 0;
            for (int j = 0; j < T - n - 1; j++)
                if (in[j] != blank) { bad += in[j] < 0 || in[j] >= blank; if (m < MAXT) got[m++] = in[j]; }
            bad += m != n || in[T - n - 1] != copy;
            last_blank += in[T - n - 2] == blank;
            for (int j = 0; in[j] == blank; j++) lead++;  // np.insert indices < n_copy: never a blank right before copy
            for (int j = T - n; j < T; j++) bad += in[j] != blank;
            for (int j = 0; j < T - n; j++) bad_tg += tg[j] != TASK_IGNORE;
            for (int j = 0; j < n && j < m; j++) bad_tg += tg[T - n + j] != got[j];
        }
        const char *sp = split ? "test" : "train";
        CHECK(bad == 0, "selective_copy %s: n_copy tokens among blanks, then copy token and n_copy blanks", sp);
        CHECK(last_blank == 0, "selective_copy %s: the last token before copy is a data token", sp);
        // mean 223/16 = 13.9, std of the mean over 500 examples ~0.16
        CHECK_NEAR((double)lead / N_EX, (double)(T - 2 * n - 1) / n, 1.0, 0, "selective_copy %s: blanks spread uniformly", sp);
        CHECK(bad_tg == 0, "selective_copy %s: targets = the tokens in order at the last n_copy positions", sp);
    }
}

static void check_memorization_(void) {
    TaskSpec t = spec_(TASK_MEMORIZATION);
    int T = t.seq_len, insert = t.vocab - 1, nk = (t.vocab - 1) / 2;
    int map[256], used[256], bad = 0, bad_map = 0, in[MAXT], tg[MAXT], in2[MAXT], tg2[MAXT];
    for (int k = 0; k < 256; k++) map[k] = -1, used[k] = 0;
    for (int split = 0; split < 2; split++)
        for (int x = 0; x < N_EX; x++) {
            bad += task_example(&t, split, (uint64_t)(x * 7919), in, tg) != T;
            for (int i = 0; i < T / 2; i++) {
                int k = in[2 * i], v = tg[2 * i + 1];
                bad += k < 0 || k >= nk || in[2 * i + 1] != insert || tg[2 * i] != TASK_IGNORE || v < nk || v >= insert;
                if (k < 0 || k >= nk) continue;
                if (map[k] >= 0 && map[k] != v) bad_map++;
                map[k] = v;
            }
        }
    int covered = 0, injective = 1;
    for (int k = 0; k < nk; k++)
        if (map[k] >= 0) { covered++; injective &= !used[map[k]]; used[map[k]] = 1; }
    CHECK(bad == 0, "memorization: [key, insert] pairs, only the insert positions supervised with a value");
    CHECK(bad_map == 0, "memorization: one fixed map across indices and both splits (%d conflicts)", bad_map);
    CHECK(covered == nk && injective, "memorization: the map is a bijection of all %d keys (%d seen)", nk, covered);
    // the train split has n_train examples: index n_train + i is example i; the test split is not the train set
    int wrap = 1, test_new = 0;
    for (int i = 0; i < 20; i++) {
        task_example(&t, TASK_TRAIN, (uint64_t)i, in, tg);
        task_example(&t, TASK_TRAIN, (uint64_t)(i + 3 * t.n_train), in2, tg2);
        wrap &= !memcmp(in, in2, T * sizeof(int));
        task_example(&t, TASK_TEST, (uint64_t)i, in2, tg2);
        test_new += memcmp(in, in2, T * sizeof(int)) != 0;
    }
    CHECK(t.n_train == 256 && wrap, "memorization: train index taken modulo n_train (%d)", t.n_train);
    CHECK(test_new == 20, "memorization: test examples differ from the train ones");
    // another seed, another map
    TaskSpec t2 = t;
    t2.seed = 777;
    int differ = 0;
    for (int x = 0; x < 20; x++) {
        task_example(&t2, TASK_TRAIN, (uint64_t)x, in, tg);
        for (int i = 0; i < T / 2; i++) differ += tg[2 * i + 1] != map[in[2 * i]];
    }
    CHECK(differ > 0, "memorization: the map depends on the seed");
}

static void check_compression_(void) {
    TaskSpec t = spec_(TASK_COMPRESSION);
    int T = t.seq_len, in[MAXT], tg[MAXT];
    for (int split = 0; split < 2; split++) {
        int bad = 0;
        for (int x = 0; x < N_EX; x++) {
            bad += task_example(&t, split, (uint64_t)x, in, tg) != T || in[T - 1] != t.vocab - 1;
            for (int j = 0; j < T - 1; j++) bad += in[j] < 0 || in[j] >= t.vocab - 1;
            bad += memcmp(in, tg, T * sizeof(int)) != 0;
        }
        CHECK(bad == 0, "compression %s: data tokens + compression token, targets == inputs", split ? "test" : "train");
    }
}

// ----------------------------------------------------------------------------------------------------
// defaults and errors

static void check_resolve_err_(TaskKind kind, void (*set)(TaskSpec *), const char *want, const char *what) {
    TaskSpec t;
    memset(&t, 0, sizeof t);
    t.kind = kind;
    set(&t);
    Err e = {{0}};
    int rc = task_resolve(&t, &e);
    CHECK(rc == -1, "resolve rejects %s", what);
    CHECK_CONTAINS(e.msg, want, "resolve error for %s names the field", what);
}
static void odd_len_(TaskSpec *t) { t->seq_len = 7; }
static void neg_vocab_(TaskSpec *t) { t->vocab = -3; }
static void frac_one_(TaskSpec *t) { t->frac_noise = 1.0; }
static void frac_no_vocab_(TaskSpec *t) { t->frac_noise = 0.1; }
static void big_motif_(TaskSpec *t) { t->k_motif = 9; }
static void short_fuzzy_(TaskSpec *t) { t->seq_len = 12; }
static void short_copy_(TaskSpec *t) { t->seq_len = 33; }
static void neg_ntrain_(TaskSpec *t) { t->n_train = -1; }
static void tiny_vocab_(TaskSpec *t) { t->vocab = 1; }
static void bad_mq_(TaskSpec *t) { t->multi_query = 2; }

static void check_resolve_(void) {
    static const int V[6] = {16, 32, 16, 16, 256, 16}, T[6] = {128, 128, 128, 256, 32, 32};
    for (int k = TASK_ICR; k <= TASK_COMPRESSION; k++) {
        TaskSpec t = spec_((TaskKind)k);
        CHECK(t.vocab == V[k] && t.seq_len == T[k], "%s defaults: V %d T %d", task_kind_name((TaskKind)k), t.vocab, t.seq_len);
    }
    TaskSpec n = spec_(TASK_NOISY_ICR), f = spec_(TASK_FUZZY_ICR), s = spec_(TASK_SELECTIVE_COPY), i = spec_(TASK_ICR);
    CHECK(n.noise_vocab == 16 && n.frac_noise == 0.2 && n.multi_query == 1, "noisy_icr defaults: 16 noise tokens at 0.2, multi-query");
    CHECK(i.noise_vocab == 0 && i.frac_noise == 0, "icr default: no noise");
    CHECK(f.k_motif == 3 && f.v_motif == 3, "fuzzy_icr defaults: motifs 3, 3");
    CHECK(s.n_copy == 16, "selective_copy default: n_copy 16");
    check_resolve_err_(TASK_ICR, odd_len_, "task.seq_len: 7 must be even for icr", "odd icr seq_len");
    check_resolve_err_(TASK_MEMORIZATION, odd_len_, "task.seq_len", "odd memorization seq_len");
    check_resolve_err_(TASK_COMPRESSION, neg_vocab_, "task.vocab", "negative vocab");
    check_resolve_err_(TASK_NOISY_ICR, frac_one_, "task.frac_noise", "frac_noise 1");
    check_resolve_err_(TASK_ICR, frac_no_vocab_, "task.noise_vocab", "noise without a noise vocab");
    check_resolve_err_(TASK_FUZZY_ICR, big_motif_, "task.vocab", "k_motif larger than the key vocab");
    check_resolve_err_(TASK_FUZZY_ICR, short_fuzzy_, "task.seq_len", "fuzzy seq_len too short");
    check_resolve_err_(TASK_SELECTIVE_COPY, short_copy_, "task.seq_len: 33 must be > 2 * n_copy + 1", "copy seq_len too short");
    check_resolve_err_(TASK_MEMORIZATION, neg_ntrain_, "task.n_train", "negative n_train");
    check_resolve_err_(TASK_COMPRESSION, tiny_vocab_, "task.vocab", "compression vocab 1");
    check_resolve_err_(TASK_ICR, tiny_vocab_, "task.vocab", "icr vocab 1");
    check_resolve_err_(TASK_FUZZY_ICR, bad_mq_, "task.multi_query", "multi_query 2");
}

int main(void) {
    check_resolve_();
    for (int k = TASK_ICR; k <= TASK_COMPRESSION; k++) check_determinism_((TaskKind)k);
    check_icr_(TASK_ICR);
    check_icr_(TASK_NOISY_ICR);
    check_fuzzy_();
    check_selective_copy_();
    check_memorization_();
    check_compression_();
    return test_summary();
}
