/*
 * Warp-level matrix products on the tensor cores for the backend's own kernels (gpu/flash_attn.cu): mma.sync with
 * the register layouts PTX documents, the operands' rounding per run.precision, and cp.async tile copies. A warp
 * computes a (16, 8N) block of C += A B; lane = 4 g + t (g = lane / 4, t = lane % 4) holds
 *
 *   C (16x8)              c0 (g, 2t)   c1 (g, 2t+1)   c2 (g+8, 2t)   c3 (g+8, 2t+1)      (fp32, every precision)
 *   TF32, m16n8k8:
 *     A (16x8)            a0 (g, t)    a1 (g+8, t)    a2 (g, t+4)    a3 (g+8, t+4)
 *     B (8x8, k x n)      b0 (t, g)    b1 (t+4, g)
 *   BF16, m16n8k16 (two bf16 a register, the lower column / row in the low half):
 *     A (16x16)           a0 (g, 2t..2t+1)   a1 (g+8, 2t..)   a2 (g, 2t+8..)   a3 (g+8, 2t+8..)
 *     B (16x8)            b0 (2t..2t+1, g)   b1 (2t+8..2t+9, g)
 *
 * So a lane holds columns 2t, 2t+1 of rows g and g+8 of each 8-column slice of a product: a row's reductions are
 * over its 4 lanes. A product in registers goes on as the A operand of the next one without leaving them: BF16
 * packs two C slices into one A slice as they lie; TF32 reads a C slice's columns in the order 0 2 4 6 1 3 5 7
 * (A's column t is C's 2t, t + 4 is 2t + 1) and the B operand's rows in the same order.
 *
 * The math policies (one per run.precision) say what a tile element is (Elt), the k of one mma (KS), how operands
 * load from shared memory (row-major tiles, LD elements a row) and how they multiply:
 *   MathTf32<false>  tf32: fp32 tiles, operands rounded to TF32 (cvt.rna)
 *   MathTf32<true>   fp32: fp32 tiles, each operand x split into big = tf32(x), small = tf32(x - big), and
 *                    small·big + big·small + big·big summed (3xTF32: about fp32's accuracy)
 *   MathBf16         bf16: bf16 tiles (the producers write bf16 activations), m16n8k16, operands by ldmatrix
 * Row strides: LD = DM + 4 floats or DM + 8 bf16 puts the rows g of a fragment load 4 banks apart (so 4g + t,
 * or g's rows and t's words, cover all 32 banks), and rows 2t 8 banks apart; ldmatrix's 8 rows of 16 bytes then
 * start in 8 different 16-byte bank groups.
 */
#ifndef SEQ_GPU_MMA_CUH
#define SEQ_GPU_MMA_CUH

#include <cuda_bf16.h>
#include <string.h>

#include "gpu/common.cuh"  // pack_f32_

#include <mma.h>  // wmma::__float_to_tf32; the emulator's tests/gpu/emu/mma.h (with its mma.sync, ldmatrix) where it builds the kernels

// ----------------------------------------------------------------------------
// the instructions

// d (16x8) += a (16x8) b (8x8), TF32 operands (fp32 bit patterns with the low 13 bits zero)
static __device__ __forceinline__ void mma_tf32_(float d[4], const float a[4], const float b[2]) {
#ifdef SEQ_GPU_EMU
    emu_mma_m16n8k8_tf32(d, a, b);
#else
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(__float_as_uint(a[0])), "r"(__float_as_uint(a[1])), "r"(__float_as_uint(a[2])),
                   "r"(__float_as_uint(a[3])), "r"(__float_as_uint(b[0])), "r"(__float_as_uint(b[1])));
#endif
}

// d (16x8) += a (16x16) b (16x8), bf16 operands two a register
static __device__ __forceinline__ void mma_bf16_(float d[4], const unsigned a[4], const unsigned b[2]) {
#ifdef SEQ_GPU_EMU
    emu_mma_m16n8k16_bf16(d, a, b);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// r[0..3] WRITTEN: four 8x8 matrices of 16-bit elements from shared memory (ldmatrix.x4), lane l giving the
// address of row l % 8 of matrix l / 8 (16 bytes, 16-byte aligned); lane 4g + t gets in r[i] matrix i's elements
// (g, 2t), (g, 2t+1), or with TRANS (2t, g), (2t+1, g), the first in the low half. One instruction instead of
// a load per register, and the transpose (a B operand from a row-major X) without a pack per pair.
template <bool TRANS>
static __device__ __forceinline__ void ldmatrix_x4_(unsigned r[4], const void *p) {
#ifdef SEQ_GPU_EMU
    emu_ldmatrix_x4(r, p, TRANS);
#else
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
#endif
}

// The lane's row address for ldmatrix_x4_ of a 16x16 block of 16-bit elements at p (row stride ld), as the four
// 8x8 quarters: ROWS_FIRST takes them as (rows 0-7, 8-15) x (columns 0-7), then columns 8-15 (an A operand:
// a0..a3), else columns 0-7, 8-15 of rows 0-7, then of rows 8-15 (two B slices of Bt's rows: b0 b1 of each)
template <bool ROWS_FIRST, typename E>
static __device__ __forceinline__ const E *ldmatrix_row_(const E *p, int ld) {
    int l = threadIdx.x & 31, m = l >> 3;
    int r = (l & 7) + 8 * (ROWS_FIRST ? (m & 1) : (m >> 1)), c = 8 * (ROWS_FIRST ? (m >> 1) : (m & 1));
    return p + r * ld + c;
}

// ----------------------------------------------------------------------------
// the math policies

template <bool SPLIT_>
struct MathTf32 {
    typedef float Elt;
    static constexpr bool SPLIT = SPLIT_;
    static constexpr int KS = 8, PAD = 4;
    struct A {
        float hi[4], lo[SPLIT_ ? 4 : 1];
    };
    struct B {
        float hi[2], lo[SPLIT_ ? 2 : 1];
    };
    // hi holds x on entry: hi = tf32(x), and with SPLIT lo = tf32(x - hi)
    template <int N>
    static __device__ __forceinline__ void round_(float *hi, float *lo) {
#pragma unroll
        for (int e = 0; e < N; e++) {
            float x = hi[e], b = nvcuda::wmma::__float_to_tf32(x);
            hi[e] = b;
            if (SPLIT_) lo[e] = nvcuda::wmma::__float_to_tf32(x - b);
        }
    }
    // A's (16,8) slice at p (row-major, stride ld)
    static __device__ __forceinline__ void load_a(A &a, const float *p, int ld) {
        int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
        a.hi[0] = p[g * ld + t];
        a.hi[1] = p[(g + 8) * ld + t];
        a.hi[2] = p[g * ld + t + 4];
        a.hi[3] = p[(g + 8) * ld + t + 4];
        round_<4>(a.hi, a.lo);
    }
    // B's (8,8) slice as the transpose of the rows at p (row n of p is B's column n: q·k^T against k's rows)
    static __device__ __forceinline__ void load_bt(B &b, const float *p, int ld) {
        int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
        b.hi[0] = p[g * ld + t];
        b.hi[1] = p[g * ld + t + 4];
        round_<2>(b.hi, b.lo);
    }
    // B's (8,8) slice from the rows at p (row k of p is B's row k), in from_c's k order
    static __device__ __forceinline__ void load_b(B &b, const float *p, int ld) {
        int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
        b.hi[0] = p[2 * t * ld + g];
        b.hi[1] = p[(2 * t + 1) * ld + g];
        round_<2>(b.hi, b.lo);
    }
    // slices n, n+1 of load_bt (Bt's rows 0-7, 8-15 at p) and of load_b (X's columns 0-7, 8-15 at p)
    static __device__ __forceinline__ void load_bt2(B b[2], const float *p, int ld) {
        load_bt(b[0], p, ld);
        load_bt(b[1], p + 8 * ld, ld);
    }
    static __device__ __forceinline__ void load_b2(B b[2], const float *p, int ld) {
        load_b(b[0], p, ld);
        load_b(b[1], p + 8, ld);
    }
    // A's slice kk (columns 8kk .. 8kk+8) from a product c[] in registers
    static __device__ __forceinline__ void from_c(A &a, const float (*c)[4], int kk) {
        a.hi[0] = c[kk][0];
        a.hi[1] = c[kk][2];
        a.hi[2] = c[kk][1];
        a.hi[3] = c[kk][3];
        round_<4>(a.hi, a.lo);
    }
    static __device__ __forceinline__ void mma(float d[4], const A &a, const B &b) {
        if (SPLIT_) {
            mma_tf32_(d, a.lo, b.hi);
            mma_tf32_(d, a.hi, b.lo);
        }
        mma_tf32_(d, a.hi, b.hi);
    }
};

struct MathBf16 {
    typedef __nv_bfloat16 Elt;
    static constexpr bool SPLIT = false;
    static constexpr int KS = 16, PAD = 8;
    struct A {
        unsigned r[4];
    };
    struct B {
        unsigned r[2];
    };
    // A's (16,16) slice at p: the quarters (rows 0-7, 8-15) x (columns 0-7, 8-15) are a0..a3
    static __device__ __forceinline__ void load_a(A &a, const Elt *p, int ld) {
        ldmatrix_x4_<false>(a.r, ldmatrix_row_<true>(p, ld));
    }
    // B's slices n, n+1 (16 x 8 each) as the transpose of rows 0-7 and 8-15 at p
    static __device__ __forceinline__ void load_bt2(B b[2], const Elt *p, int ld) {
        unsigned r[4];
        ldmatrix_x4_<false>(r, ldmatrix_row_<false>(p, ld));
        b[0].r[0] = r[0], b[0].r[1] = r[1], b[1].r[0] = r[2], b[1].r[1] = r[3];
    }
    // B's slices n, n+1 from the 16 rows at p, columns 0-7 and 8-15: b0 b1 are rows 0-7, 8-15, transposed
    static __device__ __forceinline__ void load_b2(B b[2], const Elt *p, int ld) {
        unsigned r[4];
        ldmatrix_x4_<true>(r, ldmatrix_row_<true>(p, ld));
        b[0].r[0] = r[0], b[0].r[1] = r[1], b[1].r[0] = r[2], b[1].r[1] = r[3];
    }
    // A's slice kk (columns 16kk .. 16kk+16: the C slices 2kk, 2kk+1) from a product in registers
    static __device__ __forceinline__ void from_c(A &a, const float (*c)[4], int kk) {
        a.r[0] = pack_f32_(c[2 * kk][0], c[2 * kk][1]);
        a.r[1] = pack_f32_(c[2 * kk][2], c[2 * kk][3]);
        a.r[2] = pack_f32_(c[2 * kk + 1][0], c[2 * kk + 1][1]);
        a.r[3] = pack_f32_(c[2 * kk + 1][2], c[2 * kk + 1][3]);
    }
    static __device__ __forceinline__ void mma(float d[4], const A &a, const B &b) { mma_bf16_(d, a.r, b.r); }
};

// ----------------------------------------------------------------------------
// warp products

// The left operand, a row-major (16,K) matrix, one k-slice at a time: read from shared memory at each step
// (ASmem), or held in registers, loaded once (ARegs: rows a warp uses against every tile)
template <typename M>
struct ASmem {
    const typename M::Elt *a;
    int lda;
    __device__ __forceinline__ void get(int k, typename M::A &x) const { M::load_a(x, a + k, lda); }
};
template <int K, typename M>
struct ARegs {
    typename M::A r[K / M::KS];
    __device__ __forceinline__ void load(const typename M::Elt *a, int lda) {
#pragma unroll
        for (int k = 0; k < K; k += M::KS) M::load_a(r[k / M::KS], a + k, lda);
    }
    __device__ __forceinline__ void get(int k, typename M::A &x) const { x = r[k / M::KS]; }
};

// s[n] (16, 8), n < N (even), WRITTEN: this warp's A (16,K) · Bt^T against the 8N rows of Bt (row-major at bt,
// stride ld). (The slices a diagonal tile masks whole are computed anyway: a uniform branch per pair to skip them
// breaks up the unrolled loads and products and makes all three kernels slower; docs/gpu.md.)
template <int K, int N, typename M, typename ASrc>
static __device__ __forceinline__ void mma_scores_(float (*s)[4], const ASrc &A, const typename M::Elt *bt, int ld) {
#pragma unroll
    for (int n = 0; n < N; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int k = 0; k < K; k += M::KS) {
        typename M::A a;
        A.get(k, a);
#pragma unroll
        for (int n = 0; n < N; n += 2) {
            typename M::B b[2];
            M::load_bt2(b, bt + n * 8 * ld + k, ld);
            M::mma(s[n], a, b[0]);
            M::mma(s[n + 1], a, b[1]);
        }
    }
}

// acc[n] (16, 8), n < N (even), += P (16,KP) · X[:, 8n .. 8n+8): P a product in registers (KP/8 slices, as mma_scores_
// leaves them), X (KP, 8N) row-major at x (stride ld)
template <int KP, int N, typename M>
static __device__ __forceinline__ void mma_accumulate_(float (*acc)[4], const float (*p)[4], const typename M::Elt *x,
                                                       int ld) {
#pragma unroll
    for (int kk = 0; kk < KP / M::KS; kk++) {
        typename M::A a;
        M::from_c(a, p, kk);
#pragma unroll
        for (int n = 0; n < N; n += 2) {
            typename M::B b[2];
            M::load_b2(b, x + kk * M::KS * ld + n * 8, ld);
            M::mma(acc[n], a, b[0]);
            M::mma(acc[n + 1], a, b[1]);
        }
    }
}

// ----------------------------------------------------------------------------
// asynchronous copies (cp.async: global to shared memory without a trip through registers, so the next tile loads
// while the warps work on this one)

// 16 bytes from src to shared dst, or (bytes 0) 16 zero bytes
static __device__ __forceinline__ void cp_async16_(void *dst, const void *src, int bytes) {
#ifdef SEQ_GPU_EMU
    unsigned char x[16] = {0};
    if (bytes) memcpy(x, src, 16);
    memcpy(dst, x, 16);
#else
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
#endif
}
// closes the group of this thread's copies issued since the last commit
static __device__ __forceinline__ void cp_commit_(void) {
#ifndef SEQ_GPU_EMU
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// waits until at most N of this thread's committed groups are pending (a __syncthreads then shows every thread's)
template <int N>
static __device__ __forceinline__ void cp_wait_(void) {
#ifndef SEQ_GPU_EMU
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// rows [r0, r0 + NR) of a (T,D) matrix of E into s (NR rows of LD), zero-padded past T and past D up to DM:
// asynchronous (cp_commit_, cp_wait_) when rows are whole 16-byte chunks (src's rows then start 16-byte aligned:
// heads are T·D elements apart), else plain stores, done at the next __syncthreads
template <int DM, int NR, int LD, typename E>
static __device__ void load_tile_(E *s, const E *src, int r0, int T, int D) {
    constexpr int V = 16 / sizeof(E);  // elements a chunk
    if (D % V == 0) {
        for (int i = threadIdx.x; i < NR * DM / V; i += blockDim.x) {
            int r = i / (DM / V), d = V * (i % (DM / V));
            bool in = r0 + r < T && d < D;
            cp_async16_(s + r * LD + d, in ? src + (size_t)(r0 + r) * D + d : src, in ? 16 : 0);
        }
        return;
    }
    for (int i = threadIdx.x; i < NR * DM; i += blockDim.x) {
        int r = i / DM, d = i % DM;
        s[r * LD + d] = (r0 + r < T && d < D) ? src[(size_t)(r0 + r) * D + d] : to_elt_<E>(0.0f);
    }
}

#endif
