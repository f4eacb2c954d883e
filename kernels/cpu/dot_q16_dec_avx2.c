/* dot_q16_dec_avx2.c: the 16-bit-code kernels (act_q8.h) for one
 * activation row (a decode step) of Q5_0, Q8_0 and Q4_1 weights, on AVX2.
 *
 * They give the bits of the tiles' 1 x 1 case (dot_q8_tile_avx2.c) and of
 * the plain C twin (dot_q8_scalar.c): per output element the same exact
 * int32 lanes (lane k: elements 2k, 2k+1, 16 + 2k, 17 + 2k), converted
 * and fused-multiply-added with dw * d_x into the accumulator of the
 * sub-block's parity, the s terms in two scalar chains, and the same
 * reduction.  What differs is how few instructions a sub-block takes,
 * which is what a decode step is bound by on a Zen 3 core (the Q5_0
 * products ran at a third of the core's stream bandwidth):
 *
 *  - The weights are widened straight to int16: the 16 bytes of Q5_0
 *    nibbles are zero-extended to 16 words (one vpmovzxbw), whose low
 *    nibbles are elements 0..15 and high nibbles elements 16..31, so one
 *    and and one shift give both registers the madd needs; the tiles
 *    unpack 32 bytes, join the halves and widen them again (5 + 3
 *    operations instead of 3; Q4_1 the same without fifth bits).  The fifth bits are spread by one shuffle
 *    of the broadcast 32-bit word into the byte order that unpacking
 *    against zero turns into the two registers' words.  Q8_0's codes are
 *    sign-extended from memory, 16 at a time.
 *  - The weight scale is broadcast as fp16 and converted in the vector
 *    (no scalar convert and broadcast), and dw * d_x is one vector
 *    multiply (the same rounding as the scalar product).
 *  - Each block prefetches the weights Q16D_PF bytes ahead.
 *  - Q5_0's s terms take the activation's s times -16 (made once per
 *    call) and the block's dw: one scalar FMA, no multiply.
 *  - Q8_0's s terms (cw = 0) do not depend on the weight row: their two
 *    chains are run once per call, with the C twin's operations, and
 *    shared by every row (0 unless an activation block's s is not finite).
 *
 * Every function is compiled for AVX2/FMA/F16C (named *_avx2, the ISA
 * rule of dot_kernels.h) and runs only after fast_cpu_avx2_ok(). */
#include <math.h>
#include <string.h>

#include "kernels/cpu/act_q8.h"
#include "model/quant.h"

#if defined(__x86_64__)
#include "kernels/cpu/dot_avx2.h"
#include "kernels/cpu/dot_q8_avx2.h"

/* Bytes ahead of the block being read that each block prefetches: the
 * hardware prefetcher alone left the 144 MB Q8_0 head at about 13 GB/s on
 * the Zen 3 core (stream read: 21 GB/s); 2048 ahead gave +15 % (256 to
 * 8192 tried, doc/cpu.md). */
#ifndef Q16D_PF
#define Q16D_PF 2048
#endif
/* Sub-blocks whose s terms a call precomputes on the stack (4 KiB): rows
 * of up to 32768 columns; longer ones go to the tiles. */
#define Q16D_MAX_SUB 1024

/* dw of a block (its first two bytes, fp16) in all 8 lanes; *cw the
 * block's own s factor where it has one (Q4_1's minimum, the next two
 * bytes), else untouched. */
AVX2_INLINE __m256 q16d_scale_avx2(const uint8_t *b, float *cw)
{
    (void)cw;
    int16_t h;
    memcpy(&h, b, 2);
    return _mm256_cvtph_ps(_mm_set1_epi16(h));
}
#define q16d_scale_q5_0 q16d_scale_avx2
#define q16d_scale_q8_0 q16d_scale_avx2

AVX2_INLINE __m256 q16d_scale_q4_1(const uint8_t *b, float *cw)
{
    int32_t dm;
    memcpy(&dm, b, 4);
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(dm)); /* d, m, 0, 0 */
    *cw = _mm_cvtss_f32(_mm_movehdup_ps(f));
    return _mm256_broadcastss_ps(f);
}

/* A Q4_1 block's 32 codes (0..15) as int16: the 16 bytes zero-extended,
 * low nibbles elements 0..15, high nibbles 16..31. */
AVX2_INLINE void q16d_q4_1_avx2(const uint8_t *b, __m256i *w0, __m256i *w1)
{
    const __m256i z = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(b + 4)));
    *w0 = _mm256_and_si256(z, _mm256_set1_epi16(15));
    *w1 = _mm256_srli_epi16(z, 4);
}

/* A Q5_0 block's 32 unsigned codes (0..31) as int16: w0 elements 0..15,
 * w1 elements 16..31.  Byte p of the shuffled high bits takes bit e(p) of
 * qh, e(p) = p for p < 8 and p >= 24, p + 8 for 8..15, p - 8 for 16..23:
 * unpacked against zero, the low bytes of each 128-bit half become w0's
 * words 0..7 and 8..15, the high bytes w1's. */
AVX2_INLINE void q16d_q5_0_avx2(const uint8_t *b, __m256i *w0, __m256i *w1)
{
    const __m256i z = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(b + 6)));
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    const __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2,
                                         1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201ll);
    const __m256i t = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), sel), bit);
    const __m256i h = _mm256_and_si256(_mm256_cmpeq_epi8(t, bit), _mm256_set1_epi8(16));
    const __m256i zero = _mm256_setzero_si256();
    *w0 = _mm256_or_si256(_mm256_and_si256(z, _mm256_set1_epi16(15)), _mm256_unpacklo_epi8(h, zero));
    *w1 = _mm256_or_si256(_mm256_srli_epi16(z, 4), _mm256_unpackhi_epi8(h, zero));
}

/* A Q8_0 block's 32 signed codes as int16. */
AVX2_INLINE void q16d_q8_0_avx2(const uint8_t *b, __m256i *w0, __m256i *w1)
{
    *w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 2)));
    *w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 18)));
}

/* sx[s] = cw_scale * s_x for a type whose cw is cw_scale * dw (a power of
 * two: Q5_0's -16), so that fmaf(dw, sx, c) is the twin's fmaf(cw, s_x,
 * c): the same exact product, rounded once, and one multiply less per
 * block.  Returns 0 unless every |s_x| is below 2^100 (the scaled term
 * then neither overflows nor meets an infinity or a NaN), where the
 * tiles take over. */
AVX2_INLINE int q16d_sx(const act_q16 *x, int64_t nsub, float cw_scale, float *sx)
{
    int ok = 1;
    for (int64_t s = 0; s < nsub; s++) {
        ok &= fabsf(x[s].s) < 0x1p100f;
        sx[s] = cw_scale * x[s].s;
    }
    return ok;
}

/* Where a type's s factor cw comes from: none (cw = 0: Q8_0), a power of
 * two times dw (Q5_0: -16, through q16d_sx), the block (Q4_1's minimum). */
#define Q16D_CW_ZERO 0
#define Q16D_CW_SCALED 1
#define Q16D_CW_BLOCK 2

/* Sub-block S of a row into the accumulator acc, and its s term cw * s_x
 * into the chain c (Q16D_CW_SCALED: as fmaf(dw, sx[S], c)). */
#define Q16D_BLOCK(NAME, BS, CWM, S, acc, c)                                                \
    {                                                                                       \
        const uint8_t *b_ = row + (S) * (BS);                                               \
        if (Q16D_PF)                                                                        \
            _mm_prefetch((const char *)b_ + Q16D_PF, _MM_HINT_T0);                          \
        __m256i w0_, w1_;                                                                   \
        q16d_##NAME##_avx2(b_, &w0_, &w1_);                                                 \
        const __m256i p_ = _mm256_add_epi32(                                                \
            _mm256_madd_epi16(w0_, _mm256_loadu_si256((const __m256i *)x[S].v)),            \
            _mm256_madd_epi16(w1_, _mm256_loadu_si256((const __m256i *)(x[S].v + 16))));    \
        float cw_ = 0.0f;                                                                   \
        const __m256 dw_ = q16d_scale_##NAME(b_, &cw_);                                     \
        const __m256 f_ = _mm256_mul_ps(dw_, _mm256_broadcast_ss(&x[S].d));                 \
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p_), f_, acc);                             \
        if (CWM == Q16D_CW_SCALED)                                                          \
            c = fmaf(_mm256_cvtss_f32(dw_), sx[S], c);                                      \
        else if (CWM == Q16D_CW_BLOCK)                                                      \
            c = fmaf(cw_, x[S].s, c);                                                       \
    }

/* The rows kernel of one activation row: y[r] for nrows weight rows;
 * returns 0 (nothing done: the caller takes the tiles) for rows of more
 * than Q16D_MAX_SUB sub-blocks or an s term that q16d_sx cannot scale
 * exactly.  CWM says where cw comes from (CWS: the power of two); a type
 * whose cw is 0 gets its s chains from the activation alone. */
#define DEFINE_Q16_DEC(NAME, BS, CWM, CWS)                                                  \
    AVX2_FN int q16dec_##NAME##_avx2(const uint8_t *w, size_t rb, int64_t nrows,           \
                                     int64_t cols, const act_q16 *x, float *y)              \
    {                                                                                       \
        const int64_t nsub = cols / 32;                                                     \
        float sx[Q16D_MAX_SUB];                                                             \
        if (nsub > Q16D_MAX_SUB || (CWM == Q16D_CW_SCALED && !q16d_sx(x, nsub, CWS, sx)))   \
            return 0;                                                                       \
        float z0 = 0.0f, z1 = 0.0f; /* the C twin's chains with cw = 0 */                   \
        if (CWM == Q16D_CW_ZERO)                                                            \
            for (int64_t s = 0; s < nsub; s++) {                                            \
                if (s & 1)                                                                  \
                    z1 = fmaf(0.0f, x[s].s, z1);                                            \
                else                                                                        \
                    z0 = fmaf(0.0f, x[s].s, z0);                                            \
            }                                                                               \
        for (int64_t r = 0; r < nrows; r++) {                                               \
            const uint8_t *row = w + r * rb;                                                \
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();                      \
            float c0 = z0, c1 = z1;                                                         \
            int64_t s = 0;                                                                  \
            for (; s + 1 < nsub; s += 2) {                                                  \
                Q16D_BLOCK(NAME, BS, CWM, s, a0, c0)                                        \
                Q16D_BLOCK(NAME, BS, CWM, s + 1, a1, c1)                                    \
            }                                                                               \
            if (s < nsub)                                                                   \
                Q16D_BLOCK(NAME, BS, CWM, s, a0, c0)                                        \
            y[r] = hsum_avx2(_mm256_add_ps(a0, a1)) + (c0 + c1);                            \
        }                                                                                   \
        return 1;                                                                           \
    }

DEFINE_Q16_DEC(q5_0, sizeof(block_q5_0), Q16D_CW_SCALED, -16.0f)
DEFINE_Q16_DEC(q8_0, sizeof(block_q8_0), Q16D_CW_ZERO, 0.0f)
DEFINE_Q16_DEC(q4_1, sizeof(block_q4_1), Q16D_CW_BLOCK, 0.0f)

#endif /* __x86_64__ */
