/* dot_q8_avx2.c: the AVX2 twins of dot_q8_scalar.c (kernels/cpu/act_q8.h):
 * the activation quantizer and the int8-activation kernels.
 *
 * A 32-weight sub-block is unpacked into one register of 32 bytes: codes
 * 0..31 for the unsigned types (Q4_0, Q4_1, Q5_0, Q4_K), which meet the
 * activation codes in one maddubs (u8 x s8 -> pairs summed into s16), and
 * signed codes for Q8_0 and Q6_K, which go through the sign trick
 * (maddubs(|w|, sign(x, w))).  A madd with ones (or with Q6_K's two
 * 16-element scales) widens to eight int32 partial dots, exact, which are
 * converted and multiply-added with the block's float factor: one convert
 * and one FMA per 32 weights.  The s terms (minima and offsets) are summed
 * apart in a scalar, as the scalar twin does.  No sum can overflow: a pair
 * is at most 2 * 128 * 127 = 32512.
 *
 * Every function here is compiled for AVX2/FMA/F16C and named *_avx2 (the
 * ISA rule of dot_kernels.h); they run only after fast_cpu_avx2_ok(). */
#include <math.h>

#include "kernels/cpu/act_q8.h"
#include "model/quant.h"

#if defined(__x86_64__)
#include "kernels/cpu/dot_avx2.h"

AVX2_FN void act_q8_quantize_avx2(const float *x, int64_t cols, act_q8 *xq)
{
    const __m256 sign = _mm256_set1_ps(-0.0f), lo = _mm256_set1_ps(-127.0f),
                 hi = _mm256_set1_ps(127.0f);
    for (int64_t b = 0; b < cols / 32; b++) {
        const float *xb = x + 32 * b;
        __m256 v[4], m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(xb + 8 * k);
            m = _mm256_max_ps(_mm256_andnot_ps(sign, v[k]), m); /* a NaN lane keeps m */
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        const float amax = _mm_cvtss_f32(m4);
        const float d = amax / 127.0f, id = d != 0.0f ? 127.0f / amax : 0.0f;
        const __m256 idv = _mm256_set1_ps(id);
        __m256i q[4], sum = _mm256_setzero_si256();
        for (int k = 0; k < 4; k++) {
            __m256 r = _mm256_round_ps(_mm256_mul_ps(v[k], idv),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            r = _mm256_and_ps(r, _mm256_cmp_ps(r, r, _CMP_ORD_Q)); /* NaN -> 0 */
            r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
            q[k] = _mm256_cvtps_epi32(r);
            sum = _mm256_add_epi32(sum, q[k]);
        }
        /* 4 x 8 int32 -> 32 int8 in order: packs work per 128-bit lane,
         * the permute puts the lanes back */
        const __m256i p01 = _mm256_packs_epi32(q[0], q[1]), p23 = _mm256_packs_epi32(q[2], q[3]);
        __m256i p = _mm256_packs_epi16(p01, p23);
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)xq[b].q, p);
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        xq[b].d = d;
        xq[b].s = d * (float)_mm_cvtsi128_si32(s4);
    }
}

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

AVX2_INLINE void prep_q4_k_avx2(const uint8_t *blk, q8_prep *p)
{
    const block_q4_k *b = (const block_q4_k *)blk;
    const float d = ld_fp16_avx2((const uint8_t *)&b->d);
    const float dmin = ld_fp16_avx2((const uint8_t *)&b->dmin);
    for (int ib = 0; ib < 8; ib++) {
        int sc, mn;
        q4_k_scale_min(ib, b->scales, &sc, &mn);
        p->dw[ib] = d * (float)sc;
        p->cw[ib] = -dmin * (float)mn;
        p->mul[ib] = ONES16;
    }
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

/* ---- one weight row against T quantized activation rows ----------------- */

/* Two accumulators per activation row (even and odd sub-blocks) so that a
 * single row, a decode step, is not bound by the FMA latency chain; the
 * same for every T, so the tile size changes no bit. */
#define DEFINE_Q8_TILE(NAME, SIGNED, T)                                                     \
    AVX2_INLINE void q8tile_##NAME##_##T##_avx2(const uint8_t *row, int64_t nsub,           \
                                                const act_q8 *x, float *y, int64_t ystride) \
    {                                                                                       \
        __m256 acc[2][T];                                                                   \
        float corr[2][T];                                                                   \
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {                               \
            acc[0][t] = acc[1][t] = _mm256_setzero_ps();                                    \
            corr[0][t] = corr[1][t] = 0.0f;                                                 \
        }                                                                                   \
        int64_t s = 0;                                                                      \
        for (; s + 1 < nsub; s += 2) {                                                      \
            Q8_STEP(NAME, SIGNED, T, 0)                                                     \
            Q8_STEP(NAME, SIGNED, T, 1)                                                     \
        }                                                                                   \
        if (s < nsub) {                                                                     \
            Q8_STEP(NAME, SIGNED, T, 0)                                                     \
        }                                                                                   \
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++)                                 \
            y[t * ystride] = hsum_avx2(_mm256_add_ps(acc[0][t], acc[1][t])) +               \
                             (corr[0][t] + corr[1][t]);                                     \
    }

/* sub-block s + K into accumulator set K */
#define Q8_STEP(NAME, SIGNED, T, K)                                                         \
    {                                                                                       \
        __m256i w, mul;                                                                     \
        float dw, cw;                                                                       \
        dq8_##NAME##_avx2(row, s + K, &w, &mul, &dw, &cw);                                  \
        const __m256i wa = SIGNED ? _mm256_sign_epi8(w, w) : w;                             \
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {                               \
            const act_q8 *xb = x + t * nsub + s + K;                                        \
            __m256i xv = _mm256_loadu_si256((const __m256i *)xb->q);                        \
            if (SIGNED)                                                                     \
                xv = _mm256_sign_epi8(xv, w);                                               \
            const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(wa, xv), mul);         \
            acc[K][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * xb->d),  \
                                        acc[K][t]);                                         \
            corr[K][t] += cw * xb->s;                                                       \
        }                                                                                   \
    }

/* The super-block tile: the same accumulators (sub-block parity) and the
 * same per-block operations as DEFINE_Q8_TILE. */
#define DEFINE_Q8_TILE_SB(NAME, BYTES, SIGNED, T)                                           \
    AVX2_INLINE void q8tile_##NAME##_##T##_avx2(const uint8_t *row, int64_t nsub,           \
                                                const act_q8 *x, float *y, int64_t ystride) \
    {                                                                                       \
        __m256 acc[2][T];                                                                   \
        float corr[2][T];                                                                   \
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {                               \
            acc[0][t] = acc[1][t] = _mm256_setzero_ps();                                    \
            corr[0][t] = corr[1][t] = 0.0f;                                                 \
        }                                                                                   \
        for (int64_t sb = 0; sb < nsub / 8; sb++) {                                         \
            const uint8_t *blk = row + sb * BYTES;                                          \
            q8_prep pp;                                                                     \
            prep_##NAME##_avx2(blk, &pp);                                                   \
            _Pragma("GCC unroll 8") for (int ib = 0; ib < 8; ib++) {                        \
                const __m256i w = sub_##NAME##_avx2(blk, ib);                               \
                const __m256i wa = SIGNED ? _mm256_sign_epi8(w, w) : w;                     \
                _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {                       \
                    const act_q8 *xb = x + t * nsub + 8 * sb + ib;                          \
                    __m256i xv = _mm256_loadu_si256((const __m256i *)xb->q);                \
                    if (SIGNED)                                                             \
                        xv = _mm256_sign_epi8(xv, w);                                       \
                    const __m256i p =                                                       \
                        _mm256_madd_epi16(_mm256_maddubs_epi16(wa, xv), pp.mul[ib]);        \
                    acc[ib & 1][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p),                 \
                                                     _mm256_set1_ps(pp.dw[ib] * xb->d),     \
                                                     acc[ib & 1][t]);                       \
                    corr[ib & 1][t] += pp.cw[ib] * xb->s;                                   \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
        _Pragma("GCC unroll 4") for (int t = 0; t < T; t++)                                 \
            y[t * ystride] = hsum_avx2(_mm256_add_ps(acc[0][t], acc[1][t])) +               \
                             (corr[0][t] + corr[1][t]);                                     \
    }

#define DEFINE_Q8_ROWS(NAME, SIGNED)                                                        \
    DEFINE_Q8_TILE(NAME, SIGNED, 1)                                                         \
    DEFINE_Q8_TILE(NAME, SIGNED, 2)                                                         \
    DEFINE_Q8_TILE(NAME, SIGNED, 3)                                                         \
    DEFINE_Q8_TILE(NAME, SIGNED, 4)                                                         \
    DEFINE_Q8_ROWS_LOOP(NAME)

#define DEFINE_Q8_ROWS_SB(NAME, BYTES, SIGNED)                                              \
    DEFINE_Q8_TILE_SB(NAME, BYTES, SIGNED, 1)                                               \
    DEFINE_Q8_TILE_SB(NAME, BYTES, SIGNED, 2)                                               \
    DEFINE_Q8_TILE_SB(NAME, BYTES, SIGNED, 3)                                               \
    DEFINE_Q8_TILE_SB(NAME, BYTES, SIGNED, 4)                                               \
    DEFINE_Q8_ROWS_LOOP(NAME)

#define DEFINE_Q8_ROWS_LOOP(NAME)                                                           \
    AVX2_FN static void q8rows_##NAME##_avx2(const uint8_t *w, size_t row_bytes,            \
                                             int64_t nrows, int64_t cols, const act_q8 *x,  \
                                             int64_t n, float *y, int64_t ystride)          \
    {                                                                                       \
        const int64_t nsub = cols / 32;                                                     \
        for (int64_t i0 = 0; i0 < n; i0 += TILE) {                                          \
            const int64_t nt = n - i0 < TILE ? n - i0 : TILE;                               \
            const act_q8 *xt = x + i0 * nsub;                                               \
            float *yt = y + i0 * ystride;                                                   \
            for (int64_t r = 0; r < nrows; r++) {                                           \
                const uint8_t *row = w + r * row_bytes;                                     \
                switch (nt) {                                                               \
                case 4: q8tile_##NAME##_4_avx2(row, nsub, xt, yt + r, ystride); break;      \
                case 3: q8tile_##NAME##_3_avx2(row, nsub, xt, yt + r, ystride); break;      \
                case 2: q8tile_##NAME##_2_avx2(row, nsub, xt, yt + r, ystride); break;      \
                default: q8tile_##NAME##_1_avx2(row, nsub, xt, yt + r, ystride); break;     \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
    }

DEFINE_Q8_ROWS(q4_0, 0)
DEFINE_Q8_ROWS(q4_1, 0)
DEFINE_Q8_ROWS(q5_0, 0)
DEFINE_Q8_ROWS(q8_0, 1)
DEFINE_Q8_ROWS_SB(q4_k, sizeof(block_q4_k), 0)
DEFINE_Q8_ROWS_SB(q6_k, sizeof(block_q6_k), 1)

q8_rows_fn q8_rows_avx2(int type)
{
    switch (type) {
    case GGML_TYPE_Q4_0: return q8rows_q4_0_avx2;
    case GGML_TYPE_Q4_1: return q8rows_q4_1_avx2;
    case GGML_TYPE_Q5_0: return q8rows_q5_0_avx2;
    case GGML_TYPE_Q8_0: return q8rows_q8_0_avx2;
    case GGML_TYPE_Q4_K: return q8rows_q4_k_avx2;
    case GGML_TYPE_Q6_K: return q8rows_q6_k_avx2;
    default: return NULL;
    }
}

#else /* not x86-64 */

void act_q8_quantize_avx2(const float *x, int64_t cols, act_q8 *xq)
{
    act_q8_quantize(x, cols, xq);
}
q8_rows_fn q8_rows_avx2(int type) { (void)type; return NULL; }

#endif
