/*
 * Sequence tasks: Zoology MQAR, the word problems of A5 / S5 / S2 (parity), string copying and RegBench
 * (in-context learning of random DFAs). Every example is a pure function of (seed, split, index) through
 * task_rng, so it is the same whatever the visiting order or thread count.
 *
 * MQAR (Arora et al. 2023, zoology/data/multiquery_ar.py of HazyResearch/zoology d88d6f54): N keys
 * distinct from [1, V/2), N values distinct from [V/2, V), kvs = k1 v1 .. kN vN, then N queries placed at
 * gap indices drawn without replacement with p(g) ∝ a g^(a-1), g = 1..space (space = (T - 2N)/2), the
 * label of a query-key position is its value, every other target is TASK_IGNORE; random_non_queries
 * replaces the blank 0s by uniform tokens from [0, V). Settings the papers use (configs, not defaults):
 *   - Zoology:   T 64..512, N 4/8/16 for T 64/128/256, V 8192 (defaults here: V 8192, T 64, N 8, a 0.01)
 *   - KLA (App. E.2 / Table 9, "CR (hard)"): T 2048, V 256, 12,800 train / 1,280 eval sequences; the paper
 *     does not state N
 *   - BLA (Table 2): T 512, 64 kv pairs, V 8192
 * Zoology asserts V > T, which KLA's long MQAR (V 256 < T 2048) breaks; the paper says it "follows the
 * Zoology benchmark" with that V, so the generator they ran evidently did not keep the assert. Nothing in
 * the rules needs V > T: what they need is N distinct keys in [1, V/2) and N distinct values in
 * [V/2, V), i.e. N <= V/2 - 1. So we drop V > T and check N <= V/2 - 1 instead (V 256 allows N <= 127).
 * random_non_queries: 0 = the default (on, as Zoology), a negative value = off (the paper's figure 2
 * configs), positive = on. (0 cannot mean "off" because 0 fields mean "default" in TaskSpec.)
 *
 * Word problems (Merrill, Petty & Sabharwal 2024, "The Illusion of State in State-Space Models"): tokens
 * are group elements, inputs a uniform random word g_1 .. g_L, the target at position t the index of the
 * prefix product g_1 g_2 .. g_t. Permutations of {0..4} are arrays p (p[i] = image of i), indexed by their
 * rank in lexicographic order of the arrays (identity = 0); S5 uses all 120 ranks, A5 the 60 even
 * permutations renumbered 0..59 in the same lexicographic order. Composition: the product a·b applies a
 * first, then b ((a·b)[i] = b[a[i]], sympy's convention as in the word-problem code), so the prefix product
 * is P_t = P_{t-1}·g_t, P_t[i] = g_t[P_{t-1}[i]]. Parity (S2) is the same with bits and xor. Lengths: L
 * uniform in [train_len_min, train_len_max] (train) or [test_len_min, test_len_max] (test), defaults
 * 128..128 / 512..512; seq_len (default max of both) must cover both maxima; positions >= L hold the pad
 * token V-1 with TASK_IGNORE targets. V = 61 (A5), 121 (S5), 3 (parity).
 *
 * Copying (Jelassi et al. 2024, "Repeat After Me"; the format is seqtrain's own): a
 * string x_1..x_L of letters 0..25, then <copy> = 26, then the string again, then <eos> = 27, pad = 28
 * (V = 29). inputs = that sequence minus its last token, targets = it shifted by one: the targets are
 * supervised only from the <copy> position on (x_1 .. x_L and finally <eos>, so the model must also say
 * where the copy ends), TASK_IGNORE before. Real length 2L + 1. L uniform in the train / test range,
 * defaults 2..64 / 2..512 (the Selective RoPE paper's B.2.4 table); seq_len default 2 * max L + 1.
 *
 * RegBench (Akyurek et al. 2024, "In-Context Language Learning: Architectures and Algorithms"; these
 * generation rules are seqtrain's own, following the issue): per example a random DFA
 *   - n states uniform in [dfa_states_min, dfa_states_max] (default 4..12), state 0 the start;
 *   - an alphabet of c symbols, c uniform in [dfa_alphabet_min, dfa_alphabet_max] (default 4..18), a
 *     random subset of the V - 2 symbols (V default 22: 20 symbols, separator V-2, pad V-1);
 *   - each state gets d outgoing edges, d uniform in [1, c], on d distinct random symbols of the alphabet,
 *     each to a uniform random state; each state is accepting with probability 1/2 (at least one is);
 *   - the DFA is trimmed: edges into states that cannot reach an accepting state are removed (this keeps
 *     its language); a DFA whose start state is left without an edge is redrawn.
 * Strings: a walk from the start state choosing uniformly among the (trimmed) outgoing symbols; at an
 * accepting state after >= 1 symbol it stops with probability 1/4, and past 16 symbols it walks along a
 * shortest path to acceptance, so every string is non-empty and accepted. The example is
 * SEP s_1 SEP s_2 SEP .. s_k SEP, strings added while they fit in seq_len + 1 tokens (and k <= n_strings
 * when n_strings > 0); inputs = all tokens but the last, targets = next tokens (targets at the separators'
 * successors included). Default seq_len 512.
 *
 * Validity (proposed addition to tasks.h, defined here, not static):
 *   // RegBench: 1 when `token` is a valid next token after inputs[0..pos] of example (split, index):
 *   // a symbol with an edge from the current DFA state of the trimmed DFA (the prefix stays a prefix of
 *   // an accepted string), or the separator when the current string is non-empty and accepted;
 *   // 0 when not; -1 when pos is outside [0, real length) or the task is not RegBench
 *   int task_regbench_valid(const TaskSpec *t, int split, uint64_t index, int pos, int token);
 */
#include "data/tasks.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

// ----------------------------------------------------------------------------------------------------
// small random helpers (all draws go through the example's own Rng)

// uniform in [0, n), n >= 1; Lemire's multiply-shift with rejection, so no modulo bias
static uint64_t rand_below_(Rng *r, uint64_t n) {
    uint64_t x = rng_u64(r);
    __uint128_t m = (__uint128_t)x * n;
    uint64_t l = (uint64_t)m;
    if (l < n) {
        uint64_t thr = -n % n;
        while (l < thr) {
            x = rng_u64(r);
            m = (__uint128_t)x * n;
            l = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

// uniform in [lo, hi]
static int rand_range_(Rng *r, int lo, int hi) { return lo + (int)rand_below_(r, (uint64_t)(hi - lo + 1)); }

// k distinct values from [lo, lo + n), in uniformly random order (Floyd's sampling then a shuffle)
static void rand_distinct_(Rng *r, int lo, int n, int k, int *out) {
    for (int j = n - k, c = 0; j < n; j++, c++) {
        int v = (int)rand_below_(r, (uint64_t)j + 1), seen = 0;
        for (int i = 0; i < c; i++) seen |= out[i] == lo + v;
        out[c] = lo + (seen ? j : v);
    }
    for (int i = k - 1; i > 0; i--) {
        int j = (int)rand_below_(r, (uint64_t)i + 1), tmp = out[i];
        out[i] = out[j];
        out[j] = tmp;
    }
}

// the real length of a variable-length example of this split
static int draw_len_(Rng *r, const TaskSpec *t, int split) {
    return split == TASK_TEST ? rand_range_(r, t->test_len_min, t->test_len_max)
                              : rand_range_(r, t->train_len_min, t->train_len_max);
}

static void pad_(int *inputs, int *targets, int from, int T, int pad) {
    for (int i = from; i < T; i++) {
        inputs[i] = pad;
        targets[i] = TASK_IGNORE;
    }
}

// ----------------------------------------------------------------------------------------------------
// MQAR

#define MQAR_MAX_SPACE 65536

static int mqar_example_(const TaskSpec *t, Rng *r, int *inputs, int *targets) {
    // inputs, targets are (T,); T = seq_len, V = vocab, N = num_kv_pairs
    int T = t->seq_len, V = t->vocab, N = t->num_kv_pairs;
    int context = 2 * N, space = (T - context) / 2;
    int *keys = xmalloc(sizeof(int) * (size_t)N * 3);
    int *vals = keys + N, *gaps = vals + N;
    rand_distinct_(r, 1, V / 2 - 1, N, keys);
    rand_distinct_(r, V / 2, V - V / 2, N, vals);
    // gaps: N distinct draws from {0..space-1}, p(gap) ∝ a (gap+1)^(a-1), each draw renormalised over the
    // gaps not taken yet (numpy's choice(replace=False, p=...) does the same successive sampling)
    double *w = xmalloc(sizeof(double) * (size_t)space);
    double total = 0.0;
    for (int g = 0; g < space; g++) total += w[g] = t->power_a * pow(g + 1.0, t->power_a - 1.0);
    for (int i = 0; i < N; i++) {
        double u = rng_uniform(r) * total, acc = 0.0;
        int pick = -1;
        for (int g = 0; g < space; g++) {
            if (w[g] == 0.0) continue;
            pick = g;  // the last untaken gap catches rounding at the top end
            acc += w[g];
            if (u < acc) break;
        }
        gaps[i] = pick;
        total -= w[pick];
        w[pick] = 0.0;
        if (total <= 0.0) {  // guard against cancellation: recompute from the untaken weights
            total = 0.0;
            for (int g = 0; g < space; g++) total += w[g];
        }
    }
    free(w);
    // example = kvs ++ queries (T + 1 long); inputs = example[:-1]; targets = labels[1:]
    for (int i = 0; i < N; i++) {
        inputs[2 * i] = keys[i];
        inputs[2 * i + 1] = vals[i];
    }
    for (int i = context; i < T; i++) inputs[i] = 0;
    for (int i = 0; i < T; i++) targets[i] = TASK_IGNORE;
    for (int i = 0; i < N; i++) {
        int p = context + 2 * gaps[i];
        inputs[p] = keys[i];
        targets[p] = vals[i];
    }
    if (t->random_non_queries > 0)
        for (int i = 0; i < T; i++)
            if (inputs[i] == 0) inputs[i] = (int)rand_below_(r, (uint64_t)V);
    free(keys);
    return T;
}

// ----------------------------------------------------------------------------------------------------
// permutations of {0..4}: lexicographic rank <-> array

#define PERM_N 5
#define S5_ORDER 120
#define A5_ORDER 60

static void perm_unrank_(int rank, int *p) {
    int avail[PERM_N] = {0, 1, 2, 3, 4}, fact[PERM_N] = {24, 6, 2, 1, 1}, n = PERM_N;
    for (int i = 0; i < PERM_N; i++) {
        int d = rank / fact[i];
        rank %= fact[i];
        p[i] = avail[d];
        for (int j = d; j < n - 1; j++) avail[j] = avail[j + 1];
        n--;
    }
}

static int perm_rank_(const int *p) {
    int fact[PERM_N] = {24, 6, 2, 1, 1}, rank = 0;
    for (int i = 0; i < PERM_N; i++) {
        int smaller = 0;
        for (int j = i + 1; j < PERM_N; j++) smaller += p[j] < p[i];
        rank += smaller * fact[i];
    }
    return rank;
}

static int perm_is_even_(const int *p) {
    int inv = 0;
    for (int i = 0; i < PERM_N; i++)
        for (int j = i + 1; j < PERM_N; j++) inv += p[j] < p[i];
    return inv % 2 == 0;
}

// The groups once for all (the tables are the same for every example): S5's multiplication table on ranks,
// mul[a][b] = rank of a·b (apply a first, then b), and A5 / S5's elements as S5 ranks (elem2rank) with the
// inverse maps (rank2elem, -1 for the odd permutations in A5).
typedef struct GroupTables {
    unsigned char mul[S5_ORDER][S5_ORDER];
    int a5_elem2rank[A5_ORDER], a5_rank2elem[S5_ORDER], s5_rank2elem[S5_ORDER];
} GroupTables;

static GroupTables group_tables_;
static pthread_once_t group_tables_once_ = PTHREAD_ONCE_INIT;

static void group_tables_init_(void) {
    GroupTables *g = &group_tables_;
    int pa[PERM_N], pb[PERM_N], q[PERM_N], n = 0;
    for (int a = 0; a < S5_ORDER; a++) {
        perm_unrank_(a, pa);
        for (int b = 0; b < S5_ORDER; b++) {
            perm_unrank_(b, pb);
            for (int k = 0; k < PERM_N; k++) q[k] = pb[pa[k]];
            g->mul[a][b] = (unsigned char)perm_rank_(q);
        }
        g->s5_rank2elem[a] = a;
        g->a5_rank2elem[a] = -1;
        if (!perm_is_even_(pa)) continue;
        g->a5_rank2elem[a] = n;
        g->a5_elem2rank[n++] = a;
    }
}

static int word_example_(const TaskSpec *t, Rng *r, int split, int *inputs, int *targets) {
    // inputs, targets are (seq_len,); tokens are element indices 0..order-1, pad = V-1 = order
    pthread_once(&group_tables_once_, group_tables_init_);
    const GroupTables *g = &group_tables_;
    int a5 = t->kind == TASK_A5, order = a5 ? A5_ORDER : S5_ORDER;
    const int *rank2elem = a5 ? g->a5_rank2elem : g->s5_rank2elem;
    int L = draw_len_(r, t, split), P = 0;  // P: the prefix product's rank (0 = identity)
    for (int i = 0; i < L; i++) {
        int e = (int)rand_below_(r, (uint64_t)order);
        P = g->mul[P][a5 ? g->a5_elem2rank[e] : e];  // P·g: apply P first, then g
        inputs[i] = e;
        targets[i] = rank2elem[P];
    }
    pad_(inputs, targets, L, t->seq_len, t->vocab - 1);
    return L;
}

static int parity_example_(const TaskSpec *t, Rng *r, int split, int *inputs, int *targets) {
    // inputs, targets are (seq_len,); bits 0/1, pad 2
    int L = draw_len_(r, t, split), s = 0;
    for (int i = 0; i < L; i++) {
        int b = (int)(rng_u64(r) >> 63);
        s ^= b;
        inputs[i] = b;
        targets[i] = s;
    }
    pad_(inputs, targets, L, t->seq_len, t->vocab - 1);
    return L;
}

// ----------------------------------------------------------------------------------------------------
// copying

#define COPY_LETTERS 26
#define COPY_TOK 26
#define COPY_EOS 27
#define COPY_PAD 28

static int copy_example_(const TaskSpec *t, Rng *r, int split, int *inputs, int *targets) {
    // inputs, targets are (seq_len,); sequence x_1..x_L <copy> x_1..x_L <eos>, shifted by one
    int L = draw_len_(r, t, split);
    for (int i = 0; i < L; i++) inputs[i] = (int)rand_below_(r, COPY_LETTERS);
    inputs[L] = COPY_TOK;
    for (int i = 0; i < L; i++) inputs[L + 1 + i] = inputs[i];
    for (int i = 0; i < L; i++) targets[i] = TASK_IGNORE;
    for (int i = 0; i < L; i++) targets[L + i] = inputs[i];
    targets[2 * L] = COPY_EOS;
    pad_(inputs, targets, 2 * L + 1, t->seq_len, COPY_PAD);
    return 2 * L + 1;
}

// ----------------------------------------------------------------------------------------------------
// RegBench

#define RB_MAX_STATES 64
#define RB_MAX_SYMBOLS 256
#define RB_SOFT_MAX_LEN 16

typedef struct {
    int n_states, n_sym;                             // states 0..n-1 (0 = start), alphabet size
    int sym[RB_MAX_SYMBOLS];                         // the alphabet (vocabulary ids)
    int accept[RB_MAX_STATES], dist[RB_MAX_STATES];  // accepting; shortest distance to acceptance (-1: none)
    short next[RB_MAX_STATES][RB_MAX_SYMBOLS];       // next[q][j] for alphabet index j; -1 = no edge
} Dfa;

// draw a DFA and trim it (edges into states that cannot reach acceptance removed); 0 when usable
static int dfa_draw_(const TaskSpec *t, Rng *r, Dfa *d) {
    int n = rand_range_(r, t->dfa_states_min, t->dfa_states_max);
    int c = rand_range_(r, t->dfa_alphabet_min, t->dfa_alphabet_max);
    d->n_states = n;
    d->n_sym = c;
    rand_distinct_(r, 0, t->vocab - 2, c, d->sym);
    int idx[RB_MAX_SYMBOLS], any = 0;
    for (int q = 0; q < n; q++) {
        for (int j = 0; j < c; j++) d->next[q][j] = -1;
        int deg = rand_range_(r, 1, c);
        rand_distinct_(r, 0, c, deg, idx);
        for (int k = 0; k < deg; k++) d->next[q][idx[k]] = (short)rand_below_(r, (uint64_t)n);
        any |= d->accept[q] = (int)(rng_u64(r) >> 63);
    }
    if (!any) d->accept[rand_below_(r, (uint64_t)n)] = 1;
    // distances to acceptance by relaxation (n rounds of Bellman-Ford on unit edges)
    for (int q = 0; q < n; q++) d->dist[q] = d->accept[q] ? 0 : -1;
    for (int round = 0; round < n; round++)
        for (int q = 0; q < n; q++)
            for (int j = 0; j < c; j++) {
                int to = d->next[q][j];
                if (to < 0 || d->dist[to] < 0) continue;
                if (d->dist[q] < 0 || d->dist[to] + 1 < d->dist[q]) d->dist[q] = d->dist[to] + 1;
            }
    int start_out = 0;
    for (int q = 0; q < n; q++)
        for (int j = 0; j < c; j++)
            if (d->next[q][j] >= 0 && d->dist[d->next[q][j]] < 0) d->next[q][j] = -1;
    for (int j = 0; j < c; j++) start_out += d->next[0][j] >= 0;
    return d->dist[0] >= 0 && start_out > 0 ? 0 : -1;
}

static void dfa_make_(const TaskSpec *t, Rng *r, Dfa *d) {
    // redraw until usable: a random DFA's start state has an edge into a co-reachable state with
    // probability well above 1/2, so this loop ends after a couple of draws
    while (dfa_draw_(t, r, d) != 0) {}
}

// the alphabet index of vocabulary token tok, -1 when not in the alphabet
static int dfa_sym_index_(const Dfa *d, int tok) {
    for (int j = 0; j < d->n_sym; j++)
        if (d->sym[j] == tok) return j;
    return -1;
}

// one accepted non-empty string; returns its length, of which only the first min(length, cap) symbols are
// written to out (a string longer than cap does not fit and the caller drops it)
static int dfa_string_(const Dfa *d, Rng *r, int *out, int cap) {
    int q = 0, len = 0, opts[RB_MAX_SYMBOLS];
    for (;;) {
        int n_opt = 0;
        for (int j = 0; j < d->n_sym; j++) {
            int to = d->next[q][j];
            if (to < 0) continue;
            // past the soft max: only edges along a shortest path to acceptance
            if (len >= RB_SOFT_MAX_LEN && d->dist[to] != d->dist[q] - 1) continue;
            opts[n_opt++] = j;
        }
        // an accepting state stops the string with probability 1/4, always when past the soft max or when
        // nothing leads on (a non-accepting state always has an edge one step closer to acceptance)
        if (len > 0 && d->accept[q] && (n_opt == 0 || len >= RB_SOFT_MAX_LEN || rand_below_(r, 4) == 0))
            return len;
        int j = opts[rand_below_(r, (uint64_t)n_opt)];
        if (len < cap) out[len] = d->sym[j];
        len++;
        q = d->next[q][j];
    }
}

// the whole token sequence SEP s_1 SEP .. s_k SEP into seq (seq_len + 1 long); returns its length
static int regbench_sequence_(const TaskSpec *t, Rng *r, Dfa *d, int *seq) {
    int sep = t->vocab - 2, n = 0, k = 0;
    dfa_make_(t, r, d);
    seq[n++] = sep;
    int *buf = xmalloc(sizeof(int) * (size_t)(t->seq_len + 1));
    while (t->n_strings <= 0 || k < t->n_strings) {
        int cap = t->seq_len + 1 - n - 1;  // room for the string and its closing separator
        int len = dfa_string_(d, r, buf, cap > 0 ? cap : 0);
        if (len > cap) break;
        memcpy(seq + n, buf, sizeof(int) * (size_t)len);
        n += len;
        seq[n++] = sep;
        k++;
    }
    free(buf);
    return n;
}

static int regbench_example_(const TaskSpec *t, Rng *r, int *inputs, int *targets) {
    // inputs, targets are (seq_len,): next-token prediction over SEP s_1 SEP s_2 .. SEP
    Dfa *d = xmalloc(sizeof(Dfa));
    int *seq = xmalloc(sizeof(int) * (size_t)(t->seq_len + 1));
    int n = regbench_sequence_(t, r, d, seq), L = n - 1;
    for (int i = 0; i < L; i++) {
        inputs[i] = seq[i];
        targets[i] = seq[i + 1];
    }
    pad_(inputs, targets, L, t->seq_len, t->vocab - 1);
    free(seq);
    free(d);
    return L;
}

int task_regbench_valid(const TaskSpec *t, int split, uint64_t index, int pos, int token) {
    if (t->kind != TASK_REGBENCH || pos < 0 || pos >= t->seq_len) return -1;
    Rng r;
    task_rng(&r, t, split, index);
    Dfa *d = xmalloc(sizeof(Dfa));
    int *seq = xmalloc(sizeof(int) * (size_t)(t->seq_len + 1));
    int n = regbench_sequence_(t, &r, d, seq), sep = t->vocab - 2, ok = -1;
    if (pos < n - 1) {
        // run the DFA over the current string: the tokens after the last separator in inputs[0..pos]
        int start = pos;
        while (seq[start] != sep) start--;
        int q = 0;
        for (int i = start + 1; i <= pos; i++) q = d->next[q][dfa_sym_index_(d, seq[i])];
        if (token == sep) {
            ok = pos > start && d->accept[q];
        } else {
            int j = dfa_sym_index_(d, token);
            ok = j >= 0 && d->next[q][j] >= 0;
        }
    }
    free(seq);
    free(d);
    return ok;
}

// ----------------------------------------------------------------------------------------------------
// defaults, validation and dispatch

static int len_range_(int *lo, int *hi, int def_lo, int def_hi, const char *name_lo, const char *name_hi,
                      int min_allowed, Err *e) {
    if (*lo <= 0) *lo = def_lo;
    if (*hi <= 0) *hi = def_hi > *lo ? def_hi : *lo;
    if (*lo < min_allowed) return err_set(e, "task: %s = %d must be >= %d", name_lo, *lo, min_allowed);
    if (*hi < *lo) return err_set(e, "task: %s = %d must be >= %s = %d", name_hi, *hi, name_lo, *lo);
    return 0;
}

static int derived_vocab_(TaskSpec *t, int V, Err *e) {
    if (t->vocab > 0 && t->vocab != V)
        return err_set(e, "task %s: vocab = %d but the task's vocabulary is %d (leave vocab 0)",
                       task_kind_name(t->kind), t->vocab, V);
    t->vocab = V;
    return 0;
}

static int seq_len_covers_(TaskSpec *t, int need, Err *e) {
    if (t->seq_len <= 0) t->seq_len = need;
    if (t->seq_len < need)
        return err_set(e, "task %s: seq_len = %d is shorter than the longest example (%d, from the "
                       "train_len_max / test_len_max)", task_kind_name(t->kind), t->seq_len, need);
    return 0;
}

static int resolve_mqar_(TaskSpec *t, Err *e) {
    if (t->vocab <= 0) t->vocab = 8192;
    if (t->seq_len <= 0) t->seq_len = 64;
    if (t->num_kv_pairs <= 0) t->num_kv_pairs = 8;
    if (t->power_a <= 0.0) t->power_a = 0.01;
    if (t->random_non_queries == 0) t->random_non_queries = 1;
    int T = t->seq_len, V = t->vocab, N = t->num_kv_pairs;
    if (T % 2) return err_set(e, "task mqar: seq_len = %d must be even", T);
    if (4 * N > T) return err_set(e, "task mqar: num_kv_pairs = %d needs seq_len >= 4 * num_kv_pairs = %d "
                                  "(seq_len = %d)", N, 4 * N, T);
    if (V < 4 || N > V / 2 - 1)
        return err_set(e, "task mqar: num_kv_pairs = %d needs vocab >= 2 * num_kv_pairs + 2 = %d (distinct keys "
                       "from [1, vocab/2), vocab = %d)", N, 2 * N + 2, V);
    if ((T - 2 * N) / 2 > MQAR_MAX_SPACE) return err_set(e, "task mqar: seq_len = %d too long (max %d)", T,
                                                         2 * MQAR_MAX_SPACE);
    return 0;
}

static int resolve_lengths_(TaskSpec *t, int tr_lo, int tr_hi, int te_lo, int te_hi, Err *e) {
    if (len_range_(&t->train_len_min, &t->train_len_max, tr_lo, tr_hi, "train_len_min", "train_len_max", 1, e))
        return -1;
    return len_range_(&t->test_len_min, &t->test_len_max, te_lo, te_hi, "test_len_min", "test_len_max", 1, e);
}

static int max_len_(const TaskSpec *t) {
    return t->train_len_max > t->test_len_max ? t->train_len_max : t->test_len_max;
}

static int resolve_regbench_(TaskSpec *t, Err *e) {
    if (t->vocab <= 0) t->vocab = 22;
    if (t->seq_len <= 0) t->seq_len = 512;
    if (len_range_(&t->dfa_states_min, &t->dfa_states_max, 4, 12, "dfa_states_min", "dfa_states_max", 1, e))
        return -1;
    if (len_range_(&t->dfa_alphabet_min, &t->dfa_alphabet_max, 4, 18, "dfa_alphabet_min", "dfa_alphabet_max", 1,
                   e))
        return -1;
    if (t->dfa_states_max > RB_MAX_STATES)
        return err_set(e, "task regbench: dfa_states_max = %d must be <= %d", t->dfa_states_max, RB_MAX_STATES);
    if (t->dfa_alphabet_max > RB_MAX_SYMBOLS)
        return err_set(e, "task regbench: dfa_alphabet_max = %d must be <= %d", t->dfa_alphabet_max,
                       RB_MAX_SYMBOLS);
    if (t->dfa_alphabet_max > t->vocab - 2)
        return err_set(e, "task regbench: dfa_alphabet_max = %d needs vocab >= dfa_alphabet_max + 2 = %d "
                       "(symbols, separator, pad; vocab = %d)", t->dfa_alphabet_max, t->dfa_alphabet_max + 2,
                       t->vocab);
    if (t->seq_len < 2) return err_set(e, "task regbench: seq_len = %d must be >= 2", t->seq_len);
    return 0;
}

int task_resolve_seq(TaskSpec *t, Err *e) {
    switch (t->kind) {
    case TASK_MQAR:
        return resolve_mqar_(t, e);
    case TASK_A5:
    case TASK_S5:
    case TASK_PARITY: {
        int V = t->kind == TASK_A5 ? A5_ORDER + 1 : t->kind == TASK_S5 ? S5_ORDER + 1 : 3;
        if (derived_vocab_(t, V, e) || resolve_lengths_(t, 128, 128, 512, 512, e)) return -1;
        return seq_len_covers_(t, max_len_(t), e);
    }
    case TASK_COPY:
        if (derived_vocab_(t, COPY_PAD + 1, e) || resolve_lengths_(t, 2, 64, 2, 512, e)) return -1;
        return seq_len_covers_(t, 2 * max_len_(t) + 1, e);
    case TASK_REGBENCH:
        return resolve_regbench_(t, e);
    default:
        return err_set(e, "task: %s is not a sequence task", task_kind_name(t->kind));
    }
}

int task_example_seq(const TaskSpec *t, int split, uint64_t index, int *inputs, int *targets) {
    // inputs, targets are (seq_len,); returns the real length
    Rng r;
    task_rng(&r, t, split, index);
    switch (t->kind) {
    case TASK_MQAR: return mqar_example_(t, &r, inputs, targets);
    case TASK_A5:
    case TASK_S5: return word_example_(t, &r, split, inputs, targets);
    case TASK_PARITY: return parity_example_(t, &r, split, inputs, targets);
    case TASK_COPY: return copy_example_(t, &r, split, inputs, targets);
    case TASK_REGBENCH: return regbench_example_(t, &r, inputs, targets);
    default: return -1;
    }
}
