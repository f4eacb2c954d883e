/* test_matvec.c: suite "matvec" — the reference matvec/matmul/embed
 * (kernels/cpu/matvec.c) against a float64 dot product of the decoded
 * weights, and cpu_matmul_fast against the reference, for every type strata
 * decodes, on random (never zero) inputs. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "model/quant.h"

static const int weight_types[] = {
    GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0,
    GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_IQ4_NL, GGML_TYPE_Q4_K,
    GGML_TYPE_Q6_K, GGML_TYPE_Q2_0, GGML_TYPE_IQ3_XXS,
};
#define N_TYPES (sizeof weight_types / sizeof weight_types[0])

/* Random weight bytes of `type`: quantized Gaussians where strata has a
 * quantizer, random bytes with finite fp16 scales otherwise. */
static uint8_t *random_weights(int type, int64_t rows, int64_t cols, uint64_t seed)
{
    const type_traits *t = type_traits_get(type);
    const size_t nb = type_row_bytes(type, cols) * (size_t)rows;
    uint8_t *w = malloc(nb);
    if (t->quant) {
        float *x = malloc((size_t)(rows * cols) * sizeof *x);
        test_fill_normal(x, (size_t)(rows * cols), 0.05f, seed);
        t->quant(x, w, rows * cols, NULL);
        free(x);
        return w;
    }
    uint64_t st = seed;
    for (size_t i = 0; i < nb; i++)
        w[i] = (uint8_t)test_rand_u64(&st);
    /* the fp16 d (and min where there is one) of each block: finite, small */
    int offs[2] = {0, -1};
    if (type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1 || type == GGML_TYPE_Q4_K)
        offs[1] = 2;
    if (type == GGML_TYPE_Q6_K)
        offs[0] = 208;
    for (size_t b = 0; b < nb / t->bytes; b++)
        for (int k = 0; k < 2; k++)
            if (offs[k] >= 0) {
                uint16_t h = f32_to_fp16(test_rand_normal(&st) * 0.01f);
                memcpy(w + b * t->bytes + offs[k], &h, 2);
            }
    return w;
}

/* cols = 512: a whole number of blocks of every type, two 256-chunks. */
START_TEST(reference_matches_float64_dot)
{
    const int64_t rows = 24, cols = 512, n = 3;
    float *x = malloc(n * cols * sizeof *x), *y = malloc(n * rows * sizeof *y);
    float *wf = malloc(rows * cols * sizeof *wf);
    test_fill_normal(x, n * cols, 1.0f, 5);
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const int type = weight_types[ti];
        uint8_t *w = random_weights(type, rows, cols, 100 + ti);
        type_traits_get(type)->dequant(w, wf, rows * cols);
        cpu_matmul(type, w, rows, cols, x, n, y);
        double worst = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t r = 0; r < rows; r++) {
                double ref = 0, mag = 0;
                for (int64_t c = 0; c < cols; c++) {
                    ref += (double)wf[r * cols + c] * x[i * cols + c];
                    mag += fabs((double)wf[r * cols + c] * x[i * cols + c]);
                }
                /* double accumulation: only the final f32 rounding remains,
                 * so 2^-24 relative to the value (or to sum|w x| near 0) */
                const double err = fabs(y[i * rows + r] - ref) / (fabs(ref) + 1e-3 * mag);
                worst = err > worst ? err : worst;
                ck_assert_msg(err < 1e-6, "%s row %lld tok %lld: %.9g vs %.9g",
                              type_name(type), (long long)r, (long long)i,
                              y[i * rows + r], ref);
            }
        /* matvec is matmul with n = 1 */
        float y1[24];
        cpu_matvec(type, w, rows, cols, x, y1);
        ck_assert(!memcmp(y1, y, sizeof y1));
        free(w);
    }
    free(x);
    free(y);
    free(wf);
}
END_TEST

/* The fast path sums 256-element chunks in f32 (8 lanes) before adding in
 * double: error ~ sqrt(256) * 2^-24 * sum|w x| per chunk; 1e-5 relative to
 * sum|w x| leaves a wide margin. */
START_TEST(fast_matches_reference)
{
    const int64_t rows = 203, cols = 768, n = 5; /* odd rows: uneven thread split */
    float *x = malloc(n * cols * sizeof *x);
    float *y = malloc(n * rows * sizeof *y), *yf = malloc(n * rows * sizeof *yf);
    float *wf = malloc(rows * cols * sizeof *wf);
    test_fill_normal(x, n * cols, 1.0f, 9);
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const int type = weight_types[ti];
        uint8_t *w = random_weights(type, rows, cols, 200 + ti);
        type_traits_get(type)->dequant(w, wf, rows * cols);
        cpu_matmul(type, w, rows, cols, x, n, y);
        cpu_matmul_fast(type, w, rows, cols, x, n, yf);
        for (int64_t i = 0; i < n; i++)
            for (int64_t r = 0; r < rows; r++) {
                double mag = 0;
                for (int64_t c = 0; c < cols; c++)
                    mag += fabs((double)wf[r * cols + c] * x[i * cols + c]);
                ck_assert_msg(fabs(yf[i * rows + r] - y[i * rows + r]) <= 1e-5 * mag + 1e-30,
                              "%s row %lld tok %lld: fast %.9g ref %.9g",
                              type_name(type), (long long)r, (long long)i,
                              yf[i * rows + r], y[i * rows + r]);
            }
        free(w);
    }
    free(x);
    free(y);
    free(yf);
    free(wf);
}
END_TEST

START_TEST(embed_is_the_decoded_row)
{
    const int64_t rows = 7, cols = 256;
    float out[256], ref[256 * 7];
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const int type = weight_types[ti];
        uint8_t *w = random_weights(type, rows, cols, 300 + ti);
        type_traits_get(type)->dequant(w, ref, rows * cols);
        cpu_embed(type, w, cols, 5, out);
        ck_assert(!memcmp(out, ref + 5 * cols, sizeof out));
        free(w);
    }
}
END_TEST

static Suite *matvec_suite(void)
{
    Suite *s = suite_create("matvec");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, reference_matches_float64_dot);
    tcase_add_test(tc, fast_matches_reference);
    tcase_add_test(tc, embed_is_the_decoded_row);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(matvec_suite)
