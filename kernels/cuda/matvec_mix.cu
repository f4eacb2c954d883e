/* matvec_mix.cu: a mixed stack's product (cuda_ops.h, cuda_matmul_mix):
 * matrices of different block-tile types that read the same input — the
 * llama.cpp recipes' attention projections (IQ3_XXS mix: q and k IQ2_S, v
 * Q4_K) — as ONE decode launch instead of one per part.
 *
 * Why: at batch 1 an 8B layer's q, k and v are 4096 + 1024 + 1024 rows;
 * three launches cost ~3 x 10 us where the stacked 6144-row matrix streams
 * in ~13 us (doc/cuda-kernels.md, "Mixed stacks").  The block-tile types
 * (wblocks.cuh) share everything but the decoder: the 256-column k-tile,
 * fp16 activations in shared memory, the half2 mma and its accumulation
 * order.  So the decode kernel here is matvec.cu's for block tiles, except
 * that a warp looks up which part its 16-row m-tile is in and runs that
 * part's decoder (a switch outside the tile loop: each m-tile is one type).
 *
 * Invariance: the segment plan is the stacked shape's (wt::plan_make of
 * R x cols: it depends on the type only through the k-tile, 256 for all
 * block types), in decode and in prefill (matmul.cu, wt::mm_mix: one launch
 * per part with that plan), so a row's sum is ((0 + s0) + s1) + ... over
 * the same segments whatever n, path or chunking computed it. */
#include <string.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/mvfold.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/wtile.cuh"

using namespace wt;

namespace wt {
int mm_mix(const cuda_mix *m, int64_t rows_total, int64_t cols, const float *x, int64_t n, float *y, void *scratch,
           size_t scratch_bytes, cudaStream_t stream, strata_error *err);
}

struct MixArgs {
    const uint8_t *w[CUDA_MIX_MAX];
    int type[CUDA_MIX_MAX];
    int prows[CUDA_MIX_MAX];
    int mt0[CUDA_MIX_MAX + 1]; /* part i owns m-tiles [mt0[i], mt0[i + 1]) */
    int goff[CUDA_MIX_MAX];    /* part i's grid copy in shared memory (wrows.cuh, Grid) */
    int ginit[CUDA_MIX_MAX];   /* 1: part i copies it (the first part of its type) */
    int nparts;
    Plan p;                    /* the stacked shape's */
    MvLayout l;
    unsigned *tick;            /* the fold (nseg > 1): tickets, partial sums */
    float *part;
    const float *x; /* [n][cols] */
    float *y;       /* [n][rows] */
    int n, nrb, rows, cols;
};

/* The part of m-tile R (R < p.mt), its source and its grid. */
__device__ __forceinline__ int mix_part(const MixArgs &a, int R, Wsrc *ws, int *Rl, int *goff)
{
    int i = 0;
#pragma unroll
    for (int k = 1; k < CUDA_MIX_MAX; ++k)
        if (k < a.nparts && R >= a.mt0[k])
            i = k;
    *ws = Wsrc{a.w[i], a.prows[i], a.cols, a.p.ntk};
    *Rl = R - a.mt0[i];
    *goff = a.goff[i];
    return a.type[i];
}

/* the warp's first tiles into its ring */
__device__ __forceinline__ void mix_prime(int type, const Wsrc &ws, int R, int t0, int t1, uint8_t *ring, int lane)
{
    switch (type) {
#define MIX_CASE(T)                                                                                      \
    case T: ring_prime<T>(ws, R, t0, t1, ring, lane); break;
        WB_FOR_EACH(MIX_CASE)
#undef MIX_CASE
    default: break;
    }
}

__device__ __forceinline__ void mix_grid(int type, uint8_t *dst)
{
    switch (type) {
#define MIX_CASE(T)                                                                                      \
    case T: wb::grid_init<T>(dst); break;
        WB_FOR_EACH(MIX_CASE)
#undef MIX_CASE
    default: break;
    }
}

__device__ __forceinline__ void mix_tiles(int type, const Wsrc &ws, int R, int t0, int t1, const Act &act,
                                          float (&acc)[1][4], const uint8_t *grid, uint8_t *ring, int lane,
                                          bool primed)
{
    switch (type) {
#define MIX_CASE(T)                                                                                      \
    case T: run_tiles_ring<T>(ws, R, t0, t1, t0, act, acc, grid, ring, lane, primed); break;
        WB_FOR_EACH(MIX_CASE)
#undef MIX_CASE
    default: break;
    }
}

__global__ void __launch_bounds__(MV_THREADS, 1) matvec_mix_kernel(const MixArgs a)
{
    extern __shared__ __align__(16) uint8_t smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int seg = blockIdx.y;
    pdl_trigger();
    const int t0 = seg * a.p.tps, t1 = min(a.p.ntk, t0 + a.p.tps);
    const int kb = t0 * 256, klen = (t1 - t0) * 256;
    const int cols = a.cols, rows = a.rows, n = a.n;
    uint8_t *ring = smem + a.l.off_ring + warp * a.l.ring_warp;

    /* the first row-block's first tiles are copied while the activations
     * are staged (they depend on the weights only) */
    const int R0 = blockIdx.x * MV_WARPS + warp;
    if (blockIdx.x < a.nrb && R0 < a.p.mt) {
        Wsrc ws;
        int Rl, go;
        const int type = mix_part(a, R0, &ws, &Rl, &go);
        mix_prime(type, ws, Rl, t0, t1, ring, lane);
    }
    for (int i = 0; i < a.nparts; ++i)
        if (a.ginit[i])
            mix_grid(a.type[i], smem + a.goff[i]);
    pdl_wait();
    /* the activations as fp16, as matvec.cu's F16 path stages them: the n
     * tokens only (the other mma columns read whatever is there and are
     * never stored), and at n = 1 every lane's B fragment reads token 0's
     * row (token stride 0: fewer shared-memory wavefronts a load) */
    __half *xh = (__half *)(smem + a.l.off_xq);
    stage_h16(a.x, nullptr, cols, kb, klen, cols, n, xh, a.l.xstride);
    const Act act{nullptr, nullptr, nullptr, xh, n == 1 ? 0 : a.l.xstride, 0};
    __syncthreads();

    int it = 0;
    for (int rb = blockIdx.x; rb < a.nrb; rb += gridDim.x, ++it) {
        const int R = rb * MV_WARPS + warp;
        float acc[1][4] = {{0.f, 0.f, 0.f, 0.f}};
        if (R < a.p.mt) {
            Wsrc ws;
            int Rl, go;
            const int type = mix_part(a, R, &ws, &Rl, &go);
            mix_tiles(type, ws, Rl, t0, t1, act, acc, smem + go, ring, lane, it == 0);
        }
        if (a.p.nseg == 1) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int row = R * 16 + g + 8 * (i >> 1), col = 2 * t + (i & 1);
                if (R < a.p.mt && row < rows && col < n)
                    a.y[(size_t)col * rows + row] = 0.f + acc[0][i]; /* = ((0 + s0)) as in prefill */
            }
        } else {
            /* matvec.cu's fold: segments added in order by the last block */
            mv_fold(a.tick, a.part, a.y, (size_t)rb, rb, n, rows, a.p.nseg, blockIdx.y, acc[0], warp, lane);
        }
    }
}

/* Shared memory of the mix kernel: the grids of the parts' types (each
 * once), then matvec.cu's block-tile layout with a ring per warp as large
 * as the largest part's.  Returns the bytes. */
static int mix_layout(const int *types, int n, const Plan &p, MvLayout *l, int *goff, int *ginit)
{
    int g = 0, ring = 0;
    for (int i = 0; i < n; i++) {
        int first = i; /* the first part of this type: it copies the grid */
        for (int j = i - 1; j >= 0; j--)
            if (types[j] == types[i])
                first = j;
        ginit[i] = first == i && wb::grid_bytes(types[i]) > 0;
        goff[i] = first == i ? g : goff[first];
        if (ginit[i])
            g += wb::grid_bytes(types[i]);
        const int rbw = ring_bytes_per_warp(types[i]);
        ring = rbw > ring ? rbw : ring;
    }
    /* matvec.cu's layout for a type without a grid (block tiles all alike),
     * moved up past the grids */
    *l = mv_layout(GGML_TYPE_Q4_K, p, 0);
    l->off_xq += g;
    l->off_dx += g;
    l->off_xs += g;
    l->off_ring += g;
    l->off_ring2 = l->off_ring;
    l->ring_split = MV_WARPS;
    l->ring_warp = ring;
    l->bytes = l->off_ring + MV_WARPS * ring;
    return l->bytes;
}

/* The opt-in shared memory of a block on sm_90 (227 KiB): a constant, so
 * what stacks does not depend on the card. */
#define MIX_SMEM_MAX 232448

/* The checks of cuda_mix_supported, with a message. */
static int mix_check(const int *types, const int64_t *rows, int n, int64_t cols, int64_t *total, strata_error *err)
{
    if (n < 2 || n > CUDA_MIX_MAX || cols < 1)
        return strata_err(err, STRATA_E_ARG, "cuda_matmul_mix: %d parts (2..%d), %lld columns", n, CUDA_MIX_MAX,
                          (long long)cols);
    int64_t r = 0;
    for (int i = 0; i < n; i++) {
        if (types[i] < 0 || types[i] >= GGML_TYPE_COUNT || !is_blk(types[i]))
            return strata_err(err, STRATA_E_UNSUPPORTED, "cuda_matmul_mix: part %d: %s is not a block-tile type",
                              i, types[i] >= 0 && types[i] < GGML_TYPE_COUNT ? type_name(types[i]) : "?");
        if (rows[i] < 1 || (i + 1 < n && rows[i] % 16))
            return strata_err(err, STRATA_E_UNSUPPORTED,
                              "cuda_matmul_mix: part %d: %lld rows (every part but the last a multiple of 16)", i,
                              (long long)rows[i]);
        r += rows[i];
    }
    Plan p;
    if (r > (1LL << 30) || plan_make(types[0], r, cols, &p))
        return strata_err(err, STRATA_E_UNSUPPORTED, "cuda_matmul_mix: %lld x %lld not supported", (long long)r,
                          (long long)cols);
    MvLayout l;
    int goff[CUDA_MIX_MAX], ginit[CUDA_MIX_MAX];
    const int bytes = mix_layout(types, n, p, &l, goff, ginit);
    if (bytes > MIX_SMEM_MAX)
        return strata_err(err, STRATA_E_UNSUPPORTED,
                          "cuda_matmul_mix: these parts need %d bytes of shared memory (at most %d)", bytes,
                          MIX_SMEM_MAX);
    *total = r;
    return 0;
}

extern "C" int cuda_mix_supported(const int *types, const int64_t *rows, int n, int64_t cols)
{
    strata_error e;
    memset(&e, 0, sizeof e);
    int64_t total;
    return types && rows && mix_check(types, rows, n, cols, &total, &e) == 0;
}

extern "C" int cuda_matmul_mix(const cuda_mix *m, int64_t cols, const float *x, int64_t n, float *y, void *scratch,
                               size_t scratch_bytes, cudaStream_t stream, strata_error *err)
{
    if (!m || !x || !y || n < 1 || n > (1 << 24))
        return strata_err(err, STRATA_E_ARG, "cuda_matmul_mix: bad arguments (n = %lld)", (long long)n);
    int64_t total = 0;
    int rc = mix_check(m->type, m->rows, m->n, cols, &total, err);
    if (rc)
        return rc;
    for (int i = 0; i < m->n; i++)
        if (!m->w[i])
            return strata_err(err, STRATA_E_ARG, "cuda_matmul_mix: part %d has no weights", i);
    if (n > MV_COLS)
        return mm_mix(m, total, cols, x, n, y, scratch, scratch_bytes, stream, err);

    MixArgs a;
    memset(&a, 0, sizeof a);
    plan_make(m->type[0], total, cols, &a.p); /* checked above */
    if (a.p.nseg > 1) { /* the fold's tickets and partial sums (mvfold.cuh) */
        size_t floats = 0;
        rc = mv_fold_scratch(stream, &a.tick, &a.part, &floats, err);
        if (rc)
            return rc;
        const int nrb = (a.p.mt + MV_WARPS - 1) / MV_WARPS;
        const size_t need = (size_t)nrb * a.p.nseg * (size_t)n * BLOCK_ROWS;
        if (need > floats || (size_t)nrb > CUDA_MATVEC_TICKET_BYTES / 4)
            return strata_err(err, STRATA_E_LIMIT, "cuda_matmul_mix: %lld x %lld, n = %lld needs %zu bytes of "
                              "fold scratch (%zu attached)", (long long)total, (long long)cols, (long long)n,
                              CUDA_MATVEC_TICKET_BYTES + need * 4, CUDA_MATVEC_TICKET_BYTES + floats * 4);
    }
    int mt = 0;
    for (int i = 0; i < m->n; i++) {
        a.w[i] = (const uint8_t *)m->w[i];
        a.type[i] = m->type[i];
        a.prows[i] = (int)m->rows[i];
        a.mt0[i] = mt;
        mt += (int)((m->rows[i] + 15) / 16);
    }
    a.mt0[m->n] = mt;
    a.nparts = m->n;
    mix_layout(m->type, m->n, a.p, &a.l, a.goff, a.ginit);
    a.x = x;
    a.y = y;
    a.n = (int)n;
    a.nrb = (a.p.mt + MV_WARPS - 1) / MV_WARPS;
    a.rows = (int)total;
    a.cols = (int)cols;

    void (*kern)(const MixArgs) = matvec_mix_kernel;
    const size_t smem = (size_t)a.l.bytes;
    int cap = 0;
    rc = launch_capacity((const void *)kern, MV_THREADS, smem, 1, &cap, err);
    if (rc)
        return rc;
    cap = cap / a.p.nseg > 0 ? cap / a.p.nseg : 1; /* row-blocks of nseg blocks at once */
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    unsigned na = 0;
    attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[na++].val.programmaticStreamSerializationAllowed = strata_pdl_off ? 0 : 1;
    cfg.gridDim = dim3((unsigned)(cap < a.nrb ? cap : a.nrb), (unsigned)a.p.nseg, 1);
    cfg.blockDim = dim3(MV_THREADS, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = na;
    CUDA_CHECK(err, cudaLaunchKernelEx(&cfg, kern, a));
    CUDA_CHECK_LAUNCH(err, "matvec_mix_kernel");
    return 0;
}
