/* test_cuda_matmul.c: suite "cuda_matmul" — the prefill weight kernel
 * (cuda_matmul, any n) against the CPU reference, and bitwise against the
 * decode kernel: a token's outputs must not depend on whether it was
 * computed in a prefill chunk or decoded alone (the invariance rule).
 * Token counts that are not multiples of the 64-token block, row counts
 * that are not multiples of the 128-row block.  The grouped (MoE prefill)
 * product likewise, against the expert matvec. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_wtest.h"

#ifdef STRATA_CUDA

static const int64_t mm_shapes[][3] = {
    /* rows, cols, n */
    {300, 1280, 70},  /* 2 IQ3 segments, 2 token blocks, the second of 6 */
    {200, 4864, 100}, /* 7 IQ3 segments, the last short */
    {1000, 768, 9},   /* the smallest n past decode */
    {2100, 512, 130}, /* 17 row-blocks, 3 token blocks */
};
#define MM_NSHAPES ((int)(sizeof mm_shapes / sizeof mm_shapes[0]))

START_TEST(matmul_matches_reference)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    for (int ti = 0; ti < CW_NTYPES; ti++)
        for (int s = 0; s < (test_small() ? 2 : MM_NSHAPES); s++) {
            const int type = cw_types[ti];
            const int64_t rows = mm_shapes[s][0], cols = mm_shapes[s][1], n = mm_shapes[s][2];
            cw_case c;
            cw_case_init(&c, type, cw_random_weights(type, rows, cols, 2000 + 10 * ti + s), rows, cols, n, 31 + s,
                         1);
            cw_run_matmul(&c, n, c.y);
            const double e = cw_rel_err(c.y, c.ref, (size_t)(n * rows));
            fprintf(stderr, "cuda_matmul %-7s %6lld x %-5lld n=%-4lld rel err %.3g\n", type_name(type),
                    (long long)rows, (long long)cols, (long long)n, e);
            ck_assert_msg(e < cw_tolerance(type), "%s %lld x %lld n=%lld: rel err %g", type_name(type),
                          (long long)rows, (long long)cols, (long long)n, e);
            cw_case_free(&c);
        }
}
END_TEST

/* Prefill of 70 tokens == decode of the same tokens in chunks of <= 8,
 * bit for bit, for every type, on a split (multi-segment) shape. */
START_TEST(matmul_equals_matvec_bitwise)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    const int64_t rows = 300, cols = 4864, n = 70;
    for (int ti = 0; ti < CW_NTYPES; ti++) {
        const int type = cw_types[ti];
        cw_case c;
        cw_case_init(&c, type, cw_random_weights(type, rows, cols, 3000 + ti), rows, cols, n, 77 + ti, 0);
        cw_run_matmul(&c, n, c.y);
        const int sizes[] = {8, 5, 3, 1, 7}; /* decode chunks of every size */
        cw_decode_chunks(&c, n, sizes, 5, c.yv);
        cw_assert_bitwise(type, "prefill vs decode", c.y, c.yv, n, rows);
        cw_case_free(&c);
    }
}
END_TEST

START_TEST(matmul_checks_scratch)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    strata_error err = {0};
    float *d = NULL;
    ck_assert(cudaMalloc((void **)&d, 1 << 20) == cudaSuccess);
    const size_t need = cuda_matmul_scratch_bytes(GGML_TYPE_Q8_0, 256, 100);
    ck_assert(need > 0 && cuda_matmul_scratch_bytes(GGML_TYPE_Q8_0, 256, 8) == 0);
    ck_assert_int_eq(cuda_matmul(GGML_TYPE_Q8_0, d, 16, 256, d, 100, d, d, need - 1, 0, &err), STRATA_E_ARG);
    cudaFree(d);
}
END_TEST

/* MoE prefill (cuda_matmul_grouped): tokens sorted by expert, one launch
 * for all experts.  Each token's outputs must equal cuda_matvec_expert's
 * bit for bit (so a prompt's experts agree with decode's), and the CPU
 * reference (cpu_matmul on the expert's slab) within the type's tolerance.
 * Group sizes: a full and a partial 64-token tile, none, one, exactly 64,
 * three tiles, and a few (the grid's spare tiles must do nothing). */
START_TEST(grouped_equals_matvec_bitwise)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    enum { E = 7 };
    const int count[E] = {70, 0, 1, 64, 130, 9, 3};
    const int64_t rows = 300, cols = 1280;
    for (int ti = 0; ti < CW_NTYPES; ti++) {
        const int type = cw_types[ti];
        if (type == GGML_TYPE_F32)
            continue; /* not grouped: the engine keeps matvecs for F32 experts */
        uint8_t *w = cw_random_weights(type, rows * E, cols, 4000 + ti);
        cw_check_grouped("cuda_matmul_grouped", type, w, rows, cols, E, count, 91 + ti, cw_tolerance(type), 0);
        free(w);
    }
}
END_TEST

START_TEST(grouped_checks_arguments)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    strata_error err = {0};
    float *d = NULL;
    ck_assert(cudaMalloc((void **)&d, 1 << 20) == cudaSuccess);
    const size_t need = cuda_matmul_grouped_scratch_bytes(GGML_TYPE_Q8_0, 256, 100);
    ck_assert(need > cuda_matmul_scratch_bytes(GGML_TYPE_Q8_0, 256, 100));
    ck_assert_int_eq(cuda_matmul_grouped(GGML_TYPE_Q8_0, d, 16, 256, 4, (int32_t *)d, d, 100, d, d, need - 1,
                                         0, &err), STRATA_E_ARG);
    ck_assert_int_eq(cuda_matmul_grouped(GGML_TYPE_F32, d, 16, 256, 4, (int32_t *)d, d, 100, d, d, need, 0,
                                         &err), STRATA_E_UNSUPPORTED);
    ck_assert_int_eq(cuda_matmul_grouped(GGML_TYPE_Q8_0, d, 16, 256, 4, NULL, d, 100, d, d, need, 0, &err),
                     STRATA_E_ARG);
    cudaFree(d);
}
END_TEST

#else

START_TEST(matmul_matches_reference) { TEST_SKIP("gpu", "built without CUDA"); }
END_TEST
START_TEST(matmul_equals_matvec_bitwise) { TEST_SKIP("gpu", "built without CUDA"); }
END_TEST
START_TEST(matmul_checks_scratch) { TEST_SKIP("gpu", "built without CUDA"); }
END_TEST
START_TEST(grouped_equals_matvec_bitwise) { TEST_SKIP("gpu", "built without CUDA"); }
END_TEST
START_TEST(grouped_checks_arguments) { TEST_SKIP("gpu", "built without CUDA"); }
END_TEST

#endif

static Suite *cuda_matmul_suite(void)
{
    Suite *s = suite_create("cuda_matmul");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, matmul_matches_reference);
    tcase_add_test(tc, matmul_equals_matvec_bitwise);
    tcase_add_test(tc, matmul_checks_scratch);
    tcase_add_test(tc, grouped_equals_matvec_bitwise);
    tcase_add_test(tc, grouped_checks_arguments);
    suite_add_tcase(s, tc);
    return s;
}

TEST_SUITE(cuda_matmul_suite)
