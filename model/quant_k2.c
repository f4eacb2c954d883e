/* quant_k2.c: decoders of the other K-quants in llama.cpp's mixes, Q2_K,
 * Q3_K and Q5_K (doc/quant.md).  Read only: strata never writes them here.
 *
 * Every product below is exact in f32 (an fp16 scale has 11 significant
 * bits, the integer factors at most 12 more), so the only rounding is the
 * subtraction of a min; the order of the multiplies is still ggml's, which
 * decides the sign of an exact zero (-0 when d * sc < 0). */
#include "model/quant.h"
#include "model/quant_codecs.h"

/* Q2_K: sixteen 16-element sub-blocks, each a 4-bit scale and 4-bit min;
 * byte qs[32h + l] holds elements 128h + l + 32j in bit pair j. */
void dequant_row_q2_k(const void *src, float *dst, int64_t n)
{
    const block_q2_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
        float *y = dst + i * QK_K;
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, j = (e % 128) / 32, l = e % 32, s = e / 16;
            const int c = (b[i].qs[32 * h + l] >> (2 * j)) & 3;
            const float dl = d * (b[i].scales[s] & 15), ml = dmin * (b[i].scales[s] >> 4);
            y[e] = dl * c - ml;
        }
    }
}

void dequant_row_q3_k(const void *src, float *dst, int64_t n)
{
    const block_q3_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fp16_to_f32(b[i].d);
        float *y = dst + i * QK_K;
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, j = (e % 128) / 32, l = e % 32, s = e / 16;
            const int lo2 = (b[i].qs[32 * h + l] >> (2 * j)) & 3;
            /* a clear high bit subtracts 4: codes -4..3 */
            const int hb = (b[i].hmask[e % 32] >> (e / 32)) & 1;
            const float dl = d * q3_k_scale(b[i].scales, s);
            y[e] = dl * (lo2 + 4 * hb - 4);
        }
    }
}

/* Q5_K: Q4_K (6-bit scales and mins per 32, packed alike) plus a fifth
 * bit, bit e / 32 of qh[e % 32]. */
void dequant_row_q5_k(const void *src, float *dst, int64_t n)
{
    const block_q5_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
        float *y = dst + i * QK_K;
        for (int p = 0; p < 4; p++) {
            const uint8_t *q = b[i].qs + 32 * p;
            for (int half = 0; half < 2; half++) {
                const int s = 2 * p + half;
                int sc, mn;
                q4_k_scale_min(s, b[i].scales, &sc, &mn);
                const float d1 = d * sc, m1 = dmin * mn;
                for (int l = 0; l < 32; l++) {
                    const int c = (half ? q[l] >> 4 : q[l] & 15) | ((b[i].qh[l] >> s) & 1) << 4;
                    y[64 * p + 32 * half + l] = d1 * c - m1;
                }
            }
        }
    }
}
