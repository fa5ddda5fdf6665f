/*
 * Tests for nn/matmul: every transA/transB layout with and without accumulate against a naive double
 * triple loop over many (odd, edge, empty) shapes; every kernel set the machine supports (core/cpu.h:
 * avx512, avx2, generic - each with its own micro-kernel and blocking) agrees bit for bit with the active one;
 * matmul_forward with/without bias; matmul_backward by gradient check, accumulation and NULL outputs;
 * bit-identical results with 1, 2, 3 and 9 threads (K slices included); matmul_fused (bias start, GELU and GELU-gradient
 * epilogues) gives the same bits as matmul followed by the separate passes; up to 4 rows against a (N,K)
 * weight (decoding's row path) give the bits of the same rows inside a taller (tiled) call.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/cpu.h"
#include "gradcheck.h"
#include "nn/activation.h"
#include "nn/matmul.h"
#include "test.h"

#define GUARD 8  // sentinel floats after C: matmul must not write past M*N

// ref (M,N) = [C0 +] op(A) @ op(B) in double; returns max |ref|
static double matmul_ref(double *ref, const float *C0, const float *A, const float *B, int M, int N, int K,
                         int transA, int transB, int accumulate) {
    double maxabs = 0;
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double s = accumulate ? (double)C0[(size_t)i * N + j] : 0.0;
            for (int k = 0; k < K; k++) {
                double a = transA ? A[(size_t)k * M + i] : A[(size_t)i * K + k];
                double b = transB ? B[(size_t)j * K + k] : B[(size_t)k * N + j];
                s += a * b;
            }
            ref[(size_t)i * N + j] = s;
            if (fabs(s) > maxabs) maxabs = fabs(s);
        }
    }
    return maxabs;
}

static float *alloc_normal(GcRng *rng, size_t n) {
    float *x = (float *)malloc((n + GUARD) * sizeof(float));
    gc_fill_normal(rng, x, n + GUARD, 1.0f);
    return x;
}

static void test_layouts(void) {
    static const int shapes[][3] = {{1, 1, 1},     {7, 13, 5},   {65, 33, 129}, {128, 256, 64}, {0, 5, 3},
                                    {5, 0, 3},     {5, 3, 0},    {0, 0, 0},     {9, 40, 257},   {33, 70, 600},
                                    {8, 32, 256},  {17, 31, 1},
                                    // several column tiles with K in one block (the packed A is reused
                                    // across them), and several row tiles with K in several blocks
                                    {40, 600, 100}, {530, 70, 300},
                                    // transposed A packed in tiles of the most rows, with a whole KC_ block
                                    // (rounding up would plan 516-row tiles for the AVX2 set, 6 more than its
                                    // A buffer)
                                    {1024, 20, 256},
                                    // transposed A with a long K: the K slices (3 with a short last one; 8, the
                                    // most), summed onto C after
                                    {40, 30, 2100}, {20, 9, 9000}};
    GcRng rng = {42};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        size_t mn = (size_t)M * N;
        float *A = alloc_normal(&rng, (size_t)M * K), *B = alloc_normal(&rng, (size_t)K * N);
        float *C0 = alloc_normal(&rng, mn), *C = alloc_normal(&rng, mn), *Cp = alloc_normal(&rng, mn);
        double *ref = (double *)malloc((mn + 1) * sizeof(double));
        for (int ta = 0; ta < 2; ta++) {
            for (int tb = 0; tb < 2; tb++) {
                for (int acc = 0; acc < 2; acc++) {
                    double maxabs = matmul_ref(ref, C0, A, B, M, N, K, ta, tb, acc);
                    // fp32 fma chain over K: error grows ~ sqrt(K) * eps * magnitude; 1e-5 leaves ~100x margin
                    double tol = 1e-5 * sqrt((double)K + 1) * maxabs + 1e-6;
                    memcpy(C, C0, (mn + GUARD) * sizeof(float));
                    matmul(C, A, B, M, N, K, ta, tb, acc);
                    double worst = 0;
                    for (size_t i = 0; i < mn; i++) worst = fmax(worst, fabs((double)C[i] - ref[i]));
                    int guard_ok = memcmp(C + mn, C0 + mn, GUARD * sizeof(float)) == 0;
                    CHECK(worst <= tol && guard_ok, "matmul M=%d N=%d K=%d transA=%d transB=%d acc=%d: max err %.3g <= %.3g%s",
                          M, N, K, ta, tb, acc, worst, tol, guard_ok ? "" : " (wrote past C)");
                    // every other kernel set must agree bit for bit (each uses one fma per k, in k order)
                    KernelSet active = kernel_set();
                    for (int ks = 0; ks < KSET_COUNT; ks++) {
                        if (ks == (int)active || !kernel_set_supported((KernelSet)ks)) continue;
                        memcpy(Cp, C0, (mn + GUARD) * sizeof(float));
                        kernel_set_use((KernelSet)ks, NULL);
                        matmul(Cp, A, B, M, N, K, ta, tb, acc);
                        kernel_set_use(active, NULL);
                        CHECK(memcmp(C, Cp, (mn + GUARD) * sizeof(float)) == 0,
                              "kernel set %s bit-identical to %s M=%d N=%d K=%d transA=%d transB=%d acc=%d",
                              kernel_set_name((KernelSet)ks), kernel_set_name(active), M, N, K, ta, tb, acc);
                    }
                    if (K == 0 && acc) {
                        CHECK(memcmp(C, C0, mn * sizeof(float)) == 0, "K=0 accumulate leaves C unchanged M=%d N=%d", M, N);
                    }
                }
            }
        }
        free(A); free(B); free(C0); free(C); free(Cp); free(ref);
    }
}

static void test_forward(void) {
    int BT = 37, C = 45, OC = 23;
    GcRng rng = {7};
    float *inp = alloc_normal(&rng, (size_t)BT * C), *w = alloc_normal(&rng, (size_t)OC * C);
    float *bias = alloc_normal(&rng, OC), *out = alloc_normal(&rng, (size_t)BT * OC);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        matmul_forward(out, inp, w, with_bias ? bias : NULL, BT, C, OC);
        double worst = 0, maxabs = 0;
        for (int bt = 0; bt < BT; bt++) {
            for (int o = 0; o < OC; o++) {
                double s = with_bias ? bias[o] : 0.0;
                for (int c = 0; c < C; c++) s += (double)inp[bt * C + c] * w[o * C + c];
                worst = fmax(worst, fabs(out[bt * OC + o] - s));
                maxabs = fmax(maxabs, fabs(s));
            }
        }
        double tol = 1e-5 * sqrt((double)C) * maxabs + 1e-6;
        CHECK(worst <= tol, "matmul_forward %s bias: max err %.3g <= %.3g", with_bias ? "with" : "without", worst, tol);
    }
    free(inp); free(w); free(bias); free(out);
}

typedef struct LinCtx {
    float *out, *inp, *w, *bias, *dy;
    int BT, C, OC;
} LinCtx;

static double lin_loss(void *p) {
    LinCtx *x = (LinCtx *)p;
    matmul_forward(x->out, x->inp, x->w, x->bias, x->BT, x->C, x->OC);
    return gc_dot(x->dy, x->out, (size_t)x->BT * x->OC);
}

static void test_backward(void) {
    // sizes cross the MR/NR/KC edges so the backward layouts take their edge paths too
    int BT = 300, C = 19, OC = 37;
    GcRng rng = {11};
    LinCtx x = {NULL, NULL, NULL, NULL, NULL, BT, C, OC};
    x.inp = alloc_normal(&rng, (size_t)BT * C);
    x.w = alloc_normal(&rng, (size_t)OC * C);
    x.bias = alloc_normal(&rng, OC);
    x.dy = alloc_normal(&rng, (size_t)BT * OC);
    x.out = alloc_normal(&rng, (size_t)BT * OC);
    float *dinp = (float *)calloc((size_t)BT * C, sizeof(float));
    float *dw = (float *)calloc((size_t)OC * C, sizeof(float));
    float *db = (float *)calloc(OC, sizeof(float));
    matmul_backward(dinp, dw, db, x.dy, x.inp, x.w, BT, C, OC);
    // L is linear in each buffer, so a large step (h = 1) has no truncation error, and it keeps the float
    // rounding of p + h*e (spread over thousands of values) small against the perturbation itself
    gradcheck_buffer("matmul inp", x.inp, dinp, (size_t)BT * C, lin_loss, &x, 1.0, 1e-3, 1e-3, 4, 16, 1);
    gradcheck_buffer("matmul weight", x.w, dw, (size_t)OC * C, lin_loss, &x, 1.0, 1e-3, 1e-3, 4, 16, 2);
    gradcheck_buffer("matmul bias", x.bias, db, OC, lin_loss, &x, 1.0, 1e-3, 1e-3, 4, 16, 3);

    // accumulation: a second call adds the same gradient again
    float *dinp2 = (float *)malloc((size_t)BT * C * sizeof(float)), *dw2 = (float *)malloc((size_t)OC * C * sizeof(float));
    float *db2 = (float *)malloc(OC * sizeof(float));
    memcpy(dinp2, dinp, (size_t)BT * C * sizeof(float));
    memcpy(dw2, dw, (size_t)OC * C * sizeof(float));
    memcpy(db2, db, OC * sizeof(float));
    matmul_backward(dinp2, dw2, db2, x.dy, x.inp, x.w, BT, C, OC);
    double worst = 0;
    for (int i = 0; i < BT * C; i++) worst = fmax(worst, fabs(dinp2[i] - 2.0 * dinp[i]) / (1 + fabs(dinp[i])));
    for (int i = 0; i < OC * C; i++) worst = fmax(worst, fabs(dw2[i] - 2.0 * dw[i]) / (1 + fabs(dw[i])));
    for (int i = 0; i < OC; i++) worst = fmax(worst, fabs(db2[i] - 2.0 * db[i]) / (1 + fabs(db[i])));
    CHECK(worst <= 1e-5, "matmul_backward accumulates: twice = 2x gradient (rel err %.3g)", worst);

    // NULL outputs are skipped, and each remaining one is computed exactly as before
    memset(dinp2, 0, (size_t)BT * C * sizeof(float));
    matmul_backward(dinp2, NULL, NULL, x.dy, x.inp, x.w, BT, C, OC);
    CHECK(memcmp(dinp2, dinp, (size_t)BT * C * sizeof(float)) == 0, "matmul_backward dinp only (dweight, dbias NULL)");
    memset(dw2, 0, (size_t)OC * C * sizeof(float));
    matmul_backward(NULL, dw2, NULL, x.dy, x.inp, x.w, BT, C, OC);
    CHECK(memcmp(dw2, dw, (size_t)OC * C * sizeof(float)) == 0, "matmul_backward dweight only (dinp, dbias NULL)");
    memset(db2, 0, OC * sizeof(float));
    matmul_backward(NULL, NULL, db2, x.dy, x.inp, x.w, BT, C, OC);
    CHECK(memcmp(db2, db, OC * sizeof(float)) == 0, "matmul_backward dbias only (dinp, dweight NULL)");

    free(x.inp); free(x.w); free(x.bias); free(x.dy); free(x.out);
    free(dinp); free(dw); free(db); free(dinp2); free(dw2); free(db2);
}

#ifdef _OPENMP
// results must not depend on the thread count (the tiling does: it is chosen per thread count, and from
// MM_GRAIN_THREADS_ threads on the tiles are finer and handed out dynamically: 9 threads takes that path)
static void test_threads_shape(int M, int N, int K) {
    GcRng rng = {5};
    float *A = alloc_normal(&rng, (size_t)M * K), *B = alloc_normal(&rng, (size_t)K * N);
    float *C1 = (float *)malloc((size_t)M * N * sizeof(float)), *C2 = (float *)malloc((size_t)M * N * sizeof(float));
    int saved = omp_get_max_threads();
    for (int layout = 0; layout < 4; layout++) {
        int ta = layout >> 1, tb = layout & 1, same = 1;
        omp_set_num_threads(1);
        matmul(C1, A, B, M, N, K, ta, tb, 0);
        static const int counts[] = {2, 3, 9};
        for (int c = 0; c < 3; c++) {
            omp_set_num_threads(counts[c]);
            matmul(C2, A, B, M, N, K, ta, tb, 0);
            same &= memcmp(C1, C2, (size_t)M * N * sizeof(float)) == 0;
        }
        CHECK(same, "matmul %dx%dx%d bit-identical with 1, 2, 3 and 9 threads (transA=%d transB=%d)", M, N, K, ta,
              tb);
    }
    omp_set_num_threads(saved);
    free(A); free(B); free(C1); free(C2);
}
#endif

static void test_threads(void) {
#ifdef _OPENMP
    // big enough to run in parallel: several tiles and K blocks; then several column tiles with K in one
    // block (a thread reuses its packed A across them)
    test_threads_shape(200, 300, 600);
    test_threads_shape(100, 700, 200);
    test_threads_shape(520, 300, 130);  // with 9 threads, more tiles than threads: the dynamic schedule
    test_threads_shape(96, 200, 2600);  // transposed A: K slices, their tiles shared by the threads
#endif
}

// matmul_fused against matmul plus the separate passes it replaces, exactly (== per element, so the GELU
// gradient's 0 + x = x vs x may differ only in the sign of a zero), every layout, 1-3 and 9 threads, with edge
// tiles, several K blocks and K = 0
static void test_fused(void) {
    static const int shapes[][3] = {{7, 13, 5}, {65, 33, 129}, {9, 40, 257}, {530, 70, 300}, {40, 600, 100},
                                    {5, 3, 0}};
    GcRng rng = {77};
#ifdef _OPENMP
    int saved = omp_get_max_threads();
#endif
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        size_t mn = (size_t)M * N;
        float *A = alloc_normal(&rng, (size_t)M * K), *B = alloc_normal(&rng, (size_t)K * N);
        float *bias = alloc_normal(&rng, N), *pre = alloc_normal(&rng, mn);
        float *want = alloc_normal(&rng, mn), *want2 = alloc_normal(&rng, mn);
        float *got = alloc_normal(&rng, mn), *got2 = alloc_normal(&rng, mn);
        for (int layout = 0; layout < 4; layout++) {
            int ta = layout >> 1, tb = layout & 1;
            static const int counts[] = {1, 2, 3, 9};
            for (int c = 0; c < 4; c++) {
                int nt = counts[c];
#ifdef _OPENMP
                omp_set_num_threads(nt);
#endif
                int ok_bias = 1, ok_gelu = 1, ok_grad = 1;
                // bias: rows filled with the bias, then accumulated onto
                for (int i = 0; i < M; i++) memcpy(want + (size_t)i * N, bias, N * sizeof(float));
                matmul(want, A, B, M, N, K, ta, tb, 1);
                got[mn] = 12345.0f, got2[mn] = 12345.0f;  // sentinels past the end
                matmul_fused(got, A, B, M, N, K, ta, tb, 0, &(MatmulFuse){.bias = bias});
                ok_bias = memcmp(want, got, mn * sizeof(float)) == 0 && got[mn] == 12345.0f;
                // GELU: the pre-activation stays in C, act = gelu(C)
                gelu_forward(want2, want, mn);
                matmul_fused(got, A, B, M, N, K, ta, tb, 0, &(MatmulFuse){.bias = bias, .epi = MM_EPI_GELU, .act = got2});
                ok_gelu = memcmp(want, got, mn * sizeof(float)) == 0 && memcmp(want2, got2, mn * sizeof(float)) == 0 &&
                          got[mn] == 12345.0f && got2[mn] == 12345.0f;
                // GELU gradient: C = gelu'(pre) * (op(A) op(B)), as gelu_backward into zeros
                matmul(want, A, B, M, N, K, ta, tb, 0);
                memset(want2, 0, mn * sizeof(float));
                gelu_backward(want2, pre, want, mn);
                matmul_fused(got, A, B, M, N, K, ta, tb, 0, &(MatmulFuse){.epi = MM_EPI_GELU_GRAD, .pre = pre});
                for (size_t i = 0; i < mn; i++) ok_grad &= got[i] == want2[i];
                ok_grad &= got[mn] == 12345.0f;
                CHECK(ok_bias && ok_gelu && ok_grad,
                      "matmul_fused %dx%dx%d transA=%d transB=%d threads=%d: bias %s, GELU %s, GELU gradient %s "
                      "(same bits as the separate passes)",
                      M, N, K, ta, tb, nt, ok_bias ? "ok" : "DIFFERS", ok_gelu ? "ok" : "DIFFERS",
                      ok_grad ? "ok" : "DIFFERS");
            }
        }
        free(A); free(B); free(bias); free(pre); free(want); free(want2); free(got); free(got2);
    }
#ifdef _OPENMP
    omp_set_num_threads(saved);
#endif
}

// decoding's shape: up to 4 rows against a (N,K) weight take the row path; each row must be the bits the tiled
// path gives that row inside a taller call (both are one fma chain per output over k in order, from the bias)
static void test_rows_path(void) {
    int N = 300, K = 700, M = 13;  // K over one K block of the tiled path, N not a multiple of 8
    GcRng rng = {8};
    float *A = alloc_normal(&rng, (size_t)M * K), *W = alloc_normal(&rng, (size_t)N * K), *bias = alloc_normal(&rng, N);
    float *tall = (float *)malloc((size_t)M * N * sizeof(float)), *rows = (float *)malloc((size_t)4 * N * sizeof(float));
    matmul_forward(tall, A, W, bias, M, K, N);
    for (int m = 1; m <= 4; m++) {
        matmul_forward(rows, A + (size_t)5 * K, W, bias, m, K, N);
        CHECK(memcmp(rows, tall + (size_t)5 * N, (size_t)m * N * sizeof(float)) == 0,
              "matmul_forward of %d row(s) = the same rows of a %d-row call, bit for bit", m, M);
        // accumulate from the same C: the row path on m rows, the tiled path on all M
        memcpy(rows, tall + (size_t)5 * N, (size_t)m * N * sizeof(float));
        matmul(rows, A + (size_t)5 * K, W, m, N, K, 0, 1, 1);
        matmul(tall, A, W, M, N, K, 0, 1, 1);
        CHECK(memcmp(rows, tall + (size_t)5 * N, (size_t)m * N * sizeof(float)) == 0,
              "matmul accumulate (C += A W^T) of %d row(s) = the same rows of a %d-row call, bit for bit", m, M);
        matmul_forward(tall, A, W, bias, M, K, N);
    }
    free(A); free(W); free(bias); free(tall); free(rows);
}

int main(void) {
    test_layouts();
    test_forward();
    test_backward();
    test_threads();
    test_fused();
    test_rows_path();
    return test_summary();
}
