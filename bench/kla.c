/*
 * KLA benchmark (not a test): forward + backward time and tokens/s of the `kla` mixer next to the softmax
 * `attention` mixer, both built from JSON specs exactly as a model builds them, at a list of sequence
 * lengths, in one run on the same threads; the crossover length where kla becomes faster; and (--memory)
 * the activation memory of kla's chunked backward against its bound, with the peak RSS of a fresh child
 * process per checkpoint interval. Threads from OMP_NUM_THREADS (or --threads).
 *
 *   make benches && OMP_NUM_THREADS=16 build/release/bench/kla                  # T = 512, 2048, 8192
 *   build/release/bench/kla --T 512,1024,2048 --B 2 --d 128 --reps 3 --json out.json
 *   build/release/bench/kla --memory --T 2048 [--chunks 1,16,64,256,2048]
 *
 * Timing: per repeat one forward then one backward of the same (B,T) batch, each timed on its own;
 * gradients and dx are zeroed between repeats outside the timed region. The reported time is the median
 * over --reps after --warmup untimed repeats; tokens/s = B T / (forward + backward). kla is a fused block
 * (its gated product is the block's MLP), attention is the mixer alone: a model with attention also runs
 * an MLP per layer, which this bench does not time.
 *
 * Crossover: with r(T) = attention time / kla time, the first T where r goes from < 1 to >= 1,
 * interpolated linearly in (log T, log r) between the two measured points around it; outside the measured
 * range it says "below the smallest T" / "above the largest T". Also printed: the exponent p of time ~ T^p
 * (1 for a linear-time mixer at fixed B), and where the fitted per-token lines alpha + beta T of the two
 * mixers meet (causal attention's cost per token is exactly of this form), which extrapolates.
 *
 * Memory: the activations kla keeps for the backward are act_size(B,T) floats (the mixer's own count) =
 * B T M c1 + 2 B M S ceil(T/chunk): c1 (BT,M)-sized arrays (c1 counts the (BT,S) and (BT,) ones as
 * fractions of M) plus one (lambda, eta) checkpoint per chunk. The backward also needs scratch_size floats
 * (O(B T M), shared by the layers of a model) and, per thread, the states of one chunk of one channel
 * block, (chunk+1) MB 2S floats (nn/kalman.c), so a huge chunk trades checkpoints for recompute buffers.
 * Each setting runs in a forked child that has done no other work; its peak RSS growth (VmHWM at the end
 * minus VmRSS at the start) is compared with the floats it allocates.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "bench.h"
#include "core/timer.h"
#include "mixers/mixer.h"

#define MAX_T 64        // entries of --T and --chunks
#define MIB (1.0 / (1024.0 * 1024.0))

static const char *const DEFAULT_KLA_ = "{\"kind\":\"kla\",\"d_state\":16,\"sensors\":\"mamba\"}";
static const char *const DEFAULT_ATT_ = "{\"kind\":\"attention\",\"heads\":4}";

typedef struct Args {
    int Ts[MAX_T], nT, T_given;
    int chunks[MAX_T], nchunks;
    int B, d, reps, warmup, threads, memory, verbose;
    const char *kla, *att, *json;
} Args;


static void die_(const char *msg, const char *arg) {
    fprintf(stderr, "bench/kla: %s%s%s (--help for usage)\n", msg, arg ? ": " : "", arg ? arg : "");
    exit(2);
}

static void usage_(void) {
    printf("usage: kla [--T 512,2048,8192] [--B 4] [--d 256] [--reps 3] [--warmup 2] [--threads N]\n"
           "           [--kla JSON] [--attention JSON] [--json FILE] [--verbose (per-repeat times on stderr)]\n"
           "       kla --memory [--T 2048] [--chunks 1,16,64,256,T] [--B 4] [--d 256] [--kla JSON] [--json FILE]\n"
           "defaults: --kla '%s'\n          --attention '%s'\n"
           "threads: OMP_NUM_THREADS, or --threads\n", DEFAULT_KLA_, DEFAULT_ATT_);
}

// "512,2048,8192" -> ints > 0
static int parse_list_(const char *s, int *out) {
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v <= 0 || v > (1L << 24) || n == MAX_T || (*end && *end != ',')) die_("bad list", s);
        out[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (!n) die_("empty list", s);
    return n;
}

static int parse_int_(const char *s, int lo) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > (1L << 24)) die_("bad number", s);
    return (int)v;
}

static void args_parse_(Args *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    a->B = 4; a->d = 256; a->reps = 3; a->warmup = 2;
    a->kla = DEFAULT_KLA_; a->att = DEFAULT_ATT_;
    a->nT = parse_list_("512,2048,8192", a->Ts);
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) { usage_(); exit(0); }
        if (!strcmp(k, "--memory")) { a->memory = 1; continue; }
        if (!strcmp(k, "--verbose")) { a->verbose = 1; continue; }
        if (!v) die_("missing value after", k);
        i++;
        if (!strcmp(k, "--T")) { a->nT = parse_list_(v, a->Ts); a->T_given = 1; }
        else if (!strcmp(k, "--chunks")) a->nchunks = parse_list_(v, a->chunks);
        else if (!strcmp(k, "--B")) a->B = parse_int_(v, 1);
        else if (!strcmp(k, "--d")) a->d = parse_int_(v, 1);
        else if (!strcmp(k, "--reps")) a->reps = parse_int_(v, 1);
        else if (!strcmp(k, "--warmup")) a->warmup = parse_int_(v, 0);
        else if (!strcmp(k, "--threads")) a->threads = parse_int_(v, 1);
        else if (!strcmp(k, "--kla")) a->kla = v;
        else if (!strcmp(k, "--attention") || !strcmp(k, "--attn")) a->att = v;
        else if (!strcmp(k, "--json")) a->json = v;
        else die_("unknown option", k);
    }
    // ascending and distinct, so the crossover search walks T upwards
    for (int i = 1; i < a->nT; i++)
        for (int j = i; j > 0 && a->Ts[j - 1] > a->Ts[j]; j--) {
            int t = a->Ts[j];
            a->Ts[j] = a->Ts[j - 1];
            a->Ts[j - 1] = t;
        }
    for (int i = 1; i < a->nT; i++)
        if (a->Ts[i] == a->Ts[i - 1]) die_("repeated T in --T", NULL);
    if (a->memory && !a->T_given) { a->Ts[0] = 2048; a->nT = 1; }
    if (a->memory && a->nT != 1) die_("--memory takes one T", NULL);
}

// ----------------------------------------------------------------------------
// one mixer outside a model (as tests/mixer_layer.h, with errors reported instead of counted)

typedef struct Layer {
    MixerSpec spec;
    ParamTable pt;
    Mixer m;
    float *params, *grads, *acts, *scratch;
    size_t act_n, scratch_n;
    int C;
} Layer;

// json: {"kind": ..., options}; chunk > 0 overrides the "chunk" key (kla)
static void layer_build_(Layer *L, const char *json, int chunk, int C) {
    memset(L, 0, sizeof *L);
    Err e = {{0}};
    cJSON *j = cJSON_Parse(json);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        die_("mixer spec is not a JSON object", json);
    }
    if (chunk > 0) {
        cJSON_DeleteItemFromObjectCaseSensitive(j, "chunk");
        cJSON_AddNumberToObject(j, "chunk", chunk);
    }
    int rc = mixer_spec_parse(&L->spec, j, NULL, "mixer", C, &e);
    cJSON_Delete(j);
    if (rc) die_(e.msg, json);
    param_table_init(&L->pt);
    // n_layers = 6 only scales some output-projection inits; it does not change the work
    if (L->spec.ops->params(&L->spec, &L->pt, "mixer", 6, &e)) die_(e.msg, json);
    L->C = C;
    L->params = xmalloc(L->pt.numel * sizeof(float));
    L->grads = xcalloc(L->pt.numel, sizeof(float));
    param_init_all(&L->pt, L->params, 1234);
    L->m.spec = &L->spec;
    L->m.pt = &L->pt;
    L->m.params = L->params;
    L->m.grads = L->grads;
    if (L->spec.ops->init) L->spec.ops->init(&L->m);
}

static void layer_shape_(Layer *L, int B, int T) {
    free(L->acts);
    free(L->scratch);
    L->act_n = L->spec.ops->act_size(&L->spec, B, T);
    L->scratch_n = L->spec.ops->scratch_size(&L->spec, B, T);
    // calloc: untouched pages stay out of the RSS, so --memory sees what the mixer really writes
    L->acts = xcalloc(L->act_n + 1, sizeof(float));
    L->scratch = xcalloc(L->scratch_n + 1, sizeof(float));
    L->m.acts = L->acts;
    L->m.scratch = L->scratch;
    L->m.B = B;
    L->m.T = T;
}

static void layer_free_(Layer *L) {
    free(L->params); free(L->grads); free(L->acts); free(L->scratch);
    param_table_free(&L->pt);
    mixer_spec_free(&L->spec);
}

// (M, S) of kla from its lambda_log tensor (M,S); 0 when absent
static void kla_dims_(const Layer *L, int *M, int *S) {
    int k = param_find(&L->pt, "mixer.lambda_log");
    *M = k < 0 ? 0 : L->pt.t[k].shape[0];
    *S = k < 0 ? 0 : L->pt.t[k].shape[1];
}

static void fill_(float *x, size_t n, unsigned seed, float scale) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = ((seed >> 8) * (1.0f / 16777216.0f) - 0.5f) * 2.0f * scale;
    }
}

// x, dy (B,T,C) deterministic inputs; y, dx outputs
typedef struct Io {
    float *x, *y, *dy, *dx;
    size_t n;
} Io;

static void io_init_(Io *io, int B, int T, int C) {
    io->n = (size_t)B * T * C;
    io->x = xmalloc(io->n * sizeof(float)); io->dy = xmalloc(io->n * sizeof(float));
    io->y = xcalloc(io->n, sizeof(float)); io->dx = xcalloc(io->n, sizeof(float));
    fill_(io->x, io->n, 1, 1.0f);
    fill_(io->dy, io->n, 2, 0.01f);
}

static void io_free_(Io *io) { free(io->x); free(io->y); free(io->dy); free(io->dx); }

static int finite_(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

// ----------------------------------------------------------------------------
// speed

typedef struct Timing {
    double fwd_ms, bwd_ms, ms, tokens_per_s;
    size_t act_n;
} Timing;

static Timing time_mixer_(const char *json, const Args *a, int T, const char *label) {
    Layer L;
    layer_build_(&L, json, 0, a->d);
    layer_shape_(&L, a->B, T);
    Io io;
    io_init_(&io, a->B, T, a->d);
    double *tf = xmalloc((size_t)a->reps * sizeof(double)), *tb = xmalloc((size_t)a->reps * sizeof(double));
    double *tt = xmalloc((size_t)a->reps * sizeof(double));
    for (int rep = 0; rep < a->warmup + a->reps; rep++) {
        memset(L.grads, 0, L.pt.numel * sizeof(float));
        memset(io.dx, 0, io.n * sizeof(float));
        double t0 = time_now_s();
        L.spec.ops->forward(&L.m, io.y, io.x, a->B, T);
        double t1 = time_now_s();
        L.spec.ops->backward(&L.m, io.dx, io.dy, io.x, a->B, T);
        double t2 = time_now_s();
        if (rep >= a->warmup) {
            int r = rep - a->warmup;
            tf[r] = (t1 - t0) * 1e3; tb[r] = (t2 - t1) * 1e3; tt[r] = (t2 - t0) * 1e3;
            if (a->verbose)
                fprintf(stderr, "bench/kla: %s T=%d repeat %d: fwd %.2f ms, bwd %.2f ms\n", label, T, r, tf[r], tb[r]);
        }
    }
    if (!finite_(io.y, io.n) || !finite_(io.dx, io.n) || !finite_(L.grads, L.pt.numel)) {
        fprintf(stderr, "bench/kla: %s at T=%d produced non-finite outputs or gradients\n", label, T);
        exit(1);
    }
    Timing r;
    r.fwd_ms = bench_median(tf, a->reps);
    r.bwd_ms = bench_median(tb, a->reps);
    r.ms = bench_median(tt, a->reps);
    r.tokens_per_s = (double)a->B * T / (r.ms * 1e-3);
    r.act_n = L.act_n;
    free(tf); free(tb); free(tt);
    io_free_(&io);
    layer_free_(&L);
    return r;
}

// least-squares slope of log y over log x
static double loglog_slope_(const int *x, const double *y, int n) {
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) {
        double lx = log(x[i]), ly = log(y[i]);
        sx += lx; sy += ly; sxx += lx * lx; sxy += lx * ly;
    }
    double den = n * sxx - sx * sx;
    return den > 0 ? (n * sxy - sx * sy) / den : NAN;
}

// per-token time model y(T) = alpha + beta T (ms per token at fixed B), least squares in relative error
// (rows [1, T]/y against 1), so T = 512 counts as much as T = 8192. Causal attention costs exactly this
// (projections per token + T/2 keys per query); a linear-time mixer has beta ~ 0.
static void fit_per_token_(const int *Ts, const double *ms, int n, double *alpha, double *beta) {
    double s11 = 0, s12 = 0, s22 = 0, t1 = 0, t2 = 0;
    for (int i = 0; i < n; i++) {
        double y = ms[i] / Ts[i], a1 = 1.0 / y, a2 = Ts[i] / y;
        s11 += a1 * a1; s12 += a1 * a2; s22 += a2 * a2; t1 += a1; t2 += a2;
    }
    double det = s11 * s22 - s12 * s12;
    *alpha = det > 0 ? (t1 * s22 - t2 * s12) / det : NAN;
    *beta = det > 0 ? (s11 * t2 - s12 * t1) / det : NAN;
}

// the crossover of r(T) = attention time / kla time: the first T where r goes from < 1 to >= 1,
// interpolated in (log T, log r); returns "interpolated" with *lo its bracket's index, "below" (kla is
// faster at the smallest T already) or "above" (attention is faster at every measured T)
static const char *crossover_(const int *Ts, const double *r, int n, double *T_out, int *lo) {
    *T_out = NAN;
    *lo = -1;
    if (r[0] >= 1.0) return "below";
    for (int i = 0; i + 1 < n; i++) {
        if (r[i] < 1.0 && r[i + 1] >= 1.0) {
            double l0 = log(Ts[i]), l1 = log(Ts[i + 1]), g0 = log(r[i]), g1 = log(r[i + 1]);
            *T_out = exp(l0 + (0.0 - g0) * (l1 - l0) / (g1 - g0));
            *lo = i;
            return "interpolated";
        }
    }
    return "above";
}

static int run_speed_(const Args *a, cJSON *out) {
    int n = a->nT;
    Timing *tk = xcalloc((size_t)n, sizeof(Timing)), *ta = xcalloc((size_t)n, sizeof(Timing));
    for (int i = 0; i < n; i++) {
        // interleaved per T, so drifting clocks or load hit both mixers alike
        tk[i] = time_mixer_(a->kla, a, a->Ts[i], "kla");
        ta[i] = time_mixer_(a->att, a, a->Ts[i], "attention");
        fprintf(stderr, "bench/kla: T=%d done (kla %.1f ms, attention %.1f ms)\n", a->Ts[i], tk[i].ms, ta[i].ms);
    }
    printf("## kla vs attention: forward + backward\n\n");
    printf("threads %d, B=%d, d_model=%d, median of %d repeats after %d warm-up\n", bench_threads(), a->B, a->d,
           a->reps, a->warmup);
    printf("kla: `%s`\nattention: `%s`\n\n", a->kla, a->att);
    printf("| mixer | T | fwd ms | bwd ms | fwd+bwd ms | tokens/s | act MiB |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|\n");
    cJSON *rows = cJSON_AddArrayToObject(out, "rows");
    for (int i = 0; i < n; i++) {
        for (int w = 0; w < 2; w++) {
            const Timing *t = w ? &ta[i] : &tk[i];
            const char *name = w ? "attention" : "kla";
            printf("| %s | %d | %.2f | %.2f | %.2f | %.0f | %.1f |\n", name, a->Ts[i], t->fwd_ms, t->bwd_ms, t->ms,
                   t->tokens_per_s, t->act_n * 4.0 * MIB);
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "mixer", name);
            cJSON_AddNumberToObject(r, "T", a->Ts[i]);
            cJSON_AddNumberToObject(r, "fwd_ms", t->fwd_ms);
            cJSON_AddNumberToObject(r, "bwd_ms", t->bwd_ms);
            cJSON_AddNumberToObject(r, "ms", t->ms);
            cJSON_AddNumberToObject(r, "tokens_per_s", t->tokens_per_s);
            cJSON_AddNumberToObject(r, "act_floats", (double)t->act_n);
            cJSON_AddItemToArray(rows, r);
        }
    }
    double *ratio = xmalloc((size_t)n * sizeof(double)), *mk = xmalloc((size_t)n * sizeof(double));
    double *ma = xmalloc((size_t)n * sizeof(double));
    printf("\n| T | kla tokens/s | attention tokens/s | attention/kla time |\n|---:|---:|---:|---:|\n");
    cJSON *ratios = cJSON_AddArrayToObject(out, "ratios");
    for (int i = 0; i < n; i++) {
        ratio[i] = ta[i].ms / tk[i].ms;
        mk[i] = tk[i].ms;
        ma[i] = ta[i].ms;
        printf("| %d | %.0f | %.0f | %.3f |\n", a->Ts[i], tk[i].tokens_per_s, ta[i].tokens_per_s, ratio[i]);
        cJSON *r = cJSON_CreateObject();
        cJSON_AddNumberToObject(r, "T", a->Ts[i]);
        cJSON_AddNumberToObject(r, "attention_over_kla", ratio[i]);
        cJSON_AddItemToArray(ratios, r);
    }
    printf("\n");
    cJSON *cx = cJSON_AddObjectToObject(out, "crossover");
    if (n >= 2) {
        double pk = loglog_slope_(a->Ts, mk, n), pa = loglog_slope_(a->Ts, ma, n), ak, bk, aa, ba;
        fit_per_token_(a->Ts, mk, n, &ak, &bk);
        fit_per_token_(a->Ts, ma, n, &aa, &ba);
        printf("time ~ T^p at fixed B (least squares in log-log): kla p = %.2f, attention p = %.2f\n", pk, pa);
        printf("per-token time = alpha + beta T (us per token at B=%d): kla %.4g %+.3g T, attention %.4g %+.3g T\n",
               a->B, ak * 1e3, bk * 1e3, aa * 1e3, ba * 1e3);
        cJSON_AddNumberToObject(out, "kla_exponent", pk);
        cJSON_AddNumberToObject(out, "attention_exponent", pa);
        // where the two lines meet: the model's crossover, also outside the measured range
        double Tm = ba > 0 && ba > bk ? (ak - aa) / (ba - bk) : NAN;
        if (isfinite(Tm) && Tm > 0) {
            printf("model crossover (where the per-token lines meet): T ~ %.0f\n", Tm);
            cJSON_AddNumberToObject(cx, "model_T", Tm);
        } else {
            printf("model crossover: none (the per-token lines do not meet at T > 0)\n");
            cJSON_AddNullToObject(cx, "model_T");
        }
    }
    double Tx;
    int lo;
    const char *kind = crossover_(a->Ts, ratio, n, &Tx, &lo);
    cJSON_AddStringToObject(cx, "kind", kind);
    if (isfinite(Tx)) cJSON_AddNumberToObject(cx, "T", Tx);
    else cJSON_AddNullToObject(cx, "T");
    if (!strcmp(kind, "below"))
        printf("crossover: below the smallest T (kla is already faster at T=%d, %.2fx)\n", a->Ts[0], ratio[0]);
    else if (!strcmp(kind, "interpolated"))
        printf("crossover: kla becomes faster than attention at T ~ %.0f (log-T interpolation between T=%d and %d)\n",
               Tx, a->Ts[lo], a->Ts[lo + 1]);
    else
        printf("crossover: above the largest T (attention is faster at every T up to %d)\n", a->Ts[n - 1]);
    free(ratio); free(mk); free(ma); free(tk); free(ta);
    return 0;
}

// ----------------------------------------------------------------------------
// memory

// a "Vm...:  N kB" line of /proc/self/status in KiB, or -1
static long proc_status_kib_(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, key, kl) && line[kl] == ':') { v = strtol(line + kl + 1, NULL, 10); break; }
    }
    fclose(f);
    return v;
}

typedef struct MemReport {
    double act_n, scratch_n, param_n, io_n;  // floats
    long rss0_kib, hwm_kib;
    int M, S, ok;
} MemReport;

// in a fresh child: build, one forward + backward, report through the pipe
static MemReport mem_child_(const char *json, int chunk, int d, int B, int T) {
    MemReport r = {0};
    r.rss0_kib = proc_status_kib_("VmRSS");
    Layer L;
    layer_build_(&L, json, chunk, d);
    layer_shape_(&L, B, T);
    Io io;
    io_init_(&io, B, T, d);
    L.spec.ops->forward(&L.m, io.y, io.x, B, T);
    L.spec.ops->backward(&L.m, io.dx, io.dy, io.x, B, T);
    r.hwm_kib = proc_status_kib_("VmHWM");
    r.act_n = (double)L.act_n;
    r.scratch_n = (double)L.scratch_n;
    r.param_n = (double)L.pt.numel;
    r.io_n = 4.0 * io.n;
    kla_dims_(&L, &r.M, &r.S);
    r.ok = finite_(io.dx, io.n);
    io_free_(&io);
    layer_free_(&L);
    return r;
}

// fork, run mem_child_ there, collect its report; the parent never runs OpenMP (libgomp is not fork-safe)
static MemReport mem_measure_(const char *json, int chunk, const Args *a, int B, int T) {
    int fd[2];
    if (pipe(fd)) { perror("pipe"); exit(1); }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); exit(1); }
    if (pid == 0) {
        close(fd[0]);
#ifdef _OPENMP
        if (a->threads) omp_set_num_threads(a->threads);
#endif
        MemReport r = mem_child_(json, chunk, a->d, B, T);
        ssize_t w = write(fd[1], &r, sizeof r);
        _exit(w == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fd[1]);
    MemReport r;
    memset(&r, 0, sizeof r);
    ssize_t got = read(fd[0], &r, sizeof r);
    close(fd[0]);
    int status = 0;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0) { perror("wait4"); exit(1); }
    if (got != (ssize_t)sizeof r || !WIFEXITED(status) || WEXITSTATUS(status)) {
        fprintf(stderr, "bench/kla: memory child (chunk %d) failed (status %d)\n", chunk, status);
        exit(1);
    }
    if (r.hwm_kib < 0) { r.hwm_kib = ru.ru_maxrss; r.rss0_kib = 0; }  // no /proc: the child's whole peak
    return r;
}

// channels per work item of nn/kalman.c (kalman_block_): at most 8 blocks of >= 16 channels
static void kalman_blocks_(int M, int *MB, int *nblk) {
    int nb = (M + 15) / 16;
    if (nb > 8) nb = 8;
    *MB = (M + nb - 1) / nb;
    *nblk = (M + *MB - 1) / *MB;
}

static int run_memory_(const Args *a, cJSON *out) {
    int T = a->Ts[0], B = a->B, chunks[MAX_T + 1], nc = 0;
    if (a->nchunks) {
        for (int i = 0; i < a->nchunks; i++) chunks[nc++] = a->chunks[i];
    } else {
        static const int def[] = {1, 16, 64, 256};
        for (int i = 0; i < 4; i++)
            if (def[i] < T) chunks[nc++] = def[i];
        chunks[nc++] = T;
    }
    MemReport *rep = xcalloc((size_t)nc, sizeof(MemReport));
    for (int i = 0; i < nc; i++) {
        rep[i] = mem_measure_(a->kla, chunks[i], a, B, T);
        fprintf(stderr, "bench/kla: memory chunk=%d done\n", chunks[i]);
    }
    MemReport ra = mem_measure_(a->att, 0, a, B, T);
    // what any run costs besides its buffers: OpenMP thread stacks, matmul packing buffers, code and libraries
    MemReport r0 = mem_measure_(a->kla, 1, a, 1, 1);
    double base = (r0.hwm_kib - r0.rss0_kib) / 1024.0;
    int M = rep[0].M, S = rep[0].S, MB, nblk, thr = bench_threads();
    if (!M) die_("--memory: the --kla spec declares no mixer.lambda_log (not a kla mixer?)", a->kla);
    kalman_blocks_(M, &MB, &nblk);
    int busy = thr < B * nblk ? thr : B * nblk;  // threads that hold a recompute buffer at once
    // c1 from the largest chunk's act_size: everything but its checkpoints, per B T M
    int il = 0;
    for (int i = 1; i < nc; i++)
        if (chunks[i] > chunks[il]) il = i;
    double BTM = (double)B * T * M;
    double c1 = (rep[il].act_n - 2.0 * B * M * S * ceil((double)T / chunks[il])) / BTM;

    printf("## kla chunked backward: activation memory and peak RSS\n\n");
    printf("threads %d, B=%d, T=%d, d_model=%d, M=%d channels, S=%d slots; kla: `%s`\n\n", thr, B, T, a->d, M, S,
           a->kla);
    printf("- bound: act = B·T·M·c1 + 2·B·M·S·ceil(T/chunk) floats with c1 = %.4f (from act_size at the largest "
           "chunk); the act floats column is the mixer's own act_size.\n", c1);
    printf("- the backward also takes scratch = %.0f floats (%.1f MiB) whatever the chunk, and %d busy threads x "
           "(chunk+1)·%d·2·%d floats of recompute buffers (one chunk of one %d-channel block each).\n",
           rep[0].scratch_n, rep[0].scratch_n * 4 * MIB, busy, MB, S, MB);
    printf("- predicted = x, y, dy, dx + params, grads + act + scratch + recompute; peak RSS delta = VmHWM at the "
           "end - VmRSS at the start of a fresh child; net = that minus the fixed overhead of a B=1, T=1 run "
           "(%.1f MiB: thread stacks, matmul packing, code).\n\n", base);
    printf("| chunk | act floats | bound floats | checkpoint floats | act MiB | recompute MiB | predicted MiB | "
           "peak RSS delta MiB | net MiB |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    cJSON *rows = cJSON_AddArrayToObject(out, "memory");
    cJSON_AddNumberToObject(out, "T", T);
    cJSON_AddNumberToObject(out, "M", M);
    cJSON_AddNumberToObject(out, "S", S);
    cJSON_AddNumberToObject(out, "c1", c1);
    cJSON_AddNumberToObject(out, "overhead_mib", base);
    int exact = 1;
    for (int i = 0; i < nc; i++) {
        const MemReport *r = &rep[i];
        double ck = 2.0 * B * M * S * ceil((double)T / chunks[i]);
        double bound = BTM * c1 + ck;
        double recompute = (double)busy * (chunks[i] + 1) * MB * 2 * S;
        double pred = r->io_n + 2 * r->param_n + r->act_n + r->scratch_n + recompute;
        double meas = (r->hwm_kib - r->rss0_kib) / 1024.0;
        if (fabs(bound - r->act_n) > 0.5) exact = 0;
        printf("| %d | %.0f | %.0f | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", chunks[i], r->act_n, bound, ck,
               r->act_n * 4 * MIB, recompute * 4 * MIB, pred * 4 * MIB, meas, meas - base);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "chunk", chunks[i]);
        cJSON_AddNumberToObject(o, "act_floats", r->act_n);
        cJSON_AddNumberToObject(o, "bound_floats", bound);
        cJSON_AddNumberToObject(o, "checkpoint_floats", ck);
        cJSON_AddNumberToObject(o, "scratch_floats", r->scratch_n);
        cJSON_AddNumberToObject(o, "recompute_floats", recompute);
        cJSON_AddNumberToObject(o, "predicted_mib", pred * 4 * MIB);
        cJSON_AddNumberToObject(o, "peak_rss_delta_mib", meas);
        cJSON_AddItemToArray(rows, o);
    }
    double pa = ra.io_n + 2 * ra.param_n + ra.act_n + ra.scratch_n;
    double ma = (ra.hwm_kib - ra.rss0_kib) / 1024.0;
    printf("| attention | %.0f | | | %.1f | | %.1f | %.1f | %.1f |\n\n", ra.act_n, ra.act_n * 4 * MIB, pa * 4 * MIB,
           ma, ma - base);
    printf("act_size %s the bound at every chunk\n", exact ? "equals" : "DIFFERS FROM");
    cJSON *o = cJSON_AddObjectToObject(out, "attention_memory");
    cJSON_AddNumberToObject(o, "act_floats", ra.act_n);
    cJSON_AddNumberToObject(o, "predicted_mib", pa * 4 * MIB);
    cJSON_AddNumberToObject(o, "peak_rss_delta_mib", ma);
    free(rep);
    return exact ? 0 : 1;
}

int main(int argc, char **argv) {
    Args a;
    args_parse_(&a, argc, argv);
#ifdef _OPENMP
    if (a.threads) omp_set_num_threads(a.threads);
#endif
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "bench", a.memory ? "kla_memory" : "kla_speed");
    cJSON_AddNumberToObject(out, "threads", bench_threads());
    cJSON_AddNumberToObject(out, "B", a.B);
    cJSON_AddNumberToObject(out, "d_model", a.d);
    cJSON_AddStringToObject(out, "kla", a.kla);
    cJSON_AddStringToObject(out, "attention", a.att);
    int rc = a.memory ? run_memory_(&a, out) : run_speed_(&a, out);
    if (a.json) {
        char *s = cJSON_Print(out);
        FILE *f = fopen(a.json, "w");
        if (!f || fputs(s, f) < 0 || fputc('\n', f) < 0 || fclose(f)) {
            fprintf(stderr, "bench/kla: cannot write %s\n", a.json);
            rc = 1;
        }
        free(s);
    }
    cJSON_Delete(out);
    return rc;
}
