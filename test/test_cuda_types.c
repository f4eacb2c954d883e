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
#include "model/make/recipe.h"

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

/* The llama.cpp recipes' attention projections stack on the card: for
 * every layer of an 8B llama (32 query heads, 8 KV heads), a 30B-A3B-shaped
 * MoE (32 / 4, 128 experts) and a GQA-2 model, q | k | v are one type (a
 * plain stack) or a mixed stack (cuda_mix_candidate; with CUDA, the card's
 * own check, shared-memory limit included, agrees).  Not covered, and not
 * stacked: the 8-expert rules (attn_k Q8_0) and attn_v IQ3_XXS (an
 * importance matrix at GQA < 4), whose types are not block tiles. */
START_TEST(recipe_attention_stacks)
{
    static const int recipes[] = {RECIPE_IQ3_XXS, RECIPE_IQ2_XXS, RECIPE_IQ2_S, RECIPE_Q2_0,
                                  RECIPE_Q2_K,    RECIPE_Q3_K_M,  RECIPE_Q4_K_M};
    static const struct {
        int layers, heads, kv, hd, dim, experts;
    } shapes[] = {{32, 32, 8, 128, 4096, 0}, {48, 32, 4, 128, 2048, 128}, {24, 16, 8, 64, 1024, 0}};
    int mixed = 0;
    for (size_t ri = 0; ri < sizeof recipes / sizeof recipes[0]; ri++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const recipe_model m = {shapes[si].layers, shapes[si].heads, shapes[si].kv, shapes[si].experts,
                                    false, false};
            const int64_t dq = (int64_t)shapes[si].heads * shapes[si].hd, dkv = (int64_t)shapes[si].kv * shapes[si].hd;
            for (int il = 0; il < shapes[si].layers; il++) {
                static const char *const part[3] = {"attn_q", "attn_k", "attn_v"};
                int types[3];
                const int64_t rows[3] = {dq, dkv, dkv};
                for (int k = 0; k < 3; k++) {
                    char name[64];
                    snprintf(name, sizeof name, "blk.%d.%s.weight", il, part[k]);
                    types[k] = recipe_type(recipes[ri], name, 2, shapes[si].dim, &m, NULL);
                }
                const int same = types[0] == types[1] && types[1] == types[2];
                ck_assert_msg(same || cuda_mix_candidate(types, rows, 3), "%s, shape %zu, layer %d: %s|%s|%s does not stack",
                              recipe_name(recipes[ri]), si, il, type_name(types[0]), type_name(types[1]),
                              type_name(types[2]));
                mixed += !same;
#ifdef STRATA_CUDA
                if (!same)
                    ck_assert_msg(cuda_mix_supported(types, rows, 3, shapes[si].dim), "%s: %s|%s|%s refused by the card",
                                  recipe_name(recipes[ri]), type_name(types[0]), type_name(types[1]),
                                  type_name(types[2]));
#endif
            }
        }
    ck_assert_int_gt(mixed, 0);
    /* what is not a candidate: an int8-tile type, a part of partial tiles
     * before another, one type throughout, one part */
    const int iq3xxs[3] = {GGML_TYPE_IQ2_S, GGML_TYPE_IQ2_S, GGML_TYPE_IQ3_XXS};
    const int mix[3] = {GGML_TYPE_IQ2_S, GGML_TYPE_IQ2_S, GGML_TYPE_Q4_K};
    const int one[3] = {GGML_TYPE_Q4_K, GGML_TYPE_Q4_K, GGML_TYPE_Q4_K};
    const int64_t ok[3] = {4096, 1024, 1024}, ragged[3] = {4096, 1000, 1024}, last[3] = {4096, 1024, 1000};
    ck_assert(cuda_mix_candidate(mix, ok, 3) && cuda_mix_candidate(mix, last, 3));
    ck_assert(!cuda_mix_candidate(iq3xxs, ok, 3) && !cuda_mix_candidate(mix, ragged, 3));
    ck_assert(!cuda_mix_candidate(one, ok, 3) && !cuda_mix_candidate(mix, ok, 1));
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


/* A mixed stack (cuda_matmul_mix): parts of different block-tile types,
 * their rows stacked, in one decode launch.  Against the reference (each
 * part's cpu_matmul) within F16's tolerance; decode n < 8 bitwise n = 8;
 * prefill (one launch per part with the stack's plan) bitwise decode in
 * chunks; and where the stack's plan is each part's own (512 columns: two
 * k-tiles, two segments either way) bitwise each part's cuda_matvec. */
static void check_mix(int np, const int *types, const int64_t *prow, int64_t cols, uint64_t seed)
{
    enum { N = 17 };
    int64_t rows = 0;
    for (int i = 0; i < np; i++)
        rows += prow[i];
    ck_assert_msg(cuda_mix_supported(types, prow, np, cols), "%s + %s: not supported", type_name(types[0]),
                  type_name(types[1]));
    cuda_mix m = {.n = np};
    uint8_t *hw[CUDA_MIX_MAX];
    float *x = malloc(N * cols * sizeof *x), *ref = malloc(N * rows * sizeof *ref);
    float *y = malloc(N * rows * sizeof *y), *yv = malloc(N * rows * sizeof *yv), *tmp = malloc(N * rows * sizeof *tmp);
    ck_assert(x && ref && y && yv && tmp);
    test_fill_normal(x, (size_t)(N * cols), 1.0f, seed + 99);
    for (int i = 0; i < np; i++) {
        m.type[i] = types[i];
        m.rows[i] = prow[i];
        hw[i] = ct_weights(types[i], prow[i], cols, seed + (uint64_t)i);
        m.w[i] = cw_upload(types[i], prow[i], cols, hw[i]);
    }
    /* the reference, part by part into the stacked rows */
    for (int64_t c = 0, r0 = 0; c < N; c++, r0 = 0)
        for (int i = 0; i < np; i++) {
            cpu_matmul(types[i], hw[i], prow[i], cols, x + c * cols, 1, tmp);
            memcpy(ref + c * rows + r0, tmp, (size_t)prow[i] * sizeof *tmp);
            r0 += prow[i];
        }
    float *dx = cw_dev_copy(x, N * cols * sizeof *x), *dy = NULL, *dp = NULL;
    ck_assert(cudaMalloc((void **)&dy, N * rows * sizeof(float)) == cudaSuccess);
    ck_assert(cudaMalloc((void **)&dp, N * rows * sizeof(float)) == cudaSuccess);
    const size_t sb = cuda_matmul_scratch_bytes(types[0], cols, N);
    void *scratch = NULL;
    ck_assert(cudaMalloc(&scratch, sb) == cudaSuccess);
    strata_error err = {0};
    char label[64];
    snprintf(label, sizeof label, "%s|%s%s%s", type_name(types[0]), type_name(types[1]), np > 2 ? "|" : "",
             np > 2 ? type_name(types[2]) : "");
    /* decode, n = 8 .. 1 */
    for (int n = 8; n >= 1; n--) {
        float *out = n == 8 ? yv : y;
        cw_poison(dy, (size_t)(8 * rows));
        ck_assert_msg(cuda_matmul_mix(&m, cols, dx, n, dy, NULL, 0, 0, &err) == 0, "%s", err.msg);
        cw_fetch(out, dy, (size_t)(n * rows));
        const double e = cw_rel_err(out, ref, (size_t)(n * rows));
        if (n == 8 || n == 1)
            fprintf(stderr, "cuda_types mix %-22s %5lld x %-5lld n=%d rel err %.3g\n", label, (long long)rows,
                    (long long)cols, n, e);
        ck_assert_msg(e < ct_tol(), "mix %s n=%d: rel err %g > %g", label, n, e, ct_tol());
        if (n < 8)
            cw_assert_bitwise(types[0], "mix n < 8 vs n = 8", y, yv, n, rows);
    }
    /* prefill vs decode in chunks of 1..8 */
    cw_poison(dp, (size_t)(N * rows));
    ck_assert_msg(cuda_matmul_mix(&m, cols, dx, N, dp, scratch, sb, 0, &err) == 0, "%s", err.msg);
    cw_fetch(y, dp, (size_t)(N * rows));
    const double e = cw_rel_err(y, ref, (size_t)(N * rows));
    fprintf(stderr, "cuda_types mix %-22s %5lld x %-5lld n=%d rel err %.3g (prefill)\n", label, (long long)rows,
            (long long)cols, N, e);
    ck_assert_msg(e < ct_tol(), "mix %s prefill: rel err %g > %g", label, e, ct_tol());
    const int sizes[] = {8, 5, 3, 1};
    cw_poison(dy, (size_t)(N * rows));
    for (int64_t i = 0, j = 0; i < N; j++) {
        const int k = (int)(N - i < sizes[j % 4] ? N - i : sizes[j % 4]);
        ck_assert_msg(cuda_matmul_mix(&m, cols, dx + i * cols, k, dy + i * rows, NULL, 0, 0, &err) == 0, "%s",
                      err.msg);
        i += k;
    }
    cw_fetch(yv, dy, (size_t)(N * rows));
    cw_assert_bitwise(types[0], "mix prefill vs decode", y, yv, N, rows);
    /* 512 columns: the parts' own plans are the stack's, so each part's
     * rows are bitwise its cuda_matvec */
    if (cols == 512)
        for (int i = 0, r0 = 0; i < np; r0 += (int)prow[i], i++) {
            float *dq = NULL;
            ck_assert(cudaMalloc((void **)&dq, 8 * prow[i] * sizeof(float)) == cudaSuccess);
            ck_assert_msg(cuda_matvec(types[i], m.w[i], prow[i], cols, dx, 8, dq, 0, &err) == 0, "%s", err.msg);
            cw_fetch(tmp, dq, (size_t)(8 * prow[i]));
            for (int c = 0; c < 8; c++)
                for (int64_t r = 0; r < prow[i]; r++)
                    ck_assert_msg(!memcmp(&tmp[c * prow[i] + r], &yv[c * rows + r0 + r], sizeof(float)),
                                  "mix %s part %d token %d row %lld: %.9g vs matvec %.9g", label, i, c,
                                  (long long)r, yv[c * rows + r0 + r], tmp[c * prow[i] + r]);
            cudaFree(dq);
        }
    for (int i = 0; i < np; i++) {
        cudaFree((void *)m.w[i]);
        free(hw[i]);
    }
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dp);
    cudaFree(scratch);
    free(x);
    free(ref);
    free(y);
    free(yv);
    free(tmp);
}

START_TEST(mixed_stack_matches_parts)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    /* the recipes' attention stacks (q | k | v), shrunk: IQ3_XXS mix, IQ2_XXS,
     * IQ2_S mix (v IQ3_S), Q2_K/Q3_K_M (k-quants), and a two-part stack
     * whose last part ends in a partial m-tile */
    static const int mixes[][3] = {
        {GGML_TYPE_IQ2_S, GGML_TYPE_IQ2_S, GGML_TYPE_Q4_K},
        {GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XXS, GGML_TYPE_Q2_K},
        {GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ3_S},
        {GGML_TYPE_Q3_K, GGML_TYPE_Q3_K, GGML_TYPE_Q5_K},
        {GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_XS},
    };
    const int64_t qkv[3] = {512, 128, 128};
    for (int i = 0; i < 5; i++) {
        check_mix(3, mixes[i], qkv, 512, 5000 + 10 * i);
        if (!test_small() || i == 0)
            check_mix(3, mixes[i], qkv, 2304, 5100 + 10 * i); /* 9 k-tiles, the stack's plan */
    }
    const int two[2] = {GGML_TYPE_Q5_0, GGML_TYPE_IQ4_NL};
    const int64_t ragged[2] = {272, 37};
    check_mix(2, two, ragged, 1280, 5900);
    /* what does not stack: a part of rows not a multiple of 16 before
     * another, a type that is not a block tile, one part */
    const int64_t bad_rows[2] = {37, 64};
    ck_assert(!cuda_mix_supported(two, bad_rows, 2, 512));
    const int f16[2] = {GGML_TYPE_IQ2_S, GGML_TYPE_Q8_0};
    ck_assert(!cuda_mix_supported(f16, qkv, 2, 512));
    ck_assert(!cuda_mix_supported(two, qkv, 1, 512));
}
END_TEST

#else

START_TEST(mixed_stack_matches_parts) { TEST_SKIP("gpu", "built without CUDA"); }
END_TEST
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
    tcase_add_test(tc, recipe_attention_stacks);
    tcase_add_test(tc, decode_matches_reference);
    tcase_add_test(tc, prefill_matches_reference_and_decode);
    tcase_add_test(tc, experts_match_reference_and_each_other);
    tcase_add_test(tc, embed_matches_cpu);
    tcase_add_test(tc, mixed_stack_matches_parts);
    suite_add_tcase(s, tc);
    return s;
}

TEST_SUITE(cuda_types_suite)
