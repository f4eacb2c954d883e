/* elementwise.cu: SwiGLU, residual add, bias add on the card.
 *
 * Twins of cpu_swiglu and cpu_add (kernels/ops.h).  All three are pure
 * streams: every element is read once and written once, so they are bound by
 * memory and the only thing that matters is that each warp moves whole
 * 16-byte vectors (float4) with coalesced addresses.  A float4 path runs
 * when n is a multiple of 4 and every pointer is 16-byte aligned (cudaMalloc
 * gives 256); otherwise a scalar path, same arithmetic.
 *
 * Invariance: each output element depends on its own inputs only, so results
 * do not depend on how many rows share a launch.
 *
 * Arithmetic is spelled with __fmul_rn / __fadd_rn / __fdiv_rn so that nvcc
 * cannot contract it into FMAs: the CPU reference is built with ISO C11
 * (no contraction), and the add kernels are then bit-exact with it. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/act.cuh" /* swiglu1 */
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/pdl.cuh"

extern "C" int strata_pdl_off = 0; /* pdl.cuh */

/* Blocks of 256 threads; a grid-stride loop over at most this many blocks
 * keeps the launch small for huge n while filling 132 SMs many times. */
#define EW_THREADS 256
#define EW_MAX_BLOCKS 4096

static int ew_blocks(int64_t n)
{
    int64_t b = (n + EW_THREADS - 1) / EW_THREADS;
    if (b < 1)
        b = 1;
    return b > EW_MAX_BLOCKS ? EW_MAX_BLOCKS : (int)b;
}

static int aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

/* ---- SwiGLU ------------------------------------------------------------ */

__global__ void swiglu_f4_kernel(const float4 *gate, const float4 *up, float4 *y, int64_t n4)
{
    pdl_wait();    /* launched programmatically (pdl.cuh): wait first */
    pdl_trigger(); /* then let the next kernel launch */
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4;
         i += (int64_t)gridDim.x * blockDim.x) {
        float4 g = gate[i], u = up[i], r;
        r.x = swiglu1(g.x, u.x);
        r.y = swiglu1(g.y, u.y);
        r.z = swiglu1(g.z, u.z);
        r.w = swiglu1(g.w, u.w);
        y[i] = r;
    }
}

__global__ void swiglu_kernel(const float *gate, const float *up, float *y, int64_t n)
{
    pdl_wait();    /* launched programmatically (pdl.cuh): wait first */
    pdl_trigger(); /* then let the next kernel launch */
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = swiglu1(gate[i], up[i]);
}

extern "C" int cuda_swiglu(const float *gate, const float *up, float *y, int64_t n,
                           cudaStream_t stream, strata_error *err)
{
    if (n <= 0)
        return 0;
    if (n % 4 == 0 && aligned16(gate) && aligned16(up) && aligned16(y)) {
        CUDA_CHECK(err, pdl_launch(swiglu_f4_kernel, dim3(ew_blocks(n / 4)), dim3(EW_THREADS), 0,
                                   stream, (const float4 *)gate, (const float4 *)up, (float4 *)y,
                                   n / 4));
    } else {
        CUDA_CHECK(err, pdl_launch(swiglu_kernel, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, stream,
                                   gate, up, y, n));
    }
    return 0;
}

/* Rows of [gate F | up F] (a fused gate|up matvec's output) -> rows of F. */
__global__ void swiglu_fused_kernel(const float *gu, int64_t F, int64_t total, float *y)
{
    pdl_wait();    /* launched programmatically (pdl.cuh): wait first */
    pdl_trigger(); /* then let the next kernel launch */
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / F, c = i - r * F;
        const float *row = gu + r * 2 * F;
        y[i] = swiglu1(row[c], row[F + c]);
    }
}

extern "C" int cuda_swiglu_fused(const float *gu, int n_rows, int64_t F, float *y,
                                 cudaStream_t stream, strata_error *err)
{
    if (n_rows <= 0 || F <= 0)
        return 0;
    if (n_rows == 1) /* one row: gate and up are two contiguous vectors */
        return cuda_swiglu(gu, gu + F, y, F, stream, err);
    const int64_t total = (int64_t)n_rows * F;
    CUDA_CHECK(err, pdl_launch(swiglu_fused_kernel, dim3(ew_blocks(total)), dim3(EW_THREADS), 0,
                               stream, gu, F, total, y));
    return 0;
}

/* ---- residual add: y += x ------------------------------------------------ */

__global__ void add_f4_kernel(float4 *y, const float4 *x, int64_t n4)
{
    pdl_wait();    /* launched programmatically (pdl.cuh): wait first */
    pdl_trigger(); /* then let the next kernel launch */
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4;
         i += (int64_t)gridDim.x * blockDim.x) {
        float4 a = y[i], b = x[i];
        a.x = __fadd_rn(a.x, b.x);
        a.y = __fadd_rn(a.y, b.y);
        a.z = __fadd_rn(a.z, b.z);
        a.w = __fadd_rn(a.w, b.w);
        y[i] = a;
    }
}

__global__ void add_kernel(float *y, const float *x, int64_t n)
{
    pdl_wait();    /* launched programmatically (pdl.cuh): wait first */
    pdl_trigger(); /* then let the next kernel launch */
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __fadd_rn(y[i], x[i]);
}

extern "C" int cuda_add(float *y, const float *x, int64_t n, cudaStream_t stream,
                        strata_error *err)
{
    if (n <= 0)
        return 0;
    if (n % 4 == 0 && aligned16(y) && aligned16(x))
        CUDA_CHECK(err, pdl_launch(add_f4_kernel, dim3(ew_blocks(n / 4)), dim3(EW_THREADS), 0,
                                   stream, (float4 *)y, (const float4 *)x, n / 4));
    else
        CUDA_CHECK(err, pdl_launch(add_kernel, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, stream, y,
                                   x, n));
    return 0;
}

/* ---- bias add: y[r][i] += b[i] ------------------------------------------- */

/* Rows of n elements, `stride` elements apart (a bias on the Q part of a
 * fused QKV row, say); one grid-stride index over rows x n. */
__global__ void bias_add_kernel(float *y, const float *b, int n_rows, int64_t n, int64_t stride)
{
    pdl_wait();    /* launched programmatically (pdl.cuh): wait first */
    pdl_trigger(); /* then let the next kernel launch */
    int64_t total = (int64_t)n_rows * n;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / n, c = i - r * n;
        float *p = y + r * stride + c;
        *p = __fadd_rn(*p, b[c]);
    }
}

extern "C" int cuda_bias_add(float *y, const float *b, int n_rows, int64_t n, int64_t stride,
                             cudaStream_t stream, strata_error *err)
{
    if (n_rows <= 0 || n <= 0)
        return 0;
    if (stride < n)
        return strata_err(err, STRATA_E_ARG, "cuda_bias_add: stride %lld < n %lld",
                          (long long)stride, (long long)n);
    CUDA_CHECK(err, pdl_launch(bias_add_kernel, dim3(ew_blocks((int64_t)n_rows * n)),
                               dim3(EW_THREADS), 0, stream, y, b, n_rows, n, stride));
    return 0;
}

/* ---- a test aid: hold a stream back ------------------------------------------ */

/* One thread spins for `cycles` SM clock cycles.  Tests put it on a stream
 * to make it lag behind the host and the other streams, so an ordering bug
 * between streams shows every time instead of once in a while
 * (test_cuda_engine.c, cuda_test_cross_lag).  Nothing computed: no twin. */
__global__ void spin_kernel(long long cycles)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

extern "C" int cuda_spin(long long cycles, cudaStream_t stream, strata_error *err)
{
    spin_kernel<<<1, 1, 0, stream>>>(cycles);
    CUDA_CHECK_LAUNCH(err, "spin_kernel");
    return 0;
}
