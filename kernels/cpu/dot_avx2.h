/* dot_avx2.h: what the AVX2 kernel files (dot_avx2.c, dot_avx2_k.c,
 * dot_avx2_iq.c) share: the target attributes, small helpers, and the
 * macros that turn a sub-block decoder dec_NAME_avx2 into the rows kernel
 * rows_NAME_avx2 (see dot_avx2.c for the accumulation order).  Internal to
 * kernels/cpu; x86-64 only. */
#ifndef STRATA_DOT_AVX2_H
#define STRATA_DOT_AVX2_H

#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/dot_kernels.h"

#define AVX2_FN __attribute__((target("avx2,fma,f16c")))
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))
#define TILE 4

AVX2_INLINE float ld_fp16_avx2(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h); /* exact, like fp16_to_f32 */
}

/* 8 bytes -> 8 floats, unsigned / signed */
AVX2_INLINE __m256 u8x8_avx2(__m128i v)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
}

AVX2_INLINE float hsum_avx2(__m256 v)
{
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    __m128 s4 = _mm_add_ps(lo, hi);
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
}

/* The sum of 8 int32 lanes (exact where it fits). */
AVX2_INLINE int32_t hsum_epi32_avx2(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* max |x| over n floats (n a multiple of 8); a NaN lane keeps the maximum,
 * as fmaxf does. */
AVX2_INLINE float amax_avx2(const float *x, int n)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < n; k += 8)
        m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)), m);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    return _mm_cvtss_f32(m4);
}

/* The 16-bit activation codes of 8 values t = x / d8 (act_q16_code in
 * act_q8.h, the same bits), as int32. */
AVX2_INLINE __m256i q16_codes8_avx2(__m256 t)
{
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    const int rnd = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    __m256 r = _mm256_round_ps(t, rnd);
    r = _mm256_and_ps(r, _mm256_cmp_ps(r, r, _CMP_ORD_Q)); /* NaN -> 0 */
    r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
    __m256 e = _mm256_round_ps(_mm256_mul_ps(_mm256_sub_ps(t, r), _mm256_set1_ps(256.0f)), rnd);
    e = _mm256_and_ps(e, _mm256_cmp_ps(e, e, _CMP_ORD_Q));
    e = _mm256_min_ps(_mm256_max_ps(e, lo), hi);
    return _mm256_add_epi32(_mm256_slli_epi32(_mm256_cvtps_epi32(r), 8), _mm256_cvtps_epi32(e));
}

/* 8 signs (bit k set: lane k negative) applied to 8 floats by flipping
 * their sign bits: exact, the same as the reference's multiply by -1 */
AVX2_INLINE __m256 apply_signs_avx2(__m256 v, unsigned sg)
{
    const __m256i bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i neg = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)sg), bits), bits);
    return _mm256_xor_ps(v, _mm256_castsi256_ps(_mm256_slli_epi32(neg, 31)));
}

/* ---- one weight row against T activation rows --------------------------- */

#define DEFINE_TILE(NAME, T)                                                       \
    AVX2_INLINE void tile_##NAME##_##T##_avx2(const uint8_t *row, int64_t nsub,     \
                                              const float *x, int64_t cols,         \
                                              float *y, int64_t ystride)            \
    {                                                                               \
        __m256 a0[T], a1[T];                                                        \
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++)                         \
            a0[t] = a1[t] = _mm256_setzero_ps();                                    \
        for (int64_t s = 0; s < nsub; s++) {                                        \
            __m256 w[4];                                                            \
            dec_##NAME##_avx2(row, s, w);                                           \
            _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {                   \
                const float *xs = x + t * cols + 32 * s;                            \
                a0[t] = _mm256_fmadd_ps(w[0], _mm256_loadu_ps(xs), a0[t]);          \
                a1[t] = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(xs + 8), a1[t]);      \
                a0[t] = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(xs + 16), a0[t]);     \
                a1[t] = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(xs + 24), a1[t]);     \
            }                                                                       \
        }                                                                           \
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++)                         \
            y[t * ystride] = hsum_avx2(_mm256_add_ps(a0[t], a1[t]));                \
    }

/* Weight rows outermost within a tile of activation rows: the task's rows
 * (a few KiB) stay in L1 while each tile of x streams past them. */
#define DEFINE_ROWS(NAME)                                                          \
    DEFINE_TILE(NAME, 1)                                                           \
    DEFINE_TILE(NAME, 2)                                                           \
    DEFINE_TILE(NAME, 3)                                                           \
    DEFINE_TILE(NAME, 4)                                                           \
    DEFINE_ROWS_LOOP(NAME)

#define DEFINE_ROWS_LOOP(NAME)                                                     \
    AVX2_FN static void rows_##NAME##_avx2(const uint8_t *w, size_t row_bytes,     \
                                           int64_t nrows, int64_t cols,            \
                                           const float *x, int64_t n, float *y,    \
                                           int64_t ystride)                        \
    {                                                                              \
        const int64_t nsub = cols / 32;                                            \
        for (int64_t i0 = 0; i0 < n; i0 += TILE) {                                 \
            const int64_t nt = n - i0 < TILE ? n - i0 : TILE;                      \
            const float *xt = x + i0 * cols;                                       \
            float *yt = y + i0 * ystride;                                          \
            for (int64_t r = 0; r < nrows; r++) {                                  \
                const uint8_t *row = w + r * row_bytes;                            \
                switch (nt) {                                                      \
                case 4: tile_##NAME##_4_avx2(row, nsub, xt, cols, yt + r, ystride); break; \
                case 3: tile_##NAME##_3_avx2(row, nsub, xt, cols, yt + r, ystride); break; \
                case 2: tile_##NAME##_2_avx2(row, nsub, xt, cols, yt + r, ystride); break; \
                default: tile_##NAME##_1_avx2(row, nsub, xt, cols, yt + r, ystride); break; \
                }                                                                  \
            }                                                                      \
        }                                                                          \
    }


/* The same for the 256-weight super-block types whose sub-block scales are
 * packed bit fields (K-quants, IQ4_XS): prep_NAME_avx2 unpacks a block's
 * scales once into an sb_scales (d[k] and m[k] per 16- or 32-weight
 * sub-block, already multiplied by the block's fp16 d / dmin), then
 * dec_NAME_avx2(block, scales, ib, w) decodes sub-block ib with ib a
 * constant after unrolling.  Same sub-block order and the same float
 * operations per accumulator as DEFINE_TILE: only where the scale
 * arithmetic happens moves. */
typedef struct { float d[16], m[16]; } sb_scales;

#define DEFINE_TILE_SB(NAME, BTYPE, T)                                              \
    AVX2_INLINE void tile_##NAME##_##T##_avx2(const uint8_t *row, int64_t nsub,     \
                                              const float *x, int64_t cols,         \
                                              float *y, int64_t ystride)            \
    {                                                                               \
        __m256 a0[T], a1[T];                                                        \
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++)                         \
            a0[t] = a1[t] = _mm256_setzero_ps();                                    \
        for (int64_t blk = 0; blk < nsub / 8; blk++) {                              \
            const BTYPE *b = (const BTYPE *)(row + blk * sizeof(BTYPE));            \
            sb_scales sc;                                                           \
            prep_##NAME##_avx2(b, &sc);                                             \
            _Pragma("GCC unroll 8") for (int ib = 0; ib < 8; ib++) {                \
                __m256 w[4];                                                        \
                dec_##NAME##_avx2(b, &sc, ib, w);                                   \
                _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {               \
                    const float *xs = x + t * cols + 32 * (8 * blk + ib);           \
                    a0[t] = _mm256_fmadd_ps(w[0], _mm256_loadu_ps(xs), a0[t]);      \
                    a1[t] = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(xs + 8), a1[t]);  \
                    a0[t] = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(xs + 16), a0[t]); \
                    a1[t] = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(xs + 24), a1[t]); \
                }                                                                   \
            }                                                                       \
        }                                                                           \
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++)                         \
            y[t * ystride] = hsum_avx2(_mm256_add_ps(a0[t], a1[t]));                \
    }

#define DEFINE_ROWS_SB(NAME, BTYPE)                                                 \
    DEFINE_TILE_SB(NAME, BTYPE, 1)                                                  \
    DEFINE_TILE_SB(NAME, BTYPE, 2)                                                  \
    DEFINE_TILE_SB(NAME, BTYPE, 3)                                                  \
    DEFINE_TILE_SB(NAME, BTYPE, 4)                                                  \
    DEFINE_ROWS_LOOP(NAME)

#endif /* __x86_64__ */
#endif
