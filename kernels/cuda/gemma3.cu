/* gemma3.cu: the element-wise steps gemma3 adds to a forward pass
 * (doc/engine.md, "gemma3"): GELU-tanh gating, a scale (the embedding's
 * sqrt(n_embd)) and the final logit soft-cap.
 *
 * Twins: cpu_geglu, the embedding scale loop of engine/forward_cpu.c
 * (cuda_scale is bit-exact with x * s in float), cpu_softcap
 * (kernels/ops.h).  Pure streams like elementwise.cu: each element is read
 * and written once by one thread, so a row's result does not depend on how
 * many rows share a launch.  tanhf on the card differs from glibc's by a
 * few ulp (CUDA math guide), so GELU-tanh and the soft-cap are close to the
 * CPU's, not bit-exact (tolerances in test/test_cuda_gemma3.c). */
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/pdl.cuh"

#define G3_THREADS 256
#define G3_MAX_BLOCKS 4096

static int g3_blocks(int64_t n)
{
    int64_t b = (n + G3_THREADS - 1) / G3_THREADS;
    if (b < 1)
        b = 1;
    return b > G3_MAX_BLOCKS ? G3_MAX_BLOCKS : (int)b;
}

/* gelu(g) * u as cpu_geglu writes it, with rounded operations so that nvcc
 * does not contract them into FMAs the CPU build does not make:
 * 0.5 g (1 + tanh(k (g + 0.044715 g^3))) u. */
__device__ __forceinline__ float geglu1(float g, float u)
{
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    float g3 = __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, g), g), g);
    float t = tanhf(__fmul_rn(k, __fadd_rn(g, g3)));
    return __fmul_rn(__fmul_rn(__fmul_rn(0.5f, g), __fadd_rn(1.0f, t)), u);
}

__global__ void geglu_kernel(const float *gate, const float *up, float *y, int64_t n)
{
    pdl_wait();    /* launched programmatically (pdl.cuh): wait first */
    pdl_trigger(); /* then let the next kernel launch */
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = geglu1(gate[i], up[i]);
}

extern "C" int cuda_geglu(const float *gate, const float *up, float *y, int64_t n,
                          cudaStream_t stream, strata_error *err)
{
    if (n <= 0)
        return 0;
    CUDA_CHECK(err, pdl_launch(geglu_kernel, dim3(g3_blocks(n)), dim3(G3_THREADS), 0, stream,
                               gate, up, y, n));
    return 0;
}

/* Rows of [gate F | up F] (a stacked gate|up product) -> rows of F. */
__global__ void geglu_fused_kernel(const float *gu, int64_t F, int64_t total, float *y)
{
    pdl_wait();
    pdl_trigger();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / F, c = i - r * F;
        const float *row = gu + r * 2 * F;
        y[i] = geglu1(row[c], row[F + c]);
    }
}

extern "C" int cuda_geglu_fused(const float *gu, int n_rows, int64_t F, float *y,
                                cudaStream_t stream, strata_error *err)
{
    if (n_rows <= 0 || F <= 0)
        return 0;
    const int64_t total = (int64_t)n_rows * F;
    CUDA_CHECK(err, pdl_launch(geglu_fused_kernel, dim3(g3_blocks(total)), dim3(G3_THREADS), 0,
                               stream, gu, F, total, y));
    return 0;
}

__global__ void scale_kernel(float *x, int64_t n, float s)
{
    pdl_wait();
    pdl_trigger();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = __fmul_rn(x[i], s);
}

extern "C" int cuda_scale(float *x, int64_t n, float s, cudaStream_t stream, strata_error *err)
{
    if (n <= 0)
        return 0;
    CUDA_CHECK(err, pdl_launch(scale_kernel, dim3(g3_blocks(n)), dim3(G3_THREADS), 0, stream, x,
                               n, s));
    return 0;
}

/* cap * tanh(x / cap), rows `stride` floats apart (the logits of a chunk). */
__global__ void softcap_kernel(float *x, int n_rows, int64_t n, int64_t stride, float cap)
{
    pdl_wait();
    pdl_trigger();
    const int64_t total = (int64_t)n_rows * n;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        float *p = x + (i / n) * stride + i % n;
        *p = __fmul_rn(cap, tanhf(__fdiv_rn(*p, cap)));
    }
}

extern "C" int cuda_softcap(float *x, int n_rows, int64_t n, int64_t stride, float cap,
                            cudaStream_t stream, strata_error *err)
{
    if (n_rows <= 0 || n <= 0)
        return 0;
    if (!(cap > 0.0f))
        return strata_err(err, STRATA_E_ARG, "cuda_softcap: cap %g (must be > 0)", cap);
    CUDA_CHECK(err, pdl_launch(softcap_kernel, dim3(g3_blocks((int64_t)n_rows * n)),
                               dim3(G3_THREADS), 0, stream, x, n_rows, n, stride, cap));
    return 0;
}
