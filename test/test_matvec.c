/* test_matvec.c: suite "matvec" — the reference matvec/matmul/embed
 * (kernels/cpu/matvec.c) against a float64 dot product of the decoded
 * weights, and cpu_matmul_fast against the reference, for every type strata
 * decodes, on random (never zero) inputs; the fast path's invariance (batch
 * size, thread count) bit for bit; and the ISA guard (no AVX outside the
 * runtime-dispatched *_avx2 functions). */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/act_q8.h"
#include "kernels/cpu/dot_kernels.h"
#include "kernels/cpu/threadpool.h"
#include "kernels/ops.h"
#include "model/quant.h"

static const int weight_types[] = {
    GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0,
    GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_IQ4_NL, GGML_TYPE_Q4_K,
    GGML_TYPE_Q6_K, GGML_TYPE_Q2_0, GGML_TYPE_IQ3_XXS, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
    GGML_TYPE_Q5_K, GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_S, GGML_TYPE_IQ3_S,
    GGML_TYPE_IQ4_XS,
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
    if (type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1 || type == GGML_TYPE_Q4_K ||
        type == GGML_TYPE_Q5_K)
        offs[1] = 2;
    if (type == GGML_TYPE_Q6_K)
        offs[0] = 208;
    if (type == GGML_TYPE_Q3_K)
        offs[0] = 108;
    if (type == GGML_TYPE_Q2_K)
        offs[0] = 80, offs[1] = 82;
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

/* Both kernel sets (scalar, and AVX2 where the CPU has it) against the
 * reference.  The fused kernels (every block type) sum in f32: the scalar
 * ones 32 products per sub-block (then double), the AVX2 ones in 16 lanes
 * over the whole row (2 accumulators x 8), and Q4_1's weight is one fma
 * instead of two roundings; the float types sum 256-element chunks in f32
 * then double.  Error ~ sqrt(terms per lane) *
 * 2^-24 * sum|w x|, < 1e-6 of it for these rows; 1e-5 leaves a wide
 * margin (a rounding-order bug is off by far more).  With float
 * activations: the int8 ones of act_q8.h have their own test and bound
 * (test_matvec_q8.c). */
START_TEST(fast_matches_reference)
{
    const int64_t rows = 203, cols = 768, n = 5; /* odd rows: uneven thread split */
    cpu_matmul_fast_set_q8(0);
    float *x = malloc(n * cols * sizeof *x);
    float *y = malloc(n * rows * sizeof *y), *yf = malloc(n * rows * sizeof *yf);
    float *wf = malloc(rows * cols * sizeof *wf);
    test_fill_normal(x, n * cols, 1.0f, 9);
    for (int isa = 0; isa <= 1; isa++) {
        if (cpu_matmul_fast_set_isa(isa) != isa) {
            test_note_skip("fast_matches_reference (AVX2 kernels)", "cpu", "CPU lacks AVX2/FMA/F16C");
            continue;
        }
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
                                  "%s (%s) row %lld tok %lld: fast %.9g ref %.9g",
                                  type_name(type), isa ? "avx2" : "scalar",
                                  (long long)r, (long long)i, yf[i * rows + r],
                                  y[i * rows + r]);
                }
            free(w);
        }
    }
    cpu_matmul_fast_set_isa(-1);
    cpu_matmul_fast_set_q8(-1);
    free(x);
    free(y);
    free(yf);
    free(wf);
}
END_TEST

/* Every block type has a fused kernel in both sets (the chunk fallback is
 * for the float types only), and each AVX2 kernel agrees with its scalar
 * twin on random blocks (finite, non-zero scales) and Gaussian activations,
 * directly, kernel against kernel, for 1..5 activation rows.  Both decode
 * the same floats; they differ only in summation order (16 f32 lanes over
 * the row vs 32-product f32 sums added in double), so the tolerance is the
 * same 1e-5 of sum |w x| as above. */
START_TEST(avx2_kernels_match_scalar_twins)
{
    static const int fused[] = {
        GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
        GGML_TYPE_IQ4_NL, GGML_TYPE_Q2_0, GGML_TYPE_IQ3_XXS, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
        GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS,
        GGML_TYPE_IQ2_S, GGML_TYPE_IQ3_S, GGML_TYPE_IQ4_XS,
    };
    const int64_t rows = 37, cols = 768, n = 5;
    const int avx2 = fast_cpu_avx2_ok();
    if (!avx2)
        test_note_skip("avx2_kernels_match_scalar_twins (AVX2 half)", "cpu", "CPU lacks AVX2/FMA/F16C");
    float *x = malloc(n * cols * sizeof *x), *wf = malloc(rows * cols * sizeof *wf);
    float *ys = malloc(n * rows * sizeof *ys), *yv = malloc(n * rows * sizeof *yv);
    test_fill_normal(x, n * cols, 1.0f, 13);
    for (size_t ti = 0; ti < sizeof fused / sizeof fused[0]; ti++) {
        const int type = fused[ti];
        fast_rows_fn ks = fast_rows_scalar(type), kv = fast_rows_vec(type);
        ck_assert_msg(ks != NULL, "%s has no scalar kernel", type_name(type));
        if (!avx2)
            continue;
        ck_assert_msg(kv != NULL, "%s has no AVX2 kernel", type_name(type));
        uint8_t *w = random_weights(type, rows, cols, 500 + ti);
        const size_t rb = type_row_bytes(type, cols);
        type_traits_get(type)->dequant(w, wf, rows * cols);
        for (int64_t nn = 1; nn <= n; nn++) {
            ks(w, rb, rows, cols, x, nn, ys, rows);
            kv(w, rb, rows, cols, x, nn, yv, rows);
            for (int64_t i = 0; i < nn; i++)
                for (int64_t r = 0; r < rows; r++) {
                    double mag = 0;
                    for (int64_t c = 0; c < cols; c++)
                        mag += fabs((double)wf[r * cols + c] * x[i * cols + c]);
                    ck_assert_msg(mag > 0, "%s row %lld: all-zero product", type_name(type),
                                  (long long)r);
                    ck_assert_msg(fabs(yv[i * rows + r] - ys[i * rows + r]) <= 1e-5 * mag,
                                  "%s n=%lld row %lld tok %lld: avx2 %.9g scalar %.9g (sum|wx| %g)",
                                  type_name(type), (long long)nn, (long long)r, (long long)i,
                                  yv[i * rows + r], ys[i * rows + r], mag);
                }
        }
        free(w);
    }
    free(x);
    free(wf);
    free(ys);
    free(yv);
}
END_TEST

/* The invariance rule (ops.h): a row's result may not depend on how many
 * activation rows share the call nor on the thread count.  Bit for bit:
 * n = 9 (tiles of 4, 4, 1) on 1, 2 and 3 threads against one call per
 * activation row, for every type and both kernel sets. */
START_TEST(fast_is_invariant)
{
    const int64_t rows = 203, cols = 768, n = 9;
    float *x = malloc(n * cols * sizeof *x);
    float *y1 = malloc(n * rows * sizeof *y1), *yn = malloc(n * rows * sizeof *yn);
    test_fill_normal(x, n * cols, 1.0f, 11);
    for (int isa = 0; isa <= 1; isa++) {
        if (cpu_matmul_fast_set_isa(isa) != isa)
            continue; /* noted by fast_matches_reference */
        for (size_t ti = 0; ti < N_TYPES; ti++) {
            const int type = weight_types[ti];
            uint8_t *w = random_weights(type, rows, cols, 400 + ti);
            tp_set_threads(1);
            for (int64_t i = 0; i < n; i++)
                cpu_matmul_fast(type, w, rows, cols, x + i * cols, 1, y1 + i * rows);
            for (int nt = 1; nt <= 3; nt++) {
                tp_set_threads(nt);
                ck_assert_int_eq(tp_threads(), nt);
                memset(yn, 0, n * rows * sizeof *yn);
                cpu_matmul_fast(type, w, rows, cols, x, n, yn);
                ck_assert_msg(!memcmp(y1, yn, n * rows * sizeof *yn),
                              "%s (%s): batch of %lld on %d threads differs from one row at a time",
                              type_name(type), isa ? "avx2" : "scalar", (long long)n, nt);
            }
            free(w);
        }
    }
    tp_set_threads(0);
    cpu_matmul_fast_set_isa(-1);
    free(x);
    free(y1);
    free(yn);
}
END_TEST

/* The ISA guard: the library must run on any x86-64, so AVX, AVX2,
 * FMA or F16C instructions (any VEX/EVEX mnemonic, i.e. one starting with
 * 'v' other than the VMX/verr ones, or a ymm/zmm operand) may only appear
 * in functions compiled for them, which dot_kernels.h says are named
 * *_avx2 or, for the AVX512-VNNI int8 kernels, *_avx512 (gcc clones keep
 * the name before a '.').  Disassembles the
 * libstrata.a built next to this binary. */
static int is_avx_insn(const char *mn, const char *line)
{
    static const char *not_avx[] = {
        "verr", "verw", "vmcall", "vmlaunch", "vmresume", "vmxoff", "vmxon", "vmread",
        "vmwrite", "vmptrld", "vmptrst", "vmclear", "vmfunc", "vmrun", "vmload",
        "vmsave", "vmmcall",
    };
    if (strstr(line, "%ymm") || strstr(line, "%zmm"))
        return 1;
    if (mn[0] != 'v')
        return 0;
    for (size_t i = 0; i < sizeof not_avx / sizeof not_avx[0]; i++)
        if (!strcmp(mn, not_avx[i]))
            return 0;
    return 1;
}

static int is_dispatched_name(const char *fn)
{
    char base[256];
    snprintf(base, sizeof base, "%s", fn);
    char *dot = strchr(base, '.');
    if (dot)
        *dot = '\0';
    const size_t n = strlen(base);
    return (n >= 5 && !strcmp(base + n - 5, "_avx2")) ||
           (n >= 7 && !strcmp(base + n - 7, "_avx512"));
}

START_TEST(no_avx_outside_dispatched_functions)
{
#if !defined(__x86_64__)
    TEST_SKIP("cpu", "not x86-64");
#else
    if (test_run("command -v objdump >/dev/null 2>&1", NULL) != 0)
        TEST_SKIP("tool", "objdump not found");
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 32);
    if (len <= 0)
        TEST_SKIP("tool", "cannot read /proc/self/exe");
    exe[len] = '\0';
    char *slash = strrchr(exe, '/');
    strcpy(slash + 1, "libstrata.a");
    if (access(exe, R_OK) != 0)
        TEST_SKIP("tool", "no libstrata.a next to strata-tests");
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "objdump -d --no-show-raw-insn '%s'", exe);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char line[1024], fn[256] = "", bad_fn[256] = "", bad_line[256] = "";
    long n_bad = 0, n_dispatched = 0, n_lines = 0;
    while (fgets(line, sizeof line, p)) {
        n_lines++;
        char name[256];
        if (line[0] != ' ' && sscanf(line, "%*x <%255[^>]>:", name) == 1) {
            snprintf(fn, sizeof fn, "%s", name);
            continue;
        }
        const char *tab = strchr(line, '\t');
        if (line[0] != ' ' || !tab)
            continue;
        char mn[64] = "";
        if (sscanf(tab + 1, "%63s", mn) != 1 || !is_avx_insn(mn, line))
            continue;
        if (is_dispatched_name(fn)) {
            n_dispatched++;
        } else if (n_bad++ == 0) {
            snprintf(bad_fn, sizeof bad_fn, "%s", fn);
            snprintf(bad_line, sizeof bad_line, "%s", tab + 1);
        }
    }
    const int rc = pclose(p);
    ck_assert_msg(rc == 0 && n_lines > 1000, "objdump failed (status %d, %ld lines)", rc, n_lines);
    /* the parser must see the AVX2 kernels, or it proves nothing */
    ck_assert_msg(n_dispatched > 100, "only %ld AVX instructions in *_avx2 functions", n_dispatched);
    ck_assert_msg(n_bad == 0, "%ld AVX instruction(s) outside *_avx2 / *_avx512 functions, first in %s: %s",
                  n_bad, bad_fn, bad_line);
#endif
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

/* cpu_mv_chain (the persistent CUDA chain's twin) is its steps spelled out:
 * cpu_matvec of x, or of cpu_swiglu(x, xu), then cpu_add of res; a later
 * step reading an earlier one's output. */
START_TEST(mv_chain_is_its_steps)
{
    const int type = GGML_TYPE_IQ3_XXS;
    const int64_t d = 512, f = 768;
    uint8_t *w1 = random_weights(type, 2 * f, d, 600), *w2 = random_weights(type, d, f, 601);
    float x[512], gu[2 * 768], y[512], a[768], ref_gu[2 * 768], ref_y[512];
    test_fill_normal(x, (size_t)d, 1.0f, 602);
    const mv_chain_op ops[2] = {
        {type, w1, 2 * f, d, x, NULL, NULL, gu},
        {type, w2, d, f, gu, gu + f, x, y},
    };
    ck_assert_int_eq(cpu_mv_chain(ops, 2), 0);
    cpu_matvec(type, w1, 2 * f, d, x, ref_gu);
    cpu_swiglu(ref_gu, ref_gu + f, f, a);
    cpu_matvec(type, w2, d, f, a, ref_y);
    cpu_add(ref_y, x, d);
    ck_assert(!memcmp(gu, ref_gu, sizeof gu));
    ck_assert(!memcmp(y, ref_y, sizeof y));
    free(w1);
    free(w2);
}
END_TEST

static Suite *matvec_suite(void)
{
    Suite *s = suite_create("matvec");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, reference_matches_float64_dot);
    tcase_add_test(tc, mv_chain_is_its_steps);
    tcase_add_test(tc, fast_matches_reference);
    tcase_add_test(tc, avx2_kernels_match_scalar_twins);
    tcase_add_test(tc, fast_is_invariant);
    tcase_add_test(tc, no_avx_outside_dispatched_functions);
    tcase_add_test(tc, embed_is_the_decoded_row);
    suite_add_tcase(s, tc);
    return s;
}
TEST_SUITE(matvec_suite)
