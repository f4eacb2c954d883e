/* quant_q2_0.c: Q2_0, upstream group-64 layout (FORMATS.md §2.6, §3.3).
 *
 * 64 elements in 18 bytes: fp16 d, then 64 2-bit codes packed four to a
 * byte, lowest bits first (element j at bits 2*(j%4) of byte j/4); value
 * (code - 1) * d, so codes 0..3 mean -d, 0, +d, +2d. */
#include <math.h>

#include "quant.h"
#include "quant_codecs.h"

void dequant_row_q2_0(const void *src, float *dst, int64_t n)
{
    const block_q2_0 *b = src;
    for (int64_t i = 0; i < n / QK2_0; i++) {
        const float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < QK2_0; j++) {
            const int c = (b[i].qs[j / 4] >> (2 * (j % 4))) & 3;
            dst[i * QK2_0 + j] = (c - 1) * d;
        }
    }
}

/* ggml's reference (quantize_row_q2_0_ref): d = amax, c = round(x/d) + 1.
 * That is ternary (-d, 0, +d; code 3 is never produced) with the threshold
 * at amax/2.  We keep the reference recipe so strata's bytes equal ggml's
 * (test vectors); a least-squares d would lower the error but not the
 * format's ternary nature. ggml ignores importance weights here too. */
void quant_row_q2_0(const float *src, void *dst, int64_t n, const float *imatrix)
{
    (void)imatrix;
    block_q2_0 *b = dst;
    for (int64_t i = 0; i < n / QK2_0; i++) {
        const float *x = src + i * QK2_0;
        float amax = 0.0f;
        for (int j = 0; j < QK2_0; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax;
        const float id = d > 0.0f ? 1.0f / d : 0.0f;
        b[i].d = f32_to_fp16(d);
        for (int j = 0; j < QK2_0 / 4; j++)
            b[i].qs[j] = 0;
        for (int j = 0; j < QK2_0; j++) {
            int c = (int)roundf(x[j] * id) + 1;
            c = c < 0 ? 0 : c > 3 ? 3 : c;
            b[i].qs[j / 4] |= (uint8_t)(c << (2 * (j % 4)));
        }
    }
}
