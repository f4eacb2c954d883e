/* rotate.cuh: the k8v4r rotation of one head vector held by one warp
 * (device code, C++ only), shared by kv.cu (R x, fused with the store) and
 * attention.cu (R^T x, fused with the output write).  The transform and why
 * it is done: kernels/cpu/rotate.c, its twin, bit for bit:
 *
 * - the sign flips are exact;
 * - the Walsh-Hadamard butterflies are the CPU's adds and subtracts on the
 *   same pairs (j, j + len), stage by stage in the CPU's order (len = 1, 2,
 *   4, ...): a pair's lower element becomes a + b, its upper a - b, and an
 *   IEEE add is commutative, so a lane computing mine + partner gets the
 *   CPU's a + b;
 * - the scale is one __fmul_rn by the same float (kv_rot_scale).
 *
 * Layout: lane l holds elements l + 32 r (r < head_dim / 32) of the
 * vector: the butterflies of distance < 32 pair lanes (one shuffle per
 * register and stage), the longer ones pair registers of the same lane (no
 * shuffle, no shared memory, no barrier).  Register r is also element l of
 * the vector's 32-block r: the layout the Q8_0 / Q4_0 stores and the
 * attention's output write use. */
#ifndef STRATA_ROTATE_CUH
#define STRATA_ROTATE_CUH

#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/ops.h"

#define ROT_WORDS (KV_ROT_MAX_DIM / 64)
#define ROT_MAX_REGS (KV_ROT_MAX_DIM / 32)

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

/* Element lane + 32 r's sign bit: word r / 2, bit lane + 32 (r & 1). */
__device__ __forceinline__ bool rot_neg(const rot_signs &s, int r, int lane)
{
    return (s.w[r >> 1] >> (lane + 32 * (r & 1))) & 1;
}

/* x[r] is element lane + 32 r of a vector of 32 n elements (n <= N, a
 * power of two, the same in every lane); x <- R x (inverse: R^T x) in
 * place.  Every lane of the warp must call it. */
template <int N>
__device__ __forceinline__ void rot_warp(float (&x)[N], int n, int lane, bool inverse,
                                         float scale, const rot_signs &s)
{
    if (!inverse) {
#pragma unroll
        for (int r = 0; r < N; r++)
            if (r < n && rot_neg(s, r, lane))
                x[r] = -x[r];
    }
#pragma unroll
    for (int len = 1; len < 32; len <<= 1) {
#pragma unroll
        for (int r = 0; r < N; r++) {
            if (r < n) {
                const float o = __shfl_xor_sync(0xffffffffu, x[r], len);
                x[r] = (lane & len) ? __fsub_rn(o, x[r]) : __fadd_rn(x[r], o);
            }
        }
    }
#pragma unroll
    for (int m = 1; m < N; m <<= 1) {
        if (m < n) {
#pragma unroll
            for (int r = 0; r < N; r++) {
                if (!(r & m) && r + m < n) {
                    const float a = x[r], b = x[r + m];
                    x[r] = __fadd_rn(a, b);
                    x[r + m] = __fsub_rn(a, b);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < N; r++) {
        if (r < n) {
            x[r] = __fmul_rn(x[r], scale);
            if (inverse && rot_neg(s, r, lane))
                x[r] = -x[r];
        }
    }
}

#endif
