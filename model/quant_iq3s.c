/* quant_iq3s.c: the IQ3_S decoder (doc/quant.md).  Read only.
 *
 * 256 elements in 8 sub-blocks of 32; a sub-block is 8 groups of 4, each
 * group a 9-bit index into a 512-entry grid of odd magnitudes 1..15, with
 * 8 explicit sign bits per 8 elements and a 4-bit scale per sub-block:
 * x = (d * (1 + 2 ls)) * mag * sign, every product exact in f32. */
#include "model/quant.h"
#include "model/quant_codecs.h"

void dequant_row_iq3_s(const void *src, float *dst, int64_t n)
{
    const block_iq3_s *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fp16_to_f32(b[i].d);
        float *y = dst + i * QK_K;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const int ls = (b[i].scales[ib / 2] >> (4 * (ib % 2))) & 15;
            const float db = d * (float)(1 + 2 * ls);
            for (int k = 0; k < 8; k++) {
                const int G = 8 * ib + k;
                const uint32_t g = iq3s_grid[b[i].qs[G] | ((b[i].qh[ib] >> k) & 1) << 8];
                for (int j = 0; j < 4; j++) {
                    const int e = 4 * G + j;
                    const float mag = (float)((g >> (8 * j)) & 0xff);
                    y[e] = db * mag * ((b[i].signs[e / 8] >> (e % 8)) & 1 ? -1.f : 1.f);
                }
            }
        }
    }
}
