/* quant.c: the type-traits table and scalar conversions.
 *
 * Sizes for every id ggml defines (ggml.h and ggml-common.h), so the GGUF
 * reader can measure any tensor; decode/encode functions for the types
 * strata handles (model/quant_*.c). */
#include "model/quant.h"
#include "model/quant_codecs.h"

#include <pthread.h>
#include <string.h>
#include <strings.h>

#include "model/quantize_types.h"

/* Row codecs: model/quant_legacy.c, quant_k.c, quant_q2_0.c, quant_iq3xxs.c
 * (declared in quant_codecs.h).  Quantizers exist for what strata writes:
 * its weight types (IQ3_XXS, Q2_0), the KV/fallback types (Q8_0, Q4_0) and
 * the float types. */

/* Not const: quant_register_quantizers (model/quantize_types.c) fills in
 * the K- and IQ-type encoders once, before the first lookup. */
static type_traits traits[GGML_TYPE_COUNT] = {
    [0] = {"F32", 0, 1, 4, dequant_row_f32, quant_row_f32},
    [1] = {"F16", 1, 1, 2, dequant_row_f16, quant_row_f16},
    [2] = {"Q4_0", 2, 32, 18, dequant_row_q4_0, quant_row_q4_0},
    [3] = {"Q4_1", 3, 32, 20, dequant_row_q4_1, NULL},
    [6] = {"Q5_0", 6, 32, 22, dequant_row_q5_0, NULL},
    [7] = {"Q5_1", 7, 32, 24, dequant_row_q5_1, NULL},
    [8] = {"Q8_0", 8, 32, 34, dequant_row_q8_0, quant_row_q8_0},
    [9] = {"Q8_1", 9, 32, 36, NULL, NULL},
    [10] = {"Q2_K", 10, 256, 84, dequant_row_q2_k, NULL},
    [11] = {"Q3_K", 11, 256, 110, dequant_row_q3_k, NULL},
    [12] = {"Q4_K", 12, 256, 144, dequant_row_q4_k, NULL},
    [13] = {"Q5_K", 13, 256, 176, dequant_row_q5_k, NULL},
    [14] = {"Q6_K", 14, 256, 210, dequant_row_q6_k, NULL},
    [15] = {"Q8_K", 15, 256, 292, NULL, NULL},
    [16] = {"IQ2_XXS", 16, 256, 66, dequant_row_iq2_xxs, NULL},
    [17] = {"IQ2_XS", 17, 256, 74, dequant_row_iq2_xs, NULL},
    [18] = {"IQ3_XXS", 18, 256, 98, dequant_row_iq3_xxs, quant_row_iq3_xxs},
    [19] = {"IQ1_S", 19, 256, 50, NULL, NULL},
    [20] = {"IQ4_NL", 20, 32, 18, dequant_row_iq4_nl, NULL},
    [21] = {"IQ3_S", 21, 256, 110, dequant_row_iq3_s, NULL},
    [22] = {"IQ2_S", 22, 256, 82, dequant_row_iq2_s, NULL},
    [23] = {"IQ4_XS", 23, 256, 136, dequant_row_iq4_xs, NULL},
    [24] = {"I8", 24, 1, 1, NULL, NULL},
    [25] = {"I16", 25, 1, 2, NULL, NULL},
    [26] = {"I32", 26, 1, 4, NULL, NULL},
    [27] = {"I64", 27, 1, 8, NULL, NULL},
    [28] = {"F64", 28, 1, 8, NULL, NULL},
    [29] = {"IQ1_M", 29, 256, 56, NULL, NULL},
    [30] = {"BF16", 30, 1, 2, dequant_row_bf16, quant_row_bf16},
    [34] = {"TQ1_0", 34, 256, 54, NULL, NULL},
    [35] = {"TQ2_0", 35, 256, 66, NULL, NULL},
    [39] = {"MXFP4", 39, 32, 17, NULL, NULL},
    [40] = {"NVFP4", 40, 64, 36, NULL, NULL},
    [41] = {"Q1_0", 41, 128, 18, NULL, NULL},
    [42] = {"Q2_0", 42, 64, 18, dequant_row_q2_0, quant_row_q2_0},
};

static pthread_once_t quantizers_once = PTHREAD_ONCE_INIT;

static void add_quantizers(void)
{
    quant_register_quantizers(traits, GGML_TYPE_COUNT);
}

const type_traits *type_traits_get(int id)
{
    pthread_once(&quantizers_once, add_quantizers);
    if (id < 0 || id >= GGML_TYPE_COUNT || !traits[id].name)
        return NULL;
    return &traits[id];
}

const type_traits *type_traits_by_name(const char *name)
{
    pthread_once(&quantizers_once, add_quantizers);
    for (int i = 0; i < GGML_TYPE_COUNT; i++)
        if (traits[i].name && !strcasecmp(traits[i].name, name))
            return &traits[i];
    return NULL;
}

const char *type_name(int id)
{
    const type_traits *t = type_traits_get(id);
    return t ? t->name : "?";
}

size_t type_row_bytes(int id, int64_t n)
{
    const type_traits *t = type_traits_get(id);
    if (!t || n < 0 || n % t->blck)
        return 0;
    return (size_t)(n / t->blck) * (size_t)t->bytes;
}

int type_fp16_scales(int id, int offs[2])
{
    switch (id) {
    case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K:
        offs[0] = 0, offs[1] = 2; /* d, then m / dmin */
        return 2;
    case GGML_TYPE_Q2_K:
        offs[0] = 80, offs[1] = 82; /* at the end of the block */
        return 2;
    case GGML_TYPE_Q3_K: offs[0] = 108; return 1;
    case GGML_TYPE_Q6_K: offs[0] = 208; return 1;
    case GGML_TYPE_Q4_0: case GGML_TYPE_Q5_0: case GGML_TYPE_Q8_0: case GGML_TYPE_IQ4_NL:
    case GGML_TYPE_Q2_0: case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS: case GGML_TYPE_IQ2_S:
    case GGML_TYPE_IQ3_XXS: case GGML_TYPE_IQ3_S: case GGML_TYPE_IQ4_XS:
        offs[0] = 0;
        return 1;
    default:
        return 0;
    }
}

int type_find_bad_scale(int id, const void *data, uint64_t nbytes, uint64_t *block,
                        int *field, uint16_t *bits)
{
    int offs[2];
    const int ns = type_fp16_scales(id, offs);
    const type_traits *t = type_traits_get(id);
    if (!ns || !t)
        return 0;
    const uint8_t *p = data;
    const uint64_t nb = nbytes / (uint64_t)t->bytes;
    for (uint64_t b = 0; b < nb; b++)
        for (int k = 0; k < ns; k++) {
            uint16_t h;
            memcpy(&h, p + b * (uint64_t)t->bytes + offs[k], 2);
            if ((h & 0x7c00) == 0x7c00) { /* exponent all ones: inf or NaN */
                *block = b;
                *field = k;
                *bits = h;
                return 1;
            }
        }
    return 0;
}

/* ---- scalar conversions (doc/formats.md §2.1) -------------------------- */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float fp16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0) {
        /* zero or subnormal: m * 2^-24, exact in f32 */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) /* inf / NaN: keep the payload */
        return bits_f32(sign | 0x7f800000u | (mant << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t f32_to_fp16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) /* NaN: ggml returns a quiet NaN, sign kept */
        return sign | 0x7e00;
    if (x >= 0x477ff000u) /* >= 65520 rounds to inf under RNE */
        return sign | 0x7c00;
    if (x >= 0x38800000u) {
        /* normal fp16 (>= 2^-14): round the 13 dropped bits to nearest
         * even, then rebias the exponent from 127 to 15 */
        x += 0xfffu + ((x >> 13) & 1);
        return sign | (uint16_t)((x - 0x38000000u) >> 13);
    }
    /* subnormal fp16 or zero: adding 0.5f lines the value up so that the
     * FPU's own RNE rounding leaves the 10-bit result in the low mantissa */
    float r = bits_f32(x) + 0.5f;
    return sign | (uint16_t)(f32_bits(r) - 0x3f000000u);
}

float bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: force quiet, as ggml */
        return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}
