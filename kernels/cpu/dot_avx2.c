/* dot_avx2.c: AVX2+FMA(+F16C) fused kernels (see dot_kernels.h) for Q8_0,
 * Q4_0, Q4_1, Q2_0 and IQ3_XXS, the f32 dot of the chunk fallback, and the
 * dispatch to the other families (dot_avx2_k.c, dot_avx2_iq.c).
 *
 * Every function here that uses AVX is compiled with
 * __attribute__((target(...))) and named *_avx2, and runs only after
 * fast_cpu_avx2_ok() said yes: the rest of the binary stays baseline
 * x86-64 (test/test_matvec.c disassembles the library to check).
 *
 * A 32-weight sub-block is decoded into four 8-float registers, already
 * scaled, with the reference's values where one rounding allows it (Q8_0,
 * Q4_0, Q2_0, IQ3_XXS give the same floats: (q - k) * d == fma(q, d, -k*d)
 * when k*d is exact; Q4_1's q*d + m becomes one fma).  Those registers
 * then meet up to 4 activation rows (TILE), each with two 8-lane
 * accumulators fed in a fixed order (even registers to the first, odd to
 * the second), summed at the end lane-pairwise then horizontally: the
 * same operations for an element whatever the tile size, so n changes no
 * bit.  Two accumulators, not one, so that a single row (decode) is not
 * bound by the FMA latency chain. */
#include "kernels/cpu/dot_kernels.h"
#include "model/quant.h"

#if defined(__x86_64__)
#include "kernels/cpu/dot_avx2.h"

int fast_cpu_avx2_ok(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
}

/* ---- sub-block decoders: row, sub-block index -> w[4] ------------------- */

AVX2_INLINE void dec_q8_0_avx2(const uint8_t *row, int64_t s, __m256 *w)
{
    const uint8_t *b = row + s * sizeof(block_q8_0);
    const __m256 d = _mm256_set1_ps(ld_fp16_avx2(b));
    for (int k = 0; k < 4; k++) {
        __m128i q = _mm_loadl_epi64((const __m128i *)(b + 2 + 8 * k));
        w[k] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
    }
}

/* split-half nibbles: low nibbles are weights 0..15, high ones 16..31 */
AVX2_INLINE void dec_q4_0_avx2(const uint8_t *row, int64_t s, __m256 *w)
{
    const uint8_t *b = row + s * sizeof(block_q4_0);
    const float df = ld_fp16_avx2(b);
    const __m256 d = _mm256_set1_ps(df), off = _mm256_set1_ps(-8.0f * df);
    const __m128i v = _mm_loadu_si128((const __m128i *)(b + 2));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(v, m4), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
    w[0] = _mm256_fmadd_ps(u8x8_avx2(lo), d, off);
    w[1] = _mm256_fmadd_ps(u8x8_avx2(_mm_srli_si128(lo, 8)), d, off);
    w[2] = _mm256_fmadd_ps(u8x8_avx2(hi), d, off);
    w[3] = _mm256_fmadd_ps(u8x8_avx2(_mm_srli_si128(hi, 8)), d, off);
}

AVX2_INLINE void dec_q4_1_avx2(const uint8_t *row, int64_t s, __m256 *w)
{
    const uint8_t *b = row + s * sizeof(block_q4_1);
    const __m256 d = _mm256_set1_ps(ld_fp16_avx2(b)), m = _mm256_set1_ps(ld_fp16_avx2(b + 2));
    const __m128i v = _mm_loadu_si128((const __m128i *)(b + 4));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(v, m4), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
    w[0] = _mm256_fmadd_ps(u8x8_avx2(lo), d, m);
    w[1] = _mm256_fmadd_ps(u8x8_avx2(_mm_srli_si128(lo, 8)), d, m);
    w[2] = _mm256_fmadd_ps(u8x8_avx2(hi), d, m);
    w[3] = _mm256_fmadd_ps(u8x8_avx2(_mm_srli_si128(hi, 8)), d, m);
}

/* 64 weights a block, 2 bits each, low bits first: 8 weights are one
 * 16-bit word shifted by 0, 2, ..., 14 */
AVX2_INLINE void dec_q2_0_avx2(const uint8_t *row, int64_t s, __m256 *w)
{
    const uint8_t *b = row + (s >> 1) * sizeof(block_q2_0);
    const float df = ld_fp16_avx2(b);
    const __m256 d = _mm256_set1_ps(df), off = _mm256_set1_ps(-df);
    const uint8_t *q = b + 2 + 8 * (s & 1);
    const __m256i sh = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m256i m2 = _mm256_set1_epi32(3);
    for (int k = 0; k < 4; k++) {
        const int v = q[2 * k] | q[2 * k + 1] << 8;
        __m256i c = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(v), sh), m2);
        w[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c), d, off);
    }
}

/* group ib of 32: 8 grid indices (4 magnitudes each), one u32 of 4 x 7-bit
 * sign indices and the 4-bit scale; sign applied after the scale multiply,
 * as the reference does (a sign flip is exact) */
AVX2_INLINE void dec_iq3_xxs_avx2(const uint8_t *row, int64_t s, __m256 *w)
{
    const uint8_t *b = row + (s >> 3) * sizeof(block_iq3_xxs);
    const int ib = (int)(s & 7);
    const float d = ld_fp16_avx2(b);
    const uint8_t *gidx = b + 2 + 8 * ib;
    uint32_t sw;
    memcpy(&sw, b + 2 + QK_K / 4 + 4 * ib, 4);
    const __m256 db = _mm256_set1_ps(d * (0.5f + (float)(sw >> 28)) * 0.5f);
    const __m256i bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i sbit = _mm256_set1_epi32((int)0x80000000u);
    for (int l = 0; l < 4; l++) {
        const __m128i g = _mm_setr_epi32((int)iq3xxs_grid[gidx[2 * l]],
                                         (int)iq3xxs_grid[gidx[2 * l + 1]], 0, 0);
        const __m256 mag = _mm256_mul_ps(db, u8x8_avx2(g));
        const __m256i sg = _mm256_set1_epi32(iq3xxs_signs[(sw >> (7 * l)) & 127]);
        const __m256i neg = _mm256_cmpeq_epi32(_mm256_and_si256(sg, bits), bits);
        w[l] = _mm256_xor_ps(mag, _mm256_castsi256_ps(_mm256_and_si256(neg, sbit)));
    }
}

DEFINE_ROWS(q8_0)
DEFINE_ROWS(q4_0)
DEFINE_ROWS(q4_1)
DEFINE_ROWS(q2_0)
DEFINE_ROWS(iq3_xxs)

fast_rows_fn fast_rows_vec(int type)
{
    switch (type) {
    case GGML_TYPE_Q8_0: return rows_q8_0_avx2;
    case GGML_TYPE_Q4_0: return rows_q4_0_avx2;
    case GGML_TYPE_Q4_1: return rows_q4_1_avx2;
    case GGML_TYPE_Q2_0: return rows_q2_0_avx2;
    case GGML_TYPE_IQ3_XXS: return rows_iq3_xxs_avx2;
    default: break;
    }
    fast_rows_fn f = fast_rows_vec_k(type);
    return f ? f : fast_rows_vec_iq(type);
}

AVX2_FN float fast_dot_f32_avx2(const float *a, const float *b, int64_t n)
{
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    float s = hsum_avx2(acc);
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

#else /* not x86-64: the scalar kernels only */

int fast_cpu_avx2_ok(void) { return 0; }
fast_rows_fn fast_rows_vec(int type) { (void)type; return NULL; }
fast_rows_fn fast_rows_vec_k(int type) { (void)type; return NULL; }
fast_rows_fn fast_rows_vec_iq(int type) { (void)type; return NULL; }
float fast_dot_f32_avx2(const float *a, const float *b, int64_t n)
{
    return fast_dot_f32(a, b, n);
}

#endif
