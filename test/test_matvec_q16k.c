/* test_matvec_q16k.c: suite "matvec_q16k" — Q4_K and Q6_K on the 16-bit
 * codes with one scale per 256 (act_q16k; kernels/cpu/act_q8.h,
 * dot_q16k_scalar.c, dot_q16k_avx2.c), the CPU's default for these types.
 *
 * Judges and tolerances:
 *  - the quantizer's two twins give the same bytes; every code is within
 *    one 16-bit step d of its float (half a step but where the remainder's
 *    clamp bites), |v| <= 32639, and bsums are the sums of each 32 codes;
 *  - both kernel twins against float64 sums of the decoded weights times
 *    the decoded activations (d * v): the integer sums are exact, so only
 *    the float FMAs and the final adds remain: 1e-5 of sum |w x|;
 *  - the accuracy cost against float64 sums of the weights times the float
 *    activations: |y - y_exact| <= sum_c |w_c| d_c (+ 1e-5 of sum |w x|);
 *    the mean relative error on Gaussian activations is printed beside
 *    act_q16's (a scale per 32) and act_q8k's (int8, a scale per 256) and
 *    held below 1e-5 (act_q8k's is about 3e-4);
 *  - the int32 sums at their bounds: weights and scales at their largest
 *    magnitude against codes of 32639 give float64's value within 1e-6
 *    (an overflow would flip a sign);
 *  - the AVX2 tiles against the C twin: bitwise, for 1..11, 16 and 17
 *    activation rows (every split into tiles of 8, 4, 2, 1), 37 weight rows,
 *    rows of 256, 768 and 4864 columns;
 *  - cpu_matmul_fast on this path (the default settings): a batch of 9
 *    rows on 1, 2 and 3 threads is bitwise one row at a time, and bitwise
 *    the C twin's. */
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

static const int k_types[] = {GGML_TYPE_Q4_K, GGML_TYPE_Q6_K};
#define N_K_TYPES (sizeof k_types / sizeof k_types[0])

static void q16k_quantize(const float *x, int64_t cols, void *xq)
{
    act_q16k_quantize(x, cols, xq);
}

static void q16k_rows(int avx2, int type, const uint8_t *w, size_t rb, int64_t nrows,
                      int64_t cols, const void *xq, int64_t n, float *y, int64_t ystride)
{
    (avx2 ? q16k_rows_avx2 : q16k_rows_scalar)(type)(w, rb, nrows, cols, xq, n, y, ystride);
}

static void q16k_decode(const void *xq, int64_t b, float *xd, float *d)
{
    const act_q16k *a = (const act_q16k *)xq + b;
    for (int j = 0; j < 256; j++)
        xd[j] = a->d * (float)a->v[j];
    *d = a->d;
}

static const k256_format q16k_format = {"act_q16k", sizeof(act_q16k), q16k_quantize, q16k_rows,
                                        CPU_ACT_Q16, CPU_Q8K_SAME_WIDTH, q16k_decode};

START_TEST(quantizer_twins_agree_and_stay_within_a_step)
{
    const int64_t cols = 4096, nb = cols / 256;
    float *x = malloc(cols * sizeof *x);
    test_fill_normal(x, cols, 3.0f, 221);
    x[5] = 0.0f;
    for (int j = 512; j < 768; j++) /* an all-zero super-block: d = 0, codes 0 */
        x[j] = 0.0f;
    x[1000] = 40.0f; /* an outlier: its block's other codes get coarser */
    act_q16k *a = k256_quantize_rows(&q16k_format, x, 1, cols), *b = calloc(nb, sizeof *b);
    double err_sum = 0;
    int64_t counted = 0;
    for (int64_t blk = 0; blk < nb; blk++) {
        const float d = a[blk].d;
        for (int s = 0; s < 8; s++) {
            int sum = 0;
            for (int j = 32 * s; j < 32 * s + 32; j++) {
                const float xv = x[256 * blk + j];
                const int c = a[blk].v[j];
                ck_assert_msg(fabsf(xv - d * c) <= d * (1 + 1e-5f),
                              "block %lld elem %d: x %.9g code %d d %.9g", (long long)blk, j, xv,
                              c, d);
                ck_assert(c >= -32639 && c <= 32639);
                if (d > 0) {
                    err_sum += fabsf(xv - d * c) / d;
                    counted++;
                }
                sum += c;
            }
            ck_assert_int_eq(a[blk].bsums[s], sum);
        }
    }
    ck_assert(a[2].d == 0.0f && a[2].bsums[0] == 0 && a[2].v[17] == 0);
    err_sum /= (double)counted;
    ck_assert_msg(err_sum > 0.2 && err_sum < 0.3, "mean error %.3g steps", err_sum);
    if (!fast_cpu_avx2_ok()) {
        test_note_skip("quantizer_twins_agree (AVX2 twin)", "cpu", "CPU lacks AVX2/FMA/F16C");
    } else {
        act_q16k_quantize_avx2(x, cols, b);
        ck_assert_msg(!memcmp(a, b, nb * sizeof *a), "AVX2 quantizer differs from C");
    }
    free(x);
    free(a);
    free(b);
}
END_TEST

/* y (n x rows) through the C twin of one of the other formats: 0 act_q16
 * (a scale per 32), 1 act_q8k (int8, a scale per 256). */
static void rows_other(int k, int type, const uint8_t *w, size_t rb, int64_t rows, int64_t cols,
                       const float *x, int64_t n, float *y)
{
    if (k == 0) {
        act_q16 *xq = calloc(n * (cols / 32), sizeof *xq);
        for (int64_t i = 0; i < n; i++)
            act_q16_quantize(x + i * cols, cols, xq + i * (cols / 32));
        q16_rows_scalar(type)(w, rb, rows, cols, xq, n, y, rows);
        free(xq);
    } else {
        act_q8k *xq = calloc(n * (cols / 256), sizeof *xq);
        for (int64_t i = 0; i < n; i++)
            act_q8k_quantize(x + i * cols, cols, xq + i * (cols / 256));
        q8k_rows_scalar(type)(w, rb, rows, cols, xq, n, y, rows);
        free(xq);
    }
}

START_TEST(kernels_match_float64_on_the_codes)
{
    if (!fast_cpu_avx2_ok())
        test_note_skip("kernels_match_float64_on_the_codes (AVX2 twin)", "cpu",
                       "CPU lacks AVX2/FMA/F16C");
    static const char *const others[] = {"act_q16", "act_q8k"};
    const double worst = k256_against_float64(&q16k_format, _i ? 4864 : 768, 231, 2700, 1.0,
                                              rows_other, others, 2);
    ck_assert_msg(worst < 1e-5, "mean relative error %.3g", worst);
}
END_TEST

/* Every weight and integer scale at its largest magnitude against codes of
 * 32639: the int32 sums at their bound (dot_q16k_scalar.c), against
 * float64. */
START_TEST(int32_sums_hold_at_their_bounds)
{
    const int64_t cols = 512, nb = cols / 256;
    act_q16k *xq = calloc(nb, sizeof *xq);
    for (int64_t b = 0; b < nb; b++) {
        for (int j = 0; j < 256; j++)
            xq[b].v[j] = 32639;
        for (int s = 0; s < 8; s++)
            xq[b].bsums[s] = 32 * 32639;
        xq[b].d = 1.0f / 4096.0f;
    }
    uint8_t w4[2 * sizeof(block_q4_k)], w6[2 * sizeof(block_q6_k)];
    memset(w4, 0xff, sizeof w4); /* codes 15, scales and minima 63 */
    memset(w6, 0, sizeof w6);    /* codes 0 - 32 */
    for (int b = 0; b < 2; b++) {
        block_q4_k *k4 = (block_q4_k *)w4 + b;
        block_q6_k *k6 = (block_q6_k *)w6 + b;
        k4->d = 0x3c00;    /* 1.0 */
        k4->dmin = 0x3800; /* 0.5 */
        memset(k6->scales, 0x80, sizeof k6->scales); /* -128 */
        k6->d = 0x3c00;
    }
    /* float64: Q4_K 512 x (15 x 63 x 1.0 - 0.5 x 63) x 32639 d;
     * Q6_K 512 x (-32 x -128 x 1.0) x 32639 d */
    const double xv = 32639.0 / 4096.0;
    const double want[2] = {512.0 * (15.0 * 63.0 - 0.5 * 63.0) * xv, 512.0 * 4096.0 * xv};
    const uint8_t *ws[2] = {w4, w6};
    for (size_t ti = 0; ti < N_K_TYPES; ti++)
        for (int tw = 0; tw <= fast_cpu_avx2_ok(); tw++) {
            const int type = k_types[ti];
            float y = 0.0f;
            q16k_rows_fn k = tw ? q16k_rows_avx2(type) : q16k_rows_scalar(type);
            k(ws[ti], type_row_bytes(type, cols), 1, cols, xq, 1, &y, 1);
            ck_assert_msg(fabs(y - want[ti]) <= 1e-6 * want[ti], "%s (%s): %.9g, float64 %.9g",
                          type_name(type), tw ? "avx2" : "C", y, want[ti]);
        }
    free(xq);
}
END_TEST

START_TEST(tiles_match_the_c_twin_bitwise)
{
    if (!fast_cpu_avx2_ok())
        TEST_SKIP("cpu", "CPU lacks AVX2/FMA/F16C");
    k256_tiles_match_c_twin(&q16k_format, 251, 2900);
}
END_TEST

/* The default settings are this path's, and it is invariant. */
START_TEST(q16k_path_is_the_default_and_invariant)
{
    if (!fast_cpu_avx2_ok())
        TEST_SKIP("cpu", "CPU lacks AVX2/FMA/F16C");
    ck_assert_int_eq(cpu_matmul_fast_set_q8(-1), CPU_ACT_Q16);
    ck_assert_int_eq(cpu_matmul_fast_set_q8k(-1), CPU_Q8K_SAME_WIDTH);
    k256_path_is_invariant(&q16k_format, 241, 2800);
}
END_TEST

static Suite *matvec_q16k_suite(void)
{
    Suite *s = suite_create("matvec_q16k");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, quantizer_twins_agree_and_stay_within_a_step);
    tcase_add_loop_test(tc, kernels_match_float64_on_the_codes, 0, 2); /* 768, 4864 columns */
    tcase_add_test(tc, int32_sums_hold_at_their_bounds);
    tcase_add_test(tc, tiles_match_the_c_twin_bitwise);
    tcase_add_test(tc, q16k_path_is_the_default_and_invariant);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(matvec_q16k_suite)
