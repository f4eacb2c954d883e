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

static void ct_assert_bitwise(int type, const char *what, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(!memcmp(&a[i], &b[i], sizeof *a), "%s %s: element %zu: %.9g vs %.9g", type_name(type), what,
                      i, a[i], b[i]);
}

/* Decode, n = 1..8, against the reference; token c of every n bitwise
 * equal to token c of n = 8. */
static void check_decode(int type, int64_t rows, int64_t cols, uint64_t seed)
{
    uint8_t *w = ct_weights(type, rows, cols, seed);
    void *dw = cw_upload(type, rows, cols, w);
    float *x = malloc(8 * cols * sizeof *x), *ref = malloc(8 * rows * sizeof *ref);
    float *y8 = malloc(8 * rows * sizeof *y8), *y = malloc(8 * rows * sizeof *y);
    test_fill_normal(x, (size_t)(8 * cols), 1.0f, seed + 1);
    cpu_matmul(type, w, rows, cols, x, 8, ref);
    float *dx = cw_dev_copy(x, 8 * cols * sizeof *x), *dy = NULL;
    ck_assert(cudaMalloc((void **)&dy, 8 * rows * sizeof(float)) == cudaSuccess);
    strata_error err = {0};
    for (int n = 8; n >= 1; n--) {
        cw_poison(dy, (size_t)(8 * rows));
        ck_assert_msg(cuda_matvec(type, dw, rows, cols, dx, n, dy, 0, &err) == 0, "%s", err.msg);
        cw_fetch(n == 8 ? y8 : y, dy, (size_t)(n * rows));
        const double e = cw_rel_err(n == 8 ? y8 : y, ref, (size_t)(n * rows));
        if (n == 8 || n == 1)
            fprintf(stderr, "cuda_types matvec %-7s %5lld x %-5lld n=%d rel err %.3g\n", type_name(type),
                    (long long)rows, (long long)cols, n, e);
        ck_assert_msg(e < ct_tol(), "%s %lld x %lld n=%d: rel err %g > %g", type_name(type), (long long)rows,
                      (long long)cols, n, e, ct_tol());
        if (n < 8)
            ct_assert_bitwise(type, "n < 8 vs n = 8", y, y8, (size_t)(n * rows));
    }
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dy);
    free(w);
    free(x);
    free(ref);
    free(y8);
    free(y);
}

START_TEST(decode_matches_reference)
{
    const char *why;
    if (!test_have_gpu(&why))
        TEST_SKIP("gpu", why);
    static const int64_t shapes[][2] = {
        {300, 1280},  /* ragged rows, 5 k-tiles in 5 segments (a cluster) */
        {1000, 4864}, /* 19 k-tiles over 5 segments, the last short */
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
        uint8_t *w = ct_weights(type, rows, cols, 3000 + ti);
        void *dw = cw_upload(type, rows, cols, w);
        const int64_t nmax = 64;
        float *x = malloc(nmax * cols * sizeof *x), *ref = malloc(nmax * rows * sizeof *ref);
        float *y = malloc(nmax * rows * sizeof *y), *yv = malloc(nmax * rows * sizeof *yv);
        test_fill_normal(x, (size_t)(nmax * cols), 1.0f, 55 + ti);
        cpu_matmul(type, w, rows, cols, x, nmax, ref);
        float *dx = cw_dev_copy(x, nmax * cols * sizeof *x), *dy = NULL;
        ck_assert(cudaMalloc((void **)&dy, nmax * rows * sizeof(float)) == cudaSuccess);
        strata_error err = {0};
        for (int k = 0; k < nn; k++) {
            const int64_t n = ns[k];
            const size_t sb = cuda_matmul_scratch_bytes(type, cols, n);
            void *scratch = NULL;
            ck_assert(sb > 0 && cudaMalloc(&scratch, sb) == cudaSuccess);
            cw_poison(dy, (size_t)(n * rows));
            ck_assert_msg(cuda_matmul(type, dw, rows, cols, dx, n, dy, scratch, sb, 0, &err) == 0, "%s", err.msg);
            cw_fetch(y, dy, (size_t)(n * rows));
            cudaFree(scratch);
            const double e = cw_rel_err(y, ref, (size_t)(n * rows));
            fprintf(stderr, "cuda_types matmul %-7s %5lld x %-5lld n=%lld rel err %.3g\n", type_name(type),
                    (long long)rows, (long long)cols, (long long)n, e);
            ck_assert_msg(e < ct_tol(), "%s n=%lld: rel err %g > %g", type_name(type), (long long)n, e, ct_tol());
            cw_poison(dy, (size_t)(n * rows));
            const int sizes[] = {8, 5, 3, 1, 7, 2, 6, 4};
            for (int64_t i = 0, j = 0; i < n; j++) {
                const int c = (int)(n - i < sizes[j % 8] ? n - i : sizes[j % 8]);
                ck_assert(cuda_matvec(type, dw, rows, cols, dx + i * cols, c, dy + i * rows, 0, &err) == 0);
                i += c;
            }
            cw_fetch(yv, dy, (size_t)(n * rows));
            ct_assert_bitwise(type, "prefill vs decode", y, yv, (size_t)(n * rows));
        }
        cudaFree(dw);
        cudaFree(dx);
        cudaFree(dy);
        free(w);
        free(x);
        free(ref);
        free(y);
        free(yv);
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
    int32_t off[E + 1] = {0};
    for (int e = 0; e < E; e++)
        off[e + 1] = off[e] + count[e];
    const int64_t n = off[E], rows = 96;
    for (int ti = 0; ti < CT_NTYPES; ti++) {
        const int type = ct_types[ti];
        const int64_t cols = ct_min_cols(type) == 256 ? 512 : 288;
        const size_t slab = cuda_weight_bytes(type, rows, cols);
        const size_t hslab = type_row_bytes(type, cols) * (size_t)rows;
        uint8_t *w = ct_weights(type, rows * E, cols, 4000 + ti);
        uint8_t *dw = NULL;
        ck_assert(cudaMalloc((void **)&dw, slab * E) == cudaSuccess);
        strata_error err = {0};
        for (int e = 0; e < E; e++)
            ck_assert_msg(cuda_weight_upload(type, rows, cols, w + e * hslab, dw + e * slab, 0, &err) == 0, "%s",
                          err.msg);
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
        fprintf(stderr, "cuda_types grouped %-7s %d experts, %lld tokens: rel err %.3g\n", type_name(type), E,
                (long long)n, rel);
        ck_assert_msg(rel < ct_tol(), "%s grouped: rel err %g", type_name(type), rel);
        /* one token at a time, the expert id on the card */
        int32_t ids[E], *sel = malloc(n * sizeof *sel);
        for (int e = 0; e < E; e++) {
            ids[e] = e;
            for (int i = off[e]; i < off[e + 1]; i++)
                sel[i] = e;
        }
        int32_t *dids = cw_dev_copy(ids, sizeof ids), *dsel = cw_dev_copy(sel, n * sizeof *sel);
        cw_poison(dy, (size_t)(n * rows));
        for (int e = 0; e < E; e++)
            for (int i = off[e]; i < off[e + 1]; i++)
                ck_assert(cuda_matvec_expert(type, dw, rows, cols, dids + e, dx + (size_t)i * cols, 1,
                                             dy + (size_t)i * rows, 0, &err) == 0);
        cw_fetch(yv, dy, (size_t)(n * rows));
        ct_assert_bitwise(type, "grouped vs expert matvec", y, yv, (size_t)(n * rows));
        /* every pair in one launch (decode batches of MoE models) */
        cw_poison(dy, (size_t)(n * rows));
        ck_assert_msg(cuda_matvec_experts(type, dw, rows, cols, dsel, (int)n, 1, dx, dy, 0, &err) == 0, "%s",
                      err.msg);
        cw_fetch(y, dy, (size_t)(n * rows));
        ct_assert_bitwise(type, "pairs vs expert matvec", y, yv, (size_t)(n * rows));
        cudaFree(dids);
        cudaFree(dsel);
        cudaFree(scratch);
        cudaFree(doff);
        cudaFree(dw);
        cudaFree(dx);
        cudaFree(dy);
        free(sel);
        free(w);
        free(x);
        free(y);
        free(yv);
        free(ref);
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
    const int64_t rows = 37;
    const int32_t ids[] = {0, 36, 17, 8, 15, 16, 37, -1};
    const int nt = (int)(sizeof ids / sizeof ids[0]);
    for (int ti = 0; ti < CT_NTYPES; ti++) {
        const int type = ct_types[ti];
        const int64_t cols = ct_min_cols(type) == 256 ? 768 : 416;
        uint8_t *w = ct_weights(type, rows, cols, 900 + ti);
        void *dw = cw_upload(type, rows, cols, w);
        int32_t *did = cw_dev_copy(ids, sizeof ids);
        float *dout = NULL, *out = malloc(nt * cols * sizeof *out), *ref = malloc(cols * sizeof *ref);
        ck_assert(cudaMalloc((void **)&dout, nt * cols * sizeof(float)) == cudaSuccess);
        strata_error err = {0};
        ck_assert_msg(cuda_embed(type, dw, rows, cols, did, nt, dout, 0, &err) == 0, "%s", err.msg);
        cw_fetch(out, dout, (size_t)(nt * cols));
        for (int i = 0; i < nt; i++) {
            if (ids[i] < 0 || ids[i] >= rows) {
                ck_assert(isnan(out[i * cols]) && isnan(out[i * cols + cols - 1]));
                continue;
            }
            cpu_embed(type, w, cols, ids[i], ref);
            ct_assert_bitwise(type, "embed", out + i * cols, ref, (size_t)cols);
        }
        cudaFree(dw);
        cudaFree(did);
        cudaFree(dout);
        free(w);
        free(out);
        free(ref);
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
