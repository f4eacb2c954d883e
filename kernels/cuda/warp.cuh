/* warp.cuh: reductions across the 32 lanes of a warp, shared by the kernels
 * (C++ only).  Every one is a butterfly over __shfl_xor_sync with offsets
 * 16, 8, 4, 2, 1 and a full mask: all lanes must call it, and all get the
 * result.  The order of the additions is fixed by the offsets, so a sum is
 * the same bits on every run (the invariance rule of kernels/ops.h); the
 * kernels that promise bit-equality with a CPU twin state which order the
 * twin uses. */
#ifndef STRATA_WARP_CUH
#define STRATA_WARP_CUH

#include <cuda_runtime.h>

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* (v, i) becomes the warp's largest v, the lowest i among equal ones (the
 * CPU's "first maximum"): cpu_argmax, top-k selection, Q4_0's extreme. */
__device__ __forceinline__ void warp_argmax(float &v, int &i)
{
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (ov > v || (ov == v && oi < i)) {
            v = ov;
            i = oi;
        }
    }
}

#endif
