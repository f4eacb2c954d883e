/* rotate.cuh: the k8v4r rotation of one head vector held by a block, one
 * element per thread (device code, C++ only): shared by rotate.cu (the
 * rotation alone) and kv.cu (rotation fused with the store).  The transform
 * and why it is bit-exact with the CPU twin: kernels/cpu/rotate.c and
 * rotate.cu's header. */
#ifndef STRATA_ROTATE_CUH
#define STRATA_ROTATE_CUH

#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/ops.h"

#define ROT_WORDS (KV_ROT_MAX_DIM / 64)

typedef struct rot_signs {
    uint64_t w[ROT_WORDS];
} rot_signs;

/* The sign pattern, from kv_rot_sign_word (host). */
static inline rot_signs rot_signs_make(void)
{
    rot_signs s;
    for (int k = 0; k < ROT_WORDS; k++)
        s.w[k] = kv_rot_sign_word(k);
    return s;
}

/* x is element i (= threadIdx.x) of a head_dim vector held by the block's
 * head_dim threads; returns element i of R x (inverse: R^T x).  Butterflies
 * of distance < 32 are warp shuffles, longer ones go through sh (head_dim
 * floats) with two barriers each: every thread of the block must call it. */
__device__ __forceinline__ float rot_vec(float x, int i, int head_dim, int inverse, float scale,
                                         const rot_signs &s, float *sh)
{
    const int neg = (int)((s.w[i >> 6] >> (i & 63)) & 1);
    if (!inverse && neg)
        x = -x;
    for (int len = 1; len < head_dim && len < 32; len <<= 1) {
        float o = __shfl_xor_sync(0xffffffffu, x, len);
        x = (i & len) ? __fsub_rn(o, x) : __fadd_rn(x, o);
    }
    for (int len = 32; len < head_dim; len <<= 1) {
        sh[i] = x;
        __syncthreads();
        float o = sh[i ^ len];
        __syncthreads();
        x = (i & len) ? __fsub_rn(o, x) : __fadd_rn(x, o);
    }
    x = __fmul_rn(x, scale);
    if (inverse && neg)
        x = -x;
    return x;
}

#endif
