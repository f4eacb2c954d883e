/* test_matvec_q8k.c: suite "matvec_q8k" — Q4_K and Q6_K on Q8_K-style
 * activations (act_q8k: int8 codes, one scale per 256; kernels/cpu/act_q8.h,
 * dot_q8k_scalar.c, dot_q8k_avx2.c).
 *
 * Judges and tolerances:
 *  - the quantizer's two twins give the same bytes; every code is within
 *    half a step of its float (|x - d q| <= d / 2, plus one rounding), and
 *    bsums are the sums of each 16 codes;
 *  - both kernel twins against float64 sums of the decoded weights times
 *    the decoded activations (d * q): the integer sums are exact, so only
 *    the per-super-block float FMA and the final adds remain: 1e-5 of
 *    sum |w x|;
 *  - the accuracy cost against float64 sums of the weights times the float
 *    activations: each activation moves by at most half its super-block's
 *    step, so |y - y_exact| <= sum_c |w_c| d_c / 2 (+ 1e-5 of sum |w x|);
 *    the mean relative error |y - y_exact| / sum |w x| on Gaussian
 *    activations is printed beside that of act_q8 (a scale per 32) and of
 *    act_q16, and held below 2e-3 (measured, 768 / 4864 columns: Q4_K
 *    3.4e-4 / 1.6e-4, Q6_K 3.5e-4 / 1.7e-4; act_q8 3.3e-4 / 1.5e-4 and
 *    3.1e-4 / 1.3e-4; act_q16 about 1e-6: Gaussian activations have no
 *    outliers, so the coarser scale costs little here; a model's costs are
 *    in doc/cpu.md);
 *  - the AVX2 tiles against the C twin: bitwise, for 1..11, 16 and 17
 *    activation rows (every split into tiles of 8, 4, 2, 1), 37 weight rows,
 *    rows of 256, 768 and 4864 columns;
 *  - cpu_matmul_fast on this path: a batch of 9 rows on 1, 2 and 3 threads
 *    is bitwise one row at a time (the invariance rule), and bitwise the C
 *    twin's. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/act_q8.h"
#include "kernels/cpu/dot_kernels.h"
#include "kernels/cpu/threadpool.h"
#include "kernels/ops.h"
#include "model/quant.h"
#include "test_matvec_q8.h"

START_TEST(quantizer_twins_agree_and_round_to_half_a_step)
{
    const int64_t cols = 4096, nb = cols / 256;
    float *x = malloc(cols * sizeof *x);
    act_q8k *a = calloc(nb, sizeof *a), *b = calloc(nb, sizeof *b);
    test_fill_normal(x, cols, 3.0f, 121);
    x[5] = 0.0f;
    for (int j = 512; j < 768; j++) /* an all-zero super-block: d = 0, codes 0 */
        x[j] = 0.0f;
    x[1000] = 40.0f; /* an outlier: its block's other codes get coarse */
    act_q8k_quantize(x, cols, a);
    double err_sum = 0;
    int64_t counted = 0;
    for (int64_t blk = 0; blk < nb; blk++) {
        const float d = a[blk].d;
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int j = 16 * g; j < 16 * g + 16; j++) {
                const float xv = x[256 * blk + j];
                const int c = a[blk].q[j];
                ck_assert_msg(fabsf(xv - d * c) <= d * 0.5f * (1 + 1e-6f),
                              "block %lld elem %d: x %.9g code %d d %.9g", (long long)blk, j, xv,
                              c, d);
                ck_assert(c >= -127 && c <= 127);
                if (d > 0) {
                    err_sum += fabsf(xv - d * c) / d;
                    counted++;
                }
                sum += c;
            }
            ck_assert_int_eq(a[blk].bsums[g], sum);
        }
    }
    ck_assert(a[2].d == 0.0f && a[2].bsums[0] == 0);
    err_sum /= (double)counted;
    ck_assert_msg(err_sum > 0.2 && err_sum < 0.3, "mean error %.3g steps", err_sum);
    if (!fast_cpu_avx2_ok()) {
        test_note_skip("quantizer_twins_agree (AVX2 twin)", "cpu", "CPU lacks AVX2/FMA/F16C");
    } else {
        act_q8k_quantize_avx2(x, cols, b);
        ck_assert_msg(!memcmp(a, b, nb * sizeof *a), "AVX2 quantizer differs from C");
    }
    free(x);
    free(a);
    free(b);
}
END_TEST

/* y (n x rows) of one of the formats over 32 through the C twins (k = 0:
 * act_q8, 1: act_q16), for the accuracy line. */
static void rows_on_32(int k, int type, const uint8_t *w, size_t rb, int64_t rows, int64_t cols,
                       const float *x, int64_t n, float *y)
{
    const int64_t nsub = cols / 32;
    void *xq = calloc(n * nsub, k ? sizeof(act_q16) : sizeof(act_q8));
    for (int64_t i = 0; i < n; i++) {
        if (k)
            act_q16_quantize(x + i * cols, cols, (act_q16 *)xq + i * nsub);
        else
            act_q8_quantize(x + i * cols, cols, (act_q8 *)xq + i * nsub);
    }
    if (k)
        q16_rows_scalar(type)(w, rb, rows, cols, xq, n, y, rows);
    else
        q8_rows_scalar(type)(w, rb, rows, cols, xq, n, y, rows);
    free(xq);
}

static void q8k_quantize(const float *x, int64_t cols, void *xq)
{
    act_q8k_quantize(x, cols, xq);
}

static void q8k_rows(int avx2, int type, const uint8_t *w, size_t rb, int64_t nrows, int64_t cols,
                     const void *xq, int64_t n, float *y, int64_t ystride)
{
    (avx2 ? q8k_rows_avx2 : q8k_rows_scalar)(type)(w, rb, nrows, cols, xq, n, y, ystride);
}

static void q8k_decode(const void *xq, int64_t b, float *xd, float *d)
{
    const act_q8k *a = (const act_q8k *)xq + b;
    for (int j = 0; j < 256; j++)
        xd[j] = a->d * (float)a->q[j];
    *d = a->d;
}

/* act_q8k beside the 16-bit codes (STRATA_MATMUL_Q8K=1) */
static const k256_format q8k_format = {"act_q8k", sizeof(act_q8k), q8k_quantize, q8k_rows,
                                       CPU_ACT_Q16, CPU_Q8K_ALWAYS, q8k_decode};

START_TEST(kernels_match_float64_on_the_codes)
{
    if (!fast_cpu_avx2_ok())
        test_note_skip("kernels_match_float64_on_the_codes (AVX2 twin)", "cpu",
                       "CPU lacks AVX2/FMA/F16C");
    static const char *const others[] = {"act_q8", "act_q16"};
    const double worst = k256_against_float64(&q8k_format, _i ? 4864 : 768, 131, 1700, 0.5,
                                              rows_on_32, others, 2);
    ck_assert_msg(worst < 2e-3, "mean relative error %.3g", worst);
}
END_TEST

START_TEST(tiles_match_the_c_twin_bitwise)
{
    if (!fast_cpu_avx2_ok())
        TEST_SKIP("cpu", "CPU lacks AVX2/FMA/F16C");
    k256_tiles_match_c_twin(&q8k_format, 151, 1900);
}
END_TEST

START_TEST(q8k_path_is_invariant)
{
    if (!fast_cpu_avx2_ok())
        TEST_SKIP("cpu", "CPU lacks AVX2/FMA/F16C");
    k256_path_is_invariant(&q8k_format, 141, 1800);
}
END_TEST

static Suite *matvec_q8k_suite(void)
{
    Suite *s = suite_create("matvec_q8k");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, quantizer_twins_agree_and_round_to_half_a_step);
    tcase_add_loop_test(tc, kernels_match_float64_on_the_codes, 0, 2); /* 768, 4864 columns */
    tcase_add_test(tc, tiles_match_the_c_twin_bitwise);
    tcase_add_test(tc, q8k_path_is_invariant);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(matvec_q8k_suite)
