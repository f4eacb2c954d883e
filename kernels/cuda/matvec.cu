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
 * to 8 for short ones (4096 x 14336: 8), so that the card is full.  With
 * nseg > 1 each of a row-block's nseg blocks stores its segment's partial
 * sums in the stream's scratch and takes a ticket; the last one adds them
 * in segment order (fold_segments): no atomics in the sum, no block waiting
 * for another, so any number of blocks may run, one launch.  Blocks are
 * persistent (one wave looping over row-blocks), so the activation
 * quantization and the IQ3_XXS tables are built once per block.
 *
 * The activations live in shared memory for the whole kernel: int8 with the
 * block scales and sums (fp16 for F16 weights), padded so the B-fragment
 * loads are conflict-free.  Measured numbers and what limits them:
 * doc/cuda-kernels.md. */
#include <pthread.h>
#include <stdlib.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/f32_row.cuh"
#include "kernels/cuda/mvfold.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/warp.cuh"
#include "kernels/cuda/wtile.cuh"

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
    /* The segment fold through global memory (fold_segments): one ticket
     * per (z, row-block), then the partial sums (unused when nseg = 1). */
    unsigned *tick;
    float *part;
    int z0;         /* blockIdx.z = 0 is pair z0 (a launch holds the pairs its scratch does) */
    const float *x; /* [n][cols] */
    float *y;       /* [n][rows] */
    int n, nrb;
};

/* The k-segments of row-block rb (nseg > 1): mvfold.cuh. */
__device__ __forceinline__ void fold_segments(const MvArgs &a, float *ay, int rb, const float (&acc)[4], int warp,
                                              int lane)
{
    mv_fold(a.tick, a.part, ay, (size_t)blockIdx.z * a.nrb + rb, rb, a.n, a.ws.rows, a.p.nseg, blockIdx.y, acc, warp, lane);
}

/* N1: n = 1 (IQ3_XXS and Q2_0: their tiles then skip the odd token columns) */
template <int TYPE, bool N1 = false> __global__ void __launch_bounds__(MV_THREADS, 1) matvec_kernel(const MvArgs a)
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
        int z = blockIdx.z + a.z0; /* this block's (expert, token) pair */
        if (z >= a.zsplit) { /* the second matrix's pair z - zsplit */
            z -= a.zsplit;
            ws.w = a.w2;
            ay = a.y2;
        }
        const int e = __ldg(a.expert + z);
        ws.w += (size_t)e * a.expert_bytes;
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
        ring_prime<TYPE>(ws, R0, t0, t1, smem + mv_ring_off(a.l, warp), lane);
    if (TYPE == GGML_TYPE_IQ3_XXS)
        iq3_tables_init_dec(smem + a.l.off_tab);
    wb::grid_init<TYPE>(smem); /* the IQ2s' and IQ3_S's grid (wrows.cuh) */
    /* Everything above reads only the weights and constants: with a
     * programmatic launch it overlapped the predecessor.  From here on the
     * activations are read and y is written. */
    pdl_wait();
    if (TYPE == GGML_TYPE_IQ3_XXS && ((uint32_t)__cvta_generic_to_shared(smem + a.l.off_tab) & 0xffffu)) {
        /* the tables are not 64 KiB aligned (the host's idea of where the
         * dynamic shared memory starts was wrong): NaN, never wrong numbers */
        cp_wait<0>();
        for (int rb = blockIdx.x; seg == 0 && rb < a.nrb; rb += gridDim.x)
            for (int i = threadIdx.x; i < n * BLOCK_ROWS; i += MV_THREADS) {
                const int c = i / BLOCK_ROWS, row = rb * BLOCK_ROWS + (i - c * BLOCK_ROWS);
                if (row < rows)
                    ay[(size_t)c * rows + row] = __int_as_float(0x7fc00000);
            }
        return;
    }
    Act act{};
    if (gm.i8) {
        /* x segment -> int8 blocks, one warp per (token, block) */
        int8_t *xq = (int8_t *)(smem + a.l.off_xq);
        float *dx = (float *)(smem + a.l.off_dx);
        int *xs = (int *)(smem + a.l.off_xs);
        const int nb = klen / gm.xb;
        /* only the n tokens' rows: the mma columns of the others read
         * whatever is there and are never stored (a column's outputs depend
         * on its own activations only) */
        for (int grp = warp; grp < n * nb; grp += MV_WARPS) {
            const int c = grp / nb, b = grp - c * nb, k = kb + b * gm.xb;
            int8_t *dst = xq + c * a.l.xstride + b * gm.xb;
            quant_block<gm.xb>(ax + (size_t)c * a.xstride + k, min(gm.xb, cols - k), dst, dx + b * MV_COLS + c,
                               xs + b * MV_COLS + c, lane, au ? au + (size_t)c * a.xstride + k : nullptr);
        }
        act = Act{xq, dx, xs, nullptr, n == 1 ? 0 : a.l.xstride, MV_COLS};
    } else {
        __half *xh = (__half *)(smem + a.l.off_xq);
        stage_h16(ax, au, a.xstride, kb, klen, cols, n, xh, a.l.xstride); /* the n tokens only, as above */
        act = Act{nullptr, nullptr, nullptr, xh, n == 1 ? 0 : a.l.xstride, 0};
    }
    /* n = 1: every lane's B fragment reads token 0's row (token stride 0):
     * 4 distinct words a load instead of 32, fewer shared-memory wavefronts;
     * the other columns' outputs are not stored */
    __syncthreads();

    int it = 0;
    for (int rb = blockIdx.x; rb < a.nrb; rb += gridDim.x, ++it) {
        const int R = rb * MV_WARPS + warp;
        float acc[1][4] = {{0.f, 0.f, 0.f, 0.f}};
        if (R < a.p.mt)
            run_tiles_ring<TYPE, N1>(ws, R, t0, t1, t0, act, acc, smem + a.l.off_tab,
                                     smem + mv_ring_off(a.l, warp), lane, it == 0);
        if (a.p.nseg == 1) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int row = R * 16 + g + 8 * (i >> 1), col = 2 * t + (i & 1);
                if (R < a.p.mt && row < rows && col < n)
                    ay[(size_t)col * rows + row] = 0.f + acc[0][i]; /* = ((0 + s0)) as in prefill */
            }
        } else {
            fold_segments(a, ay, rb, acc[0], warp, lane);
        }
    }
}

template <int TYPE>
static int mv_launch(const MvArgs &a, int pairs, cudaStream_t stream, strata_error *err)
{
    void (*kern)(const MvArgs) = matvec_kernel<TYPE>;
    constexpr bool n1 = TYPE == GGML_TYPE_IQ3_XXS || TYPE == GGML_TYPE_Q2_0; /* a one-token variant */
    if (n1 && a.n == 1)
        kern = matvec_kernel<TYPE, n1>;
    const size_t smem = (size_t)a.l.bytes;
    int cap = 0;
    const int rc = launch_capacity((const void *)kern, MV_THREADS, smem, 1, &cap, err);
    if (rc)
        return rc;
    cap = cap / a.p.nseg > 0 ? cap / a.p.nseg : 1; /* row-blocks of nseg blocks at once */
    const unsigned gx = (unsigned)(cap < a.nrb ? cap : a.nrb); /* persistent: one wave */
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    unsigned na = 0;
    /* a programmatic dependent launch (pdl.cuh): the prologue overlaps the
     * predecessor kernel */
    attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[na++].val.programmaticStreamSerializationAllowed = strata_pdl_off ? 0 : 1;
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

/* ---- the fold scratch, one per (device, stream) --------------------------
 * Attached by the engine (each stage's compute stream, before any graph is
 * captured); on a stream with none (tests, tools) the first launch that
 * needs one allocates CUDA_MATVEC_SCRATCH_BYTES for it, outside a capture
 * only, and keeps it for the process. */
struct MvScratch {
    int dev;
    cudaStream_t stream;
    uint8_t *p;
    size_t bytes;
    int own; /* allocated here, not attached */
};
static MvScratch mv_scr[64];
static int mv_scr_n;
static pthread_mutex_t mv_scr_mu = PTHREAD_MUTEX_INITIALIZER;

/* Under mv_scr_mu: entry (dev, stream), or -1. */
static int mv_scr_find(int dev, cudaStream_t stream)
{
    for (int i = 0; i < mv_scr_n; i++)
        if (mv_scr[i].dev == dev && mv_scr[i].stream == stream)
            return i;
    return -1;
}

extern "C" int cuda_matvec_attach_scratch(cudaStream_t stream, void *scratch, size_t bytes, strata_error *err)
{
    if (scratch && bytes < CUDA_MATVEC_TICKET_BYTES + 4096)
        return strata_err(err, STRATA_E_ARG, "cuda_matvec_attach_scratch: %zu bytes (at least %u)", bytes,
                          (unsigned)CUDA_MATVEC_TICKET_BYTES + 4096u);
    int dev = 0;
    CUDA_CHECK(err, cudaGetDevice(&dev));
    if (scratch) { /* the tickets start at 0 */
        CUDA_CHECK(err, cudaMemsetAsync(scratch, 0, CUDA_MATVEC_TICKET_BYTES, stream));
        CUDA_CHECK(err, cudaStreamSynchronize(stream));
    }
    pthread_mutex_lock(&mv_scr_mu);
    int i = mv_scr_find(dev, stream);
    void *drop = i >= 0 && mv_scr[i].own ? mv_scr[i].p : NULL;
    if (!scratch) {
        if (i >= 0)
            mv_scr[i] = mv_scr[--mv_scr_n];
    } else if (i < 0 && mv_scr_n == (int)(sizeof mv_scr / sizeof mv_scr[0])) {
        pthread_mutex_unlock(&mv_scr_mu);
        return strata_err(err, STRATA_E_LIMIT, "cuda_matvec_attach_scratch: more than %d streams",
                          (int)(sizeof mv_scr / sizeof mv_scr[0]));
    } else {
        if (i < 0)
            i = mv_scr_n++;
        mv_scr[i] = MvScratch{dev, stream, (uint8_t *)scratch, bytes, 0};
    }
    pthread_mutex_unlock(&mv_scr_mu);
    if (drop) { /* one this file allocated: no launch of the stream may still use it */
        CUDA_CHECK(err, cudaStreamSynchronize(stream));
        CUDA_CHECK(err, cudaFree(drop));
    }
    return 0;
}

/* The stream's scratch: its tickets and partial sums, and how many floats
 * of partial sums it holds. */
int mv_fold_scratch(cudaStream_t stream, unsigned **tick, float **part, size_t *floats, strata_error *err)
{
    int dev = 0;
    CUDA_CHECK(err, cudaGetDevice(&dev));
    pthread_mutex_lock(&mv_scr_mu);
    int i = mv_scr_find(dev, stream);
    if (i < 0) {
        pthread_mutex_unlock(&mv_scr_mu);
        cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
        CUDA_CHECK(err, cudaStreamIsCapturing(stream, &cap));
        if (cap != cudaStreamCaptureStatusNone)
            return strata_err(err, STRATA_E_ARG,
                              "cuda_matvec: a k-split matrix on a stream being captured needs "
                              "cuda_matvec_attach_scratch first");
        void *p = NULL;
        CUDA_CHECK(err, cudaMalloc(&p, CUDA_MATVEC_SCRATCH_BYTES));
        CUDA_CHECK(err, cudaMemset(p, 0, CUDA_MATVEC_TICKET_BYTES));
        CUDA_CHECK(err, cudaDeviceSynchronize());
        pthread_mutex_lock(&mv_scr_mu);
        i = mv_scr_find(dev, stream);
        if (i < 0 && mv_scr_n == (int)(sizeof mv_scr / sizeof mv_scr[0])) {
            pthread_mutex_unlock(&mv_scr_mu);
            cudaFree(p);
            return strata_err(err, STRATA_E_LIMIT, "cuda_matvec: fold scratch for more than %d streams",
                              (int)(sizeof mv_scr / sizeof mv_scr[0]));
        }
        if (i < 0) {
            i = mv_scr_n++;
            mv_scr[i] = MvScratch{dev, stream, (uint8_t *)p, CUDA_MATVEC_SCRATCH_BYTES, 1};
            p = NULL;
        }
        pthread_mutex_unlock(&mv_scr_mu);
        if (p) /* another thread got there first */
            cudaFree(p);
        pthread_mutex_lock(&mv_scr_mu);
        i = mv_scr_find(dev, stream);
    }
    *tick = (unsigned *)mv_scr[i].p;
    *part = (float *)(mv_scr[i].p + CUDA_MATVEC_TICKET_BYTES);
    *floats = (mv_scr[i].bytes - CUDA_MATVEC_TICKET_BYTES) / 4;
    pthread_mutex_unlock(&mv_scr_mu);
    return 0;
}

static int mv_launch_type(int type, const MvArgs &a, int total, cudaStream_t stream, strata_error *err);

/* Where the decode kernel's dynamic shared memory starts in the shared
 * window (it has no static shared memory): after the block's reserved
 * bytes (1 KiB on sm_80..sm_90).  MvLayout aligns the IQ3_XXS tables by it;
 * the kernel checks.  Per device, looked up once. */
int mv_smem_lo(int *out, strata_error *err)
{
    static int lo[64];
    static bool have[64];
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    int dev = 0;
    CUDA_CHECK(err, cudaGetDevice(&dev));
    if (dev < 0 || dev >= 64)
        return strata_err(err, STRATA_E_UNSUPPORTED, "cuda_matvec: device %d (at most 64)", dev);
    pthread_mutex_lock(&mu);
    const bool h = have[dev];
    *out = lo[dev];
    pthread_mutex_unlock(&mu);
    if (h)
        return 0;
    int v = 0;
    CUDA_CHECK(err, cudaDeviceGetAttribute(&v, cudaDevAttrReservedSharedMemoryPerBlock, dev));
    pthread_mutex_lock(&mu);
    lo[dev] = v;
    have[dev] = true;
    pthread_mutex_unlock(&mu);
    *out = v;
    return 0;
}

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
    const int nrb = (p.mt + MV_WARPS - 1) / MV_WARPS;
    unsigned *tick = NULL;
    float *part = NULL;
    int zstep = total; /* pairs per launch: as many as the scratch holds */
    if (p.nseg > 1) {
        size_t floats = 0;
        int rc = mv_fold_scratch(stream, &tick, &part, &floats, err);
        if (rc)
            return rc;
        const size_t per_z = (size_t)nrb * p.nseg * n * BLOCK_ROWS;
        const size_t zmax = floats / per_z < CUDA_MATVEC_TICKET_BYTES / 4 / nrb ? floats / per_z
                                                                                : CUDA_MATVEC_TICKET_BYTES / 4 / nrb;
        if (zmax < 1)
            return strata_err(err, STRATA_E_LIMIT,
                              "cuda_matvec: %lld x %lld, n = %d needs %zu bytes of fold scratch (%zu attached)",
                              (long long)rows, (long long)cols, n, CUDA_MATVEC_TICKET_BYTES + per_z * 4,
                              CUDA_MATVEC_TICKET_BYTES + floats * 4);
        zstep = (size_t)total < zmax ? total : (int)zmax;
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
    int smem_lo = 0;
    if (type == GGML_TYPE_IQ3_XXS) {
        int rc = mv_smem_lo(&smem_lo, err);
        if (rc)
            return rc;
    }
    a.l = mv_layout(type, p, smem_lo);
    a.x = x;
    a.y = y;
    a.n = n;
    a.nrb = nrb;
    a.tick = tick;
    a.part = part;
    for (a.z0 = 0; a.z0 < total; a.z0 += zstep) { /* pairs past zstep: later launches, the same bits */
        const int nz = total - a.z0 < zstep ? total - a.z0 : zstep;
        const int rc = mv_launch_type(type, a, nz, stream, err);
        if (rc)
            return rc;
    }
    return 0;
}

static int mv_launch_type(int type, const MvArgs &a, int total, cudaStream_t stream, strata_error *err)
{
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
