/* quant_iq2.c: decoders of the 2-bit IQ types, IQ2_XXS, IQ2_XS and IQ2_S
 * (doc/quant.md).  Read only: the quantizers live elsewhere.
 *
 * All three cut a 256-element super-block into 8-element groups; a group
 * is one grid entry (eight magnitudes, each 8, 25 or 43) with eight signs,
 * under a 4-bit scale ls giving db = (d * (0.5 + ls)) * 0.25, evaluated in
 * that order as ggml does.  Each product is exact in f32, so the order
 * matters only for the sign of a zero; the sign is applied last, as a
 * multiply by +-1, which keeps ggml's -0 when d is 0. */
#include <string.h>

#include "model/quant.h"
#include "model/quant_codecs.h"

/* One 8-element group: magnitudes from a grid entry, signs from a byte. */
static void iq2_group(float *y, float db, uint64_t g, uint8_t sg)
{
    for (int k = 0; k < 8; k++)
        y[k] = db * (float)((g >> (8 * k)) & 0xff) * ((sg >> k) & 1 ? -1.f : 1.f);
}

/* IQ2_XXS: per 32 elements 4 grid indices (one per group) and a u32 with
 * four 7-bit sign fields (the 8th sign makes the count of minuses even)
 * and the scale in its top 4 bits. */
void dequant_row_iq2_xxs(const void *src, float *dst, int64_t n)
{
    const block_iq2_xxs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fp16_to_f32(b[i].d);
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const uint8_t *rec = b[i].qs + 8 * ib;
            const uint32_t w = (uint32_t)rec[4] | (uint32_t)rec[5] << 8 |
                               (uint32_t)rec[6] << 16 | (uint32_t)rec[7] << 24;
            const float db = d * (0.5f + (float)(w >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++)
                iq2_group(dst + i * QK_K + 32 * ib + 8 * l, db, iq2xxs_grid[rec[l]],
                          iq3xxs_signs[(w >> (7 * l)) & 127]);
        }
    }
}

/* IQ2_XS: a u16 per group, 9-bit grid index | 7-bit sign field; a 4-bit
 * scale per 16 elements (low nibble first). */
void dequant_row_iq2_xs(const void *src, float *dst, int64_t n)
{
    const block_iq2_xs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fp16_to_f32(b[i].d);
        for (int g = 0; g < QK_K / 8; g++) {
            const int ls = (b[i].scales[g / 4] >> (g % 4 < 2 ? 0 : 4)) & 15;
            const float db = d * (0.5f + (float)ls) * 0.25f;
            const uint16_t v = b[i].qs[g];
            iq2_group(dst + i * QK_K + 8 * g, db, iq2xs_grid[v & 511],
                      iq3xxs_signs[v >> 9]);
        }
    }
}

/* IQ2_S: 10-bit grid index (a low byte, 2 high bits from qh), eight
 * explicit sign bits per group (no parity rule), scales as IQ2_XS. */
void dequant_row_iq2_s(const void *src, float *dst, int64_t n)
{
    const block_iq2_s *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fp16_to_f32(b[i].d);
        for (int g = 0; g < QK_K / 8; g++) {
            const int ib = g / 4, l = g % 4;
            const int ls = (b[i].scales[ib] >> (l < 2 ? 0 : 4)) & 15;
            const float db = d * (0.5f + (float)ls) * 0.25f;
            const int idx = b[i].qs[g] | ((b[i].qh[ib] >> (2 * l)) & 3) << 8;
            iq2_group(dst + i * QK_K + 8 * g, db, iq2s_grid[idx], b[i].signs[g]);
        }
    }
}
