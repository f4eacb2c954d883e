/* rope.cu: rotary position embedding, NORM (adjacent pairs) and NEOX (half
 * split), with freq_base, freq_scale and optional freq_factors; one position
 * per token, read from a device array so a captured graph stays valid as the
 * positions move.
 *
 * Twin of cpu_rope (kernels/ops.h, doc/formats.md §4.4):
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
 * Layout and speed: a warp per head vector, four to a block (head_rope_kernel
 * below); each block computes the token's (cos, sin) of the rotated pairs,
 * one pair a thread, into shared memory.  The whole operation touches a few
 * KiB per token: latency-bound, so what counts is how many blocks share it
 * and how few dependent round trips each makes.  (Before: one block per
 * token, its threads rotating (head, pair) elements; and before that one
 * thread looping over the heads, a round trip each: 16 us for 32 heads on
 * the H200.) */
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/norm_head.cuh"
#include "kernels/cuda/pdl.cuh"

#define ROPE_MAX_HALF (HEAD_MAX_DIM / 2) /* n_rot / 2 <= head_dim / 2 */

/* One tensor's rows: n_tok rows `stride` floats apart, each holding n_heads
 * vectors of head_dim at its start. */
typedef struct rope_rows {
    float *x;
    int n_heads;
    int64_t stride;
} rope_rows;

/* Token t's (cos, sin) of every rotated pair into cs, sn (shared), by the
 * block's first n_rot/2 threads (nthreads in the block); the caller syncs. */
__device__ __forceinline__ void rope_angles(int32_t p, int n_rot, float freq_base, float freq_scale,
                                            const float *freq_factors, float *cs, float *sn,
                                            int nthreads)
{
    const int half = n_rot / 2;
    for (int i = threadIdx.x; i < half; i += nthreads) {
        double inv = pow((double)freq_base, -2.0 * i / n_rot);
        if (freq_factors)
            inv /= freq_factors[i];
        double theta = (double)p * freq_scale * inv;
        double sd, cd;
        sincos(theta, &sd, &cd); /* one range reduction for both */
        cs[i] = (float)cd;
        sn[i] = (float)sd;
    }
}

/* ---- one warp per head vector ---------------------------------------------
 * Block (t, g) holds HB_WARPS warps; warp v takes head vector g*HB_WARPS + v
 * of token t (q's heads, then k's).  The lanes load the vector into
 * registers (all loads in flight), the block's threads compute the token's
 * (cos, sin) meanwhile, then (NORM: qwen3's Q/K norm first, with
 * head_rmsnorm_regs, exactly as rmsnorm_heads_kernel) the warp rotates its
 * vector's pairs through shared memory and stores each element once: one
 * memory round trip.  So cuda_rope_qk is cuda_rope twice, and
 * cuda_qk_norm_rope is cuda_rmsnorm_heads (q), (k) and cuda_rope_qk, bit for
 * bit, and a token's result does not depend on the batch.
 * The first versions ran one block per token: the norm + RoPE of the
 * 30B-A3B's 36 head vectors took 9.1 us under ncu on the H200, a warp
 * normalising three heads one after another with two round trips each. */
#define HB_WARPS 4

template <bool NORM>
__global__ void __launch_bounds__(HB_WARPS * 32)
head_rope_kernel(rope_rows t0, const float *w0, rope_rows t1, const float *w1, int head_dim, float eps,
                 const int32_t *pos, int n_rot, int neox, float freq_base, float freq_scale,
                 const float *freq_factors)
{
    __shared__ float cs[ROPE_MAX_HALF], sn[ROPE_MAX_HALF];
    __shared__ float hv[HB_WARPS][HEAD_MAX_DIM];
    pdl_wait();    /* launched programmatically (pdl.cuh): wait first */
    pdl_trigger(); /* then let the next kernel launch */
    const int t = blockIdx.x, half = n_rot / 2, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int h = blockIdx.y * HB_WARPS + warp, nq = t0.n_heads;
    /* a warp past the last head still computes angles and meets the barrier */
    const bool live = h < nq + (t1.x ? t1.n_heads : 0);
    float v[HEAD_PER_LANE], g[HEAD_PER_LANE];
    float *p = NULL;
    if (live) {
        const rope_rows &r = h < nq ? t0 : t1;
        p = r.x + (int64_t)t * r.stride + (int64_t)(h < nq ? h : h - nq) * head_dim;
        head_load_warp(p, head_dim, lane, v);
        if (NORM)
            head_load_warp(h < nq ? w0 : w1, head_dim, lane, g);
    }
    rope_angles(pos[t], n_rot, freq_base, freq_scale, freq_factors, cs, sn, HB_WARPS * 32);
    if (live) {
        if (NORM)
            head_rmsnorm_regs(v, g, head_dim, eps, lane);
#pragma unroll
        for (int u = 0; u < HEAD_PER_LANE; u++) {
            const int e = lane + 32 * u;
            if (e < n_rot)
                hv[warp][e] = v[u];
            else if (NORM && e < head_dim)
                p[e] = v[u]; /* past the rotated part: only normed */
        }
    }
    __syncthreads(); /* the angles, and hv across lanes */
    if (!live)
        return;
    for (int i = lane; i < half; i += 32) {
        const int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
        const float a = hv[warp][ia], b = hv[warp][ib], c = cs[i], s = sn[i];
        p[ia] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
        p[ib] = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
    }
}

/* the launch both entry points share; t1.x NULL: q only; w0 NULL: no norm */
static int head_rope_launch(rope_rows r0, const float *w0, rope_rows r1, const float *w1, int n_tok,
                            int head_dim, float eps, const int32_t *d_pos, const rope_params *rp,
                            cudaStream_t stream, strata_error *err)
{
    const int nh = r0.n_heads + (r1.x ? r1.n_heads : 0);
    const dim3 grid((unsigned)n_tok, (unsigned)((nh + HB_WARPS - 1) / HB_WARPS));
    if (w0)
        CUDA_CHECK(err, pdl_launch(head_rope_kernel<true>, grid, dim3(HB_WARPS * 32), 0, stream, r0, w0, r1, w1,
                                   head_dim, eps, d_pos, rp->n_rot, rp->neox, rp->freq_base, rp->freq_scale,
                                   rp->freq_factors));
    else
        CUDA_CHECK(err, pdl_launch(head_rope_kernel<false>, grid, dim3(HB_WARPS * 32), 0, stream, r0, w0, r1,
                                   w1, head_dim, eps, d_pos, rp->n_rot, rp->neox, rp->freq_base,
                                   rp->freq_scale, rp->freq_factors));
    return 0;
}

static int rope_check(const char *who, int n_heads, int head_dim, int64_t stride,
                      const rope_params *rp, strata_error *err)
{
    if (rp->n_rot <= 0 || rp->n_rot > head_dim || (rp->n_rot & 1) || head_dim > HEAD_MAX_DIM)
        return strata_err(err, STRATA_E_ARG, "%s: n_rot %d (head_dim %d)", who, rp->n_rot,
                          head_dim);
    if (stride < (int64_t)n_heads * head_dim)
        return strata_err(err, STRATA_E_ARG, "%s: stride %lld < %d heads x %d", who,
                          (long long)stride, n_heads, head_dim);
    return 0;
}

extern "C" int cuda_rope_qk(float *q, int n_q_heads, int64_t q_stride, float *k, int n_k_heads,
                            int64_t k_stride, int n_tok, int head_dim, const int32_t *d_pos,
                            const rope_params *rp, cudaStream_t stream, strata_error *err)
{
    if (n_tok <= 0 || n_q_heads <= 0)
        return 0;
    int rc = rope_check("cuda_rope", n_q_heads, head_dim, q_stride, rp, err);
    if (!rc && k && n_k_heads > 0)
        rc = rope_check("cuda_rope (k)", n_k_heads, head_dim, k_stride, rp, err);
    if (rc)
        return rc;
    rope_rows r0 = {q, n_q_heads, q_stride};
    rope_rows r1 = {n_k_heads > 0 ? k : NULL, n_k_heads, k_stride};
    return head_rope_launch(r0, NULL, r1, NULL, n_tok, head_dim, 0.f, d_pos, rp, stream, err);
}

extern "C" int cuda_rope(float *x, int n_tok, int n_heads, int head_dim, int64_t stride,
                         const int32_t *d_pos, const rope_params *rp, cudaStream_t stream,
                         strata_error *err)
{
    return cuda_rope_qk(x, n_heads, stride, NULL, 0, 0, n_tok, head_dim, d_pos, rp, stream, err);
}

extern "C" int cuda_qk_norm_rope(float *q, const float *q_w, int n_q_heads, int64_t q_stride, float *k,
                                 const float *k_w, int n_k_heads, int64_t k_stride, int n_tok,
                                 int head_dim, float eps, const int32_t *d_pos, const rope_params *rp,
                                 cudaStream_t stream, strata_error *err)
{
    if (n_tok <= 0 || n_q_heads <= 0)
        return 0;
    int rc = rope_check("cuda_qk_norm_rope", n_q_heads, head_dim, q_stride, rp, err);
    if (!rc && k && n_k_heads > 0)
        rc = rope_check("cuda_qk_norm_rope (k)", n_k_heads, head_dim, k_stride, rp, err);
    if (rc)
        return rc;
    if (!q_w || (k && n_k_heads > 0 && !k_w))
        return strata_err(err, STRATA_E_ARG, "cuda_qk_norm_rope: a norm weight is missing");
    rope_rows r0 = {q, n_q_heads, q_stride};
    rope_rows r1 = {n_k_heads > 0 ? k : NULL, n_k_heads, k_stride};
    return head_rope_launch(r0, q_w, r1, k_w, n_tok, head_dim, eps, d_pos, rp, stream, err);
}
