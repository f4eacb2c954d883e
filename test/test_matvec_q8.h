/* test_matvec_q8.h: what the suites of the quantized-activation kernels
 * share (test_matvec_q8.c, test_matvec_q8k.c, test_matvec_q16k.c,
 * test_matvec_k256.c). */
#ifndef STRATA_TEST_MATVEC_Q8_H
#define STRATA_TEST_MATVEC_Q8_H

#include <stddef.h>
#include <stdint.h>

/* rows x cols of weight type `type`: random bytes with finite, non-zero
 * fp16 scales (and minima) in every block, so every code and scale bit
 * pattern the format allows; malloc'ed. */
uint8_t *q8_random_blocks(int type, int64_t rows, int64_t cols, uint64_t seed);

/* An activation format with one scale per 256 values for Q4_K and Q6_K
 * (act_q8k, act_q16k), for the checks their suites share
 * (test_matvec_k256.c). */
typedef struct k256_format {
    const char *name;
    size_t size; /* bytes per block of 256 */
    void (*quantize)(const float *x, int64_t cols, void *xq); /* the C twin */
    /* the rows kernel of a type: the C twin (avx2 = 0) or the AVX2 tiles */
    void (*rows)(int avx2, int type, const uint8_t *w, size_t row_bytes, int64_t nrows,
                 int64_t cols, const void *xq, int64_t n, float *y, int64_t ystride);
    int act, q8k; /* the cpu_matmul_fast settings that take it */
    /* block b's 256 values as the kernels see them (d times the codes),
     * and its d */
    void (*decode)(const void *xq, int64_t b, float *xd, float *d);
} k256_format;

/* y (n x rows) of type's weights through another format's C twin, for
 * the accuracy line k256_against_float64 prints. */
typedef void (*k256_other_fn)(int k, int type, const uint8_t *w, size_t row_bytes, int64_t rows,
                              int64_t cols, const float *x, int64_t n, float *y);

/* Both twins of f for Q4_K and Q6_K (37 rows, 5 activation rows, cols
 * columns) against float64: on the codes within 1e-5 of sum |w x|, on the
 * floats within sum_c |w_c| step_frac d_c plus that; prints the mean
 * relative error |y - exact| / sum |w x| of f's C twin beside those of
 * the n_other formats other() makes (named other_names) and returns the
 * larger of f's two. */
double k256_against_float64(const k256_format *f, int64_t cols, uint64_t x_seed, uint64_t w_seed,
                            double step_frac, k256_other_fn other, const char *const *other_names,
                            int n_other);

/* n rows of x in the format (C twin); calloc'ed. */
void *k256_quantize_rows(const k256_format *f, const float *x, int64_t n, int64_t cols);
/* The AVX2 tiles bitwise the C twin for 1..11, 16 and 17 activation rows
 * (every split into tiles of 8, 4, 2, 1), 37 weight rows, rows of 256, 768
 * and 4864 columns. */
void k256_tiles_match_c_twin(const k256_format *f, uint64_t x_seed, uint64_t w_seed);
/* cpu_matmul_fast with f's settings: a batch of 9 rows on 1, 2 and 3
 * threads bitwise one row at a time, and bitwise the C twin's. */
void k256_path_is_invariant(const k256_format *f, uint64_t x_seed, uint64_t w_seed);

#endif
