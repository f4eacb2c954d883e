/* quantize_q5.c: Q5_0 and Q5_1 encoders (ggml's reference quantizers).
 *
 * They exist for the recipes' row-length fallbacks (doc/quant.md,
 * "Recipes"): a Q4_K target whose rows are not a multiple of 256 becomes
 * Q5_0, a Q5_K target Q5_1.  Both are the plain round-to-nearest of ggml's
 * reference; an importance matrix is not used (ggml's weighted variant
 * searches the scale; strata does not yet). */
#include "model/quantize_types.h"

#include <float.h>
#include <math.h>
#include <string.h>

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
    (void)imatrix;
    block_q5_0 *b = dst;
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
    (void)imatrix;
    block_q5_1 *b = dst;
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
