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
#include "kernels/cuda/norm_head.cuh"
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

/* Where the residual add's d comes from.  RowDelta: row t of a buffer
 * (cuda_add_rmsnorm; none when d is NULL: cuda_rmsnorm).  CombineDelta: the
 * MoE combine of token t's k expert outputs, sum_j w[t][j] * y[src(t, j)]
 * from 0 in slot order, each element computed with cuda_moe_combine's
 * operations (cuda_moe_combine_add_rmsnorm). */
struct RowDelta {
    const float *d;
    int64_t n;
    __device__ bool on() const { return d != NULL; }
    __device__ float at(int t, int64_t i) const { return d[(int64_t)t * n + i]; }
    __device__ float4 at4(int t, int64_t i) const { return ((const float4 *)(d + (int64_t)t * n))[i]; }
};

struct CombineDelta {
    const float *y;     /* expert outputs, rows of D */
    const float *w;     /* [n_tok][k] weights */
    const int32_t *inv; /* NULL: pair (t, j) is row t*k + j; else row inv[t*k + j] */
    int k;
    int64_t D;
    int y4; /* every y row 16-byte aligned: float4 loads */
    __device__ bool on() const { return true; }
    __device__ const float *src(int t, int j) const
    {
        const int64_t r = inv ? inv[t * k + j] : (int64_t)t * k + j;
        return y + r * D;
    }
    __device__ float at(int t, int64_t i) const
    {
        float acc = 0.0f;
        for (int j = 0; j < k; j++)
            acc = __fadd_rn(acc, __fmul_rn(w[t * k + j], src(t, j)[i]));
        return acc;
    }
    /* the k products' loads all in flight (a batch of 8 at a time), then
     * the sum in slot order: the loop that loaded one slot after the other
     * paid a round trip per slot */
    __device__ float4 at4(int t, int64_t i) const
    {
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int j0 = 0; j0 < k; j0 += 8) {
            float wj[8];
            float4 v[8];
#pragma unroll
            for (int u = 0; u < 8; u++)
                if (j0 + u < k) {
                    const float *r = src(t, j0 + u);
                    wj[u] = w[t * k + j0 + u];
                    v[u] = y4 ? ((const float4 *)r)[i]
                              : make_float4(r[4 * i], r[4 * i + 1], r[4 * i + 2], r[4 * i + 3]);
                }
#pragma unroll
            for (int u = 0; u < 8; u++)
                if (j0 + u < k) {
                    acc.x = __fadd_rn(acc.x, __fmul_rn(wj[u], v[u].x));
                    acc.y = __fadd_rn(acc.y, __fmul_rn(wj[u], v[u].y));
                    acc.z = __fadd_rn(acc.z, __fmul_rn(wj[u], v[u].z));
                    acc.w = __fadd_rn(acc.w, __fmul_rn(wj[u], v[u].w));
                }
        }
        return acc;
    }
};

/* Thread's float4 x4[i] after the residual add (written back when there is
 * one), its squares added to ss in the first version's order. */
template <class Delta>
__device__ __forceinline__ float4 norm_first4(float4 *x4, const Delta &dl, int t, int64_t i, double &ss)
{
    float4 v = x4[i];
    if (dl.on()) {
        const float4 a = dl.at4(t, i);
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
    return v;
}

__device__ __forceinline__ float4 norm_scale4(float4 v, float4 g, float scale)
{
    v.x = __fmul_rn(__fmul_rn(v.x, scale), g.x);
    v.y = __fmul_rn(__fmul_rn(v.y, scale), g.y);
    v.z = __fmul_rn(__fmul_rn(v.z, scale), g.z);
    v.w = __fmul_rn(__fmul_rn(v.w, scale), g.w);
    return v;
}

/* Rows of up to NORM_KEEP float4 per thread (4096 floats) keep x and the
 * norm weight in registers between the passes: the weight's load goes out
 * with x's (not after the block's sum), and x is not read back. */
#define NORM_KEEP 2

/* x, y: n_rows x n (row stride n); y may alias x.  With a delta (the
 * residual add fused in front): x += d first, written back, and the norm is
 * taken of the sum; y may then alias d, since every element of x, d and y
 * is read and written by one thread only, in the same order as the two
 * separate kernels (so the result is bit-identical to cuda_add +
 * cuda_rmsnorm).  w NULL: the add only (no norm follows). */
template <class Delta>
__global__ void __launch_bounds__(NORM_THREADS)
rmsnorm_kernel(float *x, Delta dl, const float *w, float *y, int64_t n, float eps, int vec)
{
    pdl_wait();    /* launched programmatically (pdl.cuh): wait first */
    pdl_trigger(); /* then let the next kernel launch */
    const int t = blockIdx.x;
    float *xr = x + (int64_t)t * n;
    float *yr = y + (int64_t)t * n;
    double ss = 0.0;
    if (vec && n / 4 <= NORM_THREADS * NORM_KEEP) {
        float4 *x4 = (float4 *)xr;
        const float4 *w4 = (const float4 *)w;
        float4 kv[NORM_KEEP], kg[NORM_KEEP];
#pragma unroll
        for (int u = 0; u < NORM_KEEP; u++) {
            const int64_t i = threadIdx.x + (int64_t)u * NORM_THREADS;
            if (i < n / 4) {
                if (w)
                    kg[u] = w4[i];
                kv[u] = norm_first4(x4, dl, t, i, ss);
            }
        }
        if (!w)
            return; /* the same for the whole block: no barrier is left waiting */
        ss = block_sum_d(ss);
        /* The CPU's expression, in double, then rounded once to float. */
        const float scale = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
#pragma unroll
        for (int u = 0; u < NORM_KEEP; u++) {
            const int64_t i = threadIdx.x + (int64_t)u * NORM_THREADS;
            if (i < n / 4)
                ((float4 *)yr)[i] = norm_scale4(kv[u], kg[u], scale);
        }
        return;
    }
    if (vec) {
        float4 *x4 = (float4 *)xr;
        for (int64_t i = threadIdx.x; i < n / 4; i += NORM_THREADS)
            norm_first4(x4, dl, t, i, ss);
    } else {
        for (int64_t i = threadIdx.x; i < n; i += NORM_THREADS) {
            float v = xr[i];
            if (dl.on()) {
                v = __fadd_rn(v, dl.at(t, i));
                xr[i] = v;
            }
            ss += (double)v * v;
        }
    }
    if (!w)
        return; /* the same for the whole block: no barrier is left waiting */
    ss = block_sum_d(ss);
    /* The CPU's expression, in double, then rounded once to float. */
    float scale = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    if (vec) {
        const float4 *x4 = (const float4 *)xr;
        const float4 *w4 = (const float4 *)w;
        float4 *y4 = (float4 *)yr;
        for (int64_t i = threadIdx.x; i < n / 4; i += NORM_THREADS)
            y4[i] = norm_scale4(x4[i], w4[i], scale);
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
    const RowDelta dl = {d, n};
    CUDA_CHECK(err, pdl_launch(rmsnorm_kernel<RowDelta>, dim3(n_rows), dim3(NORM_THREADS), 0, stream, x,
                               dl, w, y, n, eps, vec));
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

extern "C" int cuda_moe_combine_add_rmsnorm(const float *y, const float *d_w, const int32_t *d_inv,
                                            int n_tok, int k, int64_t D, float *x, const float *nw,
                                            float *xb, float eps, cudaStream_t stream,
                                            strata_error *err)
{
    if (n_tok <= 0 || D <= 0)
        return 0;
    if (k < 1 || (nw && !xb))
        return strata_err(err, STRATA_E_ARG, "cuda_moe_combine_add_rmsnorm: k %d, norm %s, out %s", k,
                          nw ? "set" : "none", xb ? "set" : "none");
    /* float4 exactly when cuda_rmsnorm(x, nw, xb) would take it (the same
     * partition of the sum of squares, so the same scale) */
    const int vec = D % 4 == 0 && !(((uintptr_t)x | (uintptr_t)nw | (uintptr_t)xb) & 15u);
    const CombineDelta dl = {y, d_w, d_inv, k, D, !((uintptr_t)y & 15u)};
    CUDA_CHECK(err, pdl_launch(rmsnorm_kernel<CombineDelta>, dim3(n_tok), dim3(NORM_THREADS), 0, stream,
                               x, dl, nw, nw ? xb : x, D, eps, vec));
    return 0;
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
    head_rmsnorm_warp(x + row * stride + h * head_dim, w, head_dim, eps, lane);
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
    if (head_dim > HEAD_MAX_DIM) /* a lane holds its elements in registers */
        return strata_err(err, STRATA_E_UNSUPPORTED, "cuda_rmsnorm_heads: head_dim %d > %d", head_dim,
                          HEAD_MAX_DIM);
    int64_t vecs = (int64_t)n_rows * n_heads;
    int blocks = (int)((vecs + HEADS_WARPS - 1) / HEADS_WARPS);
    CUDA_CHECK(err, pdl_launch(rmsnorm_heads_kernel, dim3(blocks), dim3(HEADS_WARPS * 32), 0, stream,
                               x, w, n_rows, n_heads, head_dim, stride, eps));
    return 0;
}
