/* quant_legacy.c: element types (F32, F16, BF16) and the 32-element block
 * types Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL (doc/formats.md §2.2-§2.4, §3.1,
 * §3.2).
 *
 * The decoders evaluate exactly ggml's expressions (int code converted to
 * float, times the fp32 scale, plus the min) so results are bit-exact with
 * ggml's dequantize_row_*: the test vectors check that.  The build is
 * -std=c11, which keeps gcc from contracting d*q + m into an FMA. */
#include <math.h>
#include <string.h>

#include "model/quant.h"
#include "model/quant_codecs.h"
#include "model/quantize_types.h"

/* ---- element types ------------------------------------------------------ */

void dequant_row_f32(const void *src, float *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void dequant_row_f16(const void *src, float *dst, int64_t n)
{
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = fp16_to_f32(h[i]);
}

void dequant_row_bf16(const void *src, float *dst, int64_t n)
{
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = bf16_to_f32(h[i]);
}

void quant_row_f32(const float *src, void *dst, int64_t n, const float *imatrix)
{
    (void)imatrix;
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void quant_row_f16(const float *src, void *dst, int64_t n, const float *imatrix)
{
    (void)imatrix;
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++)
        h[i] = f32_to_fp16(src[i]);
}

void quant_row_bf16(const float *src, void *dst, int64_t n, const float *imatrix)
{
    (void)imatrix;
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++)
        h[i] = f32_to_bf16(src[i]);
}

/* ---- Q8_0: x = d * q ------------------------------------------------------ */

void dequant_row_q8_0(const void *src, float *dst, int64_t n)
{
    const block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < QK8_0; j++)
            dst[i * QK8_0 + j] = b[i].qs[j] * d;
    }
}

/* §3.1: d = amax/127, q = roundf(x * (1/d)). */
void quant_row_q8_0(const float *src, void *dst, int64_t n, const float *imatrix)
{
    (void)imatrix;
    block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const float *x = src + i * QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = f32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++)
            b[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

/* ---- Q4_0: split-half nibbles, x = d * (code - 8) ------------------------ */

void dequant_row_q4_0(const void *src, float *dst, int64_t n)
{
    const block_q4_0 *b = src;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        const float d = fp16_to_f32(b[i].d);
        float *y = dst + i * QK4_0;
        for (int j = 0; j < QK4_0 / 2; j++) {
            const int lo = (b[i].qs[j] & 0x0f) - 8;
            const int hi = (b[i].qs[j] >> 4) - 8;
            y[j] = lo * d;
            y[j + QK4_0 / 2] = hi * d;
        }
    }
}

/* §3.2: the signed extreme v maps to code 0 (d = v / -8), so the side of the
 * largest magnitude uses the full range; the other side saturates at 15. */
void quant_row_q4_0(const float *src, void *dst, int64_t n, const float *imatrix)
{
    if (imatrix) { /* ggml's weighted search (model/quantize_q5.c) */
        quant_row_q4_0_weighted(src, dst, n, imatrix);
        return;
    }
    block_q4_0 *b = dst;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        const float *x = src + i * QK4_0;
        float amax = 0.0f, vmax = 0.0f;
        for (int j = 0; j < QK4_0; j++) {
            if (fabsf(x[j]) > amax) { /* first one wins ties */
                amax = fabsf(x[j]);
                vmax = x[j];
            }
        }
        const float d = vmax / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = f32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            /* x*id + 8.5 >= 0.5, so the cast truncates like floor */
            int lo = (int8_t)(x[j] * id + 8.5f);
            int hi = (int8_t)(x[j + QK4_0 / 2] * id + 8.5f);
            lo = lo < 15 ? lo : 15;
            hi = hi < 15 ? hi : 15;
            b[i].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

/* ---- Q4_1: x = d * code + m ---------------------------------------------- */

void dequant_row_q4_1(const void *src, float *dst, int64_t n)
{
    const block_q4_1 *b = src;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        const float d = fp16_to_f32(b[i].d);
        const float m = fp16_to_f32(b[i].m);
        float *y = dst + i * QK4_1;
        for (int j = 0; j < QK4_1 / 2; j++) {
            const int lo = b[i].qs[j] & 0x0f;
            const int hi = b[i].qs[j] >> 4;
            y[j] = lo * d + m;
            y[j + QK4_1 / 2] = hi * d + m;
        }
    }
}

/* ---- Q5_0 / Q5_1: a 32-bit word of fifth bits, bit j for element j ------- */

static uint32_t load_u32_le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

void dequant_row_q5_0(const void *src, float *dst, int64_t n)
{
    const block_q5_0 *b = src;
    for (int64_t i = 0; i < n / QK5_0; i++) {
        const float d = fp16_to_f32(b[i].d);
        const uint32_t qh = load_u32_le(b[i].qh);
        float *y = dst + i * QK5_0;
        for (int j = 0; j < QK5_0 / 2; j++) {
            const int lo = ((b[i].qs[j] & 0x0f) | ((qh >> j) & 1) << 4) - 16;
            const int hi = ((b[i].qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16;
            y[j] = lo * d;
            y[j + QK5_0 / 2] = hi * d;
        }
    }
}

void dequant_row_q5_1(const void *src, float *dst, int64_t n)
{
    const block_q5_1 *b = src;
    for (int64_t i = 0; i < n / QK5_1; i++) {
        const float d = fp16_to_f32(b[i].d);
        const float m = fp16_to_f32(b[i].m);
        const uint32_t qh = load_u32_le(b[i].qh);
        float *y = dst + i * QK5_1;
        for (int j = 0; j < QK5_1 / 2; j++) {
            const int lo = (b[i].qs[j] & 0x0f) | ((qh >> j) & 1) << 4;
            const int hi = (b[i].qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
            y[j] = lo * d + m;
            y[j + QK5_1 / 2] = hi * d + m;
        }
    }
}

/* ---- IQ4_NL: nibble selects a non-linear level, x = d * T[nibble] -------- */

const int8_t iq4nl_values[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

void dequant_row_iq4_nl(const void *src, float *dst, int64_t n)
{
    const block_iq4_nl *b = src;
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        const float d = fp16_to_f32(b[i].d);
        float *y = dst + i * QK4_NL;
        for (int j = 0; j < QK4_NL / 2; j++) {
            y[j] = d * iq4nl_values[b[i].qs[j] & 0x0f];
            y[j + QK4_NL / 2] = d * iq4nl_values[b[i].qs[j] >> 4];
        }
    }
}
