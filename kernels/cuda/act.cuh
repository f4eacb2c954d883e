/* act.cuh: the gated activation's one-element expression, shared by the
 * SwiGLU kernels (elementwise.cu) and the weight kernels that apply it while
 * loading their input (matvec.cu, cuda_matvec_swiglu): one definition, so the
 * fused and the unfused paths compute every value with the same operations
 * and get the same bits (C++ only). */
#ifndef STRATA_ACT_CUH
#define STRATA_ACT_CUH

#include <cuda_runtime.h>

/* silu(g) * u exactly as cpu_swiglu writes it: g / (1 + expf(-g)) * u,
 * spelled with __fdiv_rn / __fadd_rn / __fmul_rn so nothing is contracted.
 * expf differs from glibc's by at most 2 ulp (CUDA math guide). */
__device__ __forceinline__ float swiglu1(float g, float u)
{
    return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

#endif
