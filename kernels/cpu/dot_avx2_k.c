/* dot_avx2_k.c: AVX2 fused kernels for the K-quants Q2_K, Q3_K, Q4_K, Q5_K
 * and Q6_K (see dot_kernels.h; the scalar twins are in dot_scalar_kiq.c).
 *
 * A block's packed scales are unpacked once (prep_*), then each of its
 * eight 32-weight sub-blocks is decoded into four 8-float registers with
 * the reference's values:
 * every code * scale product is exact in f32, and a min is subtracted in
 * one fma (exact product, one rounding: the reference's d1 * q - m1). */
#include "kernels/cpu/dot_kernels.h"
#include "model/quant.h"

#if defined(__x86_64__)
#include "kernels/cpu/dot_avx2.h"

/* 32 unsigned bytes -> four registers of 8 floats, scaled: w = c * dl - ml,
 * dl/ml for the first 16 and dh/mh for the second 16 */
AVX2_INLINE void u8x32_scale_avx2(__m256i c, __m256 dl, __m256 ml, __m256 dh,
                                  __m256 mh, __m256 *w)
{
    const __m128i lo = _mm256_castsi256_si128(c), hi = _mm256_extracti128_si256(c, 1);
    w[0] = _mm256_fmsub_ps(u8x8_avx2(lo), dl, ml);
    w[1] = _mm256_fmsub_ps(u8x8_avx2(_mm_srli_si128(lo, 8)), dl, ml);
    w[2] = _mm256_fmsub_ps(u8x8_avx2(hi), dh, mh);
    w[3] = _mm256_fmsub_ps(u8x8_avx2(_mm_srli_si128(hi, 8)), dh, mh);
}

/* Q2_K: bit pair ib % 4 of the 32 bytes qs[32 (ib / 4) ..]; a 4-bit scale
 * and min per 16 */
AVX2_INLINE void prep_q2_k_avx2(const block_q2_k *b, sb_scales *sc)
{
    const float d = ld_fp16_avx2((const uint8_t *)&b->d);
    const float dmin = ld_fp16_avx2((const uint8_t *)&b->dmin);
    for (int k = 0; k < 16; k++) {
        sc->d[k] = d * (b->scales[k] & 15);
        sc->m[k] = dmin * (b->scales[k] >> 4);
    }
}

AVX2_INLINE void dec_q2_k_avx2(const block_q2_k *b, const sb_scales *sc, int ib, __m256 *w)
{
    const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * (ib / 4)));
    const __m256i c = _mm256_and_si256(_mm256_srli_epi16(q, 2 * (ib % 4)), _mm256_set1_epi8(3));
    u8x32_scale_avx2(c, _mm256_set1_ps(sc->d[2 * ib]), _mm256_set1_ps(sc->m[2 * ib]),
                     _mm256_set1_ps(sc->d[2 * ib + 1]), _mm256_set1_ps(sc->m[2 * ib + 1]), w);
}

/* Q3_K: Q2_K's bit pairs plus bit ib of hmask[l]; code lo2 + 4 hb - 4; a
 * signed 6-bit scale per 16 */
AVX2_INLINE void prep_q3_k_avx2(const block_q3_k *b, sb_scales *sc)
{
    const float d = ld_fp16_avx2((const uint8_t *)&b->d);
    for (int k = 0; k < 16; k++)
        sc->d[k] = d * q3_k_scale(b->scales, k);
}

AVX2_INLINE void dec_q3_k_avx2(const block_q3_k *b, const sb_scales *sc, int ib, __m256 *w)
{
    const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * (ib / 4)));
    const __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
    const __m256i lo2 = _mm256_and_si256(_mm256_srli_epi16(q, 2 * (ib % 4)), _mm256_set1_epi8(3));
    /* bit ib of each byte to bit 2: shift the 16-bit lanes right by ib,
     * keep bit 0 of each byte, then shift left by 2 (no carry across bytes) */
    const __m256i hb = _mm256_slli_epi16(
        _mm256_and_si256(_mm256_srli_epi16(hm, ib), _mm256_set1_epi8(1)), 2);
    const __m256i c = _mm256_or_si256(lo2, hb); /* 0..7, the code + 4 */
    const __m256 four = _mm256_set1_ps(4.0f);
    const __m256 d0 = _mm256_set1_ps(sc->d[2 * ib]), d1 = _mm256_set1_ps(sc->d[2 * ib + 1]);
    const __m128i lo = _mm256_castsi256_si128(c), hi = _mm256_extracti128_si256(c, 1);
    /* (c - 4) is exact in f32; then one exact product as the reference */
    w[0] = _mm256_mul_ps(d0, _mm256_sub_ps(u8x8_avx2(lo), four));
    w[1] = _mm256_mul_ps(d0, _mm256_sub_ps(u8x8_avx2(_mm_srli_si128(lo, 8)), four));
    w[2] = _mm256_mul_ps(d1, _mm256_sub_ps(u8x8_avx2(hi), four));
    w[3] = _mm256_mul_ps(d1, _mm256_sub_ps(u8x8_avx2(_mm_srli_si128(hi, 8)), four));
}

/* Q4_K and Q5_K: one 6-bit scale and min per 32 */
AVX2_INLINE void prep_q45_k_avx2(const uint8_t *scales, float d, float dmin, sb_scales *sc)
{
    for (int k = 0; k < 8; k++) {
        int s, m;
        q4_k_scale_min(k, scales, &s, &m);
        sc->d[k] = d * s;
        sc->m[k] = dmin * m;
    }
}

AVX2_INLINE void prep_q4_k_avx2(const block_q4_k *b, sb_scales *sc)
{
    prep_q45_k_avx2(b->scales, ld_fp16_avx2((const uint8_t *)&b->d),
                    ld_fp16_avx2((const uint8_t *)&b->dmin), sc);
}

/* Q4_K: nibble ib & 1 of the 32 bytes qs[32 (ib / 2) ..] */
AVX2_INLINE void dec_q4_k_avx2(const block_q4_k *b, const sb_scales *sc, int ib, __m256 *w)
{
    const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * (ib / 2)));
    const __m256i c = _mm256_and_si256(_mm256_srli_epi16(q, 4 * (ib & 1)), _mm256_set1_epi8(15));
    const __m256 d1 = _mm256_set1_ps(sc->d[ib]), m1 = _mm256_set1_ps(sc->m[ib]);
    u8x32_scale_avx2(c, d1, m1, d1, m1, w);
}

AVX2_INLINE void prep_q5_k_avx2(const block_q5_k *b, sb_scales *sc)
{
    prep_q45_k_avx2(b->scales, ld_fp16_avx2((const uint8_t *)&b->d),
                    ld_fp16_avx2((const uint8_t *)&b->dmin), sc);
}

/* Q5_K: Q4_K plus bit ib of qh[l] as the fifth bit */
AVX2_INLINE void dec_q5_k_avx2(const block_q5_k *b, const sb_scales *sc, int ib, __m256 *w)
{
    const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * (ib / 2)));
    const __m256i qh = _mm256_loadu_si256((const __m256i *)b->qh);
    const __m256i lo4 = _mm256_and_si256(_mm256_srli_epi16(q, 4 * (ib & 1)), _mm256_set1_epi8(15));
    const __m256i h = _mm256_slli_epi16(
        _mm256_and_si256(_mm256_srli_epi16(qh, ib), _mm256_set1_epi8(1)), 4);
    const __m256 d1 = _mm256_set1_ps(sc->d[ib]), m1 = _mm256_set1_ps(sc->m[ib]);
    u8x32_scale_avx2(_mm256_or_si256(lo4, h), d1, m1, d1, m1, w);
}

/* Q6_K: quarter ib % 4 of half ib / 4: a nibble of ql, 2 bits of qh, minus
 * 32; a signed 8-bit scale per 16 */
AVX2_INLINE void prep_q6_k_avx2(const block_q6_k *b, sb_scales *sc)
{
    const float d = ld_fp16_avx2((const uint8_t *)&b->d);
    for (int k = 0; k < 16; k++)
        sc->d[k] = d * b->scales[k];
}

AVX2_INLINE void dec_q6_k_avx2(const block_q6_k *b, const sb_scales *sc, int ib, __m256 *w)
{
    const int h = ib / 4, qd = ib % 4;
    const __m256i L = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32 * (qd & 1)));
    const __m256i H = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
    const __m256i lo4 = _mm256_and_si256(_mm256_srli_epi16(L, 4 * (qd >> 1)), _mm256_set1_epi8(15));
    const __m256i hi2 = _mm256_slli_epi16(
        _mm256_and_si256(_mm256_srli_epi16(H, 2 * qd), _mm256_set1_epi8(3)), 4);
    const __m256i c = _mm256_or_si256(lo4, hi2); /* 0..63, the code + 32 */
    /* scales 8 h + 2 qd and the next: 2 ib as ib = 4 h + qd */
    const __m256 d0 = _mm256_set1_ps(sc->d[2 * ib]), d1 = _mm256_set1_ps(sc->d[2 * ib + 1]);
    const __m256 off = _mm256_set1_ps(32.0f);
    const __m128i lo = _mm256_castsi256_si128(c), hi = _mm256_extracti128_si256(c, 1);
    w[0] = _mm256_mul_ps(d0, _mm256_sub_ps(u8x8_avx2(lo), off));
    w[1] = _mm256_mul_ps(d0, _mm256_sub_ps(u8x8_avx2(_mm_srli_si128(lo, 8)), off));
    w[2] = _mm256_mul_ps(d1, _mm256_sub_ps(u8x8_avx2(hi), off));
    w[3] = _mm256_mul_ps(d1, _mm256_sub_ps(u8x8_avx2(_mm_srli_si128(hi, 8)), off));
}

DEFINE_ROWS_SB(q2_k, block_q2_k)
DEFINE_ROWS_SB(q3_k, block_q3_k)
DEFINE_ROWS_SB(q4_k, block_q4_k)
DEFINE_ROWS_SB(q5_k, block_q5_k)
DEFINE_ROWS_SB(q6_k, block_q6_k)

fast_rows_fn fast_rows_vec_k(int type)
{
    switch (type) {
    case GGML_TYPE_Q2_K: return rows_q2_k_avx2;
    case GGML_TYPE_Q3_K: return rows_q3_k_avx2;
    case GGML_TYPE_Q4_K: return rows_q4_k_avx2;
    case GGML_TYPE_Q5_K: return rows_q5_k_avx2;
    case GGML_TYPE_Q6_K: return rows_q6_k_avx2;
    default: return NULL;
    }
}

#endif
