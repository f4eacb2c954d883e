/* test_matmul_multi.c: suite "matmul_multi" — several products of one X in
 * one hand-off (cpu_matmul_fast_multi: a layer's Q, K and V) and gate/up
 * with the GLU inside their tasks (cpu_matmul_fast_glu).
 *
 * Judge: cpu_matmul_fast, one product and one activation row at a time on
 * one thread (then cpu_swiglu / cpu_geglu), bit for bit, for batches of 1,
 * 9 and 17 rows (the decode kernels, the tiles, the decoded-ahead Q5_0
 * tiles) on 1 to 3 threads, with weight types that take different codes in
 * one call (Q4_K on act_q8k beside Q5_0 and Q8_0 on the 16-bit codes when
 * act_q8k is on), for every activation mode and both ISA levels. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/act_q8.h"
#include "kernels/cpu/dot_kernels.h"
#include "kernels/cpu/threadpool.h"
#include "kernels/ops.h"
#include "model/quant.h"
#include "test_matvec_q8.h"

#define COLS 768

static const int types[3] = {GGML_TYPE_Q5_0, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K};
static const int64_t rows_of[3] = {203, 64, 37};
static const int64_t batches[3] = {1, 9, 17};

/* y = one row and one product at a time on one thread */
static void reference(int type, const uint8_t *w, int64_t rows, const float *x, int64_t n,
                      float *y)
{
    tp_set_threads(1);
    for (int64_t i = 0; i < n; i++)
        cpu_matmul_fast(type, w, rows, COLS, x + i * COLS, 1, y + i * rows);
}

static void check_multi(uint8_t *const *w, const float *x, int64_t n, const char *mode)
{
    float *ref[3], *got[3];
    cpu_mm mm[3];
    for (int k = 0; k < 3; k++) {
        ref[k] = malloc(n * rows_of[k] * sizeof(float));
        got[k] = malloc(n * rows_of[k] * sizeof(float));
        reference(types[k], w[k], rows_of[k], x, n, ref[k]);
        mm[k] = (cpu_mm){.type = types[k], .w = w[k], .rows = rows_of[k], .y = got[k]};
    }
    for (int nt = 1; nt <= 3; nt++) {
        tp_set_threads(nt);
        for (int k = 0; k < 3; k++)
            memset(got[k], 0xff, n * rows_of[k] * sizeof(float));
        cpu_matmul_fast_multi(mm, 3, COLS, x, n);
        for (int k = 0; k < 3; k++)
            ck_assert_msg(!memcmp(ref[k], got[k], n * rows_of[k] * sizeof(float)),
                          "%s: multi, %s, n %lld, %d threads", mode, type_name(types[k]),
                          (long long)n, nt);
    }
    for (int k = 0; k < 3; k++) {
        free(ref[k]);
        free(got[k]);
    }
}

/* gate Q4_K and up Q5_0, the same 203 rows */
static void check_glu(const uint8_t *wg, const uint8_t *wu, const float *x, int64_t n, int gelu,
                      const char *mode)
{
    const int64_t rows = 203;
    float *g = malloc(n * rows * sizeof(float)), *u = malloc(n * rows * sizeof(float));
    float *yg = malloc(n * rows * sizeof(float)), *yu = malloc(n * rows * sizeof(float));
    reference(GGML_TYPE_Q4_K, wg, rows, x, n, g);
    reference(GGML_TYPE_Q5_0, wu, rows, x, n, u);
    (gelu ? cpu_geglu : cpu_swiglu)(g, u, n * rows, g);
    const cpu_mm gate = {.type = GGML_TYPE_Q4_K, .w = wg, .rows = rows, .y = yg};
    const cpu_mm up = {.type = GGML_TYPE_Q5_0, .w = wu, .rows = rows, .y = yu};
    for (int nt = 1; nt <= 3; nt++) {
        tp_set_threads(nt);
        memset(yg, 0xff, n * rows * sizeof(float));
        cpu_matmul_fast_glu(&gate, &up, COLS, x, n, gelu);
        ck_assert_msg(!memcmp(g, yg, n * rows * sizeof(float)), "%s: %s, n %lld, %d threads",
                      mode, gelu ? "geglu" : "swiglu", (long long)n, nt);
    }
    free(g);
    free(u);
    free(yg);
    free(yu);
}

/* loop: 0 float activations, 1 int8 codes, 2 16-bit codes, 3 16-bit codes
 * with act_q8k for Q4_K */
START_TEST(grouped_products_give_the_solo_bits)
{
    static const char *modes[4] = {"f32", "int8", "16-bit", "16-bit + q8k"};
    const int act = _i == 0 ? CPU_ACT_F32 : _i == 1 ? CPU_ACT_Q8 : CPU_ACT_Q16;
    cpu_matmul_fast_set_q8(act);
    cpu_matmul_fast_set_q8k(_i == 3 ? CPU_Q8K_ALWAYS : CPU_Q8K_SAME_WIDTH);
    uint8_t *w[3];
    for (int k = 0; k < 3; k++)
        w[k] = q8_random_blocks(types[k], rows_of[k], COLS, 900 + (uint64_t)k);
    uint8_t *wg = q8_random_blocks(GGML_TYPE_Q4_K, 203, COLS, 910);
    float *x = malloc(17 * COLS * sizeof(float));
    test_fill_normal(x, 17 * COLS, 1.0f, 77);
    for (int isa = 0; isa <= 1; isa++) {
        if (cpu_matmul_fast_set_isa(isa) != isa)
            continue;
        for (int b = 0; b < 3; b++) {
            check_multi(w, x, batches[b], modes[_i]);
            check_glu(wg, w[0], x, batches[b], 0, modes[_i]);
            check_glu(wg, w[0], x, batches[b], 1, modes[_i]);
        }
    }
    tp_set_threads(0);
    cpu_matmul_fast_set_isa(-1);
    cpu_matmul_fast_set_q8(-1);
    cpu_matmul_fast_set_q8k(-1);
    for (int k = 0; k < 3; k++)
        free(w[k]);
    free(wg);
    free(x);
}
END_TEST

static Suite *matmul_multi_suite(void)
{
    Suite *s = suite_create("matmul_multi");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, grouped_products_give_the_solo_bits, 0, 4);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(matmul_multi_suite)
