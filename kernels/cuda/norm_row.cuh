/* norm_row.cuh: the pieces of a row's RMSNorm with the residual add in
 * front (cuda_add_rmsnorm's float4 path, norm.cu), shared with the MoE
 * router that takes the add and ffn_norm into its own launch
 * (cuda_moe_add_norm_router_route, moe.cu): one definition of each
 * expression, so both compute every value with the same operations (C++
 * only).
 *
 * The reduction's shape is the norm kernel's block: NORM_THREADS threads,
 * thread i owning float4 i, i + NORM_THREADS, ...; its squares added in
 * double in that order; warp_sum_d over each 32 threads; the NORM_THREADS /
 * 32 warp partials added from 0 in index order.  Another block shape that
 * reproduces exactly those partials (the router: each of its warps playing
 * several of the norm's warps in turn) gets the same scale, so the same
 * bits. */
#ifndef STRATA_NORM_ROW_CUH
#define STRATA_NORM_ROW_CUH

#include <cuda_runtime.h>

#define NORM_THREADS 512

/* v + a, element by element, rounded as the separate add kernel rounds */
__device__ __forceinline__ float4 norm_add4(float4 v, float4 a)
{
    v.x = __fadd_rn(v.x, a.x);
    v.y = __fadd_rn(v.y, a.y);
    v.z = __fadd_rn(v.z, a.z);
    v.w = __fadd_rn(v.w, a.w);
    return v;
}

/* ss + v's four squares, in double, x y z w */
__device__ __forceinline__ double norm_ss4(float4 v, double ss)
{
    ss += (double)v.x * v.x;
    ss += (double)v.y * v.y;
    ss += (double)v.z * v.z;
    ss += (double)v.w * v.w;
    return ss;
}

/* The CPU's expression, in double, then rounded once to float. */
__device__ __forceinline__ float norm_scale(double ss, int64_t n, float eps)
{
    return (float)(1.0 / sqrt(ss / (double)n + (double)eps));
}

/* (v * scale) * g, not contracted */
__device__ __forceinline__ float4 norm_scale4(float4 v, float4 g, float scale)
{
    v.x = __fmul_rn(__fmul_rn(v.x, scale), g.x);
    v.y = __fmul_rn(__fmul_rn(v.y, scale), g.y);
    v.z = __fmul_rn(__fmul_rn(v.z, scale), g.z);
    v.w = __fmul_rn(__fmul_rn(v.w, scale), g.w);
    return v;
}

#endif
