/* dot_q8_avx2.c: the AVX2 twins of act_q8_quantize and act_q16_quantize
 * (kernels/cpu/act_q8.h);
 * the int8-activation kernels are in dot_q8_tile_avx2.c.
 *
 * Every function here is compiled for AVX2/FMA/F16C and named *_avx2 (the
 * ISA rule of dot_kernels.h); they run only after fast_cpu_avx2_ok(). */
#include <math.h>

#include "kernels/cpu/act_q8.h"
#include "model/quant.h"

#if defined(__x86_64__)
#include "kernels/cpu/dot_avx2.h"

/* A 32-value block loaded into v, its step d = amax / 127 and the inverse
 * (0 for an all-zero block), as act_q8_quantize computes them: the int8 and
 * the 16-bit codes share it. */
static AVX2_FN void block_scale_avx2(const float *xb, __m256 v[4], float *d, float *id)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(xb + 8 * k);
        m = _mm256_max_ps(_mm256_andnot_ps(sign, v[k]), m); /* a NaN lane keeps m */
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const float amax = _mm_cvtss_f32(m4);
    *d = amax / 127.0f;
    *id = *d != 0.0f ? 127.0f / amax : 0.0f;
}

AVX2_FN void act_q8_quantize_avx2(const float *x, int64_t cols, act_q8 *xq)
{
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    for (int64_t b = 0; b < cols / 32; b++) {
        const float *xb = x + 32 * b;
        __m256 v[4];
        float d, id;
        block_scale_avx2(xb, v, &d, &id);
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
        xq[b].d = d;
        xq[b].s = d * (float)hsum_epi32_avx2(sum);
    }
}

/* act_q16_quantize's twin: the codes q as above, the remainders lo from
 * the same products t, v = 256 q + lo in int32, packed to int16. */
AVX2_FN void act_q16_quantize_avx2(const float *x, int64_t cols, act_q16 *xq)
{
    for (int64_t b = 0; b < cols / 32; b++) {
        const float *xb = x + 32 * b;
        __m256 v[4];
        float d, id;
        block_scale_avx2(xb, v, &d, &id);
        const __m256 idv = _mm256_set1_ps(id);
        __m256i q[4], sum = _mm256_setzero_si256();
        for (int k = 0; k < 4; k++) {
            q[k] = q16_codes8_avx2(_mm256_mul_ps(v[k], idv)); /* dot_avx2.h */
            sum = _mm256_add_epi32(sum, q[k]);
        }
        /* packs interleaves the 128-bit lanes of its two inputs; the
         * permute puts the four quarters back in order */
        _mm256_storeu_si256((__m256i *)xq[b].v,
                            _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xd8));
        _mm256_storeu_si256((__m256i *)(xq[b].v + 16),
                            _mm256_permute4x64_epi64(_mm256_packs_epi32(q[2], q[3]), 0xd8));
        xq[b].d = d * (1.0f / 256.0f);
        xq[b].s = xq[b].d * (float)hsum_epi32_avx2(sum);
    }
}

#else /* not x86-64 */

void act_q8_quantize_avx2(const float *x, int64_t cols, act_q8 *xq)
{
    act_q8_quantize(x, cols, xq);
}

void act_q16_quantize_avx2(const float *x, int64_t cols, act_q16 *xq)
{
    act_q16_quantize(x, cols, xq);
}

#endif
