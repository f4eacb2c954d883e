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
    {300, 1280, 70},  /* 5 IQ3 segments, 2 token blocks, the second of 6 */
    {200, 4864, 100}, /* 5 IQ3 segments, the last short */
    {1000, 768, 9},   /* the smallest n past decode */
    {2100, 512, 130}, /* 17 row-blocks, 3 token blocks */
};
#define MM_NSHAPES ((int)(sizeof mm_shapes / sizeof mm_shapes[0]))

/* n tokens x rows outputs of two kernels, equal bit for bit. */
static void assert_bitwise(int type, const float *a, const char *an, const float *b, const char *bn, int64_t n,
                           int64_t rows)
{
    for (int64_t i = 0; i < n * rows; i++)
        ck_assert_msg(!memcmp(&a[i], &b[i], sizeof *a), "%s: token %lld row %lld: %s %.9g %s %.9g",
                      type_name(type), (long long)(i / rows), (long long)(i % rows), an, a[i], bn, b[i]);
}

/* Run the prefill kernel; y on the host. */
static void run_matmul(int type, void *dw, int64_t rows, int64_t cols, const float *dx, int64_t n, float *dy,
                       float *y)
{
    strata_error err = {0};
    const size_t sb = cuda_matmul_scratch_bytes(type, cols, n);
    void *scratch = NULL;
    if (sb)
        ck_assert(cudaMalloc(&scratch, sb) == cudaSuccess);
    cw_poison(dy, (size_t)(n * rows));
    ck_assert_msg(cuda_matmul(type, dw, rows, cols, dx, n, dy, scratch, sb, 0, &err) == 0, "%s", err.msg);
    cw_fetch(y, dy, (size_t)(n * rows));
    cudaFree(scratch);
}

START_TEST(matmul_matches_reference)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    for (int ti = 0; ti < CW_NTYPES; ti++)
        for (int s = 0; s < (test_small() ? 2 : MM_NSHAPES); s++) {
            const int type = cw_types[ti];
            const int64_t rows = mm_shapes[s][0], cols = mm_shapes[s][1], n = mm_shapes[s][2];
            uint8_t *w = cw_random_weights(type, rows, cols, 2000 + 10 * ti + s);
            void *dw = cw_upload(type, rows, cols, w);
            float *x = malloc(n * cols * sizeof *x), *ref = malloc(n * rows * sizeof *ref);
            float *y = malloc(n * rows * sizeof *y);
            test_fill_normal(x, (size_t)(n * cols), 1.0f, 31 + s);
            cpu_matmul(type, w, rows, cols, x, n, ref);
            float *dx = cw_dev_copy(x, n * cols * sizeof *x), *dy = NULL;
            ck_assert(cudaMalloc((void **)&dy, n * rows * sizeof(float)) == cudaSuccess);
            run_matmul(type, dw, rows, cols, dx, n, dy, y);
            const double e = cw_rel_err(y, ref, (size_t)(n * rows));
            fprintf(stderr, "cuda_matmul %-7s %6lld x %-5lld n=%-4lld rel err %.3g\n", type_name(type),
                    (long long)rows, (long long)cols, (long long)n, e);
            ck_assert_msg(e < cw_tolerance(type), "%s %lld x %lld n=%lld: rel err %g", type_name(type),
                          (long long)rows, (long long)cols, (long long)n, e);
            cudaFree(dw);
            cudaFree(dx);
            cudaFree(dy);
            free(w);
            free(x);
            free(ref);
            free(y);
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
        uint8_t *w = cw_random_weights(type, rows, cols, 3000 + ti);
        void *dw = cw_upload(type, rows, cols, w);
        float *x = malloc(n * cols * sizeof *x), *y = malloc(n * rows * sizeof *y);
        float *yv = malloc(n * rows * sizeof *yv);
        test_fill_normal(x, (size_t)(n * cols), 1.0f, 77 + ti);
        float *dx = cw_dev_copy(x, n * cols * sizeof *x), *dy = NULL;
        ck_assert(cudaMalloc((void **)&dy, n * rows * sizeof(float)) == cudaSuccess);
        run_matmul(type, dw, rows, cols, dx, n, dy, y);
        strata_error err = {0};
        cw_poison(dy, (size_t)(n * rows));
        const int sizes[] = {8, 5, 3, 1, 7}; /* decode chunks of every size */
        for (int64_t i = 0, j = 0; i < n; j++) {
            const int k = (int)(n - i < sizes[j % 5] ? n - i : sizes[j % 5]);
            ck_assert(cuda_matvec(type, dw, rows, cols, dx + i * cols, k, dy + i * rows, 0, &err) == 0);
            i += k;
        }
        cw_fetch(yv, dy, (size_t)(n * rows));
        assert_bitwise(type, y, "prefill", yv, "decode", n, rows);
        cudaFree(dw);
        cudaFree(dx);
        cudaFree(dy);
        free(w);
        free(x);
        free(y);
        free(yv);
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
    int32_t off[E + 1] = {0};
    for (int e = 0; e < E; e++)
        off[e + 1] = off[e] + count[e];
    const int64_t n = off[E];
    for (int ti = 0; ti < CW_NTYPES; ti++) {
        const int type = cw_types[ti];
        if (type == GGML_TYPE_F32)
            continue; /* not grouped: the engine keeps matvecs for F32 experts */
        const size_t slab = cuda_weight_bytes(type, rows, cols);
        const size_t hslab = type_row_bytes(type, cols) * (size_t)rows;
        uint8_t *w = cw_random_weights(type, rows * E, cols, 4000 + ti);
        uint8_t *dw = NULL;
        ck_assert(cudaMalloc((void **)&dw, slab * E) == cudaSuccess);
        strata_error err = {0};
        for (int e = 0; e < E; e++)
            ck_assert_msg(cuda_weight_upload(type, rows, cols, w + e * hslab, dw + e * slab, 0, &err) == 0,
                          "%s", err.msg);
        float *x = malloc(n * cols * sizeof *x), *y = malloc(n * rows * sizeof *y);
        float *yv = malloc(n * rows * sizeof *yv), *ref = malloc(n * rows * sizeof *ref);
        test_fill_normal(x, (size_t)(n * cols), 1.0f, 91 + ti);
        for (int e = 0; e < E; e++)
            if (count[e])
                cpu_matmul(type, w + e * hslab, rows, cols, x + off[e] * cols, count[e], ref + off[e] * rows);
        float *dx = cw_dev_copy(x, n * cols * sizeof *x), *dy = NULL;
        int32_t *doff = cw_dev_copy(off, sizeof off);
        ck_assert(cudaMalloc((void **)&dy, n * rows * sizeof(float)) == cudaSuccess);
        const size_t sb = cuda_matmul_grouped_scratch_bytes(type, cols, n);
        void *scratch = NULL;
        ck_assert(cudaMalloc(&scratch, sb) == cudaSuccess);
        cw_poison(dy, (size_t)(n * rows));
        ck_assert_msg(cuda_matmul_grouped(type, dw, rows, cols, E, doff, dx, n, dy, scratch, sb, 0, &err) == 0,
                      "%s", err.msg);
        cw_fetch(y, dy, (size_t)(n * rows));
        const double rel = cw_rel_err(y, ref, (size_t)(n * rows));
        fprintf(stderr, "cuda_matmul_grouped %-7s %d experts, %lld tokens: rel err %.3g\n", type_name(type), E,
                (long long)n, rel);
        ck_assert_msg(rel < cw_tolerance(type), "%s grouped: rel err %g", type_name(type), rel);
        /* decode's kernel, one token at a time, the expert id on the card */
        int32_t *dsel = NULL;
        ck_assert(cudaMalloc((void **)&dsel, E * sizeof *dsel) == cudaSuccess);
        int32_t ids[E];
        for (int e = 0; e < E; e++)
            ids[e] = e;
        ck_assert(cudaMemcpy(dsel, ids, sizeof ids, cudaMemcpyHostToDevice) == cudaSuccess);
        cw_poison(dy, (size_t)(n * rows));
        for (int e = 0; e < E; e++)
            for (int i = off[e]; i < off[e + 1]; i++)
                ck_assert(cuda_matvec_expert(type, dw, rows, cols, dsel + e, dx + (size_t)i * cols, 1,
                                             dy + (size_t)i * rows, 0, &err) == 0);
        cw_fetch(yv, dy, (size_t)(n * rows));
        assert_bitwise(type, y, "grouped", yv, "matvec", n, rows);
        cudaFree(dsel);
        cudaFree(scratch);
        cudaFree(doff);
        cudaFree(dw);
        cudaFree(dx);
        cudaFree(dy);
        free(w);
        free(x);
        free(y);
        free(yv);
        free(ref);
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
