/* quantize_types.c: hands the K- and IQ-quantizers to the traits table.
 *
 * Kept apart from model/quant.c's table so that the decoders (which fill
 * the table's dequant fields) and these encoders can change independently;
 * quant.c calls quant_register_quantizers once, before the first lookup. */
#include "model/quantize_types.h"

static const struct {
    int id;
    quant_row_fn fn;
} quantizers[] = {
    {GGML_TYPE_Q2_K, quant_row_q2_k},
    {GGML_TYPE_Q3_K, quant_row_q3_k},
    {GGML_TYPE_Q4_K, quant_row_q4_k},
    {GGML_TYPE_Q5_K, quant_row_q5_k},
    {GGML_TYPE_Q6_K, quant_row_q6_k},
    {GGML_TYPE_IQ2_XXS, quant_row_iq2_xxs},
    {GGML_TYPE_IQ2_XS, quant_row_iq2_xs},
    {21 /* IQ3_S */, quant_row_iq3_s},
    {22 /* IQ2_S */, quant_row_iq2_s},
    {23 /* IQ4_XS */, quant_row_iq4_xs},
    {GGML_TYPE_IQ4_NL, quant_row_iq4_nl},
    {GGML_TYPE_Q5_0, quant_row_q5_0},
    {GGML_TYPE_Q5_1, quant_row_q5_1},
};

void quant_register_quantizers(type_traits *table, int count)
{
    for (size_t i = 0; i < sizeof quantizers / sizeof quantizers[0]; i++) {
        const int id = quantizers[i].id;
        if (id < count && table[id].name && !table[id].quant)
            table[id].quant = quantizers[i].fn;
    }
}
