/* dot_q16k_avx2.c: the AVX2 twins of act_q16k_quantize and of the Q4_K and
 * Q6_K kernels on act_q16k (kernels/cpu/act_q8.h; the plain C twins and
 * the order of operations, which both follow bit for bit, are in
 * dot_q16k_scalar.c).
 *
 * A tile is one weight row by C activation rows (8, then 4, 2, 1 for what
 * is left).  Per super-block the row's scales are unpacked once and its
 * sub-blocks widened once to int16 codes times their integer scales
 * (vpmovzxbw, and / shift, one vpmullw per 16 weights): Q4_K a pair of
 * sub-blocks at a time, met by each activation row in turn and added into
 * an int32 sum per row that runs over the super-block; Q6_K the four
 * sub-blocks of a half at a time (8 registers), each activation row
 * summing them in one chain.  Each sub-block meets a row's codes in two
 * madd.  Then, per activation row, one convert and one FMA with d_w * d_x
 * (Q6_K: per half), and for Q4_K the minima: their integer dot with the
 * activation's 32-code sums, one scalar FMA.  Per 32 weights and
 * activation row that leaves two madd (memory operands) and two adds; the
 * act_q16 tiles add a convert, a broadcast and an FMA.
 *
 * A tile runs over the whole row: a tile of 8 activation rows of 4864
 * columns reads 87 KiB of codes from L2 per weight row, and cutting the
 * columns into chunks whose codes stay in L1 (2, 4 or 8 super-blocks,
 * 16 weight rows per pass) measured no faster on Zen 3 (doc/cpu.md).
 *
 * Every function here is compiled for AVX2/FMA/F16C and named *_avx2 (the
 * ISA rule of dot_kernels.h); they run only after fast_cpu_avx2_ok(). */
#include <math.h>
#include <string.h>

#include "kernels/cpu/act_q8.h"
#include "model/quant.h"

#if defined(__x86_64__)
#include "kernels/cpu/dot_avx2.h"
#include "kernels/cpu/dot_q8_avx2.h"

#define Q16K_PF 2048  /* prefetch distance (bytes) with one activation row */

AVX2_FN void act_q16k_quantize_avx2(const float *x, int64_t cols, act_q16k *xq)
{
    for (int64_t b = 0; b < cols / 256; b++) {
        const float *xb = x + 256 * b;
        const float amax = amax_avx2(xb, 256);
        const float d8 = amax / 127.0f, id = d8 != 0.0f ? 127.0f / amax : 0.0f;
        const __m256 idv = _mm256_set1_ps(id);
        for (int s = 0; s < 8; s++) {
            __m256i q[4];
            for (int k = 0; k < 4; k++)
                q[k] = q16_codes8_avx2(_mm256_mul_ps(_mm256_loadu_ps(xb + 32 * s + 8 * k), idv));
            xq[b].bsums[s] = hsum_epi32_avx2(
                _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
            /* packs interleaves the 128-bit lanes of its two inputs; the
             * permute puts the four quarters back in order */
            _mm256_storeu_si256((__m256i *)(xq[b].v + 32 * s),
                                _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xd8));
            _mm256_storeu_si256((__m256i *)(xq[b].v + 32 * s + 16),
                                _mm256_permute4x64_epi64(_mm256_packs_epi32(q[2], q[3]), 0xd8));
        }
        xq[b].d = d8 * (1.0f / 256.0f);
        memset(xq[b].pad_, 0, sizeof xq[b].pad_);
    }
}

/* One output element's sums. */
typedef struct q16k_acc {
    __m256 a;   /* the eight float lanes */
    float corr; /* Q4_K's minima */
} q16k_acc;

AVX2_INLINE __m256i q16k_zx(const uint8_t *p)
{
    return _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p));
}

/* Codes 0..15 (w0) and 16..31 (w1) of a sub-block against activation
 * codes v, added into the int32 sum. */
AVX2_INLINE __m256i q16k_dot(__m256i w0, __m256i w1, const int16_t *v, __m256i sum)
{
    const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(w0, _mm256_loadu_si256((const __m256i *)v)),
                                       _mm256_madd_epi16(w1, _mm256_loadu_si256((const __m256i *)(v + 16))));
    return _mm256_add_epi32(sum, p);
}

/* A Q4_K row of nsb super-blocks by C activation rows (x + t * nsb), into
 * st[t]. */
AVX2_INLINE void q16kt_q4_k(const block_q4_k *row, const act_q16k *x, int64_t nsb, q16k_acc *st,
                            const int C)
{
    const __m256i m4 = _mm256_set1_epi16(15);
    for (int64_t j = 0; j < nsb; j++) {
        const block_q4_k *b = row + j;
        if (C == 1)
            for (int o = 0; o < (int)sizeof *b; o += 64)
                _mm_prefetch((const char *)b + Q16K_PF + o, _MM_HINT_T0);
        __m256i scv, mnv;
        q4_k_scales_avx2(b->scales, &scv, &mnv); /* dot_q8_avx2.h */
        int32_t sc[8];
        _mm256_storeu_si256((__m256i *)sc, scv);
        __m256i sum[8];
        for (int t = 0; t < C; t++)
            sum[t] = _mm256_setzero_si256();
        /* not unrolled: GCC then hoists every madd and spills the sums */
#pragma GCC unroll 1
        for (int h = 0; h < 4; h++) {
            const __m256i z0 = q16k_zx(b->qs + 32 * h), z1 = q16k_zx(b->qs + 32 * h + 16);
            const __m256i s0 = _mm256_set1_epi16((int16_t)sc[2 * h]);
            const __m256i s1 = _mm256_set1_epi16((int16_t)sc[2 * h + 1]);
            const __m256i a0 = _mm256_mullo_epi16(_mm256_and_si256(z0, m4), s0);
            const __m256i a1 = _mm256_mullo_epi16(_mm256_and_si256(z1, m4), s0);
            const __m256i b0 = _mm256_mullo_epi16(_mm256_srli_epi16(z0, 4), s1);
            const __m256i b1 = _mm256_mullo_epi16(_mm256_srli_epi16(z1, 4), s1);
#pragma GCC unroll 8
            for (int t = 0; t < C; t++) {
                const int16_t *v = x[t * nsb + j].v + 64 * h;
                sum[t] = q16k_dot(b0, b1, v + 32, q16k_dot(a0, a1, v, sum[t]));
            }
        }
        const float d = ld_fp16_avx2((const uint8_t *)&b->d);
        const float dmin = ld_fp16_avx2((const uint8_t *)&b->dmin);
#pragma GCC unroll 8
        for (int t = 0; t < C; t++) {
            const act_q16k *xb = x + t * nsb + j;
            st[t].a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[t]), _mm256_set1_ps(d * xb->d), st[t].a);
            const int32_t m = hsum_epi32_avx2(
                _mm256_mullo_epi32(mnv, _mm256_loadu_si256((const __m256i *)xb->bsums)));
            st[t].corr = fmaf((float)m, dmin * xb->d, st[t].corr);
        }
    }
}

AVX2_INLINE void q16kt_q6_k(const block_q6_k *row, const act_q16k *x, int64_t nsb, q16k_acc *st,
                            const int C)
{
    for (int64_t j = 0; j < nsb; j++) {
        const block_q6_k *b = row + j;
        if (C == 1)
            for (int o = 0; o < (int)sizeof *b; o += 64)
                _mm_prefetch((const char *)b + Q16K_PF + o, _MM_HINT_T0);
        int16_t sc[16];
        _mm256_storeu_si256((__m256i *)sc, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales)));
        const float d = ld_fp16_avx2((const uint8_t *)&b->d);
        for (int h = 0; h < 2; h++) {
            /* the half's 4 sub-blocks widened once (8 registers); each
             * activation row then sums them in one chain */
            __m256i w[8];
#pragma GCC unroll 4
            for (int qd = 0; qd < 4; qd++) {
                const int ib = 4 * h + qd;
                const uint8_t *L = b->ql + 64 * h + 32 * (qd & 1), *H = b->qh + 32 * h;
                w[2 * qd] = q6_k_w16_avx2(q16k_zx(L), q16k_zx(H), qd, sc[2 * ib]);
                w[2 * qd + 1] = q6_k_w16_avx2(q16k_zx(L + 16), q16k_zx(H + 16), qd, sc[2 * ib + 1]);
            }
#pragma GCC unroll 8
            for (int t = 0; t < C; t++) {
                const int16_t *v = x[t * nsb + j].v + 128 * h;
                __m256i s = _mm256_setzero_si256();
#pragma GCC unroll 4
                for (int qd = 0; qd < 4; qd++)
                    s = q16k_dot(w[2 * qd], w[2 * qd + 1], v + 32 * qd, s);
                st[t].a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * x[t * nsb + j].d), st[t].a);
            }
        }
    }
}

/* The tiles of one type for any C. */
typedef void (*q16k_tile_fn)(const uint8_t *row, const act_q16k *x, int64_t nsb, q16k_acc *st,
                             int c);

AVX2_FN static void q16k_tile_q4_k_avx2(const uint8_t *row, const act_q16k *x, int64_t nsb,
                                   q16k_acc *st, int c)
{
    const block_q4_k *r = (const block_q4_k *)row;
    switch (c) {
    case 8: q16kt_q4_k(r, x, nsb, st, 8); break;
    case 4: q16kt_q4_k(r, x, nsb, st, 4); break;
    case 2: q16kt_q4_k(r, x, nsb, st, 2); break;
    default: q16kt_q4_k(r, x, nsb, st, 1); break;
    }
}

AVX2_FN static void q16k_tile_q6_k_avx2(const uint8_t *row, const act_q16k *x, int64_t nsb,
                                   q16k_acc *st, int c)
{
    const block_q6_k *r = (const block_q6_k *)row;
    switch (c) {
    case 8: q16kt_q6_k(r, x, nsb, st, 8); break;
    case 4: q16kt_q6_k(r, x, nsb, st, 4); break;
    case 2: q16kt_q6_k(r, x, nsb, st, 2); break;
    default: q16kt_q6_k(r, x, nsb, st, 1); break;
    }
}

/* y[t * ystride + r] for nrows weight rows by n activation rows, in tiles
 * of 8, 4, 2, 1 activation rows. */
AVX2_FN static void q16k_tiles_avx2(q16k_tile_fn tile, const uint8_t *w, size_t rb, int64_t nrows,
                              int64_t cols, const act_q16k *x, int64_t n, float *y, int64_t ystride)
{
    const int64_t nsb = cols / 256;
    for (int64_t i0 = 0, nt; i0 < n; i0 += nt) {
        const int64_t left = n - i0;
        nt = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
        for (int64_t r = 0; r < nrows; r++) {
            q16k_acc st[8];
            for (int t = 0; t < nt; t++)
                st[t] = (q16k_acc){.a = _mm256_setzero_ps(), .corr = 0.0f};
            tile(w + r * rb, x + i0 * nsb, nsb, st, (int)nt);
            for (int t = 0; t < nt; t++)
                y[(i0 + t) * ystride + r] = hsum_avx2(st[t].a) - st[t].corr;
        }
    }
}

AVX2_FN static void q16krows_q4_k_avx2(const uint8_t *w, size_t rb, int64_t nrows, int64_t cols,
                                       const act_q16k *x, int64_t n, float *y, int64_t ystride)
{
    q16k_tiles_avx2(q16k_tile_q4_k_avx2, w, rb, nrows, cols, x, n, y, ystride);
}

AVX2_FN static void q16krows_q6_k_avx2(const uint8_t *w, size_t rb, int64_t nrows, int64_t cols,
                                       const act_q16k *x, int64_t n, float *y, int64_t ystride)
{
    q16k_tiles_avx2(q16k_tile_q6_k_avx2, w, rb, nrows, cols, x, n, y, ystride);
}

q16k_rows_fn q16k_rows_avx2(int type)
{
    switch (type) {
    case GGML_TYPE_Q4_K: return q16krows_q4_k_avx2;
    case GGML_TYPE_Q6_K: return q16krows_q6_k_avx2;
    default: return NULL;
    }
}

#else /* not x86-64 */

void act_q16k_quantize_avx2(const float *x, int64_t cols, act_q16k *xq)
{
    act_q16k_quantize(x, cols, xq);
}

q16k_rows_fn q16k_rows_avx2(int type)
{
    (void)type;
    return NULL;
}

#endif
