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
    GGML_TYPE_IQ3_S = 21,
    GGML_TYPE_IQ2_S = 22,
    GGML_TYPE_IQ4_XS = 23,
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

/* The K- and IQ-types of llama.cpp's 2-4 bit recipes (doc/quant.md says what
 * each field holds and in which order a block decodes).  IQ types declare
 * their packed u16/u32 fields as bytes where they would not be aligned. */
typedef struct { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; uint16_t d, dmin; } block_q2_k;
_Static_assert(sizeof(block_q2_k) == 84, "block_q2_k is 84 bytes");

typedef struct { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; uint16_t d; } block_q3_k;
_Static_assert(sizeof(block_q3_k) == 110, "block_q3_k is 110 bytes");

typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; } block_q5_k;
_Static_assert(sizeof(block_q5_k) == 176, "block_q5_k is 176 bytes");

/* IQ2_XXS: d, then per 32 elements 4 grid indices and a u32 of 4 x 7-bit
 * signs | 4-bit scale (bytes: the u32 sits at offset 2 + 8ib + 4). */
typedef struct { uint16_t d; uint8_t qs[QK_K / 4]; } block_iq2_xxs;
_Static_assert(sizeof(block_iq2_xxs) == 66, "block_iq2_xxs is 66 bytes");

/* IQ2_XS: d, 32 u16 of 9-bit grid index | 7-bit signs, 8 scale bytes. */
typedef struct { uint16_t d; uint16_t qs[QK_K / 8]; uint8_t scales[QK_K / 32]; } block_iq2_xs;
_Static_assert(sizeof(block_iq2_xs) == 74, "block_iq2_xs is 74 bytes");

/* IQ2_S: d, 32 low index bytes, 32 sign bytes, 8 high-index bytes, 8 scale bytes. */
typedef struct { uint16_t d; uint8_t qs[QK_K / 8]; uint8_t signs[QK_K / 8]; uint8_t qh[QK_K / 32]; uint8_t scales[QK_K / 32]; } block_iq2_s;
_Static_assert(sizeof(block_iq2_s) == 82, "block_iq2_s is 82 bytes");

/* IQ3_S: d, 64 low index bytes, 8 high-index bytes, 32 sign bytes, 4 scale bytes. */
typedef struct { uint16_t d; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t signs[QK_K / 8]; uint8_t scales[QK_K / 64]; } block_iq3_s;
_Static_assert(sizeof(block_iq3_s) == 110, "block_iq3_s is 110 bytes");

/* IQ4_XS: d, high 2 bits of 8 scales (u16), low 4 bits (4 bytes), 128 nibble bytes. */
typedef struct { uint16_t d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; } block_iq4_xs;
_Static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs is 136 bytes");

/* Q2_0 (upstream, group 64): d, then 64 2-bit codes, consecutive, low bits
 * first; value (code - 1) * d. */
#define QK2_0 64
typedef struct { uint16_t d; uint8_t qs[QK2_0 / 4]; } block_q2_0;
_Static_assert(sizeof(block_q2_0) == 18, "block_q2_0 is 18 bytes");

/* ---- K-quant scale unpacking (shared by the decoders and the CPU kernels) */

/* Q4_K and Q5_K pack eight 6-bit scales and eight 6-bit mins into 12 bytes:
 * the first four of each whole in the low 6 bits of bytes 0..7, the last
 * four split into a low nibble (bytes 8..11) and the spare top 2 bits of
 * bytes 0..7. */
static inline void q4_k_scale_min(int s, const uint8_t *q, int *sc, int *mn)
{
    if (s < 4) {
        *sc = q[s] & 63;
        *mn = q[s + 4] & 63;
    } else {
        *sc = (q[s + 4] & 0x0f) | ((q[s - 4] >> 6) << 4);
        *mn = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
    }
}

/* Q3_K's sixteen signed 6-bit scales (-32..31): low nibbles in bytes 0..7
 * (scales 0..7 in the low halves, 8..15 in the high halves), the top bit
 * pairs of scales k, k+4, k+8, k+12 in byte 8 + k. */
static inline int q3_k_scale(const uint8_t *sc, int s)
{
    const int lo = s < 8 ? sc[s] & 15 : sc[s - 8] >> 4;
    const int hi = (sc[8 + (s % 4)] >> (2 * (s / 4))) & 3;
    return lo + 16 * hi - 32;
}

/* IQ4_XS's 6-bit sub-block scale ib (0..63; the decoder subtracts 32). */
static inline int iq4_xs_scale(const block_iq4_xs *b, int ib)
{
    return ((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 15) |
           (((b->scales_h >> (2 * ib)) & 3) << 4);
}

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

/* The fp16 scale fields of a block type strata decodes: their byte offsets
 * within a block go to offs[0..count-1] (d first, then dmin / m where the
 * type has one); returns count (1 or 2), 0 for the element types (F32,
 * F16, BF16) and types strata cannot decode.  Every decoded value is linear
 * in these fields together, which the loader's finiteness check and
 * mkmodel's random blocks rely on. */
int type_fp16_scales(int id, int offs[2]);

/* One pass over the fp16 scale fields of nbytes of `id` blocks: returns 1
 * and the first block whose scale is NaN or infinite (its index, which
 * field: 0 = d, 1 = dmin / m, and the raw bits), 0 if all are finite or
 * the type has no fp16 scale fields.  A non-finite scale would turn every
 * product with that block into NaN at run time, far from the cause. */
int type_find_bad_scale(int id, const void *data, uint64_t nbytes, uint64_t *block,
                        int *field, uint16_t *bits);

/* ---- scalar conversions (exact ggml semantics, doc/formats.md §2.1) ---- */
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f); /* round to nearest even */
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

/* IQ3_XXS tables (doc/formats.md §2.7), defined in model/iq3xxs_tables.c. */
extern const uint32_t iq3xxs_grid[256];
extern const uint8_t iq3xxs_signs[128];
/* Grids of the IQ2 and IQ3_S types (doc/quant.md), model/iq_grids.c, and the
 * IQ4_NL / IQ4_XS level table, model/quant_legacy.c. */
extern const uint64_t iq2xxs_grid[256];
extern const uint64_t iq2xs_grid[512];
extern const uint64_t iq2s_grid[1024];
extern const uint32_t iq3s_grid[512];
extern const int8_t iq4nl_values[16];

#endif
