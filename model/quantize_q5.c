/* quantize_q5.c: Q5_0 and Q5_1 encoders, and the weighted Q4_0 / Q5_0 /
 * Q5_1 paths an importance matrix takes.
 *
 * They exist for the recipes' row-length fallbacks (doc/quant.md,
 * "Recipes"): a Q2_K/Q3_K target whose rows are not a multiple of 256
 * becomes Q4_0, a Q4_K target Q5_0, a Q5_K target Q5_1.  Without an
 * importance matrix each is ggml's reference round-to-nearest; with one,
 * ggml's weighted search (quantize_row_q{4_0,5_0,5_1}_impl): per 32
 * weights, w = imatrix * sqrt(sigma2 + x^2) with sigma2 the row's mean
 * square, then the best weighted scale among 19 candidates (qs_signed), or
 * scale and min (qs_scale_min) for Q5_1. */
#include "model/quantize_types.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "model/quantize_search.h"

/* The weights of 32 values: qw * sqrt(sigma2 + x^2). */
static void block_weights(const float *x, const float *qw, float sigma2, float *w)
{
    for (int j = 0; j < 32; j++)
        w[j] = qw[j] * sqrtf(sigma2 + x[j] * x[j]);
}

static float row_sigma2(const float *x, int64_t n)
{
    float s = 0;
    for (int64_t j = 0; j < n; j++)
        s += x[j] * x[j];
    return s / n;
}

/* Q4_0 / Q5_0 with an importance matrix: signed codes -nmax..nmax-1 under
 * one scale, stored as code + nmax (nmax 8: Q4_0, 16: Q5_0). */
static float weighted_signed(const float *x, const float *qw, float sigma2, int nmax, int8_t *L)
{
    float w[32];
    block_weights(x, qw, sigma2, w);
    return qs_signed(32, nmax, x, L, w);
}

void quant_row_q4_0_weighted(const float *src, void *dst, int64_t n, const float *imatrix)
{
    block_q4_0 *b = dst;
    const float sigma2 = row_sigma2(src, n);
    for (int64_t i = 0; i < n / QK4_0; i++) {
        int8_t L[32];
        const float d = weighted_signed(src + 32 * i, imatrix + 32 * i, sigma2, 8, L);
        b[i].d = f32_to_fp16(d);
        for (int j = 0; j < 16; j++)
            b[i].qs[j] = (uint8_t)(L[j] | L[j + 16] << 4);
    }
}

static void quant_row_q5_0_weighted(const float *src, block_q5_0 *b, int64_t n,
                                    const float *imatrix);
static void quant_row_q5_1_weighted(const float *src, block_q5_1 *b, int64_t n,
                                    const float *imatrix);

/* The 32 fifth bits of a block, bit j for element j. */
static void put_qh(uint8_t qh[4], uint32_t bits)
{
    for (int k = 0; k < 4; k++)
        qh[k] = (uint8_t)(bits >> 8 * k);
}

/* Q5_0: x = d * (code - 16); the signed extreme maps to code 0
 * (d = v / -16), the other side saturates at 31, as Q4_0 does. */
void quant_row_q5_0(const float *src, void *dst, int64_t n, const float *imatrix)
{
    block_q5_0 *b = dst;
    if (imatrix) {
        quant_row_q5_0_weighted(src, b, n, imatrix);
        return;
    }
    for (int64_t i = 0; i < n / QK5_0; i++) {
        const float *x = src + i * QK5_0;
        float amax = 0, vmax = 0;
        for (int j = 0; j < QK5_0; j++)
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                vmax = x[j];
            }
        const float d = vmax / -16;
        const float id = d ? 1.0f / d : 0.0f;
        b[i].d = f32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_0 / 2; j++) {
            /* x*id + 16.5 >= 0.5: the int8 cast truncates like floor */
            int lo = (int8_t)(x[j] * id + 16.5f);
            int hi = (int8_t)(x[j + 16] * id + 16.5f);
            lo = lo < 31 ? lo : 31;
            hi = hi < 31 ? hi : 31;
            b[i].qs[j] = (uint8_t)((lo & 15) | (hi & 15) << 4);
            qh |= (uint32_t)(lo >> 4) << j;
            qh |= (uint32_t)(hi >> 4) << (j + 16);
        }
        put_qh(b[i].qh, qh);
    }
}

/* Q5_1: x = d * code + m over [min, max] in 31 steps. */
void quant_row_q5_1(const float *src, void *dst, int64_t n, const float *imatrix)
{
    block_q5_1 *b = dst;
    if (imatrix) {
        quant_row_q5_1_weighted(src, b, n, imatrix);
        return;
    }
    for (int64_t i = 0; i < n / QK5_1; i++) {
        const float *x = src + i * QK5_1;
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QK5_1; j++) {
            if (x[j] < min)
                min = x[j];
            if (x[j] > max)
                max = x[j];
        }
        const float d = (max - min) / 31;
        const float id = d ? 1.0f / d : 0.0f;
        b[i].d = f32_to_fp16(d);
        b[i].m = f32_to_fp16(min);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_1 / 2; j++) {
            const uint8_t lo = (uint8_t)((x[j] - min) * id + 0.5f);
            const uint8_t hi = (uint8_t)((x[j + 16] - min) * id + 0.5f);
            b[i].qs[j] = (uint8_t)((lo & 15) | (hi & 15) << 4);
            qh |= (uint32_t)((lo >> 4) & 1) << j;
            qh |= (uint32_t)((hi >> 4) & 1) << (j + 16);
        }
        put_qh(b[i].qh, qh);
    }
}

/* Codes 0..31 of 32 values into nibbles and the fifth bits. */
static void pack5(const uint8_t *L, uint8_t *qs, uint8_t qh[4])
{
    uint32_t bits = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((L[j] & 15) | (L[j + 16] & 15) << 4);
        bits |= (uint32_t)(L[j] >> 4 & 1) << j;
        bits |= (uint32_t)(L[j + 16] >> 4 & 1) << (j + 16);
    }
    put_qh(qh, bits);
}

static void quant_row_q5_0_weighted(const float *src, block_q5_0 *b, int64_t n,
                                    const float *imatrix)
{
    const float sigma2 = row_sigma2(src, n);
    for (int64_t i = 0; i < n / QK5_0; i++) {
        int8_t L[32];
        uint8_t U[32];
        const float d = weighted_signed(src + 32 * i, imatrix + 32 * i, sigma2, 16, L);
        b[i].d = f32_to_fp16(d);
        for (int j = 0; j < 32; j++)
            U[j] = (uint8_t)L[j];
        pack5(U, b[i].qs, b[i].qh);
    }
}

/* Q5_1: codes 0..31 with a scale and a min, ggml's make_qkx3_quants
 * settings (rmin -0.9, rdelta 0.05, 36 steps, squared error). */
static void quant_row_q5_1_weighted(const float *src, block_q5_1 *b, int64_t n,
                                    const float *imatrix)
{
    const float sigma2 = row_sigma2(src, n);
    for (int64_t i = 0; i < n / QK5_1; i++) {
        const float *x = src + 32 * i;
        float w[32], the_min;
        uint8_t L[32];
        block_weights(x, imatrix + 32 * i, sigma2, w);
        const float d = qs_scale_min(32, 31, x, w, L, &the_min, -0.9f, 0.05f, 36, 0);
        b[i].d = f32_to_fp16(d);
        b[i].m = f32_to_fp16(-the_min);
        pack5(L, b[i].qs, b[i].qh);
    }
}
