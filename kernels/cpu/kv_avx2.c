/* kv_avx2.c: AVX2 twins of what a KV store does to a token's K and V
 * (kernels/cpu/kv.c, kernels/cpu/rotate.c): the k8 and v4nl quantizers and
 * the rotation.  A decode step stores one token per layer on one thread,
 * and with the plain C twins that was a tenth of a small model's step (the
 * v4nl scale search alone: 15 candidates x 32 elements x 15 comparisons
 * per block).
 *
 * Every twin gives the plain C function's bits (test/test_kv_avx2.c):
 *  - the same IEEE operations on the same values: products, quotients and
 *    comparisons are elementwise, so doing 8 at a time changes nothing;
 *  - kv_sum32's butterfly (offsets 16, 8, 4, 2, 1) is the pairing of two
 *    8-lane adds and hsum_avx2's halves;
 *  - roundf (half away from zero) is trunc plus a step where the exact
 *    remainder reaches 1/2, not the vector round-to-even;
 *  - NaN and Inf take kv.c's paths (code 0 / 8, the NaN as 0 in the sums).
 * The scans for the largest element stay scalar: they are 32 compares, and
 * "first on ties" is easiest to keep that way (v4nl's is kv.c's own,
 * kv_block.h).
 *
 * Compiled for AVX2/FMA/F16C; run only after fast_cpu_avx2_ok(). */
#include "kernels/cpu/dot_kernels.h"
#include "kernels/ops.h"
#include "model/quant.h"

#if defined(__x86_64__)
#include "kernels/cpu/dot_avx2.h"
#include "kernels/cpu/kv_block.h"

#include <math.h>

/* ---- K: Q8_0 codes ------------------------------------------------------ */

/* roundf(v) for v = x * id, then k8_code's clamp to +-127 (NaN -> 0). */
AVX2_INLINE __m256i k8_codes_avx2(__m256 v)
{
    const __m256 sgn = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0.5f);
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_andnot_ps(sgn, _mm256_sub_ps(v, t)); /* exact */
    const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(sgn, v));
    __m256 r = _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps(frac, half, _CMP_GE_OQ), one));
    r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
    r = _mm256_and_ps(r, _mm256_cmp_ps(v, v, _CMP_ORD_Q)); /* NaN -> 0 */
    return _mm256_cvttps_epi32(r);
}

/* 32 int32 codes in four registers -> 32 bytes in element order. */
AVX2_INLINE void store_i8x32_avx2(__m256i a, __m256i b, __m256i c, __m256i d, int8_t *q)
{
    const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    const __m256i v = _mm256_packs_epi16(ab, cd); /* lanes: a0 b0 c0 d0 a1 b1 c1 d1 */
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    _mm256_storeu_si256((__m256i *)q, _mm256_permutevar8x32_epi32(v, perm));
}

AVX2_FN void cpu_quant_k8_avx2(const float *x, int n, int8_t *q, uint16_t *d)
{
    for (int b = 0; b < n / 32; b++) {
        const float *xb = x + 32 * b;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(xb[j]));
        const float db = amax / 127.0f;
        const __m256 id = _mm256_set1_ps(db != 0.0f ? 1.0f / db : 0.0f);
        __m256i c[4];
        for (int k = 0; k < 4; k++)
            c[k] = k8_codes_avx2(_mm256_mul_ps(_mm256_loadu_ps(xb + 8 * k), id));
        store_i8x32_avx2(c[0], c[1], c[2], c[3], q + 32 * b);
        d[b] = f32_to_fp16(db);
    }
}

/* ---- V: codes into the IQ4_NL levels ------------------------------------ */

/* kv_nl_code for 8 values: the number of midpoints below r (NaN -> 8). */
AVX2_INLINE __m256i nl_codes_avx2(__m256 r)
{
    static const float mid[15] = {
        -115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
        7.0f, 19.0f, 31.5f, 45.5f, 61.0f, 79.0f, 101.0f,
    };
    __m256i c = _mm256_setzero_si256();
    for (int i = 0; i < 15; i++) /* a true compare is -1 */
        c = _mm256_sub_epi32(c, _mm256_castps_si256(
                                    _mm256_cmp_ps(r, _mm256_set1_ps(mid[i]), _CMP_GT_OQ)));
    const __m256 nan = _mm256_cmp_ps(r, r, _CMP_UNORD_Q);
    return _mm256_blendv_epi8(c, _mm256_set1_epi32(8), _mm256_castps_si256(nan));
}

/* iq4nl_values[c] as floats, c in 0..15. */
AVX2_INLINE __m256 nl_levels_avx2(__m256i c, __m256 lo, __m256 hi)
{
    const __m256 l = _mm256_permutevar8x32_ps(lo, c), h = _mm256_permutevar8x32_ps(hi, c);
    return _mm256_blendv_ps(l, h, _mm256_castsi256_ps(_mm256_slli_epi32(c, 28)));
}

/* One candidate scale: sqx = kv_sum32(l x) (NaN elements as 0) and sqq =
 * sum l^2 (exact in float: at most 32 x 127^2 < 2^24). */
AVX2_INLINE float nl_candidate_avx2(const __m256 *xv, __m256 id, __m256 lo, __m256 hi, float *sqq)
{
    __m256 px[4], ll = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        const __m256 l = nl_levels_avx2(nl_codes_avx2(_mm256_mul_ps(xv[k], id)), lo, hi);
        const __m256 ok = _mm256_cmp_ps(xv[k], xv[k], _CMP_ORD_Q);
        px[k] = _mm256_and_ps(_mm256_mul_ps(l, xv[k]), ok);
        ll = _mm256_fmadd_ps(l, l, ll); /* exact: integers below 2^24 */
    }
    *sqq = hsum_avx2(ll);
    /* kv_sum32: offset 16, then 8, then hsum_avx2's 4, 2, 1 */
    return hsum_avx2(_mm256_add_ps(_mm256_add_ps(px[0], px[2]), _mm256_add_ps(px[1], px[3])));
}

AVX2_FN void cpu_quant_v4nl_avx2(const float *x, int n, uint8_t *q, uint16_t *d)
{
    float lv[16];
    for (int i = 0; i < 16; i++)
        lv[i] = (float)iq4nl_values[i];
    const __m256 lo = _mm256_loadu_ps(lv), hi = _mm256_loadu_ps(lv + 8);
    for (int b = 0; b < n / 32; b++) {
        const float *xb = x + 32 * b;
        float amax;
        const float mx = kv_block_extreme(xb, 32, &amax); /* kv.c's scan, the same code */
        __m256 xv[4];
        for (int k = 0; k < 4; k++)
            xv[k] = _mm256_loadu_ps(xb + 8 * k);
        float best = -1.0f, db = 0.0f;
        if (amax > 0.0f && amax <= 3.0e38f) {
            for (int t = -7; t <= 7; t++) {
                float sqq;
                const float id = (float)(t - 127) / mx;
                const float sqx = nl_candidate_avx2(xv, _mm256_set1_ps(id), lo, hi, &sqq);
                const float dt = sqx / sqq, score = dt * sqx;
                if (score > best) {
                    best = score;
                    db = dt;
                }
            }
        }
        d[b] = kv_nl_scale(f32_to_fp16(db));
        const float ds = fp16_to_f32(d[b]);
        const __m256 id = _mm256_set1_ps(ds != 0.0f ? 1.0f / ds : 0.0f);
        __m256i c[4];
        for (int k = 0; k < 4; k++)
            c[k] = nl_codes_avx2(_mm256_mul_ps(xv[k], id));
        /* byte j: element j's code low, element j + 16's high */
        const __m256i b0 = _mm256_or_si256(c[0], _mm256_slli_epi32(c[2], 4));
        const __m256i b1 = _mm256_or_si256(c[1], _mm256_slli_epi32(c[3], 4));
        const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(b0, b1), 0xD8);
        const __m128i bytes = _mm_packus_epi16(_mm256_castsi256_si128(w),
                                               _mm256_extracti128_si256(w, 1));
        _mm_storeu_si128((__m128i *)(q + 16 * b), bytes);
    }
}

/* ---- the rotation ------------------------------------------------------- */

/* Sign flips of a head vector by kv_rot_sign_word's bits: exact. */
AVX2_INLINE void flip_signs_avx2(float *x, int d)
{
    for (int w = 0; w < (d + 63) / 64; w++) {
        const uint64_t bits = kv_rot_sign_word(w);
        for (int k = 0; k < 8 && 64 * w + 8 * k < d; k++) {
            float *p = x + 64 * w + 8 * k;
            _mm256_storeu_ps(p, apply_signs_avx2(_mm256_loadu_ps(p), (unsigned)(bits >> (8 * k)) & 255));
        }
    }
}

/* One butterfly stage of length len < 8 inside each register: lanes with
 * bit `len` clear get a + b, the others a - b (a the lower partner). */
AVX2_INLINE __m256 fwht_in_lane_avx2(__m256 v, __m256 p, int upper_mask)
{
    const __m256 sum = _mm256_add_ps(v, p), dif = _mm256_sub_ps(p, v);
    switch (upper_mask) {
    case 0xAA: return _mm256_blend_ps(sum, dif, 0xAA);
    case 0xCC: return _mm256_blend_ps(sum, dif, 0xCC);
    default: return _mm256_blend_ps(sum, dif, 0xF0);
    }
}

/* fwht (rotate.c) with the same adds and subtracts, stage by stage. */
AVX2_INLINE void fwht_avx2(float *x, int d)
{
    for (int j = 0; j < d; j += 8) {
        __m256 v = _mm256_loadu_ps(x + j);
        v = fwht_in_lane_avx2(v, _mm256_permute_ps(v, 0xB1), 0xAA);            /* len 1 */
        v = fwht_in_lane_avx2(v, _mm256_permute_ps(v, 0x4E), 0xCC);            /* len 2 */
        v = fwht_in_lane_avx2(v, _mm256_permute2f128_ps(v, v, 0x01), 0xF0);    /* len 4 */
        _mm256_storeu_ps(x + j, v);
    }
    for (int len = 8; len < d; len <<= 1)
        for (int j0 = 0; j0 < d; j0 += 2 * len)
            for (int j = j0; j < j0 + len; j += 8) {
                const __m256 a = _mm256_loadu_ps(x + j), b = _mm256_loadu_ps(x + j + len);
                _mm256_storeu_ps(x + j, _mm256_add_ps(a, b));
                _mm256_storeu_ps(x + j + len, _mm256_sub_ps(a, b));
            }
}

AVX2_INLINE void scale_avx2(float *x, int d, float sc)
{
    const __m256 s = _mm256_set1_ps(sc);
    for (int j = 0; j < d; j += 8)
        _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), s));
}

AVX2_FN void cpu_kv_rotate_avx2(float *x, int n_heads, int head_dim)
{
    const float sc = kv_rot_scale(head_dim);
    for (int h = 0; h < n_heads; h++) {
        float *xh = x + (size_t)h * head_dim;
        flip_signs_avx2(xh, head_dim);
        fwht_avx2(xh, head_dim);
        scale_avx2(xh, head_dim, sc);
    }
}

AVX2_FN void cpu_kv_unrotate_avx2(float *x, int n_heads, int head_dim)
{
    const float sc = kv_rot_scale(head_dim);
    for (int h = 0; h < n_heads; h++) {
        float *xh = x + (size_t)h * head_dim;
        fwht_avx2(xh, head_dim);
        scale_avx2(xh, head_dim, sc);
        flip_signs_avx2(xh, head_dim);
    }
}

#else /* not x86-64: the plain C twins */

void cpu_quant_k8_avx2(const float *x, int n, int8_t *q, uint16_t *d) { cpu_quant_k8(x, n, q, d); }
void cpu_quant_v4nl_avx2(const float *x, int n, uint8_t *q, uint16_t *d)
{
    cpu_quant_v4nl(x, n, q, d);
}
void cpu_kv_rotate_avx2(float *x, int n_heads, int head_dim) { cpu_kv_rotate_c(x, n_heads, head_dim); }
void cpu_kv_unrotate_avx2(float *x, int n_heads, int head_dim)
{
    cpu_kv_unrotate_c(x, n_heads, head_dim);
}

#endif
