/* dot_kernels.h: the fused block kernels behind cpu_matmul_fast (internal
 * to kernels/cpu and its tests).
 *
 * A rows kernel computes, for nrows consecutive weight rows and n
 * activation rows,
 *     y[i * ystride + r] = sum_c W[r][c] * x[i * cols + c]
 * decoding each 32-weight sub-block straight into registers and using it
 * for every activation row before moving on (no row buffer; in a batch,
 * each block is read and decoded once per tile of activation rows).
 *
 * Reduction order: each output element has its own accumulators, fed
 * sub-block after sub-block in column order, and summed the same way at
 * the end, so a result does not depend on n, on nrows, or on the thread
 * that computes it.  The scalar and AVX2 kernels round differently from
 * each other (and from the reference); a process uses one of them.
 *
 * ISA rule (checked by test/test_matvec.c): every function compiled for
 * AVX2/FMA/F16C has a name ending in `_avx2` (`_avx512` for the int8
 * kernels that add AVX512-VNNI, act_q8.h), and only those contain AVX
 * instructions; they are called only after __builtin_cpu_supports. */
#ifndef STRATA_DOT_KERNELS_H
#define STRATA_DOT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

typedef void (*fast_rows_fn)(const uint8_t *w, size_t row_bytes, int64_t nrows,
                             int64_t cols, const float *x, int64_t n, float *y,
                             int64_t ystride);

/* The kernel for a type, or NULL if it has none (cpu_matmul_fast then
 * decodes 256-element chunks with the type's own decoder). */
fast_rows_fn fast_rows_scalar(int type);   /* dot_scalar.c, portable */
fast_rows_fn fast_rows_vec(int type);      /* dot_avx2.c; NULL off x86-64 */

/* Scalar sub-block decoders (dot_scalar_kiq.c): the 32 weights of
 * sub-block s of a row, as the reference decoder computes them. */
void dec_sub_q5_0(const uint8_t *row, int64_t s, float *w);
void dec_sub_q5_1(const uint8_t *row, int64_t s, float *w);
void dec_sub_iq4_nl(const uint8_t *row, int64_t s, float *w);
void dec_sub_q2_k(const uint8_t *row, int64_t s, float *w);
void dec_sub_q3_k(const uint8_t *row, int64_t s, float *w);
void dec_sub_q4_k(const uint8_t *row, int64_t s, float *w);
void dec_sub_q5_k(const uint8_t *row, int64_t s, float *w);
void dec_sub_q6_k(const uint8_t *row, int64_t s, float *w);
void dec_sub_iq2_xxs(const uint8_t *row, int64_t s, float *w);
void dec_sub_iq2_xs(const uint8_t *row, int64_t s, float *w);
void dec_sub_iq2_s(const uint8_t *row, int64_t s, float *w);
void dec_sub_iq3_s(const uint8_t *row, int64_t s, float *w);
void dec_sub_iq4_xs(const uint8_t *row, int64_t s, float *w);

/* The AVX2 kernels by family (dot_avx2_k.c: the K-quants; dot_avx2_iq.c:
 * IQ2_*, IQ3_S, IQ4_XS, IQ4_NL, Q5_0, Q5_1); NULL for other types. */
fast_rows_fn fast_rows_vec_k(int type);
fast_rows_fn fast_rows_vec_iq(int type);

/* f32 dot products for the decode-a-chunk fallback. */
float fast_dot_f32(const float *a, const float *b, int64_t n);
float fast_dot_f32_avx2(const float *a, const float *b, int64_t n);

/* 1 if this CPU runs the _avx2 functions (AVX2, FMA and F16C). */
int fast_cpu_avx2_ok(void);

/* Which kernels cpu_matmul_fast uses: -1 the best this CPU has (default),
 * 0 scalar, 1 AVX2 (ignored without it).  Returns the level in effect.
 * For tests and benchmarks; call it while no matmul runs. */
int cpu_matmul_fast_set_isa(int level);
/* The level in effect (0 scalar, 1 AVX2): the other fast paths follow it. */
int cpu_fast_isa(void);

/* The KV store's AVX2 twins (kv_avx2.c): the bits of cpu_quant_k8,
 * cpu_quant_v4nl and the rotation's plain C twins (rotate.c), which
 * cpu_kv_rotate / cpu_kv_unrotate use without AVX2. */
void cpu_quant_k8_avx2(const float *x, int n, int8_t *q, uint16_t *d);
void cpu_quant_v4nl_avx2(const float *x, int n, uint8_t *q, uint16_t *d);
void cpu_kv_rotate_avx2(float *x, int n_heads, int head_dim);
void cpu_kv_unrotate_avx2(float *x, int n_heads, int head_dim);
void cpu_kv_rotate_c(float *x, int n_heads, int head_dim);
void cpu_kv_unrotate_c(float *x, int n_heads, int head_dim);

/* cpu_attention_fast with the twin chosen by the caller (avx2: 1 the AVX2
 * twin where the CPU has it, 0 the plain C one); for tests. */
struct kv_view;
void cpu_attention_fast_isa(const float *q, int n_head, const struct kv_view *kv, int32_t n_ctx,
                            float scale, float *out, int avx2);
void cpu_attention_fast_window_isa(const float *q, int n_head, const struct kv_view *kv,
                                   int32_t t0, int32_t n_ctx, float scale, float *out, int avx2);

#endif
