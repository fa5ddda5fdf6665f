/*
 * Data-parallel processes: the ranks of an MPI job (built with `make MPI=1`), or one process.
 *
 * Without SEQ_MPI every function is the one-process case (rank 0 of 1) and nothing here needs MPI, so the
 * plain build never links it. With SEQ_MPI the tools call dist_init first and dist_exit last.
 *
 * Sums are exact to reproduce: dist_sum_f32/f64 add the ranks' buffers in rank order, element by element, the
 * same way on every rank and in every run (MPI_SUM leaves the grouping to the algorithm MPI picks), so a rerun
 * with the same ranks is bit-identical.
 *
 * No rank may stop while the others wait in a collective: at the points where a rank can fail on its own
 * (its data, its files, rank 0's writes) every rank calls dist_agree with its status, and either all go on
 * or all stop, with one message that names the failing rank and its cause.
 *
 *   dist_init(&argc, &argv, "seqtrain");
 *   ... rc = work(&e); if (dist_agree(rc, &e) != 0) dist_die("seqtrain", &e);
 *   dist_sum_f32(grads, n);
 *   return dist_exit(0);
 */
#ifndef SEQ_DIST_H
#define SEQ_DIST_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"

// start MPI (when built with it); a plain build started by mpirun with several processes stops here with
// a message (each process would train its own copy into the same run directory)
void dist_init(int *argc, char ***argv, const char *prog);
int dist_rank(void);
int dist_size(void);
// 1 when built with MPI (make MPI=1)
int dist_built(void);
// rank 0 (the one that writes files and prints)
static inline int dist_main(void) { return dist_rank() == 0; }

// in-place sums over the ranks, in rank order, identical on every rank (no-ops with one process)
void dist_sum_f32(float *x, size_t n);
void dist_sum_f64(double *x, size_t n);
void dist_sum_u64(uint64_t *x, size_t n);

// collective: 0 when every rank's rc is 0; otherwise -1 on every rank, with e (on every rank) holding the
// failure: the message itself when every rank failed the same way, else "rank R of N: <its message>"
// (and how many others failed)
int dist_agree(int rc, Err *e);

// collective: 0 when every rank holds the same n values (names[i] names x[i]); otherwise -1 on every rank
// with e = "rank R of N: its <what> differ from rank 0's: <name> <value> against <value>" (the first such rank)
int dist_check_same(const uint64_t *x, const char *const *names, int n, const char *what, Err *e);

// collective: rank 0's text s on every rank, as a copy the caller frees (one process: a copy of s)
char *dist_bcast_text(const char *s);

// print the error once (rank 0; with several ranks, every rank failed or e came from dist_agree), finalize
// MPI and exit(1). Only after dist_agree, or where every rank fails alike (arguments, config).
void dist_die(const char *prog, const Err *e) __attribute__((noreturn));
// finalize MPI and return status (for main's return)
int dist_exit(int status);

// the CPUs this process may run on (its affinity mask), 0 when unknown
int dist_cpus_allowed(void);

#endif
