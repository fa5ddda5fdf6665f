/*
 * The sequence tasks (src/data/tasks_seq.c): MQAR, the A5 / S5 / parity word problems, copying, RegBench.
 * Every rule is checked from the generated tokens alone, recomputed here independently of the generator
 * (permutations enumerated by nested loops and composed directly, parity by xor, copies by comparison,
 * RegBench strings by the validity function), plus determinism (same (seed, split, index) = same example,
 * whatever the call order), the train / test length ranges and task_resolve's errors.
 */
#include <stdint.h>
#include <stdlib.h>

#include "data/tasks.h"
#include "test.h"

// defined in tasks_seq.c, proposed for tasks.h

// ----------------------------------------------------------------------------------------------------
// helpers

static TaskSpec spec_(TaskKind kind) {
    TaskSpec t;
    memset(&t, 0, sizeof t);
    t.kind = kind;
    t.seed = 1234;
    return t;
}

static int resolve_(TaskSpec *t) {
    Err e = {{0}};
    int rc = task_resolve(t, &e);
    if (rc) printf("# resolve %s: %s\n", task_kind_name(t->kind), e.msg);
    return rc;
}

// examples 0..n-1 of both splits generated forwards and then backwards (interleaved with other indices)
// are identical; a different seed changes them
static void check_determinism_(TaskSpec t) {
    int T = t.seq_len, n = 16, same = 1, differ = 0;
    int *in1 = malloc(sizeof(int) * (size_t)T * n), *tg1 = malloc(sizeof(int) * (size_t)T * n);
    int *in2 = malloc(sizeof(int) * T), *tg2 = malloc(sizeof(int) * T), len1[16];
    for (int split = 0; split < 2; split++) {
        for (int i = 0; i < n; i++) len1[i] = task_example(&t, split, (uint64_t)i, in1 + i * T, tg1 + i * T);
        for (int i = n - 1; i >= 0; i--) {
            task_example(&t, 1 - split, (uint64_t)(i * 7 + 3), in2, tg2);  // some other example in between
            int len2 = task_example(&t, split, (uint64_t)i, in2, tg2);
            same &= len2 == len1[i] && !memcmp(in2, in1 + i * T, sizeof(int) * T) &&
                    !memcmp(tg2, tg1 + i * T, sizeof(int) * T);
        }
    }
    TaskSpec u = t;
    u.seed = t.seed + 1;
    for (int i = 0; i < n; i++) {
        task_example(&u, TASK_TEST, (uint64_t)i, in2, tg2);
        differ += memcmp(in2, in1 + i * T, sizeof(int) * T) != 0;
    }
    CHECK(same, "%s: same (seed, split, index) gives the same example in any call order", task_kind_name(t.kind));
    CHECK(differ >= n - 1, "%s: another seed gives other examples (%d of %d differ)", task_kind_name(t.kind),
          differ, n);
    free(in1);
    free(tg1);
    free(in2);
    free(tg2);
}

// ----------------------------------------------------------------------------------------------------
// MQAR

static void test_mqar_(void) {
    TaskSpec t = spec_(TASK_MQAR);
    CHECK(resolve_(&t) == 0, "mqar: resolves with defaults");
    CHECK(t.vocab == 8192 && t.seq_len == 64 && t.num_kv_pairs == 8 && t.power_a == 0.01 &&
          t.random_non_queries == 1, "mqar: defaults V 8192, T 64, N 8, a 0.01, random_non_queries on");
    check_determinism_(t);
    int T = t.seq_len, V = t.vocab, N = t.num_kv_pairs, space = (T - 2 * N) / 2;
    int in[64], tg[64], n_ex = 2000;
    int keys_ok = 1, vals_ok = 1, labels_ok = 1, len_ok = 1, zeros = 0;
    double gap_sum = 0.0;
    long gap_small = 0;
    for (int ex = 0; ex < n_ex; ex++) {
        len_ok &= task_example(&t, ex % 2, (uint64_t)ex, in, tg) == T;
        for (int i = 0; i < N; i++) {
            int k = in[2 * i], v = in[2 * i + 1];
            keys_ok &= k >= 1 && k < V / 2;
            vals_ok &= v >= V / 2 && v < V;
            for (int j = 0; j < i; j++) {
                keys_ok &= in[2 * j] != k;
                vals_ok &= in[2 * j + 1] != v;
            }
        }
        int n_lab = 0;
        for (int p = 0; p < T; p++) {
            zeros += in[p] == 0;
            if (tg[p] == TASK_IGNORE) continue;
            n_lab++;
            // a label only at a query position: after the kv part, at an even offset, on a key
            int q = -1;
            for (int i = 0; i < N; i++)
                if (in[2 * i] == in[p]) q = i;
            labels_ok &= p >= 2 * N && (p - 2 * N) % 2 == 0 && q >= 0 && tg[p] == in[2 * q + 1];
            int g = (p - 2 * N) / 2;
            gap_sum += g;
            gap_small += g < space / 4;
        }
        labels_ok &= n_lab == N;
    }
    CHECK(len_ok, "mqar: every example has length T");
    CHECK(keys_ok, "mqar: keys distinct, in [1, V/2)");
    CHECK(vals_ok, "mqar: values distinct, in [V/2, V)");
    CHECK(labels_ok, "mqar: exactly N labels, at query positions, each the value paired with its key");
    CHECK(zeros < n_ex, "mqar: random_non_queries leaves almost no 0s (%d)", zeros);
    // uniform gaps would average (space-1)/2 = 11.5 with a quarter below space/4; p(g) ∝ g^-0.99 sampled
    // without replacement averages about 7.4 (2000 examples here), so ask for a mean below 0.75 of the uniform one
    double mean = gap_sum / ((double)n_ex * N), uni = (space - 1) / 2.0;
    CHECK(mean < 0.75 * uni, "mqar: gaps skewed to small (mean %.2f < 0.75 * uniform mean %.2f)", mean, uni);
    CHECK((double)gap_small / ((double)n_ex * N) > 0.4, "mqar: more than 40%% of gaps in the lowest quarter "
          "(%.3f)", (double)gap_small / ((double)n_ex * N));

    // random_non_queries off: every non-kv, non-query input is the blank 0
    TaskSpec u = spec_(TASK_MQAR);
    u.random_non_queries = -1;
    CHECK(resolve_(&u) == 0 && u.random_non_queries < 0, "mqar: random_non_queries -1 (off) resolves");
    int blank_ok = 1;
    for (int ex = 0; ex < 50; ex++) {
        task_example(&u, TASK_TRAIN, (uint64_t)ex, in, tg);
        for (int p = 2 * N; p < T; p++) blank_ok &= (tg[p] == TASK_IGNORE) == (in[p] == 0);
    }
    CHECK(blank_ok, "mqar: without random_non_queries the non-query positions are 0");

    // the papers' settings validate: Zoology T 512 / N 64, KLA T 2048 / V 256, BLA T 512 / N 64 / V 8192
    TaskSpec z = spec_(TASK_MQAR);
    z.seq_len = 512;
    z.num_kv_pairs = 64;
    CHECK(resolve_(&z) == 0, "mqar: Zoology T 512, N 64 resolves");
    TaskSpec k = spec_(TASK_MQAR);
    k.seq_len = 2048;
    k.vocab = 256;
    k.num_kv_pairs = 64;
    CHECK(resolve_(&k) == 0, "mqar: KLA long MQAR T 2048, V 256 (V < T allowed) resolves");
    int *kin = malloc(sizeof(int) * 2048), *ktg = malloc(sizeof(int) * 2048), kok = 1;
    for (int ex = 0; ex < 20; ex++) {
        task_example(&k, TASK_TEST, (uint64_t)ex, kin, ktg);
        for (int p = 0; p < 2048; p++) kok &= kin[p] >= 0 && kin[p] < 256 && (ktg[p] == TASK_IGNORE || ktg[p] >= 128);
    }
    CHECK(kok, "mqar: KLA setting stays within V 256");
    free(kin);
    free(ktg);
    TaskSpec b = spec_(TASK_MQAR);
    b.seq_len = 512;
    b.num_kv_pairs = 64;
    b.vocab = 8192;
    CHECK(resolve_(&b) == 0, "mqar: BLA T 512, 64 pairs, V 8192 resolves");
}

// ----------------------------------------------------------------------------------------------------
// word problems: the test's own permutation table (nested loops give lexicographic order)

static int perms_[120][5], n_perms_ = 0;

static void build_perms_(void) {
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 5; b++)
            for (int c = 0; c < 5; c++)
                for (int d = 0; d < 5; d++)
                    for (int e = 0; e < 5; e++) {
                        int p[5] = {a, b, c, d, e}, used = 0;
                        for (int i = 0; i < 5; i++) used |= 1 << p[i];
                        if (used == 31) memcpy(perms_[n_perms_++], p, sizeof p);
                    }
}

// parity by cycle decomposition: even iff (5 - number of cycles) is even
static int even_by_cycles_(const int *p) {
    int seen[5] = {0}, cycles = 0;
    for (int i = 0; i < 5; i++) {
        if (seen[i]) continue;
        cycles++;
        for (int j = i; !seen[j]; j = p[j]) seen[j] = 1;
    }
    return (5 - cycles) % 2 == 0;
}

static void test_word_(TaskKind kind) {
    const char *name = task_kind_name(kind);
    int alt = kind == TASK_A5, order = alt ? 60 : 120;
    int elems[120][5], n = 0;
    for (int i = 0; i < 120; i++)
        if (!alt || even_by_cycles_(perms_[i])) memcpy(elems[n++], perms_[i], sizeof elems[0]);
    CHECK(n == order, "%s: %d elements", name, n);

    TaskSpec t = spec_(kind);
    CHECK(resolve_(&t) == 0, "%s: resolves with defaults", name);
    CHECK(t.vocab == order + 1 && t.train_len_min == 128 && t.train_len_max == 128 && t.test_len_min == 512 &&
          t.test_len_max == 512 && t.seq_len == 512, "%s: V %d, train 128, test 512, seq_len 512", name, t.vocab);
    check_determinism_(t);
    int *in = malloc(sizeof(int) * 512), *tg = malloc(sizeof(int) * 512);
    int seen_in[120] = {0}, seen_tg[120] = {0}, prod_ok = 1, len_ok = 1, pad_ok = 1, range_ok = 1;
    for (int ex = 0; ex < 40; ex++) {
        int split = ex % 2, L = task_example(&t, split, (uint64_t)ex, in, tg);
        len_ok &= L == (split == TASK_TEST ? 512 : 128);
        int P[5] = {0, 1, 2, 3, 4};
        for (int i = 0; i < L; i++) {
            range_ok &= in[i] >= 0 && in[i] < order;
            if (!(in[i] >= 0 && in[i] < order)) break;
            seen_in[in[i]] = 1;
            const int *g = elems[in[i]];
            int Q[5];
            for (int k = 0; k < 5; k++) Q[k] = g[P[k]];  // apply the prefix first, then g_t
            memcpy(P, Q, sizeof P);
            int want = -1;
            for (int e = 0; e < order; e++)
                if (!memcmp(elems[e], P, sizeof P)) want = e;
            prod_ok &= tg[i] == want;
            if (tg[i] >= 0 && tg[i] < order) seen_tg[tg[i]] = 1;
        }
        for (int i = L; i < 512; i++) pad_ok &= in[i] == order && tg[i] == TASK_IGNORE;
    }
    int all_in = 1, all_tg = 1;
    for (int e = 0; e < order; e++) {
        all_in &= seen_in[e];
        all_tg &= seen_tg[e];
    }
    CHECK(len_ok, "%s: train examples 128 long, test 512", name);
    CHECK(range_ok, "%s: inputs are element indices in [0, %d)", name, order);
    CHECK(prod_ok, "%s: targets are the prefix products g_1 .. g_t, recomputed", name);
    CHECK(pad_ok, "%s: padding is token %d with ignored targets", name, order);
    CHECK(all_in && all_tg, "%s: all %d elements appear as inputs and as targets", name, order);
    // the test's A5 table holds only even permutations (by cycle count), so matching it above means every
    // A5 token and every prefix product the generator made is an even permutation
    if (alt) CHECK(prod_ok && range_ok, "a5: tokens and prefix products are even permutations");
    // a custom length range: lengths fall inside it and reach both ends
    TaskSpec u = spec_(kind);
    u.train_len_min = 5;
    u.train_len_max = 9;
    u.test_len_min = 20;
    u.test_len_max = 30;
    CHECK(resolve_(&u) == 0 && u.seq_len == 30, "%s: custom lengths resolve, seq_len 30", name);
    int lo_ok = 1, hit[2][2] = {{0, 0}, {0, 0}};
    for (int ex = 0; ex < 400; ex++) {
        int split = ex % 2, L = task_example(&u, split, (uint64_t)ex, in, tg);
        int lo = split ? 20 : 5, hi = split ? 30 : 9;
        lo_ok &= L >= lo && L <= hi;
        hit[split][0] |= L == lo;
        hit[split][1] |= L == hi;
    }
    CHECK(lo_ok && hit[0][0] && hit[0][1] && hit[1][0] && hit[1][1],
          "%s: lengths within [5, 9] (train) and [20, 30] (test), both ends reached", name);
    free(in);
    free(tg);
}

static void test_parity_(void) {
    TaskSpec t = spec_(TASK_PARITY);
    CHECK(resolve_(&t) == 0 && t.vocab == 3 && t.seq_len == 512, "parity: resolves, V 3, seq_len 512");
    check_determinism_(t);
    int in[512], tg[512], ok = 1, ones = 0, total = 0;
    for (int ex = 0; ex < 40; ex++) {
        int L = task_example(&t, ex % 2, (uint64_t)ex, in, tg), s = 0;
        ok &= L == (ex % 2 ? 512 : 128);
        for (int i = 0; i < L; i++) {
            ok &= in[i] == 0 || in[i] == 1;
            s ^= in[i] & 1;
            ok &= tg[i] == s;
            ones += in[i] == 1;
            total++;
        }
        for (int i = L; i < 512; i++) ok &= in[i] == 2 && tg[i] == TASK_IGNORE;
    }
    CHECK(ok, "parity: bits in, running parity out, padding 2 / ignored");
    CHECK_NEAR((double)ones / total, 0.5, 0.02, 0, "parity: bits are fair");
}

// ----------------------------------------------------------------------------------------------------
// copying

static void test_copy_(void) {
    TaskSpec t = spec_(TASK_COPY);
    CHECK(resolve_(&t) == 0, "copy: resolves with defaults");
    CHECK(t.vocab == 29 && t.train_len_min == 2 && t.train_len_max == 64 && t.test_len_min == 2 &&
          t.test_len_max == 512 && t.seq_len == 1025, "copy: V 29, train L 2..64, test L 2..512, seq_len 1025");
    check_determinism_(t);
    int *in = malloc(sizeof(int) * 1025), *tg = malloc(sizeof(int) * 1025);
    int ok = 1, len_ok = 1, max_train = 0, max_test = 0;
    for (int ex = 0; ex < 400; ex++) {
        int split = ex % 2, R = task_example(&t, split, (uint64_t)ex, in, tg), L = (R - 1) / 2;
        len_ok &= R % 2 == 1 && L >= 2 && L <= (split ? 512 : 64);
        if (split) max_test = L > max_test ? L : max_test;
        else max_train = L > max_train ? L : max_train;
        for (int i = 0; i < L; i++) ok &= in[i] >= 0 && in[i] < 26 && tg[i] == TASK_IGNORE;
        ok &= in[L] == 26;
        for (int i = 0; i < L; i++) ok &= in[L + 1 + i] == in[i] && tg[L + i] == in[i];
        ok &= tg[2 * L] == 27;
        for (int i = R; i < 1025; i++) ok &= in[i] == 28 && tg[i] == TASK_IGNORE;
    }
    CHECK(ok, "copy: string, <copy>, the string again; targets = the string then <eos>, only after <copy>");
    CHECK(len_ok && max_train > 60 && max_test > 400, "copy: L in train [2, 64] (max seen %d), test [2, 512] "
          "(max seen %d)", max_train, max_test);
    free(in);
    free(tg);
}

// ----------------------------------------------------------------------------------------------------
// RegBench

static void test_regbench_(void) {
    TaskSpec t = spec_(TASK_REGBENCH);
    CHECK(resolve_(&t) == 0 && t.vocab == 22 && t.seq_len == 512, "regbench: resolves, V 22, seq_len 512");
    check_determinism_(t);
    t.seq_len = 256;  // keep the quadratic validity checks quick
    int in[256], tg[256], sep = t.vocab - 2, pad = t.vocab - 1;
    int true_ok = 1, sep_empty_ok = 1, pad_ok = 1, shape_ok = 1, n_strings = 0, n_invalid_sym = 0;
    int alpha_ok = 1, range_ok = 1;
    for (int ex = 0; ex < 12; ex++) {
        int split = ex % 2, L = task_example(&t, split, (uint64_t)ex, in, tg);
        shape_ok &= L > 0 && L <= 256 && in[0] == sep && tg[L - 1] == sep;
        for (int i = 0; i + 1 < L; i++) shape_ok &= tg[i] == in[i + 1];
        for (int i = L; i < 256; i++) pad_ok &= in[i] == pad && tg[i] == TASK_IGNORE;
        pad_ok &= task_regbench_valid(&t, split, (uint64_t)ex, L, 0) == -1;
        int used[22] = {0}, n_used = 0;
        for (int p = 0; p < L; p++) {
            range_ok &= in[p] >= 0 && in[p] <= sep;
            // the true next token is valid; a separator that closes a string means the string is accepted
            true_ok &= task_regbench_valid(&t, split, (uint64_t)ex, p, tg[p]) == 1;
            n_strings += tg[p] == sep;
            if (in[p] == sep) sep_empty_ok &= task_regbench_valid(&t, split, (uint64_t)ex, p, sep) == 0;
            if (in[p] != sep && !used[in[p]]) {
                used[in[p]] = 1;
                n_used++;
            }
            pad_ok &= task_regbench_valid(&t, split, (uint64_t)ex, p, pad) == 0;
            for (int s = 0; s < sep; s++) n_invalid_sym += task_regbench_valid(&t, split, (uint64_t)ex, p, s) == 0;
        }
        alpha_ok &= n_used >= 1 && n_used <= 18;
    }
    CHECK(shape_ok, "regbench: SEP s_1 SEP .. SEP, targets are the next tokens");
    CHECK(range_ok, "regbench: inputs are symbols or the separator");
    CHECK(true_ok, "regbench: every true next token is valid, so every string (%d) is accepted", n_strings);
    CHECK(n_strings > 12 * 5, "regbench: several strings per example (%d in 12)", n_strings);
    CHECK(sep_empty_ok, "regbench: an empty string is never valid");
    CHECK(pad_ok, "regbench: padding ignored, pad never valid, -1 past the real length");
    CHECK(alpha_ok, "regbench: at most dfa_alphabet_max distinct symbols per example");
    CHECK(n_invalid_sym > 0, "regbench: the validity check rejects symbols too (%d rejections)", n_invalid_sym);

    // the validity function agrees with the sequence: after the same string prefix in one example the
    // same set of next tokens is valid (a DFA state is a function of the prefix)
    int consistent = 1;
    task_example(&t, TASK_TRAIN, 5, in, tg);
    for (int p = 1; p < 256 && in[p] != pad; p++) {
        if (in[p - 1] != sep) continue;  // p starts a string; compare its first-symbol options with p = 0
        for (int s = 0; s <= sep; s++)
            consistent &= task_regbench_valid(&t, TASK_TRAIN, 5, p - 1, s) == task_regbench_valid(&t, TASK_TRAIN, 5,
                                                                                                   0, s);
    }
    CHECK(consistent, "regbench: the start state's options are the same at every string start");

    // n_strings caps the number of strings per example
    TaskSpec u = spec_(TASK_REGBENCH);
    u.n_strings = 3;
    CHECK(resolve_(&u) == 0, "regbench: n_strings 3 resolves");
    int *uin = malloc(sizeof(int) * (size_t)u.seq_len), *utg = malloc(sizeof(int) * (size_t)u.seq_len), cap_ok = 1;
    for (int ex = 0; ex < 20; ex++) {
        int L = task_example(&u, TASK_TRAIN, (uint64_t)ex, uin, utg), k = 0;
        for (int p = 0; p < L; p++) k += utg[p] == sep;
        cap_ok &= k == 3;
    }
    CHECK(cap_ok, "regbench: n_strings 3 gives exactly 3 strings");
    free(uin);
    free(utg);
}

// ----------------------------------------------------------------------------------------------------
// task_resolve errors

static void check_err_(TaskSpec t, const char *needle, const char *what) {
    Err e = {{0}};
    int rc = task_resolve(&t, &e);
    CHECK(rc == -1, "resolve error: %s", what);
    CHECK_CONTAINS(e.msg, needle, "resolve error message names %s", needle);
}

static void test_errors_(void) {
    TaskSpec t = spec_(TASK_MQAR);
    t.seq_len = 63;
    check_err_(t, "seq_len", "mqar odd T");
    t = spec_(TASK_MQAR);
    t.num_kv_pairs = 17;
    check_err_(t, "num_kv_pairs", "mqar 4N > T");
    t = spec_(TASK_MQAR);
    t.vocab = 16;
    t.num_kv_pairs = 8;
    check_err_(t, "vocab", "mqar N > V/2 - 1");
    t = spec_(TASK_A5);
    t.vocab = 60;
    check_err_(t, "vocab", "a5 vocab is derived");
    t = spec_(TASK_S5);
    t.seq_len = 256;
    check_err_(t, "seq_len", "s5 seq_len shorter than test_len_max");
    t = spec_(TASK_PARITY);
    t.train_len_min = 50;
    t.train_len_max = 10;
    check_err_(t, "train_len_max", "parity max < min");
    t = spec_(TASK_COPY);
    t.test_len_max = 600;
    t.seq_len = 1025;
    check_err_(t, "seq_len", "copy seq_len < 2 * test_len_max + 1");
    t = spec_(TASK_REGBENCH);
    t.dfa_alphabet_max = 30;
    check_err_(t, "dfa_alphabet_max", "regbench alphabet larger than the symbols");
    t = spec_(TASK_REGBENCH);
    t.dfa_states_min = 9;
    t.dfa_states_max = 5;
    check_err_(t, "dfa_states_max", "regbench states max < min");
    t = spec_(TASK_REGBENCH);
    t.dfa_states_max = 100;
    check_err_(t, "dfa_states_max", "regbench too many states");
}

int main(void) {
    build_perms_();
    CHECK(n_perms_ == 120, "test table: 120 permutations");
    test_mqar_();
    test_word_(TASK_A5);
    test_word_(TASK_S5);
    test_parity_();
    test_copy_();
    test_regbench_();
    test_errors_();
    return test_summary();
}
