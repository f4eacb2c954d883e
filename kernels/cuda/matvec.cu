/* matvec.cu: decode, y[n x rows] = x[n x cols] W^T for n = 1..8 tokens.
 *
 * Bytes first: at n = 1 the weights are all the traffic (IQ3_XXS 131072 x
 * 4096: 205 MB, 45 us at the 4540 GB/s this H200 reads), so the kernel is a
 * stream of 16-byte copies of the tile layout (wtile.cuh) decoded in
 * registers and fed to integer tensor-core mmas whose 8 columns are the (up
 * to) 8 tokens: n = 2..8 costs the same instructions as n = 1.
 *
 * Layout of the work.  One block per SM (16 warps, 512 threads); a warp owns
 * a 16-row m-tile, a block a 256-row row-block.  Each warp keeps its next D
 * tiles in flight with cp.async into a private shared-memory ring (run_tiles_
 * ring): Little's law wants ~70 KiB in flight per SM, more than registers can
 * hold beside the decoders.  The k-tiles are cut into nseg segments
 * (wt::plan_make: a function of rows and cols only): 1 for tall matrices, up
 * to 8 for short ones (4096 x 14336: 8), so that ~2048 warps have work.  With
 * nseg > 1 the nseg blocks of one row-block form a thread-block cluster; each
 * computes its segment's partial sums and the cluster adds them in segment
 * order through distributed shared memory: no atomics, no scratch, no second
 * launch.  Blocks are persistent (one wave looping over row-blocks), so the
 * activation quantization and the IQ3_XXS tables are built once per block.
 *
 * The activations live in shared memory for the whole kernel: int8 with the
 * block scales and sums (fp16 for F16 weights), padded so the B-fragment
 * loads are conflict-free.  Measured numbers and what limits them:
 * doc/cuda-kernels.md. */
#include <cooperative_groups.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/f32_row.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/warp.cuh"
#include "kernels/cuda/wtile.cuh"

namespace cg = cooperative_groups;
using namespace wt;

struct MvArgs {
    Wsrc ws;
    const int32_t *expert; /* NULL, or one expert id per blockIdx.z (a pair) */
    size_t expert_bytes;
    int x_div;             /* pair z reads x row z / x_div and writes y row z */
    /* Fusions (doc/cuda-kernels.md, "Fewer launches per decode layer"):
     * blocks z >= zsplit multiply the second matrix w2 (same type and shape)
     * into y2 as pair z - zsplit (MoE gate and up in one launch); xu set: the
     * activation is swiglu1(x, xu) element by element (the SwiGLU in front
     * of a down projection).  x and xu rows are xstride floats apart. */
    const uint8_t *w2;
    float *y2;
    int zsplit;
    const float *xu;
    int64_t xstride;
    Plan p;
    MvLayout l;
    const float *x; /* [n][cols] */
    float *y;       /* [n][rows] */
    int n, nrb;
};

template <int TYPE> __global__ void __launch_bounds__(MV_THREADS, 1) matvec_kernel(const MvArgs a)
{
    extern __shared__ __align__(16) uint8_t smem[];
    constexpr Geo gm = geo(TYPE);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int seg = blockIdx.y;
    Wsrc ws = a.ws;
    pdl_trigger(); /* our successor may set up while we run (pdl.cuh) */
    const float *ax = a.x, *au = a.xu;
    float *ay = a.y;
    if (a.expert) { /* the expert id comes from the predecessor */
        pdl_wait();
        int z = blockIdx.z; /* this block's (expert, token) pair */
        if (z >= a.zsplit) { /* the second matrix's pair z - zsplit */
            z -= a.zsplit;
            ws.w = a.w2;
            ay = a.y2;
        }
        ws.w += (size_t)__ldg(a.expert + z) * a.expert_bytes;
        ax += (size_t)(z / a.x_div) * a.xstride;
        if (au)
            au += (size_t)(z / a.x_div) * a.xstride;
        ay += (size_t)z * ws.rows;
    }
    const int t0 = seg * a.p.tps, t1 = min(a.p.ntk, t0 + a.p.tps);
    const int kb = t0 * gm.kt, klen = (t1 - t0) * gm.kt;
    const int cols = ws.cols, rows = ws.rows, n = a.n;

    /* The first row-block's first tiles are copied while the tables and
     * the activations are prepared (they depend on neither). */
    const int R0 = blockIdx.x * MV_WARPS + warp;
    if (blockIdx.x < a.nrb && R0 < a.p.mt)
        ring_prime<TYPE>(ws, R0, t0, t1, smem + a.l.off_ring + warp * a.l.ring_warp, lane);
    if (TYPE == GGML_TYPE_IQ3_XXS)
        iq3_tables_init(smem);
    wb::grid_init<TYPE>(smem); /* the IQ2s' and IQ3_S's grid (wrows.cuh) */
    /* Everything above reads only the weights and constants: with a
     * programmatic launch it overlapped the predecessor.  From here on the
     * activations are read and y is written. */
    pdl_wait();
    Act act{};
    if (gm.i8) {
        /* x segment -> int8 blocks, one warp per (token, block) */
        int8_t *xq = (int8_t *)(smem + a.l.off_xq);
        float *dx = (float *)(smem + a.l.off_dx);
        int *xs = (int *)(smem + a.l.off_xs);
        const int nb = klen / gm.xb;
        for (int grp = warp; grp < MV_COLS * nb; grp += MV_WARPS) {
            const int c = grp / nb, b = grp - c * nb, k = kb + b * gm.xb;
            int8_t *dst = xq + c * a.l.xstride + b * gm.xb;
            if (c < n) {
                quant_block<gm.xb>(ax + (size_t)c * a.xstride + k, min(gm.xb, cols - k), dst, dx + b * MV_COLS + c,
                                   xs + b * MV_COLS + c, lane, au ? au + (size_t)c * a.xstride + k : nullptr);
            } else {
                for (int e = lane; e < gm.xb; e += 32)
                    dst[e] = 0;
                if (lane == 0) {
                    dx[b * MV_COLS + c] = 0.f;
                    xs[b * MV_COLS + c] = 0;
                }
            }
        }
        act = Act{xq, dx, xs, nullptr, a.l.xstride, MV_COLS};
    } else {
        __half *xh = (__half *)(smem + a.l.off_xq);
        for (int i = threadIdx.x; i < MV_COLS * klen; i += MV_THREADS) {
            const int c = i / klen, k = i - c * klen;
            const size_t o = (size_t)c * a.xstride + kb + k;
            const float v = (c < n && kb + k < cols) ? (au ? swiglu1(ax[o], au[o]) : ax[o]) : 0.f;
            xh[c * a.l.xstride + k] = __float2half_rn(v);
        }
        act = Act{nullptr, nullptr, nullptr, xh, a.l.xstride, 0};
    }
    __syncthreads();

    int it = 0;
    for (int rb = blockIdx.x; rb < a.nrb; rb += gridDim.x, ++it) {
        const int R = rb * MV_WARPS + warp;
        float acc[1][4] = {{0.f, 0.f, 0.f, 0.f}};
        if (R < a.p.mt)
            run_tiles_ring<TYPE>(ws, R, t0, t1, t0, act, acc, smem, smem + a.l.off_ring + warp * a.l.ring_warp,
                                 lane, it == 0);
        if (a.p.nseg == 1) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int row = R * 16 + g + 8 * (i >> 1), col = 2 * t + (i & 1);
                if (R < a.p.mt && row < rows && col < n)
                    ay[(size_t)col * rows + row] = 0.f + acc[0][i]; /* = ((0 + s0)) as in prefill */
            }
        } else {
#if __CUDA_ARCH__ >= 900
            cg::cluster_group cluster = cg::this_cluster();
            float *pb = (float *)(smem + a.l.off_part) + (it & 1) * MV_COLS * BLOCK_ROWS;
#pragma unroll
            for (int i = 0; i < 4; ++i)
                pb[(2 * t + (i & 1)) * BLOCK_ROWS + warp * 16 + g + 8 * (i >> 1)] = acc[0][i];
            cluster.sync();
            /* this block adds up its share of the row-block's outputs, the
             * segments in order; the other buffer is free for the next
             * row-block once every block is past the next cluster.sync() */
            const int per = (BLOCK_ROWS + a.p.nseg - 1) / a.p.nseg;
            const int lo = seg * per, hi = min(BLOCK_ROWS, lo + per), span = hi - lo;
            for (int i = threadIdx.x; span > 0 && i < n * span; i += MV_THREADS) {
                const int c = i / span, rl = lo + (i - c * span), row = rb * BLOCK_ROWS + rl;
                if (row < rows) {
                    float v = 0.f;
                    for (int s = 0; s < a.p.nseg; ++s)
                        v += cluster.map_shared_rank(pb, s)[c * BLOCK_ROWS + rl];
                    ay[(size_t)c * rows + row] = v;
                }
            }
#endif
        }
    }
#if __CUDA_ARCH__ >= 900
    if (a.p.nseg > 1)
        cg::this_cluster().sync(); /* keep this block's partials alive for the others */
#endif
}

template <int TYPE>
static int mv_launch(const MvArgs &a, int pairs, cudaStream_t stream, strata_error *err)
{
    void (*kern)(const MvArgs) = matvec_kernel<TYPE>;
    const size_t smem = (size_t)a.l.bytes;
    int cap = 0;
    const int rc = launch_capacity((const void *)kern, MV_THREADS, smem, a.p.nseg, &cap, err);
    if (rc)
        return rc;
    const unsigned gx = (unsigned)(cap < a.nrb ? cap : a.nrb); /* persistent: one wave */
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[2];
    unsigned na = 0;
    /* a programmatic dependent launch (pdl.cuh): the prologue overlaps the
     * predecessor kernel */
    attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[na++].val.programmaticStreamSerializationAllowed = strata_pdl_off ? 0 : 1;
    if (a.p.nseg > 1) {
        attr[na].id = cudaLaunchAttributeClusterDimension;
        attr[na].val.clusterDim.x = 1;
        attr[na].val.clusterDim.y = (unsigned)a.p.nseg;
        attr[na++].val.clusterDim.z = 1;
    }
    cfg.gridDim = dim3(gx, (unsigned)a.p.nseg, (unsigned)pairs);
    cfg.blockDim = dim3(MV_THREADS, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = na;
    CUDA_CHECK(err, cudaLaunchKernelEx(&cfg, kern, a));
    CUDA_CHECK_LAUNCH(err, "matvec_kernel");
    return 0;
}

/* What a fused launch adds to a plain one (MvArgs): the second matrix and
 * its output, the SwiGLU's up rows, the rows' stride.  NULL: none. */
struct MvFuse {
    const void *w2;
    float *y2;
    const float *xu;
    int64_t xstride;
};

static int f32_matmul_su(const float *w, const int32_t *expert, size_t expert_bytes, int64_t rows, int64_t cols,
                         const float *x, const float *xu, int64_t xstride, int64_t n, float *y,
                         cudaStream_t stream, strata_error *err);

/* The common launch: `pairs` blocks deep in z, pair z multiplying expert
 * expert[z] (when expert is set) by x row z / x_div into y row z; n tokens
 * per pair (pairs > 1: n = 1).  f: the fusions (w2 needs expert). */
static int mv_run(int type, const void *w, int64_t rows, int64_t cols, const int32_t *expert, int pairs,
                  int x_div, const float *x, int n, float *y, const MvFuse *f, cudaStream_t stream,
                  strata_error *err)
{
    const size_t wbytes = cuda_weight_bytes(type, rows, cols);
    if (!wbytes)
        return strata_err(err, STRATA_E_UNSUPPORTED, "cuda_matvec: %s %lld x %lld not supported", type_name(type),
                          (long long)rows, (long long)cols);
    const MvFuse none = {NULL, NULL, NULL, cols};
    if (!f)
        f = &none;
    const int total = f->w2 ? 2 * pairs : pairs; /* blocks in z */
    if (type == GGML_TYPE_F32) {
        /* test models only: one launch per pair */
        for (int z = 0; z < total; z++) {
            const int zz = z < pairs ? z : z - pairs;
            const float *wz = (const float *)(z < pairs ? w : f->w2);
            float *yz = z < pairs ? y : f->y2;
            const size_t xo = (size_t)(zz / x_div) * f->xstride;
            int rc = f32_matmul_su(wz, expert ? expert + zz : NULL, wbytes, rows, cols, x + xo,
                                   f->xu ? f->xu + xo : NULL, f->xstride, n, yz + (size_t)zz * rows, stream,
                                   err);
            if (rc)
                return rc;
        }
        return 0;
    }
    Plan p;
    if (plan_make(type, rows, cols, &p))
        return strata_err(err, STRATA_E_UNSUPPORTED, "cuda_matvec: %lld columns (at most %d)", (long long)cols,
                          MAX_SEGS * SEG_MAX_K);
    if (p.nseg > 1) {
        int dev = 0, major = 0;
        CUDA_CHECK(err, cudaGetDevice(&dev));
        CUDA_CHECK(err, cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        if (major < 9)
            return strata_err(err, STRATA_E_UNSUPPORTED,
                              "cuda_matvec: %lld x %lld needs thread-block clusters (sm_90)", (long long)rows,
                              (long long)cols);
    }
    MvArgs a;
    a.ws = Wsrc{(const uint8_t *)w, (int)rows, (int)cols, p.ntk};
    a.expert = expert;
    a.expert_bytes = wbytes;
    a.x_div = x_div;
    a.w2 = (const uint8_t *)f->w2;
    a.y2 = f->y2;
    a.zsplit = pairs;
    a.xu = f->xu;
    a.xstride = f->xstride;
    a.p = p;
    a.l = mv_layout(type, p);
    a.x = x;
    a.y = y;
    a.n = n;
    a.nrb = (p.mt + MV_WARPS - 1) / MV_WARPS;
    switch (type) {
    case GGML_TYPE_IQ3_XXS: return mv_launch<GGML_TYPE_IQ3_XXS>(a, total, stream, err);
    case GGML_TYPE_Q2_0: return mv_launch<GGML_TYPE_Q2_0>(a, total, stream, err);
    case GGML_TYPE_Q4_0: return mv_launch<GGML_TYPE_Q4_0>(a, total, stream, err);
    case GGML_TYPE_Q8_0: return mv_launch<GGML_TYPE_Q8_0>(a, total, stream, err);
    case GGML_TYPE_F16: return mv_launch<GGML_TYPE_F16>(a, total, stream, err);
    case GGML_TYPE_BF16: return mv_launch<GGML_TYPE_BF16>(a, total, stream, err);
#define MV_CASE(T)                                                                                       \
    case T: return mv_launch<T>(a, total, stream, err);
        WB_FOR_EACH(MV_CASE)
#undef MV_CASE
    default: return strata_err(err, STRATA_E_UNSUPPORTED, "cuda_matvec: type %s", type_name(type));
    }
}

extern "C" int cuda_matvec_expert(int type, const void *w, int64_t rows, int64_t cols, const int32_t *expert,
                                  const float *x, int n, float *y, cudaStream_t stream, strata_error *err)
{
    if (!w || !x || !y || n < 1 || n > MV_COLS)
        return strata_err(err, STRATA_E_ARG, "cuda_matvec: bad arguments (n = %d, 1..8)", n);
    return mv_run(type, w, rows, cols, expert, 1, 1, x, n, y, NULL, stream, err);
}

extern "C" int cuda_matvec_experts(int type, const void *w, int64_t rows, int64_t cols, const int32_t *experts,
                                   int pairs, int x_div, const float *x, float *y, cudaStream_t stream,
                                   strata_error *err)
{
    if (!w || !experts || !x || !y || pairs < 1 || pairs > 65535 || x_div < 1)
        return strata_err(err, STRATA_E_ARG, "cuda_matvec_experts: bad arguments (%d pairs, x_div %d)", pairs,
                          x_div);
    return mv_run(type, w, rows, cols, experts, pairs, x_div, x, 1, y, NULL, stream, err);
}

extern "C" int cuda_matvec_experts2(int type, const void *w, const void *w2, int64_t rows, int64_t cols,
                                    const int32_t *experts, int pairs, int x_div, const float *x, float *y,
                                    float *y2, cudaStream_t stream, strata_error *err)
{
    if (!w || !w2 || !experts || !x || !y || !y2 || pairs < 1 || 2 * pairs > 65535 || x_div < 1)
        return strata_err(err, STRATA_E_ARG, "cuda_matvec_experts2: bad arguments (%d pairs, x_div %d)", pairs,
                          x_div);
    const MvFuse f = {w2, y2, NULL, cols};
    return mv_run(type, w, rows, cols, experts, pairs, x_div, x, 1, y, &f, stream, err);
}

extern "C" int cuda_matvec_swiglu(int type, const void *w, int64_t rows, int64_t cols, const int32_t *experts,
                                  int n, const float *g, const float *u, int64_t xstride, float *y,
                                  cudaStream_t stream, strata_error *err)
{
    if (!w || !g || !u || !y || n < 1 || n > (experts ? 65535 : MV_COLS) || xstride < cols)
        return strata_err(err, STRATA_E_ARG,
                          "cuda_matvec_swiglu: bad arguments (n = %d, 1..%d; stride %lld, cols %lld)", n,
                          experts ? 65535 : MV_COLS, (long long)xstride, (long long)cols);
    const MvFuse f = {NULL, NULL, u, xstride};
    if (experts) /* pair p: expert experts[p], row p */
        return mv_run(type, w, rows, cols, experts, n, 1, g, 1, y, &f, stream, err);
    return mv_run(type, w, rows, cols, NULL, 1, 1, g, n, y, &f, stream, err);
}

extern "C" int cuda_matvec(int type, const void *w, int64_t rows, int64_t cols, const float *x, int n, float *y,
                           cudaStream_t stream, strata_error *err)
{
    return cuda_matvec_expert(type, w, rows, cols, NULL, x, n, y, stream, err);
}

/* ---- F32 ------------------------------------------------------------------
 * Rare (tiny models, tests): one warp per row, lane l summing columns
 * 4l + 128i in order with FMA, then a fixed butterfly; the same for every n,
 * so it is its own matmul. */
__global__ void __launch_bounds__(256) f32_kernel(const float *w, const int32_t *expert, size_t expert_bytes,
                                                  int rows, int cols, const float *x, const float *xu,
                                                  int64_t xstride, int n, float *y)
{
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (row >= rows)
        return;
    if (expert)
        w = (const float *)((const uint8_t *)w + (size_t)__ldg(expert) * expert_bytes);
    const float *wr = w + (size_t)row * cols;
    for (int c = blockIdx.y; c < n; c += gridDim.y) {
        /* xu: cuda_matvec_swiglu, the SwiGLU's values as cuda_swiglu stores them */
        const float s = f32_row_dot(wr, x + (size_t)c * xstride, xu ? xu + (size_t)c * xstride : nullptr, cols,
                                    lane);
        if (lane == 0)
            y[(size_t)c * rows + row] = s;
    }
}

static int f32_matmul_su(const float *w, const int32_t *expert, size_t expert_bytes, int64_t rows, int64_t cols,
                         const float *x, const float *xu, int64_t xstride, int64_t n, float *y,
                         cudaStream_t stream, strata_error *err)
{
    const unsigned gy = (unsigned)(n < 1024 ? n : 1024);
    f32_kernel<<<dim3((unsigned)((rows + 7) / 8), gy), 256, 0, stream>>>(w, expert, expert_bytes, (int)rows,
                                                                         (int)cols, x, xu, xstride, (int)n, y);
    CUDA_CHECK_LAUNCH(err, "f32_kernel");
    return 0;
}

namespace wt {
int f32_matmul(const float *w, const int32_t *expert, size_t expert_bytes, int64_t rows, int64_t cols,
               const float *x, int64_t n, float *y, cudaStream_t stream, strata_error *err)
{
    return f32_matmul_su(w, expert, expert_bytes, rows, cols, x, NULL, cols, n, y, stream, err);
}
} /* namespace wt */
