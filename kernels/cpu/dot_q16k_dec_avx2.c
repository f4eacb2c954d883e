/* dot_q16k_dec_avx2.c: the 16-bit-code kernels (act_q8.h) for one
 * activation row (a decode step) of Q4_K and Q6_K weights, on AVX2; the
 * 256-weight twins of dot_q16_dec_avx2.c, with its bits rule: per output
 * element the operations of the tiles' 1 x 1 case (dot_q8_tile_avx2.c)
 * and of the plain C twin (dot_q8_scalar.c), in the same order.
 *
 * What they save per 32-weight sub-block against the tiles:
 *  - the codes go straight to int16 words: 16 bytes zero-extended
 *    (vpmovzxbw) give a Q4_K pair of sub-blocks (low nibbles: the even
 *    one, high nibbles: the odd one) with one and or one shift each, and
 *    Q6_K's low and high bits (loaded once for the 4 sub-blocks that
 *    share them) with an and or shift, an and, an or and the -32; no
 *    byte unpack, no lane-crossing widen;
 *  - the factors dw * d_x of a super-block's 8 sub-blocks are one vector
 *    multiply (the activation scales copied side by side once per call;
 *    Q4_K's dw = d * sc and cw = -dmin * mn one vector multiply each, the
 *    same roundings as the scalar ones, its 6-bit scales unpacked with a
 *    few 32-bit word operations instead of eight calls of
 *    q4_k_scale_min);
 *  - Q6_K's per-16 scales are sign-extended once per super-block and
 *    broadcast from memory (the tiles permute a register per sub-block);
 *    its s terms (cw = 0) are the activation's alone, run once per call.
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

/* Prefetch distance (bytes), as in dot_q16_dec_avx2.c. */
#define Q16DK_PF 2048
/* Sub-blocks whose activation scales a call copies to the stack (8 KiB):
 * rows of up to 32768 columns; longer ones go to the tiles. */
#define Q16DK_MAX_SUB 1024

/* What both kernels do first: 0 for rows they do not take (the tiles do
 * them); else 1, the row's sub-blocks in *nsub and d and s of the
 * activation blocks side by side in xd and xs (Q16DK_MAX_SUB each). */
AVX2_INLINE int q16dk_begin(const act_q16 *x, int64_t cols, int64_t *nsub, float *xd, float *xs)
{
    *nsub = cols / 32;
    if (*nsub > Q16DK_MAX_SUB || cols % 256)
        return 0;
    for (int64_t s = 0; s < *nsub; s++) {
        xd[s] = x[s].d;
        xs[s] = x[s].s;
    }
    return 1;
}

/* Sub-block S of the row (codes w0: elements 0..15, w1: 16..31) into acc
 * with the factor f. */
AVX2_INLINE __m256 q16dk_dot(__m256i w0, __m256i w1, const act_q16 *xs, float f, __m256 acc)
{
    const __m256i p = _mm256_add_epi32(
        _mm256_madd_epi16(w0, _mm256_loadu_si256((const __m256i *)xs->v)),
        _mm256_madd_epi16(w1, _mm256_loadu_si256((const __m256i *)(xs->v + 16))));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(f), acc);
}

AVX2_INLINE __m256i q16dk_zx(const uint8_t *p)
{
    return _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p));
}

/* One Q4_K super-block (sub-blocks s0 .. s0 + 7 of the row). */
AVX2_INLINE void q16dk_q4_k_sb(const block_q4_k *b, const act_q16 *x, const float *xd,
                               const float *xs, int64_t s0, __m256 *a0, __m256 *a1, float *c0,
                               float *c1)
{
    __m256i sc, mn;
    q4_k_scales_avx2(b->scales, &sc, &mn); /* dot_q8_avx2.h */
    const float d = ld_fp16_avx2((const uint8_t *)&b->d);
    const float dmin = ld_fp16_avx2((const uint8_t *)&b->dmin);
    const __m256 dw = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sc));
    float f[8], cw[8];
    _mm256_storeu_ps(f, _mm256_mul_ps(dw, _mm256_loadu_ps(xd + s0)));
    _mm256_storeu_ps(cw, _mm256_mul_ps(_mm256_set1_ps(-dmin), _mm256_cvtepi32_ps(mn)));
    const __m256i m4 = _mm256_set1_epi16(15);
    for (int j = 0; j < 4; j++) {
        const __m256i z0 = q16dk_zx(b->qs + 32 * j), z1 = q16dk_zx(b->qs + 32 * j + 16);
        const int64_t s = s0 + 2 * j;
        *a0 = q16dk_dot(_mm256_and_si256(z0, m4), _mm256_and_si256(z1, m4), x + s, f[2 * j], *a0);
        *c0 = fmaf(cw[2 * j], xs[s], *c0);
        *a1 = q16dk_dot(_mm256_srli_epi16(z0, 4), _mm256_srli_epi16(z1, 4), x + s + 1, f[2 * j + 1], *a1);
        *c1 = fmaf(cw[2 * j + 1], xs[s + 1], *c1);
    }
}

/* One Q6_K super-block (sub-blocks s0 .. s0 + 7 of the row); its s terms
 * are the caller's (cw = 0). */
AVX2_INLINE void q16dk_q6_k_sb(const block_q6_k *b, const act_q16 *x, const float *xd,
                               int64_t s0, __m256 *a0, __m256 *a1)
{
    const float d = ld_fp16_avx2((const uint8_t *)&b->d);
    float f[8];
    _mm256_storeu_ps(f, _mm256_mul_ps(_mm256_set1_ps(d), _mm256_loadu_ps(xd + s0)));
    int16_t sc[16];
    _mm256_storeu_si256((__m256i *)sc, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales)));
    for (int h = 0; h < 2; h++) {
        const __m256i zh0 = q16dk_zx(b->qh + 32 * h), zh1 = q16dk_zx(b->qh + 32 * h + 16);
        const __m256i za0 = q16dk_zx(b->ql + 64 * h), za1 = q16dk_zx(b->ql + 64 * h + 16);
        const __m256i zb0 = q16dk_zx(b->ql + 64 * h + 32), zb1 = q16dk_zx(b->ql + 64 * h + 48);
        for (int qd = 0; qd < 4; qd++) {
            const int ib = 4 * h + qd;
            const __m256i zl0 = qd & 1 ? zb0 : za0, zl1 = qd & 1 ? zb1 : za1;
            const __m256i w0 = q6_k_w16_avx2(zl0, zh0, qd, sc[2 * ib]);
            const __m256i w1 = q6_k_w16_avx2(zl1, zh1, qd, sc[2 * ib + 1]);
            if (ib & 1)
                *a1 = q16dk_dot(w0, w1, x + s0 + ib, f[ib], *a1);
            else
                *a0 = q16dk_dot(w0, w1, x + s0 + ib, f[ib], *a0);
        }
    }
}

static inline void q16dk_prefetch(const uint8_t *p, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += 64)
        _mm_prefetch((const char *)p + Q16DK_PF + o, _MM_HINT_T0);
}

AVX2_FN int q16dec_q4_k_avx2(const uint8_t *w, size_t rb, int64_t nrows, int64_t cols,
                             const act_q16 *x, float *y)
{
    int64_t nsub;
    float xd[Q16DK_MAX_SUB], xs[Q16DK_MAX_SUB];
    if (!q16dk_begin(x, cols, &nsub, xd, xs))
        return 0;
    for (int64_t r = 0; r < nrows; r++) {
        const block_q4_k *b = (const block_q4_k *)(w + r * rb);
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        float c0 = 0.0f, c1 = 0.0f;
        for (int64_t sb = 0; sb < nsub / 8; sb++) {
            q16dk_prefetch((const uint8_t *)(b + sb), sizeof *b);
            q16dk_q4_k_sb(b + sb, x, xd, xs, 8 * sb, &a0, &a1, &c0, &c1);
        }
        y[r] = hsum_avx2(_mm256_add_ps(a0, a1)) + (c0 + c1);
    }
    return 1;
}

AVX2_FN int q16dec_q6_k_avx2(const uint8_t *w, size_t rb, int64_t nrows, int64_t cols,
                             const act_q16 *x, float *y)
{
    int64_t nsub;
    float xd[Q16DK_MAX_SUB], xs[Q16DK_MAX_SUB];
    if (!q16dk_begin(x, cols, &nsub, xd, xs))
        return 0;
    float z0 = 0.0f, z1 = 0.0f; /* the C twin's s chains: cw = 0 for every row */
    for (int64_t s = 0; s < nsub; s++) {
        if (s & 1)
            z1 = fmaf(0.0f, xs[s], z1);
        else
            z0 = fmaf(0.0f, xs[s], z0);
    }
    for (int64_t r = 0; r < nrows; r++) {
        const block_q6_k *b = (const block_q6_k *)(w + r * rb);
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        for (int64_t sb = 0; sb < nsub / 8; sb++) {
            q16dk_prefetch((const uint8_t *)(b + sb), sizeof *b);
            q16dk_q6_k_sb(b + sb, x, xd, 8 * sb, &a0, &a1);
        }
        y[r] = hsum_avx2(_mm256_add_ps(a0, a1)) + (z0 + z1);
    }
    return 1;
}

#endif /* __x86_64__ */
