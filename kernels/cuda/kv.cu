/* kv.cu: append K and V rows to the paged KV cache on the card.
 *
 * Twin of cpu_kv_store (kernels/ops.h), bit for bit: K becomes Q8_0 and V
 * Q4_0 by ggml's recipes (doc/formats.md §3.1, §3.2), with the fp16 scales kept
 * apart from the quants; or both stay f16 (KV_F16).  Positions come from a
 * device array, so a captured decode graph stays valid as they move.
 *
 * Bit-exactness: every float operation is the CPU's, in the CPU's order and
 * rounding: d = amax / 127 (IEEE division), id = 1 / d, q = roundf(x * id)
 * with the product rounded on its own (__fmul_rn, no FMA: the reference is
 * ISO C11, which does not contract); Q4_0's code is
 * trunc(x * id + 8.5) with both steps rounded; fp16 is round-to-nearest-even
 * (__float2half_rn).  The block maximum is an exact operation, so its
 * reduction order does not matter; Q4_0's "first element with the largest
 * |x|" is a (|x|, lowest index) maximum, also order-free.
 *
 * KV_K8V4NL's V (cpu_quant_v4nl): the same extreme, then 15 candidate
 * scales searched side by side (nl_search): codes by comparison with the
 * level midpoints, sum(l x) by the xor butterfly whose order kv_sum32
 * copies on the CPU, sum(l^2) in integers (exact in any order); the same
 * IEEE divisions and products, so the codes and the scale match the CPU's
 * bit for bit.
 *
 * Layout and speed: one warp per 32-element block (one lane per element),
 * shuffles for the block maximum, lanes 0..15 pack the nibble pairs.  A
 * token's K+V is a few hundred bytes: the kernel is latency-bound and runs
 * once per layer per step. */
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/rotate.cuh"
#include "kernels/cuda/warp.cuh"

#define KV_WARPS 4

__device__ __forceinline__ uint16_t f2h_bits(float f)
{
    return __half_as_ushort(__float2half_rn(f));
}

/* Codes for every float input, as kernels/cpu/kv.c: clamped in float
 * before the conversion (an out-of-range float-to-int conversion, and the
 * shift of its negative result, are undefined); NaN gives zero's code.
 * Finite inputs are unchanged: their codes already lie in range. */
__device__ __forceinline__ int8_t k8_code(float r)
{
    if (!(r == r))
        return 0;
    return (int8_t)fminf(fmaxf(r, -127.0f), 127.0f);
}

__device__ __forceinline__ int v4_code(float r)
{
    if (!(r == r))
        return 8;
    return (int)fminf(fmaxf(r, 0.0f), 15.0f);
}

/* The nearest IQ4_NL level's index (kernels/cpu/kv.c, kv_nl_code). */
__device__ __forceinline__ int nl_code(float r)
{
    if (!(r == r))
        return 8;
    const float mid[15] = {-115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
                           7.0f,    19.0f,  31.5f,  45.5f,  61.0f,  79.0f,  101.0f};
    int c = 0;
#pragma unroll
    for (int i = 0; i < 15; i++)
        c += r > mid[i];
    return c;
}

/* The level of code c (0..15): a byte permute of the 16 int8 levels held
 * as constants (c & 7 picks a byte of 8, bit 3 picks the upper half), where
 * an indexed array would live in local memory. */
__device__ __forceinline__ int nl_level(int c)
{
    uint32_t lo = __byte_perm(0xbfad9881u, 0xf6eaddcfu, (unsigned)c & 7u); /* -127 .. -10 */
    uint32_t hi = __byte_perm(0x26190d01u, 0x71594535u, (unsigned)c & 7u); /* 1 .. 113 */
    return (int8_t)((c & 8 ? hi : lo) & 0xffu);
}

/* ggml's IQ4_NL scale search for one 32-block, one element per lane, bit
 * for bit as cpu_quant_v4nl (its comment says why each step is so): the
 * least-squares scale of the best of 15 candidates, for an extreme vmax
 * (the element of largest |x|) with 0 < |vmax| <= 3e38.
 *
 * The 15 candidates are independent, so they run side by side: each lane
 * divides for one candidate and the quotients are broadcast (one division
 * instead of 15), the codes and the products l x of all candidates are
 * formed, and the 15 xor butterflies advance a stage at a time, so their
 * shuffles overlap instead of waiting on each other (before, 15 passes in
 * a row: 15 chains of 5 dependent shuffles).  sum(l^2) is an integer,
 * exact in any order: one warp reduction (redux) per candidate.  Lane j
 * then divides and scores candidate j, and a warp argmax picks the winner
 * (15 divisions in a row before).  Same operations on the same operands in
 * the same order: the same bits. */
__device__ __forceinline__ float nl_search(float xv, float vmax, int lane)
{
    const float idl = __fdiv_rn((float)((lane < 15 ? lane : 0) - 134), vmax); /* t - 127 */
    float sqx[15];
    int sqq[15];
#pragma unroll
    for (int j = 0; j < 15; j++) {
        float id = __shfl_sync(0xffffffffu, idl, j);
        int l = nl_level(nl_code(__fmul_rn(xv, id)));
        sqx[j] = xv == xv ? __fmul_rn((float)l, xv) : 0.0f; /* NaN: as 0 */
        sqq[j] = l * l;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int j = 0; j < 15; j++)
            sqx[j] = __fadd_rn(sqx[j], __shfl_xor_sync(0xffffffffu, sqx[j], o));
    /* lane j < 15 finishes candidate j (its division and score), then the
     * warp takes the first greatest score: the CPU's "score > best" from
     * best = -1 in candidate order, where every score is >= 0 or NaN and a
     * NaN is never taken (key -1; all NaN: d = 0, as there) */
    float mx = 0.0f;
    int mq = 1;
#pragma unroll
    for (int j = 0; j < 15; j++) {
#if __CUDA_ARCH__ >= 800
        int q = (int)__reduce_add_sync(0xffffffffu, (unsigned)sqq[j]);
#else
        int q = sqq[j];
        for (int o = 16; o > 0; o >>= 1)
            q += __shfl_xor_sync(0xffffffffu, q, o);
#endif
        mx = lane == j ? sqx[j] : mx;
        mq = lane == j ? q : mq;
    }
    const float dt = __fdiv_rn(mx, (float)mq), score = __fmul_rn(dt, mx);
    float key = lane < 15 ? (score == score ? score : -1.0f) : -2.0f;
    int win = lane;
    warp_argmax(key, win);
    const float db = __shfl_sync(0xffffffffu, dt, win);
    return key > -1.0f ? db : 0.0f;
}

/* Index of token `pos` of kv head h in a pool with `per_tok` elements per
 * token: [page][head][KV_PAGE][per_tok]. */
__device__ __forceinline__ int64_t kv_slot(const int32_t *pages, int n_kv_head, int32_t pos,
                                           int h)
{
    int64_t page = pages[pos / KV_PAGE];
    return (page * n_kv_head + h) * KV_PAGE + pos % KV_PAGE;
}

/* K element `lane` of 32-block b of the row at `slot`, one warp per block:
 * Q8_0 (or f16).  xk already less the K shift.  A NaN lane counts as 0 in
 * the maximum, as in the CPU's fmaxf from 0. */
__device__ __forceinline__ void kv_put_k(const kv_view &kv, int64_t slot, int b, int lane,
                                         float xk)
{
    const int hd = kv.head_dim, nb = hd / 32;
    if (kv.type == KV_F16) {
        kv.kh[slot * hd + 32 * b + lane] = f2h_bits(xk);
        return;
    }
    float amax = xk == xk ? fabsf(xk) : 0.0f;
    amax = warp_max(amax);
    float dk = __fdiv_rn(amax, 127.0f);
    float idk = dk != 0.0f ? __fdiv_rn(1.0f, dk) : 0.0f;
    kv.kq[slot * hd + 32 * b + lane] = k8_code(roundf(__fmul_rn(xk, idk)));
    if (lane == 0)
        kv.kd[slot * nb + b] = f2h_bits(dk);
}

/* V element `lane` of block b: Q4_0, IQ4_NL codes (k8v4nl) or f16. */
__device__ __forceinline__ void kv_put_v(const kv_view &kv, int64_t slot, int b, int lane,
                                         float xv)
{
    const int hd = kv.head_dim, nb = hd / 32;
    if (kv.type == KV_F16) {
        kv.vh[slot * hd + 32 * b + lane] = f2h_bits(xv);
        return;
    }
    /* The element of largest |x|, the first one on ties; a NaN is never
     * chosen (the CPU's |x| > amax is false for it). */
    float best = xv == xv ? fabsf(xv) : -1.0f;
    int bi = lane;
    warp_argmax(best, bi);
    float vmax = __shfl_sync(0xffffffffu, xv, bi);
    if (!(best > 0.0f))
        vmax = 0.0f; /* all zeros: the CPU keeps its initial +0.0 */
    float dv;
    int code;
    if (kv.type == KV_K8V4NL) {
        /* IQ4_NL levels, searched scale (cpu_quant_v4nl); zero or Inf
         * extreme: d = 0 and every code 8, as there */
        /* The search runs on every block, its result dropped for a zero or
         * Inf extreme (where its arithmetic is harmless garbage): called
         * under that condition, which the compiler cannot prove the same
         * for the whole warp, each of its ~120 shuffles became a WARPSYNC
         * loop (seen in the SASS). */
        float db = nl_search(xv, vmax, lane);
        if (!(best > 0.0f && best <= 3.0e38f))
            db = 0.0f;
        uint16_t dh = f2h_bits(db);
        dv = __half2float(__ushort_as_half(dh));
        float id = dv != 0.0f ? __fdiv_rn(1.0f, dv) : 0.0f;
        code = nl_code(__fmul_rn(xv, id));
        dv = db; /* stored below as the same fp16 bits */
    } else {
        dv = __fdiv_rn(vmax, -8.0f);
        float idv = dv != 0.0f ? __fdiv_rn(1.0f, dv) : 0.0f;
        code = v4_code(__fadd_rn(__fmul_rn(xv, idv), 8.5f));
    }
    int hi = __shfl_down_sync(0xffffffffu, code, 16);
    if (lane < 16)
        kv.vq[slot * (hd / 2) + 16 * b + lane] = (uint8_t)(code | (hi << 4));
    if (lane == 0)
        kv.vd[slot * nb + b] = f2h_bits(dv);
}

/* One warp per (token, kv head, 32-block). */
__global__ void __launch_bounds__(KV_WARPS * 32)
kv_store_kernel(kv_view kv, int page_stride, int n_tok, int n_total, const int32_t *pos,
                const float *k, int64_t k_stride, const float *v, int64_t v_stride)
{
    pdl_wait();    /* launched programmatically (pdl.cuh): wait first */
    pdl_trigger(); /* then let the next kernel launch */
    int hd = kv.head_dim, nb = hd / 32;
    int64_t w = (int64_t)blockIdx.x * KV_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (w >= (int64_t)n_total * kv.n_kv_head * nb)
        return;
    int b = (int)(w % nb);
    int h = (int)((w / nb) % kv.n_kv_head);
    int i = (int)(w / ((int64_t)nb * kv.n_kv_head));
    int seq = i / n_tok;
    int32_t p = pos[i];
    int64_t slot = kv_slot(kv.pages + (int64_t)seq * page_stride, kv.n_kv_head, p, h);
    float xk = k[(int64_t)i * k_stride + (int64_t)h * hd + 32 * b + lane];
    if (kv.kshift) /* k8v4r2: minus the rotated K bias, as cpu_kv_store */
        xk = __fsub_rn(xk, kv.kshift[(int64_t)h * hd + 32 * b + lane]);
    float xv = v[(int64_t)i * v_stride + (int64_t)h * hd + 32 * b + lane];
    kv_put_k(kv, slot, b, lane, xk);
    kv_put_v(kv, slot, b, lane, xv);
}

/* k8v4r, k8v4r2: cuda_kv_rotate then cuda_kv_store in one launch.  One
 * block per (row, head vector), grid.x covering q's heads, then k's, then
 * v's, a thread per element, as rotate_kernel; the rotated vector is written
 * back (as cuda_kv_rotate leaves it) and, for k and v, warp w of the block
 * holds 32-block w of it, one element per lane: the store's layout, so it
 * quantizes it in place of a second launch.  K is stored less the shift,
 * as cuda_kv_store. */
__global__ void __launch_bounds__(KV_ROT_MAX_DIM)
kv_rotate_store_kernel(kv_view kv, int page_stride, int n_tok, const int32_t *pos, float *q,
                       int n_q_heads, int64_t q_stride, float *k, int64_t k_stride, float *v,
                       int64_t v_stride, float scale, rot_signs s)
{
    pdl_wait();    /* launched programmatically (pdl.cuh): wait first */
    pdl_trigger(); /* then let the next kernel launch */
    __shared__ float sh[KV_ROT_MAX_DIM];
    const int hd = kv.head_dim, i = threadIdx.x, row = blockIdx.y;
    int h = blockIdx.x, part = 0; /* 0: q, 1: k, 2: v */
    float *p = q + (int64_t)row * q_stride;
    if (h >= n_q_heads) {
        h -= n_q_heads;
        part = 1 + (h >= kv.n_kv_head);
        if (part == 2)
            h -= kv.n_kv_head;
        p = part == 1 ? k + (int64_t)row * k_stride : v + (int64_t)row * v_stride;
    }
    p += (int64_t)h * hd + i;
    float x = rot_vec(*p, i, hd, 0, scale, s, sh);
    *p = x;
    if (part == 0)
        return;
    const int seq = row / n_tok, b = i >> 5, lane = i & 31;
    int64_t slot = kv_slot(kv.pages + (int64_t)seq * page_stride, kv.n_kv_head, pos[row], h);
    if (part == 1) {
        if (kv.kshift)
            x = __fsub_rn(x, kv.kshift[(int64_t)h * hd + i]);
        kv_put_k(kv, slot, b, lane, x);
    } else {
        kv_put_v(kv, slot, b, lane, x);
    }
}

extern "C" int cuda_kv_store(const kv_view *kv, int page_stride, int n_seq, int n_tok,
                             const int32_t *d_pos, const float *k, int64_t k_stride,
                             const float *v, int64_t v_stride, cudaStream_t stream,
                             strata_error *err)
{
    if (n_seq <= 0 || n_tok <= 0)
        return 0;
    if (kv->head_dim <= 0 || kv->head_dim % 32)
        return strata_err(err, STRATA_E_ARG, "cuda_kv_store: head_dim %d is not a multiple of 32",
                          kv->head_dim);
    if (kv->type != KV_K8V4 && kv->type != KV_F16 && kv->type != KV_K8V4NL)
        return strata_err(err, STRATA_E_UNSUPPORTED, "cuda_kv_store: kv type %d", kv->type);
    int64_t warps = (int64_t)n_seq * n_tok * kv->n_kv_head * (kv->head_dim / 32);
    int blocks = (int)((warps + KV_WARPS - 1) / KV_WARPS);
    CUDA_CHECK(err, pdl_launch(kv_store_kernel, dim3(blocks), dim3(KV_WARPS * 32), 0, stream, *kv,
                               page_stride, n_tok, n_seq * n_tok, d_pos, k, k_stride, v,
                               v_stride));
    return 0;
}

extern "C" int cuda_kv_rotate_store(const kv_view *kv, int page_stride, int n_seq, int n_tok,
                                    const int32_t *d_pos, float *q, int n_q_heads,
                                    int64_t q_stride, float *k, int64_t k_stride, float *v,
                                    int64_t v_stride, cudaStream_t stream, strata_error *err)
{
    const int hd = kv->head_dim;
    if (!kv_rot_supported(hd))
        return strata_err(err, STRATA_E_ARG,
                          "cuda_kv_rotate_store: head_dim %d is not a power of two in 32..%d", hd,
                          KV_ROT_MAX_DIM);
    if (kv->type != KV_K8V4 && kv->type != KV_F16 && kv->type != KV_K8V4NL)
        return strata_err(err, STRATA_E_UNSUPPORTED, "cuda_kv_rotate_store: kv type %d",
                          kv->type);
    if (q_stride < (int64_t)n_q_heads * hd || k_stride < (int64_t)kv->n_kv_head * hd ||
        v_stride < (int64_t)kv->n_kv_head * hd)
        return strata_err(err, STRATA_E_ARG,
                          "cuda_kv_rotate_store: strides q %lld k %lld v %lld < heads x %d",
                          (long long)q_stride, (long long)k_stride, (long long)v_stride, hd);
    if (n_seq <= 0 || n_tok <= 0)
        return 0;
    CUDA_CHECK(err, pdl_launch(kv_rotate_store_kernel, dim3(n_q_heads + 2 * kv->n_kv_head,
                                                            n_seq * n_tok),
                               dim3(hd), 0, stream, *kv, page_stride, n_tok, d_pos, q, n_q_heads,
                               q_stride, k, k_stride, v, v_stride, kv_rot_scale(hd),
                               rot_signs_make()));
    return 0;
}
