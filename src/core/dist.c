#define _GNU_SOURCE  // sched_getaffinity, CPU_COUNT
#include "core/dist.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef SEQ_MPI
#include <mpi.h>
#endif

static int rank_ = 0, size_ = 1;

int dist_rank(void) { return rank_; }
int dist_size(void) { return size_; }

int dist_cpus_allowed(void) {
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
#endif
    return 0;
}

#ifdef SEQ_MPI

int dist_built(void) { return 1; }

// An ordered sum, not MPI_SUM: MPI_Allreduce may combine the ranks' buffers in any grouping its algorithm
// picks (and, in principle, differently on different ranks). Here each rank owns one slice of the buffer,
// receives that slice from every rank (MPI_Alltoallv), adds them in rank order (((x0 + x1) + x2) + ...) and
// the slices are gathered back to every rank (MPI_Allgatherv): the same bits everywhere and in every run,
// for the same traffic as a ring all-reduce (twice the buffer's (N - 1) / N).
static void *scratch_;  // the slices received from every rank: one buffer's worth, kept between calls
static size_t scratch_bytes_;

static void add_f32_(void *acc, const void *x, size_t n) {
    float *a = acc;
    const float *b = x;
    for (size_t i = 0; i < n; i++) a[i] += b[i];
}
static void add_f64_(void *acc, const void *x, size_t n) {
    double *a = acc;
    const double *b = x;
    for (size_t i = 0; i < n; i++) a[i] += b[i];
}

// MPI counts and displacements are ints: a larger buffer goes in pieces of at most 2^30 elements
#define DIST_PIECE ((size_t)1 << 30)

static void sum_ordered_(char *x, size_t n, size_t esz, MPI_Datatype type, void (*add)(void *, const void *, size_t)) {
    int N = size_;
    int *cnt = xmalloc(4 * sizeof(int) * (size_t)N), *dsp = cnt + N, *rcnt = dsp + N, *rdsp = rcnt + N;
    for (size_t at = 0; at < n; at += DIST_PIECE) {
        size_t len = n - at < DIST_PIECE ? n - at : DIST_PIECE, per = (len + (size_t)N - 1) / (size_t)N;
        for (int r = 0; r < N; r++) {
            size_t lo = per * (size_t)r < len ? per * (size_t)r : len, hi = lo + per < len ? lo + per : len;
            cnt[r] = (int)(hi - lo);
            dsp[r] = (int)lo;
        }
        size_t mine = (size_t)cnt[rank_];
        for (int r = 0; r < N; r++) {
            rcnt[r] = (int)mine;
            rdsp[r] = (int)(mine * (size_t)r);
        }
        if (scratch_bytes_ < mine * (size_t)N * esz) {
            free(scratch_);
            scratch_bytes_ = mine * (size_t)N * esz;
            scratch_ = xmalloc(scratch_bytes_);
        }
        char *piece = x + at * esz, *got = scratch_;
        MPI_Alltoallv(piece, cnt, dsp, type, got, rcnt, rdsp, type, MPI_COMM_WORLD);
        char *slice = piece + (size_t)dsp[rank_] * esz;
        memcpy(slice, got, mine * esz);
        for (int r = 1; r < N; r++) add(slice, got + mine * (size_t)r * esz, mine);
        MPI_Allgatherv(MPI_IN_PLACE, 0, type, piece, cnt, dsp, type, MPI_COMM_WORLD);
    }
    free(cnt);
}

void dist_init(int *argc, char ***argv, const char *prog) {
    int provided;
    // OpenMP threads compute; only the main thread calls MPI
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "%s: error: MPI_Init_thread failed\n", prog);
        exit(1);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

int dist_exit(int status) {
    free(scratch_);
    scratch_ = NULL;
    scratch_bytes_ = 0;
    MPI_Finalize();
    return status;
}

void dist_sum_f32(float *x, size_t n) {
    if (size_ > 1) sum_ordered_((char *)x, n, sizeof(float), MPI_FLOAT, add_f32_);
}

void dist_sum_f64(double *x, size_t n) {
    if (size_ > 1) sum_ordered_((char *)x, n, sizeof(double), MPI_DOUBLE, add_f64_);
}

void dist_sum_u64(uint64_t *x, size_t n) {
    if (size_ == 1) return;
    for (size_t i = 0; i < n; i += DIST_PIECE)  // integers: any order gives the same sum
        MPI_Allreduce(MPI_IN_PLACE, x + i, (int)(n - i < DIST_PIECE ? n - i : DIST_PIECE), MPI_UINT64_T, MPI_SUM,
                      MPI_COMM_WORLD);
}

int dist_agree(int rc, Err *e) {
    if (size_ == 1) return rc ? -1 : 0;
    int failed = rc != 0, n_failed = 0;
    MPI_Allreduce(&failed, &n_failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (n_failed == 0) return 0;
    // every rank learns every rank's status and message (a few KiB, only on failure): 'F' or 'O', then the text
    char mine[sizeof e->msg + 1];
    mine[0] = failed ? 'F' : 'O';
    snprintf(mine + 1, sizeof mine - 1, "%s", failed && e && e->msg[0] ? e->msg : "failed (no message)");
    char *all = xmalloc(sizeof mine * (size_t)size_);
    MPI_Allgather(mine, (int)sizeof mine, MPI_CHAR, all, (int)sizeof mine, MPI_CHAR, MPI_COMM_WORLD);
    int first = -1, same = 1;
    for (int r = 0; r < size_; r++) {
        const char *m = all + sizeof mine * (size_t)r;
        if (m[0] != 'F') continue;
        if (first < 0) first = r;
        else if (strcmp(m, all + sizeof mine * (size_t)first) != 0) same = 0;
    }
    const char *msg = all + sizeof mine * (size_t)first + 1;
    if (n_failed == size_ && same) {
        err_set(e, "%s", msg);  // the same failure everywhere (a bad value, a diverged step): say it once
    } else if (n_failed == 1) {
        err_set(e, "rank %d of %d: %s", first, size_, msg);
    } else {
        err_set(e, "rank %d of %d: %s (and %d more rank%s failed)", first, size_, msg, n_failed - 1,
                n_failed == 2 ? "" : "s");
    }
    free(all);
    return -1;
}

int dist_check_same(const uint64_t *x, const char *const *names, int n, const char *what, Err *e) {
    if (size_ == 1) return 0;
    uint64_t *all = xmalloc(sizeof(uint64_t) * (size_t)n * (size_t)size_);
    MPI_Allgather(x, n, MPI_UINT64_T, all, n, MPI_UINT64_T, MPI_COMM_WORLD);
    int rc = 0;
    for (int r = 1; r < size_ && rc == 0; r++)
        for (int i = 0; i < n && rc == 0; i++) {
            uint64_t v = all[(size_t)r * n + i], v0 = all[i];
            if (v != v0)
                rc = err_set(e, "rank %d of %d: its %s differ from rank 0's: %s %llu against %llu", r, size_, what,
                             names[i], (unsigned long long)v, (unsigned long long)v0);
        }
    free(all);
    return rc;
}

char *dist_bcast_text(const char *s) {
    uint64_t n = rank_ == 0 ? strlen(s) : 0;
    MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    char *t = xmalloc((size_t)n + 1);
    if (rank_ == 0) memcpy(t, s, (size_t)n);
    for (uint64_t at = 0; at < n; at += DIST_PIECE)
        MPI_Bcast(t + at, (int)(n - at < DIST_PIECE ? n - at : DIST_PIECE), MPI_CHAR, 0, MPI_COMM_WORLD);
    t[n] = 0;
    return t;
}

void dist_die(const char *prog, const Err *e) {
    if (rank_ == 0) fprintf(stderr, "%s: error: %s\n", prog, e->msg);
    fflush(stderr);
    dist_exit(1);
    exit(1);
}

#else  // one process

int dist_built(void) { return 0; }

void dist_init(int *argc, char ***argv, const char *prog) {
    (void)argc;
    (void)argv;
    // the variables Open MPI, MPICH and Slurm's PMI give each process they start
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 1) {
            fprintf(stderr, "%s: error: started as one of %s processes (%s), but this %s was built without MPI: "
                    "every process would train its own copy into the same run directory; build with make MPI=1 "
                    "and run build/release-mpi/bin/%s\n", prog, v, vars[i], prog, prog);
            exit(1);
        }
    }
}

int dist_exit(int status) { return status; }
void dist_sum_f32(float *x, size_t n) { (void)x; (void)n; }
void dist_sum_f64(double *x, size_t n) { (void)x; (void)n; }
void dist_sum_u64(uint64_t *x, size_t n) { (void)x; (void)n; }
int dist_agree(int rc, Err *e) { (void)e; return rc ? -1 : 0; }
int dist_check_same(const uint64_t *x, const char *const *names, int n, const char *what, Err *e) {
    (void)x; (void)names; (void)n; (void)what; (void)e;
    return 0;
}

char *dist_bcast_text(const char *s) {
    size_t n = strlen(s);
    char *t = xmalloc(n + 1);
    memcpy(t, s, n + 1);
    return t;
}

void dist_die(const char *prog, const Err *e) { err_die(prog, e); }

#endif
