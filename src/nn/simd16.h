/*
 * 16-lane float vectors for the kernels written around AVX-512 registers (the tiled attention:
 * nn/attention_tile.h and the files that include it): v16f (16 floats), v16i (16 int32), m16 (a 16-bit lane
 * mask, bit u = lane u). In the avx512 copy (nn/isa.h) each operation is the AVX-512 instruction of the
 * same name; in the avx2 copy a v16f is two ymm halves and an m16 is the same 16-bit integer, turned into a
 * lane mask where an operation needs one. Every operation rounds as its
 * AVX-512 namesake does, so the two copies give the same bits (and so does the plain C code beside them,
 * which does the same float operations lane by lane).
 *
 * Only what the attention kernels use is here. Register blocks that need many accumulators are sized per set
 * by the caller (a v16f costs two of AVX2's 16 registers).
 */
#ifndef SEQ_SIMD16_H
#define SEQ_SIMD16_H

#if ISA_AVX512 || ISA_AVX2
#include <immintrin.h>
#include <stdint.h>

#define V16_INLINE_ static inline __attribute__((always_inline))

#if ISA_AVX512
typedef __m512 v16f;
typedef __m512i v16i;
typedef __mmask16 m16;

V16_INLINE_ v16f v16_loadu(const float *p) { return _mm512_loadu_ps(p); }
V16_INLINE_ void v16_storeu(float *p, v16f a) { _mm512_storeu_ps(p, a); }
V16_INLINE_ v16f v16_maskz_loadu(m16 k, const float *p) { return _mm512_maskz_loadu_ps(k, p); }
V16_INLINE_ void v16_mask_storeu(float *p, m16 k, v16f a) { _mm512_mask_storeu_ps(p, k, a); }
V16_INLINE_ v16f v16_set1(float x) { return _mm512_set1_ps(x); }
V16_INLINE_ v16f v16_zero(void) { return _mm512_setzero_ps(); }
V16_INLINE_ v16f v16_add(v16f a, v16f b) { return _mm512_add_ps(a, b); }
V16_INLINE_ v16f v16_sub(v16f a, v16f b) { return _mm512_sub_ps(a, b); }
V16_INLINE_ v16f v16_mul(v16f a, v16f b) { return _mm512_mul_ps(a, b); }
V16_INLINE_ v16f v16_div(v16f a, v16f b) { return _mm512_div_ps(a, b); }
V16_INLINE_ v16f v16_max(v16f a, v16f b) { return _mm512_max_ps(a, b); }
V16_INLINE_ v16f v16_min(v16f a, v16f b) { return _mm512_min_ps(a, b); }
V16_INLINE_ v16f v16_fmadd(v16f a, v16f b, v16f c) { return _mm512_fmadd_ps(a, b, c); }
// lanes of k from a, the others from src / zero
V16_INLINE_ v16f v16_mask_mov(v16f src, m16 k, v16f a) { return _mm512_mask_mov_ps(src, k, a); }
V16_INLINE_ v16f v16_maskz_mov(m16 k, v16f a) { return _mm512_maskz_mov_ps(k, a); }
V16_INLINE_ m16 v16_cmplt(v16f a, v16f b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
V16_INLINE_ m16 v16_cmpeq(v16f a, v16f b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
// pr * 2^n for integral n in [-126, 127]: one correctly rounded product, as pr * (the float 2^n)
V16_INLINE_ v16f v16_scale2n(v16f pr, v16f n) { return _mm512_scalef_ps(pr, n); }
// lanes in reverse order
V16_INLINE_ v16f v16_reverse(v16f a) {
    return _mm512_permutexvar_ps(_mm512_set_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), a);
}
// p[u] += p[u + w] for w = 8, 4, 2, 1: the sum of the lanes by that fixed tree
V16_INLINE_ float v16_tree_sum(v16f v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));  // u + (u+8)
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));                 // u + (u+4)
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));                                                  // u + (u+2)
    __m128 d = _mm_add_ss(c, _mm_shuffle_ps(c, c, 1));                                              // 0 + 1
    return _mm_cvtss_f32(d);
}

V16_INLINE_ v16i v16i_set1(int32_t x) { return _mm512_set1_epi32(x); }
V16_INLINE_ v16i v16i_iota(void) { return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
V16_INLINE_ v16i v16i_add(v16i a, v16i b) { return _mm512_add_epi32(a, b); }
V16_INLINE_ v16i v16i_sub(v16i a, v16i b) { return _mm512_sub_epi32(a, b); }
V16_INLINE_ v16i v16i_srai(v16i a, const int s) { return _mm512_srai_epi32(a, (unsigned)s); }
V16_INLINE_ v16i v16i_slli(v16i a, const int s) { return _mm512_slli_epi32(a, (unsigned)s); }
V16_INLINE_ m16 v16i_cmplt(v16i a, v16i b) { return _mm512_cmplt_epi32_mask(a, b); }
V16_INLINE_ m16 v16i_cmpge(v16i a, v16i b) { return _mm512_cmpge_epi32_mask(a, b); }
V16_INLINE_ v16f v16i_to_float(v16i a) { return _mm512_cvtepi32_ps(a); }
V16_INLINE_ v16f v16_from_bits(v16i a) { return _mm512_castsi512_ps(a); }
V16_INLINE_ v16i v16_bits(v16f a) { return _mm512_castps_si512(a); }

#else  // ISA_AVX2: two ymm halves, lanes 0-7 in lo

typedef struct v16f { __m256 lo, hi; } v16f;
typedef struct v16i { __m256i lo, hi; } v16i;
typedef uint16_t m16;

// the lane mask of 8 bits of k (bit u -> lane u all ones)
V16_INLINE_ __m256 mask8_(unsigned k8) {
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)k8), bit), bit));
}
#define V16_LO_(k) mask8_((unsigned)(k) & 0xffu)
#define V16_HI_(k) mask8_((unsigned)(k) >> 8)
V16_INLINE_ m16 join8_(__m256 lo, __m256 hi) {
    return (m16)((unsigned)_mm256_movemask_ps(lo) | ((unsigned)_mm256_movemask_ps(hi) << 8));
}

V16_INLINE_ v16f v16_loadu(const float *p) { return (v16f){_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
V16_INLINE_ void v16_storeu(float *p, v16f a) {
    _mm256_storeu_ps(p, a.lo);
    _mm256_storeu_ps(p + 8, a.hi);
}
// masked lanes are neither read nor written (no fault, as with AVX-512 masks)
V16_INLINE_ v16f v16_maskz_loadu(m16 k, const float *p) {
    return (v16f){_mm256_maskload_ps(p, _mm256_castps_si256(V16_LO_(k))),
                  _mm256_maskload_ps(p + 8, _mm256_castps_si256(V16_HI_(k)))};
}
V16_INLINE_ void v16_mask_storeu(float *p, m16 k, v16f a) {
    _mm256_maskstore_ps(p, _mm256_castps_si256(V16_LO_(k)), a.lo);
    _mm256_maskstore_ps(p + 8, _mm256_castps_si256(V16_HI_(k)), a.hi);
}
V16_INLINE_ v16f v16_set1(float x) { return (v16f){_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
V16_INLINE_ v16f v16_zero(void) { return (v16f){_mm256_setzero_ps(), _mm256_setzero_ps()}; }
#define V16_BINARY_(name, op)                                                    \
    V16_INLINE_ v16f name(v16f a, v16f b) { return (v16f){op(a.lo, b.lo), op(a.hi, b.hi)}; }
V16_BINARY_(v16_add, _mm256_add_ps)
V16_BINARY_(v16_sub, _mm256_sub_ps)
V16_BINARY_(v16_mul, _mm256_mul_ps)
V16_BINARY_(v16_div, _mm256_div_ps)
V16_BINARY_(v16_max, _mm256_max_ps)
V16_BINARY_(v16_min, _mm256_min_ps)
#undef V16_BINARY_
V16_INLINE_ v16f v16_fmadd(v16f a, v16f b, v16f c) {
    return (v16f){_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
V16_INLINE_ v16f v16_mask_mov(v16f src, m16 k, v16f a) {
    return (v16f){_mm256_blendv_ps(src.lo, a.lo, V16_LO_(k)), _mm256_blendv_ps(src.hi, a.hi, V16_HI_(k))};
}
V16_INLINE_ v16f v16_maskz_mov(m16 k, v16f a) {
    return (v16f){_mm256_and_ps(a.lo, V16_LO_(k)), _mm256_and_ps(a.hi, V16_HI_(k))};
}
V16_INLINE_ m16 v16_cmplt(v16f a, v16f b) {
    return join8_(_mm256_cmp_ps(a.lo, b.lo, _CMP_LT_OQ), _mm256_cmp_ps(a.hi, b.hi, _CMP_LT_OQ));
}
V16_INLINE_ m16 v16_cmpeq(v16f a, v16f b) {
    return join8_(_mm256_cmp_ps(a.lo, b.lo, _CMP_EQ_OQ), _mm256_cmp_ps(a.hi, b.hi, _CMP_EQ_OQ));
}
// pr * 2^n with 2^n built in the exponent bits (n integral in [-126, 127]): the same product as scalef
V16_INLINE_ __m256 scale2n8_(__m256 pr, __m256 n) {
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(pr, _mm256_castsi256_ps(e));
}
V16_INLINE_ v16f v16_scale2n(v16f pr, v16f n) { return (v16f){scale2n8_(pr.lo, n.lo), scale2n8_(pr.hi, n.hi)}; }
V16_INLINE_ v16f v16_reverse(v16f a) {
    const __m256i rev = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    return (v16f){_mm256_permutevar8x32_ps(a.hi, rev), _mm256_permutevar8x32_ps(a.lo, rev)};
}
V16_INLINE_ float v16_tree_sum(v16f v) {
    __m256 a = _mm256_add_ps(v.lo, v.hi);                                           // u + (u+8)
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));  // u + (u+4)
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));                                   // u + (u+2)
    __m128 d = _mm_add_ss(c, _mm_shuffle_ps(c, c, 1));                               // 0 + 1
    return _mm_cvtss_f32(d);
}

V16_INLINE_ v16i v16i_set1(int32_t x) { return (v16i){_mm256_set1_epi32(x), _mm256_set1_epi32(x)}; }
V16_INLINE_ v16i v16i_iota(void) {
    return (v16i){_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15)};
}
V16_INLINE_ v16i v16i_add(v16i a, v16i b) { return (v16i){_mm256_add_epi32(a.lo, b.lo), _mm256_add_epi32(a.hi, b.hi)}; }
V16_INLINE_ v16i v16i_sub(v16i a, v16i b) { return (v16i){_mm256_sub_epi32(a.lo, b.lo), _mm256_sub_epi32(a.hi, b.hi)}; }
V16_INLINE_ v16i v16i_srai(v16i a, const int s) { return (v16i){_mm256_srai_epi32(a.lo, s), _mm256_srai_epi32(a.hi, s)}; }
V16_INLINE_ v16i v16i_slli(v16i a, const int s) { return (v16i){_mm256_slli_epi32(a.lo, s), _mm256_slli_epi32(a.hi, s)}; }
V16_INLINE_ m16 v16i_cmplt(v16i a, v16i b) {
    return join8_(_mm256_castsi256_ps(_mm256_cmpgt_epi32(b.lo, a.lo)), _mm256_castsi256_ps(_mm256_cmpgt_epi32(b.hi, a.hi)));
}
V16_INLINE_ m16 v16i_cmpge(v16i a, v16i b) { return (m16)~v16i_cmplt(a, b); }
V16_INLINE_ v16f v16i_to_float(v16i a) { return (v16f){_mm256_cvtepi32_ps(a.lo), _mm256_cvtepi32_ps(a.hi)}; }
V16_INLINE_ v16f v16_from_bits(v16i a) { return (v16f){_mm256_castsi256_ps(a.lo), _mm256_castsi256_ps(a.hi)}; }
V16_INLINE_ v16i v16_bits(v16f a) { return (v16i){_mm256_castps_si256(a.lo), _mm256_castps_si256(a.hi)}; }
#undef V16_LO_
#undef V16_HI_
#endif

#endif  // ISA_AVX512 || ISA_AVX2
#endif
