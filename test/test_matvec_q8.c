/* test_matvec_q8.c: suite "matvec_q8" — the int8-activation path of
 * cpu_matmul_fast (kernels/cpu/act_q8.h, dot_q8_scalar.c, dot_q8_avx2.c).
 *
 * Judges and tolerances:
 *  - the quantizer's two twins give the same bytes, and every code is
 *    within half a step of its float: |x - d q| <= d / 2 (+ one rounding);
 *  - each kernel, both twins, against float64 sums of the decoded weights
 *    times the decoded activations (d * q): the kernels' integer dots are
 *    exact, so only float adds remain: 1e-5 of sum |w x|, the bound the
 *    float kernels have (test_matvec.c);
 *  - the accuracy cost of the int8 activations, against float64 sums of
 *    the weights times the float activations: each activation moves by at
 *    most half its block's step, so |y - y_exact| <= sum_c |w_c| d_c / 2
 *    (plus 1e-5 of sum |w x|); the mean relative error |y - y_exact| /
 *    sum |w x| is printed and held below 1e-3 (measured on Gaussian
 *    activations: 2.6e-4 for Q4_0 Q4_1 Q5_0 Q4_K, 3.0e-4 Q8_0, 3.2e-4
 *    Q6_K; the float activations' kernels stay below 1e-6);
 *  - the AVX2 tile kernels (dot_q8_tile_avx2.c) and their AVX512-VNNI
 *    twins (where the CPU has VNNI) against the plain C twin,
 *    which does each output element's operations one by one in the same
 *    order: bitwise, for 1..11 activation rows (every split into tiles of
 *    8, 4, 2, 1), an odd number of weight rows, and rows short enough for
 *    one pass over the columns and long enough for two;
 *  - cpu_matmul_fast on this path: a batch of 9 rows on 1, 2 and 3 threads
 *    is bitwise one row at a time (the invariance rule).
 * Each for the int8 codes and for the 16-bit codes (act_q16_quantize, the
 * q16 kernels), whose code is within one 16-bit step d of its float
 * (half a step, or a whole one where the remainder's byte is clamped) and
 * whose mean relative error is held below 1e-5 (measured: about 1e-6,
 * 256 times under the int8 codes'). */
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

static const int q8_types[] = {
    GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K,
};
#define N_Q8_TYPES (sizeof q8_types / sizeof q8_types[0])

uint8_t *q8_random_blocks(int type, int64_t rows, int64_t cols, uint64_t seed)
{
    const type_traits *t = type_traits_get(type);
    const size_t nb = type_row_bytes(type, cols) * (size_t)rows;
    uint8_t *w = malloc(nb);
    uint64_t st = seed;
    for (size_t i = 0; i < nb; i++)
        w[i] = (uint8_t)test_rand_u64(&st);
    int offs[2] = {0, -1};
    if (type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q4_K)
        offs[1] = 2;
    if (type == GGML_TYPE_Q6_K)
        offs[0] = 208;
    for (size_t b = 0; b < nb / t->bytes; b++)
        for (int k = 0; k < 2; k++)
            if (offs[k] >= 0) {
                float v = test_rand_normal(&st) * 0.01f;
                uint16_t h = f32_to_fp16(v != 0.0f ? v : 0.01f);
                memcpy(w + b * t->bytes + offs[k], &h, 2);
            }
    return w;
}

/* The two block formats behind one pointer (wide: act_q16). */
static size_t blk_size(int wide) { return wide ? sizeof(act_q16) : sizeof(act_q8); }
static void *blocks_new(int64_t nblocks, int wide) { return calloc(nblocks, blk_size(wide)); }
static float blk_d(const void *xq, int64_t b, int wide)
{
    return wide ? ((const act_q16 *)xq)[b].d : ((const act_q8 *)xq)[b].d;
}
static float blk_s(const void *xq, int64_t b, int wide)
{
    return wide ? ((const act_q16 *)xq)[b].s : ((const act_q8 *)xq)[b].s;
}
static int code_of(const void *xq, int64_t b, int j, int wide)
{
    return wide ? ((const act_q16 *)xq)[b].v[j] : ((const act_q8 *)xq)[b].q[j];
}
static void *blk_at(void *xq, int64_t b, int wide) { return (char *)xq + b * blk_size(wide); }

static void quantize_c(int wide, const float *x, int64_t cols, void *xq)
{
    if (wide)
        act_q16_quantize(x, cols, xq);
    else
        act_q8_quantize(x, cols, xq);
}

/* isa: 0 the plain C twin, 1 AVX2, 2 AVX512-VNNI */
static void run_rows(int wide, int isa, int type, const uint8_t *w, size_t rb, int64_t rows,
                     int64_t cols, const void *xq, int64_t n, float *y, int64_t ystride)
{
    if (wide) {
        q16_rows_fn k = isa == 2 ? q16_rows_avx512(type) : isa ? q16_rows_avx2(type)
                                                               : q16_rows_scalar(type);
        ck_assert_msg(k != NULL, "%s has no q16 kernel (isa %d)", type_name(type), isa);
        k(w, rb, rows, cols, xq, n, y, ystride);
    } else {
        q8_rows_fn k = isa == 2 ? q8_rows_avx512(type) : isa ? q8_rows_avx2(type)
                                                             : q8_rows_scalar(type);
        ck_assert_msg(k != NULL, "%s has no q8 kernel (isa %d)", type_name(type), isa);
        k(w, rb, rows, cols, xq, n, y, ystride);
    }
}

START_TEST(quantizer_twins_agree_and_round_to_half_a_step)
{
    const int wide = _i;
    const int64_t cols = 4096;
    float *x = malloc(cols * sizeof *x);
    void *a = blocks_new(cols / 32, wide), *b = blocks_new(cols / 32, wide);
    test_fill_normal(x, cols, 3.0f, 21);
    x[5] = 0.0f;                 /* a zero inside a block */
    for (int j = 64; j < 96; j++) /* an all-zero block: d = 0, codes 0 */
        x[j] = 0.0f;
    quantize_c(wide, x, cols, a);
    /* int8: half a step (and an f32 rounding); 16-bit: a step where the
     * remainder byte is clamped, plus the rounding of x / d8 (~1e-2 of a
     * 16-bit step) */
    const float bound = wide ? 1.02f : 0.5f * (1 + 1e-6f);
    double err_sum = 0;
    for (int64_t blk = 0; blk < cols / 32; blk++) {
        int sum = 0;
        const float d = blk_d(a, blk, wide);
        for (int j = 0; j < 32; j++) {
            const float xv = x[32 * blk + j];
            const int c = code_of(a, blk, j, wide);
            ck_assert_msg(fabsf(xv - d * c) <= d * bound,
                          "%s block %lld elem %d: x %.9g code %d d %.9g", wide ? "q16" : "q8",
                          (long long)blk, j, xv, c, d);
            ck_assert(c >= (wide ? -32639 : -127) && c <= (wide ? 32639 : 127));
            if (d > 0)
                err_sum += fabsf(xv - d * c) / d;
            sum += c;
        }
        ck_assert(blk_s(a, blk, wide) == d * (float)sum);
    }
    ck_assert(blk_d(a, 2, wide) == 0.0f && blk_s(a, 2, wide) == 0.0f);
    /* rounding to nearest: the mean error is a quarter step */
    err_sum /= (double)(cols - 33);
    ck_assert_msg(err_sum > 0.2 && err_sum < 0.3, "mean error %.3g steps", err_sum);
    if (!fast_cpu_avx2_ok()) {
        test_note_skip("quantizer_twins_agree (AVX2 twin)", "cpu", "CPU lacks AVX2/FMA/F16C");
    } else {
        if (wide)
            act_q16_quantize_avx2(x, cols, b);
        else
            act_q8_quantize_avx2(x, cols, b);
        ck_assert_msg(!memcmp(a, b, cols / 32 * blk_size(wide)), "AVX2 quantizer differs from C");
    }
    free(x);
    free(a);
    free(b);
}
END_TEST

START_TEST(kernels_match_float64_on_the_codes)
{
    const int wide = _i;
    const int64_t rows = 37, cols = 768, n = 5, nsub = cols / 32;
    const int avx2 = fast_cpu_avx2_ok();
    if (!avx2)
        test_note_skip("kernels_match_float64_on_the_codes (AVX2 twins)", "cpu",
                       "CPU lacks AVX2/FMA/F16C");
    float *x = malloc(n * cols * sizeof *x), *xd = malloc(n * cols * sizeof *xd);
    float *wf = malloc(rows * cols * sizeof *wf), *y = malloc(n * rows * sizeof *y);
    void *xq = blocks_new(n * nsub, wide);
    test_fill_normal(x, n * cols, 1.0f, 31);
    for (int64_t i = 0; i < n; i++)
        quantize_c(wide, x + i * cols, cols, blk_at(xq, i * nsub, wide));
    for (int64_t i = 0; i < n * nsub; i++)
        for (int j = 0; j < 32; j++)
            xd[32 * i + j] = blk_d(xq, i, wide) * (float)code_of(xq, i, j, wide);
    double mean_rel = 0;
    for (size_t ti = 0; ti < N_Q8_TYPES; ti++) {
        const int type = q8_types[ti];
        uint8_t *w = q8_random_blocks(type, rows, cols, 700 + ti);
        const size_t rb = type_row_bytes(type, cols);
        type_traits_get(type)->dequant(w, wf, rows * cols);
        double rel_sum = 0;
        for (int tw = 0; tw <= avx2; tw++) {
            for (int64_t nn = 1; nn <= n; nn++) {
                run_rows(wide, tw, type, w, rb, rows, cols, xq, nn, y, rows);
                for (int64_t i = 0; i < nn; i++)
                    for (int64_t r = 0; r < rows; r++) {
                        double on_codes = 0, exact = 0, mag = 0, step = 0;
                        for (int64_t c = 0; c < cols; c++) {
                            const double wv = wf[r * cols + c];
                            on_codes += wv * xd[i * cols + c];
                            exact += wv * x[i * cols + c];
                            mag += fabs(wv * x[i * cols + c]);
                            step += fabs(wv) * blk_d(xq, i * nsub + c / 32, wide) * (wide ? 1.02 : 0.5);
                        }
                        const double got = y[i * rows + r];
                        ck_assert_msg(mag > 0, "%s row %lld: all-zero product", type_name(type),
                                      (long long)r);
                        ck_assert_msg(fabs(got - on_codes) <= 1e-5 * mag,
                                      "%s (%s) n=%lld row %lld tok %lld: %.9g, on the codes %.9g "
                                      "(sum|wx| %g)", type_name(type), tw ? "avx2" : "C",
                                      (long long)nn, (long long)r, (long long)i, got, on_codes, mag);
                        ck_assert_msg(fabs(got - exact) <= step + 1e-5 * mag,
                                      "%s (%s) row %lld tok %lld: %.9g, exact %.9g, bound %g",
                                      type_name(type), tw ? "avx2" : "C", (long long)r,
                                      (long long)i, got, exact, step + 1e-5 * mag);
                        if (nn == n && !tw)
                            rel_sum += fabs(got - exact) / mag;
                    }
            }
        }
        rel_sum /= (double)(n * rows);
        printf("  %-5s %s activations: mean |y - exact| / sum|wx| = %.2e\n", type_name(type),
               wide ? "16-bit" : "int8", rel_sum);
        mean_rel = rel_sum > mean_rel ? rel_sum : mean_rel;
        free(w);
    }
    ck_assert_msg(mean_rel < (wide ? 1e-5 : 1e-3), "mean relative error %.3g", mean_rel);
    free(x);
    free(xd);
    free(wf);
    free(y);
    free(xq);
}
END_TEST

/* The AVX2 tiles and the plain C twin do the same float operations per
 * output element, so they agree bit for bit whatever the tile shape. */
START_TEST(tiles_match_the_c_twin_bitwise)
{
    const int wide = _i;
    if (!fast_cpu_avx2_ok())
        TEST_SKIP("cpu", "CPU lacks AVX2/FMA/F16C");
    const int vnni = fast_cpu_vnni_ok();
    if (!vnni)
        test_note_skip("tiles_match_the_c_twin_bitwise (AVX512-VNNI twin)", "cpu",
                       "CPU lacks AVX512F/VL/VNNI");
    const int64_t rows = 37, nmax = 27;
    /* 1..11: every split into tiles; 16 and up: the weights decoded ahead
     * (dot_q8_tile_avx2.c, Q16_PRE_MIN_N) on the 16-bit codes */
    const int64_t ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 27};
    /* one pass; an odd number of sub-blocks (the decode kernels' last
     * block, dot_q16_dec_avx2.c); two passes (over 8192 columns) */
    const int64_t colss[] = {768, 800, 9216};
    for (size_t ci = 0; ci < sizeof colss / sizeof colss[0]; ci++) {
        const int64_t cols = colss[ci], nsub = cols / 32;
        float *x = malloc(nmax * cols * sizeof *x);
        float *ya = malloc(nmax * rows * sizeof *ya), *yc = malloc(nmax * rows * sizeof *yc);
        void *xq = blocks_new(nmax * nsub, wide);
        test_fill_normal(x, nmax * cols, 1.0f, 51 + ci);
        for (int64_t i = 0; i < nmax; i++)
            quantize_c(wide, x + i * cols, cols, blk_at(xq, i * nsub, wide));
        for (size_t ti = 0; ti < N_Q8_TYPES; ti++) {
            const int type = q8_types[ti];
            if (cols % type_traits_get(type)->blck)
                continue; /* 800 columns: the 32-weight types only */
            uint8_t *w = q8_random_blocks(type, rows, cols, 900 + 10 * ci + ti);
            const size_t rb = type_row_bytes(type, cols);
            run_rows(wide, 0, type, w, rb, rows, cols, xq, nmax, yc, rows);
            for (int isa = 0; isa <= vnni; isa++)
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                    const int64_t n = ns[ni];
                    memset(ya, 0xff, nmax * rows * sizeof *ya);
                    run_rows(wide, isa ? 2 : 1, type, w, rb, rows, cols, xq, n, ya, rows);
                    for (int64_t k = 0; k < n * rows; k++)
                        ck_assert_msg(!memcmp(&ya[k], &yc[k], sizeof *ya),
                                      "%s %s cols %lld n=%lld row %lld tok %lld: %s %.9g, C twin %.9g",
                                      wide ? "q16" : "q8", type_name(type), (long long)cols, (long long)n,
                                      (long long)(k % rows), (long long)(k / rows),
                                      isa ? "avx512-vnni" : "avx2", ya[k], yc[k]);
                }
            free(w);
        }
        free(x);
        free(ya);
        free(yc);
        free(xq);
    }
}
END_TEST

/* cpu_matmul_fast on the int8 path (AVX2; the scalar level keeps float
 * activations, run here too): a batch of 9 rows
 * (tiles of 8 and 1) on 1, 2 and 3 threads gives bitwise what one row at a
 * time gives. */
START_TEST(q8_path_is_invariant)
{
    const int act = _i ? CPU_ACT_Q16 : CPU_ACT_Q8;
    const int64_t rows = 203, cols = 768, n = 9;
    float *x = malloc(n * cols * sizeof *x);
    float *y1 = malloc(n * rows * sizeof *y1), *yn = malloc(n * rows * sizeof *yn);
    test_fill_normal(x, n * cols, 1.0f, 41);
    ck_assert_int_eq(cpu_matmul_fast_set_q8(act), act);
    cpu_matmul_fast_set_q8k(CPU_Q8K_NEVER); /* Q4_K, Q6_K on these codes too (act_q8k: test_matvec_q8k.c) */
    for (int isa = 0; isa <= 1; isa++) {
        if (cpu_matmul_fast_set_isa(isa) != isa)
            continue;
        for (size_t ti = 0; ti < N_Q8_TYPES; ti++) {
            const int type = q8_types[ti];
            uint8_t *w = q8_random_blocks(type, rows, cols, 800 + ti);
            tp_set_threads(1);
            for (int64_t i = 0; i < n; i++)
                cpu_matmul_fast(type, w, rows, cols, x + i * cols, 1, y1 + i * rows);
            for (int nt = 1; nt <= 3; nt++) {
                tp_set_threads(nt);
                memset(yn, 0, n * rows * sizeof *yn);
                cpu_matmul_fast(type, w, rows, cols, x, n, yn);
                ck_assert_msg(!memcmp(y1, yn, n * rows * sizeof *yn),
                              "%s (%s): batch of %lld on %d threads differs from one row at a time",
                              type_name(type), isa ? "avx2" : "C", (long long)n, nt);
            }
            free(w);
        }
    }
    tp_set_threads(0);
    cpu_matmul_fast_set_isa(-1);
    cpu_matmul_fast_set_q8(-1);
    cpu_matmul_fast_set_q8k(-1);
    free(x);
    free(y1);
    free(yn);
}
END_TEST

static Suite *matvec_q8_suite(void)
{
    Suite *s = suite_create("matvec_q8");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    /* loop 0: the int8 codes; 1: the 16-bit codes */
    tcase_add_loop_test(tc, quantizer_twins_agree_and_round_to_half_a_step, 0, 2);
    tcase_add_loop_test(tc, kernels_match_float64_on_the_codes, 0, 2);
    tcase_add_loop_test(tc, tiles_match_the_c_twin_bitwise, 0, 2);
    tcase_add_loop_test(tc, q8_path_is_invariant, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(matvec_q8_suite)
