/* cuda_wtest.h: helpers shared by the CUDA weight-kernel suites
 * (test_cuda_matvec.c, test_cuda_matmul.c, test_cuda_types.c): random
 * weights, a matrix on the card with activations and the CPU reference
 * (cw_case), the decode kernel in chunks, and the two checks that read the
 * same for every type list (the expert stack, the embedding).  Only with
 * STRATA_CUDA. */
#ifndef STRATA_CUDA_WTEST_H
#define STRATA_CUDA_WTEST_H
#ifdef STRATA_CUDA

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"
#include "model/quant.h"
#include "testutil.h"

static const int cw_types[] = {GGML_TYPE_IQ3_XXS, GGML_TYPE_Q2_0, GGML_TYPE_Q4_0,
                               GGML_TYPE_Q8_0,    GGML_TYPE_F16,  GGML_TYPE_F32};
#define CW_NTYPES ((int)(sizeof cw_types / sizeof cw_types[0]))

/* The stated tolerances, ||gpu - cpu|| / ||cpu|| against cpu_matmul:
 * int8 activations (one scale per 256/64/32 elements): 1e-2; fp16
 * activations on the tensor cores: 2e-3; f32: 1e-5. */
static double cw_tolerance(int type)
{
    return type == GGML_TYPE_F32 ? 1e-5 : type == GGML_TYPE_F16 ? 2e-3 : 1e-2;
}

/* Random (never zero) weights in ggml layout: random code bytes (every grid
 * index, sign pattern, sub-block scale and code, Q2_0's +2d included) with
 * finite random fp16 scales; F16/F32 Gaussian. */
static inline uint8_t *cw_random_weights(int type, int64_t rows, int64_t cols, uint64_t seed)
{
    const type_traits *t = type_traits_get(type);
    const size_t nb = type_row_bytes(type, cols) * (size_t)rows;
    uint8_t *w = malloc(nb);
    uint64_t st = seed * 0x9E3779B97F4A7C15ull + 1;
    if (type == GGML_TYPE_F32) {
        test_fill_normal((float *)w, (size_t)(rows * cols), 0.05f, seed);
        return w;
    }
    if (type == GGML_TYPE_F16) {
        for (int64_t i = 0; i < rows * cols; i++) {
            float v = test_rand_normal(&st) * 0.05f;
            uint16_t h = f32_to_fp16(v != 0.f ? v : 1e-3f);
            memcpy(w + 2 * i, &h, 2);
        }
        return w;
    }
    for (size_t i = 0; i < nb; i++)
        w[i] = (uint8_t)test_rand_u64(&st);
    for (size_t b = 0; b < nb / t->bytes; b++) {
        float v = test_rand_normal(&st) * 0.01f;
        uint16_t h = f32_to_fp16(v != 0.f ? v : 1e-3f);
        memcpy(w + b * t->bytes, &h, 2); /* d at offset 0 in all four block types */
    }
    return w;
}

/* The matvecs' segment-fold scratch on stream 0 (cuda_ops.h), attached as
 * the engine attaches one to each stage's stream; on = 0 detaches it (the
 * next k-split launch allocates one of its own: matvec_fold_repeats_and_chunks).
 * One allocation per test process. */
static inline void cw_fold_attach(int on)
{
    static void *scratch;
    strata_error err = {0};
    if (on && !scratch)
        ck_assert(cudaMalloc(&scratch, CUDA_MATVEC_SCRATCH_BYTES) == cudaSuccess);
    ck_assert_msg(cuda_matvec_attach_scratch(0, on ? scratch : NULL, CUDA_MATVEC_SCRATCH_BYTES, &err) == 0, "%s",
                  err.msg);
}

/* Pack and upload; returns the device pointer (NULL on failure, with msg). */
static void *cw_upload(int type, int64_t rows, int64_t cols, const uint8_t *w)
{
    void *d = NULL;
    strata_error err = {0};
    cw_fold_attach(1);
    const size_t bytes = cuda_weight_bytes(type, rows, cols);
    ck_assert_msg(bytes > 0, "%s %lld x %lld: no device layout", type_name(type), (long long)rows,
                  (long long)cols);
    ck_assert(cudaMalloc(&d, bytes) == cudaSuccess);
    ck_assert_msg(cuda_weight_upload(type, rows, cols, w, d, 0, &err) == 0, "%s", err.msg);
    return d;
}

static void *cw_dev_copy(const void *h, size_t bytes)
{
    void *d = NULL;
    cw_fold_attach(1);
    ck_assert(cudaMalloc(&d, bytes) == cudaSuccess);
    ck_assert(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
    return d;
}

/* Fill device floats with NaN so an unwritten output cannot pass. */
static void cw_poison(float *d, size_t n)
{
    ck_assert(cudaMemset(d, 0xff, n * sizeof(float)) == cudaSuccess);
}

static void cw_fetch(float *h, const float *d, size_t n)
{
    ck_assert(cudaDeviceSynchronize() == cudaSuccess);
    ck_assert(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
}

/* ||a - ref|| / ||ref||; every a finite (NaN never passes). */
static double cw_rel_err(const float *a, const float *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]))
            return INFINITY;
        const double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return sqrt(num / (den > 0 ? den : 1e-300));
}

/* n tokens x rows outputs of two runs, equal bit for bit. */
static inline void cw_assert_bitwise(int type, const char *what, const float *a, const float *b, int64_t n,
                                     int64_t rows)
{
    for (int64_t i = 0; i < n * rows; i++)
        ck_assert_msg(!memcmp(&a[i], &b[i], sizeof *a), "%s %s: token %lld row %lld: %.9g vs %.9g",
                      type_name(type), what, (long long)(i / rows), (long long)(i % rows), a[i], b[i]);
}

/* One weight matrix on the card, n tokens of N(0, 1) activations (seeded
 * xseed) on the host and the card, cpu_matmul's result for them where the
 * test wants it, and room for n x rows outputs on the card (dy) and twice on
 * the host (y, yv): what every weight test sets up first. */
typedef struct cw_case {
    int type;
    int64_t rows, cols, n;
    uint8_t *w;      /* host weights, ggml layout (the case frees them) */
    void *dw;        /* w uploaded (cw_upload) */
    float *x, *ref;  /* n x cols activations; n x rows reference, or NULL */
    float *dx, *dy;  /* x on the card; n x rows outputs on the card */
    float *y, *yv;   /* n x rows each on the host, for the test's results */
} cw_case;

static inline void cw_case_init(cw_case *c, int type, uint8_t *w, int64_t rows, int64_t cols, int64_t n,
                                uint64_t xseed, int with_ref)
{
    *c = (cw_case){.type = type, .rows = rows, .cols = cols, .n = n, .w = w};
    c->dw = cw_upload(type, rows, cols, w);
    c->x = malloc((size_t)(n * cols) * sizeof *c->x);
    c->y = malloc((size_t)(n * rows) * sizeof *c->y);
    c->yv = malloc((size_t)(n * rows) * sizeof *c->yv);
    ck_assert(c->x && c->y && c->yv);
    test_fill_normal(c->x, (size_t)(n * cols), 1.0f, xseed);
    if (with_ref) {
        c->ref = malloc((size_t)(n * rows) * sizeof *c->ref);
        ck_assert(c->ref);
        cpu_matmul(type, w, rows, cols, c->x, n, c->ref);
    }
    c->dx = cw_dev_copy(c->x, (size_t)(n * cols) * sizeof *c->x);
    ck_assert(cudaMalloc((void **)&c->dy, (size_t)(n * rows) * sizeof(float)) == cudaSuccess);
}

static inline void cw_case_free(cw_case *c)
{
    cudaFree(c->dw);
    cudaFree(c->dx);
    cudaFree(c->dy);
    free(c->w);
    free(c->x);
    free(c->ref);
    free(c->y);
    free(c->yv);
}

/* The prefill kernel on the first n tokens (its own scratch); y on the host. */
static inline void cw_run_matmul(const cw_case *c, int64_t n, float *y)
{
    strata_error err = {0};
    const size_t sb = cuda_matmul_scratch_bytes(c->type, c->cols, n);
    void *scratch = NULL;
    if (sb)
        ck_assert(cudaMalloc(&scratch, sb) == cudaSuccess);
    cw_poison(c->dy, (size_t)(n * c->rows));
    ck_assert_msg(cuda_matmul(c->type, c->dw, c->rows, c->cols, c->dx, n, c->dy, scratch, sb, 0, &err) == 0,
                  "%s", err.msg);
    cw_fetch(y, c->dy, (size_t)(n * c->rows));
    cudaFree(scratch);
}

/* The decode kernel on the first n tokens in launches of sizes[0],
 * sizes[1], ... (cycling; the last cut to what is left); y on the host. */
static inline void cw_decode_chunks(const cw_case *c, int64_t n, const int *sizes, int nsizes, float *y)
{
    strata_error err = {0};
    cw_poison(c->dy, (size_t)(n * c->rows));
    for (int64_t i = 0, j = 0; i < n; j++) {
        const int k = (int)(n - i < sizes[j % nsizes] ? n - i : sizes[j % nsizes]);
        ck_assert_msg(cuda_matvec(c->type, c->dw, c->rows, c->cols, c->dx + i * c->cols, k, c->dy + i * c->rows, 0,
                                  &err) == 0, "%s", err.msg);
        i += k;
    }
    cw_fetch(y, c->dy, (size_t)(n * c->rows));
}

/* An expert stack of E slabs of rows x cols (w: the E slabs one after the
 * other on the host), count[e] tokens for expert e, sorted by expert:
 * cuda_matmul_grouped against the reference (cpu_matmul on each slab)
 * within tol, and bitwise against cuda_matvec_expert one token at a time
 * (the expert id on the card); with pairs, cuda_matvec_experts on every
 * (token, expert) pair in one launch bitwise the same too.  label starts
 * the printed line. */
static inline void cw_check_grouped(const char *label, int type, const uint8_t *w, int64_t rows, int64_t cols,
                                    int E, const int *count, uint64_t xseed, double tol, int pairs)
{
    int32_t *off = calloc((size_t)E + 1, sizeof *off), *ids = malloc((size_t)E * sizeof *ids);
    ck_assert(off && ids);
    for (int e = 0; e < E; e++) {
        off[e + 1] = off[e] + count[e];
        ids[e] = e;
    }
    const int64_t n = off[E];
    const size_t slab = cuda_weight_bytes(type, rows, cols);
    const size_t hslab = type_row_bytes(type, cols) * (size_t)rows;
    uint8_t *dw = NULL;
    ck_assert(cudaMalloc((void **)&dw, slab * E) == cudaSuccess);
    strata_error err = {0};
    for (int e = 0; e < E; e++)
        ck_assert_msg(cuda_weight_upload(type, rows, cols, w + e * hslab, dw + e * slab, 0, &err) == 0, "%s",
                      err.msg);
    float *x = malloc(n * cols * sizeof *x), *y = malloc(n * rows * sizeof *y);
    float *yv = malloc(n * rows * sizeof *yv), *ref = malloc(n * rows * sizeof *ref);
    ck_assert(x && y && yv && ref);
    test_fill_normal(x, (size_t)(n * cols), 1.0f, xseed);
    for (int e = 0; e < E; e++)
        if (count[e])
            cpu_matmul(type, w + e * hslab, rows, cols, x + off[e] * cols, count[e], ref + off[e] * rows);
    float *dx = cw_dev_copy(x, n * cols * sizeof *x), *dy = NULL;
    int32_t *doff = cw_dev_copy(off, ((size_t)E + 1) * sizeof *off);
    int32_t *dids = cw_dev_copy(ids, (size_t)E * sizeof *ids);
    ck_assert(cudaMalloc((void **)&dy, n * rows * sizeof(float)) == cudaSuccess);
    const size_t sb = cuda_matmul_grouped_scratch_bytes(type, cols, n);
    void *scratch = NULL;
    ck_assert(cudaMalloc(&scratch, sb) == cudaSuccess);
    cw_poison(dy, (size_t)(n * rows));
    ck_assert_msg(cuda_matmul_grouped(type, dw, rows, cols, E, doff, dx, n, dy, scratch, sb, 0, &err) == 0, "%s",
                  err.msg);
    cw_fetch(y, dy, (size_t)(n * rows));
    const double rel = cw_rel_err(y, ref, (size_t)(n * rows));
    fprintf(stderr, "%s %-7s %d experts, %lld tokens: rel err %.3g\n", label, type_name(type), E, (long long)n,
            rel);
    ck_assert_msg(rel < tol, "%s grouped: rel err %g", type_name(type), rel);
    cw_poison(dy, (size_t)(n * rows));
    for (int e = 0; e < E; e++)
        for (int i = off[e]; i < off[e + 1]; i++)
            ck_assert(cuda_matvec_expert(type, dw, rows, cols, dids + e, dx + (size_t)i * cols, 1,
                                         dy + (size_t)i * rows, 0, &err) == 0);
    cw_fetch(yv, dy, (size_t)(n * rows));
    cw_assert_bitwise(type, "grouped vs expert matvec", y, yv, n, rows);
    if (pairs) { /* decode batches of MoE models: every pair in one launch */
        int32_t *sel = malloc((n ? n : 1) * sizeof *sel);
        ck_assert(sel);
        for (int e = 0; e < E; e++)
            for (int i = off[e]; i < off[e + 1]; i++)
                sel[i] = e;
        int32_t *dsel = cw_dev_copy(sel, n * sizeof *sel);
        cw_poison(dy, (size_t)(n * rows));
        ck_assert_msg(cuda_matvec_experts(type, dw, rows, cols, dsel, (int)n, 1, dx, dy, 0, &err) == 0, "%s",
                      err.msg);
        cw_fetch(y, dy, (size_t)(n * rows));
        cw_assert_bitwise(type, "pairs vs expert matvec", y, yv, n, rows);
        cudaFree(dsel);
        free(sel);
    }
    cudaFree(dids);
    cudaFree(scratch);
    cudaFree(doff);
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dy);
    free(off);
    free(ids);
    free(x);
    free(y);
    free(yv);
    free(ref);
}

/* cuda_embed on a 37-row table gives exactly cpu_embed's rows for ids in
 * range (first, last, middle) and NaN for one past the end and -1. */
static inline void cw_check_embed(int type, const uint8_t *w, int64_t cols)
{
    const int64_t rows = 37;
    const int32_t ids[] = {0, 36, 17, 8, 15, 16, 37, -1};
    const int nt = (int)(sizeof ids / sizeof ids[0]);
    void *dw = cw_upload(type, rows, cols, w);
    int32_t *did = cw_dev_copy(ids, sizeof ids);
    float *dout = NULL, *out = malloc(nt * cols * sizeof *out), *ref = malloc(cols * sizeof *ref);
    ck_assert(out && ref);
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
        cw_assert_bitwise(type, "embed", out + i * cols, ref, 1, cols);
    }
    cudaFree(dw);
    cudaFree(did);
    cudaFree(dout);
    free(out);
    free(ref);
}

#endif
#endif
