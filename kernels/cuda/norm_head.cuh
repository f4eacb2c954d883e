/* norm_head.cuh: one head vector's RMSNorm by one warp (qwen3's Q/K norms),
 * shared by cuda_rmsnorm_heads (norm.cu) and the fused norm + RoPE
 * (cuda_qk_norm_rope, rope.cu): one definition, so both compute every value
 * with the same operations in the same order (C++ only).
 *
 * Twin: cpu_rmsnorm_heads.  y = x * (1 / sqrt(mean(x^2) + eps)) * w with the
 * sum of squares in double (lane-strided partials, then the fixed butterfly
 * of warp_sum_d) and the products spelled with __fmul_rn in the CPU's order.
 * A lane holds its elements in registers (head_dim <= HEAD_MAX_DIM), so the
 * fused norm + RoPE can rotate them without a trip through memory. */
#ifndef STRATA_NORM_HEAD_CUH
#define STRATA_NORM_HEAD_CUH

#include <cuda_runtime.h>

#include "kernels/cuda/warp.cuh"

#define HEAD_MAX_DIM 512
#define HEAD_PER_LANE (HEAD_MAX_DIM / 32)

/* Lane l's elements l, l + 32, ... of a head vector (head_dim <= 512), all
 * loads in flight at once; the rest of v is left alone. */
__device__ __forceinline__ void head_load_warp(const float *p, int head_dim, int lane, float (&v)[HEAD_PER_LANE])
{
#pragma unroll
    for (int u = 0; u < HEAD_PER_LANE; u++)
        if (lane + 32 * u < head_dim)
            v[u] = p[lane + 32 * u];
}

/* The norm of the head vector whose elements the lanes hold as
 * head_load_warp leaves them: v[u] becomes y[lane + 32u].  Every lane of the
 * warp calls it.  The sum of squares is in the order of the first version
 * (each lane's elements ascending, then warp_sum_d), so the same bits. */
__device__ __forceinline__ void head_rmsnorm_regs(float (&v)[HEAD_PER_LANE], const float (&w)[HEAD_PER_LANE],
                                                  int head_dim, float eps, int lane)
{
    double ss = 0.0;
#pragma unroll
    for (int u = 0; u < HEAD_PER_LANE; u++)
        if (lane + 32 * u < head_dim)
            ss += (double)v[u] * v[u];
    ss = warp_sum_d(ss);
    const float scale = (float)(1.0 / sqrt(ss / (double)head_dim + (double)eps));
#pragma unroll
    for (int u = 0; u < HEAD_PER_LANE; u++)
        if (lane + 32 * u < head_dim)
            v[u] = __fmul_rn(__fmul_rn(v[u], scale), w[u]);
}

/* p[0..head_dim) in place (head_dim <= HEAD_MAX_DIM); every lane of the
 * warp calls it. */
__device__ __forceinline__ void head_rmsnorm_warp(float *p, const float *w, int head_dim, float eps, int lane)
{
    float v[HEAD_PER_LANE], g[HEAD_PER_LANE];
    head_load_warp(w, head_dim, lane, g);
    head_load_warp(p, head_dim, lane, v);
    head_rmsnorm_regs(v, g, head_dim, eps, lane);
#pragma unroll
    for (int u = 0; u < HEAD_PER_LANE; u++)
        if (lane + 32 * u < head_dim)
            p[lane + 32 * u] = v[u];
}

#endif
