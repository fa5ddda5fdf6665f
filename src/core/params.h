/*
 * All parameters of a model live in one float buffer, described by a table of named tensors
 * ("blocks.3.mixer.wq", shape, offset, init rule, weight-decay default). Gradients and the optimizer's
 * m and v use the same table and layout (llm.c's idea, generalised), and checkpoints are the table
 * written as safetensors.
 */
#ifndef SEQ_PARAMS_H
#define SEQ_PARAMS_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"

#define PARAM_NAME_MAX 96
#define PARAM_NDIM_MAX 4

typedef enum {
    INIT_ZEROS,
    INIT_ONES,
    INIT_CONST,    // every value = a
    INIT_NORMAL,   // N(0, a^2)
    INIT_UNIFORM,  // U[a, b)
    INIT_LOGUNIFORM, // exp(U[log a, log b))
    INIT_COMPLEX_ROWS,  // complex matrix stored as real/imaginary row blocks: in every block of 2b rows, rows
                        //   k and b + k are Re and Im of one entry per column; magnitude ~ Rayleigh(a), phase
                        //   ~ U(0, 2 pi) (RFA App. D.2)
    INIT_COMPLEX_COLS,  // the same with column blocks of 2b columns (a complex-to-real output projection)
    INIT_CUSTOM,   // filled by the owner after param_init_all (e.g. frequency banks); left as zeros here
} InitKind;

typedef struct ParamInit {
    InitKind kind;
    float a, b;
} ParamInit;

typedef struct ParamTensor {
    char name[PARAM_NAME_MAX];
    int ndim;
    int shape[PARAM_NDIM_MAX];
    size_t offset;  // into the flat buffer, in floats
    size_t numel;
    ParamInit init;
    int decay;      // default weight decay on (1) / off (0): on for matrices, off for vectors, norms, embeddings
} ParamTensor;

typedef struct ParamTable {
    ParamTensor *t;
    int n, cap;
    size_t numel;   // total floats
} ParamTable;

void param_table_init(ParamTable *pt);
void param_table_free(ParamTable *pt);
// declare a tensor; returns its index. Names must be unique (an error otherwise).
int param_add(ParamTable *pt, const char *name, int ndim, const int *shape, ParamInit init, int decay, Err *e);
int param_find(const ParamTable *pt, const char *name);  // index or -1
// fill params (pt->numel,) from the init rules; each tensor draws from its own stream keyed by
// (seed, name), so results do not depend on declaration order or thread count
void param_init_all(const ParamTable *pt, float *params, uint64_t seed);

static inline ParamInit init_normal(float std) { ParamInit i = {INIT_NORMAL, std, 0}; return i; }
static inline ParamInit init_zeros(void) { ParamInit i = {INIT_ZEROS, 0, 0}; return i; }
static inline ParamInit init_ones(void) { ParamInit i = {INIT_ONES, 0, 0}; return i; }
static inline ParamInit init_const(float v) { ParamInit i = {INIT_CONST, v, 0}; return i; }
static inline ParamInit init_uniform(float lo, float hi) { ParamInit i = {INIT_UNIFORM, lo, hi}; return i; }
// half = complex entries per block (D), sigma = the Rayleigh scale
static inline ParamInit init_complex(int cols, float sigma, int half) {
    ParamInit i = {cols ? INIT_COMPLEX_COLS : INIT_COMPLEX_ROWS, sigma, (float)half};
    return i;
}

#endif
