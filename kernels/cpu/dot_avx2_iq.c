/* dot_avx2_iq.c: AVX2 fused kernels for the IQ types IQ2_XXS, IQ2_XS,
 * IQ2_S, IQ3_S, IQ4_XS, IQ4_NL and the legacy fallbacks Q5_0, Q5_1 (see
 * dot_kernels.h; the scalar twins are in dot_scalar_kiq.c).
 *
 * Weights come out as the reference's floats: grid magnitudes and table
 * levels times a scale are exact products in f32, a sign is a flip of the
 * sign bit after the multiply (as the reference's * -1), and Q5_1's
 * q * d + m is one fma of an exact product. */
#include "kernels/cpu/dot_kernels.h"
#include "model/quant.h"

#if defined(__x86_64__)
#include "kernels/cpu/dot_avx2.h"

/* 16 split-half nibble bytes -> 32 unsigned codes (element j, j + 16) */
AVX2_INLINE __m256i nibbles32_avx2(const uint8_t *qs)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    const __m128i m4 = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
}

/* bit e of a 32-bit word -> 16 in byte e (the fifth bit of Q5 codes) */
AVX2_INLINE __m256i bits32_to_16s_avx2(uint32_t qh)
{
    const __m256i rep = _mm256_shuffle_epi8(
        _mm256_set1_epi32((int)qh),
        _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(rep, bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(16));
}

/* 32 codes (bytes) -> w = c * d + a */
AVX2_INLINE void codes_fma_avx2(__m256i c, __m256 d, __m256 a, __m256 *w)
{
    const __m128i lo = _mm256_castsi256_si128(c), hi = _mm256_extracti128_si256(c, 1);
    w[0] = _mm256_fmadd_ps(u8x8_avx2(lo), d, a);
    w[1] = _mm256_fmadd_ps(u8x8_avx2(_mm_srli_si128(lo, 8)), d, a);
    w[2] = _mm256_fmadd_ps(u8x8_avx2(hi), d, a);
    w[3] = _mm256_fmadd_ps(u8x8_avx2(_mm_srli_si128(hi, 8)), d, a);
}

/* (c - 16) * d == fma(c, d, -16 d): both exact */
AVX2_INLINE void dec_q5_0_avx2(const uint8_t *row, int64_t s, __m256 *w)
{
    const uint8_t *b = row + s * sizeof(block_q5_0);
    const float d = ld_fp16_avx2(b);
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    const __m256i c = _mm256_or_si256(nibbles32_avx2(b + 6), bits32_to_16s_avx2(qh));
    codes_fma_avx2(c, _mm256_set1_ps(d), _mm256_set1_ps(-16.0f * d), w);
}

AVX2_INLINE void dec_q5_1_avx2(const uint8_t *row, int64_t s, __m256 *w)
{
    const uint8_t *b = row + s * sizeof(block_q5_1);
    uint32_t qh;
    memcpy(&qh, b + 4, 4);
    const __m256i c = _mm256_or_si256(nibbles32_avx2(b + 8), bits32_to_16s_avx2(qh));
    codes_fma_avx2(c, _mm256_set1_ps(ld_fp16_avx2(b)), _mm256_set1_ps(ld_fp16_avx2(b + 2)), w);
}

/* 16 nibble bytes through the IQ4_NL table, times dl (exact) */
AVX2_INLINE void iq4_levels_avx2(const uint8_t *qs, float dl, __m256 *w)
{
    const __m128i tab = _mm_loadu_si128((const __m128i *)iq4nl_values);
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    const __m128i m4 = _mm_set1_epi8(15);
    const __m128i lo = _mm_shuffle_epi8(tab, _mm_and_si128(v, m4));
    const __m128i hi = _mm_shuffle_epi8(tab, _mm_and_si128(_mm_srli_epi16(v, 4), m4));
    const __m256 d = _mm256_set1_ps(dl);
    w[0] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)));
    w[1] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))));
    w[2] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)));
    w[3] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))));
}

AVX2_INLINE void dec_iq4_nl_avx2(const uint8_t *row, int64_t s, __m256 *w)
{
    const uint8_t *b = row + s * sizeof(block_iq4_nl);
    iq4_levels_avx2(b + 2, ld_fp16_avx2(b), w);
}

/* IQ4_XS: the eight 6-bit scales unpacked once per block (dot_avx2.h) */
AVX2_INLINE void prep_iq4_xs_avx2(const block_iq4_xs *b, sb_scales *sc)
{
    const float d = ld_fp16_avx2((const uint8_t *)&b->d);
    for (int k = 0; k < 8; k++)
        sc->d[k] = d * (float)(iq4_xs_scale(b, k) - 32);
}

AVX2_INLINE void dec_iq4_xs_avx2(const block_iq4_xs *b, const sb_scales *sc, int ib, __m256 *w)
{
    iq4_levels_avx2(b->qs + 16 * ib, sc->d[ib], w);
}

/* one IQ2 group: 8 magnitude bytes of a grid entry, times db, signed */
AVX2_INLINE __m256 iq2_group_avx2(uint64_t g, float db, unsigned sg)
{
    const __m256 mag = u8x8_avx2(_mm_cvtsi64_si128((long long)g));
    return apply_signs_avx2(_mm256_mul_ps(_mm256_set1_ps(db), mag), sg);
}

AVX2_INLINE void dec_iq2_xxs_avx2(const uint8_t *row, int64_t s, __m256 *w)
{
    const uint8_t *b = row + (s >> 3) * sizeof(block_iq2_xxs);
    const uint8_t *rec = b + 2 + 8 * (s & 7);
    uint32_t sw;
    memcpy(&sw, rec + 4, 4);
    const float db = ld_fp16_avx2(b) * (0.5f + (float)(sw >> 28)) * 0.25f;
    for (int l = 0; l < 4; l++)
        w[l] = iq2_group_avx2(iq2xxs_grid[rec[l]], db, iq3xxs_signs[(sw >> (7 * l)) & 127]);
}

AVX2_INLINE void dec_iq2_xs_avx2(const uint8_t *row, int64_t s, __m256 *w)
{
    const uint8_t *b = row + (s >> 3) * sizeof(block_iq2_xs);
    const int ib = (int)(s & 7);
    const float d = ld_fp16_avx2(b);
    const uint8_t sc = b[2 + 64 + ib];
    const float db0 = d * (0.5f + (float)(sc & 15)) * 0.25f;
    const float db1 = d * (0.5f + (float)(sc >> 4)) * 0.25f;
    for (int l = 0; l < 4; l++) {
        uint16_t v;
        memcpy(&v, b + 2 + 2 * (4 * ib + l), 2);
        w[l] = iq2_group_avx2(iq2xs_grid[v & 511], l < 2 ? db0 : db1, iq3xxs_signs[v >> 9]);
    }
}

/* 32 magnitude bytes (elements in order) and 32 sign bits -> w[0..3],
 * each 8 lanes times its scale */
AVX2_INLINE void mags_signs_avx2(__m256i g, uint32_t sg, __m256 d01, __m256 d23, __m256 *w)
{
    const __m128i lo = _mm256_castsi256_si128(g), hi = _mm256_extracti128_si256(g, 1);
    w[0] = apply_signs_avx2(_mm256_mul_ps(d01, u8x8_avx2(lo)), sg & 255);
    w[1] = apply_signs_avx2(_mm256_mul_ps(d01, u8x8_avx2(_mm_srli_si128(lo, 8))), (sg >> 8) & 255);
    w[2] = apply_signs_avx2(_mm256_mul_ps(d23, u8x8_avx2(hi)), (sg >> 16) & 255);
    w[3] = apply_signs_avx2(_mm256_mul_ps(d23, u8x8_avx2(_mm_srli_si128(hi, 8))), sg >> 24);
}

/* IQ2_S: the four 10-bit grid indices of a sub-block (low byte | 2 bits of
 * qh) gathered in one go; 8 explicit sign bits per group */
AVX2_INLINE void dec_iq2_s_avx2(const uint8_t *row, int64_t s, __m256 *w)
{
    const block_iq2_s *b = (const block_iq2_s *)(row + (s >> 3) * sizeof(block_iq2_s));
    const int ib = (int)(s & 7);
    const float d = ld_fp16_avx2((const uint8_t *)&b->d);
    const uint8_t sc = b->scales[ib];
    uint32_t lo4, sg;
    memcpy(&lo4, b->qs + 4 * ib, 4);
    memcpy(&sg, b->signs + 4 * ib, 4);
    const __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(b->qh[ib]),
                                                    _mm_setr_epi32(0, 2, 4, 6)),
                                     _mm_set1_epi32(3));
    const __m128i idx = _mm_or_si128(_mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)lo4)),
                                     _mm_slli_epi32(hi, 8));
    const __m256i g = _mm256_i32gather_epi64((const long long *)iq2s_grid, idx, 8);
    mags_signs_avx2(g, sg, _mm256_set1_ps(d * (0.5f + (float)(sc & 15)) * 0.25f),
                    _mm256_set1_ps(d * (0.5f + (float)(sc >> 4)) * 0.25f), w);
}

/* IQ3_S: the eight 9-bit grid indices of a sub-block (low byte | bit k of
 * qh) gathered in one go, four magnitudes each; 32 explicit sign bits */
AVX2_INLINE void dec_iq3_s_avx2(const uint8_t *row, int64_t s, __m256 *w)
{
    const block_iq3_s *b = (const block_iq3_s *)(row + (s >> 3) * sizeof(block_iq3_s));
    const int ib = (int)(s & 7);
    const float d = ld_fp16_avx2((const uint8_t *)&b->d);
    const __m256 db = _mm256_set1_ps(d * (float)(1 + 2 * ((b->scales[ib / 2] >> (4 * (ib % 2))) & 15)));
    uint32_t sg;
    memcpy(&sg, b->signs + 4 * ib, 4);
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(b->qh[ib]),
                                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
                                        _mm256_set1_epi32(1));
    const __m256i idx = _mm256_or_si256(
        _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + 8 * ib))),
        _mm256_slli_epi32(hi, 8));
    const __m256i g = _mm256_i32gather_epi32((const int *)iq3s_grid, idx, 4);
    mags_signs_avx2(g, sg, db, db, w);
}

DEFINE_ROWS(q5_0)
DEFINE_ROWS(q5_1)
DEFINE_ROWS(iq4_nl)
DEFINE_ROWS_SB(iq4_xs, block_iq4_xs)
DEFINE_ROWS(iq2_xxs)
DEFINE_ROWS(iq2_xs)
DEFINE_ROWS(iq2_s)
DEFINE_ROWS(iq3_s)

fast_rows_fn fast_rows_vec_iq(int type)
{
    switch (type) {
    case GGML_TYPE_Q5_0: return rows_q5_0_avx2;
    case GGML_TYPE_Q5_1: return rows_q5_1_avx2;
    case GGML_TYPE_IQ4_NL: return rows_iq4_nl_avx2;
    case GGML_TYPE_IQ4_XS: return rows_iq4_xs_avx2;
    case GGML_TYPE_IQ2_XXS: return rows_iq2_xxs_avx2;
    case GGML_TYPE_IQ2_XS: return rows_iq2_xs_avx2;
    case GGML_TYPE_IQ2_S: return rows_iq2_s_avx2;
    case GGML_TYPE_IQ3_S: return rows_iq3_s_avx2;
    default: return NULL;
    }
}

#endif
