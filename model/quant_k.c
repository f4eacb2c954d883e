/* quant_k.c: decoders of the K-quants strata reads, Q4_K and Q6_K
 * (doc/formats.md §2.5).  Q4_K_M files mix them; strata only reads them (to run
 * such a file on the CPU or to requantize it), it never writes them. */
#include "model/quant.h"
#include "model/quant_codecs.h"

void dequant_row_q4_k(const void *src, float *dst, int64_t n)
{
    const block_q4_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fp16_to_f32(b[i].d);
        const float dmin = fp16_to_f32(b[i].dmin);
        float *y = dst + i * QK_K;
        /* four 64-element chunks: low nibbles are sub-block 2p, high
         * nibbles sub-block 2p+1 of the same 32 bytes */
        for (int p = 0; p < 4; p++) {
            int sc, mn;
            q4_k_scale_min(2 * p, b[i].scales, &sc, &mn);
            const float d1 = d * sc, m1 = dmin * mn;
            q4_k_scale_min(2 * p + 1, b[i].scales, &sc, &mn);
            const float d2 = d * sc, m2 = dmin * mn;
            const uint8_t *q = b[i].qs + 32 * p;
            for (int l = 0; l < 32; l++)
                y[64 * p + l] = d1 * (q[l] & 0x0f) - m1;
            for (int l = 0; l < 32; l++)
                y[64 * p + 32 + l] = d2 * (q[l] >> 4) - m2;
        }
    }
}

void dequant_row_q6_k(const void *src, float *dst, int64_t n)
{
    const block_q6_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fp16_to_f32(b[i].d);
        float *y = dst + i * QK_K;
        /* two halves of 128: 64 bytes of low nibbles, 32 bytes of 2-bit
         * high parts, 8 signed scales of 16 elements each */
        for (int h = 0; h < 2; h++) {
            const uint8_t *L = b[i].ql + 64 * h;
            const uint8_t *H = b[i].qh + 32 * h;
            const int8_t *C = b[i].scales + 8 * h;
            float *o = y + 128 * h;
            for (int l = 0; l < 32; l++) {
                const int k = l / 16;
                const int q1 = ((L[l] & 15) | ((H[l] >> 0 & 3) << 4)) - 32;
                const int q2 = ((L[l + 32] & 15) | ((H[l] >> 2 & 3) << 4)) - 32;
                const int q3 = ((L[l] >> 4) | ((H[l] >> 4 & 3) << 4)) - 32;
                const int q4 = ((L[l + 32] >> 4) | ((H[l] >> 6 & 3) << 4)) - 32;
                /* ggml evaluates (d * scale) * q */
                o[l] = d * C[k + 0] * q1;
                o[l + 32] = d * C[k + 2] * q2;
                o[l + 64] = d * C[k + 4] * q3;
                o[l + 96] = d * C[k + 6] * q4;
            }
        }
    }
}
