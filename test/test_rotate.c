/* test_rotate.c: suite "rotate" — the KV rotation of the k8v4r cache
 * (kernels/cpu/rotate.c) and the engine's choice of KV type.
 *
 * Judges: an explicit float64 matrix R = (1/sqrt(d)) H_d diag(s) built here
 * from the definition in kernels/ops.h (H[i][j] = (-1)^popcount(i & j)),
 * and the quantization error of k8v4 with and without the rotation on head
 * vectors with outlier channels, the case the rotation is for.
 * Tolerances: the fast transform against the matrix, |d| <= 1e-6 * |x|
 * (float butterflies: log2(d) <= 9 rounded adds per element); a round
 * trip R^T R x, 1e-6 * |x|. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/strata.h"
#include "kernels/ops.h"

static const int dims[] = {32, 64, 128, 256, 512};

static double norm2(const float *x, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return sqrt(s);
}

/* y = R x in float64 from the definition. */
static void rotate_by_matrix(const float *x, int d, double *y)
{
    for (int i = 0; i < d; i++) {
        double acc = 0;
        for (int j = 0; j < d; j++) {
            double h = (__builtin_popcount((unsigned)(i & j)) & 1) ? -1.0 : 1.0;
            double s = ((kv_rot_sign_word(j / 64) >> (j % 64)) & 1) ? -1.0 : 1.0;
            acc += h * s * x[j];
        }
        y[i] = acc / sqrt((double)d);
    }
}

START_TEST(rotation_is_the_signed_hadamard_matrix)
{
    for (size_t a = 0; a < sizeof dims / sizeof dims[0]; a++) {
        int d = dims[a], heads = 3;
        float *x = malloc(sizeof(float) * d * heads), *y = malloc(sizeof(float) * d * heads);
        double *ref = malloc(sizeof(double) * d);
        test_fill_normal(x, (size_t)d * heads, 1.0f, 11 + a);
        memcpy(y, x, sizeof(float) * d * heads);
        cpu_kv_rotate(y, heads, d);
        for (int h = 0; h < heads; h++) {
            rotate_by_matrix(x + h * d, d, ref);
            double nx = norm2(x + h * d, d);
            for (int i = 0; i < d; i++)
                ck_assert_msg(fabs(y[h * d + i] - ref[i]) <= 1e-6 * nx,
                              "d %d head %d element %d: %.9g vs %.9g", d, h, i, y[h * d + i],
                              ref[i]);
            /* orthogonal: the length is kept */
            ck_assert(fabs(norm2(y + h * d, d) - nx) <= 1e-6 * nx);
        }
        free(x);
        free(y);
        free(ref);
    }
}
END_TEST

START_TEST(unrotate_inverts_rotate_and_keeps_dot_products)
{
    for (size_t a = 0; a < sizeof dims / sizeof dims[0]; a++) {
        int d = dims[a];
        float *x = malloc(sizeof(float) * d * 2), *y = malloc(sizeof(float) * d * 2);
        test_fill_normal(x, (size_t)d * 2, 2.0f, 40 + a);
        memcpy(y, x, sizeof(float) * d * 2);
        cpu_kv_rotate(y, 2, d);
        double dot0 = 0, dot1 = 0;
        for (int i = 0; i < d; i++) {
            dot0 += (double)x[i] * x[d + i];
            dot1 += (double)y[i] * y[d + i];
        }
        ck_assert_msg(fabs(dot0 - dot1) <= 1e-5 * norm2(x, d) * norm2(x + d, d),
                      "d %d: q.k %.9g became %.9g", d, dot0, dot1);
        cpu_kv_unrotate(y, 2, d);
        double nx = norm2(x, 2 * d);
        for (int i = 0; i < 2 * d; i++)
            ck_assert_msg(fabs(y[i] - x[i]) <= 1e-6 * nx, "d %d element %d: %.9g vs %.9g", d,
                          i, y[i], x[i]);
        free(x);
        free(y);
    }
}
END_TEST

/* The signs are part of the format (an image or a reference computed with
 * other signs reads garbage): pin the generator's first outputs. */
START_TEST(sign_pattern_is_pinned)
{
    /* splitmix64 from state 0x5354524154415231, as test/scripts/ref_forward.py */
    static const uint64_t want[2] = {0x5dcea9be59ad2a91ull, 0xb62fbe930b63780eull};
    uint64_t got[2] = {kv_rot_sign_word(0), kv_rot_sign_word(1)};
    printf("  sign words: %016llx %016llx\n", (unsigned long long)got[0],
           (unsigned long long)got[1]);
    ck_assert(got[0] == want[0] && got[1] == want[1]);
}
END_TEST

START_TEST(supported_head_dims)
{
    static const int yes[] = {32, 64, 128, 256, 512};
    static const int no[] = {0, 16, 48, 80, 96, 160, 192, 1024};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        ck_assert_msg(kv_rot_supported(yes[i]), "%d", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        ck_assert_msg(!kv_rot_supported(no[i]), "%d", no[i]);
}
END_TEST

/* k8v4 round trip error of n head vectors, plain or rotated (rotate,
 * quantize, dequantize, rotate back), relative to |x|. */
static double k8v4_error(const float *x, int n, int d, int rotated, int v4)
{
    float *t = malloc(sizeof(float) * d), *back = malloc(sizeof(float) * d);
    int8_t *q8 = malloc((size_t)d);
    uint8_t *q4 = malloc((size_t)d / 2);
    uint16_t sc[KV_ROT_MAX_DIM / 32];
    double num = 0, den = 0;
    for (int h = 0; h < n; h++) {
        memcpy(t, x + (size_t)h * d, sizeof(float) * d);
        if (rotated)
            cpu_kv_rotate(t, 1, d);
        if (v4) {
            cpu_quant_v4(t, d, q4, sc);
            cpu_dequant_v4(q4, sc, d, back);
        } else {
            cpu_quant_k8(t, d, q8, sc);
            cpu_dequant_k8(q8, sc, d, back);
        }
        if (rotated)
            cpu_kv_unrotate(back, 1, d);
        for (int i = 0; i < d; i++) {
            double e = (double)back[i] - x[(size_t)h * d + i];
            num += e * e;
            den += (double)x[(size_t)h * d + i] * x[(size_t)h * d + i];
        }
    }
    free(t);
    free(back);
    free(q8);
    free(q4);
    return sqrt(num / den);
}

/* Head vectors with 4 outlier channels (20x the others, the same channels
 * in every vector, as in real K/V): the rotation must cut the k8v4 error.
 * Measured at d = 64 and 128: K 2.6-2.8x, V 1.9-2.1x smaller; bound: 1.5x. */
START_TEST(rotation_cuts_k8v4_error_on_outliers)
{
    for (int a = 1; a <= 2; a++) {
        int d = dims[a], n = 64;
        float *x = malloc(sizeof(float) * d * n);
        test_fill_normal(x, (size_t)d * n, 1.0f, 77 + a);
        for (int h = 0; h < n; h++)
            for (int c = 0; c < 4; c++)
                x[(size_t)h * d + 7 + 13 * c] *= 20.0f;
        for (int v4 = 0; v4 <= 1; v4++) {
            double plain = k8v4_error(x, n, d, 0, v4), rot = k8v4_error(x, n, d, 1, v4);
            printf("  d %d %s: relative error plain %.4g, rotated %.4g (%.2fx)\n", d,
                   v4 ? "V (Q4_0)" : "K (Q8_0)", plain, rot, plain / rot);
            ck_assert_msg(rot * 1.5 < plain, "d %d %s: rotated %.4g vs plain %.4g", d,
                          v4 ? "V" : "K", rot, plain);
        }
        free(x);
    }
}
END_TEST

/* The default KV type is k8v4r2 where the head dim allows the rotation, and
 * falls back to plain k8v4 where it does not; asking for k8v4r there is a
 * clear error. */
static strata_engine *open_kv(const char *path, int kv, int *rc, strata_error *err)
{
    strata_params p = strata_params_default();
    p.model_path = path;
    p.backend = STRATA_BACKEND_CPU;
    p.kv_type = kv;
    p.n_ctx = 256;
    p.quiet = 1;
    strata_engine *e = NULL;
    *rc = strata_open(&p, &e, err);
    return e;
}

/* DEFAULT resolves to k8v4r2 where the head dim is a power of two in
 * 32..512 and to plain k8v4 elsewhere (engine/engine.c); an explicit k8v4,
 * k8v4r or k8v4r2 is taken where the head dim allows it, the rotated ones
 * refused where not. */
START_TEST(default_kv_type_follows_the_head_dim)
{
    if (!test_cli())
        TEST_SKIP("strata-cli not built (STRATA_CLI unset)");
    ck_assert_int_eq(strata_params_default().kv_type, STRATA_KV_DEFAULT);
    ck_assert_int_eq(strata_kv_parse("k8v4r"), STRATA_KV_K8V4R);
    ck_assert_int_eq(strata_kv_parse("k8v4r2"), STRATA_KV_K8V4R2);
    ck_assert_str_eq(strata_kv_name(STRATA_KV_K8V4R2), "k8v4r2");
    ck_assert_int_eq(strata_kv_parse("k8v4"), STRATA_KV_K8V4);
    ck_assert_int_eq(strata_kv_parse("f16"), STRATA_KV_F16);
    ck_assert_int_eq(strata_kv_parse("q4"), -1);
    char p64[256], p96[256];
    snprintf(p64, sizeof p64, "%s/rot64.gguf", test_tmpdir());
    snprintf(p96, sizeof p96, "%s/rot96.gguf", test_tmpdir());
    ck_assert_int_eq(test_runf(NULL, "%s mkmodel --arch llama --layers 1 --dim 128 --heads 2 "
                               "--kv-heads 1 --ff 256 --vocab 512 --type q8_0 -o %s >/dev/null 2>&1",
                               test_cli(), p64), 0);
    ck_assert_int_eq(test_runf(NULL, "%s mkmodel --arch qwen3 --layers 1 --dim 128 --heads 2 "
                               "--kv-heads 1 --head-dim 96 --ff 256 --vocab 512 --type q8_0 -o %s "
                               ">/dev/null 2>&1", test_cli(), p96), 0);
    strata_error err = {0};
    int rc;
    strata_engine *e = open_kv(p64, STRATA_KV_DEFAULT, &rc, &err);
    ck_assert_msg(rc == 0, "%s", err.msg);
    ck_assert_int_eq(strata_kv_type(e), STRATA_KV_K8V4R2);
    strata_close(e);
    e = open_kv(p64, STRATA_KV_K8V4, &rc, &err);
    ck_assert_msg(rc == 0, "%s", err.msg);
    ck_assert_int_eq(strata_kv_type(e), STRATA_KV_K8V4);
    strata_close(e);
    e = open_kv(p64, STRATA_KV_K8V4R2, &rc, &err);
    ck_assert_msg(rc == 0, "%s", err.msg);
    ck_assert_int_eq(strata_kv_type(e), STRATA_KV_K8V4R2);
    strata_close(e);
    e = open_kv(p64, STRATA_KV_K8V4R, &rc, &err);
    ck_assert_msg(rc == 0, "%s", err.msg);
    ck_assert_int_eq(strata_kv_type(e), STRATA_KV_K8V4R);
    strata_close(e);
    e = open_kv(p96, STRATA_KV_DEFAULT, &rc, &err);
    ck_assert_msg(rc == 0, "%s", err.msg);
    ck_assert_int_eq(strata_kv_type(e), STRATA_KV_K8V4);
    strata_close(e);
    e = open_kv(p96, STRATA_KV_K8V4R, &rc, &err);
    ck_assert_int_eq(rc, STRATA_E_UNSUPPORTED);
    ck_assert_ptr_null(e);
    ck_assert_msg(strstr(err.msg, "head_dim 96"), "%s", err.msg);
    e = open_kv(p96, STRATA_KV_K8V4R2, &rc, &err);
    ck_assert_int_eq(rc, STRATA_E_UNSUPPORTED);
    ck_assert_ptr_null(e);
    ck_assert_msg(strstr(err.msg, "k8v4r2") && strstr(err.msg, "head_dim 96"), "%s", err.msg);
    e = open_kv(p64, 42, &rc, &err);
    ck_assert_int_eq(rc, STRATA_E_ARG);
    remove(p64);
    remove(p96);
}
END_TEST

static Suite *rotate_suite(void)
{
    Suite *s = suite_create("rotate");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, rotation_is_the_signed_hadamard_matrix);
    tcase_add_test(tc, unrotate_inverts_rotate_and_keeps_dot_products);
    tcase_add_test(tc, sign_pattern_is_pinned);
    tcase_add_test(tc, supported_head_dims);
    tcase_add_test(tc, rotation_cuts_k8v4_error_on_outliers);
    tcase_add_test(tc, default_kv_type_follows_the_head_dim);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(rotate_suite)
