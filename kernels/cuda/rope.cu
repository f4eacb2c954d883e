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
 * Layout and speed: one block per token.  Its first n_rot/2 threads compute
 * (cos, sin) of one rotated pair each, once per token (not per head), into
 * shared memory; then every thread rotates (head, pair) elements, q's heads
 * and k's in the same launch.  The rotations are independent loads and
 * stores, so they overlap; the first version looped over the heads inside
 * one thread and paid a global-memory round trip per head (16 us for 32
 * heads on the H200, now a few us).  The whole operation touches a few KiB
 * per token: latency-bound. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/norm_head.cuh"
#include "kernels/cuda/pdl.cuh"

#define ROPE_THREADS 256
#define ROPE_UNROLL 4
#define ROPE_MAX_HALF 256 /* n_rot / 2 <= head_dim / 2; head_dim <= 512 */

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

/* pos[n_tok]; freq_factors[n_rot/2] or NULL; t1.x may be NULL. */
__global__ void __launch_bounds__(ROPE_THREADS)
rope_kernel(rope_rows t0, rope_rows t1, int head_dim, const int32_t *pos, int n_rot, int neox,
            float freq_base, float freq_scale, const float *freq_factors)
{
    pdl_wait();    /* launched programmatically (pdl.cuh): wait first */
    pdl_trigger(); /* then let the next kernel launch */
    __shared__ float cs[ROPE_MAX_HALF], sn[ROPE_MAX_HALF];
    const int t = blockIdx.x, half = n_rot / 2;
    rope_angles(pos[t], n_rot, freq_base, freq_scale, freq_factors, cs, sn, ROPE_THREADS);
    __syncthreads();
    /* ROPE_UNROLL pairs per thread and pass, all loaded before any store:
     * the compiler cannot prove that a store does not alias the next
     * pair's loads, so one pair at a time would pay a round trip each. */
    const int n0 = t0.n_heads * half, total = n0 + (t1.x ? t1.n_heads * half : 0);
    for (int j0 = threadIdx.x; j0 < total; j0 += ROPE_THREADS * ROPE_UNROLL) {
        float *pa[ROPE_UNROLL], *pb[ROPE_UNROLL], va[ROPE_UNROLL], vb[ROPE_UNROLL];
        int ii[ROPE_UNROLL];
#pragma unroll
        for (int u = 0; u < ROPE_UNROLL; u++) {
            const int j = j0 + u * ROPE_THREADS;
            pa[u] = NULL;
            if (j >= total)
                continue;
            const rope_rows *r = j < n0 ? &t0 : &t1;
            const int jj = j < n0 ? j : j - n0, h = jj / half, i = jj - h * half;
            float *v = r->x + (int64_t)t * r->stride + (int64_t)h * head_dim;
            pa[u] = v + (neox ? i : 2 * i);
            pb[u] = v + (neox ? i + half : 2 * i + 1);
            ii[u] = i;
            va[u] = *pa[u];
            vb[u] = *pb[u];
        }
#pragma unroll
        for (int u = 0; u < ROPE_UNROLL; u++) {
            if (!pa[u])
                continue;
            const float c = cs[ii[u]], s = sn[ii[u]];
            *pa[u] = __fsub_rn(__fmul_rn(va[u], c), __fmul_rn(vb[u], s));
            *pb[u] = __fadd_rn(__fmul_rn(va[u], s), __fmul_rn(vb[u], c));
        }
    }
}

/* ---- qwen3's Q/K head norms and RoPE in one launch -------------------------
 * One block per token; warp v normalises head vectors v, v + QKN_WARPS, ...
 * (q's heads, then k's) with head_rmsnorm_warp, exactly as
 * rmsnorm_heads_kernel, and then rotates that head's pairs with the token's
 * (cos, sin), exactly as rope_kernel: the same operations on the same
 * values, so the same bits as cuda_rmsnorm_heads (q), (k), cuda_rope_qk. */
#define QKN_WARPS 16

__global__ void __launch_bounds__(QKN_WARPS * 32, 1)
qk_norm_rope_kernel(rope_rows t0, const float *w0, rope_rows t1, const float *w1, int head_dim,
                    float eps, const int32_t *pos, int n_rot, int neox, float freq_base,
                    float freq_scale, const float *freq_factors)
{
    pdl_wait();    /* launched programmatically (pdl.cuh): wait first */
    pdl_trigger(); /* then let the next kernel launch */
    __shared__ float cs[ROPE_MAX_HALF], sn[ROPE_MAX_HALF];
    const int t = blockIdx.x, half = n_rot / 2, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    rope_angles(pos[t], n_rot, freq_base, freq_scale, freq_factors, cs, sn, QKN_WARPS * 32);
    __syncthreads();
    const int nh = t0.n_heads + (t1.x ? t1.n_heads : 0);
    for (int h = warp; h < nh; h += QKN_WARPS) {
        const int in0 = h < t0.n_heads;
        const rope_rows *r = in0 ? &t0 : &t1;
        float *v = r->x + (int64_t)t * r->stride + (int64_t)(in0 ? h : h - t0.n_heads) * head_dim;
        head_rmsnorm_warp(v, in0 ? w0 : w1, head_dim, eps, lane);
        __syncwarp(); /* the normed head, written by all lanes, is read back across lanes */
        for (int i = lane; i < half; i += 32) {
            float *pa = v + (neox ? i : 2 * i), *pb = v + (neox ? i + half : 2 * i + 1);
            const float a = *pa, b = *pb, c = cs[i], s = sn[i];
            *pa = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
            *pb = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
        }
    }
}

static int rope_check(const char *who, int n_heads, int head_dim, int64_t stride,
                      const rope_params *rp, strata_error *err)
{
    if (rp->n_rot <= 0 || rp->n_rot > head_dim || (rp->n_rot & 1) || rp->n_rot / 2 > ROPE_MAX_HALF)
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
    CUDA_CHECK(err, pdl_launch(rope_kernel, dim3(n_tok), dim3(ROPE_THREADS), 0, stream, r0, r1,
                               head_dim, d_pos, rp->n_rot, rp->neox, rp->freq_base,
                               rp->freq_scale, rp->freq_factors));
    return 0;
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
    CUDA_CHECK(err, pdl_launch(qk_norm_rope_kernel, dim3(n_tok), dim3(QKN_WARPS * 32), 0, stream, r0,
                               q_w, r1, k_w, head_dim, eps, d_pos, rp->n_rot, rp->neox,
                               rp->freq_base, rp->freq_scale, rp->freq_factors));
    return 0;
}
