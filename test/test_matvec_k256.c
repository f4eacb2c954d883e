/* test_matvec_k256.c: what suites matvec_q8k and matvec_q16k share (no
 * suite of its own): the two checks that are the same for every
 * activation format with one scale per 256 (act_q8k, act_q16k), run
 * through a k256_format (test_matvec_q8.h). */
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

static const int k_types[] = {GGML_TYPE_Q4_K, GGML_TYPE_Q6_K};
#define N_K_TYPES (sizeof k_types / sizeof k_types[0])

void *k256_quantize_rows(const k256_format *f, const float *x, int64_t n, int64_t cols)
{
    const int64_t nb = cols / 256;
    uint8_t *xq = calloc((size_t)(n * nb), f->size);
    for (int64_t i = 0; i < n; i++)
        f->quantize(x + i * cols, cols, xq + (size_t)(i * nb) * f->size);
    return xq;
}

void k256_tiles_match_c_twin(const k256_format *f, uint64_t x_seed, uint64_t w_seed)
{
    const int64_t rows = 37, nmax = 17;
    const int64_t ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 16, 17};
    const int64_t colss[] = {256, 768, 4864};
    for (size_t ci = 0; ci < sizeof colss / sizeof colss[0]; ci++) {
        const int64_t cols = colss[ci];
        float *x = malloc(nmax * cols * sizeof *x);
        float *ya = malloc(nmax * rows * sizeof *ya), *yc = malloc(nmax * rows * sizeof *yc);
        test_fill_normal(x, nmax * cols, 1.0f, x_seed + ci);
        void *xq = k256_quantize_rows(f, x, nmax, cols);
        for (size_t ti = 0; ti < N_K_TYPES; ti++) {
            const int type = k_types[ti];
            uint8_t *w = q8_random_blocks(type, rows, cols, w_seed + 10 * ci + ti);
            const size_t rb = type_row_bytes(type, cols);
            f->rows(0, type, w, rb, rows, cols, xq, nmax, yc, rows);
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                const int64_t n = ns[ni];
                memset(ya, 0xff, nmax * rows * sizeof *ya);
                f->rows(1, type, w, rb, rows, cols, xq, n, ya, rows);
                for (int64_t k = 0; k < n * rows; k++)
                    ck_assert_msg(!memcmp(&ya[k], &yc[k], sizeof *ya),
                                  "%s %s cols %lld n=%lld row %lld tok %lld: avx2 %.9g, C twin %.9g",
                                  f->name, type_name(type), (long long)cols, (long long)n,
                                  (long long)(k % rows), (long long)(k / rows), ya[k], yc[k]);
            }
            free(w);
        }
        free(x);
        free(ya);
        free(yc);
        free(xq);
    }
}

void k256_path_is_invariant(const k256_format *f, uint64_t x_seed, uint64_t w_seed)
{
    const int64_t rows = 203, cols = 4864, n = 9;
    float *x = malloc(n * cols * sizeof *x);
    float *y1 = malloc(n * rows * sizeof *y1), *yn = malloc(n * rows * sizeof *yn);
    float *yc = malloc(n * rows * sizeof *yc);
    test_fill_normal(x, n * cols, 1.0f, x_seed);
    void *xq = k256_quantize_rows(f, x, n, cols);
    ck_assert_int_eq(cpu_matmul_fast_set_q8(f->act), f->act);
    ck_assert_int_eq(cpu_matmul_fast_set_q8k(f->q8k), f->q8k);
    ck_assert_int_eq(cpu_matmul_fast_set_isa(1), 1);
    for (size_t ti = 0; ti < N_K_TYPES; ti++) {
        const int type = k_types[ti];
        uint8_t *w = q8_random_blocks(type, rows, cols, w_seed + ti);
        f->rows(0, type, w, type_row_bytes(type, cols), rows, cols, xq, n, yc, rows);
        tp_set_threads(1);
        for (int64_t i = 0; i < n; i++)
            cpu_matmul_fast(type, w, rows, cols, x + i * cols, 1, y1 + i * rows);
        ck_assert_msg(!memcmp(y1, yc, n * rows * sizeof *yc), "%s %s: not the C twin's bits",
                      f->name, type_name(type));
        for (int nt = 1; nt <= 3; nt++) {
            tp_set_threads(nt);
            memset(yn, 0, n * rows * sizeof *yn);
            cpu_matmul_fast(type, w, rows, cols, x, n, yn);
            ck_assert_msg(!memcmp(y1, yn, n * rows * sizeof *yn),
                          "%s %s: batch of %lld on %d threads differs from one row at a time",
                          f->name, type_name(type), (long long)n, nt);
        }
        free(w);
    }
    tp_set_threads(0);
    cpu_matmul_fast_set_isa(-1);
    cpu_matmul_fast_set_q8(-1);
    cpu_matmul_fast_set_q8k(-1);
    free(x);
    free(y1);
    free(yn);
    free(yc);
    free(xq);
}

double k256_against_float64(const k256_format *f, int64_t cols, uint64_t x_seed, uint64_t w_seed,
                            double step_frac, k256_other_fn other, const char *const *other_names,
                            int n_other)
{
    enum { MAX_OTHER = 2 };
    const int64_t rows = 37, n = 5, nb = cols / 256;
    const int avx2 = fast_cpu_avx2_ok();
    ck_assert(n_other <= MAX_OTHER);
    float *x = malloc(n * cols * sizeof *x), *xd = malloc(n * cols * sizeof *xd);
    float *d = malloc(n * nb * sizeof *d);
    float *wf = malloc(rows * cols * sizeof *wf), *y = malloc(n * rows * sizeof *y);
    float *yo[MAX_OTHER];
    for (int k = 0; k < n_other; k++)
        yo[k] = malloc(n * rows * sizeof *yo[k]);
    test_fill_normal(x, n * cols, 1.0f, x_seed);
    void *xq = k256_quantize_rows(f, x, n, cols);
    for (int64_t b = 0; b < n * nb; b++)
        f->decode(xq, b, xd + 256 * b, d + b);
    double worst = 0;
    for (size_t ti = 0; ti < N_K_TYPES; ti++) {
        const int type = k_types[ti];
        uint8_t *w = q8_random_blocks(type, rows, cols, w_seed + ti);
        const size_t rb = type_row_bytes(type, cols);
        type_traits_get(type)->dequant(w, wf, rows * cols);
        for (int k = 0; k < n_other; k++)
            other(k, type, w, rb, rows, cols, x, n, yo[k]);
        double rel[1 + MAX_OTHER] = {0};
        for (int tw = 0; tw <= avx2; tw++) {
            f->rows(tw, type, w, rb, rows, cols, xq, n, y, rows);
            for (int64_t i = 0; i < n; i++)
                for (int64_t r = 0; r < rows; r++) {
                    double on_codes = 0, exact = 0, mag = 0, step = 0;
                    for (int64_t c = 0; c < cols; c++) {
                        const double wv = wf[r * cols + c];
                        on_codes += wv * xd[i * cols + c];
                        exact += wv * x[i * cols + c];
                        mag += fabs(wv * x[i * cols + c]);
                        step += fabs(wv) * d[i * nb + c / 256] * step_frac;
                    }
                    const double got = y[i * rows + r];
                    ck_assert_msg(mag > 0, "%s row %lld: all-zero product", type_name(type),
                                  (long long)r);
                    ck_assert_msg(fabs(got - on_codes) <= 1e-5 * mag,
                                  "%s %s (%s) row %lld tok %lld: %.9g, on the codes %.9g (sum|wx| %g)",
                                  f->name, type_name(type), tw ? "avx2" : "C", (long long)r,
                                  (long long)i, got, on_codes, mag);
                    ck_assert_msg(fabs(got - exact) <= step + 1e-5 * mag,
                                  "%s %s (%s) row %lld tok %lld: %.9g, exact %.9g, bound %g",
                                  f->name, type_name(type), tw ? "avx2" : "C", (long long)r,
                                  (long long)i, got, exact, step + 1e-5 * mag);
                    if (!tw) {
                        rel[0] += fabs(got - exact) / mag;
                        for (int k = 0; k < n_other; k++)
                            rel[1 + k] += fabs(yo[k][i * rows + r] - exact) / mag;
                    }
                }
        }
        printf("  %-5s cols %lld: mean |y - exact| / sum|wx|: %s %.2e", type_name(type),
               (long long)cols, f->name, rel[0] / (double)(n * rows));
        for (int k = 0; k < n_other; k++)
            printf(", %s %.2e", other_names[k], rel[1 + k] / (double)(n * rows));
        printf("\n");
        worst = rel[0] / (double)(n * rows) > worst ? rel[0] / (double)(n * rows) : worst;
        free(w);
    }
    free(x);
    free(xd);
    free(d);
    free(wf);
    free(y);
    for (int k = 0; k < n_other; k++)
        free(yo[k]);
    free(xq);
    return worst;
}
