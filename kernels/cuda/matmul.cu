/* matmul.cu: prefill and batches, y[n x rows] = x[n x cols] W^T for any n.
 *
 * Flops first: 4096 x 14336 x 512 is 60 GFLOP; ggml's IQ3_XXS takes 338 us
 * (178 TFLOP/s), the goal is >= 1.5x that.  The same tile decoders as the
 * decode kernel (wtile.cuh) feed integer tensor-core mmas, but each decoded
 * weight fragment now serves 8 column groups (64 tokens), so the decoding
 * that bounds decode is spread over 64 tokens.
 *
 * Two launches:
 *   1. quant_x_kernel: x -> int8 blocks with scales and sums (or fp16 for
 *      F16 weights) in the caller's scratch, once per token and block (the
 *      very function the decode kernel applies in shared memory, so the
 *      values are identical).
 *   2. matmul_kernel: block = 8 warps = 128 rows x 64 tokens; warp = one
 *      16-row m-tile, its weight tiles prefetched through registers (the
 *      64-token blocks of one row-block re-read them from L2); the block's
 *      activations for the current k-tile are staged in shared memory with
 *      cp.async, double-buffered, and read as conflict-free 8-byte B loads.
 *      The k-tiles run segment by segment with the decode kernel's plan, each
 *      segment summed from 0 and added to the total in order: the per-element
 *      arithmetic is exactly decode's, so y is bitwise equal to cuda_matvec's
 *      for the same token (tested). */
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/wtile.cuh"

using namespace wt;

/* Scratch layout for n tokens of cols: int8 [n_pad][cols_pad], then scales
 * and sums [cols_pad / xb][n_pad]; fp16 [n_pad][cols_pad] for F16. */
struct MmScratch {
    int n_pad, cols_pad, nb;
    size_t off_d, off_s, bytes;
};
static MmScratch mm_scratch(int type, int64_t cols, int64_t n)
{
    const Geo gm = geo(type);
    MmScratch s{};
    if (!gm.kt)
        return s;
    s.n_pad = (int)((n + MM_COLS - 1) / MM_COLS * MM_COLS);
    s.cols_pad = (int)((cols + gm.kt - 1) / gm.kt * gm.kt);
    s.nb = s.cols_pad / gm.xb;
    if (type == GGML_TYPE_F32)
        return s;
    if (!gm.i8) {
        s.bytes = (size_t)s.n_pad * s.cols_pad * 2;
        return s;
    }
    s.off_d = ((size_t)s.n_pad * s.cols_pad + 15) / 16 * 16;
    s.off_s = s.off_d + (size_t)s.nb * s.n_pad * 4;
    s.bytes = s.off_s + (size_t)s.nb * s.n_pad * 4;
    return s;
}

/* One warp per (token, block); tokens past n and columns past cols are 0. */
template <int XB>
__global__ void __launch_bounds__(256) quant_x_kernel(const float *x, int n, int cols, int n_pad, int cols_pad,
                                                      int8_t *q, float *d, int *s)
{
    const int lane = threadIdx.x & 31;
    const int nb = cols_pad / XB;
    const long grp = (long)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (grp >= (long)n_pad * nb)
        return;
    const int c = (int)(grp / nb), b = (int)(grp - (long)c * nb), k = b * XB;
    int8_t *dst = q + (size_t)c * cols_pad + k;
    if (c < n && k < cols) {
        quant_block<XB>(x + (size_t)c * cols + k, min(XB, cols - k), dst, d + (size_t)b * n_pad + c,
                        s + (size_t)b * n_pad + c, lane);
    } else {
        for (int e = lane; e < XB; e += 32)
            dst[e] = 0;
        if (lane == 0) {
            d[(size_t)b * n_pad + c] = 0.f;
            s[(size_t)b * n_pad + c] = 0;
        }
    }
}

__global__ void __launch_bounds__(256) half_x_kernel(const float *x, int n, int cols, int n_pad, int cols_pad,
                                                     __half *h)
{
    const size_t total = (size_t)n_pad * cols_pad;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const int c = (int)(i / cols_pad), k = (int)(i - (size_t)c * cols_pad);
        h[i] = __float2half_rn(c < n && k < cols ? x[(size_t)c * cols + k] : 0.f);
    }
}

struct MmArgs {
    Wsrc ws;
    Plan p;
    Act act; /* quantized activations in global memory, at token 0 */
    float *y;
    int64_t ystride; /* floats between y's tokens: ws.rows, or a mixed stack's rows */
    int n;
    /* grouped (MoE prefill): the tokens are sorted by expert, expert e owns
     * tokens [goff[e], goff[e + 1]) and its weights sit gbytes after e-1's;
     * NULL goff: one weight matrix for all n tokens */
    const int32_t *goff;
    int gexp;
    size_t gbytes;
    int xstr;               /* shared-memory bytes between tokens of a staged tile */
    int off_x, off_tot, stage_bytes;
};

/* Shared memory: [IQ3 tables][running totals][2 x staged activation tile]. */
static void mm_layout(int type, MmArgs *a)
{
    const Geo gm = geo(type);
    const int tab = type == GGML_TYPE_IQ3_XXS ? TAB_BYTES : wb::grid_bytes(type); /* tables or grid first */
    a->off_tot = tab;
    a->off_x = tab + MM_COLS / 2 * THREADS * 4;
    if (gm.i8) {
        /* 32 (mod 128) bytes between tokens: conflict-free 8-byte B loads */
        a->xstr = (gm.kt + 127) / 128 * 128 + 32;
        a->stage_bytes = MM_COLS * a->xstr + 2 * (gm.kt / gm.xb) * MM_COLS * 4;
    } else {
        /* 64 (mod 128): conflict-free 16-byte loads */
        a->xstr = (gm.kt * 2 + 127) / 128 * 128 + 64;
        a->stage_bytes = MM_COLS * a->xstr;
    }
    a->stage_bytes = (a->stage_bytes + 15) / 16 * 16;
}

/* Copy k-tile T's activations for this block's 64 tokens into a stage with
 * cp.async (all threads; 16-byte pieces). */
template <int TYPE>
__device__ __forceinline__ void mm_stage(const MmArgs &a, const Act &g, uint8_t *stage, int T)
{
    constexpr Geo gm = geo(TYPE);
    const uint32_t st = (uint32_t)__cvta_generic_to_shared(stage);
    if (gm.i8) {
        constexpr int PER = gm.kt / 16; /* pieces per token */
        for (int i = threadIdx.x; i < MM_COLS * PER; i += THREADS) {
            const int c = i / PER, part = i - c * PER;
            cp16(st + c * a.xstr + part * 16, g.q + (size_t)c * g.cs + (size_t)T * gm.kt + part * 16);
        }
        constexpr int NB = gm.kt / gm.xb;
        const uint32_t sd = st + MM_COLS * a.xstr, ss = sd + NB * MM_COLS * 4;
        for (int i = threadIdx.x; i < NB * MM_COLS / 4; i += THREADS) {
            const int b = i / (MM_COLS / 4), part = i - b * (MM_COLS / 4);
            const size_t src = (size_t)(T * NB + b) * g.bs + part * 4;
            cp16(sd + (b * MM_COLS + part * 4) * 4, g.d + src);
            cp16(ss + (b * MM_COLS + part * 4) * 4, g.s + src);
        }
    } else {
        constexpr int PER = gm.kt * 2 / 16;
        for (int i = threadIdx.x; i < MM_COLS * PER; i += THREADS) {
            const int c = i / PER, part = i - c * PER;
            cp16(st + c * a.xstr + part * 16, g.h + (size_t)c * g.cs + (size_t)T * gm.kt + part * 8);
        }
    }
}

/* Tiles of expert e's tokens [b, end): they start at b rounded down to 4
 * tokens, as the 16-byte copies of the activation scales need (the tokens
 * before b are another expert's: computed, not written). */
__device__ __forceinline__ int group_tiles(int b, int end)
{
    return end > b ? (end - (b & ~3) + MM_COLS - 1) / MM_COLS : 0;
}

/* Grouped: the 64-token tile blockIdx.y of the expert-sorted tokens, counted
 * expert by expert (each expert's tokens start a new tile): its expert,
 * first token, and the tokens [beg, end) it writes; -1 when the grid's
 * bound exceeds the tiles there are
 * (the grid is sized without reading the offsets, so the launch stays
 * graph-safe).  Warp 0 finds it: each lane counts the tiles of a run of
 * experts, a prefix sum over the lanes says which lane holds tile y, and
 * that lane walks its run. */
__device__ int group_tile(const MmArgs &a, int *c0, int *cbeg, int *cend)
{
    __shared__ int tile[4];
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x, per = (a.gexp + 31) / 32;
        const int e0 = min(lane * per, a.gexp), e1 = min(e0 + per, a.gexp);
        int mine = 0;
        for (int e = e0; e < e1; ++e)
            mine += group_tiles(__ldg(a.goff + e), __ldg(a.goff + e + 1));
        int incl = mine;
        for (int d = 1; d < 32; d <<= 1) {
            const int v = __shfl_up_sync(0xffffffffu, incl, d);
            if (lane >= d)
                incl += v;
        }
        if (lane == 0)
            tile[0] = -1;
        __syncwarp();
        int ty = (int)blockIdx.y - (incl - mine);
        if (ty >= 0 && ty < mine) { /* one lane at most */
            for (int e = e0; e < e1; ++e) {
                const int b = __ldg(a.goff + e), end = __ldg(a.goff + e + 1);
                const int nt = group_tiles(b, end);
                if (ty < nt) {
                    tile[0] = e;
                    tile[1] = (b & ~3) + ty * MM_COLS;
                    tile[2] = b;
                    tile[3] = end;
                    break;
                }
                ty -= nt;
            }
        }
    }
    __syncthreads();
    *c0 = tile[1];
    *cbeg = tile[2];
    *cend = tile[3];
    return tile[0];
}

template <int TYPE> __global__ void __launch_bounds__(THREADS) matmul_kernel(const MmArgs a)
{
    extern __shared__ __align__(16) uint8_t smem[];
    constexpr Geo gm = geo(TYPE);
    constexpr int NG = MM_COLS / 8, PF = Depth<TYPE>::v;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    Wsrc ws = a.ws;
    int c0 = blockIdx.y * MM_COLS, cbeg = 0, cend = a.n;
    if (a.goff) {
        const int e = group_tile(a, &c0, &cbeg, &cend);
        if (e < 0)
            return; /* the whole block: no barrier is left waiting */
        ws.w += (size_t)e * a.gbytes;
    }
    if (TYPE == GGML_TYPE_IQ3_XXS)
        iq3_tables_init(smem);
    wb::grid_init<TYPE>(smem); /* the IQ2s' and IQ3_S's grid (wrows.cuh) */
    const int R = blockIdx.x * WARPS + warp;
    const bool active = R < a.p.mt; /* idle warps still take part in the barriers */
    Act ga = a.act;
    if (ga.q)
        ga.q += (size_t)c0 * ga.cs;
    if (ga.h)
        ga.h += (size_t)c0 * ga.cs;
    if (ga.d) {
        ga.d += c0;
        ga.s += c0;
    }
    uint8_t *stage[2] = {smem + a.off_x, smem + a.off_x + a.stage_bytes};
    Act sa[2];
    for (int k = 0; k < 2; ++k) {
        if (gm.i8)
            sa[k] = Act{(const int8_t *)stage[k], (const float *)(stage[k] + MM_COLS * a.xstr),
                        (const int *)(stage[k] + MM_COLS * a.xstr + (gm.kt / gm.xb) * MM_COLS * 4), nullptr,
                        a.xstr, MM_COLS};
        else
            sa[k] = Act{nullptr, nullptr, nullptr, (const __half *)stage[k], a.xstr / 2, 0};
    }
    /* the running total of finished segments waits in shared memory (one
     * column per thread, conflict-free), leaving the registers to the tiles */
    float *tot = (float *)(smem + a.off_tot) + threadIdx.x;
    float acc[NG][4];
#pragma unroll
    for (int j = 0; j < NG; ++j)
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;

    /* weights: PF tiles ahead in registers; activations: the next k-tile
     * copied into the other stage while this one is used */
    Raw<TYPE> buf[PF];
    const int ntk = a.p.ntk;
#pragma unroll
    for (int i = 0; i < PF; ++i)
        if (active && i < ntk)
            raw_load<TYPE>(buf[i], ws, R, i, lane);
    mm_stage<TYPE>(a, ga, stage[0], 0);
    cp_commit();
    for (int T = 0; T < ntk; T += PF) {
#pragma unroll
        for (int i = 0; i < PF; ++i) {
            const int tt = T + i;
            if (tt < ntk) {
                if (tt + 1 < ntk)
                    mm_stage<TYPE>(a, ga, stage[(tt + 1) & 1], tt + 1);
                cp_commit();
                cp_wait<1>();
                __syncthreads(); /* stage tt (and the tables) ready for everyone */
                if (active) {
                    const Raw<TYPE> cur = buf[i];
                    if (tt + PF < ntk)
                        raw_load<TYPE>(buf[i], ws, R, tt + PF, lane);
                    tile_any<TYPE, NG, false>(cur, sa[tt & 1], 0, 0, acc, smem, lane);
                    if ((tt + 1) % a.p.tps == 0 || tt + 1 == ntk) { /* a segment ends */
                        const bool first = tt + 1 <= a.p.tps;
#pragma unroll
                        for (int j = 0; j < NG; ++j)
#pragma unroll
                            for (int q = 0; q < 4; ++q) {
                                tot[(4 * j + q) * THREADS] =
                                    __fadd_rn(first ? 0.f : tot[(4 * j + q) * THREADS], acc[j][q]);
                                acc[j][q] = 0.f;
                            }
                    }
                }
                __syncthreads(); /* everyone done with stage tt before it is refilled */
            }
        }
    }
    if (!active)
        return;
    const int rows = a.ws.rows;
#pragma unroll
    for (int j = 0; j < NG; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int row = R * 16 + g + 8 * (q >> 1), col = c0 + 8 * j + 2 * t + (q & 1);
            if (row < rows && col >= cbeg && col < cend)
                a.y[(size_t)col * a.ystride + row] = tot[(4 * j + q) * THREADS];
        }
}

template <int TYPE>
static int mm_launch(MmArgs &a, int n_pad, cudaStream_t stream, strata_error *err)
{
    void (*kern)(const MmArgs) = matmul_kernel<TYPE>;
    mm_layout(TYPE, &a);
    const size_t smem = (size_t)a.off_x + 2 * (size_t)a.stage_bytes;
    int cap = 0;
    const int rc = launch_capacity((const void *)kern, THREADS, smem, 1, &cap, err);
    if (rc)
        return rc;
    /* grouped: expert e has at most (n_e + 3) / 64 + 1 tiles (group_tiles) */
    const unsigned ty = a.goff ? (unsigned)((a.n + 3 * a.gexp) / MM_COLS + a.gexp) : (unsigned)(n_pad / MM_COLS);
    const dim3 grid((unsigned)((a.p.mt + WARPS - 1) / WARPS), ty);
    kern<<<grid, THREADS, smem, stream>>>(a);
    CUDA_CHECK_LAUNCH(err, "matmul_kernel");
    return 0;
}

extern "C" size_t cuda_matmul_scratch_bytes(int type, int64_t cols, int64_t n)
{
    if (n <= MV_COLS)
        return 0;
    return mm_scratch(type, cols, n).bytes;
}

/* A grouped tile may start at any token below n and reads 64 from there. */
extern "C" size_t cuda_matmul_grouped_scratch_bytes(int type, int64_t cols, int64_t n)
{
    return mm_scratch(type, cols, n + MM_COLS).bytes;
}

/* Quantize the n tokens of x into scratch (zeros up to room tokens), then
 * the tensor-core kernel over one weight matrix (goff NULL) or over the
 * experts of a grouped call. */
static int mm_run(const char *who, int type, const void *w, int64_t rows, int64_t cols, const float *x, int64_t n,
                  int64_t room, const int32_t *goff, int gexp, float *y, void *scratch, size_t scratch_bytes,
                  cudaStream_t stream, strata_error *err)
{
    const size_t wbytes = cuda_weight_bytes(type, rows, cols);
    if (!wbytes || type == GGML_TYPE_F32)
        return strata_err(err, STRATA_E_UNSUPPORTED, "%s: %s %lld x %lld not supported", who, type_name(type),
                          (long long)rows, (long long)cols);
    Plan p;
    if (plan_make(type, rows, cols, &p))
        return strata_err(err, STRATA_E_UNSUPPORTED, "%s: %lld columns (at most %d)", who, (long long)cols,
                          MAX_SEGS * SEG_MAX_K);
    const MmScratch s = mm_scratch(type, cols, room);
    if (!scratch || scratch_bytes < s.bytes)
        return strata_err(err, STRATA_E_ARG, "%s: scratch of %zu bytes, %zu needed", who, scratch_bytes, s.bytes);
    const Geo gm = geo(type);
    MmArgs a;
    a.ws = Wsrc{(const uint8_t *)w, (int)rows, (int)cols, p.ntk};
    a.p = p;
    a.y = y;
    a.ystride = rows;
    a.n = (int)n;
    a.goff = goff;
    a.gexp = gexp;
    a.gbytes = wbytes;
    if (gm.i8) {
        int8_t *q = (int8_t *)scratch;
        float *d = (float *)((uint8_t *)scratch + s.off_d);
        int *sm = (int *)((uint8_t *)scratch + s.off_s);
        const long groups = (long)s.n_pad * s.nb;
        const unsigned blocks = (unsigned)((groups + 7) / 8);
        switch (gm.xb) {
        case 256: quant_x_kernel<256><<<blocks, 256, 0, stream>>>(x, (int)n, (int)cols, s.n_pad, s.cols_pad, q, d, sm); break;
        case 64: quant_x_kernel<64><<<blocks, 256, 0, stream>>>(x, (int)n, (int)cols, s.n_pad, s.cols_pad, q, d, sm); break;
        default: quant_x_kernel<32><<<blocks, 256, 0, stream>>>(x, (int)n, (int)cols, s.n_pad, s.cols_pad, q, d, sm); break;
        }
        CUDA_CHECK_LAUNCH(err, "quant_x_kernel");
        a.act = Act{q, d, sm, nullptr, s.cols_pad, s.n_pad};
    } else {
        __half *h = (__half *)scratch;
        half_x_kernel<<<1024, 256, 0, stream>>>(x, (int)n, (int)cols, s.n_pad, s.cols_pad, h);
        CUDA_CHECK_LAUNCH(err, "half_x_kernel");
        a.act = Act{nullptr, nullptr, nullptr, h, s.cols_pad, 0};
    }
    switch (type) {
    case GGML_TYPE_IQ3_XXS: return mm_launch<GGML_TYPE_IQ3_XXS>(a, s.n_pad, stream, err);
    case GGML_TYPE_Q2_0: return mm_launch<GGML_TYPE_Q2_0>(a, s.n_pad, stream, err);
    case GGML_TYPE_Q4_0: return mm_launch<GGML_TYPE_Q4_0>(a, s.n_pad, stream, err);
    case GGML_TYPE_Q8_0: return mm_launch<GGML_TYPE_Q8_0>(a, s.n_pad, stream, err);
    case GGML_TYPE_F16: return mm_launch<GGML_TYPE_F16>(a, s.n_pad, stream, err);
    case GGML_TYPE_BF16: return mm_launch<GGML_TYPE_BF16>(a, s.n_pad, stream, err);
#define MM_CASE(T)                                                                                       \
    case T: return mm_launch<T>(a, s.n_pad, stream, err);
        WB_FOR_EACH(MM_CASE)
#undef MM_CASE
    default: return strata_err(err, STRATA_E_UNSUPPORTED, "%s: type %s", who, type_name(type));
    }
}

extern "C" int cuda_matmul(int type, const void *w, int64_t rows, int64_t cols, const float *x, int64_t n,
                           float *y, void *scratch, size_t scratch_bytes, cudaStream_t stream, strata_error *err)
{
    if (n >= 1 && n <= MV_COLS)
        return cuda_matvec(type, w, rows, cols, x, (int)n, y, stream, err);
    if (!w || !x || !y || n < 1 || n > (1 << 24))
        return strata_err(err, STRATA_E_ARG, "cuda_matmul: bad arguments (n = %lld)", (long long)n);
    if (type == GGML_TYPE_F32) {
        const size_t wbytes = cuda_weight_bytes(type, rows, cols);
        if (!wbytes)
            return strata_err(err, STRATA_E_UNSUPPORTED, "cuda_matmul: F32 %lld x %lld not supported",
                              (long long)rows, (long long)cols);
        return f32_matmul((const float *)w, NULL, wbytes, rows, cols, x, n, y, stream, err);
    }
    return mm_run("cuda_matmul", type, w, rows, cols, x, n, n, NULL, 0, y, scratch, scratch_bytes, stream, err);
}

extern "C" int cuda_matmul_grouped(int type, const void *w, int64_t rows, int64_t cols, int n_expert,
                                   const int32_t *d_offsets, const float *x, int64_t n, float *y, void *scratch,
                                   size_t scratch_bytes, cudaStream_t stream, strata_error *err)
{
    if (!w || !d_offsets || !x || !y || n < 1 || n > (1 << 24) || n_expert < 1 || n_expert > 65536)
        return strata_err(err, STRATA_E_ARG, "cuda_matmul_grouped: bad arguments (n = %lld, %d experts)",
                          (long long)n, n_expert);
    return mm_run("cuda_matmul_grouped", type, w, rows, cols, x, n, n + MM_COLS, d_offsets, n_expert, y, scratch,
                  scratch_bytes, stream, err);
}

/* Prefill of a mixed stack (matvec_mix.cu): the activations in fp16 once,
 * then one launch per part with the STACKED shape's plan (its segments are
 * what the decode launch uses for every row), writing the part's rows at
 * their offset in the stacked output. */
namespace wt {
int mm_mix(const cuda_mix *m, int64_t rows_total, int64_t cols, const float *x, int64_t n, float *y, void *scratch,
           size_t scratch_bytes, cudaStream_t stream, strata_error *err)
{
    Plan p;
    if (plan_make(m->type[0], rows_total, cols, &p))
        return strata_err(err, STRATA_E_UNSUPPORTED, "cuda_matmul_mix: %lld x %lld not supported",
                          (long long)rows_total, (long long)cols);
    const MmScratch s = mm_scratch(m->type[0], cols, n);
    if (!scratch || scratch_bytes < s.bytes)
        return strata_err(err, STRATA_E_ARG, "cuda_matmul_mix: scratch of %zu bytes, %zu needed", scratch_bytes,
                          s.bytes);
    __half *h = (__half *)scratch;
    half_x_kernel<<<1024, 256, 0, stream>>>(x, (int)n, (int)cols, s.n_pad, s.cols_pad, h);
    CUDA_CHECK_LAUNCH(err, "half_x_kernel");
    int64_t r0 = 0;
    for (int i = 0; i < m->n; i++) {
        MmArgs a;
        a.ws = Wsrc{(const uint8_t *)m->w[i], (int)m->rows[i], (int)cols, p.ntk};
        a.p = p;
        a.p.mt = (int)((m->rows[i] + 15) / 16); /* the part's m-tiles, the stack's segments */
        a.act = Act{nullptr, nullptr, nullptr, h, s.cols_pad, 0};
        a.y = y + r0;
        a.ystride = rows_total;
        a.n = (int)n;
        a.goff = NULL;
        a.gexp = 0;
        a.gbytes = 0;
        int rc;
        switch (m->type[i]) {
#define MM_CASE(T)                                                                                       \
    case T: rc = mm_launch<T>(a, s.n_pad, stream, err); break;
            WB_FOR_EACH(MM_CASE)
#undef MM_CASE
        default: return strata_err(err, STRATA_E_UNSUPPORTED, "cuda_matmul_mix: type %s", type_name(m->type[i]));
        }
        if (rc)
            return rc;
        r0 += m->rows[i];
    }
    return 0;
}
} /* namespace wt */
