/*
 * The MAD-Lab synthetic tasks (Poli et al. 2024, "Mechanistic Design and Scaling of Hybrid Architectures"):
 * in-context recall, noisy and fuzzy in-context recall, selective copying, memorization and compression.
 * Each generator ports the rules of mad/data/instances.py (athms/mad-lab 0f49a452; docs/tasks.md); the
 * comment above each generator restates the rule it implements.
 *
 * Differences from the Python that are deliberate (the distributions are the same unless said otherwise):
 *   - every example draws from its own stream task_rng(seed, split, index) instead of one numpy stream shared
 *     by the whole dataset, so examples do not depend on the order they are generated in;
 *   - "pick one of all the permutations of length s" is drawn directly as a random s-tuple without repeats
 *     (the Python builds and shuffles the full list first: same distribution, far less work);
 *   - quirks of the reference are kept or replaced as noted at each generator (selective copying's global
 *     numpy RNG, compression's discarded noise mask, fuzzy ICR's padding targets, multi-query ICR's length).
 *
 * multi_query (ICR variants): 0 = the benchmark default (on), 1 = on, -1 = off (the original single-query
 * form with a copy-prefix token before the final probe).
 */
#include "data/tasks.h"

#include <stdlib.h>
#include <string.h>

#define MAD_MAX_MOTIF 16  // fuzzy ICR: longest key / value motif (the benchmark uses 3)

// ----------------------------------------------------------------------------------------------------
// small helpers

// uniform integer in [0, n), n >= 1
static int rand_below_(Rng *r, int n) {
    int x = (int)(rng_uniform(r) * (double)n);
    return x < n ? x : n - 1;  // rounding of u*n can reach n when n is large
}

// a uniformly random ordered s-tuple of distinct tokens from [base, base + n) (needs s <= n): the same
// distribution as rng.choice(list(itertools.permutations(range(base, base + n), s)))
static void rand_tuple_(Rng *r, int *out, int s, int base, int n) {
    // out is (s,)
    for (int i = 0; i < s; i++) {
        int x, dup;
        do {
            x = base + rand_below_(r, n);
            dup = 0;
            for (int j = 0; j < i; j++) dup |= out[j] == x;
        } while (dup);
        out[i] = x;
    }
}

// the raw token stream of a generator: token p goes to in[p] and its target to tg[p] (shift == 0), or, for
// the autoregressive split rule, in[p] for p < lim and tg[p-1] for p >= 1 (shift == 1): this writes
// (inputs[:-1], inputs[1:]) (train) or (inputs[:-1], targets[1:]) (test) without a buffer for the raw sequence
typedef struct {
    int *in, *tg;
    int n;      // raw tokens emitted so far
    int lim;    // room in in[] / tg[] (seq_len)
    int shift;  // 1: autoregressive shift as above
    int train;  // with shift: the target of a token is the next raw input (1) or the next raw target (0)
} Stream;

static void emit_(Stream *s, int tok, int tgt) {
    int p = s->n++;
    if (!s->shift) {
        if (p < s->lim) { s->in[p] = tok; s->tg[p] = tgt; }
        return;
    }
    if (p < s->lim) s->in[p] = tok;
    if (p >= 1 && p - 1 < s->lim) s->tg[p - 1] = s->train ? tok : tgt;
}

// the length the shifted stream wrote (raw - 1); fills the unused tail with token 0 / TASK_IGNORE
static int finish_shifted_(Stream *s) {
    int len = s->n - 1;
    for (int p = len; p < s->lim; p++) { s->in[p] = 0; s->tg[p] = TASK_IGNORE; }
    return len;
}

// ----------------------------------------------------------------------------------------------------
// defaults and validation

// MAD benchmark defaults per task: vocab, seq_len
static const int MAD_VOCAB_[TASK_COMPRESSION + 1] = {16, 32, 16, 16, 256, 16};
static const int MAD_SEQ_LEN_[TASK_COMPRESSION + 1] = {128, 128, 128, 256, 32, 32};

static int is_icr_(TaskKind k) { return k == TASK_ICR || k == TASK_NOISY_ICR || k == TASK_FUZZY_ICR; }

int task_resolve_mad(TaskSpec *t, Err *e) {
    if (t->kind < TASK_ICR || t->kind > TASK_COMPRESSION)
        return err_set(e, "task: kind %d is not a MAD task", (int)t->kind);
    const char *name = task_kind_name(t->kind);
    if (t->vocab < 0) return err_set(e, "task.vocab: %d must be > 0 (0 = default %d for %s)",
                                     t->vocab, MAD_VOCAB_[t->kind], name);
    if (t->seq_len < 0) return err_set(e, "task.seq_len: %d must be > 0 (0 = default %d for %s)",
                                       t->seq_len, MAD_SEQ_LEN_[t->kind], name);
    if (t->vocab == 0) t->vocab = MAD_VOCAB_[t->kind];
    if (t->seq_len == 0) t->seq_len = MAD_SEQ_LEN_[t->kind];
    if (t->seq_len > (1 << 24)) return err_set(e, "task.seq_len: %d is too long (max %d)", t->seq_len, 1 << 24);
    int V = t->vocab, T = t->seq_len;

    // noise: noisy ICR defaults to 16 noise tokens at 20%; the others default to none but accept it
    if (t->noise_vocab < 0) return err_set(e, "task.noise_vocab: %d must be >= 0", t->noise_vocab);
    if (!(t->frac_noise >= 0 && t->frac_noise < 1))  // NaN too
        return err_set(e, "task.frac_noise: %g must be in [0, 1)", t->frac_noise);
    if (t->kind == TASK_NOISY_ICR) {
        if (t->noise_vocab == 0) t->noise_vocab = 16;
        if (t->frac_noise == 0) t->frac_noise = 0.2;
    }
    if (t->kind == TASK_SELECTIVE_COPY && (t->noise_vocab || t->frac_noise > 0))
        return err_set(e, "task.noise_vocab/frac_noise: selective_copy has no noise (got %d, %g)",
                       t->noise_vocab, t->frac_noise);
    if (t->frac_noise > 0 && t->noise_vocab == 0)
        return err_set(e, "task.noise_vocab: must be > 0 when task.frac_noise (%g) > 0 for %s", t->frac_noise, name);

    if (is_icr_(t->kind)) {
        if (t->multi_query == 0) t->multi_query = 1;
        if (t->multi_query != 1 && t->multi_query != -1)
            return err_set(e, "task.multi_query: %d must be 1 (on), -1 (off) or 0 (default: on) for %s",
                           t->multi_query, name);
    }
    int mq = t->multi_query == 1;

    switch (t->kind) {
    case TASK_ICR:
    case TASK_NOISY_ICR: {
        if (T % 2 != 0) return err_set(e, "task.seq_len: %d must be even for %s", T, name);
        if (T < 4) return err_set(e, "task.seq_len: %d must be >= 4 for %s", T, name);
        int nsv = (mq ? V : V - 1) - t->noise_vocab;  // key + value tokens
        if (nsv < 2)
            return err_set(e, "task.vocab: %d leaves %d key/value tokens for %s (noise_vocab %d%s); need >= 2",
                           V, nsv, name, t->noise_vocab, mq ? "" : ", copy prefix");
        break;
    }
    case TASK_FUZZY_ICR: {
        if (t->k_motif == 0) t->k_motif = 3;
        if (t->v_motif == 0) t->v_motif = 3;
        if (t->k_motif < 1 || t->k_motif > MAD_MAX_MOTIF)
            return err_set(e, "task.k_motif: %d must be in [1, %d]", t->k_motif, MAD_MAX_MOTIF);
        if (t->v_motif < 1 || t->v_motif > MAD_MAX_MOTIF)
            return err_set(e, "task.v_motif: %d must be in [1, %d]", t->v_motif, MAD_MAX_MOTIF);
        int nsv = (mq ? V - 1 : V - 2) - t->noise_vocab;
        int nk = nsv / 2, nv = nsv - nsv / 2;
        if (nk < t->k_motif || nv < t->v_motif)
            return err_set(e, "task.vocab: %d gives %d key and %d value tokens for fuzzy_icr; need >= k_motif %d "
                           "and >= v_motif %d", V, nk > 0 ? nk : 0, nv > 0 ? nv : 0, t->k_motif, t->v_motif);
        int kv = t->k_motif + t->v_motif;
        // the probe position is drawn below seq_len - 2 * (k + v) and the sequence needs room for a pair
        if (T <= 2 * kv)
            return err_set(e, "task.seq_len: %d must be > 2 * (k_motif + v_motif) = %d for fuzzy_icr", T, 2 * kv);
        break;
    }
    case TASK_SELECTIVE_COPY:
        if (t->n_copy == 0) t->n_copy = 16;
        if (t->n_copy < 1) return err_set(e, "task.n_copy: %d must be >= 1", t->n_copy);
        if (V < 3) return err_set(e, "task.vocab: %d must be >= 3 for selective_copy (copy + blank tokens)", V);
        if (T <= 2 * t->n_copy + 1)
            return err_set(e, "task.seq_len: %d must be > 2 * n_copy + 1 = %d for selective_copy", T, 2 * t->n_copy + 1);
        break;
    case TASK_MEMORIZATION: {
        if (t->n_train == 0) t->n_train = 256;
        if (t->n_train < 1) return err_set(e, "task.n_train: %d must be >= 1", t->n_train);
        if (T % 2 != 0) return err_set(e, "task.seq_len: %d must be even for memorization", T);
        int nsv = V - 1 - t->noise_vocab;
        if (nsv < 2)
            return err_set(e, "task.vocab: %d leaves %d key/value tokens for memorization (insert token, "
                           "noise_vocab %d); need >= 2", V, nsv, t->noise_vocab);
        break;
    }
    case TASK_COMPRESSION:
        if (T < 2) return err_set(e, "task.seq_len: %d must be >= 2 for compression", T);
        if (V - 1 - t->noise_vocab < 1)
            return err_set(e, "task.vocab: %d leaves no data tokens for compression (compression token, "
                           "noise_vocab %d)", V, t->noise_vocab);
        break;
    default:
        break;
    }
    return 0;
}

// ----------------------------------------------------------------------------------------------------
// in-context recall (plain and noisy)

// Rule (generate_in_context_recall_instance):
//   copy_prefix = V-1; nsv = (V if multi_query else V-1) - noise_vocab
//   keys [0, nsv/2), values [nsv/2, nsv), noise [nsv, nsv + noise_vocab)
//   num_kv_pairs = seq_len/2; not_noise_idx ~ U[0, num_kv_pairs)
//   for i in 0..num_kv_pairs-2: with prob frac_noise (never at i = not_noise_idx) two noise tokens
//     (targets -100 -100), else k ~ U(keys), v = map[k] or a fresh U(values); inputs [k, v],
//     targets [-100, v if k was presented before and multi_query else -100]
//   final: k_probe ~ U(distinct keys presented), [copy_prefix]? + [k_probe, v_probe], targets [-100]? -100 v_probe
//   train: (inputs[:-1], inputs[1:]); test: (inputs[:-1], targets[1:])
// The raw sequence is seq_len tokens with multi_query (so the example is seq_len-1 long: the last slot is
// filled with token 0 / TASK_IGNORE and the return value is seq_len-1), seq_len+1 without (length seq_len).
// Quirk: not_noise_idx can be num_kv_pairs-1, which the loop never reaches, so every pair may be noise;
// Python then fails on rng.choice([]); here the probe is a fresh key with a fresh value instead.
static int icr_example_(const TaskSpec *t, Rng *r, int train, int *inputs, int *targets) {
    int mq = t->multi_query == 1;
    int nsv = (mq ? t->vocab : t->vocab - 1) - t->noise_vocab;
    int nk = nsv / 2, nv = nsv - nk;
    int copy_prefix = t->vocab - 1;
    int num_kv_pairs = t->seq_len / 2;
    int *kv_map = xmalloc((size_t)nk * sizeof(int));  // (nk,) value of each key presented so far, or -1
    for (int k = 0; k < nk; k++) kv_map[k] = -1;
    Stream s = {inputs, targets, 0, t->seq_len, 1, train};

    int not_noise_idx = rand_below_(r, num_kv_pairs);
    int n_presented = 0;
    for (int i = 0; i < num_kv_pairs - 1; i++) {
        int is_noise = (i != not_noise_idx && t->frac_noise > 0) ? rng_uniform(r) < t->frac_noise : 0;
        if (is_noise) {
            for (int j = 0; j < 2; j++) emit_(&s, nsv + rand_below_(r, t->noise_vocab), TASK_IGNORE);
            continue;
        }
        int k = rand_below_(r, nk);
        int seen = kv_map[k] >= 0;
        if (!seen) { kv_map[k] = nk + rand_below_(r, nv); n_presented++; }
        emit_(&s, k, TASK_IGNORE);
        emit_(&s, kv_map[k], (seen && mq) ? kv_map[k] : TASK_IGNORE);
    }

    // the probe: uniform over the distinct keys presented (Python: rng.choice(list(keys_presented)))
    int k_probe = -1;
    if (n_presented > 0) {
        int pick = rand_below_(r, n_presented);
        for (int k = 0; k < nk; k++)
            if (kv_map[k] >= 0 && pick-- == 0) { k_probe = k; break; }
    } else {
        k_probe = rand_below_(r, nk);
        kv_map[k_probe] = nk + rand_below_(r, nv);
    }
    if (!mq) emit_(&s, copy_prefix, TASK_IGNORE);
    emit_(&s, k_probe, TASK_IGNORE);
    emit_(&s, kv_map[k_probe], kv_map[k_probe]);
    free(kv_map);
    return finish_shifted_(&s);
}

// ----------------------------------------------------------------------------------------------------
// fuzzy in-context recall

typedef struct {
    int k[MAD_MAX_MOTIF], v[MAD_MAX_MOTIF];
    int nk, nv;
} Motif;

static int tuple_eq_(const int *a, int na, const int *b, int nb) {
    if (na != nb) return 0;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

// Rule (generate_fuzzy_in_context_recall_instance):
//   copy_prefix = V-1; pad = V-1 if multi_query else V-2; nsv = (V-1 if multi_query else V-2) - noise_vocab
//   keys: ordered tuples without repeats from [0, nsv/2) of length 1..k_motif (train) / exactly k_motif (test);
//   values: from [nsv/2, nsv), length 1..v_motif (both splits)
//   probe (k_probe, v_probe) drawn first; probe_idx ~ U[0, seq_len - 2*|kv_probe|)
//   while len < seq_len - |kv_probe| - (k_motif + v_motif):
//     draw k_size, v_size; if len >= probe_idx and the probe is not in yet: insert it (targets -100) and go on;
//     noise (prob frac_noise: k_size + v_size noise tokens, targets -100) or a pair: k ~ keys[k_size];
//     v = v_probe if k == k_probe (and then the probe counts as added: quirk, kept), else the stored value of k
//     or a fresh one of length v_size; targets -100 on k, v on v if k was presented before (multi_query)
//   final: [copy_prefix]? + k_probe + v_probe, targets -100 ... + v_probe (supervised even when the probe never
//   made it into the sequence, which can happen when probe_idx is past the loop's end: quirk, kept)
//   left-pad with pad to seq_len+1; train (inputs[:-1], inputs[1:]); test (inputs[:-1], targets[1:])
// Padding: the Python trains on the shifted inputs, so pad->pad predictions are supervised there; here every
// target whose next token is a pad is TASK_IGNORE in both splits (the first real token stays the target of
// the last pad in train, as in the Python). Returns seq_len.
static int fuzzy_example_(const TaskSpec *t, Rng *r, int train, int *inputs, int *targets) {
    int mq = t->multi_query == 1;
    int V = t->vocab, T = t->seq_len, K = t->k_motif, VM = t->v_motif;
    int copy_prefix = V - 1, pad = mq ? V - 1 : V - 2;
    int nsv = (mq ? V - 1 : V - 2) - t->noise_vocab;
    int nk = nsv / 2, nv = nsv - nk;
    // the raw sequence (unshifted, unpadded) is written at inputs[0..n), targets[0..n); n <= seq_len (see below)
    Stream s = {inputs, targets, 0, T, 0, train};

    Motif probe;
    probe.nk = train ? 1 + rand_below_(r, K) : K;
    probe.nv = 1 + rand_below_(r, VM);
    rand_tuple_(r, probe.k, probe.nk, 0, nk);
    rand_tuple_(r, probe.v, probe.nv, nk, nv);
    int kvp = probe.nk + probe.nv;
    int probe_idx = rand_below_(r, T - 2 * kvp);
    int probe_added = 0;

    // keys presented so far with their values; each pair takes >= 2 tokens, so seq_len/2 + 1 entries suffice
    Motif *seen = xmalloc((size_t)(T / 2 + 1) * sizeof(Motif));  // (n_seen,)
    int n_seen = 0;
    // the loop adds at most k_motif + v_motif tokens per round, so it stops at <= seq_len - kvp - 1 tokens and
    // the whole raw sequence (plus the probe and a copy prefix) is <= seq_len
    while (s.n < T - kvp - (K + VM)) {
        int k_size = train ? 1 + rand_below_(r, K) : K;
        int v_size = 1 + rand_below_(r, VM);
        if (s.n >= probe_idx && !probe_added) {
            for (int i = 0; i < probe.nk; i++) emit_(&s, probe.k[i], TASK_IGNORE);
            for (int i = 0; i < probe.nv; i++) emit_(&s, probe.v[i], TASK_IGNORE);
            int f = -1;
            for (int j = 0; j < n_seen && f < 0; j++)
                if (tuple_eq_(seen[j].k, seen[j].nk, probe.k, probe.nk)) f = j;
            if (f < 0) seen[n_seen++] = probe;
            probe_added = 1;
            continue;
        }
        int is_noise = t->frac_noise > 0 ? rng_uniform(r) < t->frac_noise : 0;
        if (is_noise) {
            for (int i = 0; i < k_size + v_size; i++) emit_(&s, nsv + rand_below_(r, t->noise_vocab), TASK_IGNORE);
            continue;
        }
        Motif m;
        m.nk = k_size;
        rand_tuple_(r, m.k, k_size, 0, nk);
        int f = -1;
        for (int j = 0; j < n_seen && f < 0; j++)
            if (tuple_eq_(seen[j].k, seen[j].nk, m.k, m.nk)) f = j;
        int presented = f >= 0;
        if (tuple_eq_(m.k, m.nk, probe.k, probe.nk)) {
            m = probe;
            probe_added = 1;
        } else if (presented) {
            m = seen[f];
        } else {
            m.nv = v_size;
            rand_tuple_(r, m.v, v_size, nk, nv);
        }
        if (!presented) seen[n_seen++] = m;
        for (int i = 0; i < m.nk; i++) emit_(&s, m.k[i], TASK_IGNORE);
        for (int i = 0; i < m.nv; i++) emit_(&s, m.v[i], (presented && mq) ? m.v[i] : TASK_IGNORE);
    }
    free(seen);
    if (!mq) emit_(&s, copy_prefix, TASK_IGNORE);
    for (int i = 0; i < probe.nk; i++) emit_(&s, probe.k[i], TASK_IGNORE);
    for (int i = 0; i < probe.nv; i++) emit_(&s, probe.v[i], probe.v[i]);

    // left-pad the raw R tokens to seq_len+1 (n_pad >= 1), then shift: output j reads padded position j
    // (input) and j+1 (target); padded position q holds raw token q - n_pad
    int R = s.n, n_pad = T + 1 - R;
    if (train) memmove(targets + n_pad - 1, inputs, (size_t)R * sizeof(int));
    else memmove(targets + n_pad - 1, targets, (size_t)R * sizeof(int));
    for (int j = 0; j < n_pad - 1; j++) targets[j] = TASK_IGNORE;
    memmove(inputs + n_pad, inputs, (size_t)(R - 1) * sizeof(int));
    for (int j = 0; j < n_pad; j++) inputs[j] = pad;
    return T;
}

// ----------------------------------------------------------------------------------------------------
// selective copying

// Rule (generate_copying_instance, selective=True):
//   copy = V-1, blank = V-2; to_copy = n_copy tokens ~ U[0, V-2) with replacement
//   num_blank = seq_len - 2*n_copy - 1 blanks inserted with np.insert at indices ~ U[0, n_copy) (so before
//   to_copy[idx], never after the last token); then [copy] + [blank]*n_copy
//   targets = [-100]*(seq_len - n_copy) + to_copy; no shift, train == test
// Quirk: the Python draws the insert indices from the GLOBAL numpy RNG (np.random.randint), not from the
// dataset's rng, so its blank layout is not reproducible from the seed; here they come from the example's
// own stream like everything else (same distribution: each blank lands before a uniform to_copy token).
static int selcopy_example_(const TaskSpec *t, Rng *r, int *inputs, int *targets) {
    int T = t->seq_len, n = t->n_copy;
    int copy_token = t->vocab - 1, blank = t->vocab - 2;
    int num_blank = T - 2 * n - 1;
    int *to_copy = targets + (T - n);  // (n,) the tokens to copy, already where the targets want them
    for (int i = 0; i < n; i++) to_copy[i] = rand_below_(r, t->vocab - 2);
    for (int i = 0; i < T - n; i++) targets[i] = TASK_IGNORE;
    // blanks before each to_copy token, counted in inputs[0..n) for now
    for (int i = 0; i < n; i++) inputs[i] = 0;
    for (int b = 0; b < num_blank; b++) inputs[rand_below_(r, n)]++;
    // lay out from the back, so the counts at inputs[0..j] are still intact when slot j is read
    int p = n + num_blank - 1;  // position of to_copy[n-1]
    for (int j = n - 1; j >= 0; j--) {
        int c = inputs[j];
        inputs[p--] = to_copy[j];
        for (int b = 0; b < c; b++) inputs[p--] = blank;
    }
    inputs[n + num_blank] = copy_token;
    for (int i = n + num_blank + 1; i < T; i++) inputs[i] = blank;
    return T;
}

// ----------------------------------------------------------------------------------------------------
// memorization

// the dataset's fixed key -> value map (generate_kv_map(nsv, seed)): keys = shuffled [0, nsv/2), values =
// shuffled [nsv/2, nsv), zipped (the one extra value when nsv is odd is unused). A pure function of the seed.
static void mem_kv_map_(const TaskSpec *t, int *keys, int *vals, int nk, int nv) {
    // keys is (nk,), vals is (nv,); keys[i] -> vals[i] for i < nk
    Rng r;
    uint64_t h = t->seed ^ 0x6b766d6170ull;  // "kvmap": a stream apart from every task_rng stream
    rng_seed(&r, splitmix64(&h));
    for (int i = 0; i < nk; i++) keys[i] = i;
    for (int i = 0; i < nv; i++) vals[i] = nk + i;
    for (int i = nk - 1; i > 0; i--) { int j = rand_below_(&r, i + 1), x = keys[i]; keys[i] = keys[j]; keys[j] = x; }
    for (int i = nv - 1; i > 0; i--) { int j = rand_below_(&r, i + 1), x = vals[i]; vals[i] = vals[j]; vals[j] = x; }
}

// Rule (generate_memorization_instance):
//   insert = V-1; nsv = V-1 - noise_vocab; the fixed map above
//   not_noise_idx ~ U[0, seq_len/2); for i in 0..seq_len/2-1: noise pair with prob frac_noise (never at
//   not_noise_idx; targets -100 -100), else k ~ U(keys): inputs [k, insert], targets [-100, map[k]]
//   no shift, train == test format. The train split is n_train examples (index mod n_train): the dataset
//   size is what this task measures; the test split draws fresh examples from the same distribution.
static int mem_example_(const TaskSpec *t, Rng *r, int *inputs, int *targets) {
    int nsv = t->vocab - 1 - t->noise_vocab, nk = nsv / 2, nv = nsv - nk;
    int insert = t->vocab - 1;
    int *keys = xmalloc((size_t)nsv * sizeof(int));  // (nk,) then (nv,)
    int *vals = keys + nk;
    mem_kv_map_(t, keys, vals, nk, nv);
    int num_kv_pairs = t->seq_len / 2;
    int not_noise_idx = rand_below_(r, num_kv_pairs);
    for (int i = 0; i < num_kv_pairs; i++) {
        int is_noise = (i != not_noise_idx && t->frac_noise > 0) ? rng_uniform(r) < t->frac_noise : 0;
        if (is_noise) {
            for (int j = 0; j < 2; j++) {
                inputs[2 * i + j] = nsv + rand_below_(r, t->noise_vocab);
                targets[2 * i + j] = TASK_IGNORE;
            }
            continue;
        }
        int m = rand_below_(r, nk);  // the m-th pair of the map: uniform over its keys
        inputs[2 * i] = keys[m];
        targets[2 * i] = TASK_IGNORE;
        inputs[2 * i + 1] = insert;
        targets[2 * i + 1] = vals[m];
    }
    free(keys);
    return t->seq_len;
}

// ----------------------------------------------------------------------------------------------------
// compression

// Rule (generate_compression_instance):
//   compression = V-1; inputs = (seq_len-1) tokens ~ U[0, V-1-noise_vocab) + [compression]
//   with frac_noise > 0, each of the first seq_len-1 inputs is replaced by a U(noise vocab) token with prob
//   frac_noise (in place, so the noise stays in the returned inputs)
//   returns (inputs, inputs): target = the input itself
// Quirk: the Python also builds noise-masked targets (-100 at the noise) and then returns inputs twice,
// discarding them; we do the same, so noise tokens are reconstruction targets too. By default there is no noise.
static int compress_example_(const TaskSpec *t, Rng *r, int *inputs, int *targets) {
    int T = t->seq_len, nsv = t->vocab - 1 - t->noise_vocab;
    for (int i = 0; i < T - 1; i++) inputs[i] = rand_below_(r, nsv);
    inputs[T - 1] = t->vocab - 1;
    if (t->frac_noise > 0)
        for (int i = 0; i < T - 1; i++)
            if (rng_uniform(r) < t->frac_noise) inputs[i] = nsv + rand_below_(r, t->noise_vocab);
    memcpy(targets, inputs, (size_t)T * sizeof(int));
    return T;
}

// ----------------------------------------------------------------------------------------------------
// dispatch

int task_example_mad(const TaskSpec *t, int split, uint64_t index, int *inputs, int *targets) {
    // inputs, targets are (seq_len,); t has been through task_resolve
    Rng r;
    int train = split == TASK_TRAIN;
    if (t->kind == TASK_MEMORIZATION && train) index %= (uint64_t)t->n_train;
    task_rng(&r, t, split, index);
    switch (t->kind) {
    case TASK_ICR:
    case TASK_NOISY_ICR: return icr_example_(t, &r, train, inputs, targets);
    case TASK_FUZZY_ICR: return fuzzy_example_(t, &r, train, inputs, targets);
    case TASK_SELECTIVE_COPY: return selcopy_example_(t, &r, inputs, targets);
    case TASK_MEMORIZATION: return mem_example_(t, &r, inputs, targets);
    case TASK_COMPRESSION: return compress_example_(t, &r, inputs, targets);
    default: return -1;
    }
}
