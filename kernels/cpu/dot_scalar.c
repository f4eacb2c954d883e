/* dot_scalar.c: portable fused kernels (see dot_kernels.h) for every type
 * strata decodes except the float ones, used where the CPU has no AVX2
 * (Q8_0, Q4_0, Q4_1, Q2_0 and IQ3_XXS here; the sub-block decoders of the
 * K-quants, IQ types, Q5_0, Q5_1 and IQ4_NL in dot_scalar_kiq.c).
 *
 * A 32-weight sub-block is decoded into 32 floats on the stack with the
 * reference decoders' exact expressions (so the weights are the same
 * floats), dotted with each activation row in f32, and the sub-block sums
 * are added in double: the only differences from the reference are the
 * f32 partial sums of 32 products. */
#include <string.h>

#include "kernels/cpu/dot_kernels.h"
#include "model/quant.h"

#define SUB 32   /* weights per decoded sub-block */
#define TILE 16  /* activation rows per pass over a weight row */

static uint16_t ld16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

static void dec_q8_0(const uint8_t *row, int64_t s, float *w)
{
    const uint8_t *b = row + s * sizeof(block_q8_0);
    const float d = fp16_to_f32(ld16(b));
    for (int j = 0; j < SUB; j++)
        w[j] = (int8_t)b[2 + j] * d;
}

static void dec_q4_0(const uint8_t *row, int64_t s, float *w)
{
    const uint8_t *b = row + s * sizeof(block_q4_0);
    const float d = fp16_to_f32(ld16(b));
    for (int j = 0; j < SUB / 2; j++) {
        w[j] = ((b[2 + j] & 0x0f) - 8) * d;
        w[j + SUB / 2] = ((b[2 + j] >> 4) - 8) * d;
    }
}

static void dec_q4_1(const uint8_t *row, int64_t s, float *w)
{
    const uint8_t *b = row + s * sizeof(block_q4_1);
    const float d = fp16_to_f32(ld16(b)), m = fp16_to_f32(ld16(b + 2));
    for (int j = 0; j < SUB / 2; j++) {
        w[j] = (b[4 + j] & 0x0f) * d + m;
        w[j + SUB / 2] = (b[4 + j] >> 4) * d + m;
    }
}

/* Q2_0 blocks hold 64 weights: sub-block s is half s & 1 of block s / 2 */
static void dec_q2_0(const uint8_t *row, int64_t s, float *w)
{
    const uint8_t *b = row + (s >> 1) * sizeof(block_q2_0);
    const float d = fp16_to_f32(ld16(b));
    const uint8_t *q = b + 2 + 8 * (s & 1);
    for (int j = 0; j < SUB; j++)
        w[j] = (((q[j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
}

/* IQ3_XXS blocks hold 256 weights: sub-block s is group s & 7 of block
 * s / 8, with its own 4-bit scale and sign word */
static void dec_iq3_xxs(const uint8_t *row, int64_t s, float *w)
{
    const uint8_t *b = row + (s >> 3) * sizeof(block_iq3_xxs);
    const int ib = (int)(s & 7);
    const float d = fp16_to_f32(ld16(b));
    const uint8_t *gidx = b + 2 + 8 * ib;
    const uint8_t *p = b + 2 + QK_K / 4 + 4 * ib;
    const uint32_t sw = (uint32_t)p[0] | (uint32_t)p[1] << 8 |
                        (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    const float db = d * (0.5f + (float)(sw >> 28)) * 0.5f;
    for (int l = 0; l < 4; l++) {
        const uint8_t sg = iq3xxs_signs[(sw >> (7 * l)) & 127];
        const uint32_t a = iq3xxs_grid[gidx[2 * l]], c = iq3xxs_grid[gidx[2 * l + 1]];
        for (int k = 0; k < 8; k++) {
            const uint32_t g = k < 4 ? a : c;
            const float mag = (float)((g >> (8 * (k & 3))) & 0xff);
            w[8 * l + k] = db * mag * ((sg >> k) & 1 ? -1.f : 1.f);
        }
    }
}

typedef void (*dec_fn)(const uint8_t *row, int64_t s, float *w);

static void rows_generic(dec_fn dec, const uint8_t *w, size_t row_bytes, int64_t nrows,
                         int64_t cols, const float *x, int64_t n, float *y,
                         int64_t ystride)
{
    const int64_t nsub = cols / SUB;
    float wv[SUB];
    double acc[TILE];
    for (int64_t i0 = 0; i0 < n; i0 += TILE) {
        const int64_t nt = n - i0 < TILE ? n - i0 : TILE;
        for (int64_t r = 0; r < nrows; r++) {
            const uint8_t *row = w + r * row_bytes;
            for (int64_t t = 0; t < nt; t++)
                acc[t] = 0.0;
            for (int64_t s = 0; s < nsub; s++) {
                dec(row, s, wv);
                for (int64_t t = 0; t < nt; t++) {
                    const float *xs = x + (i0 + t) * cols + s * SUB;
                    float p = 0.0f;
                    for (int j = 0; j < SUB; j++)
                        p += wv[j] * xs[j];
                    acc[t] += p;
                }
            }
            for (int64_t t = 0; t < nt; t++)
                y[(i0 + t) * ystride + r] = (float)acc[t];
        }
    }
}

#define ROWS_SCALAR(NAME)                                                         \
    static void rows_##NAME(const uint8_t *w, size_t row_bytes, int64_t nrows,    \
                            int64_t cols, const float *x, int64_t n, float *y,    \
                            int64_t ystride)                                      \
    {                                                                             \
        rows_generic(dec_##NAME, w, row_bytes, nrows, cols, x, n, y, ystride);    \
    }
ROWS_SCALAR(q8_0)
ROWS_SCALAR(q4_0)
ROWS_SCALAR(q4_1)
ROWS_SCALAR(q2_0)
ROWS_SCALAR(iq3_xxs)

/* the decoders of dot_scalar_kiq.c */
#define dec_q5_0 dec_sub_q5_0
#define dec_q5_1 dec_sub_q5_1
#define dec_iq4_nl dec_sub_iq4_nl
#define dec_q2_k dec_sub_q2_k
#define dec_q3_k dec_sub_q3_k
#define dec_q4_k dec_sub_q4_k
#define dec_q5_k dec_sub_q5_k
#define dec_q6_k dec_sub_q6_k
#define dec_iq2_xxs dec_sub_iq2_xxs
#define dec_iq2_xs dec_sub_iq2_xs
#define dec_iq2_s dec_sub_iq2_s
#define dec_iq3_s dec_sub_iq3_s
#define dec_iq4_xs dec_sub_iq4_xs
ROWS_SCALAR(q5_0)
ROWS_SCALAR(q5_1)
ROWS_SCALAR(iq4_nl)
ROWS_SCALAR(q2_k)
ROWS_SCALAR(q3_k)
ROWS_SCALAR(q4_k)
ROWS_SCALAR(q5_k)
ROWS_SCALAR(q6_k)
ROWS_SCALAR(iq2_xxs)
ROWS_SCALAR(iq2_xs)
ROWS_SCALAR(iq2_s)
ROWS_SCALAR(iq3_s)
ROWS_SCALAR(iq4_xs)

fast_rows_fn fast_rows_scalar(int type)
{
    switch (type) {
    case GGML_TYPE_Q8_0: return rows_q8_0;
    case GGML_TYPE_Q4_0: return rows_q4_0;
    case GGML_TYPE_Q4_1: return rows_q4_1;
    case GGML_TYPE_Q2_0: return rows_q2_0;
    case GGML_TYPE_IQ3_XXS: return rows_iq3_xxs;
    case GGML_TYPE_Q5_0: return rows_q5_0;
    case GGML_TYPE_Q5_1: return rows_q5_1;
    case GGML_TYPE_IQ4_NL: return rows_iq4_nl;
    case GGML_TYPE_Q2_K: return rows_q2_k;
    case GGML_TYPE_Q3_K: return rows_q3_k;
    case GGML_TYPE_Q4_K: return rows_q4_k;
    case GGML_TYPE_Q5_K: return rows_q5_k;
    case GGML_TYPE_Q6_K: return rows_q6_k;
    case GGML_TYPE_IQ2_XXS: return rows_iq2_xxs;
    case GGML_TYPE_IQ2_XS: return rows_iq2_xs;
    case GGML_TYPE_IQ2_S: return rows_iq2_s;
    case GGML_TYPE_IQ3_S: return rows_iq3_s;
    case GGML_TYPE_IQ4_XS: return rows_iq4_xs;
    default: return NULL;
    }
}

float fast_dot_f32(const float *a, const float *b, int64_t n)
{
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}
