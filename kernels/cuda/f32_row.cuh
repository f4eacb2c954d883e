/* f32_row.cuh: one warp's dot product of an F32 weight row with an
 * activation row, in the F32 weight kernel's order (matvec.cu, f32_kernel),
 * and the same sum in chunks whose loads are all in flight at once for the
 * fused MoE router (moe.cu, cuda_moe_router_route), so both give a router
 * logit the same bits (C++ only). */
#ifndef STRATA_F32_ROW_CUH
#define STRATA_F32_ROW_CUH

#include <stdint.h>

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

/* ---- the same sum, a chunk of loads at a time -----------------------------
 * f32_row_dot's loop waits for each load before the next FMA and the
 * compiler keeps only a few in flight: for a 2048-wide row that is several
 * memory round trips.  Here a lane first loads its F32_ROW_CHUNK float4 of a
 * chunk (F32_ROW_CHUNK * 128 columns), then runs the same FMAs in the same
 * order (columns 4l + 128i, i ascending, x y z w), so the partial s and,
 * after warp_sum, the dot product are f32_row_dot's bits.  The weight chunk
 * may be loaded before the caller's pdl_wait (no kernel writes weights). */
#define F32_ROW_CHUNK 16

/* a lane's float4 of chunk c0 (a column, multiple of F32_ROW_CHUNK * 128) */
__device__ __forceinline__ void f32_row_load(const float *r, int c0, int cols, int lane,
                                             float4 (&v)[F32_ROW_CHUNK])
{
    const float4 *p = (const float4 *)(r + c0) + lane;
    const int left = (cols - c0) / 4 - lane; /* this lane's float4 left in the row */
    if (left > 32 * (F32_ROW_CHUNK - 1)) { /* a whole chunk: no predicates, one address */
#pragma unroll
        for (int i = 0; i < F32_ROW_CHUNK; i++)
            v[i] = __ldg(p + 32 * i);
        return;
    }
#pragma unroll
    for (int i = 0; i < F32_ROW_CHUNK; i++)
        v[i] = 32 * i < left ? __ldg(p + 32 * i) : make_float4(0.f, 0.f, 0.f, 0.f);
}

/* The lane's float4 of chunk 0 copied into shared memory with cp.async, to
 * be read back with f32_row_staged after cp.async.wait_group.  Why not
 * f32_row_load before pdl_wait: ptxas moves the wait (griddepcontrol.wait)
 * above plain loads, so they would no longer overlap the predecessor; it
 * keeps asm cp.async where it is, as the weight kernels' rings rely on.
 * st: the warp's F32_ROW_CHUNK x 32 float4 (lane-private columns, so the
 * read-back is conflict-free and needs no barrier).  Columns past cols are
 * zero-filled (cp.async's src-size 0). */
__device__ __forceinline__ void f32_row_stage(const float *r, int cols, int lane, float4 *st)
{
#pragma unroll
    for (int i = 0; i < F32_ROW_CHUNK; i++) {
        const int k = lane * 4 + 128 * i;
        const uint32_t dst = (uint32_t)__cvta_generic_to_shared(st + i * 32 + lane);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(r + (k < cols ? k : 0)),
                     "r"(k < cols ? 16 : 0)
                     : "memory");
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

__device__ __forceinline__ void f32_row_staged(const float4 *st, int lane, float4 (&v)[F32_ROW_CHUNK])
{
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#pragma unroll
    for (int i = 0; i < F32_ROW_CHUNK; i++)
        v[i] = st[i * 32 + lane];
}

/* s after the chunk's FMAs (only the columns below cols: a skipped FMA is
 * not an FMA with zeros, which could turn -0 into +0) */
__device__ __forceinline__ float f32_row_fma(const float4 (&w)[F32_ROW_CHUNK], const float4 (&x)[F32_ROW_CHUNK],
                                             int c0, int cols, int lane, float s)
{
#pragma unroll
    for (int i = 0; i < F32_ROW_CHUNK; i++)
        if (c0 + lane * 4 + 128 * i < cols) {
            s = __fmaf_rn(w[i].x, x[i].x, s);
            s = __fmaf_rn(w[i].y, x[i].y, s);
            s = __fmaf_rn(w[i].z, x[i].z, s);
            s = __fmaf_rn(w[i].w, x[i].w, s);
        }
    return s;
}

#endif
