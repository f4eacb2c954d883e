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
 * scales searched side by side (nl_search): codes looked up (nl_tabs: the
 * same count of level midpoints below x as the CPU's comparisons), sum(l x)
 * in the xor butterfly's order, which kv_sum32 copies on the CPU, sum(l^2)
 * in integers (exact in any order); the same IEEE divisions and products,
 * so the codes and the scale match the CPU's bit for bit; the scale keeps
 * 7 significant bits and at most 56.5 in magnitude (h_nl_scale), as there.
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

/* fp16 bits rounded to 7 significant bits: kernels/cpu/kv.c's fp16_keep7
 * (its comment says why the k8v4nl scale is so). */
__device__ __forceinline__ uint16_t h_keep7(uint16_t h)
{
    uint32_t mag = h & 0x7fffu;
    if (mag >= 0x7c00u)
        return h;
    mag = (mag + 7u + ((mag >> 4) & 1u)) & ~0xfu;
    if (mag >= 0x7c00u)
        mag = 0x7bf0u;
    return (uint16_t)((h & 0x8000u) | mag);
}

/* h_keep7 with the magnitude clamped to KV_NL_DMAX: kv_nl_scale. */
__device__ __forceinline__ uint16_t h_nl_scale(uint16_t h)
{
    h = h_keep7(h);
    return (h & 0x7fffu) > KV_NL_DMAX ? (uint16_t)((h & 0x8000u) | KV_NL_DMAX) : h;
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

/* The IQ4_NL code of r (kv_nl_code: how many level midpoints lie below
 * r) and its level, by lookup.  The midpoints are multiples of 1/2, so
 * with M = 2 mid (integers) and t = 2 r (exact):
 *   mid < r  <=>  M < t  <=>  M < ceil(t)
 * (an integer is below t exactly when it is below t rounded up).  The
 * code is a function of h = ceil(2 r) alone, tabulated for the h that
 * matter: every M lies in -231..202, so clamping h to +-NL_HALF changes no
 * count.  A NaN r converts to h = 0 (PTX: NaN -> 0), whose count is 8 as
 * kv_nl_code's NaN; +-Inf saturate.  One rounded product, a conversion,
 * two clamps and a shared-memory byte: where the 15 comparisons and their
 * sum were ~45 instructions per code, 15 codes per candidate scale. */
#define NL_HALF 232
#define NL_N (2 * NL_HALF + 1)

typedef struct nl_tabs {
    uint8_t code[NL_N]; /* code of h = i - NL_HALF */
    int8_t level[NL_N]; /* its level, iq4nl_values[code] */
} nl_tabs;

/* The table, made by the compiler: the code of h is how many of the
 * doubled midpoints 2 mid (integers) lie below h, as kv_nl_code counts the
 * midpoints below r.  A constant in global memory, which each block copies
 * to shared memory (nl_tabs_load): building it there took every block ~15
 * entries a lane of 15 comparisons each, and a 512-token chunk's store has
 * 16384 such blocks. */
static constexpr nl_tabs nl_tabs_make()
{
    const int mid2[15] = {-231, -187, -148, -114, -84, -57, -32, -9,
                          14,   38,   63,   91,   122, 158, 202};
    const int level[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                           1,    13,   25,  38,  53,  69,  89,  113};
    nl_tabs t{};
    for (int i = 0; i < NL_N; i++) {
        int c = 0;
        for (int j = 0; j < 15; j++)
            c += mid2[j] < i - NL_HALF;
        t.code[i] = (uint8_t)c;
        t.level[i] = (int8_t)level[c];
    }
    return t;
}

/* 16-byte aligned and padded, for the copy's 16-byte loads and stores */
#define NL_WORDS ((sizeof(nl_tabs) + 15) / 16)
union nl_tabs_mem {
    nl_tabs t;
    uint4 w[NL_WORDS];
};
__device__ const nl_tabs_mem nl_tabs_global = {nl_tabs_make()};

/* Every thread of the block copies its part (two 16-byte words a lane for
 * one warp); a barrier before the first lookup. */
__device__ __forceinline__ void nl_tabs_load(nl_tabs_mem &t)
{
    for (int i = threadIdx.x; i < (int)NL_WORDS; i += blockDim.x)
        t.w[i] = nl_tabs_global.w[i];
}

/* The table index of r's code. */
__device__ __forceinline__ int nl_index(float r)
{
    const int h = __float2int_ru(__fmul_rn(r, 2.0f));
    return min(max(h, -NL_HALF), NL_HALF) + NL_HALF;
}

/* The sums over the warp of v[j] for 16 values j a lane, each in the xor
 * butterfly's order (offsets 16, 8, 4, 2, 1: kv_sum32 on the CPU), with 16
 * shuffles where 16 butterflies take 80.  At offset o a lane keeps the half
 * of its values that its partner (lane ^ o) sends away, and adds the
 * partner's copy of each: the same mine + partner as the butterfly, whose
 * two lanes end up equal, so computing it in one of them loses nothing.
 * Lane l returns the sum of v[l >> 1]. */
/* a where m is all ones, b where it is zero: one LOP3 the compiler cannot
 * see through (written as a select, or as the same bit operations in C, it
 * turned the choice between v[j] and v[n + j] into one between their
 * addresses, with v in local memory) */
__device__ __forceinline__ float pick(uint32_t m, float a, float b)
{
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xCA;" /* (m & a) | (~m & b) */
        : "=r"(d)
        : "r"(m), "r"(__float_as_uint(a)), "r"(__float_as_uint(b)));
    return __uint_as_float(d);
}

/* One stage of warp_sum16: offset 2n, v[0..2n) -> v[0..n) (a template, so
 * that every index is a constant and v stays in registers) */
template <int N> __device__ __forceinline__ void sum_stage(float (&v)[16], int lane)
{
    const uint32_t up = lane & (2 * N) ? 0xffffffffu : 0u;
#pragma unroll
    for (int j = 0; j < N; j++) {
        const float keep = pick(up, v[N + j], v[j]), send = pick(up, v[j], v[N + j]);
        v[j] = __fadd_rn(keep, __shfl_xor_sync(0xffffffffu, send, 2 * N));
    }
}

__device__ __forceinline__ float warp_sum16(float (&v)[16], int lane)
{
    sum_stage<8>(v, lane);
    sum_stage<4>(v, lane);
    sum_stage<2>(v, lane);
    sum_stage<1>(v, lane);
    return __fadd_rn(v[0], __shfl_xor_sync(0xffffffffu, v[0], 1));
}

/* ggml's IQ4_NL scale search for one 32-block, one element per lane, bit
 * for bit as cpu_quant_v4nl (its comment says why each step is so): the
 * least-squares scale of the best of 15 candidates, for an extreme vmax
 * (the element of largest |x|) with 0 < |vmax| <= 3e38.
 *
 * The 15 candidates are independent, so they run side by side: each lane
 * divides for one candidate and the quotients are broadcast (one division
 * instead of 15), the levels (nl_tabs) and the products l x of all
 * candidates are formed, and their sums over the warp reduce together
 * (warp_sum16: the butterfly's order, a sixteenth candidate of zeros).
 * sum(l^2) is an integer, exact in any order: one warp reduction (redux)
 * per candidate.  Lanes 2j and 2j + 1 then hold candidate j's sums; they
 * divide and score it, and a warp argmax picks the first greatest score
 * (lowest lane: lowest candidate).  Same operations on the same operands
 * in the same order: the same bits. */
__device__ __forceinline__ float nl_search(float xv, float vmax, int lane, const nl_tabs &tb)
{
    const float idl = __fdiv_rn((float)((lane < 15 ? lane : 0) - 134), vmax); /* t - 127 */
    float sqx[16];
    int sqq[15];
#pragma unroll
    for (int j = 0; j < 15; j++) {
        float id = __shfl_sync(0xffffffffu, idl, j);
        int l = tb.level[nl_index(__fmul_rn(xv, id))];
        sqx[j] = xv == xv ? __fmul_rn((float)l, xv) : 0.0f; /* NaN: as 0 */
        sqq[j] = l * l;
    }
    sqx[15] = 0.0f;
    const int cand = lane >> 1; /* the candidate whose sums this lane holds */
    const float mx = warp_sum16(sqx, lane);
    /* the CPU's "score > best" from best = -1 in candidate order, where
     * every score is >= 0 or NaN and a NaN is never taken (key -1; all
     * NaN: d = 0, as there) */
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
        mq = cand == j ? q : mq;
    }
    const float dt = __fdiv_rn(mx, (float)mq), score = __fmul_rn(dt, mx);
    float key = cand < 15 ? (score == score ? score : -1.0f) : -2.0f;
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

/* V element `lane` of block b: Q4_0 or f16, or (NL) IQ4_NL codes (k8v4nl,
 * with the table tb in shared memory). */
template <bool NL>
__device__ __forceinline__ void kv_put_v(const kv_view &kv, int64_t slot, int b, int lane,
                                         float xv, const nl_tabs *tb)
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
    uint16_t dbits; /* the stored fp16 scale */
    int code;
    if constexpr (NL) {
        /* IQ4_NL levels, searched scale (cpu_quant_v4nl); zero or Inf
         * extreme: d = 0 and every code 8, as there */
        /* The search runs on every block, its result dropped for a zero or
         * Inf extreme (where its arithmetic is harmless garbage): called
         * under that condition, which the compiler cannot prove the same
         * for the whole warp, each of its ~120 shuffles became a WARPSYNC
         * loop (seen in the SASS). */
        float db = nl_search(xv, vmax, lane, *tb);
        if (!(best > 0.0f && best <= 3.0e38f))
            db = 0.0f;
        dbits = h_nl_scale(f2h_bits(db));
        dv = __half2float(__ushort_as_half(dbits));
        float id = dv != 0.0f ? __fdiv_rn(1.0f, dv) : 0.0f;
        code = tb->code[nl_index(__fmul_rn(xv, id))];
    } else {
        dv = __fdiv_rn(vmax, -8.0f);
        float idv = dv != 0.0f ? __fdiv_rn(1.0f, dv) : 0.0f;
        code = v4_code(__fadd_rn(__fmul_rn(xv, idv), 8.5f));
        dbits = f2h_bits(dv);
    }
    int hi = __shfl_down_sync(0xffffffffu, code, 16);
    if (lane < 16)
        kv.vq[slot * (hd / 2) + 16 * b + lane] = (uint8_t)(code | (hi << 4));
    if (lane == 0)
        kv.vd[slot * nb + b] = dbits;
}

/* One warp per (token, kv head, 32-block).  NL: k8v4nl (the IQ4_NL table in
 * shared memory; the other types have none). */
template <bool NL>
__global__ void __launch_bounds__(KV_WARPS * 32)
kv_store_kernel(kv_view kv, int page_stride, int n_tok, int n_total, const int32_t *pos,
                const float *k, int64_t k_stride, const float *v, int64_t v_stride)
{
    const nl_tabs *tb = nullptr;
    if constexpr (NL) {
        __shared__ nl_tabs_mem tbm;
        nl_tabs_load(tbm); /* before the wait: it overlaps the previous kernel */
        __syncthreads();
        tb = &tbm.t;
    }
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
    kv_put_v<NL>(kv, slot, b, lane, xv, tb);
}

/* k8v4r, k8v4r2: q, k and v rotated (rotate.cuh) and k, v stored, in one
 * launch.  One warp per q head vector (rotated in place) and one per 32-block
 * of each k and v head vector, a block each (grid.x: the row's q heads,
 * then k's blocks, then v's; grid.y: the row), so that what a warp does
 * derives from blockIdx alone and the compiler sees it uniform (warp
 * indices from threadIdx made every shuffle below a WARPSYNC loop in the
 * SASS).  The warp loads the whole vector, rotates it
 * in registers (lane l holds elements l + 32 r) and stores block b, which
 * its register b holds one element a lane, the store's layout.  The
 * vector's other warps do the same rotation: ~20 shuffles each for head_dim
 * 128, where sharing it would take a block-wide barrier and shared memory
 * (the previous layout, a block per vector, spent most of its time there),
 * and every block's quantization (k8v4r2's scale search above all) runs in
 * a warp of its own.  k and v are only read: the rotated rows are not
 * needed after the store (they live on in the pool).  K is stored less the
 * shift, as cuda_kv_store. */
template <int N, bool NL, bool CARVE>
__global__ void __launch_bounds__(32)
kv_rotate_store_kernel(kv_view kv, int page_stride, int n_tok, const int32_t *pos, float *q,
                       int n_q_heads, int64_t q_stride, const float *k, int64_t k_stride,
                       const float *v, int64_t v_stride, float scale, rot_signs s)
{
    const int hd = 32 * N, lane = threadIdx.x, kv_blocks = kv.n_kv_head * N;
    const int row = blockIdx.y;
    int u = blockIdx.x, part = 0, h = u, b = 0; /* part 0: q, 1: k, 2: v */
    const nl_tabs *tb = nullptr;
    if constexpr (NL) {
        __shared__ nl_tabs_mem tbm;
        if (u >= n_q_heads + kv_blocks) { /* V's blocks only */
            nl_tabs_load(tbm); /* before the wait: it overlaps the previous kernel */
            __syncwarp();
        }
        tb = &tbm.t;
    }
    pdl_wait();    /* launched programmatically (pdl.cuh): wait first */
    pdl_trigger(); /* then let the next kernel launch */
    const float *src = q + (int64_t)row * q_stride;
    if (u >= n_q_heads) {
        u -= n_q_heads;
        part = 1 + u / kv_blocks;
        u %= kv_blocks;
        h = u / N;
        b = u % N;
        src = part == 1 ? k + (int64_t)row * k_stride : v + (int64_t)row * v_stride;
    }
    src += (int64_t)h * hd + lane;
    float x[N];
#pragma unroll
    for (int r = 0; r < N; r++)
        x[r] = src[32 * r];
    rot_warp<N>(x, N, lane, false, scale, s);
    if (part == 0) {
        float *dst = q + (int64_t)row * q_stride + (int64_t)h * hd + lane;
#pragma unroll
        for (int r = 0; r < N; r++)
            dst[32 * r] = x[r];
        return;
    }
    float xb = x[0]; /* x[b] without indexing registers at run time */
#pragma unroll
    for (int r = 1; r < N; r++)
        xb = r == b ? x[r] : xb;
    const int seq = row / n_tok;
    int64_t slot = kv_slot(kv.pages + (int64_t)seq * page_stride, kv.n_kv_head, pos[row], h);
    if (part == 1) {
        if (kv.kshift)
            xb = __fsub_rn(xb, kv.kshift[(int64_t)h * hd + 32 * b + lane]);
        kv_put_k(kv, slot, b, lane, xb);
    } else {
        kv_put_v<NL>(kv, slot, b, lane, xb, tb);
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
    void (*kernel)(kv_view, int, int, int, const int32_t *, const float *, int64_t,
                   const float *, int64_t) =
        kv->type == KV_K8V4NL ? kv_store_kernel<true> : kv_store_kernel<false>;
    CUDA_CHECK(err, pdl_launch(kernel, dim3(blocks), dim3(KV_WARPS * 32), 0, stream, *kv,
                               page_stride, n_tok, n_seq * n_tok, d_pos, k, k_stride, v,
                               v_stride));
    return 0;
}

/* The one-warp blocks ask for the largest shared-memory carveout.  Why (a
 * hypothesis the card is to confirm, with STRATA_KV_CARVE=0 for the
 * comparison): an SM's split between L1 and shared memory is set when a
 * block lands on it idle, from that block's kernel, and another kernel's
 * blocks run beside it only if they fit that split.  In L1's favour, a
 * decode step's 96 store blocks (batch 1, the 8B) would hold 96 of the 132
 * SMs where the attention's blocks, launched early (PDL), need most of the
 * shared memory, leaving them 36 SMs for 72 blocks; the old store had 48
 * blocks, and the layer bench, whose store follows an attention, would not
 * see it.  A hint, set once per kernel like the attention's opt-in. */
extern "C" int strata_kv_carve_off = 0;

template <typename K> static cudaError_t kv_carve_max_shared(K kernel, bool *done)
{
    if (*done || strata_kv_carve_off)
        return cudaSuccess;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         (int)cudaSharedmemCarveoutMaxShared);
    *done = e == cudaSuccess;
    return e;
}

template <int N, bool NL, bool CARVE>
static cudaError_t kv_rotate_store_go(const kv_view *kv, int page_stride, int n_tok, int n_rows,
                                      const int32_t *d_pos, float *q, int n_q_heads,
                                      int64_t q_stride, const float *k, int64_t k_stride,
                                      const float *v, int64_t v_stride, cudaStream_t stream)
{
    static bool carved = false;
    if (CARVE) {
        cudaError_t e = kv_carve_max_shared(kv_rotate_store_kernel<N, NL, CARVE>, &carved);
        if (e != cudaSuccess)
            return e;
    }
    return pdl_launch(kv_rotate_store_kernel<N, NL, CARVE>,
                      dim3((unsigned)(n_q_heads + 2 * kv->n_kv_head * N), (unsigned)n_rows),
                      dim3(32), 0, stream, *kv, page_stride, n_tok, d_pos, q, n_q_heads, q_stride,
                      k, k_stride, v, v_stride, kv_rot_scale(32 * N), rot_signs_make());
}

/* The carveout hint for one-row launches only (batch-1 decode, where it was
 * measured to help: 96 blocks); a launch of several rows (768 blocks at
 * batch 8) would set every SM in shared memory's favour for the matvecs
 * that follow, which batch 8 measured worse with the hint (one run each,
 * ade3bf8).  CARVE is a template argument so that the two are two
 * kernels: the hint is an attribute of the kernel, not of the launch. */
template <int N, bool NL>
static cudaError_t kv_rotate_store_launch(const kv_view *kv, int page_stride, int n_tok,
                                          int n_rows, const int32_t *d_pos, float *q,
                                          int n_q_heads, int64_t q_stride, const float *k,
                                          int64_t k_stride, const float *v, int64_t v_stride,
                                          cudaStream_t stream)
{
    return (n_rows == 1 ? kv_rotate_store_go<N, NL, true> : kv_rotate_store_go<N, NL, false>)(
        kv, page_stride, n_tok, n_rows, d_pos, q, n_q_heads, q_stride, k, k_stride, v, v_stride,
        stream);
}

typedef cudaError_t (*kv_rotate_store_fn)(const kv_view *, int, int, int, const int32_t *,
                                          float *, int, int64_t, const float *, int64_t,
                                          const float *, int64_t, cudaStream_t);

template <bool NL> static kv_rotate_store_fn kv_rotate_store_pick(int hd)
{
    return hd == 32    ? kv_rotate_store_launch<1, NL>
           : hd == 64  ? kv_rotate_store_launch<2, NL>
           : hd == 128 ? kv_rotate_store_launch<4, NL>
           : hd == 256 ? kv_rotate_store_launch<8, NL>
                       : kv_rotate_store_launch<16, NL>;
}

extern "C" int cuda_kv_rotate_store(const kv_view *kv, int page_stride, int n_seq, int n_tok,
                                    const int32_t *d_pos, float *q, int n_q_heads,
                                    int64_t q_stride, const float *k, int64_t k_stride,
                                    const float *v, int64_t v_stride, cudaStream_t stream,
                                    strata_error *err)
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
    const int rows = n_seq * n_tok;
    const kv_rotate_store_fn launch = kv->type == KV_K8V4NL ? kv_rotate_store_pick<true>(hd)
                                                            : kv_rotate_store_pick<false>(hd);
    CUDA_CHECK(err, launch(kv, page_stride, n_tok, rows, d_pos, q, n_q_heads, q_stride, k,
                           k_stride, v, v_stride, stream));
    return 0;
}
