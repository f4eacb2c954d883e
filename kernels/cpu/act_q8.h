/* act_q8.h: int8 activations for the fused block kernels (internal to
 * kernels/cpu and its tests).
 *
 * cpu_matmul_fast quantizes each activation row once per call into blocks
 * of 32 (the same grid every weight type's sub-blocks sit on, 256-weight
 * super-blocks included) and the weight blocks are dotted against the int8
 * codes in integers (AVX2: maddubs), with one float multiply per 32
 * weights.  Recipe: d = max|x| / 127, q = nearbyint(x / d) (round half to
 * even, which the AVX2 quantizer reproduces bit for bit), s = d * sum(q),
 * which carries the terms a weight type adds per block (Q4_1's minimum,
 * the -8 / -16 offsets of Q4_0 / Q5_0, Q4_K's minima).
 *
 * One block format for every type by default, not ggml's Q8_K for the
 * 256-weight types: a row is quantized once for whatever types the
 * matrices it meets have, and a scale per 32 values is closer to the
 * floats than one per 256 (the accuracy cost is stated in
 * test/test_matvec_q8.c).  Q4_K and Q6_K take one scale per 256 instead
 * (their super-blocks then sum in int32): act_q16k below with the 16-bit
 * codes, the Q8_K-style act_q8k with the int8 ones (CPU_Q8K_*).
 *
 * A q8 rows kernel computes y[i * ystride + r] = sum_c W[r][c] * x_i[c]
 * for nrows weight rows and n quantized activation rows.  Per output
 * element: an exact int32 dot per 32-block, scaled by the weight's and
 * the activation's d into float accumulators in block order (even and
 * odd sub-blocks apart), plus the s terms summed apart: the same
 * operations whatever n or the thread, so the invariance rule holds.  The
 * scalar, AVX2 and AVX512-VNNI twins do the same operations in the same
 * order and agree bit for bit (dot_q8_tile_avx2.c).
 *
 * Sixteen-bit activations (act_q16, act_q16_quantize, the q16 kernels):
 * blocks of 32 int16 codes v = 256 q + lo, x ~ d v, so a code has 2^-8 of
 * the int8 step.  q is the int8 code of the recipe above; lo the rounded
 * remainder nearbyint(256 (x / d8 - q)), d8 = max|x| / 127, clamped to
 * +-127; d = d8 / 256 and s = d * sum(v).  A kernel widens the decoded
 * weight sub-block to int16 once (Q6_K: times its per-16 scales) and dots
 * it with the codes in int16 pairs (madd / VNNI's dpwssd): lane k of the
 * int32 dot holds elements 2k, 2k+1, 16+2k, 17+2k, exact (at most 2^29);
 * the float factors, accumulators and reduction are the int8 kernels'.
 * Int8 activations move a 135M model's logits by ~1e-2 relative, enough
 * to flip its greedy answers; 16 bits leave them where float activations
 * do (doc/cpu.md). */
#ifndef STRATA_ACT_Q8_H
#define STRATA_ACT_Q8_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct act_q8 {
    float d;       /* scale */
    float s;       /* d * sum(q) */
    int8_t q[32];
} act_q8;

typedef struct act_q16 {
    float d;       /* scale of the 16-bit codes */
    float s;       /* d * sum(v) */
    int16_t v[32]; /* 256 q + lo, |v| <= 32639 */
} act_q16;

/* Q8_K-style activations for the 256-weight types (Q4_K, Q6_K): int8
 * codes with one scale per 256 values, d = max|x| / 127, q = nearbyint(x /
 * d) (the recipe of act_q8 over 256 values instead of 32), and the sums of
 * each 16 codes, which carry Q4_K's minima.  The kernels (q8k_rows_*) sum a
 * whole super-block in int32 and convert and multiply once per 256
 * weights (dot_q8k_scalar.c says how, and what it costs in accuracy). */
typedef struct act_q8k {
    int8_t q[256];
    int16_t bsums[16]; /* sum of codes 16 g .. 16 g + 15 */
    float d;
    uint8_t pad_[28];  /* 320 bytes: each block's codes start 32-aligned */
} act_q8k;

/* The 16-bit codes with one scale per 256 values, for Q4_K and Q6_K: the
 * act_q16 recipe over 256 values instead of 32 (d8 = max|x| / 127 over the
 * 256, v = 256 q + lo, d = d8 / 256), and the sum of each 32 codes, which
 * carries Q4_K's minima.  A super-block of weights times its sub-block
 * scales sums exactly in int32 against them (dot_q16k_scalar.c says how
 * and why it stays as close to the floats as act_q16). */
typedef struct act_q16k {
    int16_t v[256];    /* 256 q + lo, |v| <= 32639 */
    int32_t bsums[8];  /* sum of codes 32 s .. 32 s + 31 */
    float d;           /* scale of the codes */
    uint8_t pad_[28];  /* 576 bytes: each block's codes start 32-aligned */
} act_q16k;

/* The 16-bit code of t = x / d8 (d8 the block's int8 step): the int8 code
 * r = nearbyint(t) clamped to +-127, and the remainder in 256ths of a
 * step, nearbyint(256 (t - r)) clamped to +-127 (t - r is exact: r is t's
 * nearest integer, or t is out of range and r its bound); NaN codes as 0.
 * act_q16 and act_q16k share it. */
static inline int act_q16_code(float t)
{
    float r = nearbyintf(t);
    r = r == r ? (r < -127.0f ? -127.0f : r > 127.0f ? 127.0f : r) : 0.0f;
    float l = nearbyintf((t - r) * 256.0f);
    l = l == l ? (l < -127.0f ? -127.0f : l > 127.0f ? 127.0f : l) : 0.0f;
    return 256 * (int)r + (int)l;
}

/* What the plain C twins share: a block's 16-bit field (an fp16 scale),
 * read unaligned, and the sum of eight float lanes in the AVX2 twins'
 * order (hsum_avx2): ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)). */
static inline uint16_t act_ld16(const void *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

static inline float act_hsum8(const float *a)
{
    const float s0 = a[0] + a[4], s1 = a[1] + a[5], s2 = a[2] + a[6], s3 = a[3] + a[7];
    return (s0 + s2) + (s1 + s3);
}

/* xq[cols / 32] from x[cols]; cols a multiple of 32.  NaN codes as 0. */
void act_q8_quantize(const float *x, int64_t cols, act_q8 *xq);
void act_q8_quantize_avx2(const float *x, int64_t cols, act_q8 *xq); /* same bits */
/* The 16-bit codes. */
void act_q16_quantize(const float *x, int64_t cols, act_q16 *xq);
void act_q16_quantize_avx2(const float *x, int64_t cols, act_q16 *xq); /* same bits */

typedef void (*q8_rows_fn)(const uint8_t *w, size_t row_bytes, int64_t nrows, int64_t cols,
                           const act_q8 *x, int64_t n, float *y, int64_t ystride);

/* The kernel for a weight type, or NULL (then cpu_matmul_fast keeps float
 * activations): Q4_0 Q4_1 Q5_0 Q8_0 Q4_K Q6_K. */
q8_rows_fn q8_rows_scalar(int type); /* dot_q8_scalar.c */
q8_rows_fn q8_rows_avx2(int type);   /* dot_q8_tile_avx2.c; NULL off x86-64 */
/* The same kernels with AVX512-VNNI's dpbusd for the integer dots (on
 * 256-bit registers): the same bits as q8_rows_avx2; call only where
 * fast_cpu_vnni_ok().  Functions compiled for it are named *_avx512. */
q8_rows_fn q8_rows_avx512(int type); /* dot_q8_tile_avx2.c; NULL off x86-64 */
/* The kernels of the 16-bit codes (the same types; twins as above, the
 * VNNI one with dpwssd). */
typedef void (*q16_rows_fn)(const uint8_t *w, size_t row_bytes, int64_t nrows, int64_t cols,
                            const act_q16 *x, int64_t n, float *y, int64_t ystride);
q16_rows_fn q16_rows_scalar(int type); /* dot_q8_scalar.c */
q16_rows_fn q16_rows_avx2(int type);   /* dot_q8_tile_avx2.c; NULL off x86-64 */
q16_rows_fn q16_rows_avx512(int type); /* dot_q8_tile_avx2.c; NULL off x86-64 */
/* One activation row (a decode step) of Q5_0, Q8_0 and Q4_1 on the 16-bit codes,
 * AVX2: fewer instructions per sub-block than the tiles, the same bits
 * (dot_q16_dec_avx2.c); q16_rows_avx2 hands n = 1 to them.  They return 0
 * (nothing written) for rows they do not take (over 32768 columns, or
 * activation sums too large to scale exactly): the tiles do those.
 * x86-64 only. */
int q16dec_q5_0_avx2(const uint8_t *w, size_t row_bytes, int64_t nrows, int64_t cols,
                     const act_q16 *x, float *y);
int q16dec_q8_0_avx2(const uint8_t *w, size_t row_bytes, int64_t nrows, int64_t cols,
                     const act_q16 *x, float *y);
int q16dec_q4_1_avx2(const uint8_t *w, size_t row_bytes, int64_t nrows, int64_t cols,
                     const act_q16 *x, float *y);
/* The same for Q4_K and Q6_K (dot_q16k_dec_avx2.c; cols a multiple of 256). */
int q16dec_q4_k_avx2(const uint8_t *w, size_t row_bytes, int64_t nrows, int64_t cols,
                     const act_q16 *x, float *y);
int q16dec_q6_k_avx2(const uint8_t *w, size_t row_bytes, int64_t nrows, int64_t cols,
                     const act_q16 *x, float *y);
/* The Q8_K-style kernels: Q4_K and Q6_K only (NULL for other types);
 * cols a multiple of 256.  Scalar and AVX2 twins give the same bits. */
typedef void (*q8k_rows_fn)(const uint8_t *w, size_t row_bytes, int64_t nrows, int64_t cols,
                            const act_q8k *x, int64_t n, float *y, int64_t ystride);
/* xq[cols / 256] from x[cols]; cols a multiple of 256.  NaN codes as 0. */
void act_q8k_quantize(const float *x, int64_t cols, act_q8k *xq);      /* dot_q8k_scalar.c */
void act_q8k_quantize_avx2(const float *x, int64_t cols, act_q8k *xq); /* same bits */
q8k_rows_fn q8k_rows_scalar(int type); /* dot_q8k_scalar.c */
q8k_rows_fn q8k_rows_avx2(int type);   /* dot_q8k_avx2.c; NULL off x86-64 */
/* The kernels on act_q16k: Q4_K and Q6_K only (NULL for other types);
 * cols a multiple of 256.  Scalar and AVX2 twins give the same bits. */
typedef void (*q16k_rows_fn)(const uint8_t *w, size_t row_bytes, int64_t nrows, int64_t cols,
                             const act_q16k *x, int64_t n, float *y, int64_t ystride);
/* xq[cols / 256] from x[cols]; cols a multiple of 256.  NaN codes as 0. */
void act_q16k_quantize(const float *x, int64_t cols, act_q16k *xq);      /* dot_q16k_scalar.c */
void act_q16k_quantize_avx2(const float *x, int64_t cols, act_q16k *xq); /* same bits */
q16k_rows_fn q16k_rows_scalar(int type); /* dot_q16k_scalar.c */
q16k_rows_fn q16k_rows_avx2(int type);   /* dot_q16k_avx2.c; NULL off x86-64 */
/* 1 if this CPU runs the *_avx512 kernels (AVX2 set, AVX512F, VL, VNNI). */
int fast_cpu_vnni_ok(void);

/* Whether cpu_matmul_fast quantizes activations (on a CPU with AVX2; the
 * plain C twins are the tests' reference): -1 the default (CPU_ACT_DEFAULT
 * unless STRATA_MATMUL_F32=1 or STRATA_MATMUL_ACT=8|16), 0 float
 * activations everywhere, 1 int8 where a kernel exists, 2 the 16-bit
 * codes there.  Returns the setting in effect.  For tests and benchmarks;
 * call it while no matmul runs. */
#define CPU_ACT_F32 0
#define CPU_ACT_Q8 1
#define CPU_ACT_Q16 2
#define CPU_ACT_DEFAULT CPU_ACT_Q16
int cpu_matmul_fast_set_q8(int on);
/* Which codes Q4_K and Q6_K take where activations are quantized:
 * CPU_Q8K_NEVER (STRATA_MATMUL_Q8K=0: the other types' format, a scale
 * per 32), CPU_Q8K_ALWAYS (STRATA_MATMUL_Q8K=1: act_q8k, int8 with a scale
 * per 256, also beside the 16-bit codes: it moved Gemma 3 270M's logits by
 * 6e-2 against float64, doc/cpu.md), CPU_Q8K_SAME_WIDTH (the default: a
 * scale per 256 in the width the other types use, act_q16k with the
 * 16-bit codes, act_q8k with the int8 ones).  -1 re-reads the
 * environment.  Returns the setting.  Call while no matmul runs. */
#define CPU_Q8K_NEVER 0
#define CPU_Q8K_ALWAYS 1
#define CPU_Q8K_SAME_WIDTH 2
#define CPU_Q8K_DEFAULT CPU_Q8K_SAME_WIDTH
int cpu_matmul_fast_set_q8k(int on);

#endif
