/* moe.cu: mixture-of-experts routing and the gather/combine around the
 * expert matvecs (doc/formats.md §4.5).
 *
 * The expert matrix products themselves are the weight kernels' (cuw's
 * matvec/matmul over one expert's slab of a *_exps tensor).  Around them:
 *
 *   cuda_moe_route    per token: softmax over the n_expert router logits,
 *                     the k largest probabilities (lowest index on ties),
 *                     renormalised; ids and weights stay on the card.
 *   cuda_moe_group    for prefill: the (token, slot) pairs sorted by expert,
 *                     then by token, with per-expert offsets, so each
 *                     expert's rows can be gathered and multiplied at once.
 *   cuda_moe_gather   x rows -> expert-sorted rows.
 *   cuda_moe_combine  out[t] = sum_j w[t][j] * y[t][j] in slot order j.
 *
 * Decode (one row per sequence): route, then for each slot j run the three
 * expert matvecs with the expert id read from d_sel on the card (a weight
 * kernel that takes the id by pointer keeps the graph valid), writing
 * y[t][j]; then combine.  Prefill and decode batches: route, group,
 * gather, one grouped matmul per expert matrix (cuda_matmul_grouped in
 * matmul.cu: expert e's rows are [offset[e], offset[e+1])) writing
 * expert-sorted output rows, then cuda_moe_combine reads them back through
 * the inverse permutation (`inv`) in slot order.
 *
 * Bit-exactness with the CPU twins in kernels/cpu/moe.c (cpu_moe_*): the softmax is
 * cpu_softmax's (float max, expf, a double sum in index order, one float
 * reciprocal); the selection repeats the CPU's "highest, lowest index on
 * ties"; the renormalisation sums the k weights in float in slot order; the
 * combine starts from 0 and adds w*y products in slot order without FMA.
 * Only expf may differ from glibc's (by <= 2 ulp), so weights agree to a
 * few ulp and the selection agrees unless two probabilities are that close.
 *
 * Layout: one block of RT_THREADS per token for routing (n_expert <= 256:
 * two logits per thread).  The softmax's double sum is the CPU's index-order
 * sum: by warp trees when no addition can round (route_block says when),
 * else on one thread in index order; the selection is by rank, in parallel: expert i's slot is the number of
 * experts that beat it (a higher probability, or the same one at a lower
 * index), so the experts of rank < k are the CPU's picks in the CPU's slot
 * order.  (The first version picked the k one after another, a warp-wide
 * argmax each: 8 rounds of 10 shuffles on the critical path.) */
#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/f32_row.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/warp.cuh"
#include "model/model.h" /* MOE_MAX_USED */

#define MOE_MAX_EXPERTS 256
#define RT_THREADS 128
#define RT_PER (MOE_MAX_EXPERTS / RT_THREADS)

/* A routing block's shared memory. */
struct __align__(16) route_smem {
    float e[MOE_MAX_EXPERTS];     /* expf(l - max), then nothing */
    float p[MOE_MAX_EXPERTS + 4]; /* the probabilities, NaN past n_expert */
    double part_d[RT_THREADS / 32]; /* the warps' sums */
    float part[RT_THREADS / 32];  /* the warps' maxima */
    float inv;                    /* 1 / the double sum, as a float */
    float wsel[MOE_MAX_USED];     /* slot j's probability */
    int isel[MOE_MAX_USED];       /* slot j's expert */
};

/* One token's routing by the whole block (RT_THREADS threads, every one
 * calls it): logits r[n_expert] (read with __ldcg: the fused router wrote
 * them in this launch, from other blocks), sel[k] and w[k] written. */
__device__ void route_block(const float *r, int n_expert, int k, route_smem &sm, int32_t *sel, float *w)
{
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float l[RT_PER];
    float mx = -INFINITY;
#pragma unroll
    for (int u = 0; u < RT_PER; u++) {
        const int i = tid + u * RT_THREADS;
        l[u] = i < n_expert ? __ldcg(r + i) : -INFINITY;
        mx = fmaxf(mx, l[u]);
    }
    /* slots a NaN softmax leaves unranked get the CPU's all-NaN choice */
    if (tid < k) {
        sm.isel[tid] = tid;
        sm.wsel[tid] = __int_as_float(0x7fc00000);
    }
    mx = warp_max(mx);
    if (lane == 0)
        sm.part[warp] = mx;
    __syncthreads();
    /* cpu_softmax: mx is its running max (the same value: max is exact) */
#pragma unroll
    for (int v = 0; v < RT_THREADS / 32; v++)
        mx = fmaxf(mx, sm.part[v]);
    float e[RT_PER];
    bool big = true; /* every one of this thread's e >= 2^-22 */
#pragma unroll
    for (int u = 0; u < RT_PER; u++) {
        const int i = tid + u * RT_THREADS;
        e[u] = 0.f;
        if (i < n_expert) {
            e[u] = expf(__fsub_rn(l[u], mx));
            sm.e[i] = e[u];
            big = big && e[u] >= 0x1p-22f; /* false for a NaN */
        } else {
            sm.p[i] = __int_as_float(0x7fc00000); /* NaN: beats nothing */
        }
    }
    if (tid < 4)
        sm.p[MOE_MAX_EXPERTS + tid] = __int_as_float(0x7fc00000);
    /* cpu_softmax's sum: doubles added in index order.  When every e is at
     * least 2^-22 (a float's ulp there is 2^-45), every e is a multiple of
     * 2^-45, and so is every partial sum, which is at most 256 = 2^53 *
     * 2^-45: a double holds each exactly and no addition rounds.  Then any
     * order gives the exact sum, which is the CPU's bits, and the warps'
     * trees give it in a few steps instead of n_expert dependent ones.
     * Otherwise (logits more than ~15.2 apart) one thread adds them in the
     * CPU's order. */
    float inv;
    if (__syncthreads_and(big)) {
        double d = 0.0;
#pragma unroll
        for (int u = 0; u < RT_PER; u++)
            d += e[u];
        d = warp_sum_d(d);
        if (lane == 0)
            sm.part_d[warp] = d;
        __syncthreads();
        double sum = 0.0;
#pragma unroll
        for (int v = 0; v < RT_THREADS / 32; v++)
            sum += sm.part_d[v];
        inv = (float)(1.0 / sum);
    } else {
        if (tid == 0) {
            double sum = 0.0;
            for (int i = 0; i < n_expert; i++)
                sum += sm.e[i];
            sm.inv = (float)(1.0 / sum);
        }
        __syncthreads();
        inv = sm.inv;
    }
    float p[RT_PER];
#pragma unroll
    for (int u = 0; u < RT_PER; u++) {
        const int i = tid + u * RT_THREADS;
        p[u] = __fmul_rn(e[u], inv);
        if (i < n_expert)
            sm.p[i] = p[u];
    }
    __syncthreads();
    /* rank: how many experts beat this one; four probabilities a load (the
     * NaN padding never counts) */
    int rank[RT_PER];
#pragma unroll
    for (int u = 0; u < RT_PER; u++) {
        const int i = tid + u * RT_THREADS;
        rank[u] = 0;
        if (u * RT_THREADS >= n_expert) /* the same for the block */
            continue;
        for (int j = 0; j < n_expert; j += 4) {
            const float4 q = *(const float4 *)&sm.p[j];
            const float qv[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
            for (int c = 0; c < 4; c++)
                rank[u] += qv[c] > p[u] || (qv[c] == p[u] && j + c < i);
        }
    }
#pragma unroll
    for (int u = 0; u < RT_PER; u++) {
        const int i = tid + u * RT_THREADS;
        if (i < n_expert && rank[u] < k && p[u] == p[u]) { /* a NaN one keeps no slot */
            sm.wsel[rank[u]] = p[u];
            sm.isel[rank[u]] = i;
        }
    }
    __syncthreads();
    /* the renormalisation: every slot's thread sums the k in slot order */
    if (tid < k) {
        float sum = 0.0f;
        for (int j = 0; j < k; j++)
            sum = __fadd_rn(sum, sm.wsel[j]);
        sel[tid] = sm.isel[tid];
        w[tid] = __fdiv_rn(sm.wsel[tid], sum);
    }
}

__global__ void __launch_bounds__(RT_THREADS) moe_route_kernel(const float *logits, int n_expert, int k,
                                                               int32_t *sel, float *w)
{
    __shared__ route_smem sm;
    const int t = blockIdx.x;
    route_block(logits + (int64_t)t * n_expert, n_expert, k, sm, sel + (int64_t)t * k, w + (int64_t)t * k);
}

static int route_check(const char *who, int n_expert, int k, strata_error *err)
{
    if (n_expert < 1 || n_expert > MOE_MAX_EXPERTS || k < 1 || k > n_expert || k > MOE_MAX_USED)
        return strata_err(err, STRATA_E_UNSUPPORTED, "%s: %d experts, top-%d (limits %d, %d)", who, n_expert, k,
                          MOE_MAX_EXPERTS, MOE_MAX_USED);
    return 0;
}

extern "C" int cuda_moe_route(const float *logits, int n_tok, int n_expert, int k, int32_t *d_sel,
                              float *d_w, cudaStream_t stream, strata_error *err)
{
    if (n_tok <= 0)
        return 0;
    int rc = route_check("cuda_moe_route", n_expert, k, err);
    if (rc)
        return rc;
    moe_route_kernel<<<n_tok, RT_THREADS, 0, stream>>>(logits, n_expert, k, d_sel, d_w);
    CUDA_CHECK_LAUNCH(err, "moe_route");
    return 0;
}

/* ---- the router's product and the routing in one launch ------------------
 * Decode rows with an F32 router (llama.cpp's quantizer and mkmodel keep it
 * F32).  Block (b, t) computes logits b*RR_WARPS .. of token t, a warp per
 * router row, with f32_row.cuh's chunked dot (f32_row_dot's bits, so
 * cuda_matvec's): a lane's first chunk of weights is copied to shared
 * memory before pdl_wait (weights are no kernel's output, so under PDL
 * their latency hides behind the previous kernel), its activations loaded
 * right after: one round trip for a 2048-wide row.  The last of token t's blocks to finish
 * (its ticket: an integer count, which orders nothing in any sum) routes
 * token t with route_block, as cuda_moe_route, and puts the ticket back to
 * 0.  So the logits, choices and weights are the bits of the two launches,
 * and a token's are the same in any batch.  Four warps a block: 32 blocks
 * per token for 128 experts (the first version had 8 warps, 16 blocks, and
 * a few round trips per row: 11 us under ncu on the H200). */
#define RR_WARPS (RT_THREADS / 32)

__global__ void __launch_bounds__(RT_THREADS)
moe_router_route_kernel(const float *wr, int n_expert, int cols, const float *x, int k, float *logits,
                        int32_t *sel, float *w, unsigned *tickets)
{
    __shared__ route_smem sm;
    __shared__ float4 stage[RR_WARPS][F32_ROW_CHUNK * 32]; /* 32 KiB: chunk 0's weights */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int row = blockIdx.x * RR_WARPS + warp, t = blockIdx.y;
    /* whole warps: warp_sum's butterfly needs every lane (a row past the
     * last reads row 0 and stores nothing) */
    const float *wrow = wr + (size_t)(row < n_expert ? row : 0) * cols, *xrow = x + (size_t)t * cols;
    f32_row_stage(wrow, cols, lane, stage[warp]);
    pdl_wait();    /* launched programmatically (pdl.cuh): the activations after the wait */
    pdl_trigger(); /* then let the next kernel launch */
    float4 wv[F32_ROW_CHUNK], xv[F32_ROW_CHUNK];
    float s = 0.f;
    for (int c0 = 0; c0 < cols; c0 += F32_ROW_CHUNK * 128) {
        f32_row_load(xrow, c0, cols, lane, xv);
        if (c0)
            f32_row_load(wrow, c0, cols, lane, wv);
        else
            f32_row_staged(stage[warp], lane, wv);
        s = f32_row_fma(wv, xv, c0, cols, lane, s);
    }
    s = warp_sum(s);
    if (row < n_expert && lane == 0)
        logits[(size_t)t * n_expert + row] = s;
    /* as mvfold.cuh does it: the block's stores reach thread 0 through the
     * barrier, its fence puts them before the ticket, and the last block's
     * fence after its ticket before its loads (route_block reads with ld.cg) */
    __syncthreads();
    bool last = false;
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(tickets + t, 1u) == gridDim.x - 1;
        if (last)
            __threadfence();
    }
    if (!__syncthreads_or(last))
        return;
    route_block(logits + (size_t)t * n_expert, n_expert, k, sm, sel + (size_t)t * k, w + (size_t)t * k);
    if (threadIdx.x == 0)
        tickets[t] = 0; /* every block of token t has taken it; ready for the next launch */
}

extern "C" int cuda_moe_router_route(const float *wr, int n_expert, int64_t cols, const float *x, int n_tok,
                                     int k, float *logits, int32_t *d_sel, float *d_w, unsigned *d_tickets,
                                     cudaStream_t stream, strata_error *err)
{
    if (n_tok <= 0)
        return 0;
    int rc = route_check("cuda_moe_router_route", n_expert, k, err);
    if (rc)
        return rc;
    if (!wr || !x || !logits || !d_sel || !d_w || !d_tickets || n_tok > CUDA_MOE_ROUTER_TICKETS || cols < 4 ||
        cols % 4 || cols > (1 << 30))
        return strata_err(err, STRATA_E_ARG, "cuda_moe_router_route: bad arguments (%d rows, %lld columns)",
                          n_tok, (long long)cols);
    const dim3 grid((unsigned)((n_expert + RR_WARPS - 1) / RR_WARPS), (unsigned)n_tok);
    CUDA_CHECK(err, pdl_launch(moe_router_route_kernel, grid, dim3(RT_THREADS), 0, stream, wr, n_expert,
                               (int)cols, x, k, logits, d_sel, d_w, d_tickets));
    return 0;
}

/* ---- grouping by expert (counting sort, one block) ---------------------- */

#define GROUP_THREADS 1024

/* sel[n] (n = n_tok * k) -> offsets[n_expert + 1], rows[n], inv[n]: rows
 * lists the flat indices t*k + j grouped by expert, increasing within an
 * expert; inv is its inverse (inv[rows[r]] = r).  One block: n is at most a
 * prefill chunk times top-k. */
__global__ void __launch_bounds__(GROUP_THREADS)
moe_group_kernel(const int32_t *sel, int n, int n_expert, int32_t *offsets, int32_t *rows,
                 int32_t *inv)
{
    __shared__ int count[MOE_MAX_EXPERTS];
    __shared__ int base[MOE_MAX_EXPERTS];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    for (int e = tid; e < n_expert; e += GROUP_THREADS)
        count[e] = 0;
    __syncthreads();
    for (int i = tid; i < n; i += GROUP_THREADS)
        atomicAdd(&count[sel[i]], 1); /* integer counts: exact in any order */
    __syncthreads();
    if (tid == 0) {
        int s = 0;
        for (int e = 0; e < n_expert; e++) {
            offsets[e] = s;
            base[e] = s;
            s += count[e];
        }
        offsets[n_expert] = s;
    }
    __syncthreads();
    /* Stable placement, a tile of GROUP_THREADS entries at a time: lanes
     * with the same expert (match_any) rank themselves by lane, and the warps
     * take turns in order, so ranks follow the index order. */
    for (int t0 = 0; t0 < n; t0 += GROUP_THREADS) {
        int i = t0 + tid;
        int e = i < n ? sel[i] : -1;
        unsigned same = __match_any_sync(0xffffffffu, e);
        int rank = __popc(same & ((1u << lane) - 1u));
        int leader = __ffs(same) - 1;
        for (int w = 0; w < GROUP_THREADS / 32; w++) {
            if (warp == w) {
                int slot = e >= 0 ? base[e] + rank : 0;
                __syncwarp();
                if (e >= 0) {
                    rows[slot] = i;
                    inv[i] = slot;
                    if (lane == leader)
                        base[e] += __popc(same);
                }
            }
            __syncthreads();
        }
    }
}

extern "C" int cuda_moe_group(const int32_t *d_sel, int n_tok, int k, int n_expert,
                              int32_t *d_offsets, int32_t *d_rows, int32_t *d_inv,
                              cudaStream_t stream, strata_error *err)
{
    if (n_tok <= 0)
        return 0;
    if (n_expert < 1 || n_expert > MOE_MAX_EXPERTS)
        return strata_err(err, STRATA_E_UNSUPPORTED, "cuda_moe_group: %d experts", n_expert);
    moe_group_kernel<<<1, GROUP_THREADS, 0, stream>>>(d_sel, n_tok * k, n_expert, d_offsets,
                                                      d_rows, d_inv);
    CUDA_CHECK_LAUNCH(err, "moe_group");
    return 0;
}

/* ---- gather and combine ------------------------------------------------- */

/* xg[r] = x[rows[r] / k] for r < n_rows: one block per output row. */
__global__ void moe_gather_kernel(const float *x, int64_t D, const int32_t *rows, int k,
                                  float *xg)
{
    int r = blockIdx.x;
    const float *src = x + (int64_t)(rows[r] / k) * D;
    float *dst = xg + (int64_t)r * D;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
        dst[i] = src[i];
}

extern "C" int cuda_moe_gather(const float *x, int n_tok, int k, int64_t D, const int32_t *d_rows,
                               float *xg, cudaStream_t stream, strata_error *err)
{
    if (n_tok <= 0)
        return 0;
    moe_gather_kernel<<<n_tok * k, 256, 0, stream>>>(x, D, d_rows, k, xg);
    CUDA_CHECK_LAUNCH(err, "moe_gather");
    return 0;
}

/* out[t][i] = sum_j w[t][j] * y[src(t, j)][i], j ascending, from 0.
 * src(t, j) = t*k + j (y in token-slot order) or, with `inv` given, the
 * expert-sorted row holding (t, j): inv[t*k + j]. */
__global__ void moe_combine_kernel(const float *y, const float *w, const int32_t *inv, int k,
                                   int64_t D, float *out)
{
    int t = blockIdx.y;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= D)
        return;
    float acc = 0.0f;
    for (int j = 0; j < k; j++) {
        int64_t r = inv ? inv[t * k + j] : (int64_t)t * k + j;
        acc = __fadd_rn(acc, __fmul_rn(w[t * k + j], y[r * D + i]));
    }
    out[(int64_t)t * D + i] = acc;
}

extern "C" int cuda_moe_combine(const float *y, const float *d_w, const int32_t *d_inv, int n_tok,
                                int k, int64_t D, float *out, cudaStream_t stream,
                                strata_error *err)
{
    if (n_tok <= 0)
        return 0;
    dim3 grid((unsigned)((D + 255) / 256), (unsigned)n_tok);
    moe_combine_kernel<<<grid, 256, 0, stream>>>(y, d_w, d_inv, k, D, out);
    CUDA_CHECK_LAUNCH(err, "moe_combine");
    return 0;
}
