/* quant.h: ggml tensor types, their block layouts, and the type-traits table
 * (format facts: doc/formats.md §2, §3; sizes: the traits table in model/quant.c).
 *
 * The traits table is the single place the rest of strata asks about a type:
 * block size, block bytes, and the row dequantize / quantize functions.
 * Types strata can only measure (not decode) have NULL functions. */
#ifndef STRATA_QUANT_H
#define STRATA_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ggml_type {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_Q8_K = 15,
    GGML_TYPE_IQ2_XXS = 16,
    GGML_TYPE_IQ2_XS = 17,
    GGML_TYPE_IQ3_XXS = 18,
    GGML_TYPE_IQ1_S = 19,
    GGML_TYPE_IQ4_NL = 20,
    GGML_TYPE_BF16 = 30,
    GGML_TYPE_Q1_0 = 41,
    GGML_TYPE_Q2_0 = 42,
    GGML_TYPE_COUNT = 43,
};

/* ---- block layouts (all little-endian, packed, no padding) ------------ */

#define QK8_0 32
typedef struct { uint16_t d; int8_t qs[QK8_0]; } block_q8_0;
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 is 34 bytes");

#define QK4_0 32
typedef struct { uint16_t d; uint8_t qs[QK4_0 / 2]; } block_q4_0;
_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 is 18 bytes");

#define QK4_1 32
typedef struct { uint16_t d, m; uint8_t qs[QK4_1 / 2]; } block_q4_1;
_Static_assert(sizeof(block_q4_1) == 20, "block_q4_1 is 20 bytes");

#define QK5_0 32
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; } block_q5_0;
_Static_assert(sizeof(block_q5_0) == 22, "block_q5_0 is 22 bytes");

#define QK5_1 32
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; } block_q5_1;
_Static_assert(sizeof(block_q5_1) == 24, "block_q5_1 is 24 bytes");

#define QK4_NL 32
typedef struct { uint16_t d; uint8_t qs[QK4_NL / 2]; } block_iq4_nl;
_Static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl is 18 bytes");

#define QK_K 256
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[QK_K / 2]; } block_q4_k;
_Static_assert(sizeof(block_q4_k) == 144, "block_q4_k is 144 bytes");

typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; } block_q6_k;
_Static_assert(sizeof(block_q6_k) == 210, "block_q6_k is 210 bytes");

/* IQ3_XXS: d, 64 grid indices, then 8 u32 of (4 x 7-bit signs | 4-bit scale).
 * Declared as bytes: the u32 words sit at offset 66, not 4-byte aligned. */
typedef struct { uint16_t d; uint8_t qs[3 * QK_K / 8]; } block_iq3_xxs;
_Static_assert(sizeof(block_iq3_xxs) == 98, "block_iq3_xxs is 98 bytes");

/* Q2_0 (upstream, group 64): d, then 64 2-bit codes, consecutive, low bits
 * first; value (code - 1) * d. */
#define QK2_0 64
typedef struct { uint16_t d; uint8_t qs[QK2_0 / 4]; } block_q2_0;
_Static_assert(sizeof(block_q2_0) == 18, "block_q2_0 is 18 bytes");

/* ---- traits ----------------------------------------------------------- */

/* Dequantize n elements (n a multiple of blck) from src to f32. */
typedef void (*dequant_row_fn)(const void *src, float *dst, int64_t n);
/* Quantize n elements; imatrix (n importance weights, may be NULL). */
typedef void (*quant_row_fn)(const float *src, void *dst, int64_t n,
                             const float *imatrix);

typedef struct type_traits {
    const char *name;      /* ggml's name, upper case: "IQ3_XXS" */
    int id;
    int blck;              /* elements per block */
    int bytes;             /* bytes per block */
    dequant_row_fn dequant; /* NULL: strata cannot decode this type */
    quant_row_fn quant;     /* NULL: strata cannot produce this type */
} type_traits;

/* Traits by id; NULL for retired or unknown ids (4, 5, 31-33, 36-38, >= 43). */
const type_traits *type_traits_get(int id);
/* Traits by name, case-insensitive ("iq3_xxs", "Q2_0"); NULL if unknown. */
const type_traits *type_traits_by_name(const char *name);
const char *type_name(int id); /* "?" for unknown ids */

/* Bytes of a row of n elements; 0 if n is not a multiple of the block or the
 * type is unknown. */
size_t type_row_bytes(int id, int64_t n);

/* ---- scalar conversions (exact ggml semantics, doc/formats.md §2.1) ---- */
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f); /* round to nearest even */
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

/* IQ3_XXS tables (doc/formats.md §2.7), defined in model/iq3xxs_tables.c. */
extern const uint32_t iq3xxs_grid[256];
extern const uint8_t iq3xxs_signs[128];

#endif
