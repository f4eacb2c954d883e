/* weights.cu: the device layout of weight matrices (see wtile.cuh for the
 * tile format and why), host-side packing and upload, and the read-bandwidth
 * probe the kernel bench measures the card with.
 *
 * Packing only moves bytes: every byte of a GGUF block lands somewhere in
 * its tile, padding is zero, and cuda_embed reads a row back bit-exactly
 * (tested), which is the check that pack and decoders agree. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/wtile.cuh"

using wt::Geo;

extern "C" int cuda_weight_supported(int type)
{
    return wt::geo(type).kt != 0;
}

extern "C" size_t cuda_weight_bytes(int type, int64_t rows, int64_t cols)
{
    const Geo g = wt::geo(type);
    if (!g.kt || rows < 1 || cols < 1)
        return 0;
    if (type == GGML_TYPE_F16 || type == GGML_TYPE_BF16 || type == GGML_TYPE_F32)
        return cols % 8 ? 0 : (size_t)rows * (size_t)cols * (type == GGML_TYPE_F32 ? 4 : 2);
    const type_traits *tt = type_traits_get(type);
    if (!tt || cols % tt->blck)
        return 0;
    return (size_t)((rows + 15) / 16) * (size_t)((cols + g.kt - 1) / g.kt) * (size_t)g.tile;
}

/* ---- packers: one ggml row-tile (16 block rows) into tile order ---------- */

static inline uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline void wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* blk: the row's block; tile: its tile; g = row % 8, h = (row % 16) / 8. */
static void pack_iq3(const uint8_t *blk, uint8_t *tile, int g, int h)
{
    const uint8_t *gidx = blk + 2, *ss = blk + 66;
    tile[1536 + 4 * g + 2 * h] = blk[0];
    tile[1536 + 4 * g + 2 * h + 1] = blk[1];
    for (int t = 0; t < 4; t++) {
        const int lane = 4 * g + t;
        for (int sb = 0; sb < 8; sb++)
            for (int e = 0; e < 2; e++)
                tile[32 * lane + 16 * h + 4 * (sb >> 1) + 2 * (sb & 1) + e] = gidx[8 * sb + 2 * t + e];
        for (int hh = 0; hh < 2; hh++) {
            uint32_t w = 0;
            for (int j = 0; j < 4; j++)
                w |= ((rd32(ss + 4 * (4 * hh + j)) >> (7 * t)) & 127u) << (7 * j);
            w |= (rd32(ss + 4 * (2 * t + hh)) >> 28) << 28;
            wr32(tile + 1024 + 16 * lane + 4 * (2 * h + hh), w);
        }
    }
}

/* Q2_0 / Q4_0: block b (0, 1) of the tile. */
static void pack_q2(const uint8_t *blk, uint8_t *tile, int g, int h, int b)
{
    const uint8_t *qs = blk + 2;
#define Q2(j) ((qs[(j) / 4] >> (2 * ((j) % 4))) & 3)
    tile[512 + 8 * g + 2 * (2 * b + h)] = blk[0];
    tile[512 + 8 * g + 2 * (2 * b + h) + 1] = blk[1];
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < 4; i++)
            tile[16 * (4 * g + t) + 4 * (2 * b + h) + i] =
                (uint8_t)(Q2(8 * t + i) | Q2(8 * t + 4 + i) << 2 | Q2(32 + 8 * t + i) << 4 |
                          Q2(32 + 8 * t + 4 + i) << 6);
#undef Q2
}

static void pack_q4(const uint8_t *blk, uint8_t *tile, int g, int h, int b)
{
    const uint8_t *qs = blk + 2;
#define Q4(j) ((j) < 16 ? qs[(j)] & 15 : qs[(j) - 16] >> 4)
    tile[512 + 8 * g + 2 * (2 * b + h)] = blk[0];
    tile[512 + 8 * g + 2 * (2 * b + h) + 1] = blk[1];
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < 4; i++)
            tile[16 * (4 * g + t) + 4 * (2 * b + h) + i] = (uint8_t)(Q4(8 * t + i) | Q4(8 * t + 4 + i) << 4);
#undef Q4
}

static void pack_q8(const uint8_t *blk, uint8_t *tile, int g, int h)
{
    tile[512 + 4 * g + 2 * h] = blk[0];
    tile[512 + 4 * g + 2 * h + 1] = blk[1];
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < 8; i++)
            tile[16 * (4 * g + t) + 4 * (2 * (i >> 2) + h) + (i & 3)] = blk[2 + 8 * t + i];
}

extern "C" int cuda_weight_pack(int type, int64_t rows, int64_t cols, const void *src, void *dst,
                                strata_error *err)
{
    const size_t bytes = cuda_weight_bytes(type, rows, cols);
    if (!bytes || !src || !dst)
        return strata_err(err, STRATA_E_UNSUPPORTED, "cuda_weight_pack: %s %lld x %lld not supported",
                          type_name(type), (long long)rows, (long long)cols);
    if (type == GGML_TYPE_F16 || type == GGML_TYPE_BF16 || type == GGML_TYPE_F32) {
        memcpy(dst, src, bytes);
        return 0;
    }
    if (wt::is_blk(type)) {
        /* block tiles (wblocks.cuh): each row's bytes of a k-tile, whole
         * blocks, at (row % 16) * RB of its tile; the rest stays zero */
        const int RB = wb::rb(type);
        const size_t rowb = type_row_bytes(type, cols);
        const int64_t ntk = (cols + 255) / 256;
        memset(dst, 0, bytes);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t T = 0; T < ntk; T++) {
                const size_t at = (size_t)T * RB, n = rowb - at < (size_t)RB ? rowb - at : (size_t)RB;
                memcpy((uint8_t *)dst + ((size_t)((r / 16) * ntk + T) * 16 + (size_t)(r % 16)) * RB,
                       (const uint8_t *)src + (size_t)r * rowb + at, n);
            }
        return 0;
    }
    const Geo gm = wt::geo(type);
    const type_traits *tt = type_traits_get(type);
    const size_t rb = type_row_bytes(type, cols);
    const int64_t nblk = cols / tt->blck, ntk = (cols + gm.kt - 1) / gm.kt;
    const int bpt = gm.kt / tt->blck; /* blocks per tile */
    memset(dst, 0, bytes);
    for (int64_t r = 0; r < rows; r++) {
        const int64_t R = r / 16;
        const int g = (int)(r % 8), h = (int)((r % 16) / 8);
        for (int64_t T = 0; T < ntk; T++) {
            uint8_t *tile = (uint8_t *)dst + (size_t)(R * ntk + T) * gm.tile;
            for (int b = 0; b < bpt; b++) {
                const int64_t bi = T * bpt + b;
                if (bi >= nblk)
                    break;
                const uint8_t *blk = (const uint8_t *)src + (size_t)r * rb + (size_t)bi * tt->bytes;
                switch (type) {
                case GGML_TYPE_IQ3_XXS: pack_iq3(blk, tile, g, h); break;
                case GGML_TYPE_Q2_0: pack_q2(blk, tile, g, h, b); break;
                case GGML_TYPE_Q4_0: pack_q4(blk, tile, g, h, b); break;
                case GGML_TYPE_Q8_0: pack_q8(blk, tile, g, h); break;
                }
            }
        }
    }
    return 0;
}

extern "C" int cuda_weight_upload(int type, int64_t rows, int64_t cols, const void *src, void *dst,
                                  cudaStream_t stream, strata_error *err)
{
    const size_t bytes = cuda_weight_bytes(type, rows, cols);
    if (!bytes)
        return strata_err(err, STRATA_E_UNSUPPORTED, "cuda_weight_upload: %s %lld x %lld not supported",
                          type_name(type), (long long)rows, (long long)cols);
    void *tmp = malloc(bytes);
    if (!tmp)
        return strata_err(err, STRATA_E_NOMEM, "cuda_weight_upload: %zu bytes of host memory", bytes);
    int rc = cuda_weight_pack(type, rows, cols, src, tmp, err);
    if (rc == 0) {
        cudaError_t e = cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyHostToDevice, stream);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(stream);
        if (e != cudaSuccess)
            rc = strata_cuda_fail(err, e, "cuda_weight_upload: cudaMemcpyAsync", __FILE__, __LINE__);
    }
    free(tmp);
    return rc;
}

/* ---- read probe ----------------------------------------------------------
 * The bandwidth ceiling the weight kernels are measured against: 16-byte
 * non-coherent loads, 4 independent per thread per iteration, a grid-stride
 * loop, nothing written but one word that depends on everything read. */
__global__ void __launch_bounds__(512) read_probe_kernel(const uint4 *p, size_t n16, uint32_t *sink)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t acc = 0;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        const uint4 a = __ldg(p + i), b = __ldg(p + i + stride), c = __ldg(p + i + 2 * stride),
                    d = __ldg(p + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n16; i += stride) {
        const uint4 a = __ldg(p + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x9e3779b9u) /* data-dependent: the loads cannot be dropped */
        *sink = acc;
}

extern "C" int cuda_read_probe(const void *buf, size_t bytes, uint32_t *sink, cudaStream_t stream,
                               strata_error *err)
{
    if (!buf || bytes % 16 || !sink)
        return strata_err(err, STRATA_E_ARG, "cuda_read_probe: bad arguments");
    int dev = 0, sms = 0;
    CUDA_CHECK(err, cudaGetDevice(&dev));
    CUDA_CHECK(err, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    read_probe_kernel<<<sms * 4, 512, 0, stream>>>((const uint4 *)buf, bytes / 16, sink);
    CUDA_CHECK_LAUNCH(err, "read_probe_kernel");
    return 0;
}

/* ---- launch capacity, looked up once --------------------------------------
 * Raising a kernel's shared-memory limit and asking the occupancy calculator
 * are host calls that a graph capture in global mode may refuse, and cost
 * microseconds: do them once per (kernel, device, shared memory, cluster
 * size) and remember the answer. */
namespace wt {

struct Capacity {
    const void *fn;
    int dev, nseg, threads;
    size_t smem;
    int value;
};
static Capacity cap_cache[256];
static int cap_n;
static pthread_mutex_t cap_mu = PTHREAD_MUTEX_INITIALIZER;

int launch_capacity(const void *fn, int threads, size_t smem, int nseg, int *out, strata_error *err)
{
    int dev = 0;
    CUDA_CHECK(err, cudaGetDevice(&dev));
    pthread_mutex_lock(&cap_mu);
    for (int i = 0; i < cap_n; i++)
        if (cap_cache[i].fn == fn && cap_cache[i].dev == dev && cap_cache[i].smem == smem && cap_cache[i].nseg == nseg &&
            cap_cache[i].threads == threads) {
            *out = cap_cache[i].value;
            pthread_mutex_unlock(&cap_mu);
            return 0;
        }
    pthread_mutex_unlock(&cap_mu);
    int maxsm = 0, sms = 0, v = 0;
    CUDA_CHECK(err, cudaDeviceGetAttribute(&maxsm, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    CUDA_CHECK(err, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    /* the kernel's static shared memory (matmul's grouped tile) comes off
     * what a block may take dynamically */
    cudaFuncAttributes fa;
    CUDA_CHECK(err, cudaFuncGetAttributes(&fa, fn));
    maxsm -= (int)fa.sharedSizeBytes;
    if (smem > (size_t)maxsm)
        return strata_err(err, STRATA_E_UNSUPPORTED, "weight kernel: %zu bytes of shared memory, the card has %d", smem,
                          maxsm);
    CUDA_CHECK(err, cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, maxsm));
    /* every weight kernel asks for the same L1 / shared-memory split, the
     * most shared memory (a hint: with none the driver picks a split per
     * launch, and the kernels of a mix need 139-193 KiB where IQ3_XXS's
     * need 173-228; an SM changes its split only when idle, so a launch
     * whose split differs from the running kernel's cannot place blocks
     * beside it) */
    CUDA_CHECK(err, cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         cudaSharedmemCarveoutMaxShared));
    if (nseg > 1) {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = 1;
        attr[0].val.clusterDim.y = (unsigned)nseg;
        attr[0].val.clusterDim.z = 1;
        cfg.gridDim = dim3((unsigned)sms, (unsigned)nseg, 1);
        cfg.blockDim = dim3((unsigned)threads, 1, 1);
        cfg.dynamicSmemBytes = smem;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        CUDA_CHECK(err, cudaOccupancyMaxActiveClusters(&v, fn, &cfg));
    } else {
        CUDA_CHECK(err, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, fn, threads, smem));
        v *= sms;
    }
    if (v < 1)
        v = 1;
    pthread_mutex_lock(&cap_mu);
    if (cap_n < (int)(sizeof cap_cache / sizeof cap_cache[0]))
        cap_cache[cap_n++] = Capacity{fn, dev, nseg, threads, smem, v};
    pthread_mutex_unlock(&cap_mu);
    *out = v;
    return 0;
}

/* The plan's constants, or STRATA_MV_BLOCKS / STRATA_MV_SEGS / STRATA_MV_TPS
 * (1..4096, 1..MAX_SEGS, 1..64) for A/B runs; read once (wtile.cuh,
 * plan_make). */
static int env_int(const char *name, int dflt, int lo, int hi)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end = NULL;
    const long x = strtol(v, &end, 10);
    return (*end || x < lo || x > hi) ? dflt : (int)x;
}
static pthread_once_t plan_once = PTHREAD_ONCE_INIT;
static int plan_b = BLOCK_TARGET, plan_s = SEGS_FIT, plan_t = TPS_MIN;
static void plan_read()
{
    plan_b = env_int("STRATA_MV_BLOCKS", BLOCK_TARGET, 1, 4096);
    plan_s = env_int("STRATA_MV_SEGS", SEGS_FIT, 1, MAX_SEGS);
    plan_t = env_int("STRATA_MV_TPS", TPS_MIN, 1, 64);
}
int plan_tps_min()
{
    pthread_once(&plan_once, plan_read);
    return plan_t;
}
int plan_blocks()
{
    pthread_once(&plan_once, plan_read);
    return plan_b;
}
int plan_segs()
{
    pthread_once(&plan_once, plan_read);
    return plan_s;
}

} /* namespace wt */
