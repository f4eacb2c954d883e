/* kv_block.h: the scan for a block's largest element, shared by the KV
 * quantizers' plain C twins (kernels/cpu/kv.c) and their AVX2 twins
 * (kernels/cpu/kv_avx2.c), which must agree bit for bit.  Internal to
 * kernels/cpu.  One copy, so the twins cannot drift apart on ties or NaN;
 * kernels/cuda/kv.cu reproduces it as a (|x|, lowest index) warp maximum. */
#ifndef STRATA_KV_BLOCK_H
#define STRATA_KV_BLOCK_H

#include <math.h>

/* The element of largest magnitude among x[0..n), its sign kept; the first
 * wins on ties (a later one must be strictly larger).  *amax gets its |x|.
 * A NaN never compares larger, so it is passed over; all zero or NaN gives
 * 0 and *amax = 0.  An Inf is taken (*amax = Inf): the callers test for it.
 * Scalar on purpose: the AVX2 twins keep "first on ties" without a
 * lane-by-lane tie break. */
static inline float kv_block_extreme(const float *x, int n, float *amax)
{
    float m = 0.0f, v = 0.0f;
    for (int j = 0; j < n; j++) {
        if (fabsf(x[j]) > m) {
            m = fabsf(x[j]);
            v = x[j];
        }
    }
    *amax = m;
    return v;
}

#endif
