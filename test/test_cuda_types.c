/* test_cuda_types.c: suite "cuda_types" — the weight types the card reads
 * from their ggml blocks (kernels/cuda/wblocks.cuh: Q4_1 Q5_0 Q5_1 IQ4_NL,
 * the K-quants Q2_K..Q6_K, IQ2_XXS IQ2_XS IQ2_S IQ3_S IQ4_XS) and BF16,
 * against the CPU reference (cpu_matmul, double accumulation) on weights
 * made by the CPU quantizers from random Gaussian rows (random blocks with
 * finite random scales for the four 32-element types, which have no
 * quantizer), through every entry point: decode (cuda_matvec, n = 1..8),
 * prefill (cuda_matmul, n = 17 and 64), the expert stack (cuda_matvec_expert,
 * cuda_matvec_experts, cuda_matmul_grouped) and the embedding (bit-exact).
 * Tolerance: these run the F16 path (weights decoded and rounded to fp16,
 * fp16 activations, f32 accumulation), so F16's 2e-3 (cuda_wtest.h).
 * Invariance, bit for bit: a token alone equals the same token in every
 * batch of 1..8 and in prefill, and a grouped token its expert matvec. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_wtest.h"
#include "engine/cuda/weight_types.h"

static const int ct_types[] = {GGML_TYPE_Q4_1,    GGML_TYPE_Q5_0,   GGML_TYPE_Q5_1,  GGML_TYPE_IQ4_NL,
                               GGML_TYPE_Q2_K,    GGML_TYPE_Q3_K,   GGML_TYPE_Q4_K,  GGML_TYPE_Q5_K,
                               GGML_TYPE_Q6_K,    GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_S,
                               GGML_TYPE_IQ3_S,   GGML_TYPE_IQ4_XS, GGML_TYPE_BF16};
#define CT_NTYPES ((int)(sizeof ct_types / sizeof ct_types[0]))

/* Every listed type is native, in the kernels and in the engine's list
 * (inspect, the upload note), and a type outside it is neither. */
START_TEST(types_are_native)
{
    for (int i = 0; i < CT_NTYPES; i++)
        ck_assert_msg(cuda_type_native(ct_types[i]), "%s not native", type_name(ct_types[i]));
    ck_assert(!cuda_type_native(GGML_TYPE_IQ1_S) && !cuda_type_native(GGML_TYPE_Q8_K));
#ifdef STRATA_CUDA
    for (int i = 0; i < CT_NTYPES; i++)
        ck_assert_msg(cuda_weight_supported(ct_types[i]), "%s: no kernel", type_name(ct_types[i]));
#endif
}
END_TEST

#ifdef STRATA_CUDA

static double ct_tol(void) { return cw_tolerance(GGML_TYPE_F16); }

/* Weights of `type` for rows x cols: the CPU quantizer on N(0, 0.05) rows
 * where there is one, else random blocks with finite random fp16 scales
 * (every code, high bit and nibble; never all zero). */
static uint8_t *ct_weights(int type, int64_t rows, int64_t cols, uint64_t seed)
{
    const type_traits *t = type_traits_get(type);
    const size_t rb = type_row_bytes(type, cols);
    ck_assert_msg(t && rb, "%s %lld columns", type_name(type), (long long)cols);
    uint8_t *w = malloc(rb * (size_t)rows);
    if (t->quant) {
        float *row = malloc((size_t)cols * sizeof *row);
        for (int64_t r = 0; r < rows; r++) {
            test_fill_normal(row, (size_t)cols, 0.05f, seed * 7919 + (uint64_t)r);
            t->quant(row, w + (size_t)r * rb, cols, NULL);
        }
        free(row);
        return w;
    }
    uint64_t st = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < rb * (size_t)rows; i++)
        w[i] = (uint8_t)test_rand_u64(&st);
    int offs[2];
    const int ns = type_fp16_scales(type, offs);
    for (size_t b = 0; b < rb * (size_t)rows / (size_t)t->bytes; b++)
        for (int k = 0; k < ns; k++) {
            const float v = test_rand_normal(&st) * 0.01f;
            const uint16_t h = f32_to_fp16(v != 0.f ? v : 1e-3f);
            memcpy(w + b * (size_t)t->bytes + offs[k], &h, 2);
        }
    return w;
}

/* The smallest width a type takes (its block) and a width with a partial
 * last 256-column k-tile where the block allows one. */
static int64_t ct_min_cols(int type) { return type_traits_get(type)->blck == 256 ? 256 : 32; }

/* Decode, n = 1..8, against the reference; token c of every n bitwise
 * equal to token c of n = 8. */
static void check_decode(int type, int64_t rows, int64_t cols, uint64_t seed)
{
    cw_case c;
    cw_case_init(&c, type, ct_weights(type, rows, cols, seed), rows, cols, 8, seed + 1, 1);
    strata_error err = {0};
    for (int n = 8; n >= 1; n--) {
        float *y = n == 8 ? c.yv : c.y; /* yv keeps n = 8 */
        cw_poison(c.dy, (size_t)(8 * rows));
        ck_assert_msg(cuda_matvec(type, c.dw, rows, cols, c.dx, n, c.dy, 0, &err) == 0, "%s", err.msg);
        cw_fetch(y, c.dy, (size_t)(n * rows));
        const double e = cw_rel_err(y, c.ref, (size_t)(n * rows));
        if (n == 8 || n == 1)
            fprintf(stderr, "cuda_types matvec %-7s %5lld x %-5lld n=%d rel err %.3g\n", type_name(type),
                    (long long)rows, (long long)cols, n, e);
        ck_assert_msg(e < ct_tol(), "%s %lld x %lld n=%d: rel err %g > %g", type_name(type), (long long)rows,
                      (long long)cols, n, e, ct_tol());
        if (n < 8)
            cw_assert_bitwise(type, "n < 8 vs n = 8", y, c.yv, n, rows);
    }
    cw_case_free(&c);
}

START_TEST(decode_matches_reference)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    static const int64_t shapes[][2] = {
        {300, 1280},  /* ragged rows, 5 k-tiles in 2 segments */
        {1000, 4864}, /* 19 k-tiles over 7 segments, the last short */
        {4100, 512},  /* the persistent grid loops over row-blocks, the last of 4 rows */
    };
    for (int ti = 0; ti < CT_NTYPES; ti++) {
        const int type = ct_types[ti];
        for (int s = 0; s < 3; s++)
            if (!test_small() || s == 0)
                check_decode(type, shapes[s][0], shapes[s][1], 100 * ti + s);
        /* the narrowest matrix, and a partial last k-tile */
        check_decode(type, 77, type == GGML_TYPE_BF16 ? 8 : ct_min_cols(type), 100 * ti + 7);
        check_decode(type, 37, ct_min_cols(type) == 256 ? 768 : 416, 100 * ti + 8);
    }
}
END_TEST

/* Prefill, n = 17 and 64: the reference, and bitwise the decode kernel's
 * result for the same tokens decoded in chunks of 1..8. */
START_TEST(prefill_matches_reference_and_decode)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    const int64_t rows = 300, ns[] = {17, 64};
    const int nn = test_small() ? 1 : 2; /* the small set: n = 17 only */
    for (int ti = 0; ti < CT_NTYPES; ti++) {
        const int type = ct_types[ti];
        const int64_t cols = ct_min_cols(type) == 256 ? 2304 : 1312; /* 9 / 6 k-tiles, the last partial for 32-blocks */
        cw_case c;
        cw_case_init(&c, type, ct_weights(type, rows, cols, 3000 + ti), rows, cols, 64, 55 + ti, 1);
        for (int k = 0; k < nn; k++) {
            const int64_t n = ns[k];
            cw_run_matmul(&c, n, c.y);
            const double e = cw_rel_err(c.y, c.ref, (size_t)(n * rows));
            fprintf(stderr, "cuda_types matmul %-7s %5lld x %-5lld n=%lld rel err %.3g\n", type_name(type),
                    (long long)rows, (long long)cols, (long long)n, e);
            ck_assert_msg(e < ct_tol(), "%s n=%lld: rel err %g > %g", type_name(type), (long long)n, e, ct_tol());
            const int sizes[] = {8, 5, 3, 1, 7, 2, 6, 4};
            cw_decode_chunks(&c, n, sizes, 8, c.yv);
            cw_assert_bitwise(type, "prefill vs decode", c.y, c.yv, n, rows);
        }
        cw_case_free(&c);
    }
}
END_TEST

/* An expert stack: the grouped product (tokens sorted by expert) against
 * the reference and bitwise against cuda_matvec_expert per token; the
 * (token, expert) pairs of cuda_matvec_experts bitwise the same. */
START_TEST(experts_match_reference_and_each_other)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    enum { E = 4 };
    /* a partial and a full 64-token tile, none, a few; the small set
     * (sanitizers: one launch per token below) fewer tokens */
    const int full[E] = {17, 0, 64, 3}, small[E] = {9, 0, 3, 1};
    const int *count = test_small() ? small : full;
    for (int ti = 0; ti < CT_NTYPES; ti++) {
        const int type = ct_types[ti];
        const int64_t rows = 96, cols = ct_min_cols(type) == 256 ? 512 : 288;
        uint8_t *w = ct_weights(type, rows * E, cols, 4000 + ti);
        cw_check_grouped("cuda_types grouped", type, w, rows, cols, E, count, 91 + ti, ct_tol(), 1);
        free(w);
    }
}
END_TEST

/* cuda_embed gives exactly cpu_embed's row (the decoders evaluate the CPU
 * decoders' float expressions); a bad id gives NaN. */
START_TEST(embed_matches_cpu)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    for (int ti = 0; ti < CT_NTYPES; ti++) {
        const int type = ct_types[ti];
        const int64_t cols = ct_min_cols(type) == 256 ? 768 : 416;
        uint8_t *w = ct_weights(type, 37, cols, 900 + ti);
        cw_check_embed(type, w, cols);
        free(w);
    }
}
END_TEST

#else

START_TEST(decode_matches_reference) { TEST_SKIP("gpu", "built without CUDA"); }
END_TEST
START_TEST(prefill_matches_reference_and_decode) { TEST_SKIP("gpu", "built without CUDA"); }
END_TEST
START_TEST(experts_match_reference_and_each_other) { TEST_SKIP("gpu", "built without CUDA"); }
END_TEST
START_TEST(embed_matches_cpu) { TEST_SKIP("gpu", "built without CUDA"); }
END_TEST

#endif

static Suite *cuda_types_suite(void)
{
    Suite *s = suite_create("cuda_types");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, types_are_native);
    tcase_add_test(tc, decode_matches_reference);
    tcase_add_test(tc, prefill_matches_reference_and_decode);
    tcase_add_test(tc, experts_match_reference_and_each_other);
    tcase_add_test(tc, embed_matches_cpu);
    suite_add_tcase(s, tc);
    return s;
}

TEST_SUITE(cuda_types_suite)
