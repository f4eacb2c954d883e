/* quant_codecs.h: the row codecs behind the traits table (model/quant.c).
 *
 * Internal to model/: the rest of strata reaches these through
 * type_traits_get(id)->dequant / ->quant.  Every function converts n
 * elements, n a multiple of the type's block (the caller checks that with
 * type_row_bytes); the `imatrix` argument of the quantizers is n importance
 * weights or NULL; IQ3_XXS and strata's Q2_0 search use it (ggml ignores it
 * for the reference recipes of Q8_0, Q4_0 and Q2_0: doc/formats.md §3.3). */
#ifndef STRATA_QUANT_CODECS_H
#define STRATA_QUANT_CODECS_H

#include <stdint.h>

/* model/quant_legacy.c: element types and the 32-element block types */
void dequant_row_f32(const void *src, float *dst, int64_t n);
void dequant_row_f16(const void *src, float *dst, int64_t n);
void dequant_row_bf16(const void *src, float *dst, int64_t n);
void dequant_row_q8_0(const void *src, float *dst, int64_t n);
void dequant_row_q4_0(const void *src, float *dst, int64_t n);
void dequant_row_q4_1(const void *src, float *dst, int64_t n);
void dequant_row_q5_0(const void *src, float *dst, int64_t n);
void dequant_row_q5_1(const void *src, float *dst, int64_t n);
void dequant_row_iq4_nl(const void *src, float *dst, int64_t n);
void quant_row_f32(const float *src, void *dst, int64_t n, const float *imatrix);
void quant_row_f16(const float *src, void *dst, int64_t n, const float *imatrix);
void quant_row_bf16(const float *src, void *dst, int64_t n, const float *imatrix);
void quant_row_q8_0(const float *src, void *dst, int64_t n, const float *imatrix);
void quant_row_q4_0(const float *src, void *dst, int64_t n, const float *imatrix);

/* model/quant_k.c */
void dequant_row_q4_k(const void *src, float *dst, int64_t n);
void dequant_row_q6_k(const void *src, float *dst, int64_t n);

/* model/quant_k2.c */
void dequant_row_q2_k(const void *src, float *dst, int64_t n);
void dequant_row_q3_k(const void *src, float *dst, int64_t n);
void dequant_row_q5_k(const void *src, float *dst, int64_t n);

/* model/quant_iq2.c */
void dequant_row_iq2_xxs(const void *src, float *dst, int64_t n);
void dequant_row_iq2_xs(const void *src, float *dst, int64_t n);
void dequant_row_iq2_s(const void *src, float *dst, int64_t n);

/* model/quant_iq3s.c */
void dequant_row_iq3_s(const void *src, float *dst, int64_t n);

/* model/quant_iq4xs.c */
void dequant_row_iq4_xs(const void *src, float *dst, int64_t n);

/* model/quant_q2_0.c */
void dequant_row_q2_0(const void *src, float *dst, int64_t n);
void quant_row_q2_0(const float *src, void *dst, int64_t n, const float *imatrix);
/* ggml's reference recipe (codes -d/0/+d only), kept for the test vectors */
void quant_row_q2_0_ref(const float *src, void *dst, int64_t n, const float *imatrix);

/* model/quant_iq3xxs.c */
void dequant_row_iq3_xxs(const void *src, float *dst, int64_t n);
void quant_row_iq3_xxs(const float *src, void *dst, int64_t n, const float *imatrix);

/* ggml's nearest_int (doc/formats.md §3): add 1.5*2^23 and read the mantissa,
 * i.e. round half to even; valid for |v| < 2^22. */
static inline int quant_nearest_int(float v)
{
    union { float f; int32_t i; } u = {v + 12582912.f};
    return (u.i & 0x007fffff) - 0x00400000;
}

#endif
