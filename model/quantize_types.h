/* quantize_types.h: quantizers of the K- and IQ-types that llama.cpp's
 * recipes mix per tensor.
 *
 * One function per type, the traits table's quant_row_fn signature: n
 * floats (n a multiple of 256) to n/256 blocks; imatrix is n importance
 * weights (llama.cpp's imatrix, E[a^2] per column) or NULL.  Each follows
 * ggml's reference quantizer for the type and reproduces its bytes, with
 * one deliberate exception in IQ3_S (quantize_iq3s.c).  ggml refuses to
 * quantize IQ2_XXS and IQ2_XS without an importance matrix; strata then
 * takes every importance as 1 (doc/quant.md, "Quantizers"). */
#ifndef STRATA_QUANTIZE_TYPES_H
#define STRATA_QUANTIZE_TYPES_H

#include <stdint.h>

#include "model/quant.h"

/* model/quantize_k.c */
void quant_row_q2_k(const float *src, void *dst, int64_t n, const float *imatrix);
void quant_row_q3_k(const float *src, void *dst, int64_t n, const float *imatrix);
void quant_row_q4_k(const float *src, void *dst, int64_t n, const float *imatrix);
void quant_row_q5_k(const float *src, void *dst, int64_t n, const float *imatrix);
void quant_row_q6_k(const float *src, void *dst, int64_t n, const float *imatrix);

/* model/quantize_iq2.c */
void quant_row_iq2_xxs(const float *src, void *dst, int64_t n, const float *imatrix);
void quant_row_iq2_xs(const float *src, void *dst, int64_t n, const float *imatrix);
void quant_row_iq2_s(const float *src, void *dst, int64_t n, const float *imatrix);

/* model/quantize_iq3s.c: a correct block where ggml's misplaces bytes after
 * an all-zero 32-element sub-block; quant_row_iq3_s_ggml keeps ggml's
 * layout (for the test vectors only). */
void quant_row_iq3_s(const float *src, void *dst, int64_t n, const float *imatrix);
void quant_row_iq3_s_ggml(const float *src, void *dst, int64_t n, const float *imatrix);

/* model/quantize_iq4xs.c (IQ4_NL: n a multiple of 32) */
void quant_row_iq4_xs(const float *src, void *dst, int64_t n, const float *imatrix);
void quant_row_iq4_nl(const float *src, void *dst, int64_t n, const float *imatrix);

/* model/quantize_q5.c: Q5_0 / Q5_1 (n a multiple of 32): ggml's reference
 * rounding, or its weighted search with an importance matrix; and Q4_0's
 * weighted search (quant_row_q4_0 in quant_legacy.c calls it when given an
 * imatrix; imatrix must not be NULL here). */
void quant_row_q5_0(const float *src, void *dst, int64_t n, const float *imatrix);
void quant_row_q5_1(const float *src, void *dst, int64_t n, const float *imatrix);
void quant_row_q4_0_weighted(const float *src, void *dst, int64_t n, const float *imatrix);

/* Fill the quant field of every entry of the traits table (count entries,
 * indexed by type id) that is NULL and has a quantizer above; called once
 * by model/quant.c. */
void quant_register_quantizers(type_traits *table, int count);

#endif
