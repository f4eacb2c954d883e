/* dot_q8k_avx2.c: the AVX2 twins of act_q8k_quantize and of the Q4_K and
 * Q6_K kernels on Q8_K-style activations (kernels/cpu/act_q8.h; the plain
 * C twins and the order of operations, which both follow bit for bit, are
 * in dot_q8k_scalar.c).
 *
 * A tile is one weight row by C activation rows (8, then 4, 2, 1 for what
 * is left).  Per super-block the row's scales are unpacked once; each of
 * its 8 sub-blocks is decoded once into 32 byte codes and met by the C
 * activation rows' codes in one maddubs each, widened with madd by the
 * sub-block's scale (Q4_K: its 6-bit scale for all 32; Q6_K: the per-16
 * scales) and added into an int32 sum per activation row that runs over
 * the whole super-block.  Then, per activation row and super-block, one
 * convert and one FMA with d_w * d_x, and for Q4_K the minima: their
 * integer dot with the pair sums of the activation's 16-code sums, one
 * scalar FMA.  (With act_q8 / act_q16 the convert and FMA come once per
 * 32 weights.)  Per 32 weights and activation row that leaves maddubs,
 * madd and an add (Q6_K, signed codes: a sign first); the int32 sums stay
 * in registers (C of them), the float accumulators are touched once per
 * super-block.
 *
 * No maddubs pair saturates: Q4_K 2 x 15 x 127, Q6_K (|w| <= 32 through
 * the sign trick) 2 x 32 x 127.
 *
 * Every function here is compiled for AVX2/FMA/F16C and named *_avx2 (the
 * ISA rule of dot_kernels.h); they run only after fast_cpu_avx2_ok(). */
#include <math.h>

#include "kernels/cpu/act_q8.h"
#include "model/quant.h"

#if defined(__x86_64__)
#include "kernels/cpu/dot_avx2.h"

AVX2_FN void act_q8k_quantize_avx2(const float *x, int64_t cols, act_q8k *xq)
{
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    for (int64_t b = 0; b < cols / 256; b++) {
        const float *xb = x + 256 * b;
        const float amax = amax_avx2(xb, 256);
        const float d = amax / 127.0f, id = d != 0.0f ? 127.0f / amax : 0.0f;
        const __m256 idv = _mm256_set1_ps(id);
        for (int s = 0; s < 8; s++) {
            __m256i q[4];
            for (int k = 0; k < 4; k++) {
                __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + 32 * s + 8 * k), idv),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                r = _mm256_and_ps(r, _mm256_cmp_ps(r, r, _CMP_ORD_Q)); /* NaN -> 0 */
                r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
                q[k] = _mm256_cvtps_epi32(r);
            }
            /* the two 16-code sums: elements 0..15 are q[0], q[1] */
            for (int g = 0; g < 2; g++) {
                xq[b].bsums[2 * s + g] = (int16_t)hsum_epi32_avx2(_mm256_add_epi32(q[2 * g], q[2 * g + 1]));
            }
            /* 4 x 8 int32 -> 32 int8 in order (packs works per 128-bit lane) */
            const __m256i p01 = _mm256_packs_epi32(q[0], q[1]), p23 = _mm256_packs_epi32(q[2], q[3]);
            __m256i p = _mm256_packs_epi16(p01, p23);
            p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(xq[b].q + 32 * s), p);
        }
        xq[b].d = d;
        memset(xq[b].pad_, 0, sizeof xq[b].pad_);
    }
}

/* Q4_K's eight 6-bit scales (bytes 0..7) and minima (bytes 8..15), the
 * unpacking of q4_k_scale_min done on four 32-bit words at once. */
AVX2_INLINE void q4_k_unpack_avx2(const uint8_t *scales, uint8_t out[16])
{
    uint32_t u[4];
    memcpy(u, scales, 12);
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    u[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
    const uint32_t mins_lo = u[1] & k1;
    u[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
    u[2] = mins_lo;
    u[0] &= k1;
    memcpy(out, u, 16);
}

/* One weight row (row[0 .. nsb)) by C activation rows (x + t * nsb), into
 * y[t * ystride]. */
#define DEFINE_Q4K_TILE(C)                                                                  \
    AVX2_INLINE void q8kt_q4_k_##C##_avx2(const block_q4_k *row, int64_t nsb,              \
                                          const act_q8k *x, float *y, int64_t ystride)     \
    {                                                                                       \
        __m256 acc[C];                                                                      \
        float corr[C];                                                                      \
        for (int t = 0; t < C; t++) {                                                       \
            acc[t] = _mm256_setzero_ps();                                                   \
            corr[t] = 0.0f;                                                                 \
        }                                                                                   \
        for (int64_t j = 0; j < nsb; j++) {                                                 \
            const block_q4_k *b = row + j;                                                  \
            uint8_t sm[16];                                                                 \
            q4_k_unpack_avx2(b->scales, sm);                                                \
            __m256i sum[C];                                                                 \
            for (int t = 0; t < C; t++)                                                     \
                sum[t] = _mm256_setzero_si256();                                            \
            _Pragma("GCC unroll 4") for (int h = 0; h < 4; h++) {                           \
                const __m256i v = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));     \
                const __m256i m4 = _mm256_set1_epi8(0x0f);                                  \
                const __m256i w0 = _mm256_and_si256(v, m4);                                 \
                const __m256i w1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);           \
                const __m256i s0 = _mm256_set1_epi16(sm[2 * h]);                            \
                const __m256i s1 = _mm256_set1_epi16(sm[2 * h + 1]);                        \
                _Pragma("GCC unroll 8") for (int t = 0; t < C; t++) {                       \
                    const int8_t *xqq = x[t * nsb + j].q + 64 * h;                          \
                    const __m256i x0 = _mm256_loadu_si256((const __m256i *)xqq);            \
                    const __m256i x1 = _mm256_loadu_si256((const __m256i *)(xqq + 32));     \
                    sum[t] = _mm256_add_epi32(sum[t],                                       \
                        _mm256_madd_epi16(_mm256_maddubs_epi16(w0, x0), s0));               \
                    sum[t] = _mm256_add_epi32(sum[t],                                       \
                        _mm256_madd_epi16(_mm256_maddubs_epi16(w1, x1), s1));               \
                }                                                                           \
            }                                                                               \
            const float d = ld_fp16_avx2((const uint8_t *)&b->d);                           \
            const float dmin = ld_fp16_avx2((const uint8_t *)&b->dmin);                     \
            const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(sm + 8))); \
            _Pragma("GCC unroll 8") for (int t = 0; t < C; t++) {                           \
                const act_q8k *xb = x + t * nsb + j;                                        \
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[t]),                        \
                                         _mm256_set1_ps(d * xb->d), acc[t]);                \
                const __m128i bs0 = _mm_loadu_si128((const __m128i *)xb->bsums);            \
                const __m128i bs1 = _mm_loadu_si128((const __m128i *)(xb->bsums + 8));      \
                __m128i p = _mm_madd_epi16(_mm_hadd_epi16(bs0, bs1), mins);                 \
                p = _mm_add_epi32(p, _mm_shuffle_epi32(p, 0x4e));                           \
                p = _mm_add_epi32(p, _mm_shuffle_epi32(p, 0xb1));                           \
                corr[t] = fmaf((float)_mm_cvtsi128_si32(p), dmin * xb->d, corr[t]);         \
            }                                                                               \
        }                                                                                   \
        for (int t = 0; t < C; t++)                                                         \
            y[t * ystride] = hsum_avx2(acc[t]) - corr[t];                                   \
    }

#define DEFINE_Q6K_TILE(C)                                                                  \
    AVX2_INLINE void q8kt_q6_k_##C##_avx2(const block_q6_k *row, int64_t nsb,              \
                                          const act_q8k *x, float *y, int64_t ystride)     \
    {                                                                                       \
        __m256 acc[C];                                                                      \
        for (int t = 0; t < C; t++)                                                         \
            acc[t] = _mm256_setzero_ps();                                                   \
        const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);                \
        for (int64_t j = 0; j < nsb; j++) {                                                 \
            const block_q6_k *b = row + j;                                                  \
            __m256i sum[C];                                                                 \
            for (int t = 0; t < C; t++)                                                     \
                sum[t] = _mm256_setzero_si256();                                            \
            _Pragma("GCC unroll 8") for (int ib = 0; ib < 8; ib++) {                        \
                const int h = ib / 4, qd = ib % 4;                                          \
                const __m256i L = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32 * (qd & 1))); \
                const __m256i H = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));   \
                const __m256i lo = _mm256_and_si256(qd < 2 ? L : _mm256_srli_epi16(L, 4), m4); \
                const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(H, 2 * qd), m2);     \
                const __m256i w = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hb, 4)), \
                                                  _mm256_set1_epi8(32));                    \
                const __m256i wa = _mm256_sign_epi8(w, w);                                  \
                const __m256i sc = _mm256_set_m128i(_mm_set1_epi16(b->scales[2 * ib + 1]),  \
                                                    _mm_set1_epi16(b->scales[2 * ib]));     \
                _Pragma("GCC unroll 8") for (int t = 0; t < C; t++) {                       \
                    const __m256i xv = _mm256_loadu_si256((const __m256i *)(x[t * nsb + j].q + 32 * ib)); \
                    sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(                    \
                        _mm256_maddubs_epi16(wa, _mm256_sign_epi8(xv, w)), sc));            \
                }                                                                           \
            }                                                                               \
            const float d = ld_fp16_avx2((const uint8_t *)&b->d);                           \
            _Pragma("GCC unroll 8") for (int t = 0; t < C; t++)                             \
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[t]),                        \
                                         _mm256_set1_ps(d * x[t * nsb + j].d), acc[t]);     \
        }                                                                                   \
        for (int t = 0; t < C; t++)                                                         \
            y[t * ystride] = hsum_avx2(acc[t]) - 0.0f;                                      \
    }

#define DEFINE_Q8K_ROWS(NAME, BLOCK)                                                        \
    DEFINE_##BLOCK##_TILE(1)                                                                \
    DEFINE_##BLOCK##_TILE(2)                                                                \
    DEFINE_##BLOCK##_TILE(4)                                                                \
    DEFINE_##BLOCK##_TILE(8)                                                                \
    AVX2_FN static void q8krows_##NAME##_avx2(const uint8_t *w, size_t rb, int64_t nrows,   \
                                              int64_t cols, const act_q8k *x, int64_t n,    \
                                              float *y, int64_t ystride)                    \
    {                                                                                       \
        const int64_t nsb = cols / 256;                                                     \
        for (int64_t i0 = 0, nt; i0 < n; i0 += nt) {                                        \
            const int64_t left = n - i0;                                                    \
            nt = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;                        \
            const act_q8k *xt = x + i0 * nsb;                                               \
            for (int64_t r = 0; r < nrows; r++) {                                           \
                const block_##NAME *row = (const block_##NAME *)(w + r * rb);               \
                float *yr = y + i0 * ystride + r;                                           \
                switch (nt) {                                                               \
                case 8: q8kt_##NAME##_8_avx2(row, nsb, xt, yr, ystride); break;             \
                case 4: q8kt_##NAME##_4_avx2(row, nsb, xt, yr, ystride); break;             \
                case 2: q8kt_##NAME##_2_avx2(row, nsb, xt, yr, ystride); break;             \
                default: q8kt_##NAME##_1_avx2(row, nsb, xt, yr, ystride); break;            \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
    }

DEFINE_Q8K_ROWS(q4_k, Q4K)
DEFINE_Q8K_ROWS(q6_k, Q6K)

q8k_rows_fn q8k_rows_avx2(int type)
{
    switch (type) {
    case GGML_TYPE_Q4_K: return q8krows_q4_k_avx2;
    case GGML_TYPE_Q6_K: return q8krows_q6_k_avx2;
    default: return NULL;
    }
}

#else /* not x86-64 */

void act_q8k_quantize_avx2(const float *x, int64_t cols, act_q8k *xq)
{
    act_q8k_quantize(x, cols, xq);
}

q8k_rows_fn q8k_rows_avx2(int type)
{
    (void)type;
    return NULL;
}

#endif
