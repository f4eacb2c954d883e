/* norm_head.cuh: one head vector's RMSNorm by one warp (qwen3's Q/K norms),
 * shared by cuda_rmsnorm_heads (norm.cu) and the fused norm + RoPE
 * (cuda_qk_norm_rope, rope.cu): one definition, so both compute every value
 * with the same operations in the same order (C++ only).
 *
 * Twin: cpu_rmsnorm_heads.  y = x * (1 / sqrt(mean(x^2) + eps)) * w with the
 * sum of squares in double (lane-strided partials, then the fixed butterfly
 * of warp_sum_d) and the products spelled with __fmul_rn in the CPU's order. */
#ifndef STRATA_NORM_HEAD_CUH
#define STRATA_NORM_HEAD_CUH

#include <cuda_runtime.h>

#include "kernels/cuda/warp.cuh"

/* p[0..head_dim) in place; every lane of the warp calls it.  The lanes
 * write elements other lanes read later only after a __syncwarp. */
__device__ __forceinline__ void head_rmsnorm_warp(float *p, const float *w, int head_dim, float eps,
                                                  int lane)
{
    double ss = 0.0;
    for (int i = lane; i < head_dim; i += 32)
        ss += (double)p[i] * p[i];
    ss = warp_sum_d(ss);
    float scale = (float)(1.0 / sqrt(ss / (double)head_dim + (double)eps));
    for (int i = lane; i < head_dim; i += 32)
        p[i] = __fmul_rn(__fmul_rn(p[i], scale), w[i]);
}

#endif
