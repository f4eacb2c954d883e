/* cuda_wtest.h: helpers shared by the CUDA weight-kernel suites
 * (test_cuda_matvec.c, test_cuda_matmul.c).  Only with STRATA_CUDA. */
#ifndef STRATA_CUDA_WTEST_H
#define STRATA_CUDA_WTEST_H
#ifdef STRATA_CUDA

#include <math.h>
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

/* Pack and upload; returns the device pointer (NULL on failure, with msg). */
static void *cw_upload(int type, int64_t rows, int64_t cols, const uint8_t *w)
{
    void *d = NULL;
    strata_error err = {0};
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

#endif
#endif
