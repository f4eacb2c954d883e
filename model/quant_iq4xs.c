/* quant_iq4xs.c: the IQ4_XS decoder (doc/quant.md).  Read only.
 *
 * IQ4_NL's non-linear 16-level table under a signed 6-bit scale per 32
 * elements and one fp16 per 256: x = (d * (ls - 32)) * T[nibble], exact in
 * f32.  Nibbles split-half as IQ4_NL: byte j of a sub-block holds element
 * j (low) and j + 16 (high). */
#include "model/quant.h"
#include "model/quant_codecs.h"

void dequant_row_iq4_xs(const void *src, float *dst, int64_t n)
{
    const block_iq4_xs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fp16_to_f32(b[i].d);
        float *y = dst + i * QK_K;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const float dl = d * (float)(iq4_xs_scale(&b[i], ib) - 32);
            const uint8_t *q = b[i].qs + 16 * ib;
            for (int j = 0; j < 16; j++) {
                y[32 * ib + j] = dl * iq4nl_values[q[j] & 15];
                y[32 * ib + 16 + j] = dl * iq4nl_values[q[j] >> 4];
            }
        }
    }
}
