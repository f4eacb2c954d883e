/* dot_q8_avx2.h: the AVX2 sub-block decoders of the int8-activation
 * kernels (kernels/cpu/act_q8.h), shared by the tile kernels in
 * dot_q8_tile_avx2.c.  Internal to kernels/cpu; x86-64 only.
 *
 * A 32-weight sub-block is unpacked into one register of 32 bytes: codes
 * 0..31 for the unsigned types (Q4_0, Q4_1, Q5_0, Q4_K), which meet the
 * activation codes in one maddubs (u8 x s8 -> pairs summed into s16), and
 * signed codes for Q8_0 and Q6_K, which go through the sign trick
 * (maddubs(|w|, sign(x, w))).  Each decoder also gives the madd
 * multipliers (ones, or Q6_K's two 16-element scales), the float factor
 * dw of the integer dot and the factor cw of the activation block's s.
 * No maddubs pair can saturate: a pair is at most 2 * 128 * 127 = 32512
 * (Q8_0's |w| <= 128; the other types' codes are smaller). */
#ifndef STRATA_DOT_Q8_AVX2_H
#define STRATA_DOT_Q8_AVX2_H

#if defined(__x86_64__)
#include "kernels/cpu/act_q8.h"
#include "kernels/cpu/dot_avx2.h"
#include "model/quant.h"

/* ---- sub-block decoders: 32 byte codes, madd multipliers, factors -------- */

#define ONES16 _mm256_set1_epi16(1)

AVX2_INLINE __m256i nibbles_avx2(const uint8_t *p) /* 16 bytes -> lo | hi codes */
{
    const __m128i v = _mm_loadu_si128((const __m128i *)p), m4 = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
}

AVX2_INLINE void dq8_q4_0_avx2(const uint8_t *row, int64_t s, __m256i *w, __m256i *mul,
                               float *dw, float *cw)
{
    const uint8_t *b = row + s * sizeof(block_q4_0);
    *w = nibbles_avx2(b + 2);
    *mul = ONES16;
    *dw = ld_fp16_avx2(b);
    *cw = -8.0f * *dw;
}

AVX2_INLINE void dq8_q4_1_avx2(const uint8_t *row, int64_t s, __m256i *w, __m256i *mul,
                               float *dw, float *cw)
{
    const uint8_t *b = row + s * sizeof(block_q4_1);
    *w = nibbles_avx2(b + 4);
    *mul = ONES16;
    *dw = ld_fp16_avx2(b);
    *cw = ld_fp16_avx2(b + 2);
}

AVX2_INLINE void dq8_q5_0_avx2(const uint8_t *row, int64_t s, __m256i *w, __m256i *mul,
                               float *dw, float *cw)
{
    const uint8_t *b = row + s * sizeof(block_q5_0);
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    /* byte j of the result takes bit j of qh: byte j/8 of qh, masked */
    const __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201ll);
    const __m256i t = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), sel), bit);
    const __m256i h = _mm256_and_si256(_mm256_cmpeq_epi8(t, bit), _mm256_set1_epi8(16));
    *w = _mm256_or_si256(nibbles_avx2(b + 6), h);
    *mul = ONES16;
    *dw = ld_fp16_avx2(b);
    *cw = -16.0f * *dw;
}

AVX2_INLINE void dq8_q8_0_avx2(const uint8_t *row, int64_t s, __m256i *w, __m256i *mul,
                               float *dw, float *cw)
{
    const uint8_t *b = row + s * sizeof(block_q8_0);
    *w = _mm256_loadu_si256((const __m256i *)(b + 2));
    *mul = ONES16;
    *dw = ld_fp16_avx2(b);
    *cw = 0.0f;
}

/* The 256-weight types: the scales of a super-block are unpacked once
 * (prep), then each sub-block ib (a constant after unrolling) decodes its
 * codes; dw, cw and the madd multipliers come from the prep. */
typedef struct q8_prep {
    float dw[8], cw[8];
    __m256i mul[8];
} q8_prep;

/* Q4_K's eight 6-bit scales and minima (q4_k_scale_min) as int32 lanes,
 * unpacked four at a time from the 12 bytes' three 32-bit words A, B, C:
 * scales 0..3 are A's bytes' low 6 bits, minima 0..3 B's; scales 4..7
 * are C's low nibbles with A's top two bits above them, minima 4..7 C's
 * high nibbles with B's top two bits.  (Eight calls of q4_k_scale_min
 * made a one-row product's super-block cost about 1.6x its sub-blocks'
 * dots.) */
AVX2_INLINE void q4_k_scales_avx2(const uint8_t *q, __m256i *sc, __m256i *mn)
{
    uint32_t a, b, c;
    memcpy(&a, q, 4);
    memcpy(&b, q + 4, 4);
    memcpy(&c, q + 8, 4);
    const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
    const uint64_t s = (a & m6) | (uint64_t)((c & m4) | ((a >> 6) & m2) << 4) << 32;
    const uint64_t m = (b & m6) | (uint64_t)(((c >> 4) & m4) | ((b >> 6) & m2) << 4) << 32;
    *sc = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)s));
    *mn = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m));
}

/* dw = d * sc and cw = -dmin * mn, one vector multiply each: the roundings
 * of the scalar products. */
AVX2_INLINE void prep_q4_k_avx2(const uint8_t *blk, q8_prep *p)
{
    const block_q4_k *b = (const block_q4_k *)blk;
    const float d = ld_fp16_avx2((const uint8_t *)&b->d);
    const float dmin = ld_fp16_avx2((const uint8_t *)&b->dmin);
    __m256i sc, mn;
    q4_k_scales_avx2(b->scales, &sc, &mn);
    _mm256_storeu_ps(p->dw, _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sc)));
    _mm256_storeu_ps(p->cw, _mm256_mul_ps(_mm256_set1_ps(-dmin), _mm256_cvtepi32_ps(mn)));
    for (int ib = 0; ib < 8; ib++)
        p->mul[ib] = ONES16;
}

AVX2_INLINE __m256i sub_q4_k_avx2(const uint8_t *blk, int ib)
{
    const block_q4_k *b = (const block_q4_k *)blk;
    const __m256i v = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * (ib / 2)));
    return _mm256_and_si256(ib & 1 ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(0x0f));
}

AVX2_INLINE void prep_q6_k_avx2(const uint8_t *blk, q8_prep *p)
{
    const block_q6_k *b = (const block_q6_k *)blk;
    const float d = ld_fp16_avx2((const uint8_t *)&b->d);
    for (int ib = 0; ib < 8; ib++) {
        const int h = ib / 4, qd = ib % 4;
        p->dw[ib] = d;
        p->cw[ib] = 0.0f;
        p->mul[ib] = _mm256_set_m128i(_mm_set1_epi16(b->scales[8 * h + 2 * qd + 1]),
                                      _mm_set1_epi16(b->scales[8 * h + 2 * qd]));
    }
}

AVX2_INLINE __m256i sub_q6_k_avx2(const uint8_t *blk, int ib)
{
    const block_q6_k *b = (const block_q6_k *)blk;
    const int h = ib / 4, qd = ib % 4;
    const __m256i L = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32 * (qd & 1)));
    const __m256i H = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
    const __m256i lo = _mm256_and_si256(qd < 2 ? L : _mm256_srli_epi16(L, 4), m4);
    const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(H, 2 * qd), m2);
    return _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hb, 4)), _mm256_set1_epi8(32));
}

/* Q6_K's codes of sub-block 4h + qd as int16 (zl: the low bits' bytes,
 * zh: the high bits' bytes, zero-extended to words) minus 32, times the
 * scale of their 16: the widened weights of the 16-bit-code kernels
 * (dot_q16k_dec_avx2.c, dot_q16k_avx2.c). */
AVX2_INLINE __m256i q6_k_w16_avx2(__m256i zl, __m256i zh, int qd, int16_t scale)
{
    const __m256i lo = qd < 2 ? _mm256_and_si256(zl, _mm256_set1_epi16(15)) : _mm256_srli_epi16(zl, 4);
    const __m256i hb = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(zh, 2 * qd), 4),
                                        _mm256_set1_epi16(0x30));
    const __m256i c = _mm256_sub_epi16(_mm256_or_si256(lo, hb), _mm256_set1_epi16(32));
    return _mm256_mullo_epi16(c, _mm256_set1_epi16(scale));
}

#endif /* __x86_64__ */
#endif
