/*
 * Matrix multiply: one entry point for every projection's forward and backward pass.
 *
 * matmul() computes C = op(A) op(B) (optionally += into C) for all four transpose layouts by packing
 * panels of B (and of A when it is stored transposed; a row-major A is read in place) into one contiguous
 * layout, so a single register-tiled micro-kernel does the work.
 * Parallel over output tiles (and, for a weight gradient with a small output and a long K, over fixed slices of
 * K that are summed in order after): each output element is reduced over K in the same order whatever the
 * thread count, so results are bit-identical for any OMP_NUM_THREADS, and for every kernel set (core/cpu.h:
 * each set's micro-kernel does one fma per k per element in k order, as the portable one does).
 * matmul_forward/matmul_backward are the llm.c-style wrappers for a PyTorch Linear layer.
 */
#ifndef SEQ_MATMUL_H
#define SEQ_MATMUL_H

// C (M,N) = op(A) (M,K) x op(B) (K,N) [+ C when accumulate]; row-major; op = transpose when trans* = 1
// (A stored (K,M) when transA, B stored (N,K) when transB). M, N, K >= 0; K = 0 gives C = 0 (or C
// unchanged when accumulating). C must not alias A or B.
void matmul(float *C, const float *A, const float *B, int M, int N, int K, int transA, int transB, int accumulate);

// what matmul_fused does besides C = op(A) op(B), so that no extra pass over C is needed:
//   bias  (N,) or NULL: C = bias + op(A) op(B), every output's fma chain starting from bias[j]
//         (not with accumulate)
//   epi   an elementwise step on each output tile right after its last K step, while it is in cache:
//         MM_EPI_GELU       act (M,N) = gelu(C) is written too; C keeps the pre-activation
//         MM_EPI_GELU_GRAD  C = gelu'(pre) * C, pre (M,N): the backward of act = gelu(pre), with
//                           C = d act (so d pre comes out of the matmul that forms d act)
// Same bits as matmul followed by the separate pass (gelu_forward; gelu_backward into zeros).
enum { MM_EPI_NONE = 0, MM_EPI_GELU, MM_EPI_GELU_GRAD };
typedef struct MatmulFuse {
    const float *bias;
    int epi;
    float *act;
    const float *pre;
} MatmulFuse;

// matmul with a bias and/or an epilogue (f may be NULL: plain matmul)
void matmul_fused(float *C, const float *A, const float *B, int M, int N, int K, int transA, int transB,
                  int accumulate, const MatmulFuse *f);

// out (BT,OC) = inp (BT,C) @ weight (OC,C)^T + bias (OC,); bias may be NULL (PyTorch Linear layout)
void matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int BT, int C, int OC);

// backward ACCUMULATES (+=): dinp (BT,C) += dout @ weight; dweight (OC,C) += dout^T @ inp;
// dbias (OC,) += sum_bt dout. Any of dinp/dweight/dbias may be NULL (that gradient is skipped).
void matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                     const float *weight, int BT, int C, int OC);

#endif
