/* norm.cu: RMSNorm over a batch of rows, and per-head RMSNorm (qwen3 Q/K).
 *
 * Twins of cpu_rmsnorm and cpu_rmsnorm_heads (kernels/ops.h):
 *   y = x * (1 / sqrt(mean(x^2) + eps)) * w
 * The sum of squares is accumulated in double, as the CPU does, so the scale
 * is the same float in all but the rarest cases; the products are spelled
 * with __fmul_rn in the CPU's order ((x * scale) * w) so they are not
 * contracted.  Measured tolerance in test/test_cuda_ops.c.
 *
 * Layout and speed.  rmsnorm: one block of 512 threads per row; thread i
 * owns elements i, i+512, ... (float4 when n % 4 == 0 and the pointers are
 * 16-byte aligned), so a warp reads 512 contiguous bytes per step and a
 * 4096-wide row is two loads per thread.  A row is a few KiB: the kernel is
 * bound by launch and latency, not bandwidth, so what counts is how few
 * dependent round trips a thread makes (256 threads took 5-6 us per launch
 * on the H200 under ncu).  cuda_add_rmsnorm folds the residual add into the
 * first pass (engine/cuda/backend_cuda.c fuses every add that a norm follows).
 * rmsnorm_heads: one warp per head vector (64..256 floats), lanes strided,
 * shuffles for the sum.
 *
 * Invariance: the block size is fixed (never derived from the number of
 * rows), so each row's reduction tree (thread partials -> warp shuffle ->
 * fixed-order sum of warp partials) is the same in every launch. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/warp.cuh"

#define NORM_THREADS 512

/* Sum over the block in a fixed order: warp trees, then warp 0 adds the
 * sixteen warp partials in index order.  Every thread gets the result. */
__device__ double block_sum_d(double v)
{
    __shared__ double part[NORM_THREADS / 32];
    __shared__ double total;
    v = warp_sum_d(v);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        double s = 0.0;
        for (int i = 0; i < NORM_THREADS / 32; i++)
            s += part[i];
        total = s;
    }
    __syncthreads();
    return total;
}

/* x, y: n_rows x n (row stride n); y may alias x.  With d (the residual
 * add fused in front): x += d first, written back, and the norm is taken of
 * the sum; y may then alias d, since every element of x, d and y is read
 * and written by one thread only, in the same order as the two separate
 * kernels (so the result is bit-identical to cuda_add + cuda_rmsnorm). */
__global__ void __launch_bounds__(NORM_THREADS)
rmsnorm_kernel(float *x, const float *d, const float *w, float *y, int64_t n, float eps, int vec)
{
    pdl_wait();    /* launched programmatically (pdl.cuh): wait first */
    pdl_trigger(); /* then let the next kernel launch */
    float *xr = x + (int64_t)blockIdx.x * n;
    const float *dr = d ? d + (int64_t)blockIdx.x * n : NULL;
    float *yr = y + (int64_t)blockIdx.x * n;
    double ss = 0.0;
    if (vec) {
        float4 *x4 = (float4 *)xr;
        const float4 *d4 = (const float4 *)dr;
        for (int64_t i = threadIdx.x; i < n / 4; i += NORM_THREADS) {
            float4 v = x4[i];
            if (d4) {
                const float4 a = d4[i];
                v.x = __fadd_rn(v.x, a.x);
                v.y = __fadd_rn(v.y, a.y);
                v.z = __fadd_rn(v.z, a.z);
                v.w = __fadd_rn(v.w, a.w);
                x4[i] = v;
            }
            ss += (double)v.x * v.x;
            ss += (double)v.y * v.y;
            ss += (double)v.z * v.z;
            ss += (double)v.w * v.w;
        }
    } else {
        for (int64_t i = threadIdx.x; i < n; i += NORM_THREADS) {
            float v = xr[i];
            if (dr) {
                v = __fadd_rn(v, dr[i]);
                xr[i] = v;
            }
            ss += (double)v * v;
        }
    }
    ss = block_sum_d(ss);
    /* The CPU's expression, in double, then rounded once to float. */
    float scale = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    if (vec) {
        const float4 *x4 = (const float4 *)xr;
        const float4 *w4 = (const float4 *)w;
        float4 *y4 = (float4 *)yr;
        for (int64_t i = threadIdx.x; i < n / 4; i += NORM_THREADS) {
            float4 v = x4[i], g = w4[i];
            v.x = __fmul_rn(__fmul_rn(v.x, scale), g.x);
            v.y = __fmul_rn(__fmul_rn(v.y, scale), g.y);
            v.z = __fmul_rn(__fmul_rn(v.z, scale), g.z);
            v.w = __fmul_rn(__fmul_rn(v.w, scale), g.w);
            y4[i] = v;
        }
    } else {
        for (int64_t i = threadIdx.x; i < n; i += NORM_THREADS)
            yr[i] = __fmul_rn(__fmul_rn(xr[i], scale), w[i]);
    }
}

static int norm_launch(float *x, const float *d, const float *w, float *y, int n_rows, int64_t n,
                       float eps, cudaStream_t stream, strata_error *err)
{
    if (n_rows <= 0 || n <= 0)
        return 0;
    /* float4 only when every row starts 16-byte aligned */
    int vec = n % 4 == 0 &&
              !(((uintptr_t)x | (uintptr_t)d | (uintptr_t)w | (uintptr_t)y) & 15u);
    CUDA_CHECK(err, pdl_launch(rmsnorm_kernel, dim3(n_rows), dim3(NORM_THREADS), 0, stream, x, d, w, y,
                               n, eps, vec));
    return 0;
}

extern "C" int cuda_rmsnorm(const float *x, const float *w, float *y, int n_rows, int64_t n,
                            float eps, cudaStream_t stream, strata_error *err)
{
    /* without d the kernel never writes x */
    return norm_launch((float *)x, NULL, w, y, n_rows, n, eps, stream, err);
}

extern "C" int cuda_add_rmsnorm(float *x, const float *d, const float *w, float *y, int n_rows,
                                int64_t n, float eps, cudaStream_t stream, strata_error *err)
{
    return norm_launch(x, d, w, y, n_rows, n, eps, stream, err);
}

/* ---- per-head ------------------------------------------------------------ */

#define HEADS_WARPS 4

/* x: n_rows rows `stride` floats apart, each holding n_heads vectors of
 * head_dim at its start; normalised in place with the shared w[head_dim]. */
__global__ void __launch_bounds__(HEADS_WARPS * 32)
rmsnorm_heads_kernel(float *x, const float *w, int n_rows, int n_heads, int head_dim,
                     int64_t stride, float eps)
{
    pdl_wait();    /* launched programmatically (pdl.cuh): wait first */
    pdl_trigger(); /* then let the next kernel launch */
    int64_t v = (int64_t)blockIdx.x * HEADS_WARPS + (threadIdx.x >> 5);
    if (v >= (int64_t)n_rows * n_heads)
        return;
    int lane = threadIdx.x & 31;
    int64_t row = v / n_heads, h = v - row * n_heads;
    float *p = x + row * stride + h * head_dim;
    double ss = 0.0;
    for (int i = lane; i < head_dim; i += 32)
        ss += (double)p[i] * p[i];
    ss = warp_sum_d(ss);
    float scale = (float)(1.0 / sqrt(ss / (double)head_dim + (double)eps));
    for (int i = lane; i < head_dim; i += 32)
        p[i] = __fmul_rn(__fmul_rn(p[i], scale), w[i]);
}

extern "C" int cuda_rmsnorm_heads(float *x, const float *w, int n_rows, int n_heads,
                                  int head_dim, int64_t stride, float eps, cudaStream_t stream,
                                  strata_error *err)
{
    if (n_rows <= 0 || n_heads <= 0 || head_dim <= 0)
        return 0;
    if (stride < (int64_t)n_heads * head_dim)
        return strata_err(err, STRATA_E_ARG, "cuda_rmsnorm_heads: stride %lld < %d heads x %d",
                          (long long)stride, n_heads, head_dim);
    int64_t vecs = (int64_t)n_rows * n_heads;
    int blocks = (int)((vecs + HEADS_WARPS - 1) / HEADS_WARPS);
    CUDA_CHECK(err, pdl_launch(rmsnorm_heads_kernel, dim3(blocks), dim3(HEADS_WARPS * 32), 0, stream,
                               x, w, n_rows, n_heads, head_dim, stride, eps));
    return 0;
}
