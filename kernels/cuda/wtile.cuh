/* wtile.cuh: the device layout of weight matrices and the per-type tile
 * decoders shared by matvec.cu, matmul.cu and embed.cu (C++ only).
 *
 * Layout ("tiles").  A matrix of rows x cols in a block type is cut into tiles
 * of 16 rows x KT columns (KT: IQ3_XXS 256, Q2_0 128, Q4_0 64, Q8_0 32),
 * stored tile row by tile row, k-tiles contiguous:
 *     tile (R, T) at  w + (R * ntk + T) * TILE_BYTES,  ntk = ceil(cols / KT).
 * A tile holds exactly the bytes of its 16 GGUF block rows (same size), put
 * in the order in which the 32 lanes of one warp consume them as the A
 * operand of an integer tensor-core product mma.m16n8k32: lane L = 4g + t
 * (g = L/4, t = L%4) owns rows g and g+8 of the tile and, in every 32-column
 * chunk, the 8 elements 8t..8t+7.  So a lane fetches its whole share of a
 * tile with one to three 16-byte loads (fully coalesced: the warp reads the
 * tile's bytes once, in order) and decodes it in registers; nothing goes
 * through shared memory except the IQ3_XXS grid/sign tables.  Rows are
 * padded to a multiple of 16 and columns to a multiple of KT with zero bytes
 * (a zero scale, so padding contributes exactly 0).  F16 and F32 stay
 * row-major (a lane's 8 halves of a row are one aligned 16-byte load).
 *
 * Why the k order may be permuted: mma sums over k, so any assignment of
 * elements to k-slots works as long as the activations (B operand) use the
 * same one.  Here lane t's k-slots 4t..4t+3 hold elements 8t..8t+3 and its
 * slots 4t+16..4t+19 hold elements 8t+4..8t+7: the B fragment is then 8
 * consecutive int8 activations, one 8-byte load.
 *
 * Arithmetic (the same code path for decode and prefill, so a row's result is
 * bitwise the same whatever kernel and batch computed it):
 *   activations: per token, per XB-element block (XB = 256 IQ3_XXS, 64 Q2_0,
 *     32 Q4_0/Q8_0): d = amax / 127, q = rint(x * 127 / amax), sum = sum(q).
 *   IQ3_XXS: per 32-sub-block an exact int32 dot of signed magnitudes with q
 *     (two mmas: ones' complement of the negated magnitudes, plus the count
 *     correction), times (2 ls + 1) summed in int32 over the super-block,
 *     then acc = fma(d/4 * dx, float(isum), acc).
 *   Q2_0, Q4_0: unsigned codes times q, the code offset (1 or 8) removed
 *     exactly through the mma's C input (-offset * sum(q)).  Q8_0: s8 x s8.
 *     Each block's int32 dot starts from the bit pattern of 1.5 * 2^23, so
 *     read as a float it is 1.5 * 2^23 + dot exactly (|dot| < 2^22): the
 *     int->float conversion is one subtraction.  acc = fma(d * dx, dot, acc).
 *   F16: activations rounded to fp16, mma.m16n8k16 with f32 accumulation.
 *   Segments: the k-tiles are cut into nseg segments (a function of rows and
 *     cols only, never of the batch); each segment is accumulated from 0 and
 *     the segment sums are added in order: y = ((0 + s0) + s1) + ...  The
 *     decode kernel computes the segments in parallel (one block each, the
 *     last to finish adding them up), the prefill kernel one after another. */
#ifndef STRATA_WTILE_CUH
#define STRATA_WTILE_CUH

#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define _Static_assert static_assert /* model/quant.h is C11 */
extern "C" {
#include "model/quant.h"
}
#undef _Static_assert
#include "kernels/cuda/act.cuh" /* swiglu1 */
#include "kernels/cuda/wblocks.cuh"

namespace wt {

constexpr int WARPS = 8;                /* prefill: warps per block, 8 m-tiles */
constexpr int THREADS = WARPS * 32;
constexpr int MV_WARPS = 16;            /* decode: warps per block (one block per SM) */
constexpr int MV_THREADS = MV_WARPS * 32;
constexpr int BLOCK_ROWS = MV_WARPS * 16; /* decode: rows per row-block */
constexpr int MAX_SEGS = 8;             /* segments at most (so columns: 32768) */
constexpr int SEG_MAX_K = 4096;         /* a segment's activations fit in shared memory */
constexpr int BLOCK_TARGET = 128;       /* decode blocks (row-blocks x segments) wanted */
constexpr int SEGS_FIT = 8;             /* segments per row-block when splitting for width */
constexpr int TPS_MIN = 2;              /* k-tiles per segment at least (when splitting for width) */
constexpr int MM_COLS = 64;             /* prefill: tokens per block (8 mma column groups) */
constexpr int MV_COLS = 8;              /* decode: tokens per call at most */
constexpr int TAB_BYTES = 65536;        /* IQ3_XXS tables in shared memory */
constexpr int BIAS_I = 0x4B400000;      /* bit pattern of 1.5 * 2^23 */
constexpr float BIAS_F = 12582912.0f;

/* Per-type geometry: k-tile, tile bytes (0: row-major), activation block, int8 path. */
struct Geo {
    int kt, tile, xb, i8;
};
__host__ __device__ constexpr Geo geo(int type)
{
    switch (type) {
    case GGML_TYPE_IQ3_XXS: return Geo{256, 1568, 256, 1};
    case GGML_TYPE_Q2_0: return Geo{128, 576, 64, 1};
    case GGML_TYPE_Q4_0: return Geo{64, 576, 32, 1};
    case GGML_TYPE_Q8_0: return Geo{32, 544, 32, 1};
    case GGML_TYPE_F16: return Geo{32, 0, 32, 0};
    case GGML_TYPE_BF16: return Geo{32, 0, 32, 0};
    case GGML_TYPE_F32: return Geo{32, 0, 32, 0};
    default: /* block tiles (wblocks.cuh): 16 row chunks of 256 columns, fp16 path */
        return wb::rb(type) ? Geo{256, 16 * wb::rb(type), 32, 0} : Geo{0, 0, 0, 0};
    }
}
/* Read from their ggml blocks (wblocks.cuh), decoded to fp16 for the mma. */
__host__ __device__ constexpr bool is_blk(int type) { return wb::rb(type) != 0; }

/* The plan's two constants, BLOCK_TARGET and SEGS_FIT unless the
 * environment sets STRATA_MV_BLOCKS / STRATA_MV_SEGS (read once per
 * process, for A/B runs on the card: the plan stays a function of the shape
 * within a process, so decode and prefill still agree; weights.cu). */
int plan_blocks();
int plan_segs();
int plan_tps_min(); /* TPS_MIN, or STRATA_MV_TPS */

/* The reduction plan of a matrix: depends on (type, rows, cols) only. */
struct Plan {
    int mt;    /* 16-row tiles */
    int ntk;   /* k-tiles */
    int tps;   /* k-tiles per segment */
    int nseg;  /* segments */
    int kt, xb;
};
inline int plan_make(int type, int64_t rows, int64_t cols, Plan *p)
{
    const Geo gm = geo(type);
    if (!gm.kt || rows < 1 || cols < 1 || rows > (1LL << 30) || cols > MAX_SEGS * SEG_MAX_K)
        return -1;
    p->kt = gm.kt;
    p->xb = gm.xb;
    p->mt = (int)((rows + 15) / 16);
    p->ntk = (int)((cols + gm.kt - 1) / gm.kt);
    /* Split k so that the decode kernel's blocks (one per SM, row-blocks x
     * segments) fill the card.  The segments fold through global memory
     * with a ticket (matvec.cu), so no co-scheduling limit applies: 16
     * row-blocks x 8 segments = 128 blocks run on 128 of the H200's 132
     * SMs.  (Thread-block clusters, which folded them before, fit only 15
     * clusters of 8 such blocks and ran that as two waves; they wanted 96
     * blocks and 6 segments: doc/cuda-kernels.md.)  But at least TPS_MIN
     * k-tiles a segment: every block pays the tables, the activations and
     * the fold, and the MoE experts' small matrices (768 x 2048, 2048 x 768)
     * come 8-16 pairs a launch, which fill the card without a k-split.  At most
     * BLOCK_TARGET blocks and SEGS_FIT segments — constants, never the
     * device's numbers, so the plan stays a function of the shape — and
     * segments no longer than SEG_MAX_K (their activations sit in shared
     * memory). */
    const int nrb = (p->mt + BLOCK_ROWS / 16 - 1) / (BLOCK_ROWS / 16);
    int s = plan_blocks() / nrb;
    if (s > plan_segs())
        s = plan_segs();
    if (s > p->ntk / plan_tps_min())
        s = p->ntk / plan_tps_min();
    if (s < 1)
        s = 1;
    const int s_min = (int)((cols + SEG_MAX_K - 1) / SEG_MAX_K);
    if (s < s_min)
        s = s_min;
    if (s > p->ntk)
        s = p->ntk;
    p->tps = (p->ntk + s - 1) / s;
    while (p->tps * gm.kt > SEG_MAX_K + gm.kt) /* rounding pushed a segment over */
        p->tps--;
    p->nseg = (p->ntk + p->tps - 1) / p->tps;
    return p->nseg <= MAX_SEGS ? 0 : -1;
}

/* ---- small device helpers --------------------------------------------- */

__device__ __forceinline__ uint4 ldg16(const void *p) { return __ldg((const uint4 *)p); }

template <bool G> __device__ __forceinline__ uint2 ld8(const int8_t *p)
{
    if (G)
        return __ldg((const uint2 *)p);
    return *(const uint2 *)p;
}
template <bool G> __device__ __forceinline__ float2 ldf2(const float *p)
{
    if (G)
        return __ldg((const float2 *)p);
    return *(const float2 *)p;
}
template <bool G> __device__ __forceinline__ int2 ldi2(const int *p)
{
    if (G)
        return __ldg((const int2 *)p);
    return *(const int2 *)p;
}
template <bool G> __device__ __forceinline__ uint4 ldh16(const __half *p)
{
    if (G)
        return __ldg((const uint4 *)p);
    return *(const uint4 *)p;
}

__device__ __forceinline__ uint32_t word4(const uint4 &v, int i)
{
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; /* i is a constant after unrolling */
}
__device__ __forceinline__ float h2f(uint32_t bits16) { return __half2float(__ushort_as_half((unsigned short)bits16)); }

/* D = A * B + C, A 16x32 (s8 or u8), B 32x8 s8, C/D s32 (PTX ISA fragment
 * layouts: a[0] row g k 4t.., a[1] row g+8, a[2] row g k 16+4t.., a[3] row
 * g+8; b[0] k 4t.. col g, b[1] k 16+4t..; c[0..1] row g cols 2t,2t+1,
 * c[2..3] row g+8). */
__device__ __forceinline__ void mma_s8(int (&d)[4], const uint32_t (&a)[4], uint2 b, const int (&c)[4])
{
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y), "r"(c[0]), "r"(c[1]),
          "r"(c[2]), "r"(c[3]));
}
__device__ __forceinline__ void mma_u8(int (&d)[4], const uint32_t (&a)[4], uint2 b, const int (&c)[4])
{
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y), "r"(c[0]), "r"(c[1]),
          "r"(c[2]), "r"(c[3]));
}
/* f16 m16n8k16, f32 accumulate in place (a[0] row g k 2t,2t+1; a[1] row g+8;
 * a[2] row g k 2t+8,2t+9; a[3] row g+8; b[0] k 2t,2t+1; b[1] k 2t+8,2t+9). */
__device__ __forceinline__ void mma_f16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* ---- activations (the B operand) ----------------------------------------
 * int8: token c's element k at q[c * cs + k]; its block b's scale and sum at
 * d[b * bs + c], s[b * bs + c] (block-major, so a lane's two tokens 2t, 2t+1
 * are one 8-byte load).  fp16: h[c * cs + k].  Shared memory (decode) or
 * global memory (prefill, G = true). */
struct Act {
    const int8_t *q;
    const float *d;
    const int *s;
    const __half *h;
    int cs, bs;
};

/* Quantize one activation block of XB floats (the first `valid` of src; the
 * rest are taken as 0) with one warp: the same code for decode and prefill,
 * so both see identical int8 values.  up (cuda_matvec_swiglu): the block's
 * values are swiglu1(src[i], up[i]), the float cuda_swiglu would have
 * stored, so the int8 values are those of the unfused pair. */
template <int XB>
__device__ __forceinline__ void quant_block(const float *src, int valid, int8_t *dst, float *d, int *s, int lane,
                                            const float *up = nullptr)
{
    constexpr int E = XB / 32;
    float v[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
        const int i = lane * E + e;
        v[e] = i < valid ? (up ? swiglu1(src[i], up[i]) : src[i]) : 0.f;
    }
    float am = 0.f;
#pragma unroll
    for (int e = 0; e < E; ++e)
        am = fmaxf(am, fabsf(v[e]));
    am = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(am)));
    const float id = am > 0.f ? 127.f / am : 0.f;
    int sum = 0;
    uint32_t packed[(E + 3) / 4] = {};
#pragma unroll
    for (int e = 0; e < E; ++e) {
        int q = __float2int_rn(v[e] * id);
        q = q > 127 ? 127 : q < -127 ? -127 : q;
        sum += q;
        packed[e / 4] |= (uint32_t)(q & 0xff) << (8 * (e % 4));
    }
    if (E == 1)
        dst[lane] = (int8_t)(packed[0] & 0xff);
    else if (E == 2)
        ((uint16_t *)dst)[lane] = (uint16_t)packed[0];
    else
        ((uint2 *)dst)[lane] = make_uint2(packed[0], packed[(E + 3) / 4 - 1]);
    sum = __reduce_add_sync(0xffffffffu, sum);
    if (lane == 0) {
        *d = am / 127.f;
        *s = sum;
    }
}

/* The decode kernels' fp16 activations (F16 and the block tiles): tokens
 * 0..n-1 of segment [kb, kb + klen) into xh (token c at c * hstride),
 * columns past cols as 0; xu set: swiglu1(x, xu) element by element.  A
 * thread's loads are issued four at a time before their stores, so staging
 * a segment costs one L2 round trip, not one per 512 elements (a plain loop
 * waited for each load before the next; the down projection's 1792-column
 * segment took four in a row). */
__device__ __forceinline__ void stage_h16(const float *x, const float *xu, int64_t xstride, int kb, int klen,
                                          int cols, int n, __half *xh, int hstride)
{
    const int total = n * klen;
    for (int i0 = threadIdx.x; i0 < total; i0 += 4 * MV_THREADS) {
        float v[4];
        int at[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int i = i0 + u * MV_THREADS;
            const int c = i / klen, k = i - c * klen;
            const size_t o = (size_t)c * xstride + kb + k;
            at[u] = i < total ? c * hstride + k : -1;
            v[u] = i < total && kb + k < cols ? (xu ? swiglu1(x[o], xu[o]) : x[o]) : 0.f;
        }
#pragma unroll
        for (int u = 0; u < 4; ++u)
            if (at[u] >= 0)
                xh[at[u]] = __float2half_rn(v[u]);
    }
}

/* ---- IQ3_XXS --------------------------------------------------------------
 * Tile (1568 bytes = 16 rows x 98):
 *   [0, 1024)     grid indices: lane L at 32L: row g then row g+8, 16 bytes
 *                 each; word p (sub-block pair) = [sb 2p: idx of its
 *                 elements 8t..3, 8t+4..7][sb 2p+1: same].
 *   [1024, 1536)  signs: lane L at 1024 + 16L: words (r, h) = 2r + h: bits
 *                 7j..7j+6 = lane t's 7-bit sign field of sub-block 4h+j of
 *                 row g+8r; bits 28..31 = the 4-bit scale ls of sub-block
 *                 2t+h of that row (each lane carries a quarter of its rows'
 *                 scales; the others fetch them with one shuffle per two
 *                 sub-blocks).
 *   [1536, 1568)  d: word g = fp16 d of row g | d of row g+8 << 16.
 * Tables in shared memory (64 KiB, built per block): entry i at 256 i:
 *   bytes [0, 128): grid[i] (4 magnitudes) replicated for each of 32 lanes;
 *   bytes [128, 256), i < 128: sign field i: decode, the 8 sign bytes
 *   (0xff = negative) replicated for 16 lanes; prefill, those and their
 *   & 1 (16 bytes) replicated for 8 lanes (iq3_tables_fill says why).
 *   Lane-private copies make every table load conflict-free; an index byte
 *   becomes an address with one byte permute (idx << 8 | 4 lane), a sign
 *   field with a shift and one LOP3. */
static __constant__ uint32_t c_iq3_grid[256] = {
#include "model/iq3xxs_grid.inc"
};

__device__ __forceinline__ uint32_t sign_bytes(uint32_t nib)
{
    return ((nib & 1) ? 0xffu : 0u) | ((nib & 2) ? 0xff00u : 0u) | ((nib & 4) ? 0xff0000u : 0u) |
           ((nib & 8) ? 0xff000000u : 0u);
}

/* Fill the 64 KiB table area; the caller syncs before use.  WIDE (prefill,
 * iq3_tables_init): each sign entry is 16 bytes, m then m & 1, for 8 lanes,
 * so `(g ^ m) + (m & 1)` is +-g per byte (no carry: g >= 4) and one mma a
 * sub-block does; the decode kernel (iq3_tables_init_dec) keeps 8-byte
 * entries for 16 lanes and a second mma for the ones: it is bound by its
 * shared-memory reads, which the wide entries raise by 4 KiB a tile, where
 * prefill reads each entry once for 8 column groups (doc/cuda-kernels.md). */
template <bool WIDE> __device__ inline void iq3_tables_fill(uint8_t *tab)
{
    uint32_t *t32 = (uint32_t *)tab;
    for (int i = threadIdx.x; i < 256 * 32; i += blockDim.x)
        t32[(i >> 5) * 64 + (i & 31)] = c_iq3_grid[i >> 5];
    if (WIDE) {
        uint4 *t128 = (uint4 *)tab;
        for (int i = threadIdx.x; i < 128 * 8; i += blockDim.x) {
            const uint32_t e = (uint32_t)(i >> 3);
            const uint32_t sg = e | ((__popc(e) & 1u) << 7);
            const uint32_t m0 = sign_bytes(sg & 15), m1 = sign_bytes(sg >> 4);
            t128[e * 16 + 8 + (i & 7)] = make_uint4(m0, m1, m0 & 0x01010101u, m1 & 0x01010101u);
        }
    } else {
        uint2 *t64 = (uint2 *)tab;
        for (int i = threadIdx.x; i < 128 * 16; i += blockDim.x) {
            const uint32_t e = (uint32_t)(i >> 4);
            const uint32_t sg = e | ((__popc(e) & 1u) << 7);
            t64[e * 32 + 16 + (i & 15)] = make_uint2(sign_bytes(sg & 15), sign_bytes(sg >> 4));
        }
    }
}
__device__ inline void iq3_tables_init(uint8_t *tab) { iq3_tables_fill<true>(tab); }
__device__ inline void iq3_tables_init_dec(uint8_t *tab) { iq3_tables_fill<false>(tab); }

/* Table loads by 32-bit shared-window address (the base folds into the
 * load's address operand instead of an add per lookup). */
__device__ __forceinline__ uint32_t lds32(uint32_t a)
{
    uint32_t v;
    asm("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(a));
    return v;
}
__device__ __forceinline__ uint2 lds64(uint32_t a)
{
    uint2 v;
    asm("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(a));
    return v;
}
__device__ __forceinline__ uint4 lds128(uint32_t a)
{
    uint4 v;
    asm("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
    return v;
}

/* A tile as one lane holds it; the block-tile types (the primary template)
 * keep only where the tile is (global memory in prefill, the warp's ring
 * slot in decode) and decode from there. */
template <int TYPE> struct Raw {
    const uint8_t *p;
};
template <> struct Raw<GGML_TYPE_IQ3_XXS> {
    uint4 g0, g1, s;
    uint32_t d;
};
template <> struct Raw<GGML_TYPE_Q2_0> {
    uint4 q;
    uint2 d;
};
template <> struct Raw<GGML_TYPE_Q4_0> {
    uint4 q;
    uint2 d;
};
template <> struct Raw<GGML_TYPE_Q8_0> {
    uint4 q;
    uint32_t d;
};
template <> struct Raw<GGML_TYPE_F16> {
    uint4 h0, h1;
};
/* BF16: loaded as F16's bytes, converted to fp16 in registers */
template <> struct Raw<GGML_TYPE_BF16> : Raw<GGML_TYPE_F16> {
};

/* Where the weights are: packed tiles, or the row-major F16 matrix. */
struct Wsrc {
    const uint8_t *w;
    int rows, cols, ntk;
};

template <int TYPE> __device__ __forceinline__ void raw_load(Raw<TYPE> &r, const Wsrc &s, int R, int T, int)
{
    r.p = s.w + ((size_t)R * s.ntk + T) * geo(TYPE).tile; /* block tiles: decoded where they are */
}

template <> __device__ __forceinline__ void raw_load(Raw<GGML_TYPE_IQ3_XXS> &r, const Wsrc &s, int R, int T, int lane)
{
    const uint8_t *tile = s.w + ((size_t)R * s.ntk + T) * 1568;
    r.g0 = ldg16(tile + lane * 32);
    r.g1 = ldg16(tile + lane * 32 + 16);
    r.s = ldg16(tile + 1024 + lane * 16);
    r.d = __ldg((const uint32_t *)(tile + 1536) + (lane >> 2));
}
template <> __device__ __forceinline__ void raw_load(Raw<GGML_TYPE_Q2_0> &r, const Wsrc &s, int R, int T, int lane)
{
    const uint8_t *tile = s.w + ((size_t)R * s.ntk + T) * 576;
    r.q = ldg16(tile + lane * 16);
    r.d = __ldg((const uint2 *)(tile + 512) + (lane >> 2));
}
template <> __device__ __forceinline__ void raw_load(Raw<GGML_TYPE_Q4_0> &r, const Wsrc &s, int R, int T, int lane)
{
    const uint8_t *tile = s.w + ((size_t)R * s.ntk + T) * 576;
    r.q = ldg16(tile + lane * 16);
    r.d = __ldg((const uint2 *)(tile + 512) + (lane >> 2));
}
template <> __device__ __forceinline__ void raw_load(Raw<GGML_TYPE_Q8_0> &r, const Wsrc &s, int R, int T, int lane)
{
    const uint8_t *tile = s.w + ((size_t)R * s.ntk + T) * 544;
    r.q = ldg16(tile + lane * 16);
    r.d = __ldg((const uint32_t *)(tile + 512) + (lane >> 2));
}
/* F16: row-major; rows past the end and columns past cols read as zero. */
template <> __device__ __forceinline__ void raw_load(Raw<GGML_TYPE_F16> &r, const Wsrc &s, int R, int T, int lane)
{
    const int g = lane >> 2, t = lane & 3;
    const int k = T * 32 + 8 * t, r0 = R * 16 + g, r1 = r0 + 8;
    const uint16_t *w = (const uint16_t *)s.w;
    const uint4 z = make_uint4(0, 0, 0, 0);
    r.h0 = (k < s.cols && r0 < s.rows) ? ldg16(w + (size_t)r0 * s.cols + k) : z;
    r.h1 = (k < s.cols && r1 < s.rows) ? ldg16(w + (size_t)r1 * s.cols + k) : z;
}
/* bf16 -> f32 is a shift; f32 -> fp16 rounds (exact for |w| in fp16's
 * normal range, where weights live) */
__device__ __forceinline__ uint32_t bf2h2(uint32_t w)
{
    const __half2 h = __floats2half2_rn(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
    return *(const uint32_t *)&h;
}
__device__ __forceinline__ uint4 bf2h8(uint4 v) { return make_uint4(bf2h2(v.x), bf2h2(v.y), bf2h2(v.z), bf2h2(v.w)); }
template <> __device__ __forceinline__ void raw_load(Raw<GGML_TYPE_BF16> &r, const Wsrc &s, int R, int T, int lane)
{
    raw_load<GGML_TYPE_F16>(r, s, R, T, lane);
    r.h0 = bf2h8(r.h0);
    r.h1 = bf2h8(r.h1);
}

/* One tile times NG groups of 8 tokens, added into acc[j] (j: token group;
 * [0] row g tok 2t, [1] row g tok 2t+1, [2] row g+8 tok 2t, [3] row g+8 tok
 * 2t+1).  k0: the tile's first element and b0 its first activation block,
 * both relative to the Act. */
/* tb: the tables' shared-window address; A64: a multiple of 64 KiB and
 * 8-byte sign entries (the decode kernel's layout, iq3_tables_init_dec), so
 * the addresses need no add; otherwise 16-byte sign entries
 * (iq3_tables_init) and one mma a sub-block.  The integer sums are the same
 * either way.  N1: one token (decode at n = 1, every MoE pair): the odd mma
 * columns (tokens 2t + 1) are not accumulated; column 0's arithmetic is the
 * same. */
template <int NG, bool G, bool A64 = false, bool N1 = false>
__device__ __forceinline__ void tile_mma_iq3(const Raw<GGML_TYPE_IQ3_XXS> &r, const Act &a, int k0, int b0,
                                             float (&acc)[NG][4], uint32_t tb, int lane)
{
    const int g = lane >> 2, t = lane & 3;
    const uint32_t lane4 = (uint32_t)lane * 4 | (A64 ? tb : 0u);
    constexpr bool WIDE = !A64;
    const uint32_t soff = (WIDE ? 128u | ((uint32_t)(lane & 7) << 4) : 128u | ((uint32_t)(lane & 15) << 3)) |
                          (A64 ? tb : 0u);
    const uint32_t tadd = A64 ? 0u : tb;
    /* grid entry of index byte B of w: bytes (4 lane, idx, base 2, base 3) */
    constexpr uint32_t GSEL = A64 ? 0x7604u : 0x5504u;
    /* 2 ls + 1 of all 16 (row, sub-block) pairs of the lane's rows, one byte
     * each: lane t of the quad holds the scales of sub-blocks 2t, 2t+1
     * (nibbles: row g, row g, row g+8, row g+8); four shuffles bring them,
     * P0 = sub-blocks 0..3, P1 = 4..7.  Then E = even sub-blocks' bytes
     * (2p: row g, row g+8, 2p+2: row g, row g+8), O = the odd ones'. */
    const uint32_t L = (r.s.x >> 28) | ((r.s.y >> 28) << 4) | ((r.s.z >> 28) << 8) | ((r.s.w >> 28) << 12);
    const int q0 = lane & ~3;
    const uint32_t P0 = __byte_perm(__shfl_sync(0xffffffffu, L, q0), __shfl_sync(0xffffffffu, L, q0 + 1), 0x5410u);
    const uint32_t P1 =
        __byte_perm(__shfl_sync(0xffffffffu, L, q0 + 2), __shfl_sync(0xffffffffu, L, q0 + 3), 0x5410u);
    const uint32_t SC[4] = {(P0 & 0x0f0f0f0fu) * 2u + 0x01010101u, ((P0 >> 4) & 0x0f0f0f0fu) * 2u + 0x01010101u,
                            (P1 & 0x0f0f0f0fu) * 2u + 0x01010101u, ((P1 >> 4) & 0x0f0f0f0fu) * 2u + 0x01010101u};
    int ai[NG][4];
#pragma unroll
    for (int j = 0; j < NG; ++j)
        ai[j][0] = ai[j][1] = ai[j][2] = ai[j][3] = 0;
    const int zero[4] = {0, 0, 0, 0};
#pragma unroll
    for (int ib = 0; ib < 8; ++ib) {
        /* sub-block ib: word (ib >> 2) * 2 + (ib & 1), bytes 2 ((ib >> 1) & 1) + r */
        const uint32_t sw = SC[(ib >> 2) * 2 + (ib & 1)];
        const int hb = ((ib >> 1) & 1) * 2;
        const int s0 = (int)__byte_perm(sw, 0u, 0x4440u | (uint32_t)hb);
        const int s1 = (int)__byte_perm(sw, 0u, 0x4440u | (uint32_t)(hb + 1));
        const uint32_t gw0 = word4(r.g0, ib >> 1), gw1 = word4(r.g1, ib >> 1);
        const uint32_t bs = (uint32_t)(ib & 1) * 2;
        const uint32_t G00 = lds32(tadd + __byte_perm(gw0, lane4, GSEL | (bs << 4)));
        const uint32_t G01 = lds32(tadd + __byte_perm(gw0, lane4, GSEL | ((bs + 1) << 4)));
        const uint32_t G10 = lds32(tadd + __byte_perm(gw1, lane4, GSEL | (bs << 4)));
        const uint32_t G11 = lds32(tadd + __byte_perm(gw1, lane4, GSEL | ((bs + 1) << 4)));
        const uint32_t sw0 = word4(r.s, ib >> 2), sw1 = word4(r.s, 2 + (ib >> 2));
        const int jf = ib & 3; /* field jf of the word, moved to bits 8..14 */
        const uint32_t f0 = jf == 0 ? sw0 << 8 : jf == 1 ? sw0 << 1 : jf == 2 ? sw0 >> 6 : sw0 >> 13;
        const uint32_t f1 = jf == 0 ? sw1 << 8 : jf == 1 ? sw1 << 1 : jf == 2 ? sw1 >> 6 : sw1 >> 13;
        uint32_t ax[4], an[4];
        if constexpr (WIDE) {
            const uint4 M0 = lds128(tadd + ((f0 & 0x7f00u) | soff));
            const uint4 M1 = lds128(tadd + ((f1 & 0x7f00u) | soff));
            /* g ^ m is -g - 1 where m = 0xff; + (m & 1) makes it -g */
            ax[0] = (G00 ^ M0.x) + M0.z, ax[1] = (G10 ^ M1.x) + M1.z;
            ax[2] = (G01 ^ M0.y) + M0.w, ax[3] = (G11 ^ M1.y) + M1.w;
        } else {
            const uint2 M0 = lds64(tadd + ((f0 & 0x7f00u) | soff));
            const uint2 M1 = lds64(tadd + ((f1 & 0x7f00u) | soff));
            /* g ^ m is -g - 1 where m = 0xff: the second mma adds the 1s back */
            ax[0] = G00 ^ M0.x, ax[1] = G10 ^ M1.x, ax[2] = G01 ^ M0.y, ax[3] = G11 ^ M1.y;
            an[0] = M0.x & 0x01010101u, an[1] = M1.x & 0x01010101u;
            an[2] = M0.y & 0x01010101u, an[3] = M1.y & 0x01010101u;
        }
#pragma unroll
        for (int j = 0; j < NG; ++j) {
            const uint2 b = ld8<G>(a.q + (8 * j + g) * a.cs + k0 + 32 * ib + 8 * t);
            int c[4];
            mma_s8(c, ax, b, zero);
            if constexpr (!WIDE)
                mma_s8(c, an, b, c);
            ai[j][0] += s0 * c[0];
            ai[j][2] += s1 * c[2];
            if constexpr (!N1) {
                ai[j][1] += s0 * c[1];
                ai[j][3] += s1 * c[3];
            }
        }
    }
    const float dw0 = h2f(r.d & 0xffffu) * 0.25f, dw1 = h2f(r.d >> 16) * 0.25f;
#pragma unroll
    for (int j = 0; j < NG; ++j) {
        const float2 dx = ldf2<G>(a.d + b0 * a.bs + 8 * j + 2 * t);
        acc[j][0] = __fmaf_rn(__fmul_rn(dw0, dx.x), (float)ai[j][0], acc[j][0]);
        acc[j][2] = __fmaf_rn(__fmul_rn(dw1, dx.x), (float)ai[j][2], acc[j][2]);
        if constexpr (!N1) {
            acc[j][1] = __fmaf_rn(__fmul_rn(dw0, dx.y), (float)ai[j][1], acc[j][1]);
            acc[j][3] = __fmaf_rn(__fmul_rn(dw1, dx.y), (float)ai[j][3], acc[j][3]);
        }
    }
}

/* tab: the tables (generic pointer to shared memory) */
template <int NG, bool G>
__device__ __forceinline__ void tile_mma(const Raw<GGML_TYPE_IQ3_XXS> &r, const Act &a, int k0, int b0,
                                         float (&acc)[NG][4], const uint8_t *tab, int lane)
{
    tile_mma_iq3<NG, G>(r, a, k0, b0, acc, (uint32_t)__cvta_generic_to_shared(tab), lane);
}

/* Scale a biased block dot (bits of 1.5*2^23 + dot) into acc; N1: column
 * 2t only (one token). */
template <int NG, bool G, bool N1 = false>
__device__ __forceinline__ void acc_block(float (&acc)[NG][4], int j, const int (&c)[4], float dw0, float dw1,
                                          const Act &a, int blk, int t)
{
    const float2 dx = ldf2<G>(a.d + blk * a.bs + 8 * j + 2 * t);
    acc[j][0] = __fmaf_rn(__fmul_rn(dw0, dx.x), __int_as_float(c[0]) - BIAS_F, acc[j][0]);
    acc[j][2] = __fmaf_rn(__fmul_rn(dw1, dx.x), __int_as_float(c[2]) - BIAS_F, acc[j][2]);
    if constexpr (!N1) {
        acc[j][1] = __fmaf_rn(__fmul_rn(dw0, dx.y), __int_as_float(c[1]) - BIAS_F, acc[j][1]);
        acc[j][3] = __fmaf_rn(__fmul_rn(dw1, dx.y), __int_as_float(c[3]) - BIAS_F, acc[j][3]);
    }
}

/* Q2_0 tile (576 bytes = 16 rows x 2 blocks x 18): [0, 512) lane L at 16L,
 * words (b, r) = 2b + r (block b, row g+8r): byte i = codes of elements
 * 8t+i | 8t+4+i << 2 | 32+8t+i << 4 | 32+8t+4+i << 6 (two bits each), so
 * shifts by 0/2/4/6 and one mask give the four u8x4 A words; [512, 576)
 * lane quad g at 512 + 8g: fp16 d of (b, r) = 2b + r. */
template <int NG, bool G, bool N1 = false>
__device__ __forceinline__ void tile_mma(const Raw<GGML_TYPE_Q2_0> &r, const Act &a, int k0, int b0,
                                         float (&acc)[NG][4], const uint8_t *, int lane)
{
    const int g = lane >> 2, t = lane & 3;
    const uint32_t M = 0x03030303u;
#pragma unroll
    for (int b = 0; b < 2; ++b) {
        const uint32_t w0 = word4(r.q, 2 * b), w1 = word4(r.q, 2 * b + 1);
        const uint32_t A0[4] = {w0 & M, w1 & M, (w0 >> 2) & M, (w1 >> 2) & M};
        const uint32_t A1[4] = {(w0 >> 4) & M, (w1 >> 4) & M, (w0 >> 6) & M, (w1 >> 6) & M};
        const uint32_t dd = b == 0 ? r.d.x : r.d.y;
        const float dw0 = h2f(dd & 0xffffu), dw1 = h2f(dd >> 16);
#pragma unroll
        for (int j = 0; j < NG; ++j) {
            const int2 xs = ldi2<G>(a.s + (b0 + b) * a.bs + 8 * j + 2 * t);
            const int cin[4] = {BIAS_I - xs.x, BIAS_I - xs.y, BIAS_I - xs.x, BIAS_I - xs.y};
            const int8_t *qp = a.q + (8 * j + g) * a.cs + k0 + 64 * b + 8 * t;
            int c[4];
            mma_u8(c, A0, ld8<G>(qp), cin);
            mma_u8(c, A1, ld8<G>(qp + 32), c);
            acc_block<NG, G, N1>(acc, j, c, dw0, dw1, a, b0 + b, t);
        }
    }
}

/* Q4_0 tile (576 bytes = 16 rows x 2 blocks x 18): like Q2_0 with nibbles:
 * byte i of word (b, r) = element 8t+i | element 8t+4+i << 4. */
template <int NG, bool G>
__device__ __forceinline__ void tile_mma(const Raw<GGML_TYPE_Q4_0> &r, const Act &a, int k0, int b0,
                                         float (&acc)[NG][4], const uint8_t *, int lane)
{
    const int g = lane >> 2, t = lane & 3;
    const uint32_t M = 0x0f0f0f0fu;
#pragma unroll
    for (int b = 0; b < 2; ++b) {
        const uint32_t w0 = word4(r.q, 2 * b), w1 = word4(r.q, 2 * b + 1);
        const uint32_t A[4] = {w0 & M, w1 & M, (w0 >> 4) & M, (w1 >> 4) & M};
        const uint32_t dd = b == 0 ? r.d.x : r.d.y;
        const float dw0 = h2f(dd & 0xffffu), dw1 = h2f(dd >> 16);
#pragma unroll
        for (int j = 0; j < NG; ++j) {
            const int2 xs = ldi2<G>(a.s + (b0 + b) * a.bs + 8 * j + 2 * t);
            const int cin[4] = {BIAS_I - 8 * xs.x, BIAS_I - 8 * xs.y, BIAS_I - 8 * xs.x, BIAS_I - 8 * xs.y};
            int c[4];
            mma_u8(c, A, ld8<G>(a.q + (8 * j + g) * a.cs + k0 + 32 * b + 8 * t), cin);
            acc_block<NG, G>(acc, j, c, dw0, dw1, a, b0 + b, t);
        }
    }
}

/* Q8_0 tile (544 bytes = 16 rows x 34): [0, 512) lane L at 16L: the four A
 * words as they go to the mma (row g 8t..8t+3, row g+8 8t..8t+3, row g
 * 8t+4..8t+7, row g+8 8t+4..8t+7); [512, 544) word g = d(g) | d(g+8) << 16. */
template <int NG, bool G>
__device__ __forceinline__ void tile_mma(const Raw<GGML_TYPE_Q8_0> &r, const Act &a, int k0, int b0,
                                         float (&acc)[NG][4], const uint8_t *, int lane)
{
    const int g = lane >> 2, t = lane & 3;
    const uint32_t A[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
    const float dw0 = h2f(r.d & 0xffffu), dw1 = h2f(r.d >> 16);
    const int cin[4] = {BIAS_I, BIAS_I, BIAS_I, BIAS_I};
#pragma unroll
    for (int j = 0; j < NG; ++j) {
        int c[4];
        mma_s8(c, A, ld8<G>(a.q + (8 * j + g) * a.cs + k0 + 8 * t), cin);
        acc_block<NG, G>(acc, j, c, dw0, dw1, a, b0, t);
    }
}

/* F16 (row-major): two m16n8k16 steps per 32 columns, lane t's slots holding
 * elements 8t..8t+3, then 8t+4..8t+7 (one 16-byte activation load). */
template <int NG, bool G>
__device__ __forceinline__ void tile_mma(const Raw<GGML_TYPE_F16> &r, const Act &a, int k0, int,
                                         float (&acc)[NG][4], const uint8_t *, int lane)
{
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < NG; ++j) {
        const uint4 b = ldh16<G>(a.h + (8 * j + g) * a.cs + k0 + 8 * t);
        mma_f16(acc[j], r.h0.x, r.h1.x, r.h0.y, r.h1.y, b.x, b.y);
        mma_f16(acc[j], r.h0.z, r.h1.z, r.h0.w, r.h1.w, b.z, b.w);
    }
}

/* Block tiles (wblocks.cuh): per 32-column chunk, lane 4g + t decodes
 * elements 8t..8t+7 of rows g and g+8 from their row chunks, rounds them to
 * fp16 and runs F16's two m16n8k16 steps: the same slots, the same
 * activations, the same accumulation order for every n. */
__device__ __forceinline__ uint4 f8h(const float (&v)[8])
{
    uint4 r;
    __half2 h;
    h = __floats2half2_rn(v[0], v[1]);
    r.x = *(const uint32_t *)&h;
    h = __floats2half2_rn(v[2], v[3]);
    r.y = *(const uint32_t *)&h;
    h = __floats2half2_rn(v[4], v[5]);
    r.z = *(const uint32_t *)&h;
    h = __floats2half2_rn(v[6], v[7]);
    r.w = *(const uint32_t *)&h;
    return r;
}
template <int TYPE, int NG, bool G>
__device__ __forceinline__ void tile_mma_blk(const Raw<TYPE> &r, const Act &a, int k0, float (&acc)[NG][4], int lane)
{
    constexpr int RB = wb::rb(TYPE);
    const int g = lane >> 2, t = lane & 3;
    const uint8_t *c0 = r.p + g * RB, *c1 = r.p + (g + 8) * RB;
#pragma unroll 2
    for (int ch = 0; ch < 8; ++ch) {
        uint4 h0, h1;
        if constexpr (wb::H2<TYPE>::on) { /* half2 decode (wblocks.cuh) */
            h0 = wb::dec8h<TYPE>(c0, 32 * ch + 8 * t);
            h1 = wb::dec8h<TYPE>(c1, 32 * ch + 8 * t);
        } else {
            float v[8];
            wb::dec8<TYPE>(c0, 32 * ch + 8 * t, v);
            h0 = f8h(v);
            wb::dec8<TYPE>(c1, 32 * ch + 8 * t, v);
            h1 = f8h(v);
        }
#pragma unroll
        for (int j = 0; j < NG; ++j) {
            const uint4 b = ldh16<G>(a.h + (8 * j + g) * a.cs + k0 + 32 * ch + 8 * t);
            mma_f16(acc[j], h0.x, h1.x, h0.y, h1.y, b.x, b.y);
            mma_f16(acc[j], h0.z, h1.z, h0.w, h1.w, b.z, b.w);
        }
    }
}
/* The same for the types whose lane fields are read once per tile
 * (wblocks.cuh, Row: Q3_K, IQ3_S, IQ2_S): the chunk loop unrolled, so the
 * fields stay in registers. */
template <int TYPE, int NG, bool G>
__device__ __forceinline__ void tile_mma_rows(const Raw<TYPE> &r, const Act &a, int k0, float (&acc)[NG][4],
                                              const uint8_t *grid, int lane)
{
    constexpr int RB = wb::rb(TYPE);
    const int g = lane >> 2, t = lane & 3;
    wb::Row<TYPE> r0, r1;
    r0.load(r.p + g * RB, t);
    r1.load(r.p + (g + 8) * RB, t);
    wb::set_grid(r0, grid, lane); /* the IQ types' grid: the kernel's copy in shared memory (wrows.cuh) */
    wb::set_grid(r1, grid, lane);
#pragma unroll
    for (int ch = 0; ch < 8; ++ch) {
        const uint4 h0 = r0.dec(ch), h1 = r1.dec(ch);
#pragma unroll
        for (int j = 0; j < NG; ++j) {
            const uint4 b = ldh16<G>(a.h + (8 * j + g) * a.cs + k0 + 32 * ch + 8 * t);
            mma_f16(acc[j], h0.x, h1.x, h0.y, h1.y, b.x, b.y);
            mma_f16(acc[j], h0.z, h1.z, h0.w, h1.w, b.z, b.w);
        }
    }
}
/* One tile of any type into acc (what the kernels call).  tab: the IQ3_XXS
 * tables, or the IQ2s' and IQ3_S's grid (wb::grid_init), in shared memory. */
template <int TYPE, int NG, bool G>
__device__ __forceinline__ void tile_any(const Raw<TYPE> &r, const Act &a, int k0, int b0, float (&acc)[NG][4],
                                         const uint8_t *tab, int lane)
{
    if constexpr (is_blk(TYPE) && wb::Row<TYPE>::whole)
        tile_mma_rows<TYPE, NG, G>(r, a, k0, acc, tab, lane);
    else if constexpr (is_blk(TYPE))
        tile_mma_blk<TYPE, NG, G>(r, a, k0, acc, lane);
    else
        tile_mma<NG, G>(r, a, k0, b0, acc, tab, lane);
}

/* Prefetch depth (tiles in flight per warp): about 3 KiB per warp. */
template <int TYPE> struct Depth { static constexpr int v = 4; };
template <> struct Depth<GGML_TYPE_IQ3_XXS> { static constexpr int v = 2; };

/* Run tiles [t0, t1) of m-tile R through tile_mma, PF tiles ahead in
 * registers.  k and activation-block offsets are relative to tile kbase. */
template <int TYPE, int NG, bool G>
__device__ __forceinline__ void run_tiles(const Wsrc &ws, int R, int t0, int t1, int kbase, const Act &a,
                                          float (&acc)[NG][4], const uint8_t *tab, int lane)
{
    constexpr int PF = Depth<TYPE>::v;
    const Geo gm = geo(TYPE);
    Raw<TYPE> buf[PF];
#pragma unroll
    for (int i = 0; i < PF; ++i)
        if (t0 + i < t1)
            raw_load<TYPE>(buf[i], ws, R, t0 + i, lane);
    for (int T = t0; T < t1; T += PF) {
#pragma unroll
        for (int i = 0; i < PF; ++i) {
            if (T + i < t1) {
                const Raw<TYPE> cur = buf[i];
                if (T + i + PF < t1)
                    raw_load<TYPE>(buf[i], ws, R, T + i + PF, lane);
                const int k0 = (T + i - kbase) * gm.kt;
                tile_any<TYPE, NG, G>(cur, a, k0, k0 / gm.xb, acc, tab, lane);
            }
        }
    }
}

/* ---- decode: tiles streamed through a shared-memory ring ------------------
 * Decode is bound by how many bytes are in flight (Little's law: ~4.5 TB/s
 * x ~2 us of loaded latency = ~70 KiB per SM), more than registers can hold
 * next to the decoders.  So each warp keeps D tiles in flight with cp.async
 * (16-byte copies straight into shared memory, no registers held), each lane
 * copying exactly the pieces it will read back, into lane-private slots laid
 * out piece-major so the read-back LDS.128s are conflict-free; no barrier is
 * needed, only cp.async.wait_group.  The bytes and the decoders are the same
 * as prefill's register path: the arithmetic does not change. */
__device__ __forceinline__ void cp16(uint32_t dst, const void *src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp16z(uint32_t dst, const void *src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp8(uint32_t dst, const void *src)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp4(uint32_t dst, const void *src)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

/* Ring geometry per type: slot bytes (32 lanes' pieces) and depth.  Block
 * tiles: a slot is the whole tile, as deep as fits in 8 KiB per warp less
 * the warp's share of the type's grid (2..8; the activations, fp16, take up
 * to 70 KiB of the block, so the block still fits with IQ2_S's 64 KiB). */
constexpr int blk_depth(int type)
{
    const int d = (8192 - wb::grid_bytes(type) / 32) / geo(type).tile;
    return d < 2 ? 2 : d > 8 ? 8 : d;
}
template <int TYPE> struct Ring {
    static constexpr int SLOT = geo(TYPE).tile, D = blk_depth(TYPE);
};
template <> struct Ring<GGML_TYPE_IQ3_XXS> { static constexpr int SLOT = 1664, D = 4; };
template <> struct Ring<GGML_TYPE_Q2_0> { static constexpr int SLOT = 768, D = 12; };
template <> struct Ring<GGML_TYPE_Q4_0> { static constexpr int SLOT = 768, D = 12; };
template <> struct Ring<GGML_TYPE_Q8_0> { static constexpr int SLOT = 640, D = 12; };
template <> struct Ring<GGML_TYPE_F16> { static constexpr int SLOT = 1024, D = 4; };
template <> struct Ring<GGML_TYPE_BF16> : Ring<GGML_TYPE_F16> {};

/* Block tiles: the warp copies the whole tile into the slot, 16 bytes a
 * lane at a time, and every lane decodes from the slot, so the reads of
 * other lanes' copies need a __syncwarp (run_tiles_ring). */
template <int TYPE> __device__ __forceinline__ void ring_issue(uint32_t slot, const Wsrc &s, int R, int T, int lane)
{
    constexpr int TB = geo(TYPE).tile;
    const uint8_t *tile = s.w + ((size_t)R * s.ntk + T) * TB;
#pragma unroll
    for (int i = lane; i < TB / 16; i += 32)
        cp16(slot + i * 16, tile + i * 16);
}
template <int TYPE> __device__ __forceinline__ void ring_read(Raw<TYPE> &r, const uint8_t *slot, int)
{
    r.p = slot;
}

template <> __device__ __forceinline__ void ring_issue<GGML_TYPE_IQ3_XXS>(uint32_t slot, const Wsrc &s, int R, int T, int lane)
{
    const uint8_t *tile = s.w + ((size_t)R * s.ntk + T) * 1568;
    cp16(slot + lane * 16, tile + lane * 32);
    cp16(slot + 512 + lane * 16, tile + lane * 32 + 16);
    cp16(slot + 1024 + lane * 16, tile + 1024 + lane * 16);
    cp4(slot + 1536 + lane * 4, tile + 1536 + (lane >> 2) * 4);
}
template <> __device__ __forceinline__ void ring_read(Raw<GGML_TYPE_IQ3_XXS> &r, const uint8_t *slot, int lane)
{
    r.g0 = *(const uint4 *)(slot + lane * 16);
    r.g1 = *(const uint4 *)(slot + 512 + lane * 16);
    r.s = *(const uint4 *)(slot + 1024 + lane * 16);
    r.d = *(const uint32_t *)(slot + 1536 + lane * 4);
}
template <int TB> __device__ __forceinline__ void ring_issue_q(uint32_t slot, const Wsrc &s, int R, int T, int lane)
{
    const uint8_t *tile = s.w + ((size_t)R * s.ntk + T) * TB;
    cp16(slot + lane * 16, tile + lane * 16);
    if (TB == 576)
        cp8(slot + 512 + lane * 8, tile + 512 + (lane >> 2) * 8);
    else
        cp4(slot + 512 + lane * 4, tile + 512 + (lane >> 2) * 4);
}
template <> __device__ __forceinline__ void ring_issue<GGML_TYPE_Q2_0>(uint32_t slot, const Wsrc &s, int R, int T, int lane)
{
    ring_issue_q<576>(slot, s, R, T, lane);
}
template <> __device__ __forceinline__ void ring_issue<GGML_TYPE_Q4_0>(uint32_t slot, const Wsrc &s, int R, int T, int lane)
{
    ring_issue_q<576>(slot, s, R, T, lane);
}
template <> __device__ __forceinline__ void ring_issue<GGML_TYPE_Q8_0>(uint32_t slot, const Wsrc &s, int R, int T, int lane)
{
    ring_issue_q<544>(slot, s, R, T, lane);
}
template <> __device__ __forceinline__ void ring_read(Raw<GGML_TYPE_Q2_0> &r, const uint8_t *slot, int lane)
{
    r.q = *(const uint4 *)(slot + lane * 16);
    r.d = *(const uint2 *)(slot + 512 + lane * 8);
}
template <> __device__ __forceinline__ void ring_read(Raw<GGML_TYPE_Q4_0> &r, const uint8_t *slot, int lane)
{
    r.q = *(const uint4 *)(slot + lane * 16);
    r.d = *(const uint2 *)(slot + 512 + lane * 8);
}
template <> __device__ __forceinline__ void ring_read(Raw<GGML_TYPE_Q8_0> &r, const uint8_t *slot, int lane)
{
    r.q = *(const uint4 *)(slot + lane * 16);
    r.d = *(const uint32_t *)(slot + 512 + lane * 4);
}
template <> __device__ __forceinline__ void ring_issue<GGML_TYPE_F16>(uint32_t slot, const Wsrc &s, int R, int T, int lane)
{
    const int g = lane >> 2, t = lane & 3;
    const int k = T * 32 + 8 * t, r0 = R * 16 + g, r1 = r0 + 8;
    const uint16_t *w = (const uint16_t *)s.w;
    const bool v0 = k < s.cols && r0 < s.rows, v1 = k < s.cols && r1 < s.rows;
    cp16z(slot + lane * 16, v0 ? w + (size_t)r0 * s.cols + k : w, v0);
    cp16z(slot + 512 + lane * 16, v1 ? w + (size_t)r1 * s.cols + k : w, v1);
}
template <> __device__ __forceinline__ void ring_read(Raw<GGML_TYPE_F16> &r, const uint8_t *slot, int lane)
{
    r.h0 = *(const uint4 *)(slot + lane * 16);
    r.h1 = *(const uint4 *)(slot + 512 + lane * 16);
}
template <> __device__ __forceinline__ void ring_issue<GGML_TYPE_BF16>(uint32_t slot, const Wsrc &s, int R, int T, int lane)
{
    ring_issue<GGML_TYPE_F16>(slot, s, R, T, lane);
}
template <> __device__ __forceinline__ void ring_read(Raw<GGML_TYPE_BF16> &r, const uint8_t *slot, int lane)
{
    ring_read<GGML_TYPE_F16>(r, slot, lane);
    r.h0 = bf2h8(r.h0);
    r.h1 = bf2h8(r.h1);
}

/* Issue the copies of a warp's first D - 1 tiles into its ring.  The decode
 * kernel calls this before it builds its tables and stages the activations,
 * so the first tiles' DRAM latency overlaps that work. */
template <int TYPE>
__device__ __forceinline__ void ring_prime(const Wsrc &ws, int R, int t0, int t1, uint8_t *ring, int lane)
{
    constexpr int D = Ring<TYPE>::D, SLOT = Ring<TYPE>::SLOT;
    const uint32_t rs = (uint32_t)__cvta_generic_to_shared(ring);
#pragma unroll
    for (int i = 0; i < D - 1; ++i) {
        if (t0 + i < t1)
            ring_issue<TYPE>(rs + i * SLOT, ws, R, t0 + i, lane);
        cp_commit();
    }
}

/* run_tiles with the loads going through this warp's ring (decode, NG = 1);
 * primed: ring_prime already issued the first tiles. */
template <int TYPE, bool N1 = false>
__device__ __forceinline__ void run_tiles_ring(const Wsrc &ws, int R, int t0, int t1, int kbase, const Act &a,
                                               float (&acc)[1][4], const uint8_t *tab, uint8_t *ring, int lane,
                                               bool primed)
{
    constexpr int D = Ring<TYPE>::D, SLOT = Ring<TYPE>::SLOT;
    constexpr Geo gm = geo(TYPE);
    const uint32_t rs = (uint32_t)__cvta_generic_to_shared(ring);
    const uint32_t tb = (uint32_t)__cvta_generic_to_shared(tab); /* IQ3_XXS: 64 KiB aligned (MvLayout) */
    if (!primed)
        ring_prime<TYPE>(ws, R, t0, t1, ring, lane);
    if constexpr (is_blk(TYPE)) {
        /* Block tiles: one tile's code in the loop, not D.  A decode step
         * runs a mix's kernels once each per layer, after ~100 MB of
         * weights went through L2, so their code is likely fetched cold
         * each time (the kernel bench replays one kernel: warm); their D
         * unrolled tiles were 29-39 KiB of SASS, and what ncu (each kernel
         * alone) timed over the kernel bench grew with it (4d027b6: Q3_K
         * +3 us, IQ3_S +5.6, the mixed stack +8.4).  Now ~8 KiB, fewer
         * registers (IQ3_S 104 -> 77, Q3_K 103 -> 63).  The slot is
         * (tt - t0) mod D as in the unrolled loop: same order, same bits. */
        int i = 0;
#pragma unroll 1
        for (int tt = t0; tt < t1; ++tt) {
            __syncwarp(); /* every lane is done with the slot refilled next */
            if (tt + D - 1 < t1)
                ring_issue<TYPE>(rs + (i == 0 ? D - 1 : i - 1) * SLOT, ws, R, tt + D - 1, lane);
            cp_commit();
            cp_wait<D - 1>();
            __syncwarp(); /* the other lanes' copies of this tile are in */
            Raw<TYPE> cur;
            ring_read<TYPE>(cur, ring + i * SLOT, lane);
            const int k0 = (tt - kbase) * gm.kt;
            tile_any<TYPE, 1, false>(cur, a, k0, k0 / gm.xb, acc, tab, lane);
            i = i + 1 == D ? 0 : i + 1;
        }
    } else {
        for (int T = t0; T < t1; T += D) {
#pragma unroll
            for (int i = 0; i < D; ++i) {
                const int tt = T + i;
                if (tt < t1) {
                    if (tt + D - 1 < t1)
                        ring_issue<TYPE>(rs + ((i + D - 1) % D) * SLOT, ws, R, tt + D - 1, lane);
                    cp_commit();
                    cp_wait<D - 1>();
                    Raw<TYPE> cur;
                    ring_read<TYPE>(cur, ring + i * SLOT, lane);
                    const int k0 = (tt - kbase) * gm.kt;
                    if constexpr (TYPE == GGML_TYPE_IQ3_XXS)
                        tile_mma_iq3<1, false, true, N1>(cur, a, k0, k0 / gm.xb, acc, tb, lane);
                    else if constexpr (TYPE == GGML_TYPE_Q2_0)
                        tile_mma<1, false, N1>(cur, a, k0, k0 / gm.xb, acc, tab, lane);
                    else
                        tile_any<TYPE, 1, false>(cur, a, k0, k0 / gm.xb, acc, tab, lane);
                }
            }
        }
    }
    cp_wait<0>();
}

/* ---- shared-memory layout of the decode kernel (host and device) --------
 * IQ3_XXS: the tables start at a shared-window address that is a multiple
 * of 64 KiB, so a lookup's address is one byte permute of the index byte
 * into (table base | 4 lane), with no add (tile_mma_iq3<.., true>); the
 * activations and the first warps' rings fill the space before them (the
 * dynamic shared memory starts `smem_lo` bytes into the window: the
 * reserved 1 KiB on sm_90), the other rings follow them. */
struct MvLayout {
    int xstride;            /* bytes (int8) or halves (F16) between tokens */
    int off_xq, off_dx, off_xs, off_tab, off_ring, ring_warp, ring_split, off_ring2, bytes;
};
inline int ring_bytes_per_warp(int type)
{
    switch (type) {
    case GGML_TYPE_IQ3_XXS: return Ring<GGML_TYPE_IQ3_XXS>::SLOT * Ring<GGML_TYPE_IQ3_XXS>::D;
    case GGML_TYPE_Q2_0: return Ring<GGML_TYPE_Q2_0>::SLOT * Ring<GGML_TYPE_Q2_0>::D;
    case GGML_TYPE_Q4_0: return Ring<GGML_TYPE_Q4_0>::SLOT * Ring<GGML_TYPE_Q4_0>::D;
    case GGML_TYPE_Q8_0: return Ring<GGML_TYPE_Q8_0>::SLOT * Ring<GGML_TYPE_Q8_0>::D;
    case GGML_TYPE_F16:
    case GGML_TYPE_BF16: return Ring<GGML_TYPE_F16>::SLOT * Ring<GGML_TYPE_F16>::D;
    default: return is_blk(type) ? geo(type).tile * blk_depth(type) : 0;
    }
}
/* ring_warp: each warp's ring bytes, 0 for the decode kernel's
 * (ring_bytes_per_warp); tokens: the activation rows held (the one-token
 * persistent chain holds 1, which leaves room for deeper rings; the block
 * scales keep their MV_COLS stride). */
inline MvLayout mv_layout(int type, const Plan &p, int smem_lo, int ring_warp = 0, int tokens = MV_COLS)
{
    const Geo gm = geo(type);
    const int seg_k = p.tps * gm.kt;
    MvLayout l{};
    /* the table hole [off_tab, off_tab + hole) */
    const int hole = type == GGML_TYPE_IQ3_XXS ? TAB_BYTES : 0;
    l.off_tab = hole ? (TAB_BYTES - smem_lo % TAB_BYTES) % TAB_BYTES : 0;
    /* the IQ2s' and IQ3_S's grid first, at 0 (the other types have none) */
    int off = (l.off_tab == 0 ? hole : 0) + wb::grid_bytes(type);
    int act = 0;
    if (gm.i8) {
        /* stride = 32 (mod 128) bytes: a warp's 8-byte B loads (tokens g,
         * offsets 8t) hit 32 distinct banks */
        l.xstride = (seg_k + 127) / 128 * 128 + 32;
        act = tokens * l.xstride + 2 * MV_COLS * (seg_k / gm.xb) * 4;
    } else {
        /* 64 (mod 128) bytes: conflict-free 16-byte loads */
        l.xstride = (seg_k + 63) / 64 * 64 + 32;
        act = tokens * l.xstride * 2;
    }
    if (hole && off < l.off_tab + hole && off + act > l.off_tab)
        off = l.off_tab + hole; /* the activations do not fit before the tables */
    l.off_xq = off;
    if (gm.i8) {
        const int nb = seg_k / gm.xb;
        l.off_dx = off + tokens * l.xstride;
        l.off_xs = l.off_dx + MV_COLS * nb * 4;
    } else {
        l.off_dx = l.off_xs = off + tokens * l.xstride * 2;
    }
    off = (off + act + 15) / 16 * 16;
    l.ring_warp = ring_warp ? ring_warp : ring_bytes_per_warp(type);
    l.off_ring = off;
    l.ring_split = MV_WARPS;
    if (hole && off < l.off_tab + hole) { /* rings of warps [0, split) before the tables */
        const int fit = off <= l.off_tab ? (l.off_tab - off) / l.ring_warp : 0;
        l.ring_split = fit < MV_WARPS ? fit : MV_WARPS;
    }
    l.off_ring2 = l.ring_split < MV_WARPS ? l.off_tab + hole : off;
    l.bytes = l.off_ring2 + (MV_WARPS - l.ring_split) * l.ring_warp;
    if (l.ring_split == MV_WARPS)
        l.bytes = off + MV_WARPS * l.ring_warp;
    if (hole && l.bytes < l.off_tab + hole)
        l.bytes = l.off_tab + hole;
    return l;
}
/* Warp w's ring (device and host). */
__host__ __device__ inline int mv_ring_off(const MvLayout &l, int w)
{
    return w < l.ring_split ? l.off_ring + w * l.ring_warp : l.off_ring2 + (w - l.ring_split) * l.ring_warp;
}

/* How many blocks (nseg == 1) or clusters of nseg blocks fit on the current
 * device at once; also raises the kernel's shared-memory limit.  Cached
 * (weights.cu), so safe to call while a graph is being captured once a
 * first call outside the capture has filled the cache. */
int launch_capacity(const void *fn, int threads, size_t smem, int nseg, int *out, strata_error *err);

/* F32 weights (any n): plain f32 FMA, one warp per row, the same order for
 * every n (matvec.cu). */
int f32_matmul(const float *w, const int32_t *expert, size_t expert_bytes, int64_t rows, int64_t cols,
               const float *x, int64_t n, float *y, cudaStream_t stream, strata_error *err);

} /* namespace wt */

#endif
