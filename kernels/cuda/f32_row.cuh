/* f32_row.cuh: one warp's dot product of an F32 weight row with an
 * activation row, in the F32 weight kernel's order (matvec.cu, f32_kernel),
 * shared with the fused MoE router (moe.cu, cuda_moe_router_route) so both
 * give a router logit the same bits (C++ only). */
#ifndef STRATA_F32_ROW_CUH
#define STRATA_F32_ROW_CUH

#include <cuda_runtime.h>

#include "kernels/cuda/act.cuh"
#include "kernels/cuda/warp.cuh"

/* Lane l sums columns 4l + 128i (i ascending) with FMA, then warp_sum's
 * fixed butterfly; every lane gets the sum.  wr and xr (and xu) 16-byte
 * aligned, cols a multiple of 4.  xu set: the activation is
 * swiglu1(xr, xu), as cuda_swiglu would have stored it. */
__device__ __forceinline__ float f32_row_dot(const float *wr, const float *xr, const float *xu, int cols,
                                             int lane)
{
    float s = 0.f;
    for (int k = lane * 4; k < cols; k += 128) {
        const float4 wv = __ldg((const float4 *)(wr + k));
        float4 xv = __ldg((const float4 *)(xr + k));
        if (xu) {
            const float4 uv = __ldg((const float4 *)(xu + k));
            xv = make_float4(swiglu1(xv.x, uv.x), swiglu1(xv.y, uv.y), swiglu1(xv.z, uv.z), swiglu1(xv.w, uv.w));
        }
        s = __fmaf_rn(wv.x, xv.x, s);
        s = __fmaf_rn(wv.y, xv.y, s);
        s = __fmaf_rn(wv.z, xv.z, s);
        s = __fmaf_rn(wv.w, xv.w, s);
    }
    return warp_sum(s);
}

#endif
