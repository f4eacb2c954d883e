/* mvchain.cu: the persistent decode experiment — a chain of one-token weight
 * matvecs (mv_chain_op, kernels/ops.h) as ONE launch (doc/cuda-kernels.md,
 * "The persistent kernel").
 *
 * Why.  A decode step at batch 1 is ~10 launches a layer; a 29 MB matvec
 * reaches 29 % of the card's read bandwidth within its own launch (its ramp
 * up and its tail are a large part of 16 us), where a 205 MB one reaches 49
 * %.  Here every CTA (one per SM, 16 warps, the decode kernel's) walks a
 * list of work items in order — (step, row-block, k-segment), step by step,
 * the cuts of the matvec's own plan (wt::plan_make) — and each warp keeps
 * its ring of tile copies (cp.async) going across items: the copies of the
 * next item's tiles, of the next step's matrix too, are issued while the
 * current item's tiles are decoded, and before the next item's input is
 * known to be ready.  Items are dealt round-robin (item j to CTA j mod G):
 * with every CTA resident that is what a ticket per item would hand out
 * when the items cost the same, and a warp knows its future items without
 * asking anyone, which the look-ahead needs.  Two optional look-aheads
 * into L2 go further (cuda_mvchain_make's ahead and l2_tiles): a warp's
 * tiles of the item N items ahead, or a second cursor N tiles past the
 * ring's; the shared memory holds one token's activations, so the rings
 * may be deeper than the decode kernel's (depth).  On the H200 the chain
 * took 6 % less time than the separate kernels (doc/BENCHMARKS.md).
 *
 * Dependencies.  Each row-block of a step's output has a flag, set (release)
 * once its rows are written; an item first waits (acquire) for the flags of
 * the row-blocks its segment of the input covers (and the SwiGLU's up half,
 * and the residual's rows), so a step starts on the first rows of the step
 * before while that one is still finishing.  The smallest unfinished item
 * always has its inputs done (they come from earlier items) and its CTA at
 * it (a CTA's earlier items are smaller), so the chain cannot deadlock as
 * long as every CTA is resident: the grid is what fits on the card at once.
 * The last CTA to finish puts the flags back to 0 for the next launch.
 *
 * Bits.  Each item runs what matvec_kernel runs for its (row-block,
 * segment): the same quant_block of the same segment, the same ring read
 * and tile decoders (the one-token variants), the same fold (mv_fold, in
 * segment order), so every step's y is bitwise cuda_matvec's
 * (cuda_matvec_swiglu's with xu; then cuda_add's with res): suite
 * cuda_mvchain checks it, and each step against cpu_mv_chain. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/mvfold.cuh"
#include "kernels/cuda/wtile.cuh"

using namespace wt;

/* One step on the card. */
struct ChOp {
    Wsrc ws;
    Plan p;
    const float *x, *xu, *res;
    float *y;
    int nrb;
    int flag0;     /* its row-blocks' flags and fold tickets: flag0 + rb */
    int dflag[3];  /* x, xu, res: flag0 of the step that writes them, -1: none in the chain */
    int doff[3];   /* and the row of that step's y where they start */
    long long part0; /* its partial sums (nseg > 1): nrb * nseg * BLOCK_ROWS floats */
};

struct ChArgs {
    const ChOp *ops;
    const uint32_t *items; /* step << 16 | row-block << 3 | segment */
    int n_items;
    unsigned *flags, *tick, *done;
    int n_flags;
    float *part;
    MvLayout l;
    int ahead;    /* L2 prefetch of the warp's tiles of the item this many items ahead (0: none) */
    int l2_tiles; /* L2 prefetch of the warp's tile this many tiles past its ring's copies (0: none) */
};

struct ChItem {
    int op, rb, seg;
};
__device__ __forceinline__ ChItem ch_item(uint32_t v) { return ChItem{(int)(v >> 16), (int)((v >> 3) & 0x1fff), (int)(v & 7)}; }

__device__ __forceinline__ unsigned ld_acquire(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release(unsigned *p, unsigned v)
{
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/* A warp's issue cursor: the next tile whose copy it will start, over this
 * CTA's items in order (j, j + G, ...), skipping items without rows for
 * this warp. */
struct ChCursor {
    int j;
    Wsrc ws;
    int R, t, t1;
};

__device__ __forceinline__ void ch_seek(ChCursor &c, const ChArgs &a, int warp)
{
    for (; c.j < a.n_items; c.j += gridDim.x) {
        const ChItem it = ch_item(__ldg(a.items + c.j));
        const ChOp *o = a.ops + it.op;
        c.R = it.rb * MV_WARPS + warp;
        const int mt = __ldg(&o->p.mt), tps = __ldg(&o->p.tps), ntk = __ldg(&o->p.ntk);
        if (c.R >= mt)
            continue;
        c.ws = Wsrc{(const uint8_t *)__ldg((const unsigned long long *)&o->ws.w), 0, 0, ntk};
        c.t = it.seg * tps;
        c.t1 = min(ntk, c.t + tps);
        if (c.t < c.t1)
            return;
    }
}

/* The cursor to its next tile (past the end: stays there). */
__device__ __forceinline__ void ch_next(ChCursor &c, const ChArgs &a, int warp)
{
    if (c.j < a.n_items && ++c.t == c.t1) {
        c.j += gridDim.x;
        ch_seek(c, a, warp);
    }
}

/* Lane 0 asks L2 for the cursor's tile (one bulk prefetch), then moves it
 * on: the second look-ahead, l2_tiles past the ring's copies, crossing
 * items and steps as the ring's cursor does. */
template <int TYPE> __device__ __forceinline__ void ch_pf_tile(ChCursor &c, const ChArgs &a, int warp, int lane)
{
    constexpr int TB = geo(TYPE).tile;
    if (lane == 0 && c.j < a.n_items)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(c.ws.w + ((size_t)c.R * c.ws.ntk + c.t) * TB),
                     "r"((unsigned)TB)
                     : "memory");
    ch_next(c, a, warp);
}

/* One commit group: the cursor's tile into slot (nothing past the last
 * item), so group i is always the warp's i-th tile. */
template <int TYPE> __device__ __forceinline__ void ch_issue(ChCursor &c, const ChArgs &a, uint32_t slot, int warp, int lane)
{
    if (c.j < a.n_items)
        ring_issue<TYPE>(slot, c.ws, c.R, c.t, lane);
    ch_next(c, a, warp);
    cp_commit();
}

/* Lane 0 asks L2 for the warp's tiles of this CTA's item j (one
 * contiguous range: a warp's tiles of an item are k-tiles t0..t1 of one
 * 16-row tile) with one bulk prefetch, so DRAM keeps streaming while the
 * CTA waits for an item's input or folds one, and the ring's copies then
 * come from L2. */
template <int TYPE> __device__ __forceinline__ void ch_prefetch(const ChArgs &a, int j, int warp, int lane)
{
    if (lane || j >= a.n_items)
        return;
    const ChItem it = ch_item(__ldg(a.items + j));
    const ChOp *o = a.ops + it.op;
    const int R = it.rb * MV_WARPS + warp, mt = __ldg(&o->p.mt), tps = __ldg(&o->p.tps), ntk = __ldg(&o->p.ntk);
    const int t0 = it.seg * tps, t1 = min(ntk, t0 + tps);
    if (R >= mt || t0 >= t1)
        return;
    constexpr int TB = geo(TYPE).tile;
    const uint8_t *w = (const uint8_t *)__ldg((const unsigned long long *)&o->ws.w) + ((size_t)R * ntk + t0) * TB;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(w), "r"((unsigned)((t1 - t0) * TB)) : "memory");
}

/* Wait until the rows an item reads are written: x's and xu's rows of its
 * segment [kb, kb + klen), res's rows of its row-block.  One thread per
 * flag (at most ~2 x 17 + 1), then the barrier. */
__device__ __forceinline__ void ch_wait(const ChArgs &a, const ChOp &o, int rb, int kb, int klen)
{
    int i = threadIdx.x;
#pragma unroll
    for (int d = 0; d < 3; ++d) {
        if (o.dflag[d] < 0)
            continue;
        const int lo = d < 2 ? kb : rb * BLOCK_ROWS;
        const int hi = d < 2 ? min(kb + klen, o.ws.cols) : min((rb + 1) * BLOCK_ROWS, o.ws.rows);
        const int f0 = (o.doff[d] + lo) / BLOCK_ROWS, f1 = (o.doff[d] + hi - 1) / BLOCK_ROWS;
        if (i >= 0 && i <= f1 - f0)
            while (ld_acquire(a.flags + o.dflag[d] + f0 + i) == 0u)
                ;
        i -= f1 - f0 + 1;
    }
    __syncthreads();
}

/* D: the ring's depth in tiles (the decode kernel's Ring<TYPE>::D, or
 * deeper: cuda_mvchain_make's depth) */
template <int TYPE, int D> __global__ void __launch_bounds__(MV_THREADS, 1) mvchain_kernel(const ChArgs a)
{
    extern __shared__ __align__(16) uint8_t smem[];
    constexpr Geo gm = geo(TYPE);
    constexpr int SLOT = Ring<TYPE>::SLOT;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    uint8_t *ring = smem + mv_ring_off(a.l, warp);
    const uint32_t rs = (uint32_t)__cvta_generic_to_shared(ring);
    const uint32_t tb = (uint32_t)__cvta_generic_to_shared(smem + a.l.off_tab);

    /* the first tiles are on their way while the tables are built */
    ChCursor ic;
    ic.j = blockIdx.x;
    ch_seek(ic, a, warp);
#pragma unroll
    for (int i = 0; i < D - 1; ++i)
        ch_issue<TYPE>(ic, a, rs + i * SLOT, warp, lane);
    if (TYPE == GGML_TYPE_IQ3_XXS) {
        iq3_tables_init_dec(smem + a.l.off_tab);
        if (tb & 0xffffu) /* not 64 KiB aligned (MvLayout): fail the launch, never wrong numbers */
            __trap();
    }
    int8_t *xq = (int8_t *)(smem + a.l.off_xq);
    float *dx = (float *)(smem + a.l.off_dx);
    int *xs = (int *)(smem + a.l.off_xs);
    const Act act{xq, dx, xs, nullptr, 0, MV_COLS}; /* one token: stride 0 */

    for (int k = 1; k < a.ahead; ++k) /* the items before the first one the loop asks for */
        ch_prefetch<TYPE>(a, blockIdx.x + k * gridDim.x, warp, lane);
    ChCursor pc = ic; /* the L2 look-ahead: l2_tiles tiles past the ring's */
    for (int k = 0; k < a.l2_tiles; ++k)
        ch_pf_tile<TYPE>(pc, a, warp, lane);
    int slot = 0; /* the ring slot of the warp's next tile */
    for (int j = blockIdx.x; j < a.n_items; j += gridDim.x) {
        if (a.ahead)
            ch_prefetch<TYPE>(a, j + a.ahead * gridDim.x, warp, lane);
        const ChItem it = ch_item(__ldg(a.items + j));
        const ChOp o = a.ops[it.op];
        const int t0 = it.seg * o.p.tps, t1 = min(o.p.ntk, t0 + o.p.tps);
        const int kb = t0 * gm.kt, klen = (t1 - t0) * gm.kt;
        ch_wait(a, o, it.rb, kb, klen);
        /* the segment's activations, as matvec_kernel quantizes them */
        const int nb = klen / gm.xb;
        for (int b = warp; b < nb; b += MV_WARPS) {
            const int k = kb + b * gm.xb;
            quant_block<gm.xb>(o.x + k, min(gm.xb, o.ws.cols - k), xq + b * gm.xb, dx + b * MV_COLS,
                               xs + b * MV_COLS, lane, o.xu ? o.xu + k : nullptr);
        }
        __syncthreads();
        const int R = it.rb * MV_WARPS + warp;
        float acc[1][4] = {{0.f, 0.f, 0.f, 0.f}};
        if (R < o.p.mt)
            for (int tt = t0; tt < t1; ++tt) {
                /* the copy D - 1 tiles ahead: maybe the next item's, or the next step's */
                ch_issue<TYPE>(ic, a, rs + (slot == 0 ? D - 1 : slot - 1) * SLOT, warp, lane);
                if (a.l2_tiles)
                    ch_pf_tile<TYPE>(pc, a, warp, lane);
                cp_wait<D - 1>();
                Raw<TYPE> cur;
                ring_read<TYPE>(cur, ring + slot * SLOT, lane);
                const int k0 = (tt - t0) * gm.kt;
                if constexpr (TYPE == GGML_TYPE_IQ3_XXS)
                    tile_mma_iq3<1, false, true, true>(cur, act, k0, k0 / gm.xb, acc, tb, lane);
                else
                    tile_mma<1, false, true>(cur, act, k0, k0 / gm.xb, acc, smem + a.l.off_tab, lane);
                slot = slot + 1 == D ? 0 : slot + 1;
            }
        bool wrote = true;
        if (o.p.nseg == 1) {
            if (R < o.p.mt && t == 0)
#pragma unroll
                for (int i = 0; i < 4; i += 2) {
                    const int row = R * 16 + g + 8 * (i >> 1);
                    if (row < o.ws.rows) {
                        const float v = 0.f + acc[0][i]; /* as matvec_kernel stores it */
                        o.y[row] = o.res ? __fadd_rn(v, __ldcg(o.res + row)) : v;
                    }
                }
            __syncthreads();
        } else {
            wrote = mv_fold(a.tick + o.flag0, a.part + o.part0, o.y, (size_t)it.rb, it.rb, 1, o.ws.rows, o.p.nseg,
                            it.seg, acc[0], warp, lane, o.res);
            if (wrote)
                __syncthreads(); /* the sums are stored before the flag */
        }
        /* (every warp is past its tiles here, so the next item may restage
         * the activations) */
        if (wrote && threadIdx.x == 0) {
            __threadfence();
            st_release(a.flags + o.flag0 + it.rb, 1u);
        }
    }
    cp_wait<0>();
    /* the last CTA out puts the flags back for the next launch */
    /* (no static shared memory: it would move the 64 KiB-aligned tables) */
    __syncthreads();
    bool last = false;
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(a.done, 1u) == gridDim.x - 1;
        if (last)
            __threadfence();
    }
    if (__syncthreads_or(last)) {
        for (int i = threadIdx.x; i < a.n_flags; i += MV_THREADS)
            a.flags[i] = 0u;
        if (threadIdx.x == 0)
            *a.done = 0u;
    }
}

/* ---- the host side ---------------------------------------------------- */

struct cuda_mvchain {
    int type, depth, grid;
    ChArgs a;
    void *dev; /* one allocation: ops, items, flags, tickets, done, partial sums */
    long long items, bytes_w;
};

/* The latest step before `before` whose y holds [p, p + n) floats: its
 * index and the row p starts at; -1 when none writes p; -2 when one writes
 * part of the range only. */
static int ch_producer(const mv_chain_op *ops, int before, const float *p, int64_t n, int *row)
{
    for (int k = before - 1; k >= 0; --k) {
        const float *y = ops[k].y;
        if (p + n <= y || p >= y + ops[k].rows)
            continue;
        if (p < y || p + n > y + ops[k].rows)
            return -2;
        *row = (int)(p - y);
        return k;
    }
    return -1;
}

static bool ch_overlap(const float *a, int64_t na, const float *b, int64_t nb)
{
    return a && b && a < b + nb && b < a + na;
}

/* The kernel for a type and ring depth; NULL for a pair not built. */
static const void *ch_kernel(int type, int depth)
{
    if (type == GGML_TYPE_IQ3_XXS)
        return depth == 4 ? (const void *)mvchain_kernel<GGML_TYPE_IQ3_XXS, 4>
                          : depth == 5 ? (const void *)mvchain_kernel<GGML_TYPE_IQ3_XXS, 5> : NULL;
    if (type == GGML_TYPE_Q2_0)
        return depth == 12 ? (const void *)mvchain_kernel<GGML_TYPE_Q2_0, 12>
                           : depth == 16 ? (const void *)mvchain_kernel<GGML_TYPE_Q2_0, 16> : NULL;
    return NULL;
}

extern "C" int cuda_mvchain_make(const mv_chain_op *ops, int n_ops, int depth, int ahead, int l2_tiles,
                                 cuda_mvchain **out, strata_error *err)
{
    *out = NULL;
    if (!ops || n_ops < 1 || n_ops > 65535 || ahead < 0 || ahead > 8 || l2_tiles < 0 || l2_tiles > 64)
        return strata_err(err, STRATA_E_ARG,
                          "cuda_mvchain: %d steps (1..65535), prefetch %d items (0..8) or %d tiles (0..64) ahead", n_ops,
                          ahead, l2_tiles);
    const int type = ops[0].type;
    if (type != GGML_TYPE_IQ3_XXS && type != GGML_TYPE_Q2_0)
        return strata_err(err, STRATA_E_UNSUPPORTED, "cuda_mvchain: %s (IQ3_XXS and Q2_0 only)", type_name(type));
    if (!depth)
        depth = type == GGML_TYPE_IQ3_XXS ? Ring<GGML_TYPE_IQ3_XXS>::D : Ring<GGML_TYPE_Q2_0>::D;
    if (!ch_kernel(type, depth))
        return strata_err(err, STRATA_E_UNSUPPORTED, "cuda_mvchain: ring depth %d for %s (IQ3_XXS 4, 5; Q2_0 12, 16)",
                          depth, type_name(type));
    ChOp *h = (ChOp *)calloc((size_t)n_ops, sizeof *h);
    if (!h)
        return strata_err(err, STRATA_E_NOMEM, "cuda_mvchain: %d steps", n_ops);
    long long items = 0, flags = 0, parts = 0, bytes_w = 0;
    int tps_max = 1;
    int rc = 0;
    for (int i = 0; i < n_ops && !rc; ++i) {
        const mv_chain_op *o = &ops[i];
        Plan p;
        if (o->type != type || !o->w || !o->x || !o->y || plan_make(type, o->rows, o->cols, &p)) {
            rc = strata_err(err, STRATA_E_ARG, "cuda_mvchain: step %d (%s %lld x %lld): one type, pointers set, %d columns at most",
                            i, type_name(o->type), (long long)o->rows, (long long)o->cols, MAX_SEGS * SEG_MAX_K);
            break;
        }
        /* no step may write what an earlier one reads or writes: the items
         * of different steps run at once */
        for (int k = 0; k <= i && !rc; ++k) {
            const mv_chain_op *e = &ops[k];
            if ((k < i && ch_overlap(o->y, o->rows, e->y, e->rows)) || ch_overlap(o->y, o->rows, e->x, e->cols) ||
                ch_overlap(o->y, o->rows, e->xu, e->cols) || ch_overlap(o->y, o->rows, e->res, e->rows))
                rc = strata_err(err, STRATA_E_ARG, "cuda_mvchain: step %d writes what step %d reads or writes", i, k);
        }
        if (rc)
            break;
        ChOp &c = h[i];
        c.ws = Wsrc{(const uint8_t *)o->w, (int)o->rows, (int)o->cols, p.ntk};
        c.p = p;
        c.x = o->x;
        c.xu = o->xu;
        c.res = o->res;
        c.y = o->y;
        c.nrb = (p.mt + MV_WARPS - 1) / MV_WARPS;
        if (c.nrb >= 8192) {
            rc = strata_err(err, STRATA_E_LIMIT, "cuda_mvchain: step %d: %lld rows", i, (long long)o->rows);
            break;
        }
        c.flag0 = (int)flags;
        c.part0 = p.nseg > 1 ? parts : 0;
        const float *src[3] = {o->x, o->xu, o->res};
        const int64_t len[3] = {o->cols, o->cols, o->rows};
        for (int d = 0; d < 3; ++d) {
            int row = 0;
            const int k = src[d] ? ch_producer(ops, i, src[d], len[d], &row) : -1;
            if (k == -2) {
                rc = strata_err(err, STRATA_E_ARG, "cuda_mvchain: step %d reads across an earlier step's output", i);
                break;
            }
            c.dflag[d] = k >= 0 ? h[k].flag0 : -1;
            c.doff[d] = row;
        }
        items += (long long)c.nrb * p.nseg;
        flags += c.nrb;
        if (p.nseg > 1)
            parts += (long long)c.nrb * p.nseg * BLOCK_ROWS;
        if (p.tps > tps_max)
            tps_max = p.tps;
        bytes_w += (long long)type_row_bytes(type, o->cols) * o->rows;
    }
    if (!rc && items > (1ll << 30))
        rc = strata_err(err, STRATA_E_LIMIT, "cuda_mvchain: %lld work items", items);
    cuda_mvchain *c = NULL;
    uint32_t *hi = NULL;
    if (!rc) {
        c = (cuda_mvchain *)calloc(1, sizeof *c);
        hi = (uint32_t *)malloc((size_t)items * sizeof *hi);
        if (!c || !hi)
            rc = strata_err(err, STRATA_E_NOMEM, "cuda_mvchain: %lld work items", items);
    }
    if (!rc) { /* the work list: step by step, row-block by row-block, segment by segment */
        long long n = 0;
        for (int i = 0; i < n_ops; ++i)
            for (int rb = 0; rb < h[i].nrb; ++rb)
                for (int s = 0; s < h[i].p.nseg; ++s)
                    hi[n++] = (uint32_t)i << 16 | (uint32_t)rb << 3 | (uint32_t)s;
        c->type = type;
        c->depth = depth;
        c->items = items;
        c->bytes_w = bytes_w;
        Plan pm = h[0].p; /* the layout holds the longest segment */
        pm.tps = tps_max;
        int lo = 0;
        rc = mv_smem_lo(&lo, err);
        const int slot = type == GGML_TYPE_IQ3_XXS ? Ring<GGML_TYPE_IQ3_XXS>::SLOT : Ring<GGML_TYPE_Q2_0>::SLOT;
        c->a.l = mv_layout(type, pm, lo, slot * depth, 1); /* one token's activations */
    }
    size_t o_ops = 0, o_items = 0, o_flags = 0, o_tick = 0, o_done = 0, o_part = 0, total = 0;
    if (!rc) {
        o_items = ((size_t)n_ops * sizeof(ChOp) + 255) / 256 * 256;
        o_flags = o_items + ((size_t)items * 4 + 255) / 256 * 256;
        o_tick = o_flags + ((size_t)flags * 4 + 255) / 256 * 256;
        o_done = o_tick + ((size_t)flags * 4 + 255) / 256 * 256;
        o_part = o_done + 256;
        total = o_part + (size_t)parts * 4;
        cudaError_t e = cudaMalloc(&c->dev, total);
        if (e != cudaSuccess)
            rc = strata_cuda_fail(err, e, "cudaMalloc", __FILE__, __LINE__);
    }
    if (!rc) {
        uint8_t *d = (uint8_t *)c->dev;
        cudaError_t e = cudaMemcpy(d + o_ops, h, (size_t)n_ops * sizeof(ChOp), cudaMemcpyHostToDevice);
        if (e == cudaSuccess)
            e = cudaMemcpy(d + o_items, hi, (size_t)items * 4, cudaMemcpyHostToDevice);
        if (e == cudaSuccess) /* flags, tickets and the exit count start at 0 */
            e = cudaMemset(d + o_flags, 0, o_part - o_flags);
        if (e == cudaSuccess)
            e = cudaDeviceSynchronize();
        if (e != cudaSuccess)
            rc = strata_cuda_fail(err, e, "cudaMemcpy", __FILE__, __LINE__);
        c->a.ops = (const ChOp *)(d + o_ops);
        c->a.items = (const uint32_t *)(d + o_items);
        c->a.n_items = (int)items;
        c->a.flags = (unsigned *)(d + o_flags);
        c->a.tick = (unsigned *)(d + o_tick);
        c->a.done = (unsigned *)(d + o_done);
        c->a.n_flags = (int)flags;
        c->a.part = (float *)(d + o_part);
        c->a.ahead = ahead;
        c->a.l2_tiles = l2_tiles;
    }
    if (!rc)
        rc = launch_capacity(ch_kernel(type, depth), MV_THREADS, (size_t)c->a.l.bytes, 1, &c->grid, err);
    free(h);
    free(hi);
    if (rc) {
        cuda_mvchain_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

extern "C" int cuda_mvchain_run(const cuda_mvchain *c, cudaStream_t stream, strata_error *err)
{
    if (!c)
        return strata_err(err, STRATA_E_ARG, "cuda_mvchain_run: no chain");
    /* a plain launch, not a programmatic one: every CTA must be resident for
     * the items' waits to end, so none may wait for a predecessor's SMs */
    void (*k)(const ChArgs) = (void (*)(const ChArgs))ch_kernel(c->type, c->depth);
    k<<<c->grid, MV_THREADS, (size_t)c->a.l.bytes, stream>>>(c->a);
    CUDA_CHECK_LAUNCH(err, "mvchain_kernel");
    return 0;
}

extern "C" void cuda_mvchain_info(const cuda_mvchain *c, int *grid, long long *items, long long *weight_bytes)
{
    *grid = c ? c->grid : 0;
    *items = c ? c->items : 0;
    *weight_bytes = c ? c->bytes_w : 0;
}

extern "C" void cuda_mvchain_free(cuda_mvchain *c)
{
    if (!c)
        return;
    if (c->dev)
        cudaFree(c->dev);
    free(c);
}
