/* quant.c: the type-traits table and scalar conversions.
 *
 * Sizes for every id ggml defines (formats/ggml_types.tsv), so the GGUF
 * reader can measure any tensor; decode/encode functions for the types
 * strata handles (model/quant_*.c). */
#include "quant.h"

#include <string.h>
#include <strings.h>

/* Row codecs: filled in by model/quant_*.c (declared there). */

static const type_traits traits[GGML_TYPE_COUNT] = {
    [0] = {"F32", 0, 1, 4, NULL, NULL},
    [1] = {"F16", 1, 1, 2, NULL, NULL},
    [2] = {"Q4_0", 2, 32, 18, NULL, NULL},
    [3] = {"Q4_1", 3, 32, 20, NULL, NULL},
    [6] = {"Q5_0", 6, 32, 22, NULL, NULL},
    [7] = {"Q5_1", 7, 32, 24, NULL, NULL},
    [8] = {"Q8_0", 8, 32, 34, NULL, NULL},
    [9] = {"Q8_1", 9, 32, 36, NULL, NULL},
    [10] = {"Q2_K", 10, 256, 84, NULL, NULL},
    [11] = {"Q3_K", 11, 256, 110, NULL, NULL},
    [12] = {"Q4_K", 12, 256, 144, NULL, NULL},
    [13] = {"Q5_K", 13, 256, 176, NULL, NULL},
    [14] = {"Q6_K", 14, 256, 210, NULL, NULL},
    [15] = {"Q8_K", 15, 256, 292, NULL, NULL},
    [16] = {"IQ2_XXS", 16, 256, 66, NULL, NULL},
    [17] = {"IQ2_XS", 17, 256, 74, NULL, NULL},
    [18] = {"IQ3_XXS", 18, 256, 98, NULL, NULL},
    [19] = {"IQ1_S", 19, 256, 50, NULL, NULL},
    [20] = {"IQ4_NL", 20, 32, 18, NULL, NULL},
    [21] = {"IQ3_S", 21, 256, 110, NULL, NULL},
    [22] = {"IQ2_S", 22, 256, 82, NULL, NULL},
    [23] = {"IQ4_XS", 23, 256, 136, NULL, NULL},
    [24] = {"I8", 24, 1, 1, NULL, NULL},
    [25] = {"I16", 25, 1, 2, NULL, NULL},
    [26] = {"I32", 26, 1, 4, NULL, NULL},
    [27] = {"I64", 27, 1, 8, NULL, NULL},
    [28] = {"F64", 28, 1, 8, NULL, NULL},
    [29] = {"IQ1_M", 29, 256, 56, NULL, NULL},
    [30] = {"BF16", 30, 1, 2, NULL, NULL},
    [34] = {"TQ1_0", 34, 256, 54, NULL, NULL},
    [35] = {"TQ2_0", 35, 256, 66, NULL, NULL},
    [39] = {"MXFP4", 39, 32, 17, NULL, NULL},
    [40] = {"NVFP4", 40, 64, 36, NULL, NULL},
    [41] = {"Q1_0", 41, 128, 18, NULL, NULL},
    [42] = {"Q2_0", 42, 64, 18, NULL, NULL},
};

const type_traits *type_traits_get(int id)
{
    if (id < 0 || id >= GGML_TYPE_COUNT || !traits[id].name)
        return NULL;
    return &traits[id];
}

const type_traits *type_traits_by_name(const char *name)
{
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
