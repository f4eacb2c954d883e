/* bench_quant.c: `strata-cli bench --quant` — quantizer throughput (MB/s of
 * f32 input) and CPU matvec throughput (GB/s of weight bytes read) per type.
 *
 * Called by cmd_bench as bench_quant(argc, argv); options:
 *   --rows R --cols C   matrix shape (default 2048 x 2048; C a multiple of 256)
 *   --seconds S         time per measurement (default 0.5)
 * Weights are seeded Gaussians; every number is the best of repeated runs
 * over at least S seconds, so a busy machine lowers but never inflates it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/ops.h"
#include "model/quant.h"
#include "model/make/quantize.h"
#include "cli/bench/bench.h"

int bench_quant(int argc, char **argv);

static double bq_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* xorshift + Box-Muller: Gaussian weights without pulling in test code */
static void bq_fill(float *x, int64_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        double u[2];
        for (int k = 0; k < 2; k++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            u[k] = ((s >> 11) + 0.5) / 9007199254740992.0;
        }
        x[i] = (float)(0.02 * __builtin_sqrt(-2 * __builtin_log(u[0])) *
                       __builtin_cos(6.283185307179586 * u[1]));
    }
}

typedef void (*bq_body)(void *ctx);

/* Best time of one call of body, repeating for at least `seconds`. */
static double bq_time(bq_body body, void *ctx, double seconds)
{
    double best = 1e30, t_end = bq_now() + seconds;
    int reps = 0;
    do {
        const double t0 = bq_now();
        body(ctx);
        const double dt = bq_now() - t0;
        best = dt < best ? dt : best;
        reps++;
    } while (bq_now() < t_end || reps < 2);
    return best;
}

typedef struct bq_ctx {
    int type, fast;
    int64_t rows, cols;
    const float *x, *w;
    void *q;
    float *y;
} bq_ctx;

static void bq_quant_1t(void *p)
{
    bq_ctx *c = p;
    quantize_rows(c->type, c->w, c->cols, c->rows, c->q, NULL, 1, NULL);
}

static void bq_matvec(void *p)
{
    bq_ctx *c = p;
    if (c->fast)
        cpu_matmul_fast(c->type, c->q, c->rows, c->cols, c->x, 1, c->y);
    else
        cpu_matvec(c->type, c->q, c->rows, c->cols, c->x, c->y);
}

void bench_quant_usage(FILE *f)
{
    fprintf(f, "usage: strata-cli bench --quant [--rows R] [--cols C] [--seconds S]\n\n"
               "Per weight type: the quantizer's MB/s and the CPU matvec's GB/s (reference and\n"
               "fast path) on an R x C matrix of random weights.\n\n"
               "  --rows R                matrix rows (default 2048)\n"
               "  --cols C                matrix columns, a multiple of 256 (default 2048)\n"
               "  --seconds S             time per measurement (default 0.5)\n");
}

int bench_quant(int argc, char **argv)
{
    int64_t rows = 2048, cols = 2048;
    double seconds = 0.5;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x = 0;
        if (!strcmp(a, "--quant"))
            continue;
        if (!strcmp(a, "--rows") || !strcmp(a, "--cols")) {
            if (bench_int("--quant", a, v, 1, 1 << 20, &x))
                return 2;
            *(a[2] == 'r' ? &rows : &cols) = x;
            i++;
        } else if (!strcmp(a, "--seconds")) {
            char *end = NULL;
            seconds = v ? strtod(v, &end) : 0;
            if (!v || !*v || *end || !(seconds > 0 && seconds <= 3600)) {
                fprintf(stderr, "strata-cli bench --quant: --seconds '%s' is not a time in "
                                "(0, 3600]\n", v ? v : "");
                return 2;
            }
            i++;
        } else {
            fprintf(stderr, "strata-cli bench --quant: unknown option '%s' (see bench --quant "
                            "--help)\n", a);
            return 2;
        }
    }
    if (rows < 1 || cols < 256 || cols % 256) {
        fprintf(stderr, "bench --quant: --cols must be a positive multiple of 256, --rows >= 1\n");
        return 2;
    }
    static const int types[] = {GGML_TYPE_F32,    GGML_TYPE_F16,    GGML_TYPE_BF16,
                                GGML_TYPE_Q8_0,   GGML_TYPE_Q4_0,   GGML_TYPE_Q4_1,
                                GGML_TYPE_Q5_0,   GGML_TYPE_Q5_1,   GGML_TYPE_IQ4_NL,
                                GGML_TYPE_Q2_K,   GGML_TYPE_Q3_K,   GGML_TYPE_Q4_K,
                                GGML_TYPE_Q5_K,   GGML_TYPE_Q6_K,   GGML_TYPE_Q2_0,
                                GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_S,
                                GGML_TYPE_IQ3_XXS, GGML_TYPE_IQ3_S, GGML_TYPE_IQ4_XS};
    float *w = malloc((size_t)(rows * cols) * sizeof *w);
    float *x = malloc((size_t)cols * sizeof *x);
    float *y = malloc((size_t)rows * sizeof *y);
    void *q = malloc((size_t)(rows * cols) * 4);
    if (!w || !x || !y || !q) {
        fprintf(stderr, "bench --quant: out of memory\n");
        free(w), free(x), free(y), free(q);
        return 1;
    }
    bq_fill(w, rows * cols, 1);
    bq_fill(x, cols, 2);
    printf("bench --quant: %lld x %lld weights, best of >= %.2f s per figure\n",
           (long long)rows, (long long)cols, seconds);
    printf("%-8s %8s %14s %16s %16s\n", "type", "bpw", "quant MB/s(1t)", "matvec GB/s ref",
           "matvec GB/s fast");
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const type_traits *t = type_traits_get(types[i]);
        const double wbytes = (double)type_row_bytes(t->id, cols) * rows;
        bq_ctx c = {t->id, 0, rows, cols, x, w, q, y};
        char qs[32] = "-";
        if (t->quant) {
            /* the IQ searches are ~100x slower than the rest: fewer rows
             * keep them short */
            bq_ctx cq = c;
            cq.rows = !strncmp(t->name, "IQ", 2) ? (rows < 64 ? rows : 64) : rows;
            double dt = bq_time(bq_quant_1t, &cq, seconds);
            snprintf(qs, sizeof qs, "%.1f", cq.rows * cols * 4.0 / dt / 1e6);
        } else {
            /* decode-only type: fill with valid blocks via a same-size codec */
            memset(q, 0, (size_t)wbytes);
        }
        double t_ref = bq_time(bq_matvec, &c, seconds);
        c.fast = 1;
        double t_fast = bq_time(bq_matvec, &c, seconds);
        printf("%-8s %8.3f %14s %16.2f %16.2f\n", t->name, 8.0 * t->bytes / t->blck, qs,
               wbytes / t_ref / 1e9, wbytes / t_fast / 1e9);
        fflush(stdout);
    }
    free(w);
    free(x);
    free(y);
    free(q);
    return 0;
}
