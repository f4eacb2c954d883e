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
 * Layout: one warp per token for routing (n_expert <= 256: 8 logits per
 * lane); the double sum runs on one lane in index order, as the CPU's does
 * (256 additions, a few microseconds at most, once per layer). */
#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/f32_row.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/warp.cuh"
#include "model/model.h" /* MOE_MAX_USED */

#define ROUTE_WARPS 4
#define MOE_MAX_EXPERTS 256

/* One token's routing by one warp: logits r[n_expert] (read with __ldcg:
 * the fused router wrote them in this launch, from other blocks), pr a
 * warp-private n_expert floats of shared memory, s_inv one shared float. */
__device__ void route_token(const float *r, int n_expert, int k, float *pr, float *s_inv, int32_t *sel,
                            float *w, int lane)
{
    float mx = -INFINITY;
    for (int i = lane; i < n_expert; i += 32)
        mx = fmaxf(mx, __ldcg(r + i));
    mx = warp_max(mx);
    /* cpu_softmax: mx is its running max (the same value: max is exact). */
    for (int i = lane; i < n_expert; i += 32)
        pr[i] = expf(__fsub_rn(__ldcg(r + i), mx));
    __syncwarp();
    if (lane == 0) {
        double sum = 0.0;
        for (int i = 0; i < n_expert; i++)
            sum += pr[i];
        *s_inv = (float)(1.0 / sum);
    }
    __syncwarp();
    float inv = *s_inv;
    for (int i = lane; i < n_expert; i += 32)
        pr[i] = __fmul_rn(pr[i], inv);
    __syncwarp();

    /* top-k by repeated selection; chosen entries are marked -1 (every
     * probability is >= 0, so a marked one never wins again). */
    float wsel[MOE_MAX_USED];
    int isel[MOE_MAX_USED];
#pragma unroll 1
    for (int j = 0; j < k; j++) {
        float bv = -INFINITY;
        int bi = 0x7fffffff;
        for (int i = lane; i < n_expert; i += 32) {
            float v = pr[i];
            if (v > bv || (v == bv && i < bi)) {
                bv = v;
                bi = i;
            }
        }
        warp_argmax(bv, bi);
        if (lane == 0) {
            wsel[j] = bv;
            isel[j] = bi;
            pr[bi] = -1.0f;
        }
        __syncwarp();
    }
    if (lane == 0) {
        float sum = 0.0f;
        for (int j = 0; j < k; j++)
            sum = __fadd_rn(sum, wsel[j]);
        for (int j = 0; j < k; j++) {
            sel[j] = isel[j];
            w[j] = __fdiv_rn(wsel[j], sum);
        }
    }
}

__global__ void __launch_bounds__(ROUTE_WARPS * 32)
moe_route_kernel(const float *logits, int n_tok, int n_expert, int k, int32_t *sel, float *w)
{
    __shared__ float prob[ROUTE_WARPS][MOE_MAX_EXPERTS];
    __shared__ float s_inv[ROUTE_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int t = blockIdx.x * ROUTE_WARPS + warp;
    if (t >= n_tok)
        return; /* whole warps leave: no block-wide barrier below */
    route_token(logits + (int64_t)t * n_expert, n_expert, k, prob[warp], &s_inv[warp], sel + (int64_t)t * k,
                w + (int64_t)t * k, lane);
}

extern "C" int cuda_moe_route(const float *logits, int n_tok, int n_expert, int k, int32_t *d_sel,
                              float *d_w, cudaStream_t stream, strata_error *err)
{
    if (n_tok <= 0)
        return 0;
    if (n_expert < 1 || n_expert > MOE_MAX_EXPERTS || k < 1 || k > n_expert || k > MOE_MAX_USED)
        return strata_err(err, STRATA_E_UNSUPPORTED,
                          "cuda_moe_route: %d experts, top-%d (limits %d, %d)", n_expert, k,
                          MOE_MAX_EXPERTS, MOE_MAX_USED);
    int blocks = (n_tok + ROUTE_WARPS - 1) / ROUTE_WARPS;
    moe_route_kernel<<<blocks, ROUTE_WARPS * 32, 0, stream>>>(logits, n_tok, n_expert, k, d_sel,
                                                              d_w);
    CUDA_CHECK_LAUNCH(err, "moe_route");
    return 0;
}

/* ---- the router's product and the routing in one launch ------------------
 * Decode rows with an F32 router (llama.cpp's quantizer and mkmodel keep it
 * F32): the F32 weight kernel's grid (a warp per router row, 8 per block;
 * blockIdx.y a token) computes each logit with f32_row_dot, exactly as
 * cuda_matvec would, into `logits`; the last block to finish (a ticket: an
 * integer count, which orders nothing in any sum) routes every token with
 * route_token, exactly as cuda_moe_route, and puts the ticket back to 0.
 * So the logits, choices and weights are the bits of the two launches. */
#define RR_WARPS 8

__global__ void __launch_bounds__(RR_WARPS * 32)
moe_router_route_kernel(const float *wr, int n_expert, int cols, const float *x, int n_tok, int k,
                        float *logits, int32_t *sel, float *w, unsigned *ticket)
{
    __shared__ float prob[RR_WARPS][MOE_MAX_EXPERTS];
    __shared__ float s_inv[RR_WARPS];
    __shared__ int last;
    pdl_wait();    /* launched programmatically (pdl.cuh): wait first */
    pdl_trigger(); /* then let the next kernel launch */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int row = blockIdx.x * RR_WARPS + warp, c = blockIdx.y;
    if (row < n_expert) { /* whole warps: f32_row_dot's butterfly needs every lane */
        const float v = f32_row_dot(wr + (size_t)row * cols, x + (size_t)c * cols, nullptr, cols, lane);
        if (lane == 0)
            logits[(size_t)c * n_expert + row] = v;
    }
    __threadfence(); /* each writer's logits before the block's ticket */
    __syncthreads();
    if (threadIdx.x == 0)
        last = atomicAdd(ticket, 1u) == gridDim.x * gridDim.y - 1;
    __syncthreads();
    if (!last)
        return;
    __threadfence(); /* every block's logits after the last ticket */
    for (int t = warp; t < n_tok; t += RR_WARPS)
        route_token(logits + (int64_t)t * n_expert, n_expert, k, prob[warp], &s_inv[warp], sel + (int64_t)t * k,
                    w + (int64_t)t * k, lane);
    if (threadIdx.x == 0)
        *ticket = 0; /* ready for the next launch (the stream orders them) */
}

extern "C" int cuda_moe_router_route(const float *wr, int n_expert, int64_t cols, const float *x, int n_tok,
                                     int k, float *logits, int32_t *d_sel, float *d_w, unsigned *d_ticket,
                                     cudaStream_t stream, strata_error *err)
{
    if (n_tok <= 0)
        return 0;
    if (n_expert < 1 || n_expert > MOE_MAX_EXPERTS || k < 1 || k > n_expert || k > MOE_MAX_USED)
        return strata_err(err, STRATA_E_UNSUPPORTED,
                          "cuda_moe_router_route: %d experts, top-%d (limits %d, %d)", n_expert, k,
                          MOE_MAX_EXPERTS, MOE_MAX_USED);
    if (!wr || !x || !logits || !d_sel || !d_w || !d_ticket || n_tok > 65535 || cols < 4 || cols % 4 ||
        cols > (1 << 30))
        return strata_err(err, STRATA_E_ARG, "cuda_moe_router_route: bad arguments (%d rows, %lld columns)",
                          n_tok, (long long)cols);
    const dim3 grid((unsigned)((n_expert + RR_WARPS - 1) / RR_WARPS), (unsigned)n_tok);
    CUDA_CHECK(err, pdl_launch(moe_router_route_kernel, grid, dim3(RR_WARPS * 32), 0, stream, wr, n_expert,
                               (int)cols, x, n_tok, k, logits, d_sel, d_w, d_ticket));
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
