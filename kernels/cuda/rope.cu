/* rope.cu: rotary position embedding, NORM (adjacent pairs) and NEOX (half
 * split), with freq_base, freq_scale and optional freq_factors; one position
 * per token, read from a device array so a captured graph stays valid as the
 * positions move.
 *
 * Twin of cpu_rope (kernels/ops.h, FORMATS.md §4.4):
 *   theta_i = pos * freq_scale * base^(-2i/n_rot) [/ freq_factors[i]]
 *   (a, b) -> (a cos - b sin, a sin + b cos)
 * The angle, its cosine and its sine are computed in double exactly as the
 * CPU writes them and then rounded to float, so (c, s) agree with the CPU's
 * to the last bit in all but rare double-rounding cases; the rotation is
 * spelled with __fmul_rn / __fsub_rn / __fadd_rn (no contraction), as the
 * ISO C reference computes it.  At position 131072 a float angle is only
 * good to ~0.004 rad (half an ulp of 131072); double keeps long contexts
 * right.
 *
 * Layout and speed: one block per token, one thread per rotated pair i;
 * the thread computes (cos, sin) once and applies it to every head, so the
 * double-precision trigonometry is paid n_rot/2 times per token, not per
 * head.  The whole operation touches a few KiB per token: latency-bound. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"

#define ROPE_THREADS 128

/* x: n_tok rows `stride` floats apart; each holds n_heads vectors of
 * head_dim at its start.  pos[n_tok]; freq_factors[n_rot/2] or NULL. */
__global__ void __launch_bounds__(ROPE_THREADS)
rope_kernel(float *x, int n_heads, int head_dim, int64_t stride, const int32_t *pos, int n_rot,
            int neox, float freq_base, float freq_scale, const float *freq_factors)
{
    int t = blockIdx.x;
    int half = n_rot / 2;
    int32_t p = pos[t];
    float *row = x + (int64_t)t * stride;
    for (int i = threadIdx.x; i < half; i += ROPE_THREADS) {
        double inv = pow((double)freq_base, -2.0 * i / n_rot);
        if (freq_factors)
            inv /= freq_factors[i];
        double theta = (double)p * freq_scale * inv;
        float c = (float)cos(theta), s = (float)sin(theta);
        int a = neox ? i : 2 * i;
        int b = neox ? i + half : 2 * i + 1;
        for (int h = 0; h < n_heads; h++) {
            float *v = row + (int64_t)h * head_dim;
            float va = v[a], vb = v[b];
            v[a] = __fsub_rn(__fmul_rn(va, c), __fmul_rn(vb, s));
            v[b] = __fadd_rn(__fmul_rn(va, s), __fmul_rn(vb, c));
        }
    }
}

extern "C" int cuda_rope(float *x, int n_tok, int n_heads, int head_dim, int64_t stride,
                         const int32_t *d_pos, const rope_params *rp, cudaStream_t stream,
                         strata_error *err)
{
    if (n_tok <= 0 || n_heads <= 0)
        return 0;
    if (rp->n_rot <= 0 || rp->n_rot > head_dim || (rp->n_rot & 1))
        return strata_err(err, STRATA_E_ARG, "cuda_rope: n_rot %d (head_dim %d)", rp->n_rot,
                          head_dim);
    if (stride < (int64_t)n_heads * head_dim)
        return strata_err(err, STRATA_E_ARG, "cuda_rope: stride %lld < %d heads x %d",
                          (long long)stride, n_heads, head_dim);
    rope_kernel<<<n_tok, ROPE_THREADS, 0, stream>>>(x, n_heads, head_dim, stride, d_pos,
                                                    rp->n_rot, rp->neox, rp->freq_base,
                                                    rp->freq_scale, rp->freq_factors);
    CUDA_CHECK_LAUNCH(err, "rope");
    return 0;
}
